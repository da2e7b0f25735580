"""One matplotlib renderer of figure descriptions (:mod:`normlab.figures`).

A result describes its figures as data; :func:`draw` turns any such description into a
matplotlib figure and :func:`save` writes a result's figures to PNG or SVG. Nothing here knows
an experiment or measures anything: every value drawn, clipped or floored is the description's.
Figures are built with the object-oriented API (``Figure`` plus an Agg canvas, never
``pyplot``), so drawing is safe from any thread and never opens a window.

The drawing itself, :func:`draw_into` and the helpers it calls, reads the description as plain
data (``Figure.to_dict()``, the JSON the lab sends) and imports nothing of normlab: a downloaded
notebook carries that same code (:mod:`normlab.notebook`) and draws its figure without normlab.

The rules a description can rely on, the same in the lab's plotly renderer:

- ``None`` (and ``nan``, ``inf``) is a gap: the point or bar is not drawn.
- string ``x`` values are categories, placed at 0, 1, 2, ... in order of first appearance on
  the panel; an axis's ``ticks`` on such an axis are those positions.
- the bar series of a panel share each ``x``'s slot (``widths[i]``, default 0.8): with ``n`` of
  them, each bar is ``1/n`` of the slot, side by side in series order.
- a log axis with no positive finite value gets the limits (0.1, 10) instead of a warning; a
  reference line it cannot place is left out; a band's end it cannot place (``-inf``, or at
  most 0 on a log axis) reaches the edge of the data's range.
- every series but a heat map has its ``color``: its panel gave it one of
  :data:`~normlab.figures.PALETTE` if the experiment did not.

>>> from normlab import figures
>>> bars = [figures.Series(n, ["a", "b"], [1.0, 2.0], kind="bars") for n in ("in", "out")]
>>> fig = draw(figures.Figure("Two passes", [figures.Panel(figures.Axis(""),
...                                                        figures.Axis("std"), bars)]))
>>> [round(float(p.get_x() + p.get_width() / 2), 2) for p in fig.axes[0].containers[1]]
[0.2, 1.2]
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Colormap
from matplotlib.figure import Figure as MplFigure
from matplotlib.figure import FigureBase
from matplotlib.ticker import NullLocator

from normlab import figures

FloatArray = npt.NDArray[np.float64]

FORMATS = (".png", ".svg")
"""File suffixes :func:`save` writes."""

_DASH = {"solid": "-", "dash": "--", "dot": ":"}
_MARKER = {"circle": "o", "square": "s", "triangle": "^", "diamond": "D", "x": "x"}
_LINE_KINDS = ("line", "markers", "line+markers")
_BEST_LEGEND_POINTS = 2000  # matplotlib's loc="best" searches the data: slow beyond this
_MAX_CATEGORY_TICKS = 30  # more category names than this crowd an axis: label every k-th


class HasFigures(Protocol):
    """What :func:`save` needs of a result: its figures described as data."""

    def figures(self) -> list[figures.Figure]: ...


def _floats(values: Sequence[Any]) -> FloatArray:
    """Values as floats; ``None`` and non-finite values become ``nan`` (a gap)."""
    a = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    return np.where(np.isfinite(a), a, math.nan)


def _categories(panel: dict[str, Any]) -> dict[str, int]:
    """String x values of the panel, each at its position in order of first appearance."""
    found: dict[str, int] = {}
    for s in panel["series"]:
        for v in s["x"]:
            if isinstance(v, str):
                found.setdefault(v, len(found))
    return found


def _positions(xs: Sequence[float | str | None], categories: dict[str, int]) -> FloatArray:
    return _floats([categories[v] if isinstance(v, str) else v for v in xs])


def _colormap(name: str) -> Colormap:
    """matplotlib's colour map of that name (plotly's spelling, ``Viridis``, accepted too)."""
    for candidate in (name, name.lower()):
        if candidate in colormaps:
            return colormaps[candidate]
    raise ValueError(f"colorscale {name!r} not supported, use one of {sorted(colormaps)}")


def _marker(s: dict[str, Any]) -> str:
    if s["marker"] not in _MARKER:
        raise ValueError(f"marker {s['marker']!r} not supported, use one of {tuple(_MARKER)}")
    return _MARKER[s["marker"]]


def _label(s: dict[str, Any]) -> str:
    return s["name"] if s["legend"] and s["name"] else "_nolegend_"


def _points(ax: Axes, s: dict[str, Any], x: FloatArray, color: str) -> None:
    """A line, markers or both; per-point colours as a scatter over the line."""
    y = _floats(s["y"])
    line = s["kind"] != "markers"
    separate = s["colors"] is not None and s["kind"] != "line"
    marker = _marker(s) if s["kind"] != "line" and not separate else ""
    if line or not separate:
        ax.plot(
            x,
            y,
            linestyle=_DASH[s["dash"]] if line else "none",
            marker=marker,
            color=color,
            linewidth=s["width"],
            markersize=s["marker_size"],
            markerfacecolor="none" if s["hollow"] else color,
            markeredgecolor=color,
            alpha=s["opacity"],
            label=_label(s),
        )
    if separate:
        colors = list(s["colors"] or ())
        ax.scatter(
            x,
            y,
            s=s["marker_size"] ** 2,
            marker=_marker(s),
            facecolors="none" if s["hollow"] else colors,
            edgecolors=colors,
            alpha=s["opacity"],
            label="_nolegend_" if line else _label(s),
            zorder=3,
        )
    for xi, yi, text in zip(x, y, s["labels"] or (), strict=False):
        if np.isfinite(xi) and np.isfinite(yi):
            ax.annotate(text, (xi, yi), xytext=(0, 5), textcoords="offset points", fontsize=7)


def _bars(ax: Axes, s: dict[str, Any], x: FloatArray, color: str, k: int, n: int) -> None:
    """Series ``k`` of the panel's ``n`` bar series: its share of each x's slot."""
    slot = np.array(s["widths"] if s["widths"] is not None else [0.8] * len(x), dtype=np.float64)
    width = slot / n
    fill = list(s["colors"]) if s["colors"] is not None else color
    bars = ax.bar(
        x + (k - (n - 1) / 2) * width,
        _floats(s["y"]),
        width,
        color="none" if s["hollow"] else fill,
        edgecolor=fill if s["hollow"] else None,
        alpha=s["opacity"],
        label=_label(s),
    )
    if s["labels"] is not None:
        ax.bar_label(bars, labels=list(s["labels"]), fontsize=8, padding=2)
        ax.margins(y=0.12)  # room for the labels above the tallest bar


def _histogram(ax: Axes, s: dict[str, Any], color: str) -> None:
    edges = _floats(s["edges"] or ())
    if edges.size < 2 or not np.all(np.isfinite(edges)):
        return  # nothing to bin (a blown-up run): the description's note says why
    counts = _floats(s["y"])
    ax.stairs(counts, edges, fill=True, color=color, alpha=s["opacity"], label=_label(s))


def _heatmap(target: FigureBase, ax: Axes, s: dict[str, Any], x: FloatArray) -> None:
    """Cells centred on ``(x[i], y[j])``; a row or column without a finite place is left out."""
    y = _floats(s["y"])
    z = np.array([_floats(row) for row in s["z"] or ()], dtype=np.float64)  # (len(y), len(x))
    cols, rows = np.isfinite(x), np.isfinite(y)
    if z.size == 0 or not cols.any() or not rows.any():
        return
    cmap = _colormap(s["colorscale"])
    z = z[rows][:, cols]
    vmin, vmax = s["zlimits"] if s["zlimits"] is not None else (None, None)
    mesh = ax.pcolormesh(
        x[cols], y[rows], z, shading="nearest", cmap=cmap, alpha=s["opacity"], vmin=vmin, vmax=vmax
    )
    if s["colorbar"]:
        target.colorbar(mesh, ax=ax, label=s["name"])
    ax.grid(False)


def _series(target: FigureBase, ax: Axes, panel: dict[str, Any], cats: dict[str, int]) -> None:
    """Every series of the panel, in order (the panel has coloured every one but a heat map)."""
    n_bars = sum(s["kind"] == "bars" for s in panel["series"])
    bars = 0
    for s in panel["series"]:
        color = s["color"] or "black"
        x = _positions(s["x"], cats)
        if s["kind"] in _LINE_KINDS:
            _points(ax, s, x, color)
        elif s["kind"] == "bars":
            _bars(ax, s, x, color, bars, n_bars)
            bars += 1
        elif s["kind"] == "histogram":
            _histogram(ax, s, color)
        elif s["kind"] == "heatmap":
            _heatmap(target, ax, s, x)
        else:
            valid = (*_LINE_KINDS, "bars", "histogram", "heatmap")
            raise ValueError(f"series kind {s['kind']!r} not supported, use one of {valid}")


def _drawn(s: dict[str, Any], cats: dict[str, int]) -> tuple[FloatArray, FloatArray]:
    """The x and the y values the series really places (what a log axis must find positive)."""
    x, y = _positions(s["x"], cats), _floats(s["y"])
    if s["kind"] == "histogram":
        edges = _floats(s["edges"] or ())
        return (edges, y) if edges.size > 1 and np.all(np.isfinite(edges)) else (x[:0], y[:0])
    if s["kind"] == "heatmap":
        return (x, y) if s["z"] else (x[:0], y[:0])
    n = min(x.size, y.size)
    both = np.isfinite(x[:n]) & np.isfinite(y[:n])
    return x[:n][both], y[:n][both]


def _placeable(value: float | None, log: bool) -> bool:
    return value is not None and math.isfinite(value) and (value > 0 or not log)


def _scale(ax: Axes, which: str, spec: dict[str, Any], values: FloatArray) -> None:
    """Limits first, then the scale: a log axis with nothing positive gets fixed limits."""
    set_lim = ax.set_xlim if which == "x" else ax.set_ylim
    log = spec["scale"] == "log"
    if spec["limits"] is not None:
        set_lim(*spec["limits"])
    elif log and not bool(np.any(values > 0)):  # nan compares False
        set_lim(0.1, 10.0)
    if log:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")


def _lines(ax: Axes, panel: dict[str, Any]) -> None:
    for ref in panel["lines"]:
        log = (panel["x"] if ref["axis"] == "x" else panel["y"])["scale"] == "log"
        if not _placeable(ref["value"], log):
            continue
        draw = ax.axvline if ref["axis"] == "x" else ax.axhline
        draw(
            ref["value"],
            color=ref["color"],
            linestyle=_DASH[ref["dash"]],
            linewidth=1.0,
            label=ref["label"] or "_nolegend_",
        )


def _bands(ax: Axes, panel: dict[str, Any]) -> None:
    """Shaded ranges; an end the axis cannot place reaches the edge of the data's range."""
    for band in panel["bands"]:
        vertical = band["axis"] == "x"
        log = (panel["x"] if vertical else panel["y"])["scale"] == "log"
        low_lim, high_lim = ax.get_xlim() if vertical else ax.get_ylim()
        low = band["low"] if _placeable(band["low"], log) else low_lim
        high = band["high"] if _placeable(band["high"], log) else high_lim
        span = ax.axvspan if vertical else ax.axhspan
        span(
            low,
            high,
            color=band["color"],
            alpha=band["opacity"],
            linewidth=0,
            zorder=0,
            label=band["label"] or "_nolegend_",
        )
        if (low, high) != (band["low"], band["high"]):  # keep the view where the data put it
            (ax.set_xlim if vertical else ax.set_ylim)(min(low_lim, low), max(high_lim, high))


def _ticks(ax: Axes, which: str, spec: dict[str, Any], cats: dict[str, int]) -> None:
    """The description's ticks (plain numbers unless named), else one per category."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    if spec["ticks"] is not None:
        ticks = list(spec["ticks"])
        names = list(spec["tick_labels"] or (f"{t:g}" for t in ticks))
        axis.set_minor_locator(NullLocator())
    elif cats:
        every = math.ceil(len(cats) / _MAX_CATEGORY_TICKS)
        ticks = [float(i) for i in range(0, len(cats), every)]
        names = list(cats)[::every]
    else:
        return
    crowded = which == "x" and sum(len(n) for n in names) > 60
    extra: dict[str, Any] = {"rotation": 45, "ha": "right"} if crowded else {}
    axis.set_ticks(ticks, names, **extra)


def _panel(target: FigureBase, ax: Axes, panel: dict[str, Any]) -> None:
    cats = _categories(panel)
    ax.grid(True, alpha=0.4)
    ax.set_axisbelow(True)
    _series(target, ax, panel, cats)
    _lines(ax, panel)
    placed = [_drawn(s, cats) for s in panel["series"]]
    _scale(ax, "x", panel["x"], np.concatenate([x for x, _ in placed] or [np.zeros(0)]))
    _scale(ax, "y", panel["y"], np.concatenate([y for _, y in placed] or [np.zeros(0)]))
    _bands(ax, panel)
    _ticks(ax, "x", panel["x"], cats)
    _ticks(ax, "y", panel["y"], {})
    ax.set_xlabel(panel["x"]["label"])
    ax.set_ylabel(panel["y"]["label"])
    if panel["title"]:
        ax.set_title(panel["title"], fontsize=10, wrap=True)
    if panel["note"]:
        ax.text(
            0.99,
            0.02,
            panel["note"],
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=7.5,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
        )
    if ax.get_legend_handles_labels()[0]:
        points = sum(len(s["y"]) for s in panel["series"])
        ax.legend(fontsize=8, loc="best" if points <= _BEST_LEGEND_POINTS else "upper right")


def _grid(figure: dict[str, Any]) -> tuple[int, int]:
    """``(rows, columns)`` of the panel grid (``columns`` 0: every panel side by side)."""
    cols = figure["columns"] or len(figure["panels"])
    return math.ceil(len(figure["panels"]) / cols), cols


def size(figure: dict[str, Any]) -> tuple[float, float]:
    """The figure's ``(width, height)`` in inches: 5 per column, its ``height`` per row."""
    rows, cols = _grid(figure)
    return max(6.5, 5.0 * cols), figure["height"] * rows


def draw_into(target: FigureBase, figure: dict[str, Any]) -> None:
    """Draw one figure description, as plain data (``Figure.to_dict()``, the JSON the lab
    sends), into a matplotlib figure (or subfigure)."""
    rows, cols = _grid(figure)
    axes = target.subplots(rows, cols, squeeze=False, sharex=figure["shared_x"]).ravel()
    for i, (ax, panel) in enumerate(zip(axes, figure["panels"], strict=False)):
        _panel(target, ax, panel)
        if figure["shared_x"] and i + cols < len(figure["panels"]):
            ax.set_xlabel("")  # the panel below, on the same x, names it
        elif figure["shared_x"]:
            ax.xaxis.set_tick_params(labelbottom=True)  # nothing below shows the ticks
    for ax in axes[len(figure["panels"]) :]:
        ax.set_axis_off()  # the grid's last row is not full
    if figure["title"]:
        target.suptitle(figure["title"], fontsize=11, wrap=True)


def draw(figure: figures.Figure) -> MplFigure:
    """Draw one figure description (Agg canvas, no window).

    Raises:
        ValueError: a series kind or colour scale that matplotlib does not know.
    """
    return draw_all([figure])


def draw_all(described: Sequence[figures.Figure]) -> MplFigure:
    """Draw several figure descriptions as one matplotlib figure, stacked top to bottom."""
    plain = [f.to_dict() for f in described]
    sizes = [size(f) for f in plain]
    fig = MplFigure(
        figsize=(max((w for w, _ in sizes), default=6.5), sum(h for _, h in sizes) or 4.0),
        layout="constrained",
    )
    FigureCanvasAgg(fig)
    if len(described) == 1:
        draw_into(fig, plain[0])
    elif described:
        subs = fig.subfigures(len(described), 1, squeeze=False, height_ratios=[h for _, h in sizes])
        for sub, f in zip(subs.ravel(), plain, strict=True):
            draw_into(sub, f)
    return fig


def save(result: HasFigures, path: str | os.PathLike[str]) -> Path:
    """Draw ``result.figures()`` (stacked, if several) and write PNG or SVG, by the suffix.

    Returns the path written.

    Raises:
        ValueError: the suffix is not one of :data:`FORMATS`, or the result has no figure.
        FileNotFoundError: the parent directory does not exist (none is created).
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(
            f"file suffix {target.suffix!r} not supported, use one of {', '.join(FORMATS)}"
        )
    if not target.parent.is_dir():
        raise FileNotFoundError(f"directory {str(target.parent)!r} does not exist")
    described = result.figures()
    if not described:
        raise ValueError(f"{type(result).__name__} describes no figure to save")
    metadata = {"Date": None} if suffix == ".svg" else None  # no date in the SVG
    draw_all(described).savefig(target, format=suffix[1:], dpi=110, metadata=metadata)
    return target
