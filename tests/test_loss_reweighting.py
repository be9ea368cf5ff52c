import re

import numpy as np
import pytest
from scipy.optimize import minimize

from engine import loss_reweighting as eng
from tests.pagetext import chart_traces, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_pass_at_default(default_result):
    for c in eng.claims(default_result):
        assert c.passed, c.describe()


@pytest.mark.parametrize("r", [0.3, 1.0, 3.0])
def test_weights_match_kl_regularised_solver(r):
    rng = np.random.default_rng(1)
    f = rng.normal(size=7)

    def neg(w):
        w = np.clip(w, 1e-12, None)
        return -(w @ f - r * np.sum(w * np.log(w * len(w))))

    cons = ({"type": "eq", "fun": lambda w: np.sum(w) - 1},)
    opt = minimize(neg, np.full(7, 1 / 7), method="SLSQP", bounds=[(0, 1)] * 7, constraints=cons,
                   options={"ftol": 1e-12, "maxiter": 500})
    np.testing.assert_allclose(eng.softmax_weights(f, r), opt.x, atol=1e-4)


def test_temperature_limits():
    f = np.array([0.1, 0.9, 0.3, -0.2])
    np.testing.assert_allclose(eng.softmax_weights(f, 1e6), np.full(4, 0.25), atol=1e-5)
    np.testing.assert_allclose(eng.softmax_weights(f, 1e-4), np.eye(4)[1], atol=1e-9)
    assert np.all(np.isfinite(eng.softmax_weights(f * 1e4, 1e-3)))


def test_normalisation_invariances():
    rng = np.random.default_rng(2)
    ell = rng.exponential(size=16)
    for s in eng.STRATEGIES:
        w = eng.batch_weights(ell, s)
        np.testing.assert_allclose(eng.batch_weights(3.7 * ell, s), w, atol=1e-12)
        np.testing.assert_allclose(eng.batch_weights(ell + 5.0, s), w, atol=1e-12)
        np.testing.assert_allclose(eng.batch_weights(np.full(16, 2.0), s), np.full(16, 1 / 16), atol=1e-12)
        assert w.sum() == pytest.approx(1.0)
    h = eng.normalize_losses(ell)
    assert h.min() == pytest.approx(-1) and h.max() == pytest.approx(1)


def test_strategy_tables():
    h = np.array([-1, -0.5, 0, 0.5, 1.0])
    np.testing.assert_allclose(eng.strategy_score(h, "uniform"), [0, 0, 0, 0, 0])
    np.testing.assert_allclose(eng.strategy_score(h, "linupper"), [0, 0.5, 1, 1, 1])
    np.testing.assert_allclose(eng.strategy_score(h, "quadratic"), [0, 0.75, 1, 0.75, 0])
    np.testing.assert_allclose(eng.strategy_score(h, "extremes"), [1, 0.5, 0, 0.5, 1])
    np.testing.assert_allclose(eng.strategy_score(h, "lowfirst"), [1, 0.5, 0, -0.5, -1])


def test_gradient_identity_one_step():
    """One SGD step of the batched trainer equals X_bᵀ(w ⊙ residual) computed by hand."""
    cfg = eng.Config(optimizer="sgd", lr=0.1, steps=100, warmup=0, seeds=1, sweep="off", batch=16)
    rng = np.random.default_rng(0)
    X, y, groups, theta_star = eng.make_data(rng, 0.7, 0.3, 0.0)
    one = eng.Config(**{**cfg.__dict__, "steps": 100})
    # run one step by hand with the same batch the trainer draws (generator seed*1000 + 0)
    idx = np.random.default_rng(cfg.seed * 1000).integers(0, eng.N_TRAIN, cfg.batch)
    res = X[idx] @ np.zeros(eng.D) - y[idx]
    for s in eng.STRATEGIES:
        w = eng.batch_weights(0.5 * res**2, s)
        expect = -0.1 * X[idx].T @ (w * res)
        log_err, _, _ = eng.train_batched(X, y, groups, theta_star, [s], [0.1],
                                          eng.Config(**{**one.__dict__, "steps": 1}))
        assert log_err[0, 0, 1] == pytest.approx(np.log10(np.sum((expect - theta_star) ** 2)), abs=1e-9)
    # uniform weights reproduce the ordinary mini-batch mean gradient
    w = eng.batch_weights(0.5 * res**2, "uniform")
    np.testing.assert_allclose(X[idx].T @ (w * res), X[idx].T @ res / len(idx))


def test_reported_test_error_is_the_mse_on_clean_test_inputs():
    """The trainer reports ‖θ − θ*‖² as its test error: that is the mean squared error on clean isotropic test
    inputs. Checked on the trainer's own numbers (at step 0, θ = 0; after one SGD step, θ is the hand-computed step
    of test_gradient_identity_one_step) against 200 000 sampled test inputs."""
    cfg = eng.Config(optimizer="sgd", lr=0.1, steps=1, warmup=0, seeds=1, sweep="off", batch=16)
    X, y, groups, theta_star = eng.make_data(np.random.default_rng(0), 0.7, 0.3, 0.0)
    idx = np.random.default_rng(cfg.seed * 1000).integers(0, eng.N_TRAIN, cfg.batch)
    res = X[idx] @ np.zeros(eng.D) - y[idx]
    theta1 = -0.1 * X[idx].T @ (eng.batch_weights(0.5 * res**2, "uniform") * res)
    log_err, _, _ = eng.train_batched(X, y, groups, theta_star, ["uniform"], [0.1], cfg)
    Xt = np.random.default_rng(3).normal(size=(200_000, eng.D))
    for step, theta in ((0, np.zeros(eng.D)), (1, theta1)):
        mc = np.mean((Xt @ (theta - theta_star)) ** 2)
        assert 10 ** log_err[0, 0, step] == pytest.approx(mc, rel=0.02)


def test_large_temperature_collapses_to_uniform():
    res = eng.run(eng.Config(temperature=10.0, steps=150, seeds=3, sweep="off"))
    c = eng.claims(res)
    assert not c[0].passed  # the gap vanishes when weights are nearly uniform
    assert abs(res.metrics["gap_linupper"]) < 0.15


def test_bad_fractions_raise_input_error():
    from engine.core import InputError

    with pytest.raises(InputError):
        eng.run(eng.Config(frac_redundant=0.95, frac_outlier=0.1))


# ----------------------------------------------------------------------------- bound shape (linear) and MLP setting
def test_bound_shape_claim_and_negative_control(default_result):
    m = default_result.metrics
    bc = default_result.bound_curves
    # independent: the predicted per-step rate is (1 − lr·μ)² with μ the smallest eigenvalue of the
    # population Hessian E[xxᵀ], computed here with numpy from the data-generating recipe
    for f, pred in zip(eng.BOUND_FRACS, bc["predicted"]):
        rng = np.random.default_rng(0)
        Q, _ = np.linalg.qr(rng.normal(size=(eng.D, eng.SUB_DIM)))
        H = f * 9.0 * Q @ Q.T + (1 - f) * eng.BOUND_SCALE**2 * np.eye(eng.D)
        mu = np.linalg.eigvalsh(H)[0]
        assert pred == pytest.approx(2 * np.log10(1 - eng.BOUND_LR * mu), rel=1e-9)
    assert m["bound_ratio_error"] <= eng.BOUND_TOL
    # negative control: a bound governed by the largest curvature (∝ f, the redundant rows) predicts the
    # ratio f1/f2 = 0.625 instead of 2.5 and fails the same tolerance
    f1, f2 = eng.BOUND_FRACS
    wrong = np.array([f1, f2])
    assert eng.slope_ratio_error(bc["slopes"], wrong) > eng.BOUND_TOL
    # and a rate that ignores the redundant fraction altogether (ratio 1) fails too
    assert eng.slope_ratio_error(bc["slopes"], np.array([1.0, 1.0])) > eng.BOUND_TOL


@pytest.fixture(scope="module")
def mlp_result():
    return eng.run(eng.Config(setting="mlp"))


def test_mlp_claim_passes_at_default(mlp_result):
    cl = eng.claims(mlp_result)
    assert len(cl) == 1 and cl[0].passed, cl[0].describe()
    m = mlp_result.metrics
    assert m["final_lowfirst"] > m["final_uniform"]            # prioritising easy rows is slower
    assert m["informative_share_linupper"] > m["informative_share_uniform"]


def test_mlp_negative_controls(mlp_result):
    import dataclasses

    # uniform measured against itself, the way the engine measures LinUpper (first step its median curve reaches
    # uniform's final median): a speed-up near 1, and the claim given that speed-up fails
    r = mlp_result
    T = r.steps[-1]
    self_speedup = T / r.metrics["reach_uniform"]
    assert 1.0 <= self_speedup < eng.MLP_SPEEDUP_THRESHOLD
    fake = dataclasses.replace(r, metrics={**r.metrics, "speedup_linupper": self_speedup})
    assert not eng.claims(fake)[0].passed
    # large temperature (weights ≈ uniform) removes the speed-up
    res = eng.run(eng.Config(setting="mlp", temperature=10.0, seeds=4))
    assert not eng.claims(res)[0].passed


def test_mlp_backprop_matches_finite_differences():
    """The engine's hand-written MLP gradient equals central finite differences of the weighted batch loss."""
    rng = np.random.default_rng(0)
    X, y, groups, Xt, yt = eng.make_mlp_data(rng, 0.7)
    S, K, B = 2, 3, 8
    P = [rng.normal(size=(S, K, eng.MLP_D, eng.MLP_H)) / 4, rng.normal(size=(S, K, eng.MLP_H)) / 4,
         rng.normal(size=(S, K, eng.MLP_H)) / 4, rng.normal(size=(S, K))]
    idx = rng.integers(0, len(y), (S, B))
    Xb, yb = X[idx], y[idx]
    w = rng.dirichlet(np.ones(B), size=(S, K))

    def fwd(P_):
        h = np.tanh(np.matmul(Xb[:, None], P_[0]) + P_[1][:, :, None, :])
        return h, (h * P_[2][:, :, None, :]).sum(-1) + P_[3][..., None] - yb[:, None]

    def total(P_):
        return float(np.sum(w * 0.5 * fwd(P_)[1] ** 2))

    h, res = fwd(P)
    G = eng.mlp_weighted_grads(P, Xb, h, res, w)
    eps = 1e-6
    for i, shape in enumerate([p.shape for p in P]):
        for pos in [tuple(0 for _ in shape), tuple(s - 1 for s in shape)]:
            Pp = [q.copy() for q in P]
            Pm = [q.copy() for q in P]
            Pp[i][pos] += eps
            Pm[i][pos] -= eps
            assert (total(Pp) - total(Pm)) / (2 * eps) == pytest.approx(G[i][pos], rel=1e-5, abs=1e-9)
    cfg = eng.Config(setting="mlp", steps=100, seeds=1, warmup=0, batch=16)
    ev, _, _ = eng.train_mlp_batched(X, y, groups, Xt, yt, ["uniform", "linupper"], cfg)
    assert np.isfinite(ev).all() and ev[-1].max() < ev[0].min()   # training lowers the test loss


def test_row_loss_snapshots(default_result):
    """The page's loss histograms: at step 0 (θ = 0) every row's loss is ½y², recomputed here from the same data;
    six snapshots from step 0 to the last; the median row loss falls during training for every strategy."""
    r = default_result
    cfg = eng.Config()
    assert list(r.snap_steps) == list(np.linspace(0, cfg.steps, eng.LOSS_SNAPSHOTS).round().astype(int))
    X, y, groups, _ = eng.make_data(np.random.default_rng(cfg.seed), cfg.frac_redundant, cfg.inf_scale,
                                    cfg.frac_outlier)
    assert np.array_equal(r.row_groups, groups)
    for k in range(len(eng.STRATEGIES)):
        np.testing.assert_allclose(r.snap_log_loss[0, k], np.log10(np.maximum(0.5 * y**2, 1e-30)), rtol=1e-5)
        assert np.median(r.snap_log_loss[-1, k]) < np.median(r.snap_log_loss[0, k]) - 1


def test_late_share(default_result):
    """The page's per-group bars: each strategy's late weight shares sum to 1 and are the mean of its last 10 %."""
    r = default_result
    for s, v in r.late_share.items():
        assert v.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(v, r.weight_share[s][-(len(r.weight_share[s]) // 10):].mean(0))


# ----------------------------------------------------------------------------- weight shares over training
@pytest.fixture(scope="module")
def outlier_result():
    """A linear run where all three groups have rows, so the outlier share is exercised too."""
    cfg = eng.Config(frac_redundant=0.6, frac_outlier=0.1, steps=200, seeds=6, sweep="off")
    return cfg, eng.run(cfg)


def test_weight_shares_sum_to_one_at_every_step(default_result, mlp_result, outlier_result):
    """The stacked-area chart: at every logged step the three group shares are ≥ 0 and add up to the whole
    batch weight, for every strategy and both settings; the page's moving average keeps that property."""
    for r, steps in ((default_result, eng.Config().steps), (mlp_result, eng.Config().steps),
                     (outlier_result[1], outlier_result[0].steps)):
        assert list(r.share_steps) == list(range(1, steps + 1))
        for s in eng.STRATEGIES:
            w = r.weight_share[s]
            assert w.shape == (steps, 3) and np.all(w >= 0)
            np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-12)
            for win in (1, 5, eng.share_window(steps, 10)):
                np.testing.assert_allclose(eng.moving_average(w, win).sum(1), 1.0, atol=1e-12)
    # outlier rows get weight when they exist; the MLP setting has no third group
    assert all(outlier_result[1].weight_share[s][:, 2].mean() > 0.01 for s in eng.STRATEGIES)
    assert all(np.all(mlp_result.weight_share[s][:, 2] == 0) for s in eng.STRATEGIES)


def _uniform_share_checks(cfg: eng.Config, share: np.ndarray):
    """Uniform weights put 1/B on every batch row, so a group's share of the weight is the fraction of the batch's
    rows it holds. Rows are drawn uniformly with replacement, so that count is Binomial(B, p_g) with p_g the group's
    fraction of the training rows, set by the config (the data has round(p·4096) rows per group, within 1/8192).
    Seeds and steps draw independently, so the mean over S seeds and T steps has sd √(p(1−p)/(B·S·T)); we allow
    4 sd (a false alarm about once in 16 000 per group) plus the rounding. Per step, the seed mean has variance
    p(1−p)/(B·S): the mean of the squared standardised deviations over the T steps must be 1 within 5·√(2/T)
    (its sd for Gaussian deviations), which a smoothed or seed-pooled-over-time series would fail."""
    p = np.array([cfg.frac_redundant, 1 - cfg.frac_redundant - cfg.frac_outlier, cfg.frac_outlier])
    n_draws = cfg.batch * cfg.seeds
    T = len(share)
    tol = 4 * np.sqrt(p * (1 - p) / (n_draws * T)) + 1 / (2 * eng.N_TRAIN)
    assert np.all(np.abs(share.mean(0) - p) <= tol), (share.mean(0), p, tol)
    for g in np.nonzero(p > 0)[0]:
        z2 = (share[:, g] - p[g]) ** 2 / (p[g] * (1 - p[g]) / n_draws)
        assert abs(z2.mean() - 1) < 5 * np.sqrt(2 / T), (g, z2.mean())


def test_uniform_shares_equal_group_proportions(default_result, outlier_result):
    _uniform_share_checks(eng.Config(), default_result.weight_share["uniform"])
    _uniform_share_checks(outlier_result[0], outlier_result[1].weight_share["uniform"])
    # the per-step check has teeth: the same series smoothed over 7 steps has too little step-to-step spread
    with pytest.raises(AssertionError):
        _uniform_share_checks(eng.Config(), eng.moving_average(default_result.weight_share["uniform"], 7))


def test_uniform_shares_replay_the_drawn_batches(default_result):
    """Exact version: replay the batch indices the trainer draws (generator seed·1000 + j for seed j, one draw of B
    indices per step) and count each group's rows with numpy; the uniform strategy's share is that count / B, seed
    mean, at every step."""
    cfg = eng.Config()
    _, _, groups, _ = eng.make_data(np.random.default_rng(cfg.seed), cfg.frac_redundant, cfg.inf_scale,
                                    cfg.frac_outlier)
    gens = [np.random.default_rng(cfg.seed * 1000 + j) for j in range(cfg.seeds)]
    counts = np.zeros((cfg.steps, 3))
    for t in range(cfg.steps):
        for g in gens:
            counts[t] += np.bincount(groups[g.integers(0, eng.N_TRAIN, cfg.batch)], minlength=3)
    np.testing.assert_allclose(default_result.weight_share["uniform"], counts / (cfg.batch * cfg.seeds), atol=1e-12)


def test_late_bars_are_the_mean_of_the_share_series(default_result, mlp_result, outlier_result):
    """The existing last-10 % bars agree with the new per-step series averaged over the same steps (picked here by
    step number: steps after 90 % of the run)."""
    for r in (default_result, mlp_result, outlier_result[1]):
        T = r.share_steps[-1]
        last = r.share_steps > T - T // 10
        assert last.sum() == T // 10
        for s in eng.STRATEGIES:
            np.testing.assert_allclose(r.late_share[s], r.weight_share[s][last].mean(0), atol=1e-12)
            np.testing.assert_allclose(r.late_share[s], eng.moving_average(r.weight_share[s], 1)[last].mean(0),
                                       atol=1e-12)


def test_moving_average_against_a_loop():
    rng = np.random.default_rng(4)
    a = rng.dirichlet(np.ones(3), size=37)
    for win in (1, 3, 7, 37, 81):
        half = win // 2
        expect = np.array([a[max(0, i - half): i + half + 1].mean(0) for i in range(len(a))])
        np.testing.assert_allclose(eng.moving_average(a, win), expect, atol=1e-12)
    # a constant series stays constant up to both ends (zero padding would pull the ends down)
    np.testing.assert_allclose(eng.moving_average(np.full(20, 0.7), 9), 0.7, atol=1e-12)
    assert eng.share_window(300, 0) == 1 and eng.share_window(300, 2) == 7 and eng.share_window(300, 5) == 15
    assert all(eng.share_window(n, p) % 2 == 1 for n in (100, 300, 2000) for p in (0, 2, 5, 10))


def test_temperature_numbers_quoted_under_the_weight_share_chart():
    # the page's caption quotes LinUpper's late share on redundant rows at r = 1, 0.2 and 0.1 (linear setting)
    for r, share in ((1.0, 0.70), (0.2, 0.41), (0.1, 0.19)):
        got = eng.run(eng.Config(temperature=r)).late_share["linupper"][0]
        assert got == pytest.approx(share, abs=0.006), (r, got)


def test_caveat_sgd_with_tuned_rates_loses_the_advantage(default_result):
    """The page's caveat: with plain SGD and the learning rate tuned per strategy the gain largely disappears
    (measured: best LinUpper 0.13 log10 worse than best uniform), while with Adam + cosine it survives tuning."""
    sgd = eng.run(eng.Config(optimizer="sgd")).metrics
    assert sgd["gap_tuned"] > 0   # "slightly behind uniform"
    assert default_result.metrics["gap_tuned"] <= -0.15


def test_caveat_mlp_long_runs_reach_the_same_floor():
    """The page's caveat: in the MLP setting the gain is a speed-up; at 1 000 steps LinUpper and uniform end level
    (measured Δ log10 0.005) and the speed-up badge no longer passes."""
    res = eng.run(eng.Config(setting="mlp", steps=1000))
    assert abs(res.metrics["gap_linupper"]) < 0.03
    speed = [c for c in eng.claims(res) if c.label.startswith("speed-up")]
    assert speed and not any(c.passed for c in speed)


# ----------------------------------------------------------------------------- negative controls (spec claims 1-3)
def test_flipped_normalisation_sign_fails_the_linupper_claim(default_result, monkeypatch):
    """Spec claim 1, negative control: min-max normalisation with its sign flipped maps the batch's highest loss
    to −δ, so LinUpper's ramp rises towards the *low*-loss rows (it becomes low-loss prioritisation) and the
    low-first control becomes high-loss-first. Same data and batches as the intact default run. Measured (seed 0,
    mean log10 test error): uniform −2.46 in both; LinUpper −2.91 intact, −2.10 flipped (gap −0.44 → +0.37);
    low-first −1.41 → −2.60; tuned gap −0.42 → +0.42. Quadratic and Extremes are even in ℓ̂ and do not change."""
    real = eng.normalize_losses
    monkeypatch.setattr(eng, "normalize_losses", lambda losses, delta=1.0: -real(losses, delta))
    broken = eng.run(eng.Config())
    m, m0 = broken.metrics, default_result.metrics
    assert m["final_uniform"] == m0["final_uniform"]
    assert m["final_quadratic"] == pytest.approx(m0["final_quadratic"], abs=1e-9)   # symmetric shape: unaffected
    intact_badges = [c.passed for c in eng.claims(default_result)]
    broken_badges = [c.passed for c in eng.claims(broken)]
    assert intact_badges[:4] == [True] * 4
    # LinUpper vs uniform, low-first hurts, gain survives lr tuning: all three fail; the Quadratic badge stays
    assert broken_badges[:4] == [False, True, False, False]
    assert m["gap_linupper"] > 0.15 and m["gap_lowfirst"] < 0
    assert m["gap_tuned"] > 0


def test_weights_not_used_in_the_gradient_make_every_strategy_uniform(default_result, monkeypatch):
    """Spec claim 2, negative control: a trainer whose gradient ignores the weights is the plain batch mean, i.e.
    the gradient with w = 1/B. Putting 1/B in place of the engine's softmax weights makes every strategy's
    curve exactly uniform's, so all four weighting badges fail (intact gaps: LinUpper −0.44, Quadratic −0.37,
    low-first +1.05, tuned −0.42; broken: all 0). The bound-shape badge, which uses uniform weights, still
    passes, as it should."""
    monkeypatch.setattr(eng, "softmax_weights", lambda f, r: np.full_like(f, 1.0 / f.shape[-1]))
    broken = eng.run(eng.Config())
    for s in eng.STRATEGIES:
        np.testing.assert_array_equal(broken.log_err_mean[s], broken.log_err_mean["uniform"])
    np.testing.assert_array_equal(broken.log_err_mean["uniform"], default_result.log_err_mean["uniform"])
    for key in ("gap_linupper", "gap_quadratic", "gap_lowfirst", "gap_tuned"):
        assert broken.metrics[key] == 0.0
        assert abs(default_result.metrics[key]) > 0.3
    assert [c.passed for c in eng.claims(broken)] == [False, False, False, False, True]


def test_caveat_outliers_hurt_linupper_and_leave_extremes_near_uniform():
    """The page's caveat on outliers: LinUpper chases the high-loss noise rows and loses clearly to uniform, while
    Extremes stays near uniform, slightly worse at 1 % outliers and slightly better from 5 % (measured Δ log10
    LinUpper +0.41 / +0.53 / +0.39, Extremes +0.08 / −0.05 / −0.14 at 1 / 5 / 10 %)."""
    ext = {}
    for f in (0.01, 0.05, 0.1):
        m = eng.run(eng.Config(frac_outlier=f)).metrics
        assert m["gap_linupper"] > 0.2, f
        ext[f] = m["final_extremes"] - m["final_uniform"]
        assert abs(ext[f]) < 0.2, f
    assert ext[0.01] > 0 > ext[0.05] and ext[0.1] < 0


# ----------------------------------------------------------------------------- added by mutation testing
@pytest.mark.parametrize("setting", ["linear", "mlp"])
def test_sample_batch_weights_use_the_chosen_temperature(setting):
    """The page's 'weights on one batch' panel is titled with the config's r: at r = 0.2 its weights must be the
    tempered softmax exp(f(ℓ̂)/r) / Σ exp(f(ℓ̂)/r) of the shown losses, with ℓ̂ min-max normalised to [−1, 1] and
    the spec's shape functions, written out here by hand."""
    r = 0.2
    res = eng.run(eng.Config(setting=setting, temperature=r, steps=100, seeds=1, sweep="off", warmup=10))
    ell = res.sample_losses
    h = 2 * (ell - ell.min()) / (ell.max() - ell.min()) - 1
    shapes = {"uniform": 0 * h, "linupper": np.where(h < 0, h + 1, 1.0), "quadratic": 1 - h**2,
              "extremes": np.abs(h), "lowfirst": -h}
    for s, f in shapes.items():
        e = np.exp(f / r)
        np.testing.assert_allclose(res.sample_weights[s], e / e.sum(), rtol=1e-9, atol=1e-15)
    # at this r the weights are far from uniform, so the check distinguishes temperatures
    assert res.sample_weights["linupper"].max() > 3 / len(ell)


# ----------------------------------------------------------------------------- mutation round 2: what the page shows
def _hand_weights(losses, name, r):
    """The spec's recipe by hand: min-max to [−1, 1], the shape function, exp(f/r) normalised."""
    h = 2 * (losses - losses.min()) / max(losses.max() - losses.min(), 1e-6) - 1
    f = {"uniform": 0 * h, "linupper": np.minimum(h + 1, 1), "quadratic": 1 - h**2, "extremes": np.abs(h),
         "lowfirst": -h}[name]
    e = np.exp((f - f.max()) / r)
    return e / e.sum()


def _hand_train(X, y, theta_star, name, cfg, lr):
    """One strategy, every seed, plain loops: seed j draws its batches from default_rng(seed·1000 + j); weights as
    above after the uniform warm-up; Adam (0.9, 0.999, 1e-8) with a cosine-decayed rate. Returns the log10 test error
    (S, T+1) and, for seed 0, the last batch's losses and row indices."""
    out = np.empty((cfg.seeds, cfg.steps + 1))
    last = None
    for j in range(cfg.seeds):
        gen = np.random.default_rng(cfg.seed * 1000 + j)
        th, m, v = np.zeros(eng.D), np.zeros(eng.D), np.zeros(eng.D)
        out[j, 0] = np.log10(np.sum(theta_star**2))
        for t in range(cfg.steps):
            idx = gen.integers(0, eng.N_TRAIN, cfg.batch)
            res = X[idx] @ th - y[idx]
            ell = 0.5 * res**2
            w = np.full(cfg.batch, 1 / cfg.batch) if t < cfg.warmup else _hand_weights(ell, name, cfg.temperature)
            g = X[idx].T @ (w * res)
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g**2
            step = lr * 0.5 * (1 + np.cos(np.pi * t / cfg.steps))
            th = th - step * (m / (1 - 0.9 ** (t + 1))) / (np.sqrt(v / (1 - 0.999 ** (t + 1))) + 1e-8)
            out[j, t + 1] = np.log10(np.sum((th - theta_star) ** 2))
            if j == 0 and t == cfg.steps - 1:
                last = (ell, idx)
    return out, last


def test_curves_batch_panel_and_badge_numbers_match_a_hand_replay():
    """A small linear run against plain loops: the mean ± sd curves of the test-error chart, the claim numbers
    (final means, '% of seeds' LinUpper wins), the 'weights on one batch' panel (uniform run, seed 0, last batch:
    its losses, the groups of its rows and every strategy's weights) and the rows' group shares."""
    cfg = eng.Config(steps=100, seeds=3, batch=32, warmup=20, sweep="off", temperature=0.5, frac_outlier=0.05)
    res = eng.run(cfg)
    X, y, groups, theta_star = eng.make_data(np.random.default_rng(cfg.seed), cfg.frac_redundant, cfg.inf_scale,
                                             cfg.frac_outlier)
    finals = {}
    for s in ("uniform", "linupper", "lowfirst"):
        le, last = _hand_train(X, y, theta_star, s, cfg, cfg.lr)
        np.testing.assert_allclose(res.log_err_mean[s], le.mean(0), rtol=1e-7, atol=1e-9, err_msg=s)
        np.testing.assert_allclose(res.log_err_sd[s], le.std(0), rtol=1e-6, atol=1e-9, err_msg=s)
        np.testing.assert_allclose(res.final_by_seed[s], le[:, -1], rtol=1e-7, atol=1e-9)
        assert res.metrics[f"final_{s}"] == pytest.approx(le[:, -1].mean(), abs=1e-9)
        finals[s] = le[:, -1]
        if s == "uniform":
            ell, idx = last
            np.testing.assert_allclose(res.sample_losses, ell, rtol=1e-7)
            np.testing.assert_array_equal(res.sample_groups, groups[idx])
            for name in eng.STRATEGIES:
                np.testing.assert_allclose(res.sample_weights[name], _hand_weights(ell, name, cfg.temperature),
                                           rtol=1e-9, atol=1e-15)
    assert res.metrics["seeds_linupper_better"] == pytest.approx(np.mean(finals["linupper"] < finals["uniform"]))
    assert 0 < res.metrics["seeds_linupper_better"] or np.all(finals["linupper"] >= finals["uniform"])
    n_red, n_out = round(cfg.frac_redundant * eng.N_TRAIN), round(cfg.frac_outlier * eng.N_TRAIN)
    np.testing.assert_allclose(res.data_share, np.array([n_red, eng.N_TRAIN - n_red - n_out, n_out]) / eng.N_TRAIN)
    # the batch has rows of more than one group, so a wrong group column would show
    assert len(set(res.sample_groups)) > 1


def test_sweep_chart_and_tuned_badge_are_consistent_with_the_main_run(default_result):
    """The sweep shares seeds and batches with the main runs, so its point at the shared learning rate (0.3 is on the
    sweep grid) is the main run's mean final error; the tuned badge's 'best' numbers are the sweep's minima."""
    r, m = default_result, default_result.metrics
    i = list(r.sweep_lrs).index(eng.Config().lr)
    for s in ("uniform", "linupper"):
        assert r.sweep_final[s][i] == pytest.approx(r.final_by_seed[s].mean(), abs=1e-9)
        assert r.sweep_final[s][i] == pytest.approx(m[f"final_{s}"], abs=1e-9)
    assert m["best_uniform"] == pytest.approx(r.sweep_final["uniform"].min())
    assert m["best_linupper"] == pytest.approx(r.sweep_final["linupper"].min())
    assert m["gap_tuned"] == pytest.approx(m["best_linupper"] - m["best_uniform"])
    # the sweep's points differ from each other, so a reordering of the rates would show
    assert np.ptp(r.sweep_final["uniform"]) > 0.1


def test_bound_chart_fits_and_rates_by_hand(default_result):
    """The bound-shape chart: each measured curve is uniform-weight SGD (lr 0.1, batch 64, 6 seeds) replayed here; the
    drawn line is numpy's least-squares fit over steps 50-300 and the legend's rates and the badge's numbers come
    from it."""
    bc, m = default_result.bound_curves, default_result.metrics
    steps = np.arange(eng.BOUND_STEPS + 1)
    slopes = []
    for i, f in enumerate(eng.BOUND_FRACS):
        X, y, _, th_star = eng.make_data(np.random.default_rng(500 + i), f, eng.BOUND_SCALE, 0.0)
        curves = []
        for j in range(6):
            gen = np.random.default_rng(j)
            th = np.zeros(eng.D)
            c = [np.log10(np.sum(th_star**2))]
            for _ in range(eng.BOUND_STEPS):
                idx = gen.integers(0, eng.N_TRAIN, 64)
                th = th - eng.BOUND_LR * X[idx].T @ (X[idx] @ th - y[idx]) / 64
                c.append(np.log10(np.sum((th - th_star) ** 2)))
            curves.append(c)
        mean = np.mean(curves, 0)
        np.testing.assert_allclose(bc[f"measured_{f:g}"], mean, rtol=1e-8, atol=1e-9)
        slope, icpt = np.polyfit(steps[eng.BOUND_FIT_FROM:], mean[eng.BOUND_FIT_FROM:], 1)
        np.testing.assert_allclose(bc[f"fit_{f:g}"], icpt + slope * steps, rtol=1e-6, atol=1e-8)
        slopes.append(slope)
    slopes = np.array(slopes)
    np.testing.assert_allclose(bc["slopes"], slopes, rtol=1e-6)
    assert m["bound_ratio_measured"] == pytest.approx(slopes[0] / slopes[1], rel=1e-6)
    assert m["bound_abs_error"] == pytest.approx(np.max(np.abs(slopes / bc["predicted"] - 1)), rel=1e-6)


def test_mlp_curves_and_numbers_line_up_with_the_steps(mlp_result):
    """MLP page: one test-loss point per logged step (0, 10, …, T), the curve's last point is the mean over seeds of
    the per-seed finals and its band their sd; the badge's final numbers are medians over seeds and its '% of seeds'
    compares LinUpper with uniform."""
    r, m = mlp_result, mlp_result.metrics
    T = eng.Config().steps
    np.testing.assert_array_equal(r.steps, np.arange(0, T + 1, eng.MLP_EVERY))
    for s in eng.STRATEGIES:
        assert len(r.log_err_mean[s]) == len(r.steps) == len(r.log_err_sd[s])
        assert r.log_err_mean[s][-1] == pytest.approx(r.final_by_seed[s].mean())
        assert r.log_err_sd[s][-1] == pytest.approx(r.final_by_seed[s].std())
        assert m[f"final_{s}"] == pytest.approx(np.median(r.final_by_seed[s]))
    assert m["seeds_linupper_better"] == pytest.approx(np.mean(r.final_by_seed["linupper"] < r.final_by_seed["uniform"]))
    # seed 0's step-0 point is the untrained network's test loss, the same for every strategy
    for s in eng.STRATEGIES:
        assert r.log_err_mean[s][0] == pytest.approx(r.log_err_mean["uniform"][0])


def test_mlp_seed_share_badge_compares_linupper_with_uniform():
    """The MLP badge's 'LinUpper better in x % of seeds'. At the default every weighting wins in every seed, so this uses
    r = 0.5, where LinUpper wins in 5 of 6 seeds and Quadratic in all 6 (measured): the share must be LinUpper's."""
    r = eng.run(eng.Config(setting="mlp", temperature=0.5))
    f = r.final_by_seed
    share = np.mean(f["linupper"] < f["uniform"])
    assert share != np.mean(f["quadratic"] < f["uniform"])
    assert r.metrics["seeds_linupper_better"] == pytest.approx(share)


# ----------------------------------------------------------------------------- what the page draws


def _traces(at, key):
    """The named traces of the chart drawn under ``key``: name -> (x, y) as float arrays."""
    return {t["name"]: (values(t.get("x")), values(t.get("y"))) for t in chart_traces(at, key) if t.get("name")}


def test_page_draws_the_picked_strategies_snapshot_and_late_share(default_result):
    """Opened with two strategies shown, Quadratic in the stacked-area chart and LinUpper's histogram at the first
    snapshot: the curves are exactly those two strategies' seed means, the end-of-training batch weights pair each
    sample's loss with its own weight (x ascending), the caption's late share is the mean of the last tenth of
    Quadratic's per-step redundant share, and the histogram holds LinUpper's row losses at step 0, split by group."""
    res = default_result
    at = open_page("loss_reweighting", {"strategies": "uniform,quadratic", "share_strategy": "quadratic",
                                        "hist_strategy": "linupper", "hist_at": "0"},
                   seed=(("engine.loss_reweighting", eng.Config(), default_result),))
    curves = _traces(at, "curves")
    assert set(curves) == {"uniform", "Quadratic"}
    for s, name in (("uniform", "uniform"), ("quadratic", "Quadratic")):
        np.testing.assert_allclose(curves[name][1], res.log_err_mean[s], rtol=1e-6)

    weights = _traces(at, "weights")
    assert set(weights) == {"uniform", "Quadratic"}
    B = len(res.sample_losses)
    for s, name in (("uniform", "uniform"), ("quadratic", "Quadratic")):
        x, y = weights[name]
        assert np.all(np.diff(x) >= 0)
        own = {float(loss): float(w) * B for loss, w in zip(res.sample_losses, res.sample_weights[s])}
        np.testing.assert_allclose(y, [own[float(v)] for v in x], rtol=1e-6)

    share = res.weight_share["quadratic"][:, 0]
    late = share[len(share) - len(share) // 10:].mean()
    cap = next(c.value for c in at.caption if "Over the last 10 % of steps" in c.value)
    assert f"Quadratic puts {late:.2f} of the weight on the redundant rows" in cap
    assert f"against their {np.mean(res.row_groups == 0):.2f} share" in cap

    # both weight-share-over-training charts: a centred mean over the window the caption names, cut at the ends
    win = int(re.search(r"moving average over (\d+) steps", cap).group(1))
    assert win > 1

    def smooth(a):
        return np.array([a[max(0, t - win // 2):t + win // 2 + 1].mean() for t in range(len(a))])

    area = _traces(at, "share-area")
    for g, name in enumerate(eng.GROUPS):
        if name in area:
            np.testing.assert_allclose(area[name][1], smooth(res.weight_share["quadratic"][:, g]), atol=1e-9)
    assert set(area) == {g for i, g in enumerate(eng.GROUPS) if (res.row_groups == i).any()}
    red = _traces(at, "share")
    for s, name in (("uniform", "uniform"), ("quadratic", "Quadratic")):
        np.testing.assert_allclose(red[name][1], smooth(res.weight_share[s][:, 0]), atol=1e-9)

    hist = _traces(at, "loss-hist")
    L0 = res.snap_log_loss[0, eng.STRATEGIES.index("linupper")]
    for g, name in enumerate(eng.GROUPS):
        mine = [k for k in hist if k.startswith(name + " ")]
        if not (res.row_groups == g).any():
            assert not mine
            continue
        assert mine == [f"{name} ({int((res.row_groups == g).sum())} rows)"]
        np.testing.assert_allclose(np.sort(hist[mine[0]][0]), np.sort(L0[res.row_groups == g]), rtol=1e-5)
    assert any(f"after {int(res.snap_steps[0])} steps" in h.value for h in at.get("html"))

    # bound panel: each fit's legend quotes its own slope (read off the drawn straight line) and the bound's rate
    bound = _traces(at, "bound")
    fits = {k: v for k, v in bound.items() if k.startswith("straight-line fit")}
    assert len(fits) == len(eng.BOUND_FRACS)
    for f, pr in zip(eng.BOUND_FRACS, res.bound_curves["predicted"]):
        name, (x, y) = next((k, v) for k, v in fits.items() if k.startswith(f"straight-line fit, f = {f:g}:"))
        slope = (y[-1] - y[0]) / (x[-1] - x[0])
        assert name.endswith(f": {100 * slope:.3f} per 100 steps (bound {100 * pr:.3f})"), name


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def _hand_mlp_run(X, y, Xt, yt, name, cfg):
    """MLP setting by plain loops, one (seed, strategy) at a time: init from default_rng(seed·1000 + 777) (all
    W1 of the S seeds, then all W2), seed j's batches from default_rng(seed·1000 + j), uniform weights during
    the warm-up and the spec's min-max → shape → tempered softmax after it, backprop of Σ w_b ½ res_b² written
    out here, Adam (0.9, 0.999, 1e-8) with a cosine-decayed rate. Returns log10 test loss (S, logged steps).
    """
    S, T, B, D, H = cfg.seeds, cfg.steps, cfg.batch, eng.MLP_D, eng.MLP_H
    init = np.random.default_rng(cfg.seed * 1000 + 777)
    W1s = init.normal(size=(S, 1, D, H)) / np.sqrt(D)
    W2s = init.normal(size=(S, 1, H)) / np.sqrt(H)
    out = []
    for j in range(S):
        P = [W1s[j, 0].copy(), np.zeros(H), W2s[j, 0].copy(), 0.0]
        M = [0 * np.asarray(p, float) for p in P]
        V = [0 * np.asarray(p, float) for p in P]
        gen = np.random.default_rng(cfg.seed * 1000 + j)

        def held_out_loss(P=P):        # the same list, updated in place below
            pred = np.tanh(Xt @ P[0] + P[1]) @ P[2] + P[3]
            return np.log10(0.5 * np.mean((pred - yt) ** 2))

        ev = [held_out_loss()]
        for t in range(T):
            idx = gen.integers(0, len(y), B)
            xb = X[idx]
            h = np.tanh(xb @ P[0] + P[1])
            res = h @ P[2] + P[3] - y[idx]
            ell = 0.5 * res**2
            if t < cfg.warmup:
                w = np.full(B, 1 / B)
            else:
                hh = 2 * (ell - ell.min()) / max(ell.max() - ell.min(), 1e-6) - 1
                f = {"uniform": 0 * hh, "linupper": np.minimum(hh + 1, 1), "quadratic": 1 - hh**2,
                     "extremes": np.abs(hh), "lowfirst": -hh}[name]
                e = np.exp((f - f.max()) / cfg.temperature)
                w = e / e.sum()
            d = w * res
            dz = d[:, None] * P[2][None, :] * (1 - h**2)
            G = [xb.T @ dz, dz.sum(0), h.T @ d, d.sum()]
            lr = eng.MLP_LR * 0.5 * (1 + np.cos(np.pi * t / T))
            for i in range(4):
                M[i] = 0.9 * M[i] + 0.1 * G[i]
                V[i] = 0.999 * V[i] + 0.001 * G[i] ** 2
                mhat, vhat = M[i] / (1 - 0.9 ** (t + 1)), V[i] / (1 - 0.999 ** (t + 1))
                P[i] = P[i] - lr * mhat / (np.sqrt(vhat) + 1e-8)
            if (t + 1) % eng.MLP_EVERY == 0 or t == T - 1:
                ev.append(held_out_loss())
        out.append(ev)
    return np.array(out)


def test_mlp_training_matches_a_hand_replay_with_warmup():
    """The MLP curves against plain loops (every strategy, 2 seeds, 60 steps, the first 30 uniform): warm-up,
    the per-run min-max normalisation of that run's own batch losses, the tempered softmax and evaluation on
    the held-out teacher inputs are all checked (the previous tests only cover the MLP gradient and the
    default-config badge)."""
    cfg = eng.Config(setting="mlp", steps=60, warmup=30, seeds=2, batch=16, temperature=0.5)
    res = eng.run(cfg)
    X, y, _, Xt, yt = eng.make_mlp_data(np.random.default_rng(cfg.seed), cfg.frac_redundant)
    curves = {}
    for s in eng.STRATEGIES:
        ev = _hand_mlp_run(X, y, Xt, yt, s, cfg)
        curves[s] = ev
        np.testing.assert_allclose(res.log_err_mean[s], ev.mean(0), rtol=1e-7, atol=1e-9, err_msg=s)
        np.testing.assert_allclose(res.final_by_seed[s], ev[:, -1], rtol=1e-7, atol=1e-9, err_msg=s)
    # the check has teeth: after the warm-up the weighted runs have left uniform's curve
    assert np.abs(curves["linupper"][:, -1] - curves["uniform"][:, -1]).max() > 1e-3


def test_mlp_redundant_rows_are_copies_of_few_inputs():
    """The MLP setting's premise: the redundant share of the rows are copies of only N_EASY distinct inputs
    (the informative rows are all distinct), counted here with numpy."""
    X, y, groups, Xt, yt = eng.make_mlp_data(np.random.default_rng(0), 0.7)
    assert (groups == 0).sum() == round(0.7 * eng.N_TRAIN)
    assert len(np.unique(X[groups == 0], axis=0)) <= eng.N_EASY
    assert len(np.unique(X[groups == 1], axis=0)) == (groups == 1).sum()
