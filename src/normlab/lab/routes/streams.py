"""The training widgets' runs as they go: ``GET /api/experiments/NAME/stream`` (Server-Sent Events).

A widget of an experiment that streams (its code yields the result so far, as ``bn-lr`` does
after every step; the runner watches the yields, the code knows nothing of the lab) reads its
run here instead of waiting for ``POST /api/experiments/NAME``: ``frame`` events carry the
figures of the result so far and how many steps are done, at most every
:data:`~normlab.lab.runner.FRAME_S`; the ``result`` event is the whole answer, the same JSON as
the POST's, and ends the stream. The run is the Runner's, cached and shared like a POST's: a
cached answer comes at once, and a run that several pages ask for is computed once. When every
client of a run has gone, it stops at its next step. Query values are written as the CLI takes
them, as for ``/code``; a bad one is a 422 before the stream starts. At most :data:`MAX_STREAMS`
are open at once (503 beyond). A request from another site (see :mod:`normlab.lab.security`)
is sent a cached answer and starts no run (403).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from normlab.experiments import Experiment, list_experiments, params_dict
from normlab.lab import schemas, sse
from normlab.lab.errors import busy
from normlab.lab.requests import REFUSED, bound, foreign, query_params, query_schema, refusal
from normlab.lab.runner import RunRefused
from normlab.lab.state import lab_state

MAX_STREAMS = 16
"""Streamed runs open at once, over every page: each holds a worker thread while it trains."""


Items = AsyncIterator[tuple[str, str | bytes]]
"""What a stream sends: :meth:`~normlab.lab.runner.Runner.astream`'s ``(kind, data)``."""


async def _given(body: bytes) -> Items:
    """A cached answer, all a request from another site may be sent."""
    yield "result", body


async def _events(items: Items) -> AsyncIterator[str]:
    yield sse.retry()
    try:
        async for kind, data in items:
            # JSON made off the event loop (the answer's once per cache entry): sent as it is
            text = data.decode() if isinstance(data, bytes) else data
            yield f"event: {kind}\ndata: {text}\n\n"
    except REFUSED as exc:  # the lab is stopping, or the run failed: say so and end
        yield sse.event("error", {"parameter": getattr(exc, "param", None), "message": str(exc)})


async def stream(name: str, request: Request) -> Any:
    """``GET /api/experiments/NAME/stream``: frames of the run, then its answer."""
    try:
        _, params = query_params(name, request)
    except REFUSED as exc:
        return refusal(exc)
    state = lab_state(request)
    refuse = foreign(request)
    if refuse is None:
        items: Items = state.runner.astream(name, params_dict(params))
    else:  # from another site: the cached answer, or no run
        body = state.runner.cached(name, params_dict(params))
        if body is None:
            return refusal(RunRefused(refuse))
        items = _given(body)
    if state.widget_streams >= MAX_STREAMS:
        return busy(f"{MAX_STREAMS} widgets are training already: wait for one to finish")
    state.widget_streams += 1

    def release() -> None:
        state.widget_streams -= 1

    return sse.EventStream(_events(items), release)


def _route(r: APIRouter, e: Experiment) -> None:
    r.add_api_route(
        f"/api/experiments/{e.name}/stream",
        bound(stream, e.name),
        methods=["GET"],
        tags=["experiments"],
        summary=f"{e.title}, live (Server-Sent Events)",
        description="A text/event-stream of the run for these parameters (query values as the "
        f"CLI takes them): `frame` events (`done` of `total` steps, each a `unit` ({e.unit!r}), "
        "and the `figures` of the result so far) while it runs, then one `result` event, the "
        "JSON that POST "
        f"/api/experiments/{e.name} answers, and the stream ends; an `error` event instead "
        f"when the run was stopped. At most {MAX_STREAMS} streams at once.",
        name=f"stream_{e.name}",
        responses={
            **sse.STREAM_RESPONSE,
            **schemas.ERRORS,
            503: schemas.error(f"{MAX_STREAMS} streams are open already, or the run stopped"),
        },
        response_class=StreamingResponse,
        openapi_extra={"parameters": [query_schema(p) for p in e.parameters]},
    )


def router() -> APIRouter:
    """``GET /api/experiments/NAME/stream`` for every experiment registered now that streams."""
    r = APIRouter()
    for e in list_experiments():
        if e.streams:
            _route(r, e)
    return r
