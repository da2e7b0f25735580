"""The registry over HTTP: ``/api/experiments`` and one set of routes per experiment.

``GET /api/experiments`` lists every experiment with its parameter schemas; ``POST
/api/experiments/{name}`` validates a JSON object of parameters against the registry and answers
the Result's ``to_dict()``. Bad input answers 422 with ``{"detail": {"parameter", "message"}}``.
``GET /api/experiments/{name}/code`` and ``/notebook`` give the plain-PyTorch script behind the
answer. The OpenAPI document carries each experiment's parameter schema, generated from the same
declarations: :func:`router` writes one route per experiment registered when it is called.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from normlab import notebook
from normlab.experiments import Experiment, list_experiments, script
from normlab.experiments.base.params import params_dict
from normlab.lab import schemas
from normlab.lab.lessons.markup import highlight
from normlab.lab.requests import (
    REFUSED,
    bound,
    client_gone,
    foreign,
    query_params,
    query_schema,
    read_params,
    refusal,
)
from normlab.lab.state import lab_state


def describe(e: Experiment) -> dict[str, Any]:
    """What ``GET /api/experiments`` says of one experiment (the widgets are built from it)."""
    return {
        "name": e.name,
        "title": e.title,
        "summary": e.summary,
        "trains": e.trains,
        "streams": e.streams,
        "parameters": [p.schema() for p in e.parameters],
    }


def experiments() -> list[dict[str, Any]]:
    """``GET /api/experiments``: the registry, with every parameter's schema."""
    return [describe(e) for e in list_experiments()]


async def run(name: str, request: Request) -> Any:
    """``POST /api/experiments/NAME``: the answer for a JSON object of parameters."""
    params = await read_params(request)
    if isinstance(params, JSONResponse):
        return params
    try:
        body = await lab_state(request).runner.arun_json(
            name, params, gone=lambda: client_gone(request)
        )
        return Response(content=body, media_type="application/json")
    except REFUSED as exc:
        return refusal(exc)


async def code(name: str, request: Request) -> Any:
    """``GET /api/experiments/NAME/code``: the script behind the answer, plain and highlighted."""
    try:
        experiment, params = query_params(name, request)
    except REFUSED as exc:
        return refusal(exc)
    text, html = await anyio.to_thread.run_sync(_script, experiment, params)  # tens of ms:
    return {  # off the event loop, which keeps answering other requests meanwhile
        "experiment": name,
        "params": params_dict(params),
        "script": text,
        "html": html,
    }


def _script(experiment: Experiment, params: object) -> tuple[str, str]:
    """The script for ``params`` and its highlighted HTML."""
    text = script.render(experiment, params)
    return text, str(highlight(text))


async def download(name: str, request: Request) -> Any:
    """``GET /api/experiments/NAME/notebook``: the script as a notebook, with its output and
    the figures the widget shows, drawn."""
    try:
        experiment, params = query_params(name, request)
        body = await lab_state(request).runner.arun_json(
            name, params_dict(params), gone=lambda: client_gone(request), refuse=foreign(request)
        )
    except REFUSED as exc:
        return refusal(exc)
    answer = json.loads(body)
    make = functools.partial(
        notebook.notebook, experiment, params, answer["output"], answer["figures"]
    )
    nb = await anyio.to_thread.run_sync(make)  # drawing takes a second: off the event loop
    return Response(
        notebook.dumps(nb),
        media_type="application/x-ipynb+json",
        headers={"Content-Disposition": f'attachment; filename="normlab-{name}.ipynb"'},
    )


def _add_run(r: APIRouter, e: Experiment) -> None:
    """``POST /api/experiments/NAME``, its body the experiment's parameters."""
    r.add_api_route(
        f"/api/experiments/{e.name}",
        bound(run, e.name),
        methods=["POST"],
        tags=["experiments"],
        summary=e.title,
        description=e.summary + ". Missing parameters take their defaults.",
        name=f"run_{e.name}",
        responses=schemas.responses(schemas.answer(e), "the Result, its figures and tables"),
        openapi_extra={
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": schemas.params_object(e.parameters)}},
            },
        },
    )


def _add_code(r: APIRouter, e: Experiment) -> None:
    """``GET /api/experiments/NAME/code`` and ``/notebook``, the parameters in the query."""
    query = {"parameters": [query_schema(p) for p in e.parameters]}
    r.add_api_route(
        f"/api/experiments/{e.name}/code",
        bound(code, e.name),
        methods=["GET"],
        tags=["code"],
        summary=f"The plain-PyTorch code of {e.name}",
        description="The script that computes the experiment for these parameters (query "
        "values as the CLI takes them), plain and highlighted. It needs no normlab.",
        name=f"code_{e.name}",
        responses=schemas.responses(schemas.code(e)),
        openapi_extra=query,
    )
    r.add_api_route(
        f"/api/experiments/{e.name}/notebook",
        bound(download, e.name),
        methods=["GET"],
        tags=["code"],
        summary=f"{e.name} as a Jupyter notebook",
        description="The same code as an .ipynb download, with what it prints as outputs.",
        name=f"notebook_{e.name}",
        responses={
            **schemas.responses(schemas.NOTEBOOK),
            200: {
                "description": "the notebook",
                "content": {"application/x-ipynb+json": {"schema": schemas.NOTEBOOK}},
            },
        },
        openapi_extra=query,
        response_class=Response,
    )


def router() -> APIRouter:
    """``GET /api/experiments``, then run, code and notebook routes for every experiment
    registered now, then ``POST /api/experiments/{name}`` for any other name (a 422 naming
    it; left out of the document)."""
    r = APIRouter()
    r.add_api_route(
        "/api/experiments",
        experiments,
        methods=["GET"],
        tags=["experiments"],
        summary="Every experiment and its parameters",
        responses=schemas.responses(schemas.experiment_list()),
    )
    for e in list_experiments():
        _add_run(r, e)
        _add_code(r, e)
    r.add_api_route("/api/experiments/{name}", run, methods=["POST"], include_in_schema=False)
    return r
