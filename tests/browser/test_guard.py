"""The browser fixtures themselves: the kept lab context hands each test a page as fresh as one
in a new context, and its guard still catches a request that leaves 127.0.0.1."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from labpage import Guard, LabContext

pytestmark = pytest.mark.browser

KEEP = """async () => {
  document.cookie = "kept=1; path=/";
  localStorage.setItem("kept", "1");
  sessionStorage.setItem("kept", "1");
  await new Promise((done) => {
    const open = indexedDB.open("kept", 1);
    open.onupgradeneeded = () => open.result.createObjectStore("s");
    open.onsuccess = () => { open.result.close(); done(); };
  });
}"""
KEPT = """async () => ({
  cookie: document.cookie,
  local: localStorage.length,
  session: sessionStorage.length,
  databases: (await indexedDB.databases()).map((d) => d.name),
})"""


def test_a_page_leaves_nothing_to_the_next_test(lab_context: LabContext, server: str) -> None:
    """Cookies, local and session storage and IndexedDB set by one test's page are gone for the
    next test's, on the same origin and in the same renderer."""
    first = lab_context.context.new_page()
    first.goto(f"{server}/static/favicon.svg")
    first.evaluate(KEEP)
    assert first.evaluate(KEPT) == {
        "cookie": "kept=1",
        "local": 1,
        "session": 1,
        "databases": ["kept"],
    }
    lab_context.forget()
    assert lab_context.context.pages == [lab_context.keeper]  # the test's pages are closed
    second = lab_context.context.new_page()
    try:
        second.goto(f"{server}/static/favicon.svg")
        assert second.evaluate(KEPT) == {"cookie": "", "local": 0, "session": 0, "databases": []}
    finally:
        lab_context.forget()


def test_a_request_off_127_0_0_1_is_aborted_and_noted(lab_context: LabContext, server: str) -> None:
    """The kept context's route notes a foreign request in the guard of the test under way."""
    guard = lab_context.current["guard"] = Guard()
    pg = lab_context.context.new_page()
    try:
        pg.goto(f"{server}/static/favicon.svg")
        failed = pg.evaluate("() => fetch('http://example.com/x').then(() => 0, () => 1)")
        assert failed == 1
        assert guard.foreign == ["http://example.com/x"]
    finally:
        lab_context.forget()


def test_a_crashed_renderer_leaves_the_next_test_a_working_page(
    browser: Any, lab_context: LabContext, server: str
) -> None:
    """A renderer that dies (here killed, as the kernel's OOM killer would) takes the kept page
    with it, since they share the process; the next test still gets a page that loads, and a
    kept page again."""
    first = lab_context.context.new_page()
    first.goto(f"{server}/static/favicon.svg")
    keeper = lab_context.keeper
    processes = browser.new_browser_cdp_session().send("SystemInfo.getProcessInfo")
    with first.expect_event("crash"):
        for p in processes["processInfo"]:
            if p["type"] == "renderer":  # this worker's browser: only this test's pages
                os.kill(p["id"], signal.SIGKILL)
    lab_context.forget()
    assert lab_context.keeper is not keeper and not lab_context.crashed
    assert lab_context.context.pages == [lab_context.keeper]
    second = lab_context.context.new_page()
    try:
        assert second.goto(f"{server}/static/favicon.svg").status == 200
    finally:
        lab_context.forget()
