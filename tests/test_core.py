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
from tests.boundapp import open_bound, shown, url


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
    cuBLAS workspace setting they need, and keeps float32 matmuls and cuDNN convolutions / RNNs at full precision
    (no TF32); on the CPU it leaves all of them alone."""
    import torch

    from engine.core import device as dev

    calls = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda on, warn_only=False: calls.append((on, warn_only)))
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: bool(calls))
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv(dev.FORCE_CPU_ENV, "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    knobs = (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn)
    before = [k.fp32_precision for k in knobs]
    assert "tf32" in before                     # torch's own default lets cuDNN convolutions use TF32
    try:
        assert dev.get_device().type == "cpu" and calls == []
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ and [k.fp32_precision for k in knobs] == before
        monkeypatch.delenv(dev.FORCE_CPU_ENV)
        assert dev.get_device().type == "cuda"
        assert dev.get_device().type == "cuda"
        assert calls == [(True, True)] and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert [k.fp32_precision for k in knobs] == ["ieee"] * 3
    finally:
        for k, v in zip(knobs, before):
            k.fp32_precision = v


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


@given(st.text(alphabet="ab c*~$`_()=.,:/−≥³", max_size=60))
def test_claim_text_reads_as_written(text):
    """Claims use *, _, ~ and $ as plain symbols (c*, e_pro, ~n³): layout.plain escapes exactly those (and ` and \\), so
    the bold statement renders with no emphasis, strike-through or code inside it, and reads as the engine wrote it."""
    import re

    from markdown_it import MarkdownIt

    from components.layout import plain

    out = plain(text)
    tokens = re.findall(r"\\.|.", out, flags=re.S)
    assert "".join(t[-1] for t in tokens) == text
    assert all(len(t) == 2 or t not in "*_~$`\\" for t in tokens)
    html = MarkdownIt("commonmark").enable("strikethrough").render(f"**{out}**" if text.strip() == text else out)
    assert not re.search(r"<(em|s|code)>", html)


def test_claim_with_starred_symbols_renders_bold_only():
    """CalNF's 'c* selects … c* moves' once rendered as italics with the stars eaten."""
    from markdown_it import MarkdownIt

    from components.layout import plain

    text = "…and the calibrated label c* selects a model; c* moves (dense: ~n³)"
    html = MarkdownIt("commonmark").render(f"**{plain(text)}**")
    assert html.strip() == f"<p><strong>{text}</strong></p>"


# ---------------------------------------------------------------------------------------------------------------
# Widget specs: the exact edges of what a link may hold


def test_spec_bounds_are_inclusive_and_spellings_are_read_as_documented():
    """Both ends of an Int / Float range are valid settings (a slider can be dragged to them), a bool is not a
    number, every true/false spelling is read the right way round, surrounding blanks are ignored, and a text of
    exactly ``max_chars`` characters is kept whole (control characters dropped)."""
    i = Int(1, 10, "n")
    assert (i.parse("1"), i.parse("10"), i.parse(" 7 ")) == (1, 10, 7)
    with pytest.raises(ParamError):
        i.validate(True)
    f = Float(0.0, 1.0, "x")
    assert (f.parse("0"), f.parse("1"), f.parse("1.0")) == (0.0, 1.0, 1.0)
    for bad in ["1.0000001", "-1e-300"]:
        with pytest.raises(ParamError):
            f.parse(bad)
    for v in [0.1 + 0.2, 1 / 3, 1e-7, 0.9999999999999999]:       # the URL keeps every digit
        assert f.parse(f.to_str(v)) == v
    b = Bool("b")
    for spelled, value in {"1": True, "true": True, "Yes": True, "ON": True,
                           "0": False, "false": False, "No": False, "off": False, " true ": True}.items():
        assert b.parse(spelled) is value, spelled
    assert Choice(("a", "b"), "m").parse(" b ") == "b"
    t = Text("t", max_chars=5)
    assert t.parse("abcde") == "abcde"
    assert t.parse("a\x00b\x1bc") == "abc"
    with pytest.raises(ParamError):
        t.parse("abcdef")


def test_multiselect_minimum_and_old_link_spellings():
    """A Multi with ``min_size=2`` refuses a single option (from a link and from the widget), and a link written
    before the setting became a multiselect (an alias such as "1-3") opens the selection it stood for."""
    m = Multi((1, 2, 3, 4), "w", min_size=2, aliases=(("1-3", (1, 2, 3)), ("all", (4, 3, 2, 1))))
    for bad in ["2", "2,2"]:
        with pytest.raises(ParamError):
            m.parse(bad)
    with pytest.raises(ParamError):
        m.validate((3,))
    assert m.parse("4,2") == (2, 4)
    assert m.parse("1-3") == (1, 2, 3) and m.parse("all") == (1, 2, 3, 4)

    @dataclasses.dataclass(frozen=True)
    class Old:
        pick: tuple = param((1, 2), m)

    cfg, notices = from_query(Old, {"pick": "1-3"})
    assert cfg.pick == (1, 2, 3) and not notices


def test_option_labels_are_shown_for_their_own_option():
    """A Choice / Multi with display labels shows each option with the label at the same position."""
    c = Choice(("sgd", "adam", "lion"), "opt", labels=("SGD", "Adam", "Lion"))
    m = Multi(("sgd", "adam", "lion"), "opts", labels=("SGD", "Adam", "Lion"))
    for spec in (c, m):
        assert [spec.display(o) for o in spec.options] == ["SGD", "Adam", "Lion"]
    assert Choice((1, 2), "plain").display(2) == "2"


def test_query_of_a_config_names_every_setting_and_draws_reach_both_ends():
    """to_query writes every widget field (defaults too: a link keeps its meaning if a default changes later), and
    the random configs the page tests use can reach each end of an Int range."""
    from engine.core.params import widget_specs

    assert set(to_query(Demo())) == set(widget_specs(Demo))
    rng = random.Random(0)
    assert {Int(1, 3, "n").sample(rng) for _ in range(200)} == {1, 2, 3}
    assert {Int(0, 10, "n", step=5).sample(rng) for _ in range(200)} == {0, 5, 10}


def test_renamed_settings_in_old_links_are_translated():
    """A Config's ``upgrade_query`` maps a setting's old URL name to the new one before the link is read."""

    @dataclasses.dataclass(frozen=True)
    class Renamed:
        width: int = param(4, Int(1, 9, "width"))

        @staticmethod
        def upgrade_query(q):
            if "w" in q:
                q.setdefault("width", q.pop("w"))
            return q

    cfg, notices = from_query(Renamed, {"w": "7"})
    assert cfg.width == 7 and not notices


# ---------------------------------------------------------------------------------------------------------------
# Claims and the AUC bars


def test_claim_comparisons_at_and_beyond_the_threshold():
    """Each operator decides the boundary case the way it reads; an infinite measurement (a diverged run) never
    passes; to_dict reports the computed verdict."""
    table = [("<", 1.0, False), ("<", 0.99, True), ("<=", 1.0, True), ("<=", 1.01, False),
             (">", 1.0, False), (">", 1.01, True), (">=", 1.0, True), (">=", 0.99, False)]
    for op, measured, passed in table:
        c = Claim("s", measured, op, 1.0)
        assert c.passed is passed, (op, measured)
        assert c.to_dict()["passed"] is passed
    for op in (">", ">=", "<", "<="):
        assert not Claim("s", math.inf, op, 1.0).passed
        assert not Claim("s", -math.inf, op, 1.0).passed


def test_auc_chance_bar_matches_the_exact_null_distribution():
    """σ₀ in auc_chance_bar is the standard deviation of the AUC of a score unrelated to the labels: enumerate
    every ranking of 3 positives among 7 items (all equally likely under the null) and compare."""
    import itertools

    from engine.core import auc_chance_bar, auc_standard_error

    for n_pos, n_neg in [(3, 4), (2, 6)]:
        n = n_pos + n_neg
        aucs = []
        for pos in itertools.combinations(range(n), n_pos):      # ranks held by the positives
            neg = [r for r in range(n) if r not in pos]
            aucs.append(sum(p > q for p in pos for q in neg) / (n_pos * n_neg))
        mean = sum(aucs) / len(aucs)
        sd = math.sqrt(sum((a - mean) ** 2 for a in aucs) / len(aucs))
        assert math.isclose(mean, 0.5)
        assert math.isclose(auc_chance_bar(n_pos, n_neg, k=2.0), 0.5 + 2.0 * sd)
        assert math.isclose(auc_standard_error(0.5, n_pos, n_neg), sd)


def test_auc_standard_error_matches_a_simulation_with_unequal_classes():
    """Hanley & McNeil's formula is exact for exponentially distributed scores: simulate 4000 experiments with 5
    positives and 40 negatives (and the other way round) at AUC 0.8 and compare the spread of the measured AUCs (sampling error ~1.5 %)."""
    import numpy as np

    from engine.core import auc_standard_error

    rng = np.random.default_rng(0)
    auc, reps = 0.8, 4000
    for n_pos, n_neg in [(5, 40), (40, 5)]:
        neg = rng.exponential(1.0, size=(reps, 1, n_neg))
        pos = rng.exponential(auc / (1 - auc), size=(reps, n_pos, 1))      # P(pos > neg) = auc
        measured = (pos > neg).mean(axis=(1, 2))
        assert abs(measured.mean() - auc) < 0.01
        assert math.isclose(auc_standard_error(auc, n_pos, n_neg), measured.std(), rel_tol=0.06), (n_pos, n_neg)


# ---------------------------------------------------------------------------------------------------------------
# Seeding, data, torch helpers


def test_seed_everything_seeds_every_generator_and_the_seed_matters():
    """The same seed gives the same draws from python's random, numpy's global state, torch (already imported, not
    asked for explicitly, as most engines call it) and the returned Generator; another seed changes each of them."""
    import numpy as np
    import torch

    def draws(seed):
        gen = seed_everything(seed)
        return random.random(), float(np.random.random()), float(torch.rand(1)), float(gen.random())

    a, b, c = draws(11), draws(11), draws(12)
    assert a == b
    assert all(x != y for x, y in zip(a, c))


def test_digits_split_is_a_partition_with_a_test_set_fixed_per_seed():
    """Train and test together are exactly the dataset when the training set takes every remaining image (no image
    in both); the test set does not depend on the training size; at least 10 training images are kept."""
    import numpy as np

    from engine.core.data import _digits_raw, digits_split

    X, _ = _digits_raw()
    Xtr, ytr, Xte, yte = digits_split(10_000, seed=3)
    assert len(Xtr) == len(X) - 500 and len(Xte) == 500 and len(ytr) == len(Xtr) and len(yte) == len(Xte)

    def rows(a):
        return a[np.lexsort(a.T[::-1])]

    assert np.array_equal(rows(np.concatenate([Xtr, Xte])), rows(X))
    for n_train in (50, 700):
        _, _, Xte_small, yte_small = digits_split(n_train, seed=3)
        assert np.array_equal(Xte_small, Xte) and np.array_equal(yte_small, yte)
    assert len(digits_split(1, seed=3)[0]) == 10


def test_batch_indices_use_every_example_each_epoch():
    """With n a multiple of the batch size every epoch's batches together are exactly range(n); a batch larger than
    the data is cut to the data."""
    import torch

    from engine.core.nn import batch_indices

    idx = batch_indices(8, 4, 6, torch.Generator().manual_seed(1))
    assert len(idx) == 6
    for e in range(3):
        assert sorted(torch.cat(idx[2 * e:2 * e + 2]).tolist()) == list(range(8))
    small = batch_indices(3, 10, 2, torch.Generator().manual_seed(1))
    assert [sorted(b.tolist()) for b in small] == [[0, 1, 2], [0, 1, 2]]


def test_mlp_output_layer_is_linear():
    """Hidden layers get LayerNorm and the activation; the output layer does not (a regression output can be
    negative)."""
    from torch import nn

    from engine.core.nn import mlp

    net = mlp([3, 5, 2], layernorm=True)
    assert [type(m) for m in net] == [nn.Linear, nn.LayerNorm, nn.ReLU, nn.Linear]
    assert [m.out_features for m in net if isinstance(m, nn.Linear)] == [5, 2]


def test_train_loop_follows_plain_sgd_by_hand():
    """Minimising (w - 3)² with SGD (lr 0.1) from w = 0: w goes 0 -> 0.6 -> 1.08, the losses are 9, 5.76, 3.6864
    (computed by hand); gradient clipping to norm 1 turns the first step into 0.1; a cosine schedule halves the
    second step's rate (0.05 at step 1 of 2); the progress bar ends at 1."""
    import torch

    from engine.core.nn import train_loop

    def run(steps, **kw):
        w = torch.zeros(1, requires_grad=True)
        seen = []
        hist = train_loop([w], lambda step: ((w - 3) ** 2).sum(), steps, lr=0.1, optimizer="sgd",
                          progress=lambda f, m="": seen.append(f), **kw)
        return hist, float(w.detach()), seen

    hist, w, seen = run(3)
    assert hist == pytest.approx([9.0, 5.76, 3.6864]) and w == pytest.approx(1.464)
    assert seen[-1] == 1.0
    hist, w, _ = run(1, grad_clip=1.0)
    assert w == pytest.approx(0.1)
    _, w, _ = run(2, cosine=True)
    assert w == pytest.approx(0.6 + 0.05 * 4.8)


def test_make_optimizer_builds_the_named_optimizer():
    import torch

    from engine.core.nn import make_optimizer

    p = [torch.nn.Parameter(torch.zeros(2))]
    assert type(make_optimizer(p, "AdamW", weight_decay=0.1)) is torch.optim.AdamW
    assert type(make_optimizer(p, "adam")) is torch.optim.Adam
    assert type(make_optimizer(p, "sgd")) is torch.optim.SGD
    with pytest.raises(ValueError):
        make_optimizer(p, "lbfgs")


def test_checkpoint_round_trip_keeps_weights_and_metadata(tmp_path):
    import torch

    from engine.core.nn import load_state, mlp, save_state

    torch.manual_seed(0)
    net = mlp([2, 3, 1])
    save_state(net, tmp_path / "sub" / "m.pt", extra={"steps": 7, "note": "x", "t": torch.ones(2)})
    ck = load_state(tmp_path / "sub" / "m.pt")
    other = mlp([2, 3, 1])
    other.load_state_dict(ck["state"])
    x = torch.randn(4, 2)
    assert torch.equal(net(x), other(x))
    assert ck["extra"]["steps"] == 7 and ck["extra"]["note"] == "x" and torch.equal(ck["extra"]["t"], torch.ones(2))


# ---------------------------------------------------------------------------------------------------------------
# URL binding (components.state), on a small app with the Demo settings above and one view-only widget


VIEW = Choice(("in", "out", "far"), "zoom")


def _bound(slug, query=None, link_first=False):
    return open_bound(Demo, slug, VIEW, query, link_first)


_shown, _url = shown, url


def _link_notice(at):
    return " ".join(w.value for w in at.warning if "could not be used" in w.value)


def test_a_share_link_reopens_the_same_settings_and_view():
    """A link with every setting (Multi included) and the view opens exactly that view, without notices; the share
    link and the URL name every setting and the view, and opening the share link gives the same view again."""
    rng = random.Random(5)
    cfgs = [Demo(n=10, x=1.0, mode="a", pick=("y",), flag=True, text="a b", seed=9)]
    while len(cfgs) < 3:
        try:
            cfgs.append(random_config(Demo, rng))
        except ValueError:
            continue
    for i, cfg in enumerate(cfgs):
        link = {**to_query(cfg), "zoom": ["far", "out", "in", "far"][i]}
        at = _bound(f"core-share-{i}", link)
        drawn, shared = _shown(at)
        assert drawn == link and not _link_notice(at)
        assert shared == link and _url(at) == link
        again, _ = _shown(_bound(f"core-share-again-{i}", shared))
        assert again == link


def test_a_link_shown_before_the_view_widgets_carries_the_view():
    """Pages draw the share link before their view-only widgets: the settings binding must already have put the
    link's view (or, once the page has drawn its view widget in this process, the default view) into the URL."""
    link = {**to_query(Demo(n=4)), "zoom": "far"}
    at = _bound("core-early", link, link_first=True)
    drawn, shared = _shown(at)
    assert drawn == link and shared == link and _url(at) == link
    drawn, shared = _shown(_bound("core-early", to_query(Demo(n=4)), link_first=True))
    assert drawn == shared == {**link, "zoom": "in"}


def test_a_view_change_reaches_a_link_drawn_before_the_view_widget_in_the_same_run():
    """After the user picks another view, the share link drawn above the view widget must already name it (it used
    to lag one rerun behind: the link copied the URL's old view, which bind_view updated only afterwards). A
    settings change in the same run, and an emptied multiselect restored to its last selection, keep their usual
    behaviour."""
    at = _bound("core-view-now", link_first=True)
    at.selectbox(key="core-view-now:zoom").set_value("far").run()
    drawn, shared = _shown(at)
    assert drawn["zoom"] == shared["zoom"] == _url(at)["zoom"] == "far"
    at.slider(key="core-view-now:n").set_value(7).run()
    drawn, shared = _shown(at)
    assert drawn == shared == _url(at) and shared["n"] == "7" and shared["zoom"] == "far"
    at.selectbox(key="core-view-now:zoom").set_value("out").run()
    drawn, shared = _shown(at)
    assert drawn == shared == _url(at) and shared["zoom"] == "out"


def test_a_bad_link_falls_back_to_defaults_with_a_notice():
    """Malformed and unknown parameters are named in a notice and replaced by defaults; a combination that is valid
    field by field but not together falls back to the defaults with a notice, and the page still draws."""
    base = {**to_query(Demo()), "zoom": "in"}
    at = _bound("core-bad-1", {"n": "banana", "pick": "q", "not_a_setting": "1", "x": "0.25", "zoom": "near"})
    drawn, _ = _shown(at)
    assert drawn == {**base, "x": "0.25"}
    notice = _link_notice(at) + " ".join(w.value for w in at.warning)
    for name in ("`n`", "`pick`", "`not_a_setting`", "`zoom`"):
        assert name in notice, name
    at = _bound("core-bad-2", {"n": "9", "mode": "b"})
    drawn, _ = _shown(at)
    assert drawn == base and "do not fit together" in _link_notice(at)


def test_back_and_forward_restore_the_settings_of_the_earlier_url():
    """After a widget change, the browser's Back button reruns the page with the earlier URL: the widgets follow
    it; a widget change after that still counts."""
    at = _bound("core-back")
    earlier = _url(at)
    at.slider(key="core-back:n").set_value(7)
    at.run()
    assert _shown(at)[0]["n"] == "7" and _url(at)["n"] == "7"
    for k in list(at.query_params.keys()):
        del at.query_params[k]
    for k, v in earlier.items():
        at.query_params[k] = v
    at.run()
    assert _shown(at)[0]["n"] == "3" and _url(at)["n"] == "3"
    at.slider(key="core-back:n").set_value(5)
    at.run()
    assert _shown(at)[0]["n"] == "5" and _url(at)["n"] == "5"


def test_an_emptied_multiselect_keeps_its_last_selection():
    at = _bound("core-multi")
    at.multiselect(key="core-multi:pick").set_value(["y"])
    at.run()
    assert _shown(at)[0]["pick"] == "y"
    at.multiselect(key="core-multi:pick").set_value([])
    at.run()
    drawn, shared = _shown(at)
    assert drawn["pick"] == "y" and shared["pick"] == "y"
    assert any("choose at least one" in w.value for w in at.warning)


def test_reset_brings_back_every_default_and_the_default_view():
    at = _bound("core-reset", {"n": "7", "flag": "true", "zoom": "far"})
    assert _shown(at)[0]["zoom"] == "far"
    at.button(key="core-reset::reset").click()
    at.run()
    drawn, shared = _shown(at)
    assert drawn == {**to_query(Demo()), "zoom": "in"} and shared == drawn
    assert at.button(key="core-reset::reset").disabled


def test_a_link_from_another_revision_is_flagged(monkeypatch):
    """With a page revision, the URL carries it; a link with another revision keeps its settings and says so."""
    from components import state

    monkeypatch.setattr(state, "page_revision", lambda slug: "abcd1234")
    link = {**to_query(Demo(n=8)), "zoom": "out"}
    at = _bound("core-rev", {**link, "rev": "abcd1234"})
    assert _shown(at)[0] == link and _url(at)["rev"] == "abcd1234"
    assert not [i.value for i in at.info if "another version" in i.value]
    at = _bound("core-rev-old", {**link, "rev": "00ff00ff"})
    assert _shown(at)[0] == link and _url(at)["rev"] == "abcd1234"
    stale = [i.value for i in at.info if "another version" in i.value]
    assert len(stale) == 1 and "00ff00ff" in stale[0]


# ---------------------------------------------------------------------------------------------------------------
# The result cache (components.runner)


@pytest.fixture
def fake_engine(monkeypatch):
    """An engine module whose runs are counted; the shared result store is emptied before and after."""
    import sys
    import types

    from components import runner
    from engine.core import InputError

    calls = []
    mod = types.ModuleType("fake_core_engine")

    def run(config, progress=None):
        calls.append(("run", config))
        return {"fn": "run", "n": config.n}

    def other(config, progress=None):
        calls.append(("other", config))
        return {"fn": "other", "n": config.n}

    def run_upload(config, progress=None, payload=None):
        calls.append(("upload", payload))
        return {"fn": "upload", "bytes": bytes(payload)}

    def refuse(config, progress=None):
        raise InputError("that file has no rows")

    mod.run, mod.other, mod.run_upload, mod.refuse = run, other, run_upload, refuse
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    runner.result_store().clear()
    yield mod.__name__, calls
    runner.result_store().clear()


def test_cached_results_follow_the_config_the_function_and_the_upload(fake_engine):
    from components.runner import run_cached

    name, calls = fake_engine
    a, b = Demo(n=2), Demo(n=3)
    assert run_cached(name, a) == {"fn": "run", "n": 2}
    assert run_cached(name, a) == {"fn": "run", "n": 2} and len(calls) == 1          # served from the store
    assert run_cached(name, b) == {"fn": "run", "n": 3}
    assert run_cached(name, a, fn="other") == {"fn": "other", "n": 2}
    assert run_cached(name, a, fn="run_upload", payload=b"one") == {"fn": "upload", "bytes": b"one"}
    assert run_cached(name, a, fn="run_upload", payload=b"two") == {"fn": "upload", "bytes": b"two"}
    assert run_cached(name, a, fn="run_upload", payload=b"one") == {"fn": "upload", "bytes": b"one"}
    assert len(calls) == 5


def test_refused_inputs_become_a_message_not_a_traceback(fake_engine, monkeypatch):
    import types

    from components import runner

    name, calls = fake_engine
    errors = []
    monkeypatch.setattr(runner.st, "error", lambda msg, **kw: errors.append(msg))
    monkeypatch.setattr(runner.st, "caption", lambda msg, **kw: None)
    assert runner.run_or_message(name, Demo(), fn="refuse") is None
    assert errors == ["that file has no rows"]

    def upload(data):
        return types.SimpleNamespace(name="f.csv", size=len(data), getvalue=lambda: data)

    assert runner.run_on_upload(name, Demo(), upload(b"x" * 11), 10, "Reading", "demo data") is None
    assert len(errors) == 2 and "limit" in errors[1] and calls == []
    assert runner.run_on_upload(name, Demo(), upload(b"x" * 10), 10, "Reading", "demo data") == {
        "fn": "upload", "bytes": b"x" * 10}
    assert runner.run_on_upload(name, Demo(), None, 10, "Reading", "demo data") is None


def test_result_store_evicts_the_least_recently_used_and_counts_bytes():
    import pickle

    from components.runner import ResultStore

    store = ResultStore(max_entries=2, max_bytes=10_000)
    store.put(("a",), 1)
    store.put(("b",), 2)
    assert store.get(("a",)) == 1                       # a is now the most recently used
    store.put(("c",), 3)
    assert store.get(("b",)) is None and store.get(("a",)) == 1 and store.get(("c",)) == 3 and len(store) == 2
    store = ResultStore(max_entries=5, max_bytes=10_000)
    for _ in range(50):                                  # rewriting a key does not add up its bytes
        store.put(("k",), "v" * 100)
    assert store.nbytes == len(pickle.dumps("v" * 100, protocol=pickle.HIGHEST_PROTOCOL))
    for k in range(5):
        store.put((k,), "w" * 1000)
    assert len(store) == 5 and store.get(("k",)) is None
    store.clear()
    assert len(store) == 0 and store.nbytes == 0
