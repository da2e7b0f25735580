"""The lab in a real browser: every page loads cleanly, every widget control drives a live run.

For each lesson: open it at a phone's width (no console error, no page error, no request leaving
127.0.0.1), show every widget's code and check that nothing scrolls the page sideways, widen it
to a laptop's and check the layout and that every widget draws exactly what the API answers for
the widget's parameters (one plotly trace per series of the answer's figures, and its tables
as given), save a full-page screenshot; then, opened again from a few steps' settings,
operate every control once (each slider, select, toggle and number box), checking the plot after
each change, and finally reload the address and check that every control and every plot comes
back the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from fit import PHONE, check_fits_a_phone, check_laid_out_on_a_laptop
from lab_traces import ALL_SETTLED, check_plot, open_lesson, settle, show_code, snapshot
from labpage import PRESETS, api, registry, screenshot

from normlab.lab.lessons import LESSONS

pytestmark = pytest.mark.browser

SLUGS = [lesson.slug for lesson in LESSONS]


def test_home_lists_every_lesson(page: Any, server: str) -> None:
    page.goto(server + "/")
    links = page.locator("ol.lesson-list a")  # the numbered lessons
    assert links.count() == len(LESSONS)
    hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
    assert hrefs == [lesson.url for lesson in LESSONS]
    assert page.locator(".tools .lesson-list a").get_attribute("href") == "/train"
    screenshot(page, "home.png", full_page=True)
    links.first.click()
    page.wait_for_url(f"**{LESSONS[0].url}")
    page.wait_for_function(ALL_SETTLED)


@pytest.mark.parametrize("slug", SLUGS)
def test_lesson_renders_live_widgets_and_fits_a_phone(page: Any, server: str, slug: str) -> None:
    """The lesson at its own settings, opened once: at 390 px, with every widget's code shown
    (its box scrolls itself), nothing scrolls the page sideways (tests/browser/fit.py); at
    1280 px it is laid out as on a laptop, and every widget draws what the API answers."""
    page.set_viewport_size(PHONE)
    ids = open_lesson(page, server, slug)
    lesson = next(le for le in LESSONS if le.slug == slug)
    assert [snapshot(page, w)["experiment"] for w in ids] == list(lesson.experiments)
    for wid in ids:
        show_code(page, wid)
    page.wait_for_function(ALL_SETTLED)
    check_fits_a_phone(page, slug)
    for wid in ids:
        assert snapshot(page, wid)["state"] == "ready"
        box = page.locator(f'.nl-widget[data-widget="{wid}"] .nl-code-box')
        assert box.evaluate("b => b.getBoundingClientRect().right") <= PHONE["width"]
    if slug == "doctor":
        screenshot(page, "doctor-phone.png", full_page=True)
    check_laid_out_on_a_laptop(page, slug)
    for wid in ids:
        snap = settle(page, wid)
        check_plot(server, snap)
        assert page.locator(f'.nl-widget[data-widget="{wid}"] .nl-table table').count() >= 1
    # navigation: home, and the neighbours
    assert page.locator('.pager-bottom a[href="/"]').count() >= 1
    i = SLUGS.index(slug)
    if i > 0:
        assert page.locator(f'.pager-bottom a[rel="prev"][href="/lessons/{SLUGS[i - 1]}"]').count()
    if i + 1 < len(SLUGS):
        assert page.locator(f'.pager-bottom a[rel="next"][href="/lessons/{SLUGS[i + 1]}"]').count()
    screenshot(page, f"{slug}.png", full_page=True)


def _controls(page: Any, wid: str) -> list[tuple[str, str | None]]:
    """(param, entry index) of every input and select of the widget."""
    items: list[list[Any]] = page.eval_on_selector_all(
        f'.nl-widget[data-widget="{wid}"] :is(input, select)[data-param]',
        "cs => cs.map(c => [c.dataset.param, c.dataset.index ?? null])",
    )
    return [(p, i) for p, i in items]


def _locate(page: Any, wid: str, param: str, index: str | None) -> Any:
    sel = f'.nl-widget[data-widget="{wid}"] :is(input, select)[data-param="{param}"]'
    if index is not None:
        sel += f'[data-index="{index}"]'
    return page.locator(sel)


def _only_choice(control: Any) -> bool:
    """A select that offers one option, which a user cannot change."""
    return bool(control.evaluate("c => c.tagName === 'SELECT' && c.options.length < 2"))


def operate(page: Any, control: Any) -> None:
    """Change one control a little, the way a user would."""
    kind = control.evaluate("c => c.tagName === 'SELECT' ? 'select' : c.type")
    if kind == "range":
        at_max = control.evaluate("c => Number(c.value) >= Number(c.max)")
        control.focus()
        page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")
    elif kind == "number":
        value = float(control.input_value())
        control.fill(str(int(value) + 1))
    elif kind == "checkbox":
        control.click()
    elif kind == "select":
        options = control.evaluate("c => [...c.options].map(o => o.value)")
        current = control.input_value()
        control.select_option(options[(options.index(current) + 1) % len(options)])
    else:
        raise AssertionError(f"unexpected control type {kind}")


def _after_change(page: Any, server: str, wid: str) -> dict[str, Any]:
    """Wait for the widget to answer its new settings; check the plot or the error shown."""
    wanted = page.evaluate(
        "id => document.querySelector(`.nl-widget[data-widget='${id}']`).nlParams", wid
    )
    experiment = snapshot(page, wid)["experiment"]
    status, answer = api(server, experiment, wanted)
    if status == 422:  # e.g. device cuda on a machine without one: shown in the widget
        page.guard.expect_422()
        snap = settle(page, wid, error=True)
        assert snap["error"]["message"] == answer["detail"]["message"]
        assert answer["detail"]["message"] in snap["errorText"]
        return snap
    snap = settle(page, wid)
    check_plot(server, snap)
    return snap


@pytest.mark.parametrize("slug", SLUGS)
def test_every_control_drives_the_plot_and_the_address(page: Any, server: str, slug: str) -> None:
    ids = open_lesson(page, server, slug, PRESETS.get(slug, ""))
    for summary in page.locator(".nl-widget details > summary").all():
        summary.click()
    declared = {e["name"]: {p["name"] for p in e["parameters"]} for e in registry(server)}
    for wid in ids:
        controls = _controls(page, wid)
        experiment = snapshot(page, wid)["experiment"]
        assert {param for param, _ in controls} == declared[experiment], f"{wid}: controls"
        for param, index in controls:
            if _only_choice(_locate(page, wid, param, index)):
                continue  # e.g. device on a machine without CUDA: nothing else to pick
            before = snapshot(page, wid)["params"]
            operate(page, _locate(page, wid, param, index))
            snap = _after_change(page, server, wid)
            assert snap["params"] != before, f"{wid}.{param} did not change the settings"
            assert f"{wid}.{param}=" in page.url, f"{wid}.{param} is not in the address"
            if snap["state"] == "error":  # put it back (cuda -> cpu), which must recover
                operate(page, _locate(page, wid, param, index))
                _after_change(page, server, wid)
    before = {wid: snapshot(page, wid) for wid in ids}
    url = page.url
    page.goto(url)
    page.wait_for_function(ALL_SETTLED)
    assert page.url == url
    for wid in ids:
        after = settle(page, wid)
        for key in ("params", "lastParams", "controls", "traces", "tables", "result"):
            assert after[key] == before[wid][key], f"{wid}: {key} not restored from the address"


def test_slider_bursts_are_debounced_and_superseded(page: Any, server: str) -> None:
    """Five quick slider steps: fewer requests than steps, the plot shows the last; then Reset."""
    ids = open_lesson(page, server, "drift")
    assert "drift" in ids
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    slider = _locate(page, "drift", "depth", None)
    start = snapshot(page, "drift")["params"]["depth"]
    slider.focus()
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    snap = settle(page, "drift")
    assert snap["lastParams"]["depth"] == start + 5
    assert len(posts) < 5
    check_plot(server, snap)
    assert "drift.depth=" in page.url
    # Reset: back to the page's own starting point, which leaves the address
    page.locator('.nl-widget[data-widget="drift"] .nl-reset').click()
    snap = settle(page, "drift")
    assert snap["params"]["depth"] == start
    assert "drift." not in page.url
    check_plot(server, snap)


def test_bad_address_value_is_shown_in_the_widget(page: Any, server: str) -> None:
    page.guard.expect_422()
    open_lesson(page, server, "drift", "?drift.depth=1000")
    snap = settle(page, "drift", error=True)
    assert snap["error"]["parameter"] == "depth"
    assert "depth" in snap["errorText"]
    assert page.locator('.nl-widget[data-widget="drift"] .nl-control.nl-invalid').count() == 1
    # the other widget on the page is untouched
    check_plot(server, settle(page, "linear-scale"))


def test_list_parameters_grow_and_shrink(page: Any, server: str) -> None:
    """A float_list control adds and removes entries; each change is a new run."""
    open_lesson(page, server, "batch-norm")
    box = page.locator('.nl-widget[data-widget="bn-columns"]')
    n = len(snapshot(page, "bn-columns")["params"]["scales"])
    box.locator(".nl-add").click()
    snap = settle(page, "bn-columns")
    assert len(snap["params"]["scales"]) == n + 1
    check_plot(server, snap)
    assert len(snap["result"]["output_stds"]) == n + 1
    box.locator(".nl-remove").last.click()
    snap = settle(page, "bn-columns")
    assert len(snap["params"]["scales"]) == n
    check_plot(server, snap)


def test_a_parameter_follows_its_partner_in_the_widget(page: Any, server: str) -> None:
    """``hist_layer`` is at most ``depth``: an address that disagrees is brought in line, and
    moving the depth below it takes it along, so the widget never asks for a refused pair."""
    open_lesson(page, server, "initialization", "?init-compare.depth=6&init-compare.hist_layer=9")
    snap = settle(page, "init-compare")
    assert (snap["params"]["depth"], snap["params"]["hist_layer"]) == (6, 6)
    assert snap["lastParams"]["hist_layer"] == 6 and not snap["error"]
    check_plot(server, snap)
    depth = _locate(page, "init-compare", "depth", None)
    depth.focus()
    page.keyboard.press("ArrowLeft")
    snap = settle(page, "init-compare")
    assert (snap["lastParams"]["depth"], snap["lastParams"]["hist_layer"]) == (5, 5)
    hist = page.locator(
        '.nl-widget[data-widget="init-compare"] .nl-control[data-param="hist_layer"] output'
    )
    assert hist.inner_text() == "5"
    assert "init-compare.hist_layer=5" in page.url


def test_formulas_are_set_in_the_lab_s_math_font(page: Any, server: str) -> None:
    """MathML laid out by an OpenType math font (served by the lab): a display fraction of
    the Xavier and He formulas stands 2.3 font sizes tall, as the font's fraction shifts make
    it; in the browser's default text font the same fractions measured 1.7 and 1.85."""
    open_lesson(page, server, "initialization")
    page.evaluate("() => document.fonts.ready")
    assert page.evaluate("() => document.fonts.check('20px \"normlab math\"')")
    sizes = page.evaluate(
        """() => [...document.querySelectorAll('math[display="block"]')]
          .filter((m) => m.querySelector('mfrac'))
          .map((m) => {
            const frac = m.querySelector('mfrac').getBoundingClientRect().height;
            return frac / parseFloat(getComputedStyle(m).fontSize);
          })"""
    )
    assert sizes and min(sizes) >= 2.1, sizes
    family = page.evaluate("() => getComputedStyle(document.querySelector('math')).fontFamily")
    assert family.startswith('"normlab math"')
