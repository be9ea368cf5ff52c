"""BlendRL: a pixel MLP policy and a differentiable logic policy blended by a learned gate.

Game ("climber", numpy-vectorised, Kangaroo-like): 3 floors x 9 columns. A ladder joins floor 0 to 1
and floor 1 to 2; the bell (goal) is on floor 2. One ball per floor rolls and bounces at the walls;
touching it ends the episode (-1), the bell gives +1, every step costs 0.01, 80 steps at most.
Actions: left, right, up (climbs on a ladder cell), jump (stay put and let a ball pass), noop.

Policies:
  neural  MLP on the binary image (agent / balls / ladders+bell / balls one step earlier, 4 x 3 x 9)
  logic   weighted rules over object predicates, one soft forward-reasoning step (NSFR-style);
          rule weights are learned, a small MLP on the object state is its critic
  blend   beta = softmax over the blender rules (neural_agent :- ball_close, logic_agent :- nothing_around),
          pi = beta_n pi_neural + beta_l pi_logic, V = beta_n V_neural + beta_l V_logic
All three are trained with PPO (blend-entropy bonus on beta). ``python -m engine.blendrl train`` writes
the checkpoints to assets/blendrl/; the page evaluates them live and can also train one agent live.

Evaluation variants (never trained on): fast balls, mirrored (the whole game reflected, the badge), two balls, and
two shown without a badge that follow the kinds of change in the authors' robustness evaluation (HackAtari):
relocated ladders (Kangaroo's ladders moved inward; start and goal stay, the walk on the middle floor reverses)
and no balls (Seaquest's enemies / Donkey Kong's barrels removed).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as tnn

from engine.core import Bool, Choice, Claim, Float, InputError, Int, param, seed_everything
from engine.core.nn import asset_path, load_state, make_optimizer, mlp, save_state, set_cpu_threads
from engine.core.progress import ProgressSpan, report

SLUG = "blendrl"
FLOORS, COLS, T_MAX = 3, 9, 80
ACTIONS = ("left", "right", "up", "jump", "noop")
LEFT, RIGHT, UP, JUMP, NOOP = range(5)
AGENTS = ("neural", "logic", "blend")
# the blend agent's blending function: BlendRL's two blender rules, or a small MLP on the object state (the paper's
# neural blender); each has its own checkpoint ("blend", "blend_mlp")
BLENDERS = ("logic", "mlp")
BLEND_KIND = {"logic": "blend", "mlp": "blend_mlp"}
KINDS = AGENTS + ("blend_mlp",)
VARIANTS = ("standard", "fast balls", "mirrored", "two balls", "relocated ladders", "no balls")
# variants that follow the paper's own kinds of change; shown next to the badges, never a badge
PAPER_VARIANTS = ("relocated ladders", "no balls")
STEP_COST = 0.01
GAMMA = 0.99
# potential-based progress shaping k·(γΦ(s') − Φ(s)) with Φ = floors climbed + 1 − |col − target|/8, the same
# reward for every agent (it leaves the optimal policies unchanged, Ng et al. 1999); it only speeds up learning
SHAPING = 0.1
TEMP = 0.25          # temperature (in cells) of the soft predicates
GAMMA_S = 0.01       # softor temperature
# clauses: (action, body predicate names)
CLAUSES = (
    ("up", ("on_ladder",)),
    ("right", ("ladder_right",)),
    ("left", ("ladder_left",)),
    ("right", ("bell_right",)),
    ("left", ("bell_left",)),
)
CLAUSE_TEXT = tuple(f"{a}(X) :- {', '.join(b)}(X)" for a, b in CLAUSES)
BLEND_TEXT = ("neural_agent(X) :- ball_close(X)", "logic_agent(X) :- nothing_around(X)")
Z_DIM = 8
RANDOM_START = 1.0    # share of training episodes that restart on a random floor and column
IMG_CH = 4           # agent, balls, ladders + bell, balls one step earlier
TRAIN_STEPS = 600_000
TRAIN_SEEDS = (0, 1, 2)        # the script keeps each agent's median seed (by standard-layout success)


# ============================================================================ environment


def layout(variant: str) -> dict:
    """Ladder columns, bell column, start column, ball speed and ball floors of a variant."""
    lad, bell, start = (COLS - 1, 0), COLS - 1, 0
    if variant == "mirrored":
        lad, bell, start = (0, COLS - 1), 0, COLS - 1
    elif variant == "relocated ladders":
        # like HackAtari's Kangaroo ladder change: ladders moved inward, start and bell stay; floor 0 still walks
        # right (4 cells), floor 1 now walks right (2 cells, was left), floor 2 still walks right (2 cells)
        lad = (4, 6)
    balls = {"two balls": (0, 1, 1, 2), "no balls": ()}.get(variant, (0, 1, 2))
    return dict(ladders=lad, bell=bell, start=start, speed=2 if variant == "fast balls" else 1, ball_floors=balls)


class Climber:
    """N copies of the climber game, stepped together (auto-reset when ``auto_reset``)."""

    def __init__(self, n: int, variant: str, rng: np.random.Generator, auto_reset: bool = True,
                 random_start: float = 0.0):
        if variant not in VARIANTS:
            raise InputError(f"unknown environment variant {variant!r}")
        self.n, self.rng, self.auto_reset, self.random_start = n, rng, auto_reset, random_start
        L = layout(variant)
        self.ladders = np.array(L["ladders"])
        self.bell, self.start, self.speed = L["bell"], L["start"], L["speed"]
        self.bfloor = np.array(L["ball_floors"])
        self.k = len(self.bfloor)
        self.af = np.zeros(n, int)
        self.ac = np.zeros(n, int)
        self.bc = np.zeros((n, self.k), int)
        self.bd = np.zeros((n, self.k), int)
        self.pbc = np.zeros((n, self.k), int)    # ball columns one step earlier (the second stacked frame)
        self.t = np.zeros(n, int)
        self.reset(np.ones(n, bool))

    def reset(self, mask: np.ndarray) -> None:
        m = int(mask.sum())
        if m == 0:
            return
        self.af[mask] = 0
        self.ac[mask] = self.start
        self.t[mask] = 0
        bc = self.rng.integers(0, COLS, size=(m, self.k))
        # the floor-0 ball starts at least 4 cells from the agent
        far = np.array([c for c in range(COLS) if abs(c - self.start) >= 4])
        b0 = self.bfloor == 0
        bc[:, b0] = far[self.rng.integers(0, len(far), size=(m, int(b0.sum())))]
        if self.random_start > 0:
            # training restarts: with probability random_start from a uniformly random floor and column (the
            # balls on that floor >= 3 cells away), otherwise from the normal start
            rand = self.rng.random(m) < self.random_start
            af = np.where(rand, self.rng.integers(0, FLOORS, size=m), 0)
            ac = np.where(rand, self.rng.integers(0, COLS, size=m), self.start)
            far3 = [np.array([c for c in range(COLS) if abs(c - a) >= 3]) for a in range(COLS)]
            for j in range(self.k):
                on = rand & (af == self.bfloor[j])
                pick = self.rng.integers(0, 1 << 30, size=m)
                bc[on, j] = [far3[a][q % len(far3[a])] for a, q in zip(ac[on], pick[on])]
            self.af[mask], self.ac[mask] = af, ac
        self.bc[mask] = bc
        self.bd[mask] = self.rng.choice((-1, 1), size=(m, self.k))
        self.pbc[mask] = np.clip(bc - self.bd[mask], 0, COLS - 1)    # as if each ball had just rolled in

    def state(self) -> dict:
        return dict(af=self.af.copy(), ac=self.ac.copy(), bc=self.bc.copy(), bd=self.bd.copy())

    def potential(self) -> np.ndarray:
        """Progress Φ in [0, 3]: floors climbed plus closeness to the current target (ladder, then bell)."""
        top = self.af == FLOORS - 1
        target = np.where(top, self.bell, self.ladders[np.minimum(self.af, 1)])
        return self.af + 1.0 - np.abs(self.ac - target) / (COLS - 1)

    def step(self, a: np.ndarray):
        n = self.n
        phi0 = self.potential()
        oldc, oldf = self.ac.copy(), self.af.copy()
        top = self.af == FLOORS - 1
        lad = np.where(top, -1, self.ladders[np.minimum(self.af, 1)])
        climb = (a == UP) & (self.ac == lad)
        self.ac = np.clip(self.ac + (a == RIGHT) - (a == LEFT), 0, COLS - 1)
        self.af = self.af + climb
        same = self.bfloor[None, :] == self.af[:, None]                      # (n, k)
        hit = np.zeros((n, self.k), bool)
        self.pbc = self.bc.copy()
        for s in range(self.speed):
            prev = self.bc.copy()
            nxt = self.bc + self.bd
            bounce = (nxt < 0) | (nxt > COLS - 1)
            self.bd = np.where(bounce, -self.bd, self.bd)
            self.bc = np.where(bounce, self.bc + self.bd, nxt)
            hit |= self.bc == self.ac[:, None]
            if s == 0:   # agent and ball swapped cells on the same floor (moved through each other)
                stay = (oldf == self.af)[:, None]
                hit |= stay & (self.bc == oldc[:, None]) & (prev == self.ac[:, None])
        hit = (hit & same).any(1) & (a != JUMP)
        self.t += 1
        goal = (self.af == FLOORS - 1) & (self.ac == self.bell) & ~hit
        shaping = SHAPING * (GAMMA * self.potential() - phi0)
        r = -STEP_COST + goal * 1.0 - hit * 1.0 + shaping
        done = goal | hit | (self.t >= T_MAX)
        info = dict(goal=goal, hit=hit, shaping=shaping.astype(np.float32))
        if self.auto_reset:
            self.reset(done)
        return r.astype(np.float32), done, info

    # -- observations -----------------------------------------------------------------
    def image(self) -> np.ndarray:
        """Binary (n, 4, 3, 9): agent, balls, ladders + bell, balls one step earlier (what the neural side sees;
        the last channel is a two-frame stack, as Atari agents stack frames, so the balls' direction is visible)."""
        img = np.zeros((self.n, IMG_CH, FLOORS, COLS), np.float32)
        i = np.arange(self.n)
        img[i, 0, self.af, self.ac] = 1
        for j in range(self.k):
            img[i, 1, self.bfloor[j], self.bc[:, j]] = 1
            img[i, 3, self.bfloor[j], self.pbc[:, j]] = 1
        img[:, 2, 0, self.ladders[0]] = 1
        img[:, 2, 1, self.ladders[1]] = 1
        img[:, 2, 2, self.bell] = 1
        return img

    def objects(self) -> np.ndarray:
        """Object state z (n, 8): floor/2, col/8, target col/8 (ladder or bell), nearest ball on the
        agent's floor (signed offset/8, its direction, present flag), both ladder cols/8."""
        top = self.af == FLOORS - 1
        target = np.where(top, self.bell, self.ladders[np.minimum(self.af, 1)])
        same = self.bfloor[None, :] == self.af[:, None]
        off = np.where(same, self.bc - self.ac[:, None], 99)
        i = np.arange(self.n)
        if self.k:
            j = np.abs(off).argmin(1)
            o, d = off[i, j], self.bd[i, j]
        else:                                  # "no balls": no ball on any floor
            o, d = np.full(self.n, 99), np.zeros(self.n)
        present = np.abs(o) < 99
        z = np.stack([self.af / 2, self.ac / 8, target / 8, np.where(present, o, 9) / 8,
                      np.where(present, d, 0), present * 1.0,
                      np.full(self.n, self.ladders[0] / 8), np.full(self.n, self.ladders[1] / 8)], 1)
        return z.astype(np.float32)


# ============================================================================ policies


def predicates(z: torch.Tensor) -> dict[str, torch.Tensor]:
    """Soft ground atoms in [0, 1] from the object state (distances in cells, temperature TEMP)."""
    floor = torch.round(z[:, 0] * 2)
    col, target = z[:, 1] * 8, z[:, 2] * 8
    d = target - col
    top = (floor >= FLOORS - 1).float()
    dist = torch.abs(z[:, 3] * 8)
    s = torch.sigmoid
    return dict(
        on_ladder=s((0.5 - d.abs()) / TEMP) * (1 - top),
        ladder_right=s((d - 0.5) / TEMP) * (1 - top),
        ladder_left=s((-d - 0.5) / TEMP) * (1 - top),
        bell_right=s((d - 0.5) / TEMP) * top,
        bell_left=s((-d - 0.5) / TEMP) * top,
        ball_close=s((2.5 - dist) / TEMP),
        nothing_around=s((dist - 4.5) / TEMP),
    )


def softor(x: torch.Tensor, dim: int = -1, gamma: float = GAMMA_S) -> torch.Tensor:
    return gamma * torch.logsumexp(x / gamma, dim=dim)


def valuations_to_dist(p: torch.Tensor) -> torch.Tensor:
    """Action (or blender) valuations in [0,1] -> distribution: softmax of logit(clip(p, .01, .99))."""
    p = p.clamp(0.01, 0.99)
    return torch.softmax(torch.log(p) - torch.log1p(-p), dim=-1)


class BlendAgent(tnn.Module):
    def __init__(self, kind: str):
        super().__init__()
        if kind not in KINDS:
            raise InputError(f"unknown agent {kind!r}")
        self.kind = kind
        self.actor = mlp([IMG_CH * FLOORS * COLS, 64, 64, len(ACTIONS)], act=tnn.Tanh)
        self.critic = mlp([IMG_CH * FLOORS * COLS, 64, 64, 1], act=tnn.Tanh)
        self.rule_logits = tnn.Parameter(torch.zeros(len(CLAUSES)))      # weights sigmoid(0) = 0.5
        self.logic_critic = mlp([Z_DIM, 64, 1], act=tnn.Tanh)
        self.blend_logits = tnn.Parameter(torch.zeros(2))
        if kind == "blend_mlp":     # neural blender: logits of (beta_n, beta_l) from the object state
            self.blender = mlp([Z_DIM, 32, 2], act=tnn.Tanh)
        self._amask = torch.zeros(len(CLAUSES), len(ACTIONS), dtype=torch.bool)
        for c, (a, _) in enumerate(CLAUSES):
            self._amask[c, ACTIONS.index(a)] = True

    def logic_probs(self, z: torch.Tensor, return_v: bool = False):
        P = predicates(z)
        body = torch.stack([torch.stack([P[b] for b in bs], 0).prod(0) for _, bs in CLAUSES], 1)   # (n, C)
        v = torch.sigmoid(self.rule_logits) * body
        vv = torch.where(self._amask[None], v[:, :, None], torch.full_like(v[:, :, None], -1e4))  # (n, C, A)
        pa = softor(vv, dim=1).clamp(min=0.0)        # actions without a rule -> 0
        out = valuations_to_dist(pa)
        return (out, v) if return_v else out

    def beta(self, z: torch.Tensor) -> torch.Tensor:
        """(n, 2) = (beta_neural, beta_logic)."""
        n = z.shape[0]
        if self.kind == "neural":
            return torch.tensor([1.0, 0.0]).expand(n, 2)
        if self.kind == "logic":
            return torch.tensor([0.0, 1.0]).expand(n, 2)
        if self.kind == "blend_mlp":
            return torch.softmax(self.blender(z), -1)
        P = predicates(z)
        v = torch.sigmoid(self.blend_logits)[None] * torch.stack([P["ball_close"], P["nothing_around"]], 1)
        return valuations_to_dist(v)

    def neural_probs(self, x: torch.Tensor) -> torch.Tensor:
        """pi_neural(.|x) from the flattened image."""
        return torch.softmax(self.actor(x), -1)

    def forward(self, img: torch.Tensor, z: torch.Tensor):
        """Mixture probabilities (n, A), value (n,), beta (n, 2)."""
        x = img.flatten(1)
        b = self.beta(z)
        probs = torch.zeros(x.shape[0], len(ACTIONS))
        value = torch.zeros(x.shape[0])
        if self.kind != "logic":
            probs = probs + b[:, :1] * self.neural_probs(x)
            value = value + b[:, 0] * self.critic(x)[:, 0]
        if self.kind != "neural":
            probs = probs + b[:, 1:] * self.logic_probs(z)
            value = value + b[:, 1] * self.logic_critic(z)[:, 0]
        return probs, value, b


class ReflexBlend(BlendAgent):
    """Diagnostic counterfactual (never trained, never a claim): a trained blend agent whose neural side is
    replaced by a layout-free reflex, ``jump`` whenever the blender hands it control. Same gate, same rules."""

    def __init__(self, blend: BlendAgent):
        super().__init__(blend.kind)
        self.load_state_dict(blend.state_dict())
        self.eval()

    def neural_probs(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.full((x.shape[0],), JUMP), len(ACTIONS)).float()


# ============================================================================ PPO



def gae_advantages(rews: list, vals: list, last_v, dones: list, gamma: float, lam: float):
    """Generalised advantage estimates, backwards over a rollout of T steps (lists of (n_envs,) tensors):
    δ_t = r_t + γ V(s_{t+1}) (1 − d_t) − V(s_t), A_t = δ_t + γλ (1 − d_t) A_{t+1}; V after the last step is
    ``last_v``. An episode end stops both the bootstrap and the sum. Returns a (T, n_envs) tensor."""
    import torch

    T = len(rews)
    adv = torch.zeros(T, len(last_v))
    acc = torch.zeros(len(last_v))
    for t in reversed(range(T)):
        nv = last_v if t == T - 1 else vals[t + 1]
        nonterm = 1 - dones[t]
        delta = rews[t] + gamma * nv * nonterm - vals[t]
        acc = delta + gamma * lam * nonterm * acc
        adv[t] = acc
    return adv


def ppo_loss(p, v, b, a, lp_old, adv, ret, blend_ent: float):
    """PPO minibatch loss of the blended agent, to be minimised.

    p (n, A) mixture action probabilities, v (n,) mixture values, b (n, 2) blending weights (β_n, β_l), a (n,)
    actions taken, lp_old (n,) their log-probabilities at collection time, adv / ret (n,) GAE advantages and
    returns. Clipped surrogate (ε = 0.2, advantages standardised in the minibatch) + 0.5 · value loss − 0.01 ·
    entropy of π − blend_ent · entropy of (β_n, β_l): both entropies are bonuses, so minimising the loss pushes the
    blending weights towards 50/50 and keeps the blender from collapsing onto one side early."""
    lp = torch.log(p.gather(1, a[:, None])[:, 0] + 1e-8)
    A = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = torch.exp(lp - lp_old)
    pg = -torch.min(ratio * A, ratio.clamp(0.8, 1.2) * A).mean()
    vf = 0.5 * ((v - ret) ** 2).mean()
    ent = -(p * torch.log(p + 1e-8)).sum(1).mean()
    bent = -(b * torch.log(b + 1e-8)).sum(1).mean()
    return pg + 0.5 * vf - 0.01 * ent - blend_ent * bent


LIVE_ENVS, LIVE_HORIZON = 32, 64      # PPO rollout shape of train_agent


def ppo_iterations(steps: int, n_envs: int = LIVE_ENVS, horizon: int = LIVE_HORIZON) -> int:
    """Whole PPO rollouts that fit in ``steps`` environment steps (at least one)."""
    return max(1, steps // (n_envs * horizon))


def train_agent(kind: str, steps: int, seed: int, blend_ent: float = 0.01, n_envs: int = LIVE_ENVS,
                horizon: int = LIVE_HORIZON,
                lr: float = 1e-3, progress=None, log_every: int = 4096, random_start: float = RANDOM_START):
    """PPO (clip .2, gamma .99, GAE .95, vf .5, ent .01, blend-ent, grad clip .5, 4 epochs x 4 minibatches)."""
    set_cpu_threads()
    seed_everything(seed)
    rng = np.random.default_rng(seed)
    env = Climber(n_envs, "standard", rng, random_start=random_start)
    agent = BlendAgent(kind)
    opt = make_optimizer(agent.parameters(), lr=lr, eps=1e-5)
    gen = torch.Generator().manual_seed(seed)
    iters = ppo_iterations(steps, n_envs, horizon)
    ep_succ = []
    curve_x, curve_ret, curve_succ, rets = [], [], [], []
    cur = np.zeros(n_envs)
    for it in range(iters):
        imgs, zs, acts, logps, vals, rews, dones = [], [], [], [], [], [], []
        for _ in range(horizon):
            img, z = torch.from_numpy(env.image()), torch.from_numpy(env.objects())
            with torch.no_grad():
                p, v, _ = agent(img, z)
            a = torch.multinomial(p, 1, generator=gen)[:, 0]
            r, d, info = env.step(a.numpy())
            cur += r - info["shaping"]   # logged return: the game's own reward
            for i in np.flatnonzero(d):
                rets.append(cur[i])
                ep_succ.append(float(info["goal"][i]))
            cur[d] = 0
            imgs.append(img)
            zs.append(z)
            acts.append(a)
            logps.append(torch.log(p.gather(1, a[:, None])[:, 0] + 1e-8))
            vals.append(v)
            rews.append(torch.from_numpy(r))
            dones.append(torch.from_numpy(d.astype(np.float32)))
        with torch.no_grad():
            _, last_v, _ = agent(torch.from_numpy(env.image()), torch.from_numpy(env.objects()))
        adv = gae_advantages(rews, vals, last_v, dones, GAMMA, 0.95)
        ret = adv + torch.stack(vals)
        B = dict(img=torch.cat(imgs), z=torch.cat(zs), a=torch.cat(acts), lp=torch.cat(logps),
                 adv=adv.flatten(), ret=ret.flatten())
        N = n_envs * horizon
        for _ in range(4):
            perm = torch.randperm(N, generator=gen)
            for mb in perm.view(4, -1):
                p, v, b = agent(B["img"][mb], B["z"][mb])
                loss = ppo_loss(p, v, b, B["a"][mb], B["lp"][mb], B["adv"][mb], B["ret"][mb], blend_ent)
                opt.zero_grad()
                loss.backward()
                tnn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                opt.step()
        curve_x.append((it + 1) * N)
        curve_ret.append(float(np.mean(rets[-100:])) if rets else 0.0)
        curve_succ.append(float(np.mean(ep_succ[-100:])) if ep_succ else 0.0)
        report(progress, (it + 1) / iters, f"PPO {kind}: {(it + 1) * N:,} steps")
    log = dict(steps=np.array(curve_x), ret=np.array(curve_ret), succ=np.array(curve_succ))
    return agent, log


# ============================================================================ evaluation


def evaluate(agent: BlendAgent, variant: str, n: int, seed: int) -> dict:
    return evaluate_many(agent, (variant,), n, seed)[variant]


def evaluate_many(agent: BlendAgent, variants, n: int, seed: int) -> dict:
    """n sampled episodes per variant, all variants in one batch: success, mean return, progress (highest
    floor reached, bell = 3, divided by 3), mean beta_n near (ball <= 2 cells) and far (no ball within 4), and
    the share of visited states in which the neural side has control (beta_n > 0.5)."""
    envs = [Climber(n, v, np.random.default_rng(seed + 31 * k), auto_reset=False) for k, v in enumerate(variants)]
    gen = torch.Generator().manual_seed(seed)
    V = len(envs)
    alive = np.ones((V, n), bool)
    ret, succ, top = np.zeros((V, n)), np.zeros((V, n)), np.zeros((V, n))
    b_near, b_far = [[] for _ in envs], [[] for _ in envs]
    n_vis, n_neur = np.zeros(V), np.zeros(V)
    while alive.any():
        img = torch.from_numpy(np.concatenate([e.image() for e in envs]))
        z = torch.from_numpy(np.concatenate([e.objects() for e in envs]))
        with torch.no_grad():
            p, _, b = agent(img, z)
        a = torch.multinomial(p, 1, generator=gen)[:, 0].numpy().reshape(V, n)
        dist = np.abs(z[:, 3].numpy() * 8).reshape(V, n)
        bn = b[:, 0].numpy().reshape(V, n)
        for k, env in enumerate(envs):
            b_near[k].append(bn[k][alive[k] & (dist[k] <= 2)])
            b_far[k].append(bn[k][alive[k] & (dist[k] > 4)])
            n_vis[k] += alive[k].sum()
            n_neur[k] += (alive[k] & (bn[k] > 0.5)).sum()
            r, d, info = env.step(a[k])
            ret[k] += (r - info["shaping"]) * alive[k]      # the game's own return, without the shaping
            succ[k] += info["goal"] * alive[k]
            top[k] = np.where(alive[k], np.maximum(top[k], env.af + info["goal"]), top[k])
            alive[k] &= ~d
    out = {}
    for k, v in enumerate(variants):
        bn, bf = np.concatenate(b_near[k]), np.concatenate(b_far[k])
        out[v] = dict(success=float(succ[k].mean()), ret=float(ret[k].mean()), progress=float(top[k].mean() / FLOORS),
                      beta_near=float(bn.mean()) if bn.size else float("nan"),
                      beta_far=float(bf.mean()) if bf.size else float("nan"),
                      neural_share=float(n_neur[k] / max(n_vis[k], 1)))
    return out


def rollout(agent: BlendAgent, variant: str, seed: int) -> dict:
    """One rendered episode: positions, actions, beta_n, fired clause per step (-1: none, always for a neural agent)."""
    rng = np.random.default_rng(seed)
    env = Climber(1, variant, rng, auto_reset=False)
    gen = torch.Generator().manual_seed(seed)
    frames, acts, betas, fired, rews = [env.state()], [], [], [], []
    for _ in range(T_MAX):
        img, z = torch.from_numpy(env.image()), torch.from_numpy(env.objects())
        with torch.no_grad():
            p, _, b = agent(img, z)
            _, v = agent.logic_probs(z, return_v=True)
        a = int(torch.multinomial(p, 1, generator=gen)[0, 0])
        r, d, info = env.step(np.array([a]))
        acts.append(a)
        betas.append(float(b[0, 0]))
        rews.append(float(r[0] - info["shaping"][0]))
        # a neural agent never consults its (untrained) rules: no rule is named for its steps
        fired.append(int(v[0].argmax()) if agent.kind != "neural" and float(v[0].max()) > 0.05 else -1)
        frames.append(env.state())
        if d[0]:
            break
    return dict(af=np.array([f["af"][0] for f in frames]), ac=np.array([f["ac"][0] for f in frames]),
                bc=np.array([f["bc"][0] for f in frames]), bfloor=env.bfloor.copy(), ladders=env.ladders.copy(),
                bell=env.bell, actions=np.array(acts), beta_n=np.array(betas), fired=np.array(fired),
                rewards=np.array(rews), goal=bool(info["goal"][0]), hit=bool(info["hit"][0]))


def beta_map(agent: BlendAgent) -> np.ndarray:
    """beta_n on floor 1 over (ball column, agent column), ball moving left."""
    rng = np.random.default_rng(0)
    env = Climber(COLS * COLS, "standard", rng, auto_reset=False)
    bc, ac = np.meshgrid(np.arange(COLS), np.arange(COLS), indexing="ij")
    env.af[:] = 1
    env.ac[:] = ac.ravel()
    env.bc[:, 1] = bc.ravel()
    env.bd[:, 1] = -1
    with torch.no_grad():
        b = agent.beta(torch.from_numpy(env.objects()))[:, 0].numpy()
    return b.reshape(COLS, COLS)


# ============================================================================ page entry


@dataclass(frozen=True)
class Config:
    render_agent: str = param("blend", Choice(AGENTS, "Agent for the rendered episode", widget="radio"))
    blender: str = param("logic", Choice(BLENDERS, "Blending function of the blend agent", widget="radio",
                                         labels=("logic rules (BlendRL's)", "MLP on the object state"),
                                         help="the blend agent's gate β: two weighted rules over predicates, or "
                                              "a small neural network on the object positions (its own checkpoint, "
                                              "or trained live)"))
    variant: str = param("standard", Choice(VARIANTS, "Environment of the rendered episode",
                                            help="Evaluation always covers all variants"))
    episodes: int = param(256, Int(64, 512, "Evaluation episodes per agent and variant", step=64))
    live: bool = param(False, Bool("Train from scratch (live)",
                                   help="Train the rendered agent now instead of loading the shipped checkpoint"))
    live_steps: int = param(30_000, Int(5_000, 60_000, "Live training steps", step=5_000, group="Live training",
                                        help="rounded down to whole PPO rollouts of 32 environments × 64 steps"))
    blend_ent: float = param(0.01, Float(0.0, 0.1, "Blend-entropy coefficient", step=0.01,
                                         group="Live training",
                                         help="Bonus on the entropy of (β_n, β_l); only the blend agent has a "
                                              "learned β (the neural and logic agents' β is fixed)"))
    seed: int = param(0, Int(0, 9, "Seed"))


# largest widget setting (live training at most steps): 5 s CPU with 60 000 steps, measured 2026-12-05
HEAVY_CONFIG = Config(live=True, live_steps=60000, episodes=512, variant="two balls")


@dataclass
class Result:
    table: dict                 # agent -> variant -> dict(success, ret, beta_near, beta_far)
    episode: dict
    beta_map: np.ndarray
    rule_weights: np.ndarray    # (clauses,) of the rendered agent; of the blend agent when a neural one is rendered
    blend_weights: np.ndarray
    curves: dict                # agent -> dict(steps, ret, succ)
    source: str
    metrics: dict = field(default_factory=dict)


def checkpoint_path(kind: str):
    return asset_path(f"{SLUG}/{kind}.pt")


TRAIN_TAIL = 5   # training-curve points averaged for "where the curve ends"


def load_agent(kind: str) -> tuple[BlendAgent, dict]:
    path = checkpoint_path(kind)
    if not path.exists():
        raise InputError(f"checkpoint {path.name} is missing; run `python -m engine.blendrl train`")
    ck = load_state(path)
    agent = BlendAgent(kind)
    agent.load_state_dict(ck["state"])
    extra = ck["extra"]
    log = {k: np.asarray(extra[k]) for k in ("steps", "ret", "succ")}
    if "seed_success" in extra:      # standard-layout success of every training seed (the median one is shipped)
        log["seed_success"] = np.asarray(extra["seed_success"])
    return agent.eval(), log


def run(config: Config, progress=None) -> Result:
    set_cpu_threads()
    seed_everything(config.seed)
    agents, curves = {}, {}
    kind_of = {"neural": "neural", "logic": "logic", "blend": BLEND_KIND[config.blender]}
    if config.live:
        agents[config.render_agent], curves[config.render_agent] = train_agent(
            kind_of[config.render_agent], config.live_steps, config.seed, config.blend_ent,
            progress=ProgressSpan(progress, 0.0, 0.85, "live training: "))
        for k in AGENTS:
            if k not in agents:
                agents[k], curves[k] = load_agent(kind_of[k])
        done = ppo_iterations(config.live_steps) * LIVE_ENVS * LIVE_HORIZON
        source = f"{config.render_agent}: trained live for {done:,} steps; others: shipped checkpoints"
    else:
        for k in AGENTS:
            agents[k], curves[k] = load_agent(kind_of[k])
        source = f"shipped checkpoints ({TRAIN_STEPS:,} PPO steps each)"
    if config.blender == "mlp":
        source += "; blend agent with the MLP blender"
    table = {}
    for i, k in enumerate(AGENTS):
        table[k] = evaluate_many(agents[k], VARIANTS, config.episodes, 1000 + 17 * config.seed)
        report(progress, 0.85 + 0.12 * (i + 1) / len(AGENTS), f"evaluated {k}")
    ra = agents[config.render_agent]
    ep = rollout(ra, config.variant, 5000 + config.seed)
    bl = agents["blend"]
    m = dict(
        succ_blend=table["blend"]["standard"]["success"], succ_neural=table["neural"]["standard"]["success"],
        succ_logic=table["logic"]["standard"]["success"],
        beta_near=table["blend"]["standard"]["beta_near"], beta_far=table["blend"]["standard"]["beta_far"],
    )
    m["progress_neural"] = table["neural"]["standard"]["progress"]
    for k, c in curves.items():      # where each training curve ends (random-start training episodes)
        m[f"train_ret_tail_{k}"] = float(np.mean(c["ret"][-TRAIN_TAIL:]))
    m["margin"] = m["succ_blend"] - max(m["succ_neural"], m["succ_logic"])
    for k in ("blend", "neural"):
        for q in ("success", "progress"):
            s, mir = table[k]["standard"][q], table[k]["mirrored"][q]
            # a ratio of two near-zero numbers says nothing: not measurable below 0.05
            m[f"keep_{q}_{k}"] = mir / s if s >= 0.05 else float("nan")
    # diagnostic for the mirrored claim (not a claim): the same gate and rules with a layout-free neural side
    # (jump whenever it has control), on the same evaluation episodes
    rx = evaluate_many(ReflexBlend(bl), ("standard", "mirrored"), config.episodes, 1000 + 17 * config.seed)
    m["reflex_progress"] = (rx["standard"]["progress"], rx["mirrored"]["progress"])
    m["keep_progress_reflex"] = (rx["mirrored"]["progress"] / rx["standard"]["progress"]
                                 if rx["standard"]["progress"] >= 0.05 else float("nan"))
    m["neural_share"] = table["blend"]["standard"]["neural_share"]
    m["neural_share_mirrored"] = table["blend"]["mirrored"]["neural_share"]
    # shown, never a badge: the same ratios on the variants that follow the paper's kinds of change
    m["paper_keep"] = {v: {k: {q: (table[k][v][q] / table[k]["standard"][q] if table[k]["standard"][q] >= 0.05
                                   else float("nan")) for q in ("success", "progress")} for k in AGENTS}
                       for v in PAPER_VARIANTS}
    return Result(table=table, episode=ep, beta_map=beta_map(bl),
                  rule_weights=torch.sigmoid(ra.rule_logits).detach().numpy() if ra.kind != "neural"
                  else torch.sigmoid(bl.rule_logits).detach().numpy(),
                  blend_weights=(torch.sigmoid(bl.blend_logits).detach().numpy() if bl.kind == "blend"
                                 else np.full(2, np.nan)),
                  curves=curves, source=source, metrics=m)


KEEP_BAR = 0.7     # the blend keeps at least this share of its standard-layout progress after a change
BREAK_BAR = 0.5    # ...while the neural agent keeps at most this share


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    wn, wl = result.blend_weights
    if np.isfinite(wn):
        gate_note = (f"states visited by the blend in the standard layout; blender rule weights {wn:.2f} (neural when "
                     f"a ball is close) and {wl:.2f} (rules when nothing is around). Where control goes is written in "
                     "those two rules (BlendRL has an LLM write them, we wrote them); training only weights them, and "
                     "an untrained blender (weights 0.5) routes the same way, so this badge checks the gate, not its "
                     "training. A gate that ignores the state fails it (tested).")
    else:
        gate_note = ("states visited by the blend in the standard layout; the blender is an MLP on the object "
                     "positions, trained by PPO with the rest of the agent: nothing tells it where balls are, so "
                     "this badge checks what training taught the gate.")
    return [
        Claim("A blended agent succeeds more often than either the neural or the logic agent alone",
              measured=m["margin"], op=">=", threshold=0.15, label="success(blend) − max(neural, logic)",
              detail=f"standard layout: blend {m['succ_blend']:.2f}, neural {m['succ_neural']:.2f}, "
                     f"logic {m['succ_logic']:.2f}", fmt=".2f"),
        Claim("Near a ball the blender hands control to the neural policy",
              measured=m["beta_near"], op=">=", threshold=0.6, label="mean β_n, ball ≤ 2 cells", fmt=".2f",
              detail=gate_note),
        Claim("Away from balls the blender hands control to the logic rules",
              measured=m["beta_far"], op="<=", threshold=0.4, label="mean β_n, no ball within 4 cells", fmt=".2f",
              detail=gate_note),
        Claim("The blend survives a mirrored layout (ladders and bell swapped left↔right)",
              measured=m["keep_progress_blend"], op=">=", threshold=KEEP_BAR,
              label="progress(mirrored) / progress(standard), blend",
              detail=f"progress = highest floor reached (bell = 3) / 3; success ratio "
                     f"{m['keep_success_blend']:.2f}", fmt=".2f"),
        Claim("… while the mirrored layout breaks the neural agent",
              measured=m["keep_progress_neural"], op="<=", threshold=BREAK_BAR,
              label="progress(mirrored) / progress(standard), neural",
              detail=f"progress is used because the neural agent rarely reaches the bell; its standard progress "
                     f"is {m['progress_neural']:.3f}"
                     + ("" if np.isfinite(m["keep_progress_neural"]) else " (ratio not measurable below 0.05: failing)"),
              fmt=".2f"),
    ]


# ============================================================================ training script


def train_main(steps: int = TRAIN_STEPS, seeds=TRAIN_SEEDS, kinds=AGENTS) -> None:
    """Train each agent on several seeds, keep the median seed (by standard-layout success)."""
    for kind in kinds:
        runs = []
        for s in seeds:
            t0 = time.time()
            agent, log = train_agent(kind, steps, s)
            ev = evaluate(agent, "standard", 512, 777)
            print(f"{kind} seed {s}: success {ev['success']:.3f} return {ev['ret']:.3f} "
                  f"({time.time() - t0:.0f} s)", flush=True)
            runs.append((ev["success"], s, agent, log))
        runs.sort(key=lambda r: r[0])
        succ, s, agent, log = runs[len(runs) // 2]
        save_state(agent, checkpoint_path(kind),
                   extra=dict(steps=torch.tensor(log["steps"]), ret=torch.tensor(log["ret"]),
                              succ=torch.tensor(log["succ"]), seed=int(s), train_steps=int(steps),
                              seed_success=torch.tensor([r[0] for r in sorted(runs, key=lambda r: r[1])])))
        print(f"{kind}: kept seed {s} (median, success {succ:.3f})", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "train":
        # python -m engine.blendrl train [steps] [agent[,agent]] [seed[,seed]]
        a = sys.argv[2:]
        train_main(int(a[0]) if a else TRAIN_STEPS,
                   tuple(int(x) for x in a[2].split(",")) if len(a) > 2 else TRAIN_SEEDS,
                   tuple(a[1].split(",")) if len(a) > 1 else AGENTS)
    else:
        print("usage: python -m engine.blendrl train [steps]")
