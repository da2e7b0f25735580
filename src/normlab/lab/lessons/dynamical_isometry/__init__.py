"""The lesson at ``/lessons/dynamical-isometry``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "Dynamical isometry"
SUMMARY = (
    "Beyond the variance argument: the spectrum of the Jacobian of a deep stack, why "
    "orthogonal weights keep all of it near 1 for tanh near the origin, and why ReLU cannot."
)
