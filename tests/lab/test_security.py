"""Who may talk to the lab: loopback Host names, the token off loopback, same-origin changes.

Each refusal is checked through the real app (TestClient) and then a normal request, to show
the lab keeps serving; the token rule is also checked on a real server bound to 0.0.0.0.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from normlab.lab.app import create_app
from normlab.lab.security import COOKIE, LabGuard, is_loopback, new_token

from .real_server import free_port, wait_until_serving

LAB = "http://127.0.0.1"
TOKEN = "t0k3n-for-tests-only-0123456789"


@pytest.fixture(scope="module")
def local() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url=LAB) as c:
        yield c


@pytest.fixture(scope="module")
def guarded() -> Iterator[TestClient]:
    with TestClient(create_app(token=TOKEN), base_url="http://lab.example:8000") as c:
        yield c


def _refused(r: object, parameter: str) -> None:
    assert r.status_code == 403, r.text  # type: ignore[attr-defined]
    detail = r.json()["detail"]  # type: ignore[attr-defined]
    assert detail["parameter"] == parameter
    assert detail["message"]


def test_loopback_names() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.8.9.10", "localhost", "[::1]", "::1"]))
    assert not any(map(is_loopback, ["0.0.0.0", "10.0.0.2", "lab.example", "", "[::]"]))


def test_new_token_is_long_and_fresh() -> None:
    a, b = new_token(), new_token()
    assert a != b and len(a) >= 40


def test_short_token_refused() -> None:
    with pytest.raises(ValueError, match="token must have at least 16"):
        LabGuard(create_app(), token="short")


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "[::1]:8000"])
def test_loopback_host_served(local: TestClient, host: str) -> None:
    assert local.get("/api/experiments", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "10.1.2.3:8000", ""])
def test_other_host_names_refused_on_loopback(local: TestClient, host: str) -> None:
    """DNS rebinding: a page on another name that resolves to 127.0.0.1 still says its name."""
    _refused(local.get("/", headers={"Host": host}), "host")
    assert local.get("/api/experiments").status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1:9999"},  # another port is another origin
        {"Origin": "https://127.0.0.1"},
        {"Origin": "null"},  # sandboxed iframes and file:// pages
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
@pytest.mark.parametrize(
    "route",
    ["/api/experiments/drift", "/api/run", "/api/exercises/any/submit", "/api/listings/x"],
)
def test_cross_origin_changes_refused(
    local: TestClient, headers: dict[str, str], route: str
) -> None:
    method = "PUT" if route.startswith("/api/listings") else "POST"
    r = local.request(method, route, headers=headers, content=json.dumps({"code": "print(1)"}))
    _refused(r, "origin")
    assert local.get("/api/experiments").status_code == 200


def test_same_origin_post_allowed(local: TestClient) -> None:
    r = local.post(
        "/api/experiments/linear-scale",
        headers={"Origin": LAB, "Sec-Fetch-Site": "same-origin"},
        json={},
    )
    assert r.status_code == 200
    assert r.json()["output_std"] > 0


def test_cross_origin_get_is_only_reading(local: TestClient) -> None:
    """Reads need no Origin check: the browser's same-origin policy hides the answer."""
    assert local.get("/", headers={"Origin": "http://evil.example"}).status_code == 200


@pytest.mark.parametrize("path", ["/", "/lessons/drift", "/api/experiments", "/docs"])
def test_token_required_off_loopback(guarded: TestClient, path: str) -> None:
    _refused(guarded.get(path), "token")
    _refused(guarded.get(path, params={"token": TOKEN[:-1] + "x"}), "token")
    _refused(guarded.get(path, headers={"Authorization": "token wrong"}), "token")


def test_post_without_token_refused(guarded: TestClient) -> None:
    _refused(guarded.post("/api/experiments/linear-scale", json={}), "token")


def test_token_in_url_sets_cookie(guarded: TestClient) -> None:
    guarded.cookies.clear()
    r = guarded.get("/", params={"token": TOKEN})
    assert r.status_code == 200
    assert f"{COOKIE}_8000={TOKEN}" in r.headers["set-cookie"]  # named after the lab's port
    assert "HttpOnly" in r.headers["set-cookie"] and "SameSite=Strict" in r.headers["set-cookie"]
    # the page's own requests now carry the cookie
    assert guarded.get("/api/experiments").status_code == 200
    guarded.cookies.clear()
    _refused(guarded.get("/api/experiments"), "token")


def test_token_header_and_origin(guarded: TestClient) -> None:
    auth = {"Authorization": f"token {TOKEN}"}
    assert guarded.get("/api/experiments", headers=auth).status_code == 200
    r = guarded.post("/api/experiments/linear-scale", headers=auth, json={})
    assert r.status_code == 200
    own = {**auth, "Origin": "http://lab.example:8000"}
    assert guarded.post("/api/experiments/linear-scale", headers=own, json={}).status_code == 200
    evil = {**auth, "Origin": "http://evil.example"}
    _refused(guarded.post("/api/experiments/linear-scale", headers=evil, json={}), "origin")


def test_another_lab_s_cookie_is_not_this_lab_s_token(guarded: TestClient) -> None:
    guarded.cookies.clear()
    _refused(guarded.get("/", headers={"Cookie": f"{COOKIE}_8001={TOKEN}"}), "token")
    assert guarded.get("/", headers={"Cookie": f"{COOKIE}_8000={TOKEN}"}).status_code == 200


@pytest.mark.parametrize(
    "token", ["t\u00f6ken-not-ascii-0123456789", "\u2603" * 20, TOKEN + "\u00e9"]
)
def test_a_non_ascii_token_is_refused_not_a_crash(guarded: TestClient, token: str) -> None:
    _refused(guarded.get("/api/experiments", params={"token": token}), "token")
    header = {"Authorization": f"token {token}".encode()}  # raw UTF-8 bytes on the wire
    _refused(guarded.get("/api/experiments", headers=header), "token")


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:99999",
        "http://127.0.0.1:abc",
        "http://[::1",
        "http://127.0.0.1:8741.evil.example",
    ],
)
def test_a_malformed_origin_is_refused_not_a_crash(local: TestClient, origin: str) -> None:
    r = local.post("/api/experiments/linear-scale", headers={"Origin": origin}, json={})
    _refused(r, "origin")
    assert local.get("/api/experiments").status_code == 200  # and the lab goes on


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""]
)
def test_a_body_that_is_not_json_is_refused_before_it_is_read(
    local: TestClient, content_type: str
) -> None:
    # a page elsewhere can send these without a preflight, and no Origin from older browsers
    headers = {"Content-Type": content_type} if content_type else {}
    r = local.post("/api/run", content=b'{"code": "print(6 * 7)"}', headers=headers)
    assert r.status_code == 415, r.text
    assert r.json()["detail"]["parameter"] == "content-type"
    ok = local.post(
        "/api/experiments/linear-scale",
        content=b"{}",
        headers={"Content-Type": "Application/JSON; charset=utf-8"},
    )
    assert ok.status_code == 200
    assert local.post("/api/experiments/linear-scale").status_code == 200  # no body: defaults


def test_every_answer_says_who_may_frame_it_and_sends_no_referrer(local: TestClient) -> None:
    for r in (local.get("/"), local.get("/api/experiments"), local.get("/", headers={"Host": "x"})):
        assert r.headers["content-security-policy"] == "frame-ancestors 'self'"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert r.headers["x-content-type-options"] == "nosniff"


def test_malformed_cookie_is_no_token(guarded: TestClient) -> None:
    _refused(guarded.get("/", headers={"Cookie": '"; =;; \\'}), "token")


@pytest.mark.slow
def test_real_server_off_loopback_needs_token(tmp_path: os.PathLike[str]) -> None:
    """``normlab lab --host 0.0.0.0`` prints a token URL and refuses requests without it."""
    port = free_port()
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "normlab", "lab", "--host", "0.0.0.0", "--port", str(port)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline() + proc.stdout.readline()
        found = re.search(r"\?token=([A-Za-z0-9_\-]+)", banner)
        assert found, banner
        token = found.group(1)
        base = f"http://127.0.0.1:{port}"
        assert wait_until_serving(proc, base) == 403, "the lab answered without its token"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/api/experiments", timeout=60)
        with refused.value as answer:
            assert answer.code == 403
            assert json.loads(answer.read())["detail"]["parameter"] == "token"
        with urllib.request.urlopen(f"{base}/api/experiments?token={token}", timeout=60) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=120)  # the warm-up stops at its next step: a hang guard
        if proc.stdout is not None:
            proc.stdout.close()
