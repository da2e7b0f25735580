"""Figures described as data: what a result wants drawn, written once, drawn by any renderer.

A :class:`Figure` is a grid of :class:`Panel` s; a panel has two :class:`Axis` es, the
:class:`Series` drawn on them, reference lines and shaded bands. Experiments build these from their
results; ``normlab.plots`` (matplotlib) and the lab's ``render.js`` (plotly) draw any of them and
know no experiment. Every value a renderer needs is here, already in drawable form: a loss clipped
at a ceiling or a variance raised to a log axis's floor is clipped or raised by the experiment
that describes it, so no constant is copied into a renderer.

Values are plain floats; ``None`` is a gap (a non-finite value, as JSON has no ``nan``). A
:class:`Table` is the other half of a view: rows of formatted cells, what a terminal prints.

>>> fig = Figure("Loss", [Panel(Axis("step"), Axis("loss", scale="log"),
...                             [Series("without BN", [0, 1, 2], [0.7, 0.5, None])])])
>>> fig.to_dict()["panels"][0]["series"][0]["y"]
[0.7, 0.5, None]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Scale = Literal["linear", "log"]
Kind = Literal["line", "markers", "line+markers", "bars", "histogram", "heatmap"]
Dash = Literal["solid", "dash", "dot"]
Marker = Literal["circle", "square", "triangle", "diamond", "x"]

PALETTE: tuple[str, ...] = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""matplotlib's ``tab10``, the colours of the seeds' plots; a panel gives these, in order, to the
series that have no colour of their own."""

BLUE, ORANGE, GREEN, RED, PURPLE = PALETTE[:5]
GRAY = "#8c96a3"

Number = float | None


@dataclass(frozen=True)
class Axis:
    """One axis: its label, linear or log scale, optional limits and ticks.

    ``ticks`` places ticks at these values; ``tick_labels`` (same length) names them, for a
    categorical axis (layer names, "normal input").
    """

    label: str
    scale: Scale = "linear"
    limits: tuple[float, float] | None = None
    ticks: tuple[float, ...] | None = None
    tick_labels: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Series:
    """One thing drawn on a panel.

    - ``line``, ``markers``, ``line+markers``: points ``(x[i], y[i])``.
    - ``bars``: a bar of height ``y[i]`` at ``x[i]``, ``widths[i]`` wide (default 0.8).
    - ``histogram``: counts ``y`` (``(bins,)``) over bin ``edges`` (``(bins + 1,)``).
    - ``heatmap``: ``z[j][i]`` at ``(x[i], y[j])``, coloured by ``colorscale`` over
      ``zlimits`` (``None``: the range of ``z``), with a colour bar unless ``colorbar`` is off.

    ``color`` is a CSS colour (its panel gives one of :data:`PALETTE` when unset); ``colors``
    colours each point
    or bar on its own; ``hollow`` draws markers unfilled; ``labels`` writes a text by each point
    or on each bar. Bars of several series on one panel stand side by side at each ``x``.
    """

    name: str
    x: Sequence[Number | str]
    y: Sequence[Number]
    kind: Kind = "line"
    color: str | None = None
    colors: Sequence[str] | None = None
    width: float = 1.5
    dash: Dash = "solid"
    marker: Marker = "circle"
    marker_size: float = 5.0
    hollow: bool = False
    opacity: float = 1.0
    legend: bool = True
    labels: Sequence[str] | None = None
    widths: Sequence[float] | None = None
    edges: Sequence[float] | None = None
    z: Sequence[Sequence[Number]] | None = None
    colorscale: str = "viridis"
    zlimits: tuple[float, float] | None = None
    colorbar: bool = True


@dataclass(frozen=True)
class Line:
    """A horizontal (``axis="y"``) or vertical (``axis="x"``) reference line at ``value``."""

    value: float
    axis: Literal["x", "y"] = "y"
    label: str = ""
    color: str = GRAY
    dash: Dash = "dot"


@dataclass(frozen=True)
class Band:
    """A shaded range ``[low, high]`` along ``axis`` (the healthy range of a statistic)."""

    low: float
    high: float
    axis: Literal["x", "y"] = "y"
    label: str = ""
    color: str = GREEN
    opacity: float = 0.12


@dataclass(frozen=True)
class Panel:
    """One set of axes with what is drawn on them; ``note`` is a line of text in its corner."""

    x: Axis
    y: Axis
    series: Sequence[Series]
    title: str = ""
    lines: Sequence[Line] = ()
    bands: Sequence[Band] = ()
    note: str = ""

    def __post_init__(self) -> None:
        """Series without a colour take :data:`PALETTE` in order, here, once for every renderer
        (a heat map is coloured by its colour scale instead)."""
        painted, k = [], 0
        for s in self.series:
            if s.color is None and s.kind != "heatmap":
                s = dataclasses.replace(s, color=PALETTE[k % len(PALETTE)])
                k += 1
            painted.append(s)
        object.__setattr__(self, "series", tuple(painted))


@dataclass(frozen=True)
class Figure:
    """A titled grid of panels, ``columns`` wide (rows follow); ``height`` in inches per row."""

    title: str
    panels: Sequence[Panel]
    columns: int = 0  # 0: every panel side by side
    height: float = 4.2
    shared_x: bool = False

    @property
    def grid(self) -> tuple[int, int]:
        """``(rows, columns)`` of the panel grid."""
        cols = self.columns or len(self.panels)
        return math.ceil(len(self.panels) / cols), cols

    def to_dict(self) -> dict[str, Any]:
        plain: dict[str, Any] = _plain(self)
        return plain


@dataclass(frozen=True)
class Table:
    """Rows of already formatted cells: what a terminal (or a page) shows of a result."""

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    notes: tuple[str, ...] = ()

    @classmethod
    def from_dicts(cls, tables: Sequence[Mapping[str, Any]]) -> list[Table]:
        """Tables from the dicts an experiment's code returns (the keys of :meth:`to_dict`)."""
        return [
            cls(t["title"], tuple(t["columns"]), [tuple(r) for r in t["rows"]], tuple(t["notes"]))
            for t in tables
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": list(self.columns),
            "rows": [list(row) for row in self.rows],
            "notes": list(self.notes),
        }


def _plain(value: Any) -> Any:
    """A figure as JSON-ready data: dataclasses to dicts, tuples to lists, non-finite to None.

    Numbers are asked about first: a live view sends curves of thousands of them a frame."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, int | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def floored(values: Sequence[float | None], floor: float) -> list[float | None]:
    """``values`` raised to at least ``floor``, so that a 0 still shows on a log axis.

    ``None`` and ``nan`` stay gaps; ``inf`` stays (a renderer leaves it out).
    """
    out: list[float | None] = []
    for v in values:
        out.append(None if v is None or math.isnan(v) else max(v, floor))
    return out


def clipped(values: Sequence[float | None], ceiling: float) -> list[float | None]:
    """``values`` cut at ``ceiling``, a diverged value (``inf``, ``nan``) drawn on it, as the
    seed's ``np.clip(losses, 0, 5)`` draws a blown-up loss."""
    out: list[float | None] = []
    for v in values:
        out.append(ceiling if v is None or not math.isfinite(v) else min(max(v, 0.0), ceiling))
    return out


def steps(n: int, start: int = 0) -> list[float | None]:
    """The x values ``start, start + 1, ...`` of an ``n``-point curve."""
    return [float(i) for i in range(start, start + n)]
