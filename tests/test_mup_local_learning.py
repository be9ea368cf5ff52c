"""μP for predictive coding: claims at the default config and independent checks."""

import numpy as np
import pytest
import torch

import engine.mup_local_learning as eng
from tests.pagetext import charts, open_page, values


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_pass_at_default(default_result):
    for c in eng.claims(default_result):
        assert c.passed, c.describe()


def test_sp_and_mup_coincide_at_base_width(default_result):
    i_sp, i_mu = default_result.param_names.index("SP"), default_result.param_names.index("muP")
    assert default_result.widths[0] == eng.BASE_WIDTH
    np.testing.assert_array_equal(default_result.final_loss[i_sp, 0], default_result.final_loss[i_mu, 0])


@pytest.mark.parametrize("param_name,gamma", [("muP", 1.0), ("SP", 1.0), ("muP", 640.0)])
def test_linear_pc_direction_matches_svd_closed_form(param_name, gamma):
    d = eng.linear_directions(64, gamma, param_name, 10.0, seed=3)
    W1, W2, x, y = d["W1"], d["W2"], d["x"], d["y"]
    U, s, Vh = torch.linalg.svd(W2, full_matrices=False)
    e = (y - x @ W1.T @ W2.T).T
    ref = Vh.T @ torch.diag(s / (1 + gamma * s**2)) @ U.T @ e @ x
    assert eng.cosine(d["pc"], ref) >= 1 - 1e-10
    # limits: γ → 0 is first-order, γ → ∞ is Gauss–Newton
    lo = eng.linear_directions(64, 1e-9, param_name, 10.0, seed=3)
    hi = eng.linear_directions(64, 1e12, param_name, 10.0, seed=3)
    assert eng.cosine(lo["pc"], lo["fo"]) > 1 - 1e-8
    assert eng.cosine(hi["pc"], hi["gn"]) > 1 - 1e-6


def test_iterative_inference_reaches_the_linear_equilibrium():
    d = eng.linear_directions(64, 1.0, "muP", 10.0, seed=4)
    ws = [d["W1"][None], d["W2"][None]]
    ident = lambda u: u  # noqa: E731
    ups = eng.pc_update(ws, d["x"][None], d["y"][None], 1.0, 0.1, 2000, ident, lambda u: torch.ones_like(u))
    closed = d["pc"] / d["x"].shape[0]
    np.testing.assert_allclose(ups[0][0].numpy(), closed.numpy(), atol=1e-6)
    # the top layer's update uses the equilibrium hidden state (not the feed-forward one) as presynaptic activity:
    # h* minimises ½‖h − W₁x‖² + γ/2 ‖y − W₂h‖², so h* = (I + γ W₂ᵀW₂)⁻¹ (W₁x + γ W₂ᵀy), and the update is
    # γ (y − W₂h*) h*ᵀ / B
    W1, W2, x, y, gamma = d["W1"], d["W2"], d["x"], d["y"], 1.0
    A = torch.eye(W2.shape[1], dtype=W2.dtype) + gamma * W2.T @ W2
    Hs = torch.linalg.solve(A, (x @ W1.T + gamma * y @ W2).T).T              # (B, hidden)
    top = gamma * (y - Hs @ W2.T).T @ Hs / x.shape[0]
    np.testing.assert_allclose(ups[1][0].numpy(), top.numpy(), atol=1e-6)
    ff = x @ W1.T                                                             # the feed-forward state differs
    assert float((gamma * (y - ff @ W2.T).T @ ff / x.shape[0] - top).abs().max()) > 1e-3


def test_small_gamma_pc_matches_backprop():
    torch.manual_seed(0)
    act, dact = eng._tanh()
    dims = [(10, 24), (24, 24), (24, 3)]
    ws = [torch.randn(1, fo, fi, dtype=torch.float64) / np.sqrt(fi) for fi, fo in dims]
    x = torch.randn(1, 16, 10, dtype=torch.float64)
    y = torch.randn(1, 16, 3, dtype=torch.float64)
    gamma = 1e-4
    ups = eng.pc_update(ws, x, y, gamma, 0.2, 200, act, dact)
    leaves = [w.clone().requires_grad_(True) for w in ws]
    loss = 0.5 * ((y - eng.forward(leaves, x, act)) ** 2).sum() / x.shape[1]
    loss.backward()
    for up, w in zip(ups, leaves):
        assert eng.cosine(up / gamma, -w.grad) >= 0.999


def test_mup_scalings():
    assert eng.lr_multipliers("muP", 256, 3) == [8.0, 1.0, 0.125]
    assert eng.lr_multipliers("SP", 256, 3) == [1.0, 1.0, 1.0]
    assert eng.gamma_for("muP-GN", 1.0, 256) == 8.0 and eng.gamma_for("muP", 1.0, 256) == 1.0
    ws = eng.init_weights([(64, 512), (512, 512), (512, 10)], "muP", 512, torch.Generator().manual_seed(0), 1)
    assert float(ws[2].std()) == pytest.approx(np.sqrt(32) / 512, rel=0.05)
    assert float(ws[1].std()) == pytest.approx(1 / np.sqrt(512), rel=0.05)


def test_step_clamp_keeps_budget():
    cfg = eng.Config(widths=(32, 128), steps=300, inference_steps=20)
    n_lanes = 2 * (cfg.lr_max - cfg.lr_min + 1)
    est = eng.flop_estimate(cfg, n_lanes)
    assert est > eng.FLOP_BUDGET   # the clamp is exercised by this setting
    res = eng.run(cfg)
    expected = max(eng.MIN_STEPS, int(cfg.steps * eng.FLOP_BUDGET / est) // 10 * 10)
    assert expected < cfg.steps
    assert res.steps_used == expected and res.curve_steps.max() <= expected
    assert any(f"ran {expected} steps instead of {cfg.steps}" in n for n in res.notes), res.notes


def test_guard_refuses_settings_whose_shortest_sweep_is_over_the_limit():
    # every slider at its top: even the 10-step sweep needed ~2.4 TFLOP (47 s measured on a 2-core CPU)
    with pytest.raises(ValueError, match="fewer inference steps"):
        eng.Config(widths=eng.WIDTHS, lr_min=-8, lr_max=7, steps=300, inference_steps=20, params=eng.PARAMS,
                   batch=64, depth=4)
    heavy = eng.HEAVY_CONFIG
    lanes = len(heavy.params) * (heavy.lr_max - heavy.lr_min + 1)
    shortest = eng.flop_estimate(heavy, lanes) * eng.MIN_STEPS / heavy.steps
    assert eng.FLOP_BUDGET < shortest <= eng.MAX_FLOP   # the heavy setting is shortened, and still accepted
    eng.Config(inference_steps=20, steps=300)   # long but shortened to the budget: accepted


def test_parameterisations_are_ticked_one_by_one_and_old_links_still_read():
    from engine.core.params import from_query, to_query

    for old, value in (("sp_mup", ("SP", "muP")), ("all", eng.PARAMS)):
        cfg, notices = from_query(eng.Config, {"params": old})
        assert cfg.params == value and not notices
    cfg = eng.Config(params=("muP-GN", "SP"))
    assert from_query(eng.Config, to_query(cfg))[0] == cfg


def test_claims_follow_the_parameterisations_that_ran():
    # a short run of μP-GN alone: the sweep has only its lanes; no transfer claim is made for SP or μP, and the
    # page is told which ones are missing; the linear-study claims stay
    res = eng.run(eng.Config(widths=(32, 64), params=("muP-GN",), steps=20, lr_min=-2, lr_max=1))
    assert list(res.param_names) == ["muP-GN"] and res.final_loss.shape[0] == 1
    labels = [c.label for c in eng.claims(res)]
    assert not any("transfer" in lab or "lr* shift" in lab for lab in labels), labels
    assert len(eng.unmeasured(res)) == 2 and len(labels) == 4
    full = eng.claims(eng.run(eng.Config(widths=(32, 64), params=eng.PARAMS, steps=20, lr_min=-2, lr_max=1)))
    assert len(full) == 8


def _mup_claim(result, label_start):
    return next(c for c in eng.claims(result) if c.label.startswith(label_start))


@pytest.mark.parametrize("broken_layers", ["output", "all"])
def test_transfer_claim_fails_without_the_mup_learning_rate_multipliers(monkeypatch, broken_layers):
    """Negative control for claim 1: keep the μP initialisation but give the μP lanes SP's per-layer learning rates
    (multiplier 1 on the output layer, or on every layer). The wide network's output layer then takes steps M/M₀
    times too large, the best learning rate moves and the one found at width 32 diverges at width 256.
    Measured (μP lanes only, default sweep): intact regret 1.09, shift -1 octave; broken (either variant) regret
    capped at 1e6 (diverged), shift +2 octaves.
    Setting ONLY the input-layer multiplier M/M₀ to 1 does not break transfer here (regret 1.07, shift -1), so it is
    not used as a control (reported, not asserted)."""
    cfg = eng.Config(params=("muP",))
    intact = eng.run(cfg)
    assert _mup_claim(intact, "μP transfer regret").passed and _mup_claim(intact, "|μP lr* shift|").passed

    real = eng.lr_multipliers

    def sp_rates(param_name, width, n_layers):
        mult = real(param_name, width, n_layers)
        if broken_layers == "output":
            mult[-1] = 1.0
        else:
            mult = [1.0] * n_layers
        return mult

    monkeypatch.setattr(eng, "lr_multipliers", sp_rates)
    broken = eng.run(cfg)
    # width 32 is the base width: there every multiplier is 1 anyway, so the small-width sweep is untouched
    np.testing.assert_array_equal(broken.final_loss[0, 0], intact.final_loss[0, 0])
    regret, shift = _mup_claim(broken, "μP transfer regret"), _mup_claim(broken, "|μP lr* shift|")
    assert not regret.passed, regret.describe()
    assert not shift.passed, shift.describe()
    assert not _mup_claim(broken, "loss(width").passed


def test_sp_and_mup_trajectories_are_bit_identical_at_base_width(monkeypatch):
    """Spec check: at M = M₀ SP and μP are the same parameterisation, so every weight and every PC update must agree
    bit for bit along the whole run, not just the final loss. The weights of every lane are recorded at each
    PC step; lanes are ordered (parameterisation, learning rate), SP first."""
    seen = []
    real = eng.pc_update

    def recording(ws, x, y, gamma, kappa, steps, act, dact):
        ups = real(ws, x, y, gamma, kappa, steps, act, dact)
        seen.append((ws[1].shape[1], [w.clone() for w in ws], [u.clone() for u in ups]))
        return ups

    monkeypatch.setattr(eng, "pc_update", recording)
    cfg = eng.Config(widths=(32, 64), steps=20, lr_min=-2, lr_max=1)
    res = eng.run(cfg)
    n_lr = len(res.lrs)
    base = [(ws, ups) for width, ws, ups in seen if width == eng.BASE_WIDTH]
    wide = [(ws, ups) for width, ws, ups in seen if width == 64]
    assert len(base) == len(wide) == res.steps_used
    for ws, ups in base:
        for t in list(ws) + list(ups):
            assert torch.isfinite(t).all()
            assert torch.equal(t[:n_lr], t[n_lr:2 * n_lr])
    # the check is not vacuous: the weights do move, and one width up the two parameterisations part ways
    first, last = base[0][0], base[-1][0]
    assert all(not torch.equal(a, b) for a, b in zip(first, last))
    assert not torch.equal(wide[0][0][2][:n_lr], wide[0][0][2][n_lr:])
    np.testing.assert_array_equal(res.final_loss[0, 0], res.final_loss[1, 0])


def test_reported_shift_and_regret_recomputed_from_the_grid(default_result):
    """Octave shift log₂ lr*(smallest width) − log₂ lr*(largest) and regret L_large(lr*_small) / min L_large, from
    the stored final losses (the spec's definitions)."""
    r = default_result
    for p, name in enumerate(r.param_names):
        fl = r.final_loss[p]
        i_small, i_large = int(np.argmin(fl[0])), int(np.argmin(fl[-1]))
        assert r.lr_star[p, 0] == r.lrs[i_small] and r.lr_star[p, -1] == r.lrs[i_large]
        assert r.metrics[f"{name}_shift"] == pytest.approx(np.log2(r.lrs[i_small]) - np.log2(r.lrs[i_large]))
        regret = min(fl[-1, i_small] / fl[-1, i_large], eng.REGRET_CAP) if np.isfinite(fl[-1, i_small]) \
            else eng.REGRET_CAP
        assert r.metrics[f"{name}_regret"] == pytest.approx(regret)


# ----------------------------------------------------------------------------- added by mutation testing, round 2
class _Stop(Exception):
    pass


def test_curves_and_badge_losses_read_the_lr_tuned_at_the_smallest_width(default_result):
    """The training-curve panel is 'at the learning rate tuned at width M₀': its last point is the final loss of that
    learning rate at every width, and it ends at the last PC step; the 'wider is better' badge compares exactly
    those two final losses (its smallest-width side is the smallest-width minimum)."""
    r = default_result
    assert r.curve_steps[0] == 0 and r.curve_steps[-1] == r.steps_used
    for p, name in enumerate(r.param_names):
        i_small = int(np.argmin(r.final_loss[p, 0]))
        np.testing.assert_array_equal(r.curves[p, :, -1], r.final_loss[p, :, i_small])
        assert r.metrics[f"{name}_loss_small"] == pytest.approx(r.final_loss[p, 0].min(), rel=1e-12)
        assert r.metrics[f"{name}_transfer_loss_large"] == pytest.approx(r.final_loss[p, -1, i_small], rel=1e-12)


def test_losses_of_untrained_networks_recomputed_by_hand(monkeypatch):
    """With every PC update replaced by zero the weights stay at their initialisation, so every shown loss can be
    recomputed from the initial weights: 0.5·Σ_outputs (y − ŷ)², averaged over all 1797 digits for the final loss
    (the sweep plot, its CSV and the badges) and over the fixed 400-digit subset for the intermediate curve points."""
    inits = {}
    real_init = eng.init_weights

    def spy_init(pairs, param_name, width, gen, lanes, dtype=None):
        ws = real_init(pairs, param_name, width, gen, lanes, dtype)
        inits[(param_name, width)] = [w[0].double().clone() for w in ws]
        return ws

    monkeypatch.setattr(eng, "init_weights", spy_init)
    monkeypatch.setattr(eng, "pc_update", lambda ws, *a, **k: [torch.zeros_like(w) for w in ws])
    cfg = eng.Config(widths=(32, 64), steps=20, lr_min=-2, lr_max=1, seed=2)
    res = eng.run(cfg)
    X, Y = (torch.as_tensor(a, dtype=torch.float64) for a in eng.digits_regression())
    sub = np.random.default_rng([cfg.seed, 3]).choice(len(X), 400, replace=False)

    def loss(ws, rows):
        h = X[rows]
        for i, w in enumerate(ws):
            h = (h if i == 0 else torch.tanh(h)) @ w.T
        return float(0.5 * ((Y[rows] - h) ** 2).sum(1).mean())

    for p, name in enumerate(res.param_names):
        for w, width in enumerate(res.widths):
            ws = inits[(name, int(width))]
            np.testing.assert_allclose(res.final_loss[p, w], loss(ws, slice(None)), rtol=1e-5)
            np.testing.assert_allclose(res.curves[p, w, :-1], loss(ws, sub), rtol=1e-5)
    # and the seed reaches the initial weights
    assert not torch.equal(inits[("muP", 64)][0], real_init([(64, 64)], "muP", 64, torch.Generator().manual_seed(64),
                                                             1)[0][0].double())


def _first_pc_calls(monkeypatch, cfg, stop_width):
    calls = []

    def spy(ws, x, y, gamma, kappa, steps, act, dact):
        calls.append((ws[1].shape[1], [w.clone() for w in ws], x.clone(), gamma))
        if ws[1].shape[1] == stop_width:
            raise _Stop
        return [torch.zeros_like(w) for w in ws]

    monkeypatch.setattr(eng, "pc_update", spy)
    with pytest.raises(_Stop):
        eng.run(cfg)
    return calls


def test_seed_reaches_batches_and_initial_weights(monkeypatch):
    cfgs = [eng.Config(widths=(32, 64), steps=20, lr_min=-2, lr_max=1, seed=s) for s in (0, 1)]
    first = [_first_pc_calls(monkeypatch, c, 32)[0] for c in cfgs]
    assert not torch.equal(first[0][2], first[1][2])                     # minibatch of the first step
    assert not any(torch.equal(a, b) for a, b in zip(first[0][1], first[1][1]))   # every initial weight


def test_mup_gn_output_weight_grows_with_width(monkeypatch):
    """μP-GN's γ is γ·M/M₀ per lane (the others keep γ): at width 64 its lanes use 2γ."""
    cfg = eng.Config(widths=(32, 64), steps=20, lr_min=-2, lr_max=1, params=eng.PARAMS, gamma=1.5)
    calls = _first_pc_calls(monkeypatch, cfg, 64)
    n_lr = cfg.lr_max - cfg.lr_min + 1
    gam = calls[-1][3].reshape(-1)
    assert calls[-1][0] == 64
    np.testing.assert_allclose(gam.numpy(), np.repeat([1.5, 1.5, 3.0], n_lr), rtol=1e-6)


def test_linear_study_recomputed_from_the_directions():
    """Experiment B at a non-default condition number and seed, against loops over ``linear_directions`` with the
    schedules written out (γ = 1, M, 100·M), and the first-order / GN cosine of each parameterisation."""
    cfg = eng.Config(cond=3.0, seed=4)
    cos_fo, cos_gn, fo_gn = eng.experiment_b(cfg)
    for p in ("muP", "SP"):
        for sch, gam_of in zip(eng.B_SCHEDULES, (lambda m: 1.0, lambda m: float(m), lambda m: 100.0 * m)):
            ds = [eng.linear_directions(m, gam_of(m), p, 3.0, 4) for m in eng.B_WIDTHS]
            np.testing.assert_allclose(cos_fo[(p, sch)], [eng.cosine(d["pc"], d["fo"]) for d in ds], rtol=1e-12)
            np.testing.assert_allclose(cos_gn[(p, sch)], [eng.cosine(d["pc"], d["gn"]) for d in ds], rtol=1e-12)
            # each parameterisation's panel draws its own first-order / GN cosine (the same at every γ)
            np.testing.assert_allclose(fo_gn[p], [eng.cosine(d["fo"], d["gn"]) for d in ds], rtol=1e-12)
    assert not np.allclose(fo_gn["muP"], fo_gn["SP"])


def test_condition_number_shapes_the_output_layer():
    """The output layer is diag(1 … 1/cond) (log-spaced) times the same Gaussian draw: its rows at cond = c are the
    rows at cond = 1 scaled by that diagonal."""
    base = eng.linear_directions(64, 1.0, "muP", 1.0, seed=5)["W2"]
    for c in (4.0, 50.0):
        W2 = eng.linear_directions(64, 1.0, "muP", c, seed=5)["W2"]
        np.testing.assert_allclose(W2, torch.diag(torch.tensor(np.logspace(0, -np.log10(c), 5))) @ base, rtol=1e-12)


def test_linear_study_badges_recomputed(default_result):
    """The four linear-study badges over widths M ≥ 64 (their labels say so), from the plotted cosines."""
    r, m = default_result, default_result.metrics
    big = r.b_widths >= 64
    assert big.sum() == len(r.b_widths) - 1
    fixed, hundred = eng.B_SCHEDULES[0], eng.B_SCHEDULES[2]
    assert m["b_mup_fixed_cos_fo_min"] == min(r.b_cos_fo[("muP", fixed)][big])
    gn = r.b_cos_gn[("muP", hundred)][big]
    assert m["b_mup_100m_cos_gn_min"] == gn.min()
    assert m["b_mup_100m_cos_gn_spread"] == pytest.approx(gn.max() - gn.min(), abs=1e-15)
    assert m["b_sp_fixed_cos_fo_max"] == max(r.b_cos_fo[("SP", fixed)][big])
    ds = [eng.linear_directions(w, 1.0, "muP", r.config.cond, r.config.seed) for w in eng.B_WIDTHS]
    assert m["b_fo_gn_cos_mean"] == pytest.approx(np.mean([eng.cosine(d["fo"], d["gn"]) for d in ds]), rel=1e-12)


# ----------------------------------------------------------------------------- what the page draws


def _open_page(query=None, seed=()):
    """The page opened with ``query``, and its charts: key -> traces, x and y as float arrays (None when absent)."""
    at = open_page("mup_local_learning", query, seed=seed)
    return at, {key: [{**t, "x": values(t.get("x")), "y": values(t.get("y"))} for t in data]
                for key, data in charts(at).items()}


def test_page_stars_best_lr_and_draws_each_parameterisations_own_numbers(default_result):
    """The default page, read back: in each panel of the sweep every width's star sits on that width's lowest
    finite final loss, the lr* panel gives each parameterisation its own log₂ lr*, and each linear-net panel draws
    its own parameterisation's cosines."""
    res = default_result
    _, charts = _open_page(seed=(("engine.mup_local_learning", eng.Config(), default_result),))
    sweep = charts["transfer"]
    stars = [t for t in sweep if t.get("marker", {}).get("symbol") == "star"]
    want = [(p, w) for p in range(len(res.param_names)) for w in range(len(res.widths))]
    assert len(stars) == len(want)
    log_lr = np.log2(res.lrs)
    for (p, w), star in zip(want, stars):
        row = res.final_loss[p, w]
        k = int(np.nanargmin(np.where(np.isfinite(row), row, np.nan)))
        assert star["x"][0] == pytest.approx(log_lr[k])
        assert star["y"][0] == pytest.approx(row[k])

    names = {"SP": "SP", "muP": "μP", "muP-GN": "μP-GN (γ ∝ M)"}
    lrstar = {t["name"]: t["y"] for t in charts["lrstar"]}
    for i, p in enumerate(res.param_names):
        np.testing.assert_allclose(lrstar[names[p]], np.log2(res.lr_star[i]))

    for pname in ("muP", "SP"):
        lines = {t["name"]: t["y"] for t in charts[f"b-{pname}"]}
        for sch in eng.B_SCHEDULES:
            np.testing.assert_allclose(lines[f"cos(PC, first-order), {sch}"], res.b_cos_fo[(pname, sch)])
            np.testing.assert_allclose(lines[f"cos(PC, Gauss–Newton), {sch}"], res.b_cos_gn[(pname, sch)])
        np.testing.assert_allclose(lines["cos(first-order, GN)"], res.b_cos_fo_gn[pname])


def test_page_without_mup_draws_the_first_chosen_curves():
    """Without μP among the chosen parameterisations the training-curve panel falls back to the first chosen one
    (SP here): its lines are SP's curves, one per width."""
    cfg = eng.Config(params=("SP", "muP-GN"))
    res = eng.run(cfg)
    at, charts = _open_page({"params": "SP,muP-GN"}, seed=(("engine.mup_local_learning", cfg, res),))
    curves = {t["name"]: t["y"] for t in charts["curves"]}
    assert set(curves) == {f"width {w}" for w in res.widths}
    sp = list(res.param_names).index("SP")
    for j, w in enumerate(res.widths):
        c = res.curves[sp, j]
        np.testing.assert_allclose(curves[f"width {w}"], np.where(np.isfinite(c), c, np.nan))   # diverged: gap
    assert any("SP: training loss" in h.value for h in at.get("html"))


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_tanh_pc_inference_reaches_the_energy_minimum_found_by_autograd():
    """Deep tanh net at gamma = 1 (far from the small-gamma backprop limit): many PC inference steps must end
    at the minimiser of E(u) = sum_l 1/2 |u_l - W_l phi(u_{l-1})|^2 + gamma/2 |y - W_L phi(u_{L-1})|^2, found
    here by L-BFGS on E through autograd; the returned updates are then eps_l phi(u_{l-1})^T / B at that
    minimiser. The inference step's tanh' must be taken at the current value state (the energy's gradient),
    not a stale one."""
    torch.manual_seed(1)
    act, dact = eng._tanh()
    dims = [(6, 8), (8, 8), (8, 3)]
    ws = [1.5 * torch.randn(1, fo, fi, dtype=torch.float64) / np.sqrt(fi) for fi, fo in dims]
    x = torch.randn(1, 5, 6, dtype=torch.float64)
    y = 2.0 * torch.randn(1, 5, 3, dtype=torch.float64)
    gamma = 1.0
    ups = eng.pc_update(ws, x, y, gamma, 0.1, 3000, act, dact)

    W = [w[0] for w in ws]
    xs, ys = x[0], y[0]
    h1 = xs @ W[0].T
    u1 = h1.clone().requires_grad_(True)
    u2 = (torch.tanh(h1) @ W[1].T).clone().requires_grad_(True)

    def energy():
        e = 0.5 * ((u1 - xs @ W[0].T) ** 2).sum() + 0.5 * ((u2 - torch.tanh(u1) @ W[1].T) ** 2).sum()
        return e + 0.5 * gamma * ((ys - torch.tanh(u2) @ W[2].T) ** 2).sum()

    opt = torch.optim.LBFGS([u1, u2], lr=1.0, max_iter=500, tolerance_grad=1e-13, tolerance_change=1e-15,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        e = energy()
        e.backward()
        return e

    opt.step(closure)
    with torch.no_grad():
        e1 = u1 - xs @ W[0].T
        e2 = u2 - torch.tanh(u1) @ W[1].T
        e3 = gamma * (ys - torch.tanh(u2) @ W[2].T)
        want = [e1.T @ xs / 5, e2.T @ torch.tanh(u1) / 5, e3.T @ torch.tanh(u2) / 5]
        # the minimiser is far from the feed-forward state, so this is not the small-gamma regime
        assert float(e2.abs().max()) > 0.05
    for got, ref in zip(ups, want):
        np.testing.assert_allclose(got[0].numpy(), ref.numpy(), atol=1e-7)


def test_pc_inference_steps_by_hand_all_layers_in_parallel():
    """T = 1, 2, 3 inference steps of a 3-layer tanh net at gamma = 2, kappa = 0.3, written out here: start
    from the feed-forward values; each step computes every error from the current values, then moves every
    hidden value at once, u_l <- u_l - kappa (eps_l - tanh'(u_l) * W_{l+1}^T eps_{l+1}); the weight updates
    use the errors of the final values, eps_l phi(u_{l-1})^T / B. After one step the error has not yet reached
    layer 1, so W_1's update is 0."""
    torch.manual_seed(2)
    act, dact = eng._tanh()
    dims = [(5, 7), (7, 6), (6, 3)]
    W = [torch.randn(fo, fi, dtype=torch.float64) / np.sqrt(fi) for fi, fo in dims]
    x = torch.randn(4, 5, dtype=torch.float64)
    y = torch.randn(4, 3, dtype=torch.float64)
    gamma, kappa, B = 2.0, 0.3, 4

    def by_hand(T):
        u1 = x @ W[0].T
        u2 = torch.tanh(u1) @ W[1].T

        def errs(u1, u2):
            return (u1 - x @ W[0].T, u2 - torch.tanh(u1) @ W[1].T, gamma * (y - torch.tanh(u2) @ W[2].T))

        for _ in range(T):
            e1, e2, e3 = errs(u1, u2)
            u1, u2 = (u1 - kappa * (e1 - (1 - torch.tanh(u1) ** 2) * (e2 @ W[1])),
                      u2 - kappa * (e2 - (1 - torch.tanh(u2) ** 2) * (e3 @ W[2])))
        e1, e2, e3 = errs(u1, u2)
        return [e1.T @ x / B, e2.T @ torch.tanh(u1) / B, e3.T @ torch.tanh(u2) / B]

    got = {}
    for T in (1, 2, 3):
        got[T] = eng.pc_update([w[None] for w in W], x[None], y[None], gamma, kappa, T, act, dact)
        for g, want in zip(got[T], by_hand(T)):
            np.testing.assert_allclose(g[0].numpy(), want.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"T = {T}")
    assert float(got[1][0].abs().max()) == 0.0 and float(got[2][0].abs().max()) > 1e-4
