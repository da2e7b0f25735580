"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) of the OpenAPI document, served offline.

FastAPI's own pages load Swagger UI, ReDoc and Google fonts from CDNs and come up blank without
a network; the ``fastapi-offline`` wheel ships those scripts, served under :data:`DOCS_ASSETS`
(:func:`assets`, mounted by :func:`~normlab.lab.app.create_app`), and ReDoc is asked for no
fonts. ReDoc 2 still fetches the logo of its "API docs by Redocly" link from its CDN whatever
its options (Redocly/redoc#2108): the lab serves its script with that address emptied, and the
image, failing, hides itself.
"""

from __future__ import annotations

import functools
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

DOCS_ASSETS = "/static/docs"
"""Where the scripts and styles of ``/docs`` and ``/redoc`` are served from: the lab itself."""
OAUTH_REDIRECT = "/docs/oauth2-redirect"
"""Swagger UI's OAuth2 redirect page (FastAPI's default address for it)."""
ICON = "/static/favicon.svg"

_DOCS_FILES = Path(fastapi_offline.__file__).parent / "static"  # Swagger UI 5, ReDoc 2
_REDOC_LOGO = b'"https://cdn.redoc.ly/redoc/logo-mini.svg"'


def swagger(request: Request) -> HTMLResponse:
    """``GET /docs``: Swagger UI, its scripts the lab's own."""
    app = request.app
    return get_swagger_ui_html(
        openapi_url=str(app.openapi_url),
        title=f"{app.title} - Swagger UI",
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=ICON,
        oauth2_redirect_url=OAUTH_REDIRECT,
    )


def redoc(request: Request) -> HTMLResponse:
    """``GET /redoc``: ReDoc, its script the lab's own and no fonts asked for."""
    app = request.app
    return get_redoc_html(
        openapi_url=str(app.openapi_url),
        title=f"{app.title} - ReDoc",
        redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
        redoc_favicon_url=ICON,
        with_google_fonts=False,
    )


def redoc_script() -> Response:
    return Response(_redoc_script(), media_type="text/javascript; charset=utf-8")


@functools.cache
def _redoc_script() -> bytes:
    """ReDoc's script with its one address outside the lab (its logo's) emptied."""
    return (_DOCS_FILES / "redoc.standalone.js").read_bytes().replace(_REDOC_LOGO, b'""')


def assets() -> StaticFiles:
    """The scripts and styles of Swagger UI and ReDoc, to mount at :data:`DOCS_ASSETS`."""
    return StaticFiles(directory=_DOCS_FILES)


def router() -> APIRouter:
    """The documentation pages (left out of the document itself); include before the mount of
    :func:`assets`, so that ReDoc's script is this one."""
    r = APIRouter(include_in_schema=False)
    for path, endpoint in (
        ("/docs", swagger),
        (OAUTH_REDIRECT, get_swagger_ui_oauth2_redirect_html),
        ("/redoc", redoc),
        (f"{DOCS_ASSETS}/redoc.standalone.js", redoc_script),
    ):
        r.add_api_route(path, endpoint, methods=["GET"])
    return r
