"""The numbers the /train lesson states, from real training sessions run here.

Each case is a :class:`~normlab.trainview.Session` of one setup trained :data:`STEPS` steps,
summed up as the lesson text needs it: the loss at the first step, the highest and the last,
the accuracies, and every layer's scale and labels at the start and the end. Computed once per
process (the lab's warm-up computes them when it starts) and kept; given the lab's
:class:`~normlab.lab.answers.AnswerStore`, kept there too, as the lessons' answers are, so a lab
started again (or another lab on the same store) reads them instead of training the cases again.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from normlab.lab.answers import AnswerStore
from normlab.trainview import Session, make_setup

STEPS = 150
"""Steps each case trains: the seed notebook's 150."""
EXERCISE = {"depth": 4, "width": 64, "lr": 2.0, "init": "he"}
"""The notebook's exercise 3: a 4 x 64 ReLU net at learning rate 2, He-initialized."""
EXERCISE_ID = "init-vs-bn"
"""The lab's exercise that asks it (lesson 4): the page shows these runs' outcome after it,
folded until the learner has solved it."""
CASES: dict[str, dict[str, Any]] = {
    "zeros": {"init": "zeros"},
    "small": {"init": "small"},
    "plain": {**EXERCISE, "norm": "none"},
    "batch": {**EXERCISE, "norm": "batch"},
}
"""The setups the lesson talks about (every other setting at its default)."""


class Stopped(Exception):
    """The lab is stopping: the numbers were not finished."""


_lock = threading.Lock()
_done: dict[str, dict[str, Any]] = {}


def numbers(
    stopped: Callable[[], bool] = lambda: False, store: AnswerStore | None = None
) -> dict[str, dict[str, Any]]:
    """Every case of :data:`CASES`, trained (once per process) and summed up: read from
    ``store`` where it holds the case (under the key of the case and :data:`STEPS`, in the
    store's context: the code, the versions, the threads, the machine), else trained here and
    written there.

    Raises :class:`Stopped` when ``stopped()`` turns true between two steps.
    """
    with _lock:
        for name, values in CASES.items():
            if name not in _done:
                _done[name] = _kept(values, stopped, store)
        return dict(_done)


def _kept(
    values: Mapping[str, Any], stopped: Callable[[], bool], store: AnswerStore | None
) -> dict[str, Any]:
    """One case's :func:`summary`, through ``store`` (:meth:`~AnswerStore.load`: a damaged row
    is a miss, so the case is trained again and written over, as a Runner's answer is)."""
    if store is None:
        return summary(values, STEPS, stopped)
    key = store.key(json.dumps(["train-lesson", dict(values), STEPS], sort_keys=True))
    kept: dict[str, Any] | None = store.load(key)
    if kept is not None:
        return kept
    found = summary(values, STEPS, stopped)
    store.put(key, "train-lesson", json.dumps(found).encode())
    return found


def ready() -> bool:
    """Whether every case is trained already: :func:`numbers` then computes nothing."""
    return len(_done) == len(CASES)


def _layers(frame: Mapping[str, Any]) -> list[dict[str, Any]]:
    keep = ("name", "kind", "act_std", "grad_ratio", "labels")
    return [{k: layer[k] for k in keep} for layer in frame["layers"]]


def summary(
    values: Mapping[str, Any], steps: int, stopped: Callable[[], bool] = lambda: False
) -> dict[str, Any]:
    """One setup trained ``steps`` steps: its losses, accuracies and layers, start and end.

    ``peak`` is the highest finite training loss and ``peak_step`` its step; ``blown_up`` the
    first step whose loss was not finite (``None`` if none was); ``last`` the last step's loss
    (``None`` when it was not finite). ``hidden`` is the last hidden block's output.
    """
    session = Session(make_setup(values))
    start = session.frame()
    for _ in range(steps):
        if stopped():
            raise Stopped("the lab is stopping")
        session.step()
    end = session.frame()
    train = session.losses["train"]
    finite = [(loss, t) for t, loss in enumerate(train) if loss is not None and math.isfinite(loss)]
    peak, peak_step = max(finite) if finite else (None, None)
    blown_up = next((t for t, loss in enumerate(train) if loss is None), None)
    hidden = [layer for layer in start["layers"] if layer["kind"] != "Linear"]
    return {
        "setup": dataclasses.asdict(session.setup),
        "steps": steps,
        "first": train[0],
        "last": train[-1],
        "peak": peak,
        "peak_step": peak_step,
        "blown_up": blown_up,
        "test_loss": end["test_loss"],
        "accuracy": end["accuracy"],
        "start": _layers(start),
        "end": _layers(end),
        "hidden_std": hidden[-1]["act_std"] if hidden else None,
    }
