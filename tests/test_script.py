"""The code behind every experiment: a script that needs no normlab and prints what normlab reports.

For every registered experiment, at its defaults and at two other settings, the rendered script
runs in a fresh interpreter (a real subprocess) where ``import normlab`` fails, and what it prints
is exactly what the experiment's ``show`` prints for the result normlab computed in this process;
every number of the result's tables appears in that output. The notebook of every experiment runs
under nbclient and prints the same.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from normlab import notebook
from normlab.experiments import Result, get_experiment, list_experiments, script

PLAIN = [e.name for e in list_experiments() if e.name != "doctor"]

SETTINGS: dict[str, list[dict[str, Any]]] = {
    "linear-scale": [{"batch": 32, "scale": 3.5, "seed": 4}, {"in_features": 9, "seed": 1}],
    "drift": [{"depth": 20, "activation": "tanh", "seed": 3}, {"norm": "layer", "width": 8}],
    "bn-columns": [{"batch": 16, "scales": [0.5, 2000.0]}, {"seed": 7}],
    "bn-running-stats": [{"passes": 5, "cumulative": True}, {"momentum": 0.5, "features": 2}],
    "bn-stack": [{"depth": 30, "seed": 2}, {"norm": "rms", "activation": "sigmoid"}],
    "symmetry": [{"random_init": True, "steps": 12}, {"const": 0.7, "hidden": 3, "steps": 8}],
    "variance": [{"gains": [1.05], "depth": 15}, {"activation": "relu", "width": 32}],
    "init-compare": [{"depth": 6, "hist_layer": 3, "seed": 5}, {"width": 16, "bins": 9}],
    "init-train": [{"method": "zeros", "steps": 20}, {"method": "large", "hidden_layers": 3}],
    "bn-from-scratch": [{"batch": 64, "features": 2}, {"momentum": 0.5, "parity_batches": 3}],
    "bn-lr": [{"batch_norm": True, "lr": 0.5, "steps": 30}, {"hidden_layers": 2, "steps": 40}],
    "bn-lr-sweep": [
        {"points": 3, "steps": 20, "hidden_layers": 2},
        {"lr_min": 1.0, "lr_max": 4.0, "points": 2, "steps": 15, "tail": 5},
    ],
}

CASES = [(name, {}) for name in PLAIN] + [
    (name, params) for name in PLAIN for params in SETTINGS[name]
]


@pytest.fixture(scope="module")
def no_normlab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``normlab`` package refuses to import; scripts run from it."""
    root = tmp_path_factory.mktemp("plain")
    (root / "normlab").mkdir()
    (root / "normlab" / "__init__.py").write_text(
        'raise ImportError("the rendered code must not import normlab")\n'
    )
    return root


def test_every_experiment_but_the_doctor_has_settings_here() -> None:
    assert sorted(SETTINGS) == sorted(PLAIN)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "params"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)]
)
def test_the_rendered_code_prints_what_normlab_reports(
    name: str, params: dict[str, Any], no_normlab: Path, cached_run: Callable[..., Result]
) -> None:
    experiment = get_experiment(name)
    result = cached_run(name, **params)
    text = script.render(experiment, params)
    assert "normlab" not in _imports(text)
    path = no_normlab / f"{name.replace('-', '_')}.py"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, str(path)], cwd=no_normlab, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    expected = script.output(experiment, result)
    assert done.stdout == expected
    printed = [float(n) for n in re.findall(NUMBER, done.stdout)]
    for table in result.tables():
        for row in table.rows:
            for cell in row:
                for number in re.findall(NUMBER, cell):
                    if "." in number or "e" in number:
                        assert _shown(number, printed), (number, cell, table.title)


NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def _shown(cell: str, printed: list[float]) -> bool:
    """Whether a number of a table cell is among the printed numbers, to the cell's last digit."""
    mantissa, _, exponent = cell.partition("e")
    digits = len(mantissa.partition(".")[2])
    half_unit = 0.5 * 10.0 ** (int(exponent or 0) - digits)
    value = float(cell)
    return any(abs(p - value) <= half_unit * (1 + 1e-9) + 1e-300 for p in printed)


def _imports(text: str) -> set[str]:
    """The top-level modules a script imports."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("name", PLAIN)
def test_scripts_import_only_the_field_s_packages(name: str) -> None:
    text = script.render(get_experiment(name), {})
    allowed = {"torch", "numpy", "sklearn", "matplotlib", "math", "typing", "collections"}
    assert _imports(text) <= allowed
    compile(text, name, "exec")  # and it is one valid script


def test_the_script_binds_the_parameters_it_was_asked_for() -> None:
    text = script.render(get_experiment("drift"), {"depth": 13, "activation": "tanh"})
    assert "depth=13" in text and 'activation="tanh"' in text
    assert text.rstrip().endswith("show(result)")


def test_render_validates_its_parameters() -> None:
    with pytest.raises(ValueError, match="depth"):
        script.render(get_experiment("drift"), {"depth": 0})


@pytest.mark.slow
@pytest.mark.parametrize("name", PLAIN)
def test_the_notebook_runs_in_jupyter_and_prints_the_same(
    name: str, tmp_path: Path, cached_run: Callable[..., Result]
) -> None:
    experiment = get_experiment(name)
    params = experiment.make_params(SETTINGS[name][0])
    result = cached_run(name, **SETTINGS[name][0])
    nb = notebook.notebook(experiment, params, script.output(experiment, result))
    nbformat.validate(nb)
    shipped = nb.cells[-1].outputs[0]["text"]
    fresh = nbformat.reads(notebook.dumps(nb), as_version=4)
    for cell in fresh.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    (tmp_path / "normlab").mkdir()  # the kernel runs in tmp_path, where normlab cannot import
    (tmp_path / "normlab" / "__init__.py").write_text('raise ImportError("no normlab")\n')
    NotebookClient(fresh, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(o.get("text", "") for o in fresh.cells[-1].outputs)
    assert printed == shipped


@pytest.mark.slow
def test_the_doctor_s_code_calls_normlab_and_prints_what_it_reports(
    cached_run: Callable[..., Result], tmp_path: Path
) -> None:
    """The one exception: the doctor widget shows normlab's own tool, so its code imports it.

    It still runs on its own in a fresh interpreter and prints what the lab reports.
    """
    experiment = get_experiment("doctor")
    params = {"model": "dead-relu", "steps": 2}
    text = script.render(experiment, params)
    assert "from normlab import doctor, zoo" in text
    path = tmp_path / "doctor.py"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == script.output(experiment, cached_run("doctor", **params))
