"""Number answers as people type them: ``"10,355"``, ``"10 355"``, ``"1e-3"``, ``"-0.5"``.

:func:`parse_number` is the one reading of a typed answer: the page sends the text as typed
and the server parses it, so the browser and the API accept exactly the same answers.

What is accepted: an optional sign (``+``, ``-`` or the typographic minus ``−``), digits with an
optional decimal point, an optional exponent (``e`` or ``E``, its own optional sign, digits),
spaces around it. The whole part may group its digits by three with commas or spaces
(``10,355``, ``1 000 000``, also the no-break and thin spaces), one kind of separator per number;
a first group of ``0`` is no grouping (``0,125`` is refused as a decimal comma, not read as 125).
What is refused, with a message naming what is allowed: the empty answer, ``inf``/``Infinity``/
``nan`` and anything that is not finite (``1e999``), a comma between digits that is not a
thousands separator (``0,5``: decimals take a point), and everything else that is not a number.

>>> parse_number("10,355"), parse_number("10 355"), parse_number("1e-3"), parse_number("-0.5")
(10355.0, 10355.0, 0.001, -0.5)
>>> parse_number("Infinity")
Traceback (most recent call last):
    ...
ValueError: 'Infinity' is not allowed: the answer must be a finite number, like 10355, ...
"""

from __future__ import annotations

import math
import re

__all__ = ["EXAMPLES", "MAX_CHARS", "TYPED", "parse_number"]

EXAMPLES = "like 10355, 10,355, -0.5 or 1e-3"
"""How the messages show what an answer may look like."""
MAX_CHARS = 64
"""The longest text read as a number (a float needs at most 24 characters)."""

_MINUS = "\u2212"  # the minus sign of typeset pages, as copied from a formula
_SPACES = " \u00a0\u2009\u202f"  # space, no-break space, thin space, narrow no-break space
_NUMBER = re.compile(
    rf"(?P<sign>[+\-{_MINUS}])?"
    rf"(?P<whole>[1-9][0-9]{{0,2}}(?P<sep>[,{_SPACES}])[0-9]{{3}}(?:(?P=sep)[0-9]{{3}})*|[0-9]+)?"
    r"(?:\.(?P<frac>[0-9]*))?"
    rf"(?:[eE](?P<exp>[+\-{_MINUS}]?[0-9]+))?"
)


def _grouped(sep: str) -> str:
    return rf"[1-9][0-9]{{0,2}}(?:{sep}[0-9]{{3}})+"


TYPED = (
    rf"^\s*[+\-{_MINUS}]?"
    rf"(?:(?:{'|'.join(_grouped(sep) for sep in ',' + _SPACES)}|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+)"
    rf"(?:[eE][+\-{_MINUS}]?[0-9]{{1,2}})?\s*$"
)
"""Typed answers as a regular expression that Python and JSON Schema both read (no named
groups, no back-references: each kind of thousands separator is its own alternative), for the
OpenAPI document. It is :data:`_NUMBER` with exponents of at most two digits, so that all it
matches is finite (64 digits times 1e99 is far below float's 1.8e308); :func:`parse_number`
reads longer exponents too, when the number is finite."""

_NOT_FINITE = re.compile(r"[+\-\u2212]?\s*(inf|infinity|nan|∞)", re.IGNORECASE)
_DECIMAL_COMMA = re.compile(r"[+\-\u2212]?[0-9]+,[0-9]+")


def parse_number(text: str) -> float:
    """Read ``text`` as a finite number, the way people type one.

    Args:
        text: the answer as typed (surrounding whitespace is ignored).

    Returns:
        The number, as a float.

    Raises:
        TypeError: ``text`` is not a str.
        ValueError: ``text`` is empty, not finite, or not a number; the message says which and
            shows what is allowed.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"the answer is empty: type a number, {EXAMPLES}")
    if len(stripped) > MAX_CHARS:
        raise ValueError(f"the answer has {len(stripped)} characters, a number at most {MAX_CHARS}")
    if _NOT_FINITE.fullmatch(stripped):
        raise ValueError(
            f"{stripped!r} is not allowed: the answer must be a finite number, {EXAMPLES}"
        )
    match = _NUMBER.fullmatch(stripped)
    if match is None or not (match["whole"] or match["frac"]):
        if _DECIMAL_COMMA.fullmatch(stripped):
            raise ValueError(
                f"{stripped!r} is not a number here: a comma separates thousands (10,355), "
                f"decimals take a point ({stripped.replace(',', '.')})"
            )
        raise ValueError(
            f"{stripped!r} is not a number: use digits with an optional sign, decimal point and "
            f"exponent, {EXAMPLES}"
        )
    return _finite(match, stripped)


def _finite(match: re.Match[str], shown: str) -> float:
    """The float a :data:`_NUMBER` match spells, refusing one too large to be finite."""
    sign = "-" if match["sign"] in ("-", _MINUS) else ""
    whole = (match["whole"] or "0").replace(match["sep"] or ",", "")
    exp = (match["exp"] or "0").replace(_MINUS, "-")
    value = float(f"{sign}{whole}.{match['frac'] or '0'}e{exp}")
    if not math.isfinite(value):
        raise ValueError(f"{shown!r} is too large: the answer must be a finite number, {EXAMPLES}")
    return value
