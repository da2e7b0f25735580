"""The code behind every widget, over HTTP: the script, the notebook, the playground page."""

from __future__ import annotations

import ast
import base64
import html
import json
from collections.abc import Iterator

import nbformat
import pytest
from fastapi.testclient import TestClient

from normlab.experiments import get_experiment, list_experiments, script
from normlab.lab.app import create_app

LAB = "http://127.0.0.1"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url=LAB) as c:
        yield c


@pytest.mark.parametrize("name", [e.name for e in list_experiments()])
def test_every_experiment_serves_its_script(client: TestClient, name: str) -> None:
    r = client.get(f"/api/experiments/{name}/code")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["experiment"] == name
    assert body["script"] == script.render(get_experiment(name), {})
    assert 'class="tok-k"' in body["html"]  # highlighted as the lesson listings are
    assert html.unescape(_strip_tags(body["html"])) == body["script"]


def _strip_tags(text: str) -> str:
    import re

    return re.sub(r"<[^>]+>", "", text)


def test_query_values_are_read_as_the_cli_reads_them(client: TestClient) -> None:
    r = client.get("/api/experiments/variance/code?gains=0.9,1.1&depth=12&activation=relu")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["params"]["gains"] == [0.9, 1.1] and body["params"]["depth"] == 12
    assert "gains=[0.9, 1.1]" in body["script"] and 'activation="relu"' in body["script"]
    flag = client.get("/api/experiments/bn-lr/code?batch_norm=true").json()
    assert "batch_norm=True" in flag["script"]


@pytest.mark.parametrize(
    ("query", "parameter", "fragment"),
    [
        ("depth=0", "depth", "in [1, 100]"),
        ("depth=ten", "depth", "is not an integer"),
        ("deep=3", "deep", "unknown parameter 'deep'"),
        ("activation=gelu", "activation", "one of 'relu'"),
    ],
)
def test_bad_queries_are_422_naming_the_parameter(
    client: TestClient, query: str, parameter: str, fragment: str
) -> None:
    for route in ("code", "notebook"):
        r = client.get(f"/api/experiments/drift/{route}?{query}")
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail["parameter"] == parameter and fragment in detail["message"]
    assert client.get("/api/experiments").status_code == 200  # and it keeps serving


def test_the_notebook_is_valid_and_holds_what_the_code_printed(client: TestClient) -> None:
    r = client.get("/api/experiments/drift/notebook?depth=4&seed=2")
    assert r.status_code == 200, r.text
    assert "attachment" in r.headers["content-disposition"]
    assert "normlab-drift.ipynb" in r.headers["content-disposition"]
    nb = nbformat.reads(r.text, as_version=4)
    nbformat.validate(nb)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "normlab" not in code.replace("normlab's", "")
    answer = client.post("/api/experiments/drift", json={"depth": 4, "seed": 2}).json()
    run = next(c for c in nb.cells if c.get("id") == "run")  # its figure's cells follow
    assert run.outputs[0]["text"] == answer["output"]
    assert nb.cells[0].cell_type == "markdown" and "depth=4" in nb.cells[0].source


def test_the_notebook_draws_the_figure_the_widget_shows(client: TestClient) -> None:
    r = client.get("/api/experiments/drift/notebook?depth=4&seed=2")
    nb = nbformat.reads(r.text, as_version=4)
    answer = client.post("/api/experiments/drift", json={"depth": 4, "seed": 2}).json()
    data = next(c for c in nb.cells if c.get("id") == "figure-data").source
    assert ast.literal_eval(data.removeprefix("figures = ")) == answer["figures"]
    (image,) = next(c for c in nb.cells if c.get("id") == "figure").outputs  # one figure
    assert image.output_type == "display_data"
    assert base64.b64decode(image.data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")


def test_an_answer_carries_its_figures_tables_and_output(client: TestClient) -> None:
    d = client.post("/api/experiments/linear-scale", json={"scale": 3.0}).json()
    assert d["output"].startswith("One Linear layer\npass")  # its tables, as its script prints them
    (figure,) = d["figures"]
    assert figure["panels"][0]["series"][0]["name"] == "input std"
    assert d["tables"][0]["columns"] == ["pass", "input std", "output std"]
    json.dumps(d, allow_nan=False)


def test_the_playground_page_holds_the_script(client: TestClient) -> None:
    r = client.get("/playground?experiment=drift&depth=3&activation=tanh")
    assert r.status_code == 200
    page = html.unescape(_strip_tags(r.text))
    expected = script.render(get_experiment("drift"), {"depth": 3, "activation": "tanh"})
    assert expected.strip() in page
    assert 'href="/api/experiments/drift/notebook?experiment=drift&amp;depth=3' not in r.text
    assert "/api/experiments/drift/notebook?" in r.text
    assert 'data-lesson="playground-drift-' in r.text  # edits kept per script shown


def test_the_playground_without_an_experiment_has_a_starter(client: TestClient) -> None:
    r = client.get("/playground")
    assert r.status_code == 200 and "torch.manual_seed(0)" in html.unescape(_strip_tags(r.text))


@pytest.mark.parametrize(
    ("query", "fragment"),
    [("experiment=nope", "'nope' not found"), ("experiment=drift&depth=0", "'depth'")],
)
def test_a_bad_playground_link_says_why(client: TestClient, query: str, fragment: str) -> None:
    r = client.get(f"/playground?{query}")
    assert r.status_code == 422
    assert fragment in html.unescape(r.text)
