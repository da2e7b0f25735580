"""The deep stack that ``drift`` and ``bn-stack`` share: its parameters, code and result.

A batch passes through ``depth`` blocks ``Linear -> [Norm] -> activation`` (``models.block``, at
torch's default Linear init); the mean and std of each block's output show the scale shrink layer
by layer, or a norm pin it. This module registers no experiment: ``drift`` runs the stack with
no norm, ``bn-stack`` with BatchNorm1d, each in its own module with its own defaults, and another
norm's stack is one more such module.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import NORMS, block, fmt

ACTIVATIONS = ("relu", "tanh", "sigmoid", "linear")


@dataclass(frozen=True)
class Params:
    depth: int = param(
        10, "number of Linear -> [Norm] -> activation blocks", min=1, max=100, step=1
    )
    width: int = param(16, "features per layer", min=1, max=512, step=1)
    batch: int = param(64, "rows in the input batch", min=2, max=2048, step=1)
    activation: str = param("relu", "nonlinearity after each layer", choices=ACTIVATIONS)
    norm: str = param("none", "normalization after each Linear layer", choices=NORMS)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run drift --code` prints) ---------------------------


def drift(
    depth: int, width: int, batch: int, activation: str, norm: str, seed: int, device: str
) -> Iterator[dict[str, Any]]:
    """Push one batch through ``depth`` blocks and measure each block's output.

    Yields the result after every block, and last the whole stack.
    """
    torch.manual_seed(seed)
    x = torch.randn(batch, width).to(device)  # (N, D), drawn on the CPU
    stack = nn.Sequential(*[block(width, width, norm, activation) for _ in range(depth)])
    stack.to(device).train()  # BatchNorm normalizes with the batch's own statistics
    result: dict[str, Any] = {
        "input_mean": x.mean().item(),
        "input_std": x.std().item(),
        "means": [],
        "stds": [],
        "norm": norm,
        "activation": activation,
    }
    h = x
    for layer in stack:
        with torch.no_grad():
            h = layer(h)  # (N, D) -> (N, D): nothing resets the scale unless a norm does
        result["means"].append(h.mean().item())
        result["stds"].append(h.std().item())
        yield result  # every block so far


def stack_name(norm: str, activation: str) -> str:
    """One block of the stack in words: ``Linear → batch norm → relu``."""
    return "Linear → " + ("" if norm == "none" else f"{norm} norm → ") + activation


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The input's mean and std, then every layer's, and the range the stds span."""
    rows = [["input", fmt(result["input_mean"]), fmt(result["input_std"])]]
    for i, (mean, std) in enumerate(zip(result["means"], result["stds"], strict=True)):
        rows.append([f"layer {i + 1}", fmt(mean), fmt(std)])
    stds = result["stds"]  # always finite: no activation or norm here can overflow
    return [
        {
            "title": stack_name(result["norm"], result["activation"]),
            "columns": ["", "mean", "std"],
            "rows": rows,
            "notes": [f"std range over layers: {fmt(min(stds))} to {fmt(max(stds))}"],
        }
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class StackResult(Result):
    input_mean: float
    input_std: float
    means: list[float]
    stds: list[float]
    norm: str
    activation: str

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        """The std and the mean over the layers; a partial run (a streamed frame) draws the
        layers so far."""
        layers = fig.steps(len(self.stds) + 1)
        series = [
            fig.Series(
                "std", layers, [self.input_std, *self.stds], kind="line+markers", color=fig.BLUE
            ),
            fig.Series(
                "mean",
                layers,
                [self.input_mean, *self.means],
                kind="line+markers",
                color=fig.ORANGE,
                dash="dash",
                marker="square",
            ),
        ]
        what = "nothing resets the scale" if self.norm == "none" else "the norm pins the scale"
        panel = fig.Panel(
            fig.Axis("layer (0 = the input)"),
            fig.Axis("statistic of the layer's output"),
            series,
            lines=[fig.Line(0.0, color=fig.GRAY, dash="solid")],
        )
        stack = stack_name(self.norm, self.activation)
        depth = self.params.get("depth", len(self.stds))  # the whole stack's
        so_far = f", so far: layer {len(self.stds)} of {depth}" if len(self.stds) < depth else ""
        return [fig.Figure(f"{depth} × ({stack}): {what}{so_far}", [panel])]


CODE = (block, drift, fmt, stack_name, tables)
"""What ``normlab run drift --code`` (or ``bn-stack``) prints: the block, the run, the table."""
