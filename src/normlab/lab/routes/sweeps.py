"""The ``/sweeps`` pages: the sweeps of a store, and one sweep's heat map and table, live.

:func:`router` makes these routes; the store is ``sweeps`` of the app's
:class:`~normlab.lab.state.LabState` (``normlab lab --sweeps PATH``, by default the file
``normlab sweep`` writes, :data:`~normlab.sweep.DEFAULT_STORE`), fixed when the lab starts:

- ``GET /sweeps``: the newest sweeps of the store (at most
  :data:`~normlab.sweep.catalog.MAX_LISTED`), with how far each has run;
- ``GET /sweeps/{sweep_id}``: one sweep: its heat map, the controls that choose what it maps
  (axes, value, fixed settings; generated from the sweep's axes, each a declared parameter),
  its tables. While the sweep runs (``normlab sweep`` in another process fills the store), the
  page asks ``GET /api/sweeps/{sweep_id}`` again every few seconds, until every cell is stored;
- ``GET /api/sweeps`` and ``GET /api/sweeps/{sweep_id}``: the same as JSON;
- ``POST /api/sweeps``: start a bounded sweep (:mod:`normlab.lab.labsweeps`): the body
  ``{"experiment", "grid", "seeds"}`` is checked by the sweep engine (a bad axis: 422 naming
  its parameter, nothing stored), held to the lab's bounds (over them: 422 naming ``grid``,
  pointing to ``normlab sweep``), queued on the Runner (a full line: 429 with
  ``Retry-After``), recorded in the store, and answered at once with 202: its id, its page,
  its configurations and its place in the line. The ``/sweeps`` page's form posts it.

A larger grid is the command line's (``normlab sweep ...``, on a cluster with ``--ray``), and
the page says so. Each request reads the store once, in a worker thread, and
at most :data:`~normlab.sweep.catalog.MAX_VIEW_CELLS` configurations: a larger sweep is
refused with 422 (its summary is ``normlab sweep ... --summary --plot FILE``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from normlab.experiments import ParameterError
from normlab.lab import labsweeps, schemas
from normlab.lab.errors import RETRY_AFTER_S, bad_input, busy, json_body, read_body
from normlab.lab.requests import MAX_PARAMS_BYTES, script_json
from normlab.lab.runner import MAX_WAITING_JOBS, RunBusy, RunCancelled
from normlab.lab.state import lab_state
from normlab.sweep import StoreError, catalog
from normlab.sweep.summary import VALUES

POLL_MS = 2000
"""How often a page of a running sweep asks for its state (a few requests a minute, each
bounded): the store is written by another process, so there is nothing to wait on here."""


async def _listing(request: Request) -> list[dict[str, Any]]:
    path = lab_state(request).sweeps
    listed = await anyio.to_thread.run_sync(catalog.list_sweeps, path)
    return [s.to_dict() for s in listed]


async def _state(request: Request, sweep_id: str) -> dict[str, Any]:
    """The sweep's view for the request's query (``x``, ``y``, ``value``, ``fix``)."""
    q = request.query_params
    fixed = q.getlist("fix")
    path = lab_state(request).sweeps

    def read() -> dict[str, Any]:
        value = q.get("value") or "final"
        return catalog.view_state(path, sweep_id, q.get("x"), q.get("y"), value, fixed)

    state: dict[str, Any] = await anyio.to_thread.run_sync(read)
    return state


async def _answer(request: Request, sweep_id: str) -> dict[str, Any] | Any:
    """The state, or the refusal in the lab's error shape (never a 500)."""
    try:
        return await _state(request, sweep_id)
    except catalog.UnknownSweep as exc:
        return bad_input("sweep_id", str(exc), status=404)
    except ParameterError as exc:  # a view option (x, y, value, fix) the sweep does not have
        return bad_input(exc.param, str(exc))
    except StoreError as exc:
        return busy(f"the sweep store cannot be read: {exc}")
    except ValueError as exc:  # too large, a grid the code no longer takes, no loss curve
        return bad_input("sweep_id", str(exc))


async def sweeps_json(request: Request) -> Any:
    """``GET /api/sweeps``: the store's sweeps."""
    try:
        listed = await _listing(request)
    except StoreError as exc:
        return busy(f"the sweep store cannot be read: {exc}")
    return {"store": str(lab_state(request).sweeps), "sweeps": listed}


async def sweep_json(sweep_id: str, request: Request) -> Any:
    """``GET /api/sweeps/{sweep_id}``: one sweep's view."""
    return await _answer(request, sweep_id)


_BODY_KEYS = ("experiment", "grid", "seeds")
_VALUE = (str, int, float, bool)


def _body_problem(body: Any) -> tuple[str | None, str] | None:
    """What is wrong with a ``POST /api/sweeps`` body's shape (the parameter, the message), or
    ``None``: the document's schema (:func:`_start_body`), checked; its values are the
    engine's to check."""
    if not isinstance(body, dict):
        kind = type(body).__name__
        return None, f'the body must be a JSON object {{"experiment", "grid", "seeds"}}, got {kind}'
    unknown = sorted(set(body) - set(_BODY_KEYS))
    if unknown:
        return unknown[0], f"unknown key {unknown[0]!r}: the body takes {', '.join(_BODY_KEYS)}"
    if not isinstance(body.get("experiment"), str):
        return "experiment", "experiment is missing or not a text: name the experiment to sweep"
    seeds = body.get("seeds")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int)):
        return "seeds", f"seeds must be an integer or null, got {seeds!r}"
    return _grid_problem(body.get("grid", {}))


def _grid_problem(grid: Any) -> tuple[str | None, str] | None:
    """What is wrong with the grid's shape: an object of specs or a list of texts."""
    most, chars = labsweeps.MAX_CONFIGS, labsweeps.MAX_SPEC_CHARS
    if isinstance(grid, list):
        if not all(isinstance(t, str) and len(t) <= chars for t in grid):
            return "grid", f"a grid as a list holds NAME=SPEC texts of at most {chars} characters"
        return None
    if not isinstance(grid, dict):
        return "grid", 'grid must be an object {"NAME": SPEC} or a list of "NAME=SPEC" texts'
    for name, spec in grid.items():
        values = spec if isinstance(spec, list) else [spec]
        fits = all(isinstance(v, _VALUE) and len(str(v)) <= chars for v in values)
        if not 1 <= len(values) <= most or not fits:
            return name, (
                f"parameter {name!r}: give a text as --grid takes it, one value, or a list of "
                f"1 to {most} values (texts of at most {chars} characters)"
            )
    return None


async def start_sweep(request: Request) -> Any:
    """``POST /api/sweeps``: start a bounded sweep; 202 with its id and page."""
    raw = await read_body(request, MAX_PARAMS_BYTES, None)
    if isinstance(raw, JSONResponse):
        return raw
    body = json_body(raw, None, "request body is not valid JSON")
    if isinstance(body, JSONResponse):
        return body
    problem = _body_problem(body)
    if problem is not None:
        return bad_input(*problem)
    state = lab_state(request)

    def begin() -> dict[str, Any]:
        grid, seeds = body.get("grid", {}), body.get("seeds")
        sweep = labsweeps.plan(body["experiment"], grid, seeds, state.sweeps)
        return labsweeps.start(state.runner, sweep)

    try:
        started = await anyio.to_thread.run_sync(begin)
    except ParameterError as exc:
        return bad_input(exc.param, str(exc))
    except RunBusy as exc:
        refusal = bad_input(None, str(exc), status=429)
        refusal.headers["Retry-After"] = str(RETRY_AFTER_S)
        return refusal
    except RunCancelled as exc:
        return busy(str(exc))
    except StoreError as exc:
        return busy(f"the sweep store cannot be written: {exc}")
    return JSONResponse(started, status_code=202)


def _form() -> dict[str, Any]:
    """What the list page's form shows: the experiments it may sweep, and the bounds."""
    return {
        "experiments": labsweeps.sweepable(),
        "max_configs": labsweeps.MAX_CONFIGS,
        "budget_s": labsweeps.CPU_BUDGET_S,
    }


async def sweeps_page(request: Request) -> HTMLResponse:
    """``GET /sweeps``: the list, the form that starts a small sweep, and how to run a larger
    one."""
    state = lab_state(request)
    try:
        listed, problem = await _listing(request), None
    except StoreError as exc:
        listed, problem = [], str(exc)
    page: HTMLResponse = state.site.render(
        "sweeps.html",
        sweeps=listed,
        limit=catalog.MAX_LISTED,
        store=str(state.sweeps),
        problem=problem,
        current="sweeps",
        **_form(),
    )
    return page


async def sweep_page(sweep_id: str, request: Request) -> HTMLResponse:
    """``GET /sweeps/{sweep_id}``: the sweep's page, its first state embedded."""
    state = lab_state(request)
    answer = await _answer(request, sweep_id)
    if not isinstance(answer, dict):  # a refusal: the page says it, with the answer's status
        detail = json.loads(bytes(answer.body))["detail"]["message"]
        page: HTMLResponse = state.site.render(
            "sweeps.html",
            status=answer.status_code,
            sweeps=[],
            limit=catalog.MAX_LISTED,
            store=str(state.sweeps),
            problem=detail,
            current="sweeps",
            **_form(),
        )
        return page
    shown: HTMLResponse = state.site.render(
        "sweep.html",
        sweep=answer,
        initial=script_json(answer),
        poll_ms=POLL_MS,
        store=str(state.sweeps),
        current="sweeps",
    )
    return shown


_STRINGS = {"type": "array", "items": {"type": "string"}}
LISTED: schemas.JSON = {
    "type": "object",
    "required": ["id", "experiment", "spec", "created", "total", "done"],
    "properties": {
        "id": {"type": "string"},
        "experiment": {"type": "string"},
        "spec": {"type": "object", "additionalProperties": {"type": "string"}},
        "created": {"type": "string"},
        "total": {"type": "integer", "minimum": 0},
        "done": {"type": "integer", "minimum": 0},
    },
}
LISTING: schemas.JSON = {
    "type": "object",
    "required": ["store", "sweeps"],
    "properties": {"store": {"type": "string"}, "sweeps": {"type": "array", "items": LISTED}},
}
STATE: schemas.JSON = {
    "type": "object",
    "required": [
        "id", "experiment", "seeds", "total", "done", "errors", "complete", "axes", "values",
        "lr_axis", "view", "figures", "tables",
    ],
    "properties": {
        "id": {"type": "string"},
        "experiment": {"type": "string"},
        "seeds": {"type": "integer", "minimum": 1},
        "total": {"type": "integer", "minimum": 0},
        "done": {"type": "integer", "minimum": 0},
        "errors": {"type": "integer", "minimum": 0},
        "complete": {"type": "boolean"},
        "axes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "help", "values"],
                "properties": {
                    "name": {"type": "string"}, "help": {"type": "string"}, "values": _STRINGS,
                },
            },
        },
        "values": _STRINGS,
        "lr_axis": {"type": "string"},
        "view": {
            "type": "object",
            "required": ["x", "y", "value", "fixed"],
            "properties": {
                "x": {"type": ["string", "null"]},
                "y": {"type": ["string", "null"]},
                "value": {"type": "string"},
                "fixed": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "figures": {"type": "array", "items": schemas.ref("Figure")},
        "tables": {"type": "array", "items": schemas.ref("Table")},
    },
}  # fmt: skip
"""What ``GET /api/sweeps/{sweep_id}`` answers (:func:`~normlab.sweep.catalog.view_state`)."""


def _start_body() -> schemas.JSON:
    """What ``POST /api/sweeps`` reads: the experiment, its grid, its seeds (the engine checks
    each axis against the experiment's declarations)."""
    chars, most = labsweeps.MAX_SPEC_CHARS, labsweeps.MAX_CONFIGS
    text = {"type": "string", "maxLength": chars}
    value = {"anyOf": [text, {"type": ["number", "boolean"]}]}
    spec = {"anyOf": [value, {"type": "array", "minItems": 1, "maxItems": most, "items": value}]}
    return {
        "type": "object",
        "required": ["experiment"],
        "additionalProperties": False,
        "properties": {
            "experiment": {
                "enum": labsweeps.sweepable(),
                "description": "the experiment to sweep: one whose result holds a loss curve",
            },
            "grid": {
                "anyOf": [
                    {"type": "object", "additionalProperties": spec},
                    {"type": "array", "items": text},
                ],
                "default": {},
                "description": "the axes, as a sweep file's [grid] takes them: {NAME: SPEC}, "
                "SPEC a text as normlab sweep --grid takes it (0.1:3:12, he,xavier), a list of "
                "values, or one value (a fixed setting); or the command line's NAME=SPEC texts. "
                "Each NAME must be a parameter of the experiment and each value one it allows "
                "(GET /api/experiments lists them); a range has at most "
                f"{most} points",
            },
            "seeds": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": most,
                "default": None,
                "description": "adds the axis seed = 0..seeds-1",
            },
        },
    }


STARTED: schemas.JSON = {
    "type": "object",
    "required": ["id", "url", "total", "queued"],
    "properties": {
        "id": {"type": "string", "description": "the sweep's id in the store"},
        "url": {"type": "string", "description": "its page, /sweeps/ID"},
        "total": {"type": "integer", "minimum": 1, "description": "its configurations"},
        "queued": {
            "type": "integer",
            "minimum": 0,
            "description": "its place in the line: 0 when it starts now, n when n sweeps "
            "compute or wait before it",
        },
    },
}
"""What ``POST /api/sweeps`` answers (202)."""


def _most_runs() -> str:
    """``chaos-cell 48, bn-lr 30, ...``: each sweepable experiment's bound, for the document."""
    return ", ".join(f"{n} {labsweeps.most_runs(n)}" for n in labsweeps.sweepable())


def _start_responses() -> dict[int | str, schemas.JSON]:
    answers: dict[int | str, schemas.JSON] = {
        202: {
            "description": "the sweep is queued and recorded: its page shows it at once",
            "content": {"application/json": {"schema": STARTED}},
        }
    }
    answers.update(schemas.ERRORS)
    answers[422] = schemas.error(
        "a bad body or axis (naming its parameter; nothing is stored), an experiment the lab "
        "does not sweep, or a grid over the lab's bounds (naming grid, pointing to normlab "
        "sweep)"
    )
    answers[429] = schemas.error(
        f"{MAX_WAITING_JOBS} sweeps wait already behind the one computing: try again "
        "after Retry-After seconds (nothing is stored)"
    )
    return answers


_QUERY = [
    {"name": "x", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "the heat map's x axis, one of the sweep's axes (default lr, or the first)"},
    {"name": "y", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "the heat map's y axis, another of the sweep's axes"},
    {"name": "value", "in": "query", "required": False,
     "schema": {"type": "string", "default": "final"},
     "description": "what the map shows: final or best loss (mean over seeds), the fraction "
     "of runs diverged, the learning-rate sensitivity (Wortsman et al. 2023), or a number the "
     f"experiment declares per run (its sweep_values, e.g. chi_1); one of {', '.join(VALUES)} "
     "or such a number, as the sweep's state lists them under values"},
    {"name": "fix", "in": "query", "required": False,
     "schema": {"type": "array", "items": {"type": "string"}}, "style": "form", "explode": True,
     "description": "AXIS=VALUE: show the cells at this value of an axis (the others are "
     "averaged); repeat for several"},
]  # fmt: skip


def router() -> APIRouter:
    """``/sweeps``, ``/sweeps/{sweep_id}``, ``/api/sweeps`` (GET and POST) and
    ``/api/sweeps/{sweep_id}``."""
    schemas.shared()
    r = APIRouter()
    r.add_api_route("/sweeps", sweeps_page, methods=["GET"], include_in_schema=False)
    r.add_api_route("/sweeps/{sweep_id}", sweep_page, methods=["GET"], include_in_schema=False)
    r.add_api_route(
        "/api/sweeps",
        sweeps_json,
        methods=["GET"],
        tags=["sweeps"],
        summary="The sweeps of the lab's store",
        description="The sweeps recorded in the store given to normlab lab --sweeps (by "
        "default the file normlab sweep writes), newest first: experiment, grid as written, "
        "configurations and how many are stored. Empty when the file does not exist.",
        responses=schemas.responses(LISTING, "the store and its sweeps"),
    )
    r.add_api_route(
        "/api/sweeps",
        start_sweep,
        methods=["POST"],
        status_code=202,
        tags=["sweeps"],
        summary="Start a bounded sweep",
        description="Checks the grid with the sweep engine (a bad axis: 422 naming it, nothing "
        "stored), holds it to the lab's bounds: at most "
        f"{labsweeps.MAX_CONFIGS} configurations (cells times seeds) and at most "
        f"{labsweeps.CPU_BUDGET_S:g} s of CPU at the settings' maxima (configurations times the "
        "cost the experiment declares for a run at its maxima, so at most "
        f"{_most_runs()} configurations; over either: 422 naming grid; larger sweeps are "
        "normlab sweep's, on the command line), then records it in "
        "the lab's store and queues it: one sweep computes at a time, "
        f"{MAX_WAITING_JOBS} may wait (one more: 429). The same grid again, while it "
        "waits or runs, is the same sweep; after it stopped (the lab shut down), it runs only "
        "the configurations the store lacks. GET /api/sweeps and the sweep's page follow it.",
        responses=_start_responses(),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _start_body()}},
            },
        },
    )
    r.add_api_route(
        "/api/sweeps/{sweep_id}",
        sweep_json,
        methods=["GET"],
        tags=["sweeps"],
        summary="One sweep's summary: heat map and tables",
        description="Per cell (mean over seeds): final and best loss, loss at init, runs "
        "diverged; the learning-rate sensitivity of each other setting; the heat map of one "
        "value over two axes, the other axes fixed (fix) or averaged, described as a figure. "
        "Read from the store as it is now: a running sweep answers what is stored so far "
        f"(complete: false). At most {catalog.MAX_VIEW_CELLS} configurations.",
        responses=schemas.responses(
            STATE,
            "the sweep's state and view",
            _404=schemas.error("no sweep of that id in the store"),
        ),
        openapi_extra={"parameters": _QUERY},
    )
    return r
