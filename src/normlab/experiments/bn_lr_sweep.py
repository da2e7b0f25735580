"""``bn-lr-sweep``: how far BatchNorm moves the range of learning rates that train.

The ``bn-lr`` network (same seed, same starting weights) trains at ``points`` learning rates
spaced evenly on a log scale from ``lr_min`` to ``lr_max``, with and without BatchNorm. For each
rate the result keeps the final loss (the mean of the last ``tail`` steps, so one lucky step does
not count) and the highest loss after the first ``tail`` steps (a spike that the final loss would
hide). A rate counts as *stable* when training ends below ``stable_loss`` and never spiked above
the starting loss after the warm-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from normlab import data, train
from normlab.experiments import bn_lr
from normlab.experiments.base import (
    Experiment,
    ParameterError,
    Progress,
    Result,
    Table,
    device_param,
    param,
    seed_param,
)


@dataclass(frozen=True)
class Params:
    lr_min: float = param(0.1, "smallest learning rate", min=0.01, max=5.0, step=0.01)
    lr_max: float = param(3.0, "largest learning rate", min=0.01, max=5.0, step=0.01)
    points: int = param(12, "learning rates tried (log-spaced)", min=2, max=24, step=1)
    steps: int = param(150, "training steps per run", min=10, max=500, step=1)
    tail: int = param(10, "steps averaged for the final loss", min=1, max=50, step=1)
    stable_loss: float = param(
        0.3, "final loss below which a run counts as trained", min=0.01, max=1.0, step=0.01
    )
    hidden_layers: int = param(4, "hidden blocks", min=1, max=8, step=1)
    width: int = param(64, "units per hidden block", min=2, max=128, step=1)
    seed: int = seed_param()
    device: str = device_param()

    def __post_init__(self) -> None:
        if self.lr_max <= self.lr_min:
            raise ParameterError(
                "lr_max",
                f"parameter 'lr_max': {self.lr_max:g} must be larger than lr_min ({self.lr_min:g})",
            )
        if self.tail >= self.steps:
            raise ParameterError(
                "tail", f"parameter 'tail': {self.tail} must be smaller than steps ({self.steps})"
            )


@dataclass
class SweepCurve:
    batch_norm: bool
    final_losses: list[float]  # (points,): mean loss of the last `tail` steps
    peak_losses: list[float]  # (points,): highest loss after the first `tail` steps
    stable: list[bool]  # (points,)

    @property
    def largest_stable_lr_index(self) -> int | None:
        indices = [i for i, ok in enumerate(self.stable) if ok]
        return max(indices) if indices else None


@dataclass
class BnLrSweepResult(Result):
    lrs: list[float]
    curves: list[SweepCurve]  # without BN, then with BN

    def tables(self) -> list[Table]:
        plain, bn = self.curves
        rows = [(f"{lr:.3g}", _cell(plain, i), _cell(bn, i)) for i, lr in enumerate(self.lrs)]
        notes = tuple(
            f"{'with' if c.batch_norm else 'without'} BN: largest stable rate "
            + (
                "none"
                if c.largest_stable_lr_index is None
                else f"{self.lrs[c.largest_stable_lr_index]:.3g}"
            )
            for c in self.curves
        )
        return [
            Table(
                "Final loss (peak after warm-up) by learning rate",
                ("lr", "without BN", "with BN"),
                rows,
                notes,
            )
        ]


def _cell(curve: SweepCurve, i: int) -> str:
    final, peak = curve.final_losses[i], curve.peak_losses[i]
    text = f"{final:.4f} ({peak:.2f})" if math.isfinite(final) else "diverged"
    return text + ("" if curve.stable[i] else "  unstable")


def _summarize(losses: torch.Tensor, tail: int, stable_loss: float) -> tuple[float, float, bool]:
    finite = torch.nan_to_num(losses, nan=math.inf)  # NaN counts as a blow-up
    final = finite[-tail:].mean().item()
    peak = finite[tail:].max().item()
    ok = math.isfinite(final) and final < stable_loss and peak <= finite[0].item()
    return final, peak, ok


def _offset(progress: Progress, before: int, total: int) -> Progress:
    """One rate's ``progress(done, steps)`` as the sweep's ``progress(before + done, total)``."""

    def report(done: int, steps: int) -> None:
        progress(before + done, total)

    return report


def run(p: Params, progress: Progress | None = None) -> BnLrSweepResult:
    x, y = data.two_moons(device=p.device)
    lrs = torch.logspace(math.log10(p.lr_min), math.log10(p.lr_max), p.points).tolist()
    base = bn_lr.Params(hidden_layers=p.hidden_layers, width=p.width, seed=p.seed, device=p.device)
    summaries: dict[bool, list[tuple[float, float, bool]]] = {False: [], True: []}
    total = len(lrs) * p.steps  # progress counts training steps over the whole sweep
    for i, lr in enumerate(lrs):
        nets = [bn_lr._net(base, False), bn_lr._net(base, True)]
        step = None if progress is None else _offset(progress, i * p.steps, total)
        plain, with_bn = train.train_mlps_fast(nets, x, y, lr=lr, steps=p.steps, progress=step)
        summaries[False].append(_summarize(plain.losses, p.tail, p.stable_loss))
        summaries[True].append(_summarize(with_bn.losses, p.tail, p.stable_loss))
    curves = [
        SweepCurve(
            batch_norm=bn,
            final_losses=[s[0] for s in summaries[bn]],
            peak_losses=[s[1] for s in summaries[bn]],
            stable=[s[2] for s in summaries[bn]],
        )
        for bn in (False, True)
    ]
    return BnLrSweepResult(lrs=lrs, curves=curves)


EXPERIMENT = Experiment(
    name="bn-lr-sweep",
    title="The learning-rate sweep, with and without BatchNorm",
    summary="final loss against the learning rate for the bn-lr network, with and without BN",
    params_type=Params,
    run=run,
    trains=True,
)
