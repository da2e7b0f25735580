"""Every registered experiment has a page in the lab, found from ``/experiments``.

The experiments are read from the registry, never listed here: an experiment registered
tomorrow is checked by these tests with no edit.
"""

from __future__ import annotations

import html
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import markupsafe
import pytest

with warnings.catch_warnings():  # starlette warns about its httpx-based client on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from normlab.experiments import get_experiment, list_experiments
from normlab.lab.answers import AnswerStore
from normlab.lab.app import create_app
from normlab.lab.lessons import LESSONS
from normlab.lab.routes.experiment_pages import docstring_html
from normlab.lab.runner import Runner

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only
NAMES = [e.name for e in list_experiments()]
INITIAL = re.compile(r'<script type="application/json" class="nl-initial">(.*?)</script>', re.S)
URL = re.compile(r"""https?://([^/\s"'<>)]+)""")


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner()


@pytest.fixture(scope="module")
def client(runner: Runner) -> Iterator[TestClient]:
    with TestClient(create_app(runner), base_url=LAB) as c:
        yield c


def _escaped(text: str) -> str:
    return str(markupsafe.escape(text))


def _noscript(page: str) -> str:
    """What a browser without JavaScript shows of the widget's numbers."""
    blocks = re.findall(r"<noscript>(.*?)</noscript>", page, re.S)
    return "".join(b for b in blocks if "nl-table-block" in b)


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_has_a_page_with_its_widget(
    client: TestClient, runner: Runner, name: str
) -> None:
    r = client.get(f"/experiments/{name}")
    assert r.status_code == 200, r.text[-2000:]
    assert r.headers["content-type"].startswith("text/html")
    experiment = get_experiment(name)
    assert f"<h1>{_escaped(experiment.title)}</h1>" in r.text
    assert f"Experiment {NAMES.index(name) + 1} of {len(NAMES)}" in r.text
    assert re.findall(r'data-experiment="([^"]+)"', r.text) == [name]  # one widget, its own
    assert '<div class="nl-controls"></div>' in r.text  # lab.js builds them from the registry
    assert '<script src="/static/lab.js"' in r.text
    assert '<script src="/static/vendor/plotly.min.js"' in r.text
    default = runner.run(name, {})  # what the page rendered: a cache hit
    assert [json.loads(b) for b in INITIAL.findall(r.text)] == [default]
    shown = html.unescape(re.sub(r"<[^>]+>", " ", _noscript(r.text)))
    for table in default["tables"]:  # the numbers, for a browser without JavaScript
        for cell in [table["title"], *table["columns"], *(c for row in table["rows"] for c in row)]:
            assert cell in shown, f"{name}: {cell!r} not in the page's tables"
    used_in = r.text.split('<p class="nl-used-in">', 1)[1].split("</p>", 1)[0]
    linked = re.findall(r'<a href="([^"]+)">', used_in)  # the lessons that embed it, in order
    assert linked == [lesson.url for lesson in LESSONS if name in lesson.experiments]


def test_the_run_of_the_defaults_is_kept_and_a_lab_started_again_shows_it_at_once(
    tmp_path: Path, computed: list[str]
) -> None:
    """The page's run is kept: ad-hoc requests that fill the cache leave it, and it goes to
    the answers store, where a second lab (a lab started again) finds it: no run computed."""
    path = tmp_path / "answers.sqlite3"
    first = Runner(max_entries=1, answers=AnswerStore(path))
    with TestClient(create_app(first), base_url=LAB) as c:
        page = c.get("/experiments/drift").text
        for seed in (1, 2):  # ad-hoc runs, more than the cache holds
            assert c.post("/api/experiments/drift", json={"seed": seed}).status_code == 200
        assert c.get("/experiments/drift").text == page
    assert computed == ["drift"] * 3 and first.misses == 3
    again = Runner(answers=AnswerStore(path))
    with TestClient(create_app(again), base_url=LAB) as c:
        assert c.get("/experiments/drift").text == page
    assert computed == ["drift"] * 3 and (again.misses, again.stored) == (0, 1)


def test_the_index_lists_every_experiment(client: TestClient) -> None:
    r = client.get("/experiments")
    assert r.status_code == 200
    listing = r.text.split('<ol class="lesson-list experiment-list">', 1)[1].split("</ol>")[0]
    links = re.findall(r'<a href="(/experiments/[^"]+)">', listing)
    assert links == [f"/experiments/{name}" for name in NAMES]
    for e in list_experiments():
        assert _escaped(e.title) in listing and _escaped(e.summary[1:]) in listing
    assert '<a href="/experiments" aria-current="page">' in r.text  # the header's link


def test_every_page_links_the_index(client: TestClient) -> None:
    for path in ("/", LESSONS[0].url, f"/experiments/{NAMES[0]}"):
        assert '<a href="/experiments"' in client.get(path).text, path


def test_unknown_experiment_is_a_404_page_naming_the_valid_ones(client: TestClient) -> None:
    r = client.get("/experiments/no-such-experiment")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "no-such-experiment" in r.text and 'href="/"' in r.text
    linked = re.findall(r'<a href="/experiments/([^"]+)">', r.text)
    assert linked == NAMES


def test_the_pages_point_nowhere_but_127_0_0_1(client: TestClient) -> None:
    for path in ("/experiments", f"/experiments/{NAMES[0]}", "/experiments/nope"):
        hosts = [m.group(1) for m in URL.finditer(client.get(path).text)]
        assert all(h.split(":")[0] == "127.0.0.1" for h in hosts), (path, hosts)


def test_docstring_html_renders_inline_code_math_and_references() -> None:
    doc = """The std of ``x`` for :math:`g^2`, see :func:`~normlab.init.lsuv_` and
    :mod:`normlab.probe`; a < b.

    A second paragraph, not shown."""
    out = str(docstring_html(doc))
    assert out.startswith('The std of <code>x</code> for <span class="nl-math"><math')
    assert "<code>lsuv_</code>" in out and "<code>normlab.probe</code>" in out
    assert out.endswith("; a &lt; b.") and "second" not in out
