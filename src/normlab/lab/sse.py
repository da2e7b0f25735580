"""Server-Sent Events as the lab's live pages send them (``/watch``, ``/train``).

A stream is a ``text/event-stream`` response: a ``retry:`` line first (how long the browser
waits before it reconnects), then events (``event: NAME``, ``data: JSON``) and, in long
silences, comment lines that keep proxies and the browser patient. Every stream holds a slot of
a bounded pool; :class:`EventStream` gives it back however the response ends (the client gone,
the lab stopping, an error, even before the first byte), and :func:`normlab.lab.errors.busy`
is the refusal when the pool is full: 503 in the lab's error shape, with ``Retry-After``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

KEEPALIVE_S = 15.0
"""Longest silence on a stream: a comment line then keeps proxies and the browser patient."""
RETRY_MS = 2000
"""How long the browser waits before it reconnects a dropped stream."""
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def dumps(value: object) -> str:
    """Strict, compact JSON (a ``nan`` raises: the data must say ``null``)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def event(name: str, data: object, id: int | str | None = None) -> str:
    """One event: its name, its id (when given) and its data as one line of JSON."""
    head = f"event: {name}\n" if id is None else f"event: {name}\nid: {id}\n"
    return f"{head}data: {dumps(data)}\n\n"


def read_events(readline: Callable[[], bytes]) -> Iterator[tuple[str, Any]]:
    """The events of a stream read line by line, as ``(name, data parsed as JSON)``, until it
    ends: what :func:`event` wrote (comments and ``retry:`` lines skipped), for clients.

    >>> import io
    >>> text = retry() + comment("hi") + event("frame", {"step": 1}) + event("end", None)
    >>> list(read_events(io.BytesIO(text.encode()).readline))
    [('frame', {'step': 1}), ('end', None)]
    """
    name, data = "message", []
    while line := readline():
        text = line.decode().rstrip("\n")
        if text.startswith("event: "):
            name = text[7:]
        elif text.startswith("data: "):
            data.append(text[6:])
        elif text == "" and data:
            yield name, json.loads("\n".join(data))
            name, data = "message", []


def comment(text: str) -> str:
    """A comment line: no event, only a sign of life."""
    return f": {text}\n\n"


def retry(ms: int = RETRY_MS) -> str:
    return f"retry: {ms}\n\n"


class EventStream(StreamingResponse):
    """An event stream that calls ``release`` once it ends, however it ends."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=HEADERS)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {200: {"content": {"text/event-stream": {}}}}
"""The OpenAPI description of a stream's 200 answer."""
