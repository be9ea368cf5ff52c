"""Local distinguishability of QNN ansatzes vs closeness to a unitary 2-design.

A small statevector simulator in torch (complex128) builds the full unitary U(θ)
of a Hardware Efficient Ansatz (RY, RZ on every qubit, then a CZ or CNOT chain,
L layers). For a parameter update δ the normalised diamond distance between the
unitary channels U(θ) and U(θ+δ) has a closed form: with W = U(θ)†U(θ+δ) and Θ
the width of the smallest arc holding all eigenvalues of W, c = sin(Θ/2) if
Θ < π, else 1. It is compared with the bound ½Σ|δ_j| (and the tighter
Σ sin(|δ_j|/2)). Separately, the frame potential F² = E|tr U†V|⁴ (Haar value 2)
of the Clifford group, a one-qubit Euler ansatz and Haar unitaries is set next to
what each ensemble can express (distance to the T gate).

Wire order: qubit 0 is the most significant bit of a basis index.
Pure compute: no streamlit import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.core import Choice, InputError, Int, param, seed_everything
from engine.core.claims import Claim
from engine.core.progress import ProgressSpan, report

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

STEP_VALUES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
SWEEP_N = 4
SWEEP_LAYERS = (1, 2, 4, 8)
SWEEP_SAMPLES = 30
DESIGN_SAMPLES = 2000
T_PHASE = math.pi / 4


@dataclass(frozen=True)
class Config:
    n_qubits: int = param(4, Int(1, 6, "Qubits n", help="the full 2ⁿ×2ⁿ unitary is simulated; at most 6, since 7 "
                                                      "qubits with 500 samples took 38 s of CPU when measured "
                                                      "(2026-12-05), over the 30 s budget"))
    layers: int = param(2, Int(1, 8, "HEA layers L", help="number of parameters P = 2·n·L"))
    perturbation: str = param("uniform", Choice(("uniform", "gradient"), "Parameter update δ", widget="radio",
                                                labels=("uniform in [−ε, ε]", "gradient step −η∇C")))
    epsilon: float = param(0.05, Choice(STEP_VALUES, "ε (uniform update size)", widget="select_slider"))
    eta: float = param(0.1, Choice(STEP_VALUES, "η (gradient step size)", widget="select_slider",
                                   help="also used by the parameter-count sweep"))
    samples: int = param(200, Int(20, 500, "Parameter samples θ", step=10))
    entangler: str = param("cz", Choice(("cz", "cnot"), "Entangler", widget="radio"))
    design_n: int = param(1, Choice((1, 2), "Qubits for the 2-design panel", widget="radio",
                                    help="n = 2 enumerates the 11,520-element Clifford group (under a second)"))
    seed: int = param(0, Int(0, 9, "Seed"))


# largest widget setting (most qubits, layers and samples): 6 s CPU, measured 2026-12-05 (7 qubits: 38 s)
HEAVY_CONFIG = Config(n_qubits=6, layers=8, samples=500, design_n=2, perturbation="gradient",
                      entangler="cnot")


@dataclass
class Result:
    config: Config
    n_params: int
    c: np.ndarray              # (S,) normalised diamond distance after the update
    b1: np.ndarray             # (S,) paper bound ½Σ|δ|
    b2: np.ndarray             # (S,) per-gate bound Σ sin(|δ|/2)
    helstrom: np.ndarray       # (S,) best single-shot success probability of telling U(θ) from U(θ+δ)
    sweep_p: np.ndarray        # parameter counts of the gradient sweep (n = 4)
    sweep_c: np.ndarray        # (len(P), SWEEP_SAMPLES) distances after a gradient step
    design_names: list
    frame_potential: np.ndarray
    t_distance: np.ndarray     # distance of each ensemble to the T gate (nan: not computed)
    clifford_size: int
    metrics: dict[str, float] = field(default_factory=dict)


# ----------------------------------------------------------------------------- simulator

def rot(axis: str, theta):
    """exp(−iθP/2) for P in {X, Y, Z}; theta: tensor (S,) -> (S, 2, 2) complex128."""
    import torch

    theta = theta.to(torch.complex128)
    c, s = torch.cos(theta / 2), torch.sin(theta / 2)
    z = torch.zeros_like(c)
    if axis == "x":
        rows = [c, -1j * s, -1j * s, c]
    elif axis == "y":
        rows = [c, -s, s, c]
    elif axis == "z":
        rows = [torch.exp(-0.5j * theta), z, z, torch.exp(0.5j * theta)]
    else:
        raise ValueError(axis)
    return torch.stack(rows, dim=-1).reshape(-1, 2, 2)


def apply_1q(psi, gate, q: int, n: int):
    """psi: (S, 2**n, D); gate: (S, 2, 2) acting on qubit q."""
    import torch

    s, dim, d = psi.shape
    v = psi.reshape(s, 2**q, 2, (2 ** (n - q - 1)) * d)
    v0, v1 = v[:, :, 0], v[:, :, 1]
    g = gate[:, :, :, None, None]                 # broadcast over (l, r): elementwise, no bmm
    out = torch.stack([g[:, 0, 0] * v0 + g[:, 0, 1] * v1, g[:, 1, 0] * v0 + g[:, 1, 1] * v1], dim=2)
    return out.reshape(s, dim, d)


def apply_cz(psi, q: int, n: int):
    s, dim, d = psi.shape
    v = psi.reshape(s, 2**q, 2, 2, (2 ** (n - q - 2)) * d).clone()
    v[:, :, 1, 1, :] *= -1
    return v.reshape(s, dim, d)


def apply_cnot(psi, q: int, n: int):
    """Control q, target q + 1."""
    import torch

    s, dim, d = psi.shape
    v = psi.reshape(s, 2**q, 2, 2, (2 ** (n - q - 2)) * d)
    v = torch.cat([v[:, :, :1], v[:, :, 1:].flip(3)], dim=2)
    return v.reshape(s, dim, d)


def hea_apply(theta, psi, n: int, layers: int, entangler: str = "cz"):
    """Apply the HEA with parameters theta (S, 2nL) to psi (S, 2**n, D).

    Parameter order per layer: RY on qubits 0..n-1, then RZ on qubits 0..n-1.
    """
    for layer in range(layers):
        base = 2 * n * layer
        for q in range(n):
            g = rot("z", theta[:, base + n + q]) @ rot("y", theta[:, base + q])   # RY first, then RZ
            psi = apply_1q(psi, g, q, n)
        for q in range(n - 1):
            psi = apply_cz(psi, q, n) if entangler == "cz" else apply_cnot(psi, q, n)
    return psi


def hea_unitary(theta, n: int, layers: int, entangler: str = "cz"):
    """Full unitaries (S, 2**n, 2**n): the circuit applied to all basis columns at once."""
    import torch

    s = theta.shape[0]
    eye = torch.eye(2**n, dtype=torch.complex128, device=theta.device).expand(s, -1, -1).clone()
    return hea_apply(theta, eye, n, layers, entangler)


def hea_cost(theta, n: int, layers: int, entangler: str = "cz"):
    """C(θ) = ⟨0…0| U† Z₀ U |0…0⟩ for a batch (S, P) -> (S,)."""
    import torch

    s = theta.shape[0]
    psi = torch.zeros(s, 2**n, 1, dtype=torch.complex128, device=theta.device)
    psi[:, 0, 0] = 1.0
    out = hea_apply(theta, psi, n, layers, entangler)[:, :, 0]
    prob = (out.abs() ** 2).reshape(s, 2, -1).sum(-1)
    return prob[:, 0] - prob[:, 1]


def parameter_shift_grad(theta, n: int, layers: int, entangler: str = "cz"):
    """Exact gradient of hea_cost by the parameter-shift rule (generators with eigenvalues ±½)."""
    import torch

    s, p = theta.shape
    shifts = torch.eye(p, dtype=theta.dtype, device=theta.device) * (math.pi / 2)
    plus = (theta[:, None, :] + shifts[None]).reshape(-1, p)
    minus = (theta[:, None, :] - shifts[None]).reshape(-1, p)
    cp = hea_cost(plus, n, layers, entangler).reshape(s, p)
    cm = hea_cost(minus, n, layers, entangler).reshape(s, p)
    return 0.5 * (cp - cm)


# ----------------------------------------------------------------------------- distances

def unitary_channel_distance(u, v):
    """Normalised diamond distance ½‖U·U† − V·V†‖◇ for batches (S, d, d) -> numpy (S,)."""
    import torch

    w = u.conj().transpose(-1, -2) @ v
    phases = torch.angle(torch.linalg.eigvals(w)).cpu().numpy() % (2 * np.pi)
    return arc_distance(phases)


def arc_distance(phases: np.ndarray) -> np.ndarray:
    """sin(Θ/2) (or 1 when Θ ≥ π), Θ = smallest arc holding the phases: 2π − largest circular gap."""
    ph = np.sort(np.atleast_2d(phases), axis=1)
    gaps = np.diff(ph, axis=1)
    wrap = ph[:, :1] + 2 * np.pi - ph[:, -1:]
    largest = np.max(np.concatenate([gaps, wrap], axis=1), axis=1)
    arc = 2 * np.pi - largest
    return np.where(arc < np.pi, np.sin(np.clip(arc, 0, np.pi) / 2), 1.0)


def helstrom_probability(c: np.ndarray) -> np.ndarray:
    """Best chance of naming, from one use, which of two equally likely channels was applied.

    Helstrom: for two states with equal priors the optimal measurement succeeds with probability
    ½ + ¼‖ρ − σ‖₁. For channels one also optimises the input (an ancilla may be attached); the best
    value of ½‖ρ − σ‖₁ over inputs is the normalised diamond distance c, so the probability is ½(1 + c).
    c = 0 (same channel) gives a coin flip, c = 1 (an input exists whose outputs are orthogonal) gives 1.
    """
    return 0.5 * (1.0 + np.asarray(c, dtype=float))


def bounds(delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.abs(delta)
    return 0.5 * a.sum(1), np.sin(np.minimum(a, np.pi) / 2).sum(1)


# ----------------------------------------------------------------------------- 2-design panel

def clifford_group(n: int) -> np.ndarray:
    """All n-qubit Clifford unitaries modulo global phase, by breadth-first search from H, S, CNOT.

    The global phase is removed by making the first non-zero entry real and positive.
    """
    h = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
    s = np.diag([1, 1j])
    eye = np.eye(2)
    gens = []
    for q in range(n):
        for g in (h, s):
            mats = [g if k == q else eye for k in range(n)]
            out = mats[0]
            for m in mats[1:]:
                out = np.kron(out, m)
            gens.append(out)
    for q in range(n - 1):
        d = 2**n
        c = np.zeros((d, d))
        for i in range(d):
            bits = [(i >> (n - 1 - k)) & 1 for k in range(n)]
            if bits[q]:
                bits[q + 1] ^= 1
            j = sum(b << (n - 1 - k) for k, b in enumerate(bits))
            c[j, i] = 1
        gens.append(c.astype(complex))

    def canon_batch(ms: np.ndarray) -> np.ndarray:
        flat = ms.reshape(len(ms), -1)
        k = np.argmax(np.abs(flat) > 1e-6, axis=1)
        f = flat[np.arange(len(ms)), k]
        return ms * (np.abs(f) / f)[:, None, None]

    def keys(ms: np.ndarray) -> list[bytes]:
        r = np.round(ms, 6)
        both = np.concatenate([r.real.reshape(len(ms), -1), r.imag.reshape(len(ms), -1)], axis=1) + 0.0
        return [row.tobytes() for row in both]          # + 0.0 above turns -0.0 into 0.0

    start = np.eye(2**n, dtype=complex)[None]
    seen = dict(zip(keys(start), start))
    frontier = start
    while len(frontier):
        cand = canon_batch(np.concatenate([g @ frontier for g in gens]))
        new = []
        for kk, m in zip(keys(cand), cand):
            if kk not in seen:
                seen[kk] = m
                new.append(m)
        frontier = np.stack(new) if new else np.zeros((0,) + start.shape[1:], complex)
    return np.stack(list(seen.values()))


def frame_potential_group(group: np.ndarray) -> float:
    """F² of a finite group: (1/|G|) Σ_g |tr g|⁴."""
    tr = np.trace(group, axis1=1, axis2=2)
    return float(np.mean(np.abs(tr) ** 4))


def frame_potential_samples(us: np.ndarray) -> float:
    """Unbiased pair average of |tr U_i† U_j|⁴ over i ≠ j."""
    s = len(us)
    flat = us.reshape(s, -1)
    gram = flat.conj() @ flat.T
    a = gram.real**2 + gram.imag**2
    f = a * a
    return float((f.sum() - np.trace(f)) / (s * (s - 1)))


def haar_unitaries(d: int, s: int, rng: np.random.Generator) -> np.ndarray:
    z = (rng.standard_normal((s, d, d)) + 1j * rng.standard_normal((s, d, d))) / np.sqrt(2)
    q, r = np.linalg.qr(z)
    ph = np.diagonal(r, axis1=1, axis2=2)
    return q * (ph / np.abs(ph))[:, None, :]


def euler_unitaries(angles: np.ndarray) -> np.ndarray:
    """RZ(a)·RY(b)·RZ(c) for angles (S, 3), numpy."""
    a, b, c = angles[:, 0], angles[:, 1], angles[:, 2]
    cb, sb = np.cos(b / 2), np.sin(b / 2)
    ep = np.exp(-0.5j * (a + c))
    em = np.exp(-0.5j * (a - c))
    u = np.empty((len(a), 2, 2), dtype=complex)
    u[:, 0, 0] = ep * cb
    u[:, 0, 1] = -em * sb
    u[:, 1, 0] = np.conj(em) * sb
    u[:, 1, 1] = np.conj(ep) * cb
    return u


def zyz_angles(u: np.ndarray) -> np.ndarray:
    """Euler angles (a, b, c) with RZ(a)RY(b)RZ(c) = u up to global phase (analytic)."""
    v = u / np.sqrt(np.linalg.det(u))
    b = 2 * np.arctan2(abs(v[1, 0]), abs(v[0, 0]))
    s = -2 * np.angle(v[0, 0]) if abs(v[0, 0]) > 1e-12 else 0.0   # a + c
    d = 2 * np.angle(v[1, 0]) if abs(v[1, 0]) > 1e-12 else 0.0    # a - c
    return np.array([(s + d) / 2, b, (s - d) / 2])


def t_gate(n: int) -> np.ndarray:
    t = np.diag([1.0, np.exp(1j * T_PHASE)])
    return np.kron(t, np.eye(2 ** (n - 1))) if n > 1 else t


def distance_np(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    w = np.conj(np.swapaxes(u, -1, -2)) @ v
    return arc_distance(np.angle(np.linalg.eigvals(w)) % (2 * np.pi))


# ----------------------------------------------------------------------------- run

def _distances(cfg: Config, n: int, layers: int, mode: str, size: float, samples: int, gen, device,
               progress=None, chunk: int = 0):
    import torch

    p = 2 * n * layers
    theta = torch.rand(samples, p, generator=gen, dtype=torch.float64) * (2 * math.pi)
    if mode == "uniform":
        delta = (torch.rand(samples, p, generator=gen, dtype=torch.float64) * 2 - 1) * size
    else:
        step = max(1, int(2**20 // (2**n * 2 * p)))      # keep each shifted batch near 1M amplitudes
        delta = -size * torch.cat([parameter_shift_grad(theta[i:i + step].to(device), n, layers,
                                                        cfg.entangler).cpu()
                                   for i in range(0, samples, step)])
    chunk = chunk or max(1, int(2**22 // (4**n)))
    cs = []
    for i in range(0, samples, chunk):
        th = theta[i:i + chunk].to(device)
        de = delta[i:i + chunk].to(device)
        u = hea_unitary(th, n, layers, cfg.entangler)
        v = hea_unitary(th + de, n, layers, cfg.entangler)
        cs.append(unitary_channel_distance(u, v))
        report(progress, min(1.0, (i + chunk) / samples), f"unitaries {min(i + chunk, samples)}/{samples}")
    b1, b2 = bounds(delta.numpy())
    return np.concatenate(cs), b1, b2


def run(config: Config, progress=None) -> Result:
    import torch

    from engine.core import get_device
    from engine.core.nn import set_cpu_threads

    set_cpu_threads()
    rng = seed_everything(config.seed, torch_too=True)
    device = get_device()
    n, layers = config.n_qubits, config.layers
    if config.entangler not in ("cz", "cnot"):
        raise InputError("entangler must be cz or cnot")
    gen = torch.Generator().manual_seed(config.seed)
    span = ProgressSpan(progress, 0, 1)

    size = config.epsilon if config.perturbation == "uniform" else config.eta
    c, b1, b2 = _distances(config, n, layers, config.perturbation, size, config.samples, gen, device,
                           progress=span.sub(0.0, 0.6, "main panel: "))

    sweep_c = []
    for i, lay in enumerate(SWEEP_LAYERS):
        ci, _, _ = _distances(config, SWEEP_N, lay, "gradient", config.eta, SWEEP_SAMPLES, gen, device)
        sweep_c.append(ci)
        report(progress, 0.6 + 0.2 * (i + 1) / len(SWEEP_LAYERS), f"gradient sweep: L = {lay}")
    sweep_c = np.stack(sweep_c)
    sweep_p = np.array([2 * SWEEP_N * lay for lay in SWEEP_LAYERS])

    # 2-design panel
    dn = config.design_n
    cliff = clifford_group(dn)
    report(progress, 0.9, f"Clifford group on {dn} qubit(s): {len(cliff)} elements")
    f_cliff = frame_potential_group(cliff)
    tgt = t_gate(dn)
    d_cliff = float(distance_np(cliff, np.broadcast_to(tgt, cliff.shape)).min())
    euler = euler_unitaries(rng.uniform(0, 2 * np.pi, (DESIGN_SAMPLES, 3)))
    f_euler = frame_potential_samples(euler)
    ang = zyz_angles(t_gate(1))
    d_euler = float(distance_np(euler_unitaries(ang[None]), t_gate(1)[None])[0])
    f_haar = frame_potential_samples(haar_unitaries(2**dn, DESIGN_SAMPLES, rng))
    names = [f"Clifford group (n={dn})", "Euler RZ·RY·RZ (n=1, uniform angles)", f"Haar (n={dn})"]
    fps = [f_cliff, f_euler, f_haar]
    tds = [d_cliff, d_euler, np.nan]
    if dn == 2:
        th = torch.rand(DESIGN_SAMPLES, 4 * layers, generator=gen, dtype=torch.float64) * 2 * math.pi
        hea = hea_unitary(th.to(device), 2, layers, config.entangler).cpu().numpy()
        names.append(f"HEA (n=2, L={layers}, uniform angles)")
        fps.append(frame_potential_samples(hea))
        tds.append(np.nan)

    helstrom = helstrom_probability(c)
    ratio1 = c / np.maximum(b1, 1e-300)
    ratio2 = c / np.maximum(b2, 1e-300)
    med = np.median(sweep_c, axis=1)
    cv = sweep_c.std(axis=1) / np.maximum(sweep_c.mean(axis=1), 1e-300)
    m = {
        "f_clifford": f_cliff, "f_euler": f_euler, "f_haar": f_haar,
        "clifford_t_distance": d_cliff, "euler_t_distance": d_euler,
        "max_ratio_b1": float(ratio1.max()), "max_ratio_b2": float(ratio2.max()),
        "median_ratio_b1": float(np.median(ratio1)), "median_c": float(np.median(c)),
        "median_helstrom": float(np.median(helstrom)),
        "sweep_median_first": float(med[0]), "sweep_min_increment": float(np.diff(med).min()),
        "sweep_min_cv": float(cv.min()),
        # how far the per-gate bound sits below the paper's, at most, relative to it (sin x < x)
        "max_b2_shortfall": float(np.max(1 - b2 / np.maximum(b1, 1e-300))),
    }
    report(progress, 1.0, "done")
    return Result(config=config, n_params=2 * n * layers, c=c, b1=b1, b2=b2, helstrom=helstrom, sweep_p=sweep_p,
                  sweep_c=sweep_c, design_names=names, frame_potential=np.array(fps),
                  t_distance=np.array(tds, dtype=float), clifford_size=len(cliff), metrics=m)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    p0 = int(result.sweep_p[0])
    eta = result.config.eta
    return [
        Claim("The Clifford group is an exact 2-design (frame potential equal to the Haar value 2)…",
              measured=abs(m["f_clifford"] - 2), op="<=", threshold=1e-9, label="|F²(Clifford) − 2|", fmt=".2g",
              detail=f"F² = {m['f_clifford']:.12f} over {result.clifford_size} elements"),
        Claim("…yet it cannot express the T gate.",
              measured=m["clifford_t_distance"], op=">=", threshold=0.38, label="min distance Clifford → T",
              detail="closest element measured with the closed-form channel distance"),
        Claim("An ansatz that expresses every one-qubit unitary (Euler RZ·RY·RZ) is not a 2-design with "
              "uniform angles…",
              measured=m["f_euler"], op=">=", threshold=2.03, label="F²(Euler, uniform angles)",
              detail=f"Haar value 2; sampled Haar gave {m['f_haar']:.3f}"),
        Claim("…and reaches T exactly.",
              measured=m["euler_t_distance"], op="<=", threshold=1e-9, label="distance Euler(θ*) → T", fmt=".2g",
              detail="angles θ* from an analytic Z-Y-Z decomposition"),
        Claim("The distinguishability after an update never exceeds the bound ½Σ|δ_j| (nor Σ sin(|δ_j|/2)).",
              measured=max(m["max_ratio_b1"], m["max_ratio_b2"]), op="<=", threshold=1 + 1e-9,
              label="max over θ of c / bound", fmt=".4f",
              detail=f"max c/B₁ = {m['max_ratio_b1']:.4f}, max c/B₂ = {m['max_ratio_b2']:.4f}"),
        Claim("The bound is loose: the typical distance is well below it.",
              measured=m["median_ratio_b1"], op="<=", threshold=0.8, label="median c / (½Σ|δ|)"),
        Claim(f"A gradient step (η = {eta:g}) on a few-parameter HEA is barely distinguishable.",
              measured=m["sweep_median_first"], op="<=", threshold=0.06, label=f"median c at P = {p0} (n = 4)",
              detail=f"Helstrom success probability "
                     f"{float(helstrom_probability(m['sweep_median_first'])):.3f} (½ = a coin flip)"),
        Claim("Distinguishability after a gradient step grows with the number of parameters.",
              measured=m["sweep_min_increment"], op=">", threshold=0.0,
              label="smallest increase of median c between P steps", fmt=".3g",
              detail="P = " + ", ".join(str(int(p)) for p in result.sweep_p)),
        Claim("It varies strongly with where θ sits in parameter space.",
              measured=m["sweep_min_cv"], op=">=", threshold=0.15, label="min coefficient of variation over P"),
    ]


if __name__ == "__main__":
    import time

    t0 = time.time()
    r = run(Config())
    print(f"{time.time() - t0:.2f}s")
    for cl in claims(r):
        print(cl.passed, cl.describe(), cl.detail)
