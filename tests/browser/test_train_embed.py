"""The live training view inside a lesson: a frame of /train/embed with its settings preset.

The lessons' lab (conftest's ``server``, warmed up as ``normlab lab`` starts) serves them; the
guarded ``page`` fails on a console error or a request that leaves 127.0.0.1, the frame's
included.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

pytestmark = pytest.mark.browser

SIDE = "(k) => ({ ...document.querySelector(`.nl-train-side[data-side='${k}']`).dataset })"
RUN = "() => document.querySelector('.nl-train').nlPage.link.run"


def _frame(page: Any, server: str, lesson: str) -> tuple[Any, Any]:
    """The lesson's training frame, scrolled to and loaded: (its element, its frame)."""
    page.goto(f"{server}/lessons/{lesson}")
    box = page.locator("iframe.nl-train-frame")
    assert box.count() == 1
    box.scroll_into_view_if_needed()
    frame = box.element_handle().content_frame()
    assert frame is not None
    frame.wait_for_load_state()
    return box, frame


def _ready(frame: Any, key: str, step: int) -> None:
    frame.wait_for_function(
        "([k, n]) => { const s = document.querySelector(`.nl-train-side[data-side='${k}']`)"
        "?.dataset; return !!s && s.state === 'ready' && s.step === String(n); }",
        arg=[key, step],
    )


def _setting(frame: Any, key: str, name: str) -> str:
    box = frame.locator(
        f".nl-train-side[data-side='{key}'] :is(input, select)[data-param='{name}']"
    ).first
    value: str = box.input_value()
    return value


def test_the_initialization_lesson_trains_zeros_against_he_live(page: Any, server: str) -> None:
    box, frame = _frame(page, server, "initialization")
    _ready(frame, "a", 0)
    _ready(frame, "b", 0)
    assert _setting(frame, "a", "init") == "zeros" and _setting(frame, "b", "init") == "he"
    assert _setting(frame, "b", "norm") == "none"  # the preset, not compare's BatchNorm contrast
    setup = frame.evaluate(RUN)["setup"]
    assert (setup["a"]["init"], setup["b"]["init"], setup["b"]["norm"]) == ("zeros", "he", "none")
    assert not frame.locator("[data-flag='compare']").is_visible()  # hide=compare
    assert frame.locator("header.site").count() == 0  # the view alone, no site around it
    frame.locator(".nl-train-bar button[data-action='play']").click()
    for key in ("a", "b"):
        frame.wait_for_function(
            "(k) => Number(document.querySelector(`.nl-train-side[data-side='${k}']`)"
            ".dataset.step) >= 5",
            arg=key,
        )
    frame.locator(".nl-train-bar button[data-action='pause']").click()
    # the frame is as tall as the view it shows: nothing cut, no second scroll bar
    content = frame.evaluate("() => document.body.getBoundingClientRect().height")
    page.wait_for_function(
        "(h) => Math.abs(document.querySelector('iframe.nl-train-frame')"
        ".getBoundingClientRect().height - h) < 8",
        arg=content,
    )
    assert content > 600
    # the caption's link opens the same setup on the full page, and so does the share link
    link = urlsplit(box.locator("xpath=..").locator("a").get_attribute("href") or "")
    assert link.path == "/train"
    assert parse_qs(link.query)["init"] == ["zeros"] and parse_qs(link.query)["b.init"] == ["he"]
    frame.locator(".nl-share summary").click()
    shared = urlsplit(frame.locator("input.nl-share-link").input_value())
    assert shared.path == "/train" and parse_qs(shared.query)["compare"] == ["1"]


def test_the_bn_lesson_trains_exercise_3_live(page: Any, server: str) -> None:
    _, frame = _frame(page, server, "bn-from-scratch")
    _ready(frame, "a", 0)
    _ready(frame, "b", 0)
    setup = frame.evaluate(RUN)["setup"]  # what the server trains
    assert (setup["a"]["norm"], setup["b"]["norm"]) == ("none", "batch")
    for key in ("a", "b"):
        assert (setup[key]["init"], setup[key]["lr"], setup[key]["depth"]) == ("he", 2.0, 4)
    frame.locator(".nl-train-bar button[data-action='step']").click()
    _ready(frame, "a", 1)
    _ready(frame, "b", 1)
    a, b = frame.evaluate(SIDE, "a"), frame.evaluate(SIDE, "b")
    assert a["step"] == b["step"] == "1"  # in lockstep
