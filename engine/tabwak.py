"""TabWak (ICLR 2025): a row-wise watermark for tabular diffusion models, at small scale.

A small latent diffusion model maps one Gaussian latent to one table row through a deterministic
DDIM sampler; running the sampler backwards recovers the latent approximately. TabWak gives every
row its own random seed, copies the sign (TabWak) or quartile (TabWak*, "valid bits") pattern of
the first half of that seed onto the second half, scrambles the code with a secret permutation and
draws a fresh latent inside the indicated half/quartile of N(0, 1). Detection inverts the rows,
re-quantises with the table's own quantiles, un-permutes and counts how often the halves agree.

Backbone: scikit-learn's breast-cancer table (569 x 30), an exact asinh-standardise column
encoder, and an MLP epsilon-denoiser trained by ``python -m engine.tabwak train`` (checkpoint in
assets/tabwak/).

Decoded values are clipped to each column's range in the real table (decode). Before that bound (until 2026-12-05)
about 15 % of the generated "mean radius" values lay outside the real range, up to 6.7 times its maximum: the denoiser
puts some samples a few standard deviations out in latent space, and the asinh codec turns that into huge values. At
the default config 43 % of the generated rows have at least one of their 30 values bounded (metric clipped_rows);
those rows cannot be inverted to their own latent, so the all-rows inversion error rose from 0.31 to 1.26 while the
median row's stayed at 0.34 (the page shows the median) and the badges kept passing.

A better-fitting denoiser is not the way out at this scale (2026-12-05; rule fixed before any claim was looked at:
ship the candidate with the lowest mean per-column 1-D Wasserstein distance to the real encoded table whose all-rows
inversion error at the default config is no worse than the shipped model's 1.26). Same recipe, seed 0, 3 000 samples
of 25 DDIM steps, (width, steps): rows with a value outside the real range / W1 / inversion error:
(128, 4 000, shipped) 38 % / 0.39 / 1.26; (128, 16 000) 22 % / 0.16 / 6.5; (128, 64 000) 13 % / 0.09 / 27.9;
(256, 32 000) 10 % / 0.06 / 134; (256, 128 000) 3.7 % / 0.08 / not measured. The closer the model fits the 569 rows,
the sharper its ODE and the less DDIM inversion recovers the latents, so only the shipped model qualifies. (The
(256, 32 000) model, looked at first, also lost both noise-robustness badges: TPR 0 at sigma = 0.15 std.)

Key dependence of the indistinguishability badge (two-sample logistic-regression AUC <= 0.60; measured 2026-12-05,
default settings, seed 0; ``python -m engine.tabwak keys`` re-measures it into assets/tabwak/key_survey.json, which
the page quotes): key 217 (the default) 0.568; keys 0-9: 0.608, 0.572, 0.542, 0.570, 0.522, 0.543, 0.528,
0.534, 0.548, 0.583; keys 42 / 1 000 / 4 321: 0.545 / 0.587 / 0.597; no watermark 0.519. Mean over the 14 keys
0.560; 1 of 14 fails the bar (without the bound on decoded values: mean 0.585, 5 of 14 fail). The key is the
permutation that decides which latent coordinates share a sign or quartile pattern, so some pairings leave a pattern a
linear classifier can pick up more easily after decoding. The badge passes at the default key, but that pass depends
on the key and on the seed (seed 1: 0.622).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from engine.core import Bool, Choice, Claim, Float, Int, get_device, param, seed_everything
from engine.core.progress import ProgressSpan, report

D = 30
HALF = D // 2
T_EMB = 64
HIDDEN = 128
CKPT = "tabwak/denoiser.pt"
AUC_BAR = 0.60        # indistinguishability badge: two-sample classifier AUC at most this
# key survey behind the page's caveat: ``python -m engine.tabwak keys`` re-measures the badge's AUC at these keys
# (default settings otherwise) and writes KEY_SURVEY; the page quotes it and a test re-measures two of its entries
SURVEY_KEYS = (217, *range(10), 42, 1000, 4321)
KEY_SURVEY = "tabwak/key_survey.json"
TRAIN_STEPS = 4000
FALLBACK_STEPS = 1500
N_CALIB = 500
N_CLAIM2 = 500
R_SUB = 100
# claim 2: the spec's noise a = 0.3 column stds, i.e. attack strength 0.6 (noise sigma = 0.5 * strength). Until
# 2026-12-06 the badges used strength 0.3 (sigma = 0.15 std), half the spec's noise, where both pass (ratio 1.77, TPR
# 1.00); at the spec's sigma = 0.3 the ratio still passes (2.00) and TabWak*'s TPR fails (0.02)
CLAIM2_STRENGTH = 0.6
CLAIM2_SIGMA = 0.5 * CLAIM2_STRENGTH
Z_THRESHOLD = 3.090232306167813  # Phi^-1(1 - 1e-3)
Q = 0.6744897501960817  # upper quartile of N(0, 1)
METHODS = ("tabwak_star", "tabwak", "fixed_key", "none")
METHOD_LABELS = ("TabWak* (valid bits)", "TabWak", "fixed-key signs (baseline)", "no watermark")
ATTACKS = ("none", "noise", "alteration", "column_deletion", "row_deletion", "row_shuffle")
ATTACK_LABELS = ("none", "Gaussian noise", "cell alteration", "column deletion", "row deletion", "row shuffle")


@dataclass(frozen=True)
class Config:
    method: str = param("tabwak_star", Choice(METHODS, "Watermark", labels=METHOD_LABELS))
    n_rows: int = param(200, Int(10, 1000, "Rows per audited table", step=10,
                                 help="detection power grows like √n"))
    attack: str = param("none", Choice(ATTACKS, "Post-editing attack", labels=ATTACK_LABELS))
    strength: float = param(0.0, Float(0.0, 1.0, "Attack strength", step=0.05,
                                       help="noise σ = 0.5·s (in column stds); altered cells = 0.5·s; "
                                            "deleted columns = 15·s; deleted rows = 90 %·s"))
    steps: int = param(25, Int(10, 100, "DDIM steps S", step=5, help="sampling and inversion steps"))
    pool: int = param(1000, Int(500, 5000, "Rows generated per pool", step=500, group="Advanced"))
    key: int = param(217, Int(0, 9999, "Secret key", widget="number"))
    wrong_key: bool = param(False, Bool("Detect with a wrong key",
                                        help="detection and the attack sweep use key + 1: a wrong permutation must "
                                             "find nothing (the noise-robustness badges keep the true key)"))
    sweep: bool = param(False, Bool("Sweep the attack strength",
                                    help="TabWak and TabWak* at six strengths of the chosen attack (Gaussian noise "
                                         "when the attack is none or a row shuffle), on their own 500-row pools"))
    seed: int = param(0, Int(0, 9, "Seed"))


# largest widget setting (largest pool, rows, DDIM steps, attacked, swept); the pool slider reaches the spec's 5 000
# since 2026-12-06 (was 3 000): 4.8 s at this setting, the same as with a pool of 3 000 the same day
HEAVY_CONFIG = Config(n_rows=1000, steps=100, pool=5000, attack="alteration", strength=1.0, sweep=True)
SWEEP_STRENGTHS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass
class Result:
    method: str
    scores_wm: np.ndarray
    scores_plain: np.ndarray
    null_mu: float
    null_sd: float
    z_wm: np.ndarray
    z_plain: np.ndarray
    corr_method: np.ndarray
    corr_fixed: np.ndarray
    real_cols: np.ndarray
    wm_cols: np.ndarray
    plain_cols: np.ndarray
    col_names: list[str]
    z_true: np.ndarray
    z_inv: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)
    # the detector's inverted latents of the watermarked and plain pools (after the attack), for independent checks
    z_hat_wm: np.ndarray = field(default_factory=lambda: np.zeros((0, D), np.float32))
    z_hat_plain: np.ndarray = field(default_factory=lambda: np.zeros((0, D), np.float32))
    # attack sweep (Config.sweep): attack, strengths, and per method mean z and TPR of the sub-tables
    sweep: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- data + encoder
@lru_cache(maxsize=1)
def load_table() -> tuple[np.ndarray, list[str]]:
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    return d.data.astype(np.float64), list(d.feature_names)


@lru_cache(maxsize=1)
def encoder_stats():
    x, _ = load_table()
    k = np.median(x, 0)
    k = np.where(k > 0, k, 1.0)
    a = np.arcsinh(x / k)
    return k, a.mean(0), a.std(0), x.std(0), x.min(0), x.max(0)


def encode(x: np.ndarray) -> np.ndarray:
    k, m, s = encoder_stats()[:3]
    return (np.arcsinh(x / k) - m) / s


SIG_DIGITS = 4   # the breast-cancer table records every value to 4 significant figures (0.0008948, 28.11, 2501.0)


def round_sig(x: np.ndarray, digits: int = SIG_DIGITS) -> np.ndarray:
    """Round each value to `digits` significant figures (zero stays zero)."""
    x = np.asarray(x, dtype=np.float64)
    mag = np.floor(np.log10(np.where(x == 0, 1.0, np.abs(x))))
    step = 10.0 ** (mag - (digits - 1))
    return np.where(x == 0, 0.0, np.round(x / step) * step)


def decode(e: np.ndarray, bound: bool = True) -> np.ndarray:
    """Latent-space row -> table row, rounded to the source table's precision and bounded by each column's range.

    The spec asks for rounding to the source precision as a realistic mild perturbation the detector must
    survive. It names 4 decimals, but the table's precision is 4 significant figures: 4 decimals would leave the
    small columns (about 1e-3) with one or two digits and the large ones (areas in the thousands) with eight, so
    this rounds to 4 significant figures, which matches every column.

    sinh grows exponentially, so a sample a few standard deviations out would otherwise decode to a value many
    times the largest real one; a synthesiser's output transform keeps values inside the training range (TabSyn's
    quantile transform does so by construction), and so does this one.
    """
    k, m, s, _, lo, hi = encoder_stats()
    x = round_sig(k * np.sinh(np.clip(e, -20, 20) * s + m))
    return np.clip(x, lo, hi) if bound else x


# ----------------------------------------------------------------------------- diffusion
def alpha_bar(t):
    import torch

    return torch.clamp(torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2, min=1e-3, max=1.0)


def build_denoiser():
    import torch
    from torch import nn

    from engine.core.nn import mlp

    class Denoiser(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp([D + T_EMB, HIDDEN, HIDDEN, HIDDEN, D], act=nn.SiLU)
            self.register_buffer("freqs", torch.exp(-math.log(1000.0) * torch.arange(T_EMB // 2) / (T_EMB // 2)))

        def forward(self, x, t):
            arg = 1000.0 * t[:, None] * self.freqs[None]
            return self.net(torch.cat([x, torch.sin(arg), torch.cos(arg)], 1))

    return Denoiser()


def train_denoiser(steps: int, seed: int = 0, progress=None):
    import torch

    from engine.core.nn import set_cpu_threads, train_loop

    set_cpu_threads()
    torch.manual_seed(seed)
    x0 = torch.as_tensor(encode(load_table()[0]), dtype=torch.float32)
    net = build_denoiser()
    gen = torch.Generator().manual_seed(seed)

    def loss_fn(_step):
        idx = torch.randint(0, len(x0), (256,), generator=gen)
        t = torch.rand(256, generator=gen)
        eps = torch.randn(256, D, generator=gen)
        ab = alpha_bar(t)[:, None]
        xt = ab.sqrt() * x0[idx] + (1 - ab).sqrt() * eps
        return ((net(xt, t) - eps) ** 2).mean()

    train_loop(net.parameters(), loss_fn, steps, lr=1e-3, progress=progress, message="training the denoiser",
               report_every=50, cosine=True)
    return net.eval()


_MODEL_CACHE: dict = {}


def get_denoiser(progress=None):
    """The shipped checkpoint; if it is missing, train a shorter one once per process."""
    from engine.core.nn import asset_path, load_state

    if "net" in _MODEL_CACHE:
        return _MODEL_CACHE["net"], _MODEL_CACHE["retrained"]
    path = asset_path(CKPT)
    if path.exists():
        net = build_denoiser()
        net.load_state_dict(load_state(path)["state"])
        net.eval()
        retrained = False
    else:
        net = train_denoiser(FALLBACK_STEPS, progress=progress)
        retrained = True
    _MODEL_CACHE.update(net=net, retrained=retrained)
    return net, retrained


def ddim(net, x, steps: int, inverse: bool = False):
    """Deterministic DDIM (eta = 0): noise -> data, or with inverse=True data -> noise."""
    import torch

    ts = torch.linspace(0.0, 1.0, steps + 1)
    order = range(steps) if inverse else range(steps, 0, -1)
    with torch.no_grad():
        for k in order:
            t, t2 = (ts[k], ts[k + 1]) if inverse else (ts[k], ts[k - 1])
            a, a2 = alpha_bar(t), alpha_bar(t2)
            eps = net(x, t.expand(len(x)))
            x0 = (x - (1 - a).sqrt() * eps) / a.sqrt()
            x = a2.sqrt() * x0 + (1 - a2).sqrt() * eps
    return x


# ----------------------------------------------------------------------------- watermark
def permutation(key: int) -> np.ndarray:
    return np.random.default_rng(10_007 + int(key)).permutation(2 * HALF)


def fixed_key_bits(key: int) -> np.ndarray:
    return np.random.default_rng(20_011 + int(key)).integers(0, 2, D)


def quartile_code(v: np.ndarray, q25, q50, q75) -> np.ndarray:
    """0: <= q25, 1: >= q75, 2: (q25, q50], 3: (q50, q75)."""
    return np.where(v <= q25, 0, np.where(v >= q75, 1, np.where(v <= q50, 2, 3)))


def embed(rng: np.random.Generator, n: int, method: str, key: int) -> np.ndarray:
    from scipy.special import ndtri

    if method == "none":
        return rng.standard_normal((n, D))
    if method == "fixed_key":
        signs = 2.0 * fixed_key_bits(key) - 1.0
        return np.abs(rng.standard_normal((n, D))) * signs
    u = rng.standard_normal((n, D))  # every row its own seed
    perm = permutation(key)
    first = u[:, :HALF]
    if method == "tabwak":
        code = (first > 0).astype(int)
    else:
        code = quartile_code(first, -Q, 0.0, Q)
    code = np.concatenate([code, code], 1)[:, perm]
    U = np.clip(rng.uniform(size=code.shape), 1e-6, 1 - 1e-6)
    if method == "tabwak":
        p = 0.5 * code + 0.5 * U
    else:
        low = np.array([0.0, 0.75, 0.25, 0.5])[code]
        p = low + 0.25 * U
    z = u.copy()
    z[:, :2 * HALF] = ndtri(p)
    return z


def row_scores(z_hat: np.ndarray, method: str, key: int) -> np.ndarray:
    """Per-row detection score; NaN for a TabWak* row without valid bits."""
    if method == "fixed_key":
        bits = z_hat > np.median(z_hat)
        return (bits == fixed_key_bits(key).astype(bool)).mean(1)
    inv = np.argsort(permutation(key))
    zz = z_hat[:, :2 * HALF]
    if method in ("tabwak", "none_tabwak"):
        bits = (zz > np.median(zz))[:, inv]
        return (bits[:, :HALF] == bits[:, HALF:]).mean(1)
    code = quartile_code(zz, *np.quantile(zz, [0.25, 0.5, 0.75]))[:, inv]
    a, b = code[:, :HALF], code[:, HALF:]
    valid = a <= 1
    pos_b = (b == 1) | (b == 3)
    match = valid & (pos_b == (a == 1))
    nv = valid.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(nv > 0, match.sum(1) / np.maximum(nv, 1), np.nan)


def detector_of(method: str) -> str:
    return "tabwak_star" if method == "none" else method


def attack(rows: np.ndarray, kind: str, strength: float, rng: np.random.Generator):
    """Apply a post-editing attack in data space; returns rows and the deleted column indices."""
    rows = rows.copy()
    deleted = np.array([], dtype=int)
    if kind == "noise" and strength > 0:
        rows = rows + rng.standard_normal(rows.shape) * (0.5 * strength) * encoder_stats()[3]
    elif kind == "alteration" and strength > 0:
        mask = rng.uniform(size=rows.shape) < 0.5 * strength
        donor = rng.integers(0, len(rows), size=rows.shape)
        rows[mask] = rows[donor, np.arange(rows.shape[1])[None, :].repeat(len(rows), 0)][mask]
    elif kind == "column_deletion":
        k = int(round(15 * strength))
        deleted = rng.permutation(D)[:k]
    elif kind == "row_shuffle":
        rows = rows[rng.permutation(len(rows))]
    return rows, deleted


def table_z(scores: np.ndarray, n: int, mu0: float, sd0: float, rng: np.random.Generator, R: int = R_SUB):
    """z of R random sub-tables of n rows (rows without valid bits dropped)."""
    s = scores[np.isfinite(scores)]
    n = int(min(n, len(s)))
    idx = np.stack([rng.choice(len(s), size=n, replace=False) for _ in range(R)])
    return (s[idx].mean(1) - mu0) / (sd0 / math.sqrt(n)), n


def latent_corr(z: np.ndarray) -> np.ndarray:
    return np.corrcoef(z)


def mean_offdiag(c: np.ndarray) -> float:
    n = len(c)
    return float((c.sum() - np.trace(c)) / (n * (n - 1)))


# ----------------------------------------------------------------------------- run
def run(config: Config, progress=None) -> Result:
    import torch
    from scipy.stats import kstest
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    rng = seed_everything(config.seed, torch_too=True)
    get_device()  # the denoiser is tiny; it runs on CPU either way
    span = ProgressSpan(progress, 0, 1)
    net, retrained = get_denoiser(span.sub(0.0, 0.5, "denoiser: "))
    key_det = config.key + 1 if config.wrong_key else config.key
    n_pool = config.pool

    # latents of every pool, generated in one batch
    z_wm = embed(rng, n_pool, config.method, config.key)
    z_plain = rng.standard_normal((n_pool, D))
    z_cal = rng.standard_normal((N_CALIB, D))
    z_tw = embed(rng, N_CLAIM2, "tabwak", config.key)
    z_tws = embed(rng, N_CLAIM2, "tabwak_star", config.key)
    allz = np.concatenate([z_wm, z_plain, z_cal, z_tw, z_tws])
    report(progress, 0.55, "sampling rows (DDIM)")
    x_gen = ddim(net, torch.as_tensor(allz, dtype=torch.float32), config.steps).numpy().astype(np.float64)
    raw = decode(x_gen, bound=False)
    rows = np.clip(raw, *encoder_stats()[4:])                   # what decode(x_gen) returns, computed once
    clipped = np.any(rows != raw, axis=1)
    cuts = np.cumsum([n_pool, n_pool, N_CALIB, N_CLAIM2])
    r_wm, r_plain, r_cal, r_tw, r_tws = np.split(rows, cuts)

    # attacks (the calibration pool is never attacked)
    kind, s = config.attack, config.strength
    r_wm_a, del_cols = attack(r_wm, kind, s, rng)
    r_plain_a, _ = attack(r_plain, kind, s, rng)
    noise_rng = np.random.default_rng(config.seed + 99)
    r_tw_a, _ = attack(r_tw, "noise", CLAIM2_STRENGTH, noise_rng)
    r_tws_a, _ = attack(r_tws, "noise", CLAIM2_STRENGTH, noise_rng)

    enc = encode(np.concatenate([r_wm_a, r_plain_a, r_cal, r_tw_a, r_tws_a]))
    if len(del_cols):
        enc[: 2 * n_pool, del_cols] = 0.0  # deleted columns imputed with the column mean
    report(progress, 0.75, "inverting rows to latents")
    z_hat = ddim(net, torch.as_tensor(enc, dtype=torch.float32), config.steps, inverse=True).numpy()
    h_wm, h_plain, h_cal, h_tw, h_tws = np.split(z_hat.astype(np.float64), cuts)
    report(progress, 0.9, "detecting")

    # the detector re-quantises per table; a table here is one pool
    det = detector_of(config.method)
    sc_wm = row_scores(h_wm, det, key_det)
    sc_plain = row_scores(h_plain, det, key_det)
    sc_cal = row_scores(h_cal, det, key_det)
    mu0, sd0 = float(np.nanmean(sc_cal)), float(np.nanstd(sc_cal))
    n_eff = config.n_rows
    if kind == "row_deletion":
        n_eff = max(2, int(round(config.n_rows * (1 - 0.9 * s))))
    sub_rng = np.random.default_rng(config.seed + 7)
    zw, n_used = table_z(sc_wm, n_eff, mu0, sd0, sub_rng)
    zp, _ = table_z(sc_plain, n_eff, mu0, sd0, sub_rng)

    m: dict[str, float] = {"tpr": float((zw > Z_THRESHOLD).mean()), "fpr": float((zp > Z_THRESHOLD).mean()),
                           "z_wm_mean": float(zw.mean()), "z_plain_mean": float(zp.mean()),
                           "n_rows_used": float(n_used), "n_rows_scored": float(np.isfinite(sc_wm).sum()),
                           "checkpoint_retrained": float(retrained),
                           "score_wm_mean": float(np.nanmean(sc_wm)), "score_plain_mean": float(np.nanmean(sc_plain))}

    # claim 2: noise a = CLAIM2_SIGMA column stds on TabWak and TabWak*
    cal_tw = row_scores(h_cal, "tabwak", config.key)
    cal_tws = row_scores(h_cal, "tabwak_star", config.key)
    s_tw = row_scores(h_tw, "tabwak", config.key)
    s_tws = row_scores(h_tws, "tabwak_star", config.key)
    m["noise_score_tabwak"] = float(np.nanmean(s_tw))
    m["noise_score_tabwak_star"] = float(np.nanmean(s_tws))
    # standard errors of the two means: at this noise both sit only a little above 1/2
    for key, sc in (("noise_score_tabwak_se", s_tw), ("noise_score_tabwak_star_se", s_tws)):
        ok = sc[np.isfinite(sc)]
        m[key] = float(ok.std(ddof=1) / np.sqrt(len(ok))) if len(ok) > 1 else float("nan")
    m["robust_ratio"] = (m["noise_score_tabwak_star"] - 0.5) / max(1e-6, m["noise_score_tabwak"] - 0.5)
    zz, _ = table_z(s_tws, 200, float(np.nanmean(cal_tws)), float(np.nanstd(cal_tws)), np.random.default_rng(3))
    m["noise_tpr_tabwak_star"] = float((zz > Z_THRESHOLD).mean())
    zz, _ = table_z(s_tw, 200, float(np.nanmean(cal_tw)), float(np.nanstd(cal_tw)), np.random.default_rng(3))
    m["noise_tpr_tabwak"] = float((zz > Z_THRESHOLD).mean())

    sweep = {}
    if config.sweep:
        # the sweep is a detection chart: it scores with the detection key (key + 1 under "wrong key"), its null
        # calibrated with that same key
        nulls = [row_scores(h_cal, name, key_det) for name in ("tabwak", "tabwak_star")]
        sweep = attack_sweep(net, config, r_tw, r_tws, *[(float(np.nanmean(c)), float(np.nanstd(c))) for c in nulls],
                             progress, key=key_det)

    # claim 3: marginals, indistinguishability, diversity
    m["ks_p"] = float(kstest(z_wm[:1000].ravel(), "norm").pvalue)
    X = encode(np.concatenate([r_wm[:500], r_plain[:500]]))
    y = np.r_[np.ones(min(500, n_pool)), np.zeros(min(500, n_pool))]
    m["clf_auc"] = float(cross_val_score(LogisticRegression(max_iter=500), X, y, cv=5, scoring="roc_auc").mean())
    c_method = latent_corr(z_wm[:200])
    c_fixed = latent_corr(embed(np.random.default_rng(config.seed + 5), 200, "fixed_key", config.key))
    m["corr_method"] = mean_offdiag(c_method)
    m["corr_fixed"] = mean_offdiag(c_fixed)
    # inversion quality: round trip without attacks, on the plain pool
    m["inversion_rel_err"] = float(np.linalg.norm(h_cal - z_cal) / np.linalg.norm(z_cal))
    row_err = np.linalg.norm(h_cal - z_cal, axis=1) / np.linalg.norm(z_cal, axis=1)
    m["inversion_median_row_err"] = float(np.median(row_err))
    m["clipped_rows"] = float(clipped.mean())   # generated rows with a value bounded to the real range
    report(progress, 1.0, "done")

    real, names = load_table()
    cols = [0, 1, 4, 20]
    return Result(
        method=config.method, scores_wm=sc_wm.astype(np.float32), scores_plain=sc_plain.astype(np.float32),
        null_mu=mu0, null_sd=sd0, z_wm=zw, z_plain=zp, corr_method=c_method[:50, :50].astype(np.float32),
        corr_fixed=c_fixed[:50, :50].astype(np.float32), real_cols=real[:, cols].astype(np.float32),
        wm_cols=r_wm[:1000, cols].astype(np.float32), plain_cols=r_plain[:1000, cols].astype(np.float32),
        col_names=[names[c] for c in cols], z_true=z_cal[:, 0].astype(np.float32),
        z_inv=h_cal[:, 0].astype(np.float32), metrics=m, sweep=sweep,
        z_hat_wm=h_wm.astype(np.float32), z_hat_plain=h_plain.astype(np.float32),
    )


def attack_sweep(net, config: Config, r_tw: np.ndarray, r_tws: np.ndarray, null_tw: tuple, null_tws: tuple,
                 progress=None, key: int | None = None) -> dict:
    """Mean z and TPR (z > 3.09) of sub-tables of TabWak and TabWak* rows at each strength of one attack.

    The rows are the two 500-row pools of the noise claim; each strength attacks them afresh (its own random
    numbers, the same for both methods), and they go through the encoder and DDIM inversion as in ``run``.
    ``key`` is the detection key (the config's key unless given)."""
    import torch

    kind = config.attack if config.attack not in ("none", "row_shuffle") else "noise"
    out = {"attack": kind, "strength": np.array(SWEEP_STRENGTHS)}
    for name in ("tabwak", "tabwak_star"):
        out[f"z_{name}"], out[f"tpr_{name}"] = np.zeros(len(SWEEP_STRENGTHS)), np.zeros(len(SWEEP_STRENGTHS))
    for i, s in enumerate(SWEEP_STRENGTHS):
        rng = np.random.default_rng([config.seed, 31, i])
        a_tw, del_cols = attack(r_tw, kind, s, rng)
        a_tws, _ = attack(r_tws, kind, s, np.random.default_rng([config.seed, 31, i]))
        enc = encode(np.concatenate([a_tw, a_tws]))
        if len(del_cols):
            enc[:, del_cols] = 0.0
        z_hat = ddim(net, torch.as_tensor(enc, dtype=torch.float32), config.steps, inverse=True).numpy()
        n_eff = max(2, int(round(config.n_rows * (1 - 0.9 * s)))) if kind == "row_deletion" else config.n_rows
        for name, h, (mu0, sd0) in (("tabwak", z_hat[: len(a_tw)], null_tw), ("tabwak_star", z_hat[len(a_tw):], null_tws)):
            z, _ = table_z(row_scores(h.astype(np.float64), name, config.key if key is None else key), n_eff, mu0, sd0,
                           np.random.default_rng([config.seed, 37, i]))
            out[f"z_{name}"][i], out[f"tpr_{name}"][i] = float(z.mean()), float((z > Z_THRESHOLD).mean())
        report(progress, 0.9 + 0.1 * (i + 1) / len(SWEEP_STRENGTHS), f"attack sweep: strength {s:g}")
    return out


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    n = int(m["n_rows_used"])
    return [
        Claim(f"Watermarked tables of {n} rows are detected at a 0.1 % false-positive threshold",
              m["tpr"], ">=", 1.0, label="TPR (z > 3.09) over 100 sub-tables",
              detail=f"mean z {m['z_wm_mean']:.1f}", fmt=".2f"),
        Claim("…strongly: the mean z-score is far above the threshold", m["z_wm_mean"], ">=", 10.0,
              label="mean watermarked z", fmt=".1f"),
        Claim("Clean (non-watermarked) tables are flagged only at about the nominal rate",
              m["fpr"], "<=", 0.05, label="FPR over 100 clean sub-tables",
              detail=f"mean clean z {m['z_plain_mean']:.2f}", fmt=".2f"),
        Claim("Valid bits (TabWak*) make detection more robust to noise than plain sign bits (TabWak)",
              m["robust_ratio"], ">=", 1.2, label=f"(s̄* − ½)/(s̄ − ½) under noise σ = {CLAIM2_SIGMA:g} std",
              detail=f"TabWak* {m['noise_score_tabwak_star']:.3f} ± {m['noise_score_tabwak_star_se']:.3f}, TabWak "
                     f"{m['noise_score_tabwak']:.3f} ± {m['noise_score_tabwak_se']:.3f} (± one standard error)",
              fmt=".2f"),
        Claim("…and TabWak* still detects 200-row tables under that noise",
              m["noise_tpr_tabwak_star"], ">=", 0.95, label=f"TPR of TabWak* at noise σ = {CLAIM2_SIGMA:g} std",
              detail=f"TabWak: {m['noise_tpr_tabwak']:.2f}", fmt=".2f"),
        Claim("Every latent coordinate is still standard normal", m["ks_p"], ">", 0.01,
              label="KS p-value of watermarked latents vs N(0, 1)", fmt=".3f"),
        Claim("Watermarked rows are hard to tell from plain synthetic rows", m["clf_auc"], "<=", AUC_BAR,
              label="two-sample logistic-regression AUC (5-fold)", fmt=".3f"),
        Claim("Rows stay diverse: latents of different rows are uncorrelated (the fixed-key baseline is not)",
              abs(m["corr_method"]), "<=", 0.05, label="|mean row-row latent correlation|",
              detail=f"fixed-key baseline: {m['corr_fixed']:.2f}", fmt=".3f"),
        # the spec's other half of claim 3c: the control must show the correlation the shuffled seeds avoid (every
        # fixed-key row shares the key's signs; theory 2/π ≈ 0.64)
        Claim("…whereas a fixed watermark key makes every row's latent alike",
              m["corr_fixed"], ">=", 0.4, label="mean row-row latent correlation, fixed-key baseline",
              detail="theory for shared signs: 2/π ≈ 0.64; a check of the baseline's construction, which "
                     "involves neither the model nor the attack", fmt=".3f"),
    ]


def key_survey(keys=SURVEY_KEYS, seed: int = 0) -> dict:
    """The indistinguishability AUC at each key (default settings otherwise), and without a watermark."""
    auc = {str(int(k)): run(Config(key=int(k), seed=seed)).metrics["clf_auc"] for k in keys}
    return {"seed": seed, "bar": AUC_BAR, "default_key": Config().key, "auc": auc,
            "no_watermark": run(Config(method="none", seed=seed)).metrics["clf_auc"]}


def load_key_survey() -> dict | None:
    """The shipped key survey, or None when it is missing or unreadable."""
    from engine.core.surveys import load_survey

    return load_survey(KEY_SURVEY, "auc")


def _main(argv: list[str]) -> None:  # pragma: no cover
    import time

    if argv and argv[0] == "keys":
        from engine.core.surveys import write_survey

        t0 = time.time()
        data = key_survey()
        print(data, f"\nwrote {write_survey(KEY_SURVEY, data)} in {time.time() - t0:.0f}s")
        return

    if argv and argv[0] == "train":
        from engine.core.nn import asset_path, save_state

        t0 = time.time()
        net = train_denoiser(TRAIN_STEPS, progress=lambda f, msg: print(f"\r{msg}", end="") if int(f * 100) % 10 == 0
                             else None)
        save_state(net, asset_path(CKPT), extra={"steps": TRAIN_STEPS})
        print(f"\nsaved {asset_path(CKPT)} in {time.time() - t0:.1f}s")
        return
    t0 = time.time()
    r = run(Config())
    print(f"{time.time() - t0:.2f}s", {k: round(v, 3) for k, v in r.metrics.items()})
    for c in claims(r):
        print(c.passed, c.describe())


if __name__ == "__main__":  # pragma: no cover
    import sys

    _main(sys.argv[1:])
