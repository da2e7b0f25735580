"""What the lab's pages render with: the Jinja environment, the page helpers, the vendored files.

The page routes (:mod:`normlab.lab.routes.pages`, :mod:`normlab.lab.routes.experiment_pages`)
render through the app's one :class:`Site` (``site`` of its
:class:`~normlab.lab.state.LabState`, made by :func:`~normlab.lab.app.create_app`);
:func:`warm_lessons` renders every lesson once at startup, filling the runner's cache.
Everything the lab serves comes from this machine: ``lab.js`` and ``lab.css`` from
:data:`STATIC`, plotly's script from the plotly wheel's own copy
(:func:`~normlab.lab.assets.plotly_js`), the formulas' font from :func:`math_font`.

Every lesson template can call these helpers:

- ``result(name, **params)``: the live Result dict, through the app's cached runner;
- ``num(x, digits=4)`` and ``sci(x, digits=3)``: numbers as the seeds print them;
- ``tex(latex, display=False)``: MathML rendered here; template text may also write
  ``\\( ... \\)`` and ``\\[ ... \\]``, which become ``tex`` calls;
- ``math``: the module, for predictions computed from formulas;
- ``thresholds``: the doctor's label thresholds (:mod:`normlab.doctor`);
- ``code`` (also a filter: ``{% filter code %}...{% endfilter %}``): a highlighted listing;
- ``widget(name, id=None, show=None, **params)``: a live widget for one experiment. ``params``
  are its starting values; ``show`` names the controls shown first (the rest fold away);
- ``train_view(caption, ...)``: the live training view in a frame, its settings preset.
"""

from __future__ import annotations

import functools
import html
import json
import math
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from jinja2 import (
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    PrefixLoader,
    StrictUndefined,
    select_autoescape,
)
from markupsafe import Markup

from normlab import __version__, doctor
from normlab.experiments import get_experiment
from normlab.lab import lessons
from normlab.lab.lessons.markup import MathExtension, code, num, sci, tex
from normlab.lab.requests import script_json
from normlab.lab.runner import RunCancelled
from normlab.lab.state import state_of
from normlab.trainview import make_setup

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


MATH_FONTS = (
    Path("/usr/share/fonts/truetype/dejavu/DejaVuMathTeXGyre.ttf"),  # Debian's fonts-dejavu-extra
    Path("/usr/share/fonts/opentype/stix/STIXTwoMath-Regular.otf"),  # fonts-stix
    Path("/usr/share/texmf/fonts/opentype/public/lm-math/latinmodern-math.otf"),  # fonts-lmodern
)
"""OpenType math fonts (with the MATH table that lays out fractions, roots and accents), the
first found served as ``/static/vendor/math-font``: the formulas' MathML is drawn with it in
any browser, whatever fonts its own machine has."""


def math_font() -> Path | None:
    """The first of :data:`MATH_FONTS` this machine has (``make`` installs the first)."""
    return next((p for p in MATH_FONTS if p.is_file()), None)


def environment() -> Environment:
    """The Jinja environment, autoescaped: the page templates (``home.html``, the layout
    ``lesson.html``, ...) and every lesson's page as ``lessons/<folder>/lesson.html``."""
    lesson_pages = PrefixLoader({"lessons": FileSystemLoader(lessons.HERE)})
    env = Environment(
        loader=ChoiceLoader([FileSystemLoader(TEMPLATES), lesson_pages]),
        autoescape=select_autoescape(("html",)),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[MathExtension],
    )
    env.globals.update(num=num, sci=sci, tex=tex, code=code, math=math, version=__version__)
    env.globals["lessons"] = lessons.LESSONS
    env.globals["thresholds"] = {
        "vanishing": doctor.VANISHING,
        "exploding": doctor.EXPLODING,
        "grad_vanishing": doctor.GRAD_VANISHING,
        "grad_exploding": doctor.GRAD_EXPLODING,
        "dead_frac": doctor.DEAD_FRAC,
        "saturated_frac": doctor.SATURATED_FRAC,
        "tanh_saturation": doctor.TANH_SATURATION,
        "sigmoid_saturation": doctor.SIGMOID_SATURATION,
        "symmetric_spread": doctor.SYMMETRIC_SPREAD,
    }
    env.filters["code"] = code
    env.filters["module_path"] = doctor.module_path  # "1.0" -> "model[1][0]"
    return env


class PageContext:
    """Helpers bound to one rendering: live results, and widgets with page-unique ids."""

    def __init__(self, run: Callable[[str, dict[str, Any]], dict[str, Any]]) -> None:
        self._run = run
        self._ids: set[str] = set()

    def result(self, name: str, **params: Any) -> dict[str, Any]:
        """The run's ``to_dict()`` (defaults unless given), cached by the app's runner."""
        return self._run(name, params)

    def widget(
        self,
        name: str,
        id: str | None = None,
        show: Sequence[str] | None = None,
        **params: Any,
    ) -> Markup:
        """Markup of a live widget; ``lab.js`` builds its controls from the registry."""
        experiment = get_experiment(name)
        wid = id or name
        if wid in self._ids:
            raise ValueError(f"widget id {wid!r} used twice on one page, pass id= to tell apart")
        self._ids.add(wid)
        declared = [p.name for p in experiment.parameters]
        shown = list(show) if show is not None else declared
        unknown = [n for n in shown if n not in declared]
        if unknown:
            raise ValueError(f"show names {unknown} not parameters of {name!r}, use {declared}")
        initial = self.result(name, **params)
        esc = html.escape
        return Markup(
            f'<figure class="nl-widget" id="widget-{esc(wid)}" data-widget="{esc(wid)}" '
            f'data-experiment="{esc(name)}" data-state="loading" '
            f'data-params="{esc(json.dumps(params))}" data-show="{esc(json.dumps(shown))}">'
            f'<figcaption class="nl-widget-head"><span class="nl-widget-title">'
            f"{esc(experiment.title)}</span> "
            f'<code class="nl-widget-name">{esc(name)}</code>'
            f'<span class="nl-widget-summary">{esc(experiment.summary)}</span></figcaption>'
            f'<div class="nl-controls"></div>'
            f'<div class="nl-status" role="status" aria-live="polite"></div>'
            f'<div class="nl-body"><div class="nl-plot"></div><div class="nl-table"></div></div>'
            f'<script type="application/json" class="nl-initial">{script_json(initial)}</script>'
            f'<noscript><p class="nl-note">This widget needs JavaScript.</p></noscript>'
            f"</figure>"
        )

    def train_view(
        self,
        caption: str,
        compare: dict[str, Any] | None = None,
        hide: Sequence[str] = (),
        lock: Sequence[str] = (),
        **setup: Any,
    ) -> Markup:
        """The live training view (``/train/embed``) in a frame, its settings preset: ``setup``
        (the run's, :data:`normlab.trainview.PARAMETERS`), ``compare`` (the second run's, in
        compare mode), and the classroom flags ``hide`` and ``lock``. Bad settings raise here,
        when the lesson renders."""
        make_setup(setup)
        query = {k: _cli(v) for k, v in setup.items()}
        if compare is not None:
            make_setup({**setup, **compare})
            query |= {"compare": "1"} | {f"b.{k}": _cli(v) for k, v in compare.items()}
        query |= {k: ",".join(v) for k, v in (("hide", hide), ("lock", lock)) if v}
        text = urllib.parse.urlencode(query)
        esc = html.escape
        return Markup(
            f'<figure class="nl-train-embed wide">'
            f'<iframe class="nl-train-frame" src="/train/embed?{esc(text)}" loading="lazy" '
            f'title="{esc(caption)}"></iframe>'
            f"<figcaption>{esc(caption)} "
            f'<a href="/train?{esc(text)}">Open it in the training view</a></figcaption>'
            f"</figure>"
        )


def _cli(value: object) -> str:
    """A setting as the address writes it (``true``/``false`` for a switch)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Site:
    """What the page routes share, built once per app: the Jinja environment and plotly's JS."""

    env: Environment
    plotly: Path

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """The page template ``name`` rendered with ``context``."""
        page = self.env.get_template(name).render(**context)
        return HTMLResponse(page, status_code=status)

    def render_lesson(
        self, found: lessons.Lesson, run: Callable[[str, dict[str, Any]], dict[str, Any]]
    ) -> HTMLResponse:
        """A lesson page, its live results from ``run``."""
        ctx = PageContext(run)
        before, after = lessons.neighbours(found)
        return self.render(
            found.template,
            lesson=found,
            previous=before,
            next=after,
            result=ctx.result,
            widget=ctx.widget,
            train_view=ctx.train_view,
        )


def warm_lessons(app: FastAPI) -> None:
    """Render every lesson once, so their live results sit in the cache, kept there for good
    (:meth:`~normlab.lab.runner.Runner.run`'s ``keep``: ad-hoc runs never evict them).

    Ends early when the lab shuts down: the runner is cancelled then
    (:meth:`~normlab.lab.runner.Runner.cancel`), so the run in progress stops at its next
    step and no other starts, and the lab does not exit with a training still running on a
    daemon thread.
    """
    state = state_of(app)
    try:
        for found in lessons.LESSONS:
            state.site.render_lesson(found, functools.partial(state.runner.run, keep=True))
    except RunCancelled:
        return
