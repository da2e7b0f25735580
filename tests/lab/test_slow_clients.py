"""Slow clients cannot keep a normal one out of a real ``normlab lab`` (issue 32, finding 5).

1,100 slow connections once took every descriptor the lab had; asyncio, failing to accept, then
logged 58 MB in 40 s. Here the lab runs with 256 descriptors, and 270 connections stall in the
middle of a request: 250 after half a request head, 20 after a head and a tenth of the body it
announces. A normal client then gets a page and an API answer at once, every stalled connection
is closed by the lab (its socket reaches end-of-file) within the read timeout, and the lab's log
stays a few kilobytes. The log's filter, which keeps a flood of one complaint to a few lines,
is tested on its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import selectors
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from normlab.lab import app as lab_app
from normlab.lab.app import LOG_REPEATS_PER_MINUTE, REQUEST_READ_TIMEOUT_S

from .real_server import free_port, wait_until_serving

DESCRIPTORS = 256
"""The lab's descriptor limit here: fewer than the stalled connections, as in the finding."""
SLOW_HEADS, SLOW_BODIES = 250, 20
PROMPT_S = 5.0
"""How long the normal client waits for each answer (the lab answers a page in milliseconds)."""
LOG_BYTES = 10_000


@contextlib.contextmanager
def lab_with_few_descriptors(data: Path) -> Iterator[tuple[str, Path]]:
    """A ``normlab lab --no-warm`` limited to :data:`DESCRIPTORS` open files; yields its base
    URL and the file its stderr goes to, and ends it."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    log = data / "stderr.txt"
    port = free_port()
    env = {**os.environ, "XDG_DATA_HOME": str(data), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "normlab", "lab", "--port", str(port), "--no-warm"]
    with log.open("wb") as stderr:
        server = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, hard)),
        )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_serving(server, base) == 200
        yield base, log
    finally:
        server.kill()  # terminate() would wait for the stalled requests
        server.wait(timeout=60)


def _stall(port: int, data: bytes) -> socket.socket:
    """A connection that sends ``data`` and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=PROMPT_S)
    sock.sendall(data)
    return sock


def _wait_for_end_of_file(socks: list[socket.socket], timeout: float) -> list[socket.socket]:
    """Read each socket until the lab closes it or ``timeout`` seconds pass; the ones still
    open then."""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        while selector.get_map() and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(timeout=left):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    closed = sock.recv(65536) == b""
                except ConnectionResetError:
                    closed = True
                if closed:
                    selector.unregister(sock)
        return [sock for sock in socks if sock in selector.get_map()]


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=PROMPT_S) as response:
        response.read()
        return int(response.status)


@pytest.mark.serial  # "at once" and "within the timeout" are times on the clock
def test_slow_clients_are_closed_and_a_normal_client_is_served(tmp_path: Path) -> None:
    with lab_with_few_descriptors(tmp_path) as (base, log):
        port = int(base.rsplit(":", 1)[1])
        head = b"GET / HTTP/1.1\r\nHost: lab\r\nAccept: text/html\r\n"  # no blank line: half
        post = (
            b"POST /api/experiments/linear-scale HTTP/1.1\r\nHost: lab\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{" + b" " * 99
        )
        slow = [_stall(port, head) for _ in range(SLOW_HEADS)]
        slow += [_stall(port, post) for _ in range(SLOW_BODIES)]
        try:
            assert _get(base + "/") == 200
            assert _get(base + "/api/experiments") == 200
            still_open = _wait_for_end_of_file(slow, REQUEST_READ_TIMEOUT_S + 20)
            assert len(still_open) == 0, f"{len(still_open)} slow connections still open"
            assert _get(base + "/api/experiments") == 200
        finally:
            for sock in slow:
                sock.close()
        with log.open("rb") as written:
            assert log.stat().st_size < LOG_BYTES, written.read(2000).decode(errors="replace")


def test_a_repeated_complaint_is_logged_a_few_times_a_minute() -> None:
    """asyncio's complaint, 2048 times, as it logs it in one second without descriptors; the
    next minute it is logged again."""
    now = [0.0]
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    repeat_limit = lab_app._RepeatLimit(clock=lambda: now[0])
    logger = logging.getLogger("normlab.test.flood")
    logger.propagate = False
    logger.addHandler(handler)
    logger.addFilter(repeat_limit)
    try:
        for _ in range(2048):
            logger.error("socket.accept() out of system resource\nsocket: <fd=9>")
        logger.error("another complaint")
        now[0] = 60.0
        logger.error("socket.accept() out of system resource\nsocket: <fd=9>")
    finally:
        logger.removeFilter(repeat_limit)
        logger.removeHandler(handler)
    lines = [record.getMessage().partition("\n")[0] for record in records]
    assert lines.count("socket.accept() out of system resource") == LOG_REPEATS_PER_MINUTE + 1
    assert lines.count("another complaint") == 1
