"""The playground in a real browser: edit a listing, Run it for real, see what it printed.

The code runs in the lab's sandbox (no simulation): the test writes code whose output it could
not know without running it, and compares with the same computation done here.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from labpage import screenshot
from test_exercise_editor import Lab, learner

pytestmark = pytest.mark.browser

READY = "() => document.querySelector('article.lesson')?.dataset.playgrounds === 'ready'"
RAN = """(i) => {
  const r = document.querySelectorAll('.nl-code')[i].querySelector('.nl-run-result');
  return !!r && !!r.dataset.status;
}"""


def listing(page: Any, i: int) -> Any:
    return page.locator(".nl-code").nth(i)


def run_listing(page: Any, i: int, code: str) -> dict[str, Any]:
    box = listing(page, i)
    box.locator("textarea.nl-input").fill(code)
    page.evaluate(
        "(i) => { const r = document.querySelectorAll('.nl-code')[i]"
        ".querySelector('.nl-run-result'); delete r.dataset.status; }",
        i,
    )
    box.locator("button.nl-run-btn").click()
    page.wait_for_function(RAN, arg=i)
    out: dict[str, Any] = page.evaluate(
        """(i) => {
          const r = document.querySelectorAll('.nl-code')[i].querySelector('.nl-run-result');
          const text = (sel) => r.querySelector(sel)?.textContent ?? '';
          return {
            status: r.dataset.status,
            stdout: text('.nl-run-stdout'),
            stderr: text('.nl-run-stderr'),
            figures: [...r.querySelectorAll('img.nl-run-figure')].map(
              (im) => [im.complete, im.naturalWidth, im.naturalHeight]),
          };
        }""",
        i,
    )
    return out


def test_every_listing_is_an_editor_with_run_and_reset(page: Any, server: str) -> None:
    page.goto(f"{server}/lessons/drift")
    page.wait_for_function(READY)
    n = page.locator(".nl-code").count()
    assert n >= 3
    assert page.locator(".nl-code textarea.nl-input").count() == n
    assert page.locator(".nl-code button.nl-run-btn").count() == n
    assert page.locator(".nl-code button.nl-reset-btn").count() == n
    # line numbers and highlighting
    gutter = listing(page, 0).locator(".nl-gutter").inner_text().split()
    code = listing(page, 0).locator("textarea").input_value()
    assert gutter == [str(k) for k in range(1, code.count("\n") + 2)]
    assert listing(page, 0).locator(".nl-hl .tok-k").count() >= 1  # import


def test_run_shows_output_error_and_figure(page: Any, server: str) -> None:
    page.goto(f"{server}/lessons/drift")
    page.wait_for_function(READY)
    done = run_listing(
        page,
        0,
        "import torch\n"
        "g = torch.Generator().manual_seed(123)\n"
        "x = torch.randn(1000, generator=g)\n"
        'print(f"std {x.std():.6f}")\n',
    )
    import torch

    expected = torch.randn(1000, generator=torch.Generator().manual_seed(123)).std().item()
    assert done["status"] == "ok", done
    assert done["stdout"].strip() == f"std {expected:.6f}"
    screenshot(listing(page, 0), "playground-run.png")

    failed = run_listing(page, 0, "def f(n):\n    return 1 / n\n\nf(0)\n")
    assert failed["status"] == "error"
    assert "ZeroDivisionError" in failed["stderr"] and "line 2" in failed["stderr"]

    drawn = run_listing(
        page,
        1,
        "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9, 16])\nplt.title('squares')\n"
        "plt.show()\nprint('drawn')\n",
    )
    assert drawn["status"] == "ok" and drawn["stdout"].strip() == "drawn"
    assert len(drawn["figures"]) == 1
    complete, width, height = drawn["figures"][0]
    assert complete and width > 100 and height > 100
    screenshot(listing(page, 1), "playground-figure.png")


def test_editor_keys(page: Any, server: str) -> None:
    page.goto(f"{server}/lessons/drift")
    page.wait_for_function(READY)
    area = listing(page, 2).locator("textarea.nl-input")
    area.fill("")
    area.focus()
    page.keyboard.type("for k in range(3):")
    page.keyboard.press("Enter")
    page.keyboard.type("print(k * k)")
    assert area.input_value() == "for k in range(3):\n    print(k * k)"
    page.keyboard.press("Shift+Tab")
    assert area.input_value() == "for k in range(3):\nprint(k * k)"
    page.keyboard.press("Home")  # Tab inserts 4 spaces at the caret, here the line's start
    page.keyboard.press("Tab")
    assert area.input_value() == "for k in range(3):\n    print(k * k)"
    page.evaluate(
        "() => delete document.querySelectorAll('.nl-code')[2]"
        ".querySelector('.nl-run-result').dataset.status"
    )
    page.keyboard.press("Control+Enter")
    page.wait_for_function(RAN, arg=2)
    stdout = listing(page, 2).locator(".nl-run-stdout").inner_text()
    assert stdout.split() == ["0", "1", "4"]
    # Esc leaves the editor for the control after it (its Run button): no keyboard trap
    area.focus()
    page.keyboard.press("Escape")
    assert not area.evaluate("(a) => a === document.activeElement")
    focused = page.evaluate("() => document.activeElement.textContent.trim()")
    assert focused == listing(page, 2).locator("button").first.inner_text().strip()
    assert area.input_value() == "for k in range(3):\n    print(k * k)"  # nothing typed


def _saved(server: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server}/api/progress", timeout=30) as r:
        listings: dict[str, Any] = json.loads(r.read())["listings"]
        return listings


def test_edits_are_kept_and_reset_restores(page: Any, server: str) -> None:
    page.goto(f"{server}/lessons/batch-norm")
    page.wait_for_function(READY)
    box = listing(page, 0)
    original = box.locator("textarea").input_value()
    mine = "# my own experiment\nprint(sum(range(10)))\n"
    box.locator("textarea").fill(mine)
    page.wait_for_function(
        "() => document.querySelectorAll('.nl-code')[0].querySelector('.nl-saved-note')"
        ".textContent.includes('saved')"
    )
    # kept under the listing's own id (its data-listing, from the template), not its place
    assert box.get_attribute("data-listing") == "batch-norm-columns"
    assert "batch-norm-columns" in _saved(server)
    page.reload()
    page.wait_for_function(READY)
    assert listing(page, 0).locator("textarea").input_value() == mine
    with page.expect_response(lambda r: "/api/listings/" in r.url and r.request.method == "PUT"):
        listing(page, 0).locator("button.nl-reset-btn").click()
    assert listing(page, 0).locator("textarea").input_value() == original
    page.reload()
    page.wait_for_function(READY)
    assert listing(page, 0).locator("textarea").input_value() == original


@pytest.fixture
def own_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab of this test's own, which it restarts on the same progress database."""
    yield from learner(tmp_path_factory, "P")


def _put_listing(request: Any) -> bool:
    return request.method == "PUT" and "/api/listings/" in request.url


def test_code_typed_in_a_listing_is_there_after_a_lab_restart(page: Any, own_lab: Lab) -> None:
    """A save in flight while the learner types on: the page says "saved" only once the last
    edit is kept, so a lab restarted then still has it (the first save's answer used to say so,
    and the restart lost what came after)."""
    page.goto(f"{own_lab.base}/lessons/batch-norm")
    page.wait_for_function(READY)
    box = listing(page, 0).locator("textarea")
    box.click()
    page.keyboard.press("Control+End")
    with page.expect_request(_put_listing):  # the first half is on its way to the lab
        page.keyboard.type("\n# my note: the batch's own mean")
    page.keyboard.type(" and its biased variance")  # typed on while that save is under way
    mine = box.input_value()
    page.wait_for_function(
        "() => document.querySelectorAll('.nl-code')[0].querySelector('.nl-saved-note')"
        ".textContent === 'your edits are saved'"
    )
    assert _saved(own_lab.base)["batch-norm-columns"] == mine

    own_lab.stop()
    own_lab.start()  # a new process on the same --db
    page.goto(f"{own_lab.base}/lessons/batch-norm")
    page.wait_for_function(READY)
    assert listing(page, 0).locator("textarea").input_value() == mine


FLOOD = "for i in range(200000):\n    print(i)\n"
"""1,288,890 bytes of output: more than the sandbox keeps of a stream (1 MiB)."""


def test_a_flood_of_output_keeps_the_page_short_and_shows_its_end(page: Any, server: str) -> None:
    page.goto(f"{server}/playground")
    page.wait_for_function(READY)
    before = page.evaluate("() => document.documentElement.scrollHeight")
    done = run_listing(page, 0, FLOOD)
    assert done["status"] == "ok", done
    shown = done["stdout"].splitlines()
    assert shown[:3] == ["0", "1", "2"] and shown[-2:] == ["199998", "199999"]
    notes = [line for line in shown if line.startswith("[normlab sandbox: stdout truncated: ")]
    assert len(notes) == 1 and "lines) left out here" in notes[0], notes
    height = page.evaluate("() => document.documentElement.scrollHeight")
    assert height < 3000, f"the page is {height} px tall after the flood ({before} px before)"
    # the output scrolls in its own box, which opens at its end: the last line is in view
    box = listing(page, 0).locator(".nl-run-stdout")
    scroll = box.evaluate("(p) => [p.scrollTop, p.clientHeight, p.scrollHeight]")
    top, visible, total = scroll
    assert total > 10 * visible and top + visible >= total - 1, scroll
    last = box.evaluate(
        """(p) => {
          const range = document.createRange();
          const text = p.firstChild;
          const at = text.length - '199999\\n'.length;
          range.setStart(text, at);
          range.setEnd(text, at + 6);
          const r = range.getBoundingClientRect(), b = p.getBoundingClientRect();
          return [range.toString(), r.top >= b.top && r.bottom <= b.bottom];
        }"""
    )
    assert last == ["199999", True]
    screenshot(listing(page, 0), "playground-flood.png")
    with page.expect_response(lambda r: "/api/listings/" in r.url and r.request.method == "PUT"):
        listing(page, 0).locator("button.nl-reset-btn").click()  # leave the starter saved
