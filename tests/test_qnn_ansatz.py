"""QNN ansatz distinguishability: claims at the default config and independent checks."""

import math

import numpy as np
import pytest
import torch
from scipy.linalg import expm
from scipy.optimize import minimize

import engine.qnn_ansatz as eng
from tests.pagetext import charts, open_page, values

X = np.array([[0, 1], [1, 0]], dtype=complex)
Y = np.array([[0, -1j], [1j, 0]])
Z = np.diag([1.0, -1.0]).astype(complex)


@pytest.fixture(scope="module")
def default_result():
    return eng.run(eng.Config())


def test_claims_pass_at_default(default_result):
    for c in eng.claims(default_result):
        assert c.passed, c.describe()


def _on(op, q, n):
    mats = [op if k == q else np.eye(2) for k in range(n)]
    out = mats[0]
    for m in mats[1:]:
        out = np.kron(out, m)
    return out


def _reference_hea(theta, n, layers, entangler):
    """The same circuit from matrix exponentials and Kronecker products (qubit 0 = leftmost factor)."""
    d = 2**n
    u = np.eye(d, dtype=complex)
    p0 = np.diag([1.0, 0.0])
    p1 = np.diag([0.0, 1.0])
    for layer in range(layers):
        base = 2 * n * layer
        for q in range(n):
            u = expm(-0.5j * theta[base + q] * _on(Y, q, n)) @ u
        for q in range(n):
            u = expm(-0.5j * theta[base + n + q] * _on(Z, q, n)) @ u
        for q in range(n - 1):
            second = Z if entangler == "cz" else X
            gate = _on(p0, q, n) + _on(p1, q, n) @ _on(second, q + 1, n)
            u = gate @ u
    return u


@pytest.mark.parametrize("entangler", ["cz", "cnot"])
def test_simulator_matches_expm_kron_reference(entangler):
    rng = np.random.default_rng(1)
    n, layers = 3, 2
    th = rng.uniform(0, 2 * np.pi, (4, 2 * n * layers))
    ours = eng.hea_unitary(torch.tensor(th), n, layers, entangler).numpy()
    for i in range(4):
        ref = _reference_hea(th[i], n, layers, entangler)
        # equal up to a global phase
        phase = np.vdot(ref.ravel(), ours[i].ravel())
        phase /= abs(phase)
        np.testing.assert_allclose(ours[i], ref * phase, atol=1e-10)
        np.testing.assert_allclose(ours[i].conj().T @ ours[i], np.eye(2**n), atol=1e-10)


def test_single_rotation_distance_is_sin_half_delta():
    a = torch.tensor([0.3, 1.0, 2.0, 5.0], dtype=torch.float64)
    d = torch.tensor([0.01, -0.5, 1.5, 3.0], dtype=torch.float64)
    c = eng.unitary_channel_distance(eng.rot("y", a), eng.rot("y", a + d))
    np.testing.assert_allclose(c, np.sin(np.abs(d.numpy()) / 2), atol=1e-12)


def test_arc_straddling_pi():
    # phases ±(π − 0.1): the smallest arc is 0.2 wide across π, not 2π − 0.2
    c = eng.arc_distance(np.array([[np.pi - 0.1, -(np.pi - 0.1) % (2 * np.pi)]]))
    assert c[0] == pytest.approx(np.sin(0.1))


def _numerical_range_distance(w):
    """sqrt(1 − min_ρ |tr ρW|²): minimise |Σ p_k λ_k| over the probability simplex (normal W)."""
    lam = np.linalg.eigvals(w)
    k = len(lam)

    def f(p):
        z = p @ lam
        return float(abs(z) ** 2)

    best = np.inf
    rng = np.random.default_rng(0)
    for _ in range(20):
        p0 = rng.dirichlet(np.ones(k))
        r = minimize(f, p0, method="SLSQP", bounds=[(0, 1)] * k,
                     constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1}], options={"ftol": 1e-14})
        best = min(best, r.fun)
    return math.sqrt(max(0.0, 1 - best))


@pytest.mark.parametrize("d", [2, 4])
def test_closed_form_vs_numerical_range_and_pure_state_lower_bound(d):
    rng = np.random.default_rng(d)
    us = eng.haar_unitaries(d, 6, rng)
    vs = eng.haar_unitaries(d, 6, rng)
    # also near-identity pairs, where the distance is small
    close = np.array([u @ expm(1j * 0.05 * (h + h.conj().T)) for u, h in
                      zip(us, rng.standard_normal((6, d, d)) + 1j * rng.standard_normal((6, d, d)))])
    for u, v in list(zip(us, vs)) + list(zip(us, close)):
        c = eng.distance_np(u[None], v[None])[0]
        w = u.conj().T @ v
        assert c == pytest.approx(_numerical_range_distance(w), abs=1e-5)
        psi = rng.standard_normal((200, d)) + 1j * rng.standard_normal((200, d))
        psi /= np.linalg.norm(psi, axis=1, keepdims=True)
        overlap = np.abs(np.einsum("si,ij,sj->s", psi.conj(), w, psi))
        assert np.all(np.sqrt(np.clip(1 - overlap**2, 0, 1)) <= c + 1e-9)


def test_parameter_shift_equals_autograd():
    n, layers = 3, 2
    th = torch.rand(5, 2 * n * layers, dtype=torch.float64) * 2 * math.pi
    ps = eng.parameter_shift_grad(th, n, layers)
    t = th.clone().requires_grad_(True)
    eng.hea_cost(t, n, layers).sum().backward()
    np.testing.assert_allclose(ps.numpy(), t.grad.numpy(), atol=1e-10)


def test_frame_potentials():
    rng = np.random.default_rng(0)
    assert eng.frame_potential_samples(eng.haar_unitaries(2, 2000, rng)) == pytest.approx(2.0, abs=0.05)
    g1 = eng.clifford_group(1)
    assert len(g1) == 24 and eng.frame_potential_group(g1) == pytest.approx(2.0, abs=1e-12)
    # keeping i == j pairs biases the sampled estimate upward by about d**4 / S
    us = eng.haar_unitaries(2, 50, rng)
    flat = us.reshape(50, -1)
    biased = float(np.mean(np.abs(flat.conj() @ flat.T) ** 4))
    assert biased > eng.frame_potential_samples(us) + 0.2


def test_two_qubit_clifford_group():
    g = eng.clifford_group(2)
    assert len(g) == 11520
    assert eng.frame_potential_group(g) == pytest.approx(2.0, abs=1e-9)
    d = eng.distance_np(g, np.broadcast_to(eng.t_gate(2), g.shape)).min()
    assert d == pytest.approx(math.sin(math.pi / 8), abs=1e-9)


def test_wrong_rotation_convention_breaks_the_bound():
    """exp(−iθP) instead of exp(−iθP/2) doubles the distance and violates c ≤ ½Σ|δ|."""
    n, layers = 2, 1
    th = torch.rand(50, 4, dtype=torch.float64) * 2 * math.pi
    de = (torch.rand(50, 4, dtype=torch.float64) * 2 - 1) * 0.05
    c_wrong = eng.unitary_channel_distance(eng.hea_unitary(2 * th, n, layers),
                                           eng.hea_unitary(2 * (th + de), n, layers))
    b1, _ = eng.bounds(de.numpy())
    assert (c_wrong / b1).max() > 1.0


# ----------------------------------------------------------------------------- Helstrom probability

def _state_helstrom(rho, sigma):
    """Equal-prior Helstrom success probability of two density matrices: ½ + ¼ Σ|eig(ρ − σ)|."""
    return 0.5 + 0.25 * np.abs(np.linalg.eigvalsh(rho - sigma)).sum()


def _best_input_helstrom(u, v, restarts=6, seed=0):
    """Channel Helstrom probability found by brute force: maximise the state value of the two outputs over
    pure inputs on system ⊗ ancilla (ancilla as large as the system), by local search from random starts."""
    d = len(u)
    uu, vv = np.kron(u, np.eye(d)), np.kron(v, np.eye(d))

    def neg(x):
        psi = x[:d * d] + 1j * x[d * d:]
        psi = psi / np.linalg.norm(psi)
        a, b = uu @ psi, vv @ psi
        return -_state_helstrom(np.outer(a, a.conj()), np.outer(b, b.conj()))

    rng = np.random.default_rng(seed)
    return max(-minimize(neg, rng.standard_normal(2 * d * d), method="BFGS").fun for _ in range(restarts))


def test_helstrom_closed_forms():
    # the reference formula itself: identical states give a coin flip, orthogonal pure states certainty
    zero, one = np.diag([1.0, 0.0]), np.diag([0.0, 1.0])
    mixed = np.eye(3) / 3
    assert _state_helstrom(zero, zero) == pytest.approx(0.5)
    assert _state_helstrom(mixed, mixed) == pytest.approx(0.5)
    assert _state_helstrom(zero, one) == pytest.approx(1.0)
    # the engine, on channels: the same unitary twice, then I vs X (|0⟩ goes to orthogonal outputs)
    rng = np.random.default_rng(3)
    u = eng.haar_unitaries(4, 1, rng)
    assert eng.helstrom_probability(eng.distance_np(u, u))[0] == pytest.approx(0.5, abs=1e-12)
    assert eng.helstrom_probability(eng.distance_np(np.eye(2)[None], X[None]))[0] == pytest.approx(1.0)
    # one rotation: ½(1 + sin(|δ|/2))
    a = torch.tensor([0.4, 2.5], dtype=torch.float64)
    d = torch.tensor([0.3, -1.2], dtype=torch.float64)
    p = eng.helstrom_probability(eng.unitary_channel_distance(eng.rot("y", a), eng.rot("y", a + d)))
    np.testing.assert_allclose(p, 0.5 * (1 + np.sin(np.abs(d.numpy()) / 2)), atol=1e-12)


@pytest.mark.parametrize("d", [2, 4])
def test_helstrom_matches_best_input_states(d):
    """The engine's ½(1 + c) vs the largest ½ + ¼‖ρ − σ‖₁ over output pairs (U⊗I)|ψ⟩, (V⊗I)|ψ⟩ found by search;
    random inputs never beat it."""
    rng = np.random.default_rng(10 + d)
    us, vs = eng.haar_unitaries(d, 3, rng), eng.haar_unitaries(d, 3, rng)
    near = np.array([u @ expm(0.2j * (h + h.conj().T)) for u, h in
                     zip(us, rng.standard_normal((3, d, d)) + 1j * rng.standard_normal((3, d, d)))])
    for u, v in list(zip(us, vs)) + list(zip(us, near)):
        ours = float(eng.helstrom_probability(eng.distance_np(u[None], v[None]))[0])
        assert ours == pytest.approx(_best_input_helstrom(u, v), abs=1e-6)
        psi = rng.standard_normal((100, d * d)) + 1j * rng.standard_normal((100, d * d))
        psi /= np.linalg.norm(psi, axis=1, keepdims=True)
        a, b = psi @ np.kron(u, np.eye(d)).T, psi @ np.kron(v, np.eye(d)).T
        for x, y in zip(a, b):
            assert _state_helstrom(np.outer(x, x.conj()), np.outer(y, y.conj())) <= ours + 1e-9


def test_result_carries_helstrom_per_sample(default_result):
    r = default_result
    np.testing.assert_allclose(r.helstrom, 0.5 * (1 + r.c), atol=1e-15)
    assert r.helstrom.shape == r.c.shape and np.all((r.helstrom >= 0.5) & (r.helstrom <= 1.0))
    assert r.metrics["median_helstrom"] == pytest.approx(float(np.median(r.helstrom)))


@pytest.mark.parametrize("entangler", ["cz", "cnot"])
def test_cost_is_z_on_qubit_zero_of_the_reference_circuit(entangler):
    n, layers = 3, 2
    th = np.random.default_rng(3).uniform(0, 2 * np.pi, (4, 2 * n * layers))
    got = eng.hea_cost(torch.tensor(th), n, layers, entangler).numpy()
    z0 = _on(Z, 0, n)
    for i in range(4):
        psi = _reference_hea(th[i], n, layers, entangler)[:, 0]
        assert got[i] == pytest.approx(float(np.real(psi.conj() @ z0 @ psi)), abs=1e-10)


def test_one_perturbed_angle_meets_the_sine_bound_exactly():
    """Moving a single angle by δ is one rotation conjugated by the rest of the circuit, so the channel distance
    is sin(|δ|/2): B₂ is tight there, B₁ = |δ|/2 above it."""
    n, layers = 3, 2
    p = 2 * n * layers
    rng = np.random.default_rng(4)
    th = torch.tensor(rng.uniform(0, 2 * np.pi, (6, p)))
    delta = np.zeros((6, p))
    delta[np.arange(6), rng.integers(0, p, 6)] = [0.05, -0.3, 1.0, 2.5, -3.0, 0.7]
    c = eng.unitary_channel_distance(eng.hea_unitary(th, n, layers), eng.hea_unitary(th + torch.tensor(delta), n, layers))
    b1, b2 = eng.bounds(delta)
    np.testing.assert_allclose(c, b2, atol=1e-10)
    np.testing.assert_allclose(b2, np.sin(np.abs(delta).sum(1) / 2), atol=1e-12)
    np.testing.assert_allclose(b1, np.abs(delta).sum(1) / 2, atol=1e-12)
    wide = rng.uniform(-3, 3, (50, p))
    assert np.all(eng.bounds(wide)[1] <= eng.bounds(wide)[0] + 1e-12)


def test_frame_potential_of_copies_of_one_unitary_is_d_to_the_fourth():
    u = eng.haar_unitaries(2, 1, np.random.default_rng(5))
    assert eng.frame_potential_samples(np.repeat(u, 6, axis=0)) == pytest.approx(16.0, abs=1e-9)


def test_gradient_sweep_reads_eta_not_epsilon():
    base = eng.run(eng.Config(perturbation="uniform"))
    other_eps = eng.run(eng.Config(perturbation="uniform", epsilon=eng.STEP_VALUES[-1]))
    np.testing.assert_array_equal(base.sweep_c, other_eps.sweep_c)
    other_eta = eng.run(eng.Config(perturbation="uniform", eta=eng.STEP_VALUES[-1]))
    assert not np.array_equal(base.sweep_c, other_eta.sweep_c)


# ----------------------------------------------------------------------------- what the page shows, rebuilt

def _arc_distance_brute(w):
    """Closed-form channel distance by trying every eigenphase as the start of the covering arc."""
    ph = np.angle(np.linalg.eigvals(w))
    widths = [np.max((ph - a) % (2 * np.pi)) for a in ph]
    arc = min(widths)
    return math.sin(arc / 2) if arc < math.pi else 1.0


def _ref_cost(theta, n, layers, entangler):
    psi = _reference_hea(theta, n, layers, entangler)[:, 0]
    return float(np.real(psi.conj() @ _on(Z, 0, n) @ psi))


def _euler_ref(a, b, c):
    ry = np.array([[np.cos(b / 2), -np.sin(b / 2)], [np.sin(b / 2), np.cos(b / 2)]])
    return np.diag(np.exp([-0.5j * a, 0.5j * a])) @ ry @ np.diag(np.exp([-0.5j * c, 0.5j * c]))


def _pair_frame_potential(us):
    """Mean of |tr U_i† U_j|⁴ over ordered pairs i ≠ j, by an explicit trace of the products."""
    tr = np.einsum("iba,jba->ij", us.conj(), us)
    f = np.abs(tr) ** 4
    s = len(us)
    return float((f.sum() - np.trace(f)) / (s * (s - 1)))


SMALL = dict(n_qubits=2, layers=2, samples=20, seed=3)   # one layer: CZ/CNOT cancel in tr U†V


@pytest.fixture(scope="module")
def small_uniform():
    return eng.run(eng.Config(**SMALL, epsilon=0.2, eta=0.5, design_n=2, entangler="cnot"))


def _main_draws(cfg):
    """The main panel's θ and uniform δ, drawn again from a torch generator seeded like the engine's."""
    gen = torch.Generator().manual_seed(cfg.seed)
    p = 2 * cfg.n_qubits * cfg.layers
    theta = torch.rand(cfg.samples, p, generator=gen, dtype=torch.float64) * (2 * math.pi)
    delta = None
    if cfg.perturbation == "uniform":
        delta = (torch.rand(cfg.samples, p, generator=gen, dtype=torch.float64) * 2 - 1) * cfg.epsilon
    return gen, theta.numpy(), None if delta is None else delta.numpy()


def test_main_panel_rebuilt_from_the_seed_with_reference_circuit(small_uniform):
    """Scatter and CSV columns: δ uniform in [−ε, ε] for this seed (ε, not η), the two bounds, and c from the
    expm/Kronecker circuit with a brute-force arc."""
    r = small_uniform
    cfg = r.config
    _, theta, delta = _main_draws(cfg)
    assert np.abs(delta).max() <= cfg.epsilon and (delta < 0).any() and (delta > 0).any()
    np.testing.assert_allclose(r.b1, 0.5 * np.abs(delta).sum(1), atol=1e-12)
    np.testing.assert_allclose(r.b2, np.sin(np.abs(delta) / 2).sum(1), atol=1e-12)
    for i in range(cfg.samples):
        u = _reference_hea(theta[i], 2, cfg.layers, "cnot")
        v = _reference_hea(theta[i] + delta[i], 2, cfg.layers, "cnot")
        assert r.c[i] == pytest.approx(_arc_distance_brute(u.conj().T @ v), abs=1e-9)
    assert r.n_params == 2 * cfg.n_qubits * cfg.layers == theta.shape[1]


def test_gradient_update_is_a_descent_step_of_size_eta():
    """Gradient mode: δ = −η∇C with ∇C from central finite differences of the reference circuit's cost. Two layers:
    with one, C depends on a single angle and c would not see the sign of the step."""
    cfg = eng.Config(**SMALL, perturbation="gradient", eta=0.2, epsilon=0.001, entangler="cz")
    r = eng.run(cfg)
    _, theta, _ = _main_draws(cfg)
    h = 1e-6
    for i in range(cfg.samples):
        g = np.zeros(theta.shape[1])
        for j in range(len(g)):
            e = np.zeros(len(g))
            e[j] = h
            g[j] = (_ref_cost(theta[i] + e, 2, 2, "cz") - _ref_cost(theta[i] - e, 2, 2, "cz")) / (2 * h)
        delta = -cfg.eta * g
        assert r.b1[i] == pytest.approx(0.5 * np.abs(delta).sum(), abs=1e-7)
        assert np.count_nonzero(np.abs(g) > 1e-6) >= 2
        u, v = _reference_hea(theta[i], 2, 2, "cz"), _reference_hea(theta[i] + delta, 2, 2, "cz")
        assert r.c[i] == pytest.approx(_arc_distance_brute(u.conj().T @ v), abs=1e-6)


def test_sweep_is_a_gradient_step_on_four_qubits_and_metrics_reduce_it(small_uniform):
    """The sweep plot and CSV: P = 2·4·L, each row a gradient step of size η (also when the main panel is
    uniform), continuing the engine's generator; then every sweep/main-panel metric reduced again by hand."""
    r = small_uniform
    cfg = r.config
    gen, _, _ = _main_draws(cfg)
    np.testing.assert_array_equal(r.sweep_p, [2 * 4 * lay for lay in eng.SWEEP_LAYERS])
    for row, lay in enumerate(eng.SWEEP_LAYERS):
        p = 8 * lay
        th = torch.rand(eng.SWEEP_SAMPLES, p, generator=gen, dtype=torch.float64) * (2 * math.pi)
        if lay > 2:
            continue          # the generator still has to advance; the reference check stays on small circuits
        de = -cfg.eta * eng.parameter_shift_grad(th, 4, lay, cfg.entangler)
        u = eng.hea_unitary(th, 4, lay, cfg.entangler).numpy()
        v = eng.hea_unitary(th + de, 4, lay, cfg.entangler).numpy()
        want = [_arc_distance_brute(a.conj().T @ b) for a, b in zip(u, v)]
        np.testing.assert_allclose(r.sweep_c[row], want, atol=1e-9)
    m = r.metrics
    med = [float(np.median(row)) for row in r.sweep_c]
    assert m["sweep_median_first"] == pytest.approx(med[0])
    assert m["sweep_min_increment"] == pytest.approx(min(b - a for a, b in zip(med, med[1:])))
    cvs = [float(np.std(row) / np.mean(row)) for row in r.sweep_c]
    assert m["sweep_min_cv"] == pytest.approx(min(cvs))
    assert m["median_ratio_b1"] == pytest.approx(float(np.median(r.c / r.b1)))
    assert m["max_ratio_b1"] == pytest.approx(float(np.max(r.c / r.b1)))
    assert m["max_ratio_b2"] == pytest.approx(float(np.max(r.c / r.b2)))
    assert m["median_c"] == pytest.approx(float(np.median(r.c)))


def test_design_panel_rebuilt_for_two_qubits(small_uniform):
    """Bars and CSV of the 2-design panel at n = 2: Euler and Haar ensembles redrawn from the seed, the HEA
    ensemble from the torch generator after the sweep, all with the chosen entangler; frame potentials by an
    explicit pair average; the Clifford→T bar is the closest element, sin(π/8)."""
    r = small_uniform
    cfg = r.config
    rng = np.random.default_rng(cfg.seed)
    ang = rng.uniform(0, 2 * np.pi, (eng.DESIGN_SAMPLES, 3))
    euler = np.array([_euler_ref(*a) for a in ang])
    haar = eng.haar_unitaries(4, eng.DESIGN_SAMPLES, rng)
    assert haar.shape[1] == 2 ** cfg.design_n
    gen, _, _ = _main_draws(cfg)
    for lay in eng.SWEEP_LAYERS:
        torch.rand(eng.SWEEP_SAMPLES, 8 * lay, generator=gen, dtype=torch.float64)
    th = (torch.rand(eng.DESIGN_SAMPLES, 4 * cfg.layers, generator=gen, dtype=torch.float64) * 2 * math.pi).numpy()
    hea = np.array([_reference_hea(t, 2, cfg.layers, cfg.entangler) for t in th[:400]])
    assert len(r.design_names) == 4 and r.clifford_size == 11520
    fp = r.frame_potential
    assert fp[0] == pytest.approx(2.0, abs=1e-9)
    assert fp[1] == pytest.approx(_pair_frame_potential(euler), rel=1e-9)
    assert fp[2] == pytest.approx(_pair_frame_potential(haar), rel=1e-9)
    # the HEA value over all 2000 from the engine's simulator, checked on the first 400 against the reference
    ours = eng.hea_unitary(torch.tensor(th), 2, cfg.layers, cfg.entangler).numpy()
    for a, b in zip(ours[:400], hea):
        ph = np.vdot(b.ravel(), a.ravel())
        np.testing.assert_allclose(a, b * ph / abs(ph), atol=1e-10)
    assert fp[3] == pytest.approx(_pair_frame_potential(ours), rel=1e-9)
    assert r.t_distance[0] == pytest.approx(math.sin(math.pi / 8), abs=1e-9)
    assert r.t_distance[1] == pytest.approx(0.0, abs=1e-9)
    assert np.isnan(r.t_distance[2:]).all()
    m = r.metrics
    assert (m["f_clifford"], m["f_euler"], m["f_haar"]) == (fp[0], fp[1], fp[2])
    assert m["clifford_t_distance"] == r.t_distance[0]


def test_one_qubit_clifford_to_t_bar_is_sin_pi_over_8(default_result):
    assert default_result.clifford_size == 24
    assert default_result.t_distance[0] == pytest.approx(math.sin(math.pi / 8), abs=1e-12)


# ----------------------------------------------------------------------------- what the page draws


def test_page_pairs_each_bound_and_probability_with_its_own_sample(default_result):
    """The default page, read back: the B₂ markers sit at the per-gate bounds and the B₁ markers at the paper's
    bound (every marker at or left of the diagonal c = bound), the Helstrom line is ½(1 + c) point by point with c
    ascending, the sweep's middle line is each parameter count's median distance, and each T-gate bar is its own
    ensemble's distance."""

    res = default_result
    at = open_page("qnn_ansatz", seed=(("engine.qnn_ansatz", eng.Config(), default_result),))
    figs = charts(at)

    sc = {t["name"].split(" =")[0]: (values(t["x"]), values(t["y"])) for t in figs["scatter"]}
    x1, y1 = sc["vs paper bound B₁"]
    x2, y2 = sc["vs per-gate bound B₂"]
    np.testing.assert_allclose(x1, res.b1)
    np.testing.assert_allclose(x2, res.b2)
    assert np.all(y2 <= x2 + 1e-9) and np.all(x2 <= x1 + 1e-9) and np.any(x2 < x1 - 1e-6)

    line = next(t for t in figs["hist"] if t["type"] == "scatter")
    xc, yh = values(line["x"]), values(line["y"])
    assert np.all(np.diff(xc) >= 0)
    np.testing.assert_allclose(np.sort(xc), np.sort(res.c))
    np.testing.assert_allclose(yh, 0.5 * (1 + xc), atol=1e-6)

    mid = next(t for t in figs["sweep"] if t.get("name") == "median c")
    np.testing.assert_allclose(values(mid["x"]), res.sweep_p)
    np.testing.assert_allclose(values(mid["y"]), [np.median(row) for row in res.sweep_c])

    # frame potential: an exact 2-design (the Clifford group) scores the Haar value 2; the bars keep their names
    fp = dict(zip(figs["frame"][0]["x"], values(figs["frame"][0]["y"])))
    assert set(fp) == set(res.design_names)
    assert fp[next(n for n in fp if n.startswith("Clifford"))] == pytest.approx(2.0, abs=1e-9)
    for n, v in zip(res.design_names, res.frame_potential):
        assert fp[n] == pytest.approx(v)

    bar = figs["tdist"][0]
    names = list(res.design_names)
    for n, v in zip(bar["x"], values(bar["y"])):
        assert v == pytest.approx(res.t_distance[names.index(n)])
    assert len(bar["x"]) == int(np.sum(~np.isnan(res.t_distance)))


def test_b2_shortfall_stays_inside_the_sine_series_bound(default_result, small_uniform):
    """B₂ = Σ sin(|δ|/2) falls below B₁ = Σ |δ|/2 by at most the series remainder: sin(x)/x ≥ 1 − x²/6, so with every
    |δ_j| ≤ ε the relative shortfall is at most ε²/24 (and never negative). The page's caption quotes this metric."""
    for res in (default_result, small_uniform):
        eps = res.config.epsilon
        short = res.metrics["max_b2_shortfall"]
        assert short == pytest.approx(float(np.max(1 - res.b2 / res.b1)))
        assert 0 <= short <= eps ** 2 / 24 + 1e-12
    assert small_uniform.metrics["max_b2_shortfall"] > 10 * default_result.metrics["max_b2_shortfall"]


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def _euler_matrix(a, b, c):
    """RZ(a)·RY(b)·RZ(c) from the 2 x 2 matrices, written out here."""
    ry = np.array([[np.cos(b / 2), -np.sin(b / 2)], [np.sin(b / 2), np.cos(b / 2)]])
    return np.diag(np.exp([-0.5j * a, 0.5j * a])) @ ry @ np.diag(np.exp([-0.5j * c, 0.5j * c]))


def _equal_up_to_phase(u, v, atol=1e-9):
    ph = np.vdot(v.ravel(), u.ravel())
    return np.allclose(u, v * ph / abs(ph), atol=atol)


def test_zyz_angles_rebuild_random_unitaries():
    """For Haar-random one-qubit unitaries and for T, RZ(a)RY(b)RZ(c) at the returned angles is the input up
    to a global phase, with the circuit built from explicit matrices (not the engine's euler_unitaries)."""
    us = list(eng.haar_unitaries(2, 40, np.random.default_rng(21))) + [eng.t_gate(1)]
    for u in us:
        a, b, c = eng.zyz_angles(u)
        assert _equal_up_to_phase(_euler_matrix(a, b, c), u)
        assert eng.distance_np(eng.euler_unitaries(np.array([[a, b, c]])), u[None])[0] < 1e-9


def test_euler_t_badge_measures_the_euler_circuit(monkeypatch):
    """The '…reaches T exactly' badge must be able to fail: with a decomposition that returns the wrong
    angles (all zero: the Euler circuit is the identity) the reported distance is the identity's distance to
    T, sin(π/8) by the closed form (eigenphases 0 and π/4), and the badge fails."""
    cfg = eng.Config(n_qubits=1, layers=1, samples=20)
    good = eng.run(cfg)
    assert good.metrics["euler_t_distance"] == pytest.approx(0.0, abs=1e-9)
    monkeypatch.setattr(eng, "zyz_angles", lambda u: np.zeros(3))
    bad = eng.run(cfg)
    assert bad.metrics["euler_t_distance"] == pytest.approx(math.sin(math.pi / 8), abs=1e-9)
    badge = next(c for c in eng.claims(bad) if c.label.startswith("distance Euler"))
    assert not badge.passed
