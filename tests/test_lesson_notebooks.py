"""Lessons as notebooks (:mod:`normlab.lab.lessonbook`): every lesson exported as a Jupyter
notebook runs under nbclient, prints what the lesson shows, and its exercise cells call the
lab's checker, which accepts the right answer and refuses a wrong one there; the CLI, the
route and the marimo app.

Cost: one kernel per lesson (ten), the lessons' runs once in this process or none (shared by
every test through :func:`run`, and with the suite's labs through their answers store) and once
more in the kernels, which run the listings, the widgets and the checks.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fastapi.testclient import TestClient
from nbclient import NotebookClient
from nbformat import v4

from normlab import cli
from normlab.lab import exercises, lessonbook, lessons
from normlab.lab.app import create_app
from normlab.lab.htmlmd import pieces
from normlab.lab.runner import Runner
from tests.lab.test_exercises import BACKWARD_RIGHT, COMPARE_RIGHT, HE_RIGHT

RIGHT_CODE = {"he-derivation": HE_RIGHT, "bn-backward": BACKWARD_RIGHT, "init-vs-bn": COMPARE_RIGHT}
"""The code exercises' right answers, as the lab's own exercise tests submit them."""
HAS_WIDGETS = importlib.util.find_spec("normlab.widgets") is not None


@functools.cache
def _runner() -> Runner:
    return Runner()  # the suite's answers store ($NORMLAB_ANSWERS, tests/conftest.py)


def run(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The lessons' runs as the lab's route gets them: a Runner's kept answers, each computed
    once for the module, or read from the answers store the suite's labs share, where a lab on
    this machine, with this code and thread count, has computed it already."""
    return _runner().run(name, params, keep=True)


def _right_and_wrong(exercise: exercises.Exercise) -> tuple[str, str]:
    """Code for the answer the lab accepts (computed in the kernel where it is a live number)
    and for one it refuses."""
    shown = exercise.for_learner(lessonbook.LEARNER)
    get = f"__import__('normlab.lab.exercises').lab.exercises.get({exercise.id!r})"
    if isinstance(shown, exercises.ChoiceExercise):
        right = next(i for i, c in enumerate(shown.choices) if c.correct)
        return repr(right), repr((right + 1) % len(shown.choices))
    if isinstance(shown, exercises.NumberExercise):
        return f"{get}.expected()", f"{get}.expected() * 3 + 7"
    assert isinstance(shown, exercises.CodeExercise)
    return repr(RIGHT_CODE[exercise.id]), repr(shown.starter)


def _runnable(nb: Any) -> tuple[Any, list[tuple[Any, str]]]:
    """A copy of ``nb`` to execute: each exercise's cell followed by one checking the right
    answer and one checking a wrong one (with what each must print first), and the widget
    cells kept only where ``normlab.widgets`` exists (another branch builds it)."""
    fresh = nbformat.reads(nbformat.writes(nb), as_version=4)
    cells, expect = [], []
    for cell in fresh.cells:
        source = cell.source
        if cell.cell_type == "code" and "normlab.widgets.Experiment(" in source and not HAS_WIDGETS:
            continue
        cells.append(cell)
        if cell.cell_type == "code" and source.startswith("answer = "):
            exercise_id = source.splitlines()[-1].split("'")[1]
            right, wrong = _right_and_wrong(exercises.get(exercise_id))
            for answer, verdict in ((right, "passed: "), (wrong, "not yet: ")):
                checking = v4.new_code_cell(f"check({exercise_id!r}, {answer})")
                cells.append(checking)
                expect.append((checking, verdict))
    fresh.cells = cells
    return fresh, expect


@pytest.fixture(scope="module")
def notebooks() -> dict[str, Any]:
    return {lesson.slug: lessonbook.notebook(lesson.slug, run) for lesson in lessons.LESSONS}


def _printed(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.parametrize("slug", [lesson.slug for lesson in lessons.LESSONS])
def test_a_lesson_notebook_runs_and_its_exercises_are_checked_there(
    slug: str, notebooks: dict[str, Any], tmp_path: Path
) -> None:
    nb = notebooks[slug]
    nbformat.validate(nb)
    shipped = [c for c in nb.cells if c.cell_type == "code" and c.outputs]
    assert shipped, "a lesson's listings come with what they print"
    fresh, expect = _runnable(nb)
    assert len(expect) == 2 * len(exercises.by_lesson(slug))
    client = NotebookClient(fresh, timeout=300, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises on any cell's error
    ran = {c.id: c for c in fresh.cells}
    for cell in shipped:  # the listings print in the kernel what the lesson shows them printing
        assert _printed(ran[cell.id]) == _printed(cell), cell.source
    for cell, verdict in expect:
        text = _printed(cell)
        assert verdict in text, (cell.source[:200], text[-2000:])


def test_exercise_cells_start_unanswered_and_say_so(notebooks: dict[str, Any]) -> None:
    """Every exercise has its cell calling check() on ``answer``; unanswered, it says what to do."""
    cells = [c for nb in notebooks.values() for c in nb.cells if c.cell_type == "code"]
    called = {c.source.splitlines()[-1] for c in cells if c.source.startswith("answer = ")}
    assert called == {f"check({e.id!r}, answer)" for e in exercises.EXERCISES}


def test_check_prints_the_lab_s_feedback(capsys: pytest.CaptureFixture[str]) -> None:
    exercise = exercises.get("drift-linear-passes-scale")
    assert isinstance(exercise, exercises.ChoiceExercise)
    right = next(c for c in exercise.choices if c.correct)
    lessonbook.check(exercise.id, right.text)
    assert capsys.readouterr().out == f"passed: {right.feedback}\n"
    lessonbook.check(exercise.id, None)
    assert "Put your answer in `answer`" in capsys.readouterr().out
    lessonbook.check(exercise.id, 9)
    assert capsys.readouterr().out.startswith("Not an answer: choice index 9 is not in [0, 3]")


def test_the_text_becomes_markdown_with_latex() -> None:
    html = (
        "<p>a <code>x*y</code> and <nl-tex>\\frac{1}{N}</nl-tex> &lt; 2*3</p>"
        '<div class="box note"><p class="box-title">Note</p><p>one</p><ul><li>a</li>'
        "<li>b</li></ul></div>"
        "<table><caption>what</caption><tr><th>k</th><th>v</th></tr><tr><td>1</td><td><nl-tex>"
        "q^*</nl-tex></td></tr></table><nl-tex display>a = b</nl-tex>"
        '<nl-code data-output="2">print(1 + 1)</nl-code><nl-code data-fragment>x.grad</nl-code>'
    )
    md, code, fragment = pieces(html)
    assert md.source == (
        "a `x*y` and $\\frac{1}{N}$ &lt; 2\\*3\n\n"
        "> **Note**\n>\n> one\n>\n> - a\n> - b\n\n"
        "*what*\n\n| k | v |\n|---|---|\n| 1 | $q^*$ |\n\n$$\na = b\n$$"
    )
    assert (code.kind, code.source, code.output) == ("code", "print(1 + 1)", "2")
    assert (fragment.kind, fragment.source) == ("markdown", "```\nx.grad\n```")


def test_widgets_become_cells_that_build_them(notebooks: dict[str, Any]) -> None:
    """A widget's cell builds it and shows it. In Jupyter, its runs and the next cells take
    turns at torch's random state by themselves (:mod:`normlab.turns`); a marimo app's cell
    waits for the first run, as marimo has no cell events to take turns with."""
    for lesson in lessons.LESSONS:
        cells = [
            c for c in notebooks[lesson.slug].cells if "normlab.widgets.Experiment(" in c.source
        ]
        built = [c.source.split("Experiment(")[1].split('"')[1] for c in cells]
        assert tuple(b for b in built if b != "training") == lesson.experiments  # + its views
        assert not any(".wait()" in c.source for c in cells)
    marimo = lessonbook.marimo_app("drift", run)
    assert marimo.count("Experiment(") == marimo.count("_widget.wait()") > 0


def test_a_training_view_becomes_a_training_widget_for_each_of_its_runs(
    notebooks: dict[str, Any],
) -> None:
    """A lesson's live training view (two runs side by side on the lab's page) becomes two
    ``training`` widget cells in its notebook: the first run's settings, then the second's."""

    def trained(slug: str) -> list[dict[str, Any]]:
        calls = [
            ast.parse(c.source)
            .body[1]
            .value  # widget = normlab.widgets.Experiment("training", ...)
            for c in notebooks[slug].cells
            if 'Experiment("training"' in c.source
        ]
        return [{k.arg: ast.literal_eval(k.value) for k in call.keywords} for call in calls]

    zeros, he = trained("initialization")
    assert (zeros["init"], he["init"]) == ("zeros", "he")
    assert zeros | {"init": "he", "norm": "none"} == he
    plain, batch = trained("bn-from-scratch")
    assert (plain["norm"], batch["norm"]) == ("none", "batch")
    assert plain | {"norm": "batch"} == batch and plain["lr"] == 2.0
    for nb in notebooks.values():
        assert not any("in the lab only" in c.source for c in nb.cells)


def test_the_cli_writes_a_notebook_and_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "drift.ipynb"
    assert cli.main(["notebook", "drift", "-o", str(target)]) == 0
    nbformat.validate(nbformat.reads(target.read_text(), as_version=4))
    capsys.readouterr()
    for argv, said in (
        (["notebook", "nope", "-o", str(target)], "lesson 'nope' not found, use one of: drift"),
        (["notebook", "drift", "-o", str(tmp_path / "x.txt")], "must end in .ipynb or .py"),
        (["notebook", "drift", "-o", "/no/such/x.ipynb"], "folder '/no/such' does not exist"),
        (["notebook", "drift"], "required: -o/--output"),
    ):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert cli.main(["notebook", "drift", "-o", str(tmp_path / "x.py")]) == 2
    assert "pip install marimo" in capsys.readouterr().err


def test_the_lab_serves_a_lesson_notebook(tmp_path: Path) -> None:
    app = create_app(db_path=tmp_path / "p.sqlite3", answers=None)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        answer = client.get("/lessons/drift/notebook")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/x-ipynb+json"
        nb = nbformat.reads(answer.text, as_version=4)
        nbformat.validate(nb)
        assert nb.cells[0].source.startswith("# Why activations drift")
        bad = client.get("/lessons/nope/notebook")
        assert bad.status_code == 404
        assert bad.json()["detail"]["parameter"] == "slug"
        assert "use one of: drift, batch-norm" in bad.json()["detail"]["message"]
        page = client.get("/lessons/drift").text
        assert 'href="/lessons/drift/notebook"' in page
        assert "/lessons/{slug}/notebook" in client.get("/openapi.json").json()["paths"]


@pytest.mark.skipif(importlib.util.find_spec("marimo") is None, reason="marimo not installed")
def test_the_marimo_app_passes_marimo_s_check(tmp_path: Path) -> None:
    app = tmp_path / "drift.py"
    app.write_text(lessonbook.marimo_app("drift", run))
    checked = subprocess.run(
        [sys.executable, "-m", "marimo", "check", "--strict", str(app)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout
    # the check catches a name defined in two cells, the trap the listings' functions avoid
    broken = tmp_path / "broken.py"
    text = app.read_text().replace("    _listing()\n", "    x = 1\n    _listing()\n", 2)
    broken.write_text(text)
    again = subprocess.run(
        [sys.executable, "-m", "marimo", "check", "--strict", str(broken)],
        capture_output=True,
        text=True,
    )
    assert again.returncode != 0, again.stdout
