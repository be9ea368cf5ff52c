"""MAD-TD: claim at the default config and independent checks."""

import numpy as np
import pytest
import scipy.linalg
import torch

from engine import mad_td as eng


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_at_default(default_result):
    claims = eng.claims(default_result)
    assert len(claims) == 3
    # claim 1 (on-policy error) reproduces
    assert claims[0].passed, claims[0].describe()
    # Claims 2-3 are the (#8): less overestimation at unobserved (greedy) actions and more stable greedy
    # returns with model data. Their thresholds were fixed before measuring and they do NOT reproduce in this
    # fixed-policy setting (measured at seeds 0-4: real-only median overestimation at greedy actions -5.8..+0.06 vs
    # MAD-TD +0.9..+2.7, so the ratio is inf or 14; regret ratio 0.92-1.9 > 0.5), so the page shows them failing
    # with the numbers. Only their bookkeeping is asserted here.
    m = default_result.metrics
    assert np.isfinite(m["real_over"]) and np.isfinite(m["mad_over"])
    assert claims[1].passed == (m["real_over"] > 0 and m["mad_over"] / m["real_over"] <= 0.5)
    assert np.isclose(claims[2].measured, m["mad_regret"] / m["real_regret"])
    assert min(m["real_regret"], m["mad_regret"]) > -0.05      # π is optimal: a greedy policy can hardly beat it


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_on_policy_claim_holds_across_seeds(seed, default_result):
    # seed 0 is the default fixture; a claim that passes on one seed only would not count as reproduced
    c = eng.claims(eng.run(eng.Config(seed=seed)))[0]
    assert c.passed, c.describe()


def test_sweep_claims():
    claims = eng.claims(eng.run(eng.Config(sweep=True)))
    assert len(claims) == 6
    # more updates per sample hurt only without model data (measured to hold at seeds 0-4:
    # real-only UTD8/UTD2 1.7-5.1, MAD-TD 0.33-0.61)
    assert claims[3].passed, claims[3].describe()
    assert claims[4].passed, claims[4].describe()
    # claims[5] (noisy model >= 1.3x the good one) measured 1.28-1.86 over seeds 0-4 (fails at seed 1): too close
    # to its bar to be asserted; it is shown on the page as measured.


def test_variants_of_a_seed_share_initial_weights():
    crit = eng.Critics(6, 8, np.random.default_rng(0), share=2)
    assert np.array_equal(crit.flat[0], crit.flat[1]) and np.array_equal(crit.flat[4], crit.flat[5])
    assert not np.array_equal(crit.flat[1], crit.flat[2])


def test_greedy_action_against_brute_force():
    rng = np.random.default_rng(5)
    crit = eng.Critics(3, 16, rng)
    s = rng.uniform(-1, 1, (3, 10, 2))
    a = eng.greedy_actions(crit, s)
    assert np.all(np.abs(a) <= eng.ACT_GRID[-1] + 1e-9)
    fine = np.linspace(eng.ACT_GRID[0], eng.ACT_GRID[-1], 4001)
    qf = crit.q(np.repeat(s, len(fine), 1), np.broadcast_to(np.tile(fine, 10), (3, 10 * len(fine))))
    qmax, qmin = qf.reshape(3, 10, -1).max(-1), qf.reshape(3, 10, -1).min(-1)
    qa = crit.q(s, a)
    coarse = crit.q(np.repeat(s, len(eng.ACT_GRID), 1),
                    np.broadcast_to(np.tile(eng.ACT_GRID, 10), (3, 10 * len(eng.ACT_GRID)))).reshape(3, 10, -1)
    assert np.all(qa >= coarse.max(-1) - 1e-6)                        # never worse than the grid
    assert np.all(qa >= qmax - 0.05 * (qmax - qmin) - 1e-6)           # close to the brute-force maximum


def test_rollout_return_of_linear_policy_against_lyapunov():
    gamma, H = 0.9, 25
    K, _ = eng.lqr_gain(gamma)
    starts = np.random.default_rng(6).uniform(-1, 1, (7, 2))
    j = eng.rollout_return(lambda x: -x @ K, starts, np.zeros((H, 7, 2)), gamma)
    Acl = eng.A_DYN - eng.B_DYN @ K[None]
    P = scipy.linalg.solve_discrete_lyapunov(np.sqrt(gamma) * Acl.T, eng.Q_C + eng.R_C * np.outer(K, K))
    AH = np.linalg.matrix_power(Acl, H)
    PH = P - gamma**H * AH.T @ P @ AH            # noise-free return truncated after H steps
    assert np.isclose(j, -np.einsum("mi,ij,mj->m", starts, PH, starts).mean(), rtol=1e-8)


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


def test_critic_gradients_match_autograd_and_target_is_polyak():
    rng = np.random.default_rng(4)
    crit = eng.Critics(2, 8, rng)
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    dq = rng.normal(size=(2, 5)).astype(np.float32)
    q, cache = crit.forward(crit.p, x)
    g = crit.grads(cache, dq)
    flat = torch.tensor(crit.flat.astype(np.float64), requires_grad=True)
    views = [flat[:, a:b].reshape((2,) + sh) for a, b, sh in zip(crit.offsets[:-1], crit.offsets[1:], crit.shapes)]
    W1, b1, W2, b2, W3, b3 = views
    xt = torch.tensor(x, dtype=torch.float64)
    h1 = torch.relu(xt @ W1 + b1[:, None])
    h2 = torch.relu(h1 @ W2 + b2[:, None])
    qt = (h2 @ W3 + b3[:, None])[..., 0]
    (qt * torch.tensor(dq, dtype=torch.float64)).sum().backward()
    assert np.allclose(q, qt.detach().numpy(), atol=1e-5)
    assert np.allclose(g, flat.grad.numpy(), atol=1e-4)
    old_t = crit.tflat.copy()
    crit.step(g)
    assert np.allclose(crit.tflat, 0.99 * old_t + 0.01 * crit.flat, atol=1e-6)


def test_too_expensive_settings_are_rejected_with_a_message():
    with pytest.raises(ValueError, match="would take about"):
        eng.Config(utd=32, env_steps=600, n_seeds=8, width=128, sweep=True)
    eng.Config(sweep=True)   # the sweep at default sizes is allowed
