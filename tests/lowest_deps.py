"""Build a venv holding the lowest versions pyproject.toml allows, to check its lower bounds.

    python -m tests.lowest_deps            # print the pins
    python -m tests.lowest_deps /tmp/low   # create the venv there and install them (about 3 minutes)
    EXPLORER_FORCE_CPU=1 /tmp/low/bin/python -m pytest -q

Every ``name>=X`` of [project.dependencies] and of the test extras becomes ``name==X``; pip then resolves the
rest. Not part of CI: a second install and test run would double its time. Run it after raising a bound or
using an API newer than a bound, and record what failed next to the bound in pyproject.toml.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lowest_pins() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["test"]
    return [re.sub(r"\s*>=\s*", "==", d) for d in reqs]


def main(argv: list[str]) -> int:
    pins = lowest_pins()
    if not argv:
        print("\n".join(pins))
        return 0
    venv = Path(argv[0])
    py = venv / "bin" / "python"
    torch = next(p for p in pins if p.startswith("torch=="))
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(py), "-m", "pip", "install", "-q", torch],
             [str(py), "-m", "pip", "install", "-q", *pins],
             [str(py), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)]]
    for cmd in steps:
        if subprocess.run(cmd).returncode:
            print("failed:", " ".join(cmd), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
