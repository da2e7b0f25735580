"""Bodies that JSON allows but the lab cannot use are a 422 in the lab's shape, never a 500
(issue 32, finding 7), and a refused body records nothing.

Three kinds: a body nested far deeper than any route reads (Python's parser runs out of stack
at about a thousand levels and raised ``RecursionError``), an integer longer than any allowed
value (Python refuses to parse one of more than 4,300 digits, ``ValueError``), and a lone
surrogate such as ``"\\ud800"``, which JSON's ``\\u`` escapes can write but which is no text
(UTF-8 cannot encode it: the progress database raised ``UnicodeEncodeError``). Each is sent to
every route that reads a body.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from normlab.lab.app import create_app
from normlab.lab.errors import MAX_JSON_DEPTH, MAX_JSON_DIGITS

LAB = "http://127.0.0.1"

WRITE_ROUTES = [
    ("POST", "/api/experiments/drift"),
    ("POST", "/api/run"),
    ("PUT", "/api/listings/mine"),
    ("PUT", "/api/exercises/bn-backward/code"),
    ("POST", "/api/exercises/bn-backward/submit"),
    ("POST", "/api/train/AAAAAAAAAAAAAAAA/control"),
    ("POST", "/api/sweeps"),
]
"""Every route that reads a JSON body (``/api/train/.../control`` reads it before it looks the
run up, so an unknown run shows the body's answer)."""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder: Path = tmp_path_factory.mktemp("odd")
    app = create_app(db_path=folder / "progress.sqlite3", sweeps_store=folder / "sweeps.sqlite3")
    with TestClient(app, base_url=LAB, raise_server_exceptions=False) as c:
        yield c


def _send(client: TestClient, method: str, path: str, raw: str) -> dict[str, object]:
    r = client.request(method, path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, (path, r.status_code, r.text[:300])
    detail: dict[str, object] = r.json()["detail"]
    assert set(detail) == {"parameter", "message"}
    return detail


def _deep(depth: int) -> str:
    return '{"code": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize(("method", "path"), WRITE_ROUTES)
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 30_000])
def test_a_body_nested_too_deep_is_422(
    client: TestClient, method: str, path: str, depth: int
) -> None:
    detail = _send(client, method, path, _deep(depth))
    assert f"nested deeper than {MAX_JSON_DEPTH}" in str(detail["message"])
    assert client.get("/api/experiments").status_code == 200  # and the lab goes on


@pytest.mark.parametrize(("method", "path"), WRITE_ROUTES)
@pytest.mark.parametrize("digits", [MAX_JSON_DIGITS + 1, 5_000])
def test_an_integer_too_long_is_422(
    client: TestClient, method: str, path: str, digits: int
) -> None:
    detail = _send(client, method, path, '{"depth": ' + "9" * digits + "}")
    assert f"more than {MAX_JSON_DIGITS} digits" in str(detail["message"])


def test_the_deepest_and_longest_allowed_still_parse(client: TestClient) -> None:
    """The bounds refuse only past them: a body at the depth and digit limits reaches the
    route, which answers for its own reasons (a list is no code; the value is out of range)."""
    depth = '{"code": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}"
    json_type = {"content-type": "application/json"}
    r = client.put("/api/listings/mine", content=depth, headers=json_type)
    assert r.status_code == 422 and "code must be a string" in r.json()["detail"]["message"]
    longest = '{"depth": ' + "9" * MAX_JSON_DIGITS + "}"
    r = client.post("/api/experiments/drift", content=longest, headers=json_type)
    assert r.status_code == 422 and r.json()["detail"]["parameter"] == "depth"


@pytest.mark.parametrize(("method", "path"), WRITE_ROUTES)
@pytest.mark.parametrize("key", ["depth", "lr", "code", "answer", "speed", "action"])
def test_the_longest_integer_allowed_is_refused_by_the_route_not_a_500(
    client: TestClient, method: str, path: str, key: str
) -> None:
    body = f'{{"{key}": {"9" * MAX_JSON_DIGITS}}}'
    r = client.request(method, path, content=body, headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, (path, key, r.status_code, r.text[:300])
    assert set(r.json()["detail"]) == {"parameter", "message"}


@pytest.mark.parametrize(("method", "path"), WRITE_ROUTES)
def test_a_lone_surrogate_is_422_naming_its_key(client: TestClient, method: str, path: str) -> None:
    detail = _send(client, method, path, '{"code": "print(1) # \\ud800"}')
    assert detail["parameter"] == "code"
    assert "U+D800" in str(detail["message"])


def test_code_that_is_not_text_records_nothing(client: TestClient) -> None:
    before = client.get("/api/progress").json()
    for method, path, key in [
        ("PUT", "/api/listings/mine", "code"),
        ("PUT", "/api/exercises/bn-backward/code", "code"),
        ("POST", "/api/exercises/bn-backward/submit", "answer"),
    ]:
        code = "def f():\\n    return 1  # \\udfff"
        _send(client, method, path, f'{{"{key}": "{code}"}}')
    assert client.get("/api/progress").json() == before  # no listing, no code, no attempt
