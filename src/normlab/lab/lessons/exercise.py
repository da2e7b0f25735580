"""The three kinds of exercise (choice, number, code), their checking, and a verdict.

An exercise is data: an id, the lesson it closes, a prompt, and what a right answer is. Its
:meth:`~Exercise.public` dict is what ``GET /api/exercises`` shows, and never holds the answer.

- :class:`ChoiceExercise`: pick one of several statements; every choice carries the feedback a
  learner who picks it should read.
- :class:`NumberExercise`: type a number. The expected value is a function called at check
  time (a formula, or a live call into normlab), never a typed-in constant, and the tolerance
  is stated in the prompt's data. Known wrong turns (*traps*: the biased variance where the
  unbiased one belongs, ...) get their own feedback.
- :class:`CodeExercise`: write code. The learner's code runs in the sandbox with a *probe*
  that calls it on inputs drawn fresh for this submission and reports what came back; the
  server then judges that report itself (see :mod:`normlab.lab.sandbox.exercise_child`), one
  named check after another, and says which check failed and by how much.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from markupsafe import escape

from normlab.lab.errors import checked_code
from normlab.lab.lessons.markup import tex
from normlab.lab.lessons.numbers import EXAMPLES, parse_number
from normlab.lab.sandbox import exercise_child
from normlab.lab.sandbox.exercise_child import (
    CHILD_MAIN,
    JOB_FILE,
    MARKER,
    MODULE_FILE,
    PROBES,
    SUBMISSION_FILE,
)

MAX_CODE_CHARS = 20_000
"""The longest code a learner may submit to a code exercise (characters)."""


@functools.cache
def _child_source() -> str:
    """The text of :mod:`normlab.lab.sandbox.exercise_child`, shipped into every code check."""
    return Path(exercise_child.__file__).read_text(encoding="utf-8")


class BadSubmission(ValueError):
    """A submission that is not an answer to this exercise at all (HTTP 422).

    ``parameter`` names the field at fault (``"answer"``, ``"code"``).
    """

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True)
class Verdict:
    """The outcome of one submission.

    ``output`` is what the learner's code printed (code exercises only), without the probe's
    report line. ``explanation`` is what a right answer is shown after its feedback (the
    closed form, the derivation), never before: text with ``\\( ... \\)`` math and
    `` `code` `` spans, sent as HTML by :meth:`to_dict` (see :func:`explanation_html`).
    """

    passed: bool
    feedback: str
    output: str = ""
    explanation: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``{"passed", "feedback"}``, and ``"explanation"`` (HTML) when there is one."""
        out: dict[str, Any] = {"passed": self.passed, "feedback": self.feedback}
        if self.explanation:
            out["explanation"] = explanation_html(self.explanation)
        return out


_MATH_OR_CODE = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]|`([^`]+)`", re.S)


def explanation_html(text: str) -> str:
    r"""``text`` as HTML: ``\( ... \)`` and ``\[ ... \]`` as MathML (the lessons' :func:`tex`),
    backticks as ``<code>``, everything else escaped.

    >>> html = explanation_html(r"so \(n\,\mathrm{Var}(w) = 2\) for `relu` & co")
    >>> html.startswith('so <span class="nl-math"><math')
    True
    >>> html.endswith("for <code>relu</code> &amp; co")
    True
    >>> explanation_html("a < b")
    'a &lt; b'
    """
    parts: list[str] = []
    at = 0
    for match in _MATH_OR_CODE.finditer(text):
        parts.append(escape(text[at : match.start()]))
        inline, block, code = match.groups()
        if code is not None:
            parts.append(f"<code>{escape(code)}</code>")
        else:
            parts.append(tex(block if inline is None else inline, display=inline is None))
        at = match.end()
    parts.append(escape(text[at:]))
    return "".join(parts)


@dataclass(frozen=True)
class Exercise:
    """What every exercise has: an id (lowercase, dashes), its lesson's slug, a prompt.

    Prompts may mark code with backticks (the page shows them as ``<code>``).
    """

    id: str
    lesson: str
    prompt: str
    kind: ClassVar[str] = ""

    def public(self) -> dict[str, Any]:
        """What a learner may see before answering (no answer in it)."""
        return {"id": self.id, "lesson": self.lesson, "kind": self.kind, "prompt": self.prompt}

    def for_learner(self, learner: str) -> Exercise:
        """The exercise as ``learner`` sees it (the same for every kind but choice)."""
        return self


# -- choice ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """One statement to pick, and what a learner who picks it is told."""

    text: str
    feedback: str
    correct: bool = False


@dataclass(frozen=True)
class ChoiceExercise(Exercise):
    """Pick the one right statement among ``choices``.

    The answer is the text of a choice (as the page sends it) or its 0-based index in
    ``choices``. Each learner sees the choices in an order of their own (:meth:`for_learner`),
    and over all of one learner's questions the right one sits in every place equally often,
    so where it sits says nothing.

    ``slot`` is the exercise's place among the registry's choice exercises with as many
    choices (:mod:`normlab.lab.exercises` sets it); it decides where the right choice goes.
    """

    choices: tuple[Choice, ...]
    slot: int = dataclasses.field(default=0, compare=False)
    kind: ClassVar[str] = "choice"

    def __post_init__(self) -> None:
        right = [c for c in self.choices if c.correct]
        if len(self.choices) < 2 or len(right) != 1:
            raise ValueError(
                f"exercise {self.id!r}: give at least 2 choices and exactly 1 correct, got "
                f"{len(self.choices)} choices with {len(right)} correct"
            )

    def public(self) -> dict[str, Any]:
        return {**super().public(), "choices": [c.text for c in self.choices]}

    def for_learner(self, learner: str) -> ChoiceExercise:
        """This exercise with its choices ordered for ``learner``.

        Where the right choice goes is dealt like cards: the questions of ``k`` choices are
        taken ``k`` at a time in registry order (slots ``0..k-1``, then ``k..2k-1``, ...), and
        each such block gets its own shuffle of the places ``0..k-1`` (:func:`right_place`).
        So for every learner each place holds the right choice ``n // k`` or ``n // k + 1``
        times over ``n`` questions, never clustered, and for every question each place is
        equally likely over learners. The wrong choices fill the other places in an order drawn
        from the learner's id and the exercise's id. Everything is seeded by the learner's id:
        the same learner gets the same order on every visit and after a restart, another
        learner (another progress database) an order of their own. Indices sent with an answer
        count in this order.

        Example::

            >>> ex = ChoiceExercise("q", "drift", "?", (Choice("a", "..", True), Choice("b", "..")))
            >>> ex.for_learner("x").choices == ex.for_learner("x").choices
            True
        """
        wrong = [c for c in self.choices if not c.correct]
        random.Random(f"{learner}/{self.id}").shuffle(wrong)  # str seeds hash with SHA-512
        right = next(c for c in self.choices if c.correct)
        wrong.insert(right_place(learner, self.slot, len(self.choices)), right)
        return dataclasses.replace(self, choices=tuple(wrong))

    def pick(self, answer: object) -> Choice:
        """The choice ``answer`` names; :class:`BadSubmission` if it names none."""
        n = len(self.choices)
        if isinstance(answer, str):
            for choice in self.choices:
                if choice.text == answer:
                    return choice
            raise BadSubmission(
                "answer", f"{_short(answer)} is not one of the {n} choices of {self.id!r}"
            )
        if isinstance(answer, float) and answer.is_integer():
            answer = int(answer)  # JSON has one kind of number: 2.0 is the index 2
        if isinstance(answer, int) and not isinstance(answer, bool):
            if 0 <= answer < n:
                return self.choices[answer]
            raise BadSubmission("answer", f"choice index {answer} is not in [0, {n - 1}]")
        raise BadSubmission(
            "answer",
            f"{_short(answer)} ({type(answer).__name__}) is not a choice: send the text of a "
            f"choice or its index in [0, {n - 1}]",
        )

    def check(self, answer: object) -> Verdict:
        choice = self.pick(answer)
        return Verdict(choice.correct, choice.feedback)


def right_place(learner: str, slot: int, k: int) -> int:
    """Where ``learner`` finds the right choice of the question in ``slot`` (of ``k`` choices).

    Slots ``b*k .. b*k + k - 1`` form block ``b``, whose places are a shuffle of ``0..k-1``
    drawn from the learner's id and ``b``: every place once per block.

    >>> sorted(right_place("x", slot, 4) for slot in range(4, 8))
    [0, 1, 2, 3]
    """
    places = list(range(k))
    random.Random(f"{learner}/{k}/{slot // k}").shuffle(places)
    return places[slot % k]


# -- number ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trap:
    """A wrong number a learner is likely to reach, and what to tell them if they do."""

    value: Callable[[], float]
    feedback: str


@dataclass(frozen=True)
class NumberExercise(Exercise):
    """Type a number; right if within ``rel_tol`` (relative) or ``abs_tol`` of ``expected()``.

    ``solution`` is said to a right answer and ``hint`` to a wrong one; both may use
    ``{expected}`` (the value, formatted with ``digits`` significant digits).
    """

    expected: Callable[[], float]
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    digits: int = 4
    solution: str = ""
    hint: str = ""
    traps: tuple[Trap, ...] = ()
    kind: ClassVar[str] = "number"

    def __post_init__(self) -> None:
        if self.rel_tol <= 0 and self.abs_tol <= 0:
            raise ValueError(f"exercise {self.id!r}: give rel_tol or abs_tol (> 0)")

    def tolerance_text(self) -> str:
        parts = []
        if self.rel_tol > 0:
            parts.append(f"within {self.rel_tol * 100:g}% of the exact value")
        if self.abs_tol > 0:
            parts.append(f"within {self.abs_tol:g} of the exact value")
        return " or ".join(parts)

    def public(self) -> dict[str, Any]:
        tolerance = {"relative": self.rel_tol, "absolute": self.abs_tol}
        return {**super().public(), "tolerance": tolerance, "tolerance_text": self.tolerance_text()}

    def _close(self, a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=self.rel_tol, abs_tol=self.abs_tol)

    def check(self, answer: object) -> Verdict:
        """Judge ``answer``: a JSON number, or the text as typed (read by :func:`parse_number`)."""
        value = _number(answer)
        expected = self.expected()
        shown = f"{expected:.{self.digits}g}"
        if self._close(value, expected):
            return Verdict(True, self.solution.format(expected=shown))
        for trap in self.traps:
            if self._close(value, trap.value()):
                return Verdict(False, trap.feedback)
        side = "too large" if value > expected else "too small"
        return Verdict(False, f"{value:g} is {side}. " + self.hint.format(expected=shown))


def _number(answer: object) -> float:
    """``answer`` as a finite float; :class:`BadSubmission` naming what is allowed."""
    if isinstance(answer, str):
        try:
            return parse_number(answer)
        except ValueError as exc:
            raise BadSubmission("answer", str(exc)) from None
    if isinstance(answer, bool) or not isinstance(answer, int | float):
        raise BadSubmission(
            "answer",
            f"answer {_short(answer)} ({type(answer).__name__}) is not a number: send a JSON "
            f"number or the text as typed, {EXAMPLES}",
        )
    try:
        value = float(answer)
    except OverflowError:  # an int past float's range
        value = math.inf
    if not math.isfinite(value):
        raise BadSubmission(
            "answer", f"answer {_short(answer)} is not allowed: it must be a finite number"
        )
    return value


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- code --------------------------------------------------------------------------------------


class RunLike(Protocol):
    """What a code check reads of a sandbox run (:class:`normlab.lab.sandbox.RunResult`)."""

    status: str
    stdout: str
    stderr: str


class Executor(Protocol):
    """Runs a program with private files (:class:`normlab.lab.sandbox.Sandbox`)."""

    def run(
        self, code: str, *, files: Mapping[str, str] | None = None, wall_s: float | None = None
    ) -> RunLike: ...


@dataclass(frozen=True)
class CodeJob:
    """One code check, ready for the sandbox: ``Sandbox.run(job.code, files=job.files, ...)``."""

    code: str
    files: dict[str, str]
    nonce: str
    args: dict[str, Any]
    wall_s: float


Check = tuple[str, Callable[[], "str | None"]]
"""A named check: returns ``None`` when it holds, else what went wrong."""


def run_checks(checks: Sequence[Check], success: str, explanation: str = "") -> Verdict:
    """Run ``checks`` in order; the first failure is the verdict, naming it ``check i of n``.

    ``explanation`` goes with a pass only (see :class:`Verdict`).
    """
    n = len(checks)
    for i, (name, check) in enumerate(checks, 1):
        problem = check()
        if problem is not None:
            return Verdict(False, f"check {i} of {n} ({name}) failed: {problem}")
    return Verdict(True, f"all {n} checks passed. {success}", explanation=explanation)


@dataclass(frozen=True)
class CodeExercise(Exercise):
    """Write code; checked by running it in the sandbox, then judging what the probe saw.

    Args:
        starter: the code the editor starts with (it runs, and fails a check).
        probe: the name of a probe in :data:`normlab.lab.sandbox.exercise_child.PROBES`. Called
            in the sandbox as ``probe(namespace, args)`` after the learner's code ran, it returns
            a JSON-ready dict of what the learner's code produced.
        make_args: draws the probe's inputs for one submission (fresh each time, so outputs
            cannot be written down in advance).
        judge: ``judge(args, report)`` -> :class:`Verdict`, on the server, from the probe's
            report; usually :func:`run_checks` over the named ``checks``.
        checks: the names of the checks, in order (shown to the learner).
        wall_s: wall-clock limit for the run, in seconds.
    """

    starter: str
    probe: str
    make_args: Callable[[random.Random], dict[str, Any]]
    judge: Callable[[dict[str, Any], dict[str, Any]], Verdict]
    checks: tuple[str, ...]
    wall_s: float = 30.0
    kind: ClassVar[str] = "code"

    def __post_init__(self) -> None:
        if self.probe not in PROBES:
            raise ValueError(
                f"exercise {self.id!r}: probe {self.probe!r} not found, use one of {list(PROBES)}"
            )

    def public(self) -> dict[str, Any]:
        return {
            **super().public(),
            "starter": self.starter,
            "checks": list(self.checks),
            "time_limit_s": self.wall_s,
        }

    def prepare(self, code: object) -> CodeJob:
        """Validate ``code`` and build the sandbox job (a fresh nonce and fresh inputs)."""
        try:
            code = checked_code(code, MAX_CODE_CHARS)
        except (TypeError, ValueError) as exc:
            raise BadSubmission("code", str(exc)) from None
        nonce = secrets.token_hex(16)
        args = self.make_args(random.Random(secrets.randbits(64)))
        job = {"nonce": nonce, "probe": self.probe, "args": args}
        files = {SUBMISSION_FILE: code, JOB_FILE: json.dumps(job), MODULE_FILE: _child_source()}
        return CodeJob(code=CHILD_MAIN, files=files, nonce=nonce, args=args, wall_s=self.wall_s)

    def verdict(self, job: CodeJob, run: RunLike) -> Verdict:
        """Judge one finished sandbox run of ``job``."""
        output, report, marks = _split_report(run.stdout, job.nonce)
        shown = _tail("\n".join(part for part in (output, run.stderr.strip("\n")) if part))
        if marks > 1:
            return Verdict(False, "the check's report line appeared more than once", shown)
        if run.status == "timeout":
            return Verdict(
                False,
                f"your code ran longer than the {job.wall_s:g} s limit and was stopped "
                "(an endless loop, or far more work than the exercise needs?)",
                shown,
            )
        if report is None:
            if run.status == "killed":
                why = "was stopped (out of memory, or another limit of the sandbox)"
            elif "stdout truncated" in run.stdout:
                why = "printed more than the sandbox keeps, so the check's report was lost"
            else:
                why = "ended before the checks could run (did it call os._exit?)"
            return Verdict(False, f"your code {why}; its last output:\n{shown}", shown)
        if "error" in report:
            return Verdict(False, f"your code raised {report['error']}", shown)
        return dataclasses.replace(self.judge(job.args, report["report"]), output=shown)

    def check(self, code: object, sandbox: Executor) -> Verdict:
        """Run ``code`` through ``sandbox`` and judge it (blocking)."""
        job = self.prepare(code)
        return self.verdict(job, sandbox.run(job.code, files=job.files, wall_s=job.wall_s))


def _split_report(stdout: str, nonce: str) -> tuple[str, dict[str, Any] | None, int]:
    """Separate the learner's output from the probe's report line (and count report lines)."""
    mark = f"{MARKER}-{nonce} "
    kept: list[str] = []
    report: dict[str, Any] | None = None
    marks = 0
    for line in stdout.splitlines(keepends=True):
        if line.startswith(mark):
            marks += 1
            try:
                parsed = json.loads(line[len(mark) :])
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, dict):
                report = parsed
        else:
            kept.append(line)
    return "".join(kept).rstrip("\n"), report, marks


def _tail(text: str, limit: int = 2000) -> str:
    text = text.strip("\n")
    return text if len(text) <= limit else "...\n" + text[-limit:]
