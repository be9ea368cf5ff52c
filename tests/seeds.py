"""Which claim badges depend on the seed: ``python -m tests.seeds [--seeds 0,1,2] [--pages a,b] [--write]``.

Runs every built engine at its default config with each seed (pages whose Config has a ``seed`` field) and
prints, per page, the claims whose pass/fail differs between seeds, with the measured values. A script, not a
test: it takes a few minutes, and a badge that flips with the seed is a fact to report, not a failure.

``--write`` also stores the result of every page it ran in ``assets/seed_flips.json`` (or ``--out``), which the
claims panel reads to mark those badges on the pages; pages not run keep their stored entry.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("EXPLORER_FORCE_CPU", "1")

from components import seed_notes  # noqa: E402
from engine.core.params import widget_specs  # noqa: E402
from engine.registry import built_papers  # noqa: E402


def sweep(module: str, seeds: list[int]) -> dict[str, list[tuple[bool, float]]]:
    mod = importlib.import_module(module)
    rows: dict[str, list[tuple[bool, float]]] = {}
    for s in seeds:
        for c in mod.claims(mod.run(mod.Config(seed=s))):
            rows.setdefault(c.label, []).append((bool(c.passed), float(c.measured)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--pages", default="")
    ap.add_argument("--write", action="store_true", help="store the flips for the claims panel")
    ap.add_argument("--out", default=str(ROOT / "assets" / "seed_flips.json"))
    args = ap.parse_args()
    out = Path(args.out)
    stored = json.loads(out.read_text()) if args.write and out.exists() else {}
    stored.setdefault("pages", {})
    today = datetime.date.today().isoformat()
    seeds = [int(s) for s in args.seeds.split(",")]
    only = {p for p in args.pages.split(",") if p}
    for paper in built_papers():
        if only and paper.slug not in only:
            continue
        cls = importlib.import_module(paper.module).Config
        if "seed" not in {f.name for f in dataclasses.fields(cls)}:
            print(f"{paper.slug}: no seed setting")
            continue
        spec = widget_specs(cls).get("seed")
        ok = [s for s in seeds if spec is None or spec.lo <= s <= spec.hi]    # the page's own seed range
        rows = sweep(paper.module, ok)
        flips = {k: v for k, v in rows.items() if len({p for p, _ in v}) > 1}
        print(f"{paper.slug}: " + ("same verdicts at every seed" if not flips else "verdict depends on the seed"))
        for label, vals in flips.items():
            print("    " + label + ": " + ", ".join(f"seed {s} {'pass' if p else 'FAIL'} {m:.3g}"
                                                   for s, (p, m) in zip(ok, vals)))
        sys.stdout.flush()
        if args.write:
            stored["pages"][paper.slug] = {"measured": today, "machine": seed_notes.machine(), "seeds": ok,
                                           "flips": {k: [[s, p, m] for s, (p, m) in zip(ok, v)]
                                                     for k, v in flips.items()}}
            out.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
