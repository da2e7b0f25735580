"""The lab's pages without a browser: routes, live figures, offline assets, runnable listings."""

from __future__ import annotations

import html
import inspect
import json
import re
import urllib.parse
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import markupsafe
import pytest

with warnings.catch_warnings():  # starlette warns about its httpx-based client on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from normlab.experiments import get_experiment, script
from normlab.lab import assets, exercises, site
from normlab.lab.app import create_app
from normlab.lab.lessons import LESSONS, find, neighbours
from normlab.lab.lessons.exercise import ChoiceExercise, NumberExercise
from normlab.lab.lessons.markup import MathExtension, code, highlight, num, sci, tex
from normlab.lab.runner import Runner
from normlab.lab.sandbox import Limits, Sandbox

# the lab answers loopback Host names only (DNS-rebinding guard); TestClient says "testserver"
LAB = "http://127.0.0.1"

# Seed figures each lesson must show, computed live (see DESIGN.md).
FIGURES = {
    "drift": ["0.0322", "1.0280", "0.3545", "0.0993", "0.0535", "0.0768", "0.6876", "6.0035"],
    "batch-norm": ["0.5861", "0.5455", "0.6262", "[0.53, -0.28, -1.03]", "[7.27, 7.56, 10.97]"],
    "initialization": ["1.8924", "0.17675", "0.17678", "0.12582", "0.12500"],
    "bn-from-scratch": ["[1.71, 5.23, 5.05, 4.97]", "[0.54, 3.14, 3.06, 3.09]"],
    # beyond the seeds: every label of the doctor's vocabulary appears in its lesson
    "doctor": ["vanishing", "exploding", "dead", "saturated", "symmetric", "ok"],
}
STATIC = [
    "/static/lab.js",
    "/static/lab.css",
    "/static/favicon.svg",
    "/static/editor.js",
    "/static/playground.js",
    "/static/exercises.js",
    "/static/dom.js",
]
URL = re.compile(r"""https?://([^/\s"'<>)]+)""")
XMLNS = re.compile(r'xmlns(:\w+)?="http://www\.w3\.org/[^"]*"')


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner()


@pytest.fixture(scope="module")
def client(runner: Runner) -> Iterator[TestClient]:
    with TestClient(create_app(runner), base_url=LAB) as c:
        yield c


@pytest.fixture(scope="module")
def lesson_pages(client: TestClient) -> dict[str, str]:
    out = {}
    for lesson in LESSONS:
        r = client.get(lesson.url)
        assert r.status_code == 200, r.text[-2000:]
        assert r.headers["content-type"].startswith("text/html")
        out[lesson.slug] = r.text
    return out


def test_home_lists_every_lesson(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    listing = r.text.split('<ol class="lesson-list">', 1)[1].split("</ol>", 1)[0]
    links = re.findall(r'<a href="(/lessons/[^"]+)">', listing)
    assert links == [lesson.url for lesson in LESSONS]
    assert len(links) == len(LESSONS) >= 6  # the six seed lessons, then the newer ones
    for lesson in LESSONS:  # escaped as the template escapes them (' is &#39;)
        assert str(markupsafe.escape(lesson.title)) in r.text
        assert str(markupsafe.escape(lesson.summary)) in r.text


@pytest.mark.parametrize("slug", list(FIGURES))
def test_lesson_shows_live_seed_figures(lesson_pages: dict[str, str], slug: str) -> None:
    text = lesson_pages[slug]
    missing = [f for f in FIGURES[slug] if f not in text]
    assert not missing, f"{slug} lacks the figures {missing}"


def _largest_stable(sweep: dict[str, Any]) -> dict[bool, tuple[int, float]]:
    """Per setting (batch_norm): how many rates are stable, and the largest stable one."""
    out = {}
    for c in sweep["curves"]:
        stable = [i for i, ok in enumerate(c["stable"]) if ok]
        out[c["batch_norm"]] = len(stable), sweep["lrs"][stable[-1]]
    return out


def test_bn_from_scratch_tells_the_live_sweep(lesson_pages: dict[str, str], runner: Runner) -> None:
    """The sweep's numbers in the text are the run's: largest stable rates, counts, their ratio;
    the plain listing prints every third rate of it (4 of 12), which the text says."""
    text = lesson_pages["bn-from-scratch"]
    sweep = runner.run("bn-lr-sweep", {})  # what the page rendered (a cache hit)
    third = {
        "lrs": sweep["lrs"][::3],
        "curves": [{**c, "stable": c["stable"][::3]} for c in sweep["curves"]],
    }
    for part in (sweep, third):
        n = len(part["lrs"])
        for bn, (count, lr) in _largest_stable(part).items():
            which = "with" if bn else "without"
            printed = f"{which} BN: {count} of {n} rates stable, the largest {lr:.3g}"
            assert printed in text  # the listings' output
    assert re.search(r"every\s+third rate of the widget's grid", text)  # the page says so
    best = {bn: lr for bn, (_, lr) in _largest_stable(sweep).items()}
    plain, bn = best[False], best[True]
    assert plain < bn
    assert f"the stable region ends at a learning rate of {sci(plain)}." in text
    assert f"{sci(bn)}, the largest tried" in text or f"the largest {sci(bn)}" in text
    assert f"stable region {num(bn / plain, 1)} times further out" in text
    assert f"stable up to {sci(bn)} instead of {sci(plain)}" in text  # the key points


@pytest.mark.parametrize("slug", [lesson.slug for lesson in LESSONS])
def test_lesson_links_home_and_neighbours(lesson_pages: dict[str, str], slug: str) -> None:
    text = lesson_pages[slug]
    lesson = find(slug)
    assert lesson is not None
    before, after = neighbours(lesson)
    assert 'href="/"' in text
    if before is not None:
        assert f'rel="prev" href="{before.url}"' in text
    if after is not None:
        assert f'rel="next" href="{after.url}"' in text
    assert "<math" in text and "\\(" not in text and "\\[" not in text  # formulas rendered
    assert '<script src="/static/vendor/plotly.min.js"' in text
    experiments = re.findall(r'data-experiment="([^"]+)"', text)
    assert experiments == list(lesson.experiments)


def test_widget_markup_embeds_the_live_result(client: TestClient, runner: Runner) -> None:
    text = client.get("/lessons/drift").text
    blocks = re.findall(r'<script type="application/json" class="nl-initial">(.*?)</script>', text)
    embedded = [json.loads(b) for b in blocks]
    assert [e["experiment"] for e in embedded] == ["linear-scale", "drift"]
    assert embedded[1] == runner.run("drift", {})


def test_pages_use_the_runner_cache(client: TestClient, runner: Runner) -> None:
    client.get("/lessons/drift")
    misses = runner.misses
    client.get("/lessons/drift")
    assert runner.misses == misses  # the second render computed nothing


def test_unknown_lesson_is_a_404_page(client: TestClient) -> None:
    r = client.get("/lessons/no-such-lesson")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "no-such-lesson" in r.text and 'href="/"' in r.text


def test_static_files_and_vendored_plotly(client: TestClient) -> None:
    for path in STATIC:
        assert client.get(path).status_code == 200, path
    r = client.get("/static/vendor/plotly.min.js")
    assert r.status_code == 200
    assert "javascript" in r.headers["content-type"]
    assert r.content == assets.plotly_js().read_bytes()
    assert client.get("/favicon.ico").status_code == 200


def _outside_hosts(text: str) -> list[str]:
    text = XMLNS.sub("", text)  # XML namespace names are identifiers, never fetched
    hosts = [m.group(1) for m in URL.finditer(text)]
    return [h for h in hosts if h.split(":")[0] != "127.0.0.1"]


def test_nothing_points_outside_127_0_0_1(client: TestClient, lesson_pages: dict[str, str]) -> None:
    served = {path: client.get(path).text for path in ["/", "/lessons/nope", *STATIC]}
    served.update(lesson_pages)
    bad = {path: hosts for path, text in served.items() if (hosts := _outside_hosts(text))}
    assert not bad


_LISTING = re.compile(
    r'<pre class="nl-src" data-check="run"><code class="language-python">(.*?)</code></pre>'
    r'(?:<pre class="nl-out" aria-label="output">(.*?)</pre>)?',
    re.S,
)


def _text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _listings(page: str) -> list[tuple[str, str | None]]:
    """A page's runnable listings: (source, the output the page shows under it, if any)."""
    return [
        (_text(m.group(1)), None if m.group(2) is None else _text(m.group(2)))
        for m in _LISTING.finditer(page)
    ]


LISTING_LIMITS = Limits(wall_s=240.0, cpu_s=480.0)
"""The lab's sandbox limits but for time: the training listings (bn-lr, the symmetry MLP) take
seconds alone and far longer on a loaded test machine; a learner's Run has 10 s."""


RUN_LIMIT_S = Limits().wall_s
"""The playground's limit on a learner's Run: wall-clock seconds."""
CI_CORES = 2
"""The smallest machine the lab is built for: CI's two cores."""
LAB_RUNS = inspect.signature(Sandbox).parameters["max_runs"].default
"""Learners' Runs the lab's sandbox (``Sandbox()`` in ``create_app``) lets run at once."""
RUN_BUDGET_S = RUN_LIMIT_S * CI_CORES / LAB_RUNS
"""The CPU seconds (one torch thread) a listing offered with a Run button may take at the
page's own settings: with every one of the lab's sandbox slots busy on two cores, each Run gets
``CI_CORES / LAB_RUNS`` of a core, so a listing of this much CPU still prints within the wall
limit (issue 33: a sweep at 2.6 s of CPU timed out). CPU seconds only grow when other work shares
the machine (caches, memory bandwidth, the host's other guests): a listing of 1.95 s quiet
measured up to 3.30 s, the least of three runs, while the suite ran beside it (the sweep
listings of bn-from-scratch, now a third shorter), so a listing over the budget is run again,
alone, and judged by the least of its runs (see :func:`_own_cpu`)."""
RERUNS = 2
"""Solo runs a listing over :data:`RUN_BUDGET_S` gets before it is judged."""
CPU = (
    "\nimport resource as _r\n_u = _r.getrusage(_r.RUSAGE_SELF)\nprint(_u.ru_utime + _u.ru_stime)\n"
)
"""Appended to a listing: its process prints its own CPU seconds last."""


_WIDGET = re.compile(
    r'data-experiment="([^"]+)"[^>]*? data-params="([^"]*)".*?'
    r'<script type="application/json" class="nl-initial">(.*?)</script>',
    re.S,
)


def _widgets(page: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Each widget of a page at the page's own settings: (experiment, the code it shows and
    "Open in the playground" runs, the result it draws: the one embedded in the page)."""
    return [
        (
            name,
            script.render(get_experiment(name), json.loads(html.unescape(params))),
            json.loads(initial),
        )
        for name, params, initial in (m.groups() for m in _WIDGET.finditer(page))
    ]


def _widget_scripts(page: str) -> list[tuple[str, str]]:
    """The code each widget of a page shows (and "Open in the playground" runs) at the page's
    own settings: (experiment, script)."""
    return [(name, src) for name, src, _ in _widgets(page)]


@pytest.fixture(scope="module")
def listing_runs(lesson_pages: dict[str, str]) -> dict[str, tuple[str, float]]:
    """Every lesson's listings and widgets' scripts (at the page's settings), each run as a
    learner's Run runs it: as ``__main__`` of a fresh process in the lab's sandbox, with the
    lab's thread count (torch's thread count can change the last digits of a training run).
    Two at a time, as two cores allow. By source: (what it printed, its CPU seconds)."""
    named = [src for page in lesson_pages.values() for src, _ in _listings(page)]
    named += [src for page in lesson_pages.values() for _, src in _widget_scripts(page)]
    named = list(dict.fromkeys(named))
    with Sandbox(LISTING_LIMITS, max_runs=2) as sandbox, ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(sandbox.run, [src + CPU for src in named]))
    for src, run in zip(named, runs, strict=True):
        assert run.status == "ok", f"{run.status}: {run.stderr[-2000:]}\n{src}"
    return {src: _printed_and_cpu(run) for src, run in zip(named, runs, strict=True)}


def _printed_and_cpu(run: Any) -> tuple[str, float]:
    """What a listing run with :data:`CPU` appended printed, and its CPU seconds (its last line)."""
    printed, cpu = run.stdout.rstrip("\n").rpartition("\n")[::2]
    return (printed + "\n" if printed else "", float(cpu))


@pytest.fixture(scope="module")
def listings_printed(
    lesson_pages: dict[str, str], listing_runs: dict[str, tuple[str, float]]
) -> dict[str, list[str]]:
    """What every lesson's listings print (see :func:`listing_runs`)."""
    return {
        slug: [listing_runs[src][0] for src, _ in _listings(page)]
        for slug, page in lesson_pages.items()
    }


@pytest.mark.slow
def test_what_run_runs_fits_the_playground_s_limit(
    lesson_pages: dict[str, str], listing_runs: dict[str, tuple[str, float]]
) -> None:
    """Every listing with a Run button (a lesson's, and each widget's code at the page's own
    settings, which its playground link opens) takes at most :data:`RUN_BUDGET_S` of CPU."""
    cpus = {src: cpu for src, (_, cpu) in listing_runs.items()}
    over = {src: _own_cpu(src, cpu) for src, cpu in cpus.items() if cpu > RUN_BUDGET_S}
    over = {src: cpu for src, cpu in over.items() if cpu > RUN_BUDGET_S}
    assert not over, "\n\n".join(f"{cpu:.2f} s: {src[:300]}" for src, cpu in over.items())


def _own_cpu(src: str, measured: float) -> float:
    """A listing's own CPU seconds: the least of ``measured`` and :data:`RERUNS` more runs, one
    at a time (contention only adds CPU time, so the least is the nearest to the listing's
    cost on a quiet machine)."""
    runs = []
    with Sandbox(LISTING_LIMITS, max_runs=1) as sandbox:
        for _ in range(RERUNS):
            run = sandbox.run(src + CPU)
            assert run.status == "ok", f"{run.status}: {run.stderr[-2000:]}\n{src}"
            runs.append(_printed_and_cpu(run)[1])
            if runs[-1] <= RUN_BUDGET_S:
                break
    return min([measured, *runs])


@pytest.mark.slow
@pytest.mark.parametrize("slug", [lesson.slug for lesson in LESSONS])
def test_code_listings_run_and_print_what_the_page_shows(
    lesson_pages: dict[str, str], listings_printed: dict[str, list[str]], slug: str
) -> None:
    listings = _listings(lesson_pages[slug])
    if not listings:
        pytest.skip(f"{slug} has no runnable listing")
    printed = listings_printed[slug]
    for (src, shown), got in zip(listings, printed, strict=True):
        if shown is not None:
            assert got.strip() == shown.strip(), f"listing prints differently:\n{src}"


NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _table_numbers(tables: list[dict[str, Any]]) -> list[str]:
    """Every number written in the tables' cells, once each, in order."""
    found = [m for t in tables for row in t["rows"] for cell in row for m in NUMBER.findall(cell)]
    return list(dict.fromkeys(found))


def _is_printed(number: str, text: str) -> bool:
    """``number`` is in ``text``: the same value, however written ("0.50" is printed "0.5")."""
    return float(number) in {float(n) for n in NUMBER.findall(text)}


@pytest.mark.slow
@pytest.mark.parametrize("slug", [lesson.slug for lesson in LESSONS])
def test_widget_code_prints_every_number_of_the_widget_s_tables(
    lesson_pages: dict[str, str], listing_runs: dict[str, tuple[str, float]], slug: str
) -> None:
    """Every widget's code at the page's own settings, run as a learner's Run runs it (the
    playground link opens it; :func:`listing_runs` ran it), prints every number of the tables
    the widget shows at those settings (the result the page embeds). The browser test
    (tests/browser/test_show_code.py) presses Run in the playground for one widget a lesson."""
    lesson = find(slug)
    assert lesson is not None
    widgets = _widgets(lesson_pages[slug])
    assert [name for name, _, _ in widgets] == list(lesson.experiments)  # the parser missed none
    for name, src, shown in widgets:
        assert shown["experiment"] == name
        printed = listing_runs[src][0]
        missing = [n for n in _table_numbers(shown["tables"]) if not _is_printed(n, printed)]
        assert not missing, f"{slug}, {name}: {missing} of the table not printed:\n{printed}"


# -- every listing is plain PyTorch, or marked as the normlab version of the one before ----------

_BOX = re.compile(
    r'<div class="nl-code(?P<normlab> nl-code-normlab" data-normlab="true)?"'
    r' data-listing="(?P<id>[^"]+)">'
    r'(?:<p class="nl-code-label">(?P<label>.*?)</p>)?'
    r'<pre class="nl-src"[^>]*><code class="language-python">(?P<src>.*?)</code></pre>',
    re.S,
)
_IMPORTS_NORMLAB = re.compile(r"^\s*(?:from|import)\s+normlab\b", re.M)


def _sections(page: str) -> list[list[tuple[bool, str]]]:
    """Each ``<h2>`` section's listings (the lead before the first one too): (marked, source)."""
    article = page.split("<article", 1)[-1]
    return [
        [(m.group("normlab") is not None, _text(m.group("src"))) for m in _BOX.finditer(part)]
        for part in re.split(r"<h2[ >]", article)
    ]


@pytest.mark.parametrize("slug", [lesson.slug for lesson in LESSONS])
def test_listings_are_plain_pytorch_or_marked_normlab(
    lesson_pages: dict[str, str], slug: str
) -> None:
    """A listing that imports normlab is marked "in normlab" and repeats a plain listing of its
    section; an unmarked one imports nothing from normlab (issue 18)."""
    page = lesson_pages[slug]
    sections = _sections(page)
    boxes = re.findall(r'<div class="nl-code[ "]', page)
    assert sum(map(len, sections)) == len(boxes), "a listing the parser missed"
    for listings in sections:
        for i, (marked, src) in enumerate(listings):
            uses = _IMPORTS_NORMLAB.search(src) is not None
            assert uses == marked, f"{slug}: marked={marked} but imports normlab={uses}:\n{src}"
            if marked:
                assert any(not m for m, _ in listings[:i]), (
                    f"{slug}: no plain listing before\n{src}"
                )


@pytest.mark.parametrize("slug", [lesson.slug for lesson in LESSONS])
def test_every_listing_has_a_stable_id(lesson_pages: dict[str, str], slug: str) -> None:
    """Saved edits are kept by listing id, so each listing names its own (``code(..., id=)``):
    ``<slug>-<a name>``, never its position (``<slug>-3`` would move when a listing is added
    above it), and no two listings of the lab share one (the progress store keys them alone)."""
    page = lesson_pages[slug]
    boxes = re.findall(r'<div class="nl-code[ "][^>]*>', page)
    ids = [m.group("id") for m in _BOX.finditer(page)]
    assert len(ids) == len(boxes), f"{slug}: a listing without data-listing"
    for listing_id in ids:
        assert listing_id.startswith(f"{slug}-"), f"{slug}: {listing_id!r} lacks the lesson's slug"
        assert not re.fullmatch(rf"{re.escape(slug)}-\d+", listing_id), f"positional {listing_id!r}"
    everywhere = [m.group("id") for text in lesson_pages.values() for m in _BOX.finditer(text)]
    shared = sorted({i for i in ids if everywhere.count(i) > 1})
    assert not shared, f"listing ids used twice: {shared}"


def test_code_needs_a_valid_id() -> None:
    with pytest.raises(TypeError, match="id"):
        code("print(1)")  # type: ignore[call-arg]
    for bad in ("", "Drift-Stack", "drift stack", "x" * 65, 3):
        with pytest.raises(ValueError, match="listing id"):
            code("print(1)", id=bad)  # type: ignore[arg-type]
    assert 'data-listing="drift-stack"' in str(code("print(1)", id="drift-stack"))


def _has(*needles: str) -> Any:
    return lambda src: all(n in src for n in needles)


# The notebook's pieces and the seeds' snippets, each by the calls that define it: (piece, lesson,
# what its plain listing's source holds).
PIECES = [
    (
        "linear-scale: one Linear(4, 4), ten times the input",
        "drift",
        _has("torch.nn.Linear(4, 4)", "x * 10", ".std()"),
    ),
    ("the deep stack, left alone", "drift", _has("torch.nn.Linear(16, 16)", "torch.relu(")),
    (
        "the BN deep stack: Linear -> BatchNorm1d -> ReLU x10",
        "batch-norm",
        _has("torch.nn.Linear(16, 16)", "torch.nn.BatchNorm1d(16)", "range(10)"),
    ),
    (
        "the tiny 6-unit MLP and its tracking loop",
        "initialization",
        _has("torch.nn.Linear(2, 6)", "fill_(", "normal_(", ".weight.grad", "opt.step()"),
    ),
    (
        "the per-layer variance function, g^(2k)",
        "initialization",
        _has("def layer_variances", "torch.randn(width, width)", "unbiased=False", "** 80"),
    ),
    (
        "the ReLU stack over initializers",
        "initialization",
        _has("0.02", "0.30", "xavier_uniform", "he_normal", "torch.relu("),
    ),
    (
        "Xavier and He from scratch",
        "initialization",
        _has("torch.rand(fan_out, fan_in) * 2.0 - 1.0", "(2.0 / fan_in) ** 0.5"),
    ),
    (
        "Xavier and He against torch.nn.init",
        "initialization",
        _has("torch.nn.init.xavier_uniform_", "torch.nn.init.kaiming_normal_", "math.sqrt(6 /"),
    ),
    (
        "BatchNorm forward from scratch",
        "bn-from-scratch",
        _has("def batch_norm_forward", "unbiased=False", "torch.sqrt(var + eps)"),
    ),
    (
        "its running statistics: unbiased variance, the momentum rule",
        "bn-from-scratch",
        _has("running_var.mul_(1 - momentum)", "unbiased", "torch.nn.BatchNorm1d", ".eval()"),
    ),
    (
        "the BN / no-BN training loop: 4x64 MLP, two moons, lr 2.0, 150 steps",
        "bn-from-scratch",
        _has(
            "make_moons",
            "torch.nn.BatchNorm1d(64)",
            "range(4)",
            "lr=2.0",
            "range(150)",
            "opt.zero_grad()",
            "loss.backward()",
            "opt.step()",
        ),
    ),
    (
        "the learning-rate sweep: the bn-lr loop over log-spaced rates, stable or not",
        "bn-from-scratch",
        _has(
            "torch.logspace(math.log10(0.1), math.log10(3.0), 12)",
            "torch.nn.BatchNorm1d(64)",
            "range(150)",
            "losses[-10:]",
            "peak <= losses[0]",
            "opt.step()",
        ),
    ),
    ("forward hooks, what the doctor measures", "doctor", _has("register_forward_hook")),
]


@pytest.mark.parametrize(("piece", "slug", "holds"), PIECES, ids=[p[0] for p in PIECES])
def test_each_notebook_piece_has_its_plain_listing(
    lesson_pages: dict[str, str], piece: str, slug: str, holds: Any
) -> None:
    plain = [
        src for listings in _sections(lesson_pages[slug]) for marked, src in listings if not marked
    ]
    checked = {src for src, _ in _listings(lesson_pages[slug])}  # run by the test above
    found = [src for src in plain if holds(src)]
    assert found, f"{slug} has no plain listing of {piece}"
    assert all(src in checked for src in found), f"{piece}: its listing is not run and checked"


# -- the helpers ---------------------------------------------------------------------------------


def test_num_formats_like_the_seeds() -> None:
    assert num(0.35447144508361816) == "0.3545"
    assert num(-0.00001) == "0.0000"
    assert num([0.5273, -0.2841, -1.0287], 2) == "[0.53, -0.28, -1.03]"
    assert num(None) == "n/a"
    assert num(7) == "7"


def test_sci_uses_powers_of_ten() -> None:
    assert str(sci(4.76837158203125e-07)) == "4.77 × 10<sup>−7</sup>"
    assert str(sci(0.5548)) == "0.555"
    assert str(sci(0.0)) == "0"


def test_tex_is_mathml_without_namespace_urls() -> None:
    inline = str(tex("g^{2k}"))
    block = str(tex("\\frac{1}{n}", display=True))
    assert inline.startswith('<span class="nl-math">') and "<msup>" in inline
    assert 'display="block"' in block and "<mfrac>" in block
    assert "http" not in inline + block


def test_math_delimiters_become_tex_calls() -> None:
    src = "a \\(x_1\\) and \\[\\frac{a}{b}\\] end"
    out = MathExtension.rewrite(src)
    assert out == 'a {{ tex("x_1") }} and {{ tex("\\\\frac{a}{b}", display=True) }} end'


def test_code_listing_escapes_and_highlights() -> None:
    listing = str(code("    x = '<b>'  # tag\n    print(x)\n", output="<b>", id="a"))
    assert "&lt;b&gt;" in listing and "<b>" not in listing
    assert 'class="tok-c"' in listing and 'class="tok-b"' in listing
    assert 'data-check="run"' in listing
    assert "data-check" not in str(code("h = relu(", check=False, id="b"))
    same = str(code("print(1)", output="1", normlab=True, id="c"))
    assert 'data-normlab="true"' in same and ">The same in normlab</p>" in same
    assert ">In normlab</p>" in str(code("print(1)", normlab="In normlab", id="d"))
    assert "data-normlab" not in listing and "nl-code-label" not in listing
    assert str(highlight("if (")) == "if ("  # a fragment comes back escaped, unhighlighted


def test_widget_rejects_duplicate_ids_and_unknown_controls() -> None:
    ctx = site.PageContext(lambda name, params: {"experiment": name, "params": params})
    ctx.widget("drift")
    with pytest.raises(ValueError, match="used twice"):
        ctx.widget("drift")
    with pytest.raises(ValueError, match="not parameters"):
        ctx.widget("drift", id="other", show=["nope"])
    markup: Any = ctx.widget("drift", id="deep", depth=30)
    assert 'data-widget="deep"' in markup and "&quot;depth&quot;: 30" in markup


def test_the_math_font_is_served_by_the_lab(client: TestClient) -> None:
    path = site.math_font()
    assert path is not None, "make installs fonts-dejavu-extra: no math font found"
    r = client.get("/static/vendor/math-font")
    assert r.status_code == 200 and r.headers["content-type"].startswith("font/")
    assert r.content == path.read_bytes()
    css = client.get("/static/lab.css").text
    assert 'src: url("/static/vendor/math-font")' in css and '"normlab math"' in css


@pytest.mark.parametrize("slug", ["initialization", "bn-from-scratch"])
def test_lessons_embed_the_view(client: TestClient, slug: str) -> None:
    page = client.get(f"/lessons/{slug}").text
    (src,) = re.findall(r'<iframe class="nl-train-frame" src="([^"]+)"', page)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(html.unescape(src)).query)  # the preset
    assert query["compare"] == ["1"] and query["hide"] == ["compare"]
    assert client.get(html.unescape(src)).status_code == 200


# -- no exercise is answered, word for word, by the lesson above it -------------------------------

_COMMON = frozenset(
    re.findall(
        r"\w+",
        "a an and any are as at be by does each for from has in is it its no not of on one or "
        "so than that the their them they this to was what which with",
    )
)


def _prose(page: str) -> str:
    """The lesson's text a learner reads before the exercises: no markup, code, math or scripts."""
    body = page.split("<article", 1)[1].split('<section class="nl-exercises"', 1)[0]
    body = re.sub(r"<(script|style|pre|math)\b.*?</\1>", " . ", body, flags=re.S)
    body = re.sub(r"<(li|p|h\d|dt|dd|td|th|caption)\b", ". <", body)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def _longest_shared_run(answer: list[str], text: str) -> list[str]:
    """The longest run of consecutive words of ``answer`` that ``text`` also holds in a row."""
    joined = f" {' '.join(_words(text))} "
    best: list[str] = []
    for i in range(len(answer)):
        j = i + len(best) + 1
        while j <= len(answer) and f" {' '.join(answer[i:j])} " in joined:
            best, j = answer[i:j], j + 1
    return best


def _stem(word: str) -> str:
    for end in ("ing", "es", "ed", "s"):
        if word.endswith(end) and len(word) - len(end) >= 4:
            return word[: -len(end)]
    return word


def test_no_question_is_answered_word_for_word_above_it(
    lesson_pages: dict[str, str],
) -> None:
    """The right choice of every choice question, against the text of its lesson before the
    exercises (issue 33): no five words of it in a row, and no one sentence that holds three
    quarters of its words (those of meaning, stemmed); a number question's answer is not
    printed there (to 3 significant digits; one nonzero digit, as 0.1 or 20, is too common to
    mean anything). A learner who only matches words against the page must not find it; the
    questions ask for the lesson applied to a case it did not show."""
    found = []
    for ex in exercises.EXERCISES:
        if isinstance(ex, NumberExercise):  # its value, to the 3 digits a learner would type
            value = f"{ex.expected():.3g}"
            number = rf"(?<![\w.]){re.escape(value)}(?![\w]|\.\d)"
            one_digit = len(re.sub(r"\D", "", value).strip("0")) < 2  # 0.1, 20: found anywhere
            if not one_digit and re.search(number, _prose(lesson_pages[ex.lesson])):
                found.append(f"{ex.id}: its answer {value} is in the lesson")
        if not isinstance(ex, ChoiceExercise):
            continue
        right = next(c.text for c in ex.choices if c.correct)
        text = _prose(lesson_pages[ex.lesson])
        run = _longest_shared_run(_words(right), text)
        if len(run) >= 5:
            found.append(f"{ex.id}: {' '.join(run)!r} is in the lesson")
        meaning = {_stem(w) for w in _words(right) if w not in _COMMON}
        for sentence in re.split(r"(?<=[.;:!?])\s+", text):
            held = meaning & {_stem(w) for w in _words(sentence)}
            if len(held) >= 0.75 * len(meaning):
                found.append(f"{ex.id}: the sentence {' '.join(sentence.split())!r} holds it")
    assert not found, "\n".join(found)
