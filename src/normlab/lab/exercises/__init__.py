"""The exercises at the end of every lesson: the registry.

One module per lesson holds its exercises (:mod:`.drift`, :mod:`.batch_norm`,
:mod:`.initialization`, :mod:`.bn_from_scratch`, :mod:`.bn_training`, :mod:`.doctor`);
:mod:`.base` defines the kinds and their checking; the sandbox side of a code check (the probe
that runs beside the learner's code) is :mod:`normlab.lab.sandbox.exercise_child`.

>>> [e.id for e in by_lesson("batch-norm")][:2]
['bn-eval-statistics', 'bn-running-mean-update']
>>> get("he-derivation").kind
'code'
>>> sorted({e.kind for e in EXERCISES})
['choice', 'code', 'number']
"""

from __future__ import annotations

from normlab.lab.exercises import (
    batch_norm,
    bn_from_scratch,
    bn_training,
    doctor,
    drift,
    dynamical_isometry,
    edge_of_chaos,
    initialization,
    residual_normalization,
    width_depth,
)
from normlab.lab.exercises.base import (
    BadSubmission,
    ChoiceExercise,
    CodeExercise,
    Exercise,
    NumberExercise,
    Verdict,
)
from normlab.lab.lessons import LESSONS

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

EXERCISES: tuple[Exercise, ...] = (
    drift.EXERCISES
    + batch_norm.EXERCISES
    + initialization.EXERCISES
    + bn_from_scratch.EXERCISES
    + bn_training.EXERCISES
    + edge_of_chaos.EXERCISES
    + dynamical_isometry.EXERCISES
    + residual_normalization.EXERCISES
    + width_depth.EXERCISES
    + doctor.EXERCISES
)
"""Every exercise, in lesson order, then in the order its lesson lists them."""

_BY_ID = {e.id: e for e in EXERCISES}
if len(_BY_ID) != len(EXERCISES):
    raise RuntimeError("two exercises share an id")
_SLUGS = tuple(lesson.slug for lesson in LESSONS)
_unknown_lessons = {e.lesson for e in EXERCISES} - set(_SLUGS)
if _unknown_lessons:
    raise RuntimeError(f"exercises name unknown lessons: {sorted(_unknown_lessons)}")


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
