"""The playground's HTTP face: ``POST /api/run`` runs a learner's code in the app's sandbox.

The body is ``{"code": "..."}`` and nothing else; the answer is
:meth:`normlab.lab.sandbox.RunResult.to_dict` with status 200 whatever the code did (its
``status`` field says ``ok``, ``error``, ``timeout`` or ``killed``). Bad input answers 422 with
``{"detail": {"parameter", "message"}}``: ``code`` missing, not a string, longer than
:data:`MAX_CODE_CHARS`, or a body that is not a JSON object (all name ``code``); an unknown key
is named itself. A sandbox that cannot start answers 503. The sandbox is the app's
(``sandbox`` of its :class:`~normlab.lab.state.LabState`, made by
:func:`normlab.lab.app.create_app`), so its limits are the app's, 10 s of wall clock by default.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from normlab.lab import schemas
from normlab.lab.errors import bad_input, checked_code, json_body, read_body
from normlab.lab.sandbox import RunResult, SandboxError
from normlab.lab.state import lab_state

MAX_CODE_CHARS = 100_000
"""The longest code ``POST /api/run`` accepts, in characters (a long lesson listing is ~3 000)."""

_MAX_BODY_BYTES = 6 * MAX_CODE_CHARS + 1024  # room for every character escaped as \\uXXXX

_BODY_SCHEMA = {
    "type": "object",
    "required": ["code"],
    "additionalProperties": False,
    "properties": {
        "code": {
            "type": "string",
            "maxLength": MAX_CODE_CHARS,
            "description": "Python source, run as __main__ in a fresh contained process",
        }
    },
}


def _run_result() -> schemas.JSON:
    """What a run answers: :class:`RunResult` as sent, its ``status`` one of four."""
    schema = schemas.of_type(RunResult)
    schema["properties"]["status"] = {"enum": ["ok", "error", "timeout", "killed"]}
    schema["properties"]["figures"]["description"] = "one base64 PNG per figure"
    return schema


async def _read_code(request: Request) -> str | JSONResponse:
    """The ``code`` of the request's body, or the 422 that says what is wrong with it."""
    raw = await read_body(request, _MAX_BODY_BYTES, "code")
    if isinstance(raw, JSONResponse):
        return raw
    body = json_body(raw, "code", 'the body must be JSON like {"code": "print(1)"}')
    if isinstance(body, JSONResponse):
        return body
    if not isinstance(body, dict):
        return bad_input(
            "code", f'the body must be a JSON object {{"code": ...}}, got {type(body).__name__}'
        )
    unknown = sorted(set(body) - {"code"})
    if unknown:
        return bad_input(unknown[0], f"unknown key {unknown[0]!r}: the body takes only 'code'")
    if "code" not in body:
        return bad_input("code", 'code is missing: send {"code": "..."}')
    try:
        return checked_code(body["code"], MAX_CODE_CHARS)
    except (TypeError, ValueError) as exc:
        return bad_input("code", str(exc))


async def run_code(request: Request) -> Any:
    """``POST /api/run``: the code of the body, run in the sandbox."""
    code = await _read_code(request)
    if isinstance(code, JSONResponse):
        return code
    try:
        result = await lab_state(request).sandbox.arun(code)
    except SandboxError as exc:
        return bad_input(None, str(exc), status=503)
    return result.to_dict()


def router() -> APIRouter:
    """``POST /api/run``."""
    r = APIRouter()
    r.add_api_route(
        "/api/run",
        run_code,
        methods=["POST"],
        tags=["playground"],
        summary="Run Python code in the sandbox",
        description=(
            "Runs the code as __main__ in a fresh contained process (no network, no view of the "
            "lab's files, limits on time, memory, processes and output) and answers its status, "
            "stdout, stderr (with the traceback), duration and matplotlib figures (base64 PNG)."
        ),
        responses=schemas.responses(_run_result(), "how the run went, whatever the code did"),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _BODY_SCHEMA}},
            },
        },
    )
    return r
