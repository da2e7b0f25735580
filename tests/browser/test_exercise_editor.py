"""The exercise editor in a real browser: Run is no attempt, code is kept across a restart of
the lab, each learner has their own order of choices, the counter is the database's, and
number answers are read as people type them.

A learner is a progress database: this module starts ``normlab lab --db A`` (again for the
restart) and ``normlab lab --db B``, two learners, and leaves the session's ``server`` alone (its
progress is what tests/browser/test_exercise_pages.py starts from). Their labs start with
``--no-warm``: a test opens two or three lessons, which compute on that first visit, instead of
each lab computing all of them at startup while the test runs.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from labpage import ALLOWED_HOST, HE_RIGHT, PRESETS, free_port, screenshot, serving

from normlab.lab import exercises
from normlab.lab.exercises import ChoiceExercise
from normlab.lab.progress import ProgressStore

pytestmark = pytest.mark.browser

READY = "() => document.querySelector('section.nl-exercises')?.dataset.state === 'ready'"
CHECKED = """(id) => {
  const f = document.querySelector(`#exercise-${id} .nl-feedback`);
  return f && (f.dataset.passed === 'true' || f.dataset.passed === 'false');
}"""
RAN = """(id) => {
  const box = document.querySelector(`#exercise-${id} .nl-run-result`);
  return box && !box.hidden && ['ok', 'error', 'timeout', 'killed', 'failed']
    .includes(box.dataset.status);
}"""
INIT = "/lessons/initialization" + PRESETS["initialization"]
CHOICE_PAGES = ("drift", "batch-norm")  # four choice questions between them


def get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return json.loads(r.read())


def db_attempts(base: str, lesson: str, exercise_id: str) -> int:
    n: int = get(base, "/api/progress")["lessons"][lesson]["exercises"][exercise_id]["attempts"]
    return n


class Lab:
    """``normlab lab --db DB`` on a free port, started and stopped by the test."""

    def __init__(self, db: Path, data: Path) -> None:
        self.db, self.data = db, data
        self.running: ExitStack | None = None
        self.base = ""

    def start(self) -> Lab:
        port = free_port()
        self.base = f"http://{ALLOWED_HOST}:{port}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "XDG_DATA_HOME": str(self.data)}
        self.data.mkdir(parents=True, exist_ok=True)  # for the log; the lab fills it
        cmd = [sys.executable, "-m", "normlab", "lab", "--host", ALLOWED_HOST, "--port", str(port)]
        cmd += ["--db", str(self.db), "--no-warm"]
        self.running = ExitStack()
        self.running.enter_context(
            serving(cmd, f"{self.base}/api/progress", self.data / "server.log", env, stop_s=30)
        )
        return self

    def stop(self) -> None:
        if self.running is not None:
            self.running.close()
            self.running = None


def learner(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Lab]:
    """A learner's lab of its own on ``NAME/progress.sqlite3``; a test may restart it on the
    same file."""
    root = tmp_path_factory.mktemp(f"learner-{name.lower()}")
    lab = Lab(root / name / "progress.sqlite3", root / "data").start()
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture(scope="module")
def learner_a(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from learner(tmp_path_factory, "A")


@pytest.fixture(scope="module")
def learner_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from learner(tmp_path_factory, "B")


def card(page: Any, exercise_id: str) -> Any:
    return page.locator(f"#exercise-{exercise_id}")


def editor(page: Any, exercise_id: str) -> Any:
    return card(page, exercise_id).locator("textarea.nl-input")


def shown_attempts(page: Any, exercise_id: str) -> int:
    return int(card(page, exercise_id).locator(".nl-attempts").get_attribute("data-attempts"))


def check(page: Any, exercise_id: str) -> str:
    c = card(page, exercise_id)
    page.evaluate(
        "(id) => { delete document.querySelector(`#exercise-${id} .nl-feedback`).dataset.passed; }",
        exercise_id,
    )
    c.locator("button.nl-submit-btn").click()
    page.wait_for_function(CHECKED, arg=exercise_id)
    text: str = c.locator(".nl-feedback").inner_text()
    return text


def run(page: Any, exercise_id: str, *, keys: bool = False) -> str:
    """Run the exercise's code (the Run button, or Ctrl+Enter in its editor); its stdout."""
    page.evaluate(
        "(id) => { delete document.querySelector(`#exercise-${id} .nl-run-result`)"
        "?.dataset.status; }",
        exercise_id,
    )
    if keys:
        editor(page, exercise_id).press("Control+Enter")
    else:
        card(page, exercise_id).locator("button.nl-run-btn").click()
    page.wait_for_function(RAN, arg=exercise_id)
    box = card(page, exercise_id).locator(".nl-run-result")
    assert box.get_attribute("data-status") == "ok", box.inner_text()
    out: str = box.locator(".nl-run-stdout").inner_text()
    return out


def kept_code(base: str, exercise_id: str) -> str | None:
    code: str | None = get(base, "/api/progress")["exercise_code"].get(exercise_id)
    return code


def wait_kept(page: Any, base: str, exercise_id: str, code: str) -> None:
    """Wait until the page says the code is kept, then read it back from the lab. The note says
    so only while the editor holds the code the lab acknowledged (an edit clears it), so a save
    of a half-typed edit, which a loaded machine's slow typing makes, does not end the wait."""
    # (waiting in the page, not in time.sleep: the guard's route handler runs in this process
    # and passes the browser's requests on only while playwright has control)
    page.wait_for_function(
        "(id) => document.querySelector(`#exercise-${id} .nl-saved-note`).textContent"
        " === 'your code is kept'",
        arg=exercise_id,
    )
    assert kept_code(base, exercise_id) == code


# -- Run is no attempt; Ctrl+Enter runs --------------------------------------------------------


def test_run_and_ctrl_enter_show_the_output_without_an_attempt(page: Any, learner_b: Lab) -> None:
    server = learner_b.base
    page.goto(server + INIT)
    page.wait_for_function(READY)
    before = db_attempts(server, "initialization", "he-derivation")
    assert shown_attempts(page, "he-derivation") == before
    editor(page, "he-derivation").fill("import math\nprint('trying', math.sqrt(2.0 / 512))\n")
    assert run(page, "he-derivation").strip() == f"trying {(2.0 / 512) ** 0.5}"
    editor(page, "he-derivation").fill("print(sum(range(10)))\n")
    assert run(page, "he-derivation", keys=True).strip() == "45"  # Ctrl+Enter runs, not checks
    assert card(page, "he-derivation").locator(".nl-feedback").inner_text() == ""  # no verdict
    assert db_attempts(server, "initialization", "he-derivation") == before  # nothing counted
    assert shown_attempts(page, "he-derivation") == before
    editor(page, "he-derivation").fill(HE_RIGHT)
    assert "all 7 checks passed" in check(page, "he-derivation")  # Check counts
    assert db_attempts(server, "initialization", "he-derivation") == before + 1
    assert shown_attempts(page, "he-derivation") == before + 1
    screenshot(card(page, "he-derivation"), "exercise-editor-run.png")


# -- kept code, across a restart of the lab ----------------------------------------------------


def test_code_typed_in_an_exercise_is_there_after_a_lab_restart(page: Any, learner_a: Lab) -> None:
    page.goto(learner_a.base + INIT)
    page.wait_for_function(READY)
    box = editor(page, "he-derivation")
    starter = box.input_value()
    assert "def kept_fraction" in starter
    box.click()
    page.keyboard.press("Control+End")
    page.keyboard.type("\n# my derivation: ReLU keeps half of E[z^2]")
    mine = box.input_value()
    wait_kept(page, learner_a.base, "he-derivation", mine)  # saved as typed, no Check needed
    assert db_attempts(learner_a.base, "initialization", "he-derivation") == 0

    learner_a.stop()
    learner_a.start()  # a new process on the same --db
    page.goto(learner_a.base + INIT)
    page.wait_for_function(READY)
    assert editor(page, "he-derivation").input_value() == mine
    page.evaluate(
        "() => { document.querySelector('#exercise-he-derivation .nl-saved-note')"
        ".textContent = ''; }"
    )
    card(page, "he-derivation").locator("button.nl-reset-btn").click()  # back to the starter
    assert editor(page, "he-derivation").input_value() == starter
    wait_kept(page, learner_a.base, "he-derivation", starter)


# -- each learner their own order of choices ---------------------------------------------------


def choice_orders(page: Any, base: str) -> dict[str, list[str]]:
    """Per choice question on :data:`CHOICE_PAGES`, the choice texts in the order shown."""
    orders: dict[str, list[str]] = {}
    for slug in CHOICE_PAGES:
        page.goto(f"{base}/lessons/{slug}")
        page.wait_for_function(READY)
        orders.update(
            page.evaluate(
                """() => Object.fromEntries(
                  [...document.querySelectorAll('.nl-exercise[data-kind="choice"]')].map((c) =>
                    [c.dataset.exercise,
                     [...c.querySelectorAll('input[type=radio]')].map((i) => i.dataset.choice)]))"""
            )
        )
    return orders


def test_choice_order_is_each_learners_own_and_stable(
    page: Any, learner_a: Lab, learner_b: Lab
) -> None:
    mine = choice_orders(page, learner_a.base)
    assert len(mine) == 4
    assert choice_orders(page, learner_a.base) == mine  # a second visit: the same order
    other = choice_orders(page, learner_b.base)  # another database, another learner
    assert set(other) == set(mine)
    for exercise_id in mine:
        assert sorted(other[exercise_id]) == sorted(mine[exercise_id])
    assert other != mine  # four questions of four choices: the same by chance once in 24**4

    with ProgressStore(learner_a.db) as store:  # the order is the one the learner id seeds
        learner = store.learner_id
    for exercise_id, shown in mine.items():
        ex = exercises.get(exercise_id)
        assert isinstance(ex, ChoiceExercise)
        assert shown == [c.text for c in ex.for_learner(learner).choices]
    learner_a.stop()
    learner_a.start()
    assert choice_orders(page, learner_a.base) == mine  # and after a restart of the lab


# -- the counter is the database's; numbers as typed -------------------------------------------


def test_the_attempts_counter_equals_the_database(page: Any, learner_b: Lab) -> None:
    server = learner_b.base
    page.goto(f"{server}/lessons/drift")
    page.wait_for_function(READY)
    box = card(page, "drift-shrink-factor").locator("input.nl-number-answer")
    for answer in ("3", "10,355", "11", "-0.5", "1e-3", "10.35"):
        box.fill(answer)
        check(page, "drift-shrink-factor")
        assert shown_attempts(page, "drift-shrink-factor") == db_attempts(
            server, "drift", "drift-shrink-factor"
        )
    ex = exercises.get("drift-std-through-depth")
    assert isinstance(ex, ChoiceExercise)
    for c in ex.choices:  # every choice once, each one an attempt
        card(page, ex.id).get_by_label(c.text, exact=False).check()
        check(page, ex.id)
        assert shown_attempts(page, ex.id) == db_attempts(server, "drift", ex.id)
    page.reload()
    page.wait_for_function(READY)
    for exercise_id in ("drift-shrink-factor", ex.id):
        assert shown_attempts(page, exercise_id) == db_attempts(server, "drift", exercise_id)
    assert card(page, ex.id).locator(".nl-attempts").inner_text().endswith("attempts")


def test_number_answers_are_read_as_typed(page: Any, learner_b: Lab) -> None:
    server = learner_b.base
    page.goto(f"{server}/lessons/drift")
    page.wait_for_function(READY)
    box = card(page, "drift-shrink-factor").locator("input.nl-number-answer")
    box.fill("10,355")
    text = check(page, "drift-shrink-factor")
    assert "10355 is too large" in text  # read as ten thousand, checked, and counted
    counted = db_attempts(server, "drift", "drift-shrink-factor")

    page.guard.expect_422()
    box.fill("Infinity")
    text = check(page, "drift-shrink-factor")
    assert text == (
        "'Infinity' is not allowed: the answer must be a finite number, "
        "like 10355, 10,355, -0.5 or 1e-3"
    )
    page.guard.expect_422()
    box.fill("0,5")
    assert "decimals take a point (0.5)" in check(page, "drift-shrink-factor")
    box.fill("")
    assert check(page, "drift-shrink-factor").startswith("Type a number first, like 10355")
    assert db_attempts(server, "drift", "drift-shrink-factor") == counted  # refusals: none
    assert shown_attempts(page, "drift-shrink-factor") == counted

    box.fill(f"{1.0280 / 0.0993:.3f}")  # the seed table's input std over layer-3 std
    box.press("Enter")  # Enter checks a number
    page.wait_for_function(
        "() => document.querySelector('#exercise-drift-shrink-factor .nl-feedback')"
        ".dataset.passed === 'true'"
    )
    assert shown_attempts(page, "drift-shrink-factor") == counted + 1
