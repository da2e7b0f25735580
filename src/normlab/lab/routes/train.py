"""The ``/train`` page: watch a real PyTorch run train, step by step, live.

:func:`router` makes these routes (the runs are live sessions of the app's one run manager,
``runner`` of its :class:`~normlab.lab.state.LabState`, a :class:`~normlab.lab.runner.Runner`):

- ``GET /train``: the lesson and its view; its numbers come from sessions run here
  (:mod:`normlab.lab.trainlesson`); ``GET /train/embed``: the view alone, which a lesson shows
  in a frame with its settings preset (``PageContext.train_view`` in :mod:`normlab.lab.site`);
- ``GET /api/train``: the setup's parameters (:data:`normlab.trainview.PARAMETERS`), the
  stream's (:data:`~normlab.lab.trainruns.PLAY`), the actions, and how many runs are going;
- ``GET /api/train/stream?<setup>&<play>``: one run as Server-Sent Events (see
  :mod:`normlab.lab.trainruns` for the events). ``replaces=RUN`` ends that run first (the page
  opening a new setting). Beyond the runner's
  :attr:`~normlab.lab.runner.Runner.max_sessions` sessions (built or being built) it answers
  503. The stream opens before the run is built (a build waits on nothing else: no lock), a
  client gone during the build frees its place, and a build that fails ends the stream with
  a ``refused`` event (``{"status", "detail"}``, the answer it would have been);
- ``POST /api/train/{run}/control``: ``{"action": "play" | "pause" | "step" | "reset"}``, and
  ``speed`` or ``fps`` to change how it plays; taken at the run's next step;
- ``GET /api/train/code?<setup>&steps=N`` and ``GET /playground/train?...``: the plain PyTorch
  script of the setup (:func:`normlab.trainview.script`), as JSON or in the playground.

Bad settings answer 422 naming the parameter, in the lab's error shape.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import types
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse

from normlab.experiments import ParameterError, ParameterTypeError
from normlab.experiments.base.params import Parameter, make_params
from normlab.lab import schemas, sse, trainlesson
from normlab.lab.errors import bad_input, busy
from normlab.lab.lessons.markup import highlight
from normlab.lab.requests import foreign, query_schema, read_params, script_json
from normlab.lab.runner import MAX_SESSIONS, RunBusy, RunCancelled, Runner
from normlab.lab.state import lab_state
from normlab.lab.trainruns import ACTIONS, PLAY, InThread, Play, Run
from normlab.trainview import GROUPS, PARAMETERS, STEPS, Setup, make_setup, script
from normlab.trainview.figures import LIMITS

CONTRAST = ("norm", ("none", "batch"))
"""What compare mode changes first: the second run takes the other of these two values."""
SETUP = {p.name: p for p in PARAMETERS}
OWN = {p.name: p for p in PLAY}
_REFUSED = (ParameterError, ParameterTypeError)
T = TypeVar("T")


def _unknown(key: str, where: str, valid: Mapping[str, Parameter]) -> ParameterError:
    names = ", ".join(valid)
    return ParameterError(key, f"unknown parameter {key!r} for {where}, use one of: {names}")


def _second(exc: ParameterError | ParameterTypeError) -> ParameterError:
    """A refusal of the second run's setting, named as its key: ``b.depth``."""
    key = f"b.{exc.param}"
    return ParameterError(key, str(exc).replace(f"parameter {exc.param!r}", f"parameter {key!r}"))


def _setups_of(
    query: Mapping[str, str], own: Mapping[str, Parameter]
) -> tuple[dict[str, Setup], dict[str, Any]]:
    """Each side's setup and the route's own values of a query (CLI-style text, named on
    error); the second side (``b.NAME``, with ``compare``) shares the first one's data."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for key, text in query.items():
        name = key.removeprefix("b.")
        if key.startswith("b.") and name in SETUP:
            if name in GROUPS["data"]:
                raise ParameterError(key, f"{key!r}: a compared run shares the data, set {name!r}")
            try:
                b[name] = SETUP[name].parse(text)
            except _REFUSED as exc:
                raise _second(exc) from None
        elif key in SETUP:
            a[key] = SETUP[key].parse(text)
        elif key in own:
            values[key] = own[key].parse(text)
        elif key not in ("token", "replaces"):  # the guard's, and the stream's run to end
            raise _unknown(key, "a training run", {**SETUP, **own})
    setups = {"a": make_setup(a)}
    if values.get("compare"):
        try:
            setups["b"] = make_setup({**a, **b})
        except _REFUSED as exc:
            raise _second(exc) from None
    elif b:
        key = f"b.{next(iter(b))}"
        raise ParameterError(key, f"{key!r}: a second run's settings need compare=true")
    return setups, values


def spec(max_runs: int = MAX_SESSIONS) -> dict[str, Any]:
    """What the page builds its controls from: every parameter's schema, and the groups;
    ``max_runs``: the sessions its lab trains at once (its runner's bound)."""
    return {
        "parameters": [p.schema() for p in PARAMETERS],
        "play": [p.schema() for p in PLAY],
        "groups": {k: list(v) for k, v in GROUPS.items()},
        "contrast": {"name": CONTRAST[0], "values": list(CONTRAST[1])},
        "actions": list(ACTIONS),
        "max_runs": max_runs,
        "code_steps": STEPS.schema(),
        "thresholds": dict(LIMITS),  # the healthy ranges the layers' figures shade
    }


async def train_api(request: Request) -> dict[str, Any]:
    """``GET /api/train``: the parameters, and the runs going now."""
    runner = lab_state(request).runner
    return {**spec(runner.max_sessions), "runs": runner.sessions}


async def train_stream(request: Request) -> Any:
    """``GET /api/train/stream``: a new run, as Server-Sent Events."""
    runner = lab_state(request).runner
    try:
        setups, values = _setups_of(request.query_params, OWN)
        play: Play = make_params(Play, values, "a training run")
    except _REFUSED as exc:
        return bad_input(exc.param, str(exc))
    if (refuse := foreign(request)) is not None:  # another site's page: a session is a run
        return bad_input("origin", refuse, status=403)
    run = Run(setups, play, _abandoning(runner))
    try:
        runner.book(run, replaces=request.query_params.get("replaces"))
    except (RunCancelled, RunBusy) as exc:  # the lab is stopping, or every slot is taken
        return busy(str(exc))
    ended = functools.partial(runner.release, run)  # however the stream ends, build or not
    return sse.EventStream(_built_then_run(run, runner, request.is_disconnected), ended)


def _abandoning(runner: Runner) -> InThread:
    """A run's worker threads: the runner's for sessions, left at once when the stream is
    cancelled (its client gone). The stream's end closes the run, and the step in progress is
    its last (:meth:`~normlab.lab.trainruns.Run.close`): not the rest of its frame's steps."""

    async def in_thread(fn: Callable[..., T], /, *args: Any) -> T:
        return await runner.in_session_thread(fn, *args, abandon=True)

    return in_thread


async def _built_then_run(
    run: Run, runner: Runner, gone: Callable[[], Awaitable[bool]]
) -> AsyncIterator[str]:
    """The stream of ``run``: its first line at once (the client sees it open), then its
    build, its slot taken (:meth:`~normlab.lab.runner.Runner.admit`) and its events. A client
    gone during the build ends the stream there; a build the setting makes impossible, or
    the lab stopping meanwhile, ends it with a ``refused`` event in the lab's error shape."""
    yield sse.retry()
    try:  # a client gone meanwhile ends the stream at once; the build ends on its own
        await runner.in_session_thread(run.build, abandon=True)
        runner.admit(run)
    except ValueError as exc:  # LSUV cannot rescale a layer that puts out nothing
        yield _refused(422, getattr(exc, "param", None), str(exc))
        return
    except (RunCancelled, RunBusy) as exc:
        yield _refused(503, None, str(exc))
        return
    async for chunk in run.events(gone):
        yield chunk


def _refused(status: int, parameter: str | None, message: str) -> str:
    """The event that ends a stream whose run could not start: the answer it would have been
    had its headers not gone out yet."""
    detail = {"parameter": parameter, "message": message}
    return sse.event("refused", {"status": status, "detail": detail})


def _control_values(body: Mapping[str, Any]) -> tuple[str | None, int | None, int | None]:
    for key in body:
        if key not in ("action", "speed", "fps"):
            raise ParameterError(key, f"unknown key {key!r}: send action, speed or fps")
    action = body.get("action")
    if action is not None and action not in ACTIONS:
        valid = ", ".join(repr(a) for a in ACTIONS)
        raise ParameterError("action", f"action {action!r} is not one of {valid}")
    speed, fps = (OWN[k].validate(body[k]) if k in body else None for k in ("speed", "fps"))
    if action is None and speed is None and fps is None:
        raise ParameterError("action", 'send {"action": "play"} (or pause, step, reset)')
    return action, speed, fps


RUN_ID = Annotated[str, Path(json_schema_extra={"pattern": "^[A-Za-z0-9_-]{16}$"})]
"""A run's id as the document states it (``secrets.token_urlsafe(12)``); the route looks it up."""


async def train_control(run_id: RUN_ID, request: Request) -> Any:
    """``POST /api/train/{run_id}/control``: an action for the run's next step."""
    body = await read_params(request)
    if isinstance(body, JSONResponse):
        return body
    run = lab_state(request).runner.session(run_id)
    if not isinstance(run, Run):  # ended (or never was)
        message = f"no training run {run_id!r} is going: it ended, or its page opened another"
        return bad_input("run_id", message, status=404)
    try:
        action, speed, fps = _control_values(body)
        run.ask(action, speed=speed, fps=fps)
    except _REFUSED as exc:
        return bad_input(exc.param, str(exc))
    except OverflowError as exc:
        return bad_input("action", str(exc), status=429)
    return {"run": run.id, "action": action, "speed": run.speed, "fps": run.fps}


def _code_of(request: Request) -> tuple[Setup, int]:
    setups, values = _setups_of(request.query_params, {"steps": STEPS})
    return setups["a"], values.get("steps", STEPS.default)


async def train_code(request: Request) -> Any:
    """``GET /api/train/code``: the setup's plain PyTorch script, plain and highlighted."""
    try:
        setup, steps = _code_of(request)
    except _REFUSED as exc:
        return bad_input(exc.param, str(exc))
    text = script(setup, steps)
    return {
        "setup": dataclasses.asdict(setup),
        "steps": steps,
        "script": text,
        "html": str(highlight(text)),
    }


def train_playground(request: Request) -> HTMLResponse:
    """``GET /playground/train``: the script in the playground, ready to run."""
    site = lab_state(request).site
    try:
        setup, steps = _code_of(request)
    except _REFUSED as exc:
        page: HTMLResponse = site.render(
            "playground.html", status=422, experiment=None, slug="playground",
            source="", error=f"Could not open that code: {exc}",
        )  # fmt: skip
        return page
    source = script(setup, steps)
    digest = hashlib.sha1(source.encode()).hexdigest()[:8]  # edits kept per code shown
    shown = types.SimpleNamespace(name="train", title="Watch it train")
    page = site.render(
        "playground.html", experiment=shown, slug=f"playground-train-{digest}",
        params={**dataclasses.asdict(setup), "steps": steps}, source=source, error=None,
        notebook_url=None,
    )  # fmt: skip
    return page


def link(values: Mapping[str, Any], **extra: Any) -> str:
    """``/train?...`` for ``values`` (the setup's, CLI-style) and the page's own keys."""
    text = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in values.items()}
    return "/train?" + urllib.parse.urlencode({**text, **{k: str(v) for k, v in extra.items()}})


async def train_page(request: Request) -> Any:
    """``GET /train``: the lesson, its numbers from sessions run here, and the view."""
    runner = lab_state(request).runner
    if (refuse := foreign(request)) is not None and not trainlesson.ready():
        return bad_input("origin", refuse, status=403)  # its numbers would be computed
    stored = functools.partial(trainlesson.numbers, store=runner.answers)
    numbers = await anyio.to_thread.run_sync(stored)
    exercise = link(trainlesson.CASES["plain"], compare=1, **{"b.norm": "batch"})
    solved = lab_state(request).progress.progress().get(trainlesson.EXERCISE_ID, {})
    page: HTMLResponse = lab_state(request).site.render(
        "train.html", current="train", spec=script_json(spec(runner.max_sessions)),
        numbers=numbers,
        cases={k: link(v) for k, v in trainlesson.CASES.items()}, exercise=exercise,
        solved=solved.get("solved", False),
        defaults=dataclasses.asdict(Setup()),
        max_runs=runner.max_sessions,
    )  # fmt: skip
    return page


async def train_embed(request: Request) -> HTMLResponse:
    """``GET /train/embed``: the view alone, for a lesson's frame (the same address state)."""
    state = lab_state(request)
    page: HTMLResponse = state.site.render(
        "train_embed.html", spec=script_json(spec(state.runner.max_sessions))
    )
    return page


def warm_numbers(runner: Runner) -> None:
    """Compute the page's numbers once (the warm-up's part), unless the lab is stopping: its
    ``runner`` is cancelled then."""
    try:
        trainlesson.numbers(stopped=lambda: runner.cancelled, store=runner.answers)
    except trainlesson.Stopped:
        return


def _query_docs() -> dict[str, Any]:
    return {"parameters": [query_schema(p) for p in PARAMETERS]}


def router() -> APIRouter:
    """``/train``, its API and its playground page."""
    r = APIRouter()
    r.add_api_route("/train", train_page, methods=["GET"], include_in_schema=False)
    r.add_api_route("/train/embed", train_embed, methods=["GET"], include_in_schema=False)
    r.add_api_route("/playground/train", train_playground, methods=["GET"], include_in_schema=False)
    _document(r)
    return r


_PARAMETERS = {"type": "array", "items": schemas.ref("Parameter")}
_SPEC: schemas.JSON = {
    "type": "object",
    "required": [*spec(), "runs"],
    "properties": {
        "parameters": _PARAMETERS,
        "play": _PARAMETERS,
        "groups": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
        "contrast": {
            "type": "object",
            "required": ["name", "values"],
            "properties": {
                "name": {"type": "string"},
                "values": {"type": "array", "items": {"type": "string"}},
            },
        },
        "actions": {"type": "array", "items": {"enum": list(ACTIONS)}},
        "max_runs": {"type": "integer"},
        "code_steps": schemas.ref("Parameter"),
        "thresholds": {"type": "object", "additionalProperties": {"type": "number"}},
        "runs": {"type": "integer", "minimum": 0},
    },
}
"""What ``GET /api/train`` answers (:func:`spec` and the runs going)."""
_CODE: schemas.JSON = {
    "type": "object",
    "required": ["setup", "steps", "script", "html"],
    "properties": {
        "setup": schemas.params_object(PARAMETERS, complete=True),
        "steps": schemas.parameter(STEPS),
        "script": {"type": "string"},
        "html": {"type": "string"},
    },
}
_CONTROLLED: schemas.JSON = {
    "type": "object",
    "required": ["run", "action", "speed", "fps"],
    "properties": {
        "run": {"type": "string"},
        "action": {"enum": [*ACTIONS, None]},
        "speed": schemas.parameter(OWN["speed"]),
        "fps": schemas.parameter(OWN["fps"]),
    },
}


def _document(r: APIRouter) -> None:
    """The API routes, each with its OpenAPI summary, description and answers."""
    bad: dict[int | str, dict[str, Any]] = dict(schemas.ERRORS)
    r.add_api_route(
        "/api/train", train_api, methods=["GET"], tags=["train"],
        summary="The training view's parameters", responses=schemas.responses(_SPEC),
        description="The setup's parameter schemas (the page's controls are built from them), "
        "the stream's own (steps, speed, fps, play), the actions, the bound on runs and "
        "how many runs are going now.",
    )  # fmt: skip
    r.add_api_route(
        "/api/train/stream", train_stream, methods=["GET"], tags=["train"],
        response_class=StreamingResponse,
        summary="One live training run (Server-Sent Events)",
        description="Builds a session of the setup in the query (CLI-style values; missing "
        "ones take their defaults) and streams it as text/event-stream: a `run` event (its id, "
        "its control URL, the setup and the points), `replay` and `history` events when "
        "`steps` asks for a step count to start at, then `frame` events (losses, accuracy, "
        "the decision boundary on a grid, every layer's statistics with the doctor's labels, "
        "histograms; keyed by side), one per `speed` steps at most `fps` a second while "
        "playing, and `status` events when playing starts or stops. Paused until `play=true` "
        "or a play action. With `compare=true` a second run (side `b`) trains beside the "
        "first in lockstep, on the same data and seed: `b.NAME` sets its NAME (any setting "
        "but the data's; the others are the first run's). `replaces=RUN` ends that run "
        "first. The run ends with the stream: when the client disconnects, when a new stream "
        "replaces it, or when the lab stops. "
        f"At most {MAX_SESSIONS} sessions at once (a compared run counts two). The stream "
        "opens before the session is built: a build that fails (LSUV on a layer that puts "
        "out nothing) or the lab stopping meanwhile ends it with one `refused` event, "
        "`{status, detail}` as the answer would have been.",
        response_description="`run`, `replay`, `history`, `frame`, `status` and `reset` "
        "events (or one `refused`), each data one line of JSON",
        responses={
            **sse.STREAM_RESPONSE, **bad,
            503: schemas.error(f"{MAX_SESSIONS} sessions train already, or the lab is stopping"),
        },
        openapi_extra={
            "parameters": [
                *_query_docs()["parameters"], *[query_schema(p) for p in PLAY],
                {"name": "replaces", "in": "query", "required": False,
                 "schema": {"type": "string", "description": "a run of this page to end"}},
            ]
        },
    )  # fmt: skip
    _document_control(r, bad)


def _document_control(r: APIRouter, bad: dict[int | str, dict[str, Any]]) -> None:
    body = {
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "speed": schemas.parameter(OWN["speed"]),
            "fps": schemas.parameter(OWN["fps"]),
        },
    }
    r.add_api_route(
        "/api/train/{run_id}/control", train_control, methods=["POST"], tags=["train"],
        summary="Play, pause, step or reset a run",
        description="Taken at the run's next step, in the order sent: `play` trains a frame "
        "after another, `pause` stops after the optimizer step in progress (a frame cut short "
        "is sent as it stands), `step` takes exactly one optimizer step and sends its frame "
        "(a playing run pauses first), `reset` puts the run back to step 0 (the same data "
        "and initial weights; paused). `speed` and `fps` change how it plays from the next "
        "frame. Only the lab's own pages may send it (Origin check).",
        responses=schemas.responses(
            _CONTROLLED, "what the run was asked", _403=schemas.error("sent from another "
            "site's page"), _404=schemas.error("no such run is going"),
            _429=schemas.error("too many actions wait for the run's next step"),
        ),
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}}
        },
    )  # fmt: skip
    r.add_api_route(
        "/api/train/code", train_code, methods=["GET"], tags=["train", "code"],
        summary="The plain PyTorch script of a training setup",
        description="The script that builds the setup's data and net and trains `steps` steps, "
        "printing each step's training and test loss, as the live run records them. It needs "
        "no normlab.",
        responses=schemas.responses(_CODE),
        openapi_extra={"parameters": [*_query_docs()["parameters"], query_schema(STEPS)]},
    )  # fmt: skip
