"""engine.core and components pieces that every page relies on."""

import dataclasses
import math
import os
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core import Claim, get_device, seed_everything
from engine.core.params import (
    Bool,
    Choice,
    Float,
    Int,
    Multi,
    ParamError,
    Text,
    from_query,
    param,
    random_config,
    to_query,
)
from engine.core.progress import ProgressSpan


def test_claim_pass_is_computed_not_given():
    c = Claim("x", measured=0.5, op=">=", threshold=0.4)
    assert c.passed
    assert not Claim("x", measured=0.3, op=">=", threshold=0.4).passed
    assert not Claim("x", measured=float("nan"), op="<=", threshold=1.0).passed
    with pytest.raises(ValueError):
        Claim("x", 1.0, "==", 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.measured = 0.0


@dataclasses.dataclass(frozen=True)
class Demo:
    n: int = param(3, Int(1, 10, "n"))
    x: float = param(0.5, Float(0.0, 1.0, "x"))
    mode: str = param("a", Choice(("a", "b"), "mode"))
    pick: tuple = param(("x", "z"), Multi(("x", "y", "z"), "pick"))
    flag: bool = param(False, Bool("flag"))
    text: str = param("hi", Text("text", max_chars=20))
    seed: int = param(0, Int(0, 9, "seed"))

    def __post_init__(self):
        if self.mode == "b" and self.n > 8:
            raise ValueError("mode b needs n <= 8")


@given(st.text(max_size=400))
def test_hostile_strings_never_raise_anything_but_paramerror(raw):
    for spec in (Int(1, 10, "n"), Float(0.0, 1.0, "x"), Choice(("a", "b"), "m"), Multi((1, 2, 4), "w"), Bool("b"),
                 Text("t", 20)):
        try:
            v = spec.parse(raw)
        except ParamError:
            continue
        assert spec.validate(v) == v


def test_param_parsing_edge_cases():
    i = Int(1, 10, "n")
    assert i.parse("3") == 3 and i.parse("3.0") == 3
    for bad in ["3.5", "nan", "inf", "0", "11", "x" * 500, ""]:
        with pytest.raises(ParamError):
            i.parse(bad)
    f = Float(0.0, 1.0, "x")
    for bad in ["nan", "inf", "-0.1", "1e309"]:
        with pytest.raises(ParamError):
            f.parse(bad)
    assert Choice((0.1, 0.2), "c").parse("0.10") == 0.1
    assert Bool("b").parse("TRUE") is True
    m = Multi((32, 64, 256), "widths")
    assert m.parse("256, 32") == (32, 256) and m.parse("64,64") == (64,)   # options' order, no repeats
    assert m.to_str((256, 32)) == "32,256" and m.parse(m.to_str((64, 256))) == (64, 256)
    for bad in ["", ",", "16", "32,x", "x" * 500]:
        with pytest.raises(ParamError):
            m.parse(bad)
    for bad in [(), "32", (16,)]:
        with pytest.raises(ParamError):
            m.validate(bad)
    assert Multi(("a", "b", "c"), "m", min_size=2).extremes() == [("a", "b"), ("a", "b", "c")]


def test_query_round_trip_and_fallback():
    rng = random.Random(0)
    for _ in range(50):
        try:
            cfg = random_config(Demo, rng)
        except ValueError:
            continue
        back, notices = from_query(Demo, to_query(cfg))
        assert back == cfg and not notices
    cfg, notices = from_query(Demo, {"n": "banana", "x": "2"})
    assert cfg == Demo() and len(notices) == 2
    cfg, notices = from_query(Demo, {"n": "9", "mode": "b"})   # valid alone, invalid together
    assert cfg == Demo() and notices


def test_progress_span_maps_into_parent():
    seen = []
    span = ProgressSpan(lambda f, m: seen.append(f), 0.5, 1.0)
    span(0.0)
    span(0.5)
    span.sub(0.5, 1.0)(1.0)
    assert seen == [0.5, 0.75, 1.0]


def test_seeding_is_reproducible():
    import numpy as np
    import torch

    a = seed_everything(3, torch_too=True).normal(size=3), torch.rand(2)
    b = seed_everything(3, torch_too=True).normal(size=3), torch.rand(2)
    assert np.allclose(a[0], b[0]) and torch.equal(a[1], b[1])


def test_force_cpu(monkeypatch):
    monkeypatch.setenv("EXPLORER_FORCE_CPU", "1")
    assert get_device().type == "cpu"


def test_result_store_is_bounded_and_copies():
    from components.runner import ResultStore

    store = ResultStore(max_entries=3, max_bytes=10_000)
    for k in range(5):
        store.put((k,), {"v": [k] * 10})
    assert len(store) == 3 and store.get((0,)) is None and store.get((4,)) == {"v": [4] * 10}
    got = store.get((4,))
    got["v"].append(1)
    assert store.get((4,)) == {"v": [4] * 10}, "the store must hand out copies"
    store.put(("big",), "x" * 20_000)          # larger than the byte cap: not kept
    assert store.get(("big",)) is None and store.nbytes <= 10_000
    assert math.isfinite(store.nbytes)


def test_digits_loader_matches_sklearn():
    import numpy as np
    from sklearn.datasets import load_digits

    from engine.core.data import _digits_raw, digits_split

    X, y = _digits_raw()
    d = load_digits()
    assert np.allclose(X, d.data / 16.0) and np.array_equal(y, d.target)
    Xtr, ytr, Xte, yte = digits_split(1200, seed=0)
    assert len(Xtr) == 1200 and len(Xte) == 500
    Xtr2, _, Xte2, _ = digits_split(1200, seed=0)
    assert np.array_equal(Xtr, Xtr2) and np.array_equal(Xte, Xte2)


def test_batch_indices_cover_epochs():
    import torch

    from engine.core.nn import batch_indices

    idx = batch_indices(10, 4, 5, torch.Generator().manual_seed(0))
    assert len(idx) == 5 and all(len(b) == 4 for b in idx)
    first_epoch = torch.cat(idx[:2])
    assert len(set(first_epoch.tolist())) == 8       # no repeats within an epoch


def test_chart_theme_is_applied_without_per_figure_template():
    """Every chart carries the app theme (set once as plotly's default, not re-validated per figure)."""
    import plotly.graph_objects as go

    from components import charts

    for fig in (charts.lines([0, 1], {"a": [0, 1]}, title="t"), charts.themed(go.Figure(), "t", 300, width=400)):
        assert list(fig.layout.template.layout.colorway) == charts.COLORS
        assert fig.layout.template.layout.font.size == 13
    fig = charts.themed(go.Figure(), "title", 300, width=400)
    assert (fig.layout.title.text, fig.layout.height, fig.layout.width) == ("title", 300, 400)


def test_title_and_legend_are_stacked_not_overlaid():
    """A titled chart with the template's legend row gets the title at the top and the legend rows below it (the
    browser test checks the laid-out boxes); charts without a title or a legend are left as they are."""
    import plotly.graph_objects as go

    from components import charts

    two = charts.lines([0, 1], {"a": [0, 1], "b": [1, 0]}, title="t")
    charts.stack_title_and_legend(two)
    assert two.layout.title.yref == "container" and two.layout.title.yanchor == "top"
    assert two.layout.legend.yref == "container" and two.layout.legend.yanchor == "top"
    # the legend starts below the title band and the plot starts below the legend row
    assert (1 - two.layout.legend.y) * two.layout.height == charts.TITLE_BAND
    assert two.layout.margin.t >= charts.TITLE_BAND + charts.LEGEND_ROW
    margin = two.layout.margin.t
    charts.stack_title_and_legend(two)                      # idempotent (cached figures are shown again)
    assert two.layout.margin.t == margin

    # one series with a hidden band trace: plotly still draws a legend (two visible traces), so it is stacked
    band = charts.lines([0, 1], {"a": [0, 1]}, title="t", bands={"a": ([0, 0], [1, 1])})
    assert charts.legend_on_top(band)
    # no title, a single trace, or a legend placed elsewhere: untouched
    for fig in (charts.lines([0, 1], {"a": [0, 1], "b": [1, 0]}), charts.lines([0, 1], {"a": [0, 1]}, title="t"),
                charts.lines([0, 1], {"a": [0, 1], "b": [1, 0]}, title="t").update_layout(legend=dict(y=0.1)),
                charts.lines([0, 1], {"a": [0, 1], "b": [1, 0]}, title="t").update_layout(showlegend=False)):
        before = fig.to_plotly_json()
        assert charts.stack_title_and_legend(fig).to_plotly_json() == before

    # long names wrap into more rows, and the top margin grows with them
    many = charts.lines([0, 1], {f"a rather long series name {i}": [0, i] for i in range(6)}, title="t")
    assert charts.legend_rows(many) == 3                    # 27 characters: two entries fit in 560 px
    assert charts.legend_rows(many, width=300) == 6
    many = charts.lines([0, 1], {f"a series name long enough to fill a row {i}": [0, i] for i in range(6)}, title="t")
    assert charts.legend_rows(many) == 6
    charts.stack_title_and_legend(many)
    assert many.layout.margin.t >= charts.TITLE_BAND + 6 * charts.LEGEND_ROW
    # subplot titles (annotations above each panel) get their own band under the legend
    from plotly.subplots import make_subplots
    sub = make_subplots(rows=1, cols=2, subplot_titles=("left", "right"))
    sub.add_trace(go.Scatter(x=[0], y=[0], name="x"), 1, 1)
    sub.add_trace(go.Scatter(x=[0], y=[0], name="y"), 1, 2)
    charts.stack_title_and_legend(sub)
    assert sub.layout.margin.t >= 8 + charts.LEGEND_ROW + charts.SUBPLOT_TITLE_BAND
    # a title over subplot titles, no legend: the title band comes first
    titled = make_subplots(rows=1, cols=2, subplot_titles=("left", "right"))
    titled.add_trace(go.Scatter(x=[0], y=[0], showlegend=False), 1, 1)
    charts.themed(titled, "main")
    charts.stack_title_and_legend(titled)
    assert titled.layout.margin.t >= charts.TITLE_BAND + charts.SUBPLOT_TITLE_BAND
    assert titled.layout.title.yanchor == "top" and titled.layout.legend.yref is None


def test_bar_values_with_error_bars_sit_beyond_the_whiskers():
    """With error bars a bar's value is written past the end of its whisker (not on it), and the axis keeps
    room for it; without error bars the bar carries its own text as before."""
    from components import charts

    fig = charts.bars(["a", "b", "c"], [0.5, -0.2, float("nan")], errors=[0.1, 0.05, 0.1], text_fmt=".2f")
    assert fig.data[0].text is None
    ann = {a.x: a for a in fig.layout.annotations}
    assert set(ann) == {"a", "b"}                                   # nothing for the missing value
    assert (ann["a"].y, ann["a"].yanchor, ann["a"].text) == (0.6, "bottom", "0.50")
    assert (round(ann["b"].y, 12), ann["b"].yanchor, ann["b"].text) == (-0.25, "top", "-0.20")
    (room,) = fig.layout.shapes
    assert room.y1 > 0.6 and room.y0 < -0.25 and room.opacity == 0
    plain = charts.bars(["a"], [0.5], text_fmt=".2f")
    assert list(plain.data[0].text) == ["0.50"] and not plain.layout.annotations


def test_sidebar_names_the_device_the_engine_uses(monkeypatch):
    """A page whose engine keeps its work on the CPU never names the GPU, even when one is present; an engine
    that routes its tensors through get_device names it."""
    import types

    import torch

    from engine.core import device as dev

    monkeypatch.delenv(dev.FORCE_CPU_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Test GPU")
    gpu_engine = types.SimpleNamespace(USES_DEVICE=True)
    cpu_engine = types.SimpleNamespace(get_device=dev.get_device)   # calls get_device for its thread limits only
    assert dev.engine_device_label(gpu_engine) == "CUDA: Test GPU"
    assert dev.engine_device_label(cpu_engine) == "CPU (this page's engine does not use the GPU)"
    monkeypatch.setenv(dev.FORCE_CPU_ENV, "1")
    assert dev.engine_device_label(gpu_engine).startswith("CPU")
    assert dev.engine_device_label(cpu_engine) == "CPU"


def test_a_cuda_host_gets_deterministic_kernels(monkeypatch):
    """On a GPU host get_device() turns on torch's deterministic algorithms (warn-only, so no page stops) and the
    cuBLAS workspace setting they need; on the CPU it leaves both alone."""
    import torch

    from engine.core import device as dev

    calls = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda on, warn_only=False: calls.append((on, warn_only)))
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: bool(calls))
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv(dev.FORCE_CPU_ENV, "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert dev.get_device().type == "cpu" and calls == []
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    monkeypatch.delenv(dev.FORCE_CPU_ENV)
    assert dev.get_device().type == "cuda"
    assert dev.get_device().type == "cuda"
    assert calls == [(True, True)] and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_engines_that_route_tensors_to_the_device_declare_it():
    """USES_DEVICE (what the sidebar reports) matches the source: an engine that declares it takes get_device()'s
    device and moves tensors or models onto it; one that does that without declaring it would be reported on the
    CPU while it runs on a GPU."""
    import importlib
    import re

    from engine.registry import ROOT, built_papers

    routes = re.compile(r"\.to\((self\.)?dev(ice)?\b|device=dev(ice)?\b|map_location=dev(ice)?\b")
    for paper in built_papers():
        module = importlib.import_module(paper.module)
        src = (ROOT / (paper.module.replace(".", "/") + ".py")).read_text()
        takes = re.search(r"\b(device|dev)\s*=\s*get_device\(\)", src) is not None
        declared = getattr(module, "USES_DEVICE", False) is True
        assert declared == (takes and routes.search(src) is not None), paper.slug


def test_bar_values_too_small_to_read_are_hidden_not_shrunk():
    """Figures with bar labels get plotly's uniform text rule (hide below 10 px); others are left alone."""
    import plotly.graph_objects as go

    from components import charts

    fig = charts.readable_bar_text(charts.bars(["a", "b"], [1.0, 2.0]))
    assert (fig.layout.uniformtext.minsize, fig.layout.uniformtext.mode) == (10, "hide")
    line = charts.readable_bar_text(charts.lines([0, 1], {"a": [0, 1]}))
    assert line.layout.uniformtext.mode is None
    kept = charts.readable_bar_text(go.Figure(go.Bar(x=["a"], y=[1], text=["1"])).update_layout(
        uniformtext=dict(minsize=6, mode="show")))
    assert kept.layout.uniformtext.mode == "show"                # a page's own choice stays


def test_chart_title_is_detached_for_html_and_survives_a_second_show():
    """charts.show writes a figure's title as HTML above the chart (it wraps; plotly's does not): detach_title
    returns the title, removes it from the figure, frees the title band of an unset top margin, and gives the
    same title again when the same figure is shown a second time; a page's own margin is kept."""
    import plotly.graph_objects as go

    from components import charts

    fig = charts.lines([0, 1], {"a": [0, 1]}, title="Q_θ(s, π_K(s)) <i>vs</i> steps")
    assert charts.detach_title(fig) == "Q_θ(s, π_K(s)) <i>vs</i> steps"
    assert not fig.layout.title.text and fig.layout.margin.t == charts.HTML_TITLE_TOP
    assert charts.detach_title(fig) == "Q_θ(s, π_K(s)) <i>vs</i> steps"      # shown again: same title
    own = charts.themed(go.Figure(), "t", 300, margin=dict(t=80))
    assert charts.detach_title(own) == "t" and own.layout.margin.t == 80
    untitled = charts.lines([0, 1], {"a": [0, 1]})
    before = untitled.to_plotly_json()
    assert charts.detach_title(untitled) is None and untitled.to_plotly_json() == before
    # with the title gone, a legend over subplot titles is still stacked (legend rows, then the titles band)
    from plotly.subplots import make_subplots
    sub = make_subplots(rows=1, cols=2, subplot_titles=("left", "right"))
    sub.add_trace(go.Scatter(x=[0], y=[0], name="x"), 1, 1)
    sub.add_trace(go.Scatter(x=[0], y=[0], name="y"), 1, 2)
    charts.themed(sub, "main")
    charts.detach_title(sub)
    charts.stack_title_and_legend(sub)
    assert sub.layout.margin.t >= 8 + charts.LEGEND_ROW + charts.SUBPLOT_TITLE_BAND


def test_heatmaps_do_not_count_as_legend_entries():
    """Plotly leaves heatmaps (and surfaces, meshes, ...) out of the legend unless asked: a grid of titled heatmaps
    gets no phantom legend rows in its top margin (it used to get one row per three panels of blank space)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from components import charts

    grid = make_subplots(rows=3, cols=5, subplot_titles=[str(i) for i in range(15)])
    for i in range(15):
        grid.add_trace(go.Heatmap(z=[[1, 2], [3, 4]], showscale=False), row=i // 5 + 1, col=i % 5 + 1)
    assert not charts.legend_on_top(grid) and charts.legend_rows(grid) == 1
    charts.themed(grid, "t", 570)
    charts.detach_title(grid)
    charts.stack_title_and_legend(grid)
    assert grid.layout.margin.t == charts.HTML_TITLE_TOP + charts.SUBPLOT_TITLE_BAND
    # a heatmap asked into the legend counts, as do points drawn over heatmaps
    shown = go.Figure([go.Heatmap(z=[[1]], showlegend=True, name="h"), go.Scatter(x=[0], y=[0], name="p")])
    assert charts.legend_on_top(shown)
    over = go.Figure([go.Heatmap(z=[[1]]), go.Scatter(x=[0], y=[0], name="a"), go.Scatter(x=[0], y=[0], name="b")])
    assert charts.legend_on_top(over)


def test_short_log_axes_get_full_size_ticks():
    """Over 1-2.5 decades plotly labels a log axis with every digit in small print and a stray digit past each end;
    tidy_log_ticks puts full-size ticks at 1-2-3-5 (about one decade) or 1-2-5 steps inside the data's span, on the
    axis each trace is bound to, and leaves long ranges and a page's own tick settings alone."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from components import charts

    short = go.Figure(go.Scatter(x=[1, 4, 12], y=[0.3, 0.9, 1.0])).update_xaxes(type="log")
    charts.tidy_log_ticks(short)
    assert list(short.layout.xaxis.tickvals) == [1, 2, 3, 5, 10]
    assert list(short.layout.xaxis.ticktext) == ["1", "2", "3", "5", "10"]
    assert short.layout.yaxis.tickvals is None                      # a linear axis is not touched
    two = go.Figure(go.Scatter(x=[0, 1], y=[0.02, 3.0])).update_yaxes(type="log")
    assert list(charts.tidy_log_ticks(two).layout.yaxis.tickvals) == [0.02, 0.05, 0.1, 0.2, 0.5, 1, 2]
    long = go.Figure(go.Scatter(x=[1, 9000], y=[0, 1])).update_xaxes(type="log")
    assert charts.tidy_log_ticks(long).layout.xaxis.tickvals is None
    own = go.Figure(go.Scatter(x=[1, 12], y=[0, 1])).update_xaxes(type="log", dtick=1)
    assert charts.tidy_log_ticks(own).layout.xaxis.tickvals is None
    # subplots: the second panel's axis reads only the traces bound to it
    sub = make_subplots(rows=1, cols=2)
    sub.add_trace(go.Scatter(x=[1, 1000], y=[0, 1]), 1, 1)
    sub.add_trace(go.Scatter(x=[10, 40], y=[0, 1]), 1, 2)
    sub.update_xaxes(type="log")
    charts.tidy_log_ticks(sub)
    assert sub.layout.xaxis.tickvals is None and list(sub.layout.xaxis2.tickvals) == [10, 20, 30]


def test_lines_dashes_a_series_that_would_hide_an_earlier_one():
    """A series drawn on the same points as an earlier one (within 0.5 % of the axis extent; decades on a log axis)
    is dashed so both stay visible; distinct series and series on another x grid stay solid."""
    import numpy as np

    from components import charts

    x = np.arange(5.0)
    a, far = np.array([1.0, 2, 3, 4, 5]), np.array([5.0, 4, 3, 2, 1])
    fig = charts.lines(x, {"a": a, "same": a + 0.01, "far": far, "again": a.copy(), "nan": np.full(5, np.nan)})
    assert [tr.line.dash for tr in fig.data] == [None, "dash", None, "dot", None]
    # on a log axis the tolerance is in decades: 1e-6 vs 2e-6 is a visible gap there, 1e3 vs 1.001e3 is not
    logf = charts.lines(x, {"a": [1e-6, 1e-3, 1, 1e3, 1e6], "b": [2e-6, 1e-3, 1, 1e3, 1e6],
                            "c": [1e-6, 1e-3, 1, 1.001e3, 1e6]}, log_y=True)
    assert [tr.line.dash for tr in logf.data] == [None, None, "dash"]
    other_x = charts.lines({"a": x, "b": x + 1}, {"a": a, "b": a})
    assert [tr.line.dash for tr in other_x.data] == [None, None]
    labels = charts.lines(["p", "q", "r"], {"a": [1, 2, 3], "b": [1, 2, 3]})    # categorical x
    assert [tr.line.dash for tr in labels.data] == [None, "dash"]


def test_ref_line_labels_sit_on_the_line_on_log_axes():
    """plotly reads an annotation's position on a log axis in decades but a shape's in data units; ref_line gives
    the label the line's position in both cases and leaves linear axes alone."""
    import math

    import plotly.graph_objects as go

    from components import charts

    fig = go.Figure(go.Scatter(x=[1, 100], y=[0.1, 50])).update_xaxes(type="log").update_yaxes(type="log")
    charts.ref_line(fig, x=60, text="vertical")
    charts.ref_line(fig, y=12.0, text="horizontal", line_dash="dot")
    vline, hline = fig.layout.shapes
    assert vline.x0 == 60 and hline.y0 == 12.0
    labels = {a.text: a for a in fig.layout.annotations}
    assert math.isclose(labels["vertical"].x, math.log10(60)) and math.isclose(labels["horizontal"].y, math.log10(12))
    lin = go.Figure(go.Scatter(x=[0, 5], y=[0, 1]))
    charts.ref_line(lin, x=3, text="t")
    assert lin.layout.annotations[0].x == 3
    charts.ref_line(lin, y=0.5)                                 # no label: just the line
    assert len(lin.layout.annotations) == 1 and len(lin.layout.shapes) == 2
    with pytest.raises(ValueError):
        charts.ref_line(lin, x=1, y=1)


def test_page_script_survives_streamlits_html_sanitiser():
    """app.py inserts components/page_script.js with st.html; a "<" right before a letter, "/", "!" or "?" anywhere
    in it (code or comment) makes Streamlit's sanitiser drop the whole script silently, which happened once with a
    "<br>" in a string. The script must also be one self-contained statement that installs itself once per tab."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "components" / "page_script.js").read_text()
    bad = [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in re.finditer(r"<[A-Za-z/!?]", text)]
    assert not bad, f"line and text of each '<' the sanitiser would take for a tag: {bad}"
    assert "window.__explorerAlignTitles" in text


def test_survey_files_round_trip_and_reject_bad_content(tmp_path, monkeypatch):
    from engine.core import surveys

    monkeypatch.setattr(surveys, "ASSETS", tmp_path)
    assert surveys.load_survey("x/none.json", "rows") is None                 # missing
    path = surveys.write_survey("x/s.json", {"rows": [1, 2]})
    data = surveys.load_survey("x/s.json", "rows")
    assert path == tmp_path / "x" / "s.json" and data["rows"] == [1, 2] and len(data["measured"]) == 10
    assert surveys.load_survey("x/s.json", "other") is None                   # lacks the required entry
    path.write_text("{not json")
    assert surveys.load_survey("x/s.json", "rows") is None                    # unreadable


@given(st.text(max_size=60))
def test_literal_escapes_what_markdown_would_read(name):
    """An uploaded file's name goes into Markdown through layout.literal: no Markdown or LaTeX character is left
    unescaped, and dropping the escapes gives the name back (a browser test shows one rendered as typed)."""
    import re

    from components.layout import literal

    tokens = re.findall(r"\\.|.", literal(name), flags=re.S)          # an escape pair or one character
    assert "".join(t[-1] for t in tokens) == name
    assert all(len(t) == 2 or not re.fullmatch(r"[\\`*_{}\[\]()#+\-.!|<>~$]", t) for t in tokens)
