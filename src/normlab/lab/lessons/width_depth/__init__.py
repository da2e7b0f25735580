"""The lesson at ``/lessons/width-depth``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "Width and depth"
SUMMARY = (
    "The coordinate check: why a wider net's layers move more under the same learning rate, "
    "how muP's per-layer rates hold them, and what it leaves to the depth."
)
