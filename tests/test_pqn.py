"""PQN / LayerNorm TD: claims at the default config and independent checks."""

import numpy as np
import pytest
import torch

from engine import pqn as eng
from tests.pagetext import charts, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_at_default(default_result):
    claims = eng.claims(default_result)
    assert len(claims) == 5
    # every badge passes except the spec's every-seed convergence at width 64 (worst seed 0.20 >= 0.1; see the
    # width test below)
    failed = [c.label for c in claims if not c.passed]
    assert failed == ["worst seed's final max|V| (LayerNorm + ℓ2)"], failed
    worst = next(c for c in claims if c.label.startswith("worst seed"))
    assert worst.measured == pytest.approx(float(np.max(default_result.final_maxv["ln_l2"])))


def test_every_seed_converges_at_larger_width():
    # the page's caveat: at width 256 every LayerNorm + l2 seed converges, at seeds 0 and 1 (measured < 1e-3),
    # while width 64 leaves a slow seed at both (0.20 and 0.91); the other badges still pass
    for seed in (0, 1):
        cl = eng.claims(eng.run(eng.Config(width=256, seed=seed)))
        assert all(c.passed for c in cl), [c.describe() for c in cl if not c.passed]
    assert eng.run(eng.Config(seed=1)).metrics["ln_l2_worst"] > 0.1


def test_expected_td_matrix_has_unstable_eigenvalue_and_engine_grows_at_that_rate(default_result):
    cfg = eng.Config()
    A = eng.expected_td_matrix(cfg.gamma)
    lam = np.linalg.eigvals(A)
    assert lam.real.max() > 0.2
    rho = np.abs(np.linalg.eigvals(np.eye(8) + cfg.lr * A)).max()
    # late-phase growth of the linear run's parameter norm, per step
    steps, norm = default_result.steps, np.median(default_result.norm["linear"], axis=0)
    half = len(steps) // 2
    slope = np.polyfit(steps[half:], np.log(norm[half:]), 1)[0]
    assert abs(slope - np.log(rho)) / np.log(rho) < 0.05


def test_manual_gradients_match_autograd():
    rng = np.random.default_rng(0)
    X = eng.baird_features()
    R, k = 3, 16
    M = rng.normal(size=(R, k, 8))
    b = rng.normal(size=(R, k))
    w = rng.normal(size=(R, k))
    g = rng.normal(size=(R, 7))
    l2 = np.array([0.0, 0.3, 1.0])
    for ln in (False, True):
        f, cache = eng.mlp_forward(X, M, b, w, ln)
        dM, db, dw = eng.mlp_grads(X, M, b, w, g, cache, ln, l2)
        tM, tb, tw = (torch.tensor(a, requires_grad=True) for a in (M, b, w))
        h = torch.einsum("sd,rkd->rsk", torch.tensor(X), tM) + tb[:, None, :]
        if ln:
            h = torch.nn.functional.layer_norm(h, (k,), eps=eng.LN_EPS)
        ft = torch.einsum("rsk,rk->rs", torch.relu(h), tw)
        assert np.allclose(ft.detach().numpy(), f)
        loss = (ft * torch.tensor(g)).sum() + 0.5 * (torch.tensor(l2)[:, None] * tw**2).sum()
        loss.backward()
        for mine, ref in ((dM, tM), (db, tb), (dw, tw)):
            assert np.allclose(mine, ref.grad.numpy(), atol=1e-9)


def test_layernorm_features_have_bounded_norm():
    rng = np.random.default_rng(1)
    h = rng.normal(scale=50.0, size=(100, 64)) + rng.normal(size=(100, 1)) * 1e3
    y, _ = eng.layernorm(h)
    z = np.maximum(y, 0)
    assert np.all((z**2).sum(-1) <= 64 + 1e-6)


def test_every_variant_converges_without_bootstrapping():
    from types import SimpleNamespace

    # the widget stops at gamma = 0.5; gamma = 0 (pure regression onto r = 0) goes through run_baird directly
    cfg0 = SimpleNamespace(**{**eng.Config(steps=3000, n_seeds=2, lr=0.1).__dict__, "gamma": 0.0})
    rec, maxv, norm, final, ever, ratio, _ = eng.run_baird(cfg0, np.random.default_rng(0))
    for v in eng.VARIANTS:
        assert not ever[v].any(), v
        assert np.all(final[v] < 0.05), (v, final[v])


def test_lambda_returns():
    T, gamma = 5, 0.9
    r = torch.tensor([[1.0], [0.5], [2.0], [0.0], [1.0]])
    q = torch.tensor([[3.0], [1.0], [4.0], [1.0], [5.0]])
    term = torch.zeros(T, 1)
    done = torch.zeros(T, 1)
    G0 = eng.lambda_returns(r, term, done, q, gamma, 0.0)
    assert torch.allclose(G0, r + gamma * q)
    term[-1] = 1.0
    done[-1] = 1.0
    G1 = eng.lambda_returns(r, term, done, q, gamma, 1.0)
    mc = [sum(gamma ** (j - t) * float(r[j]) for j in range(t, T)) for t in range(T)]
    assert np.allclose(G1[:, 0].numpy(), mc)
    # an episode end inside the window stops lambda-mixing there
    done2 = torch.zeros(T, 1)
    done2[1] = 1.0
    G2 = eng.lambda_returns(r, term, done2, q, gamma, 1.0)
    assert torch.isclose(G2[1, 0], r[1, 0] + gamma * q[1, 0])


def test_cartpole_matches_gymnasium():
    gym = pytest.importorskip("gymnasium")
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    state = np.array(env.state, dtype=np.float64)
    for _ in range(200):
        a = int(rng.integers(0, 2))
        env.state = tuple(state)
        env.steps_beyond_terminated = None
        env.step(a)
        ours = eng.CartPole.dynamics(state, a)
        assert np.allclose(ours, np.array(env.state, dtype=np.float64), atol=1e-5)
        state = ours if abs(ours[2]) < 0.2 and abs(ours[0]) < 2.4 else rng.uniform(-0.05, 0.05, 4)


def test_work_guard_refuses_settings_over_the_time_limit():
    # the old corner (every Baird slider at its top, CartPole at 8 envs) measured 47 s on a 2-core CPU
    with pytest.raises(ValueError, match="lower the width"):
        eng.Config(width=256, steps=5000, n_seeds=20, run_pqn=True, env_steps=40000, n_envs=8)
    with pytest.raises(ValueError):
        eng.Config(width=256, steps=5000, n_seeds=20)
    for cfg in (eng.Config(), eng.Config(run_pqn=True), eng.Config(run_pqn=True, env_steps=40000)):
        assert eng.estimated_seconds(cfg) <= eng.WORK_LIMIT_S
    assert eng.estimated_seconds(eng.HEAVY_CONFIG) <= eng.WORK_LIMIT_S
    # the model grows with the work it describes
    assert eng.estimated_seconds(eng.Config(width=128)) > eng.estimated_seconds(eng.Config(width=64))
    assert (eng.estimated_seconds(eng.Config(run_pqn=True, n_envs=8, env_steps=30000))
            > eng.estimated_seconds(eng.Config(run_pqn=True, n_envs=64, env_steps=30000)))
    # since 2026-12-07 (limit 16 s of estimate, for a machine 1.5-1.8 times slower than the fit) the default env steps
    # at 8 envs are refused, with the message naming what to lower
    with pytest.raises(ValueError, match="more parallel envs"):
        eng.Config(run_pqn=True, n_envs=8)


def test_finite_median_ignores_blown_up_seeds_without_warnings():
    import warnings

    x = np.array([[1.0, np.inf, np.nan, 5.0], [3.0, 2.0, np.inf, np.nan], [2.0, 4.0, np.nan, 7.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        med = eng.finite_median(x)
    assert med[0] == 2.0 and med[1] == 3.0 and np.isnan(med[2]) and med[3] == 6.0


def test_caveat_on_slow_layernorm_seeds_holds_at_default():
    """The page's caveat: at the default, one or two seeds of each LayerNorm variant are still converging (max|V|
    up to about 0.3 at seed 0, below 0.5, and falling since mid-run), while the median seed has converged."""
    r = eng.run(eng.Config())
    mid = len(r.steps) // 2
    for k in ("ln", "ln_l2"):
        final, maxv = np.asarray(r.final_maxv[k]), np.asarray(r.maxv[k])
        slow = np.flatnonzero(final > 0.05)
        assert 1 <= slow.size <= 2, (k, final)
        assert final.max() < 0.5 and np.median(final) < 0.01
        assert np.all(maxv[slow, -1] < maxv[slow, mid]), (k, maxv[slow, mid], maxv[slow, -1])


PQN_CONFIG = eng.Config(run_pqn=True, steps=500)


@pytest.fixture(scope="module")
def pqn_result():
    """Part B at its defaults (60 000 env steps, 32 envs, seed 0), with a shorter Baird part."""
    return eng.run(PQN_CONFIG)


def test_pqn_part_b_at_the_spec_env_steps(pqn_result):
    """Part B at its defaults (60 000 env steps, 32 envs, seed 0): LayerNorm PQN learns CartPole while the same
    learner without LayerNorm does not (measured 118 vs 9; at seeds 0-7 LayerNorm 90-336, no LayerNorm 9-22). The
    wall-clock badge's verdict is not asserted here (timings belong to the benchmark); only that both times were
    measured."""
    res = pqn_result
    m = res.metrics
    learns = next(c for c in eng.claims(res) if c.label == "greedy return, PQN with LayerNorm")
    assert learns.passed, learns.describe()
    assert m["pqn_ln_greedy"] >= 60 and m["pqn_noln_greedy"] < 30
    assert m["pqn_seconds"] > 0 and m["dqn_seconds"] > 0
    # the page's "how it works" states the rollout sizes the engine uses
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "pages" / "pqn.py").read_text()
    assert f"in parallel for {eng.ROLLOUT} steps" in text
    assert f"{eng.EPOCHS} epochs of {eng.MINIBATCHES} minibatches" in text


def test_the_specs_rollout_sizes_learn_at_one_seed_of_three(monkeypatch):
    """The page's caveat: with the spec's rollout sizes (32 steps, 2 epochs of 4 minibatches) and 60 000 env steps,
    LayerNorm PQN reached the learning bar (greedy return ≥ 60) at one of seeds 0-2 (measured 137, 12, 34)."""
    monkeypatch.setattr(eng, "ROLLOUT", 32)
    monkeypatch.setattr(eng, "MINIBATCHES", 4)
    monkeypatch.setattr(eng, "EPOCHS", 2)
    cfg = eng.Config(run_pqn=True)
    greedy = [eng.train_pqn(cfg, seed, layernorm=True)["greedy"] for seed in range(3)]
    assert sum(g >= 60 for g in greedy) == 1, greedy


def test_one_baird_step_of_each_network_is_autograd_on_its_stated_loss():
    """One step of run_baird against torch autograd on each variant's loss, from the same initial weights:
    Σ_s μ_s · ½ (γ·stop_grad(f(x₇)) − f(x_s))² + ½ η_ℓ2 ‖w‖², with η_ℓ2 = l2 for the plain MLP and LN + ℓ2 and 0 for
    LN alone (semi-gradient TD: the bootstrap target is not differentiated)."""
    cfg = eng.Config(n_seeds=3, width=16, updates="expected")
    object.__setattr__(cfg, "steps", 1)                       # one update (the widget's range starts at 500)
    nets = eng.run_baird(cfg, np.random.default_rng(9))[-1]
    rng = np.random.default_rng(9)                            # the engine's first draws: M0, then w0
    R, k = cfg.n_seeds, cfg.width
    M0 = rng.normal(0.0, np.sqrt(1 / 8), size=(R, k, 8))
    w0 = rng.normal(0.0, np.sqrt(1 / k), size=(R, k))
    X = torch.tensor(eng.baird_features())
    mu = torch.full((R, 7), 1 / 7, dtype=torch.float64)
    for v, ln, l2 in (("mlp", False, cfg.l2), ("ln", True, 0.0), ("ln_l2", True, cfg.l2)):
        M, b, w = (torch.tensor(a, requires_grad=True) for a in (M0, np.zeros((R, k)), w0))
        h = torch.einsum("sd,rkd->rsk", X, M) + b[:, None, :]
        if ln:
            h = torch.nn.functional.layer_norm(h, (k,), eps=eng.LN_EPS)
        f = torch.einsum("rsk,rk->rs", torch.relu(h), w)
        target = cfg.gamma * f[:, 6:7].detach()
        loss = (mu * 0.5 * (target - f) ** 2).sum() + 0.5 * l2 * (w**2).sum()
        loss.backward()
        for got, p in zip(nets[v], (M, b, w)):
            np.testing.assert_allclose(got, (p - cfg.lr * p.grad).detach().numpy(), atol=1e-12, err_msg=v)


def test_truncation_bootstraps_and_hands_back_the_true_next_state():
    """Time-limit ends are not terminal: λ-returns still bootstrap there, and the environment returns the state
    the action led to (the reset state only becomes the next observation)."""
    gamma = 0.9
    r = torch.tensor([[1.0], [0.5], [2.0]])
    q = torch.tensor([[3.0], [1.0], [4.0]])
    term, done = torch.zeros(3, 1), torch.zeros(3, 1)
    done[-1] = 1.0                                            # truncated, not terminated, at the window's end
    G = eng.lambda_returns(r, term, done, q, gamma, 0.5)
    assert torch.isclose(G[-1, 0], r[-1, 0] + gamma * q[-1, 0])
    term[-1] = 1.0                                            # a real terminal step does not bootstrap
    assert torch.isclose(eng.lambda_returns(r, term, done, q, gamma, 0.5)[-1, 0], r[-1, 0])

    env = eng.CartPole(4, torch.Generator().manual_seed(0))
    env.t[:] = env.max_steps - 1
    before = env.state.clone()
    a = torch.tensor([0, 1, 0, 1])
    nxt, _, term, done = env.step(a)
    assert bool(done.all()) and not bool(term.any())
    np.testing.assert_allclose(nxt.numpy(), eng.CartPole.dynamics(before, a.double()).float().numpy(), atol=1e-6)
    assert not torch.allclose(env.state.float(), nxt) and bool((env.t == 0).all())


@pytest.fixture
def one_torch_thread():
    """One intra-op torch thread for the test, as run() sets before Part B (small matmuls on a busy 2-core box
    are many times slower with more); the previous setting is restored afterwards."""
    from engine.core.nn import set_cpu_threads

    before = torch.get_num_threads()
    set_cpu_threads()
    yield
    torch.set_num_threads(before)


def test_dqn_bootstraps_from_a_frozen_copy_synced_every_100_steps(monkeypatch, one_torch_thread):
    """DQN baseline, its target network observed from outside: both Q-networks are built with forward hooks and
    the Huber loss is intercepted. At the update of env step i the bootstrap network must hold exactly the online
    weights from the end of step s = 100·⌊(i−1)/100⌋ (the last sync; steps 0, 100, 200, … sync after their
    update), stay frozen in between while the online net moves, and the regression target must be
    0.1 + 0.99·max_a Q_frozen(s', a) (just 0.1 when s' is past CartPole's limits), with Q_frozen recomputed here
    from those weights in a fresh network."""
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    events, nets = [], []
    real_qnet = eng._qnet

    def qnet_spy(hidden, layernorm):
        net = real_qnet(hidden, layernorm)
        role = ("online", "target")[len(nets)]
        nets.append(net)

        def hook(m, inp, out):
            events.append((role, inp[0].detach().clone(), out.detach().clone(),
                           parameters_to_vector(m.parameters()).detach().clone()))

        net.register_forward_hook(hook)
        return net

    def loss_spy(qa, y, *a, **k):
        events.append(("loss", qa.detach().clone(), y.detach().clone(), None))
        return real_loss(qa, y, *a, **k)

    real_loss = torch.nn.functional.smooth_l1_loss
    monkeypatch.setattr(eng, "_qnet", qnet_spy)
    monkeypatch.setattr(torch.nn.functional, "smooth_l1_loss", loss_spy)
    E, steps = 8, 250
    eng.train_dqn(eng.Config(run_pqn=True, env_steps=E * steps), seed=4)
    monkeypatch.undo()

    # split the record into env steps: each starts with the online net acting on the 8 envs
    start, per_step, i = {}, {}, -1
    for role, x, out, w in events:
        if role == "online" and x.shape[0] == E:
            i += 1
            start[i] = w                                     # online weights when step i begins
            per_step[i] = []
        elif i >= 0 and not (role == "online" and x.shape[0] == 16):      # 16 envs: the greedy evaluation after
            per_step[i].append((role, x, out, w))
    assert i == steps - 1
    fresh = real_qnet(128, False)
    updates = [j for j in range(steps) if per_step[j]]
    assert updates == list(range(updates[0], steps)) and 50 < updates[0] < 100   # from 500 stored transitions
    frozen_ids, moved = set(), 0
    for j in updates:
        roles = [e[0] for e in per_step[j]]
        assert sorted(roles) == ["loss", "online", "target"], (j, roles)
        (_, n, q_tgt, w_tgt), = [e for e in per_step[j] if e[0] == "target"]
        (_, _, y, _), = [e for e in per_step[j] if e[0] == "loss"]
        s = 100 * ((j - 1) // 100)
        assert torch.equal(w_tgt, start[s + 1]), f"step {j}: target weights are not those synced after step {s}"
        frozen_ids.add(s)
        if not torch.equal(start[j], start[s + 1]):
            moved += 1                                       # the online net has moved on since the sync
        with torch.no_grad():
            vector_to_parameters(start[s + 1], fresh.parameters())
            q_ref = fresh(n)
        torch.testing.assert_close(q_tgt, q_ref)
        term = (n[:, 0].abs() > eng.CartPole.x_lim) | (n[:, 2].abs() > eng.CartPole.theta_lim)
        want = 0.1 + 0.99 * (~term).float() * q_ref.max(-1).values
        torch.testing.assert_close(y, want)
    assert frozen_ids == {0, 100, 200} and moved > 150


# ---------------------------------------------------------------- what the page reads off the result


def _baird_A(gamma):
    """The expected linear TD matrix from the features written out by hand (upper states 2e_i + e_8, lower e_7 + 2e_8)."""
    X = np.zeros((7, 8))
    X[np.arange(6), np.arange(6)], X[:6, 7] = 2.0, 1.0
    X[6, 6], X[6, 7] = 1.0, 2.0
    return X, sum(np.outer(X[s], gamma * X[6] - X[s]) for s in range(7)) / 7


def _mlp_values(X, M, b, w, ln):
    h = np.einsum("sd,rkd->rsk", X, M) + b[:, None, :]
    if ln:
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + eng.LN_EPS)
    return np.einsum("rsk,rk->rs", np.maximum(h, 0.0), w)


@pytest.fixture(scope="module")
def short_run():
    """750 steps (not a multiple of the recording stride), 3 seeds, width 16, expected updates; run_baird driven with
    a known generator, plus the same setting through run() with the seed widget at 2."""
    cfg = eng.Config(steps=750, n_seeds=3, width=16, gamma=0.95, lr=0.03, seed=2)
    out = eng.run_baird(cfg, np.random.default_rng(11))
    return cfg, out, eng.run(cfg)


def test_linear_td_curves_follow_the_closed_form(short_run):
    """Expected linear TD is w_t = (I + αA)^t w_0 exactly; the plotted max|V| and ‖θ‖ of the linear run, the divergence
    badge's ‖w_T‖/‖w_0‖ and the eigenvalue in its detail are checked against that (numpy matrix powers)."""
    cfg, (rec, maxv, norm, final, ever, w_ratio, nets), res = short_run
    X, A = _baird_A(cfg.gamma)
    w0 = np.array([1, 1, 1, 1, 1, 1, 10, 1], float)
    assert rec[0] == 0 and rec[-1] == cfg.steps and np.all(np.diff(rec) > 0)
    assert np.all(np.diff(rec)[:-1] == cfg.steps // 100)
    B = np.eye(8) + cfg.lr * A
    for j, t in enumerate(rec):
        wt = np.linalg.matrix_power(B, int(t)) @ w0
        np.testing.assert_allclose(norm["linear"][:, j], np.linalg.norm(wt), rtol=1e-9)
        np.testing.assert_allclose(maxv["linear"][:, j], np.abs(X @ wt).max(), rtol=1e-9)
    wT = np.linalg.matrix_power(B, cfg.steps) @ w0
    np.testing.assert_allclose(w_ratio, np.linalg.norm(wT) / np.linalg.norm(w0), rtol=1e-9)
    assert res.metrics["linear_w_ratio"] == pytest.approx(np.linalg.norm(wT) / np.sqrt(107), rel=1e-9)
    assert res.lam_max == pytest.approx(np.linalg.eigvals(A).real.max(), rel=1e-12)
    assert res.metrics["lam_max"] == res.lam_max


def test_network_curves_and_final_values_from_the_weights(short_run):
    """For the three networks: max|V| at step 0 from the initial weights (the generator's first draws), and the final
    max|V| and ‖θ‖ (all of M, b, w) recomputed from the weights run_baird returns after the last step."""
    cfg, (rec, maxv, norm, final, ever, w_ratio, nets), res = short_run
    X = eng.baird_features()
    R, k = cfg.n_seeds, cfg.width
    g = np.random.default_rng(11)
    M0 = g.normal(0.0, np.sqrt(1 / 8), size=(R, k, 8))
    w0 = g.normal(0.0, np.sqrt(1 / k), size=(R, k))
    for v, ln in (("mlp", False), ("ln", True), ("ln_l2", True)):
        f0 = _mlp_values(X, M0, np.zeros((R, k)), w0, ln)
        np.testing.assert_allclose(maxv[v][:, 0], np.abs(f0).max(1), rtol=1e-9)
        np.testing.assert_allclose(norm[v][:, 0], np.sqrt((M0**2).sum((1, 2)) + (w0**2).sum(1)), rtol=1e-9)
        M, b, w = nets[v]
        fT = _mlp_values(X, M, b, w, ln)
        np.testing.assert_allclose(final[v], np.abs(fT).max(1), rtol=1e-9)
        np.testing.assert_allclose(maxv[v][:, -1], final[v])
        np.testing.assert_allclose(norm[v][:, -1], np.sqrt((M**2).sum((1, 2)) + (b**2).sum(1) + (w**2).sum(1)),
                                   rtol=1e-9)
        assert np.abs(b).max() > 1e-3                           # the biases moved, so leaving them out would show
    assert (_mlp_values(X, M0, np.zeros((R, k)), w0, True) < 0).any()   # signed values: the plot takes |V|


def test_median_norm_curve_and_badge_numbers(short_run, default_result):
    """The norm chart's line is the median over seeds at each recorded step; the badges' median / worst / slow-seed
    numbers are the median, maximum and count ≥ 0.1 of the final max|V| per seed."""
    cfg, _, res = short_run
    for r in (res, default_result):
        for v in eng.VARIANTS:
            for j in range(len(r.steps)):
                col = [x for x in r.norm[v][:, j] if np.isfinite(x)]
                if col:
                    assert r.norm_median[v][j] == pytest.approx(np.median(col), rel=1e-12), (v, j)
                else:
                    assert np.isnan(r.norm_median[v][j]), (v, j)
            fv = np.where(np.isfinite(r.final_maxv[v]), r.final_maxv[v], np.inf)
            assert r.metrics[f"{v}_median"] == np.median(fv)
            assert r.metrics[f"{v}_worst"] == np.max(fv)
            assert r.metrics[f"{v}_slow"] == np.sum(fv >= 0.1)
    # at the default two LayerNorm (η = 0) seeds end between 0.01 and 0.1 (0.060, 0.032), so the 0.1 cut matters
    fin = default_result.final_maxv["ln"]
    assert np.sum((fin > 0.01) & (fin < 0.1)) == 2 and default_result.metrics["ln_slow"] == 1
    assert np.isnan(default_result.final_maxv["mlp"]).any()      # blown-up seeds are left out of the median line


def test_sampled_updates_draw_minibatches_of_32_uniform_states():
    cfg = eng.Config(updates="sampled")
    mu = eng._state_weights(cfg, np.random.default_rng(0), 4000)
    assert mu.shape == (4000, 7)
    np.testing.assert_allclose(mu.sum(1), 1.0)
    np.testing.assert_allclose(mu * 32, np.round(mu * 32))
    np.testing.assert_allclose(mu.mean(0), 1 / 7, atol=0.01)       # every state, the lower one included
    # the radio button reaches the run: sampled and expected updates give different curves from the same init
    a = eng.run_baird(eng.Config(steps=500, n_seeds=2, width=8), np.random.default_rng(0))[1]
    b = eng.run_baird(eng.Config(steps=500, n_seeds=2, width=8, updates="sampled"), np.random.default_rng(0))[1]
    assert not np.allclose(a["ln_l2"], b["ln_l2"])


def test_part_b_metrics_and_badges_read_the_learner_they_name(monkeypatch):
    """Part B's wiring with the learners replaced by stubs: each metric card and badge reads its own learner, the seed
    widget reaches every learner, and the two badges use their stated bars (2 × no-LayerNorm's return; DQN / PQN
    seconds to a training return of 250)."""
    calls = []

    def fake_pqn(cfg, seed, layernorm, progress=None):
        calls.append(("pqn", seed, layernorm))
        ret = [100.0, 260.0, 200.0] if layernorm else [300.0, 10.0, 10.0]
        wall = [0.5, 1.0, 1.5] if layernorm else [0.1, 0.2, 0.3]
        return {"x": np.array([256.0, 512.0, 768.0]), "ret": np.array(ret), "wall": np.array(wall),
                "greedy": 100.0 if layernorm else 55.0, "seconds": 2.0 if layernorm else 3.0}

    def fake_dqn(cfg, seed, progress=None):
        calls.append(("dqn", seed, None))
        return {"x": np.array([256.0, 512.0, 768.0, 1024.0]), "ret": np.array([50.0, 100.0, 250.0, 300.0]),
                "wall": np.array([1.0, 2.0, 3.0, 4.0]), "greedy": 30.0, "seconds": 5.0}

    monkeypatch.setattr(eng, "train_pqn", fake_pqn)
    monkeypatch.setattr(eng, "train_dqn", fake_dqn)
    res = eng.run(eng.Config(run_pqn=True, steps=500, n_seeds=1, width=8, seed=7))
    assert sorted(calls, key=str) == sorted([("pqn", 7, True), ("pqn", 7, False), ("dqn", 7, None)], key=str)
    m = res.metrics
    assert (m["pqn_ln_greedy"], m["pqn_noln_greedy"], m["dqn_greedy"]) == (100.0, 55.0, 30.0)
    assert (m["pqn_seconds"], m["dqn_seconds"]) == (2.0, 5.0)
    assert res.pqn["PQN (LayerNorm)"]["greedy"] == 100.0 and res.pqn["PQN (no LayerNorm)"]["greedy"] == 55.0
    cl = {c.label: c for c in eng.claims(res)}
    learns = cl["greedy return, PQN with LayerNorm"]
    assert learns.threshold == 110.0 and not learns.passed       # 100 < max(60, 2 × 55)
    # the wall-clock badge reads the LayerNorm PQN's curve (first point >= 250 at 1.0 s; the no-LayerNorm stub,
    # which would get there at 0.1 s, is not it) and DQN's (3.0 s), not their total seconds (2 s and 5 s)
    wall = cl["DQN seconds / PQN seconds to a training return of 250"]
    assert (m["pqn_seconds_to_bar"], m["dqn_seconds_to_bar"]) == (1.0, 3.0)
    assert wall.measured == pytest.approx(3.0) and wall.passed
    assert "PQN reached 250 after 1.00 s, DQN after 3.00 s" in wall.detail
    assert "same env steps: 2.5" in wall.detail                  # the old throughput ratio, as information only


def test_seconds_to_reach_takes_the_first_point_at_or_above_the_bar():
    wall = np.array([0.5, 1.0, 1.5, 2.0, 2.5])
    ret = np.array([20.0, 249.9, 250.0, 120.0, 400.0])
    assert eng.seconds_to_reach(wall, ret, 250.0) == 1.5         # equal counts; the later dip does not matter
    assert eng.seconds_to_reach(wall, ret, 10.0) == 0.5
    assert eng.seconds_to_reach(wall, ret, 300.0) == 2.5
    assert eng.seconds_to_reach(wall, ret, 401.0) == float("inf")   # never reaches it
    assert eng.seconds_to_reach(np.array([]), np.array([]), 1.0) == float("inf")   # no finished episode yet


def test_time_to_bar_badge_when_a_learner_never_reaches_the_bar():
    base = {"pqn_seconds": 1.5, "dqn_seconds": 9.0}
    inf = float("inf")
    # PQN never: fails, whatever DQN did
    for d in (3.0, inf):
        c = eng.time_to_bar_claim({**base, "pqn_seconds_to_bar": inf, "dqn_seconds_to_bar": d})
        assert c.measured == 0.0 and not c.passed and "PQN never reached 250" in c.detail
    # only DQN never: the ratio is at least DQN's whole run over PQN's time to the bar
    c = eng.time_to_bar_claim({**base, "pqn_seconds_to_bar": 0.5, "dqn_seconds_to_bar": inf})
    assert c.measured == pytest.approx(18.0) and c.passed and "DQN never reached it" in c.detail
    c = eng.time_to_bar_claim({**base, "pqn_seconds_to_bar": 0.5, "dqn_seconds_to_bar": 0.9})
    assert c.measured == pytest.approx(1.8) and not c.passed


def test_time_to_bar_badge_recomputed_from_the_curves(pqn_result):
    """The wall-clock badge at Part B's defaults, recomputed with a plain loop over each learner's recorded curve:
    the first recorded point whose training return is at least 250 (half of CartPole-v1's 500-step cap) gives the
    seconds; no such point gives +inf."""
    assert eng.RETURN_BAR == 250 == eng.CartPole.max_steps / 2 and eng.CartPole.max_steps == 500
    m = pqn_result.metrics

    def first_time(curve):
        for w, r in zip(curve["wall"], curve["ret"]):
            if r >= 250:
                return float(w)
        return float("inf")

    t_pqn = first_time(pqn_result.pqn["PQN (LayerNorm)"])
    t_dqn = first_time(pqn_result.pqn["DQN (replay + target)"])
    assert (m["pqn_seconds_to_bar"], m["dqn_seconds_to_bar"]) == (t_pqn, t_dqn)
    if t_pqn == float("inf"):
        want = 0.0
    elif t_dqn == float("inf"):
        want = m["dqn_seconds"] / t_pqn
    else:
        want = t_dqn / t_pqn
    (badge,) = [c for c in eng.claims(pqn_result) if c.label.startswith("DQN seconds / PQN seconds to")]
    assert badge.statement.startswith("PQN reaches a training return of 250 in less wall-clock time than DQN")
    assert badge.op == ">=" and badge.threshold == 2.0
    assert badge.measured == pytest.approx(want, rel=1e-12)
    assert badge.passed == (want >= 2.0)
    # both curves share the smoothing and the time origin: x in env steps every 256, seconds from 0 and rising
    for name in ("PQN (LayerNorm)", "DQN (replay + target)"):
        d = pqn_result.pqn[name]
        assert len(d["wall"]) == len(d["ret"]) == len(d["x"]) and np.all(np.diff(d["wall"]) >= 0)
        assert 0 < d["wall"][0] <= d["wall"][-1] <= d["seconds"]
        assert np.all(np.diff(d["x"]) % 256 == 0)


def test_page_marks_the_bar_and_states_each_learners_time(pqn_result):
    """The page with Part B on, read back: a dashed line at 250 on the return-vs-seconds chart, and the caption
    under it states each learner's seconds to 250 (or that it never got there) as the result has them."""
    from engine.core.params import to_query
    from tests.pagetext import figures

    at = open_page("pqn", to_query(PQN_CONFIG), seed=(("engine.pqn", PQN_CONFIG, pqn_result),))
    shapes = figures(at)["pqn_wall"]["layout"]["shapes"]
    assert [(s["y0"], s["y1"], s["line"]["dash"]) for s in shapes] == [(250, 250, "dash")]
    cap = next(c.value for c in at.caption if c.value.startswith("The wall-clock badge times learning"))
    m = pqn_result.metrics
    for who, key in (("PQN with LayerNorm", "pqn"), ("DQN", "dqn")):
        sec = m[f"{key}_seconds_to_bar"]
        said = f"reached it after {sec:.2f} s" if np.isfinite(sec) else "never reached it"
        assert f"{who} {said}" in cap


class _RecordingCartPole(eng.CartPole):
    """The engine's CartPole, keeping every step's done flags (the first instance is the training one)."""

    made = []

    def __init__(self, n, gen):
        super().__init__(n, gen)
        self.dones = []
        _RecordingCartPole.made.append(self)

    def step(self, action):
        out = super().step(action)
        self.dones.append(out[3].clone())
        return out


def _episode_returns(dones):
    """Returns of the finished episodes in the order the engine appends them (step by step, env by env): reward 1 per
    step, so an episode's return is its length."""
    length = np.zeros(dones[0].shape[0])
    out, per_step = [], []
    for d in dones:
        length += 1
        d = d.numpy()
        out.extend(length[d].tolist())
        length[d] = 0
        per_step.append(len(out))
    return out, per_step


def test_training_curves_are_the_last_20_episode_returns(monkeypatch, one_torch_thread):
    """The 'Training return (last 20 episodes) vs env steps' curves of PQN and DQN, rebuilt from the environment's
    done flags: x = env steps taken so far, y = mean return of the last 20 finished episodes; PQN's targets use the
    λ of the slider."""
    from types import SimpleNamespace

    lams = []
    real_lr = eng.lambda_returns
    monkeypatch.setattr(eng, "lambda_returns", lambda *a: lams.append(a[-1]) or real_lr(*a))
    monkeypatch.setattr(eng, "CartPole", _RecordingCartPole)
    E, T = 8, eng.ROLLOUT
    cfg = SimpleNamespace(n_envs=E, env_steps=E * T * 40, lam=0.3)
    _RecordingCartPole.made = []
    out = eng.train_pqn(cfg, seed=1, layernorm=True)
    assert set(lams) == {0.3} and len(lams) == 40
    finished, count = _episode_returns(_RecordingCartPole.made[0].dones)
    want_x, want_y = [], []
    for u in range(40):
        n = count[(u + 1) * T - 1]
        if n:
            want_x.append((u + 1) * E * T)
            want_y.append(np.mean(finished[:n][-20:]))
    np.testing.assert_array_equal(out["x"], want_x)
    np.testing.assert_allclose(out["ret"], want_y)
    assert len(finished) > 25                                    # more than 20 episodes, so the window matters

    _RecordingCartPole.made = []
    out = eng.train_dqn(SimpleNamespace(env_steps=8 * 200), seed=1)
    finished, count = _episode_returns(_RecordingCartPole.made[0].dones)
    want = [((i + 1) * 8, np.mean(finished[:count[i]][-20:])) for i in range(200) if i % 32 == 0 and count[i]]
    np.testing.assert_array_equal(out["x"], [x for x, _ in want])
    np.testing.assert_allclose(out["ret"], [y for _, y in want])


def test_greedy_return_counts_each_env_until_its_first_episode_ends():
    """The greedy-return cards: a policy that always pushes right, on 16 CartPoles from the generator's start states,
    against a numpy loop over gymnasium's equations that stops each env at its first termination."""
    class Right(torch.nn.Module):
        def forward(self, obs):
            return torch.stack([torch.zeros(len(obs)), torch.ones(len(obs))], -1)

    got = eng._greedy_eval(Right(), torch.Generator().manual_seed(5))
    starts = ((torch.rand(16, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64) - 0.5) * 0.1).numpy()
    lengths = []
    for s in starts:
        n = 0
        while n < 500:
            s = eng.CartPole.dynamics(s, 1)
            n += 1
            if abs(s[0]) > 2.4 or abs(s[2]) > 12 * 2 * np.pi / 360:
                break
        lengths.append(n)
    assert len(set(lengths)) > 1                                 # envs end at different steps
    assert got == pytest.approx(np.mean(lengths))


# ----------------------------------------------------------------------------- what the page draws


def test_page_draws_every_seed_and_counts_the_diverged_ones(default_result):
    """The default page, read back: each seed's |V| curve is that seed's own, the final-value panel puts each finite
    final value where it is and every non-finite one at 1e30, the norm panel is the per-step median over the seeds
    whose norm is still finite, and the caption's diverged counts are the seeds whose recorded max|V| went above
    the threshold or stopped being finite (counted here from the curves)."""

    res = default_result
    at = open_page("pqn", seed=(("engine.pqn", eng.Config(), default_result),))
    figs = charts(at)

    curves = [t for t in figs["maxv"] if t.get("name")]
    k = 0
    for v in eng.VARIANTS:
        for s in range(res.maxv[v].shape[0]):
            assert curves[k]["name"] == eng.LABELS[v]
            np.testing.assert_allclose(values(curves[k]["y"]), res.maxv[v][s])
            k += 1
    assert k == len(curves)

    finals = {t["name"]: values(t["y"]) for t in figs["final"] if t.get("name")}
    for v in eng.VARIANTS:
        fv, y = res.final_maxv[v], finals[eng.LABELS[v]]
        bad = ~np.isfinite(fv)
        assert np.all(y[bad] == 1e30)
        np.testing.assert_allclose(y[~bad], np.maximum(fv[~bad], 1e-30))
    assert any((~np.isfinite(res.final_maxv[v])).any() for v in eng.VARIANTS)   # the 1e30 row is exercised

    norms = {t["name"]: values(t["y"]) for t in figs["norm"]}
    for v in eng.VARIANTS:
        want = [np.median(col[np.isfinite(col)]) if np.isfinite(col).any() else np.nan for col in res.norm[v].T]
        np.testing.assert_allclose(norms[eng.LABELS[v]], want, rtol=1e-9)

    cap = next(c.value for c in at.caption if c.value.startswith("Seeds that diverged"))
    for v in eng.VARIANTS:
        mv = res.maxv[v]
        went = np.any(~np.isfinite(mv) | (mv > eng.DIVERGE), axis=1)
        assert f"{eng.LABELS[v]} {int(went.sum())} of {len(mv)}" in cap
    assert any(np.any(~np.isfinite(res.maxv[v]) | (res.maxv[v] > eng.DIVERGE)) for v in eng.VARIANTS)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_q_lambda_targets_bootstrap_from_the_true_next_observation(monkeypatch):
    """Spec, Part B step 2: G_t bootstraps from max_a Q(o'_t, a), o'_t the state the action led to (the
    terminal state itself at an episode end, not the reset one). Every rollout's q_next_max handed to
    lambda_returns is rebuilt here from gymnasium's equations (CartPole.dynamics on the state before the step)
    and the learner's own network at that moment."""
    nets, nexts, checked = [], [], []
    real_qnet, real_step, real_lambda = eng._qnet, eng.CartPole.step, eng.lambda_returns

    def qnet(hidden, layernorm):
        nets.append(real_qnet(hidden, layernorm))
        return nets[-1]

    def step(self, action):
        nexts.append(eng.CartPole.dynamics(self.state.clone(), action.double()).float())
        return real_step(self, action)

    def lambda_returns(r, term, done, q_next_max, gamma, lam):
        on = torch.stack(nexts[-r.shape[0]:])
        with torch.no_grad():
            want = nets[0](on).max(-1).values
        torch.testing.assert_close(q_next_max, want, rtol=1e-5, atol=1e-5)
        assert gamma == 0.99 and lam == cfg.lam
        checked.append(bool(done.any()))
        return real_lambda(r, term, done, q_next_max, gamma, lam)

    monkeypatch.setattr(eng, "_qnet", qnet)
    monkeypatch.setattr(eng.CartPole, "step", step)
    monkeypatch.setattr(eng, "lambda_returns", lambda_returns)
    cfg = eng.Config(run_pqn=True, env_steps=10_000)
    eng.train_pqn(cfg, 0, layernorm=True)
    assert len(nets) == 1 and len(checked) == 10_000 // (cfg.n_envs * eng.ROLLOUT)
    assert sum(checked) > 5        # episode ends inside rollouts were part of the check


def test_divergence_counts_a_blow_up_at_any_step_not_only_the_last(monkeypatch):
    """Spec: a run counts as diverged if any value is non-finite or max|V| exceeds the bar at some step. With
    the bar lowered to 0.3, LayerNorm seeds that start above it and then converge towards V = 0 must count as
    diverged; `ever` must cover every recorded point above the bar."""
    monkeypatch.setattr(eng, "DIVERGE", 0.3)
    cfg = eng.Config(steps=750, n_seeds=3, width=16, gamma=0.95, lr=0.03)
    rec, maxv, norm, final, ever, w_ratio, nets = eng.run_baird(cfg, np.random.default_rng(11))
    came_back = 0
    for v in eng.VARIANTS:
        above = np.any(~np.isfinite(maxv[v]) | (maxv[v] > 0.3), axis=1)
        assert np.all(ever[v][above]), v
        came_back += int(np.sum(above & (final[v] < 0.3)))
    assert came_back >= 1            # the check has power: some seed crossed the bar and ended below it
