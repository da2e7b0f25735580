"""The lab's application state: one typed record of every service the routes share.

:func:`normlab.lab.app.create_app` makes one :class:`LabState` and keeps it as
``app.state.lab``; nothing else is set on ``app.state``. Routes read it through
:func:`lab_state` (a request's) and the app's own code through :func:`state_of`. The app's
lifespan starts and stops the services in the order written in :mod:`normlab.lab.app`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request

from normlab.lab.progress import ProgressStore
from normlab.lab.runner import Runner
from normlab.lab.sandbox import Sandbox
from normlab.lab.watchlog import WatchLog
from normlab.sweep.store import DEFAULT_STORE

if TYPE_CHECKING:  # site reads the state through this module: no import back at run time
    from normlab.lab.site import Site


@dataclass
class LabState:
    """Every service of one lab app, and the counters its routes keep.

    Args:
        runner: the one run manager (:class:`~normlab.lab.runner.Runner`): the experiments'
            runs and their result cache, and the ``/train`` page's live sessions, bounded.
        sandbox: where the playground's and the exercises' code runs.
        watch: the :func:`normlab.watch` log that ``/watch`` follows, or ``None``.
        progress: the learner's progress database (reopened when the app starts again).
        site: the pages' Jinja environment and plotly's script.
        math_font: the OpenType math font served to the formulas, or ``None``.
        warm: what the warm-up computes, in order (the lessons, then the ``/train`` numbers):
            functions of no arguments, each ending early when the lab stops.
        widget_streams: the ``/api/experiments/NAME/stream`` responses open now.
        watch_streams: the ``/api/watch/stream`` responses open now.
        sweeps: the sweep store ``/sweeps`` reads (``normlab lab --sweeps``).
    """

    runner: Runner
    sandbox: Sandbox
    watch: WatchLog | None
    progress: ProgressStore
    site: Site
    math_font: Path | None
    warm: list[Callable[[], None]] = field(default_factory=list)
    widget_streams: int = 0
    watch_streams: int = 0
    sweeps: Path = Path(DEFAULT_STORE)


def state_of(app: FastAPI) -> LabState:
    """The app's :class:`LabState` (made by :func:`~normlab.lab.app.create_app`)."""
    state: LabState = app.state.lab
    return state


def lab_state(request: Request) -> LabState:
    """The :class:`LabState` of the app serving ``request``."""
    return state_of(request.app)
