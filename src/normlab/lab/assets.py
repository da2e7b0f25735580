"""Files the lab's front end needs that come from other packages, found without importing them
or anything of the web server: the lab (:mod:`normlab.lab.site`) serves them, and the notebook
widgets (:mod:`normlab.widgets`) send them to a page.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def plotly_js() -> Path:
    """The ``plotly.min.js`` shipped inside the plotly wheel (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the plotly package is not installed; the lab needs its JS file")
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise FileNotFoundError(f"plotly.min.js not found at {str(path)!r}")
    return path
