"""The lesson at ``/lessons/bn-from-scratch``: its title and summary.

The home page and every page's menu list them. The page is ``lesson.html`` beside this file;
its exercises are ``exercises.py``; the experiments it shows are read from its widget calls.
"""

from __future__ import annotations

TITLE = "BatchNorm from scratch, and training fast"
SUMMARY = (
    "Write the normalization yourself, check it against PyTorch to float precision, and train"
    " a deep net at a learning rate that breaks it without BatchNorm."
)
