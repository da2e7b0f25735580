"""normlab.plots: one renderer draws any figure description, and draws exactly its data.

The generic tests build descriptions by hand, one feature each. The acceptance test runs every
registered experiment at its defaults and checks that each series matplotlib received (the
x/y data of its lines, scatters, bars, histograms and heat maps) equals the series of
``result.figures()``, with ``None`` (and ``inf``) as ``nan``: the plot and the lab's renderer
draw from the same description, and plots.py adds nothing of its own.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import itertools
import math
import subprocess
import sys
import threading
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection, QuadMesh
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle, StepPatch

from normlab import figures as fg
from normlab import plots
from normlab.experiments import Result, list_experiments

NAN, INF = math.nan, math.inf
LINE_KINDS = ("line", "markers", "line+markers")


def panel(
    *series: fg.Series, x: fg.Axis | None = None, y: fg.Axis | None = None, **kw: Any
) -> fg.Panel:
    return fg.Panel(x or fg.Axis("x"), y or fg.Axis("y"), list(series), **kw)


def drawn(*panels: fg.Panel, **kw: Any) -> MplFigure:
    """The figure drawn and rendered (a warning anywhere fails the test)."""
    fig = plots.draw(fg.Figure(kw.pop("title", "t"), list(panels), **kw))
    fig.canvas.draw()
    return fig


def one(*series: fg.Series, **kw: Any) -> Axes:
    return drawn(panel(*series, **kw)).axes[0]


def floats(values: Sequence[Any]) -> list[float]:
    """The description's values as matplotlib must receive them: ``None``/``inf`` -> ``nan``."""
    out = []
    for v in values:
        f = NAN if v is None else float(v)
        out.append(f if math.isfinite(f) else NAN)
    return out


def same(got: Any, want: Sequence[Any]) -> None:
    a = np.ma.filled(np.ma.asarray(got, dtype=float), NAN)
    np.testing.assert_array_equal(a, np.array(floats(want), dtype=float))


def legend(ax: Axes) -> list[str]:
    box = ax.get_legend()
    return [t.get_text() for t in box.get_texts()] if box is not None else []


def rendered(fig: MplFigure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=50)
    return buf.getvalue()


# -- series kinds ----------------------------------------------------------------------------------


def test_line_kinds_styles_and_data() -> None:
    x, y = [0, 1, 2, 3], [1.0, None, 3.0, INF]  # None a gap, inf left out
    ax = one(
        fg.Series("a", x, y),
        fg.Series("b", x, y, kind="markers", marker="square", marker_size=7.0),
        fg.Series("c", x, y, kind="line+markers", dash="dash", width=3.0, opacity=0.5),
        fg.Series("d", x, y, dash="dot", marker="diamond"),
    )
    a, b, c, d = ax.lines
    for ln in ax.lines:
        same(ln.get_xdata(), x)
        same(ln.get_ydata(), y)
    assert (a.get_linestyle(), a.get_marker()) == ("-", "")
    assert (b.get_linestyle(), b.get_marker(), b.get_markersize()) == ("None", "s", 7.0)
    assert (c.get_linestyle(), c.get_marker(), c.get_linewidth()) == ("--", "o", 3.0)
    assert c.get_alpha() == 0.5
    assert (d.get_linestyle(), d.get_marker()) == (":", "")  # a line has no markers
    assert legend(ax) == ["a", "b", "c", "d"]


def test_hollow_markers_and_legend_opt_out() -> None:
    ax = one(
        fg.Series("hollow", [0, 1], [1.0, 2.0], kind="markers", hollow=True, color="#ff0000"),
        fg.Series("hidden", [0, 1], [2.0, 3.0], legend=False),
        fg.Series("", [0, 1], [3.0, 4.0]),
    )
    hollow = ax.lines[0]
    assert hollow.get_markerfacecolor() == "none"
    assert to_rgba(hollow.get_markeredgecolor()) == to_rgba("#ff0000")
    assert legend(ax) == ["hollow"]


def test_per_point_colours_and_labels() -> None:
    colors = ["#ff0000", "#00ff00", "#0000ff"]
    ax = one(
        fg.Series("m", [0, 1, 2], [1.0, None, 3.0], kind="markers", colors=colors, hollow=True),
        fg.Series(
            "lm",
            [0, 1, 2],
            [2.0, 2.5, 3.5],
            kind="line+markers",
            colors=colors,
            labels=["p", "q", "r"],
        ),
    )
    (line,) = ax.lines  # "lm"'s line; both series' points are scatters
    assert line.get_marker() == ""
    m, lm = (c for c in ax.collections if isinstance(c, PathCollection))
    same(m.get_offsets()[:, 1], [1.0, None, 3.0])
    assert len(m.get_facecolors()) == 0  # hollow
    np.testing.assert_array_equal(m.get_edgecolors(), [to_rgba(c) for c in colors])
    np.testing.assert_array_equal(lm.get_facecolors(), [to_rgba(c) for c in colors])
    assert [t.get_text() for t in ax.texts] == ["p", "q", "r"]
    assert legend(ax) == ["m", "lm"]


def test_point_labels_skip_gaps() -> None:
    ax = one(fg.Series("s", [0, 1, 2], [1.0, None, INF], kind="markers", labels=["a", "b", "c"]))
    assert [t.get_text() for t in ax.texts] == ["a"]


def test_palette_in_order_per_panel() -> None:
    fig = drawn(
        panel(
            fg.Series("a", [0], [1.0]),
            fg.Series("b", [0], [1.0], color="#123456"),
            fg.Series("c", [0], [1.0]),
        ),
        panel(fg.Series("d", [0], [1.0])),
    )
    first, second = fig.axes
    colours = [to_rgba(ln.get_color()) for ln in first.lines]
    assert colours == [to_rgba(fg.PALETTE[0]), to_rgba("#123456"), to_rgba(fg.PALETTE[1])]
    assert to_rgba(second.lines[0].get_color()) == to_rgba(fg.PALETTE[0])


def centres(bars: BarContainer) -> list[float]:
    return [float(p.get_x() + p.get_width() / 2) for p in bars]


def test_grouped_bars_stand_side_by_side() -> None:
    cats = ["normal input", "10 × input"]
    ax = one(
        fg.Series("in", cats, [1.0, 10.0], kind="bars", labels=["1", "10"]),
        fg.Series("out", cats, [0.7, None], kind="bars", colors=["#ff0000", "#00ff00"]),
        fg.Series("hollow", cats, [0.5, 5.0], kind="bars", hollow=True, color="#0000ff"),
    )
    groups = ax.containers
    assert [len(g) for g in groups] == [2, 2, 2]
    for g, want in zip(groups, ([1.0, 10.0], [0.7, None], [0.5, 5.0]), strict=True):
        same([p.get_height() for p in g], want)
        assert [p.get_width() for p in g] == pytest.approx([0.8 / 3] * 2)
    # side by side, in series order, the group centred on the category
    np.testing.assert_allclose(np.mean([centres(g) for g in groups], axis=0), [0, 1], atol=1e-12)
    assert centres(groups[0])[0] < centres(groups[1])[0] < centres(groups[2])[0]
    assert [to_rgba(p.get_facecolor()) for p in groups[1]] == [
        to_rgba("#ff0000"),
        to_rgba("#00ff00"),
    ]
    hollow = groups[2][0]
    assert hollow.get_facecolor()[3] == 0 and to_rgba(hollow.get_edgecolor()) == to_rgba("#0000ff")
    assert [t.get_text() for t in ax.texts] == ["1", "10"]
    assert [t.get_text() for t in ax.get_xticklabels()] == cats


def test_one_bar_series_takes_its_widths() -> None:
    ax = one(fg.Series("b", [1.0, 3.0], [2.0, 4.0], kind="bars", widths=[0.5, 1.5]))
    (bars,) = ax.containers
    assert [p.get_width() for p in bars] == [0.5, 1.5]
    assert centres(bars) == [1.0, 3.0]


def test_histogram_from_edges_and_counts() -> None:
    ax = one(
        fg.Series("h", [], [1.0, 4.0, None], kind="histogram", edges=[-1.0, 0.0, 1.0, 2.5]),
        fg.Series("blown up", [], [1.0], kind="histogram", edges=[NAN, INF]),
    )
    (patch,) = [p for p in ax.patches if isinstance(p, StepPatch)]  # nothing to bin: not drawn
    values, edges, _ = patch.get_data()
    same(values, [1.0, 4.0, None])
    assert edges.tolist() == [-1.0, 0.0, 1.0, 2.5]
    assert patch.get_fill()


def test_heat_map_with_colour_bar() -> None:
    z = [[1.0, 2.0, 3.0], [4.0, None, 6.0]]  # z[j][i] at (x[i], y[j])
    fig = drawn(
        panel(
            fg.Series(
                "count", ["a", "b", "c"], [0.5, 1.5], kind="heatmap", z=z, colorscale="Magma"
            ),
        )
    )
    ax, bar = fig.axes
    (mesh,) = ax.collections
    assert isinstance(mesh, QuadMesh)
    same(np.ma.filled(mesh.get_array(), NAN).ravel(), [v for row in z for v in row])
    assert mesh.get_cmap().name == "magma"  # plotly's spelling taken
    assert bar.get_ylabel() == "count"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    corners = mesh.get_coordinates()  # (rows + 1, cols + 1, 2): cells centred on x and y
    assert corners[0, :, 0].tolist() == [-0.5, 0.5, 1.5, 2.5]
    assert corners[:, 0, 1].tolist() == [0.0, 1.0, 2.0]


def test_heat_map_over_fixed_limits_without_colour_bar() -> None:
    series = fg.Series("p", [0.0, 1.0], [0.0], kind="heatmap", z=[[0.4, 0.6]], zlimits=(0.0, 1.0))
    fig = drawn(panel(dataclasses.replace(series, colorbar=False)))
    (ax,) = fig.axes  # no colour bar beside it
    (mesh,) = ax.collections
    assert mesh.get_clim() == (0.0, 1.0)  # not the range of z


def test_bad_kind_and_colour_scale_are_named() -> None:
    with pytest.raises(ValueError, match="colorscale 'no-such-map' not supported"):
        one(fg.Series("z", [0], [0], kind="heatmap", z=[[1.0]], colorscale="no-such-map"))
    bad: Any = "pie"
    with pytest.raises(ValueError, match=r"series kind 'pie' not supported.*heatmap"):
        one(fg.Series("p", [0], [1.0], kind=bad))


# -- axes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [[0.0, 0.0], [None, None], [INF, -1.0], [0.0, None, INF, NAN, -INF]],
    ids=["zeros", "none", "inf and negative", "all of them"],
)
@pytest.mark.parametrize("kind", ["line", "markers", "bars"])
def test_log_axis_without_a_positive_value_gets_fixed_limits(values: list[Any], kind: Any) -> None:
    x = list(range(len(values)))
    ax = one(fg.Series("s", x, values, kind=kind), y=fg.Axis("y", scale="log"))
    assert ax.get_yscale() == "log"
    assert ax.get_ylim() == (0.1, 10.0)


def test_log_axes_with_data_and_non_finite_values() -> None:
    ax = one(
        fg.Series("s", [0.1, 0.2, 0.5, 1.0], [0.0, 1e-3, None, INF], kind="line+markers"),
        x=fg.Axis("lr", scale="log", ticks=(0.1, 0.2, 0.5, 1.0)),
        y=fg.Axis("loss", scale="log"),
    )
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    low, high = ax.get_ylim()
    assert 0 < low < 1e-3 < high
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.1", "0.2", "0.5", "1"]
    assert ax.xaxis.get_minorticklocs().size == 0  # only the ticks asked for


def test_limits_ticks_and_tick_labels() -> None:
    ax = one(
        fg.Series("s", [0, 1, 2], [0.5, 1.0, 2.0]),
        x=fg.Axis("layer", limits=(-1.0, 3.0), ticks=(0.0, 2.0), tick_labels=("in", "out")),
        y=fg.Axis("std", limits=(0.0, 5.0), ticks=(0.0, 2.5, 5.0)),
    )
    assert ax.get_xlim() == (-1.0, 3.0) and ax.get_ylim() == (0.0, 5.0)
    assert ax.get_xticks().tolist() == [0.0, 2.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["in", "out"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "2.5", "5"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("layer", "std")


def test_categories_in_order_of_first_appearance() -> None:
    ax = one(
        fg.Series("a", ["b", "c"], [1.0, 2.0], kind="markers"),
        fg.Series("b", ["a", "c", "b"], [3.0, 4.0, 5.0], kind="markers"),
    )
    first, second = ax.lines
    assert first.get_xdata().tolist() == [0.0, 1.0]
    assert second.get_xdata().tolist() == [2.0, 1.0, 0.0]
    assert ax.get_xticks().tolist() == [0.0, 1.0, 2.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b", "c", "a"]


def test_many_categories_are_thinned() -> None:
    names = [f"block{i}.linear" for i in range(90)]
    ax = one(fg.Series("s", names, [1.0] * 90))
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert 0 < len(labels) <= 30 and labels[0] == names[0]
    assert ax.get_xticklabels()[0].get_rotation() == 45  # long names


def test_reference_lines_and_bands() -> None:
    ax = one(
        fg.Series("s", [0, 1, 2], [0.5, 1.0, 2.0]),
        y=fg.Axis("y", scale="log"),
        lines=[
            fg.Line(1.0, label="Var = 1"),
            fg.Line(1.5, axis="x", dash="dash", color="#ff0000"),
            fg.Line(0.0, label="not on a log axis"),
        ],
        bands=[
            fg.Band(-INF, 0.7, label="vanishing"),
            fg.Band(1.5, INF, color="#ff0000", opacity=0.2),
            fg.Band(0.5, 1.0, axis="x"),
        ],
    )
    _, horizontal, vertical = ax.lines  # the line at 0 is left out
    assert list(horizontal.get_ydata()) == [1.0, 1.0] and horizontal.get_linestyle() == ":"
    assert list(vertical.get_xdata()) == [1.5, 1.5] and vertical.get_linestyle() == "--"
    assert legend(ax) == ["s", "Var = 1", "vanishing"]
    low, high = ax.get_ylim()
    spans = [p for p in ax.patches if isinstance(p, Rectangle)]
    below, above, across = (p.get_extents().transformed(ax.transData.inverted()) for p in spans)
    # an infinite end reaches the edge of the data's range, and the view stays there
    assert below.y0 == pytest.approx(low) and below.y1 == pytest.approx(0.7)
    assert above.y0 == pytest.approx(1.5) and above.y1 == pytest.approx(high)
    assert low < 0.5 and high > 2.0 and high < 10
    assert (across.x0, across.x1) == pytest.approx((0.5, 1.0))
    assert spans[1].get_alpha() == 0.2


def test_titles_note_grid_and_shared_x() -> None:
    series = fg.Series("s", [0, 1], [1.0, 2.0])
    fig = drawn(
        panel(series, title="first", note="note: 2 steps"),
        panel(series, x=fg.Axis("step")),
        panel(series, x=fg.Axis("step")),
        title="Three panels",
        columns=2,
        shared_x=True,
    )
    a, b, c, empty = fig.axes  # 2 x 2 grid, the last cell empty
    assert fig.get_suptitle() == "Three panels"
    assert a.get_title() == "first" and [t.get_text() for t in a.texts] == ["note: 2 steps"]
    assert not empty.axison
    assert a.get_shared_x_axes().joined(a, c)
    # the x axis is named where its ticks show: under c (bottom) and b (nothing below it)
    assert [ax.get_xlabel() for ax in (a, b, c)] == ["", "step", "step"]
    assert any(t.get_text() for t in b.get_xticklabels())
    assert plots.draw(fg.Figure("", [panel(series)])).get_suptitle() == ""


def spoiled(value: Any, bad: Iterator[float | None]) -> Any:
    """``value`` with each float of its series data (x, y, z, edges) the next of ``bad``."""
    if isinstance(value, float):
        return next(bad)
    if isinstance(value, list | tuple):
        return [spoiled(v, bad) for v in value]
    if isinstance(value, fg.Series):
        data = {k: getattr(value, k) for k in ("x", "y", "z", "edges", "widths")}
        return dataclasses.replace(value, **{k: spoiled(v, bad) for k, v in data.items() if v})
    if isinstance(value, fg.Panel):
        return dataclasses.replace(value, series=spoiled(value.series, bad))
    if isinstance(value, fg.Figure):
        return dataclasses.replace(value, panels=spoiled(value.panels, bad))
    return value


def every_kind() -> fg.Figure:
    x = [0.1, 0.2, 0.5, 1.0]
    return fg.Figure(
        "all",
        [
            panel(
                *(fg.Series(k, x, [1.0, 2.0, 0.5, 3.0], kind=k) for k in (*LINE_KINDS, "bars")),
                x=fg.Axis("x", scale="log"),
                y=fg.Axis("y", scale="log"),
                bands=[fg.Band(-INF, 0.7)],
                lines=[fg.Line(1.0)],
            ),
            panel(
                fg.Series("h", [], [1.0, 2.0], kind="histogram", edges=[0.0, 1.0, 2.0]),
                y=fg.Axis("count", scale="log"),
            ),
            panel(
                fg.Series("z", [0.0, 1.0], [0.0, 1.0], kind="heatmap", z=[[1.0, 2.0], [3.0, 4.0]])
            ),
        ],
    )


@pytest.mark.parametrize("mix", ["all none", "mixed"])
def test_non_finite_values_anywhere_draw_without_a_warning(mix: str) -> None:
    """``None`` everywhere (a blown-up run's JSON), or a cycle of 0.5, nan, inf, -inf, None."""
    bad = (
        itertools.repeat(None)
        if mix == "all none"
        else itertools.cycle([0.5, NAN, INF, -INF, None])
    )
    rendered(plots.draw(spoiled(every_kind(), bad)))


# -- saving, threads, imports ----------------------------------------------------------------------


@dataclasses.dataclass
class Described:
    described: list[fg.Figure]

    def figures(self) -> list[fg.Figure]:
        return self.described


def test_save_png_and_svg(tmp_path: Path) -> None:
    r = Described([every_kind()])
    png = plots.save(r, tmp_path / "f.png")
    assert png == tmp_path / "f.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plots.save(r, str(tmp_path / "f.SVG"))
    assert ET.parse(svg).getroot().tag.endswith("svg")
    assert b"<dc:date>" not in svg.read_bytes()


def test_save_stacks_several_figures(tmp_path: Path) -> None:
    first = fg.Figure("first", [panel(fg.Series("s", [0, 1], [1.0, 2.0]))] * 2, height=3.0)
    second = fg.Figure("second", [panel(fg.Series("s", [0, 1], [2.0, 1.0]))])
    fig = plots.draw_all([first, second])
    assert [sub.get_suptitle() for sub in fig.subfigs] == ["first", "second"]
    assert len(fig.axes) == 3
    assert fig.get_size_inches()[1] == pytest.approx(3.0 + second.height)
    plots.save(Described([first, second]), tmp_path / "both.png")
    with pytest.raises(ValueError, match="no figure"):
        plots.save(Described([]), tmp_path / "none.png")


@pytest.mark.parametrize("suffix", [".pdf", ".jpg", ""])
def test_save_bad_suffix(tmp_path: Path, suffix: str) -> None:
    with pytest.raises(ValueError, match=r"\.png, \.svg") as info:
        plots.save(Described([every_kind()]), tmp_path / f"figure{suffix}")
    assert repr(suffix) in str(info.value)
    assert not list(tmp_path.iterdir())


def test_save_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plots.save(Described([every_kind()]), tmp_path / "nope" / "figure.png")
    assert not (tmp_path / "nope").exists()


def test_draws_from_two_threads() -> None:
    """The same description drawn in two threads at once gives the same pixels as alone."""
    alone = rendered(plots.draw(every_kind()))
    got: list[bytes] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work() -> None:
        try:
            start.wait()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got.extend(rendered(plots.draw(every_kind())) for _ in range(3))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert got == [alone] * 6


def test_no_pyplot_and_no_experiment() -> None:
    tree = ast.parse(Path(plots.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any("pyplot" in name or "experiments" in name for name in imported)
    source = Path(plots.__file__).read_text()
    assert not any(e.name in source for e in list_experiments())
    code = "import sys, normlab.plots; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- acceptance: every experiment draws exactly its description ------------------------------------

EXPERIMENTS = list_experiments()


def categories(p: fg.Panel) -> dict[str, int]:
    found: dict[str, int] = {}
    for s in p.series:
        for v in s.x:
            if isinstance(v, str):
                found.setdefault(v, len(found))
    return found


def xs(s: fg.Series, cats: dict[str, int]) -> list[Any]:
    return [cats[v] if isinstance(v, str) else v for v in s.x]


def check_panel(ax: Axes, p: fg.Panel) -> None:
    """Each series of ``p`` reached matplotlib with exactly its data, in order."""
    cats = categories(p)
    lines = iter(ax.lines)
    collections = iter(ax.collections)
    bars = iter(ax.containers)
    stairs = iter(q for q in ax.patches if isinstance(q, StepPatch))
    n_bars = sum(s.kind == "bars" for s in p.series)
    bar_centres = []
    for s in p.series:
        x = xs(s, cats)
        if s.kind in LINE_KINDS:
            if s.kind != "markers" or s.colors is None:
                ln = next(lines)
                assert isinstance(ln, Line2D) and ln.get_label() in (s.name, "_nolegend_")
                same(ln.get_xdata(), x)
                same(ln.get_ydata(), s.y)
            if s.colors is not None and s.kind != "line":
                points = next(collections)
                assert isinstance(points, PathCollection)
                same(points.get_offsets()[:, 0], x)
                same(points.get_offsets()[:, 1], s.y)
        elif s.kind == "bars":
            container = next(bars)
            same([q.get_height() for q in container], s.y)
            bar_centres.append(centres(container))
        elif s.kind == "histogram":
            if all(math.isfinite(e) for e in s.edges or (NAN,)):
                values, edges, _ = next(stairs).get_data()
                same(values, s.y)
                same(edges, s.edges or ())
        else:
            mesh = next(collections)
            assert isinstance(mesh, QuadMesh)
            same(np.ma.filled(mesh.get_array(), NAN).ravel(), [v for row in s.z or () for v in row])
    if bar_centres:  # side by side, centred on the series' x
        want = np.array(floats(xs(next(s for s in p.series if s.kind == "bars"), cats)))
        np.testing.assert_allclose(np.mean(bar_centres, axis=0), want, atol=1e-12)
        assert len(bar_centres) == n_bars
    placed = [ln for ln in p.lines if math.isfinite(ln.value)]
    assert len(list(lines)) <= len(placed)  # what is left: the reference lines


@pytest.mark.parametrize(
    "name",
    [pytest.param(e.name, marks=[pytest.mark.slow] if e.trains else []) for e in EXPERIMENTS],
)
def test_every_experiment_draws_its_description(
    name: str, cached_run: Callable[..., Result]
) -> None:
    described = cached_run(name).figures()
    assert described, f"{name}: no figure"
    for f in described:
        fig = plots.draw(f)
        rendered(fig)
        axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        for ax, p in zip(axes, f.panels, strict=False):
            check_panel(ax, p)
            assert ax.get_title() == p.title
            assert (ax.get_xscale(), ax.get_yscale()) == (p.x.scale, p.y.scale)
        assert fig.get_suptitle() == f.title


@pytest.mark.parametrize("mix", ["all none", "mixed"])
@pytest.mark.parametrize(
    "name",
    [pytest.param(e.name, marks=[pytest.mark.slow] if e.trains else []) for e in EXPERIMENTS],
)
def test_every_experiment_draws_non_finite_values(
    name: str, mix: str, cached_run: Callable[..., Result]
) -> None:
    bad = (
        itertools.repeat(None)
        if mix == "all none"
        else itertools.cycle([0.5, NAN, INF, -INF, None])
    )
    for f in cached_run(name).figures():
        rendered(plots.draw(spoiled(f, bad)))
