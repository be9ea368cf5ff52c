"""BlendRL: claims on the shipped checkpoints, and independent checks of the logic, mixture and game."""

import json
import math

import numpy as np
import pytest
import torch

from engine import blendrl as eng
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_checkpoints_load():
    for k in eng.AGENTS:
        agent, log = eng.load_agent(k)
        assert agent.kind == k and len(log["steps"]) > 0
        assert eng.checkpoint_path(k).stat().st_size < 2 * 1024 * 1024


def test_claims_at_default(default_result):
    cl = eng.claims(default_result)
    assert len(cl) == 5
    # blending beats both parts; the gate is state-dependent in the right direction; mirroring breaks the
    # neural agent (which now makes measurable progress on the standard layout)
    failed = [c.describe() for c in cl[:3] + [cl[4]] if not c.passed]
    assert not failed, failed
    t = default_result.table
    assert t["neural"]["standard"]["progress"] >= 0.05
    # claim 4 (the blend survives mirroring) is NOT reproduced with these checkpoints (see the page): only check
    # that it is measured from the evaluation table, and that mirroring hurts the neural agent at least as much
    m = default_result.metrics
    blend = t["blend"]
    assert m["keep_progress_blend"] == pytest.approx(blend["mirrored"]["progress"] / blend["standard"]["progress"])
    assert m["keep_progress_neural"] <= m["keep_progress_blend"]


def test_shipped_training_budget_and_seeds():
    for k in eng.AGENTS:
        extra = eng.load_state(eng.checkpoint_path(k))["extra"]
        assert int(extra["train_steps"]) == eng.TRAIN_STEPS
        assert len(extra["seed_success"]) == len(eng.TRAIN_SEEDS)


def test_softor_bounds():
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 5, 20):
        x = torch.rand(100, n, generator=g)
        s = eng.softor(x)
        mx = x.max(1).values
        assert torch.all(s >= mx - 1e-6)
        assert torch.all(s <= mx + eng.GAMMA_S * np.log(n) + 1e-6)


def _random_obs(n, seed):
    env = eng.Climber(n, "standard", np.random.default_rng(seed))
    for _ in range(7):
        env.step(np.random.default_rng(seed).integers(0, 5, n))
    return torch.from_numpy(env.image()), torch.from_numpy(env.objects())


def test_mixture_is_probability_mixture():
    torch.manual_seed(0)
    blend = eng.BlendAgent("blend")
    img, z = _random_obs(64, 1)
    p, v, b = blend(img, z)
    assert torch.allclose(p.sum(1), torch.ones(64), atol=1e-5)
    pn = torch.softmax(blend.actor(img.flatten(1)), -1)
    pl = blend.logic_probs(z)
    assert torch.allclose(p, b[:, :1] * pn + b[:, 1:] * pl, atol=1e-6)
    vv = b[:, 0] * blend.critic(img.flatten(1))[:, 0] + b[:, 1] * blend.logic_critic(z)[:, 0]
    assert torch.allclose(v, vv, atol=1e-6)
    # forcing beta_n = 1 gives exactly the neural agent's distribution
    neural = eng.BlendAgent("neural")
    neural.load_state_dict(blend.state_dict())
    pn2, _, bn = neural(img, z)
    assert torch.all(bn[:, 0] == 1)
    assert torch.allclose(torch.log(pn2), torch.log(pn), atol=1e-6)


def _env_with(af, ac, balls):
    env = eng.Climber(1, "standard", np.random.default_rng(0), auto_reset=False)
    env.af[:] = af
    env.ac[:] = ac
    for j, (c, d) in enumerate(balls):
        env.bc[0, j], env.bd[0, j] = c, d
    return env


def test_logic_semantics_by_hand():
    agent = eng.BlendAgent("logic")
    with torch.no_grad():
        agent.rule_logits.fill_(20.0)        # all rule weights ~1
    # on the floor-0 ladder (column 8), floor-0 ball far away
    env = _env_with(0, 8, [(0, 1), (4, 1), (4, 1)])
    p = agent.logic_probs(torch.from_numpy(env.objects()))[0]
    assert int(p.argmax()) == eng.UP
    # left of the floor-0 ladder
    env = _env_with(0, 3, [(0, 1), (4, 1), (4, 1)])
    assert int(agent.logic_probs(torch.from_numpy(env.objects()))[0].argmax()) == eng.RIGHT
    # floor 1: ladder at column 0 is to the left
    env = _env_with(1, 5, [(0, 1), (8, 1), (4, 1)])
    assert int(agent.logic_probs(torch.from_numpy(env.objects()))[0].argmax()) == eng.LEFT
    # mirrored layout: the same rules go the other way
    envm = eng.Climber(1, "mirrored", np.random.default_rng(0), auto_reset=False)
    envm.af[:], envm.ac[:] = 0, 4
    assert int(agent.logic_probs(torch.from_numpy(envm.objects()))[0].argmax()) == eng.LEFT


def test_ball_dynamics_and_ladders_step_by_step():
    env = _env_with(0, 0, [(6, 1), (1, -1), (5, 1)])
    # ball 0 from column 6 going right: 7, 8, bounce -> 7, 6 ; ball 1 from 1 going left: 0, bounce -> 1, 2, 3
    exp0, exp1 = [7, 8, 7, 6], [0, 1, 2, 3]
    for t in range(4):
        env.step(np.array([eng.NOOP]))
        assert env.bc[0, 0] == exp0[t] and env.bc[0, 1] == exp1[t]
    # up only climbs on the ladder cell
    env = _env_with(0, 7, [(2, 1), (4, 1), (4, 1)])
    env.step(np.array([eng.UP]))
    assert env.af[0] == 0
    env.step(np.array([eng.RIGHT]))
    env.step(np.array([eng.UP]))
    assert env.af[0] == 1 and env.ac[0] == 8


@pytest.mark.parametrize("case", ["agent_into_ball", "ball_into_agent", "swap_through", "jump_saves"])
def test_collisions(case):
    if case == "agent_into_ball":      # ball at 3 moving right to 4, agent moves 3 -> ... agent at 5 moves left to 4
        env, a = _env_with(0, 5, [(3, 1), (0, 1), (0, 1)]), eng.LEFT
    elif case == "ball_into_agent":
        env, a = _env_with(0, 5, [(4, 1), (0, 1), (0, 1)]), eng.NOOP
    elif case == "swap_through":       # agent 4 -> 5 while ball 5 -> 4
        env, a = _env_with(0, 4, [(5, -1), (0, 1), (0, 1)]), eng.RIGHT
    else:
        env, a = _env_with(0, 5, [(4, 1), (0, 1), (0, 1)]), eng.JUMP
    r, d, info = env.step(np.array([a]))
    if case == "jump_saves":
        assert not d[0] and not info["hit"][0]
    else:
        assert d[0] and info["hit"][0] and r[0] < -0.5


def test_fast_balls_cannot_skip_the_agent():
    env = eng.Climber(1, "fast balls", np.random.default_rng(0), auto_reset=False)
    env.af[:], env.ac[:] = 0, 5
    env.bc[0] = [3, 0, 0]
    env.bd[0] = [1, 1, 1]
    _, d, info = env.step(np.array([eng.NOOP]))
    assert info["hit"][0]


def test_gate_badges_check_the_gate_not_its_training(default_result):
    """The two gate badges follow from the blender's written rules: an untrained blender (rule weights 0.5) passes
    them as the trained one does, and a blender whose gate ignores the state (both weights ~0, so β = (½, ½)
    everywhere) fails both. The badges' text says so."""
    import dataclasses

    m = default_result.metrics
    assert m["beta_near"] - m["beta_far"] > 0.3
    torch.manual_seed(0)
    agent = eng.BlendAgent("blend")
    untrained = eng.evaluate(agent, "standard", 16, 0)
    with torch.no_grad():
        agent.blend_logits.fill_(-20.0)
    constant = eng.evaluate(agent, "standard", 16, 0)
    assert constant["beta_near"] == pytest.approx(0.5, abs=1e-6) and constant["beta_far"] == pytest.approx(0.5, abs=1e-6)
    verdicts = {}
    for name, stats in (("untrained", untrained), ("constant", constant)):
        r = dataclasses.replace(default_result, metrics={**m, "beta_near": stats["beta_near"],
                                                         "beta_far": stats["beta_far"]})
        verdicts[name] = [c.passed for c in eng.claims(r)[1:3]]
    assert verdicts == {"untrained": [True, True], "constant": [False, False]}
    assert "untrained blender" in eng.claims(default_result)[1].detail


def test_training_log_prefix_reproduces():
    # the shipped blend checkpoint came from this script: rerunning seed 0 gives the same first iterations
    ck = eng.load_state(eng.checkpoint_path("blend"))
    seed = int(ck["extra"]["seed"])
    _, log = eng.train_agent("blend", 2 * 32 * 64, seed)
    shipped = np.asarray(ck["extra"]["ret"])[:2]
    assert np.allclose(log["ret"], shipped, atol=1e-6), (log["ret"], shipped)


def test_progress_potential_and_shaping_by_hand():
    # Φ = floors climbed + 1 − |col − target| / 8: 0 at the start, continuous across a climb, 3 at the bell
    env = _env_with(0, 0, [(5, 1), (4, 1), (4, 1)])
    assert env.potential()[0] == 0.0
    env = _env_with(0, 8, [(2, 1), (4, 1), (4, 1)])
    assert env.potential()[0] == 1.0
    r, d, info = env.step(np.array([eng.UP]))        # climb to floor 1 at column 8; its ladder is at column 0
    assert env.af[0] == 1 and env.potential()[0] == 1.0
    assert info["shaping"][0] == pytest.approx(eng.SHAPING * (eng.GAMMA * 1.0 - 1.0))
    assert r[0] == pytest.approx(-eng.STEP_COST + info["shaping"][0])
    env = _env_with(2, 7, [(0, 1), (0, 1), (2, 1)])
    r, d, info = env.step(np.array([eng.RIGHT]))     # reach the bell: +1, shaping γ·3 − (3 − 1/8)
    assert d[0] and info["goal"][0]
    assert info["shaping"][0] == pytest.approx(eng.SHAPING * (eng.GAMMA * 3.0 - (3.0 - 1 / 8)), abs=1e-6)
    assert r[0] == pytest.approx(1.0 - eng.STEP_COST + info["shaping"][0], abs=1e-6)


def test_second_frame_shows_where_each_ball_was():
    env = _env_with(0, 0, [(5, 1), (3, -1), (7, 1)])
    env.step(np.array([eng.NOOP]))
    img = env.image()[0]
    assert img.shape == (eng.IMG_CH, eng.FLOORS, eng.COLS)
    for floor, (now, before) in enumerate([(6, 5), (2, 3), (8, 7)]):
        assert img[1, floor, now] == 1 and img[3, floor, before] == 1
        assert img[1, floor].sum() == 1 and img[3, floor].sum() == 1


def test_training_restarts_keep_balls_away():
    for share in (1.0, 0.5):
        env = eng.Climber(3000, "standard", np.random.default_rng(0), random_start=share)
        assert set(np.unique(env.af)) == {0, 1, 2}
        normal = (env.af == 0) & (env.ac == env.start)
        expected = (1 - share) + share / (eng.FLOORS * eng.COLS)
        assert abs(normal.mean() - expected) < 0.05
        on = env.bfloor[None, :] == env.af[:, None]
        assert np.abs(env.bc - env.ac[:, None])[on].min() >= 3
    # evaluation episodes always start at the normal start
    ev = eng.Climber(200, "mirrored", np.random.default_rng(0), auto_reset=False)
    assert np.all(ev.af == 0) and np.all(ev.ac == ev.start)


def _mirror_of(env_std):
    """Hand-built mirror image (column c -> 8 - c, directions flipped) of a standard-layout state."""
    envm = eng.Climber(env_std.n, "mirrored", np.random.default_rng(1), auto_reset=False)
    last = eng.COLS - 1
    envm.af[:], envm.ac[:] = env_std.af, last - env_std.ac
    envm.bc[:], envm.bd[:], envm.pbc[:] = last - env_std.bc, -env_std.bd, last - env_std.pbc
    return envm


def test_mirrored_layout_is_an_exact_mirror():
    # the mirrored variant must be the standard game reflected left <-> right: same dynamics, mirrored image,
    # a gate that ignores the reflection and rules that still point at the (mirrored) ladder or bell
    rng = np.random.default_rng(0)
    es = eng.Climber(2000, "standard", rng, auto_reset=False, random_start=1.0)
    em = _mirror_of(es)
    assert list(em.ladders) == [eng.COLS - 1 - c for c in es.ladders] and em.bell == eng.COLS - 1 - es.bell
    assert np.array_equal(es.image()[..., ::-1], em.image())
    swap = [eng.RIGHT, eng.LEFT, eng.UP, eng.JUMP, eng.NOOP]
    agent = eng.BlendAgent("blend")                      # fresh: all rule weights equal (0.5)
    zs, zm = torch.from_numpy(es.objects()), torch.from_numpy(em.objects())
    with torch.no_grad():
        assert torch.allclose(agent.beta(zs), agent.beta(zm), atol=1e-6)
        assert torch.allclose(agent.logic_probs(zs)[:, swap], agent.logic_probs(zm), atol=1e-6)
    for _ in range(40):
        a = rng.integers(0, len(eng.ACTIONS), es.n)
        rs, ds, infos = es.step(a)
        rm, dm, infom = em.step(np.array(swap)[a])
        assert np.array_equal(ds, dm) and np.array_equal(infos["hit"], infom["hit"])
        assert np.array_equal(infos["goal"], infom["goal"]) and np.allclose(rs, rm, atol=1e-6)
        assert np.array_equal(em.af, es.af) and np.array_equal(em.ac, eng.COLS - 1 - es.ac)
        assert np.array_equal(em.bc, eng.COLS - 1 - es.bc)
    # with the shipped (learned, unequal) rule weights the rules still move toward the target in both layouts
    bl, _ = eng.load_agent("blend")
    for env in (eng.Climber(2000, "standard", np.random.default_rng(2), random_start=1.0),
                eng.Climber(2000, "mirrored", np.random.default_rng(2), random_start=1.0)):
        z = torch.from_numpy(env.objects())
        d = (z[:, 2] - z[:, 1]) * 8
        live = ~((env.af == eng.FLOORS - 1) & (env.ac == env.bell))       # on the bell the episode is over
        want = np.where(np.abs(d) < 0.5, eng.UP, np.where(d > 0, eng.RIGHT, eng.LEFT))
        with torch.no_grad():
            got = bl.logic_probs(z).argmax(1).numpy()
        assert np.array_equal(got[live], want[live])


def test_neural_share_and_reflex_counterfactual(default_result):
    # neural_share: share of visited states with beta_n > 0.5; 1 for the neural agent, 0 for the logic agent
    for kind, share in (("neural", 1.0), ("logic", 0.0)):
        ev = eng.evaluate(eng.BlendAgent(kind), "standard", 16, 0)
        assert ev["neural_share"] == share
    # the reflex counterfactual is the blend with the neural distribution replaced by "jump", built by hand here
    bl, _ = eng.load_agent("blend")
    rx = eng.ReflexBlend(bl)
    img, z = _random_obs(64, 3)
    with torch.no_grad():
        p, _, b = rx(img, z)
        jump = torch.zeros(64, len(eng.ACTIONS))
        jump[:, eng.JUMP] = 1
        assert torch.allclose(p, b[:, :1] * jump + b[:, 1:] * bl.logic_probs(z), atol=1e-6)
        assert torch.allclose(b, bl.beta(z))
    # diagnosis of the failing mirrored claim: with a layout-free neural side the same gate and rules keep their
    # progress under mirroring, so the loss comes from the learned neural side (which holds control in most states)
    m = default_result.metrics
    assert m["keep_progress_reflex"] >= 0.7
    assert m["neural_share"] > 0.4


def test_paper_kind_variants():
    # "relocated ladders": only the ladders move (start, bell and balls as in the standard game) and the walk on
    # floor 1 reverses; the rules follow the moved ladders
    std, rel = eng.layout("standard"), eng.layout("relocated ladders")
    assert (rel["start"], rel["bell"], rel["ball_floors"], rel["speed"]) == \
        (std["start"], std["bell"], std["ball_floors"], std["speed"])
    assert tuple(rel["ladders"]) == (4, 6)
    assert std["ladders"][1] < std["ladders"][0] and rel["ladders"][1] > rel["ladders"][0]   # floor-1 walk reverses
    bl, _ = eng.load_agent("blend")
    env = eng.Climber(1, "relocated ladders", np.random.default_rng(0), auto_reset=False)
    env.af[:], env.ac[:] = 1, 4            # just climbed to floor 1: the next ladder is now to the right
    assert int(bl.logic_probs(torch.from_numpy(env.objects()))[0].argmax()) == eng.RIGHT
    env.af[:], env.ac[:] = 0, 4            # on the moved floor-0 ladder
    assert int(bl.logic_probs(torch.from_numpy(env.objects()))[0].argmax()) == eng.UP
    # "no balls": no ball anywhere, nothing can hit, the ball predicates are absent and the gate hands control
    # to the rules; otherwise the standard layout
    nb = eng.layout("no balls")
    assert nb["ball_floors"] == () and nb["ladders"] == std["ladders"] and nb["bell"] == std["bell"]
    env = eng.Climber(64, "no balls", np.random.default_rng(0), auto_reset=False, random_start=1.0)
    rng = np.random.default_rng(1)
    for _ in range(30):
        img, z = env.image(), env.objects()
        assert img[:, 1].sum() == 0 and img[:, 3].sum() == 0 and np.all(z[:, 5] == 0)
        with torch.no_grad():
            assert torch.all(bl.beta(torch.from_numpy(z))[:, 0] < 0.5)
        _, d, info = env.step(rng.integers(0, len(eng.ACTIONS), env.n))
        assert not info["hit"].any()
        env.reset(d)


def test_paper_kind_measurements_shown(default_result):
    # shown next to the badges (never a badge): the same progress / success ratios on the paper-kind variants,
    # computed from the evaluation table with the same "not measurable below 0.05" rule
    t, pk = default_result.table, default_result.metrics["paper_keep"]
    assert set(pk) == set(eng.PAPER_VARIANTS) <= set(eng.VARIANTS)
    for v in eng.PAPER_VARIANTS:
        for k in eng.AGENTS:
            for q in ("success", "progress"):
                s = t[k]["standard"][q]
                if s >= 0.05:
                    assert pk[v][k][q] == pytest.approx(t[k][v][q] / s)
                else:
                    assert np.isnan(pk[v][k][q])
    assert len(eng.claims(default_result)) == 5          # no new badge
    # with no balls the gate never consults the neural side
    assert t["blend"]["no balls"]["neural_share"] == 0.0


def test_mlp_blender_checkpoint_mixture_and_page_setting():
    """The neural blender (the paper's other blending function): β is a softmax of an MLP on the object state, the
    mixture stays a distribution, its shipped checkpoint reproduces from the script, and the page setting loads it."""
    agent, log = eng.load_agent("blend_mlp")
    assert agent.kind == "blend_mlp" and len(log["seed_success"]) == 3
    # the page: "its seeds vary far more than the rule blender's" (stored: 0.27-0.88 against 0.77-0.85)
    rule = eng.load_agent("blend")[1]["seed_success"]
    assert np.ptp(log["seed_success"]) > 3 * np.ptp(rule)
    rng = np.random.default_rng(0)
    env = eng.Climber(64, "standard", rng)
    img = torch.as_tensor(env.image(), dtype=torch.float32)
    z = torch.as_tensor(env.objects(), dtype=torch.float32)
    with torch.no_grad():
        probs, _, b = agent(img, z)
        assert torch.allclose(b, torch.softmax(agent.blender(z), -1))
        assert torch.allclose(probs.sum(-1), torch.ones(64), atol=1e-5)
        mix = b[:, :1] * agent.neural_probs(img.flatten(1)) + b[:, 1:] * agent.logic_probs(z)
        assert torch.allclose(probs, mix, atol=1e-6)
    ck = eng.load_state(eng.checkpoint_path("blend_mlp"))
    _, log2 = eng.train_agent("blend_mlp", 2 * 32 * 64, int(ck["extra"]["seed"]))
    assert np.allclose(log2["ret"], np.asarray(ck["extra"]["ret"])[:2], atol=1e-6)
    res = eng.run(eng.Config(blender="mlp", episodes=64))
    assert "MLP blender" in res.source and np.isnan(res.blend_weights).all()
    # the gate is the checkpoint's MLP: the measured β on visited states is not the rule gate's
    base = eng.run(eng.Config(episodes=64))
    assert res.metrics["beta_far"] != pytest.approx(base.metrics["beta_far"])
    assert "MLP on the object positions" in eng.claims(res)[1].detail


def test_page_verdicts_follow_the_measured_keep_ratios():
    # the "paper's own kinds of change" box: at the defaults the rule blend survives "no balls" because the gate hands
    # the empty floors to the rules; the shipped MLP blender keeps the neural side in control there and loses its
    # progress (measured 0.64 -> 0.00), so the box must not say "matches the paper" for it
    from tests.pagetext import page_texts

    default = " ".join(page_texts("blendrl"))
    assert "This matches the paper, but only because" in default
    mlp = " ".join(page_texts("blendrl", {"blender": "mlp"}))
    assert "Unlike in the paper, the blend does not keep its progress here" in mlp
    assert "This matches the paper" not in mlp
    assert "the shipped one hands most states to the neural side" in mlp


def _scripted(beta_n=None):
    """A stand-in agent for ``evaluate_many``: walks to the ladder, climbs, walks to the bell (one-hot, so sampling is
    deterministic); beta_n, a function of the ball distance in cells, fills the gate column."""

    def agent(img, z):
        floor, col, target = torch.round(z[:, 0] * 2), torch.round(z[:, 1] * 8), torch.round(z[:, 2] * 8)
        a = torch.where(col < target, eng.RIGHT, torch.where(col > target, eng.LEFT, eng.UP))
        a = torch.where((floor == eng.FLOORS - 1) & (col == target), eng.NOOP, a)
        p = torch.nn.functional.one_hot(a, len(eng.ACTIONS)).float()
        bn = torch.zeros(len(z)) if beta_n is None else beta_n(torch.round(torch.abs(z[:, 3] * 8))).float()
        return p, torch.zeros(len(z)), torch.stack([bn, 1 - bn], 1)

    return agent


def test_evaluation_return_is_the_games_own_reward():
    """Without balls the scripted climber needs 8 + 1 + 8 + 1 + 8 = 26 moves to the bell: the game pays +1 at the bell
    and 0.01 per step, so every episode returns 1 - 0.26 (the progress shaping used in training is not part of it)."""
    ev = eng.evaluate(_scripted(), "no balls", 32, 0)
    assert ev["success"] == 1.0 and ev["progress"] == 1.0
    assert ev["ret"] == pytest.approx(1.0 - 26 * eng.STEP_COST, abs=1e-5)


def test_gate_statistics_use_the_documented_distance_bands():
    """beta_near averages the states with a ball at most 2 cells away, beta_far those with no ball within 4 cells
    (the badge labels): a gate that is 1 exactly on one band's edge shows up in that band and never in the other."""
    def ev(f):
        return eng.evaluate(_scripted(f), "standard", 64, 3)

    inside = ev(lambda d: d <= 2)
    assert inside["beta_near"] == 1.0 and inside["beta_far"] == 0.0
    edge_near = ev(lambda d: d == 2)
    assert edge_near["beta_near"] > 0 and edge_near["beta_far"] == 0.0
    outside = ev(lambda d: d > 4)
    assert outside["beta_far"] == 1.0 and outside["beta_near"] == 0.0
    edge_far = ev(lambda d: d == 5)
    assert edge_far["beta_far"] > 0 and edge_far["beta_near"] == 0.0
    middle = ev(lambda d: (d > 2) & (d <= 4))        # in neither band
    assert middle["beta_near"] == 0.0 and middle["beta_far"] == 0.0 and middle["neural_share"] > 0


def test_gae_is_the_discounted_sum_of_td_errors_inside_each_episode():
    """GAE against its definition: A_t = Σ_l (γλ)^l δ_{t+l}, summed up to the first episode end at or after t (or the
    rollout's end), with δ_k = r_k + γ V_{k+1} (1 − d_k) − V_k and V after the rollout = last_v."""
    g = torch.Generator().manual_seed(0)
    T, n, gamma, lam = 6, 3, 0.99, 0.95
    rews = [torch.randn(n, generator=g) for _ in range(T)]
    vals = [torch.randn(n, generator=g) for _ in range(T)]
    last_v = torch.randn(n, generator=g)
    d = torch.zeros(T, n)
    d[1, 0] = d[3, 1] = d[4, 1] = 1.0
    adv = eng.gae_advantages(rews, vals, last_v, list(d), gamma, lam)
    V = torch.stack(vals + [last_v]).double()
    R = torch.stack(rews).double()
    for e in range(n):
        delta = [float(R[k, e] + gamma * V[k + 1, e] * (1 - d[k, e]) - V[k, e]) for k in range(T)]
        for t in range(T):
            end = next((k for k in range(t, T) if d[k, e] == 1), T - 1)
            want = sum((gamma * lam) ** (k - t) * delta[k] for k in range(t, end + 1))
            assert float(adv[t, e]) == pytest.approx(want, rel=1e-5, abs=1e-5), (t, e)


def _hand_ppo_loss(p, v, b, a, lp_old, adv, ret, blend_ent):
    """The PPO loss of the spec written out in plain Python floats, one sample at a time."""
    n = len(a)
    mu = sum(adv) / n
    sd = math.sqrt(sum((x - mu) ** 2 for x in adv) / (n - 1))          # torch's std: unbiased
    pg = vf = ent = bent = 0.0
    for i in range(n):
        A = (adv[i] - mu) / (sd + 1e-8)
        ratio = math.exp(math.log(p[i][a[i]] + 1e-8) - lp_old[i])
        pg += -min(ratio * A, min(max(ratio, 0.8), 1.2) * A) / n
        vf += 0.5 * (v[i] - ret[i]) ** 2 / n
        ent += -sum(x * math.log(x + 1e-8) for x in p[i]) / n
        bent += -sum(x * math.log(x + 1e-8) for x in b[i]) / n
    return pg + 0.5 * vf - 0.01 * ent - blend_ent * bent, bent


def test_blend_entropy_is_a_bonus_that_pulls_the_gate_towards_even(monkeypatch):
    """ppo_loss on three hand-built samples: its value is the spec's PPO loss written out by hand, the blend-entropy
    term enters with a minus sign (a bonus: the loss falls by blend_ent · H(β)), and its gradient on the gate's
    logits is the closed form of −c·H(softmax(z)), so a descent step moves a lopsided gate towards 50/50. Training
    hands the page's coefficient and the agent's own β to that loss."""
    p = [[0.5, 0.2, 0.1, 0.1, 0.1], [0.05, 0.05, 0.6, 0.2, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2]]
    a = [0, 2, 4]
    lp_old = [math.log(0.3), math.log(0.65), math.log(0.2)]    # ratios 1.67 (clipped), 0.92, 1.0
    adv, ret, v = [1.0, -0.5, 0.2], [0.3, 1.0, -0.2], [0.1, 0.4, 0.0]
    b = [[0.9, 0.1], [0.3, 0.7], [0.5, 0.5]]
    T = torch.tensor
    args = (T(p), T(v), T(b), T(a), T(lp_old), T(adv), T(ret))
    for c in (0.0, 0.01, 0.1):
        want, H = _hand_ppo_loss(p, v, b, a, lp_old, adv, ret, c)
        assert float(eng.ppo_loss(*args, c)) == pytest.approx(want, abs=1e-6)
    # the entropy term alone: the loss drops by c · mean H(β) (H > 0 here), never rises
    assert H == pytest.approx(np.mean([-(x * math.log(x) + (1 - x) * math.log(1 - x)) for x in (0.9, 0.3, 0.5)]))
    drop = float(eng.ppo_loss(*args, 0.0) - eng.ppo_loss(*args, 0.1))
    assert drop == pytest.approx(0.1 * H, rel=1e-5) and drop > 0

    # gradient on the gate: with p, v fixed, ∂L/∂z for β = softmax(z) is c·d·s(1−s)·(+1, −1) per sample (/n),
    # d = z_n − z_l, s = σ(d): positive on the favoured side, so gradient descent evens the gate out
    c = 0.1
    z = T([[2.0, -1.0], [-0.5, 0.5], [0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    beta = torch.softmax(z, -1)
    loss = eng.ppo_loss(*(x.double() if x.is_floating_point() else x for x in args[:2]), beta,
                        *(x.double() if x.is_floating_point() else x for x in args[3:]), c)
    (gz,) = torch.autograd.grad(loss, z)
    d = (z[:, 0] - z[:, 1]).detach()
    s = torch.sigmoid(d)
    want = (c * d * s * (1 - s) / 3)[:, None] * T([1.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(gz, want, atol=1e-8, rtol=1e-6)

    def gate_entropy(zz):
        q = torch.softmax(zz, -1)
        return -(q * q.log()).sum(1)

    stepped = (z - 0.5 * gz).detach()
    assert bool((gate_entropy(stepped)[:2] > gate_entropy(z.detach())[:2]).all())

    # train_agent feeds the coefficient it is given and the agent's β (rows summing to one) into this loss
    seen, real = [], eng.ppo_loss

    def spy(p_, v_, b_, *rest):
        seen.append((b_.detach().clone(), rest[-1]))
        return real(p_, v_, b_, *rest)

    monkeypatch.setattr(eng, "ppo_loss", spy)
    eng.train_agent("blend_mlp", 64, seed=0, blend_ent=0.07, n_envs=4, horizon=16)
    assert len(seen) == 4 * 4 and all(ce == 0.07 for _, ce in seen)
    bb = torch.cat([x for x, _ in seen])
    torch.testing.assert_close(bb.sum(1), torch.ones(len(bb)))
    assert float(bb.std(0).max()) > 0      # a state-dependent gate, not a constant stand-in


# ------------------------------------------------------------------ what the page shows (second mutation round)
ALT = eng.Config(seed=3, render_agent="logic", variant="two balls", episodes=64)


@pytest.fixture(scope="module")
def alt_result():
    return eng.run(ALT)


def _replay(ep, agent, variant, seed):
    """Replay a rendered episode's actions in a fresh game seeded like the page's episode; check every frame, the
    game's own reward per step (no shaping), β_n of the rendered agent and the strongest rule (largest weighted
    clause valuation, '—' below 0.05 and for a neural agent, which never uses its rules)."""
    env = eng.Climber(1, variant, np.random.default_rng(seed), auto_reset=False)
    assert list(env.bfloor) == list(ep["bfloor"]) and env.bell == ep["bell"]
    w = torch.sigmoid(agent.rule_logits).detach()
    for t, a in enumerate(ep["actions"]):
        assert (env.af[0], env.ac[0]) == (ep["af"][t], ep["ac"][t]) and list(env.bc[0]) == list(ep["bc"][t])
        z = torch.from_numpy(env.objects())
        with torch.no_grad():
            assert ep["beta_n"][t] == pytest.approx(float(agent.beta(z)[0, 0]), abs=1e-6)
            P = eng.predicates(z)
            val = [float(w[c]) * float(np.prod([float(P[b][0]) for b in body])) for c, (_, body) in enumerate(eng.CLAUSES)]
        assert ep["fired"][t] == (int(np.argmax(val)) if agent.kind != "neural" and max(val) > 0.05 else -1)
        r, d, info = env.step(np.array([a]))
        game = -eng.STEP_COST + float(info["goal"][0]) - float(info["hit"][0])
        assert ep["rewards"][t] == pytest.approx(game, abs=1e-6)
        assert bool(d[0]) == (t == len(ep["actions"]) - 1)
    assert (env.af[0], env.ac[0]) == (ep["af"][-1], ep["ac"][-1])
    assert ep["goal"] == bool(info["goal"][0]) and ep["hit"] == bool(info["hit"][0])


def test_rendered_episode_replays_in_the_game(default_result, alt_result):
    """The rendered episode follows the agent, variant and seed widgets: its frames, rewards, β_n bars and strongest
    rules are those of a replay in a fresh game."""
    blend, _ = eng.load_agent("blend")
    ep = default_result.episode
    _replay(ep, blend, "standard", 5000)
    assert np.ptp(ep["beta_n"]) > 0 and (ep["fired"] >= 0).any()
    logic, _ = eng.load_agent("logic")
    ep = alt_result.episode
    assert len(ep["bfloor"]) == 4                    # "two balls": four balls
    _replay(ep, logic, "two balls", 5000 + ALT.seed)
    assert np.all(ep["beta_n"] == 0.0)               # the logic agent never hands control to a neural side
    # the rule table shows the rendered (logic) agent's weights; the blender's are the blend agent's, as sigmoids
    np.testing.assert_allclose(alt_result.rule_weights, torch.sigmoid(logic.rule_logits).detach().numpy(), atol=1e-7)
    assert not np.allclose(alt_result.rule_weights, torch.sigmoid(blend.rule_logits).detach().numpy())
    np.testing.assert_allclose(default_result.blend_weights, torch.sigmoid(blend.blend_logits).detach().numpy(),
                               atol=1e-7)
    assert np.all((default_result.blend_weights > 0) & (default_result.blend_weights < 1))


def test_evaluation_and_reflex_use_the_page_seed(alt_result):
    """The evaluation table and the reflex diagnostic are measured on the seed's episodes (seed 3 here)."""
    seed = 1000 + 17 * ALT.seed
    for k in eng.AGENTS:
        agent, _ = eng.load_agent(k)
        ref = eng.evaluate_many(agent, eng.VARIANTS, ALT.episodes, seed)
        for v in eng.VARIANTS:
            for q, x in ref[v].items():
                assert alt_result.table[k][v][q] == pytest.approx(x, nan_ok=True), (k, v, q)
    blend, _ = eng.load_agent("blend")
    rx = eng.evaluate_many(eng.ReflexBlend(blend), ("standard", "mirrored"), ALT.episodes, seed)
    m = alt_result.metrics
    assert m["reflex_progress"] == (rx["standard"]["progress"], rx["mirrored"]["progress"])
    assert m["keep_progress_reflex"] == pytest.approx(rx["mirrored"]["progress"] / rx["standard"]["progress"])


def test_headline_metrics_from_the_table(default_result):
    """Margin, success-keep ratios, the neural agent's standard progress and the neural shares, from the table."""
    t, m = default_result.table, default_result.metrics
    succ = {k: t[k]["standard"]["success"] for k in eng.AGENTS}
    assert m["margin"] == pytest.approx(succ["blend"] - max(succ["neural"], succ["logic"]))
    for k in ("blend", "neural"):
        s = t[k]["standard"]["success"]
        want = t[k]["mirrored"]["success"] / s if s >= 0.05 else float("nan")
        assert m[f"keep_success_{k}"] == pytest.approx(want, nan_ok=True), k
    assert m["progress_neural"] == t["neural"]["standard"]["progress"]
    assert m["neural_share"] == t["blend"]["standard"]["neural_share"]
    assert m["neural_share_mirrored"] == t["blend"]["mirrored"]["neural_share"]
    assert f"blend {succ['blend']:.2f}" in eng.claims(default_result)[0].detail


def test_beta_map_is_the_gate_on_floor_1_by_ball_and_agent_column(default_result):
    """β_n over (ball column, agent column) on floor 1, ball moving left, from object states written by hand:
    floor 1/2, agent column/8, target = the floor-1 ladder, signed ball offset/8, direction −1, ball present."""
    blend, _ = eng.load_agent("blend")
    lad = eng.layout("standard")["ladders"]
    z = []
    for bc in range(eng.COLS):
        for ac in range(eng.COLS):
            z.append([0.5, ac / 8, lad[1] / 8, (bc - ac) / 8, -1.0, 1.0, lad[0] / 8, lad[1] / 8])
    with torch.no_grad():
        want = blend.beta(torch.tensor(z, dtype=torch.float32))[:, 0].numpy().reshape(eng.COLS, eng.COLS)
    np.testing.assert_allclose(default_result.beta_map, want, atol=1e-6)
    assert want[4, 4] > 0.5 > want[0, 8]            # near the ball the neural side, far from it the rules


def test_live_training_uses_the_blend_entropy_widget():
    cfg = eng.Config(live=True, live_steps=5000, blend_ent=0.08, episodes=64)
    res = eng.run(cfg)
    agent, log = eng.train_agent("blend", 5000, cfg.seed, 0.08)
    for k in ("steps", "ret", "succ"):
        np.testing.assert_allclose(res.curves["blend"][k], log[k], err_msg=k)
    np.testing.assert_allclose(res.blend_weights, torch.sigmoid(agent.blend_logits).detach().numpy(), atol=1e-6)
    # 5 000 steps are two whole rollouts of 32 environments × 64 steps: the source line says what was trained
    assert log["steps"][-1] <= 4096 and "trained live for 4,096 steps" in res.source
    assert [eng.ppo_iterations(s) for s in (100, 2048, 5000, 60_000)] == [1, 1, 2, 29]


def test_neural_episode_names_no_rule():
    """A rendered neural agent acts without its rules, so the β strip names no 'strongest rule' for its steps."""
    neural, _ = eng.load_agent("neural")
    ep = eng.rollout(neural, "standard", 11)
    assert len(ep["fired"]) == len(ep["actions"]) > 0 and (ep["fired"] == -1).all()


# ----------------------------------------------------------------------------- what the page draws and quotes


@pytest.fixture(scope="module")
def default_page(default_result):
    at = open_page("blendrl", seed=(("engine.blendrl", eng.Config(), default_result),))
    return at, figures(at)


def test_page_charts_put_each_agents_numbers_under_its_name(default_page, default_result):
    at, figs = default_page
    tb = default_result.table
    for metric in ("success", "ret"):
        bars = {d["name"]: d for d in figs[f"bars_{metric}"]["data"]}
        assert set(bars) == set(eng.AGENTS)
        for a in eng.AGENTS:
            assert list(bars[a]["x"]) == list(eng.VARIANTS)
            np.testing.assert_allclose(values(bars[a]["y"]), [tb[a][v][metric] for v in eng.VARIANTS])
    curves = {d["name"]: d for d in figs["curves"]["data"]}
    for a, c in default_result.curves.items():
        np.testing.assert_allclose(values(curves[a]["y"]), c["ret"], err_msg=a)
    # the caption under the curves quotes where each ends: the mean of its last five points, read off the curve
    cap = next(c.value for c in at.caption if c.value.startswith("These are training episodes"))
    for a, c in default_result.curves.items():
        assert f"{a} {np.mean(c['ret'][-5:]):.2f}" in cap, a
    assert "mean of the last 5 points" in cap
    # the gate map: rows are the ball's column, columns the agent's (the engine's beta_map[ball, agent])
    hm = figs["beta_map"]
    np.testing.assert_allclose(values(hm["data"][0]["z"]), default_result.beta_map)
    assert "agent column" in json.dumps(hm["layout"]["xaxis"]) and "ball column" in json.dumps(hm["layout"]["yaxis"])


def test_page_text_quotes_the_relocated_ladder_progress_and_the_episode_length(default_page, default_result):
    at, _ = default_page
    tb, ep = default_result.table, default_result.episode
    texts = " ".join(el.value for kind in ("info", "caption") for el in at.get(kind))
    for agent, tail in (("blend", ") and the neural agent keeps"), ("neural", "). ")):
        before, after = tb[agent]["standard"]["progress"], tb[agent]["relocated ladders"]["progress"]
        assert f"({before:.2f} → {after:.2f}{tail}" in texts, agent
    # one reward per step taken; the agent's column is logged once more (the start)
    assert len(ep["ac"]) == len(ep["rewards"]) + 1
    assert f"{len(ep['rewards'])} steps; the agent" in texts


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_object_state_names_the_nearest_ball_on_the_agents_floor_by_a_loop():
    """z[:, 3:6] (signed offset / 8, direction, present) is the ball on the agent's floor NEAREST to the
    agent, found here by a plain loop over the balls; "two balls" puts two balls on floor 1, so the choice
    matters there (a signed argmin would pick the leftmost ball, not the nearest)."""
    rng = np.random.default_rng(7)
    env = eng.Climber(400, "two balls", rng, auto_reset=False)
    env.af[:] = rng.integers(0, eng.FLOORS, 400)
    env.ac[:] = rng.integers(0, eng.COLS, 400)
    env.bc[:] = rng.integers(0, eng.COLS, env.bc.shape)
    env.bd[:] = rng.choice((-1, 1), env.bd.shape)
    z = env.objects()
    tested_two = 0
    for i in range(400):
        best = None
        for j in range(env.k):
            if env.bfloor[j] == env.af[i]:
                off = int(env.bc[i, j] - env.ac[i])
                if best is None or abs(off) < abs(best[0]):
                    best = (off, int(env.bd[i, j]))
        if best is None:
            assert z[i, 5] == 0.0 and z[i, 3] == 9 / 8 and z[i, 4] == 0.0, i
            continue
        assert z[i, 5] == 1.0, i
        assert abs(z[i, 3] * 8) == abs(best[0]), (i, z[i, 3] * 8, best)
        offs = [int(env.bc[i, j] - env.ac[i]) for j in range(env.k) if env.bfloor[j] == env.af[i]]
        if len(offs) == 2 and abs(offs[0]) != abs(offs[1]):     # a unique nearest ball: offset and direction
            tested_two += 1
            assert round(float(z[i, 3] * 8)) == best[0] and z[i, 4] == best[1], (i, offs)
    assert tested_two > 20                       # the two-balls floor was exercised


def test_mirrored_box_when_the_keep_ratio_cannot_be_measured(default_result):
    """A blend with no progress on the standard layout has no keep ratio (NaN): the page says the comparison
    cannot be measured instead of printing 'keeps only nan of its progress'."""
    import copy

    r = copy.deepcopy(default_result)
    r.metrics["keep_progress_blend"] = float("nan")
    at = open_page("blendrl", seed=(("engine.blendrl", eng.Config(), r),))
    texts = [i.value for i in at.info]
    assert any("cannot be measured" in t for t in texts)
    assert not any("nan" in t for t in texts)
