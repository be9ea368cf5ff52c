"""Diffusion planning over a 2-D maze (Diffusion Veteran, ICLR 2025) -- UNFINISHED foundation.

This module currently holds only the environment layer of the planned page: the maze, the
point-mass dynamics with per-axis wall handling, a cell-level BFS, and the Monte-Carlo value
labels for plan segments. The denoisers, critic, samplers (MCSS vs CFG), ``Config``/``run``/
``claims`` and the training entry point are NOT written yet; the page is not registered.
"""

from __future__ import annotations

from collections import deque

import numpy as np

MAZE = (
    "#########",
    "#...#...#",
    "#.#.#.#.#",
    "#.#...#.#",
    "#.#####.#",
    "#.......#",
    "#########",
)
WALLS = np.array([[c == "#" for c in row] for row in MAZE])
START_CELL = (5, 1)
GOAL_CELL = (1, 7)
RADIUS = 0.1
GOAL_RADIUS = 0.5


def cell_centre(cell: tuple[int, int]) -> np.ndarray:
    """(row, col) -> position (x, y) = (col + 0.5, row + 0.5); one unit per cell."""
    r, c = cell
    return np.array([c + 0.5, r + 0.5])


GOAL = cell_centre(GOAL_CELL)


def free_cells() -> list[tuple[int, int]]:
    return [(r, c) for r in range(WALLS.shape[0]) for c in range(WALLS.shape[1]) if not WALLS[r, c]]


def bfs_distances(target: tuple[int, int]) -> np.ndarray:
    """Cell-level shortest-path lengths (4-neighbour moves) to ``target``; inf for walls."""
    dist = np.full(WALLS.shape, np.inf)
    dist[target] = 0
    queue = deque([target])
    while queue:
        r, c = queue.popleft()
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nr, nc = r + dr, c + dc
            if 0 <= nr < WALLS.shape[0] and 0 <= nc < WALLS.shape[1] and not WALLS[nr, nc] \
                    and not np.isfinite(dist[nr, nc]):
                dist[nr, nc] = dist[r, c] + 1
                queue.append((nr, nc))
    return dist


def _blocked(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """True where a disc of radius RADIUS at (x, y) overlaps a wall cell."""
    out = np.zeros(np.shape(x), dtype=bool)
    for dx in (-RADIUS, RADIUS):
        for dy in (-RADIUS, RADIUS):
            c = np.clip(np.floor(x + dx).astype(int), 0, WALLS.shape[1] - 1)
            r = np.clip(np.floor(y + dy).astype(int), 0, WALLS.shape[0] - 1)
            out |= WALLS[r, c]
    return out


def step(state: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Vectorised dynamics: v <- 0.8 v + 0.05 a; p <- p + v, resolved per axis against walls."""
    s = np.array(state, dtype=float, copy=True)
    a = np.clip(np.asarray(action, dtype=float), -1.0, 1.0)
    v = 0.8 * s[..., 2:4] + 0.2 * 0.25 * a
    x, y = s[..., 0], s[..., 1]
    nx = x + v[..., 0]
    bx = _blocked(nx, y)
    nx = np.where(bx, x, nx)
    v[..., 0] = np.where(bx, 0.0, v[..., 0])
    ny = y + v[..., 1]
    by = _blocked(nx, ny)
    ny = np.where(by, y, ny)
    v[..., 1] = np.where(by, 0.0, v[..., 1])
    s[..., 0], s[..., 1], s[..., 2:4] = nx, ny, v
    return s


def reward(pos: np.ndarray) -> np.ndarray:
    return (np.linalg.norm(np.asarray(pos)[..., :2] - GOAL, axis=-1) <= GOAL_RADIUS).astype(float)


def value_labels(rewards: np.ndarray, gamma: float = 0.99) -> np.ndarray:
    """Discounted return-to-go V_t = sum_j gamma^j r_{t+j} within one episode (reverse scan)."""
    r = np.asarray(rewards, dtype=float)
    out = np.zeros_like(r)
    acc = 0.0
    for t in range(len(r) - 1, -1, -1):
        acc = r[t] + gamma * acc
        out[t] = acc
    return out
