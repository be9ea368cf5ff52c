"""Which claim badges flip at the ends of a widget's range: ``python -m tests.extremes [--pages a,b] [--timeout-s 40]``.

For each selected page, runs the default config once and notes every claim's verdict and measured value. Then,
for each widget (not ``seed``, not free text), it moves only that one widget to its low end and to its high end
(a Choice: each other option; a Bool: the other value) and prints every claim whose pass/fail differs from the
default run, with the default and new measured values. A config or run the page refuses (ValueError, which
includes InputError) is printed as "refused: <message>"; a run slower than --timeout-s is printed with its time
and its claims are not compared (the run is not interrupted). A script, not a test: it takes minutes per page,
and a flipped badge is a fact to read, not a failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("EXPLORER_FORCE_CPU", "1")

from engine.core.params import Bool, Choice, Multi, Text, widget_specs  # noqa: E402
from engine.registry import built_papers  # noqa: E402


def _fmt(v) -> str:
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return str(v)


def _verdicts(mod, cfg) -> dict[str, tuple[bool, object]]:
    return {c.label: (bool(c.passed), c.measured) for c in mod.claims(mod.run(cfg))}


def _values(spec, default) -> list:
    if isinstance(spec, Bool):
        return [not default]
    if isinstance(spec, Choice):
        return [o for o in spec.options if o != default]
    if isinstance(spec, Multi):   # the extremes (fewest, all) and each single option
        cands = spec.extremes() + ([(o,) for o in spec.options] if spec.min_size <= 1 else [])
        return list(dict.fromkeys(c for c in cands if c != tuple(default)))
    return [v for v in (spec.lo, spec.hi) if v != default]


def probe(module: str, limit: float) -> None:
    mod = importlib.import_module(module)
    t0 = time.perf_counter()
    base = _verdicts(mod, mod.Config())
    print(f"  default: {time.perf_counter() - t0:.1f}s, "
          + ", ".join(f"{k} {'pass' if p else 'FAIL'}" for k, (p, _) in base.items()), flush=True)
    defaults = mod.Config()
    for name, spec in widget_specs(mod.Config).items():
        if name == "seed" or isinstance(spec, Text):
            continue
        for value in _values(spec, getattr(defaults, name)):
            tag = f"  {name}={value!r}"
            t0 = time.perf_counter()
            try:
                got = _verdicts(mod, dataclasses.replace(defaults, **{name: value}))
            except ValueError as e:  # InputError is a ValueError
                print(f"{tag}: refused: {e}", flush=True)
                continue
            dt = time.perf_counter() - t0
            if dt > limit:
                print(f"{tag}: skipped, took {dt:.1f}s (> {limit:g}s)", flush=True)
                continue
            flips = [(k, p, m) for k, (p, m) in got.items() if k in base and base[k][0] != p]
            missing = [k for k in base if k not in got]
            if not flips and not missing:
                print(f"{tag}: no flips ({dt:.1f}s)", flush=True)
                continue
            print(f"{tag}: ({dt:.1f}s)", flush=True)
            for k, p, m in flips:
                print(f"      {k}: {'pass' if base[k][0] else 'FAIL'} {_fmt(base[k][1])} -> "
                      f"{'pass' if p else 'FAIL'} {_fmt(m)}", flush=True)
            for k in missing:
                print(f"      {k}: not reported at this setting", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", default="")
    ap.add_argument("--timeout-s", type=float, default=40.0)
    args = ap.parse_args()
    only = [p for p in args.pages.split(",") if p]
    papers = {p.slug: p for p in built_papers()}
    for slug in only or list(papers):
        if slug not in papers:
            print(f"{slug}: not a built page")
            continue
        t0 = time.perf_counter()
        print(f"{slug}:", flush=True)
        probe(papers[slug].module, args.timeout_s)
        print(f"  [{slug} took {time.perf_counter() - t0:.0f}s]", flush=True)


if __name__ == "__main__":
    main()
