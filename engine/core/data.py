"""Datasets that ship inside installed packages (no download at run time)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def _digits_raw() -> tuple[np.ndarray, np.ndarray]:
    """The digits table that ships inside scikit-learn, read without importing sklearn (slow import)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if path.exists():
        table = np.loadtxt(path, delimiter=",")
        return (table[:, :-1] / 16.0).astype(np.float32), table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data.astype(np.float32) / 16.0, d.target.astype(np.int64)


def digits_split(n_train: int, seed: int, n_test: int = 500) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits (1797 images), pixels in [0, 1], seeded split.

    Returns X_train, y_train, X_test, y_test; the test set is fixed per seed and
    never overlaps the training set.
    """
    X, y = _digits_raw()
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(X))
    n_test = min(n_test, len(X) // 3)
    test, pool = idx[:n_test], idx[n_test:]
    n_train = int(max(10, min(n_train, len(pool))))
    train = pool[:n_train]
    return X[train], y[train], X[test], y[test]
