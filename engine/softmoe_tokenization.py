"""Don't flatten, tokenize! — SoftMoE heads over a tokenised conv-encoder output, at toy scale.

Pure compute (no streamlit). Task: pixel Catch (10 rows × W columns, ball falls one row per step, the
paddle on the bottom row moves left/stay/right, ±1 at the 9th step). Instead of online RL we use a
value-regression proxy: every Catch state is enumerable and its optimal Q-values have a closed form, so
each head is trained by supervised regression onto Q* on half the states and judged on the other half
(held-out MSE) and by the greedy success of its Q in the real environment.

Heads on the same conv encoder: ``dense`` (flatten → MLP, the baseline), ``dense4`` (the same, 4× wider),
``softmoe4_per_conv`` (one token per pixel, 4 experts), ``softmoe4_per_feat`` (one token per channel),
``softmoe1_per_conv_scaled`` (one expert, 4× wider) and ``softmoe4_flatten`` (SoftMoE on one flattened token). ``python -m engine.softmoe_tokenization train``
writes the multi-seed curves and the SoftMoE-4 weights to assets/softmoe-tokenization/.

Since 2026-12-06 the spec's own setting is here too: online RL (``train_head_rl``, a PQN-style Q(λ) learner on
parallel games that sees only rewards). The live run can use it instead of regression, and ``python -m
engine.softmoe_tokenization train-rl`` writes RL curves of every head (100 000 game steps × 5 seeds) and RL-trained
SoftMoE-4 weights. The spec's claims on the single scaled expert and on pruning are measured on those; the
regression results stay on the page beside them.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from engine.core import Bool, Choice, Claim, Float, InputError, Int, param, report, seed_everything
from engine.core.progress import ProgressSpan

ROWS = 10
STEPS_PER_EPISODE = ROWS - 1
CHANNELS = 16
HIDDEN = 64
GAMMA = 0.99
BATCH = 64
LR = 1e-3
# dense4 and softmoe4_per_feat were added on 2026-12-05 (the spec's list has them): a dense head as wide as the
# scaled single expert, so width alone is a baseline too, and SoftMoE on per-feature tokens (one token per channel)
LIVE_MODES = ("regression", "rl")
ARCHS = ("dense", "softmoe4_per_conv", "softmoe1_per_conv_scaled", "softmoe4_flatten", "dense4", "softmoe4_per_feat")
LABELS = {"dense": "dense (flatten → MLP, baseline)", "softmoe4_per_conv": "SoftMoE-4, per-conv tokens",
          "softmoe1_per_conv_scaled": "SoftMoE-1 ×4 wide, per-conv tokens",
          "softmoe4_flatten": "SoftMoE-4, one flattened token",
          "dense4": "dense ×4 wide (flatten → MLP)", "softmoe4_per_feat": "SoftMoE-4, per-feature tokens"}
TOKENIZATIONS = ("per_conv", "per_feat", "per_patch", "flatten")
SHIPPED_COLS = 5
ASSET_DIR = "softmoe-tokenization"
TRAIN_SEEDS = 5
# every head must fit its training states (train MSE ~1e-3 or below) before held-out error is compared:
# at 500 steps the dense head was still at train MSE 0.03 while the SoftMoE heads had converged
TRAIN_STEPS = 2000
EVAL_EVERY = 25


@dataclass(frozen=True)
class Config:
    tokenization: str = param("per_conv", Choice(TOKENIZATIONS, "Tokenization (anatomy view)",
                                                 help="how the 10×W×16 feature map is cut into tokens"))
    experts: int = param(4, Int(1, 8, "Experts n", help="experts in the anatomy view and in the live SoftMoE-n"))
    capacity: float = param(1.0, Float(0.25, 2.0, "Capacity factor", step=0.25,
                                       help="slots per expert p = ⌈m·cf/n⌉"))
    # the spec's live default, the tokenised single expert (SoftMoE-4 until 2026-12-06; 0.97 against 0.74 s warm)
    live_arch: str = param("softmoe1_per_conv_scaled", Choice(
        ARCHS + ("softmoe_n_per_conv",), "Live architecture",
        labels=tuple(LABELS[a] for a in ARCHS) + ("SoftMoE-n, per-conv tokens (n = Experts n)",),
        help="head trained live on this page; the single expert's width follows 'Single-expert width scale'"))
    width_scale: int = param(4, Int(1, 8, "Single-expert width scale",
                                    help="hidden width of the single expert = scale × 64"))
    layernorm: bool = param(True, Bool("LayerNorm on tokens", help="our addition, not in the official code"))
    l2_routing: bool = param(True, Bool("Scaled ℓ2 routing normalisation",
                                        help="Soft MoE's normalisation: unit-norm tokens and slot parameters in the "
                                             "routing logits, times a learned scale"))
    # the live run: regression onto Q* (the proxy of the shipped curves; fast) or the spec's online RL. RL needs
    # tens of thousands of environment steps here (at the spec's 6 000 no head beat chance in our runs), 6-9 s at
    # 20 000 for the default head, over the 3 s default budget: so the default is regression and RL is one click away
    live_mode: str = param("regression", Choice(LIVE_MODES, "Live training", widget="radio",
                                                labels=("regression onto Q* (proxy)", "online RL: Q(λ) in the game"),
                                                help="regression fits the closed-form Q* on a share of the states, "
                                                     "like the shipped curves; online RL learns from playing "
                                                     "parallel Catch games, rewards only"))
    live_steps: int = param(100, Int(50, 200, "Regression steps (regression mode)", step=50,
                                     help="gradient steps of the live regression run; at most 200, since 300 "
                                          "steps at the widest expert took 28-30 s here, at the 30 s budget"))
    rl_steps: int = param(20000, Int(2000, 40000, "Environment steps (RL mode)", step=2000,
                                     help="game steps played by the online RL run (the paper trains for millions); "
                                          "a wide single expert or many columns allow fewer, and the page then "
                                          "names the most that fit"))
    columns: int = param(5, Int(3, 9, "Grid columns", help="Catch width for the live run and the anatomy view"))
    train_frac: float = param(0.5, Float(0.2, 0.9, "Training fraction of states (regression mode)", step=0.1,
                                         help="share of the Catch states whose Q* the regression run fits; the "
                                              "rest measure its held-out error"))
    seed: int = param(0, Int(0, 9, "Seed"))


# Largest settings. Regression: the widest expert, most steps and columns (live_arch softmoe1_per_conv_scaled,
# width_scale 8, capacity 2, live_steps 200, columns 9, train_frac 0.9) took 20-21 s in-process on 2026-12-03 and
# 9.0 s on 2026-12-06 (with a 300-step maximum it had taken 28-30 s, so the slider stops at 200). Online RL is
# capped by check_budget; of the settings it lets through, the two with the largest estimates took 19.9 s (scaled
# single expert 8× wide, 9 columns, 12 000 steps; estimate 21.6 s; an earlier 10 000-step run of it took 10.9 s,
# this machine is noisy) and 11.7 s (SoftMoE-4 per-conv, 9 columns, 30 000 steps; estimate 20.8 s) on 2026-12-06,
# in-process. The first is the one the benchmark times.
HEAVY_CONFIG = Config(live_mode="rl", live_arch="softmoe1_per_conv_scaled", width_scale=8, capacity=2.0,
                      rl_steps=12000, columns=9)


@dataclass
class Result:
    anatomy: dict           # per tokenization: m, d, p, D, C (one observation), slot cosine similarity
    degeneracy: dict        # flatten max slot-input difference, per_conv min relative slot distance
    obs_image: np.ndarray   # (2, rows, cols) observation used in the anatomy view
    param_counts: dict      # arch -> parameters (encoder included)
    shipped: dict | None    # curves from the training script (None if missing)
    masking: dict | None    # expert masking on the shipped SoftMoE-4 weights
    live: dict              # live training curve of one head
    metrics: dict
    shipped_rl: dict | None = None   # online-RL curves from the training script (train-rl), None if missing
    masking_rl: dict | None = None   # expert masking on the RL-trained SoftMoE-4 weights


# ---------------------------------------------------------------- Catch
def _torch():
    import torch
    return torch


def all_states(cols: int):
    """Every (time step, ball column, paddle column) at which an action is taken."""
    torch = _torch()
    t, b, p = torch.meshgrid(torch.arange(STEPS_PER_EPISODE), torch.arange(cols), torch.arange(cols), indexing="ij")
    return t.flatten(), b.flatten(), p.flatten()


def observe(t, b, p, cols: int):
    """Binary 2×rows×cols images: channel 0 the ball (row t), channel 1 the paddle (bottom row)."""
    torch = _torch()
    o = torch.zeros(len(t), 2, ROWS, cols)
    i = torch.arange(len(t))
    o[i, 0, t, b] = 1.0
    o[i, 1, ROWS - 1, p] = 1.0
    return o


def env_step(t, b, p, a, cols: int):
    """One Catch step: paddle moves a-1, ball falls one row; reward ±1 when the ball reaches the bottom."""
    torch = _torch()
    p = (p + a - 1).clamp(0, cols - 1)
    t = t + 1
    done = t == STEPS_PER_EPISODE
    reward = torch.where(done, torch.where(p == b, 1.0, -1.0), torch.zeros_like(p, dtype=torch.float32))
    return t, b, p, reward, done


def q_star(t, b, p, cols: int, gamma: float = GAMMA):
    """Closed form: after action a the paddle can still reach the ball iff |b - p'| ≤ moves left."""
    torch = _torch()
    a = torch.arange(3)
    p_new = (p[:, None] + a[None] - 1).clamp(0, cols - 1)
    left = (STEPS_PER_EPISODE - 1 - t)[:, None]
    ok = (b[:, None] - p_new).abs() <= left
    return torch.where(ok, 1.0, -1.0) * gamma ** left.float()


def greedy_success(net, cols: int) -> float:
    """Fraction of caught balls over every (ball column, paddle start) pair, acting greedily on Q."""
    torch = _torch()
    b, p = torch.meshgrid(torch.arange(cols), torch.arange(cols), indexing="ij")
    b, p = b.flatten(), p.flatten()
    t = torch.zeros_like(b)
    with torch.no_grad():
        for _ in range(STEPS_PER_EPISODE):
            a = net(observe(t, b, p, cols)).argmax(1)
            t, b, p, r, _ = env_step(t, b, p, a, cols)
    return float((r > 0).float().mean())


# ---------------------------------------------------------------- SoftMoE and heads
def _modules():
    torch = _torch()
    from torch import nn
    F = torch.nn.functional

    class SoftMoE(nn.Module):
        """Soft mixture of experts on a set of tokens (m × d); experts map back to d."""

        def __init__(self, d: int, m: int, n: int, cf: float, hidden: int, l2_routing: bool = False):
            super().__init__()
            self.n, self.p = n, slots_per_expert(m, n, cf)
            self.phi = nn.Parameter(torch.randn(d, n, self.p) / math.sqrt(d))
            # Soft MoE's optional normalisation: unit-norm tokens and unit-norm slot parameters (over d) inside
            # the routing logits only, times one learnable scale (initialised to 1); slot inputs use raw tokens
            self.l2_routing = l2_routing
            if l2_routing:
                self.scale = nn.Parameter(torch.ones(1))
            self.w1 = nn.Parameter(torch.randn(n, d, hidden) * math.sqrt(2.0 / d))
            self.b1 = nn.Parameter(torch.zeros(n, hidden))
            self.w2 = nn.Parameter(torch.randn(n, hidden, d) / math.sqrt(hidden))
            self.b2 = nn.Parameter(torch.zeros(n, d))
            self.expert_mask = None     # optional (n,) 0/1 tensor: masked experts get no combine weight

        def logits(self, x):
            if not self.l2_routing:
                return torch.einsum("bmd,dnp->bmnp", x, self.phi)
            xn = x / (x.norm(dim=-1, keepdim=True) + 1e-6)
            phin = self.phi / (self.phi.norm(dim=0, keepdim=True) + 1e-6)
            return self.scale * torch.einsum("bmd,dnp->bmnp", xn, phin)

        def weights(self, x):
            logits = self.logits(x)
            dispatch = logits.softmax(dim=1)                                   # over tokens
            flat = logits.reshape(x.shape[0], x.shape[1], -1)
            if self.expert_mask is not None:
                keep = self.expert_mask.repeat_interleave(self.p).bool()
                flat = flat.masked_fill(~keep, float("-inf"))
            combine = flat.softmax(dim=-1).reshape(logits.shape)              # over all (n, p) slots
            return dispatch, combine

        def slot_inputs(self, x):
            dispatch, _ = self.weights(x)
            return torch.einsum("bmnp,bmd->bnpd", dispatch, x)

        def forward(self, x):
            dispatch, combine = self.weights(x)
            xs = torch.einsum("bmnp,bmd->bnpd", dispatch, x)
            h = F.relu(torch.einsum("bnpd,ndh->bnph", xs, self.w1) + self.b1[:, None])
            y = torch.einsum("bnph,nhd->bnpd", h, self.w2) + self.b2[:, None]
            return torch.einsum("bmnp,bnpd->bmd", combine, y)

    class Net(nn.Module):
        def __init__(self, cols: int, arch: str, tokenization: str = "per_conv", experts: int = 4,
                     capacity: float = 1.0, width_scale: int = 1, layernorm: bool = True,
                     l2_routing: bool = False):
            super().__init__()
            c = CHANNELS
            self.enc = nn.Sequential(nn.Conv2d(2, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
            self.arch, self.tokenization = arch, tokenization
            if arch == "dense":
                hid = HIDDEN * width_scale
                self.head = nn.Sequential(nn.Linear(ROWS * cols * c, hid), nn.ReLU(), nn.Linear(hid, 3))
                return
            self.patch = nn.Conv2d(c, c, 2, stride=2) if tokenization == "per_patch" else None
            m, d = token_shape(tokenization, cols)
            self.norm = nn.LayerNorm(d) if layernorm else nn.Identity()
            self.moe = SoftMoE(d, m, experts, capacity, HIDDEN * width_scale, l2_routing)
            self.out = nn.Linear(m * d, 3)

        def tokens(self, x):
            f = self.enc(x)
            tok = self.tokenization
            if tok == "per_conv":
                t = f.flatten(2).transpose(1, 2)                # (B, h·w, c)
            elif tok == "per_feat":
                t = f.flatten(2)                                # (B, c, h·w)
            elif tok == "per_patch":
                f = F.pad(f, (0, f.shape[-1] % 2, 0, f.shape[-2] % 2))
                t = self.patch(f).flatten(2).transpose(1, 2)    # (B, patches, c)
            else:
                t = f.flatten(1)[:, None]                       # (B, 1, h·w·c)
            return self.norm(t)

        def forward(self, x):
            if self.arch == "dense":
                return self.head(self.enc(x).flatten(1))
            return self.out(self.moe(self.tokens(x)).flatten(1))

    return SoftMoE, Net


def slots_per_expert(m: int, n: int, cf: float) -> int:
    return max(1, math.ceil(m * cf / n))


def token_shape(tokenization: str, cols: int) -> tuple[int, int]:
    hw = ROWS * cols
    return {"per_conv": (hw, CHANNELS), "per_feat": (CHANNELS, hw),
            "per_patch": (math.ceil(ROWS / 2) * math.ceil(cols / 2), CHANNELS),
            "flatten": (1, hw * CHANNELS)}[tokenization]


def arch_kwargs(arch: str, experts: int = 4, width_scale: int = 4, layernorm: bool = True,
                l2_routing: bool = True) -> dict:
    if arch == "dense":
        return {"arch": "dense"}
    if arch == "dense4":
        return {"arch": "dense", "width_scale": 4}
    norm = dict(layernorm=layernorm, l2_routing=l2_routing)
    if arch == "softmoe4_per_conv":
        return dict(arch=arch, tokenization="per_conv", experts=4, **norm)
    if arch == "softmoe1_per_conv_scaled":
        return dict(arch=arch, tokenization="per_conv", experts=1, width_scale=width_scale, **norm)
    if arch == "softmoe4_flatten":
        return dict(arch=arch, tokenization="flatten", experts=4, **norm)
    if arch == "softmoe4_per_feat":
        return dict(arch=arch, tokenization="per_feat", experts=4, **norm)
    if arch == "softmoe_n_per_conv":
        return dict(arch=arch, tokenization="per_conv", experts=experts, **norm)
    raise InputError(f"unknown architecture {arch!r}")


def build(arch: str, cols: int, **kw):
    _, Net = _modules()
    return Net(cols, **arch_kwargs(arch, **kw))


def n_params(module) -> int:
    return int(sum(p.numel() for p in module.parameters()))


# ---------------------------------------------------------------- training (value regression onto Q*)
def split(cols: int, frac: float, seed: int):
    torch = _torch()
    t, b, p = all_states(cols)
    g = torch.Generator().manual_seed(1000 + seed)
    perm = torch.randperm(len(t), generator=g)
    n_tr = max(1, int(round(frac * len(t))))
    return observe(t, b, p, cols), q_star(t, b, p, cols), perm[:n_tr], perm[n_tr:]


def train_head(arch: str, cols: int, steps: int, seed: int, frac: float = 0.5, progress=None,
               eval_every: int = EVAL_EVERY, **kw):
    torch = _torch()
    F = torch.nn.functional
    seed_everything(seed)
    X, Y, tr, te = split(cols, frac, seed)
    net = build(arch, cols, **kw)
    from engine.core.nn import train_loop

    g = torch.Generator().manual_seed(seed)
    curve = {"step": [], "train_mse": [], "test_mse": [], "success": []}

    def evaluate(step):
        net.eval()
        with torch.no_grad():
            mse = float(F.mse_loss(net(X[te]), Y[te])) if len(te) else float("nan")
            curve["train_mse"].append(float(F.mse_loss(net(X[tr]), Y[tr])))
        curve["step"].append(step)
        curve["test_mse"].append(mse)
        curve["success"].append(greedy_success(net, cols))
        net.train()

    def loss_fn(_step):
        idx = tr[torch.randint(len(tr), (BATCH,), generator=g)]
        return F.mse_loss(net(X[idx]), Y[idx])

    def on_step(i, _loss):
        if (i + 1) % eval_every == 0 or i + 1 == steps:
            evaluate(i + 1)

    evaluate(0)
    train_loop(net.parameters(), loss_fn, steps, lr=LR, grad_clip=10.0, progress=progress,
               message=LABELS.get(arch, arch), on_step=on_step, report_every=eval_every)
    return net, {k: np.asarray(v, dtype=float) for k, v in curve.items()}


# ---------------------------------------------------------------- online RL (the spec's live run)
# PQN-style online Q(λ): E games in parallel, a rollout of T steps from each, λ-returns computed once per rollout
# (engine.pqn.lambda_returns), then RL_EPOCHS gradient steps on the whole rollout; no replay buffer, no target
# network. ε-greedy exploration falls linearly from 1 to 0.05 over the first half of the run. Chosen on 2026-12-06
# from a few tries at 30 000 steps (seeds 0-1): with E = 32 and T = 9 (one whole episode per rollout) the heads saw
# too few updates and stayed near chance; E = 16, T = 3 and 2 steps per rollout learned Catch with every head
# tried (greedy success 0.9-1.0 for dense, SoftMoE-4 per-conv and flattened; 0.9 and 0.2 for the scaled single
# expert at seeds 0 and 1).
RL_ENVS, RL_ROLLOUT, RL_EPOCHS, RL_LAMBDA, RL_EPS_END, RL_EPS_FRAC = 16, 3, 2, 0.9, 0.05, 0.5
RL_EVALS = 20


def rl_rollouts(env_steps: int) -> int:
    return max(1, int(env_steps) // (RL_ENVS * RL_ROLLOUT))


# Work guard for the RL run. Microseconds per environment step (one thread, 2026-12-06, 4 000-step runs of 12
# head / width / column settings, from 88 µs for the dense head at 5 columns to 2 060 µs for the 8×-wide single
# expert at 9 columns), fitted by non-negative least squares to three parts of a head's multiply-adds per
# observation, in millions: encoder and Q readout, routing (logits, dispatch, combine: 3·m·n·p·d), experts
# (n·p·2·d·h). The fit is within a factor 0.6-1.15 of that run's times on every costly setting, and 0.74-1.02 on
# four settings left out of the fit (the cheap dense heads it underestimates up to 2.5×, at under a second per
# 4 000 steps). A repeat of the same runs was up to 1.5× faster on the costliest, so the estimate errs long.
# RL_LIMIT_S leaves room for the rest of the run (about 1 s) and for a busy server inside the 30 s budget.
RL_US_PER_MMAC = (193.4, 1215.7, 869.4)
RL_LIMIT_S = 22.0


def head_cost_parts(config: Config) -> tuple[float, float, float]:
    """Millions of multiply-adds per observation of the live head: (encoder + readout, routing, experts)."""
    cols = config.columns
    kw = arch_kwargs(config.live_arch, experts=config.experts, width_scale=config.width_scale)
    enc = ROWS * cols * CHANNELS * (2 * 9 + CHANNELS * 9)
    if kw["arch"] == "dense":
        return (enc + ROWS * cols * CHANNELS * HIDDEN * kw.get("width_scale", 1)) / 1e6, 0.0, 0.0
    m, d = token_shape(kw["tokenization"], cols)
    n = kw["experts"]
    p = slots_per_expert(m, n, 1.0)
    h = HIDDEN * kw.get("width_scale", 1)
    return (enc + 3 * m * d) / 1e6, 3 * m * n * p * d / 1e6, n * p * 2 * d * h / 1e6


def rl_seconds(config: Config, env_steps: int | None = None) -> float:
    """Estimated seconds of the online RL run (0 in regression mode)."""
    if config.live_mode != "rl":
        return 0.0
    steps = config.rl_steps if env_steps is None else env_steps
    per_step_us = sum(c * x for c, x in zip(RL_US_PER_MMAC, head_cost_parts(config)))
    return rl_rollouts(steps) * RL_ENVS * RL_ROLLOUT * per_step_us / 1e6


def check_budget(config: Config) -> None:
    est = rl_seconds(config)
    if est <= RL_LIMIT_S:
        return
    fits = [k for k in range(2000, config.rl_steps, 2000) if rl_seconds(config, k) <= RL_LIMIT_S]
    hint = (f"at most {fits[-1]:,} environment steps" if fits else
            "fewer columns, a narrower single expert or another head")
    raise InputError(f"Online RL of this head ({config.rl_steps:,} environment steps, {config.columns} columns) "
                     f"would need roughly {est:.0f} s of CPU; this page allows {RL_LIMIT_S:.0f} s for the live "
                     f"run so that a busy server stays inside its 30 s budget. Use {hint} here.")


def train_head_rl(arch: str, cols: int, env_steps: int, seed: int, progress=None, evals: int = RL_EVALS, **kw):
    """Online Q(λ) on RL_ENVS parallel Catch games; returns the net and its curve against environment steps.

    The learner sees only observations and the ±1 reward at an episode's end, never Q*. A game that ends is
    restarted at once with a fresh ball and paddle column. Curve: greedy success over every start (as for the
    regression heads) and the mean reward of the last 50 training episodes (ε-greedy, so below the greedy one).
    """
    torch = _torch()
    from engine.core.nn import train_loop
    from engine.pqn import lambda_returns

    seed_everything(seed)
    g = torch.Generator().manual_seed(seed)
    net = build(arch, cols, **kw)
    E, T = RL_ENVS, RL_ROLLOUT
    rollouts = rl_rollouts(env_steps)
    steps = rollouts * RL_EPOCHS

    def fresh(n):
        return (torch.zeros(n, dtype=torch.long), torch.randint(cols, (n,), generator=g),
                torch.randint(cols, (n,), generator=g))

    games = list(fresh(E))
    batch: dict = {}
    finished: list[float] = []
    curve = {"step": [], "success": [], "train_reward": []}

    def collect(k: int) -> None:
        eps = max(RL_EPS_END, 1.0 - (1.0 - RL_EPS_END) * k / max(1.0, RL_EPS_FRAC * rollouts))
        O, A, R, D, ON = [], [], [], [], []
        with torch.no_grad():
            for _ in range(T):
                t, b, p = games
                obs = observe(t, b, p, cols)
                greedy = net(obs).argmax(1)
                explore = torch.rand(E, generator=g) < eps
                a = torch.where(explore, torch.randint(0, 3, (E,), generator=g), greedy)
                t2, b2, p2, r, done = env_step(t, b, p, a, cols)
                O.append(obs)
                A.append(a)
                R.append(r)
                D.append(done.float())
                ON.append(observe(t2, b2, p2, cols))      # row 9 exists: a finished game's last frame is valid
                finished.extend(r[done].tolist())
                nt, nb, npad = fresh(E)
                games[:] = [torch.where(done, nt, t2), torch.where(done, nb, b2), torch.where(done, npad, p2)]
            O, A, R, D, ON = map(torch.stack, (O, A, R, D, ON))
            q_next = net(ON.flatten(0, 1)).max(1).values.reshape(T, E)
            G = lambda_returns(R, D, D, q_next, GAMMA, RL_LAMBDA)   # a game's end is terminal: no bootstrap
        batch.update(O=O.flatten(0, 1), A=A.flatten(), G=G.flatten())

    def evaluate(env_step_count: int) -> None:
        curve["step"].append(env_step_count)
        curve["success"].append(greedy_success(net, cols))
        curve["train_reward"].append(float(np.mean(finished[-50:])) if finished else float("nan"))

    def loss_fn(step):
        if step % RL_EPOCHS == 0:
            collect(step // RL_EPOCHS)
        qa = net(batch["O"]).gather(1, batch["A"][:, None])[:, 0]
        return 0.5 * ((qa - batch["G"]) ** 2).mean()

    marks = {int(round(steps * (i + 1) / evals)) for i in range(evals)}

    def on_step(i, _loss):
        if i + 1 in marks:
            evaluate((i + 1) // RL_EPOCHS * E * T)

    evaluate(0)
    train_loop(net.parameters(), loss_fn, steps, lr=LR, grad_clip=10.0, progress=progress,
               message=f"{LABELS.get(arch, arch)}, online RL", on_step=on_step, report_every=RL_EPOCHS * 10)
    return net, {k: np.asarray(v, dtype=float) for k, v in curve.items()}


# ---------------------------------------------------------------- live analyses
def anatomy(cfg: Config, obs):
    """One observation through every tokenization (random, seeded weights): D, C, slot similarity."""
    torch = _torch()
    out, degeneracy = {}, {}
    for tok in TOKENIZATIONS:
        torch.manual_seed(cfg.seed)
        _, Net = _modules()
        net = Net(cfg.columns, "softmoe", tokenization=tok, experts=cfg.experts, capacity=cfg.capacity,
                  layernorm=cfg.layernorm, l2_routing=cfg.l2_routing)
        with torch.no_grad():
            x = net.tokens(obs)
            D, C = net.moe.weights(x)
            xs = net.moe.slot_inputs(x)[0].reshape(-1, x.shape[-1]).double()
        nrm = xs.norm(dim=1, keepdim=True).clamp_min(1e-12)
        cos = (xs / nrm) @ (xs / nrm).T
        dist = torch.cdist(xs, xs)
        k = xs.shape[0]
        off = ~torch.eye(k, dtype=torch.bool)
        if tok == "flatten":
            degeneracy["flatten_max_diff"] = float((xs[:, None] - xs[None]).abs().max())
        if tok == "per_conv":
            degeneracy["per_conv_min_rel_dist"] = float(dist[off].min() / nrm.mean()) if k > 1 else float("nan")
        m, d = x.shape[1], x.shape[2]
        out[tok] = {"m": m, "d": d, "p": net.moe.p, "n": net.moe.n,
                    "D": D[0].reshape(m, -1).numpy().astype(np.float32),
                    "C": C[0].reshape(m, -1).numpy().astype(np.float32),
                    "slot_cos": cos.numpy().astype(np.float32)}
    return out, degeneracy


def load_shipped(name: str = "curves.npz"):
    """Curves written by the training script (``train``; ``train-rl`` writes curves_rl.npz), or None."""
    from engine.core.nn import asset_path
    curves = asset_path(ASSET_DIR) / name
    if not curves.exists():
        return None
    z = np.load(curves, allow_pickle=False)
    return {k: z[k] for k in z.files}


EARLY_STEP = 20000   # the page quotes the shipped online-RL curves here, well before their end


def load_shipped_rl():
    """Online-RL curves written by ``train-rl``, or None."""
    return load_shipped("curves_rl.npz")


def shipped_moe4_paths(rl: bool = False) -> list:
    """The shipped SoftMoE-4 per-conv weights, one per seed: regression-trained, or with ``rl`` trained online."""
    from engine.core.nn import asset_path
    pattern = "softmoe4_per_conv_rl_seed*.pt" if rl else "softmoe4_per_conv_seed*.pt"
    return sorted(asset_path(ASSET_DIR).glob(pattern))


def masking_analysis(cfg: Config, rl: bool = False):
    """Prune each single expert of each shipped SoftMoE-4 (per-conv, one per training seed) after training, without
    retraining, and re-evaluate it. This test is the spec's, not the paper's: as we read the paper (and its public code
    in google/dopamine, labs/moes), it never prunes experts of a trained agent. Its evidence that experts are redundant / unspecialised comes from networks trained from scratch
    with the experts' role changed, compared on final aggregate performance (§4.2 "Expert specialization": slots per
    expert raised to the number of tokens; number of experts 1/2/4/8; §5 and Fig. 1: one scaled expert matching
    SoftMoE-4). The paper-faithful counterpart we can compute at no cost is ``paper_single_expert_success_drop``
    in ``run`` (shipped curves of the scaled SoftMoE-1 vs SoftMoE-4).

    Pruning = removing the expert's slots: their combine logits are set to −∞, so every token's combine weights are
    renormalised over the remaining slots, while dispatch (a softmax over tokens, per slot) of the kept slots is
    unchanged — exactly a SoftMoE with that expert deleted (checked against a hand-built pruned layer in the tests).
    Greedy success is exact: every (ball column, paddle start) pair is played once, deterministically. Alongside it,
    a continuous view that does not depend on argmax ties: Q-error to Q* over all states, and how far the SoftMoE
    output tokens move when the expert is removed (relative to their norm)."""
    from engine.core.nn import load_state
    paths = shipped_moe4_paths(rl)
    if not paths:
        return None
    torch = _torch()
    t, b, p = all_states(SHIPPED_COLS)
    obs = observe(t, b, p, SHIPPED_COLS)
    qstar = q_star(t, b, p, SHIPPED_COLS)
    base, masked, mass, mse_base, mse_masked, out_change, cancel, expert_cos = [], [], [], [], [], [], [], []
    for path in paths:
        net = build("softmoe4_per_conv", SHIPPED_COLS)
        net.load_state_dict(load_state(path)["state"])
        net.eval()
        moe = net.moe
        with torch.no_grad():
            x = net.tokens(obs)
            D, C = moe.weights(x)
            mass.append((C.sum(dim=(1, 3)).mean(0) / C.shape[1]).numpy())     # mean combine mass per expert
            out = moe(x)
            # how much the experts' slot outputs cancel in the mixture: output-token norm / slot-output norm
            xs = torch.einsum("bmnp,bmd->bnpd", D, x)
            hid = torch.relu(torch.einsum("bnpd,ndh->bnph", xs, moe.w1) + moe.b1[:, None])
            y = torch.einsum("bnph,nhd->bnpd", hid, moe.w2) + moe.b2[:, None]
            cancel.append(float(out.norm(dim=-1).mean() / y.norm(dim=-1).mean()))
            ey = y.mean(2)                                                    # (B, n, d) mean slot output per expert
            cs = torch.nn.functional.cosine_similarity(ey[:, :, None], ey[:, None], dim=-1).mean(0)
            expert_cos.append(float(cs[~torch.eye(moe.n, dtype=torch.bool)].mean()))
            mse_base.append(float(((net.out(out.flatten(1)) - qstar) ** 2).mean()))
        base.append(greedy_success(net, SHIPPED_COLS))
        row, mrow, crow = [], [], []
        for j in range(moe.n):
            mask = torch.ones(moe.n)
            mask[j] = 0
            moe.expert_mask = mask
            row.append(greedy_success(net, SHIPPED_COLS))
            with torch.no_grad():
                o_pruned = moe(x)
                mrow.append(float(((net.out(o_pruned.flatten(1)) - qstar) ** 2).mean()))
                crow.append(float((o_pruned - out).norm() / out.norm()))
        moe.expert_mask = None
        masked.append(row)
        mse_masked.append(mrow)
        out_change.append(crow)
    base, masked = np.asarray(base), np.asarray(masked)
    return {"base": base, "masked": masked, "mass": np.asarray(mass),
            "drop": base[:, None] - masked,                                    # (seeds, experts)
            "worst_drop": base - masked.min(1),
            "mse_base": np.asarray(mse_base), "mse_masked": np.asarray(mse_masked),
            "out_change": np.asarray(out_change), "cancel": np.asarray(cancel),
            "expert_cos": np.asarray(expert_cos),
            "mse_zero": float((qstar ** 2).mean())}                            # Q-error of predicting 0 everywhere


def final_stats(shipped: dict, key: str = "test_mse") -> dict:
    """Mean over seeds of the last 10 % of each curve."""
    steps = shipped["step"]
    last = steps >= 0.9 * steps[-1]
    return {a: float(shipped[f"{a}_{key}"][:, last].mean()) for a in ARCHS if f"{a}_{key}" in shipped}


# ---------------------------------------------------------------- run / claims
def run(config: Config, progress=None) -> Result:
    from engine.core.nn import set_cpu_threads
    set_cpu_threads()
    torch = _torch()
    seed_everything(config.seed)
    if config.capacity <= 0:
        raise InputError("capacity factor must be positive")
    check_budget(config)
    cols = config.columns
    g = torch.Generator().manual_seed(config.seed)
    bc, pc = torch.randint(cols, (2,), generator=g)
    obs = observe(torch.tensor([4]), bc.view(1), pc.view(1), cols)
    report(progress, 0.02, "tokenizing one observation")
    anat, degen = anatomy(config, obs)

    counts = {a: n_params(build(a, SHIPPED_COLS)) for a in ARCHS}
    shipped = load_shipped()
    masking = masking_analysis(config)
    shipped_rl = load_shipped_rl()
    masking_rl = masking_analysis(config, rl=True)
    report(progress, 0.1, "training live")
    head = dict(experts=config.experts, width_scale=config.width_scale, layernorm=config.layernorm,
                l2_routing=config.l2_routing)
    if config.live_mode == "rl":
        net, curve = train_head_rl(config.live_arch, cols, config.rl_steps, config.seed,
                                   progress=ProgressSpan(progress, 0.1, 1.0), **head)
    else:
        net, curve = train_head(config.live_arch, cols, config.live_steps, config.seed, config.train_frac,
                                progress=ProgressSpan(progress, 0.1, 1.0), **head)
    live = {"arch": config.live_arch, "params": n_params(net), "mode": config.live_mode, **curve}

    metrics = dict(degen)
    if shipped is not None:
        fin = final_stats(shipped)
        suc = final_stats(shipped, "success")
        metrics.update({f"final_mse_{a}": v for a, v in fin.items()})
        metrics.update({f"final_success_{a}": v for a, v in suc.items()})
        base, moe4, moe1 = fin["dense"], fin["softmoe4_per_conv"], fin["softmoe1_per_conv_scaled"]
        gain = base - moe4
        metrics["moe4_gain_rel"] = gain / base
        metrics["moe1_gain_fraction"] = (base - moe1) / gain if gain > 1e-3 else float("-inf")
        # paper-faithful redundancy measure (shown next to the spec's pruning badge, not a badge): the paper infers
        # redundant experts from a single scaled expert trained from scratch matching the multi-expert SoftMoE at
        # the end of training; here in greedy success (last 10 % of the shipped curves, mean over seeds)
        metrics["paper_single_expert_success_drop"] = (suc["softmoe4_per_conv"]
                                                       - suc["softmoe1_per_conv_scaled"])
    for prefix, mk in (("mask_", masking), ("rl_mask_", masking_rl)):
        if mk is not None:
            metrics[prefix + "base_success"] = float(mk["base"].mean())
            metrics[prefix + "mean_drop"] = float(mk["drop"].mean())
            metrics[prefix + "worst_drop"] = float(mk["worst_drop"].mean())
            # drop when one of the other experts (not a seed's costliest) is pruned, mean over seeds and those experts
            n_exp = mk["masked"].shape[1]
            metrics[prefix + "other_drop"] = float((n_exp * mk["drop"].mean() - mk["worst_drop"].mean()) / (n_exp - 1))
            metrics[prefix + "mse_base"] = float(mk["mse_base"].mean())
            metrics[prefix + "mse_pruned"] = float(mk["mse_masked"].mean())
            metrics[prefix + "out_change"] = float(mk["out_change"].mean())
            metrics[prefix + "mse_zero"] = mk["mse_zero"]
            metrics[prefix + "cancel"] = float(mk["cancel"].mean())
            metrics[prefix + "expert_cos"] = float(mk["expert_cos"].mean())
            metrics[prefix + "mass_min"] = float(mk["mass"].min())
            metrics[prefix + "mass_max"] = float(mk["mass"].max())
    if shipped_rl is not None:
        # return of a greedy game is +1 or -1, so the mean greedy return is 2 * success - 1
        suc_rl = final_stats(shipped_rl, "success")
        metrics.update({f"rl_final_success_{a}": v for a, v in suc_rl.items()})
        metrics.update({f"rl_final_return_{a}": 2 * v - 1 for a, v in suc_rl.items()})
        r4, r1 = 2 * suc_rl["softmoe4_per_conv"] - 1, 2 * suc_rl["softmoe1_per_conv_scaled"] - 1
        metrics["rl_single_expert_return_gap"] = r4 - r1
        metrics["rl_tokenised_min_return"] = min(r4, r1)
        # the curves part-way through (the evaluation closest to EARLY_STEP), mean over seeds
        k = int(np.argmin(np.abs(shipped_rl["step"] - EARLY_STEP)))
        metrics["rl_early_step"] = float(shipped_rl["step"][k])
        metrics.update({f"rl_early_success_{a}": float(shipped_rl[f"{a}_success"][:, k].mean())
                        for a in ARCHS})
    if config.live_mode == "regression":
        metrics["live_final_mse"] = float(curve["test_mse"][-1])
    metrics["live_final_success"] = float(curve["success"][-1])
    report(progress, 1.0, "done")
    return Result(anatomy=anat, degeneracy=degen, obs_image=obs[0].numpy(), param_counts=counts,
                  shipped=shipped, masking=masking, live=live, metrics=metrics, shipped_rl=shipped_rl,
                  masking_rl=masking_rl)


PRUNE_BAR = 0.15   # the spec's largest drop in greedy success when one expert is pruned


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    out = [
        Claim("With one flattened token every slot receives the same input (the mixture degenerates)",
              measured=m["flatten_max_diff"], op="<=", threshold=1e-6, label="max |x̃ᵢ − x̃ⱼ| (flatten)",
              detail="all dispatch weights are 1 because the softmax runs over a single token"),
        Claim("With per-conv tokens the slots receive distinct inputs",
              measured=m["per_conv_min_rel_dist"], op=">=", threshold=1e-3,
              label="min ‖x̃ᵢ − x̃ⱼ‖ / mean ‖x̃‖ (per-conv)"),
    ]
    if "moe4_gain_rel" in m:
        out.append(Claim("Regression proxy (fitting Q*): tokenised SoftMoE-4 beats the flattened dense head on held-out "
                         "states (shipped seeds)",
                         measured=m["moe4_gain_rel"], op=">=", threshold=0.1,
                         label="relative held-out MSE reduction vs dense",
                         detail=f"MSE dense {m['final_mse_dense']:.3f}, SoftMoE-4 {m['final_mse_softmoe4_per_conv']:.3f}"))
        out.append(Claim("Regression proxy: a single scaled expert over the same tokens keeps most of that gain "
                         "(shipped seeds)",
                         measured=m["moe1_gain_fraction"], op=">=", threshold=0.5,
                         label="(MSE dense − MSE SoftMoE-1) / (MSE dense − MSE SoftMoE-4)",
                         detail=f"SoftMoE-1 MSE {m['final_mse_softmoe1_per_conv_scaled']:.3f}; "
                                "−inf when SoftMoE-4 has no gain to keep"))
    if "rl_single_expert_return_gap" in m:
        # the spec's claim 2, on the online-RL curves (returns in [-1, 1]; last 10 % of 100 000 steps, 5 seeds)
        out.append(Claim("In online RL, one scaled expert over per-conv tokens does about as well as SoftMoE-4 "
                         "(shipped RL curves)",
                         measured=m["rl_single_expert_return_gap"], op="<=", threshold=0.15,
                         label="final greedy return SoftMoE-4 − SoftMoE-1 ×4 wide",
                         detail=f"returns SoftMoE-4 {m['rl_final_return_softmoe4_per_conv']:.2f}, SoftMoE-1 "
                                f"{m['rl_final_return_softmoe1_per_conv_scaled']:.2f}, dense "
                                f"{m['rl_final_return_dense']:.2f} (last 10 %, all seeds)"))
        out.append(Claim("Both tokenised heads learn the game by online RL (shipped RL curves)",
                         measured=m["rl_tokenised_min_return"], op=">=", threshold=-0.2,
                         label="lower final greedy return of SoftMoE-4 and SoftMoE-1 ×4 wide",
                         detail="a return of −1 misses every ball; −0.6 is the return of standing still"))
    prefix = "rl_mask_" if "rl_mask_mean_drop" in m else "mask_" if "mask_mean_drop" in m else None
    if prefix:
        # The spec's test, not the paper's: the paper never prunes experts of a trained agent (see
        # masking_analysis; its own measure, a scaled single expert vs SoftMoE-4 trained from scratch, is the RL
        # claim above and metrics["paper_single_expert_success_drop"] on the regression curves). Measured on the
        # spec's weights, SoftMoE-4 trained by online RL (train-rl), when they are shipped; the regression-trained
        # weights (the proxy) are the fallback and are shown on the page either way. The measured value is the spec's
        # "worst case over experts" with several seeds: the costliest expert of each seed, averaged over the seeds. Until 2026-12-06 the badge took the drop averaged over seeds and experts, a softer reading than
        # the spec's (RL weights: 0.11, passes; worst case 0.31, fails); that mean stays in the detail. On the
        # regression weights both fail (0.34 and 0.54). Threshold 0.15 (catch rate, i.e. 0.3 in return) is the spec's.
        which = "RL-trained" if prefix == "rl_mask_" else "regression-trained"
        other = (f"; on the regression-trained weights the worst case is {m['mask_worst_drop']:.2f}"
                 if prefix == "rl_mask_" and "mask_worst_drop" in m else "")
        out.append(Claim("Experts are redundant: pruning even the most important expert of a trained SoftMoE-4 barely "
                         "changes greedy success",
                         measured=m[prefix + "worst_drop"], op="<=", threshold=PRUNE_BAR,
                         label=f"drop in greedy success when the costliest expert is pruned (shipped {which} "
                               "SoftMoE-4, mean over seeds)",
                         detail=f"unpruned success {m[prefix + 'base_success']:.2f}; pruning one expert costs "
                                f"{m[prefix + 'mean_drop']:.2f} on average over seeds × experts; Q-error to Q* "
                                f"{m[prefix + 'mse_base']:.2f} → {m[prefix + 'mse_pruned']:.2f}{other}"))
    return out


# ---------------------------------------------------------------- training script
def train_script(seeds: int = TRAIN_SEEDS, steps: int = TRAIN_STEPS, archs=ARCHS, merge: bool = False) -> None:
    """Train ``archs`` at every seed and write their curves; with ``merge`` the other architectures' curves already
    in curves.npz are kept (``python -m engine.softmoe_tokenization train-add dense4,softmoe4_per_feat``)."""
    from engine.core.nn import asset_path, save_state, set_cpu_threads
    set_cpu_threads()
    out_dir = asset_path(ASSET_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    data: dict[str, np.ndarray] = {}
    if merge:
        with np.load(out_dir / "curves.npz") as old:
            data.update({k: old[k] for k in old.files})
    t0 = time.time()
    for arch in archs:
        mses, sucs, trs = [], [], []
        for s in range(seeds):
            net, curve = train_head(arch, SHIPPED_COLS, steps, s, 0.5)
            mses.append(curve["test_mse"])
            trs.append(curve["train_mse"])
            sucs.append(curve["success"])
            data["step"] = curve["step"]
            if arch == "softmoe4_per_conv":
                save_state(net, out_dir / f"softmoe4_per_conv_seed{s}.pt",
                           extra={"cols": SHIPPED_COLS, "steps": steps, "seed": s})
            print(f"{arch} seed {s}: mse {curve['test_mse'][-1]:.3f} success {curve['success'][-1]:.2f} "
                  f"({time.time() - t0:.0f}s)", flush=True)
        data[f"{arch}_test_mse"] = np.stack(mses)
        data[f"{arch}_train_mse"] = np.stack(trs)
        data[f"{arch}_success"] = np.stack(sucs)
    np.savez_compressed(out_dir / "curves.npz", **data)


RL_TRAIN_STEPS = 100_000     # the spec's shipped-curve length
RL_TRAIN_EVALS = 50          # a curve point every 2 000 game steps


def train_rl_script(seeds: int = TRAIN_SEEDS, steps: int = RL_TRAIN_STEPS, archs=ARCHS) -> None:
    """Online RL (``train_head_rl``) of ``archs`` at every seed on the shipped 5-column game: greedy-success and
    training-reward curves into curves_rl.npz, the SoftMoE-4 per-conv weights into softmoe4_per_conv_rl_seed*.pt
    (``python -m engine.softmoe_tokenization train-rl``; about 10 minutes on one core)."""
    from engine.core.nn import asset_path, save_state, set_cpu_threads
    set_cpu_threads()
    out_dir = asset_path(ASSET_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    data: dict[str, np.ndarray] = {}
    t0 = time.time()
    for arch in archs:
        sucs, rews = [], []
        for s in range(seeds):
            net, curve = train_head_rl(arch, SHIPPED_COLS, steps, s, evals=RL_TRAIN_EVALS)
            sucs.append(curve["success"])
            rews.append(curve["train_reward"])
            data["step"] = curve["step"]
            if arch == "softmoe4_per_conv":
                save_state(net, out_dir / f"softmoe4_per_conv_rl_seed{s}.pt",
                           extra={"cols": SHIPPED_COLS, "steps": steps, "seed": s, "training": "online RL"})
            print(f"{arch} seed {s}: success {curve['success'][-1]:.2f} ({time.time() - t0:.0f}s)", flush=True)
        data[f"{arch}_success"] = np.stack(sucs)
        data[f"{arch}_train_reward"] = np.stack(rews)
    np.savez_compressed(out_dir / "curves_rl.npz", **data)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "train-rl":
        train_rl_script(steps=int(sys.argv[2]) if len(sys.argv) > 2 else RL_TRAIN_STEPS)
    elif len(sys.argv) > 1 and sys.argv[1] == "train":
        train_script(steps=int(sys.argv[2]) if len(sys.argv) > 2 else TRAIN_STEPS)
    elif len(sys.argv) > 2 and sys.argv[1] == "train-add":
        train_script(archs=tuple(sys.argv[2].split(",")), merge=True)
    else:
        print(asdict(Config()))
