"""``bn-columns``: one batch, rescaled column by column.

Columns that start at very different scales all leave a training-mode BatchNorm1d with mean 0
and std 1, measured as the layer measures: the biased (divide by N) std of the batch.
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
    fmt,
    param,
    seed_param,
)


@dataclass(frozen=True)
class Params:
    batch: int = param(4, "rows in the batch", min=2, max=4096, step=1)
    scales: tuple[float, ...] = param(
        (1.0, 10.0, 100.0), "std of each column before the layer", min=0.001, max=10000.0, max_len=8
    )
    seed: int = seed_param()
    device: str = device_param()


@dataclass
class BnColumnsResult(Result):
    input_means: list[float]
    input_stds: list[float]
    output_means: list[float]
    output_stds: list[float]

    def tables(self) -> list[Table]:
        rows = [
            (
                f"column {j}",
                fmt(self.input_means[j]),
                fmt(self.input_stds[j]),
                fmt(self.output_means[j]),
                fmt(self.output_stds[j]),
            )
            for j in range(len(self.input_means))
        ]
        cols = ("", "mean before", "std before", "mean after", "std after")
        note = "std is the biased batch std (divide by N), the one BatchNorm normalizes with"
        return [Table("BatchNorm1d in training mode, per column", cols, rows, (note,))]


def run(p: Params, progress: object = None) -> BnColumnsResult:
    g = torch.Generator().manual_seed(p.seed)
    scales = torch.tensor(p.scales)  # (C,)
    x = (torch.randn(p.batch, len(p.scales), generator=g) * scales).to(p.device)  # (N, C)
    norm = nlnn.BatchNorm1d(len(p.scales)).to(p.device).train()
    with torch.no_grad():
        out = norm(x)  # (N, C)
    return BnColumnsResult(
        input_means=x.mean(0).tolist(),
        input_stds=x.std(0, unbiased=False).tolist(),
        output_means=out.mean(0).tolist(),
        output_stds=out.std(0, unbiased=False).tolist(),
    )


EXPERIMENT = Experiment(
    name="bn-columns",
    title="One batch, rescaled per column",
    summary="column means and stds before and after a training-mode BatchNorm1d",
    params_type=Params,
    run=run,
)
