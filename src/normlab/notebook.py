"""An experiment's code as a Jupyter notebook: the same script, one cell per piece, and its figure.

The notebook holds a markdown header (what it is, the parameters), a cell of imports, one cell
per function or class of the experiment's code, and the call that runs it, with what it printed
when normlab ran it as that cell's output (or no outputs). Then the figure the widget shows:
its description as data (``figures``, what ``Figure.to_dict()`` gives: panels, axes, series),
the generic matplotlib code that draws any description (:func:`normlab.plots.draw_into` and the
helpers it calls), both folded away, and a cell that draws each figure, its stored output the image
that same code drew when the notebook was made. It opens and runs in Jupyter or Colab as it is:
nothing in it imports normlab.

Why the description travels as data rather than as code that rebuilds it from ``result``: each
experiment builds its figures in normlab (``Result.figures()``), and a notebook that rebuilt them
would carry a second, per-experiment copy of that code. As data, the figure is exactly the
widget's, and the one drawing function reads the same for every experiment.
"""

from __future__ import annotations

import ast
import base64
import functools
import inspect
import io
import itertools
import pprint
from collections.abc import Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure

from normlab import plots
from normlab.experiments import Experiment
from normlab.experiments.base.params import params_dict
from normlab.experiments.script import header, imports, parse, parts

KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}

DPI = 100
"""Resolution of the stored images (Jupyter's inline default)."""

DRAW = """import matplotlib.pyplot as plt

for figure in figures:
    fig = plt.figure(figsize=size(figure), layout="constrained")
    draw_into(fig, figure)
    plt.show()"""
"""The cell that draws: one matplotlib figure per description, as the widget shows them."""

FIGURE_NOTE = """## The figure

The widget's figure for this run, drawn with matplotlib. normlab describes a figure as data:
panels, their axes and the series drawn on them (`figures`, the numbers of the run above). One
generic function, `draw_into`, draws any description. Both cells are folded away below; the
last cell draws. The description was made with the notebook: after changing a parameter above
and rerunning, the tables are the new run's but the figure is still this one (the widget's
Download notebook at the new settings gives theirs)."""


def notebook(
    experiment: Experiment,
    params: Any,
    output: str | None = None,
    figures: Sequence[dict[str, Any]] = (),
) -> Any:
    """The notebook for a ``Params`` instance; ``output`` is shown under the run's cell, and
    ``figures`` (descriptions as plain data, ``Figure.to_dict()``) are drawn after it."""
    import nbformat  # here, not with the module (see the module docstring)
    from nbformat import v4

    lines, sources, run = parts(experiment, params)
    values = ", ".join(f"`{k}={v!r}`" for k, v in params_dict(params).items())
    intro = f"# {experiment.title}\n\n{header(experiment)}\n\nParameters: {values}."
    last = v4.new_code_cell(run, id="run")
    if output is not None:
        last.outputs = [v4.new_output("stream", name="stdout", text=output)]
        last.execution_count = len(sources) + 2
    cells = [
        v4.new_markdown_cell(intro),
        v4.new_code_cell("\n".join(lines)),
        *(v4.new_code_cell(s) for s in sources),
        last,
    ]
    if figures:
        cells += figure_cells(figures, None if output is None else len(sources) + 3)
    nb = v4.new_notebook(cells=cells, metadata={"kernelspec": KERNEL})
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


def figure_cells(figures: Sequence[dict[str, Any]], count: int | None = None) -> list[Any]:
    """A note, the renderer (its source folded away), the descriptions, and the cell that draws
    them, its outputs the images drawn here with the renderer's own code (executed as
    ``count``, ``count + 1``, ``count + 2``; ``None``: not run)."""
    from nbformat import v4

    code = v4.new_code_cell(renderer(), id="figure-renderer")
    data = v4.new_code_cell(
        "figures = " + pprint.pformat(list(figures), width=100, compact=True, sort_dicts=False),
        id="figure-data",
    )
    for folded in (code, data):  # long and generic: one click away, the picture in view
        folded.metadata["jupyter"] = {"source_hidden": True}
    draw = v4.new_code_cell(DRAW, id="figure")
    draw.outputs = [_image(f) for f in figures]
    if count is not None:
        for k, cell in enumerate((code, data, draw)):
            cell.execution_count = count + k
    return [v4.new_markdown_cell(FIGURE_NOTE, id="figure-note"), code, data, draw]


@functools.cache  # plots' source is fixed for the process: collected once, not per download
def renderer() -> str:
    """The source of :func:`normlab.plots.draw_into` and :func:`~normlab.plots.size`, with every
    function and module-level name of ``plots`` they use, in the module's order, after the
    imports they need: the drawing code, which imports nothing of normlab."""
    source = inspect.getsource(plots)
    tree = parse(source)
    defined = {_name(node): node for node in tree.body if _name(node)}
    wanted: dict[str, ast.stmt] = {}
    todo = ["draw_into", "size"]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted[name] = defined[name]
        names = [n for n in ast.walk(defined[name]) if isinstance(n, ast.Name)]
        local = {n.id for n in names if isinstance(n.ctx, ast.Store)}  # draw = ax.axhline
        todo += sorted({n.id for n in names} - local & set(defined))
    lines = source.splitlines()
    nodes = sorted(wanted.values(), key=lambda node: node.lineno)
    body = "\n".join(lines[nodes[0].lineno - 1 : nodes[0].end_lineno])
    for before, node in itertools.pairwise(nodes):
        constants = isinstance(before, ast.Assign) and isinstance(node, ast.Assign)
        body += ("\n" if constants else "\n\n\n") + "\n".join(
            lines[node.lineno - 1 : node.end_lineno]
        )
    return "\n".join(imports([plots.draw_into], body)) + "\n\n\n" + body


def _name(node: ast.stmt) -> str:
    """The name a top-level function or one-target assignment defines ("" for anything else)."""
    if isinstance(node, ast.FunctionDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return target.id if isinstance(target, ast.Name) else ""
    return ""


def _image(figure: dict[str, Any]) -> Any:
    """What Jupyter stores for one figure the draw cell shows: ``display_data``, PNG."""
    fig = MplFigure(figsize=plots.size(figure), layout="constrained")
    FigureCanvasAgg(fig)
    plots.draw_into(fig, figure)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    width, height = fig.get_size_inches() * DPI
    text = f"<Figure size {width:g}x{height:g} with {len(fig.axes)} Axes>"
    png = base64.b64encode(buffer.getvalue()).decode("ascii")
    from nbformat import v4

    return v4.new_output("display_data", data={"image/png": png, "text/plain": text})


def dumps(nb: Any) -> str:
    """The notebook as ``.ipynb`` text."""
    import nbformat

    text: str = nbformat.writes(nb)
    return text
