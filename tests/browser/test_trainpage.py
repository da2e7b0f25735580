"""/train in a real browser: a PyTorch run trained live, steered by its buttons and controls.

The lab runs as ``normlab lab`` serves it, without the lessons' warm-up (this page does not
need it): ``serve(create_app())`` in its own process. Every page is guarded by the ``page``
fixture (no console error, no request leaving 127.0.0.1). The runs are small (a few dozen
points, narrow nets), so that each frame costs milliseconds.
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from lab_traces import settle
from labpage import answers, lab_serving, screenshot

from normlab.trainview import GROUPS, PARAMETERS

pytestmark = pytest.mark.browser

SMALL = "dataset=moons&points=60&depth=2&width=8"
"""A setup whose steps take a few milliseconds."""
SIDE = "(k) => ({ ...document.querySelector(`.nl-train-side[data-side='${k}']`).dataset })"
DRAWN_Z = """(k) => {
  const side = document.querySelector(`.nl-train-side[data-side='${k}']`);
  const gd = side.querySelector('.nl-train-plot .nl-figure-plot');
  return gd && gd.data ? gd.data[0].z : null;
}"""
RUN = "() => document.querySelector('.nl-train').nlPage.link.run"
NEW_RUN = """(old) => {
  const r = document.querySelector('.nl-train').nlPage.link.run;
  return !!r && r.run !== old;
}"""
LOSSES = """() => {
  const [train, test] = document.querySelector('.nl-train-side').nlSide.frame.figures[0]
    .panels[1].series;
  return train.x.map((step, i) => ({ step, train: train.y[i], test: test.y[i] }));
}"""
"""The loss curves drawn (the server's history of the side, in its last frame's figure)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This module's lab (the ``page`` fixture opens pages on it); /train rendered once."""
    with lab_serving("create_app()", "/api/train", tmp_path_factory.mktemp("d")) as base:
        assert answers(f"{base}/train", timeout=120)  # its lesson's numbers: trained once, here
        yield base


def _side(page: Any, key: str = "a") -> dict[str, str]:
    found: dict[str, str] = page.evaluate(SIDE, key)
    return found


def _wait(page: Any, condition: str, key: str = "a") -> None:
    """Wait until ``condition`` (JS over ``s``, the side's dataset) holds."""
    page.wait_for_function(
        f"(k) => {{ const s = document.querySelector(`.nl-train-side[data-side='${{k}}']`)"
        f"?.dataset; return !!s && ({condition}); }}",
        arg=key,
    )


def _ready(page: Any, key: str = "a", step: int = 0) -> None:
    """Wait until the side has drawn the frame of ``step``."""
    _wait(page, f"s.state === 'ready' && s.drawn === '{step}' && s.step === '{step}'", key)


def _press(page: Any, action: str) -> None:
    page.locator(f".nl-train-bar button[data-action='{action}']").click()


def _runs(server: str) -> int:
    with urllib.request.urlopen(f"{server}/api/train", timeout=60) as r:
        count: int = json.loads(r.read())["runs"]
        return count


def _open(page: Any, server: str, query: str = SMALL) -> None:
    page.set_default_timeout(30_000)
    page.goto(f"{server}/train?{query}")
    _ready(page)


def test_play_pause_step_and_reset(page: Any, server: str) -> None:
    _open(page, server, SMALL + "&steps=0")
    start = page.evaluate(DRAWN_Z, "a")
    assert len(start) == 50 and page.locator(".nl-step-count").inner_text() == "0"
    _press(page, "play")
    _wait(page, "Number(s.frames) >= 6 && Number(s.step) >= 5 && s.playing === 'true'")
    assert int(page.locator(".nl-step-count").inner_text()) >= 5  # the counter follows
    _press(page, "pause")
    _wait(page, "s.playing === 'false'")
    paused = _side(page)
    # The stream keeps its order: a frame sent after the pause would come before the frames
    # of the step and the reset asked next, and be counted in ``frames``.
    _press(page, "step")
    step = int(paused["step"]) + 1
    _ready(page, step=step)
    frames = int(paused["frames"])
    assert int(_side(page)["frames"]) == frames + 1  # no frame after the pause, then the step's
    assert int(_side(page)["step"]) == step  # exactly one step
    trained = page.evaluate(DRAWN_Z, "a")
    assert trained != start  # the boundary heat map changed as it trained
    screenshot(page, "train.png", full_page=True)
    _press(page, "reset")
    _ready(page, step=0)
    assert int(_side(page)["frames"]) == frames + 2  # none between the step's and the reset's
    assert page.evaluate(DRAWN_Z, "a") == start  # the same initial boundary
    assert page.locator(".nl-step-count").inner_text() == "0"


def _other(p: Any, current: Any) -> Any:
    """Another value ``p`` allows than ``current``: a step (or a tenth of the range) away."""
    if p.kind == "choice":
        return "xavier" if p.name == "init" else next(c for c in p.choices if c != current)
    if p.kind == "bool":
        return not current
    if p.name == "lr":
        return 0.5
    if p.name == "batch_size":
        return 16
    step = p.step if p.kind == "int" or p.name == "seed" else (p.max - p.min) / 10
    up = current + step
    value = up if up <= p.max else current - step
    return int(value) if p.kind == "int" else round(value, 6)


def _change(page: Any, p: Any, current: Any) -> Any:
    """Set the control of ``p`` on side a to another value, as a learner would; the value."""
    side = ".nl-train-side[data-side='a']"
    box = page.locator(f"{side} :is(input, select)[data-param='{p.name}']").first
    value = _other(p, current)
    if p.kind == "choice":
        box.select_option(value)
    elif p.kind == "bool":
        box.click()
    elif box.get_attribute("type") == "range":
        log = box.get_attribute("data-scale") == "log"
        position = str(math.log10(value)) if log else str(value)
        box.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }", position)
    else:
        box.fill(str(value))
    return value


def test_every_control_changes_the_run(page: Any, server: str) -> None:
    _open(page, server)
    for p in PARAMETERS:
        run = page.evaluate(RUN)
        value = _change(page, p, run["setup"]["a"][p.name])
        before = run["run"]
        page.wait_for_function(
            "(old) => { const r = " + RUN[6:] + "; return r && r.run !== old; }", arg=before
        )
        _wait(page, "s.state === 'ready' && s.step === '0'")
        setup = page.evaluate(RUN)["setup"]["a"]
        assert setup[p.name] == pytest.approx(value), p.name
    query = parse_qs(urlsplit(page.url).query)
    assert {p.name for p in PARAMETERS} <= set(query)  # every setting in the address
    rows = page.locator(".nl-train-side[data-side='a'] .nl-table tbody tr").count()
    assert rows > 0


def test_the_address_reproduces_the_view(page: Any, server: str, browser: Any) -> None:
    _open(page, server, SMALL + "&seed=3")
    for want in (1, 2, 3):
        _press(page, "step")
        _ready(page, step=want)
    page.wait_for_function("() => location.search.includes('steps=3')")
    url = page.url
    z = page.evaluate(DRAWN_Z, "a")
    losses = page.evaluate(LOSSES)
    other = browser.new_page()
    try:
        other.set_default_timeout(30_000)
        other.goto(url)
        _ready(other, step=3)
        assert other.evaluate(DRAWN_Z, "a") == z  # replayed to the same step
        loss = other.evaluate(LOSSES)
        trained = [p for p in losses if p["step"] > 0]  # step 0 is not replayed: no loss yet
        assert loss == trained and [p["step"] for p in loss] == [1, 2, 3]
        assert (
            other.locator(".nl-train-side[data-side='a'] input[data-param='seed']").input_value()
            == "3"
        )
    finally:
        other.close()


def test_hide_and_lock(page: Any, server: str) -> None:
    _open(page, server, SMALL + "&hide=lr,speed&lock=depth,compare")
    side = ".nl-train-side[data-side='a']"
    assert not page.locator(f"{side} .nl-control[data-param='lr']").is_visible()
    assert not page.locator("[data-flag='speed']").is_visible()
    assert page.locator(f"{side} input[data-param='depth']").is_disabled()
    assert page.locator("input.nl-compare").is_disabled()
    assert page.locator(f"{side} select[data-param='activation']").is_enabled()
    page.locator(".nl-share summary").click()
    page.locator(".nl-share input[data-share='hide'][data-name='seed']").check()
    link = page.locator("input.nl-share-link").input_value()
    query = parse_qs(urlsplit(link).query)
    assert query["hide"] == ["lr,speed,seed"] and query["lock"] == ["depth,compare"]
    assert query["depth"] == ["2"] and urlsplit(link).path == "/train"


def test_compare_mode_shows_two_runs_on_the_same_data(page: Any, server: str) -> None:
    _open(page, server)
    page.locator("input.nl-compare").check()
    _ready(page, "b")
    assert page.locator(".nl-train-side[data-side='b']").is_visible()
    run = page.evaluate(RUN)
    assert run["sides"] == ["a", "b"] and run["data"]["a"] == run["data"]["b"]
    assert run["setup"]["b"]["norm"] == "batch" and run["setup"]["a"]["norm"] == "none"
    _press(page, "step")
    _ready(page, "a", step=1)
    _ready(page, "b", step=1)
    assert page.evaluate(DRAWN_Z, "a") != page.evaluate(DRAWN_Z, "b")
    assert "compare=1" in page.url and "b.norm=batch" in page.url
    kinds = page.locator(".nl-train-side[data-side='b'] .nl-table tbody tr td:nth-child(2)")
    assert "BatchNorm1d" in kinds.all_inner_texts()


CHOSEN = {"activation": "tanh", "norm": "batch", "optimizer": "adam", "dataset": "circles"}
"""What a learner sets on run A before ticking compare (a data setting among them)."""
PLOT = "(k) => document.querySelector(`.nl-train-side[data-side='${k}'] .nl-train-plot`)"


def _plot_box(page: Any, key: str) -> dict[str, float]:
    rect = f"(k) => ({PLOT})(k).getBoundingClientRect().toJSON()"
    box: dict[str, float] = page.evaluate(rect, key)
    return box


def test_compare_starts_from_run_a_as_it_is_and_lines_the_two_up(page: Any, server: str) -> None:
    """Ticking compare makes run B run A's whole current setup, data included, with one
    difference (the normalization); B shows every group A shows, the link's b. keys are B's
    real setup and bring both runs back; the two boundaries line up at the same size, side by
    side at 1280 px and one above the other at 390 px."""
    _open(page, server)
    side = ".nl-train-side[data-side='a']"
    for name, value in CHOSEN.items():
        page.locator(f"{side} select[data-param='{name}']").select_option(value)
    noise = next(p for p in PARAMETERS if p.name == "noise")
    chosen = {**CHOSEN, "noise": _change(page, noise, noise.default)}
    page.locator("input.nl-compare").check()
    _ready(page, "a")
    _ready(page, "b")
    run = page.evaluate(RUN)
    a, b = run["setup"]["a"], run["setup"]["b"]
    assert {k: a[k] for k in chosen} == pytest.approx(chosen)
    assert b == {**a, "norm": "none"} and run["data"]["a"] == run["data"]["b"]
    b_side = ".nl-train-side[data-side='b']"
    groups = page.locator(f"{b_side} fieldset.nl-train-group").evaluate_all(
        "(fs) => fs.map((f) => f.dataset.group)"
    )
    assert groups == list(GROUPS)  # the data group too
    for name in ("activation", "norm", "optimizer", "dataset"):
        assert page.locator(f"{b_side} select[data-param='{name}']").input_value() == b[name]
    page.locator(".nl-share summary").click()
    link = page.locator("input.nl-share-link").input_value()
    query = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
    own = [p.name for p in PARAMETERS if p.name not in GROUPS["data"]]
    assert {k: v for k, v in query.items() if k.startswith("b.")} == {
        f"b.{name}": _text(b[name]) for name in own
    }
    assert query["b.norm"] == "none" and query["norm"] == "batch"
    lined_up = [_plot_box(page, k) for k in "ab"]
    assert lined_up[0]["y"] == lined_up[1]["y"] and lined_up[0]["x"] < lined_up[1]["x"]
    assert lined_up[0]["width"] == lined_up[1]["width"]
    page.goto(link)  # the link brings both runs back
    _ready(page, "a")
    _ready(page, "b")
    again = page.evaluate(RUN)["setup"]
    assert again == {"a": pytest.approx(a), "b": pytest.approx(b)}
    screenshot(page.locator(".nl-train"), "train_compare.png")
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function(f"() => ({PLOT})('a').getBoundingClientRect().width < 390")
    stacked = [_plot_box(page, k) for k in "ab"]
    assert stacked[0]["width"] == stacked[1]["width"] and stacked[0]["y"] < stacked[1]["y"]
    page.locator(f"{b_side} select[data-param='dataset']").select_option("xor")  # both runs'
    assert page.locator(f"{side} select[data-param='dataset']").input_value() == "xor"
    query = parse_qs(urlsplit(page.url).query)
    assert query["dataset"] == ["xor"] and "b.dataset" not in query


HOLD = """() => {
  // A slow lab, as the page sees it: the held requests never answer (a held stream fails
  // only when the page gives up on it). Every stream the page opens is listed in `opened`.
  const real = window.fetch;
  Object.assign(window, { opened: [], hold: { streams: false, control: false } });
  window.fetch = (url, init) => {
    const stream = String(url).includes("/api/train/stream");
    if (stream) window.opened.push(String(url));
    const held = stream ? window.hold.streams && window.opened.length % 2 === 1
      : String(url).endsWith("/control") && window.hold.control;
    if (!held) return real(url, init);
    return new Promise((_, reject) => init.signal?.addEventListener("abort",
      () => reject(new DOMException("gone", "AbortError"))));
  };
}"""
"""The page's fetch, wrapped: its streams listed, and every other one (or a control) held."""


def _changed(page: Any, select: Any, value: str) -> dict[str, list[str]]:
    """Set ``select`` to ``value`` and wait until the page opens a stream: the stream's query."""
    count = page.evaluate("() => window.opened.length")
    select.select_option(value)
    page.wait_for_function(f"() => window.opened.length > {count}")
    return parse_qs(urlsplit(page.evaluate("() => window.opened.at(-1)")).query)


def test_rapid_changes_leave_one_run_playing_as_the_learner_asked(page: Any, server: str) -> None:
    """Ten setting changes, each once the page opened a new run, every other one of those
    runs held on its way (a slow lab: it never says it plays): the run that stays is the last
    one, alone on the server, and it plays, because the learner pressed Play. Then Pause, held
    on its way too, and a change: the new run does not play."""
    _open(page, server)
    page.evaluate(HOLD)
    _press(page, "play")
    _wait(page, "s.playing === 'true'")
    select = page.locator(".nl-train-side[data-side='a'] select[data-param='activation']")
    page.evaluate("() => { window.hold.streams = true; }")
    opened = [_changed(page, select, v) for v in ["tanh", "relu"] * 5]
    assert all(q["play"] == ["true"] for q in opened)  # not what a held run last said
    _wait(page, "s.playing === 'true' && Number(s.step) > 0")
    last = page.evaluate(RUN)["run"]
    deadline = time.monotonic() + 120  # a hang guard: a bug fails, a slow machine waits
    while _runs(server) != 1:
        assert time.monotonic() < deadline, "a replaced run outlived its page's change"
        time.sleep(0.1)
    frames = int(_side(page)["frames"])
    _wait(page, f"Number(s.frames) > {frames + 2} && s.run === '{last}'")  # the same run plays
    page.evaluate("() => { window.hold = { streams: false, control: true }; }")
    _press(page, "pause")  # held: the run's status still says it plays
    assert _changed(page, select, "tanh")["play"] == ["false"]  # as the learner asked
    _ready(page)
    assert _side(page)["playing"] == "false"


def _text(value: Any) -> str:
    """A setting as the address writes it (``true``/``false`` for a switch)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


EVERY_KIND = {"points": 60, "depth": 2, "width": 8, "seed": 3, "noise": 0.1, "bias": False}
"""A small setup that differs from the defaults in an int, a float and a switch."""
WIDGET_KEY = "linear-scale.scale=20"
"""A lesson widget's key, which the /train page does not own."""


def _every_kind_link() -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A /train query with a key of every kind the page reads, in the order it writes them: a
    widget's key (not its own: kept first), every setting, steps, speed, compare, the second
    run's own settings and the classroom flags; and both runs' setups."""
    a = {p.name: EVERY_KIND.get(p.name, p.default) for p in PARAMETERS}
    b = {**a, "activation": "tanh", "norm": "batch", "init": "xavier", "lr": 0.05}
    own = [p.name for p in PARAMETERS if p.name not in GROUPS["data"]]
    query = "&".join(
        [WIDGET_KEY]
        + [f"{p.name}={_text(a[p.name])}" for p in PARAMETERS]
        + ["steps=2", "speed=5", "compare=1"]
        + [f"b.{name}={_text(b[name])}" for name in own]
        + ["hide=lr,seed", "lock=depth,code"]
    )
    return query, a, b


def test_one_table_reads_a_link_and_writes_it_back_unchanged(page: Any, server: str) -> None:
    query, a, b = _every_kind_link()
    assert {p.kind for p in PARAMETERS} >= {"choice", "float", "int", "bool"}
    page.set_default_timeout(30_000)
    page.goto(f"{server}/train?{query}")
    _ready(page, "a", step=2)  # steps=2: replayed to it
    _ready(page, "b", step=2)
    setup = page.evaluate(RUN)["setup"]  # read: what the server trains
    assert setup["a"] == pytest.approx(a) and setup["b"] == pytest.approx(b)
    assert page.locator("select.nl-speed").input_value() == "5"
    assert page.locator("input.nl-compare").is_checked()
    side = ".nl-train-side[data-side='a']"
    assert not page.locator(f"{side} .nl-control[data-param='seed']").is_visible()  # hide=
    assert page.locator(f"{side} input[data-param='depth']").is_disabled()  # lock=
    # written back: the page drops steps until its replay reaches them, then the same link
    page.wait_for_function("() => location.search.includes('steps=2')")
    assert urlsplit(page.url).query == query
    page.locator(".nl-share summary").click()
    assert page.locator("input.nl-share-link").input_value() == f"{server}/train?{query}"


def test_a_widget_page_leaves_the_training_keys_alone(page: Any, server: str) -> None:
    """The same table on a widget's page: the /train keys are not its own, so they stay."""
    train = "depth=2&steps=3&compare=1&b.norm=batch&hide=lr,seed"
    page.goto(f"{server}/experiments/linear-scale?{train}&{WIDGET_KEY}", wait_until="load")
    snap = settle(page, "linear-scale")
    assert snap["params"]["scale"] == 20
    kept, _, own = urlsplit(page.url).query.partition("&linear-scale.")
    assert kept == train  # first, as they were
    assert parse_qs("linear-scale." + own)["linear-scale.scale"] == ["20"]


def test_show_the_code(page: Any, server: str) -> None:
    _open(page, server)
    _press(page, "step")
    _ready(page, step=1)
    page.locator(".nl-train-side[data-side='a'] .nl-code-toggle").click()
    page.wait_for_function(
        "() => document.querySelector('.nl-train-side .nl-code-panel').dataset.state === 'ready'"
    )
    text = page.locator(".nl-train-side[data-side='a'] .nl-code-box").inner_text()
    assert "steps=1," in text and "import normlab" not in text and "def training(" in text
    href = page.locator(".nl-train-side[data-side='a'] .nl-open-playground").get_attribute("href")
    assert href.startswith("/playground/train?") and "depth=2" in href


def test_a_bad_setting_is_named(page: Any, server: str) -> None:
    page.guard.expect_422()
    page.set_default_timeout(30_000)
    page.goto(f"{server}/train?depth=0")
    _wait(page, "s.state === 'error'")
    assert page.locator(".nl-train-side[data-side='a'] .nl-control[data-param='depth']").evaluate(
        "(n) => n.classList.contains('nl-invalid')"
    )
    assert "depth" in page.locator(".nl-train-side[data-side='a'] .nl-error").inner_text()


def test_a_build_that_fails_after_the_stream_opened_is_named(page: Any, server: str) -> None:
    """LSUV on a width-1 ReLU net cannot rescale a layer that puts out nothing: the stream has
    opened (200) before the build, and the refusal it ends with is shown as a 422 would be."""
    streams: list[int] = []
    page.on("response", lambda r: "/api/train/stream" in r.url and streams.append(r.status))
    page.set_default_timeout(30_000)
    page.goto(f"{server}/train?dataset=blobs&points=40&depth=3&width=1&init=lsuv")
    _wait(page, "s.state === 'error'")
    error = page.locator(".nl-train-side[data-side='a'] .nl-error").inner_text()
    assert "lsuv_ cannot rescale" in error
    assert streams == [200]


def test_leaving_the_page_stops_the_run(page: Any, server: str) -> None:
    _open(page, server)
    _press(page, "play")
    _wait(page, "Number(s.step) >= 3")
    assert _runs(server) >= 1
    page.goto(f"{server}/")
    deadline = time.monotonic() + 120  # a hang guard: a bug fails, a slow machine waits
    while _runs(server):
        assert time.monotonic() < deadline, "the run outlived its page"
        time.sleep(0.1)
