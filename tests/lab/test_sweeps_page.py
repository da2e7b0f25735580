"""The /sweeps pages and their API, through the app (TestClient), on a hand-made store.

The store is :mod:`tests.sweep.test_summary`'s (every number computed by hand there); a second
store is filled between two requests, as ``normlab sweep`` in another process would fill it,
to show that a request answers what is stored now. Refusals come in the lab's JSON error shape
with a 4xx (an unknown sweep 404, a bad view option 422 naming it), never a 500.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
import warnings
from pathlib import Path

import jsonschema
import pytest

with warnings.catch_warnings():  # starlette warns about its httpx-based client on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from normlab import cli
from normlab.lab.app import create_app
from normlab.sweep import Outcome, Store, catalog

from ..sweep.test_summary import CURVES, HE_SENSITIVITY, XAVIER_SENSITIVITY, fill

LAB = "http://127.0.0.1"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sweeps-page") / "s.sqlite3"
    fill(path)
    return path


@pytest.fixture(scope="module")
def client(store: Path) -> TestClient:
    return TestClient(create_app(sweeps_store=store), base_url=LAB)


@pytest.fixture(scope="module")
def sweep_id(store: Path) -> str:
    return catalog.list_sweeps(store)[0].id


def test_the_list_names_each_sweep_and_how_far_it_ran(client: TestClient, sweep_id: str) -> None:
    answer = client.get("/api/sweeps")
    assert answer.status_code == 200
    (listed,) = answer.json()["sweeps"]
    assert (listed["id"], listed["experiment"], listed["total"], listed["done"]) == (
        sweep_id, "bn-lr", 12, 12,
    )  # fmt: skip
    page = client.get("/sweeps")
    assert page.status_code == 200
    assert f'href="/sweeps/{sweep_id}"' in page.text and "12 of 12 cells stored" in page.text
    assert "terminal and watch it here" in page.text  # a larger sweep: the command line
    assert '<a href="/sweeps" aria-current="page">Sweeps</a>' in page.text  # the navigation


def test_the_navigation_links_to_sweeps_from_every_page(client: TestClient) -> None:
    assert '<a href="/sweeps">Sweeps</a>' in client.get("/experiments").text


def test_one_sweep_s_view_holds_the_hand_numbers(client: TestClient, sweep_id: str) -> None:
    answer = client.get(f"/api/sweeps/{sweep_id}", params={"x": "lr", "y": "init"})
    assert answer.status_code == 200
    state = answer.json()
    assert (state["total"], state["done"], state["complete"], state["seeds"]) == (12, 12, True, 2)
    assert {a["name"]: a["values"] for a in state["axes"]} == {
        "init": ["he", "xavier"], "lr": ["0.1", "1", "3"],
    }  # fmt: skip
    z = state["figures"][0]["panels"][0]["series"][0]["z"]
    assert z == [[pytest.approx(0.5), pytest.approx(0.2), None], [1.5, 2.0, 0.5]]
    sens = client.get(f"/api/sweeps/{sweep_id}", params={"value": "sensitivity"}).json()
    assert sens["view"] == {"x": "init", "y": None, "value": "sensitivity", "fixed": {}}
    got = sens["figures"][0]["panels"][0]["series"][0]["z"]
    assert got == [[pytest.approx(HE_SENSITIVITY), pytest.approx(XAVIER_SENSITIVITY)]]
    fixed = client.get(f"/api/sweeps/{sweep_id}?x=lr&fix=init%3Dxavier").json()
    assert fixed["view"]["fixed"] == {"init": "xavier"}
    assert fixed["figures"][0]["panels"][0]["series"][0]["z"] == [[1.5, 2.0, 0.5]]


def test_the_page_embeds_its_first_state_and_the_renderer(
    client: TestClient, sweep_id: str
) -> None:
    page = client.get(f"/sweeps/{sweep_id}?value=diverged")
    assert page.status_code == 200
    for script in ("render.js", "sweeps.js", "vendor/plotly.min.js"):
        assert f'src="/static/{script}"' in page.text
    found = re.search(
        r'<script type="application/json" class="nl-initial">(.*?)</script>', page.text
    )
    assert found is not None
    initial = json.loads(html.unescape(found.group(1)))
    assert initial["view"]["value"] == "diverged" and initial["id"] == sweep_id
    assert "watch it here" in page.text  # it says where to start one


@pytest.mark.parametrize(
    ("query", "parameter", "words"),
    [
        ("x=width", "x", "x 'width': not an axis to map, use one of: init, lr"),
        ("value=mean", "value", "value 'mean' not supported"),
        ("x=lr&y=lr", "y", "y 'lr': the same axis as x"),
        ("fix=init%3Dnope", "fix", "fix 'init=nope': init is one of: he, xavier"),
        ("fix=lr", "fix", "fix 'lr': write NAME=VALUE"),
    ],
)
def test_a_bad_view_is_a_422_naming_the_option(
    client: TestClient, sweep_id: str, query: str, parameter: str, words: str
) -> None:
    answer = client.get(f"/api/sweeps/{sweep_id}?{query}")
    assert answer.status_code == 422
    detail = answer.json()["detail"]
    assert detail["parameter"] == parameter and detail["message"].startswith(words)
    page = client.get(f"/sweeps/{sweep_id}?{query}")
    assert page.status_code == 422 and words in html.unescape(page.text)


def test_an_unknown_sweep_is_a_404(client: TestClient) -> None:
    answer = client.get("/api/sweeps/nope")
    assert answer.status_code == 404 and answer.json()["detail"]["parameter"] == "sweep_id"
    assert client.get("/sweeps/nope").status_code == 404


def test_a_sweep_too_large_for_a_view_is_a_422(
    client: TestClient, sweep_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "MAX_VIEW_CELLS", 11)
    answer = client.get(f"/api/sweeps/{sweep_id}")
    assert answer.status_code == 422
    assert (
        "a view reads at most 11: summarize it with normlab sweep"
        in answer.json()["detail"]["message"]
    )


def test_no_store_file_is_an_empty_list_and_none_is_made(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite3"
    client = TestClient(create_app(sweeps_store=missing), base_url=LAB)
    assert client.get("/api/sweeps").json()["sweeps"] == []
    assert "No sweep in this store yet" in client.get("/sweeps").text
    assert client.get("/api/sweeps/abc").status_code == 404
    assert not missing.exists()


def test_a_file_that_is_no_sweep_store_is_refused_in_the_error_shape(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE results (x)")
    client = TestClient(create_app(sweeps_store=other), base_url=LAB)
    answer = client.get("/api/sweeps")
    assert answer.status_code == 503 and "not a sweep store" in answer.json()["detail"]["message"]
    page = client.get("/sweeps")
    assert page.status_code == 200 and "not a sweep store" in page.text


def test_a_request_answers_what_is_stored_now(tmp_path: Path) -> None:
    """A sweep filled by another writer between two requests: the second sees more."""
    path = tmp_path / "live.sqlite3"
    pending = frozenset({("xavier", 3.0, 0), ("xavier", 3.0, 1)})
    sweep = fill(path, skip=pending)
    client = TestClient(create_app(sweeps_store=path), base_url=LAB)
    sweep_id = catalog.list_sweeps(path)[0].id
    before = client.get(f"/api/sweeps/{sweep_id}", params={"x": "lr", "y": "init"}).json()
    assert (before["done"], before["complete"]) == (10, False)
    assert before["figures"][0]["panels"][0]["series"][0]["z"][1][2] is None  # not run yet
    with Store(path) as s:
        for c in sweep.configs:
            key = (c.params["init"], c.params["lr"], c.params["seed"])
            if key in pending:
                s.put(c, Outcome(c.id, {"losses": CURVES[key]}, None, 0.0))
    after = client.get(f"/api/sweeps/{sweep_id}", params={"x": "lr", "y": "init"}).json()
    assert (after["done"], after["complete"]) == (12, True)
    assert after["figures"][0]["panels"][0]["series"][0]["z"][1][2] == 0.5


def test_normlab_lab_refuses_a_folder_for_sweeps(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status = cli.main(["lab", "--sweeps", str(tmp_path), "--no-warm"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(f"normlab: error: --sweeps {str(tmp_path)!r}: a folder")


def test_the_answers_match_the_openapi_document(client: TestClient, sweep_id: str) -> None:
    """The 200 answers, checked against the schemas the document gives them (the schema test
    meets no stored sweep: its ids are drawn at random)."""
    document = client.get("/openapi.json").json()
    one = document["paths"]["/api/sweeps/{sweep_id}"]["get"]
    assert {p["name"] for p in one["parameters"]} == {"sweep_id", "x", "y", "value", "fix"}
    assert {"200", "404", "422"} <= set(one["responses"])
    for path, url in (
        ("/api/sweeps", "/api/sweeps"),
        ("/api/sweeps/{sweep_id}", f"/api/sweeps/{sweep_id}?value=sensitivity"),
        ("/api/sweeps/{sweep_id}", f"/api/sweeps/{sweep_id}?x=init&fix=lr%3D3"),
    ):
        ok = document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        schema = {**ok["schema"], "components": document["components"]}
        jsonschema.validate(client.get(url).json(), schema)


def test_a_sweep_the_registry_no_longer_knows_is_a_422(tmp_path: Path) -> None:
    path = tmp_path / "stale.sqlite3"
    with Store(path) as s:
        gone = s.add_sweep("bn-lr-gone", {"lr": "0.1,1"}, ["a", "b"])
        renamed = s.add_sweep("bn-lr", {"lr": "0.1,7"}, ["c", "d"])  # 7 is above lr's maximum
    client = TestClient(create_app(sweeps_store=path), base_url=LAB)
    for sweep_id, words in ((gone, "'bn-lr-gone' not found"), (renamed, "7.0 is not allowed")):
        answer = client.get(f"/api/sweeps/{sweep_id}")
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"]
        assert (
            detail["parameter"] == "sweep_id"
            and "cannot be shown by this version" in detail["message"]
        )
        assert words in detail["message"]
