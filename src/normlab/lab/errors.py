"""The lab's one error shape: ``{"detail": {"parameter", "message"}}``, 422 unless told.

Every route answers bad input this way, naming the parameter at fault (``None`` when the body
as a whole is wrong) and what is allowed, so the pages and scripts read every refusal alike.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from normlab.lab.sandbox import SandboxBusy


def bad_input(parameter: str | None, message: str, status: int = 422) -> JSONResponse:
    """A refusal naming ``parameter``: ``{"detail": {"parameter", "message"}}``."""
    return JSONResponse(
        status_code=status, content={"detail": {"parameter": parameter, "message": message}}
    )


def checked_code(code: object, limit: int) -> str:
    """``code`` if it is a string of at most ``limit`` characters.

    The playground, saved listings and code exercises all check their ``code`` field with it.

    Raises:
        TypeError: ``code`` is not a string.
        ValueError: it is longer than ``limit``.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a string, got {type(code).__name__}")
    if len(code) > limit:
        raise ValueError(f"code is {len(code):,} characters long, the limit is {limit:,}")
    return code


async def read_body(request: Request, limit: int, parameter: str | None) -> bytes | JSONResponse:
    """The request's body, read up to ``limit`` bytes: past that (declared or sent) a 413 naming
    ``parameter``, and nothing more is read, so a huge body costs no memory."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return bad_input(
            parameter, f"the body is {int(declared):,} bytes, the limit is {limit:,}", status=413
        )
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            return bad_input(parameter, f"the body is longer than {limit:,} bytes", status=413)
    return bytes(raw)


MAX_JSON_DEPTH = 32
"""The deepest nesting of arrays and objects a body may have (the lab's bodies are two deep)."""
MAX_JSON_DIGITS = 1000
"""The most digits an integer in a body may have: far past any allowed value, so that a route
still names the value it refuses (``10**400`` is no finite float), and below the 4,300 digits
past which Python's ``int`` refuses to parse."""


class _TooLong(Exception):
    """An integer in the body has more than :data:`MAX_JSON_DIGITS` digits."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_DIGITS:
        raise _TooLong(f"an integer in the body has more than {MAX_JSON_DIGITS} digits")
    return int(text)


def _unusable(body: Any) -> JSONResponse | None:
    """The refusal for a body nested deeper than :data:`MAX_JSON_DEPTH` or holding a string
    that is no text (a lone surrogate, which UTF-8 cannot write), naming its top-level key."""
    stack: list[tuple[Any, int, str | None]] = [(body, 1, None)]  # (value, level, its key)
    while stack:
        value, level, key = stack.pop()
        if level > MAX_JSON_DEPTH:
            return bad_input(key, f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, dict):
            for k, v in value.items():
                top = key if level > 1 else k
                stack += [(k, level, top), (v, level + 1, top)]
        elif isinstance(value, list):
            stack += [(v, level + 1, key) for v in value]
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                char = f"U+{ord(value[exc.start]):04X}"
                message = f"{key or 'the body'} holds {char}, a lone surrogate, which is no text"
                return bad_input(key, message)
    return None


def json_body(raw: bytes, parameter: str | None, invalid: str) -> Any:
    """``raw`` parsed as JSON, or the 422 that says why the lab will not use it.

    JSON allows what no route reads and what Python's parser fails on with an error of its own:
    a body nested a thousand levels deep (``RecursionError``), an integer of thousands of digits
    (``ValueError``), a ``"\\ud800"`` escape, which is a lone surrogate, no text. Each is a 422
    here: nesting past :data:`MAX_JSON_DEPTH` and integers past :data:`MAX_JSON_DIGITS` digits
    naming ``parameter``, a lone surrogate naming its top-level key; JSON that does not parse
    names ``parameter`` with ``invalid`` and the parser's reason.
    """
    try:
        body = json.loads(raw, parse_int=_bounded_int)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return bad_input(parameter, f"{invalid}: {exc}")
    except RecursionError:
        return bad_input(parameter, f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    except _TooLong as exc:
        return bad_input(parameter, str(exc))
    refusal = _unusable(body)
    return body if refusal is None else refusal


async def _database_failed(request: Request, exc: Exception) -> JSONResponse:
    return bad_input(
        None, f"the progress database could not answer ({exc}); try again shortly", status=503
    )


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app takes at ``request``'s path: those a route matches
    fully when the request is asked with it."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """The router's own refusals in the lab's shape: no such path (404), or a method the path
    does not take (405, whose ``Allow`` names every method its routes take: the router's own
    named only the first route's, so ``/api/listings/ID`` said ``PUT`` and not ``GET``)."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if exc.status_code == 404:
        return bad_input(None, f"nothing is at {path}: GET /docs lists the lab's routes", 404)
    if exc.status_code != 405:
        return bad_input(None, str(exc.detail), exc.status_code)
    allow = allowed_methods(request)
    message = f"{request.method} is not allowed on {path}: use {', '.join(allow)}"
    answer = bad_input(None, message, 405)
    answer.headers["Allow"] = ", ".join(allow)
    return answer


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return bad_input(None, f"the lab failed on this request: {type(exc).__name__}: {exc}", 500)


RETRY_AFTER_S = 5
"""What a refusal's ``Retry-After`` asks a client to wait, in seconds."""


def busy(message: str, retry_after_s: int = RETRY_AFTER_S) -> JSONResponse:
    """503 with ``message`` in the lab's error shape, and ``Retry-After``."""
    refusal = bad_input(None, message, status=503)
    refusal.headers["Retry-After"] = str(retry_after_s)
    return refusal


async def _sandbox_busy(request: Request, exc: Exception) -> JSONResponse:
    return busy(str(exc))


def install(app: FastAPI) -> None:
    """Answer every error no route turned into a refusal in the lab's shape: a sandbox whose
    queue is full with 503 and ``Retry-After``, a database that failed (locked past its
    timeout, a full disk) with 503 and the reason, anything else with 500 (the lab goes on
    serving either way)."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(SandboxBusy, _sandbox_busy)
    app.add_exception_handler(sqlite3.Error, _database_failed)
    app.add_exception_handler(Exception, _unexpected)
