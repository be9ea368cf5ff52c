"""UB-GOLD at small scale: unsupervised graph-level anomaly and OOD detection in one benchmark.

Every scenario has "normal" (in-distribution) graphs to train on and a test set that
mixes normal graphs with anomalous / out-of-distribution ones; detectors see no labels
and return one score per graph (higher = more anomalous). Four scenario types, each on
synthetic graph families with 4-dimensional node features:

  intrinsic anomaly   normal: two-community SBM graphs; anomalies: the same graphs with a
                      planted hub that takes over one community's edges (same edge count, the
                      community's other edges re-drawn at random)
  class-based anomaly a 3-class dataset of BA graphs whose classes differ only in the mean of
                      their node features; class 0 is normal, classes 1-2 are anomalies
  inter-dataset shift in-distribution: tree-like "molecules"; OOD: graphs from another family
                      (ring lattices with chords) of similar size
  intra-dataset shift in-distribution: SBM graphs whose features follow the communities;
                      OOD: the same graphs with node features shuffled across nodes (structure
                      and feature marginals unchanged, only their coupling shifts)

Detectors (each sees different information, on purpose):
  WL kernel + OCSVM       Weisfeiler-Lehman subtree features from degree labels (structure only),
                          cosine-normalised linear kernel, one-class SVM
  statistics + IForest    global graph statistics and spectrum plus node-feature moments,
                          isolation forest
  GIN + deep SVDD         a 3-layer GIN (sparse block-diagonal adjacency, torch) trained so that
                          normal graphs' embeddings shrink towards a fixed centre (one-class deep SVDD)

Metrics AUROC / AUPRC / FPR@95%TPR are computed here and cross-checked against
scikit-learn on every run. Robustness: the training set is contaminated with a fraction
of anomalies and AUROC is tracked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.core import Choice, Claim, Float, Int, auc_chance_bar, auc_standard_error, param, seed_everything
from engine.core.progress import ProgressSpan, report

SCENARIOS = ("intrinsic anomaly", "class-based anomaly", "inter-dataset shift", "intra-dataset shift")
METHODS = ("WL kernel + OCSVM", "statistics + IForest", "GIN + deep SVDD")
FEAT = 4


@dataclass(frozen=True)
class Config:
    n_train: int = param(80, Int(40, 160, "Training graphs per scenario", step=20))
    n_test: int = param(40, Int(20, 80, "Test graphs per class (normal / anomalous)", step=20))
    min_nodes: int = param(14, Int(8, 28, "Smallest graph (nodes)", step=2))
    max_nodes: int = param(26, Int(10, 36, "Largest graph (nodes)", step=2))
    difficulty: float = param(0.3, Float(0.0, 1.0, "Difficulty", step=0.1,
                                         help="0 = anomalies far from normal; 1 = subtle anomalies"))
    wl_iters: int = param(2, Int(1, 4, "WL iterations h"))
    nu: float = param(0.1, Float(0.02, 0.5, "OCSVM ν", step=0.02))
    svdd_epochs: int = param(30, Int(10, 100, "Deep SVDD epochs", step=10))
    contamination_max: float = param(0.3, Choice((0.1, 0.2, 0.3, 0.4), "Largest training contamination",
                                                 widget="select_slider", group="Robustness"))
    seed: int = param(0, Int(0, 9, "Seed"))

    def __post_init__(self):
        if self.max_nodes < self.min_nodes:
            raise ValueError("largest graph must have at least as many nodes as the smallest")


# largest widget setting (every size at its max): 19.6 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(n_train=160, n_test=80, min_nodes=28, max_nodes=36, wl_iters=4, svdd_epochs=100,
                      contamination_max=0.4)


@dataclass
class Result:
    auroc: np.ndarray            # (methods, scenarios)
    auprc: np.ndarray
    fpr95: np.ndarray
    sk_auroc: np.ndarray         # scikit-learn's values, same layout
    sk_auprc: np.ndarray
    sk_fpr95: np.ndarray
    contamination: np.ndarray    # (levels,)
    cont_auroc: np.ndarray       # (levels, methods, scenarios)
    scores: dict[str, dict[str, np.ndarray]]   # scenario -> method -> test scores (clean training)
    labels: dict[str, np.ndarray]              # scenario -> test labels (1 = anomalous)
    metrics: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- graphs

@dataclass
class Graph:
    A: np.ndarray   # dense symmetric 0/1 adjacency
    X: np.ndarray   # node features (n, FEAT)


def _sym(A: np.ndarray) -> np.ndarray:
    A = np.triu(A, 1)
    return (A + A.T).astype(np.float64)


def sbm_graph(n: int, rng, p_in=0.45, p_out=0.05, coupled: bool = True, shuffle: float = 0.0,
              hub: float = 0.0) -> Graph:
    """Two-community SBM; features follow the communities (dimension 0 = +-3).

    hub = q > 0: community 1 loses a random fraction q of its internal edges and one of its nodes
    becomes a hub wired to every other member (a star replaces a dense block); then random edges among the
    other members are added or removed until the graph has as many edges as before, so the anomaly is the
    hub's degree structure, not a change of density.
    shuffle = f > 0: the features of a random fraction f of the nodes are permuted among them.
    """
    z = (np.arange(n) >= n // 2).astype(int)
    P = np.where(z[:, None] == z[None, :], p_in, p_out)
    A = _sym(rng.random((n, n)) < P)
    if hub > 0:
        c1 = np.flatnonzero(z == 1)
        h, others = c1[0], c1[1:]
        n_edges = A.sum() / 2
        block = A[np.ix_(others, others)]
        A[np.ix_(others, others)] = block * (rng.random(block.shape) > hub)   # drop a fraction hub ...
        A[np.ix_(others, others)] = np.triu(A[np.ix_(others, others)], 1) + np.triu(A[np.ix_(others, others)], 1).T
        A[h, others] = A[others, h] = 1                                       # ... and wire in a star
        # restore the edge count with edges among the non-hub members (a density change would give it away)
        iu = np.triu_indices(len(others), 1)
        rows, cols = others[iu[0]], others[iu[1]]
        diff = int(round(A.sum() / 2 - n_edges))
        pick = np.flatnonzero(A[rows, cols] == (1 if diff > 0 else 0))
        sel = rng.choice(pick, size=min(abs(diff), len(pick)), replace=False)
        A[rows[sel], cols[sel]] = A[cols[sel], rows[sel]] = 0 if diff > 0 else 1
    X = rng.normal(0, 1.0, (n, FEAT))
    if coupled:
        X[:, 0] += np.where(z == 1, 3.0, -3.0)
    if shuffle > 0:
        idx = rng.permutation(n)[: max(2, int(round(shuffle * n)))]
        X[idx] = X[rng.permutation(idx)]
    return Graph(A, X)


def ba_graph(n: int, rng, m: int = 2, shift: float = 0.0, direction: np.ndarray | None = None) -> Graph:
    A = np.zeros((n, n))
    for v in range(m + 1):
        for u in range(v):
            A[u, v] = A[v, u] = 1
    deg = A.sum(1)   # kept up to date: nodes >= v have no edges yet, so deg[:v] is the degree within A[:v, :v]
    for v in range(m + 1, n):
        targets = rng.choice(v, m, replace=False, p=deg[:v] / deg[:v].sum())
        A[v, targets] = A[targets, v] = 1
        deg[targets] += 1
        deg[v] = m
    X = rng.normal(0, 1.0, (n, FEAT))
    if direction is not None:
        X += shift * direction
    return Graph(A, X)


def tree_graph(n: int, rng) -> Graph:
    A = np.zeros((n, n))
    for v in range(1, n):
        u = rng.integers(max(0, v - 4), v)   # attach near recent nodes: chain-like molecules
        A[u, v] = A[v, u] = 1
    types = rng.integers(0, FEAT, n)
    X = np.eye(FEAT)[types] * 2.0 + rng.normal(0, 0.5, (n, FEAT))
    return Graph(A, X)


def ring_graph(n: int, rng, chords: float = 0.15) -> Graph:
    A = np.zeros((n, n))
    for v in range(n):
        A[v, (v + 1) % n] = A[(v + 1) % n, v] = 1
    k = max(1, int(chords * n))
    for _ in range(k):
        a, b = rng.choice(n, 2, replace=False)
        A[a, b] = A[b, a] = 1
    types = rng.integers(0, FEAT, n)
    X = np.eye(FEAT)[types] * 2.0 + rng.normal(0, 0.5, (n, FEAT))
    return Graph(A, X)


def scenario_graphs(name: str, c: Config, rng, n_norm: int, n_anom: int) -> tuple[list[Graph], list[Graph]]:
    """(normal graphs, anomalous graphs) of one scenario."""
    d = float(c.difficulty)
    size = lambda: int(rng.integers(c.min_nodes, c.max_nodes + 1))  # noqa: E731
    if name == "intrinsic anomaly":      # a hub rewires part of one community
        norm = [sbm_graph(size(), rng) for _ in range(n_norm)]
        anom = [sbm_graph(size(), rng, hub=1.0 - 0.5 * d) for _ in range(n_anom)]
        return norm, anom
    if name == "class-based anomaly":    # classes 1 and 2 shift the feature mean up or down
        direction = np.ones(FEAT) / np.sqrt(FEAT)
        shift = 1.2 * (1.0 - 0.7 * d)
        norm = [ba_graph(size(), rng) for _ in range(n_norm)]
        anom = [ba_graph(size(), rng, shift=shift * (1 if i % 2 else -1), direction=direction)
                for i in range(n_anom)]
        return norm, anom
    if name == "inter-dataset shift":    # trees vs ring lattices with chords
        norm = [tree_graph(size(), rng) for _ in range(n_norm)]
        anom = [ring_graph(size(), rng, chords=0.02 + 0.2 * (1 - d)) for _ in range(n_anom)]
        return norm, anom
    if name == "intra-dataset shift":    # the feature-community coupling breaks
        norm = [sbm_graph(size(), rng) for _ in range(n_norm)]
        anom = [sbm_graph(size(), rng, shuffle=1.0 - 0.4 * d) for _ in range(n_anom)]
        return norm, anom
    raise ValueError(name)


# --------------------------------------------------------------------------- WL subtree kernel

def wl_features(graphs: list[Graph], h: int) -> np.ndarray:
    """Counts of Weisfeiler-Lehman subtree labels (iterations 0..h), initial label = degree.

    One relabelling dictionary is shared by all graphs, so equal columns mean equal
    subtree patterns. Returns a dense (graphs, labels) count matrix.
    """
    table: dict = {}
    rows = []
    neigh = [[np.flatnonzero(g.A[v]) for v in range(len(g.A))] for g in graphs]
    labels = [[("d", int(len(nb))) for nb in ns] for ns in neigh]
    per_graph = [dict() for _ in graphs]
    for it in range(h + 1):
        new_labels = []
        for gi, (lab, ns) in enumerate(zip(labels, neigh)):
            ids = []
            for v, lv in enumerate(lab):
                key = (it, lv) if it == 0 else (it, lv, tuple(sorted(lab[u] for u in ns[v])))
                if key not in table:
                    table[key] = len(table)
                ids.append(table[key])
                per_graph[gi][table[key]] = per_graph[gi].get(table[key], 0) + 1
            new_labels.append(ids)
        labels = new_labels
    for d in per_graph:
        rows.append(d)
    F = np.zeros((len(graphs), len(table)))
    for i, d in enumerate(rows):
        for k, v in d.items():
            F[i, k] = v
    return F


def wl_kernel(Fa: np.ndarray, Fb: np.ndarray) -> np.ndarray:
    """Cosine-normalised WL subtree kernel k(G, G') = <phi, phi'> / (|phi| |phi'|)."""
    na = np.linalg.norm(Fa, axis=1, keepdims=True) + 1e-12
    nb = np.linalg.norm(Fb, axis=1, keepdims=True) + 1e-12
    return (Fa / na) @ (Fb / nb).T


# --------------------------------------------------------------------------- statistics

def graph_statistics(g: Graph) -> np.ndarray:
    """Size, density, degree moments, clustering, normalised-Laplacian and adjacency spectrum summaries,
    node-feature means and spreads of one graph (19 numbers)."""
    return graph_statistics_all([g])[0]


def graph_statistics_all(graphs: list[Graph]) -> np.ndarray:
    """``graph_statistics`` of every graph, (graphs, 19); graphs of equal size share one stacked
    computation (one batched eigvalsh call per size instead of two per graph)."""
    out = np.zeros((len(graphs), 11 + 2 * FEAT))
    sizes = np.array([len(g.A) for g in graphs])
    for n in np.unique(sizes):
        idx = np.flatnonzero(sizes == n)
        A = np.stack([graphs[i].A for i in idx])                 # (k, n, n)
        X = np.stack([graphs[i].X for i in idx])
        deg = A.sum(2)
        m = deg.sum(1) / 2
        tri = np.einsum("kij,kji->ki", A @ A, A) / 2             # diag(A^3) / 2
        pairs = deg * (deg - 1) / 2
        clust = np.where(pairs > 0, tri / np.maximum(pairs, 1), 0).mean(1)
        dinv = np.where(deg > 0, 1 / np.sqrt(np.maximum(deg, 1e-12)), 0)
        L = (deg > 0)[:, :, None] * np.eye(n) - dinv[:, :, None] * A * dinv[:, None, :]
        ev = np.linalg.eigvalsh(L)
        adj_ev = np.linalg.eigvalsh(A)
        out[idx] = np.column_stack([np.full(len(idx), n), m, 2 * m / max(n * (n - 1), 1), deg.mean(1), deg.std(1),
                                    deg.max(1), clust, ev[:, 1] if n > 1 else np.zeros(len(idx)), ev[:, -1],
                                    ev.std(1), adj_ev[:, -1], X.mean(1), X.std(1)])
    return out


# --------------------------------------------------------------------------- GIN + deep SVDD

def _flat(sets: list[list[Graph]]):
    """Graph sets (one per model) as one node list: features (m, N, FEAT) zero-padded to the largest set,
    the block-diagonal (I + A) of all m * N nodes as scipy CSR, and each node's graph id (model-major).

    Padded rows have zero features and no edges, so a bias-free GIN keeps them exactly zero.
    """
    import scipy.sparse as sp

    sizes = [sum(len(g.A) for g in gs) for gs in sets]
    N = max(sizes)
    X = np.zeros((len(sets), N, FEAT), np.float32)
    blocks, gid = [], []
    B = len(sets[0])
    for j, gs in enumerate(sets):
        X[j, :sizes[j]] = np.concatenate([g.X for g in gs])
        blocks += [g.A for g in gs] + ([sp.csr_array((N - sizes[j], N - sizes[j]))] if N > sizes[j] else [])
        gid.append(np.r_[np.repeat(j * B + np.arange(len(gs)), [len(g.A) for g in gs]),
                         np.full(N - sizes[j], j * B)])          # padded rows are zero: any graph id will do
    AI = sp.block_diag(blocks, format="csr", dtype=np.float32) + sp.eye_array(len(sets) * N, format="csr",
                                                                               dtype=np.float32)
    return X, sp.csr_array(AI), np.concatenate(gid)


def svdd_scores(jobs: list[tuple[list[Graph], list[Graph]]], epochs: int, seed: int,
                progress=None) -> list[np.ndarray]:
    """One-class deep SVDD on a bias-free 3-layer GIN with sum pooling of every layer.

    ``jobs`` is a list of (training graphs, test graphs); every job trains its own model from the
    same initialisation (seed). The models are independent but trained side by side as one batch:
    weights are stacked along a leading model axis and the summed loss gives each model exactly its
    own gradient (Adam is elementwise), so this equals training them one after another. The graphs of
    all models are one block-diagonal sparse adjacency (no padding of each graph to the largest).
    """
    import torch

    from engine.core.nn import make_optimizer, symmetric_sparse_propagator

    torch.manual_seed(seed)
    hid = 32
    init, d_in = [], FEAT
    for _ in range(3):          # same draws, in the same order, as torch.nn.Linear(d_in, hid, bias=False) ...
        l1, l2 = torch.nn.Linear(d_in, hid, bias=False), torch.nn.Linear(hid, hid, bias=False)
        init += [l1.weight.detach().T, l2.weight.detach().T]
        d_in = hid
    m = len(jobs)
    weights = [torch.nn.Parameter(w.unsqueeze(0).repeat(m, 1, 1)) for w in init]   # (m, in, out)

    def prepare(sets):
        X, AI, gid = _flat(sets)
        prop, P = symmetric_sparse_propagator(AI)   # (I + A) x, differentiable
        X = torch.as_tensor(X)
        return X, prop, P @ X.reshape(-1, FEAT), torch.as_tensor(gid), len(sets[0])

    def embed(data, W=weights):   # -> (models, graphs, 3 hid)
        X, prop, PX, gid, B = data
        mm, N = X.shape[:2]
        outs, h = [], None
        for li, (W1, W2) in enumerate(zip(W[0::2], W[1::2])):   # node-wise linear maps as (m, N, d) @ (m, d, out)
            ah = PX if li == 0 else prop(h.reshape(mm * N, -1))  # layer 1 input (I + A) X is fixed
            h = torch.relu(torch.bmm(torch.relu(torch.bmm(ah.reshape(mm, N, -1), W1)), W2))
            outs.append(torch.zeros(mm * B, h.shape[2]).index_add_(0, gid, h.reshape(mm * N, -1)))
        return torch.cat(outs, 1).reshape(mm, B, -1)

    if len({len(tr) for tr, _ in jobs}) != 1:
        raise ValueError("every job needs the same number of training graphs")
    train = prepare([tr for tr, _ in jobs])
    with torch.no_grad():
        c = embed(train).mean(1, keepdim=True)
        c = torch.where(c.abs() < 0.1, torch.full_like(c, 0.1) * torch.sign(c + 1e-12), c)  # avoid trivial centre
    opt = make_optimizer(weights, lr=1e-3, weight_decay=1e-5)
    for ep in range(int(epochs)):
        opt.zero_grad(set_to_none=True)
        loss = ((embed(train) - c) ** 2).sum(2).mean(1).sum()   # sum over models of each model's loss
        loss.backward()
        opt.step()
        if ep % 10 == 0:
            report(progress, (ep + 1) / epochs, f"deep SVDD ({m} models side by side): epoch {ep + 1}/{epochs}")
    with torch.no_grad():
        if len({len(te) for _, te in jobs}) == 1:   # every model scores its own test set, all at once
            z = embed(prepare([te for _, te in jobs]))
            return [((z[j] - c[j]) ** 2).sum(1).numpy().astype(np.float64) for j in range(m)]
        out = []
        for j, (_, te) in enumerate(jobs):
            z = embed(prepare([te]), [w[j:j + 1] for w in weights])[0]
            out.append(((z - c[j]) ** 2).sum(1).numpy().astype(np.float64))
        return out


# --------------------------------------------------------------------------- detectors

def detect_all(K: np.ndarray, S: np.ndarray, tr: np.ndarray, te: np.ndarray,
               c: Config, seed: int) -> dict[str, np.ndarray]:
    """Scores (higher = more anomalous) of the test graphs ``te`` by the two shallow detectors
    fitted on ``tr`` (the deep SVDD models of all runs are trained together, see ``svdd_scores``).

    K: the WL kernel between every pair of the scenario's graphs and S: their graph statistics, both
    computed once per scenario (neither uses any label; the statistics are standardised with the
    training rows only); each run takes its rows and columns.
    """
    from sklearn.ensemble import IsolationForest
    from sklearn.svm import OneClassSVM

    out = {}
    oc = OneClassSVM(kernel="precomputed", nu=c.nu).fit(K[np.ix_(tr, tr)])
    out[METHODS[0]] = -oc.decision_function(K[np.ix_(te, tr)])
    mu, sd = S[tr].mean(0), S[tr].std(0) + 1e-9
    iso = IsolationForest(n_estimators=60, random_state=seed).fit((S[tr] - mu) / sd)
    out[METHODS[1]] = -iso.score_samples((S[te] - mu) / sd)
    return out


# --------------------------------------------------------------------------- metrics (our own)

def auroc(y: np.ndarray, s: np.ndarray) -> float:
    """Probability that a random anomaly outscores a random normal graph (ties count one half)."""
    from scipy.stats import rankdata

    y = np.asarray(y).astype(bool)
    r = rankdata(s)                      # average ranks for ties
    n1, n0 = y.sum(), (~y).sum()
    return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _curve(y: np.ndarray, s: np.ndarray):
    """Cumulative TP / FP counts at each distinct score threshold, from the highest score down."""
    y = np.asarray(y).astype(float)
    order = np.argsort(-s, kind="mergesort")
    s, y = np.asarray(s)[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]   # last index of each tie group
    tp = np.cumsum(y)[last]
    fp = (last + 1) - tp
    return tp, fp


def auprc(y: np.ndarray, s: np.ndarray) -> float:
    """Average precision: sum over thresholds of (recall step) x precision."""
    tp, fp = _curve(y, s)
    recall = tp / tp[-1]
    precision = tp / (tp + fp)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def fpr_at_95_tpr(y: np.ndarray, s: np.ndarray) -> float:
    """False-positive rate at the first threshold whose true-positive rate reaches 95 %."""
    tp, fp = _curve(y, s)
    tpr, fpr = tp / tp[-1], fp / fp[-1]
    return float(fpr[np.argmax(tpr >= 0.95)])


def sklearn_metrics(y, s) -> tuple[float, float, float]:
    from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

    fpr, tpr, _ = roc_curve(y, s)
    return (float(roc_auc_score(y, s)), float(average_precision_score(y, s)),
            float(fpr[np.argmax(tpr >= 0.95)]))


# --------------------------------------------------------------------------- run

def run(config: Config, progress=None) -> Result:
    from sklearn import config_context
    from threadpoolctl import threadpool_limits

    from engine.core.nn import set_cpu_threads

    set_cpu_threads(1)
    # our inputs are finite and our estimator parameters fixed: skipping scikit-learn's per-call input and
    # parameter validation (repeated for each of the forests' 720 trees) halves the detectors' time, same numbers
    with threadpool_limits(limits=1, user_api="blas"), config_context(assume_finite=True,
                                                                      skip_parameter_validation=True):
        return _run(config, progress)


def _run(c: Config, progress=None) -> Result:
    rng = seed_everything(c.seed)
    levels = np.round(np.linspace(0.0, c.contamination_max, 3), 3)
    nM, nS = len(METHODS), len(SCENARIOS)
    au, ap, fp = (np.zeros((nM, nS)) for _ in range(3))
    sau, sap, sfp = (np.zeros((nM, nS)) for _ in range(3))
    cont = np.zeros((len(levels), nM, nS))
    scores, labels = {}, {}
    n_extra = int(np.ceil(c.contamination_max * c.n_train))
    span = ProgressSpan(progress, 0.0, 1.0)
    total = nS * len(levels)
    runs, jobs = [], []          # (scenario index, level index, shallow scores); deep SVDD (train, test)
    for j, name in enumerate(SCENARIOS):
        norm, anom = scenario_graphs(name, c, rng, c.n_train + c.n_test, c.n_test + n_extra)
        graphs = norm + anom
        K = wl_kernel(*(2 * [wl_features(graphs, c.wl_iters)]))   # every pair of the scenario's graphs, once
        S = graph_statistics_all(graphs)
        nN = len(norm)
        te = np.r_[np.arange(c.n_train, nN), nN + np.arange(c.n_test)]
        labels[name] = np.r_[np.zeros(c.n_test), np.ones(c.n_test)].astype(int)
        for li, r in enumerate(levels):
            k = int(round(r * c.n_train))
            tr = np.r_[np.arange(c.n_train - k), nN + c.n_test + np.arange(k)]
            runs.append((j, li, detect_all(K, S, tr, te, c, c.seed)))
            jobs.append(([graphs[i] for i in tr], [graphs[i] for i in te]))
            span(0.6 * (j * len(levels) + li + 1) / total, f"{name}: contamination {r:.0%}")
    deep = svdd_scores(jobs, c.svdd_epochs, c.seed, ProgressSpan(progress, 0.6, 0.97))
    for (j, li, s), sd in zip(runs, deep):
        name, y = SCENARIOS[j], labels[SCENARIOS[j]]
        s[METHODS[2]] = sd
        for i, mth in enumerate(METHODS):
            cont[li, i, j] = auroc(y, s[mth])
            if li == 0:
                au[i, j], ap[i, j], fp[i, j] = auroc(y, s[mth]), auprc(y, s[mth]), fpr_at_95_tpr(y, s[mth])
                sau[i, j], sap[i, j], sfp[i, j] = sklearn_metrics(y, s[mth])
        if li == 0:
            scores[name] = s
    winners = [METHODS[i] for i in au.argmax(0)]
    agree = max(np.abs(au - sau).max(), np.abs(ap - sap).max(), np.abs(fp - sfp).max())
    bar = auc_chance_bar(c.n_test, c.n_test)
    clear = au.max(0) >= bar            # scenarios whose winner detects, not just tops two other coin flips
    # "no detector wins everywhere", detector by detector: its largest loss to another detector that clears chance,
    # in standard errors of the difference (Hanley-McNeil SE of each AUROC, combined as if independent, which
    # overstates the noise of two scores on the same test graphs)
    se = np.vectorize(lambda a: auc_standard_error(a, c.n_test, c.n_test))(au)
    beaten = np.full(len(METHODS), -np.inf)
    for i in range(len(METHODS)):
        for j in range(nS):
            for k in range(len(METHODS)):
                if k != i and au[k, j] >= bar:
                    z = (au[k, j] - au[i, j]) / max(float(np.hypot(se[i, j], se[k, j])), 1e-9)
                    beaten[i] = max(beaten[i], z)
    metrics = {
        "n_distinct_winners": float(len(set(winners))),
        "auroc_chance_bar": bar,
        "n_scenarios_clear": float(clear.sum()),
        "min_largest_loss_se": float(beaten.min()),
        "least_beaten": float(beaten.argmin()),
        "n_distinct_clear_winners": float(len({w for w, ok in zip(winners, clear) if ok})),
        "max_metric_gap_vs_sklearn": float(agree),
        "best_auroc_min": float(au.max(0).min()),
        "mean_auroc_drop_at_max_contamination": float((cont[0] - cont[-1]).mean()),
    }
    for j in range(nS):
        metrics[f"winner_{j}"] = float(au[:, j].argmax())
    report(progress, 1.0, "done")
    return Result(au, ap, fp, sau, sap, sfp, levels, cont, scores, labels, metrics)


def contamination_mean(result) -> dict[str, np.ndarray]:
    """Per detector, AUROC averaged over the scenarios at each contamination level of the training set."""
    return {m: result.cont_auroc[:, i, :].mean(1) for i, m in enumerate(METHODS)}


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    winners = ", ".join(f"{s}: {METHODS[int(m[f'winner_{j}'])]} ({result.auroc[:, j].max():.2f})"
                        for j, s in enumerate(SCENARIOS))
    return [
        # a winner only counts where its AUROC clears chance: three random detectors would otherwise have
        # ≥ 2 distinct winners 26 times in 27
        Claim("No single detector wins every scenario", m["n_distinct_clear_winners"], ">=", 2,
              label="distinct best-AUROC detectors over the scenarios they win clearly above chance",
              detail=f"{winners}; chance bar AUROC {m['auroc_chance_bar']:.3f} (0.5 + 3 SD of a random score's "
                     f"AUROC), cleared in {int(m['n_scenarios_clear'])} of {len(SCENARIOS)} scenarios", fmt=".0f"),
        # the same statement read detector by detector, so that near-ties at the top do not decide it (added
        # 2026-12-06; the winners above can lead by less than their noise, e.g. 0.84 vs 0.80 on 40 + 40 graphs)
        Claim("…and every detector is clearly beaten somewhere by one that detects",
              m["min_largest_loss_se"], ">=", 2.0,
              label="smallest, over detectors, largest AUROC loss to another detector (standard errors)",
              detail=f"least beaten: {METHODS[int(m['least_beaten'])]}; a detector counts as beating it only "
                     f"where its own AUROC clears {m['auroc_chance_bar']:.3f}; SE by Hanley-McNeil", fmt=".1f"),
        Claim("Our AUROC / AUPRC / FPR95 agree with scikit-learn's computations",
              m["max_metric_gap_vs_sklearn"], "<=", 1e-9, label="largest |ours − sklearn|",
              detail="roc_auc_score, average_precision_score, roc_curve on every detector × scenario",
              fmt=".1e"),
    ]
    # (The worst scenario's best AUROC, metrics["best_auroc_min"], is shown on the page but not
    # claimed: its threshold would have been chosen after seeing the results.)
