"""The web lab's HTTP face: thin routes over the experiment registry.

``GET /api/experiments`` lists every experiment with its parameter schemas; ``POST
/api/experiments/{name}`` validates a JSON object of parameters against the registry and answers
the Result's ``to_dict()``. Bad input answers 422 with ``{"detail": {"parameter", "message"}}``.
The OpenAPI document (read at ``/docs`` and ``/redoc``, whose scripts the lab serves itself)
carries each experiment's parameter schema, generated from the same declarations. Pages and
static files come from :mod:`normlab.lab.pages`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import fastapi_offline
import uvicorn
from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from normlab import __version__, notebook
from normlab.experiments import (
    Experiment,
    list_experiments,
    script,
)
from normlab.experiments.params import params_dict
from normlab.lab import errors, schemas
from normlab.lab.lessons.markup import highlight
from normlab.lab.progress import ProgressStore, default_db_path
from normlab.lab.requests import REFUSED, query_params, query_schema, read_params, refusal
from normlab.lab.runner import Runner
from normlab.lab.sandbox import Sandbox, SandboxError
from normlab.lab.security import LabGuard
from normlab.lab.watchlog import WatchLog


def describe(e: Experiment) -> dict[str, Any]:
    """What ``GET /api/experiments`` says of one experiment (the widgets are built from it)."""
    return {
        "name": e.name,
        "title": e.title,
        "summary": e.summary,
        "trains": e.trains,
        "streams": e.streams,
        "parameters": [p.schema() for p in e.parameters],
    }


DOCS_ASSETS = "/static/docs"
"""Where the scripts and styles of ``/docs`` and ``/redoc`` are served from: the lab itself."""

_DOCS_FILES = Path(fastapi_offline.__file__).parent / "static"  # Swagger UI 5, ReDoc 2
_REDOC_LOGO = b'"https://cdn.redoc.ly/redoc/logo-mini.svg"'


def _install_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) of the OpenAPI document, served offline.

    FastAPI's own pages load Swagger UI, ReDoc and Google fonts from CDNs and come up blank
    without a network; the ``fastapi-offline`` wheel ships those scripts, served here under
    :data:`DOCS_ASSETS`, and ReDoc is asked for no fonts. ReDoc 2 still fetches the logo of its
    "API docs by Redocly" link from its CDN whatever its options (Redocly/redoc#2108): the lab
    serves its script with that address emptied, and the image, failing, hides itself.
    """
    spec, oauth = str(app.openapi_url), str(app.swagger_ui_oauth2_redirect_url)
    icon = "/static/favicon.svg"

    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=spec,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=icon,
            oauth2_redirect_url=oauth,
        )

    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=spec,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=icon,
            with_google_fonts=False,
        )

    def redoc_script() -> Response:
        return Response(_redoc_script(), media_type="text/javascript; charset=utf-8")

    for path, endpoint in (
        ("/docs", swagger),
        (oauth, get_swagger_ui_oauth2_redirect_html),
        ("/redoc", redoc),
        (f"{DOCS_ASSETS}/redoc.standalone.js", redoc_script),  # before the mount, to win
    ):
        app.add_api_route(path, endpoint, methods=["GET"], include_in_schema=False)
    app.mount(DOCS_ASSETS, StaticFiles(directory=_DOCS_FILES), name="docs-assets")


@functools.cache
def _redoc_script() -> bytes:
    """ReDoc's script with its one address outside the lab (its logo's) emptied."""
    return (_DOCS_FILES / "redoc.standalone.js").read_bytes().replace(_REDOC_LOGO, b'""')


WARM_STOP_TIMEOUT_S = 60.0
"""How long shutdown waits for the warm-up to end (its run in progress stops at its next step)."""


def create_app(
    runner: Runner | None = None,
    *,
    warm: bool = False,
    token: str | None = None,
    sandbox: Sandbox | None = None,
    db_path: str | os.PathLike[str] | None = None,
    watch_log: str | os.PathLike[str] | None = None,
) -> FastAPI:
    """Build the lab application (one :class:`Runner` cache per app).

    With ``warm``, a background thread renders every lesson once at startup, so the first
    learner to open a lesson does not wait for its live results (several training runs).
    ``token``: every request must carry it (see :mod:`normlab.lab.security`); ``None`` serves
    loopback clients only. Either way, requests that change state must come from the lab's own
    pages.
    ``sandbox`` runs the playground's code (``POST /api/run``); the app owns it: it starts on
    the first run (at startup with ``warm``) and is closed when the app shuts down.
    ``db_path``: the learner's progress database (default :func:`default_db_path`), opened
    here (a bad path raises :class:`~normlab.lab.progress.ProgressStoreError`) and closed when
    the app shuts down.
    ``watch_log``: the :func:`normlab.watch` log that ``/watch`` shows live (it may not exist
    yet; a directory or an unreadable path raises
    :class:`~normlab.lab.watchlog.WatchLogError`). Fixed here: no request names a file.
    """
    app = FastAPI(
        title="normlab lab",
        version=__version__,
        description="Experiments on signal propagation in deep networks, run live.",
        lifespan=functools.partial(_lifespan, warm=warm),
        docs_url=None,  # FastAPI's own load their scripts from CDNs: see _install_docs
        redoc_url=None,
    )
    _install_docs(app)
    app.state.runner = runner or Runner()
    app.state.sandbox = sandbox if sandbox is not None else Sandbox()
    app.state.watch = None if watch_log is None else WatchLog(watch_log)
    app.state.progress = ProgressStore(db_path if db_path is not None else default_db_path())
    app.add_middleware(LabGuard, token=token)
    errors.install(app)
    schemas.install(app)
    app.add_api_route(
        "/api/experiments",
        experiments,
        methods=["GET"],
        tags=["experiments"],
        summary="Every experiment and its parameters",
        responses=schemas.responses(schemas.experiment_list()),
    )
    for e in list_experiments():
        _add_experiment_routes(app, e)
    app.add_api_route("/api/experiments/{name}", run, methods=["POST"], include_in_schema=False)

    from normlab.lab import (
        experiment_pages,
        learn,
        pages,
        playground,
        trainpage,
        watchpage,
        widgetstream,
    )

    pages.install(app)
    experiment_pages.install(app)  # renders with the pages' Site
    playground.install(app)
    learn.install(app)
    watchpage.install(app)
    widgetstream.install(app)
    trainpage.install(app)  # after the pages: it adds its numbers to their warm-up
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI, warm: bool) -> AsyncIterator[None]:
    """Start (the warm-up, the sandbox) and, whatever happens, stop what the app owns."""
    app.state.runner.resume()  # after a shutdown, the app may be started again
    if app.state.watch is not None:
        app.state.watch.closed = False
    app.state.train_runs.resume()
    warmer: threading.Thread | None = None
    try:
        if warm:
            warmer = threading.Thread(target=_warm, args=(app,), name="normlab-warm", daemon=True)
            warmer.start()
            try:
                app.state.sandbox.start()  # its imports run in its own process meanwhile
            except SandboxError as exc:  # the playground will answer 503 with the reason
                print(f"normlab lab: {exc}", file=sys.stderr)
        if app.state.progress.closed:  # the app is started again after a shutdown
            app.state.progress = ProgressStore(app.state.progress.path)
        yield
    finally:
        # A run still going on a daemon thread when the interpreter exits aborts it
        # ("terminate called without an active exception"): runs in progress, the
        # warm-up's and requests', stop at their next step, and no other starts.
        app.state.runner.cancel()
        _end_streams(app)
        if warmer is not None:
            warmer.join(timeout=WARM_STOP_TIMEOUT_S)
        app.state.sandbox.close()
        app.state.progress.close()


def _add_experiment_routes(app: FastAPI, e: Experiment) -> None:
    """``POST /api/experiments/NAME`` (run) and its ``/code`` and ``/notebook`` siblings."""
    app.add_api_route(
        f"/api/experiments/{e.name}",
        _bound(run, e.name),
        methods=["POST"],
        tags=["experiments"],
        summary=e.title,
        description=e.summary + ". Missing parameters take their defaults.",
        name=f"run_{e.name}",
        responses=schemas.responses(schemas.answer(e), "the Result, its figures and tables"),
        openapi_extra={
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": schemas.params_object(e.parameters)}},
            },
        },
    )
    query = {"parameters": [query_schema(p) for p in e.parameters]}
    app.add_api_route(
        f"/api/experiments/{e.name}/code",
        _bound(code, e.name),
        methods=["GET"],
        tags=["code"],
        summary=f"The plain-PyTorch code of {e.name}",
        description="The script that computes the experiment for these parameters (query "
        "values as the CLI takes them), plain and highlighted. It needs no normlab.",
        name=f"code_{e.name}",
        responses=schemas.responses(schemas.code(e)),
        openapi_extra=query,
    )
    app.add_api_route(
        f"/api/experiments/{e.name}/notebook",
        _bound(download, e.name),
        methods=["GET"],
        tags=["code"],
        summary=f"{e.name} as a Jupyter notebook",
        description="The same code as an .ipynb download, with what it prints as outputs.",
        name=f"notebook_{e.name}",
        responses={
            **schemas.responses(schemas.NOTEBOOK),
            200: {
                "description": "the notebook",
                "content": {"application/x-ipynb+json": {"schema": schemas.NOTEBOOK}},
            },
        },
        openapi_extra=query,
        response_class=Response,
    )


def experiments() -> list[dict[str, Any]]:
    """``GET /api/experiments``: the registry, with every parameter's schema."""
    return [describe(e) for e in list_experiments()]


async def run(name: str, request: Request) -> Any:
    """``POST /api/experiments/NAME``: the answer for a JSON object of parameters."""
    params = await read_params(request)
    if isinstance(params, JSONResponse):
        return params
    try:
        body = await request.app.state.runner.arun_json(
            name, params, gone=lambda: _client_gone(request)
        )
        return Response(content=body, media_type="application/json")
    except REFUSED as exc:
        return refusal(exc)


async def code(name: str, request: Request) -> Any:
    """``GET /api/experiments/NAME/code``: the script behind the answer, plain and highlighted."""
    try:
        experiment, params = query_params(name, request)
    except REFUSED as exc:
        return refusal(exc)
    text = script.render(experiment, params)
    return {
        "experiment": name,
        "params": params_dict(params),
        "script": text,
        "html": str(highlight(text)),
    }


async def download(name: str, request: Request) -> Any:
    """``GET /api/experiments/NAME/notebook``: the script as a notebook, with its output."""
    try:
        experiment, params = query_params(name, request)
        body = await request.app.state.runner.arun_json(name, params_dict(params))
    except REFUSED as exc:
        return refusal(exc)
    nb = notebook.notebook(experiment, params, json.loads(body)["output"])
    return Response(
        notebook.dumps(nb),
        media_type="application/x-ipynb+json",
        headers={"Content-Disposition": f'attachment; filename="normlab-{name}.ipynb"'},
    )


def serve(app: FastAPI, host: str, port: int) -> None:
    """Serve ``app`` with uvicorn until Ctrl+C (or SIGTERM), as ``normlab lab`` does.

    On the signal, the runs in progress are cancelled first (their requests answer 503) and
    then uvicorn shuts down: it waits for open requests to end, which would otherwise mean
    waiting for the longest run (a 12 x 256 bn-lr of 2000 steps trains for most of a minute).
    The event streams of ``/watch`` and ``/train``, which never end by themselves, end then
    too.
    """

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.runner.cancel()
            _end_streams(app)  # uvicorn waits for open responses: the live streams end
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn passes the signal on after shutdown
        server.run()
    if not server.started:  # e.g. the port is taken: uvicorn has said why (uvicorn.run's 3)
        raise SystemExit(3)


def _end_streams(app: FastAPI) -> None:
    """End the ``/api/watch/stream`` responses (at their next look at the log) and the
    ``/api/train/stream`` runs (after their step in progress); start no other run."""
    if app.state.watch is not None:
        app.state.watch.close()
    app.state.train_runs.close()


async def _client_gone(request: Request) -> None:
    """Return once the client of ``request`` (its body already read) has disconnected.

    After the body, the server's next ASGI message for the request is ``http.disconnect``: sent
    when the client closes the connection (a widget's superseded fetch is aborted) or once the
    response has gone out.
    """
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _warm(app: FastAPI) -> None:
    try:
        app.state.warm_lessons()
    except Exception as exc:  # a failed warm-up only costs time; the route will report it
        print(f"normlab lab: warming the lessons failed: {exc!r}", file=sys.stderr)


def _bound(run: Any, name: str) -> Any:
    async def endpoint(request: Request) -> Any:
        return await run(name, request)

    return endpoint
