import networkx as nx
import numpy as np
import pytest
from sklearn.random_projection import johnson_lindenstrauss_min_dim

from engine import jl_dynamic_graph_metric as eng
from engine.core import InputError


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


@pytest.fixture(scope="module")
def stream():
    return eng.make_stream(60, 800, 3, np.random.default_rng(1))


def test_claims_pass_at_default(default_result):
    for c in eng.claims(default_result):
        assert c.passed, c.describe()


def test_history_matrix_matches_a_plain_loop(stream):
    g = stream
    lo, hi = g.msg.min(0), g.msg.max(0)
    tn = (g.t - g.t.min()) / (g.t.max() - g.t.min() + 1e-6)
    hist = {v: [] for v in range(g.n_nodes)}
    for i in range(len(g.t)):                       # events in stream (time) order
        x = (g.msg[i] - lo) / (hi - lo + 1e-6)
        hist[int(g.src[i])].append(np.concatenate([x, [tn[i], 0.0]]))
        hist[int(g.dst[i])].append(np.concatenate([x, [tn[i], 1.0]]))
    M = eng.history_matrix(g).toarray()
    for v, vecs in hist.items():
        flat = np.concatenate(vecs) if vecs else np.zeros(0)
        np.testing.assert_allclose(M[v, :len(flat)], flat, atol=1e-12)
        assert np.all(M[v, len(flat):] == 0)


def test_sketch_preserves_squared_norm_on_average(stream):
    a = stream
    b = eng.perturb(a, "edge rewiring", 0.5, np.random.default_rng(2))
    D = (eng.history_matrix(a, 4000) - eng.history_matrix(b, 4000))
    exact = np.sum(D.toarray() ** 2)
    ratios = []
    for s in range(60):
        pj = eng.Projector.make(4000, a.n_nodes, 32, 32, seed=s)
        ratios.append(np.sum((pj.sketch(a) - pj.sketch(b)) ** 2) / exact)
    assert abs(np.mean(ratios) - 1.0) < 0.05


def test_identical_streams_have_zero_distance(stream):
    assert eng.jl_metric(stream, stream.copy()) == pytest.approx(0.0, abs=1e-12)
    same = eng.perturb(stream, "time shuffling", 0.0, np.random.default_rng(0))
    assert eng.jl_metric(stream, same) == pytest.approx(0.0, abs=1e-12)
    assert eng.jl_metric(stream, eng.perturb(stream, "feature noise", 0.5, np.random.default_rng(0))) > 1e-4


@pytest.mark.parametrize("n,k", [(16, 128), (28, 256), (100, 500)])
def test_jl_eps_matches_sklearn_formula(n, k):
    eps = eng.jl_eps(n, k)
    assert johnson_lindenstrauss_min_dim(n, eps=eps) <= k
    assert johnson_lindenstrauss_min_dim(n, eps=eps * 0.98) > k


def test_snapshot_statistics_match_networkx(stream):
    g = stream
    desc = eng.snapshot_descriptors(g, 4)
    snaps = eng.snapshots(g, 4)
    edges = np.linspace(g.t.min(), g.t.max() + 1e-9, 5)
    for s in range(4):
        k = (g.t >= edges[s]) & (g.t < edges[s + 1])
        G = nx.Graph()
        G.add_nodes_from(range(g.n_nodes))
        G.add_edges_from((int(u), int(v)) for u, v in zip(g.src[k], g.dst[k]) if u != v)
        dh = np.zeros(64)
        h = nx.degree_histogram(G)[:64]
        dh[:len(h)] = h
        np.testing.assert_allclose(desc["degree"][s], dh / dh.sum())
        cc = np.array([nx.clustering(G)[v] for v in range(g.n_nodes)])
        ch, _ = np.histogram(cc, bins=20, range=(0, 1))
        np.testing.assert_allclose(desc["clustering"][s], ch / ch.sum())
        spec = np.sort(nx.normalized_laplacian_spectrum(G))
        np.testing.assert_allclose(eng.laplacian_spectrum(snaps[s]), spec, atol=1e-8)


def test_mmd_against_double_loop():
    rng = np.random.default_rng(0)
    X, Y = rng.random((5, 7)), rng.random((4, 7))
    k = lambda a, b: np.exp(-np.sum((a - b) ** 2) / (2 * 0.5**2))  # noqa: E731
    ref = (np.mean([[k(a, b) for b in X] for a in X]) + np.mean([[k(a, b) for b in Y] for a in Y])
           - 2 * np.mean([[k(a, b) for b in Y] for a in X]))
    assert eng.mmd2(X, Y, sigma=0.5) == pytest.approx(ref, rel=1e-10)


def test_topology_only_baseline_would_fail_the_monotone_claim(default_result):
    # negative control: degree MMD is blind to feature noise, so the same claim would fail for it
    r = default_result
    i = r.rho_names.index("snapshot degree MMD")
    j = eng.PERTURBATIONS.index("feature noise")
    assert r.rho_table[i, j] < 0.9
    assert r.rho_table[0].min() >= 0.9


def test_bad_input():
    with pytest.raises(InputError):
        eng.make_stream(4, 100, 2, np.random.default_rng(0))
