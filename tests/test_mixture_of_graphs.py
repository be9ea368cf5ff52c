import math
from dataclasses import replace

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import cosine_similarity

from engine import mixture_of_graphs as eng
from engine.graphs import edge_homophily, edge_list
from tests.claimcheck import assert_untimed_claims_pass
from tests.pagetext import charts, open_page, values


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
    # the inference-time badge is read from a clock: its verdict is not asserted (timings belong to the
    # benchmark); the timing tests below check which graphs are timed
    assert_untimed_claims_pass(eng.claims(res), eng.TIMING_CLAIM_LABELS, 1)
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


# --------------------------------------------------------------------------- second round: router, features, run()

def _router_setup(top_k=2, seed=0, n=300, epochs=12):
    from engine.core.nn import set_cpu_threads

    set_cpu_threads(1)   # as run() does: small sparse ops, one thread
    c = eng.Config(n_nodes=n, dense_degree=12, sparse_degree=4, top_k=top_k, epochs=epochs, seed=seed)
    A, X, y, _ = eng.make_graph(c, np.random.default_rng(4))
    dst, src = eng.directed_edges(A)
    scores = eng.edge_scores(A, X, src, dst)
    masks = eng.expert_masks(dst, scores, n)
    Z = eng.router_features(A, X, dst, src, scores)
    tr = np.random.default_rng(9).permutation(n)[: int(0.3 * n)]
    return c, A, X, y, tr, dst, src, masks, Z


@pytest.mark.parametrize("top_k", [1, 2])
def test_router_gates_are_sparse_and_deterministic(top_k):
    """After training every node's gates are a softmax over exactly top_k experts, the node's top expert is what
    ``route`` (the router applied to new graphs, no gate noise) picks, and a seed fixes the whole training."""
    c, A, X, y, tr, dst, src, masks, Z = _router_setup(top_k)
    G1, loss1, route = eng.train_router(c, A, X, y, tr, dst, src, masks, Z)
    assert G1.shape == (A.shape[0], len(eng.EXPERTS))
    assert np.all((G1 > 0).sum(1) == top_k)
    np.testing.assert_allclose(G1.sum(1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(G1.argmax(1), route(Z))
    G2, loss2, _ = eng.train_router(c, A, X, y, tr, dst, src, masks, Z)
    np.testing.assert_array_equal(G1, G2)
    np.testing.assert_array_equal(loss1, loss2)
    G3, _, _ = eng.train_router(replace(c, seed=c.seed + 1), A, X, y, tr, dst, src, masks, Z)
    assert not np.array_equal(G1, G3)


def test_router_never_sees_labels_outside_the_training_nodes():
    """The router and its GNN are fit on the training labels only: scrambling every other node's label leaves
    the trained gates unchanged (no leak of validation or test labels)."""
    c, A, X, y, tr, dst, src, masks, Z = _router_setup()
    y2 = y.copy()
    rest = np.setdiff1d(np.arange(len(y)), tr)
    y2[rest] = (y2[rest] + 1 + np.random.default_rng(1).integers(0, c.n_classes - 1, len(rest))) % c.n_classes
    assert np.all(y2[rest] != y[rest])
    G1, _, _ = eng.train_router(c, A, X, y, tr, dst, src, masks, Z)
    G2, _, _ = eng.train_router(c, A, X, y2, tr, dst, src, masks, Z)
    np.testing.assert_array_equal(G1, G2)


def test_router_loss_pulls_the_kept_share_to_the_target_and_balances_experts(monkeypatch):
    """The two penalties enter the router's loss as documented: the kept share is the mean soft edge weight
    (sum over edges of the destination's gate mix of keep masks, over E), its gradient vanishes exactly at
    1 - target_sparsity and grows with the distance to it, and the load-balancing term is added with a positive
    weight (so it is minimised, not dropped or maximised)."""
    c, A, X, y, tr, dst, src, masks, Z = _router_setup(epochs=6)
    c = replace(c, target_sparsity=0.6)
    seen = []
    orig = eng.router_penalties

    def spy(G, keep_frac, deg):
        gk, bal = orig(G, keep_frac, deg)
        rec = {"G": G.detach().numpy().copy(), "gk": float(gk.detach())}
        gk.register_hook(lambda g: rec.__setitem__("d_gk", float(g)))
        bal.register_hook(lambda g: rec.__setitem__("d_bal", float(g)))
        seen.append(rec)
        return gk, bal

    monkeypatch.setattr(eng, "router_penalties", spy)
    eng.train_router(c, A, X, y, tr, dst, src, masks, Z)
    assert len(seen) == c.epochs
    slopes = []
    for rec in seen:
        w = (rec["G"][dst] * masks.T).sum(1)          # expected keep of every directed edge
        assert rec["gk"] == pytest.approx(w.mean(), rel=1e-5)
        assert rec["d_bal"] > 0
        slopes.append(rec["d_gk"] / (rec["gk"] - (1 - c.target_sparsity)))
    assert min(slopes) > 0
    np.testing.assert_allclose(slopes, slopes[0], rtol=1e-4)   # a quadratic pull towards exactly 1 - target


def test_router_features_are_standardised_ego_statistics(small):
    """Router input of a node: log(1 + degree), then the mean and the (population) standard deviation of each
    criterion's scores over the node's edges, every column standardised over the nodes."""
    A, X, _, _, dst, src, scores = small
    n = A.shape[0]
    Z = eng.router_features(A, X, dst, src, scores)
    raw = np.zeros((n, 1 + 2 * len(eng.CRITERIA)))
    Ad = A.toarray()
    for i in range(n):
        idx = np.flatnonzero(dst == i)
        raw[i, 0] = np.log1p(Ad[i].sum())
        for k, name in enumerate(eng.CRITERIA):
            s = scores[name][idx]
            raw[i, 1 + 2 * k: 3 + 2 * k] = (s.mean(), s.std()) if len(s) else (0.0, 0.0)
    ref = (raw - raw.mean(0)) / raw.std(0)
    # the engine's one-pass variance (E[s^2] - mean^2) loses a few digits on near-constant scores
    np.testing.assert_allclose(Z, ref, atol=2e-3)


def test_expert_masks_use_each_experts_own_criterion(small):
    """Expert (criterion, rho) keeps the top ceil(rho * deg) of every node's edges ranked by that criterion."""
    A, _, _, _, dst, _, scores = small
    n = A.shape[0]
    M = eng.expert_masks(dst, scores, n)
    assert M.shape == (len(eng.EXPERTS), len(dst))
    for k, (crit, rho) in enumerate(eng.EXPERTS):
        for i in range(0, n, 11):
            idx = np.flatnonzero(dst == i)
            if len(idx) == 0:
                continue
            quota = max(1, math.ceil(rho * len(idx) - 1e-9))
            top = idx[np.argsort(-scores[crit][idx], kind="stable")[:quota]]
            assert set(idx[M[k, idx]]) == set(top), (crit, rho, i)


def test_generated_graph_is_simple_and_links_the_two_regions():
    c = eng.Config(n_nodes=1000, noisy_homophily=0.5, feature_noise=1.5)
    A, X, y, region = eng.make_graph(c, np.random.default_rng(0))
    Ad = A.toarray()
    assert np.all(np.diag(Ad) == 0) and np.array_equal(Ad, Ad.T) and set(np.unique(Ad)) <= {0.0, 1.0}
    e = edge_list(A)
    cross = np.sum(region[e[:, 0]] != region[e[:, 1]])
    m_cross = int(0.02 * c.n_nodes * (c.dense_degree + c.sparse_degree) / 4)
    assert 0.9 * m_cross <= cross <= m_cross                     # duplicates may merge a few
    # the clean region's links are 90 % homophilous; each region's features have their own noise level
    keep = np.flatnonzero(region == 1)
    assert edge_homophily(sp.csr_array(A)[keep][:, keep], y[keep]) == pytest.approx(0.9, abs=0.04)
    for r, sd in ((0, 0.5), (1, c.feature_noise)):
        resid = np.concatenate([X[(region == r) & (y == k)] - X[(region == r) & (y == k)].mean(0)
                                for k in range(c.n_classes)])
        assert resid.std() == pytest.approx(sd, rel=0.05)


@pytest.fixture(scope="module")
def spied_run():
    """One small run with the GCN trainer, the timing and the router recorded (their originals still run)."""
    mp = pytest.MonkeyPatch()
    rec = {}
    orig_gcn, orig_time, orig_router = eng.train_gcns, eng.time_inference, eng.train_router

    def gcn(adjs, feats, labels, tr, va, tests, **kw):
        out = orig_gcn(adjs, feats, labels, tr, va, tests, **kw)
        rec["gcn"] = (adjs, tr, va, tests, kw.get("groups"), out)
        return out

    def timing(adjs, *a, **kw):
        rec["timing"] = adjs
        return orig_time(adjs, *a, repeats=1)

    def router(c, A, X, y, train_idx, *a, **kw):
        rec["router_train"] = np.asarray(train_idx).copy()
        out = orig_router(c, A, X, y, train_idx, *a, **kw)
        rec["G"] = out[0]
        return out

    mp.setattr(eng, "train_gcns", gcn)
    mp.setattr(eng, "time_inference", timing)
    mp.setattr(eng, "train_router", router)
    c = eng.Config(n_nodes=600, epochs=40, timing_nodes=4000, seed=1)
    try:
        res = eng.run(c)
    finally:
        mp.undo()
    return c, res, rec


def test_run_scores_on_test_nodes_only(spied_run):
    """Every GCN (one per graph) is scored on the whole test split, disjoint from the training and validation
    nodes; the per-region scores are the same models on the two regions' halves of that split."""
    c, res, rec = spied_run
    adjs, tr, va, tests, groups, _ = rec["gcn"]
    n = c.n_nodes
    region = (np.arange(n) >= n // 2).astype(int)
    assert len(tr) == int(0.3 * n) and len(va) == int(0.2 * n) and not set(tr) & set(va)
    te = np.setdiff1d(np.arange(n), np.concatenate([tr, va]))
    np.testing.assert_array_equal(np.sort(np.asarray(tests)), te)
    assert len(adjs) == 2 + 2 * len(eng.CRITERIA) + len(eng.GRID) * len(eng.CRITERIA)
    assert len(groups) == 2
    for r in (0, 1):
        np.testing.assert_array_equal(np.sort(groups[r]), te[region[te] == r])


def test_run_baselines_have_the_announced_edge_counts(spied_run):
    """Global and per-node baselines 'at MoG sparsity' keep (about) the MoG graph's edge count, the grid graphs
    keep round((1 - s) E) edges; the MoG graph is the union of every node's top expert's ego-graph."""
    c, res, rec = spied_run
    adjs, *_ = rec["gcn"]
    E = lambda M: edge_list(M).shape[0]  # noqa: E731
    assert E(adjs[0]) == res.edges_full
    assert E(adjs[1]) == res.edges_mog
    assert res.mog_sparsity == pytest.approx(1 - res.edges_mog / res.edges_full)
    nc = len(eng.CRITERIA)
    for j in range(nc):
        assert E(adjs[2 + j]) == res.edges_mog                                    # global @ MoG sparsity
        assert abs(E(adjs[2 + nc + j]) - res.edges_mog) <= 0.03 * res.edges_full   # per-node rule
    grid = adjs[2 + 2 * nc:]
    for k, s in enumerate(eng.GRID):
        for j in range(nc):
            assert E(grid[k * nc + j]) == round((1 - s) * res.edges_full)
    # the MoG graph from the recorded gates
    A = adjs[0]
    X = eng.make_graph(c, np.random.default_rng(c.seed))[1]
    dst, src = eng.directed_edges(A)
    masks = eng.expert_masks(dst, eng.edge_scores(A, X, src, dst), A.shape[0])
    assert (eng.mog_graph(A, rec["G"].argmax(1), dst, src, masks) != adjs[1]).nnz == 0


def test_run_region_statistics_match_direct_counts(spied_run):
    """Per-region kept share, homophily of the kept edges and experts' shares, counted here from the graphs and
    gates the run used; one model per graph gives both the overall and the per-region accuracies, so the overall
    accuracy is the per-region accuracies weighted by the regions' test-node counts."""
    c, res, rec = spied_run
    adjs, tr, va, tests, groups, out = rec["gcn"]
    n = c.n_nodes
    region = (np.arange(n) >= n // 2).astype(int)
    _, _, y, _ = eng.make_graph(c, np.random.default_rng(c.seed))

    def inside(M):
        e = edge_list(M)
        return np.array([np.sum((region[e[:, 0]] == r) & (region[e[:, 1]] == r)) for r in (0, 1)])

    base = inside(adjs[0])
    names = list(res.region_keep)
    assert names[:2] == ["full graph", "MoG"] and len(names) == 2 + 2 * len(eng.CRITERIA)
    for i, name in enumerate(names):
        np.testing.assert_allclose(res.region_keep[name], inside(adjs[i]) / base)
        assert res.homophily_kept[name] == pytest.approx(edge_homophily(adjs[i], y))
        np.testing.assert_allclose(res.region_acc[name], out.group_acc[i])
    assert res.mog_acc == pytest.approx(out.test_acc[1]) and res.full_acc == pytest.approx(out.test_acc[0])
    np.testing.assert_allclose(res.region_keep["full graph"], 1.0)
    choice = rec["G"].argmax(1)
    for r in (0, 1):
        ref = np.bincount(choice[region == r], minlength=len(eng.EXPERTS)) / np.sum(region == r)
        np.testing.assert_allclose(res.expert_share[r], ref)
    # overall accuracies: region accuracies weighted by the regions' test-node counts
    w = np.array([len(groups[0]), len(groups[1])], float)
    local = [float(res.region_acc[f"per-node {k} @ MoG sparsity"] @ w / w.sum()) for k in eng.CRITERIA]
    m = res.metrics
    assert res.mog_acc == pytest.approx(float(res.region_acc["MoG"] @ w / w.sum()), abs=1e-6)
    assert m["best_global_acc"] == pytest.approx(max(res.matched_acc.values()))
    assert m["mog_margin"] == pytest.approx(res.mog_acc - max(res.matched_acc.values()))
    assert m["best_local_acc"] == pytest.approx(max(local), abs=1e-6)
    assert eng.CRITERIA[int(m["best_local"])] == eng.CRITERIA[int(np.argmax(local))]
    assert m["mog_margin_local"] == pytest.approx(res.mog_acc - max(local), abs=1e-6)


def test_run_times_a_larger_graph_sparsified_like_the_mog_graph(spied_run):
    """The timing graph has timing_nodes nodes, its sparsified copy is a subgraph with the reported sparsity, and
    the trained router removes about as many edges there as on the training graph (same family)."""
    c, res, rec = spied_run
    full, mog = rec["timing"]
    assert full.shape == (c.timing_nodes, c.timing_nodes)
    assert (mog - mog.multiply(full)).count_nonzero() == 0
    sparsity = 1 - edge_list(mog).shape[0] / edge_list(full).shape[0]
    assert res.metrics["timing_sparsity"] == pytest.approx(sparsity)
    assert abs(sparsity - res.mog_sparsity) < 0.1


def test_router_gnn_aggregates_each_nodes_incoming_edges(monkeypatch):
    """Inside the router's GNN a node averages over its own in-edges (weighted by its own gates): every
    propagation and its normaliser run along src -> dst, as the edge weights are indexed."""
    c, A, X, y, tr, dst, src, masks, Z = _router_setup(epochs=2)
    calls = {"prop": [], "deg": []}
    orig_prop, orig_deg, orig_w = eng.propagate, eng.weighted_degree, eng.edge_weights

    def prop(h, w, s, d, norm):
        calls["prop"].append((s.numpy().copy(), d.numpy().copy()))
        return orig_prop(h, w, s, d, norm)

    def wdeg(w, d, n):
        calls["deg"].append(d.numpy().copy())
        return orig_deg(w, d, n)

    def ew(G, d, MtT):
        calls.setdefault("w", []).append(d.numpy().copy())
        return orig_w(G, d, MtT)

    monkeypatch.setattr(eng, "propagate", prop)
    monkeypatch.setattr(eng, "weighted_degree", wdeg)
    monkeypatch.setattr(eng, "edge_weights", ew)
    eng.train_router(c, A, X, y, tr, dst, src, masks, Z)
    assert len(calls["prop"]) == 2 * c.epochs and len(calls["deg"]) == c.epochs
    for s, d in calls["prop"]:
        np.testing.assert_array_equal(s, src)
        np.testing.assert_array_equal(d, dst)
    for d in calls["deg"] + calls["w"]:
        np.testing.assert_array_equal(d, dst)


def test_local_sparsify_lands_on_the_closest_reachable_edge_count(small):
    """The edge count of the uniform per-node rule grows in steps with rho (node i's quota ceil(rho d_i) steps at
    rho = q / d_i); the rule must end at least as close to the asked-for count as the best of those steps,
    found here by trying one rho inside every gap between them."""
    A, _, _, _, dst, src, scores = small
    n = A.shape[0]
    s = scores["degree"]
    deg = np.bincount(dst, minlength=n)
    rank, _ = eng.ego_rank(dst, s, n)

    def count(rho):
        quota = np.maximum(1, np.ceil(rho * deg - 1e-9)).astype(int)
        kept = rank < quota[dst]
        key = np.minimum(dst[kept], src[kept]) * n + np.maximum(dst[kept], src[kept])
        return len(np.unique(key))

    steps = np.unique([q / d for d in set(deg[deg > 0].tolist()) for q in range(d + 1)])
    reachable = np.array(sorted({count(r) for r in np.concatenate([[1.0], (steps[1:] + steps[:-1]) / 2])}))
    n_edges = edge_list(A).shape[0]
    for frac in np.linspace(0.22, 0.95, 12):
        target = int(frac * n_edges)
        got = edge_list(eng.local_sparsify(A, dst, src, s, target)).shape[0]
        # (the rounding guard 1e-9 in the quota adds a few in-between counts at rho within 1e-9 of a step)
        assert abs(got - target) <= np.abs(reachable - target).min(), (target, got)


# ----------------------------------------------------------------------------- what the page draws


def test_page_numbers_follow_the_result(default_result):
    """The default page, read back: the MoG star sits at the router's sparsity and accuracy, the caption names the
    global rule with the best accuracy at the matched edge count and the MoG's lead over it (both recomputed from
    the matched accuracies), the per-region accuracy map has the noisy region in its first column, and the
    per-region caption names each region's best sparsified graph with MoG's own value for that region."""

    res = default_result
    at = open_page("mixture_of_graphs", seed=(("engine.mixture_of_graphs", eng.Config(), default_result),))
    figs = charts(at)

    star = next(t for t in figs["acc-sparsity"] if t.get("name") == "MoG")
    assert values(star["x"])[0] == pytest.approx(res.mog_sparsity)
    assert values(star["y"])[0] == pytest.approx(res.mog_acc)

    best = sorted(res.matched_acc.items(), key=lambda kv: -kv[1])[0]
    lead = res.mog_acc - best[1]
    assert lead >= eng.MARGIN_BAR        # the default run takes the caption's "ahead" branch
    assert any(f"ahead of the best global rule ({best[0]}) by {lead:.3f}" in c.value for c in at.caption)

    names = list(res.region_acc)
    hm = next(t for t in figs["racc"] if t["type"] == "heatmap")
    assert list(hm["x"]) == ["noisy region", "clean region"] and list(hm["y"]) == names
    z = values(hm["z"])
    for r, k in enumerate(names):
        np.testing.assert_allclose(z[r], res.region_acc[k])

    keep = next(t for t in figs["keep"] if t["type"] == "heatmap")
    assert list(keep["y"]) == names
    zk = values(keep["z"])
    for r, k in enumerate(names):
        np.testing.assert_allclose(zk[r], res.region_keep[k])
    assert np.allclose(res.region_keep["full graph"], 1.0)     # the unpruned graph keeps every edge

    cap = next(c.value for c in at.caption if c.value.startswith("Best sparsified graph per region"))
    for r, region in enumerate(("noisy", "clean")):
        pruned = {k: v[r] for k, v in res.region_acc.items() if k != "full graph"}
        top = max(pruned.values())
        leader = next(k for k in names if k in pruned and pruned[k] == top)
        part = f"{region} region: {leader} {top:.2f}"
        if leader != "MoG":
            part += f" (MoG {res.region_acc['MoG'][r]:.2f})"
        assert part in cap


def test_page_timing_bars_are_each_graphs_own_median(default_result):
    """The inference-time bars: "full graph" is the median of the full graph's timed rounds and "MoG graph" the
    median of the MoG graph's, in ms (recomputed here from the raw rounds, which the engine keeps apart). The two
    medians differ at the default, so bars with swapped labels or values fail."""
    res = default_result
    at = open_page("mixture_of_graphs", seed=(("engine.mixture_of_graphs", eng.Config(), default_result),))
    bar = charts(at)["time"][0]
    assert list(bar["x"]) == ["full graph", "MoG graph"]
    want = [np.median(res.time_full) * 1e3, np.median(res.time_mog) * 1e3]
    np.testing.assert_allclose(values(bar["y"]), want, rtol=1e-12)
    assert want[0] != pytest.approx(want[1], rel=1e-3)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_router_is_trained_on_the_gcns_training_nodes_only(spied_run):
    c, res, rec = spied_run
    adjs, tr, va, tests, _, _ = rec["gcn"]
    np.testing.assert_array_equal(np.sort(rec["router_train"]), np.sort(tr))
    held_out = set(np.asarray(va).tolist()) | set(np.asarray(tests).tolist())
    assert not set(rec["router_train"].tolist()) & held_out
    assert len(rec["router_train"]) == int(0.3 * c.n_nodes)


def _criteria(A, X):
    """Undirected edge scores per criterion, computed here with networkx and scikit-learn."""
    e = edge_list(A)
    g = nx.from_scipy_sparse_array(A)
    cos = cosine_similarity(X)
    jac = {(min(u, v), max(u, v)): p for u, v, p in nx.jaccard_coefficient(g, [tuple(x) for x in e.tolist()])}
    deg = dict(g.degree())
    return e, {"feature": np.array([cos[u, v] for u, v in e]),
               "jaccard": np.array([jac[(u, v)] for u, v in e]),
               "degree": np.array([1 / math.sqrt(deg[u] * deg[v]) for u, v in e])}


def test_matched_baselines_keep_their_own_criterions_best_edges(spied_run):
    """'global <criterion> @ MoG sparsity' keeps the MoG edge count of edges with the highest score of that
    criterion (every kept edge scores at least as high as every dropped one); 'per-node <criterion>' is the
    uniform per-node rule of that criterion, so every node keeps its own best edge by it."""
    c, res, rec = spied_run
    adjs = rec["gcn"][0]
    A = adjs[0]
    X = eng.make_graph(c, np.random.default_rng(c.seed))[1]
    e, score = _criteria(A, X)
    nc = len(eng.CRITERIA)
    for j, name in enumerate(eng.CRITERIA):
        kept = {tuple(x) for x in edge_list(adjs[2 + j]).tolist()}
        inside = np.array([tuple(x) in kept for x in e.tolist()])
        assert inside.sum() == res.edges_mog
        assert score[name][inside].min() >= score[name][~inside].max() - 1e-6, name
        # per-node rule: the engine's uniform-rho rule on this criterion's scores (scores checked against
        # networkx / scikit-learn in test_scores_match_networkx_and_sklearn), and, independently, every node
        # keeps its own best edge by this criterion (quota ceil(rho d) >= 1; a tie for the best is let pass)
        dst, src = eng.directed_edges(A)
        ref = eng.local_sparsify(A, dst, src, eng.edge_scores(A, X, src, dst)[name], res.edges_mog)
        assert (adjs[2 + nc + j] != ref).nnz == 0, name
        local = {tuple(x) for x in edge_list(adjs[2 + nc + j]).tolist()}
        kept_l = np.array([tuple(x) in local for x in e.tolist()])
        for node in range(A.shape[0]):
            at = np.flatnonzero((e[:, 0] == node) | (e[:, 1] == node))
            if len(at):
                s = score[name][at]
                assert kept_l[at[np.argmax(s)]] or np.sum(s >= s.max() - 1e-9) > 1, (name, node)
