"""Lessons 1 and 2 against the seed lessons: the listings and numbers a learner compares.

Each page is rendered once (both are cheap: a few small runs). That every listing prints what
its box shows is checked by running them all (``tests/lab/test_pages.py``); here: that the boxes
are there and hold the seed's numbers.
"""

from __future__ import annotations

import html
import re
import statistics
import warnings
from collections.abc import Iterator

import pytest
import torch

with warnings.catch_warnings():  # starlette warns about its httpx-based client on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from normlab.experiments import run_experiment
from normlab.lab.app import create_app

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only


@pytest.fixture(scope="module")
def pages() -> Iterator[dict[str, str]]:
    with TestClient(create_app(), base_url=LAB) as c:
        yield {slug: c.get(f"/lessons/{slug}").text for slug in ("drift", "batch-norm")}


def _box(page: str, listing: str) -> tuple[str, str | None]:
    """The listing's source and the output its box shows (``None``: no "prints" box)."""
    found = re.search(
        rf'<div class="nl-code"[^>]* data-listing="{listing}">\s*<pre class="nl-src"[^>]*>'
        r'(.*?)</pre>(?:<pre class="nl-out"[^>]*>(.*?)</pre>)?',
        page,
        re.S,
    )
    assert found is not None, f"no listing {listing!r}"
    src, out = (
        None if g is None else html.unescape(re.sub("<[^>]+>", "", g)) for g in found.groups()
    )
    assert src is not None
    return src, out


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub("<[^>]+>", " ", page)).split())


def test_lesson_1_opens_with_the_seed_s_3_by_2_listing(pages: dict[str, str]) -> None:
    """The seed's first listing: mean and std of a 3 x 2 tensor, 3.5000 and 1.8708."""
    src, out = _box(pages["drift"], "drift-six-values")
    assert "torch.tensor" in src and ".mean()" in src and ".std()" in src
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert out == f"mean {x.mean():.4f}, std {x.std():.4f}" == "mean 3.5000, std 1.8708"
    first = pages["drift"].index('data-listing="drift-')
    assert pages["drift"].index('data-listing="drift-six-values"') == first  # the first listing


def test_lesson_2_states_the_measured_mean_the_seed_states(pages: dict[str, str]) -> None:
    """ "The mean holds near 0.39": the median layer's mean of the run, as the seed says."""
    means = run_experiment("bn-stack").to_dict()["means"]
    near = f"{statistics.median(means):.2f}"
    assert near == "0.39"  # DESIGN.md: bn-stack, means near 0.39
    assert f"the mean holds near {near}" in _text(pages["batch-norm"])


def test_lesson_2_s_train_eval_listing_shows_what_it_prints(pages: dict[str, str]) -> None:
    src, out = _box(pages["batch-norm"], "batch-norm-one-row")
    assert "norm.eval()" in src
    assert out is not None
    lines = out.splitlines()
    assert lines[0].startswith("training mode refuses it: Expected more than 1 value per channel")
    assert lines[1] == "eval mode output shape: (1, 3)"
