"""LiFT: a hierarchical Bayesian prior over per-task LoRA modules, sampled by SGLD-within-Gibbs.

Model: φ ~ N(0, σ_φ² I);  θ_i | φ ~ N(φ, β² I) for each training task;  y | x, θ_i ~ N(f(x; θ_i), σ_y² I)
with f(x; θ) = (W0 + B A) h(x), θ = (A, B) a rank-r LoRA adapter on a frozen backbone h.
Inference: SGLD on the visited tasks' θ_i, a running sum J = Σ θ_i updated by differences only, and an
exact Gibbs draw φ ~ N(v J / β², v I), v = (1/σ_φ² + N/β²)⁻¹. The φ samples are summarised on the fly by
an online-EM diagonal Gaussian mixture, which becomes the prior Σ_m π_m N(μ_m, diag v_m + β² I) for
MAP fine-tuning of a new task from a few examples.

The generic pieces (``sgld_gibbs``, ``OnlineGMM``, ``mixture_logpdf_grad``, ``map_finetune``) only need a
batched log-likelihood gradient per task; the live experiment uses a small analytic regression family
(so the full paper's model was reconstructed from its abstract and reviews; our choices are stated).

Negative controls of claim 1 (measured 2026-12-06, seeds 0 / 1 / 2): a sampler that ignores β (handed β = 10⁶)
fails the badge (MSE ratio 0.87 / 1.31 / 1.34, bar 0.6; tested). A sampler whose task steps drop the pull towards φ,
while φ is still drawn from the tasks' running sum, only half-fails: LiFT's few-shot MSE rises about 9× (ratio
0.035 → 0.35 / 0.11 → 0.48 / 0.05 → 0.17) and the shared-structure badge fails, but the claim-1 bar of 0.6 (the
spec's) still passes, since the mean of independently fitted adapters is itself a useful prior.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.core import Bool, Choice, Claim, Float, InputError, Int, param, seed_everything
from engine.core.progress import report

DX, DH, DY, SIGMA_Y = 8, 16, 4, 0.1
N_TEST, N_QUERY, K_MAX = 50, 50, 30
MAP_STEPS, MAP_LR = 800, 0.08
ELLIPSE_SIGMAS, ELLIPSE_POINTS = (1.0, 2.0), 73   # contours drawn around each mixture component in the PCA plot


@dataclass(frozen=True)
class Config:
    shots: int = param(3, Int(1, 30, "Shots k for test tasks", help="support examples of each new task"))
    n_tasks: int = param(30, Int(5, 100, "Training tasks N", step=5))
    n_examples: int = param(20, Int(5, 100, "Examples per training task", step=5))
    beta_true: float = param(0.15, Choice((0.02, 0.05, 0.1, 0.15, 0.3, 0.5, 1.0), "True task spread β_true",
                                          widget="select_slider", help="how related the tasks are"))
    beta: float = param(0.15, Choice((0.02, 0.05, 0.1, 0.15, 0.3, 0.5, 1.0), "Model β", widget="select_slider",
                                     help="the prior's assumed task spread (mis-specify it to see the effect)"))
    sigma_phi: float = param(3.0, Float(0.5, 10.0, "Model σ_φ", step=0.5, group="Advanced"))
    rank: int = param(2, Int(1, 4, "LoRA rank r"))
    components: int = param(3, Int(1, 5, "Mixture components M"))
    iters: int = param(1500, Int(500, 5000, "SGLD-Gibbs iterations", step=100, group="Advanced"))
    burn: int = param(500, Int(100, 2000, "Burn-in", step=100, group="Advanced",
                               help="capped at the SGLD-Gibbs iterations − 50, so that some samples remain"))
    step: float = param(1e-4, Choice((1e-5, 3e-5, 1e-4, 2e-4, 3e-4), "SGLD step ε", widget="select_slider",
                                     group="Advanced"))
    tasks_per_step: int = param(100, Int(1, 100, "Tasks updated per step", group="Advanced",
                                         help="how many training tasks (drawn at random, without repeats) get a "
                                              "Langevin step before each draw of φ; any value of N or more "
                                              "updates all N tasks every step"))
    batch: int = param(100, Int(1, 100, "Examples per task per step (minibatch b)", group="Advanced",
                                help="each visited task's likelihood gradient is estimated from b of its examples, "
                                     "drawn afresh every step and scaled by n/b (stochastic-gradient Langevin); "
                                     "any value of the examples per task or more uses them all (full batch)"))
    shot_sweep: bool = param(False, Bool("Full shot sweep (k = 1, 3, 10, 30)"))
    adapter: str = param("lora", Choice(("lora", "linear"), "Adapter", widget="radio",
                                        labels=("LoRA: A and B sampled", "linear: A frozen, B sampled"),
                                        help="With A frozen the model is linear-Gaussian in B, so the exact "
                                             "posterior of φ_B is known: the page compares the chain with it"))
    seed: int = param(0, Int(0, 9, "Seed"))

    @staticmethod
    def upgrade_query(query: dict) -> dict:
        """Links written before 2026-12-05 give ``task_frac``, the share of the N tasks updated per step; the
        sampler then used round(share × N) of them (at least 1), which is what ``tasks_per_step`` now says."""
        if "task_frac" in query and "tasks_per_step" not in query:
            try:
                frac, n = float(query["task_frac"]), int(float(query.get("n_tasks", 30)))
            except (TypeError, ValueError):
                return query            # left as it is: the page reports the name as not a setting
            if 0 < frac <= 1 and n > 0:
                query.pop("task_frac")
                query["tasks_per_step"] = str(max(1, int(round(frac * n))))
        return query


# largest widget setting (all at max, shot sweep; default step diverges): 11.6 s wall, measured 2026-12-06 with
# 100 examples per task and a minibatch of 99 (redrawing and re-summarising 99 rows of 100 tasks each step is the
# costliest choice; the full batch reuses precomputed statistics and took 1.8 s, b = 50 took 4.7 s)
HEAVY_CONFIG = Config(shots=30, n_tasks=100, n_examples=100, rank=4, components=5, iters=5000, burn=2000,
                      tasks_per_step=100, batch=99, shot_sweep=True, step=1e-05)


@dataclass
class Result:
    methods: list
    mse_per_task: dict[str, np.ndarray]       # at the chosen k
    shots: np.ndarray
    mse_vs_shots: dict[str, np.ndarray]       # independent / LiFT
    trace_iter: np.ndarray
    trace_loglik: np.ndarray
    trace_spread: np.ndarray
    burn: int
    pca_phi: np.ndarray
    pca_theta: np.ndarray
    pca_true: np.ndarray
    pca_means: np.ndarray
    mix_weights: np.ndarray
    # [M, len(ELLIPSE_SIGMAS), ELLIPSE_POINTS, 2]: each component's prior covariance diag(v_m) + β² I projected
    # onto the two principal axes, as closed k-σ contours around the projected mean
    pca_ellipses: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)
    # linear adapter only: per coordinate of φ_B (DY·r), the chain's mean / variance and the exact posterior's
    exact: dict[str, np.ndarray] = field(default_factory=dict)


# ----------------------------------------------------------------------------- model pieces
class LoraFamily:
    """f(x; θ) = (W0 + B A) h(x), h(x) = tanh(U x + c); θ packs (A [r×DH], B [DY×r])."""

    def __init__(self, rng, r: int):
        self.r = r
        self.U = rng.normal(0, 1 / np.sqrt(DX), (DH, DX))
        self.c = rng.normal(0, 0.1, DH)
        self.W0 = rng.normal(0, 1 / np.sqrt(DH), (DY, DH))
        self.P = r * DH + DY * r

    def h(self, X):
        return np.tanh(X @ self.U.T + self.c)

    def split(self, th):
        r = self.r
        A = th[..., : r * DH].reshape(th.shape[:-1] + (r, DH))
        B = th[..., r * DH:].reshape(th.shape[:-1] + (DY, r))
        return A, B

    def W(self, th):
        A, B = self.split(th)
        return self.W0 + B @ A

    def predict(self, th, H):
        """th [T, P], H [T, n, DH] -> [T, n, DY]."""
        return H @ self.W(th).transpose(0, 2, 1)

    @staticmethod
    def stats(H, Y):
        """Sufficient statistics of a batch of tasks: (HᵀH [T,DH,DH], YᵀH [T,DY,DH], ‖Y‖² [T])."""
        return H.transpose(0, 2, 1) @ H, Y.transpose(0, 2, 1) @ H, np.sum(Y**2, axis=(1, 2))

    def loglik_grad(self, th, stats):
        """log p(Y | θ) and its gradient w.r.t. θ from the sufficient statistics, batched over tasks."""
        S, C, yy = stats
        A, B = self.split(th)
        W = self.W0 + B @ A
        WS = W @ S
        ll = -0.5 * (yy - 2 * np.sum(W * C, axis=(1, 2)) + np.sum(WS * W, axis=(1, 2))) / SIGMA_Y**2
        G = (C - WS) / SIGMA_Y**2                                  # d ll / d(BA)
        gA = B.transpose(0, 2, 1) @ G
        gB = G @ A.transpose(0, 2, 1)
        return ll, np.concatenate([gA.reshape(len(th), -1), gB.reshape(len(th), -1)], axis=1)


def minibatch_loglik_grad(fam: LoraFamily, H: np.ndarray, Y: np.ndarray, b: int, rng):
    """loglik_grad(idx, θ) for ``sgld_gibbs``: each call draws b of every visited task's n examples (without
    repeats, independently per task and per call) and scales that batch's log-likelihood and gradient by n/b, an
    unbiased estimate of the full-batch values. b ≥ n returns the exact full-batch function, which never touches
    ``rng``. H [T, n, DH], Y [T, n, DY]."""
    n = H.shape[1]
    if int(b) < 1:
        raise ValueError(f"minibatch size must be at least 1, got {b}")
    if b >= n:
        full = fam.stats(H, Y)
        return lambda idx, th: fam.loglik_grad(th, tuple(a[idx] for a in full))
    scale = n / b

    def estimate(idx, th):
        rows = np.argsort(rng.random((len(idx), n)), axis=1)[:, :b]        # a uniform b-subset per task
        Hb = np.take_along_axis(H[idx], rows[..., None], axis=1)
        Yb = np.take_along_axis(Y[idx], rows[..., None], axis=1)
        ll, g = fam.loglik_grad(th, fam.stats(Hb, Yb))
        return ll * scale, g * scale

    return estimate


def sgld_gibbs(loglik_grad, theta0, n_tasks, beta, sigma_phi, eps, iters, burn, warm, thin, tasks_per_step, rng,
               progress=None, freeze=None):
    """SGLD for the visited tasks' θ_i, exact Gibbs draw for φ through the running sum J = Σ_i θ_i.

    Each step visits min(tasks_per_step, n_tasks) distinct tasks, drawn at random (all of them, in order and
    without touching ``rng``, when that is every task). loglik_grad(idx, theta_subset) -> (ll [len(idx)],
    grad [len(idx), P]). ``freeze`` (bool [P]) marks coordinates that are held fixed (the linear-adapter mode).
    Returns φ samples, the final θ's and a trace.
    """
    P = theta0.shape[0]
    live = np.ones(P) if freeze is None else (~freeze).astype(float)
    theta = np.tile(theta0, (n_tasks, 1))
    J = theta.sum(0)
    v = 1.0 / (1.0 / sigma_phi**2 + n_tasks / beta**2)
    phi = v * J / beta**2
    samples, tr_it, tr_ll, tr_sp = [], [], [], []
    if int(tasks_per_step) < 1:
        raise ValueError(f"tasks_per_step must be at least 1, got {tasks_per_step}")
    m = min(int(tasks_per_step), n_tasks)
    total = warm + iters
    for t in range(total):
        if not np.all(np.isfinite(theta[:1])):
            break
        idx = np.arange(n_tasks) if m == n_tasks else rng.choice(n_tasks, m, replace=False)
        old = theta[idx]
        ll, g = loglik_grad(idx, old)
        # warm-up: the coupling is held 10x tighter for its first half, then relaxed linearly to β, so the
        # tasks leave the common start together, in one LoRA gauge (B A = (B R)(R⁻¹ A) is otherwise a
        # flat, very slowly mixing direction of the posterior)
        b_t = beta * (0.1 + 0.9 * max(0.0, (t - warm / 2) / (warm / 2))) if t < warm else beta
        drift = g - (old - phi) / b_t**2
        new = old + 0.5 * eps * drift * live
        if t >= warm:
            new = new + np.sqrt(eps) * rng.normal(size=old.shape) * live
        theta[idx] = new
        J = J + (new - old).sum(0)                            # running sum: visited tasks only
        v_t = 1.0 / (1.0 / sigma_phi**2 + n_tasks / b_t**2)
        mean = v_t * J / b_t**2
        phi = mean if t < warm else mean + np.sqrt(v) * rng.normal(size=P) * live
        if freeze is not None:
            phi = np.where(freeze, theta0, phi)
        it = t - warm
        if it >= burn and (it - burn) % thin == 0:
            samples.append(phi.copy())
        if t % 10 == 0:
            tr_it.append(it)
            tr_ll.append(float(ll.mean()))
            tr_sp.append(float(np.sqrt(np.mean((theta - phi) ** 2))))
        if t % 100 == 0:
            report(progress, (t + 1) / total, f"SGLD-Gibbs iteration {it}")
    return np.array(samples), theta, (np.array(tr_it), np.array(tr_ll), np.array(tr_sp))


class OnlineGMM:
    """Diagonal Gaussian mixture fitted by stochastic-approximation (online) EM, one sample at a time."""

    def __init__(self, first: np.ndarray, var0: np.ndarray, rng, gamma=lambda t: (t + 2) ** -0.6):
        M, P = first.shape
        self.mu = first + 1e-3 * rng.normal(size=first.shape)
        self.v = np.tile(np.maximum(var0, 1e-6), (M, 1))
        self.pi = np.full(M, 1.0 / M)
        self.s0 = self.pi.copy()
        self.s1 = self.mu * self.s0[:, None]
        self.s2 = (self.v + self.mu**2) * self.s0[:, None]
        self.t = 0
        self.gamma = gamma

    def resp(self, x):
        lp = np.log(self.pi) - 0.5 * np.sum(np.log(2 * np.pi * self.v) + (x - self.mu) ** 2 / self.v, axis=1)
        lp -= lp.max()
        w = np.exp(lp)
        return w / w.sum()

    def update(self, x):
        g = self.gamma(self.t)
        self.t += 1
        rho = self.resp(x)
        self.s0 = (1 - g) * self.s0 + g * rho
        self.s1 = (1 - g) * self.s1 + g * rho[:, None] * x
        self.s2 = (1 - g) * self.s2 + g * rho[:, None] * x**2
        s0 = np.maximum(self.s0, 1e-10)
        self.pi = s0 / s0.sum()
        self.mu = self.s1 / s0[:, None]
        self.v = np.maximum(self.s2 / s0[:, None] - self.mu**2, 1e-6)


def fit_gmm(samples: np.ndarray, M: int, rng) -> OnlineGMM:
    M = min(M, len(samples))
    gmm = OnlineGMM(samples[:M], samples.var(0) if len(samples) > 1 else np.ones(samples.shape[1]), rng)
    for x in samples:
        gmm.update(x)
    return gmm


def mixture_logpdf_grad(th, pi, mu, var):
    """log Σ_m π_m N(θ; μ_m, diag var_m) and its gradient, batched over rows of th [T, P]."""
    lp = (np.log(pi)[None] - 0.5 * np.sum(np.log(2 * np.pi * var)[None] + (th[:, None] - mu[None]) ** 2
                                         / var[None], axis=2))          # [T, M]
    top = lp.max(1, keepdims=True)
    w = np.exp(lp - top)
    tot = w.sum(1, keepdims=True)
    resp = w / tot
    grad = -np.einsum("tm,tmp->tp", resp, (th[:, None] - mu[None]) / var[None])
    return (top + np.log(tot))[:, 0], grad


def map_finetune(loglik_grad, start, prior=None, steps=MAP_STEPS, lr=MAP_LR):
    """Adam on −[log p(D|θ) + log prior(θ)], batched over tasks; prior = (pi, mu, var) or None."""
    th = start.copy()
    m = np.zeros_like(th)
    v = np.zeros_like(th)
    for t in range(steps):
        _, g = loglik_grad(th)
        if prior is not None:
            g = g + mixture_logpdf_grad(th, *prior)[1]
        g = -g
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g**2
        th = th - lr * (m / (1 - 0.9 ** (t + 1))) / (np.sqrt(v / (1 - 0.999 ** (t + 1))) + 1e-8)
    return th


# ----------------------------------------------------------------------------- experiment
def pca_basis(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centre of the rows of X and its two leading principal directions, as the columns of a [P, 2] matrix with
    orthonormal columns; a point z maps to (z − centre) @ basis."""
    centre = X.mean(0)
    _, _, Vt = np.linalg.svd(X - centre, full_matrices=False)
    return centre, Vt[:2].T


def project_gaussian(mean: np.ndarray, var: np.ndarray, centre: np.ndarray,
                     basis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the 2-D image of N(mean, diag var) under z ↦ (z − centre) @ basis.

    The map is affine, so the image is Gaussian with mean (mean − centre) @ basis and covariance
    basisᵀ diag(var) basis (a 2×2 matrix)."""
    return (mean - centre) @ basis, basis.T @ (var[:, None] * basis)


def ellipse_points(mean: np.ndarray, cov: np.ndarray, k: float, n: int = ELLIPSE_POINTS) -> np.ndarray:
    """n points [n, 2] on the closed curve (x − mean)ᵀ cov⁻¹ (x − mean) = k² (the k-σ contour of a 2-D Gaussian);
    the last point repeats the first, so a line through them closes.

    With cov = V diag(w) Vᵀ, the points x = mean + k V diag(√w) (cos t, sin t) satisfy the equation for every t."""
    w, V = np.linalg.eigh(np.asarray(cov, float))
    t = np.linspace(0.0, 2 * np.pi, n)
    unit = np.stack([np.cos(t), np.sin(t)], axis=1)
    pts = np.asarray(mean, float) + k * (unit * np.sqrt(np.maximum(w, 0.0))) @ V.T
    pts[-1] = pts[0]                                     # exact closure (cos 2π, sin 2π are off by rounding)
    return pts


def mixture_ellipses(pi: np.ndarray, mu: np.ndarray, var: np.ndarray, centre: np.ndarray, basis: np.ndarray,
                     sigmas=ELLIPSE_SIGMAS, n: int = ELLIPSE_POINTS) -> np.ndarray:
    """k-σ contours [M, len(sigmas), n, 2] of each mixture component N(mu_m, diag var_m), projected by the basis."""
    out = np.empty((len(pi), len(sigmas), n, 2))
    for m in range(len(pi)):
        c_mean, c_cov = project_gaussian(mu[m], var[m], centre, basis)
        for j, k in enumerate(sigmas):
            out[m, j] = ellipse_points(c_mean, c_cov, k, n)
    return out


def exact_linear_posterior(fam: LoraFamily, A0: np.ndarray, H: np.ndarray, Y: np.ndarray, beta: float,
                           sigma_phi: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior mean and variance of φ_B (flattened DY × r, as θ packs B) when A = A0 is frozen.

    Per output j and task i, y_ij = H_i W0_j + Φ_i b_ij + noise with Φ_i = H_i A0ᵀ, b_ij ~ N(φ_Bj, β² I) and
    noise ~ N(0, σ_y² I): marginally y_ij ~ N(H_i W0_j + Φ_i φ_Bj, C_i), C_i = σ_y² I + β² Φ_i Φ_iᵀ. With the prior
    φ_Bj ~ N(0, σ_φ² I) the posterior of φ_Bj is Gaussian with precision I/σ_φ² + Σ_i Φ_iᵀ C_i⁻¹ Φ_i; the outputs j
    are independent."""
    r = A0.shape[0]
    mean, var = np.zeros((DY, r)), np.zeros((DY, r))
    Phi = H @ A0.T                                                     # (N, n, r)
    C = SIGMA_Y**2 * np.eye(H.shape[1]) + beta**2 * Phi @ Phi.transpose(0, 2, 1)
    CiPhi = np.linalg.solve(C, Phi)                                    # C_i⁻¹ Φ_i
    prec = np.eye(r) / sigma_phi**2 + np.einsum("inr,ins->rs", Phi, CiPhi)
    cov = np.linalg.inv(prec)
    for j in range(DY):
        resid = Y[:, :, j] - H @ fam.W0[j]                              # (N, n)
        mean[j] = cov @ np.einsum("inr,in->r", CiPhi, resid)
        var[j] = np.diag(cov)
    return mean.ravel(), var.ravel()


def run(config: Config, progress=None) -> Result:
    rng = seed_everything(config.seed)
    fam = LoraFamily(rng, config.rank)
    P, N, n = fam.P, config.n_tasks, config.n_examples
    phi_true = rng.normal(0, 0.7, P)

    def make_tasks(T, n_rows):
        th = phi_true + config.beta_true * rng.normal(size=(T, P))
        X = rng.normal(size=(T, n_rows, DX))
        H = fam.h(X)
        Y = fam.predict(th, H) + SIGMA_Y * rng.normal(size=(T, n_rows, DY))
        return th, H, Y

    _, Htr, Ytr = make_tasks(N, n)
    th_test, Hte, Yte = make_tasks(N_TEST, K_MAX + N_QUERY)

    A0 = rng.uniform(-1 / np.sqrt(DH), 1 / np.sqrt(DH), (config.rank, DH))
    B0 = rng.normal(0, 0.01, (DY, config.rank))
    theta0 = np.concatenate([A0.ravel(), B0.ravel()])
    freeze = None
    if config.adapter == "linear":        # A held at A0 in every task and in φ: linear-Gaussian in B
        freeze = np.zeros(P, bool)
        freeze[: config.rank * DH] = True
    elif config.adapter != "lora":
        raise InputError(f"unknown adapter: {config.adapter!r}")
    with np.errstate(all="ignore"):  # a diverging chain is detected below and reported
        samples, theta_tasks, (tr_it, tr_ll, tr_sp) = sgld_gibbs(
            minibatch_loglik_grad(fam, Htr, Ytr, config.batch, rng), theta0, N, config.beta, config.sigma_phi,
            config.step, config.iters, min(config.burn, config.iters - 50), warm=300, thin=5,
            tasks_per_step=config.tasks_per_step, rng=rng, progress=_span(progress, 0.0, 0.6), freeze=freeze)
    if len(samples) == 0 or not (np.all(np.isfinite(samples)) and np.all(np.isfinite(theta_tasks))
            and np.abs(samples).max() < 1e3):
        mb = (f" With a minibatch of b = {config.batch} the gradient is scaled by n/b = {n / config.batch:.3g}, which "
              "adds noise: a larger b also helps." if config.batch < n else "")
        raise InputError("The SGLD chain diverged (the step ε is too large for this much data per task). "
                         "Lower the SGLD step or the examples per task." + mb)
    exact = {}
    if freeze is not None:
        mean, var = exact_linear_posterior(fam, A0, Htr, Ytr, config.beta, config.sigma_phi)
        phiB = samples[:, config.rank * DH:]
        exact = {"chain_mean": phiB.mean(0), "chain_var": phiB.var(0), "exact_mean": mean, "exact_var": var,
                 "z": (phiB.mean(0) - mean) / np.sqrt(var), "var_ratio": phiB.var(0) / var}
    gmm = fit_gmm(samples, config.components, rng)
    gmm1 = fit_gmm(samples, 1, rng)
    b2 = config.beta**2

    Hq, Yq = Hte[:, K_MAX:], Yte[:, K_MAX:]

    def mse(th):
        return np.mean((fam.predict(th, Hq) - Yq) ** 2, axis=(1, 2))

    def support(k):
        st = fam.stats(Hte[:, :k], Yte[:, :k])
        return lambda th: fam.loglik_grad(th, st)

    def lift(k, g):
        start = np.tile(g.mu[np.argmax(g.pi)], (N_TEST, 1))
        return map_finetune(support(k), start, (g.pi, g.mu, g.v + b2))

    A_ind = rng.uniform(-1 / np.sqrt(DH), 1 / np.sqrt(DH), (N_TEST, config.rank, DH))
    ind_start = np.concatenate([A_ind.reshape(N_TEST, -1), np.zeros((N_TEST, DY * config.rank))], axis=1)

    def independent(k):
        return map_finetune(support(k), ind_start, (np.ones(1), np.zeros((1, P)), np.ones((1, P))))

    k = config.shots
    shots = np.array(sorted({1, 3, 10, 30, k} if config.shot_sweep else {3, 30, k}))
    mse_vs = {"independent": [], "LiFT": []}
    jobs = 2 * len(shots) + 3
    done = 0
    fits = {}
    for kk in shots:
        fits[("independent", kk)] = mse(independent(int(kk)))
        fits[("LiFT", kk)] = mse(lift(int(kk), gmm))
        mse_vs["independent"].append(fits[("independent", kk)].mean())
        mse_vs["LiFT"].append(fits[("LiFT", kk)].mean())
        done += 2
        report(progress, 0.6 + 0.4 * done / jobs, f"fine-tuning test tasks, k = {kk}")
    mean_init = map_finetune(support(k), np.tile(theta_tasks.mean(0), (N_TEST, 1)), None, steps=30)
    single = lift(k, gmm1)
    oracle = map_finetune(support(k), np.tile(phi_true, (N_TEST, 1)),
                          (np.ones(1), phi_true[None], np.full((1, P), max(config.beta_true, 1e-3) ** 2)))
    per = {"independent": fits[("independent", k)], "mean-init (30 steps)": mse(mean_init),
           "single Gaussian prior": mse(single), "LiFT mixture prior": fits[("LiFT", k)], "oracle prior": mse(oracle)}

    # shared structure: the posterior-mean adapter's weight change vs the true shared one
    A_true, B_true = fam.split(phi_true)
    dW_true = B_true @ A_true
    Ab, Bb = fam.split(samples)
    dW_post = (Bb @ Ab).mean(0)
    rel = float(np.linalg.norm(dW_post - dW_true) / np.linalg.norm(dW_true))
    Ai, Bi = fam.split(theta0)
    rel_start = float(np.linalg.norm(Bi @ Ai - dW_true) / np.linalg.norm(dW_true))

    centre, basis = pca_basis(np.vstack([samples, theta_tasks]))

    def proj(Z):
        return (Z - centre) @ basis

    # the ellipses use the covariance of the prior a new task is fine-tuned under (φ integrated out): diag(v_m) + β² I
    ellipses = mixture_ellipses(gmm.pi, gmm.mu, gmm.v + b2, centre, basis)
    r3 = fits[("LiFT", k)].mean() / fits[("independent", k)].mean()
    r30 = fits[("LiFT", 30)].mean() / fits[("independent", 30)].mean()
    metrics = {
        "mse_independent": float(per["independent"].mean()), "mse_lift": float(per["LiFT mixture prior"].mean()),
        "mse_oracle": float(per["oracle prior"].mean()), "mse_mean_init": float(per["mean-init (30 steps)"].mean()),
        "mse_single": float(per["single Gaussian prior"].mean()),
        "ratio_k": float(r3), "ratio_30": float(r30), "ratio_gap": float(r30 - r3) if k <= 10 else np.nan,
        "shared_rel_err": rel, "shared_rel_err_start": rel_start, "max_mix_weight": float(gmm.pi.max()),
        "batch_used": float(min(config.batch, n)),
    }
    if exact:
        metrics.update(exact_max_abs_z=float(np.abs(exact["z"]).max()),
                       exact_var_ratio_min=float(exact["var_ratio"].min()),
                       exact_var_ratio_max=float(exact["var_ratio"].max()))
    report(progress, 1.0, "done")
    return Result(methods=list(per), mse_per_task=per, shots=shots,
                  mse_vs_shots={a: np.array(b) for a, b in mse_vs.items()}, trace_iter=tr_it, trace_loglik=tr_ll,
                  trace_spread=tr_sp, burn=min(config.burn, config.iters - 50), pca_phi=proj(samples),
                  pca_theta=proj(theta_tasks), pca_true=proj(phi_true[None]), pca_means=proj(gmm.mu),
                  mix_weights=gmm.pi, pca_ellipses=ellipses, metrics=metrics, exact=exact)


def _span(progress, a, b):
    from engine.core.progress import ProgressSpan

    return ProgressSpan(progress, a, b)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    out = [
        Claim("With a prior learned from related tasks, few-shot fine-tuning of a new task beats independent "
              "fine-tuning", measured=m["ratio_k"], op="<=", threshold=0.6, label="MSE LiFT / MSE independent",
              detail=f"query MSE: independent {m['mse_independent']:.3g}, LiFT {m['mse_lift']:.3g}, "
                     f"oracle prior {m['mse_oracle']:.3g}, mean-init {m['mse_mean_init']:.3g}"),
    ]
    if np.isfinite(m["ratio_gap"]):
        out.append(Claim("The prior matters most when data are scarce: with 30 shots the advantage mostly "
                         "vanishes", measured=m["ratio_gap"], op=">=", threshold=0.3,
                         label="ratio(k=30) − ratio(few shots)",
                         detail=f"ratio at k = 30 is {m['ratio_30']:.2f} (must lie in [0.7, 1.2]: "
                                f"{'yes' if 0.7 <= m['ratio_30'] <= 1.2 else 'NO'})"))
        if not 0.7 <= m["ratio_30"] <= 1.2:
            out[-1] = Claim(out[-1].statement, measured=np.nan, op=">=", threshold=0.3, label=out[-1].label,
                            detail=out[-1].detail)
    else:
        out.append(Claim("The prior matters most when data are scarce", measured=np.nan, op=">=", threshold=0.3,
                         label="ratio(k=30) − ratio(few shots)", detail="needs shots k ≤ 10"))
    # linear-adapter mode (result.exact filled): A is frozen at one random A0 in every task and in φ, so E[BA] =
    # E[B]·A0 lies in A0's row space and cannot reach B*A*; the badge does not apply there
    linear = bool(result.exact)
    out.append(Claim("The chain's posterior mean recovers the shared structure of the tasks",
                     measured=np.nan if linear else m["shared_rel_err"], op="<=", threshold=0.2,
                     label="‖E[BA] − B*A*‖ / ‖B*A*‖",
                     detail=(f"not applicable with the linear adapter: A is frozen at a random A0, so E[BA] stays "
                             f"in A0's row space (measured {m['shared_rel_err']:.2f})" if linear else
                             f"the common starting point was at {m['shared_rel_err_start']:.2f}")))
    return out
