"""Charts a learner can read: the lab's renderer (``render.js``) in a real browser.

Figure descriptions with extreme log ranges are drawn at 1280 and 390 px and their tick labels
read back from the SVG (each label's bounding box): at least two on every log axis, none
overlapping another. A panel with no points yet shows no empty axes, and a line of one point
shows that point. A streamed widget's chart never covers the table under it, while it streams,
when the window narrows mid-stream, and after.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import pytest
from lab_traces import ALL_SETTLED, settle

from normlab import figures as fig

pytestmark = pytest.mark.browser

DRAW = """async (figures) => {
  let box = document.querySelector('#nl-test-charts');
  if (!box) {
    box = document.createElement('div');
    box.id = 'nl-test-charts';
    document.querySelector('main').prepend(box);
  }
  await window.normlab.render.draw(box, figures);
}"""
"""JS: draw ``figures`` into a box of the page's own (the renderer as a widget uses it)."""

LABELS = """() => [...document.querySelectorAll('#nl-test-charts .nl-figure-plot')].map((gd) => {
  const svg = gd.querySelector('svg.main-svg').getBoundingClientRect();
  const axes = {};
  for (const t of gd.querySelectorAll('g.xaxislayer-above text, g.yaxislayer-above text')) {
    const r = t.getBoundingClientRect();
    const inside = r.left >= svg.left - 1 && r.right <= svg.right + 1
      && r.top >= svg.top - 1 && r.bottom <= svg.bottom + 1;
    if (!t.textContent.trim() || r.width === 0 || !inside) continue;
    const axis = t.parentNode.getAttribute('class');
    (axes[axis] ??= []).push({ text: t.textContent, box: [r.left, r.top, r.right, r.bottom] });
  }
  return axes;
})"""
"""JS: per figure drawn in the test's box, its visible tick labels by axis (``ytick``,
``x2tick``, ...), each with its text and its bounding box on the page."""


def _panel(
    lo: float, hi: float, log: Literal["x", "y"] = "y", line: float | None = None
) -> fig.Panel:
    """20 points from ``lo`` to ``hi`` (evenly in log) along the ``log`` axis, the steps along
    the other; a reference line at ``line``."""
    n = 20
    a, b = math.log10(lo), math.log10(hi)
    spread = [10 ** (a + (b - a) * i / (n - 1)) for i in range(n)]
    steps = list(range(n))
    x, y = (spread, steps) if log == "x" else (steps, spread)
    return fig.Panel(
        fig.Axis("value", scale="log" if log == "x" else "linear"),
        fig.Axis("value", scale="log" if log == "y" else "linear"),
        [fig.Series("measured", x, y, kind="line+markers")],
        lines=[fig.Line(line, axis=log)] if line is not None else [],
    )


EXTREMES = [
    # all at the floor, a reference line at 1: twelve decades (init-train with zeros)
    fig.Figure("floor", [_panel(1e-12, 1e-12, line=1.0)], height=2.6),
    fig.Figure("twelve decades", [_panel(1e-12, 1.0)], height=2.6),
    fig.Figure("six hundred decades", [_panel(1e-300, 1e300)], height=2.6),
    fig.Figure("narrow", [_panel(0.31, 0.35)], height=2.6),  # a loss that barely moves
    fig.Figure("one value", [_panel(0.5, 0.5)], height=2.6),
    fig.Figure("under a decade", [_panel(0.2, 0.9)], height=2.6),
    fig.Figure("log x", [_panel(1e-4, 3.0, log="x"), _panel(0.1, 0.3, log="x")], height=2.6),
]


def _overlap(a: list[float], b: list[float]) -> bool:
    """Whether two boxes ``[left, top, right, bottom]`` share more than their edges."""
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def _check_labels(page: Any, width: int) -> None:
    drawn = page.evaluate(LABELS)
    assert len(drawn) == len(EXTREMES)
    for figure, axes in zip(EXTREMES, drawn, strict=True):
        for i, panel in enumerate(figure.panels):
            which = "x" if panel.x.scale == "log" else "y"
            key = f"{which}{i + 1 if i else ''}tick"
            labels = axes.get(key, [])
            texts = [label["text"] for label in labels]
            where = f"{figure.title!r} at {width} px, {key} {texts}"
            assert len(labels) >= 2, f"fewer than two labels on the log axis: {where}"
            for j, a in enumerate(labels):
                for b in labels[j + 1 :]:
                    assert not _overlap(a["box"], b["box"]), (
                        f"{a['text']!r} overlaps {b['text']!r}: {where}"
                    )


ZOOM = """([i, range]) => {
  const gd = document.querySelectorAll('#nl-test-charts .nl-figure-plot')[i];
  Plotly.relayout(gd, { 'yaxis.range': range.map(Math.log10) });
}"""
"""JS: zoom figure ``i``'s y axis to ``range``, as a learner's drag does."""

ZOOMED = """([i, range]) => {
  const gd = document.querySelectorAll('#nl-test-charts .nl-figure-plot')[i];
  const ticks = gd._fullLayout.yaxis.tickvals || [];
  return ticks.length >= 2 && ticks.every((t) => t >= range[0] && t <= range[1]);
}"""


def test_log_axes_keep_readable_labels_at_any_range(page: Any, server: str) -> None:
    """At 1280 and 390 px, and after zooming into a sliver of twelve decades."""
    page.goto(f"{server}/experiments/linear-scale", wait_until="load")
    page.wait_for_function(ALL_SETTLED)
    described = [f.to_dict() for f in EXTREMES]
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.evaluate(DRAW, described)
        _check_labels(page, width)
    twelve = [f.title for f in EXTREMES].index("twelve decades")
    page.evaluate(ZOOM, [twelve, [0.3, 0.4]])
    page.wait_for_function(ZOOMED, arg=[twelve, [0.3, 0.4]], timeout=20_000)
    _check_labels(page, 390)


WAITING = """() => {
  const gd = document.querySelector('#nl-test-charts .nl-figure-plot');
  const texts = (sel) =>
    [...gd.querySelectorAll(sel)].map((t) => t.textContent).filter((t) => t.trim());
  return {
    empty: texts('g.xtick text, g.ytick text'),
    lone: texts('g.x2tick text, g.y2tick text'),
    notes: texts('g.annotation text'),
    points: gd.querySelectorAll('.scatterlayer .trace path.point').length,
  };
}"""


def test_a_panel_without_points_shows_no_empty_axes(page: Any, server: str) -> None:
    """Before a run's first points a panel says it waits (no axes around nothing); a line of
    one point (a run's first step, one loss still undefined) shows that point."""
    page.goto(f"{server}/experiments/linear-scale", wait_until="load")
    page.wait_for_function(ALL_SETTLED)
    log_axes = (fig.Axis("steps taken"), fig.Axis("loss (log)", scale="log"))
    empty = fig.Panel(*log_axes, [fig.Series("train", [], [])], title="no step yet")
    lone = fig.Panel(
        *log_axes,
        [fig.Series("train", [0], [math.nan]), fig.Series("test", [0], [0.7594])],
        title="step 0",
    )
    page.evaluate(DRAW, [fig.Figure("", [empty, lone], columns=2, height=2.6).to_dict()])
    drawn = page.evaluate(WAITING)
    assert drawn["empty"] == [], f"a panel without points drew axes: {drawn['empty']}"
    assert any("waiting" in t for t in drawn["notes"]), drawn["notes"]
    assert drawn["points"] == 1, "the lone loss of step 0 is not drawn"
    assert len(drawn["lone"]) >= 2  # the panel with a point has its axes


WATCH = """() => {
  window.nlOverlaps = [];
  const look = () => {
    for (const w of document.querySelectorAll('.nl-widget')) {
      const table = w.querySelector('.nl-table');
      const shown = table && table.textContent.trim();
      const under = shown ? table.getBoundingClientRect().top : Infinity;
      for (const f of w.querySelectorAll('.nl-figure')) {
        const svg = f.querySelector('svg.main-svg');
        if (!svg) continue;
        const chart = svg.getBoundingClientRect();
        const box = f.getBoundingClientRect();
        if (chart.bottom > box.bottom + 1 || chart.bottom > under + 1) {
          window.nlOverlaps.push({ state: w.dataset.state, width: innerWidth,
            chart: chart.bottom, box: box.bottom, table: under });
        }
      }
    }
    if (!window.nlStopWatching) requestAnimationFrame(look);
  };
  look();
}"""
"""JS: on every animation frame, note a chart whose drawing reaches below its own box or into
the widget's table (while the table shows numbers)."""

FITS = """() => [...document.querySelectorAll('.nl-widget .nl-figure-plot')].every((gd) =>
  gd._fullLayout && Math.abs(gd._fullLayout.width - gd.clientWidth) < 1)"""

NAME = "init-train"  # streams a frame per step; its widget has a table under its chart


def test_a_chart_never_covers_its_table(page: Any, server: str) -> None:
    """While a run streams, when the window narrows from 1280 to 390 px mid-stream, and
    after: every chart's drawing stays inside its box, above the table."""
    page.goto(f"{server}/experiments/{NAME}?{NAME}.steps=60", wait_until="load")
    settle(page, NAME)
    page.evaluate(WATCH)
    slider = page.locator(f'.nl-widget[data-widget="{NAME}"] input[data-param="lr"]')
    slider.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        f"""() => {{ const w = document.querySelector('.nl-widget[data-widget="{NAME}"]');
        return w.dataset.state === 'loading' && w.nlFrames >= 1; }}"""
    )
    page.set_viewport_size({"width": 390, "height": 900})
    settle(page, NAME)
    page.wait_for_function(FITS)  # redrawn at the new width
    page.evaluate("() => { window.nlStopWatching = true; }")
    overlaps = page.evaluate("window.nlOverlaps")
    assert not overlaps, f"a chart covered its table {len(overlaps)} times: {overlaps[:3]}"
    widget = page.locator(f'.nl-widget[data-widget="{NAME}"]')
    chart = widget.locator(".nl-plot").bounding_box()
    table = widget.locator(".nl-table").bounding_box()
    assert chart is not None and table is not None
    assert chart["y"] + chart["height"] <= table["y"] + 1
