"""A finished run (what ``normlab train`` prints and draws), and the script behind it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from normlab import figures as fig
from normlab.experiments import script as _script
from normlab.experiments.training import EXPERIMENT, Params, Setup
from normlab.figures import Table
from normlab.probe import finite_or_none
from normlab.trainview.figures import History, boundary_panel, loss_panel
from normlab.trainview.session import Session
from normlab.trainview.setup import STEPS, make_setup


def script(setup: Setup, steps: int) -> str:
    """The plain PyTorch script that builds ``setup``'s data and net and trains ``steps``
    steps, printing each step's losses as the session records them; it needs no normlab.
    It is the registry's script of the ``training`` experiment (:func:`normlab.experiments.
    script.render`), for any number of steps :data:`STEPS` allows.

    >>> text = script(Setup(), 3)
    >>> "import normlab" in text, "steps=3," in text
    (False, True)
    """
    steps = STEPS.validate(steps)
    values = dataclasses.asdict(make_setup(dataclasses.asdict(setup)))
    return _script.render(EXPERIMENT, Params(**values, steps=steps, device="cpu"))


@dataclass
class Run:
    """A finished run: the setup, every step's record, the last frame and the points."""

    setup: Setup
    records: list[dict[str, Any]]  # (steps,): Session.step's records
    final: dict[str, Any]  # Session.frame() after the last step
    points: dict[str, Any]  # Session.data()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = finite_or_none(
            {
                "setup": dataclasses.asdict(self.setup),
                "records": self.records,
                "final": self.final,
                "points": self.points,
            }
        )
        return out

    def tables(self) -> list[Table]:
        """The losses and accuracies, and the doctor's labels of every layer at the end."""
        first, last = self.records[0], self.records[-1]
        accuracy = self.final["accuracy"]
        losses = Table(
            f"{len(self.records)} steps on {self.setup.dataset}",
            ("", "train", "test"),
            [
                (
                    f"loss at step {first['step']}",
                    _num(first["train_loss"]),
                    _num(first["test_loss"]),
                ),
                (f"loss at step {last['step']}", _num(last["train_loss"]), _num(last["test_loss"])),
                ("accuracy at the end", _num(accuracy["train"]), _num(accuracy["test"])),
            ],
            notes=(self.title, "train: the step's batch before its update; test: after it"),
        )
        layers = Table(
            "The doctor's labels at the last step",
            ("layer", "kind", "block", "act std", "grad std", "grad ratio", "labels"),
            [
                (
                    la["name"],
                    la["kind"],
                    str(la["block"]),
                    _num(la["act_std"], "{:.3g}"),
                    _num(la["grad_std"], "{:.3g}"),
                    _num(la["grad_ratio"], "{:.3g}"),
                    ", ".join(la["labels"]),
                )
                for la in self.final["layers"]
            ],
        )
        return [losses, layers]

    def figures(self) -> list[fig.Figure]:
        """The loss curves, and the decision boundary at the end with the points on it: the
        lab's panels of the run at its last step (:mod:`normlab.trainview.figures`)."""
        history = History()
        history.losses(
            {
                "train": [r["train_loss"] for r in self.records],
                "test": [r["test_loss"] for r in self.records],
                "start": self.records[0]["step"],
            }
        )
        history.add(self.final)
        panels = [loss_panel(history), boundary_panel(self.points, self.final)]
        return [fig.Figure(f"{self.title}, {len(self.records)} steps", panels)]

    @property
    def title(self) -> str:
        """The setup in a line."""
        s = self.setup
        batch = "full batch" if s.batch_size == 0 else f"batch {s.batch_size}"
        return (
            f"{s.dataset}: {s.depth} x {s.width} {s.activation}, {s.init} init, norm {s.norm}, "
            f"{s.optimizer} lr {s.lr:g}, {batch}"
        )


def _num(value: float | None, form: str = "{:.4f}") -> str:
    return "-" if value is None else form.format(value)


def run(setup: Setup, steps: int, on_step: Callable[[dict[str, Any]], None] | None = None) -> Run:
    """Train ``setup`` for ``steps`` steps in a :class:`Session`; ``on_step(record)`` is called
    after every step (a progress bar, a JSON line)."""
    steps = STEPS.validate(steps)
    session = Session(setup)
    records = []
    for k in range(steps):
        records.append(session.step(measure=k == steps - 1))  # the final frame shows the last
        if on_step is not None:
            on_step(records[-1])
    return Run(session.setup, records, session.frame(), session.data())
