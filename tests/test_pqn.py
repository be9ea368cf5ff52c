"""PQN / LayerNorm TD: claims at the default config and independent checks."""

import numpy as np
import pytest
import torch

from engine import pqn as eng


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
    assert (eng.estimated_seconds(eng.Config(run_pqn=True, n_envs=8))
            > eng.estimated_seconds(eng.Config(run_pqn=True, n_envs=64)))


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


def test_pqn_part_b_at_the_spec_env_steps():
    """Part B at its defaults (60 000 env steps, 32 envs, seed 0): LayerNorm PQN learns CartPole while the same
    learner without LayerNorm does not (measured 118 vs 9; at seeds 0-7 LayerNorm 90-336, no LayerNorm 9-22). The
    wall-clock badge is not asserted here (timings belong to the benchmark); only that both times were measured."""
    res = eng.run(eng.Config(run_pqn=True, steps=500))
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
