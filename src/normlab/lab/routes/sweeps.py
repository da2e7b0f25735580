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
- ``GET /api/sweeps`` and ``GET /api/sweeps/{sweep_id}``: the same as JSON.

The lab starts no sweep: a grid is the command line's (``normlab sweep ...``, on a cluster with
``--ray``), and the page says so. Each request reads the store once, in a worker thread, and
at most :data:`~normlab.sweep.catalog.MAX_VIEW_CELLS` configurations: a larger sweep is
refused with 422 (its summary is ``normlab sweep ... --summary --plot FILE``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from normlab.experiments import ParameterError
from normlab.lab import schemas
from normlab.lab.errors import bad_input, busy
from normlab.lab.requests import script_json
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


async def sweeps_page(request: Request) -> HTMLResponse:
    """``GET /sweeps``: the list, or how to run a sweep."""
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
    """``/sweeps``, ``/sweeps/{sweep_id}``, ``/api/sweeps`` and ``/api/sweeps/{sweep_id}``."""
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
