"""``GET /api/experiments/NAME/stream``: a training widget's run as it goes, then its answer."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from normlab.experiments import list_experiments
from normlab.lab import widgetstream
from normlab.lab.app import create_app
from normlab.lab.runner import Runner
from normlab.lab.sse import read_events

LAB = "http://127.0.0.1"
LONG = "steps=400&width=96"  # long enough (a second or more) to stream several frames


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


def test_frames_grow_then_the_answer_is_the_post_s(client: TestClient) -> None:
    got = events(client, f"/api/experiments/bn-lr/stream?{LONG}")
    names = [name for name, _ in got]
    assert names[-1] == "result" and names.count("result") == 1
    frames = [data for name, data in got if name == "frame"]
    assert len(frames) >= 3, names
    done = [f["done"] for f in frames]
    assert done == sorted(done) and done[0] > 0 and done[-1] <= frames[0]["total"] == 800
    lengths = [len(f["figures"][0]["panels"][0]["series"][0]["x"]) for f in frames]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]  # the curve grows
    answer = got[-1][1]
    assert answer["params"]["steps"] == 400 and len(answer["losses"]) == 400
    post = client.post("/api/experiments/bn-lr", json={"steps": 400, "width": 96}).json()
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
    assert client.get("/api/experiments/drift/stream").status_code in (404, 405)


def test_a_run_stopped_by_shutdown_ends_its_stream_with_an_error_event() -> None:
    runner = Runner()
    with TestClient(create_app(runner), base_url=LAB) as c:
        timer = threading.Timer(0.5, runner.cancel)
        timer.start()
        got = events(c, "/api/experiments/bn-lr/stream?steps=500&hidden_layers=6&width=128")
        timer.join()
    assert got[-1][0] == "error" and "shutting down" in got[-1][1]["message"]


def test_streams_beyond_the_bound_are_refused_while_pages_answer(client: TestClient) -> None:
    client.app.state.widget_streams = widgetstream.MAX_STREAMS  # as if that many were open
    r = client.get("/api/experiments/bn-lr/stream?steps=3")
    assert r.status_code == 503 and "training already" in r.json()["detail"]["message"]
    assert r.headers["Retry-After"]
    assert client.get("/").status_code == 200
    client.app.state.widget_streams = 0
    names = [name for name, _ in events(client, "/api/experiments/bn-lr/stream?steps=3")]
    assert names[-1] == "result" and set(names[:-1]) <= {"frame"}  # a frame, if it ran 10 ms
    assert client.app.state.widget_streams == 0  # the slot is given back
