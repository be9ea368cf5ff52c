"""CrossMPT: a transformer decoder whose bit and check tokens exchange messages by masked cross-attention.

Codes are built in code: Hamming(7,4) and the cyclic BCH(31,16) code (GF(2^5),
primitive polynomial x^5 + x^2 + 1, designed distance 7). The decoder receives the
codeword-independent inputs |y| (one "magnitude" token per bit) and the syndrome
of the hard decisions (one token per check). Each layer runs two cross-attention
half-steps with masks from the parity-check matrix H: bits query the checks they
belong to, then checks query their bits. The output is a per-bit logit z; the hard
decision of a bit is flipped where z < 0 (decoded bit = 1[z·sign(y) < 0]).

Baselines without learning: raw hard decision, algebraic hard-decision decoding
(Hamming syndrome / BCH bounded distance t = 3 by a syndrome table), sum-product
belief propagation, exact bitwise MAP by enumeration (Hamming).

Speed (the same decoded bits as the first version, at about half the CPU): BP passes messages on the
edges of the Tanner graph only; the Hamming attention grid (7 × 3) uses broadcast products instead of
thousands of tiny matrix products; the mask enters as an additive −1e9 bias fused into the score product;
the codeword-invariance check reuses the words of the Hamming claim; settings estimated above ~20 s of CPU
are refused with a message that names the most codewords that fit.

``python -m engine.crossmpt train --code hamming|bch --steps N`` writes a small
checkpoint into assets/crossmpt/. Pure compute: no streamlit import.

The shipped BCH(31,16) checkpoint is the spec's model, 4 layers (d = 32, 4 heads) trained for 40 000 steps by
``train --code bch --steps 40000 --layers 4`` (49 min on one thread, 2026-12-06): validation BER 0.0083 at 4 dB (BP(10)
0.0080, bounded-distance 0.0128; 50 000 words). It replaced a 2-layer model of 49 500 steps (19 500, then continued by
``--resume``) at 0.0116, by a rule fixed before training: ship it if its validation BER is lower. Depth closed most
of the gap to BP, not all of it: the beats-BP badge (ratio <= 0.8) still fails, near 1 instead of 1.4-1.5. The page
reads steps and BERs from the checkpoint's record (assets/crossmpt/bch.json).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations

import numpy as np

from engine.core import Bool, Choice, InputError, Int, Multi, param, seed_everything
from engine.core.claims import Claim
from engine.core.progress import ProgressSpan, report

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

CODES = ("hamming", "bch")
LIVE_CODE = "hamming"      # the code a decoder is trained for live (see live_training for why not a sparse one)
CODE_LABELS = {"hamming": "Hamming(7,4)", "bch": "BCH(31,16)"}
EBN0_POINTS = (1, 2, 3, 4, 5, 6, 7)
# the presets of the earlier single-choice widget, still read from old links
EBN0_RANGES = {"3-5": (3, 4, 5), "2-6": (2, 3, 4, 5, 6), "1-7": (1, 2, 3, 4, 5, 6, 7), "4": (4,)}
TRAIN_SEED = 12345          # the page's evaluation seeds (0..9) never meet the training stream
EVAL_SEED_OFFSET = 1000
CLAIM_EBN0 = 4.0
HAMMING_CLAIM_WORDS = 8000
BCH_CLAIM_MIN_WORDS = 2500            # the BCH badges never rest on fewer words than this
MODEL_DEFAULTS = {"hamming": dict(d=32, layers=4, heads=4), "bch": dict(d=32, layers=4, heads=4)}


@dataclass(frozen=True)
class Config:
    # Hamming by default (the spec: BCH): the badges measure both codes whatever is chosen, and the BCH curves
    # cost more, 2.4 s for a fresh default run against 1.7 s (2026-12-05; the work estimate says 3.9 vs 2.6 s on a
    # loaded machine), too close to the 3 s default budget
    code: str = param("hamming", Choice(CODES, "Code for the curves", widget="radio",
                                    labels=("Hamming(7,4)", "BCH(31,16)"),
                                    help="the curves drawn; the claims are measured on both codes either way"))
    ebn0: tuple = param((3, 4, 5), Multi(EBN0_POINTS, "Eb/N0 points (dB)", aliases=tuple(EBN0_RANGES.items()),
                                         help="the points of the curves; the claims are measured at 4 dB "
                                              "whatever is chosen here"))
    n_codewords: int = param(2500, Int(500, 20000, "Random codewords per point", step=500,
                                       help="with many points and BP iterations the run is limited to about 20 s "
                                            "of CPU (the BCH badge check also decodes this many words, at least "
                                            "2 500, whichever code is drawn); the message then names the most "
                                            "that fits"))
    bp_iters: int = param(10, Choice((5, 10, 20, 50), "BP iterations", widget="select_slider"))
    seed: int = param(0, Int(0, 9, "Noise seed", help="fresh noise; training used a different stream"))
    train_live: bool = param(False, Bool("Train a Hamming(7,4) decoder live", group="Live training",
                                         help="train a small CrossMPT from scratch on the page, with and/or without "
                                              "the Tanner-graph mask, and plot its loss and BER as it learns"))
    live_mask: str = param("both", Choice(("both", "H", "none"), "Mask", widget="radio", group="Live training",
                                          labels=("both, compared", "H (Tanner graph)", "none (all bit–check pairs)")))
    live_steps: int = param(600, Int(100, 1500, "Training steps", step=100, group="Live training"))
    live_d: int = param(32, Choice((16, 32), "Width d", widget="radio", group="Live training"))
    live_layers: int = param(2, Int(1, 4, "Layers N", group="Live training"))

    def __post_init__(self):
        # a setting over the work guard is refused here, so that the page keeps the last settings that worked
        check_budget(self)


# Work guard. The widgets allow BCH(31,16) at 7 points × 20,000 words with 50 BP iterations: about 60 s of CPU
# (107 s wall on the shared 2-core box), far over the 30 s budget. Per-word CPU costs measured on one core
# (ms: decoder forward + algebraic + MAP, and per BP iteration), rounded up, give a conservative estimate;
# heavier settings are refused with a message that names the largest number of codewords that fits. The
# settings just under the limit measured 9–15 s of CPU on 2026-12-03 with the 2-layer BCH model (BCH 1…7 dB × 7,500
# words × BP 20: 14.9 s; BCH 3 points × 9,000 × BP 50: 9.1 s; Hamming 1…7 × 20,000 × BP 50: 9.0 s); with the 4-layer
# one (2026-12-06, fresh processes on an idle machine) BCH 1…7 dB × 5,000 × BP 20 took 10.7 s and 3 points × 6,000 ×
# BP 50 8.1 s, and 7,500 words at 7 points are refused.
# BCH's per-word cost doubled with the 4-layer checkpoint of 2026-12-06 (decoder forward 0.21 ms/word on one idle
# core against 0.11 for the earlier 2-layer one), so its first entry went from 0.13 to 0.26.
WORD_MS = {"hamming": (0.04, 0.001), "bch": (0.26, 0.009)}
WORK_LIMIT_S = 20.0


# Live training of Hamming(7,4), ms per step on one core (measured 2026-12-05, batch 128, BER probes included):
# 3.5 at d = 16 with 1 layer, 7.8 at d = 32 with 2 layers, 14.6 with 4, i.e. about 1 ms plus 2.5 (d = 16) or
# 3.4 (d = 32) per layer. 25 % margin on top.
LIVE_STEP_MS = 1.5
LIVE_LAYER_MS = {16: 2.5, 32: 3.5}
LIVE_EVAL_EBN0 = 4.0
LIVE_EVAL_WORDS = 2000


def live_seconds(config: Config, steps: int | None = None) -> float:
    if not config.train_live:
        return 0.0
    steps = config.live_steps if steps is None else steps
    arms = 2 if config.live_mask == "both" else 1
    per_step = LIVE_STEP_MS + config.live_layers * LIVE_LAYER_MS[config.live_d]
    return 1.25 * arms * steps * per_step / 1000


def estimated_seconds(config: Config, n_words: int | None = None) -> float:
    """Rough single-core CPU seconds of run(config) (curves, both claim checks, the fixed extras, live training)."""
    n = config.n_codewords if n_words is None else n_words
    base, per_iter = WORD_MS[config.code]
    curves = len(config.ebn0) * n * (base + per_iter * config.bp_iters)
    ham = WORD_MS["hamming"]
    ham_check = HAMMING_CLAIM_WORDS * (2 * ham[0] + ham[1] * config.bp_iters)
    bch = WORD_MS["bch"]
    bch_check = max(BCH_CLAIM_MIN_WORDS, n) * (bch[0] + bch[1] * 10)
    return (curves + ham_check + bch_check) / 1000 + 1.0 + live_seconds(config)


def check_budget(config: Config) -> None:
    est = estimated_seconds(config)
    if est <= WORK_LIMIT_S:
        return
    if config.train_live and live_seconds(config) > 0.5 * est:
        rest = est - live_seconds(config)
        fits = [k for k in range(100, config.live_steps, 100) if rest + live_seconds(config, k) <= WORK_LIMIT_S]
        hint = (f"at most {fits[-1]:,} training steps" if fits else
                "a smaller width or fewer layers, or one mask instead of both")
        raise InputError(f"live training of {CODE_LABELS[LIVE_CODE]} ({config.live_steps:,} steps, d = "
                         f"{config.live_d}, {config.live_layers} layer{'s' if config.live_layers > 1 else ''}, "
                         f"{'both masks' if config.live_mask == 'both' else 'one mask'}) with the curves would need "
                         f"roughly {est:.0f} s of CPU (a conservative estimate); this page allows "
                         f"{WORK_LIMIT_S:.0f} s so that a busy server stays inside its 30 s budget. Use {hint} here.")
    fits = [n for n in range(500, config.n_codewords, 500) if estimated_seconds(config, n) <= WORK_LIMIT_S]
    hint = f"at most {fits[-1]:,} codewords per point" if fits else "the smallest number of codewords"
    raise InputError(f"{CODE_LABELS[config.code]} at {len(config.ebn0)} Eb/N0 points × "
                     f"{config.n_codewords:,} codewords with {config.bp_iters} BP iterations would need roughly "
                     f"{est:.0f} s of CPU (a conservative estimate); this page allows {WORK_LIMIT_S:.0f} s so that a busy server stays "
                     f"inside its 30 s budget. Use {hint} here, or fewer points or BP iterations.")


# slowest allowed setting measured: live training of 800 steps at d = 32 with 4 layers (one mask) next to the default
# curves, 14.8 s on 2026-12-05 and 17.0 s on 2026-12-06 with the 4-layer BCH model in the claim check (the heaviest
# BCH curves allowed now, 1…7 dB × 5 000 words × BP 20, took 10.7 s)
HEAVY_CONFIG = Config(train_live=True, live_steps=800, live_mask="H", live_d=32, live_layers=4)


# ----------------------------------------------------------------------------- codes

@dataclass(frozen=True)
class Code:
    name: str
    H: np.ndarray      # (m, n) parity-check matrix over GF(2)
    G: np.ndarray      # (k, n) generator matrix

    @property
    def n(self) -> int:
        return self.H.shape[1]

    @property
    def m(self) -> int:
        return self.H.shape[0]

    @property
    def k(self) -> int:
        return self.G.shape[0]

    @property
    def rate(self) -> float:
        return self.k / self.n


def hamming_code() -> Code:
    n = 7
    H = np.array([[(i + 1) >> j & 1 for i in range(n)] for j in range(3)], dtype=np.int64)
    G = nullspace_gf2(H)
    return Code("hamming", H, G)


def _gf32_tables():
    prim = 0b100101  # x^5 + x^2 + 1
    exp = [0] * 62
    x = 1
    for i in range(31):
        exp[i] = x
        x <<= 1
        if x & 0b100000:
            x ^= prim
    for i in range(31, 62):
        exp[i] = exp[i - 31]
    log = {exp[i]: i for i in range(31)}
    return exp, log


def _minimal_poly_gf2(power: int) -> list[int]:
    """Coefficients (low degree first, over GF(2)) of the minimal polynomial of α^power."""
    exp, log = _gf32_tables()

    def mul(a, b):
        return 0 if a == 0 or b == 0 else exp[log[a] + log[b]]

    conj = []
    e = power % 31
    while e not in conj:
        conj.append(e)
        e = (2 * e) % 31
    poly = [1]  # product of (x + α^e), coefficients in GF(32)
    for e in conj:
        root = exp[e]
        new = [0] * (len(poly) + 1)
        for i, c in enumerate(poly):
            new[i + 1] ^= c          # x * c
            new[i] ^= mul(c, root)   # root * c
        poly = new
    assert all(c in (0, 1) for c in poly)
    return poly


def _polymul_gf2(a: list[int], b: list[int]) -> list[int]:
    out = [0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b):
                out[i + j] ^= y
    return out


def _polydiv_gf2(num: list[int], den: list[int]) -> tuple[list[int], list[int]]:
    num = num[:]
    q = [0] * (len(num) - len(den) + 1)
    for i in range(len(num) - len(den), -1, -1):
        if num[i + len(den) - 1]:
            q[i] = 1
            for j, d in enumerate(den):
                num[i + j] ^= d
    return q, num


def bch_generator() -> list[int]:
    g = [1]
    for p in (1, 3, 5):
        g = _polymul_gf2(g, _minimal_poly_gf2(p))
    return g


def bch_code() -> Code:
    n = 31
    g = bch_generator()                       # degree 15
    xn1 = [1] + [0] * (n - 1) + [1]
    h, rem = _polydiv_gf2(xn1, g)             # degree 16
    assert not any(rem)
    k = len(h) - 1
    G = np.zeros((k, n), dtype=np.int64)
    for i in range(k):
        G[i, i:i + len(g)] = g
    hr = h[::-1]
    H = np.zeros((n - k, n), dtype=np.int64)
    for i in range(n - k):
        H[i, i:i + len(hr)] = hr
    return Code("bch", H, G)


def nullspace_gf2(H: np.ndarray) -> np.ndarray:
    """Basis of {x : H x = 0 mod 2} as rows."""
    A = H.copy() % 2
    m, n = A.shape
    pivots = []
    r = 0
    for c in range(n):
        rows = np.flatnonzero(A[r:, c]) + r
        if len(rows) == 0:
            continue
        A[[r, rows[0]]] = A[[rows[0], r]]
        for rr in range(m):
            if rr != r and A[rr, c]:
                A[rr] ^= A[r]
        pivots.append(c)
        r += 1
        if r == m:
            break
    free = [c for c in range(n) if c not in pivots]
    basis = []
    for f in free:
        v = np.zeros(n, dtype=np.int64)
        v[f] = 1
        for i, p in enumerate(pivots):
            v[p] = A[i, f]
        basis.append(v)
    return np.array(basis, dtype=np.int64)


@lru_cache(maxsize=4)
def get_code(name: str) -> Code:
    if name == "hamming":
        return hamming_code()
    if name == "bch":
        return bch_code()
    raise InputError(f"unknown code {name!r}")


def all_codewords(code: Code) -> np.ndarray:
    k = code.k
    msgs = (np.arange(2**k)[:, None] >> np.arange(k)[None, :]) & 1
    return (msgs @ code.G) % 2


# ----------------------------------------------------------------------------- channel

def sigma_for(ebn0_db: float, rate: float) -> float:
    return math.sqrt(1.0 / (2.0 * rate * 10 ** (ebn0_db / 10.0)))


def transmit(code: Code, n_words: int, ebn0_db: float, rng: np.random.Generator, zero: bool = False):
    """Random (or all-zero) codewords through BPSK + AWGN. Returns c (B, n) int, y (B, n) float."""
    if zero:
        c = np.zeros((n_words, code.n), dtype=np.int64)
    else:
        msg = rng.integers(0, 2, (n_words, code.k))
        c = (msg @ code.G) % 2
    sigma = sigma_for(ebn0_db, code.rate)
    y = (1 - 2 * c) + sigma * rng.standard_normal((n_words, code.n))
    return c, y, sigma


def model_inputs(code: Code, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|y| and the ±1 syndrome of the hard decisions: the only things the decoder sees."""
    hard = (y < 0).astype(np.int64)
    s = (hard @ code.H.T) % 2
    return np.abs(y), (1 - 2 * s).astype(np.float64)


# ----------------------------------------------------------------------------- baselines

def decode_hard(y: np.ndarray) -> np.ndarray:
    return (y < 0).astype(np.int64)


@lru_cache(maxsize=4)
def _syndrome_table(name: str, t: int) -> np.ndarray:
    """syndrome (as an integer) -> index of the lowest-weight error pattern (-1: none of weight <= t)."""
    code = get_code(name)
    n, m = code.n, code.m
    table = -np.ones(2**m, dtype=np.int64)
    patterns = [()]
    for w in range(1, t + 1):
        patterns += list(combinations(range(n), w))
    weights = 1 << np.arange(m)
    for idx, p in enumerate(patterns):
        e = np.zeros(n, dtype=np.int64)
        e[list(p)] = 1
        s = int(((code.H @ e) % 2) @ weights)
        if table[s] < 0:
            table[s] = idx
    _PATTERNS[(name, t)] = patterns
    return table


_PATTERNS: dict = {}


def decode_algebraic(code: Code, y: np.ndarray) -> np.ndarray:
    """Hard-decision syndrome decoding up to t (Hamming t = 1, BCH t = 3); beyond t leave the word."""
    t = 1 if code.name == "hamming" else 3
    table = _syndrome_table(code.name, t)
    patterns = _PATTERNS[(code.name, t)]
    hard = decode_hard(y)
    s = ((hard @ code.H.T) % 2) @ (1 << np.arange(code.m))
    out = hard.copy()
    for b in np.flatnonzero(s):
        idx = table[s[b]]
        if idx >= 0:
            out[b, list(patterns[idx])] ^= 1
    return out


def decode_bp(code: Code, y: np.ndarray, sigma: float, iters: int) -> np.ndarray:
    """Sum-product BP, flooding schedule, tanh rule; LLR > 0 means bit 0.

    Messages live on the edges of the Tanner graph only (the ones of H, grouped by check), not on a dense
    (m, n) grid: the same updates at a fraction of the work for sparse H (BCH: 120 edges of 465 cells).
    """
    chk, var = np.nonzero(code.H)                          # edges, sorted by check
    starts = np.flatnonzero(np.r_[True, chk[1:] != chk[:-1]])
    to_var = np.zeros((len(var), code.n))                  # edge -> its bit, to sum check messages per bit
    to_var[np.arange(len(var)), var] = 1.0
    llr = 2.0 * y / sigma**2
    q = llr[:, var]                                        # variable -> check messages (B, E)
    total = llr
    clamp = 1 - 1e-7
    for _ in range(iters):
        t = np.tanh(np.clip(q, -40, 40) / 2)
        t = np.where(np.abs(t) < 1e-12, np.copysign(1e-12, t), t)
        prod = np.multiply.reduceat(t, starts, axis=1)     # product over each check's edges
        excl = np.clip(prod[:, chk] / t, -clamp, clamp)
        r = np.log((1 + excl) / (1 - excl))                # check -> variable: 2·artanh, via one log
        total = llr + r @ to_var
        q = total[:, var] - r
    return (total < 0).astype(np.int64)


def bitwise_map(code: Code, y: np.ndarray, sigma: float, chunk: int = 4096) -> np.ndarray:
    """Exact per-bit posterior log-odds log P(c_i=0|y)/P(c_i=1|y) by enumerating all codewords."""
    cw = all_codewords(code)
    x = (1 - 2 * cw).astype(np.float64)
    # per bit, the codewords with that bit 0 and with it 1 (2^(k-1) each: no all-zero column in G)
    zero = np.stack([np.flatnonzero(cw[:, j] == 0) for j in range(code.n)])
    one = np.stack([np.flatnonzero(cw[:, j] == 1) for j in range(code.n)])

    def logsumexp(a):                                      # over the last axis, max-shifted
        top = a.max(axis=-1)
        return top + np.log(np.exp(a - top[..., None]).sum(axis=-1))

    out = np.empty_like(y)
    for i in range(0, len(y), chunk):
        ll = y[i:i + chunk] @ x.T / sigma**2                 # (B, 2^k) log-likelihood up to a constant
        out[i:i + chunk] = logsumexp(ll[:, zero]) - logsumexp(ll[:, one])
    return out


# ----------------------------------------------------------------------------- model

def _build_torch():
    import torch
    from torch import nn

    def attend(q, k, v, block, heads: int, counter: list | None, need_weights: bool = False):
        """Scaled dot-product attention; block (Lq, Lk) True = not allowed (logit −1e9 before the softmax)."""
        b, lq, d = q.shape
        lk = k.shape[1]
        dh = d // heads
        if counter is not None:
            counter[0] += b * heads * lq * lk          # attention scores materialised below
        bias = torch.zeros(block.shape, dtype=q.dtype, device=q.device).masked_fill(block, -1e9)
        if lq * lk <= 32:
            # tiny codes (Hamming: 7 × 3): broadcast products beat thousands of tiny matrix products and need
            # no head transposes; the same scores, softmax and weighted sum as the branch below
            q4 = q.view(b, lq, heads, dh) * (1 / math.sqrt(dh))
            logits = (q4.unsqueeze(2) * k.view(b, 1, lk, heads, dh)).sum(-1) + bias.unsqueeze(-1)  # (b, lq, lk, h)
            w = torch.softmax(logits, dim=2)
            out = (w.unsqueeze(-1) * v.view(b, 1, lk, heads, dh)).sum(2).reshape(b, lq, d)
            return out, (w.permute(0, 3, 1, 2) if need_weights else None)
        qh = q.view(b, lq, heads, dh).transpose(1, 2).reshape(b * heads, lq, dh)
        kh = k.view(b, lk, heads, dh).transpose(1, 2).reshape(b * heads, lk, dh)
        vh = v.view(b, lk, heads, dh).transpose(1, 2).reshape(b * heads, lk, dh)
        w = torch.softmax(torch.baddbmm(bias, qh, kh.transpose(1, 2), alpha=1 / math.sqrt(dh)), dim=-1)
        out = torch.bmm(w, vh).view(b, heads, lq, dh).transpose(1, 2).reshape(b, lq, d)
        return out, (w.view(b, heads, lq, lk) if need_weights else None)

    class MHA(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

        def forward(self, x, ctx, block, counter=None, need_weights=False):
            out, w = attend(self.q(x), self.k(ctx), self.v(ctx), block, self.heads, counter, need_weights)
            return self.o(out), w

    class Block(nn.Module):
        """One layer: its attention, FFN and norms serve both half-steps."""

        def __init__(self, d, heads):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = MHA(d, heads)
            self.ffn = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def half(self, x, ctx, block, counter=None, need_weights=False):
            a, w = self.att(self.ln1(x), ctx, block, counter, need_weights)
            x = x + a
            return x + self.ffn(self.ln2(x)), w

    class CrossMPT(nn.Module):
        def __init__(self, H: np.ndarray, d=32, layers=4, heads=4, use_mask=True):
            super().__init__()
            m, n = H.shape
            self.n, self.m = n, m
            Ht = torch.as_tensor(H, dtype=torch.bool)
            if not use_mask:
                Ht = torch.ones_like(Ht)
            self.register_buffer("block_vc", ~Ht.T.contiguous())   # bit i may look at check j iff H[j, i]
            self.register_buffer("block_cv", ~Ht)                  # check j may look at bit i iff H[j, i]
            self.ev = nn.Parameter(torch.empty(n, d))
            self.ec = nn.Parameter(torch.empty(m, d))
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.mid_ln, self.out_ln = nn.LayerNorm(d), nn.LayerNorm(d)
            self.tok_head = nn.Linear(d, 1)
            self.out = nn.Linear(n + m, n)
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)

        def forward(self, mag, syn, counter=None, keep_attention=False):
            v = mag.unsqueeze(-1) * self.ev
            c = syn.unsqueeze(-1) * self.ec
            maps = []
            for i, blk in enumerate(self.blocks):
                v, w_vc = blk.half(v, c, self.block_vc, counter, keep_attention)
                c, w_cv = blk.half(c, v, self.block_cv, counter, keep_attention)
                if keep_attention:
                    maps.append((w_vc.mean(1), w_cv.mean(1)))
                if i == len(self.blocks) // 2 - 1:
                    v, c = self.mid_ln(v), self.mid_ln(c)
            tok = self.tok_head(self.out_ln(torch.cat([v, c], dim=1))).squeeze(-1)
            z = self.out(tok)
            return (z, maps) if keep_attention else z

    class FullSelfAttention(nn.Module):
        """ECCT-style decoder: one sequence of n + m tokens, masked self-attention (cost reference)."""

        def __init__(self, H: np.ndarray, d=32, layers=4, heads=4):
            super().__init__()
            m, n = H.shape
            Hb = H.astype(bool)
            adj = np.zeros((n + m, n + m), dtype=bool)
            adj[:n, :n] = (Hb.T.astype(int) @ Hb.astype(int)) > 0
            adj[n:, n:] = (Hb.astype(int) @ Hb.T.astype(int)) > 0
            adj[:n, n:] = Hb.T
            adj[n:, :n] = Hb
            self.register_buffer("block", ~torch.as_tensor(adj))
            self.emb = nn.Parameter(torch.randn(n + m, d) / math.sqrt(d))
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.out_ln = nn.LayerNorm(d)
            self.tok_head = nn.Linear(d, 1)
            self.out = nn.Linear(n + m, n)

        def forward(self, mag, syn, counter=None):
            x = torch.cat([mag, syn], dim=1).unsqueeze(-1) * self.emb
            for blk in self.blocks:
                x, _ = blk.half(x, x, self.block, counter)
            return self.out(self.tok_head(self.out_ln(x)).squeeze(-1))

    return CrossMPT, FullSelfAttention


_CLASSES = None


def model_classes():
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _build_torch()
    return _CLASSES


def make_model(code: Code, d=32, layers=4, heads=4, use_mask=True):
    CrossMPT, _ = model_classes()
    return CrossMPT(code.H, d=d, layers=layers, heads=heads, use_mask=use_mask)


def model_logits(model, code: Code, y: np.ndarray, batch: int | None = None) -> np.ndarray:
    """z for each bit; z > 0 means keep the sign of y."""
    import torch

    if batch is None:       # ~24k tokens a chunk keeps the attention tensors in cache (BCH: 2x faster than 4096)
        batch = max(64, 24576 // (code.n + code.m))
    mag, syn = model_inputs(code, y)
    dev = next(model.parameters()).device
    outs = []
    with torch.no_grad():
        for i in range(0, len(y), batch):
            outs.append(model(torch.as_tensor(mag[i:i + batch], dtype=torch.float32, device=dev),
                              torch.as_tensor(syn[i:i + batch], dtype=torch.float32, device=dev)).cpu().numpy())
    return np.concatenate(outs).astype(np.float64)


def decode_model(model, code: Code, y: np.ndarray) -> np.ndarray:
    z = model_logits(model, code, y)
    return (z * np.sign(y) < 0).astype(np.int64)       # i.e. flip the hard decision where z < 0


def checkpoint_path(name: str):
    from engine.core.nn import asset_path

    return asset_path(f"crossmpt/{name}.pt")


@lru_cache(maxsize=4)
def load_model(name: str):
    from engine.core.nn import load_state

    path = checkpoint_path(name)
    if not path.exists():
        raise InputError(f"the {CODE_LABELS[name]} checkpoint is missing; run "
                         f"`python -m engine.crossmpt train --code {name}`")
    ck = load_state(path)
    ex = ck["extra"]
    model = make_model(get_code(name), d=int(ex["d"]), layers=int(ex["layers"]), heads=int(ex["heads"]))
    model.load_state_dict(ck["state"])
    model.eval()
    return model, {k: (v if isinstance(v, str) else float(v)) for k, v in ex.items()}


# ----------------------------------------------------------------------------- training

def train(name: str, steps: int, d=32, layers=4, heads=4, batch=128, lr=5e-4, use_mask=True, seed=TRAIN_SEED,
          progress=None, log_every=200, init_state: dict | None = None, on_log=None):
    """Train on the all-zero codeword with Eb/N0 drawn from {2,…,7} dB per sample.

    ``on_log(step, model)``, when given, is called at every logged step (e.g. to measure the BER so far)."""
    import torch

    from engine.core import get_device

    code = get_code(name)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = get_device()
    model = make_model(code, d=d, layers=layers, heads=heads, use_mask=use_mask).to(device)
    if init_state is not None:       # continue from an earlier checkpoint of the same shape
        model.load_state_dict(init_state)
    from engine.core.nn import make_optimizer

    opt = make_optimizer(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=1e-6)
    lossf = torch.nn.BCEWithLogitsLoss()
    sig = np.array([sigma_for(e, code.rate) for e in range(2, 8)])
    hist = []
    for step in range(steps):
        s = sig[rng.integers(0, len(sig), batch)][:, None]
        y = 1.0 + s * rng.standard_normal((batch, code.n))     # all-zero codeword: x = +1
        mag, syn = model_inputs(code, y)
        target = torch.as_tensor((y < 0).astype(np.float32), device=device)   # flipped bits: y·x < 0
        z = model(torch.as_tensor(mag, dtype=torch.float32, device=device),
                  torch.as_tensor(syn, dtype=torch.float32, device=device))
        loss = lossf(-z, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % log_every == 0 or step == steps - 1:
            value = float(loss.detach())
            hist.append((step, value))
            if on_log is not None:
                model.eval()
                on_log(step, model)
                model.train()
            report(progress, (step + 1) / steps, f"step {step + 1}/{steps}, loss {value:.4f}")
    return model, hist


# ----------------------------------------------------------------------------- evaluation

def eval_rng(code: Code, ebn0_db: float, seed: int) -> np.random.Generator:
    """The noise stream of one evaluation point (shared by every decoder at that point)."""
    return np.random.default_rng([seed + EVAL_SEED_OFFSET, int(ebn0_db * 10), code.n])


def evaluate(code: Code, model, points, n_words: int, bp_iters: int, seed: int, with_map: bool,
             progress=None) -> dict:
    """BER/FER of every decoder on shared noise (common random numbers) at each Eb/N0."""
    names = ["raw hard decision", "algebraic (hard)", f"BP ({bp_iters} it.)", "CrossMPT"]
    if with_map:
        names.append("bitwise MAP")
    ber = {k: [] for k in names}
    fer = {k: [] for k in names}
    errs = {k: [] for k in names}
    for i, e in enumerate(points):
        c, y, sigma = transmit(code, n_words, e, eval_rng(code, e, seed))
        dec = {names[0]: decode_hard(y), names[1]: decode_algebraic(code, y),
               names[2]: decode_bp(code, y, sigma, bp_iters)}
        report(progress, (i + 0.5) / len(points), f"{CODE_LABELS[code.name]}: {e} dB, BP done")
        dec[names[3]] = decode_model(model, code, y)
        if with_map:
            dec[names[4]] = (bitwise_map(code, y, sigma) < 0).astype(np.int64)
        for k, v in dec.items():
            wrong = v != c
            ber[k].append(wrong.mean())
            fer[k].append(wrong.any(axis=1).mean())
            errs[k].append(int(wrong.sum()))
        report(progress, (i + 1) / len(points), f"{CODE_LABELS[code.name]}: {e} dB done")
    return {"names": names, "ber": {k: np.array(v) for k, v in ber.items()},
            "fer": {k: np.array(v) for k, v in fer.items()}, "errors": {k: np.array(v) for k, v in errs.items()},
            "n_bits": n_words * code.n}


def cost_benchmark(n=256, m=128, row_weight=6, d=32, layers=2, heads=4, batch=8, repeats=3, seed=0) -> dict:
    """Forward time and attention-logit elements: CrossMPT vs full (n+m)² self-attention, untrained."""
    import torch

    rng = np.random.default_rng(seed)
    H = np.zeros((m, n), dtype=np.int64)
    for j in range(m):
        H[j, rng.choice(n, row_weight, replace=False)] = 1
    CrossMPT, Full = model_classes()
    torch.manual_seed(seed)
    cross, full = CrossMPT(H, d, layers, heads).eval(), Full(H, d, layers, heads).eval()
    mag = torch.rand(batch, n)
    syn = torch.sign(torch.rand(batch, m) - 0.5)
    counts = {"cross": [0], "full": [0]}
    times = {"cross": [], "full": []}
    with torch.no_grad():
        for rep in range(repeats):                 # the first pass also counts the attention scores
            for name, mod in (("cross", cross), ("full", full)):
                t0 = time.perf_counter()
                mod(mag, syn, counter=counts[name] if rep == 0 else None)
                times[name].append(time.perf_counter() - t0)
    counts = {k: v[0] for k, v in counts.items()}
    return {"n": n, "m": m, "attn_cross": counts["cross"], "attn_full": counts["full"],
            "time_cross": min(times["cross"]), "time_full": min(times["full"])}


@dataclass
class Result:
    config: Config
    points: np.ndarray
    curves: dict                      # evaluate() output for the selected code
    hamming_claim: dict               # evaluate() output, Hamming at 4 dB
    bch_claim: dict                   # evaluate() output, BCH at 4 dB
    invariance: dict
    soft_model: np.ndarray            # (200·7,) flip probabilities of CrossMPT (Hamming)
    soft_map: np.ndarray              # matching bitwise-MAP flip posteriors
    H: np.ndarray                     # parity-check matrix of the selected code
    attention: np.ndarray             # (n, m) bit->check attention of the last layer for one word
    cost: dict
    checkpoint_info: dict
    metrics: dict[str, float] = field(default_factory=dict)
    live: dict = field(default_factory=dict)   # arm -> {"step", "loss", "ber"}; "reference" -> BERs of BP, raw


def live_training(config: Config, progress=None) -> dict:
    """Train CrossMPT from scratch on Hamming(7,4) (same seed, batches and initial weights for each mask arm) and
    probe its BER every ~5 % of the steps on one fixed set of noisy all-zero words at 4 dB (the decoder sees the
    word only through |y| and the syndrome, so the all-zero word is as good as any).

    The spec also asks for a sparse LDPC(48,24) code, where removing the mask should slow learning. We built one
    (column weight 3, full rank) and tried it on 2026-12-05: within the CPU budget (300 steps at d = 16, learning
    rates 5e-4 to 5e-3) neither arm learned beyond the hard decision (BER 0.057 against BP's 0.003), so the
    comparison would show nothing; it is left out."""
    code = get_code(LIVE_CODE)
    _, y, sigma = transmit(code, LIVE_EVAL_WORDS, LIVE_EVAL_EBN0, np.random.default_rng([config.seed, 4242]),
                           zero=True)
    arms = {"both": (True, False), "H": (True,), "none": (False,)}[config.live_mask]
    span = ProgressSpan(progress, 0, 1)
    out = {}
    for j, use_mask in enumerate(arms):
        bers = []

        def probe(step, model, bers=bers):
            bers.append((step, float(decode_model(model, code, y).mean())))    # all-zero word: a 1 is an error

        _, hist = train(LIVE_CODE, config.live_steps, d=config.live_d, layers=config.live_layers,
                        use_mask=use_mask, seed=TRAIN_SEED + config.seed, log_every=max(10, config.live_steps // 20),
                        on_log=probe, progress=span.sub(j / len(arms), (j + 1) / len(arms),
                                                        f"live training ({'H mask' if use_mask else 'no mask'}): "))
        out["H mask" if use_mask else "no mask"] = {"step": np.array([h[0] for h in hist]) + 1,
                                                    "loss": np.array([h[1] for h in hist]),
                                                    "ber": np.array([b for _, b in bers])}
    out["reference"] = {"BP (10 it.)": float(decode_bp(code, y, sigma, 10).mean()),
                        "raw hard decision": float(decode_hard(y).mean())}
    return out


def run(config: Config, progress=None) -> Result:
    import torch

    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    seed_everything(config.seed, torch_too=True)
    points = np.array(config.ebn0, dtype=float)
    top = 0.8 if config.train_live else 1.0          # live training, when on, reports over the last 20 %
    span = ProgressSpan(progress, 0, top)
    models = {name: load_model(name) for name in CODES}
    code = get_code(config.code)
    curves = evaluate(code, models[config.code][0], points, config.n_codewords, config.bp_iters, config.seed,
                      with_map=(config.code == "hamming"), progress=span.sub(0, 0.55, "curves: "))

    ham = get_code("hamming")
    hmod = models["hamming"][0]
    ham_claim = evaluate(ham, hmod, [CLAIM_EBN0], HAMMING_CLAIM_WORDS, config.bp_iters, config.seed + 17,
                         with_map=True, progress=span.sub(0.55, 0.65, "Hamming check: "))
    bch = get_code("bch")
    # the BCH curves already hold the badge's point when they include 4 dB at BP(10) on enough words
    if (config.code == "bch" and CLAIM_EBN0 in points and config.bp_iters == 10
            and config.n_codewords >= BCH_CLAIM_MIN_WORDS):
        bch_claim = {k: ({kk: vv[list(points).index(CLAIM_EBN0)] for kk, vv in v.items()}
                         if isinstance(v, dict) else v) for k, v in curves.items()}
    else:
        bch_claim = evaluate(bch, models["bch"][0], [CLAIM_EBN0], max(BCH_CLAIM_MIN_WORDS, config.n_codewords), 10,
                             config.seed + 29, with_map=False, progress=span.sub(0.65, 0.85, "BCH check: "))
        bch_claim = {k: ({kk: vv[0] for kk, vv in v.items()} if isinstance(v, dict) else v)
                     for k, v in bch_claim.items()}
    ham_claim_pt = {k: ({kk: vv[0] for kk, vv in v.items()} if isinstance(v, dict) else v)
                    for k, v in ham_claim.items()}

    # codeword invariance, Hamming at 4 dB (the spec's claim 3): CrossMPT's BER on the random codewords of the
    # Hamming check (the same words and noise as that check) vs on as many all-zero words with their own,
    # independent noise (a stream no evaluation point uses: a four-number seed). (With the same noise mapped
    # through the channel symmetry the inputs would be identical and the gap 0 by construction;
    # tests/test_crossmpt.py checks that identity separately.)
    # Tolerance: 3 standard errors of the difference of the two BERs, each from the spread of the errors per
    # *word*. The spec's formula treats the bits as independent, but a decoder's wrong bits come in words
    # (a wrong Hamming word has two or three), which makes the BER's spread about 1.6 times the bitwise one;
    # with the bitwise tolerance a correct, invariant decoder failed at the default seed.
    n_w = HAMMING_CLAIM_WORDS
    cr, yr, _ = transmit(ham, n_w, CLAIM_EBN0, eval_rng(ham, CLAIM_EBN0, config.seed + 17))
    _, y0, _ = transmit(ham, n_w, CLAIM_EBN0,
                        np.random.default_rng([config.seed + EVAL_SEED_OFFSET, int(CLAIM_EBN0 * 10), ham.n, 0]),
                        zero=True)
    err_rand = (decode_model(hmod, ham, yr) != cr).sum(1)
    err_zero = (decode_model(hmod, ham, y0) != 0).sum(1)
    ber_rand, ber_zero = float(err_rand.mean() / ham.n), float(err_zero.mean() / ham.n)
    tol = 3 * math.sqrt((err_rand.var(ddof=1) + err_zero.var(ddof=1)) / n_w) / ham.n + 1e-4
    invariance = {"ber_zero": ber_zero, "ber_random": ber_rand, "tolerance": tol}
    report(progress, 0.9 * top, "soft outputs and attention")

    # soft outputs vs MAP posteriors (Hamming, 200 words)
    rng = np.random.default_rng([config.seed + EVAL_SEED_OFFSET, 7])
    c, y, sigma = transmit(ham, 200, CLAIM_EBN0, rng)
    z = model_logits(hmod, ham, y)
    p_flip_model = 1 / (1 + np.exp(z * 1.0))             # sigmoid(−z): probability the hard bit is wrong
    llr = bitwise_map(ham, y, sigma)
    p_flip_map = 1 / (1 + np.exp(np.abs(llr) * np.sign(llr) * np.sign(y)))

    # attention map for one word of the selected code
    rng = np.random.default_rng([config.seed + EVAL_SEED_OFFSET, 3])
    _, y1, _ = transmit(code, 1, 4.0, rng)
    mag, syn = model_inputs(code, y1)
    with torch.no_grad():
        _, maps = models[config.code][0](torch.as_tensor(mag, dtype=torch.float32),
                                         torch.as_tensor(syn, dtype=torch.float32), keep_attention=True)
    attention = maps[-1][0][0].numpy()

    report(progress, 0.95 * top, "timing CrossMPT vs full self-attention")
    cost = cost_benchmark()

    hb, bb = ham_claim_pt["ber"], bch_claim["ber"]
    m = {
        "ham_ber_model": hb["CrossMPT"], "ham_ber_alg": hb["algebraic (hard)"], "ham_ber_map": hb["bitwise MAP"],
        "ham_ber_raw": hb["raw hard decision"], "ham_ber_bp": hb[f"BP ({config.bp_iters} it.)"],
        "ham_ratio_bp": hb["CrossMPT"] / max(hb[f"BP ({config.bp_iters} it.)"], 1e-12), "ham_ratio_alg": hb["CrossMPT"] / max(hb["algebraic (hard)"], 1e-12),
        "ham_ratio_map": hb["CrossMPT"] / max(hb["bitwise MAP"], 1e-12),
        "bch_ber_model": bb["CrossMPT"], "bch_ber_bp": bb["BP (10 it.)"], "bch_ber_bdd": bb["algebraic (hard)"],
        "bch_ratio_bp": bb["CrossMPT"] / max(bb["BP (10 it.)"], 1e-12),
        "bch_ratio_bdd": bb["CrossMPT"] / max(bb["algebraic (hard)"], 1e-12),
        "invariance_gap": abs(ber_zero - ber_rand), "invariance_tol": tol,
        "soft_corr": float(np.corrcoef(p_flip_model.ravel(), p_flip_map.ravel())[0, 1]),
        "attn_ratio": cost["attn_cross"] / cost["attn_full"], "time_ratio": cost["time_cross"] / cost["time_full"],
    }
    live = live_training(config, ProgressSpan(progress, 0.8, 1.0)) if config.train_live else {}
    report(progress, 1.0, "done")
    info = {name: models[name][1] for name in CODES}
    return Result(config=config, points=points, curves=curves, hamming_claim=ham_claim_pt, bch_claim=bch_claim,
                  invariance=invariance, soft_model=p_flip_model.ravel(), soft_map=p_flip_map.ravel(),
                  H=code.H, attention=attention, cost=cost, checkpoint_info=info, metrics=m, live=live)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    return [
        Claim("On Hamming(7,4) the learned decoder clearly beats hard-decision syndrome decoding…",
              measured=m["ham_ratio_alg"], op="<=", threshold=0.6, label="BER CrossMPT / BER syndrome decoder",
              detail=f"{m['ham_ber_model']:.4f} vs {m['ham_ber_alg']:.4f} at 4 dB, {HAMMING_CLAIM_WORDS} words"),
        Claim("…beats belief propagation on the same noise…",
              measured=m["ham_ratio_bp"], op="<=", threshold=0.97, label="BER CrossMPT / BER BP (Hamming)",
              detail=f"{m['ham_ber_model']:.4f} vs {m['ham_ber_bp']:.4f} at 4 dB, BP with "
                     f"{result.config.bp_iters} iterations"),
        Claim("…and comes close to the optimum (exact bitwise MAP).",
              measured=m["ham_ratio_map"], op="<=", threshold=1.35, label="BER CrossMPT / BER MAP",
              detail=f"MAP {m['ham_ber_map']:.4f}; raw hard decision {m['ham_ber_raw']:.4f}"),
        Claim("On BCH(31,16) it beats belief propagation…",
              measured=m["bch_ratio_bp"], op="<=", threshold=0.8, label="BER CrossMPT / BER BP(10)",
              detail=f"{m['bch_ber_model']:.4f} vs {m['bch_ber_bp']:.4f} at 4 dB"),
        Claim("…and bounded-distance decoding (t = 3).",
              measured=m["bch_ratio_bdd"], op="<=", threshold=1.0, label="BER CrossMPT / BER BDD",
              detail=f"BDD {m['bch_ber_bdd']:.4f}"),
        Claim("The decoder's error rate does not depend on the transmitted codeword, so training on the "
              "all-zero word loses nothing.",
              measured=m["invariance_gap"], op="<=", threshold=m["invariance_tol"],
              label="|BER(all-zero) − BER(random)|", fmt=".2g",
              detail=f"{result.invariance['ber_zero']:.4f} vs {result.invariance['ber_random']:.4f} on "
                     f"independent noise ({HAMMING_CLAIM_WORDS} words each, 4 dB); the tolerance is the spec's, 3 "
                     "standard errors of the difference, from the errors per word (a decoder's wrong bits come in "
                     "words, so the spec's bitwise formula was too tight). A decoder fed y itself instead of |y| "
                     "and the syndrome fails it"),
        Claim("Cross-attention between bits and checks materialises far fewer attention scores than full "
              "self-attention over all n + m tokens…",
              measured=m["attn_ratio"], op="<=", threshold=0.5, label="attention scores CrossMPT / full",
              detail=f"counted inside the attention function during a forward pass of an untrained model on a "
                     f"fixed code, n = {result.cost['n']}, m = {result.cost['m']}. Bits attending to checks and "
                     "back hold 2nm scores against (n + m)², never more than half, so the badge checks that the "
                     "model really attends across the two groups rather than masking a full attention"),
        Claim("…and runs faster.",
              measured=m["time_ratio"], op="<=", threshold=0.9, label="forward time CrossMPT / full",
              detail=f"{result.cost['time_cross'] * 1e3:.1f} ms vs {result.cost['time_full'] * 1e3:.1f} ms "
                     "(best of 3, batch 8, same width and depth, untrained)"),
    ]


# ----------------------------------------------------------------------------- script

def _validate(name: str, model, n_words=50000, seed=777) -> dict:
    code = get_code(name)
    rng = np.random.default_rng([seed, code.n])
    c, y, sigma = transmit(code, n_words, 4.0, rng)
    out = {"ber_model": float((decode_model(model, code, y) != c).mean()),
           "ber_bp10": float((decode_bp(code, y, sigma, 10) != c).mean()),
           "ber_alg": float((decode_algebraic(code, y) != c).mean())}
    if name == "hamming":
        out["ber_map"] = float(((bitwise_map(code, y, sigma) < 0) != c).mean())
    return out


def main(argv=None):
    import argparse

    from engine.core.nn import save_state, set_cpu_threads

    ap = argparse.ArgumentParser(prog="python -m engine.crossmpt")
    ap.add_argument("cmd", choices=["train"])
    ap.add_argument("--code", choices=CODES, required=True)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--resume", action="store_true",
                    help="continue from the shipped checkpoint (its width/depth/heads override the flags)")
    ap.add_argument("--seed", type=int, default=TRAIN_SEED)
    a = ap.parse_args(argv)
    set_cpu_threads(a.threads)
    t0 = time.time()
    init, prior_steps = None, 0
    if a.resume:
        from engine.core.nn import load_state

        ck = load_state(checkpoint_path(a.code))
        init, ex = ck["state"], ck["extra"]
        a.d, a.layers, a.heads = int(ex["d"]), int(ex["layers"]), int(ex["heads"])
        prior_steps = int(ex.get("steps", 0))
    model, hist = train(a.code, a.steps, d=a.d, layers=a.layers, heads=a.heads, lr=a.lr, batch=a.batch,
                        progress=lambda f, msg: print(msg, flush=True), log_every=250, init_state=init,
                        seed=a.seed)
    model = model.cpu().eval()
    val = _validate(a.code, model)
    extra = {"d": a.d, "layers": a.layers, "heads": a.heads, "steps": prior_steps + a.steps, "lr": a.lr,
             "batch": a.batch, "train_seed": a.seed, "train_seconds": time.time() - t0, **val}
    out = checkpoint_path(a.code)
    if a.resume:
        old = load_state(out)["extra"]
        extra["train_seconds"] += float(old.get("train_seconds", 0.0))
        if val["ber_model"] >= float(old.get("ber_model", 1.0)):
            print("no improvement on the validation BER; the shipped checkpoint is kept", flush=True)
            return
    save_state(model, out, extra=extra)
    checkpoint_path(a.code).with_suffix(".json").write_text(json.dumps(extra, indent=1))
    print(json.dumps(extra, indent=1))


if __name__ == "__main__":
    main()
