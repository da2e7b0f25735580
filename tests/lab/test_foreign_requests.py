"""Every computation has a client that waits for it (issue 32, finding 1).

A page on another site could make the lab compute: 70 ``<img>`` tags pointing at
``/api/experiments/NAME/notebook`` filled the run queue and ran to completion after the page
had aborted them, and 600 cheap downloads evicted the lessons' cached results. Here: a GET
whose client has gone stops its run at its next step; a GET from another site starts no run
(403), though what the cache holds is still given; the lessons' answers are never evicted.
These labs keep no answers on disk (``answers=None``): a lesson's page must compute here.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from fastapi.testclient import TestClient

from normlab.lab import lessons, site, trainlesson
from normlab.lab.app import create_app
from normlab.lab.runner import RunAbandoned, Runner

from .real_server import EventStream, serving
from .steps import at_each_step

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only
LONG = "steps=500&hidden_layers=6&width=128"  # the longest bn-lr: seconds
WAIT_S = 60.0
"""The most a held run or the test waits: a bug fails the test, it never hangs it."""
COMPUTING_GETS = [
    f"/api/experiments/bn-lr/notebook?{LONG}",
    f"/api/experiments/bn-lr/stream?{LONG}",
    "/experiments/bn-lr",
    "/lessons/drift",
]
"""A GET of each route that computes a run."""
FOREIGN = [
    {"Sec-Fetch-Site": "cross-site"},  # an <img> or a fetch on a page of another site
    {"Sec-Fetch-Site": "same-site"},  # a page served on another port of this machine
    {"Origin": "http://evil.example"},  # a cross-origin fetch or EventSource
    {"Origin": "http://127.0.0.1:9999"},
]
OWN_PAGE = {"Origin": LAB, "Sec-Fetch-Site": "same-origin"}


def _short(path: str) -> str:
    return path.partition("?")[0]


class _FirstRun:
    """At the first optimizer step of the process: the run in progress (its cache entry),
    held there until every request for it has gone (at most :data:`WAIT_S`)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.started = threading.Event()
        self.outcome: Future[dict[str, Any]] | None = None

    def __call__(self, step: int) -> None:
        if step != 1:
            return
        with self.runner._lock:
            (entry,) = [e for e in self.runner._cache.values() if not e.future.done()]
        self.outcome = entry.future
        self.started.set()
        entry.abandoned.wait(WAIT_S)


@pytest.mark.parametrize(
    "path", [COMPUTING_GETS[0], "/experiments/bn-lr", "/lessons/bn-training"], ids=_short
)
def test_a_get_whose_client_has_gone_stops_its_run(path: str) -> None:
    runner = Runner(answers=None)
    first = _FirstRun(runner)
    with serving(create_app(runner)) as port, at_each_step(first):
        client = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert first.started.wait(WAIT_S), "the run did not start"
        client.close()  # the <img> is aborted while its run trains
        assert first.outcome is not None
        assert isinstance(first.outcome.exception(timeout=WAIT_S), RunAbandoned)
    assert runner.abandoned == 1


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Runner(answers=None)), base_url=LAB) as c:
        yield c


def _runner(client: TestClient) -> Runner:
    runner: Runner = client.app.state.lab.runner  # type: ignore[attr-defined]
    return runner


def _get(client: TestClient, path: str, headers: dict[str, str]) -> tuple[int, Any]:
    """The status and the answer (a stream read to its end) of a GET of ``path``."""
    with client.stream("GET", path.replace(LONG, "steps=20"), headers=headers) as r:
        r.read()
        return r.status_code, r


@pytest.mark.parametrize("headers", FOREIGN, ids=lambda h: "|".join(h.values()))
@pytest.mark.parametrize("path", COMPUTING_GETS, ids=_short)
def test_a_get_from_another_site_computes_nothing(
    client: TestClient, path: str, headers: dict[str, str]
) -> None:
    status, r = _get(client, path, headers)
    assert status == 403
    assert r.json()["detail"]["parameter"] == "origin"
    assert "may start no run" in r.json()["detail"]["message"]
    assert _runner(client).misses == 0  # nothing computed


@pytest.mark.parametrize("path", COMPUTING_GETS, ids=_short)
def test_the_lab_s_own_pages_and_plain_clients_compute_and_others_read_the_cache(
    client: TestClient, path: str
) -> None:
    runner = _runner(client)
    status, _ = _get(client, path, OWN_PAGE)
    assert status == 200 and runner.misses > 0  # the lab's own page computes
    misses = runner.misses
    assert _get(client, path, {})[0] == 200  # so does curl (no Origin, no Sec-Fetch-Site)
    for headers in FOREIGN:  # a cached answer costs nothing: another site may read it
        assert _get(client, path, headers)[0] == 200
    assert runner.misses == misses


@pytest.mark.parametrize("bound", ["max_entries", "max_bytes"])
@pytest.mark.parametrize("computed_by", ["the warm-up", "a first visit"])
def test_ad_hoc_runs_never_evict_a_lesson_s_answers(
    monkeypatch: pytest.MonkeyPatch, bound: str, computed_by: str
) -> None:
    runner = Runner(**{bound: 3 if bound == "max_entries" else 1}, answers=None)
    app = create_app(runner)
    with TestClient(app, base_url=LAB) as c:
        if computed_by == "the warm-up":
            monkeypatch.setattr(lessons, "LESSONS", [lessons.find("drift")])
            site.warm_lessons(app)
        else:
            assert c.get("/lessons/drift").status_code == 200
        misses = runner.misses
        for seed in range(1, 9):  # ad-hoc downloads, each its own answer, overflow the cache
            assert c.get(f"/api/experiments/drift/notebook?seed={seed}").status_code == 200
        assert runner.misses == misses + 8
        hits = runner.hits
        assert c.get("/lessons/drift").status_code == 200
        assert runner.misses == misses + 8 and runner.hits > hits  # answered from the cache
        loose = [e for e in runner._cache.values() if not e.kept]
        assert len(loose) == (3 if bound == "max_entries" else 1)  # the rest stays bounded


def test_the_train_page_computes_its_numbers_for_no_other_site(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainlesson, "_done", {})  # not trained yet in this process
    for headers in FOREIGN:
        r = client.get("/train", headers=headers)
        assert r.status_code == 403 and r.json()["detail"]["parameter"] == "origin"
    assert not trainlesson._done  # nothing trained


def test_a_training_session_starts_for_no_other_site() -> None:
    runner = Runner()
    path = "/api/train/stream?dataset=blobs&points=40&depth=1&width=4"  # milliseconds a step
    with serving(create_app(runner)) as port:
        for headers in FOREIGN:
            refused = EventStream(port, path, headers=headers)
            assert refused.response.status == 403
            assert json.loads(refused.response.read())["detail"]["parameter"] == "origin"
            refused.close()
        assert runner.sessions == 0
        own_page = {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"}
        own = EventStream(port, path, headers=own_page)  # the lab's own /train page
        assert own.response.status == 200
        own.close()
