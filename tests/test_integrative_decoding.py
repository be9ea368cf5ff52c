import numpy as np
import pytest
from scipy.special import log_softmax, logsumexp

from engine import integrative_decoding as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def _world(seed=0, **kw):
    args = dict(E=50, F=5, V=6, S=2, alpha=2.0, p_lo=0.35, p_hi=0.75, reliability=0.9, snowball=0.0)
    args.update(kw)
    return eng.make_world(np.random.default_rng(seed), **args)


def test_claims_pass_at_default(default_result):
    for c in eng.claims(default_result):
        assert c.passed, c.describe()


def test_argmax_of_summed_logprobs_equals_mean_logits():
    rng = np.random.default_rng(0)
    for _ in range(20):
        Z = rng.normal(size=(5, 11)) * 3
        out = eng.integrative_decode(lambda ctx, Z=Z: log_softmax(Z, axis=1), np.zeros((1, 5, 2), int), 1, eos_id=-1)
        assert out[0, 0] == np.argmax(Z.mean(0))


def test_distributions_are_normalised():
    w = _world(snowball=0.2)
    e = np.arange(w.E)
    ctx = w.plain_prompt(e)
    samp = eng.sample_decode(w.next_logprobs, np.repeat(ctx, 2, 0), w.F + 1, w.EOS, np.random.default_rng(1))
    rctx = w.refine_prompt(np.repeat(e, 2), samp)
    for c in (ctx, rctx):
        for t in range(w.F + 1):
            np.testing.assert_allclose(logsumexp(w.next_logprobs(c).astype(float), axis=1), 0.0, atol=1e-4)
            c = np.concatenate([c, np.full((len(c), 1), w.token(min(t, w.F - 1), 0, 0))], 1)


def test_greedy_closed_form():
    w = _world(seed=3)
    e = np.arange(w.E)
    out = eng.greedy_decode(w.next_logprobs, w.plain_prompt(e), w.F + 1, w.EOS)
    joint = w.value_p[..., None] * w.surf                    # [E, F, V, S]
    best_v = np.argmax(joint.reshape(w.E, w.F, -1), axis=2) // w.S
    np.testing.assert_array_equal(w.value_of(out[:, : w.F]), best_v)
    assert np.all(out[:, w.F] == w.EOS)


def test_closed_form_per_slot():
    """ID token = argmax_{v,s} Σ_j log post_j(v) + k log p(s|v), from the world tables by hand."""
    w = _world(seed=4)
    k = 5
    e = np.arange(w.E)
    samp = eng.sample_decode(w.next_logprobs, np.repeat(w.plain_prompt(e), k, 0), w.F + 1, w.EOS,
                             np.random.default_rng(2)).reshape(w.E, k, -1)
    ctx = w.refine_prompt(np.repeat(e, k), samp.reshape(w.E * k, -1)).reshape(w.E, k, -1)
    ans = eng.integrative_decode(w.next_logprobs, ctx, w.F + 1, w.EOS)
    rho, V = w.reliability, w.V
    for ent in range(w.E):
        for f in range(w.F):
            score = np.zeros((V, w.S))
            for j in range(k):
                u = w.value_of(samp[ent, j, f])
                like = np.where(np.arange(V) == u, rho, (1 - rho) / (V - 1))
                post = w.value_p[ent, f] * like
                post /= post.sum()
                score += np.log(post)[:, None]
            score += k * np.log(np.maximum(w.surf[ent, f], eng.TINY))
            v, s = np.unravel_index(np.argmax(score), score.shape)
            assert ans[ent, f] == w.token(f, v, s)


def test_identical_inputs_equal_greedy_under_conditional_model():
    w = _world(seed=5)
    e = np.arange(w.E)
    one = eng.sample_decode(w.next_logprobs, w.plain_prompt(e), w.F + 1, w.EOS, np.random.default_rng(3))
    rp = w.refine_prompt(e, one)
    greedy_cond = eng.greedy_decode(w.next_logprobs, rp, w.F + 1, w.EOS)
    ctx = np.repeat(rp[:, None], 6, axis=1)
    np.testing.assert_array_equal(eng.integrative_decode(w.next_logprobs, ctx, w.F + 1, w.EOS), greedy_cond)


def test_uninformative_refine_step_gives_greedy():
    res = eng.run(eng.Config(reliability=1 / 6, entities=200, reps=1))
    np.testing.assert_allclose(res.acc_id, res.acc_greedy, atol=1e-12)
    assert not eng.claims(res)[0].passed
    assert res.metrics["integration_strict"] == 0.0


def test_single_spelling_is_the_boundary():
    res = eng.run(eng.Config(surface_forms=1, entities=200, reps=1))
    assert res.metrics["gain_over_greedy"] < 0.05  # greedy is already the per-fact mode


def test_result_shapes(default_result):
    r = default_result
    assert r.detail_samples.shape == (8, 5)
    assert sum(r.integration_hist.values()) == 400


# ----------------------------------------------------------------------------- negative control for claim 1
def _lockstep_decoder(merge):
    """The engine's group decoder with its merging rule made pluggable: ``merge`` turns one step's
    log-probabilities [groups, k, vocab] into scores [groups, vocab]; the arg-max token is appended to all k
    rows of its group, as in ``integrative_decode``."""

    def decode(next_logprobs, contexts, max_new_tokens, eos_id, trace=None):
        G, k, L = contexts.shape
        ctx = contexts.reshape(G * k, L)
        out = np.full((G, max_new_tokens), eos_id)
        done = np.zeros(G, bool)
        for t in range(max_new_tokens):
            score = merge(next_logprobs(ctx).reshape(G, k, -1))
            if trace is not None:
                trace.append(score)
            tok = np.where(done, eos_id, np.argmax(score, axis=1))
            out[:, t] = tok
            ctx = np.concatenate([ctx, np.repeat(tok, k)[:, None]], axis=1)
            done |= tok == eos_id
            if done.all():
                break
        return out

    return decode


def _sum_logprobs(lp):
    return lp.sum(axis=1)


def _sum_probs(lp):
    # an ensemble average in probability space instead of log space
    return np.exp(lp).sum(axis=1)


def _sum_top1_probs(lp):
    # every row contributes the probability of its own top-1 token only (a soft token-level vote)
    G, k, V = lp.shape
    flat = lp.reshape(G * k, V)
    top = np.argmax(flat, axis=1)
    votes = np.zeros_like(flat)
    votes[np.arange(G * k), top] = np.exp(flat[np.arange(G * k), top])
    return votes.reshape(G, k, V).sum(axis=1)


def test_pluggable_decoder_with_log_space_merge_reproduces_the_engine(default_result, monkeypatch):
    """Guard for the control below: the test's decoder, merging in log space, gives the engine's numbers exactly,
    so any change in the control comes from the merging space alone."""
    monkeypatch.setattr(eng, "integrative_decode", _lockstep_decoder(_sum_logprobs))
    res = eng.run(eng.Config())
    np.testing.assert_array_equal(res.acc_id, default_result.acc_id)
    assert res.metrics == default_result.metrics


@pytest.mark.parametrize("merge", [_sum_probs, _sum_top1_probs], ids=["sum-of-probs", "top1-probs"])
def test_claim1_fails_when_probabilities_are_merged_in_the_wrong_space(default_result, monkeypatch, merge):
    """Spec claim 1, negative control: ID that adds the k rows' probabilities (or only each row's top-1
    probability) instead of their log-probabilities falls back to the phrasing trap: a wrong value concentrated
    on one spelling wins the sum of probabilities, as it wins greedy decoding. Same seed and world as the intact
    default run. Measured at the default config (seed 0): intact gain over greedy +0.104 (ID(16) 0.757, greedy
    0.653); probability sum +0.004 (0.657); top-1 probabilities +0.001 (0.654)."""
    monkeypatch.setattr(eng, "integrative_decode", _lockstep_decoder(merge))
    broken = eng.run(eng.Config())
    assert broken.acc_greedy == default_result.acc_greedy          # same world, same greedy baseline
    assert eng.claims(default_result)[0].passed
    assert not eng.claims(broken)[0].passed
    assert broken.metrics["gain_over_greedy"] < 0.02
    assert broken.metrics["acc_id_16"] < default_result.metrics["acc_id_16"] - 0.07


def test_usc_choice_matches_a_pairwise_brute_force():
    rng = np.random.default_rng(11)
    for _ in range(30):
        E, k, F, V = 4, int(rng.integers(1, 7)), 5, int(rng.integers(2, 5))
        vals = rng.integers(0, V, size=(E, k, F))
        got = eng.usc_choice(vals)
        for e in range(E):
            score = [sum(int(vals[e, i, f] == vals[e, j, f]) for j in range(k) if j != i for f in range(F))
                     for i in range(k)]
            assert got[e] == score.index(max(score))           # most agreement with the others, lowest index


def test_integration_stats_match_a_loop_over_entities():
    rng = np.random.default_rng(12)
    E, k, F = 200, 4, 5
    a, s, g = rng.random((E, F)) < 0.6, rng.random((E, k, F)) < 0.5, rng.random((E, F)) < 0.55
    hist, strict, greedy_beats = eng.integration_stats(a, s, g)
    ds, n_strict, n_greedy = [], 0, 0
    for e in range(E):
        best = max(int(s[e, i].sum()) for i in range(k))
        d = int(a[e].sum()) - best
        ds.append(d)
        n_strict += d > 0 and int(a[e].sum()) > int(g[e].sum())
        n_greedy += int(g[e].sum()) > best
    assert hist == {d: ds.count(d) for d in set(ds)}
    assert strict == pytest.approx(n_strict / E) and greedy_beats == pytest.approx(n_greedy / E)
    assert strict <= sum(c for d, c in hist.items() if d > 0) / E


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_sample_decode_draws_from_the_tempered_softmax(temperature):
    """Chi-square test of 40 000 one-token draws against softmax(log p / T)."""
    from scipy.stats import chisquare
    logp = log_softmax(np.array([1.5, 0.2, -0.7, 0.9, -2.0]))
    n = 40_000
    tok = eng.sample_decode(lambda ctx: np.tile(logp, (len(ctx), 1)), np.zeros((n, 1), int), 1, eos_id=-1,
                            rng=np.random.default_rng(13), temperature=temperature)[:, 0]
    expected = np.exp(log_softmax(logp / temperature)) * n
    assert chisquare(np.bincount(tok, minlength=5), expected).pvalue > 1e-3


def test_snowball_shrinks_the_true_value_once_per_earlier_wrong_fact():
    """The next slot's probability of the true value is p_true · (1 − s)^(wrong facts so far); the other values
    share the rest in their old proportions."""
    s = 0.3
    w = _world(seed=5, snowball=s)
    e = np.arange(w.E)
    f = 3
    for n_wrong in range(f + 1):
        ctx = w.plain_prompt(e)
        for j in range(f):
            v = (w.truth[:, j] + (1 if j < n_wrong else 0)) % w.V
            ctx = np.concatenate([ctx, w.token(np.full(w.E, j), v, np.zeros(w.E, int))[:, None]], 1)
        p = np.exp(w.next_logprobs(ctx).astype(float))
        pv = np.stack([sum(p[e, w.token(np.full(w.E, f), np.full(w.E, v), np.full(w.E, si))]
                           for si in range(w.S)) for v in range(w.V)], 1)        # [E, V] value probabilities
        pt = w.p_true[e, f]
        np.testing.assert_allclose(pv[e, w.truth[:, f]], pt * (1 - s) ** n_wrong, rtol=1e-4)
        other = np.ones((w.E, w.V), bool)
        other[e, w.truth[:, f]] = False
        base = w.value_p[e, f] * other
        np.testing.assert_allclose(pv * other, base * ((1 - pt * (1 - s) ** n_wrong) / (1 - pt))[:, None],
                                   rtol=1e-4, atol=1e-7)


# ----------------------------------------------------------------------------- every plotted number, by brute force
def _decode_facts(world, toks):
    """Per generated token: (slot, value) read off the token layout by hand; (-1, -1) for non-fact tokens."""
    toks = np.asarray(toks)
    fact = toks < world.F * world.V * world.S
    slot = np.where(fact, toks // (world.V * world.S), -1)
    value = np.where(fact, (toks // world.S) % world.V, -1)
    return slot, value


def _right(world, ents, toks):
    """[.., F] bool: generated token i names slot i and carries the entity's true value there."""
    slot, value = _decode_facts(world, toks[..., : world.F])
    truth = world.truth[ents].reshape(ents.shape + (1,) * (value.ndim - ents.ndim - 1) + (world.F,))
    return (slot == np.arange(world.F)) & (value == truth)


@pytest.fixture(scope="module")
def spied():
    """A small run (k = 3, so the sweep has an extra point; two repetitions; entity 7 in detail) with every decoder
    call recorded: its contexts and its output."""
    cfg = eng.Config(k=3, entities=120, reps=2, example=7)
    calls = {"greedy": [], "sample": [], "id": []}
    real = {"greedy": eng.greedy_decode, "sample": eng.sample_decode, "id": eng.integrative_decode}

    def spy(kind):
        def wrapped(lm, ctx, *args, **kwargs):
            out = real[kind](lm, ctx, *args, **kwargs)
            calls[kind].append((lm.__self__, np.array(ctx), out))
            return out
        return wrapped

    with pytest.MonkeyPatch.context() as mp:
        for kind, name in (("greedy", "greedy_decode"), ("sample", "sample_decode"), ("id", "integrative_decode")):
            mp.setattr(eng, name, spy(kind))
        res = eng.run(cfg)
    return cfg, res, calls


def test_curves_and_headline_numbers_match_brute_force_from_the_decoded_tokens(spied):
    """From the recorded samples and answers of the main world: ID accuracy per k, the USC pick (sample agreeing
    with the most facts of the OTHER samples, lowest index on ties) and the fact-level majority vote (lowest value on
    ties), both over the first k samples, one-sample and greedy accuracy, averaged over the two repetitions, which
    draw different samples; then the badge numbers."""
    cfg, res, calls = spied
    world = calls["greedy"][0][0]
    E, F, V = world.E, world.F, world.V
    ents = np.arange(E)
    ks = [int(k) for k in res.k_values]
    assert ks == sorted(set(eng.K_SWEEP) | {cfg.k})
    assert all(c[0] is world for c in calls["sample"][:cfg.reps] + calls["id"][:cfg.reps * len(ks)])
    acc_id, acc_usc, acc_vote = (np.zeros(len(ks)) for _ in range(3))
    acc_sample = 0.0
    samples = []
    for rep in range(cfg.reps):
        samp = calls["sample"][rep][2].reshape(E, max(ks), F + 1)
        samples.append(samp)
        right = _right(world, ents, samp)                               # [E, kmax, F]
        _, vals = _decode_facts(world, samp[..., :F])
        acc_sample += right.mean() / cfg.reps
        for i, k in enumerate(ks):
            ans = calls["id"][rep * len(ks) + i][2]
            assert calls["id"][rep * len(ks) + i][1].shape[:2] == (E, k)
            acc_id[i] += _right(world, ents, ans).mean() / cfg.reps
            usc, vote = [], []
            for e in range(E):
                agree = [sum(int(vals[e, a, f] == vals[e, b, f]) for b in range(k) if b != a for f in range(F))
                         for a in range(k)]
                usc.append(right[e, agree.index(max(agree))].mean())
                for f in range(F):
                    counts = [int(np.sum(vals[e, :k, f] == v)) for v in range(V)]
                    vote.append(counts.index(max(counts)) == world.truth[e, f])
            acc_usc[i] += np.mean(usc) / cfg.reps
            acc_vote[i] += np.mean(vote) / cfg.reps
    assert not np.array_equal(samples[0], samples[1])                  # each repetition draws afresh
    greedy_right = _right(world, ents, calls["greedy"][0][2])
    np.testing.assert_allclose(res.acc_id, acc_id, atol=1e-12)
    np.testing.assert_allclose(res.acc_usc, acc_usc, atol=1e-12)
    np.testing.assert_allclose(res.acc_vote, acc_vote, atol=1e-12)
    assert res.acc_sample == pytest.approx(acc_sample, abs=1e-12)
    assert res.acc_greedy == pytest.approx(greedy_right.mean(), abs=1e-12)
    m = res.metrics
    at = {k: acc_id[i] for i, k in enumerate(ks)}
    assert m["gain_over_greedy"] == pytest.approx(at[16] - greedy_right.mean(), abs=1e-12)
    assert m["gain_16_vs_1"] == pytest.approx(at[16] - at[1], abs=1e-12)
    sweep = list(eng.K_SWEEP)
    assert m["worst_doubling"] == pytest.approx(min(at[b] - at[a] for a, b in zip(sweep, sweep[1:])), abs=1e-12)
    assert m["acc_usc_16"] == pytest.approx(acc_usc[ks.index(16)]) and m["acc_vote_16"] == pytest.approx(
        acc_vote[ks.index(16)])


def test_integration_numbers_match_a_loop_over_the_k4_answers(spied):
    """First repetition, k = 4: d = facts right in ID's answer − facts right in the best of the FIRST four samples;
    the histogram, the share with d > 0, and the share with d > 0 that also beat greedy."""
    cfg, res, calls = spied
    world = calls["greedy"][0][0]
    ents = np.arange(world.E)
    ks = [int(k) for k in res.k_values]
    ans = calls["id"][ks.index(4)][2]
    samp = calls["sample"][0][2].reshape(world.E, max(ks), world.F + 1)
    id_n = _right(world, ents, ans).sum(1)
    best = _right(world, ents, samp[:, :4]).sum(2).max(1)
    greedy_n = _right(world, ents, calls["greedy"][0][2]).sum(1)
    d = id_n - best
    assert res.integration_hist == {int(v): int(np.sum(d == v)) for v in np.unique(d)}
    assert res.metrics["integration_share"] == pytest.approx(np.mean(d > 0), abs=1e-12)
    assert res.metrics["integration_strict"] == pytest.approx(np.mean((d > 0) & (id_n > greedy_n)), abs=1e-12)
    assert res.metrics["greedy_beats_inputs"] == pytest.approx(np.mean(greedy_n > best), abs=1e-12)


def test_detail_view_is_the_chosen_entity_and_its_summed_scores(spied):
    """Entity 7 at k = 3: its samples' values and ID's answer, and per slot the six best tokens by the SUM over
    the k prompts of log p(token | prompt + answer so far), scored here by calling the language model row by row."""
    cfg, res, calls = spied
    world = calls["greedy"][0][0]
    ks = [int(k) for k in res.k_values]
    ex = cfg.example % world.E
    ctx, ans = calls["id"][ks.index(cfg.k)][1:]
    samp = calls["sample"][0][2].reshape(world.E, max(ks), world.F + 1)
    np.testing.assert_array_equal(res.detail_samples, _decode_facts(world, samp[ex, :cfg.k, :world.F])[1])
    np.testing.assert_array_equal(res.detail_correct, _right(world, np.arange(world.E), samp)[ex, :cfg.k])
    np.testing.assert_array_equal(res.detail_id, _decode_facts(world, ans[ex, :world.F])[1])
    np.testing.assert_array_equal(res.detail_id_correct, _right(world, np.array([ex]), ans[ex:ex + 1])[0])
    np.testing.assert_array_equal(res.detail_greedy_correct,
                                  _right(world, np.arange(world.E), calls["greedy"][0][2])[ex])
    assert len(res.detail_top) == world.F
    for t, top in enumerate(res.detail_top):
        score = np.zeros(world.vocab)
        for j in range(cfg.k):
            row = np.concatenate([ctx[ex, j], ans[ex, :t]])[None]
            score += world.next_logprobs(row)[0].astype(np.float64)
        assert len(top) == 6 and top[0][0] == f"v{(ans[ex, t] // world.S) % world.V}·s{ans[ex, t] % world.S}"
        shown = [sc for _, sc, _ in top]
        np.testing.assert_allclose(shown, np.sort(score)[::-1][:6], rtol=1e-5, atol=1e-4)  # the six best, in order
        for label, sc, ok in top:                                  # each label carries its own score (ties allowed)
            v, s = (int(part[1:]) for part in label.split("·"))
            assert sc == pytest.approx(score[world.token(t, v, s)], rel=1e-5, abs=1e-4), label
            assert ok == (v == world.truth[ex, t])


def test_surface_form_sweep_matches_greedy_in_closed_form(spied):
    """The S sweep (S = 1..4, same seed and knowledge): greedy accuracy there is the share of facts whose most likely
    (value, spelling) pair carries the true value, from each world's tables; S = the page's S is the main run's."""
    cfg, res, calls = spied
    main = calls["greedy"][0][0]
    np.testing.assert_array_equal(res.s_values, [1, 2, 3, 4])
    for i, S in enumerate(res.s_values):
        lo, hi = sorted((cfg.p_lo, cfg.p_hi))
        w = eng.make_world(np.random.default_rng(cfg.seed), E=main.E, F=main.F, V=main.V, S=int(S), alpha=cfg.alpha,
                           p_lo=lo, p_hi=hi, reliability=cfg.reliability, snowball=cfg.snowball)
        joint = w.value_p[..., None] * w.surf                               # [E, F, V, S]
        best_v = np.argmax(joint.reshape(w.E, w.F, -1), axis=2) // w.S
        assert res.s_greedy[i] == pytest.approx(np.mean(best_v == w.truth), abs=1e-12), S
    assert res.s_greedy[cfg.surface_forms - 1] == pytest.approx(res.acc_greedy, abs=1e-12)
    # one spelling per value: greedy is already the per-fact mode, and ID has nothing to gain
    assert res.s_id[1] - res.s_greedy[1] > res.s_id[0] - res.s_greedy[0]


@pytest.mark.parametrize("S", [2, 3])
def test_true_value_spellings_follow_the_dirichlet_concentration(S):
    """The true value's spellings are Dirichlet(α, ..., α): E[p_1²] = (α + 1) / (S (S α + 1)), so the α slider decides
    how evenly a known fact is split (checked at α = 0.3 and 20 on 2 500 facts)."""
    for alpha in (0.3, 20.0):
        w = _world(seed=9, E=500, S=S, alpha=alpha)
        p1 = w.surf[np.arange(w.E)[:, None], np.arange(w.F)[None], w.truth][..., 0]
        assert np.mean(p1**2) == pytest.approx((alpha + 1) / (S * (S * alpha + 1)), abs=0.025), alpha


def test_each_group_token_is_appended_to_its_own_k_rows():
    """Three groups of k = 2 prompts whose next-token scores depend on the tokens already in the row: each step's
    arg-max (group's first token + length, mod 7) must be appended to the two rows of ITS group only, so the
    recorded contexts of a group stay identical and end with that group's answer so far."""
    G, k, V = 3, 2, 7
    seen = []

    def lm(ctx):
        seen.append(ctx.copy())
        assert np.array_equal(ctx[0::2], ctx[1::2])                  # rows of one group are in lock-step
        out = np.full((len(ctx), V), -5.0)
        out[np.arange(len(ctx)), (ctx[:, 0] + ctx.shape[1]) % V] = 0.0
        return out

    contexts = np.repeat(np.array([[1], [3], [4]])[:, None, :], k, axis=1)   # [G, k, 1]
    out = eng.integrative_decode(lm, contexts, 4, eos_id=-1)
    for g in range(G):
        assert out[g].tolist() == [(contexts[g, 0, 0] + 1 + t) % V for t in range(4)]
        np.testing.assert_array_equal(seen[-1][2 * g:2 * g + 2, 1:], np.tile(out[g, :3], (k, 1)))


# ----------------------------------------------------------------------------- what the page draws and quotes


def test_page_curves_detail_rows_and_bar_colours_follow_the_result(default_result):
    """Default page: every accuracy curve (over k and over S) is the Result's array of the method it names; in the
    detail grid the *ID answer* and *greedy answer* rows mark their own correct facts; a top-token bar is green
    exactly when its token is the true value."""

    r = default_result
    at = open_page("integrative_decoding", seed=(("engine.integrative_decoding", eng.Config(), default_result),))
    figs = figures(at)

    acc = {d["name"]: values(d["y"]) for d in figs["acc_k"]["data"]}
    for name, want in (("integrative decoding", r.acc_id), ("USC-like selection", r.acc_usc),
                       ("fact-level vote", r.acc_vote)):
        np.testing.assert_allclose(acc[name], want, err_msg=name)
    s = {d["name"]: values(d["y"]) for d in figs["s_sweep"]["data"]}
    np.testing.assert_allclose(s["greedy"], r.s_greedy)
    np.testing.assert_allclose(s["integrative decoding (k = 8)"], r.s_id)

    grid = figs["detail_grid"]["data"][0]
    z, rows = values(grid["z"]), list(grid["y"])
    np.testing.assert_array_equal(z[rows.index("ID answer")], r.detail_id_correct.astype(float))
    np.testing.assert_array_equal(z[rows.index("greedy answer")], r.detail_greedy_correct.astype(float))

    bars = [d for d in figs["detail_bars"]["data"] if d["type"] == "bar"]
    assert len(bars) == len(r.detail_top)
    for d, top in zip(bars, r.detail_top, strict=True):
        assert list(d["x"]) == [t[0] for t in top]
        assert list(d["marker"]["color"]) == ["#29a36a" if t[2] else "#e4572e" for t in top]
