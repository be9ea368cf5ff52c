"""Gap-dependent Q-learning: claims at the default config and independent checks."""

import itertools

import numpy as np
import pytest

from engine import gap_dependent_q as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


REGRET_COMPARISON = ("UCB-Advantage has lower regret than UCB-Hoeffding",
                     "Q-EarlySettled-Advantage has lower regret than UCB-Hoeffding")


def _next_state(p, u):
    """Inverse-CDF draw of the next state from the row p with the uniform u (the loop references' sampler)."""
    return min(int(np.sum(np.cumsum(p)[:-1] <= u)), len(p) - 1)


def test_claims_pass_at_default(default_result):
    claims = eng.claims(default_result)
    assert len(claims) == 10
    # Not reproduced at page scale (the page says so with the numbers): the advantage methods do not reach a
    # lower regret than UCB-Hoeffding within K = 10 000 episodes. Those two badges are measured and shown
    # failing; every other claim must pass.
    failed = [c.describe() for c in claims if not c.passed and c.statement not in REGRET_COMPARISON]
    assert not failed, failed
    cmp = [c for c in claims if c.statement in REGRET_COMPARISON]
    assert len(cmp) == 2 and all(np.isfinite(c.measured) and c.measured > 0 for c in cmp)


def test_q_earlysettled_switches_about_as_often_as_hoeffding(default_result):
    """The page's caveat: Q-EarlySettled-Advantage updates after every visit, so its policy-switch count is close to
    UCB-Hoeffding's (measured ratio 1.12 at the default), unlike UCB-Advantage's stage-wise updates (0.08)."""
    m = default_result.metrics
    assert 0.7 <= m["switch_ratio_qes"] <= 1.4
    assert m["switch_ratio"] < 0.3 * m["switch_ratio_qes"]


def test_next_state_sampler_matches_inverse_cdf():
    """The vectorised sampler equals a per-entry searchsorted, and its frequencies match P."""
    P, _, _ = _tiny("random", S=4, A=3, H=2)
    B, H, S, A, _ = P.shape
    rng = np.random.default_rng(7)
    U = rng.uniform(size=(3000, H, B))
    NS = eng._next_states(P, U).reshape(len(U), B, H, S, A)
    for k in range(3):
        for b, h, s, a in itertools.product(range(B), range(H), range(S), range(A)):
            want = min(int(np.searchsorted(np.cumsum(P[b, h, s, a]), U[k, h, b], side="right")), S - 1)
            assert NS[k, b, h, s, a] == want
    freq = np.stack([(NS == j).mean(0) for j in range(S)], -1)
    assert np.abs(freq - P).max() < 0.04


def test_side_by_side_run_equals_separate_runs():
    """Running the learners in one stacked batch changes nothing: each block equals the learner run alone."""
    P, R, _ = _tiny("gap", S=3, A=2, H=3)
    Qs, Vs = eng.value_iteration(P, R)
    K, H = 600, 3
    iota = float(np.log(2 * 3 * 2 * K * H / eng.P_FAIL))
    mask = Qs >= Vs[:, :-1, :, None] - 1e-9
    together = eng._run_algos(eng.ALGOS, P, R, Vs[:, 0, 0], K, 0.1, iota, 20.0, np.random.default_rng(3), None,
                              (0, 1), mask, 2)
    for algo, joint in zip(eng.ALGOS, together):
        alone = eng._run_algo(algo, P, R, Vs[:, 0, 0], K, 0.1, iota, 20.0, np.random.default_rng(3), None,
                              (0, 1), mask, 2)
        assert np.array_equal(joint[0], alone[0]) and np.array_equal(joint[1], alone[1])
        assert np.allclose(joint[3], alone[3])


def test_regret_curves_are_cumulative_and_nonnegative(default_result):
    r = default_result.regret
    assert np.all(r >= -1e-9)
    assert np.all(np.diff(r, axis=-1) >= -1e-9)
    assert np.all(np.diff(default_result.switches, axis=-1) >= 0)


def _tiny(family="gap", seed=3, S=3, A=2, H=3, gaps=(0.2,)):
    rng = np.random.default_rng(seed)
    return eng.make_mdps(family, list(gaps), 2, S, A, H, rng)


def _loop_eval(P, R, pi):
    """Plain-python policy evaluation, independent of the vectorised one."""
    B, H, S, A, _ = P.shape
    V = np.zeros((B, H + 1, S))
    for b in range(B):
        for h in reversed(range(H)):
            for s in range(S):
                a = pi[b, h, s]
                V[b, h, s] = R[b, h, s, a] + sum(P[b, h, s, a, t] * V[b, h + 1, t] for t in range(S))
    return V


@pytest.mark.parametrize("family", ["gap", "random", "deterministic"])
def test_value_iteration_matches_brute_force_over_policies(family):
    P, R, _ = _tiny(family, S=2, A=2, H=3)
    B, H, S, A, _ = P.shape
    Qs, Vs = eng.value_iteration(P, R)
    best = np.full(B, -np.inf)
    for flat in itertools.product(range(A), repeat=H * S):
        pi = np.broadcast_to(np.array(flat).reshape(H, S), (B, H, S))
        V = _loop_eval(P, R, pi)
        assert np.allclose(V, eng.evaluate_policy(P, R, pi), atol=1e-12)
        best = np.maximum(best, V[:, 0, 0])
    assert np.allclose(best, Vs[:, 0, 0], atol=1e-12)
    # the greedy policy of Q* has zero regret, any policy has regret >= 0
    opt = eng.evaluate_policy(P, R, Qs.argmax(-1))
    assert np.allclose(opt[:, 0, 0], Vs[:, 0, 0], atol=1e-12)


def test_batched_policy_evaluation_matches_single():
    P, R, _ = _tiny("random", S=3, A=3, H=3)
    rng = np.random.default_rng(2)
    pis = rng.integers(0, 3, size=(5,) + P.shape[:3])
    got = eng.evaluate_policies(P, R, pis)
    for n in range(5):
        assert np.allclose(got[n], _loop_eval(P, R, pis[n])[:, 0, 0], atol=1e-12)


def test_gap_controlled_family_has_exact_gaps():
    P, R, g = _tiny("gap", S=4, A=3, H=4, gaps=(0.3, 0.07))
    Qs, Vs = eng.value_iteration(P, R)
    gaps = Vs[:, :-1, :, None] - Qs
    for b in range(len(P)):
        pos = gaps[b][gaps[b] > 1e-9]
        assert np.allclose(pos, g[b], atol=1e-12)
    dmin, qvar = eng.gap_stats(Qs, Vs, P)
    assert np.allclose(dmin, g)
    # deterministic transitions have zero conditional variance
    P2, R2, _ = _tiny("deterministic")
    Q2, V2 = eng.value_iteration(P2, R2)
    assert np.allclose(eng.gap_stats(Q2, V2, P2)[1], 0.0)


def test_stage_schedule():
    lengths = eng.stage_lengths(3, 8)
    assert lengths.tolist() == [3, 4, 5, 6, 8, 10, 13, 17]
    assert np.cumsum(lengths)[:5].tolist() == [3, 7, 12, 18, 26]


@pytest.mark.parametrize("t", [1, 5, 40])
def test_hoeffding_weights_sum_to_one(t):
    assert abs(eng.hoeffding_weights(t, 4).sum() - 1.0) < 1e-12


@pytest.mark.parametrize("algo", eng.ALGOS)
def test_optimism_with_theory_constants(algo):
    P, R, _ = _tiny("gap", S=3, A=2, H=3)
    Qs, Vs = eng.value_iteration(P, R)
    K, H = 400, 3
    iota = float(np.log(2 * 3 * 2 * K * H / eng.P_FAIL))
    rng = np.random.default_rng(0)
    regret, switched, frac, Q, V, *_ = eng._run_algo(algo, P, R, Vs[:, 0, 0], K, 1.0, iota, 54 * iota, rng, None,
                                                 (0, 1), Qs >= Vs[:, :-1, :, None] - 1e-9, 2)
    assert np.all(Q >= Qs - 1e-9)
    assert np.all(V <= H + 1e-9)
    assert np.all(regret >= -1e-9)


def test_random_family_and_bad_settings():
    with pytest.raises(ValueError):
        eng.Config(gap=0.2, gap2=0.2)
    res = eng.run(eng.Config(family="random", episodes=2000, n_seeds=2))
    assert len(eng.claims(res)) == 7


def test_q_earlysettled_brackets_vstar_and_learns_optimal_policy():
    """Tiny MDP, theory constants: V^LCB <= V* <= V^UCB for most seeds, and the greedy policy becomes optimal."""
    ok_bracket, ok_opt = 0, 0
    for seed in range(4):
        P, R, _ = _tiny("gap", seed=seed, S=2, A=2, H=2, gaps=(0.4,))
        Qs, Vs = eng.value_iteration(P, R)
        K, H = 3000, 2
        iota = float(np.log(2 * 2 * 2 * K * H / eng.P_FAIL))
        out = eng._run_algo("Q-EarlySettled-Advantage", P, R, Vs[:, 0, 0], K, 0.3, iota, 1.0,
                            np.random.default_rng(seed), None, (0, 1), Qs >= Vs[:, :-1, :, None] - 1e-9, 2)
        regret, Q, (Qu, Ql, Vu, Vl) = out[0], out[3], out[5]
        ok_bracket += int(np.all(Vl[:, :H] <= Vs[:, :H] + 1e-9) and np.all(Ql <= Qs + 1e-9)
                          and np.all(Qu >= Qs - 1e-9) and np.all(Vu[:, :H] >= Vs[:, :H] - 1e-9)
                          and np.all(Q >= Qs - 1e-9))
        ok_opt += int(np.all(regret[-1] < 1e-9))
    assert ok_bracket >= 3 and ok_opt >= 3


def _loop_ucb_advantage(P, R, K, c, iota, N0, U):
    """Zhang, Zhou & Ji (2020), Algorithm 1, written out with plain loops, one MDP at a time.

    Every bonus is scaled by c as in the engine. Returns Q (B,H,S,A), per-episode greedy policies
    (K,B,H,S) and, per MDP, (stage-end updates, updates whose new Q came from the reference estimate).
    """
    B, H, S, A, _ = P.shape
    Q = np.zeros((B, H, S, A))
    pis = np.zeros((K, B, H, S), dtype=int)
    counts = np.zeros((B, 2))
    for b in range(B):
        q = np.array([[[H - h] * A for _ in range(S)] for h in range(H)], float)   # H - h + 1, h from 1
        v = np.array([[H - h] * S for h in range(H)] + [[0.0] * S], float)
        vref = np.full((H + 1, S), float(H))
        vref[H] = 0.0
        n = np.zeros((H, S, A), int)
        nc = np.zeros((H, S, A), int)
        stage = np.full((H, S, A), H)
        acc = {k: np.zeros((H, S, A)) for k in ("v", "mu", "sig", "mref", "sref")}
        nhs = np.zeros((H, S), int)
        settled = np.zeros((H, S), bool)
        for k in range(K):
            pis[k, b] = q.argmax(-1)
            s = 0
            for h in range(H):
                a = int(pis[k, b, h, s])
                cdf = np.cumsum(P[b, h, s, a])
                s2 = min(int(np.sum(cdf[:-1] <= U[k, h, b])), S - 1)
                vn, vr = v[h + 1, s2], vref[h + 1, s2]
                n[h, s, a] += 1
                nc[h, s, a] += 1
                nhs[h, s] += 1
                acc["v"][h, s, a] += vn
                acc["mu"][h, s, a] += vn - vr
                acc["sig"][h, s, a] += (vn - vr) ** 2
                acc["mref"][h, s, a] += vr
                acc["sref"][h, s, a] += vr ** 2
                if nc[h, s, a] == stage[h, s, a]:
                    tot, st = n[h, s, a], nc[h, s, a]
                    bh = 2 * c * np.sqrt(H * H * iota / st)
                    var_r = max(acc["sref"][h, s, a] / tot - (acc["mref"][h, s, a] / tot) ** 2, 0.0)
                    var_a = max(acc["sig"][h, s, a] / st - (acc["mu"][h, s, a] / st) ** 2, 0.0)
                    bbar = c * (2 * np.sqrt(var_r * iota / tot) + 2 * np.sqrt(var_a * iota / st)
                                + 5 * (H * iota / tot + H * iota / st
                                       + H * iota ** 0.75 / tot ** 0.75 + H * iota ** 0.75 / st ** 0.75))
                    r = R[b, h, s, a]
                    plain = r + acc["v"][h, s, a] / st + bh
                    ref = r + acc["mref"][h, s, a] / tot + acc["mu"][h, s, a] / st + bbar
                    counts[b] += (1, ref < min(plain, q[h, s, a]))
                    q[h, s, a] = min(plain, ref, q[h, s, a])
                    v[h, s] = q[h, s].max()
                    nc[h, s, a] = 0
                    for key in ("v", "mu", "sig"):
                        acc[key][h, s, a] = 0.0
                    stage[h, s, a] = int(np.floor((1 + 1 / H) * stage[h, s, a]))
                if not settled[h, s] and nhs[h, s] >= N0:
                    vref[h, s] = v[h, s]
                    settled[h, s] = True
                s = s2
        Q[b] = q
    return Q, pis, counts


def test_ucb_advantage_starts_at_remaining_horizon():
    """Zhang et al. (2020) initialise Q_h = V_h = H - h + 1; one episode of H = 3 ends no stage (e_1 = 3)."""
    P, R, _ = _tiny("gap", S=3, A=2, H=3)
    Qs, Vs = eng.value_iteration(P, R)
    iota = float(np.log(2 * 3 * 2 * 3 / eng.P_FAIL))
    out = eng._run_algo("UCB-Advantage", P, R, Vs[:, 0, 0], 1, 0.1, iota, 20.0, np.random.default_rng(0), None,
                        (0, 1), Qs >= Vs[:, :-1, :, None] - 1e-9, 2)
    Q, V = out[3], out[4]
    assert np.array_equal(Q[:, :, 0, 0], np.array([[3.0, 2.0, 1.0]] * len(P)))
    assert np.all(Q == np.array([3.0, 2.0, 1.0])[None, :, None, None])
    assert np.all(V[:, :3] == np.array([3.0, 2.0, 1.0])[None, :, None]) and np.all(V[:, 3] == 0.0)


@pytest.mark.parametrize("family,iota,N0", [("gap", 1.0, 5.0), ("deterministic", 1.0, 5.0), ("random", None, 40.0)])
def test_ucb_advantage_matches_loop_reference(family, iota, N0):
    """The vectorised UCB-Advantage equals a plain-loop transcription of Zhang et al.'s Algorithm 1.

    With iota = 1 the reference-advantage estimate sets Q in some stage-end updates, so both branches
    of the min, the stage schedule and the reference settling are exercised; with the page's iota the
    plain branch always wins, as at the default configuration.
    """
    P, R, _ = _tiny(family, seed=5, S=2, A=2, H=2)
    Qs, Vs = eng.value_iteration(P, R)
    K, H, c = 4000, 2, 1.0
    if iota is None:
        iota = float(np.log(2 * 2 * 2 * K * H / eng.P_FAIL))
    out = eng._run_algo("UCB-Advantage", P, R, Vs[:, 0, 0], K, c, iota, N0, np.random.default_rng(11), None,
                        (0, 1), Qs >= Vs[:, :-1, :, None] - 1e-9, 2)
    U = np.random.default_rng(11).uniform(size=(K, H, len(P)))
    Q_ref, pis, counts = _loop_ucb_advantage(P, R, K, c, iota, N0, U)
    assert np.allclose(out[3], Q_ref, atol=1e-9)
    regret = Vs[:, 0, 0][None] - eng.evaluate_policies(P, R, pis)
    assert np.allclose(out[0], regret, atol=1e-9)
    assert np.allclose(out[-1], counts[:, 1] / counts[:, 0])
    if iota == 1.0:
        assert np.all(counts[:, 1] > 0)


def test_work_estimate_refuses_what_would_not_fit_and_names_the_episodes_that_do():
    assert eng.estimated_seconds(eng.HEAVY_CONFIG) <= eng.WORK_LIMIT_S
    eng.Config(episodes=100_000)                                   # the spec's largest K at the default sizes
    with pytest.raises(ValueError, match=r"use at most [\d,]+ episodes") as e:
        eng.Config(n_states=10, n_actions=5, horizon=6, n_seeds=16, episodes=100_000)
    fits = int(str(e.value).split("at most ")[1].split(" episodes")[0].replace(",", ""))
    eng.Config(n_states=10, n_actions=5, horizon=6, n_seeds=16, episodes=fits)   # the named K is accepted


def _loop_ucb_hoeffding(P, R, K, c, iota, U):
    """Jin et al. (2018), UCB-Hoeffding, in plain loops one MDP at a time: Q = V = H at the start, after the t-th
    visit of (h,s,a) Q <- (1 - a_t) Q + a_t (r + V_{h+1}(s') + c sqrt(H^3 iota / t)) with a_t = (H+1)/(H+t), then
    V_h(s) = min(H, max_a Q). Returns Q (B,H,S,A) and the greedy policy of every episode (K,B,H,S)."""
    B, H, S, A, _ = P.shape
    Q = np.zeros((B, H, S, A))
    pis = np.zeros((K, B, H, S), dtype=int)
    for b in range(B):
        q = np.full((H, S, A), float(H))
        v = np.full((H + 1, S), float(H))
        v[H] = 0.0
        n = np.zeros((H, S, A), int)
        for k in range(K):
            pis[k, b] = q.argmax(-1)
            s = 0
            for h in range(H):
                a = int(pis[k, b, h, s])
                s2 = _next_state(P[b, h, s, a], U[k, h, b])
                n[h, s, a] += 1
                t = n[h, s, a]
                alpha = (H + 1) / (H + t)
                bonus = c * np.sqrt(H ** 3 * iota / t)
                q[h, s, a] = (1 - alpha) * q[h, s, a] + alpha * (R[b, h, s, a] + v[h + 1, s2] + bonus)
                v[h, s] = min(float(H), q[h, s].max())
                s = s2
        Q[b] = q
    return Q, pis


@pytest.fixture(scope="module")
def hoeffding_vs_loop():
    # S = 10 makes the engine evaluate its stored policies in several batches within K (n_eval < K), so the
    # switch flags are also checked across batch boundaries
    P, R, _ = _tiny("gap", seed=2, S=10, A=2, H=3, gaps=(0.25,))
    Qs, Vs = eng.value_iteration(P, R)
    K, H, c = 4000, 3, 0.1
    iota = float(np.log(2 * 10 * 2 * K * H / eng.P_FAIL))
    out = eng._run_algo("UCB-Hoeffding", P, R, Vs[:, 0, 0], K, c, iota, 1.0, np.random.default_rng(9), None,
                        (0, 1), Qs >= Vs[:, :-1, :, None] - 1e-9, 2)
    U = np.random.default_rng(9).uniform(size=(K, H, len(P)))
    Q_ref, pis = _loop_ucb_hoeffding(P, R, K, c, iota, U)
    return P, R, Vs, out, Q_ref, pis


def test_ucb_hoeffding_matches_loop_reference(hoeffding_vs_loop):
    """The vectorised UCB-Hoeffding equals the plain-loop transcription (final Q and every episode's exact regret)."""
    P, R, Vs, out, Q_ref, pis = hoeffding_vs_loop
    assert np.allclose(out[3], Q_ref, atol=1e-9)
    regret = Vs[:, 0, 0][None] - eng.evaluate_policies(P, R, pis)
    assert np.allclose(out[0], regret, atol=1e-9)


def test_switch_flags_are_episodes_whose_whole_policy_changed(hoeffding_vs_loop):
    """A switch is an episode whose greedy policy (over all h, s) differs from the previous episode's (spec); the
    first episode is never a switch. Checked against the loop's policies across the engine's evaluation batches."""
    P, _, _, out, _, pis = hoeffding_vs_loop
    B = P.shape[0]
    want = np.zeros(out[1].shape, bool)
    for k in range(1, len(pis)):
        for b in range(B):
            want[k, b] = not np.array_equal(pis[k, b], pis[k - 1, b])
    assert np.array_equal(out[1], want)
    assert 0 < want.sum() < want.size


# ----------------------------------------------------------------------------- second mutation round


def _brute_force_values(P, R):
    """V*_1(s_1 = 0) and the set of optimal actions, by plain loops over (h, s, a) (no vectorised code)."""
    B, H, S, A, _ = P.shape
    V = np.zeros((B, H + 1, S))
    Q = np.zeros((B, H, S, A))
    for b in range(B):
        for h in reversed(range(H)):
            for s in range(S):
                for a in range(A):
                    Q[b, h, s, a] = R[b, h, s, a] + sum(P[b, h, s, a, t] * V[b, h + 1, t] for t in range(S))
                V[b, h, s] = max(Q[b, h, s])
    return Q, V


def test_curves_bars_and_ratios_from_known_per_episode_regret(monkeypatch):
    """run() turns per-episode regrets and switch flags into the plotted curves, the doubling bars and the badge
    ratios. Fed a known stream (regret 1/k per episode, scaled per learner, gap group and seed; a switch in every
    episode) everything has a closed form: the curve is a harmonic number H_k, each bar a difference of two, and the
    switch increment ratio of a linear count is exactly 2. The arguments the learners get (V*_1, the optimal-action
    mask, ι) are checked against loops as well."""
    cfg = eng.Config(episodes=1600, n_seeds=3)
    K, H, S, A, n = cfg.episodes, cfg.horizon, cfg.n_states, cfg.n_actions, cfg.n_seeds
    P, R, _ = eng.make_mdps(cfg.family, [cfg.gap, cfg.gap2], n, S, A, H, eng.seed_everything(cfg.seed))
    Qb, Vb = _brute_force_values(P, R)
    scale = np.array([1.0, 2.0, 3.0])[:, None] * np.repeat([1.0, 5.0], n)[None] * np.tile(1 + 0.1 * np.arange(n), 2)
    k = np.arange(1, K + 1)[:, None]
    seen = {}

    def fake(algos, P_, R_, Vstar1, K_, c, iota, N0, rng, progress, span, best_mask, n_first):
        seen.update(Vstar1=Vstar1, iota=iota, N0=N0, best=best_mask)
        return [(scale[ai] / k, np.ones((K_, len(Vstar1)), bool), np.zeros((H, S)), None, None,
                 np.zeros(len(Vstar1))) for ai in range(len(algos))]

    monkeypatch.setattr(eng, "_run_algos", fake)
    res = eng.run(cfg)
    assert np.allclose(seen["Vstar1"], Vb[:, 0, 0], atol=1e-12)
    assert np.array_equal(seen["best"], np.isclose(Qb, Vb[:, :-1, :, None], atol=1e-12))
    assert seen["iota"] == pytest.approx(np.log(2 * S * A * K * H / 0.1))
    assert seen["N0"] == pytest.approx(cfg.ref_mult * cfg.bonus * S * A * H * H * seen["iota"])
    harmonic = np.cumsum(1.0 / np.arange(1, K + 1))          # H_k, k = 1..K
    mean_scale = scale.reshape(3, 2, n).mean(-1)           # (algorithm, gap group)
    assert np.allclose(res.regret, mean_scale[..., None] * harmonic[res.grid - 1][None, None])
    assert res.grid[0] == 1 and res.grid[-1] == K
    assert np.allclose(res.regret_seeds, scale.reshape(3, 2, n) * harmonic[-1])
    assert np.allclose(res.switches, res.grid[None, None].astype(float))
    ends = [12, 25, 50, 100, 200, 400, 800, 1600]
    assert res.doublings.tolist() == ends
    Hk = harmonic[np.array(ends) - 1]
    assert np.allclose(res.per_doubling, mean_scale[..., None] * np.diff(np.concatenate([[0.0], Hk])))
    m = res.metrics
    h = {q: harmonic[q - 1] for q in (K, K // 2, K // 4, K // 16)}
    for ai, tag in enumerate(eng.TAGS):
        for gi in range(2):
            sc = mean_scale[ai, gi]
            assert m[f"rho_{tag}_{gi}"] == pytest.approx(np.sqrt((h[K] - h[K // 4]) / (h[K // 4] - h[K // 16])))
            assert m[f"rho1_{tag}_{gi}"] == pytest.approx((h[K] - h[K // 2]) / (h[K // 2] - h[K // 4]))
            assert m[f"late_{tag}_{gi}"] == pytest.approx(sc * (h[K] - h[K // 4]))
            assert m[f"switches_{tag}_{gi}"] == K
            assert m[f"sw_incr_ratio_{tag}_{gi}"] == pytest.approx(2.0)
    assert m["gap_ratio_hoef"] == pytest.approx(5.0)         # gap2 = 0.1 < gap = 0.25: group 1 is the small gap
    assert m["regret_ratio_adv"] == pytest.approx(2.0) and m["regret_ratio_qes"] == pytest.approx(3.0)
    # the table's problem constants, from loops
    for gi, row in enumerate(res.table):
        sl = slice(gi * n, (gi + 1) * n)
        gaps = Vb[sl, :-1, :, None] - Qb[sl]
        dmin = [g[g > 1e-9].min() for g in gaps]
        assert row["Δ_min (seed mean)"] == pytest.approx(np.mean(dmin))
        assert row["log(SAT)/Δ_min"] == pytest.approx(np.log(S * A * K * H) / np.mean(dmin))
        assert row["ι"] == pytest.approx(seen["iota"]) and row["N_0"] == pytest.approx(seen["N0"])
        # the orders of the two bounds: H^6 S A log(SAT)/Δ_min (Hoeffding) and H^5 S A log(SAT)/Δ_min (advantage)
        assert row[eng.BOUND_HOEF] == pytest.approx(H**6 * S * A * np.log(S * A * K * H) / np.mean(dmin))
        assert row[eng.BOUND_ADV] == pytest.approx(H**5 * S * A * np.log(S * A * K * H) / np.mean(dmin))
        assert row[eng.TRIVIAL] == K * H


def test_conditional_variance_and_min_gap_against_loops():
    """The table's Δ_min and max conditional variance of V*_{h+1} (random MDPs, where both are non-trivial)."""
    P, R, _ = _tiny("random", seed=4, S=3, A=3, H=3)
    Qb, Vb = _brute_force_values(P, R)
    dmin, qvar = eng.gap_stats(*eng.value_iteration(P, R), P)
    B, H, S, A, _ = P.shape
    for b in range(B):
        var = [sum(P[b, h, s, a, t] * Vb[b, h + 1, t] ** 2 for t in range(S))
               - sum(P[b, h, s, a, t] * Vb[b, h + 1, t] for t in range(S)) ** 2
               for h in range(H) for s in range(S) for a in range(A)]
        assert qvar[b] == pytest.approx(max(var), abs=1e-12)
        g = Vb[b, :-1, :, None] - Qb[b]
        assert dmin[b] == pytest.approx(g[g > 1e-9].min(), abs=1e-12)
    assert np.all(qvar > 0)


def test_gap_groups_share_each_seeds_dynamics_and_best_actions():
    """The page's comparison of the two gaps is paired: seed j has the same transitions and the same best action in
    both gap groups; only the reward gap differs."""
    P, R, g = _tiny("gap", seed=6, S=4, A=3, H=3, gaps=(0.3, 0.1))
    n = len(P) // 2
    assert np.array_equal(P[:n], P[n:])
    assert np.array_equal(R[:n].argmax(-1), R[n:].argmax(-1))
    assert g.tolist() == [0.3] * n + [0.1] * n


def test_suboptimal_action_heatmap_replayed_from_the_loop_policies(hoeffding_vs_loop):
    """The heatmap: per (h, s), the share of suboptimal actions taken over the last 10 % of episodes (first gap
    group), replayed from the plain-loop learner's policies, the same uniforms and the optimal actions of Q*."""
    P, R, Vs, out, _, pis = hoeffding_vs_loop
    K, B, H, S = pis.shape
    Qb, Vb = _brute_force_values(P, R)
    U = np.random.default_rng(9).uniform(size=(K, H, B))
    sub, cnt = np.zeros((H, S)), np.zeros((H, S))
    for k in range(K - K // 10, K):
        for b in range(B):
            s = 0
            for h in range(H):
                a = pis[k, b, h, s]
                cnt[h, s] += 1
                sub[h, s] += Qb[b, h, s, a] < Vb[b, h, s] - 1e-9
                s = min(int(np.sum(np.cumsum(P[b, h, s, a])[:-1] <= U[k, h, b])), S - 1)
    want = np.where(cnt > 0, sub / np.maximum(cnt, 1), np.nan)
    np.testing.assert_allclose(out[2], want, atol=1e-12)
    assert np.nansum(sub) > 0


def test_random_family_start_value_and_table_from_loops(monkeypatch):
    """Random MDPs, where start states and seeds differ in V* and Δ_min: the learners are scored against V*_1 of the
    fixed start state s_1 = 0, and the table's Δ_min is the seed mean (checked against loops)."""
    cfg = eng.Config(family="random", episodes=1000, n_seeds=3)
    P, R, _ = eng.make_mdps("random", [np.nan, np.nan], 3, cfg.n_states, cfg.n_actions, cfg.horizon,
                            eng.seed_everything(cfg.seed))
    Qb, Vb = _brute_force_values(P, R)
    assert np.ptp(Vb[:, 0], axis=1).min() > 1e-6             # the start state matters here
    seen = {}

    def fake(algos, P_, R_, Vstar1, K, *rest):
        seen["Vstar1"] = Vstar1
        B = len(Vstar1)
        return [(np.ones((K, B)), np.zeros((K, B), bool), np.zeros(P.shape[1:3]), None, None, np.zeros(B))
                for _ in algos]

    monkeypatch.setattr(eng, "_run_algos", fake)
    res = eng.run(cfg)
    np.testing.assert_allclose(seen["Vstar1"], Vb[:, 0, 0], atol=1e-12)
    for gi, row in enumerate(res.table):
        gaps = Vb[3 * gi:3 * gi + 3, :-1, :, None] - Qb[3 * gi:3 * gi + 3]
        dmin = [g[g > 1e-9].min() for g in gaps]
        assert np.ptp(dmin) > 0 and row["Δ_min (seed mean)"] == pytest.approx(np.mean(dmin))


def _loop_q_earlysettled(P, R, K, c, iota, U):
    """Q-EarlySettled-Advantage (Li, Shi, Chen, Gu & Chi 2021) in plain loops, one MDP and one visit at a time, with
    every bonus scaled by c as in the engine. Returns final Q, Q^UCB, Q^LCB, V^LCB, the per-episode greedy policies
    and, per MDP, the share of visits whose new Q came strictly from the reference-advantage estimate."""
    B, H, S, A, _ = P.shape
    out = {k: np.zeros((B, H, S, A)) for k in ("Q", "Qu", "Ql")}
    out["Vl"] = np.zeros((B, H + 1, S))
    pis = np.zeros((K, B, H, S), dtype=int)
    share = np.zeros(B)
    for b in range(B):
        q, qu, qr = (np.full((H, S, A), float(H)) for _ in range(3))
        ql = np.zeros((H, S, A))
        v, vref = np.full((H + 1, S), float(H)), np.full((H + 1, S), float(H))
        v[H] = vref[H] = 0.0
        vl = np.zeros((H + 1, S))
        settled = np.zeros((H, S), bool)
        n = np.zeros((H, S, A), int)
        ref_sum, ref_sq, adv_mu, adv_sq, b_prev = (np.zeros((H, S, A)) for _ in range(5))
        upd = won = 0
        for k in range(K):
            pis[k, b] = q.argmax(-1)
            s = 0
            for h in range(H):
                a = int(pis[k, b, h, s])
                s2 = _next_state(P[b, h, s, a], U[k, h, b])
                r = R[b, h, s, a]
                n[h, s, a] += 1
                t = n[h, s, a]
                eta = (H + 1) / (H + t)
                bonus = c * np.sqrt(H ** 3 * iota / t)
                qu[h, s, a] += eta * (r + v[h + 1, s2] + bonus - qu[h, s, a])
                ql[h, s, a] += eta * (r + vl[h + 1, s2] - bonus - ql[h, s, a])
                adv = v[h + 1, s2] - vref[h + 1, s2]
                ref_sum[h, s, a] += vref[h + 1, s2]
                ref_sq[h, s, a] += vref[h + 1, s2] ** 2
                mean_ref = ref_sum[h, s, a] / t
                adv_mu[h, s, a] += eta * (adv - adv_mu[h, s, a])
                adv_sq[h, s, a] += eta * (adv * adv - adv_sq[h, s, a])
                sd_ref = np.sqrt(max(ref_sq[h, s, a] / t - mean_ref ** 2, 0.0))
                sd_adv = np.sqrt(max(adv_sq[h, s, a] - adv_mu[h, s, a] ** 2, 0.0))
                b_new = c * np.sqrt(iota / t) * (sd_ref + np.sqrt(H) * sd_adv)
                b_ref = b_new + (1 - eta) / eta * (b_new - b_prev[h, s, a]) + c * H * H * iota ** 0.75 / t ** 0.75
                b_prev[h, s, a] = b_new
                qr[h, s, a] += eta * (r + adv + mean_ref + b_ref - qr[h, s, a])
                upd += 1
                won += qr[h, s, a] < min(qu[h, s, a], q[h, s, a])
                q[h, s, a] = min(qr[h, s, a], qu[h, s, a], q[h, s, a])
                v[h, s] = q[h, s].max()
                vl[h, s] = max(ql[h, s].max(), vl[h, s])
                if not settled[h, s]:
                    vref[h, s] = v[h, s]
                    settled[h, s] = v[h, s] - vl[h, s] <= 1.0
                s = s2
        out["Q"][b], out["Qu"][b], out["Ql"][b], out["Vl"][b] = q, qu, ql, vl
        share[b] = won / upd
    return out, pis, share


@pytest.mark.parametrize("family,c,iota", [("gap", 1.0, 1.0), ("random", 0.3, 2.0)])
def test_q_earlysettled_matches_loop_reference(family, c, iota):
    """The vectorised Q-EarlySettled-Advantage equals the plain-loop transcription: final Q, Q^UCB, Q^LCB, V^LCB,
    every episode's exact regret, and the share of updates set by the reference-advantage estimate (the number the
    page's info box quotes)."""
    P, R, _ = _tiny(family, seed=8, S=2, A=2, H=3)
    Qs, Vs = eng.value_iteration(P, R)
    K, H = 1500, 3
    out = eng._run_algo("Q-EarlySettled-Advantage", P, R, Vs[:, 0, 0], K, c, iota, 1.0, np.random.default_rng(12),
                        None, (0, 1), Qs >= Vs[:, :-1, :, None] - 1e-9, 2)
    U = np.random.default_rng(12).uniform(size=(K, H, len(P)))
    ref, pis, share = _loop_q_earlysettled(P, R, K, c, iota, U)
    Qu, Ql, _, Vl = out[5]
    np.testing.assert_allclose(out[3], ref["Q"], atol=1e-9)
    np.testing.assert_allclose(Qu, ref["Qu"], atol=1e-9)
    np.testing.assert_allclose(Ql, ref["Ql"], atol=1e-9)
    np.testing.assert_allclose(Vl, ref["Vl"], atol=1e-9)
    np.testing.assert_allclose(out[0], Vs[:, 0, 0][None] - eng.evaluate_policies(P, R, pis), atol=1e-9)
    np.testing.assert_allclose(out[-1], share, atol=1e-12)
    assert np.all(share > 0)


# ----------------------------------------------------------------------------- what the page draws and quotes


def test_page_draws_only_the_picked_learner_with_each_groups_own_curve(default_result):
    """Only UCB-Advantage picked under *Algorithms drawn*: the regret chart holds its curves (one per MDP group,
    each that group's regret, plus the two dashed references), and the one suboptimal-visit map is its own."""

    r = default_result
    at = open_page("gap_dependent_q", seed=(("engine.gap_dependent_q", eng.Config(), default_result),))
    at.multiselect(key="gap-dependent-q:algorithms").set_value(["UCB-Advantage"]).run()
    assert not at.exception, [e.value for e in at.exception]
    figs = figures(at)
    ai = eng.ALGOS.index("UCB-Advantage")
    curves = [d for d in figs["regret"]["data"] if not d["name"].startswith("∝")]
    assert len(curves) == r.regret.shape[1]
    for gi, d in enumerate(curves):
        assert d["name"].startswith("UCB-Advantage, ")
        np.testing.assert_allclose(values(d["y"]), r.regret[ai, gi], err_msg=d["name"])
    maps = [k for k in figs if k.startswith("subopt")]
    assert maps == [f"subopt{ai}"]
    z = values(figs[maps[0]]["data"][0]["z"])
    np.testing.assert_array_equal(np.isnan(z), np.isnan(r.subopt_visits[ai]))
    np.testing.assert_allclose(z[~np.isnan(z)], r.subopt_visits[ai][~np.isnan(z)])


def test_bound_rows_at_default_and_the_page_caption(default_result):
    """At the default every measured regret stays under the trivial bound T = KH (at most H per episode), the two
    bound orders are a factor H apart and both exceed T, and the page's caption says which of its two sentences
    holds."""
    from tests.pagetext import open_page

    cfg, res = eng.Config(), default_result
    T = cfg.episodes * cfg.horizon
    for row in res.table:
        assert row[eng.TRIVIAL] == T
        assert row[eng.BOUND_HOEF] == pytest.approx(cfg.horizon * row[eng.BOUND_ADV])
        assert row[eng.BOUND_ADV] > T
        for name in eng.ALGOS:
            assert 0 <= row[f"final regret {name}"] <= T
    assert res.metrics["bound_orders_above_T"] == 1.0
    # at a long run on the smallest MDPs with the largest gaps the order falls below T, and the metric says so
    small = eng.run(eng.Config(n_states=2, n_actions=2, horizon=2, episodes=20_000, gap=0.5, gap2=0.4, n_seeds=1))
    assert all(row[eng.BOUND_ADV] < row[eng.TRIVIAL] for row in small.table)
    assert small.metrics["bound_orders_above_T"] == 0.0
    at = open_page("gap_dependent_q", seed=(("engine.gap_dependent_q", cfg, res),))
    captions = " ".join(c.value for c in at.caption)
    assert "already exceeds the trivial bound T = KH for every group" in captions
    table = next(d.value for d in at.dataframe if eng.BOUND_ADV in d.value.index)
    assert eng.BOUND_HOEF in table.index and eng.TRIVIAL in table.index


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_every_badge_is_read_from_the_first_gap_groups_curves(default_result):
    """Each badge says it is measured at the first gap (Δ = 0.25 at the default): recompute every measured
    value from the plotted seed-mean curves (regret and switches at K, K/2, K/4, K/16 of the first group;
    late regret of both groups for the 1/Δ badges) and compare. Catches a ratio computed on the other gap
    group (the fake streams of the closed-form test are identical across groups, cannot tell them apart)."""
    r = default_result
    K = int(r.grid[-1])

    def at(arr, ai, gi, k):
        return float(arr[ai, gi, np.searchsorted(r.grid, k)])

    R = {(ai, gi, q): at(r.regret, ai, gi, K // q)
         for ai in range(3) for gi in range(2) for q in (1, 2, 4, 16)}
    Sw = {(ai, q): at(r.switches, ai, 0, K // q) for ai in range(3) for q in (1, 2, 4)}
    small, large = int(np.argmin(r.gaps)), int(np.argmax(r.gaps))
    assert large == 0                                     # the default's first group is the larger gap
    want = []
    for ai in range(3):
        want.append(np.sqrt((R[ai, 0, 1] - R[ai, 0, 4]) / (R[ai, 0, 4] - R[ai, 0, 16])))
    for ai in range(3):
        want.append((R[ai, small, 1] - R[ai, small, 4]) / (R[ai, large, 1] - R[ai, large, 4]))
    for ai in (1, 2):
        want.append(R[ai, 0, 1] / R[0, 0, 1])
    want.append(Sw[1, 1] / Sw[0, 1])
    want.append((Sw[1, 1] - Sw[1, 2]) / (Sw[1, 2] - Sw[1, 4]))
    got = [c.measured for c in eng.claims(r)]
    assert got == pytest.approx(want, rel=1e-9)
    # the groups really differ at the default, so reading the wrong one would change the badges
    assert abs(at(r.switches, 1, 1, K) / at(r.switches, 0, 1, K) - want[-2]) > 0.01


def test_switch_increment_ratio_is_floored_at_one_switch():
    """With the theory's bonus c = 1 UCB-Advantage switches about once in all, so the last two doublings add
    (almost) nothing: the increment ratio divides by at least one switch and stays finite (it used to read 1e9
    and fail); the detail quotes the total."""
    r = eng.run(eng.Config(bonus=1.0))
    m = r.metrics
    assert np.isfinite(m["sw_incr_ratio_adv_0"]) and m["sw_incr_ratio_adv_0"] <= 1.0
    badge = next(c for c in eng.claims(r) if c.label == "switch increment, last / previous doubling")
    assert badge.passed and f"switched {m['switches_adv_0']:.1f} times" in badge.detail
