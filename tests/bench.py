"""Performance budgets, measured (not asserted): ``python -m tests.bench [--repeats 3] [--pages a,b]``.

Per built page, on the CPU (EXPLORER_FORCE_CPU=1):
- cold default run: ``engine.run(Config())`` in a fresh process (median of N processes), and that
  process's peak memory; and the same in a warm server process (after the app's once-per-process background
  warm-up of components/prewarm.py: libraries loaded, first optimizer step and first STFT taken; no result
  of this page cached);
- page render, cold and cache hit: the page opened headless with AppTest in a fresh process, then rendered again
  with the same settings (the second render is served by the shared result cache; median of N); and the cold
  render once more in a warmed process (median of N fresh processes), which is what a user of a running server
  waits for;
- largest setting: ``engine.HEAVY_CONFIG`` when the engine defines it (one run, in a fresh process);
- reference kernels: ``engine.bench_kernels()`` when defined, our kernel beside its reference library.
And once: app start to home gallery rendered (fresh process, median of N).

Writes a markdown table into README.md between the bench markers, and prints it. Machines are noisy:
medians, and ratios against the budget, are what to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.registry import built_papers  # noqa: E402

ENV = dict(os.environ, EXPLORER_FORCE_CPU="1", PYTHONPATH=str(ROOT))

COLD = r"""
import importlib, json, resource, sys, time
if len(sys.argv) > 3 and sys.argv[3] == "warm":
    # a running server: app.py has done its once-per-process background warm-up (components/prewarm.py:
    # torch and its first optimizer step, librosa's first STFT, scikit-learn, scipy, POT, ...).
    # Nothing of the page is cached.
    from components import prewarm
    prewarm.warm()
mod = importlib.import_module(sys.argv[1])
cfg = getattr(mod, sys.argv[2])() if sys.argv[2] != "Config" else mod.Config()
t = time.perf_counter(); res = mod.run(cfg); dt = time.perf_counter() - t
claims = mod.claims(res)
print(json.dumps({"s": dt, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "claims": [c.passed for c in claims]}))
"""

HEAVY = r"""
import importlib, json, resource, sys, time
mod = importlib.import_module(sys.argv[1])
t = time.perf_counter(); mod.run(mod.HEAVY_CONFIG); dt = time.perf_counter() - t
print(json.dumps({"s": dt, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

PAGE = r"""
import json, sys, time
from streamlit.testing.v1 import AppTest
if len(sys.argv) > 3 and sys.argv[3] == "warm":
    # what a user of a running server gets: the app's background warm-up has loaded the libraries
    from components import prewarm
    prewarm.warm()
t = time.perf_counter(); at = AppTest.from_file(sys.argv[1], default_timeout=600).run()
cold = time.perf_counter() - t
assert not at.exception, at.exception
hits = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); at.run(); hits.append(time.perf_counter() - t)
print(json.dumps({"cold": cold, "hits": hits}))
"""

APP = r"""
import time; t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("app.py", default_timeout=120).run()
assert not at.exception
print(time.perf_counter() - t0)
"""


def _py(code: str, *args: str, timeout: float = 900) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=ENV, capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return out.stdout.strip().splitlines()[-1]


def bench_page(paper, repeats: int) -> dict:
    import importlib

    row: dict = {"page": paper.slug}
    colds = [json.loads(_py(COLD, paper.module, "Config")) for _ in range(repeats)]
    row["cold_s"] = statistics.median(c["s"] for c in colds)
    row["rss_mib"] = max(c["rss_mib"] for c in colds)
    row["claims"] = f"{sum(colds[0]['claims'])}/{len(colds[0]['claims'])}"
    warms = [json.loads(_py(COLD, paper.module, "Config", "warm")) for _ in range(repeats)]
    row["warm_s"] = statistics.median(c["s"] for c in warms)
    page = json.loads(_py(PAGE, str(ROOT / paper.page), str(repeats)))
    row["page_cold_s"] = page["cold"]
    row["page_warm_s"] = statistics.median(json.loads(_py(PAGE, str(ROOT / paper.page), "0", "warm"))["cold"]
                                           for _ in range(repeats))
    row["hit_s"] = statistics.median(page["hits"])
    mod = importlib.import_module(paper.module)
    if hasattr(mod, "HEAVY_CONFIG"):
        row["heavy_s"] = json.loads(_py(HEAVY, paper.module))["s"]
    if hasattr(mod, "bench_kernels"):
        row["kernels"] = mod.bench_kernels()
    return row


def _old_rows(text: str) -> dict[str, str]:
    """Rows of the table already in the README, by page slug, in the current column layout."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) in (7, 8, 9) and cells[0] not in ("page", "---") and not cells[0].startswith("-"):
            cells[0] = cells[0].removesuffix(" (earlier run)")
            if len(cells) == 7:                       # older table without the warm-server column
                cells.insert(3, "—")
            if len(cells) == 8:                       # older table without the warm-server page render
                cells.insert(5, "—")
            rows[cells[0]] = "| " + " | ".join(cells) + " |"
    return rows


def _old_kernel_rows(text: str) -> list[tuple[str, str]]:
    """(page, line) of the reference-kernel table already in the README."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] not in ("page", "---") and not cells[0].startswith("-"):
            out.append((cells[0], line.strip()))
    return out


def table(app_s: float, rows: list[dict], keep: dict[str, str] | None = None, order: list[str] | None = None,
          keep_kernels: list[tuple[str, str]] | None = None) -> str:
    lines = [
        f"App start to home gallery rendered: **{app_s:.2f} s** median (budget 3 s).",
        "",
        "| page | claims | default run, cold, fresh process (s) | default run, cold, warm server (s) "
        "| page render, cold, fresh process (s) | page render, cold, warm server (s) | cache hit (s) "
        "| largest setting (s) | peak RSS (MiB) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    fresh = {}
    for r in rows:
        heavy = f"{r['heavy_s']:.1f}" if "heavy_s" in r else "—"
        fresh[r["page"]] = (f"| {r['page']} | {r['claims']} | {r['cold_s']:.2f} | {r['warm_s']:.2f} | "
                            f"{r['page_cold_s']:.2f} | {r['page_warm_s']:.2f} | {r['hit_s']:.3f} | {heavy} | {r['rss_mib']:.0f} |")
    for slug in order or list(fresh):
        if slug in fresh:
            lines.append(fresh[slug])
        elif keep and slug in keep:
            lines.append(keep[slug].replace(f"| {slug} |", f"| {slug} (earlier run) |", 1))
    kern = [(r["page"], k) for r in rows for k in r.get("kernels", [])]
    # with --pages, the kernel rows of pages not re-run stay as they were
    kept_kern = [line for page, line in (keep_kernels or []) if page not in fresh]
    if kern or kept_kern:
        lines += ["", "| page | kernel | ours (s) | reference | reference (s) | ratio ours/ref |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for page, k in kern:
            lines.append(f"| {page} | {k['name']} | {k['ours_s']:.4f} | {k['ref']} | {k['ref_s']:.4f} | "
                         f"{k['ours_s'] / max(k['ref_s'], 1e-12):.2f} |")
        lines += kept_kern
    lines += ["", f"Budgets: default run < 3 s, cache hit < 0.3 s, largest setting < 30 s, session < 1 GiB. "
              f"Measured {time.strftime('%Y-%m-%d')} with `python -m tests.bench` on {os.cpu_count()} CPU cores."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pages", default="")
    ap.add_argument("--no-readme", action="store_true")
    args = ap.parse_args()
    wanted = {s for s in args.pages.split(",") if s}
    app_s = statistics.median(float(_py(APP)) for _ in range(args.repeats))
    rows = []
    for paper in built_papers():
        if wanted and paper.slug not in wanted:
            continue
        try:
            rows.append(bench_page(paper, args.repeats))
            print(json.dumps(rows[-1], default=str), flush=True)
        except Exception as e:  # one broken page must not hide the others
            print(f"{paper.slug}: FAILED {e}", flush=True)
    readme = ROOT / "README.md"
    text = readme.read_text()
    # with --pages, the other pages keep their earlier rows (marked), so the README table stays complete
    block = text.split("<!-- bench:start -->")[-1].split("<!-- bench:end -->")[0]
    keep = _old_rows(block) if wanted else None
    md = table(app_s, rows, keep, [p.slug for p in built_papers()], _old_kernel_rows(block) if wanted else None)
    print(md)
    if not args.no_readme:
        start, end = "<!-- bench:start -->", "<!-- bench:end -->"
        if start in text and end in text:
            head, rest = text.split(start, 1)
            _, tail = rest.split(end, 1)
            readme.write_text(f"{head}{start}\n{md}\n{end}{tail}")


if __name__ == "__main__":
    main()
