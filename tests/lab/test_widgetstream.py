"""``GET /api/experiments/NAME/stream``: a training widget's run as it goes, then its answer."""

from __future__ import annotations

import io
import json
import math
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from normlab.experiments import Experiment, Live, list_experiments
from normlab.lab import runner as runner_module
from normlab.lab.app import create_app
from normlab.lab.routes import streams as widgetstream
from normlab.lab.runner import Runner
from normlab.lab.sse import read_events
from normlab.lab.state import state_of

from .steps import at_each_step

LAB = "http://127.0.0.1"
WAIT_S = 120.0  # the most a run waits for its stream (it takes ms): a bug fails, not hangs


@pytest.fixture()
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Runner()), base_url=LAB) as c:
        yield c


def events(client: TestClient, url: str) -> list[tuple[str, Any]]:
    with client.stream("GET", url) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return list(read_events(io.BytesIO(r.read()).readline))


def test_every_streaming_experiment_has_a_stream_and_says_so(client: TestClient) -> None:
    listed = {e["name"]: e["streams"] for e in client.get("/api/experiments").json()}
    assert listed == {e.name: e.streams for e in list_experiments()}
    paths = client.get("/openapi.json").json()["paths"]
    for e in list_experiments():
        route = paths.get(f"/api/experiments/{e.name}/stream")
        assert (route is not None) == e.streams
        if route:
            described = {p["name"] for p in route["get"]["parameters"]}
            assert described == {p.name for p in e.parameters}
            assert "text/event-stream" in route["get"]["responses"]["200"]["content"]


class Watching(Runner):
    """A Runner that notes the ``done`` of each frame its streams pass on to the client."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: list[int] = []
        self.passed = threading.Condition()

    async def astream(
        self, name: str, params: dict[str, Any]
    ) -> AsyncIterator[tuple[str, str | bytes]]:
        async for kind, data in super().astream(name, params):
            if kind == "frame":
                with self.passed:
                    self.shown.append(json.loads(data)["done"])
                    self.passed.notify_all()
            yield kind, data

    def wait_shown(self, done: int) -> None:
        """Wait (in the run's thread) until a stream has passed on the frame of ``done`` steps."""
        with self.passed:
            assert self.passed.wait_for(lambda: done in self.shown, timeout=WAIT_S), self.shown


def test_frames_grow_then_the_answer_is_the_post_s(monkeypatch: pytest.MonkeyPatch) -> None:
    # A frame at every step (no clock decides which steps make one), and at steps 10, 20 and
    # 30 the run waits until the stream has passed on the frame of the step before: the
    # stream shows at least those three, however slow or loaded the machine.
    monkeypatch.setattr(runner_module, "FRAME_S", 0.0)
    monkeypatch.setattr(runner_module, "FRAME_SHARE", math.inf)
    runner = Watching()

    def pace(step: int) -> None:
        if step in (10, 20, 30):
            runner.wait_shown(step - 1)

    with TestClient(create_app(runner), base_url=LAB) as client, at_each_step(pace):
        got = events(client, "/api/experiments/bn-lr/stream?steps=40&width=96")
        names = [name for name, _ in got]
        assert names[-1] == "result" and names.count("result") == 1
        frames = [data for name, data in got if name == "frame"]
        assert len(frames) >= 3, names
        done = [f["done"] for f in frames]
        assert {9, 19, 29} <= set(done)
        assert done == sorted(done) and done[0] > 0 and done[-1] <= frames[0]["total"] == 80
        lengths = [len(f["figures"][0]["panels"][0]["series"][0]["x"]) for f in frames]
        assert lengths == sorted(lengths) and lengths[0] < lengths[-1]  # the curve grows
        answer = got[-1][1]
        assert answer["params"]["steps"] == 40 and len(answer["losses"]) == 40
        post = client.post("/api/experiments/bn-lr", json={"steps": 40, "width": 96}).json()
        assert post == answer  # the same run, cached: the answer a POST gives


def test_a_cached_run_answers_at_once_without_frames(client: TestClient) -> None:
    client.post("/api/experiments/init-train", json={"steps": 5})
    assert [name for name, _ in events(client, "/api/experiments/init-train/stream?steps=5")] == [
        "result"
    ]


@pytest.mark.parametrize(
    ("query", "parameter"),
    [("steps=0", "steps"), ("lr=-1", "lr"), ("nope=1", "nope"), ("batch_norm=maybe", "batch_norm")],
)
def test_bad_settings_are_a_422_before_the_stream(
    client: TestClient, query: str, parameter: str
) -> None:
    r = client.get(f"/api/experiments/bn-lr/stream?{query}")
    assert r.status_code == 422
    assert r.json()["detail"]["parameter"] == parameter


def test_an_experiment_that_does_not_stream_has_no_stream(client: TestClient) -> None:
    name = next(e.name for e in list_experiments() if not e.streams)  # linear-scale
    assert client.get(f"/api/experiments/{name}/stream").status_code in (404, 405)


def test_a_run_stopped_by_shutdown_ends_its_stream_with_an_error_event() -> None:
    runner = Runner()

    def shut_down(step: int) -> None:
        if step == 2:  # the lab starts shutting down while the run trains (its 2nd step of 1000)
            runner.cancel()

    with TestClient(create_app(runner), base_url=LAB) as c, at_each_step(shut_down):
        got = events(c, "/api/experiments/bn-lr/stream?steps=500&hidden_layers=6&width=128")
    assert got[-1][0] == "error" and "shutting down" in got[-1][1]["message"]


def test_streams_beyond_the_bound_are_refused_while_pages_answer(client: TestClient) -> None:
    state_of(client.app).widget_streams = widgetstream.MAX_STREAMS  # as if that many were open
    r = client.get("/api/experiments/bn-lr/stream?steps=3")
    assert r.status_code == 503 and "training already" in r.json()["detail"]["message"]
    assert r.headers["Retry-After"]
    assert client.get("/").status_code == 200
    state_of(client.app).widget_streams = 0
    names = [name for name, _ in events(client, "/api/experiments/bn-lr/stream?steps=3")]
    assert names[-1] == "result" and set(names[:-1]) <= {"frame"}  # a frame, if it ran 10 ms
    assert state_of(client.app).widget_streams == 0  # the slot is given back


LONG_S = 1.0
"""A run that may take longer than this streams (issue 33): a widget shows its progress."""
LONG = [e for e in list_experiments() if e.cost.cpu_s > LONG_S]
"""The experiments whose declared cost at their maxima exceeds :data:`LONG_S`, training or not
(a training run counts optimizer steps, another its own steps: layers, stacks): each must
stream and say how many of its steps are done."""


def _small(e: Experiment) -> dict[str, Any]:
    """A cheap run of ``e`` that still has two of everything: every number at its minimum (an
    int at 2 at least), the rest at its default."""
    return {
        p.name: max(p.min, 2) if p.kind == "int" else p.min
        for p in e.parameters
        if p.kind in ("int", "float")
    }


@pytest.mark.parametrize("experiment", LONG, ids=lambda e: e.name)
def test_every_run_that_can_take_seconds_streams_its_progress(
    monkeypatch: pytest.MonkeyPatch, experiment: Experiment
) -> None:
    # A frame at every yield, and the run goes on from its first frame only once the stream
    # has passed it on: a frame comes mid-run however fast the machine (no clock decides).
    monkeypatch.setattr(runner_module, "FRAME_S", 0.0)
    monkeypatch.setattr(runner_module, "FRAME_SHARE", math.inf)
    runner = Watching()
    framer = runner_module._framer

    def waits_for_the_first_frame(entry: Any, count: list[int], unit: str) -> Live:
        live = framer(entry, count, unit)

        def shown_once(partial: Callable[[], Any]) -> None:
            live(partial)
            with runner.passed:
                assert runner.passed.wait_for(lambda: runner.shown, timeout=WAIT_S), "no frame"

        return shown_once

    monkeypatch.setattr(runner_module, "_framer", waits_for_the_first_frame)
    assert experiment.streams, f"{experiment.name} may run for seconds and does not stream"
    params = _small(experiment)
    total = experiment.steps(experiment.make_params(params))
    assert total is not None, f"{experiment.name} streams but counts no steps"
    query = "&".join(f"{k}={v}" for k, v in params.items())
    with TestClient(create_app(runner), base_url=LAB) as client:
        got = events(client, f"/api/experiments/{experiment.name}/stream?{query}")
    assert [name for name, _ in got][-1] == "result"
    frames = [data for name, data in got if name == "frame"]
    done = [f["done"] for f in frames]
    assert frames and done[0] < total, f"no frame before the run's end: {done} of {total}"
    assert done == sorted(done) and done[-1] <= total
    for f in frames:
        assert f["total"] == total and f["figures"], f"{f['done']} of {f['total']}"
        assert f["unit"] == experiment.unit
