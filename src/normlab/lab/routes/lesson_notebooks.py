"""``GET /lessons/{slug}/notebook``: a lesson as a Jupyter notebook (the lesson page's
"Download this lesson as a notebook").

The notebook is :func:`normlab.lab.lessonbook.notebook`, its live numbers from the app's runner
(the lesson's own runs, kept in its cache as the page's are). A lesson's notebook is the same
for every request to one lab, so each is made once and kept (:data:`MADE`). An unknown slug
answers 404 in the lab's error shape, naming the valid ones.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response

from normlab.lab import lessonbook, lessons, schemas
from normlab.lab.errors import bad_input
from normlab.lab.requests import REFUSED, in_visit, refusal
from normlab.lab.state import lab_state

MADE: dict[str, str] = {}
"""Each lesson's notebook once made (``.ipynb`` text), by slug."""

SLUG = Annotated[
    str, Path(json_schema_extra={"enum": [lesson.slug for lesson in lessons.LESSONS]})
]  # fmt: skip


def _make(slug: str, run: lessonbook.Run) -> str:
    return lessonbook.dumps(lessonbook.notebook(slug, run))


async def lesson_notebook(slug: SLUG, request: Request) -> Any:
    try:
        lessonbook.lesson(slug)
    except ValueError as exc:
        return bad_input("slug", str(exc), status=404)
    if slug not in MADE:
        make = functools.partial(_make, slug)
        try:
            MADE[slug] = await in_visit(request, lab_state(request).runner, make, keep=True)
        except REFUSED as exc:
            return refusal(exc)
    return Response(
        MADE[slug],
        media_type="application/x-ipynb+json",
        headers={"Content-Disposition": f'attachment; filename="normlab-{slug}.ipynb"'},
    )


def router() -> APIRouter:
    """The lesson notebook route."""
    r = APIRouter()
    r.add_api_route(
        "/lessons/{slug}/notebook",
        lesson_notebook,
        methods=["GET"],
        tags=["lessons"],
        summary="A lesson as a Jupyter notebook",
        description="The lesson's text (its live numbers), its plain-PyTorch listings as code "
        "cells, each widget as a cell that builds it (normlab.widgets) and each exercise as a "
        "cell whose check() runs the lab's checker.",
        name="lesson_notebook",
        responses={
            **schemas.responses(schemas.NOTEBOOK, _404=schemas.error("no lesson of that name")),
            200: {
                "description": "the notebook",
                "content": {"application/x-ipynb+json": {"schema": schemas.NOTEBOOK}},
            },
        },
        response_class=Response,
    )
    return r
