"""The lesson at ``/lessons/initialization``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "Initialization"
SUMMARY = (
    "Why constant weights never learn, how large random weights should be, and how Xavier and"
    " He follow from one variance argument."
)
