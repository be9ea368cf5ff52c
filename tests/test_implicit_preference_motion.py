"""DPA-OMF engine: claims at the default config, and checks against independent computations."""

import copy
import math

import numpy as np
import ot
import pytest
import torch

from engine import implicit_preference_motion as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_pass_at_default(default_result):
    """Every claim passes at the default but the spec's negative control, which fails as measured: another scene's
    log still prefers the clean rollout in most mixed pairs (0.86 at seed 0), because the event features of every
    expert log are zero."""
    claims = eng.claims(default_result)
    assert len(claims) == 6
    failed = [c.describe() for c in claims[:-1] if not c.passed]
    assert not failed, failed
    ctrl = claims[-1]
    assert ctrl.label == "agreement with another scene's expert log" and ctrl.op == "<"
    assert ctrl.measured == default_result.metrics["agreement_control"] and not ctrl.passed


def test_control_badge_passes_when_the_other_log_falls_toward_chance(default_result):
    """The control badge is a real test: the same run with a control agreement near chance passes it (and one at the
    bar does not, the bar being strict)."""
    r = copy.deepcopy(default_result)
    r.metrics["agreement_control"] = 0.55
    assert eng.claims(r)[-1].passed
    r.metrics["agreement_control"] = eng.AGREE_BAR
    assert not eng.claims(r)[-1].passed


def test_reference_checkpoint_loads_and_is_calibrated():
    from engine.core.nn import asset_path, load_state
    path = asset_path(eng.CKPT_NAME)
    assert path.exists() and path.stat().st_size < 2 * 2**20
    ck = load_state(path)
    assert 0.05 <= float(ck["extra"]["failure_rate"]) <= 0.30
    pol = eng.load_reference()
    assert sum(p.numel() for p in pol.parameters()) < 5000


def test_sinkhorn_matches_pot_and_is_above_emd():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 24, 3))
    Y = rng.normal(size=(20, 30, 3)) + 0.5
    ours, eps = eng.sinkhorn_batch(X, Y)
    a, b = np.full(24, 1 / 24), np.full(30, 1 / 30)
    for i in range(20):
        M = ((X[i][:, None] - Y[i][None]) ** 2).sum(-1)
        ref = ot.sinkhorn2(a, b, M, eps[i], method="sinkhorn_log", numItermax=5000, stopThr=1e-12)
        assert abs(ours[i] - ref) / ref < 1e-3
        assert ours[i] >= ot.emd2(a, b, M) - 1e-9
    # the entropic bias shrinks as eps -> 0
    M0 = ((X[0][:, None] - Y[0][None]) ** 2).sum(-1)
    gaps = [eng.sinkhorn_batch(X[:1], Y[:1], eps_frac=f, iters=2000)[0][0] - ot.emd2(a, b, M0)
            for f in (0.2, 0.05, 0.01)]
    assert gaps[0] > gaps[1] > gaps[2] >= -1e-6


def test_sinkhorn_with_a_kernel_that_underflows_still_matches_pot():
    """Spread-out clouds and a small epsilon: much of exp(-C/eps) falls below float32's smallest normal number
    (the engine zeroes what is under 1e-30, which keeps the scaling loop fast); the cost still matches POT's
    log-domain Sinkhorn in float64."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 40, 2)) * 3
    Y = rng.normal(size=(6, 40, 2)) * 3 + 1.0
    ours, eps = eng.sinkhorn_batch(X, Y, eps_frac=0.02, iters=1000)
    a = np.full(40, 1 / 40)
    for i in range(6):
        M = ((X[i][:, None] - Y[i][None]) ** 2).sum(-1)
        r = M.min(1, keepdims=True)
        k = np.exp(-(M - r - (M - r).min(0, keepdims=True)) / eps[i])
        assert (k < 1e-30).mean() > 0.3                     # the case the zeroing is for
        ref = ot.sinkhorn2(a, a, M, eps[i], method="sinkhorn_log", numItermax=5000, stopThr=1e-12)
        assert abs(ours[i] - ref) / ref < 1e-3


def test_expert_is_its_own_closest_candidate():
    bank = eng.scene_bank(range(10_000, 10_008))
    exp = bank["states"]
    d_self = eng.omf_distance(exp, exp, 3.0)
    d_other = eng.omf_distance(exp, np.roll(exp, 1, 0), 3.0)
    assert np.all(d_self < d_other)


def test_dpo_loss_hand_computation():
    lp_w = torch.tensor([-10.0, -3.0], requires_grad=True)
    lp_l = torch.tensor([-12.0, -2.0])
    ref_w, ref_l = torch.tensor([-11.0, -3.5]), torch.tensor([-11.5, -2.5])
    beta = 0.1
    loss = eng.dpo_loss(lp_w, lp_l, ref_w, ref_l, beta)
    deltas = [((-10 + 11) - (-12 + 11.5)), ((-3 + 3.5) - (-2 + 2.5))]
    hand = np.mean([-math.log(1 / (1 + math.exp(-beta * d))) for d in deltas])
    assert abs(loss.item() - hand) < 1e-6
    loss.backward()
    expect = [-beta / (1 + math.exp(beta * d)) / 2 for d in deltas]   # -beta*sigma(-beta*Delta), mean over 2
    assert np.allclose(lp_w.grad.numpy(), expect, atol=1e-7)
    # at initialisation (pi_theta = pi_ref) every pair gives log 2
    z = torch.randn(5)
    assert abs(eng.dpo_loss(z, z + 1, z, z + 1, 0.3).item() - math.log(2)) < 1e-7


def test_expert_logs_clean_and_tokens_replay():
    bank = eng.scene_bank(range(0, 100))
    coll, off = eng.events(bank["states"])
    assert (coll.any(1) | off.any(1)).mean() <= 0.01
    for k in range(5):
        sc = eng.make_scene(k)
        x, y, v = sc["x"], sc["y"], sc["v"]
        for t in range(eng.HORIZON):
            x, y, v = eng.step_np(x, y, v, bank["tokens"][k, t])
        assert np.allclose(np.stack([x, y, v], -1), bank["states"][k, -1])


def test_teacher_forced_logp_equals_sampled_logp():
    pol = eng.load_reference()
    bank = eng.scene_bank(range(0, 6))
    S, F, T, L = eng.rollout(pol, torch.as_tensor(bank["init"], dtype=torch.float32), torch.Generator().manual_seed(1))
    tf = eng.traj_logp(pol, eng.expert_features(S), T)        # features recomputed from stored states
    assert torch.allclose(tf, L.sum((1, 2)), atol=1e-4)


def test_event_detectors_on_hand_built_boxes():
    s = np.zeros((1, 4, 3))
    s[0, :, 0] = [0.0, 4.0, 20.0, 40.0]        # cars 0 and 1 overlap (dx 4 < 4.5)
    s[0, :, 1] = [0.0, 1.0, 3.5, 8.0]          # dy 1 < 1.8; car 3's top edge 8.9 > 8.75: off-road
    coll, off = eng.events(s)
    assert coll[0].tolist() == [True, True, False, False]
    assert off[0].tolist() == [False, False, False, True]
    s[0, 1, 1] = 1.9                           # dy 1.9 >= 1.8: side by side, no overlap
    coll, _ = eng.events(s)
    assert not coll.any()


def test_zero_dpo_steps_fails_claims_one_and_two():
    r = eng.run(eng.Config(dpo_steps=0, n_scenes=32))
    c = eng.claims(r)
    assert not c[0].passed and not c[1].passed and not c[2].passed   # the reference itself fails


def test_stored_expert_logs_match_the_generator():
    train, held = eng._banks()
    fresh = eng.scene_bank([3, 250, 10_000, 10_063])
    stored_s = np.stack([train["states"][3], train["states"][250], held["states"][0], held["states"][63]])
    stored_t = np.stack([train["tokens"][3], train["tokens"][250], held["tokens"][0], held["tokens"][63]])
    assert np.allclose(stored_s, fresh["states"], atol=1e-3)
    assert np.array_equal(stored_t, fresh["tokens"])


def test_wasserstein_matches_scipy():
    from scipy.stats import wasserstein_distance as w1_scipy

    rng = np.random.default_rng(1)
    for n, m in ((100, 100), (37, 250), (5, 3)):
        u, v = rng.normal(size=n), rng.normal(0.4, 2.0, size=m)
        assert eng.wasserstein_distance(u, v) == pytest.approx(w1_scipy(u, v), rel=1e-12, abs=1e-12)
    u = np.round(rng.normal(size=80), 1)
    assert eng.wasserstein_distance(u, u[::-1]) == 0.0


def test_dpo_curve_minimum_is_reported(default_result):
    r, m = default_result, default_result.metrics
    cv = r.curve_omf["DPA-OMF"]
    assert m["curve_best_omf"] == pytest.approx(cv.min())
    assert m["curve_best_step"] == r.curve_steps[int(np.argmin(cv))]
    assert m["curve_first_omf"] == pytest.approx(cv[0]) and m["curve_last_omf"] == pytest.approx(cv[-1])


@pytest.mark.parametrize("seed", [1, 3, 4])
def test_caveat_every_claim_reproduces_at_the_seeds_it_names(seed):
    """The page's caveat: at the default settings seeds 0, 1, 3 and 4 reproduce every claim but the negative control
    (seed 0 is the test above; seed 2's failures are in assets/seed_flips.json, checked by tests/test_scripts.py)."""
    cl = eng.claims(eng.run(eng.Config(seed=seed)))
    failed = [c.describe() for c in cl[:-1] if not c.passed]
    assert not failed, failed
    assert not cl[-1].passed


def test_caveat_seed_2_does_not_reproduce():
    """The page's caveat names seed 2 as the one where DPO destabilises the policy: its realism badges fail."""
    failed = [c for c in eng.claims(eng.run(eng.Config(seed=2))) if not c.passed]
    assert len(failed) >= 2, [c.describe() for c in failed]


def test_expert_self_distance_is_the_entropic_self_cost_and_below_its_own_rollouts():
    """Spec check: d(ξ_E, ξ_E) is the entropic self-cost (not zero: Sinkhorn's blur keeps it above emd2 = 0), and it
    is the smallest distance among a scene's candidates, i.e. below d(ξ, ξ_E) for every reference rollout sampled
    from that same scene. Measured on 16 held-out scenes × 8 rollouts: self-cost 0.80–1.02, closest rollout
    1.02–2.12, smallest ratio closest / self 1.13."""
    _, held = eng._banks()
    n, K = 16, 8
    exp = held["states"][:n]
    init = torch.as_tensor(held["init"][:n], dtype=torch.float32)
    init = init[:, None].expand(n, K, eng.N_AGENTS, 3).reshape(n * K, eng.N_AGENTS, 3)
    S = eng.rollout(eng.load_reference(), init, torch.Generator().manual_seed(0))[0].numpy()
    d = eng.omf_distance(S, np.repeat(exp, K, 0), 3.0).reshape(n, K)
    d_self = eng.omf_distance(exp, exp, 3.0)
    assert np.all(d_self[:, None] < d), (d_self, d.min(1))
    # the sampled candidates include failing rollouts too, so the ranking is not over clean rollouts only
    coll, off = eng.events(S)
    assert (coll.any(1) | off.any(1)).any(-1).mean() > 0.05
    # the self value is POT's entropic cost of the cloud with itself at the same ε, and it sits above the exact 0
    occ = eng.occupancy(exp, 3.0).astype(np.float64)
    _, eps = eng.sinkhorn_batch(occ, occ)
    for i in range(3):
        M = ((occ[i][:, None] - occ[i][None]) ** 2).sum(-1)
        a = np.full(len(M), 1 / len(M))
        ref = ot.sinkhorn2(a, a, M, eps[i], method="sinkhorn_log", numItermax=5000, stopThr=1e-12)
        assert abs(d_self[i] - ref) / ref < 1e-3
        exact = ot.emd2(a, a, M)
        assert abs(exact) < 1e-9 and d_self[i] > 0.1


# ---------------------------------------------------------------- hand-built inputs vs hand-computed answers

def test_features_neighbour_slots_on_a_hand_built_scene():
    """features() of the middle-lane car in a scene built by hand: own lane, then the LEFT lane (higher y, lane
    index + 1) and then the RIGHT lane (lower y), each as (leader gap, leader rel. speed, follower gap, follower
    rel. speed), gaps bumper to bumper over 50 m and relative speeds over 5 m/s; an empty slot reads gap 1 (clip),
    speed 0. The top-lane car has no lane to its left: that slot is all zeros."""
    L, clip = eng.CAR_L, eng.GAP_CLIP
    # car 0: middle lane; 1: own-lane leader; 2: left-lane leader; 3: left-lane follower; 4: right-lane follower
    x = [0.0, 10.0, 20.0, -12.0, -30.0]
    y = [3.5 + 0.2, 3.5, 7.0, 7.0, 0.0]
    v = [10.0, 12.0, 14.0, 9.0, 11.0]
    st = torch.tensor([list(zip(x, y, v))], dtype=torch.float64)
    f = eng.features(st, 4).numpy()[0]
    assert f.shape == (5, eng.N_FEAT)
    own0 = [0.2, 3.7 / 7, 10 / 15, (3.7 + 1.75) / 5, (8.75 - 3.7) / 5]
    own_lane = [(10 - L) / clip, (12 - 10) / 5, 1.0, 0.0]                 # no follower in the middle lane
    left = [(20 - L) / clip, (14 - 10) / 5, (12 - L) / clip, (9 - 10) / 5]
    right = [1.0, 0.0, (30 - L) / clip, (11 - 10) / 5]                   # no leader in the right lane
    np.testing.assert_allclose(f[0], own0 + own_lane + left + right + [4 / eng.HORIZON], atol=1e-12)
    # car 2 (top lane): its left slot is off the road (zeros); its right slot is the middle lane, where car 1 is
    # the nearest car behind it (10 m back) and nobody is ahead
    np.testing.assert_allclose(f[2, 9:13], 0.0, atol=1e-12)
    np.testing.assert_allclose(f[2, 13:17], [1.0, 0.0, (10 - L) / clip, (12 - 14) / 5], atol=1e-12)
    # car 4 (bottom lane): no right lane; its left slot is the middle lane, with car 0 nearest ahead (30 m)
    np.testing.assert_allclose(f[4, 13:17], 0.0, atol=1e-12)
    np.testing.assert_allclose(f[4, 9:13], [(30 - L) / clip, (10 - 11) / 5, 1.0, 0.0], atol=1e-12)


def test_occupancy_flags_an_event_at_the_odd_step_before_each_point():
    """occupancy() keeps the even steps t = 2, 4, ..., T but flags an event seen at t-1 or t (so an event at an odd
    step is not lost). Hand-built log: two cars overlap only at step 3 and a third leaves the road only at step 5;
    the flags must show at t = 4 (cars 0, 1) and t = 6 (car 2) and nowhere else, compared with a loop."""
    T, A, w = eng.HORIZON, eng.N_AGENTS, 2.5
    s = np.zeros((1, T + 1, A, 3))
    s[0, :, :, 0] = np.arange(A) * 20.0                 # 20 m apart: no overlap
    s[0, :, :, 1] = eng.LANES[1]
    s[0, :, :, 2] = 10.0
    s[0, 3, 1, 0] = s[0, 3, 0, 0] + 2.0                # cars 0 and 1 overlap at step 3 only
    s[0, 5, 2, 1] = eng.EDGE_HI                        # car 2 off the road at step 5 only
    coll, off = eng.events(s)
    assert coll[0, 3, :2].all() and coll[0].sum() == 2 and off[0, 5, 2] and off[0].sum() == 1
    occ = eng.occupancy(s, w)[0].reshape(len(eng.OCC_STEPS), A, 6)
    for k, t in enumerate(range(2, T + 1, 2)):
        assert list(eng.OCC_STEPS)[k] == t
        for a in range(A):
            exp_c = w * float(coll[0, t, a] or coll[0, t - 1, a])
            exp_o = w * float(off[0, t, a] or off[0, t - 1, a])
            assert occ[k, a, 4] == pytest.approx(exp_c) and occ[k, a, 5] == pytest.approx(exp_o), (t, a)
    assert occ[1, 0, 4] == w and occ[1, 1, 4] == w and occ[2, 2, 5] == w  # t = 4 and t = 6
    assert np.count_nonzero(occ[..., 4]) == 2 and np.count_nonzero(occ[..., 5]) == 1


def test_realism_kinematic_w1_on_synthetic_trajectories():
    """_realism's kinematic distances: model cars accelerating at a constant 1.5 m/s² against an expert at constant
    speed give W1(acceleration) = 1.5 exactly; on random speed profiles both W1 values equal
    scipy.stats.wasserstein_distance of the per-car, per-step accelerations (v[t+1] - v[t]) / dt computed by a loop."""
    from scipy.stats import wasserstein_distance as w1_scipy

    rng = np.random.default_rng(4)
    B, T, A = 3, eng.HORIZON, eng.N_AGENTS
    steps = np.arange(T + 1)[None, :, None]
    v0 = rng.uniform(8, 14, size=(B, 1, A))
    S = np.zeros((B, T + 1, A, 3))
    S[..., 2] = v0 + 1.5 * eng.DT * steps
    E = np.zeros_like(S)
    E[..., 2] = rng.uniform(8, 14, size=(B, 1, A)) + 0 * steps
    flags = np.zeros((B, T + 1, A), dtype=bool)
    out, _ = eng._realism(S, np.zeros(B), flags, flags, {"states": E}, B, 1, np.random.default_rng(0))
    assert out["w1_accel"] == pytest.approx(1.5, abs=1e-9)

    S[..., 2] = rng.uniform(0, 20, size=(B, T + 1, A))
    E[..., 2] = rng.uniform(5, 15, size=(B, T + 1, A))

    def accels(X):
        return [(X[b, t + 1, a, 2] - X[b, t, a, 2]) / eng.DT for b in range(B) for t in range(T) for a in range(A)]

    out, _ = eng._realism(S, np.zeros(B), flags, flags, {"states": E}, B, 1, np.random.default_rng(0))
    assert out["w1_accel"] == pytest.approx(w1_scipy(accels(S), accels(E)), rel=1e-9)
    assert out["w1_speed"] == pytest.approx(w1_scipy(S[:, 1:, :, 2].ravel(), E[:, 1:, :, 2].ravel()), rel=1e-9)


def test_rollout_many_equals_separate_rollouts_with_the_same_seed():
    """rollout_many's contract: the P policies' states equal P separate rollout() calls, each with a generator
    seeded the same way. Two different policies (the reference and a perturbed copy) on four held-out scenes."""
    import copy

    ref = eng.load_reference()
    other = copy.deepcopy(ref)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    _, held = eng._banks()
    init = torch.as_tensor(held["init"][:4], dtype=torch.float32)
    both = eng.rollout_many([ref, other], init, torch.Generator().manual_seed(7))
    assert both.shape == (2, 4, eng.HORIZON + 1, eng.N_AGENTS, 3)
    for i, pol in enumerate((ref, other)):
        single = eng.rollout(pol, init, torch.Generator().manual_seed(7))[0]
        torch.testing.assert_close(both[i], single, atol=1e-4, rtol=1e-5)
    assert not torch.allclose(both[0], both[1])  # the two policies do differ


# ---------------------------------------------------------------- what the page shows, recomputed

def test_badge_metrics_follow_the_realism_table(default_result):
    """The badges' measured values and details are read off the realism table (section 3): ratios DPA-OMF /
    reference, and the two gaps to the adversarial baseline, the failure gap with the +0.01 its label names."""
    m, t = default_result.metrics, default_result.table
    ref, dpa, adv = t["reference"], t["DPA-OMF"], t["adversarial"]
    assert (m["ref_failure"], m["dpa_failure"], m["adv_failure"]) == (ref["failure"], dpa["failure"], adv["failure"])
    assert (m["ref_omf"], m["dpa_omf"], m["adv_omf"]) == (ref["omf"], dpa["omf"], adv["omf"])
    assert m["omf_ratio"] == pytest.approx(dpa["omf"] / ref["omf"])
    assert m["fail_ratio"] == pytest.approx(dpa["failure"] / ref["failure"])
    assert m["omf_gap"] == pytest.approx(adv["omf"] - dpa["omf"])
    assert m["fail_gap"] == pytest.approx(adv["failure"] + 0.01 - dpa["failure"])
    c = eng.claims(default_result)
    assert c[2].measured == m["omf_gap"] and c[3].measured == m["fail_gap"]


def test_realism_rates_and_bootstrap_errors_on_hand_made_flags():
    """_realism on hand-made event flags (2 reps x 3 scenes, rows rep-major as _evaluate lays them out): a rate is
    the share of agent trajectories with the event at any step, failure the share with either event (an agent with
    both counts once), and the error bar the std of 200 bootstrap means over scenes of per-scene rates averaged over
    reps and agents; all by loops here, with the same bootstrap draws."""
    reps, n, T, A = 2, 3, eng.HORIZON, eng.N_AGENTS
    rng = np.random.default_rng(8)
    coll = rng.random((reps * n, T + 1, A)) < 0.03
    off = rng.random((reps * n, T + 1, A)) < 0.03
    coll[0, 5, 2] = off[0, 7, 2] = True              # one agent with both events
    d = rng.random(reps * n)
    S = np.zeros((reps * n, T + 1, A, 3))
    out, err = eng._realism(S, d, coll, off, {"states": S[:n]}, n, reps, np.random.default_rng(0))
    ca, oa = coll.any(1), off.any(1)

    def share(flag):
        return sum(bool(flag[b, a]) for b in range(reps * n) for a in range(A)) / (reps * n * A)

    assert out["collision"] == pytest.approx(share(ca))
    assert out["offroad"] == pytest.approx(share(oa))
    assert out["failure"] == pytest.approx(share(ca | oa))
    assert out["failure"] < out["collision"] + out["offroad"]
    assert out["omf"] == pytest.approx(d.mean())
    boots = np.random.default_rng(0).integers(0, n, (200, n))

    def per_scene(flag_or_d):
        vals = []
        for s in range(n):
            rows = [rep * n + s for rep in range(reps)]
            v = np.asarray(flag_or_d, float)[rows]
            vals.append(v.mean())
        return np.array(vals)

    for key, arr in (("collision", ca), ("offroad", oa), ("failure", ca | oa), ("omf", d)):
        ps = per_scene(arr)
        want = np.std([ps[b].mean() for b in boots])
        assert err[key] == pytest.approx(want, rel=1e-9, abs=1e-12), key


def test_ranked_panel_and_preference_numbers_recomputed_from_fresh_rollouts(default_result):
    """Section 2 and the caption above it, rebuilt here: the default run ranks K = 8 reference rollouts of each of
    the first M = 128 training scenes after its seeded shuffle (rollout generator seeded with the seed). The panel
    shows scene 0's rollouts in increasing OMF distance to that scene's own log, with their event flags, and the
    caption's failure share and the claim's agreement (own log) and control (previous scene's log) come from them."""
    cfg = eng.Config()
    M, K = cfg.n_scenes, cfg.k_samples
    r, m = default_result, default_result.metrics
    train, _ = eng._banks()
    order = np.random.default_rng(cfg.seed).permutation(eng.N_TRAIN_SCENES)[:M]
    init = torch.as_tensor(train["init"][order], dtype=torch.float32)
    init = init[:, None].expand(M, K, eng.N_AGENTS, 3).reshape(M * K, eng.N_AGENTS, 3)
    S = eng.rollout(eng.load_reference(), init, torch.Generator().manual_seed(cfg.seed))[0].numpy()
    coll, off = eng.events(S)
    fail = (coll.any(1) | off.any(1)).any(-1).reshape(M, K)
    assert m["pref_fail_rate"] == pytest.approx(fail.mean())
    # the panel: scene 0's rollouts sorted by their distance to scene 0's log
    exp0 = train["states"][order[0]]
    np.testing.assert_allclose(r.rank_expert, exp0, atol=1e-4)
    np.testing.assert_allclose(r.rank_states[:, 0], np.broadcast_to(exp0[0], r.rank_states[:, 0].shape), atol=1e-4)
    d0 = eng.omf_distance(S[:K], np.repeat(exp0[None], K, 0), cfg.event_weight)
    np.testing.assert_allclose(r.rank_dist, np.sort(d0), rtol=1e-6)
    np.testing.assert_allclose(r.rank_states, S[:K][np.argsort(d0)], atol=1e-4)
    rc, ro = eng.events(r.rank_states)
    np.testing.assert_array_equal(r.rank_events, rc | ro)
    # agreement on mixed pairs (exactly one of two rollouts fails), by loops
    d = eng.omf_distance(S, np.repeat(train["states"][order], K, 0), cfg.event_weight).reshape(M, K)
    mc = min(M, 32)
    d_ctrl = eng.omf_distance(S[:mc * K], np.repeat(train["states"][order[np.roll(np.arange(mc), 1)]], K, 0),
                              cfg.event_weight).reshape(mc, K)

    def agreement(dist):
        hits = tot = 0
        for i in range(len(dist)):
            for j in range(K):
                for k in range(j + 1, K):
                    if fail[i, j] != fail[i, k]:
                        clean, bad = (j, k) if not fail[i, j] else (k, j)
                        hits += dist[i, clean] < dist[i, bad]
                        tot += 1
        return hits / tot, tot

    a, n_mixed = agreement(d)
    assert m["agreement"] == pytest.approx(a) and m["n_mixed_pairs"] == n_mixed
    assert m["agreement_control"] == pytest.approx(agreement(d_ctrl)[0])


def test_scene_view_events_belong_to_the_drawn_rollouts(default_result):
    """Section 1 draws view_states[method][scene] with red crosses at view_events: the flags must be the events of
    exactly those states (collision or off-road), and every rollout starts from the held-out scene's initial state."""
    r = default_result
    _, held = eng._banks()
    assert set(r.view_states) == {"expert", "reference", "DPA-OMF", "adversarial"}
    for name, S in r.view_states.items():
        assert S.shape == (eng.N_HELD, eng.HORIZON + 1, eng.N_AGENTS, 3)
        c, o = eng.events(S.astype(np.float64))
        assert np.mean(r.view_events[name] == (c | o)) > 0.9999, name
        np.testing.assert_allclose(S[:, 0], held["states"][:, 0], atol=1e-4)
    assert any(r.view_events[n].any() for n in ("reference", "adversarial"))


def test_dpo_snapshots_are_the_policy_after_each_marked_step():
    """The held-out OMF curve of section 4 evaluates copies of the policy at DPO steps 0, ..., dpo_steps: the copy at
    the last mark must be the policy that training returns, and the copy at 0 the reference."""
    ref = eng.load_reference()
    train, _ = eng._banks()
    st = torch.as_tensor(train["states"][:6], dtype=torch.float32)
    F = eng.expert_features(st)
    T = torch.as_tensor(train["tokens"][:6])
    data = (F[:3], T[:3], F[3:], T[3:])
    pol, hist, snaps = eng._dpo(ref, data, eng.Config(dpo_steps=6), 6, None, marks=(0, 3, 6))
    assert len(hist) == 6 and len(snaps) == 3 and snaps[0] is ref
    for a, b in zip(snaps[-1].parameters(), pol.parameters()):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(snaps[1].parameters(), pol.parameters()))


def test_scaling_sweep_last_point_is_the_main_run():
    """Section 5: at M equal to the slider's M the sweep reuses the main DPA-OMF policy, so its held-out OMF distance
    and failure share equal the realism table's DPA-OMF row (failure = collision or off-road)."""
    r = eng.run(eng.Config(n_scenes=32, dpo_steps=20, sweep=True, baseline=False))
    assert list(r.sweep_m) == [16, 32]
    dpa = r.table["DPA-OMF"]
    assert r.sweep_omf[-1] == pytest.approx(dpa["omf"])
    assert r.sweep_fail[-1] == pytest.approx(dpa["failure"])
    assert dpa["failure"] > dpa["collision"]          # off-road events matter for this check


def test_occupancy_features_and_sinkhorn_epsilon_follow_the_formulas():
    """How-it-works: phi = (x/10, y/1.75, v/5, t/4, w collision, w off-road) at t = 2, 4, ..., T, and Sinkhorn's
    epsilon = 0.05 median(C) with C the squared Euclidean costs (scipy's cdist here)."""
    from scipy.spatial.distance import cdist

    rng = np.random.default_rng(2)
    s = np.zeros((1, eng.HORIZON + 1, eng.N_AGENTS, 3))
    s[0, :, :, 0] = np.arange(eng.N_AGENTS) * 20.0 + rng.uniform(0, 5, (eng.HORIZON + 1, 1))
    s[0, :, :, 1] = rng.choice(eng.LANES, eng.N_AGENTS)
    s[0, :, :, 2] = rng.uniform(5, 15, (eng.HORIZON + 1, eng.N_AGENTS))
    occ = eng.occupancy(s, 3.0)[0].reshape(len(eng.OCC_STEPS), eng.N_AGENTS, 6)
    for k, t in enumerate(range(2, eng.HORIZON + 1, 2)):
        for a in range(eng.N_AGENTS):
            x, y, v = s[0, t, a]
            np.testing.assert_allclose(occ[k, a], [x / 10, y / 1.75, v / 5, t / 4, 0, 0], rtol=1e-6)
    X, Y = rng.normal(size=(3, 20, 6)), rng.normal(size=(3, 25, 6)) + 1.0
    _, eps = eng.sinkhorn_batch(X, Y)
    for i in range(3):
        assert eps[i] == pytest.approx(0.05 * np.median(cdist(X[i], Y[i], "sqeuclidean")), rel=1e-9)


def test_seed_widget_reaches_the_held_out_sampling():
    """With 0 DPO steps every method is the reference, so the only thing the Seed widget can change in the held-out
    evaluation is the sampling noise: the drawn reference rollouts must differ between seeds 0 and 1, while both
    start from the same held-out scenes."""
    a, b = (eng.run(eng.Config(dpo_steps=0, n_scenes=16, baseline=False, seed=s)).view_states["reference"]
            for s in (0, 1))
    np.testing.assert_array_equal(a[:, 0], b[:, 0])
    assert not np.allclose(a, b)


def test_ranked_panel_marks_off_road_events_too():
    """The red crosses of section 2 mark collision OR off-road. At seed 3 (16 scenes, no DPO) the shown scene's
    rollouts leave the road without colliding (25 such agent-steps, measured), so a panel that marked collisions
    only would miss them."""
    r = eng.run(eng.Config(seed=3, n_scenes=16, dpo_steps=0, baseline=False))
    c, o = eng.events(r.rank_states.astype(np.float64))
    assert (o & ~c).any()
    np.testing.assert_array_equal(r.rank_events, c | o)
    assert np.all(np.diff(r.rank_dist) >= 0)


# ----------------------------------------------------------------------------- what the page draws and quotes


def test_page_scene_view_ranked_colours_and_realism_bars(default_result):
    """Opened at held-out scene 3: each panel draws that scene's cars; the ranked rollouts are coloured green for
    the two closest (preferred) and orange-red for the two farthest (rejected); each realism bar sits under its
    method; the control caption quotes the other scene's agreement first, then the own log's."""

    r, m = default_result, default_result.metrics
    at = open_page("implicit_preference_motion", {"scene": "3"},
                   seed=(("engine.implicit_preference_motion", eng.Config(), default_result),))
    figs = figures(at)

    paths = [d for d in figs["scene"]["data"] if d.get("mode") == "lines+markers"]
    names = [n for n in ("expert", "reference", "DPA-OMF", "adversarial") if n in r.view_states]
    assert len(paths) == len(names)
    for d, n in zip(paths, names, strict=True):
        x = values(d["x"])
        np.testing.assert_allclose(np.sort(x[np.isfinite(x)]), np.sort(r.view_states[n][3][..., 0].ravel()),
                                   err_msg=n)

    K = len(r.rank_dist)
    assert np.all(np.diff(r.rank_dist) >= 0)
    ranked = [d["line"]["color"] for d in figs["ranked"]["data"]
              if d.get("mode") == "lines+markers" and d["line"]["color"] != "#bbbbbb"]
    assert ranked == ["#29a36a"] * 2 + ["#3b6fd8"] * (K - 4) + ["#e4572e"] * 2

    methods = list(r.table)
    for k in ("collision", "offroad", "omf"):
        bars = figs[f"bar_{k}"]["data"][0]
        assert list(bars["x"]) == methods
        np.testing.assert_allclose(values(bars["y"]), [r.table[n][k] for n in methods], err_msg=k)

    caps = " ".join(c.value for c in at.caption)
    assert (f"the distance still prefers the clean rollout in {m['agreement_control']:.0%} of mixed pairs "
            f"(vs {m['agreement']:.0%} with the scene's own log). Another scene's log clears the same bar") in caps
    # realism metrics where alignment costs more than 10 %, named under the bars (lower is better for all five)
    ref, dpa = r.table["reference"], r.table["DPA-OMF"]
    worse = [k for k in ("collision", "offroad", "omf", "w1_speed", "w1_accel") if dpa[k] > 1.1 * ref[k]]
    assert r.worse_than_reference == worse and "w1_accel" in worse      # measured 0.199 vs 0.033 at the default
    assert f"W1 acceleration (m/s²) {dpa['w1_accel']:.3g} vs the reference's {ref['w1_accel']:.3g}" in caps
    assert "is more than 10 % worse than the pre-trained reference on" in caps


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_both_methods_get_the_pairs_the_spec_defines(monkeypatch):
    """The DPO data of both methods, rebuilt here from fresh reference rollouts: DPA-OMF prefers each
    scene's rank 1 and 2 rollouts (smallest OMF distance to the scene's own log) over its ranks K and K -
    1; the adversarial baseline has the same budget and the same rejected rollouts (ranks K and K - 1) but
    always prefers the scene's expert log. Rejecting the best-ranked rollouts instead would make the
    baseline look far worse than it is."""
    seen = []
    real = eng._dpo

    def spy(ref, data, cfg, steps, progress, marks=()):
        seen.append([x.detach().clone() for x in data])
        return real(ref, data, cfg, steps, progress, marks)

    monkeypatch.setattr(eng, "_dpo", spy)
    cfg = eng.Config(n_scenes=16, k_samples=4, dpo_steps=0)
    eng.run(cfg)
    assert len(seen) == 2
    M, K = cfg.n_scenes, cfg.k_samples
    train, _ = eng._banks()
    order = np.random.default_rng(cfg.seed).permutation(eng.N_TRAIN_SCENES)[:M]
    init = torch.as_tensor(train["init"][order], dtype=torch.float32)
    init = init[:, None].expand(M, K, eng.N_AGENTS, 3).reshape(M * K, eng.N_AGENTS, 3)
    S, _, T, _ = eng.rollout(eng.load_reference(), init, torch.Generator().manual_seed(cfg.seed))
    T = T.reshape(M, K, eng.HORIZON, eng.N_AGENTS)
    d = eng.omf_distance(S.numpy(), np.repeat(train["states"][order], K, 0), cfg.event_weight).reshape(M, K)
    rank = np.argsort(d, 1)
    def ranked(j):                          # every scene's rollout at rank position j, scene by scene
        return torch.stack([T[i, rank[i, j]] for i in range(M)])

    want_w = torch.cat([ranked(0), ranked(1)])
    want_l = torch.cat([ranked(-1), ranked(-2)])
    expert = torch.as_tensor(train["tokens"][order])
    (_, tw, _, tl), (_, aw, _, al) = seen
    assert torch.equal(tw, want_w) and torch.equal(tl, want_l)      # DPA-OMF: best two vs worst two
    assert torch.equal(aw, torch.cat([expert, expert]))             # adversarial: the expert log wins...
    assert torch.equal(al, want_l)                                  # ...over the same worst two rollouts


def test_control_caption_follows_the_control_badge(default_result):
    """The negative-control caption says what the last badge measured: with the control agreement below the bar (the
    same run, its control lowered) it says the scene's own log carries the preference, not that the event features
    do."""
    r = copy.deepcopy(default_result)
    r.metrics["agreement_control"] = 0.6
    at = open_page("implicit_preference_motion", {}, seed=(("engine.implicit_preference_motion", eng.Config(), r),))
    caps = " ".join(c.value for c in at.caption)
    assert "in 60% of mixed pairs" in caps
    assert "Another scene's log stays below the bar, while the scene's own log clears it" in caps
    assert "carry most of that agreement" not in caps
