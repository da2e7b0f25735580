"""The lab's pages: server-rendered lessons whose numbers come from live runs.

:func:`router` holds

- ``/`` (the lessons) and ``/lessons/{slug}`` (one lesson; an unknown slug answers a 404 page);
- ``/playground`` (the code editor; ``?experiment=NAME&...`` opens that experiment's script);
- ``/static/vendor/plotly.min.js``, served from the plotly wheel's own copy, and
  ``/static/vendor/math-font``, so the lab never fetches anything from outside 127.0.0.1;
- ``/favicon.ico``.

The rest of ``/static/...`` (``lab.js``, ``lab.css``) is :func:`static`, which
:func:`~normlab.lab.app.create_app` mounts after this router (a mount answers everything under
its prefix). The pages render with the app's :class:`~normlab.lab.site.Site` (``site`` of its
:class:`~normlab.lab.state.LabState`); what a lesson template can call is listed in
:mod:`normlab.lab.site`.
"""

from __future__ import annotations

import functools
import hashlib
import urllib.parse
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

from normlab.experiments import ParameterError, get_experiment, script
from normlab.experiments.base.params import params_dict
from normlab.lab import lessons
from normlab.lab.errors import bad_input
from normlab.lab.requests import REFUSED, in_visit, refusal
from normlab.lab.site import MATH_FONTS, STATIC
from normlab.lab.state import lab_state

STARTER = """import torch

torch.manual_seed(0)
x = torch.randn(64, 16)
print(f"mean {x.mean():.4f}, std {x.std():.4f}")
"""
"""What the playground holds when no experiment's code is opened in it."""


def home(request: Request) -> HTMLResponse:
    return lab_state(request).site.render("home.html")


async def lesson(slug: str, request: Request) -> Any:
    """A lesson, its live results kept in the cache (a lesson's set is fixed), stopped when its
    client has gone; a request from another site is given it only when they are cached."""
    state = lab_state(request)
    found = lessons.find(slug)
    if found is None:
        return state.site.render("404.html", status=404, slug=slug)
    render = functools.partial(state.site.render_lesson, found)
    try:
        return await in_visit(request, state.runner, render, keep=True)
    except REFUSED as exc:
        return refusal(exc)


def playground(request: Request) -> HTMLResponse:
    site = lab_state(request).site
    query = dict(request.query_params)
    name = query.pop("experiment", None)
    if name is None:
        return site.render(
            "playground.html", experiment=None, slug="playground", source=STARTER, error=None
        )
    try:
        experiment = get_experiment(name)
        declared = {p.name: p for p in experiment.parameters}
        unknown = [k for k in query if k not in declared]
        if unknown:
            raise ParameterError(unknown[0], f"unknown parameter {unknown[0]!r} for {name!r}")
        params = experiment.make_params({k: declared[k].parse(v) for k, v in query.items()})
    except (ValueError, TypeError) as exc:  # an unknown name or a bad value, named
        return site.render(
            "playground.html",
            status=422,
            experiment=None,
            slug="playground",
            source=STARTER,
            error=f"Could not open that code: {exc}",
        )
    source = script.render(experiment, params)
    digest = hashlib.sha1(source.encode()).hexdigest()[:8]  # edits kept per code shown
    return site.render(
        "playground.html",
        experiment=experiment,
        params=params_dict(params),
        slug=f"playground-{name}-{digest}",
        source=source,
        error=None,
        notebook_url=f"/api/experiments/{name}/notebook?{urllib.parse.urlencode(query)}",
    )


def vendor_plotly(request: Request) -> FileResponse:
    return FileResponse(
        lab_state(request).site.plotly,
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=86400"},
    )


def vendor_math_font(request: Request) -> Any:
    path = lab_state(request).math_font
    if path is None:
        names = ", ".join(str(p) for p in MATH_FONTS)
        return bad_input(None, f"no math font on this machine (looked for {names})", 404)
    kind = "font/otf" if path.suffix == ".otf" else "font/ttf"
    return FileResponse(path, media_type=kind, headers={"Cache-Control": "public, max-age=86400"})


def favicon() -> FileResponse:
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


def static() -> StaticFiles:
    """``lab.js``, ``lab.css`` and the rest of :data:`~normlab.lab.site.STATIC`, to mount at
    ``/static`` after :func:`router` (whose vendored files it would otherwise shadow)."""
    return StaticFiles(directory=STATIC)


def router() -> APIRouter:
    """The pages and the vendored files (left out of the OpenAPI document)."""
    r = APIRouter(include_in_schema=False)
    for path, endpoint, name in (
        ("/", home, "home"),
        ("/lessons/{slug}", lesson, "lesson"),
        ("/static/vendor/plotly.min.js", vendor_plotly, "plotly"),
        ("/static/vendor/math-font", vendor_math_font, None),
        ("/playground", playground, "playground"),
        ("/favicon.ico", favicon, None),
    ):
        r.add_api_route(path, endpoint, methods=["GET"], name=name)
    return r
