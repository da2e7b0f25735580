"""The lesson at ``/lessons/drift``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "Why activations drift"
SUMMARY = (
    "Measure the mean and spread of activations, and watch the spread shrink layer by layer "
    "through a plain deep stack."
)
