"""Helpers for tests that talk to a real lab over TCP: a ``normlab lab`` process, or an app
served by uvicorn in a thread, and its event streams read one event at a time."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from normlab.lab import app as lab_app
from normlab.lab import sse


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_serving(
    proc: subprocess.Popen[Any], base: str, path: str = "/api/experiments", timeout: float = 120
) -> int:
    """Poll ``base + path`` until the server answers; return the HTTP status it answered with.

    The lab starts its helper process (and imports torch) before uvicorn binds its socket, so
    "the process is up" or "its helper is up" does not mean "it accepts connections". Any HTTP
    answer counts, errors included (a guarded server answers 403). Fails if the process exits
    first or nothing answers within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the lab exited with status {proc.returncode} before serving")
        try:
            with urllib.request.urlopen(base + path, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            exc.close()
            return exc.code
        except OSError as exc:
            if time.monotonic() > deadline:
                message = f"the lab did not answer at {base} within {timeout:g} s"
                raise AssertionError(message) from exc
            time.sleep(0.1)


@contextlib.contextmanager
def lab_process(data: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A ``normlab lab --no-warm`` process on a free port, its data in ``data``, its threads
    as ``normlab lab`` sets them (no OpenMP setting of the tests' passes to it); yields its
    base URL and the process once it serves, and ends it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["XDG_DATA_HOME"] = str(data)
    cmd = [sys.executable, "-m", "normlab", "lab", "--port", str(port), "--no-warm"]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_serving(server, base) == 200
        yield base, server
    finally:
        server.terminate()
        server.wait(timeout=60)


def post_experiment(port: int, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    """``POST /api/experiments/NAME`` on the lab at ``port``: its status and JSON answer (an
    HTTP error is an answer too)."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/experiments/{name}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


@contextlib.contextmanager
def serving(app: FastAPI) -> Iterator[int]:
    """``app`` served by uvicorn on a free port of 127.0.0.1, in a thread; yields the port.

    On the way out the live streams end first, as ``serve()`` ends them on Ctrl+C.
    """
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="lab-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        lab_app._end_streams(app)
        server.should_exit = True
        thread.join(timeout=60)
        assert not thread.is_alive(), "the server did not stop"


class EventStream:
    """An open ``GET`` of an event stream: its response, and its events read one by one."""

    def __init__(
        self, port: int, path: str, headers: dict[str, str] | None = None, timeout: float = 60
    ) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.conn.request("GET", path, headers=headers or {})
        self.response = self.conn.getresponse()
        self._events = sse.read_events(self.response.readline)

    def next(self) -> tuple[str, Any]:
        """The next event with data: (its name, its data parsed as JSON)."""
        got = next(self._events, None)
        assert got is not None, "the stream ended"
        return got

    def until(self, name: str) -> Any:
        """The data of the next ``name`` event (the events before it skipped)."""
        while True:
            got, data = self.next()
            if got == name:
                return data

    def close(self) -> None:
        self.conn.close()
