"""The code to take away reads like the seed notebook's cells (issue 33, item 5).

A rendered script carries no type annotation (a dataclass's fields aside: they make the fields),
no doctest and no UI hook, and for each of the seed notebook's four widgets it is at most twice
as long as the notebook's own code for that widget (as counted here, and, for bn-lr, as the
issue counts it).
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import re
from typing import Any

import pytest

from normlab.experiments import get_experiment, list_experiments, run_experiment, script
from normlab.models import print_tables

# The seed notebook's code behind each widget, counted in lines (the seed's text holds no blank
# lines): the setup cell's five imports (numpy, torch, nn, F, pyplot), the two-moons cell (5) for
# the widgets that train on it, every function the widget calls, the widget's own cell (its
# function and its interact call), and the cell whose figure the experiment's defaults reproduce.
SEED_LINES = {
    # TinyMLP 8, init_net 11, train_track 13; the constant-init cell 10, the random-init cell 16
    # (max |unit0 - unit1| 0.0 and 1.8924); Widget 1 (symmetry_demo, interact) 24
    "symmetry": 5 + 5 + 8 + 11 + 13 + 10 + 16 + 24,  # 92
    # layer_variances 15; the gains 0.85 / 1.00 / 1.15 cell 13; Widget 2 (variance_widget) 15
    "variance": 5 + 15 + 13 + 15,  # 48
    # xavier_uniform_init 4, he_normal_init 4, DeepMLP 17, apply_init 17, train_moons 10;
    # Widget 3 (init_task_demo, interact) 22
    "init-train": 5 + 5 + 4 + 4 + 17 + 17 + 10 + 22,  # 84
    # MLPBN 15, train_bn 13; the learning-rate-2.0 cell (both runs) 10; Widget 4 (bn_demo) 14
    "bn-lr": 5 + 5 + 15 + 13 + 10 + 14,  # 62
}


# Issue 33 (item 5) puts the notebook's own bn-lr code at "about 45" lines (what a learner copies
# from the notebook to run the widget: the net, the loop and the widget) and bounds a script
# "within 2x the notebook's cell for the same widget": a second bound, the issue's own figure,
# beside the derivation above (which also counts the shared setup and data cells).
ISSUE_LINES = {"bn-lr": 45}


def _code_lines(text: str) -> int:
    """The script's non-blank lines after its docstring (the notebook's prose is not counted)."""
    tree = ast.parse(text)
    first = tree.body[1].lineno if ast.get_docstring(tree) is not None else 1
    return sum(1 for line in text.splitlines()[first - 1 :] if line.strip())


@pytest.mark.parametrize("name", sorted(SEED_LINES))
def test_a_seed_widget_s_script_is_at_most_twice_the_notebook_s_code(name: str) -> None:
    lines = _code_lines(script.render(get_experiment(name), {}))
    assert lines <= 2 * SEED_LINES[name], (
        f"{name}: {lines} lines, the notebook's {SEED_LINES[name]}"
    )


@pytest.mark.parametrize("name", sorted(ISSUE_LINES))
def test_a_seed_widget_s_script_is_at_most_twice_the_issue_s_count(name: str) -> None:
    lines = _code_lines(script.render(get_experiment(name), {}))
    assert lines <= 2 * ISSUE_LINES[name], f"{name}: {lines} lines, the issue's {ISSUE_LINES[name]}"


def _in_a_dataclass(tree: ast.Module) -> set[ast.AST]:
    """The annotated fields of the script's dataclasses (their hints make them fields)."""
    fields: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            "dataclass" in ast.unparse(d) for d in node.decorator_list
        ):
            fields |= {s for s in node.body if isinstance(s, ast.AnnAssign)}
    return fields


@pytest.mark.parametrize("name", [e.name for e in list_experiments()])
def test_a_script_has_no_annotation_no_doctest_and_no_hook(name: str) -> None:
    text = script.render(get_experiment(name), {})
    tree = ast.parse(text)
    fields = _in_a_dataclass(tree)
    hints = [
        ast.unparse(n)
        for n in ast.walk(tree)
        if (isinstance(n, ast.arg) and n.annotation is not None)
        or (isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.returns is not None)
        or (isinstance(n, ast.AnnAssign) and n not in fields)
    ]
    assert not hints, f"{name}: annotated {hints[:3]}"
    assert ">>>" not in text, name
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg | ast.keyword) and n.arg}
    assert "live" not in names, name
    docstrings = [
        ast.get_docstring(n, clean=False)
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    assert all("\n" not in d for d in docstrings if d), f"{name}: a docstring of several lines"


def _poisoned(data: Any, value: float | None) -> Any:
    """``data`` with every measured float (an element of a list, or a value of a dict in a list:
    a loss curve, a layer's statistics) replaced by ``value``; the parameters echoed stay."""
    if isinstance(data, dict):
        return {k: _poisoned(v, value) for k, v in data.items()}
    if isinstance(data, list):
        return [_measured(v, value) for v in data]
    return data


def _measured(item: Any, value: float | None) -> Any:
    if isinstance(item, float):
        return value
    if isinstance(item, dict):
        return {k: value if isinstance(v, float) else _poisoned(v, value) for k, v in item.items()}
    return _poisoned(item, value)


def _printed(name: str, data: dict[str, Any]) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_tables(get_experiment(name).tables(data))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("doctor", {"model": "lstm", "steps": 1, "batch": 8}),
        ("bn-lr", {"steps": 3}),
        ("init-train", {"steps": 3}),
    ],
)
def test_a_missing_number_prints_as_the_widget_shows_it(name: str, params: dict[str, Any]) -> None:
    """A measurement that is not finite (a diverged loss, a statistic a layer lacks) prints "-",
    as the widget shows it, which reads the value back from JSON as None: never ``nan``."""
    data = run_experiment(name, **params).data()
    printed = _printed(name, _poisoned(data, math.nan))
    assert not re.search(r"\b(nan|inf|None)\b", printed), printed
    assert printed == _printed(name, _poisoned(data, None))
    assert printed != _printed(name, data) and " - " in printed + " "
