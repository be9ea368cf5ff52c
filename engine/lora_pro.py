"""LoRA-Pro: adjust LoRA's factor gradients so the equivalent gradient is the best low-rank one.

With ``W = W0 + s·B·A`` a gradient step on (A, B) moves W, to first order, by ``-lr·g_eq`` with
``g_eq = s·B·G_A + s·G_B·A`` (the "equivalent gradient"). Plain LoRA uses ``G_A = s·Bᵀg``,
``G_B = s·g·Aᵀ``; LoRA-Pro picks (G_A, G_B) so that ``g_eq`` is the Frobenius-closest matrix of
that form to the full gradient ``g`` (the projection of g on the tangent space of rank-r matrices
at B·A), and uses the remaining r×r freedom X to stay closest to the plain LoRA gradients
(a Sylvester equation).

The algebra (``lorapro_grads``) is generic: it takes numpy factor matrices and a full gradient and
could be dropped into any trainer (a Hugging Face model's LoRA layers expose exactly A, B and, with
a hook, the full weight gradient). The live experiment trains a single linear layer, where the full
gradient, the loss and the best rank-r answer are available in closed form. float64 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.core import Choice, Claim, Float, InputError, Int, param, seed_everything
from engine.core.progress import report

M, N_IN, N_SAMPLES = 32, 64, 256
DELTA = 1e-8
LR_GRIDS = {
    "sgd": {"small": (0.03, 0.1, 0.3, 1.0), "medium": (0.1, 0.3, 1.0, 1.8), "large": (0.3, 1.0, 1.8, 3.0, 5.0)},
    "adam": {"small": (1e-3, 3e-3, 1e-2, 3e-2), "medium": (3e-3, 1e-2, 3e-2, 1e-1),
             "large": (1e-2, 3e-2, 1e-1, 3e-1, 1.0)},
}
METHODS = ("full", "lora", "lorapro")
METHOD_LABELS = {"full": "full fine-tuning", "lora": "LoRA", "lorapro": "LoRA-Pro"}


@dataclass(frozen=True)
class Config:
    rank: int = param(4, Int(1, 16, "LoRA rank r", help="adapter capacity (rows of A, columns of B)"))
    target_rank: int = param(4, Int(1, 32, "Target rank", help="rank of the change the data ask for; "
                                    "above r no adapter can beat the rank-r floor"))
    cond: float = param(30.0, Choice((1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0), "Input condition number",
                                     widget="select_slider", help="how anisotropic the input covariance is"))
    optimizer: str = param("sgd", Choice(("sgd", "adam"), "Optimiser", widget="radio",
                                         labels=("SGD", "Adam (full-size moments)")))
    steps: int = param(100, Int(20, 400, "Steps", step=10))
    lr_grid: str = param("medium", Choice(("small", "medium", "large"), "Learning-rate grid",
                                          help="each method gets its best learning rate from this grid"))
    scale: float = param(2.0, Float(0.5, 8.0, "LoRA scale s", step=0.5, help="W = W0 + s·B·A"))
    noise: float = param(0.0, Float(0.0, 0.5, "Label noise σ", step=0.05))
    model: str = param("linear", Choice(("linear", "mlp"), "Model", widget="radio",
                                        labels=("one linear layer", "3-layer tanh MLP"),
                                        help="the MLP gets one LoRA adapter per weight matrix"))
    x_choice: str = param("sylvester", Choice(("sylvester", "zero", "symmetric"), "Choice of X",
                                              labels=("Sylvester (closest to LoRA's gradients; the paper)",
                                                      "zero (B's step carries nothing of P_B·g·P_A)",
                                                      "symmetric (A and B each carry half of P_B·g·P_A)"),
                                              help="the free r×r matrix; it cancels in the equivalent gradient "
                                                   "(the first-order change of W) but not in the factors' steps",
                                              group="Advanced"))
    seed: int = param(0, Int(0, 9, "Seed"))


# largest widget setting (MLP + Adam, largest ranks, steps, lr grid): 11 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(rank=16, target_rank=32, optimizer="adam", steps=400, lr_grid="large", model="mlp")


@dataclass
class Result:
    steps: np.ndarray
    loss: dict[str, np.ndarray]            # best-lr loss curve per method (nan after divergence)
    err: dict[str, np.ndarray]             # relative surrogate error e(t) of lora / lorapro
    lr_grid: np.ndarray
    final_by_lr: dict[str, np.ndarray]     # final loss per method per lr (inf = diverged)
    best_lr: dict[str, float]
    floor: float                           # rank-r optimum of the main problem
    sv_target: np.ndarray
    sv_learned: dict[str, np.ndarray]
    twin_loss: dict[str, np.ndarray]
    twin_floor: float
    twin_rank: int
    factor_norms: dict[str, float]
    metrics: dict[str, float] = field(default_factory=dict)
    model: str = "linear"
    layer_err: dict[str, np.ndarray] = field(default_factory=dict)   # MLP: (steps, layers) e(t) per layer
    # linear model: (steps, 5) gradient_plane(g, g̃_lora, g̃_pro) at each step of the LoRA-Pro run; empty for the MLP
    plane: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))


# ----------------------------------------------------------------------------- the algebra
def _inv(M_: np.ndarray) -> np.ndarray:
    return np.linalg.pinv(M_ + DELTA * np.eye(M_.shape[0]))


def solve_x_sylvester(BtB: np.ndarray, AAt: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Solve BtB·X + X·AAt = C for symmetric positive (semi)definite BtB, AAt via two eigh calls."""
    lam, U = np.linalg.eigh(BtB)
    mu, V = np.linalg.eigh(AAt)
    denom = lam[:, None] + mu[None, :]
    denom = np.where(np.abs(denom) < 1e-300, 1e-300, denom)
    return U @ ((U.T @ C @ V) / denom) @ V.T


def lorapro_grads(A: np.ndarray, B: np.ndarray, g: np.ndarray, s: float, x_choice: str = "sylvester"):
    """LoRA-Pro factor gradients (G_A, G_B) for W = W0 + s·B·A and full gradient g.

    Returns (G_A, G_B, X). The equivalent gradient s·B·G_A + s·G_B·A is the orthogonal projection
    P_B g + g P_A − P_B g P_A of g, whatever X is.
    """
    r = A.shape[0]
    gA = s * B.T @ g
    gB = s * g @ A.T
    AAt_inv = _inv(A @ A.T)
    if not np.any(B):  # first step: (BᵀB)⁻¹ does not exist; the limit is G_A = 0, X = 0
        return np.zeros_like(A), (g @ A.T @ AAt_inv) / s, np.zeros((r, r))
    BtB = B.T @ B
    BtB_inv = _inv(BtB)
    if x_choice == "sylvester":
        X = solve_x_sylvester(BtB, A @ A.T, -(BtB_inv @ gA @ A.T) / s**2)
    elif x_choice == "zero":
        X = np.zeros((r, r))
    elif x_choice == "symmetric":
        # the component P_B g P_A of the equivalent gradient can be carried by either factor: X = 0 gives it all to
        # A, this X gives half to each (X A = -1/2 (BᵀB)⁻¹Bᵀ g P_A / s). Until 2026-12-04 the last factor here was
        # AAᵀ instead of (AAᵀ)⁻¹: not scale-invariant, and LoRA-Pro then diverged at every learning rate
        X = -0.5 * (BtB_inv @ B.T @ gB @ AAt_inv) / s**2
    else:
        raise InputError(f"unknown choice of X: {x_choice!r}")
    hA = (BtB_inv @ gA) / s**2 + X @ A
    hB = ((gB - B @ (BtB_inv @ (B.T @ gB))) @ AAt_inv) / s**2 - B @ X
    return hA, hB, X


def lora_grads(A, B, g, s):
    return s * B.T @ g, s * g @ A.T


def equivalent_gradient(A, B, GA, GB, s):
    return s * (B @ GA + GB @ A)


def projection_gradient(A, B, g):
    """P_B g + g P_A − P_B g P_A (the closed form of LoRA-Pro's equivalent gradient)."""
    PB = B @ _inv(B.T @ B) @ B.T if np.any(B) else np.zeros((B.shape[0], B.shape[0]))
    PA = A.T @ _inv(A @ A.T) @ A
    return PB @ g + g @ PA - PB @ g @ PA


# ----------------------------------------------------------------------------- the toy problem
@dataclass
class Problem:
    W0: np.ndarray
    Wstar: np.ndarray
    Sigma: np.ndarray     # XᵀX / N
    Cxy: np.ndarray       # YᵀX / N
    y2: float             # ‖Y‖² / (2N)
    A0: np.ndarray

    def loss(self, W):
        return 0.5 * np.sum((W @ self.Sigma) * W) - np.sum(W * self.Cxy) + self.y2

    def grad(self, W):
        return W @ self.Sigma - self.Cxy


def make_problem(rng: np.random.Generator, target_rank: int, cond: float, noise: float, rank: int) -> Problem:
    W0 = rng.normal(0.0, 1.0 / np.sqrt(N_IN), (M, N_IN))
    k = target_rank
    U, _ = np.linalg.qr(rng.normal(size=(M, k)))
    V, _ = np.linalg.qr(rng.normal(size=(N_IN, k)))
    sig = 3.0 * np.linspace(1.0, 0.3, k)
    Wstar = W0 + (U * sig) @ V.T
    R, _ = np.linalg.qr(rng.normal(size=(N_IN, N_IN)))
    eig = np.logspace(0.0, -np.log10(cond), N_IN)
    X = (rng.normal(size=(N_SAMPLES, N_IN)) * np.sqrt(eig)) @ R.T
    Y = X @ Wstar.T + noise * rng.normal(size=(N_SAMPLES, M))
    A0 = rng.uniform(-1 / np.sqrt(N_IN), 1 / np.sqrt(N_IN), (rank, N_IN))
    return Problem(W0, Wstar, X.T @ X / N_SAMPLES, Y.T @ X / N_SAMPLES, float(np.sum(Y**2) / (2 * N_SAMPLES)), A0)


def rank_floor(p: Problem, r: int) -> float:
    """min over rank-r ΔW of L(W0 + ΔW): reduced-rank regression in closed form."""
    W_ols = np.linalg.solve(p.Sigma, p.Cxy.T).T
    evals, evecs = np.linalg.eigh(p.Sigma)
    half = (evecs * np.sqrt(np.clip(evals, 0, None))) @ evecs.T
    sv = np.linalg.svd((W_ols - p.W0) @ half, compute_uv=False)
    return float(p.loss(W_ols) + 0.5 * np.sum(sv[r:] ** 2))


def train(p: Problem, method: str, lr: float, steps: int, s: float, optimizer: str, x_choice: str,
          record_err: bool = False):
    """One run; returns (loss curve, e(t) for lora & lorapro or None, final W, factor norm)."""
    r = p.A0.shape[0]
    A, B = p.A0.copy(), np.zeros((M, r))
    W = p.W0.copy()
    losses = np.full(steps + 1, np.nan)
    errs = ({"lora": np.full(steps, np.nan), "lorapro": np.full(steps, np.nan),
             "plane": np.full((steps, 5), np.nan)} if record_err else None)
    b1, b2, eps = 0.9, 0.999, 1e-8
    mW = np.zeros_like(W)
    vW = np.zeros_like(W)
    mA, vA, mB, vB = np.zeros_like(A), np.zeros_like(A), np.zeros_like(B), np.zeros_like(B)
    L0 = p.loss(W)
    for t in range(steps):
        if method != "full":
            W = p.W0 + s * B @ A
        L = p.loss(W)
        losses[t] = L
        if not np.isfinite(L) or L > 1e6 * max(L0, 1e-12):
            losses[t] = np.nan
            return losses, errs, None, np.nan
        g = p.grad(W)
        if record_err:
            gn = np.linalg.norm(g) + 1e-300
            la, lb = lora_grads(A, B, g, s)
            g_lora = equivalent_gradient(A, B, la, lb, s)
            errs["lora"][t] = np.linalg.norm(g_lora - g) / gn
            pa, pb, _ = lorapro_grads(A, B, g, s, x_choice)
            g_pro = equivalent_gradient(A, B, pa, pb, s)
            errs["lorapro"][t] = np.linalg.norm(g_pro - g) / gn
            errs["plane"][t] = gradient_plane(g, g_lora, g_pro)
        if method == "full":
            if optimizer == "sgd":
                W = W - lr * g
            else:
                mW = b1 * mW + (1 - b1) * g
                vW = b2 * vW + (1 - b2) * g**2
                W = W - lr * (mW / (1 - b1 ** (t + 1))) / (np.sqrt(vW / (1 - b2 ** (t + 1))) + eps)
            continue
        if method == "lora":
            GA, GB = lora_grads(A, B, g, s)
            if optimizer == "adam":
                mA = b1 * mA + (1 - b1) * GA
                vA = b2 * vA + (1 - b2) * GA**2
                mB = b1 * mB + (1 - b1) * GB
                vB = b2 * vB + (1 - b2) * GB**2
                c1, c2 = 1 - b1 ** (t + 1), 1 - b2 ** (t + 1)
                GA = (mA / c1) / (np.sqrt(vA / c2) + eps)
                GB = (mB / c1) / (np.sqrt(vB / c2) + eps)
        else:  # lorapro
            if optimizer == "sgd":
                GA, GB, _ = lorapro_grads(A, B, g, s, x_choice)
            else:
                # full-size Adam moments of the equivalent gradient, direction mapped back and adjusted
                geq = projection_gradient(A, B, g)
                mW = b1 * mW + (1 - b1) * geq
                vW = b2 * vW + (1 - b2) * geq**2
                D = (mW / (1 - b1 ** (t + 1))) / (np.sqrt(vW / (1 - b2 ** (t + 1))) + eps)
                GA, GB, _ = lorapro_grads(A, B, D, s, x_choice)
        A, B = A - lr * GA, B - lr * GB
    if method != "full":
        W = p.W0 + s * B @ A
    L = p.loss(W)
    if not np.isfinite(L) or L > 1e6 * max(L0, 1e-12):
        return losses, errs, None, np.nan
    losses[steps] = L
    fn = float(np.linalg.norm(A) + np.linalg.norm(B)) if method != "full" else np.nan
    return losses, errs, W, fn


def gradient_plane(g: np.ndarray, g_lora: np.ndarray, g_pro: np.ndarray) -> np.ndarray:
    """The three gradients in the plane spanned by g and g̃_pro, in units of ‖g‖ (Frobenius inner product).

    Axis 1 is g itself, axis 2 the part of g̃_pro orthogonal to g. Returns (pro_x, pro_y, lora_x, lora_y,
    lora_out): the coordinates of g̃_pro and of g̃_lora, and the norm of the part of g̃_lora outside the plane
    (g sits at (1, 0)). Since g̃_pro is the orthogonal projection of g onto a subspace, ⟨g, g̃_pro⟩ = ‖g̃_pro‖²,
    so g̃_pro lies on the circle with diameter from 0 to g."""
    gn = float(np.linalg.norm(g))
    if gn == 0.0:
        return np.full(5, np.nan)
    u1 = g / gn
    perp = g_pro - np.sum(g_pro * u1) * u1
    pn = float(np.linalg.norm(perp))
    if pn <= 1e-12 * gn:                        # g̃_pro along g: take the second axis from g̃_lora instead
        perp = g_lora - np.sum(g_lora * u1) * u1
        pn = float(np.linalg.norm(perp))
    u2 = perp / pn if pn > 0 else np.zeros_like(g)
    lx, ly = float(np.sum(g_lora * u1)), float(np.sum(g_lora * u2))
    out = float(np.linalg.norm(g_lora - lx * u1 - ly * u2))
    return np.array([np.sum(g_pro * u1), np.sum(g_pro * u2), lx, ly, out]) / gn


def _lr_sweep(train_one, grid, progress, n_jobs: int, prefix: str):
    """Train every method at every learning rate of ``grid``; keep each method's best (final loss) run.

    ``train_one(method, lr)`` returns (loss curve, ..., state or None when it diverged)."""
    final_by_lr = {m: np.full(len(grid), np.inf) for m in METHODS}
    runs: dict[str, list] = {m: [] for m in METHODS}
    job = 0
    for m in METHODS:
        for i, lr in enumerate(grid):
            out = train_one(m, lr)
            runs[m].append(out)
            if out[2] is not None:
                final_by_lr[m][i] = out[0][-1]
            job += 1
            report(progress, job / n_jobs, f"{prefix}{METHOD_LABELS[m]}, lr {lr:g}")
    best_i = {m: int(np.argmin(final_by_lr[m])) for m in METHODS}
    best_lr = {m: float(grid[best_i[m]]) for m in METHODS}
    loss = {m: runs[m][best_i[m]][0] for m in METHODS}
    return runs, final_by_lr, best_i, best_lr, loss, job


def run(config: Config, progress=None) -> Result:
    if config.model == "mlp":
        return run_mlp(config, progress)
    if config.model != "linear":
        raise InputError(f"unknown model: {config.model!r}")
    return run_linear(config, progress)


def run_linear(config: Config, progress=None) -> Result:
    rng = seed_everything(config.seed)
    r, steps, s = config.rank, config.steps, config.scale
    if config.x_choice not in ("sylvester", "zero", "symmetric"):
        raise InputError(f"unknown choice of X: {config.x_choice!r}")
    grid = LR_GRIDS[config.optimizer][config.lr_grid]
    p = make_problem(rng, config.target_rank, config.cond, config.noise, r)
    twin_rank = int(min(min(M, N_IN), max(2 * r, config.target_rank + 1)))
    twin = make_problem(np.random.default_rng(config.seed + 10_000), twin_rank, config.cond, config.noise, r)
    twin_steps = 3 * steps
    n_jobs = len(METHODS) * len(grid) + 2 + 3 * 3
    job = 0

    runs, final_by_lr, best_i, best_lr, loss, job = _lr_sweep(
        lambda m, lr: train(p, m, lr, steps, s, config.optimizer, config.x_choice), grid, progress, n_jobs, "")
    # e(t) of both surrogates along both adapter trajectories (re-run at the winning lr, recording)
    err_on_lora = train(p, "lora", best_lr["lora"], steps, s, config.optimizer, config.x_choice, True)[1]
    err_on_pro = train(p, "lorapro", best_lr["lorapro"], steps, s, config.optimizer, config.x_choice, True)[1]
    err = {"lora": err_on_lora["lora"], "lorapro": err_on_pro["lorapro"]}
    plane = err_on_pro["plane"]           # the three gradients along the LoRA-Pro trajectory

    sv_target = np.linalg.svd(p.Wstar - p.W0, compute_uv=False)[: max(r, config.target_rank) + 2]
    sv_learned = {}
    for m in METHODS:
        W = runs[m][best_i[m]][2]
        sv_learned[m] = (np.linalg.svd(W - p.W0, compute_uv=False)[: len(sv_target)] if W is not None
                         else np.full(len(sv_target), np.nan))
    factor_norms = {m: float(runs[m][best_i[m]][3]) for m in ("lora", "lorapro")}

    twin_loss = {}
    for m in ("full", "lora", "lorapro"):
        lr = best_lr[m]
        out = train(twin, m, lr, twin_steps, s, config.optimizer, config.x_choice)
        twin_loss[m] = out[0] if out[2] is not None else np.full(twin_steps + 1, np.nan)
        job += 2
        report(progress, job / n_jobs, f"over-rank twin: {METHOD_LABELS[m]}")

    floor = rank_floor(p, r)
    twin_floor = rank_floor(twin, r)
    Lf, Ll, Lp = (float(final_by_lr[m][best_i[m]]) for m in METHODS)
    e_l = np.concatenate([err_on_lora["lora"], err_on_pro["lora"]])
    e_p = np.concatenate([err_on_lora["lorapro"], err_on_pro["lorapro"]])
    ok = np.isfinite(e_l) & np.isfinite(e_p)
    metrics = {
        "L_full": Lf, "L_lora": Ll, "L_pro": Lp, "floor": floor,
        "mean_err_lora": float(np.nanmean(e_l)) if ok.any() else np.nan,
        "mean_err_pro": float(np.nanmean(e_p)) if ok.any() else np.nan,
        "max_err_excess": float(np.max(e_p[ok] - e_l[ok])) if ok.any() else np.nan,
        "err_steps_checked": float(ok.sum()),
        "twin_L_pro": float(twin_loss["lorapro"][-1]), "twin_L_lora": float(twin_loss["lora"][-1]),
        "twin_floor": twin_floor,
    }
    if np.isfinite(Ll) and np.isfinite(Lf) and np.isfinite(Lp) and Ll >= 2 * Lf and Lf > 0:
        metrics["gap_closure"] = float((np.log(Ll) - np.log(Lp)) / (np.log(Ll) - np.log(Lf)))
    else:
        metrics["gap_closure"] = np.nan
    metrics["ratio_lora_full"] = Ll / Lf if Lf > 0 else np.nan
    report(progress, 1.0, "done")
    return Result(steps=np.arange(steps + 1), loss=loss, err=err, lr_grid=np.array(grid, float),
                  final_by_lr=final_by_lr, best_lr=best_lr, floor=floor, sv_target=sv_target,
                  sv_learned=sv_learned, twin_loss=twin_loss, twin_floor=twin_floor, twin_rank=twin_rank,
                  factor_norms=factor_norms, metrics=metrics, plane=plane)


def claims(result: Result) -> list[Claim]:
    if result.model == "mlp":
        return claims_mlp(result)
    m = result.metrics
    excess_ok = m["max_err_excess"] <= 1e-9
    c1 = Claim("LoRA-Pro's equivalent gradient is the closest one to the full gradient: its error is below "
               "LoRA's at every step, and on average at most half of it",
               measured=m["mean_err_pro"] / m["mean_err_lora"] if excess_ok else np.inf, op="<=", threshold=0.5,
               label="mean e_pro / mean e_LoRA",
               detail=f"mean e_pro = {m['mean_err_pro']:.3g}, mean e_LoRA = {m['mean_err_lora']:.3g}; "
                      f"largest per-step excess e_pro − e_LoRA = {m['max_err_excess']:.2g} over "
                      f"{int(m['err_steps_checked'])} steps (must be ≤ 1e-9)")
    closure = m["gap_closure"]
    if np.isfinite(closure):
        det = (f"final loss: full {m['L_full']:.3g}, LoRA {m['L_lora']:.3g}, LoRA-Pro {m['L_pro']:.3g} "
               f"(each at its best learning rate); rank-r floor {m['floor']:.3g}, which full FT may beat")
    else:
        det = (f"precondition not met (needs LoRA ≥ 2× full FT and no divergence): full {m['L_full']:.3g}, "
               f"LoRA {m['L_lora']:.3g}, LoRA-Pro {m['L_pro']:.3g}")
    c2 = Claim("LoRA-Pro closes most of the loss gap between LoRA and full fine-tuning",
               measured=closure, op=">=", threshold=0.8, label="log-gap closed", detail=det)
    ratio = m["twin_L_pro"] / m["twin_floor"] if m["twin_floor"] > 0 else np.nan
    c3 = Claim("Honesty check: when the target needs more rank than r, LoRA-Pro reaches the rank-r floor "
               "and does not beat it", measured=ratio, op="<=", threshold=1.05,
               label="twin L_pro / rank-r floor",
               detail=f"rank-{result.twin_rank} target, {len(result.twin_loss['lorapro']) - 1} steps; "
                      f"must also be ≥ 1 − 1e-6: {'it is' if ratio >= 1 - 1e-6 else 'it is NOT'}; "
                      f"LoRA ends at {m['twin_L_lora'] / m['twin_floor']:.3g}× the floor")
    if not ratio >= 1 - 1e-6:
        c3 = Claim(c3.statement, measured=np.inf, op="<=", threshold=1.05, label=c3.label, detail=c3.detail)
    return [c1, c2, c3]


# ----------------------------------------------------------------------------- a small MLP, one adapter per layer
MLP_SIZES = (32, 48, 48, 16)   # input, hidden, hidden, output; weight l has shape (sizes[l+1], sizes[l])
MLP_DELTA_SCALE = 3.0
MLP_LR_FACTOR = {"sgd": 0.5, "adam": 1.0}   # the tanh MLP diverges above lr ≈ 0.6 under SGD


@dataclass
class MLPProblem:
    W0: list[np.ndarray]
    Wstar: list[np.ndarray]
    X: np.ndarray
    Y: np.ndarray
    A0: list[np.ndarray]

    def loss_grads(self, Ws: list[np.ndarray]):
        """Loss ½‖f(X) − Y‖²/N of the tanh MLP and the full gradient of every weight matrix (backprop)."""
        hs = [self.X]
        for W in Ws[:-1]:
            hs.append(np.tanh(hs[-1] @ W.T))
        out = hs[-1] @ Ws[-1].T
        res = out - self.Y
        n = self.X.shape[0]
        loss = 0.5 * float(np.sum(res**2)) / n
        grads = [None] * len(Ws)
        d = res / n
        for li in range(len(Ws) - 1, -1, -1):
            grads[li] = d.T @ hs[li]
            if li:
                d = (d @ Ws[li]) * (1 - hs[li] ** 2)
        return loss, grads


def make_mlp_problem(rng: np.random.Generator, target_rank: int, cond: float, noise: float, rank: int) -> MLPProblem:
    W0, Wstar, A0 = [], [], []
    for n_in, n_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
        w0 = rng.normal(0.0, 1.0 / np.sqrt(n_in), (n_out, n_in))
        k = min(target_rank, n_in, n_out)
        U, _ = np.linalg.qr(rng.normal(size=(n_out, k)))
        V, _ = np.linalg.qr(rng.normal(size=(n_in, k)))
        W0.append(w0)
        Wstar.append(w0 + (U * (MLP_DELTA_SCALE * np.linspace(1.0, 0.3, k))) @ V.T)
        A0.append(rng.uniform(-1 / np.sqrt(n_in), 1 / np.sqrt(n_in), (rank, n_in)))
    n_x = MLP_SIZES[0]
    R, _ = np.linalg.qr(rng.normal(size=(n_x, n_x)))
    eig = np.logspace(0.0, -np.log10(cond), n_x)
    X = (rng.normal(size=(N_SAMPLES, n_x)) * np.sqrt(eig)) @ R.T
    p = MLPProblem(W0, Wstar, X, np.zeros((N_SAMPLES, MLP_SIZES[-1])), A0)
    hs = X
    for W in Wstar[:-1]:
        hs = np.tanh(hs @ W.T)
    p.Y = hs @ Wstar[-1].T + noise * rng.normal(size=(N_SAMPLES, MLP_SIZES[-1]))
    return p


def mlp_equivalent_gradients(As, Bs, grads, s, x_choice="sylvester"):
    """Per-layer LoRA and LoRA-Pro equivalent gradients for a list of adapted layers."""
    lora, pro = [], []
    for A, B, g in zip(As, Bs, grads):
        la, lb = lora_grads(A, B, g, s)
        lora.append(equivalent_gradient(A, B, la, lb, s))
        pa, pb, _ = lorapro_grads(A, B, g, s, x_choice)
        pro.append(equivalent_gradient(A, B, pa, pb, s))
    return lora, pro


def _adam(m_, v_, g, t, b1=0.9, b2=0.999, eps=1e-8):
    m_ *= b1
    m_ += (1 - b1) * g
    v_ *= b2
    v_ += (1 - b2) * g**2
    return (m_ / (1 - b1 ** (t + 1))) / (np.sqrt(v_ / (1 - b2 ** (t + 1))) + eps)


def train_mlp(p: MLPProblem, method: str, lr: float, steps: int, s: float, optimizer: str, x_choice: str,
              record_err: bool = False):
    """One fine-tuning run of the MLP; every weight matrix has its own adapter (or is trained fully).

    Returns (loss curve, e(t) dict with 'lora'/'lorapro' totals and '<name>_layers' (steps, L) or None,
    final weights or None if diverged).
    """
    L = len(p.W0)
    r = p.A0[0].shape[0]
    As = [a.copy() for a in p.A0]
    Bs = [np.zeros((w.shape[0], r)) for w in p.W0]
    Ws = [w.copy() for w in p.W0]
    losses = np.full(steps + 1, np.nan)
    errs = None
    if record_err:
        errs = {"lora": np.full(steps, np.nan), "lorapro": np.full(steps, np.nan),
                "lora_layers": np.full((steps, L), np.nan), "lorapro_layers": np.full((steps, L), np.nan)}
    mW = [np.zeros_like(w) for w in Ws]
    vW = [np.zeros_like(w) for w in Ws]
    mA = [np.zeros_like(a) for a in As]
    vA = [np.zeros_like(a) for a in As]
    mB = [np.zeros_like(b) for b in Bs]
    vB = [np.zeros_like(b) for b in Bs]
    L0 = None
    for t in range(steps + 1):
        if method != "full":
            Ws = [w0 + s * B @ A for w0, A, B in zip(p.W0, As, Bs)]
        loss, grads = p.loss_grads(Ws)
        L0 = loss if L0 is None else L0
        if not np.isfinite(loss) or loss > 1e6 * max(L0, 1e-12):
            return losses, errs, None
        losses[t] = loss
        if t == steps:
            break
        if record_err:
            lo, pr = mlp_equivalent_gradients(As, Bs, grads, s, x_choice)
            gn2 = sum(float(np.sum(g**2)) for g in grads) + 1e-300
            for name, eq in (("lora", lo), ("lorapro", pr)):
                d2 = [float(np.sum((e - g) ** 2)) for e, g in zip(eq, grads)]
                errs[name][t] = np.sqrt(sum(d2) / gn2)
                errs[name + "_layers"][t] = [np.sqrt(d / (np.sum(g**2) + 1e-300)) for d, g in zip(d2, grads)]
        for li, g in enumerate(grads):
            if method == "full":
                Ws[li] = Ws[li] - lr * (g if optimizer == "sgd" else _adam(mW[li], vW[li], g, t))
                continue
            A, B = As[li], Bs[li]
            if method == "lora":
                GA, GB = lora_grads(A, B, g, s)
                if optimizer == "adam":
                    GA, GB = _adam(mA[li], vA[li], GA, t), _adam(mB[li], vB[li], GB, t)
            elif optimizer == "sgd":
                GA, GB, _ = lorapro_grads(A, B, g, s, x_choice)
            else:
                D = _adam(mW[li], vW[li], projection_gradient(A, B, g), t)
                GA, GB, _ = lorapro_grads(A, B, D, s, x_choice)
            As[li], Bs[li] = A - lr * GA, B - lr * GB
    return losses, errs, Ws



def run_mlp(config: Config, progress=None) -> Result:
    rng = seed_everything(config.seed)
    r, steps, s = config.rank, config.steps, config.scale
    if config.x_choice not in ("sylvester", "zero", "symmetric"):
        raise InputError(f"unknown choice of X: {config.x_choice!r}")
    grid = tuple(round(MLP_LR_FACTOR[config.optimizer] * lr, 6) for lr in LR_GRIDS[config.optimizer][config.lr_grid])
    p = make_mlp_problem(rng, config.target_rank, config.cond, config.noise, r)
    n_jobs = len(METHODS) * len(grid) + 2
    job = 0
    runs, final_by_lr, best_i, best_lr, loss, job = _lr_sweep(
        lambda m, lr: train_mlp(p, m, lr, steps, s, config.optimizer, config.x_choice), grid, progress, n_jobs,
        "MLP: ")
    rec = {}
    for m in ("lora", "lorapro"):
        rec[m] = train_mlp(p, m, best_lr[m], steps, s, config.optimizer, config.x_choice, True)[1]
        job += 1
        report(progress, job / n_jobs, f"MLP: gradient errors along the {METHOD_LABELS[m]} run")
    err = {"lora": rec["lora"]["lora"], "lorapro": rec["lorapro"]["lorapro"]}
    layer_err = {"lora": rec["lora"]["lora_layers"], "lorapro": rec["lorapro"]["lorapro_layers"]}
    # both surrogates, both trajectories, totals and every layer separately
    e_l = np.concatenate([rec[m]["lora"] for m in rec] + [rec[m]["lora_layers"].ravel() for m in rec])
    e_p = np.concatenate([rec[m]["lorapro"] for m in rec] + [rec[m]["lorapro_layers"].ravel() for m in rec])
    ok = np.isfinite(e_l) & np.isfinite(e_p)
    tot_l = np.concatenate([rec[m]["lora"] for m in rec])
    tot_p = np.concatenate([rec[m]["lorapro"] for m in rec])
    ok_t = np.isfinite(tot_l) & np.isfinite(tot_p)

    sv_target = np.linalg.svd(p.Wstar[0] - p.W0[0], compute_uv=False)[: max(r, config.target_rank) + 2]
    sv_learned = {}
    for m in METHODS:
        W = runs[m][best_i[m]][2]
        sv_learned[m] = (np.linalg.svd(W[0] - p.W0[0], compute_uv=False)[: len(sv_target)] if W is not None
                         else np.full(len(sv_target), np.nan))
    Lf, Ll, Lp = (float(final_by_lr[m][best_i[m]]) for m in METHODS)
    metrics = {
        "L_full": Lf, "L_lora": Ll, "L_pro": Lp, "floor": np.nan,
        "mean_err_lora": float(np.mean(tot_l[ok_t])) if ok_t.any() else np.nan,
        "mean_err_pro": float(np.mean(tot_p[ok_t])) if ok_t.any() else np.nan,
        "max_err_excess": float(np.max(e_p[ok] - e_l[ok])) if ok.any() else np.nan,
        "err_steps_checked": float(ok_t.sum()), "err_values_checked": float(ok.sum()),
        "n_layers": float(len(p.W0)),
    }
    if np.isfinite(Ll) and np.isfinite(Lf) and np.isfinite(Lp) and Ll >= MLP_PRECONDITION * Lf and Lf > 0:
        metrics["gap_closure"] = float((np.log(Ll) - np.log(Lp)) / (np.log(Ll) - np.log(Lf)))
    else:
        metrics["gap_closure"] = np.nan
    metrics["ratio_lora_full"] = Ll / Lf if Lf > 0 else np.nan
    report(progress, 1.0, "done")
    return Result(steps=np.arange(steps + 1), loss=loss, err=err, lr_grid=np.array(grid, float),
                  final_by_lr=final_by_lr, best_lr=best_lr, floor=np.nan, sv_target=sv_target,
                  sv_learned=sv_learned, twin_loss={}, twin_floor=np.nan, twin_rank=0,
                  factor_norms={}, metrics=metrics, model="mlp", layer_err=layer_err)


def claims_mlp(result: Result) -> list[Claim]:
    m = result.metrics
    excess_ok = m["max_err_excess"] <= 1e-9
    L = int(m["n_layers"])
    c1 = Claim(f"MLP ({L} adapted layers): LoRA-Pro's per-layer equivalent gradients are closer to the full "
               "gradients than LoRA's at every step and in every layer, and on average at most half as far",
               measured=m["mean_err_pro"] / m["mean_err_lora"] if excess_ok else np.inf, op="<=", threshold=0.5,
               label="mean e_pro / mean e_LoRA (all layers)",
               detail=f"mean e_pro = {m['mean_err_pro']:.3g}, mean e_LoRA = {m['mean_err_lora']:.3g}; "
                      f"largest excess e_pro − e_LoRA = {m['max_err_excess']:.2g} over "
                      f"{int(m['err_values_checked'])} (step, layer) values (must be ≤ 1e-9)")
    closure = m["gap_closure"]
    if np.isfinite(closure):
        det = (f"final loss: full {m['L_full']:.3g}, LoRA {m['L_lora']:.3g}, LoRA-Pro {m['L_pro']:.3g} "
               "(each at its best learning rate)")
    else:
        det = (f"precondition not met (needs LoRA ≥ {MLP_PRECONDITION:g}× full FT and no divergence): full {m['L_full']:.3g}, "
               f"LoRA {m['L_lora']:.3g}, LoRA-Pro {m['L_pro']:.3g}")
    c2 = Claim("MLP: LoRA-Pro narrows the loss gap between LoRA and full fine-tuning",
               measured=closure, op=">=", threshold=MLP_CLOSURE_THRESHOLD, label="log-gap closed", detail=det)
    return [c1, c2]


MLP_CLOSURE_THRESHOLD = 0.25   # measured 0.34–0.70 over seeds 0–9 at the default MLP config
MLP_PRECONDITION = 1.5
