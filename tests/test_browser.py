"""Real-browser tests: the app served on loopback, driven by Debian's chromium through selenium.

- every built page and the home gallery render their claims panel and first plot with no error
  element, every chart has a name for screen readers, and no chart draws two of its labels over each other (title, subplot titles and annotations, legend,
  axis titles, and the toolbar that plotly always shows on a device without hover; bounding boxes as the browser
  laid them out) or runs past the chart's edge, at 1400 and at 1024 px, and the browser console shows no error (a
  script that threw, a failed load, a request to any host but the app's own); a screenshot per page goes to
  artifacts/screenshots/;
- a window narrowed from 1400 to 700 px and widened again: a legend above a plot that wraps into more rows pushes
  the plot down instead of covering it;
- at 400 px (a phone), on the pages whose formulas or multi-panel charts did not fit: no formula runs past its
  column unless it scrolls in a box of its own, and no chart draws labels or tick labels over each other; image
  grids are laid out again with fewer columns of readable images, and come back when the window widens;
- a shared URL with parameters opens with the widgets showing those values;
- a load test: 20 concurrent sessions (tabs of one chromium) on 20 different pages, no errors,
  bounded server memory, p50/p95 time to first plot printed.

Skipped when /usr/bin/chromium is absent, unless EXPLORER_REQUIRE_BROWSER=1 (set by .ci/run, which
installs chromium), in which case a missing browser is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from engine.registry import ROOT, built_papers

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = ROOT / "artifacts" / "screenshots"
PAGE_TIMEOUT = float(os.environ.get("EXPLORER_BROWSER_TIMEOUT", "180"))

_have_browser = Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()
if not _have_browser and os.environ.get("EXPLORER_REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"browser tests required but {CHROMIUM} / {CHROMEDRIVER} are missing")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not _have_browser, reason="Debian chromium + chromium-driver not installed"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mib(pid: int) -> float:
    """Resident memory of a process and its children, from /proc (MiB)."""
    total = 0
    pids = [pid]
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        pids += [int(k) for k in kids]
    except FileNotFoundError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


@contextlib.contextmanager
def _serve():
    """A fresh Streamlit server process for app.py on a free loopback port; yields (base URL, process)."""
    port = _free_port()
    env = dict(os.environ, EXPLORER_FORCE_CPU="1", PYTHONUNBUFFERED="1")
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true",
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError("streamlit did not start:\n" + Path(log.name).read_text()[-3000:])
    try:
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def server():
    with _serve() as srv:
        yield srv


def _driver(width: int = 1400, height: int = 1100, eager: bool = False, extra: tuple[str, ...] = ()):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    if eager:
        # return from get() at once and let _wait_rendered poll: on a busy 2-core machine a blocking
        # page load can outlast the webdriver's own 120 s command timeout
        opts.page_load_strategy = "none"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--window-size={width},{height}",
                f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}", *extra):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})     # the console, read by _console_errors
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)


# Streamlit's frontend, opened at /<page>, first looks for its server under that path and gets these two 404s
# before it falls back to the root: expected, and the only console errors a sound page may leave.
_BASE_PATH_PROBE = re.compile(r"^http://127\.0\.0\.1:\d+/[\w-]+/_stcore/(health|host-config) - Failed to load "
                              r"resource: the server responded with a status of 404")


def _console_errors(d) -> list[str]:
    """The browser console's errors since the last call (the call empties chromium's log): a script that threw, a
    resource that failed to load, a request to a host other than the app's own (which fails here, with no internet,
    and would leak which page a visitor opened on a hosted copy)."""
    return [e["message"][:300] for e in d.get_log("browser")
            if e["level"] == "SEVERE" and not _BASE_PATH_PROBE.match(e["message"])]


@pytest.fixture(scope="module")
def driver():
    d = _driver()
    yield d
    d.quit()


PLOT_CSS = ".js-plotly-plot, [data-testid='stVegaLiteChart'], [data-testid='stArrowVegaLiteChart']"


def _wait_rendered(d, timeout: float, need_claims: bool = True) -> float:
    """Wait until the claims panel and a first plot are on screen; return seconds waited."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            errors = d.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
            if errors:
                raise AssertionError("error element on page: " + errors[0].text[:2000])
            body = d.find_element(By.TAG_NAME, "body").text
            plots = d.find_elements(By.CSS_SELECTOR, PLOT_CSS)
        except WebDriverException:  # document not there yet, or re-rendering
            time.sleep(0.5)
            continue
        if plots and (not need_claims or "Claims, measured" in body):
            return time.perf_counter() - t0
        time.sleep(0.5)
    raise AssertionError(f"page did not render a claims panel and a plot within {timeout:.0f} s")


def test_home_gallery_in_browser(server, driver):
    from selenium.webdriver.common.by import By

    base, _ = server
    driver.get(base)
    t0 = time.time()
    # the title comes first and the 38 cards stream in after it: wait for both (reading the body as soon as the
    # title showed made this test flaky on a loaded machine)
    while time.time() - t0 < 60:
        text = driver.find_element(By.TAG_NAME, "body").text
        if "ICLR 2025 Explorer" in text and text.count("Open the live page") == len(built_papers()):
            break
        time.sleep(0.25)
    body = driver.find_element(By.TAG_NAME, "body").text
    assert "ICLR 2025 Explorer" in body
    assert body.count("Open the live page") == len(built_papers()), body.count("Open the live page")
    assert not driver.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
    # the cards come row by row in the registry's order (the order a phone, which stacks the columns, shows them),
    # and the cards of a row are equally tall
    at = [body.find(p.title) for p in built_papers()]
    assert -1 not in at and at == sorted(at), "cards out of the registry's order"
    rows = driver.execute_script("""
      return [...document.querySelectorAll('[data-testid="stHorizontalBlock"]')]
        .filter(r => r.innerText.includes('Open the live page'))
        .map(r => [...r.querySelectorAll(':scope > [data-testid="stColumn"]')]
          .filter(c => c.innerText.trim()).map(c => {
            const card = [...c.querySelectorAll('[data-testid="stVerticalBlock"]')]
              .find(b => getComputedStyle(b).borderTopWidth !== '0px');
            return card ? Math.round(card.getBoundingClientRect().height) : -1;
          }));""")
    assert sum(len(r) for r in rows) == len(built_papers()), rows
    assert all(max(r) - min(r) <= 2 for r in rows), rows
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "home.png"))
    console = _console_errors(driver)
    assert not console, f"errors in the browser console: {console}"


# Pairs of labels of one chart whose boxes, as laid out by the browser, overlap: the title, subplot titles and other
# annotations, the legend, the axis and colour-bar titles, the bars' values; returns [number of charts, [[chart, label, label], ...]]
TEXT_COLLISIONS_JS = """
const hits = [];
const charts = document.querySelectorAll('.js-plotly-plot');
charts.forEach((p, ci) => {
  const boxes = [];
  const add = (sel, kind) => p.querySelectorAll(sel).forEach(e => {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.height > 0) boxes.push([kind + ': ' + (e.textContent || '').slice(0, 60), r]);
  });
  add('.g-gtitle text', 'title'); add('.annotation-text-g text', 'annotation'); add('g.legend', 'legend');
  add('.g-xtitle text', 'x title'); add('.g-ytitle text', 'y title'); add('.colorbar .cbtitle text', 'colour bar');
  add('.bartext', 'bar value');
  // headless chromium has no hover, so plotly shows every chart's toolbar, as on a phone or tablet: app.py gives it a
  // band above the chart, where it must not cover a title, legend or label (nor wrap onto the chart when narrow)
  add('.modebar', 'toolbar');
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i][1], b = boxes[j][1];
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 2 && h > 2) hits.push([ci, boxes[i][0], boxes[j][0]]);
  }
});
return [charts.length, hits];
"""


# Chart labels that run past the chart's own box, where the page cuts them off (plotly neither wraps nor shrinks an
# axis title or a subplot title; chart titles are HTML above the chart and wrap, see components/charts.show).
CLIPPED_LABELS_JS = """
const out = [];
document.querySelectorAll('.js-plotly-plot').forEach((p, ci) => {
  const c = p.getBoundingClientRect();
  p.querySelectorAll('.g-gtitle text, .annotation-text-g text, .g-xtitle text, .g-ytitle text').forEach(e => {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && (r.left < c.left - 2 || r.right > c.right + 2 || r.top < c.top - 2 || r.bottom > c.bottom + 2))
      out.push([ci, (e.textContent || '').slice(0, 60)]);
  });
});
return out;
"""


# Side-by-side charts must start level even when their HTML titles wrap to different numbers of lines
# (components/page_script.js pads the shorter titles): rows of columns whose first chart is titled, compared by the
# top of that chart; columns stacked under each other (a phone) are skipped.
UNEVEN_ROWS_JS = """
const out = [];
document.querySelectorAll('[data-testid="stHorizontalBlock"]').forEach((hb, bi) => {
  const cols = [...hb.children].filter(c => c.dataset.testid === 'stColumn');
  const tops = [];
  for (const c of cols) {
    const t = c.querySelector('.explorer-chart-title'), p = c.querySelector('.js-plotly-plot');
    if (t && p && (t.compareDocumentPosition(p) & Node.DOCUMENT_POSITION_FOLLOWING))
      tops.push([c.getBoundingClientRect().top, p.getBoundingClientRect().top, t.textContent.slice(0, 40)]);
  }
  if (tops.length < 2 || tops.some(x => Math.abs(x[0] - tops[0][0]) > 2)) return;
  const ys = tops.map(x => x[1]);
  if (Math.max(...ys) - Math.min(...ys) > 3) out.push([bi, Math.round(Math.max(...ys) - Math.min(...ys)), tops.map(x => x[2])]);
});
return out;
"""


# A metric's label or value cut off with an ellipsis (or clipped by a box that hides its overflow): Streamlit does this
# to text wider than its column, and four metrics in a row at 1024 px lost words and half of "+0.40 / -0.38".
METRIC_CUT_JS = """
const out = [];
document.querySelectorAll('[data-testid="stMetric"] *').forEach(e => {
  if (![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) return;
  for (let p = e; p && !(p.dataset && p.dataset.testid === 'stMetric'); p = p.parentElement) {
    if ((p === e || getComputedStyle(p).overflowX !== 'visible') && p.scrollWidth > p.clientWidth + 1) {
      out.push(e.textContent.trim().slice(0, 60)); return;
    }
  }
});
return out;
"""


# What the layout checks read, as one comparable value: each chart's container and drawing size and its number of
# text labels, the formulas KaTeX has drawn and the open expanders.
LAYOUT_JS = """
const charts = [...document.querySelectorAll('[data-testid=stPlotlyChart]')].map(el => {
  const r = el.getBoundingClientRect(), svg = el.querySelector('.main-svg');
  const s = svg ? svg.getBoundingClientRect() : {width: -1, height: -1};
  return [Math.round(r.width), Math.round(s.width), Math.round(s.height), el.querySelectorAll('text').length];
});
return [charts, document.querySelectorAll('.katex').length, document.querySelectorAll('details[open]').length];
"""


def _settle(d, changed_from=None, quiet: float = 0.5, timeout: float = 8.0):
    """Wait until the page's layout (LAYOUT_JS) has stopped changing for ``quiet`` seconds, instead of sleeping a fixed
    time. With ``changed_from`` (the layout before a resize or a click) it first waits, up to half the timeout, for the
    layout to differ from it, so a check never reads the page before it has started to react. Returns the layout."""
    from selenium.common.exceptions import WebDriverException

    def snap():
        try:
            return d.execute_script(LAYOUT_JS)
        except WebDriverException:  # re-rendering
            return None

    t0 = time.perf_counter()
    cur = snap()
    if changed_from is not None:
        while cur == changed_from and time.perf_counter() - t0 < timeout / 2:
            time.sleep(0.1)
            cur = snap()
    since = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        time.sleep(0.1)
        nxt = snap()
        if nxt != cur or nxt is None:
            cur, since = nxt, time.perf_counter()
        elif time.perf_counter() - since >= quiet:
            break
    return cur


@pytest.mark.parametrize("paper", built_papers(), ids=[p.slug for p in built_papers()])
def test_page_renders_in_browser(server, driver, paper):
    base, _ = server
    _console_errors(driver)                 # what earlier tests left in the log is theirs
    driver.get(f"{base}/{paper.url_path}")
    waited = _wait_rendered(driver, PAGE_TIMEOUT)
    wide = _settle(driver)
    n_charts, hits = driver.execute_script(TEXT_COLLISIONS_JS)
    assert n_charts >= 1
    assert not hits, f"labels drawn over each other (chart index, label, label): {hits}"
    cut = driver.execute_script(CLIPPED_LABELS_JS)
    assert not cut, f"labels running past their chart's edge (chart index, label): {cut}"
    # every chart has a name for screen readers (its title, which lives in HTML above the chart, or what it plots)
    unnamed = driver.execute_script(
        "return [...document.querySelectorAll('[data-testid=stPlotlyChart]')].map((e, i) => [i, e.getAttribute('role'),"
        " (e.getAttribute('aria-label') || '').trim()]).filter(x => x[1] !== 'figure' || !x[2]).map(x => x[0]);")
    assert not unnamed, f"charts without an accessible name (chart index): {unnamed}"
    # a small laptop window: the charts re-lay themselves out narrower, and their labels must still not collide
    # nor run past the chart
    driver.set_window_size(1024, 1100)
    narrow_layout = wide
    try:
        narrow_layout = _settle(driver, changed_from=wide)
        _, narrow = driver.execute_script(TEXT_COLLISIONS_JS)
        narrow_cut = driver.execute_script(CLIPPED_LABELS_JS)
        uneven = driver.execute_script(UNEVEN_ROWS_JS)
        metric_cut = driver.execute_script(METRIC_CUT_JS)
    finally:
        driver.set_window_size(1400, 1100)
        _settle(driver, changed_from=narrow_layout)  # the charts lay themselves out again before the screenshot
    assert not narrow, f"at 1024 px, labels drawn over each other (chart index, label, label): {narrow}"
    assert not narrow_cut, f"at 1024 px, labels running past their chart's edge (chart index, label): {narrow_cut}"
    assert not uneven, f"at 1024 px, side-by-side charts start at different heights (row, px, titles): {uneven}"
    assert not metric_cut, f"at 1024 px, metric labels or values cut off: {metric_cut}"
    console = _console_errors(driver)
    assert not console, f"errors in the browser console: {console}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{paper.slug}.png"))
    # every formula, "How it works" included, is one KaTeX could read: a display formula spread over two source lines
    # inside a paragraph showed as red LaTeX source on five pages
    _open_how_it_works(driver)
    broken = _unreadable_formulas(driver)
    assert not broken, f"formulas KaTeX could not read: {broken}"
    print(f"{paper.slug}: claims + first plot after {waited:.1f} s")


def _open_how_it_works(d) -> None:
    from selenium.webdriver.common.by import By

    before, clicked = d.execute_script(LAYOUT_JS), False
    for summary in d.find_elements(By.CSS_SELECTOR, "[data-testid='stExpander'] details:not([open]) summary"):
        if "How it works" in summary.text:
            d.execute_script("arguments[0].click();", summary)
            clicked = True
    _settle(d, changed_from=before if clicked else None)


def _unreadable_formulas(d) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text[:80] for e in d.find_elements(By.CSS_SELECTOR, ".katex-error")]


# Legends drawn above the plot (the template's horizontal legend) that cover a plot area or start above the chart's
# top edge (rows cut off); returns [[chart index, legend height px, what is wrong], ...] and the legends' heights.
TOP_LEGENDS_JS = """
const bad = [], heights = [];
document.querySelectorAll('.js-plotly-plot').forEach((p, ci) => {
  const leg = p._fullLayout && p._fullLayout.legend, g = p.querySelector('g.legend');
  if (!leg || !g || !(leg.y >= 1 || leg.yref === 'container')) return;
  const L = (g.querySelector('rect.bg') || g).getBoundingClientRect(), c = p.getBoundingClientRect();
  if (!(L.width > 0)) return;
  heights.push(Math.round(L.height));
  if (L.top < c.top - 1) bad.push([ci, Math.round(L.height), 'starts above the chart']);
  p.querySelectorAll('.nsewdrag').forEach(a => {
    const r = a.getBoundingClientRect();
    const w = Math.min(r.right, L.right) - Math.max(r.left, L.left), h = Math.min(r.bottom, L.bottom) - Math.max(r.top, L.top);
    if (w > 2 && h > 2) bad.push([ci, Math.round(L.height), 'covers ' + Math.round(h) + ' px of a plot area']);
  });
});
return [bad, heights];
"""


@pytest.mark.parametrize("slug", ["crossmpt", "spectral_rewiring"])
def test_top_legends_stay_clear_of_the_plot_after_a_resize(server, driver, slug):
    """A window made narrower re-lays the charts out without a rerun: a legend above the plot that wraps into more
    rows must push the plot down (and back up when the window is widened again), not spill over it."""
    base, _ = server
    driver.set_window_size(1400, 1100)
    driver.get(f"{base}/{slug}")
    _wait_rendered(driver, PAGE_TIMEOUT)
    time.sleep(1.0)
    wide, wide_h = driver.execute_script(TOP_LEGENDS_JS)
    try:
        driver.set_window_size(700, 1100)
        time.sleep(2.0)
        narrow, narrow_h = driver.execute_script(TOP_LEGENDS_JS)
        driver.set_window_size(1400, 1100)
        time.sleep(2.0)
        back, back_h = driver.execute_script(TOP_LEGENDS_JS)
    finally:
        driver.set_window_size(1400, 1100)
    assert wide_h and max(narrow_h) > max(wide_h), f"no top legend wrapped into more rows: {wide_h} -> {narrow_h}"
    assert not wide, f"at 1400 px (chart, legend height, problem): {wide}"
    assert not narrow, f"after a resize to 700 px (chart, legend height, problem): {narrow}"
    assert not back and back_h == wide_h, f"after resizing back to 1400 px: {back}, heights {back_h} vs {wide_h}"


# Formulas (KaTeX) that run past the right edge of their text column without a box of their own that scrolls sideways
# (a display formula, a table): the page's edge cuts them off on a phone. Returns [[formula, px past the column], ...]
KATEX_CUT_JS = """
const out = [];
document.querySelectorAll('.katex').forEach(k => {
  const col = k.closest('[data-testid="stMarkdownContainer"]'), r = k.getBoundingClientRect();
  if (!col || !(r.width > 0)) return;
  const c = col.getBoundingClientRect();
  if (r.right <= c.right + 1) return;
  for (let p = k.parentElement; p && p !== col.parentElement; p = p.parentElement) {
    const s = getComputedStyle(p);
    if ((s.overflowX === 'auto' || s.overflowX === 'scroll') && p.getBoundingClientRect().right <= c.right + 1) return;
  }
  out.push([(k.querySelector('annotation') || k).textContent.slice(0, 60), Math.round(r.right - c.right)]);
});
return out;
"""

# Tick labels of one chart drawn over each other, across its panels too (rotated labels, which plotly turns to keep
# them apart, are left out); returns [[chart index, label, label], ...]
TICK_OVERLAP_JS = """
const out = [];
document.querySelectorAll('.js-plotly-plot').forEach((p, ci) => {
  for (const sel of ['.xtick text', '.ytick text']) {
    const bs = [...p.querySelectorAll(sel)].filter(e => !/rotate/.test(e.getAttribute('transform') || ''))
      .map(e => [e.textContent, e.getBoundingClientRect()]).filter(x => x[1].width > 0);
    for (let i = 0; i < bs.length; i++) for (let j = i + 1; j < bs.length; j++) {
      const a = bs[i][1], b = bs[j][1];
      if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1)
        out.push([ci, bs[i][0], bs[j][0]]);
    }
  }
});
return out;
"""

# pages whose formulas or multi-panel charts were cut off or ran together on a phone
PHONE_PAGES = ("group_compact_proofs", "gap_dependent_q", "mup_local_learning", "tabwak", "calnf", "trackstar_tda",
               "mad_td", "rfwave", "implicit_preference_motion", "inference_set_design")


@pytest.mark.parametrize("slug", PHONE_PAGES)
def test_phone_width_keeps_formulas_and_charts_readable(server, driver, slug):
    """At 400 px (a phone; headless chromium has no hover, as a phone) with "How it works" open: no formula runs past
    its column unless it scrolls in a box of its own, and no chart draws labels or tick labels over each other or
    past its edge."""
    base, _ = server
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 400, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    try:
        driver.get(f"{base}/{slug}")
        _wait_rendered(driver, PAGE_TIMEOUT)
        _open_how_it_works(driver)
        assert driver.execute_script("return document.documentElement.clientWidth") == 400
        formulas = driver.execute_script(KATEX_CUT_JS)
        ticks = driver.execute_script(TICK_OVERLAP_JS)
        _, hits = driver.execute_script(TEXT_COLLISIONS_JS)
        cut = driver.execute_script(CLIPPED_LABELS_JS)
        broken = _unreadable_formulas(driver)
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert not broken, f"formulas KaTeX could not read: {broken}"
    assert not formulas, f"at 400 px, formulas cut off at the column's edge (formula, px past it): {formulas}"
    assert not ticks, f"at 400 px, tick labels drawn over each other (chart index, label, label): {ticks}"
    assert not hits, f"at 400 px, labels drawn over each other (chart index, label, label): {hits}"
    assert not cut, f"at 400 px, labels running past their chart's edge (chart index, label): {cut}"


# Every image grid (components/charts.mark_grid) on the page: its columns as drawn by the server and as shown now,
# the narrowest and the lowest image (px), the gap to the element below it (px, negative: drawn over it), whether any
# box still carries a height set by the reflow, and how often the script relaid the chart out in the last 5 s
GRID_JS = """
return [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.layout && g.layout.meta && g.layout.meta.explorer_grid)
 .map(g => {
  const s = g.layout.meta.explorer_grid, f = g._fullLayout, xs = new Set(), w = [], h = [];
  for (let i = 0; i < s.n; i++) {
    const x = f['xaxis' + (i ? i + 1 : '')], y = f['yaxis' + (i ? i + 1 : '')];
    xs.add(x.domain[0].toFixed(3)); w.push(x._length); h.push(y._length);
  }
  const slot = g.closest('[data-testid=stElementContainer]'), next = slot.nextElementSibling;
  const below = next ? next.getBoundingClientRect().top - g.getBoundingClientRect().bottom : 0;
  return {cols: s.cols, shown: xs.size, min_w: Math.min(...w), min_h: Math.min(...h), below,
          pinned: !!document.querySelector('[data-explorer-grid-pin]'), tries: (g.__gridTries || []).length};
});
"""


@pytest.mark.parametrize("slug", ["inference_set_design", "calnf", "implicit_preference_motion"])
def test_image_grids_reflow_on_a_phone_and_come_back(server, driver, slug):
    """An image grid too wide for a phone is laid out again with fewer columns (reading order on the digit page and for
    the ranked rollouts, column bands on CalNF's family), each image keeping its height and at least ~70 px of width, the chart pushing the next
    element down instead of covering it; back at 1400 px it is the server's grid again, which the script's own
    geometry reproduces exactly (it changed nothing on a fresh wide load)."""
    base, _ = server

    def grids_when(ok, why: str) -> list[dict]:
        deadline = time.time() + 30
        while True:
            g = driver.execute_script(GRID_JS)
            if g and ok(g):
                return g
            if time.time() > deadline:
                raise AssertionError(f"{why}: {g}")
            time.sleep(0.5)

    driver.set_window_size(1400, 1100)
    driver.get(f"{base}/{slug}")
    _wait_rendered(driver, PAGE_TIMEOUT)
    time.sleep(2)
    wide = grids_when(lambda g: all(x["shown"] == x["cols"] for x in g), "at 1400 px, every grid as drawn")
    assert all(x["tries"] == 0 and not x["pinned"] for x in wide), wide
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 400, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    try:
        narrow = grids_when(lambda g: all(x["shown"] < x["cols"] for x in g), "at 400 px, fewer columns")
        time.sleep(1.5)
        narrow = driver.execute_script(GRID_JS)
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.set_window_size(1400, 1100)
    for a, b in zip(wide, narrow):
        assert b["min_w"] >= 70, f"images narrower than 70 px on a phone: {b}"
        assert abs(b["min_h"] - a["min_h"]) <= 2, f"images changed height: {a} -> {b}"
        assert b["below"] >= 0, f"the re-flowed grid covers the element below it: {b}"
    back = grids_when(lambda g: all(x["shown"] == x["cols"] and not x["pinned"] for x in g), "back at 1400 px")
    for a, b in zip(wide, back):
        assert abs(b["min_h"] - a["min_h"]) <= 2 and abs(b["min_w"] - a["min_w"]) <= 2, (a, b)
        assert b["below"] >= 0, b


def test_shared_url_sets_widgets(server, driver):
    from selenium.webdriver.common.by import By

    base, _ = server
    driver.get(f"{base}/bilinear_mlp?class_idx=7&k_keep=5&truncation=bottom&epochs=20")
    _wait_rendered(driver, PAGE_TIMEOUT)
    body = driver.find_element(By.TAG_NAME, "body").text
    assert "Eigenvectors of Q(e₇)" in body
    sliders = {s.find_element(By.CSS_SELECTOR, "label").text.strip():
               s.find_element(By.CSS_SELECTOR, "[data-testid='stSliderThumbValue']").text.strip()
               for s in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stSlider']")}
    assert sliders.get("Class to explain") == "7", sliders
    assert sliders.get("Eigenvectors kept per class") == "5", sliders
    assert sliders.get("Epochs") == "20", sliders
    assert "truncation=bottom" in driver.current_url and "class_idx=7" in driver.current_url


def test_back_and_forward_buttons_restore_the_settings(server, driver):
    """Each settings change is a history entry: Back returns to the earlier settings (also after visiting another
    page), Forward to the later ones, the menu link brings a page back as it was left, and the URL always matches
    the widgets."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    base, _ = server

    def class_shown() -> tuple[str | None, str | None]:
        try:
            query = dict(kv.split("=", 1) for kv in driver.current_url.split("?", 1)[-1].split("&") if "=" in kv)
            return query.get("class_idx"), _slider_values(driver).get("Class to explain")
        except Exception:  # the page is re-rendering
            return None, None

    def until(path: str, expected: tuple[str, str], why: str) -> None:
        """Poll until the page at ``path`` shows ``expected`` in its URL and its slider (a history step reruns the
        page, which takes a moment); fail with ``why`` if it never does."""
        deadline = time.time() + PAGE_TIMEOUT
        while time.time() < deadline:
            if f"/{path}" in driver.current_url and class_shown() == expected:
                _wait_rendered(driver, PAGE_TIMEOUT)
                time.sleep(1)
                if class_shown() == expected:
                    return
            time.sleep(0.5)
        raise AssertionError(f"{why}: {driver.current_url} shows {class_shown()}, expected {expected}")

    def step(move, path: str, expected: tuple[str, str], why: str) -> None:
        """Press Back or Forward until the page shows ``expected`` (at most three presses: Streamlit adds a bare
        entry of its own when it switches pages, and under load its rerun may write the URL as a new entry).
        A press is repeated once the URL has stayed on another page for 4 s (a history step changes the URL at
        once; only the page's rerun takes time), or after 20 s."""
        for _ in range(3):
            move()
            deadline = time.time() + 20
            elsewhere, since = None, time.time()
            while time.time() < deadline:
                url = driver.current_url
                if f"/{path}" in url and class_shown() == expected:
                    break
                if f"/{path}" in url or url != elsewhere:
                    elsewhere, since = (None if f"/{path}" in url else url), time.time()
                elif time.time() - since >= 4:
                    break
                time.sleep(0.5)
            if f"/{path}" in driver.current_url and class_shown() == expected:
                break
        until(path, expected, why)

    def menu(label: str) -> None:
        next(a for a in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stSidebarNav'] a")
             if label in a.text).click()

    driver.get(f"{base}/bilinear_mlp?class_idx=7")
    _wait_rendered(driver, PAGE_TIMEOUT)
    until("bilinear_mlp", ("7", "7"), "the link's setting")
    thumb = next(s for s in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stSlider']")
                 if "Class to explain" in s.text).find_element(By.CSS_SELECTOR, "input[type='range']")
    driver.execute_script("arguments[0].focus()", thumb)
    ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()
    until("bilinear_mlp", ("8", "8"), "the slider change")
    menu("Attention sink")
    _wait_for_text(driver, "Attention sink", PAGE_TIMEOUT)
    deadline = time.time() + PAGE_TIMEOUT
    while "/attention_sink" not in driver.current_url and time.time() < deadline:
        time.sleep(0.5)
    _wait_rendered(driver, PAGE_TIMEOUT)
    time.sleep(2)
    step(driver.back, "bilinear_mlp", ("8", "8"), "Back to a page must bring its settings back")
    step(driver.back, "bilinear_mlp", ("7", "7"), "Back must undo the last settings change")
    step(driver.forward, "bilinear_mlp", ("8", "8"), "Forward must redo it")
    # the menu's link carries no settings: the page comes back as this session left it, and its URL says so
    menu("Attention sink")
    deadline = time.time() + PAGE_TIMEOUT
    while "/attention_sink" not in driver.current_url and time.time() < deadline:
        time.sleep(0.5)
    _wait_rendered(driver, PAGE_TIMEOUT)
    time.sleep(2)
    menu("Bilinear")
    until("bilinear_mlp", ("8", "8"), "the menu link must bring the page back as it was left")


def test_share_link_follows_a_view_change_at_once(server, driver):
    """Pick another view (a view-only radio drawn below the sidebar's share link): the address bar and the link in
    "Copy link to this view" must both name the new view right away, not one rerun later."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    base, _ = server
    driver.get(f"{base}/densematcher")
    _wait_rendered(driver, PAGE_TIMEOUT)
    radio = next(r for r in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stRadio']")
                 if "Colour the target through" in r.text)
    next(lab for lab in radio.find_elements(By.CSS_SELECTOR, "label")
         if "nearest vertex in xyz" in lab.text).click()

    def shared_link() -> str:
        box = next(e for e in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stExpander']")
                   if "Copy link to this view" in e.text)
        if not box.find_elements(By.CSS_SELECTOR, "[data-testid='stCode']"):
            box.find_element(By.CSS_SELECTOR, "summary").click()
            time.sleep(0.5)
        return box.find_element(By.CSS_SELECTOR, "[data-testid='stCode']").get_attribute("textContent")

    deadline, link = time.time() + PAGE_TIMEOUT, ""
    while time.time() < deadline:
        try:
            if "view=xyz" in driver.current_url:
                _wait_rendered(driver, PAGE_TIMEOUT)
                link = shared_link()
                break
        except (WebDriverException, StopIteration):
            pass
        time.sleep(0.5)
    assert "view=xyz" in driver.current_url, driver.current_url
    assert "view=xyz" in link and "view=refined" not in link, link


def test_selected_tabs_are_part_of_the_link(server, driver):
    """Tabs bound to the URL (state.bind_tabs): a link opens with its tabs selected, and clicking another tab
    writes it into the address bar."""
    from selenium.webdriver.common.by import By

    base, _ = server

    def selected() -> list[str]:
        return [t.text for t in driver.find_elements(By.CSS_SELECTOR, "[role='tab']")
                if t.get_attribute("aria-selected") == "true"]

    driver.get(f"{base}/ub_gold?table_metric=FPR95&score_scenario=inter-dataset%20shift")
    _wait_rendered(driver, PAGE_TIMEOUT)
    assert selected() == ["FPR95", "inter-dataset shift"], selected()
    tab = next(t for t in driver.find_elements(By.CSS_SELECTOR, "[role='tab']") if t.text == "AUPRC")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", tab)
    tab.click()
    deadline = time.time() + PAGE_TIMEOUT
    while time.time() < deadline and "table_metric=AUPRC" not in driver.current_url:
        time.sleep(0.3)
    assert "table_metric=AUPRC" in driver.current_url, driver.current_url
    assert "score_scenario=inter-dataset+shift" in driver.current_url, driver.current_url
    assert selected() == ["AUPRC", "inter-dataset shift"], selected()


def test_gallery_search_is_a_link_and_survives_back(server, driver):
    """/?q=... opens the gallery filtered; after opening a card's page, Back returns to the filtered gallery."""
    from selenium.webdriver.common.by import By

    base, _ = server

    def search_box() -> str:
        boxes = driver.find_elements(By.CSS_SELECTOR, "input[aria-label='Search papers']")
        return boxes[0].get_attribute("value") if boxes else ""

    driver.get(f"{base}/?q=bilinear")
    body = _wait_for_text(driver, "Open the live page", PAGE_TIMEOUT)
    assert search_box() == "bilinear" and "Residual-MPPI" not in body
    cards = driver.find_elements(By.CSS_SELECTOR, "[data-testid='stPageLink'] a")
    assert len(cards) == 1
    cards[0].click()
    _wait_rendered(driver, PAGE_TIMEOUT)
    assert "/bilinear_mlp" in driver.current_url
    for _ in range(3):
        driver.back()
        time.sleep(2)
        if "/bilinear_mlp" not in driver.current_url:
            break
    _wait_for_text(driver, "Open the live page", PAGE_TIMEOUT)
    deadline = time.time() + 30
    while search_box() != "bilinear" and time.time() < deadline:
        time.sleep(0.5)
    assert search_box() == "bilinear" and "q=bilinear" in driver.current_url


def _wait_for_text(d, needle: str, timeout: float) -> str:
    """Poll the page body until it contains ``needle`` (no error element meanwhile); return the body text."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    t0 = time.perf_counter()
    body = ""
    while time.perf_counter() - t0 < timeout:
        try:
            errors = d.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
            assert not errors, "error element on page: " + errors[0].text[:2000]
            body = d.find_element(By.TAG_NAME, "body").text
        except WebDriverException:
            time.sleep(0.5)
            continue
        if needle in body:
            return body
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} did not appear within {timeout:.0f} s; page ends with: {body[-1500:]}")


def test_mesh_upload_in_browser(server, driver, tmp_path):
    """AppTest cannot drive a file uploader, so the DenseMatcher upload is exercised here for real: a valid OBJ is
    matched to a deformed copy of itself; a file that is not a mesh gives a clear message, no traceback, and the
    generated pair stays on screen."""
    from selenium.webdriver.common.by import By

    from engine import densematcher as eng

    src, _, _, _ = eng.make_pair(eng.Config(n_vertices=900))
    good = tmp_path / "critter.obj"
    good.write_text("".join(f"v {x:.6f} {y:.6f} {z:.6f}\n" for x, y, z in src.verts)
                    + "".join(f"f {a + 1} {b + 1} {c + 1}\n" for a, b, c in src.faces))
    bad = tmp_path / "notes.obj"
    bad.write_text("these are my notes, not a mesh\n")

    base, _ = server
    driver.get(f"{base}/densematcher")
    _wait_rendered(driver, PAGE_TIMEOUT)
    for summary in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stExpander'] summary"):
        if "own meshes" in summary.text:
            summary.click()
    _wait_for_text(driver, "5MB per file", 30)  # the widget itself states the engine's cap

    def vertices_metric() -> str:
        for m in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stMetric']"):
            if "Vertices" in m.text:
                return m.text
        return ""

    driver.find_elements(By.CSS_SELECTOR, "input[type='file']")[0].send_keys(str(good))
    _wait_for_text(driver, "matched to a vertex-shuffled, deformed copy of itself", PAGE_TIMEOUT)
    _wait_rendered(driver, PAGE_TIMEOUT)
    assert f"{len(src.verts):,} /" in vertices_metric(), vertices_metric()

    # a single-file uploader replaces its file when another one is chosen
    driver.find_elements(By.CSS_SELECTOR, "input[type='file']")[0].send_keys(str(bad))
    body = _wait_for_text(driver, "generated pair is shown instead", PAGE_TIMEOUT)
    _wait_rendered(driver, PAGE_TIMEOUT)
    alerts = " ".join(a.text for a in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stAlert']"))
    assert "notes.obj" in alerts and "not a surface" in alerts, alerts
    assert "Claims, measured" in body
    assert f"{len(src.verts):,} /" not in vertices_metric(), "the failed upload must not leave the old result up"


def _upload_round_trip(driver, url: str, expander: str, before: str, good, after_good: str, bad,
                       after_bad: str) -> tuple[str, str]:
    """Open ``url`` (showing ``before``), open the uploader's expander, upload ``good`` until ``after_good`` shows,
    then ``bad`` until ``after_bad`` shows. Returns the page text after each upload."""
    from selenium.webdriver.common.by import By

    driver.get(url)
    _wait_rendered(driver, PAGE_TIMEOUT)
    _wait_for_text(driver, before, 30)
    for summary in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stExpander'] summary"):
        if expander in summary.text:
            summary.click()
    _wait_for_text(driver, "5MB per file", 30)  # the widget states the app's cap, which is the engines' cap
    driver.find_elements(By.CSS_SELECTOR, "input[type='file']")[0].send_keys(str(good))
    body_good = _wait_for_text(driver, after_good, PAGE_TIMEOUT)
    _wait_rendered(driver, PAGE_TIMEOUT)
    driver.find_elements(By.CSS_SELECTOR, "input[type='file']")[0].send_keys(str(bad))
    _wait_for_text(driver, after_bad, PAGE_TIMEOUT)
    _wait_rendered(driver, PAGE_TIMEOUT)
    # the notice is drawn above the fallback view, and until the rerun reaches it the browser still shows the
    # previous run's element there ("Explaining your digit"): read the page again once the fallback is drawn
    body_bad = _wait_for_text(driver, before, 30)
    alerts = " ".join(a.text for a in driver.find_elements(By.CSS_SELECTOR, "[data-testid='stAlert']"))
    assert after_bad in body_bad and "Claims, measured" in body_bad, "the page must fall back to its own data"
    return body_good, alerts


def test_audio_upload_in_browser(server, driver, tmp_path):
    """RFWave's own-recording uploader, for real: a 16 kHz WAV is resampled and vocoded (the notes say so); a file
    that is not audio gives a clear message, no traceback, and the synthetic clip returns."""
    import soundfile as sf

    good = tmp_path / "voice $1$ *take*_[2].wav"          # shown as typed, not as LaTeX / emphasis / a link
    t = np.arange(int(1.5 * 16000)) / 16000
    sf.write(good, 0.3 * np.sin(2 * np.pi * 330 * t) * (1 + np.sin(2 * np.pi * 3 * t)), 16000)
    bad = tmp_path / "notes.wav"
    bad.write_text("these are my notes, not a recording\n")
    body, alerts = _upload_round_trip(driver, f"{server[0]}/rfwave", "own recording", "Shown: held-out synthetic "
                                      "clip 0.", good, "Shown: your recording, voice $1$ *take*_[2].wav", bad,
                                      "synthetic test clip is shown instead")
    assert "resampled from 16000 Hz" in body and "the loudest 1.024 s" in body, body[-2000:]
    assert "could not be read as audio" in alerts, alerts


def test_digit_upload_in_browser(server, driver, tmp_path):
    """The bilinear page's own-digit uploader, for real: a photo-like PNG (dark ink on light paper) is read and
    explained; a file that is not an image gives a message and a test digit is explained again."""
    from PIL import Image, ImageDraw

    good = tmp_path / "seven.png"
    im = Image.new("L", (400, 500), 230)
    ImageDraw.Draw(im).line([(80, 90), (320, 90), (170, 430)], fill=20, width=28)
    im.save(good)
    bad = tmp_path / "notes.png"
    bad.write_text("these are my notes, not a picture\n")
    body, alerts = _upload_round_trip(driver, f"{server[0]}/bilinear_mlp", "own digit", "Explaining one test digit",
                                      good, "Explaining your digit", bad, "A test digit is explained instead")
    assert "Read from seven.png: inverted (dark ink on a light background)" in body, body[-2000:]
    assert "could not be read as an image" in alerts, alerts


def test_event_stream_upload_in_browser(server, driver, tmp_path):
    """JL-Metric's CSV uploader, for real: a stream with text ids and a header becomes the reference (the page says
    so and the claims are measured on it); a CSV with too few columns gives a message and the synthetic stream."""
    from engine import jl_dynamic_graph_metric as eng

    g = eng.make_stream(80, 1200, 2, np.random.default_rng(5))
    good = tmp_path / "my_stream.csv"
    good.write_text("user,item,ts,a,b\n" + "".join(f"u{s},i{d},{t:.6f},{m[0]:.4f},{m[1]:.4f}\n"
                                                    for s, d, t, m in zip(g.src, g.dst, g.t, g.msg)))
    bad = tmp_path / "pairs.csv"
    bad.write_text("a,b\n1,2\n3,4\n")
    body, alerts = _upload_round_trip(driver, f"{server[0]}/jl_dynamic_graph_metric", "own event stream",
                                      "Reference stream: synthetic temporal block model", good,
                                      "Reference stream: my_stream.csv", bad, "synthetic stream is used instead")
    assert "1200 events" in body and "2 feature(s)" in body, body[-2000:]
    assert "expected at least 3" in alerts, alerts


def test_download_buttons_deliver_their_files(server, driver):
    """Downloads are encoded on click (a deferred Streamlit download): every button of a page clicked in a
    real browser must still deliver its file, and each file must parse (CSV table or JSON)."""
    import pandas as pd
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    base, _ = server
    target = Path(tempfile.mkdtemp(prefix="downloads-"))
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(target)})
    driver.get(f"{base}/bilinear_mlp")
    _wait_rendered(driver, PAGE_TIMEOUT)
    css = "[data-testid='stDownloadButton'] button"
    n = len(driver.find_elements(By.CSS_SELECTOR, css))
    assert n > 0, "no download button on the page"

    def delivered() -> set[str]:
        """Distinct files delivered so far (a repeated click's copy, "name (1).csv", counts once)."""
        return {re.sub(r" \(\d+\)(?=\.\w+$)", "", f.name) for f in target.iterdir()
                if not f.name.endswith(".crdownload")}

    for i in range(n):
        deadline = time.time() + 90
        while len(delivered()) <= i:       # click (again, if a click was lost) until this button's file is there
            assert time.time() < deadline, f"download button {i} delivered nothing: {sorted(delivered())}"
            try:
                button = driver.find_elements(By.CSS_SELECTOR, css)[i]
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
                button.click()
            except (IndexError, WebDriverException):
                time.sleep(0.5)
                continue
            t_click = time.time()
            while time.time() - t_click < 10 and len(delivered()) <= i:
                time.sleep(0.25)
    assert len(delivered()) == n, f"{n} buttons clicked, files delivered: {sorted(delivered())}"
    files = [target / name for name in sorted(delivered())]
    assert {f.suffix for f in files} == {".csv", ".json"}, files
    for f in files:
        if f.suffix == ".csv":
            table = pd.read_csv(f)
            assert len(table) > 0 and len(table.columns) > 1, (f.name, table.head())
        else:
            assert json.loads(f.read_text()), f.name


def test_png_export_and_full_screen_carry_the_chart_title(server, driver):
    """Chart titles are HTML above the chart, so the toolbar's PNG export would lose them; page_script.js puts the
    title back for the export: the file is named after the title, is taller than the chart by the title's band, and
    that band holds dark (text) pixels. The chart on screen keeps its layout. Streamlit's full-screen view (which
    enlarges the chart's frame only) shows a copy of the title while it lasts."""
    from PIL import Image
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    base, _ = server
    target = Path(tempfile.mkdtemp(prefix="png-export-"))
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(target)})
    driver.get(f"{base}/lora_pro")
    _wait_rendered(driver, PAGE_TIMEOUT)
    time.sleep(1.0)
    found = driver.execute_script("""
      const gds = [...document.querySelectorAll('.js-plotly-plot')];
      const i = gds.findIndex(g => g.layout && g.layout.meta && g.layout.meta.explorer_title);
      if (i < 0) return null;
      const g = gds[i]; g.scrollIntoView({block: 'center'});
      return [i, g.layout.meta.explorer_title, g._fullLayout.height, JSON.stringify(g.layout.margin || null),
              JSON.stringify(g.layout.annotations || null)];""")
    assert found, "no chart with a detached title on the page"
    i, title, height, margin, annotations = found
    button = driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")[i].find_element(
        By.CSS_SELECTOR, '.modebar-btn[data-title^="Download plot"]')
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true}));",
                          button)
    deadline = time.time() + 30
    while not [f for f in target.iterdir() if f.suffix == ".png"] and time.time() < deadline:
        time.sleep(0.25)
    pngs = [f for f in target.iterdir() if f.suffix == ".png"]
    assert pngs, "the PNG export delivered nothing"
    stem = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")[:60]
    assert pngs[0].stem == stem, (pngs[0].name, title)
    img = Image.open(pngs[0]).convert("L")
    assert img.height > height + 20, (img.size, height)
    band = np.asarray(img)[: img.height - height]
    assert (band < 100).sum() > 50, "no title text in the band above the exported chart"
    after = driver.execute_script(
        "const g = document.querySelectorAll('.js-plotly-plot')[arguments[0]];"
        "return [JSON.stringify(g.layout.margin || null), JSON.stringify(g.layout.annotations || null)];", i)
    assert after == [margin, annotations], "the chart on screen kept the export's title band"
    # Streamlit's full-screen view shows the chart's frame alone: the title comes along while it is full screen
    frame = driver.execute_script("return arguments[0].closest('[data-testid=\"stElementContainer\"]');",
                                  driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")[i])

    def toggle_full_screen():
        ActionChains(driver).move_to_element(frame).perform()
        full = [b for b in frame.find_elements(By.CSS_SELECTOR, "button")
                if (b.get_attribute("aria-label") or "") in ("Fullscreen", "Close fullscreen", "Exit fullscreen")]
        assert full, "no full-screen button on the chart"
        driver.execute_script("arguments[0].click();", full[-1])
        time.sleep(1.5)

    def full_screen_title() -> str | None:
        return driver.execute_script("const t = arguments[0].querySelector('.explorer-fs-title');"
                                     "return t ? t.textContent : null;", frame)

    toggle_full_screen()
    assert full_screen_title() == title
    toggle_full_screen()
    assert full_screen_title() is None


def _slider_values(d) -> dict[str, str]:
    from selenium.webdriver.common.by import By

    return {s.find_element(By.CSS_SELECTOR, "label").text.strip():
            s.find_element(By.CSS_SELECTOR, "[data-testid='stSliderThumbValue']").text.strip()
            for s in d.find_elements(By.CSS_SELECTOR, "[data-testid='stSlider']")}


def test_shared_link_as_first_visit_of_a_fresh_server(driver):
    """A hosted app that was asleep is woken by whoever opens a shared page link. Streamlit then treats
    the app as an old-style pages/ folder app until app.py's st.navigation has run once; the page must
    still come up inside the app's own navigation (sections, short names) with the link's settings."""
    from selenium.webdriver.common.by import By

    with _serve() as (base, _):
        driver.get(f"{base}/lora_pro?rank=8&seed=1")
        _wait_rendered(driver, PAGE_TIMEOUT)
        nav = driver.find_element(By.CSS_SELECTOR, "[data-testid='stSidebarNav']").text
        assert "Home: all 38 papers" in nav and "Interpretability" in nav, nav
        assert "\napp\n" not in f"\n{nav}\n", nav       # the plain file-name list starts with "app"
        sliders = _slider_values(driver)
        assert sliders.get("LoRA rank r") == "8" and sliders.get("Seed") == "1", sliders
        assert "rank=8" in driver.current_url and "seed=1" in driver.current_url
    with _serve() as (base, _):                          # the gallery's own file, opened first, behaves the same
        driver.get(f"{base}/home?q=upload")
        body = _wait_for_text(driver, "Upload an audio recording", PAGE_TIMEOUT)
        nav = driver.find_element(By.CSS_SELECTOR, "[data-testid='stSidebarNav']").text
        assert "Home: all 38 papers" in nav and "\napp\n" not in f"\n{nav}\n", nav
        assert "Residual-MPPI" not in body and "q=upload" in driver.current_url


# Installed in every tab before its document loads: records, relative to the tab's navigation start,
# when the first plot and the claims panel appear and the first error element, if any.
_OBSERVER_JS = """
window.__explorer = {plot: null, claims: null, error: null};
const __obs = new MutationObserver(() => {
  const s = window.__explorer;
  if (s.plot === null && document.querySelector(__PLOT_CSS__)) s.plot = performance.now() / 1000;
  if (s.claims === null) {
    for (const h of document.querySelectorAll('h1, h2, h3')) {
      if (h.textContent.includes('Claims, measured')) { s.claims = performance.now() / 1000; break; }
    }
  }
  const e = document.querySelector("[data-testid='stException']");
  if (e && s.error === null) s.error = e.textContent.slice(0, 500);
});
__obs.observe(document, {childList: true, subtree: true});
""".replace("__PLOT_CSS__", repr(PLOT_CSS))

LOAD_SESSIONS = int(os.environ.get("EXPLORER_LOAD_SESSIONS", "20"))
LOAD_MEMORY_MIB = float(os.environ.get("EXPLORER_LOAD_MEMORY_MIB", "4096"))


def test_load_twenty_concurrent_sessions(server):
    """20 browser sessions at once, on 20 different pages: no errors, bounded server memory, and the
    p50/p95 time from navigation to the first plot (claims panel included) printed.

    One headless chromium holds the 20 sessions as 20 tabs (each tab is its own Streamlit session
    with its own websocket); 20 separate browser processes do not fit on 2 cores. The tabs are opened
    back to back without waiting, so all 20 scripts run on the server at the same time. Run after the
    per-page tests in this module, the default views are in the shared result cache, as they are on a
    hosted app that has been up for a while; run alone (``-k load``) every page computes cold.
    """
    from selenium.common.exceptions import WebDriverException

    base, proc = server
    pages = built_papers()
    targets = [pages[i % len(pages)] for i in range(LOAD_SESSIONS)]
    d = _driver(1000, 800, eager=True, extra=("--disable-background-timer-throttling",
                                              "--disable-renderer-backgrounding",
                                              "--disable-backgrounding-occluded-windows"))
    peak = [_rss_mib(proc.pid)]
    stop = threading.Event()

    def watch_memory():
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_mib(proc.pid))
            time.sleep(0.25)

    watcher = threading.Thread(target=watch_memory, daemon=True)
    watcher.start()
    handles = {}
    try:
        for i, paper in enumerate(targets):
            if i:
                d.switch_to.new_window("tab")
            d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _OBSERVER_JS})
            d.get(f"{base}/{paper.url_path}")
            handles[d.current_window_handle] = paper.slug
        state: dict[str, dict] = {}
        deadline = time.perf_counter() + PAGE_TIMEOUT * 3
        while time.perf_counter() < deadline and len(state) < len(handles):
            for h in handles:
                if h in state:
                    continue
                try:
                    d.switch_to.window(h)
                    s = d.execute_script("return window.__explorer || null")
                except WebDriverException:
                    continue
                if s and (s["error"] is not None or (s["plot"] is not None and s["claims"] is not None)):
                    state[h] = s
            time.sleep(0.5)
    finally:
        stop.set()
        watcher.join()
        d.quit()
    missing = [slug for h, slug in handles.items() if h not in state]
    errors = [f"{handles[h]}: {s['error']}" for h, s in state.items() if s["error"] is not None]
    assert not missing, f"no claims panel + plot within {PAGE_TIMEOUT * 3:.0f} s: {missing}"
    assert not errors, errors
    times = sorted(max(s["plot"], s["claims"]) for s in state.values())
    q = statistics.quantiles(times, n=20)
    print(f"\nload: {len(times)} concurrent sessions on {len(set(handles.values()))} pages; time to first "
          f"plot p50 {statistics.median(times):.1f} s, p95 {q[18]:.1f} s, max {times[-1]:.1f} s; "
          f"server peak RSS {peak[0]:.0f} MiB (bound {LOAD_MEMORY_MIB:.0f})")
    assert peak[0] < LOAD_MEMORY_MIB, f"server memory {peak[0]:.0f} MiB"
