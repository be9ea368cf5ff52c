"""engine.graphs checked against closed forms, dense numpy formulas, networkx and brute-force counts.

The graph pages (spectral rewiring, mixture of graphs) build every number they show on these helpers, so each test
compares a helper with something it did not compute itself.
"""

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from engine import graphs as G


def _dense_sym_norm(A, self_loops=False):
    """D^{-1/2} A D^{-1/2} by hand (rows of isolated nodes stay zero)."""
    M = np.asarray(A, dtype=float) + (np.eye(A.shape[0]) if self_loops else 0.0)
    d = M.sum(1)
    s = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return M * s[:, None] * s[None, :]


def _path(n):
    return sp.csr_array(nx.to_scipy_sparse_array(nx.path_graph(n), dtype=float))


def _cycle(n):
    return sp.csr_array(nx.to_scipy_sparse_array(nx.cycle_graph(n), dtype=float))


# ----------------------------------------------------------------------------- generation


@pytest.mark.parametrize("n, k", [(10, 3), (11, 3), (12, 3), (7, 2), (9, 4)])
def test_attributed_sbm_has_exactly_n_nodes_in_near_equal_blocks(n, k):
    """The page's "nodes" slider is the node count: blocks differ in size by at most one and add up to n."""
    g = G.attributed_sbm(n, k, 0.5, 0.1, 1.0, 0.5, np.random.default_rng(0), dim=8)
    assert g.A.shape == (n, n) and g.X.shape == (n, 8) and g.labels.shape == (n,)
    sizes = np.bincount(g.blocks, minlength=k)
    assert sizes.sum() == n and sizes.max() - sizes.min() <= 1
    # alignment 1: every label is its block
    assert np.array_equal(g.labels, g.blocks)


def test_sbm_is_reproducible_from_its_generator_and_has_no_self_loops():
    a, _ = G.sbm_adjacency([15, 15], 0.3, 0.05, np.random.default_rng(5))
    b, _ = G.sbm_adjacency([15, 15], 0.3, 0.05, np.random.default_rng(5))
    c, _ = G.sbm_adjacency([15, 15], 0.3, 0.05, np.random.default_rng(6))
    assert (a != b).nnz == 0 and (a != c).nnz > 0
    assert np.all(a.diagonal() == 0) and (a != a.T).nnz == 0


# ----------------------------------------------------------------------------- edge bookkeeping


def test_from_edges_drops_self_loops_and_duplicates():
    A = G.from_edges(np.array([[0, 1], [1, 0], [2, 2], [1, 3], [1, 3]]), 4)
    ref = np.zeros((4, 4))
    for u, v in [(0, 1), (1, 3)]:
        ref[u, v] = ref[v, u] = 1.0
    assert np.array_equal(A.toarray(), ref)
    assert G.edge_list(A).tolist() == [[0, 1], [1, 3]]


def test_apply_edits_matches_set_arithmetic_on_edges():
    """Removing and adding edges gives the graph of (old edges - removed) | added, symmetric, without self-loops."""
    rng = np.random.default_rng(3)
    A, _ = G.sbm_adjacency([12, 12], 0.4, 0.1, rng)
    old = {tuple(e) for e in G.edge_list(A).tolist()}
    remove = sorted(old)[::3]
    missing = [(u, v) for u in range(24) for v in range(u + 1, 24) if (u, v) not in old]
    add = missing[::7]
    B = G.apply_edits(A, np.array(add), np.array(remove))
    expected = (old - set(remove)) | set(add)
    assert {tuple(e) for e in G.edge_list(B).tolist()} == expected
    assert (B != B.T).nnz == 0 and np.all(B.diagonal() == 0)
    assert B.nnz == 2 * len(expected)
    # an edit given as (v, u) removes the same undirected edge
    u, v = remove[0] if remove[0] not in add else remove[1]
    C = G.apply_edits(A, np.empty((0, 2)), np.array([[v, u]]))
    assert C[u, v] == 0 and C[v, u] == 0 and C.nnz == A.nnz - 2


# ----------------------------------------------------------------------------- statistics


def test_homophily_of_an_edgeless_graph_is_undefined():
    """No edges: the fraction is 0/0, shown as NaN (a claim on it then fails) rather than a perfect 1 or 0."""
    empty = sp.csr_array((5, 5))
    assert math.isnan(G.edge_homophily(empty, np.arange(5)))
    tri = G.from_edges(np.array([[0, 1], [1, 2], [0, 2], [2, 3]]), 4)
    assert G.edge_homophily(tri, np.array([0, 0, 1, 1])) == pytest.approx(2 / 4)


def test_modularity_does_not_depend_on_how_communities_are_numbered():
    """Community ids are names: negative, sparse or string ids give networkx's modularity of the same partition."""
    rng = np.random.default_rng(4)
    A, blocks = G.sbm_adjacency([10, 12, 8], 0.4, 0.05, rng)
    nxg = nx.from_scipy_sparse_array(A)
    ref = nx.community.modularity(nxg, [set(np.flatnonzero(blocks == b).tolist()) for b in range(3)])
    for ids in (blocks, blocks - 5, blocks * 10 + 3, np.array(["a", "b", "c"])[blocks]):
        assert G.modularity(A, ids) == pytest.approx(ref, abs=1e-12)
    assert G.modularity(sp.csr_array((4, 4)), np.zeros(4)) == 0.0


def test_normalized_adjacency_matches_the_dense_formula():
    A = G.from_edges(np.array([[0, 1], [1, 2], [0, 2], [2, 3]]), 5)        # node 4 isolated
    N = G.normalized_adjacency(A).toarray()
    assert np.allclose(N, _dense_sym_norm(A.toarray()))
    assert np.all(N[4] == 0)
    # connected part: top eigenvalue exactly 1, eigenvector sqrt(d)
    sub = N[:4, :4]
    w = np.linalg.eigvalsh(sub)
    assert w[-1] == pytest.approx(1.0)


def test_gcn_norm_adds_self_loops_before_normalising():
    A = G.from_edges(np.array([[0, 1], [1, 2], [2, 3]]), 5)
    P = G.gcn_norm(A).toarray()
    assert np.allclose(P, _dense_sym_norm(A.toarray(), self_loops=True))
    assert P[4, 4] == pytest.approx(1.0)       # an isolated node keeps its own features


@pytest.mark.parametrize("n", [5, 9, 16, 40])
def test_spectral_gap_of_paths_and_cycles_has_its_closed_form(n):
    """Normalised Laplacian spectra are known for paths (1 - cos(pi k / (n-1))) and cycles (1 - cos(2 pi k / n));
    sizes below and above the dense / Lanczos switch."""
    assert G.spectral_gap(_path(n)) == pytest.approx(1 - math.cos(math.pi / (n - 1)), abs=1e-8)
    assert G.spectral_gap(_cycle(n)) == pytest.approx(1 - math.cos(2 * math.pi / n), abs=1e-8)


@pytest.mark.parametrize("sizes", [[4, 5], [20, 25]])
def test_fiedler_vector_is_the_degree_normalised_eigenvector(sizes):
    """x = D^{-1/2} f with L f = lambda_2 f and sum_i d_i x_i^2 = 1 (so x is orthogonal to the degrees)."""
    A, _ = G.sbm_adjacency(sizes, 0.6, 0.15, np.random.default_rng(8))
    lam, x = G.fiedler(A)
    Ad = A.toarray()
    d = Ad.sum(1)
    L = np.eye(len(d)) - _dense_sym_norm(Ad)
    assert lam == pytest.approx(np.linalg.eigvalsh(L)[1], abs=1e-8)
    f = np.sqrt(d) * x
    assert np.allclose(L @ f, lam * f, atol=1e-6)
    assert np.sum(d * x * x) == pytest.approx(1.0)
    assert abs(np.sum(d * x)) < 1e-6


def test_fiedler_of_a_disconnected_graph_is_zero():
    A = G.from_edges(np.array([[0, 1], [1, 2], [3, 4]]), 5)
    lam, x = G.fiedler(A)
    assert lam == 0.0 and x.shape == (5,)


def test_louvain_ids_are_numbered_by_smallest_member():
    """Community 0 holds node 0, and ids first appear in increasing order (stable colours on the page)."""
    rng = np.random.default_rng(9)
    A, _ = G.sbm_adjacency([15, 15, 15, 15], 0.5, 0.02, rng)
    perm = rng.permutation(60)
    A = sp.csr_array(A.toarray()[np.ix_(perm, perm)])       # blocks scattered over the node ids
    c = G.louvain(A, seed=1)
    _, first = np.unique(c, return_index=True)
    assert c[0] == 0
    assert list(c[np.sort(first)]) == list(range(c.max() + 1))


def test_louvain_seed_changes_the_visiting_order():
    """The seed is the page's seed: the same seed gives the same partition, and on a graph without clear
    communities different seeds find different (equally valid) partitions."""
    A = sp.csr_array(nx.to_scipy_sparse_array(nx.gnp_random_graph(60, 0.08, seed=3), dtype=float))
    runs = {s: G.louvain(A, seed=s) for s in range(6)}
    assert np.array_equal(G.louvain(A, seed=2), runs[2])
    assert len({tuple(r) for r in runs.values()}) > 1


def test_louvain_recovers_clear_blocks():
    A, blocks = G.sbm_adjacency([20, 20, 20], 0.7, 0.005, np.random.default_rng(11))
    c = G.louvain(A, seed=0)
    # a perfect recovery up to renaming
    pairs = set(zip(c.tolist(), blocks.tolist()))
    assert len(pairs) == 3 == len(set(c.tolist()))


# ----------------------------------------------------------------------------- GCN trainer


def _tiny_task(seed=0, n=30):
    g = G.attributed_sbm(n, 3, 0.4, 0.05, 1.0, 0.6, np.random.default_rng(seed), dim=6)
    idx = np.random.default_rng(seed).permutation(n)
    return g, idx[:10], idx[10:20], idx[20:]


def test_gcn_seed_sets_the_initial_weights():
    """Without dropout only the initial weights are random: the same seed repeats the run exactly, another seed
    starts from other weights (a different first loss)."""
    g, tr, va, te = _tiny_task()

    def run(seed):
        return G.train_gcns([g.A], [g.X], [g.labels], tr, va, te, hidden=8, epochs=3, dropout=0.0, seed=seed)

    a, b, c = run(0), run(0), run(1)
    assert np.array_equal(a.train_loss, b.train_loss) and np.array_equal(a.test_acc, b.test_acc)
    assert a.train_loss[0] != c.train_loss[0]


def test_gcns_on_identical_graphs_share_initial_weights_only_when_asked():
    g, tr, va, te = _tiny_task(1)

    def run(same_init):
        out = G.train_gcns([g.A, g.A], [g.X, g.X], [g.labels, g.labels], tr, va, te, hidden=8, epochs=5,
                           dropout=0.0, seed=4, same_init=same_init)
        return out

    paired, unpaired = run(True), run(False)
    assert paired.val_acc[0] == paired.val_acc[1] and paired.test_acc[0] == paired.test_acc[1]
    # the mean first loss of two differently initialised models is not the loss of the shared initialisation
    assert paired.train_loss[0] != unpaired.train_loss[0]


def test_gcn_reports_test_accuracy_as_a_count_of_test_nodes():
    g, tr, va, te = _tiny_task(2)
    out = G.train_gcns([g.A], [g.X], [g.labels], tr, va, te, hidden=8, epochs=10, seed=0)
    assert out.train_loss.shape == (10,)
    assert (out.test_acc[0] * len(te)) == pytest.approx(round(out.test_acc[0] * len(te)))
    assert (out.val_acc[0] * len(va)) == pytest.approx(round(out.val_acc[0] * len(va)))


def test_edge_list_is_sorted_like_networkx_edges():
    A = sp.csr_array(nx.to_scipy_sparse_array(nx.gnp_random_graph(25, 0.2, seed=1), dtype=float))
    ref = sorted((min(u, v), max(u, v)) for u, v in nx.from_scipy_sparse_array(A).edges())
    assert [tuple(e) for e in G.edge_list(A).tolist()] == ref


def test_gcn_scores_validation_and_test_nodes_against_their_own_labels():
    """Features follow the true classes; the test nodes are given a wrong label (the next class). A GCN trained on
    the other nodes predicts the true class there, so its validation accuracy is high and its test accuracy low; a
    trainer that mixed up the two sets would report the opposite."""
    n = 60
    g = G.attributed_sbm(n, 3, 0.3, 0.02, 1.0, 0.05, np.random.default_rng(3), dim=6)
    idx = np.random.default_rng(3).permutation(n)
    tr, va, te = idx[:30], idx[30:45], idx[45:]
    y = g.labels.copy()
    y[te] = (y[te] + 1) % 3
    out = G.train_gcns([g.A], [g.X], [y], tr, va, te, hidden=16, epochs=60, dropout=0.0, seed=0)
    assert out.val_acc[0] >= 0.9 and out.test_acc[0] <= 0.1


def test_gcn_group_accuracies_come_from_the_model_and_epoch_of_the_test_accuracy():
    """Groups that split the test set score the same model at the same epoch: weighted by group sizes they give
    the test accuracy back, and each group's accuracy equals that of a run whose test set is the group alone
    (no dropout, so the runs are identical); the labels of one group are scrambled to make the groups differ."""
    n = 90
    g = G.attributed_sbm(n, 3, 0.3, 0.02, 1.0, 0.3, np.random.default_rng(5), dim=6)
    idx = np.random.default_rng(5).permutation(n)
    tr, va, te = idx[:30], idx[30:50], idx[50:]
    y = g.labels.copy()
    groups = [te[:15], te[15:]]
    y[groups[1][::2]] = (y[groups[1][::2]] + 1) % 3
    kw = dict(hidden=8, epochs=40, dropout=0.0, seed=2)
    out = G.train_gcns([g.A, g.A], [g.X, g.X], [y, y], tr, va, te, groups=groups, **kw)
    assert out.group_acc.shape == (2, 2)
    sizes = np.array([len(x) for x in groups], float)
    np.testing.assert_allclose(out.group_acc @ sizes / sizes.sum(), out.test_acc, atol=1e-6)
    for j, gr in enumerate(groups):
        alone = G.train_gcns([g.A, g.A], [g.X, g.X], [y, y], tr, va, gr, **kw)
        np.testing.assert_allclose(out.group_acc[:, j], alone.test_acc)
        np.testing.assert_allclose(out.group_acc[:, j] * len(gr), np.round(out.group_acc[:, j] * len(gr)), atol=1e-4)
    assert out.group_acc[0, 0] > out.group_acc[0, 1]
    assert G.train_gcns([g.A], [g.X], [y], tr, va, te, **kw).group_acc is None
