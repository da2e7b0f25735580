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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import LOSS_CLIP, MLP, apply_init, block, fmt, he_normal, xavier_uniform
from normlab.train import train, train_stacked, train_step

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


# -- batched: many configurations in one process (the sweep engine's path) ----------------------
#
# Not in the script: a learner's script trains one configuration, the plain code above. A sweep
# (normlab.sweep) hands ``bn_lr_batched`` the configurations that share a ``batch_key`` and
# trains them all at once: the K nets' weights stacked along a new first dimension, one forward
# and one backward per step for all of them. It reuses the very ``MLP`` the plain run trains,
# mapped over the K weight sets with ``torch.func.vmap`` (the model-ensembling recipe of the
# torch.func tutorials) rather than a hand-written ``torch.bmm`` copy of the net: batching then
# changes nothing in the model (its Linear, BatchNorm1d and its running-statistics rule are
# torch's), and the batched loop differs from the plain one only where it must: K losses and K
# learning rates.


def batch_key(params: Mapping[str, Any]) -> tuple[int, int, int, str]:
    """The configurations that may train together: those with equal keys.

    Stacking needs one net shape (``hidden_layers``, ``width``), one number of ``steps`` and one
    ``device``. ``lr``, ``init`` and ``seed`` live in the stacked weights and the per-net rates,
    and ``batch_norm`` only chooses which of its two nets a configuration reports as ``losses``
    (every configuration trains both), so all four may differ.
    """
    return (params["hidden_layers"], params["width"], params["steps"], params["device"])


def initial_net(
    batch_norm: bool, init: str, seed: int, width: int, hidden_layers: int, device: str
) -> nn.Module:
    """One of :func:`bn_lr`'s two nets as it starts, drawn as :func:`bn_lr` draws it."""
    torch.manual_seed(seed)
    net = MLP(width, hidden_layers, norm="batch" if batch_norm else "none")
    if init != "default":
        apply_init(net, init)
    return net.to(device)


def bn_lr_batched(configs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Run many ``bn-lr`` configurations of one :func:`batch_key` together.

    Each configuration trains the same two nets :func:`bn_lr` trains (with and without BN, from
    ``torch.manual_seed(seed)``, set by ``init``, at rate ``lr``); here all the nets without BN
    train in one :func:`train_stacked` call and all those with BN in another. A net that two
    configurations share (they differ only in ``batch_norm``) trains once.

    Args:
        configs: full parameter dicts (every declared parameter), with one :func:`batch_key`.

    Returns:
        Each configuration's result, in order: the dict :func:`bn_lr` yields last for it.
    """
    if not configs:
        return []
    keys = {batch_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError(
            f"configs must share one batch_key (hidden_layers, width, steps, "
            f"device), got {sorted(keys, key=str)}"
        )
    hidden_layers, width, steps, device = keys.pop()
    x, y = two_moons(device=device)
    runs = list(dict.fromkeys((c["init"], c["seed"], c["lr"]) for c in configs))  # each once
    curves: dict[tuple[bool, str, int, float], list[float]] = {}
    for bn in (False, True):
        nets = [initial_net(bn, init, seed, width, hidden_layers, device) for init, seed, _ in runs]
        lrs = torch.tensor([lr for *_, lr in runs], device=device)  # (K,)
        for run, curve in zip(runs, train_stacked(nets, x, y, lrs, steps), strict=True):
            curves[(bn, *run)] = curve
    results = []
    for c in configs:
        run = (c["init"], c["seed"], c["lr"])
        results.append(
            {
                "batch_norm": c["batch_norm"],
                "lr": c["lr"],
                "losses": list(curves[(c["batch_norm"], *run)]),  # a copy: runs may share
                "contrast_losses": list(curves[(not c["batch_norm"], *run)]),
            }
        )
    return results


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
    batched=bn_lr_batched,
    batch_key=batch_key,
)
