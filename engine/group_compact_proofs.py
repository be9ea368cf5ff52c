"""Group-operation networks: irreps, equivariance and a compact accuracy proof (arXiv 2410.07476).

A one-hidden-layer network ``z(a, b) = U relu(L[a] + R[b]) + beta`` is trained on the full
multiplication table of the symmetric group S_n (n = 3, 4, 5). The engine

* builds S_n from its own permutation code and its real orthogonal irreducible
  representations from Young's orthogonal form (no sympy);
* decomposes the embeddings ``L``, ``R`` and the unembedding ``U`` into irreps (the group
  Fourier transform) and measures how equivariant the network is in each argument;
* proves a lower bound on the accuracy from the irrep explanation of ``U``: per input it
  needs only a few ``d x d`` matrices and the character table, never the full vector of
  |G| logits, and compares it with brute-force accuracy and with running time.

STATUS (work in progress, no page yet): on our own trained S5 network (700 full-batch steps) the
bound is valid but vacuous (0 %): per irrep, the network's d x d output matrix is 2-20x further from
a multiple of rho(ab) than the signal, so the irrep-by-irrep argument certifies no input.

The proof (see ``compact_bound``) is a rigorous bound for the given weights: each step is an
identity, the trace (von Neumann) inequality or Cauchy-Schwarz, so the bound is always <= the true accuracy.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine.core import InputError, get_device, report, seed_everything

SLUG = "group-compact-proofs"


# ----------------------------------------------------------------------------- groups
def compose(p: tuple, q: tuple) -> tuple:
    """(p o q)(i) = p(q(i)): apply q first, then p."""
    return tuple(p[i] for i in q)


def inverse(p: tuple) -> tuple:
    out = [0] * len(p)
    for i, j in enumerate(p):
        out[j] = i
    return tuple(out)


def cycle_type(p: tuple) -> tuple:
    seen, lengths = set(), []
    for s in range(len(p)):
        if s in seen:
            continue
        k, j = 0, s
        while j not in seen:
            seen.add(j)
            j = p[j]
            k += 1
        lengths.append(k)
    return tuple(sorted(lengths, reverse=True))


@dataclass(frozen=True)
class Group:
    n: int
    elements: tuple  # permutations of range(n), lexicographic; index 0 is the identity
    table: np.ndarray  # table[a, b] = index of a o b
    inv: np.ndarray  # inv[a] = index of a^-1
    classes: tuple  # cycle types (partitions), one per conjugacy class
    class_of: np.ndarray  # class index of each element

    @property
    def order(self) -> int:
        return len(self.elements)


@lru_cache(maxsize=4)
def symmetric_group(n: int) -> Group:
    if not 2 <= n <= 6:
        raise InputError("S_n is supported for n = 2..6")
    els = tuple(tuple(p) for p in itertools.permutations(range(n)))
    index = {g: i for i, g in enumerate(els)}
    table = np.array([[index[compose(a, b)] for b in els] for a in els], dtype=np.int64)
    inv = np.array([index[inverse(a)] for a in els], dtype=np.int64)
    types = [cycle_type(g) for g in els]
    classes = tuple(sorted(set(types), reverse=True))  # (n,), ... , (1,...,1) last
    classes = tuple(sorted(classes, key=lambda c: (len(c), c)))  # identity class (1,..,1) last
    class_of = np.array([classes.index(t) for t in types], dtype=np.int64)
    return Group(n, els, table, inv, classes, class_of)


# ----------------------------------------------------------------------------- irreps
def partitions(n: int, maxpart: int | None = None) -> list[tuple]:
    maxpart = n if maxpart is None else maxpart
    if n == 0:
        return [()]
    out = []
    for k in range(min(n, maxpart), 0, -1):
        out += [(k,) + rest for rest in partitions(n - k, k)]
    return out


def standard_tableaux(shape: tuple) -> list[dict]:
    """All standard Young tableaux of a shape, as {entry: (row, col)} with entries 1..n."""
    n = sum(shape)
    out = []

    def place(k, filled, pos):
        if k > n:
            out.append(dict(pos))
            return
        for r, length in enumerate(shape):
            c = filled[r]
            if c < length and (r == 0 or filled[r - 1] > c):
                filled[r] += 1
                pos[k] = (r, c)
                place(k + 1, filled, pos)
                filled[r] -= 1
                del pos[k]

    place(1, [0] * len(shape), {})
    return out


def young_generators(shape: tuple) -> list[np.ndarray]:
    """Young's orthogonal form: matrices of the adjacent transpositions s_i = (i, i+1), i = 0..n-2."""
    tabs = standard_tableaux(shape)
    key = [tuple(sorted(t.items())) for t in tabs]
    where = {k: i for i, k in enumerate(key)}
    n, d = sum(shape), len(tabs)
    gens = []
    for i in range(n - 1):
        k = i + 1  # tableau entries k and k+1
        M = np.zeros((d, d))
        for j, t in enumerate(tabs):
            (r1, c1), (r2, c2) = t[k], t[k + 1]
            axial = (c2 - r2) - (c1 - r1)
            M[j, j] = 1.0 / axial
            if abs(axial) > 1:
                sw = dict(t)
                sw[k], sw[k + 1] = t[k + 1], t[k]
                M[where[tuple(sorted(sw.items()))], j] = np.sqrt(1.0 - 1.0 / axial**2)
        gens.append(M)
    return gens


@dataclass(frozen=True)
class Irrep:
    shape: tuple
    dim: int
    mats: np.ndarray  # (|G|, d, d) real orthogonal, a homomorphism for Group.table
    chars: np.ndarray  # (n_classes,)


@lru_cache(maxsize=4)
def irreps(n: int) -> tuple:
    """All irreps of S_n (one per partition), built by a walk over the Cayley graph."""
    G = symmetric_group(n)
    index = {g: i for i, g in enumerate(G.elements)}
    swaps = []
    for i in range(n - 1):
        s = list(range(n))
        s[i], s[i + 1] = s[i + 1], s[i]
        swaps.append(tuple(s))
    out = []
    for shape in partitions(n):
        gens = young_generators(shape)
        d = gens[0].shape[0] if gens else 1
        mats = np.zeros((G.order, d, d))
        done = np.zeros(G.order, bool)
        mats[0], done[0] = np.eye(d), True
        frontier = [G.elements[0]]
        while frontier:
            nxt = []
            for p in frontier:
                ip = index[p]
                for s, M in zip(swaps, gens):
                    q = compose(p, s)
                    iq = index[q]
                    if not done[iq]:
                        mats[iq] = mats[ip] @ M
                        done[iq] = True
                        nxt.append(q)
            frontier = nxt
        tr = np.trace(mats, axis1=1, axis2=2)
        chars = np.array([tr[np.argmax(G.class_of == k)] for k in range(len(G.classes))])
        out.append(Irrep(shape, d, mats, chars))
    return tuple(out)


def irrep_name(shape: tuple) -> str:
    return "[" + ",".join(str(s) for s in shape) + "]"


def fourier_basis(n: int) -> list[np.ndarray]:
    """Per irrep an orthonormal basis of functions on G: sqrt(d/|G|) rho(g)_ij, shape (|G|, d*d)."""
    G = symmetric_group(n)
    return [np.sqrt(ir.dim / G.order) * ir.mats.reshape(G.order, -1) for ir in irreps(n)]


def irrep_energy(W: np.ndarray, n: int) -> np.ndarray:
    """Share of the squared norm of each column of W (|G| x k) in each irrep: (n_irreps, k)."""
    basis = fourier_basis(n)
    e = np.stack([((B.T @ W) ** 2).sum(0) for B in basis])
    return e / np.maximum(e.sum(0, keepdims=True), 1e-30)


# ----------------------------------------------------------------------------- model
@dataclass
class Weights:
    """z(a, b) = U relu(L[a] + R[b]) + beta, all numpy float64."""

    L: np.ndarray  # (|G|, N)
    R: np.ndarray  # (|G|, N)
    U: np.ndarray  # (|G|, N)
    beta: np.ndarray  # (|G|,)


def train_weights(n: int, hidden: int, steps: int, lr: float, weight_decay: float, seed: int,
                  progress=None) -> tuple[Weights, list[float]]:
    """Full-batch AdamW on the whole multiplication table of S_n (cross-entropy)."""
    import torch

    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    seed_everything(seed, torch_too=True)
    device = get_device()
    G = symmetric_group(n)
    m = G.order
    gen = torch.Generator().manual_seed(seed)
    scale = 1.0 / np.sqrt(hidden)
    L = (torch.randn(m, hidden, generator=gen) * 0.5).to(device).requires_grad_()
    R = (torch.randn(m, hidden, generator=gen) * 0.5).to(device).requires_grad_()
    U = (torch.randn(m, hidden, generator=gen) * scale).to(device).requires_grad_()
    beta = torch.zeros(m, device=device, requires_grad=True)
    A = torch.arange(m, device=device).repeat_interleave(m)
    B = torch.arange(m, device=device).repeat(m)
    Y = torch.as_tensor(G.table.reshape(-1), device=device)
    opt = torch.optim.AdamW([L, R, U, beta], lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    hist = []
    for s in range(steps):
        z = torch.relu(L[A] + R[B]) @ U.T + beta
        loss = torch.nn.functional.cross_entropy(z, Y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        hist.append(float(loss.detach()))
        if s % 10 == 0 or s == steps - 1:
            report(progress, (s + 1) / steps, f"training on S{n}: step {s + 1}/{steps}, loss {hist[-1]:.3g}")
    w = Weights(*(t.detach().cpu().double().numpy() for t in (L, R, U, beta)))
    return w, hist


def hidden_acts(w: Weights, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(w.L[a] + w.R[b], 0.0)


def all_logits(w: Weights) -> np.ndarray:
    """Brute force: Z[a, b, c] for every pair (|G|^2 forward passes)."""
    m = w.L.shape[0]
    H = np.maximum(w.L[:, None, :] + w.R[None, :, :], 0.0).reshape(m * m, -1)
    return (H @ w.U.T + w.beta).reshape(m, m, m)


def brute_force(w: Weights, G: Group) -> tuple[float, np.ndarray]:
    Z = all_logits(w)
    m = G.order
    correct = np.take_along_axis(Z, G.table[:, :, None], 2)[..., 0]
    Zo = Z.copy()
    np.put_along_axis(Zo, G.table[:, :, None], -np.inf, 2)
    margin = correct - Zo.max(2)
    return float((margin > 0).mean()), margin.reshape(m, m)


def unembed_shares(w: Weights, n: int) -> np.ndarray:
    """share[rho, k]: fraction of neuron k's non-trivial unembedding energy in irrep rho (trivial row = 0)."""
    e = irrep_energy(w.U, n) * (w.U ** 2).sum(0)
    e[0] = 0.0
    return e / np.maximum(e.sum(0, keepdims=True), 1e-30)


def neuron_irreps(w: Weights, n: int) -> np.ndarray:
    """Each neuron's dominant irrep (over its L, R and U energy, trivial excluded)."""
    e = sum(irrep_energy(M, n) * (M ** 2).sum(0) for M in (w.L, w.R, w.U))
    e[0] = 0.0
    return np.argmax(e, axis=0)


@dataclass
class Proof:
    margin_bound: np.ndarray  # (|G|, |G|) certified lower bound on the logit margin
    accuracy_bound: float
    seconds: float
    flops: float
    explained: np.ndarray  # (n_irreps, N) bool: which (irrep, neuron) parts the explanation keeps
    unexplained_share: float  # share of U's non-trivial energy left to the residual bound
    n_terms: int  # number of kept (irrep, neuron) parts


def compact_bound(w: Weights, G: Group, tau: float = 0.05, nuclear: bool = True,
                  chunk: int = 2048) -> Proof:
    """Certified lower bound on the margin z[ab] - max_{c != ab} z[c] for every input pair.

    Explanation: the (irrep rho, neuron k) parts of the unembedding that carry at least ``tau`` of neuron
    k's energy. Split each column exactly as U[:, k] = (kept irrep parts) + (trivial part) + E[:, k].
    The kept rho parts of all neurons give
    the logit term tr(rho(c)^T V_rho) with V_rho = sum_k P_k h_k, a d x d matrix per input. Write
    V_rho = s rho(ab) + N with s = tr(rho(ab)^T V_rho)/d. For every c != ab:
        tr(rho(c)^T V_rho) <= s chi_rho(c^-1 ab) + ||N||_*     (rho(c) orthogonal; trace inequality),
    and c^-1 ab is a non-identity element, so the max over c is a max over the character table.
    The trivial part adds the same to every logit and cancels. The rest obeys, because h >= 0,
        E[c] . h <= min( max_c ||E[c]|| ||h||,  sum_k max_c E[c, k] h_k,  sum_rho c_rho ||E_rho||_op ||h|| ).
    The output bias is treated as one more neuron whose activation is 1.
    Per input this costs O(sum_rho d_rho^2 N_rho + N) instead of the |G| N of the full logit vector.
    """
    t0 = time.perf_counter()
    n, m = G.n, G.order
    reps = irreps(n)
    basis = fourier_basis(n)
    keep = unembed_shares(w, n) >= tau
    keep[0] = False
    Nn = w.U.shape[1]
    Ux = np.c_[w.U, w.beta]  # the output bias is one more "neuron" whose activation is always 1
    keep = np.c_[keep, keep.any(1)]
    E = Ux - basis[0] @ (basis[0].T @ Ux)
    groups = []
    for i, ir in enumerate(reps):
        ks = np.flatnonzero(keep[i])
        if i == 0 or len(ks) == 0:
            continue
        P = basis[i].T @ Ux[:, ks]  # (d*d, |ks|)
        E[:, ks] -= basis[i] @ P
        groups.append((i, ks, np.sqrt(ir.dim / m) * P))
    Ub = Ux - basis[0] @ (basis[0].T @ Ux)
    unexplained = float((E ** 2).sum() / max((Ub ** 2).sum(), 1e-30))
    E_ext = E
    row_max = float(np.sqrt((E_ext ** 2).sum(1)).max())
    col_max = E_ext.max(0)
    # per-irrep operator norms of the residual: |E_rho[c] . h| <= sqrt(d/|G|) sqrt(d) ||P_rho^E||_op ||h||
    op_sum = sum(np.sqrt(ir.dim / m) * np.sqrt(ir.dim) * np.linalg.norm(basis[i].T @ E, 2)
                 for i, ir in enumerate(reps) if i > 0)
    id_class = int(G.class_of[0])
    other = [k for k in range(len(G.classes)) if k != id_class]
    chars_o = np.array([reps[i].chars[other] for i, _, _ in groups]) if groups else np.zeros((0, len(other)))
    dims = [reps[i].dim for i, _, _ in groups]
    table = G.table.reshape(-1)
    a_all = np.arange(m).repeat(m)
    b_all = np.tile(np.arange(m), m)
    out = np.empty(m * m)
    for s0 in range(0, m * m, chunk):
        a, b = a_all[s0:s0 + chunk], b_all[s0:s0 + chunk]
        c_true = table[s0:s0 + chunk]
        h = np.c_[np.maximum(w.L[a] + w.R[b], 0.0), np.ones(len(a))]
        main = np.zeros(len(a))
        resid = np.zeros(len(a))
        s_all = np.zeros((len(a), len(groups)))
        for j, ((i, ks, P), d) in enumerate(zip(groups, dims)):
            V = (h[:, ks] @ P.T).reshape(-1, d, d)
            Rc = reps[i].mats[c_true]
            sj = np.einsum("pij,pij->p", Rc, V) / d
            main += sj * d
            s_all[:, j] = sj
            if d > 1:
                Nres = V - sj[:, None, None] * Rc
                if nuclear:
                    resid += np.linalg.svd(Nres, compute_uv=False).sum(1)
                else:
                    resid += np.sqrt(d * (Nres ** 2).sum((1, 2)))
        worst_other = (s_all @ chars_o).max(1) if groups else np.zeros(len(a))
        e_true = np.einsum("pk,pk->p", E_ext[c_true], h)
        hn = np.sqrt((h ** 2).sum(1))
        e_other = np.minimum(np.minimum(row_max, op_sum) * hn, h @ col_max)
        out[s0:s0 + chunk] = main - worst_other - resid + e_true - e_other
    secs = time.perf_counter() - t0
    work = sum(d * d * len(ks) for (_, ks, _), d in zip(groups, dims))
    flops = m * m * (2 * Nn + 2 * work + sum(4 * d ** 3 + 4 * d * d for d in dims) + 6 * (Nn + 1)
                     + 2 * len(groups) * len(other))
    mb = out.reshape(m, m)
    return Proof(mb, float((mb > 0).mean()), secs, float(flops), keep, unexplained, int(keep.sum()))


# ----------------------------------------------------------------------------- training script
TRAIN_SETTINGS = {3: dict(hidden=32, steps=300, lr=1e-2, weight_decay=1.0),
                  4: dict(hidden=64, steps=400, lr=1e-2, weight_decay=1.0),
                  5: dict(hidden=128, steps=700, lr=5e-3, weight_decay=1.0)}


def checkpoint_path(n: int):
    from engine.core.nn import asset_path

    return asset_path(f"{SLUG}/s{n}.pt")


def _train_cli(ns=(3, 4, 5)) -> None:
    import torch

    from engine.core.nn import save_state

    for n in ns:
        st = TRAIN_SETTINGS[n]
        w, hist = train_weights(n, st["hidden"], st["steps"], st["lr"], st["weight_decay"], seed=0,
                                progress=lambda f, msg: print(f"\r{msg}", end="", flush=True))
        acc, _ = brute_force(w, symmetric_group(n))
        print(f"\nS{n}: accuracy {acc:.4f}, final loss {hist[-1]:.4g}")
        mod = torch.nn.Module()
        for k in ("L", "R", "U", "beta"):
            mod.register_buffer(k, torch.tensor(getattr(w, k), dtype=torch.float32))
        save_state(mod, checkpoint_path(n), extra={"n": n, **st, "accuracy": acc})


if __name__ == "__main__":
    import sys

    if len(sys.argv) >= 2 and sys.argv[1] == "train":
        _train_cli(tuple(int(x) for x in sys.argv[2:]) or (3, 4, 5))
    else:
        print("usage: python -m engine.group_compact_proofs train [3 4 5]")
