"""What the training view draws of a live run, as figure descriptions (:mod:`normlab.figures`).

A :class:`~normlab.trainview.Session` gives frames (:meth:`~normlab.trainview.Session.frame`):
the losses, the decision boundary on a grid, every layer's statistics with the doctor's labels
and histograms of each hidden block's activations and gradients. A :class:`History` keeps what
the curves need of the frames seen so far, bounded (:data:`MAX_POINTS` points a curve,
:data:`MAX_COLUMNS` frames of histograms), and :func:`live_figure`, :func:`stats_figures` and
:func:`layer_table` describe it, as every experiment describes its result, so that any renderer
(the lab's ``render.js``, :mod:`normlab.plots`) draws it. Nothing here computes a statistic:
every number comes from the frames.

The histograms over time are drawn as fastai's "colourful dimension" (a heat map of
:math:`\\log(1 + \\text{count})` per step, so that a few values still show).

>>> h = History()
>>> h.add({"step": 0, "train_loss": None, "test_loss": 0.7, "layers": [], "hist": {}})
>>> h.add({"step": 1, "train_loss": 0.69, "test_loss": 0.6, "layers": [], "hist": {}})
>>> [p["step"] for p in h.loss], loss_panel(h).series[0].y
([0, 1], [None, 0.69])
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from normlab import doctor
from normlab import figures as fig

MAX_POINTS = 1000
"""Points kept a curve: past it, the older half is thinned to every other point. About one a
pixel of a chart's width, so a long run's curves still show every turn while a frame of a
run 3,000 steps in stays under 100 kB (with 5,000 points a curve it was 190 kB, and the layer
figures sent once a second 1.25 MB rather than 0.66 MB)."""
MAX_COLUMNS = 150
"""Frames kept for the histograms over time (the oldest go first)."""
LIMITS: dict[str, float] = {
    "vanishing": doctor.VANISHING,
    "exploding": doctor.EXPLODING,
    "grad_vanishing": doctor.GRAD_VANISHING,
    "grad_exploding": doctor.GRAD_EXPLODING,
}
"""The doctor's healthy ranges of a layer's scale and of a weight's gradient ratio."""

T = TypeVar("T")


def thin(items: list[T], limit: int) -> list[T]:
    """``items`` with every other entry of its older half dropped once it is longer than
    ``limit`` (the recent half stays whole), so that a curve keeps at most ``limit`` points
    and still reaches back to its start.

    >>> thin(list(range(6)), 5)
    [0, 2, 3, 4, 5]
    """
    if len(items) <= limit:
        return items
    half = len(items) // 2
    return items[:half:2] + items[half:]


class History:
    """What the curves need of the frames seen so far: the losses (``{step, train, test}``),
    each layer's scale and gradient ratio (``{step, scale, ratio}``), the histograms of the last
    :data:`MAX_COLUMNS` frames (``{step, act, grad}``) and the last frame itself."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget every frame (the run went back to step 0)."""
        self.loss: list[dict[str, Any]] = []
        self.layers: list[dict[str, Any]] = []
        self.columns: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None

    def losses(self, losses: Mapping[str, Any]) -> None:
        """The curves up to a replayed step, from :attr:`Session.losses`: the losses of the
        step from ``start + i`` to ``start + i + 1`` are drawn at the steps taken then."""
        start, test = losses["start"], losses["test"]
        self.loss = [
            {"step": start + i + 1, "train": train, "test": test[i]}
            for i, train in enumerate(losses["train"])
        ]
        self.loss = thin(self.loss, MAX_POINTS)

    def add(self, frame: Mapping[str, Any]) -> None:
        """Record one frame; a frame before the last one (a reset went back) starts afresh."""
        if self.last is not None and frame["step"] < self.last["step"]:
            self.clear()
        self.last = dict(frame)
        if not self.loss or self.loss[-1]["step"] != frame["step"]:
            self.loss.append(
                {"step": frame["step"], "train": frame["train_loss"], "test": frame["test_loss"]}
            )
            self.loss = thin(self.loss, MAX_POINTS)
        hist = frame["hist"]
        self.columns.append(
            {"step": frame["step"], "act": hist.get("act"), "grad": hist.get("grad")}
        )
        self.columns = self.columns[-MAX_COLUMNS:]
        layers = frame["layers"]
        self.layers.append(
            {
                "step": frame["step"],
                "scale": [la["scale"] for la in layers],
                "ratio": [la["grad_ratio"] for la in layers],
            }
        )
        self.layers = thin(self.layers, MAX_POINTS)


def _positive(value: float | None) -> float | None:
    """``value`` where a log axis can place it, else a gap."""
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _fixed(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def points_series(data: Mapping[str, Any], part: str) -> fig.Series:
    """The points of one ``part`` (``train``, ``test``: hollow) coloured by their class."""
    p = data[part]
    return fig.Series(
        f"{part} points",
        p["x"],
        p["y"],
        kind="markers",
        color="#000000",
        colors=[fig.RED if c else fig.BLUE for c in p["label"]],
        hollow=part == "test",
        marker_size=4.0,
    )


def boundary_panel(data: Mapping[str, Any], frame: Mapping[str, Any]) -> fig.Panel:
    """The probability of class 1 over the plane at ``frame``'s step, the points on it."""
    b, extent = frame["boundary"], data["extent"]
    heat = fig.Series(
        "P(class 1)", b["x"], b["y"], kind="heatmap", z=b["z"], colorscale="RdBu_r",
        zlimits=(0.0, 1.0), opacity=0.75,
    )  # fmt: skip
    return fig.Panel(
        fig.Axis("x0 (standardized)", limits=tuple(extent["x"])),
        fig.Axis("x1 (standardized)", limits=tuple(extent["y"])),
        [heat, points_series(data, "train"), points_series(data, "test")],
        title=f"decision boundary at step {frame['step']}",
    )


def loss_panel(history: History) -> fig.Panel:
    """The train and test losses over the steps taken, the last accuracies in a note."""
    assert history.last is not None, "a loss panel needs a frame"
    steps = [p["step"] for p in history.loss]
    accuracy = history.last.get("accuracy") or {}
    note = f"accuracy: train {_fixed(accuracy.get('train'))}"
    if _fixed(accuracy.get("test")) != "n/a":
        note += f", test {_fixed(accuracy.get('test'))}"
    return fig.Panel(
        fig.Axis("steps taken"),
        fig.Axis("BCE loss (log)", scale="log"),
        [
            fig.Series(
                "train", steps, [_positive(p["train"]) for p in history.loss], color=fig.BLUE
            ),
            fig.Series(
                "test", steps, [_positive(p["test"]) for p in history.loss], color=fig.ORANGE
            ),
        ],
        title="loss",
        note=note,
    )


def live_figure(history: History, data: Mapping[str, Any]) -> fig.Figure:
    """What is drawn every frame: the boundary with the points, beside the losses."""
    assert history.last is not None, "a live figure needs a frame"
    panels = [boundary_panel(data, history.last), loss_panel(history)]
    return fig.Figure("", panels, columns=2, height=3.6)


def scale_figure(history: History, limits: Mapping[str, float] = LIMITS) -> fig.Figure:
    """Each layer's output/input std and each weight layer's gradient ratio over the frames,
    on the doctor's healthy ranges (``limits``, :data:`LIMITS`)."""
    assert history.last is not None, "a scale figure needs a frame"
    steps = [f["step"] for f in history.layers]
    layers = history.last["layers"]

    def curve(key: str, i: int) -> fig.Series:
        values = [_positive(f[key][i]) for f in history.layers]
        name = f"{layers[i]['name']} {layers[i]['kind']}"
        return fig.Series(name, steps, values, color=fig.PALETTE[i % len(fig.PALETTE)])

    def band(low: str, high: str, label: str) -> list[fig.Band]:
        return [fig.Band(limits[low], limits[high], label=label)]

    weights = [i for i, la in enumerate(layers) if la["kind"] == "Linear"]
    scale = fig.Panel(
        fig.Axis("steps taken"), fig.Axis("scale (log)", scale="log"),
        [curve("scale", i) for i in range(len(layers))],
        title="output std / input std", bands=band("vanishing", "exploding", "healthy scale"),
    )  # fmt: skip
    ratio = fig.Panel(
        fig.Axis("steps taken"), fig.Axis("ratio (log)", scale="log"),
        [curve("ratio", i) for i in weights], title="gradient ratio (weight layers)",
        bands=band("grad_vanishing", "grad_exploding", "healthy ratio"),
    )  # fmt: skip
    title = "Every layer's scale and gradient ratio, with the doctor's healthy ranges"
    return fig.Figure(title, [scale, ratio], columns=2, height=3.0)


def _heat(columns: Sequence[Mapping[str, Any]], kind: str, block: int, bins: int) -> list[Any]:
    """``z[j][i]``: :math:`\\log(1 + \\text{count})` of bin ``j`` in column ``i`` (a gap
    where a column has no such block)."""
    z: list[list[float | None]] = [[] for _ in range(bins)]
    for c in columns:
        counts = c[kind][block] if c[kind] is not None and block < len(c[kind]) else None
        for j in range(bins):
            value = counts[j] if counts is not None and j < len(counts) else 0
            z[j].append(None if counts is None else math.log1p(value))
    return z


def hist_figure(history: History, kind: str, title: str) -> fig.Figure:
    """The histograms of one ``kind`` (``act``, ``grad``) over the frames kept: a heat map per
    hidden block, steps across and bins (their centres) up."""
    assert history.last is not None, "a histogram figure needs a frame"
    hist = history.last["hist"]
    edges = hist["edges"]
    centres = [(lo + hi) / 2 for lo, hi in itertools.pairwise(edges)]
    steps = [c["step"] for c in history.columns]
    panels = [
        fig.Panel(
            fig.Axis("steps taken"),
            fig.Axis(hist["scale"]),
            [
                fig.Series(
                    "log(1 + count)",
                    steps,
                    centres,
                    kind="heatmap",
                    colorbar=False,
                    z=_heat(history.columns, kind, k, len(centres)),
                )
            ],
            title=f"block {k + 1} (module {name})",
        )
        for k, name in enumerate(hist["layers"])
    ]
    return fig.Figure(title, panels, columns=min(len(panels), 4), height=2.2)


def stats_figures(history: History, limits: Mapping[str, float] = LIMITS) -> list[fig.Figure]:
    """What is drawn of the layers: their scales, then the activations' and the gradients'
    histograms over the steps (these cost more to draw than :func:`live_figure`)."""
    return [
        scale_figure(history, limits),
        hist_figure(
            history,
            "act",
            "Activations of each hidden block over steps: histogram of log10 |value|",
        ),
        hist_figure(
            history, "grad", "Gradients at each hidden block over steps: histogram of log10 |value|"
        ),
    ]


def _g3(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3g}"


def layer_table(frame: Mapping[str, Any]) -> fig.Table:
    """Every layer of ``frame`` as a row, the doctor's labels last."""
    rows = [
        (
            la["name"],
            la["kind"],
            "" if la.get("block") is None else str(la["block"]),
            _g3(la["act_std"]),
            _g3(la["grad_std"]),
            _g3(la["grad_ratio"]),
            ", ".join(la["labels"]),
        )
        for la in frame["layers"]
    ]
    return fig.Table(
        f"Every layer at step {frame['step']}",
        ("layer", "kind", "block", "act std", "grad std", "grad ratio", "labels"),
        rows,
        notes=(
            "statistics of the last step's own forward and backward pass "
            "(before the first step: of the initialization)",
        ),
    )
