"""MoE in continual learning: claims at the default config and independent checks of the mechanism."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from engine import moe_continual as eng
from tests.pagetext import charts, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def _claim(result, label_start):
    return next(c for c in eng.claims(result) if c.label.startswith(label_start))


def test_claims_at_default(default_result):
    # Reproduced at the default (10 seeds, 3000 rounds): MoE beats one expert, terminating the gate lowers the final
    # error and keeps the routing pure, more experts end no better.
    for label in ("median G_T(MoE)", "median F_T(MoE)", "median G_T terminated", "routing purity"):
        c = _claim(default_result, label)
        assert c.passed, c.describe()
    # The two M = 10 vs M = 3 comparisons depend on the seed (README seed table) and, at first seed 0, on the
    # machine: T_conv 1.14 (fails) and G_T 1.13 (passes) on the machine of the first survey, 1.39 (passes) and
    # 0.547 (fails) on another (x86_64 AVX512_SPR). The page's caveat says one of them fails at the default; both
    # must stay honest measurements of the per-seed medians.
    m = default_result.metrics
    tconv, g10 = _claim(default_result, "T_conv(M=10)"), _claim(default_result, "G_T(M=10)")
    assert tconv.threshold == 1.3 and g10.threshold == 0.8
    assert g10.measured == pytest.approx(m["G_m10"] / m["G_m3"]) and g10.passed == (g10.measured >= 0.8)
    assert np.isfinite(tconv.measured) and tconv.measured > 0 and tconv.passed == (tconv.measured >= 1.3)
    assert not (tconv.passed and g10.passed), "the page's caveat says one of the two fails at the default"


def test_at_1000_rounds_the_two_error_curves_end_level():
    """The page's caveat: with 1 000 rounds many 'terminated' runs have not frozen yet, and at first seed 0 the
    terminated and never-terminated final errors are level (G_T 0.103 vs 0.104 in the engine docstring)."""
    m = eng.run(eng.Config(rounds=1000)).metrics
    # 0.0985 vs 0.0999 on another machine (x86_64 AVX512_SPR): the level is the point, the third digit moves with
    # the machine
    assert m["G_moe"] == pytest.approx(0.10, abs=0.005) and m["G_noterm"] == pytest.approx(0.10, abs=0.005)
    assert abs(m["ratio_term"] - 1) < 0.05


def test_terminated_runs_freeze_within_the_default_horizon(default_result):
    # the default horizon is long enough for the termination rule to act in most terminated runs (the reason for
    # 3000 rounds, see the engine docstring); at 1000 rounds only about half of them had frozen
    names = [v.name for v in default_result.variants]
    i = names.index(f"MoE M={default_result.config.experts}, terminated")
    froze = default_result.t_freeze[i] > 0
    assert froze.mean() >= 0.7, default_result.t_freeze[i]


def test_result_small_and_picklable(default_result):
    assert len(pickle.dumps(default_result)) < 3_000_000


def test_min_norm_update_properties():
    rng = np.random.default_rng(0)
    W = eng.make_pool(rng, 7, 3, 0.4)
    idx, X = eng.make_tasks(rng, W, 20)
    Xp = eng.pseudo_inverse(X)
    np.testing.assert_allclose(Xp, np.linalg.pinv(X), atol=1e-9)
    w = rng.normal(size=eng.D)
    for t in range(20):
        y = W[idx[t]] @ X[t]
        dw = eng.min_norm_update(w, X[t], y, Xp[t])
        np.testing.assert_allclose((w + dw) @ X[t], y, atol=1e-10)  # fits the task exactly
        coef, *_ = np.linalg.lstsq(X[t], dw, rcond=None)
        assert np.linalg.norm(X[t] @ coef - dw) <= 1e-10  # Δw lies in the column space of X_t
        w = w + dw


def test_single_expert_equals_plain_continual_regression():
    cfg = eng.Config(seeds=2, rounds=300)
    res = eng.run(cfg)
    i_single = next(i for i, v in enumerate(res.variants) if v.experts == 1)
    for s in range(cfg.seeds):
        W, (idx, X, _), _ = eng.make_seed_data(cfg, s, 10)
        w = np.zeros(eng.D)  # plain continual min-norm regression, written independently
        for t in range(cfg.rounds):
            w = w + np.linalg.pinv(X[t]).T @ (W[idx[t]] @ X[t] - w @ X[t])
        G_ref = np.mean(np.linalg.norm(w - W[idx], axis=1))
        assert res.G_final[i_single, s] == pytest.approx(G_ref, rel=1e-8)


@pytest.mark.parametrize("aux", ["persistent", "decay"])
def test_router_gradient_matches_finite_differences(aux):
    rng = np.random.default_rng(1)
    M = 4
    theta = rng.normal(scale=0.3, size=(M, eng.D))
    s = rng.normal(size=eng.D)
    rho = rng.uniform(0, 0.3, size=M)
    m_t, dw_norm, t = 2, 0.7, 13
    f = rng.dirichlet(np.ones(M))
    pi = eng.softmax_masked(theta @ s + rho, np.ones(M, bool))
    a = eng.router_grad_coefs(pi[None], np.array([m_t]), np.array([dw_norm]), f[None], 0.5, np.array([M]), aux, t)[0]
    grad = a[:, None] * s[None, :]
    fd = np.zeros_like(theta)
    h = 1e-6
    for j in range(M):
        for k in range(eng.D):
            e = np.zeros_like(theta)
            e[j, k] = h
            fd[j, k] = (eng.router_loss(theta + e, s, rho, m_t, dw_norm, f, 0.5, aux, t)
                        - eng.router_loss(theta - e, s, rho, m_t, dw_norm, f, 0.5, aux, t)) / (2 * h)
    np.testing.assert_allclose(grad, fd, atol=1e-8, rtol=1e-6)


def test_frozen_router_is_bit_identical(default_result):
    assert default_result.frozen_drift == 0.0
    fr = default_result.t_freeze
    for v, var in enumerate(default_result.variants):
        if var.terminate:
            assert np.all((fr[v] == -1) | (fr[v] >= 80 + 3 * var.experts))
        else:
            assert np.all(fr[v] == -1)
    # churn is exactly zero after the freeze in every frozen run of the main variant
    churn = default_result.churn[0]
    for s in np.nonzero(fr[0] > 0)[0]:
        after = default_result.rec_rounds > fr[0, s] + 51
        assert np.all(churn[s, after] == 0.0)


def test_pool_structure():
    rng = np.random.default_rng(2)
    W = eng.make_pool(rng, 9, 3, 0.4)
    assert np.allclose(np.linalg.norm(W[:3], axis=1), 0.4)
    assert np.all(W[:, eng.R_INFO:] == 0)
    assert np.max(np.linalg.norm(W[3:] - W[:-3], axis=1)) < 0.4 / 200 * 6  # members stay near their centre


def test_bad_pool_rejected():
    with pytest.raises(ValueError):
        eng.Config(clusters=5, pool=3)


def test_purity_claim_fails_when_the_router_pressure_fades():
    """Negative control: with the decaying load-balancing loss nothing keeps re-routing tasks, so stopping
    the router cannot buy routing consistency and the purity gap must vanish."""
    m = eng.run(eng.Config(aux="decay")).metrics
    assert m["purity_moe"] - m["purity_noterm"] < 0.08


def test_fixed_comparisons_do_not_depend_on_the_experts_slider():
    # the M = 1, 3 and 10 variants must see the same router noise whatever "Experts M" is (it used to be redrawn
    # once the slider passed 10); settings up to 10 keep the stream they always had
    small = eng.run(eng.Config(rounds=300, seeds=3, experts=4))
    large = eng.run(eng.Config(rounds=300, seeds=3, experts=20))
    for key in ("G_m3", "G_m10", "G_single", "tconv_m3", "tconv_m10"):
        assert small.metrics[key] == large.metrics[key], key
    rng_cfg = eng.Config(rounds=50, seeds=1, experts=20)
    _, _, rho10 = eng.make_seed_data(rng_cfg, 0, 10)
    _, _, rho20 = eng.make_seed_data(rng_cfg, 0, 20)
    assert np.array_equal(rho20[:, :10], rho10) and rho20.shape == (50, 20)
    assert not np.array_equal(rho20[:, 10:], rho20[:, :10])


def test_termination_helps_without_load_balancing_too():
    # the page's router caption says so: the locality loss alone keeps the router moving, so with alpha = 0 the
    # terminated runs still end with a lower error (measured at first seeds 0-2: 0.016 vs 0.041, 0.009 vs 0.028,
    # 0.015 vs 0.225); with the decaying load-balancing loss the two end close (0.011 vs 0.013 at seed 0)
    m = eng.run(eng.Config(alpha=0.0)).metrics
    assert m["G_moe"] < 0.6 * m["G_noterm"], (m["G_moe"], m["G_noterm"])
    d = eng.run(eng.Config(aux="decay")).metrics
    assert d["G_moe"] > 0.6 * d["G_noterm"], (d["G_moe"], d["G_noterm"])


def test_freeze_summary_over_the_frozen_runs():
    # the page's caption and median-T1 line read these; nan-free even when some runs never froze
    r = eng.run(eng.Config())
    tf = r.t_freeze[0]
    fr = tf[tf > 0]
    m = r.metrics
    assert m["n_unfrozen"] == np.sum(tf <= 0)
    assert m["t_freeze_frozen_median"] == np.median(fr) and m["t_freeze_frozen_min"] == fr.min()
    assert m["t_freeze_frozen_max"] == tf.max()


def test_moe_claim_fails_when_the_router_ignores_theta(monkeypatch):
    """Negative control for claim 1 (spec): if the router's gradient step is removed, θ stays at zero, the logits are
    the U(0, λ) noise alone and every task goes to a uniformly random expert. Then no expert specialises on a
    cluster and the MoE is no better than one expert. Same seeds, pool, tasks and noise as the intact run.
    Measured (default config, first seed 0): intact G_T ratio 0.112 (0.046 vs 0.415), purity 0.997; random routing
    ratio 1.02 (0.422 vs 0.415), purity 0.226."""
    intact = eng.run(eng.Config())
    assert _claim(intact, "median G_T(MoE)").passed

    def no_router_learning(pi, *args, **kwargs):
        return np.zeros_like(pi)

    monkeypatch.setattr(eng, "router_grad_coefs", no_router_learning)
    broken = eng.run(eng.Config())
    c = _claim(broken, "median G_T(MoE)")
    assert not c.passed, c.describe()
    assert c.measured > 0.8 and c.measured > 5 * _claim(intact, "median G_T(MoE)").measured
    # the single expert does not use the router, so it is unchanged by the patch
    assert broken.metrics["G_single"] == intact.metrics["G_single"]
    # routing is close to uniform over 5 experts (a random expert per cluster task), far from the intact routing
    assert broken.metrics["purity_moe"] < 0.4 < 0.9 < intact.metrics["purity_moe"]


def test_moe_claim_fails_when_every_expert_takes_every_update(monkeypatch):
    """The spec's second negative control for claim 1: every expert (not only the routed one) takes the min-norm
    step on every task. All experts start at zero and see the same steps, so they stay equal to the single expert
    whatever the router does, and the MoE's G_T ratio is 1 up to float rounding (measured 1.000)."""
    real = eng.simulate
    monkeypatch.setattr(eng, "simulate", lambda *a, **k: real(*a, **k, update_all=True))
    broken = eng.run(eng.Config())
    c = _claim(broken, "median G_T(MoE)")
    assert not c.passed, c.describe()
    assert abs(c.measured - 1.0) < 1e-9


def test_forgetting_curve_matches_a_plain_loop_for_one_expert():
    """F_t = mean over past tasks i < t of |e_i(t) - e_i(i)| (spec, step 7), with e_i(t) = ‖w_t - w*_{n_i}‖. For the
    single expert every task uses the same model, so a short loop that keeps the whole weight history gives F_t at
    each recorded round independently of the engine's incremental bookkeeping."""
    cfg = eng.Config(seeds=1, rounds=120)
    res = eng.run(cfg)
    i_single = next(i for i, v in enumerate(res.variants) if v.experts == 1)
    W, (idx, X, _), _ = eng.make_seed_data(cfg, 0, 10)
    w = np.zeros(eng.D)
    err_at_own_round = []
    F_ref = {}
    for t in range(1, cfg.rounds + 1):
        x = X[t - 1]
        w = w + np.linalg.pinv(x).T @ (W[idx[t - 1]] @ x - w @ x)
        err_now = np.linalg.norm(w - W[idx[:t]], axis=1)          # e_i(t) for i = 1..t
        err_at_own_round.append(err_now[-1])                       # e_t(t)
        F_ref[t] = float(np.mean(np.abs(err_now[:-1] - np.array(err_at_own_round[:-1])))) if t > 1 else 0.0
    got = res.F[i_single, 0]
    want = np.array([F_ref[int(t)] for t in res.rec_rounds])
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)
    assert want[1] > 0    # the second recorded round already has a past task whose error moved


def test_convergence_round_is_the_first_round_of_the_final_settled_stretch():
    """T_conv = the first round (1-based) from which G stays <= max(1.2 G_T, G_T + 0.01) up to the end (spec, step 7),
    checked on hand-built curves and against a brute-force scan over candidate rounds."""
    # threshold max(1.2, 1.01) = 1.2: rounds 1-3 are above it, so the settled stretch starts at round 4
    assert eng.convergence_round(np.array([5.0, 4.0, 3.0, 1.0, 1.05, 1.0])) == 4
    # a late excursion above the threshold (round 5) moves T_conv behind it
    assert eng.convergence_round(np.array([5.0, 1.0, 1.0, 1.0, 9.0, 1.0, 1.0])) == 6
    assert eng.convergence_round(np.array([0.5, 0.5, 0.5])) == 1          # never above: settled from round 1
    rng = np.random.default_rng(4)
    for _ in range(50):
        G = np.abs(rng.normal(size=rng.integers(2, 30))) + 0.05
        thr = max(1.2 * G[-1], G[-1] + 0.01)
        brute = next(r for r in range(1, len(G) + 1) if np.all(G[r - 1:] <= thr))
        assert eng.convergence_round(G) == brute


def test_cluster_purity_reads_only_the_last_30_percent():
    """Purity = per cluster, the share of its tasks in the last 30 % of rounds that went to its most used expert,
    averaged over clusters (docstring and page caption); routing before that window must not count."""
    from collections import Counter

    T = 20
    clusters = np.array([0, 1] * 10)
    routed = np.full(T, 3)                 # the first 14 rounds all go to expert 3 (outside the window)
    routed[14:] = [0, 1, 0, 1, 2, 1]       # last 6 rounds: cluster 0 -> 0, 0, 2; cluster 1 -> 1, 1, 1
    want = []
    for k in (0, 1):
        tail = [int(r) for r, c in zip(routed[14:], clusters[14:]) if c == k]
        want.append(Counter(tail).most_common(1)[0][1] / len(tail))
    assert want == [2 / 3, 1.0]
    assert eng.cluster_purity(routed, clusters) == pytest.approx(np.mean(want))


# ---------------------------------------------------------------- what the page reads off the result


def _index(result, name):
    return [v.name for v in result.variants].index(name)


def test_metrics_and_bars_read_the_variants_they_name(default_result):
    """The four metric cards, the badge details and the "More experts" bars must come from the variant each one names:
    located here by the variant's name, not by its position in the list."""
    r, m = default_result, default_result.metrics
    M = r.config.experts
    idx = {"moe": _index(r, f"MoE M={M}, terminated"), "noterm": _index(r, f"MoE M={M}, never terminated"),
           "single": _index(r, "single expert (M=1)"), "m3": _index(r, "MoE M=3, terminated"),
           "m10": _index(r, "MoE M=10, terminated")}
    for key, i in idx.items():
        assert m[f"G_{key}"] == np.median(r.G_final[i]), key
    for key in ("moe", "noterm", "single"):
        assert m[f"F_{key}"] == np.median(r.F_final[idx[key]]), key
    for key in ("moe", "m3", "m10"):
        assert m[f"tconv_{key}"] == np.median(r.t_conv[idx[key]]), key
    assert m["frozen_share"] == np.mean(r.t_freeze[idx["moe"]] > 0)
    assert m["term_better_seeds"] == np.sum(r.G_final[idx["moe"]] < r.G_final[idx["noterm"]])
    # bars: one per expert count, the terminated MoE for M > 1 and the single expert for M = 1
    by_m = {1: idx["single"], 3: idx["m3"], M: idx["moe"], 10: idx["m10"]}
    want = [(k, float(np.median(r.G_final[i])), float(np.median(r.t_conv[i]))) for k, i in sorted(by_m.items())]
    assert r.bars == want
    # the plotted final point of each curve is the final value the badges use
    np.testing.assert_array_equal(r.G[:, :, -1], r.G_final)
    np.testing.assert_array_equal(r.F[:, :, -1], r.F_final)
    assert r.rec_rounds[0] == 1 and r.rec_rounds[-1] == r.config.rounds


def test_curve_quartiles_are_the_seed_quartiles(default_result):
    """Lines = median over seeds, bands = 25th and 75th percentiles (page caption), recomputed one variant and one
    recorded round at a time."""
    r = default_result
    for key, arr in (("G", r.G), ("F", r.F), ("gap", r.gap)):
        q = r.quartiles[key]
        assert q.shape == (len(r.variants), 3, len(r.rec_rounds))
        for v in range(len(r.variants)):
            for j in (0, 7, len(r.rec_rounds) // 2, len(r.rec_rounds) - 1):
                col = arr[v, :, j]
                assert q[v, 1, j] == pytest.approx(np.median(col), rel=1e-12, abs=1e-15)
                assert q[v, 0, j] == pytest.approx(np.percentile(col, 25), rel=1e-12, abs=1e-15)
                assert q[v, 2, j] == pytest.approx(np.percentile(col, 75), rel=1e-12, abs=1e-15)


def test_generalisation_curve_matches_a_plain_loop_for_one_expert():
    """G_t = (1/t) Σ_{i≤t} ‖w_t − w*_{n_i}‖ at every recorded round (not only the last), from a loop that keeps
    the single expert's weights."""
    cfg = eng.Config(seeds=1, rounds=120)
    res = eng.run(cfg)
    i_single = _index(res, "single expert (M=1)")
    W, (idx, X, _), _ = eng.make_seed_data(cfg, 0, 10)
    w = np.zeros(eng.D)
    G_ref = {}
    for t in range(1, cfg.rounds + 1):
        x = X[t - 1]
        w = w + np.linalg.lstsq(x.T, W[idx[t - 1]] @ x - w @ x, rcond=None)[0]
        G_ref[t] = float(np.mean(np.linalg.norm(w - W[idx[:t]], axis=1)))
    want = np.array([G_ref[int(t)] for t in res.rec_rounds])
    np.testing.assert_allclose(res.G[i_single, 0], want, rtol=1e-7)


def test_routing_raster_shows_the_first_seed():
    """The raster and its CSV: routed expert per round of the first seed and the cluster (pool index mod K) of that
    seed's tasks; seeds are simulated independently, so adding a second seed must not change the first one's row."""
    one = eng.run(eng.Config(seeds=1, rounds=300))
    two = eng.run(eng.Config(seeds=2, rounds=300))
    _, (idx, _, _), _ = eng.make_seed_data(two.config, 0, eng.FIXED_MAX)
    np.testing.assert_array_equal(two.raster_cluster, idx % two.config.clusters)
    assert set(two.raster_expert) == {v.name for v in two.variants[:2]}
    for name, routed in two.raster_expert.items():
        np.testing.assert_array_equal(routed, one.raster_expert[name])
        v = _index(two, name)
        assert two.purity[v, 0] == eng.cluster_purity(routed, idx % two.config.clusters)
    # and the second seed's routing is a different one (the check above has power)
    first = two.variants[0].name
    other = eng.run(eng.Config(seeds=1, rounds=300, seed=1)).raster_expert[first]
    assert not np.array_equal(two.raster_expert[first], other)


def test_router_noise_follows_its_slider():
    cfg0 = eng.Config(noise=0.0, rounds=200, seeds=1)
    assert not np.any(eng.make_seed_data(cfg0, 0, 10)[2])
    rho = eng.make_seed_data(eng.Config(noise=0.9, rounds=200, seeds=1), 0, 20)[2]
    assert rho.min() >= 0.0 and rho.max() <= 0.9
    assert rho[:, :10].max() > 0.8 and rho[:, 10:].max() > 0.8      # U(0, λ), both streams


def _reference_run(cfg, M, W, idx, X, rho, T):
    """One terminated MoE run in plain Python, written from the spec (the page's "how it works"): top-1 routing on
    noisy logits, min-norm fit of the routed expert (least squares), the router's gradient step on locality +
    persistent load balance, and the termination rule. Returns θ after every round, the largest gating gap and the
    freeze round."""
    D = W.shape[1]
    w, theta = np.zeros((M, D)), np.zeros((M, D))
    counts, flags = np.zeros(M), np.zeros(M, bool)
    frozen, t_freeze = False, -1
    thetas, gaps = [theta.copy()], []
    for t in range(1, T + 1):
        x = X[t - 1]
        y = W[idx[t - 1]] @ x
        s = x.sum(axis=1)
        h = theta @ s + rho[t - 1, :M]
        m = int(np.argmax(h))
        pi = np.exp(h - h.max())
        pi /= pi.sum()
        dw = np.linalg.lstsq(x.T, y - w[m] @ x, rcond=None)[0]
        w[m] = w[m] + dw
        counts[m] += 1
        gap = np.abs(h - h[m])
        gaps.append(gap.max())
        if not frozen and t >= M / cfg.eta:
            for j in range(M):
                if j != m and gap[j] < cfg.sigma0 ** 1.25:
                    flags[j] = True
            if t >= 80 + 3 * M and all(flags[j] for j in range(M) if j != m):
                frozen, t_freeze = True, t
        if not frozen:
            c = cfg.alpha * M * counts / t
            c[m] += np.linalg.norm(dw)
            for j in range(M):                  # dL/dθ_j = Σ_k c_k ∂π_k/∂θ_j = π_j (c_j − Σ_k c_k π_k) s
                theta[j] = theta[j] - cfg.eta * pi[j] * (c[j] - c @ pi) * s
        thetas.append(theta.copy())
    return np.array(thetas), np.array(gaps), t_freeze


@pytest.mark.parametrize("eta, alpha, sigma0", [(0.5, 0.5, 0.4), (0.35, 0.8, 0.5)])
def test_terminated_run_matches_a_plain_python_reference(eta, alpha, sigma0):
    """A terminated M = 3 run (the engine's 'MoE M=3, terminated' variant, seed 0) against the loop above: the freeze
    round, the router weights at the end, the recorded gating gaps and the router drift ‖θ_t − θ_(t−50)‖."""
    cfg = eng.Config(rounds=400, seeds=1, eta=eta, alpha=alpha, sigma0=sigma0)
    res = eng.run(cfg)
    v = _index(res, "MoE M=3, terminated")
    W, (idx, X, _), rho = eng.make_seed_data(cfg, 0, eng.FIXED_MAX)
    thetas, gaps, t_freeze = _reference_run(cfg, 3, W, idx, X, rho, cfg.rounds)
    assert res.t_freeze[v, 0] == t_freeze
    rec = res.rec_rounds
    np.testing.assert_allclose(res.gap[v, 0], gaps[rec - 1], rtol=1e-6, atol=1e-9)
    late = rec > 50
    drift = np.linalg.norm((thetas[rec[late]] - thetas[rec[late] - 50]).reshape(late.sum(), -1), axis=1)
    np.testing.assert_allclose(res.churn[v, 0, late], drift, rtol=1e-6, atol=1e-9)
    assert np.all(np.isnan(res.churn[v, 0, ~late]))


# ----------------------------------------------------------------------------- what the page draws


def test_page_off_view_draws_the_unterminated_moe_and_quotes_seed_medians(default_result):
    """The page opened with the view "Router termination: off": the four numbers are medians over seeds of each
    variant's final G, the error curves are the never-terminated MoE and the single expert (medians over seeds of
    the recorded G), only that MoE's routing raster is drawn, the T_conv bars carry the rounds (not G_T), and the
    freeze caption's median round is the median over the frozen runs of the terminated MoE."""
    res = default_result
    at = open_page("moe_continual", {"terminate": "off"},
                   seed=(("engine.moe_continual", eng.Config(), default_result),))
    figs = charts(at)
    names = [v.name for v in res.variants]

    shown = {mt.label: mt.value for mt in at.metric}
    for label, v in (("G_T, MoE terminated", 0), ("G_T, MoE never terminated", 1), ("G_T, single expert", 2)):
        assert shown[label] == f"{np.median(res.G_final[v]):.3f}"

    curves = {t["name"]: (values(t["x"]), values(t["y"])) for t in figs["curve-G"] if t.get("name")}
    assert set(curves) == {names[1], names[2]}
    for v in (1, 2):
        x, y = curves[names[v]]
        at_round = {r: i for i, r in enumerate(res.rec_rounds)}
        idx = [at_round[int(r)] for r in x]
        np.testing.assert_allclose(y, np.median(res.G[v], axis=0)[idx], rtol=1e-9)

    for key, arr in (("gap", res.gap), ("churn", res.churn)):
        router = {t["name"]: values(t["y"]) for t in figs[f"router-{key}"] if t.get("name")}
        assert set(router) == {names[1]}
        np.testing.assert_allclose(router[names[1]], np.median(arr[1], axis=0), rtol=1e-9)

    rasters = [k for k in figs if k.startswith("raster-")]
    assert rasters == [f"raster-{names[1]}"]

    bar_t = figs["bars-t"][0]
    np.testing.assert_allclose(values(bar_t["y"]), [b[2] for b in res.bars])
    assert list(bar_t["x"]) == [f"M = {b[0]}" for b in res.bars]

    tf = res.t_freeze[0]
    assert np.any(tf > 0)
    assert any(f"froze the router at round {int(np.median(tf[tf > 0]))} in the median" in c.value
               for c in at.caption)


def test_min_norm_updates_shrink_the_error_as_the_closed_form_says():
    """A closed form the engine did not compute: one task's truth w*, refitted each round on s fresh isotropic Gaussian
    samples in d dimensions. Each minimum-norm update removes the error's component in a uniformly random s-dimensional
    subspace, so E‖w_t − w*‖² = (1 − s/d)^t ‖w_0 − w*‖². Checked over 4 000 independent chains to 5 standard errors."""
    rng = np.random.default_rng(3)
    d, s, n, rounds = eng.D, 3, 4000, 6
    w_star = rng.normal(size=d)
    w = np.zeros((n, d))
    e0 = float(w_star @ w_star)
    for t in range(1, rounds + 1):
        X = rng.normal(size=(n, d, s))
        w = np.stack([w[i] + eng.min_norm_update(w[i], X[i], w_star @ X[i]) for i in range(n)])
        err = np.sum((w - w_star) ** 2, axis=1)
        expected = (1 - s / d) ** t * e0
        assert abs(err.mean() - expected) < 5 * err.std(ddof=1) / np.sqrt(n), (t, err.mean(), expected)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_termination_waits_for_m_over_eta_rounds_at_a_small_router_step():
    """Spec step 6: flags start only once t >= M/eta. With eta = 0.05 that is round 200 for M = 10, later than
    the floor 80 + 3M = 110: every terminated M = 10 run freezes at or after round 200, and at the round the
    plain-Python reference (written from the spec) gives. Measured: 218 and 201 at seeds 0 and 1; with flags
    from round 1 both freeze at 110."""
    cfg = eng.Config(rounds=400, seeds=2, eta=0.05)
    res = eng.run(cfg)
    v = _index(res, "MoE M=10, terminated")
    for s in range(cfg.seeds):
        W, (idx, X, _), rho = eng.make_seed_data(cfg, s, eng.FIXED_MAX)
        _, _, t_freeze = _reference_run(cfg, 10, W, idx, X, rho, cfg.rounds)
        assert t_freeze >= 10 / cfg.eta                       # the reference froze, after the gate
        assert res.t_freeze[v, s] == t_freeze, (s, res.t_freeze[v, s], t_freeze)
    for i, var in enumerate(res.variants):
        if var.terminate:
            frozen = res.t_freeze[i][res.t_freeze[i] > 0]
            assert np.all(frozen >= max(80 + 3 * var.experts, var.experts / cfg.eta)), (var.name, frozen)
