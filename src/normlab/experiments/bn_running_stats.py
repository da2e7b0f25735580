"""``bn-running-stats``: how BatchNorm's running estimates build up pass by pass.

Each training pass moves the stored estimates toward the batch's statistics:
``running = (1 - momentum) * running + momentum * batch_stat``, with the *unbiased* batch
variance (divide by N - 1), starting from mean 0 and variance 1. With ``cumulative`` the layer
keeps a plain average of all batches instead (``momentum=None`` in torch). Every pass draws a new
batch from the same distribution (mean 0, std ``scale``), so the estimates head for 0 and
``scale**2``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table

MAX_LINES = 8
"""Features drawn in the figure: more lines than this crowd the axes."""


@dataclass(frozen=True)
class Params:
    momentum: float = param(
        0.1, "weight of each new batch in the running estimates", min=0.0, max=1.0, step=0.01
    )
    cumulative: bool = param(False, "keep a cumulative average instead (momentum=None)")
    passes: int = param(1, "training passes, each with a fresh batch", min=1, max=500, step=1)
    batch: int = param(4, "rows per batch", min=2, max=4096, step=1)
    features: int = param(3, "columns (channels)", min=1, max=32, step=1)
    scale: float = param(10.0, "std of the data", min=0.01, max=1000.0, step=0.01)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run bn-running-stats --code` prints) ----------------


def running_stats(
    momentum: float,
    cumulative: bool,
    passes: int,
    batch: int,
    features: int,
    scale: float,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Feed ``passes`` fresh batches to a training-mode BatchNorm1d; record its running stats.

    Yields the record after every pass, and last the whole run.
    """
    torch.manual_seed(seed)
    norm = nn.BatchNorm1d(features, momentum=None if cumulative else momentum).to(device)
    norm.train()
    result: dict[str, Any] = {
        "running_means": [],  # (passes, C)
        "running_vars": [],
        "batch_means": [],
        "batch_vars": [],
        "true_mean": 0.0,
        "true_var": scale**2,
    }
    for _ in range(passes):
        x = (torch.randn(batch, features) * scale).to(device)  # (N, C), mean 0, std scale
        with torch.no_grad():
            norm(x)  # updates running_mean and running_var in place
        result["batch_means"].append(x.mean(dim=0).tolist())
        result["batch_vars"].append(x.var(dim=0).tolist())  # unbiased (÷ N-1), as the layer uses
        result["running_means"].append(norm.running_mean.tolist())
        result["running_vars"].append(norm.running_var.tolist())
        yield result  # every pass so far


def rounded(values: list[float]) -> list[float]:
    """Each value to 2 decimals, or to 3 significant digits below 0.1 (so that a variance of
    0.0064 is not printed as 0.0)."""
    return [round(v, 2) if abs(v) >= 0.1 else float(f"{v:.3g}") for v in values]


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The running estimates after each pass (the first and last five when there are many)."""
    stored = zip(result["running_means"], result["running_vars"], strict=True)
    rows = [
        [str(i + 1), str(rounded(mean)), str(rounded(var))] for i, (mean, var) in enumerate(stored)
    ]
    if len(rows) > 12:
        rows = [*rows[:5], ["...", "", ""], *rows[-5:]]
    note = (
        f"the data has mean {result['true_mean']:g} and variance {result['true_var']:g}; "
        "the running variance uses the unbiased batch variance"
    )
    return [
        {
            "title": "BatchNorm1d running statistics after each pass",
            "columns": ["pass", "running mean", "running var"],
            "rows": rows,
            "notes": [note],
        }
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class RunningStatsResult(Result):
    running_means: list[list[float]]
    running_vars: list[list[float]]
    batch_means: list[list[float]]
    batch_vars: list[list[float]]
    true_mean: float
    true_var: float

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        passes = fig.steps(len(self.running_means) + 1)  # 0: the new layer
        features = min(len(self.running_means[0]), MAX_LINES)
        mean_lines: list[fig.Series] = []
        var_lines: list[fig.Series] = []
        for j in range(features):
            color = fig.PALETTE[j % len(fig.PALETTE)]
            for start, stored, batches, out in (
                (0.0, self.running_means, self.batch_means, mean_lines),
                (1.0, self.running_vars, self.batch_vars, var_lines),
            ):
                out.append(
                    fig.Series(
                        f"feature {j}",
                        passes,
                        [start, *(row[j] for row in stored)],
                        kind="line+markers",
                        color=color,
                        legend=out is mean_lines,
                    )
                )
                out.append(
                    fig.Series(
                        f"feature {j}: that pass's batch",
                        passes[1:],
                        [row[j] for row in batches],
                        kind="markers",
                        color=color,
                        marker="x",
                        marker_size=7,
                        legend=False,
                    )
                )
        variances = [v for row in self.running_vars + self.batch_vars for v in row]
        positive = [v for v in [*variances, self.true_var, 1.0] if v > 0]
        log = bool(positive) and max(positive) / min(positive) >= 100
        x = fig.Axis("training pass (0 = new layer)")
        means = fig.Panel(
            x,
            fig.Axis("running mean"),
            mean_lines,
            title=f"running mean (dashed: the data's mean {self.true_mean:g})",
            lines=[fig.Line(self.true_mean, color="#000000", dash="dash")],
        )
        var_axis = fig.Axis(
            "running var (log scale)" if log else "running var", scale="log" if log else "linear"
        )
        var_values = fig.Panel(
            x,
            var_axis,
            var_lines,
            title=f"running var (dashed: the data's variance {self.true_var:g})",
            lines=[fig.Line(self.true_var, color="#000000", dash="dash")],
            note="× marks: that pass's batch statistic",
        )
        rule = (
            "cumulative average (momentum=None)"
            if self.params.get("cumulative")
            else f"momentum {self.params.get('momentum', '')}"
        )
        title = f"BatchNorm1d running statistics, {rule}"
        passes_run, passes_all = len(self.running_means), self.params.get("passes", 0)
        if passes_run < passes_all:  # a partial run (a streamed frame)
            title += f", so far: pass {passes_run} of {passes_all}"
        return [fig.Figure(title, [means, var_values])]


EXPERIMENT = Experiment(
    name="bn-running-stats",
    title="Running statistics build up",
    summary="BatchNorm1d running mean and variance after each training pass",
    params_type=Params,
    result_type=RunningStatsResult,
    entry=running_stats,
    tables=tables,
    code=(running_stats, rounded, tables),
    cost=Cost(5.0),
    stages=lambda p: p.passes,  # a batch at a time
    stage="pass",
)
