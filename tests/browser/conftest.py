"""Browser fixtures: the real lab server in a subprocess, and a guarded headless Chromium.

Every page opened through the ``page`` (or ``guarded_page``) fixture fails its test on a console
error, an uncaught page error, or any request to a host other than 127.0.0.1 (such requests are
aborted).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from labpage import ALLOWED_HOST, CHROMIUM, CHROMIUM_ARGS, free_port, serving


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a real ``normlab lab`` server on a free port.

    Its progress database lives in a fresh temporary data folder, never the user's.
    """
    port = free_port()
    base = f"http://{ALLOWED_HOST}:{port}"
    # One torch thread per run: the runs are tiny, and on a busy 2-core machine two intra-op
    # threads per run make training several times slower.
    data = tmp_path_factory.mktemp("lab-data")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "XDG_DATA_HOME": str(data),
    }
    # --no-warm: a page computes what it shows on its first visit, or reads it from the answers
    # store the suite's labs share; the workers' labs, all started at once, would otherwise each
    # compute every lesson at the same moment (the warm-up is tested in tests/lab/test_api.py).
    cli = [sys.executable, "-m", "normlab", "lab", "--host", ALLOWED_HOST, "--port", str(port)]
    cli.append("--no-warm")
    with serving(cli, f"{base}/api/experiments", data / "server.log", env, stop_s=10):
        yield base


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None:
        pytest.skip(f"no Chromium at {CHROMIUM} (set NORMLAB_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


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


@pytest.fixture
def guarded_page(browser: Any) -> Iterator[Any]:
    """A fresh page whose console, errors and requests are guarded (checked at teardown), with
    no lab server behind it: for pages another server serves (JupyterLab, marimo)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    guard = Guard()

    def route(r: Any) -> None:
        url = r.request.url
        if urlsplit(url).hostname != ALLOWED_HOST:
            guard.foreign.append(url)
            r.abort()
        else:
            r.continue_()

    context.route("**/*", route)
    pg = context.new_page()
    pg.set_default_timeout(120_000)
    pg.on("console", lambda m: guard.console.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: guard.errors.append(str(e)))
    pg.guard = guard
    try:
        yield pg
        guard.check()
    finally:
        context.close()


@pytest.fixture
def page(guarded_page: Any, server: str) -> Any:
    """A guarded page (:func:`guarded_page`), with the lab server running."""
    return guarded_page
