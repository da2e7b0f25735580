"""Markup helpers for lesson templates: numbers, formulas and code listings.

Pure functions of their arguments (no app, no runs), so they are easy to test on their own:

>>> num(-0.00001), num([1.7078, 5.2286], 2), num(None)
('0.0000', '[1.71, 5.23]', 'n/a')
>>> str(sci(4.76837e-07))
'4.77 × 10<sup>−7</sup>'
>>> 'xmlns' in tex("x^2"), '<math display="inline">' in tex("x^2")
(False, True)
"""

from __future__ import annotations

import builtins
import io
import json
import keyword
import math
import re
import textwrap
import tokenize
from collections.abc import Iterable, Sequence

from jinja2.ext import Extension
from latex2mathml.converter import convert
from markupsafe import Markup, escape

from normlab.lab.progress import LISTING_ID
from normlab.models import fmt


def num(x: float | int | Sequence[float] | None, digits: int = 4) -> str:
    """A number as the seeds print it: fixed ``digits``, never ``-0.0000``; lists in brackets.

    ``None`` (a non-finite value after ``to_dict``) reads ``n/a``; integers print as they are.
    """
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return fmt(x, digits) if math.isfinite(x) else str(x)
    return "[" + ", ".join(num(v, digits) for v in x) + "]"


_SUPERSCRIPT_MINUS = "\u2212"


def sci(x: float | None, digits: int = 3) -> Markup:
    """``digits`` significant figures; tiny or huge values as ``a × 10<sup>b</sup>``."""
    if x is None:
        return Markup("n/a")
    if x == 0 or not math.isfinite(x):
        return Markup(escape(f"{x:g}"))
    text = f"{x:.{digits}g}"
    if "e" not in text:
        return Markup(escape(text))
    mantissa, exponent = text.split("e")
    power = str(int(exponent)).replace("-", _SUPERSCRIPT_MINUS)
    return Markup(f"{escape(mantissa)} × 10<sup>{escape(power)}</sup>")


_XMLNS = re.compile(r'\s+xmlns="[^"]*"')


def tex(latex: str, display: bool = False) -> Markup:
    """LaTeX as MathML, rendered here (no script, nothing fetched).

    The ``xmlns`` attribute is dropped: the HTML parser puts ``<math>`` in the MathML namespace
    by itself, and the page then names no outside URL at all.
    """
    mathml = convert(latex, display="block" if display else "inline")
    mathml = _XMLNS.sub("", mathml, count=1)
    cls = "nl-math nl-math-block" if display else "nl-math"
    tag = "div" if display else "span"
    return Markup(f'<{tag} class="{cls}">{mathml}</{tag}>')


_MATH = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)


def _math_call(match: re.Match[str]) -> str:
    inline, block = match.group(1), match.group(2)
    latex = json.dumps((inline if block is None else block).strip())
    if block is not None:
        return f"{{{{ tex({latex}, display=True) }}}}"
    return f"{{{{ tex({latex}) }}}}"


class MathExtension(Extension):
    r"""Lets template text write ``\( ... \)`` (inline) and ``\[ ... \]`` (display) math.

    Each becomes a ``tex(...)`` call before Jinja parses the template, so LaTeX keeps its
    backslashes (a Jinja string literal would turn ``\f`` of ``\frac`` into a form feed).
    Live values inside a formula need an explicit ``tex("n = " ~ n)``.

    >>> MathExtension.rewrite(r"so \(a_k = g^{2k}\) holds")
    'so {{ tex("a_k = g^{2k}") }} holds'
    """

    @staticmethod
    def rewrite(source: str) -> str:
        return _MATH.sub(_math_call, source)

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return self.rewrite(source)


_BUILTINS = frozenset(dir(builtins))
_CLASSES = {
    tokenize.STRING: "s",
    tokenize.COMMENT: "c",
    tokenize.NUMBER: "n",
}


def _spans(source: str) -> Iterable[tuple[str, str | None]]:
    """``(text, css class or None)`` pieces covering ``source`` exactly."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    pos = 0
    previous = ""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.ENDMARKER, tokenize.DEDENT, tokenize.INDENT):
            continue
        start = offsets[tok.start[0] - 1] + tok.start[1]
        end = offsets[tok.end[0] - 1] + tok.end[1] if tok.end[0] <= len(lines) else len(source)
        if start < pos:  # NEWLINE tokens at the end of the text
            continue
        yield source[pos:start], None
        cls = _CLASSES.get(tok.type)
        if tok.type == tokenize.NAME:
            if keyword.iskeyword(tok.string) or tok.string in ("True", "False", "None"):
                cls = "k"
            elif previous in ("def", "class"):
                cls = "f"
            elif tok.string in _BUILTINS:
                cls = "b"
        yield source[start:end], cls
        pos = end
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            previous = tok.string
    yield source[pos:], None


def highlight(source: str) -> Markup:
    """Python source as escaped HTML with ``<span class="tok-*">`` around tokens.

    Source that does not tokenize (a fragment) comes back escaped and unhighlighted.
    """
    try:
        pieces = list(_spans(source))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return Markup(escape(source))
    out = []
    for text, cls in pieces:
        if not text:
            continue
        out.append(f'<span class="tok-{cls}">{escape(text)}</span>' if cls else str(escape(text)))
    return Markup("".join(out))


NORMLAB_LABEL = "The same in normlab"


def _check_id(listing_id: object) -> str:
    if not isinstance(listing_id, str) or not LISTING_ID.fullmatch(listing_id):
        raise ValueError(
            f"listing id {listing_id!r} not valid, use 1 to 64 lowercase letters, digits or dashes"
        )
    return listing_id


def code(
    source: str,
    output: str | None = None,
    check: bool = True,
    normlab: bool | str = False,
    *,
    id: str,
) -> Markup:
    """A Python listing, dedented and highlighted; ``output`` is shown under it as what it prints.

    ``id`` names the listing for good (``data-listing`` on its box): the learner's saved edits
    are kept under it, so it is given in the template, never derived from the listing's place
    on the page (inserting a listing must not hand a later one's edits to another). Lessons
    write ``<slug>-<what it shows>``; a page test checks that ids are unique. Renaming one
    leaves the edits saved under the old id behind, unread.

    ``check`` marks the listing with ``data-check``: the page tests run every marked listing and
    compare what it prints with ``output``. Unmark fragments that cannot run on their own.

    Listings are plain PyTorch. ``normlab`` marks one that uses normlab's API instead: it comes
    after the plain version, under a visible label (``NORMLAB_LABEL``, or the string given) and
    with ``data-normlab`` on its box, so that readers and tests can tell the two kinds apart.
    """
    text = textwrap.dedent(str.__str__(source)).strip("\n")
    attrs = ' data-check="run"' if check else ""
    box = f'data-listing="{escape(_check_id(id))}"'
    if normlab:
        label = NORMLAB_LABEL if normlab is True else str(normlab)
        parts = [
            f'<div class="nl-code nl-code-normlab" data-normlab="true" {box}>',
            f'<p class="nl-code-label">{escape(label)}</p>',
        ]
    else:
        parts = [f'<div class="nl-code" {box}>']
    parts.append(
        f'<pre class="nl-src"{attrs}><code class="language-python">{highlight(text)}</code></pre>'
    )
    if output is not None:
        shown = textwrap.dedent(str.__str__(output)).strip("\n")
        parts.append(f'<pre class="nl-out" aria-label="output">{escape(shown)}</pre>')
    parts.append("</div>")
    return Markup("".join(parts))
