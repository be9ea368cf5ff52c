"""Which claim badges change verdict with the seed at a page's default settings.

The data are measured, not written by hand: ``python -m tests.seeds --write`` runs every page's default config at
seeds 0, 1 and 2 and stores the badges whose verdict differs in ``assets/seed_flips.json``. The claims panel shows
the stored verdicts under such a badge, so a reader can tell a knife-edge result from a robust one.
"""

from __future__ import annotations

import json
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
    return (f"At the default settings this verdict changes with the seed: {parts} "
            f"(measured {page.get('measured', '?')} by `python -m tests.seeds`).")
