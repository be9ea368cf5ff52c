import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import cosine_similarity

from engine import mixture_of_graphs as eng
from engine.graphs import edge_homophily, edge_list


@pytest.fixture(scope="module")
def small():
    c = eng.Config(n_nodes=400, dense_degree=12, sparse_degree=4)
    A, X, y, region = eng.make_graph(c, np.random.default_rng(3))
    dst, src = eng.directed_edges(A)
    return A, X, y, region, dst, src, eng.edge_scores(A, X, src, dst)


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_pass_at_default(default_result):
    res = default_result
    for c in eng.claims(res):
        assert c.passed, c.describe()
    assert res.metrics["sparsity_gap"] < 0.1        # the router hit roughly the asked-for sparsity


def test_scores_match_networkx_and_sklearn(small):
    A, X, _, _, dst, src, scores = small
    G = nx.from_scipy_sparse_array(A)
    pick = np.random.default_rng(0).choice(len(dst), 200, replace=False)
    jac = {(u, v): p for u, v, p in nx.jaccard_coefficient(G, [(int(dst[e]), int(src[e])) for e in pick])}
    cos = cosine_similarity(X)
    deg = dict(G.degree())
    for e in pick:
        i, j = int(dst[e]), int(src[e])
        assert scores["jaccard"][e] == pytest.approx(jac[(i, j)], abs=1e-12)
        assert scores["feature"][e] == pytest.approx(cos[i, j], abs=1e-5)
        assert scores["degree"][e] == pytest.approx(1 / math.sqrt(deg[i] * deg[j]))


def test_ego_keep_mask_matches_per_node_sort(small):
    A, _, _, _, dst, src, scores = small
    n = A.shape[0]
    s = scores["feature"]
    for keep in (0.2, 0.5, 0.9):
        mask = eng.ego_keep_mask(dst, s, keep, n)
        for i in range(0, n, 7):
            idx = np.flatnonzero(dst == i)
            if len(idx) == 0:
                continue
            quota = max(1, math.ceil(keep * len(idx) - 1e-9))
            expect = set(idx[np.argsort(-s[idx], kind="stable")[:quota]])
            assert set(idx[mask[idx]]) == expect


def test_global_sparsifier_keeps_the_top_edges(small):
    A, X, _, _, _, _, _ = small
    edges = edge_list(A)
    score = np.random.default_rng(1).random(len(edges))
    B = eng.global_sparsify(A, score, edges, 100)
    kept = {tuple(e) for e in edge_list(B)}
    assert len(kept) == 100
    assert kept == {tuple(edges[i]) for i in np.argsort(-score)[:100]}


def test_mog_graph_is_union_of_chosen_ego_graphs(small):
    A, _, _, _, dst, src, scores = small
    n = A.shape[0]
    masks = np.stack([eng.ego_keep_mask(dst, scores[c], r, n) for c, r in eng.EXPERTS])
    choice = np.random.default_rng(2).integers(0, len(eng.EXPERTS), n)
    B = eng.mog_graph(A, choice, dst, src, masks)
    expect = set()
    for e in range(len(dst)):
        if masks[choice[dst[e]], e]:
            expect.add((min(dst[e], src[e]), max(dst[e], src[e])))
    assert {tuple(e) for e in edge_list(B)} == expect
    assert (B != B.T).nnz == 0


def test_generated_regions_have_the_requested_homophily():
    c = eng.Config(n_nodes=1000, noisy_homophily=0.5)
    A, _, y, region = eng.make_graph(c, np.random.default_rng(0))
    keep = np.flatnonzero(region == 0)
    sub = sp.csr_array(A)[keep][:, keep]
    assert edge_homophily(sub, y[keep]) == pytest.approx(0.5, abs=0.05)
    deg = np.asarray(A.sum(1)).ravel()
    assert deg[region == 0].mean() > 3 * deg[region == 1].mean()


def test_page_caption_follows_the_matched_comparison():
    # with less noisy features the feature rule nearly ties the mixture at its own sparsity (measured 0.905 vs 0.900,
    # below the badge's 0.02): the caption must say so instead of claiming the mixture keeps the right edges
    from tests.pagetext import page_texts

    assert any("the per-node mixture is ahead of the best global rule" in t for t in page_texts("mixture_of_graphs"))
    noisy = " ".join(page_texts("mixture_of_graphs", {"feature_noise": "0.3"}))
    assert "the per-node mixture is not clearly ahead at its own sparsity" in noisy


def test_local_rule_badge_needs_the_per_node_choice(monkeypatch):
    # a router that sends every node to the same expert is one per-node rule: the badge against the best per-node
    # rule must fail for it (the badge against global rules does not tell them apart: measured +0.023 for it)
    orig = eng.train_router
    one = eng.EXPERTS.index(("feature", 0.2))

    def degenerate(*a, **k):
        G, loss, route = orig(*a, **k)
        G = np.zeros_like(G)
        G[:, one] = 1.0
        return G, loss, route

    monkeypatch.setattr(eng, "train_router", degenerate)
    r = eng.run(eng.Config())
    local = next(c for c in eng.claims(r) if c.label == "MoG accuracy − best per-node rule accuracy")
    assert not local.passed, local.describe()


def test_local_sparsify_matches_the_edge_count():
    rng = np.random.default_rng(0)
    A, X, _, _ = eng.make_graph(eng.Config(n_nodes=400), rng)
    dst, src = eng.directed_edges(A)
    sc = eng.edge_scores(A, X, src, dst)
    n_edges = eng.edge_list(A).shape[0]
    for target in (int(0.3 * n_edges), int(0.6 * n_edges)):
        g = eng.local_sparsify(A, dst, src, sc["jaccard"], target)
        assert abs(eng.edge_list(g).shape[0] - target) <= 0.03 * n_edges
        assert (g - g.multiply(A)).count_nonzero() == 0            # a subgraph of A


def test_every_reported_accuracy_is_a_count_of_test_nodes(default_result):
    """Accuracies are correct test nodes / test nodes: the per-region scores recombined with the wrong weights, or
    any other mix-up, would leave a fraction of a node."""
    r, n = default_result, eng.Config().n_nodes
    n_te = n - int(0.3 * n) - int(0.2 * n)
    accs = [r.mog_acc, r.full_acc, *r.matched_acc.values(), *np.concatenate(list(r.grid_acc.values()))]
    for a in accs:
        assert a * n_te == pytest.approx(round(a * n_te), abs=1e-3), a   # float32 accuracies


def _router_case(seed=0, n=30, K=4, E=120):
    rng = np.random.default_rng(seed)
    dst, src = rng.integers(0, n, E), rng.integers(0, n, E)
    dst[:3] = 0                                   # node n - 1 may have no in-edge: the self-loop alone remains
    masks = (rng.random((K, E)) < 0.5).astype(np.float32)
    logits = rng.normal(size=(n, K))
    G = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return rng, dst, src, masks, G.astype(np.float32)


def test_router_pieces_match_brute_force_loops():
    import torch
    rng, dst, src, masks, G = _router_case()
    n, K, E = G.shape[0], G.shape[1], len(dst)
    t = torch.as_tensor
    w = eng.edge_weights(t(G), t(dst), t(masks.T.copy())).numpy()
    w_ref = np.array([sum(G[dst[e], k] * masks[k, e] for k in range(K)) for e in range(E)])
    np.testing.assert_allclose(w, w_ref, rtol=1e-6)
    h = rng.normal(size=(n, 5)).astype(np.float32)
    norm = eng.weighted_degree(t(w), t(dst), n)
    out = eng.propagate(t(h), t(w), t(src), t(dst), norm).numpy()
    for i in range(n):
        into = [e for e in range(E) if dst[e] == i]
        ref = (h[i] + sum(w[e] * h[src[e]] for e in into)) / (1 + sum(w[e] for e in into))
        np.testing.assert_allclose(out[i], ref, rtol=1e-5, atol=1e-6)
    # penalties: the degree-weighted expected keep is the mean edge weight; balance is CV² of gate mass per expert
    deg = np.bincount(dst, minlength=n).astype(np.float32)
    keep_frac = np.zeros((K, n), np.float32)
    for e in range(E):
        keep_frac[:, dst[e]] += masks[:, e] / deg[dst[e]]
    gk, bal = eng.router_penalties(t(G), t(keep_frac), t(deg))
    assert float(gk) == pytest.approx(w_ref.sum() / E, rel=1e-5)
    imp = G.sum(0)
    assert float(bal) == pytest.approx(np.var(imp, ddof=1) / np.mean(imp) ** 2, rel=1e-4)
