"""The OpenAPI document's schemas: what every route answers, said once and generated.

Nothing here is written per experiment. A parameter's JSON Schema comes from its declaration
(:class:`~normlab.experiments.Parameter`); an experiment's answer (``POST
/api/experiments/NAME``) is its ``Result`` dataclass read by pydantic, with ``params`` as the
experiment's own parameters and the ``figures``, ``tables`` and ``output`` the lab adds
(:func:`normlab.lab.runner.answer`). Floats may be ``null``: a non-finite number (a diverged
loss) is sent as ``null`` so that the JSON stays strict. The lab's error shape,
``{"detail": {"parameter", "message"}}``, is one component, ``LabError``, and
:data:`ERRORS` documents the refusals every route may answer with it.

:func:`install` puts the shared components (``LabError``, ``Figure``, ``Table`` and the
dataclasses results hold) into the app's document.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from fastapi import FastAPI
from pydantic import TypeAdapter

from normlab.experiments import Experiment, Parameter
from normlab.figures import Figure, Table

JSON = dict[str, Any]
_REF = "#/components/schemas/{model}"

COMPONENTS: dict[str, JSON] = {
    "LabError": {
        "type": "object",
        "description": "The lab's one error shape: the parameter at fault (null when the "
        "request as a whole is wrong) and what is allowed.",
        "required": ["detail"],
        "properties": {
            "detail": {
                "type": "object",
                "required": ["parameter", "message"],
                "properties": {
                    "parameter": {"type": ["string", "null"]},
                    "message": {"type": "string"},
                },
            }
        },
    }
}
"""The document's shared schemas, by name (the dataclasses' are added as routes declare them)."""


def ref(name: str) -> JSON:
    """A reference to the shared schema ``name``."""
    return {"$ref": _REF.format(model=name)}


def error(description: str) -> JSON:
    """One refusal in the lab's error shape, for a ``responses=`` entry."""
    return {
        "description": description,
        "content": {"application/json": {"schema": ref("LabError")}},
    }


ERRORS: dict[int | str, JSON] = {
    403: error("refused by the lab's guard: a Host that is not loopback, a missing token, "
               "or a state change sent from another site's page"),
    413: error("the request body is larger than the route reads"),
    415: error("a state change with a body that is not Content-Type: application/json"),
    422: error("a parameter (or the body) outside what it allows; the message says what is"),
    500: error("the lab failed on this request (it goes on serving)"),
    503: error("the lab cannot serve it now (busy, stopping, or its database or sandbox "
               "failed); the message says why"),
}  # fmt: skip
"""Every refusal a route may answer, in the lab's error shape (routes add their 404s)."""


def responses(
    ok: JSON, description: str = "Successful Response", **more: JSON
) -> dict[int | str, JSON]:
    """``responses=`` for a JSON route answering ``ok`` (a schema), plus :data:`ERRORS` and
    ``more`` (status code as ``_404``: its response)."""
    answers: dict[int | str, JSON] = {
        200: {"description": description, "content": {"application/json": {"schema": ok}}}
    }
    answers.update(ERRORS)
    answers.update({int(code.lstrip("_")): r for code, r in more.items()})
    return answers


def of_type(tp: Any) -> JSON:
    """The JSON Schema of a (data)class as it is sent: its nested dataclasses become shared
    components, and every number may be ``null`` (non-finite ones are sent as null)."""
    schema = TypeAdapter(tp).json_schema(mode="serialization", ref_template=_REF)
    for name, sub in schema.pop("$defs", {}).items():
        _share(name, _nullable(sub))
    nullable: JSON = _nullable(schema)
    return nullable


def _share(name: str, schema: JSON) -> None:
    """Add ``schema`` to :data:`COMPONENTS` as ``name`` (the same name must mean the same)."""
    if COMPONENTS.setdefault(name, schema) != schema:
        raise ValueError(f"two different schemas are both named {name!r}")


def _nullable(schema: Any) -> Any:
    """``schema`` with every ``{"type": "number"}`` allowing ``null`` too, and non-finite
    numbers (a ``nan`` default) as the ``null`` they are sent as."""
    if isinstance(schema, list):
        return [_nullable(s) for s in schema]
    if isinstance(schema, float) and not math.isfinite(schema):
        return None
    if not isinstance(schema, dict):
        return schema
    out = {k: _nullable(v) for k, v in schema.items()}
    if out.get("type") == "number":
        out["type"] = ["number", "null"]
    return out


@functools.cache
def shared() -> None:
    """Declare the figure and table components (once)."""
    _share("Figure", of_type(Figure))
    _share("Table", of_type(Table))


def parameter(p: Parameter) -> JSON:
    """One parameter as JSON Schema (for OpenAPI): its type, bounds or choices, default; a
    bound by another parameter, which JSON Schema cannot state, is said in the description."""
    schema: JSON = {"description": p.help}
    if p.follows is not None:
        relation, partner = p.follows
        schema["description"] = f"{p.help} (must be {relation} {partner})"
    if p.kind == "float_list":
        schema.update(
            type="array",
            minItems=1,
            maxItems=p.max_len,
            items={"type": "number", "minimum": p.min, "maximum": p.max},
            default=list(p.default),
        )
        return schema
    kind = {"int": "integer", "float": "number", "bool": "boolean", "choice": "string"}[p.kind]
    schema.update(type=kind, default=p.default)
    if p.min is not None:
        schema["minimum"] = p.min
    if p.max is not None:
        schema["maximum"] = p.max
    if p.choices is not None:
        schema["enum"] = list(p.choices)
    return schema


def params_object(parameters: tuple[Parameter, ...], *, complete: bool = False) -> JSON:
    """An object of these parameters (no others); ``complete``: every one present, as an
    answer states them."""
    schema: JSON = {
        "type": "object",
        "additionalProperties": False,
        "properties": {p.name: parameter(p) for p in parameters},
    }
    if complete:
        schema["required"] = [p.name for p in parameters]
    return schema


PARAMETER_SCHEMA: JSON = {
    "type": "object",
    "description": "A declared parameter, as the widgets and the CLI read it.",
    "required": ["name", "kind", "help", "default"],
    "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["int", "float", "bool", "choice", "float_list"]},
        "help": {"type": "string"},
        "default": {},
        "min": {"type": "number"},
        "max": {"type": "number"},
        "step": {"type": "number"},
        "max_len": {"type": "integer"},
        "choices": {"type": "array", "items": {"type": "string"}},
        "follows": {
            "type": "object",
            "required": ["relation", "partner"],
            "properties": {"relation": {"type": "string"}, "partner": {"type": "string"}},
        },
    },
}
"""What :meth:`Parameter.schema` describes (``GET /api/experiments``, ``GET /api/train``)."""
COMPONENTS["Parameter"] = PARAMETER_SCHEMA


def experiment_list() -> JSON:
    """``GET /api/experiments``: the registry."""
    return {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name", "title", "summary", "trains", "streams", "parameters"],
            "properties": {
                "name": {"type": "string"},
                "title": {"type": "string"},
                "summary": {"type": "string"},
                "trains": {"type": "boolean"},
                "streams": {"type": "boolean"},
                "parameters": {"type": "array", "items": ref("Parameter")},
            },
        },
    }


def answer(e: Experiment) -> JSON:
    """``POST /api/experiments/NAME``: the Result's fields, its parameters, its figures and
    tables, and what its script prints."""
    shared()
    schema = of_type(e.result_type)
    props = schema.setdefault("properties", {})
    props.update(
        experiment={"const": e.name},
        params=params_object(e.parameters, complete=True),
        figures={"type": "array", "items": ref("Figure")},
        tables={"type": "array", "items": ref("Table")},
        output={"type": "string", "description": "what the experiment's script prints"},
    )
    fields = [f.name for f in dataclasses.fields(e.result_type)]
    schema["required"] = sorted({*fields, "figures", "tables", "output"})
    schema["title"] = f"{e.result_type.__name__} of {e.name}"
    return schema


def code(e: Experiment) -> JSON:
    """``GET /api/experiments/NAME/code``: the script, plain and highlighted."""
    return {
        "type": "object",
        "required": ["experiment", "params", "script", "html"],
        "properties": {
            "experiment": {"const": e.name},
            "params": params_object(e.parameters, complete=True),
            "script": {"type": "string"},
            "html": {"type": "string"},
        },
    }


NOTEBOOK: JSON = {
    "type": "object",
    "description": "A Jupyter notebook (nbformat 4)",
    "required": ["cells", "metadata", "nbformat", "nbformat_minor"],
    "properties": {
        "cells": {"type": "array", "items": {"type": "object"}},
        "metadata": {"type": "object"},
        "nbformat": {"const": 4},
        "nbformat_minor": {"type": "integer"},
    },
}


def install(app: FastAPI) -> None:
    """Add :data:`COMPONENTS` to ``app``'s OpenAPI document when it is built."""
    build = app.openapi

    def openapi() -> JSON:
        if app.openapi_schema is None:
            document = build()
            document.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
