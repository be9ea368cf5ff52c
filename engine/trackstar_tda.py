"""TrackStar fact tracing at toy scale: corrected, projected, whitened, normalised gradients vs BM25.

A synthetic world of 240 facts (80 subjects x 3 relations) is written as ~1 200 short training passages
(paraphrases that state a fact, plus distractors that only mention a subject or an object). A small
causal MLP language model (context of 6 tokens) is trained on them once by ``python -m
engine.trackstar_tda train``; the checkpoint keeps the AdamW state, which the optimizer correction and
the tail-patch test need.

At run time every passage and every query is encoded by its loss gradient (torch.func vmap + grad),
optionally divided by sqrt of the Adam second moment, projected with seeded Kronecker-factored Gaussian
matrices, whitened by a mixed query/train autocorrelation matrix and unit-normalised. Retrieval quality
is measured two ways: attribution (does the top of the list contain a passage that states the fact?)
and influence (tail-patch: one AdamW step on a retrieved passage; how much does log p(answer) rise?).
An opt-in third test is leave-some-out retraining: continue training from the checkpoint without each
method's top passages for a group of queries and measure how much log p(answer) drops.

Audit notes (offline, seed 0, d = 1024). The Hessian mix λ follows the paper's appendix rule (spectra cross at
~1.5 % of d, λ ≈ 0.006 here); a fixed λ = 0.9 let the query term, ~110 times larger in trace, dominate ~200 of the
240 query directions (MRR 0.48 instead of 0.60). Exact tail-patch gains of every passage for all 240 queries: the
best 3 passages per query give +0.151, the passages that state the fact +0.039, random passages −0.013. Mean
per-query Spearman correlation of the scores with those gains: grad·grad 0.26, Adam cosine 0.16, TrackStar 0.03,
BM25 0.05. The memorised sources have small gradients; the gains come from high-loss passages that mention the
answer word, whose directions dominate R_train and are damped by the whitening. Putting ε outside the square root
(Adam's form) moves TrackStar's tail-patch but blows up the ~3 000 parameters with v̂ < 1e-8; we keep the spec's
sqrt(v̂ + ε).
(Those gains were measured against the unpatched model; Δ is now taken against the same AdamW step with a zero
gradient, see ``tail_patch_gain``, which adds about +0.02 to each of them and puts random passages at ~0.)

Second audit (seed 0, 60 queries x all 1 200 passages, exact gains). The first-order formula η(1−β₁)/bc₁ ·
g_q·(g_z/sqrt(v̂+ε)) has mean per-query Spearman 0.92 with the exact one-step gains: a single step is first-order
here, so the best retrieval for tail-patch is that one-sided Adam-scaled dot product (top-3 gain 0.144, oracle 0.155,
unprojected; gains in this paragraph against the unpatched model). Across all patched pairs of a default run (Pearson
r, metric ``tp_first_order_r``) the plain g_q·g_z tracks Δ at least as closely (``tp_plain_dot_r``): at the real
step size g_z is not small next to sqrt(v̂), so Adam's step is not linear in it; the page reports both. The whitening lowers tail-patch for every λ tried (0, the rule, 0.5, 0.9, 0.99), every d (133 to
4 136), every damping (0.01 to 1 x mean eigenvalue) and with dense Gaussian or CountSketch projections instead of the
Kronecker factors, so it is not an artefact of one setting. The Kronecker projection itself costs some tail-patch
(Adam cosine 0.110 at d = 1 010 vs 0.135 dense and 0.138 exact): query gradients are rank one per matrix, so its
error goes with the factor sizes (~20-30 here), not with d.

Model and fact recall (2026-12-06). The spec asks for a 2-layer, 4-head, d = 64 causal transformer (~120 k parameters,
context 12) trained until greedy fact recall >= 0.9; we ship the MLP above, which the issue allows. An offline run of
the spec's transformer (123 k parameters, 3 000 AdamW steps, same world and pipeline: per-example gradients checked
against a backward loop, tail-patch against torch's own AdamW step) left both failing badges failing at three training
seeds: claim-1 ratio 0.28 / 0.32 / 0.31 (MLP 0.23), rungs that raise tail-patch 2 / 1 / 1 of 3 (MLP 1), whitening
again the largest drop (-0.09 to -0.19, each > 3 s.e.); MRR and concentration moved by a few hundredths. Recall of 0.9
cannot be reached by memorising this world: 57 of the 240 facts never appear in the query's template (only in the
other two paraphrase templates), which caps it at 0.7625; the MLP reaches 0.70 and the transformer 0.71-0.80.
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from engine.core import Bool, Choice, Claim, Float, InputError, Int, get_device, param, seed_everything
from engine.core.progress import ProgressSpan, report

SLUG = "trackstar-tda"
CKPT_NAME = f"{SLUG}/lm.pt"

# --------------------------------------------------------------------------------------- synthetic world
N_SUBJ, N_OBJ = 80, 16
RELATIONS = ("capital", "born", "job")
OBJ_PREFIX = {"capital": "city", "born": "year", "job": "job"}
# three paraphrase templates per relation; the first one is the query template ("{o}" is the answer)
TEMPLATES = {
    "capital": ("the capital of {s} is {o} .", "{s} has its capital at {o} .",
                "{o} is the capital city of {s} ."),
    "born": ("{s} was born in {o} .", "the birth year of {s} is {o} .", "{o} saw the birth of {s} ."),
    "job": ("the job of {s} is {o} .", "{s} works as a {o} .", "{o} is the job held by {s} ."),
}
SUBJECT_MENTIONS = ("{s} visited the capital market .", "{s} has a big capital plan .",
                    "the birth of {s} was big news .", "{s} was born in a small town .",
                    "the job of {s} is not known .", "{s} works as a team .")
OBJECT_MENTIONS = ("{o} is a nice place to see .", "people like {o} a lot .", "we saw {o} in the news .",
                   "{o} is a word on the list .")
CTX = 6          # context length of the language model
MAXLEN = 12      # longest passage
PAD = "<pad>"
METHODS = ("bm25", "grad_dot", "grad_cos", "adam_cos", "trackstar", "custom")
GRAD_METHODS = METHODS[1:5]
BETAS = (0.9, 0.98)
LR, WD, EPS = 3e-3, 0.01, 1e-8


@dataclass
class World:
    vocab: list[str]
    passages: list[list[int]]           # token ids
    kind: np.ndarray                    # 0 proponent, 1 subject mention, 2 object mention
    fact_of: np.ndarray                 # fact index for proponents, -1 otherwise
    template_of: np.ndarray             # template index for proponents, -1 otherwise
    queries: list[list[int]]            # prompt ids
    targets: np.ndarray                 # answer id per query
    facts: list[tuple[int, str, int]]   # (subject, relation, object)
    proponents: list[np.ndarray]        # passage ids stating each fact

    def text(self, ids) -> str:
        return " ".join(self.vocab[i] for i in ids)

    def checksum(self) -> str:
        h = hashlib.sha1()
        for p in self.passages:
            h.update((",".join(map(str, p)) + ";").encode())
        return h.hexdigest()[:16]


def make_world(seed: int = 0) -> World:
    rng = np.random.default_rng(seed)
    subj = [f"s{i:02d}" for i in range(N_SUBJ)]
    objs = {r: [f"{OBJ_PREFIX[r]}{j:02d}" for j in range(N_OBJ)] for r in RELATIONS}
    words = sorted({w for ts in (*TEMPLATES.values(), SUBJECT_MENTIONS, OBJECT_MENTIONS) for t in ts
                    for w in t.split() if w not in ("{s}", "{o}")})
    vocab = [PAD] + words + subj + [o for r in RELATIONS for o in objs[r]]
    tid = {w: i for i, w in enumerate(vocab)}

    def enc(t: str, s: str | None = None, o: str | None = None) -> list[int]:
        return [tid[w] for w in t.format(s=s, o=o).split()]

    facts, passages, kind, fact_of, tmpl_of = [], [], [], [], []
    proponents: list[list[int]] = []
    n_counts = rng.choice([1, 2, 3, 4], size=N_SUBJ * len(RELATIONS), p=[0.2, 0.3, 0.3, 0.2])
    for si in range(N_SUBJ):
        for r in RELATIONS:
            facts.append((si, r, int(rng.integers(N_OBJ))))
    for f, (si, r, oi) in enumerate(facts):
        order = rng.permutation(3)
        ids = []
        for c in range(int(n_counts[f])):
            t = int(order[c % 3])
            ids.append(len(passages))
            passages.append(enc(TEMPLATES[r][t], subj[si], objs[r][oi]))
            kind.append(0), fact_of.append(f), tmpl_of.append(t)
        proponents.append(ids)
    n_prop = len(passages)
    for _ in range(n_prop // 2):
        t = SUBJECT_MENTIONS[int(rng.integers(len(SUBJECT_MENTIONS)))]
        passages.append(enc(t, subj[int(rng.integers(N_SUBJ))]))
        kind.append(1), fact_of.append(-1), tmpl_of.append(-1)
    for _ in range(n_prop - n_prop // 2):
        r = RELATIONS[int(rng.integers(3))]
        t = OBJECT_MENTIONS[int(rng.integers(len(OBJECT_MENTIONS)))]
        passages.append(enc(t, o=objs[r][int(rng.integers(N_OBJ))]))
        kind.append(2), fact_of.append(-1), tmpl_of.append(-1)
    queries, targets = [], []
    for si, r, oi in facts:
        full = enc(TEMPLATES[r][0], subj[si], objs[r][oi])
        cut = full.index(tid[objs[r][oi]])
        queries.append(full[:cut])
        targets.append(tid[objs[r][oi]])
    return World(vocab, passages, np.array(kind), np.array(fact_of), np.array(tmpl_of), queries,
                 np.array(targets), facts, [np.array(p, dtype=int) for p in proponents])


WORLD = make_world(0)


# --------------------------------------------------------------------------------------------- BM25
def bm25_scores(corpus: list[list], query: list, k1: float = 1.5, b: float = 0.75,
                epsilon: float = 0.25) -> np.ndarray:
    """Okapi BM25 of one query against every document (rank_bm25's BM25Okapi rule for the IDF floor).

    idf(t) = ln(N - n_t + 0.5) - ln(n_t + 0.5); a negative idf is replaced by epsilon x (mean idf over the
    corpus vocabulary). Each query token counts once per occurrence in the query.
    """
    n_docs = len(corpus)
    if n_docs == 0:
        raise InputError("BM25 needs at least one document")
    lens = np.array([len(d) for d in corpus], dtype=float)
    avgdl = lens.mean()
    df: dict = {}
    tfs = []
    for d in corpus:
        tf: dict = {}
        for w in d:
            tf[w] = tf.get(w, 0) + 1
        tfs.append(tf)
        for w in tf:
            df[w] = df.get(w, 0) + 1
    idf = {w: math.log(n_docs - n + 0.5) - math.log(n + 0.5) for w, n in df.items()}
    floor = epsilon * (sum(idf.values()) / len(idf))
    idf = {w: (v if v >= 0 else floor) for w, v in idf.items()}
    out = np.zeros(n_docs)
    norm = k1 * (1 - b + b * lens / avgdl)
    for q in query:
        f = np.array([tf.get(q, 0) for tf in tfs], dtype=float)
        out += idf.get(q, 0.0) * f * (k1 + 1) / (f + norm)
    return out


def bm25_matrix(corpus: list[list[int]], queries: list[list[int]], vocab_size: int, k1: float = 1.5,
                b: float = 0.75, epsilon: float = 0.25) -> np.ndarray:
    """The same BM25 rule as ``bm25_scores``, vectorised over integer-token queries (Q x D)."""
    D = len(corpus)
    tf = np.zeros((D, vocab_size))
    for i, d in enumerate(corpus):
        np.add.at(tf[i], np.asarray(d, dtype=int), 1.0)
    lens = tf.sum(1)
    df = (tf > 0).sum(0)
    present = df > 0
    idf = np.zeros(vocab_size)
    idf[present] = np.log(D - df[present] + 0.5) - np.log(df[present] + 0.5)
    floor = epsilon * idf[present].mean()
    idf[present & (idf < 0)] = floor
    norm = k1 * (1 - b + b * lens / lens.mean())
    term = idf[None, :] * tf * (k1 + 1) / (tf + norm[:, None])       # D x V
    qcount = np.zeros((len(queries), vocab_size))
    for j, q in enumerate(queries):
        np.add.at(qcount[j], np.asarray(q, dtype=int), 1.0)
    return qcount @ term.T


def rank_desc(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score; ties broken by the lower passage index (stable)."""
    return np.argsort(-scores, axis=-1, kind="stable")


# ------------------------------------------------------------------------------------------- the model
def _torch():
    import torch

    return torch


def encode_passages(world: World):
    """Fixed-shape next-token problems per passage: contexts (P, MAXLEN-1, CTX), targets and mask."""
    torch = _torch()
    P = len(world.passages)
    padded = np.zeros((P, CTX + MAXLEN), dtype=np.int64)   # CTX pads on the left, then the passage
    lens = np.array([len(t) for t in world.passages])
    for p, toks in enumerate(world.passages):
        padded[p, CTX:CTX + len(toks)] = toks
    t = np.arange(1, MAXLEN)                                  # predict token t from tokens t-CTX .. t-1
    X = padded[:, t[:, None] + np.arange(CTX)[None, :]]       # (P, MAXLEN-1, CTX)
    Y = padded[:, CTX + t]
    M = (t[None, :] < lens[:, None]).astype(np.float32)
    return torch.as_tensor(X), torch.as_tensor(Y * (M > 0)), torch.as_tensor(M)


def encode_prompts(prompts: list[list[int]]):
    torch = _torch()
    return torch.tensor([([0] * CTX + q)[-CTX:] for q in prompts], dtype=torch.long)


def init_params(vocab: int, d_emb: int = 12, hidden: int = 96, seed: int = 0) -> dict:
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    d_in = CTX * d_emb
    return {
        "emb": torch.randn(vocab, d_emb, generator=g) * 0.3,
        "W1": torch.randn(hidden, d_in, generator=g) / math.sqrt(d_in),
        "b1": torch.zeros(hidden),
        "W2": torch.randn(vocab, hidden, generator=g) / math.sqrt(hidden),
        "b2": torch.zeros(vocab),
    }


def logits_fn(params: dict, x):
    """x: (..., CTX) token ids -> (..., vocab) logits.

    With a stack of R models (every tensor in ``params`` has a leading R axis), x is (R, ..., CTX) and model r
    reads x[r]; used by the leave-some-out retraining, which trains R copies side by side.
    """
    torch = _torch()
    emb = params["emb"]
    if emb.dim() == 2:
        e = emb[x].flatten(-2)
        h = torch.tanh(e @ params["W1"].T + params["b1"])
        return h @ params["W2"].T + params["b2"]
    R = emb.shape[0]
    e = emb[torch.arange(R).reshape(R, *([1] * (x.dim() - 1))), x].flatten(-2)
    e2 = e.reshape(R, -1, e.shape[-1])
    h = torch.tanh(e2 @ params["W1"].transpose(1, 2) + params["b1"][:, None, :])
    z = h @ params["W2"].transpose(1, 2) + params["b2"][:, None, :]
    return z.reshape(*e.shape[:-1], z.shape[-1])


def passage_loss(params: dict, x, y, m):
    """Mean next-token cross-entropy of one passage (x: (T, CTX), y: (T,), m: (T,) mask)."""
    lp = _torch().log_softmax(logits_fn(params, x), -1)
    nll = -lp.gather(-1, y[:, None])[:, 0]
    return (nll * m).sum() / m.sum()


def query_loss(params: dict, x, y):
    """-log p(target | prompt) for one query (x: (CTX,), y: scalar)."""
    lp = _torch().log_softmax(logits_fn(params, x), -1)
    return -lp.gather(-1, y.reshape(1))[0]


def train(steps: int = 3000, batch: int = 64, seed: int = 0, progress=None, world: World = WORLD,
          init=None, drop=None):
    """Train the LM with AdamW; return (params, optimizer, fact recall).

    Default: from scratch (the shipped checkpoint). Leave-some-out mode: ``init`` = (params, exp_avg,
    exp_avg_sq, step) continues training from a saved state, and ``drop`` (R x passages, bool) trains R copies
    side by side, copy r never seeing the passages marked in drop[r]. All copies draw the same minibatch
    indices (common random numbers), so they differ only by the removed passages; the loss of each copy is
    the sum over its kept batch members divided by the full batch size. AdamW acts elementwise, so the
    stacked copies are exactly R independent runs. Then the recall is per copy (R,).
    """
    torch = _torch()
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    torch.manual_seed(seed)
    X, Y, M = encode_passages(world)
    P = X.shape[0]
    if init is None:
        params = {k: v.clone().requires_grad_(True) for k, v in init_params(len(world.vocab), seed=seed).items()}
    else:
        R = drop.shape[0]
        params = {k: v[None].repeat(R, *([1] * v.dim())).requires_grad_(True) for k, v in init[0].items()}
        keep = torch.as_tensor(~np.asarray(drop, dtype=bool), dtype=torch.float32)     # (R, P)
    opt = torch.optim.AdamW(list(params.values()), lr=LR, betas=BETAS, weight_decay=WD, eps=EPS)
    if init is not None:
        _, m0, v0, step0 = init
        opt.load_state_dict({"state": {i: {"step": torch.tensor(float(step0)),
                                           "exp_avg": m0[k][None].repeat(R, *([1] * m0[k].dim())),
                                           "exp_avg_sq": v0[k][None].repeat(R, *([1] * v0[k].dim()))}
                                       for i, k in enumerate(params)},
                             "param_groups": opt.state_dict()["param_groups"]})
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        idx = torch.randint(P, (batch,), generator=g)
        if init is None:
            lp = torch.log_softmax(logits_fn(params, X[idx]), -1)
            nll = -lp.gather(-1, Y[idx][..., None])[..., 0]
            loss = ((nll * M[idx]).sum(1) / M[idx].sum(1)).mean()
        else:
            Mi = M[idx]
            bi, ti = Mi.nonzero(as_tuple=True)                   # only the real (non-padding) positions
            xs, ys = X[idx][bi, ti], Y[idx][bi, ti]
            lp = torch.log_softmax(logits_fn(params, xs[None].expand(R, -1, -1)), -1)
            nll = -lp.gather(-1, ys[None, :, None].expand(R, -1, 1))[..., 0]                # (R, positions)
            wgt = keep[:, idx[bi]] / Mi.sum(1)[bi]               # passage-mean weight, 0 if removed
            loss = (nll * wgt).sum() / batch
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss = loss.detach()
        if step % 25 == 0 or step == steps - 1:
            report(progress, (step + 1) / steps, f"training LM: step {step + 1}/{steps}, loss {float(loss):.3f}")
    with torch.no_grad():
        prompts = encode_prompts(world.queries)
        if init is not None:
            prompts = prompts[None].expand(R, -1, -1)
        pred = logits_fn(params, prompts).argmax(-1).numpy()
    recall = np.mean(pred == world.targets, axis=-1)
    return {k: v.detach() for k, v in params.items()}, opt, (float(recall) if init is None else recall)


def save_checkpoint(params: dict, opt, recall: float, path=None) -> None:
    torch = _torch()
    from engine.core.nn import asset_path, save_state

    names = list(params)
    st = opt.state_dict()["state"]
    extra = {"step": int(st[0]["step"]), "fact_recall": recall, "world": WORLD.checksum()}
    for i, n in enumerate(names):
        extra[f"exp_avg.{n}"] = st[i]["exp_avg"].clone()
        extra[f"exp_avg_sq.{n}"] = st[i]["exp_avg_sq"].clone()
    save_state(torch.nn.ParameterDict({k: torch.nn.Parameter(v) for k, v in params.items()}),
               path or asset_path(CKPT_NAME), extra)


_CKPT_CACHE: dict = {}


def load_checkpoint(path=None):
    """(params, exp_avg, exp_avg_sq, step, fact_recall) from the shipped checkpoint."""
    from engine.core.nn import asset_path, load_state

    path = path or asset_path(CKPT_NAME)
    key = str(path)
    if key not in _CKPT_CACHE:
        if not path.exists():
            raise InputError(f"Checkpoint {path.name} is missing: run `python -m engine.trackstar_tda train`.")
        ck = load_state(path)
        if ck["extra"].get("world") != WORLD.checksum():
            raise InputError("The checkpoint was trained on a different synthetic world; retrain it.")
        params = dict(ck["state"])
        m = {n: ck["extra"][f"exp_avg.{n}"] for n in params}
        v = {n: ck["extra"][f"exp_avg_sq.{n}"] for n in params}
        _CKPT_CACHE[key] = (params, m, v, int(ck["extra"]["step"]), float(ck["extra"]["fact_recall"]))
    return _CKPT_CACHE[key]


# ------------------------------------------------------------------------------- gradients & encodings
def per_example_grads(params: dict, X, Y, M=None, chunk: int = 2048):
    """Flattened per-example loss gradients (N, |theta|) with torch.func.vmap(grad)."""
    torch = _torch()
    from torch.func import grad, vmap

    names = list(params)
    if M is None:
        g_fn = vmap(grad(query_loss), in_dims=(None, 0, 0))
    else:
        g_fn = vmap(grad(passage_loss), in_dims=(None, 0, 0, 0))
    out = []
    for i in range(0, X.shape[0], chunk):
        args = (X[i:i + chunk], Y[i:i + chunk]) + (() if M is None else (M[i:i + chunk],))
        gs = g_fn(params, *args)
        out.append(torch.cat([gs[n].reshape(gs[n].shape[0], -1) for n in names], 1))
    return torch.cat(out, 0)


def per_example_grads_fast(params: dict, X, Y, M=None):
    """The same per-example gradients as ``per_example_grads``, by hand-written batched backprop.

    Avoids the one-off tracing cost of torch.func (seconds on a busy CPU); tested against both vmap and a
    plain loop of ``loss.backward()``. Queries are passed as X (N, CTX), Y (N,) and get a single position.
    """
    torch = _torch()
    if M is None:
        X, Y, M = X[:, None, :], Y[:, None], torch.ones(X.shape[0], 1)
    N, T, C = X.shape
    emb, W1, b1, W2, b2 = (params[k] for k in ("emb", "W1", "b1", "W2", "b2"))
    V, de = emb.shape
    e = emb[X].reshape(N, T, C * de)
    h = torch.tanh(e @ W1.T + b1)
    prob = torch.softmax(h @ W2.T + b2, -1)
    w = (M / M.sum(1, keepdim=True))[..., None]                 # per-position loss weight
    dz = (prob - torch.nn.functional.one_hot(Y, V).to(prob.dtype)) * w   # (N, T, V)
    gW2 = torch.einsum("ntv,nth->nvh", dz, h)
    gb2 = dz.sum(1)
    da = (dz @ W2) * (1 - h * h)                                 # (N, T, H)
    gW1 = torch.einsum("nth,nti->nhi", da, e)
    gb1 = da.sum(1)
    dE = (da @ W1).reshape(N, T * C, de)                         # gradient per context slot
    gemb = torch.zeros(N, V, de, dtype=dE.dtype).scatter_add_(1, X.reshape(N, T * C, 1).expand(-1, -1, de), dE)
    out = {"emb": gemb, "W1": gW1, "b1": gb1, "W2": gW2, "b2": gb2}
    return torch.cat([out[n].reshape(N, -1) for n in params], 1)


class Projector:
    """Seeded Kronecker-factored Gaussian projection of a flattened gradient to about ``d`` dims.

    Each matrix block W (o x i) gets factors P_o (k_o x o) and P_i (k_i x i) with N(0, 1/k) entries and
    maps G -> P_o G P_i^T; vectors get a dense Gaussian. Output sizes are proportional to block sizes.
    """

    def __init__(self, shapes: dict, d: int, seed: int):
        torch = _torch()
        g = torch.Generator().manual_seed(1000 + seed)
        total = sum(math.prod(s) for s in shapes.values())
        self.blocks = []
        if d == 0:                     # no projection: the full gradients, every parameter a coordinate
            self.dim = total
            return
        off = 0
        for shp in shapes.values():
            n = math.prod(shp)
            share = max(1.0, d * n / total)
            if len(shp) == 2:
                o, i = shp
                ko = int(min(o, max(1, round(math.sqrt(share * o / i)))))
                ki = int(min(i, max(1, round(share / ko))))
                Po = torch.randn(ko, o, generator=g) / math.sqrt(ko)
                Pi = torch.randn(ki, i, generator=g) / math.sqrt(ki)
                self.blocks.append((off, shp, Po, Pi))
            else:
                k = int(min(n, max(1, round(share))))
                self.blocks.append((off, shp, torch.randn(k, n, generator=g) / math.sqrt(k), None))
            off += n
        self.dim = sum(b[2].shape[0] * (b[3].shape[0] if b[3] is not None else 1) for b in self.blocks)

    def __call__(self, G):
        torch = _torch()
        if not self.blocks:
            return G
        outs = []
        for off, shp, A, B in self.blocks:
            n = math.prod(shp)
            blk = G[:, off:off + n]
            if B is None:
                outs.append(blk @ A.T)
            else:
                outs.append((A @ blk.reshape(-1, *shp) @ B.T).flatten(1))
        return torch.cat(outs, 1)


def inv_sqrt_psd(R, damping: float = 0.01):
    """(R + delta I)^{-1/2} with delta = damping * tr(R) / d, via eigh (float64)."""
    torch = _torch()
    R = R.double()
    d = R.shape[0]
    delta = damping * float(torch.trace(R)) / d
    w, U = torch.linalg.eigh(R + delta * torch.eye(d, dtype=R.dtype))
    return (U * w.clamp_min(1e-30).rsqrt()) @ U.T, delta


# The paper (Appendix A.1.3, as a public reimplementation's documentation summarises it; we could not check the
# paper's own text) does not fix λ: it picks it so that the sorted eigenvalue curves of λ·R_query and
# (1−λ)·R_train cross at about component 1 000 of its 65 536, so only the top ~1.5 % of directions (the ones the
# query set shares, e.g. its template) are dominated by the query term. We keep that fraction of our d.
LAM_RULE_FRACTION = 1000 / 65536


def paper_lambda(Rq, Rt, fraction: float = LAM_RULE_FRACTION, span: int | None = None) -> tuple[float, int]:
    """(λ, k): λ·eig_q[k] = (1−λ)·eig_train[k] with both spectra sorted in decreasing order, k = round(fraction·m).

    m is the number of directions the two matrices can span: d, or ``span`` (the number of gradients behind
    them) when that is smaller. Up to d = 1024 that is d; from 2048 on it is the 1 488 gradients (k = 23). Taking
    the fraction of d there would put k past the 240th component once d > 15 700 (without a projection d is 25 647),
    where the query spectrum is exactly zero, and force λ = 1. A fixed λ does not transfer between set-ups, because it
    weighs the two matrices by their raw scale (here the query term is about 100 times larger in trace than the
    training term); the crossing rule does.
    """
    torch = _torch()
    eq = torch.linalg.eigvalsh(Rq.double()).flip(0).clamp_min(0)
    et = torch.linalg.eigvalsh(Rt.double()).flip(0).clamp_min(0)
    return lambda_from_spectra(eq, et, Rq.shape[0], fraction, span)


def lambda_from_spectra(eq, et, d: int, fraction: float = LAM_RULE_FRACTION, span: int | None = None):
    """``paper_lambda`` from the two spectra (decreasing; shorter ones are padded with the zeros they omit)."""
    m = d if span is None else min(d, span)
    k = int(min(d - 1, max(1, round(fraction * m))))
    a = float(eq[k]) if k < len(eq) else 0.0
    b = float(et[k]) if k < len(et) else 0.0
    return (b / (a + b) if a + b > 0 else 0.0), k


def _lowrank_whitener(fq, fp, lam: float | None, damping: float):
    """Shared part of ``whiten_lowrank`` and ``whitened_gram``: the rows X = [fq; fp] (float64), their Gram matrix
    X Xᵀ and the n × n matrix C with X (R + δI)^{-1/2} = C X (see ``whiten_lowrank``), plus λ and the trace ratio."""
    torch = _torch()
    nq, n_p = len(fq), len(fp)
    X = torch.cat([fq, fp]).double()
    d = X.shape[1]
    XX = X @ X.T
    eq = torch.linalg.eigvalsh(XX[:nq, :nq] / nq).flip(0).clamp_min(0)
    et = torch.linalg.eigvalsh(XX[nq:, nq:] / n_p).flip(0).clamp_min(0)
    if lam is None:
        lam = lambda_from_spectra(eq, et, d, span=nq + n_p)[0]
    sc = torch.cat([torch.full((nq,), math.sqrt(lam / nq)), torch.full((n_p,), math.sqrt((1 - lam) / n_p))])
    sc = sc.double()
    w, U = torch.linalg.eigh(sc[:, None] * XX * sc[None, :])   # F Fᵀ
    delta = damping * float(w.clamp_min(0).sum()) / d          # tr R = tr F Fᵀ
    keep = w > w.max() * 1e-12
    w, U = w[keep], U[:, keep]
    XV = (XX * sc[None, :]) @ U / w.sqrt()                      # X V, from X Fᵀ = X Xᵀ S
    gain = (w + delta).rsqrt() - delta ** -0.5
    C = ((XV * (gain / w.sqrt())) @ U.T) * sc[None, :]         # X V diag(gain) Vᵀ = C_0 · X
    C.diagonal().add_(delta ** -0.5)                           # + X δ^{-1/2}
    return X, XX, C, float(lam), float(eq.sum() / et.sum().clamp_min(1e-300))


def whiten_lowrank(fq, fp, lam: float | None = None, damping: float = 0.01):
    """(fq, fp) times (R + δI)^{-1/2}, R = λ·fqᵀfq/n_q + (1−λ)·fpᵀfp/n_p, δ = damping·tr(R)/d: what
    ``inv_sqrt_psd`` gives, computed through the n × n Gram matrix of the n = n_q + n_p rows instead of a d × d
    matrix (for full gradients d = 25 647). With F = S X the rows X = [fq; fp] scaled by S = (√(λ/n_q), √((1−λ)/n_p)),
    R = FᵀF, so R + δI has eigenvalues w + δ on the row space of F (basis V = FᵀU/√w from FFᵀ = U w Uᵀ) and δ
    elsewhere; X V and Vᵀ are both reached through X Xᵀ, which leaves two products with d in them.
    ``lam`` None applies the paper's crossing rule to the two spectra (the Gram blocks' eigenvalues).
    Returns (whitened fq, whitened fp, λ, tr R_query / tr R_train)."""
    X, _, C, lam, ratio = _lowrank_whitener(fq, fp, lam, damping)
    out = (C @ X).float()
    nq = len(fq)
    return out[:nq], out[nq:], lam, ratio


def whitened_gram(fq, fp, lam: float | None = None, damping: float = 0.01):
    """What the scores need of ``whiten_lowrank``'s rows, without forming them: with W = C X the whitened rows,
    W Wᵀ = C (X Xᵀ) Cᵀ is n × n work, and X Xᵀ is already there, so one of the two products with d in it goes.
    Returns (whitened fq · whitened fpᵀ, row norms of whitened fq, of whitened fp, λ, trace ratio), float32 like
    the rows ``whiten_lowrank`` returns."""
    _, XX, C, lam, ratio = _lowrank_whitener(fq, fp, lam, damping)
    G = C @ XX @ C.T
    nq = len(fq)
    norms = G.diagonal().clamp_min(0).sqrt()
    return G[:nq, nq:].float(), norms[:nq].float(), norms[nq:].float(), lam, ratio


def adamw_step_batch(params_flat, m_flat, v_flat, step: int, G):
    """One AdamW step (torch's rule) from the saved state, for each row of G -> new params (N, |theta|)."""
    t = step + 1
    m2 = BETAS[0] * m_flat + (1 - BETAS[0]) * G
    v2 = BETAS[1] * v_flat + (1 - BETAS[1]) * G * G
    bc1, bc2 = 1 - BETAS[0] ** t, 1 - BETAS[1] ** t
    denom = v2.sqrt() / math.sqrt(bc2) + EPS
    return params_flat * (1 - LR * WD) - (LR / bc1) * m2 / denom


def tail_patch_gain(params_flat, m_flat, v_flat, step: int, shapes: dict, G, qx, qy) -> np.ndarray:
    """Tail-patch gain of row i: one AdamW step on gradient G[i] from the saved state, read on query (qx[i], qy[i]).

    The gain is log p(target) after that step minus log p(target) after the same step with a zero gradient. The
    saved first moment (0.9·m) and weight decay move every query by the same amount whatever passage is patched
    (about −0.02 in log p here); measured against the unpatched model that drift would sit inside every method's
    Δ, so "no effect" would read −0.02 and ratios such as Δ_TrackStar/Δ_BM25 would mix the drift into both terms.
    Against the zero-gradient step, Δ is the passage's own effect and 0 means no influence.
    """
    torch = _torch()
    with torch.no_grad():
        still = adamw_step_batch(params_flat, m_flat, v_flat, step, torch.zeros(1, params_flat.numel()))
        ref = target_logprob_batch(still.expand(len(qy), -1), shapes, qx, qy)
        new = adamw_step_batch(params_flat, m_flat, v_flat, step, G)
        return (target_logprob_batch(new, shapes, qx, qy) - ref).numpy()


def first_order_gain(scale, step: int, gq, gz):
    """First-order prediction of the tail-patch gain: η(1−β₁)/(1−β₁^{t+1}) · g_q · (g_z / sqrt(v̂ + ε)), rowwise.

    For a small step the passage-dependent part of the AdamW update is that preconditioned gradient (while g_z²
    is small next to v), so the gain is a dot product with the optimizer correction on one side only.
    """
    return (LR * (1 - BETAS[0]) / (1 - BETAS[0] ** (step + 1))) * ((gq * scale) * gz).sum(1)


def unflatten(flat, shapes: dict) -> dict:
    out, off = {}, 0
    for n, s in shapes.items():
        k = math.prod(s)
        out[n] = flat[..., off:off + k].reshape(*flat.shape[:-1], *s)
        off += k
    return out


def target_logprob_batch(params_rows, shapes, qx, qy):
    """log p(target|prompt) for each row i: params_rows[i] applied to query (qx[i], qy[i])."""
    torch = _torch()
    P = unflatten(params_rows, shapes)                           # batched parameter sets
    n = params_rows.shape[0]
    e = P["emb"][torch.arange(n)[:, None], qx].reshape(n, -1)    # (n, CTX*d)
    h = torch.tanh(torch.einsum("ni,nhi->nh", e, P["W1"]) + P["b1"])
    z = torch.einsum("nh,nvh->nv", h, P["W2"]) + P["b2"]
    return torch.log_softmax(z, -1).gather(1, qy[:, None])[:, 0]


LOO_ARMS = ("control", "bm25", "grad_dot", "grad_cos", "adam_cos", "trackstar", "random", "proponents")


def leave_some_out(orders: dict, ckpt, qids: np.ndarray, k: int, steps: int, seed: int, world: World = WORLD,
                   progress=None) -> dict:
    """Leave-some-out retraining: the 'true influence' proxy.

    For each method, the union of its top-k passages over the query group ``qids`` is removed, and training
    continues from the checkpoint (saved AdamW state) for ``steps`` steps without them. A control copy keeps
    every passage and sees the same minibatches. The influence of a method's list on query q is the drop
    log p_control(answer_q) - log p_removed(answer_q). References: k random passages per query, and the
    true sources (every passage that states the query's fact).
    """
    torch = _torch()
    params, m, v, step, _ = ckpt
    P = len(world.passages)
    rng = np.random.default_rng(10_000 + seed)
    drop = np.zeros((len(LOO_ARMS), P), dtype=bool)
    for i, arm in enumerate(LOO_ARMS):
        if arm in orders:
            drop[i, orders[arm][qids, :k].ravel()] = True
        elif arm == "random":
            drop[i, rng.integers(P, size=len(qids) * k)] = True
        elif arm == "proponents":
            drop[i, np.concatenate([world.proponents[q] for q in qids])] = True
    new, _, recall = train(steps=steps, seed=seed + 1, progress=progress, world=world,
                           init=(params, m, v, step), drop=drop)
    qx = encode_prompts([world.queries[q] for q in qids])
    qy = torch.as_tensor(world.targets[qids])
    with torch.no_grad():
        lp = torch.log_softmax(logits_fn(new, qx[None].expand(len(LOO_ARMS), -1, -1)), -1)
        lp = lp[:, torch.arange(len(qids)), qy].numpy()
    drops = lp[0][None, :] - lp                                  # (arms, queries)
    mean, median = drops.mean(1), np.median(drops, 1)
    return {"arms": list(LOO_ARMS), "query_ids": qids, "drops": drops, "mean": mean,
            "se": drops.std(1, ddof=1) / math.sqrt(len(qids)), "median": median,
            "heavy_tailed": heavy_tailed(list(LOO_ARMS), mean, median),
            "n_removed": drop.sum(1), "recall": np.asarray(recall), "steps": steps, "k": k}


# the arms the page names when it describes the spread of the drops, and the median/mean ratio below which an
# arm's drops count as heavy-tailed (a few queries carry most of the mean)
TAIL_ARMS = ("bm25", "adam_cos", "trackstar")
HEAVY_TAIL_RATIO = 0.8


def heavy_tailed(arms: list[str], mean: np.ndarray, median: np.ndarray) -> bool:
    """True when most of TAIL_ARMS have a median drop below HEAVY_TAIL_RATIO times their mean drop."""
    shown = [i for i, a in enumerate(arms) if a in TAIL_ARMS]
    return sum(bool(median[i] < HEAVY_TAIL_RATIO * mean[i]) for i in shown) * 2 > len(shown)


# ------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class Config:
    method: str = param("trackstar", Choice(METHODS[1:], "Gradient method in the table",
                                            help="shown next to BM25 in the top-10 table"))
    proj_dim: int = param(2048, Choice((0, 64, 256, 512, 1024, 2048, 4096, 8192), "Projection dim d",
                                       labels=("none (full gradients)", "64", "256", "512", "1024", "2048", "4096",
                                               "8192"),
                                       help="size of the random projection of each gradient (the projector rounds it "
                                            "to its block sizes; 'none' scores the full gradients, all 25 647 "
                                            "parameters). Above the 1 488 gradients (240 queries + 1 248 "
                                            "passages) the Hessian whitening goes through their Gram matrix "
                                            "instead of a d × d one, with the same result, so every d fits the "
                                            "budget. The default is the spec's 2048 (it was 1024 while the d × d "
                                            "route took 3.6 s there)"))
    lam_auto: bool = param(True, Bool("λ by the paper's rule",
                                      help="choose λ so that λ·R_query dominates (1−λ)·R_train only on the top ~1.5% "
                                           "of components, as the paper does (1 000 of 65 536); off: use the slider"))
    lam: float = param(0.9, Float(0.0, 1.0, "Hessian mix λ (when the rule is off)", step=0.05,
                                  help="R = λ·R_query + (1−λ)·R_train; 0 uses training passages only"))
    tp_k: int = param(3, Int(1, 10, "Tail-patch k", help="top passages patched per query"))
    tp_queries: int = param(60, Int(20, 240, "Tail-patch queries", step=10))
    query: int = param(0, Int(0, 239, "Query fact #", help="fact shown in the top-10 table"))
    seed: int = param(0, Int(0, 9, "Seed (projection, query sample)"))
    use_adam: bool = param(True, Bool("Optimizer correction", group="Your combination",
                                      help="divide gradients by sqrt of Adam's second moment"))
    use_hessian: bool = param(False, Bool("Hessian whitening", group="Your combination",
                                          help="apply R^(-1/2) built with the mix λ"))
    use_unit: bool = param(True, Bool("Unit normalisation", group="Your combination",
                                      help="score by cosine instead of dot product"))
    loo: bool = param(False, Bool("Run leave-some-out retraining (slow)", group="Leave-some-out retraining",
                                  help="retrain without each method's top-k passages and measure the drop "
                                       "of log p(answer); about 5-15 s"))
    loo_queries: int = param(40, Int(10, 40, "Leave-some-out queries", step=10, group="Leave-some-out retraining",
                                     help="queries whose top-k passages are removed together"))
    loo_steps: int = param(200, Int(50, 300, "Retraining steps", step=50, group="Leave-some-out retraining",
                                    help="AdamW steps continued from the checkpoint, with and without the "
                                         "removed passages"))


# largest widget setting (every switch on, leave-some-out at max, no projection, tail-patch k = 10): 24.2 s in the
# benchmark (fresh process, idle machine, 2026-12-06), then 35-36 s in two direct runs on a slower machine
# (2026-12-07, an AMD EPYC); 22.6-23.2 s there once the scores took the whitened products through the Gram matrix
# (``whitened_gram``) instead of forming the 25 647-wide whitened rows
HEAVY_CONFIG = Config(method="custom", proj_dim=0, tp_k=10, tp_queries=240, use_hessian=True,
                      use_adam=False, loo=True, loo_queries=40, loo_steps=300)


@dataclass
class Result:
    metrics: dict
    methods: list
    mrr: np.ndarray                 # per method
    recall10: np.ndarray
    precision10: np.ndarray
    tp_mean: np.ndarray             # tail-patch mean Δ log p per method
    tp_se: np.ndarray
    tp_self: float
    tp_random: float
    tp_random_se: float
    concentration: np.ndarray
    first_rank: dict                # method -> (tail-patch queries,) rank of first proponent (1-based)
    tp_per_query: dict              # method -> (tail-patch queries,) mean Δ over k
    tp_query_ids: np.ndarray
    grad_norms: np.ndarray          # per passage (raw gradient)
    frequent_dot: np.ndarray        # passage ids most often in grad_dot top-10
    frequent_dot_count: np.ndarray
    table: list = field(default_factory=list)   # rows for the picked query
    loo: dict | None = None         # leave-some-out retraining (only when config.loo)
    query_text: str = ""
    answer_text: str = ""


def _mrr_recall(order: np.ndarray, world: World) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-query rank of the first proponent (1-based), recall@10 and precision@10."""
    Q, P = order.shape
    pos = np.empty_like(order)
    pos[np.arange(Q)[:, None], order] = np.arange(P)[None, :]
    first = np.array([pos[q, world.proponents[q]].min() + 1 for q in range(Q)])
    rec = np.array([np.mean(pos[q, world.proponents[q]] < 10) for q in range(Q)])
    prec = np.array([np.sum(pos[q, world.proponents[q]] < 10) / 10 for q in range(Q)])
    return first, rec, prec


def _concentration(order: np.ndarray, top: int = 10) -> tuple[float, np.ndarray, np.ndarray]:
    counts = np.bincount(order[:, :top].ravel(), minlength=order.shape[1])
    idx = np.argsort(-counts, kind="stable")[:top]
    return float(counts[idx].sum() / (order.shape[0] * top)), idx, counts[idx]


_GRAD_MEMO: dict = {}


def _gradients(key, params: dict, world: World):
    """Per-example gradients of all passages and queries at the checkpoint (memoised: config-independent)."""
    torch = _torch()
    if key not in _GRAD_MEMO:
        _GRAD_MEMO.clear()
        X, Y, M = encode_passages(world)
        Gp = per_example_grads_fast(params, X, Y, M)
        Gq = per_example_grads_fast(params, encode_prompts(world.queries), torch.as_tensor(world.targets))
        _GRAD_MEMO[key] = (Gp, Gq)
    return _GRAD_MEMO[key]


def encodings(config: Config, params: dict, v: dict, step: int, world: World = WORLD, progress=None):
    """Per-method score matrices (queries x passages) plus raw passage gradients and norms."""
    torch = _torch()
    shapes = {n: tuple(p.shape) for n, p in params.items()}
    Gp, Gq = _gradients(id(params), params, world)
    report(progress, 0.3, "per-example gradients of passages and queries")
    v_flat = torch.cat([v[n].reshape(-1) for n in params])
    vhat = v_flat / (1 - BETAS[1] ** step)
    scale = (vhat + EPS).rsqrt()
    proj = Projector(shapes, config.proj_dim, config.seed)
    raw_p, raw_q = proj(Gp), proj(Gq)
    ad_p, ad_q = proj(Gp * scale), proj(Gq * scale)
    report(progress, 0.35, "projected")

    def unit(a):
        return a / a.norm(dim=1, keepdim=True).clamp_min(1e-30)

    lam_used = {}

    def whiten(fq, fp, tag):
        """Whitened query × passage products and the whitened rows' norms (all the scores use of the rows)."""
        span = len(fq) + len(fp)
        if fq.shape[1] <= span:                  # d up to the number of gradients: d × d matrices, as the paper does
            Rq, Rt = (fq.T @ fq).double() / fq.shape[0], (fp.T @ fp).double() / fp.shape[0]
            lam = paper_lambda(Rq, Rt, span=span)[0] if config.lam_auto else config.lam
            lam_used[tag + "_trace_ratio"] = float(torch.trace(Rq) / torch.trace(Rt).clamp_min(1e-300))
            Rinv, _ = inv_sqrt_psd(lam * Rq + (1 - lam) * Rt)
            wq, wp = (fq.double() @ Rinv).float(), (fp.double() @ Rinv).float()
            out = wq @ wp.T, wq.norm(dim=1), wp.norm(dim=1)
        else:                                    # more dims than gradients: the same products via the Gram matrix
            *out, lam, lam_used[tag + "_trace_ratio"] = whitened_gram(fq, fp, None if config.lam_auto else config.lam)
        lam_used[tag] = lam
        return out

    def cosines(cross, nq, npass):
        return cross / nq.clamp_min(1e-30)[:, None] / npass.clamp_min(1e-30)[None, :]

    wh = whiten(ad_q, ad_p, "trackstar")
    report(progress, 0.45, "whitened")
    # the user's own combination of the three switches
    if config.use_hessian:
        custom = wh if config.use_adam else whiten(raw_q, raw_p, "custom")
        custom = cosines(*custom) if config.use_unit else custom[0]
    else:
        cq, cp = (ad_q, ad_p) if config.use_adam else (raw_q, raw_p)
        if config.use_unit:
            cq, cp = unit(cq), unit(cp)
        custom = cq @ cp.T
    scores = {
        "grad_dot": (raw_q @ raw_p.T).numpy(),
        "grad_cos": (unit(raw_q) @ unit(raw_p).T).numpy(),
        "adam_cos": (unit(ad_q) @ unit(ad_p).T).numpy(),
        "trackstar": cosines(*wh).numpy(),
        "custom": custom.numpy(),
    }
    scores["bm25"] = bm25_matrix(world.passages, [q + [int(t)] for q, t in zip(world.queries, world.targets)],
                                 len(world.vocab))
    return scores, Gp, Gq, proj.dim, (lam_used["trackstar"], lam_used["trackstar_trace_ratio"])


def run(config: Config, progress=None) -> Result:
    torch = _torch()
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    rng = seed_everything(config.seed)
    _ = get_device()  # the model is tiny; everything runs on the CPU
    world = WORLD
    if not 0 <= config.query < len(world.queries):
        raise InputError(f"Query must be between 0 and {len(world.queries) - 1}.")
    params, m, v, step, recall = load_checkpoint()
    shapes = {n: tuple(p.shape) for n, p in params.items()}
    report(progress, 0.05, "loaded checkpoint")
    scores, Gp, Gq, dim, lam_used = encodings(config, params, v, step, world, progress)
    orders = {k: rank_desc(s) for k, s in scores.items()}

    n_q = len(world.queries)
    mrr, rec, prec, conc, first_all = [], [], [], [], {}
    for k in METHODS:
        first, r10, p10 = _mrr_recall(orders[k], world)
        first_all[k] = first
        mrr.append(np.mean(1.0 / first))
        rec.append(r10.mean())
        prec.append(p10.mean())
        conc.append(_concentration(orders[k])[0])
    _, freq_idx, freq_cnt = _concentration(orders["grad_dot"])

    # ---- tail-patch
    tq = np.sort(rng.choice(n_q, size=min(config.tp_queries, n_q), replace=False))
    kk = config.tp_k
    p_flat = torch.cat([params[n].reshape(-1) for n in params])
    m_flat = torch.cat([m[n].reshape(-1) for n in params])
    v_flat = torch.cat([v[n].reshape(-1) for n in params])
    qx = encode_prompts(world.queries)
    qy = torch.as_tensor(world.targets)
    scale = (v_flat / (1 - BETAS[1] ** step) + EPS).rsqrt()
    with torch.no_grad():
        base = -torch.stack([query_loss(params, qx[i], qy[i]) for i in range(n_q)]).numpy()
        # what the saved momentum and weight decay do on their own (subtracted from every Δ, see tail_patch_gain)
        still = adamw_step_batch(p_flat, m_flat, v_flat, step, torch.zeros(1, p_flat.numel()))
        drift = target_logprob_batch(still.expand(n_q, -1), shapes, qx, qy).numpy() - base

    def patch(query_ids: np.ndarray, grads) -> np.ndarray:
        out = []
        for i in range(0, len(query_ids), 256):
            qi = torch.as_tensor(query_ids[i:i + 256])
            out.append(tail_patch_gain(p_flat, m_flat, v_flat, step, shapes, grads[i:i + 256], qx[qi], qy[qi]))
        return np.concatenate(out)

    tp_mean, tp_se, tp_pq, ans_share = [], [], {}, {}
    fo_pred, fo_meas = [], []                            # first-order prediction vs measured Δ, per patched pair
    plain_pred = []                                      # the plain g_q·g_z of the same pairs (no optimizer correction)
    n_tasks = len(METHODS) + 2
    for j, k in enumerate(METHODS):
        top = orders[k][tq, :kk]                         # (nq, k)
        qids = np.repeat(tq, kk)
        pair = patch(qids, Gp[torch.as_tensor(top.ravel())])
        if k != "custom":                                # "custom" repeats one of the others
            gq_rows, gz_rows = Gq[torch.as_tensor(qids)], Gp[torch.as_tensor(top.ravel())]
            fo_pred.append(first_order_gain(scale, step, gq_rows, gz_rows).numpy())
            plain_pred.append((gq_rows * gz_rows).sum(1).numpy())
            fo_meas.append(pair)
        d = pair.reshape(len(tq), kk).mean(1)
        tp_pq[k] = d
        # share of the patched passages that contain the query's answer token (any subject)
        ans_share[k] = float(np.mean([int(world.targets[q]) in world.passages[p]
                                      for q, row in zip(tq, top) for p in row]))
        tp_mean.append(d.mean())
        tp_se.append(d.std(ddof=1) / math.sqrt(len(d)))
        report(progress, (0.5 + 0.45 * (j + 1) / n_tasks) * (0.5 if config.loo else 1.0), f"tail-patch {k}")
    rnd = rng.integers(len(world.passages), size=(len(tq), kk))
    d_rnd = patch(np.repeat(tq, kk), Gp[torch.as_tensor(rnd.ravel())]).reshape(len(tq), kk).mean(1)
    d_self = patch(tq, Gq[torch.as_tensor(tq)])
    # reference: a step on each passage that states the fact (the true sources), averaged per query
    src = [(q, p) for q in tq for p in world.proponents[q]]
    d_src_all = patch(np.array([q for q, _ in src]), Gp[torch.as_tensor([p for _, p in src])])
    owner = np.searchsorted(tq, [q for q, _ in src])
    d_src = np.bincount(owner, d_src_all, len(tq)) / np.bincount(owner, minlength=len(tq))
    report(progress, 0.97 if not config.loo else 0.5, "tail-patch references")
    loo = None
    if config.loo:
        lq = np.sort(np.random.default_rng(20_000 + config.seed).choice(n_q, size=min(config.loo_queries, n_q),
                                                                         replace=False))
        loo = leave_some_out(orders, (params, m, v, step, recall), lq, kk, config.loo_steps, config.seed, world,
                             ProgressSpan(progress, 0.5, 0.98, "leave-some-out retraining: "))

    # ---- table for the picked query
    q = config.query
    prop = set(world.proponents[q].tolist())
    table = []
    for rank in range(10):
        row = {"rank": rank + 1}
        for k in ("bm25", config.method):
            pid = int(orders[k][q, rank])
            row[f"{k} passage"] = world.text(world.passages[pid])
            row[f"{k} score"] = float(scores[k][q, pid])
            row[f"{k} proponent"] = pid in prop
        table.append(row)

    gnorm = Gp.norm(dim=1).numpy()
    ix = {k: i for i, k in enumerate(METHODS)}
    metrics = {
        "fact_recall": recall,
        "proj_dim_actual": float(dim),
        "n_params": float(p_flat.numel()),
        "n_passages": float(len(world.passages)),
        "tp_self": float(d_self.mean()),
        "tp_self_pos_frac": float(np.mean(d_self > 0)),
        "tp_random": float(d_rnd.mean()),
        "tp_random_se": float(d_rnd.std(ddof=1) / math.sqrt(len(d_rnd))),
        "tp_sources": float(d_src.mean()),
        "tp_sources_se": float(d_src.std(ddof=1) / math.sqrt(len(d_src))),
        # log p change from the saved momentum and weight decay alone (already subtracted from every Δ above)
        "tp_drift": float(drift[tq].mean()),
        # Pearson r, over every patched (query, passage) pair of the five methods, between the measured Δ and the
        # first-order prediction η(1−β₁)/bc₁ · g_q·(g_z/sqrt(v̂+ε)) (optimizer correction on one side, no R, no norm)
        "tp_first_order_r": float(np.corrcoef(np.concatenate(fo_pred), np.concatenate(fo_meas))[0, 1]),
        "tp_plain_dot_r": float(np.corrcoef(np.concatenate(plain_pred), np.concatenate(fo_meas))[0, 1]),
        "lam_used": float(lam_used[0]),
        "trace_ratio_query_train": lam_used[1],      # tr R_query / tr R_train (Adam-corrected, projected)
        "epochs": float(step * 64 / len(world.passages)),   # passes over the training set (batch 64)
    }
    # each rung of the ladder as a paired difference over the same queries, with its standard error
    for a, b in zip(GRAD_METHODS[:-1], GRAD_METHODS[1:]):
        diff = tp_pq[b] - tp_pq[a]
        metrics[f"tp_rung_{b}"] = float(diff.mean())
        metrics[f"tp_rung_se_{b}"] = float(diff.std(ddof=1) / math.sqrt(len(diff)))
    for k in METHODS:
        metrics[f"mrr_{k}"] = float(mrr[ix[k]])
        metrics[f"recall10_{k}"] = float(rec[ix[k]])
        metrics[f"precision10_{k}"] = float(prec[ix[k]])
        metrics[f"tp_{k}"] = float(tp_mean[ix[k]])
        metrics[f"tp_se_{k}"] = float(tp_se[ix[k]])
        metrics[f"conc_{k}"] = float(conc[ix[k]])
        metrics[f"answer_share_{k}"] = ans_share[k]
    if loo is not None:
        for arm, mu, se in zip(loo["arms"], loo["mean"], loo["se"]):
            metrics[f"loo_{arm}"] = float(mu)
            metrics[f"loo_se_{arm}"] = float(se)
        # each rung of the ladder as a paired difference over the same queries (same retraining noise on both arms)
        arm_ix = {a: i for i, a in enumerate(loo["arms"])}
        for a, b in zip(GRAD_METHODS[:-1], GRAD_METHODS[1:]):
            diff = np.asarray(loo["drops"][arm_ix[b]]) - np.asarray(loo["drops"][arm_ix[a]])
            metrics[f"loo_rung_{b}"] = float(diff.mean())
            metrics[f"loo_rung_se_{b}"] = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    report(progress, 1.0, "done")
    return Result(
        metrics=metrics, methods=list(METHODS), mrr=np.array(mrr), recall10=np.array(rec),
        precision10=np.array(prec),
        tp_mean=np.array(tp_mean), tp_se=np.array(tp_se), tp_self=float(d_self.mean()),
        tp_random=float(d_rnd.mean()), tp_random_se=metrics["tp_random_se"], concentration=np.array(conc),
        first_rank={k: first_all[k][tq] for k in METHODS}, tp_per_query=tp_pq, tp_query_ids=tq,
        grad_norms=gnorm, frequent_dot=freq_idx, frequent_dot_count=freq_cnt, table=table,
        query_text=world.text(world.queries[q]), answer_text=world.vocab[int(world.targets[q])], loo=loo,
    )


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    ts, bm, gd = m["tp_trackstar"], m["tp_bm25"], m["tp_grad_dot"]
    # claim 1: the smallest margin among the three conditions, as a ratio/z-score pair folded into one number
    z_rand = (ts - m["tp_random"]) / max(1e-12, math.hypot(m["tp_se_trackstar"], m["tp_random_se"]))
    ratio = min(ts / bm if bm > 0 else (math.inf if ts > 0 else -math.inf),
                ts / gd if gd > 0 else (math.inf if ts > 0 else -math.inf))
    ladder = [m[f"tp_{k}"] for k in GRAD_METHODS]
    # the claim, one rung at a time (grad·grad -> + unit norm -> + optimizer correction -> + R^-1/2); the
    # paired per-rung differences and their standard errors are shown beside it (metrics tp_rung_*)
    ladder_steps = sum(b > a for a, b in zip(ladder[:-1], ladder[1:]))
    out = [
        Claim("TrackStar's top passages are the most influential: one training step on them raises "
              "log p(answer) more than a step on BM25's or raw-gradient-dot's top passages (tail-patch).",
              measured=ratio, op=">=", threshold=1.2, label="min(Δ_TrackStar/Δ_BM25, Δ_TrackStar/Δ_grad·grad)",
              detail=f"Δ: TrackStar {ts:.4f}, BM25 {bm:.4f}, grad·grad {gd:.4f}"),
        Claim("TrackStar's tail-patch gain is far above that of random passages.",
              measured=z_rand, op=">=", threshold=3.0, label="z-score vs random passages",
              detail=f"random Δ {m['tp_random']:.4f}, query itself Δ {m['tp_self']:.4f}", fmt=".2f"),
        Claim("BM25 is best at attribution: it finds a passage that states the fact (MRR ≥ 0.8).",
              measured=m["mrr_bm25"], op=">=", threshold=0.8, label="MRR BM25"),
        Claim("Attribution and influence are misaligned: BM25 beats TrackStar at finding the stating passage.",
              measured=m["mrr_bm25"] - m["mrr_trackstar"], op=">", threshold=0.0,
              label="MRR_BM25 − MRR_TrackStar",
              detail=f"TrackStar MRR {m['mrr_trackstar']:.3f}; ≤ 0 would mean no misalignment at this scale"),
        Claim("Without normalisation a few large-gradient passages fill every list: grad·grad's top-10 lists "
              "are at least twice as concentrated as TrackStar's.",
              measured=m["conc_grad_dot"] / max(1e-12, m["conc_trackstar"]), op=">=", threshold=2.0,
              label="concentration ratio",
              detail=f"share of top-10 slots held by 10 passages: grad·grad {m['conc_grad_dot']:.2f}, "
                     f"TrackStar {m['conc_trackstar']:.2f}", fmt=".2f"),
        Claim("The corrections improve attribution: TrackStar's MRR beats grad·grad's by ≥ 0.1.",
              measured=m["mrr_trackstar"] - m["mrr_grad_dot"], op=">=", threshold=0.1,
              label="MRR_TrackStar − MRR_grad·grad"),
        Claim("Each correction (unit norm → optimizer correction → Hessian whitening) raises tail-patch "
              "influence, one rung at a time.",
              measured=ladder_steps, op=">=", threshold=3, label="rungs that raise Δ (of 3)", fmt=".0f",
              detail="Δ: " + ", ".join(f"{k} {x:.4f}" for k, x in zip(GRAD_METHODS, ladder))
                     + "; rung by rung (paired): " + ", ".join(f"{k} {m[f'tp_rung_{k}']:+.4f} ± {m[f'tp_rung_se_{k}']:.4f}"
                                                             for k in GRAD_METHODS[1:])),
    ]
    if result.loo is not None:
        lts, lbm, lgd = m["loo_trackstar"], m["loo_bm25"], m["loo_grad_dot"]
        lratio = min(lts / lbm if lbm > 0 else (math.inf if lts > 0 else -math.inf),
                     lts / lgd if lgd > 0 else (math.inf if lts > 0 else -math.inf))
        lladder = [m[f"loo_{k}"] for k in GRAD_METHODS]
        out += [
            Claim("Leave-some-out retraining: removing TrackStar's top passages lowers log p(answer) more than "
                  "removing BM25's or grad·grad's (gradient methods win on causal influence).",
                  measured=lratio, op=">=", threshold=1.2, label="min(LOO_TrackStar/LOO_BM25, LOO_TrackStar/LOO_grad·grad)",
                  detail=f"drop of log p: TrackStar {lts:.3f}, BM25 {lbm:.3f}, grad·grad {lgd:.3f} "
                         f"(true sources {m['loo_proponents']:.3f}, random {m['loo_random']:.3f})"),
            Claim("Leave-some-out retraining: each correction (unit norm → optimizer correction → Hessian "
                  "whitening) raises the drop of log p(answer), one rung at a time.",
                  measured=sum(b > a for a, b in zip(lladder[:-1], lladder[1:])), op=">=", threshold=3,
                  label="LOO rungs that raise the drop (of 3)", fmt=".0f",
                  detail="drop: " + ", ".join(f"{k} {x:.3f}" for k, x in zip(GRAD_METHODS, lladder))
                         + "; rung by rung (paired over the same queries): "
                         + ", ".join(f"{k} {m[f'loo_rung_{k}']:+.3f} ± {m[f'loo_rung_se_{k}']:.3f}"
                                     for k in GRAD_METHODS[1:])),
        ]
    return out


def main(argv: list[str]) -> None:
    if argv[:1] != ["train"]:
        print("usage: python -m engine.trackstar_tda train")
        return
    params, opt, recall = train(progress=lambda f, msg: print(msg) if f >= 1 or int(f * 3000) % 500 == 0 else None)
    save_checkpoint(params, opt, recall)
    print(f"fact recall {recall:.3f}; saved to assets/{CKPT_NAME}")


if __name__ == "__main__":
    main(sys.argv[1:])
