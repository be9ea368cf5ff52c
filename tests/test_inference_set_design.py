"""Inference set design: claims at the default config and independent checks."""

import numpy as np
import pytest
import torch
from scipy.stats import binomtest
from sklearn.linear_model import LogisticRegression

import engine.inference_set_design as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_pass_at_default(default_result):
    assert default_result.agents["active"].halted   # the safety badge tests a real early stop
    cs = eng.claims(default_result)
    assert len(cs) == 5
    for c in cs:
        assert c.passed, c.describe()


def test_system_accuracy_recomputed_from_masks(default_result):
    y = default_result.labels
    for tr in default_result.agents.values():
        for t in range(len(tr.sa)):
            obs, pred = tr.observed[t], tr.preds[t]
            manual = (obs.sum() + np.sum(pred[~obs] == y[~obs])) / len(y)
            assert manual == pytest.approx(tr.sa[t], abs=1e-12)
            assert obs.sum() / len(y) == pytest.approx(tr.frac[t])
        # O grows monotonically, by one batch per round
        sizes = tr.observed.sum(axis=1)
        assert np.all(np.diff(sizes) == default_result.config.batch)


def test_active_spends_budget_on_corrupted_examples(default_result):
    act, rnd = default_result.agents["active"], default_result.agents["random"]
    # random batches carry the base rate of corrupted examples (about 30%), active ones far more early on
    assert act.batch_hard[:3].mean() > 0.6
    assert abs(rnd.batch_hard[:5].mean() - default_result.hard.mean()) < 0.1


def test_oracle_reference(default_result):
    """An oracle that labels exactly the corrupted set, with an sklearn model, brackets the agents."""
    cfg = default_result.config
    X, y, hard, _, _ = eng.make_data(cfg.corruption, cfg.seed)
    act, rnd = default_result.agents["active"], default_result.agents["random"]
    O = act.observed[0] | hard
    budget = O.mean()
    # (a) oracle acquisition with an agent-like predictor (trained on what the oracle labelled) beats random
    lr = LogisticRegression(max_iter=2000).fit(X[O], y[O])
    sa_oracle = eng.system_accuracy(O, lr.predict(X), y)
    assert sa_oracle > eng.interp_at(rnd, budget)
    # (b) upper reference: oracle set + a predictor trained on every clean pool label
    clean = ~hard
    ref = LogisticRegression(max_iter=2000).fit(X[clean], y[clean])
    sa_upper = eng.system_accuracy(O, ref.predict(X), y)
    assert eng.interp_at(act, budget) <= sa_upper + 0.01


@pytest.mark.parametrize("k,n,delta", [(0, 150, 0.05), (120, 150, 0.05), (150, 150, 0.05), (37, 50, 0.1),
                                       (1, 10, 0.01)])
def test_clopper_pearson_matches_scipy_binomtest(k, n, delta):
    ref = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * delta, method="exact").low
    assert eng.clopper_pearson_lower(k, n, delta) == pytest.approx(ref, abs=1e-9)


def test_least_confidence_range():
    p = np.array([[1.0] + [0.0] * 9, [0.1] * 10])
    assert eng.least_confidence(p) == pytest.approx([0.0, 1.0])


def test_one_batch_exhausts_pool():
    r = eng.run(eng.Config(n_init=150, batch=eng.N_POOL - 150, steps=20))
    for tr in r.agents.values():
        assert len(tr.sa) == 1
        assert tr.frac_next[-1] == 1.0 and tr.sa_delivered[-1] == 1.0 and tr.sa_lb[-1] == pytest.approx(1.0)
        assert not tr.halted   # the rule only "fires" once every label is in
    # negative control: the safety badge must not pass on a rule that never stopped early (SA 1 is trivial there)
    safety = [c for c in eng.claims(r) if "stopping rule is safe" in c.statement][0]
    assert not safety.passed and "never halted" in safety.detail


def test_rho_one_makes_agents_coincide():
    r = eng.run(eng.Config(random_frac=1.0, batch=300, n_init=300, steps=20))
    a, b = r.agents["active"], r.agents["random"]
    np.testing.assert_array_equal(a.observed, b.observed)
    np.testing.assert_allclose(a.sa, b.sa)


def test_most_confident_baseline_fails_claim_one(default_result):
    cfg = default_result.config
    X, y, hard, Xt, yt = eng.make_data(cfg.corruption, cfg.seed)
    import torch
    tr, _ = eng.run_agent("most_confident", cfg, X, y, hard, Xt, yt, torch.device("cpu"))
    gap = eng.interp_at(tr, eng.EVAL_FRACTION) - eng.interp_at(default_result.agents["random"], eng.EVAL_FRACTION)
    assert gap < 0.05


@pytest.mark.parametrize("kw", [dict(target=0.9), dict(corruption="hide_bottom")])
def test_label_free_confidence_rule_is_unsafe_where_the_certified_rule_is_not(kw):
    """The spec's falsification of the stopping claim: a rule that trusts the model's own average confidence on the
    unlabelled rest stops earlier and delivers a table below the target (measured: 20 % of the pool, true SA 0.82 at
    τ = 0.9; 20 %, 0.91 at τ = 0.95 with hidden lower halves), while the certified rule stops later and meets it."""
    r = eng.run(eng.Config(**kw))
    m, tau = r.metrics, r.config.target
    assert m["active_f_naive_stop"] < m["active_f_stop"]
    assert m["active_sa_at_naive_stop"] < tau - 0.02
    assert m["active_halted"] and m["active_sa_at_stop"] >= tau


def test_certified_bound_rebuilt_round_by_round_with_scipy(default_result):
    """Every round's certified system accuracy, rebuilt from what the round saw: the batch's size and correct
    count, scipy's exact (Clopper–Pearson) interval at two-sided level 1 − 2δ for the one-sided 1 − δ bound, and
    the share of the pool labelled after the batch: SA_lb = f_next + (1 − f_next) · a_lb."""
    cfg, n = default_result.config, len(default_result.labels)
    for tr in default_result.agents.values():
        for t in range(len(tr.sa_lb)):
            b = int(round((tr.frac_next[t] - tr.frac[t]) * n))
            k = int(round(tr.batch_acc[t] * b))
            assert k == pytest.approx(tr.batch_acc[t] * b, abs=1e-9)    # a whole count of correct labels
            a_lb = binomtest(k, b).proportion_ci(confidence_level=1 - 2 * cfg.delta, method="exact").low if k else 0.0
            assert tr.sa_lb[t] == pytest.approx(tr.frac_next[t] + (1 - tr.frac_next[t]) * a_lb, abs=1e-9)
            # the bound sits below the point estimate whenever the batch was not all correct
            assert tr.sa_lb[t] <= tr.frac_next[t] + (1 - tr.frac_next[t]) * tr.batch_acc[t] + 1e-12


@pytest.mark.parametrize("rho,b", [(0.0, 40), (0.3, 40), (0.5, 7), (0.9, 25)])
def test_select_batch_draws_a_random_share_and_then_the_most_uncertain(rho, b):
    """Brute-force property of the active batch: b distinct hidden examples, of which at least b − ⌊ρ b⌋ are at
    least as uncertain as every hidden example left out (the rest are the uniform draws)."""
    rng = np.random.default_rng(5)
    u = rng.random(300)
    hidden = np.sort(rng.choice(300, 120, replace=False))
    chosen = eng.select_batch("active", hidden, u, b, rho, np.random.default_rng(6))
    assert len(chosen) == b and len(np.unique(chosen)) == b and np.isin(chosen, hidden).all()
    left = np.setdiff1d(hidden, chosen)
    n_rand = int(np.floor(rho * b + 1e-9))
    assert (u[chosen] >= u[left].max()).sum() >= b - n_rand
    # with ρ = 0 it is exactly the top-b of the hidden set
    if rho == 0:
        assert set(chosen) == set(hidden[np.argsort(-u[hidden])[:b]])


def test_interp_at_passes_through_every_round(default_result):
    for tr in default_result.agents.values():
        for t in range(len(tr.sa)):
            assert eng.interp_at(tr, tr.frac[t]) == pytest.approx(tr.sa[t], abs=1e-12)
        assert eng.interp_at(tr, 1.0) == 1.0


# ----------------------------------------------------------------------------- page numbers rebuilt from traces

def test_metrics_and_badges_rebuilt_from_the_traces(default_result):
    """Every metric behind the badges, their details and the stars on the plot, recomputed from the per-round
    arrays with plain numpy (first crossing by scanning, interpolation by np.interp)."""
    r, tau = default_result, default_result.config.target
    m = r.metrics
    for name, tr in r.agents.items():
        last = len(tr.sa) - 1
        stop = next((t for t in range(last + 1) if tr.sa_lb[t] >= tau), last)
        cross = next((t for t in range(last + 1) if tr.sa_delivered[t] >= tau), last)
        naive = next((t for t in range(last + 1) if tr.sa_naive[t] >= tau), last)
        assert tr.stop_round == stop and tr.naive_stop_round == naive
        assert m[f"{name}_f_stop"] == tr.frac_next[stop] and m[f"{name}_sa_at_stop"] == tr.sa_delivered[stop]
        assert m[f"{name}_cross_round"] == cross and m[f"{name}_f_cross"] == tr.frac_next[cross]
        assert m[f"{name}_f_naive_stop"] == tr.frac_next[naive]
        assert m[f"{name}_sa_at_naive_stop"] == tr.sa_delivered[naive]
        xs = np.r_[tr.frac, 1.0]
        assert m[f"{name}_sa_at_eval"] == pytest.approx(np.interp(eng.EVAL_FRACTION, xs, np.r_[tr.sa, 1.0]))
        assert m[f"{name}_test_at_eval"] == pytest.approx(
            np.interp(eng.EVAL_FRACTION, xs, np.r_[tr.test_acc, tr.test_acc[-1]]))
    assert m["sa_gap_at_eval"] == pytest.approx(m["active_sa_at_eval"] - m["random_sa_at_eval"])
    assert m["test_gap_at_eval"] == pytest.approx(abs(m["active_test_at_eval"] - m["random_test_at_eval"]))
    assert m["stop_ratio"] == pytest.approx(m["active_f_stop"] / m["random_f_stop"])
    assert m["active_overshoot"] == m["active_stop_round"] - m["active_cross_round"]
    measured = [c.measured for c in eng.claims(r)]
    assert measured == pytest.approx([m["sa_gap_at_eval"], m["active_sa_at_stop"], m["stop_ratio"],
                                      m["active_overshoot"], m["sa_gap_at_eval"] - 2 * m["test_gap_at_eval"]])


def test_per_round_columns_rebuilt_from_masks(default_result):
    """CSV columns per round: the batch B_t is O_{t+1} \\ O_t; batch accuracy and corrupted share are read on it,
    hidden accuracy on H_t, delivered SA on O_{t+1} plus f_t's predictions elsewhere; the naive estimate is a
    mean confidence, so it lies between the labelled share (+1/K of the rest) and 1, and is 1 once all is bought."""
    r = default_result
    y, hard, n = r.labels, r.hard, len(r.labels)
    for tr in r.agents.values():
        rounds = len(tr.sa)
        for t in range(rounds):
            obs, pred = tr.observed[t], tr.preds[t].astype(int)
            nxt = tr.observed[t + 1] if t + 1 < rounds else np.ones(n, bool)
            batch = nxt & ~obs
            assert np.all(obs <= nxt) and batch.sum() == round((tr.frac_next[t] - tr.frac[t]) * n)
            assert tr.frac_next[t] == pytest.approx(nxt.mean())
            assert tr.batch_acc[t] == pytest.approx(np.mean(pred[batch] == y[batch]))
            assert tr.batch_hard[t] == pytest.approx(hard[batch].mean())
            assert tr.hidden_acc[t] == pytest.approx(np.mean(pred[~obs] == y[~obs]))
            assert tr.sa_delivered[t] == pytest.approx((nxt.sum() + np.sum(pred[~nxt] == y[~nxt])) / n)
            f = tr.frac_next[t]
            assert f + (1 - f) / 10 - 1e-9 <= tr.sa_naive[t] <= 1 + 1e-12
        assert tr.sa_naive[-1] == pytest.approx(1.0) and tr.sa_delivered[-1] == pytest.approx(1.0)


def _sklearn_digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data / 16.0, d.target


def test_difficulty_patterns_against_the_raw_digits():
    """label689 relabels exactly the 6/8/9 images with a uniform pick from {6, 8, 9}; hide_bottom blanks the lower
    four rows (and only those) of about 30% of the images. Each pool image is matched to scikit-learn's copy."""
    raw_x, raw_y = _sklearn_digits()
    key = {row.tobytes(): i for i, row in enumerate(np.round(raw_x, 4))}
    X, y, hard, _, _ = eng.make_data("label689", 0)
    src = np.array([key[row.tobytes()] for row in np.round(X.astype(float), 4)])
    np.testing.assert_array_equal(hard, np.isin(raw_y[src], (6, 8, 9)))
    np.testing.assert_array_equal(y[~hard], raw_y[src][~hard])
    counts = np.array([(y[hard] == c).sum() for c in (6, 8, 9)])
    assert set(np.unique(y[hard])) == {6, 8, 9} and counts.min() > 0.25 * hard.sum()
    X, y, hard, _, _ = eng.make_data("hide_bottom", 0)
    img = X.reshape(-1, 8, 8)
    assert 0.25 < hard.mean() < 0.35
    assert np.all(img[hard, 4:, :] == 0)
    top = {row[:32].tobytes(): i for i, row in enumerate(np.round(raw_x, 4))}
    for i in np.flatnonzero(hard)[:50]:
        j = top.get(np.round(X[i].astype(float), 4)[:32].tobytes())
        assert j is not None and raw_y[j] == y[i]         # the upper half is the original's


def test_round_two_grid_is_the_top_of_the_active_batch(default_result):
    """The 16 images of the grid: unlabelled at round 2, inside round 2's active batch (with ρ = 0 that batch is the
    b least confident examples, so it holds the 16 least confident), listed with round 2's prediction and label,
    least confident first."""
    r = default_result
    X, _, _, _, _ = eng.make_data(r.config.corruption, r.config.seed)
    act = r.agents["active"]
    batch = act.observed[3] & ~act.observed[2]
    assert len(r.grid_images) == 16
    for img, lab, pr in zip(r.grid_images, r.grid_labels, r.grid_preds):
        cand = np.flatnonzero(np.all(np.isclose(X, img.reshape(-1)), axis=1) & batch)
        assert len(cand) >= 1
        assert any(r.labels[i] == lab and act.preds[2][i] == pr for i in cand)
    conf = r.grid_conf
    assert np.all(np.diff(conf) >= -1e-12) and np.all((conf >= 0.1 - 1e-9) & (conf <= 1))
    # confidences are maxima of a softmax over 10 classes, and the least confident of the round are well below 1
    assert conf.max() < 0.9


def test_agent_seed_changes_the_initial_draw():
    import torch

    X, y, hard, Xt, yt = eng.make_data("none", 0)
    draws = []
    for seed in (0, 1):
        cfg = eng.Config(corruption="none", seed=seed, n_init=300, batch=600, steps=20)
        tr, _ = eng.run_agent("random", cfg, X, y, hard, Xt, yt, torch.device("cpu"))
        draws.append(tr.observed)
    assert not np.array_equal(draws[0][0], draws[1][0])
    assert not np.array_equal(draws[0][1], draws[1][1])


# ----------------------------------------------------------------------------- what the page draws and quotes


def test_page_stars_batches_and_image_titles_follow_the_campaigns(default_result):
    """Default page: each agent's star marks the first round whose certified bound reaches the target, at the
    pool share labelled after that batch and the accuracy delivered there; the corrupted-share lines carry each
    agent's own batches; the image titles read oracle label / prediction, as the text above them says."""

    r, cfg = default_result, eng.Config()
    at = open_page("inference_set_design", seed=(("engine.inference_set_design", eng.Config(), default_result),))
    figs = figures(at)
    sa = {d["name"]: d for d in figs["sa"]["data"]}
    hard = {d["name"]: values(d["y"]) for d in figs["hard"]["data"]}
    for name, tr in r.agents.items():
        reached = np.nonzero(np.asarray(tr.sa_lb) >= cfg.target)[0]
        s = int(reached[0]) if len(reached) else len(tr.sa_lb) - 1
        star = sa[f"{name}: stop"] if len(reached) else sa[f"{name}: no stop (all labels)"]
        assert list(values(star["x"])) == pytest.approx([tr.frac_next[s]])
        assert list(values(star["y"])) == pytest.approx([tr.sa_delivered[s]])
        np.testing.assert_allclose(hard[name], tr.batch_hard, err_msg=name)
    titles = [a["text"] for a in figs["grid"]["layout"]["annotations"]]
    want = [f"{int(lab)}/{int(p)} " for lab, p in zip(r.grid_labels, r.grid_preds)]
    assert len(titles) == len(want) and all(t.startswith(w) for t, w in zip(titles, want))


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_agents_never_read_the_corruption_mask():
    """Running the same active campaign with the true corruption mask and with its complement gives the same
    batches, predictions and certified bounds; only the diagnostic column batch_hard may differ. (The random
    agent ignores u by construction, so only the active one is run.)"""
    cfg = eng.Config(n_init=300, batch=400, steps=20)
    X, y, hard, Xt, yt = eng.make_data(cfg.corruption, cfg.seed)
    assert 0.2 < hard.mean() < 0.4
    ref, _ = eng.run_agent("active", cfg, X, y, hard, Xt, yt, torch.device("cpu"))
    tr, _ = eng.run_agent("active", cfg, X, y, ~hard, Xt, yt, torch.device("cpu"))
    assert len(ref.sa) == 3
    np.testing.assert_array_equal(tr.observed, ref.observed)
    np.testing.assert_array_equal(tr.preds, ref.preds)
    np.testing.assert_array_equal(tr.sa_lb, ref.sa_lb)
    assert not np.array_equal(tr.batch_hard, ref.batch_hard)     # the flipped mask did reach the run
