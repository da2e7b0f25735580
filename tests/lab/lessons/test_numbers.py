"""The typed-number pattern the OpenAPI document states against :func:`parse_number`: every text
the pattern matches is read as a finite number, and every text it refuses that the lab reads
has an exponent of three digits or more (the one thing the pattern leaves out on purpose)."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from normlab.lab.lessons.numbers import MAX_CHARS, TYPED, parse_number

_PIECES = ["0", "1", "5", "9", "12", "355", ",", " ", "\u00a0", "\u2009", "\u202f", ".", "e"]
_PIECES += ["E", "-", "+", "\u2212", "\t", "inf", "nan", "123", "000", "7e", "1,000", "10 355"]


@settings(max_examples=300, database=None)
@given(st.from_regex(TYPED, fullmatch=True).filter(lambda t: len(t) <= MAX_CHARS))
def test_every_text_the_pattern_matches_is_read_as_a_finite_number(text: str) -> None:
    assert math.isfinite(parse_number(text))


@settings(max_examples=500, database=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=8).map("".join))
def test_the_pattern_refuses_only_what_the_lab_refuses_or_a_long_exponent(text: str) -> None:
    """Texts built from the grammar's own pieces (digits, separators, signs, exponents), so
    that near misses are drawn often: where the lab reads one and the pattern does not, the
    exponent has three or more digits."""
    try:
        parse_number(text)
    except ValueError:
        return
    if not re.fullmatch(TYPED, text):
        assert re.search(r"[eE][+\-\u2212]?[0-9]{3,}\s*$", text), text
