"""The lab's learning routes: exercises, their checking, and the learner's progress.

:func:`router` holds these routes (they use the :class:`~normlab.lab.progress.ProgressStore`
and the :class:`~normlab.lab.sandbox.Sandbox` of the app's :class:`~normlab.lab.state.LabState`):

- ``GET /api/exercises``: every exercise, as the learner sees it (no answers; the choices in
  this learner's order, see :meth:`~normlab.lab.exercises.ChoiceExercise.for_learner`);
- ``POST /api/exercises/{id}/submit`` with ``{"answer": ...}`` (choice: the choice's text or
  its index in the learner's order; number: a JSON number or the text as typed, ``"10,355"``)
  or ``{"code": "..."}`` (code exercises, run in the sandbox): stores the attempt and answers
  ``{"passed", "feedback", "attempts", "solved"}``, the last two as the store counts them after
  this attempt (code also ``"output"``, what the code printed; its code is kept as by PUT),
  and, in a passing verdict only, ``"explanation"`` (HTML: the worked answer, the closed form or
  the derivation, which the page shows once the exercise is solved and never before);
- ``PUT /api/exercises/{id}/code`` with ``{"code": "..."}`` keeps the code in a code exercise's
  editor (trying it with Run, ``POST /api/run``, is no attempt); ``GET`` answers ``{"id",
  "code"}`` (404 if none);
- ``GET /api/progress``: per lesson the number of exercises, how many are solved, and per
  exercise solved/attempts; plus the saved listings and the kept exercise code;
- ``PUT /api/listings/{listing_id}`` with ``{"code": "..."}`` keeps the learner's last code of a
  listing, and ``GET /api/listings/{listing_id}`` answers ``{"id", "code"}`` (404 if none).

Bad input answers 422 with ``{"detail": {"parameter", "message"}}``, like the experiment
routes. Routes stay thin: checking lives in :mod:`normlab.lab.exercises`, storage in
:mod:`normlab.lab.progress`; blocking work (the store, a check's own computation) runs in a
worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from normlab.lab import exercises, schemas
from normlab.lab.errors import bad_input, checked_code, json_body, read_body
from normlab.lab.exercises import (
    BadSubmission,
    ChoiceExercise,
    CodeExercise,
    Exercise,
    NumberExercise,
    UnknownExercise,
    Verdict,
)
from normlab.lab.lessons import LESSONS
from normlab.lab.lessons.exercise import MAX_CODE_CHARS
from normlab.lab.lessons.numbers import EXAMPLES, TYPED
from normlab.lab.lessons.numbers import MAX_CHARS as MAX_NUMBER_CHARS
from normlab.lab.progress import LISTING_ID, ProgressLimit, ProgressStore, check_listing_id
from normlab.lab.requests import bound
from normlab.lab.sandbox import SandboxError
from normlab.lab.state import lab_state

MAX_BODY_BYTES = 1 << 20
"""The largest request body the learning routes read (1 MiB)."""
MAX_LISTING_CHARS = 100_000
"""The longest code a listing may save."""


async def _json_object(request: Request) -> dict[str, Any] | JSONResponse:
    """The request body as a JSON object, or the 413 (too large) or 422 that says why it is
    not one."""
    raw = await read_body(request, MAX_BODY_BYTES, None)
    if isinstance(raw, JSONResponse):
        return raw
    body = json_body(raw, None, "request body is not valid JSON")
    if isinstance(body, JSONResponse):
        return body
    if not isinstance(body, dict):
        return bad_input(None, f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _only(body: dict[str, Any], field: str, what: str) -> JSONResponse | None:
    """422 unless ``body`` holds exactly ``field``."""
    for key in body:
        if key != field:
            return bad_input(key, f"unknown field {key!r} for {what}, send only {field!r}")
    if field not in body:
        return bad_input(field, f"missing {field!r} for {what}")
    return None


def _store(request: Request) -> ProgressStore:
    store: ProgressStore = lab_state(request).progress
    return store


def progress_report(store: ProgressStore) -> dict[str, Any]:
    """What ``GET /api/progress`` answers, from the store and the exercise registry."""
    seen = store.progress()
    lessons: dict[str, Any] = {}
    for lesson in LESSONS:
        mine = exercises.by_lesson(lesson.slug)
        per = {
            e.id: {
                "kind": e.kind,
                "solved": seen.get(e.id, {}).get("solved", False),
                "attempts": seen.get(e.id, {}).get("attempts", 0),
            }
            for e in mine
        }
        lessons[lesson.slug] = {
            "title": lesson.title,
            "total": len(mine),
            "solved": sum(1 for p in per.values() if p["solved"]),
            "exercises": per,
        }
    return {"lessons": lessons, "listings": store.listings(), "exercise_code": store.codes()}


CODE_ID = Annotated[
    str,
    Path(json_schema_extra={
        "enum": [e.id for e in exercises.EXERCISES if isinstance(e, CodeExercise)]
    }),
]  # fmt: skip
LISTING = Annotated[str, Path(json_schema_extra={"pattern": f"^{LISTING_ID.pattern}$"})]
"""The path ids as the document states them; the handlers check them (422 in the lab's shape)."""

# The route handlers have no docstrings: FastAPI would put a handler's docstring into its
# route's OpenAPI description.


def list_exercises(request: Request) -> list[dict[str, Any]]:
    learner = _store(request).learner_id
    return [e.for_learner(learner).public() for e in exercises.EXERCISES]


def _exercise(exercise_id: str, request: Request) -> Exercise | JSONResponse:
    """The exercise as this learner sees it, or the 422 naming the valid ids."""
    try:
        return exercises.get(exercise_id).for_learner(_store(request).learner_id)
    except UnknownExercise as exc:
        return bad_input("id", str(exc))


async def _check(request: Request, exercise: Exercise, submission: Any) -> Verdict:
    """The verdict on ``submission`` (code runs in the app's sandbox, checks in a thread)."""
    if isinstance(exercise, CodeExercise):
        job = exercise.prepare(submission)
        run = await lab_state(request).sandbox.arun(job.code, files=job.files, wall_s=job.wall_s)
        return await anyio.to_thread.run_sync(exercise.verdict, job, run)
    if isinstance(exercise, ChoiceExercise | NumberExercise):
        return await anyio.to_thread.run_sync(exercise.check, submission)
    # every registered kind is one of the three
    raise TypeError(f"exercise kind {exercise.kind!r} has no checker")


async def submit(exercise_id: str, request: Request) -> Any:
    """``POST /api/exercises/{id}/submit``: check the submission and record the attempt.

    Answers ``{"passed", "feedback", "saved"}`` with ``"attempts"`` and ``"solved"`` as the
    store counts them after this attempt (or ``"unsaved"``, why it could not be kept); a code
    exercise adds ``"output"``. A passing verdict adds ``"explanation"`` (HTML) where the
    exercise has one: the answer worked out, held back until the learner has solved it.
    """
    exercise = _exercise(exercise_id, request)
    if isinstance(exercise, JSONResponse):
        return exercise
    body = await _json_object(request)
    if isinstance(body, JSONResponse):
        return body
    field = "code" if isinstance(exercise, CodeExercise) else "answer"
    refused = _only(body, field, f"the {exercise.kind} exercise {exercise.id!r}")
    if refused is not None:
        return refused
    submission = body[field]
    try:
        verdict = await _check(request, exercise, submission)
    except BadSubmission as exc:
        return bad_input(exc.parameter, str(exc))
    except SandboxError as exc:  # the lab's fault, not the learner's: nothing recorded
        return bad_input(None, f"the code could not be run: {exc}", status=503)
    answer = verdict.to_dict()
    if isinstance(exercise, CodeExercise):
        answer["output"] = verdict.output
    try:
        answer.update(await _record(_store(request), exercise, submission, verdict))
    except sqlite3.Error as exc:  # the verdict stands; only keeping it failed: say so
        answer.update(saved=False, unsaved=f"this attempt could not be saved ({exc})")
    return answer


async def _record(
    store: ProgressStore, exercise: Any, submission: Any, verdict: Any
) -> dict[str, Any]:
    """Keep the attempt (and a code exercise's code); the standing as the file holds it then."""
    await anyio.to_thread.run_sync(
        store.record_attempt, exercise.id, submission, verdict.passed, verdict.feedback
    )
    if isinstance(exercise, CodeExercise):
        await anyio.to_thread.run_sync(store.save_code, exercise.id, submission)
    standing: dict[str, Any] = await anyio.to_thread.run_sync(store.standing, exercise.id)
    return {**standing, "saved": True}


def progress(request: Request) -> dict[str, Any]:
    return progress_report(_store(request))


async def save_listing(listing_id: LISTING, request: Request) -> Any:
    try:
        check_listing_id(listing_id)
    except ValueError as exc:
        return bad_input("listing_id", str(exc))
    body = await _json_object(request)
    if isinstance(body, JSONResponse):
        return body
    refused = _only(body, "code", f"listing {listing_id!r}")
    if refused is not None:
        return refused
    try:
        code = checked_code(body["code"], MAX_LISTING_CHARS)
    except (TypeError, ValueError) as exc:
        return bad_input("code", str(exc))
    try:
        await anyio.to_thread.run_sync(_store(request).save_listing, listing_id, code)
    except ProgressLimit as exc:
        return bad_input(exc.param, str(exc))
    return {"id": listing_id, "saved": True}


def get_listing(listing_id: LISTING, request: Request) -> Any:
    try:
        code = _store(request).listing(listing_id)
    except ValueError as exc:
        return bad_input("listing_id", str(exc))
    if code is None:
        return bad_input("listing_id", f"no code saved for listing {listing_id!r}", status=404)
    return {"id": listing_id, "code": code}


def _code_exercise(exercise_id: str) -> CodeExercise | JSONResponse:
    try:
        exercise = exercises.get(exercise_id)
    except UnknownExercise as exc:
        return bad_input("id", str(exc))
    if not isinstance(exercise, CodeExercise):
        message = f"exercise {exercise_id!r} is a {exercise.kind} exercise, not a code one"
        return bad_input("id", message)
    return exercise


async def save_code(exercise_id: CODE_ID, request: Request) -> Any:
    exercise = _code_exercise(exercise_id)
    if isinstance(exercise, JSONResponse):
        return exercise
    body = await _json_object(request)
    if isinstance(body, JSONResponse):
        return body
    refused = _only(body, "code", f"the code of exercise {exercise.id!r}")
    if refused is not None:
        return refused
    try:
        code = checked_code(body["code"], MAX_CODE_CHARS)
    except (TypeError, ValueError) as exc:
        return bad_input("code", str(exc))
    await anyio.to_thread.run_sync(_store(request).save_code, exercise.id, code)
    return {"id": exercise.id, "saved": True}


def get_code(exercise_id: CODE_ID, request: Request) -> Any:
    exercise = _code_exercise(exercise_id)
    if isinstance(exercise, JSONResponse):
        return exercise
    code = _store(request).code(exercise.id)
    if code is None:
        return bad_input("id", f"no code kept for exercise {exercise.id!r}", status=404)
    return {"id": exercise.id, "code": code}


def _body(schema: schemas.JSON) -> dict[str, Any]:
    """``openapi_extra`` declaring the JSON body the route reads itself (so that its 413 and
    422 stay the lab's)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _code_body(limit: int) -> schemas.JSON:
    return {
        "type": "object",
        "required": ["code"],
        "additionalProperties": False,
        "properties": {"code": {"type": "string", "maxLength": limit}},
    }


def _submission(exercise: Exercise) -> schemas.JSON:
    """The body ``exercise``'s submit route takes, as JSON Schema: a code exercise's code; a
    choice exercise's answer, a choice's text or its index (in this learner's order); a number
    exercise's answer, a finite JSON number or the text as typed (:data:`TYPED`)."""
    if isinstance(exercise, CodeExercise):
        return {**_code_body(MAX_CODE_CHARS), "description": "the code to check"}
    if isinstance(exercise, ChoiceExercise):
        last = len(exercise.choices) - 1
        answer: schemas.JSON = {
            "oneOf": [
                {"enum": [choice.text for choice in exercise.choices]},
                {"type": "integer", "minimum": 0, "maximum": last},
            ],
            "description": "a choice's text, or its index in this learner's order "
            "(GET /api/exercises)",
        }
    else:
        answer = {
            "oneOf": [
                {"type": "number", "minimum": -sys.float_info.max, "maximum": sys.float_info.max},
                {"type": "string", "pattern": TYPED, "maxLength": MAX_NUMBER_CHARS},
            ],
            "description": f"a number, or its text as typed ({EXAMPLES}); the text may also "
            "have a longer exponent, if the number is finite",
        }
    return {
        "type": "object",
        "required": ["answer"],
        "additionalProperties": False,
        "properties": {"answer": answer},
    }


_EXERCISE: schemas.JSON = {
    "type": "object",
    "required": ["id", "lesson", "kind", "prompt"],
    "properties": {
        "id": {"type": "string"},
        "lesson": {"type": "string"},
        "kind": {"enum": ["choice", "number", "code"]},
        "prompt": {"type": "string"},
        "choices": {"type": "array", "items": {"type": "string"}},
        "tolerance": {"type": "object"},
        "tolerance_text": {"type": "string"},
        "starter": {"type": "string"},
        "checks": {"type": "array", "items": {"type": "string"}},
        "time_limit_s": {"type": "number"},
    },
}
_VERDICT: schemas.JSON = {
    "type": "object",
    "required": ["passed", "feedback", "saved"],
    "properties": {
        "passed": {"type": "boolean"},
        "feedback": {"type": "string"},
        "explanation": {
            "type": "string",
            "description": "HTML: the answer worked out (the closed form, the derivation); "
            "only in a passing verdict, so shown once the exercise is solved",
        },
        "output": {"type": "string", "description": "what a code exercise's code printed"},
        "attempts": {"type": "integer", "minimum": 1},
        "solved": {"type": "boolean"},
        "saved": {"type": "boolean"},
        "unsaved": {"type": "string", "description": "why the attempt could not be kept"},
    },
}
_COUNTS: schemas.JSON = {
    "type": "object",
    "required": ["kind", "solved", "attempts"],
    "properties": {
        "kind": {"type": "string"},
        "solved": {"type": "boolean"},
        "attempts": {"type": "integer", "minimum": 0},
    },
}
_CODES: schemas.JSON = {"type": "object", "additionalProperties": {"type": "string"}}
_PROGRESS: schemas.JSON = {
    "type": "object",
    "required": ["lessons", "listings", "exercise_code"],
    "properties": {
        "lessons": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["title", "total", "solved", "exercises"],
                "properties": {
                    "title": {"type": "string"},
                    "total": {"type": "integer"},
                    "solved": {"type": "integer"},
                    "exercises": {"type": "object", "additionalProperties": _COUNTS},
                },
            },
        },
        "listings": _CODES,
        "exercise_code": _CODES,
    },
}


def _kept(what: str) -> schemas.JSON:
    """``{"id", "code"}`` or ``{"id", "saved"}``."""
    value = {"type": "string"} if what == "code" else {"const": True}
    return {
        "type": "object",
        "required": ["id", what],
        "properties": {"id": {"type": "string"}, what: value},
    }


def router() -> APIRouter:
    """The exercise, progress and listing routes."""
    r = APIRouter()
    ok = schemas.responses
    r.add_api_route(
        "/api/exercises",
        list_exercises,
        methods=["GET"],
        tags=["exercises"],
        summary="Every exercise (without answers)",
        responses=ok({"type": "array", "items": _EXERCISE}),
    )
    for exercise in exercises.EXERCISES:  # one each: the body it takes depends on its kind
        r.add_api_route(
            f"/api/exercises/{exercise.id}/submit",
            bound(submit, exercise.id),
            methods=["POST"],
            tags=["exercises"],
            summary=f"Check an answer to {exercise.id} ({exercise.kind}) and record the attempt",
            name=f"submit_{exercise.id}",
            responses=ok(
                _VERDICT,
                "the verdict (with its explanation once it passes), and the exercise's "
                "standing after it",
            ),
            openapi_extra=_body(_submission(exercise)),
        )
    r.add_api_route(  # any other id: a 422 naming the valid ones (left out of the document)
        "/api/exercises/{exercise_id}/submit", submit, methods=["POST"], include_in_schema=False
    )
    r.add_api_route(
        "/api/exercises/{exercise_id}/code",
        save_code,
        methods=["PUT"],
        tags=["exercises"],
        summary="Keep the learner's code of a code exercise (not an attempt)",
        responses=ok(_kept("saved")),
        openapi_extra=_body(_code_body(MAX_CODE_CHARS)),
    )
    r.add_api_route(
        "/api/exercises/{exercise_id}/code",
        get_code,
        methods=["GET"],
        tags=["exercises"],
        summary="The learner's kept code of a code exercise",
        responses=ok(_kept("code"), _404=schemas.error("nothing kept")),
    )
    r.add_api_route(
        "/api/progress",
        progress,
        methods=["GET"],
        tags=["exercises"],
        summary="Solved exercises, saved listings and kept exercise code",
        responses=ok(_PROGRESS),
    )
    r.add_api_route(
        "/api/listings/{listing_id}",
        save_listing,
        methods=["PUT"],
        tags=["listings"],
        summary="Save the learner's code of a listing",
        responses=ok(_kept("saved")),
        openapi_extra=_body(_code_body(MAX_LISTING_CHARS)),
    )
    r.add_api_route(
        "/api/listings/{listing_id}",
        get_listing,
        methods=["GET"],
        tags=["listings"],
        summary="The learner's saved code of a listing",
        responses=ok(_kept("code"), _404=schemas.error("nothing saved")),
    )
    return r
