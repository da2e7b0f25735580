"""The lessons' registry: every lesson is one folder, and what it shows is read from its page.

A lesson's title and summary live in its folder's ``__init__.py``, its page is the folder's
``lesson.html``, and the experiments it shows are the ``widget(...)`` calls of that page: no
list of them is kept by hand (``tests/lab/test_pages.py`` checks that each rendered page shows
exactly these widgets, in this order).
"""

from __future__ import annotations

import importlib

import pytest

from normlab.experiments import get_experiment
from normlab.lab import exercises, lessons, site
from normlab.lab.lessons import LESSONS, ORDER, widget_calls


def test_every_lesson_folder_is_in_the_reading_order_and_has_a_page() -> None:
    folders = {p.parent.name for p in lessons.HERE.glob("*/__init__.py")}
    assert folders == {lesson.folder for lesson in LESSONS}
    assert [lesson.slug for lesson in LESSONS] == list(ORDER)
    assert [lesson.number for lesson in LESSONS] == list(range(1, len(ORDER) + 1))
    for lesson in LESSONS:
        assert (lessons.HERE / lesson.folder / "lesson.html").is_file(), lesson.slug
        assert lesson.template == f"lessons/{lesson.folder}/lesson.html"
        assert lesson.title and lesson.summary, lesson.slug


def test_the_lab_finds_every_lesson_s_page_by_its_template_name() -> None:
    env = site.environment()
    for lesson in LESSONS:
        source, filename, _ = env.loader.get_source(env, lesson.template)  # type: ignore[union-attr]
        assert filename == str(lessons.HERE / lesson.folder / "lesson.html")
        assert widget_calls(source) == lesson.experiments
    assert env.get_template("lesson.html").filename == str(site.TEMPLATES / "lesson.html")


def test_every_widget_a_lesson_shows_is_a_registered_experiment() -> None:
    shown = [name for lesson in LESSONS for name in lesson.experiments]
    assert {"linear-scale", "drift", "bn-lr", "doctor"} <= set(shown)  # has teeth
    for name in shown:
        assert get_experiment(name).name == name


def test_widget_calls_reads_the_syntax_tree_not_the_text() -> None:
    page = """{% extends "lesson.html" %}
{% block body %}
<p>The widget("not-a-call") below is text.</p>
{{ widget(
     "bn-stack",
     show=["depth"]) }}
{% for i in range(2) %}{{ widget("drift", id="drift-" ~ i) }}{% endfor %}
<p>\\( \\widget \\)</p>{# widget("a-comment") #}
{% endblock %}"""
    assert widget_calls(page) == ("bn-stack", "drift")


@pytest.mark.parametrize(
    "call", ['widget("bn-" ~ kind)', "widget(name)", "widget()", 'widget(names[0], id="x")']
)
def test_a_widget_whose_name_is_built_is_refused_naming_the_line(call: str) -> None:
    with pytest.raises(ValueError, match=r"line 2: widget\(\.\.\.\) must name its experiment"):
        widget_calls("<p>text</p>\n{{ " + call + " }}")


def test_every_lesson_s_exercises_are_its_folder_s() -> None:
    for lesson in LESSONS:
        module = importlib.import_module(f"normlab.lab.lessons.{lesson.folder}.exercises")
        assert module.EXERCISES, lesson.slug  # every lesson closes with exercises
        assert exercises.by_lesson(lesson.slug) == module.EXERCISES
    assert len(exercises.EXERCISES) == sum(len(exercises.by_lesson(s)) for s in ORDER)
