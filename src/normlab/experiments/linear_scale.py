"""``linear-scale``: a Linear layer passes its input's scale along.

Ten times the input spread gives about ten times the output spread (exactly ten times without
the bias), so any shrink or growth a layer applies carries into the next one.
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
    batch: int = param(8, "rows in the input batch", min=2, max=4096, step=1)
    in_features: int = param(4, "input width of the Linear layer", min=1, max=1024, step=1)
    out_features: int = param(4, "output width of the Linear layer", min=1, max=1024, step=1)
    scale: float = param(
        10.0, "factor applied to the input for the second pass", min=0.01, max=1000.0, step=0.01
    )
    seed: int = seed_param()
    device: str = device_param()


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
        rows = [
            ("normal input", fmt(self.input_std), fmt(self.output_std)),
            (f"{self.scale:g} x input", fmt(self.scaled_input_std), fmt(self.scaled_output_std)),
        ]
        note = f"output std grew {self.output_ratio:.2f}x for a {self.scale:g}x input"
        return [Table("One Linear layer", ("pass", "input std", "output std"), rows, (note,))]


def run(p: Params, progress: object = None) -> LinearScaleResult:
    g = torch.Generator().manual_seed(p.seed)
    layer = models.linear(p.in_features, p.out_features, generator=g).to(p.device)
    x = torch.randn(p.batch, p.in_features, generator=g).to(p.device)  # (N, D_in)
    with torch.no_grad():
        out = layer(x)  # (N, D_out)
        out_scaled = layer(x * p.scale)
    return LinearScaleResult(
        input_std=x.std().item(),
        output_std=out.std().item(),
        scaled_input_std=(x * p.scale).std().item(),
        scaled_output_std=out_scaled.std().item(),
        scale=p.scale,
    )


EXPERIMENT = Experiment(
    name="linear-scale",
    title="Scale passes through a layer",
    summary="std of one Linear layer's output for an input and for a scaled copy of it",
    params_type=Params,
    run=run,
)
