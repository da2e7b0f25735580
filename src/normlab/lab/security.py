"""Who may talk to the lab: a token off loopback, and same-origin checks for state changes.

The lab runs code a learner types, so a request that reaches it can run code on this machine.
Four rules keep strangers out, the first two as Jupyter has them:

- **Loopback by default.** Bound to 127.0.0.1 (or ``localhost``/``::1``) the lab trusts local
  users, as any local process could run code anyway. The ``Host`` header must then name a
  loopback address, which defeats DNS rebinding (a page on ``evil.example`` whose name is made
  to resolve to 127.0.0.1 still sends ``Host: evil.example``).
- **A token off loopback.** With any other ``--host`` every request must carry the token that
  the lab printed at start: ``?token=...`` in the URL (the lab then sets an ``HttpOnly``,
  ``SameSite=Strict`` cookie so the page's own requests carry it), an ``Authorization: token
  ...`` header, or that cookie. Compared in constant time.
- **Same origin for state changes.** ``POST``/``PUT``/``PATCH``/``DELETE`` whose ``Origin`` is
  not the lab's own (or whose ``Sec-Fetch-Site`` says ``cross-site``) are refused, so another web
  page open in the learner's browser cannot make it run code, even with the cookie. Clients
  that send no ``Origin`` (curl, scripts) are not browsers acting for a page and may proceed.
- **No runs for other sites.** A ``GET`` may compute (a notebook download, a page's live
  results), and a page elsewhere can send one with an ``<img>`` tag. A reading request whose
  ``Sec-Fetch-Site`` is ``cross-site`` or ``same-site`` (another port of this machine is
  another origin), or whose ``Origin`` is not the lab's own, passes with the reason noted in
  its scope (:data:`FOREIGN`): the routes that compute give it only what the cache already
  holds (that costs nothing, and a link from a course page to a lesson still opens) and
  refuse it with 403 rather than start a run (:class:`~normlab.lab.runner.RunRefused`).

A state-changing request that carries a body must say ``Content-Type: application/json``
(415 otherwise): a form or ``text/plain`` POST, which a page elsewhere can send without a CORS
preflight, is never read as JSON. The token's cookie is named after the lab's port, so two labs
on one machine keep their own. Every answer says ``Content-Security-Policy: frame-ancestors
'self'`` (only the lab's own pages may frame it: its lessons frame ``/train/embed``),
``Referrer-Policy: no-referrer`` (a token in the address never leaves in a Referer) and
``X-Content-Type-Options: nosniff``.

Refusals answer 403 (415 for the content type) with ``{"detail": {"parameter", "message"}}``
like the lab's other errors; a malformed ``Origin`` or ``Host`` is refused, never a crash.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "normlab_token"
"""The token cookie's name is this and the lab's port: ``normlab_token_8000``."""
HEADERS = [
    (b"content-security-policy", b"frame-ancestors 'self'"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
]
"""What every answer of the lab says, refusals included."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FOREIGN = "normlab.foreign"
"""The scope key where :class:`LabGuard` notes why a reading request came from another site
(``None`` when it came from the lab's own page or a plain client): it may start no run."""
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address, brackets allowed) is this machine's loopback.

    >>> is_loopback("127.0.0.1"), is_loopback("[::1]"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    name = host.strip().strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def _split_host(value: str) -> tuple[str, str]:
    """``"host:port"`` -> ``(host, port)``; IPv6 in brackets; port may be empty."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = value.partition(":")
    return host, port


class LabGuard:
    """ASGI middleware enforcing the four rules above.

    Args:
        app: the application to guard.
        token: the token every request must carry, or ``None`` on loopback.
    """

    def __init__(self, app: ASGIApp, token: str | None = None) -> None:
        if token is not None and len(token) < 16:
            raise ValueError(f"token must have at least 16 characters, got {len(token)}")
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan; the lab has no websockets
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal, set_cookie = self._check(scope, headers)
        if refusal is not None:
            await _refuse(send, refusal)
            return
        cookie = f"{cookie_name(scope)}={self.token}; Path=/; HttpOnly; SameSite=Strict"

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(b"set-cookie", cookie.encode())] if set_cookie else []
                message["headers"] = [*message.get("headers", []), *HEADERS, *extra]
            await send(message)

        await self.app(scope, receive, guarded_send)

    def _check(self, scope: Scope, headers: dict[str, str]) -> tuple[Refusal | None, bool]:
        """``(refusal or None, whether to set the token cookie)``."""
        host_header = headers.get("host", "")
        if self.token is None and not is_loopback(_split_host(host_header)[0]):
            return (
                "host",
                f"Host {host_header!r} is not a loopback name; open the lab at "
                "http://127.0.0.1 (start it with --host to serve other machines)",
            ), False
        set_cookie = False
        if self.token is not None:
            given = self._token_of(scope, headers)
            if given is None or not _same_token(given[0], self.token):
                return (
                    "token",
                    "this lab needs its token: open the URL it printed at start "
                    "(…/?token=...) or send 'Authorization: token ...'",
                ), False
            set_cookie = given[1] == "query"
        if scope.get("method", "GET") in SAFE_METHODS:
            scope[FOREIGN] = _foreign_read(headers, host_header)
        else:
            refusal = _cross_origin(headers, host_header)
            if refusal is not None:
                return ("origin", refusal), False
            if _has_body(headers) and _media_type(headers) != "application/json":
                return (
                    "content-type",
                    f"Content-Type {headers.get('content-type', '')!r} is not accepted: "
                    "send the body as application/json",
                    415,
                ), False
        return None, set_cookie

    @staticmethod
    def _token_of(scope: Scope, headers: dict[str, str]) -> tuple[str, str] | None:
        """The token a request carries and where: ``query``, ``header`` or ``cookie``."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "token" in query:
            return query["token"][-1], "query"
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() in ("token", "bearer") and value:
            return value.strip(), "header"
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no token, not a crash
            return None
        name = cookie_name(scope)
        if name in cookie:
            return cookie[name].value, "cookie"
        return None


Refusal = tuple[str, str] | tuple[str, str, int]
"""``(parameter, message)`` answered with 403, or ``(parameter, message, status)``."""


def cookie_name(scope: Scope) -> str:
    """The token cookie's name for the lab serving ``scope``: :data:`COOKIE` and its port."""
    server = scope.get("server") or ("", 80)
    return f"{COOKIE}_{server[1]}"


def _same_token(given: str, token: str) -> bool:
    """Constant-time comparison as bytes (any text, non-ASCII included, compares)."""
    return secrets.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length", "0").strip()
    return "transfer-encoding" in headers or not length.isdigit() or int(length) > 0


def _media_type(headers: dict[str, str]) -> str:
    """``application/json`` of ``Application/JSON; charset=utf-8``."""
    return headers.get("content-type", "").partition(";")[0].strip().lower()


def _cross_origin(headers: dict[str, str], host_header: str) -> str | None:
    """Why a state-changing request is cross-origin, or ``None`` when it is not."""
    if headers.get("sec-fetch-site", "") == "cross-site":
        return "cross-site requests may not change state or run code in the lab"
    origin = headers.get("origin")
    if origin is None:
        return None
    try:  # urlsplit and .port raise on "http://[::1", a port of 99999 or "8741.evil.example"
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return f"Origin {origin!r} is not a valid origin: it may not change state in the lab"
    if origin == "null" or parts.hostname is None:
        return f"Origin {origin!r} may not change state or run code in the lab"
    scheme_port = {"http": "80", "https": "443"}.get(parts.scheme, "")
    origin_host = (parts.hostname, str(port) if port else scheme_port)
    own_host, own_port = _split_host(host_header)
    if origin_host != (own_host, own_port or "80"):
        return (
            f"Origin {origin!r} is not this lab ({host_header!r}); "
            "only the lab's own pages may change state or run code"
        )
    return None


def _foreign_read(headers: dict[str, str], host_header: str) -> str | None:
    """Why a reading request came from another site (see :data:`FOREIGN`), or ``None``."""
    site = headers.get("sec-fetch-site", "")
    if site in ("cross-site", "same-site"):
        where = f"Sec-Fetch-Site {site!r}: a page of another site"
    elif "origin" in headers and _cross_origin(headers, host_header) is not None:
        where = f"Origin {headers['origin']!r} is not this lab ({host_header!r}): its page"
    else:
        return None
    return f"{where} may start no run in the lab, only read what it has computed"


async def _refuse(send: Send, refusal: Refusal) -> None:
    parameter, message, *status = refusal
    body = json.dumps({"detail": {"parameter": parameter, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status[0] if status else 403,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
