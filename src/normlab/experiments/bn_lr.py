"""``bn-lr``: batch normalization lets a deep MLP train at a high learning rate.

The same ``hidden_layers`` x ``width`` ReLU MLP (blocks ``Linear -> [BatchNorm1d] -> ReLU``, BN
before the activation) trains on two moons with full-batch SGD, with and without BN, from the
same weights. At a high rate the plain net's loss spikes and wanders, while the BN net keeps
falling. The result holds the chosen setting's loss curve and, for contrast, the other one.

Both runs go through :func:`normlab.train.train_mlps_fast` (hand-written forward and backward,
the two settings side by side), which computes what :func:`normlab.train.train_sgd` would.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import data, models, train
from normlab.experiments.base import (
    Experiment,
    Progress,
    Result,
    Table,
    device_param,
    param,
    seed_param,
)


@dataclass(frozen=True)
class Params:
    batch_norm: bool = param(False, "insert BatchNorm1d before every ReLU")
    lr: float = param(2.0, "SGD learning rate", min=0.01, max=5.0, step=0.01)
    steps: int = param(150, "training steps", min=1, max=2000, step=1)
    hidden_layers: int = param(4, "hidden blocks", min=1, max=12, step=1)
    width: int = param(64, "units per hidden block", min=2, max=256, step=1)
    seed: int = seed_param()
    device: str = device_param()


@dataclass
class BnLrResult(Result):
    batch_norm: bool
    lr: float
    losses: list[float]  # (steps,): the chosen setting
    contrast_losses: list[float]  # (steps,): the other setting

    def losses_with(self, batch_norm: bool) -> list[float]:
        return self.losses if batch_norm == self.batch_norm else self.contrast_losses

    def tables(self) -> list[Table]:
        rows = []
        for bn in (False, True):
            curve = self.losses_with(bn)
            peak = max(range(len(curve)), key=lambda t: _finite(curve[t]))
            rows.append(
                (
                    "with BN" if bn else "without BN",
                    _loss(curve[0]),
                    _loss(curve[-1]),
                    f"{_loss(curve[peak])} at step {peak}",
                )
            )
        return [
            Table(
                f"Training loss at learning rate {self.lr:g}",
                ("", "first", "last", "highest"),
                rows,
            )
        ]


def _finite(x: float) -> float:
    return x if math.isfinite(x) else math.inf


def _loss(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else str(x)


def _net(p: Params, batch_norm: bool) -> nn.Sequential:
    """The MLP both settings start from: the same weights (same seed), with or without BN."""
    g = torch.Generator().manual_seed(p.seed)
    norm = "batch" if batch_norm else "none"
    net = models.mlp(2, p.width, p.hidden_layers, out_dim=1, norm=norm, generator=g)
    return net if p.device == "cpu" else net.to(p.device)  # built on the CPU


def run(p: Params, progress: Progress | None = None) -> BnLrResult:
    # Both settings train side by side (one CPU thread each); progress follows the chosen one.
    x, y = data.two_moons(device=p.device)
    nets = [_net(p, p.batch_norm), _net(p, not p.batch_norm)]
    chosen, contrast = train.train_mlps_fast(nets, x, y, lr=p.lr, steps=p.steps, progress=progress)
    return BnLrResult(
        batch_norm=p.batch_norm,
        lr=p.lr,
        losses=chosen.losses.tolist(),
        contrast_losses=contrast.losses.tolist(),
    )


def _mirror(p: Params) -> tuple[Params, Callable[[dict[str, Any]], dict[str, Any]]]:
    """The other setting's parameters: its result holds the same two curves, swapped."""

    def swap(other: dict[str, Any]) -> dict[str, Any]:
        return {
            **other,
            "batch_norm": not other["batch_norm"],
            "losses": other["contrast_losses"],
            "contrast_losses": other["losses"],
        }

    return dataclasses.replace(p, batch_norm=not p.batch_norm), swap


EXPERIMENT = Experiment(
    name="bn-lr",
    title="BatchNorm and the learning rate",
    summary="training loss of a deep MLP at a high learning rate, with and without BatchNorm",
    params_type=Params,
    run=run,
    trains=True,
    mirror=_mirror,
)
