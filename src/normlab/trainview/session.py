"""One live training run: :class:`Session` steps it, resets it and reads frames off it."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.hooks import RemovableHandle

from normlab.experiments.training import (
    Setup,
    boundary,
    build,
    evaluate,
    plane,
    points_of,
)
from normlab.probe import finite_or_none
from normlab.train import train_step
from normlab.trainview.setup import make_setup
from normlab.watching import watch

GRID = 50
"""Points per side of the grid the decision boundary is evaluated on."""
HIST_BINS = 40
HIST_RANGE = (-8.0, 2.0)
"""The histograms count :math:`\\log_{10} |v|` in :data:`HIST_BINS` equal bins over this range
(a quarter decade each), the same edges in every frame so that frames stack into heat maps over
time; smaller magnitudes (exact zeros, a dead ReLU's, included) count in the first bin, larger
ones in the last, ``nan`` in none."""
KEEP = 10_000
"""Steps whose losses a session keeps (the oldest go first; ``step_count`` keeps counting)."""
PAD = 0.1
"""The plane extends this fraction of the points' range beyond them on every side."""


def log_histogram(t: torch.Tensor) -> list[int]:
    """Counts of :math:`\\log_{10} |t|` over :data:`HIST_RANGE` in :data:`HIST_BINS` bins (see
    there for what falls outside).

    >>> counts = log_histogram(torch.tensor([0.0, 1e-3, 1.0, float("nan")]))
    >>> counts[0], counts[20], counts[32], sum(counts)  # 0, then 1e-3 and 1 (quarter decades)
    (1, 1, 1, 3)
    """
    lo, hi = HIST_RANGE
    magnitude = t.detach().float().abs().log10().clamp(lo, hi)  # 0 -> -inf -> lo; nan stays
    counts = torch.histc(magnitude, bins=HIST_BINS, min=lo, max=hi)  # (bins,), nan ignored
    return [int(c) for c in counts.tolist()]


def hist_edges() -> list[float]:
    """The :data:`HIST_BINS` + 1 bin edges, in :math:`\\log_{10} |v|`."""
    lo, hi = HIST_RANGE
    return [lo + (hi - lo) * i / HIST_BINS for i in range(HIST_BINS + 1)]


class _Taps:
    """Histograms of the hidden blocks' outputs and of the loss gradient at them, for one
    forward and backward pass (hooks on the blocks' activations, removed on exit, as miniai's
    ``Hooks``)."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self.modules = modules
        self.act: list[list[int]] = [[] for _ in modules]
        self.grad: list[list[int]] = [[] for _ in modules]
        self._handles: list[RemovableHandle] = []

    def __enter__(self) -> Self:
        for i, m in enumerate(self.modules):
            self._handles.append(m.register_forward_hook(self._hook(i)))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _hook(self, i: int) -> Callable[[nn.Module, Any, torch.Tensor], None]:
        def hook(module: nn.Module, args: Any, out: torch.Tensor) -> None:
            self.act[i] = log_histogram(out)  # (N, width) -> (bins,)
            if out.requires_grad:
                out.register_hook(lambda g: self._grad(i, g))

        return hook

    def _grad(self, i: int, g: torch.Tensor) -> None:
        self.grad[i] = log_histogram(g)  # dL/d(block output): (N, width) -> (bins,)


@dataclass
class _Pass:
    """What one training pass left for the frame: the doctor's layers and the histograms."""

    layers: list[dict[str, Any]]
    act: list[list[int]]  # (hidden blocks, bins)
    grad: list[list[int]]  # (hidden blocks, bins)


_LAYER_FIELDS = (
    "name", "kind", "act_mean", "act_std", "scale", "grad_std", "grad_ratio", "dead_frac",
    "saturated_frac", "labels", "criteria",
)  # fmt: skip


class Session:
    """One live training run of ``setup``: step it, reset it, and read frames off it.

    Args:
        setup: the settings (validated again here, so a hand-built ``Setup`` is checked too).

    Example::

        >>> s = Session(make_setup({"depth": 2, "width": 8}))
        >>> record = s.step()
        >>> s.step_count, record["step"], len(s.losses["train"])
        (1, 0, 1)
        >>> frame = s.frame()
        >>> len(frame["boundary"]["z"]) == GRID, frame["layers"][0]["labels"]
        (True, ['ok'])
    """

    def __init__(self, setup: Setup) -> None:
        self.setup = make_setup(dataclasses.asdict(setup))
        self.reset()

    def reset(self) -> None:
        """Back to step 0: the same data and initial weights, rebuilt from the seed (by a
        generator of the run's own: no lock, no turn to wait for while an experiment runs)."""
        data, self.model, self.optimizer, self._batches = build(**dataclasses.asdict(self.setup))
        self.x_train, self.y_train, self.x_test, self.y_test = data
        self.step_count = 0
        self._train: deque[float] = deque(maxlen=KEEP)
        self._test: deque[float] = deque(maxlen=KEEP)
        self.extent, self._grid = plane(torch.cat([self.x_train, self.x_test]), GRID, PAD)
        self._blocks = [m for m in self.model if _is_activation(m)]  # each block's output
        self._last = self._look()

    def step(self, measure: bool = True) -> dict[str, Any]:
        """Exactly one optimizer step (the plain code's ``train_step``); returns the step's
        record: its number (from 0), the training loss before the update and the test loss and
        accuracy after it. With ``measure`` the step runs under the doctor's probes and the
        histogram taps, and the next :meth:`frame` shows its layers; without, the frame keeps
        the last measured step's (the probes cost several plain steps: a frame that shows
        every tenth step measures only the tenth). The losses are the same either way."""
        x, y = next(self._batches)
        if measure:
            with watch(self.model, every=1) as w, _Taps(self._blocks) as taps:
                train_loss = train_step(self.model, self.optimizer, x, y)
                record = w.step()
            if record is not None:
                self._last = _Pass(record["layers"], taps.act, taps.grad)
        else:
            train_loss = train_step(self.model, self.optimizer, x, y)
        test_loss, test_accuracy = evaluate(self.model, self.x_test, self.y_test)
        self._train.append(train_loss)
        self._test.append(test_loss)
        self.step_count += 1
        out: dict[str, Any] = finite_or_none(
            {
                "step": self.step_count - 1,
                "train_loss": train_loss,
                "test_loss": test_loss,
                "test_accuracy": test_accuracy,
            }
        )
        return out

    def look(self) -> None:
        """Measure the current weights for the next :meth:`frame`, as at step 0 (one pass on
        the training set, undone): a run stopped between two measured steps (a pause in the
        middle of a frame's steps) shows its layers as they are, not as some steps ago. The
        losses, the weights and the batches to come are untouched."""
        self._last = self._look()

    def _look(self) -> _Pass:
        """The statistics of the initialization: one forward and backward pass on the whole
        training set, as a step's, undone (buffers put back, gradients dropped, no update)."""
        buffers = [b.clone() for b in self.model.buffers()]
        with watch(self.model, every=1) as w, _Taps(self._blocks) as taps:
            logits = self.model(self.x_train)  # (N, 1)
            F.binary_cross_entropy_with_logits(logits, self.y_train).backward()
            record = w.step()
        with torch.no_grad():
            for b, saved in zip(self.model.buffers(), buffers, strict=True):
                b.copy_(saved)
        self.model.zero_grad(set_to_none=True)
        return _Pass([] if record is None else record["layers"], taps.act, taps.grad)

    @property
    def losses(self) -> dict[str, Any]:
        """The recorded losses: ``train`` and ``test`` lists of the last (at most
        :data:`KEEP`) steps, ``start`` the number of the first of them; ``None`` where a loss
        was not finite."""
        start = self.step_count - len(self._train)
        out: dict[str, Any] = finite_or_none(
            {"train": list(self._train), "test": list(self._test), "start": start}
        )
        return out

    def data(self) -> dict[str, Any]:
        """The points (standardized inputs ``x``, ``y`` and their ``label`` 0 or 1) of each
        part, and the ``extent`` of the plane the boundary covers."""
        out: dict[str, Any] = {
            "train": points_of(self.x_train, self.y_train),
            "test": points_of(self.x_test, self.y_test),
            "extent": self.extent,
        }
        return out

    def frame(self) -> dict[str, Any]:
        """What a view shows now, as strict JSON data (``None`` for what is not finite).

        ``step`` is :attr:`step_count`; ``train_loss`` the last step's (``None`` before the
        first), ``test_loss`` and ``accuracy`` are measured on the current weights, in eval
        mode, as ``boundary``: the probability of class 1 at every point of a
        :data:`GRID` x :data:`GRID` grid over the plane, ``z[i][j]`` at ``(x[j], y[i])``.
        ``layers`` are the doctor's, every module of the net in order (``block``: its hidden
        block, from 1; the output layer's is ``depth + 1``), and ``hist`` the histograms of
        every hidden block's output (``act``) and of the loss gradient there (``grad``) over
        fixed ``edges`` in :math:`\\log_{10} |v|`; both from the last step's pass (before
        the first, from a look at the initialization).
        """
        test_loss, test_accuracy = evaluate(self.model, self.x_test, self.y_test)
        _, train_accuracy = evaluate(self.model, self.x_train, self.y_train)
        frame = {
            "step": self.step_count,
            "train_loss": self._train[-1] if self._train else None,
            "test_loss": test_loss,
            "accuracy": {"train": train_accuracy, "test": test_accuracy},
            "boundary": self._boundary(),
            "layers": self._layers(),
            "hist": {
                "scale": "log10 |value|",
                "edges": hist_edges(),
                "layers": [self._names[id(m)] for m in self._blocks],
                "act": self._last.act,
                "grad": self._last.grad,
            },
        }
        out: dict[str, Any] = finite_or_none(frame)
        return out

    @property
    def _names(self) -> dict[int, str]:
        return {id(m): name for name, m in self.model.named_children()}

    def _boundary(self) -> dict[str, Any]:
        """The probability of class 1 on the grid, in eval mode, rounded to 4 decimals."""
        xs, ys, grid = self._grid
        return {"x": xs, "y": ys, "z": boundary(self.model, grid, GRID)}

    def _layers(self) -> list[dict[str, Any]]:
        """The last pass's doctor layers, each with the hidden block it belongs to."""
        block = {}
        b = 0
        for name, m in self.model.named_children():
            b += isinstance(m, nn.Linear)
            block[name] = b
        return [
            {**{k: layer[k] for k in _LAYER_FIELDS}, "block": block.get(layer["name"])}
            for layer in self._last.layers
        ]


def _is_activation(m: nn.Module) -> bool:
    return isinstance(m, nn.ReLU | nn.Tanh | nn.Sigmoid | nn.GELU | nn.Identity)
