"""The /watch page: a normlab.watch log shown live (``normlab lab --watch-log FILE``).

Through the app (TestClient): the JSON state of a log written by a real watch run, the page
with and without a log, a log that appears later, a malformed line, the OpenAPI description and
the CLI's refusals. Through a real server on 127.0.0.1 (uvicorn in a thread, the app built in
this process): the event stream sends the state, then a new event once the file has grown; it
ends when the client goes or the lab stops; at most MAX_STREAMS are open at once; and it works
through the lab's guard with a token as well as without.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette warns about its httpx-based client on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from fastapi import FastAPI

from normlab import cli, doctor
from normlab.lab import app as lab_app
from normlab.lab import lessons
from normlab.lab.app import create_app
from normlab.lab.routes import watch as watchpage
from normlab.lab.state import state_of
from normlab.lab.watchlog import WatchLogError
from normlab.watching import events

from .real_server import EventStream, serving
from .test_watchlog import watched_lines

LAB = "http://127.0.0.1"
TOKEN = "t0k3n-for-watch-tests-0123456789"


@pytest.fixture(scope="module")
def lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The 12 lines of a real watch run (a layer dies at step 30)."""
    return watched_lines(tmp_path_factory.mktemp("watch") / "run.jsonl")


def _app(log: Path | None, **kwargs: Any) -> FastAPI:
    app = create_app(watch_log=log, **kwargs)
    if state_of(app).watch is not None:
        state_of(app).watch.interval = 0  # every request looks at the file
    return app


@contextlib.contextmanager
def _client(log: Path | None, **kwargs: Any) -> Iterator[TestClient]:
    with TestClient(_app(log, **kwargs), base_url=LAB) as c:
        yield c


def _initial(page: str) -> Any:
    found = re.search(r'<script type="application/json" class="nl-initial">(.*?)</script>', page)
    assert found, page[-2000:]
    return json.loads(found.group(1))


# -- through the app -----------------------------------------------------------------------------


def test_the_api_shows_a_real_watch_log(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text("".join(lines))
    records = [json.loads(line) for line in lines]
    with _client(log) as c:
        r = c.get("/api/watch")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    state = r.json()
    assert state["path"] == str(log) and state["status"] == "ok"
    assert (state["records"], state["first_step"], state["last_step"]) == (12, 0, 55)
    assert state["events"] == events(records) != []
    (figure,) = state["figures"]
    problems = len(doctor.LABELS) - 1  # every label but ok
    # 3 weight layers: scale, gradient ratio, update ratio; then the labels
    assert [len(p["series"]) for p in figure["panels"]] == [3, 3, 3, problems]
    assert figure["panels"][0]["series"][0]["x"] == [float(r["step"]) for r in records]
    (table,) = state["tables"]
    assert table["title"] == "Every layer at step 55" and "update" in table["columns"]
    assert [row[-1] for row in table["rows"]] == [
        ", ".join(layer["labels"]) for layer in records[-1]["layers"]
    ]


def test_the_page_shows_the_log_and_follows_it(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text("".join(lines[:4]))
    with _client(log) as c:
        page = c.get("/watch")
        state = c.get("/api/watch").json()
        script = c.get("/static/watch.js")
    assert script.status_code == 200 and "EventSource" in script.text
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    assert f'<code class="nl-watch-path">{html.escape(str(log))}</code>' in text
    assert "4 records, steps 0 to 15" in text
    assert _initial(text) == state  # the page starts from the state the API answers
    for script in ("/static/vendor/plotly.min.js", "/static/render.js", "/static/watch.js"):
        assert f'<script src="{script}" defer></script>' in text
    assert 'data-stream="/api/watch/stream"' in text
    assert '<a href="/watch" aria-current="page">' in text  # the header's link, here current
    hosts = re.findall(r"""https?://([^/\s"'<>)]+)""", text)
    assert {h.split(":")[0] for h in hosts} <= {"127.0.0.1"}  # nothing fetched from outside


def test_without_a_log_the_page_says_how_to_make_one(tmp_path: Path) -> None:
    with _client(None) as c:
        page = c.get("/watch")
        answers = [c.get(url) for url in ("/api/watch", "/api/watch/stream")]
    assert page.status_code == 200
    text = page.text
    assert "started without a log" in text and "normlab lab --watch-log train.jsonl" in text
    assert "normlab.watch(model, every=10, log=" in html.unescape(re.sub("<[^>]+>", "", text))
    assert "nl-initial" not in text and "/static/watch.js" not in text
    for r in answers:
        assert r.status_code == 404
        assert r.json()["detail"]["parameter"] == "watch_log"
        assert "--watch-log" in r.json()["detail"]["message"]
    lesson = (Path(lessons.__file__).parent / "doctor" / "lesson.html").read_text()
    assert '<a href="/watch">' in lesson  # the doctor lesson links to the page


def test_the_page_s_example_writes_a_log_where_a_layer_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing on the page runs as printed (its sleep aside), and does what the text says."""
    with _client(None) as c:
        text = c.get("/watch").text
    listing = re.search(
        r'<pre class="nl-src"><code class="language-python">(.*?)</code>', text, re.S
    )
    assert listing
    source = html.unescape(re.sub("<[^>]+>", "", listing.group(1)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    exec(compile(source, "watch-example.py", "exec"), {"__name__": "__main__"})
    with _client(tmp_path / "train.jsonl") as c:
        state = c.get("/api/watch").json()
    assert state["records"] == 40 and state["last_step"] == 390
    assert any(re.fullmatch(r"step 2\d\d: model\[\d\] became dead", e) for e in state["events"])


def test_a_log_that_appears_later(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "later.jsonl"
    with _client(log) as c:
        waiting = c.get("/api/watch").json()
        page = c.get("/watch").text
        log.write_text(lines[0] + lines[1][:50])  # the second record is being written
        one = c.get("/api/watch").json()
        with log.open("a") as f:
            f.write(lines[1][50:])
        two = c.get("/api/watch").json()
    assert waiting["status"] == "waiting" and waiting["records"] == 0
    assert "does not exist yet" in waiting["summary"] and "does not exist yet" in page
    assert '<details class="nl-watch-howto" open>' in page  # how to write it, shown
    assert (one["status"], one["records"], one["errors"]) == ("ok", 1, [])
    assert two["records"] == 2 and two["version"] > one["version"] > waiting["version"]


def test_a_malformed_line_is_named_and_the_lab_keeps_serving(
    lines: list[str], tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text(lines[0] + "{this is not json\n" + lines[1])
    with _client(log) as c:
        state = c.get("/api/watch").json()
        page = c.get("/watch").text
        with log.open("a") as f:
            f.write('{"step": 10, "layers": "none"}\n' + lines[2])
        later = c.get("/api/watch").json()
    assert state["records"] == 2 and state["skipped"] == 1
    assert state["errors"] == [
        "line 2 of run.jsonl is not a watch record: not JSON (Expecting property name "
        "enclosed in double quotes at column 2)"
    ]
    assert html.escape(state["errors"][0]) in page
    assert later["records"] == 3 and later["skipped"] == 2
    assert later["errors"][1].startswith("line 4 of run.jsonl is not a watch record")


def test_openapi_documents_the_watch_routes() -> None:
    with _client(None) as c:
        paths = c.get("/openapi.json").json()["paths"]
    once, stream = paths["/api/watch"]["get"], paths["/api/watch/stream"]["get"]
    assert once["tags"] == ["watch"] and "records" in once["responses"]["200"]["description"]
    assert "404" in once["responses"]
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    assert "503" in stream["responses"] and "/watch" not in paths  # the page is no API


def test_the_api_needs_the_token_where_the_lab_has_one(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text(lines[0])
    with TestClient(_app(log, token=TOKEN), base_url="http://lab.example:8000") as c:
        refused = c.get("/api/watch")
        page = c.get(f"/watch?token={TOKEN}")  # sets the cookie the page's requests carry
        by_cookie = c.get("/api/watch")
    assert refused.status_code == 403 and refused.json()["detail"]["parameter"] == "token"
    assert page.status_code == 200 and "normlab_token" in page.headers["set-cookie"]
    assert by_cookie.status_code == 200 and by_cookie.json()["records"] == 1


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["directory", "below a file"])
def test_cli_refuses_a_path_that_is_no_log(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.txt").write_text("")
    bad = tmp_path if kind == "directory" else tmp_path / "a.txt" / "run.jsonl"
    assert cli.main(["lab", "--watch-log", str(bad), "--db", str(tmp_path / "p.db")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("normlab: error: --watch-log")
    assert ("is a directory" if kind == "directory" else "cannot read it") in err
    with pytest.raises(WatchLogError):
        create_app(watch_log=bad)


def test_cli_serves_a_log_that_does_not_exist_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[FastAPI] = []
    monkeypatch.setattr(lab_app, "serve", lambda app, host, port, threads: served.append(app))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["lab", "--watch-log", "run.jsonl", "--db", str(tmp_path / "p.db")]) == 0
    (app,) = served
    state_of(app).progress.close()
    assert state_of(app).watch.path == tmp_path / "run.jsonl"  # fixed at startup, made absolute
    out = capsys.readouterr().out
    assert f"/watch follows {tmp_path / 'run.jsonl'} (waiting for it to appear)" in out


# -- a real server -------------------------------------------------------------------------------


class Stream(EventStream):
    """An open ``GET /api/watch/stream``."""

    def __init__(self, port: int, headers: dict[str, str] | None = None, query: str = "") -> None:
        super().__init__(port, f"/api/watch/stream{query}", headers=headers)


class Looks:
    """The stream's looks at the log, counted: ``with looks.held():`` no look happens (one
    waits), so the test changes the log or stops the lab between two looks, never inside one."""

    def __init__(self, app: FastAPI) -> None:
        watch = state_of(app).watch
        self._state = watch.state
        self._lock = threading.Lock()
        self.versions: list[int] = []  # each look's state version, in order
        watch.state = self._look

    def _look(self) -> dict[str, Any]:
        with self._lock:
            state: dict[str, Any] = self._state()
            self.versions.append(state["version"])
            return state

    def held(self) -> threading.Lock:
        return self._lock


def test_the_stream_sends_a_new_event_when_the_log_grows(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text("".join(lines[:3]))
    app = _app(log)
    looks = Looks(app)
    with serving(app) as port:
        stream = Stream(port)
        try:
            assert stream.response.status == 200
            assert stream.response.getheader("content-type").startswith("text/event-stream")
            name, first = stream.next()
            assert name == "state" and first["records"] == 3
            with looks.held():  # between two looks
                with log.open("a") as f:
                    f.write("".join(lines[3:7]))
                before = len(looks.versions)
            name, grown = stream.next()
            assert name == "state" and grown["records"] == 7 and grown["last_step"] == 30
            assert grown["version"] > first["version"]
            # sent at the first look after the log grew (the looks are POLL_S apart)
            assert looks.versions[before] == grown["version"]
        finally:
            stream.close()


def test_the_stream_ends_when_the_lab_stops(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text(lines[0])
    app = _app(log)
    looks = Looks(app)
    with serving(app) as port:
        stream = Stream(port)
        stream.next()
        with looks.held():  # between two looks
            lab_app._end_streams(app)
            before = len(looks.versions)
        assert stream.response.read() == b""  # the rest of the stream: its end
        assert len(looks.versions) <= before + 1  # at its next look (one may have waited)
        stream.close()


@pytest.mark.serial  # a bound on time: make test runs it alone, after the parallel part
def test_the_stream_follows_the_log_within_seconds(lines: list[str], tmp_path: Path) -> None:
    """The same two as above, timed: a new event within 3 s of the log growing, the end
    within 3 s of the lab stopping (a look every POLL_S)."""
    log = tmp_path / "run.jsonl"
    log.write_text(lines[0])
    app = _app(log)
    with serving(app) as port:
        stream = Stream(port)
        try:
            stream.next()
            started = time.monotonic()
            with log.open("a") as f:
                f.write("".join(lines[1:3]))
            assert stream.next()[1]["records"] == 3 and time.monotonic() - started < 3
            lab_app._end_streams(app)
            started = time.monotonic()
            assert stream.response.read() == b""
            assert time.monotonic() - started < 3
        finally:
            stream.close()


def _streams_open(app: FastAPI) -> int:
    count: int = state_of(app).watch_streams
    return count


def test_streams_are_bounded_and_a_closed_one_frees_its_slot(
    lines: list[str], tmp_path: Path
) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text(lines[0])
    app = _app(log)
    with serving(app) as port:
        streams = [Stream(port) for _ in range(watchpage.MAX_STREAMS)]
        try:
            assert [s.response.status for s in streams] == [200] * watchpage.MAX_STREAMS
            one_more = Stream(port)
            assert one_more.response.status == 503
            assert one_more.response.getheader("retry-after") == "5"
            detail = json.loads(one_more.response.read())["detail"]
            assert detail["parameter"] is None and "already follow this log" in detail["message"]
            one_more.close()
            streams.pop().close()  # a page goes away: its stream ends, its slot is free
            deadline = time.monotonic() + 120  # a hang guard: a bug fails, never a slow machine
            while _streams_open(app) >= watchpage.MAX_STREAMS:
                assert time.monotonic() < deadline, "the closed stream kept its slot"
                time.sleep(0.05)
            streams.append(Stream(port))
            assert streams[-1].response.status == 200 and streams[-1].next()[1]["records"] == 1
        finally:
            for s in streams:
                s.close()
    assert _streams_open(app) == 0


def test_the_stream_passes_the_guard_with_its_token(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text(lines[0])
    app = _app(log, token=TOKEN)
    with serving(app) as port:
        refused = Stream(port)
        assert refused.response.status == 403
        assert json.loads(refused.response.read())["detail"]["parameter"] == "token"
        refused.close()
        cross = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
        ways = [
            Stream(port, headers={"Authorization": f"token {TOKEN}"}),
            Stream(port, query=f"?token={TOKEN}"),
            Stream(
                port, headers={"Cookie": f"normlab_token_{port}={TOKEN}", **cross}
            ),  # GET: no Origin rule
        ]
        try:
            for s in ways:
                assert s.response.status == 200 and s.next()[1]["records"] == 1
        finally:
            for s in ways:
                s.close()
    local = _app(log)
    with serving(local) as port:  # on loopback without a token: the stream answers as it is
        s = Stream(port)
        assert s.response.status == 200 and s.next()[0] == "state"
        s.close()
