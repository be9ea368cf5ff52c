"""JL-Metric: a random-projection distance between continuous-time dynamic graphs.

A continuous-time dynamic graph (CTDG) is a time-ordered stream of events
(src, dst, t, feature vector). The metric never cuts the stream into snapshots:

1. every event becomes two short vectors, one for each endpoint:
   [min-max normalised features, normalised time, role bit (0 = source, 1 = destination)];
2. each node's vectors are concatenated in time order into one long (ragged) vector;
   all nodes' vectors form the rows of a sparse matrix M (nodes x slots);
3. a Gaussian random matrix R1 (slots x d1, entries N(0, 1/d1)) maps every row to d1 numbers,
   H = M R1, and a second one R2 (nodes x d2, N(0, 1/d2)) mixes the nodes, G = H^T R2;
4. two graphs are compared through their d1 x d2 sketches G: the JL distance is one minus
   the mean column-wise cosine similarity.

Both random matrices are shared by every graph of a comparison (same seed), so the map
M -> G is one fixed linear random projection and, by the Johnson-Lindenstrauss lemma,
Frobenius distances between the M's are approximately kept by the G's.

The page compares it with snapshot metrics (degree / clustering / Laplacian-spectrum MMD
over time windows, GraphRNN style), which must build every snapshot graph.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.stats import spearmanr

from engine.core import Choice, Float, InputError, Int, check_upload, param, seed_everything
from engine.core.progress import ProgressSpan, report

PERTURBATIONS = ("edge rewiring", "feature noise", "time shuffling")
RACE_SNAPSHOTS = 8


@dataclass(frozen=True)
class Config:
    n_nodes: int = param(150, Int(50, 400, "Nodes", step=50, help="nodes of the reference dynamic graph"))
    n_events: int = param(2500, Int(500, 10000, "Events", step=500,
                                    help="timestamped interactions in the reference stream"))
    feat_dim: int = param(4, Int(1, 16, "Event feature dimension", help="length of each event's feature vector"))
    node_dim: int = param(256, Choice((32, 64, 128, 256, 512), "Node projection dimension d1",
                                      widget="select_slider",
                                      help="random projection of each node's event history"))
    graph_dim: int = param(256, Choice((32, 64, 128, 256, 512), "Graph projection dimension d2",
                                       widget="select_slider", help="random mixing of the nodes"))
    levels: int = param(5, Int(3, 8, "Perturbation levels", help="strengths from 0 to the maximum"))
    max_strength: float = param(1.0, Float(0.2, 1.0, "Maximum perturbation strength", step=0.1))
    repeats: int = param(2, Int(1, 4, "Repeats per level", help="independent perturbations averaged"))
    n_snapshots: int = param(8, Int(3, 12, "Snapshots (baseline metrics)",
                                    help="time windows the snapshot metrics cut the stream into"))
    race_nodes: int = param(400, Choice((200, 400, 800), "Largest graph in the runtime race (nodes)",
                                        widget="select_slider", group="Runtime race",
                                        help="the race times both metrics on graphs of 100 nodes up to this "
                                             "size, with 15 events per node and 8 snapshots"))
    seed: int = param(0, Int(0, 9, "Seed"))


# largest widget setting (every size at its max): 13 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(n_nodes=400, n_events=10000, feat_dim=16, node_dim=512, graph_dim=512, levels=8,
                      repeats=4, n_snapshots=12, race_nodes=800)


@dataclass
class Stream:
    """A continuous-time dynamic graph: a time-sorted event stream."""

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    msg: np.ndarray
    n_nodes: int

    def copy(self) -> Stream:
        return Stream(self.src.copy(), self.dst.copy(), self.t.copy(), self.msg.copy(), self.n_nodes)

    def sorted(self) -> Stream:
        o = np.argsort(self.t, kind="stable")
        return Stream(self.src[o], self.dst[o], self.t[o], self.msg[o], self.n_nodes)


@dataclass
class Result:
    strengths: np.ndarray                   # (levels,)
    jl: dict[str, np.ndarray]               # perturbation -> (levels,) mean JL distance
    jl_sd: dict[str, np.ndarray]
    snap: dict[str, dict[str, np.ndarray]]  # perturbation -> snapshot metric name -> (levels,)
    exact_dist: np.ndarray                  # pairwise ||M_a - M_b||_F
    proj_dist: np.ndarray                   # pairwise ||G_a - G_b||_F
    jl_eps: float                           # JL bound for these many points at dimension d1*d2/(d1+d2)
    timing_events: np.ndarray
    timing_nodes: np.ndarray
    time_jl: np.ndarray                     # seconds, median of repeats
    time_snap: np.ndarray
    rho_names: list[str]                    # metric names (rows of rho_table)
    rho_table: np.ndarray                   # Spearman rho(strength, metric): metrics x perturbations
    metrics: dict[str, float] = field(default_factory=dict)
    kinds: tuple[str, ...] = PERTURBATIONS  # the perturbations applied (no feature noise without features)
    source: str = "synthetic"               # what the reference stream is
    notes: list[str] = field(default_factory=list)   # how an uploaded stream was read


# --------------------------------------------------------------------------- data

def make_stream(n_nodes: int, n_events: int, feat_dim: int, rng: np.random.Generator,
                n_comm: int = 4) -> Stream:
    """A temporal stochastic block model with heavy-tailed node activity and phased communities.

    Communities take turns being most active over time; 80 % of events stay inside the
    source's community; features depend on the community pair, on time and on noise.
    """
    if n_nodes < 2 * n_comm:
        raise InputError(f"need at least {2 * n_comm} nodes")
    comm = rng.integers(0, n_comm, size=n_nodes)
    activity = rng.pareto(2.0, size=n_nodes) + 1.0
    t = np.sort(rng.uniform(0.0, 1.0, size=n_events))
    phase = np.floor(t * n_comm * 2).astype(int) % n_comm            # community on duty
    src = np.empty(n_events, dtype=np.int64)
    dst = np.empty(n_events, dtype=np.int64)
    members = [np.flatnonzero(comm == c) for c in range(n_comm)]
    probs = [activity[m] / activity[m].sum() for m in members]
    src_comm = np.where(rng.random(n_events) < 0.6, phase, rng.integers(0, n_comm, n_events))
    dst_comm = np.where(rng.random(n_events) < 0.8, src_comm, rng.integers(0, n_comm, n_events))
    for c in range(n_comm):
        if len(members[c]) == 0:
            continue
        s = src_comm == c
        src[s] = rng.choice(members[c], size=int(s.sum()), p=probs[c])
        d = dst_comm == c
        dst[d] = rng.choice(members[c], size=int(d.sum()), p=probs[c])
    empty = [c for c in range(n_comm) if len(members[c]) == 0]
    for c in empty:  # tiny graphs: fall back to any node
        src[src_comm == c] = rng.integers(0, n_nodes, int((src_comm == c).sum()))
        dst[dst_comm == c] = rng.integers(0, n_nodes, int((dst_comm == c).sum()))
    same = src == dst
    dst[same] = (dst[same] + 1 + rng.integers(0, n_nodes - 1, int(same.sum()))) % n_nodes
    centres = rng.normal(0.0, 1.0, size=(n_comm, n_comm, feat_dim))
    msg = centres[comm[src], comm[dst]] + 0.3 * rng.normal(size=(n_events, feat_dim))
    msg[:, 0] += np.sin(2 * np.pi * t)
    return Stream(src, dst, t, msg.astype(np.float64), n_nodes)


def perturb(g: Stream, kind: str, p: float, rng: np.random.Generator) -> Stream:
    """Edge rewiring / feature noise / time shuffling of strength p in [0, 1]."""
    out = g.copy()
    m = len(g.t)
    if p <= 0:
        return out
    if kind == "edge rewiring":           # each event's destination redrawn with probability p
        hit = rng.random(m) < p
        out.dst[hit] = rng.integers(0, g.n_nodes, int(hit.sum()))
    elif kind == "feature noise":         # Gaussian noise of p x (per-dimension std)
        out.msg = g.msg + p * g.msg.std(axis=0, keepdims=True) * rng.normal(size=g.msg.shape)
    elif kind == "time shuffling":        # a fraction p of events swap timestamps among themselves
        idx = np.flatnonzero(rng.random(m) < p)
        out.t[idx] = g.t[rng.permutation(idx)]
        out = out.sorted()
    else:
        raise InputError(f"unknown perturbation {kind!r}")
    return out


# --------------------------------------------------------------------------- JL metric

def event_rows(g: Stream) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per endpoint incidence: node id, position in that node's time-ordered history, vector.

    Returns (node, position, vectors) with vectors of length feat_dim + 2.
    """
    m = len(g.t)
    lo, hi = g.msg.min(axis=0), g.msg.max(axis=0)
    msg = (g.msg - lo) / (hi - lo + 1e-6)
    tn = (g.t - g.t.min()) / (g.t.max() - g.t.min() + 1e-6)
    node = np.concatenate([g.src, g.dst])
    ev = np.concatenate([np.arange(m), np.arange(m)])
    role = np.concatenate([np.zeros(m), np.ones(m)])
    vec = np.column_stack([np.concatenate([msg, msg]), np.concatenate([tn, tn]), role])
    # order: by node, then by event (stream is time-sorted), source copy before destination copy
    order = np.lexsort((role, ev, node))
    node, vec = node[order], vec[order]
    start = np.searchsorted(node, node, side="left")
    pos = np.arange(len(node)) - start
    return node, pos, vec


def history_matrix(g: Stream, n_slots: int | None = None) -> sp.csr_matrix:
    """Sparse M: row v holds node v's event vectors concatenated in time order."""
    node, pos, vec = event_rows(g)
    L = vec.shape[1]
    cols = (pos[:, None] * L + np.arange(L)[None, :]).ravel()
    rows = np.repeat(node, L)
    width = int(cols.max()) + 1 if n_slots is None else int(n_slots)
    if cols.max() >= width:
        raise ValueError("n_slots too small for this stream")
    return sp.csr_matrix((vec.ravel(), (rows, cols)), shape=(g.n_nodes, width))


@dataclass
class Projector:
    """The two shared Gaussian random matrices of one comparison."""

    R1: np.ndarray  # slots x d1, N(0, 1/d1)
    R2: np.ndarray  # nodes x d2, N(0, 1/d2)

    @classmethod
    def make(cls, n_slots: int, n_nodes: int, d1: int, d2: int, seed: int) -> Projector:
        r = np.random.default_rng(10_000 + seed)
        return cls(r.normal(0.0, 1.0 / np.sqrt(d1), size=(n_slots, d1)),
                   r.normal(0.0, 1.0 / np.sqrt(d2), size=(n_nodes, d2)))

    def sketch(self, g: Stream) -> np.ndarray:
        M = history_matrix(g)
        if M.shape[1] > self.R1.shape[0] or M.shape[0] != self.R2.shape[0]:
            raise ValueError("projector too small for this stream")
        H = M @ self.R1[: M.shape[1]]            # nodes x d1
        return H.T @ self.R2                     # d1 x d2


def slots_needed(g: Stream) -> int:
    counts = np.bincount(np.concatenate([g.src, g.dst]), minlength=g.n_nodes)
    return int(counts.max()) * (g.msg.shape[1] + 2)


def jl_distance(Ga: np.ndarray, Gb: np.ndarray) -> float:
    """One minus the mean cosine similarity of matching columns."""
    na = np.linalg.norm(Ga, axis=0) + 1e-12
    nb = np.linalg.norm(Gb, axis=0) + 1e-12
    return float(1.0 - np.mean(np.sum(Ga * Gb, axis=0) / (na * nb)))


def jl_metric(a: Stream, b: Stream, d1: int = 64, d2: int = 64, seed: int = 0) -> float:
    """Stand-alone JL distance between two streams over the same node ids."""
    proj = Projector.make(max(slots_needed(a), slots_needed(b)), a.n_nodes, d1, d2, seed)
    return jl_distance(proj.sketch(a), proj.sketch(b))


def effective_dim(d1: int, d2: int) -> int:
    """Dimension of a plain Gaussian projection with the same worst-case spread as G = R1^T M^T R2.

    For a rank-one difference u v^T the squared norm of the sketch is a product of two
    independent chi-square / d variables, whose relative variance is about 2/d1 + 2/d2,
    the same as one projection to d1 d2 / (d1 + d2) dimensions.
    """
    return max(1, int(d1 * d2 // (d1 + d2)))


def jl_eps(n_points: int, k: int) -> float:
    """Smallest eps with the JL dimension 4 ln n / (eps^2/2 - eps^3/3) <= k (sklearn's formula); 1.0 when even
    eps = 1 needs more than k dimensions (the bound says nothing)."""
    if 4 * np.log(n_points) / (1 / 2 - 1 / 3) > k:
        return 1.0
    lo, hi = 1e-6, 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        need = 4 * np.log(n_points) / (mid**2 / 2 - mid**3 / 3)
        if need <= k:
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------------------- snapshot baselines

def snapshots(g: Stream, n_snap: int) -> list[sp.csr_matrix]:
    """Undirected, unweighted adjacency of each of n_snap equal time windows."""
    edges = np.linspace(g.t.min(), g.t.max() + 1e-9, n_snap + 1)
    which = np.clip(np.searchsorted(edges, g.t, side="right") - 1, 0, n_snap - 1)
    out = []
    for s in range(n_snap):
        k = which == s
        u, v = g.src[k], g.dst[k]
        A = sp.coo_matrix((np.ones(len(u)), (u, v)), shape=(g.n_nodes, g.n_nodes)).tocsr()
        A = ((A + A.T) > 0).astype(np.float64)
        A.setdiag(0)
        A.eliminate_zeros()
        out.append(A.tocsr())
    return out


def laplacian_spectrum(A: sp.csr_matrix) -> np.ndarray:
    """All eigenvalues of D^-1/2 (D - A) D^-1/2 (isolated nodes give 0), via a dense eigensolver."""
    d = np.asarray(A.sum(axis=1)).ravel()
    dinv = np.where(d > 0, 1.0 / np.sqrt(np.maximum(d, 1e-12)), 0.0)
    Lap = np.diag((d > 0).astype(float)) - (dinv[:, None] * A.toarray() * dinv[None, :])
    return np.linalg.eigvalsh(Lap)


def snapshot_descriptors(g: Stream, n_snap: int, feat_bins: int = 20) -> dict[str, np.ndarray]:
    """Per snapshot: degree histogram, clustering histogram, Laplacian spectrum histogram, feature histogram.

    Each snapshot is instantiated as a sparse adjacency (degrees, triangle counts for the
    clustering coefficient) and as a dense normalised Laplacian (full spectrum), which is
    where snapshot metrics spend their time.
    """
    deg_h, clu_h, spec_h, feat_h = [], [], [], []
    edges = np.linspace(g.t.min(), g.t.max() + 1e-9, n_snap + 1)
    which = np.clip(np.searchsorted(edges, g.t, side="right") - 1, 0, n_snap - 1)
    has_features = g.msg.shape[1] > 0           # an uploaded stream may have none: no feature histogram then
    f0 = g.msg[:, 0] if has_features else None
    fr = (float(f0.min()) - 1.0, float(f0.max()) + 1.0) if has_features else None
    for s, A in enumerate(snapshots(g, n_snap)):
        deg = np.asarray(A.sum(axis=1)).ravel().astype(int)
        h = np.bincount(deg, minlength=64)[:64].astype(float)
        deg_h.append(h / max(h.sum(), 1))
        tri = np.asarray((A @ A).multiply(A).sum(axis=1)).ravel()   # 2 x triangles at each node
        cc = np.where(deg > 1, tri / np.maximum(deg * (deg - 1), 1), 0.0)
        h, _ = np.histogram(cc, bins=20, range=(0, 1))
        clu_h.append(h / max(h.sum(), 1))
        ev = laplacian_spectrum(A)
        h, _ = np.histogram(ev, bins=40, range=(-1e-5, 2.0 + 1e-5))
        spec_h.append(h / max(h.sum(), 1))
        if has_features:
            h, _ = np.histogram(f0[which == s], bins=feat_bins, range=fr)
            feat_h.append(h / max(h.sum(), 1))
    out = {"degree": np.array(deg_h), "clustering": np.array(clu_h), "spectrum": np.array(spec_h)}
    if has_features:
        out["feature"] = np.array(feat_h)
    return out


def mmd2(X: np.ndarray, Y: np.ndarray, sigma: float = 1.0) -> float:
    """Biased squared MMD with a Gaussian kernel on histogram rows (snapshots as i.i.d. samples)."""
    def k(A, B):
        d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
        return np.exp(-d2 / (2 * sigma**2))
    return float(k(X, X).mean() + k(Y, Y).mean() - 2 * k(X, Y).mean())


def snapshot_metrics(ref_desc: dict[str, np.ndarray], g: Stream, n_snap: int) -> dict[str, float]:
    d = snapshot_descriptors(g, n_snap)
    return {name: mmd2(ref_desc[name], d[name], sigma=0.5) for name in ref_desc}


# --------------------------------------------------------------------------- run

def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Rank correlation; 0 for a metric that does not move at all (no signal)."""
    if np.ptp(y) <= 1e-12:
        return 0.0
    return float(spearmanr(x, y).statistic)


def _median_time(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


# --------------------------------------------------------------------------- uploads

MAX_UPLOAD_BYTES = 5 * 2**20      # the app's upload cap (.streamlit/config.toml)
MAX_UPLOAD_EVENTS = 10_000        # the Events slider's maximum
MAX_UPLOAD_NODES = 400            # the Nodes slider's maximum: snapshot metrics diagonalise n x n Laplacians
MAX_UPLOAD_FEATURES = 16          # the feature-dimension slider's maximum
MIN_UPLOAD_EVENTS = 50
MIN_UPLOAD_NODES = 5


def _as_dates(values):
    """pandas datetimes (UTC) of text, NaT where a value is not a date; quiet about per-element parsing."""
    import warnings

    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return pd.to_datetime(values, errors="coerce", utc=True)


def _number_column(col, name: str) -> np.ndarray:
    import pandas as pd

    vals = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(vals)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"column {name}: {str(col.iloc[row])[:30]!r} (event {row + 1}) is not a finite number")
    return vals


def parse_upload(data: bytes) -> tuple[Stream, list[str]]:
    """A CSV event stream -> (Stream, notes). Columns by position: source, destination, time, then any numeric
    feature columns. A header row is optional; node ids may be any text. Times may be numbers or dates.

    Self-loops are dropped; a stream with more than MAX_UPLOAD_NODES nodes keeps the events among its most active
    ones, and one with more than MAX_UPLOAD_EVENTS events keeps its earliest. Anything unusable raises
    ``InputError`` with a message for the user."""
    import pandas as pd

    data = check_upload(data, MAX_UPLOAD_BYTES, blank_is_empty=True)
    try:
        text = bytes(data).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("The file is not UTF-8 text; expected a CSV of events (source, destination, time, "
                         "features...).") from None
    try:
        df = pd.read_csv(io.StringIO(text), header=None, sep=None, engine="python", dtype=str,
                         skipinitialspace=True, comment="#")
    except Exception as e:   # pandas' parser errors, the csv sniffer's "Could not determine delimiter", ...
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise InputError(f"The file could not be read as a CSV table: {first[:120]}") from None
    notes: list[str] = []
    if df.shape[1] < 3:
        raise InputError(f"Found {df.shape[1]} column(s); expected at least 3: source, destination, time "
                         "(then optional numeric features).")
    df = df.dropna(how="all")
    if len(df) and pd.isna(pd.to_numeric(df.iloc[0, 2], errors="coerce")) and pd.isna(_as_dates([df.iloc[0, 2]])[0]):
        header = [str(v) for v in df.iloc[0]]
        df = df.iloc[1:]
        notes.append("header row: " + ", ".join(h[:20] for h in header[:6]) + (" …" if len(header) > 6 else ""))
    else:
        header = [f"column {j + 1}" for j in range(df.shape[1])]
    if df.iloc[:, :3].isna().any().any():
        row = int(np.flatnonzero(df.iloc[:, :3].isna().any(axis=1).to_numpy())[0])
        raise InputError(f"event {row + 1} lacks a source, destination or time")
    tcol = df.iloc[:, 2]
    if pd.to_numeric(tcol, errors="coerce").notna().all():
        t = _number_column(tcol, header[2])
    else:
        stamps = _as_dates(tcol)
        if stamps.isna().any():
            row = int(np.flatnonzero(stamps.isna().to_numpy())[0])
            raise InputError(f"time column {header[2]!r}: {str(tcol.iloc[row])[:30]!r} (event {row + 1}) is "
                             "neither a number nor a date")
        t = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)
        notes.append("times read as dates")
    feats = df.iloc[:, 3:]
    if feats.shape[1] > MAX_UPLOAD_FEATURES:
        notes.append(f"only the first {MAX_UPLOAD_FEATURES} of {feats.shape[1]} feature columns are used")
        feats = feats.iloc[:, :MAX_UPLOAD_FEATURES]
    msg = np.column_stack([_number_column(feats.iloc[:, j], repr(header[3 + j])) for j in range(feats.shape[1])]) \
        if feats.shape[1] else np.zeros((len(df), 0))
    src_id = df.iloc[:, 0].astype(str).str.strip().to_numpy()
    dst_id = df.iloc[:, 1].astype(str).str.strip().to_numpy()

    keep = src_id != dst_id
    if not keep.all():
        notes.append(f"{int((~keep).sum())} self-loop(s) dropped")
    src_id, dst_id, t, msg = src_id[keep], dst_id[keep], t[keep], msg[keep]
    order = np.argsort(t, kind="stable")
    src_id, dst_id, t, msg = src_id[order], dst_id[order], t[order], msg[order]
    ids, inv = np.unique(np.concatenate([src_id, dst_id]), return_inverse=True)
    m = len(t)
    src, dst = inv[:m], inv[m:]
    if len(ids) > MAX_UPLOAD_NODES:
        activity = np.bincount(inv, minlength=len(ids))
        top = np.zeros(len(ids), dtype=bool)
        top[np.argsort(-activity, kind="stable")[:MAX_UPLOAD_NODES]] = True
        sel = top[src] & top[dst]
        notes.append(f"{len(ids)} nodes: the {sel.sum()} events among the {MAX_UPLOAD_NODES} most active are kept")
        src, dst, t, msg = src[sel], dst[sel], t[sel], msg[sel]
    if len(t) > MAX_UPLOAD_EVENTS:
        notes.append(f"{len(t)} events: the earliest {MAX_UPLOAD_EVENTS} are kept")
        src, dst, t, msg = src[:MAX_UPLOAD_EVENTS], dst[:MAX_UPLOAD_EVENTS], t[:MAX_UPLOAD_EVENTS], msg[:MAX_UPLOAD_EVENTS]
    _, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)     # ids 0..n-1 of the nodes left
    n_nodes = int(inv.max()) + 1 if len(inv) else 0
    if len(t) < MIN_UPLOAD_EVENTS or n_nodes < MIN_UPLOAD_NODES:
        raise InputError(f"{len(t)} usable events between {n_nodes} nodes; at least {MIN_UPLOAD_EVENTS} events "
                         f"and {MIN_UPLOAD_NODES} nodes are needed.")
    if np.ptp(t) <= 0:
        raise InputError("All events have the same time; a dynamic graph needs events spread over time.")
    if not np.isfinite(np.ptp(t)):
        raise InputError("The times span more than a float can hold; rescale the time column.")
    if msg.shape[1] == 0:
        notes.append("no feature columns: the feature-noise perturbation is left out")
    elif not np.any(msg.std(axis=0) > 0):
        notes.append("every feature column is constant: the feature-noise perturbation (noise scaled by each "
                     "column's spread) is left out")
    notes.append(f"{len(t)} events, {n_nodes} nodes, {msg.shape[1]} feature(s)")
    return Stream(inv[: len(t)].astype(np.int64), inv[len(t):].astype(np.int64), (t - t.min()) / np.ptp(t),
                  msg.astype(np.float64), n_nodes), notes


def run(config: Config, progress=None) -> Result:
    # small dense matrices: one BLAS thread is faster than several fighting over a shared CPU
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _run(config, progress)


def run_upload(config: Config, progress=None, payload: bytes = b"") -> Result:
    """``run`` with an uploaded event stream as the reference (Nodes, Events and feature dimension then come from
    the file; the runtime race still uses synthetic streams)."""
    from threadpoolctl import threadpool_limits

    report(progress, 0.0, "reading the upload")
    ref, notes = parse_upload(payload)
    with threadpool_limits(limits=1, user_api="blas"):
        return _run(config, progress, ref=ref, notes=notes)


def _run(config: Config, progress=None, ref: Stream | None = None, notes: list[str] | None = None) -> Result:
    rng = seed_everything(config.seed)
    c = config
    source = "synthetic"
    if ref is None:
        ref = make_stream(c.n_nodes, c.n_events, c.feat_dim, rng)
    else:
        source = "upload"
    n_nodes = ref.n_nodes
    # feature noise is scaled by each column's spread: without a varying feature it would change nothing
    varying = ref.msg.shape[1] > 0 and bool(np.any(ref.msg.std(axis=0) > 0))
    kinds = PERTURBATIONS if varying else tuple(k for k in PERTURBATIONS if k != "feature noise")
    strengths = np.linspace(0.0, c.max_strength, c.levels)

    # all perturbed graphs first, so that one projector fits every stream of the comparison
    span = ProgressSpan(progress, 0.0, 0.55, "perturbation sweep: ")
    graphs: dict[tuple[str, int, int], Stream] = {}
    for kind in kinds:
        for i, p in enumerate(strengths):
            for r in range(c.repeats):
                graphs[(kind, i, r)] = perturb(ref, kind, float(p), rng)
    n_slots = max(slots_needed(g) for g in [ref, *graphs.values()])
    proj = Projector.make(n_slots, n_nodes, c.node_dim, c.graph_dim, c.seed)
    G_ref = proj.sketch(ref)
    ref_desc = snapshot_descriptors(ref, c.n_snapshots)

    jl, jl_sd, snap = {}, {}, {}
    sketches = [G_ref]
    members = [ref]
    total = len(kinds) * c.levels
    step = 0
    for kind in kinds:
        vals = np.zeros((c.levels, c.repeats))
        sm: dict[str, list[float]] = {}
        for i in range(c.levels):
            for r in range(c.repeats):
                g = graphs[(kind, i, r)]
                Gg = proj.sketch(g)
                vals[i, r] = jl_distance(G_ref, Gg)
                if r == 0:
                    sketches.append(Gg)
                    members.append(g)
            # snapshot metrics on the first repeat only (they are the slow ones)
            for name, v in snapshot_metrics(ref_desc, graphs[(kind, i, 0)], c.n_snapshots).items():
                sm.setdefault(name, []).append(v)
            step += 1
            span(step / total, f"{kind}, strength {strengths[i]:.2f}")
        jl[kind] = vals.mean(axis=1)
        jl_sd[kind] = vals.std(axis=1)
        snap[kind] = {k: np.array(v) for k, v in sm.items()}

    # JL distance preservation over the graphs of the sweep (first repeat of each level)
    report(progress, 0.6, "checking distance preservation")
    Ms = [history_matrix(g, n_slots) for g in members]
    n = len(Ms)
    ex, pr = [], []
    for a in range(n):
        for b in range(a + 1, n):
            e = sp.linalg.norm(Ms[a] - Ms[b])
            if e > 1e-9:
                ex.append(e)
                pr.append(np.linalg.norm(sketches[a] - sketches[b]))
    ex, pr = np.array(ex), np.array(pr)
    eps = jl_eps(n, effective_dim(c.node_dim, c.graph_dim))
    distortion = float(np.max(np.abs(pr**2 / ex**2 - 1.0))) if len(ex) else float("nan")

    # runtime race at growing scale (15 events per node, same snapshot count)
    tspan = ProgressSpan(progress, 0.65, 1.0, "runtime: ")
    sizes = [n for n in (100, 200, 400, 800) if n <= c.race_nodes]
    t_ev, t_nodes, t_jl, t_snap = [], [], [], []
    for j, nn_ in enumerate(sizes):
        ne = 15 * nn_
        a = make_stream(nn_, ne, c.feat_dim, rng)
        b = perturb(a, "edge rewiring", 0.3, rng)
        # both evaluators get their reference side precomputed (as a benchmark would cache it)
        # and are timed on scoring one generated graph against it
        pj = Projector.make(max(slots_needed(a), slots_needed(b)), nn_, c.node_dim, c.graph_dim, c.seed)
        Ga = pj.sketch(a)
        da = snapshot_descriptors(a, RACE_SNAPSHOTS)
        t_jl.append(_median_time(lambda Ga=Ga, pj=pj, b=b: jl_distance(Ga, pj.sketch(b)), 5))
        t_snap.append(_median_time(lambda da=da, b=b: snapshot_metrics(da, b, RACE_SNAPSHOTS),
                                   3 if nn_ <= 400 else 2))
        t_ev.append(ne)
        t_nodes.append(nn_)
        tspan((j + 1) / len(sizes), f"{ne} events timed")

    rho = {kind: _spearman(strengths, jl[kind]) for kind in kinds}
    rho_names = ["JL metric", *(f"snapshot {k} MMD" for k in ref_desc)]
    rho_table = np.array([[rho[k] for k in kinds]]
                         + [[_spearman(strengths, snap[k][name]) for k in kinds] for name in ref_desc])
    metrics = {
        "min_spearman": min(rho.values()),
        **{f"spearman_{k.replace(' ', '_')}": v for k, v in rho.items()},
        "self_distance": jl_distance(G_ref, proj.sketch(ref)),
        "jl_distortion": distortion,
        "jl_eps": eps,
        "jl_points": float(n),
        "jl_dim": float(effective_dim(c.node_dim, c.graph_dim)),
        "speedup_largest": t_snap[-1] / max(t_jl[-1], 1e-9),
        "time_jl_largest": t_jl[-1],
        "time_snap_largest": t_snap[-1],
        "largest_events": float(t_ev[-1]),
        **({"feature_noise_degree_mmd_max": float(np.max(snap["feature noise"]["degree"]))}
           if "feature noise" in snap else {}),
    }
    report(progress, 1.0, "done")
    return Result(strengths, jl, jl_sd, snap, ex, pr, eps, np.array(t_ev), np.array(t_nodes),
                  np.array(t_jl), np.array(t_snap), rho_names, rho_table, metrics, kinds=kinds, source=source,
                  notes=list(notes or ()))


# badges read from a clock: shown on the page, but tests do not assert their verdict (the team does not
# assert wall time in tests; timings belong to `python -m tests.bench`)
TIMING_CLAIM_LABELS = ("snapshot time / JL time",)


def claims(result: Result) -> list:
    from engine.core import Claim

    m = result.metrics
    weakest = min(result.kinds, key=lambda k: m[f"spearman_{k.replace(' ', '_')}"])
    return [
        Claim("The JL metric rises with the strength of every perturbation "
              f"({', '.join(result.kinds)}), monotonically up to near-ties (Spearman ρ ≥ 0.9)",
              # rounded: one swapped pair among 5 levels gives exactly 0.9, which float arithmetic put just below
              round(m["min_spearman"], 9), ">=", 0.9, label="lowest Spearman ρ(strength, metric)",
              detail=f"weakest: {weakest}; ρ = 1 means perfectly monotone", fmt=".3f"),
        Claim("It is far cheaper than snapshot-based metrics at scale (timed side by side)",
              m["speedup_largest"], ">=", 3.0, label="snapshot time / JL time",
              detail=f"at {int(m['largest_events'])} events: JL {m['time_jl_largest'] * 1e3:.0f} ms vs "
                     f"snapshots {m['time_snap_largest'] * 1e3:.0f} ms (medians)", fmt=".1f"),
        # a vacuous bound (ε ≥ 1) tests nothing, so the badge reads nan there and fails (until 2026-12-06 the bar
        # was capped at 1, which any projection that does not flip signs meets)
        Claim("Random projection keeps the distances between event streams within the JL bound",
              m["jl_distortion"] if m["jl_eps"] < 1 else float("nan"), "<=", min(m["jl_eps"], 1.0),
              label="max |‖ΔG‖²/‖ΔM‖² − 1| over graph pairs",
              detail=(f"JL ε for {int(m['jl_points'])} graphs at effective dimension {int(m['jl_dim'])}"
                      + (f" is vacuous (≥ 1) at these dimensions, so nothing is tested (measured distortion "
                         f"{m['jl_distortion']:.3f}): raise d1, d2" if m["jl_eps"] >= 1 else "")),
              fmt=".3f"),
    ]
