"""An experiment's code as a Jupyter notebook: the same script, one cell per piece.

The notebook holds a markdown header (what it is, the parameters), a cell of imports, one cell
per function or class of the experiment's code, and the call that runs it, with what it printed
when normlab ran it as that cell's output (or no outputs). It opens and runs in Jupyter or Colab
as it is: nothing in it imports normlab.
"""

from __future__ import annotations

from typing import Any

import nbformat
from nbformat import v4

from normlab.experiments import Experiment
from normlab.experiments.base.params import params_dict
from normlab.experiments.script import header, parts

KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}


def notebook(experiment: Experiment, params: Any, output: str | None = None) -> Any:
    """The notebook for a ``Params`` instance; ``output`` is shown under the last cell."""
    lines, sources, run = parts(experiment, params)
    values = ", ".join(f"`{k}={v!r}`" for k, v in params_dict(params).items())
    intro = f"# {experiment.title}\n\n{header(experiment)}\n\nParameters: {values}."
    last = v4.new_code_cell(run)
    if output is not None:
        last.outputs = [v4.new_output("stream", name="stdout", text=output)]
        last.execution_count = len(sources) + 2
    cells = [
        v4.new_markdown_cell(intro),
        v4.new_code_cell("\n".join(lines)),
        *(v4.new_code_cell(s) for s in sources),
        last,
    ]
    nb = v4.new_notebook(cells=cells, metadata={"kernelspec": KERNEL})
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


def dumps(nb: Any) -> str:
    """The notebook as ``.ipynb`` text."""
    text: str = nbformat.writes(nb)
    return text
