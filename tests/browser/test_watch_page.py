"""/watch in a real browser: a normlab.watch log drawn, then redrawn live as records arrive.

The lab runs as ``normlab lab --watch-log`` would serve it (``serve(create_app(watch_log=...))``
without the lessons' warm-up, which this page does not need). The log comes from a real watch
run; the test writes its lines to the watched file a few at a time, as a training run would.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from labpage import lab_serving, screenshot
from torch import nn

import normlab

pytestmark = pytest.mark.browser

TRACES = """() => [...document.querySelectorAll('.nl-watch-plot .nl-figure-plot')].map((gd) =>
  (gd.data || []).map((t) => ({ name: t.name, x: t.x })))"""
FITS = """() => [...document.querySelectorAll('.nl-watch-plot .nl-figure-plot')].every((gd) =>
  gd._fullLayout && Math.abs(gd._fullLayout.width - gd.clientWidth) < 1)"""
"""Every plot drawn at its box's width: the redraw after a resize is done (render.js's own,
200 ms after it, or plotly's)."""
ROWS = """() => [...document.querySelectorAll('.nl-watch-table tbody tr')]
  .map((r) => [...r.children].map((c) => c.textContent))"""


def _watched_lines(path: Path) -> list[str]:
    """12 records of a small ReLU net trained 60 steps; its middle layer dies at step 30."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    with normlab.watch(net, every=5, log=path) as w:
        for step in range(60):
            if step == 30:
                with torch.no_grad():
                    net[2].bias[:14] = -100.0
            opt.zero_grad()
            net(torch.randn(32, 4, generator=g)).pow(2).mean().backward()
            w.step()
            opt.step()
    return path.read_text().splitlines(keepends=True)


@pytest.fixture(scope="module")
def lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return _watched_lines(tmp_path_factory.mktemp("watched") / "run.jsonl")


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("watch-log") / "train.jsonl"


@pytest.fixture(scope="module")
def server(log: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This module's lab: serving ``log`` at /watch (the ``page`` fixture opens pages on it)."""
    data = tmp_path_factory.mktemp("d")
    with lab_serving("create_app(watch_log=sys.argv[1])", "/api/watch", data, str(log)) as base:
        yield base


def _records(page: Any, n: int) -> None:
    """Wait until the page has drawn the state of ``n`` records."""
    page.wait_for_function(
        "(n) => document.querySelector('.nl-watch')?.dataset.records === String(n)", arg=n
    )


def test_watch_draws_the_log_and_redraws_it_as_it_grows(
    page: Any, server: str, log: Path, lines: list[str]
) -> None:
    page.set_default_timeout(60_000)  # the page needs no training: a hang guard
    log.write_text("".join(lines[:4]))
    page.goto(f"{server}/watch")
    _records(page, 4)
    page.wait_for_function("() => document.querySelector('.nl-watch').dataset.link === 'live'")
    traces = page.evaluate(TRACES)
    # the weight layers, named as the table and the doctor name them (torch's "0" read as 0)
    names = [t["name"] for plot in traces for t in plot]  # panel by panel
    layers = ["model[0]", "model[2]", "model[4]"]
    assert names[:6] == layers + layers  # activation scale, then gradient ratio
    assert "dead" in names[6:] and not {"0", "2", "4"} & set(names)  # label counts keep theirs
    assert traces[0][0]["x"] == [0, 5, 10, 15]
    rows = page.evaluate(ROWS)
    assert [r[0] for r in rows] == [f"model[{k}]" for k in range(5)] and rows[3][-1] == "ok"
    assert page.locator(".nl-watch-events li").all_inner_texts() == ["none so far"]
    page.evaluate("() => { window.nlStillHere = true; }")  # gone if the page reloads

    with log.open("a") as f:  # the run goes on: a layer dies at step 30
        f.write("".join(lines[4:8]) + "{half a record\n" + "".join(lines[8:10]))
    _records(page, 10)
    assert page.evaluate("() => window.nlStillHere") is True
    assert page.locator(".nl-watch-summary").inner_text() == "10 records, steps 0 to 45"
    assert page.evaluate(TRACES)[0][0]["x"] == [0, 5, 10, 15, 20, 25, 30, 35, 40, 45]
    assert "step 30: model[3] became dead" in page.locator(".nl-watch-events li").all_inner_texts()
    assert page.evaluate(ROWS)[3][-1] == "dead"
    errors = page.locator(".nl-watch-errors")
    assert (
        errors.is_visible() and "line 9 of train.jsonl is not a watch record" in errors.inner_text()
    )
    screenshot(page, "watch.png", full_page=True)
    with urllib.request.urlopen(f"{server}/api/watch", timeout=60) as r:
        state = json.loads(r.read())
    assert state["records"] == 10 and state["skipped"] == 1
    scale = state["figures"][0]["panels"][0]["series"]
    assert [s["name"] for s in scale] == ["model[0]", "model[2]", "model[4]"]  # as drawn
    page.set_viewport_size({"width": 390, "height": 800})  # a phone: nothing scrolls sideways
    page.wait_for_function(FITS)
    assert page.evaluate("() => document.scrollingElement.scrollWidth") <= 390
