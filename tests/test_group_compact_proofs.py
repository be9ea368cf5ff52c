"""Independent checks of the group / irrep / proof code of group_compact_proofs (no page yet)."""

import itertools
import math

import numpy as np
import pytest

from engine import group_compact_proofs as g


@pytest.mark.parametrize("n", [3, 4, 5])
def test_group_axioms_and_size(n):
    G = g.symmetric_group(n)
    m = math.factorial(n)
    assert G.order == m and G.table.shape == (m, m)
    assert G.elements[0] == tuple(range(n))
    e = 0
    assert (G.table[e] == np.arange(m)).all() and (G.table[:, e] == np.arange(m)).all()
    assert (G.table[np.arange(m), G.inv] == e).all()
    for row in G.table:  # Latin square: each row is a permutation
        assert sorted(row) == list(range(m))
    rng = np.random.default_rng(0)
    a, b, c = rng.integers(0, m, (3, 500))
    assert (G.table[G.table[a, b], c] == G.table[a, G.table[b, c]]).all()
    # composition agrees with composing permutations as functions, checked by hand
    for p, q in itertools.islice(itertools.product(G.elements, repeat=2), 200):
        r = G.elements[G.table[G.elements.index(p), G.elements.index(q)]]
        assert all(r[i] == p[q[i]] for i in range(n))


def _hook_dim(shape):
    n = sum(shape)
    conj = [sum(1 for r in shape if r > c) for c in range(shape[0])]
    hooks = 1
    for i, r in enumerate(shape):
        for j in range(r):
            hooks *= (r - j - 1) + (conj[j] - i - 1) + 1
    return math.factorial(n) // hooks


@pytest.mark.parametrize("n", [3, 4, 5])
def test_irreps_are_orthogonal_homomorphisms(n):
    G = g.symmetric_group(n)
    reps = g.irreps(n)
    assert sum(r.dim ** 2 for r in reps) == G.order
    for r in reps:
        assert r.dim == _hook_dim(r.shape)  # hook length formula, independent of Young's form
        M = r.mats
        assert np.allclose(np.einsum("aij,bjk->abik", M, M), M[G.table], atol=1e-10)
        assert np.allclose(np.einsum("aji,ajk->aik", M, M), np.eye(r.dim), atol=1e-10)
    # character orthogonality over the group
    X = np.array([np.trace(r.mats, axis1=1, axis2=2) for r in reps])
    assert np.allclose(X @ X.T / G.order, np.eye(len(reps)), atol=1e-10)


def test_s4_character_table_known_values():
    # textbook S4 table, classes: e, (12), (12)(34), (123), (1234)
    known = {(4,): [1, 1, 1, 1, 1], (1, 1, 1, 1): [1, -1, 1, 1, -1], (2, 2): [2, 0, 2, -1, 0],
             (3, 1): [3, 1, -1, 0, -1], (2, 1, 1): [3, -1, -1, 0, 1]}
    types = [(1, 1, 1, 1), (2, 1, 1), (2, 2), (3, 1), (4,)]
    G = g.symmetric_group(4)
    for r in g.irreps(4):
        got = [r.chars[G.classes.index(t)] for t in types]
        assert np.allclose(got, known[r.shape]), r.shape


@pytest.mark.parametrize("n,hidden", [(3, 16), (4, 24)])
def test_bound_never_exceeds_true_margin(n, hidden):
    G = g.symmetric_group(n)
    rng = np.random.default_rng(1)
    for scale in (0.3, 1.0):
        w = g.Weights(rng.normal(size=(G.order, hidden)) * scale, rng.normal(size=(G.order, hidden)) * scale,
                      rng.normal(size=(G.order, hidden)), rng.normal(size=G.order) * 0.1)
        acc, margin = g.brute_force(w, G)
        for tau in (0.0, 0.1, 0.5):
            for nuclear in (True, False):
                p = g.compact_bound(w, G, tau=tau, nuclear=nuclear)
                assert (p.margin_bound <= margin + 1e-9).all()
                assert p.accuracy_bound <= acc


def test_brute_force_matches_direct_forward():
    g.symmetric_group(3)
    rng = np.random.default_rng(2)
    w = g.Weights(*(rng.normal(size=(6, 5)) for _ in range(3)), rng.normal(size=6))
    Z = g.all_logits(w)
    for a in range(6):
        for b in range(6):
            z = w.U @ np.maximum(w.L[a] + w.R[b], 0) + w.beta
            assert np.allclose(Z[a, b], z)
