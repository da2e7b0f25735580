"""The lesson at ``/lessons/bn-training``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "What BatchNorm changes in training"
SUMMARY = (
    "Internal covariate shift and the smoother loss surface that replaced it as the "
    "explanation, the noise of batch statistics as a regularizer, and a network that stops "
    "depending on its initializer."
)
