"""The lab's shared input checks and its answer to every error (normlab.lab.errors)."""

import sqlite3
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from normlab.lab.app import create_app
from normlab.lab.errors import checked_code
from normlab.lab.runner import Runner


def test_checked_code_passes_a_string_up_to_the_limit() -> None:
    assert checked_code("", 3) == ""
    assert checked_code("abc", 3) == "abc"


@pytest.mark.parametrize("value", [None, 3, b"print(1)", ["print(1)"]])
def test_checked_code_refuses_anything_but_a_string(value: object) -> None:
    with pytest.raises(TypeError, match=f"code must be a string, got {type(value).__name__}"):
        checked_code(value, 100)


def test_checked_code_refuses_one_character_too_many() -> None:
    with pytest.raises(ValueError, match="code is 1,001 characters long, the limit is 1,000"):
        checked_code("x" * 1001, 1000)


def _failing(exc: Exception) -> TestClient:
    app = create_app(Runner())

    async def boom() -> None:
        raise exc

    app.add_api_route("/api/boom", boom, methods=["GET"])
    return TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)


@pytest.mark.parametrize(
    "exc", [sqlite3.OperationalError("database is locked"), sqlite3.DatabaseError("disk full")]
)
def test_a_database_that_fails_is_a_503_in_the_lab_s_shape(exc: Exception) -> None:
    with _failing(exc) as c:
        r = c.get("/api/boom")
        assert r.status_code == 503
        assert str(exc) in r.json()["detail"]["message"]
        assert r.headers["referrer-policy"] == "no-referrer"  # through the guard as any answer
        assert c.get("/api/experiments").status_code == 200  # and the lab goes on


def test_an_unexpected_error_is_a_500_in_the_lab_s_shape_never_plain_text() -> None:
    with _failing(RuntimeError("something broke")) as c:
        r = c.get("/api/boom")
        assert r.status_code == 500 and r.headers["content-type"] == "application/json"
        assert r.json()["detail"] == {
            "parameter": None,
            "message": "the lab failed on this request: RuntimeError: something broke",
        }
        assert c.get("/api/experiments").status_code == 200


@pytest.fixture(scope="module")
def lab() -> Iterator[TestClient]:
    with TestClient(create_app(Runner()), base_url="http://127.0.0.1") as c:
        yield c


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/api/listings/mine", "GET, PUT"),  # two routes: the router named only PUT
        ("DELETE", "/api/exercises/bn-backward/code", "GET, PUT"),
        ("OPTIONS", "/api/experiments", "GET"),
        ("GET", "/api/run", "POST"),
        ("PUT", "/api/experiments/drift", "POST"),
    ],
)
def test_a_method_a_path_does_not_take_is_405_naming_every_one_it_does(
    lab: TestClient, method: str, path: str, allow: str
) -> None:
    """``Allow`` lists every method of every route at the path (issue 32, finding 8), and the
    answer is in the lab's shape, naming them."""
    r = lab.request(method, path)
    assert r.status_code == 405 and r.headers["allow"] == allow
    assert r.json()["detail"] == {
        "parameter": None,
        "message": f"{method} is not allowed on {path}: use {allow}",
    }
    for other in allow.split(", "):  # and each one it names is taken (not a 405)
        assert lab.request(other, path).status_code != 405


@pytest.mark.parametrize("path", ["/api/nothing", "/nothing", "/static/nothing.js"])
def test_no_such_path_is_404_in_the_lab_s_shape(lab: TestClient, path: str) -> None:
    r = lab.get(path)
    assert r.status_code == 404 and r.headers["content-type"] == "application/json"
    assert r.json()["detail"]["parameter"] is None and path in r.json()["detail"]["message"]
