"""Seeding: one place that seeds python, numpy and (if loaded or asked) torch."""

from __future__ import annotations

import random
import sys

import numpy as np


def make_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(int(seed))


def seed_everything(seed: int, torch_too: bool | None = None) -> np.random.Generator:
    """Seed random, numpy's legacy global state and torch; return a numpy Generator.

    torch is seeded when it is already imported, or when ``torch_too`` is True.
    """
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    if torch_too or (torch_too is None and "torch" in sys.modules):
        import torch

        torch.manual_seed(seed)
    return make_rng(seed)
