"""Helpers for tests that start a real ``normlab lab`` process and talk to it over TCP."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any


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
