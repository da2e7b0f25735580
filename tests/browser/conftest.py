"""Browser fixtures: the real lab server in a subprocess, and a guarded headless Chromium.

Every page opened through the ``page`` (or ``guarded_page``) fixture fails its test on a console
error, an uncaught page error, or any request to a host other than 127.0.0.1 (such requests are
aborted). A ``page`` opens in the worker's kept lab context, which a test leaves as it found it
(:func:`lab_context`, ``tests/browser/test_guard.py``); a ``guarded_page`` in a context of its own.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from labpage import ALLOWED_HOST, CHROMIUM, CHROMIUM_ARGS, Guard, LabContext, free_port, serving


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


VIEWPORT = {"width": 1280, "height": 900}


def _guard(pg: Any, guard: Guard) -> Any:
    """``pg`` with its console and page errors going to ``guard``, which it carries (``.guard``)."""
    pg.set_default_timeout(120_000)
    pg.on("console", lambda m: guard.console.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: guard.errors.append(str(e)))
    pg.guard = guard
    return pg


def _route_guarded(context: Any, current: dict[str, Guard], origins: set[str]) -> None:
    """Abort every request of ``context`` to a host other than 127.0.0.1, noting it in the guard
    of the test under way (``current["guard"]``); note each origin asked for in ``origins``."""

    def route(r: Any) -> None:
        parts = urlsplit(r.request.url)
        if parts.hostname != ALLOWED_HOST:
            current["guard"].foreign.append(r.request.url)
            r.abort()
        else:
            origins.add(f"{parts.scheme}://{parts.netloc}")
            r.continue_()

    context.route("**/*", route)


@pytest.fixture
def guarded_page(browser: Any) -> Iterator[Any]:
    """A fresh page in a fresh context, guarded (checked at teardown), with no lab server behind
    it: for pages another server serves (JupyterLab, marimo), which keep state in the browser."""
    context = browser.new_context(viewport=VIEWPORT)
    guard = Guard()
    _route_guarded(context, {"guard": guard}, set())
    try:
        yield _guard(context.new_page(), guard)
        guard.check()
    finally:
        context.close()


@pytest.fixture(scope="session")
def lab_context(browser: Any) -> Iterator[LabContext]:
    """One context for the lab's pages (:func:`page`), kept while a worker runs.

    Each test still gets a new page, and :meth:`LabContext.forget` clears what a page can keep
    between tests (cookies, storage, the HTTP cache). What stays is the renderer process: the
    browser runs with ``--process-per-site``, and a page that stays open on the labs' site
    (``labpage.KEEPER``: nothing runs there) keeps that process alive, so each test's page opens in
    it with plotly's code already compiled and the fonts loaded, where a page in a fresh context
    starts a new renderer (``benchmarks/browser_pages.py`` compares the two). Nothing a page
    shows or a test reads depends on it."""
    context = browser.new_context(viewport=VIEWPORT)
    lab = LabContext(context)
    lab.keep()
    _route_guarded(context, lab.current, lab.origins)
    try:
        yield lab
    finally:
        context.close()


@pytest.fixture
def page(lab_context: LabContext, server: str) -> Iterator[Any]:
    """A fresh guarded page (console errors, page errors and requests off 127.0.0.1 fail the
    test at teardown) in the lab's context (:func:`lab_context`), with the lab server running
    (the suite's, or the one a module makes its ``server``)."""
    guard = lab_context.current["guard"] = Guard()
    try:
        yield _guard(lab_context.context.new_page(), guard)
        guard.check()
    finally:
        lab_context.forget()
