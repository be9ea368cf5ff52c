"""Attention sink (ICLR 2025, arXiv 2410.10781): a tiny decoder trained on a Bigram-Backcopy
stream puts the spare attention of its heads on the first token; the sink appears during training and
is absent when softmax is replaced by sigmoid attention without normalisation.

The data: a fixed random bigram Markov chain over 26 letters and three "trigger" symbols; right after
a trigger, the next token repeats the token just before the trigger; every sequence starts with the
start token. The copy head is needed only at the few trigger positions; everywhere else it must add
(almost) nothing, and under softmax the cheapest way to do nothing is to park its attention on the
first token. Pure compute, no streamlit. ``python -m engine.attention_sink train`` trains the shipped
checkpoints into ``assets/attention-sink/``; ``run`` loads them (or trains tiny models live), measures
the sink metric on held-out sequences and returns the attention maps of one input.

Scale (measured offline 2026-12-06, softmax, same data, recipe and seed; eps = 0.3 on row-normalised attention): the
shipped 1-layer, 2-head, d = 32 model sinks in 1 of 2 heads. A 1-layer 4-head model sinks in 1 of 4 (3 000, 6 000 and
10 000 steps); a 2-layer, 4-head, d = 64 model in 0 of 8 after 3 000 steps (1 of 8 at 500 and 1 000) and 1-2 of 8 in
a 10 000-step run, at the same final loss (1.85-1.87). In the shipped model the head that copies at triggers is the one that parks on the first token at
every other position; the other head also looks back at triggers but stays near uniform elsewhere. Larger models keep only one or two such heads, so the
"at least half the heads" bar holds at the shipped size only.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

from engine.core import Choice, Float, InputError, Int, Text, get_device, param, seed_everything
from engine.core.progress import ProgressSpan, report

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

SLUG = "attention-sink"

# ----------------------------------------------------------------------------------------------
# Vocabulary and the Bigram-Backcopy stream
# ----------------------------------------------------------------------------------------------

LETTERS = "abcdefghijklmnopqrstuvwxyz"
TRIGGERS = "#@%"
VOCAB = LETTERS + TRIGGERS + "^"
N_DATA = len(LETTERS) + len(TRIGGERS)  # tokens the chain emits (29)
BOS = VOCAB.index("^")  # start token ⟨s⟩, first token of every sequence
TRIGGER_IDS = np.arange(len(LETTERS), N_DATA)
TYPEABLE = set(LETTERS + TRIGGERS)  # ⟨s⟩ is added by the model, not typed
STOI = {c: i for i, c in enumerate(VOCAB)}
CHAIN_SEED = 123  # the task (its bigram table) is fixed; the page's seed picks sequences
CONCENTRATION = 0.2  # Dirichlet concentration of the bigram rows (small = peaked, learnable rows)


def bigram_table(seed: int = CHAIN_SEED) -> np.ndarray:
    """Row-stochastic (N_DATA, N_DATA) transition matrix of the chain."""
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(N_DATA, CONCENTRATION), size=N_DATA)


def is_trigger(ids) -> np.ndarray:
    ids = np.asarray(ids)
    return (ids >= len(LETTERS)) & (ids < N_DATA)


def sample_sequences(n: int, length: int, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
    """n sequences of ``length`` tokens: ⟨s⟩, a random letter, then the chain with the backcopy rule
    (after a trigger at t, token t+1 equals token t-1; otherwise it is drawn from the bigram row of
    token t). The token before a trigger is never a trigger, so a copy never lands on one."""
    P = bigram_table() if table is None else table
    cum = P.cumsum(axis=1)
    x = np.empty((n, length), dtype=np.int64)
    x[:, 0] = BOS
    if length > 1:
        x[:, 1] = rng.integers(0, len(LETTERS), size=n)
    for t in range(2, length):
        prev = x[:, t - 1]
        nxt = np.minimum((rng.random(n)[:, None] > cum[prev]).sum(axis=1), N_DATA - 1)
        x[:, t] = np.where(is_trigger(prev), x[:, t - 2], nxt)
    return x


def encode(text: str) -> tuple[np.ndarray, list[str]]:
    """Lower-case; keep letters and trigger symbols; return ids and the dropped characters."""
    text = text.lower()
    unknown = sorted({c for c in text if c not in TYPEABLE})
    ids = np.array([STOI[c] for c in text if c in TYPEABLE], dtype=np.int64)
    return ids, unknown


def decode(ids) -> list[str]:
    """Token ids -> displayed tokens (⟨s⟩ for the start token)."""
    return ["⟨s⟩" if int(i) == BOS else VOCAB[int(i)] for i in ids]


# ----------------------------------------------------------------------------------------------
# Model (torch imported lazily so that importing this module stays cheap)
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Arch:
    d_model: int = 32
    n_layers: int = 1
    n_heads: int = 2
    ctx: int = 32
    attn: str = "softmax"  # or "sigmoid" (sigmoid without normalisation, learned per-head bias)

    def to_dict(self) -> dict:
        return {"d_model": self.d_model, "n_layers": self.n_layers, "n_heads": self.n_heads,
                "ctx": self.ctx, "attn": self.attn}


def _torch():
    import torch

    return torch


def build_model(arch: Arch):
    torch = _torch()
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d, h = arch.d_model, arch.n_heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            # sigmoid attention: a learned scalar bias per head, started at -log(ctx) so that a row's
            # total attention is about 1 at initialisation (rows are NOT normalised afterwards)
            self.sig_bias = nn.Parameter(torch.full((h,), -math.log(arch.ctx)))

        def attend(self, x):
            B, T, d = x.shape
            h = arch.n_heads
            dh = d // h
            q, k, v = self.qkv(x).split(d, dim=-1)
            q = q.view(B, T, h, dh).transpose(1, 2)
            k = k.view(B, T, h, dh).transpose(1, 2)
            v = v.view(B, T, h, dh).transpose(1, 2)
            logits = q @ k.transpose(-1, -2) / math.sqrt(dh)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            if arch.attn == "softmax":
                a = torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1)
            else:
                a = torch.sigmoid(logits + self.sig_bias.view(1, h, 1, 1)) * causal
            out = (a @ v).transpose(1, 2).reshape(B, T, d)
            return self.proj(out), (q, k, v, a)

        def forward(self, x):
            o, inner = self.attend(self.ln1(x))
            x = x + o
            x = x + self.mlp(self.ln2(x))
            return x, inner

    class TinyGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.arch = arch
            self.tok = nn.Embedding(len(VOCAB), arch.d_model)
            self.pos = nn.Embedding(arch.ctx, arch.d_model)
            self.blocks = nn.ModuleList([Block() for _ in range(arch.n_layers)])
            self.ln_f = nn.LayerNorm(arch.d_model)
            self.apply(self._init)

        @staticmethod
        def _init(m):
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

        def forward(self, idx, keep: bool = False):
            T = idx.shape[1]
            if T > arch.ctx:
                raise InputError(f"input of {T} tokens is longer than the context ({arch.ctx})")
            x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
            inners = []
            for blk in self.blocks:
                x, inner = blk(x)
                if keep:
                    inners.append(inner)
            logits = self.ln_f(x) @ self.tok.weight.T  # tied output embedding
            return logits, inners

    return TinyGPT()


# ----------------------------------------------------------------------------------------------
# The sink metric (as the paper defines it, for the first token)
# ----------------------------------------------------------------------------------------------

def row_normalise(a: np.ndarray) -> np.ndarray:
    """Rows summing to one (a no-op for softmax attention; for sigmoid attention it turns the raw
    scores into shares, so that both kinds are judged on the same scale)."""
    s = a.sum(axis=-1, keepdims=True)
    return a / np.maximum(s, 1e-12)


def first_token_share(attn: np.ndarray) -> np.ndarray:
    """alpha[l, h]: attention on token 1, averaged over every query t = 1..T (and over sequences).

    attn: (L, B, H, T, T) or (L, H, T, T) attention maps (rows = queries).
    """
    a = attn[..., :, 0]  # (..., T): score of each query on key position 1
    if a.ndim == 4:  # (L, B, H, T)
        return a.mean(axis=(1, 3))
    return a.mean(axis=-1)


def sink_score(alpha: np.ndarray, eps: float) -> float:
    """Share of heads (over all layers) whose average attention on the first token exceeds eps."""
    return float(np.mean(alpha > eps))


def _to_np(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def attention_maps(model, ids: np.ndarray, device) -> dict[str, np.ndarray]:
    """Raw attention, Q, K, V of every layer and head for a batch of token ids (B, T)."""
    torch = _torch()
    with torch.no_grad():
        x = torch.as_tensor(ids, dtype=torch.long, device=device)
        if x.ndim == 1:
            x = x[None]
        _, inners = model(x, keep=True)
    q = np.stack([_to_np(i[0]) for i in inners])  # (L, B, H, T, dh)
    k = np.stack([_to_np(i[1]) for i in inners])
    v = np.stack([_to_np(i[2]) for i in inners])
    a = np.stack([_to_np(i[3]) for i in inners])  # (L, B, H, T, T)
    return {"q": q, "k": k, "v": v, "attn": a}


def measure_alpha(model, windows: np.ndarray, device) -> np.ndarray:
    maps = attention_maps(model, windows, device)
    return first_token_share(row_normalise(maps["attn"]))


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------

@dataclass
class TrainOut:
    model: object
    steps: np.ndarray
    loss: np.ndarray
    snapshots: dict = field(default_factory=dict)  # step -> state dict (cpu)
    snap_alpha: dict = field(default_factory=dict)  # step -> alpha (L, H)


def train(arch: Arch, steps: int, seed: int, batch: int = 64, lr: float = 3e-3, pool_size: int = 20_000,
          snapshot_steps: tuple[int, ...] = (), progress=None, message: str = "training",
          weight_decay: float = 0.1, log=None) -> TrainOut:
    """AdamW (warm-up, cosine decay to 10%) on next-token prediction over Bigram-Backcopy sequences."""
    torch = _torch()
    from engine.core.nn import set_cpu_threads

    # one thread: for matrices this small, a second thread mostly waits
    set_cpu_threads(1)
    seed_everything(seed, torch_too=True)
    device = get_device()
    rng = np.random.default_rng(seed)
    table = bigram_table()
    pool = torch.as_tensor(sample_sequences(pool_size, arch.ctx + 1, rng, table), device=device)
    eval_seqs = sample_sequences(64, arch.ctx, np.random.default_rng(7), table)
    model = build_model(arch).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    warm = max(1, steps // 20)

    def lr_at(s):
        if s < warm:
            return lr * (s + 1) / warm
        p = (s - warm) / max(1, steps - warm)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    snaps: dict = {}
    snap_alpha: dict = {}

    def snapshot(s):
        model.eval()
        snaps[s] = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        snap_alpha[s] = measure_alpha(model, eval_seqs, device)
        if log is not None:
            log(s, snap_alpha[s])
        model.train()

    losses = []
    for s in range(steps):
        if s in snapshot_steps:
            snapshot(s)
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        xb = pool[torch.as_tensor(rng.integers(0, pool_size, size=batch), device=device)]
        logits, _ = model(xb[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), xb[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if s % 10 == 0 or s == steps - 1:
            report(progress, (s + 1) / steps, f"{message}: step {s + 1}/{steps}, loss {losses[-1]:.3f}")
    if steps in snapshot_steps or not snapshot_steps:
        snapshot(steps)
    model.eval()
    return TrainOut(model, np.arange(1, steps + 1), np.array(losses), snaps, snap_alpha)


# ----------------------------------------------------------------------------------------------
# Checkpoints (written by ``python -m engine.attention_sink train``)
# ----------------------------------------------------------------------------------------------

SHIPPED_ARCH = Arch()
SHIPPED_STEPS = 3000
SOFTMAX_SNAPS = (0, 250, 500, 1000, 2000, 3000)
SIGMOID_SNAPS = (0, 500, 3000)


def _asset_dir():
    from engine.core.nn import asset_path

    return asset_path(SLUG)


def checkpoint_path(attn: str, step: int):
    return _asset_dir() / f"{attn}_step{step:05d}.pt"


def save_checkpoint(arch: Arch, state: dict, step: int, extra: dict) -> None:
    """State dict stored in float16 (halves the file; the page computes in float32)."""
    from engine.core.nn import save_state

    model = build_model(arch)
    model.load_state_dict(state)
    model.half()
    save_state(model, checkpoint_path(arch.attn, step), extra={"arch": arch.to_dict(), "step": step, **extra})


def load_checkpoint(attn: str, step: int, device):
    from engine.core.nn import load_state

    path = checkpoint_path(attn, step)
    if not path.exists():
        raise InputError(f"checkpoint {path.name} is missing; run `python -m engine.attention_sink train`")
    blob = load_state(path)
    arch = Arch(**blob["extra"]["arch"])
    model = build_model(arch)
    model.load_state_dict({k: v.float() for k, v in blob["state"].items()})
    return model.to(device).eval(), blob["extra"]


def train_and_save(steps: int = SHIPPED_STEPS, seed: int = 0, only: str | None = None) -> dict:
    """Train the shipped softmax and sigmoid models, save snapshots, return a summary."""
    import time

    summary = {}
    for attn, snaps in (("softmax", SOFTMAX_SNAPS), ("sigmoid", SIGMOID_SNAPS)):
        if only and attn != only:
            continue
        arch = Arch(**{**SHIPPED_ARCH.to_dict(), "attn": attn})
        t0 = time.time()
        last = [0.0]

        def bar(f, msg, last=last):
            if f - last[0] >= 0.02 or f >= 1.0:
                last[0] = f
                n = int(30 * f)
                sys.stdout.write(f"\r[{'#' * n}{'.' * (30 - n)}] {msg}   ")
                sys.stdout.flush()

        snaps = tuple(s for s in snaps if s <= steps) + ((steps,) if steps not in snaps else ())
        out = train(arch, steps, seed=seed, snapshot_steps=snaps, progress=bar, message=attn)
        sys.stdout.write("\n")
        for s, state in out.snapshots.items():
            extra = {"train_seed": seed, "train_steps": steps}
            if s == steps:
                extra["loss"] = [float(x) for x in out.loss]
            save_checkpoint(arch, state, s, extra)
        summary[attn] = {"seconds": round(time.time() - t0, 1), "final_loss": float(out.loss[-50:].mean()),
                         "sink_by_step": {int(s): sink_score(a, 0.3) for s, a in out.snap_alpha.items()}}
        print(attn, summary[attn])
    return summary


# ----------------------------------------------------------------------------------------------
# The page's experiment
# ----------------------------------------------------------------------------------------------

TEXT_MAX = SHIPPED_ARCH.ctx - 2  # + ⟨s⟩ and an optional extra first token stays within the context
FIRST_TOKEN = ("keep", "replace", "prepend", "drop")
FIRST_TOKEN_LABELS = ("⟨s⟩ first, as in training", "replace ⟨s⟩ by 'a'", "put an 'a' before ⟨s⟩",
                      "no ⟨s⟩: the sequence starts at once")


@dataclass(frozen=True)
class Config:
    source: str = param("checkpoint", Choice(
        ("checkpoint", "live"), "Models", widget="radio",
        labels=("shipped checkpoints", "train tiny models live"),
        help="The shipped models were trained by `python -m engine.attention_sink train` "
             f"({SHIPPED_STEPS} steps); the live path trains two small models (softmax and sigmoid) now."))
    text: str = param("", Text(
        "Your own sequence (optional)", max_chars=TEXT_MAX, alphabet=LETTERS + TRIGGERS,
        help="Letters a–z and the trigger symbols # @ %. After a trigger the chain repeats the token "
             "before it. Other characters are dropped. Leave empty to use a sequence sampled from the chain."))
    first_token: str = param("keep", Choice(FIRST_TOKEN, "First token", labels=FIRST_TOKEN_LABELS,
                                            help="Change the first token and watch where the sink goes."))
    # from 0.15: uniform causal attention already puts H_T / T ≈ 0.13 on the first token of the page's sequences,
    # so at ε ≤ 0.1 even the untrained model is "all sink heads"
    eps: float = param(0.3, Float(0.15, 0.9, "Sink threshold ε", step=0.05,
                                  help="A head counts as a sink head when its average attention on the "
                                       "first token exceeds ε (the paper uses 0.3; below 0.15 uniform attention "
                                       "alone would pass)."))
    zoom_layer: int = param(1, Int(1, 2, "Zoomed head: layer", group="View",
                                   help="Clipped to the number of layers of the model."))
    zoom_head: int = param(1, Int(1, 2, "Zoomed head: head", group="View"))
    n_eval: int = param(32, Int(8, 128, "Held-out sequences for the metric", step=8, group="Advanced",
                                help=f"Sequences of {SHIPPED_ARCH.ctx} tokens sampled from the chain; the "
                                     "sink score averages over them."))
    live_steps: int = param(200, Int(0, 300, "Live: training steps", step=50, group="Live training",
                                     help="The shipped softmax model forms its sink after about 500 steps; "
                                          "the live budget (two models, under 30 s) stops at 300, so live runs "
                                          "show the start of training, where the softmax-sink claims are expected to fail."))
    live_width: int = param(32, Choice((16, 32), "Live: model width d", group="Live training"))
    live_layers: int = param(1, Int(1, 2, "Live: layers", group="Live training"))
    seed: int = param(0, Int(0, 9, "Seed", help="Picks the held-out sequences (and the live models' seed)."))


# largest widget setting (live training, biggest model and eval set): 11 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(source="live", live_steps=300, live_width=32, live_layers=2, n_eval=128,
                      first_token="prepend")


@dataclass
class Result:
    source: str
    tokens: list  # tokens the model saw (after the first-token change)
    tokens_orig: list
    notice: str
    n_layers: int
    n_heads: int
    zoom: tuple  # (layer, head), 0-based
    attn_softmax: np.ndarray  # (L, H, T, T) on the input
    attn_sigmoid: np.ndarray  # (L, H, T, T) raw sigmoid scores on the input
    q_softmax: np.ndarray  # (L, H, T, dh) for the zoom check
    k_softmax: np.ndarray
    alpha_softmax: np.ndarray  # (L, H) on held-out sequences
    alpha_sigmoid: np.ndarray  # (L, H) raw sigmoid scores (the weights that multiply the values)
    alpha_sigmoid_norm: np.ndarray  # (L, H) sigmoid scores divided by their row sums
    alpha_untrained: np.ndarray
    dormant: dict  # per model: first-token attention / row mass at trigger vs other queries, per head
    curve_steps_softmax: np.ndarray
    curve_softmax: np.ndarray  # sink score at each snapshot
    curve_alpha_softmax: np.ndarray  # mean alpha at each snapshot
    curve_steps_sigmoid: np.ndarray
    curve_sigmoid: np.ndarray
    curve_alpha_sigmoid: np.ndarray
    loss_softmax: np.ndarray
    loss_sigmoid: np.ndarray
    kv: dict  # per-layer key/value norms and cosines (held-out sequences)
    recv_orig: np.ndarray  # attention received by each key position, softmax model, original input
    recv_mod: np.ndarray  # same after the first-token change
    excess_orig: np.ndarray  # recv_orig minus what uniform causal attention would give (uniform_causal_received)
    excess_mod: np.ndarray   # the same after the change
    metrics: dict


def prepare_text(config: Config, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    text = config.text
    if not text.strip():
        ids = sample_sequences(1, TEXT_MAX + 1, rng)[0, 1:]
        return ids, ""
    ids, unknown = encode(text)
    notice = ""
    if unknown:
        shown = " ".join(repr(c) for c in unknown[:12])
        notice = (f"Not in the model's vocabulary, dropped: {shown}. "
                  "(Upper-case letters are lower-cased.)")
    if len(ids) < 2:
        raise InputError("Type at least two letters or trigger symbols (or leave the box empty for a "
                         "sampled sequence).")
    return ids[:TEXT_MAX], notice


def change_first_token(text_ids: np.ndarray, how: str) -> np.ndarray:
    """The model's input for a sequence: ⟨s⟩ + tokens, or one of the changes of the first token."""
    a = STOI["a"]
    if how == "replace":
        return np.r_[a, text_ids]
    if how == "prepend":
        return np.r_[a, BOS, text_ids]
    if how == "drop":
        return text_ids.copy()
    return np.r_[BOS, text_ids]


def kv_stats(maps: dict) -> dict:
    """Per layer and head: norms of the first token's key/value vs the other tokens', and the cosine
    between queries and the first key vs between queries and the other keys."""
    q, k, v = maps["q"], maps["k"], maps["v"]  # (L, B, H, T, dh)
    kn = np.linalg.norm(k, axis=-1)
    vn = np.linalg.norm(v, axis=-1)
    qh = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), 1e-9)
    kh = k / np.maximum(kn[..., None], 1e-9)
    cos = qh @ np.swapaxes(kh, -1, -2)  # (L, B, H, T, T)
    T = q.shape[-2]
    lower = np.tril(np.ones((T, T), dtype=bool), -1)  # keys strictly before the query
    first = np.zeros((T, T), dtype=bool)
    first[1:, 0] = True
    other = lower & ~first
    return {
        "k_first": kn[..., 0].mean(axis=1), "k_other": kn[..., 1:].mean(axis=(1, 3)),
        "v_first": vn[..., 0].mean(axis=1), "v_other": vn[..., 1:].mean(axis=(1, 3)),
        "cos_first": cos[..., first].mean(axis=(1, 3)), "cos_other": cos[..., other].mean(axis=(1, 3)),
    }


def dormant_stats(attn: np.ndarray, seqs: np.ndarray) -> dict:
    """Per layer and head (L, H), split by the query token: is it a trigger (the head's job: copy the
    previous token) or not (nothing to do)? attn: (L, B, H, T, T) raw scores; seqs: (B, T)."""
    trig = is_trigger(seqs)  # (B, T) query positions holding a trigger
    trig[:, 0] = False
    other = ~trig
    other[:, 0] = False  # the first query can only look at itself
    first = attn[..., :, 0]  # (L, B, H, T)
    prev = np.zeros_like(first)
    T = attn.shape[-1]
    prev[..., 1:] = attn[..., np.arange(1, T), np.arange(T - 1)]
    mass = attn.sum(axis=-1)

    def avg(x, mask):
        w = mask[None, :, None, :].astype(float)
        return (x * w).sum(axis=(1, 3)) / max(float(mask.sum()), 1.0)

    return {"first_trigger": avg(first, trig), "first_other": avg(first, other),
            "prev_trigger": avg(prev, trig), "prev_other": avg(prev, other),
            "mass_trigger": avg(mass, trig), "mass_other": avg(mass, other)}


def received(attn: np.ndarray) -> np.ndarray:
    """Attention each key position receives: mean over layers, heads and all queries (L, H, T, T)."""
    return attn.mean(axis=(0, 1)).mean(axis=0)


def uniform_causal_received(T: int) -> np.ndarray:
    """What ``received`` gives for uniform causal attention (query t spreads 1/t over keys 1..t): key j collects
    (1/T) sum_{t >= j} 1/t. Position 1 always gets the most, because every query sees it, so a peak there alone
    is no sign of a sink; the excess over this baseline is."""
    inv = 1.0 / np.arange(1, T + 1)
    return np.cumsum(inv[::-1])[::-1] / T


def _snap_curve(models: list, seqs: np.ndarray, device, eps: float, normalise: bool):
    alphas = []
    for m in models:
        a = attention_maps(m, seqs, device)["attn"]
        alphas.append(first_token_share(row_normalise(a) if normalise else a))
    return (np.array([sink_score(a, eps) for a in alphas]), np.array([float(a.mean()) for a in alphas]),
            alphas)


def _live_models(config: Config, progress):
    arch = Arch(d_model=config.live_width, n_layers=config.live_layers, n_heads=SHIPPED_ARCH.n_heads,
                ctx=SHIPPED_ARCH.ctx)
    steps = config.live_steps
    snaps = tuple(sorted({0, steps // 8, steps // 4, steps // 2, steps}))
    out = {}
    for i, attn in enumerate(("softmax", "sigmoid")):
        a = Arch(**{**arch.to_dict(), "attn": attn})
        span = ProgressSpan(progress, 0.05 + 0.43 * i, 0.05 + 0.43 * (i + 1))
        res = train(a, steps, seed=config.seed, snapshot_steps=snaps, progress=span, message=f"{attn} model",
                    pool_size=4_000)
        built = []
        for s in snaps:
            m = build_model(a)
            m.load_state_dict(res.snapshots[s])
            built.append(m.to(get_device()).eval())
        out[attn] = (np.array(snaps), built, res.loss)
    return out


def _shipped_models(device):
    out = {}
    for attn, snaps in (("softmax", SOFTMAX_SNAPS), ("sigmoid", SIGMOID_SNAPS)):
        models, loss = [], np.zeros(0)
        for s in snaps:
            m, extra = load_checkpoint(attn, s, device)
            models.append(m)
            if "loss" in extra:
                loss = np.asarray(extra["loss"], dtype=np.float64)
        out[attn] = (np.array(snaps), models, loss)
    return out


def run(config: Config, progress=None) -> Result:
    _torch()
    from engine.core.nn import set_cpu_threads

    set_cpu_threads(1)
    rng = seed_everything(config.seed, torch_too=True)
    device = get_device()
    text_ids, notice = prepare_text(config, rng)
    ids_orig = change_first_token(text_ids, "keep")
    ids = change_first_token(text_ids, config.first_token)
    seqs = sample_sequences(config.n_eval, SHIPPED_ARCH.ctx, np.random.default_rng(500 + config.seed))
    report(progress, 0.02, "loading models")
    if config.source == "live":
        models = _live_models(config, progress)
    else:
        models = _shipped_models(device)
    report(progress, 0.92, "measuring the sink")
    steps_s, soft_models, loss_s = models["softmax"]
    steps_g, sig_models, loss_g = models["sigmoid"]
    soft, sig = soft_models[-1], sig_models[-1]
    curve_s, curve_as, alphas_s = _snap_curve(soft_models, seqs, device, config.eps, normalise=False)
    # sigmoid: the raw scores are the weights that multiply the values (rows need not sum to one)
    curve_g, curve_ag, alphas_g = _snap_curve(sig_models, seqs, device, config.eps, normalise=False)
    maps_soft = attention_maps(soft, seqs, device)
    maps_sig = attention_maps(sig, seqs, device)
    alpha_sig_norm = first_token_share(row_normalise(maps_sig["attn"]))
    kv = {"softmax": kv_stats(maps_soft), "sigmoid": kv_stats(maps_sig)}
    dormant = {"softmax": dormant_stats(maps_soft["attn"], seqs), "sigmoid": dormant_stats(maps_sig["attn"], seqs)}

    in_soft = attention_maps(soft, ids, device)
    in_sig = attention_maps(sig, ids, device)
    orig_soft = attention_maps(soft, ids_orig, device)
    L, H = soft.arch.n_layers, soft.arch.n_heads
    zoom = (min(config.zoom_layer, L) - 1, min(config.zoom_head, H) - 1)

    alpha_s, alpha_g, alpha_u = alphas_s[-1], alphas_g[-1], alphas_s[0]
    sink_heads = alpha_s > config.eps
    v_ratio = kv["softmax"]["v_first"] / kv["softmax"]["v_other"]
    cos_gap = kv["softmax"]["cos_first"] - kv["softmax"]["cos_other"]
    ds = dormant["softmax"]
    recv_o = received(orig_soft["attn"][:, 0])
    recv_m = received(in_soft["attn"][:, 0])
    excess_o = recv_o - uniform_causal_received(len(recv_o))
    excess_m = recv_m - uniform_causal_received(len(recv_m))
    metrics = {
        "eps": config.eps,
        "sink_softmax": sink_score(alpha_s, config.eps),
        "sink_sigmoid": sink_score(alpha_g, config.eps),
        "sink_sigmoid_norm": sink_score(alpha_sig_norm, config.eps),
        "sink_untrained": sink_score(alpha_u, config.eps),
        "alpha_softmax_mean": float(alpha_s.mean()),
        "alpha_sigmoid_mean": float(alpha_g.mean()),
        "alpha_untrained_mean": float(alpha_u.mean()),
        "sink_first_snapshot": float(curve_s[0]),
        "sink_last_snapshot": float(curve_s[-1]),
        "sink_rise": float(curve_s[-1] - curve_s[0]),
        "n_sink_heads": int(sink_heads.sum()),
        "v_ratio_sink_heads": float(np.median(v_ratio[sink_heads])) if sink_heads.any() else float("nan"),
        "cos_gap_sink_heads": float(np.median(cos_gap[sink_heads])) if sink_heads.any() else float("nan"),
        "first_at_other_softmax": float(ds["first_other"].max()),
        "first_at_trigger_softmax": float(ds["first_trigger"][np.unravel_index(
            np.argmax(ds["first_other"]), ds["first_other"].shape)]),
        "sigmoid_mass_other": float(dormant["sigmoid"]["mass_other"].mean()),
        "sigmoid_mass_trigger": float(dormant["sigmoid"]["mass_trigger"].mean()),
        "input_first_share_softmax": float(first_token_share(in_soft["attn"][:, 0]).mean()),
        "input_first_share_sigmoid": float(first_token_share(in_sig["attn"][:, 0]).mean()),
        # the position receiving the most attention above uniform causal attention, and how much more
        "sink_position_orig": int(np.argmax(excess_o)) + 1,
        "sink_position_mod": int(np.argmax(excess_m)) + 1,
        "sink_excess_orig": float(excess_o.max()),
        "sink_excess_mod": float(excess_m.max()),
        "final_loss_softmax": float(loss_s[-50:].mean()) if loss_s.size else float("nan"),
        "final_loss_sigmoid": float(loss_g[-50:].mean()) if loss_g.size else float("nan"),
        "train_steps": int(steps_s[-1]),
    }
    report(progress, 1.0, "done")
    return Result(
        source=config.source, tokens=list(decode(ids)), tokens_orig=list(decode(ids_orig)), notice=notice,
        n_layers=L, n_heads=H, zoom=zoom,
        attn_softmax=in_soft["attn"][:, 0], attn_sigmoid=in_sig["attn"][:, 0],
        q_softmax=in_soft["q"][zoom[0], 0, zoom[1]], k_softmax=in_soft["k"][zoom[0], 0, zoom[1]],
        alpha_softmax=alpha_s, alpha_sigmoid=alpha_g, alpha_sigmoid_norm=alpha_sig_norm, alpha_untrained=alpha_u,
        dormant=dormant,
        curve_steps_softmax=steps_s, curve_softmax=curve_s, curve_alpha_softmax=curve_as,
        curve_steps_sigmoid=steps_g, curve_sigmoid=curve_g, curve_alpha_sigmoid=curve_ag,
        loss_softmax=loss_s, loss_sigmoid=loss_g, kv=kv, recv_orig=recv_o, recv_mod=recv_m, excess_orig=excess_o, excess_mod=excess_m, metrics=metrics,
    )


SINK_BAR = 0.5  # trained softmax model: at least half the heads are sink heads (the untrained model: 0)
SIGMOID_BAR = 0.1  # sigmoid without normalisation: at most one head in ten
RISE_BAR = 0.4  # sink score gained between the first and last training snapshot
LOSS_RATIO_BAR = 1.05  # the sigmoid model trains as well as the softmax one


def sink_share_by_layer(result: Result, eps: float) -> dict[str, np.ndarray]:
    """Per layer, the share of heads whose attention on the first token exceeds eps, for each model."""
    return {kind: (getattr(result, f"alpha_{kind}") > eps).mean(axis=1)
            for kind in ("softmax", "sigmoid", "untrained")}


def key_value_summary(kv: dict) -> dict[str, np.ndarray]:
    """Per layer (mean over heads and sequences): the first token's key and value norms relative to the other
    tokens', and the query cosine with the first key vs with the other keys."""
    return {"k_first_over_other": kv["k_first"].mean(axis=1) / kv["k_other"].mean(axis=1),
            "v_first_over_other": kv["v_first"].mean(axis=1) / kv["v_other"].mean(axis=1),
            "cos_q_k_first": kv["cos_first"].mean(axis=1), "cos_q_k_other": kv["cos_other"].mean(axis=1)}


def claims(result: Result):
    from engine.core import Claim

    m = result.metrics
    n = result.n_layers * result.n_heads
    eps = m["eps"]
    return [
        Claim("A trained softmax model puts large attention on the first token in at least half of its heads, "
              "although ⟨s⟩ carries nothing the task needs.",
              measured=m["sink_softmax"], op=">=", threshold=SINK_BAR, label=f"sink score (ε={eps:g})",
              detail=f"{m['n_sink_heads']} of {n} heads; the untrained model scores {m['sink_untrained']:.2f}",
              fmt=".2f"),
        Claim("With sigmoid attention without normalisation, the sink does not appear: idle heads switch "
              "their attention off instead.",
              measured=m["sink_sigmoid"], op="<=", threshold=SIGMOID_BAR,
              label=f"sink score of the sigmoid model (ε={eps:g})",
              detail=f"raw sigmoid weights on the first token; total weight per row {m['sigmoid_mass_other']:.3f} "
                     f"at non-trigger queries vs {m['sigmoid_mass_trigger']:.3f} at triggers. Divided by their "
                     f"row sums the scores give {m['sink_sigmoid_norm']:.2f}", fmt=".2f"),
        # the sink-free badge above is easy at initialisation (raw sigmoid weights start near 1/32), so it counts only
        # for a sigmoid model that learned the task: its final loss must match the softmax model's (untrained: about
        # 1.8 times it)
        Claim("…and the sigmoid model learns the task as well as the softmax one, so the missing sink is not a "
              "missing skill.",
              measured=m["final_loss_sigmoid"] / m["final_loss_softmax"], op="<=", threshold=LOSS_RATIO_BAR,
              label="final loss, sigmoid / softmax",
              detail=f"{m['final_loss_sigmoid']:.3f} vs {m['final_loss_softmax']:.3f} (mean of the last 50 logged "
                     "steps)", fmt=".3f"),
        Claim("The sink emerges during training: the sink score rises from the untrained model to the end "
              "of training.",
              measured=m["sink_rise"], op=">=", threshold=RISE_BAR, label="sink score, last − first snapshot",
              detail=f"{m['sink_first_snapshot']:.2f} at step 0 → {m['sink_last_snapshot']:.2f} at step "
                     f"{m['train_steps']}", fmt=".2f"),
    ]


def _main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m engine.attention_sink")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the shipped checkpoints into assets/attention-sink/")
    t.add_argument("--steps", type=int, default=SHIPPED_STEPS)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--only", choices=("softmax", "sigmoid"), default=None,
                   help="train one of the two models (two processes can then run side by side)")
    args = p.parse_args(argv)
    if args.cmd == "train":
        if args.steps != SHIPPED_STEPS:
            print(f"note: the page expects snapshots at {SOFTMAX_SNAPS} and {SIGMOID_SNAPS}")
        train_and_save(args.steps, args.seed, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
