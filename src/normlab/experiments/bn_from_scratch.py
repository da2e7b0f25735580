"""``bn-from-scratch``: batch normalization's forward pass, and parity with torch's layer.

A deliberately skewed batch (every column mean ~5 and std ~3, column 0 squashed through an
exponential so it is heavy-tailed and narrow) goes through :func:`normlab.functional.batch_norm`
with :math:`\\gamma = 1, \\beta = 0`: every column comes out with mean 0 and std 1. Then
normlab's ``BatchNorm1d`` and ``torch.nn.BatchNorm1d`` see the same training batches, and the
result reports the largest differences in outputs, running statistics, eval-mode outputs and
input gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from normlab import functional
from normlab import nn as nlnn
from normlab.experiments.base import (
    Experiment,
    Histogram,
    Result,
    Table,
    device_param,
    fmt_list,
    histogram,
    param,
    seed_param,
)


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
        stats = [
            ("before", fmt_list(self.before_means, 2), fmt_list(self.before_stds, 2)),
            ("after", fmt_list(self.after_means, 3), fmt_list(self.after_stds, 3)),
        ]
        par = self.parity
        diffs = [
            ("train-mode output", f"{par.train_output:.3g}"),
            ("running_mean", f"{par.running_mean:.3g}"),
            ("running_var", f"{par.running_var:.3g}"),
            ("eval-mode output", f"{par.eval_output:.3g}"),
            ("input gradient", f"{par.input_grad:.3g}"),
        ]
        return [
            Table("Skewed batch, per column (std unbiased)", ("", "mean", "std"), stats),
            Table(
                "normlab BatchNorm1d vs torch.nn.BatchNorm1d: max |difference|",
                ("quantity", "max diff"),
                diffs,
            ),
        ]


def _parity(p: Params) -> Parity:
    g = torch.Generator().manual_seed(p.parity_seed)
    ours = nlnn.BatchNorm1d(p.features, momentum=p.momentum, affine=False).to(p.device)
    ref = torch.nn.BatchNorm1d(p.features, momentum=p.momentum, affine=False).to(p.device)
    train_diff = grad_diff = torch.zeros((), device=p.device)
    for _ in range(p.parity_batches):
        xb = (2.0 * torch.randn(32, p.features, generator=g) + 4.0).to(p.device)  # (32, C)
        upstream = torch.randn(32, p.features, generator=g).to(p.device)
        x1, x2 = xb.clone().requires_grad_(), xb.clone().requires_grad_()
        out1, out2 = ours(x1), ref(x2)
        (out1 * upstream).sum().backward()
        (out2 * upstream).sum().backward()
        assert x1.grad is not None and x2.grad is not None
        train_diff = torch.maximum(train_diff, (out1 - out2).abs().max().detach())
        grad_diff = torch.maximum(grad_diff, (x1.grad - x2.grad).abs().max())
    assert ours.running_mean is not None and ref.running_mean is not None
    assert ours.running_var is not None and ref.running_var is not None
    ours.eval()
    ref.eval()
    x_test = (2.0 * torch.randn(32, p.features, generator=g) + 4.0).to(p.device)
    with torch.no_grad():
        eval_diff = (ours(x_test) - ref(x_test)).abs().max()
    return Parity(
        train_output=train_diff.item(),
        running_mean=(ours.running_mean - ref.running_mean).abs().max().item(),
        running_var=(ours.running_var - ref.running_var).abs().max().item(),
        eval_output=eval_diff.item(),
        input_grad=grad_diff.item(),
    )


def run(p: Params, progress: object = None) -> BnFromScratchResult:
    g = torch.Generator().manual_seed(p.seed)
    skewed = 3.0 * torch.randn(p.batch, p.features, generator=g) + 5.0  # (N, C): mean 5, std 3
    skewed[:, 0] = torch.exp(0.5 * skewed[:, 0] / 5.0)  # heavy right tail, narrow
    skewed = skewed.to(p.device)
    ones = torch.ones(p.features, device=p.device)
    x_hat = functional.batch_norm(skewed, None, None, ones, torch.zeros_like(ones), training=True)
    rescaled = 2.0 * x_hat[:, 0] + 1.0  # gamma 2, beta 1 on column 0
    return BnFromScratchResult(
        before_means=skewed.mean(0).tolist(),
        before_stds=skewed.std(0).tolist(),
        after_means=x_hat.mean(0).tolist(),
        after_stds=x_hat.std(0).tolist(),
        before_hist=histogram(skewed[:, 0].cpu(), p.bins),
        after_hist=histogram(x_hat[:, 0].detach().cpu(), p.bins),
        rescaled_hist=histogram(rescaled.detach().cpu(), p.bins),
        parity=_parity(p),
    )


EXPERIMENT = Experiment(
    name="bn-from-scratch",
    title="Batch normalization from scratch",
    summary="a skewed batch re-centred by normlab's batch_norm; parity with torch's BatchNorm1d",
    params_type=Params,
    run=run,
)
