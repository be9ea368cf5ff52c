"""Plotly helpers with one theme for the whole app."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st
from plotly.subplots import make_subplots

COLORS = ["#3b6fd8", "#e4572e", "#29a36a", "#9b5de5", "#f4a300", "#17becf", "#8c564b", "#e377c2"]
DIVERGING = "RdBu_r"
SEQUENTIAL = "Viridis"

_template = go.layout.Template(pio.templates["plotly_white"])
_template.layout.colorway = COLORS
_template.layout.font = dict(family="Inter, Helvetica, Arial, sans-serif", size=13)
_template.layout.margin = dict(l=50, r=20, t=50, b=45)
_template.layout.title = dict(x=0.01, xanchor="left", font=dict(size=15))
_template.layout.legend = dict(orientation="h", yanchor="bottom", y=1.02, x=0)
pio.templates["explorer"] = _template
TEMPLATE = "explorer"
# The default template is attached to every new figure without re-validation; assigning it per figure with
# update_layout(template=...) re-validates the whole template (~13 ms a figure, most of a page's cache-hit render).
# (streamlit is imported above on purpose: its import makes its own template plotly's default, so it must come first)
pio.templates.default = TEMPLATE


def themed(fig: go.Figure, title: str | None = None, height: int | None = None, **layout) -> go.Figure:
    if title is not None:
        layout["title"] = title
    if height is not None:
        layout["height"] = height
    if layout:
        fig.update_layout(**layout)
    return fig


def lines(x, ys: dict[str, Sequence[float]], title: str = "", xlabel: str = "", ylabel: str = "",
          log_y: bool = False, log_x: bool = False, bands: dict[str, tuple] | None = None,
          height: int = 360, mode: str = "lines") -> go.Figure:
    """Several named series over a shared x; optional (low, high) bands per series."""
    fig = go.Figure()
    drawn: list[tuple[np.ndarray, np.ndarray]] = []
    scale = _y_scale(ys.values(), log_y)
    for i, (name, y) in enumerate(ys.items()):
        color = COLORS[i % len(COLORS)]
        xs = x[name] if isinstance(x, dict) else x
        if bands and name in bands:
            lo, hi = bands[name]
            fig.add_trace(go.Scatter(x=np.concatenate([xs, xs[::-1]]), y=np.concatenate([hi, lo[::-1]]),
                                     fill="toself", line=dict(width=0), fillcolor=color, opacity=0.18,
                                     hoverinfo="skip", showlegend=False))
        # a series lying on top of an earlier one would hide it: dash it, so the one below shows through the gaps
        n_under = sum(_coincide(xs, y, xe, ye, log_y, scale) for xe, ye in drawn)
        dash = (None, "dash", "dot", "dashdot")[min(n_under, 3)]
        drawn.append((xs, y))
        fig.add_trace(go.Scatter(x=xs, y=y, name=name, mode=mode, line=dict(color=color, width=2, dash=dash)))
    fig.update_xaxes(title=xlabel, type="log" if log_x else None)
    fig.update_yaxes(title=ylabel, type="log" if log_y else None)
    return themed(fig, title, height)


def ref_line(fig: go.Figure, x: float | None = None, y: float | None = None, text: str = "", **kw) -> go.Figure:
    """A vertical (x=) or horizontal (y=) reference line with an optional label, placed right on log axes too.

    plotly puts a shape on a log axis at its data value but an annotation at 10**value, so ``add_vline(x=60,
    annotation_text=...)`` on a log x axis labels the line at x = 1e60 and stretches the axis to show it. Set the
    axis type before calling this. ``kw`` goes to add_vline / add_hline (line_dash, annotation_position, ...).
    """
    import math

    if (x is None) == (y is None):
        raise ValueError("ref_line takes exactly one of x and y")
    n = len(fig.layout.annotations)
    if text:
        kw["annotation_text"] = text
    if x is not None:
        fig.add_vline(x=x, **kw)
    else:
        fig.add_hline(y=y, **kw)
    for ann in fig.layout.annotations[n:]:
        for ax in ("x", "y"):
            ref = getattr(ann, f"{ax}ref") or ""
            value = getattr(ann, ax)
            if ref.startswith(ax) and "domain" not in ref and isinstance(value, (int, float)) and value > 0 \
                    and fig.layout[ref.replace(ax, f"{ax}axis", 1)].type == "log":
                setattr(ann, ax, math.log10(value))
    return fig


def _finite_values(y, log: bool) -> np.ndarray:
    v = np.asarray(y, dtype=float).ravel()
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.log10(np.where(v > 0, v, np.nan))
    return v


def _y_scale(series, log: bool) -> float:
    """Extent of all series on the plotted axis (decades on a log axis); 1 when there is none."""
    try:
        v = np.concatenate([_finite_values(y, log) for y in series])
    except (TypeError, ValueError):
        return 1.0
    v = v[np.isfinite(v)]
    return float(np.ptp(v)) if v.size and np.ptp(v) > 0 else 1.0


def _coincide(xa, ya, xb, yb, log: bool, scale: float) -> bool:
    """Whether two series are drawn on the same points to within 0.5 % of the axis extent."""
    try:
        a, b = _finite_values(ya, log), _finite_values(yb, log)
    except (TypeError, ValueError):
        return False
    try:
        same_x = np.array_equal(np.asarray(xa, dtype=float), np.asarray(xb, dtype=float), equal_nan=True)
    except (TypeError, ValueError):                     # category labels
        same_x = list(np.ravel(xa)) == list(np.ravel(xb))
    if a.shape != b.shape or not same_x:
        return False
    ok = np.isfinite(a) & np.isfinite(b)
    return int(ok.sum()) >= 2 and bool(np.max(np.abs(a[ok] - b[ok])) <= 0.005 * scale)


def bars(names: Sequence[str], values: Sequence[float], title: str = "", ylabel: str = "",
         errors: Sequence[float] | None = None, height: int = 340, colors: Sequence[str] | None = None,
         text_fmt: str = ".3g") -> go.Figure:
    # a missing or non-finite value gets no label (and, with error bars, no annotation below)
    labels = ["" if v is None or not np.isfinite(v) else format(v, text_fmt) for v in values]
    fig = go.Figure(go.Bar(x=list(names), y=list(values),
                           error_y=dict(type="data", array=list(errors)) if errors is not None else None,
                           marker_color=list(colors) if colors else COLORS[0],
                           text=labels if errors is None else None, textposition="outside"))
    if errors is not None:
        # a bar's own text would sit on its error bar: write the value above the whisker instead (below it for a
        # negative bar)
        ends = []
        for name, v, e, lab in zip(names, values, errors, labels):
            if v is None or not np.isfinite(v):
                continue
            e = float(e) if e is not None and np.isfinite(e) else 0.0
            up = v >= 0
            ends.append(v + e if up else v - e)
            fig.add_annotation(x=name, y=ends[-1], text=lab, showarrow=False,
                               yanchor="bottom" if up else "top", yshift=2 if up else -2)
        if ends:
            # autorange leaves room for a bar's own text, not for annotations: an invisible shape (shapes count in
            # autorange, and lines a page adds later still widen it) reserves a label's height beyond the whiskers
            lo, hi = min(0.0, *ends), max(0.0, *ends)
            pad = 0.12 * ((hi - lo) or 1.0)
            fig.add_shape(type="line", xref="paper", x0=0, x1=0, y0=lo - pad if lo < 0 else lo,
                          y1=hi + pad if hi > 0 else hi, line=dict(width=0), opacity=0)
    fig.update_yaxes(title=ylabel)
    return themed(fig, title, height)


def heatmap(z, title: str = "", x=None, y=None, xlabel: str = "", ylabel: str = "", diverging: bool = False,
            zmid: float | None = None, height: int = 380, colorbar_title: str = "", square: bool = False,
            zmin: float | None = None, zmax: float | None = None, reverse_y: bool = True) -> go.Figure:
    z = np.asarray(z)
    kw = {}
    if diverging:
        # a range symmetric about the midpoint (0 unless zmid says otherwise), so equal distances get equal colours
        mid = 0.0 if zmid is None else float(zmid)
        m = float(np.nanmax(np.abs(z - mid))) if z.size else 1.0
        kw = dict(zmid=mid, zmin=mid - m, zmax=mid + m)
    if zmin is not None:
        kw["zmin"] = zmin
    if zmax is not None:
        kw["zmax"] = zmax
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, colorscale=DIVERGING if diverging else SEQUENTIAL,
                               colorbar=dict(title=colorbar_title), **kw))
    fig.update_xaxes(title=xlabel)
    fig.update_yaxes(title=ylabel, autorange="reversed" if reverse_y else True)
    if square:
        fig.update_yaxes(scaleanchor="x", scaleratio=1)
    return themed(fig, title, height)


GRID_META = "explorer_grid"     # layout.meta key read by components/page_script.js (narrow screens)
GRID_MODES = ("flow", "band")


def mark_grid(fig: go.Figure, n: int, rows: int, cols: int, mode: str = "flow", hs: float = 0.03,
              vs: float = 0.12) -> go.Figure:
    """Mark the first ``n`` cells of a ``make_subplots(rows, cols, horizontal_spacing=hs, vertical_spacing=vs)``
    figure as an image grid (call it after the figure's height is set).

    On a column too narrow for ``cols`` images of a readable size (a phone), components/page_script.js lays the grid
    out again with fewer columns and more rows: "flow" keeps the images' reading order (row by row), "band" keeps
    each original column's images together (the rows mean something: two views of one sample, the heads of one
    layer) and puts chunks of columns below each other. Widening the window restores the grid as drawn here. The
    script needs the figure's height and which annotations are the cells' titles, stored here with the grid.
    """
    if mode not in GRID_MODES:
        raise ValueError(f"grid mode must be one of {GRID_MODES}, not {mode!r}")
    if not 0 < n <= rows * cols:
        raise ValueError(f"a {rows} x {cols} grid has no room for {n} images")
    lay = fig.layout
    if not lay.height:
        raise ValueError("set the figure's height before marking it as a grid")

    def domain(xy: str, i: int) -> tuple:
        ax = lay[f"{xy}axis{i + 1 if i else ''}"]
        return tuple(ax.domain) if ax.domain else (0.0, 1.0)

    titles = []                     # make_subplots' titles: annotations at the top centre of their cell
    for j, a in enumerate(lay.annotations):
        for i in range(rows * cols):
            x, y = domain("x", i), domain("y", i)
            if a.x is not None and a.y is not None and abs(a.x - (x[0] + x[1]) / 2) < 1e-6 and abs(a.y - y[1]) < 1e-6:
                titles.append([j, i])
                break
    meta = lay.meta if isinstance(lay.meta, dict) else {}
    fig.update_layout(meta={**meta, GRID_META: {"n": int(n), "rows": int(rows), "cols": int(cols), "mode": mode,
                                                "hs": float(hs), "vs": float(vs), "height": int(lay.height),
                                                "titles": titles}})
    return fig


def image_grid(images: Sequence[np.ndarray], titles: Sequence[str], cols: int = 4, diverging: bool = True,
               title: str = "", height_per_row: int = 190, reflow: str = "flow") -> go.Figure:
    """Small heatmaps side by side (e.g. eigenvectors reshaped to 8x8 images). ``reflow``: how the grid may be laid
    out again on a narrow screen (see ``mark_grid``)."""
    n = len(images)
    rows = max(1, int(np.ceil(n / cols)))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles), horizontal_spacing=0.03,
                        vertical_spacing=0.12 if rows > 1 else 0.05)
    for i, img in enumerate(images):
        img = np.asarray(img)
        m = float(np.max(np.abs(img))) or 1.0
        kw = dict(zmid=0, zmin=-m, zmax=m, colorscale=DIVERGING) if diverging else dict(colorscale="Greys")
        fig.add_trace(go.Heatmap(z=img, showscale=False, **kw), row=i // cols + 1, col=i % cols + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    fig.update_annotations(font_size=11)     # the subplot titles: a grid's cells are narrow
    themed(fig, title, height_per_row * rows + 40)
    if n > 1:
        mark_grid(fig, n, rows, cols, reflow, hs=0.03, vs=0.12 if rows > 1 else 0.05)
    return fig


def scatter(x, y, color=None, title: str = "", xlabel: str = "", ylabel: str = "", height: int = 360,
            text=None, size: int = 7, colorscale: str | None = None, name: str = "") -> go.Figure:
    marker = dict(size=size)
    if color is not None:
        marker.update(color=color, colorscale=colorscale or SEQUENTIAL, showscale=colorscale is not None)
    fig = go.Figure(go.Scatter(x=x, y=y, mode="markers", marker=marker, text=text, name=name))
    fig.update_xaxes(title=xlabel)
    fig.update_yaxes(title=ylabel)
    return themed(fig, title, height)


# Top-margin layout when a figure has both a title (or subplot titles) and the template's legend row above the
# plot: both start at the left edge, so without this the legend is drawn over the title.
TITLE_BAND = 34        # px from the top of the figure to the first legend row (the title sits in it)
LEGEND_ROW = 22        # px per legend row (font 13)
LEGEND_WIDTH = 560     # px a legend row is assumed to have: about a half-width column of the wide layout
SUBPLOT_TITLE_BAND = 22


# trace types that plotly leaves out of the legend unless their showlegend is set to True
NO_LEGEND_TYPES = frozenset({"heatmap", "contour", "histogram2d", "histogram2dcontour", "image", "surface", "mesh3d",
                             "cone", "streamtube", "volume", "isosurface", "table", "parcoords", "parcats", "sankey",
                             "indicator"})


def _in_legend(t) -> bool:
    if t.visible is False:
        return False
    return t.showlegend is True if t.type in NO_LEGEND_TYPES else t.showlegend is not False


def legend_on_top(fig: go.Figure) -> bool:
    """Whether plotly will draw the template's horizontal legend above the plot area."""
    lay = fig.layout
    if lay.showlegend is False:
        return False
    leg = lay.legend
    if leg.orientation not in (None, "h") or (leg.y is not None and leg.y < 1) or leg.yref == "container":
        return False
    entries = any(_in_legend(t) for t in fig.data)
    if lay.showlegend:
        return entries
    # plotly's default: a legend once two traces are visible, counting those hidden from it with showlegend=False
    # but not heatmaps and the like, which are out of the legend by default
    return entries and sum(t.visible is not False and (t.type not in NO_LEGEND_TYPES or t.showlegend is True)
                           for t in fig.data) >= 2


def legend_rows(fig: go.Figure, width: float = LEGEND_WIDTH) -> int:
    """Rows a horizontal legend wraps into at ``width`` px (7.5 px per character, 45 px symbol and gap)."""
    rows, used = 1, 0.0
    for t in fig.data:
        if not _in_legend(t):
            continue
        w = 45 + 7.5 * len(str(t.name or "trace 0"))
        if used and used + w > width:
            rows, used = rows + 1, 0.0
        used += w
    return rows


def has_subplot_titles(fig: go.Figure) -> bool:
    """Whether the figure has annotations sitting on top of the plot area, as make_subplots' titles do."""
    return any(a.yref == "paper" and a.y is not None and a.y >= 0.99 and a.yanchor == "bottom"
               for a in fig.layout.annotations)


def stack_title_and_legend(fig: go.Figure) -> go.Figure:
    """Title at the very top, legend rows under it, subplot titles under those, then the plot (in place).

    Only figures with two of the three (title, top legend, subplot titles) change. ``show`` detaches the title
    first (``detach_title``), so on the pages only a legend over subplot titles is stacked here."""
    lay = fig.layout
    has_title = bool(lay.title and lay.title.text)
    sub_titles = has_subplot_titles(fig)
    legend = legend_on_top(fig)
    if has_title + sub_titles + legend < 2:
        return fig
    rows = legend_rows(fig) if legend else 0
    head = TITLE_BAND if has_title else 8
    top = head + LEGEND_ROW * rows + (SUBPLOT_TITLE_BAND if sub_titles else 0) + 8
    height = lay.height or 450
    upd = dict(margin=dict(t=max(top, lay.margin.t or 0)))
    if legend:
        upd["legend"] = dict(yref="container", y=1 - head / height, yanchor="top")
    if has_title:
        upd["title"] = dict(yref="container", y=1, yanchor="top", pad=dict(t=8))
    fig.update_layout(**upd)
    return fig


def readable_bar_text(fig: go.Figure, minsize: int = 10) -> go.Figure:
    """Bar labels that would have to shrink below ``minsize`` px to fit their bar are hidden (hover still gives the
    value) instead of shrinking into an unreadable row of digits, as grouped bars in a narrow column do (in place)."""
    if fig.layout.uniformtext.mode is None and any(t.type == "bar" and t.text is not None for t in fig.data):
        fig.update_layout(uniformtext=dict(minsize=minsize, mode="hide"))
    return fig


def tidy_log_ticks(fig: go.Figure) -> go.Figure:
    """Full-size ticks at 1-2-3-5 (or 1-2-5) steps on log axes that span at most ~2.5 decades (in place).

    Over a short log range plotly labels every digit in small print, with a stray one past each end ("9 1 2 3 4 ...
    9 10" for data from 1 to 12), which reads as a linear axis gone wrong. Axes the page gave ticks, an exponent
    format or a range of its own are left alone, as are longer ranges (plotly's decade labels are clear there) and
    values outside 1e-3 ... 1e5 (whose plain labels would get long)."""
    lay = fig.layout
    for name in [k for k in lay if k.startswith(("xaxis", "yaxis"))]:
        ax = lay[name]
        if ax.type != "log" or ax.tickvals is not None or ax.dtick is not None or ax.range is not None \
                or ax.exponentformat not in (None, "B"):
            continue
        letter, ref = name[0], name[0] + name[5:]          # xaxis2 -> "x2"
        vals = []
        for t in fig.data:
            if (getattr(t, letter + "axis", None) or letter) != ref:
                continue
            v = getattr(t, letter, None)
            if v is None:
                continue
            try:
                a = np.asarray(v, dtype=float).ravel()
            except (TypeError, ValueError):
                continue
            vals.append(a[np.isfinite(a) & (a > 0)])
        a = np.concatenate(vals) if vals else np.empty(0)
        if a.size < 2:
            continue
        lo, hi = float(a.min()), float(a.max())
        decades = np.log10(hi / lo)
        if not (0 < decades <= 2.6) or lo < 1e-3 or hi > 1e5:
            continue
        mant = (1, 2, 3, 5) if decades <= 1.3 else (1, 2, 5)
        ticks = [m * 10.0 ** e for e in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
                 for m in mant]
        ticks = [v for v in ticks if lo / 1.15 <= v <= hi * 1.15]
        if len(ticks) >= 2:
            ax.update(tickvals=ticks, ticktext=[f"{v:g}" for v in ticks])
    return fig


# A short toolbar: save as PNG, box zoom, pan, reset axes, and Streamlit's full-screen button. Zoom in / out and
# autoscale repeat what the box zoom and a double click do; box and lasso select have no use on these pages. On
# devices without hover the toolbar is always visible (app.py gives it a band above the chart), and a long one wraps
# to a second row over a narrow chart.
PLOTLY_CONFIG = {"displaylogo": False,
                 "modeBarButtonsToRemove": ["zoomIn2d", "zoomOut2d", "autoScale2d", "select2d", "lasso2d"]}


TITLE_META = "explorer_title"     # where detach_title keeps a title it took out of a figure (fig.layout.meta)
HTML_TITLE_TOP = 24               # px of top margin left for the toolbar, when a detached title frees the band


def detach_title(fig: go.Figure) -> str | None:
    """Take the figure's title out of it and return it, for the page to write above the chart as HTML (in place).

    Plotly cannot wrap a title: in a half-width column of a 1024 px laptop window (about 260 px) or on a phone, a
    long title ran past the chart's right edge and was cut off (86 titles at 1024 px). HTML text wraps to any width.
    A figure shown twice gives the same title again (it is kept in ``layout.meta``). The top margin the title band
    held shrinks when the page did not set one; a legend above the plot still gets its rows (plotly's legend
    pushes the margin out by itself, ``stack_title_and_legend`` makes room for subplot titles)."""
    lay = fig.layout
    meta = lay.meta if isinstance(lay.meta, dict) else {}
    title = (lay.title.text if lay.title else None) or meta.get(TITLE_META)
    if not title:
        return None
    if lay.title.text:
        upd: dict = dict(title_text=None, meta={**meta, TITLE_META: title})
        if lay.margin.t is None:
            upd["margin_t"] = HTML_TITLE_TOP + (SUBPLOT_TITLE_BAND if has_subplot_titles(fig) else 0)
        fig.update_layout(**upd)
    return title


def _plain(text) -> str:
    """Plotly's title markup as plain text: tags dropped (<br> as a space), entities decoded, spaces collapsed."""
    text = re.sub(r"<br\s*/?>", " ", str(text or ""), flags=re.I)
    return " ".join(html.unescape(re.sub(r"<[^>]*>", "", text)).split())


def chart_alt(fig: go.Figure, title: str | None) -> str | None:
    """A short name for screen readers: the chart's title as plain text; for an untitled chart, what it plots
    (its first y axis title against its first x axis title, or its subplot titles); None when it has none of these."""
    if _plain(title):
        return _plain(title)
    lay = fig.layout
    x, y = _plain(lay.xaxis.title.text), _plain(lay.yaxis.title.text)
    if x and y:
        return f"{y} against {x}"
    panels = [_plain(a.text) for a in lay.annotations
              if a.yref == "paper" and a.yanchor == "bottom" and _plain(a.text)] if has_subplot_titles(fig) else []
    if panels:
        return "Panels: " + ", ".join(panels[:6]) + (", …" if len(panels) > 6 else "")
    return x or y or None


def show(fig: go.Figure, key: str | None = None) -> None:
    title = detach_title(fig)
    if title:
        # plotly's title markup (<sup>, <br>, <i>) is HTML too; st.html does not run it through markdown, whose
        # "_", "*" and "$" would turn parts of a title like "Q_θ(s, π_K(s))" into italics or math
        st.html(f'<div class="explorer-chart-title">{title}</div>')
    fig = tidy_log_ticks(readable_bar_text(stack_title_and_legend(fig)))
    # alt: the chart's accessible name (st.plotly_chart has it from Streamlit 1.65, pyproject.toml's lower bound)
    st.plotly_chart(fig, width="stretch", key=key, config=PLOTLY_CONFIG, alt=chart_alt(fig, title))
