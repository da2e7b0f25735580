"""The web lab's application: :func:`create_app` makes one lab and :func:`serve` serves it.

The app's services live in one :class:`~normlab.lab.state.LabState`, made here and kept as
``app.state.lab``; the routes, one module per area in :mod:`normlab.lab.routes`, read it
through :func:`~normlab.lab.state.lab_state`, and the pages render with its
:class:`~normlab.lab.site.Site`. The lifespan starts the warm-up and the sandbox,
and stops what the app owns, in the order written in :func:`_lifespan`. The OpenAPI document
(read at ``/docs`` and ``/redoc``, :mod:`normlab.lab.routes.docs`) carries each experiment's
parameter schema, generated from the registry's declarations.

:func:`serve` sets the limits a lab open to slow or hostile clients needs (issue 32, finding 5:
1,100 slow connections took every descriptor and asyncio logged 58 MB in 40 s): a deadline on
reading each request, a keep-alive timeout, a ceiling on open connections that a new client
reaches by closing the connection that has waited longest for its request, and a log that says
each repeated complaint a few times a minute.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import resource
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from normlab import __version__
from normlab.lab import assets, errors, schemas, site
from normlab.lab.answers import AnswerStore
from normlab.lab.progress import ProgressStore, default_db_path
from normlab.lab.routes import (
    docs,
    experiment_pages,
    experiments,
    learn,
    lesson_notebooks,
    pages,
    playground,
    streams,
    sweeps,
    train,
    watch,
)
from normlab.lab.routes.docs import DOCS_ASSETS
from normlab.lab.runner import Runner
from normlab.lab.sandbox import Sandbox, SandboxError
from normlab.lab.security import LabGuard
from normlab.lab.state import LabState, state_of
from normlab.lab.watchlog import WatchLog

__all__ = ["DOCS_ASSETS", "create_app", "serve"]

WARM_STOP_TIMEOUT_S = 60.0
"""How long shutdown waits for the warm-up to end (its run in progress stops at its next step),
and then for a sweep started from the lab (it stops before its next configuration)."""

REQUEST_READ_TIMEOUT_S = 10.0
"""How long a connection has to send a whole request, head and body, once it opens or starts
its next request; then it is closed. A browser sends a head in one packet and the lab's largest
body (a saved listing) in well under a second; a client that dribbles bytes (slowloris) only
holds a descriptor. uvicorn has no such timeout: its keep-alive timer runs between requests."""

TIMEOUT_KEEP_ALIVE_S = 5
"""How long an idle connection waits for its next request after an answer (uvicorn's default,
stated here): a page's assets reuse it within that, and idle connections do not pile up."""

LIMIT_CONCURRENCY = 512
"""The most connections the lab holds (half its descriptor limit if that is lower, see
:func:`_connection_limit`). uvicorn answers 503 to a request made at the limit; the lab keeps
below it by closing, when a connection opens, the one that has waited longest for its request,
so slow clients never keep a normal one out (:class:`_TimedH11Protocol`)."""

BACKLOG = 64
"""How many connections wait in the kernel to be accepted, and so how many asyncio accepts at
once before the lab can close any (uvicorn's 2048 would overrun a 1024-descriptor limit in one
go); a client beyond it retries its connection, as TCP does."""

LOG_REPEATS_PER_MINUTE = 10
"""How often one server complaint is logged in a minute: asyncio logs "socket.accept() out of
system resource", with its traceback, up to 2048 times a second while descriptors run out."""


def create_app(
    runner: Runner | None = None,
    *,
    warm: bool = False,
    token: str | None = None,
    sandbox: Sandbox | None = None,
    db_path: str | os.PathLike[str] | None = None,
    watch_log: str | os.PathLike[str] | None = None,
    answers: str | os.PathLike[str] | Literal["default"] | None = "default",
    sweeps_store: str | os.PathLike[str] | None = None,
) -> FastAPI:
    """Build the lab application (one :class:`Runner` per app: its experiment runs, cached,
    and its live training sessions).

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
    ``answers``: the SQLite file where the lessons' answers persist between runs of the lab
    (:mod:`normlab.lab.answers`): ``"default"`` for the user's cache folder (or
    ``$NORMLAB_ANSWERS``), ``None`` for nowhere. For the Runner made here; a ``runner`` given
    keeps its own.
    ``sweeps_store``: the sweep store ``/sweeps`` reads (default ``normlab sweep``'s own,
    :data:`~normlab.sweep.DEFAULT_STORE`); it may not exist yet, and is only read.
    """
    app = FastAPI(
        title="normlab lab",
        version=__version__,
        description="Experiments on signal propagation in deep networks, run live.",
        lifespan=functools.partial(_lifespan, warm=warm),
        docs_url=None,  # FastAPI's own load their scripts from CDNs: see routes/docs.py
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=docs.OAUTH_REDIRECT,
    )
    if runner is None:
        if answers is None:
            runner = Runner(answers=None)
        elif answers == "default":
            runner = Runner()
        else:
            runner = Runner(answers=AnswerStore(answers))
    state = LabState(
        runner=runner,
        sandbox=sandbox if sandbox is not None else Sandbox(),
        watch=None if watch_log is None else WatchLog(watch_log),
        progress=ProgressStore(db_path if db_path is not None else default_db_path()),
        site=site.Site(site.environment(), assets.plotly_js()),
        math_font=site.math_font(),
    )
    if sweeps_store is not None:
        state.sweeps = Path(sweeps_store)
    state.warm = [  # the lessons, then the /train page's numbers
        functools.partial(site.warm_lessons, app),
        functools.partial(train.warm_numbers, state.runner),
    ]
    app.state.lab = state
    app.add_middleware(LabGuard, token=token)
    errors.install(app)
    schemas.install(app)
    _include_routes(app)
    return app


def _include_routes(app: FastAPI) -> None:
    """Every area's routes, in the order of the OpenAPI document (a mount answers everything
    under its prefix: the routes it must not shadow come first)."""
    app.include_router(docs.router())
    app.mount(DOCS_ASSETS, docs.assets(), name="docs-assets")
    app.include_router(experiments.router())
    app.include_router(pages.router())
    app.include_router(lesson_notebooks.router())
    app.mount("/static", pages.static(), name="static")  # after the vendored files' routes
    app.include_router(experiment_pages.router())
    app.include_router(playground.router())
    app.include_router(learn.router())
    app.include_router(watch.router())
    app.include_router(sweeps.router())
    app.include_router(streams.router())
    app.include_router(train.router())


@asynccontextmanager
async def _lifespan(app: FastAPI, warm: bool) -> AsyncIterator[None]:
    """Start (the warm-up, the sandbox) and, whatever happens, stop what the app owns (a sweep
    started from the lab stops before its next configuration, and is waited for)."""
    state = state_of(app)
    state.runner.resume()  # after a shutdown, the app may be started again
    if state.watch is not None:
        state.watch.closed = False
    warmer: threading.Thread | None = None
    try:
        if warm:
            warmer = threading.Thread(target=_warm, args=(state,), name="normlab-warm", daemon=True)
            warmer.start()
            try:
                state.sandbox.start()  # its imports run in its own process meanwhile
            except SandboxError as exc:  # the playground will answer 503 with the reason
                print(f"normlab lab: {exc}", file=sys.stderr)
        if state.progress.closed:  # the app is started again after a shutdown
            state.progress = ProgressStore(state.progress.path)
        yield
    finally:
        # A run still going on a daemon thread when the interpreter exits aborts it
        # ("terminate called without an active exception"): runs in progress, the
        # warm-up's, requests' and the live sessions', stop at their next step, and no
        # other starts.
        _end_streams(app)
        if warmer is not None:
            warmer.join(timeout=WARM_STOP_TIMEOUT_S)
        state.runner.finish_jobs(timeout=WARM_STOP_TIMEOUT_S)  # a lab sweep: its cell ends
        state.sandbox.close()
        state.progress.close()
        if state.runner.answers is not None:  # opened again on its next use
            state.runner.answers.close()


THREADS = 1
"""Torch's intra-op threads for every computation the lab makes (``normlab lab --threads``).

One by default: the lab's runs are small, several run at once (a page's widgets, two learners),
and with more threads than it has cores a run's OpenMP threads wait on each other; on a busy
2-core machine ``bn-lr-sweep`` at its maxima took 87 s of CPU with torch's default of one
thread a core, against 3.2 s with one (issue 32, finding 3). The playground's runs take the
same count, so that they print the lab's numbers."""


def use_threads(threads: int) -> None:
    """Compute with ``threads`` intra-op threads from now on (:data:`THREADS`)."""
    import torch

    torch.set_num_threads(threads)


def serve(app: FastAPI, host: str, port: int, threads: int = THREADS) -> None:
    """Serve ``app`` with uvicorn until Ctrl+C (or SIGTERM), as ``normlab lab`` does.

    On the signal, the runs in progress are cancelled first (their requests answer 503) and
    then uvicorn shuts down: it waits for open requests to end, which would otherwise mean
    waiting for the longest run (a 12 x 256 bn-lr of 2000 steps trains for most of a minute).
    The event streams of ``/watch`` and ``/train``, which never end by themselves, end then
    too. Every computation uses ``threads`` torch threads (:data:`THREADS`).

    Slow clients are bounded (issue 32, finding 5): a request must arrive whole within
    :data:`REQUEST_READ_TIMEOUT_S`, an idle connection closes after
    :data:`TIMEOUT_KEEP_ALIVE_S`, open connections stay below :data:`LIMIT_CONCURRENCY` (the
    slowest readers make room for new clients), and a repeated complaint is logged at most
    :data:`LOG_REPEATS_PER_MINUTE` times a minute.
    """

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            _end_streams(app)  # uvicorn waits for open responses: the live streams end
            super().handle_exit(sig, frame)

    use_threads(threads)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=_TimedH11Protocol,
        timeout_keep_alive=TIMEOUT_KEEP_ALIVE_S,
        limit_concurrency=_connection_limit(),
        backlog=BACKLOG,
    )
    for name in ("asyncio", "uvicorn.error"):  # after Config, which configures uvicorn's logs
        logging.getLogger(name).addFilter(_RepeatLimit())
    server = Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn passes the signal on after shutdown
        server.run()
    if not server.started:  # e.g. the port is taken: uvicorn has said why (uvicorn.run's 3)
        raise SystemExit(3)


def _connection_limit() -> int:
    """:data:`LIMIT_CONCURRENCY`, or half the process's descriptor limit if that is lower: the
    other half holds a :data:`BACKLOG` of connections accepted at once and the lab's own files
    (its database, the sandbox's pipes)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return LIMIT_CONCURRENCY
    return min(LIMIT_CONCURRENCY, soft // 2)


class _TimedH11Protocol(H11Protocol):
    """uvicorn's h11 connection with a deadline on reading each request, and room for new ones.

    A connection is *reading* from when it opens (or its next request starts) until its
    request, head and body, has arrived whole. Reading longer than
    :data:`REQUEST_READ_TIMEOUT_S` closes it. A connection that opens when the lab holds
    ``limit_concurrency`` connections closes the reading connection that started first (itself
    if no other reads), so uvicorn, which answers 503 at that limit, never does for it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading_since: float | None = None  # loop time; None: not reading a request
        self._read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._start_reading()
        self._make_room()

    def data_received(self, data: bytes) -> None:
        if self.reading_since is None and self.conn.their_state is h11.IDLE:
            self._start_reading()  # the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):  # read whole (or refused)
            self._stop_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_reading()
        super().connection_lost(exc)

    def _start_reading(self) -> None:
        self.reading_since = self.loop.time()
        self._read_deadline = self.loop.call_later(REQUEST_READ_TIMEOUT_S, self.transport.close)

    def _stop_reading(self) -> None:
        self.reading_since = None
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _make_room(self) -> None:
        limit = self.limit_concurrency
        if limit is None or len(self.connections) < limit:
            return
        live = [c for c in self.connections if not c.transport.is_closing()]
        reading = [
            c for c in live if isinstance(c, _TimedH11Protocol) and c.reading_since is not None
        ]
        reading.sort(key=lambda c: c.reading_since or 0.0)
        for oldest in reading[: len(live) - limit + 1]:
            oldest.transport.close()


class _RepeatLimit(logging.Filter):
    """Pass each message (told apart by its first line) :data:`LOG_REPEATS_PER_MINUTE` times
    in a clock minute, so a flood of one complaint writes kilobytes, not megabytes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._minute = 0
        self._seen: collections.Counter[str] = collections.Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        minute = int(self._clock() // 60)
        if minute != self._minute:
            self._minute, self._seen = minute, collections.Counter()
        first_line = str(record.msg).partition("\n")[0]
        self._seen[first_line] += 1
        return self._seen[first_line] <= LOG_REPEATS_PER_MINUTE


def _end_streams(app: FastAPI) -> None:
    """Cancel the runner: its experiment runs stop at their next step and its live
    ``/api/train/stream`` sessions after their step in progress, and no other run starts
    (:meth:`~normlab.lab.runner.Runner.cancel`); end the ``/api/watch/stream`` responses (at
    their next look at the log)."""
    state = state_of(app)
    state.runner.cancel()
    if state.watch is not None:
        state.watch.close()


def _warm(state: LabState) -> None:
    """Compute what :attr:`LabState.warm` lists, in order; a failure only costs time."""
    for step in state.warm:
        try:
            step()
        except Exception as exc:  # the route will report it
            print(f"normlab lab: warming the lessons failed: {exc!r}", file=sys.stderr)
