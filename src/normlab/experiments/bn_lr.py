r"""``bn-lr``: batch normalization lets a deep MLP train at a high learning rate.

The same ``hidden_layers`` x ``width`` ReLU MLP (blocks ``Linear -> [BatchNorm1d] -> ReLU``, BN
before the activation) trains on two moons with full-batch SGD, with and without BN, each from
``torch.manual_seed(seed)`` as the seed notebook's ``train_bn`` does. At a high rate the plain
net's loss spikes and wanders, while the BN net keeps falling. The result holds the chosen
setting's loss curve and, for contrast, the other one.

``init`` sets every Linear weight of both nets (biases 0) by one of ``init-train``'s methods;
``default`` keeps ``nn.Linear``'s own initialization, the seed notebook's. With BN in every
block, the scale a method gives the weights cancels in the forward pass
(:math:`\mathrm{BN}(cWx) = \mathrm{BN}(Wx)`), so the BN net depends much less on the choice.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import LOSS_CLIP, MLP, apply_init, block, fmt, he_normal, xavier_uniform
from normlab.train import train, train_step

INITS = ("default", "small", "large", "xavier", "he")
"""``default``: nn.Linear's own weights; the others are init-train's methods (zeros left out: a
zero weight matrix gives BatchNorm a batch of zeros to divide by its own spread)."""


@dataclass(frozen=True)
class Params:
    batch_norm: bool = param(False, "insert BatchNorm1d before every ReLU")
    lr: float = param(2.0, "SGD learning rate", min=0.01, max=5.0, step=0.01)
    steps: int = param(150, "training steps", min=1, max=500, step=1)
    hidden_layers: int = param(4, "hidden blocks", min=1, max=6, step=1)
    width: int = param(64, "units per hidden block", min=2, max=128, step=1)
    init: str = param(
        "default", "how every Linear weight starts (default: nn.Linear's)", choices=INITS
    )
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run bn-lr --code` prints) ---------------------------


def bn_lr(
    batch_norm: bool,
    lr: float,
    steps: int,
    hidden_layers: int,
    width: int,
    init: str,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Train the same net with and without BatchNorm at learning rate ``lr``.

    Both nets start from the same weights: ``nn.Linear``'s for ``init="default"``, else set by
    ``apply_init`` (on the CPU, where the seed draws).

    Yields the result so far after every step (the curves as they grow), and last the whole run.
    """
    x, y = two_moons(device=device)
    # losses: the chosen setting's curve; contrast_losses: the other one's
    result: dict[str, Any] = dict(batch_norm=batch_norm, lr=lr, losses=[], contrast_losses=[])
    for bn, curve in ((batch_norm, "losses"), (not batch_norm, "contrast_losses")):
        torch.manual_seed(seed)  # both nets draw the same Linear weights
        net = MLP(width, hidden_layers, norm="batch" if bn else "none")
        if init != "default":
            apply_init(net, init)
        net.to(device)
        for loss in train(net, x, y, lr, steps):
            result[curve].append(loss)
            yield result
    yield result  # the whole run (also when no step ran)


def highest_step(curve: list[float]) -> int:
    """The step of the highest loss; a loss that is not finite (the run diverged; None in a JSON
    copy) counts as the highest."""
    worst = [v if v is not None and math.isfinite(v) else math.inf for v in curve]
    return worst.index(max(worst))


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The first, last and highest loss of both runs."""
    rows = []
    for bn in (False, True):
        curve = result["losses"] if bn == result["batch_norm"] else result["contrast_losses"]
        peak = highest_step(curve)
        name = "with BN" if bn else "without BN"
        rows.append([name, fmt(curve[0]), fmt(curve[-1]), f"{fmt(curve[peak])} at step {peak}"])
    title = f"Training loss at learning rate {result['lr']:g}"
    return [
        {"title": title, "columns": ["", "first", "last", "highest"], "rows": rows, "notes": []}
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class BnLrResult(Result):
    batch_norm: bool
    lr: float
    losses: list[float]  # (steps,): the chosen setting
    contrast_losses: list[float]  # (steps,): the other setting

    def losses_with(self, batch_norm: bool) -> list[float]:
        return self.losses if batch_norm == self.batch_norm else self.contrast_losses

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        series = []
        for bn in (False, True):
            chosen = bn == self.batch_norm
            curve = self.losses_with(bn)
            series.append(
                fig.Series(
                    ("with BN" if bn else "without BN") + (" (chosen)" if chosen else ""),
                    fig.steps(len(curve)),
                    fig.clipped(curve, LOSS_CLIP),
                    color=fig.BLUE if bn else fig.RED,
                    width=3.0 if chosen else 1.2,
                    opacity=1.0 if chosen else 0.6,
                )
            )
        panel = fig.Panel(
            fig.Axis("training step"),
            fig.Axis(f"BCE loss (clipped at {LOSS_CLIP:g})", limits=(0.0, LOSS_CLIP)),
            series,
        )
        state = "on" if self.batch_norm else "off"
        title = f"Learning rate {self.lr:g}: batch norm {state} (bold), the other setting thin"
        return [fig.Figure(title, [panel])]


EXPERIMENT = Experiment(
    name="bn-lr",
    title="BatchNorm and the learning rate",
    summary="training loss of a deep MLP at a high learning rate, with and without BatchNorm",
    params_type=Params,
    result_type=BnLrResult,
    entry=bn_lr,
    tables=tables,
    code=(
        two_moons,
        block,
        MLP,
        xavier_uniform,
        he_normal,
        apply_init,
        train_step,
        train,
        bn_lr,
        fmt,
        highest_step,
        tables,
    ),
    cost=Cost(10.0),
    total_steps=lambda p: 2 * p.steps,
)
