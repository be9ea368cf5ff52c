"""DeepRUOT: claims at the default config, plus checks against closed forms and POT."""

import math

import numpy as np
import ot
import pytest
import torch

from engine import deep_ruot as eng
from engine.core import InputError, all_passed
from tests.pagetext import figures, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_default_claims_pass(default_result):
    assert default_result.pretrained  # the shipped checkpoint matches the default config, recipe and data
    cl = eng.claims(default_result)
    assert len(cl) == 6
    assert all_passed(cl), [c.describe() for c in cl if not c.passed]


def test_baseline_is_forced_into_false_transitions(default_result):
    m = default_result.metrics
    # closed form: 1/(1+exp(-2 gamma T)) - 1/2 = 0.417 at gamma = 0.4, T = 3
    assert m["false_floor"] == pytest.approx(1 / (1 + math.exp(-2.4)) - 0.5)
    assert m["false_baseline"] >= m["false_floor"] - 0.05
    assert m["false_ruot"] <= 0.05
    # the baseline keeps mass 1; the data at t = 3 has cosh(1.2) = 1.81
    assert m["mass_err_baseline"] == pytest.approx(abs(1 - math.cosh(1.2)) / math.cosh(1.2), abs=0.02)


def test_mass_curve_tracks_cosh(default_result):
    r = default_result
    assert np.allclose(r.mass_data, [round(150 * math.cosh(0.4 * t)) / 150 for t in eng.TIMES])
    assert np.max(np.abs(r.mass_model["DeepRUOT"] - r.mass_true) / r.mass_true) < 0.12


def test_rollout_growth_per_interval(default_result):
    r = default_result
    # the rollout realises the true rates on every interval: +gamma for A, -gamma for B
    assert np.allclose(r.growth_rollout["A"], 0.4, atol=0.1), r.growth_rollout
    assert np.allclose(r.growth_rollout["B"], -0.4, atol=0.1), r.growth_rollout
    # the badge's numbers are the means of the per-snapshot table
    assert r.metrics["g_left"] == pytest.approx(float(np.mean(r.growth_at_snapshots["A"])), abs=1e-6)
    assert r.metrics["g_right"] == pytest.approx(float(np.mean(r.growth_at_snapshots["B"])), abs=1e-6)
    assert r.metrics["a_cells_right_last"] == 0


def test_growth_is_scored_on_true_clusters():
    # at the default the clusters never cross x1 = 0, so true membership and the side of x1 = 0 agree
    snaps = eng.make_snapshots(np.random.default_rng(0), 150, 0.4, 0.2)
    for s, (n_a, _) in zip(snaps, eng.cluster_counts(150, 0.4)):
        assert np.array_equal(np.arange(len(s)) < n_a, s[:, 0] < 0)
    # wide clusters: A's growing tail crosses over by t = 3 (1 - Phi(1.5 / sqrt(0.09 + 0.75)) = 5 % of 249 cells)
    wide = eng.make_snapshots(np.random.default_rng(0), 150, 0.4, 0.5)
    n_a = eng.cluster_counts(150, 0.4)[-1][0]
    crossed = int((wide[-1][:n_a, 0] > 0).sum())
    assert 4 <= crossed <= 25


def test_rollout_growth_by_hand():
    # 4 particles, 3 intervals of length 1 on a grid of 2 steps per unit time; particle 3 starts in B and
    # crosses into A; its label stays B
    n_steps = 6
    traj = np.zeros((n_steps + 1, 4, 2))
    traj[:, 0, 0], traj[:, 1, 0], traj[:, 2, 0] = -1.0, -2.0, 1.0
    traj[:, 3, 0] = np.linspace(1.0, -1.0, n_steps + 1)
    t = np.arange(n_steps + 1) / 2
    rates = np.array([0.5, 0.5, -0.3, 0.2])
    w = np.exp(np.outer(t, rates)) * np.array([1.0, 2.0, 1.0, 3.0])
    out = eng.rollout_growth(traj, w, [0, 2, 4, 6])
    assert np.allclose(out["A"], 0.5)
    # B: total weight exp(-0.3 t) + 3 exp(0.2 t), growth per interval by hand
    wb = np.exp(-0.3 * np.arange(4)) + 3 * np.exp(0.2 * np.arange(4))
    assert np.allclose(out["B"], np.log(wb[1:] / wb[:-1]))


def test_snapshot_sizes_and_fractions_closed_form():
    assert eng.snapshot_sizes(150, 0.4) == [150, 162, 201, 272]
    counts = eng.cluster_counts(150, 0.4)
    for (n_a, n_b), t in zip(counts, eng.TIMES):
        assert n_a / (n_a + n_b) == pytest.approx(1 / (1 + math.exp(-0.8 * t)), abs=0.01)
    with pytest.raises(InputError):
        eng.run(eng.Config(n0=50, gamma=0.6))


def test_pot_references_independently():
    rng = np.random.default_rng(0)
    snaps = eng.make_snapshots(rng, 150, 0.4, 0.2)
    # exact balanced OT between normalised t0 and t3 must move B -> A mass near the 0.42 floor
    a = np.full(len(snaps[0]), 1 / len(snaps[0]))
    b = np.full(len(snaps[3]), 1 / len(snaps[3]))
    P = ot.emd(a, b, ot.dist(snaps[0], snaps[3]))
    sb, ea = snaps[0][:, 0] > 0, snaps[3][:, 0] < 0
    assert P[np.ix_(sb, ea)].sum() >= 0.35
    # unbalanced Sinkhorn t0 -> t1 with mass 1/N0 per cell: (almost) no cross-cluster mass, more on A
    C = ot.dist(snaps[0], snaps[1])
    U = ot.unbalanced.sinkhorn_unbalanced(np.full(150, 1 / 150), np.full(len(snaps[1]), 1 / 150),
                                          C / np.median(C), 0.05, 1.0)
    sa, ea1 = snaps[0][:, 0] < 0, snaps[1][:, 0] < 0
    cross = (U[np.ix_(sa, ~ea1)].sum() + U[np.ix_(~sa, ea1)].sum()) / U.sum()
    assert cross < 0.02
    rows = U.sum(1)
    assert rows[sa].mean() > 1.1 * rows[~sa].mean()
    # the engine's local mass split of that plan: A cells carry more than one cell each, B cells fewer
    n, _ = eng.local_mass(U, snaps[1])
    assert n.sum() == pytest.approx(len(snaps[1]))
    assert n[sa].mean() > 1.2 and n[~sa].mean() < 0.85


def test_model_coupling_agrees_with_pot_uot(default_result):
    T = default_result.transitions
    cross_model = T["DeepRUOT"][0, 1] + T["DeepRUOT"][1, 0]
    cross_uot = T["POT unbalanced Sinkhorn t0→t1"][0, 1] + T["POT unbalanced Sinkhorn t0→t1"][1, 0]
    assert abs(cross_model - cross_uot) < 0.05
    assert abs(T["balanced baseline"][1, 0] - T["POT exact OT t0→t3"][1, 0]) < 0.08
    # the spec's static reference over the whole span: its soft marginal penalty still lets B's mass reach A,
    # less of it than the balanced plan sends (computed here with POT directly, not through the engine's helper)
    import ot

    snaps = default_result.snapshots
    n0 = len(snaps[0])
    C = ot.dist(snaps[0], snaps[-1])
    P = ot.unbalanced.sinkhorn_unbalanced(np.full(n0, 1 / n0), np.full(len(snaps[-1]), 1 / n0), C / np.median(C),
                                          0.05, 1.0, numItermax=3000)
    ba = P[np.ix_(snaps[0][:, 0] >= 0, snaps[-1][:, 0] < 0)].sum() / P.sum()
    assert T["POT unbalanced Sinkhorn t0→t3"][1, 0] == pytest.approx(ba, abs=1e-6)
    assert T["DeepRUOT"][1, 0] < 0.05 < ba < T["POT exact OT t0→t3"][1, 0]


def test_action_of_straight_constant_speed_motion():
    class Const(torch.nn.Module):
        def forward(self, inp):
            out = torch.zeros(len(inp), 2)
            out[:, 1] = 0.5
            return out

    x = torch.randn(40, 2)
    logw = torch.full((40,), -math.log(40))
    e_total = 0.0
    for k in range(3):
        x, logw, e, _, _ = eng.simulate(Const(), None, x, logw, eng.TIMES[k], eng.TIMES[k + 1], 0.25, 1.0)
        e_total += float(e)
    assert e_total == pytest.approx(0.375, rel=1e-5)


def test_fokker_planck_residual_vanishes_for_translating_gaussian():
    sigma, u = 0.3, torch.tensor([0.4, -0.2])

    class V(torch.nn.Module):
        def forward(self, inp):
            return inp[:, :2] * 0.0 + u

    class S(torch.nn.Module):  # s = sigma^2/2 log N(x; u t, I), up to a constant
        def forward(self, inp):
            x, t = inp[:, :2], inp[:, 2:3]
            return (-0.25 * sigma**2 * ((x - u * t) ** 2).sum(1, keepdim=True))

    class G(torch.nn.Module):
        def forward(self, inp):
            return inp[:, 0] * 0.0

    x = torch.randn(30, 2)
    assert float(eng.fp_residual(V(), G(), S(), x, 0.7, sigma).detach()) < 1e-5
    # a wrong growth makes it non-zero
    class G1(G):
        def forward(self, inp):
            return inp[:, 0] * 0.0 + 0.3
    assert float(eng.fp_residual(V(), G1(), S(), x, 0.7, sigma).detach()) == pytest.approx(0.3, abs=1e-5)


def test_no_growth_limit_models_agree():
    r = eng.run(eng.Config(gamma=0.0))
    assert abs(r.metrics["g_mean"]) < 0.08
    assert np.max(np.abs(r.transitions["DeepRUOT"] - r.transitions["balanced baseline"])) < 0.05
    assert all_passed(eng.claims(r)), [c.describe() for c in eng.claims(r) if not c.passed]


def test_stochastic_refinement_runs():
    r = eng.run(eng.Config(n0=100, gamma=0.3, iters=20, stochastic=True, iters3=10, baseline=False))
    assert r.sde_paths is not None and np.isfinite(r.sde_paths).all()
    assert len(r.losses["DeepRUOT FP"]) == 10 and np.isfinite(r.losses["DeepRUOT FP"]).all()
    assert r.metrics["mass_err_max"] < 0.15


def test_stochastic_refinement_keeps_every_badge_at_the_spec_weight():
    # the joint stage at the spec's Fokker-Planck weight 1, default settings otherwise (measured 2026-12-06:
    # every badge passes at seeds 0-3; with the old weight 0.01, sigma_model 0.5 and 60 joint steps failed the mass one)
    assert eng.LAMBDA_FP == 1.0
    r = eng.run(eng.Config(stochastic=True, live=True, sigma_model=0.5, iters3=60))
    assert np.isfinite(r.losses["DeepRUOT FP"]).all()
    assert all_passed(eng.claims(r)), [c.describe() for c in eng.claims(r) if not c.passed]


def test_stage3_spec_weights_also_pass_but_ours_fit_the_dying_cluster_better(monkeypatch):
    # the page's caveat: the joint stage keeps the stage-1 OT / mass / action weights rather than the spec's
    # 1 / 1000 / 1 (1000 / N_0 on our mass loss, which is N_0 times the fractional one); at seed 0 with the
    # stochastic refinement on, both sets pass every badge and ours leaves the smaller death-rate error
    cfg = eng.Config(stochastic=True)
    ours = eng.run(cfg)
    monkeypatch.setattr(eng, "STAGE3_OT", 1.0)
    monkeypatch.setattr(eng, "STAGE3_MASS", 1000.0 / cfg.n0)
    monkeypatch.setattr(eng, "STAGE3_E", 1.0)
    spec = eng.run(cfg)
    for r in (ours, spec):
        assert all_passed(eng.claims(r)), [c.describe() for c in eng.claims(r) if not c.passed]
    err = [abs(r.metrics["g_right"] + r.gamma) for r in (ours, spec)]
    assert err[0] < err[1], err


def test_mass_claim_needs_the_mass_loss(monkeypatch):
    # negative control: with the local mass loss switched off, the coupling pre-fit alone leaves the
    # total mass at t = 3 off by more than the 10 % the claim allows
    monkeypatch.setattr(eng, "LAMBDA_MASS", 0.0)
    r = eng.run(eng.Config(baseline=False))
    assert r.metrics["mass_err_max"] > 0.10


def test_result_pickles_small(default_result):
    import pickle

    assert len(pickle.dumps(default_result)) < 2_000_000


def test_stacked_velocity_nets_match_the_separate_nets():
    """Stages 0-1 train DeepRUOT and the baseline side by side through stacked weights; the stacked module
    must compute each net's own v(x, t) and write the trained weights back into the right net."""
    torch.manual_seed(0)
    nets = [eng._nets(torch, False)[0] for _ in range(2)]
    stack = eng._stack_v(torch, nets)
    inp = torch.randn(2, 30, 3)
    out = stack(inp)
    for e, net in enumerate(nets):
        np.testing.assert_allclose(out[e].detach().numpy(), net(inp[e]).detach().numpy(), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        for p in stack.parameters():
            p.add_(0.1)
    stack.write_back()
    out = stack(inp)
    for e, net in enumerate(nets):
        np.testing.assert_allclose(out[e].detach().numpy(), net(inp[e]).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_checkpoint_matches_live_training(default_result):
    """The shipped default nets are what `python -m engine.deep_ruot train` produces: a live run at the default
    settings gives the same verdicts and (to float drift across machines) the same measurements and losses."""
    live = eng.run(eng.Config(live=True))
    assert not live.pretrained
    ck, lv = default_result.metrics, live.metrics
    assert [c.passed for c in eng.claims(live)] == [c.passed for c in eng.claims(default_result)]
    for k in ("false_ruot", "false_baseline", "g_left", "g_right", "g_corr", "mass_err_max", "mass_err_max_stage0"):
        assert ck[k] == pytest.approx(lv[k], abs=0.03), k
    assert set(live.losses) == set(default_result.losses)
    for k, v in live.losses.items():
        assert len(v) == len(default_result.losses[k]) == eng.Config().iters + eng.Config().iters // 4
        # the baseline's final OT loss came out 14 % apart on another machine (0.173 vs 0.153) while every
        # measurement and verdict above agreed: its optimum moves with the last digits of the float arithmetic
        assert default_result.losses[k][-1] == pytest.approx(v[-1], rel=0.2, abs=1e-3), k
    # the checkpoint only stands in for training: the evaluation is recomputed on the regenerated data
    np.testing.assert_allclose(default_result.snapshots[0], live.snapshots[0])


def test_checkpoint_is_used_only_for_the_exact_default(monkeypatch):
    import dataclasses

    cfg = eng.Config()
    snaps, device = eng._prepare(cfg)
    assert eng.load_default_checkpoint(cfg, snaps, device) is not None
    assert eng.checkpoint_path().stat().st_size < 2 * 2**20
    assert eng.load_default_checkpoint(dataclasses.replace(cfg, live=True), snaps, device) is None
    for change in ({"seed": 1}, {"alpha": 2.0}, {"baseline": False}, {"dt": 0.1}):
        assert eng.load_default_checkpoint(dataclasses.replace(cfg, **change), snaps, device) is None, change
    assert eng.load_default_checkpoint(cfg, [s + 0.01 for s in snaps], device) is None  # other data
    monkeypatch.setattr(eng, "LR", eng.LR * 2)  # another recipe
    assert eng.load_default_checkpoint(cfg, snaps, device) is None


def test_work_guard_refuses_the_slowest_corner():
    # every size at its max measured 35 s on a 2-core CPU; the guard names what to lower
    with pytest.raises(ValueError, match="fewer cells"):
        eng.Config(n0=300, iters=100, dt=0.1, baseline=True, stochastic=True, iters3=30)
    assert eng.estimated_seconds(eng.Config()) < 5
    assert eng.estimated_seconds(eng.HEAVY_CONFIG) <= eng.WORK_LIMIT_S
    assert eng.estimated_seconds(eng.Config(n0=300)) > eng.estimated_seconds(eng.Config())
    assert eng.estimated_seconds(eng.Config(dt=0.1)) > eng.estimated_seconds(eng.Config(dt=0.5))


def test_work_guard_on_the_spec_iteration_ranges():
    # the spec's top values (400 stage-1, 200 joint iterations) are reachable at moderate sizes ...
    eng.Config(n0=150, iters=400, dt=0.5, stochastic=True, iters3=100)
    eng.Config(n0=150, iters=40, stochastic=True, iters3=200)
    # ... refused where the measured per-iteration costs add up past the limit
    with pytest.raises(ValueError, match="fewer iterations"):
        eng.Config(n0=400, iters=40, stochastic=True, iters3=200)
    with pytest.raises(ValueError, match="fewer iterations"):
        eng.Config(n0=300, iters=400, dt=0.25)
    # joint iterations only cost when the stochastic refinement is on
    assert eng.estimated_seconds(eng.Config(iters3=200)) == eng.estimated_seconds(eng.Config(iters3=30))
    # without the stochastic refinement stage 3 does not run: its iteration count changes nothing, not even the
    # estimate that decides what is refused (it did, by up to 7 %, at 10 vs 30 iterations)
    assert eng.estimated_seconds(eng.Config(iters3=10)) == eng.estimated_seconds(eng.Config())
    assert eng.estimated_seconds(eng.Config(stochastic=True, iters3=200)) > \
        eng.estimated_seconds(eng.Config(stochastic=True, iters3=30)) + 3


def test_longer_training_drifts_as_the_page_says():
    """The page's caveat, measured: at seed 0 the default 80 iterations pass every badge, 200 fail both growth
    rates, the mass curve and no-false-transitions, 400 fail both growth rates and the mass curve on an x86_64
    AVX512_SPR CPU, or the growth correlation on the page's first machine (float results differing in the last
    digits, grown over 400 iterations)."""
    def failing(iters):
        return {c.label for c in eng.claims(eng.run(eng.Config(iters=iters))) if not c.passed}

    growth = {"|mean learned g on cluster A's cells − γ|", "|mean learned g on cluster B's cells + γ|"}
    mass = "worst relative mass error over t = 1, 2, 3"
    assert failing(200) == growth | {mass, "share of final mass that moved B → A (DeepRUOT)"}
    assert failing(400) in (growth | {"Pearson r of g_net and g* over snapshot cells"}, growth | {mass})


def test_long_joint_stage_drifts_as_the_page_says():
    """The caveat's last clause, measured: with the stochastic refinement on, 100 joint iterations at seed 0 fail
    two badges (cluster A's growth rate and the mass curve)."""
    r = eng.run(eng.Config(stochastic=True, iters3=100))
    assert {c.label for c in eng.claims(r) if not c.passed} == {
        "|mean learned g on cluster A's cells − γ|", "worst relative mass error over t = 1, 2, 3"}


def test_action_growth_term_scales_with_alpha_by_hand():
    """With v = 0 and a constant growth g = c, every Euler step adds alpha c^2 h times the current total mass
    exp(c t_k) and multiplies each weight by exp(c h); checked against a plain loop for alpha = 3."""
    c, alpha, n, dt = 0.3, 3.0, 20, 0.25

    class Zero(torch.nn.Module):
        def forward(self, inp):
            return inp[:, :2] * 0.0

    class Const(torch.nn.Module):
        def forward(self, inp):
            return inp[:, 0] * 0.0 + c

    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(0))
    logw = torch.full((n,), -math.log(n))
    _, lw, e, _, _ = eng.simulate(Zero(), Const(), x, logw, 0.0, 1.0, dt, alpha)
    ref = sum(alpha * c**2 * math.exp(c * k * dt) * dt for k in range(4))
    assert float(e) == pytest.approx(ref, rel=1e-5)
    assert float(torch.exp(lw).sum()) == pytest.approx(math.exp(c), rel=1e-5)


def test_fokker_planck_residual_vanishes_for_growth_and_linear_velocity():
    """v = (a x1, b x2), g = G and a spatially uniform density growing like exp((G - a - b) t) solve
    d_t rho + div(v rho) = g rho exactly; in log form with s = sigma^2/2 log rho the residual is 0, and it equals
    |a + b - G| when s is frozen in time (the time derivative carries the factor 2 / sigma^2)."""
    sigma, a, b, G = 0.3, 0.5, -0.2, 0.7

    class V(torch.nn.Module):
        def forward(self, inp):
            return torch.stack([a * inp[:, 0], b * inp[:, 1]], 1)

    class Gr(torch.nn.Module):
        def forward(self, inp):
            return inp[:, 0] * 0.0 + G

    class S(torch.nn.Module):
        def __init__(self, rate):
            super().__init__()
            self.rate = rate

        def forward(self, inp):
            return 0.5 * sigma**2 * self.rate * inp[:, 2:3] + 0.0 * inp[:, :1]

    x = torch.randn(25, 2, generator=torch.Generator().manual_seed(1))
    assert float(eng.fp_residual(V(), Gr(), S(G - a - b), x, 1.3, sigma).detach()) < 1e-5
    assert float(eng.fp_residual(V(), Gr(), S(0.0), x, 1.3, sigma).detach()) == pytest.approx(abs(a + b - G),
                                                                                               abs=1e-5)


def test_sde_sampler_keeps_the_stationary_ou_variance():
    """v = 0 and s = sigma^2/2 log N(x; 0, I) give dX = grad s dt + sigma dW = -sigma^2/2 X dt + sigma dW, whose
    Euler chain has var_{k+1} = (1 - sigma^2 h / 2)^2 var_k + sigma^2 h; from N(0, I) the sample variance must
    follow that recursion (about 1 throughout)."""
    sigma, dt, n = 0.5, 0.25, 4000

    class Zero(torch.nn.Module):
        def forward(self, inp):
            return inp[:, :2] * 0.0

    class S(torch.nn.Module):
        def forward(self, inp):
            return -0.25 * sigma**2 * (inp[:, :2] ** 2).sum(1, keepdim=True)

    x0 = torch.randn(n, 2, generator=torch.Generator().manual_seed(2))
    paths = eng.sde_sample(Zero(), None, S(), x0, dt, sigma, torch.Generator().manual_seed(3))
    var = 1.0
    for k in range(1, len(paths)):
        var = (1 - 0.5 * sigma**2 * dt) ** 2 * var + sigma**2 * dt
        assert paths[k].var(0).mean() == pytest.approx(var, abs=0.08), k


# ----------------------------------------------------------------------------- second mutation round
@pytest.fixture(scope="module")
def default_nets():
    """The default run's snapshots (float64, regenerated as run() does) and the shipped nets it evaluates."""
    cfg = eng.Config()
    snaps, device = eng._prepare(cfg)
    trained = eng.load_default_checkpoint(cfg, snaps, device)
    assert trained is not None
    return cfg, snaps, trained


def test_growth_heatmap_and_snapshot_table_are_the_growth_net(default_result, default_nets):
    """Section 2: heatmap k, row i, column j is g_net(x1 = grid[j], x2 = grid[i], t = k) (the t slider picks k);
    the table's rows are the means of g_net at t_k over each cluster's own snapshot cells (A's cells first)."""
    cfg, snaps, trained = default_nets
    g_net = trained[0][1]
    r = default_result
    grid = r.grid
    np.testing.assert_allclose(grid, np.linspace(-3.5, 3.5, eng.GRID))
    assert r.growth_field.shape == (len(eng.TIMES), eng.GRID, eng.GRID)
    rows, cols = (1, 5, 20, 33, 39), (0, 7, 19, 31, 38)
    for k, t in enumerate(eng.TIMES):
        inp = torch.tensor([[grid[j], grid[i], t] for i in rows for j in cols], dtype=torch.float32)
        with torch.no_grad():
            want = g_net(inp).numpy().reshape(len(rows), len(cols))
        np.testing.assert_allclose(r.growth_field[k][np.ix_(rows, cols)], want, atol=1e-5, err_msg=f"t = {t}")
    assert np.max(np.abs(r.growth_field[0] - r.growth_field[-1])) > 0.05
    for k, (t, s, (n_a, _)) in enumerate(zip(eng.TIMES, snaps, eng.cluster_counts(cfg.n0, cfg.gamma))):
        with torch.no_grad():
            gs = g_net(torch.as_tensor(np.c_[s, np.full(len(s), t)], dtype=torch.float32)).double().numpy()
        assert r.growth_at_snapshots["A"][k] == pytest.approx(gs[:n_a].mean(), abs=1e-5), t
        assert r.growth_at_snapshots["B"][k] == pytest.approx(gs[n_a:].mean(), abs=1e-5), t


def test_stage0_mass_caption_from_the_shipped_stage0_masses(default_result, default_nets):
    """The caption's 'right after the coupling pre-fit' number: the worst relative error of the stage-0 total mass
    against N_k / N_0 over t = 1, 2, 3 (t = 0 is exact by construction)."""
    cfg, _, trained = default_nets
    mass0 = np.asarray(trained[0][4], dtype=float)
    data = np.array([round(cfg.n0 * math.cosh(cfg.gamma * t)) for t in eng.TIMES]) / cfg.n0
    errs = np.abs(mass0 - data) / data
    assert errs[0] < 1e-6
    assert default_result.metrics["mass_err_max_stage0"] == pytest.approx(errs[1:].max(), abs=1e-6)
    assert np.argmax(errs) != 0 and errs[1:].min() < errs[1:].max()


def test_transition_bars_by_hand_from_paths_and_weights(default_result):
    """Section 3's learned bars: start side from the first path point, end side from the last, each particle
    counted with its final weight, over the total final weight; every model's and plan's four bars add up to 1."""
    r = default_result
    for name in ("DeepRUOT", "balanced baseline"):
        P, W = r.traj[name].astype(float), r.weights[name].astype(float)
        T = np.zeros((2, 2))
        for p in range(P.shape[1]):
            T[int(P[0, p, 0] >= 0), int(P[-1, p, 0] >= 0)] += W[-1, p]
        np.testing.assert_allclose(r.transitions[name], T / W[-1].sum(), atol=1e-5, err_msg=name)
    for name, T in r.transitions.items():
        assert np.asarray(T).sum() == pytest.approx(1.0, abs=1e-9), name
    assert r.metrics["false_ruot"] == pytest.approx(r.transitions["DeepRUOT"][1, 0], abs=1e-12)
    assert r.metrics["false_baseline"] == pytest.approx(r.transitions["balanced baseline"][1, 0], abs=1e-12)


def test_pot_tiles_and_captions_recomputed_with_pot(default_result, default_nets):
    """The POT numbers on the page, straight from POT on the regenerated snapshots: the cross-cluster share of the
    unbalanced Sinkhorn plan t0 -> t1 (4th tile), its A/B row-sum ratio (tile help), the B -> A share of the exact
    balanced plan t0 -> t3 (baseline badge detail), and the last snapshot's cell counts right of x1 = 0."""
    _, snaps, _ = default_nets
    m = default_result.metrics
    x0, x1, x3 = snaps[0], snaps[1], snaps[-1]
    n0 = len(x0)
    C = ot.dist(x0, x1)
    U = ot.unbalanced.sinkhorn_unbalanced(np.full(n0, 1 / n0), np.full(len(x1), 1 / n0), C / np.median(C),
                                          eng.UOT_REG, eng.UOT_REG_M, numItermax=3000)
    sa, ea = x0[:, 0] < 0, x1[:, 0] < 0
    cross = (U[np.ix_(sa, ~ea)].sum() + U[np.ix_(~sa, ea)].sum()) / U.sum()
    assert m["cross_pot_uot"] == pytest.approx(cross, abs=1e-9)
    rows = U.sum(1)
    assert m["uot_row_ratio"] == pytest.approx(rows[sa].mean() / rows[~sa].mean(), rel=1e-9)
    assert m["uot_row_ratio"] > 1.0  # the growing cluster's cells carry more mass
    E = ot.emd(np.full(n0, 1 / n0), np.full(len(x3), 1 / len(x3)), ot.dist(x0, x3))
    ea3 = x3[:, 0] < 0
    assert m["false_pot_emd"] == pytest.approx(E[np.ix_(~sa, ea3)].sum() / E.sum(), abs=1e-9)
    assert m["false_pot_emd"] > 0.3
    # section 3's caption: POT's static unbalanced plan t0 -> t3, share of its mass sent from B to A
    C3 = ot.dist(x0, x3)
    U3 = ot.unbalanced.sinkhorn_unbalanced(np.full(n0, 1 / n0), np.full(len(x3), 1 / n0), C3 / np.median(C3),
                                           eng.UOT_REG, eng.UOT_REG_M, numItermax=3000)
    assert m["false_pot_uot_t3"] == pytest.approx(U3[np.ix_(~sa, ea3)].sum() / U3.sum(), abs=1e-9)
    assert m["cells_right_last"] == int((x3[:, 0] > 0).sum())
    assert m["cells_right_last"] != int((snaps[-2][:, 0] > 0).sum())


# ----------------------------------------------------------------------------- what the page draws and quotes
def test_page_growth_map_transitions_and_tiles(default_result):
    """Opened at growth-field time 2: the heat map is g at t = 2 with the t = 2 snapshot on it; the transition
    bars put each model's start-cluster → end-cluster shares under the matching label (the baseline's false B → A
    share is its metric, nothing goes A → B); the tiles quote the B → A share of each model's own bars."""
    at = open_page("deep_ruot", {"t_view": "2"}, seed=(("engine.deep_ruot", eng.Config(), default_result),))
    r, m = default_result, default_result.metrics
    figs = figures(at)

    heat = next(d for d in figs["gfield"]["data"] if d["type"] == "heatmap")
    np.testing.assert_allclose(values(heat["z"]), r.growth_field[2], rtol=1e-6)
    dots = next(d for d in figs["gfield"]["data"] if d["type"] == "scatter" and d.get("mode") == "markers")
    np.testing.assert_allclose(values(dots["x"]), r.snapshots[2][:, 0])
    np.testing.assert_allclose(values(dots["y"]), r.snapshots[2][:, 1])

    bars = {d["name"]: dict(zip(d["x"], values(d["y"]), strict=True)) for d in figs["trans"]["data"]}
    base = bars["balanced baseline"]
    assert base["B → A"] == pytest.approx(m["false_baseline"], abs=1e-6) and base["B → A"] > 0.1
    assert base["A → B"] == pytest.approx(0.0, abs=1e-6)
    for name, shares in bars.items():
        assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3), name

    tiles = {t.label: t.value for t in at.metric}
    assert tiles["B → A share, DeepRUOT"] == f"{bars['DeepRUOT']['B → A']:.3f}"
    assert tiles["B → A share, baseline"] == f"{base['B → A']:.3f}"


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_mass_badge_reads_every_snapshot_including_the_last(monkeypatch):
    """At the default the worst snapshot is t = 2, so a badge that skipped t = 3 would read the same number.
    Here DeepRUOT's rollout weights at the last step (t = 3) are scaled by 1.3: the worst relative error over
    t = 1, 2, 3, recomputed from the rollout weights at the snapshot times against round(N_0 cosh(gamma t)) /
    N_0, is then at t = 3, and the badge must report it (and fail)."""
    real = eng._rollout

    def skewed(torch_, v, g, x0, n0, dt, alpha):
        P, W, e = real(torch_, v, g, x0, n0, dt, alpha)
        if g is not None:      # DeepRUOT only; the baseline has no growth net
            W = W.copy()
            W[-1] *= 1.3
        return P, W, e

    monkeypatch.setattr(eng, "_rollout", skewed)
    cfg = eng.Config()
    r = eng.run(cfg)
    data = np.array([round(cfg.n0 * math.cosh(cfg.gamma * t)) for t in eng.TIMES]) / cfg.n0
    idx = [int(np.flatnonzero(np.isclose(r.traj_t, t))[0]) for t in eng.TIMES]
    mass = r.weights["DeepRUOT"].astype(np.float64).sum(1)[idx]
    errs = np.abs(mass - data) / data
    assert errs[0] < 1e-5 and np.argmax(errs) == 3 and errs[3] > 0.2
    assert r.metrics["mass_err_max"] == pytest.approx(errs[1:].max(), rel=1e-4)
    for k in (1, 2, 3):
        assert r.metrics[f"mass_err_t{k}"] == pytest.approx(errs[k], rel=1e-4, abs=1e-6)
    (badge,) = [c for c in eng.claims(r) if c.label.startswith("worst relative mass error")]
    assert not badge.passed and badge.measured == pytest.approx(errs[3], rel=1e-4)


def test_growth_correlation_scores_cells_on_their_true_cluster_when_clusters_overlap(monkeypatch):
    """With wide clusters (sigma_true = 0.5) some of A's cells lie right of x1 = 0 at late times. The Pearson
    badge compares g_net on every snapshot cell with g* of the cell's TRUE cluster (+gamma for A, -gamma for
    B; the generator writes A's cells first), recomputed here with numpy from the trained growth net; scoring
    by the side of x1 = 0 instead gives another number."""
    import torch

    nets = []
    real = eng._nets

    def spy(torch_, growth):
        v, g = real(torch_, growth)
        if growth:
            nets.append(g)
        return v, g

    monkeypatch.setattr(eng, "_nets", spy)
    cfg = eng.Config(sigma_true=0.5, iters=20, baseline=False)
    r = eng.run(cfg)
    assert not r.pretrained and len(nets) == 1
    g_net = nets[0]
    g_all, by_member, by_side = [], [], []
    for t, s, (n_a, _) in zip(eng.TIMES, r.snapshots, eng.cluster_counts(cfg.n0, cfg.gamma)):
        with torch.no_grad():
            g = g_net(torch.as_tensor(np.c_[s, np.full(len(s), t)], dtype=torch.float32)).double().numpy()
        in_a = np.arange(len(s)) < n_a
        g_all.append(g)
        by_member.append(np.where(in_a, cfg.gamma, -cfg.gamma))
        by_side.append(np.where(s[:, 0] < 0, cfg.gamma, -cfg.gamma))
    g_all, by_member, by_side = map(np.concatenate, (g_all, by_member, by_side))
    assert (by_member != by_side).sum() >= 4          # the clusters do overlap here
    want = np.corrcoef(g_all, by_member)[0, 1]
    assert r.metrics["g_corr"] == pytest.approx(want, abs=1e-4)
    assert abs(np.corrcoef(g_all, by_side)[0, 1] - want) > 1e-3


def test_growth_badges_name_the_zero_rates_at_gamma_0(default_result):
    """At γ = 0 nothing grows or dies: the badges' statements say so rather than naming a growing and a dying
    cluster with truth ±0 (the measured quantities are unchanged)."""
    import dataclasses

    zero = eng.claims(dataclasses.replace(default_result, gamma=0.0))
    assert "γ = 0" in zero[0].statement and all("truth" not in c.statement for c in zero)
    assert any("growth rate, zero here" in c.statement for c in zero)
    base = eng.claims(default_result)
    assert "growth and death" in base[0].statement
