"""SRPL at grid scale: a learned steps-to-cost distribution appended to the agent's input.

Pure numpy. A vectorised slippery gridworld (default "field": a walled 9 x 12 room with two hazard
strips and a one-cell corridor between them, so the short route runs along the hazards and the safe one
goes round a strip; also the paper-like "island": water border and inner lake, a narrow land bridge and a
longer route around, and "two rooms"), online Q(lambda) over short rollouts of parallel
environments (PQN-style: no replay, no target network) with a one-hidden-layer ReLU network
on the cell coordinates, and the safety representation of the paper:

* labels from complete episodes: delta_t = steps until the next cost state, clipped to H_s,
  binned into K = ceil(H_s / bin_size) bins (the last bin also means "safe within H_s");
* a steps-to-cost (S2C) network s -> K logits trained by cross-entropy on a FIFO buffer;
* the Q network sees [s, softmax(S2C(s))]; the S2C output is a constant input for the Q
  update (no gradient flows from the Q loss into the S2C parameters).

Variants: baseline (s), srpl ([s, P(.|s)]), oracle ([s, one-hot of the binned BFS distance to
water]), penalty (baseline with a 5x failure penalty), const ([s, uniform vector], control), and,
for diagnosis only (not on the page), s2c_exact ([s, exact steps-to-cost distribution of the random walk]).

Pairing: every variant of a seed sees the same environment random numbers, and its Q network draws
the coordinate weights, kinks and output layer exactly as the plain one; the appended probability
vector gets its own weights and the kinks sit at its centre, so fed the uniform vector an augmented
network starts as the plain network. (An earlier version drew all first-layer weights with fan-in
2 + K and placed the kinks at random points of the (2 + K)-cube: for simplex-valued inputs most kinks
then missed the data -- only 27 % (uniform input) / 45 % (oracle one-hot) of the hidden units changed
sign over the land cells, against 89 % for the plain network -- and the coordinate pathway differed
from the baseline's, so the comparison was neither fair nor paired.)

Lab notes (default map and settings, 20 seeds, after that fix): cost and greedy success are
baseline 2424 / 0.32, constant vector 2379 / 0.29, SRPL 2341 / 0.30, BFS oracle 2348 / 0.28, and an
agent given the *exact* steps-to-cost distribution of its current epsilon-greedy policy (recomputed by
dynamic programming every rollout) 2384 / 0.26. Even a perfect representation does not help here:
about 70 % of the violations happen while epsilon is still annealing (actions are mostly random), almost
every land cell of this map borders water (the BFS distance is 1 on 36 of 40 land cells, so the oracle input
is nearly constant) and on the cells the agent visits the exact distribution barely changes from cell to
cell. Whether a seed finds the goal at all (then it crosses the risky bridge and collects more
violations) dominates both numbers. Over 5 seeds (the page's largest seed count) the 5x-penalty
agent enters the water more often than the plain one (2712 vs 2301; greedy success 0.28 vs 0.29), probably because with
Adam's fixed step size the larger value targets are fitted more slowly, so its greedy choices are worse
while epsilon anneals. One check of that guess (island, 5 seeds): a plain agent with *all* rewards
multiplied by 5 (same ordering of policies, only larger targets) enters the water 2842 times (success
0.28), even more than the 5x-penalty agent (2712), so the target scale, not the penalty, causes it.

Map "field" (added because on island/two rooms the oracle input is nearly constant). The default map is
chosen by a rule fixed before any agent ran on it and blind to the claims (pick_default_map: fewer than
half of the land cells border a hazard and at least three distinct distances; island 28/32, two rooms
26/26, field 22/96 with distances 1..6). The default step budget was to be the smallest of 25 600 /
38 400 / 51 200 at which the plain agent's greedy success is within 0.05 of its 60 000-step value; that is
51 200 (plain success 0.40 / 0.26 / 0.20 / 0.20 at 25.6k / 38.4k / 51.2k / 60k, 5 seeds, bimodal per
seed), but the default run then takes about 6 s, so the budget stays at 25 600, the largest that fits.
Results, 5 seeds, 25 600 steps (violations / greedy success): baseline 182 / 0.40, SRPL 219 / 0.00,
oracle 132 / 0.75, 5x penalty 94 / 0.20, constant vector 249 / 0.32 (SRPL TV 0.065, state-blind 0.073).
At 60 000 steps: baseline 350 / 0.20, SRPL 529 / 0.16, oracle 250 / 0.58, 5x penalty 146 / 0.16,
constant 314 / 0.61. So on this map the mechanism can work -- the true distance to the hazards cuts
violations by about 28 % and raises success -- but the learned S2C model does not deliver it: it is a
network on the same two coordinates as the Q network, fitted to labels that are 90 % "no cost within H_s",
and it returns a blurred bump over the strips (predicted P(cost within 2 steps) at most about 0.35 on
the corridor where the exact value is near 1); the SRPL agents learn "avoid the middle" and on most seeds
park against the wall near the start. Fed the *exact* steps-to-cost distribution of its current
epsilon-greedy policy (recomputed every rollout), an agent gets 175 / 0.25 at 25 600 steps and 300 / 0.66 at
60 000: a perfect representation helps the success rate late in training and the violations only a little
(0.96x and 0.86x the plain agent's), less than the static distance one-hot (0.72x at both budgets) -- the
distribution follows a policy that is still changing. The 5x penalty behaves as expected here: fewer
violations, lower success.

Diagnosis of the failing claims (field map, default settings, `_train(variant, Config(), s)` for s = 0..19;
violations / greedy success / seeds solved; ``python -m engine.safety_representations lab`` re-measures these rows,
plus SRPL with all past labels, 191 / 0.07 / 2, into assets/safety-representations/lab_runs.json for the page):
baseline 218 / 0.26 / 6, SRPL 205 / 0.15 / 4, BFS oracle
120 / 0.50 / 10, constant vector 184 / 0.20 / 4, and the diagnostic variant "s2c_exact" -- the exact
steps-to-cost distribution under the uniformly random policy on every cell from the first step, i.e. a
perfect state-centric S2C trained on diverse experience -- 146 / 0.22 / 5. Checked and found correct: the
labels (brute force on random episodes, tests), the detached augmentation, the same state layout in the
rollouts, the Q targets and the greedy evaluation, identical environment random numbers and step counts
for every variant. So no implementation defect explains the gap; what the runs show instead:
(1) even a perfect representation does not remove the over-caution: it cuts violations (0.67x) but does
not raise the success rate, and with 10 seeds instead of 20 it gave 180 / 0.28 -- the per-seed outcome is
bimodal (find the goal or park near the start), and the no-information constant vector already moves the
violations by 16 %, so three seeds cannot resolve a 0.8x bar; (2) the oracle's benefit is specific to the
distance information (10 seeds: one-hot of column pairs 133 / 0.00, of a random 6-way cell class
176 / 0.34, of the distance to the goal 188 / 0.14, BFS distance 129 / 0.76); (3) the learned S2C is far from the
state-centric map (TV 0.21 to the random-policy distribution at the end of training, 0.20 with the
spec's 20 000-label buffer): it starts uninformative, its labels come from the agent's own narrowing
behaviour, and it extrapolates on cells it has no labels for; keeping all labels (buffer 20 000 or
25 600) or more S2C steps does not change the outcome (20 seeds: buffer 20 000 190 / 0.11);
(4) the outcome is sensitive to the scale of the appended input, along a caution trade-off: giving the
probability block the coordinates' weight scale (std sqrt(2/2) instead of sqrt(2/(2+K))) gives SRPL
136 / 0.07 (fewer violations, even less success) and the oracle 113 / 0.32; standardising the block by
running statistics gives SRPL 219 / 0.12 (10 seeds). None of these settings makes the learned
representation both safer and not more conservative, so the defaults are kept and the claims are left failing.

Fidelity check against the paper (arXiv 2502.20341, read through two public reviews of it and a third-party
reproduction; the appendix itself was not available): the paper's S2C is trained on the agent's *diverse past
experience*, kept in a buffer of its own because on-policy learners throw old samples away, and its ablation
prefers this to a representation of the current policy. The engine used to keep only the last 4 000 labels
(about the last sixth of a default run), i.e. the current policy. `Config.s2c_history` (default on, rule fixed
before measuring: on if it is what the paper does and the default run stays under 3 s) keeps every label of
the run. Default run 0.6 s either way; largest setting 3.5 s. Badges at Config(seed=s), s = 0, 1, 2
(cost ratio / success difference / SRPL success / TV), all history: 1.01 / -0.33 / 0.00 / 0.15,
1.04 / +0.14 / 0.16 / 0.09, 0.94 / +0.04 / 0.25 / 0.08; last 4 000: 0.91 / -0.33 / 0.00 / 0.10,
1.20 / -0.02 / 0.00 / 0.04, 1.39 / -0.21 / 0.00 / 0.01. Over seeds 0..9 (30 training seeds), violations /
greedy success: baseline 203 / 0.16, SRPL all history 198 / 0.11, SRPL last 4 000 165 / 0.04. With the short
buffer the S2C forgets the hazards once an agent parks near the start (seed 2: largest predicted P(cost within
2 steps) 0.002, and a TV that "passes" because the parked final policy is also safe); with all history it keeps
them (0.51-0.64 against 0.89-1.0 exact). Claims 1-3 still fail. Remaining differences from the paper, not
cheap here: its base learners are constrained (CPO, TRPO-PID, SauteRL, CRPO; CSC, CVPO off-policy) with a cost
budget, ours is unconstrained Q(lambda) with a failure penalty (the paper's gridworld figure uses a failure
penalty but only ground-truth safety input, never the learned S2C); its costs (Safety Gym hazards) do not end
the episode and its observations (lidar, images) show the hazards locally, ours end it and show only the
coordinates; it trains for 2-10 M steps with stochastic policies, we for 25 600 with epsilon-greedy, where most
violations happen before the representation can steer behaviour; it reports return and cost during training
(success on SafeMetaDrive), not greedy success after training.

Why the badge comparing the S2C with the state-blind label histogram (TV to the exact distribution) fails, measured
2026-12-04 at Config(seed=s), s = 0, 1, 2: the buffer's own per-cell label frequencies -- what a perfect fit of the
S2C's data would return -- score TV 0.139 / 0.096 / 0.092 against the final policy's exact distribution, worse than
the histogram (0.111 / 0.055 / 0.062) and close to the S2C itself (0.147 / 0.091 / 0.081; its TV to those per-cell
frequencies is 0.072 / 0.059 / 0.053). With every label kept, most of them come from earlier, more random policies
that walked into the hazards; the final policy avoids them, so its per-cell distribution is nearly "safe within H_s"
everywhere, which the histogram (90 % of labels in that bin) already says. The gap is the age of the data, not the
fit; with the last-4 000-label buffer the per-cell frequencies score 0.101 / 0.052 / 0.013 against 0.105 / 0.027 /
0.013. `tv_emp_exact` reports it live.

Depth, measured 2026-12-04 (rule fixed before: adopt the spec's 64-64 networks if the default run stays under 3 s and
the plain agent still learns, whatever the SRPL badges say). S2C alone 64-64 (Q one layer): it fits its labels better
(TV to the per-cell frequencies 0.062 / 0.052 / 0.046, largest predicted P(cost within 2 steps) 0.71-0.77 vs 0.51-0.64)
but the badges do not improve (cost ratio 1.43 / 1.13 / 0.98, success difference -0.19 / -0.02 / -0.18, TV ratio
1.21 / 1.13 / 1.31); it would also break the spec's "same architecture as the policy". Both networks 64-64 with
LayerNorm (the spec's Q network): about 7 s per default run in numpy, and the plain agent never reaches the goal at
25 600 steps (greedy success 0.00 at seeds 0-2). Both 64-64 without LayerNorm: 1.4 s, plain success 0.25 / 0.05 /
0.01 (one layer: 0.33 / 0.02 / 0.21), SRPL cost ratio 1.41 / 0.82 / 1.25. Neither qualifies; the one-layer networks stay.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from engine.core import Bool, Choice, Claim, Float, InputError, Int, param, seed_everything
from engine.core.progress import report

MAPS = {
    "island": [
        "WWWWWWWWWW",
        "W........W",
        "W........W",
        "W..WWWW..W",
        "WS......GW",
        "W..WWWW..W",
        "WWWWWWWWWW",
    ],
    "two rooms": [
        "WWWWWWWWWW",
        "W...WW...W",
        "W........W",
        "W.WWWWWW.W",
        "WS......GW",
        "W.WWWWWW.W",
        "WWWWWWWWWW",
    ],
    # A walled field (the grid edge is a wall the agent bumps into, not water) with two hazard strips
    # that leave a one-cell corridor between them: the short route runs along the corridor, the safe one
    # goes round a strip, two or more cells away from it.
    "field": [
        "............",
        "............",
        "............",
        "...WWWWWW...",
        "S..........G",
        "...WWWWWW...",
        "............",
        "............",
        "............",
    ],
}
MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])  # up, down, left, right
ARROWS = np.array(["↑", "↓", "←", "→"])
STEP_REWARD = -0.02
GOAL_REWARD = 1.0
TIME_LIMIT = 60
# 32 environments and lr 3e-3 instead of the spec's 64 and 1e-3: at the spec's values no variant learns to reach the
# goal within the default 25 600 steps (greedy success 0.00 for baseline, SRPL and oracle, 3 seeds; 64 envs with lr
# 3e-3: 0.03 / 0.01 / 0.86; ours: 0.33 / 0.00 / 0.65; measured 2026-12-06). Half the environments means twice the
# updates for the same number of steps.
N_ENVS = 32
ROLLOUT = 8
HIDDEN = 64
GAMMA = 0.97
LAM = 0.6
LR = 3e-3
S2C_BUFFER = 4_000
S2C_BATCH = 256
S2C_STEPS = 8
Q_STEPS = 4
S2C_LR = 3e-3
PENALTY_FACTOR = 5.0
EPS_END, EPS_FRAC = 0.05, 0.4   # epsilon-greedy: 1 -> 0.05 over the first 40 % of the steps
EVAL_EPISODES = 200
# cells scored by the S2C-accuracy badges need this many labels in the S2C buffer (the spec: visited >= 20 times).
# Both measured 2026-12-05, seeds 0-2: mean TV 0.147 / 0.091 / 0.081 at 50, 0.168 / 0.115 / 0.123 at 20; the
# verdicts of both badges are the same, and 50 keeps sparsely labelled cells out of the state-blind comparison.
MIN_LABELS = 50
VARIANTS = ("baseline", "srpl", "oracle", "penalty", "const", "s2c_exact")
LABELS = {"baseline": "baseline (s)", "srpl": "SRPL ([s, P(δ|s)])", "oracle": "oracle distance",
          "penalty": "baseline, 5× penalty", "const": "constant vector (control)",
          "s2c_exact": "perfect state-centric S2C (diagnostic)"}


# ---------------------------------------------------------------- labels and maps
def steps_to_cost(costs, horizon: int) -> np.ndarray:
    """delta_t = min{j - t : j > t, c_j = 1}, clipped to horizon; horizon when no later cost."""
    c = np.asarray(costs, dtype=bool)
    out = np.full(len(c), horizon, dtype=int)
    nxt = None
    for t in range(len(c) - 1, -1, -1):
        if nxt is not None:
            out[t] = min(nxt - t, horizon)
        if c[t]:
            nxt = t
    return out


def episode_deltas(lens, died, ended, horizon: int, width: int):
    """Steps-to-cost labels for a batch of finished episodes, all at once.

    Episode i visited lens[i] states (positions 0..lens[i]-1); its last move entered water if
    died[i], and ended[i] says whether it truly ended (water or goal) rather than being cut by the
    time limit. Returns (mask, delta), both (n, width): delta[i, t] is the label of state t, and
    mask marks the states that get a label. The cost sits on the state after the last one, so
    delta = lens - t when the episode died. An episode cut by the time limit says nothing about
    costs after the cut: a state needs horizon - 1 observed safe steps after it for the label
    "no cost within horizon - 1 steps", so the last horizon - 2 states are left out.
    """
    lens = np.asarray(lens)
    tt = np.arange(width)[None, :]
    known = np.where(ended, lens, lens - horizon + 2)
    mask = tt < known[:, None]
    delta = np.where(np.asarray(died)[:, None], np.minimum(lens[:, None] - tt, horizon), horizon)
    return mask, delta


def n_bins(horizon: int, bin_size: int) -> int:
    return int(np.ceil(horizon / bin_size))


def to_bins(delta, horizon: int, bin_size: int) -> np.ndarray:
    return np.minimum((np.asarray(delta) - 1) // bin_size, n_bins(horizon, bin_size) - 1)


def parse_map(name: str):
    rows = MAPS[name]
    water = np.array([[ch == "W" for ch in r] for r in rows])
    start = next((i, j) for i, r in enumerate(rows) for j, ch in enumerate(r) if ch == "S")
    goal = next((i, j) for i, r in enumerate(rows) for j, ch in enumerate(r) if ch == "G")
    return water, start, goal


def next_cell(water: np.ndarray) -> np.ndarray:
    """(N, 4) index of the cell reached by each move (clamped at the border)."""
    R, C = water.shape
    rr, cc = np.divmod(np.arange(R * C), C)
    nr = np.clip(rr[:, None] + MOVES[:, 0], 0, R - 1)
    nc = np.clip(cc[:, None] + MOVES[:, 1], 0, C - 1)
    return nr * C + nc


def water_distance(water: np.ndarray) -> np.ndarray:
    """Grid (4-neighbour) BFS distance from each cell to the nearest water cell."""
    R, C = water.shape
    dist = np.full((R, C), -1)
    q = deque()
    for i, j in zip(*np.nonzero(water)):
        dist[i, j] = 0
        q.append((i, j))
    while q:
        i, j = q.popleft()
        for di, dj in MOVES:
            a, b = i + di, j + dj
            if 0 <= a < R and 0 <= b < C and dist[a, b] < 0:
                dist[a, b] = dist[i, j] + 1
                q.append((a, b))
    return dist


def exact_steps_to_cost(policy: np.ndarray, water: np.ndarray, goal: int, slip: float, horizon: int) -> np.ndarray:
    """(N, H) exact P(delta = k | s), k = 1..H (last column: no cost within H-1 steps).

    policy: (N, 4) action probabilities. The state distribution from s is pushed forward with
    water absorbing (the mass entering water at step k is P(delta = k)) and the goal absorbing safe.
    """
    N = water.size
    nxt = next_cell(water)
    move = (1 - slip) * np.eye(4) + slip / 4.0          # P(move m | action a)
    pm = policy @ move                                    # (N, 4) prob of each move
    T = np.zeros((N, N))
    np.add.at(T, (np.repeat(np.arange(N), 4), nxt.ravel()), pm.ravel())
    wat = water.ravel()
    hit = T[:, wat].sum(1)                                # prob of entering water in one step
    hit[goal] = 0.0                                       # absorbing states never move on
    hit[wat] = 0.0
    M = T.copy()
    M[:, wat] = 0.0
    M[goal, :] = 0.0
    M[wat, :] = 0.0
    D = np.eye(N)
    out = np.zeros((N, horizon))
    for k in range(horizon - 1):
        out[:, k] = D @ hit
        D = D @ M
    out[:, horizon - 1] = 1.0 - out[:, : horizon - 1].sum(1)
    return out


def bin_dist(p_delta: np.ndarray, horizon: int, bin_size: int) -> np.ndarray:
    K = n_bins(horizon, bin_size)
    b = to_bins(np.arange(1, horizon + 1), horizon, bin_size)
    out = np.zeros(p_delta.shape[:-1] + (K,))
    for k in range(horizon):
        out[..., b[k]] += p_delta[..., k]
    return out


def hazard_adjacent_share(name: str) -> float:
    """Share of the land cells of a map that have a hazard cell as a 4-neighbour (BFS distance 1)."""
    water, _, _ = parse_map(name)
    return float((water_distance(water)[~water] == 1).mean())


def pick_default_map(maps=MAPS) -> str:
    """The default map, chosen by geometry alone (rule fixed before any agent ran on the new map).

    The map must make the oracle input informative: fewer than half of its land cells border a hazard and
    the distance to the nearest hazard takes at least three values on land; among such maps, the one
    with the smallest hazard-adjacent share. No training result enters this choice.
    """
    ok = []
    for name in maps:
        water, _, _ = parse_map(name)
        d = water_distance(water)[~water]
        if hazard_adjacent_share(name) < 0.5 and len(np.unique(d)) >= 3:
            ok.append((hazard_adjacent_share(name), name))
    if not ok:
        raise ValueError("no map makes the oracle input informative")
    return min(ok)[1]


DEFAULT_MAP = pick_default_map()


@dataclass(frozen=True)
class Config:
    horizon: int = param(10, Int(2, 30, "Safety horizon H_s", help="Steps-to-cost beyond H_s fall in the last bin"))
    bin_size: int = param(1, Int(1, 5, "Bin size", help="Steps per histogram bin of the steps-to-cost model"))
    slip: float = param(0.1, Float(0.0, 0.3, "Slip probability", step=0.05,
                                   help="Chance that a move is replaced by a random one"))
    penalty: float = param(1.0, Float(0.0, 5.0, "Failure penalty", step=0.5,
                                      help="Reward lost on entering a hazard (the episode ends)"))
    env_steps: int = param(25_600, Int(5_000, 100_000, "Environment steps", step=1_000))
    grid: str = param(DEFAULT_MAP, Choice(tuple(MAPS), "Map", widget="radio"))
    n_seeds: int = param(3, Int(1, 5, "Seeds"))
    oracle: bool = param(True, Bool("Oracle variant", help="Input = true binned distance to the nearest hazard"))  # the spec's default variants: baseline, srpl, oracle
    penalty_only: bool = param(False, Bool("Penalty-only variant", help="Baseline with a 5x failure penalty"))
    s2c_history: bool = param(True, Bool("S2C learns from all past experience",
                                         help="Paper: the steps-to-cost model is trained on the agent's diverse past "
                                              "experience, kept in its own buffer. Off: only the last 4 000 labelled "
                                              "states (tracks the current policy)"))
    seed: int = param(0, Int(0, 9, "Seed"))


# largest widget setting (all sizes at max, all four variants): 7.2 s CPU on every map, measured 2026-12-05
HEAVY_CONFIG = Config(horizon=30, env_steps=100_000, n_seeds=5, oracle=True, penalty_only=True)
# the page quotes this run (default settings, oracle on, 5 seeds) to show the mechanism can work on the default map;
# tests/test_safety_representations.py re-measures it: total violations and greedy success, seed means
ORACLE_RUN = Config(oracle=True, n_seeds=5)
QUOTED_ORACLE = {"cost_oracle": 132, "success_oracle": 0.75, "cost_baseline": 182, "success_baseline": 0.40}


@dataclass
class Result:
    variants: list                 # variant names that were run
    steps: np.ndarray              # (P,) env steps at the end of each rollout
    cum_cost: dict                 # variant -> (seeds, P) cumulative water entries
    succ_x: np.ndarray             # (W,) window centres (env steps)
    succ_rate: dict                # variant -> (seeds, W) success fraction of episodes ending in the window
    eval_success: dict             # variant -> (seeds,) greedy success rate after training
    final_cost: dict               # variant -> (seeds,)
    water: np.ndarray              # (R, C) bool
    arrows: dict                   # variant -> (R, C) str greedy action of seed 0
    pred_dist: np.ndarray          # (R, C, K) S2C prediction (srpl, seed 0)
    exact_dist: np.ndarray         # (R, C, K) exact distribution under the final behaviour policy
    visits: np.ndarray             # (R, C) visits of srpl seed 0
    label_hist: np.ndarray         # (K,) label counts in the S2C buffer (srpl, seed 0)
    tv: np.ndarray                 # (seeds,) mean TV on well-visited cells
    metrics: dict


# ---------------------------------------------------------------- tiny numpy MLP + Adam
class MLP:
    """x -> ReLU(x W1 + b1) -> W2 + b2, gradients by hand, Adam."""

    def __init__(self, d_in: int, d_out: int, rng: np.random.Generator, hidden: int = HIDDEN, lr: float | None = None,
                 n_prob: int = 0, prob_rng: np.random.Generator | None = None):
        """The last n_prob of the d_in inputs are a probability vector (drawn from prob_rng).

        The first d_in - n_prob inputs are coordinates in the unit cube: their weights, the ReLU kinks
        (through random points of the cube) and the output layer come from rng exactly as in a network
        without the extra inputs. The probability block gets its own weights, and the kinks are placed at
        its centre (the uniform vector): fed the uniform vector, the network computes the same function as
        the plain one drawn from the same rng, and the kinks stay on the inputs it actually sees.
        """
        d_base = d_in - n_prob
        w1 = rng.normal(0, np.sqrt(2.0 / d_base), (d_base, hidden))
        b1 = -rng.random((1, d_base)) @ w1      # ReLU kinks through random points of the unit cube
        w2 = rng.normal(0, np.sqrt(1.0 / hidden), (hidden, d_out)) * 0.5
        if n_prob:
            wp = prob_rng.normal(0, np.sqrt(2.0 / d_in), (n_prob, hidden))
            w1, b1 = np.vstack([w1, wp]), b1 - wp.mean(0, keepdims=True)
        parts = [w1, b1.ravel(), w2, np.zeros(d_out)]
        self.flat = np.concatenate([w.ravel() for w in parts])   # one vector: Adam in a few ops
        self.p, i = [], 0
        for w in parts:
            self.p.append(self.flat[i:i + w.size].reshape(w.shape))
            i += w.size
        self.m = np.zeros_like(self.flat)
        self.v = np.zeros_like(self.flat)
        self.t = 0
        self.lr = LR if lr is None else lr

    def forward(self, x):
        h = np.maximum(x @ self.p[0] + self.p[1], 0.0)
        return h @ self.p[2] + self.p[3], h

    def __call__(self, x):
        return self.forward(x)[0]

    def step(self, x, h, g_out):
        """Adam step given dLoss/dOutput g_out (B, d_out)."""
        gh = (g_out @ self.p[2].T) * (h > 0)
        g = np.concatenate([(x.T @ gh).ravel(), gh.sum(0), (h.T @ g_out).ravel(), g_out.sum(0)])
        self.t += 1
        b1, b2 = 0.9, 0.999
        self.m *= b1
        self.m += (1 - b1) * g
        self.v *= b2
        self.v += (1 - b2) * g * g
        self.flat -= self.lr * (self.m / (1 - b1 ** self.t)) / (np.sqrt(self.v / (1 - b2 ** self.t)) + 1e-8)


def softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------- one training run
def _train(variant: str, cfg: Config, seed: int, progress=None) -> dict:
    # Separate random streams, each the same for every variant of a seed: the environment (slips and
    # exploration coins, one fixed draw per step) is paired across variants; networks draw from their own.
    env_rng = np.random.default_rng([seed, 1])
    rng = np.random.default_rng([seed, 2])
    s2c_rng = np.random.default_rng([seed, 3])
    water, start, goal = parse_map(cfg.grid)
    R, C = water.shape
    N = R * C
    nxt = next_cell(water)
    wat = water.ravel()
    start_i, goal_i = start[0] * C + start[1], goal[0] * C + goal[1]
    rr, cc = np.divmod(np.arange(N), C)
    coords = np.stack([rr / (R - 1), cc / (C - 1)], 1)
    H, K = cfg.horizon, n_bins(cfg.horizon, cfg.bin_size)
    onehot = np.eye(K)[to_bins(np.maximum(water_distance(water).ravel(), 1), H, cfg.bin_size)]
    penalty = cfg.penalty * (PENALTY_FACTOR if variant == "penalty" else 1.0)
    # diagnostic "s2c_exact": the exact steps-to-cost distribution under the uniformly random policy, i.e.
    # what a perfect S2C trained on diverse (exploratory) experience would output, fixed for the whole run
    rand_repr = bin_dist(exact_steps_to_cost(np.full((N, 4), 0.25), water, goal_i, cfg.slip, H), H, cfg.bin_size) \
        if variant == "s2c_exact" else None
    aug = variant in ("srpl", "oracle", "const", "s2c_exact")
    q = MLP(2 + (K if aug else 0), 4, rng, n_prob=K if aug else 0, prob_rng=np.random.default_rng([seed, 5]))
    s2c = MLP(2, K, s2c_rng, lr=S2C_LR) if variant == "srpl" else None

    all_cells = np.arange(N)

    def feats(cells):
        x = coords[cells]
        if variant == "srpl":
            return np.concatenate([x, softmax(s2c(x))], 1)   # detached: a constant input to Q
        if variant == "oracle":
            return np.concatenate([x, onehot[cells]], 1)
        if variant == "s2c_exact":
            return np.concatenate([x, rand_repr[cells]], 1)
        if variant == "const":
            return np.concatenate([x, np.full((len(cells), K), 1.0 / K)], 1)
        return x

    E = N_ENVS
    n_roll = max(1, cfg.env_steps // (E * ROLLOUT))
    total = n_roll * E * ROLLOUT
    eps_end, eps_frac = EPS_END, EPS_FRAC
    pos = np.full(E, start_i)
    t_ep = np.zeros(E, dtype=int)
    ep_cells = np.zeros((E, TIME_LIMIT + 1), dtype=int)
    # every visited state gets at most one label, so a buffer of `total` entries keeps the whole run
    cap = total if cfg.s2c_history else S2C_BUFFER
    buf_x = np.zeros(cap, dtype=int)
    buf_y = np.zeros(cap, dtype=int)
    buf_n = buf_ptr = 0
    visits = np.zeros(N)
    cum_cost = np.zeros(n_roll)
    ends_step, ends_succ = [], []
    costs = 0
    step = 0
    for it in range(n_roll):
        cells = np.zeros((ROLLOUT, E), dtype=int)
        acts = np.zeros((ROLLOUT, E), dtype=int)
        rews = np.zeros((ROLLOUT, E))
        term = np.zeros((ROLLOUT, E), dtype=bool)
        done = np.zeros((ROLLOUT, E), dtype=bool)
        nxt_cells = np.zeros((ROLLOUT, E), dtype=int)
        q_table = q(feats(all_cells))           # networks change only between rollouts
        for t in range(ROLLOUT):
            eps = max(eps_end, 1.0 - (1.0 - eps_end) * step / (eps_frac * total))
            u_eps, u_slip = env_rng.random((2, E))
            r_act, r_move = env_rng.integers(0, 4, (2, E))
            a = np.where(u_eps < eps, r_act, q_table[pos].argmax(1))
            m = np.where(u_slip < cfg.slip, r_move, a)
            new = nxt[pos, m]
            died, won = wat[new], new == goal_i
            visits += np.bincount(pos, minlength=N)
            ep_cells[np.arange(E), t_ep] = pos
            t_ep += 1
            timeout = t_ep >= TIME_LIMIT
            cells[t], acts[t], nxt_cells[t] = pos, a, new
            rews[t] = STEP_REWARD + GOAL_REWARD * won - penalty * died
            term[t] = died | won
            done[t] = term[t] | timeout
            costs += int(died.sum())
            step += E
            fin = np.nonzero(done[t])[0]
            if len(fin):
                ends_step.append(np.full(len(fin), step))
                ends_succ.append(won[fin])
            if s2c is not None and len(fin):
                mask, delta = episode_deltas(t_ep[fin], died[fin], term[t][fin], H, TIME_LIMIT + 1)
                xs, ys = ep_cells[fin][mask], to_bins(delta[mask], H, cfg.bin_size)
                n = len(xs)
                idx = (buf_ptr + np.arange(n)) % cap
                buf_x[idx], buf_y[idx] = xs, ys
                buf_ptr = (buf_ptr + n) % cap
                buf_n = min(cap, buf_n + n)
            pos = np.where(done[t], start_i, new)
            t_ep[done[t]] = 0
        cum_cost[it] = costs
        # --- S2C update (own cross-entropy loss only)
        if s2c is not None and buf_n >= 64:
            for _ in range(S2C_STEPS):
                j = s2c_rng.integers(0, buf_n, min(S2C_BATCH, buf_n))
                x = coords[buf_x[j]]
                logits, h = s2c.forward(x)
                g = softmax(logits)
                g[np.arange(len(j)), buf_y[j]] -= 1.0
                s2c.step(x, h, g / len(j))
        # --- Q(lambda) targets over the rollout, then two minibatch steps
        f_table = feats(all_cells)
        boot = q(f_table).max(1)[nxt_cells] * (~term)
        G = lambda_returns(rews, boot, done, GAMMA, LAM)
        X = f_table[cells.ravel()]
        A, Y = acts.ravel(), G.ravel()
        perm = rng.permutation(len(Y))
        for half in np.array_split(perm, Q_STEPS):
            out, h = q.forward(X[half])
            g = np.zeros_like(out)
            g[np.arange(len(half)), A[half]] = out[np.arange(len(half)), A[half]] - Y[half]
            q.step(X[half], h, g / len(half))
        if progress is not None and it % 10 == 0:
            progress((it + 1) / n_roll, f"{variant}: {(it + 1) * E * ROLLOUT:,} steps")

    # --- greedy evaluation
    greedy = q(feats(np.arange(N))).argmax(1)
    rng = np.random.default_rng([seed, 4])
    p = np.full(EVAL_EPISODES, start_i)
    alive = np.ones(EVAL_EPISODES, dtype=bool)
    success = np.zeros(EVAL_EPISODES, dtype=bool)
    for _ in range(TIME_LIMIT):
        m = greedy[p].copy()
        sl = rng.random(EVAL_EPISODES) < cfg.slip
        m[sl] = rng.integers(0, 4, sl.sum())
        new = nxt[p, m]
        success |= alive & (new == goal_i)
        alive &= ~wat[new] & (new != goal_i)
        p = np.where(alive, new, p)
    out = dict(steps=(np.arange(n_roll) + 1) * E * ROLLOUT, cum_cost=cum_cost, ends_step=np.concatenate(ends_step or [np.zeros(0, int)]),
               ends_succ=np.concatenate(ends_succ or [np.zeros(0, bool)]), eval_success=float(success.mean()), final_cost=float(costs),
               arrows=np.where(water.ravel(), "", ARROWS[greedy]).reshape(R, C), visits=visits.reshape(R, C))
    if s2c is not None:
        pol = np.full((N, 4), eps_end / 4) + (1 - eps_end) * np.eye(4)[greedy]
        exact = bin_dist(exact_steps_to_cost(pol, water, goal_i, cfg.slip, H), H, cfg.bin_size)
        pred = softmax(s2c(coords))
        n_lab = np.bincount(buf_x[:buf_n], minlength=N)
        emp = np.zeros((N, K))
        np.add.at(emp, (buf_x[:buf_n], buf_y[:buf_n]), 1.0)
        emp /= np.maximum(n_lab, 1)[:, None]
        land = (~wat) & (np.arange(N) != goal_i) & (n_lab >= MIN_LABELS)
        out["tv_emp"] = float((0.5 * np.abs(pred - emp).sum(1))[land].mean()) if land.any() else float("nan")
        tv = 0.5 * np.abs(pred - exact).sum(1)
        marg = np.bincount(buf_y[:buf_n], minlength=K) / max(buf_n, 1)   # state-blind predictor
        out["tv_marginal"] = float((0.5 * np.abs(marg - exact).sum(1))[land].mean()) if land.any() else float("nan")
        # the buffer's own per-cell label frequencies (what a perfect fit of the S2C would return) against the same target
        out["tv_emp_exact"] = float((0.5 * np.abs(emp - exact).sum(1))[land].mean()) if land.any() else float("nan")
        out.update(pred=pred.reshape(R, C, K), exact=exact.reshape(R, C, K),
                   tv=float(tv[land].mean()) if land.any() else float("nan"),
                   label_hist=np.bincount(buf_y[:buf_n], minlength=K))
    return out



def lambda_returns(rews: np.ndarray, boot: np.ndarray, done: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Q(λ) targets of a rollout, backwards: G_t = r_t + γ((1 − λ) b_t + λ G_{t+1}), where b_t = max_a Q(s_{t+1}, a)
    (0 after a terminal step). An episode end (``done``) or the rollout's last step bootstraps on b_t alone.
    Shapes (T, E)."""
    T = len(rews)
    G = np.zeros_like(boot, dtype=float)
    nxt_G = boot[-1]
    for t in range(T - 1, -1, -1):
        cont = boot[t] if t == T - 1 else np.where(done[t], boot[t], lam * nxt_G + (1 - lam) * boot[t])
        G[t] = rews[t] + gamma * cont
        nxt_G = G[t]
    return G


def run(config: Config, progress=None) -> Result:
    seed_everything(config.seed, torch_too=False)
    if n_bins(config.horizon, config.bin_size) < 2:
        raise InputError("The safety horizon H_s must span at least two bins (make the bin size smaller than H_s).")
    variants = ["baseline", "srpl"] + (["oracle"] if config.oracle else []) + \
        (["penalty"] if config.penalty_only else [])
    return _run_variants(config, variants, progress)


def _run_variants(config: Config, variants: list, progress=None) -> Result:
    water, _, _ = parse_map(config.grid)
    jobs = [(v, s) for s in range(config.n_seeds) for v in variants]
    runs = {}
    for i, (v, s) in enumerate(jobs):
        def sub(f, msg, i=i, s=s):
            report(progress, (i + f) / len(jobs), f"seed {s + 1}/{config.n_seeds}, {msg}")
        runs[v, s] = _train(v, config, 1000 * config.seed + s, sub)
    S = config.n_seeds
    steps = runs[variants[0], 0]["steps"]
    win = 1000
    edges = np.arange(0, steps[-1] + win, win)
    succ_x = edges[:-1] + win / 2

    def rate(r):
        idx = np.clip((r["ends_step"] - 1) // win, 0, len(edges) - 2)
        n = np.bincount(idx, minlength=len(edges) - 1)
        k = np.bincount(idx, weights=r["ends_succ"].astype(float), minlength=len(edges) - 1)
        return np.where(n > 0, k / np.maximum(n, 1), np.nan)

    g = lambda key, v: np.array([runs[v, s][key] for s in range(S)])  # noqa: E731
    cum = {v: g("cum_cost", v) for v in variants}
    ev = {v: g("eval_success", v) for v in variants}
    fc = {v: g("final_cost", v) for v in variants}
    sr = {v: np.array([rate(runs[v, s]) for s in range(S)]) for v in variants}
    r0 = runs["srpl", 0]
    tv = g("tv", "srpl")
    metrics = {f"{k}_{v}": float(np.mean(d[v])) for v in variants for k, d in (("cost", fc), ("success", ev))}
    metrics["tv"] = float(np.nanmean(tv)) if np.isfinite(tv).any() else float("nan")
    metrics["tv_fit"] = float(np.nanmean(g("tv_emp", "srpl")))
    metrics["tv_marginal"] = float(np.nanmean(g("tv_marginal", "srpl")))
    metrics["tv_emp_exact"] = float(np.nanmean(g("tv_emp_exact", "srpl")))
    metrics["land_cells"] = float((~water).sum())
    metrics["land_cells_next_to_water"] = float((water_distance(water)[~water] == 1).sum())
    metrics["max_hazard_distance"] = float(water_distance(water)[~water].max())
    # how sharp the learned risk map is: P(cost within ~2 steps), S2C vs exact, on land cells (seed 0)
    nb = max(1, min(r0["pred"].shape[-1] - 1, 2 // config.bin_size))
    land = ~water
    metrics["risk_bins"] = float(nb)                  # the page's risk maps sum these first bins too
    metrics["risk_pred_max"] = float(r0["pred"][..., :nb].sum(-1)[land].max())
    metrics["risk_exact_max"] = float(r0["exact"][..., :nb].sum(-1)[land].max())
    # share of the violations that happen while epsilon is still annealing (first 40 % of the steps)
    k = max(1, int(round(EPS_FRAC * len(steps)))) - 1
    for v in variants:
        metrics[f"explore_share_{v}"] = float(cum[v][:, k].sum() / max(cum[v][:, -1].sum(), 1.0))
    return Result(variants=variants, steps=steps, cum_cost=cum, succ_x=succ_x, succ_rate=sr, eval_success=ev,
                  final_cost=fc, water=water, arrows={v: runs[v, 0]["arrows"] for v in variants},
                  pred_dist=r0["pred"], exact_dist=r0["exact"], visits=r0["visits"],
                  label_hist=r0["label_hist"], tv=tv, metrics=metrics)


def claims(result: Result) -> list[Claim]:
    m = result.metrics
    b_cost, s_cost = m["cost_baseline"], m["cost_srpl"]
    out = [
        Claim("SRPL violates the constraint less often during training than the plain agent",
              measured=s_cost / max(b_cost, 1.0), op="<=", threshold=0.8, label="cost(SRPL) / cost(baseline)",
              detail=f"water entries over training, seed mean: SRPL {s_cost:.0f} vs baseline {b_cost:.0f}",
              fmt=".2f"),
        Claim("…without becoming more conservative: the greedy SRPL policy reaches the goal at least as often",
              measured=m["success_srpl"] - m["success_baseline"], op=">=", threshold=-0.05,
              label="success(SRPL) − success(baseline)",
              detail=f"greedy success over {EVAL_EPISODES} episodes: SRPL {m['success_srpl']:.2f}, "
                     f"baseline {m['success_baseline']:.2f}", fmt=".2f"),
        Claim("…and it actually solves the task", measured=m["success_srpl"], op=">=", threshold=0.5,
              label="greedy success of SRPL", fmt=".2f"),
        Claim("The safety representation predicts the distribution of steps to the next cost",
              measured=m["tv"], op="<=", threshold=0.25, label="mean TV(S2C, exact)",
              detail=f"land cells with ≥ {MIN_LABELS} labels in the S2C buffer, exact distribution under the final "
                     f"ε-greedy policy by forward propagation; a state-blind predictor (the buffer's label histogram) "
                     f"scores {m['tv_marginal']:.3f} on the same cells", fmt=".3f"),
        # added 2026-12-04 after a sweep of the widgets found that the claim above also passes for a predictor
        # that ignores the state; the bar is parity with that predictor, not tuned (it fails at the default)
        # wording (2026-12-04): this compares predictors of the *final* policy's distribution; it does not test
        # whether the prediction varies with the state (it does: see risk_pred_max), and with every label kept even a
        # perfect fit of the S2C's own data fails it (tv_emp_exact, module docstring)
        Claim("…and, for the final policy, it predicts steps-to-cost at least as well as the state-blind label "
              "histogram",
              measured=m["tv"] / max(m["tv_marginal"], 1e-9), op="<=", threshold=1.0,
              label="TV(S2C, exact) / TV(state-blind, exact)",
              detail=f"S2C {m['tv']:.3f} vs label histogram of the buffer {m['tv_marginal']:.3f}, same cells and "
                     "the same exact distribution under the final ε-greedy policy; the buffer's own per-cell label "
                     f"frequencies (a perfect fit of its data) score {m['tv_emp_exact']:.3f}", fmt=".2f"),
    ]
    return out


# ----------------------------------------------------------------------------- lab runs quoted by the page
# ``python -m engine.safety_representations lab`` trains every row below at training seeds 0..LAB_SEEDS-1 (the
# seeds a default run uses first) and writes the per-seed results to LAB_FILE; the page's "lab runs" table reads
# that file, and tests/test_safety_representations.py re-trains seed 0 of every row against it.
LAB_SEEDS = 20
LAB_FILE = "safety-representations/lab_runs.json"
LAB_ROWS = (
    ("plain agent", "baseline", {}),
    ("SRPL, S2C on all past labels (default)", "srpl", {}),
    ("SRPL, S2C on the last 4 000 labels", "srpl", {"s2c_history": False}),
    ("oracle: one-hot BFS distance to a hazard", "oracle", {}),
    ("constant vector (no information)", "const", {}),
    ("exact steps-to-cost of a random walk, from step 0", "s2c_exact", {}),
)


def lab_row(variant: str, settings: dict, seed: int) -> tuple[float, float]:
    """(violations over training, greedy success) of one training seed at the default settings + ``settings``."""
    r = _train(variant, Config(**settings), seed)
    return float(r["final_cost"]), float(r["eval_success"])


def lab_runs(seeds: int = LAB_SEEDS, progress=None) -> dict:
    rows = []
    for i, (label, variant, settings) in enumerate(LAB_ROWS):
        report(progress, i / len(LAB_ROWS), label)
        per = [lab_row(variant, settings, s) for s in range(seeds)]
        rows.append({"label": label, "variant": variant, "settings": settings,
                     "cost": [c for c, _ in per], "success": [s for _, s in per]})
    return {"seeds": seeds, "rows": rows}


def lab_summary(lab: dict) -> dict:
    """What the page shows of the lab runs: one table row per variant and the ratios its text quotes.

    Rows: label, mean violations, mean greedy success, seeds solved (success >= 0.5). ``exact_vs_plain``: mean
    violations of the exact steps-to-cost input over the plain agent's; ``const_shift``: |1 - const / plain|, how much
    an input carrying no information moves the violations by itself; ``exact_first10``: (violations, success) of the
    exact input over the first 10 seeds only.
    """
    table = [{"label": r["label"], "cost": float(np.mean(r["cost"])), "success": float(np.mean(r["success"])),
              "solved": int(sum(x >= 0.5 for x in r["success"]))} for r in lab["rows"]]
    rows = {r["variant"]: r for r in lab["rows"] if not r["settings"]}  # the default-setting rows
    plain, const, exact = (np.asarray(rows[k]["cost"], float) for k in ("baseline", "const", "s2c_exact"))
    exact_s = np.asarray(rows["s2c_exact"]["success"], float)
    return {"seeds": int(lab["seeds"]), "table": table,
            "exact_vs_plain": float(exact.mean() / plain.mean()), "exact_success": float(exact_s.mean()),
            "exact_first10": (float(exact[:10].mean()), float(exact_s[:10].mean())),
            "const_shift": float(abs(1 - const.mean() / plain.mean()))}


def load_lab_runs() -> dict | None:
    """The shipped lab runs, or None when the file is missing or unreadable."""
    from engine.core.surveys import load_survey

    return load_survey(LAB_FILE, "rows")


if __name__ == "__main__":  # pragma: no cover
    import sys
    import time

    from engine.core.surveys import write_survey

    if sys.argv[1:2] == ["lab"]:
        t0 = time.time()
        data = lab_runs(progress=lambda f, msg: print(f"{f:4.0%} {msg}", flush=True))
        for r in data["rows"]:
            print(f"{r['label']:55s} {np.mean(r['cost']):6.1f} {np.mean(r['success']):.2f} "
                  f"{sum(s >= 0.5 for s in r['success'])}")
        print(f"wrote {write_survey(LAB_FILE, data)} in {time.time() - t0:.0f}s")
