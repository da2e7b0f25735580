"""The /train page's API: live training runs as event streams, steered by control posts.

Through the app (TestClient): the parameters, the 422s naming a bad setting, the code routes,
the OpenAPI description and the page with its numbers from live runs. Through a real server
on 127.0.0.1 (uvicorn in a thread, the app built in this process): a stream sends the points,
then frames while it plays; pause, step (exactly one) and reset are taken at the next step; a
link's step count is replayed; runs are bounded while ``GET /`` keeps answering; a client
that goes, a new run in its place and the lab stopping each end a run and free its slot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import re
import sqlite3
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette warns about its httpx-based client on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from fastapi import FastAPI

from normlab import trainview
from normlab.experiments import ParameterError
from normlab.experiments.base.registry import ENGINE
from normlab.lab import app as lab_app
from normlab.lab import runner, site, trainlesson, trainruns
from normlab.lab.answers import AnswerStore
from normlab.lab.app import create_app
from normlab.lab.lessons.markup import num
from normlab.lab.state import state_of

from .real_server import EventStream, post_experiment, serving
from .steps import WAIT_S, Gate, at_each_step

LAB = "http://127.0.0.1"
SMALL = "dataset=blobs&points=40&depth=1&width=4"
"""A setup that trains in a few milliseconds a step."""


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url=LAB) as c:
        yield c


def _runs(app: FastAPI) -> int:
    return state_of(app).runner.sessions


def _wait(condition: Any, what: str, timeout: float = 120) -> None:
    """Poll ``condition`` (a hang guard of ``timeout`` s: a bug fails, a slow machine waits)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


# -- through the app -----------------------------------------------------------------------------


def test_the_api_describes_the_setup_and_the_stream(client: TestClient) -> None:
    r = client.get("/api/train")
    assert r.status_code == 200
    body = r.json()
    assert body["parameters"] == [p.schema() for p in trainview.PARAMETERS]
    assert [p["name"] for p in body["play"]] == ["steps", "speed", "fps", "play", "compare"]
    assert body["actions"] == ["play", "pause", "step", "reset"]
    assert (body["max_runs"], body["runs"]) == (runner.MAX_SESSIONS, 0)
    grouped = [n for names in body["groups"].values() for n in names]
    assert sorted(grouped) == sorted(p.name for p in trainview.PARAMETERS)  # each in one group


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("depth=0", "depth"),
        ("dataset=nope", "dataset"),
        ("lr=-1", "lr"),
        ("fps=10000", "fps"),
        ("speed=0", "speed"),
        ("steps=abc", "steps"),
        ("norm=batch&batch_size=1", "batch_size"),
        ("colour=red", "colour"),
        ("b.depth=2", "b.depth"),
        ("compare=true&b.lr=-1", "b.lr"),
        ("compare=true&b.dataset=xor", "b.dataset"),
        ("compare=true&b.norm=batch&batch_size=1", "b.batch_size"),
    ],
)
def test_bad_settings_are_named(client: TestClient, query: str, parameter: str) -> None:
    r = client.get(f"/api/train/stream?{query}")
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert detail["parameter"] == parameter and parameter in detail["message"]
    assert client.get("/api/train").json()["runs"] == 0  # a refused run holds no slot


def test_the_code_of_a_setup(client: TestClient) -> None:
    r = client.get(f"/api/train/code?{SMALL}&steps=3")
    assert r.status_code == 200
    body = r.json()
    setup = trainview.make_setup({"dataset": "blobs", "points": 40, "depth": 1, "width": 4})
    assert body["script"] == trainview.script(setup, 3) and body["steps"] == 3
    assert body["setup"] == dataclasses.asdict(setup)
    assert html.unescape(re.sub("<[^>]+>", "", body["html"])) == body["script"]
    assert client.get("/api/train/code?steps=0").json()["detail"]["parameter"] == "steps"
    page = client.get(f"/playground/train?{SMALL}&steps=3")
    assert page.status_code == 200 and "train(" in html.unescape(page.text)
    assert "Download notebook" not in page.text
    bad = client.get("/playground/train?depth=99")
    assert bad.status_code == 422 and "depth" in bad.text


def test_openapi_documents_the_train_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    stream = paths["/api/train/stream"]["get"]
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    assert {"422", "503"} <= set(stream["responses"]) and "frame" in stream["description"]
    names = [p["name"] for p in stream["parameters"]]
    assert names == [p.name for p in trainview.PARAMETERS] + [
        "steps",
        "speed",
        "fps",
        "play",
        "compare",
        "replaces",
    ]
    control = paths["/api/train/{run_id}/control"]["post"]
    schema = control["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["action"]["enum"] == ["play", "pause", "step", "reset"]
    assert {"403", "404", "422", "429"} <= set(control["responses"])
    assert "/api/train" in paths and "/api/train/code" in paths and "/train" not in paths


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub("<[^>]+>", " ", page)).split())


def test_the_page_states_numbers_from_live_runs(client: TestClient) -> None:
    r = client.get("/train")
    assert r.status_code == 200
    page = r.text
    numbers = trainlesson.numbers()
    z, s, p, b = (numbers[k] for k in ("zeros", "small", "plain", "batch"))
    text = _text(page)
    assert f"goes from {num(z['first'])} to {num(z['last'])}" in text
    assert f"test accuracy ends at {num(z['accuracy']['test'], 3)}" in text
    assert f"barely moves: {num(s['first'])} at the first step, {num(s['last'])}" in text
    assert p["blown_up"] is not None and f"from step {p['blown_up']} on" in text
    assert f"ends at {num(b['last'])}" in text
    assert b["last"] < 0.1 < z["last"]  # what the text says: BatchNorm trains, zeros do not
    # the numbers are a real session's: the first case again, step for step
    again = trainlesson.summary(trainlesson.CASES["zeros"], 3)
    assert again["first"] == z["first"]
    spec = json.loads(
        re.search(r'class="nl-train-spec">(.*?)</script>', page, re.S).group(1)  # type: ignore[union-attr]
    )
    assert spec == {k: v for k, v in client.get("/api/train").json().items() if k != "runs"}
    assert '<a href="/train" aria-current="page">' in page  # the header's link, here current
    assert 'href="/train?init=zeros"' in page
    assert 'href="/train?depth=4&amp;width=64&amp;lr=2.0&amp;init=he&amp;norm=none' in page
    hosts = re.findall(r"""https?://([^/\s"'<>)]+)""", page)
    assert {h.split(":")[0] for h in hosts} <= {"127.0.0.1"}  # nothing fetched from outside
    assert '<a href="/train">' in client.get("/").text  # the lessons' index links to it


def test_the_numbers_are_kept_in_the_answers_store_and_read_back_as_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lab started again finds the cases in its store: what it reads back is what was
    computed, float for float, and nothing is trained; another step count is another key."""
    monkeypatch.setattr(trainlesson, "STEPS", 3)  # the key holds it: a short run, its own key
    monkeypatch.setattr(trainlesson, "_done", {})  # this process has trained nothing yet
    store = AnswerStore(tmp_path / "answers.sqlite3")
    computed = trainlesson.numbers(store=store)
    assert computed == {k: trainlesson.summary(v, 3) for k, v in trainlesson.CASES.items()}

    def trains(*args: Any) -> None:
        raise AssertionError("trained a case the store holds")

    monkeypatch.setattr(trainlesson, "_done", {})  # a lab started again, on the same store
    with monkeypatch.context() as m:
        m.setattr(trainlesson, "summary", trains)
        assert trainlesson.numbers(store=store) == computed
    monkeypatch.setattr(trainlesson, "_done", {})
    monkeypatch.setattr(trainlesson, "STEPS", 2)
    assert trainlesson.numbers(store=store)["zeros"]["steps"] == 2  # not the 3-step answer


def test_a_damaged_row_of_the_store_is_trained_again_and_written_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainlesson, "STEPS", 2)
    monkeypatch.setattr(trainlesson, "CASES", {"zeros": trainlesson.CASES["zeros"]})
    monkeypatch.setattr(trainlesson, "_done", {})
    path = tmp_path / "answers.sqlite3"
    computed = trainlesson.numbers(store=AnswerStore(path))
    with sqlite3.connect(path) as db:
        assert db.execute("UPDATE answers SET body = ?", (b'{"first": 0.',)).rowcount == 1
    monkeypatch.setattr(trainlesson, "_done", {})
    store = AnswerStore(path)
    assert trainlesson.numbers(store=store) == computed  # trained again, no error
    monkeypatch.setattr(trainlesson, "_done", {})
    with monkeypatch.context() as m:
        m.setattr(trainlesson, "summary", lambda *a: pytest.fail("trained a mended row again"))
        assert trainlesson.numbers(store=store) == computed


def test_the_view_alone_for_a_lesson_s_frame(client: TestClient) -> None:
    r = client.get("/train/embed?init=zeros&compare=1&b.init=he")
    assert r.status_code == 200
    page = r.text
    assert 'class="nl-train wide"' in page and 'data-page="/train"' in page
    assert 'class="site' not in page  # no header, no footer: the lesson around it is the page
    assert "/static/train.js" in page and "nl-train-spec" in page


def test_a_lesson_presets_the_view_and_refuses_bad_settings() -> None:
    ctx = site.PageContext(lambda name, params: {})
    markup = str(ctx.train_view("Zeros", init="zeros", compare={"init": "he"}, hide=["compare"]))
    src = html.unescape(re.search(r'<iframe[^>]* src="([^"]+)"', markup).group(1))  # type: ignore[union-attr]
    assert src == "/train/embed?init=zeros&compare=1&b.init=he&hide=compare"
    assert 'href="/train?init=zeros&amp;compare=1&amp;b.init=he&amp;hide=compare"' in markup
    assert "bias=false" in str(ctx.train_view("x", bias=False))  # a switch as the address has it
    with pytest.raises(ParameterError, match="'depth'"):
        ctx.train_view("x", depth=0)
    with pytest.raises(ParameterError, match="'activation'"):
        ctx.train_view("x", compare={"activation": "nope"})
    with pytest.raises(ParameterError, match="'nope'"):
        ctx.train_view("x", nope=1)


# -- a real server -------------------------------------------------------------------------------


@contextlib.contextmanager
def _lab() -> Iterator[tuple[FastAPI, int]]:
    app = create_app()
    with serving(app) as port:
        yield app, port


def _open(port: int, query: str = SMALL) -> EventStream:
    return EventStream(port, f"/api/train/stream?{query}")


def _control(port: int, run: dict[str, Any], body: dict[str, Any], **headers: str) -> Any:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{run['control']}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_stream_sends_the_points_then_frames_while_playing() -> None:
    with _lab() as (app, port):
        stream = _open(port, SMALL + "&fps=60")
        try:
            assert stream.response.status == 200
            assert stream.response.getheader("content-type").startswith("text/event-stream")
            name, run = stream.next()
            assert name == "run" and run["control"] == f"/api/train/{run['run']}/control"
            assert run["sides"] == ["a"]
            data = run["data"]["a"]
            assert len(data["train"]["x"]) == 32 and len(data["test"]["label"]) == 8
            assert run["setup"]["a"]["dataset"] == "blobs"
            first = stream.until("frame")["a"]
            assert first["step"] == 0 and len(first["boundary"]["z"]) == trainview.GRID
            assert stream.until("status") == {"playing": False, "step": 0, "speed": 1, "fps": 60}
            assert _runs(app) == 1
            assert _control(port, run, {"action": "play"})[0] == 200
            assert stream.until("status")["playing"] is True
            steps = [stream.until("frame")["a"]["step"] for _ in range(5)]
            assert steps == list(range(1, 6))  # one step per frame at speed 1
            assert _control(port, run, {"speed": 3})[1]["speed"] == 3
            later = [stream.until("frame")["a"]["step"] for _ in range(3)]
            assert later[2] - later[1] == 3 == later[1] - later[0]
            assert _control(port, run, {"action": "pause"})[0] == 200
            paused = stream.until("status")
            assert paused["playing"] is False
            _control(port, run, {"action": "step"})  # the next frame: one step on, none between
            assert stream.until("frame")["a"]["step"] == paused["step"] + 1
        finally:
            stream.close()


def test_a_pause_at_the_highest_speed_stops_the_run_at_its_next_step() -> None:
    """At :data:`~normlab.lab.trainruns.MAX_SPEED` steps a frame, a pause posted (and answered)
    from inside an optimizer step in the middle of a frame stops the run after that step: the
    frame is cut short and sent as it stands, then the paused status, and no step follows (the
    old loop finished the frame's other steps first)."""
    speed = trainruns.MAX_SPEED
    at = speed + 10  # the 10th step of the second frame
    steps: list[int] = []
    answered: list[int] = []
    said: list[dict[str, Any]] = []  # the run's event, once the test has read it
    known = threading.Event()

    def pause_inside(step: int) -> None:
        steps.append(step)
        if step == at:  # the pause reaches the run while this step trains
            assert known.wait(WAIT_S), "the run's event never came"
            answered.append(_control(port, said[0], {"action": "pause"})[0])

    # counting from the run's first step: the hook is in place before the run starts (it
    # plays at once, so a hook put in after its first event could count from a later step)
    with _lab() as (_, port), at_each_step(pause_inside):
        stream = _open(port, f"{SMALL}&speed={speed}&play=true")
        said.append(stream.until("run"))
        known.set()
        run = said[0]
        try:
            shown, (name, data) = -1, stream.next()
            while name != "status" or data["playing"]:  # until the paused status
                shown = data["a"]["step"] if name == "frame" else shown
                name, data = stream.next()
            assert answered == [200] and data["step"] == at
            assert shown == at  # the frame cut short, sent before the pause took effect
            _control(port, run, {"action": "step"})  # the next step is the step's own
            assert stream.until("frame")["a"]["step"] == at + 1
            assert steps == list(range(1, at + 2))  # no step between the pause and the step
        finally:
            stream.close()


def test_a_client_gone_in_the_middle_of_a_frame_ends_its_run_at_its_next_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page that opens a new run before the old one said its id (so it cannot name it to
    replace) drops the old stream: the lab releases that run while its step still trains, and
    the run takes no step after it (the old loop finished the frame's 40 others)."""
    speed = trainruns.MAX_SPEED
    at = speed + 10
    steps: list[int] = []
    waited: list[bool] = []
    released, ended = threading.Event(), threading.Event()
    play = trainruns.Run._play

    def play_and_tell(run: trainruns.Run) -> Any:
        frames = play(run)
        if run.closed:
            ended.set()
        return frames

    monkeypatch.setattr(trainruns.Run, "_play", play_and_tell)
    with _lab() as (app, port):
        lab_runner = state_of(app).runner
        release = lab_runner.release

        def release_and_tell(session: Any) -> None:
            release(session)
            released.set()

        monkeypatch.setattr(lab_runner, "release", release_and_tell)
        stream = _open(port, f"{SMALL}&speed={speed}&play=true")
        stream.until("run")

        def leave_inside(step: int) -> None:
            steps.append(step)
            if step == at:  # the page goes while this step trains
                stream.close()
                waited.append(released.wait(WAIT_S))  # (in vain if it waits for this step)

        with at_each_step(leave_inside):
            assert ended.wait(WAIT_S), "the run went on after its client had gone"
        assert waited == [True] and steps == list(range(1, at + 1)) and _runs(app) == 0


def test_step_takes_exactly_one_step_and_reset_goes_back_to_step_0() -> None:
    with _lab() as (_, port):
        stream = _open(port)
        try:
            run = stream.until("run")
            start = stream.until("frame")["a"]
            assert stream.until("status")["step"] == 0
            session = trainview.Session(trainview.make_setup(run["setup"]["a"]))
            for want in (1, 2):
                _control(port, run, {"action": "step"})
                assert stream.until("status") == {
                    "playing": False,
                    "step": want,
                    "speed": 1,
                    "fps": 30,
                }
                frame = stream.until("frame")["a"]
                record = session.step()
                assert frame["step"] == want and frame["train_loss"] == record["train_loss"]
            assert frame["boundary"] != start["boundary"]  # it learned something
            _control(port, run, {"action": "reset"})
            assert stream.next() == ("reset", {"step": 0})
            assert stream.until("status")["step"] == 0
            again = stream.until("frame")["a"]
            assert again["step"] == 0 and again["boundary"] == start["boundary"]
            assert again["layers"] == start["layers"]
        finally:
            stream.close()


def test_a_link_s_step_count_is_replayed() -> None:
    with _lab() as (_, port):
        stream = _open(port, SMALL + "&steps=30")
        try:
            run = stream.until("run")
            assert stream.until("replay") == {"step": trainruns.REPLAY_CHUNK, "of": 30}
            history = stream.until("history")["a"]
            frame = stream.until("frame")["a"]
        finally:
            stream.close()
    session = trainview.Session(trainview.make_setup(run["setup"]["a"]))
    for _ in range(30):
        session.step()
    assert history == session.losses and len(history["train"]) == 30
    assert frame["step"] == 30 and frame["boundary"] == session.frame()["boundary"]


def _answers(port: int, path: str = "/") -> float:
    """GET ``path``: it must answer 200; the seconds it took."""
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        assert r.status == 200
        r.read()
    return time.monotonic() - started


def _playing_runs(port: int) -> list[EventStream]:
    """:data:`runner.MAX_SESSIONS` runs playing, each past its first frame."""
    streams = [_open(port, SMALL + "&play=true&fps=60") for _ in range(runner.MAX_SESSIONS)]
    for s in streams:
        assert s.response.status == 200 and s.until("frame")["a"]["step"] >= 0
    return streams


def test_runs_are_bounded_and_pages_answer_meanwhile() -> None:
    gate = Gate()
    with _lab() as (app, port), at_each_step(gate):
        streams = _playing_runs(port)
        try:
            one_more = _open(port)
            assert one_more.response.status == 503
            assert one_more.response.getheader("retry-after") == "5"
            detail = json.loads(one_more.response.read())["detail"]
            assert detail["parameter"] is None
            assert f"at most {runner.MAX_SESSIONS} sessions at once" in detail["message"]
            one_more.close()
            for s in streams:  # every run trains on, frame after frame
                assert s.until("frame")["a"]["step"] > 0
            gate.close()  # every run held inside a step: the pages answer all the same
            gate.wait_for(runner.MAX_SESSIONS)
            for _ in range(5):
                _answers(port)
            _answers(port, "/api/train")
            gate.open()
            streams.pop().close()  # a page goes away: its run ends, its slot is free
            _wait(lambda: _runs(app) < runner.MAX_SESSIONS, "the closed stream kept its slot")
            streams.append(_open(port))
            assert streams[-1].response.status == 200 and streams[-1].until("run")
        finally:
            gate.open()
            for s in streams:
                s.close()
        _wait(lambda: _runs(app) == 0, "a run outlived its stream")


@pytest.mark.serial  # a bound on time: make test runs it alone, after the parallel part
def test_pages_answer_within_a_second_while_runs_play() -> None:
    with _lab() as (_, port):
        streams = _playing_runs(port)
        try:
            assert max(_answers(port) for _ in range(5)) < 1.0  # the loop is free
            assert _answers(port, "/api/train") < 1.0
        finally:
            for s in streams:
                s.close()


def test_a_client_that_goes_frees_its_run_even_while_paused() -> None:
    with _lab() as (app, port):
        stream = _open(port)
        run = stream.until("run")
        stream.until("status")
        assert _runs(app) == 1
        stream.close()
        _wait(lambda: _runs(app) == 0, "the run outlived its client")
        status, body = _control(port, run, {"action": "play"})
        assert status == 404 and body["detail"]["parameter"] == "run_id"


def test_a_new_run_in_place_of_the_old_one_ends_it() -> None:
    with _lab() as (app, port):
        old = _open(port, SMALL + "&play=true")
        run = old.until("run")
        new = _open(port, f"{SMALL}&depth=2&replaces={run['run']}")
        try:
            assert new.until("run")["setup"]["a"]["depth"] == 2
            with pytest.raises(AssertionError, match="the stream ended"):
                while True:  # the old stream sends what it had, then ends
                    old.next()
            assert _runs(app) == 1
        finally:
            old.close()
            new.close()


def test_the_lab_stopping_ends_every_run() -> None:
    steps: list[int] = []
    with _lab() as (app, port):

        def stop_at_the_third(step: int) -> None:
            steps.append(step)
            if step == 3:  # the lab starts stopping while the run trains (inside its 3rd step)
                lab_app._end_streams(app)

        stream = _open(port, SMALL + "&play=true")
        with at_each_step(stop_at_the_third), pytest.raises(AssertionError, match="ended"):
            while True:
                stream.next()
        assert steps == [1, 2, 3]  # it ended after its step in progress, with no other
        stream.close()
        refused = _open(port)
        assert refused.response.status == 503
        assert "stopping" in json.loads(refused.response.read())["detail"]["message"]
        refused.close()


@pytest.mark.serial  # a bound on time: make test runs it alone, after the parallel part
def test_the_lab_stopping_ends_a_run_within_seconds() -> None:
    with _lab() as (app, port):
        stream = _open(port, SMALL + "&play=true")
        stream.until("frame")
        lab_app._end_streams(app)
        started = time.monotonic()
        with pytest.raises(AssertionError, match="the stream ended"):
            while True:
                stream.next()
        assert time.monotonic() - started < 3
        stream.close()


def test_control_refusals() -> None:
    with _lab() as (_, port):
        stream = _open(port)
        try:
            run = stream.until("run")
            stream.until("status")  # after the first frame: ready for actions
            assert _control(port, run, {"action": "jump"})[1]["detail"]["parameter"] == "action"
            assert _control(port, run, {})[1]["detail"]["parameter"] == "action"
            assert _control(port, run, {"fps": 1000})[1]["detail"]["parameter"] == "fps"
            assert _control(port, run, {"colour": 1})[1]["detail"]["parameter"] == "colour"
            evil = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
            status, body = _control(port, run, {"action": "play"}, **evil)
            assert status == 403 and body["detail"]["parameter"] == "origin"
            own = {"Origin": f"http://127.0.0.1:{port}"}
            assert _control(port, run, {"action": "step"}, **own)[0] == 200
            assert stream.until("frame")["a"]["step"] == 1
        finally:
            stream.close()


def test_too_many_waiting_actions_are_refused() -> None:
    setup = trainview.make_setup({"points": 40, "depth": 1, "width": 4})
    run = trainruns.Run({"a": setup}, trainruns.Play(), runner.Runner().in_session_thread)
    for _ in range(trainruns.MAX_ASKED):
        run.asked.append("step")
    with pytest.raises(OverflowError, match="actions wait"):
        run.ask("step")


def test_compare_trains_two_setups_in_lockstep_on_the_same_data() -> None:
    with _lab() as (app, port):
        query = f"{SMALL}&compare=true&b.norm=batch&b.lr=1&steps=3"
        stream = _open(port, query)
        try:
            run = stream.until("run")
            assert run["sides"] == ["a", "b"] and _runs(app) == 2  # a compared run counts two
            setup = run["setup"]
            assert setup["b"] == {**setup["a"], "norm": "batch", "lr": 1.0}
            assert run["data"]["a"] == run["data"]["b"]  # the same points
            history = stream.until("history")
            assert len(history["a"]["train"]) == len(history["b"]["train"]) == 3
            frames = stream.until("frame")
            assert frames["a"]["step"] == frames["b"]["step"] == 3
            assert [la["kind"] for la in frames["b"]["layers"]][:2] == ["Linear", "BatchNorm1d"]
            stream.until("status")
            _control(port, run, {"action": "play"})
            for _ in range(3):  # every frame holds both sides at the same step
                frames = stream.until("frame")
                assert frames["a"]["step"] == frames["b"]["step"]
            _control(port, run, {"action": "reset"})
            stream.until("reset")
            frames = stream.until("frame")
            assert frames["a"]["step"] == frames["b"]["step"] == 0
        finally:
            stream.close()
        _wait(lambda: _runs(app) == 0, "a compared run outlived its stream")


def test_frames_carry_their_figures_and_a_pause_catches_the_layers_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trainruns, "STATS_S", float("inf"))  # while playing: the first only
    with _lab() as (_, port):
        stream = _open(port)
        try:
            run = stream.until("run")
            first = stream.until("frame")["a"]
            assert [p["title"] for p in first["figures"][0]["panels"]] == [
                "decision boundary at step 0",
                "loss",
            ]
            assert first["stats"]["step"] == 0  # paused: the layers' figures come along
            stream.until("status")
            _control(port, run, {"action": "play"})
            assert stream.until("status")["playing"] is True
            frames = [stream.until("frame")["a"] for _ in range(3)]
            assert all("stats" not in f for f in frames)  # sent once, and STATS_S is forever
            _control(port, run, {"action": "pause"})
            paused = stream.until("status")
            name, stats = stream.next()
            assert name == "stats" and stats["a"]["step"] == paused["step"]
            assert stats["a"]["tables"][0]["title"] == f"Every layer at step {paused['step']}"
        finally:
            stream.close()


# -- a stream waits on no other work, and its place goes with its client ------------------------


def test_a_stream_opens_and_sends_its_first_frame_while_an_experiment_holds_the_engine() -> None:
    """An experiment run holds the engine lock, held inside an optimizer step: a training
    stream is built (its own generator, no lock) and sends its points and first frame (step
    0, which takes no optimizer step) all the same."""
    gate = Gate()
    answers: list[int] = []
    with _lab() as (_, port), at_each_step(gate):
        gate.close()
        request = threading.Thread(
            target=lambda: answers.append(post_experiment(port, "bn-lr", {"steps": 20})[0])
        )
        request.start()
        try:
            gate.wait_for(1)  # the experiment is inside its first step, the engine its own
            free = ENGINE.acquire(blocking=False)
            if free:
                ENGINE.release()
            assert not free, "the experiment should hold the engine lock"
            stream = _open(port)
            try:
                assert stream.response.status == 200
                assert stream.until("run")["sides"] == ["a"]
                assert stream.until("frame")["a"]["step"] == 0
            finally:
                stream.close()
            assert gate.waiting == 1  # the experiment still held: the stream waited on nothing
        finally:
            gate.open()
            request.join(timeout=300)
    assert answers == [200]


class _HeldBuild:
    """Sessions whose build waits until :attr:`go_on` is set (in their build thread), telling
    when a build waits (:attr:`building`) and when one has ended (:attr:`built`)."""

    def __init__(self) -> None:
        self.building, self.go_on, self.built = (threading.Event() for _ in range(3))

    def session(self, setup: trainview.Setup) -> trainview.Session:
        self.building.set()
        assert self.go_on.wait(WAIT_S), "the build was never let go on"
        made = trainview.Session(setup)
        self.built.set()
        return made


def test_a_client_gone_during_the_build_frees_its_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream opens before its session is built; its client leaving during the build
    gives its place back at once (the build, held here, is dropped when it ends) and no slot
    is ever taken for it: the next client of a one-session lab is served."""
    held = _HeldBuild()
    monkeypatch.setattr(trainruns, "Session", held.session)
    one = runner.Runner(max_sessions=1)
    released = threading.Event()
    release = one.release

    def release_and_tell(session: Any) -> None:
        release(session)
        released.set()

    monkeypatch.setattr(one, "release", release_and_tell)
    with serving(create_app(one)) as port:
        stream = _open(port)
        assert stream.response.status == 200  # the stream is open: its headers came
        assert held.building.wait(WAIT_S)
        assert (one.building, one.sessions) == (1, 0)  # a place while built, no slot yet
        stream.close()
        assert released.wait(WAIT_S), "the stream did not end with its client"
        assert (one.building, one.sessions) == (0, 0) and not held.built.is_set()
        held.go_on.set()
        assert held.built.wait(WAIT_S)
        assert one.sessions == 0  # the build ended, and nothing took a slot for it
        released.clear()
        after = _open(port)
        try:
            assert after.response.status == 200 and after.until("run")["sides"] == ["a"]
            assert one.sessions == 1
        finally:
            after.close()
        assert released.wait(WAIT_S)
        assert one.sessions == 0


def test_a_build_that_fails_ends_the_open_stream_with_its_refusal() -> None:
    """LSUV on a width-1 ReLU net: a layer puts out nothing, so the build fails after the
    stream has opened; the stream ends with the 422 it would have answered, and frees its
    place."""
    with _lab() as (app, port):
        stream = _open(port, SMALL.replace("depth=1&width=4", "depth=3&width=1") + "&init=lsuv")
        try:
            assert stream.response.status == 200
            name, refused = stream.next()
            assert name == "refused" and refused["status"] == 422
            assert "lsuv_ cannot rescale" in refused["detail"]["message"]
            with pytest.raises(AssertionError, match="the stream ended"):
                stream.next()
        finally:
            stream.close()
        lab_runner = state_of(app).runner
        _wait(lambda: lab_runner.building == 0, "the failed build kept its place")
        assert _runs(app) == 0
