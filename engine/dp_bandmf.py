"""DP-BandMF at scale: banded Toeplitz matrix-factorisation strategies for DP training.

The learner releases noisy prefix sums of clipped gradients. With the workload
A (n x n lower-triangular ones) factored as A = B C, it adds C^{-1} z to the
gradients; the noise that reaches the model is A C^{-1} z. C is lower-triangular
banded Toeplitz with b coefficients c (unit norm, positive, non-increasing).

Everything here is O(n b) time and O(n) memory:
  gamma = C^{-1} e_0       (an IIR filter: scipy.signal.lfilter([1], c, e_0))
  beta  = cumsum(gamma)    (A C^{-1} is Toeplitz with coefficients beta)
  mean squared error / sigma^2 = (1/n) sum_k (n - k) beta_k^2
and its gradient by the adjoint recursion. A dense O(n^3) reference path exists
for small n. Privacy comes from our own RDP accountant for cyclic Poisson
sampling over b disjoint groups (rate q = b B / N, ceil(n / b) compositions).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg as sla
from scipy import optimize, signal, special
from threadpoolctl import threadpool_limits

from engine.core import Bool, Choice, Claim, InputError, param, seed_everything
from engine.core.progress import ProgressSpan, report

# 64 … 262 144. Tried 2**20 (2026-12-05): the largest setting still ran in 3.1 s, but MAX_NB left only b <= 16 and
# 11-95 optimiser steps, so the two band-count badges failed (|log(b*/(eps sqrt(n)/k))| 5.7 and 3.6) by the cap.
POW2_N = tuple(2**k for k in range(6, 19))
EPSILONS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
N_EXAMPLES = (1000, 3000, 10_000, 30_000, 60_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)
BATCHES = (16, 32, 64, 128, 250, 256, 512, 1024, 2048, 4096)
BANDS = tuple(2**k for k in range(0, 9))  # 1 … 256
VIEWS = ("best",) + tuple(str(b) for b in BANDS)
ITERS = (20, 40, 60, 100, 150, 200)

ORDERS = np.array(list(range(2, 65)) + [80, 96, 128, 192, 256, 384, 512], dtype=np.int64)
SIGMA_LO, SIGMA_HI = 0.1, 1.0e4
DENSE_MAX_N = 256  # general-banded comparison size
CHECK_N = 1024  # dense O(n^3) evaluation of the optimised strategy
MAX_NB = 2**24  # largest n * b swept: one evaluation stays under ~0.2 s
WORK_PER_BAND = 2.0e8  # n * b * iterations allowed per band count: the largest setting stays well under 30 s
SCALE_N = 2**17  # the "It scales" badge times one optimisation at n = max(this, the run's n) ...
SCALE_B = 16     # ... of a strategy with this many bands (fixed, so every run times the same job)


@dataclass(frozen=True)
class Config:
    n: int = param(1024, Choice(POW2_N, "Training steps n", widget="select_slider",
                                help="Horizon of the prefix-sum workload (powers of two). The 'It scales' badge "
                                     "always times one optimisation at n = 131072 (at this n when it is larger)."))
    epsilon: float = param(8.0, Choice(EPSILONS, "Privacy ε", widget="select_slider",
                                       help="Target ε; the noise multiplier σ of each strategy is calibrated to it"))
    n_examples: int = param(60_000, Choice(N_EXAMPLES, "Dataset size N", widget="select_slider"))
    batch: int = param(250, Choice(BATCHES, "Expected batch B", widget="select_slider",
                                   help="Epochs k = n·B/N; the largest admissible band count is N/B"))
    delta: float = param(1e-6, Choice((1e-5, 1e-6, 1e-8), "Privacy δ"))
    max_bands: int = param(128, Choice(BANDS, "Largest band count", widget="select_slider",
                                       help="Band counts 1, 2, 4, … up to this (and up to N/B and n) are swept"))
    strategy_view: str = param("best", Choice(VIEWS, "Strategy to inspect",
                                              help="'best' = the band count with the lowest RMSE"))
    compare_dense: bool = param(False, Bool("Compare with a general banded C",
                                            help="Optimises a general (non-Toeplitz) banded C with n·b free "
                                                 "entries at n = min(n, 256), b = 8, or the largest band count "
                                                 "swept if smaller (a few seconds)"))
    max_iters: int = param(100, Choice(ITERS, "L-BFGS iterations", group="Advanced"))

    def __post_init__(self):
        if self.batch > self.n_examples:
            raise ValueError(f"the batch B = {self.batch} exceeds the dataset size N = {self.n_examples}")


# largest widget setting (longest horizon, most bands, dense check): 3 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(n=262144, max_bands=256, n_examples=10000000, batch=16, compare_dense=True,
                      max_iters=200)


@dataclass
class Result:
    config: Config
    bands: np.ndarray          # band counts swept
    sigma: np.ndarray          # calibrated noise multiplier per b
    mean_err: np.ndarray       # optimised mean squared error per unit noise, per b
    init_err: np.ndarray       # same for the truncated square-root initialisation
    rmse: np.ndarray           # sigma * sqrt(mean_err)
    eps_low: float
    sigma_low: np.ndarray
    rmse_low: np.ndarray
    coefs: list = field(default_factory=list)      # optimised c per b
    gammas: list = field(default_factory=list)     # first 4b entries of C^{-1} coefficients per b
    step_idx: np.ndarray = None                    # (subsampled) step indices for per-step error
    step_err: dict = field(default_factory=dict)   # name -> per-step squared error (with sigma)
    view_b: int = 1
    timing_n_fast: np.ndarray = None
    timing_fast: np.ndarray = None
    timing_n_dense: np.ndarray = None
    timing_dense: np.ndarray = None
    dense_cmp: dict = field(default_factory=dict)
    scale_coefs: np.ndarray = None                 # the strategy optimised for the scaling badge
    notes: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)


# ---------------------------------------------------------------- fast Toeplitz path


def inverse_coefs(c: np.ndarray, n: int) -> np.ndarray:
    """Coefficients gamma of C^{-1} (lower-triangular Toeplitz), first n of them, O(n b)."""
    e0 = np.zeros(n)
    e0[0] = 1.0
    return signal.lfilter([1.0], np.asarray(c, float), e0)


def _weights(n: int) -> np.ndarray:
    return (n - np.arange(n)) / n


def toeplitz_errors(c: np.ndarray, n: int) -> tuple[float, float, np.ndarray]:
    """(mean error, max error, per-step error) of the prefix workload with strategy c, unit noise."""
    beta = np.cumsum(inverse_coefs(c, n))
    per_step = np.cumsum(beta**2)
    mean = float(np.dot(_weights(n), beta**2))
    return mean, float(per_step[-1]), per_step


def toeplitz_loss_grad(c: np.ndarray, n: int) -> tuple[float, np.ndarray]:
    """Mean error (1/n)·‖A C^{-1}‖_F² and its gradient in c, by the adjoint recursion, O(n b)."""
    c = np.asarray(c, float)
    b = len(c)
    gamma = inverse_coefs(c, n)
    beta = np.cumsum(gamma)
    w = _weights(n)
    loss = float(np.dot(w, beta**2))
    g = np.cumsum((2.0 * w * beta)[::-1])[::-1]  # dL/dgamma
    u = np.ascontiguousarray(signal.lfilter([1.0], c, g[::-1])[::-1])  # C^{-T} g
    grad = np.empty(b)
    for r in range(b):
        grad[r] = -np.dot(u[r:], gamma[: n - r])
    return loss, grad


def sqrt_init(b: int) -> np.ndarray:
    """Square-root-of-prefix-sum coefficients, truncated to b, unit norm."""
    c = np.ones(b)
    for r in range(1, b):
        c[r] = c[r - 1] * (2 * r - 1) / (2 * r)
    return c / np.linalg.norm(c)


def _coefs_from_z(z: np.ndarray) -> np.ndarray:
    """c_0 = 1, c_r = prod_{j<=r} sigmoid(z_j): positive and non-increasing (unnormalised)."""
    s = special.expit(z)
    return np.concatenate([[1.0], np.cumprod(s)])


def _z_from_coefs(c: np.ndarray) -> np.ndarray:
    c = np.asarray(c, float) / c[0]
    ratios = np.clip(c[1:] / c[:-1], 1e-9, 1 - 1e-9)
    return special.logit(ratios)


def _objective_z(z: np.ndarray, n: int) -> tuple[float, np.ndarray]:
    """Loss of the normalised strategy c/‖c‖ as a function of the sigmoid parameters z."""
    c = _coefs_from_z(z)
    nrm2 = float(np.dot(c, c))
    lraw, graw = toeplitz_loss_grad(c, n)
    loss = nrm2 * lraw  # C/‖c‖ has inverse ‖c‖·C^{-1}
    dc = 2.0 * c * lraw + nrm2 * graw
    s = special.expit(z)
    dz = (1.0 - s) * np.cumsum((dc * c)[::-1])[::-1][1:]
    return loss, dz


def optimize_toeplitz(n: int, b: int, max_iters: int = 100, info: dict | None = None
                      ) -> tuple[np.ndarray, float, float]:
    """Optimised unit-norm b-banded Toeplitz strategy: (c, mean error, mean error of the init).

    When `info` is a dict it receives the optimiser's iteration count and whether it stopped by convergence."""
    c0 = sqrt_init(b)
    init = toeplitz_errors(c0, n)[0]
    if b == 1:
        if info is not None:
            info.update(nit=0, converged=True)
        return c0, init, init
    z0 = _z_from_coefs(c0)
    with threadpool_limits(1):  # tiny BLAS calls: threads only add overhead
        res = optimize.minimize(_objective_z, z0, args=(n,), jac=True, method="L-BFGS-B",
                                options={"maxiter": int(max_iters)})
    if info is not None:
        info.update(nit=int(res.nit), converged=bool(res.success))
    z = res.x if res.fun <= init else z0
    c = _coefs_from_z(z)
    c = c / np.linalg.norm(c)
    return c, toeplitz_errors(c, n)[0], init


# ---------------------------------------------------------------- dense reference path


def toeplitz_matrix(c: np.ndarray, n: int) -> np.ndarray:
    col = np.zeros(n)
    col[: min(len(c), n)] = c[:n]
    return sla.toeplitz(col, np.zeros(n))


def dense_errors(C: np.ndarray) -> tuple[float, float]:
    """(mean, max) error of a lower-triangular strategy C on the prefix workload, O(n^3)."""
    n = C.shape[0]
    A = np.tril(np.ones((n, n)))
    M = sla.solve_triangular(C.T, A.T, lower=False).T  # A C^{-1}
    rows = np.sum(M**2, axis=1)
    return float(rows.sum() / n), float(rows.max())


def _banded_mask(n: int, b: int) -> np.ndarray:
    i, j = np.indices((n, n))
    return (i >= j) & (i - j < b)


def dense_loss_grad(X: np.ndarray, mask: np.ndarray) -> tuple[float, np.ndarray]:
    """Loss of the column-normalised banded C = X/‖X_col‖ and its gradient in X (O(n^3))."""
    n = X.shape[0]
    Xm = np.where(mask, X, 0.0)
    norms = np.linalg.norm(Xm, axis=0)
    C = Xm / norms
    A = np.tril(np.ones((n, n)))
    Cinv = sla.solve_triangular(C, np.eye(n), lower=True)
    M = A @ Cinv
    loss = float(np.sum(M**2) / n)
    G = -(2.0 / n) * (M.T @ M) @ Cinv.T  # dL/dC
    G = np.where(mask, G, 0.0)
    GX = (G - C * np.sum(G * C, axis=0)) / norms  # through the column normalisation
    return loss, np.where(mask, GX, 0.0)


def optimize_general_banded(n: int, b: int, c_start: np.ndarray, max_iters: int = 300,
                            progress=None) -> tuple[float, float]:
    """General b-banded C (n·b free entries) from the Toeplitz optimum: (start loss, optimised loss)."""
    mask = _banded_mask(n, b)
    X0 = toeplitz_matrix(c_start, n)
    idx = np.nonzero(mask)
    it = [0]

    def f(x):
        X = np.zeros((n, n))
        X[idx] = x
        loss, G = dense_loss_grad(X, mask)
        return loss, G[idx]

    def cb(_x):
        it[0] += 1
        if it[0] % 10 == 0:
            report(progress, it[0] / max_iters, f"general banded C: iteration {it[0]}")

    start = f(X0[idx])[0]
    with threadpool_limits(1):
        res = optimize.minimize(f, X0[idx], jac=True, method="L-BFGS-B", callback=cb,
                                options={"maxiter": int(max_iters)})
    return start, float(min(res.fun, start))


# ---------------------------------------------------------------- privacy accounting


def _log_binom(alpha: np.ndarray, j: np.ndarray) -> np.ndarray:
    return special.gammaln(alpha + 1) - special.gammaln(j + 1) - special.gammaln(alpha - j + 1)


def _flat_orders(orders: np.ndarray):
    """Flattened (alpha, j) pairs, j = 0..alpha, for a segmented log-sum-exp over each order."""
    orders = np.asarray(orders, np.int64)
    alpha = np.repeat(orders, orders + 1).astype(float)
    j = np.concatenate([np.arange(a + 1) for a in orders]).astype(float)
    starts = np.concatenate([[0], np.cumsum(orders + 1)[:-1]])
    return alpha, j, _log_binom(alpha, j), starts


_FLAT = _flat_orders(ORDERS)


def rdp_batch(q: np.ndarray, sigma: np.ndarray, orders: np.ndarray = ORDERS) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian (rate q, noise multiplier sigma), integer orders.

    q and sigma broadcast to a batch; returns an array of shape (batch, len(orders)).
    RDP_a = log( sum_j C(a,j) (1-q)^(a-j) q^j exp((j^2-j)/(2 sigma^2)) ) / (a-1).
    """
    q = np.atleast_1d(np.asarray(q, float))
    sigma = np.atleast_1d(np.asarray(sigma, float))
    q, sigma = np.broadcast_arrays(q, sigma)
    if np.any(q <= 0) or np.any(q > 1):
        raise InputError("sampling rates must lie in (0, 1]")
    orders = np.asarray(orders, np.int64)
    alpha, j, logb, starts = _FLAT if np.array_equal(orders, ORDERS) else _flat_orders(orders)
    qq, ss = q[:, None], sigma[:, None]
    terms = (logb + special.xlogy(alpha - j, 1.0 - qq) + j * np.log(qq)
             + (j * j - j) / (2.0 * ss**2))
    mx = np.maximum.reduceat(terms, starts, axis=1)
    seg = np.repeat(np.arange(len(orders)), orders + 1)
    sums = np.add.reduceat(np.exp(terms - mx[:, seg]), starts, axis=1)
    return (mx + np.log(sums)) / (orders.astype(float) - 1.0)


def rdp_poisson_gaussian(q: float, sigma: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """RDP per order for one (q, sigma)."""
    if not 0.0 < q <= 1.0:
        raise InputError(f"sampling rate q = {q:.3g} must lie in (0, 1]")
    return rdp_batch(np.array([q]), np.array([sigma]), orders)[0]


def epsilon_from_rdp(rdp: np.ndarray, delta: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """RDP (..., orders) -> ε via min_a [RDP_a + log((a-1)/a) - (log δ + log a)/(a-1)]."""
    a = np.asarray(orders, float)
    eps = rdp + np.log((a - 1) / a) - (math.log(delta) + np.log(a)) / (a - 1)
    return np.maximum(0.0, np.min(eps, axis=-1))


def epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    """ε after `steps` compositions of the Poisson-subsampled Gaussian mechanism."""
    return float(epsilon_from_rdp(steps * rdp_poisson_gaussian(q, sigma), delta))


def calibrate_sigmas(q: np.ndarray, steps: np.ndarray, eps_target: np.ndarray, delta: float,
                     iters: int = 36) -> np.ndarray:
    """Smallest σ with ε(q, σ, steps, δ) ≤ target, by bisection on log σ, batched over settings.

    σ = SIGMA_LO when even that meets the target; NaN when SIGMA_HI does not.
    """
    q, steps, eps_target = (np.asarray(v, float) for v in np.broadcast_arrays(q, steps, eps_target))

    def eps_of(log_sigma):
        return epsilon_from_rdp(steps[:, None] * rdp_batch(q, np.exp(log_sigma)), delta)

    lo = np.full(q.shape, math.log(SIGMA_LO))
    hi = np.full(q.shape, math.log(SIGMA_HI))
    ok_lo = eps_of(lo) <= eps_target
    ok_hi = eps_of(hi) <= eps_target
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        good = eps_of(mid) <= eps_target
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid)
    out = np.exp(hi)
    out = np.where(ok_lo, SIGMA_LO, out)
    return np.where(ok_hi, out, np.nan)


def calibrate_sigma(q: float, steps: int, eps_target: float, delta: float, iters: int = 36) -> float:
    return float(calibrate_sigmas(np.array([q]), np.array([steps]), np.array([eps_target]), delta, iters)[0])


def band_privacy(b: int, n: int, n_examples: int, batch: int) -> tuple[float, int]:
    """Cyclic Poisson sampling over b disjoint groups: (rate q, compositions per example)."""
    return b * batch / n_examples, -(-n // b)


def heuristic_bands(cfg: Config, eps: float) -> float:
    epochs = cfg.n * cfg.batch / cfg.n_examples
    return eps * math.sqrt(cfg.n) / epochs


# ---------------------------------------------------------------- timing


def _time_call(fn, reps: int = 3) -> float:
    """Fastest of `reps` calls (after one warm-up): robust to other load on a shared machine."""
    fn()
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _timing(n_max: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    c = sqrt_init(b)
    top = max(n_max, 65536)
    n_fast = np.array([2**k for k in range(8, 21) if 2**k <= top])
    t_fast = np.array([_time_call(lambda m=m: toeplitz_loss_grad(c, int(m))) for m in n_fast])
    n_dense = np.array([64, 128, 256, 512])
    t_dense = []
    for m in n_dense:
        m = int(m)
        mask = _banded_mask(m, b)
        X = toeplitz_matrix(c, m)
        t_dense.append(_time_call(lambda X=X, mask=mask: dense_loss_grad(X, mask), reps=2))
    return n_fast, t_fast, n_dense, np.array(t_dense)


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


# ---------------------------------------------------------------- run


def _subsample_idx(n: int, k: int = 1500) -> np.ndarray:
    if n <= k:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(np.int64))


def iteration_budget(n: int, b: int, max_iters: int) -> int:
    """L-BFGS iterations allowed for one band count: max_iters, capped so that n·b·iterations <= WORK_PER_BAND."""
    return int(min(max_iters, max(10, WORK_PER_BAND // (n * int(b)))))


def sweep_bands(cfg: Config) -> np.ndarray:
    """Powers of two up to max_bands, N/B (sampling rate q <= 1), n, and MAX_NB / n."""
    cap = min(cfg.max_bands, cfg.n, cfg.n_examples // cfg.batch, MAX_NB // cfg.n)
    return np.array([b for b in BANDS if b <= cap], dtype=np.int64)


def run(config: Config, progress=None) -> Result:
    with threadpool_limits(1):  # small BLAS calls: extra threads only add wake-up overhead here
        return _run(config, progress)


def _run(config: Config, progress=None) -> Result:
    seed_everything(0)  # the mechanism design is deterministic; seeded for form's sake
    cfg = config
    n = int(cfg.n)
    if cfg.batch > cfg.n_examples:
        raise InputError(f"The batch B = {cfg.batch} is larger than the dataset N = {cfg.n_examples}.")
    bands = sweep_bands(cfg)
    iters_b = [iteration_budget(n, int(b), cfg.max_iters) for b in bands]
    notes = []
    if cfg.max_bands > bands.max() and MAX_NB // n < min(cfg.max_bands, cfg.n_examples // cfg.batch):
        notes.append(f"At n = {n:,} band counts above {MAX_NB // n} are skipped to stay within the time "
                     "budget (n·b ≤ 2²⁴).")
    capped = [(int(b), it) for b, it in zip(bands, iters_b) if it < cfg.max_iters and b > 1]
    if capped:
        notes.append("To keep this setting within the time budget the optimiser ran at most "
                     + ", ".join(f"{it} iterations at b = {b}" for b, it in capped)
                     + f" (instead of {cfg.max_iters}); those strategies may be less than fully optimised.")
    t_start = time.perf_counter()

    # privacy: sigma per band count, at eps and at eps/8
    eps_low = cfg.epsilon / 8.0
    qs, steps = zip(*(band_privacy(int(b), n, cfg.n_examples, cfg.batch) for b in bands))
    k = len(bands)
    both = calibrate_sigmas(np.tile(qs, 2), np.tile(steps, 2),
                            np.repeat([cfg.epsilon, eps_low], k), cfg.delta)
    sig, sig_low = both[:k], both[k:]
    if not np.all(np.isfinite(sig)):
        raise InputError("No noise multiplier up to σ = 10⁴ reaches this ε; raise ε or the dataset size.")
    report(progress, 0.05, "calibrated σ for each band count")

    # strategies
    t_opt0 = time.perf_counter()
    span = ProgressSpan(progress, 0.05, 0.60)
    coefs, gammas, mean_err, init_err, band_secs, band_info = [], [], [], [], [], []
    weights = bands.astype(float) * np.array(iters_b, float)
    done = 0.0
    for b, wgt, iters in zip(bands, weights, iters_b):
        info: dict = {}
        t_b = time.perf_counter()
        c, err, err0 = optimize_toeplitz(n, int(b), iters, info)
        band_secs.append(time.perf_counter() - t_b)
        band_info.append(info)
        coefs.append(c)
        gammas.append(inverse_coefs(c, min(n, 4 * int(b))))
        mean_err.append(err)
        init_err.append(err0)
        done += wgt
        span(done / weights.sum(), f"optimised b = {b} (n = {n:,})")
    t_opt = time.perf_counter() - t_opt0
    mean_err, init_err = np.array(mean_err), np.array(init_err)
    rmse = sig * np.sqrt(mean_err)
    rmse_low = sig_low * np.sqrt(mean_err)
    i_best = int(np.argmin(rmse))
    b_best = int(bands[i_best])
    i_low = int(np.nanargmin(rmse_low)) if np.any(np.isfinite(rmse_low)) else 0

    # the scaling badge: one whole L-BFGS optimisation of a SCALE_B-banded strategy at n >= SCALE_N, timed.
    # When this run's sweep already did exactly that job (n >= SCALE_N and b = SCALE_B swept), its time is reused.
    n_s = max(n, SCALE_N)
    if n_s == n and SCALE_B in set(bands.tolist()):
        i_s = int(np.nonzero(bands == SCALE_B)[0][0])
        c_s, err_s, t_s = coefs[i_s], float(mean_err[i_s]), band_secs[i_s]
        iters_s, info_s, reused = iters_b[i_s], band_info[i_s], True
    else:
        report(progress, 0.60, f"timing one optimisation at n = {n_s:,}, b = {SCALE_B}")
        iters_s, info_s, reused = iteration_budget(n_s, SCALE_B, cfg.max_iters), {}, False
        t0 = time.perf_counter()
        c_s, err_s, _ = optimize_toeplitz(n_s, SCALE_B, iters_s, info_s)
        t_s = time.perf_counter() - t0

    # inspected strategy
    if cfg.strategy_view == "best" or int(cfg.strategy_view) not in set(bands.tolist()):
        if cfg.strategy_view != "best":
            notes.append(f"b = {cfg.strategy_view} is not in this sweep; showing b* = {b_best}")
        i_view = i_best
    else:
        i_view = int(np.nonzero(bands == int(cfg.strategy_view))[0][0])
    view_b = int(bands[i_view])
    idx = _subsample_idx(n)
    step_err = {"DP-SGD (b = 1)": sig[0] ** 2 * (idx + 1.0)}
    for name, i in ((f"inspected (b = {view_b})", i_view), (f"best (b* = {b_best})", i_best)):
        if i != 0:
            step_err[name] = sig[i] ** 2 * toeplitz_errors(coefs[i], n)[2][idx]
    report(progress, 0.82, "checking the fast path against the dense formula")

    # dense check of the optimised b* strategy (at min(n, 1024))
    m = min(n, CHECK_N)
    c_chk = coefs[i_best]
    fast_mean, fast_max, _ = toeplitz_errors(c_chk, m)
    dn_mean, dn_max = dense_errors(toeplitz_matrix(c_chk, m))
    rel_dense = max(abs(fast_mean - dn_mean) / dn_mean, abs(fast_max - dn_max) / dn_max)

    # optimisation gain at b = 16 (or the largest b swept, if smaller)
    i16 = int(np.nonzero(bands == 16)[0][0]) if 16 in set(bands.tolist()) else len(bands) - 1
    gain16 = 1.0 - mean_err[i16] / init_err[i16]

    # timing panel
    report(progress, 0.86, "timing fast vs dense evaluations")
    b_t = int(min(64, bands.max()))
    n_fast, t_fast, n_dense, t_dense = _timing(n, b_t)
    big = n_fast >= 1024
    slope_fast = loglog_slope(n_fast[big], t_fast[big])
    slope_dense = loglog_slope(n_dense[1:], t_dense[1:])

    # general banded comparison
    dense_cmp: dict = {}
    if cfg.compare_dense:
        nd = min(n, DENSE_MAX_N)
        bd = int(min(8, bands.max(), nd))
        c_t, e_t, _ = optimize_toeplitz(nd, bd, 200)
        e_start, e_gen = optimize_general_banded(nd, bd, c_t, 300, ProgressSpan(progress, 0.9, 1.0))
        dense_cmp = {"n": nd, "b": bd, "toeplitz_err": e_t, "general_err": e_gen,
                     "rmse_ratio": math.sqrt(e_t / e_gen)}
    total = time.perf_counter() - t_start
    report(progress, 1.0, "done")

    heur = heuristic_bands(cfg, cfg.epsilon)
    heur_low = heuristic_bands(cfg, eps_low)
    metrics = {
        "b_best": float(b_best),
        "b_best_low": float(bands[i_low]),
        "heuristic": heur,
        "heuristic_low": heur_low,
        "rmse_best": float(rmse[i_best]),
        "rmse_sgd": float(rmse[0]),
        "rmse_ratio": float(rmse[i_best] / rmse[0]),
        "ratio_to_heuristic": float(b_best / heur),
        "ratio_to_heuristic_low": float(bands[i_low] / heur_low),
        "bstar_growth": float(b_best / bands[i_low]),
        "dense_rel_diff": float(rel_dense),
        "dense_check_n": float(m),
        "gain_b16": float(gain16),
        "gain_b": float(bands[i16]),
        "opt_seconds": float(t_opt),
        "scale_seconds": float(t_s),
        "scale_n": float(n_s),
        "scale_b": float(SCALE_B),
        "scale_iters": float(iters_s),
        "scale_nit": float(info_s["nit"]),
        "scale_converged": float(info_s["converged"]),
        "scale_err": float(err_s),
        "scale_reused": float(reused),
        "total_seconds": float(total),
        "slope_fast": slope_fast,
        "slope_dense": slope_dense,
        "iters": float(max(iters_b)),
        "epochs": n * cfg.batch / cfg.n_examples,
        "b_cap": float(bands.max()),
    }
    if dense_cmp:
        metrics["toeplitz_vs_general"] = dense_cmp["rmse_ratio"]
    res = Result(config=cfg, bands=bands, sigma=sig, mean_err=mean_err, init_err=init_err, rmse=rmse,
                 eps_low=eps_low, sigma_low=sig_low, rmse_low=rmse_low, coefs=coefs, gammas=gammas,
                 step_idx=idx, step_err=step_err, view_b=view_b, timing_n_fast=n_fast, timing_fast=t_fast,
                 timing_n_dense=n_dense, timing_dense=t_dense, dense_cmp=dense_cmp, scale_coefs=c_s, notes=notes,
                 metrics=metrics)
    return res


# badges read from a clock: shown on the page, but tests do not assert their verdict (the team does not
# assert wall time in tests; timings belong to `python -m tests.bench`)
TIMING_CLAIM_LABELS = ("optimisation wall time (s)", "log-log slope of time vs n")


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    cfg = result.config
    out = [
        Claim("Amplified banded MF beats DP-SGD: the best band count gives a much lower RMSE than b = 1",
              m["rmse_ratio"], "<=", 0.5, label="RMSE(b*) / RMSE(DP-SGD)",
              detail=f"b* = {m['b_best']:.0f}: {m['rmse_best']:.3g} vs {m['rmse_sgd']:.3g} at ε = {cfg.epsilon:g}"),
        Claim(f"The best band count follows ε·√n/k (at ε = {cfg.epsilon:g})",
              abs(math.log(m["ratio_to_heuristic"])), "<=", math.log(2.5),
              label="|log(b* / (ε√n/k))|", fmt=".2f",
              detail=f"b* = {m['b_best']:.0f} from the sweep vs ε√n/k = {m['heuristic']:.1f}; "
                     "must be within a factor 2.5"),
        Claim(f"… and also at ε/8 = {result.eps_low:g}",
              abs(math.log(m["ratio_to_heuristic_low"])), "<=", math.log(2.5),
              label="|log(b* / (ε√n/k))|", fmt=".2f",
              detail=f"b* = {m['b_best_low']:.0f} vs ε√n/k = {m['heuristic_low']:.1f}"),
        Claim("b* grows with ε: eight times the privacy budget at least quadruples the best band count",
              m["bstar_growth"], ">=", 4.0, label=f"b*(ε={cfg.epsilon:g}) / b*(ε={result.eps_low:g})", fmt=".3g",
              detail=f"{m['b_best']:.0f} vs {m['b_best_low']:.0f}; capped by the largest b swept "
                     f"({m['b_cap']:.0f})"),
        Claim("The O(n·b) fast path equals the dense O(n³) error formula",
              m["dense_rel_diff"], "<=", 1e-9, label="relative difference", fmt=".1e",
              detail=f"mean and max error of the optimised b* strategy, n = {m['dense_check_n']:.0f}"),
        Claim("Optimising the banded strategy beats its truncated square-root initialisation",
              m["gain_b16"], ">=", 0.10, label=f"mean-error reduction at b = {m['gain_b']:.0f}", fmt=".1%",
              detail=f"measured at b = {m['gain_b']:.0f} (16 when the sweep reaches it); the gain shrinks for "
                     "larger b"),
        Claim(f"It scales: optimising a {m['scale_b']:.0f}-banded strategy at n = {m['scale_n']:,.0f} takes "
              "seconds on this CPU",
              m["scale_seconds"], "<=", 30.0, label="optimisation wall time (s)", fmt=".2f",
              detail=f"one L-BFGS run ({m['scale_nit']:.0f} of at most {m['scale_iters']:.0f} iterations, "
                     + ("converged" if m["scale_converged"] else "not converged") + "), "
                     + ("taken from this run's sweep" if m["scale_reused"] else "timed beside this run's sweep")
                     + f"; the whole sweep at n = {cfg.n:,} ({len(result.bands)} band counts × ≤ {m['iters']:.0f} "
                     f"iterations) took {m['opt_seconds']:.2f} s"),
        Claim("Cost of one error+gradient evaluation grows about linearly in n (the dense path does O(n³) work)",
              m["slope_fast"], "<=", 1.5, label="log-log slope of time vs n", fmt=".2f",
              detail=f"fast path, n ≥ 1024 (cache effects add a bump); the dense path, timed only at n = 128–512 "
                     f"where fixed per-call costs still weigh, has slope {m['slope_dense']:.2f} there"),
    ]
    if "toeplitz_vs_general" in m:
        d = result.dense_cmp
        out.append(Claim("Banded Toeplitz loses almost nothing against a general banded C",
                         m["toeplitz_vs_general"], "<=", 1.02, label="RMSE Toeplitz / general", fmt=".4f",
                         detail=f"n = {d['n']}, b = {d['b']}, general C with n·b free entries"))
    return out
