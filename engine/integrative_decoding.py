"""Integrative Decoding (ID): self-consistency enforced token by token.

Generic part (works with any next-token function): ``greedy_decode``, ``sample_decode`` and
``integrative_decode`` take ``next_logprobs(contexts) -> array[rows, vocab]`` where ``contexts`` is an
int array ``[rows, length]`` (all rows advance in lock-step, so they share a length). To plug in a
local Hugging Face causal LM one would pass, for example::

    def next_logprobs(ctx):                      # ctx: np.ndarray [rows, length] of token ids
        ids = torch.as_tensor(ctx, device=model.device)
        with torch.no_grad():
            return model(ids).logits[:, -1].log_softmax(-1).cpu().numpy()

(with left padding and an attention mask when prompts differ in length). That adapter is never
called here: no model can be downloaded, so the page runs on an *analytic language model* over a
synthetic world of facts, exposing exactly the same interface. ID samples k answers, builds k
"refine" prompts (question, one previous answer, an instruction to answer again), and decodes one
answer for all k prompts at once, choosing each token by the sum of the k next-token log-probs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.core import Choice, Claim, Float, Int, param, seed_everything
from engine.core.progress import report

NextLogprobs = Callable[[np.ndarray], np.ndarray]
K_SWEEP = (1, 2, 4, 8, 16)
TINY = 1e-12
DIGITS = 48  # entity names are two base-48 digits (up to 2304 entities)


# ----------------------------------------------------------------------------- generic decoders
def _append(ctx: np.ndarray, tok: np.ndarray) -> np.ndarray:
    return np.concatenate([ctx, tok[:, None]], axis=1)


def greedy_decode(next_logprobs: NextLogprobs, ctx: np.ndarray, max_new_tokens: int, eos_id: int) -> np.ndarray:
    """Arg-max decoding of every row; returns [rows, max_new_tokens] (EOS-padded)."""
    out = np.full((ctx.shape[0], max_new_tokens), eos_id)
    done = np.zeros(ctx.shape[0], bool)
    for t in range(max_new_tokens):
        tok = np.where(done, eos_id, np.argmax(next_logprobs(ctx), axis=1))
        out[:, t] = tok
        ctx = _append(ctx, tok)
        done |= tok == eos_id
        if done.all():
            break
    return out


def sample_decode(next_logprobs: NextLogprobs, ctx: np.ndarray, max_new_tokens: int, eos_id: int,
                  rng: np.random.Generator, temperature: float = 1.0) -> np.ndarray:
    """Ancestral sampling at a temperature; returns [rows, max_new_tokens] (EOS-padded)."""
    out = np.full((ctx.shape[0], max_new_tokens), eos_id)
    done = np.zeros(ctx.shape[0], bool)
    for t in range(max_new_tokens):
        lp = next_logprobs(ctx).astype(np.float32) / np.float32(temperature)
        lp -= lp.max(axis=1, keepdims=True)
        cdf = np.cumsum(np.exp(lp, out=lp), axis=1)
        u = rng.random(ctx.shape[0]) * cdf[:, -1]
        tok = np.minimum(np.argmax(cdf >= u[:, None], axis=1), cdf.shape[1] - 1)
        tok = np.where(done, eos_id, tok)
        out[:, t] = tok
        ctx = _append(ctx, tok)
        done |= tok == eos_id
        if done.all():
            break
    return out


def integrative_decode(next_logprobs: NextLogprobs, contexts: np.ndarray, max_new_tokens: int, eos_id: int,
                       trace: list | None = None) -> np.ndarray:
    """Decode one answer per group of k prompts, jointly.

    contexts: [groups, k, length]. At each step every group's k contexts are scored in one batched call,
    the k log-prob vectors are summed, the arg-max token is appended to *all* k contexts of the group.
    Returns [groups, max_new_tokens]. If ``trace`` is a list, the summed scores of each step are appended.
    """
    G, k, L = contexts.shape
    ctx = contexts.reshape(G * k, L)
    out = np.full((G, max_new_tokens), eos_id)
    done = np.zeros(G, bool)
    for t in range(max_new_tokens):
        score = next_logprobs(ctx).reshape(G, k, -1).sum(axis=1)
        if trace is not None:
            trace.append(score)
        tok = np.where(done, eos_id, np.argmax(score, axis=1))
        out[:, t] = tok
        ctx = _append(ctx, np.repeat(tok, k))
        done |= tok == eos_id
        if done.all():
            break
    return out


# ----------------------------------------------------------------------------- the analytic LM
@dataclass
class World:
    """E entities × F facts × V values × S surface forms.

    Token layout: fact tokens (f, v, s) | BOS | 48 "digit" tokens (an entity is named by two digits) |
    ANS REFINE EOS. Plain prompt: BOS d1 d2 ANS. Refine prompt: BOS d1 d2 ANS r_1..r_F REFINE d1 d2 ANS.
    """

    E: int
    F: int
    V: int
    S: int
    truth: np.ndarray        # [E, F] true value
    p_true: np.ndarray       # [E, F]
    value_p: np.ndarray      # [E, F, V] base value distribution
    surf: np.ndarray         # [E, F, V, S] surface-form distribution given the value
    reliability: float
    snowball: float

    @property
    def n_fact_tokens(self) -> int:
        return self.F * self.V * self.S

    @property
    def BOS(self) -> int:
        return self.n_fact_tokens

    def name(self, e) -> np.ndarray:
        e = np.asarray(e)
        return np.stack([e // DIGITS, e % DIGITS], axis=-1) + self.n_fact_tokens + 1

    def entity_of(self, ctx: np.ndarray) -> np.ndarray:
        d = ctx[:, 1:3] - (self.n_fact_tokens + 1)
        return d[:, 0] * DIGITS + d[:, 1]

    @property
    def ANS(self) -> int:
        return self.n_fact_tokens + 1 + DIGITS

    @property
    def REFINE(self) -> int:
        return self.ANS + 1

    @property
    def EOS(self) -> int:
        return self.ANS + 2

    @property
    def vocab(self) -> int:
        return self.ANS + 3

    def token(self, f, v, s):
        return (np.asarray(f) * self.V + np.asarray(v)) * self.S + np.asarray(s)

    def value_of(self, tok):
        """Value index of a fact token (−1 for any other token)."""
        tok = np.asarray(tok)
        return np.where(tok < self.n_fact_tokens, (tok // self.S) % self.V, -1)

    def plain_prompt(self, e) -> np.ndarray:
        e = np.asarray(e)
        return np.concatenate([np.full(e.shape, self.BOS)[..., None], self.name(e),
                               np.full(e.shape, self.ANS)[..., None]], axis=-1)

    def refine_prompt(self, e, responses) -> np.ndarray:
        """[.., 4 + F + 4]: BOS d1 d2 ANS r_1..r_F REFINE d1 d2 ANS (the EOS of r is dropped)."""
        e = np.asarray(e)
        r = responses[..., : self.F]
        return np.concatenate([self.plain_prompt(e), r, np.full(e.shape, self.REFINE)[..., None],
                               self.name(e), np.full(e.shape, self.ANS)[..., None]], axis=-1)

    def next_logprobs(self, ctx: np.ndarray) -> np.ndarray:
        """log p(next token | context) for a batch of equal-length contexts (plain or refine format)."""
        R, L = ctx.shape
        F, V, S = self.F, self.V, self.S
        e = self.entity_of(ctx)
        refine = np.zeros(R, bool)
        if L >= F + 8:
            refine = ctx[:, 4 + F] == self.REFINE
        prefix = np.where(refine, F + 8, 4)
        t = L - prefix                                     # number of generated tokens so far
        out = np.full((R, self.vocab), np.log(TINY), dtype=np.float32)
        end = t >= F
        if end.any():
            out[end, self.EOS] = 0.0
        live = np.nonzero(~end)[0]
        if len(live) == 0:
            return out
        f = t[live]
        el = e[live]
        vp = self.value_p[el, f].copy()                    # [n, V]
        if self.snowball > 0:
            n_wrong = np.zeros(len(live))
            for p in np.unique(prefix[live]):          # rows of one format share their generated length
                sel = prefix[live] == p
                g = ctx[live[sel], p:]
                n_wrong[sel] = np.sum(self.value_of(g) != self.truth[el[sel], : g.shape[1]], axis=1)
            pt = self.p_true[el, f]
            new_pt = pt * (1 - self.snowball) ** n_wrong
            scale = (1 - new_pt) / np.maximum(1 - pt, TINY)
            vp = vp * scale[:, None]
            vp[np.arange(len(live)), self.truth[el, f]] = new_pt
        if refine.any():
            rl = refine[live]
            prev_tok = ctx[live, 4 + f]
            u = self.value_of(prev_tok)
            like = np.full((len(live), V), (1 - self.reliability) / (V - 1))
            like[np.arange(len(live)), u] = self.reliability
            post = vp * like
            post /= post.sum(axis=1, keepdims=True)
            vp = np.where(rl[:, None], post, vp)
        probs = vp[:, :, None] * self.surf[el, f]          # [n, V, S]
        cols = self.token(f[:, None, None], np.arange(V)[None, :, None], np.arange(S)[None, None, :])
        out[live[:, None], cols.reshape(len(live), -1)] = np.log(np.maximum(probs.reshape(len(live), -1), TINY))
        return out


def make_world(rng: np.random.Generator, E: int, F: int, V: int, S: int, alpha: float, p_lo: float, p_hi: float,
               reliability: float, snowball: float) -> World:
    truth = rng.integers(0, V, (E, F))
    confuser = (truth + rng.integers(1, V, (E, F))) % V
    p_true = rng.uniform(p_lo, p_hi, (E, F))
    rest = 1 - p_true
    value_p = np.empty((E, F, V))
    if V > 2:
        value_p[:] = (0.3 * rest / (V - 2))[..., None]
        conf_share = 0.7
    else:
        conf_share = 1.0
    ii, jj = np.indices((E, F))
    value_p[ii, jj, confuser] = conf_share * rest
    value_p[ii, jj, truth] = p_true
    surf = np.empty((E, F, V, S))
    if S == 1:
        surf[:] = 1.0
    else:
        surf[:] = 0.1 / (S - 1)
        main = rng.integers(0, S, (E, F, V))
        np.put_along_axis(surf, main[..., None], 0.9, axis=-1)
        surf[ii, jj, truth] = rng.dirichlet(np.full(S, alpha), (E, F))
    return World(E, F, V, S, truth, p_true, value_p, surf, reliability, snowball)


# ----------------------------------------------------------------------------- experiment
@dataclass(frozen=True)
class Config:
    k: int = param(8, Int(1, 64, "Sampled responses k (detail view)", help="prompts decoded jointly"))
    surface_forms: int = param(2, Int(1, 4, "Surface forms per value S",
                                      help="synonymous spellings; the greedy trap needs S ≥ 2"))
    alpha: float = param(2.0, Choice((0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0), "Surface split α",
                                     widget="select_slider",
                                     help="Dirichlet concentration: large α spreads a true fact evenly"))
    values: int = param(6, Int(3, 10, "Values per fact V"))
    p_lo: float = param(0.35, Float(0.2, 0.9, "Knowledge p_true: low end", step=0.05))
    p_hi: float = param(0.75, Float(0.2, 0.9, "Knowledge p_true: high end", step=0.05))
    reliability: float = param(0.9, Float(0.1, 0.99, "Refine reliability ρ", step=0.01,
                                          help="how strongly a conditioned copy trusts the answer in its prompt; "
                                               "ρ = 1/V makes the prompt uninformative, and below 1/V the copy "
                                               "avoids the answer in its prompt"))
    temperature: float = param(1.0, Float(0.3, 1.5, "Sampling temperature", step=0.1))
    snowball: float = param(0.0, Float(0.0, 0.5, "Snowball", step=0.05,
                                       help="each wrong fact already written lowers the next facts' p_true"))
    entities: int = param(400, Int(100, 2000, "Entities (questions)", step=100))
    reps: int = param(3, Int(1, 5, "Repetitions of the sampling"))
    example: int = param(0, Int(0, 99, "Entity shown in detail"))
    seed: int = param(0, Int(0, 9, "Seed"))


# largest widget setting (every size at its max): 5.6 s CPU at 1 000 entities and 4 repetitions, measured 2026-12-05
# (k = 64); widened to the spec's 2 000 entities and 5 repetitions on 2026-12-06: 13.4 s, every badge still passes
HEAVY_CONFIG = Config(k=64, surface_forms=4, values=10, entities=2000, reps=5)


@dataclass
class Result:
    k_values: np.ndarray
    acc_id: np.ndarray
    acc_usc: np.ndarray
    acc_vote: np.ndarray
    acc_greedy: float
    acc_sample: float
    all_right: dict[str, float]
    integration_hist: dict[int, int]       # (#correct ID) − (best #correct among the 4 inputs) at k = 4
    detail_samples: np.ndarray             # [k, F] value of each fact in the example's samples
    detail_correct: np.ndarray             # [k, F] bool
    detail_id: np.ndarray                  # [F] value of ID's answer
    detail_id_correct: np.ndarray
    detail_greedy_correct: np.ndarray
    detail_top: list                       # per slot: list of (label, summed log-prob, correct?)
    s_values: np.ndarray
    s_greedy: np.ndarray
    s_id: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)


def _fact_correct(world: World, e: np.ndarray, toks: np.ndarray) -> np.ndarray:
    """[.., F] bool: the i-th generated token carries slot i's true value."""
    F = world.F
    toks = toks[..., :F]
    slot = np.where(toks < world.n_fact_tokens, toks // (world.V * world.S), -1)
    vals = world.value_of(toks)
    truth = world.truth[e]
    while truth.ndim < vals.ndim:
        truth = truth[:, None]
    return (vals == truth) & (slot == np.arange(F))


def _evaluate_world(world: World, rng, cfg: Config, ks, reps: int, want_detail: bool, progress=None):
    E, F = world.E, world.F
    ents = np.arange(E)
    lm = world.next_logprobs
    greedy = greedy_decode(lm, world.plain_prompt(ents), F + 1, world.EOS)
    g_corr = _fact_correct(world, ents, greedy)
    kmax = max(ks)
    acc_id = np.zeros(len(ks))
    acc_usc = np.zeros(len(ks))
    acc_vote = np.zeros(len(ks))
    acc_sample = 0.0
    all_right = {"ID": 0.0, "greedy": float(g_corr.all(1).mean()), "sample": 0.0}
    hist = None
    detail = None
    strict = greedy_beats_inputs = np.nan
    for rep in range(reps):
        prompts = np.repeat(world.plain_prompt(ents), kmax, axis=0)
        samp = sample_decode(lm, prompts, F + 1, world.EOS, rng, cfg.temperature).reshape(E, kmax, F + 1)
        s_corr = _fact_correct(world, ents, samp)                       # [E, kmax, F]
        acc_sample += s_corr.mean() / reps
        all_right["sample"] += s_corr.all(2).mean() / reps
        vals = world.value_of(samp[..., :F])                            # [E, kmax, F]
        for i, k in enumerate(ks):
            ctx = world.refine_prompt(np.repeat(ents, k), samp[:, :k].reshape(E * k, F + 1)).reshape(E, k, -1)
            trace = [] if (want_detail and rep == 0 and k == cfg.k) else None
            ans = integrative_decode(lm, ctx, F + 1, world.EOS, trace)
            a_corr = _fact_correct(world, ents, ans)
            acc_id[i] += a_corr.mean() / reps
            if k == 16:
                all_right["ID"] += a_corr.all(1).mean() / reps
            v = vals[:, :k]
            best = usc_choice(v)
            acc_usc[i] += s_corr[ents, best].mean() / reps
            # fact-level majority vote (ties: lowest value index)
            counts = (v[..., None] == np.arange(world.V)).sum(axis=1)  # [E, F, V]
            acc_vote[i] += (np.argmax(counts, axis=2) == world.truth).mean() / reps
            if k == 4 and rep == 0:
                hist, strict, greedy_beats_inputs = integration_stats(a_corr, s_corr[:, :4], g_corr)
            if trace is not None:
                ex = cfg.example % E
                top = []
                for t in range(F):
                    sc = trace[t][ex]
                    order = np.argsort(sc)[::-1][:6]
                    top.append([(f"v{world.value_of(o)}·s{o % world.S}", float(sc[o]),
                                 bool(world.value_of(o) == world.truth[ex, t])) for o in order])
                detail = dict(samples=vals[ex, :k], correct=s_corr[ex, :k], id=world.value_of(ans[ex, :F]),
                              id_correct=a_corr[ex], greedy_correct=g_corr[ex], top=top)
        report(progress, (rep + 1) / reps, f"sampling repetition {rep + 1}/{reps}")
    return dict(acc_id=acc_id, acc_usc=acc_usc, acc_vote=acc_vote, acc_greedy=float(g_corr.mean()),
                strict=strict, greedy_beats_inputs=greedy_beats_inputs,
                acc_sample=float(acc_sample), all_right=all_right, hist=hist, detail=detail)


def usc_choice(vals: np.ndarray) -> np.ndarray:
    """USC-like pick per entity: the sample whose facts agree with the most facts of the samples (itself
    included, the same constant for every sample), ties to the lowest index. vals: [E, k, F] -> [E]."""
    agree = (vals[:, :, None, :] == vals[:, None, :, :]).sum(axis=(2, 3))
    return np.argmax(agree, axis=1)


def integration_stats(id_correct: np.ndarray, sample_correct: np.ndarray, greedy_correct: np.ndarray):
    """Per entity d = facts right in the integrated answer − facts right in its best input sample.

    id_correct [E, F], sample_correct [E, k, F], greedy_correct [E, F] (booleans). Returns the histogram of d,
    the share of entities with d > 0 whose answer also beats greedy's, and the share where greedy beats every
    input sample."""
    best_input = sample_correct.sum(2).max(1)
    d = id_correct.sum(1) - best_input
    u, c = np.unique(d, return_counts=True)
    hist = {int(a): int(b) for a, b in zip(u, c)}
    strict = float(np.mean((d > 0) & (id_correct.sum(1) > greedy_correct.sum(1))))
    return hist, strict, float(np.mean(greedy_correct.sum(1) > best_input))


def run(config: Config, progress=None) -> Result:
    rng = seed_everything(config.seed)
    lo, hi = sorted((config.p_lo, config.p_hi))
    world_args = dict(E=config.entities, F=5, V=config.values, alpha=config.alpha, p_lo=lo, p_hi=hi,
                      reliability=config.reliability, snowball=config.snowball)
    ks = tuple(sorted(set(K_SWEEP) | {config.k}))
    world = make_world(np.random.default_rng(config.seed), S=config.surface_forms, **world_args)
    main = _evaluate_world(world, rng, config, ks, config.reps, True, _span(progress, 0.0, 0.8))
    s_values = np.arange(1, 5)
    s_greedy, s_id = np.zeros(4), np.zeros(4)
    for i, S in enumerate(s_values):
        w = make_world(np.random.default_rng(config.seed), S=int(S), **world_args)
        r = _evaluate_world(w, np.random.default_rng(config.seed + 77), config, (8,), 1, False)
        s_greedy[i], s_id[i] = r["acc_greedy"], r["acc_id"][0]
        report(progress, 0.8 + 0.05 * (i + 1), f"surface-form sweep S = {S}")
    kv = np.array(ks)
    sweep_idx = [ks.index(k) for k in K_SWEEP]
    acc = main["acc_id"]
    doublings = [acc[sweep_idx[i + 1]] - acc[sweep_idx[i]] for i in range(len(K_SWEEP) - 1)]
    hist = main["hist"]
    n_ent = sum(hist.values())
    metrics = {
        "acc_greedy": main["acc_greedy"], "acc_sample": main["acc_sample"],
        **{f"acc_id_{k}": float(acc[ks.index(k)]) for k in ks},
        "gain_over_greedy": float(acc[ks.index(16)] - main["acc_greedy"]),
        "gain_16_vs_1": float(acc[ks.index(16)] - acc[ks.index(1)]),
        "worst_doubling": float(min(doublings)),
        "integration_share": float(sum(c for d, c in hist.items() if d > 0) / n_ent),
        "integration_strict": main["strict"], "greedy_beats_inputs": main["greedy_beats_inputs"],
        "acc_usc_16": float(main["acc_usc"][ks.index(16)]), "acc_vote_16": float(main["acc_vote"][ks.index(16)]),
    }
    d = main["detail"]
    report(progress, 1.0, "done")
    return Result(k_values=kv, acc_id=acc, acc_usc=main["acc_usc"], acc_vote=main["acc_vote"],
                  acc_greedy=main["acc_greedy"], acc_sample=main["acc_sample"], all_right=main["all_right"],
                  integration_hist=hist, detail_samples=d["samples"], detail_correct=d["correct"],
                  detail_id=d["id"], detail_id_correct=d["id_correct"], detail_greedy_correct=d["greedy_correct"],
                  detail_top=d["top"], s_values=s_values, s_greedy=s_greedy, s_id=s_id, metrics=metrics)


def _span(progress, a, b):
    from engine.core.progress import ProgressSpan

    return ProgressSpan(progress, a, b)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    return [
        Claim("Integrative decoding improves factual accuracy over greedy decoding",
              measured=m["gain_over_greedy"], op=">=", threshold=0.05, label="acc ID(k=16) − acc greedy",
              detail=f"ID(16) {m['acc_id_16']:.3f}, greedy {m['acc_greedy']:.3f}, one sample {m['acc_sample']:.3f} "
                     "(ID uses 16× the decoding compute)"),
        Claim("The gain grows with the number of sampled responses", measured=m["gain_16_vs_1"], op=">=",
              threshold=0.10, label="acc ID(16) − acc ID(1)",
              detail=f"ID(1) {m['acc_id_1']:.3f} → ID(16) {m['acc_id_16']:.3f}"),
        Claim("…and accuracy never drops by more than 0.01 when k doubles (1 → 2 → 4 → 8 → 16)",
              measured=m["worst_doubling"], op=">=",
              threshold=-0.01, label="smallest change per doubling",
              detail=" → ".join(f"{m[f'acc_id_{k}']:.3f}" for k in K_SWEEP)),
        # The spec's share (ID(4) beats each of its 4 inputs, bar 0.10) is 0.155 / 0.133 / 0.163 at seeds 0-2, but
        # greedy decoding alone beats all 4 samples for 0.163 / 0.188 / 0.180 of entities (measured 2026-12-05), so
        # that share does not tell integrating from decoding greedily. The badge also requires beating greedy, a
        # rarer event (0.100 / 0.080 / 0.075), hence the lower bar 0.04; the spec's share is in the detail.
        Claim("ID integrates facts rather than selecting one sample: its answer can be better than every "
              "input it was given (and than greedy)", measured=m["integration_strict"], op=">=", threshold=0.04,
              label="share of entities where ID(4) beats all 4 inputs and greedy",
              detail=f"any method that picks one of the samples, or greedy itself, scores exactly 0; "
                     f"ID(4) beats all 4 inputs for {m['integration_share']:.1%} of entities, greedy does for "
                     f"{m['greedy_beats_inputs']:.1%}"),
    ]
