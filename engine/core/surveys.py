"""Small JSON files under assets/ that our own scripts write and pages quote (multi-run surveys a page run cannot
afford). No torch here: numpy-only engines use it too."""

from __future__ import annotations

import json
import time
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def load_survey(name: str, required: str) -> dict | None:
    """The JSON object at assets/``name``, or None when it is missing, unreadable or has no non-empty ``required``."""
    try:
        data = json.loads((ASSETS / name).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get(required) else None


def write_survey(name: str, data: dict) -> Path:
    """Write ``data`` with today's date as "measured" to assets/``name``; return the path."""
    path = ASSETS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**data, "measured": time.strftime("%Y-%m-%d")}, indent=1) + "\n")
    return path
