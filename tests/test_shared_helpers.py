"""engine.core (params, claims, progress, training loop, uploads) and components.charts, checked on the behaviour a
visitor sees: links that reopen the same settings, bars and badges that say the right thing, charts that draw every
series on the right axis."""

import dataclasses
import math

import numpy as np
import pytest

from components import charts
from engine.core import Claim, InputError, check_upload
from engine.core.params import Choice, Float, Int, Multi, ParamError, from_query, param, to_query
from engine.core.progress import ProgressSpan

# ----------------------------------------------------------------------------- URL parameters


def test_numeric_choices_accept_other_spellings_of_the_same_number_only():
    c = Choice((0.1, 0.2, 0.5), "lr")
    assert c.parse("0.20") == 0.2 and c.parse("5e-1") == 0.5 and c.parse("0.1") == 0.1
    for bad in ["0.3", "0.25", "1", "abc"]:
        with pytest.raises(ParamError):
            c.parse(bad)
    ints = Choice((1, 2, 4), "k")
    assert ints.parse("4.0") == 4
    with pytest.raises(ParamError):
        ints.parse("3")


@dataclasses.dataclass(frozen=True)
class _Cfg:
    lr: float = param(0.01, Float(1e-4, 1.0, "lr"))
    width: int = param(8, Int(1, 64, "width"))
    pick: tuple = param((2,), Multi((1, 2, 3), "pick"))
    opt: str = param("adam", Choice(("adam", "sgd"), "opt"))


def test_a_link_reopens_an_unusual_config_exactly():
    cfg = _Cfg(lr=0.0123456789, width=64, pick=(1, 3), opt="sgd")
    back, notices = from_query(_Cfg, to_query(cfg))
    assert back == cfg and not notices


def test_each_bad_value_falls_back_alone_with_its_own_notice():
    cfg, notices = from_query(_Cfg, {"lr": "2", "width": "17", "pick": "9", "opt": "sgd"})
    assert (cfg.lr, cfg.width, cfg.pick, cfg.opt) == (0.01, 17, (2,), "sgd")
    assert len(notices) == 2
    assert any("`lr`" in n and "0.01" in n for n in notices) and any("`pick`" in n for n in notices)


# ----------------------------------------------------------------------------- claims, progress, uploads


@pytest.mark.parametrize("measured", [math.nan, math.inf, -math.inf])
def test_a_non_finite_measurement_fails_every_claim(measured):
    for op in ("<", "<=", ">", ">="):
        c = Claim("s", measured, op, 0.0)
        assert not c.passed and c.to_dict()["passed"] is False


def test_claim_describe_prints_the_numbers_it_compares():
    c = Claim("s", 0.123456, ">=", 0.1, label="acc", fmt=".2f")
    assert c.describe() == "acc = 0.12 (needs >= 0.10)"


def test_nested_progress_spans_land_inside_their_slice():
    seen = []
    span = ProgressSpan(lambda f, m: seen.append((f, m)), 0.2, 0.6, prefix="run: ")
    inner = span.sub(0.25, 0.5)
    inner(0.0, "a")
    inner(1.0, "b")
    inner(2.0, "c")                    # a fraction past 1 stays at the end of the slice
    assert [f for f, _ in seen] == pytest.approx([0.3, 0.4, 0.4])
    assert seen[0][1] == "run: a"


def test_an_upload_of_exactly_the_limit_is_accepted():
    assert check_upload(b"x" * 1024, 1024) == b"x" * 1024
    with pytest.raises(InputError):
        check_upload(b"x" * 1025, 1024)
    with pytest.raises(InputError):
        check_upload(b"  \n", 1024, blank_is_empty=True)


def test_train_loop_applies_weight_decay():
    """SGD on (w - 3)^2 with weight decay 0.5 and lr 0.1 from w = 1: the gradient is 2 (w - 3) + 0.5 w, so w goes
    1 -> 1.35 -> 1.6125 (by hand)."""
    import torch

    from engine.core.nn import train_loop

    w = torch.ones(1, requires_grad=True)
    train_loop([w], lambda step: ((w - 3) ** 2).sum(), 2, lr=0.1, weight_decay=0.5, optimizer="sgd")
    assert float(w.detach()) == pytest.approx(1.6125)


# ----------------------------------------------------------------------------- charts


def test_lines_band_is_a_closed_polygon_around_its_series():
    x = np.array([0.0, 1.0, 2.0])
    y, lo, hi = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.5, 2.0]), np.array([1.5, 2.5, 4.0])
    fig = charts.lines(x, {"m": y}, bands={"m": (lo, hi)})
    band, line = fig.data
    assert list(band.x) == [0, 1, 2, 2, 1, 0]
    assert list(band.y) == [1.5, 2.5, 4.0, 2.0, 1.5, 0.5]
    assert list(line.y) == [1, 2, 3] and line.name == "m"


def test_lines_puts_log_scale_and_labels_on_the_axis_asked_for():
    fig = charts.lines([1, 10, 100], {"a": [1, 2, 3]}, xlabel="steps", ylabel="loss", log_x=True)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type != "log"
    assert fig.layout.xaxis.title.text == "steps" and fig.layout.yaxis.title.text == "loss"
    fig = charts.lines([1, 2, 3], {"a": [1, 10, 100]}, log_y=True)
    assert fig.layout.yaxis.type == "log" and fig.layout.xaxis.type != "log"


def test_lines_draws_every_series_even_past_the_palette():
    ys = {f"s{i}": np.arange(4.0) * (i + 1) for i in range(11)}
    fig = charts.lines(np.arange(4.0), ys)
    assert [t.name for t in fig.data] == list(ys)
    for t, y in zip(fig.data, ys.values()):
        assert np.array_equal(np.asarray(t.y), y)
    assert fig.data[8].line.color == fig.data[0].line.color == charts.COLORS[0]


def test_log_ticks_reach_a_data_maximum_on_a_power_of_ten():
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[0, 1, 2], y=[2.0, 30.0, 100.0])).update_yaxes(type="log")
    ticks = list(charts.tidy_log_ticks(fig).layout.yaxis.tickvals)
    assert ticks == [2, 5, 10, 20, 50, 100]
    fig = go.Figure(go.Scatter(x=[0.01, 1.0], y=[0, 1])).update_xaxes(type="log")
    assert list(charts.tidy_log_ticks(fig).layout.xaxis.tickvals) == [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1]


def test_heatmap_axes_and_diverging_colour_range():
    z = np.array([[-3.0, 1.0], [0.5, 2.0]])
    fig = charts.heatmap(z, xlabel="key", ylabel="query", diverging=True)
    assert fig.layout.xaxis.title.text == "key" and fig.layout.yaxis.title.text == "query"
    h = fig.data[0]
    assert (h.zmin, h.zmid, h.zmax) == (-3.0, 0.0, 3.0)
    assert fig.layout.yaxis.autorange == "reversed"
    seq = charts.heatmap(z, zmin=0.0, zmax=5.0, reverse_y=False)
    assert (seq.data[0].zmin, seq.data[0].zmax) == (0.0, 5.0) and seq.layout.yaxis.autorange is True


def test_scatter_keeps_x_and_y_and_labels():
    fig = charts.scatter([1, 2, 3], [10, 20, 30], xlabel="width", ylabel="loss", text=["a", "b", "c"])
    t = fig.data[0]
    assert list(t.x) == [1, 2, 3] and list(t.y) == [10, 20, 30] and list(t.text) == ["a", "b", "c"]
    assert fig.layout.xaxis.title.text == "width" and fig.layout.yaxis.title.text == "loss"


def test_a_single_long_legend_entry_takes_one_row():
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(x=[0, 1], y=[0, 1], name="x" * 100)])
    assert charts.legend_rows(fig) == 1
    fig.add_trace(go.Scatter(x=[0, 1], y=[1, 0], name="short"))
    assert charts.legend_rows(fig) == 2


def test_bar_text_shows_each_value_in_the_requested_format():
    fig = charts.bars(["a", "b"], [0.12345, -2.5], text_fmt=".2f")
    assert list(fig.data[0].text) == ["0.12", "-2.50"]
    assert list(fig.data[0].y) == [0.12345, -2.5]


def test_a_diverging_heatmap_is_symmetric_about_its_own_midpoint():
    # AUROC-like values around chance 0.5: the colour range must be centred on 0.5, not on 0
    fig = charts.heatmap(np.array([[0.4, 0.6], [0.55, 0.9]]), diverging=True, zmid=0.5)
    h = fig.data[0]
    assert h.zmid == 0.5 and h.zmin == pytest.approx(0.1) and h.zmax == pytest.approx(0.9)


def test_bars_with_a_missing_value_draw_the_others():
    fig = charts.bars(["a", "b", "c"], [1.0, None, float("nan")], errors=[0.1, 0.1, 0.1], text_fmt=".1f")
    assert [a.text for a in fig.layout.annotations] == ["1.0"]
    plain = charts.bars(["a", "b"], [2.0, None], text_fmt=".1f")
    assert list(plain.data[0].text) == ["2.0", ""]


@pytest.mark.parametrize("spec", [Float(0.5, 0.999, "x", step=0.005), Float(0.0, 1.0, "y", step=0.3)])
def test_sampled_floats_stay_inside_a_range_the_step_does_not_divide(spec):
    import random

    rng = random.Random(0)
    draws = [spec.sample(rng) for _ in range(2000)]
    assert min(draws) >= spec.lo and max(draws) <= spec.hi
    assert max(draws) > spec.hi - spec.step        # the top of the grid is still reached
    for v in draws[:50]:
        spec.validate(v)
