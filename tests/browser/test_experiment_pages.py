"""An experiment's own page in a real browser: its widget draws, and a control reruns it.

The page (``/experiments/NAME``) is reached from the index, as a learner would; its widget draws
exactly what the API answers for the settings shown, and moving one slider changes the settings,
the address and the numbers drawn.
"""

from __future__ import annotations

from typing import Any

import pytest
from lab_traces import ALL_SETTLED, check_plot, settle
from labpage import screenshot

from normlab.experiments import get_experiment

pytestmark = pytest.mark.browser

NAME = "linear-scale"  # a cheap one: each run is a single Linear layer


def test_an_experiment_page_draws_its_widget_and_follows_a_control(page: Any, server: str) -> None:
    page.goto(f"{server}/experiments", wait_until="load")
    page.locator(f'a[href="/experiments/{NAME}"]').click()
    page.wait_for_url(f"**/experiments/{NAME}")
    page.wait_for_function(ALL_SETTLED)
    assert page.locator("h1").text_content() == get_experiment(NAME).title
    before = settle(page, NAME)
    check_plot(server, before)  # its figure and tables, as the API answers them
    assert page.locator(f'.nl-widget[data-widget="{NAME}"] .js-plotly-plot').count() >= 1
    slider = page.locator(
        f'.nl-widget[data-widget="{NAME}"] input[type="range"][data-param="scale"]'
    )
    slider.focus()
    page.keyboard.press("ArrowRight")
    after = settle(page, NAME)
    assert after["params"]["scale"] > before["params"]["scale"]
    assert f"{NAME}.scale=" in page.url
    check_plot(server, after)
    assert after["tables"] != before["tables"]  # the numbers shown are the new run's
    assert after["traces"] != before["traces"]
    screenshot(page, f"experiment-{NAME}.png", full_page=True)
