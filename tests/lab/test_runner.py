"""The lab's one run manager (:class:`normlab.lab.runner.Runner`) for both kinds of streamed run:
an experiment run and a live ``/train`` session are stopped by the same :meth:`Runner.cancel`,
and the sessions' bound is the runner's own (``max_sessions``).

Over a real server on 127.0.0.1, as the lab serves them; the shutdown happens at an optimizer
step of the experiment run (:func:`~tests.lab.steps.at_each_step`), not after a sleep.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from normlab import trainview
from normlab.lab.app import create_app
from normlab.lab.runner import RunBusy, RunCancelled, Runner
from normlab.lab.trainruns import Play, Run

from .real_server import EventStream, post_experiment, serving
from .steps import at_each_step

SMALL = "dataset=blobs&points=40&depth=1&width=4"
"""A setup that trains in a few milliseconds a step."""
LONG_BN_LR = {"steps": 500, "hidden_layers": 6, "width": 128}
"""A bn-lr that trains for seconds: still going when the lab shuts down at its 2nd step."""


def _read_to_its_end(stream: EventStream) -> None:
    """Read ``stream`` until it ends (a hang guard: its socket's timeout fails the test)."""
    with pytest.raises(AssertionError, match="the stream ended"):
        while True:
            stream.next()


def test_cancel_ends_an_experiment_run_and_a_live_session() -> None:
    runner = Runner()
    with serving(create_app(runner)) as port:
        session = EventStream(port, f"/api/train/stream?{SMALL}")
        try:
            run = session.until("run")
            session.until("status")  # paused after its first frame: it takes no step itself
            assert runner.sessions == 1 and runner.session(run["run"]) is not None
            answers: list[tuple[int, dict[str, Any]]] = []

            def shut_down(step: int) -> None:
                if step == 2:  # the experiment run trains: the lab shuts down
                    runner.cancel()

            with at_each_step(shut_down):
                request = threading.Thread(
                    target=lambda: answers.append(post_experiment(port, "bn-lr", LONG_BN_LR))
                )
                request.start()
                request.join(timeout=300)
            assert not request.is_alive()
            ((status, body),) = answers
            assert status == 503 and "shutting down" in body["detail"]["message"]  # stopped
            _read_to_its_end(session)  # the live session ended with it, by the same call
            assert runner.session(run["run"]) is None
            refused = EventStream(port, f"/api/train/stream?{SMALL}")
            assert refused.response.status == 503  # and neither kind starts again
            assert "stopping" in json.loads(refused.response.read())["detail"]["message"]
            refused.close()
            assert post_experiment(port, "drift", {"seed": 5})[0] == 503
        finally:
            session.close()


def test_the_session_bound_is_the_runner_s() -> None:
    runner = Runner(max_sessions=2)
    with serving(create_app(runner)) as port:
        compared = EventStream(port, f"/api/train/stream?{SMALL}&compare=true&b.norm=batch")
        try:
            assert compared.until("run")["sides"] == ["a", "b"]
            assert runner.sessions == 2  # a compared run takes both slots
            one_more = EventStream(port, f"/api/train/stream?{SMALL}")
            assert one_more.response.status == 503
            detail = json.loads(one_more.response.read())["detail"]
            assert "at most 2 sessions at once and 2 are going" in detail["message"]
            one_more.close()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/train", timeout=60) as r:
                api = json.loads(r.read())
            assert (api["max_runs"], api["runs"]) == (2, 2)
        finally:
            compared.close()


def _small_runs(runner: Runner) -> Callable[[], Run]:
    """A maker of small one-side runs whose steps take ``runner``'s session threads."""
    setup = trainview.make_setup({"points": 40, "depth": 1, "width": 4})
    return lambda: Run({"a": setup}, Play(), runner.in_session_thread)


def test_admit_release_and_cancel_keep_the_slots() -> None:
    """The slots alone, no server: a replaced session ends and frees its slot; cancel ends
    every session and admits none until resumed."""
    runner = Runner(max_sessions=2)
    new_run = _small_runs(runner)
    first, second = new_run(), new_run()
    runner.admit(first)
    runner.admit(second)
    with pytest.raises(RunBusy, match="at most 2 sessions"):
        runner.admit(new_run())
    third = new_run()
    runner.admit(third, replaces=first.id)  # its page opened a new setting in its place
    assert first.closed and runner.session(first.id) is None and runner.sessions == 2
    runner.release(first)
    runner.release(first)  # idempotent
    assert runner.sessions == 2
    runner.cancel()
    assert second.closed and third.closed and runner.sessions == 0
    with pytest.raises(RunCancelled, match="stopping"):
        runner.admit(new_run())
    runner.resume()
    runner.admit(new_run())
    assert runner.sessions == 1
    with pytest.raises(ValueError, match="max_sessions"):
        Runner(max_sessions=0)


def test_a_build_holds_a_place_its_release_frees_and_admit_turns_into_a_slot() -> None:
    """A session being built books a place (counted against the bound, not as a session);
    released during its build it frees it; admitted once built, its place is its slot; the
    lab stopping ends the builds too, and a build that ends after it is not admitted."""
    runner = Runner(max_sessions=2)
    new_run = _small_runs(runner)
    gone, built = new_run(), new_run()
    runner.book(gone)
    runner.book(built)
    assert (runner.building, runner.sessions) == (2, 0)
    with pytest.raises(RunBusy, match="at most 2 sessions at once and 2 are going"):
        runner.book(new_run())
    runner.release(gone)  # its client left during the build
    assert gone.closed and (runner.building, runner.sessions) == (1, 0)
    runner.admit(built)
    assert (runner.building, runner.sessions) == (0, 1) and runner.session(built.id) is built
    late = new_run()
    runner.book(late)
    with pytest.raises(RunBusy):
        runner.admit(new_run())  # one that booked nothing finds no free slot
    runner.cancel()
    assert late.closed and built.closed and runner.building == 0
    with pytest.raises(RunCancelled, match="stopping"):
        runner.admit(late)
