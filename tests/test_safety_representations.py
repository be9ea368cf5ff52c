import copy
import pickle
import warnings

import networkx as nx
import numpy as np
import pytest

from engine import safety_representations as eng
from engine.core import InputError
from tests.pagetext import charts, open_page, values


@pytest.fixture(scope="module")
def res():
    return eng.run(eng.Config())


def test_labels_by_hand():
    H = 10
    assert list(eng.steps_to_cost([0, 0, 0, 0, 1], H)) == [4, 3, 2, 1, H]
    assert list(eng.steps_to_cost([0, 1, 1, 1, 0], H)) == [1, 1, 1, H, H]
    assert list(eng.steps_to_cost([0] * 6 + [1], 3)) == [3, 3, 3, 3, 2, 1, 3]       # clipped at H_s
    assert list(eng.to_bins([1, 4, 5, 8, 80], 80, 4)) == [0, 0, 1, 1, 19]
    assert eng.n_bins(80, 4) == 20


def test_batched_episode_labels_match_single_trajectories():
    H = 4
    lens = np.array([5, 3, 7, 7])
    died = np.array([True, False, False, True])
    ended = np.array([True, True, False, True])      # episode 2 was cut by the time limit
    mask, delta = eng.episode_deltas(lens, died, ended, H, 8)
    # episode 0 enters water after its 5th state; episode 1 reaches the goal
    assert list(delta[0, :5]) == list(eng.steps_to_cost([0, 0, 0, 0, 0, 1], H)[:5]) == [4, 4, 3, 2, 1]
    assert list(delta[1, :3]) == list(eng.steps_to_cost([0, 0, 0, 0], H)[:3])
    assert list(delta[3, :7]) == list(eng.steps_to_cost([0] * 7 + [1], H)[:7])
    assert mask[0].sum() == 5 and mask[1].sum() == 3 and mask[3].sum() == 7
    # truncated: only states with H - 1 observed safe steps after them get the label "no cost within H - 1"
    assert mask[2].sum() == 7 - H + 2 and np.all(delta[2][mask[2]] == H)


def _brute_labels(seq, water_flags, ended, H):
    """Labels straight from the definition, by scanning forward along one episode.

    seq: visited cells s_0..s_T (the last one is the cell the final move reached: water, goal or, when
    the time limit cut the episode, an ordinary land cell). Returns {t: delta} for the states whose label is
    determined by what was observed: a cost within H - 1 steps, or H - 1 observed safe steps after t, or
    an episode that truly ended safely (the goal absorbs, no cost can follow).
    """
    out = {}
    for t in range(len(seq) - 1):               # the last cell is not a state the agent acted in
        delta = None
        for j in range(1, H):
            if t + j >= len(seq):
                delta = H if ended else None     # goal reached: safe forever; cut: unknown
                break
            if water_flags[t + j]:
                delta = j
                break
        else:
            delta = H
        if delta is not None:
            out[t] = delta
    return out


def test_episode_labels_match_brute_force_on_random_rollouts():
    # Random-walk episodes on the field map with a short time limit, so that deaths, goal arrivals and
    # time-limit cuts all occur; the engine's batched labels must equal the forward scan above.
    water, start, goal = eng.parse_map("field")
    R, C = water.shape
    nxt, wat = eng.next_cell(water), water.ravel()
    s0, gi = start[0] * C + start[1], goal[0] * C + goal[1]
    rng = np.random.default_rng(7)
    H, limit = 6, 14
    kinds = set()
    for _ in range(300):
        seq, p = [s0], s0
        while True:
            p = int(nxt[p, rng.integers(0, 4)])
            seq.append(p)
            if wat[p] or p == gi or len(seq) - 1 >= limit:
                break
        died, won = bool(wat[seq[-1]]), seq[-1] == gi
        ended = died or won
        kinds.add("died" if died else "goal" if won else "cut")
        lens = len(seq) - 1
        mask, delta = eng.episode_deltas(np.array([lens]), np.array([died]), np.array([ended]), H, limit + 1)
        ref = _brute_labels(seq, [bool(wat[c]) for c in seq], ended and not died, H)
        got = {t: int(delta[0, t]) for t in range(limit + 1) if mask[0, t]}
        assert got == ref
    assert kinds == {"died", "cut"} or kinds == {"died", "goal", "cut"}


def test_perfect_state_centric_representation():
    # The diagnostic "s2c_exact" input is the exact steps-to-cost distribution of the uniformly random policy:
    # on the corridor between the strips (both neighbours above and below are hazards) P(delta = 1) is
    # 1/2 * (moves into a hazard) for a random move, independent of the slip; far from the hazards it is 0.
    water, start, goal = eng.parse_map("field")
    R, C = water.shape
    gi = goal[0] * C + goal[1]
    H = 10
    p = eng.bin_dist(eng.exact_steps_to_cost(np.full((R * C, 4), 0.25), water, gi, 0.1, H), H, 1)
    assert np.allclose(p.sum(1), 1)
    assert np.isclose(p[4 * C + 5, 0], 0.5)                  # corridor cell: up or down = hazard
    assert np.isclose(p[0 * C + 0, :3].sum(), 0.0)           # corner, 6 steps from a hazard: no cost within 3
    r = eng._train("s2c_exact", eng.Config(env_steps=5_000), 0)
    assert np.isfinite(r["final_cost"]) and 0.0 <= r["eval_success"] <= 1.0


def test_oracle_distance_is_bfs():
    for name in eng.MAPS:
        water, _, _ = eng.parse_map(name)
        g = nx.grid_2d_graph(*water.shape)
        src = [tuple(c) for c in np.argwhere(water)]
        d = nx.multi_source_dijkstra_path_length(g, src)
        ref = np.array([[d[(i, j)] for j in range(water.shape[1])] for i in range(water.shape[0])])
        assert np.array_equal(eng.water_distance(water), ref)


def _brute_distance(water):
    """Distance to the nearest hazard by brute force: on an open 4-neighbour grid it is the Manhattan distance."""
    R, C = water.shape
    haz = np.argwhere(water)
    return np.array([[np.abs(haz - (i, j)).sum(1).min() for j in range(C)] for i in range(R)])


def test_map_geometry_by_brute_force():
    for name in eng.MAPS:
        water, _, _ = eng.parse_map(name)
        assert np.array_equal(eng.water_distance(water), _brute_distance(water))
    # field: a walled room (no hazard on the border), distances 1..6 on land, 22 of 96 land cells next to a hazard
    water, start, goal = eng.parse_map("field")
    d = _brute_distance(water)
    assert not (water[0].any() or water[-1].any() or water[:, 0].any() or water[:, -1].any())
    assert set(d[~water]) == {1, 2, 3, 4, 5, 6}
    assert (~water).sum() == 96 and (d[~water] == 1).sum() == 22
    # a short route along the hazards and a longer one that keeps two cells away from them
    land = nx.grid_2d_graph(*water.shape)
    land.remove_nodes_from([tuple(c) for c in np.argwhere(water)])
    safe = land.subgraph([n for n in land if d[n] >= 2])
    short = nx.shortest_path_length(land, start, goal)
    detour = nx.shortest_path_length(safe, start, goal)
    assert short == 11 and detour > short
    assert all(d[c] == 1 for c in nx.shortest_path(land, start, goal)[3:-3])   # the corridor borders both strips


def test_default_map_rule_by_hand():
    # The default map is picked by geometry alone: < half of the land cells next to a hazard and >= 3 distances.
    share = {}
    for name in eng.MAPS:
        water, _, _ = eng.parse_map(name)
        d = _brute_distance(water)[~water]
        share[name] = (d == 1).mean()
        assert np.isclose(eng.hazard_adjacent_share(name), share[name])
    assert share["island"] >= 0.5 and share["two rooms"] >= 0.5 and share["field"] < 0.5
    assert eng.DEFAULT_MAP == eng.pick_default_map() == eng.Config().grid == "field"


def test_walls_block_moves():
    # The field's edge is a wall: a move off the grid leaves the agent where it is (independent reference).
    water, _, _ = eng.parse_map("field")
    R, C = water.shape
    nxt = eng.next_cell(water)
    for i in range(R):
        for j in range(C):
            ref = [(max(i - 1, 0), j), (min(i + 1, R - 1), j), (i, max(j - 1, 0)), (i, min(j + 1, C - 1))]
            assert [divmod(int(c), C) for c in nxt[i * C + j]] == ref


def test_exact_steps_to_cost_matches_monte_carlo():
    for name, probe in (("island", (4, 6)), ("field", (4, 5))):
        _monte_carlo_check(name, probe)


def _monte_carlo_check(name, probe):
    water, start, goal = eng.parse_map(name)
    R, C = water.shape
    N, gi = R * C, goal[0] * C + goal[1]
    rng = np.random.default_rng(1)
    pol = rng.dirichlet(np.ones(4), N)
    pol[:, 3] += 2.0                                       # drift right so that the goal is reached
    pol /= pol.sum(1, keepdims=True)
    H, slip = 12, 0.2
    exact = eng.exact_steps_to_cost(pol, water, gi, slip, H)
    nxt, wat = eng.next_cell(water), water.ravel()
    M = 100_000
    for s0 in (start[0] * C + start[1], probe[0] * C + probe[1]):
        p = np.full(M, s0)
        delta = np.full(M, H)
        alive = np.ones(M, dtype=bool)
        for k in range(1, H):
            a = (pol[p].cumsum(1) > rng.random(M)[:, None]).argmax(1)
            sl = rng.random(M) < slip
            a[sl] = rng.integers(0, 4, sl.sum())
            new = nxt[p, a]
            hit = alive & wat[new]
            delta[hit] = k
            alive &= ~wat[new] & (new != gi)
            p = np.where(alive, new, p)
        mc = np.bincount(delta, minlength=H + 1)[1:] / M
        assert np.abs(mc - exact[s0]).max() < 0.01


def test_mlp_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    net = eng.MLP(3, 4, rng, hidden=8)
    x = rng.random((5, 3))
    target = rng.normal(size=(5, 4))

    def loss():
        return 0.5 * ((net(x) - target) ** 2).sum()

    out, h = net.forward(x)
    g_out = out - target
    gh = (g_out @ net.p[2].T) * (h > 0)
    analytic = np.concatenate([(x.T @ gh).ravel(), gh.sum(0), (h.T @ g_out).ravel(), g_out.sum(0)])
    numeric = np.zeros_like(net.flat)
    for i in range(net.flat.size):
        old = net.flat[i]
        net.flat[i] = old + 1e-6
        up = loss()
        net.flat[i] = old - 1e-6
        numeric[i] = (up - loss()) / 2e-6
        net.flat[i] = old
    assert np.allclose(analytic, numeric, atol=1e-5)


def _kinked_share(net, X):
    """Share of hidden units whose pre-activation changes sign over the inputs X."""
    on = X @ net.p[0] + net.p[1] > 0
    return float(1.0 - on.all(0).mean() - (~on).all(0).mean())


def test_augmented_q_network_starts_as_the_plain_one():
    # Regression: the augmented Q network used to draw all first-layer weights with fan-in 2 + K and put
    # its ReLU kinks at random points of the (2 + K)-cube. The appended probability vector lives on the
    # simplex, so most kinks missed the data (and the coordinate pathway differed from the baseline's).
    water, _, _ = eng.parse_map("island")
    R, C = water.shape
    rr, cc = np.divmod(np.arange(R * C), C)
    land = ~water.ravel()
    x = np.stack([rr / (R - 1), cc / (C - 1)], 1)[land]
    K = 10
    onehot = np.eye(K)[eng.to_bins(np.maximum(eng.water_distance(water).ravel(), 1), K, 1)][land]
    uniform = np.full((len(x), K), 1.0 / K)
    new, old, plain = [], [], []
    for seed in range(20):
        base = eng.MLP(2, 4, np.random.default_rng(seed))
        aug = eng.MLP(2 + K, 4, np.random.default_rng(seed), n_prob=K, prob_rng=np.random.default_rng(100 + seed))
        # fed an uninformative (uniform) vector, the augmented network is the plain one
        assert np.allclose(aug(np.c_[x, uniform]), base(x))
        plain.append(_kinked_share(base, x))
        new.append(_kinked_share(aug, np.c_[x, onehot]))
        old.append(_kinked_share(eng.MLP(2 + K, 4, np.random.default_rng(seed)), np.c_[x, onehot]))  # old init
    assert np.mean(plain) > 0.85 and np.mean(new) > 0.8
    assert np.mean(old) < 0.6                      # the old init: under half of the units see a kink


def test_value_update_does_not_touch_s2c():
    rng = np.random.default_rng(0)
    s2c, q = eng.MLP(2, 5, rng), eng.MLP(7, 4, rng)
    x = rng.random((16, 2))
    before = s2c.flat.copy()
    feats = np.concatenate([x, eng.softmax(s2c(x))], 1)
    out, h = q.forward(feats)
    q.step(feats, h, out - 1.0)
    assert np.array_equal(s2c.flat, before)


def test_claims_at_default(res):
    cl = eng.claims(res)
    # Not reproduced at this scale (see the page and the engine docstring), so not asserted. At the default
    # config (field map, 3 seeds, S2C on all past experience) the measured values are cl[0]
    # cost(SRPL)/cost(baseline) = 1.01 (needs <= 0.8), cl[1] success(SRPL) - success(baseline) = -0.33
    # (needs >= -0.05), cl[2] greedy success of SRPL = 0.00 (needs >= 0.5); with the old last-4 000-labels
    # buffer 0.91 / -0.33 / 0.00.
    assert cl[3].passed, cl[3].describe()
    # Claim 3 does not test state dependence: on the visited cells a state-blind predictor (the label
    # histogram of the buffer) also stays under 0.25; it is reported in the badge detail.
    assert np.isfinite(res.metrics["tv_marginal"])
    # ...which is why cl[4] compares the two; at the default the S2C is the worse one (0.147 vs 0.111), not asserted
    assert len(cl) == 5
    assert cl[4].measured == pytest.approx(res.metrics["tv"] / res.metrics["tv_marginal"])
    # why cl[4] fails: even the buffer's own per-cell label frequencies (a perfect fit of the S2C's data) are further
    # from the final policy's distribution than the histogram (0.139 vs 0.111): the labels are old, not badly fitted
    assert 0.0 <= res.metrics["tv_emp_exact"] <= 1.0
    assert res.metrics["tv_emp_exact"] >= res.metrics["tv_marginal"]
    assert res.metrics["tv_fit"] < res.metrics["tv_emp_exact"]
    assert 0.0 < res.metrics["explore_share_baseline"] <= 1.0
    land = ~res.water
    exact = res.exact_dist[land]
    uniform_tv = 0.5 * np.abs(exact - 1.0 / exact.shape[-1]).sum(-1).mean()
    assert uniform_tv > cl[3].threshold            # an uninformative predictor fails the bar
    assert np.allclose(res.pred_dist.sum(-1), 1) and np.allclose(res.exact_dist.sum(-1), 1)
    assert all(np.all(np.diff(res.cum_cost[v], axis=1) >= 0) for v in res.variants)
    assert len(pickle.dumps(res)) < 2_000_000


def test_state_dependence_badge_separates_good_and_blind_predictors(res):
    land = ~res.water
    exact = res.exact_dist[land]
    marg = exact.mean(0)                                    # a state-blind predictor
    blind_tv = 0.5 * np.abs(marg - exact).sum(-1).mean()
    for tv, ok in ((0.0, True), (blind_tv, True), (1.5 * blind_tv, False)):
        fake = copy.copy(res)
        fake.metrics = {**res.metrics, "tv": tv, "tv_marginal": blind_tv}
        assert bool(eng.claims(fake)[4].passed) is ok


def test_oracle_helps_on_default_map(res):
    # The mechanism can work on the default map: the true distance to the hazards lowers the violations and
    # raises the greedy success against the plain agent (default seeds; 5 seeds: 132 / 0.75 vs 182 / 0.40).
    # The learned representation does not reach that (claims above); its largest predicted P(cost within ~2
    # steps) stays below the exact one (0.64 vs 0.89 at the default seed; 0.33 with the last-4 000 buffer).
    r = eng.run(eng.Config(oracle=True))
    m = r.metrics
    assert np.allclose(r.final_cost["baseline"], res.final_cost["baseline"])   # variants are paired
    assert m["cost_oracle"] < m["cost_baseline"] and m["success_oracle"] > m["success_baseline"]
    assert m["risk_pred_max"] < m["risk_exact_max"]
    assert 0.5 < m["risk_exact_max"]


def test_s2c_history_keeps_every_label():
    # With bin_size 1 every water entry leaves exactly one label delta = 1 (on the state it was entered from).
    # The violations are tallied separately from the labelling, so if the buffer keeps the whole run (the
    # paper's training on all past experience), its bin-0 count must equal that tally.
    cfg = eng.Config(env_steps=8_000)
    out = eng._train("srpl", cfg, 0)
    assert out["final_cost"] > 0
    assert out["label_hist"][0] == out["final_cost"]
    # every visited state gets at most one label
    assert out["label_hist"].sum() <= out["visits"].sum()
    # the old FIFO buffer holds only the last S2C_BUFFER labels and loses early violations
    old = eng._train("srpl", eng.Config(s2c_history=False), 0)
    assert old["label_hist"].sum() == eng.S2C_BUFFER
    assert old["label_hist"][0] < old["final_cost"]


def test_bad_settings():
    with pytest.raises(InputError):
        eng.run(eng.Config(horizon=2, bin_size=2))


def test_quoted_oracle_run_is_what_the_engine_measures():
    """The page quotes the oracle run (default settings, oracle on, 5 seeds) as evidence that a safety input can
    help on the default map: re-measure it."""
    m = eng.run(eng.ORACLE_RUN).metrics
    q = eng.QUOTED_ORACLE
    for v in ("oracle", "baseline"):
        assert round(m[f"cost_{v}"]) == q[f"cost_{v}"], (v, m[f"cost_{v}"])
        assert abs(m[f"success_{v}"] - q[f"success_{v}"]) < 0.006, (v, m[f"success_{v}"])
    assert m["cost_oracle"] < 0.8 * m["cost_baseline"] and m["success_oracle"] > m["success_baseline"]


def test_shipped_lab_runs_are_what_the_engine_measures():
    """The page's lab-run table reads assets/safety-representations/lab_runs.json: every row of the engine's list is
    there with every seed, and re-training seed 0 of each row gives exactly the stored values."""
    lab = eng.load_lab_runs()
    assert lab is not None and lab["seeds"] == eng.LAB_SEEDS
    assert [(r["label"], r["variant"], r["settings"]) for r in lab["rows"]] == list(eng.LAB_ROWS)
    for r in lab["rows"]:
        assert len(r["cost"]) == len(r["success"]) == eng.LAB_SEEDS
        assert eng.lab_row(r["variant"], r["settings"], 0) == (r["cost"][0], r["success"][0]), r["label"]
    # seed 0 of the default-setting rows is also the first seed of a default page run
    res = eng.run(eng.Config(n_seeds=1))
    base = next(r for r in lab["rows"] if r["variant"] == "baseline")
    assert res.final_cost["baseline"][0] == base["cost"][0]


def test_lab_summary_by_hand():
    """The page's lab table and quoted ratios come from lab_summary; checked on a hand-made two-seed file."""
    def row(variant, cost, success, settings=None):
        return {"label": variant, "variant": variant, "settings": settings or {}, "cost": cost, "success": success}

    lab = {"seeds": 2, "rows": [row("baseline", [200, 100], [0.5, 0.1]), row("srpl", [90, 30], [0.0, 1.0]),
                                row("srpl", [1, 1], [1.0, 1.0], {"s2c_history": False}),
                                row("const", [120, 120], [0.2, 0.2]), row("s2c_exact", [60, 30], [0.25, 0.75])]}
    s = eng.lab_summary(lab)
    assert s["seeds"] == 2 and [r["solved"] for r in s["table"]] == [1, 1, 2, 0, 1]
    assert s["table"][0]["cost"] == 150 and s["table"][1]["success"] == 0.5
    assert s["exact_vs_plain"] == pytest.approx(45 / 150) and s["exact_success"] == 0.5
    assert s["const_shift"] == pytest.approx(0.2) and s["exact_first10"] == (45.0, 0.5)


def _moves_from(cell, shape):
    """The four cells reached from `cell` by up, down, left, right (a move off the grid stays put)."""
    (i, j), (R, C) = cell, shape
    return [(max(i - 1, 0), j), (min(i + 1, R - 1), j), (i, max(j - 1, 0)), (i, min(j + 1, C - 1))]


def _move_probs(arrow, slip, eps=0.0):
    """P(move) for an epsilon-greedy agent whose greedy action is `arrow`, with a slip to a uniform random move."""
    act = np.full(4, eps / 4) + (1 - eps) * (np.array(list("↑↓←→")) == arrow)
    return [(1 - slip) * act[m] + slip / 4 for m in range(4)]


def test_reported_exact_distribution_is_that_of_the_final_epsilon_greedy_policy():
    """The 'exact' steps-to-cost map the page compares the S2C with is the final greedy policy with epsilon = EPS_END
    (a proper distribution over actions): re-derived cell by cell by pushing probability mass forward in plain Python."""
    cfg = eng.Config(env_steps=8_000)
    r = eng._train("srpl", cfg, 0)
    water, _, goal = eng.parse_map(cfg.grid)
    H = cfg.horizon
    for (i, j) in zip(*np.nonzero(~water)):
        if (i, j) == goal:
            continue
        mass, ref = {(i, j): 1.0}, np.zeros(H)
        for k in range(H - 1):                     # P(delta = k + 1): mass entering a hazard at step k + 1
            new = {}
            for c, m in mass.items():
                for nc, p in zip(_moves_from(c, water.shape), _move_probs(r["arrows"][c], cfg.slip, eng.EPS_END)):
                    if water[nc]:
                        ref[k] += m * p
                    elif nc != goal:                 # the goal absorbs safely
                        new[nc] = new.get(nc, 0.0) + m * p
            mass = new
        ref[H - 1] = 1.0 - ref[:-1].sum()
        assert np.allclose(r["exact"][i, j], ref, atol=1e-9), (i, j)


def _greedy_success_probability(arrows, grid, slip):
    """Exact probability that the greedy policy (with slips) reaches the goal before a hazard within TIME_LIMIT moves."""
    water, start, goal = eng.parse_map(grid)
    mass, succ = {start: 1.0}, 0.0
    for _ in range(eng.TIME_LIMIT):
        new = {}
        for c, m in mass.items():
            for nc, p in zip(_moves_from(c, water.shape), _move_probs(arrows[c], slip)):
                if nc == goal:
                    succ += m * p
                elif not water[nc]:
                    new[nc] = new.get(nc, 0.0) + m * p
        mass = new
    return succ


def test_greedy_success_matches_the_exact_probability(monkeypatch):
    """The greedy evaluation's success rate (200 sampled episodes) agrees, within 4 binomial standard errors, with the
    exact success probability of the same greedy policy; a hazard ends an episode for good. On a hand-built 3 x 3 map
    every move from the start either enters a hazard or reaches the goal, so nothing after a death may count."""
    monkeypatch.setitem(eng.MAPS, "cross", [".W.", "WSG", ".W."])
    for variant, cfg, seed in (("baseline", eng.Config(grid="cross", slip=0.3, env_steps=5_000), 0),
                               ("oracle", eng.Config(slip=0.3, env_steps=12_800), 0)):
        r = eng._train(variant, cfg, seed)
        p = _greedy_success_probability(r["arrows"], cfg.grid, cfg.slip)
        assert 0.2 < p < 0.9                        # a case where the check has power
        se = np.sqrt(p * (1 - p) / eng.EVAL_EPISODES)
        assert abs(r["eval_success"] - p) < 4 * se, (cfg.grid, r["eval_success"], p)


def test_lambda_returns_are_the_weighted_n_step_returns():
    """Q(λ) targets against their definition: (1 − λ) Σ_n λ^(n−1) G⁽ⁿ⁾ over the n-step returns that stay inside the
    episode and the rollout, the longest one taking the remaining weight λ^(N−1); G⁽ⁿ⁾ = Σ_k<n γ^k r + γ^n b."""
    rng = np.random.default_rng(0)
    T, E, gamma, lam = 7, 4, 0.9, 0.7
    rews, boot = rng.normal(size=(T, E)), rng.normal(size=(T, E))
    done = np.zeros((T, E), dtype=bool)
    done[2, 1] = done[0, 2] = done[4, 2] = done[T - 1, 3] = True
    G = eng.lambda_returns(rews, boot, done, gamma, lam)
    for e in range(E):
        for t in range(T):
            end = next((k for k in range(t, T) if done[k, e]), T - 1)
            N = end - t + 1
            nstep = [sum(gamma**k * rews[t + k, e] for k in range(n)) + gamma**n * boot[t + n - 1, e]
                     for n in range(1, N + 1)]
            want = (1 - lam) * sum(lam ** (n - 1) * nstep[n - 1] for n in range(1, N)) + lam ** (N - 1) * nstep[-1]
            assert G[t, e] == pytest.approx(want, rel=1e-12, abs=1e-12), (t, e)


# ---------------------------------------------------------------- what the page reads off the result


@pytest.fixture(scope="module")
def small_two_seeds():
    """A short run at first seed 1 with two training seeds, and the same seeds trained one by one."""
    cfg = eng.Config(seed=1, n_seeds=2, env_steps=5_000, oracle=True)
    r = eng.run(cfg)
    single = {(v, s): eng._train(v, cfg, 1000 * cfg.seed + s) for v in r.variants for s in range(cfg.n_seeds)}
    return cfg, r, single


def test_seed_widget_and_first_seed_views(small_two_seeds):
    """The seed widget picks training seeds 1000·seed + s (the lab table's seed 0 is that of seed 0); the heat maps,
    the histogram, the label counts and the policy arrows all show the first training seed."""
    cfg, r, single = small_two_seeds
    for v in r.variants:
        for s in range(cfg.n_seeds):
            assert r.final_cost[v][s] == single[v, s]["final_cost"], (v, s)
            assert r.eval_success[v][s] == single[v, s]["eval_success"], (v, s)
            np.testing.assert_array_equal(r.cum_cost[v][s], single[v, s]["cum_cost"])
        np.testing.assert_array_equal(r.arrows[v], single[v, 0]["arrows"])
    first = single["srpl", 0]
    np.testing.assert_array_equal(r.pred_dist, first["pred"])
    np.testing.assert_array_equal(r.exact_dist, first["exact"])
    np.testing.assert_array_equal(r.visits, first["visits"])
    np.testing.assert_array_equal(r.label_hist, first["label_hist"])
    assert not np.array_equal(single["srpl", 1]["pred"], first["pred"])          # the seeds differ
    assert not np.array_equal(single["baseline", 1]["arrows"], single["baseline", 0]["arrows"])


def _check_success_windows(r, outs):
    """outs[v, s]: _train's output of training seed s; windows rebuilt from its episode ends."""
    n_win = len(r.succ_x)
    np.testing.assert_array_equal(r.succ_x, 1000 * np.arange(n_win) + 500)
    assert (n_win - 1) * 1000 < r.steps[-1] <= n_win * 1000
    for (v, s), out in outs.items():
        ends, succ = out["ends_step"], out["ends_succ"]
        for w in range(n_win):
            sel = [bool(x) for e, x in zip(ends, succ) if w * 1000 < e <= (w + 1) * 1000]
            got = r.succ_rate[v][s, w]
            if sel:
                assert got == pytest.approx(sum(sel) / len(sel)), (v, s, w)
            else:
                assert np.isnan(got), (v, s, w)


def test_success_rate_windows_by_brute_force(small_two_seeds, res):
    """'Share of episodes that reach the goal, per 1 000 steps': window w holds the episodes that ended at env steps
    w·1000 + 1 … (w + 1)·1000, drawn at its centre; a window without an ending episode has no value. At the default
    some episodes end exactly on a window edge (4 000, 8 000, ...), which must count in the window they close."""
    cfg, r, single = small_two_seeds
    _check_success_windows(r, single)
    outs = {(v, 0): eng._train(v, eng.Config(), 0) for v in ("baseline", "srpl")}
    assert any(np.any(o["ends_step"] % 1000 == 0) for o in outs.values())
    _check_success_windows(res, outs)


def test_visits_count_the_cells_the_agent_acted_in(small_two_seeds):
    """The histogram title's visit count: one per environment step, on the cell the action was taken from, so never on a
    hazard or on the goal (both end the episode)."""
    cfg, r, single = small_two_seeds
    out = single["srpl", 0]
    water, _, goal = eng.parse_map(cfg.grid)
    assert out["visits"].sum() == out["steps"][-1]
    assert out["visits"][water].sum() == 0 and out["visits"][goal] == 0
    assert out["final_cost"] > 0                              # hazards were entered, so the check has power


def test_summary_metrics_are_seed_means_and_curve_ends(res):
    """The caption's seed means, the per-variant violation curves (their last point is the violation count the
    badges use) and the share of violations in the first 40 % of training."""
    m = res.metrics
    for v in res.variants:
        assert m[f"cost_{v}"] == pytest.approx(np.mean(res.final_cost[v]))
        assert m[f"success_{v}"] == pytest.approx(np.mean(res.eval_success[v]))
        np.testing.assert_array_equal(res.cum_cost[v][:, -1], res.final_cost[v])
        k = int(np.argmin(np.abs(res.steps - eng.EPS_FRAC * res.steps[-1])))
        assert res.steps[k] == pytest.approx(eng.EPS_FRAC * res.steps[-1], rel=0.02)
        assert m[f"explore_share_{v}"] == pytest.approx(res.cum_cost[v][:, k].sum() / res.cum_cost[v][:, -1].sum())
    assert m["tv"] == pytest.approx(np.mean(res.tv))
    # geometry line of the info box: the field map by brute force (see test_map_geometry_by_brute_force)
    assert (m["land_cells"], m["land_cells_next_to_water"], m["max_hazard_distance"]) == (96, 22, 6)


@pytest.mark.parametrize("bin_size", [1, 2])
def test_risk_maxima_are_the_chance_of_a_cost_within_two_steps(bin_size):
    """'largest predicted chance of a cost within about 2 steps' and the exact one: the probability of the bins of
    δ ≤ 2 (two bins of one step, or one bin of two), largest over the land cells, first training seed."""
    r = eng.run(eng.Config(n_seeds=1, env_steps=5_000, oracle=False, bin_size=bin_size))
    land = ~r.water
    for key, dist in (("risk_pred_max", r.pred_dist), ("risk_exact_max", r.exact_dist)):
        within2 = dist[..., : 2 // bin_size].sum(-1)
        assert r.metrics[key] == pytest.approx(within2[land].max()), key
    assert r.metrics["risk_exact_max"] > 0.5


def test_tv_badges_against_a_recount_on_every_land_cell(monkeypatch):
    """With the label threshold at 0 every land cell but the goal is scored: the S2C's TV and the state-blind label
    histogram's TV to the exact distribution, recomputed from the returned maps and the label counts."""
    monkeypatch.setattr(eng, "MIN_LABELS", 0)
    cfg = eng.Config(env_steps=5_000)
    out = eng._train("srpl", cfg, 0)
    water, _, goal = eng.parse_map(cfg.grid)
    cells = ~water
    cells[goal] = False
    pred, exact = out["pred"][cells], out["exact"][cells]
    marg = out["label_hist"] / out["label_hist"].sum()
    assert out["tv"] == pytest.approx(np.mean(0.5 * np.abs(pred - exact).sum(1)))
    assert out["tv_marginal"] == pytest.approx(np.mean(0.5 * np.abs(marg - exact).sum(1)))


def test_episode_ends_and_labels_on_a_map_where_every_move_ends_the_episode(monkeypatch):
    """On a 3 × 3 map where every move from the start enters a hazard or the goal, every episode lasts one step: each
    of the E environments ends an episode at every step, so the episode-end step counts (read by the success-rate
    windows) are E, …, E (E times), 2E, …, the agent only ever acts from the start cell, and each episode leaves one
    label, δ = 1 after a hazard (first bin) or 'safe within H_s' after the goal (last bin)."""
    monkeypatch.setitem(eng.MAPS, "cross", [".W.", "WSG", ".W."])
    cfg = eng.Config(grid="cross", env_steps=5_000)
    out = eng._train("srpl", cfg, 0)
    E = eng.N_ENVS
    total = int(out["steps"][-1])
    np.testing.assert_array_equal(out["ends_step"], np.repeat(np.arange(1, total // E + 1) * E, E))
    wins = int(out["ends_succ"].sum())
    assert 0 < wins < total and wins + out["final_cost"] == total
    assert out["visits"][1, 1] == total and out["visits"].sum() == total
    assert out["label_hist"][0] == out["final_cost"] and out["label_hist"][-1] == wins
    assert out["label_hist"].sum() == total
    # here E episodes end on the window edge at step 4 000 (125 E): they belong to the window that step closes
    r = eng.run(eng.Config(grid="cross", env_steps=5_000, n_seeds=1, oracle=False))
    _check_success_windows(r, {("srpl", 0): out, ("baseline", 0): eng._train("baseline", cfg, 0)})


# ----------------------------------------------------------------------------- what the page draws


def test_page_histograms_bands_and_success_caption_follow_the_result(res):
    """The default page, read back (then opened on another cell through its link): the steps-to-cost bars of the picked cell are
    the model's and the exact distribution under their own names, each bin is labelled with the steps δ it holds
    (from the class rule min(⌊(δ − 1)/b⌋, K − 1)), the 'cost within ~2 steps' maps sum the bins of δ ≤ 2 on land
    and leave water blank, the cumulative-violation bands span the seeds' range, and the caption's greedy success
    is the seed mean."""
    cfg = eng.Config()
    at = open_page("safety_representations", seed=(("engine.safety_representations", eng.Config(), res),))
    ch = charts(at)

    # bin labels from the class rule of "how it works"
    K = res.pred_dist.shape[-1]
    members = {k: [d for d in range(1, cfg.horizon + 1) if min((d - 1) // cfg.bin_size, K - 1) == k] for k in range(K)}
    labels = [f"≥ {members[k][0]}" if k == K - 1 else
              (str(members[k][0]) if len(members[k]) == 1 else f"{members[k][0]}–{members[k][-1]}") for k in range(K)]

    land = [(i, j) for i in range(res.water.shape[0]) for j in range(res.water.shape[1]) if not res.water[i, j]]
    # the histogram opens on the map's start cell, where every episode begins
    start = eng.parse_map(cfg.grid)[1]
    assert at.selectbox(key="safety-representations:cell").value == f"{start[0]},{start[1]}"
    bars = {t["name"]: t for t in ch["hist"]}
    assert list(bars["S2C prediction"]["x"]) == labels
    np.testing.assert_allclose(values(bars["S2C prediction"]["y"]), res.pred_dist[start])
    np.testing.assert_allclose(values(bars["exact"]["y"]), res.exact_dist[start])
    assert np.any(res.exact_dist[start][:-1] > 0)      # near enough to a hazard that not all mass is in "≥ K"

    near = [k for k in range(K - 1) if members[k] and members[k][0] <= 2]
    for key, dist in (("pred", res.pred_dist), ("exact", res.exact_dist)):
        z = values(next(t for t in ch[key] if t["type"] == "heatmap")["z"])
        assert np.all(np.isnan(z[res.water]))
        np.testing.assert_allclose(z[~res.water], dist[..., near].sum(-1)[~res.water], rtol=1e-6)

    lines = ch["cost"]
    for v in res.variants:
        k = next(i for i, t in enumerate(lines) if t.get("name") == eng.LABELS[v])
        band = values(lines[k - 1]["y"])
        n = res.cum_cost[v].shape[1]
        np.testing.assert_allclose(band[:n], res.cum_cost[v].max(0))
        np.testing.assert_allclose(band[n:][::-1], res.cum_cost[v].min(0))
        np.testing.assert_allclose(values(lines[k]["y"]), res.cum_cost[v].mean(0))

    cap = next(c.value for c in at.caption if c.value.startswith("Greedy success after training"))
    for v in res.variants:
        assert f"{eng.LABELS[v]} {np.mean(res.eval_success[v]):.2f}" in cap
    assert any(np.ptp(res.eval_success[v]) >= 0.01 for v in res.variants)

    # the picked cell is a view setting bound to the URL: a link with it opens on that cell's histogram
    other = land[5]
    assert other != start
    at = open_page("safety_representations", {"cell": f"{other[0]},{other[1]}"},
                   seed=(("engine.safety_representations", eng.Config(), res),))
    assert at.selectbox(key="safety-representations:cell").value == f"{other[0]},{other[1]}"
    bars = {t["name"]: t for t in charts(at)["hist"]}
    np.testing.assert_allclose(values(bars["S2C prediction"]["y"]), res.pred_dist[other])
    np.testing.assert_allclose(values(bars["exact"]["y"]), res.exact_dist[other])
    assert any(f"from row {other[0]}, col {other[1]} " in h.value for h in at.get("html"))
    at.selectbox(key="safety-representations:cell").set_value(f"{land[2][0]},{land[2][1]}").run()
    assert at.query_params["cell"] in (f"{land[2][0]},{land[2][1]}", [f"{land[2][0]},{land[2][1]}"])


# ---- added by mutation testing (2026-12-07): each kills a mutant the file above let through ----

def test_tv_badges_score_only_cells_with_enough_labels(monkeypatch):
    """Claim 3 is measured on the cells with >= MIN_LABELS labels in the S2C buffer (the spec: 'cells
    visited >= 20 times'), not on every land cell. On a 3 x 3 map where every move from the start enters
    a hazard or the goal, the agent only ever acts from the start cell, so the buffer holds one label
    per step there and none anywhere else: both TV badges must then be the start cell's own TV,
    recomputed here, and with the bar above the label count no cell qualifies (NaN)."""
    monkeypatch.setitem(eng.MAPS, "cross", [".W.", "WSG", ".W."])
    cfg = eng.Config(grid="cross", env_steps=5_000)
    out = eng._train("srpl", cfg, 0)
    total = int(out["steps"][-1])
    assert out["label_hist"].sum() == total >= eng.MIN_LABELS and out["visits"][1, 1] == total
    pred, exact = out["pred"][1, 1], out["exact"][1, 1]
    assert out["tv"] == pytest.approx(0.5 * np.abs(pred - exact).sum(), rel=1e-12)
    marg = out["label_hist"] / out["label_hist"].sum()
    assert out["tv_marginal"] == pytest.approx(0.5 * np.abs(marg - exact).sum(), rel=1e-12)
    # the never-visited corner cells would move the score (so the check has teeth)
    cells = [(1, 1), (0, 0), (0, 2), (2, 0), (2, 2)]
    every = np.mean([0.5 * np.abs(out["pred"][c] - out["exact"][c]).sum() for c in cells])
    assert abs(every - out["tv"]) > 1e-3
    monkeypatch.setattr(eng, "MIN_LABELS", total + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)       # no mean of an empty selection either
        out = eng._train("srpl", cfg, 0)
    assert np.isnan(out["tv"]) and np.isnan(out["tv_emp"]) and np.isnan(out["tv_marginal"])


def test_cost_and_success_badges_are_the_seed_mean_ratios(res):
    """Claims 1-2 read the per-seed results: cost(SRPL)/cost(baseline) from the violation counts, the
    success difference and SRPL's success from the greedy evaluations, recomputed here from
    res.final_cost / eval_success; and on made-up numbers a safer, successful SRPL passes all three
    badges while a less safe one fails the first."""
    cl = eng.claims(res)
    fc, ev = res.final_cost, res.eval_success
    assert cl[0].measured == pytest.approx(np.mean(fc["srpl"]) / np.mean(fc["baseline"]), rel=1e-12)
    assert cl[1].measured == pytest.approx(np.mean(ev["srpl"]) - np.mean(ev["baseline"]), abs=1e-12)
    assert cl[2].measured == pytest.approx(np.mean(ev["srpl"]), abs=1e-12)
    for (s_cost, b_cost, s_succ, b_succ), ok in (((50.0, 100.0, 0.8, 0.7), [True, True, True]),
                                                 ((100.0, 50.0, 0.6, 0.7), [False, False, True])):
        fake = copy.copy(res)
        fake.metrics = {**res.metrics, "cost_srpl": s_cost, "cost_baseline": b_cost,
                        "success_srpl": s_succ, "success_baseline": b_succ}
        assert [bool(c.passed) for c in eng.claims(fake)[:3]] == ok


def test_risk_map_title_counts_the_steps_its_bins_cover():
    """The S2C heat map sums the first bins of the steps-to-cost distribution (about 2 steps): one bin of 5 steps
    at bin size 5, so its title says 5 steps there (it used to say ~2 at every bin size)."""
    at = open_page("safety_representations", {"bin_size": "5"})
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("P(cost within 5 step(s))" in s for s in specs)
    at = open_page("safety_representations", seed=(("engine.safety_representations", eng.Config(),
                                                      eng.run(eng.Config())),))
    assert any("P(cost within 2 step(s))" in c.proto.spec for c in at.get("plotly_chart"))
