"""DPA-OMF at toy scale: rank a motion model's own rollouts by occupancy matching, then DPO.

Synthetic three-lane highway scenes with 8 vehicles; an IDM + lane-change "expert" provides
the demonstrations; a small per-agent token policy (30 action tokens) is pre-trained by
imitation (``python -m engine.implicit_preference_motion train`` writes the checkpoint).
Live: sample K rollouts per training scene, score each by an entropic optimal-transport
distance between its occupancy measure and the scene's expert log, build preferred/rejected
pairs from the ranking, and align with DPO; compare with the adversarial construction where
the expert log is always preferred. Realism is measured on held-out scenes by quantities
computed independently of the preference distance (collision / off-road rates, 1-D Wasserstein
distances of speed and acceleration distributions).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from engine.core import Bool, Claim, Float, InputError, Int, get_device, param, seed_everything
from engine.core.progress import ProgressSpan, report

# run() puts its torch work on the device get_device() picks (a CUDA GPU when present); the sidebar
# names that device (engine.core.device.engine_device_label)
USES_DEVICE = True

SLUG = "implicit-preference-motion"
CKPT_NAME = f"{SLUG}/motion_ref.pt"

# ---- scene constants
LANES = np.array([0.0, 3.5, 7.0])
EDGE_LO, EDGE_HI = -1.75, 8.75
CAR_L, CAR_W = 4.5, 1.8
N_AGENTS = 8
DT = 0.5
HORIZON = 16
ACCELS = np.array([-3.0, -1.5, -0.5, 0.0, 0.5, 1.5])
LATS = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
N_TOK = len(ACCELS) * len(LATS)
N_FEAT = 18
TRAIN_SEED0, N_TRAIN_SCENES = 0, 400
HELD_SEED0, N_HELD = 10_000, 64
GAP_CLIP = 50.0
EVAL_REPS = 2


SWEEP_MAX_DPO_STEPS = 400


@dataclass(frozen=True)
class Config:
    n_scenes: int = param(128, Int(16, 400, "Preference scenes M", step=16,
                                   help="training scenes whose reference rollouts are ranked"))
    k_samples: int = param(8, Int(4, 16, "Samples per scene K", help="reference rollouts ranked per scene"))
    dpo_steps: int = param(150, Int(0, 600, "DPO steps", step=10,
                                    help="many steps over-optimise the preference data; with the scaling sweep "
                                         "on, at most 400 (the sweep retrains once per M)"))
    beta: float = param(0.1, Float(0.01, 1.0, "DPO β", step=0.01))
    event_weight: float = param(3.0, Float(0.0, 10.0, "Event feature weight", step=0.5,
                                           help="weight of the collision and off-road occupancy features"))
    baseline: bool = param(True, Bool("Adversarial baseline (expert always preferred)"))
    sweep: bool = param(False, Bool("Scaling sweep over M", help="one DPA-OMF run per M (slower)",
                                    group="Advanced"))
    seed: int = param(0, Int(0, 9, "Seed"))

    def __post_init__(self):
        if self.sweep and self.dpo_steps > SWEEP_MAX_DPO_STEPS:
            raise ValueError(f"the scaling sweep retrains once per M: with it, use at most {SWEEP_MAX_DPO_STEPS} DPO "
                             "steps (600 took 19 s on an idle machine, about twice that under load)")


# largest widget setting (all sizes at max, baseline + sweep): 22 s CPU, measured 2026-12-03 under load. On an idle
# machine 2026-12-05: 600 DPO steps without the sweep 8.6 s, with it 18.9 s (hence SWEEP_MAX_DPO_STEPS)
HEAVY_CONFIG = Config(n_scenes=400, k_samples=16, dpo_steps=400, baseline=True, sweep=True)


@dataclass
class Result:
    metrics: dict[str, float]
    table: dict[str, dict[str, float]]          # method -> metric -> value
    errors: dict[str, dict[str, float]]         # method -> metric -> bootstrap std
    view_states: dict[str, np.ndarray]          # method -> (N_view, T+1, A, 3) held-out rollouts
    view_events: dict[str, np.ndarray]          # method -> (N_view, T+1, A) bool
    rank_states: np.ndarray                     # (K, T+1, A, 3) rollouts of one training scene, ranked
    rank_events: np.ndarray
    rank_dist: np.ndarray
    rank_expert: np.ndarray                     # (T+1, A, 3)
    loss_curves: dict[str, np.ndarray]
    curve_steps: np.ndarray
    curve_omf: dict[str, np.ndarray]
    sweep_m: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sweep_omf: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sweep_fail: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # realism metrics (table keys) where DPA-OMF is more than WORSE_FACTOR x the pre-trained reference
    worse_than_reference: list = field(default_factory=list)


REALISM_KEYS = ("collision", "offroad", "omf", "w1_speed", "w1_accel")   # the realism table's metrics
WORSE_FACTOR = 1.1
AGREE_BAR = 0.80      # claim 3: share of mixed pairs where the distance prefers the clean rollout (spec)


# ------------------------------------------------------------------ scenes and expert (numpy)

def make_scene(seed: int) -> dict:
    """Initial state of one scene: 8 cars, random lanes and positions (bumper gap >= 8 m)."""
    rng = np.random.default_rng(seed)
    lanes = np.zeros(N_AGENTS, int)
    xs = np.zeros(N_AGENTS)
    n = 0
    while n < N_AGENTS:
        ln, x = int(rng.integers(3)), float(rng.uniform(0.0, 100.0))
        ok = all(not (lanes[j] == ln and abs(xs[j] - x) < CAR_L + 8.0) for j in range(n))
        if ok:
            lanes[n], xs[n] = ln, x
            n += 1
    return {"x": xs, "y": LANES[lanes].copy(), "v": rng.uniform(8, 14, N_AGENTS),
            "vdes": rng.uniform(10, 16, N_AGENTS), "seed": seed}


def lane_of(y):
    return np.argmin(np.abs(np.asarray(y)[..., None] - LANES), axis=-1)


def _gaps_np(x, y, v, i, lane):
    """Bumper gap and speed of leader / follower of car i in ``lane`` (inf when none).

    A car counts as in the lane while any part of it overlaps the lane (so cars changing lanes
    are seen by both lanes)."""
    lead_gap, lead_v, fol_gap = np.inf, 0.0, np.inf
    for j in range(N_AGENTS):
        if j == i or abs(y[j] - LANES[lane]) > 1.75 + CAR_W / 2:
            continue
        dx = x[j] - x[i]
        if dx >= 0 and dx - CAR_L < lead_gap:
            lead_gap, lead_v = dx - CAR_L, v[j]
        if dx < 0 and -dx - CAR_L < fol_gap:
            fol_gap = -dx - CAR_L
    return lead_gap, lead_v, fol_gap


def _idm(v, vdes, gap, lead_v):
    a_max, b, th, s0 = 1.5, 2.0, 1.2, 2.0
    free = 1 - (v / vdes) ** 4
    if not np.isfinite(gap):
        return a_max * free
    s_star = s0 + v * th + v * (v - lead_v) / (2 * np.sqrt(a_max * b))
    return a_max * (free - (max(s_star, 0.0) / max(gap, 0.1)) ** 2)


def expert_log(scene: dict) -> tuple[np.ndarray, np.ndarray]:
    """IDM + gap-acceptance lane changes, actions snapped to tokens, 10 % neighbour-token noise.

    Returns states (T+1, A, 3) = (x, y, v) and tokens (T, A).
    """
    rng = np.random.default_rng(1_000_003 + scene["seed"])
    x, y, v = scene["x"].copy(), scene["y"].copy(), scene["v"].copy()
    vdes = scene["vdes"]
    target = lane_of(y)
    states = [np.stack([x, y, v], -1)]
    toks = []
    for _t in range(HORIZON):
        ln = lane_of(y)
        tok = np.zeros(N_AGENTS, int)
        for i in range(N_AGENTS):
            gap, lv, _ = _gaps_np(x, y, v, i, ln[i])
            a = _idm(v[i], vdes[i], gap, lv)
            if target[i] == ln[i] and abs(y[i] - LANES[ln[i]]) < 0.3 and np.isfinite(gap) and gap < 40 \
                    and lv < vdes[i] - 2.0:
                for cand in (ln[i] + 1, ln[i] - 1):
                    if 0 <= cand < 3:
                        g2, _, f2 = _gaps_np(x, y, v, i, cand)
                        if g2 >= 15 and f2 >= 15:
                            target[i] = cand
                            break
            if target[i] != ln[i]:
                g2, lv2, _ = _gaps_np(x, y, v, i, target[i])
                a = min(a, _idm(v[i], vdes[i], g2, lv2))
            vlat = np.clip(0.8 * (LANES[target[i]] - y[i]), -1.0, 1.0)
            ai = int(np.argmin(np.abs(ACCELS - a)))
            li = int(np.argmin(np.abs(LATS - vlat)))
            if rng.random() < 0.1:
                if rng.random() < 0.5:
                    ai = int(np.clip(ai + rng.choice([-1, 1]), 0, len(ACCELS) - 1))
                else:
                    li = int(np.clip(li + rng.choice([-1, 1]), 0, len(LATS) - 1))
            tok[i] = ai * len(LATS) + li
        x, y, v = step_np(x, y, v, tok)
        states.append(np.stack([x, y, v], -1))
        toks.append(tok)
    return np.stack(states), np.stack(toks)


def step_np(x, y, v, tok):
    a, vl = ACCELS[tok // len(LATS)], LATS[tok % len(LATS)]
    v = np.clip(v + a * DT, 0.0, 20.0)
    return x + v * DT, y + vl * DT, v


def events(states) -> tuple[np.ndarray, np.ndarray]:
    """Collision (axis-aligned box overlap with any other car) and off-road flags, shape states[..., 0]."""
    s = np.asarray(states)
    x, y = s[..., 0], s[..., 1]
    dx = np.abs(x[..., :, None] - x[..., None, :])
    dy = np.abs(y[..., :, None] - y[..., None, :])
    ov = (dx < CAR_L) & (dy < CAR_W)
    n = ov.shape[-1]
    ov &= ~np.eye(n, dtype=bool)
    coll = ov.any(-1)
    off = (y - CAR_W / 2 < EDGE_LO) | (y + CAR_W / 2 > EDGE_HI)
    return coll, off


def scene_bank(seeds) -> dict[str, np.ndarray]:
    init, exp_s, exp_t = [], [], []
    for s in seeds:
        sc = make_scene(int(s))
        st, tk = expert_log(sc)
        init.append(st[0])
        exp_s.append(st)
        exp_t.append(tk)
    return {"init": np.stack(init), "states": np.stack(exp_s), "tokens": np.stack(exp_t)}


# ------------------------------------------------------------------ torch parts

def _torch():
    import torch
    return torch


def features(state, t):
    """Per-agent features (B, A, 18) from joint state (B, A, 3) at step t (torch).

    Own lane offset, position, speed and road-edge distances, then for the own lane and the lanes to
    the left and right (in that order) the gap to and relative speed of the leader and the follower,
    then t / T. All three lanes and both neighbours are handled in one set of tensor ops.
    """
    torch = _torch()
    x, y, v = state[..., 0], state[..., 1], state[..., 2]
    lanes = torch.as_tensor(LANES, dtype=state.dtype, device=state.device)
    ln = torch.argmin((y[..., None] - lanes).abs(), -1)                       # (B, A)
    off = y - lanes[ln]
    dx = x[:, None, :] - x[:, :, None]                                       # (B, i, j) = x_j - x_i
    dv = v[:, None, :] - v[:, :, None]
    n_b, n_a = x.shape
    eye = torch.eye(n_a, dtype=torch.bool, device=state.device)
    target = ln[..., None] + torch.tensor([0, 1, -1], device=state.device)   # (B, i, 3): own, left, right
    valid = (target >= 0) & (target <= 2)
    same = (ln[:, None, None, :] == target[..., None]) & ~eye[:, None, :]    # (B, i, 3, j)
    ahead = (dx >= 0)[:, :, None, :]
    big = torch.full((), 1e3, dtype=state.dtype, device=state.device)
    dxe = dx[:, :, None, :]
    cand = torch.stack([torch.where(same & ahead, dxe, big), torch.where(same & ~ahead, -dxe, big)], 3)
    g, idx = cand.min(-1)                                                    # (B, i, 3, 2): leader, follower
    has = g < 1e3
    gap = torch.where(has, (g - CAR_L).clamp(-CAR_L, GAP_CLIP), torch.full_like(g, GAP_CLIP))
    gap = torch.where(valid[..., None], gap, torch.zeros_like(gap))
    rv = torch.gather(dv[:, :, None, None, :].expand(n_b, n_a, 3, 2, n_a), -1, idx[..., None])[..., 0]
    rv = torch.where(has & valid[..., None], rv, torch.zeros_like(rv))
    nb = torch.stack([gap / GAP_CLIP, rv / 5.0], -1).reshape(n_b, n_a, 12)
    own = torch.stack([off, y / 7.0, v / 15.0, (y - EDGE_LO) / 5.0, (EDGE_HI - y) / 5.0], -1)
    return torch.cat([own, nb, torch.full_like(x, t / HORIZON)[..., None]], -1)


def step_torch(state, tok):
    torch = _torch()
    accels = torch.as_tensor(ACCELS, dtype=state.dtype, device=state.device)
    lats = torch.as_tensor(LATS, dtype=state.dtype, device=state.device)
    a, vl = accels[tok // len(LATS)], lats[tok % len(LATS)]
    v = (state[..., 2] + a * DT).clamp(0.0, 20.0)
    return torch.stack([state[..., 0] + v * DT, state[..., 1] + vl * DT, v], -1)


def make_policy():
    from engine.core.nn import mlp
    return mlp([N_FEAT, 32, 32, N_TOK])


def _sample(probs, gen):
    """One categorical draw per row by an exponential race: argmax_k p_k / E_k with E_k ~ Exp(1).

    The same draw as ``torch.multinomial(probs, 1, generator=gen)`` (the race is how torch draws one
    sample), without its validity checks, and with the noise visible so that several policies can share it.
    """
    torch = _torch()
    return (probs / torch.empty_like(probs).exponential_(1, generator=gen)).argmax(-1)


def rollout(policy, init, gen, temperature=1.0):
    """Closed-loop sampling of all agents. init (B, A, 3) torch. Returns states (B,T+1,A,3),
    features (B,T,A,F), tokens (B,T,A), per-step log-probs (B,T,A)."""
    torch = _torch()
    st = init
    S, Fs, Ts, Ls = [st], [], [], []
    with torch.no_grad():
        for t in range(HORIZON):
            f = features(st, t)
            logits = policy(f) / temperature
            logp = torch.log_softmax(logits, -1)
            tok = _sample(logp.exp().reshape(-1, N_TOK), gen).reshape(st.shape[:2])
            Ls.append(torch.gather(logp, -1, tok[..., None])[..., 0])
            st = step_torch(st, tok)
            S.append(st)
            Fs.append(f)
            Ts.append(tok)
    return torch.stack(S, 1), torch.stack(Fs, 1), torch.stack(Ts, 1), torch.stack(Ls, 1)


def rollout_many(policies, init, gen):
    """States (P, B, T+1, A, 3) of P policies (same MLP shape) rolled out from the same init.

    Equal to P calls of ``rollout`` with identically seeded generators: every policy sees the same
    sampling noise, and the P forward passes run as one batched matrix product per layer.
    """
    torch = _torch()
    n_p, (n_b, n_a, _) = len(policies), init.shape
    layers = []
    for group in zip(*policies):
        if isinstance(group[0], torch.nn.Linear):
            layers.append((torch.stack([m.weight for m in group]).transpose(1, 2),
                           torch.stack([m.bias for m in group])[:, None, :]))
        else:
            layers.append(group[0])                     # parameter-free activation
    st = init.repeat(n_p, 1, 1)
    S = [st]
    with torch.no_grad():
        for t in range(HORIZON):
            h = features(st, t).reshape(n_p, n_b * n_a, N_FEAT)
            for layer in layers:
                h = torch.baddbmm(layer[1], h, layer[0]) if isinstance(layer, tuple) else layer(h)
            probs = torch.softmax(h, -1)
            noise = torch.empty(n_b * n_a, N_TOK, dtype=probs.dtype, device=probs.device).exponential_(1, generator=gen)
            tok = (probs / noise).argmax(-1).reshape(n_p * n_b, n_a)
            st = step_torch(st, tok)
            S.append(st)
    return torch.stack(S, 1).reshape(n_p, n_b, HORIZON + 1, n_a, 3)


def expert_features(states):
    """Features along stored states (B, T+1, A, 3) for teacher forcing: (B, T, A, F)."""
    torch = _torch()
    return torch.stack([features(states[:, t], t) for t in range(HORIZON)], 1)


def traj_logp(policy, feats, toks, temperature=1.0):
    """Teacher-forced log pi(xi | c) = sum over steps and agents of token log-probs."""
    torch = _torch()
    logp = torch.log_softmax(policy(feats) / temperature, -1)
    return torch.gather(logp, -1, toks[..., None])[..., 0].sum((-1, -2))


def dpo_loss(lp_w, lp_l, ref_w, ref_l, beta):
    torch = _torch()
    margin = beta * ((lp_w - ref_w) - (lp_l - ref_l))
    return -torch.nn.functional.logsigmoid(margin).mean()


# ------------------------------------------------------------------ occupancy measure + OT

# every second step: 8 times x 8 agents = 64 points (the spec takes all A x T = 128). Measured 2026-12-06 at the
# defaults, seeds 0 / 1 / 2: all 128 points give the same verdicts (5/5, 5/5, 1/5 badges; second badge at seed 0: 0.884 with
# all points, 0.869 with these) and cost about 0.8 s more per default run (2.5 s vs 1.7 s warm), too close to the 3 s budget
OCC_STEPS = np.arange(2, HORIZON + 1, 2)


def occupancy(states, w_event):
    """Points phi(agent, t) for t = 2, 4, ..., T: (B, 64, 6) numpy (events flagged at any step since t-1)."""
    full = np.asarray(states)
    coll, off = events(full)
    coll = coll[:, OCC_STEPS] | coll[:, OCC_STEPS - 1]
    off = off[:, OCC_STEPS] | off[:, OCC_STEPS - 1]
    s = full[:, OCC_STEPS]
    t = np.broadcast_to(OCC_STEPS[None, :, None], s.shape[:3])
    phi = np.stack([s[..., 0] / 10, s[..., 1] / 1.75, s[..., 2] / 5, t / 4,
                    w_event * coll, w_event * off], -1)
    return phi.reshape(s.shape[0], -1, 6).astype(np.float32)


def sinkhorn_batch(X, Y, eps_frac=0.05, iters=200, chunk=64):
    """Entropic OT cost <P, C> between uniform point clouds, batched Sinkhorn (numpy, float32 kernel).

    X (B, n, d), Y (B, m, d); squared Euclidean cost; eps = eps_frac * median(C) per problem.
    The kernel is stabilised by subtracting row and then column minima of C (absorbed into the
    dual potentials), so every row and column keeps an entry exp(0) = 1 and nothing underflows
    to an all-zero row. Problems go in chunks of 64 so that a chunk's kernel stays in cache during
    the scaling iterations. Returns (cost (B,), eps (B,)).
    """
    X, Y = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    out, eps_all = [], []
    for s in range(0, len(X), chunk):
        x, y = X[s:s + chunk], Y[s:s + chunk]
        # |x - y|^2 = |x|^2 + |y|^2 - 2 x.y, without the (chunk, n, m, d) difference array
        C = (x * x).sum(-1)[:, :, None] + (y * y).sum(-1)[:, None, :] - 2.0 * np.matmul(x, y.transpose(0, 2, 1))
        np.maximum(C, 0.0, out=C)
        eps = eps_frac * np.maximum(np.median(C.reshape(len(C), -1), 1), 1e-9)
        r = C.min(2, keepdims=True)
        c = (C - r).min(1, keepdims=True)
        K = np.exp(-(C - r - c) / eps[:, None, None])
        # entries under 1e-30 are zeroed: in float32 they would be subnormal numbers, which make every
        # product with them many times slower on some CPUs (measured: 3.4 s -> 0.4 s for 1 024 pairs). They
        # move the cost only in its last digits (at the default run: 17 of 1 808 distances, by 2e-14 relative)
        K[K < 1e-30] = 0.0
        K = K.astype(np.float32)
        KT = np.ascontiguousarray(K.transpose(0, 2, 1))
        n, m = C.shape[1], C.shape[2]
        a, b = np.float32(1.0 / n), np.float32(1.0 / m)
        v = np.ones((len(C), m, 1), np.float32)
        for _ in range(iters):
            u = a / np.matmul(K, v)
            v = b / np.matmul(KT, u)
        # <P, C> = u^T (K * C) v, with P = diag(u) K diag(v)
        KC = K * C
        out.append(np.matmul(u.transpose(0, 2, 1).astype(np.float64), np.matmul(KC, v.astype(np.float64)))[:, 0, 0])
        eps_all.append(eps)
    return np.concatenate(out), np.concatenate(eps_all)


def omf_distance(states, expert_states, w_event, device=None):
    """d(xi, xi_E): entropic OT between the two occupancy point clouds (one value per pair)."""
    return sinkhorn_batch(occupancy(states, w_event), occupancy(expert_states, w_event))[0]


# ------------------------------------------------------------------ reference checkpoint

def pretrain(bank, steps, seed=0, progress=None):
    torch = _torch()
    from engine.core.nn import train_loop
    torch.manual_seed(seed)
    pol = make_policy()
    st = torch.as_tensor(bank["states"], dtype=torch.float32)
    F = expert_features(st).reshape(-1, N_FEAT)
    Y = torch.as_tensor(bank["tokens"]).reshape(-1)
    g = torch.Generator().manual_seed(seed)

    def loss(_step):
        idx = torch.randint(0, len(Y), (1024,), generator=g)
        return torch.nn.functional.cross_entropy(pol(F[idx]), Y[idx])

    train_loop(pol.parameters(), loss, steps, lr=3e-3, progress=progress, message="pre-training")
    return pol


def failure_rate(states):
    coll, off = events(np.asarray(states))
    return float((coll.any(1) | off.any(1)).mean())


def load_reference(progress=None):
    """The pre-trained reference from assets/ (or, if missing, pre-trained live with the same recipe)."""
    from engine.core.nn import asset_path, load_state
    pol = make_policy()
    path = asset_path(CKPT_NAME)
    if path.exists():
        ck = load_state(path)
        pol.load_state_dict(ck["state"])
    else:
        pol = pretrain(scene_bank(range(TRAIN_SEED0, TRAIN_SEED0 + N_TRAIN_SCENES)), 300, progress=progress)
    pol.eval()
    for p in pol.parameters():
        p.requires_grad_(False)
    return pol


def train_reference() -> None:
    """Pre-train by imitation and calibrate the step count so the held-out failure rate is in [0.05, 0.30]."""
    torch = _torch()
    from engine.core.nn import asset_path, save_state, set_cpu_threads
    set_cpu_threads()
    bank = scene_bank(range(TRAIN_SEED0, TRAIN_SEED0 + N_TRAIN_SCENES))
    held = scene_bank(range(HELD_SEED0, HELD_SEED0 + N_HELD))
    init = torch.as_tensor(held["init"], dtype=torch.float32).repeat(4, 1, 1)
    for steps in (300, 200, 150, 100, 450, 700, 1000):
        pol = pretrain(bank, steps)
        S = rollout(pol, init, torch.Generator().manual_seed(0))[0].numpy()
        fr = failure_rate(S)
        print(f"steps={steps}: held-out failure rate {fr:.3f} (expert {failure_rate(held['states']):.3f})")
        if 0.05 <= fr <= 0.30:
            save_state(pol, asset_path(CKPT_NAME), extra={"steps": steps, "failure_rate": fr})
            np.savez_compressed(asset_path(BANK_NAME),
                                states=np.concatenate([bank["states"], held["states"]]).astype(np.float32),
                                tokens=np.concatenate([bank["tokens"], held["tokens"]]).astype(np.int8))
            print("saved", asset_path(CKPT_NAME))
            return
    raise SystemExit("no step count gave a failure rate in [0.05, 0.30]")


# ------------------------------------------------------------------ the experiment

BANK_NAME = f"{SLUG}/expert_logs.npz"


def _split(bank, n_train):
    return ({k: v[:n_train] for k, v in bank.items()}, {k: v[n_train:] for k, v in bank.items()})


def _banks():
    """Expert logs of the training and held-out scenes.

    The training script stores them next to the checkpoint (regenerating them takes seconds in
    pure Python); without that file they are generated here from the same seeds.
    """
    cache = globals().setdefault("_CACHE", {})
    if "banks" not in cache:
        from engine.core.nn import asset_path
        path = asset_path(BANK_NAME)
        if path.exists():
            with np.load(path) as z:
                bank = {"init": z["states"][:, 0].astype(np.float64), "states": z["states"].astype(np.float64),
                        "tokens": z["tokens"].astype(np.int64)}
            cache["banks"] = _split(bank, N_TRAIN_SCENES)
        else:
            cache["banks"] = (scene_bank(range(TRAIN_SEED0, TRAIN_SEED0 + N_TRAIN_SCENES)),
                              scene_bank(range(HELD_SEED0, HELD_SEED0 + N_HELD)))
    return cache["banks"]


def _evaluate(policies, held, seed, device, w_event, n_scenes=N_HELD, reps=EVAL_REPS):
    """Held-out rollouts of each policy (same seed, so the same sampling noise for all) and their
    OMF distances and event flags: a list of (S, d, coll, off), one per policy."""
    torch = _torch()
    init = torch.as_tensor(held["init"][:n_scenes], dtype=torch.float32, device=device).repeat(reps, 1, 1)
    S = rollout_many(policies, init, torch.Generator(device=device).manual_seed(10_000 + seed)).cpu().numpy()
    S = S.reshape(-1, *S.shape[2:])
    exp = np.tile(held["states"][:n_scenes], (len(policies) * reps, 1, 1, 1))
    d = omf_distance(S, exp, w_event, device)
    coll, off = events(S)
    split = lambda a: np.split(a, len(policies))     # noqa: E731
    return list(zip(*map(split, (S, d, coll, off))))


def wasserstein_distance(u: np.ndarray, v: np.ndarray) -> float:
    """1-Wasserstein distance of two 1-D samples (uniform weights): the integral of |F_u - F_v|.

    Same definition as scipy.stats.wasserstein_distance (the tests compare the two), computed here
    so that a run need not import scipy.stats (half a second of a cold start).
    """
    u, v = np.sort(np.ravel(u)), np.sort(np.ravel(v))
    grid = np.sort(np.concatenate([u, v]))
    Fu = np.searchsorted(u, grid[:-1], side="right") / len(u)
    Fv = np.searchsorted(v, grid[:-1], side="right") / len(v)
    return float(np.sum(np.abs(Fu - Fv) * np.diff(grid)))


def _realism(S, d, coll, off, held, n_scenes, reps, rng):
    exp = held["states"]
    sp_e, ac_e = exp[:, 1:, :, 2].ravel(), (np.diff(exp[..., 2], axis=1) / DT).ravel()
    ca, oa = coll.any(1), off.any(1)                                    # (B, A)
    per_scene = lambda a: a.reshape(reps, n_scenes, *a.shape[1:]).mean(0).reshape(n_scenes, -1).mean(1)  # noqa: E731
    # failure = share of agents that collide or leave the road (the union; the spec adds the two rates, which counts
    # an agent with both events twice -- the verdicts agree at the default, where DPA-OMF has no failure at all)
    c_s, o_s, d_s = per_scene(ca.astype(float)), per_scene(oa.astype(float)), per_scene(d)
    f_s = per_scene((ca | oa).astype(float))
    out = {"collision": float(ca.mean()), "offroad": float(oa.mean()), "failure": float((ca | oa).mean()),
           "omf": float(d.mean()),
           "w1_speed": float(wasserstein_distance(S[:, 1:, :, 2].ravel(), sp_e)),
           "w1_accel": float(wasserstein_distance((np.diff(S[..., 2], axis=1) / DT).ravel(), ac_e))}
    boots = rng.integers(0, n_scenes, (200, n_scenes))
    err = {"collision": float(c_s[boots].mean(1).std()), "offroad": float(o_s[boots].mean(1).std()),
           "failure": float(f_s[boots].mean(1).std()), "omf": float(d_s[boots].mean(1).std()),
           "w1_speed": 0.0, "w1_accel": 0.0}
    return out, err


def _dpo(ref, data, cfg, steps, progress, marks=()):
    """DPO from ref on pairs data = (Fw, Tw, Fl, Tl) tensors.

    Returns the policy, the loss history and frozen copies of the policy after each step in ``marks``
    (step 0: the reference), evaluated later, all at once."""
    torch = _torch()
    import copy

    from engine.core.nn import train_loop
    pol = copy.deepcopy(ref)
    for p in pol.parameters():
        p.requires_grad_(True)
    Fw, Tw, Fl, Tl = data
    with torch.no_grad():
        rw, rl = traj_logp(ref, Fw, Tw), traj_logp(ref, Fl, Tl)
    n = len(Tw)
    g = torch.Generator().manual_seed(cfg.seed)
    snaps = [ref] if 0 in marks else []
    FT, TT = torch.cat([Fw, Fl]), torch.cat([Tw, Tl])       # winners then losers: one forward pass a step

    def loss(_s):
        idx = torch.randint(0, n, (min(32, n),), generator=g).to(device=FT.device)
        both = torch.cat([idx, idx + n])
        lp = traj_logp(pol, FT[both], TT[both])
        return dpo_loss(lp[:len(idx)], lp[len(idx):], rw[idx], rl[idx], cfg.beta)

    def on_step(s, _v):
        if s + 1 in marks:
            snaps.append(copy.deepcopy(pol).requires_grad_(False))

    hist = train_loop(pol.parameters(), loss, steps, lr=1e-3, progress=progress, message="DPO",
                      on_step=on_step, grad_clip=1.0) if steps > 0 else []
    pol.eval().requires_grad_(False)
    return pol, np.asarray(hist), snaps


def run(config: Config, progress=None) -> Result:
    torch = _torch()
    from engine.core.nn import set_cpu_threads
    set_cpu_threads()
    rng = seed_everything(config.seed, torch_too=True)
    device = get_device()
    if config.n_scenes > N_TRAIN_SCENES or config.k_samples < 4:
        raise InputError("M must be at most 400 and K at least 4")
    train, held = _banks()
    ref = load_reference().to(device)
    M, K = int(config.n_scenes), int(config.k_samples)
    report(progress, 0.02, "sampling reference rollouts")

    # 1. sample K rollouts per preference scene (the first M training scenes after a seeded shuffle)
    order = np.random.default_rng(config.seed).permutation(N_TRAIN_SCENES)[:M]
    init = torch.as_tensor(train["init"][order], dtype=torch.float32, device=device)
    init = init[:, None].expand(M, K, N_AGENTS, 3).reshape(M * K, N_AGENTS, 3)
    S, F, T, _ = rollout(ref, init, torch.Generator(device=device).manual_seed(config.seed))
    S_np = S.cpu().numpy()
    exp_states = train["states"][order]
    report(progress, 0.15, f"occupancy matching: {M * K} OT problems")

    # 2. occupancy-measure-matching distance to the scene's own expert log; ranking
    d = omf_distance(S_np, np.repeat(exp_states, K, 0), config.event_weight, device).reshape(M, K)
    mc = min(M, 32)                                         # negative control: another scene's log
    other = np.roll(np.arange(mc), 1)
    d_ctrl = omf_distance(S_np[:mc * K], np.repeat(exp_states[other], K, 0), config.event_weight,
                          device).reshape(mc, K)
    coll, off = events(S_np)
    fail = (coll.any(1) | off.any(1)).any(-1).reshape(M, K)
    iu, ju = np.triu_indices(K, 1)
    mixed = fail[:, iu] != fail[:, ju]
    clean_first = ~fail[:, iu]

    def agree(dist):
        n = len(dist)
        ok = (dist[:, iu] < dist[:, ju]) == clean_first[:n]
        return float(ok[mixed[:n]].mean()) if mixed[:n].any() else float("nan")

    rank = np.argsort(d, 1)
    F = F.reshape(M, K, HORIZON, N_AGENTS, N_FEAT)
    T = T.reshape(M, K, HORIZON, N_AGENTS)
    ar = torch.arange(M, device=device)
    r = torch.as_tensor(rank, device=device)
    win = torch.cat([F[ar, r[:, 0]], F[ar, r[:, 1]]]), torch.cat([T[ar, r[:, 0]], T[ar, r[:, 1]]])
    lose = torch.cat([F[ar, r[:, -1]], F[ar, r[:, -2]]]), torch.cat([T[ar, r[:, -1]], T[ar, r[:, -2]]])
    report(progress, 0.35, "DPO on DPA-OMF pairs")

    methods = {"reference": ref}
    losses, snaps = {}, {}
    marks = sorted(set(np.linspace(0, config.dpo_steps, 5).round().astype(int).tolist()))
    pol, losses["DPA-OMF"], snaps["DPA-OMF"] = _dpo(ref, (win[0], win[1], lose[0], lose[1]), config,
                                                   config.dpo_steps, ProgressSpan(progress, 0.35, 0.6), marks)
    methods["DPA-OMF"] = pol
    if config.baseline:
        es = torch.as_tensor(exp_states, dtype=torch.float32, device=device)
        ef = expert_features(es)
        et = torch.as_tensor(train["tokens"][order], device=device)
        pol, losses["adversarial"], snaps["adversarial"] = _dpo(
            ref, (torch.cat([ef, ef]), torch.cat([et, et]), lose[0], lose[1]), config, config.dpo_steps,
            ProgressSpan(progress, 0.6, 0.8), marks)
        methods["adversarial"] = pol
    report(progress, 0.8, "evaluating on held-out scenes")

    # held-out OMF distance along DPO (16 scenes; the step-0 copy is the reference, evaluated once)
    curve_pols = [ref] + [p for v in snaps.values() for p in v[1:]]
    curve_d = [float(e[1].mean()) for e in _evaluate(curve_pols, held, config.seed, device, config.event_weight,
                                                     n_scenes=16, reps=1)]
    curves, i = {}, 1
    for name, v in snaps.items():
        curves[name] = np.asarray(curve_d[:1] + curve_d[i:i + len(v) - 1])
        i += len(v) - 1

    table, errors, vs, ve = {}, {}, {}, {}
    evals = _evaluate(list(methods.values()), held, config.seed, device, config.event_weight)
    for name, (Sh, dh, ch, oh) in zip(methods, evals):
        table[name], errors[name] = _realism(Sh, dh, ch, oh, held, N_HELD, EVAL_REPS, rng)
        vs[name] = Sh[:N_HELD].astype(np.float32)
        ve[name] = (ch | oh)[:N_HELD]
    vs["expert"] = held["states"].astype(np.float32)
    ce, oe = events(held["states"])
    ve["expert"] = ce | oe

    sw_m, sw_d, sw_f, sw_p = [], [], [], []
    if config.sweep:
        sizes = [m for m in [16, 32, 64, 128, 256, 400] if m <= M]
        for i, m in enumerate(sizes):
            report(progress, 0.85 + 0.14 * i / len(sizes), f"scaling sweep: M = {m}")
            if m == M:                                      # the same DPO run as the main DPA-OMF policy
                sw_p.append(methods["DPA-OMF"])
                continue
            idx = torch.cat([torch.arange(m), torch.arange(M, M + m)]).to(device)
            sw_p.append(_dpo(ref, (win[0][idx], win[1][idx], lose[0][idx], lose[1][idx]), config,
                             config.dpo_steps, None)[0])
        for m, (_s, dh, ch, oh) in zip(sizes, _evaluate(sw_p, held, config.seed, device, config.event_weight)):
            sw_m.append(m)
            sw_d.append(float(dh.mean()))
            sw_f.append(float((ch.any(1) | oh.any(1)).mean()))

    s0 = 0
    ref_t, dpa_t = table["reference"], table["DPA-OMF"]
    met = {
        "ref_failure": ref_t["failure"], "dpa_failure": dpa_t["failure"],
        "ref_omf": ref_t["omf"], "dpa_omf": dpa_t["omf"],
        "fail_ratio": dpa_t["failure"] / max(ref_t["failure"], 1e-9),
        "omf_ratio": dpa_t["omf"] / max(ref_t["omf"], 1e-9),
        "agreement": agree(d), "agreement_control": agree(d_ctrl), "n_mixed_pairs": float(mixed.sum()),
        "pref_fail_rate": float(fail.mean()),
    }
    # where the held-out OMF curve of DPA-OMF (16 scenes, DPO checkpoints) was lowest: a minimum before the last
    # checkpoint followed by a rise is the sign of over-optimising the preference pairs
    cv = curves.get("DPA-OMF", np.zeros(0))
    if len(cv) > 1:
        j = int(np.argmin(cv))
        met.update(curve_best_step=float(marks[j]), curve_best_omf=float(cv[j]), curve_last_omf=float(cv[-1]),
                   curve_first_omf=float(cv[0]))
    if "adversarial" in table:
        adv = table["adversarial"]
        met.update(adv_failure=adv["failure"], adv_omf=adv["omf"], omf_gap=adv["omf"] - dpa_t["omf"],
                   fail_gap=adv["failure"] + 0.01 - dpa_t["failure"])
    # lower is better for every realism metric; a cost of alignment that no badge sees is reported on the page
    worse = [k for k in REALISM_KEYS if dpa_t[k] > WORSE_FACTOR * ref_t[k] + 1e-12]
    report(progress, 1.0, "done")
    return Result(metrics=met, table=table, errors=errors, worse_than_reference=worse,
                  view_states=vs, view_events=ve,
                  rank_states=S_np.reshape(M, K, HORIZON + 1, N_AGENTS, 3)[s0, rank[s0]].astype(np.float32),
                  rank_events=(coll | off).reshape(M, K, HORIZON + 1, N_AGENTS)[s0, rank[s0]],
                  rank_dist=d[s0, rank[s0]], rank_expert=exp_states[s0].astype(np.float32),
                  loss_curves=losses, curve_steps=np.asarray(marks), curve_omf=curves,
                  sweep_m=np.asarray(sw_m), sweep_omf=np.asarray(sw_d), sweep_fail=np.asarray(sw_f))


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    out = [
        Claim("Aligning with DPO on implicit-feedback pairs cuts the pre-trained model's failures "
              "(collision or off-road) on held-out scenes", m["fail_ratio"], "<=", 0.75,
              label="failures DPA-OMF / reference",
              detail=f"{m['dpa_failure']:.3f} vs {m['ref_failure']:.3f} of agent trajectories"),
        Claim("…and moves its occupancy closer to the held-out expert logs", m["omf_ratio"], "<=", 0.90,
              label="OMF distance DPA-OMF / reference", detail=f"{m['dpa_omf']:.3f} vs {m['ref_omf']:.3f}"),
    ]
    if "omf_gap" in m:
        out += [
            # strictly better, where the spec allows a tie: with 0 DPO steps both models are the reference and tie
            # exactly, and that run must fail this badge (tests/test_implicit_preference_motion.py)
            Claim("Ranking the model's own samples beats treating every sample as worse than the expert "
                  "(occupancy distance)", m["omf_gap"], ">", 0.0, label="OMF(adversarial) − OMF(DPA-OMF)",
                  detail=f"{m['adv_omf']:.3f} vs {m['dpa_omf']:.3f}"),
            Claim("…without more failures than the adversarial baseline", m["fail_gap"], ">=", 0.0,
                  label="failures(adv) + 0.01 − failures(DPA-OMF)",
                  detail=f"{m['adv_failure']:.3f} vs {m['dpa_failure']:.3f}"),
        ]
    out.append(Claim("The occupancy distance to the scene's own demonstration prefers the clean rollout when "
                     "exactly one of two has a collision or leaves the road", m["agreement"], ">=", AGREE_BAR,
                     label="agreement with the obvious preference",
                     detail=f"{int(m['n_mixed_pairs'])} mixed pairs; chance 0.5"))
    # added 2026-12-07: the spec's negative control for the claim above, measured as a badge; it fails here because
    # the collision / off-road occupancy features (zero in every expert log) already rank event rollouts last
    out.append(Claim("…and it is the scene's own demonstration that carries this preference: scored against another "
                     "scene's log, the distance falls below the same bar", m["agreement_control"], "<", AGREE_BAR,
                     label="agreement with another scene's expert log",
                     detail=f"{m['agreement_control']:.2f} against another scene's log vs {m['agreement']:.2f} "
                            "against the scene's own"))
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "train":
        train_reference()
    else:
        print("usage: python -m engine.implicit_preference_motion train")
