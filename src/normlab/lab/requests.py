"""What the lab's routes share: reading an experiment's parameters from a request (a JSON
body, or a query string of CLI-style values), declaring them in OpenAPI, answering what a run
refuses with the lab's error shape, noticing that a client has gone (and leaving a page's runs
then: :func:`in_visit`), binding a generated route's name, and JSON safe inside a page's
``<script>``.

Used by the modules of :mod:`normlab.lab.routes` and by :mod:`normlab.lab.site`; it imports
none of them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from fastapi import Request
from fastapi.responses import JSONResponse
from markupsafe import Markup

from normlab.experiments import (
    Experiment,
    Parameter,
    ParameterError,
    ParameterTypeError,
    UnknownExperiment,
    get_experiment,
)
from normlab.lab import schemas
from normlab.lab.errors import bad_input, busy, json_body, read_body
from normlab.lab.runner import RunAbandoned, RunBusy, RunCancelled, Runner, RunRefused, Waiter
from normlab.lab.security import FOREIGN

T = TypeVar("T")

MAX_PARAMS_BYTES = 64 << 10
"""The largest body ``POST /api/experiments/NAME`` reads (the longest allowed one is a few
hundred bytes)."""

REFUSED = (
    RunRefused,
    RunCancelled,
    RunAbandoned,
    RunBusy,
    UnknownExperiment,
    ParameterError,
    ParameterTypeError,
)
"""What an experiment's routes answer with the lab's error shape instead of a result."""


async def read_params(request: Request) -> dict[str, Any] | JSONResponse:
    """The request's JSON body as parameters (no body: ``{}``, the defaults), or the 4xx answer
    for a body that is too large, not JSON, or not a JSON object."""
    raw = await read_body(request, MAX_PARAMS_BYTES, None)
    if isinstance(raw, JSONResponse):
        return raw
    if not raw:  # no body: the defaults; a body of whitespace is no JSON object
        return {}
    body = json_body(raw, None, "request body is not valid JSON")
    if isinstance(body, JSONResponse | dict):
        return body
    return bad_input(
        None, f"request body must be a JSON object of parameters, got {type(body).__name__}"
    )


def refusal(exc: Exception) -> JSONResponse:
    """422 naming the parameter (or the experiment's name); 503 for a run that was stopped;
    403 naming ``origin`` for a run a request from another site may not start."""
    if isinstance(exc, RunRefused):
        return bad_input("origin", str(exc), status=403)
    if isinstance(exc, RunBusy):
        return busy(str(exc))  # 503 with Retry-After
    if isinstance(exc, RunCancelled | RunAbandoned):  # (abandoned: nobody is there to read it)
        return bad_input(None, str(exc), status=503)
    if isinstance(exc, UnknownExperiment):
        return bad_input("name", str(exc))
    return bad_input(getattr(exc, "param", None), str(exc))


def query_params(name: str, request: Request) -> tuple[Experiment, Any]:
    """The experiment and its validated ``Params`` from a query string (CLI-style values)."""
    experiment = get_experiment(name)
    declared = {p.name: p for p in experiment.parameters}
    values: dict[str, Any] = {}
    for key, text in request.query_params.items():
        if key not in declared:
            valid = ", ".join(declared)
            raise ParameterError(
                key, f"unknown parameter {key!r} for {name!r}, use one of: {valid}"
            )
        values[key] = declared[key].parse(text)
    return experiment, experiment.make_params(values)


def query_schema(p: Parameter) -> dict[str, Any]:
    """One parameter as an OpenAPI query parameter. A list is an array written as the CLI
    takes it, its items joined by commas (``0.9,1,1.1``: OpenAPI's ``form`` style, not
    exploded), so that the document states each item's range and how many there may be."""
    declared: dict[str, Any] = {"name": p.name, "in": "query", "required": False}
    schema = schemas.parameter(p)
    if p.kind == "float_list":
        schema["description"] = f"{schema['description']} ({p.allowed()}, comma-separated)"
        declared.update(style="form", explode=False)
    return {**declared, "schema": schema}


async def client_gone(request: Request) -> None:
    """Return once the client of ``request`` (its body already read) has disconnected.

    After the body, the server's next ASGI message for the request is ``http.disconnect``: sent
    when the client closes the connection (a widget's superseded fetch is aborted) or once the
    response has gone out.
    """
    while (await request.receive())["type"] != "http.disconnect":
        pass


def foreign(request: Request) -> str | None:
    """Why ``request`` may start no run (it came from another site, see
    :mod:`normlab.lab.security`), or ``None``: pass it on as a run's ``refuse``."""
    reason: str | None = request.scope.get(FOREIGN)
    return reason


Run = Callable[[str, dict[str, Any]], dict[str, Any]]
"""What a page renders with: ``run(name, params)`` -> the answer (see :class:`Visit`)."""


class Visit:
    """The runs one page request asks for (a lesson asks for several): each waits with a
    :class:`~normlab.lab.runner.Waiter` of its own, and :meth:`leave` (its client has gone)
    leaves them all, so each stops at its next step unless someone else waits for it.

    Args:
        runner: the lab's runner.
        refuse: why the request may start no run (:func:`foreign`), or ``None``.
        keep: the runs are a page's own (a lesson's, an experiment page's defaults), kept in the
            cache for good.
    """

    def __init__(self, runner: Runner, refuse: str | None = None, keep: bool = False) -> None:
        self.runner, self.refuse, self.keep = runner, refuse, keep
        self._lock = threading.Lock()  # run() is called in a worker thread, leave() on the loop
        self._waiters: list[Waiter] = []
        self.gone = False

    def run(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        waiter = Waiter(self.runner)
        with self._lock:
            self._waiters.append(waiter)
            if self.gone:
                waiter.leave()  # the run refuses to start for it
        return self.runner.run(name, params, waiter, refuse=self.refuse, keep=self.keep)

    def leave(self) -> None:
        with self._lock:
            self.gone = True
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.leave()


async def in_visit(
    request: Request, runner: Runner, render: Callable[[Run], T], keep: bool = False
) -> T:
    """``render(run)`` in a worker thread, its runs those of one :class:`Visit` of ``runner``
    for ``request``: they stop when its client has gone (:class:`RunAbandoned`), and a request
    from another site starts none (:class:`RunRefused`)."""
    visit = Visit(runner, foreign(request), keep)
    result: list[T] = []
    error: Exception | None = None

    async def watch() -> None:
        await client_gone(request)
        visit.leave()

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            result.append(await anyio.to_thread.run_sync(render, visit.run))
        except Exception as exc:  # raised below, not wrapped in the group's ExceptionGroup
            error = exc
        group.cancel_scope.cancel()
    if error is not None:
        raise error
    return result[0]


def bound(
    handler: Callable[[str, Request], Awaitable[Any]], name: str
) -> Callable[[Request], Awaitable[Any]]:
    """``handler`` with its experiment's ``name`` given: the endpoint of a generated route."""

    async def endpoint(request: Request) -> Any:
        return await handler(name, request)

    return endpoint


def script_json(value: object) -> Markup:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>`` can end it)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
