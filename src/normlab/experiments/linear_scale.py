"""``linear-scale``: a Linear layer passes its input's scale along.

Ten times the input spread gives about ten times the output spread (exactly ten times without
the bias), so any shrink or growth a layer applies carries into the next one.
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
    batch: int = param(8, "rows in the input batch", min=2, max=4096, step=1)
    in_features: int = param(4, "input width of the Linear layer", min=1, max=1024, step=1)
    out_features: int = param(4, "output width of the Linear layer", min=1, max=1024, step=1)
    scale: float = param(
        10.0, "factor applied to the input for the second pass", min=0.01, max=1000.0, step=0.01
    )
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run linear-scale --code` prints) -------------------


def linear_scale(
    batch: int, in_features: int, out_features: int, scale: float, seed: int, device: str
) -> dict[str, Any]:
    """The std of one Linear layer's output, for a batch and for the batch times ``scale``."""
    torch.manual_seed(seed)
    layer = nn.Linear(in_features, out_features).to(device)  # torch's default init
    x = torch.randn(batch, in_features).to(device)  # (N, D_in), drawn on the CPU
    with torch.no_grad():
        out = layer(x)  # (N, D_out)
        out_scaled = layer(x * scale)
    return {
        "input_std": x.std().item(),
        "output_std": out.std().item(),
        "scaled_input_std": (x * scale).std().item(),
        "scaled_output_std": out_scaled.std().item(),
        "scale": scale,
    }


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The two passes' stds, and how much the output grew."""
    scale = result["scale"]
    rows = [
        ["normal input", fmt(result["input_std"]), fmt(result["output_std"])],
        [f"{scale:g} x input", fmt(result["scaled_input_std"]), fmt(result["scaled_output_std"])],
    ]
    growth = result["scaled_output_std"] / result["output_std"]
    note = f"output std grew {growth:.2f}x for a {scale:g}x input"
    return [
        {
            "title": "One Linear layer",
            "columns": ["pass", "input std", "output std"],
            "rows": rows,
            "notes": [note],
        }
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class LinearScaleResult(Result):
    input_std: float
    output_std: float
    scaled_input_std: float
    scaled_output_std: float
    scale: float

    @property
    def output_ratio(self) -> float:
        return self.scaled_output_std / self.output_std

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        passes = ["normal input", f"{self.scale:g} × input"]
        ins = [self.input_std, self.scaled_input_std]
        outs = [self.output_std, self.scaled_output_std]
        bars = [
            fig.Series("input std", passes, ins, kind="bars", color=fig.GRAY, labels=_g(ins)),
            fig.Series("output std", passes, outs, kind="bars", color=fig.BLUE, labels=_g(outs)),
        ]
        panel = fig.Panel(
            fig.Axis(""),
            fig.Axis("standard deviation"),
            bars,
            title=f"output std grew {self.output_ratio:.2f}× for a {self.scale:g}× input",
        )
        return [fig.Figure("One Linear layer passes its input's scale along", [panel])]


def _g(values: list[float]) -> list[str]:
    return [f"{v:.4g}" for v in values]


EXPERIMENT = Experiment(
    name="linear-scale",
    title="Scale passes through a layer",
    summary="std of one Linear layer's output for an input and for a scaled copy of it",
    params_type=Params,
    result_type=LinearScaleResult,
    entry=linear_scale,
    tables=tables,
    code=(linear_scale, fmt, tables),
    cost=Cost(1.0),  # 0.18 s measured at maxima(), one thread (benchmarks/maxima.py): no stream
)
