"""A lesson as a notebook: its text, its listings, its widgets and its checked exercises.

``normlab notebook LESSON -o lesson.ipynb`` and the lesson page's "Download this lesson as a
notebook" (``GET /lessons/{slug}/notebook``) write what :func:`notebook` builds:

- the lesson's text as markdown cells, rendered by the lab's own templates with their live
  numbers (:func:`body`), formulas as ``$...$`` LaTeX;
- each plain-PyTorch listing as a code cell, what the lab shows it printing as its output;
- each widget as a cell that builds it: ``normlab.widgets.Experiment("NAME", **params)``;
- each exercise as a cell that calls :func:`check`, the lab's own checker.

``-o lesson.py`` writes the same as a marimo app (:func:`marimo_app`).

A code exercise's check needs somewhere to run the learner's code. The lab runs it in its
sandbox, which protects the lab's server from its visitors; a notebook already runs the
learner's code with the learner's own rights, so there is nothing to guard there, and the
sandbox (bubblewrap, cgroups) is often missing. :class:`Subprocess` runs the same job as the lab
(the same probe, the same files, the same time limit) in a fresh Python process, so the code
cannot disturb the kernel's state and a runaway loop is stopped, and the same judge reads it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, DictLoader, Environment
from markupsafe import Markup, escape

from normlab.experiments import get_experiment, run_experiment
from normlab.lab import exercises, lessons
from normlab.lab.htmlmd import Piece, pieces
from normlab.lab.lessons.markup import NORMLAB_LABEL
from normlab.lab.site import environment
from normlab.notebook import KERNEL, dumps

__all__ = ["Subprocess", "body", "check", "dumps", "judge", "lesson", "marimo_app", "notebook"]

LEARNER = "notebook"
"""The learner id whose order a notebook shows a choice exercise's choices in."""

Run = Callable[[str, dict[str, Any]], dict[str, Any]]
"""``run(name, params)`` -> the run's answer, as the lab's runner gives it."""


def lesson(slug: str) -> lessons.Lesson:
    """The lesson called ``slug``; ``ValueError`` naming the valid ones."""
    found = lessons.find(slug)
    if found is None:
        valid = ", ".join(x.slug for x in lessons.LESSONS)
        raise ValueError(f"lesson {slug!r} not found, use one of: {valid}")
    return found


def run_plain(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """A run's answer as the lab's runner gives it (its ``to_dict()`` through JSON)."""
    answer: dict[str, Any] = json.loads(json.dumps(run_experiment(name, **params).to_dict()))
    return answer


# -- the lesson's text, with markers for what becomes cells ------------------------------------


def _tex(latex: str, display: bool = False) -> Markup:
    return Markup(f"<nl-tex{' display' if display else ''}>{escape(latex)}</nl-tex>")


def _code(
    source: str,
    output: str | None = None,
    check: bool = True,
    normlab: bool | str = False,
    *,
    id: str,
) -> Markup:
    attrs = "" if output is None else f' data-output="{escape(str(output).strip(chr(10)))}"'
    if normlab:
        attrs += f' data-normlab="{escape(NORMLAB_LABEL if normlab is True else normlab)}"'
    if not check:
        attrs += " data-fragment"
    return Markup(f"<nl-code{attrs}>{escape(str.__str__(source))}</nl-code>")


def _widget(
    name: str, id: str | None = None, show: Sequence[str] | None = None, **params: Any
) -> Markup:
    get_experiment(name)  # an unknown name raises, as on the lab's page
    return Markup(
        f'<nl-widget data-experiment="{escape(name)}" '
        f'data-params="{escape(json.dumps(params))}"></nl-widget>'
    )


def _train_view(
    caption: str,
    compare: dict[str, Any] | None = None,
    hide: Sequence[str] = (),
    lock: Sequence[str] = (),
    **setup: Any,
) -> Markup:
    """The lab's training view as the notebook's widgets: its caption, then a ``training``
    widget with the run's ``setup`` and, when the view compares, one with the second run's
    (``setup`` with ``compare`` over it), one under the other. ``hide`` and ``lock`` are the
    lab page's classroom flags: a notebook's widget shows every control."""
    sides = [setup] if compare is None else [setup, {**setup, **compare}]
    shown = Markup(f"<p><em>{escape(caption)}</em></p>")
    return shown + Markup("").join(_widget("training", **side) for side in sides)


@functools.cache
def _environment() -> Environment:
    """The lab's environment, with the layout reduced to the lesson's body and the helpers
    that draw formulas, listings and widgets swapped for markers (:mod:`normlab.lab.htmlmd`)."""
    env = environment()
    assert env.loader is not None
    bare = DictLoader({"lesson.html": "{% block body %}{% endblock %}"})
    env.loader = ChoiceLoader([bare, env.loader])
    env.globals.update(tex=_tex, code=_code)
    env.filters["code"] = _code
    return env


def body(found: lessons.Lesson, run: Run = run_plain) -> str:
    """The lesson's body as the lab renders it, live numbers from ``run``, with markers."""
    template = _environment().get_template(found.template)

    def result(name: str, **params: Any) -> dict[str, Any]:  # the template's result(...)
        return run(name, params)

    return template.render(
        lesson=found, result=result, widget=_widget, train_view=_train_view
    )  # fmt: skip


# -- cells -------------------------------------------------------------------------------------

SETUP = "from normlab.lab.lessonbook import check"
EXERCISES_INTRO = (
    "## Exercises\n\nPut your answer in `answer` and run the cell: `check` asks the lab's own "
    "checker and prints its feedback. Code answers run in a fresh Python process."
)


def widget_source(
    name: str, params: Mapping[str, Any], var: str = "widget", wait: bool = False
) -> str:
    """The code of a widget's cell: ``normlab.widgets.Experiment("NAME", **params)``.

    In a Jupyter kernel the widget's runs and the next cells take turns at torch's random
    state by themselves (:mod:`normlab.turns`). marimo runs its cells without the events that
    this needs, so its cell waits for the first run (``wait``) before the next cells run."""
    args = "".join(f", {k}={v!r}" for k, v in params.items())
    waits = f"{var}.wait()  # its first run shares torch's random state with the cells below\n"
    return (
        f"import normlab.widgets\n\n{var} = normlab.widgets.Experiment({json.dumps(name)}{args})\n"
        f"{waits if wait else ''}{var}"
    )


def _math(text: str) -> str:
    r"""Exercise text with ``\( ... \)`` and ``\[ ... \]`` as ``$...$`` and ``$$...$$``."""
    text = re.sub(r"\\\((.+?)\\\)", lambda m: f"${m.group(1).strip()}$", text, flags=re.S)
    return re.sub(r"\\\[(.+?)\\\]", lambda m: f"$${m.group(1).strip()}$$", text, flags=re.S)


def _literal(code: str) -> str:
    """``code`` as a Python string literal a learner can edit: a raw triple-quoted one if it can."""
    if "'''" in code or code.endswith("\\"):
        return repr(code)
    return "r'''\n" + code.strip("\n") + "\n'''"


def exercise_cells(exercise: exercises.Exercise, name: str = "answer") -> tuple[str, str]:
    """An exercise's markdown (prompt, choices) and the code of its cell that calls :func:`check`
    on the variable ``name``."""
    text = f"### {exercise.id}\n\n{_math(exercise.prompt)}"
    if isinstance(exercise, exercises.ChoiceExercise):
        shown = exercise.for_learner(LEARNER).choices
        text += "\n\n" + "\n".join(f"- **{i}**: {_math(c.text)}" for i, c in enumerate(shown))
        answer = f"None  # the number of your choice, 0 to {len(shown) - 1}"
    elif isinstance(exercise, exercises.NumberExercise):
        answer = "None  # a number"
    else:
        assert isinstance(exercise, exercises.CodeExercise)
        checks = "\n".join(f"{i}. {name}" for i, name in enumerate(exercise.checks, 1))
        text += f"\n\nThe checks, in order:\n\n{checks}"
        answer = _literal(exercise.starter)
    return text, f"{name} = {answer}\ncheck({exercise.id!r}, {name})"


def _intro(found: lessons.Lesson) -> str:
    return (
        f"# {found.title}\n\n*Lesson {found.number} of {len(lessons.LESSONS)} of the normlab "
        f"lab.* {found.summary}\n\nEvery number in the text comes from a live run when this "
        "notebook was made; the code cells print the same on the same machine."
    )


def _cell(piece: Piece, count: int) -> Any:
    from nbformat import v4  # here, not with the module: see normlab.notebook's docstring

    if piece.kind == "markdown":
        return v4.new_markdown_cell(piece.source)
    if piece.kind == "widget":
        return v4.new_code_cell(widget_source(piece.experiment, piece.params))
    cell = v4.new_code_cell(piece.source)
    if piece.output is not None:
        cell.outputs = [v4.new_output("stream", name="stdout", text=piece.output + "\n")]
        cell.execution_count = count
    return cell


def notebook(slug: str, run: Run = run_plain) -> Any:
    """Lesson ``slug`` as a Jupyter notebook (``nbformat`` v4), validated."""
    import nbformat
    from nbformat import v4

    found = lesson(slug)
    cells = [v4.new_markdown_cell(_intro(found))]
    cells += [_cell(p, i) for i, p in enumerate(pieces(body(found, run)), 1)]
    mine = exercises.by_lesson(found.slug)
    if mine:
        cells += [v4.new_markdown_cell(EXERCISES_INTRO), v4.new_code_cell(SETUP)]
        for exercise in mine:
            text, code = exercise_cells(exercise)
            cells += [v4.new_markdown_cell(text), v4.new_code_cell(code)]
    for i, cell in enumerate(cells):
        cell.id = f"cell-{i}"  # stable ids: the same lesson gives the same file
    nb = v4.new_notebook(cells=cells, metadata={"kernelspec": KERNEL})
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    return nb


# -- checking, as the lab does -----------------------------------------------------------------


@dataclass
class Finished:
    """One finished run of a code check (what :class:`~.lessons.exercise.RunLike` reads)."""

    status: str  # "ok", "error", "timeout" or "killed"
    stdout: str
    stderr: str


class Subprocess:
    """Runs a code check's program in a fresh Python process (see the module docstring)."""

    def run(
        self, code: str, *, files: Mapping[str, str] | None = None, wall_s: float | None = None
    ) -> Finished:
        """Run ``code`` with ``files`` in a private folder (its working folder), stopped after
        ``wall_s`` seconds."""
        with tempfile.TemporaryDirectory(prefix="normlab-check-") as folder:
            for name, text in (files or {}).items():
                Path(folder, name).write_text(text, encoding="utf-8")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            try:
                done = subprocess.run(
                    [sys.executable, "-c", code],
                    cwd=folder,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=wall_s,
                )
            except subprocess.TimeoutExpired as exc:
                out, err = (_text(s) for s in (exc.stdout, exc.stderr))
                return Finished("timeout", out, err)
        status = "ok" if done.returncode == 0 else "killed" if done.returncode < 0 else "error"
        return Finished(status, done.stdout, done.stderr)


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def judge(exercise_id: str, answer: object) -> exercises.Verdict:
    """The lab's verdict on ``answer`` (a choice's index in the notebook's order or its text, a
    number, or code); ``ValueError`` for an unknown id or an answer of the wrong kind."""
    exercise = exercises.get(exercise_id).for_learner(LEARNER)
    if isinstance(exercise, exercises.CodeExercise):
        return exercise.check(answer, Subprocess())
    assert isinstance(exercise, exercises.ChoiceExercise | exercises.NumberExercise)
    return exercise.check(answer)


def check(exercise_id: str, answer: object) -> None:
    """Print the lab's feedback on ``answer`` to exercise ``exercise_id``."""
    if answer is None:
        print("Put your answer in `answer` and run this cell again.")
        return
    try:
        verdict = judge(exercise_id, answer)
    except ValueError as exc:  # BadSubmission, UnknownExercise: say what is allowed
        print(f"Not an answer: {exc}")
        return
    if verdict.output:
        print(f"Your code printed:\n{verdict.output}\n")
    print(("passed: " if verdict.passed else "not yet: ") + verdict.feedback)
    if verdict.passed and verdict.explanation:
        print("\n" + verdict.explanation)


# -- marimo ------------------------------------------------------------------------------------

MARIMO_HEAD = """import marimo

__generated_with = "{version}"
app = marimo.App()


@app.cell
def _():
    import marimo as mo
    from normlab.lab.lessonbook import check

    return check, mo


@app.cell
def _():
    import normlab.widgets

    return (normlab,)
"""


def _indented(code: str, spaces: int = 4) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line.strip() else "" for line in code.split("\n"))


def _marimo_cell(code: str, uses: str = "", hide: bool = False) -> str:
    decorator = "@app.cell(hide_code=True)" if hide else "@app.cell"
    return f"\n\n{decorator}\ndef _({uses}):\n{_indented(code)}\n    return\n"


def _md(text: str) -> str:
    literal = f'r"""\n{text}\n"""' if '"""' not in text and not text.endswith("\\") else repr(text)
    return f"mo.md({literal})"


def marimo_app(slug: str, run: Run = run_plain) -> str:
    """Lesson ``slug`` as a marimo app (the text of its ``.py`` file).

    marimo lets a name be defined in one cell only, and the lesson's listings each start
    afresh (``x``, ``torch``, ``layers`` again and again), so each listing runs inside a
    function of its own (``def _listing(): ...``; names starting with ``_`` are private to
    their cell) and keeps its text as the lesson has it.
    """
    found = lesson(slug)
    try:
        version = importlib.metadata.version("marimo")
    except importlib.metadata.PackageNotFoundError:
        version = "0.25.2"  # the version this layout was checked with
    out = [MARIMO_HEAD.format(version=version), _marimo_cell(_md(_intro(found)), "mo", hide=True)]
    for piece in pieces(body(found, run)):
        if piece.kind == "markdown":
            out.append(_marimo_cell(_md(piece.source), "mo", hide=True))
        elif piece.kind == "widget":
            code = widget_source(piece.experiment, piece.params, "_widget", wait=True)
            code = code.replace("import normlab.widgets\n\n", "")  # imported in its own cell
            out.append(_marimo_cell(code, "normlab"))
        else:
            out.append(_marimo_cell(f"def _listing():\n{_indented(piece.source)}\n\n_listing()"))
    mine = exercises.by_lesson(found.slug)
    if mine:
        out.append(_marimo_cell(_md(EXERCISES_INTRO), "mo", hide=True))
    for exercise in mine:
        text, code = exercise_cells(exercise, "_answer")
        out.append(_marimo_cell(_md(text), "mo", hide=True))
        out.append(_marimo_cell(code, "check"))
    out.append('\n\nif __name__ == "__main__":\n    app.run()\n')
    return "".join(out)


def write(slug: str, target: Path) -> None:
    """Write lesson ``slug`` to ``target``: a Jupyter notebook (``.ipynb``) or a marimo app
    (``.py``)."""
    text = marimo_app(slug) if target.suffix == ".py" else dumps(notebook(slug))
    target.write_text(text, encoding="utf-8")
