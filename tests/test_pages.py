"""Generic page tests: every page in the registry, opened headless with Streamlit's AppTest.

For each built page: the default view renders with its claims panel and no error, and no chart line lies hidden
under another or loses values <= 0 on a log axis; a random valid
configuration set through the URL reproduces itself (widgets show the values, the URL keeps them);
widgets driven to random valid values render without exception; hostile URL parameters fall back
to the defaults with a visible notice. New pages get all of this by registering.
"""

from __future__ import annotations

import ast
import importlib
import io
import json
import os
import random
import re

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from components.state import HW_PARAM, REV_PARAM, page_arithmetic, page_revision, revision_of
from engine.core.params import Float, Int, Text, defaults, random_config, to_query, widget_specs
from engine.registry import PAPERS, ROOT, built_papers

TIMEOUT = float(os.environ.get("EXPLORER_PAGE_TIMEOUT", "180"))
DRAWS = int(os.environ.get("EXPLORER_PAGE_DRAWS", "1"))
BUILT = built_papers()
IDS = [p.slug for p in BUILT]

HOSTILE = ["", "nan", "inf", "-inf", "1e309", "-1", "999999999", "abc", "[1, 2]", "<script>alert(1)</script>",
           "9" * 400, "0x10", "None", "%00", "true", "1.5", " ", "🙂"]


def _widget(at: AppTest, key: str):
    for kind in ("slider", "select_slider", "selectbox", "radio", "multiselect", "checkbox", "toggle",
                 "number_input", "text_input"):
        for w in getattr(at, kind):
            if w.key == key:
                return w
    raise LookupError(key)


def _config_cls(paper):
    return importlib.import_module(paper.module).Config


def _random_valid_config(cls, rng):
    for _ in range(50):
        try:
            return random_config(cls, rng)
        except (ValueError, TypeError):
            continue
    return cls()


def _open(paper, query: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / paper.page), default_timeout=TIMEOUT)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    return at.run()


def _link_notices(at: AppTest) -> list[str]:
    """Warnings that say a URL parameter could not be used (other warnings are the page's own)."""
    return [w.value for w in at.warning if "link parameters could not be used" in w.value
            or w.value.startswith("`")]


def _chart_data(values):
    """A trace's x or y as a float array (plotly stores numpy arrays as base64 "bdata"); None for labels."""
    import base64

    import numpy as np

    if isinstance(values, dict) and "bdata" in values:
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])).astype(float)
    try:
        return np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        return None


def _chart_defects(at: AppTest) -> list[str]:
    """What a reader of the page's plotly charts would miss: a line drawn exactly over another one of a different
    name (its legend entry has no visible line), values <= 0 on a log axis (plotly drops them silently), or a label
    on a log axis given in data units (plotly puts it at 10**value and stretches the axis to show it)."""
    import numpy as np

    from components.charts import _coincide, _y_scale

    found = []
    for k, el in enumerate(at.get("plotly_chart")):
        spec = json.loads(el.proto.spec)
        layout, data = spec.get("layout", {}), spec.get("data", [])
        for d in data:
            for ax in ("x", "y"):
                axis = layout.get(d.get(f"{ax}axis", ax).replace(ax, f"{ax}axis", 1), {})
                v = _chart_data(d.get(ax)) if axis.get("type") == "log" else None
                if v is not None and (v[np.isfinite(v)] <= 0).any():
                    found.append(f"chart {k}: {d.get('name')!r} has values <= 0 on a log {ax} axis")
        for ann in layout.get("annotations", []):
            for ax in ("x", "y"):
                ref = ann.get(f"{ax}ref") or ""
                if not ref.startswith(ax) or "domain" in ref or not isinstance(ann.get(ax), (int, float)):
                    continue
                if layout.get(ref.replace(ax, f"{ax}axis", 1), {}).get("type") != "log":
                    continue
                # plotly reads an annotation's position on a log axis in decades (charts.ref_line converts)
                on_axis = [_chart_data(d.get(ax)) for d in data if (d.get(f"{ax}axis") or ax) == ref]
                v = np.concatenate([a for a in on_axis if a is not None] or [np.ones(1)])
                v = np.log10(v[np.isfinite(v) & (v > 0)])
                if v.size and not v.min() - 1 <= ann[ax] <= v.max() + 1:
                    found.append(f"chart {k}: label {ann.get('text')!r} sits at 10^{ann[ax]:g} on a log {ax} axis")
        solid = [d for d in data if d.get("type", "scatter") == "scatter" and "lines" in d.get("mode", "lines")
                 and not d.get("fill") and d.get("line", {}).get("dash", "solid") == "solid"
                 and d.get("opacity", 1) == 1 and d.get("showlegend", True) is not False and d.get("name")]
        for i, a in enumerate(solid):
            for b in solid[i + 1:]:
                if a["name"] == b["name"] or (a.get("xaxis"), a.get("yaxis")) != (b.get("xaxis"), b.get("yaxis")):
                    continue                                  # e.g. one line per seed of the same variant
                log = layout.get((a.get("yaxis") or "y").replace("y", "yaxis", 1), {}).get("type") == "log"
                ya, yb = _chart_data(a.get("y")), _chart_data(b.get("y"))
                if ya is None or yb is None:
                    continue
                xa, xb = a.get("x"), b.get("x")
                xa, xb = (_chart_data(xa), _chart_data(xb)) if _chart_data(xa) is not None else (xa, xb)
                if _coincide(xa, ya, xb, yb, log, _y_scale([ya, yb], log)):
                    found.append(f"chart {k}: {b['name']!r} is drawn exactly over {a['name']!r}")
    return found


def _no_exception(at: AppTest):
    assert not at.exception, [e.value for e in at.exception]


def test_registry_lists_every_seed_paper():
    assert len(PAPERS) == 38
    assert len({p.slug for p in PAPERS}) == 38
    for p in PAPERS:
        assert p.title and p.summary and p.area
        if p.page is not None:
            assert p.built, f"{p.slug}: page file {p.page} is missing"
            assert p.module, f"{p.slug}: a built page must name its engine module"


def test_app_and_home_gallery():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    _no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    for p in PAPERS:
        assert p.title[:30] in text, p.slug
    # the count says what is built; the "built only" filter is offered only while some page is still to come
    built = sum(p.built for p in PAPERS)
    captions = " ".join(c.value for c in at.caption)
    if built == len(PAPERS):
        assert f"All {built} papers have a live page." in captions and not at.toggle
    else:
        assert f"{built} of {len(PAPERS)} pages built" in captions and at.toggle(key="home:built")
    # search narrows the gallery; an impossible search says so
    at.text_input(key="home:q").set_value("bilinear").run()
    text = " ".join(m.value for m in at.markdown)
    assert "Bilinear MLPs" in text and "Residual-MPPI" not in text
    at.text_input(key="home:q").set_value("zzzz-no-such-paper").run()
    assert any("No paper matches" in i.value for i in at.info)


def test_pages_that_take_uploads_say_so_in_the_gallery():
    """A paper's own_data (the gallery's "Upload ..." badge) is set exactly when its engine has run_upload and its
    page a file uploader; searching "upload" finds those pages and no other."""
    import importlib

    takers = set()
    for p in PAPERS:
        if not p.built:
            continue
        has = hasattr(importlib.import_module(p.module), "run_upload")
        assert bool(p.own_data) == has == ("st.file_uploader(" in (ROOT / p.page).read_text()), p.slug
        if has:
            takers.add(p.title[:30])
    assert len(takers) >= 4
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.text_input(key="home:q").set_value("upload").run()
    _no_exception(at)
    titles = {m.value.strip("*")[:30] for m in at.markdown if m.value.startswith("**")}
    assert titles == takers, titles ^ takers
    badges = [m.value for m in at.markdown if m.value.startswith(":blue-badge[")]      # st.badge, as AppTest sees it
    assert len(badges) == len(takers) and all("Upload " in b for b in badges), badges


def test_home_filter_lives_in_the_url():
    """A gallery link with a search and an area opens filtered; changing the filter rewrites the link; a URL changed
    under the session (Back / Forward) sets the filter again; junk in the link is dropped."""
    from engine.registry import AREAS

    area = next(p.area for p in PAPERS if "Bilinear" in p.title)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["q"] = "bilinear"
    at.query_params["area"] = [area, "no such area"]
    at.query_params["junk"] = "1"
    at.run()
    _no_exception(at)
    assert at.text_input(key="home:q").value == "bilinear"
    assert at.multiselect(key="home:areas").value == [area]
    text = " ".join(m.value for m in at.markdown)
    assert "Bilinear MLPs" in text and "Residual-MPPI" not in text
    qp = dict(at.query_params)
    assert "junk" not in qp and qp["q"] in ("bilinear", ["bilinear"]) and qp["area"] in (area, [area])
    at.text_input(key="home:q").set_value("").run()
    other = next(a for a in AREAS if a != area)
    at.multiselect(key="home:areas").set_value([other]).run()
    assert "q" not in at.query_params and at.query_params["area"] in (other, [other])
    for k in list(at.query_params.keys()):           # Back to the first URL
        del at.query_params[k]
    at.query_params["q"] = "bilinear"
    at.run()
    assert at.text_input(key="home:q").value == "bilinear" and at.multiselect(key="home:areas").value == []
    assert "Bilinear MLPs" in " ".join(m.value for m in at.markdown)


def test_app_start_does_not_import_torch():
    import os
    import subprocess
    import sys

    # the home gallery's render itself must not import torch; the background warm-up that app.py starts
    # after the render is switched off here so that it cannot race the check (it has its own test below)
    code = ("import sys; from streamlit.testing.v1 import AppTest; "
            "at = AppTest.from_file('app.py', default_timeout=60).run(); "
            "assert not at.exception, at.exception; print('torch' in sys.modules)")
    env = dict(os.environ, EXPLORER_PREWARM="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env=env)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_app_warms_libraries_in_background_after_first_render():
    import json
    import os
    import subprocess
    import sys

    code = ("import json, sys; from streamlit.testing.v1 import AppTest; "
            "at = AppTest.from_file('app.py', default_timeout=60).run(); "
            "assert not at.exception, at.exception; "
            "from components import prewarm; t = prewarm._thread; "
            "started = t is not None; t.join(300); again = prewarm.start() is t; "
            "print(json.dumps({'started': started, 'alive': t.is_alive(), 'again': again, "
            "'errors': prewarm.errors, 'steps': sorted(prewarm.timings), "
            "'loaded': [m for m in prewarm.MODULES if m not in sys.modules]}))")
    env = {k: v for k, v in os.environ.items() if k != "EXPLORER_PREWARM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env=env)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["started"] and not got["alive"] and got["again"], got      # one thread per process, finished
    assert got["errors"] == {}, got["errors"]
    assert got["loaded"] == [], f"not loaded: {got['loaded']}"
    assert {"torch first optimizer step", "librosa first STFT"} <= set(got["steps"])
    # switched off, nothing starts
    off = ("import os; os.environ['EXPLORER_PREWARM'] = '0'; from components import prewarm; "
           "print(prewarm.start() is None)")
    assert subprocess.run([sys.executable, "-c", off], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.strip() == "True"


def _record_downloads(monkeypatch) -> list:
    """Record (file name, data) of every download button the page script creates from now on."""
    import streamlit

    offered = []
    real = streamlit.download_button

    def recording(label, data, *args, **kwargs):
        offered.append((kwargs.get("file_name"), data))
        return real(label, data, *args, **kwargs)

    monkeypatch.setattr(streamlit, "download_button", recording)
    return offered


def _check_downloads(offered: list) -> None:
    """The downloads are encoded on click (deferred): encode each one here and check that it parses."""
    for name, data in offered:
        payload = data() if callable(data) else data
        assert isinstance(payload, bytes) and payload, name
        if name.endswith(".csv"):
            assert len(pd.read_csv(io.BytesIO(payload))) > 0, name
        elif name.endswith(".json"):
            # strict JSON, as a browser's JSON.parse reads it: Python's NaN / Infinity tokens are refused
            assert json.loads(payload, parse_constant=_refuse_constant) not in (None, {}, []), name


def _refuse_constant(token: str):
    raise ValueError(f"non-standard JSON token {token}")


@pytest.mark.parametrize("paper", BUILT, ids=IDS)
def test_page_default_view(paper, monkeypatch):
    offered = _record_downloads(monkeypatch)
    at = _open(paper)
    _no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert any("Claims" in s.value for s in at.subheader), "claims panel missing"
    assert len(at.get("plotly_chart")) + len(at.get("vega_lite_chart")) + len(at.get("arrow_vega_lite_chart")) > 0
    assert not _chart_defects(at), _chart_defects(at)
    # the sidebar names the device of this page's engine (tests run on the CPU, forced for the engines that follow
    # the device choice)
    compute = [c.value for c in at.sidebar.caption if "Compute:" in c.value]
    uses = getattr(importlib.import_module(paper.module), "USES_DEVICE", False)
    assert compute == [":material/memory: Compute: " + ("CPU (forced by EXPLORER_FORCE_CPU)" if uses else "CPU")]
    # under it, the time of this view's engine runs (every page runs its engine at the default view)
    timer = [c.value for c in at.sidebar.caption if "Engine time for this view" in c.value]
    assert len(timer) == 1 and re.search(r": \d+(\.\d+)? s[, ]", timer[0]), timer
    assert len(at.get("download_button")) == len(offered)
    _check_downloads(offered)


@pytest.mark.parametrize("paper", BUILT, ids=IDS)
def test_page_shared_link_reproduces_view(paper):
    cls = _config_cls(paper)
    rng = random.Random(f"link-{paper.slug}")
    cfg = _random_valid_config(cls, rng)
    query = to_query(cfg)
    at = _open(paper, query)
    _no_exception(at)
    assert not _link_notices(at), _link_notices(at)
    for name, spec in widget_specs(cls).items():
        w = _widget(at, f"{paper.slug}:{name}")
        assert spec.to_str(w.value) == query[name], name
    assert {k: at.query_params[k][0] if isinstance(at.query_params[k], list) else at.query_params[k]
            for k in query} == query
    # the link also records the revision of the page's computation, and a link without one gets no notice
    assert at.query_params[REV_PARAM] in (page_revision(paper.slug), [page_revision(paper.slug)])
    assert at.query_params[HW_PARAM] in (page_arithmetic(paper.slug), [page_arithmetic(paper.slug)])
    assert not [i.value for i in at.info if "another version of this page" in i.value or "arithmetic" in i.value]


def test_revision_follows_code_and_assets_but_not_comments(tmp_path):
    engine_dir, assets = tmp_path / "engine", tmp_path / "assets" / "demo"
    engine_dir.mkdir()
    assets.mkdir(parents=True)
    mod = engine_dir / "demo.py"
    helper = engine_dir / "helper.py"
    helper.write_text("def g(x):\n    return x + 1\n")
    mod.write_text('"""Demo."""\nfrom engine.helper import g\nfrom engine.core import param\n\n\n'
                   'def f(x):\n    """Twice x."""\n    return 2 * x  # doubled\n')
    (assets / "w.bin").write_bytes(b"\x00\x01")
    base = revision_of(mod, assets)
    assert len(base) == 8 and int(base, 16) >= 0
    assert revision_of(mod, assets) == base
    # rewording comments and docstrings keeps it
    mod.write_text('"""Demo, reworded."""\nfrom engine.helper import g\nfrom engine.core import param\n\n\n'
                   'def f(x):\n    """Two times x."""\n    # the factor\n    return 2 * x\n')
    assert revision_of(mod, assets) == base
    # a changed formula, a changed sibling engine module, a changed or added asset each give a new revision
    changed = []
    mod.write_text(mod.read_text().replace("2 * x", "3 * x"))
    changed.append(revision_of(mod, assets))
    mod.write_text(mod.read_text().replace("3 * x", "2 * x"))
    assert revision_of(mod, assets) == base
    helper.write_text("def g(x):\n    return x + 2\n")
    changed.append(revision_of(mod, assets))
    helper.write_text("def g(x):\n    return x + 1\n")
    (assets / "w.bin").write_bytes(b"\x00\x02")
    changed.append(revision_of(mod, assets))
    (assets / "w.bin").write_bytes(b"\x00\x01")
    assert revision_of(mod, assets) == base
    # the same bytes under another name count too (a renamed checkpoint is a different file to the engine)
    (assets / "w.bin").rename(assets / "w2.bin")
    changed.append(revision_of(mod, assets))
    (assets / "w2.bin").rename(assets / "w.bin")
    assert revision_of(mod, assets) == base
    (assets / "sub").mkdir()
    (assets / "sub" / "extra.json").write_text("{}")
    changed.append(revision_of(mod, assets))
    assert base not in changed and len(set(changed)) == len(changed)
    # a sibling imported as ``from engine import other`` counts too (spectral_rewiring imports graphs that way)
    other = engine_dir / "other.py"
    other.write_text("K = 1\n")
    mod.write_text(mod.read_text().replace("from engine.helper import g", "from engine.helper import g\n"
                                                                        "from engine import other as O"))
    before = revision_of(mod, assets)
    other.write_text("K = 2\n")
    assert revision_of(mod, assets) != before
    # every registered page has a revision, and different engines have different ones
    revs = {p.slug: page_revision(p.slug) for p in BUILT}
    assert all(revs.values()) and len(set(revs.values())) == len(revs)


def test_a_link_from_another_revision_says_so_and_keeps_its_settings():
    paper = next(p for p in BUILT if p.slug == "dp-bandmf")
    cls = _config_cls(paper)
    query = to_query(_random_valid_config(cls, random.Random("stale-link")))
    current = page_revision(paper.slug)
    at = _open(paper, {**query, REV_PARAM: current})
    _no_exception(at)
    assert not [i.value for i in at.info if "another version of this page" in i.value]
    at = _open(paper, {**query, REV_PARAM: "0123abcd" if current != "0123abcd" else "0123abce"})
    _no_exception(at)
    stale = [i.value for i in at.info if "another version of this page" in i.value]
    assert len(stale) == 1 and "0123ab" in stale[0] and current in stale[0]
    assert not _link_notices(at), _link_notices(at)
    for name, spec in widget_specs(cls).items():
        assert spec.to_str(_widget(at, f"{paper.slug}:{name}").value) == query[name], name
    # the URL now carries this revision, so a link copied from here opens without the notice
    assert at.query_params[REV_PARAM] in (current, [current])
    # a hostile value is shown cut short and never raises
    at = _open(paper, {**query, REV_PARAM: "<b>" + "9" * 300})
    _no_exception(at)
    stale = [i.value for i in at.info if "another version of this page" in i.value]
    assert len(stale) == 1 and "9" * 17 not in stale[0]


def test_a_link_from_a_server_of_another_kind_says_so_and_keeps_its_settings():
    """A link records how its server does float arithmetic (CPU kind, numpy / scipy / torch versions, device):
    opened here with the same code but another arithmetic tag, the page restores the settings and says that
    chaotic runs may end elsewhere; with this server's tag, or none (older links), it says nothing."""
    paper = next(p for p in BUILT if p.slug == "lift")
    cls = _config_cls(paper)
    query = {**to_query(_random_valid_config(cls, random.Random("other-machine"))), REV_PARAM: page_revision(paper.slug)}
    here = page_arithmetic(paper.slug)
    assert len(here) == 6 and int(here, 16) >= 0
    notice = "does its float arithmetic differently"
    for tag in (here, None):
        at = _open(paper, {**query, HW_PARAM: tag} if tag else query)
        _no_exception(at)
        assert not [i.value for i in at.info if notice in i.value]
        assert at.query_params[HW_PARAM] in (here, [here])
    other = "0a0a0a" if here != "0a0a0a" else "0b0b0b"
    at = _open(paper, {**query, HW_PARAM: other})
    _no_exception(at)
    seen = [i.value for i in at.info if notice in i.value]
    assert len(seen) == 1 and other in seen[0] and here in seen[0]
    assert not _link_notices(at) and not [i.value for i in at.info if "another version of this page" in i.value]
    for name, spec in widget_specs(cls).items():
        assert spec.to_str(_widget(at, f"{paper.slug}:{name}").value) == query[name], name
    assert at.query_params[HW_PARAM] in (here, [here])       # a link copied from here carries this server's tag
    # a hostile tag is quoted cut short, letters and digits only
    at = _open(paper, {**query, HW_PARAM: "`[x](//e.co)" + "7" * 300})
    _no_exception(at)
    seen = [i.value for i in at.info if notice in i.value]
    assert len(seen) == 1 and "7" * 17 not in seen[0] and "](" not in seen[0]


def test_the_arithmetic_tag_follows_the_cpu_kind_library_versions_and_device(monkeypatch):
    """Same inputs, same tag; another CPU kind, another torch version, or a GPU for a device-following engine
    gives another; a CPU-only engine keeps its tag on a GPU host (its numbers come from the CPU)."""
    from importlib import metadata

    from components import seed_notes, state
    from engine.core import device

    def tag(slug):
        state.page_arithmetic.cache_clear()
        return state.page_arithmetic(slug)

    dev_slug = next(p.slug for p in BUILT if device.follows_device(importlib.import_module(p.module)))
    cpu_slug = next(p.slug for p in BUILT if not device.follows_device(importlib.import_module(p.module)))
    base = {s: tag(s) for s in (dev_slug, cpu_slug)}
    assert base[dev_slug] == base[cpu_slug]                    # on a CPU server both compute on the CPU
    try:
        monkeypatch.setattr(seed_notes, "machine", lambda: "aarch64 ASIMD")
        assert tag(cpu_slug) != base[cpu_slug]
        monkeypatch.undo()
        real = metadata.version
        monkeypatch.setattr(metadata, "version", lambda d: "9.9.9" if d == "torch" else real(d))
        assert tag(cpu_slug) != base[cpu_slug]
        monkeypatch.undo()
        monkeypatch.setattr(device, "device_label", lambda load_torch=False: "CUDA: Some GPU")
        assert tag(dev_slug) != base[dev_slug] and tag(cpu_slug) == base[cpu_slug]
        monkeypatch.undo()
        assert tag(dev_slug) == base[dev_slug]
    finally:
        state.page_arithmetic.cache_clear()


@pytest.mark.parametrize("paper", BUILT, ids=IDS)
def test_page_widgets_random_values(paper, monkeypatch):
    cls = _config_cls(paper)
    rng = random.Random(f"widgets-{paper.slug}")
    at = _open(paper)
    offered = _record_downloads(monkeypatch)
    for _ in range(DRAWS):
        cfg = _random_valid_config(cls, rng)
        for name, spec in widget_specs(cls).items():
            value = getattr(cfg, name)
            w = _widget(at, f"{paper.slug}:{name}")
            if isinstance(spec, Text):
                w.input(value)
            else:
                w.set_value(value)
        offered.clear()
        at.run()
        _no_exception(at)
        # the files of the downloads this view offers encode too (they are built only when clicked)
        _check_downloads(offered)


@pytest.mark.parametrize("paper", BUILT, ids=IDS)
def test_page_hostile_url_params(paper):
    cls = _config_cls(paper)
    rng = random.Random(f"hostile-{paper.slug}")
    query = {name: rng.choice(HOSTILE) for name in widget_specs(cls)}
    # the page's view settings and tabs too ("true" left out: it would switch on DocMIA's opt-in sweeps)
    query.update({name: rng.choice([h for h in HOSTILE if h != "true"]) for name in sorted(_view_names(ROOT / paper.page)[0])})
    query["not_a_setting"] = "1"
    at = _open(paper, query)
    _no_exception(at)
    assert _link_notices(at), "a notice must say which parameters were ignored"
    assert any("Claims" in s.value for s in at.subheader)


def test_view_only_widget_is_bound_to_the_url():
    """A view-only widget (state.bind_view) is restored from a link and kept in the URL."""
    paper = next((p for p in BUILT if p.slug == "densematcher"), None)
    if paper is None:
        pytest.skip("densematcher page not built")
    at = _open(paper, {"view": "xyz"})
    _no_exception(at)
    assert not _link_notices(at), _link_notices(at)
    assert _widget(at, "densematcher:view").value == "xyz"
    _widget(at, "densematcher:view").set_value("initial")
    at.run()
    assert at.query_params["view"] in ("initial", ["initial"])


def test_a_url_changed_by_back_or_forward_sets_the_widgets():
    """The browser's Back / Forward buttons rerun the page with an earlier URL: the settings and the view-only
    widget must follow that URL (not write the current widgets over it), and a widget change afterwards still
    counts."""
    paper = next((p for p in BUILT if p.slug == "densematcher"), None)
    if paper is None:
        pytest.skip("densematcher page not built")
    cls = _config_cls(paper)
    base = defaults(cls)
    name = next(n for n, spec in widget_specs(cls).items() if isinstance(spec, Int | Float) and n != "seed")
    spec = widget_specs(cls)[name]
    other = spec.hi if base[name] != spec.hi else spec.lo
    at = _open(paper)
    _no_exception(at)
    earlier = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    _widget(at, f"densematcher:{name}").set_value(other)
    _widget(at, "densematcher:view").set_value("xyz")
    at.run()
    assert at.query_params[name] in (spec.to_str(other), [spec.to_str(other)])
    for k in list(at.query_params.keys()):          # Back: the browser restores the earlier URL
        del at.query_params[k]
    for k, v in earlier.items():
        at.query_params[k] = v
    at.run()
    _no_exception(at)
    assert _widget(at, f"densematcher:{name}").value == base[name]
    assert _widget(at, "densematcher:view").value == earlier["view"]
    assert at.query_params[name] in (spec.to_str(base[name]), [spec.to_str(base[name])])
    _widget(at, "densematcher:view").set_value("initial")     # an ordinary change after it still takes effect
    at.run()
    assert _widget(at, "densematcher:view").value == "initial"
    assert at.query_params["view"] in ("initial", ["initial"])
    assert _widget(at, f"densematcher:{name}").value == base[name]


def test_reset_button_restores_every_default_and_the_link():
    """'Reset to defaults' (disabled at the defaults) brings back every setting and view-only widget of a page
    opened from a link, and the URL with them."""
    paper = next((p for p in BUILT if p.slug == "densematcher"), None)
    if paper is None:
        pytest.skip("densematcher page not built")
    cls = _config_cls(paper)
    base = defaults(cls)
    fresh = _open(paper)
    assert fresh.button(key="densematcher::reset").disabled
    name = next(n for n, spec in widget_specs(cls).items() if isinstance(spec, Int | Float) and n != "seed")
    spec = widget_specs(cls)[name]
    other = spec.hi if base[name] != spec.hi else spec.lo
    at = _open(paper, {name: spec.to_str(other), "view": "xyz"})
    _no_exception(at)
    assert _widget(at, f"densematcher:{name}").value == other
    reset = at.button(key="densematcher::reset")
    assert not reset.disabled
    reset.click()
    at.run()
    _no_exception(at)
    for n in widget_specs(cls):
        assert _widget(at, f"densematcher:{n}").value == base[n], n
    assert _widget(at, "densematcher:view").value != "xyz"
    qp = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert qp.get(name) == spec.to_str(base[name]) and qp.get("view") != "xyz"
    assert at.button(key="densematcher::reset").disabled
    at.run()                      # the view widget has written its default into the URL by now: still at defaults
    assert at.button(key="densematcher::reset").disabled
    _widget(at, "densematcher:view").set_value("initial")      # a view other than the default ("refined")
    at.run()
    assert at.query_params["view"] in ("initial", ["initial"])
    assert not at.button(key="densematcher::reset").disabled


def test_every_paper_has_a_short_name():
    from engine.registry import SHORT

    assert set(SHORT) == {p.slug for p in PAPERS}


def test_conflicting_widget_values_give_a_message_and_keep_the_page():
    """A combination that the Config rejects (MoE-CL: pool N < clusters K) set through the widgets: a clear
    message, the last working settings restored, no traceback, and the claims still shown."""
    paper = next((p for p in BUILT if p.slug == "moe-continual"), None)
    if paper is None:
        pytest.skip("moe-continual not built")
    at = _open(paper)
    _widget(at, "moe-continual:pool").set_value(1)
    at.run()
    _no_exception(at)
    assert any("do not fit together" in w.value for w in at.warning), [w.value for w in at.warning]
    assert _widget(at, "moe-continual:pool").value == 7
    assert any("Claims" in s.value for s in at.subheader)
    _widget(at, "moe-continual:clusters").set_value(1)
    at.run()
    _widget(at, "moe-continual:pool").set_value(1)
    at.run()
    _no_exception(at)
    assert _widget(at, "moe-continual:pool").value == 1
    assert not any("do not fit together" in w.value for w in at.warning)


def test_multiselect_settings_and_views_keep_a_selection_and_read_old_links():
    """A multiselect (params.Multi) emptied by the user keeps its last selection with a message, as a Config
    setting (CrossMPT's Eb/N0 points) and as a view (loss reweighting's strategies shown); a link written when the
    setting was a single choice of presets ("1-7") still opens the same view, without a notice."""
    by_slug = {p.slug: p for p in BUILT}
    if "crossmpt" not in by_slug or "loss-reweighting" not in by_slug:
        pytest.skip("pages not built")
    at = _open(by_slug["crossmpt"], {"ebn0": "1-7"})
    _no_exception(at)
    assert not _link_notices(at), _link_notices(at)
    assert list(_widget(at, "crossmpt:ebn0").value) == [1, 2, 3, 4, 5, 6, 7]
    _widget(at, "crossmpt:ebn0").set_value([2, 6])
    at.run()
    assert at.query_params["ebn0"] in ("2,6", ["2,6"])
    _widget(at, "crossmpt:ebn0").set_value([])
    at.run()
    _no_exception(at)
    assert list(_widget(at, "crossmpt:ebn0").value) == [2, 6]
    assert any("choose at least one" in w.value for w in at.warning), [w.value for w in at.warning]
    assert any("Claims" in s.value for s in at.subheader)

    at = _open(by_slug["loss-reweighting"], {"strategies": "linupper,uniform"})
    _no_exception(at)
    assert list(_widget(at, "loss-reweighting:strategies").value) == ["uniform", "linupper"]
    _widget(at, "loss-reweighting:strategies").set_value([])
    at.run()
    _no_exception(at)
    assert list(_widget(at, "loss-reweighting:strategies").value) == ["uniform", "linupper"]
    assert any("choose at least one" in w.value for w in at.warning), [w.value for w in at.warning]
    assert at.query_params["strategies"] in ("uniform,linupper", ["uniform,linupper"])


def _view_names(page_file) -> tuple[set, set]:
    """(names passed to state.bind_view, names declared by bind_config(views=...)) in a page's source."""
    import ast

    used, declared = set(), set()
    for node in ast.walk(ast.parse(page_file.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("bind_view", "bind_tabs"):
                name = node.args[1]
                assert isinstance(name, ast.Constant), f"{page_file.name}: a view with a computed name"
                used.add(name.value)
            elif node.func.attr == "bind_config":
                for kw in node.keywords:
                    if kw.arg == "views":
                        declared |= {e.value for e in kw.value.elts}
    return used, declared


def test_every_page_draws_its_device_line_before_its_first_engine_run():
    """The sidebar's engine-time line is made by layout.device_indicator and filled by each engine run after it; a
    run before it would go unreported. So every page calls device_indicator (after bind_config) before its first
    run_cached / run_or_message / run_or_stop / run_on_upload."""
    runs = {"run_cached", "run_or_message", "run_or_stop", "run_on_upload"}
    wrong = {}
    for p in BUILT:
        calls = []
        for node in ast.walk(ast.parse((ROOT / p.page).read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                calls.append((node.lineno, name))
        first = {n: min((ln for ln, m in calls if m == n), default=None)
                 for n in ("bind_config", "device_indicator")}
        first_run = min((ln for ln, m in calls if m in runs), default=None)
        if None in first.values() or first_run is None or not (
                first["bind_config"] < first["device_indicator"] < first_run):
            wrong[p.slug] = (first, first_run)
    assert not wrong, wrong


def test_every_view_setting_is_declared_to_bind_config():
    """bind_config checks the URL before the page's view widgets exist; in a server process that has not drawn the
    page yet, a view name it was not told about read as unknown (a false "not a setting of this page" notice on a
    shared link). Each page therefore declares its view names; this keeps the declarations complete."""
    missing = {}
    for p in BUILT:
        used, declared = _view_names(ROOT / p.page)
        if used - declared:
            missing[p.slug] = sorted(used - declared)
    assert not missing, missing


@pytest.mark.parametrize("slug, query, widget, expected", [
    ("crossmpt", {"decoders": "bp,crossmpt"}, "decoders", ["bp", "crossmpt"]),
    ("docvqa-mia", {"sweeps": "false"}, "sweeps", False),
])
def test_a_view_link_opened_by_a_fresh_server_gets_no_false_notice(monkeypatch, slug, query, widget, expected):
    """As on a server that has not drawn the page before (the view registries empty): a link carrying only a view
    setting opens with that view and no notice."""
    from components import state

    by_slug = {p.slug: p for p in BUILT}
    if slug not in by_slug:
        pytest.skip("page not built")
    for name in ("VIEW_PARAMS", "VIEW_DEFAULTS", "VIEW_SPECS"):
        monkeypatch.setattr(state, name, {})
    at = _open(by_slug[slug], query)
    _no_exception(at)
    assert not _link_notices(at), _link_notices(at)
    value = _widget(at, f"{slug}:{widget}").value
    assert (list(value) if isinstance(expected, list) else value) == expected


def test_tabs_bound_to_the_link_open_as_the_link_says():
    """state.bind_tabs: a link's tab label selects the tab and stays in the URL; an unknown label gets a notice and
    the first tab."""
    by_slug = {p.slug: p for p in BUILT}
    if "ub-gold" not in by_slug:
        pytest.skip("page not built")
    at = _open(by_slug["ub-gold"], {"table_metric": "FPR95", "score_scenario": "inter-dataset shift"})
    _no_exception(at)
    assert not _link_notices(at), _link_notices(at)
    assert at.session_state["ub-gold:table_metric"] == "FPR95"
    assert at.session_state["ub-gold:score_scenario"] == "inter-dataset shift"
    assert at.query_params["table_metric"] in ("FPR95", ["FPR95"])
    at = _open(by_slug["ub-gold"], {"table_metric": "bogus"})
    _no_exception(at)
    assert any("table_metric" in n and "AUROC" in n for n in _link_notices(at)), _link_notices(at)
    assert at.session_state["ub-gold:table_metric"] == "AUROC"
    assert at.query_params["table_metric"] in ("AUROC", ["AUROC"])
