"""DeepRUOT (ICLR 2025) on a 2-D growth/death toy: velocity and growth from unnormalised snapshots.

Two clusters drift apart; the left one (A) grows at +gamma, the right one (B) dies at -gamma, and no
cell ever moves between them. We only see snapshots at t = 0..3 whose sizes follow the total mass.
DeepRUOT moves weighted particles with a learned velocity v(x, t) and changes their log-weights with a
learned growth rate g(x, t). It is trained with a weighted exact-OT fit to each snapshot (POT's
``ot.emd``, used as a constant plan), a local mass-matching loss on the unnormalised weights and the
unbalanced transport action 1/2|v|^2 + alpha g^2. A balanced neural-ODE baseline (g = 0, normalised
weights) must explain the changing proportions by moving cells from B to A: false transitions.

Stability (the plain joint fit of v and g oscillates and sometimes blows the mass up):
  * stage 0 initialises v and g by regression on POT couplings between consecutive snapshots: the
    unbalanced Sinkhorn plan (masses 1/N_0 per cell) for DeepRUOT, the exact balanced plan for the
    baseline. Each target cell hands its unit mass to the sources in proportion to the plan, which
    gives every source a local mass ratio n_i and a barycentric destination; g is regressed onto
    log(n_i)/dt and v onto the displacement, along the straight interpolation;
  * g is bounded (G_MAX tanh), the mass loss uses a soft nearest-particle assignment, the learning
    rate warms up, gradients are clipped, and the Euler step is small.
Stage 1 is the official pre-training loss (OT + local mass + action); stage 1b refines v with g frozen.

Default settings: ``python -m engine.deep_ruot train`` trains the default config exactly as a live run does and
ships the three nets, their loss curves and the stage-0 masses (assets/deep-ruot/default.pt, ~100 kB). run()
loads them only when the config, the recipe constants (``RECIPE``) and the regenerated snapshots all match;
otherwise, or with ``live``, it trains (about 5 s of CPU at the defaults). The badges are always measured at
run time on the loaded or trained nets. The rest of a default run costs ~0.1 s; what remains of the cold time
is importing POT (which imports scikit-learn and scipy.stats, ~1.5 s once per process).

Optional stochastic refinement (sigma_model > 0): a log-density potential s(x, t) is initialised by
regression on a Gaussian KDE of the weighted particles, and all three nets are trained jointly with
the RUOT action (terms with grad s and s g) plus a Fokker-Planck residual in log form.

Where it breaks (measured 2026-12-04, seed 0, other settings at their defaults of then, 40 training iterations):
with wide clusters, sigma_true = 0.5, the growing cluster's tail crosses x1 = 0 late in the run: at t = 3, 16 of the 37 cells right of
x1 = 0 belong to A (at sigma_true = 0.35: 3 of 26; at the default: none), while only 21 cells are left in B. From
unlabelled snapshots that region looks like a B that dies slowly, and that is what the networks learn: the
coupling pre-fit already gives a weak death on the last interval (mean log mass ratio of B's source cells under the
unbalanced plan -0.18 instead of -0.4), stage 1 keeps g near 0 on B's late cells (mean g_net on B's own cells
-0.35 / -0.29 / -0.09 / +0.05 at t = 0..3), and B's particles gain mass on 2 -> 3 (+0.12 per unit time) because
some are carried into A's tail and grow there: false transitions 0.04 (passes), |g_B + gamma| 0.23 and r = 0.78
(fail). More iterations (100) or the stochastic refinement do not change this; HEAVY_CONFIG (sigma_true = 0.5,
gamma = 0.6: 36 of the 54 cells right of x1 = 0 at t = 3 belong to A) fails the false-transition and B-growth badges.
The growth badges score each cell on its true cluster (the generator knows it); they used to score it by the side
of x1 = 0 it lies on, which is the same at the default but mislabels A's tail when the clusters are wide. The page
shows the per-interval growth of each cluster's particles and how many of A's cells lie right of x1 = 0.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field

import numpy as np

from engine.core import Bool, Choice, Claim, Float, InputError, Int, get_device, param, seed_everything
from engine.core.progress import ProgressSpan, report

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

TIMES = (0.0, 1.0, 2.0, 3.0)
CENTRE_X = 1.5
DRIFT = 0.5
SPREAD0 = 0.3
MIN_CLUSTER = 10
WIDTH = 64
G_MAX = 2.0
LAMBDA_OT = 0.1
LAMBDA_MASS = 1.0     # on the mass loss measured in cells: N_0 * sum_i (w_i - n_i / N_0)^2
LAMBDA_E = 0.01
# Fokker-Planck weight in stage 3 (the stochastic refinement, off by default): the spec's 1 (0.01 until
# 2026-12-06). Measured 2026-12-06 with the stochastic refinement on, other settings at their defaults: seeds 0-3
# pass every badge with either weight; with sigma_model 0.5 and 60 joint iterations 0.01 fails the mass badge
# (worst error 0.17) and 1 passes all six; with 100 joint iterations 0.01 passes 3 of 6 and 1 passes 4 of 6 (the
# joint stage drifts when run long, whatever the weight).
LAMBDA_FP = 1.0
# Stage 3 keeps the stage-1 weights above for OT, mass and action instead of the spec's 1 / 1000 / 1 (read for our
# loss scales as 1, 1000 / N_0 and 1: our mass loss is N_0 times the fractional one). With the stochastic
# refinement on and other settings at their defaults, both sets pass every badge at seed 0 and ours leaves the
# smaller growth error on cluster B; tests/test_deep_ruot.py checks both statements.
STAGE3_OT, STAGE3_MASS, STAGE3_E = LAMBDA_OT, LAMBDA_MASS, LAMBDA_E
LR = 5e-4
WARMUP = 10
CLIP = 1.0
MASS_EPS = 0.5        # temperature (squared distance) of the soft nearest-particle assignment
PRE_STEPS = 100
PRE_LR = 5e-3
UOT_REG, UOT_REG_M = 0.05, 1.0
KDE_BW = 0.3
SMOOTH_BW = 0.4
GRID = 40
G_TOL = 0.15          # growth-recovery tolerance (the spec's [0.25, 0.55] around 0.4)
DETACH = True


@dataclass(frozen=True)
class Config:
    gamma: float = param(0.4, Float(0.0, 0.6, "Growth rate γ", step=0.05,
                                    help="cluster A (left) grows at +γ, cluster B (right) dies at −γ; at most 0.6, "
                                         "since the last snapshot holds n₀·cosh(3γ) cells (3.1·n₀ at 0.6, 5.6·n₀ at "
                                         "0.8) and the training-time estimate that keeps a run inside the 30 s "
                                         "budget was fitted up to 0.6"))
    sigma_true: float = param(0.2, Float(0.0, 0.5, "Data diffusion σ_true", step=0.05,
                                         help="within-cluster spread grows like 0.3² + σ²t"))
    n0: int = param(150, Int(50, 400, "Cells at t = 0", step=25,
                             help="training time grows like n₀^1.7; a setting estimated over the time limit is "
                                  "refused with a message that says what to lower"))
    # the spec's default 80 (40 until 2026-12-05). Measured at the other defaults, seed 0: 40 and 80 iterations pass
    # every badge (80: growth r 0.954 vs 0.906, worst mass error 0.009 vs 0.020; seeds 1-3 pass at both); 200
    # iterations fail four (B->A share 0.18, |g_A - gamma| 0.87, mass error 0.46) and 400 three (r 0.60; on an
    # x86_64 AVX512_SPR CPU the mass error instead of r): the recipe drifts when trained much longer, which the
    # slider up to the spec's 400 lets a user see.
    iters: int = param(80, Int(20, 400, "Training iterations", step=10,
                                help="stage-1 passes over all intervals (v refinement adds a quarter); a "
                                     "setting estimated over the time limit is refused with a message"))
    dt: float = param(0.25, Choice((0.1, 0.25, 0.5), "Euler step dt", widget="radio"))
    alpha: float = param(1.0, Float(0.1, 10.0, "Growth cost α", step=0.1,
                                    help="weight of g² in the action: large α makes growth expensive"))
    baseline: bool = param(True, Bool("Train the balanced baseline (g ≡ 0)"))
    stochastic: bool = param(False, Bool("Stochastic refinement (σ_model > 0)", group="Advanced",
                                         help="adds a score net s and the Fokker–Planck residual"))
    sigma_model: float = param(0.2, Float(0.05, 0.5, "σ_model", step=0.05, group="Advanced",
                                          help="only with Stochastic refinement on"))
    iters3: int = param(20, Int(10, 200, "Joint RUOT iterations", step=5, group="Advanced",
                                help="only with Stochastic refinement on: stage 3 steps with Euler step "
                                     "max(dt, 0.25); each costs about 20 ms at 150 cells and 50 ms at 300"))
    seed: int = param(0, Int(0, 9, "Seed"))
    live: bool = param(False, Bool("Train live at the default settings", group="Advanced",
                                   help="the default settings otherwise load the networks that "
                                        "`python -m engine.deep_ruot train` trained with this same recipe, "
                                        "data and seed; any other setting always trains live"))

    def __post_init__(self):
        est = estimated_seconds(self)
        if est > WORK_LIMIT_S:
            raise ValueError(f"this setting would train for about {est:.0f} s on a 2-core CPU (the limit is "
                             f"{WORK_LIMIT_S:.0f} s): use fewer cells, fewer iterations, a larger Euler step, "
                             "or leave out the balanced baseline or the stochastic refinement")


# Training time on a 2-core CPU, fitted on 2026-12-03 to runs at gamma 0.6 (the most cells): 35 s with every
# size at its max, growing like n0^1.7 (the OT plans and the mass-weighted losses are over all cell pairs);
# the other factors are the measured savings of each switch. Measured 2.8 s at the default (model 2.5),
# 7.0 s at n0 = 300 (8.2), 13.7 s for the max at n0 = 200 (17.6). With n0 up to 400 (2026-12-05): n0 = 400,
# gamma 0.6, 80 iterations, dt 0.5, baseline and stochastic on, estimated 24.0 s, took 20.3 s.
WORK_LIMIT_S = 24.0
_DT_FACTOR = {0.1: 1.0, 0.25: 0.67, 0.5: 0.55}


# Stage-3 iterations beyond 30 (2026-12-05, n0 = 150 and 300, dt 0.25 and 0.5, 10 vs 110 or 200 iterations):
# 16-21 ms each at n0 = 150, 45-51 ms at n0 = 300, nearly independent of dt; the term below (25 ms at 150 cells,
# growing like n0^1.5) stays above every one of those. Stage-1 iterations up to 400: 400 at the defaults
# otherwise was estimated 18.8 s and took 12.4 s, so the n0/iters fit above stays on the safe side there.
_STAGE3_S_PER_ITER = 0.025


def estimated_seconds(cfg: Config) -> float:
    # stage 3 runs only with the stochastic refinement; without it the fit below was made at the default 20
    # joint iterations, whose factor it keeps, so the (unused) iteration widget cannot get a setting refused
    first30 = min(cfg.iters3, 30) if cfg.stochastic else 20
    est = (35.0 * (cfg.n0 / 300) ** 1.7 * (cfg.iters / 100) ** 0.9 * _DT_FACTOR.get(cfg.dt, 1.0)
           * (1.0 if cfg.baseline else 0.53) * (1.0 if cfg.stochastic else 0.8) * (0.8 + 0.2 * first30 / 30))
    if cfg.stochastic and cfg.iters3 > 30:
        est += _STAGE3_S_PER_ITER * (cfg.n0 / 150) ** 1.5 * (cfg.iters3 - 30)
    return est


# largest widget setting the work limit lets through (n0 = 225, every other size at its max): 23 s CPU, measured
# 2026-12-03. Other settings near the limit once the ranges reached the spec's 400 and 200 iterations (2026-12-05,
# sigma_true 0.5, gamma 0.6, baseline and stochastic on): n0 225, 140 iterations, dt 0.5, 200 joint iterations
# estimated 23.8 s, took 18.2 s; n0 300, 30 iterations, dt 0.1, 200 joint, 23.9 s vs 19.4 s; n0 150, 400
# iterations, dt 0.5, 100 joint, 22.4 s vs 15.4 s.
HEAVY_CONFIG = Config(n0=225, iters=100, dt=0.1, baseline=True, stochastic=True, iters3=30, sigma_true=0.5,
                      gamma=0.6)


@dataclass
class Result:
    gamma: float
    alpha: float
    snapshots: list[np.ndarray]
    traj: dict[str, np.ndarray]         # model -> (n_steps+1, N0, 2)
    weights: dict[str, np.ndarray]      # model -> (n_steps+1, N0), unnormalised
    traj_t: np.ndarray
    grid: np.ndarray
    growth_field: np.ndarray            # (len(TIMES), GRID, GRID)
    mass_model: dict[str, np.ndarray]   # model -> total mass along traj_t
    mass_true: np.ndarray
    mass_data: np.ndarray
    transitions: dict[str, np.ndarray]  # name -> 2x2 [[A->A, A->B], [B->A, B->B]] fractions of final mass
    losses: dict[str, np.ndarray]
    sde_paths: np.ndarray | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    pretrained: bool = False            # nets loaded from the shipped default-config checkpoint
    # DeepRUOT per cluster (A: starts at x1 < 0, B: x1 > 0): the growth rate its rollout realises on each
    # interval, log(W(t_k+1) / W(t_k)) / (t_k+1 - t_k) of the particles that start there, and the mean of g_net
    # over that cluster's snapshot cells (true membership) at each t_k (what the growth badges average over t = 0..3)
    growth_rollout: dict[str, np.ndarray] = field(default_factory=dict)   # "A"/"B" -> (len(TIMES) - 1,)
    growth_at_snapshots: dict[str, np.ndarray] = field(default_factory=dict)  # "A"/"B" -> (len(TIMES),)


# ----------------------------------------------------------------------------- data and closed forms
def snapshot_sizes(n0: int, gamma: float) -> list[int]:
    return [int(round(n0 * math.cosh(gamma * t))) for t in TIMES]


def a_fraction(gamma: float, t: float) -> float:
    return 1.0 / (1.0 + math.exp(-2.0 * gamma * t))


def balanced_floor(gamma: float) -> float:
    """Least B -> A mass a mass-conserving model must move to reproduce the final proportions."""
    return a_fraction(gamma, TIMES[-1]) - 0.5


def cluster_counts(n0: int, gamma: float) -> list[tuple[int, int]]:
    out = []
    for t, n in zip(TIMES, snapshot_sizes(n0, gamma)):
        n_a = int(round(n * a_fraction(gamma, t)))
        out.append((n_a, n - n_a))
    return out


def make_snapshots(rng: np.random.Generator, n0: int, gamma: float, sigma: float) -> list[np.ndarray]:
    """Stratified samples: cluster sizes are the rounded expected counts, positions are Gaussian."""
    counts = cluster_counts(n0, gamma)
    if min(min(c) for c in counts) < MIN_CLUSTER:
        raise InputError(f"With N₀ = {n0} and γ = {gamma:g} the dying cluster keeps fewer than {MIN_CLUSTER} "
                         "cells at t = 3; raise N₀ or lower γ.")
    snaps = []
    for t, (n_a, n_b) in zip(TIMES, counts):
        sd = math.sqrt(SPREAD0**2 + sigma**2 * t)
        a = np.array([-CENTRE_X, DRIFT * t]) + sd * rng.standard_normal((n_a, 2))
        b = np.array([CENTRE_X, -DRIFT * t]) + sd * rng.standard_normal((n_b, 2))
        snaps.append(np.concatenate([a, b]))
    return snaps


def transition_matrix(start_x: np.ndarray, end_x: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """Fractions of final mass: rows = start cluster (A: x1 < 0, B: x1 > 0), cols = end cluster."""
    sa, ea = start_x[:, 0] < 0, end_x[:, 0] < 0
    tot = w_end.sum()
    return np.array([[w_end[sa & ea].sum(), w_end[sa & ~ea].sum()],
                     [w_end[~sa & ea].sum(), w_end[~sa & ~ea].sum()]]) / tot


def plan_transitions(x0: np.ndarray, x1: np.ndarray, plan: np.ndarray) -> np.ndarray:
    sa, ea = x0[:, 0] < 0, x1[:, 0] < 0
    tot = plan.sum()
    return np.array([[plan[np.ix_(sa, ea)].sum(), plan[np.ix_(sa, ~ea)].sum()],
                     [plan[np.ix_(~sa, ea)].sum(), plan[np.ix_(~sa, ~ea)].sum()]]) / tot


def uot_plan(x: np.ndarray, y: np.ndarray, n0: int) -> np.ndarray:
    """POT's unbalanced Sinkhorn with mass 1/N_0 per cell on both sides (cost divided by its median)."""
    import ot

    C = ot.dist(x, y)
    return ot.unbalanced.sinkhorn_unbalanced(np.full(len(x), 1.0 / n0), np.full(len(y), 1.0 / n0),
                                             C / np.median(C), UOT_REG, UOT_REG_M, numItermax=3000)


def balanced_plan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    import ot

    return ot.emd(np.full(len(x), 1.0 / len(x)), np.full(len(y), 1.0 / len(y)), ot.dist(x, y))


def local_mass(plan: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each target cell gives its unit mass to the sources in proportion to its plan column.

    Returns the mass n_i each source carries at the next snapshot and its barycentric destination.
    """
    col = plan.sum(0, keepdims=True)
    q = plan / np.maximum(col, 1e-300)
    n = q.sum(1)
    dest = (q @ y) / np.maximum(n, 1e-12)[:, None]
    return n, dest


# ----------------------------------------------------------------------------- model
def _nets(torch, growth: bool):
    from torch import nn

    from engine.core.nn import mlp

    class Growth(nn.Module):
        """g(x, t) = G_MAX tanh(mlp / G_MAX): bounded, close to the raw mlp near 0."""

        def __init__(self):
            super().__init__()
            self.net = mlp([3, WIDTH, WIDTH, 1], act=nn.LeakyReLU)

        def forward(self, inp):
            return G_MAX * torch.tanh(self.net(inp)[:, 0] / G_MAX)

    v = mlp([3, WIDTH, WIDTH, WIDTH, 2], act=nn.LeakyReLU)
    g = Growth() if growth else None
    return v, g


def _stack_v(torch, v_nets):
    """The E velocity nets as one module on (E, n, 3) inputs: per layer a (E, in, out) weight and an (E, 1, out)
    bias, copied from the nets; the same LeakyReLU MLP as ``mlp``, one batched product per layer."""
    from torch import nn

    class StackedV(nn.Module):
        def __init__(self):
            super().__init__()
            lins = [[m for m in net if isinstance(m, nn.Linear)] for net in v_nets]
            self.W = nn.ParameterList([torch.stack([ls[i].weight.detach().T for ls in lins]).clone()
                                       for i in range(len(lins[0]))])
            self.b = nn.ParameterList([torch.stack([ls[i].bias.detach()[None] for ls in lins]).clone()
                                       for i in range(len(lins[0]))])

        def forward(self, inp):
            h = inp
            for i, (W, b) in enumerate(zip(self.W, self.b)):
                h = torch.baddbmm(b, h, W)
                if i < len(self.W) - 1:
                    h = nn.functional.leaky_relu(h)
            return h

        def write_back(self):
            with torch.no_grad():
                for e, net in enumerate(v_nets):
                    for i, m in enumerate(m for m in net if isinstance(m, nn.Linear)):
                        m.weight.copy_(self.W[i][e].T)
                        m.bias.copy_(self.b[i][e, 0])

    return StackedV()


def _stack_g(torch, g_net, E: int):
    """g on (E, n, 3) inputs when only model 0 has a growth net: the others get g = 0 exactly (their weights
    stay constant and their action has no growth term, as for a model without g)."""
    def g(inp):
        g0 = g_net(inp[0])
        return torch.cat([g0[None], g0.new_zeros((E - 1, len(g0)))]) if E > 1 else g0[None]
    return g


def _score_net(torch):
    from torch import nn

    from engine.core.nn import mlp

    return mlp([3, WIDTH, WIDTH, 1], act=nn.LeakyReLU)


def _xt(torch, x, t: float):
    return torch.cat([x, x.new_full((*x.shape[:-1], 1), t)], -1)


def simulate(v_net, g_net, x, logw, t0: float, t1: float, dt: float, alpha: float, keep: bool = False,
             s_net=None, sigma: float = 0.0):
    """Euler steps from t0 to t1: x += v dt, log w += g dt; returns state, action and (optionally) the path.

    The action integrates sum_i w_i [1/2|v|^2 + alpha g^2] dt, plus 1/2|grad s|^2 - sigma^2/2 g - s g
    when a score net is given (sigma > 0). x may carry leading model axes, x (..., n, 2) with logw (..., n):
    the action is then one value per model.
    """
    import torch

    n = max(1, int(round((t1 - t0) / dt)))
    h = (t1 - t0) / n
    energy = x.new_zeros(())
    path, wpath = ([x.detach()], [logw.detach()]) if keep else (None, None)
    for k in range(n):
        inp = _xt(torch, x, t0 + k * h)
        v = v_net(inp)
        w = torch.exp(logw)
        dens = 0.5 * (v**2).sum(-1)
        if g_net is not None:
            g = g_net(inp)
            dens = dens + alpha * g**2
        if s_net is not None:
            xs = x.detach().requires_grad_(True)
            s = s_net(_xt(torch, xs, t0 + k * h))[:, 0]
            (grad_s,) = torch.autograd.grad(s.sum(), xs, create_graph=True)
            dens = dens + 0.5 * (grad_s**2).sum(1)
            if g_net is not None:
                dens = dens - (0.5 * sigma**2 + s) * g
        energy = energy + (w * dens).sum(-1) * h
        if g_net is not None:
            logw = logw + g * h
        x = x + v * h
        if keep:
            path.append(x.detach())
            wpath.append(logw.detach())
    return x, logw, energy, path, wpath


def interval_losses(x, logw, target, n0: int, unbalanced: bool):
    import ot
    import torch

    C = torch.cdist(x, target) ** 2
    w = torch.exp(logw)
    a = (w / w.sum()).detach().cpu().numpy().astype(np.float64)
    a = a / a.sum()
    b = np.full(len(target), 1.0 / len(target))
    P = ot.emd(a, b, C.detach().cpu().numpy().astype(np.float64))   # a constant plan: no gradient through it
    l_ot = (torch.as_tensor(P, dtype=C.dtype, device=C.device) * C).sum()
    if not unbalanced:
        return l_ot, x.new_zeros(())
    # local mass matching on the UNnormalised weights: every data cell is assigned (softly) to its
    # nearest particles; n_i counts the cells particle i should carry
    counts = torch.softmax(-C.detach() / MASS_EPS, dim=0).sum(1)
    l_mass = n0 * ((w - counts / n0) ** 2).sum()
    return l_ot, l_mass


def pretrain(v_stack, g_net, snaps, plans_per_model, device, steps: int, progress=None) -> float:
    """Stage 0: regress v on plan displacements and g on log local-mass ratios along straight paths.

    One model per entry of ``plans_per_model``, all side by side (``v_stack``: their stacked velocity nets);
    only model 0 has a growth net. The summed loss gives every model exactly its own gradient.
    """
    import torch

    from engine.core.nn import make_optimizer

    Xs, Vs, G = [], [], None
    for e, plans in enumerate(plans_per_model):
        xs, ts, vs, gs = [], [], [], []
        for k in range(len(TIMES) - 1):
            span = TIMES[k + 1] - TIMES[k]
            n, dest = local_mass(plans[k], snaps[k + 1])
            disp = (dest - snaps[k]) / span
            if e == 0 and g_net is not None:
                # local average of the mass ratios over nearby cells of the same snapshot (a KDE-smoothed
                # ratio): single-cell ratios of an entropic plan are noisy
                d2 = ((snaps[k][:, None, :] - snaps[k][None, :, :]) ** 2).sum(-1)
                kern = np.exp(-d2 / (2 * SMOOTH_BW**2))
                n_smooth = kern @ n / kern.sum(1)
                gs.append(np.tile(np.log(np.clip(n_smooth, 0.05, 20.0)) / span, 4))
            for s in np.linspace(0.0, 1.0, 5)[:-1]:
                xs.append(snaps[k] + s * span * disp)
                ts.append(np.full(len(disp), TIMES[k] + s * span))
                vs.append(disp)
        Xs.append(np.c_[np.concatenate(xs), np.concatenate(ts)])
        Vs.append(np.concatenate(vs))
        if gs:
            G = torch.as_tensor(np.concatenate(gs), dtype=torch.float32, device=device)
    X = torch.as_tensor(np.stack(Xs), dtype=torch.float32, device=device)
    V = torch.as_tensor(np.stack(Vs), dtype=torch.float32, device=device)
    params = list(v_stack.parameters()) + (list(g_net.parameters()) if g_net is not None else [])
    opt = make_optimizer(params, lr=PRE_LR)
    loss = torch.zeros(())
    for it in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = ((v_stack(X) - V) ** 2).sum(2).mean(1).sum()
        if g_net is not None:
            loss = loss + ((g_net(X[0]) - G) ** 2).mean()
        loss.backward()
        opt.step()
        if it % 25 == 0:
            report(progress, (it + 1) / steps, f"stage 0 (coupling pre-fit) {it + 1}/{steps}")
    return float(loss.detach())


def train_stage1(v_stack, g_net, data, cfg: Config, unbalanced: list[bool], progress=None):
    """Stage 1 (and 1b, v refined with g frozen) of E models side by side; model e is unbalanced[e]
    (only model 0 may have a growth net). Each model keeps its own OT plans, losses and gradient clipping,
    and Adam works element-wise, so this equals training them one after another."""
    import torch

    from engine.core.nn import make_optimizer

    E = len(unbalanced)
    n0 = len(data[0])
    hists = [{"OT": [], "mass": [], "action": []} for _ in range(E)]
    iters_b = max(1, cfg.iters // 4)  # refinement of v with g frozen and no mass loss
    total = cfg.iters + iters_b
    v_params = list(v_stack.parameters())
    g_params = list(g_net.parameters()) if g_net is not None else []
    g_use = _stack_g(torch, g_net, E) if g_net is not None and unbalanced[0] else None
    opt = make_optimizer(v_params + g_params, lr=LR)
    opt_b = make_optimizer(v_params, lr=LR)
    x_init = data[0][None].expand(E, -1, -1)
    for it in range(total):
        refine = it >= cfg.iters
        for p in g_params:  # stage 1b: g frozen
            p.requires_grad_(not refine)
        o = opt_b if refine else opt
        for group in o.param_groups:  # linear warm-up, then cosine decay of the learning rate
            group["lr"] = LR * min(1.0, (it + 1 - (cfg.iters if refine else 0)) / WARMUP) \
                * 0.5 * (1.0 + math.cos(math.pi * it / total))
        o.zero_grad(set_to_none=True)
        x, logw = x_init, torch.full((E, n0), -math.log(n0), device=data[0].device)
        tot = np.zeros((E, 3))
        loss = x.new_zeros(())
        for k in range(len(TIMES) - 1):
            x, logw, e, _, _ = simulate(v_stack, g_use, x, logw, TIMES[k], TIMES[k + 1], cfg.dt, cfg.alpha)
            for m in range(E):
                l_ot, l_m = interval_losses(x[m], logw[m], data[k + 1], n0, unbalanced[m])
                # unlike the official refinement, the mass loss stays on (its gradient now reaches v only):
                # without it, moving the particles under a frozen g lets the total mass drift
                loss = loss + LAMBDA_OT * l_ot + LAMBDA_MASS * l_m + LAMBDA_E * e[m]
                tot[m] += [float(l_ot.detach()), float(l_m.detach()), float(e[m].detach())]
            if DETACH:  # detach at each snapshot, as the official recipe does
                x, logw = x.detach(), logw.detach()
        loss.backward()
        # clip_grad_norm_(·, CLIP) of each model's own parameters (g belongs to model 0)
        sq = sum((p.grad ** 2).flatten(1).sum(1) for p in v_params)
        if not refine and g_params:
            sq = sq + torch.cat([sum((p.grad ** 2).sum() for p in g_params)[None], sq.new_zeros(E - 1)])
        scale = (CLIP / (sq.sqrt() + 1e-6)).clamp(max=1.0)
        for p in v_params:
            p.grad.mul_(scale.view(-1, *([1] * (p.dim() - 1))))
        if not refine:
            for p in g_params:
                p.grad.mul_(scale[0])
        o.step()
        for m in range(E):
            for name, val in zip(("OT", "mass", "action"), tot[m]):
                hists[m][name].append(val)
        if it % 5 == 0 or it == total - 1:
            stage = "1b (v refine)" if refine else "1"
            report(progress, (it + 1) / total, f"stage {stage} {it + 1}/{total}: OT {tot[0, 0]:.3f}, "
                                               f"mass {tot[0, 1]:.3f}")
    for p in g_params:
        p.requires_grad_(True)
    return [{k: np.asarray(v, dtype=np.float32) for k, v in h.items()} for h in hists]


def fp_residual(v_net, g_net, s_net, x, t: float, sigma: float):
    """|(2/sigma^2)(d_t s + v . grad s) + div v - g| at (x, t): the Fokker-Planck equation in log form."""
    import torch

    xt = _xt(torch, x.detach(), t).requires_grad_(True)
    s = s_net(xt)[:, 0]
    (ds,) = torch.autograd.grad(s.sum(), xt, create_graph=True)
    v = v_net(xt)
    div = 0.0
    for d in range(2):
        (gd,) = torch.autograd.grad(v[:, d].sum(), xt, create_graph=True)
        div = div + gd[:, d]
    r = (2.0 / sigma**2) * (ds[:, 2] + (v * ds[:, :2]).sum(1)) + div - g_net(xt)
    return r.abs().mean()


def train_stochastic(v_net, g_net, s_net, data, cfg: Config, progress=None):
    """Stage 2 (KDE score initialisation) and stage 3 (joint RUOT with the Fokker-Planck residual)."""
    import torch

    from engine.core.nn import make_optimizer

    sig = cfg.sigma_model
    dt = max(cfg.dt, 0.25)  # stage 3 needs second derivatives: keep its Euler step coarse
    n0 = len(data[0])
    # stage 2: regress s on (sigma^2/2) log of a weighted Gaussian KDE of the particle cloud
    with torch.no_grad():
        pts, tts, tgt = [], [], []
        x, logw = data[0], torch.full((n0,), -math.log(n0), device=data[0].device)
        for k in range(len(TIMES) - 1):
            n = max(1, int(round((TIMES[k + 1] - TIMES[k]) / dt)))
            h = (TIMES[k + 1] - TIMES[k]) / n
            for j in range(n):
                t = TIMES[k] + j * h
                w = torch.exp(logw)
                d2 = torch.cdist(x, x) ** 2
                dens = (w[None, :] * torch.exp(-d2 / (2 * KDE_BW**2))).sum(1) / (2 * math.pi * KDE_BW**2)
                pts.append(x)
                tts.append(torch.full((len(x), 1), t, device=x.device))
                tgt.append(0.5 * sig**2 * torch.log(dens + 1e-8))
                inp = _xt(torch, x, t)
                x, logw = x + v_net(inp) * h, logw + g_net(inp) * h
        X = torch.cat([torch.cat(pts), torch.cat(tts)], 1)
        Y = torch.cat(tgt)
    opt = make_optimizer(s_net.parameters(), lr=PRE_LR)
    for _ in range(100):
        opt.zero_grad(set_to_none=True)
        loss = ((s_net(X)[:, 0] - Y) ** 2).mean()
        loss.backward()
        opt.step()
    # stage 3: joint RUOT
    params = list(v_net.parameters()) + list(g_net.parameters()) + list(s_net.parameters())
    opt = make_optimizer(params, lr=LR * 0.5)
    hist = {"OT": [], "mass": [], "action": [], "FP": []}
    for it in range(cfg.iters3):
        for group in opt.param_groups:
            group["lr"] = 0.5 * LR * min(1.0, (it + 1) / WARMUP)
        opt.zero_grad(set_to_none=True)
        x, logw = data[0], torch.full((n0,), -math.log(n0), device=data[0].device)
        loss = x.new_zeros(())
        sums = dict.fromkeys(hist, 0.0)
        for k in range(len(TIMES) - 1):
            x_start = x
            x, logw, e, _, _ = simulate(v_net, g_net, x, logw, TIMES[k], TIMES[k + 1], dt, cfg.alpha,
                                        s_net=s_net, sigma=sig)
            l_ot, l_m = interval_losses(x, logw, data[k + 1], n0, True)
            l_fp = 0.5 * (fp_residual(v_net, g_net, s_net, data[k], TIMES[k], sig)
                          + fp_residual(v_net, g_net, s_net, x_start, TIMES[k], sig))
            loss = loss + STAGE3_OT * l_ot + STAGE3_MASS * l_m + STAGE3_E * e + LAMBDA_FP * l_fp
            for name, val in (("OT", l_ot), ("mass", l_m), ("action", e), ("FP", l_fp)):
                sums[name] += float(val.detach())
            x, logw = x.detach(), logw.detach()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        for name in hist:
            hist[name].append(sums[name])
        if it % 5 == 0 or it == cfg.iters3 - 1:
            report(progress, (it + 1) / cfg.iters3, f"stage 3 (joint RUOT) {it + 1}/{cfg.iters3}: "
                                                      f"FP residual {sums['FP']:.3f}")
    return {k: np.asarray(v, dtype=np.float32) for k, v in hist.items()}


def sde_sample(v_net, g_net, s_net, x0, dt: float, sigma: float, gen):
    """dX = (v + grad s) dt + sigma dW; returns positions at every step (for display)."""
    import torch

    x = x0.clone()
    out = [x.detach()]
    n_per = max(1, int(round(1.0 / dt)))
    h = 1.0 / n_per
    for k in range(n_per * (len(TIMES) - 1)):
        t = k * h
        xs = x.detach().requires_grad_(True)
        s = s_net(_xt(torch, xs, t))[:, 0]
        (gs,) = torch.autograd.grad(s.sum(), xs)
        with torch.no_grad():
            noise = torch.randn(x.shape, generator=gen, device=x.device)
            x = x + (v_net(_xt(torch, x, t)) + gs) * h + sigma * math.sqrt(h) * noise
        out.append(x.detach())
    return torch.stack(out).cpu().numpy().astype(np.float32)


def train_models(snaps, cfg: Config, device, baseline: bool, progress=None):
    """DeepRUOT (and, with ``baseline``, the balanced baseline) trained side by side.

    Returns [(v, g, s, losses, stage-0 masses)] per model, DeepRUOT first. Their nets are drawn in the
    order separate runs would draw them (DeepRUOT's v, g and score net, then the baseline's v), and
    stages 0 and 1 train both at once (``pretrain``, ``train_stage1``); the stochastic stages concern
    DeepRUOT alone.
    """
    import torch

    unbalanced = [True, False] if baseline else [True]
    stoch = cfg.stochastic
    v_u, g_u = _nets(torch, True)
    s_net = _score_net(torch) if stoch else None
    v_nets, g_net = [v_u] + ([_nets(torch, False)[0]] if baseline else []), g_u
    v_nets, g_net = [v.to(device) for v in v_nets], g_net.to(device)
    s_net = s_net.to(device) if s_net is not None else None
    v_stack = _stack_v(torch, v_nets).to(device)
    data = [torch.as_tensor(x, dtype=torch.float32, device=device) for x in snaps]
    n0 = len(snaps[0])
    plans = [[uot_plan(snaps[k], snaps[k + 1], n0) if ub else balanced_plan(snaps[k], snaps[k + 1])
              for k in range(len(TIMES) - 1)] for ub in unbalanced]
    span = ProgressSpan(progress, 0, 1)
    pretrain(v_stack, g_net, snaps, plans, device, PRE_STEPS, span.sub(0, 0.1))
    v_stack.write_back()
    with torch.no_grad():  # total mass at the snapshots right after the coupling pre-fit (for the page)
        _, W0, _ = _rollout(torch, v_nets[0], g_net, data[0], n0, cfg.dt, cfg.alpha)
    n_per = int(round(1.0 / cfg.dt))
    stage0_mass = W0.sum(1)[[int(round(t * n_per)) for t in TIMES]]
    losses = train_stage1(v_stack, g_net, data, cfg, unbalanced, span.sub(0.1, 0.6 if stoch else 1.0))
    v_stack.write_back()
    if stoch:
        extra = train_stochastic(v_nets[0], g_net, s_net, data, cfg, span.sub(0.6, 1.0))
        for k, v in extra.items():
            losses[0][k] = np.concatenate([losses[0].get(k, np.zeros(0, np.float32)), v]) if k != "FP" else v
    out = [(v_nets[0], g_net, s_net, losses[0], stage0_mass)]
    if baseline:
        out.append((v_nets[1], None, None, losses[1], None))
    return out


# ----------------------------------------------------------------------------- default checkpoint
# Everything the trained nets depend on besides the data: if any of these (or the config) differs from what
# the checkpoint was trained with, run() trains live instead of loading it.
RECIPE = ("TIMES", "CENTRE_X", "DRIFT", "SPREAD0", "WIDTH", "G_MAX", "LAMBDA_OT", "LAMBDA_MASS", "LAMBDA_E",
          "LR", "WARMUP", "CLIP", "MASS_EPS", "PRE_STEPS", "PRE_LR", "UOT_REG", "UOT_REG_M", "SMOOTH_BW", "DETACH")


def checkpoint_path():
    from engine.core.nn import asset_path

    return asset_path("deep-ruot/default.pt")


def recipe_fingerprint(cfg: Config) -> str:
    d = {k: v for k, v in asdict(cfg).items() if k != "live"}
    d.update({k: globals()[k] for k in RECIPE})
    return json.dumps(d, sort_keys=True)


def _ckpt_modules(trained):
    from torch import nn

    (v_u, g_u, _, _, _), (v_b, _, _, _, _) = trained
    return nn.ModuleDict({"v_ruot": v_u, "g_ruot": g_u, "v_base": v_b})


def save_default_checkpoint(path=None) -> dict:
    """Train the default config exactly as run() does and save the three nets, their loss histories and the
    stage-0 masses (about 100 kB)."""
    import torch

    from engine.core.nn import save_state

    cfg = Config(live=True)
    snaps, device = _prepare(cfg)
    trained = train_models(snaps, cfg, device, cfg.baseline)
    extra = {"fingerprint": recipe_fingerprint(cfg),
             "snapshots": torch.as_tensor(np.concatenate(snaps), dtype=torch.float32),
             "stage0_mass": torch.as_tensor(np.asarray(trained[0][4], dtype=np.float32))}
    for tag, (_, _, _, losses, _) in zip(("ruot", "base"), trained):
        extra.update({f"loss_{tag}_{k}": torch.as_tensor(v) for k, v in losses.items()})
    save_state(_ckpt_modules([(m[0].cpu(), m[1].cpu() if m[1] is not None else None, *m[2:])
                                     for m in trained]), path or checkpoint_path(), extra)
    return extra


def load_default_checkpoint(cfg: Config, snaps, device):
    """The shipped nets as train_models would return them, or None when the config, the recipe or the data
    differ from what the checkpoint was trained on (or it is missing): run() then trains live."""
    import torch

    from engine.core.nn import load_state

    path = checkpoint_path()
    if cfg.live or not path.exists():
        return None
    ck = load_state(path, map_location=device)
    extra = ck["extra"]
    data = np.concatenate(snaps)
    if (extra.get("fingerprint") != recipe_fingerprint(cfg) or tuple(extra["snapshots"].shape) != data.shape
            or not np.allclose(extra["snapshots"].cpu().numpy(), data, atol=1e-5)):
        return None
    v_u, g_u = _nets(torch, True)
    v_b = _nets(torch, False)[0]
    trained = [(v_u.to(device), g_u.to(device), None, None, None), (v_b.to(device), None, None, None, None)]
    _ckpt_modules(trained).load_state_dict(ck["state"])
    losses = [{k[len(f"loss_{tag}_"):]: v.cpu().numpy() for k, v in extra.items() if k.startswith(f"loss_{tag}_")}
              for tag in ("ruot", "base")]
    return [(v_u, g_u, None, losses[0], extra["stage0_mass"].cpu().numpy().astype(np.float64)),
            (v_b, None, None, losses[1], None)]


# ----------------------------------------------------------------------------- run
def _prepare(config: Config):
    """Threads, seeds, device and the snapshots, in the order run() and the train script both use."""
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    rng = seed_everything(config.seed, torch_too=True)
    device = get_device()
    return make_snapshots(rng, config.n0, config.gamma, config.sigma_true), device


def rollout_growth(traj: np.ndarray, weights: np.ndarray, idx_k: list[int]) -> dict[str, np.ndarray]:
    """Growth rate realised on each snapshot interval by the particles that start in A (x1 < 0) and in B.

    traj (steps + 1, N, 2) and weights (steps + 1, N) of one rollout; idx_k the step index of each snapshot time.
    A particle keeps its starting label wherever it goes, so mass carried from B into A and grown there counts
    for B: a positive rate for B means false transitions, not a wrong g on B's own cells.
    """
    out = {}
    for name, sel in (("A", traj[0][:, 0] < 0), ("B", traj[0][:, 0] >= 0)):
        w = weights[idx_k][:, sel].sum(1)
        out[name] = np.log(w[1:] / w[:-1]) / np.diff(TIMES)
    return out


def _rollout(torch, v, g, x0, n0: int, dt: float, alpha: float):
    path, wpath = [x0], [torch.full((n0,), -math.log(n0), device=x0.device)]
    x, lw = path[0], wpath[0]
    energy = 0.0
    for k in range(len(TIMES) - 1):
        x, lw, e, p, wp = simulate(v, g, x, lw, TIMES[k], TIMES[k + 1], dt, alpha, keep=True)
        energy += float(e)
        path += p[1:]
        wpath += wp[1:]
    return torch.stack(path).cpu().numpy(), torch.exp(torch.stack(wpath)).cpu().numpy(), energy


def run(config: Config, progress=None) -> Result:
    import torch

    snaps, device = _prepare(config)
    n0 = config.n0
    span = ProgressSpan(progress, 0, 1)
    trained = load_default_checkpoint(config, snaps, device)
    pretrained = trained is not None
    if pretrained:
        report(progress, 0.95, "loaded the networks trained at the default settings (see `live`)")
    else:
        trained = train_models(snaps, config, device, config.baseline,
                               span.sub(0, 0.95, "DeepRUOT and balanced baseline: " if config.baseline
                                        else "DeepRUOT: "))
    v_u, g_u, s_u, loss_u, mass0 = trained[0]
    models = {"DeepRUOT": (v_u, g_u)}
    losses = {f"DeepRUOT {k}": v for k, v in loss_u.items()}
    if config.baseline:
        v_b, _, _, loss_b, _ = trained[1]
        models["balanced baseline"] = (v_b, None)
        losses.update({f"baseline {k}": v for k, v in loss_b.items() if k != "mass"})
    report(progress, 0.96, "evaluating")

    x0 = torch.as_tensor(snaps[0], dtype=torch.float32, device=device)
    traj, weights, trans, mass_model, energy = {}, {}, {}, {}, {}
    with torch.no_grad():
        for name, (v, g) in models.items():
            P, W, energy[name] = _rollout(torch, v, g, x0, n0, config.dt, config.alpha)
            traj[name], weights[name] = P.astype(np.float32), W.astype(np.float32)
            trans[name] = transition_matrix(P[0], P[-1], W[-1])
            mass_model[name] = W.sum(1)
    n_per = int(round(1.0 / config.dt))
    traj_t = np.arange(traj["DeepRUOT"].shape[0]) / n_per
    idx_k = [int(round(t * n_per)) for t in TIMES]
    sizes = np.array(snapshot_sizes(n0, config.gamma), dtype=float)

    g_lin = np.linspace(-3.5, 3.5, GRID)
    gx, gy = np.meshgrid(g_lin, g_lin)
    pts = np.stack([gx.ravel(), gy.ravel()], 1)
    fields, g_left, g_right, g_all, g_true = [], [], [], [], []
    # growth is scored on each snapshot cell's true cluster (the generator writes A's cells first), not on the
    # side of x1 = 0 it lies: with wide clusters A's growing tail crosses x1 = 0 at late times
    members = [np.arange(len(s)) < n_a for s, (n_a, _) in zip(snaps, cluster_counts(n0, config.gamma))]
    with torch.no_grad():
        for t, s, in_a in zip(TIMES, snaps, members):
            inp = torch.as_tensor(np.c_[pts, np.full(len(pts), t)], dtype=torch.float32, device=device)
            fields.append(g_u(inp).cpu().numpy().reshape(GRID, GRID))
            gs = g_u(torch.as_tensor(np.c_[s, np.full(len(s), t)], dtype=torch.float32, device=device))
            gs = gs.cpu().numpy()
            g_left.append(gs[in_a].mean())
            g_right.append(gs[~in_a].mean())
            g_all.append(gs)
            g_true.append(np.where(in_a, config.gamma, -config.gamma))
    g_all, g_true = np.concatenate(g_all), np.concatenate(g_true)
    growth_rollout = rollout_growth(traj["DeepRUOT"], weights["DeepRUOT"], idx_k)

    sde = None
    if s_u is not None:
        gen = torch.Generator(device=device).manual_seed(config.seed)
        sde = sde_sample(v_u, g_u, s_u, x0[: min(n0, 100)], config.dt, config.sigma_model, gen)

    # POT references: exact balanced plan t0 -> t3; unbalanced Sinkhorn (reg 0.05, reg_m 1) t0 -> t1, the pair
    # the stage-0 pre-fit couples, and t0 -> t3, the spec's static reference over the whole span. With its soft
    # marginal penalty the static t0 -> t3 plan still moves mass from B to A (0.13 at the defaults, measured
    # 2026-12-05): one static coupling across a 1.9x change in the A/B ratio, unlike the learned dynamics.
    emd = balanced_plan(snaps[0], snaps[-1])
    trans["POT exact OT t0→t3"] = plan_transitions(snaps[0], snaps[-1], emd)
    uot = uot_plan(snaps[0], snaps[1], n0)
    trans["POT unbalanced Sinkhorn t0→t1"] = plan_transitions(snaps[0], snaps[1], uot)
    trans["POT unbalanced Sinkhorn t0→t3"] = plan_transitions(snaps[0], snaps[-1], uot_plan(snaps[0], snaps[-1], n0))
    rows = uot.sum(1)
    a0 = snaps[0][:, 0] < 0

    m: dict[str, float] = {}
    m["false_ruot"] = float(trans["DeepRUOT"][1, 0])
    m["cross_ruot"] = float(trans["DeepRUOT"][1, 0] + trans["DeepRUOT"][0, 1])
    if config.baseline:
        m["false_baseline"] = float(trans["balanced baseline"][1, 0])
        m["mass_err_baseline"] = float(abs(mass_model["balanced baseline"][idx_k[-1]] - sizes[-1] / n0)
                                       / (sizes[-1] / n0))
        m["action_baseline"] = energy["balanced baseline"]
    m["false_floor"] = balanced_floor(config.gamma)
    m["false_pot_emd"] = float(trans["POT exact OT t0→t3"][1, 0])
    m["false_pot_uot_t3"] = float(trans["POT unbalanced Sinkhorn t0→t3"][1, 0])
    m["cross_pot_uot"] = float(trans["POT unbalanced Sinkhorn t0→t1"][1, 0]
                               + trans["POT unbalanced Sinkhorn t0→t1"][0, 1])
    m["uot_row_ratio"] = float(rows[a0].mean() / rows[~a0].mean())
    # how many cells right of x1 = 0 belong to A at the last snapshot (0 unless the clusters are wide)
    m["a_cells_right_last"] = float((members[-1] & (snaps[-1][:, 0] > 0)).sum())
    m["cells_right_last"] = float((snaps[-1][:, 0] > 0).sum())
    m["g_left"] = float(np.mean(g_left))
    m["g_right"] = float(np.mean(g_right))
    with np.errstate(invalid="ignore", divide="ignore"):
        m["g_corr"] = float(np.corrcoef(g_all, g_true)[0, 1]) if np.std(g_true) > 0 else float("nan")
    m["g_mean"] = float(np.mean(g_all))
    m["action_ruot"] = energy["DeepRUOT"]
    errs = np.abs(mass_model["DeepRUOT"][idx_k] - sizes / n0) / (sizes / n0)
    for k in range(1, len(TIMES)):
        m[f"mass_err_t{k}"] = float(errs[k])
    m["mass_err_max"] = float(errs[1:].max())
    m["mass_err_max_stage0"] = float((np.abs(mass0 - sizes / n0) / (sizes / n0))[1:].max())
    report(progress, 1.0, "done")

    return Result(
        gamma=config.gamma, alpha=config.alpha, snapshots=[s.astype(np.float32) for s in snaps], traj=traj,
        weights=weights, traj_t=traj_t, grid=g_lin, growth_field=np.stack(fields).astype(np.float32),
        mass_model=mass_model, mass_true=np.cosh(config.gamma * traj_t), mass_data=sizes / n0,
        transitions=trans, losses=losses, sde_paths=sde, metrics=m, pretrained=pretrained,
        growth_rollout=growth_rollout, growth_at_snapshots={"A": np.array(g_left), "B": np.array(g_right)},
    )


FALSE_BAR = 0.05   # largest share of final mass allowed to move B → A (the spec's bar)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    g = result.gamma
    out = [
        Claim("DeepRUOT explains the changing proportions by growth and death, with no false transitions "
              "from the dying to the growing cluster" if g > 0 else
              "With no growth or death (γ = 0) DeepRUOT keeps the clusters apart: no false transitions from B to A",
              m["false_ruot"], "<=", FALSE_BAR,
              label="share of final mass that moved B → A (DeepRUOT)", fmt=".3f"),
    ]
    if "false_baseline" in m and m["false_floor"] >= 0.3:
        out.append(Claim("…whereas a balanced (mass-conserving) model is forced into false transitions",
                         m["false_baseline"], ">=", 0.25, label="B → A share (balanced baseline)",
                         detail=f"closed-form floor for a balanced fit {m['false_floor']:.2f}; "
                                f"POT's exact balanced plan t₀→t₃ {m['false_pot_emd']:.2f}", fmt=".3f"))
    out += [
        Claim(f"The growth rate of the growing cluster is learned from the snapshots (truth +{g:g})" if g > 0 else
              "Cluster A's growth rate, zero here (γ = 0), is learned from the snapshots",
              abs(m["g_left"] - g), "<=", G_TOL, label="|mean learned g on cluster A's cells − γ|",
              detail=f"mean g = {m['g_left']:+.3f}", fmt=".3f"),
        Claim(f"The death rate of the dying cluster is learned from the snapshots (truth −{g:g})" if g > 0 else
              "Cluster B's death rate, zero here (γ = 0), is learned from the snapshots",
              abs(m["g_right"] + g), "<=", G_TOL, label="|mean learned g on cluster B's cells + γ|",
              detail=f"mean g = {m['g_right']:+.3f}", fmt=".3f"),
    ]
    if g >= 0.2:
        out.append(Claim("The learned growth field tracks the true one cell by cell", m["g_corr"], ">=", 0.8,
                         label="Pearson r of g_net and g* over snapshot cells", fmt=".3f"))
    out.append(Claim("The unnormalised total mass matches every snapshot's cell count", m["mass_err_max"], "<=",
                     0.10, label="worst relative mass error over t = 1, 2, 3", fmt=".3f",
                     detail=(f"balanced baseline at t = 3: {m['mass_err_baseline']:.2f}"
                             if "mass_err_baseline" in m else "")))
    return out


if __name__ == "__main__":  # pragma: no cover
    import time

    if len(sys.argv) > 1 and sys.argv[1] == "train":
        t0 = time.time()
        save_default_checkpoint()
        size = checkpoint_path().stat().st_size
        print(f"trained the default config in {time.time() - t0:.1f}s -> {checkpoint_path()} ({size / 1024:.0f} kB)")
        r = run(Config())
        assert r.pretrained
        for c in claims(r):
            print(c.passed, c.describe())
        raise SystemExit(0)
    t0 = time.time()
    r = run(Config())
    print(f"{time.time() - t0:.2f}s", {k: round(v, 3) for k, v in r.metrics.items()})
    for c in claims(r):
        print(c.passed, c.describe())
