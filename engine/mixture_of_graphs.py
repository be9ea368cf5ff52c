"""Mixture of Graphs (MoG): each node picks its own sparsifier expert.

Experts are (criterion, keep-fraction) pairs. An expert prunes one node's ego-graph:
node i ranks its incident edges by the criterion's score and keeps the top
ceil(rho * deg_i). Criteria:
  - "feature":  cosine similarity of the two endpoints' features;
  - "jaccard":  Jaccard similarity of the two neighbourhoods;
  - "degree":   1 / sqrt(d_i d_j), which keeps edges between low-degree nodes.

A router (a small MLP on per-node ego statistics, noisy top-k gating as in
sparse mixtures of experts) gives every node gates over the experts. During
training the edge j -> i is weighted by sum_k g_ik * keep_k(i, j) inside a GNN that is
trained jointly with the router on the node labels, plus a penalty pulling the
expected fraction of kept edges towards the target and a load-balancing term. After
training each node keeps the ego-graph of its top expert; the union of these
sparsified ego-graphs is the MoG graph.

Evaluation: fresh 2-layer GCNs (engine.graphs.train_gcns, all trained in one batched
call from the same initial weights) on the full graph, on the MoG graph, and on
single global sparsifiers (keep the globally top-scored edges of one criterion) at
exactly the MoG graph's edge count and on a sparsity grid. Inference time of one
GCN forward pass is measured with time.perf_counter on the full and the MoG graph.

The synthetic graph has two regions with opposite needs: a dense region whose links
are noisy (many cross-class edges) but whose features are clear, and a sparse region
whose links are clean but whose features are weak. The first wants aggressive
similarity pruning, the second wants its few edges kept; one global rule must trade
one against the other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from engine.core import Choice, Claim, Float, InputError, Int, param, seed_everything
from engine.core.progress import ProgressSpan, report
from engine.graphs import edge_list, from_edges, train_gcns

CRITERIA = ("feature", "jaccard", "degree")
KEEPS = (0.2, 0.5, 0.9)
EXPERTS = [(c, r) for c in CRITERIA for r in KEEPS]
GRID = (0.5, 0.7, 0.9)
MARGIN_BAR = 0.02     # accuracy margin the two MoG badges ask for


@dataclass(frozen=True)
class Config:
    n_nodes: int = param(800, Int(400, 2400, "Nodes", step=200))
    dense_degree: int = param(40, Int(10, 60, "Mean degree, noisy region", step=5,
                                      help="the dense region whose links are noisy"))
    sparse_degree: int = param(8, Int(3, 20, "Mean degree, clean region",
                                      help="the sparse region whose links are reliable"))
    noisy_homophily: float = param(0.35, Float(0.25, 0.9, "Homophily, noisy region", step=0.05,
                                               help="share of same-class edges (4 classes: 0.25 is random)"))
    feature_noise: float = param(1.0, Float(0.3, 2.0, "Feature noise, clean region", step=0.1,
                                            help="the noisy region's features have a fixed noise of 0.5"))
    target_sparsity: float = param(0.7, Float(0.3, 0.9, "Target sparsity", step=0.05,
                                              help="fraction of edges the router is asked to remove"))
    top_k: int = param(2, Int(1, 3, "Experts mixed per node (top-k) in training"))
    epochs: int = param(60, Int(20, 160, "Router training epochs", step=20))
    timing_nodes: int = param(8000, Choice((4000, 8000, 12000), "Nodes of the timing graph",
                                           widget="select_slider", group="Inference timing",
                                           help="the trained router sparsifies a larger graph of the same "
                                                "family, and one GCN forward pass is timed on it"))
    seed: int = param(0, Int(0, 9, "Seed"))
    # fixed
    n_classes: int = 4
    dim: int = 16
    hidden: int = 32
    gcn_epochs: int = 80


# largest widget setting (every size at its max): 12.5 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(n_nodes=2400, dense_degree=60, sparse_degree=20, top_k=3, epochs=160,
                      timing_nodes=12000)


@dataclass
class Result:
    grid: np.ndarray                         # sparsity grid of the global baselines
    grid_acc: dict[str, np.ndarray]          # criterion -> test accuracy at each grid sparsity
    full_acc: float
    mog_acc: float
    mog_sparsity: float
    matched_acc: dict[str, float]            # criterion -> accuracy at MoG's sparsity
    expert_names: list[str]
    expert_share: np.ndarray                 # (2, K): fraction of nodes choosing each expert, per region
    region_acc: dict[str, np.ndarray]        # graph name -> (2,) test accuracy per region
    region_keep: dict[str, np.ndarray]       # graph name -> (2,) fraction of each region's edges kept
    homophily_kept: dict[str, float]         # graph name -> homophily of the kept edges
    router_loss: np.ndarray
    time_full: np.ndarray                    # inference timings (s), repeats
    time_mog: np.ndarray
    edges_full: int
    edges_mog: int
    metrics: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- data

def make_graph(c: Config, rng: np.random.Generator):
    """Two-region attributed graph. Returns (A, X, y, region) with region 0 = noisy, 1 = clean."""
    n, C = c.n_nodes, c.n_classes
    region = (np.arange(n) >= n // 2).astype(np.int64)
    y = rng.integers(0, C, n)
    edges = []
    for r, deg, h in ((0, c.dense_degree, c.noisy_homophily), (1, c.sparse_degree, 0.9)):
        nodes = np.flatnonzero(region == r)
        m = int(len(nodes) * deg / 2)
        u = rng.choice(nodes, m)
        same = rng.random(m) < h
        v = np.empty(m, dtype=np.int64)
        by_cls = [nodes[y[nodes] == k] for k in range(C)]
        other = [nodes[y[nodes] != k] for k in range(C)]
        for k in range(C):
            s = same & (y[u] == k)
            v[s] = rng.choice(by_cls[k], int(s.sum()))
            d = (~same) & (y[u] == k)
            v[d] = rng.choice(other[k], int(d.sum()))
        edges.append(np.stack([u, v], 1))
    m_cross = int(0.02 * n * (c.dense_degree + c.sparse_degree) / 4)   # a few links between regions
    edges.append(np.stack([rng.choice(np.flatnonzero(region == 0), m_cross),
                           rng.choice(np.flatnonzero(region == 1), m_cross)], 1))
    e = np.concatenate(edges)
    e = np.sort(e, axis=1)
    A = from_edges(e, n)
    q, _ = np.linalg.qr(rng.standard_normal((c.dim, C)))
    noise = np.where(region == 0, 0.5, c.feature_noise)[:, None]
    X = (q.T[y] + noise * rng.standard_normal((n, c.dim))).astype(np.float32)
    return A, X, y, region


# --------------------------------------------------------------------------- sparsifier experts

def edge_scores(A: sp.csr_array, X: np.ndarray, src: np.ndarray, dst: np.ndarray) -> dict[str, np.ndarray]:
    """Score of each directed edge (dst <- src) under every criterion (higher = keep)."""
    A = sp.csr_array(A)
    deg = np.asarray(A.sum(axis=1)).ravel()
    Xn = X / (np.linalg.norm(X, axis=1, keepdims=True) + 1e-12)
    feat = np.sum(Xn[src] * Xn[dst], axis=1)
    common = _common_neighbours(A, dst, src)
    jac = common / (deg[src] + deg[dst] - common)
    degs = 1.0 / np.sqrt(deg[src] * deg[dst])
    return {"feature": feat, "jaccard": jac, "degree": degs}


def _common_neighbours(A: sp.csr_array, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """(A @ A)[dst, src] for pairs that are edges of A: the number of common neighbours.

    Masking A @ A with A's own pattern (an elementwise product) and scattering the result by sorted
    (row, column) keys is much cheaper than reading the pairs out of the unsorted product one by one.
    """
    n = A.shape[0]
    # 0/1 pattern in float32: the counts are small integers, exact in float32, and the product is cheaper
    P = sp.csr_array((np.ones(A.data.shape, np.float32), A.indices, A.indptr), shape=A.shape)
    T = sp.coo_array((P @ P).multiply(P))
    key = dst.astype(np.int64) * n + src
    order = np.argsort(key, kind="stable")
    out = np.zeros(len(dst))
    out[order[np.searchsorted(key, T.row.astype(np.int64) * n + T.col, sorter=order)]] = T.data
    return out


def directed_edges(A: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """All (dst, src) pairs with A[dst, src] = 1, grouped by dst (CSR order)."""
    A = sp.csr_array(A)
    dst = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return dst, A.indices.astype(np.int64)


def ego_rank(dst: np.ndarray, score: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank of every edge among its node's edges by decreasing score, node degrees)."""
    order = np.lexsort((-score, dst))              # by node, then by decreasing score
    deg = np.bincount(dst, minlength=n)
    start = np.concatenate([[0], np.cumsum(deg)[:-1]])
    rank = np.empty(len(dst), dtype=np.int64)
    rank[order] = np.arange(len(dst)) - start[dst[order]]
    return rank, deg


def ego_keep_mask(dst: np.ndarray, score: np.ndarray, keep: float, n: int, ranked=None) -> np.ndarray:
    """For every node, keep the top ceil(keep * deg) of its incident edges by score (at least one).

    ranked: ``ego_rank(dst, score, n)`` when already computed (it depends on the score only).
    """
    rank, deg = ranked if ranked is not None else ego_rank(dst, score, n)
    quota = np.maximum(1, np.ceil(keep * deg - 1e-9)).astype(np.int64)
    return rank < quota[dst]


def expert_masks(dst: np.ndarray, scores: dict[str, np.ndarray], n: int) -> np.ndarray:
    """(K, E) keep masks of all EXPERTS; each criterion's ranking is computed once."""
    ranked = {cr: ego_rank(dst, scores[cr], n) for cr in CRITERIA}
    return np.stack([ego_keep_mask(dst, scores[cr], r, n, ranked[cr]) for cr, r in EXPERTS])


def global_sparsify(A: sp.csr_array, score_und: np.ndarray, edges: np.ndarray, n_keep: int) -> sp.csr_array:
    """Keep the n_keep undirected edges with the highest score (one global threshold)."""
    keep = np.argsort(-score_und, kind="stable")[:n_keep]
    return from_edges(edges[keep], A.shape[0])


def local_sparsify(A: sp.csr_array, dst: np.ndarray, src: np.ndarray, score: np.ndarray, n_keep: int,
                   iters: int = 30) -> sp.csr_array:
    """One per-node rule for every node: each keeps the top ceil(rho * deg) of its edges by one criterion, with
    rho found by bisection so that the union has about n_keep undirected edges (the same ego-graph pruning as an
    expert, without the router's per-node choice)."""
    n = A.shape[0]
    ranked = ego_rank(dst, score, n)

    def graph(rho):
        kept = ego_keep_mask(dst, score, rho, n, ranked)
        return from_edges(np.stack([dst[kept], src[kept]], 1), n)

    lo, hi = 0.0, 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if edge_list(graph(mid)).shape[0] < n_keep:
            lo = mid
        else:
            hi = mid
    g_lo, g_hi = graph(lo), graph(hi)
    e_lo, e_hi = edge_list(g_lo).shape[0], edge_list(g_hi).shape[0]
    return g_lo if abs(e_lo - n_keep) <= abs(e_hi - n_keep) else g_hi


def router_features(A, X, dst, src, scores) -> np.ndarray:
    """Per-node ego statistics fed to the router (standardised)."""
    n = A.shape[0]
    deg = np.bincount(dst, minlength=n).astype(float)
    cols = [np.log1p(deg)]
    for name in CRITERIA:
        s = scores[name]
        mean = np.bincount(dst, weights=s, minlength=n) / np.maximum(deg, 1)
        sq = np.bincount(dst, weights=s * s, minlength=n) / np.maximum(deg, 1)
        cols += [mean, np.sqrt(np.maximum(sq - mean**2, 0))]
    Z = np.stack(cols, 1)
    return ((Z - Z.mean(0)) / (Z.std(0) + 1e-9)).astype(np.float32)


# --------------------------------------------------------------------------- router training

def edge_weights(G, dst_t, MtT):
    """Soft edge weight of the gate mix: w_e = Σ_k G[dst_e, k] · mask_k[e] (the expected keep of edge e under
    its destination node's gates). G (n, K), dst_t (E,), MtT (E, K)."""
    return (G.index_select(0, dst_t) * MtT).sum(1)


def weighted_degree(w, dst_t, n: int):
    """1 + Σ of the kept weight into each node (the self-loop counts 1): the mean's denominator, shape (n, 1)."""
    import torch

    return (1.0 + torch.zeros(n, dtype=w.dtype).index_add_(0, dst_t, w))[:, None]


def propagate(h, w, src_t, dst_t, norm):
    """Weighted mean over each node and its in-neighbours: (h_i + Σ_{e: dst_e = i} w_e h_{src_e}) / norm_i."""
    # index_select rather than h[src_t]: its gradient is one index_add_, not a slower accumulating index_put_
    return h.clone().index_add_(0, dst_t, w[:, None] * h.index_select(0, src_t)) / norm


def router_penalties(G, keep_frac, deg):
    """(expected kept share of all edges, squared coefficient of variation of the experts' importance).

    keep (G · keep_frac) is each node's expected kept share of its in-edges; weighted by degree it sums to
    Σ_e w_e / E. Importance is the gate mass per expert; its CV² uses torch's unbiased variance."""
    keep = (G * keep_frac.T).sum(1)
    global_keep = (keep * deg).sum() / deg.sum()
    importance = G.sum(0)
    return global_keep, importance.var() / (importance.mean() ** 2 + 1e-9)


def train_router(c: Config, A, X, y, train_idx, dst, src, masks, Z, progress=None):
    """Joint training of the noisy top-k router and a 2-layer weighted-mean GNN. Returns gates (n, K)."""
    import torch

    n, K = A.shape[0], masks.shape[0]
    g = torch.Generator().manual_seed(c.seed)
    Xt = torch.as_tensor(X)
    Zt = torch.as_tensor(Z)
    yt = torch.as_tensor(y)
    dst_t = torch.as_tensor(dst)
    src_t = torch.as_tensor(src)
    Mt = torch.as_tensor(masks.astype(np.float32))                   # (K, E)
    deg = torch.as_tensor(np.bincount(dst, minlength=n).astype(np.float32))
    # fraction of each node's edges that each expert keeps (the expected keep of a gate mix)
    keep_frac = torch.zeros(K, n).index_add_(1, dst_t, Mt) / deg.clamp(min=1)
    target_keep = 1.0 - c.target_sparsity
    tr = torch.as_tensor(train_idx)
    ytr = yt[tr]
    MtT = Mt.T.contiguous()                                          # (E, K)

    torch.manual_seed(c.seed)
    router = torch.nn.Sequential(torch.nn.Linear(Z.shape[1], 32), torch.nn.ReLU(), torch.nn.Linear(32, K))
    noise_w = torch.nn.Linear(Z.shape[1], K)
    W1 = torch.nn.Linear(c.dim, c.hidden)
    W2 = torch.nn.Linear(c.hidden, c.n_classes)
    params = [*router.parameters(), *noise_w.parameters(), *W1.parameters(), *W2.parameters()]
    from engine.core.nn import make_optimizer

    opt = make_optimizer(params, lr=0.01, weight_decay=5e-4)

    def gates(train: bool):
        logits = router(Zt)
        if train:
            logits = logits + torch.randn(logits.shape, generator=g) * torch.nn.functional.softplus(noise_w(Zt))
        top = torch.topk(logits, c.top_k, dim=1)
        sparse = torch.full_like(logits, float("-inf")).scatter(1, top.indices, top.values)
        return torch.softmax(sparse, dim=1)

    losses = []
    for ep in range(c.epochs):
        opt.zero_grad(set_to_none=True)
        G = gates(True)                                              # (n, K)
        w = edge_weights(G, dst_t, MtT)                              # edge weights (E,)
        norm = weighted_degree(w, dst_t, n)                          # once per epoch
        h = torch.relu(W1(propagate(Xt, w, src_t, dst_t, norm)))     # propagate the 16-d input first
        h = torch.nn.functional.dropout(h, 0.5, training=True)
        out = propagate(W2(h), w, src_t, dst_t, norm)
        ce = torch.nn.functional.cross_entropy(out.index_select(0, tr), ytr)
        global_keep, balance = router_penalties(G, keep_frac, deg)
        loss = ce + 20.0 * (global_keep - target_keep) ** 2 + 0.01 * balance
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if ep % 10 == 0 or ep == c.epochs - 1:
            report(progress, (ep + 1) / c.epochs, f"router epoch {ep + 1}/{c.epochs}")
    with torch.no_grad():
        G = gates(False).numpy()

    def route(Z_new: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return router(torch.as_tensor(Z_new)).argmax(1).numpy()

    return G, np.array(losses), route


# --------------------------------------------------------------------------- inference timing

def time_inference(adjs: list, X: np.ndarray, hidden: int, n_cls: int, repeats: int = 7) -> list[np.ndarray]:
    """Per-round mean time (s) of a 2-layer GCN forward pass on each graph; rounds interleave the graphs.

    The forward pass is P relu(P X W1) W2 with P the GCN-normalised adjacency as a float32 CSR
    matrix (scipy's sparse-dense product, one BLAS thread).
    """
    from threadpoolctl import threadpool_limits

    from engine.graphs import gcn_norm

    mats = [sp.csr_array(gcn_norm(A), dtype=np.float32) for A in adjs]
    r = np.random.default_rng(0)
    W1 = r.standard_normal((X.shape[1], hidden)).astype(np.float32)
    W2 = r.standard_normal((hidden, n_cls)).astype(np.float32)
    Xf = np.asarray(X, dtype=np.float32)

    def forward(P):
        return P @ (np.maximum(P @ (Xf @ W1), 0.0) @ W2)

    times = [[] for _ in adjs]
    with threadpool_limits(limits=1, user_api="blas"):
        for P in mats:
            forward(P)                                               # warm-up
        t0 = time.perf_counter()
        forward(mats[0])
        # each timed unit runs several passes (about 30 ms on the first graph), so a scheduler
        # hiccup of a shared CPU is a small part of it (7 rounds of 30 ms units since 2026-12-03, 9 of
        # 40 ms before: 0.2 s less per run; the speed-up verdict at seeds 0-2 is unchanged)
        inner = int(min(50, max(1, np.ceil(0.03 / max(time.perf_counter() - t0, 1e-6)))))
        for _ in range(repeats):
            for i, P in enumerate(mats):
                t0 = time.perf_counter()
                for _ in range(inner):
                    forward(P)
                times[i].append((time.perf_counter() - t0) / inner)
    return [np.array(t) for t in times]


# --------------------------------------------------------------------------- run

def mog_graph(A, choice: np.ndarray, dst, src, masks) -> sp.csr_array:
    """Union of every node's ego-graph as pruned by the expert it chose."""
    kept = masks[choice[dst], np.arange(len(dst))]
    return from_edges(np.stack([dst[kept], src[kept]], 1), A.shape[0])


def _region_stats(A, y, region):
    e = edge_list(A)
    keep_r = np.array([np.sum((region[e[:, 0]] == r) & (region[e[:, 1]] == r)) for r in (0, 1)], float)
    hom = float(np.mean(y[e[:, 0]] == y[e[:, 1]])) if len(e) else float("nan")
    return keep_r, hom


def run(config: Config, progress=None) -> Result:
    from engine.core.nn import set_cpu_threads

    # one thread: these sparse ops are small, and extra threads only fight on a shared CPU
    set_cpu_threads(1)
    c = config
    rng = seed_everything(c.seed)
    report(progress, 0.0, "building the graph")
    A, X, y, region = make_graph(c, rng)
    n = A.shape[0]
    edges = edge_list(A)
    if len(edges) < 10:
        raise InputError("the graph has too few edges")
    dst, src = directed_edges(A)
    scores = edge_scores(A, X, src, dst)
    masks = expert_masks(dst, scores, n)   # (K, E_dir)

    perm = rng.permutation(n)
    n_tr, n_va = int(0.3 * n), int(0.2 * n)
    tr, va, te = perm[:n_tr], perm[n_tr:n_tr + n_va], perm[n_tr + n_va:]

    Z = router_features(A, X, dst, src, scores)
    G, router_loss, route = train_router(c, A, X, y, tr, dst, src, masks, Z, ProgressSpan(progress, 0.02, 0.45))
    A_mog = mog_graph(A, G.argmax(1), dst, src, masks)
    choice = G.argmax(1)
    e_mog = edge_list(A_mog).shape[0]
    mog_sparsity = 1.0 - e_mog / len(edges)

    # undirected scores for the global baselines
    und = {}
    for name in CRITERIA:
        M = sp.csr_array((scores[name], (dst, src)), shape=(n, n))
        und[name] = np.asarray(M[edges[:, 0], edges[:, 1]]).ravel()
    focus = {"full graph": A, "MoG": A_mog}
    for name in CRITERIA:
        focus[f"global {name} @ MoG sparsity"] = global_sparsify(A, und[name], edges, e_mog)
    # the router's contribution: one per-node rule for all nodes (no mixture), at the same edge count
    for name in CRITERIA:
        focus[f"per-node {name} @ MoG sparsity"] = local_sparsify(A, dst, src, scores[name], e_mog)
    grid = {}
    for s_ in GRID:
        for name in CRITERIA:
            grid[f"global {name} @ {s_:.1f}"] = global_sparsify(A, und[name], edges,
                                                                max(1, int(round((1 - s_) * len(edges)))))
    # one batched training from the same initial weights, one model per graph; each focus graph's model is
    # scored on all test nodes and, at the same epoch, on each region's test nodes
    te_r = [te[region[te] == r] for r in (0, 1)]
    fnames, gnames = list(focus), list(grid)
    adjs = [focus[k] for k in fnames] + [grid[k] for k in gnames]
    out = train_gcns(adjs, [X] * len(adjs), [y] * len(adjs), tr, va, te, hidden=c.hidden,
                     epochs=c.gcn_epochs, seed=c.seed, progress=ProgressSpan(progress, 0.45, 0.85, "evaluation: "),
                     groups=te_r)
    region_acc = {k: out.group_acc[i] for i, k in enumerate(fnames)}
    acc = {k: float(out.test_acc[i]) for i, k in enumerate(fnames)}
    acc.update({k: float(out.test_acc[len(fnames) + j]) for j, k in enumerate(gnames)})
    base_r, _ = _region_stats(A, y, region)
    region_keep, hom_kept = {}, {}
    for k in fnames:
        kr, h = _region_stats(focus[k], y, region)
        region_keep[k] = kr / np.maximum(base_r, 1)
        hom_kept[k] = h

    # inference timing on a larger graph of the same family, sparsified by the trained router
    report(progress, 0.87, f"sparsifying a {c.timing_nodes}-node graph with the trained router")
    big = replace(c, n_nodes=c.timing_nodes)
    Ab, Xb, _, _ = make_graph(big, rng)
    db, sb = directed_edges(Ab)
    sc_b = edge_scores(Ab, Xb, sb, db)
    masks_b = expert_masks(db, sc_b, Ab.shape[0])
    Ab_mog = mog_graph(Ab, route(router_features(Ab, Xb, db, sb, sc_b)), db, sb, masks_b)
    report(progress, 0.92, "timing inference")
    tf, tm = time_inference([Ab, Ab_mog], Xb, c.hidden, c.n_classes)
    big_sparsity = 1.0 - edge_list(Ab_mog).shape[0] / edge_list(Ab).shape[0]
    share = np.stack([np.bincount(choice[region == r], minlength=len(EXPERTS)) / max(1, np.sum(region == r))
                      for r in (0, 1)])
    matched = {k: float(acc[f"global {k} @ MoG sparsity"]) for k in CRITERIA}
    best_base = max(matched, key=matched.get)
    metrics = {
        "mog_acc": float(acc["MoG"]),
        "full_acc": float(acc["full graph"]),
        "best_global_acc": matched[best_base],
        "mog_margin": float(acc["MoG"]) - matched[best_base],
        "mog_sparsity": mog_sparsity,
        # rounds interleave the two graphs, so the per-round ratio cancels slow drifts of a shared CPU
        "speedup": float(np.median(tf / tm)),
        "time_full_ms": float(np.median(tf) * 1e3),
        "time_mog_ms": float(np.median(tm) * 1e3),
        "sparsity_gap": abs(mog_sparsity - c.target_sparsity),
        # the best uniform per-node rule (every node pruned by the same criterion, at the same edge count)
        "best_local_acc": max(float(acc[f"per-node {k} @ MoG sparsity"]) for k in CRITERIA),
        "mog_margin_local": float(acc["MoG"]) - max(float(acc[f"per-node {k} @ MoG sparsity"]) for k in CRITERIA),
        "best_local": float(np.argmax([acc[f"per-node {k} @ MoG sparsity"] for k in CRITERIA])),
        "timing_sparsity": big_sparsity,
        "timing_nodes": float(c.timing_nodes),
    }
    report(progress, 1.0, "done")
    return Result(np.array(GRID), {k: np.array([acc[f"global {k} @ {s:.1f}"] for s in GRID]) for k in CRITERIA},
                  float(acc["full graph"]), float(acc["MoG"]), mog_sparsity, matched,
                  [f"{cr} keep {r:.0%}" for cr, r in EXPERTS], share, region_acc, region_keep, hom_kept,
                  router_loss, tf, tm, len(edges), e_mog, metrics)


# badges read from a clock: shown on the page, but tests do not assert their verdict (the team does not
# assert wall time in tests; timings belong to `python -m tests.bench`)
TIMING_CLAIM_LABELS = ("full-graph time / MoG-graph time",)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    best = max(result.matched_acc, key=result.matched_acc.get)
    return [
        Claim("At matching sparsity, the per-node mixture of sparsifiers is more accurate than the best "
              "single global sparsifier",
              m["mog_margin"], ">=", MARGIN_BAR, label="MoG accuracy − best global accuracy",
              detail=f"MoG {m['mog_acc']:.3f} vs global {best} {m['best_global_acc']:.3f}, both at "
                     f"{m['mog_sparsity']:.0%} of edges removed (full graph {m['full_acc']:.3f})", fmt=".3f"),
        # added 2026-12-06: a router that sends every node to one expert passes the badge above (measured +0.023),
        # because pruning each node's own edges beats one global threshold here; this one needs the per-node choice
        Claim("…and more accurate than one per-node rule applied to every node (the mixture, not just local "
              "pruning, is what helps)",
              m["mog_margin_local"], ">=", MARGIN_BAR, label="MoG accuracy − best per-node rule accuracy",
              detail=f"best per-node rule: {CRITERIA[int(m['best_local'])]}, {m['best_local_acc']:.3f}, at the "
                     "same edge count", fmt=".3f"),
        Claim("GNN inference on the MoG-sparsified graph is faster (measured)",
              m["speedup"], ">=", 1.5, label="full-graph time / MoG-graph time",
              detail=f"median 2-layer GCN forward pass on a {int(m['timing_nodes'])}-node graph of the same "
                     f"family sparsified by the trained router ({m['timing_sparsity']:.0%} of edges removed): "
                     f"{m['time_full_ms']:.2f} ms vs {m['time_mog_ms']:.2f} ms",
              fmt=".2f"),
    ]
