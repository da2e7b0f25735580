"""What "fits a phone" and "laid out on a laptop" mean for a lab page, checked the same way by
tests/browser/test_narrow.py (the pages without lessons) and tests/browser/test_lessons.py (each
lesson, which that test opens once for all its checks).

At 390 px nothing is read by scrolling sideways inside a box: what a listing prints wraps,
a table wider than its box stacks (each row a block of "column: value" pairs, narrow.js), a
display formula is set smaller or broken into lines, and the page itself never scrolls
sideways. Resized to 1280 px, the same page is laid out as before: tables are tables again,
formulas at their size, printed output keeps its lines.
"""

from __future__ import annotations

from typing import Any

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 900}

BOXES = ".nl-out, .nl-shell, .nl-math-block, .figures, .nl-table, .nl-table-block"
"""What holds an output's numbers: printed output, tables (a widget's and a lesson's), formulas."""

SETTLED = """async () => {
  await document.fonts.ready;  // a formula's width depends on its font
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
}"""
"""JS: the fonts are in and two frames have passed, so narrow.js has measured the page as it is."""

OVERFLOWING = """(sel) => [...document.querySelectorAll(sel)]
  .filter((b) => b.clientHeight > 0 && b.scrollWidth > b.clientWidth + 1)
  .map((b) => `${b.className} ${b.closest('[data-listing], [data-widget]')?.outerHTML.slice(0, 60)
    ?? ''}: ${b.scrollWidth} px in ${b.clientWidth}`)"""
"""JS: every shown box whose content is wider than the box (it would scroll inside itself)."""

DESKTOP = """() => ({
  fitted: [...document.querySelectorAll('[data-fit]')].map((e) => e.dataset.fit),
  outputs: [...new Set([...document.querySelectorAll('.nl-out')]
    .map((o) => getComputedStyle(o).whiteSpace))],
  tables: [...new Set([...document.querySelectorAll('table.figures, .nl-table-block > table')]
    .map((t) => getComputedStyle(t).display))],
})"""
"""JS: what narrow.js changed at 1280 px (at most a formula a little smaller: edge-of-chaos's
widest overflows a laptop's column too) and how outputs and tables are laid out."""


def check_fits_a_phone(page: Any, where: str) -> None:
    """The page, laid out at :data:`PHONE` width and settled, does not scroll sideways, and no
    box of numbers in it is wider than itself."""
    page.evaluate(SETTLED)
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{where} is {width} px wide at 390 px"
    assert page.evaluate(OVERFLOWING, BOXES) == [], where


def check_laid_out_on_a_laptop(page: Any, where: str) -> None:
    """Resized to :data:`LAPTOP` width, the page has no table stacked, no formula broken (at
    most one set a little smaller), and printed output on its lines."""
    page.set_viewport_size(LAPTOP)
    page.evaluate(SETTLED)
    laid = page.evaluate(DESKTOP)
    assert set(laid["fitted"]) <= {"scale"}, f"{where} at 1280 px: {laid['fitted']}"
    assert set(laid["outputs"]) <= {"pre"} and set(laid["tables"]) <= {"table"}, (where, laid)
