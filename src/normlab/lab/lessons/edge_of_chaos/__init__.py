"""The lesson at ``/lessons/edge-of-chaos``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "The edge of chaos"
SUMMARY = (
    "The variance argument run layer after layer, for two inputs at once: a length map, a "
    "correlation map with an ordered and a chaotic phase, and the critical line between them,"
    " measured on real stacks, where deep tanh networks still train."
)
