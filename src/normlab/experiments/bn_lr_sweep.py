"""``bn-lr-sweep``: how far BatchNorm moves the range of learning rates that train.

The ``bn-lr`` network (same seed, same starting weights) trains at ``points`` learning rates
spaced evenly on a log scale from ``lr_min`` to ``lr_max``, with and without BatchNorm. For each
rate the result keeps the final loss (the mean of the last ``tail`` steps, so one lucky step does
not count) and the highest loss after the first ``tail`` steps (a spike that the final loss would
hide). A rate counts as *stable* when training ends below ``stable_loss`` and never spiked above
the starting loss after the warm-up.

The grid is a sweep of ``bn-lr``, one of its runs per rate: its rates are
:func:`~normlab.models.log_spaced`'s, as a sweep's ``lr=A:B:N:log`` range's are, and its table
prints the ``normlab sweep bn-lr`` command that trains the same nets on the sweep engine (where
more rates, seeds and inits are one more ``--grid`` away, stored and batched).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import LOSS_CLIP, MLP, block, fmt, fmt_as, log_spaced
from normlab.train import train, train_step

SWEEP_FLOOR = 1e-6
"""A final loss of 0 is drawn at this floor of the log axis."""
LR_TICKS = (0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0)


@dataclass(frozen=True)
class Params:
    lr_min: float = param(0.1, "smallest learning rate", min=0.01, max=4.99, step=0.01)
    lr_max: float = param(
        3.0, "largest learning rate", min=0.02, max=5.0, step=0.01, follows=(">", "lr_min")
    )
    points: int = param(12, "learning rates tried (log-spaced)", min=2, max=12, step=1)
    steps: int = param(150, "training steps per run", min=10, max=150, step=1)
    tail: int = param(
        10, "steps averaged for the final loss", min=1, max=50, step=1, follows=("<", "steps")
    )
    stable_loss: float = param(
        0.3, "final loss below which a run counts as trained", min=0.01, max=1.0, step=0.01
    )
    hidden_layers: int = param(4, "hidden blocks", min=1, max=4, step=1)
    width: int = param(64, "units per hidden block", min=2, max=64, step=1)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run bn-lr-sweep --code` prints) ---------------------


def summarize(losses: list[float], tail: int, stable_loss: float) -> tuple[float, float, bool]:
    """The final loss (mean of the last ``tail``), the peak after the first ``tail`` steps, and
    whether the run counts as stable. A nan counts as a blow-up (an infinite loss)."""
    blown = [math.inf if math.isnan(v) else v for v in losses]
    final = sum(blown[-tail:]) / tail
    peak = max(blown[tail:])
    stable = math.isfinite(final) and final < stable_loss and peak <= blown[0]
    return final, peak, stable


def bn_lr_sweep(
    lr_min: float,
    lr_max: float,
    points: int,
    steps: int,
    tail: int,
    stable_loss: float,
    hidden_layers: int,
    width: int,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Train the bn-lr net at every learning rate of a log-spaced grid, without and with BN.

    Yields the result so far after every rate's run (the curves as they grow), and last the
    whole sweep.
    """
    x, y = two_moons(device=device)
    lrs = log_spaced(lr_min, lr_max, points)  # what a sweep's range lr=A:B:N:log trains at
    curves: list[dict[str, Any]] = [
        {"batch_norm": bn, "final_losses": [], "peak_losses": [], "stable": []}
        for bn in (False, True)
    ]
    grid = bn_lr_grid(lr_min, lr_max, points, steps, hidden_layers, width, seed, device)
    result = {"lrs": lrs, "curves": curves, "bn_lr_grid": grid}
    for curve in curves:
        for lr in lrs:
            torch.manual_seed(seed)  # the same starting weights at every rate
            norm = "batch" if curve["batch_norm"] else "none"
            net = MLP(width, hidden_layers, norm).to(device)
            final, peak, stable = summarize(list(train(net, x, y, lr, steps)), tail, stable_loss)
            curve["final_losses"].append(final)
            curve["peak_losses"].append(peak)
            curve["stable"].append(stable)
            yield result
    yield result  # the whole sweep (also when no rate ran)


def bn_lr_grid(
    lr_min: float,
    lr_max: float,
    points: int,
    steps: int,
    hidden_layers: int,
    width: int,
    seed: int,
    device: str,
) -> dict[str, Any]:
    """The same runs as a sweep of ``bn-lr`` (each of its runs trains the net without and with
    BN at one rate), as ``normlab sweep bn-lr --grid NAME=SPEC`` takes it: the rates as a range
    ``A:B:N:log`` (the same log spacing), each other setting as one value."""
    grid: dict[str, Any] = {"lr": f"{lr_min!r}:{lr_max!r}:{points}:log", "steps": steps}
    grid.update(hidden_layers=hidden_layers, width=width, seed=seed)
    if device != "cpu":  # cpu: every experiment's default device
        grid["device"] = device
    return grid


def sweep_cell(curve: dict[str, Any], i: int) -> str:
    """The final loss (and the peak) at the i-th rate; a loss that is not finite reads
    diverged."""
    final, peak = curve["final_losses"][i], curve["peak_losses"][i]
    text = "diverged" if fmt(final) == "-" else f"{fmt(final)} ({fmt(peak, 2)})"
    return text + ("" if curve["stable"][i] else "  unstable")


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The final loss (and the peak) at every rate, without and with BN; the largest stable rate
    of each, and the sweep command that trains the same nets, as notes."""
    lrs = result["lrs"]
    plain, bn = result["curves"]
    rows = [
        [fmt_as(lr, ".3g"), sweep_cell(plain, i), sweep_cell(bn, i)] for i, lr in enumerate(lrs)
    ]
    notes = []
    for c in result["curves"]:
        stable = [lr for lr, ok in zip(lrs, c["stable"], strict=True) if ok]
        largest = fmt_as(max(stable), ".3g") if stable else "none"
        notes.append(
            f"{'with' if c['batch_norm'] else 'without'} BN: largest stable rate {largest}"
        )
    axes = " ".join(f"--grid {k}={v}" for k, v in result["bn_lr_grid"].items())
    notes.append(f"the same grid on the sweep engine: normlab sweep bn-lr {axes}")
    return [
        {
            "title": "Final loss (peak after warm-up) by learning rate",
            "columns": ["lr", "without BN", "with BN"],
            "rows": rows,
            "notes": notes,
        }
    ]


# -- the result ---------------------------------------------------------------------------------


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
    bn_lr_grid: dict[str, Any]  # the same runs as a sweep of bn-lr: {name: --grid spec}

    def largest_stable(self, curve: SweepCurve) -> str:
        i = curve.largest_stable_lr_index
        return "none" if i is None else f"{self.lrs[i]:.3g}"

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        series: list[fig.Series] = []
        lines = [fig.Line(LOSS_CLIP, color="#000000", dash="solid", label=f"above {LOSS_CLIP:g}")]
        for c in self.curves:
            series += self._curve(c)
            i = c.largest_stable_lr_index
            if i is not None:
                color = fig.BLUE if c.batch_norm else fig.RED
                label = f"largest stable rate {_name(c)}: {self.lrs[i]:.3g}"
                lines.append(fig.Line(self.lrs[i], axis="x", label=label, color=color))
        stable_loss = self.params.get("stable_loss")
        if isinstance(stable_loss, float):
            lines.append(fig.Line(stable_loss, label=f"stable_loss {stable_loss:g}", dash="dash"))
        finals = [v for c in self.curves for v in self._shown(c.final_losses) if v is not None]
        ticks = tuple(t for t in LR_TICKS if min(self.lrs) / 1.15 <= t <= max(self.lrs) * 1.15)
        panel = fig.Panel(
            fig.Axis("learning rate (log scale)", scale="log", ticks=ticks),
            fig.Axis(
                f"final loss (mean of the last {self.params.get('tail', '')} steps, log)",
                scale="log",
                limits=(min([0.1, *finals]) / 1.6, LOSS_CLIP * 1.6),
            ),
            series,
            lines=lines,
            note=f"filled: stable, hollow: unstable; triangles: peak loss; above {LOSS_CLIP:g}: "
            "drawn on the line",
        )
        plain, bn = (self.largest_stable(c) for c in self.curves)
        title = (
            f"Final loss against the learning rate: stable up to {plain} without BN, {bn} with BN"
        )
        return [fig.Figure(title, [panel], height=5.0)]

    @staticmethod
    def _shown(values: list[float]) -> list[float | None]:
        """Not finite or above the ceiling: on the ceiling; 0: at the floor of the log axis."""
        return fig.floored(fig.clipped(values, LOSS_CLIP), SWEEP_FLOOR)

    def _curve(self, c: SweepCurve) -> list[fig.Series]:
        color = fig.BLUE if c.batch_norm else fig.RED
        finals = self._shown(c.final_losses)
        lrs = self.lrs[: len(finals)]  # the rates run so far: every one once the sweep is done

        def where(ok: bool) -> tuple[list[float], list[float | None]]:
            picked = [i for i, s in enumerate(c.stable) if s == ok]
            return [lrs[i] for i in picked], [finals[i] for i in picked]

        return [
            fig.Series(_name(c), lrs, finals, color=color, width=2.5),
            fig.Series(
                f"{_name(c)}: stable", *where(True), "markers", color, marker_size=8, legend=False
            ),
            fig.Series(
                f"{_name(c)}: unstable",
                *where(False),
                "markers",
                color,
                marker_size=8,
                hollow=True,
                legend=False,
            ),
            fig.Series(
                f"{_name(c)}: peak loss",
                lrs,
                self._shown(c.peak_losses),
                "markers",
                color,
                marker="triangle",
                marker_size=8,
                opacity=0.4,
                legend=False,
            ),
        ]


def _name(c: SweepCurve) -> str:
    return "with BN" if c.batch_norm else "without BN"


EXPERIMENT = Experiment(
    name="bn-lr-sweep",
    title="The learning-rate sweep, with and without BatchNorm",
    summary="final loss against the learning rate for the bn-lr network, with and without BN",
    params_type=Params,
    result_type=BnLrSweepResult,
    entry=bn_lr_sweep,
    tables=tables,
    code=(
        two_moons,
        block,
        MLP,
        train_step,
        train,
        summarize,
        log_spaced,
        bn_lr_sweep,
        bn_lr_grid,
        fmt,
        fmt_as,
        sweep_cell,
        tables,
    ),
    cost=Cost(12.0),
    total_steps=lambda p: 2 * p.points * p.steps,
)
