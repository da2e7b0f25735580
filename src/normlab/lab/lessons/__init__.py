"""The lab's lessons, in reading order: one folder each.

A lesson is the folder ``lessons/<slug with _ for ->/`` (``batch_norm/`` is
``/lessons/batch-norm``), and everything of it is there:

- ``__init__.py``: its ``TITLE`` and ``SUMMARY``;
- ``lesson.html``: the page, a Jinja template that extends the layout ``lesson.html``; its
  numbers come from live runs through ``result(...)`` and its widgets from ``widget(name, ...)``
  (:mod:`normlab.lab.site` lists the helpers a template can call, and finds the template as
  ``lessons/<folder>/lesson.html``);
- ``exercises.py``: the exercises that close it, made of the kinds in :mod:`.exercise`
  (:mod:`normlab.lab.exercises` gathers them).

The experiments a lesson shows are read from its template's ``widget("name", ...)`` calls
(:func:`widget_calls`), never listed by hand. :data:`ORDER` is the reading order.

>>> [lesson.slug for lesson in LESSONS][:5]  # the seed lessons, then the newer ones
['drift', 'batch-norm', 'initialization', 'bn-from-scratch', 'bn-training']
>>> find("batch-norm").number, find("batch-norm").template, find("nope") is None
(2, 'lessons/batch_norm/lesson.html', True)
>>> find("drift").experiments
('linear-scale', 'drift')
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, nodes

from normlab.lab.lessons.markup import MathExtension

HERE = Path(__file__).parent

ORDER = (
    "drift",
    "batch-norm",
    "initialization",
    "bn-from-scratch",
    "bn-training",
    "edge-of-chaos",
    "dynamical-isometry",
    "residual-normalization",
    "width-depth",
    "doctor",
)
"""Every lesson's slug, in reading order; the lesson itself is its folder."""


@dataclass(frozen=True)
class Lesson:
    """One lesson page: ``/lessons/<slug>``, from the folder :attr:`folder`."""

    slug: str
    title: str
    summary: str
    experiments: tuple[str, ...]  # the widgets it shows, in page order (read from the template)
    number: int = 0

    @property
    def folder(self) -> str:
        """The lesson's folder, also its package: the slug with ``_`` for ``-``."""
        return self.slug.replace("-", "_")

    @property
    def template(self) -> str:
        return f"lessons/{self.folder}/lesson.html"

    @property
    def url(self) -> str:
        return f"/lessons/{self.slug}"


_PARSER = Environment(extensions=[MathExtension])  # parses as the lab's templates read


def widget_calls(source: str) -> tuple[str, ...]:
    """The experiment of every ``widget(...)`` call in the template ``source``, in page order.

    Read from Jinja's syntax tree, so a call inside a block, a loop or over several lines
    counts; a name built at render time cannot be read before rendering, and is refused.

    >>> page = '{{ widget("drift", show=["depth"]) }} {% if x %}{{ widget(name="bn-stack") }}'
    >>> page += '{% endif %}'
    >>> widget_calls(page)
    ('drift', 'bn-stack')
    >>> widget_calls('{% for n in names %}{{ widget(n) }}{% endfor %}')
    Traceback (most recent call last):
    ...
    ValueError: line 1: widget(...) must name its experiment as a string
    """
    names = []
    for call in _PARSER.parse(source).find_all(nodes.Call):
        if not (isinstance(call.node, nodes.Name) and call.node.name == "widget"):
            continue
        named = [kw.value for kw in call.kwargs if kw.key == "name"]
        first = call.args[0] if call.args else next(iter(named), None)
        if not (isinstance(first, nodes.Const) and isinstance(first.value, str)):
            raise ValueError(
                f"line {call.lineno}: widget(...) must name its experiment as a string"
            )
        names.append(first.value)
    return tuple(names)


def load(slug: str, number: int = 0) -> Lesson:
    """The lesson in the folder of ``slug``: its metadata, and the widgets its template calls."""
    folder = slug.replace("-", "_")
    meta = importlib.import_module(f"{__name__}.{folder}")
    source = (HERE / folder / "lesson.html").read_text(encoding="utf-8")
    try:
        experiments = widget_calls(source)
    except ValueError as exc:
        raise ValueError(f"lessons/{folder}/lesson.html, {exc}") from None
    return Lesson(slug, str(meta.TITLE), str(meta.SUMMARY), experiments, number)


LESSONS: tuple[Lesson, ...] = tuple(load(slug, i + 1) for i, slug in enumerate(ORDER))
"""Every lesson, numbered from 1 in reading order."""


def find(slug: str) -> Lesson | None:
    """The lesson called ``slug``, or ``None``."""
    return next((lesson for lesson in LESSONS if lesson.slug == slug), None)


def neighbours(lesson: Lesson) -> tuple[Lesson | None, Lesson | None]:
    """The lessons before and after ``lesson`` (``None`` at either end)."""
    i = lesson.number - 1
    before = LESSONS[i - 1] if i > 0 else None
    after = LESSONS[i + 1] if i + 1 < len(LESSONS) else None
    return before, after
