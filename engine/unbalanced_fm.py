"""Unbalanced flow matching (FlexDock, ICLR 2025) on a 2-D "apo -> holo" toy.

Standard flow matching regresses a velocity onto straight segments between pairs drawn from a
coupling with exact marginals p0, p1. Unbalanced FM keeps a candidate pair (x0, x1) ~ p0 x p1 only
when ||x1 - x0|| <= tau: the kept pairs follow q = p0 p1 a / Z, whose marginals only approximate p0
and p1. Z (the acceptance rate) is the sample efficiency; the marginal mismatch is the price paid
for short, easy-to-learn paths. A second, short-range "relaxation" flow trained on (output of a
standard flow, target) pairs with a small cutoff composes precision with the right mode weights.

The closed-form acceptance of a pair of Gaussian modes uses the noncentral chi-square law of
||x1 - x0||^2 / (s0^2 + s1^2); it is what the Monte-Carlo estimates of the training run are
checked against.

Dependence on the training budget (measured 2026-12-04, seeds 0 / 1 / 2, other settings at their defaults;
valid(unbalanced) - valid(A) and valid(B o A) - valid(A)): 600 steps (the default) 0.20 / 0.23 / 0.04 and
0.24 / 0.19 / 0.02; 1 200 steps 0.36 / 0.33 / 0.27 and 0.12 / 0.02 / 0.01; 2 000 steps 0.30 / 0.38 / 0.28 and
0.07 / 0.06 / 0.04. The standard flow A goes from 0.29-0.43 valid to 0.61-0.70 and the unbalanced flow from ~0.5
to ~0.97, but B o A only reaches ~0.67-0.74: the relaxation badge passes at the default mostly because A is
under-trained there. The unbalanced-vs-standard badge does not depend on that. The spec's negative control says
as much: a second flow with no cutoff (τ_B = ∞) raises the valid fraction by +0.21 / +0.05 / +0.17 at seeds
0 / 1 / 2 (default settings, measured 2026-12-06; the cutoff flow B: +0.24 / +0.19 / +0.02), so the control's badge
(shown when it is switched on; the gain must stay under the +0.15 bar that only the cutoff flow should reach) fails
at seeds 0 and 2.

Distance to the target: every evaluated flow's output is also scored by its exact W2^2 (POT) to a fresh target sample,
with the W2^2 between two target samples as the floor. At the default the unbalanced flow scores 1.86 / 1.85 / 1.76 at
seeds 0 / 1 / 2 against standard FM's 0.58 / 0.51 / 0.28 (B∘A 0.71 / 0.46 / 0.27, floor 0.16 / 0.21 / 0.06; measured
2026-12-07): it keeps the source's mode weights, which one distance to the target charges for, so the badge that
asks for a smaller distance fails there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.core import Bool, Choice, Claim, Float, InputError, Int, get_device, param, seed_everything
from engine.core.progress import ProgressSpan, report

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

INF = float("inf")
TAU_OPTIONS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, INF)
CLAIM_TAUS = (0.4, 0.8, 2.5, 3.0, INF)
SWEEP_TAUS = (0.4, 0.8, 1.5, 2.5, 3.0, INF)
SWEEP_MAX_STEPS = 1200
BATCH = 256
HIDDEN = 128
COSINE = False
BLOCK = 128  # candidate block: BLOCK sources x BLOCK targets per rejection draw
RADIUS = 1.5
SIGMA0 = 0.15
ROTATION_DEG = 15.0
W0 = np.array([0.4, 0.3, 0.2, 0.1])
W1_REWEIGHTED = np.array([0.1, 0.2, 0.3, 0.4])
N_EVAL = 4000
POOL_B = 8000
# W2^2 to the target: exact OT (POT's network simplex) between the first N_W2 outputs of a flow and N_W2 fresh target
# points; the target points come from a generator of their own (seeded from the config seed and W2_STREAM), so the
# rest of the run draws exactly what it drew before this was added
N_W2 = 600
W2_STREAM = 2025


def _tau_label(t: float) -> str:
    return "∞ (standard FM)" if math.isinf(t) else f"{t:g}"


@dataclass(frozen=True)
class Config:
    tau: float = param(0.8, Choice(TAU_OPTIONS, "Cutoff τ of the unbalanced flow", widget="select_slider",
                                   labels=tuple(_tau_label(t) for t in TAU_OPTIONS),
                                   help="a candidate pair is kept only if ‖x₁ − x₀‖ ≤ τ; ∞ is standard FM"))
    tau_b: float = param(0.4, Float(0.1, 1.0, "Relaxation cutoff τ_B", step=0.05,
                                    help="cutoff of the short-range flow B applied after the standard flow A"))
    n_euler: int = param(8, Int(1, 50, "Euler steps", help="integration steps of every flow at sampling time"))
    train_steps: int = param(600, Int(100, 2000, "Training steps per flow", step=100))
    target_weights: str = param("reweighted", Choice(("reweighted", "same"), "Target mode weights",
                                                     labels=("re-weighted (0.1, 0.2, 0.3, 0.4)",
                                                             "same as source (0.4, 0.3, 0.2, 0.1)"),
                                                     widget="radio"))
    sigma1: float = param(0.05, Float(0.02, 0.15, "Target sharpness σ₁", step=0.01,
                                      help="std of each target mode; 'valid' means within 3σ₁ of a mode"))
    negative_control: bool = param(False, Bool("Negative control: relaxation with τ_B = ∞",
                                               help="trains one more flow B with no cutoff (a second "
                                                    "standard flow) to show the cutoff is what helps",
                                               group="Advanced"))
    sweep: bool = param(False, Bool("τ sweep (one flow per τ, slower)", group="Advanced"))
    seed: int = param(0, Int(0, 9, "Seed"))

    def __post_init__(self):
        if self.sweep and self.train_steps > SWEEP_MAX_STEPS:
            raise ValueError(f"the τ sweep trains nine or ten flows; use at most {SWEEP_MAX_STEPS} training steps "
                             "with it")


# largest widget setting (τ sweep at its step cap): 27 s in a fresh process on a busy 2-core machine (about 5 s of it
# imports), measured 2026-12-06; the spec's 2 000 steps took 30 s there, so the cap is 1 200 (600 until 2026-12-06, when
# the sweep's six flows were trained one after another)
HEAVY_CONFIG = Config(sweep=True, train_steps=SWEEP_MAX_STEPS, n_euler=50, negative_control=True)


@dataclass
class Result:
    mu0: np.ndarray
    mu1: np.ndarray
    w0: np.ndarray
    w1: np.ndarray
    sigma1: float
    tau: float
    # plot 1: samples and kept pairs at the current tau
    pair_x0: np.ndarray
    pair_x1: np.ndarray
    # plot 2: closed-form trade-off curves
    curve_tau: np.ndarray
    curve_z: np.ndarray
    curve_tv1: np.ndarray
    curve_tv0: np.ndarray
    curve_len2: np.ndarray
    # claim 1: Monte-Carlo estimates from the pair sampler at CLAIM_TAUS
    mc_tau: np.ndarray
    mc_z: np.ndarray
    mc_tv1: np.ndarray
    cf_z: np.ndarray
    cf_tv1: np.ndarray
    # plot 3: outputs per flow
    outputs: dict[str, np.ndarray]
    valid: dict[str, np.ndarray]
    mode_hist: dict[str, np.ndarray]
    # plot 4: trajectories
    traj_standard: np.ndarray
    traj_unbalanced: np.ndarray
    losses: dict[str, np.ndarray]
    # plot 5: optional sweep
    sweep_tau: np.ndarray
    sweep_valid: np.ndarray
    sweep_tv: np.ndarray
    # the two independent target samples behind the W2^2 numbers (flows vs w2_target; the floor is w2_target vs
    # w2_target_b)
    w2_target: np.ndarray
    w2_target_b: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------- the toy
def mixture_params(cfg: Config) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ang0 = np.deg2rad([45.0, 135.0, 225.0, 315.0])
    ang1 = ang0 + np.deg2rad(ROTATION_DEG)
    mu0 = RADIUS * np.stack([np.cos(ang0), np.sin(ang0)], 1)
    mu1 = RADIUS * np.stack([np.cos(ang1), np.sin(ang1)], 1)
    w1 = W1_REWEIGHTED.copy() if cfg.target_weights == "reweighted" else W0.copy()
    return mu0, mu1, W0.copy(), w1


def sample_mixture(rng: np.random.Generator, n: int, mu: np.ndarray, w: np.ndarray, sigma: float):
    labels = rng.choice(len(w), size=n, p=w)
    x = mu[labels] + sigma * rng.standard_normal((n, 2))
    return x, labels


def ncx2_cdf_df2(x, lam) -> np.ndarray:
    """CDF at x of the noncentral chi-square law with 2 degrees of freedom and noncentrality lam.

    As a Poisson mixture of central chi-squares, F(x) = sum_j Pois(j; lam/2) P(chi2_{2j+2} <= x), and
    P(chi2_{2j+2} <= x) = P(Pois(x/2) > j); so F(x) = P(I > J) for independent I ~ Pois(x/2), J ~ Pois(lam/2),
    summed here in numpy over both Poisson supports (truncated where the tails are below e^-70). Equal to
    scipy.special.chndtr(x, 2, lam) (the tests compare the two) without importing scipy at run time.
    """
    x, lam = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(lam, dtype=float))
    shape = x.shape
    x, lam = x.ravel(), lam.ravel()
    inf = np.isinf(x)
    nu, mu = np.where(inf, 0.0, x) / 2.0, lam / 2.0
    top = float(max(nu.max(initial=0.0), mu.max(initial=0.0)))
    n = int(math.ceil(top + 12.0 * math.sqrt(top) + 40.0))
    k = np.arange(n, dtype=float)
    log_fact = np.array([math.lgamma(i + 1.0) for i in range(n)])

    def pmf(rate):   # (entries, n) Poisson probabilities, rate 0 included
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.where(k[None] == 0, 0.0, k[None] * np.log(rate[:, None]))
        return np.exp(lr - rate[:, None] - log_fact[None])

    p_i = pmf(nu)
    tail = np.cumsum(p_i[:, ::-1], 1)[:, ::-1]          # P(I >= j)
    sf_i = np.concatenate([tail[:, 1:], np.zeros((len(tail), 1))], 1)   # P(I > j)
    out = (pmf(mu) * sf_i).sum(1)
    return np.where(inf, 1.0, np.clip(out, 0.0, 1.0)).reshape(shape)


def closed_form(tau: float | np.ndarray, mu0, mu1, w0, w1, s0: float, s1: float) -> dict[str, np.ndarray]:
    """Acceptance Z(tau) and TV of the kept-pair marginals to p0, p1 (noncentral chi-square)."""
    tau = np.atleast_1d(np.asarray(tau, dtype=float))
    v = s0**2 + s1**2
    d2 = ((mu1[None, :, :] - mu0[:, None, :]) ** 2).sum(-1) / v  # (k, m)
    with np.errstate(over="ignore"):
        x = np.where(np.isinf(tau), np.inf, tau**2 / v)
    P = ncx2_cdf_df2(x[:, None, None], d2[None])  # (t, k, m)
    P = np.where(np.isinf(tau)[:, None, None], 1.0, P)
    joint = w0[None, :, None] * w1[None, None, :] * P
    Z = joint.sum((1, 2))
    safe = np.maximum(Z, 1e-300)
    q1 = joint.sum(1) / safe[:, None]
    q0 = joint.sum(2) / safe[:, None]
    return {"Z": Z, "tv1": 0.5 * np.abs(q1 - w1).sum(1), "tv0": 0.5 * np.abs(q0 - w0).sum(1),
            "q1": q1, "q0": q0}


class PairSampler:
    """Exact batched rejection sampling from q(x0, x1) ∝ p0(x0) p1(x1) 1[||x1 - x0|| <= tau].

    Each draw takes BLOCK sources and BLOCK targets, keeps every entry of the BLOCK x BLOCK distance
    matrix under the cutoff (each kept entry is an exact draw from q), redraws until at least ``batch`` pairs survive, and returns ``batch`` of
    them without replacement. Counts of all kept entries give running estimates of Z and of the
    kept-pair marginals. tau = inf is the independent coupling (x0[i], x1[i]) of standard FM.
    """

    def __init__(self, rng, tau, src, mu1, w1, s1, batch=BATCH, block=BLOCK):
        self.rng, self.tau, self.src, self.mu1, self.w1, self.s1 = rng, float(tau), src, mu1, w1, s1
        self.batch, self.block = batch, block
        self.candidates = 0
        self.kept = 0
        self.kept_x1_modes = np.zeros(len(w1))
        self.kept_x0_modes = np.zeros(4)
        self.kept_len2 = 0.0

    def draw(self) -> tuple[np.ndarray, np.ndarray]:
        b = self.batch
        if math.isinf(self.tau):
            x0, l0 = self.src(self.rng, b)
            x1, l1 = sample_mixture(self.rng, b, self.mu1, self.w1, self.s1)
            self.candidates += b
            self.kept += b
            self.kept_x1_modes += np.bincount(l1, minlength=len(self.w1))
            if l0 is not None:
                self.kept_x0_modes += np.bincount(l0, minlength=4)
            self.kept_len2 += float(((x1 - x0) ** 2).sum())
            return x0, x1
        got0, got1, n = [], [], 0
        m = self.block
        for _ in range(20_000):
            x0, l0 = self.src(self.rng, m)
            x1, l1 = sample_mixture(self.rng, m, self.mu1, self.w1, self.s1)
            d2 = (x0**2).sum(1)[:, None] + (x1**2).sum(1)[None, :] - 2.0 * (x0 @ x1.T)
            i, j = np.nonzero(d2 <= self.tau**2)
            self.candidates += m * m
            self.kept += len(i)
            self.kept_x1_modes += np.bincount(l1[j], minlength=len(self.w1))
            if l0 is not None:
                self.kept_x0_modes += np.bincount(l0[i], minlength=4)
            self.kept_len2 += float(d2[i, j].sum())
            got0.append(x0[i])
            got1.append(x1[j])
            n += len(i)
            if n >= b:
                break
        else:
            raise InputError(f"the cutoff τ = {self.tau:g} keeps almost no pairs; choose a larger τ")
        a0, a1 = np.concatenate(got0), np.concatenate(got1)
        pick = self.rng.choice(len(a0), size=b, replace=False)
        return a0[pick], a1[pick]

    @property
    def z(self) -> float:
        return self.kept / max(1, self.candidates)

    def tv1(self) -> float:
        q = self.kept_x1_modes / max(1.0, self.kept_x1_modes.sum())
        return float(0.5 * np.abs(q - self.w1).sum())


# ----------------------------------------------------------------------------- flows
def _velocity_net(torch):
    from torch import nn

    from engine.core.nn import mlp

    return mlp([3, HIDDEN, HIDDEN, 2], act=nn.SiLU)


def train_flows(samplers: list[PairSampler], steps: int, device, progress=None, message="training"):
    """Train one velocity net per sampler, side by side in one loop; returns [(net, loss history)].

    The nets are independent: their weights are stacked along a leading axis and trained as one batched
    net on the sum of their losses, which gives each net exactly its own gradient (Adam is per parameter),
    so this equals training them one after another; it only saves the per-step overhead. Every net's batches
    are drawn before training, in the order the sequential runs would draw them (init, time-seed, then all
    its batches), so the random streams match.
    """
    import torch

    from engine.core.nn import train_loop

    nets, gens, batches = [], [], []
    report(progress, 0.0, f"{message}: drawing training pairs")
    for sampler in samplers:
        nets.append(_velocity_net(torch).to(device))
        gens.append(torch.Generator().manual_seed(int(sampler.rng.integers(2**31))))
        batches.append([sampler.draw() for _ in range(int(steps))])
    E = len(nets)
    # the E nets' weights stacked along a leading axis: one batched forward and backward per step
    lins = [[m for m in net if isinstance(m, torch.nn.Linear)] for net in nets]
    params = []
    for li in range(len(lins[0])):
        params.append(torch.stack([ls[li].weight.detach().T for ls in lins]).requires_grad_(True))      # (E, in, out)
        params.append(torch.stack([ls[li].bias.detach()[None] for ls in lins]).requires_grad_(True))   # (E, 1, out)
    X0 = [torch.as_tensor(np.stack([bat[s][0] for bat in batches]), dtype=torch.float32) for s in range(int(steps))]
    X1 = [torch.as_tensor(np.stack([bat[s][1] for bat in batches]), dtype=torch.float32) for s in range(int(steps))]
    hists = np.zeros((E, int(steps)), dtype=np.float32)

    def loss_fn(step):
        x0, x1 = X0[step].to(device), X1[step].to(device)
        t = torch.stack([torch.rand(x0.shape[1], 1, generator=gen) for gen in gens]).to(device)
        h = torch.cat([(1 - t) * x0 + t * x1, t], 2)
        for i in range(0, len(params), 2):
            h = torch.baddbmm(params[i + 1], h, params[i])
            if i < len(params) - 2:
                h = torch.nn.functional.silu(h)
        per_net = ((h - (x1 - x0)) ** 2).sum(2).mean(1)   # (E,): each net's own loss
        hists[:, step] = per_net.detach().cpu().numpy()
        return per_net.sum()

    train_loop(params, loss_fn, steps, lr=2e-3, progress=progress, message=message, report_every=25,
               cosine=COSINE)
    with torch.no_grad():
        for e, ls in enumerate(lins):
            for li, m in enumerate(ls):
                m.weight.copy_(params[2 * li][e].T)
                m.bias.copy_(params[2 * li + 1][e, 0])
    return [(net, hists[e]) for e, net in enumerate(nets)]


def train_flow(sampler: PairSampler, steps: int, device, progress=None, message="training"):
    return train_flows([sampler], steps, device, progress, message)[0]


def euler(net, x0: np.ndarray, n_steps: int, device, keep_path: bool = False):
    """Integrate dx/dt = v(x, t) from t = 0 to 1 with n_steps explicit Euler steps."""
    import torch

    x = torch.as_tensor(x0, dtype=torch.float32, device=device)
    path = [x.cpu().numpy()] if keep_path else None
    dt = 1.0 / n_steps
    with torch.no_grad():
        for k in range(n_steps):
            t = torch.full((len(x), 1), k * dt, device=device)
            x = x + dt * net(torch.cat([x, t], 1))
            if keep_path:
                path.append(x.cpu().numpy())
    out = x.cpu().numpy().astype(np.float64)
    return (out, np.stack(path).astype(np.float32)) if keep_path else out


def evaluate(y: np.ndarray, mu1: np.ndarray, w1: np.ndarray, sigma1: float):
    d = np.sqrt(((y[:, None, :] - mu1[None]) ** 2).sum(-1))
    valid = d.min(1) <= 3 * sigma1
    hist = np.bincount(d.argmin(1), minlength=len(w1)) / len(y)
    return valid, hist, float(valid.mean()), float(0.5 * np.abs(hist - w1).sum())


def w2_squared(x: np.ndarray, y: np.ndarray) -> float:
    """Exact squared 2-Wasserstein distance between two point clouds with uniform weights (POT's emd2 on the
    squared-Euclidean cost matrix); the iteration cap is raised so that the network simplex reaches the optimum."""
    import ot

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    a, b = np.full(len(x), 1.0 / len(x)), np.full(len(y), 1.0 / len(y))
    return float(ot.emd2(a, b, ot.dist(x, y, metric="sqeuclidean"), numItermax=10_000_000))


# ----------------------------------------------------------------------------- run
def run(config: Config, progress=None) -> Result:
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    rng = seed_everything(config.seed, torch_too=True)
    device = get_device()
    mu0, mu1, w0, w1 = mixture_params(config)
    s1 = float(config.sigma1)

    def src_p0(r, n):
        return sample_mixture(r, n, mu0, w0, SIGMA0)

    # closed-form trade-off curves
    curve_tau = np.concatenate([np.linspace(0.1, 4.5, 45), [np.inf]])
    cf = closed_form(curve_tau, mu0, mu1, w0, w1, SIGMA0, s1)
    c0, _ = src_p0(rng, 20000)
    c1, _ = sample_mixture(rng, 20000, mu1, w1, s1)
    dd = ((c1 - c0) ** 2).sum(1)
    dd_sorted = np.sort(dd)
    csum = np.concatenate([[0.0], np.cumsum(dd_sorted)])
    cnt = np.searchsorted(dd_sorted, np.minimum(curve_tau, 1e6) ** 2, side="right")
    curve_len2 = np.where(cnt > 0, csum[cnt] / np.maximum(cnt, 1), np.nan)

    # claim 1: estimates from the sampler itself at the claim cutoffs
    mc_z, mc_tv1 = [], []
    for t in CLAIM_TAUS:
        s = PairSampler(rng, t, src_p0, mu1, w1, s1)
        for _ in range(12 if math.isinf(t) else 30):
            s.draw()
        mc_z.append(s.z)
        mc_tv1.append(s.tv1())
    cf_claim = closed_form(np.array(CLAIM_TAUS), mu0, mu1, w0, w1, SIGMA0, s1)

    # pairs to draw at the current tau
    shown = PairSampler(rng, config.tau, src_p0, mu1, w1, s1)
    px0, px1 = shown.draw()

    n_flows = 3 + int(config.negative_control) + (len(SWEEP_TAUS) if config.sweep else 0)
    span = ProgressSpan(progress, 0.0, 1.0)
    k = [0]

    def next_span(name):
        sp = span.sub(k[0] / n_flows, (k[0] + 1) / n_flows, prefix=f"{name}: ")
        k[0] += 1
        return sp

    x_eval, _ = src_p0(rng, N_EVAL)
    outputs, valid, hists, losses, metrics = {}, {}, {}, {}, {}

    def record(name, y):
        v, h, vf, tv = evaluate(y, mu1, w1, s1)
        outputs[name], valid[name], hists[name] = y.astype(np.float32), v, h
        return vf, tv

    # flow A (standard FM) and the unbalanced flow at the chosen tau, trained side by side
    name_u = f"unbalanced τ={_tau_label(config.tau)}"
    samp_a = PairSampler(rng, INF, src_p0, mu1, w1, s1)
    samp_u = PairSampler(rng, config.tau, src_p0, mu1, w1, s1)
    sp_au = span.sub(0, 2 / n_flows, prefix="standard FM and unbalanced FM: ")
    k[0] += 2
    (net_a, losses["standard FM"]), (net_u, losses[name_u]) = train_flows([samp_a, samp_u], config.train_steps,
                                                                          device, sp_au)
    y_a = euler(net_a, x_eval, config.n_euler, device)
    metrics["valid_standard"], metrics["tv_standard"] = record("standard FM", y_a)
    y_u = euler(net_u, x_eval, config.n_euler, device)
    metrics["valid_unbalanced"], metrics["tv_unbalanced"] = record(name_u, y_u)
    metrics["z_train"] = samp_u.z
    metrics["len2_train"] = samp_u.kept_len2 / max(1, samp_u.kept)

    # relaxation flow B on outputs of A
    pool, _ = src_p0(rng, POOL_B)
    pool_a = euler(net_a, pool, config.n_euler, device)

    def relax(tau_b, label):
        def src_pool(r, n):
            return pool_a[r.integers(0, len(pool_a), size=n)], None

        sb = PairSampler(rng, tau_b, src_pool, mu1, w1, s1)
        net_b, losses[label] = train_flow(sb, config.train_steps, device, next_span(label))
        return euler(net_b, y_a, config.n_euler, device), sb.z

    y_ba, metrics["z_relax"] = relax(config.tau_b, "A + relaxation B")
    metrics["valid_relax"], metrics["tv_relax"] = record("A + relaxation B", y_ba)
    if config.negative_control:
        y_ctrl, _ = relax(INF, "A + B with τ_B=∞")
        metrics["valid_control"], metrics["tv_control"] = record("A + B with τ_B=∞", y_ctrl)

    # trajectories of 200 particles
    _, traj_s = euler(net_a, x_eval[:200], config.n_euler, device, keep_path=True)
    _, traj_u = euler(net_u, x_eval[:200], config.n_euler, device, keep_path=True)

    sweep_tau, sweep_valid, sweep_tv = [], [], []
    if config.sweep:
        # one flow per tau, trained side by side (the same random streams as one after another, see train_flows)
        samplers = [PairSampler(rng, t, src_p0, mu1, w1, s1) for t in SWEEP_TAUS]
        sp = span.sub(k[0] / n_flows, 1.0, prefix="τ sweep: ")
        for t, (net, _) in zip(SWEEP_TAUS, train_flows(samplers, config.train_steps, device, sp,
                                                       message=f"{len(SWEEP_TAUS)} flows")):
            _, _, vf, tv = evaluate(euler(net, x_eval, config.n_euler, device), mu1, w1, s1)
            sweep_tau.append(t)
            sweep_valid.append(vf)
            sweep_tv.append(tv)
    # distance of each flow's output to the target distribution: W2^2 to a fresh target sample, and the same
    # number for a second target sample (what two samples of the very target score: the floor of this estimate)
    w2_rng = np.random.default_rng([W2_STREAM, int(config.seed)])
    t_w2, _ = sample_mixture(w2_rng, N_W2, mu1, w1, s1)
    t_w2_b, _ = sample_mixture(w2_rng, N_W2, mu1, w1, s1)
    w2_tags = {"standard FM": "standard", name_u: "unbalanced", "A + relaxation B": "relax",
               "A + B with τ_B=∞": "control"}
    for name, tag in w2_tags.items():
        if name in outputs:
            # the stored (float32) outputs, so that what the page offers for download gives the same numbers
            metrics[f"w2_{tag}"] = w2_squared(outputs[name][:N_W2], t_w2)
    metrics["w2_floor"] = w2_squared(t_w2_b, t_w2)
    report(progress, 1.0, "done")

    mc_z, mc_tv1 = np.array(mc_z), np.array(mc_tv1)
    metrics["claim1_err"] = float(max(np.max(np.abs(mc_z - cf_claim["Z"]) / 0.02),
                                      np.max(np.abs(mc_tv1 - cf_claim["tv1"]) / 0.03)))
    metrics["claim1_violations"] = float(np.sum(np.diff(mc_z) <= 0) + np.sum(np.diff(mc_tv1) > 0.03))
    cf_cur = closed_form(config.tau, mu0, mu1, w0, w1, SIGMA0, s1)
    metrics["z_closed_form"] = float(cf_cur["Z"][0])
    metrics["tv1_closed_form"] = float(cf_cur["tv1"][0])
    metrics["valid_gain_unbalanced"] = metrics["valid_unbalanced"] - metrics["valid_standard"]
    metrics["valid_gain_relax"] = metrics["valid_relax"] - metrics["valid_standard"]
    metrics["tv_change_relax"] = metrics["tv_relax"] - metrics["tv_standard"]
    metrics["weights_differ"] = float(config.target_weights == "reweighted")
    if config.negative_control:
        metrics["valid_gain_control"] = metrics["valid_control"] - metrics["valid_standard"]

    return Result(
        mu0=mu0, mu1=mu1, w0=w0, w1=w1, sigma1=s1, tau=float(config.tau),
        pair_x0=px0.astype(np.float32), pair_x1=px1.astype(np.float32),
        curve_tau=curve_tau, curve_z=cf["Z"], curve_tv1=cf["tv1"], curve_tv0=cf["tv0"], curve_len2=curve_len2,
        mc_tau=np.array(CLAIM_TAUS), mc_z=mc_z, mc_tv1=mc_tv1, cf_z=cf_claim["Z"], cf_tv1=cf_claim["tv1"],
        outputs=outputs, valid=valid, mode_hist=hists, traj_standard=traj_s, traj_unbalanced=traj_u,
        losses=losses, sweep_tau=np.array(sweep_tau), sweep_valid=np.array(sweep_valid),
        sweep_tv=np.array(sweep_tv), w2_target=t_w2, w2_target_b=t_w2_b, metrics=metrics,
    )


VALID_GAIN_BAR = 0.15   # the spec's least gain in valid fraction (claims 2 and 3)
# quoted in the page's caveat (default settings, negative control on; a test re-measures them): per seed, the gains
# in valid fraction over the standard flow A of the unbalanced flow, of B∘A and of the no-cutoff control B_∞∘A
QUOTED_SEED_GAINS = {0: (0.20, 0.24, 0.21), 1: (0.23, 0.19, 0.05), 2: (0.04, 0.02, 0.17)}
# also quoted there (same runs; a test re-measures them): per seed, W2^2 to the target of standard FM, of the unbalanced
# flow and of B∘A (N_W2 points each)
QUOTED_SEED_W2 = {0: (0.58, 1.86, 0.71), 1: (0.51, 1.85, 0.46), 2: (0.28, 1.76, 0.27)}


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    tl = _tau_label(result.tau)
    # badges 3-4 compare the unbalanced flow with standard FM: at tau = inf the two are the same method, and
    # without re-weighted target modes there are no target weights to lose; the badges then do not apply (nan)
    same_method = not np.isfinite(result.tau)
    no_weights = m.get("weights_differ", 1.0) == 0.0
    na3 = "not applicable at τ = ∞: the 'unbalanced' flow is standard FM. " if same_method else ""
    na4 = na3 or ("not applicable: the target keeps the source's mode weights (Target mode weights = same), so "
                  "there is none to lose. " if no_weights else "")
    out = [
        Claim("Unbalanced FM trades sample efficiency for marginal accuracy: as the cutoff grows, more "
              "candidate pairs are kept (Z rises) and the kept pairs' target marginal approaches p₁",
              m["claim1_violations"], "<=", 0, label="monotonicity violations over τ ∈ {0.4, 0.8, 2.5, 3, ∞}",
              detail="Z must rise strictly, TV(q₁, p₁) must not rise by more than 0.03 (its Monte-Carlo tolerance)", fmt=".0f"),
        Claim("The Monte-Carlo acceptance and marginals of the pair sampler match the closed form",
              m["claim1_err"], "<=", 1.0, label="worst error in tolerance units",
              detail="tolerances 0.02 for Z, 0.03 for TV; closed form from the noncentral χ² law with 2 degrees of "
                     "freedom (the engine's own Poisson-mixture CDF, checked against scipy's in the tests)"),
        Claim(f"Short flows are learned more precisely: with τ = {tl} more outputs land on a sharp target "
              "mode than with standard FM at the same budget",
              np.nan if na3 else m["valid_gain_unbalanced"], ">=", VALID_GAIN_BAR,
              label="valid(unbalanced) − valid(standard)",
              detail=na3 + f"valid {m['valid_unbalanced']:.2f} vs {m['valid_standard']:.2f}", fmt=".2f"),
        Claim(f"…at a price: with τ = {tl} the output keeps the source's mode weights instead of the target's",
              np.nan if na4 else m["tv_unbalanced"], ">=", 0.30, label="mode-weight TV of the unbalanced flow",
              detail=na4 + f"measured {m['tv_unbalanced']:.2f}; standard FM: {m['tv_standard']:.2f}", fmt=".2f"),
        Claim("Composing the standard flow with a short-range relaxation flow raises precision…",
              m["valid_gain_relax"], ">=", VALID_GAIN_BAR, label="valid(B∘A) − valid(A)",
              detail=f"valid {m['valid_relax']:.2f} vs {m['valid_standard']:.2f}", fmt=".2f"),
        Claim("…without losing the target's mode weights",
              m["tv_change_relax"], "<=", 0.05, label="TV(B∘A) − TV(A)",
              detail=f"TV {m['tv_relax']:.2f} vs {m['tv_standard']:.2f}", fmt=".2f"),
    ]
    # measured, allowed to fail: one distance to the whole target mixes the precision the valid share measures with
    # the mode weights, which the unbalanced flow keeps from the source by design (measured at the default: it fails)
    out.append(Claim("The unbalanced flow's output is closer to the target in Wasserstein distance than standard "
                     "FM's (same training budget)",
                     m["w2_unbalanced"] / m["w2_standard"], "<", 1.0, label="W₂²(unbalanced) / W₂²(standard)",
                     detail=f"exact W₂² to {N_W2} fresh target points: unbalanced {m['w2_unbalanced']:.3f}, "
                            f"standard FM {m['w2_standard']:.3f}, A + relaxation B {m['w2_relax']:.3f}; two target "
                            f"samples of that size score {m['w2_floor']:.3f} (the floor)", fmt=".2f"))
    if "valid_gain_control" in m:
        # the spec's negative control: a second flow with no cutoff must NOT reach the bar, or the gain of B∘A is
        # the extra training, not the cutoff (measured at the default: +0.21, so this badge fails there)
        out.append(Claim("…and the cutoff is what helps: a second flow with no cutoff (τ_B = ∞) does not reach the "
                         "same bar (negative control)",
                         m["valid_gain_control"], "<", VALID_GAIN_BAR, label="valid(B_∞∘A) − valid(A)",
                         detail=f"valid {m['valid_control']:.2f} vs {m['valid_standard']:.2f}; the cutoff flow B "
                                f"reaches {m['valid_gain_relax']:+.2f}", fmt=".2f"))
    return out


if __name__ == "__main__":  # pragma: no cover
    import sys
    import time

    t0 = time.time()
    r = run(Config(**({"seed": int(sys.argv[1])} if len(sys.argv) > 1 else {})))
    print(f"{time.time() - t0:.2f}s", {k: round(v, 3) for k, v in r.metrics.items()})
    for c in claims(r):
        print(c.passed, c.describe())
