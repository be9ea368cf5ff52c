"""Independent checks of the (unfinished) diffusion-planning environment layer."""

import networkx as nx
import numpy as np

from engine import diffusion_planning as eng


def test_bfs_matches_networkx():
    g = nx.grid_2d_graph(*eng.WALLS.shape)
    g.remove_nodes_from([c for c in list(g.nodes) if eng.WALLS[c]])
    ref = nx.single_source_shortest_path_length(g, eng.GOAL_CELL)
    d = eng.bfs_distances(eng.GOAL_CELL)
    for cell in eng.free_cells():
        assert d[cell] == ref[cell]
    assert np.isinf(d[eng.WALLS]).all()


def test_speed_closed_form():
    s = np.array([1.5, 5.5, 0.0, 0.0])  # bottom corridor, open to the right
    for n in range(1, 8):
        s = eng.step(s, np.array([1.0, 0.0]))
        assert np.isclose(s[2], 0.25 * (1 - 0.8 ** n))


def test_never_enters_walls():
    rng = np.random.default_rng(0)
    s = np.tile(np.r_[eng.cell_centre(eng.START_CELL), 0.0, 0.0], (64, 1))
    for _ in range(500):
        s = eng.step(s, rng.uniform(-1, 1, (64, 2)))
        assert not eng._blocked(s[:, 0], s[:, 1]).any()


def test_value_labels_loop():
    r = np.random.default_rng(1).integers(0, 2, 50).astype(float)
    v = eng.value_labels(r, 0.99)
    for t in range(50):
        assert np.isclose(v[t], sum(0.99 ** j * r[t + j] for j in range(50 - t)))
