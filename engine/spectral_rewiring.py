"""GNNs Getting ComFy (ICLR 2025): spectral-gap, community and feature-similarity rewiring, live on SBMs.

Per seed we draw one stochastic block model (the topology) and two labelings of it:
an *aligned* one (label = block) and a *misaligned* one (label = block only with
probability ``alignment``, otherwise random); features are Gaussian around class
means, so they follow the labels, not the blocks. Every rewiring method adds
``budget`` edges and removes ``budget`` edges:

- spectral greedy (max / min lambda_2): one edge at a time, the flip with the best
  first-order eigenvalue change, the Fiedler vector recomputed before every
  (addition, deletion) pair;
- ComMa: Louvain communities once, then random intra-community additions plus
  inter-community deletions (strengthen, lowers lambda_2) or the reverse (weaken);
- FeaSt: add the most cosine-similar non-adjacent pairs, delete the least similar edges;
- ComFy: the same similarity ranking, but inside each community block (pair of
  communities) with equal additions and deletions per block, so community densities stay put.

A 2-layer GCN is trained on every graph (all models at once, engine.graphs.train_gcns).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from engine import graphs as G
from engine.core import Claim, Float, InputError, Int, param, seed_everything
from engine.core.progress import ProgressSpan, report

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

METHODS = ("none", "spec_max", "spec_min", "comma_weaken", "comma_strengthen", "feast", "comfy")
METHOD_LABELS = {
    "none": "Unrewired",
    "spec_max": "Spectral ↑λ₂ (greedy)",
    "spec_min": "Spectral ↓λ₂ (greedy)",
    "comma_weaken": "ComMa: weaken communities",
    "comma_strengthen": "ComMa: strengthen communities",
    "feast": "FeaSt (feature similarity)",
    "comfy": "ComFy (similarity within community blocks)",
}
TOPOLOGY_ONLY = ("none", "spec_max", "spec_min", "comma_weaken", "comma_strengthen")
REGIMES = ("aligned", "misaligned")
FEATURE_DIM = 8
TRAIN_FRAC = 0.1


@dataclass(frozen=True)
class Config:
    n_nodes: int = param(200, Int(100, 320, "Nodes", step=20, help="nodes in the stochastic block model"))
    n_communities: int = param(4, Int(2, 6, "Communities (= classes)",
                                      help="planted SBM blocks; the number of classes is the same"))
    p_in: float = param(0.12, Float(0.04, 0.30, "p_in (edge prob. inside a block)", step=0.01, fmt="%.2f"))
    p_out: float = param(0.01, Float(0.0, 0.05, "p_out (edge prob. across blocks)", step=0.0025, fmt="%.4f"))
    alignment: float = param(0.25, Float(0.0, 1.0, "Label–community alignment (2nd graph)", step=0.05,
                                         fmt="%.2f",
                                         help="in the misaligned graph a node's label equals its block with "
                                              "this probability, otherwise it is random; the first graph is "
                                              "always fully aligned"))
    feature_noise: float = param(1.2, Float(0.2, 3.0, "Feature noise σ", step=0.1, fmt="%.1f",
                                            help="node features = class mean (unit norm) + σ·Gaussian noise"))
    budget: int = param(80, Int(10, 150, "Edge budget (added and removed, each)", step=5,
                                help="every method adds this many edges and removes this many"))
    n_seeds: int = param(3, Int(1, 5, "Seeds (graphs averaged)",
                                help="independent SBM draws; results show mean ± std"))
    epochs: int = param(100, Int(50, 250, "GCN training epochs", step=25, group="Advanced"))
    hidden: int = param(16, Int(8, 64, "GCN hidden units", step=8, group="Advanced"))
    seed: int = param(0, Int(0, 99, "Seed"))

    def __post_init__(self):
        if self.p_out >= self.p_in:
            raise ValueError("p_out must be smaller than p_in (otherwise there are no communities)")


# largest widget setting (largest dense graph, all sizes at max): 14 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(n_nodes=320, n_communities=6, p_in=0.3, p_out=0.05, budget=150, n_seeds=5, epochs=250,
                      hidden=64)


@dataclass
class Result:
    methods: list
    regimes: list
    # per (regime, method, seed) arrays of shape (R, M, S)
    gap: np.ndarray
    homophily: np.ndarray
    modularity: np.ndarray
    accuracy: np.ndarray
    n_added: np.ndarray
    n_removed: np.ndarray
    rewire_time: np.ndarray          # (R, M, S) seconds; ComMa / ComFy include the Louvain time
    comm_detect_time: np.ndarray     # (S,) Louvain time (included in ComMa / ComFy times)
    nmi: np.ndarray                  # (R, S) label-community NMI on the original graph
    # drawing data for the first seed
    pos: np.ndarray                  # (n, 2)
    edges: np.ndarray                # (E, 2) original edges
    labels: np.ndarray               # (R, n)
    communities: np.ndarray          # (n,) Louvain on the original graph
    blocks: np.ndarray               # (n,) planted blocks
    added: dict = field(default_factory=dict)    # "regime/method" -> (k, 2) int array
    removed: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- rewiring methods


def _upper_mask(n: int) -> np.ndarray:
    return np.triu(np.ones((n, n), dtype=bool), k=1)


def flip_scores(x: np.ndarray, lam: float) -> np.ndarray:
    """First-order change of lambda_2 when ADDING edge (u, v): (x_u - x_v)^2 - lambda (x_u^2 + x_v^2).

    From the generalised problem L x = lambda D x with x^T D x = 1: adding (u, v) adds
    (e_u - e_v)(e_u - e_v)^T to L and e_u e_u^T + e_v e_v^T to D. Deleting flips the sign.
    """
    x2 = x * x
    diff = x[:, None] - x[None, :]
    return diff * diff - lam * (x2[:, None] + x2[None, :])


def spectral_greedy(A, budget: int, direction: int, progress=None, tol: float = 1e-6):
    """Greedy lambda_2 maximisation (direction=+1) or minimisation (-1) by edge flips.

    Alternates one addition and one deletion; before every (addition, deletion) pair the
    Fiedler pair is recomputed (warm-started eigsh), and each flip is the one with the
    largest predicted change in the wanted direction. Deletions never leave a node without neighbours;
    an edge that was added is never removed again, and vice versa.
    """
    Af = sp.csr_array(A, dtype=np.float64).toarray()
    n = Af.shape[0]
    iu, ju = np.triu_indices(n, k=1)
    is_edge = Af[iu, ju] > 0
    touched = np.zeros(iu.shape[0], dtype=bool)
    deg = Af.sum(1)
    added, removed = [], []
    v0 = None
    for step in range(2 * int(budget)):
        if step % 2 == 0:   # one eigen-solve per (addition, deletion) pair
            lam, x = G.fiedler(Af, v0=v0, tol=tol)
            v0 = np.sqrt(deg) * x   # warm start: the previous eigenvector
            xu, xv = x[iu], x[ju]
            base = direction * ((xu - xv) ** 2 - lam * (xu * xu + xv * xv))   # see flip_scores
        score = base
        if step % 2 == 0:   # addition
            cand = ~is_edge & ~touched
        else:               # deletion
            score = -score
            ok = deg >= 2
            cand = is_edge & ~touched & ok[iu] & ok[ju]
        if not cand.any():
            continue
        p = int(np.where(cand, score, -np.inf).argmax())
        u, v = int(iu[p]), int(ju[p])
        touched[p] = True
        new = 1.0 if step % 2 == 0 else 0.0
        Af[u, v] = Af[v, u] = new
        is_edge[p] = new > 0
        deg[u] += 2 * new - 1
        deg[v] += 2 * new - 1
        (added if new else removed).append((u, v))
        report(progress, (step + 1) / (2 * budget), "greedy spectral rewiring")
    return _as_edges(added), _as_edges(removed)


def _as_edges(lst) -> np.ndarray:
    return np.array(lst, dtype=np.int64).reshape(-1, 2)


def _guarded_deletions(order_u, order_v, deg: np.ndarray, k: int) -> np.ndarray:
    """Take edges in the given order, skipping any whose removal would isolate a node."""
    deg = deg.copy()
    out = []
    for u, v in zip(order_u, order_v):
        if len(out) >= k:
            break
        if deg[u] >= 2 and deg[v] >= 2:
            out.append((int(u), int(v)))
            deg[u] -= 1
            deg[v] -= 1
    return _as_edges(out)


def comma(A, comm: np.ndarray, budget: int, strengthen: bool, rng: np.random.Generator):
    """ComMa: community-guided random rewiring.

    strengthen: add random non-edges inside communities, delete random edges between them;
    weaken: add random non-edges between communities, delete random edges inside them.
    """
    Adj = sp.csr_array(A).toarray() > 0
    n = Adj.shape[0]
    upper = _upper_mask(n)
    same = comm[:, None] == comm[None, :]
    add_pool = upper & ~Adj & (same if strengthen else ~same)
    del_pool = upper & Adj & (~same if strengthen else same)
    au, av = np.nonzero(add_pool)
    pick = rng.permutation(au.size)[: int(budget)]
    add = np.stack([au[pick], av[pick]], axis=1)
    du, dv = np.nonzero(del_pool)
    order = rng.permutation(du.size)
    rem = _guarded_deletions(du[order], dv[order], Adj.sum(1), int(budget))
    return add.astype(np.int64), rem


def cosine_similarity(X: np.ndarray) -> np.ndarray:
    Xn = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    return Xn @ Xn.T


def _similarity_edits(S, Adj, pair_mask, k_add: int, k_del: int, deg):
    """Within ``pair_mask``: the k_add most similar non-edges above the mean edge similarity, and
    the k_del least similar edges below it (never isolating a node)."""
    e_mask = pair_mask & Adj
    ne_mask = pair_mask & ~Adj
    if e_mask.any():
        mean_sim = float(S[e_mask].mean())
    else:
        mean_sim = -np.inf
    au, av = np.nonzero(ne_mask & (S > mean_sim))
    order = np.argsort(-S[au, av], kind="stable")[:k_add]
    add = np.stack([au[order], av[order]], axis=1).astype(np.int64)
    du, dv = np.nonzero(e_mask & (S < mean_sim))
    order = np.argsort(S[du, dv], kind="stable")
    rem = _guarded_deletions(du[order], dv[order], deg, k_del)
    return add, rem


def feast(A, X: np.ndarray, budget: int):
    """FeaSt: raise global feature similarity of edges (a proxy for homophily)."""
    Adj = sp.csr_array(A).toarray() > 0
    S = cosine_similarity(X)
    return _similarity_edits(S, Adj, _upper_mask(Adj.shape[0]), int(budget), int(budget), Adj.sum(1))


def _allocate(k: int, weights: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Split k into integers proportional to ``weights`` without exceeding ``caps`` (water-filling)."""
    alloc = np.zeros(len(weights), dtype=np.int64)
    caps = np.asarray(caps, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    for _ in range(len(weights) + 1):
        left = k - int(alloc.sum())
        open_ = (alloc < caps) & (w > 0)
        if left <= 0 or not open_.any():
            break
        share = np.zeros_like(w)
        share[open_] = left * w[open_] / w[open_].sum()
        extra = np.floor(share).astype(np.int64)
        rem = left - int(extra.sum())
        frac_order = np.argsort(-(share - extra))
        for i in frac_order[:rem]:
            if open_[i]:
                extra[i] += 1
        alloc = np.minimum(alloc + extra, caps)
    return alloc


def comfy(A, X: np.ndarray, comm: np.ndarray, budget: int):
    """ComFy: feature-similarity rewiring restricted to community blocks.

    The budget is split over blocks (pairs of communities, including a community with itself)
    in proportion to the block's number of node pairs; each block gets as many additions as
    deletions, so the number of edges inside and between communities does not change.
    """
    Adj = sp.csr_array(A).toarray() > 0
    n = Adj.shape[0]
    upper = _upper_mask(n)
    S = cosine_similarity(X)
    ids = np.unique(comm)
    blocks, weights, caps = [], [], []
    for a_i, a in enumerate(ids):
        for b in ids[a_i:]:
            ma, mb = comm == a, comm == b
            mask = upper & ((ma[:, None] & mb[None, :]) | (mb[:, None] & ma[None, :]))
            if not mask.any():
                continue
            e = mask & Adj
            mean_sim = float(S[e].mean()) if e.any() else -np.inf
            cap = min(int((mask & ~Adj & (S > mean_sim)).sum()), int((e & (S < mean_sim)).sum()))
            blocks.append(mask)
            weights.append(float(mask.sum()))
            caps.append(cap)
    alloc = _allocate(int(budget), np.array(weights), np.array(caps))
    adds, rems = [], []
    deg = Adj.sum(1)
    for mask, k in zip(blocks, alloc):
        if k <= 0:
            continue
        a, r = _similarity_edits(S, Adj, mask, int(k), int(k), deg)
        m = min(len(a), len(r))   # keep the block's edge count unchanged
        adds.append(a[:m])
        rems.append(r[:m])
        for u, v in r[:m]:
            deg[u] -= 1
            deg[v] -= 1
    add = np.concatenate(adds) if adds else _as_edges([])
    rem = np.concatenate(rems) if rems else _as_edges([])
    return add, rem


# ----------------------------------------------------------------------------- the experiment


def _nmi(a, b) -> float:
    """Normalised mutual information of two labelings, I(a; b) / mean(H(a), H(b)) in nats.

    The same definition as scikit-learn's default (arithmetic normalisation; tests compare the two),
    computed here so that a run need not import scikit-learn (about a second of a cold start).
    """
    _, ai = np.unique(np.asarray(a), return_inverse=True)
    _, bi = np.unique(np.asarray(b), return_inverse=True)
    ka, kb = int(ai.max()) + 1, int(bi.max()) + 1
    if ka == kb == 1:
        return 1.0
    P = np.bincount(ai * kb + bi, minlength=ka * kb).reshape(ka, kb) / len(ai)
    pa, pb = P.sum(1), P.sum(0)
    nz = P > 0
    mi = float(np.sum(P[nz] * np.log(P[nz] / np.outer(pa, pb)[nz])))
    ha, hb = (float(-np.sum(p[p > 0] * np.log(p[p > 0]))) for p in (pa, pb))
    return float(mi / max((ha + hb) / 2, np.finfo(np.float64).eps))


def run(config: Config, progress=None) -> Result:
    from engine.core import get_device
    from engine.core.nn import set_cpu_threads

    set_cpu_threads(1)  # tiny tensors: one thread is fastest, and robust on a busy machine
    rng = seed_everything(config.seed, torch_too=True)
    device = get_device()
    S, R, M = config.n_seeds, len(REGIMES), len(METHODS)
    n, k = config.n_nodes, config.n_communities
    seeds = rng.integers(0, 2**31 - 1, size=S)

    shape = (R, M, S)
    gap, hom, mod, acc = (np.full(shape, np.nan) for _ in range(4))
    n_add, n_rem, t_rew = (np.zeros(shape) for _ in range(3))
    t_comm = np.zeros(S)
    nmi = np.zeros((R, S))
    draw: dict = {}
    added_d, removed_d = {}, {}
    adjs, feats, labs, trs, vas, tes, slots = [], [], [], [], [], [], []

    # warm up (first calls pay one-off import / dispatch costs that are no part of either method)
    _w, _ = G.sbm_adjacency([8, 8], 0.8, 0.1, np.random.default_rng(0))
    G.louvain(_w)
    spectral_greedy(_w, 1, +1)

    span = ProgressSpan(progress, 0.0, 0.6)
    for s in range(S):
        srng = np.random.default_rng(int(seeds[s]))
        sub = span.sub(s / S, (s + 1) / S, f"graph {s + 1}/{S}: ")
        sizes = [n // k + (1 if b < n % k else 0) for b in range(k)]
        A, blocks = G.sbm_adjacency(sizes, config.p_in, config.p_out, srng)
        if G.edge_list(A).shape[0] < 2 * config.budget:
            raise InputError("The graph has too few edges for this budget: raise p_in / p_out or lower the "
                             "edge budget.")
        lab_al = blocks.astype(np.int64)
        lab_mis = G.aligned_labels(blocks, config.alignment, k, srng)
        q, _ = np.linalg.qr(srng.standard_normal((FEATURE_DIM, k)))
        means = q.T
        eps = srng.standard_normal((n, FEATURE_DIM))
        X = {"aligned": (means[lab_al] + config.feature_noise * eps).astype(np.float32),
             "misaligned": (means[lab_mis] + config.feature_noise * eps).astype(np.float32)}
        Y = {"aligned": lab_al, "misaligned": lab_mis}
        perm = srng.permutation(n)
        n_tr, n_va = int(TRAIN_FRAC * n), int(0.2 * n)
        tr, va, te = perm[:n_tr], perm[n_tr:n_tr + n_va], perm[n_tr + n_va:]

        t0 = time.perf_counter()
        comm = G.louvain(A, seed=int(seeds[s]) % 10_000)
        t_comm[s] = time.perf_counter() - t0

        edits: dict = {"none": (_as_edges([]), _as_edges([]))}
        times: dict = {"none": 0.0}
        for name, direction in (("spec_max", +1), ("spec_min", -1)):
            t0 = time.perf_counter()
            edits[name] = spectral_greedy(A, config.budget, direction,
                                          progress=sub.sub(0.45 * (direction < 0), 0.45 * (1 + (direction < 0)),
                                                           f"graph {s + 1}/{S}: {METHOD_LABELS[name]}: "))
            times[name] = time.perf_counter() - t0
        for name, strengthen in (("comma_weaken", False), ("comma_strengthen", True)):
            t0 = time.perf_counter()
            edits[name] = comma(A, comm, config.budget, strengthen, srng)
            times[name] = time.perf_counter() - t0 + t_comm[s]
        report(sub, 0.95, "feature-guided rewiring")

        topo_graphs = {m: G.apply_edits(A, *edits[m]) for m in TOPOLOGY_ONLY}
        topo_gap = {m: G.spectral_gap(topo_graphs[m]) for m in TOPOLOGY_ONLY}
        for r_i, reg in enumerate(REGIMES):
            nmi[r_i, s] = _nmi(comm, Y[reg])
            reg_edits = dict(edits)
            reg_times = dict(times)
            t0 = time.perf_counter()
            reg_edits["feast"] = feast(A, X[reg], config.budget)
            reg_times["feast"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            reg_edits["comfy"] = comfy(A, X[reg], comm, config.budget)
            reg_times["comfy"] = time.perf_counter() - t0 + t_comm[s]
            for m_i, m in enumerate(METHODS):
                Ag = topo_graphs[m] if m in topo_graphs else G.apply_edits(A, *reg_edits[m])
                gap[r_i, m_i, s] = topo_gap[m] if m in topo_gap else G.spectral_gap(Ag)
                hom[r_i, m_i, s] = G.edge_homophily(Ag, Y[reg])
                mod[r_i, m_i, s] = G.modularity(Ag, comm)
                n_add[r_i, m_i, s] = len(reg_edits[m][0])
                n_rem[r_i, m_i, s] = len(reg_edits[m][1])
                t_rew[r_i, m_i, s] = reg_times[m]
                adjs.append(Ag)
                feats.append(X[reg])
                labs.append(Y[reg])
                trs.append(tr)
                vas.append(va)
                tes.append(te)
                slots.append((r_i, m_i, s))
                if s == 0:
                    added_d[f"{reg}/{m}"] = reg_edits[m][0]
                    removed_d[f"{reg}/{m}"] = reg_edits[m][1]
        if s == 0:
            draw = dict(pos=G.block_layout(blocks, np.random.default_rng(int(seeds[0]) + 1)),
                        edges=G.edge_list(A), labels=np.stack([Y[r] for r in REGIMES]),
                        communities=comm, blocks=blocks)

    out = G.train_gcns(adjs, feats, labs, trs, vas, tes, hidden=config.hidden, epochs=config.epochs,
                       seed=config.seed, same_init=True, progress=ProgressSpan(progress, 0.6, 1.0),
                       device=device)
    for (r_i, m_i, s), a in zip(slots, out.test_acc):
        acc[r_i, m_i, s] = a

    res = Result(methods=list(METHODS), regimes=list(REGIMES), gap=gap, homophily=hom, modularity=mod,
                 accuracy=acc, n_added=n_add, n_removed=n_rem, rewire_time=t_rew, comm_detect_time=t_comm,
                 nmi=nmi, added=added_d, removed=removed_d, **draw)
    res.metrics = _metrics(res)
    res.metrics["alignment"] = float(config.alignment)
    report(progress, 1.0, "done")
    return res


def _idx(m: str) -> int:
    return METHODS.index(m)


def _metrics(res: Result) -> dict:
    g, acc, mod, t = res.gap[0], res.accuracy, res.modularity[0], res.rewire_time[0]
    none, smax, smin = _idx("none"), _idx("spec_max"), _idx("spec_min")
    cw, cs, fe, cf = _idx("comma_weaken"), _idx("comma_strengthen"), _idx("feast"), _idx("comfy")
    d_spec_max, d_spec_min = g[smax] - g[none], g[smin] - g[none]
    d_comma_w, d_comma_s = g[cw] - g[none], g[cs] - g[none]
    # direction agreement per seed and direction: same sign as the spectral method, and non-zero
    agree = np.concatenate([(np.sign(d_comma_w) == np.sign(d_spec_max)) & (d_spec_max > 0),
                            (np.sign(d_comma_s) == np.sign(d_spec_min)) & (d_spec_min < 0)])
    # spectral rewiring changes community strength: max lowers modularity, min raises it
    comm_agree = np.concatenate([mod[smax] < mod[none], mod[smin] > mod[none]])
    t_spec = float(t[smax].sum() + t[smin].sum())
    t_comma = float(t[cw].sum() + t[cs].sum())
    al, mis = 0, 1
    gain_aligned = acc[al, cs] - acc[al, none]
    feat_best = np.maximum(acc[mis, fe], acc[mis, cf])
    comma_best = np.maximum(acc[mis, cs], acc[mis, cw])
    m = {
        "dgap_spec_max": float(d_spec_max.mean()), "dgap_spec_min": float(d_spec_min.mean()),
        "dgap_comma_weaken": float(d_comma_w.mean()), "dgap_comma_strengthen": float(d_comma_s.mean()),
        "direction_agreement": float(agree.mean()),
        "community_strength_agreement": float(comm_agree.mean()),
        "time_spectral_s": t_spec, "time_comma_s": t_comma,
        "speedup_comma": t_spec / max(t_comma, 1e-9),
        "acc_aligned_none": float(acc[al, none].mean()),
        "acc_aligned_comma_strengthen": float(acc[al, cs].mean()),
        "gain_aligned_comma_strengthen": float(gain_aligned.mean()),
        "gain_aligned_comma_strengthen_std": float(gain_aligned.std()),
        "acc_mis_feast": float(acc[mis, fe].mean()), "acc_mis_comfy": float(acc[mis, cf].mean()),
        "acc_mis_comma_best": float(comma_best.mean()),
        "acc_mis_none": float(acc[mis, none].mean()),
        "acc_mis_comma_strengthen": float(acc[mis, cs].mean()),
        "acc_mis_comma_weaken": float(acc[mis, cw].mean()),
        "margin_mis_feature_over_strengthen": float((feat_best - acc[mis, cs]).mean()),
        "margin_mis_feature_over_strengthen_std": float((feat_best - acc[mis, cs]).std()),
        "margin_mis_feature_over_best_comma": float(feat_best.mean() - comma_best.mean()),
        "hom_mis_none": float(res.homophily[mis, none].mean()),
        "hom_mis_feast": float(res.homophily[mis, fe].mean()),
        "hom_mis_comfy": float(res.homophily[mis, cf].mean()),
        "hom_mis_comma_strengthen": float(res.homophily[mis, cs].mean()),
        "hom_margin_mis": float((np.minimum(res.homophily[mis, fe], res.homophily[mis, cf])
                                 - res.homophily[mis, cs]).mean()),
        "nmi_aligned": float(res.nmi[0].mean()), "nmi_misaligned": float(res.nmi[1].mean()),
        "n_seeds": float(acc.shape[2]),
    }
    return m


# badges read from a clock: shown on the page, but tests do not assert their verdict (the team does not
# assert wall time in tests; timings belong to `python -m tests.bench`)
TIMING_CLAIM_LABELS = ("time(spectral greedy) / time(ComMa)",)


ALIGN_PREMISE = 0.5   # the "labels do not align" badge applies up to this label-community alignment


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    S = int(m["n_seeds"])
    return [
        Claim("Changing the spectral gap mostly changes community strength: greedy λ₂ maximisation weakens "
              "the communities (modularity drops), minimisation strengthens them",
              m["community_strength_agreement"], ">=", 1.0, label="share of seeds × directions that agree",
              fmt=".2f", detail=f"{2 * S} cases; modularity of the Louvain partition of the original graph"),
        Claim("ComMa moves the spectral gap the same way as spectral rewiring: weakening communities raises λ₂, "
              "strengthening lowers it",
              m["direction_agreement"], ">=", 1.0, label="share of seeds × directions with the same sign",
              fmt=".2f",
              detail=(f"mean Δλ₂: spectral {m['dgap_spec_max']:+.3f} / {m['dgap_spec_min']:+.3f}, ComMa "
                      f"{m['dgap_comma_weaken']:+.3f} / {m['dgap_comma_strengthen']:+.3f}")),
        Claim("…at a fraction of the cost: ComMa (Louvain included) is at least 3× faster than the greedy "
              "spectral method at the same edge budget",
              m["speedup_comma"], ">=", 3.0, label="time(spectral greedy) / time(ComMa)", fmt=".1f",
              detail=f"measured on this run: {m['time_spectral_s']:.3f} s vs {m['time_comma_s']:.3f} s, both directions, "
                     f"all seeds"),
        Claim("When communities align with labels, strengthening them raises GCN accuracy over the "
              "unrewired graph",
              m["gain_aligned_comma_strengthen"], ">=", 0.01, label="accuracy gain, aligned graph", fmt="+.3f",
              detail=(f"{m['acc_aligned_none']:.3f} → {m['acc_aligned_comma_strengthen']:.3f}, mean of {S} seeds "
                      f"(± {m['gain_aligned_comma_strengthen_std']:.3f})")),
        # "more than", not "while strengthening does not": strengthening raises it a little too at some seeds
        # (+0.007 at seed 0, +0.008 at seed 4; FeaSt +0.018 / +0.017), and the margin is thin (0.003 at seed 4)
        Claim("When they do not align, feature-guided rewiring (FeaSt and ComFy) raises the label homophily "
              "that a GCN relies on more than strengthening the communities does",
              # the premise needs labels that mostly ignore the communities: above ALIGN_PREMISE the badge
              # does not apply (nan)
              m["hom_margin_mis"] if m.get("alignment", 0.0) <= ALIGN_PREMISE else float("nan"), ">=", 0.005,
              label="min(FeaSt, ComFy) − ComMa-strengthen edge homophily, misaligned graph", fmt="+.3f",
              detail=(f"not applicable at alignment {m.get('alignment', 0.0):.2f}: the second graph's labels "
                      f"mostly follow its communities (the badge needs ≤ {ALIGN_PREMISE:g}); measured margin "
                      f"{m['hom_margin_mis']:+.3f}. " if m.get("alignment", 0.0) > ALIGN_PREMISE else "")
                     + (f"homophily: unrewired {m['hom_mis_none']:.3f}, ComMa strengthen "
                      f"{m['hom_mis_comma_strengthen']:.3f}, FeaSt {m['hom_mis_feast']:.3f}, ComFy "
                      f"{m['hom_mis_comfy']:.3f}. GCN accuracy (not a badge: within seed noise at this scale): "
                      f"FeaSt {m['acc_mis_feast']:.3f}, ComFy {m['acc_mis_comfy']:.3f}, ComMa strengthen "
                      f"{m['acc_mis_comma_strengthen']:.3f}, unrewired {m['acc_mis_none']:.3f}")),
    ]


def summary_rows(result: Result) -> list[dict]:
    """One row per (regime, method): mean and std over seeds of every measured quantity."""
    rows = []
    for r_i, reg in enumerate(result.regimes):
        for m_i, meth in enumerate(result.methods):
            row = {"graph": reg, "method": METHOD_LABELS[meth]}
            for key, arr in (("spectral_gap", result.gap), ("homophily", result.homophily),
                             ("modularity", result.modularity), ("accuracy", result.accuracy)):
                row[f"{key}_mean"] = float(np.mean(arr[r_i, m_i]))
                row[f"{key}_std"] = float(np.std(arr[r_i, m_i]))
            row["edges_added"] = float(np.mean(result.n_added[r_i, m_i]))
            row["edges_removed"] = float(np.mean(result.n_removed[r_i, m_i]))
            row["rewire_time_ms"] = 1000 * float(np.mean(result.rewire_time[r_i, m_i]))
            rows.append(row)
    return rows
