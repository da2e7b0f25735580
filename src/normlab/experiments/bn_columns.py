"""``bn-columns``: one batch, rescaled column by column.

Columns that start at very different scales all leave a training-mode BatchNorm1d with mean 0
and std 1, measured as the layer measures: the biased (divide by N) std of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import fmt


@dataclass(frozen=True)
class Params:
    batch: int = param(4, "rows in the batch", min=2, max=4096, step=1)
    scales: tuple[float, ...] = param(
        (1.0, 10.0, 100.0), "std of each column before the layer", min=0.001, max=10000.0, max_len=8
    )
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run bn-columns --code` prints) ----------------------


def bn_columns(batch: int, scales: list[float], seed: int, device: str) -> dict[str, Any]:
    """Columns drawn at very different scales, before and after a training-mode BatchNorm1d."""
    torch.manual_seed(seed)
    x = torch.randn(batch, len(scales)) * torch.tensor(scales)  # (N, C): column j has std scales[j]
    x = x.to(device)
    norm = nn.BatchNorm1d(len(scales)).to(device)
    norm.train()  # normalize with this batch's own statistics
    with torch.no_grad():
        out = norm(x)  # (N, C)
    return {  # std with unbiased=False: divide by N, as the layer does
        "input_means": x.mean(dim=0).tolist(),
        "input_stds": x.std(dim=0, unbiased=False).tolist(),
        "output_means": out.mean(dim=0).tolist(),
        "output_stds": out.std(dim=0, unbiased=False).tolist(),
    }


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each column's mean and std before and after the layer."""
    rows = []
    for j in range(len(result["input_means"])):
        before = [fmt(result["input_means"][j]), fmt(result["input_stds"][j])]
        after = [fmt(result["output_means"][j]), fmt(result["output_stds"][j])]
        rows.append([f"column {j}", *before, *after])
    note = "std is the biased batch std (divide by N), the one BatchNorm normalizes with"
    return [
        {
            "title": "BatchNorm1d in training mode, per column",
            "columns": ["", "mean before", "std before", "mean after", "std after"],
            "rows": rows,
            "notes": [note],
        }
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class BnColumnsResult(Result):
    input_means: list[float]
    input_stds: list[float]
    output_means: list[float]
    output_stds: list[float]

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        cols = [f"column {j}" for j in range(len(self.input_means))]

        def bars(name: str, values: list[float], color: str, floor: float | None) -> fig.Series:
            shown = values if floor is None else fig.floored(values, floor)
            labels = [f"{v:.3g}" for v in values]
            return fig.Series(name, cols, shown, kind="bars", color=color, labels=labels)

        stds = fig.Panel(
            fig.Axis(""),
            fig.Axis("std (biased, ÷N), log scale", scale="log"),
            [
                bars("before", self.input_stds, fig.RED, 1e-12),
                bars("after BatchNorm1d", self.output_stds, fig.BLUE, 1e-12),
            ],
            title="std per column: all 1 after",
            lines=[fig.Line(1.0)],
        )
        means = fig.Panel(
            fig.Axis(""),
            fig.Axis("mean"),
            [
                bars("before", self.input_means, fig.RED, None),
                bars("after BatchNorm1d", self.output_means, fig.BLUE, None),
            ],
            title="mean per column: all 0 after",
            lines=[fig.Line(0.0, dash="solid")],
        )
        return [fig.Figure("BatchNorm1d in training mode, column by column", [stds, means])]


EXPERIMENT = Experiment(
    name="bn-columns",
    title="One batch, rescaled per column",
    summary="column means and stds before and after a training-mode BatchNorm1d",
    params_type=Params,
    result_type=BnColumnsResult,
    entry=bn_columns,
    tables=tables,
    code=(bn_columns, fmt, tables),
    cost=Cost(1.0),  # 0.00 s measured at maxima(), one thread (benchmarks/maxima.py): no stream
)
