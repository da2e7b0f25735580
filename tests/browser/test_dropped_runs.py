"""A training widget's run grows on the page while it trains, and its superseded stream,
dropped in the browser, stops its run on the server.

These tests need the lab's ``Runner`` to see what the server did, so they serve the lab from
this process (uvicorn on a thread, as ``normlab lab`` runs it) instead of the session's
subprocess: the ``server`` fixture below overrides conftest's, and the guarded ``page`` fixture
uses it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lab_traces import TRACES
from labpage import ALLOWED_HOST, api, free_port

from normlab.lab.app import create_app
from normlab.lab.runner import Runner

HEAVY = "bn-lr.steps=500&bn-lr.hidden_layers=6&bn-lr.width=128"  # the longest bn-lr: seconds


def _wait_for(
    condition: Callable[[], object], what: str, page: Any = None, timeout: float = 120.0
) -> None:
    """Poll ``condition`` (a hang guard of ``timeout`` s); with a ``page``, wait through
    Playwright, whose sync API runs the page's route handler (the guard every request passes)
    only inside its own calls: its ``wait_for_timeout`` is the poll, not a guess at a time."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if page is not None:
            page.wait_for_timeout(20)
        else:
            time.sleep(0.02)


HEAVY_STEPS = 1000
"""The optimizer steps of a :data:`HEAVY` run (500 with BatchNorm, 500 without)."""
WAIT_S = 120.0
"""The most a held run waits: a bug fails the test, it never hangs it."""


class HeldRunner(Runner):
    """The lab's runner, whose :data:`HEAVY` runs wait before their last step until every
    request for them has gone: such a run lasts until the page has superseded or left it,
    however fast or loaded the machine (what the runs compute is unchanged)."""

    def __init__(self) -> None:
        super().__init__()
        self._checks: dict[int, int] = {}  # per run: its checks so far (one, then one a step)

    def _check(self, entry: Any) -> None:
        if entry is not None:
            n = self._checks[id(entry)] = self._checks.get(id(entry), 0) + 1
            if n == HEAVY_STEPS and _is_heavy(self, entry):  # after its step 999 of 1000
                entry.abandoned.wait(WAIT_S)
        super()._check(entry)


def _is_heavy(runner: Runner, entry: Any) -> bool:
    with runner._lock:
        return any(e is entry and '"width": 128' in key for key, e in runner._cache.items())


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Runner]]:
    import uvicorn

    runner = HeldRunner()
    port = free_port()
    db: Path = tmp_path_factory.mktemp("dropped") / "progress.sqlite3"
    app = create_app(runner, db_path=db)
    server = uvicorn.Server(uvicorn.Config(app, host=ALLOWED_HOST, port=port, log_level="warning"))
    serving = threading.Thread(target=server.run, name="lab-under-test")
    # One torch thread, as the session's lab runs (OMP_NUM_THREADS=1): the runs share two cores
    # with Chromium drawing their frames, and two intra-op threads each make them several times
    # slower there.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    serving.start()
    try:
        _wait_for(lambda: server.started, "the lab to serve")
        yield f"http://{ALLOWED_HOST}:{port}", runner
    finally:
        server.should_exit = True
        serving.join(timeout=60)
        torch.set_num_threads(threads)


@pytest.fixture
def server(lab: tuple[str, Runner]) -> str:
    return lab[0]


def _streams_bn_lr(request: Any) -> bool:
    return request.method == "GET" and "/api/experiments/bn-lr/stream?" in request.url


def _drawn_steps(page: Any) -> int:
    """How many steps the bold (chosen) loss curve of the bn-lr widget has on the page now."""
    plot = page.locator('.nl-widget[data-widget="bn-lr"] .nl-plot')
    traces = plot.evaluate(TRACES)
    return len(traces[0][0]["x"]) if traces and traces[0] else 0


def test_superseded_and_left_requests_stop_their_runs(page: Any, lab: tuple[str, Runner]) -> None:
    base, runner = lab
    # a long bn-lr from the address: the widget streams it when the page opens
    with page.expect_request(_streams_bn_lr):
        page.goto(f"{base}/lessons/bn-from-scratch?{HEAVY}")
    _wait_for(lambda: _long_runs(runner) == 1, "the long run to start", page)
    # while it trains, its curve is drawn and grows, frame by frame
    widget = page.locator('.nl-widget[data-widget="bn-lr"]')
    _wait_for(lambda: widget.evaluate("(n) => n.nlFrames") >= 2, "two frames", page)
    first = _drawn_steps(page)
    _wait_for(lambda: _drawn_steps(page) > first > 0, "the curve to grow", page)
    assert widget.get_attribute("data-state") == "loading"
    assert "of 1000" in widget.locator(".nl-msg").inner_text()  # training… step k of 1000
    # one step of the learning-rate slider supersedes it: the widget aborts its stream
    slider = widget.locator('input[data-param="lr"]')
    with page.expect_request(_streams_bn_lr):
        slider.focus()
        page.keyboard.press("ArrowRight")
    _wait_for(lambda: runner.abandoned == 1, "the superseded run to stop", page)
    # leaving the page drops the new (also long) stream too
    page.goto(f"{base}/")
    _wait_for(lambda: runner.abandoned == 2, "the left run to stop", page)
    _wait_for(lambda: _long_runs(runner) == 0, "the long runs to end", page)
    status, body = api(base, "bn-lr", {"seed": 4})  # the lab is free for the next learner
    assert status == 200 and len(body["losses"]) == 150


def test_a_streamed_run_ends_drawn_as_its_answer(page: Any, lab: tuple[str, Runner]) -> None:
    base, _ = lab
    page.goto(f"{base}/lessons/bn-from-scratch?bn-lr.steps=400&bn-lr.width=96")
    widget = page.locator('.nl-widget[data-widget="bn-lr"]')
    _wait_for(lambda: widget.get_attribute("data-state") == "ready", "the answer", page)
    assert widget.evaluate("(n) => n.nlFrames") >= 1
    assert _drawn_steps(page) == 400 == len(widget.evaluate("(n) => n.nlLastResult.losses"))
    assert widget.locator(".nl-table tbody tr").count() == 2  # the answer's table: BN, no BN


def _long_runs(runner: Runner) -> int:
    """How many runs of :data:`HEAVY` the lab is computing now."""
    with runner._lock:
        entries = list(runner._cache.items())
    return sum('"width": 128' in key and not e.future.done() for key, e in entries)


ORDER = """(node) => {
  // what happens when the slider moves: the run's stream aborted, the input event handled
  const order = [];
  node.nlWidget.controller.signal.addEventListener("abort", () => order.push("aborted"));
  node.querySelector('input[data-param="lr"]').addEventListener("input", () => order.push("input"));
  window.nlOrder = order;
}"""


def test_a_slider_move_cancels_the_streaming_run_at_once(
    page: Any, lab: tuple[str, Runner]
) -> None:
    """The run in progress is closed while the slider's input event is handled (not once the
    hand rests), the server stops it, and only then does the new run send its first frame: the
    wait from the change to the new run's first frame is the old run's one step, not its end."""
    base, runner = lab
    abandoned = runner.abandoned
    with page.expect_request(_streams_bn_lr):
        page.goto(f"{base}/lessons/bn-from-scratch?{HEAVY}")
    widget = page.locator('.nl-widget[data-widget="bn-lr"]')
    _wait_for(lambda: widget.evaluate("(n) => n.nlFrames") >= 1, "a frame", page)
    widget.evaluate(ORDER)
    with page.expect_request(_streams_bn_lr):
        widget.locator('input[data-param="lr"]').focus()
        page.keyboard.press("ArrowRight")
        assert page.evaluate("window.nlOrder") == ["aborted", "input"]
    # the held run (it waits before its last step until every request has gone) stopped, so
    # the engine is free for the new run, whose frames now come
    _wait_for(lambda: runner.abandoned == abandoned + 1, "the superseded run to stop", page)
    lr = widget.evaluate("(n) => n.nlParams.lr")
    _wait_for(lambda: widget.evaluate("(n) => n.nlFrames") >= 1, "the new run's frame", page)
    assert widget.evaluate("(n) => n.nlLastFrame.total") == HEAVY_STEPS
    assert f"of {HEAVY_STEPS}" in widget.locator(".nl-msg").inner_text()
    assert lr != 2.0  # the frame is the new setting's: the slider moved
    page.goto(f"{base}/")  # the new (also held) run goes with the page
    _wait_for(lambda: _long_runs(runner) == 0, "the long runs to end", page)
