"""MAD-TD: claim at the default config and independent checks."""

import numpy as np
import pytest
import scipy.linalg
import torch

from engine import mad_td as eng
from tests.pagetext import chart_traces, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_at_default(default_result):
    claims = eng.claims(default_result)
    assert len(claims) == 3
    # the spec's plain ReLU critic by default (the official LayerNorm + Mish body is over the 3 s budget here)
    assert eng.Config().critic == "relu"
    m = default_result.metrics
    # Claim 1 (fixed-policy evaluation, on-policy error): model data cuts the on-policy error by its 2x bar (ratios
    # real-only / MAD-TD at seeds 0-4: 2.97, 2.34, 6.15, 5.89, 2.68; see test_on_policy_effect_across_seeds).
    assert claims[0].measured == m["ratio_real_mad"] and claims[0].passed, claims[0].describe()
    # Claims 2-3 are the (#8), measured in the actor-critic loop: less overestimation at the current actor's
    # actions and more stable returns of the current policy with model data (ratios <= 0.5, fixed before measuring).
    # They do NOT reproduce: ratios at seeds 0-4 0.68, 1.13, 0, 0, 1.21 (overestimation) and 0.68, 0.87, 0, 0, 1.25
    # (worst regret); the passes at seeds 2-3 (ratio 0) come from at least half of the real-only actors becoming
    # unstable, not from a working actor (the diagnosis below). Only their bookkeeping and the robust parts are
    # asserted here.
    assert m["real_over"] > 0                                  # the real-only critic does overestimate at π_K(s)
    assert np.isclose(claims[1].measured, eng._ratio(m["mad_over"], m["real_over"]))
    assert np.isclose(claims[2].measured, eng._ratio(m["mad_regret"], m["real_regret"]))
    assert claims[1].passed == (claims[1].measured <= 0.5) and claims[2].passed == (claims[2].measured <= 0.5)
    # unstable actors, seeds 0-4: real-only 25/25/75/50/0 %, MAD-TD 0/25/25/0/0 %; MAD-TD <= real-only each time
    assert m["mad_diverged"] <= m["real_diverged"]
    # The diagnosis the page gives (checked independently in test_slope_and_action_gap_diagnostics): the actor follows
    # the critic's slope dQ/da at its actions, and in both variants that slope's RMS error is about the size of the true
    # slope or larger, with either critic body (ReLU, seeds 0/1/2: 1.45 vs 1.25, 1.43 vs 1.27, 4.24 vs 4.17 real-only;
    # 1.53 vs 1.50, 1.61 vs 1.44, 2.11 vs 1.74 MAD-TD), so neither actor gets a usable gradient ...
    for name in ("real", "mad"):
        assert m[f"{name}_slope_err"] > 0.8 * m[f"{name}_slope_true"] > 0, name
    # ... and the actors' actions stay nearer the logged ones (0.42 / 0.31) than the fixed pi* of claim 1 (1.09)
    assert m["eval_act_gap"] > 1.5 * max(m["real_act_gap"], m["mad_act_gap"])
    for key, r in default_result.worst_regret.items():         # J* is optimal: no actor beats it
        assert np.all(r[np.isfinite(r)] > -1e-9), key


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_on_policy_effect_across_seeds(seed, default_result):
    # seed 0 is the default fixture. With the default ReLU critic claim 1 holds at seeds 0-4 (ratios real-only /
    # MAD-TD 2.97, 2.34, 6.15, 5.89, 2.68; the smallest margin at seed 1).
    r = eng.run(eng.Config(seed=seed))
    c = eng.claims(r)[0]
    assert c.passed and r.metrics["mad_final"] < r.metrics["real_final"], c.describe()


def test_on_policy_claim_with_the_official_critic_body(default_result):
    # With the official LayerNorm + Mish body, model data still lowers the on-policy RMSE, but the normalised real-only
    # critic misgeneralises less, so the ratio misses the 2x bar at seeds 0-2 (1.88, 1.59, 1.49; 2.15, 2.47 at seeds
    # 3-4), below the ReLU critic's at each of these seeds. The page says so when that critic is chosen.
    r = eng.run(eng.Config(critic="ln-mish"))
    m = r.metrics
    assert 1.3 < m["ratio_real_mad"] < default_result.metrics["ratio_real_mad"]
    assert not eng.claims(r)[0].passed                        # the page's caveat: it misses the 2x bar (seed 0)
    assert m["mad_final"] < m["real_final"]


@pytest.fixture(scope="module")
def sweep_seed0():
    """The sweep at the default sizes and seed 0 (about 7 s), shared by the sweep tests."""
    return eng.run(eng.Config(sweep=True))


def test_sweep_claims(sweep_seed0):
    res = sweep_seed0
    claims = eng.claims(res)
    assert len(claims) == 6
    # With the default ReLU critic, more updates per sample hurt the real-only critic (RMSE ratio UTD 8 / UTD 2 at
    # seeds 0/1/2: 2.03, 1.34, 4.74) and not the MAD-TD one (0.47, 0.45, 0.50). With the LayerNorm + Mish critic the
    # real-only ratio was 0.87 at seed 0 (no harm) and MAD-TD's 0.67.
    assert claims[3].measured == res.metrics["real_utd_ratio"] and claims[3].passed, claims[3].describe()
    assert claims[4].passed, claims[4].describe()
    # claims[5] (noisy model >= 1.3x the good one): see test_caveat_on_the_noisy_model_badge_across_seeds


def test_sweep_at_utd_one_reads_higher_over_lower():
    """At UTD 1 the sweep's partner is UTD 2, the higher one: the ratio must still be higher UTD over lower."""
    res = eng.run(eng.Config(sweep=True, utd=1, env_steps=100, n_seeds=2, width=16))
    med = {k: float(np.median(v)) for k, v in res.final.items()}
    assert res.metrics["real_utd_ratio"] == pytest.approx(med["real only @ UTD 2"] / med["real only @ UTD 1"])
    assert res.metrics["mad_utd_ratio"] == pytest.approx(med["MAD-TD @ UTD 2"] / med["MAD-TD @ UTD 1"])
    labels = [c.label for c in eng.claims(res)]
    assert "real-only RMSE, UTD 2 / UTD 1" in labels and "MAD-TD RMSE, UTD 2 / UTD 1" in labels
    # at UTD 2 there is no UTD pair, but the noisy-model variant still runs and its badge is shown
    at2 = eng.claims(eng.run(eng.Config(sweep=True, utd=2, env_steps=100, n_seeds=2, width=16)))
    assert [c.label for c in at2][-1] == "RMSE noisy model / good model"
    assert not any("UTD 2 /" in c.label for c in at2)


def test_noisy_main_model_is_compared_with_a_good_model_not_with_itself():
    """With 'noisy' chosen as the model, the main MAD-TD run is the noisy one; the sweep must then add the good
    (noise-free least-squares) model, not a second noisy run (which made the badge noisy / noisy, about 1). The good
    variant is checked against an independent run with the least-squares model chosen outright."""
    small = dict(env_steps=100, n_seeds=2, width=16)
    noisy = eng.run(eng.Config(model="noisy", sweep=True, **small))
    plain = eng.run(eng.Config(model="lstsq", sweep=False, **small))
    u = eng.Config().utd
    good = noisy.final[f"{eng.GOOD_MODEL} @ UTD {u}"]
    assert f"{eng.NOISY_MODEL} @ UTD {u}" not in noisy.final
    np.testing.assert_array_equal(good, plain.final[f"MAD-TD @ UTD {u}"])
    assert not np.array_equal(good, noisy.final[f"MAD-TD @ UTD {u}"])
    assert noisy.metrics["noisy_ratio"] == pytest.approx(float(np.median(noisy.final[f"MAD-TD @ UTD {u}"]))
                                                         / float(np.median(good)))


@pytest.mark.parametrize("arch", ["ln-mish", "relu"])
def test_variants_of_a_seed_share_initial_weights(arch):
    crit = eng.Critics(6, 8, np.random.default_rng(0), share=2, arch=arch)
    assert np.array_equal(crit.flat[0], crit.flat[1]) and np.array_equal(crit.flat[4], crit.flat[5])
    assert not np.array_equal(crit.flat[1], crit.flat[2])


def test_variants_are_paired():
    cfg = eng.Config(utd=1, env_steps=100, n_seeds=2, width=16)
    variants = [("real", 0.0, 0.0, False), ("mad", 0.25, 0.0, False), ("real ac", 0.0, 0.0, True),
                ("mad ac", 0.25, 0.0, True)]
    out = eng.train(cfg, 1, variants, np.random.default_rng(1), keep=True)
    S, A = out["S"], out["A"]
    for seed in range(2):
        v = 4 * seed
        assert np.array_equal(S[v], S[v + 1]) and np.array_equal(A[v], A[v + 1])      # evaluation: same data
        # the actors start equal (K_b) and first move after the warm-up: identical data until then
        assert np.array_equal(S[v + 2, :eng.WARMUP], S[v + 3, :eng.WARMUP])
        assert np.array_equal(A[v + 2, :eng.WARMUP], A[v + 3, :eng.WARMUP])
        assert np.array_equal(S[v, :eng.WARMUP], S[v + 2, :eng.WARMUP])              # same starts and noise
        assert np.allclose(A[v + 2, :eng.WARMUP] - A[v, :eng.WARMUP], 0)             # K_b acts in both
        assert not np.array_equal(A[v + 2], A[v + 3])                                # then the actors differ
    assert not np.array_equal(S[0], S[4])                                            # seeds have own streams
    K = out["gain"]
    assert np.allclose(K[:, :2], out["K_star"])                                      # evaluated policy fixed
    assert np.allclose(K[:, 2:, 0], eng.K_B) and not np.allclose(K[:, 2:, -1], eng.K_B)


@pytest.mark.parametrize("arch", ["ln-mish", "relu"])
def test_actor_gradient_against_finite_differences(arch):
    rng = np.random.default_rng(5)
    crit = eng.Critics(3, 16, rng, arch=arch)
    s = rng.uniform(-1, 1, (3, 12, 2))
    K = rng.normal(size=(3, 2))
    g = eng.actor_grad(crit, s, K)

    def loss(Kx):
        return -crit.q(s, -np.einsum("vni,vi->vn", s, Kx)).astype(np.float64).mean(1)

    eps = 1e-3
    fd = np.stack([(loss(K + eps * e) - loss(K - eps * e)) / (2 * eps) for e in np.eye(2)], -1)
    # float32 critic and ReLU kinks: compare directions and magnitudes loosely
    cos = np.einsum("vi,vi->v", g, fd) / (np.linalg.norm(g, axis=1) * np.linalg.norm(fd, axis=1))
    assert np.all(cos > 0.99) and np.allclose(g, fd, atol=5e-3)
    # the closed-form version: finite differences of the true Q^K with P held fixed, and zero at the optimum
    gamma = 0.9
    P, ok = eng.policy_value_matrices(K, gamma)
    Kst, _ = eng.lqr_gain(gamma)
    Kp = np.tile(Kst, (3, 1))
    Pp, _ = eng.policy_value_matrices(Kp, gamma)
    for Kx, Px in ((K[ok], P[ok]), (Kp, Pp)):
        sx = s[: len(Kx)]
        gt = eng.true_actor_grad(sx, Kx, Px, gamma)

        def tloss(Ky, sx=sx, Px=Px):
            return -eng.q_from_P(sx, -np.einsum("vni,vi->vn", sx, Ky), Px, gamma).mean(1)

        fdt = np.stack([(tloss(Kx + eps * e) - tloss(Kx - eps * e)) / (2 * eps) for e in np.eye(2)], -1)
        assert np.allclose(gt, fdt, atol=1e-6)
    assert np.allclose(eng.true_actor_grad(s, Kp, Pp, gamma), 0, atol=1e-9)


def test_batched_policy_values_against_scipy():
    gamma = 0.9
    Ks = np.array([eng.K_B, [1.0, 0.5], [0.2, 2.0], [-5.0, -5.0]])
    P, ok = eng.policy_value_matrices(Ks, gamma)
    assert ok.tolist() == [True, True, True, False]
    assert np.all(np.isneginf(eng.policy_return(Ks, gamma)[~ok]))
    for K, Pk in zip(Ks[ok], P[ok]):
        Acl = eng.A_DYN - eng.B_DYN @ K[None]
        assert np.max(np.abs(np.linalg.eigvals(np.sqrt(gamma) * Acl))) < 1
        Pl = scipy.linalg.solve_discrete_lyapunov(np.sqrt(gamma) * Acl.T, eng.Q_C + eng.R_C * np.outer(K, K))
        assert np.allclose(Pk, Pl, atol=1e-9)


def test_linear_policy_q_and_return_against_monte_carlo():
    """Q^K of a non-optimal linear policy (the starting actor K_b) and its expected return J(K) from uniform starts."""
    gamma, K, n, H = 0.9, eng.K_B, 20000, 150
    P, _ = eng.policy_value_matrices(K, gamma)
    rng = np.random.default_rng(8)
    s0, a0 = np.array([0.6, -0.8]), 0.4
    s = np.broadcast_to(s0, (n, 2)).copy()
    a = np.full(n, a0)
    ret = np.zeros(n)
    for t in range(H):
        ret += gamma**t * eng.reward(s, a)
        s = s @ eng.A_DYN.T + a[:, None] * eng.B_DYN[:, 0] + rng.normal(0, eng.W_STD, (n, 2))
        a = -s @ K
    q = eng.q_from_P(s0[None], np.array([a0]), P, gamma)[0]
    assert abs(ret.mean() - q) < 4 * ret.std() / np.sqrt(n) + 1e-3
    s = rng.uniform(-1, 1, (n, 2))
    ret = np.zeros(n)
    for t in range(H):
        a = -s @ K
        ret += gamma**t * eng.reward(s, a)
        s = s @ eng.A_DYN.T + a[:, None] * eng.B_DYN[:, 0] + rng.normal(0, eng.W_STD, (n, 2))
    assert abs(ret.mean() - eng.policy_return(K, gamma)) < 4 * ret.std() / np.sqrt(n) + 1e-3


def test_gain_and_policy_value_against_scipy():
    gamma = 0.9
    K, P = eng.lqr_gain(gamma)
    g = np.sqrt(gamma)
    Pd = scipy.linalg.solve_discrete_are(g * eng.A_DYN, g * eng.B_DYN, eng.Q_C, np.array([[eng.R_C]]))
    Kd = gamma * np.linalg.solve(eng.R_C + gamma * eng.B_DYN.T @ Pd @ eng.B_DYN, eng.B_DYN.T @ Pd @ eng.A_DYN)[0]
    assert np.allclose(K, Kd, atol=1e-8)
    Acl = eng.A_DYN - eng.B_DYN @ K[None]
    Pl = scipy.linalg.solve_discrete_lyapunov(g * Acl.T, eng.Q_C + eng.R_C * np.outer(K, K))
    assert np.allclose(eng.policy_value_matrix(K, gamma), Pl, atol=1e-8)
    assert np.allclose(Pl, Pd, atol=1e-6)   # the optimal policy's value is the Riccati solution


def test_q_closed_form_against_monte_carlo():
    gamma = 0.9
    K, _ = eng.lqr_gain(gamma)
    rng = np.random.default_rng(0)
    s0 = np.array([0.7, -0.4])
    a0 = 0.9
    n = 10000
    s = np.broadcast_to(s0, (n, 2)).copy()
    a = np.full(n, a0)
    ret = np.zeros(n)
    disc = 1.0
    for _ in range(100):
        ret += disc * eng.reward(s, a)
        s = s @ eng.A_DYN.T + a[:, None] * eng.B_DYN[:, 0] + rng.normal(0, eng.W_STD, (n, 2))
        a = -s @ K
        disc *= gamma
    q = eng.q_true(s0[None], np.array([a0]), K, gamma)[0]
    assert abs(ret.mean() - q) < 4 * ret.std() / np.sqrt(n) + 1e-3


def test_models_are_recovered():
    rng = np.random.default_rng(2)
    S = rng.uniform(-1, 1, (200, 2))
    A = rng.normal(size=200)
    S2 = S @ eng.A_DYN.T + A[:, None] * eng.B_DYN[:, 0] + rng.normal(0, eng.W_STD, (200, 2))
    W, wr = eng.fit_model(S, A, eng.reward(S, A), S2)
    assert np.allclose(W[:2].T, eng.A_DYN, atol=1e-2) and np.allclose(W[2], eng.B_DYN[:, 0], atol=2e-2)
    assert np.allclose(eng.reward_features(S, A) @ wr, eng.reward(S, A), atol=1e-6)


def test_batch_composition():
    rng = np.random.default_rng(3)
    K, _ = eng.lqr_gain(0.9)
    V, N = 3, 64
    s = rng.normal(size=(V, N, 2))
    a = rng.normal(size=(V, N))
    r = rng.normal(size=(V, N))
    s2 = rng.normal(size=(V, N, 2))
    W = np.broadcast_to(np.concatenate([eng.A_DYN.T, eng.B_DYN.T]), (V, 3, 2))
    wr = np.broadcast_to(np.array([-1, -0.1, -eng.R_C, 0, 0, 0.0]), (V, 6))
    n_model = np.array([0, 3, 32])
    a2, r2, s22 = eng.make_batch(s, a, r, s2, n_model, K, (W, wr), np.zeros(V), rng)
    assert np.array_equal(a2[0], a[0]) and np.array_equal(r2[0], r[0]) and np.array_equal(s22[0], s2[0])
    for v, k in enumerate(n_model):
        assert np.allclose(a2[v, :k], -s[v, :k] @ K)
        assert np.array_equal(a2[v, k:], a[v, k:])
        assert np.allclose(r2[v, :k], eng.reward(s[v, :k], a2[v, :k]))
        assert np.allclose(s22[v, :k], s[v, :k] @ eng.A_DYN.T + a2[v, :k, None] * eng.B_DYN[:, 0])
    assert int(round(0.05 * eng.BATCH)) == 3
    # actor-critic: each critic's model rows use its own current actor
    Kv = rng.normal(size=(V, 2))
    a3, _, _ = eng.make_batch(s, a, r, s2, n_model, Kv, (W, wr), np.zeros(V), rng)
    for v, k in enumerate(n_model):
        assert np.allclose(a3[v, :k], -s[v, :k] @ Kv[v])


@pytest.mark.parametrize("arch", ["ln-mish", "relu"])
def test_critic_gradients_match_autograd_and_target_is_polyak(arch):
    """Hand-written parameter gradients and action slopes dQ/da against torch autograd (float64) on random inputs."""
    rng = np.random.default_rng(4)
    crit = eng.Critics(2, 8, rng, arch=arch)
    crit.flat += rng.normal(0, 0.3, crit.flat.shape).astype(np.float32)   # LayerNorm gains/biases away from 1 / 0
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    dq = rng.normal(size=(2, 5)).astype(np.float32)
    q, cache = crit.forward(crit.p, x)
    g = crit.grads(cache, dq)
    dqda = crit.action_grad(x[..., :2], x[..., 2])[..., 0]
    flat = torch.tensor(crit.flat.astype(np.float64), requires_grad=True)
    views = [flat[:, a:b].reshape((2,) + sh) for a, b, sh in zip(crit.offsets[:-1], crit.offsets[1:], crit.shapes)]
    if arch == "relu":
        W1, b1, W2, b2, W3, b3 = views
        layers = [(W1, b1, None, None), (W2, b2, None, None)]
    else:
        W1, b1, g1, c1, W2, b2, g2, c2, W3, b3 = views
        layers = [(W1, b1, g1, c1), (W2, b2, g2, c2)]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = xt
    for W, b, gain, bias in layers:
        z = h @ W + b[:, None]
        if arch == "relu":
            h = torch.relu(z)
        else:
            z = torch.nn.functional.layer_norm(z, z.shape[-1:], eps=eng.LN_EPS)
            h = torch.nn.functional.mish(z * gain[:, None] + bias[:, None])
    qt = (h @ W3 + b3[:, None])[..., 0]
    dq_dx, = torch.autograd.grad(qt.sum(), xt, retain_graph=True)
    (qt * torch.tensor(dq, dtype=torch.float64)).sum().backward()
    assert np.allclose(q, qt.detach().numpy(), atol=1e-5)
    assert np.allclose(g, flat.grad.numpy(), atol=1e-4)
    assert np.allclose(dqda, dq_dx[..., 2].numpy(), atol=1e-5)          # the slope the actor follows
    old_t = crit.tflat.copy()
    crit.step(g)
    assert np.allclose(crit.tflat, 0.99 * old_t + 0.01 * crit.flat, atol=1e-6)


def test_mish_against_torch():
    z = np.linspace(-30, 30, 601).astype(np.float32)
    y, cache = eng.mish(z.copy())
    zt = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    yt = torch.nn.functional.mish(zt)
    yt.sum().backward()
    assert np.allclose(y, yt.detach().numpy(), atol=1e-5)
    assert np.allclose(eng.mish_grad(cache), zt.grad.numpy(), atol=1e-5)


def test_too_expensive_settings_are_rejected_with_a_message():
    with pytest.raises(ValueError, match="would take about"):
        eng.Config(utd=32, env_steps=600, n_seeds=8, width=128, sweep=True)
    eng.Config(sweep=True)   # the sweep at default sizes is allowed


def test_true_action_slope_against_finite_differences():
    """dQ^K/da from the closed form, against finite differences of Q^K built from scipy's Lyapunov solution."""
    gamma = 0.9
    rng = np.random.default_rng(6)
    Ks = np.array([eng.K_B, [1.0, 0.5]])
    s = rng.uniform(-1, 1, (2, 7, 2))
    a = rng.normal(size=(2, 7))
    P, _ = eng.policy_value_matrices(Ks, gamma)
    slope = eng.true_action_grad(s, a, P, gamma)
    for v, K in enumerate(Ks):
        Acl = eng.A_DYN - eng.B_DYN @ K[None]
        Pl = scipy.linalg.solve_discrete_lyapunov(np.sqrt(gamma) * Acl.T, eng.Q_C + eng.R_C * np.outer(K, K))

        def q(aa, v=v, Pl=Pl):
            m = s[v] @ eng.A_DYN.T + aa[:, None] * eng.B_DYN[:, 0]
            return -(np.einsum("ni,ij,nj->n", s[v], eng.Q_C, s[v]) + eng.R_C * aa**2
                     + gamma * np.einsum("ni,ij,nj->n", m, Pl, m))

        fd = (q(a[v] + 1e-5) - q(a[v] - 1e-5)) / 2e-5
        assert np.allclose(slope[v], fd, atol=1e-6)


def test_slope_and_action_gap_diagnostics():
    """The recorded diagnostics at the last checkpoint, recomputed from the returned critic, data and actors."""
    cfg = eng.Config(utd=2, env_steps=100, n_seeds=2, width=16)
    variants = [("real", 0.0, 0.0, False), ("real ac", 0.0, 0.0, True), ("mad ac", 0.25, 0.0, True)]
    out = eng.train(cfg, 2, variants, np.random.default_rng(3), keep=True)
    crit, S, A = out["crit"], out["S"], out["A"]
    K = out["K"].reshape(-1, 2)
    E = np.broadcast_to(out["eval_s"], (len(K),) + out["eval_s"].shape)     # the slope is taken on these states
    ap = -np.einsum("vni,vi->vn", E, K)
    eps = 1e-2                                          # float32 critic: a wide step; ReLU kinks make it approximate
    fd = (crit.q(E, ap + eps).astype(np.float64) - crit.q(E, ap - eps).astype(np.float64)) / (2 * eps)
    for v, Kv in enumerate(K):
        seed, vi = divmod(v, 3)
        assert np.isclose(out["act_gap"][seed, vi, -1], np.abs(A[v] - (-S[v] @ Kv)).mean())   # on the buffer
        Acl = eng.A_DYN - eng.B_DYN @ Kv[None]
        if np.max(np.abs(np.linalg.eigvals(np.sqrt(cfg.gamma) * Acl))) >= 1:
            assert np.isnan(out["slope_err"][seed, vi, -1])
            continue
        Pl = scipy.linalg.solve_discrete_lyapunov(np.sqrt(cfg.gamma) * Acl.T, eng.Q_C + eng.R_C * np.outer(Kv, Kv))
        m = E[v] @ eng.A_DYN.T + ap[v][:, None] * eng.B_DYN[:, 0]
        true = -(2 * eng.R_C * ap[v] + 2 * cfg.gamma * m @ Pl @ eng.B_DYN[:, 0])
        assert np.isclose(out["slope_true"][seed, vi, -1], np.sqrt(np.mean(true**2)), rtol=1e-6)
        assert np.isclose(out["slope_err"][seed, vi, -1], np.sqrt(np.mean((fd[v] - true) ** 2)), rtol=0.05, atol=1e-3)
    assert np.allclose(out["slope_true"][:, 0], 0, atol=1e-9)   # the fixed pi* = -K* s is optimal: zero true slope


def test_caveat_on_the_noisy_model_badge_across_seeds(sweep_seed0):
    """The page's caveat: in the sweep the noisy-model badge passes at seeds 0-2, narrowly at seed 0 (1.38; 1.71 and
    1.81 at seeds 1 and 2)."""
    got = []
    for seed in (0, 1, 2):
        r = sweep_seed0 if seed == 0 else eng.run(eng.Config(sweep=True, seed=seed))
        (c,) = [c for c in eng.claims(r) if c.label.startswith("RMSE noisy")]
        got.append((c.passed, round(c.measured, 2)))
    assert all(p for p, _ in got) and got[0][1] < 1.45 < min(got[1][1], got[2][1]), got


def test_model_rows_at_the_buffer_action_lose_the_effect(default_result, monkeypatch):
    """The spec's negative control for claim 1: model transitions generated at the LOGGED action (Dyna-style
    augmentation) instead of at π(s) add nothing about the unobserved on-policy actions, so the on-policy error is
    no better than with real data only (the ratio falls to about 1), while the intact MAD-TD rows move it.
    Measured at the default: 0.86 with Dyna-style rows, 2.97 with MAD-TD's (1.01 and 1.88 with the LayerNorm + Mish
    critic)."""
    real = eng.make_batch

    def dyna_rows(s, a, r, s2, n_model, K, model, bad_sigma, rng):
        # the same rows with the model queried at the buffer's own actions: keep a, replace r and s' by the model's
        k = int(n_model.max())
        if k == 0:
            return real(s, a, r, s2, n_model, K, model, bad_sigma, rng)
        W, wr = model
        a, r, s2 = a.copy(), r.copy(), s2.copy()
        sk, ak = s[:, :k], a[:, :k]
        rows = np.arange(k)[None, :] < n_model[:, None]
        s_hat = np.concatenate([sk, ak[..., None]], -1) @ W
        if np.any(bad_sigma > 0):
            s_hat = s_hat + rng.normal(size=sk.shape) * bad_sigma[:, None, None]
        r_hat = np.einsum("vnf,vf->vn", eng.reward_features(sk, ak), wr)
        r[:, :k] = np.where(rows, r_hat, r[:, :k])
        s2[:, :k] = np.where(rows[..., None], s_hat, s2[:, :k])
        return a, r, s2

    monkeypatch.setattr(eng, "make_batch", dyna_rows)
    m = eng.run(eng.Config()).metrics
    intact = default_result.metrics["ratio_real_mad"]
    assert m["real_final"] == pytest.approx(default_result.metrics["real_final"])   # real-only rows untouched
    assert 0.7 < m["ratio_real_mad"] < 1.3 < intact


def _true_grad(s, K, gamma):
    """The exact DPG gradient of the true Q^K (zero for an unstable K): a stand-in for the critic's."""
    P, ok = eng.policy_value_matrices(K, gamma)
    return eng.true_actor_grad(s, K, np.where(ok[:, None, None], P, 0.0), gamma)


def test_actor_update_climbs_the_true_q_when_given_the_true_gradient(monkeypatch):
    """The actor step descends the DPG loss -mean Q(s, -sK). Fed the exact gradient of the true Q^K instead of its
    critic's, the same Adam schedule must carry K from K_b toward the LQR optimum (scipy's Riccati solution), and the
    recorded regret must shrink; a step in the wrong direction makes the actor unstable."""
    cfg = eng.Config(utd=1, env_steps=200, n_seeds=2, width=16)

    def exact_grad(crit, s, K):
        return _true_grad(s, K, cfg.gamma)

    monkeypatch.setattr(eng, "actor_grad", exact_grad)
    out = eng.train(cfg, 1, [("real ac", 0.0, 0.0, True)], np.random.default_rng(0))
    g = np.sqrt(cfg.gamma)
    Pd = scipy.linalg.solve_discrete_are(g * eng.A_DYN, g * eng.B_DYN, eng.Q_C, np.array([[eng.R_C]]))
    K_opt = cfg.gamma * np.linalg.solve(eng.R_C + cfg.gamma * eng.B_DYN.T @ Pd @ eng.B_DYN, eng.B_DYN.T @ Pd @ eng.A_DYN)[0]
    K0, K_end = eng.K_B, out["K"][:, 0]
    assert np.all(np.linalg.norm(K_end - K_opt, axis=1) < 0.6 * np.linalg.norm(K0 - K_opt))
    reg = out["regret"][:, 0]
    assert np.all(np.isfinite(reg)) and np.all(reg[:, -1] < 0.25 * reg[:, 0])


# ----------------------------------------------------------------------------- second mutation round


def _scipy_P(K, gamma):
    """Value matrix of a = -K s from scipy's Lyapunov solver; None when sqrt(gamma)(A - BK) is not stable."""
    Acl = eng.A_DYN - eng.B_DYN @ np.asarray(K, float)[None]
    if np.max(np.abs(np.linalg.eigvals(np.sqrt(gamma) * Acl))) >= 1:
        return None
    return scipy.linalg.solve_discrete_lyapunov(np.sqrt(gamma) * Acl.T, eng.Q_C + eng.R_C * np.outer(K, K))


def _scipy_q(s, a, P, gamma):
    m = s @ eng.A_DYN.T + a[:, None] * eng.B_DYN[:, 0]
    return -(np.einsum("ni,ij,nj->n", s, eng.Q_C, s) + eng.R_C * a**2 + gamma * np.einsum("ni,ij,nj->n", m, P, m)
             + gamma / (1 - gamma) * eng.W_STD**2 * np.trace(P))


def test_last_checkpoint_curves_recomputed_from_the_critic():
    """The plotted on-policy RMSE and bias (evaluation variants), the overestimation and the regret (actor-critic) at
    the last checkpoint, recomputed from the returned critic, buffer and actors with scipy's Lyapunov solution."""
    cfg = eng.Config(utd=2, env_steps=100, n_seeds=2, width=16)
    variants = [("real", 0.0, 0.0, False), ("mad", 0.25, 0.0, False), ("real ac", 0.0, 0.0, True),
                ("mad ac", 0.25, 0.0, True)]
    out = eng.train(cfg, 2, variants, np.random.default_rng(5), keep=True)
    crit, S = out["crit"], out["S"]
    K = out["K"].reshape(-1, 2)
    g = cfg.gamma
    Pstar = scipy.linalg.solve_discrete_are(np.sqrt(g) * eng.A_DYN, np.sqrt(g) * eng.B_DYN, eng.Q_C, np.array([[eng.R_C]]))
    j_star = -(1 / 3 + g / (1 - g) * eng.W_STD**2) * np.trace(Pstar)
    E = out["eval_s"]
    q_buf = crit.q(S, -np.einsum("vni,vi->vn", S, K)).astype(np.float64)       # every critic at once (V, N)
    q_eval = crit.q(np.broadcast_to(E, (len(K),) + E.shape), -(E @ K.T).T).astype(np.float64)
    n_checked = 0
    for v, Kv in enumerate(K):
        seed, vi = divmod(v, len(variants))
        P = _scipy_P(Kv, g)
        if variants[vi][3]:
            if P is None:
                assert np.isinf(out["over"][seed, vi, -1]) and np.isneginf(-out["regret"][seed, vi, -1])
                continue
            over = q_eval[v] - _scipy_q(E, -E @ Kv, P, g)
            assert np.isclose(out["over"][seed, vi, -1], over.mean(), rtol=1e-4, atol=1e-4)
            j = -(1 / 3 + g / (1 - g) * eng.W_STD**2) * np.trace(P)
            assert np.isclose(out["regret"][seed, vi, -1], (j_star - j) / abs(j_star), rtol=1e-6)
        else:
            err = q_buf[v] - _scipy_q(S[v], -S[v] @ Kv, P, g)
            assert np.isclose(out["rmse"][seed, vi, -1], np.sqrt(np.mean(err**2)), rtol=1e-4)
            assert np.isclose(out["bias"][seed, vi, -1], err.mean(), rtol=1e-4, atol=1e-4)
        n_checked += 1
    assert n_checked >= 5


def test_per_seed_table_and_claim_numbers_are_second_half_summaries(default_result):
    """The per-seed table and the badges: overestimation = mean over the checkpoints after env_steps / 2, worst regret
    = max over them, final RMSE = the last checkpoint, diverged share = seeds whose 2nd-half worst regret is inf."""
    r, m = default_result, default_result.metrics
    late = r.steps > eng.Config().env_steps / 2
    assert late.sum() == 10 and r.steps[-1] == eng.Config().env_steps
    for k in r.over:
        np.testing.assert_allclose(r.late_over[k], r.over[k][:, late].mean(-1))
        np.testing.assert_array_equal(r.worst_regret[k], r.regret[k][:, late].max(-1))
    for k in r.rmse:
        np.testing.assert_array_equal(r.final[k], r.rmse[k][:, -1])
    u = int(m["utd"])
    for name, key in (("real", f"{eng.AC_REAL} @ UTD {u}"), ("mad", f"{eng.AC_MAD} @ UTD {u}")):
        assert m[f"{name}_diverged"] == np.mean([not np.isfinite(r.regret[key][s, late]).all()
                                                 for s in range(len(r.regret[key]))])
        assert m[f"{name}_over"] == np.median(r.late_over[key])
    assert m["real_final"] == np.median(r.final[f"real only @ UTD {u}"])


def test_q_slice_marker_and_error_map_against_scipy(default_result):
    """The Q(s0, a) slice: its closed-form curve and the π(s0) marker from scipy's Riccati gain; and the error map
    cell at s0 = (0.8, -0.3) (position row, velocity column) equals the slice's critic-minus-closed-form gap at
    a = π(s0), interpolated between the slice's action points."""
    r = default_result
    g = eng.Config().gamma
    Pd = scipy.linalg.solve_discrete_are(np.sqrt(g) * eng.A_DYN, np.sqrt(g) * eng.B_DYN, eng.Q_C, np.array([[eng.R_C]]))
    Kd = g * np.linalg.solve(eng.R_C + g * eng.B_DYN.T @ Pd @ eng.B_DYN, eng.B_DYN.T @ Pd @ eng.A_DYN)[0]
    s0 = r.slice_state
    assert r.metrics["pi_s0"] == pytest.approx(-s0 @ Kd, abs=1e-8)
    ss = np.broadcast_to(s0, (len(r.slice_a), 2))
    np.testing.assert_allclose(r.slice_q["closed form"], _scipy_q(ss, r.slice_a, Pd, g), atol=1e-8)
    i = int(np.argmin(np.abs(r.heat_axis - s0[0])))
    j = int(np.argmin(np.abs(r.heat_axis - s0[1])))
    assert np.isclose(r.heat_axis[i], s0[0]) and np.isclose(r.heat_axis[j], s0[1])
    gaps = []
    for name, z in r.heat.items():
        want = np.interp(-s0 @ Kd, r.slice_a, r.slice_q[name] - r.slice_q["closed form"])
        assert z[i, j] == pytest.approx(want, abs=0.01), name
        gaps.append(abs(want))
    assert max(gaps) > 0.05                # the map is not ~0 there, so its sign and orientation are tested


def test_discounted_stability_decides_divergence():
    """An actor is unstable only when sqrt(γ)(A - BK) is: K = (0, -0.2) has spectral radius 1.02 > 1 without the
    discount but 0.97 with γ = 0.9, so its value (scipy's Lyapunov solution) and return are finite."""
    K = np.array([0.0, -0.2])
    Acl = eng.A_DYN - eng.B_DYN @ K[None]
    assert np.max(np.abs(np.linalg.eigvals(Acl))) > 1
    P, ok = eng.policy_value_matrices(K[None], 0.9)
    assert ok.tolist() == [True]
    np.testing.assert_allclose(P[0], _scipy_P(K, 0.9), rtol=1e-8)
    assert np.isfinite(eng.policy_return(K[None], 0.9)).all()


def test_alignment_is_one_when_the_actor_follows_the_true_gradient(monkeypatch):
    """The cosine panel compares the critic's DPG gradient with the true one; fed the true gradient as the critic's,
    every recorded cosine is 1."""
    cfg = eng.Config(utd=1, env_steps=100, n_seeds=2, width=16)

    def exact_grad(crit, s, K):
        return _true_grad(s, K, cfg.gamma)

    monkeypatch.setattr(eng, "actor_grad", exact_grad)
    out = eng.train(cfg, 1, [("real ac", 0.0, 0.0, True)], np.random.default_rng(2))
    al = out["align"][:, 0]
    fin = al[np.isfinite(al)]
    assert fin.size >= 10 and np.allclose(fin, 1.0, atol=1e-9)


def test_actor_takes_textbook_adam_steps_on_its_gradient(monkeypatch):
    """The gain trajectory: from K_b, each environment step after the warm-up moves the actor by one Adam step
    (β = 0.9 / 0.999, bias-corrected, lr ACTOR_LR) on the gradient it was given; replayed by hand for a few steps."""
    cfg = eng.Config(utd=1, env_steps=100, n_seeds=2, width=16)
    grads = []

    def exact_grad(crit, s, K):
        g = _true_grad(s, K, cfg.gamma)
        grads.append(g.copy())
        return g

    monkeypatch.setattr(eng, "actor_grad", exact_grad)
    out = eng.train(cfg, 1, [("real ac", 0.0, 0.0, True)], np.random.default_rng(4))
    assert len(grads) == cfg.env_steps - eng.WARMUP + 1
    K, m, v = np.tile(eng.K_B, (2, 1)), np.zeros((2, 2)), np.zeros((2, 2))
    for k, g in enumerate(grads, 1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        K = K - eng.ACTOR_LR * (m / (1 - 0.9**k)) / (np.sqrt(v / (1 - 0.999**k)) + 1e-8)
        if k == 1:
            np.testing.assert_allclose(np.abs(K - eng.K_B), eng.ACTOR_LR, rtol=1e-6)   # Adam's first step: lr·sign
    np.testing.assert_allclose(out["K"][:, 0], K, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out["gain"][:, 0, -1], K, rtol=1e-10, atol=1e-12)


def test_episodes_restart_every_25_steps_from_uniform_states():
    """The data stream (the error map's black dots): within an episode each state follows the last by the dynamics up
    to the small plant noise; every 25 steps a new episode starts at a fresh uniform state in [-1, 1]²."""
    cfg = eng.Config(utd=1, env_steps=100, n_seeds=2, width=16)
    out = eng.train(cfg, 1, [("real", 0.0, 0.0, False)], np.random.default_rng(6), keep=True)
    S, A = out["S"], out["A"]
    pred = S[:, :-1] @ eng.A_DYN.T + A[:, :-1, None] * eng.B_DYN[:, 0]
    jump = np.abs(S[:, 1:] - pred).max(-1)                          # (V, T - 1): step t -> t + 1
    starts = np.arange(1, cfg.env_steps) % eng.EP_LEN == 0
    assert jump[:, ~starts].max() < 5 * eng.W_STD
    assert np.median(jump[:, starts]) > 5 * eng.W_STD and starts.sum() == cfg.env_steps // eng.EP_LEN - 1
    assert np.all(np.abs(S[:, ::eng.EP_LEN]) <= 1)


# ----------------------------------------------------------------------------- what the page draws


def _chart_traces(at, key):
    """The traces of the chart drawn under ``key``: list of (name, x, y, z), numbers as float arrays, labels as
    they are."""
    def arr(v):
        try:
            return values(v)
        except (TypeError, ValueError):
            return v

    return [(t.get("name"), arr(t.get("x")), arr(t.get("y")), arr(t.get("z"))) for t in chart_traces(at, key)]


def test_page_shows_the_results_numbers(default_result):
    """The default page, read back: final-RMSE bars are the per-variant medians over seeds, the per-seed table's
    final gains are the last checkpoint's, the two actor-critic panels carry overestimation and regret (unstable
    checkpoints as gaps), each error map puts position on x and velocity on y, and the Q slice draws each curve."""
    import pandas as pd

    res = default_result
    at = open_page("mad_td", seed=(("engine.mad_td", eng.Config(), default_result),))

    bars = _chart_traces(at, "final")[0]
    tick = {k: f"{k}<br>median {np.median(v):.3g}" for k, v in res.final.items()}   # the median under each name
    assert list(bars[1]) == list(tick.values())
    np.testing.assert_allclose(bars[2], [np.median(v) for v in res.final.values()], rtol=1e-9)
    dots = next(t for t in _chart_traces(at, "final") if t[0] == "seeds")
    assert list(dots[1]) == [tick[k] for k, v in res.final.items() for _ in v]
    np.testing.assert_allclose(dots[2], [x for v in res.final.values() for x in v], rtol=1e-9)

    for key, data in (("over", res.over), ("regret", res.regret)):
        traces = _chart_traces(at, key)
        want = [(k, s) for k in data for s in range(data[k].shape[0])]
        assert [t[0] for t in traces] == [k for k, _ in want]
        for (k, s), (_, _, y, _) in zip(want, traces):
            v = data[k][s]
            y = np.array([np.nan if e is None else e for e in y], float) if y.dtype == object else y
            np.testing.assert_allclose(y, np.where(np.isfinite(v), v, np.nan), rtol=1e-9)

    table = next(d.value for d in at.dataframe if "final K₁" in d.value.columns)
    expected = pd.DataFrame([{"variant": k, "seed": s, "K1": g[s, -1, 0], "K2": g[s, -1, 1]}
                             for k, g in res.gain.items() for s in range(g.shape[0])])
    assert list(table["variant"]) == list(expected["variant"]) and list(table["seed"]) == list(expected["seed"])
    np.testing.assert_allclose(table["final K₁"], expected["K1"], rtol=1e-9)
    np.testing.assert_allclose(table["final K₂"], expected["K2"], rtol=1e-9)

    # the engine's maps are indexed [position, velocity]; a heatmap's z is indexed [row = y, column = x]
    for i, z in enumerate(res.heat.values()):
        hm = next(t for t in _chart_traces(at, f"heat{i}") if t[3] is not None)
        np.testing.assert_allclose(hm[1], res.heat_axis)
        np.testing.assert_allclose(hm[2], res.heat_axis)
        g = len(res.heat_axis)
        for p, v in ((0, g - 1), (g - 1, 0), (3, 17)):
            assert hm[3][v][p] == pytest.approx(z[p, v], rel=1e-6)

    sl = {t[0]: t[2] for t in _chart_traces(at, "slice") if t[0] in res.slice_q}
    assert set(sl) == set(res.slice_q)
    for name, q in res.slice_q.items():
        np.testing.assert_allclose(sl[name], q, rtol=1e-6)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_td_target_queries_the_target_critic_at_pi_of_the_next_state(monkeypatch):
    """y = r + γ Q̄(s', π(s')): every critic update asks the TARGET critic exactly once, and the actions
    it asks about are -K* s' at the very states it is asked about (the next states), for real-only and
    MAD-TD rows alike. Checked by recording the critic's queries, against K* from scipy's Riccati solver
    (not the engine's)."""
    import scipy.linalg

    g = 0.9
    sA, sB = np.sqrt(g) * eng.A_DYN, np.sqrt(g) * eng.B_DYN
    P = scipy.linalg.solve_discrete_are(sA, sB, eng.Q_C, np.array([[eng.R_C]]))
    k_star = np.linalg.solve(eng.R_C + sB.T @ P @ sB, sB.T @ P @ sA)[0]    # the same u = -K x when scaled
    calls = []
    real_q = eng.Critics.q

    def spy(self, s, a, target=False):
        calls.append((np.array(s, float), np.array(a, float), target, np.abs(self.tflat - self.flat).max()))
        return real_q(self, s, a, target=target)

    monkeypatch.setattr(eng.Critics, "q", spy)
    cfg = eng.Config(env_steps=100, n_seeds=2, utd=2, width=16, gamma=g)
    variants = [("real only", 0.0, 0.0, False), ("MAD-TD", 0.05, 0.0, False)]
    eng.train(cfg, cfg.utd, variants, np.random.default_rng(5))
    tgt = [c for c in calls if c[2]]
    assert len(tgt) == cfg.utd * (cfg.env_steps - eng.WARMUP + 1)      # one target query per critic update
    for k, (s, a, _, gap) in enumerate(tgt):
        assert s.shape == (4, eng.BATCH, 2) and a.shape == (4, eng.BATCH)
        np.testing.assert_allclose(a, -s @ k_star, rtol=1e-6, atol=1e-9)
        if k > 0:
            assert gap > 0                      # a Polyak-lagged target, not a copy of the online critic


def test_claim1_box_follows_the_sign_of_the_model_rows_effect(default_result):
    """The 'Claim 1 misses its bar' box: 'still lower' only when the model rows do lower the error; a run where
    they raise it (ratio < 1, as at seed 1, UTD 2) says so instead."""
    import copy

    worse = copy.deepcopy(default_result)
    worse.metrics.update(real_final=1.9, mad_final=2.41, ratio_real_mad=1.9 / 2.41)
    at = open_page("mad_td", seed=(("engine.mad_td", eng.Config(), worse),))
    box = next(i.value for i in at.info if "Claim 1 misses" in i.value)
    assert "do not lower" in box and "still lower" not in box and "ratio 0.79" in box
    better = copy.deepcopy(default_result)
    better.metrics.update(real_final=2.0, mad_final=1.6, ratio_real_mad=1.25)
    at = open_page("mad_td", seed=(("engine.mad_td", eng.Config(), better),))
    box = next(i.value for i in at.info if "Claim 1 misses" in i.value)
    assert "still lower" in box and "ratio 1.25" in box


def test_claim_one_reads_the_rmse_against_the_true_q_scale_on_the_same_states():
    """Claim 1's detail quotes the RMS of the true Q^pi (closed form) over the buffer states and on-policy actions
    that the RMSE is taken on; with one seed it is that seed's real-only buffer, recomputed here with q_true."""
    cfg = eng.Config(n_seeds=1, env_steps=150)
    r = eng.run(cfg)
    s = r.data_states
    q = eng.q_true(s, -(s @ r.K_star.ravel()), r.K_star, cfg.gamma)
    assert r.metrics["q_true_rms"] == pytest.approx(float(np.sqrt(np.mean(q**2))), rel=1e-6)
    assert f"RMS of the true Q on the same states: {r.metrics['q_true_rms']:.2f}" in eng.claims(r)[0].detail
