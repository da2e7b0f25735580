"""A lesson page's HTML as notebook pieces: markdown text, code listings, widgets.

No HTML-to-markdown converter is installed with normlab (``markdown-it-py`` goes the other
way), and the lessons use a small, fixed set of tags, so this reads them with the standard
library's :class:`html.parser.HTMLParser`. The lesson is rendered by the lab's own templates
with a few helpers swapped for markers (see :mod:`normlab.lab.lessonbook`):

- ``<nl-tex>latex</nl-tex>`` (``display`` for a block) becomes ``$latex$`` (``$$ ... $$``);
- ``<nl-code data-output=... data-normlab data-fragment>source</nl-code>`` becomes a code piece
  (a fragment that cannot run on its own becomes a fenced block in the text);
- ``<nl-widget data-experiment=... data-params=...>`` becomes a widget piece (the training
  view's panes are ``training`` widgets).

Everything else is the lessons' ordinary HTML: paragraphs, headings, lists, tables, boxes.

>>> [p.kind for p in pieces('<h2>A</h2><p>x <nl-tex>a^2</nl-tex></p><nl-code>print(1)</nl-code>')]
['markdown', 'code']
>>> pieces('<p>so <em>this</em> &lt; <nl-tex>b</nl-tex></p>')[0].source
'so *this* &lt; $b$'
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any


@dataclass
class Piece:
    """One notebook cell to be: ``markdown`` or ``code`` (``output`` what it prints), or a
    ``widget`` (``experiment``, ``params``)."""

    kind: str
    source: str = ""
    output: str | None = None
    experiment: str = ""
    params: dict[str, Any] = field(default_factory=dict)


_INLINE = {"em": "*", "strong": "**", "i": "*", "b": "**"}
_BLOCKS = {"p", "h1", "h2", "h3", "h4", "li", "dt", "dd", "caption", "div", "figure", "pre"}
_HEADINGS = {"h1": "# ", "h2": "## ", "h3": "### ", "h4": "#### "}
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "*": "\\*", "$": "\\$", "`": "\\`"}


def _escaped(text: str) -> str:
    """Plain text as markdown shows it literally (entities for HTML, backslashes for marks)."""
    return "".join(_ESCAPES.get(c, c) for c in text)


class _Reader(HTMLParser):
    """Walks the lesson's HTML once, collecting :class:`Piece` s."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[Piece] = []
        self.blocks: list[str] = []  # markdown blocks of the cell being written
        self.inline: list[str] = []  # the text of the block being written
        self.lists: list[list[int]] = []  # open lists: [counter] (-1 for bullets)
        self.marker = ""  # a list item's marker, put before its first line
        self.quote = 0  # open boxes, written as block quotes
        self.prefix = ""  # a heading's or term's opening
        self.raw: list[str] | None = None  # text kept as it is (code listings, pre, math)
        self.raw_tag: dict[str, str | None] = {}
        self.table: list[list[str]] | None = None
        self.href: list[str | None] = []

    # -- blocks ---------------------------------------------------------------------------

    def end_block(self, suffix: str = "") -> None:
        """Close the block being written (if any text), with its list marker and quoting."""
        text = re.sub(r"\s+", " ", "".join(self.inline)).strip()
        self.inline = []
        if not text:
            self.prefix = ""
            return
        text = self.prefix + text + suffix
        self.prefix = ""
        if self.table:  # a cell (a caption comes before the rows: a block of its own)
            self.table[-1].append(text.replace("|", "\\|"))
            return
        self.add(text)

    def add(self, text: str) -> None:
        """Add a markdown block, indented under an open list and quoted inside a box."""
        indent = "   " * max(len(self.lists) - 1, 0)
        lead, self.marker = indent + self.marker, ""
        lines = [lead + text.split("\n")[0]]
        lines += [(indent + "   " if self.lists else "") + line for line in text.split("\n")[1:]]
        quote = "> " * self.quote
        self.blocks.append("\n".join((quote + line).rstrip() for line in lines))

    def flush(self) -> None:
        """Close the markdown cell being written."""
        self.end_block()
        if self.blocks:
            self.out.append(Piece("markdown", _joined(self.blocks)))
        self.blocks = []

    # -- tags -----------------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if self.raw is not None:
            return
        if tag in ("nl-code", "nl-tex") or (tag == "pre" and self.table is None):
            self.end_block() if tag != "nl-tex" else None
            self.raw, self.raw_tag = [], {"tag": tag, **a}
        elif tag == "nl-widget":
            self.flush()
            params = json.loads(a.get("data-params") or "{}")
            self.out.append(Piece("widget", experiment=a["data-experiment"] or "", params=params))
        elif tag in ("ul", "ol"):
            self.end_block()
            self.lists.append([0 if tag == "ol" else -1])
        elif tag == "li" and self.lists:
            self.end_block()
            count = self.lists[-1]
            count[0] += 1 if count[0] >= 0 else 0
            self.marker = f"{count[0]}. " if count[0] > 0 else "- "
        elif tag == "table":
            self.end_block()
            self.table = []
        elif tag == "tr" and self.table is not None:
            self.table.append([])
        elif tag in ("td", "th"):
            self.inline = []
        elif tag == "div" and "box" in (a.get("class") or "").split():
            self.end_block()
            self.quote += 1
        elif tag in _BLOCKS:
            self.end_block()
            self.prefix = _HEADINGS.get(tag, "**" if tag == "dt" else "")
            if tag == "caption":
                self.prefix = "*"
            if "box-title" in (a.get("class") or ""):
                self.prefix = "**"
        elif tag in _INLINE:
            self.inline.append(_INLINE[tag])
        elif tag == "code":
            self.inline.append("`")
        elif tag == "a":
            href = a.get("href")
            self.href.append(href if href and href.startswith("http") else None)
            self.inline.append("[" if self.href[-1] else "")
        elif tag == "br":
            self.inline.append("<br>")
        elif tag in ("sup", "sub"):
            self.inline.append(f"<{tag}>")

    def handle_endtag(self, tag: str) -> None:
        if self.raw is not None:
            if tag == self.raw_tag["tag"]:
                self.end_raw("".join(self.raw))
            return
        if tag in ("ul", "ol") and self.lists:
            self.end_block()
            self.lists.pop()
        elif tag in ("td", "th"):
            self.end_block()
        elif tag == "table" and self.table is not None:
            rows, self.table = self.table, None
            self.add(_table(rows))
        elif tag == "div" and self.quote and not self.inline:
            self.quote -= 1
        elif tag == "div" and self.quote:
            self.end_block()
            self.quote -= 1
        elif tag in _BLOCKS:
            suffix = {"dt": "**", "caption": "*"}.get(tag, "")
            if self.prefix == "**" and tag == "p":
                suffix = "**"
            self.end_block(suffix)
        elif tag in _INLINE:
            self.inline.append(_INLINE[tag])
        elif tag == "code":
            self.inline.append("`")
        elif tag == "a" and self.href:
            href = self.href.pop()
            self.inline.append(f"]({href})" if href else "")
        elif tag in ("sup", "sub"):
            self.inline.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self.raw is not None:
            self.raw.append(data)
        elif self.inline and self.inline[-1] == "`":  # inside <code>: shown literally
            self.inline.append(data.replace("`", "'"))
        else:
            self.inline.append(_escaped(data))

    def end_raw(self, text: str) -> None:
        """Close a listing, a ``<pre>`` or a formula."""
        a, self.raw = self.raw_tag, None
        if a["tag"] == "nl-tex":
            latex = " ".join(text.split())
            if "display" in a:
                self.end_block()
                self.add(f"$$\n{latex}\n$$")
            else:
                self.inline.append(f"${latex}$")
        elif a["tag"] == "pre" or "data-fragment" in a:
            self.add(f"```\n{text.strip(chr(10))}\n```")
        else:
            if "data-normlab" in a:
                self.add(f"**{a['data-normlab']}**")
            self.flush()
            self.out.append(Piece("code", text.strip("\n"), output=a.get("data-output")))


def _table(rows: list[list[str]]) -> str:
    """Rows of cell texts as a GitHub-flavoured markdown table (the first row its header)."""
    width = max((len(r) for r in rows), default=0)
    rows = [r + [""] * (width - len(r)) for r in rows if r]
    if not rows:
        return ""
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    lines.insert(1, "|" + "---|" * width)
    return "\n".join(lines)


def _joined(blocks: list[str]) -> str:
    """Blocks as one markdown text: consecutive list items (and quoted lines) kept together."""
    out = blocks[0]
    for previous, block in itertools.pairwise(blocks):
        if _is_item(previous) and _is_item(block):
            out += "\n" + block
        elif previous.startswith("> ") and block.startswith("> "):
            out += "\n>\n" + block  # one box: its paragraphs stay in one quote
        else:
            out += "\n\n" + block
    return out


def _is_item(block: str) -> bool:
    return re.match(r"(> )*\s*(- |\d+\. )", block) is not None


def pieces(html: str) -> list[Piece]:
    """The lesson body ``html`` (rendered with the markers above) as notebook pieces, in order."""
    reader = _Reader()
    reader.feed(html)
    reader.close()
    reader.flush()
    return reader.out
