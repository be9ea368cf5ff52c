"""Bilinear MLP engine: claims at the default config and checks against independent computations."""

import numpy as np
import pytest
import torch

from engine import bilinear_mlp as eng


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_pass_at_default(default_result):
    claims = eng.claims(default_result)
    assert len(claims) == 5
    failed = [c.describe() for c in claims if not c.passed]
    assert not failed, failed


def test_untrained_spectrum_is_not_low_rank(default_result):
    # the energy claim must separate trained from untrained weights
    assert default_result.metrics["energy_top10_init"] <= 0.60
    assert default_result.metrics["energy_top10"] >= 0.90


def test_steering_matches_closed_form(default_result):
    r = default_result
    scale = max(1.0, float(np.max(np.abs(r.steer_model))))
    assert np.max(np.abs(r.steer_model - r.steer_formula)) / scale < 1e-4
    # a parabola in alpha: the second finite difference is constant
    d2 = np.diff(r.steer_formula, 2)
    assert np.allclose(d2, d2[0], atol=1e-6 * max(1.0, abs(d2[0])) + 1e-8)


def _small_model(seed=0, d_in=6, d=5, h=7, c=3):
    cfg = eng.Config(d_embed=d, d_hidden=h)
    torch.manual_seed(seed)
    model = eng._build(cfg, d_in, c, bilinear=True).double()
    return model


def test_input_hessian_equals_interaction_matrix():
    """Autograd Hessian of logit c w.r.t. x is the constant 2 E^T Q_c E (independent of x)."""
    model = _small_model()
    E, W, V, P = eng._weights(model)
    Q = eng.symmetric_q(eng.interaction_tensor(P, W, V))
    rng = np.random.default_rng(1)
    for c in range(P.shape[0]):
        expected = 2 * E.T @ Q[c] @ E
        for _ in range(2):
            x = torch.tensor(rng.normal(size=E.shape[1]), dtype=torch.float64)
            H = torch.autograd.functional.hessian(lambda v, c=c: model(v[None])[0, c], x).numpy()
            assert np.max(np.abs(H - expected)) / np.max(np.abs(expected)) < 1e-8


def test_eigendecomposition_against_numpy_and_scipy():
    import scipy.linalg

    model = _small_model(seed=3)
    _, W, V, P = eng._weights(model)
    Q = eng.symmetric_q(eng.interaction_tensor(P, W, V))
    vals, vecs = eng.eig_desc(Q)
    for c in range(Q.shape[0]):
        ref = np.sort(scipy.linalg.eigvalsh(Q[c]))[::-1]
        assert np.allclose(vals[c], ref, rtol=1e-10, atol=1e-12)
        rebuilt = vecs[c] @ np.diag(vals[c]) @ vecs[c].T
        assert np.allclose(rebuilt, Q[c], atol=1e-12)
    # brute-force einsum-free contraction of B for one entry
    B = eng.interaction_tensor(P, W, V)
    c, i, j = 1, 2, 3
    assert np.isclose(B[c, i, j], sum(P[c, k] * W[k, i] * V[k, j] for k in range(W.shape[0])))
    assert np.allclose(B, np.einsum("ck,ki,kj->cij", P, W, V))


def test_symmetrisation_does_not_change_the_quadratic_form():
    model = _small_model(seed=5)
    _, W, V, P = eng._weights(model)
    B = eng.interaction_tensor(P, W, V)
    Q = eng.symmetric_q(B)
    z = np.random.default_rng(0).normal(size=(10, B.shape[1]))
    assert np.allclose(np.einsum("ni,cij,nj->nc", z, B, z), np.einsum("ni,cij,nj->nc", z, Q, z))


def test_eigen_readout_matches_forward_pass():
    model = _small_model(seed=7)
    E, W, V, P = eng._weights(model)
    vals, vecs = eng.eig_desc(eng.symmetric_q(eng.interaction_tensor(P, W, V)))
    X = np.random.default_rng(2).normal(size=(20, E.shape[1]))
    with torch.no_grad():
        out = model(torch.tensor(X)).numpy()
    assert np.allclose(eng.eigen_readout(vals, vecs, X @ E.T), out, atol=1e-10)


def test_toy_targets_are_the_boolean_functions():
    bits = np.array([[a, b, c, d] for a in (0, 1) for b in (0, 1) for c in (0, 1) for d in (0, 1)], float)
    for op, fn in {"and": np.logical_and, "xor": np.logical_xor, "or": np.logical_or}.items():
        T, pairs = eng.toy_targets(op)
        for a, (i, j) in enumerate(pairs):
            vals = np.einsum("ni,ij,nj->n", bits, T[a], bits)
            assert np.allclose(vals, fn(bits[:, i], bits[:, j]).astype(float))


@pytest.mark.parametrize("op", ["and", "xor", "or"])
def test_toy_recovers_closed_form(op):
    r = eng.run(eng.Config(task="toy", toy_op=op))
    failed = [c.describe() for c in eng.claims(r) if not c.passed]
    assert not failed, failed


def test_truncation_reuses_trained_weights(default_result):
    # keeping every component is the full model, for every ordering
    for name, acc in default_result.trunc_acc.items():
        assert acc[-1] == pytest.approx(default_result.metrics["acc_full"]), name
