"""``bn-from-scratch``: batch normalization's forward pass, and parity with torch's layer.

A deliberately skewed batch (every column mean ~5 and std ~3, column 0 squashed through an
exponential so it is heavy-tailed and narrow) goes through normlab's from-scratch
:func:`normlab.functional.batch_norm` with :math:`\\gamma = 1, \\beta = 0`: every column comes out
with mean 0 and std 1. Then that function and ``torch.nn.BatchNorm1d`` see the same training
batches, and the result reports the largest differences in outputs, running statistics,
eval-mode outputs and input gradients. The script shows both: normlab's function, pasted in,
beside torch's layer.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Histogram, Result
from normlab.figures import Table
from normlab.functional import BATCH_NORM_CODE, batch_norm
from normlab.models import fmt, fmt_list, histogram


@dataclass(frozen=True)
class Params:
    batch: int = param(512, "rows of the skewed batch", min=2, max=8192, step=1)
    features: int = param(
        4, "columns of the skewed batch (column 0 is heavy-tailed)", min=1, max=64, step=1
    )
    bins: int = param(50, "histogram bins", min=5, max=200, step=1)
    parity_batches: int = param(20, "training batches fed to both layers", min=1, max=500, step=1)
    momentum: float = param(0.1, "momentum of both layers", min=0.0, max=1.0, step=0.01)
    seed: int = seed_param()
    parity_seed: int = seed_param(1)
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run bn-from-scratch --code` prints) -----------------


def skewed_batch(batch: int, features: int, seed: int) -> torch.Tensor:
    """Columns of mean ~5 and std ~3; column 0 squashed through exp: narrow and heavy-tailed."""
    torch.manual_seed(seed)
    skewed = 3.0 * torch.randn(batch, features) + 5.0  # (N, C)
    skewed[:, 0] = torch.exp(0.5 * skewed[:, 0] / 5.0)
    return skewed


def parity(
    features: int, momentum: float, parity_batches: int, parity_seed: int, device: str
) -> dict[str, float]:
    """The largest differences between ``batch_norm`` and ``nn.BatchNorm1d`` on the same batches.

    The batches and the test batch are the notebook's: the only draws from the seeded stream.
    The made-up upstream gradient comes from a generator of its own, so it moves none of them.
    """
    torch.manual_seed(parity_seed)
    grads = torch.Generator().manual_seed(parity_seed + 1)  # the upstream gradients' own stream
    ref = nn.BatchNorm1d(features, momentum=momentum, affine=False).to(device)
    running_mean = torch.zeros(features, device=device)  # ours, as a new layer starts
    running_var = torch.ones(features, device=device)
    train_diff = grad_diff = 0.0
    for _ in range(parity_batches):
        xb = (2.0 * torch.randn(32, features) + 4.0).to(device)  # (32, C)
        upstream = torch.randn(32, features, generator=grads).to(device)  # a made-up dL/dy
        x1, x2 = xb.clone().requires_grad_(), xb.clone().requires_grad_()
        out1 = batch_norm(x1, running_mean, running_var, training=True, momentum=momentum)
        out2 = ref(x2)
        (out1 * upstream).sum().backward()
        (out2 * upstream).sum().backward()
        train_diff = max(train_diff, (out1 - out2).abs().max().item())
        grad_diff = max(grad_diff, (x1.grad - x2.grad).abs().max().item())
    ref.eval()  # test time: both use the running statistics, not the batch's
    x_test = (2.0 * torch.randn(32, features) + 4.0).to(device)
    with torch.no_grad():
        ours = batch_norm(x_test, running_mean, running_var, training=False)
        eval_diff = (ours - ref(x_test)).abs().max().item()
    return {
        "train_output": train_diff,
        "running_mean": (running_mean - ref.running_mean).abs().max().item(),
        "running_var": (running_var - ref.running_var).abs().max().item(),
        "eval_output": eval_diff,
        "input_grad": grad_diff,
    }


def bn_from_scratch(
    batch: int,
    features: int,
    bins: int,
    parity_batches: int,
    momentum: float,
    seed: int,
    parity_seed: int,
    device: str,
) -> dict[str, Any]:
    """Normalize a skewed batch from scratch, then check ``batch_norm`` against torch's layer."""
    skewed = skewed_batch(batch, features, seed).to(device)
    gamma, beta = torch.ones(features, device=device), torch.zeros(features, device=device)
    x_hat = batch_norm(skewed, None, None, gamma, beta, training=True)  # (N, C)
    rescaled = 2.0 * x_hat[:, 0] + 1.0  # column 0 with gamma 2, beta 1
    return {
        "before_means": skewed.mean(0).tolist(),
        "before_stds": skewed.std(0).tolist(),  # unbiased, as the notebook prints
        "after_means": x_hat.mean(0).tolist(),
        "after_stds": x_hat.std(0).tolist(),
        "before_hist": histogram(skewed[:, 0].cpu(), bins),
        "after_hist": histogram(x_hat[:, 0].cpu(), bins),
        "rescaled_hist": histogram(rescaled.cpu(), bins),
        "parity": parity(features, momentum, parity_batches, parity_seed, device),
    }


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The skewed batch's columns before and after, then the largest differences from torch."""
    stats = [
        ["before", fmt_list(result["before_means"], 2), fmt_list(result["before_stds"], 2)],
        ["after", fmt_list(result["after_means"], 3), fmt_list(result["after_stds"], 3)],
    ]
    diffs = [[name, f"{diff:.3g}"] for name, diff in result["parity"].items()]
    return [
        {
            "title": "Skewed batch, per column (std unbiased)",
            "columns": ["", "mean", "std"],
            "rows": stats,
            "notes": [],
        },
        {
            "title": "normlab's batch_norm vs torch.nn.BatchNorm1d: max |difference|",
            "columns": ["quantity", "max diff"],
            "rows": diffs,
            "notes": [],
        },
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class Parity:
    train_output: float
    running_mean: float
    running_var: float
    eval_output: float
    input_grad: float


@dataclass
class BnFromScratchResult(Result):
    before_means: list[float]
    before_stds: list[float]
    after_means: list[float]
    after_stds: list[float]
    before_hist: Histogram  # column 0 before
    after_hist: Histogram  # column 0 after (gamma 1, beta 0)
    rescaled_hist: Histogram  # column 0 with gamma 2, beta 1
    parity: Parity

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        def bars(h: Histogram, name: str, color: str, opacity: float) -> fig.Series:
            centers = [(a + b) / 2 for a, b in itertools.pairwise(h.edges)]
            return fig.Series(
                name, centers, h.counts, "histogram", color, edges=h.edges, opacity=opacity
            )

        before = fig.Panel(
            fig.Axis("value"),
            fig.Axis("count"),
            [bars(self.before_hist, "column 0 before", fig.RED, 0.7)],
            title=f"column 0 before: mean {self.before_means[0]:.2f}, "
            f"std {self.before_stds[0]:.2f}",
        )
        after = fig.Panel(
            fig.Axis("value"),
            fig.Axis("count"),
            [
                bars(self.after_hist, "x̂ (γ = 1, β = 0)", fig.BLUE, 0.7),
                bars(self.rescaled_hist, "γ = 2, β = 1", fig.GREEN, 0.5),
            ],
            title=f"column 0 after: x̂ mean {self.after_means[0]:.2f}, std {self.after_stds[0]:.2f}",
        )
        return [fig.Figure("Batch normalization re-centres a skewed column", [before, after])]


EXPERIMENT = Experiment(
    name="bn-from-scratch",
    title="Batch normalization from scratch",
    summary="a skewed batch re-centred by normlab's batch_norm; parity with torch's BatchNorm1d",
    params_type=Params,
    result_type=BnFromScratchResult,
    entry=bn_from_scratch,
    tables=tables,
    code=(
        *BATCH_NORM_CODE,
        histogram,
        skewed_batch,
        parity,
        bn_from_scratch,
        fmt,
        fmt_list,
        tables,
    ),
    cost=Cost(1.0),  # 0.24 s measured at maxima(), one thread (benchmarks/maxima.py): no stream
)
