"""The lesson at ``/lessons/batch-norm``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "Batch normalization"
SUMMARY = (
    "Rescale every feature over the batch, keep running estimates for later, and see the deep"
    " stack hold its scale."
)
