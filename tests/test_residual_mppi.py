"""Residual-MPPI: claims at the default config and independent checks."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.linalg
from scipy.stats import multivariate_normal

from engine import residual_mppi as eng
from tests.pagetext import chart_traces, charts, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_pass_at_default(default_result):
    claims = eng.claims(default_result)
    assert len(claims) == 3
    failed = [c.describe() for c in claims if not c.passed]
    assert not failed, failed


def test_the_specs_sampling_settings_fail_as_the_page_says(default_result):
    """The page's caveat: at the spec's σ = 0.5 and λ = 0.05 (seed 0) the samples stay near the prior's actions and
    the add-on cost barely drops (ratio 0.92 quoted), where the calibrated defaults reach 0.14."""
    spec = eng.run(eng.Config(sigma=0.5, lam=0.05)).metrics["addon_ratio"]
    assert 0.85 <= spec <= 0.99
    assert default_result.metrics["addon_ratio"] == pytest.approx(0.14, abs=0.01)


def test_prior_gain_matches_scipy_dare():
    gamma = 0.95
    prior = eng.Prior(gamma)
    A, B = eng.dynamics_matrices()
    P = scipy.linalg.solve_discrete_are(np.sqrt(gamma) * A, np.sqrt(gamma) * B, eng.Q_BASIC, eng.R_BASIC)
    K = gamma * np.linalg.solve(eng.R_BASIC + gamma * B.T @ P @ B, B.T @ P @ A)
    assert np.allclose(prior.P, P, rtol=1e-8, atol=1e-8)
    assert np.allclose(prior.K, K, rtol=1e-8, atol=1e-8)


def test_log_prob_matches_scipy():
    prior = eng.Prior(0.95)
    rng = np.random.default_rng(0)
    s = rng.normal(size=(20, 4))
    a = rng.normal(size=(20, 2))
    ref = [multivariate_normal(prior.mean(s[i]), prior.cov).logpdf(a[i]) for i in range(20)]
    assert np.allclose(prior.log_prob(a, s), ref)


def test_log_likelihood_is_the_basic_reward_up_to_shaping():
    """r - alpha log pi = V*(s) - gamma E V*(s') + const for the max-entropy prior (V* = -s'Ps)."""
    gamma = 0.9
    prior = eng.Prior(gamma)
    A, B = eng.dynamics_matrices()
    rng = np.random.default_rng(1)
    s = rng.normal(size=(50, 4)) * 2
    a = rng.normal(size=(50, 2)) * 2
    mean_next = s @ A.T + a @ B.T
    shaped = (eng.basic_reward(s, a) - eng.ALPHA * prior.log_prob(a, s)
              + np.einsum("ni,ij,nj->n", s, prior.P, s) - gamma * np.einsum("ni,ij,nj->n", mean_next, prior.P,
                                                                             mean_next))
    assert np.ptp(shaped) < 1e-8 * max(1.0, np.abs(shaped).max())


def _cfg(**kw):
    base = dict(horizon=5, n_samples=20000, sigma=0.3, lam=2.0, gamma=0.9, info_cost=False)
    base.update(kw)
    return SimpleNamespace(**base)


def _sequence_cost(eps_flat, U, s0, prior, model, cfg, w_logp):
    a = U + eps_flat.reshape(U.shape)
    s, S, disc = s0.copy(), 0.0, 1.0
    for t in range(len(a)):
        S += disc * (-eng.addon_reward("stay_low", s, a[t], 0.0) - w_logp * prior.log_prob(a[t], s))
        s = model(s, a[t])
        disc *= cfg.gamma
    return S


def test_mppi_update_equals_gaussian_posterior_mean_for_quadratic_cost():
    cfg = _cfg()
    prior = eng.Prior(cfg.gamma)
    model = eng.true_plant(False)
    s0 = np.array([0.5, 30.0, 3.0, 20.0])  # far from what stay-low wants: a large gradient
    w_logp = 0.1
    Unew, U, eps, S = eng.mppi_update(s0, prior, model, np.array([[w_logp, 0.0]]), cfg, np.random.default_rng(0),
                                      kind="stay_low", clip=False, return_eps=True)
    U = U[0]
    n = U.size
    # gradient and Hessian of the (exactly quadratic) cost by central differences
    f = lambda e: _sequence_cost(e, U, s0, prior, model, cfg, w_logp)  # noqa: E731
    h = 1e-3
    E = np.eye(n) * h
    g = np.array([(f(E[i]) - f(-E[i])) / (2 * h) for i in range(n)])
    M = np.array([[(f(E[i] + E[j]) - f(E[i] - E[j]) - f(-E[i] + E[j]) + f(-E[i] - E[j])) / (4 * h * h)
                   for j in range(n)] for i in range(n)])
    expected = -np.linalg.solve(M + cfg.lam / cfg.sigma**2 * np.eye(n), g)
    got = (Unew[0] - U).reshape(-1)
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 0.05
    # the engine's own cost for the zero perturbation equals the hand-rolled one
    assert abs(S[0, 0] - f(np.zeros(n))) < 1e-8


def test_prior_log_likelihood_enters_the_cost_and_huge_temperature_is_sample_mean():
    """Residual-MPPI's one change to MPPI: the cost of a sampled sequence gains −w Σ_t γ^t log π(a_t | s_t). With the
    same samples, the costs at weight w and at weight 0 differ by exactly that sum, rolled out by hand (_sequence_cost); and
    Residual at w_logp = 0 is the Greedy variant."""
    cfg = _cfg(n_samples=64, sigma=0.5, lam=0.2, horizon=10)
    prior = eng.Prior(0.95)
    model = eng.true_plant(False)
    s0 = eng.S0
    w = 0.7
    _, U0, eps0, S0 = eng.mppi_update(s0, prior, model, np.array([[0.0, 0.0]]), cfg, np.random.default_rng(3),
                                      return_eps=True)
    _, Uw, epsw, Sw = eng.mppi_update(s0, prior, model, np.array([[w, 0.0]]), cfg, np.random.default_rng(3),
                                      return_eps=True)
    assert np.array_equal(U0, Uw) and np.array_equal(eps0, epsw)
    x0 = np.asarray(s0, float).reshape(1, 4)
    logp = np.array([float((_sequence_cost(e, U0[0], x0, prior, model, cfg, 0.0)
                            - _sequence_cost(e, U0[0], x0, prior, model, cfg, 1.0))[0]) for e in eps0[0]])
    np.testing.assert_allclose(Sw[0] - S0[0], -w * logp, rtol=1e-9, atol=1e-9)
    assert np.ptp(logp) > 1.0                       # the term does reorder the samples
    assert np.array_equal(eng.variant_weights(eng.Config(w_logp=0.0))[0], eng.variant_weights(eng.Config())[1])
    cfg_hot = _cfg(n_samples=512, sigma=0.5, lam=1e12, horizon=10)
    Unew, U, eps, S = eng.mppi_update(s0, prior, model, np.array([[0.1, 0.0]]), cfg_hot,
                                      np.random.default_rng(4), return_eps=True)
    assert np.allclose(Unew - U, eps.mean(1), atol=1e-6)


def test_planner_never_sees_the_basic_reward():
    w = eng.variant_weights(eng.Config())
    assert w[0, 1] == 0.0 and w[1, 1] == 0.0 and w[2, 1] == 1.0   # only the Guided oracle uses r


def test_learned_models():
    prior = eng.Prior(0.95)
    rng = np.random.default_rng(0)
    data = eng._collect_prior_data(eng.true_plant(False), prior, rng)
    m = eng.fit_model(*data)
    A, B = eng.dynamics_matrices()
    assert np.allclose(m.A, A, atol=0.02) and np.allclose(m.B, B, atol=0.02)
    res = eng.run(eng.Config(model="few_shot", n_samples=256, horizon=15))
    errs = [r["model one-step RMSE"] for r in res.rounds]
    assert errs[-1] < 0.5 * errs[0]


def test_closed_form_optimum_is_the_best_linear_policy():
    """The check's optimum: its gain is scipy's discounted DARE solution for omega*Q + Q_R, omega*R, and on a noise-free
    rollout of the check's length no perturbed gain earns more under omega*r + r_R (brute force over 200 gains)."""
    gamma, omega = eng.CF["gamma"], eng.CF["omega"]
    A, B = eng.dynamics_matrices()
    Q, R = omega * eng.Q_BASIC + eng.Q_STAY_LOW, omega * eng.R_BASIC
    P = scipy.linalg.solve_discrete_are(np.sqrt(gamma) * A, np.sqrt(gamma) * B, Q, R)
    K = gamma * np.linalg.solve(R + gamma * B.T @ P @ B, B.T @ P @ A)
    _, K_eng = eng.riccati(A, B, Q, R, gamma)
    assert np.allclose(K_eng, K, atol=1e-8)
    # the add-on's quadratic form is the page's stay-low reward
    s = np.random.default_rng(1).normal(size=(5, 4))
    assert np.allclose(eng.addon_reward("stay_low", s, None, 0.0), -np.einsum("ni,ij,nj->n", s, eng.Q_STAY_LOW, s))

    def ret(G):
        x, total, disc = eng.S0.copy(), 0.0, 1.0
        for _ in range(eng.N_STEPS):
            a = -G @ x
            total += disc * float(omega * eng.basic_reward(x, a) + eng.addon_reward("stay_low", x, a, 0.0))
            x = A @ x + B @ a
            disc *= gamma
        return total

    best = ret(K)
    rng = np.random.default_rng(2)
    assert all(ret(K + 0.05 * rng.normal(size=K.shape) * np.abs(K).max()) <= best + 1e-9 for _ in range(200))


@pytest.fixture(scope="module")
def closed_form_result():
    """The default view with the closed-form check on (about 12 s of its own): computed once, for the engine test
    and for the page test, which gets it through the page's result store."""
    return eng.run(eng.Config(closed_form=True))


def test_closed_form_check_anchors_and_badges(closed_form_result, default_result):
    """A planner that cannot move (tiny sigma, huge lambda) scores like the prior (ratio ~0); at the spec's settings
    the two badges are measured from the check's returns, and both fail as the page says: Residual-MPPI gets under
    0.8 of the way and Greedy-MPPI about as far (0.63 and 0.62 when measured)."""
    still = eng.closed_form_check(sigma=1e-4, lam=1e3, n_samples=64, seeds=1)
    assert abs(still["res_ratio"]) < 0.01 and abs(still["greedy_ratio"]) < 0.01
    res = closed_form_result
    cf = res.closed_form
    mean = cf["J"].mean(1)
    assert cf["J"].shape == (4, eng.CF["seeds"]) and mean[3] > mean[0]          # the optimum beats the prior
    assert (mean[3] >= mean).all()                                                 # and every planner
    np.testing.assert_allclose(cf["share"], (mean - mean[0]) / (mean[3] - mean[0]))
    assert cf["share"][0] == 0 and cf["share"][3] == pytest.approx(1.0)
    cl = eng.claims(res)
    assert len(cl) == 5
    assert cl[3].measured == pytest.approx((mean[1] - mean[0]) / (mean[3] - mean[0]))
    assert cl[4].measured == pytest.approx((mean[2] - mean[0]) / (mean[3] - mean[0]))
    assert not cl[3].passed and not cl[4].passed
    assert 0.3 < cl[3].measured < 0.8 and abs(cl[3].measured - cl[4].measured) < 0.1
    # the first three badges are those of the run without the check
    base = eng.claims(default_result)
    assert [c.measured for c in cl[:3]] == [c.measured for c in base]


def test_closed_form_check_caps_the_planner_work():
    ok = eng.Config(n_samples=4096, horizon=16, closed_form=True)
    assert ok.n_samples * ok.horizon == eng.CF_MAX_SAMPLE_STEPS
    with pytest.raises(ValueError, match="closed-form check"):
        eng.Config(n_samples=4096, horizon=17, closed_form=True)
    eng.Config(n_samples=4096, horizon=17)          # without the check the larger cap applies


def test_page_shows_the_closed_form_check(closed_form_result):
    at = open_page("residual_mppi", {"closed_form": "true"}, timeout=180,
                   seed=(("engine.residual_mppi", eng.Config(closed_form=True), closed_form_result),))
    assert any("Closed-form check" in h.value for h in at.subheader)
    assert any("Share of the way" in str(c.proto.spec) for c in at.get("plotly_chart"))
    assert any("Prior is 0 and the optimum 1" in c.value for c in at.caption)
    # the settings caption quotes Residual's and Greedy's shares: the bars of those two variants
    bar = chart_traces(at, "closed_form")[0]
    share = dict(zip(bar["x"], values(bar["y"])))
    cap = next(c.value for c in at.caption if "of the way from the prior to the optimum" in c.value)
    assert f"Residual-MPPI gets {share['Residual-MPPI']:.2f} of the way" in cap
    assert f"Greedy-MPPI {share['Greedy-MPPI']:.2f}: both" in cap
    assert f"{share['Residual-MPPI']:.2f}" != f"{share['Greedy-MPPI']:.2f}"      # 0.63 and 0.62 when measured


def test_truncated_residual_gain_two_ways_and_its_limits():
    """The truncated residual problem solved by backward recursion equals the λ → 0 limit of the batch closed form
    of one MPPI step (stacked actions, a different computation); λ → ∞ gives back the prior's gain; a long horizon
    reaches the customised optimum K_c (the missing shaping term carries γᴴ)."""
    A, B = eng.dynamics_matrices()
    for gamma, omega in ((0.95, 1.0), (0.9, 0.5)):
        K_pi = eng.Prior(gamma).K
        K_c = eng.riccati(A, B, omega * eng.Q_BASIC + eng.Q_STAY_LOW, omega * eng.R_BASIC, gamma)[1]
        for H in (1, 5, 20):
            np.testing.assert_allclose(eng.mppi_step_gain(H, 1.0, 1e-10, gamma, omega),
                                       eng.truncated_residual_gain(H, gamma, omega), atol=1e-6)
            np.testing.assert_allclose(eng.mppi_step_gain(H, 1.0, 1e8, gamma, omega), K_pi, atol=1e-5)
        np.testing.assert_allclose(eng.truncated_residual_gain(300, gamma, omega), K_c, atol=1e-6)
        # short horizons stop short of K_c on the entry the add-on changes (a_y per unit of y)
        assert abs(eng.truncated_residual_gain(5, gamma, omega)[1, 1] - K_c[1, 1]) > 0.5


def test_planner_gain_matches_the_infinite_sample_step():
    """Monte Carlo vs closed form: with many samples and a short horizon the finite-difference gain of the planner's
    first action is the gain of one infinite-sample MPPI step (measured within 0.01 at K = 20 000)."""
    g = eng.planner_gain(5, 20_000, 1.0, 0.2, 0.95, 0.1, np.random.default_rng(0))
    np.testing.assert_allclose(g, eng.mppi_step_gain(5, 1.0, 0.2, 0.95, 1.0), atol=0.05)


def test_stay_low_run_draws_the_gain_plot():
    r = eng.run(eng.Config(addon="stay_low"))
    g = r.gains
    assert list(g["horizons"]) == list(eng.GAIN_HORIZONS)
    assert g["planner"].shape == g["step"].shape == g["truncated"].shape == (len(eng.GAIN_HORIZONS), 2, 4)
    # one MPPI step moves from the prior toward the truncated optimum, strictly between the two (entry a_y per unit
    # of y; at H = 2 the truncated gain is below the prior's, from H = 5 on above it)
    lo = np.minimum(g["K_pi"][1, 1], g["truncated"][:, 1, 1])
    hi = np.maximum(g["K_pi"][1, 1], g["truncated"][:, 1, 1])
    assert np.all((lo < g["step"][:, 1, 1]) & (g["step"][:, 1, 1] < hi))
    assert eng.run(eng.Config()).gains is None          # obstacle add-on: not quadratic, no closed form
    # ω′ = 0: no action cost, so only the one-step closed form exists
    g0 = eng.run(eng.Config(addon="stay_low", w_logp=0.0)).gains
    assert np.isnan(g0["truncated"]).all() and np.isnan(g0["K_c"]).all() and np.isfinite(g0["step"]).all()


def test_information_cost_is_lambda_eps_sigma_inverse_u():
    """The optional term (spec, step 3) adds λ Σ_t |ε_t|ᵀ Σ⁻¹ |U_t| with Σ = σ² I to each sample's cost: with the
    same random draws, the costs with and without it differ by exactly that sum (σ ≠ 1 so Σ⁻¹ is not the identity)."""
    base = dict(n_samples=32, sigma=0.5, lam=0.3, horizon=6)
    prior = eng.Prior(0.95)
    model = eng.true_plant(False)
    w = np.array([[0.1, 0.0]])
    _, U, eps, S_off = eng.mppi_update(eng.S0, prior, model, w, _cfg(**base, info_cost=False),
                                       np.random.default_rng(5), return_eps=True)
    _, U_on, eps_on, S_on = eng.mppi_update(eng.S0, prior, model, w, _cfg(**base, info_cost=True),
                                            np.random.default_rng(5), return_eps=True)
    assert np.array_equal(U, U_on) and np.array_equal(eps, eps_on)
    Sigma_inv = np.linalg.inv(base["sigma"] ** 2 * np.eye(2))
    want = np.array([base["lam"] * sum(np.abs(eps[0, k, t]) @ Sigma_inv @ np.abs(U[0, t]) for t in range(base["horizon"]))
                     for k in range(base["n_samples"])])
    np.testing.assert_allclose(S_on[0] - S_off[0], want, rtol=1e-10, atol=1e-12)
    assert want.max() > 0.1


def test_one_step_gain_is_the_posterior_mean_of_a_hand_rolled_quadratic_cost():
    """mppi_step_gain (the plot's 'one MPPI step' curve) against the spec's check (c) built from scratch: roll the
    prior's nominal sequence by hand, take the exact gradient and Hessian of the (quadratic) planner cost by central
    differences, apply δ = -(M + λ/σ² I)⁻¹ g and read a_0 = U_0 + δ_0 at ± each unit state. σ = 2 and 0.5 so the
    λ/σ² shrinkage is not the σ = 1 special case."""
    gamma, omega, H, lam = 0.95, 1.0, 4, 0.2
    prior = eng.Prior(gamma)
    model = eng.true_plant(False)
    cfg = _cfg(horizon=H, gamma=gamma)

    def first_action(x, sigma):
        U, s = np.zeros((H, 2)), x.copy()
        for t in range(H):
            U[t] = prior.mean(s)
            s = model(s, U[t])
        f = lambda e: _sequence_cost(e, U, x, prior, model, cfg, omega * eng.ALPHA)  # noqa: E731
        n, h = 2 * H, 1.0                      # exact for a quadratic at any step size
        E = np.eye(n) * h
        g = np.array([(f(E[i]) - f(-E[i])) / (2 * h) for i in range(n)])
        M = np.array([[(f(E[i] + E[j]) - f(E[i] - E[j]) - f(-E[i] + E[j]) + f(-E[i] - E[j])) / (4 * h * h)
                       for j in range(n)] for i in range(n)])
        delta = -np.linalg.solve(M + lam / sigma**2 * np.eye(n), g)
        return U[0] + delta[:2]

    for sigma in (2.0, 0.5):
        K = np.stack([-(first_action(e, sigma) - first_action(-e, sigma)) / 2 for e in np.eye(4)], axis=1)
        np.testing.assert_allclose(eng.mppi_step_gain(H, sigma, lam, gamma, omega), K, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- second mutation round


def test_episode_numbers_recomputed_from_the_trajectories(default_result):
    """Everything the page shows about the episode, from the returned trajectories alone: the prior's path follows the
    plant with its clipped mean action and only small plant noise (fresh each step); the per-step rewards, the summary
    table, the round table and the badge ratios are recomputed with the spec's reward formulas."""
    r, cfg = default_result, eng.Config()
    A, B = eng.dynamics_matrices()
    prior = eng.Prior(cfg.gamma)
    Qb, Rb = np.diag([1.0, 1.0, 0.1, 0.1]), 0.05 * np.eye(2)
    rows = {row["variant"]: row for row in r.summary}
    assert list(r.traj) == list(eng.VARIANTS)
    for v, tr in r.traj.items():
        assert tr.shape == (eng.N_STEPS + 1, 4) and np.array_equal(tr[0], [-3.0, 0.1, 0.0, 0.0])
        s = tr[:-1]
        a_hat = np.linalg.lstsq(B, (tr[1:] - s @ A.T).T, rcond=None)[0].T       # actions up to plant noise
        assert np.all(np.abs(a_hat) <= eng.A_MAX + 0.5), v
        d2 = ((s[:, :2] - np.array([-1.5, 0.0])) ** 2).sum(1)
        np.testing.assert_allclose(r.addon_r[v], -cfg.c_obst * np.exp(-d2 / (2 * 0.4**2)), rtol=1e-12)
        action_cost = -r.basic_r[v] - np.einsum("ni,ij,nj->n", s, Qb, s)            # a'Ra of the executed actions
        np.testing.assert_allclose(action_cost, np.einsum("ni,ij,nj->n", a_hat, Rb, a_hat), atol=0.06)
        assert rows[v]["basic return"] == pytest.approx(r.basic_r[v].sum())
        assert rows[v]["add-on cost"] == pytest.approx(-r.addon_r[v].sum())
        assert rows[v]["final distance to goal"] == pytest.approx(np.hypot(*tr[-1, :2]))
    tr = r.traj["Prior"]
    a = np.clip(-tr[:-1] @ prior.K.T, -2.0, 2.0)
    w = tr[1:] - tr[:-1] @ A.T - a @ B.T
    assert np.abs(w).max() < 5 * eng.NOISE and 0.7 * eng.NOISE < w.std() < 1.3 * eng.NOISE
    assert np.all(np.ptp(w, axis=0) > eng.NOISE)                                    # not one draw repeated
    np.testing.assert_allclose(r.basic_r["Prior"], -(np.einsum("ni,ij,nj->n", tr[:-1], Qb, tr[:-1])
                                                     + np.einsum("ni,ij,nj->n", a, Rb, a)), rtol=1e-12)
    m = r.metrics
    assert m["addon_ratio"] == pytest.approx(rows["Residual-MPPI"]["add-on cost"] / rows["Prior"]["add-on cost"])
    assert m["basic_ratio"] == pytest.approx(abs(rows["Residual-MPPI"]["basic return"] / rows["Prior"]["basic return"]))
    dist = rows["Greedy-MPPI"]["final distance to goal"] / rows["Residual-MPPI"]["final distance to goal"]
    basic = abs(rows["Greedy-MPPI"]["basic return"] / rows["Residual-MPPI"]["basic return"])
    assert m["greedy_worse"] == pytest.approx(max(dist / 3, basic / 1.5))
    # exact model: the one-step model error of the round table is the plant noise, RMS 0.01
    (rd,) = r.rounds
    assert 0.8 * eng.NOISE < rd["model one-step RMSE"] < 1.2 * eng.NOISE
    assert rd["Prior basic"] == rows["Prior"]["basic return"]
    assert rd["Residual-MPPI add-on cost"] == rows["Residual-MPPI"]["add-on cost"]


def test_variant_weights_are_exactly_the_three_objectives():
    """Residual scores r_R + ω′ log π, Greedy r_R alone, Guided (the oracle) r_R + r without log π."""
    np.testing.assert_array_equal(eng.variant_weights(eng.Config(w_logp=0.3)), [[0.3, 0.0], [0.0, 0.0], [0.0, 1.0]])


def test_gain_plot_curves_at_a_non_default_setting():
    """The gain-vs-horizon curves away from the defaults (ω′ = 0.2, so ω = 2; γ = 0.9; σ = 1): K_c and K_π from
    scipy's DARE, each horizon's truncated gain equal to the λ → 0 limit of one MPPI step (another computation), and
    the one-step curve at the page's σ, λ, γ and ω."""
    cfg = eng.Config(addon="stay_low", w_logp=0.2, gamma=0.9, sigma=1.0, lam=0.2, n_samples=64)
    g = eng.gains_vs_horizon(cfg, np.random.default_rng(0))
    A, B = eng.dynamics_matrices()
    gm, om = 0.9, 2.0

    def dare(Q, R):
        P = scipy.linalg.solve_discrete_are(np.sqrt(gm) * A, np.sqrt(gm) * B, Q, R)
        return gm * np.linalg.solve(R + gm * B.T @ P @ B, B.T @ P @ A)

    Q_R = np.diag([0.0, 2.0, 0.5, 0.5])
    np.testing.assert_allclose(g["K_c"], dare(om * eng.Q_BASIC + Q_R, om * eng.R_BASIC), atol=1e-7)
    np.testing.assert_allclose(g["K_pi"], dare(eng.Q_BASIC, eng.R_BASIC), atol=1e-7)
    for i, H in enumerate(g["horizons"]):
        np.testing.assert_allclose(g["truncated"][i], eng.mppi_step_gain(H, 1.0, 1e-10, gm, om), atol=1e-5)
        np.testing.assert_allclose(g["step"][i], eng.mppi_step_gain(H, 1.0, 0.2, gm, om), atol=1e-9)


def test_closed_form_check_prior_and_optimum_returns_by_hand():
    """The check's two anchors, rolled out here: the prior's mean action and scipy's optimal gain for ω·r + r_R, on
    the same plant noise (the first draw of each seed's generator), scored by the discounted ω·r + r_R."""
    cf = eng.closed_form_check(n_samples=64, horizon=5, seeds=2)
    gamma, omega = eng.CF["gamma"], eng.CF["omega"]
    A, B = eng.dynamics_matrices()
    Q_R = np.diag([0.0, 2.0, 0.5, 0.5])
    Q, R = omega * np.diag([1.0, 1.0, 0.1, 0.1]) + Q_R, omega * 0.05 * np.eye(2)
    P = scipy.linalg.solve_discrete_are(np.sqrt(gamma) * A, np.sqrt(gamma) * B, Q, R)
    K_opt = gamma * np.linalg.solve(R + gamma * B.T @ P @ B, B.T @ P @ A)
    K_pi = eng.Prior(gamma).K
    for seed in range(2):
        noise = np.random.default_rng([seed, 7331]).normal(0.0, eng.NOISE, size=(eng.N_STEPS, 4))
        for row, G in ((0, K_pi), (3, K_opt)):
            x, total = eng.S0.copy(), 0.0
            for t in range(eng.N_STEPS):
                a = -G @ x
                total += gamma**t * -(x @ Q @ x + a @ R @ a)
                x = A @ x + B @ a + noise[t]
            assert cf["J"][row, seed] == pytest.approx(total, rel=1e-9)


def test_few_shot_refits_on_all_of_the_planners_own_data(monkeypatch):
    """Few-shot: after each round the model is refit on every transition Residual-MPPI has collected so far (80 per
    round), after a first fit on the 2 000 prior-policy transitions of the old plant."""
    sizes = []
    real = eng.fit_model

    def spy(S, Acts, S2):
        sizes.append(len(S))
        return real(S, Acts, S2)

    monkeypatch.setattr(eng, "fit_model", spy)
    res = eng.run(eng.Config(model="few_shot", n_samples=64, horizon=5))
    assert sizes == [2000, eng.N_STEPS, 2 * eng.N_STEPS, 3 * eng.N_STEPS]
    assert [r["round"] for r in res.rounds] == [0, 1, 2]


# ----------------------------------------------------------------------------- what the page draws


def _page_charts(query=None, seed=()):
    at = open_page("residual_mppi", query, seed=seed)
    return at, charts(at)


def test_page_reward_curves_and_summary_bars_follow_each_variants_episode(default_result):
    """The default page, read back: the cumulative curves are running sums of each variant's own basic and add-on
    rewards, and the three bar panels are, in order, the summed basic reward, minus the summed add-on reward and
    the distance of the last state's position from the goal (recomputed from the rewards and the trajectory)."""
    res = default_result
    _, charts = _page_charts(seed=(("engine.residual_mppi", eng.Config(), default_result),))
    basic = {t["name"]: values(t["y"]) for t in charts["basic"]}
    addon = {t["name"]: values(t["y"]) for t in charts["addon"]}
    for v in res.traj:
        np.testing.assert_allclose(basic[f"{v} basic"], np.cumsum(res.basic_r[v]))
        np.testing.assert_allclose(addon[f"{v} add-on"], np.cumsum(res.addon_r[v]))
    assert any(np.any(res.addon_r[v] != 0) for v in res.traj)
    paths = {t["name"]: (values(t["x"]), values(t["y"])) for t in charts["traj"] if t.get("name")}
    for v, tr in res.traj.items():
        np.testing.assert_allclose(paths[v][0], tr[:, 0])          # x position
        np.testing.assert_allclose(paths[v][1], tr[:, 1])          # y position
    assert (paths["start"][0][0], paths["start"][1][0]) == pytest.approx((eng.S0[0], eng.S0[1]))
    assert (paths["goal"][0][0], paths["goal"][1][0]) == (0, 0)

    want = [{v: float(np.sum(res.basic_r[v])) for v in res.traj},
            {v: float(-np.sum(res.addon_r[v])) for v in res.traj},
            {v: float(np.hypot(*res.traj[v][-1, :2])) for v in res.traj}]
    for i, expected in enumerate(want):
        bar = charts[f"bar{i}"][0]
        got = dict(zip(bar["x"], values(bar["y"])))
        assert set(got) == set(expected)
        for v in expected:
            assert got[v] == pytest.approx(expected[v], rel=1e-9, abs=1e-12), (i, v)


def test_page_gain_panels_draw_the_closed_forms_they_name():
    """With the quadratic add-on the two gain panels draw, under each name, that closed form: one infinite-sample
    MPPI step, the truncated residual LQR of each horizon, the prior's gain and the customised optimum."""
    cfg = eng.Config(addon="stay_low")
    _, charts = _page_charts({"addon": "stay_low"})
    A, B = eng.dynamics_matrices()
    omega = cfg.w_logp / eng.ALPHA
    K_c = eng.riccati(A, B, omega * eng.Q_BASIC + eng.Q_STAY_LOW, omega * eng.R_BASIC, cfg.gamma)[1]
    K_pi = eng.Prior(cfg.gamma).K
    for i, j in ((1, 1), (1, 3)):
        lines = {t["name"]: (values(t["x"]), values(t["y"])) for t in charts[f"gain_{i}{j}"]}
        H = lines["one MPPI step, infinite samples (closed form)"][0].astype(int)
        step = [eng.mppi_step_gain(h, cfg.sigma, cfg.lam, cfg.gamma, omega)[i, j] for h in H]
        trunc = [eng.truncated_residual_gain(h, cfg.gamma, omega)[i, j] for h in H]
        np.testing.assert_allclose(lines["one MPPI step, infinite samples (closed form)"][1], step, rtol=1e-6)
        np.testing.assert_allclose(lines["truncated residual LQR (closed form)"][1], trunc, rtol=1e-6)
        np.testing.assert_allclose(lines["prior K_π"][1], K_pi[i, j])
        np.testing.assert_allclose(lines["customised optimum K_c"][1], K_c[i, j])


def test_quad_is_the_quadratic_form():
    """quad(x, M) = x'Mx row by row (a plain loop), for stacked rows and for a non-symmetric M."""
    rng = np.random.default_rng(5)
    x, M = rng.normal(size=(3, 7, 4)), rng.normal(size=(4, 4))
    ref = np.array([[x[i, j] @ M @ x[i, j] for j in range(7)] for i in range(3)])
    np.testing.assert_allclose(eng.quad(x, M), ref, rtol=1e-12, atol=1e-12)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_each_planned_variant_plans_from_its_own_state(monkeypatch):
    """run_episode is a closed loop per variant: at every step each planner variant is planned from its OWN
    current state with its own objective weights. The planner is replaced by a known deterministic law
    that depends on the state and on the variant's (w_logp, w_basic) row; every variant's episode is then
    replayed by hand on the plant s' = A s + B a + w with the same noise. Catches e.g. Greedy/Guided planned
    from Residual's state (their paths would be open-loop and the Greedy-vs-Residual badge meaningless)."""
    cfg = eng.Config(n_samples=16, horizon=5)
    A, B = eng.dynamics_matrices()
    seen = []

    def law(s, w):                       # a = -K s + offset per variant weights, clipped to the action box
        K = np.array([[0.8, 0.0, 1.1, 0.0], [0.0, 0.6, 0.0, 0.9]])
        return np.clip(-s @ K.T + 0.7 * w[..., :1] - 0.4 * w[..., 1:], -eng.A_MAX, eng.A_MAX)

    def fake(s0, prior, model, cost_w, cfg_like, rng, *args, **kw):
        seen.append(np.array(s0, float))
        return law(np.asarray(s0, float), cost_w), None

    monkeypatch.setattr(eng, "mppi_update", fake)
    noise = np.random.default_rng(4).normal(0.0, 0.05, size=(eng.N_STEPS, 4))
    prior = eng.Prior(cfg.gamma)
    plant = eng.true_plant(False)
    ep = eng.run_episode(cfg, prior, plant, plant, np.random.default_rng(0), noise)
    weights = {"Residual-MPPI": [cfg.w_logp, 0.0], "Greedy-MPPI": [0.0, 0.0], "Guided-MPPI": [0.0, 1.0]}
    for v in eng.VARIANTS:
        s, states = eng.S0.copy(), [eng.S0.copy()]
        for t in range(eng.N_STEPS):
            a = np.clip(-prior.K @ s, -2.0, 2.0) if v == "Prior" else law(s, np.array(weights[v]))
            np.testing.assert_allclose(ep[v][1][t], a, atol=1e-12, err_msg=f"{v} step {t}")
            s = A @ s + B @ a + noise[t]
            states.append(s)
        np.testing.assert_allclose(ep[v][0], np.array(states), atol=1e-9, err_msg=v)
    # the variants really diverge, so planning from another variant's state would show
    assert np.abs(ep["Greedy-MPPI"][0] - ep["Residual-MPPI"][0]).max() > 0.05
    assert len(seen) == eng.N_STEPS and seen[0].shape == (3, 4)


# ---- direct tests (2026-12-07) for mutants caught before only by a pinned number or a failing badge ----

def test_closed_form_check_weights_and_closed_loops_by_hand(monkeypatch):
    """The closed-form check's planner rows: Residual-MPPI is planned with w_logp = ω·α (the spec's ω′ = ωα,
    0.1 at ω = 1; 0.3 at ω = 3) and no basic reward, Greedy-MPPI with (0, 0), each from its OWN current state.
    The planner is replaced by a known state- and weight-dependent law; each row's return under ω·r + r_R is
    replayed here by hand on the plant with the seed's noise and compared with the check's J. Catches ω
    instead of ω·α, or Greedy planned from Residual's state."""
    seen = []
    Kl = np.array([[0.8, 0.0, 1.1, 0.0], [0.0, 0.6, 0.0, 0.9]])

    def law(s, w):
        return -s @ Kl.T + 3.0 * w[..., :1] - 0.5 * w[..., 1:]

    def fake(s0, prior, model, cost_w, cfg_like, rng, *args, **kw):
        s0, cost_w = np.array(s0, float), np.array(cost_w, float)
        seen.append((s0, cost_w))
        U = law(s0, cost_w)[:, None, :]
        return U, U, None, None

    monkeypatch.setattr(eng, "mppi_update", fake)
    for omega in (1.0, 3.0):
        seen.clear()
        cf = eng.closed_form_check(omega=omega, seeds=2)
        gamma = eng.CF["gamma"]
        A, B = eng.dynamics_matrices()
        Q = omega * np.diag([1.0, 1.0, 0.1, 0.1]) + np.diag([0.0, 2.0, 0.5, 0.5])
        R = omega * 0.05 * np.eye(2)
        w_expected = np.array([[omega * 0.1, 0.0], [0.0, 0.0]])      # ω′ = ω·α with α = 0.1
        assert len(seen) == 2 * eng.N_STEPS
        for _, w in seen:
            np.testing.assert_allclose(w, w_expected, atol=1e-12)
        for seed in range(2):
            noise = np.random.default_rng([seed, 7331]).normal(0.0, eng.NOISE, size=(eng.N_STEPS, 4))
            for row, w in ((1, w_expected[0]), (2, w_expected[1])):
                x, total = eng.S0.copy(), 0.0
                for t in range(eng.N_STEPS):
                    np.testing.assert_allclose(seen[seed * eng.N_STEPS + t][0][row - 1], x, atol=1e-9,
                                               err_msg=f"row {row} step {t}")
                    a = law(x, w)
                    total += gamma**t * -(x @ Q @ x + a @ R @ a)
                    x = A @ x + B @ a + noise[t]
                assert cf["J"][row, seed] == pytest.approx(total, rel=1e-9), (omega, seed, row)
        # the two rows really diverge, so planning Greedy from Residual's state would show
        assert np.abs(cf["J"][1] - cf["J"][2]).max() > 1e-3


def test_addon_badge_has_nothing_to_test_at_obstacle_strength_zero():
    """With c_o = 0 the add-on reward is identically 0, so neither the prior nor Residual-MPPI pays any add-on cost:
    the ratio is undefined and the badge must not pass (it did, at 0/1e-9 = 0, before)."""
    r = eng.run(eng.Config(c_obst=0.0))
    assert r.metrics["prior_addon"] == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(r.metrics["addon_ratio"])
    badge = next(c for c in eng.claims(r) if c.statement.startswith("Residual-MPPI meets the add-on objective"))
    assert not badge.passed
