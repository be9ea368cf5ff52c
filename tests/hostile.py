"""Hostile-input sweep: ``python -m tests.hostile [--draws 25] [--pages a,b] [--seed 0]``.

For every built page, headless with AppTest:
- ``--draws`` seeded draws of random valid widget values (set through the widgets themselves);
- ``--draws`` seeded sets of hostile URL parameters (malformed, out of range, very long, unknown; settings, view
  settings and tabs);
- each widget at each end of its range, one at a time.
A draw fails if the page raises (a traceback); clear messages (st.error / st.warning) are fine, and for
hostile URLs a notice is required. Counts what was tried and what failed, per page.

Upload checks (wrong type, truncated, over the size cap) live with the engines that accept uploads
(tests/test_densematcher.py), since AppTest cannot drive a file uploader.

The generic CI test (tests/test_pages.py) runs a smaller version of the same checks on every page;
this script is the long sweep, run by hand because 25 full runs per page do not fit CI's budget.
"""

from __future__ import annotations

import argparse
import importlib
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from engine.core.params import Text, random_config, widget_specs  # noqa: E402
from engine.registry import built_papers  # noqa: E402
from tests.test_pages import HOSTILE, _view_names, _widget  # noqa: E402


def _set(at: AppTest, slug: str, name: str, spec, value) -> None:
    w = _widget(at, f"{slug}:{name}")
    if isinstance(spec, Text):
        w.input(value)
    else:
        w.set_value(value)


def sweep(paper, draws: int, rng: random.Random, timeout: float) -> dict:
    cls = importlib.import_module(paper.module).Config
    specs = widget_specs(cls)
    views = sorted(_view_names(ROOT / paper.page)[0])
    out = {"page": paper.slug, "widget_draws": 0, "url_draws": 0, "extremes": 0, "failures": []}
    at = AppTest.from_file(str(ROOT / paper.page), default_timeout=timeout).run()
    for _ in range(draws):
        for _attempt in range(50):
            try:
                cfg = random_config(cls, rng)
                break
            except (ValueError, TypeError):
                continue
        else:
            cfg = cls()
        for name, spec in specs.items():
            _set(at, paper.slug, name, spec, getattr(cfg, name))
        at.run()
        out["widget_draws"] += 1
        if at.exception:
            out["failures"].append(f"widgets {cfg}: {at.exception[0].value[:200]}")
    for name, spec in specs.items():
        for value in spec.extremes():
            at = AppTest.from_file(str(ROOT / paper.page), default_timeout=timeout).run()
            _set(at, paper.slug, name, spec, value)
            at.run()
            out["extremes"] += 1
            if at.exception:
                out["failures"].append(f"{name}={value!r}: {at.exception[0].value[:200]}")
    for _ in range(draws):
        query = {name: rng.choice(HOSTILE) for name in specs if rng.random() < 0.7}
        # view settings and tabs as well ("true" left out: it would switch on DocMIA's opt-in sweeps)
        query.update({name: rng.choice([h for h in HOSTILE if h != "true"]) for name in views if rng.random() < 0.7})
        query[rng.choice(["x", "debug", "a" * 300])] = rng.choice(HOSTILE)
        at = AppTest.from_file(str(ROOT / paper.page), default_timeout=timeout)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        out["url_draws"] += 1
        if at.exception:
            out["failures"].append(f"url {query}: {at.exception[0].value[:200]}")
        elif not at.warning:
            out["failures"].append(f"url {query}: no notice shown")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=25)
    ap.add_argument("--pages", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    wanted = {s for s in args.pages.split(",") if s}
    total_fail = 0
    for paper in built_papers():
        if wanted and paper.slug not in wanted:
            continue
        t = time.perf_counter()
        r = sweep(paper, args.draws, random.Random(f"{args.seed}-{paper.slug}"), args.timeout)
        total_fail += len(r["failures"])
        print(f"{r['page']}: {r['widget_draws']} widget draws, {r['extremes']} range ends, {r['url_draws']} hostile "
              f"URLs, {len(r['failures'])} failures ({time.perf_counter() - t:.0f} s)", flush=True)
        for f in r["failures"]:
            print("   ", f, flush=True)
    print(f"total failures: {total_fail}")
    sys.exit(1 if total_fail else 0)


if __name__ == "__main__":
    main()
