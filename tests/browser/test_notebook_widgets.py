"""normlab.widgets where learners are: a real JupyterLab and a marimo app, driven by Chromium.

JupyterLab (``jupyter lab``, started here on a free local port with its own config, data and
runtime folders, news, update checks, announcements and the extension manager's PyPI listing
off) opens a notebook whose one cell builds ``normlab.widgets.Experiment(EXPERIMENT)``; the cell
runs from the Run menu, the widget draws exactly the kernel's result (every series one plotly
trace, as the lab's renderer draws it), and a slider moved by the keyboard redraws it with the
result for the slider's new value (JupyterLab's command mode binds the arrow keys to moving
between cells: the widget marks a focused control so that its keys stay its own). Then a lesson
exported as a marimo app (``normlab notebook LESSON -o app.py``) runs under ``marimo run`` and
each widget the app builds draws its result.

Both pages are guarded as every page of the suite is (``guarded_page``): a request to any host
but 127.0.0.1 is aborted and fails the test, so JupyterLab, marimo and anywidget must serve
everything themselves, plotly.js included. Cost: one JupyterLab and one kernel, one marimo app
running one lesson, one page load each.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab_traces import TRACES, expected_traces, unescaped
from labpage import ALLOWED_HOST, START_TIMEOUT_S, free_port, screenshot, serving
from nbformat import v4
from playwright.sync_api import expect

from normlab import cli
from normlab.experiments import get_experiment, params_dict, run_experiment
from normlab.lab.runner import answer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EXPERIMENT = "linear-scale"  # the cheapest: each run is one Linear layer on 8 rows
SLIDER = "scale"
LESSON = "drift"  # the cheapest lesson: short listings, two small widgets
NOTEBOOK = "widget.ipynb"

# JupyterLab's own calls to the network, all off: the news feed, the update check, the
# extension manager's PyPI listing (read-only: lists what is installed), the announcements.
LAB_CONFIG = {
    "LabApp": {
        "news_url": None,
        "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate",
        "extension_manager": "readonly",
    },
    "ServerApp": {"terminals_enabled": False},
}
PAGE_CONFIG = {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}

KERNEL_IDLE = """() => /^(?!No Kernel).+ \\| Idle$/m.test(
  document.querySelector('.jp-StatusBar-Widget')?.parentElement?.innerText ?? '')"""
"""JS: the notebook's kernel has started and is idle (the status bar's "Python 3 (ipykernel) |
Idle"; before, it reads "No Kernel | Initializing", and a run then asks which kernel to start)."""

WIDGET = f'.normlab-widget[data-experiment="{EXPERIMENT}"]'
DRAWN = "[data-state='ready'] .nl-plot .js-plotly-plot"

REDRAWN = f"""(before) => {{
  const w = document.querySelector('{WIDGET}');
  return w.dataset.state === 'ready'
    && JSON.stringify(({TRACES})(w.querySelector('.nl-plot'))) !== JSON.stringify(before);
}}"""
"""JS: the widget is ready and draws other traces than ``before`` (as ``TRACES`` reads them)."""


def _isolated_env(root: Path) -> dict[str, str]:
    """The environment of a notebook server: one torch thread, and every folder of settings,
    caches and state under ``root`` (the user's own are not read or written)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "HOME": str(root)}
    for name in ("CONFIG", "CACHE", "STATE", "DATA"):
        env[f"XDG_{name}_HOME"] = str(root / name.lower())
    for name in ("CONFIG", "DATA", "RUNTIME"):
        env[f"JUPYTER_{name}_DIR"] = str(root / f"jupyter-{name.lower()}")
    env["IPYTHONDIR"] = str(root / "ipython")
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    return env


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of NOTEBOOK (one cell: the widget) in a JupyterLab started for this module."""
    root = tmp_path_factory.mktemp("jupyterlab")
    env = _isolated_env(root)
    config = Path(env["JUPYTER_CONFIG_DIR"])
    (config / "labconfig").mkdir(parents=True)
    (config / "jupyter_server_config.json").write_text(json.dumps(LAB_CONFIG))
    (config / "labconfig" / "page_config.json").write_text(json.dumps(PAGE_CONFIG))
    notebooks = root / "notebooks"
    notebooks.mkdir()
    cell = f"import normlab.widgets\n\nw = normlab.widgets.Experiment({EXPERIMENT!r})\nw"
    nb = v4.new_notebook(cells=[v4.new_code_cell(cell)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, notebooks / NOTEBOOK)

    port, token = free_port(), secrets.token_hex(16)
    base = f"http://{ALLOWED_HOST}:{port}"
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}"]
    cmd += [f"--ServerApp.ip={ALLOWED_HOST}", f"--IdentityProvider.token={token}"]
    cmd += [f"--ServerApp.root_dir={notebooks}", "--allow-root"]  # a container runs as root
    with serving(cmd, f"{base}/api/status?token={token}", root / "server.log", env, root, 20):
        yield f"{base}/lab/tree/{NOTEBOOK}?token={token}"


def _expected(name: str, params: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """What a widget must draw for ``params``: the run's figures, every series one trace."""
    spec = get_experiment(name)
    result = answer(spec, run_experiment(name, **params))
    return expected_traces(json.loads(json.dumps(result)))


def _drawn(widget: Any) -> list[list[dict[str, Any]]]:
    traces: list[list[dict[str, Any]]] = widget.locator(".nl-plot").evaluate(TRACES)
    return unescaped(traces)


def test_a_widget_in_jupyterlab_draws_the_kernel_s_result_and_follows_its_slider(
    guarded_page: Any, jupyterlab: str
) -> None:
    page = guarded_page
    page.goto(jupyterlab, wait_until="load")
    page.wait_for_function(KERNEL_IDLE)
    page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
    page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
    page.wait_for_selector(WIDGET + DRAWN)
    widget = page.locator(WIDGET)
    before = _drawn(widget)
    assert before == _expected(EXPERIMENT, {})

    control = widget.locator(f'.nl-control[data-param="{SLIDER}"]')
    shown = float(control.locator("output").text_content() or "nan")
    control.locator('input[type="range"]').focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(REDRAWN, arg=widget.locator(".nl-plot").evaluate(TRACES))
    moved = float(control.locator("output").text_content() or "nan")
    assert shown == params_dict(get_experiment(EXPERIMENT).make_params({}))[SLIDER]
    assert moved > shown
    after = _drawn(widget)
    assert after != before
    assert after == _expected(EXPERIMENT, {SLIDER: moved})
    screenshot(page, "notebook-widget-jupyterlab.png")


Built = list[tuple[str, dict[str, Any]]]  # (experiment, its parameters) per widget


def _widgets_built(app: Path) -> Built:
    """The ``normlab.widgets.Experiment(NAME, **params)`` calls in ``app``, in order."""
    calls = []
    for node in ast.walk(ast.parse(app.read_text())):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "normlab.widgets.Experiment":
            params = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
            calls.append((node.lineno, ast.literal_eval(node.args[0]), params))
    return [(name, params) for _, name, params in sorted(calls)]


@pytest.fixture(scope="module")
def marimo_lesson(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Built]]:
    """LESSON exported as a marimo app and served by ``marimo run``: its URL, and the widgets
    the app builds. (A fixture, so the page is checked and closed before the server stops.)"""
    root = tmp_path_factory.mktemp("marimo")
    app = root / "app.py"
    assert cli.main(["notebook", LESSON, "-o", str(app)]) == 0  # in this process: no new torch
    port = free_port()
    base = f"http://{ALLOWED_HOST}:{port}"
    cmd = [sys.executable, "-m", "marimo", "run", str(app), "--headless", "--no-token"]
    # --no-sandbox: never a uv environment built from PyPI. marimo 0.25's `run` checks for no
    # update (only `edit` asks PyPI) and its settings are read from the isolated HOME/XDG folders
    cmd += ["--host", ALLOWED_HOST, "--port", str(port), "--no-sandbox"]
    with serving(cmd, f"{base}/health", root / "server.log", _isolated_env(root), root, 20):
        yield base, _widgets_built(app)


def test_a_lesson_as_a_marimo_app_runs_and_its_widgets_draw(
    guarded_page: Any, marimo_lesson: tuple[str, Built]
) -> None:
    base, built = marimo_lesson
    assert built, f"the {LESSON} app builds no widget"
    page = guarded_page
    page.goto(base, wait_until="load")
    widgets = page.locator(".normlab-widget")  # in marimo's shadow roots: locators pierce
    drawn = page.locator(".normlab-widget[data-state='ready']:has(.nl-plot .js-plotly-plot)")
    expect(drawn).to_have_count(len(built), timeout=START_TIMEOUT_S * 1000)
    assert widgets.count() == len(built)
    for i, (name, params) in enumerate(built):
        assert widgets.nth(i).get_attribute("data-experiment") == name
        assert _drawn(widgets.nth(i)) == _expected(name, params), name
