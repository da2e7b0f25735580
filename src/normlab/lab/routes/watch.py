"""The ``/watch`` page: a :func:`normlab.watch` log, shown live as the training run writes it.

:func:`router` makes these routes (the log is ``watch`` of the app's
:class:`~normlab.lab.state.LabState`, a :class:`~normlab.lab.watchlog.WatchLog`, or ``None``
when the lab was started without ``--watch-log``):

- ``GET /watch``: the page; without a log it says how to write one and start the lab on it;
- ``GET /api/watch``: the log's state once, as JSON (:func:`~normlab.lab.watchlog.watch_state`);
- ``GET /api/watch/stream``: the same state as Server-Sent Events: one ``state`` event at once,
  then one each time the file has grown (looked at every :data:`~normlab.lab.watchlog.POLL_S`
  seconds), a comment line every :data:`KEEPALIVE_S` seconds in between. It ends when the client
  disconnects or the lab shuts down. At most :data:`MAX_STREAMS` are open at once; beyond that
  it answers 503 in the lab's error shape.

The log's path is fixed when the lab starts; no request names a file.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from normlab.lab import schemas, sse
from normlab.lab.errors import bad_input, busy
from normlab.lab.requests import script_json
from normlab.lab.sse import KEEPALIVE_S, RETRY_MS
from normlab.lab.state import lab_state
from normlab.lab.watchlog import POLL_S, WatchLog

MAX_STREAMS = 8
"""Streams open at once; one more answers 503 (each holds a connection and a poll)."""

_NO_LOG = "this lab follows no log: start it with normlab lab --watch-log FILE.jsonl"


async def _state(watch: WatchLog) -> dict[str, Any]:
    """The log's state, its file read in a worker thread (the event loop keeps serving)."""
    return await anyio.to_thread.run_sync(watch.state)


async def _events(request: Request, watch: WatchLog) -> AsyncIterator[str]:
    """``state`` events, one per change of the log, until the client or the lab goes."""
    yield sse.retry(RETRY_MS)
    sent, quiet_since = -1, time.monotonic()
    while not watch.closed and not await request.is_disconnected():
        state = await _state(watch)
        if state["version"] != sent:
            sent, quiet_since = state["version"], time.monotonic()
            yield sse.event("state", state, id=sent)
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            quiet_since = time.monotonic()
            yield sse.comment("still watching")
        await anyio.sleep(POLL_S)


async def watch_json(request: Request) -> Any:
    """``GET /api/watch``: the log's state now."""
    watch = lab_state(request).watch
    if watch is None:
        return bad_input("watch_log", _NO_LOG, status=404)
    return await _state(watch)


async def watch_stream(request: Request) -> Any:
    """``GET /api/watch/stream``: the log's state as Server-Sent Events."""
    state = lab_state(request)
    watch = state.watch
    if watch is None:
        return bad_input("watch_log", _NO_LOG, status=404)
    if state.watch_streams >= MAX_STREAMS:
        return busy(f"{MAX_STREAMS} pages already follow this log: close one and reload")
    state.watch_streams += 1

    def release() -> None:
        state.watch_streams -= 1

    return sse.EventStream(_events(request, watch), release)


async def watch_page(request: Request) -> HTMLResponse:
    """``GET /watch``: the log's page (its first state embedded), or how to make a log."""
    watch = lab_state(request).watch
    state = None if watch is None else await _state(watch)
    initial = None if state is None else script_json(state)
    site = lab_state(request).site
    page: HTMLResponse = site.render("watch.html", state=state, initial=initial, current="watch")
    return page


_STRINGS = {"type": "array", "items": {"type": "string"}}
_STEP = {"type": ["integer", "null"]}
STATE: schemas.JSON = {
    "type": "object",
    "required": [
        "path", "version", "status", "message", "summary", "records", "kept", "first_step",
        "last_step", "problems", "events", "errors", "skipped", "behind", "figures", "tables",
    ],
    "properties": {
        "path": {"type": "string"},
        "version": {"type": "integer"},
        "status": {"type": "string"},
        "message": {"type": "string"},
        "summary": {"type": "string"},
        "records": {"type": "integer", "minimum": 0},
        "kept": {"type": "integer", "minimum": 0},
        "first_step": _STEP,
        "last_step": _STEP,
        "problems": _STRINGS,
        "events": _STRINGS,
        "errors": _STRINGS,
        "skipped": {"type": "integer", "minimum": 0},
        "behind": {"type": "boolean"},
        "figures": {"type": "array", "items": schemas.ref("Figure")},
        "tables": {"type": "array", "items": schemas.ref("Table")},
    },
}  # fmt: skip
"""What ``GET /api/watch`` answers (:func:`~normlab.lab.watchlog.watch_state`)."""
_STATE_TEXT = (
    "the log's state: path, status and message, summary, records, first_step and last_step, "
    "problems, events, errors (skipped lines, by number), figures and tables"
)


def router() -> APIRouter:
    """``/watch``, ``/api/watch`` and ``/api/watch/stream``."""
    schemas.shared()
    absent = schemas.error("the lab was started without --watch-log")
    r = APIRouter()
    r.add_api_route("/watch", watch_page, methods=["GET"], include_in_schema=False)
    r.add_api_route(
        "/api/watch",
        watch_json,
        methods=["GET"],
        tags=["watch"],
        summary="The watched training log, once",
        description="The log given to normlab lab --watch-log, as the /watch page shows it: "
        "records read, the last step, the labels gained and lost, the training figure "
        "described as data and the last record's per-layer table.",
        responses=schemas.responses(STATE, _STATE_TEXT, _404=absent),
    )
    r.add_api_route(
        "/api/watch/stream",
        watch_stream,
        methods=["GET"],
        tags=["watch"],
        summary="The watched training log, live (Server-Sent Events)",
        description="A text/event-stream: a `state` event (the JSON of GET /api/watch) at "
        "once and whenever the log has grown, until the client disconnects. "
        f"At most {MAX_STREAMS} streams at once.",
        response_description="`state` events, each the JSON of GET /api/watch",
        responses={
            **sse.STREAM_RESPONSE,
            **schemas.ERRORS,
            503: schemas.error(f"{MAX_STREAMS} streams are open already"),
            404: absent,
        },
        response_class=StreamingResponse,
    )
    return r
