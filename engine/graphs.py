"""Reusable graph helpers for the graph-learning pages (pure compute, no streamlit).

Conventions: a graph is a symmetric ``scipy.sparse.csr_array`` of 0/1 floats with an
empty diagonal (undirected, unweighted, no self-loops). Edge lists are ``(E, 2)``
int arrays with ``u < v``.

Contents
- generation: :func:`sbm_adjacency`, :func:`attributed_sbm` (labels that follow the
  blocks with a tunable alignment, Gaussian class features with tunable noise)
- edge bookkeeping: :func:`edge_list`, :func:`from_edges`, :func:`apply_edits`
- statistics: :func:`edge_homophily`, :func:`modularity`, :func:`spectral_gap`,
  :func:`fiedler`, :func:`louvain`
- a layout for drawing: :func:`block_layout`
- a GCN trainer that trains many independent 2-layer GCNs at once (one per graph),
  all on one block-diagonal sparse matrix: :func:`train_gcns`

torch is imported lazily (only :func:`train_gcns` needs it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

# ----------------------------------------------------------------------------- generation


def sbm_adjacency(sizes, p_in: float, p_out: float, rng: np.random.Generator,
                  connect_isolated: bool = True) -> tuple[sp.csr_array, np.ndarray]:
    """A stochastic block model: each pair inside a block is an edge w.p. ``p_in``, across w.p. ``p_out``.

    Returns (A, blocks). With ``connect_isolated`` a node left without neighbours gets one
    edge to a random member of its own block (so the normalised Laplacian is defined).
    """
    sizes = [int(s) for s in sizes]
    n = int(sum(sizes))
    blocks = np.repeat(np.arange(len(sizes)), sizes)
    iu, ju = np.triu_indices(n, k=1)
    prob = np.where(blocks[iu] == blocks[ju], p_in, p_out)
    keep = rng.random(iu.shape[0]) < prob
    edges = np.stack([iu[keep], ju[keep]], axis=1)
    A = from_edges(edges, n)
    if connect_isolated:
        deg = np.asarray(A.sum(axis=1)).ravel()
        extra = []
        for i in np.flatnonzero(deg == 0):
            mates = np.flatnonzero(blocks == blocks[i])
            mates = mates[mates != i]
            if mates.size == 0:
                mates = np.flatnonzero(np.arange(n) != i)
            if mates.size:
                j = int(rng.choice(mates))
                extra.append((min(i, j), max(i, j)))
        if extra:
            A = from_edges(np.concatenate([edges, np.array(extra, dtype=np.int64)]), n)
    return A, blocks


@dataclass
class AttributedGraph:
    A: sp.csr_array          # adjacency
    blocks: np.ndarray       # planted SBM block of each node
    labels: np.ndarray       # node class
    X: np.ndarray            # node features (n, dim), float32
    means: np.ndarray        # class means (n_classes, dim)


def aligned_labels(blocks: np.ndarray, alignment: float, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Label = block with probability ``alignment``, otherwise a uniformly random class."""
    keep = rng.random(blocks.shape[0]) < alignment
    return np.where(keep, blocks % n_classes, rng.integers(0, n_classes, blocks.shape[0])).astype(np.int64)


def class_features(labels: np.ndarray, n_classes: int, dim: int, noise: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """x_i = mu_{y_i} + noise * eps_i, with orthonormal class means mu_c (unit norm, pairwise distance sqrt 2)."""
    if dim < n_classes:
        raise ValueError("feature dimension must be at least the number of classes")
    q, _ = np.linalg.qr(rng.standard_normal((dim, n_classes)))
    means = q.T  # (n_classes, dim), orthonormal rows
    X = means[labels] + noise * rng.standard_normal((labels.shape[0], dim))
    return X.astype(np.float32), means


def attributed_sbm(n: int, n_blocks: int, p_in: float, p_out: float, alignment: float, noise: float,
                   rng: np.random.Generator, dim: int = 16) -> AttributedGraph:
    """SBM with near-equal blocks, labels aligned with blocks to degree ``alignment``, Gaussian features."""
    sizes = [n // n_blocks + (1 if b < n % n_blocks else 0) for b in range(n_blocks)]
    A, blocks = sbm_adjacency(sizes, p_in, p_out, rng)
    labels = aligned_labels(blocks, alignment, n_blocks, rng)
    X, means = class_features(labels, n_blocks, dim, noise, rng)
    return AttributedGraph(A=A, blocks=blocks, labels=labels, X=X, means=means)


# ----------------------------------------------------------------------------- edge bookkeeping


def edge_list(A) -> np.ndarray:
    """Undirected edges of A as an (E, 2) array with u < v, sorted."""
    T = sp.triu(sp.csr_array(A), k=1).tocoo()
    e = np.stack([T.row, T.col], axis=1).astype(np.int64)
    order = np.lexsort((e[:, 1], e[:, 0]))
    return e[order]


def from_edges(edges: np.ndarray, n: int) -> sp.csr_array:
    """Symmetric 0/1 adjacency from an edge list (duplicates and self-loops dropped)."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    edges = edges[edges[:, 0] != edges[:, 1]]
    r = np.concatenate([edges[:, 0], edges[:, 1]])
    c = np.concatenate([edges[:, 1], edges[:, 0]])
    A = sp.csr_array((np.ones(r.shape[0]), (r, c)), shape=(n, n))
    A.sum_duplicates()
    A.data[:] = 1.0
    return A


def apply_edits(A, add: np.ndarray, remove: np.ndarray) -> sp.csr_array:
    """A with the edges ``add`` inserted and ``remove`` deleted."""
    n = A.shape[0]
    D = sp.lil_array(sp.csr_array(A, copy=True))
    for u, v in np.asarray(remove, dtype=np.int64).reshape(-1, 2):
        D[u, v] = 0.0
        D[v, u] = 0.0
    for u, v in np.asarray(add, dtype=np.int64).reshape(-1, 2):
        if u != v:
            D[u, v] = 1.0
            D[v, u] = 1.0
    out = sp.csr_array(D, shape=(n, n))
    out.eliminate_zeros()
    return out


# ----------------------------------------------------------------------------- statistics


def degrees(A) -> np.ndarray:
    return np.asarray(sp.csr_array(A).sum(axis=1)).ravel()


def edge_homophily(A, labels: np.ndarray) -> float:
    """Fraction of edges whose two endpoints share a label."""
    e = edge_list(A)
    if e.shape[0] == 0:
        return float("nan")
    labels = np.asarray(labels)
    return float(np.mean(labels[e[:, 0]] == labels[e[:, 1]]))


def modularity(A, communities: np.ndarray) -> float:
    """Newman modularity Q = sum_c [ L_c / m - (D_c / 2m)^2 ] of a node partition."""
    e = edge_list(A)
    m = e.shape[0]
    if m == 0:
        return 0.0
    c = np.asarray(communities)
    _, c = np.unique(c, return_inverse=True)
    k = int(c.max()) + 1
    intra = np.bincount(c[e[:, 0]][c[e[:, 0]] == c[e[:, 1]]], minlength=k)
    dsum = np.bincount(c, weights=degrees(A), minlength=k)
    return float(np.sum(intra / m - (dsum / (2.0 * m)) ** 2))


def normalized_adjacency(A) -> sp.csr_array:
    """D^{-1/2} A D^{-1/2} (isolated nodes get a zero row)."""
    A = sp.csr_array(A, dtype=np.float64)
    d = degrees(A)
    inv = np.zeros_like(d)
    inv[d > 0] = 1.0 / np.sqrt(d[d > 0])
    Di = sp.diags_array(inv)
    return sp.csr_array(Di @ A @ Di)


def _dense_gap(A) -> tuple[float, np.ndarray]:
    N = normalized_adjacency(A).toarray()
    w, V = np.linalg.eigh(N)
    return float(1.0 - w[-2]), V[:, -2]


def fiedler(A, v0: np.ndarray | None = None, tol: float = 1e-10, ncv: int | None = None) -> tuple[float, np.ndarray]:
    """(lambda_2, x) of the normalised Laplacian L = I - D^{-1/2} A D^{-1/2}.

    ``x = D^{-1/2} f`` with f the unit-norm eigenvector of L for lambda_2, so that
    sum_i d_i x_i^2 = 1: the scaling used by first-order edge-flip estimates.
    A graph with an isolated node is disconnected: lambda_2 = 0.
    lambda_2 is 1 minus the second largest eigenvalue of N = D^{-1/2} A D^{-1/2}, found by
    scipy's eigsh (Lanczos) on N with its known top eigenvector sqrt(d) shifted out of the way.
    ``A`` may be sparse or a dense array; ``v0`` optionally warm-starts the iteration and
    ``tol`` is eigsh's relative tolerance (0 = machine precision).
    """
    dense = isinstance(A, np.ndarray)
    A = np.asarray(A, dtype=np.float64) if dense else sp.csr_array(A, dtype=np.float64)
    n = A.shape[0]
    d = np.asarray(A.sum(axis=1)).ravel()
    if n < 2:
        return 0.0, np.zeros(n)
    if np.any(d == 0):
        return 0.0, np.zeros(n)
    if n < 12:
        lam, f = _dense_gap(sp.csr_array(A))
    else:
        s = 1.0 / np.sqrt(d)
        N = A * s[:, None] * s[None, :] if dense else normalized_adjacency(A)
        u = np.sqrt(d) / np.linalg.norm(np.sqrt(d))

        def mv(v):
            v = np.asarray(v).ravel()
            return N @ v - 2.0 * u * (u @ v)  # top eigenvalue 1 moved to -1, below every other

        op = LinearOperator((n, n), matvec=mv, dtype=np.float64)
        ncv = ncv or min(n - 1, 20)
        if v0 is None:
            v0 = np.cos(np.arange(n) * 1.7) + 0.5  # deterministic start
        v0 = v0 - u * (u @ v0)
        try:
            w, V = eigsh(op, k=1, which="LA", v0=v0, tol=tol, maxiter=50 * n, ncv=ncv)
            lam, f = float(1.0 - w[0]), V[:, 0]
        except ArpackNoConvergence:
            lam, f = _dense_gap(sp.csr_array(A))
    x = f / np.sqrt(d)
    x = x / np.sqrt(np.sum(d * x * x))
    return max(0.0, float(lam)), x


def spectral_gap(A) -> float:
    """lambda_2 of the symmetric normalised Laplacian (the graph's spectral gap)."""
    return fiedler(A)[0]


def louvain(A, seed: int = 0, resolution: float = 1.0, max_levels: int = 20) -> np.ndarray:
    """Louvain community detection (Blondel et al. 2008): one integer community id per node.

    A lean implementation of the classic two-phase method, several times faster than
    networkx's on graphs of a few hundred nodes: (1) visit nodes in random order and move
    each to the neighbouring community with the largest modularity gain
    k_{i,C} - resolution * tot_C * k_i / 2m, until a sweep moves nobody; (2) merge each
    community into one weighted super-node and repeat until nothing changes.
    tests/ compare its modularity with networkx.community.louvain_communities.
    """
    W = sp.csr_array(A, dtype=np.float64)
    n = W.shape[0]
    rng = np.random.default_rng(int(seed))
    membership = np.arange(n)
    m2 = float(W.sum())
    if m2 == 0:
        return membership
    for _level in range(max_levels):
        N = W.shape[0]
        indptr, indices, data = W.indptr.tolist(), W.indices.tolist(), W.data.tolist()
        k = np.asarray(W.sum(axis=1)).ravel().tolist()
        comm = list(range(N))
        tot = list(k)
        any_move = False
        for _sweep in range(100):
            moved = 0
            for i in rng.permutation(N).tolist():
                ci = comm[i]
                wts: dict[int, float] = {}
                for p in range(indptr[i], indptr[i + 1]):
                    j = indices[p]
                    if j != i:
                        c = comm[j]
                        wts[c] = wts.get(c, 0.0) + data[p]
                ki = k[i]
                tot[ci] -= ki
                scale = resolution * ki / m2
                best, best_gain = ci, wts.get(ci, 0.0) - tot[ci] * scale
                for c, w in wts.items():
                    gain = w - tot[c] * scale
                    if gain > best_gain + 1e-12:
                        best, best_gain = c, gain
                tot[best] += ki
                if best != ci:
                    comm[i] = best
                    moved += 1
            if moved == 0:
                break
            any_move = True
        _, comm_arr = np.unique(np.asarray(comm), return_inverse=True)
        membership = comm_arr[membership]
        if not any_move or comm_arr.max() + 1 == N:
            break
        C = int(comm_arr.max()) + 1
        M = sp.csr_array((np.ones(N), (np.arange(N), comm_arr)), shape=(N, C))
        W = sp.csr_array(M.T @ W @ M)
    # canonical ids: ordered by each community's smallest node
    _, first = np.unique(membership, return_index=True)
    order = np.argsort(first)
    remap = np.empty_like(order)
    remap[order] = np.arange(order.size)
    _, inv = np.unique(membership, return_inverse=True)
    return remap[inv].astype(np.int64)


def louvain_networkx(A, seed: int = 0, resolution: float = 1.0) -> np.ndarray:
    """networkx's Louvain (the reference implementation), same output format as :func:`louvain`."""
    import networkx as nx

    G = nx.from_scipy_sparse_array(sp.csr_array(A))
    parts = nx.community.louvain_communities(G, seed=int(seed), resolution=resolution)
    parts = sorted((sorted(p) for p in parts), key=lambda p: p[0])
    out = np.empty(A.shape[0], dtype=np.int64)
    for i, p in enumerate(parts):
        out[p] = i
    return out


# ----------------------------------------------------------------------------- drawing


def block_layout(groups: np.ndarray, rng: np.random.Generator, spread: float = 0.42) -> np.ndarray:
    """2-D positions: groups on a circle, members on a jittered sunflower disc around the group's centre.

    Cheap (no force simulation) and makes inter-group edges long and intra-group edges short.
    """
    groups = np.asarray(groups)
    ids = np.unique(groups)
    k = len(ids)
    pos = np.zeros((groups.shape[0], 2))
    golden = np.pi * (3.0 - np.sqrt(5.0))
    for gi, g in enumerate(ids):
        members = rng.permutation(np.flatnonzero(groups == g))
        m = members.size
        ang = 2 * np.pi * gi / max(k, 1)
        centre = np.array([np.cos(ang), np.sin(ang)]) if k > 1 else np.zeros(2)
        r = spread * np.sqrt((np.arange(m) + 0.5) / max(m, 1))
        t = golden * np.arange(m)
        pts = np.stack([r * np.cos(t), r * np.sin(t)], axis=1)
        pts += rng.normal(0, 0.012, pts.shape)
        pos[members] = centre + pts * (1.0 if k > 1 else 2.0)
    return pos


# ----------------------------------------------------------------------------- GCN


def gcn_norm(A) -> sp.csr_array:
    """D~^{-1/2} (A + I) D~^{-1/2}, the GCN propagation matrix (Kipf & Welling)."""
    A = sp.csr_array(A, dtype=np.float64)
    At = A + sp.eye_array(A.shape[0], format="csr")
    return normalized_adjacency(At)


@dataclass
class GCNOutcome:
    test_acc: np.ndarray      # (B,) test accuracy at the epoch of best validation accuracy
    val_acc: np.ndarray       # (B,) best validation accuracy
    train_loss: np.ndarray    # (epochs,) mean training loss over the B models
    group_acc: np.ndarray | None = None   # (B, G) accuracy on each of G node groups, same model and epoch as test_acc


def train_gcns(adjs, feats, labels, train_idx, val_idx, test_idx, hidden: int = 32, epochs: int = 150,
               lr: float = 0.01, weight_decay: float = 5e-4, dropout: float = 0.5, seed: int = 0,
               same_init: bool = True, progress=None, device=None, groups=None) -> GCNOutcome:
    """Train B independent 2-layer GCNs, model b on graph ``adjs[b]`` with ``feats[b]``/``labels[b]``.

    All graphs have n nodes and all features d columns. The B propagations run as one
    block-diagonal sparse matmul and the B weight sets as batched matmuls; the summed loss
    has independent gradients per model and Adam is element-wise, so this equals training
    the B models one by one. ``train_idx``/``val_idx``/``test_idx`` are either one index
    array shared by all models or a list of B arrays. With ``same_init`` all models start
    from the same weights (a paired comparison between graphs). ``groups`` (optional) is a list
    of G node-index arrays, shared by all models: each model is also scored on every group at
    its own best-validation epoch, so that per-group and overall accuracies come from one model.
    """
    import torch

    from engine.core.nn import symmetric_sparse_propagator
    from engine.core.progress import report

    B = len(adjs)
    if B == 0:
        raise ValueError("no graphs to train on")
    n = adjs[0].shape[0]
    d = np.asarray(feats[0]).shape[1]
    n_cls = int(max(int(np.max(y)) for y in labels)) + 1
    dev = device if device is not None else torch.device("cpu")

    def per_model(idx):
        if isinstance(idx, list | tuple):
            return [np.asarray(i, dtype=np.int64) for i in idx]
        return [np.asarray(idx, dtype=np.int64)] * B

    tr, va, te = per_model(train_idx), per_model(val_idx), per_model(test_idx)
    norms = [gcn_norm(a) for a in adjs]
    # layer 1 propagates the raw features, which do not change: precompute  P X  once per model
    PX = torch.as_tensor(np.stack([pn @ np.asarray(f, dtype=np.float64) for pn, f in zip(norms, feats)]),
                         dtype=torch.float32, device=dev)                                     # (B,n,d)
    P = sp.block_diag(norms, format="csr")
    prop, _ = symmetric_sparse_propagator(P, dev)   # y = P x, differentiable
    Y = torch.as_tensor(np.stack([np.asarray(y, dtype=np.int64) for y in labels]), device=dev)   # (B,n)

    def masks(idx_list):
        M = torch.zeros(B, n, dtype=torch.bool)
        for b, idx in enumerate(idx_list):
            M[b, torch.as_tensor(idx)] = True
        return M.to(dev)

    Mtr, Mva, Mte = masks(tr), masks(va), masks(te)
    group_list = [np.asarray(gi, dtype=np.int64) for gi in (groups or [])]
    Mgr = torch.zeros(len(group_list), n, dtype=torch.bool)
    for j, gi in enumerate(group_list):
        Mgr[j, torch.as_tensor(gi)] = True
    Mgr = Mgr.to(dev).float()
    g = torch.Generator().manual_seed(int(seed))

    def glorot(fan_in, fan_out):
        bound = float(np.sqrt(6.0 / (fan_in + fan_out)))
        if same_init:
            w = (torch.rand(fan_in, fan_out, generator=g) * 2 - 1) * bound
            w = w.expand(B, fan_in, fan_out).clone()
        else:
            w = (torch.rand(B, fan_in, fan_out, generator=g) * 2 - 1) * bound
        return w.to(dev).requires_grad_(True)

    W1, W2 = glorot(d, hidden), glorot(hidden, n_cls)
    b1 = torch.zeros(B, 1, hidden, device=dev, requires_grad=True)
    b2 = torch.zeros(B, 1, n_cls, device=dev, requires_grad=True)
    params = [W1, b1, W2, b2]
    from engine.core.nn import make_optimizer

    opt = make_optimizer(params, lr=lr, weight_decay=weight_decay)
    torch.manual_seed(int(seed))

    def forward(train: bool):
        h = torch.relu(torch.bmm(PX, W1) + b1)
        if train and dropout > 0:   # inverted dropout (a uniform mask is cheaper than torch's bernoulli)
            h = h * (torch.rand(h.shape, device=dev) >= dropout) * (1.0 / (1.0 - dropout))
        o = torch.bmm(h, W2).reshape(B * n, n_cls)
        return prop(o.contiguous()).reshape(B, n, n_cls) + b2

    best_val = torch.full((B,), -1.0, device=dev)
    best_test = torch.zeros(B, device=dev)
    best_group = torch.zeros(B, len(group_list), device=dev)
    n_tr = Mtr.sum(1).clamp(min=1).float()
    losses = np.zeros(int(epochs))
    for ep in range(int(epochs)):
        opt.zero_grad(set_to_none=True)
        out = forward(True)
        ce = torch.nn.functional.cross_entropy(out.reshape(B * n, n_cls), Y.reshape(-1), reduction="none")
        loss_b = (ce.reshape(B, n) * Mtr).sum(1) / n_tr
        loss_b.sum().backward()
        opt.step()
        losses[ep] = float(loss_b.detach().mean())
        with torch.no_grad():
            pred = forward(False).argmax(-1)
            corr = (pred == Y).float()
            va_acc = (corr * Mva).sum(1) / Mva.sum(1).clamp(min=1)
            te_acc = (corr * Mte).sum(1) / Mte.sum(1).clamp(min=1)
            better = va_acc > best_val
            best_val = torch.where(better, va_acc, best_val)
            best_test = torch.where(better, te_acc, best_test)
            if group_list:
                gr_acc = (corr @ Mgr.T) / Mgr.sum(1).clamp(min=1)                 # (B, G)
                best_group = torch.where(better[:, None], gr_acc, best_group)
        if ep % 10 == 0 or ep == epochs - 1:
            report(progress, (ep + 1) / epochs, f"training {B} GCNs: epoch {ep + 1}/{epochs}")
    return GCNOutcome(test_acc=best_test.cpu().numpy().astype(np.float64),
                      val_acc=best_val.cpu().numpy().astype(np.float64), train_loss=losses,
                      group_acc=best_group.cpu().numpy().astype(np.float64) if group_list else None)
