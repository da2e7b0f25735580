"""``drift``: activation scale through a deep stack with nothing to reset it.

A batch passes through ``depth`` blocks ``Linear -> [Norm] -> activation`` (torch's default
Linear init); the mean and std of each block's output show the scale shrink layer by layer.
With ``norm="batch"`` the same code is the ``bn-stack`` experiment.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from normlab import models
from normlab.experiments.base import (
    Experiment,
    Result,
    Table,
    device_param,
    fmt,
    param,
    seed_param,
)


@dataclass(frozen=True)
class Params:
    depth: int = param(
        10, "number of Linear -> [Norm] -> activation blocks", min=1, max=100, step=1
    )
    width: int = param(16, "features per layer", min=1, max=1024, step=1)
    batch: int = param(64, "rows in the input batch", min=2, max=4096, step=1)
    activation: str = param("relu", "nonlinearity after each layer", choices=models.ACTIVATIONS)
    norm: str = param("none", "normalization after each Linear layer", choices=models.NORMS)
    seed: int = seed_param()
    device: str = device_param()


@dataclass
class StackResult(Result):
    input_mean: float
    input_std: float
    means: list[float]
    stds: list[float]
    norm: str
    activation: str

    def tables(self) -> list[Table]:
        rows = [("input", fmt(self.input_mean), fmt(self.input_std))]
        rows += [
            (f"layer {i + 1}", fmt(m), fmt(s))
            for i, (m, s) in enumerate(zip(self.means, self.stds, strict=True))
        ]
        notes = (f"std range over layers: {fmt(min(self.stds))} to {fmt(max(self.stds))}",)
        title = (
            f"Linear -> {'' if self.norm == 'none' else self.norm + ' norm -> '}{self.activation}"
        )
        return [Table(title, ("", "mean", "std"), rows, notes)]


def run(p: Params, progress: object = None) -> StackResult:
    g = torch.Generator().manual_seed(p.seed)
    x = torch.randn(p.batch, p.width, generator=g).to(p.device)  # (N, D)
    net = models.mlp(p.width, p.width, p.depth, norm=p.norm, act=p.activation, generator=g)
    net.to(p.device).train()  # batch norm normalizes with the batch's own statistics
    means, stds = [], []
    h = x
    with torch.no_grad():
        for block in net:
            h = block(h)  # (N, D)
            means.append(h.mean())
            stds.append(h.std())
    return StackResult(
        input_mean=x.mean().item(),
        input_std=x.std().item(),
        means=torch.stack(means).tolist(),
        stds=torch.stack(stds).tolist(),
        norm=p.norm,
        activation=p.activation,
    )


EXPERIMENT = Experiment(
    name="drift",
    title="Drift through a plain deep stack",
    summary="per-layer mean and std of a batch through Linear -> activation blocks",
    params_type=Params,
    run=run,
)
