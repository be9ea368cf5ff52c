import pickle

import networkx as nx
import numpy as np
import pytest

from engine import safety_representations as eng
from engine.core import InputError


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


def test_oracle_distance_is_bfs():
    for name in eng.MAPS:
        water, _, _ = eng.parse_map(name)
        g = nx.grid_2d_graph(*water.shape)
        src = [tuple(c) for c in np.argwhere(water)]
        d = nx.multi_source_dijkstra_path_length(g, src)
        ref = np.array([[d[(i, j)] for j in range(water.shape[1])] for i in range(water.shape[0])])
        assert np.array_equal(eng.water_distance(water), ref)


def test_exact_steps_to_cost_matches_monte_carlo():
    water, start, goal = eng.parse_map("island")
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
    for s0 in (start[0] * C + start[1], 4 * C + 6):
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
    # Calibrated over five seeds: SRPL did not lower the violations here (see the page), so only the
    # representation claim is asserted; the other badges are measured and shown as they come out.
    assert cl[3].passed, cl[3].describe()
    land = ~res.water
    exact = res.exact_dist[land]
    uniform_tv = 0.5 * np.abs(exact - 1.0 / exact.shape[-1]).sum(-1).mean()
    assert uniform_tv > cl[3].threshold            # an uninformative predictor fails the bar
    assert np.allclose(res.pred_dist.sum(-1), 1) and np.allclose(res.exact_dist.sum(-1), 1)
    assert all(np.all(np.diff(res.cum_cost[v], axis=1) >= 0) for v in res.variants)
    assert len(pickle.dumps(res)) < 2_000_000


def test_bad_settings():
    with pytest.raises(InputError):
        eng.run(eng.Config(horizon=2, bin_size=2))
