"""The OpenAPI document states what the lab enforces (issue 32, finding 8): a list of numbers in
a query is an array of numbers in range, joined by commas, as the lab parses it, and a bound by
another parameter is in the text."""

from __future__ import annotations

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


def _query_parameters(document: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """``path -> declaration`` of parameter ``name`` in every GET operation's query."""
    found = {}
    for path, operations in document["paths"].items():
        for parameter in operations.get("get", {}).get("parameters", []):
            if parameter["in"] == "query" and parameter["name"] == name:
                found[path] = parameter
    return found


def test_there_are_lists_to_check() -> None:
    assert LIST_PARAMETERS  # (bn-columns' stds, variance's gains)


@pytest.mark.parametrize(("experiment", "p"), LIST_PARAMETERS, ids=lambda x: getattr(x, "name", x))
def test_a_list_in_a_query_is_declared_as_the_array_the_lab_reads(
    lab: TestClient, experiment: str, p: Any
) -> None:
    """The document declares a query's list as an array of numbers in the parameter's range,
    joined by commas (form style, not exploded), with its item count; the lab takes exactly
    that: the declared bounds and count, and refuses an item out of range, one item too many,
    and what is no list of numbers."""
    document = lab.get("/openapi.json").json()
    declared = {
        path: parameter
        for path, parameter in _query_parameters(document, p.name).items()
        if f"/{experiment}/" in path
    }
    assert declared, f"no GET route of {experiment} takes {p.name} in its query"
    low, high = p.min, p.max
    for path, parameter in declared.items():
        assert (parameter["style"], parameter["explode"]) == ("form", False)
        schema = parameter["schema"]
        assert schema["type"] == "array" and schema["maxItems"] == p.max_len
        assert schema["items"] == {"type": "number", "minimum": low, "maximum": high}
        edges = [low, high] * p.max_len
        for values in (edges[: p.max_len], schema["default"]):
            ok = lab.get(path, params={p.name: ",".join(map(str, values))})
            assert ok.status_code == 200, (path, values, ok.text[:300])
        for text in (
            f"{high * 1.01}",
            f"{low - abs(low) * 0.01 - 1e-9}",
            ",".join(["1"] * (p.max_len + 1)),
            "inf",
            "nan",
            "1_0",
            "a,b",
            "1,",
            "",
        ):
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
