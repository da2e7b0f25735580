"""The lesson at ``/lessons/residual-normalization``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "Normalization in residual networks and transformers"
SUMMARY = (
    "Why BatchNorm needs skips, where transformers put LayerNorm (post, pre, peri), what can "
    "replace it (scaled branches as in GPT-2, ReZero, DyT), and how attention merges tokens."
)
