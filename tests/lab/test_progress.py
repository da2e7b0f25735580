"""The progress store: WAL, transactions, threads, reopening; the listing and progress routes;
and a real lab server SIGKILLed after acknowledging a write, then started again."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from normlab.lab import exercises, progress
from normlab.lab.app import create_app
from normlab.lab.exercises import ChoiceExercise
from normlab.lab.lessons import LESSONS
from normlab.lab.progress import ProgressLimit, ProgressStore, ProgressStoreError, default_db_path

from .real_server import free_port, wait_until_serving

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProgressStore]:
    with ProgressStore(tmp_path / "deep" / "folder" / "progress.sqlite3") as s:
        yield s


# -- the store ---------------------------------------------------------------------------------


def test_new_store_creates_its_folder_and_runs_in_wal_mode(store: ProgressStore) -> None:
    assert Path(store.path).is_file()
    assert store.journal_mode() == "wal"
    other = sqlite3.connect(store.path)  # a second connection sees the same settings on disk
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()
    assert store.progress() == {} and store.listings() == {}


def test_attempts_and_solved(store: ProgressStore) -> None:
    store.record_attempt("he-factor", "def he_std(n): ...", False, "check 4 of 5 failed")
    assert store.progress() == {"he-factor": {"attempts": 1, "solved": False}}
    store.record_attempt("he-factor", "import math", True, "all 5 checks passed")
    store.record_attempt("he-factor", "oops", False, "check 1 of 5 failed")  # stays solved
    store.record_attempt("bn-eval-statistics", 1, True, "Right.")
    assert store.progress() == {
        "bn-eval-statistics": {"attempts": 1, "solved": True},
        "he-factor": {"attempts": 3, "solved": True},
    }
    attempts = store.attempts("he-factor")
    assert [a.submission for a in attempts] == ["def he_std(n): ...", "import math", "oops"]
    assert [a.passed for a in attempts] == [False, True, False]
    assert attempts[0].feedback == "check 4 of 5 failed" and attempts[0].created <= time.time()
    assert store.attempts("bn-eval-statistics")[0].submission == 1  # JSON keeps the type


def test_listings_save_overwrite_and_read(store: ProgressStore) -> None:
    assert store.listing("drift-stack") is None
    store.save_listing("drift-stack", "print(1)")
    store.save_listing("drift-stack", "print(2)")
    store.save_listing("a-1", "")
    assert store.listing("drift-stack") == "print(2)"
    assert store.listings() == {"a-1": "", "drift-stack": "print(2)"}


@pytest.mark.parametrize("bad", ["Drift", "a_b", "", "x" * 65, "a b", "é"])
def test_bad_listing_ids_are_refused(store: ProgressStore, bad: str) -> None:
    with pytest.raises(ValueError, match="lowercase letters, digits or dashes"):
        store.save_listing(bad, "x")
    with pytest.raises(ValueError, match=f"listing_id {bad!r} is not allowed"):
        store.listing(bad)


def test_bad_arguments_are_refused_by_name(store: ProgressStore) -> None:
    with pytest.raises(ValueError, match="exercise_id must be a non-empty str"):
        store.record_attempt("", "x", True, "f")
    with pytest.raises(TypeError, match="passed must be a bool, got int"):
        store.record_attempt("a", "x", 1, "f")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="code must be a str, got bytes"):
        store.save_listing("a", b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        store.record_attempt("a", {1}, True, "f")
    assert store.progress() == {}  # a refused write leaves nothing behind


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite3"
    with ProgressStore(path) as s:
        s.record_attempt("x", 0.125, True, "Right")
        s.save_listing("l", "code")
    assert s.closed
    with pytest.raises(ValueError, match="is closed"):
        s.listings()
    with ProgressStore(path) as again:
        assert again.progress() == {"x": {"attempts": 1, "solved": True}}
        assert again.listing("l") == "code"


def test_exercise_code_is_kept_per_exercise_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite3"
    with ProgressStore(path) as s:
        assert s.code("he-factor") is None and s.codes() == {}
        s.save_code("he-factor", "def he_std(n):\n    return 1.0\n")
        s.save_code("he-factor", "def he_std(n):\n    return (2 / n) ** 0.5\n")  # the last wins
        s.save_code("bn-backward", "")
        s.save_listing("he-factor", "print('a listing, not the exercise')")  # another table
        assert s.progress() == {}  # keeping code is no attempt
    with ProgressStore(path) as again:
        assert again.codes() == {
            "bn-backward": "",
            "he-factor": "def he_std(n):\n    return (2 / n) ** 0.5\n",
        }
        assert again.code("he-factor") == again.codes()["he-factor"]
    with pytest.raises(ValueError, match="exercise_id 'He' is not allowed"):
        again.save_code("He", "x")
    with ProgressStore(path) as s, pytest.raises(TypeError, match="code must be a str, got int"):
        s.save_code("he-factor", 3)  # type: ignore[arg-type]


def test_standing_counts_what_the_file_holds(store: ProgressStore) -> None:
    assert store.standing("he-factor") == {"attempts": 0, "solved": False}
    for k in range(5):
        store.record_attempt("he-factor", k, k == 2, "f")
        assert store.standing("he-factor") == {"attempts": k + 1, "solved": k >= 2}
    assert store.standing("he-factor") == store.progress()["he-factor"]


def test_one_database_is_one_learner(tmp_path: Path) -> None:
    a, b = tmp_path / "a.sqlite3", tmp_path / "b.sqlite3"
    with ProgressStore(a) as first, ProgressStore(a) as beside, ProgressStore(b) as other:
        assert len(first.learner_id) == 32 and int(first.learner_id, 16) >= 0
        assert beside.learner_id == first.learner_id  # a second process on the same file
        assert other.learner_id != first.learner_id
        kept = first.learner_id
    with ProgressStore(a) as again:
        assert again.learner_id == kept


def test_a_version_1_database_gains_the_new_tables_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        """CREATE TABLE attempts (id INTEGER PRIMARY KEY AUTOINCREMENT, exercise_id TEXT NOT
        NULL, submission TEXT NOT NULL, passed INTEGER NOT NULL, feedback TEXT NOT NULL,
        created REAL NOT NULL);
        CREATE TABLE solved (exercise_id TEXT PRIMARY KEY, first_solved REAL NOT NULL);
        CREATE TABLE listings (listing_id TEXT PRIMARY KEY, code TEXT NOT NULL,
        updated REAL NOT NULL);
        INSERT INTO attempts (exercise_id, submission, passed, feedback, created)
        VALUES ('x', '1', 0, 'f', 0);
        PRAGMA user_version = 1;"""
    )
    conn.close()
    with ProgressStore(path) as s:
        assert s.progress() == {"x": {"attempts": 1, "solved": False}}
        s.save_code("he-factor", "pass")
        assert s.codes() == {"he-factor": "pass"} and len(s.learner_id) == 32
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()


def test_concurrent_writes_from_threads_and_a_second_connection(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite3"
    shared, other = ProgressStore(path), ProgressStore(path)  # other: like a second process
    errors: list[BaseException] = []
    threads_n, writes = 8, 25

    def work(i: int) -> None:
        try:
            for k in range(writes):
                target = other if i % 2 else shared
                target.record_attempt(f"ex-{i % 4}", k, k == writes - 1, f"t{i}")
                target.save_listing(f"thread-{i}", f"print({k})")
                shared.progress()  # reads interleave with the writes
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    progress = shared.progress()
    assert sum(p["attempts"] for p in progress.values()) == threads_n * writes
    assert all(p == {"attempts": 2 * writes, "solved": True} for p in progress.values())
    assert shared.listings() == {f"thread-{i}": f"print({writes - 1})" for i in range(threads_n)}
    shared.close()
    other.close()


def test_bad_paths_raise_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(ProgressStoreError, match="is a folder, give a file path"):
        ProgressStore(tmp_path)
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"this is not a database, just some bytes " * 50)
    with pytest.raises(ProgressStoreError, match="is not a normlab progress database"):
        ProgressStore(junk)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ProgressStoreError, match="cannot create the folder"):
        ProgressStore(blocker / "sub" / "p.sqlite3")
    newer = tmp_path / "newer.sqlite3"
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(ProgressStoreError, match="written by a newer normlab"):
        ProgressStore(newer)


def test_a_damaged_database_is_refused_when_it_opens(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite3"
    store = ProgressStore(path)
    for i in range(400):  # a few pages of rows and index entries
        store.save_listing(f"drift-{i}", "print(1)\n" * 20)
    store.close()
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[2 * page : 4 * page] = b"\xa5" * (2 * page)  # a valid header, bad pages after it
    path.write_bytes(bytes(data))
    with pytest.raises(ProgressStoreError, match=r"is damaged .*move it aside"):
        ProgressStore(path)


def test_a_damaged_database_is_refused_on_one_line(tmp_path: Path) -> None:
    """SQLite's integrity report spans lines ("*** in database main ***" then one per page);
    the refusal is one line, as the CLI prints it (issue 32, finding 8)."""
    path = tmp_path / "p.sqlite3"
    with ProgressStore(path) as store:
        for i in range(400):
            store.save_listing(f"drift-{i}", "print(1)\n" * 20)
    data = bytearray(path.read_bytes())
    data[2 * 4096 : 4 * 4096] = b"\xa5" * (2 * 4096)
    path.write_bytes(bytes(data))
    with pytest.raises(ProgressStoreError) as refused:
        ProgressStore(path)
    assert "is damaged" in str(refused.value) and "\n" not in str(refused.value)


def _someone_elses(path: Path, version: int) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    ("version", "fragment"),
    [(0, "it holds other tables (invoices)"), (99, "written by a newer normlab (schema 99")],
)
def test_a_file_that_is_not_ours_is_refused_before_anything_is_written(
    tmp_path: Path, version: int, fragment: str
) -> None:
    """Someone else's SQLite file given as --db, or one of a newer schema, is refused with its
    bytes as they were: no table added, no WAL switch (which rewrites the header), no
    ``-wal`` file beside it (issue 32, finding 8)."""
    path = tmp_path / "theirs.sqlite3"
    before = _someone_elses(path, version)
    with pytest.raises(ProgressStoreError, match=re.escape(fragment)):
        ProgressStore(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.sqlite3"]


def test_a_version_one_file_of_ours_is_still_opened(tmp_path: Path) -> None:
    """The refusal of foreign files does not refuse our own older layout."""
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE listings (listing_id TEXT PRIMARY KEY, code TEXT NOT NULL, "
        "updated REAL NOT NULL)"
    )
    conn.execute("INSERT INTO listings VALUES ('drift-stack', 'print(1)', 0)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with ProgressStore(path) as store:
        assert store.listings() == {"drift-stack": "print(1)"}


def test_a_new_database_is_private_to_its_owner(tmp_path: Path) -> None:
    """The file holds the learner's code: created 0600 whatever the umask allows, and so are
    SQLite's ``-wal`` and ``-shm`` beside it (issue 32, finding 8)."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "new" / "progress.sqlite3"
        with ProgressStore(path) as store:
            store.save_listing("mine", "print(1)")
            modes = {p.name: p.stat().st_mode & 0o777 for p in path.parent.iterdir()}
    finally:
        os.umask(old)
    assert set(modes) >= {"progress.sqlite3", "progress.sqlite3-wal", "progress.sqlite3-shm"}
    assert set(modes.values()) == {0o600}, modes


def test_saved_listings_are_bounded_in_count_and_in_characters(
    store: ProgressStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GET /api/progress`` answers with every saved listing (59.7 MB for 23,309 of them;
    issue 32, finding 6): what is kept is bounded, so the answer is. At a bound a new listing
    is refused and nothing is saved; a listing already kept can still be changed (within the
    characters) or shortened."""
    monkeypatch.setattr(progress, "MAX_LISTINGS", 3)
    monkeypatch.setattr(progress, "MAX_SAVED_CHARS", 100)
    for i in range(3):
        store.save_listing(f"l-{i}", "x" * 20)
    with pytest.raises(ProgressLimit, match="3 listings are saved") as refused:
        store.save_listing("l-3", "print(1)")
    assert refused.value.param == "listing_id"
    store.save_listing("l-0", "x" * 60)  # kept already: changed, 100 characters in all
    with pytest.raises(ProgressLimit, match="would hold 101 characters") as refused:
        store.save_listing("l-1", "x" * 21)
    assert refused.value.param == "code"
    store.save_listing("l-0", "")  # and put back short
    assert store.listings() == {"l-0": "", "l-1": "x" * 20, "l-2": "x" * 20}


def test_the_bounds_keep_the_progress_answer_small() -> None:
    """The real bounds: the most ``GET /api/progress`` can hold of listings, as JSON."""
    worst = progress.MAX_SAVED_CHARS * 6 + progress.MAX_LISTINGS * (64 + 6)  # every char \uXXXX
    assert worst < 13 << 20


def _on_a_read_only_mount(place: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python whose view of ``place`` (a folder or a file) is a read-only
    bind mount, in a mount namespace of its own so nothing outside sees it: what root meets on
    a read-only disk, where file permissions do not stop root."""
    script = (
        f"mount --bind {place} {place} && mount -o remount,bind,ro {place} && "
        f'exec {sys.executable} -c "$0"'
    )
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, code],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _open_each(paths: list[Path]) -> str:
    """Code that opens each path as a store and prints the error of each refusal."""
    return (
        "from normlab.lab.progress import ProgressStore, ProgressStoreError\n"
        f"for path in {[str(p) for p in paths]!r}:\n"
        "    try:\n"
        "        ProgressStore(path)\n"
        "    except ProgressStoreError as exc:\n"
        "        print(exc)\n"
    )


def test_a_read_only_location_is_named_as_such(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    ProgressStore(folder / "old.sqlite3").close()  # written before the disk went read-only
    ProgressStore(tmp_path / "file.sqlite3").close()
    probe = _on_a_read_only_mount(folder, "print(1)")
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here (needs root): {probe.stderr.strip()}")
    out = _on_a_read_only_mount(folder, _open_each([folder / "old.sqlite3", folder / "new"]))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    for line, name in zip(lines, ("old.sqlite3", "new"), strict=True):
        assert line.startswith(f"{str(folder / name)!r} is in a read-only location"), line
        assert "a read-only file system" in line and "give a --db path the lab can write" in line
    one = tmp_path / "file.sqlite3"  # the file alone read-only, in a writable folder
    out = _on_a_read_only_mount(one, _open_each([one]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        f"{str(one)!r} is read-only (a read-only file system): make it writable or give "
        "another --db"
    )
    assert ProgressStore(folder / "old.sqlite3").learner_id  # outside, both files are fine
    assert ProgressStore(one).learner_id


def test_default_db_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "normlab" / "progress.sqlite3"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/path")  # the spec says: ignore it
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home_path = tmp_path / "home" / ".local" / "share" / "normlab" / "progress.sqlite3"
    assert default_db_path() == home_path
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_db_path() == home_path


# -- the routes --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("progress") / "progress.sqlite3"
    with TestClient(create_app(db_path=db), base_url=LAB) as c:
        yield c


def test_listing_routes_save_and_read(client: TestClient) -> None:
    assert client.get("/api/listings/bn-columns").status_code == 404
    r = client.put("/api/listings/bn-columns", json={"code": "print('mine')"})
    assert r.status_code == 200 and r.json() == {"id": "bn-columns", "saved": True}
    assert client.get("/api/listings/bn-columns").json() == {
        "id": "bn-columns",
        "code": "print('mine')",
    }
    assert client.get("/api/progress").json()["listings"]["bn-columns"] == "print('mine')"


def test_unsaved_listing_is_404_json(client: TestClient) -> None:
    r = client.get("/api/listings/never-saved")
    assert r.status_code == 404
    assert r.json()["detail"] == {
        "parameter": "listing_id",
        "message": "no code saved for listing 'never-saved'",
    }


@pytest.mark.parametrize(
    ("method", "path", "body", "parameter", "fragment"),
    [
        ("put", "/api/listings/Bad_Id", {"code": "x"}, "listing_id", "lowercase letters"),
        ("get", "/api/listings/Bad_Id", None, "listing_id", "lowercase letters"),
        ("put", "/api/listings/" + "a" * 65, {"code": "x"}, "listing_id", "1 to 64"),
        ("put", "/api/listings/ok", {}, "code", "missing 'code'"),
        ("put", "/api/listings/ok", {"code": "x", "lang": "py"}, "lang", "unknown field"),
        ("put", "/api/listings/ok", {"code": 3}, "code", "code must be a string, got int"),
        ("put", "/api/listings/ok", {"code": "x" * 100_001}, "code", "the limit is 100,000"),
        ("put", "/api/listings/ok", ["x"], None, "must be a JSON object"),
    ],
)
def test_bad_listing_requests_are_422_naming_the_parameter(
    client: TestClient,
    method: str,
    path: str,
    body: Any,
    parameter: str | None,
    fragment: str,
) -> None:
    r = client.request(method.upper(), path, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["parameter"] == parameter
    assert fragment in r.json()["detail"]["message"]
    assert "ok" not in client.get("/api/progress").json()["listings"]
    assert client.get("/api/progress").status_code == 200  # still serving


def test_a_listing_past_the_bounds_is_422_and_nothing_is_saved(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = len(client.get("/api/progress").json()["listings"])
    monkeypatch.setattr(progress, "MAX_LISTINGS", saved)
    r = client.put("/api/listings/one-too-many", json={"code": "print(1)"})
    assert r.status_code == 422 and r.json()["detail"]["parameter"] == "listing_id"
    assert "one-too-many" not in client.get("/api/progress").json()["listings"]
    monkeypatch.setattr(progress, "MAX_LISTINGS", saved + 1)
    monkeypatch.setattr(progress, "MAX_SAVED_CHARS", 10)
    r = client.put("/api/listings/one-too-many", json={"code": "x" * 11})
    assert r.status_code == 422 and r.json()["detail"]["parameter"] == "code"
    assert "at most 10" in r.json()["detail"]["message"]
    assert "one-too-many" not in client.get("/api/progress").json()["listings"]


def test_exercise_code_routes_keep_code_without_counting_an_attempt(client: TestClient) -> None:
    assert client.get("/api/exercises/bn-backward/code").status_code == 404
    before = client.get("/api/progress").json()["lessons"]
    r = client.put("/api/exercises/bn-backward/code", json={"code": "def f():\n    pass\n"})
    assert r.status_code == 200 and r.json() == {"id": "bn-backward", "saved": True}
    r = client.put("/api/exercises/bn-backward/code", json={"code": "print('second')"})
    assert client.get("/api/exercises/bn-backward/code").json() == {
        "id": "bn-backward",
        "code": "print('second')",
    }
    body = client.get("/api/progress").json()
    assert body["exercise_code"]["bn-backward"] == "print('second')"
    assert body["lessons"] == before  # no attempt counted, nothing solved


@pytest.mark.parametrize(
    ("method", "path", "body", "parameter", "fragment"),
    [
        ("put", "/api/exercises/nope/code", {"code": "x"}, "id", "exercise 'nope' not found"),
        ("get", "/api/exercises/nope/code", None, "id", "exercise 'nope' not found"),
        ("put", "/api/exercises/bn-batch-of-one/code", {"code": "x"}, "id", "not a code one"),
        ("put", "/api/exercises/he-derivation/code", {}, "code", "missing 'code'"),
        ("put", "/api/exercises/he-derivation/code", {"code": "x", "y": 1}, "y", "unknown field"),
        ("put", "/api/exercises/he-derivation/code", {"code": 3}, "code", "must be a string"),
        ("put", "/api/exercises/he-derivation/code", {"code": "#" * 20_001}, "code", "20,000"),
    ],
)
def test_bad_exercise_code_requests_are_422_naming_the_parameter(
    client: TestClient,
    method: str,
    path: str,
    body: Any,
    parameter: str | None,
    fragment: str,
) -> None:
    r = client.request(method.upper(), path, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["parameter"] == parameter
    assert fragment in r.json()["detail"]["message"]
    assert "he-derivation" not in client.get("/api/progress").json()["exercise_code"]


def test_progress_has_every_lesson_and_exercise(client: TestClient) -> None:
    body = client.get("/api/progress").json()
    lessons = body["lessons"]
    assert list(lessons) == [lesson.slug for lesson in LESSONS]
    for slug, lesson in lessons.items():
        ids = [e.id for e in exercises.by_lesson(slug)]
        assert list(lesson["exercises"]) == ids and lesson["total"] == len(ids)
    ex = exercises.get("bn-batch-of-one")
    assert isinstance(ex, ChoiceExercise)
    wrong, right = (next(c.text for c in ex.choices if c.correct is k) for k in (False, True))
    client.post("/api/exercises/bn-batch-of-one/submit", json={"answer": wrong})
    client.post("/api/exercises/bn-batch-of-one/submit", json={"answer": right})
    bn = client.get("/api/progress").json()["lessons"]["batch-norm"]
    assert bn["solved"] == 1 and bn["exercises"]["bn-batch-of-one"] == {
        "kind": "choice",
        "solved": True,
        "attempts": 2,
    }


# -- a real server, killed --------------------------------------------------------------------


def _call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _lab(db: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A ``normlab lab`` on ``db``, serving. ``--no-warm``: these tests read progress and
    listings, no live number, so the lab computes none in the background."""
    flags = ["--port", str(port), "--db", str(db), "--no-warm"]
    cmd = [sys.executable, "-m", "normlab", "lab", *flags]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        assert wait_until_serving(proc, f"http://127.0.0.1:{port}", "/api/progress") == 200
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "NORMLAB_TOKEN": ""}


@pytest.mark.slow
def test_acknowledged_progress_survives_sigkill(tmp_path: Path) -> None:
    db, port = tmp_path / "kill" / "progress.sqlite3", free_port()
    base = f"http://127.0.0.1:{port}"
    env = _env(tmp_path)
    proc = _lab(db, port, env)
    try:
        status, verdict = _call(
            base, "POST", "/api/exercises/init-xavier-bound/submit", {"answer": 0.125}
        )
        assert status == 200 and verdict["passed"] is True
        ex = exercises.get("bn-eval-statistics")
        assert isinstance(ex, ChoiceExercise)
        wrong = next(c.text for c in ex.choices if not c.correct)
        status, _ = _call(
            base, "POST", "/api/exercises/bn-eval-statistics/submit", {"answer": wrong}
        )
        assert status == 200
        status, _ = _call(base, "PUT", "/api/listings/drift-stack", {"code": "print('kept')"})
        assert status == 200
        status, _ = _call(base, "PUT", "/api/exercises/he-derivation/code", {"code": "# mine"})
        assert status == 200
    finally:
        proc.send_signal(signal.SIGKILL)  # no shutdown, no checkpoint: only what was committed
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert Path(str(db) + "-wal").exists()  # the writes sit in the WAL, not yet folded back
    # the lab started again on that file: here, not a second process (whose torch import, 6 s
    # of CPU, adds nothing: the killed one was real, and the file is opened afresh either way)
    with TestClient(create_app(db_path=db), base_url=LAB) as lab:
        r = lab.get("/api/progress")
        assert r.status_code == 200
        progress = r.json()
        init = progress["lessons"]["initialization"]["exercises"]["init-xavier-bound"]
        bn = progress["lessons"]["batch-norm"]["exercises"]["bn-eval-statistics"]
        assert init == {"kind": "number", "solved": True, "attempts": 1}
        assert bn == {"kind": "choice", "solved": False, "attempts": 1}
        r = lab.get("/api/listings/drift-stack")
        assert (r.status_code, r.json()) == (200, {"id": "drift-stack", "code": "print('kept')"})
        assert progress["exercise_code"] == {"he-derivation": "# mine"}


def test_cli_lab_refuses_a_bad_db_path_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `normlab lab` answered in this process (a status 2 reaching the shell is tests/test_cli.py's
    # concern): its create_app opens the file; serve never serves, so a lab that took the file
    # would return 0 here, not hang
    from normlab import cli
    from normlab.lab import app as lab_app

    monkeypatch.setattr(lab_app, "serve", lambda app, host, port, threads=1: None)
    monkeypatch.delenv("NORMLAB_TOKEN", raising=False)
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"not sqlite at all " * 100)
    capsys.readouterr()
    status = cli.main(["lab", "--port", "0", "--db", str(bad)])
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"normlab: error: --db '{bad}'")
    assert "is not a normlab progress database" in lines[0]
