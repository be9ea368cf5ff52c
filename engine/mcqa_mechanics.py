"""How a transformer answers multiple-choice questions (ICLR 2025, arXiv 2407.15018), at toy scale.

A small decoder is trained on a synthetic MCQA grammar::

    Q <item> ? A <c1> B <c2> C <c3> D <c4> Answer  ->  <letter>

Each item has a fixed colour (a memorised fact table); exactly one option is the item's colour and the
model must output the *symbol* written before that option. Some training prompts use the symbols in the
order A B C D, the others (P_SHUFFLED) a random order (e.g. "C red A blue D green B pink"), so the model
has to read the symbol next to the right option rather than count positions.

The analyses run live on the trained model:

* vocabulary projection (logit lens): the final LayerNorm and the unembedding applied to the residual
  stream at the last position after every layer, giving each answer symbol's logit by layer;
* activation patching between two prompts whose correct letters differ (same question and options,
  the answer moved to another slot, or the symbols relabelled): run prompt A with one activation taken
  from prompt B and measure how much of the logit difference logit[b] - logit[a] moves to B's value;
  per residual location (layer x position) and per attention head;
* the few heads that carry the answer symbol: the top-k heads by single-head recovery, patched together.

Pure compute, no streamlit. ``python -m engine.mcqa_mechanics train`` writes the shipped checkpoint into
``assets/mcqa-mechanics/`` (stage 1, 4000 steps, about 1.5 minutes on one CPU core), and
``python -m engine.mcqa_mechanics train resume`` continues it at a lower learning rate (stage 2, 1500 steps); the
shipped checkpoint is stage 1 followed by stage 2, training seed 0.

Training objective (changed 2026-12-04). The loss is the answer letter at the last position, the item's colour
right after the item (the "facts" of pretraining) and, since that date, the next token at every other position
(``SHIPPED_LM_WEIGHT`` = 1), as in the language-model pretraining of the paper's models. Rule fixed before the
retraining: ship it if it is at least as accurate as the previous checkpoint and the default run stays within
budget, whatever the badges say (the same kind of rule as MAD-TD's critic body). It was set knowing an earlier
experiment with this objective: that run kept the model in float between the two stages and read 0.84 after block 2,
just under the 0.85 bar, so its sudden-rise badge failed and, by the badge-based rule of that day ("keep every badge
the shipped model passes"), it was not shipped. Because the new rule came after that result, the training-seed check
below was run and is reported. Accuracy 1.000 in order and shuffled (was 0.939 / 0.917); default run 0.9 s in a warm
process.

What the shipped model shows (page seeds 0-2, in order): lens accuracy by layer 0.26, 0.24, 0.88, 1.00, 1.00
(0.88 / 0.875 / 0.864 after block 2), so the letter becomes readable after block 2 of 4, in one step of +0.60 to
+0.64, and the top 3 heads (all in blocks 2-3) recover 0.91-0.92: all five badges pass. On shuffled-symbol prompts
the lens picture is the same (0.25, 0.24, 0.87, 1.00, 1.00), but the letter is carried by all four heads of block 2
together (single-head recoveries 0.19, 0.22, 0.25, 0.16): the top 3 recover 0.56 / 0.67 (page seeds 0 / 1), the
top 4 0.70 / 0.79, the top 6 0.92 / 0.94, so the head badge fails on that variant.

This depends on the training run. The same recipe at other training seeds (``python -m engine.mcqa_mechanics depth
4 4000 1 SEED``; ``python -m engine.mcqa_mechanics seeds`` runs all five and writes the page's survey file; page
seed 0; lens after blocks 1-3, then badges first-layer / rise / middle / top-3 heads):
  seed 0 (shipped)  0.24, 0.88, 1.00   2 / +0.64 / yes / 0.92    all pass
  seed 10           0.29, 0.36, 0.79   4 / +0.21 / no  / 0.81    rise and middle fail
  seed 20           0.46, 0.49, 0.28   4 / +0.72 / no  / 0.85    middle fails
  seed 30           0.27, 1.00, 1.00   2 / +0.73 / yes / 0.99    all pass
  seed 40           0.25, 0.47, 0.95   3 / +0.48 / yes / 0.90    rise fails
(Re-run on 2026-12-05 by ``seeds``: every row the same to two decimals except seed 20's lens after block 1, 0.45.)
Accuracy 1.000 at every one. The previous recipe (no next-token loss) at seed 0 (the old shipped model): 0.27, 0.32,
0.46 (readable only in the output; accuracy 0.94 / 0.92); at seed 10 it did not learn the task (0.73 / 0.49); at
seed 20 0.25, 0.67, 0.90 (middle passes, rise and heads 0.62 fail). So with next-token training the letter is
written in vocabulary space before the output at 3 of 5 training seeds, against 1 of 3 without; at this scale the
"middle layer" picture is a likely outcome of LM-style training, not a certain one, and the page says so.

Why the old model did not show it (kept for the record): its letter was computed in the middle but not written in
vocabulary space there. A linear read-out of the last position on shuffled-symbol prompts found the letter after
block 2 (~0.7) and block 3 (~0.9) while the lens read 0.30 / 0.42; block 4 then mapped that internal code onto the
unembedding. Its loss looked only at the answer letter and the item's colour, so nothing asked intermediate layers
to speak the vocabulary's language. Deeper models of that recipe did not help (8 layers, 4000 + 1500 steps: stuck
near chance, 0.525 / 0.380; 6 layers: 0.917 / 0.702 or, with 8000 steps, 0.910 / 0.803, the letter again assembled in
the last blocks).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from engine.core import Choice, InputError, Int, get_device, param, seed_everything
from engine.core.progress import ProgressSpan, report

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

SLUG = "mcqa-mechanics"

# ----------------------------------------------------------------------------------------------
# Vocabulary and the prompt grammar
# ----------------------------------------------------------------------------------------------

COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "black", "white")
N_ITEMS = 32
_ON, _VW, _CO = "bdfgklmnprstvz", "aeiou", "klmnrst"


def _item_names(n: int = N_ITEMS) -> tuple[str, ...]:
    rng = np.random.default_rng(2407)
    names: list[str] = []
    while len(names) < n:
        w = rng.choice(list(_ON)) + rng.choice(list(_VW)) + rng.choice(list(_CO)) + rng.choice(list(_VW))
        if w not in names:
            names.append(str(w))
    return tuple(names)


ITEMS = _item_names()
LETTERS = ("A", "B", "C", "D")
SPECIAL = ("Q", "?", "Answer")
VOCAB = SPECIAL + LETTERS + COLOURS + ITEMS
STOI = {w: i for i, w in enumerate(VOCAB)}
LETTER_IDS = np.array([STOI[c] for c in LETTERS])
COLOUR_IDS = np.array([STOI[c] for c in COLOURS])
ITEM_IDS = np.array([STOI[c] for c in ITEMS])
FACT_SEED = 15018
FACTS = np.random.default_rng(FACT_SEED).integers(0, len(COLOURS), size=N_ITEMS)  # item -> colour index
SEQ_LEN = 12
POS_NAMES = ("Q", "item", "?", "sym 1", "opt 1", "sym 2", "opt 2", "sym 3", "opt 3", "sym 4", "opt 4", "Answer")
SYM_POS = np.array([3, 5, 7, 9])
OPT_POS = SYM_POS + 1
VARIANTS = ("A B C D in order", "shuffled symbols")


@dataclass
class Batch:
    ids: np.ndarray  # (N, 12) token ids
    answer: np.ndarray  # (N,) index 0..3 of the correct letter (A..D)
    slot: np.ndarray  # (N,) option slot 0..3 that holds the correct colour
    perm: np.ndarray  # (N, 4) letter index written in each slot


def make_prompts(item: np.ndarray, options: np.ndarray, perm: np.ndarray) -> Batch:
    """item (N,), options (N, 4) colour indices, perm (N, 4) letter index per slot."""
    n = len(item)
    ids = np.empty((n, SEQ_LEN), dtype=np.int64)
    ids[:, 0] = STOI["Q"]
    ids[:, 1] = ITEM_IDS[item]
    ids[:, 2] = STOI["?"]
    ids[:, SYM_POS] = LETTER_IDS[perm]
    ids[:, OPT_POS] = COLOUR_IDS[options]
    ids[:, 11] = STOI["Answer"]
    truth = FACTS[item]
    hit = options == truth[:, None]
    if not np.all(hit.sum(axis=1) == 1):
        raise InputError("every prompt must contain its item's colour exactly once")
    slot = hit.argmax(axis=1)
    return Batch(ids, perm[np.arange(n), slot], slot, perm)


def sample_prompts(n: int, rng: np.random.Generator, p_shuffled: float = 0.5) -> Batch:
    """Random questions: 3 distractor colours + the right one in a random slot; symbols in order or
    (with probability p_shuffled) in a random order."""
    item = rng.integers(0, N_ITEMS, size=n)
    truth = FACTS[item]
    others = np.argsort(rng.random((n, len(COLOURS))) + (np.arange(len(COLOURS)) == truth[:, None]) * 2, axis=1)
    options = others[:, :4].copy()
    slot = rng.integers(0, 4, size=n)
    options[np.arange(n), slot] = truth  # the right colour replaces one of the 4 distractors
    perm = np.tile(np.arange(4), (n, 1))
    shuf = rng.random(n) < p_shuffled
    perm[shuf] = np.argsort(rng.random((int(shuf.sum()), 4)), axis=1)
    return make_prompts(item, options, perm)


def make_pairs(n: int, variant: str, rng: np.random.Generator) -> tuple[Batch, Batch]:
    """Prompt pairs (A, B) with the same item whose correct letters differ.

    In order: B holds the same four options as A in a new order (the answer moves to another slot).
    Shuffled symbols: B keeps A's options in place and writes the symbols in another random order.
    """
    if variant not in VARIANTS:
        raise InputError(f"unknown variant {variant!r}")
    a = sample_prompts(n, rng, p_shuffled=0.0 if variant == VARIANTS[0] else 1.0)
    item = np.searchsorted(ITEM_IDS, a.ids[:, 1])
    opts = np.searchsorted(COLOUR_IDS, a.ids[:, OPT_POS])
    new_opts, new_perm = opts.copy(), a.perm.copy()
    todo = np.ones(n, dtype=bool)
    for _ in range(100):
        m = int(todo.sum())
        if m == 0:
            break
        shuffle = np.argsort(rng.random((m, 4)), axis=1)
        if variant == VARIANTS[0]:
            new_opts[todo] = opts[todo][np.arange(m)[:, None], shuffle]
        else:
            new_perm[todo] = shuffle
        b = make_prompts(item, new_opts, new_perm)
        todo = b.answer == a.answer
    else:
        raise RuntimeError("could not build counterfactual pairs")
    return a, b


def render(ids) -> str:
    words = [VOCAB[int(i)] for i in ids]
    out = []
    for p, w in enumerate(words):
        if p in SYM_POS:
            out.append(f"{w}:")
        elif w == "Answer":
            out.append("Answer:")
        elif w == "Q":
            out.append("Q: what colour is")
        else:
            out.append(w)
    return " ".join(out).replace(" ?", "?")


# ----------------------------------------------------------------------------------------------
# Model with patching hooks (torch imported lazily)
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Arch:
    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 4

    def to_dict(self) -> dict:
        return {"d_model": self.d_model, "n_layers": self.n_layers, "n_heads": self.n_heads}


SHIPPED_ARCH = Arch()
SHIPPED_STEPS = 4000
P_SHUFFLED = 0.7  # share of training prompts with the symbols in a random order
SHIPPED_BATCH = 64
RESUME_STEPS = 1500
RESUME_LR = 1e-3
TRAIN_SEED = 0
SHIPPED_LM_WEIGHT = 1.0  # next-token loss at every position, as in language-model pretraining (module docstring)


def _torch():
    import torch

    return torch


def build_model(arch: Arch):
    """Pre-LayerNorm decoder. ``forward(idx, patch=None, cache=None)``:

    patch: dict with keys ("resid", l) -> (positions, source (B, T, d)), replacing the residual stream
    entering block l (l = n_layers: the final residual) at those positions, and ("head", l, h) ->
    (positions, source (B, T, d_head)), replacing head h's output (its weighted sum of values, before the
    output projection) in block l. cache: a dict that receives "resid" (L+1, B, T, d) and "z"
    (L, B, H, T, d_head) of the run.
    """
    torch = _torch()
    from torch import nn

    d, H = arch.d_model, arch.n_heads
    dh = d // H

    def put(x, positions, src):
        """Replace x by src where ``positions`` says so: a list of positions (every row) or a (B, T)
        boolean mask (row-specific, used to run many patches in one batch)."""
        if isinstance(positions, torch.Tensor):
            return torch.where(positions[..., None], src, x)
        x = x.clone()
        x[:, positions] = src[:, positions]
        return x

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def heads(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.view(B, T, H, dh).transpose(1, 2) for t in (q, k, v))
            logits = q @ k.transpose(-1, -2) / math.sqrt(dh)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            a = torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1)
            return a @ v, a  # z: (B, H, T, dh)

    class MCQAModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.arch = arch
            self.tok = nn.Embedding(len(VOCAB), d)
            self.pos = nn.Embedding(SEQ_LEN, d)
            self.blocks = nn.ModuleList([Block() for _ in range(arch.n_layers)])
            self.ln_f = nn.LayerNorm(d)
            self.unembed = nn.Linear(d, len(VOCAB), bias=False)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=0.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, nn.Embedding):
                    nn.init.normal_(m.weight, std=0.02)

        def lens(self, resid):
            """Vocabulary projection of a residual stream: final LayerNorm then unembedding."""
            return self.unembed(self.ln_f(resid))

        def forward(self, idx, patch: dict | None = None, cache: dict | None = None, start: int = 0,
                    x_start=None):
            """start / x_start: begin at block ``start`` with the residual stream x_start (the blocks
            before it are skipped; used when a patch leaves them unchanged)."""
            patch = patch or {}
            B, T = idx.shape
            if start:
                x = x_start
            else:
                x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
            resids, zs, attns = [], [], []
            for li, blk in enumerate(self.blocks):
                if li < start:
                    continue
                if ("resid", li) in patch:
                    x = put(x, *patch[("resid", li)])
                resids.append(x)
                z, a = blk.heads(x)
                if any(("head", li, h) in patch for h in range(H)):
                    parts = [put(z[:, h], *patch[("head", li, h)]) if ("head", li, h) in patch else z[:, h]
                             for h in range(H)]
                    z = torch.stack(parts, dim=1)
                zs.append(z)
                attns.append(a)
                x = x + blk.proj(z.transpose(1, 2).reshape(B, T, d))
                x = x + blk.mlp(blk.ln2(x))
            if ("resid", arch.n_layers) in patch:
                x = put(x, *patch[("resid", arch.n_layers)])
            resids.append(x)
            if cache is not None and not start:
                cache["resid"] = torch.stack(resids)
                cache["z"] = torch.stack(zs)
                cache["attn"] = torch.stack(attns)
            return self.lens(x)

    return MCQAModel()


# ----------------------------------------------------------------------------------------------
# Training and the checkpoint
# ----------------------------------------------------------------------------------------------

def checkpoint_path():
    from engine.core.nn import asset_path

    return asset_path(f"{SLUG}/mcqa_model.pt")


def train(arch: Arch, steps: int, seed: int, batch: int = 256, lr: float = 3e-3, fact_weight: float = 1.0,
          progress=None, log=None, init=None, lm_weight: float = 0.0):
    """AdamW with warm-up and cosine decay. Loss: cross-entropy on the answer letter at the last position,
    plus (weight fact_weight) cross-entropy on the item's colour at the item's position, a stand-in for
    the facts a language model learns in pretraining, plus (weight lm_weight; SHIPPED_LM_WEIGHT for the shipped
    model) next-token cross-entropy at every other position but the item's, as in language-model pretraining."""
    torch = _torch()
    from engine.core.nn import set_cpu_threads

    set_cpu_threads(1)
    seed_everything(seed)
    device = get_device()
    rng = np.random.default_rng(seed + 1)
    model = (build_model(arch) if init is None else init).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))))
    losses = np.zeros(steps)
    t0 = time.time()
    for s in range(steps):
        b = sample_prompts(batch, rng, p_shuffled=P_SHUFFLED)
        x = torch.as_tensor(b.ids, device=device)
        y = torch.as_tensor(LETTER_IDS[b.answer], device=device)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits[:, -1], y)
        if fact_weight:
            # "pretraining knowledge": right after the item, the model also learns to say its colour
            item = np.searchsorted(ITEM_IDS, b.ids[:, 1])
            yc = torch.as_tensor(COLOUR_IDS[FACTS[item]], device=device)
            loss = loss + fact_weight * torch.nn.functional.cross_entropy(logits[:, 1], yc)
        if lm_weight:
            pos = [0] + list(range(2, SEQ_LEN - 1))  # position 1 already predicts the item's colour
            loss = loss + lm_weight * torch.nn.functional.cross_entropy(
                logits[:, pos].reshape(-1, logits.shape[-1]), x[:, [p + 1 for p in pos]].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses[s] = float(loss.detach())
        if s % 25 == 0 or s == steps - 1:
            report(progress, (s + 1) / steps, f"training: step {s + 1}/{steps}, loss {losses[s]:.3f}")
        if log is not None and (s % 250 == 0 or s == steps - 1):
            log(f"step {s}: loss {losses[s - 249 if s >= 249 else 0:s + 1].mean():.4f} ({time.time() - t0:.0f} s)")
    model.eval()
    return model, losses


def save_checkpoint(model, arch: Arch, losses: np.ndarray) -> None:
    import copy

    from engine.core.nn import save_state

    m = copy.deepcopy(model).cpu().half()
    save_state(m, checkpoint_path(), extra={"arch": arch.to_dict(), "steps": len(losses),
                                            "loss_curve": _torch().tensor(losses[::10], dtype=_torch().float32)})


def load_checkpoint(device=None):
    from engine.core.nn import load_state

    path = checkpoint_path()
    if not path.exists():
        raise InputError(f"the checkpoint {path.name} is missing; run `python -m engine.mcqa_mechanics train`")
    blob = load_state(path)
    arch = Arch(**blob["extra"]["arch"])
    model = build_model(arch)
    model.load_state_dict({k: v.float() for k, v in blob["state"].items()})
    model.eval()
    if device is not None:
        model.to(device)
    return model, blob["extra"]["loss_curve"].numpy()


# ----------------------------------------------------------------------------------------------
# Analyses
# ----------------------------------------------------------------------------------------------

def forward_np(model, ids, device, patch=None, cache=None):
    torch = _torch()
    with torch.no_grad():
        return model(torch.as_tensor(ids, device=device), patch=patch, cache=cache)


def logit_diff(logits_last, a_ans, b_ans):
    """Mean over pairs of logit[B's letter] - logit[A's letter] at the last position."""
    torch = _torch()
    n = logits_last.shape[0]
    idx = torch.arange(n, device=logits_last.device)
    la = torch.as_tensor(LETTER_IDS[a_ans], device=logits_last.device)
    lb = torch.as_tensor(LETTER_IDS[b_ans], device=logits_last.device)
    return float((logits_last[idx, lb] - logits_last[idx, la]).mean())


def lens_by_layer(model, batch: Batch, device) -> dict[str, np.ndarray]:
    """Logit lens at the last position: logits of the four letters after each layer, accuracy among the
    letters, and the correct letter's rank in the whole vocabulary (0 = top)."""
    cache: dict = {}
    forward_np(model, batch.ids, device, cache=cache)
    torch = _torch()
    with torch.no_grad():
        full = model.lens(cache["resid"][:, :, -1])  # (L+1, N, V)
    full = full.float().cpu().numpy()
    letters = full[:, :, LETTER_IDS]  # (L+1, N, 4)
    n = len(batch.answer)
    correct = full[:, np.arange(n), LETTER_IDS[batch.answer]]
    rank = (full > correct[:, :, None]).sum(axis=2)
    acc = (letters.argmax(axis=2) == batch.answer[None]).mean(axis=1)
    # per letter: mean logit when it is the answer vs when it is not
    is_ans = np.eye(4, dtype=bool)[batch.answer]  # (N, 4)
    corr_logit = (letters * is_ans).sum(2) / 1.0
    other_logit = (letters * ~is_ans).sum(2) / 3.0
    return {"letters": letters, "acc": acc, "rank": rank.mean(axis=1), "top1": (rank == 0).mean(axis=1),
            "correct_logit": corr_logit.mean(1), "other_logit": other_logit.mean(1), "full_final": full[-1]}


def probe_by_layer(model, batch: Batch, n_fit: int, device, ridge: float = 1e-5) -> dict[str, np.ndarray]:
    """Linear read-out of the residual stream at the last position, layer by layer: least squares (ridge
    ``ridge`` * n_fit) from the standardised stream onto one-hot targets, fitted on the first ``n_fit`` prompts
    and scored (argmax) on the rest, for the answer letter and for the slot of the right option. On
    shuffled-symbol prompts the two differ, so a high letter accuracy means the symbol itself (not its
    position) is in the residual stream, whether or not the unembedding can read it. Least squares is the
    cheap choice (10 small solves; scikit-learn's logistic regression on one 600 / 600 split of the shipped
    model: 0.66 / 0.86 after blocks 2 / 3, least squares 0.75 / 0.88). A diagnostic next to the lens, not a
    claim: the paper's measure is the vocabulary projection."""
    cache: dict = {}
    forward_np(model, batch.ids, device, cache=cache)
    x = cache["resid"][:, :, -1].double().cpu().numpy()  # (L+1, N, d)
    out = {}
    for name, y in (("letter", batch.answer), ("slot", batch.slot)):
        acc = np.zeros(x.shape[0])
        for li in range(x.shape[0]):
            xf, xt = x[li, :n_fit], x[li, n_fit:]
            mu, sd = xf.mean(0), xf.std(0) + 1e-6
            a = np.c_[(xf - mu) / sd, np.ones(n_fit)]
            w = np.linalg.solve(a.T @ a + ridge * n_fit * np.eye(a.shape[1]), a.T @ np.eye(4)[y[:n_fit]])
            acc[li] = float((((np.c_[(xt - mu) / sd, np.ones(len(xt))]) @ w).argmax(1) == y[n_fit:]).mean())
        out[name] = acc
    return out


def recovery(ld, ld_a, ld_b):
    return (ld - ld_a) / (ld_b - ld_a) if abs(ld_b - ld_a) > 1e-9 else float("nan")


def _tile(t, reps: int):
    return t.repeat(reps, *([1] * (t.ndim - 1)))


def patch_all(model, a: Batch, b: Batch, device, head_positions: str, progress=None) -> dict:
    """Residual patching per (layer, position) and single-head patching. Many patches run in one batch:
    A's prompts are tiled once per patch and a row mask says which copy gets which patch."""
    torch = _torch()
    arch = model.arch
    L, H, T = arch.n_layers, arch.n_heads, SEQ_LEN
    n = len(a.answer)
    ca, cb = {}, {}
    la = forward_np(model, a.ids, device, cache=ca)[:, -1]
    lb = forward_np(model, b.ids, device, cache=cb)[:, -1]
    ld_a, ld_b = logit_diff(la, a.answer, b.answer), logit_diff(lb, a.answer, b.answer)
    xa = torch.as_tensor(a.ids, device=device)
    eye = torch.eye(T, dtype=torch.bool, device=device)
    resid = np.zeros((L + 1, T))
    with torch.no_grad():
        for li in range(L + 1):
            mask = eye.repeat_interleave(n, dim=0)  # copy p patches position p
            out = model(_tile(xa, T), patch={("resid", li): (mask, _tile(cb["resid"][li], T))}, start=li,
                        x_start=_tile(ca["resid"][li], T))[:, -1]
            for p in range(T):
                rows = slice(p * n, (p + 1) * n)
                resid[li, p] = recovery(logit_diff(out[rows], a.answer, b.answer), ld_a, ld_b)
            report(progress, 0.8 * (li + 1) / (L + 1), f"patching the residual stream, layer {li}")
    pos = [T - 1] if head_positions == "last position" else list(range(T))
    heads = np.array([patch_head_sets(model, a, b, device, [[(li, h)] for h in range(H)], ca, cb, pos, ld_a, ld_b)
                      for li in range(L)])
    report(progress, 1.0, "patching heads")
    return {"resid": resid, "heads": heads, "ld_a": ld_a, "ld_b": ld_b, "cache_a": ca, "cache_b": cb, "pos": pos,
            "acc_a": float((la[:, LETTER_IDS].argmax(1).cpu().numpy() == a.answer).mean()),
            "acc_b": float((lb[:, LETTER_IDS].argmax(1).cpu().numpy() == b.answer).mean())}


def patch_head_sets(model, a: Batch, b: Batch, device, sets: list, ca, cb, pos, ld_a, ld_b) -> list[float]:
    """Recovery when every head of a set is patched at once (one set per tiled copy of A's prompts)."""
    torch = _torch()
    n, T, S = len(a.answer), SEQ_LEN, len(sets)
    posmask = torch.zeros(T, dtype=torch.bool, device=device)
    posmask[pos] = True
    patch = {}
    for si, hs in enumerate(sets):
        for li, h in hs:
            key = ("head", li, h)
            if key not in patch:
                patch[key] = (torch.zeros(S * n, T, dtype=torch.bool, device=device), _tile(cb["z"][li][:, h], S))
            patch[key][0][si * n:(si + 1) * n] = posmask
    first = min(li for hs in sets for li, _ in hs)  # blocks before the first patched one are unchanged
    with torch.no_grad():
        out = model(torch.as_tensor(np.tile(a.ids, (S, 1)), device=device), patch=patch, start=first,
                    x_start=_tile(ca["resid"][first], S))[:, -1]
    return [recovery(logit_diff(out[si * n:(si + 1) * n], a.answer, b.answer), ld_a, ld_b) for si in range(S)]


# ----------------------------------------------------------------------------------------------
# Config, run, claims
# ----------------------------------------------------------------------------------------------

LENS_BAR = 0.85  # lens accuracy (among the four letters) that counts as "decodable"
JUMP_BAR = 0.5  # the rise of lens accuracy over the one layer where it becomes decodable
ACC_BAR = 0.9
HEAD_BAR = 0.7  # joint recovery of the top-k heads
MIDDLE_LABEL = "decodable before the last layer and from then on (1 = yes)"
MIN_GAP = 2.0  # logits between prompt B's and prompt A's logit difference, for recovery to be meaningful
N_EVAL = 200  # fresh test prompts of each kind for the accuracy
# fresh prompts of the chosen variant for the lens statistics (a forward pass each, ~30 ms in all): the lens on
# the 64 pair prompts alone has a standard error of ~0.06 per layer, enough to move the sudden-rise badge
# (true rise 0.50 in order / 0.51 shuffled, on 4000 prompts) from 0.38 to 0.58 between seeds
N_LENS = 2000
# shuffled-symbol prompts for the linear read-out next to the lens (half to fit, half to score; one forward
# pass and ten 65 x 65 solves): accuracy s.e. ~0.015 on the 600 scored prompts
N_PROBE = 1200
MAX_CURVE = 6  # the "top 1..k heads" curve stops here
N_RANDOM = 8  # random k-head sets as a control
FRESH_SEED = 50_000  # fresh pairs (seed + this) on which the top heads, ranked on the page's pairs, are scored again
# joint recovery of the top-k heads of the shipped model at seed 0, quoted by the page's head-patching note;
# tests/test_mcqa_mechanics.py re-measures both and keeps the quote true
QUOTED_TOPK = {"shuffled symbols": {3: 0.56, 4: 0.70, 6: 0.92}, "A B C D in order": {3: 0.92}}


@dataclass(frozen=True)
class Config:
    variant: str = param(VARIANTS[0], Choice(VARIANTS, "Prompt variant", widget="radio",
                                             help="symbols in the order A B C D (pairs move the answer to "
                                                  "another slot), or shuffled symbols (pairs relabel the "
                                                  "options)"))
    top_k: int = param(3, Int(1, 6, "Heads patched together (top k)",
                              help="the k heads with the largest single-head recovery, patched at once"))
    head_positions: str = param("last position", Choice(("last position", "all positions"),
                                                        "Head patching at", widget="radio"))
    n_pairs: int = param(64, Int(32, 512, "Prompt pairs", step=32, help="counterfactual pairs averaged over"))
    example: int = param(0, Int(0, 31, "Example pair to show"))
    seed: int = param(0, Int(0, 9, "Seed", help="which prompt pairs and test prompts are drawn"))


# largest widget setting (most pairs and heads, all positions): 8 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(n_pairs=512, top_k=6, head_positions="all positions", variant="shuffled symbols")



@dataclass
class Result:
    variant: str
    n_layers: int
    n_heads: int
    lens_letters_mean: np.ndarray  # (L+1, 4): mean logit of A..D by layer (all prompts)
    lens_acc: np.ndarray  # (L+1,)
    lens_rank: np.ndarray  # (L+1,)
    lens_top1: np.ndarray  # (L+1,) share of prompts where the correct letter tops the whole vocabulary
    lens_correct: np.ndarray
    lens_other: np.ndarray
    probe_letter: np.ndarray  # (L+1,) linear read-out of the letter at the last position (shuffled prompts)
    probe_slot: np.ndarray  # (L+1,) same read-out for the slot of the right option (the control)
    example_letters: np.ndarray  # (L+1, 4) for the example prompt A
    example_text_a: str
    example_text_b: str
    example_answer_a: str
    example_answer_b: str
    resid_patch: np.ndarray  # (L+1, T)
    head_patch: np.ndarray  # (L, H)
    top_heads: list
    topk_curve: np.ndarray  # joint recovery of the top 1..L*H heads
    topk_curve_fresh: np.ndarray  # the same head sets scored on fresh pairs (not used to rank the heads)
    random_k: np.ndarray  # joint recovery of random k-head sets
    attn_top: np.ndarray  # (T,) attention of the top head from the last position (example A)
    loss_curve: np.ndarray
    metrics: dict


def run(config: Config, progress=None) -> Result:
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    device = get_device()
    report(progress, 0.02, "loading the checkpoint")
    model, loss_curve = load_checkpoint(device)
    return analyse(model, loss_curve, config, device, ProgressSpan(progress, 0.05, 1.0))


def analyse(model, loss_curve, config: Config, device, work: ProgressSpan | None = None) -> Result:
    """Every measurement of the page on a given model (the shipped one in ``run``; the training script
    also calls it on models it has just trained)."""
    work = work if work is not None else ProgressSpan(None, 0.0, 1.0)
    rng = seed_everything(config.seed)
    arch = model.arch
    L, H = arch.n_layers, arch.n_heads
    rng = np.random.default_rng(rng.integers(1 << 31))
    a, b = make_pairs(config.n_pairs, config.variant, rng)
    # evaluation on fresh prompts of both kinds
    ev_in = sample_prompts(N_EVAL, np.random.default_rng(10_000 + config.seed), p_shuffled=0.0)
    ev_sh = sample_prompts(N_EVAL, np.random.default_rng(20_000 + config.seed), p_shuffled=1.0)
    accs = {}
    for name, ev in (("acc_in_order", ev_in), ("acc_shuffled", ev_sh)):
        out = forward_np(model, ev.ids, device)[:, -1].float().cpu().numpy()
        accs[name] = float((out.argmax(1) == LETTER_IDS[ev.answer]).mean())
    lens = lens_by_layer(model, a, device)              # the pair prompts: the example shown on the page
    p_sh = 1.0 if config.variant == VARIANTS[1] else 0.0
    lens_ev = lens_by_layer(model, sample_prompts(N_LENS, np.random.default_rng(30_000 + config.seed),
                                                  p_shuffled=p_sh), device)
    probe = probe_by_layer(model, sample_prompts(N_PROBE, np.random.default_rng(40_000 + config.seed),
                                                 p_shuffled=1.0), N_PROBE // 2, device)
    pr = patch_all(model, a, b, device, config.head_positions, progress=work.sub(0.0, 0.85))
    flat = pr["heads"].ravel()
    order = np.argsort(-flat)
    heads_sorted = [(int(i // H), int(i % H)) for i in order]
    k = min(config.top_k, L * H)
    rr = np.random.default_rng(config.seed + 77)
    randoms = [[(int(i // H), int(i % H)) for i in rr.choice(L * H, size=k, replace=False)] for _ in range(N_RANDOM)]
    n_curve = min(L * H, MAX_CURVE)
    sets = [heads_sorted[:j] for j in range(1, n_curve + 1)] + [heads_sorted[:k]] + randoms
    rec = np.array(patch_head_sets(model, a, b, device, sets, pr["cache_a"], pr["cache_b"], pr["pos"], pr["ld_a"], pr["ld_b"]))
    curve, topk, rnd = rec[:n_curve], rec[n_curve], rec[n_curve + 1:]
    # the heads were ranked on these same pairs, so their joint recovery here can be flattered by the choice; the
    # same sets are scored again on as many fresh pairs that played no part in ranking them
    fa, fb = make_pairs(config.n_pairs, config.variant, np.random.default_rng(FRESH_SEED + config.seed))
    fca, fcb = {}, {}
    fla = forward_np(model, fa.ids, device, cache=fca)[:, -1]
    flb = forward_np(model, fb.ids, device, cache=fcb)[:, -1]
    fld_a, fld_b = logit_diff(fla, fa.answer, fb.answer), logit_diff(flb, fa.answer, fb.answer)
    frec = np.array(patch_head_sets(model, fa, fb, device, sets[:n_curve + 1], fca, fcb, pr["pos"], fld_a, fld_b))
    fresh_curve, fresh_topk = frec[:n_curve], frec[n_curve]
    report(work, 0.95, "summarising")
    ex = int(min(config.example, config.n_pairs - 1))
    tl, th = heads_sorted[0]
    ca: dict = {}
    forward_np(model, a.ids[ex:ex + 1], device, cache=ca)
    attn_top = ca["attn"][tl, 0, th, -1].float().cpu().numpy()

    acc = lens_ev["acc"]
    first = np.flatnonzero(acc >= LENS_BAR)
    first_layer = int(first[0]) if first.size else -1  # -1: never decodable (the claims then fail)
    jump = float(acc[first_layer] - acc[first_layer - 1]) if first_layer >= 1 else float("nan")
    # how concentrated the residual effect at the last position is across layers: the residual stream at
    # the last position carries the answer only from some layer on
    last_col = pr["resid"][:, -1]
    first_patch = np.flatnonzero(last_col >= 0.5)
    metrics = {
        **accs,
        "acc_pairs_a": pr["acc_a"], "acc_pairs_b": pr["acc_b"],
        "ld_a": pr["ld_a"], "ld_b": pr["ld_b"],
        "lens_first_layer": float(first_layer) if first_layer >= 0 else float("nan"),
        "lens_jump": jump,
        # binomial s.e. of the rise (the two layers' accuracies treated as independent: a conservative bound)
        "lens_jump_se": float(np.sqrt(sum(q * (1 - q) for q in acc[max(first_layer - 1, 0):first_layer + 1])
                                      / N_LENS)) if first_layer >= 1 else float("nan"),
        "lens_middle": float(1 <= first_layer < L and bool(np.all(acc[first_layer:] >= LENS_BAR))),
        "lens_acc_embed": float(acc[0]),
        "lens_acc_final": float(acc[-1]),
        # first residual stream from which a linear read-out finds the letter (same bar as the lens)
        "probe_first_layer": float(np.flatnonzero(probe["letter"] >= LENS_BAR)[0])
        if np.any(probe["letter"] >= LENS_BAR) else float("nan"),
        "ld_gap": pr["ld_b"] - pr["ld_a"],
        # recovery only means something when the two prompts' logit differences really differ
        "topk_recovery": float(topk) if pr["ld_b"] - pr["ld_a"] >= MIN_GAP else float("nan"),
        "topk_recovery_fresh": float(fresh_topk) if fld_b - fld_a >= MIN_GAP else float("nan"),
        "random_k_recovery_mean": float(rnd.mean()),
        "random_k_recovery_max": float(rnd.max()),
        "top_single_recovery": float(flat.max()),
        "k": float(k),
        "n_heads_total": float(L * H),
        "last_pos_first_layer": float(first_patch[0]) if first_patch.size else float("nan"),
        "heads_for_90": float(np.flatnonzero(curve >= 0.9)[0] + 1) if np.any(curve >= 0.9) else float("nan"),
        # smallest top-k set reaching the head badge's bar (nan: none of the first MAX_CURVE), and the block whose
        # heads carry the most single-head recovery (the page names it when the badge fails)
        "heads_for_bar": float(np.flatnonzero(curve >= HEAD_BAR)[0] + 1) if np.any(curve >= HEAD_BAR)
        else float("nan"),
        "busiest_block": float(np.argmax(pr["heads"].sum(1))),
    }
    return Result(
        variant=config.variant, n_layers=L, n_heads=H,
        lens_letters_mean=lens_ev["letters"].mean(axis=1), lens_acc=acc, lens_rank=lens_ev["rank"],
        lens_top1=lens_ev["top1"], lens_correct=lens_ev["correct_logit"], lens_other=lens_ev["other_logit"],
        probe_letter=probe["letter"], probe_slot=probe["slot"],
        example_letters=lens["letters"][:, ex],
        example_text_a=render(a.ids[ex]), example_text_b=render(b.ids[ex]),
        example_answer_a=LETTERS[a.answer[ex]], example_answer_b=LETTERS[b.answer[ex]],
        resid_patch=pr["resid"], head_patch=pr["heads"], top_heads=heads_sorted[:k],
        topk_curve=curve, topk_curve_fresh=fresh_curve, random_k=rnd, attn_top=attn_top, loss_curve=np.asarray(loss_curve),
        metrics=metrics,
    )


def _layer_name(li: float, L: int) -> str:
    if not np.isfinite(li):
        return "none (never decodable)"
    li = int(li)
    return "the embeddings" if li == 0 else f"after block {li} of {L}" + (" (the output)" if li == L else "")


def claims(result: Result) -> list:
    from engine.core import Claim

    m = result.metrics
    L = result.n_layers
    k = int(m["k"])
    heads = ", ".join(f"L{la + 1}H{h + 1}" for la, h in result.top_heads)
    return [
        Claim("The model answers the synthetic questions (it knows the facts and outputs the right symbol).",
              m["acc_shuffled"] if result.variant == VARIANTS[1] else m["acc_in_order"], ">=", ACC_BAR,
              label=f"accuracy ({result.variant})",
              detail=f"chance is 0.25; in order {m['acc_in_order']:.3f}, shuffled symbols {m['acc_shuffled']:.3f}"),
        Claim("The answer symbol is not decodable from the early residual stream: under the vocabulary "
              "projection it first becomes readable only after several layers.",
              m["lens_first_layer"], ">=", 2, label=f"first layer with lens accuracy ≥ {LENS_BAR}",
              detail=f"layer 0 = embeddings, {L} = output; lens accuracy by layer: "
                     + ", ".join(f"{v:.2f}" for v in result.lens_acc)
                     + ". A weak check by itself: layer 0 at the last position is the same for every prompt, and "
                       "one block cannot both find the right option and fetch its letter; the next two badges "
                       "carry the claim", fmt=".0f"),
        Claim("It appears abruptly, within a single layer, rather than building up gradually.",
              m["lens_jump"], ">=", JUMP_BAR, label="rise of lens accuracy over that one layer",
              detail=f"accuracy among the four letters (chance 0.25) on {N_LENS} fresh prompts, s.e. ≈ "
                     f"{m['lens_jump_se']:.3f}; a rise this close to the bar can flip with the seed"
                     if abs(m["lens_jump"] - JUMP_BAR) < 2 * m["lens_jump_se"] else
                     f"accuracy among the four letters (chance 0.25) on {N_LENS} fresh prompts, s.e. ≈ "
                     f"{m['lens_jump_se']:.3f}"),
        Claim("It becomes decodable in a middle layer, before the last one, and stays decodable after it.",
              m["lens_middle"], ">=", 1, label=MIDDLE_LABEL,
              detail=f"first decodable residual stream: {_layer_name(m['lens_first_layer'], L)}", fmt=".0f"),
        Claim(f"Patching a small set of attention heads (here {k} of {int(m['n_heads_total'])}) moves most "
              "of the logit difference between the two prompts.",
              m["topk_recovery"], ">=", HEAD_BAR, label=f"recovery by the top {k} heads",
              detail=f"heads {heads}, ranked and scored on the page's pairs; "
                     f"on as many fresh pairs not used to rank them they recover {m['topk_recovery_fresh']:.2f}; "
                     f"{k} random heads recover {m['random_k_recovery_mean']:.2f} on average "
                     f"(max {m['random_k_recovery_max']:.2f} of {N_RANDOM} draws)"),
    ]


# ----------------------------------------------------------------------------------------------
# Training script
# ----------------------------------------------------------------------------------------------

def _accuracy(model, device, p_shuffled: float, n: int = 2000) -> float:
    ev = sample_prompts(n, np.random.default_rng(99), p_shuffled=p_shuffled)
    out = forward_np(model, ev.ids, device)[:, -1].float().cpu().numpy()
    return float((out.argmax(1) == LETTER_IDS[ev.answer]).mean())


def depth_experiment(n_layers: int, steps: int, lm_weight: float = 0.0, train_seed: int = TRAIN_SEED) -> dict:
    """The experiments recorded in the module docstring: the shipped recipe (stage 1 for ``steps`` steps, a
    half-precision round trip as the saved checkpoint does, then stage 2) on a model of the same width with
    ``n_layers`` blocks, with the next-token loss weight ``lm_weight`` and training seed ``train_seed``, evaluated
    like the page at seeds 0, 1, 2; no model is saved. Returns the page-seed-0 summary (see ``seed_summary``)."""
    arch = Arch(n_layers=n_layers)
    t0 = time.time()
    model, _ = train(arch, steps, train_seed, batch=SHIPPED_BATCH, log=print, lm_weight=lm_weight)
    model = model.cpu().half().float()
    model, _ = train(arch, RESUME_STEPS, train_seed + 1, batch=SHIPPED_BATCH, lr=RESUME_LR, log=print, init=model,
                     lm_weight=lm_weight)
    model = model.cpu().half().float()  # what a saved checkpoint would hold
    print(f"{n_layers} layers, {steps} + {RESUME_STEPS} steps, next-token weight {lm_weight}, training seed "
          f"{train_seed}, {time.time() - t0:.0f} s")
    print(f"accuracy in order {_accuracy(model, 'cpu', 0.0):.4f}, shuffled {_accuracy(model, 'cpu', 1.0):.4f}")
    out = {}
    for seed in (0, 1, 2):
        r = analyse(model, np.zeros(1), Config(seed=seed), "cpu")
        print(f"seed {seed}: lens accuracy by layer", ", ".join(f"{v:.2f}" for v in r.lens_acc),
              "| letter read-out (shuffled)", ", ".join(f"{v:.2f}" for v in r.probe_letter),
              "| badges", " ".join(f"{'pass' if c.passed else 'FAIL'} {float(c.measured):.3f}" for c in claims(r)))
        if seed == 0:
            out = seed_summary(r)
    out.update(train_seed=train_seed, accuracy_in_order=_accuracy(model, "cpu", 0.0),
               accuracy_shuffled=_accuracy(model, "cpu", 1.0))
    return out


# ``python -m engine.mcqa_mechanics seeds`` retrains the shipped recipe at these training seeds (about 2.5 min each on
# one core) and writes SEEDS_FILE; the page's robustness note reads it, and a test checks that its seed-0 row is
# what the shipped checkpoint gives at the default settings (the shipped model is that training run)
TRAINING_SEEDS = (0, 10, 20, 30, 40)
SEEDS_FILE = "mcqa-mechanics/training_seeds.json"


def seed_summary(r: Result) -> dict:
    """What the robustness note needs from one analysis: lens accuracy by layer, the first decodable layer, whether
    the letter is readable in the middle, the top-k head recovery and every badge's verdict."""
    m = r.metrics
    return {"lens_acc": [float(v) for v in r.lens_acc], "lens_first_layer": m["lens_first_layer"],
            "lens_middle": m["lens_middle"], "topk_recovery": m["topk_recovery"],
            "badges": {c.label: bool(c.passed) for c in claims(r)}}


def load_training_seeds() -> dict | None:
    from engine.core.surveys import load_survey

    return load_survey(SEEDS_FILE, "runs")


def main(argv: list[str]) -> None:
    """``train``: stage 1 from scratch (SHIPPED_STEPS); ``train resume``: stage 2, continue the saved model
    for RESUME_STEPS at a lower learning rate (the shipped checkpoint is stage 1 followed by stage 2).
    ``depth LAYERS STEPS [LM_WEIGHT [TRAIN_SEED]]``: the depth / objective / training-seed experiments (see
    ``depth_experiment``)."""
    if argv == ["seeds"]:
        from engine.core.surveys import write_survey

        runs = [depth_experiment(SHIPPED_ARCH.n_layers, SHIPPED_STEPS, SHIPPED_LM_WEIGHT, s) for s in TRAINING_SEEDS]
        print(f"wrote {write_survey(SEEDS_FILE, {'runs': runs})}")
        return
    if len(argv) in (3, 4, 5) and argv[0] == "depth":
        depth_experiment(int(argv[1]), int(argv[2]), float(argv[3]) if len(argv) >= 4 else 0.0,
                         int(argv[4]) if len(argv) == 5 else TRAIN_SEED)
        return
    if not argv or argv[0] != "train":
        print("usage: python -m engine.mcqa_mechanics train [resume] | seeds | depth LAYERS STEPS [LM_WEIGHT [TRAIN_SEED]]")
        return
    t0 = time.time()
    if len(argv) > 1 and argv[1] == "resume":
        init, old = load_checkpoint()
        model, losses = train(SHIPPED_ARCH, RESUME_STEPS, TRAIN_SEED + 1, batch=SHIPPED_BATCH, lr=RESUME_LR,
                              log=print, init=init, lm_weight=SHIPPED_LM_WEIGHT)
        losses = np.concatenate([np.repeat(old, 10), losses])
    else:
        model, losses = train(SHIPPED_ARCH, SHIPPED_STEPS, TRAIN_SEED, batch=SHIPPED_BATCH, log=print,
                              lm_weight=SHIPPED_LM_WEIGHT)
    dev = next(model.parameters()).device
    for name, p in (("in order", 0.0), ("shuffled", 1.0)):
        print(f"accuracy {name}: {_accuracy(model, dev, p):.4f}")
    save_checkpoint(model, SHIPPED_ARCH, losses)
    print(f"saved {checkpoint_path()} ({checkpoint_path().stat().st_size / 1024:.0f} KiB) in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
