"""Show the code in a real browser: the plain-PyTorch script behind every widget.

For every widget of every lesson: "Show the code" shows the script the code route renders for
the widget's settings; "Download notebook" gives a valid ``.ipynb`` holding the same code;
"Open in the playground" opens a new tab whose editor holds exactly that script. For one widget
a lesson (its first) Run is pressed there: the script runs in the lab's sandbox (for real), its
status is ok, and every number of the widget's table is in what it prints. Every other widget's
script is run once, without a browser, at the page's own settings: tests/lab/test_pages.py runs
each (``listing_runs``) and checks it prints every number of the widget's tables
(``test_widget_code_prints_every_number_of_the_widget_s_tables``). While shown, the code follows
the settings. (At a phone's width, with every widget's code shown, nothing scrolls the page
sideways: tests/browser/test_lessons.py, with the rest of a lesson's layout.)
"""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import nbformat
import pytest
from lab_traces import open_lesson, settle, show_code
from labpage import PRESETS

from normlab.experiments import get_experiment
from normlab.lab.lessons import LESSONS

pytestmark = pytest.mark.browser

SLUGS = [lesson.slug for lesson in LESSONS]

RAN = "() => !!document.querySelector('.nl-run-result')?.dataset.status"

NORMLAB_TOOLS = {"doctor"}
NEEDS_NORMLAB = re.compile(r"^\s*(?:import|from)\s+normlab\b", re.MULTILINE)
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def code_route(server: str, name: str, query: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server}/api/experiments/{name}/code?{query}", timeout=60) as r:
        body: dict[str, Any] = json.loads(r.read())
        return body


def check_query(name: str, query: str, params: dict[str, Any]) -> None:
    """Every parameter is in ``query`` as the CLI takes it, and parses back to its value."""
    given = dict(parse_qsl(query, keep_blank_values=True))
    for p in get_experiment(name).parameters:
        assert p.name in given, f"{name}: {p.name} missing from {query!r}"
        value = p.parse(given[p.name])
        value = list(value) if isinstance(value, tuple) else value
        assert value == params[p.name], f"{name}: {p.name}={given[p.name]!r} in the link"


def check_code(server: str, snap: dict[str, Any], shown: dict[str, Any]) -> str:
    """The code shown is the code route's script for the settings; the links carry them."""
    name, params = snap["experiment"], snap["params"]
    assert shown["params"] == params
    playground = urlsplit(shown["playground"])
    assert playground.path == "/playground"
    query = dict(parse_qsl(playground.query))
    assert query.pop("experiment") == name
    check_query(name, urlencode(query), params)
    notebook = urlsplit(shown["notebook"])
    assert notebook.path == f"/api/experiments/{name}/notebook" and shown["download"]
    check_query(name, notebook.query, params)
    script: str = shown["code"]["script"]
    assert "import torch" in script, f"{name}: {script}"
    # the doctor widget shows normlab's own tool, so its code calls normlab; every other
    # widget's code needs none
    assert bool(NEEDS_NORMLAB.search(script)) == (name in NORMLAB_TOOLS), f"{name}: {script}"
    assert shown["text"].rstrip("\n") == script.rstrip("\n"), f"{name}: the box is not the script"
    assert code_route(server, name, notebook.query)["script"] == script
    return script


def numbers_in(tables: list[dict[str, Any]]) -> list[str]:
    """Every number written in the tables' cells, once each, in order."""
    found = [m for t in tables for row in t["rows"] for cell in row for m in NUMBER.findall(cell)]
    return list(dict.fromkeys(found))


def printed(number: str, text: str) -> bool:
    """``number`` is in ``text``: the same value, however written ("0.50" is printed "0.5")."""
    return float(number) in {float(n) for n in NUMBER.findall(text)}


def open_in_playground(page: Any, href: str, script: str, run: bool) -> dict[str, str] | None:
    """Follow the playground link (a new tab), check it holds the script, and if ``run``, Run
    it: what it printed (its status, stdout and stderr)."""
    with page.context.expect_page() as opened:
        page.locator(f'a.nl-open-playground[href="{href}"]').click()
    tab = opened.value
    tab.set_default_timeout(120_000)
    tab.on("console", lambda m: page.guard.console.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: page.guard.errors.append(str(e)))
    try:
        tab.wait_for_load_state()
        editor = tab.locator("textarea.nl-input").first
        editor.wait_for()
        assert editor.input_value().rstrip("\n") == script.rstrip("\n")
        if not run:
            return None
        tab.locator("button.nl-run-btn").first.click()
        tab.wait_for_function(RAN)
        out: dict[str, str] = tab.evaluate(
            """() => {
              const r = document.querySelector('.nl-run-result');
              const text = (sel) => r.querySelector(sel)?.textContent ?? '';
              return { status: r.dataset.status, stdout: text('.nl-run-stdout'),
                       stderr: text('.nl-run-stderr') };
            }"""
        )
        return out
    finally:
        tab.close()


def download_notebook(page: Any, wid: str, shown: dict[str, Any]) -> None:
    """Press "Download notebook": a valid ``.ipynb`` whose code cells hold the shown script's
    every function and class."""
    with page.expect_download() as started:
        page.locator(f'.nl-widget[data-widget="{wid}"] .nl-download-notebook').click()
    download = started.value
    assert download.suggested_filename.endswith(".ipynb")
    with open(download.path(), encoding="utf-8") as f:
        nb = nbformat.read(f, as_version=4)
    nbformat.validate(nb)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert code.strip(), f"{wid}: the notebook has no code"
    for line in shown["code"]["script"].splitlines():
        if line.startswith(("def ", "class ")):
            assert line in code, f"{wid}: {line!r} is not in the notebook"


@pytest.mark.parametrize("slug", SLUGS)
def test_show_the_code_runs_in_the_playground(page: Any, server: str, slug: str) -> None:
    """One page load per lesson serves Show the code, Download notebook and the playground link
    of every widget (none of them changes the widget's settings), and the playground's Run of
    its first widget (tests/lab/test_pages.py runs every widget's code, without a browser)."""
    ids = open_lesson(page, server, slug, PRESETS.get(slug, ""))
    for i, wid in enumerate(ids):
        snap = settle(page, wid)
        shown = show_code(page, wid)
        script = check_code(server, snap, shown)
        download_notebook(page, wid, shown)
        ran = open_in_playground(page, shown["playground"], script, run=i == 0)
        if ran is None:
            continue
        name = snap["experiment"]
        assert ran["status"] == "ok", f"{name}: the script {ran['status']}: {ran['stderr'][-2000:]}"
        missing = [n for n in numbers_in(snap["tables"]) if not printed(n, ran["stdout"])]
        assert not missing, f"{name}: {missing} of the table not printed:\n{ran['stdout']}"


def test_the_code_follows_the_settings(page: Any, server: str) -> None:
    open_lesson(page, server, "drift")
    before = show_code(page, "drift")
    slider = page.locator('.nl-widget[data-widget="drift"] input[data-param="depth"]')
    slider.focus()
    page.keyboard.press("ArrowRight")
    snap = settle(page, "drift")
    after = show_code(page, "drift")  # shown already: it waits for the code of the new depth
    assert after["params"]["depth"] == before["params"]["depth"] + 1
    assert after["code"]["script"] != before["code"]["script"]
    check_code(server, snap, after)
    page.locator('.nl-widget[data-widget="drift"] .nl-code-toggle').click()  # hide it
    assert page.locator('.nl-widget[data-widget="drift"] .nl-code-panel').is_hidden()
