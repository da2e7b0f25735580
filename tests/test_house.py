"""The house rules that the code itself must keep: small functions, plain PyTorch, one renderer.

These read the source tree: no function in the package is longer than 80 lines of code (its
docstring aside), nothing compiles or scripts torch code, the speed machinery that once stood
beside the plain loop is gone, and the lab's JavaScript names no experiment.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from normlab.experiments import list_experiments

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "normlab"
SOURCES = sorted(PACKAGE.rglob("*.py"))
SCRIPTS = sorted((PACKAGE / "lab" / "static").glob("*.js"))
MAX_LINES = 80


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function without its docstring (decorators and signature count)."""
    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        doc = body[0]
        if isinstance(doc.value.value, str):
            lines -= doc.end_lineno - doc.lineno + 1  # type: ignore[operator]
    return lines


def test_no_function_in_the_package_is_longer_than_80_lines() -> None:
    long = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
                _code_lines(node) > MAX_LINES
            ):
                long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert long == []


def test_the_speed_machinery_is_gone() -> None:
    for gone in ("_fastloop.py", "workers.py", "_payload.py"):
        assert not (PACKAGE / gone).exists()
    for path in SOURCES:
        text = path.read_text()
        assert "torch.jit" not in text, path
        assert not re.search(r"torch\.compile\(", text), path  # the doctor may name it
        assert not re.search(
            r"^\s*(import|from) (multiprocessing|concurrent\.futures\.process)", text, re.M
        ), path


def test_one_training_loop() -> None:
    """``train.train_step`` is the one place that steps an optimizer for the experiments'
    training: ``zero_grad``, forward, loss, backward, step, in that order, once. ``train.train``,
    every experiment's loop (symmetry's weight record, the training view's run, the
    minibatches of bn-regularization, coord-check's per-layer rates and cross-entropy) and the
    doctor's coordinate check over widths call it, so a change to the step is one edit and
    every experiment's script pastes the same function.

    ``train.train_stacked`` is the same loop for K nets of one shape at once (a sweep's batched
    configurations); its SGD update is written out, as one optimizer steps one rate.

    The one other is the doctor's training check (``doctor/training.py``), the short comparison
    run the issue allows: it trains a deep copy of a user's model with Adam whose learning rate
    it sets before every step (the warmup remedy), against a target drawn for each output
    shape the model computes, and reads a user's output through the doctor's checked call
    (its errors say what the model was given)."""
    code = r"^(?!\s*(>>>|\.\.\.)).*\b(opt|optimizer)\.step\(\)"  # doctests show a tool's use
    steppers = [p for p in SOURCES if re.search(code, p.read_text(), re.M)]
    names = {p.relative_to(PACKAGE).as_posix() for p in steppers}
    assert names == {"train.py", "doctor/training.py"}
    # an update written out (W -= lr * grad) is a step too: only train_stacked, where K nets
    # each step at their own rate, writes one
    update = r"\.(add_|sub_|addcmul_)\([^)]*\.grad\b"
    writers = [p for p in SOURCES if re.search(update, p.read_text())]
    assert {p.relative_to(PACKAGE).as_posix() for p in writers} == {"train.py"}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_the_lab_s_javascript_names_no_experiment(path: Path) -> None:
    text = path.read_text()
    for e in list_experiments():
        assert not re.search(rf"[\"'`]{re.escape(e.name)}[\"'`]", text), (path.name, e.name)
    for constant in ("LOSS_CLIP", "SWEEP_FLOOR", "LOG_FLOOR", "INIT_TRAIN_FLOOR", "VIEWS"):
        assert constant not in text, (path.name, constant)


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in its code (``from a import b`` counts ``a``
    and ``a.b``, since ``b`` may be a module); a relative import is read from experiments/."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = "normlab.experiments" + (f".{module}" if module else "")
            names |= {module} | {f"{module}.{a.name}" for a in node.names}
    return names


def _registers_an_experiment(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    targets = [t for node in body if isinstance(node, ast.Assign) for t in node.targets]
    return any(isinstance(t, ast.Name) and t.id == "EXPERIMENT" for t in targets)


def test_no_experiment_imports_another_experiment() -> None:
    """An experiment builds on the ground floor and ``models.py``, never on another experiment,
    so that editing one changes no other's numbers or printed code. An experiment module is one
    that registers an ``EXPERIMENT``; the others (``base``, ``script``, ``stack``: shared
    infrastructure) may be imported, and import no experiment either. ``__init__`` is the
    registry, which imports them all."""
    folder = PACKAGE / "experiments"
    experiments = {
        f"normlab.experiments.{p.stem}" for p in folder.glob("*.py") if _registers_an_experiment(p)
    }
    assert {"normlab.experiments.drift", "normlab.experiments.bn_lr"} <= experiments  # has teeth
    crossing = [
        f"{p.stem} imports {sorted(_imported(p) & experiments)}"
        for p in sorted(folder.glob("*.py"))
        if p.name != "__init__.py" and _imported(p) & experiments
    ]
    assert crossing == []


def test_the_serial_part_imports_only_the_modules_that_name_its_marker(tmp_path: Path) -> None:
    """``pytest -m serial`` skips a test module whose text never says ``serial`` (it can hold
    no test marked so) and keeps one that does; any other run, and any other file, is left to
    pytest (``tests/conftest.py``)."""
    from types import SimpleNamespace

    from tests.conftest import pytest_ignore_collect

    plain, marked, helper = (tmp_path / n for n in ("test_a.py", "test_b.py", "helper.py"))
    plain.write_text("def test_x() -> None:\n    pass\n")
    marked.write_text("import pytest\n\npytestmark = pytest.mark.serial\n")
    helper.write_text("")
    serial, other = (SimpleNamespace(option=SimpleNamespace(markexpr=m)) for m in ("serial", ""))
    assert pytest_ignore_collect(plain, serial) is True
    assert pytest_ignore_collect(marked, serial) is False
    assert pytest_ignore_collect(helper, serial) is None
    assert pytest_ignore_collect(plain, other) is None
