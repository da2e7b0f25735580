"""The lab's one error shape: ``{"detail": {"parameter", "message"}}``, 422 unless told.

Every route answers bad input this way, naming the parameter at fault (``None`` when the body
as a whole is wrong) and what is allowed, so the pages and scripts read every refusal alike.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse


def bad_input(parameter: str | None, message: str, status: int = 422) -> JSONResponse:
    """A refusal naming ``parameter``: ``{"detail": {"parameter", "message"}}``."""
    return JSONResponse(
        status_code=status, content={"detail": {"parameter": parameter, "message": message}}
    )
