"""``bn-running-stats``: how BatchNorm's running estimates build up pass by pass.

Each training pass moves the stored estimates toward the batch's statistics:
``running = (1 - momentum) * running + momentum * batch_stat``, with the *unbiased* batch
variance (divide by N - 1), starting from mean 0 and variance 1. With ``cumulative`` the layer
keeps a plain average of all batches instead (``momentum=None`` in torch). Every pass draws a new
batch from the same distribution (mean 0, std ``scale``), so the estimates head for 0 and
``scale**2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from normlab import nn as nlnn
from normlab.experiments.base import (
    Experiment,
    Result,
    Table,
    device_param,
    fmt_list,
    param,
    seed_param,
)


@dataclass(frozen=True)
class Params:
    momentum: float = param(
        0.1, "weight of each new batch in the running estimates", min=0.0, max=1.0, step=0.01
    )
    cumulative: bool = param(False, "keep a cumulative average instead (momentum=None)")
    passes: int = param(1, "training passes, each with a fresh batch", min=1, max=500, step=1)
    batch: int = param(4, "rows per batch", min=2, max=4096, step=1)
    features: int = param(3, "columns (channels)", min=1, max=256, step=1)
    scale: float = param(10.0, "std of the data", min=0.01, max=1000.0, step=0.01)
    seed: int = seed_param()
    device: str = device_param()


@dataclass
class RunningStatsResult(Result):
    running_means: list[list[float]]
    running_vars: list[list[float]]
    batch_means: list[list[float]]
    batch_vars: list[list[float]]
    true_mean: float
    true_var: float

    def tables(self) -> list[Table]:
        rows = [
            (str(i + 1), fmt_list(self.running_means[i], 2), fmt_list(self.running_vars[i], 2))
            for i in range(len(self.running_means))
        ]
        if len(rows) > 12:
            rows = [*rows[:5], ("...", "", ""), *rows[-5:]]
        note = (
            f"the data has mean {self.true_mean:g} and variance {self.true_var:g}; "
            "the running variance uses the unbiased batch variance"
        )
        return [
            Table(
                "BatchNorm1d running statistics after each pass",
                ("pass", "running mean", "running var"),
                rows,
                (note,),
            )
        ]


def run(p: Params, progress: object = None) -> RunningStatsResult:
    g = torch.Generator().manual_seed(p.seed)
    momentum = None if p.cumulative else p.momentum
    norm = nlnn.BatchNorm1d(p.features, momentum=momentum).to(p.device).train()
    running_mean, running_var = norm.running_mean, norm.running_var
    assert running_mean is not None and running_var is not None  # tracking is on
    rm, rv, bm, bv = [], [], [], []
    with torch.no_grad():
        for _ in range(p.passes):
            x = (torch.randn(p.batch, p.features, generator=g) * p.scale).to(p.device)  # (N, C)
            norm(x)
            bm.append(x.mean(0))
            bv.append(x.var(0))  # unbiased, as the running estimate uses
            rm.append(running_mean.clone())  # updated in place by the pass
            rv.append(running_var.clone())
    return RunningStatsResult(
        running_means=torch.stack(rm).tolist(),
        running_vars=torch.stack(rv).tolist(),
        batch_means=torch.stack(bm).tolist(),
        batch_vars=torch.stack(bv).tolist(),
        true_mean=0.0,
        true_var=p.scale**2,
    )


EXPERIMENT = Experiment(
    name="bn-running-stats",
    title="Running statistics build up",
    summary="BatchNorm1d running mean and variance after each training pass",
    params_type=Params,
    run=run,
)
