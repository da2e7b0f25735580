"""The exercises at the end of every lesson: the registry.

Each lesson's folder holds its exercises (``lessons/<folder>/exercises.py``, an
``EXERCISES`` tuple), gathered here in lesson order; :mod:`normlab.lab.lessons.exercise` defines
the kinds and their checking; the sandbox side of a code check (the probe that runs beside the
learner's code) is :mod:`normlab.lab.sandbox.exercise_child`.

>>> [e.id for e in by_lesson("batch-norm")][:2]
['bn-eval-statistics', 'bn-running-mean-update']
>>> get("he-derivation").kind
'code'
>>> sorted({e.kind for e in EXERCISES})
['choice', 'code', 'number']
"""

from __future__ import annotations

import dataclasses
import importlib
from collections import Counter

from normlab.lab.lessons import HERE, LESSONS, Lesson
from normlab.lab.lessons.exercise import (
    BadSubmission,
    ChoiceExercise,
    CodeExercise,
    Exercise,
    NumberExercise,
    Verdict,
)

__all__ = [
    "EXERCISES",
    "BadSubmission",
    "ChoiceExercise",
    "CodeExercise",
    "Exercise",
    "NumberExercise",
    "UnknownExercise",
    "Verdict",
    "by_lesson",
    "get",
]


def _of(lesson: Lesson) -> tuple[Exercise, ...]:
    """The exercises in ``lesson``'s folder (none without an ``exercises.py``), each naming it."""
    if not (HERE / lesson.folder / "exercises.py").is_file():
        return ()
    module = importlib.import_module(f"normlab.lab.lessons.{lesson.folder}.exercises")
    found: tuple[Exercise, ...] = module.EXERCISES
    strays = [e.id for e in found if e.lesson != lesson.slug]
    if strays:
        raise RuntimeError(f"exercises {strays} in lessons/{lesson.folder} name another lesson")
    return found


def _dealt(found: tuple[Exercise, ...]) -> tuple[Exercise, ...]:
    """``found`` with each choice exercise numbered (its ``slot``) among those with as many
    choices, in order: the slots spread the right choice's place evenly over a learner's
    questions (see :meth:`ChoiceExercise.for_learner`)."""
    seen: Counter[int] = Counter()
    out = []
    for e in found:
        if isinstance(e, ChoiceExercise):
            k = len(e.choices)
            e = dataclasses.replace(e, slot=seen[k])
            seen[k] += 1
        out.append(e)
    return tuple(out)


EXERCISES: tuple[Exercise, ...] = _dealt(tuple(e for lesson in LESSONS for e in _of(lesson)))
"""Every exercise, in lesson order, then in the order its lesson lists them."""

_BY_ID = {e.id: e for e in EXERCISES}
if len(_BY_ID) != len(EXERCISES):
    raise RuntimeError("two exercises share an id")
_SLUGS = tuple(lesson.slug for lesson in LESSONS)


class UnknownExercise(ValueError):
    """An exercise id that is not registered."""


def get(exercise_id: str) -> Exercise:
    """The exercise called ``exercise_id``; :class:`UnknownExercise` names the valid ids."""
    try:
        return _BY_ID[exercise_id]
    except (KeyError, TypeError):
        raise UnknownExercise(
            f"exercise {exercise_id!r} not found, use one of: {', '.join(_BY_ID)}"
        ) from None


def by_lesson(slug: str) -> tuple[Exercise, ...]:
    """The exercises closing lesson ``slug``, in order; ``ValueError`` for an unknown slug."""
    if slug not in _SLUGS:
        raise ValueError(f"lesson {slug!r} not found, use one of: {', '.join(_SLUGS)}")
    return tuple(e for e in EXERCISES if e.lesson == slug)
