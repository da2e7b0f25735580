"""The lab's HTTP API: every experiment through HTTP, every kind of bad input, the cache."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from normlab.experiments import ParameterError, list_experiments
from normlab.lab.app import create_app
from normlab.lab.runner import RunAbandoned, RunCancelled, Runner, Waiter
from normlab.lab.state import state_of
from tests.experiments import expectations

from .real_server import free_port, post_experiment, serving, wait_until_serving
from .steps import HELD, at_each_step

STEPS = Path(__file__).with_name("steps.py")
"""``python STEPS ARGS`` is ``normlab ARGS`` held at its 2nd optimizer step (steps._main)."""


def _held_lab(port: int, *flags: str) -> list[str]:
    """The command of a ``normlab lab`` whose 2nd optimizer step waits (see :data:`STEPS`)."""
    return [sys.executable, str(STEPS), "lab", "--port", str(port), *flags]


def _wait_held(proc: subprocess.Popen[bytes]) -> None:
    """Read ``proc``'s stdout until its 2nd optimizer step says it waits."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.decode().strip() == HELD:
            return
    raise AssertionError(f"the lab exited ({proc.wait()}) before its 2nd optimizer step")


# the lab answers loopback Host names only (DNS-rebinding guard); TestClient says "testserver"
LAB = "http://127.0.0.1"
T = TypeVar("T")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url=LAB) as c:
        yield c


def still_serving(client: TestClient) -> None:
    r = client.get("/api/experiments")
    assert r.status_code == 200 and len(r.json()) == len(list_experiments())


def test_registry_lists_every_experiment_with_its_schema(client: TestClient) -> None:
    body = client.get("/api/experiments").json()
    assert [e["name"] for e in body] == [e.name for e in list_experiments()]
    drift = next(e for e in body if e["name"] == "drift")
    depth = next(p for p in drift["parameters"] if p["name"] == "depth")
    assert (depth["kind"], depth["default"], depth["min"], depth["max"]) == ("int", 10, 1, 100)
    lr = next(e for e in body if e["name"] == "bn-lr")
    assert lr["trains"] is True
    assert {"name": "batch_norm", "kind": "bool"}.items() <= lr["parameters"][0].items()


@pytest.mark.parametrize("name", [e.name for e in list_experiments()])
def test_every_experiment_with_defaults_carries_the_seed_figures(
    client: TestClient, name: str
) -> None:
    r = client.post(f"/api/experiments/{name}", json={})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    d = r.json()
    assert d["experiment"] == name and d["params"]["device"] == "cpu"
    figures = expectations.expected(name, "seed_figure")
    assert figures is None or figures(d)
    # the body is rendered by the Runner, once: byte for byte what FastAPI renders from the
    # result's dict (jsonable_encoder, then JSONResponse), which the route used to return
    value = state_of(client.app).runner.run(name, {})  # type: ignore[attr-defined]
    assert r.content == JSONResponse(jsonable_encoder(value)).body
    again = client.post(f"/api/experiments/{name}", json={})
    assert again.content == r.content


def test_the_seed_figures_name_registered_experiments() -> None:
    assert expectations.declaring("seed_figure") <= {e.name for e in list_experiments()}


def test_params_change_the_run(client: TestClient) -> None:
    d = client.post("/api/experiments/drift", json={"depth": 3, "seed": 5}).json()
    assert len(d["stds"]) == 3 and d["params"]["seed"] == 5
    empty_body = client.post("/api/experiments/drift")  # no body at all: defaults
    assert empty_body.status_code == 200 and len(empty_body.json()["stds"]) == 10


@pytest.mark.parametrize(
    ("path", "body", "parameter", "fragment"),
    [
        ("/api/experiments/nope", {}, "name", "experiment 'nope' not found"),
        ("/api/experiments/drift", {"depht": 3}, "depht", "unknown parameter 'depht'"),
        ("/api/experiments/drift", {"depth": 0}, "depth", "use an integer in [1, 100]"),
        ("/api/experiments/drift", {"depth": 10**9}, "depth", "use an integer in [1, 100]"),
        ("/api/experiments/drift", {"depth": "3"}, "depth", "'3' (str) is not an integer"),
        ("/api/experiments/drift", {"depth": 2.5}, "depth", "is not an integer"),
        ("/api/experiments/drift", {"depth": None}, "depth", "is not an integer"),
        ("/api/experiments/drift", {"activation": "gelu"}, "activation", "use one of 'relu'"),
        ("/api/experiments/bn-lr", {"batch_norm": 1}, "batch_norm", "is not true or false"),
        ("/api/experiments/bn-lr", {"lr": -1}, "lr", "use a number in [0.01, 5]"),
        ("/api/experiments/variance", {"gains": []}, "gains", "1 to 5 values"),
        ("/api/experiments/variance", {"gains": [1, "x"]}, "gains", "is not a list of numbers"),
        ("/api/experiments/init-compare", {"hist_layer": 40}, "hist_layer", "at most depth (20)"),
        ("/api/experiments/drift", [1, 2], None, "must be a JSON object"),
    ],
)
def test_bad_input_is_422_naming_the_parameter(client, path, body, parameter, fragment) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert detail["parameter"] == parameter
    assert fragment in detail["message"]
    still_serving(client)


def test_broken_json_is_422(client: TestClient) -> None:
    r = client.post(
        "/api/experiments/drift", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]["message"]
    still_serving(client)


@pytest.mark.parametrize("body", [b"\r", b"  \n"])
def test_a_body_of_whitespace_is_no_json_object(client: TestClient, body: bytes) -> None:
    # no body at all runs the defaults; a body must be JSON (schemathesis sent "\r")
    json_type = {"content-type": "application/json"}
    r = client.post("/api/experiments/drift", content=body, headers=json_type)
    assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]["message"]
    assert client.post("/api/experiments/drift", content=b"", headers=json_type).status_code == 200
    still_serving(client)


def test_a_huge_body_is_refused_unread_and_the_lab_goes_on(client: TestClient) -> None:
    json_type = {"Content-Type": "application/json"}
    declared = client.post(
        "/api/experiments/drift", content=b" " * (64 << 20), headers=json_type
    )  # 64 MiB, its length declared
    assert declared.status_code == 413
    assert "the limit is 65,536" in declared.json()["detail"]["message"]

    def chunks() -> Iterator[bytes]:  # no length: the lab stops reading past its limit
        for _ in range(1024):
            yield b" " * 1024

    sent = client.post("/api/experiments/drift", content=chunks(), headers=json_type)
    assert sent.status_code == 413 and "longer than 65,536" in sent.json()["detail"]["message"]
    still_serving(client)


def test_openapi_documents_each_experiments_parameters(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/api/experiments/variance"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    gains = schema["properties"]["gains"]
    assert gains["type"] == "array" and gains["maxItems"] == 5
    assert gains["items"] == {"type": "number", "minimum": 0.5, "maximum": 1.5}
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {
        "gains",
        "depth",
        "width",
        "batch",
        "activation",
        "seed",
        "device",
    }
    assert client.get("/docs").status_code == 200


def test_the_cache_is_bounded_in_bytes_the_oldest_answers_going_first() -> None:
    one = len(json.dumps(Runner().run("drift", {"seed": 0}), separators=(",", ":")))
    runner = Runner(max_bytes=int(2.5 * one))  # room for two answers of this size
    with TestClient(create_app(runner), base_url=LAB) as c:
        for seed in range(5):
            assert c.post("/api/experiments/drift", json={"seed": seed}).status_code == 200
            assert runner.bytes <= runner.max_bytes
        assert len(runner._cache) == 2 and runner.bytes > one  # the two newest, counted
        misses = runner.misses
        c.post("/api/experiments/drift", json={"seed": 4})  # the newest: still there
        assert runner.misses == misses
        c.post("/api/experiments/drift", json={"seed": 0})  # the oldest: gone, computed again
        assert runner.misses == misses + 1
    lone = Runner(max_bytes=1)  # an answer larger than the bound is still kept, alone
    lone._run_json("drift", {}, None)
    lone._run_json("drift", {"seed": 1}, None)
    assert len(lone._cache) == 1 and lone.bytes > lone.max_bytes


def test_results_are_cached_by_their_full_parameter_set() -> None:
    runner = Runner()
    with TestClient(create_app(runner), base_url=LAB) as c:
        a = c.post("/api/experiments/drift", json={}).json()
        b = c.post("/api/experiments/drift", json={"depth": 10, "seed": 0}).json()
        assert a == b and (runner.misses, runner.hits) == (1, 1)
        c.post("/api/experiments/drift", json={"depth": 9})
        assert runner.misses == 2


def _on_own_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` on a new event loop in another thread: the browser tests' sync
    Playwright leaves its loop marked as running in this one, where ``asyncio.run`` refuses."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_an_answer_is_rendered_once_and_sent_as_is_when_cached() -> None:
    runner = Runner()
    params = {"depth": 3, "seed": 2}
    first = _on_own_loop(runner.arun_json("drift", params))
    assert json.loads(first) == json.loads(json.dumps(runner.run("drift", params)))
    cached = _on_own_loop(runner.arun_json("drift", {**params, "width": 16}))  # the default width
    assert cached is first and (runner.misses, runner.hits) == (1, 2)
    # a run computed without JSON (a lesson page's) is rendered on its first request
    runner.run("drift", {"depth": 4})
    assert json.loads(_on_own_loop(runner.arun_json("drift", {"depth": 4})))["params"]["depth"] == 4
    with pytest.raises(ParameterError):  # bad input is refused before any thread is used
        _on_own_loop(runner.arun_json("drift", {"depth": 0}))


def test_answers_benchmark_runs() -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "answers.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["bn-lr", "init-train", "symmetry", "variance"], proc.stdout
    assert all(len(row) == 6 and row[3].endswith("x") for row in rows), proc.stdout


def test_runner_computes_once_for_concurrent_identical_requests() -> None:
    runner = Runner()
    out: list[dict] = []
    threads = [
        threading.Thread(target=lambda: out.append(runner.run("drift", {"seed": 7})))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runner.misses == 1 and runner.hits == 3 and all(o == out[0] for o in out)


def test_runner_evicts_the_least_recently_used() -> None:
    runner = Runner(max_entries=2)
    for seed in (1, 2, 1, 3):  # 2 is least recently used when 3 arrives
        runner.run("linear-scale", {"seed": seed})
    runner.run("linear-scale", {"seed": 1})
    assert runner.hits == 2 and runner.misses == 3
    runner.run("linear-scale", {"seed": 2})
    assert runner.misses == 4
    with pytest.raises(ValueError, match="max_entries"):
        Runner(max_entries=0)


LONG_BN_LR = {"steps": 500, "hidden_layers": 6, "width": 128}  # the longest bn-lr: seconds


def test_runner_cancel_stops_runs_and_refuses_new_ones_until_resumed() -> None:
    runner = Runner()
    cached = runner.run("linear-scale", {"seed": 3})
    failures: list[BaseException] = []

    def long_run() -> None:
        try:
            runner.run("bn-lr", LONG_BN_LR)
        except BaseException as exc:
            failures.append(exc)

    def shut_down(step: int) -> None:
        if step == 2:  # the long run trains (its 2nd step of 1000): the lab shuts down
            runner.cancel()

    worker = threading.Thread(target=long_run)
    with at_each_step(shut_down):
        worker.start()
        worker.join(timeout=120)
    assert not worker.is_alive()
    assert [type(e) for e in failures] == [RunCancelled]  # stopped, not finished
    with pytest.raises(RunCancelled, match="shutting down"):
        runner.run("linear-scale", {"seed": 4})  # nothing new starts
    assert runner.run("linear-scale", {"seed": 3}) == cached  # cached answers still come
    runner.resume()
    assert runner.run("linear-scale", {"seed": 4})["params"]["seed"] == 4


def _in_thread(fn: Callable[..., Any], *args: object) -> tuple[threading.Thread, list[object]]:
    """Start ``fn(*args)`` on a thread; the list gets its result or its exception."""
    out: list[object] = []

    def call() -> None:
        try:
            out.append(fn(*args))
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    return thread, out


def _wait_for(condition: Callable[[], object], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_run_every_request_has_left_stops_and_is_not_cached() -> None:
    runner = Runner()
    waiter = Waiter(runner)

    def leave(step: int) -> None:
        if step == 2:  # into its training (its 2nd step of 1000): the one request leaves
            waiter.leave()

    with at_each_step(leave):
        thread, out = _in_thread(runner.run, "bn-lr", LONG_BN_LR, waiter)
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert [type(o) for o in out] == [RunAbandoned]  # stopped, not finished
    assert runner.abandoned == 1
    assert Runner.key("bn-lr", LONG_BN_LR) not in runner._cache  # the next request computes


@pytest.mark.parametrize("stays", ["a request", "the warm-up"])
def test_a_run_goes_on_while_anyone_still_waits(stays: str) -> None:
    runner = Runner()
    params = {"steps": 500, "seed": 11}  # under a second
    leaving = Waiter(runner)
    staying = Waiter(runner) if stays == "a request" else None  # the warm-up waits without one
    first, first_out = _in_thread(runner.run, "bn-lr", params, leaving)
    _wait_for(lambda: runner.misses == 1, "the run to start")
    second, second_out = _in_thread(runner.run, "bn-lr", params, staying)
    _wait_for(lambda: runner.hits == 1, "the second caller to join")
    leaving.leave()
    for thread in (first, second):
        thread.join(timeout=120)
    assert runner.abandoned == 0
    assert isinstance(second_out[0], dict) and second_out[0]["params"]["seed"] == 11
    assert first_out == second_out  # the one who left got it too (nobody reads it)


def test_a_waiter_serves_one_runner() -> None:
    runner = Runner()
    with pytest.raises(ValueError, match="another Runner"):
        runner.run("drift", {}, Waiter(Runner()))
    assert runner.run("drift", {}, Waiter(runner))["params"]["depth"] == 10  # still serving


def test_a_request_gone_before_its_run_starts_computes_nothing() -> None:
    runner = Runner()
    waiter = Waiter(runner)
    waiter.leave()
    with pytest.raises(RunAbandoned):
        runner.run("drift", {}, waiter)
    assert (runner.misses, runner.hits, runner._cache) == (0, 0, {})


@pytest.mark.slow
def test_ctrl_c_cancels_a_long_run_in_progress(tmp_path: Path) -> None:
    """Ctrl+C used to wait for the run in progress to finish before the lab ended."""
    port = free_port()
    cmd = _held_lab(port, "--no-warm")
    answers: list[int] = []

    def long_request() -> None:
        answers.append(post_experiment(port, "bn-lr", LONG_BN_LR)[0])

    # ``with``: the stderr pipe is closed even when the test fails (left to the garbage
    # collector, it fails whichever later test is running with a ResourceWarning)
    with subprocess.Popen(
        [*cmd, "--db", str(tmp_path / "p.db")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=one_thread(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    ) as server:
        try:
            assert wait_until_serving(server, f"http://127.0.0.1:{port}") == 200
            client = threading.Thread(target=long_request)
            client.start()
            _wait_held(server)  # into the run: its 2nd step of 1000 waits for the Ctrl+C
            server.send_signal(signal.SIGINT)
            _, err = server.communicate(timeout=120)
            client.join(timeout=120)
        finally:
            if server.poll() is None:
                server.kill()
    assert server.returncode == 0, err.decode()
    assert answers == [503]  # cancelled, not trained to the end


def one_thread() -> dict[str, str]:
    """The environment for a lab process whose runs train on one torch thread, as the browser
    tests' labs do: beside other processes on a busy 2-core machine, two intra-op threads per
    run make training many times slower."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def _status(url: str, body: dict | None = None) -> tuple[int, Any]:
    """(status, headers: read case-insensitively) of a GET, or of a POST of ``body``."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.headers
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers


def _pages_while_runs_queue() -> list[float]:
    """50 requests for runs against a queue of 40, whose runs hold their threads until the
    pages have answered: then the 10 over the bound are refused (503, Retry-After) and the 40
    answered. Returns the seconds each page took.

    With runs of a fixed length, a loaded machine sent the 50 requests so slowly that the
    first runs ended and let later ones in (6 refused, not 10)."""
    runner = Runner()
    runner.max_queued = 40
    release = threading.Event()

    def slow(name: str, params: dict, waiter: Waiter | None) -> bytes:
        release.wait(120)  # a run that holds its thread (the engine is taken in turns)
        return b"{}"

    runner._run_json = slow  # type: ignore[method-assign]
    with serving(create_app(runner)) as port, ThreadPoolExecutor(50) as pool:
        base = f"http://127.0.0.1:{port}"
        posts = [
            pool.submit(_status, f"{base}/api/experiments/drift", {"seed": seed})
            for seed in range(50)
        ]
        _wait(lambda: runner.queued == 40, "the queue to fill")
        _wait(lambda: sum(f.done() for f in posts) == 10, "the requests over the bound")
        timings = []
        for path in ["/api/experiments", "/"] * 10:  # answered with no run over (or a hang)
            started = time.perf_counter()
            assert _status(base + path)[0] == 200
            timings.append(time.perf_counter() - started)
        assert runner.queued == 40, "the runs ended before the pages had answered"
        release.set()
        statuses = [f.result() for f in posts]
    refused = [h for code, h in statuses if code == 503]
    assert len(refused) == 10 and all(h.get("Retry-After") for h in refused)
    assert sum(code == 200 for code, _ in statuses) == 40
    return timings


def test_pages_answer_while_many_runs_queue_and_a_full_queue_is_refused() -> None:
    """Requests waiting for runs take the Runner's own threads, never the ones page routes are
    answered in: every page answers while all 40 runs still hold theirs."""
    _pages_while_runs_queue()


@pytest.mark.serial  # a bound on time: make test runs it alone, after the parallel part
def test_pages_answer_at_once_while_many_runs_queue() -> None:
    timings = _pages_while_runs_queue()
    p95 = sorted(timings)[int(0.95 * len(timings)) - 1]
    assert p95 < 0.25, f"pages took {p95 * 1e3:.0f} ms (p95) while runs queued"


def _wait(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.slow
def test_a_real_server_keeps_answering_while_a_training_runs() -> None:
    port = free_port()
    server = subprocess.Popen(
        _held_lab(port, "--no-warm"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=one_thread(),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_serving(server, base) == 200
        done: list[str] = []

        def slow() -> None:
            # held inside its 2nd step until the list has answered: a few steps are enough (the
            # longest bn-lr trained 2.6 s of CPU here after the hold, proving nothing more)
            _post(base + "/api/experiments/bn-lr", {"steps": 3, "seed": 11})
            done.append("train")

        worker = threading.Thread(target=slow)
        worker.start()
        _wait_held(server)  # the training waits inside its 2nd step
        with urllib.request.urlopen(base + "/api/experiments", timeout=60) as resp:
            assert resp.status == 200
        done.append("list")
        assert server.stdin is not None
        server.stdin.write(b"go on\n")  # the training goes on to its end
        server.stdin.flush()
        worker.join()
        assert done == ["list", "train"]  # answered while the training was still running
    finally:
        server.terminate()
        server.wait(timeout=60)
        for pipe in (server.stdin, server.stdout):
            if pipe is not None:
                pipe.close()


@pytest.mark.slow
def test_warm_start_fills_the_cache_for_every_lesson() -> None:
    from normlab.lab import lessons

    # The suite's answers store: the warm-up fills this lab's cache from it where another
    # test's lab already computed a lesson (computing every lesson here cost 18 s of CPU), and
    # computes the rest. What is checked is the same: a visit after the warm-up finds every
    # live number in the cache, neither computing it (a miss) nor reading it from the store.
    runner = Runner()
    with TestClient(create_app(runner, warm=True), base_url=LAB) as c:
        assert c.get("/api/experiments").status_code == 200  # serving while it warms
        warmer = next(t for t in threading.enumerate() if t.name == "normlab-warm")
        warmer.join(timeout=600)
        assert not warmer.is_alive() and runner.misses + runner.stored > 0
        before = runner.misses, runner.stored
        for lesson in lessons.LESSONS:
            assert c.get(f"/lessons/{lesson.slug}").status_code == 200
        assert (runner.misses, runner.stored) == before  # every live number was in the cache


def test_a_lab_started_with_no_warm_computes_each_lesson_on_its_first_visit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``normlab lab --no-warm`` serves with an empty cache; a lesson's first visit computes
    its live numbers (the seed figures are on the page) and its second computes nothing."""
    from normlab import cli
    from normlab.lab import app as lab_app

    served: list[Any] = []
    monkeypatch.setattr(lab_app, "serve", lambda app, host, port, threads: served.append(app))
    assert cli.main(["lab", "--no-warm", "--no-answers", "--db", str(tmp_path / "p.db")]) == 0
    (app,) = served
    runner: Runner = state_of(app).runner
    with TestClient(app, base_url=LAB) as c:
        assert c.get("/api/experiments").status_code == 200
        assert not any(t.name == "normlab-warm" for t in threading.enumerate())
        assert runner.misses == 0 and not runner._cache  # nothing computed before a visit
        page = c.get("/lessons/drift")
        assert page.status_code == 200
        for figure in ("0.0322", "1.0280", "0.3545", "0.0993", "0.6876", "6.0035"):
            assert figure in page.text  # the seed figures, computed on this visit
        misses = runner.misses
        assert misses > 0
        assert c.get("/lessons/drift").status_code == 200
        assert runner.misses == misses  # the second visit is answered from the cache


def test_shutdown_stops_the_warm_up() -> None:
    """A warm-up still going at shutdown stops after its current run and is joined."""
    with TestClient(create_app(Runner(answers=None), warm=True), base_url=LAB) as c:
        assert c.get("/api/experiments").status_code == 200
        warmer = next(t for t in threading.enumerate() if t.name == "normlab-warm")
        assert warmer.is_alive()  # every lesson takes tens of seconds
    assert not warmer.is_alive()


@pytest.mark.slow
def test_ctrl_c_while_warming_exits_cleanly(tmp_path: Path) -> None:
    """Stopping ``normlab lab`` during its warm-up used to abort the interpreter (a training on
    a daemon thread at exit: "terminate called without an active exception", exit 134). The
    Ctrl+C goes to the whole process group, as a terminal sends it; the lab starts no helper
    process, so there is no one else to take it."""
    port = free_port()
    cmd = _held_lab(port, "--no-answers")  # the warm-up computes: it reads no stored answer
    with subprocess.Popen(  # ``with``: the pipes are closed even if the test fails
        [*cmd, "--db", str(tmp_path / "p.db")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a process group of its own, as a terminal gives a command
    ) as server:
        try:
            assert wait_until_serving(server, f"http://127.0.0.1:{port}") == 200
            _wait_held(server)  # into the warm-up's training runs: its 2nd step waits
            assert _children(server.pid) <= _sandbox_processes(server.pid)  # no helper pool
            os.killpg(server.pid, signal.SIGINT)
            _, err = server.communicate(timeout=120)
        finally:
            if server.poll() is None:
                server.kill()
    assert server.returncode == 0, err.decode()
    assert b"terminate called" not in err
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err, err.decode()


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry))
    return found


def _sandbox_processes(pid: int) -> set[int]:
    """The lab's children that belong to the playground's sandbox (bubblewrap or its child)."""
    found = set()
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"bwrap" in cmdline or b"sandbox" in cmdline:
            found.add(child)
    return found
