"""Diffusion planning (Diffusion Veteran): environment, sampler and selection checks, claims at the default config."""

import functools
import math
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
import torch

from engine import diffusion_planning as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def bundle():
    return eng.load_bundle()[0]


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


# ----------------------------------------------------------------------------- environment and data

def test_bfs_matches_networkx():
    g = nx.grid_2d_graph(*eng.WALLS.shape)
    g.remove_nodes_from([c for c in list(g.nodes) if eng.WALLS[c]])
    ref = nx.single_source_shortest_path_length(g, eng.GOAL_CELL)
    d = eng.bfs_distances(eng.GOAL_CELL)
    for cell in eng.free_cells():
        assert d[cell] == ref[cell]
    assert np.isinf(d[eng.WALLS]).all()


def test_speed_closed_form():
    s = np.array([1.5, 5.5, 0.0, 0.0])  # bottom corridor, open to the right
    for n in range(1, 8):
        s = eng.step(s, np.array([1.0, 0.0]))
        assert np.isclose(s[2], 0.25 * (1 - 0.8 ** n))
        assert np.isclose(s[0], 1.5 + sum(0.25 * (1 - 0.8 ** j) for j in range(1, n + 1)))


def test_never_enters_walls():
    rng = np.random.default_rng(0)
    s = np.tile(np.r_[eng.cell_centre(eng.START_CELL), 0.0, 0.0], (64, 1))
    for _ in range(500):
        s = eng.step(s, rng.uniform(-1, 1, (64, 2)))
        assert not eng._blocked(s[:, 0], s[:, 1]).any()


def test_value_labels_loop():
    r = np.random.default_rng(1).integers(0, 2, 50).astype(float)
    v = eng.value_labels(r, 0.99)
    for t in range(50):
        assert np.isclose(v[t], sum(0.99 ** j * r[t + j] for j in range(50 - t)))


def test_dataset_segments_and_labels():
    data = eng.generate_dataset(episodes=3, steps=200, seed=5)
    assert not eng._blocked(data["states"][..., 0], data["states"][..., 1]).any()
    plans, vals, lo, hi = eng.plan_segments(data)
    assert plans.shape[1:] == (eng.HORIZON, 2) and np.abs(plans).max() <= 1.0 + 1e-6
    assert vals.min() >= 0 and vals.max() <= 1 + 1e-6
    # first segment of episode 0: waypoints 5 steps apart, value = discounted sum by a plain loop
    pos = data["states"][0, :, :2]
    assert np.allclose(eng.denormalise(plans[0]), pos[0:76:5], atol=1e-5)
    rw = data["rewards"][0]
    v0 = sum(0.99 ** j * rw[j] for j in range(len(rw)))
    assert np.isclose(vals[0] * (hi - lo) + lo, v0, atol=1e-4)


def test_cosine_schedule_closed_form():
    s = 0.008
    for t in (0, 1, 250, 500, 999):
        ref = math.cos((t / 1000 + s) / (1 + s) * math.pi / 2) ** 2 / math.cos(s / (1 + s) * math.pi / 2) ** 2
        assert np.isclose(eng.alpha_bar(t), max(ref, 1e-4))
    assert np.all(np.diff(eng.alpha_bar(np.arange(1001))) <= 0)


def test_checkpoint_small_and_loads():
    path = eng.checkpoint_path()
    assert path.exists() and path.stat().st_size < 2 * 1024 * 1024
    _, info = eng.load_bundle()
    assert info["planner_steps"] > 0 and info["d_model"] == eng.D_MODEL


# ----------------------------------------------------------------------------- sampler

def _reference_ddim(planner, start, noise, steps, use_cond, w=None, cg=0.0, guide=None):
    """Plain DDIM written from the formulas (not the engine's loop): one row at a time, no batching tricks.

    w given: classifier-free guidance eps_0 + w (eps_y - eps_0) from two separate calls (use_cond ignored).
    cg > 0: classifier guidance, eps - cg sqrt(1 - abar) grad_x V(x_t, t), the gradient from torch.func, row by row."""
    s = 0.008

    def ab(t):
        if t == 0:
            return 1.0
        f = math.cos((t / 1000 + s) / (1 + s) * math.pi / 2) ** 2 / math.cos(s / (1 + s) * math.pi / 2) ** 2
        return min(max(f, 1e-4), 1.0)

    p0 = torch.as_tensor(2 * (start - np.array([1.0, 1.0])) / np.array([7.0, 5.0]) - 1, dtype=torch.float32)
    x = torch.as_tensor(noise, dtype=torch.float32).clone()
    x[:, 0] = p0
    grid = [int(round(v)) for v in np.linspace(1000, 0, steps + 1)]
    with torch.no_grad():
        for t, tp in zip(grid[:-1], grid[1:]):
            tt, y = torch.full((len(x),), t), torch.ones(len(x))
            if w is None:
                eps = planner(x, tt, y, torch.full((len(x),), use_cond))
            else:
                e0, ey = planner(x, tt, y, torch.zeros(len(x), dtype=torch.bool)), planner(x, tt, y, torch.ones(
                    len(x), dtype=torch.bool))
                eps = e0 + w * (ey - e0)
            if cg:
                with torch.enable_grad():
                    tt1 = torch.tensor([t])
                    g = torch.stack([torch.func.grad(lambda z, tt1=tt1: guide(z[None], tt1).sum())(row) for row in x])
                g[:, 0] = 0.0
                eps = eps - cg * math.sqrt(1 - ab(t)) * g
            x0 = ((x - math.sqrt(1 - ab(t)) * eps) / math.sqrt(ab(t))).clamp(-1, 1)
            x = math.sqrt(ab(tp)) * x0 + math.sqrt(1 - ab(tp)) * eps
            x[:, 0] = p0
    return x


def test_inpainting_first_waypoint_exact(bundle):
    rng = np.random.default_rng(3)
    start = np.array([eng.cell_centre(c) for c in eng.free_cells()]) + rng.uniform(-0.3, 0.3, (24, 2))
    w = np.r_[np.zeros(12), np.full(12, 2.0)]
    x = eng.sample_plans(bundle.planner, start, rng.standard_normal((24, eng.HORIZON, 2)), w, 5)
    p0 = torch.as_tensor(eng.normalise(start), dtype=torch.float32)
    assert torch.equal(x[:, 0], p0)


def test_cfg_w0_is_unconditional_and_w1_is_conditional(bundle):
    rng = np.random.default_rng(4)
    start = np.tile(eng.cell_centre(eng.START_CELL), (6, 1)) + rng.uniform(-0.2, 0.2, (6, 2))
    noise = rng.standard_normal((6, eng.HORIZON, 2))
    mixed = eng.sample_plans(bundle.planner, start, noise, np.array([0, 0, 0, 1, 1, 1.0]), 5)
    ref_u = _reference_ddim(bundle.planner, start[:3], noise[:3], 5, False)
    ref_c = _reference_ddim(bundle.planner, start[3:], noise[3:], 5, True)
    assert torch.allclose(mixed[:3], ref_u, atol=1e-4)
    assert torch.allclose(mixed[3:], ref_c, atol=1e-4)
    # guidance actually changes the plan (the condition is not ignored by the network)
    assert not torch.allclose(ref_u, _reference_ddim(bundle.planner, start[:3], noise[:3], 5, True), atol=1e-3)
    # w = 1 needs no unconditional pass: the two-pass formula at w = 1 gives the same plans, and w = 2 (two passes)
    # in the same batch matches the two-call reference
    assert torch.allclose(ref_c, _reference_ddim(bundle.planner, start[3:], noise[3:], 5, None, w=1.0), atol=1e-4)
    mixed2 = eng.sample_plans(bundle.planner, start, noise, np.array([1, 1, 1, 2, 2, 2.0]), 5)
    assert torch.allclose(mixed2[:3], _reference_ddim(bundle.planner, start[:3], noise[:3], 5, True), atol=1e-4)
    assert torch.allclose(mixed2[3:], _reference_ddim(bundle.planner, start[3:], noise[3:], 5, None, w=2.0),
                          atol=1e-4)


def test_classifier_guidance_matches_reference_and_raises_the_critic_value(bundle):
    rng = np.random.default_rng(5)
    n = 32
    start = np.tile(eng.cell_centre(eng.START_CELL), (n, 1)) + rng.uniform(-0.2, 0.2, (n, 2))
    noise = rng.standard_normal((n, eng.HORIZON, 2))
    scales = np.repeat([0.0, 1.0, 3.0, 10.0], n // 4)
    guide = eng.load_guide()[0]
    x = eng.sample_plans(bundle.planner, start, noise, np.zeros(n), 5, cg_scales=scales, guide=guide)
    for s in (0.0, 1.0, 3.0):
        rows = scales == s
        ref = _reference_ddim(bundle.planner, start[rows], noise[rows], 5, False, cg=s, guide=guide)
        assert torch.allclose(x[torch.as_tensor(rows)], ref, atol=1e-4), s
    # the same noise without guidance, then more and more guidance: the clean-plan critic (a separate network, not
    # the guide) values the plans more
    plain = eng.sample_plans(bundle.planner, start, noise, np.zeros(n), 5)
    v_plain = eng.critic_values(bundle.critic, plain)
    v_cg = eng.critic_values(bundle.critic, x)
    gains = [float((v_cg - v_plain)[scales == s].mean()) for s in (0.0, 1.0, 3.0, 10.0)]
    assert gains[0] == pytest.approx(0.0, abs=1e-5)
    assert 0 < gains[1] < gains[2] < gains[3], gains
    with pytest.raises(ValueError, match="guide"):
        eng.sample_plans(bundle.planner, start[:2], noise[:2], np.zeros(2), 5, cg_scales=np.ones(2))


def test_classifier_guidance_arms_and_their_claim():
    cfg = eng.Config(cg_scales="1,10,30")
    res = eng.run(cfg)
    assert [nm for nm in res.names if nm.startswith("CG ")] == ["CG s=1", "CG s=10", "CG s=30"]
    # a CG plan costs S denoiser passes per decision, like one unguided sample
    assert all(res.nfe[f"CG s={s}"] == cfg.ddim_steps for s in ("1", "10", "30"))
    claim = next(c for c in eng.claims(res) if "classifier guidance" in c.statement)
    m = res.metrics
    assert claim.measured == pytest.approx(m["success_mcss"] - max(m[f"success[CG s={s}]"] for s in ("1", "10",
                                                                                                    "30")))
    assert claim.passed, claim.describe()
    # the detail names the best scale and its success: the scale with the highest success in the table
    best = max(("1", "10", "30"), key=lambda s: m[f"success[CG s={s}]"])
    assert m["success_best_cg"] == m[f"success[CG s={best}]"]
    assert m[f"success[CG s={m['cg_best_s']:g}]"] == m["success_best_cg"]
    assert eng.estimated_gflop(cfg) > eng.estimated_gflop(eng.Config())
    assert not any(c for c in eng.claims(eng.run(eng.Config())) if "classifier guidance" in c.statement)


def test_classifier_guidance_makes_a_single_sample_goal_directed():
    """Paired episodes (same starts and noise), 64 of them: one sample steered by the guide's gradient reaches the
    goal far more often than the unguided sample, more so at a larger scale (up to s = 30; at s = 100 the plans leave
    the data and fail)."""
    bundle = eng.load_bundle()[0]
    vs = [eng.Variant("unconditional", "uncond")] + [eng.Variant(f"CG s={s}", "cg", w=float(s))
                                                      for s in (1, 10, 30, 100)]
    vs.append(eng.Variant("MCSS N=12", "mcss", n=12))
    sim = eng.simulate(bundle, vs, episodes=64, ddim_steps=5, replan=20, seed=0)
    u, c1, c10, c30, c100, mc = (eng.success_rate(f) for f in sim["first"])
    assert c10 - u >= 0.3 and c1 < c10, (u, c1, c10)
    assert c100 < c10, (c10, c100)
    # what the page's caveat says: one plan guided at s = 10-30 does almost as well as the best of 12 unguided plans
    assert min(c10, c30) >= mc - 0.1, (c10, c30, mc)


# ----------------------------------------------------------------------------- selection plumbing

def test_mcss_n1_equals_unconditional(bundle):
    vs = [eng.Variant("mcss1", "mcss", n=1), eng.Variant("uncond", "uncond"), eng.Variant("cfg0", "cfg", w=0.0)]
    sim = eng.simulate(bundle, vs, 8, 5, 20, seed=2)
    assert np.allclose(sim["traj"][0], sim["traj"][1], atol=1e-5)
    assert np.allclose(sim["traj"][2], sim["traj"][1], atol=1e-5)
    assert np.array_equal(sim["first"][0], sim["first"][1])


def test_oracle_selection_at_least_learned_and_broken_selection_fails(bundle, default_result):
    cfg = eng.Config()
    vs = [eng.Variant("critic", "mcss", n=12), eng.Variant("oracle", "mcss", n=12, select="oracle"),
          eng.Variant("argmin", "mcss", n=12, select="argmin"), eng.Variant("random", "mcss", n=12, select="random")]
    sim = eng.simulate(bundle, vs, cfg.episodes, cfg.ddim_steps, cfg.replan, cfg.seed)
    s = {nm: eng.success_rate(sim["first"][i]) for i, nm in enumerate(sim["names"])}
    # same episodes as the page's MCSS variant (the selection is the only difference)
    assert s["critic"] == default_result.metrics["success_mcss"]
    # oracle from the maze alone: BFS distance of the plan's closest approach to the goal
    assert s["oracle"] >= s["critic"]
    # Documented, deliberately not asserted: the spec's oracle scored the plan's END point. Plans span 75 steps,
    # about the whole route, so good plans pass through the goal and go on (as the random-goal data did); the
    # end-point oracle then prefers plans that stop short of the goal and reaches it in only 0.25 of the default
    # episodes (measured with the shipped checkpoint, select="end") against 1.0 for the learned critic.
    # a broken selection cannot pass claim 1
    assert s["argmin"] < 0.70 and s["random"] < 0.70
    assert s["argmin"] < s["critic"] - 0.3


def test_bfs_pick_of_two_unguided_plans_stays_below_one_cfg_plan(bundle):
    """The page's note on the equal-compute badge: even choosing between two unguided plans by the maze's own BFS
    distance (no critic) reaches the goal less often than a single CFG w = 1 plan (64 episodes; measured 0.70 vs
    0.94 at seed 0 and 0.81 vs 0.89 at seed 1), so the shortfall at 2 S is not the critic's fault."""
    cfg = eng.Config()
    vs = [eng.Variant("bfs pick of 2", "mcss", n=2, select="oracle"), eng.Variant("cfg w=1", "cfg", w=1.0)]
    for seed in (0, 1):
        sim = eng.simulate(bundle, vs, 64, cfg.ddim_steps, cfg.replan, seed)
        picked, guided = (eng.success_rate(sim["first"][i]) for i in range(2))
        assert picked < guided, (seed, picked, guided)


def test_critic_ranks_by_maze_distance(default_result):
    # the critic was trained on returns only; its ranking must agree with BFS distance computed from the maze
    assert default_result.metrics["critic_spearman_vs_distance"] < -0.3


# ----------------------------------------------------------------------------- contract

EQUAL_NFE_LABEL = "mean success gap MCSS − CFG at NFE 2S and 4S"


def test_claims_pass_at_default(default_result):
    cs = eng.claims(default_result)
    assert EQUAL_NFE_LABEL in [c.label for c in cs]
    for c in cs:
        if c.label == EQUAL_NFE_LABEL:
            # Documented, not asserted: selection vs guidance at equal compute does NOT reproduce at the default
            # setting (threshold -0.05 fixed before the first run). CFG at w = 1 (best weight every time) costs
            # one pass per step, so 2 S buys two CFG plans and 4 S four. Measured with the shipped checkpoint:
            # NFE 10, MCSS N=2 0.50 vs CFG w=1 best of 2 0.88; NFE 20, MCSS N=4 0.88 vs CFG w=1 best of 4 0.69
            # -> mean gap -0.09 (seeds 1, 2: -0.06, -0.12). Not noise: with 64 episodes the gap is -0.15, -0.08,
            # -0.17 for seeds 0, 1, 2, all of it at 2 S (-0.33, -0.17, -0.36; at 4 S +0.03, +0.02, +0.02). Not the
            # critic either: choosing among 2 unguided plans by BFS distance (select="oracle") reaches 0.70 and
            # 0.81 (64 episodes, seeds 0, 1) against 0.94 and 0.89 for a single CFG w=1 plan.
            # The page shows the badge failing with these numbers.
            continue
        assert c.passed, c.describe()


@functools.lru_cache(maxsize=3)
def _metrics_64_episodes(seed: int) -> dict:
    """One run per seed at 64 episodes with the U-Net comparison on, shared by the two 64-episode tests below (the
    comparison adds arms and leaves every other metric as it is without them: checked at the default, where only the
    cost estimate differs)."""
    return eng.run(eng.Config(compare_denoisers=True, episodes=64, seed=seed)).metrics


def test_the_unet_comparison_leaves_the_other_metrics_as_they_are(default_result):
    m = eng.run(eng.Config(compare_denoisers=True)).metrics
    assert {k for k, v in default_result.metrics.items() if m[k] != v} <= {"estimated_gflop"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_compute_shortfall_holds_with_64_episodes(seed):
    """The evidence behind the equal-compute badge failing (and behind the 16-episode default, see Config.episodes):
    with 64 episodes the mean MCSS − CFG gap is below the −0.05 bar at every seed (measured −0.15, −0.08, −0.17),
    all of it at 2 S (−0.33, −0.17, −0.36) while 4 S is about even (+0.03, +0.02, +0.02)."""
    m = _metrics_64_episodes(seed)
    assert m["equal_nfe_gap"] < -0.05
    assert m["equal_nfe_gap_2S"] < -0.1 and abs(m["equal_nfe_gap_4S"]) <= 0.05


def test_cost_cap_rejects_largest_setting():
    with pytest.raises(ValueError):
        eng.Config(candidates=64, ddim_steps=20, replan=5, episodes=64)
    assert eng.estimated_gflop(eng.Config()) <= eng.COST_CAP_GFLOP
    # both optional extras can be switched on together at the default sizes (the benchmark's largest setting)
    assert eng.estimated_gflop(eng.HEAVY_CONFIG) <= eng.COST_CAP_GFLOP
    assert eng.HEAVY_CONFIG.scaling_curve and eng.HEAVY_CONFIG.compare_denoisers


def test_spearman_matches_scipy():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(5)
    a, b = rng.normal(size=300), rng.integers(0, 8, 300).astype(float)    # b has many ties
    assert np.isclose(eng.spearman(a, b), spearmanr(a, b).statistic)


# ----------------------------------------------------------------------------- U-Net denoiser and compute accounting

@pytest.fixture(scope="module")
def unet():
    return eng.load_unet()[0]


def test_unet_checkpoint_small_and_trained_like_the_transformer(unet):
    path = eng.unet_checkpoint_path()
    assert path.exists() and path.stat().st_size < 2 * 1024 * 1024
    info, tinfo = eng.load_unet()[1], eng.load_bundle()[1]
    for k in ("planner_steps", "lr", "batch", "ema", "train_seed"):
        assert info[k] == tinfo[k], k
    assert "eval_success[MCSS N=12]" in info and "eval_success[unconditional]" in info


def test_unet_shape_batch_equivariance_and_null_condition(unet):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, eng.HORIZON, 2, generator=g)
    t = torch.tensor([1, 100, 300, 500, 800, 1000])
    y = torch.rand(6, generator=g)
    use = torch.tensor([True, False, True, False, True, False])
    with torch.no_grad():
        out = unet(x, t, y, use)
        assert out.shape == x.shape
        perm = torch.tensor([3, 0, 5, 1, 4, 2])
        # rows are independent of each other (GroupNorm normalises per sample): permuting the batch permutes outputs
        assert torch.allclose(unet(x[perm], t[perm], y[perm], use[perm]), out[perm], atol=1e-5)
        # the null condition ignores y; the return condition does not
        y2 = y + 0.5
        out2 = unet(x, t, y2, use)
        assert torch.allclose(out2[~use], out[~use], atol=1e-6)
        assert not torch.allclose(out2[use], out[use], atol=1e-4)


def test_unet_ddim_w0_and_w1_match_reference(unet):
    rng = np.random.default_rng(6)
    start = np.tile(eng.cell_centre(eng.START_CELL), (6, 1)) + rng.uniform(-0.2, 0.2, (6, 2))
    noise = rng.standard_normal((6, eng.HORIZON, 2))
    mixed = eng.sample_plans(unet, start, noise, np.array([0, 0, 0, 1, 1, 1.0]), 5)
    assert torch.allclose(mixed[:3], _reference_ddim(unet, start[:3], noise[:3], 5, False), atol=1e-4)
    assert torch.allclose(mixed[3:], _reference_ddim(unet, start[3:], noise[3:], 5, True), atol=1e-4)


class _Counted(torch.nn.Module):
    """Wraps a denoiser and counts plan rows passed through it (one row of one call = one NFE)."""

    def __init__(self, net):
        super().__init__()
        self.net, self.rows, self.calls = net, 0, 0

    def forward(self, x, t, y, use):
        self.rows += len(x)
        self.calls += 1
        return self.net(x, t, y, use)


def test_nfe_per_decision_matches_counted_denoiser_calls(bundle):
    # each variant gets its own counted copy of the planner through the backbone field, so one closed loop
    # measures every variant's forward passes separately
    vs = [eng.Variant("mcss3", "mcss", n=3, backbone="a"), eng.Variant("cfg2", "cfg", w=2.0, backbone="b"),
          eng.Variant("cfg2x3", "cfg", n=3, w=2.0, backbone="c"), eng.Variant("cfg0", "cfg", w=0.0, backbone="d"),
          eng.Variant("uncond", "uncond", backbone="e"), eng.Variant("cfg1", "cfg", w=1.0, backbone="f"),
          eng.Variant("cfg1x3", "cfg", n=3, w=1.0, backbone="g")]
    counted = {v.backbone: _Counted(bundle.planner) for v in vs}
    episodes, steps, replan = 8, 4, 50
    eng.simulate(bundle, vs, episodes, steps, replan, seed=0, planners=counted)
    decisions = episodes * len(range(0, eng.EPISODE_STEPS, replan))
    for v in vs:
        assert counted[v.backbone].rows == decisions * eng.nfe_per_decision(v, steps), v.name
        assert counted[v.backbone].calls == len(range(0, eng.EPISODE_STEPS, replan)) * steps   # batched
    # CFG costs two passes per plan and step, except w = 0 and w = 1 (one pass, as in CleanDiffuser)
    assert [eng.nfe_per_decision(v, steps) for v in vs] == [12, 8, 24, 4, 4, 4, 12]


@pytest.mark.parametrize("w", [1.0, 2.0])
def test_equal_compute_arms_spend_the_same_counted_passes(bundle, w):
    # the CFG arms the claim pairs with MCSS N = 2 and N = 4 (at a best weight w) must push exactly as many plan
    # rows through the network per decision as their MCSS partner: counted here, not taken from nfe_per_decision
    cfg = eng.Config()
    arms = [eng.Variant(f"CFG w={w:g}", "cfg", w=w)] + [v for v in eng._second_pass(cfg, w) if v.kind == "cfg"]
    mcss = [eng.Variant("MCSS N=2", "mcss", n=2), eng.Variant("MCSS N=4", "mcss", n=4)]
    vs = [eng.Variant(v.name, v.kind, n=v.n, w=v.w, backbone=f"b{i}") for i, v in enumerate(mcss + arms)]
    counted = {v.backbone: _Counted(bundle.planner) for v in vs}
    episodes, steps, replan = 8, 2, 50
    eng.simulate(bundle, vs, episodes, steps, replan, seed=0, planners=counted)
    per_decision = {v.name: counted[v.backbone].rows // (episodes * len(range(0, eng.EPISODE_STEPS, replan)))
                    for v in vs}
    by_cost = {}
    for v in vs[2:]:
        by_cost.setdefault(per_decision[v.name], []).append(v.n)
    for partner in ("MCSS N=2", "MCSS N=4"):
        assert len(by_cost[per_decision[partner]]) == 1, (partner, per_decision)
    # the plan counts follow from the passes per plan: 1 and 2 plans at w = 2, 2 and 4 plans at w = 1
    expect = (1, 2) if w != 1 else (2, 4)
    assert [by_cost[per_decision[p]][0] for p in ("MCSS N=2", "MCSS N=4")] == list(expect)


def test_equal_compute_and_backbone_arms_at_default(default_result):
    r, m = default_result, default_result.metrics
    s = eng.Config().ddim_steps
    # the curves pair methods at equal NFE: MCSS N = 2 and N = 4 with the CFG arms that spend 2 S and 4 S
    x_mcss, y_mcss = r.nfe_curves["MCSS (selection)"]
    (x_cfg, y_cfg), = [v for k, v in r.nfe_curves.items() if k.startswith("CFG")]
    assert list(x_mcss[:3]) == [s, 2 * s, 4 * s]
    mc, cf = dict(zip(x_mcss, y_mcss)), dict(zip(x_cfg, y_cfg))
    assert np.isclose(m["equal_nfe_gap"], 0.5 * ((mc[2 * s] - cf[2 * s]) + (mc[4 * s] - cf[4 * s])))
    # the arms behind those points: at w = 1 (one pass per step) two and four plans, otherwise one and two
    w = m["cfg_best_w"]
    k2, k4 = (2, 4) if w == 1 else (1, 2)
    assert (m["cfg_plans_nfe2S"], m["cfg_plans_nfe4S"]) == (k2, k4)
    for k, budget in ((k2, 2 * s), (k4, 4 * s)):
        nm = f"CFG w={w:g}" if k == 1 else f"CFG w={w:g}, best of {k}"
        assert r.nfe[nm] == budget and m[f"success[{nm}]"] == cf[budget]
    assert "backbone_gap" not in m          # the denoiser comparison runs only when asked


def test_denoiser_comparison_claim_and_pairing(default_result):
    r = eng.run(eng.Config(compare_denoisers=True))
    m, m0 = r.metrics, default_result.metrics
    (c,) = [c for c in eng.claims(r) if "Transformer − U-Net" in c.label]
    assert np.isclose(c.measured, 0.5 * (m["success_transformer_mcss"] - m["success_unet_mcss"]
                                         + m["success_transformer_uncond"] - m["success_unet_uncond"]))
    # Documented, deliberately not asserted: this badge passes here (+0.03: MCSS 1.00 vs 0.94, unconditional 0.31 vs
    # 0.31, i.e. one episode of 16) but that is noise. With 64 episodes the gap is -0.01, -0.03, -0.10 for seeds
    # 0, 1, 2: the paper's "Transformer beats U-Net" does not reproduce at this scale, and the page says so.
    # ...but the page's caveat states the default-run part of that ("the Transformer leads by one episode"): keep it
    n = eng.Config().episodes
    assert round(n * (m["success_transformer_mcss"] - m["success_unet_mcss"])) == 1
    assert m["success_transformer_uncond"] == m["success_unet_uncond"]
    # the main variants are the same lanes as in the default run (the U-Net arms only add lanes)
    for k in ("success_mcss", "success_uncond", "success_best_cfg", "equal_nfe_gap"):
        assert m[k] == m0[k], k
    assert m["success_transformer_mcss"] == m0["success_mcss"]
    assert m["success_unet_mcss"] == m["success[U-Net: MCSS N=12]"]
    # the recorded evaluation of the U-Net checkpoint is the same simulation (same seed and episodes)
    assert m["success_unet_mcss"] == r.unet_info["eval_success[MCSS N=12]"]
    assert m["success_unet_uncond"] == r.unet_info["eval_success[unconditional]"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_64_episodes_the_unet_is_as_good_or_better(seed):
    """The page's caveat: with 64 episodes (seeds 0, 1, 2) the U-Net is as good as the Transformer or slightly better
    (measured gaps -0.01, -0.03, -0.10), so the paper's backbone ranking is not claimed at this scale."""
    m = _metrics_64_episodes(seed)
    assert -0.15 <= m["backbone_gap"] <= 0.0


def test_page_draws_the_trajectories_chosen_in_the_url():
    # one trajectory figure, for the variant picked by a view radio that a shared link restores
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "diffusion_planning.py"),
                           default_timeout=300)
    at.query_params["trajectories"] = "unconditional"
    at.run()
    assert not at.exception
    assert at.radio(key="diffusion-planning:trajectories").value == "unconditional"
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert sum("unconditional: success" in t for t in titles) == 1
    assert not any("MCSS N=12: success" in t for t in titles)
    at.radio(key="diffusion-planning:trajectories").set_value("MCSS N=12").run()
    assert at.query_params["trajectories"] in ("MCSS N=12", ["MCSS N=12"])
    assert any("MCSS N=12: success" in t for t in (c.proto.spec for c in at.get("plotly_chart")))


def test_page_says_where_selection_falls_short():
    # seed 0: behind only at the smallest budget; seed 3: behind at both (measured -0.25 and -0.12)
    from tests.pagetext import page_texts

    assert any("The shortfall is at the smallest budget" in t for t in page_texts("diffusion_planning"))
    assert any("Selection is behind at both budgets" in t for t in page_texts("diffusion_planning", {"seed": "3"}))


def test_maze_distance_matches_networkx_inside_every_free_cell():
    """Cell lookup follows cell_centre's (x, y) = (col + 0.5, row + 0.5), and the BFS distance of any point inside
    a free cell (centre or off-centre) is networkx's shortest-path length from that cell to the goal cell."""
    g = nx.grid_2d_graph(*eng.WALLS.shape)
    g.remove_nodes_from([c for c in list(g.nodes) if eng.WALLS[c]])
    ref = nx.single_source_shortest_path_length(g, eng.GOAL_CELL)
    cells = eng.free_cells()
    for off in ((0.0, 0.0), (0.3, -0.3), (-0.4, 0.2)):
        pts = np.array([eng.cell_centre(c) for c in cells]) + np.array(off)
        r, c = eng.cell_of(pts)
        assert list(zip(r.tolist(), c.tolist())) == cells
        np.testing.assert_array_equal(eng.maze_distance_to_goal(pts), [ref[c] for c in cells])


def test_agent_disc_keeps_clear_of_every_wall_square():
    """Geometry written apart from the engine's corner test: after any sequence of actions the agent's centre is
    at Euclidean distance >= RADIUS from every wall cell [c, c + 1] x [r, r + 1] (actions held for 8 steps at a
    time, so agents hit walls and corners with momentum)."""
    rng = np.random.default_rng(11)
    cells = eng.free_cells()
    n = 96
    s = np.zeros((n, 4))
    s[:, :2] = np.array([eng.cell_centre(cells[i]) for i in rng.integers(0, len(cells), n)])
    wr, wc = np.nonzero(eng.WALLS)
    closest = np.inf
    for k in range(600):
        if k % 8 == 0:
            a = rng.choice([-1.0, 0.0, 1.0], size=(n, 2))
        s = eng.step(s, a)
        x, y = s[:, :1], s[:, 1:2]
        dx = np.maximum(np.maximum(wc - x, x - (wc + 1)), 0.0)
        dy = np.maximum(np.maximum(wr - y, y - (wr + 1)), 0.0)
        closest = min(closest, float(np.hypot(dx, dy).min()))
    assert closest >= eng.RADIUS - 1e-9, closest


# ----------------------------------------------------------------------------- page numbers, recomputed

def test_success_and_time_to_goal_columns_follow_the_drawn_trajectories(default_result):
    """The page's table of success and time to goal per variant, recomputed from the trajectories it draws: an
    episode succeeds at the first step whose position lies within GOAL_RADIUS of the goal centre (distance computed
    here), time to goal counts a failed episode as the full EPISODE_STEPS."""
    r, m = default_result, default_result.metrics
    assert r.traj.shape[:2] == r.first.shape == (len(r.names), eng.Config().episodes)
    goal = np.array([eng.GOAL_CELL[1] + 0.5, eng.GOAL_CELL[0] + 0.5])
    for i, nm in enumerate(r.names):
        inside = np.linalg.norm(r.traj[i].astype(np.float64) - goal, axis=-1) <= eng.GOAL_RADIUS + 1e-6
        inside[:, 0] = False                             # the start is far from the goal
        want = np.where(inside.any(1), np.argmax(inside, axis=1), -1)
        np.testing.assert_array_equal(r.first[i], want, err_msg=nm)
        assert m[f"success[{nm}]"] == pytest.approx(np.mean(want >= 0)), nm
        assert m[f"time_to_goal[{nm}]"] == pytest.approx(np.mean([f if f >= 0 else 200 for f in want])), nm


def test_claim_numbers_follow_the_per_variant_successes(default_result):
    """Badge values and details are the per-variant successes of the table: N = 1 is the unconditional planner, the
    best CFG is the single-plan weight with the highest success, the equal-compute CFG numbers belong to the arms
    that spend 2 S and 4 S passes at that weight, and the scaling gaps follow from N = 1, 4, 12."""
    r, m = default_result, default_result.metrics
    cfg = eng.Config()
    s = {nm: m[f"success[{nm}]"] for nm in r.names}
    assert m["success_n1"] == m["success_uncond"] == s["unconditional"]
    for n in (2, 4, 12):
        assert m[f"success_n{n}"] == s[f"MCSS N={n}"], n
    assert m["success_mcss"] == s[f"MCSS N={cfg.candidates}"]
    assert m["mcss_minus_uncond"] == pytest.approx(s[f"MCSS N={cfg.candidates}"] - s["unconditional"])
    assert m["scaling_gain"] == pytest.approx(s["MCSS N=12"] - s["unconditional"])
    assert m["scaling_monotone_gap"] == pytest.approx(min(s["MCSS N=4"] - s["unconditional"],
                                                          s["MCSS N=12"] - s["MCSS N=4"]))
    singles = {w: s[f"CFG w={w:g}"] for w in cfg.cfg_weights}
    assert m["success_best_cfg"] == max(singles.values()) == s[r.best_cfg]
    assert m["mcss_minus_best_cfg"] == pytest.approx(m["success_mcss"] - max(singles.values()))
    w = m["cfg_best_w"]
    assert singles[w] == max(singles.values())
    for budget, key in ((2, "success_cfg_nfe2S"), (4, "success_cfg_nfe4S")):
        (arm,) = [nm for nm in r.names if nm.startswith(f"CFG w={w:g}") and r.nfe[nm] == budget * cfg.ddim_steps]
        assert m[key] == s[arm], (key, arm)
        assert m[f"equal_nfe_gap_{budget}S"] == pytest.approx(s[f"MCSS N={budget}"] - s[arm])


def _bfs_distance_of_points(pts):
    """networkx shortest-path length from each point's cell to the goal cell; a point inside a wall takes the
    distance of the nearest free cell centre (as maze_distance_to_goal documents)."""
    g = nx.grid_2d_graph(*eng.WALLS.shape)
    g.remove_nodes_from([c for c in list(g.nodes) if eng.WALLS[c]])
    ref = nx.single_source_shortest_path_length(g, eng.GOAL_CELL)
    cells = sorted(ref)
    centres = np.array([[c + 0.5, r + 0.5] for r, c in cells])
    out = []
    for x, y in pts:
        cell = (min(max(int(np.floor(y)), 0), eng.WALLS.shape[0] - 1), min(max(int(np.floor(x)), 0),
                                                                          eng.WALLS.shape[1] - 1))
        if cell not in ref:
            cell = cells[int(np.argmin(np.linalg.norm(centres - [x, y], axis=1)))]
        out.append(ref[cell])
    return np.array(out, float)


def test_first_moment_candidates_pick_and_scatter_points(default_result):
    """Section 'one replanning moment': the N = 12 candidates of episode 0 at step 0 start at that episode's start
    and the highlighted pick is the one the critic values most. Those candidates are also the first MCSS candidates
    of the critic scatter: where one of them was subsampled into it, its plotted closest-approach and end-point BFS
    distances are networkx's, and the Spearman numbers in the caption are scipy's on the plotted points."""
    from scipy.stats import spearmanr

    r, m = default_result, default_result.metrics
    for nm, mom in r.moment.items():
        assert mom["pick"] == int(np.argmax(mom["values"])), nm
        np.testing.assert_allclose(mom["plans"][:, 0], np.broadcast_to(r.traj[r.names.index(nm), 0, 0],
                                                                       mom["plans"][:, 0].shape), atol=1e-5)
    mom = r.moment[f"MCSS N={eng.Config().candidates}"]
    found = 0
    for plan, v in zip(mom["plans"], mom["values"]):
        hit = np.flatnonzero(r.cand_values == v)
        if len(hit) == 1:
            d = _bfs_distance_of_points(plan)
            assert r.cand_dist[hit[0]] == d.min() and r.cand_end_dist[hit[0]] == d[-1]
            found += 1
    assert found >= 3
    assert np.all(r.cand_dist <= r.cand_end_dist)
    assert m["critic_spearman_vs_distance"] == pytest.approx(spearmanr(r.cand_values, r.cand_dist).statistic)
    assert m["critic_spearman_vs_end_distance"] == pytest.approx(spearmanr(r.cand_values,
                                                                          r.cand_end_dist).statistic)


# ----------------------------------------------------------------------------- what the page draws and quotes


def test_page_moment_bars_trajectory_colours_and_distance_view(default_result):
    """Default page: the highlighted MCSS candidate is the one with the highest critic value; green lines are the
    episodes that reached the goal (one NaN break per episode) and red the others; the time-to-goal bars sit under
    their variants; with *Distance measured from* = end point, the critic scatter's x is the end-point distance
    (within the ±0.2 jitter)."""
    r, m = default_result, default_result.metrics
    cfg = eng.Config()

    def figs(at):
        assert not at.exception, [e.value for e in at.exception]
        return figures(at)

    at = open_page("diffusion_planning", seed=(("engine.diffusion_planning", eng.Config(), default_result),))
    f = figs(at)
    cand = r.moment[f"MCSS N={cfg.candidates}"]
    thick = [d for d in f["moment_mcss"]["data"] if d.get("line", {}).get("width") == 5]
    assert [d["name"] for d in thick] == [f"candidate {int(np.argmax(cand['values'])) + 1}: "
                                          f"V = {float(np.max(cand['values'])):.3f}"]

    shown = at.radio(key="diffusion-planning:trajectories").value
    reached = int(round(m[f"success[{shown}]"] * cfg.episodes))
    lines = {d["line"]["color"]: d for d in f["trajectories"]["data"] if d["type"] == "scatter"}
    breaks = {c: int(np.isnan(values(d["y"])).sum()) for c, d in lines.items()}
    assert breaks.get("#29a36a", 0) == reached and breaks.get("#e4572e", 0) == cfg.episodes - reached

    bars = f["ttg"]["data"][0]
    want = {nm: m[f"time_to_goal[{nm}]"] for nm in r.names}
    assert dict(zip(bars["x"], values(bars["y"]), strict=True)) == pytest.approx(want)

    at.radio(key="diffusion-planning:distance").set_value("end").run()
    x = values(figs(at)["critic"]["data"][0]["x"])
    assert np.all(np.abs(x - r.cand_end_dist) <= 0.2 + 1e-9)
    assert np.any(np.abs(x - r.cand_dist) > 0.2)


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

class _Recorder(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net, self.inputs = net, []

    def forward(self, x):
        self.inputs.append(x.detach().cpu().numpy().copy())
        return self.net(x)


def test_inverse_dynamics_gets_the_state_and_the_plan_point_k_steps_ahead(bundle):
    """Spec, closed loop: between replans the policy (s_t, p_target) -> a_t follows the chosen plan, aiming at
    the plan position STRIDE environment steps ahead (linear between waypoints 5 steps apart); its input is
    the position and target normalised to [-1, 1] and the velocity divided by MAX_SPEED, as in
    inverse_dynamics_triples. Velocity is read off the trajectory (p <- p + v, and a blocked axis keeps p and
    zeroes v), the plan off the first replanning moment of episode 0."""
    rec = _Recorder(bundle.invdyn)
    b = SimpleNamespace(planner=bundle.planner, critic=bundle.critic, invdyn=rec)
    replan = 20
    sim = eng.simulate(b, [eng.Variant("MCSS N=4", "mcss", n=4)], episodes=2, ddim_steps=3, replan=replan,
                       seed=4, keep_moment=True)
    mom = sim["moment"]["MCSS N=4"]
    plan = eng.normalise(mom["plans"][mom["pick"]])            # (H, 2) chosen plan of episode 0, normalised
    traj = sim["traj"][0, 0]                                   # episode 0 positions, (201, 2)
    assert len(rec.inputs) == eng.EPISODE_STEPS
    for t in range(replan):
        u = (t + eng.STRIDE) / eng.STRIDE
        i0 = min(int(np.floor(u)), eng.HORIZON - 2)
        target = (1 - (u - i0)) * plan[i0] + (u - i0) * plan[i0 + 1]
        vel = traj[t] - traj[t - 1] if t > 0 else np.zeros(2)
        want = np.concatenate([eng.normalise(traj[t]), vel / eng.MAX_SPEED, target])
        np.testing.assert_allclose(rec.inputs[t][0], want, atol=1e-5, err_msg=f"step {t}")
    # the agent moves (the check is not on a standing start) and the target lies ahead on the plan, not at p_0
    assert np.linalg.norm(traj[replan] - traj[0]) > 0.3
    assert np.abs(rec.inputs[0][0, 4:] - plan[0]).max() > 1e-3
