"""Which claim badges change verdict with the seed at a page's default settings.

The data are measured, not written by hand: ``python -m tests.seeds --write`` runs every page's default config at
seeds 0, 1 and 2 and stores the badges whose verdict differs in ``assets/seed_flips.json``. The claims panel shows
the stored verdicts under such a badge, so a reader can tell a knife-edge result from a robust one.
"""

from __future__ import annotations

import json
import platform
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "assets" / "seed_flips.json"


@lru_cache(maxsize=4)
def load(path: str = str(PATH)) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@lru_cache(maxsize=1)
def machine() -> str:
    """The kind of float arithmetic this machine does: its architecture and the most advanced set of numpy's
    SIMD kernels its CPU runs (e.g. "x86_64 AVX512_SPR"). Runs that amplify last-digit differences (training that
    overfits, online RL) can end elsewhere on a machine of another kind, so a survey stores where it was made."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        best = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    except ImportError:                          # numpy keeps these private; without them say so
        best = []
    return f"{platform.machine()} {best[-1] if best else 'baseline'}"


def note(slug: str | None, label: str, path: str = str(PATH)) -> str | None:
    """One line for the badge ``label`` of page ``slug``, or None when it was not measured to flip."""
    if not slug:
        return None
    data = load(path)
    page = data.get("pages", {}).get(slug)
    if not page or label not in page.get("flips", {}):
        return None
    rows = page["flips"][label]
    parts = " · ".join(f"seed {s} {'pass' if ok else 'fail'} {v:.3g}" for s, ok, v in rows)
    where = page.get("machine")
    other = (f"; that machine's CPU ({where}) is of another kind than this server's ({machine()}), whose runs can end "
             "elsewhere, as these amplify last-digit float differences") if where and where != machine() else ""
    return (f"At the default settings this verdict changes with the seed: {parts} "
            f"(measured {page.get('measured', '?')} by `python -m tests.seeds`{other}).")
