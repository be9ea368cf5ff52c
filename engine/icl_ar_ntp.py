"""ICL emerges from generalization under auto-regressive next-token prediction (ICLR 2025, arXiv 2502.17024).

Topics are linear dynamical systems ``x_{t+1} = W_k x_t + sigma xi_t`` with ``W_k = rho * O_k`` (``O_k``
Haar-orthogonal), so every topic's stationary covariance is the identity. A small causal transformer is
pre-trained by next-token prediction on ``K`` topics x ``N`` sequences each and then asked to continue
sequences from topics it never saw: any skill it shows there is in-context learning. The engine compares
it with closed-form references (oracle, zero predictor, in-context ridge, Bayes mixture over the training
topics) and measures how unseen-topic error and the generalization gap change with ``K``. It also
evaluates a numeric two-level PAC-Bayesian bound on the gap for each trained model (``pac_bayes_bound``).

``python -m engine.icl_ar_ntp train`` trains the shipped compute-matched grid into ``assets/icl-ar-ntp/``
(``train-fixed-n``: the second, fixed-N grid the page can draw beside it);
``run`` loads it (default) or trains one small model live. Pure compute, no streamlit.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from engine.core import Bool, Choice, Claim, Float, InputError, Int, param, report, seed_everything

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

SLUG = "icl-ar-ntp"
D = 4                      # state dimension
RHO = 0.9                  # spectral radius of every topic matrix
T_SHIP = 24                # sequence length of the shipped grid (the spec's; 16 before 2026-12-06)
WIDTH, LAYERS, HEADS = 32, 2, 2
GRID_K = (1, 2, 4, 8, 16, 32, 64, 128, 256)   # the spec's nine values (32 and 128 added 2026-12-06)
TOTAL_SEQ = 4096           # compute-matched budget K * N of the shipped grid (the spec's; 2048 before 2026-12-06)
FIXED_N = 32               # the second shipped grid: N sequences per topic at every K (K * N grows with K)
SHIP_STEPS = 1000
# the spec's seeds 0-2; seed 2 was added on 2026-12-05 (same recipe, `train 2` and `train-fixed-n 2`): every badge kept
# its verdict (e.g. e_unseen(K=64) / e_unseen(K=2) 0.243 with two seeds, 0.236 with three)
SHIP_SEEDS = (0, 1, 2)
BATCH = 64
LR, WD = 2e-3, 0.01
RIDGE_ALPHA = 0.1
N_TEST = 256               # test sequences, for unseen and for seen topics each
EVAL_SEED_OFFSET = 10_000  # test topics/sequences come from a stream no training run uses

# claim bars
TOPIC_RATIO_BAR = 0.6      # e_unseen(K=64) <= 0.6 * e_unseen(K=2)
TOPIC_ABS_BAR = 0.5        # and e_unseen(K=64) <= 0.5 (zero predictor = 1)
SPEARMAN_BAR = -0.8
GAP_RATIO_BAR = 0.3        # gap(256) <= 0.3 * gap(2)
PROMPT_RATIO_BAR = 0.7     # e(t=T-1) <= 0.7 * e(t=2) at K=64
RIDGE_CLOSE_BAR = 0.1      # last-5 mean within 0.1 of the ridge predictor's


# ----------------------------------------------------------------------------------------------
# Data: topics and sequences
# ----------------------------------------------------------------------------------------------

def haar_orthogonal(rng: np.random.Generator, n: int, d: int = D) -> np.ndarray:
    """``n`` Haar-distributed d x d orthogonal matrices (QR of a Gaussian with the sign fix)."""
    g = rng.standard_normal((n, d, d))
    q, r = np.linalg.qr(g)
    signs = np.sign(np.diagonal(r, axis1=1, axis2=2))
    signs[signs == 0] = 1.0
    return q * signs[:, None, :]


def make_topics(rng: np.random.Generator, k: int, rho: float = RHO) -> np.ndarray:
    return rho * haar_orthogonal(rng, k)


def noise_var(rho: float) -> float:
    """Innovation variance that makes the stationary covariance exactly I (W = rho * orthogonal)."""
    return 1.0 - rho ** 2


def simulate(rng: np.random.Generator, W: np.ndarray, topic_idx: np.ndarray, T: int, rho: float = RHO) -> np.ndarray:
    """Sequences ``(n, T, D)``; sequence i follows topic ``topic_idx[i]`` from a stationary start."""
    sigma = math.sqrt(noise_var(rho))
    n = len(topic_idx)
    x = np.empty((n, T, D))
    x[:, 0] = rng.standard_normal((n, D))
    Wi = W[topic_idx]
    for t in range(T - 1):
        x[:, t + 1] = np.einsum("nij,nj->ni", Wi, x[:, t]) + sigma * rng.standard_normal((n, D))
    return x


# ----------------------------------------------------------------------------------------------
# Closed-form reference predictors (prediction of x_{t+1} from x_{1..t}, for t = 1..T-1)
# ----------------------------------------------------------------------------------------------

def ridge_predictions(x: np.ndarray, alpha: float = RIDGE_ALPHA) -> np.ndarray:
    """In-context ridge: W_t = (sum_{i<t} x_{i+1} x_i^T)(sum_{i<t} x_i x_i^T + alpha I)^-1, predict W_t x_t.

    Returns ``(n, T-1, D)``; entry ``[:, t-1]`` predicts ``x[:, t]`` from the first ``t`` tokens.
    """
    n, T, d = x.shape
    out = np.zeros((n, T - 1, d))
    A = np.zeros((n, d, d))                 # sum x_{i+1} x_i^T
    B = np.broadcast_to(alpha * np.eye(d), (n, d, d)).copy()   # sum x_i x_i^T + alpha I
    for t in range(T - 1):                  # prompt x[:, :t+1]; pairs (x_i, x_{i+1}) with i+1 <= t
        if t > 0:
            A += np.einsum("ni,nj->nij", x[:, t], x[:, t - 1])
            B += np.einsum("ni,nj->nij", x[:, t - 1], x[:, t - 1])
        Wt = np.linalg.solve(np.transpose(B, (0, 2, 1)), np.transpose(A, (0, 2, 1)))
        out[:, t] = np.einsum("nj,nji->ni", x[:, t], Wt)   # (Wt^T)^T x = Wt x
    return out


def mixture_predictions(x: np.ndarray, W: np.ndarray, rho: float = RHO) -> tuple[np.ndarray, np.ndarray]:
    """Bayes posterior over the K training topics, prediction sum_k p(k|x_{1:t}) W_k x_t.

    Returns predictions ``(n, T-1, D)`` and posteriors ``(n, T-1, K)``.
    """
    s2 = noise_var(rho)
    n, T, d = x.shape
    pred_all = np.einsum("kij,ntj->ntki", W, x)            # (n, T, K, d): W_k x_t
    loglik = np.zeros((n, len(W)))
    preds = np.zeros((n, T - 1, d))
    posts = np.zeros((n, T - 1, len(W)))
    for t in range(T - 1):
        if t > 0:
            r = x[:, t][:, None, :] - pred_all[:, t - 1]
            loglik -= 0.5 * (r ** 2).sum(-1) / s2
        z = loglik - loglik.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        posts[:, t] = p
        preds[:, t] = np.einsum("nk,nki->ni", p, pred_all[:, t])
    return preds, posts


def oracle_predictions(x: np.ndarray, W_seq: np.ndarray) -> np.ndarray:
    return np.einsum("nij,ntj->nti", W_seq, x[:, :-1])


def per_position_mse(pred: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per-dimension squared error of predicting x[:, t] (t = 1..T-1), averaged over sequences."""
    return ((pred - x[:, 1:]) ** 2).mean(axis=(0, 2))


# ----------------------------------------------------------------------------------------------
# Model: a small causal transformer on continuous tokens
# ----------------------------------------------------------------------------------------------

def build_model(T: int, width: int = WIDTH, layers: int = LAYERS, heads: int = HEADS):
    import torch
    from torch import nn

    class CausalLDS(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(2 * D, width)   # token x_t embedded together with its predecessor x_{t-1}
            self.pos = nn.Parameter(torch.randn(T, width) * 0.02)
            self.blocks = nn.ModuleList([
                nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True) for _ in range(layers)])
            self.ln = nn.LayerNorm(width)
            self.out = nn.Linear(width, D)
            self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1), persistent=False)

        def forward(self, x):
            t = x.shape[1]
            prev = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)   # x_0 := 0 (nothing before x_1)
            h = self.inp(torch.cat([x, prev], -1)) + self.pos[:t]
            for blk in self.blocks:
                h = blk(h, src_mask=self.mask[:t, :t])
            return self.out(self.ln(h))

    return CausalLDS()


def model_predictions(model, x: np.ndarray, device=None) -> np.ndarray:
    """Transformer prediction of x[:, t] from x[:, :t] for t = 1..T-1 (one causal pass)."""
    import torch

    model.eval()
    device = device if device is not None else next(model.parameters()).device
    with torch.no_grad():
        xt = torch.as_tensor(x[:, :-1], dtype=torch.float32, device=device)
        return model(xt).double().cpu().numpy()


def run_seed(K: int, seed: int) -> int:
    """The one integer that seeds a training run: its data (numpy) and its initial weights (torch)."""
    return seed * 1_000 + K


def training_set(K: int, N: int, T: int, seed: int, rho: float = RHO) -> tuple[np.ndarray, np.ndarray]:
    """The pre-training set D of a run: K topic matrices and K x N sequences (regenerated exactly)."""
    rng = np.random.default_rng(run_seed(K, seed))
    W = make_topics(rng, K, rho)
    return W, simulate(rng, W, np.repeat(np.arange(K), N), T, rho)


def initial_model(K: int, T: int, seed: int):
    """The weights a run starts from (drawn before any data is seen): the centre of the PAC-Bayes prior."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(run_seed(K, seed))
        return build_model(T)


def train_model(K: int, N: int, T: int, steps: int, seed: int, rho: float = RHO, progress=None,
                message: str = "training", lo: float = 0.0, hi: float = 1.0):
    """Pre-train on a fixed set D of K topics x N sequences; returns (model, W_train, loss history, train mse)."""
    import torch

    from engine.core import get_device
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    seed_everything(run_seed(K, seed), torch_too=True)
    device = get_device()
    W, x = training_set(K, N, T, seed, rho)
    data = torch.as_tensor(x, dtype=torch.float32, device=device)
    model = build_model(T).to(device)    # same torch seed as initial_model(K, T, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps))
    g = torch.Generator().manual_seed(seed)
    hist = np.zeros(steps)
    model.train()
    for s in range(steps):
        b = torch.randint(0, len(data), (min(BATCH, len(data)),), generator=g).to(device)
        xb = data[b]
        loss = ((model(xb[:, :-1]) - xb[:, 1:]) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        hist[s] = float(loss.detach())
        if s % 25 == 0 or s == steps - 1:
            report(progress, lo + (hi - lo) * (s + 1) / steps, f"{message}: step {s + 1}/{steps}, loss {hist[s]:.3f}")
    train_mse = float(per_position_mse(model_predictions(model, data.cpu().numpy().astype(np.float64), device),
                                       data.cpu().numpy().astype(np.float64)).mean())
    return model, W, hist, train_mse


# ----------------------------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------------------------

def checkpoint_path(K: int, seed: int, N: int | None = None):
    """The compute-matched grid's file (N = TOTAL_SEQ // K), or the fixed-N grid's; where both grids have the same
    N (K = TOTAL_SEQ // FIXED_N = 128) they share one model."""
    from engine.core.nn import asset_path

    if N is None or N == TOTAL_SEQ // K:
        return asset_path(f"{SLUG}/K{K:03d}_seed{seed}.pt")
    return asset_path(f"{SLUG}/K{K:03d}_N{N}_seed{seed}.pt")


def _save(model, W, hist, train_mse, K, seed, N: int | None = None):
    import torch

    from engine.core.nn import save_state

    N = TOTAL_SEQ // K if N is None else N
    model = model.cpu().half()
    # keep only a thinned loss curve (every 10th step) to stay small
    save_state(model, checkpoint_path(K, seed, N), extra={
        "K": K, "N": N, "T": T_SHIP, "seed": seed, "steps": SHIP_STEPS,
        "W": torch.as_tensor(W, dtype=torch.float64), "train_mse": float(train_mse),
        "loss": torch.as_tensor(hist[::10], dtype=torch.float32)})


def load_shipped(K: int, seed: int, N: int | None = None):
    import torch

    from engine.core.nn import load_state

    path = checkpoint_path(K, seed, N)
    if not path.exists():
        raise InputError(f"checkpoint {path.name} is missing; run `python -m engine.icl_ar_ntp train` (and "
                         "`train-fixed-n` for the fixed-N grid)")
    blob = load_state(path)
    model = build_model(blob["extra"]["T"])
    model.load_state_dict({k: v.float() for k, v in blob["state"].items()})
    ex = blob["extra"]
    return model.to(torch.float32), ex["W"].numpy(), ex["loss"].numpy().astype(np.float64), float(ex["train_mse"])


def train_and_save(seeds=SHIP_SEEDS, ks=GRID_K, fixed_n: bool = False) -> None:
    """The compute-matched grid, or (``fixed_n``) the fixed-N grid's models that it does not share with it."""
    for seed in seeds:
        for K in ks:
            N = FIXED_N if fixed_n else TOTAL_SEQ // K
            if fixed_n and N == TOTAL_SEQ // K:
                continue
            t0 = time.time()
            model, W, hist, tr = train_model(K, N, T_SHIP, SHIP_STEPS, seed)
            _save(model, W, hist, tr, K, seed, N)
            print(f"seed {seed} K {K:3d} N {N}: train mse {tr:.3f}, {time.time() - t0:.0f}s", flush=True)


# ----------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------

def test_sets(W_train: np.ndarray, T: int, seed: int, rho: float = RHO):
    """Unseen topics (fresh W per sequence) and seen topics (fresh sequences of the training topics)."""
    rng = np.random.default_rng(EVAL_SEED_OFFSET + seed)
    W_new = make_topics(rng, N_TEST, rho)
    x_unseen = simulate(rng, W_new, np.arange(N_TEST), T, rho)
    idx_seen = rng.integers(0, len(W_train), N_TEST)
    x_seen = simulate(rng, W_train, idx_seen, T, rho)
    return x_unseen, W_new, x_seen, W_train[idx_seen], idx_seen


def evaluate(model, W_train: np.ndarray, T: int, seed: int, rho: float = RHO, ridge_cache: dict | None = None) -> dict:
    xu, Wu, xs, Ws, idx_seen = test_sets(W_train, T, seed, rho)
    pu, ps = model_predictions(model, xu), model_predictions(model, xs)
    # the unseen set depends only on (seed, T, rho), so its ridge predictions can be shared across K
    key = (seed, T, rho)
    if ridge_cache is not None and key in ridge_cache:
        ridge_u = ridge_cache[key]
    else:
        ridge_u = ridge_predictions(xu)
        if ridge_cache is not None:
            ridge_cache[key] = ridge_u
    mix_u, _ = mixture_predictions(xu, W_train, rho)
    return {
        "unseen": per_position_mse(pu, xu),
        "seen": per_position_mse(ps, xs),
        "ridge": per_position_mse(ridge_u, xu),
        "mixture": per_position_mse(mix_u, xu),
        "oracle": per_position_mse(oracle_predictions(xu, Wu), xu),
        "zero": per_position_mse(np.zeros_like(pu), xu),
        "dist_ridge": float(((pu - ridge_u) ** 2).mean()),
        "dist_mixture": float(((pu - mix_u) ** 2).mean()),
    }


# ----------------------------------------------------------------------------------------------
# A numeric two-level PAC-Bayesian bound (topics, then sequences within topics)
# ----------------------------------------------------------------------------------------------
# Loss of a weight vector w on one sequence x: l(w, x) = min(C, mean_t ||f_w(x_{1:t}) - x_{t+1}||^2 / d).
# Prior P = N(w0, s_p^2 I) around the initial weights w0 (drawn before any data); posterior
# Q = N(w_hat, s^2 I) around the trained weights. The K topics are i.i.d. and, given the topics, the K*N
# sequences are independent. For every (s, s_p, lambda) on the grids, with probability >= 1 - delta:
#   sequence level: Rbar(Q) - Rhat(Q) <= (KL + ln(|grids| / delta_1)) / lambda + lambda C^2 / (8 K N)
#   topic level:    R(Q)    - Rbar(Q) <= (KL + ln(|grids| / delta_2)) / lambda + lambda C^2 / (8 K)
# (Donsker-Varadhan plus Hoeffding's lemma for independent terms in [0, C]). Rhat: training sequences,
# Rbar: fresh sequences of the training topics, R: fresh topics; |grids| = |s grid| |s_p grid| |lambda grid|,
# delta_1 = delta_2 = delta / 2. The union bound lets s, s_p and lambda be picked after seeing the data.

CLIP = 4.0                 # loss clipped at C = 4 (the zero predictor scores 1), so the bound applies
BOUND_DELTA = 0.05         # total failure probability, half for each level
SIGMA_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)   # posterior and prior stds, declared in advance
LAMBDA_GRID = 2.0 ** np.arange(0, 41)
SHARP_TOL = 0.10           # scan s upward; keep the last one whose noisy weights raise the training loss <= 10 %
SCAN_DRAWS, SCAN_BATCH = 1, 32      # posterior draws x training sequences per grid value in the s scan
MC_DRAWS, MC_BATCH = 4, 32          # posterior draws x sequences for the measured gap of the posterior


def gaussian_kl(mu_q: np.ndarray, s_q: float, mu_p: np.ndarray, s_p: float) -> float:
    """KL( N(mu_q, s_q^2 I) || N(mu_p, s_p^2 I) ) in nats, closed form."""
    n = mu_q.size
    d2 = float(np.sum((np.asarray(mu_q, float) - np.asarray(mu_p, float)) ** 2))
    return float(n * (math.log(s_p / s_q) + s_q ** 2 / (2 * s_p ** 2) - 0.5) + d2 / (2 * s_p ** 2))


def pac_bayes_term(kl: float, n: int, delta: float, clip: float = CLIP, n_other: int = 1) -> tuple[float, float]:
    """min over the lambda grid of (KL + ln(n_other |grid| / delta)) / lambda + lambda clip^2 / (8 n).

    n_other: size of the other grids covered by the same union bound. Returns (term, lambda used).
    """
    lam = LAMBDA_GRID
    vals = (kl + math.log(n_other * len(lam) / delta)) / lam + lam * clip ** 2 / (8 * n)
    i = int(np.argmin(vals))
    return float(vals[i]), float(lam[i])


def sequence_losses(model, x: np.ndarray, clip: float = CLIP) -> np.ndarray:
    """Per-sequence clipped loss l(w, x) of the model's current weights (one value per sequence)."""
    pred = model_predictions(model, x)
    return np.minimum(((pred - x[:, 1:]) ** 2).mean(axis=(1, 2)), clip)


def _flat(model):
    import torch

    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _noisy_losses(model, w_hat, z, s: float, x: np.ndarray) -> np.ndarray:
    """Losses of the network with weights w_hat + s z on the sequences x (the model is left perturbed)."""
    import torch

    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(w_hat + s * z, model.parameters())
    return sequence_losses(model, x)


def pac_bayes_bound(model, K: int, N: int, T: int, seed: int, x_unseen: np.ndarray, rho: float = RHO) -> dict:
    """Evaluate the two-level bound for a trained model and measure the gap of its Gaussian posterior.

    Regenerates the model's own training set and initial weights from the run seed, picks s from
    SIGMA_GRID by the sharpness rule and s_p from SIGMA_GRID by the smallest KL (any data-dependent rule
    is allowed: the union bound pays for the prior grid, which it must, and, conservatively, for the
    posterior grid too, which a PAC-Bayes bound valid for every Q does not need), and estimates the posterior's training and unseen-topic losses with MC_DRAWS weight
    draws on random batches. The gap bound itself needs no Monte Carlo: it is B_topic + B_seq.
    """
    import copy

    import torch

    _, x_train = training_set(K, N, T, seed, rho)
    w_hat = _flat(model).double().cpu()
    w0 = _flat(initial_model(K, T, seed)).double()
    noisy = copy.deepcopy(model).float().cpu()
    g = torch.Generator().manual_seed(EVAL_SEED_OFFSET * 7 + run_seed(K, seed))
    rng = np.random.default_rng(EVAL_SEED_OFFSET * 7 + run_seed(K, seed))
    wh = w_hat.float()
    # sharpness scan (a cheap pilot): the largest s that keeps the training loss within SHARP_TOL
    xb = x_train[rng.choice(len(x_train), min(SCAN_BATCH, len(x_train)), replace=False)]
    base = float(sequence_losses(model, xb).mean())
    zs = [torch.randn(wh.shape, generator=g) for _ in range(SCAN_DRAWS)]
    chosen = SIGMA_GRID[0]
    for s in SIGMA_GRID:
        pilot = float(np.mean([_noisy_losses(noisy, wh, z, s, xb).mean() for z in zs]))
        if pilot > (1 + SHARP_TOL) * base:
            break
        chosen = s
    # prior std: the grid value with the smallest KL (also paid for in the union bound)
    kls = [gaussian_kl(w_hat.numpy(), chosen, w0.numpy(), sp) for sp in SIGMA_GRID]
    kl, s_prior = float(min(kls)), float(SIGMA_GRID[int(np.argmin(kls))])
    n_grid = len(SIGMA_GRID) ** 2
    b_seq, lam_seq = pac_bayes_term(kl, K * N, BOUND_DELTA / 2, n_other=n_grid)
    b_topic, lam_topic = pac_bayes_term(kl, K, BOUND_DELTA / 2, n_other=n_grid)
    # measured losses of the posterior Q (Monte Carlo): each weight draw on a random batch of training
    # sequences and a random batch of unseen-topic sequences, in one forward pass
    nb = min(MC_BATCH, len(x_train))
    tr, un = [], []
    for _ in range(MC_DRAWS):
        z = torch.randn(wh.shape, generator=g)
        xs = np.concatenate([x_train[rng.choice(len(x_train), nb, replace=False)],
                             x_unseen[rng.choice(len(x_unseen), MC_BATCH, replace=False)]])
        ls = _noisy_losses(noisy, wh, z, chosen, xs)
        tr.append(ls[:nb].mean())
        un.append(ls[nb:].mean())
    return {"sigma": float(chosen), "sigma_prior": s_prior, "kl": kl, "dist2": float(((w_hat - w0) ** 2).sum()),
            "n_params": int(w_hat.numel()), "b_seq": b_seq, "b_topic": b_topic, "bound": b_seq + b_topic, "lam_seq": lam_seq,
            "lam_topic": lam_topic, "q_train": float(np.mean(tr)), "q_unseen": float(np.mean(un)),
            "q_gap": float(np.mean(un) - np.mean(tr)), "det_batch_train": base}


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


# ----------------------------------------------------------------------------------------------
# Config / Result / run
# ----------------------------------------------------------------------------------------------

SOURCES = ("shipped grid", "train one model live")
MAX_STEP_TOKENS = 28_800     # live steps × T (cost ∝ both; see HEAVY_CONFIG)


@dataclass(frozen=True)
class Config:
    source: str = param(SOURCES[0], Choice(SOURCES, "Models", widget="radio",
                        help=f"The shipped grid: {len(GRID_K) * len(SHIP_SEEDS)} models ({len(GRID_K)} values of K "
                             f"from 1 to 256, K·N = {TOTAL_SEQ} sequences, {len(SHIP_SEEDS)} seeds) trained "
                             "offline by `python -m engine.icl_ar_ntp train`. Live: one small model trained now."))
    K: int = param(64, Choice(GRID_K, "K pre-training topics", widget="select_slider",
                   help="Picks the model whose prompt-length curve is drawn (shipped), or the live run's K."))
    seed: int = param(0, Int(0, len(SHIP_SEEDS) - 1, "Seed",
                             help="Training seed of the curve shown; the claims use every shipped seed, "
                                  "except the two bound badges, which use this seed's models."))
    fixed_n: bool = param(False, Bool(f"Also the fixed-N grid (N = {FIXED_N} per topic)",
                                      help=f"a second shipped grid with N = {FIXED_N} sequences per topic at every K, "
                                           f"so K·N grows with K (the spec's other data budget); drawn next to the "
                                           f"compute-matched grid in the error-vs-K plot. The claims and the bound "
                                           f"stay on the compute-matched grid, where K is the only thing that "
                                           f"changes"))
    # the live defaults (N = 64, T = 24, 300 steps; the spec has N = 64, T = 24, 1 500 steps) are the shipped
    # K = 64 model's data (K·N = 4096, T = 24) at under a third of its steps, so a first live run retrains the model
    # the page shows, in a few seconds; 1 500 steps at T = 24 are over the budget (see MAX_STEP_TOKENS)
    live_N: int = param(64, Int(1, 4096, "Live: sequences per topic N", group="Live training",
                                help="K · N is capped at 32 768 sequences; the default 64 is the shipped grid's N "
                                     "at K = 64"))
    live_T: int = param(24, Choice((8, 12, 16, 24), "Live: sequence length T", group="Live training",
                                   help="the default 24 is the shipped grid's T"))
    live_steps: int = param(300, Int(100, 1500, "Live: training steps", step=50, group="Live training",
                                     help="steps × T is capped at 28 800 (1 200 steps at T = 24) to stay inside "
                                          "the 30 s budget; the spec's live re-train runs 1 500 steps, and the "
                                          "default 300 keeps a click within a few seconds"))
    live_rho: float = param(0.9, Float(0.5, 0.99, "Live: ρ (spectral radius)", step=0.01, group="Live training",
                            help="Noise variance is set to 1 − ρ² so every topic starts and stays stationary."))

    def __post_init__(self):
        if self.source == SOURCES[1] and self.K * self.live_N > 32_768:
            raise ValueError("K · N must be at most 32768 sequences for a live run")
        if self.source == SOURCES[1] and self.live_steps * self.live_T > MAX_STEP_TOKENS:
            raise ValueError(f"{self.live_steps} steps at T = {self.live_T} would take about "
                             f"{self.live_steps * self.live_T * 0.6e-3:.0f} s; steps × T must stay at most "
                             f"{MAX_STEP_TOKENS} (at most {MAX_STEP_TOKENS // self.live_T // 50 * 50} steps at this T)")


# largest widget setting (live training at the K·N cap, the most steps × T): measured 2026-12-05, 600 steps took
# 6.3 s at T = 16 and 8.8 s at T = 24 (about 0.6 ms per step and token), so 1 200 steps at T = 24 ≈ 17 s
HEAVY_CONFIG = Config(source="train one model live", K=256, live_N=128, live_T=24, live_steps=1200)


@dataclass
class Result:
    source: str
    K: int
    T: int
    rho: float
    t_axis: np.ndarray                    # prompt lengths 1..T-1
    curves: dict[str, np.ndarray]         # per-position error of the selected model and the references
    loss: np.ndarray                      # training loss curve of the selected model
    loss_steps: np.ndarray
    grid_k: np.ndarray                    # K values of the grid (shipped)
    grid_unseen: np.ndarray               # (seeds, len K): unseen error at the last position
    grid_seen: np.ndarray
    grid_train: np.ndarray                # final training mse on D
    grid_gap: np.ndarray                  # mean unseen error (over t) - training mse
    grid_dist_ridge: np.ndarray
    grid_dist_mix: np.ndarray
    grid_ridge_last: np.ndarray
    grid_mixture_last: np.ndarray
    grid_curves_unseen: np.ndarray        # (seeds, len K, T-1)
    # (seeds, T-1): the in-context ridge predictor's per-position error on each seed's unseen test set (the set
    # depends on the seed, not on K)
    grid_curves_ridge: np.ndarray
    # fixed-N grid (Config.fixed_n; else empty): "unseen", "seen", "train" -> (seeds, len K) as the grid_* above
    fixed_n_grid: dict[str, np.ndarray] = field(default_factory=dict)
    gap_fit: dict[str, float] = field(default_factory=dict)
    bound: dict[str, np.ndarray] = field(default_factory=dict)   # PAC-Bayes bound per K (selected seed)
    metrics: dict[str, float] = field(default_factory=dict)


def fit_inv_sqrt(ks: np.ndarray, gap: np.ndarray) -> tuple[float, float]:
    """Least-squares fit gap ≈ a + b / sqrt(K) (the shape of the bound's topic term)."""
    A = np.stack([np.ones_like(ks, dtype=float), 1.0 / np.sqrt(ks)], 1)
    (a, b), *_ = np.linalg.lstsq(A, gap, rcond=None)
    return float(a), float(b)


def run(config: Config, progress=None) -> Result:
    seed_everything(config.seed)
    if config.source == SOURCES[1]:
        return _run_live(config, progress)
    return _run_shipped(config, progress)


def _run_shipped(config: Config, progress) -> Result:
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    nS, nK, T = len(SHIP_SEEDS), len(GRID_K), T_SHIP
    keys = ("unseen_last", "seen_last", "train", "gap", "dr", "dm", "ridge_last", "mix_last")
    g = {k: np.zeros((nS, nK)) for k in keys}
    curves_u = np.zeros((nS, nK, T - 1))
    curves_r = np.zeros((nS, T - 1))
    chosen = None
    bounds: list[dict] = []
    ridge_cache: dict = {}
    for si, seed in enumerate(SHIP_SEEDS):
        for ki, K in enumerate(GRID_K):
            report(progress, (si * nK + ki) / (nS * nK), f"evaluating shipped model K={K}, seed {seed}")
            model, W, loss, tr = load_shipped(K, seed)
            ev = evaluate(model, W, T, seed, ridge_cache=ridge_cache)
            g["unseen_last"][si, ki] = ev["unseen"][-1]
            g["seen_last"][si, ki] = ev["seen"][-1]
            g["train"][si, ki] = tr
            g["gap"][si, ki] = ev["unseen"].mean() - tr
            g["dr"][si, ki] = ev["dist_ridge"]
            g["dm"][si, ki] = ev["dist_mixture"]
            g["ridge_last"][si, ki] = ev["ridge"][-1]
            g["mix_last"][si, ki] = ev["mixture"][-1]
            curves_u[si, ki] = ev["unseen"]
            curves_r[si] = ev["ridge"]
            if seed == config.seed:
                report(progress, (si * nK + ki + 0.5) / (nS * nK), f"PAC-Bayes bound for K={K}")
                bounds.append(pac_bayes_bound(model, K, TOTAL_SEQ // K, T, seed, test_sets(W, T, seed)[0])
                              | {"det_gap": g["gap"][si, ki]})
            if K == config.K and seed == config.seed:
                chosen = (ev, loss)
    fixed = {}
    if config.fixed_n:
        fixed = {k: np.zeros((nS, nK)) for k in ("unseen", "seen", "train")}
        for si, seed in enumerate(SHIP_SEEDS):
            for ki, K in enumerate(GRID_K):
                report(progress, 0.99, f"evaluating the fixed-N grid: K={K}, seed {seed}")
                if FIXED_N == TOTAL_SEQ // K:      # the same model as the compute-matched grid's
                    fixed["unseen"][si, ki] = g["unseen_last"][si, ki]
                    fixed["seen"][si, ki] = g["seen_last"][si, ki]
                    fixed["train"][si, ki] = g["train"][si, ki]
                    continue
                model, W, _, tr = load_shipped(K, seed, FIXED_N)
                ev_f = evaluate(model, W, T, seed, ridge_cache=ridge_cache)
                fixed["unseen"][si, ki], fixed["seen"][si, ki] = ev_f["unseen"][-1], ev_f["seen"][-1]
                fixed["train"][si, ki] = tr
    report(progress, 1.0, "done")
    ev, loss = chosen
    ks = np.asarray(GRID_K, dtype=float)
    gap_mean = g["gap"].mean(0)
    a, b = fit_inv_sqrt(ks, gap_mean)
    res = Result(
        source=config.source, K=config.K, T=T, rho=RHO, t_axis=np.arange(1, T),
        curves={k: ev[k] for k in ("unseen", "seen", "ridge", "mixture", "oracle", "zero")},
        loss=loss, loss_steps=np.arange(len(loss)) * 10,
        grid_k=ks, grid_unseen=g["unseen_last"], grid_seen=g["seen_last"], grid_train=g["train"],
        grid_gap=g["gap"], grid_dist_ridge=g["dr"], grid_dist_mix=g["dm"], grid_ridge_last=g["ridge_last"],
        grid_mixture_last=g["mix_last"], grid_curves_unseen=curves_u, grid_curves_ridge=curves_r,
        fixed_n_grid=fixed, gap_fit={"a": a, "b": b},
        bound=_stack(bounds))
    res.metrics = _metrics(res)
    return res


def _run_live(config: Config, progress) -> Result:
    K, N, T, rho = config.K, config.live_N, config.live_T, config.live_rho
    model, W, hist, tr = train_model(K, N, T, config.live_steps, config.seed, rho=rho, progress=progress,
                                     message=f"training K={K}, N={N}", hi=0.95)
    ev = evaluate(model, W, T, config.seed, rho)
    report(progress, 0.97, "PAC-Bayes bound")
    bound = pac_bayes_bound(model, K, N, T, config.seed, test_sets(W, T, config.seed, rho)[0], rho)
    bound["det_gap"] = float(ev["unseen"].mean() - tr)
    report(progress, 1.0, "done")
    one = lambda v: np.array([[v]])  # noqa: E731
    res = Result(
        source=config.source, K=K, T=T, rho=rho, t_axis=np.arange(1, T),
        curves={k: ev[k] for k in ("unseen", "seen", "ridge", "mixture", "oracle", "zero")},
        loss=hist, loss_steps=np.arange(len(hist)),
        grid_k=np.array([float(K)]), grid_unseen=one(ev["unseen"][-1]), grid_seen=one(ev["seen"][-1]),
        grid_train=one(tr), grid_gap=one(ev["unseen"].mean() - tr), grid_dist_ridge=one(ev["dist_ridge"]),
        grid_dist_mix=one(ev["dist_mixture"]), grid_ridge_last=one(ev["ridge"][-1]),
        grid_mixture_last=one(ev["mixture"][-1]), grid_curves_unseen=ev["unseen"][None, None],
        grid_curves_ridge=ev["ridge"][None],
        bound=_stack([bound]))
    res.metrics = _metrics(res)
    return res


def _stack(rows: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.array([r[k] for r in rows], dtype=float) for k in rows[0]}


def _metrics(res: Result) -> dict[str, float]:
    c = res.curves
    b = res.bound
    margin = b["bound"] - b["q_gap"]
    i_sel = int(np.argmin(np.abs(res.grid_k - res.K)))
    bound_m = {
        "bound_margin_min": float(margin.min()), "bound_sel": float(b["bound"][i_sel]),
        "bound_topic_sel": float(b["b_topic"][i_sel]), "bound_seq_sel": float(b["b_seq"][i_sel]),
        "q_gap_sel": float(b["q_gap"][i_sel]), "kl_sel": float(b["kl"][i_sel]), "sigma_sel": float(b["sigma"][i_sel]),
        "sigma_prior_sel": float(b["sigma_prior"][i_sel]), "det_gap_sel": float(b["det_gap"][i_sel]),
        "bound_over_clip_min": float(b["bound"].min() / CLIP),
    }
    m = {
        "sel_unseen_first": float(c["unseen"][1]) if len(c["unseen"]) > 1 else float(c["unseen"][0]),
        "sel_unseen_last": float(c["unseen"][-1]),
        "sel_seen_last": float(c["seen"][-1]),
        "sel_last5": float(c["unseen"][-5:].mean()),
        "sel_ridge_last5": float(c["ridge"][-5:].mean()),
        "sel_oracle": float(c["oracle"].mean()),
        "sel_zero": float(c["zero"].mean()),
        **bound_m,
    }
    if res.source == SOURCES[0]:
        ks = list(GRID_K)
        u = res.grid_unseen.mean(0)
        gap = res.grid_gap.mean(0)
        i2, i64, i256 = ks.index(2), ks.index(64), ks.index(256)
        m.update({
            "unseen_K2": float(u[i2]), "unseen_K64": float(u[i64]),
            "topic_ratio": float(u[i64] / u[i2]),
            "gap_spearman": spearman(res.grid_k, gap),
            "gap_K2": float(gap[i2]), "gap_K256": float(gap[i256]),
            "gap_ratio": float(gap[i256] / gap[i2]) if gap[i2] > 0 else float("inf"),
        })
        cu = res.grid_curves_unseen[:, i64].mean(0)
        ridge = res.grid_curves_ridge.mean(0)    # over the same seeds as the model curve, whatever seed is shown
        m.update({
            "k64_first": float(cu[1]), "k64_last": float(cu[-1]),
            "prompt_ratio": float(cu[-1] / cu[1]),
            "k64_ridge_diff": float(abs(cu[-5:].mean() - ridge[-5:].mean())),
            "dist_ridge_K2": float(res.grid_dist_ridge.mean(0)[i2]),
            "dist_mix_K2": float(res.grid_dist_mix.mean(0)[i2]),
            "dist_ridge_K64": float(res.grid_dist_ridge.mean(0)[i64]),
            "dist_mix_K64": float(res.grid_dist_mix.mean(0)[i64]),
            "unseen_Kmax": float(u[-1]), "train_Kmax": float(res.grid_train.mean(0)[-1]),
        })
        if res.fixed_n_grid:     # the fixed-N grid at the largest K, seed mean
            m.update({f"fixed_{k}_Kmax": float(res.fixed_n_grid[k].mean(0)[-1])
                      for k in ("unseen", "seen", "train")})
    return m


def bound_claim(res: Result) -> Claim:
    m = res.metrics
    scope = "for every K of the grid" if res.source == SOURCES[0] else f"live model, K={res.K}"
    vac = m["bound_over_clip_min"]
    return Claim(
        f"The two-level PAC-Bayesian bound, computed for the trained weights, lies above the measured "
        f"generalization gap ({scope})", measured=m["bound_margin_min"], op=">=", threshold=0.0,
        label="min over K of (bound − measured gap)" if res.source == SOURCES[0] else "bound − measured gap",
        fmt=".3g",
        detail=f"K={res.K}: bound {m['bound_sel']:.1f} = topic term {m['bound_topic_sel']:.1f} + sequence term "
               f"{m['bound_seq_sel']:.1f}; measured gap of the Gaussian posterior {m['q_gap_sel']:.3f} "
               f"(deterministic model {m['det_gap_sel']:.3f}); KL = {m['kl_sel']:.3g} nats, posterior std "
               f"{m['sigma_sel']:g}, prior std {m['sigma_prior_sel']:g}. "
               + (f"The bound is vacuous: even its smallest value is {vac:.0f}× the clip level C = {CLIP:g}, "
                  "the largest gap a loss clipped at C can show, so this check cannot fail for these weights; "
                  "the next badge measures that"
                  if vac > 1 else "The bound is below the clip level C, so it is non-vacuous here"))


NONVACUOUS_LABEL = "smallest bound / clip level C"


def nonvacuous_claim(res: Result) -> Claim:
    """The companion of ``bound_claim``: a bound above C says nothing, so its size is a claim of its own."""
    m = res.metrics
    return Claim(
        "…and the bound is non-vacuous: below the clip level C, the largest gap the clipped loss can show",
        measured=m["bound_over_clip_min"], op="<", threshold=1.0, label=NONVACUOUS_LABEL, fmt=".3g",
        detail="Not reproduced at this scale: the trained weights sit far from their initialisation (large KL) "
               "while the topic level has only K samples, so the topic term alone exceeds C. The paper's bound "
               "is likewise a statement about rates, not a tight number.")


def claims(res: Result) -> list[Claim]:
    m = res.metrics
    if res.source != SOURCES[0]:
        # a live run has one model: the prompt-length claim and the bound can be measured on it
        return [Claim(f"Longer prompts help on unseen topics (live model, K={res.K})",
                      measured=m["sel_unseen_last"] / m["sel_unseen_first"], op="<=", threshold=PROMPT_RATIO_BAR,
                      label="e(t=T−1) / e(t=2)",
                      detail=f"e(t=2) = {m['sel_unseen_first']:.3f}, e(t=T−1) = {m['sel_unseen_last']:.3f}; "
                             "with few topics the model ignores the prompt and this fails", fmt=".3f"),
                bound_claim(res), nonvacuous_claim(res)]
    return [
        Claim("More pre-training topics make in-context prediction of unseen topics better (K=64 vs K=2, "
              "same number of training sequences)", measured=m["topic_ratio"], op="<=", threshold=TOPIC_RATIO_BAR,
              label="e_unseen(K=64) / e_unseen(K=2)",
              detail=f"e_unseen(64) = {m['unseen_K64']:.3f}, e_unseen(2) = {m['unseen_K2']:.3f} "
                     f"(last prompt position, mean of {len(SHIP_SEEDS)} seeds)", fmt=".3f"),
        Claim("…and the unseen-topic error at K=64 is far below the prompt-ignoring baseline (zero predictor = 1)",
              measured=m["unseen_K64"], op="<=", threshold=TOPIC_ABS_BAR, label="e_unseen(K=64)",
              detail=f"oracle floor σ² = {noise_var(RHO):.2f}", fmt=".3f"),
        Claim("The generalization gap falls steadily as the number of topics grows", measured=m["gap_spearman"],
              op="<=", threshold=SPEARMAN_BAR, label="Spearman(K, gap)", fmt=".3f",
              detail=f"gap = mean unseen-topic error − final training error, {len(GRID_K)} values of K"),
        Claim("…by a large factor from 2 to 256 topics", measured=m["gap_ratio"], op="<=", threshold=GAP_RATIO_BAR,
              label="gap(256) / gap(2)", fmt=".3f",
              detail=f"gap(2) = {m['gap_K2']:.3f}, gap(256) = {m['gap_K256']:.3f}"),
        Claim("Few topics: the model behaves like the mixture of its training systems; many topics: like "
              "ridge regression on the prompt", measured=max(m["dist_mix_K2"] / m["dist_ridge_K2"],
                                                             m["dist_ridge_K64"] / m["dist_mix_K64"]),
              op="<", threshold=1.0, label="max(d_mix/d_ridge at K=2, d_ridge/d_mix at K=64)", fmt=".3f",
              detail=f"K=2: d_mix {m['dist_mix_K2']:.3f} vs d_ridge {m['dist_ridge_K2']:.3f}; "
                     f"K=64: d_ridge {m['dist_ridge_K64']:.3f} vs d_mix {m['dist_mix_K64']:.3f}"),
        Claim("Longer prompts lower the unseen-topic error (K=64)", measured=m["prompt_ratio"], op="<=",
              threshold=PROMPT_RATIO_BAR, label="e(t=T−1) / e(t=2)", fmt=".3f",
              detail=f"e(t=2) = {m['k64_first']:.3f}, e(t=T−1) = {m['k64_last']:.3f}"),
        Claim("…approaching the in-context ridge (least-squares) predictor fitted on the prompt", measured=m["k64_ridge_diff"],
              op="<=", threshold=RIDGE_CLOSE_BAR, label="|model − ridge|, last 5 positions", fmt=".3f",
              detail="mean per-dimension error over the last 5 prompt lengths, K=64"),
        bound_claim(res),
        nonvacuous_claim(res),
    ]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("train", "train-fixed-n"):
        seeds = tuple(int(s) for s in sys.argv[2].split(",")) if len(sys.argv) > 2 else SHIP_SEEDS
        train_and_save(seeds=seeds, fixed_n=sys.argv[1] == "train-fixed-n")
        print(json.dumps({"done": True}))
    else:
        print("usage: python -m engine.icl_ar_ntp train|train-fixed-n [seeds, e.g. 0,1]")
