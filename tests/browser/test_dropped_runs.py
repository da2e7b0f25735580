"""A widget's superseded request, dropped in the browser, stops its run on the server.

These tests need the lab's ``Runner`` to see what the server did, so they serve the lab from
this process (uvicorn on a thread, as ``normlab lab`` runs it) instead of the session's
subprocess: the ``server`` fixture below overrides conftest's, and the guarded ``page`` fixture
uses it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from labpage import ALLOWED_HOST, api

from normlab.lab.app import create_app
from normlab.lab.runner import Runner

HEAVY = "bn-lr.steps=2000&bn-lr.hidden_layers=12&bn-lr.width=256"  # most of a minute to train


def _wait_for(
    condition: Callable[[], object], what: str, page: Any = None, timeout: float = 120.0
) -> None:
    """Poll ``condition``; with a ``page``, wait through Playwright, whose sync API runs the
    page's route handler (the guard every request passes) only inside its own calls."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if page is not None:
            page.wait_for_timeout(20)
        else:
            time.sleep(0.02)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Runner]]:
    import uvicorn

    runner = Runner()
    with socket.socket() as s:
        s.bind((ALLOWED_HOST, 0))
        port = int(s.getsockname()[1])
    db: Path = tmp_path_factory.mktemp("dropped") / "progress.sqlite3"
    app = create_app(runner, db_path=db)
    server = uvicorn.Server(uvicorn.Config(app, host=ALLOWED_HOST, port=port, log_level="warning"))
    serving = threading.Thread(target=server.run, name="lab-under-test")
    serving.start()
    try:
        _wait_for(lambda: server.started, "the lab to serve")
        yield f"http://{ALLOWED_HOST}:{port}", runner
    finally:
        server.should_exit = True
        serving.join(timeout=60)


@pytest.fixture
def server(lab: tuple[str, Runner]) -> str:
    return lab[0]


def test_superseded_and_left_requests_stop_their_runs(page: Any, lab: tuple[str, Runner]) -> None:
    base, runner = lab
    # a long bn-lr from the address: the widget asks for it when the page opens
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/bn-lr")):
        page.goto(f"{base}/lessons/bn-from-scratch?{HEAVY}")
    _wait_for(lambda: _long_runs(runner) == 1, "the long run to start", page)
    page.wait_for_timeout(500)
    # one step of the learning-rate slider supersedes it: the widget aborts its fetch
    slider = page.locator('.nl-widget[data-widget="bn-lr"] input[data-param="lr"]')
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/bn-lr")):
        slider.focus()
        page.keyboard.press("ArrowRight")
    _wait_for(lambda: runner.abandoned == 1, "the superseded run to stop", page)
    # leaving the page drops the new (also long) request too
    page.goto(f"{base}/")
    _wait_for(lambda: runner.abandoned == 2, "the left run to stop", page)
    _wait_for(lambda: _long_runs(runner) == 0, "the long runs to end", page, timeout=20)
    status, body = api(base, "bn-lr", {"seed": 4})  # the lab is free for the next learner
    assert status == 200 and len(body["losses"]) == 150


def _long_runs(runner: Runner) -> int:
    """How many 2000-step runs the lab is computing now."""
    with runner._lock:
        entries = list(runner._cache.items())
    return sum('"steps": 2000' in key and not e.future.done() for key, e in entries)
