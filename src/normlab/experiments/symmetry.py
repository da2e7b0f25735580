"""``symmetry``: constant initialization never lets hidden units differ.

A one-hidden-layer ReLU net (2 -> hidden -> 1) trains on two moons with full-batch SGD. With
every weight set to one constant, all hidden units compute the same value, get the same gradient
and take the same step, so they stay identical forever (the max difference between unit 0 and
unit 1 is exactly 0.0). Random Gaussian weights break the symmetry. The result carries the
chosen run's weight and gradient history and, for contrast, the same numbers for the other init.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from normlab import data, init, models, train
from normlab.experiments.base import (
    Experiment,
    Progress,
    Result,
    Table,
    device_param,
    param,
    seed_param,
)


@dataclass(frozen=True)
class Params:
    random_init: bool = param(False, "draw weights from N(0, std^2) instead of a constant")
    const: float = param(
        0.1, "the constant every weight starts at (constant init)", min=0.01, max=1.0, step=0.01
    )
    std: float = param(0.5, "std of the random init", min=0.01, max=2.0, step=0.01)
    steps: int = param(30, "training steps", min=1, max=500, step=1)
    lr: float = param(0.5, "SGD learning rate", min=0.01, max=5.0, step=0.01)
    hidden: int = param(6, "hidden units", min=2, max=64, step=1)
    seed: int = seed_param()
    device: str = device_param()


@dataclass
class SymmetrySummary:
    init: str
    max_weight_diff: float
    max_grad_diff: float
    distinct_units: int


@dataclass
class SymmetryResult(Result):
    init: str
    weights: list[list[list[float]]]  # (steps, hidden, 2): incoming weights of each hidden unit
    grads: list[list[list[float]]]  # (steps, hidden, 2): their gradients
    losses: list[float]
    summary: SymmetrySummary
    contrast: SymmetrySummary

    def tables(self) -> list[Table]:
        rows = [
            (s.init, repr(s.max_weight_diff), repr(s.max_grad_diff), str(s.distinct_units))
            for s in (self.summary, self.contrast)
        ]
        cols = ("init", "max |unit0 - unit1| weight", "max |grad0 - grad1|", "distinct units")
        w = self.weights
        steps = sorted({0, len(w) // 2, len(w) - 1})
        trace = [(str(t), _pair(w[t][0]), _pair(w[t][1])) for t in steps]
        return [
            Table("Hidden units 0 and 1 over training", cols, rows),
            Table(f"Incoming weights ({self.init} init)", ("step", "unit 0", "unit 1"), trace),
        ]


def _pair(v: list[float]) -> str:
    return "[" + ", ".join(f"{x:.8f}" for x in v) + "]"


def _distinct_units(w_hist: torch.Tensor, rtol: float = 1e-5) -> int:
    """Count hidden units whose weight histories differ beyond float rounding.

    Not ``torch.unique``: a matmul can sum one unit's terms in another order than its
    neighbour's (vector lanes vs the remainder), so units that are equal in exact arithmetic
    may differ in the last bit.
    """
    units = w_hist.transpose(0, 1).flatten(1)  # (steps, H, D) -> (H, steps * D)
    tol = rtol * units.abs().max().item()
    representatives: list[torch.Tensor] = []
    for u in units:
        if all((u - r).abs().max().item() > tol for r in representatives):
            representatives.append(u)
    return len(representatives)


def _net(p: Params, random_init: bool) -> nn.Sequential:
    g = torch.Generator().manual_seed(p.seed)
    net = nn.Sequential(models.linear(2, p.hidden), nn.ReLU(), models.linear(p.hidden, 1))
    for name, weight in net.named_parameters():  # order: fc1.weight, fc1.bias, fc2...
        if name.endswith("bias"):
            init.zeros_(weight)
        elif random_init:
            init.normal_(weight, 0.0, p.std, generator=g)
        else:
            init.constant_(weight, p.const)
    return net


def _run_one(p: Params, random_init: bool, progress: Progress | None) -> SymmetryResult:
    x, y = data.two_moons(device=p.device)
    net = _net(p, random_init).to(p.device)
    fc1 = net[0]
    assert isinstance(fc1, nn.Linear)
    w_hist = torch.empty(p.steps, p.hidden, 2, device=p.device)
    g_hist = torch.empty(p.steps, p.hidden, 2, device=p.device)

    def record(step: int, model: nn.Module) -> None:
        assert fc1.weight.grad is not None
        w_hist[step] = fc1.weight.detach()
        g_hist[step] = fc1.weight.grad.detach()

    losses = train.train_sgd(net, x, y, lr=p.lr, steps=p.steps, on_step=record, progress=progress)
    w_hist, g_hist = w_hist.cpu(), g_hist.cpu()
    label = "random" if random_init else "constant"
    summary = SymmetrySummary(
        init=label,
        max_weight_diff=(w_hist[:, 0] - w_hist[:, 1]).abs().max().item(),
        max_grad_diff=(g_hist[:, 0] - g_hist[:, 1]).abs().max().item(),
        distinct_units=_distinct_units(w_hist),
    )
    return SymmetryResult(
        init=label,
        weights=w_hist.tolist(),
        grads=g_hist.tolist(),
        losses=losses.tolist(),
        summary=summary,
        contrast=summary,
    )


def run(p: Params, progress: Progress | None = None) -> SymmetryResult:
    result = _run_one(p, p.random_init, progress)
    result.contrast = _run_one(p, not p.random_init, None).summary
    return result


EXPERIMENT = Experiment(
    name="symmetry",
    title="The symmetry problem",
    summary="hidden-unit weights and gradients over training, constant vs random init",
    params_type=Params,
    run=run,
    trains=True,
)
