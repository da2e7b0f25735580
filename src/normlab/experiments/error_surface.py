r"""``error-surface``: two starts, two minima, and a ridge between them.

The same small ReLU MLP (no normalization) starts from two random draws of its weights,
:math:`\theta^A_0` and :math:`\theta^B_0`, and each copy trains on two moons with full-batch SGD
to :math:`\theta^A` and :math:`\theta^B`. The loss is then measured along the straight line
through the two ends,

.. math::
    \theta(\alpha) = (1 - \alpha)\,\theta^A + \alpha\,\theta^B, \qquad
    \alpha \in [-0.5, 1.5],

a 1-D slice of the error surface. For a convex loss the slice could never rise above its larger
end between :math:`\alpha = 0` and :math:`\alpha = 1`; the *barrier*, the highest loss on the
segment minus the larger end loss, measures how far it does. A positive barrier means two valleys
with a ridge between them: the surface is non-convex and where training starts decides which
valley it ends in (Goodfellow, Vinyals and Saxe, 2015, "Qualitatively characterizing neural
network optimization problems", drew such slices first).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import MLP, block, fmt
from normlab.train import train, train_step


@dataclass(frozen=True)
class Params:
    width: int = param(16, "units per hidden layer", min=2, max=64, step=1)
    hidden_layers: int = param(2, "hidden ReLU layers", min=1, max=4, step=1)
    lr: float = param(0.5, "SGD learning rate", min=0.01, max=2.0, step=0.01)
    steps: int = param(400, "training steps of each start", min=1, max=1000, step=1)
    points: int = param(41, "points along the slice", min=5, max=201, step=1)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run error-surface --code` prints) ------------------


def slice_losses(
    net: nn.Module,
    a: torch.Tensor,
    b: torch.Tensor,
    alphas: list[float],
    x: torch.Tensor,
    y: torch.Tensor,
) -> list[float]:
    """The loss of ``net`` with its weights set to ``(1 - alpha) a + alpha b``, for each alpha.

    ``a`` and ``b`` are flat weight vectors (``parameters_to_vector``), shape ``(P,)``.
    """
    out = []
    with torch.no_grad():
        for alpha in alphas:
            nn.utils.vector_to_parameters((1 - alpha) * a + alpha * b, net.parameters())
            out.append(F.binary_cross_entropy_with_logits(net(x), y).item())
    return out


def error_surface(
    width: int, hidden_layers: int, lr: float, steps: int, points: int, seed: int, device: str
) -> Iterator[dict[str, Any]]:
    """Train two copies of one net from two random starts, then slice the loss between the ends.

    Yields the training curves so far after every step, and last the whole result.
    """
    x, y = two_moons(device=device)
    torch.manual_seed(seed)
    nets = [MLP(width, hidden_layers).to(device) for _ in "AB"]  # two draws
    starts = [nn.utils.parameters_to_vector(n.parameters()).detach().clone() for n in nets]
    curves: list[list[float]] = [[], []]
    for net, curve in zip(nets, curves, strict=True):
        for loss in train(net, x, y, lr, steps):
            curve.append(loss)
            yield {"losses": [c[:] for c in curves]}  # the curves so far (copies: they grow)
    ends = [nn.utils.parameters_to_vector(n.parameters()).detach().clone() for n in nets]
    with torch.no_grad():
        logits = [net(x) for net in nets]  # (N, 1) each
    guesses = [(z > 0).float() for z in logits]  # (N, 1): the predicted class
    lo, hi = -0.5, 1.5  # half the distance between the ends beyond each end
    alphas = [lo + (hi - lo) * i / (points - 1) for i in range(points)]
    probe = MLP(width, hidden_layers).to(device)  # holds the sliced weights
    yield {
        "losses": curves,  # (2, steps): the training loss of each start
        "final_losses": [F.binary_cross_entropy_with_logits(z, y).item() for z in logits],
        "accuracies": [(g == y).float().mean().item() for g in guesses],
        "disagreement": (guesses[0] != guesses[1]).float().mean().item(),
        "start_distance": (starts[0] - starts[1]).norm().item(),
        "end_distance": (ends[0] - ends[1]).norm().item(),
        "alphas": alphas,
        "slice": slice_losses(probe, ends[0], ends[1], alphas, x, y),
    }


def ridge(
    alphas: list[float], losses: list[float], ends: list[float]
) -> tuple[float | None, float | None]:
    """The highest loss between the two ends (0 <= alpha <= 1), and the barrier: how far that
    rises above the larger end (0 or less for a convex loss). ``None`` if a loss is not finite."""
    between = [v for a, v in zip(alphas, losses, strict=True) if 0 <= a <= 1]
    if not all(v is not None and math.isfinite(v) for v in [*between, *ends]):
        return None, None  # a diverged run: no barrier to speak of
    peak = max(between)
    return peak, peak - max(ends)


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Where each start ends, how far apart the ends are, and the barrier between them."""
    rows = [
        [f"start {name}", fmt(loss), fmt(acc, 3)]
        for name, loss, acc in zip("AB", result["final_losses"], result["accuracies"], strict=True)
    ]
    peak, barrier = ridge(result["alphas"], result["slice"], result["final_losses"])
    notes = [
        f"distance between the starts {fmt(result['start_distance'], 2)}, "
        f"between the ends {fmt(result['end_distance'], 2)}",
        f"the two nets disagree on {result['disagreement']:.1%} of the points",
        f"highest loss between the ends {fmt(peak)}, barrier {fmt(barrier)}",
    ]
    return [
        {
            "title": "Two starts, trained",
            "columns": ["", "trained loss", "accuracy"],
            "rows": rows,
            "notes": notes,
        }
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class ErrorSurfaceResult(Result):
    losses: list[list[float]]  # (2, steps): training loss from start A, from start B
    # the rest once both starts are trained (a streamed run's frames hold the losses alone)
    final_losses: list[float] = field(default_factory=list)  # (2,): the loss at each end
    accuracies: list[float] = field(default_factory=list)  # (2,)
    disagreement: float = math.nan  # share of the points the two trained nets tell apart
    start_distance: float = math.nan  # |theta_0^A - theta_0^B|
    end_distance: float = math.nan  # |theta^A - theta^B|
    alphas: list[float] = field(default_factory=list)  # (points,)
    slice: list[float] = field(default_factory=list)  # (points,): loss at (1 - a) th^A + a th^B

    @property
    def peak_between(self) -> float:
        """The highest loss on the segment between the two ends (0 <= alpha <= 1)."""
        return max(v for a, v in zip(self.alphas, self.slice, strict=True) if 0 <= a <= 1)

    @property
    def barrier(self) -> float:
        """How far the segment rises above its larger end: 0 or less for a convex loss."""
        return self.peak_between - max(self.final_losses)

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        colors = (fig.RED, fig.BLUE)
        training = fig.Panel(
            fig.Axis("training step"),
            fig.Axis("BCE loss"),
            [
                fig.Series(f"from start {name}", fig.steps(len(c)), c, color=colors[k])
                for k, (name, c) in enumerate(zip("AB", self.losses, strict=True))
            ],
            title="training from two random starts",
        )
        if not self.slice:  # still training: the curves so far
            done = sum(map(len, self.losses))
            return [fig.Figure(f"Two random starts, training: step {done}", [training])]
        ends = fig.Series(
            "the trained ends",
            [0.0, 1.0],
            self.final_losses,
            "markers",
            colors=list(colors),
            marker_size=9.0,
            labels=["end A", "end B"],
        )
        path = fig.Series("loss along the line", self.alphas, self.slice, color=fig.PURPLE)
        line = fig.Panel(
            fig.Axis("α: (1 - α) end A + α end B"),
            fig.Axis("BCE loss"),
            [path, ends],
            title="the loss on the straight line through both ends",
            lines=[fig.Line(self.peak_between, label=f"barrier {self.barrier:.3f}")],
        )
        title = f"Two starts end in two valleys, a ridge {self.barrier:.3f} high between them"
        return [fig.Figure(title, [training, line])]


EXPERIMENT = Experiment(
    name="error-surface",
    title="The error surface between two minima",
    summary="two random starts of one small net, trained, and the loss on the line through both",
    params_type=Params,
    result_type=ErrorSurfaceResult,
    entry=error_surface,
    tables=tables,
    code=(
        two_moons,
        block,
        MLP,
        train_step,
        train,
        slice_losses,
        error_surface,
        fmt,
        ridge,
        tables,
    ),
    cost=Cost(10.0),
    total_steps=lambda p: 2 * p.steps,
)
