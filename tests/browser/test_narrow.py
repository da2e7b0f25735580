"""The lab on a phone held upright (390 px wide), and the same pages at 1280 px (what each
means: tests/browser/fit.py; the lessons are checked so where tests/browser/test_lessons.py
opens them). A table stacked at 390 px labels every value. On /train the Play/Pause bar stays
on screen (sticky) and the decision boundary comes right after it.
"""

from __future__ import annotations

from typing import Any

import pytest
from fit import (
    BOXES,
    LAPTOP,
    OVERFLOWING,
    PHONE,
    SETTLED,
    check_fits_a_phone,
    check_laid_out_on_a_laptop,
)
from lab_traces import ALL_SETTLED
from labpage import screenshot

pytestmark = pytest.mark.browser

PAGES = ["/", "/train", "/train/embed", "/playground", "/watch", "/docs"]
"""The pages without lessons (each lesson is checked so by tests/browser/test_lessons.py)."""

TRAIN_DRAWN = """() => [...document.querySelectorAll('.nl-train-side:not([hidden])')]
  .every((s) => s.dataset.statsDrawn !== undefined)"""
"""JS: every side of a training view has drawn its layers' figures and table (if any)."""


def _settle(page: Any) -> None:
    page.wait_for_function(ALL_SETTLED)  # every widget drawn (none on most pages)
    page.wait_for_function(TRAIN_DRAWN)
    page.evaluate(SETTLED)


@pytest.mark.parametrize("path", PAGES)
def test_every_page_fits_a_phone_and_is_unchanged_on_a_laptop(
    page: Any, server: str, path: str
) -> None:
    """At 390 px no box of numbers is wider than itself, and no page scrolls sideways; the same
    page resized to 1280 px has no table stacked, no formula broken, output on its lines."""
    page.set_viewport_size(PHONE)
    page.goto(f"{server}{path}", wait_until="load")
    _settle(page)
    check_fits_a_phone(page, path)
    check_laid_out_on_a_laptop(page, path)


def test_a_stacked_table_labels_every_value(page: Any, server: str) -> None:
    """A stacked row shows each value after its column's header; the table's text is as before."""
    page.set_viewport_size(PHONE)
    page.goto(f"{server}/lessons/doctor", wait_until="load")
    _settle(page)
    tables = page.locator('.nl-widget .nl-table-block > table[data-fit="stack"]')
    assert tables.count() >= 1, "the doctor's diagnosis table is not stacked at 390 px"
    table = tables.first
    heads = table.locator("thead th").evaluate_all("hs => hs.map((h) => h.textContent.trim())")
    first = table.locator("tbody tr").first
    labels = first.evaluate("r => [...r.children].map((c) => c.dataset.label)")
    assert labels == heads
    shown = first.evaluate(
        "r => [...r.children].map((c) => getComputedStyle(c, '::before').content)"
    )
    assert shown == [f'"{h}"' for h in heads]  # the label is drawn, not only stored
    assert table.locator("thead").evaluate("h => h.getBoundingClientRect().height") <= 1


def _edge_darkness(png: bytes) -> tuple[float, float]:
    """How much darker than the paper a box is near its left and right edges (0 to 1: the
    darkest of the 12 px columns next to each edge), in a screenshot of the box with its
    content hidden: what is left is its background, and the shadows on it."""
    import io

    import matplotlib.image
    import numpy as np

    rgb = matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3].mean(axis=2)  # (H, W)
    paper = float(np.median(rgb))  # most of a formula's box is paper
    columns = np.median(rgb, axis=0)  # (W,)
    left, right = float(columns[:12].min()), float(columns[-12:].min())
    return paper - left, paper - right


def test_a_box_that_scrolls_sideways_shows_it(page: Any, server: str) -> None:
    """At 390 px, a box whose content is wider than itself (none of the lessons' boxes is, now:
    here one is made so) scrolls inside itself, and a shadow marks each edge that has more
    beyond it: the right edge at first, the left one once scrolled to the end; a box that fits
    shows none."""
    page.set_viewport_size(PHONE)
    page.goto(f"{server}/lessons/drift", wait_until="load")
    _settle(page)
    fits, wide = page.locator(".nl-math-block").first, page.locator(".nl-math-block").nth(1)
    assert fits.evaluate("b => b.scrollWidth <= b.clientWidth")
    hide = "b => b.querySelectorAll('*').forEach(e => { e.style.visibility = 'hidden'; })"
    fits.evaluate(hide)
    assert max(_edge_darkness(fits.screenshot())) < 0.01
    wide.evaluate(
        "b => b.append(Object.assign(document.createElement('span'),"
        " { style: 'display: inline-block; width: 900px; height: 2rem' }))"
    )
    assert wide.evaluate("b => b.scrollWidth > b.clientWidth + 8")
    wide.scroll_into_view_if_needed()
    wide.evaluate(hide)
    left, right = _edge_darkness(wide.screenshot())
    assert right > 0.04 and left < 0.01, (left, right)
    wide.evaluate("b => { b.scrollLeft = b.scrollWidth; }")
    left, right = _edge_darkness(wide.screenshot())
    assert left > 0.04 and right < 0.01, (left, right)


TRAIN_GEOMETRY = """() => {
  const side = ".nl-train-side[data-side='a']";
  const box = (s) => document.querySelector(s).getBoundingClientRect();
  const bar = box('.nl-train-bar');
  const boundary = box(`${side} .nl-train-plot .nsewdrag[data-subplot='xy']`);
  const controls = box(`${side} .nl-train-controls`);
  const step = document.querySelector(".nl-train-bar [data-action='step']");
  const s = step.getBoundingClientRect();
  const hit = document.elementFromPoint(s.left + s.width / 2, s.top + s.height / 2);
  return { bar: [bar.top, bar.bottom], boundary: [boundary.top, boundary.bottom],
    controls: controls.top, reachable: step.contains(hit),
    position: getComputedStyle(document.querySelector('.nl-train-bar')).position };
}"""
"""JS: where the bar, side A's decision boundary (the plot area of its first panel) and its
controls are in the viewport, and whether a tap at the Step button's centre reaches it."""
DRAWN = """(n) => document.querySelector(".nl-train-side[data-side='a']").dataset.drawn === n"""


def test_train_s_bar_and_boundary_share_a_phone_screen(page: Any, server: str) -> None:
    """At 390 px the boundary starts within one screen of the Play/Pause bar; scrolled down
    until the boundary sits under the bar, the bar is still on screen and answers (Step takes
    a step); compared, run B fits under run A; at 1280 px the bar does not stick and the
    controls come before the plot."""
    page.set_viewport_size(PHONE)
    page.goto(f"{server}/train", wait_until="load")
    page.wait_for_function(DRAWN, arg="0")
    at = page.evaluate(TRAIN_GEOMETRY)
    bar = at["bar"][1] - at["bar"][0]
    assert at["boundary"][1] - at["bar"][0] <= PHONE["height"], at  # one screen holds both
    # scroll until the bar reaches the top of the screen and the boundary sits under it
    page.evaluate("(dy) => window.scrollBy(0, dy)", at["bar"][0] + at["boundary"][0] - at["bar"][1])
    page.evaluate(SETTLED)
    at = page.evaluate(TRAIN_GEOMETRY)
    assert page.evaluate("() => window.scrollY") > PHONE["height"] / 2  # scrolled a good way
    assert at["bar"][0] >= 0 and at["bar"][1] - at["bar"][0] == pytest.approx(bar), at
    assert at["bar"][1] <= at["boundary"][0] + 1 and at["boundary"][1] <= PHONE["height"], at
    assert at["reachable"], at
    screenshot(page, "train-phone.png")
    page.locator(".nl-train-bar [data-action='step']").click()
    page.wait_for_function(DRAWN, arg="1")
    page.locator(".nl-train-bar input.nl-compare").check()  # run B comes under run A
    page.wait_for_function(
        "() => { const b = document.querySelector(\".nl-train-side[data-side='b']\");"
        " return !b.hidden && b.dataset.statsDrawn !== undefined; }"
    )
    _settle(page)
    sides = page.evaluate(
        "() => [...document.querySelectorAll('.nl-train-sides, .nl-train-side')]"
        ".map((s) => s.getBoundingClientRect().right)"
    )
    assert len(sides) == 3 and max(sides[1:]) <= sides[0] + 1, sides  # within the view
    assert page.evaluate(OVERFLOWING, BOXES) == []
    page.set_viewport_size(LAPTOP)
    page.evaluate(SETTLED)
    at = page.evaluate(TRAIN_GEOMETRY)
    assert at["position"] == "static" and at["controls"] < at["boundary"][0], at
