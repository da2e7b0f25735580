"""Shared pieces of the browser tests: where things are, the API seen from the test, and what
guards their pages (:class:`Guard`, and the kept context the ``page`` fixture opens them in)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
SCREENSHOTS_WANTED = os.environ.get("NORMLAB_SCREENSHOTS", "") not in ("", "0")
"""Whether the browser tests save their screenshots (``make screenshots`` sets it)."""
CHROMIUM = os.environ.get("NORMLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # One renderer process for a site's pages in a context, not one each: the pages of the
    # suite's lab context share the process that a kept page holds (conftest.lab_context).
    "--process-per-site",
]
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 60.0
"""How long a server has to stop after SIGTERM before it is killed (a kernel or an open stream
may take a while on a loaded machine; a server that stops at once is not waited for)."""
POLL_S = 0.1
ALLOWED_HOST = "127.0.0.1"

# Training widgets start from fewer steps so every change answers quickly on a small CI box
# (and their scripts run within the playground's time limit); starting from the address is
# itself part of what is tested.
PRESETS = {
    "initialization": (
        "?symmetry.steps=8&init-train.steps=12&init-compare.depth=12&error-surface.steps=40"
    ),
    "bn-from-scratch": (
        "?bn-lr.steps=12&bn-from-scratch.parity_batches=2"
        "&bn-lr-sweep.points=3&bn-lr-sweep.steps=30&bn-lr-sweep.tail=3"
    ),
    "bn-training": "?bn-regularization.epochs=4&bn-lr.steps=12",
    # the grid trains a stack per cell: a small grid, narrow stacks and a few steps here
    "edge-of-chaos": (
        "?edge-of-chaos.w_points=4&edge-of-chaos.b_points=2&edge-of-chaos.width=128"
        "&edge-of-chaos.steps=3"
    ),
    "residual-normalization": (
        "?bn-gradient-explosion.depth=16&bn-gradient-explosion.width=64"
        "&bn-gradient-explosion.batch=32&residual-stream.depth=12&residual-stream.d_model=32"
    ),
    # the coordinate check trains 2 x (5 widths + 6 depths) nets: fewer, narrower ones here
    "width-depth": "?coord-check.max_width=256&coord-check.max_depth=8&coord-check.depth_width=64",
}


def free_port() -> int:
    """A TCP port free on ALLOWED_HOST (the OS picks it; the server started next binds it)."""
    with socket.socket() as s:
        s.bind((ALLOWED_HOST, 0))
        port: int = s.getsockname()[1]
        return port


def answers(url: str, timeout: float = 2) -> bool:
    """Whether GET ``url`` answers 200 within ``timeout`` seconds (no server yet: False)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bool(r.status == 200)
    except OSError:  # refused, reset, timed out, or an HTTP error (URLError is an OSError)
        return False


@contextmanager
def serving(
    cmd: list[str],
    probe: str,
    log: Path,
    env: dict[str, str],
    cwd: Path = ROOT,
    stop_s: float = STOP_GRACE_S,
    must_stop: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run the server ``cmd`` for the block, entered once ``probe`` answers 200.

    The probe is polled (every POLL_S, waiting on the process meanwhile) for up to
    START_TIMEOUT_S; the server's output goes to ``log``, whose end the error shows if it exits
    or never answers. At the end: SIGTERM, then SIGKILL after ``stop_s`` seconds (an error after
    the kill if ``must_stop``: a server that hangs on shutdown fails the test).
    """
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(probe):
            if time.monotonic() > deadline:
                why = f"did not answer at {probe} within {START_TIMEOUT_S:g} s"
            else:
                try:
                    code = proc.wait(timeout=POLL_S)
                    why = f"exited with {code} before answering at {probe}"
                except subprocess.TimeoutExpired:
                    continue
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the server {cmd[1:4]} {why}; the end of {log}:\n{tail}")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            if must_stop:
                raise


@contextmanager
def lab_serving(app: str, probe: str, data: Path, *argv: str) -> Iterator[str]:
    """The base URL of ``serve(APP)`` run in its own process on a free port, entered once
    ``probe`` (a path) answers: a lab made by ``app`` (a ``create_app(...)`` call that may read
    ``sys.argv[1:]``, which are ``argv``), one torch thread, its data and log in ``data``.

    Without the lessons' warm-up of ``normlab lab``, for pages that do not need it; it must
    stop on SIGTERM (:func:`serving` with ``must_stop``).
    """
    port = free_port()
    base = f"http://{ALLOWED_HOST}:{port}"
    code = (
        "import sys; from normlab.lab.app import create_app, serve; "
        f"serve({app}, {ALLOWED_HOST!r}, {port})"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "XDG_DATA_HOME": str(data)}
    cmd = [sys.executable, "-c", code, *argv]
    with serving(cmd, base + probe, data / "server.log", env, must_stop=True):
        yield base


def screenshot(target: Any, name: str, **options: Any) -> None:
    """Save a screenshot of ``target`` (a page or an element) as ``SCREENSHOTS / name`` when
    :data:`SCREENSHOTS_WANTED`: pictures for a person to look at, which no test reads, and a
    full-page one of a long lesson costs Chromium about a second, so a plain run takes none."""
    if not SCREENSHOTS_WANTED:
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(SCREENSHOTS / name), **options)


def api(base: str, name: str, params: dict[str, Any]) -> tuple[int, Any]:
    """POST the experiment API from the test side: (status, JSON body)."""
    req = urllib.request.Request(
        f"{base}/api/experiments/{name}",
        data=json.dumps(params).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def registry(base: str) -> Any:
    """GET /api/experiments."""
    with urllib.request.urlopen(f"{base}/api/experiments", timeout=30) as r:
        return json.loads(r.read())


# A right answer to the he-derivation exercise (measure the kept fraction, derive the std).
HE_RIGHT = """import math

import torch

def kept_fraction(activation):
    z = torch.randn(10**6)
    return ((activation(z) ** 2).mean() / (z**2).mean()).item()

def init_std(fan_in, kept):
    return math.sqrt(1.0 / (kept * fan_in))
"""


@dataclass
class Guard:
    """What went wrong on a page: console errors, page errors, requests that left 127.0.0.1."""

    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    expected_422: int = 0

    def expect_422(self) -> None:
        """The test is about to cause one 422 on purpose (Chromium logs it as a console error)."""
        self.expected_422 += 1

    def check(self) -> None:
        assert not self.foreign, f"requests outside {ALLOWED_HOST}: {self.foreign}"
        assert not self.errors, f"page errors: {self.errors}"
        rejected = [m for m in self.console if "status of 422" in m]
        others = [m for m in self.console if m not in rejected]
        assert not others, f"console errors: {others}"
        assert len(rejected) <= self.expected_422, f"unexpected 422 answers: {rejected}"


KEEPER = f"http://{ALLOWED_HOST}/"
"""Where the kept page of a :class:`LabContext` stays: an empty document that the page's own
route answers (no server behind it), on the site of every lab the tests start (a site is its
host: the port makes another origin, not another site)."""


@dataclass
class LabContext:
    """The browser context the lab's pages open in, kept for a worker's session, and what its
    tests have touched (the guard of the test under way, the origins asked for).

    A kept page (:data:`KEEPER`) holds the site's renderer process, so that every test's page
    opens in it (``--process-per-site``) with plotly compiled and the fonts loaded. Should that
    renderer crash, it takes the kept page with it: the next :meth:`forget` opens another."""

    context: Any
    current: dict[str, Guard] = field(default_factory=dict)
    origins: set[str] = field(default_factory=set)
    keeper: Any = None
    cdp: Any = None
    crashed: bool = False

    def keep(self) -> None:
        """Open the kept page, and the DevTools session that clears storage through it."""
        self.keeper = self.context.new_page()
        self.keeper.route(KEEPER, lambda r: r.fulfill(body="", content_type="text/html"))
        self.keeper.goto(KEEPER)
        self.keeper.on("crash", lambda _: setattr(self, "crashed", True))
        self.cdp = self.context.new_cdp_session(self.keeper)
        self.crashed = False

    def forget(self) -> None:
        """Leave nothing for the next test: every page but the keeper closed, and the cookies,
        the storage of every origin asked for, and the HTTP cache cleared."""
        for pg in self.context.pages:
            if pg is not self.keeper or self.crashed:
                pg.close()
        if self.crashed:
            self.keep()
        self.context.clear_cookies()
        for origin in sorted(self.origins):
            self.cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
        self.origins.clear()
        self.cdp.send("Network.clearBrowserCache")
