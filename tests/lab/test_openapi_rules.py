"""The OpenAPI document states what the lab enforces (issue 32, finding 8): a list of numbers in
a query has the pattern the lab parses, and a bound by another parameter is in the text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from normlab.experiments import list_experiments
from normlab.lab.app import create_app
from normlab.lab.runner import Runner

LIST_PARAMETERS = [
    (e.name, p) for e in list_experiments() for p in e.parameters if p.kind == "float_list"
]


@pytest.fixture(scope="module")
def lab() -> Iterator[TestClient]:
    with TestClient(create_app(Runner()), base_url="http://127.0.0.1") as c:
        yield c


def _query_schemas(document: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """``path -> schema`` of parameter ``name`` in every GET operation's query."""
    found = {}
    for path, operations in document["paths"].items():
        for parameter in operations.get("get", {}).get("parameters", []):
            if parameter["in"] == "query" and parameter["name"] == name:
                found[path] = parameter["schema"]
    return found


def test_there_are_lists_to_check() -> None:
    assert LIST_PARAMETERS  # (bn-columns' stds, variance's gains)


@pytest.mark.parametrize(("experiment", "p"), LIST_PARAMETERS, ids=lambda x: getattr(x, "name", x))
def test_a_list_in_a_query_is_declared_with_the_pattern_the_lab_reads(
    lab: TestClient, experiment: str, p: Any
) -> None:
    schemas = {
        path: schema
        for path, schema in _query_schemas(lab.get("/openapi.json").json(), p.name).items()
        if f"/{experiment}/" in path
    }
    assert schemas, f"no GET route of {experiment} takes {p.name} in its query"
    inside = ",".join(str(p.min if p.min is not None else 1.0) for _ in range(p.max_len))
    for path, schema in schemas.items():
        pattern = schema["pattern"]
        assert re.fullmatch(pattern, schema["default"])
        assert re.fullmatch(pattern, inside)
        ok = lab.get(path, params={p.name: inside})
        assert ok.status_code == 200, (path, ok.text[:300])
        for text in (
            "inf",
            "nan",
            "1_0",
            "a,b",
            "1,",
            "",
        ):  # the pattern refuses them: so does the lab
            assert not re.fullmatch(pattern, text)
            r = lab.get(path, params={p.name: text})
            assert r.status_code == 422 and r.json()["detail"]["parameter"] == p.name, text


FOLLOWERS = [(e.name, p) for e in list_experiments() for p in e.parameters if p.follows]


@pytest.mark.parametrize(("experiment", "p"), FOLLOWERS, ids=lambda x: getattr(x, "name", x))
def test_a_bound_by_another_parameter_is_in_the_description(
    lab: TestClient, experiment: str, p: Any
) -> None:
    relation, partner = p.follows
    document = lab.get("/openapi.json").json()
    body = document["paths"][f"/api/experiments/{experiment}"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    schema = (
        document["components"]["schemas"][schema["$ref"].split("/")[-1]]
        if "$ref" in schema
        else schema
    )
    assert f"must be {relation} {partner}" in schema["properties"][p.name]["description"]
