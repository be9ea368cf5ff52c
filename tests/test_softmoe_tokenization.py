import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from engine import softmoe_tokenization as eng
from engine.core.nn import load_state
from tests.pagetext import charts, open_page, values


@pytest.fixture(scope="module")
def default_result():
    # the default config except a shorter live run (the live curve feeds no claim)
    return eng.run(eng.Config(live_steps=50))


def test_claims_at_default(default_result):
    cl = eng.claims(default_result)
    assert len(cl) == 7, "shipped curves/weights missing"
    by_label = {c.label: c for c in cl}
    # exact mechanism claims, tokenised SoftMoE-4 beating the dense head, and the single scaled expert keeping
    # most of that gain pass
    for c in cl[:4]:
        assert c.passed, c.describe()
    # the flattened SoftMoE stays near the dense baseline, far behind the tokenised heads (paper's ordering)
    sh = eng.load_shipped()
    fin = eng.final_stats(sh)
    assert fin["softmoe4_flatten"] > 1.3 * fin["softmoe4_per_conv"]
    # the gain claim is measured from the shipped regression curves
    last = sh["step"] >= 0.9 * sh["step"][-1]
    dense = sh["dense_test_mse"][:, last].mean()
    moe4 = sh["softmoe4_per_conv_test_mse"][:, last].mean()
    assert by_label["relative held-out MSE reduction vs dense"].measured == pytest.approx((dense - moe4) / dense)
    # the pruning badge is measured on the RL-trained weights (see test_rl_claims_recomputed_from_the_raw_file);
    # on the regression-trained ones expert redundancy is NOT reproduced, and the page says so
    mk = default_result.masking
    assert mk["masked"].shape == (eng.TRAIN_SEEDS, 4)
    m = default_result.metrics
    assert m["mask_mean_drop"] == pytest.approx((mk["base"][:, None] - mk["masked"]).mean())   # all seeds × experts
    assert m["mask_worst_drop"] == pytest.approx((mk["base"] - mk["masked"].min(1)).mean())
    assert m["mask_mean_drop"] > 0.15 and m["mask_mean_drop"] <= m["mask_worst_drop"]
    assert f"regression-trained weights the worst case is {m['mask_worst_drop']:.2f}" in cl[6].detail
    # the page's explanation of that failure: it is not an argmax artefact, the continuous Q-error to Q*
    # also blows up when an expert is pruned
    assert m["mask_mse_pruned"] > 3 * m["mask_mse_base"]


def _pruned_softmoe_by_hand(moe, x, keep):
    """A SoftMoE with only the experts in `keep`, written from the equations in numpy: ℓ2-normalised routing
    logits, dispatch softmax over tokens for the kept slots, combine softmax over the kept slots only."""
    X = x.numpy().astype(np.float64)
    phi = moe.phi.detach().numpy()[:, keep]                                   # (d, k, p)
    w1, b1 = moe.w1.detach().numpy()[keep], moe.b1.detach().numpy()[keep]
    w2, b2 = moe.w2.detach().numpy()[keep], moe.b2.detach().numpy()[keep]
    s = float(moe.scale.detach())
    out = np.zeros_like(X)
    for bi in range(X.shape[0]):
        xn = X[bi] / (np.linalg.norm(X[bi], axis=1, keepdims=True) + 1e-6)
        pn = phi / (np.linalg.norm(phi, axis=0, keepdims=True) + 1e-6)
        L = s * np.einsum("md,dkp->mkp", xn, pn)
        Dm = np.exp(L - L.max(0)) / np.exp(L - L.max(0)).sum(0)
        Lf = L.reshape(L.shape[0], -1)
        Cm = np.exp(Lf - Lf.max(1, keepdims=True))
        Cm = (Cm / Cm.sum(1, keepdims=True)).reshape(L.shape)
        xs = np.einsum("mkp,md->kpd", Dm, X[bi])
        y = np.einsum("kph,khd->kpd", np.maximum(np.einsum("kpd,kdh->kph", xs, w1) + b1[:, None], 0), w2) + b2[:, None]
        out[bi] = np.einsum("mkp,kpd->md", Cm, y)
    return out


def test_expert_mask_is_structural_pruning():
    # masking an expert must equal deleting it: same dispatch for the kept slots, combine renormalised over them
    net = eng.build("softmoe4_per_conv", eng.SHIPPED_COLS)
    net.load_state_dict(load_state(eng.shipped_moe4_paths()[0])["state"])
    net.eval()
    t, b, p = eng.all_states(eng.SHIPPED_COLS)
    with torch.no_grad():
        x = net.tokens(eng.observe(t[::9], b[::9], p[::9], eng.SHIPPED_COLS))
        for j in range(4):
            mask = torch.ones(4)
            mask[j] = 0
            net.moe.expert_mask = mask
            got = net.moe(x).numpy()
            keep = [k for k in range(4) if k != j]
            np.testing.assert_allclose(got, _pruned_softmoe_by_hand(net.moe, x, keep), atol=1e-5)
        net.moe.expert_mask = None
        # and the unmasked layer is the hand formula with every expert kept
        np.testing.assert_allclose(net.moe(x).numpy(), _pruned_softmoe_by_hand(net.moe, x, [0, 1, 2, 3]), atol=1e-5)


def test_greedy_success_is_exhaustive_over_starts():
    # greedy success plays every (ball column, paddle start) once; a policy that always stays catches exactly the
    # starts where ball and paddle share a column (1/cols), one that tracks the ball catches all of them
    cols = 5

    class Stay(torch.nn.Module):
        def forward(self, o):
            q = torch.zeros(len(o), 3)
            q[:, 1] = 1
            return q

    class Track(torch.nn.Module):
        def forward(self, o):
            ball = o[:, 0].sum(1).argmax(1)
            pad = o[:, 1, -1].argmax(1)
            a = torch.sign(ball - pad).long() + 1
            return torch.nn.functional.one_hot(a, 3).float()

    assert eng.greedy_success(Stay(), cols) == pytest.approx(1 / cols)
    assert eng.greedy_success(Track(), cols) == pytest.approx(1.0)


def test_checkpoints_load_and_have_four_experts():
    paths = eng.shipped_moe4_paths()
    assert len(paths) == eng.TRAIN_SEEDS
    succ = []
    for path in paths:
        ck = load_state(path)
        net = eng.build("softmoe4_per_conv", eng.SHIPPED_COLS)
        net.load_state_dict(ck["state"])
        assert net.moe.n == 4 and int(ck["extra"]["steps"]) == eng.TRAIN_STEPS
        assert path.stat().st_size < 2 * 1024 * 1024
        succ.append(eng.greedy_success(net, eng.SHIPPED_COLS))
    assert np.mean(succ) > 0.5      # the trained heads play far above chance (0.2 for 5 columns)


def test_shipped_heads_fit_their_training_states():
    # the budget is long enough for every head to fit the states it trains on (the comparison is about
    # held-out error, not about training speed)
    sh = eng.load_shipped()
    for a in eng.ARCHS:
        assert sh[f"{a}_train_mse"][:, -5:].mean() < 5e-3, a


def _moe(d, m, n, cf, hidden, seed=0):
    torch.manual_seed(seed)
    SoftMoE, _ = eng._modules()
    moe = SoftMoE(d, m, n, cf, hidden).double()
    with torch.no_grad():
        for prm in moe.parameters():
            prm.normal_()
    return moe


def test_softmoe_matches_naive_loops():
    d, m, n, cf, hid = 3, 5, 2, 1.0, 4
    moe = _moe(d, m, n, cf, hid)
    x = torch.randn(2, m, d, dtype=torch.float64)
    out = moe(x).detach().numpy()
    phi, w1, b1, w2, b2 = (t.detach().numpy() for t in (moe.phi, moe.w1, moe.b1, moe.w2, moe.b2))
    p = moe.p
    for b in range(2):
        X = x[b].numpy()
        L = np.zeros((m, n, p))
        for i, j, k in itertools.product(range(m), range(n), range(p)):
            L[i, j, k] = sum(X[i, e] * phi[e, j, k] for e in range(d))
        Y = np.zeros((n, p, d))
        for j, k in itertools.product(range(n), range(p)):
            den = sum(math.exp(L[i, j, k]) for i in range(m))
            xs = sum(math.exp(L[i, j, k]) / den * X[i] for i in range(m))
            h = np.maximum(xs @ w1[j] + b1[j], 0)
            Y[j, k] = h @ w2[j] + b2[j]
        for i in range(m):
            den = sum(math.exp(L[i, j, k]) for j in range(n) for k in range(p))
            o = sum(math.exp(L[i, j, k]) / den * Y[j, k] for j in range(n) for k in range(p))
            np.testing.assert_allclose(out[b, i], o, atol=1e-6)


def test_softmax_axes_and_slot_count():
    for m, n, cf in [(50, 4, 1.0), (16, 3, 0.5), (1, 4, 1.0), (10, 8, 2.0)]:
        moe = _moe(6, m, n, cf, 5)
        assert moe.p == max(1, math.ceil(m * cf / n))
        D, C = moe.weights(torch.randn(3, m, 6, dtype=torch.float64))
        np.testing.assert_allclose(D.sum(1).detach().numpy(), 1.0, atol=1e-12)
        np.testing.assert_allclose(C.sum((2, 3)).detach().numpy(), 1.0, atol=1e-12)


def test_single_slot_outputs_expert_of_weighted_mean():
    moe = _moe(4, 7, 1, 1 / 7, 6)
    assert moe.p == 1
    x = torch.randn(1, 7, 4, dtype=torch.float64)
    out = moe(x)[0].detach()
    w = torch.softmax((x[0] @ moe.phi[:, 0, 0]).detach(), 0)
    u = (w[:, None] * x[0]).sum(0)
    e = torch.relu(u @ moe.w1[0] + moe.b1[0]) @ moe.w2[0] + moe.b2[0]
    np.testing.assert_allclose(out.numpy(), np.tile(e.detach().numpy(), (7, 1)), atol=1e-10)


def test_hand_checked_catch_episode():
    cols = 5
    t, b, p = torch.tensor([0]), torch.tensor([2]), torch.tensor([0])
    rewards = []
    for a in [2, 2] + [1] * 7:
        t, b, p, r, done = eng.env_step(t, b, p, torch.tensor([a]), cols)
        rewards.append(float(r))
    assert int(t) == 9 and bool(done) and rewards == [0.0] * 8 + [1.0]


def test_q_star_matches_brute_force_search():
    cols, g = 4, eng.GAMMA
    t, b, p = eng.all_states(cols)
    q = eng.q_star(t, b, p, cols)

    def value(tt, bb, pp):  # exhaustive search over all action sequences via the env
        if tt == 9:
            return None
        return max(qa(tt, bb, pp, a) for a in range(3))

    def qa(tt, bb, pp, a):
        t2, b2, p2, r, done = eng.env_step(torch.tensor([tt]), torch.tensor([bb]), torch.tensor([pp]),
                                           torch.tensor([a]), cols)
        return float(r) if bool(done) else g * value(int(t2), int(b2), int(p2))

    for i in range(0, len(t), 7):
        for a in range(3):
            assert abs(qa(int(t[i]), int(b[i]), int(p[i]), a) - float(q[i, a])) < 1e-6


def test_parameter_counts_closed_form():
    enc = (2 * 9 * 16 + 16) + (16 * 9 * 16 + 16)
    assert eng.n_params(eng.build("dense", 5)) == enc + 800 * 64 + 64 + 64 * 3 + 3
    ln = 2 * 16
    scale = 1  # the learned scale of the ℓ2 routing normalisation
    moe4 = 16 * 4 * 13 + 4 * (16 * 64 + 64 + 64 * 16 + 16) + scale
    assert eng.n_params(eng.build("softmoe4_per_conv", 5)) == enc + ln + moe4 + 800 * 3 + 3
    moe1 = 16 * 1 * 50 + (16 * 256 + 256 + 256 * 16 + 16) + scale
    assert eng.n_params(eng.build("softmoe1_per_conv_scaled", 5)) == enc + ln + moe1 + 800 * 3 + 3


def test_flatten_slots_identical_and_bad_input():
    res = eng.run(eng.Config(tokenization="flatten", live_steps=50, columns=3, experts=2))
    assert res.anatomy["flatten"]["m"] == 1
    assert np.allclose(res.anatomy["flatten"]["D"], 1.0)
    with pytest.raises(eng.InputError):
        eng.arch_kwargs("no_such_head")


def test_l2_routing_matches_hand_formula():
    # Soft MoE's scaled ℓ2 normalisation: logits = s · <x/‖x‖, φ/‖φ‖> per (token, slot), from raw numpy
    torch.manual_seed(1)
    SoftMoE, _ = eng._modules()
    d, m, n = 5, 6, 2
    moe = SoftMoE(d, m, n, 1.0, 4, l2_routing=True).double()
    with torch.no_grad():
        moe.scale.fill_(3.0)
    x = torch.randn(2, m, d, dtype=torch.float64) * 7.0
    D, C = moe.weights(x)
    X, phi = x.numpy(), moe.phi.detach().numpy()
    for b in range(2):
        L = np.zeros((m, n, moe.p))
        for i, j, k in itertools.product(range(m), range(n), range(moe.p)):
            u, v = X[b, i], phi[:, j, k]
            L[i, j, k] = 3.0 * (u / np.linalg.norm(u)) @ (v / np.linalg.norm(v))
        np.testing.assert_allclose(D[b].detach().numpy(), np.exp(L) / np.exp(L).sum(0, keepdims=True), atol=1e-6)
        Lf = L.reshape(m, -1)
        Cf = np.exp(Lf) / np.exp(Lf).sum(1, keepdims=True)
        np.testing.assert_allclose(C[b].reshape(m, -1).detach().numpy(), Cf, atol=1e-6)
    # routing ignores token scale; slot inputs still use the raw tokens
    D2, _ = moe.weights(x * 10)
    np.testing.assert_allclose(D2.detach().numpy(), D.detach().numpy(), atol=1e-6)   # up to the 1e-6 eps
    xs = moe.slot_inputs(x)
    np.testing.assert_allclose(xs.detach().numpy(), np.einsum("bmnp,bmd->bnpd", D.detach().numpy(), X), atol=1e-9)


def test_shipped_curves_reproduce_with_the_script_settings():
    # the shipped curves came from train_head: rerunning seed 0 gives the same first evaluations exactly
    sh = eng.load_shipped()
    for arch in ("dense", "softmoe4_per_conv"):
        _, curve = eng.train_head(arch, eng.SHIPPED_COLS, 2 * eng.EVAL_EVERY, 0, 0.5)
        np.testing.assert_allclose(curve["test_mse"], sh[f"{arch}_test_mse"][0, :3], atol=1e-6)
        np.testing.assert_allclose(curve["success"], sh[f"{arch}_success"][0, :3], atol=1e-6)


def test_paper_single_expert_redundancy_matches_hand_loop(default_result):
    # the paper-faithful redundancy number (scaled single expert vs SoftMoE-4, both trained from scratch, final
    # greedy success) recomputed independently from the raw curve file with explicit loops
    from engine.core.nn import asset_path
    z = np.load(asset_path(eng.ASSET_DIR) / "curves.npz")
    steps = z["step"]

    def final_success(arch):
        vals = []
        for seed_curve in z[f"{arch}_success"]:
            for step, v in zip(steps, seed_curve):
                if step >= 0.9 * steps[-1]:
                    vals.append(float(v))
        return sum(vals) / len(vals)

    want = final_success("softmoe4_per_conv") - final_success("softmoe1_per_conv_scaled")
    got = default_result.metrics["paper_single_expert_success_drop"]
    assert got == pytest.approx(want, abs=1e-9)
    # it is a shown number, not a sixth badge, and the spec's pruning badge is unchanged
    cl = eng.claims(default_result)
    assert len(cl) == 7 and cl[6].threshold == 0.15 and cl[6].label.startswith("drop in greedy success when the costliest")


def test_shipped_curves_support_the_page_caption_on_width_and_tokenisation():
    # the page's caption says widening the dense head is not what helps, and per-conv tokens beat the other two
    # tokenisations; these are the shipped curves it reads (measured: dense 0.365, dense x4 0.360, per-conv 0.197,
    # per-feature 0.332, flattened 0.336)
    fin = eng.final_stats(eng.load_shipped())
    assert fin["dense4"] > 0.9 * fin["dense"]
    assert fin["softmoe4_per_conv"] < 0.75 * min(fin["softmoe4_per_feat"], fin["softmoe4_flatten"], fin["dense4"])


def test_online_rl_learns_catch_from_rewards_alone(monkeypatch):
    """The RL live run learns to catch from the ±1 rewards (it never reads Q*), and it follows the rewards: with
    their sign flipped, the same learner learns to miss."""
    def q_star_forbidden(*_a, **_k):
        raise AssertionError("the RL learner must not read Q*")

    monkeypatch.setattr(eng, "q_star", q_star_forbidden)
    net, curve = eng.train_head_rl("dense", 5, 20000, seed=0)
    assert curve["step"][0] == 0 and curve["step"][-1] == eng.rl_rollouts(20000) * eng.RL_ENVS * eng.RL_ROLLOUT
    assert len(curve["success"]) == eng.RL_EVALS + 1 and np.all(np.diff(curve["step"]) > 0)
    assert curve["success"][-1] >= 0.8 and curve["success"][-1] == eng.greedy_success(net, 5)
    assert curve["train_reward"][-1] > 0.5          # ε-greedy training games are mostly caught by the end

    step, success = eng.env_step, eng.greedy_success

    def flipped(t, b, p, a, cols):
        t, b, p, r, done = step(t, b, p, a, cols)
        return t, b, p, -r, done

    monkeypatch.setattr(eng, "env_step", flipped)
    monkeypatch.setattr(eng, "greedy_success", lambda n, c: 0.0)      # its evaluation would play the flipped game
    net, _ = eng.train_head_rl("dense", 5, 20000, seed=0)
    monkeypatch.undo()
    # chance is 0.2 (staying put catches only when the paddle starts under the ball): learned missing is far below
    assert success(net, 5) <= 0.05


def test_online_rl_targets_are_lambda_returns_of_the_games(monkeypatch):
    """One rollout by hand: the learner's regression targets are engine.pqn.lambda_returns of the rewards it got,
    with no bootstrap past a game's end."""
    from engine import pqn

    seen = {}
    real = pqn.lambda_returns

    def spy(r, term, done, q_next, gamma, lam):
        G = real(r, term, done, q_next, gamma, lam)
        seen.update(r=r.clone(), done=done.clone(), q_next=q_next.clone(), G=G.clone(), gamma=gamma, lam=lam)
        return G

    monkeypatch.setattr(pqn, "lambda_returns", spy)
    eng.train_head_rl("dense", 4, eng.RL_ENVS * eng.RL_ROLLOUT * 60, seed=3, evals=2)
    r, done, q_next, G = seen["r"], seen["done"], seen["q_next"], seen["G"]
    assert seen["gamma"] == eng.GAMMA and seen["lam"] == eng.RL_LAMBDA
    assert r.shape == (eng.RL_ROLLOUT, eng.RL_ENVS) and set(r.unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert torch.equal(r != 0, done.bool())        # a reward arrives exactly when a game ends
    # backwards by hand, one game at a time
    for e in range(eng.RL_ENVS):
        nxt = None
        for t in range(eng.RL_ROLLOUT - 1, -1, -1):
            if done[t, e]:
                want = r[t, e]
            elif nxt is None:
                want = r[t, e] + eng.GAMMA * q_next[t, e]
            else:
                want = r[t, e] + eng.GAMMA * ((1 - eng.RL_LAMBDA) * q_next[t, e] + eng.RL_LAMBDA * nxt)
            assert float(G[t, e]) == pytest.approx(float(want), abs=1e-6)
            nxt = G[t, e]


def test_live_rl_mode_runs_and_reports_its_curve():
    res = eng.run(eng.Config(live_mode="rl", rl_steps=2000, live_arch="dense"))
    lv = res.live
    assert lv["mode"] == "rl" and "test_mse" not in lv and len(lv["success"]) == eng.RL_EVALS + 1
    assert res.metrics["live_final_success"] == lv["success"][-1] and "live_final_mse" not in res.metrics
    # the claims do not depend on the live run
    base = eng.run(eng.Config(live_steps=50))
    assert [c.measured for c in eng.claims(res)] == [c.measured for c in eng.claims(base)]


def test_rl_work_guard_refuses_with_a_setting_that_fits():
    """Settings estimated over the limit are refused before any training, naming the most steps that fit; the
    largest setting the benchmark times passes; regression mode never trips it."""
    heavy = eng.HEAVY_CONFIG
    assert heavy.live_mode == "rl" and eng.rl_seconds(heavy) <= eng.RL_LIMIT_S
    eng.check_budget(heavy)
    big = eng.Config(live_mode="rl", live_arch="softmoe1_per_conv_scaled", width_scale=8, columns=9, rl_steps=40000)
    assert eng.rl_seconds(big) > eng.RL_LIMIT_S
    with pytest.raises(eng.InputError) as e:
        eng.run(big)
    msg = str(e.value)
    fits = int(msg.split("at most ")[1].split(" environment")[0].replace(",", ""))
    assert fits % 2000 == 0 and 2000 <= fits < 40000
    assert eng.rl_seconds(dataclasses.replace(big, rl_steps=fits)) <= eng.RL_LIMIT_S
    assert eng.rl_seconds(dataclasses.replace(big, rl_steps=fits + 2000)) > eng.RL_LIMIT_S
    assert eng.rl_seconds(dataclasses.replace(big, live_mode="regression")) == 0.0
    # the estimate grows with every dimension of the head
    base = eng.Config(live_mode="rl", live_arch="softmoe1_per_conv_scaled")
    for change in (dict(columns=9), dict(width_scale=8), dict(rl_steps=40000)):
        assert eng.rl_seconds(dataclasses.replace(base, **change)) > eng.rl_seconds(base), change
    # the defaults' head at the spec's 40 000 steps and 5 columns is allowed
    eng.check_budget(dataclasses.replace(base, rl_steps=40000))


def test_rl_caption_untokenised_heads_learn_fastest_at_toy_scale():
    """The page's RL caption (20 000 steps, 5 columns): the flattened head ends near perfect while SoftMoE-4 over
    per-conv tokens is still far behind the dense head at seed 2 (0.36 against 1.0 when measured on x86_64 AVX512_SPR;
    0.44 on the CPU the caption was first written on)."""
    _, flat = eng.train_head_rl("softmoe4_flatten", 5, 20000, seed=0)
    assert flat["success"][-1] >= 0.9
    _, dense = eng.train_head_rl("dense", 5, 20000, seed=2)
    _, moe4 = eng.train_head_rl("softmoe4_per_conv", 5, 20000, seed=2)
    assert dense["success"][-1] >= 0.9 and moe4["success"][-1] <= dense["success"][-1] - 0.3


def test_shipped_rl_curves_reproduce_with_the_script():
    """The RL curves came from train_rl_script: rerunning its dense head at seed 0 gives the same curve, and each
    shipped RL-trained SoftMoE-4 plays exactly as its curve's last point says."""
    from engine.core.nn import load_state

    sr = eng.load_shipped_rl()
    assert sr is not None, "curves_rl.npz missing"
    assert sr["step"][-1] == eng.rl_rollouts(eng.RL_TRAIN_STEPS) * eng.RL_ENVS * eng.RL_ROLLOUT
    assert sr["softmoe4_per_conv_success"].shape == (eng.TRAIN_SEEDS, eng.RL_TRAIN_EVALS + 1)
    _, curve = eng.train_head_rl("dense", eng.SHIPPED_COLS, eng.RL_TRAIN_STEPS, 0, evals=eng.RL_TRAIN_EVALS)
    # Bit for bit only on a CPU whose float kernels round as the one that made the file: on another machine the
    # rerun matched the first 12 points exactly, then an episode here and there went the other way, as online RL
    # amplifies a last-bit difference. So: the start exactly, the rest within a few of the 25 episodes per point.
    succ, reward = np.asarray(curve["success"], float), np.asarray(curve["train_reward"], float)
    ref_succ, ref_reward = sr["dense_success"][0], sr["dense_train_reward"][0]
    np.testing.assert_allclose(succ[:6], ref_succ[:6], atol=1e-6)
    np.testing.assert_allclose(reward[:6], ref_reward[:6], atol=1e-6)
    assert np.array_equal(np.isnan(reward), np.isnan(ref_reward))
    assert np.max(np.abs(succ - ref_succ)) <= 0.12 and np.mean(np.abs(succ - ref_succ)) <= 0.02
    assert np.nanmax(np.abs(reward - ref_reward)) <= 0.3 and np.nanmean(np.abs(reward - ref_reward)) <= 0.06
    paths = eng.shipped_moe4_paths(rl=True)
    assert len(paths) == eng.TRAIN_SEEDS and not set(paths) & set(eng.shipped_moe4_paths())
    for s, path in enumerate(paths):
        ck = load_state(path)
        assert ck["extra"]["training"] == "online RL" and ck["extra"]["seed"] == s
        net = eng.build("softmoe4_per_conv", eng.SHIPPED_COLS)
        net.load_state_dict(ck["state"])
        net.eval()
        assert eng.greedy_success(net, eng.SHIPPED_COLS) == pytest.approx(sr["softmoe4_per_conv_success"][s, -1])


def test_rl_claims_recomputed_from_the_raw_file(default_result):
    """The two RL-curve badges and the pruning badge on the RL weights, recomputed by hand from the files."""
    from engine.core.nn import asset_path

    z = np.load(asset_path(eng.ASSET_DIR) / "curves_rl.npz")
    last = z["step"] >= 0.9 * z["step"][-1]

    def final_return(arch):
        return float(np.mean([2 * v - 1 for row in z[f"{arch}_success"] for v in row[last]]))

    cl = {c.label: c for c in eng.claims(default_result)}
    gap = cl["final greedy return SoftMoE-4 − SoftMoE-1 ×4 wide"]
    assert gap.measured == pytest.approx(final_return("softmoe4_per_conv") - final_return("softmoe1_per_conv_scaled"))
    low = cl["lower final greedy return of SoftMoE-4 and SoftMoE-1 ×4 wide"]
    assert low.measured == pytest.approx(min(final_return("softmoe4_per_conv"),
                                             final_return("softmoe1_per_conv_scaled")))
    mk = default_result.masking_rl
    assert mk["masked"].shape == (eng.TRAIN_SEEDS, 4)
    red = [c for c in cl.values() if c.label.startswith("drop in greedy success when the costliest")]
    assert len(red) == 1 and "RL-trained" in red[0].label
    # the spec's worst case over experts (costliest expert per seed, mean over seeds): measured 0.31, fails
    assert red[0].measured == pytest.approx((mk["base"] - mk["masked"].min(1)).mean())
    assert not red[0].passed
    assert default_result.metrics["rl_mask_mean_drop"] == pytest.approx((mk["base"][:, None] - mk["masked"]).mean())
    # the page's "other experts" number: per seed, every expert but the costliest, then the mean over seeds
    drop = mk["base"][:, None] - mk["masked"]
    others = np.sort(drop, 1)[:, :-1].mean(1).mean()
    assert default_result.metrics["rl_mask_other_drop"] == pytest.approx(others)


def test_shipped_rl_curves_support_the_page_caption():
    """The page's caption on the RL curves: by the end every head has all but solved the game, and at 20 000 steps
    both per-conv heads lag behind every other head."""
    sr = eng.load_shipped_rl()
    fin = eng.final_stats(sr, "success")
    assert min(fin.values()) >= 0.95
    k = int(np.argmin(np.abs(sr["step"] - 20000)))
    at = {a: sr[f"{a}_success"][:, k].mean() for a in eng.ARCHS}
    per_conv = ("softmoe4_per_conv", "softmoe1_per_conv_scaled")
    assert max(at[a] for a in per_conv) < min(v for a, v in at.items() if a not in per_conv)


def test_per_patch_token_count_matches_a_patch_loop():
    """Per-patch tokens cut the 10 × cols feature map into 2×2 patches, padding an odd edge: their number is the
    number of patch corners (r, c) with r, c even, counted by a loop, for odd and even grid widths alike."""
    for cols in (3, 4, 5, 8, 9):
        corners = sum(1 for r in range(eng.ROWS) for c in range(cols) if r % 2 == 0 and c % 2 == 0)
        obs = eng.observe(torch.tensor([4]), torch.tensor([cols - 1]), torch.tensor([0]), cols)
        anat, _ = eng.anatomy(eng.Config(columns=cols, tokenization="per_patch"), obs)
        assert anat["per_patch"]["m"] == corners == eng.token_shape("per_patch", cols)[0], cols
        assert anat["per_patch"]["D"].shape[0] == corners


def test_slot_similarity_is_a_cosine_matrix():
    """The anatomy's slot similarity is the cosine of slot inputs: symmetric, ones on the diagonal, within [-1, 1],
    one row per slot (n·p), and all ones with a single flattened token (every slot receives the same vector)."""
    obs = eng.observe(torch.tensor([3]), torch.tensor([1]), torch.tensor([4]), 5)
    for cfg in (eng.Config(), eng.Config(experts=3, capacity=0.5, seed=2, l2_routing=False)):
        anat, _ = eng.anatomy(cfg, obs)
        for tok, a in anat.items():
            cos = a["slot_cos"].astype(np.float64)
            assert cos.shape == (a["n"] * a["p"],) * 2, tok
            np.testing.assert_allclose(np.diag(cos), 1.0, atol=1e-5, err_msg=tok)
            np.testing.assert_allclose(cos, cos.T, atol=1e-6, err_msg=tok)
            assert np.abs(cos).max() <= 1 + 1e-5, tok
        np.testing.assert_allclose(anat["flatten"]["slot_cos"], 1.0, atol=1e-5)


def test_expert_usage_is_the_combine_mass_on_each_expert(default_result):
    """Expert usage (plot 5): for every shipped seed, the combine weight a token puts on one expert's slots, averaged
    over all Catch states and tokens, recomputed with explicit loops over experts; since each token's combine weights
    sum to 1, the experts' shares sum to 1."""
    t, b, p = eng.all_states(eng.SHIPPED_COLS)
    obs = eng.observe(t, b, p, eng.SHIPPED_COLS)
    for rl, mk in ((False, default_result.masking), (True, default_result.masking_rl)):
        paths = eng.shipped_moe4_paths(rl=rl)
        assert mk["mass"].shape == (len(paths), 4)
        for s, path in enumerate(paths):
            net = eng.build("softmoe4_per_conv", eng.SHIPPED_COLS)
            net.load_state_dict(load_state(path)["state"])
            net.eval()
            with torch.no_grad():
                _, C = net.moe.weights(net.tokens(obs))
            C = C.numpy().astype(np.float64)                     # (states, tokens, experts, slots)
            want = [C[:, :, j, :].sum(-1).mean() for j in range(4)]
            np.testing.assert_allclose(mk["mass"][s], want, atol=1e-5)
            assert mk["mass"][s].sum() == pytest.approx(1.0, abs=1e-5)


def _decode_catch(frames):
    """(ball row, ball column, paddle column) of each Catch frame (channel 0 the ball, channel 1 the paddle)."""
    n = frames.shape[0]
    assert torch.equal(frames.flatten(2).sum(2), torch.ones(n, 2))            # one ball and one paddle pixel
    ball = frames[:, 0].flatten(1).argmax(1)
    cols = frames.shape[-1]
    assert torch.equal(frames[:, 1, -1].sum(1), torch.ones(n))               # the paddle sits on the bottom row
    return ball // cols, ball % cols, frames[:, 1, -1].argmax(1)


def test_online_rl_bootstraps_on_the_frame_after_each_action(monkeypatch):
    """The RL learner's bootstrap values come from the frame its action led to, not the frame it acted on. The
    Q-network's inputs are recorded: the frames it acted on in a rollout (O) and the batch it evaluates for
    max_a Q (ON). Decoding the pixels, ON[t] must be O[t]'s successor in Catch (ball one row lower in the same
    column, paddle at most one column away), its reward and end flag must follow from ON[t] (±1 on the last row,
    + iff the paddle is under the ball), a game that goes on must start the next step from ON[t], and the q_next
    handed to lambda_returns must be max_a Q(ON[t])."""
    import copy

    from engine import pqn

    cols, E, T = 5, eng.RL_ENVS, eng.RL_ROLLOUT
    calls, live, rollouts = [], {"on": True}, []
    real_build, real_lr = eng.build, pqn.lambda_returns

    def build_spy(*a, **k):
        net = real_build(*a, **k)
        net.register_forward_hook(lambda _m, inp, _out: calls.append(inp[0].clone()) if live["on"] else None)
        live["net"] = net
        return net

    def lr_spy(r, term, done, q_next, gamma, lam):
        O, ON = calls[-T - 1:-1], calls[-1]
        live["on"] = False
        with torch.no_grad():                  # a copy of the net as it is now, outside the engine's loop
            ref = copy.deepcopy(live["net"])(ON).max(1).values.reshape(T, E)
        live["on"] = True
        rollouts.append(dict(O=torch.stack(O), ON=ON.reshape(T, E, *ON.shape[1:]), r=r.clone(), done=done.clone(),
                             term=term.clone(), q_next=q_next.clone(), ref=ref))
        return real_lr(r, term, done, q_next, gamma, lam)

    monkeypatch.setattr(eng, "build", build_spy)
    monkeypatch.setattr(pqn, "lambda_returns", lr_spy)
    eng.train_head_rl("dense", cols, E * T * 8, seed=1, evals=2)
    assert len(rollouts) == 8
    ended = 0
    for ro in rollouts:
        assert ro["O"].shape == ro["ON"].shape == (T, E, 2, eng.ROWS, cols)
        for t in range(T):
            row, ball, pad = _decode_catch(ro["O"][t])
            row2, ball2, pad2 = _decode_catch(ro["ON"][t])
            assert torch.equal(row2, row + 1) and torch.equal(ball2, ball)
            assert bool(((pad2 - pad).abs() <= 1).all())
            end = row2 == eng.ROWS - 1
            assert torch.equal(ro["done"][t].bool(), end) and torch.equal(ro["term"][t].bool(), end)
            want_r = torch.where(end, torch.where(pad2 == ball2, 1.0, -1.0), 0.0)
            assert torch.equal(ro["r"][t], want_r)
            ended += int(end.sum())
            if t + 1 < T:                      # games that go on are played from the frame the action led to
                go = ~end
                assert torch.equal(ro["O"][t + 1][go], ro["ON"][t][go])
                assert bool((_decode_catch(ro["O"][t + 1][end])[0] == 0).all())    # finished ones restart on top
        torch.testing.assert_close(ro["q_next"], ro["ref"], rtol=0, atol=1e-6)
    assert ended > 0                           # the end-of-game branch was exercised


# ------------------------------------------------------------------ what the page shows (second mutation round)
def _softmoe_numpy(moe, x, keep):
    """Output tokens (B, m, d) and slot outputs (B, k, p, d) of a SoftMoE restricted to the experts in ``keep``,
    from the equations in numpy (ℓ2-normalised routing logits, dispatch over tokens, combine over kept slots)."""
    X = x.numpy().astype(np.float64)
    phi = moe.phi.detach().numpy().astype(np.float64)
    pn = phi / (np.linalg.norm(phi, axis=0, keepdims=True) + 1e-6)
    xn = X / (np.linalg.norm(X, axis=-1, keepdims=True) + 1e-6)
    L = float(moe.scale.detach()) * np.einsum("bmd,dnp->bmnp", xn, pn)
    D = np.exp(L - L.max(1, keepdims=True))
    D /= D.sum(1, keepdims=True)
    Lk = L[:, :, keep].reshape(L.shape[0], L.shape[1], -1)
    C = np.exp(Lk - Lk.max(-1, keepdims=True))
    C = (C / C.sum(-1, keepdims=True)).reshape(L.shape[0], L.shape[1], len(keep), -1)
    xs = np.einsum("bmnp,bmd->bnpd", D, X)
    w1, b1 = moe.w1.detach().numpy(), moe.b1.detach().numpy()
    w2, b2 = moe.w2.detach().numpy(), moe.b2.detach().numpy()
    h = np.maximum(np.einsum("bnpd,ndh->bnph", xs, w1) + b1[:, None], 0)
    y = np.einsum("bnph,nhd->bnpd", h, w2) + b2[:, None]
    return np.einsum("bmkp,bkpd->bmd", C, y[:, keep]), y


def test_pruning_diagnostics_rebuilt_from_the_weights(default_result):
    """The numbers in the page's pruning box, for both sets of shipped weights, rebuilt in numpy over all Catch states:
    unpruned success, Q-error to Q* before and after pruning (mean over seeds × experts), the error of predicting 0,
    how far the output tokens move when one expert goes (relative to the unpruned output), the output / slot-output
    norm ratio and the mean cosine between different experts' mean slot outputs."""
    t, b, p = eng.all_states(eng.SHIPPED_COLS)
    obs = eng.observe(t, b, p, eng.SHIPPED_COLS)
    q = eng.q_star(t, b, p, eng.SHIPPED_COLS).numpy().astype(np.float64)
    m = default_result.metrics
    for prefix, rl, mk in (("mask_", False, default_result.masking), ("rl_mask_", True, default_result.masking_rl)):
        base_s, mse_b, mse_p, change, cancel, ecos = [], [], [], [], [], []
        for path in eng.shipped_moe4_paths(rl=rl):
            net = eng.build("softmoe4_per_conv", eng.SHIPPED_COLS)
            net.load_state_dict(load_state(path)["state"])
            net.eval()
            base_s.append(eng.greedy_success(net, eng.SHIPPED_COLS))
            with torch.no_grad():
                x = net.tokens(obs)
            W, bias = net.out.weight.detach().numpy(), net.out.bias.detach().numpy()

            def qhat(o, W=W, bias=bias):
                return o.reshape(len(o), -1) @ W.T + bias

            out, y = _softmoe_numpy(net.moe, x, list(range(4)))
            mse_b.append(((qhat(out) - q) ** 2).mean())
            cancel.append(np.linalg.norm(out, axis=-1).mean() / np.linalg.norm(y, axis=-1).mean())
            ey = y.mean(2)
            ey = ey / np.linalg.norm(ey, axis=-1, keepdims=True)
            cs = np.einsum("bid,bjd->bij", ey, ey).mean(0)
            ecos.append(cs[~np.eye(4, dtype=bool)].mean())
            for j in range(4):
                o_j, _ = _softmoe_numpy(net.moe, x, [i for i in range(4) if i != j])
                mse_p.append(((qhat(o_j) - q) ** 2).mean())
                change.append(np.linalg.norm(o_j - out) / np.linalg.norm(out))
        assert m[prefix + "base_success"] == pytest.approx(np.mean(base_s), abs=1e-9)
        assert m[prefix + "mse_base"] == pytest.approx(np.mean(mse_b), rel=1e-4)
        assert m[prefix + "mse_pruned"] == pytest.approx(np.mean(mse_p), rel=1e-4)
        assert m[prefix + "mse_zero"] == pytest.approx((q ** 2).mean(), rel=1e-6)
        assert m[prefix + "out_change"] == pytest.approx(np.mean(change), rel=1e-4)
        np.testing.assert_allclose(mk["cancel"], cancel, rtol=1e-4)
        np.testing.assert_allclose(mk["expert_cos"], ecos, rtol=1e-4, atol=1e-5)


def test_rl_final_returns_in_the_caption(default_result):
    """Every head's final greedy return in the RL caption: 2·success − 1, last 10 % of the steps, all seeds."""
    from engine.core.nn import asset_path

    z = np.load(asset_path(eng.ASSET_DIR) / "curves_rl.npz")
    last = z["step"] >= 0.9 * z["step"][-1]
    for a in eng.ARCHS:
        want = np.mean([2 * v - 1 for row in z[f"{a}_success"] for v in row[last]])
        assert default_result.metrics[f"rl_final_return_{a}"] == pytest.approx(want), a


LIVE_ALT = eng.Config(live_steps=50, train_frac=0.3, seed=2, columns=4)


def test_live_run_follows_its_widgets_and_parameter_chart_stays_at_5_columns():
    """A live regression run with non-default training fraction, seed and width equals train_head called with them,
    while the parameter chart ('5 columns') is unchanged by the live width."""
    res = eng.run(LIVE_ALT)
    _, curve = eng.train_head(LIVE_ALT.live_arch, 4, 50, 2, 0.3, width_scale=LIVE_ALT.width_scale)
    for k in ("step", "train_mse", "test_mse", "success"):
        np.testing.assert_allclose(res.live[k], curve[k], rtol=1e-5, err_msg=k)
    assert res.metrics["live_final_mse"] == pytest.approx(curve["test_mse"][-1], rel=1e-5)
    assert res.param_counts == {a: eng.n_params(eng.build(a, 5)) for a in eng.ARCHS}
    # the observation shown in the anatomy view: drawn from the page's seed (ball row 4, paddle on the bottom row)
    g = torch.Generator().manual_seed(LIVE_ALT.seed)
    bc, pc = (int(v) for v in torch.randint(4, (2,), generator=g))
    img = res.obs_image
    assert bc != pc and img.shape == (2, eng.ROWS, 4)
    assert img[0, 4, bc] == 1 and img[0].sum() == 1 and img[1, eng.ROWS - 1, pc] == 1 and img[1].sum() == 1


def test_anatomy_observation_seed_and_capacity():
    """The anatomy's observation (ball on row 4 in channel 0, paddle on the bottom row in channel 1, at the columns
    the seeded generator draws), its dependence on the seed, and slots per expert p = ⌈m·cf/n⌉ with D's columns and
    C's rows summing to 1."""
    for seed in (0, 3):
        cfg = eng.Config(seed=seed, capacity=0.5, experts=3, columns=6, live_steps=50)
        g = torch.Generator().manual_seed(seed)
        bc, pc = (int(v) for v in torch.randint(6, (2,), generator=g))
        obs = eng.observe(torch.tensor([4]), torch.tensor([bc]), torch.tensor([pc]), 6)
        img = obs[0].numpy()
        assert img[0, 4, bc] == 1 and img[0].sum() == 1 and img[1, eng.ROWS - 1, pc] == 1 and img[1].sum() == 1
        anat, _ = eng.anatomy(cfg, obs)
        for tok, a in anat.items():
            m_, d_ = eng.token_shape(tok, 6)
            assert (a["m"], a["d"], a["n"]) == (m_, d_, 3), tok
            assert a["p"] == max(1, math.ceil(m_ * 0.5 / 3)), tok
            assert a["D"].shape == a["C"].shape == (m_, 3 * a["p"])
            np.testing.assert_allclose(a["D"].sum(0), 1.0, atol=1e-5, err_msg=tok)
            np.testing.assert_allclose(a["C"].sum(1), 1.0, atol=1e-5, err_msg=tok)
        # the routing weights come from a net seeded with the page's seed
        torch.manual_seed(seed)
        _, Net = eng._modules()
        net = Net(6, "softmoe", tokenization="per_conv", experts=3, capacity=0.5, l2_routing=True)
        with torch.no_grad():
            D, _ = net.moe.weights(net.tokens(obs))
        np.testing.assert_allclose(anat["per_conv"]["D"], D[0].reshape(60, -1).numpy(), atol=1e-6)


def test_rl_training_reward_is_the_mean_of_the_last_50_games(monkeypatch):
    """The RL curve's 'training reward': the mean reward of the last 50 finished training games, read off the
    environment steps of the 16 parallel games (greedy evaluation plays 25 starts at 5 columns, so it is told apart)."""
    finished = []
    real = eng.env_step

    def spy(t, b, p, a, cols):
        out = real(t, b, p, a, cols)
        if len(t) == eng.RL_ENVS:
            finished.extend(out[3][out[4]].tolist())
        return out

    monkeypatch.setattr(eng, "env_step", spy)
    _, curve = eng.train_head_rl("dense", 5, 6000, seed=0, evals=3)
    assert len(finished) > 100
    assert curve["train_reward"][-1] == pytest.approx(np.mean(finished[-50:]))


# ----------------------------------------------------------------------------- what the page draws


def test_page_anatomy_pruning_and_rl_caption_follow_the_result(default_result):
    """The page at the fixture's settings with the regression-trained weights picked for pruning, read back: the
    observation map marks the ball 1 and the paddle 2, the per-token dispatch grid puts token i = r·columns + c at
    row r, column c with its largest dispatch weight, the pruning bars are the regression weights' seed means per
    pruned expert, and the RL caption's 'at about 20 000 steps' numbers are each head's seed mean at the
    checkpoint nearest 20 000."""
    res = default_result
    cfg = eng.Config(live_steps=50)
    at = open_page("softmoe_tokenization", {"live_steps": "50", "pruned": "regression"},
                   seed=(("engine.softmoe_tokenization", cfg, default_result),))
    ch = charts(at)

    obs = values(next(t for t in ch["obs"] if t["type"] == "heatmap")["z"])
    ball, paddle = res.obs_image[0] > 0, res.obs_image[1] > 0
    assert ball.sum() == 1 and paddle.any()
    assert np.all(obs[ball] == 1) and np.all(obs[paddle] == 2) and np.all(obs[~(ball | paddle)] == 0)

    D = res.anatomy["per_conv"]["D"]
    grid = values(next(t for t in ch["dispatch_grid"] if t["type"] == "heatmap")["z"])
    for i in range(D.shape[0]):
        r, c = divmod(i, cfg.columns)
        assert grid[r, c] == pytest.approx(D[i].max(), rel=1e-6)

    params = dict(zip(ch["params"][0]["x"], values(ch["params"][0]["y"])))
    assert params == {eng.LABELS[n]: pytest.approx(c) for n, c in res.param_counts.items()}
    assert len(set(res.param_counts.values())) > 1

    mk = res.masking
    bar = ch["masking"][0]
    n_exp = mk["masked"].shape[1]
    assert list(bar["x"]) == ["none"] + [f"expert {j}" for j in range(n_exp)]
    want = [np.mean(mk["base"])] + [np.mean([row[j] for row in mk["masked"]]) for j in range(n_exp)]
    np.testing.assert_allclose(values(bar["y"]), want)
    assert not np.allclose(mk["masked"], res.masking_rl["masked"])

    sr = res.shipped_rl
    k = min(range(len(sr["step"])), key=lambda i: abs(sr["step"][i] - 20000))
    cap = next(c.value for c in at.caption if "Earlier the per-conv heads lag" in c.value)
    assert f"at {int(sr['step'][k]):,} steps the mean success is" in cap
    for a in eng.ARCHS:
        assert f"{eng.LABELS[a]} {np.mean(sr[f'{a}_success'][:, k]):.2f}" in cap
