"""A page for every registered experiment: ``/experiments`` and ``/experiments/{name}``.

Both pages (:func:`router`, rendered with the app's :class:`~normlab.lab.site.Site`) are
generated from the registry (:func:`~normlab.experiments.list_experiments`), so an experiment
is in the lab as soon as it is registered, before any lesson embeds it:

- ``/experiments`` lists every experiment: its title, its summary and a link;
- ``/experiments/{name}`` shows the experiment's live widget, built as a lesson's
  ``widget(name)`` builds it (controls from the registry, figures from the generic renderer,
  Show the code and Download notebook), from the cached run of its defaults. That run's tables
  are also written into the page for a browser without JavaScript. An unknown name answers a
  404 page that lists the valid ones.

The run of an experiment's defaults is *kept*, as a lesson's answers are
(:mod:`normlab.lab.runner`): every visitor of the page sees the same run, one per registered
experiment (a fixed set: the cache stays bounded), so it is never evicted by ad-hoc requests
and goes to the lab's answers store, and a lab started again shows the page at once. A lesson
that embeds the experiment at its defaults shares that answer.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup, escape

from normlab.experiments import Experiment, UnknownExperiment, get_experiment, list_experiments
from normlab.lab import lessons
from normlab.lab.lessons.markup import tex
from normlab.lab.requests import REFUSED, Run, in_visit, refusal
from normlab.lab.site import PageContext, Site
from normlab.lab.state import lab_state

_ROLE = re.compile(r":math:`([^`]+)`|:\w+:`(~?)([^`]+)`|``([^`]+)``")
"""The reST a docstring's text uses inline: math, cross-references (``:func:`~a.b```) and code."""


def _inline(match: re.Match[str]) -> str:
    latex, short, ref, literal = match.groups()
    if latex is not None:
        return str(tex(latex))
    if ref is not None:  # ``:func:`~a.b``` reads ``b``, as Sphinx shows it
        return f"<code>{escape(ref.rsplit('.', 1)[-1] if short else ref)}</code>"
    return f"<code>{escape(literal)}</code>"


def docstring_html(text: str) -> Markup:
    """The first paragraph of a docstring as HTML: reST's inline code and math rendered.

    >>> str(docstring_html("The std for the batch times ``scale``.\\n\\nMore."))
    'The std for the batch times <code>scale</code>.'
    """
    first = " ".join(inspect.cleandoc(text).split("\n\n", 1)[0].split())
    out, at = [], 0
    for match in _ROLE.finditer(first):
        out += [str(escape(first[at : match.start()])), _inline(match)]
        at = match.end()
    return Markup("".join([*out, str(escape(first[at:]))]))


def about(experiment: Experiment) -> Markup | None:
    """What the experiment's code says it does: its entry function's docstring, if it has one."""
    doc = inspect.getdoc(experiment.entry)
    return docstring_html(doc) if doc else None


def index(request: Request) -> HTMLResponse:
    return lab_state(request).site.render(
        "experiments.html", experiments=list_experiments(), current="experiments"
    )


async def experiment_page(name: str, request: Request) -> Any:
    """The page, its defaults' run kept (see the module docstring), and stopped when its client
    has gone (refused, when it would compute, for a request from another site)."""
    state = lab_state(request)
    try:
        experiment = get_experiment(name)
    except UnknownExperiment:
        return state.site.render(
            "experiment_404.html",
            status=404,
            missing=name,
            experiments=list_experiments(),
            current="experiments",
        )
    try:
        return await in_visit(
            request, state.runner, lambda run: _render(state.site, experiment, run), keep=True
        )
    except REFUSED as exc:
        return refusal(exc)


def _render(site: Site, experiment: Experiment, run: Run) -> HTMLResponse:
    ctx = PageContext(run)
    widget = ctx.widget(experiment.name)  # the defaults' run, from the runner's cache
    initial: dict[str, Any] = ctx.result(experiment.name)
    names = [e.name for e in list_experiments()]
    return site.render(
        "experiment.html",
        experiment=experiment,
        number=names.index(experiment.name) + 1,
        count=len(names),
        about=about(experiment),
        widget=widget,
        tables=initial["tables"],
        used_in=[le for le in lessons.LESSONS if experiment.name in le.experiments],
        current="experiments",
    )


def router() -> APIRouter:
    """``/experiments`` and ``/experiments/{name}`` (left out of the OpenAPI document)."""
    r = APIRouter(include_in_schema=False)
    r.add_api_route("/experiments", index, methods=["GET"], name="experiments")
    r.add_api_route("/experiments/{name}", experiment_page, methods=["GET"], name="experiment")
    return r
