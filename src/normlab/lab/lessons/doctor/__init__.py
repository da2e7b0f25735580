"""The lesson at ``/lessons/doctor``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "The model doctor"
SUMMARY = (
    "Point the same measurements at any model: find the layer where the scale vanishes, "
    "explodes or dies, and the initializer or normalization that cures it."
)
