"""The API's own pages, ``/docs`` (Swagger UI) and ``/redoc``, work with no network.

Their scripts, styles and icon come from the lab (``fastapi-offline`` ships Swagger UI and ReDoc
in its wheel) and ReDoc loads no Google fonts. The first tests read the HTML and fetch every
asset it names; the browser tests render both pages in Chromium, whose every request leaving
127.0.0.1 fails the test (the ``page`` fixture), and look for the operations' summaries.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from fastapi.testclient import TestClient
from labpage import registry, screenshot

from normlab.lab.app import DOCS_ASSETS, create_app

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only
PAGES = ("/docs", "/redoc")
TYPES = {"js": "text/javascript", "css": "text/css", "svg": "image/svg+xml"}


class _Links(HTMLParser):
    """Every URL a page's markup makes the browser load: ``src`` and ``href`` attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href") and v is not None]


def _links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.urls


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    db = tmp_path_factory.mktemp("docs") / "progress.db"
    return TestClient(create_app(db_path=db), base_url=LAB)


@pytest.mark.parametrize("path", PAGES)
def test_docs_pages_name_only_the_labs_own_assets(client: TestClient, path: str) -> None:
    page = client.get(path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "http" not in page.text  # no host named anywhere, scripts included
    urls = _links(page.text)
    scripts = [u for u in urls if u.endswith(".js")]
    assert scripts and all(u.startswith(f"{DOCS_ASSETS}/") for u in scripts), urls
    assert "/static/favicon.svg" in urls  # the lab's icon, not fastapi.tiangolo.com's
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        kind = TYPES[url.rsplit(".", 1)[-1]]
        assert asset.headers["content-type"].startswith(kind), (url, asset.headers)
    assert client.get("/openapi.json").status_code == 200


def test_docs_assets_load_nothing_from_elsewhere(client: TestClient) -> None:
    for name in ("swagger-ui.css", "swagger-ui-bundle.js", "redoc.standalone.js"):
        body = client.get(f"{DOCS_ASSETS}/{name}").text
        for cdn in ("fonts.googleapis", "cdn.jsdelivr", "cdn.redoc.ly", "unpkg.com"):
            assert cdn not in body, (name, cdn)
    css = client.get(f"{DOCS_ASSETS}/swagger-ui.css").text
    assert "@import" not in css and "url(http" not in css


def test_docs_pages_stay_behind_the_guard(client: TestClient) -> None:
    for url in (*PAGES, f"{DOCS_ASSETS}/redoc.standalone.js"):
        refused = client.get(url, headers={"Host": "evil.example"})
        assert refused.status_code == 403 and refused.json()["detail"]["parameter"] == "host"


@pytest.mark.browser
def test_swagger_ui_renders_the_operations_offline(page: Any, server: str) -> None:
    titles = [e["title"] for e in registry(server)]
    page.goto(f"{server}/docs")
    page.wait_for_selector(".opblock-summary-description")
    shown = page.locator(".opblock-summary-description").all_inner_texts()
    for summary in ["Every experiment and its parameters", *titles]:
        assert summary in shown, (summary, shown)
    assert page.locator(".opblock-summary-path", has_text="/api/run").count() == 1
    styled = page.evaluate(
        "() => getComputedStyle(document.querySelector('.swagger-ui .opblock')).borderRadius"
    )
    assert styled == "4px"  # swagger-ui.css arrived and applies
    screenshot(page, "docs-swagger.png")


@pytest.mark.browser
def test_redoc_renders_the_operations_offline(page: Any, server: str) -> None:
    titles = [e["title"] for e in registry(server)]
    page.goto(f"{server}/redoc")
    page.locator("h2", has_text="Every experiment and its parameters").wait_for()
    headings = page.locator("h2").all_inner_texts()
    for summary in titles:
        assert summary in headings, (summary, headings)
    menu = page.locator("[role=menuitem]").all_inner_texts()
    assert any(titles[0] in item for item in menu), menu  # the side menu lists them too
    screenshot(page, "docs-redoc.png")
