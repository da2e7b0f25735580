r"""``coord-check``: the muP coordinate check, over width and over depth.

Yang et al. 2022, *Tensor Programs V: Tuning large neural networks via zero-shot hyperparameter
transfer* (muP), and for depth Yang et al. 2023, *Tensor Programs VI: Feature learning in
infinite-depth neural networks*, and Bordelon et al. 2023, *Depthwise hyperparameter transfer in
residual networks* (depth-muP).

A residual MLP reads 200 points of 10 Gaussian blobs in the plane: an input layer
:math:`h_0 = W_0 x` (2 to :math:`n`), then :math:`L` blocks :math:`h_l = h_{l-1} + s\, W_l\,
\mathrm{relu}(h_{l-1})` (:math:`n` to :math:`n`), then an output layer :math:`y = W_{out}\,
\mathrm{relu}(h_L)` (10 logits; one logit's size at init would be a single random draw, 10 make
it a mean); no biases. It takes a few full-batch Adam or SGD steps on the cross-entropy, and the
*coordinate check* records the size of every layer's output, its root mean square over the batch
and the units,

.. math::
    \mathrm{RMS}(h) = \sqrt{\tfrac{1}{Nn} \textstyle\sum_{i,j} h_{ij}^2},

at every width :math:`n`. A parametrization passes when no layer's size moves with the width:
the *spread* (largest over smallest size across the widths) stays near 1.

- **SP** (standard parametrization): PyTorch's default init, one learning rate :math:`\eta` for
  every weight. At initialization every size is width-independent (the variance argument), but
  a step moves each of the :math:`n` weights feeding a unit by about :math:`\eta` (Adam), in
  the direction of the unit's input, and those moves add up: every layer after the input grows
  like :math:`n` after a few steps (with SGD the output like :math:`n`, the hidden layers like
  :math:`\sqrt{n}`).
- **muP** (Tensor Programs V, Table 3), written relative to a base width :math:`n_0` so that at
  :math:`n = n_0` its rates are SP's (and with ``readout="scaled"`` its init too), with
  :math:`m = n / n_0`:

  ========================  =================  ================  ================
  weights                   init               SGD rate          Adam rate
  ========================  =================  ================  ================
  input :math:`W_0`         SP's               :math:`\eta m`    :math:`\eta`
  hidden :math:`W_l`        SP's               :math:`\eta`      :math:`\eta / m`
  output :math:`W_{out}`    0, or SP's / √m    :math:`\eta / m`  :math:`\eta / m`
  ========================  =================  ================  ================

  (the output weights zero, ``readout="zero"``, the default, or of variance :math:`\propto
  1/n^2`, Table 3's :math:`1/\mathrm{fan\_in}^2`, ``readout="scaled"``).
- **depth-muP**: muP with the branches scaled by :math:`s = 1/\sqrt{L}` (and Adam's hidden rate
  by :math:`1/\sqrt{L}` too; SGD's stays). muP alone (:math:`s = 1`) fixes how sizes scale with
  width, not with depth: its stream grows with :math:`L` already at initialization, by
  :math:`(1 + s^2 g)^{L/2}` in RMS, :math:`g = 1/6` the branch gain of PyTorch's default init
  behind a ReLU (:func:`normlab.theory.residual_stream`, ``"none"``), which the depth figure
  draws over the measured stream at init.

The width sweep trains SP and muP at every width; the depth sweep trains muP and depth-muP at
every depth, at one width. Both start every net from ``torch.manual_seed(seed)`` and train on the
same fixed batch (the whole set), as mup's ``get_coord_data`` does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import fmt
from normlab.theory import RESIDUAL_CODE, residual_stream
from normlab.train import train_step

BRANCH_GAIN = 1.0 / 6.0
"""The branch gain :func:`stream_theory` takes (its docstring derives it), for the lesson."""
LOG_FLOOR = 1e-12
"""A size of exactly 0 (a zero-initialized output) is drawn at this floor of the log axis."""


@dataclass(frozen=True)
class Params:
    optimizer: str = param("adam", "optimizer of every run", choices=("adam", "sgd"))
    lr: float = param(
        0.01,
        "learning rate at the base width (Adam trains there at 0.01, SGD at about 0.1)",
        min=0.0001,
        max=1.0,
        step=0.0001,
    )
    steps: int = param(3, "optimizer steps before the sizes are measured", min=1, max=5, step=1)
    base_width: int = param(
        64,
        "muP's base width n0, where muP's rates are SP's; the smallest width",
        min=16,
        max=256,
        step=1,
    )
    max_width: int = param(
        1024,
        "the largest width of the width sweep",
        min=32,
        max=1024,
        step=1,
        follows=(">", "base_width"),
    )
    widths: int = param(
        5, "widths in the width sweep (log-spaced from the base width)", min=2, max=5, step=1
    )
    depth: int = param(3, "residual blocks in the width sweep", min=1, max=6, step=1)
    max_depth: int = param(
        32, "deepest net of the depth sweep (depths 1, 2, 4, ...)", min=2, max=32, step=1
    )
    depth_width: int = param(256, "width of every net of the depth sweep", min=16, max=512, step=1)
    readout: str = param(
        "zero",
        "muP's output layer at init: zero, or SP's draw times sqrt(n0/n) (variance ~ 1/n^2)",
        choices=("zero", "scaled"),
    )
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run coord-check --code` prints) ---------------------


def blobs(samples: int, classes: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``classes`` Gaussian blobs in the plane, ``samples`` points dealt to them in turn; the
    points standardized per feature (mean 0, std 1), as the variance argument assumes."""
    g = torch.Generator().manual_seed(seed)
    centers = 2.0 * torch.randn(classes, 2, generator=g)  # (C, 2)
    labels = torch.arange(samples) % classes  # (N,)
    x = centers[labels] + 0.5 * torch.randn(samples, 2, generator=g)  # (N, 2)
    x = (x - x.mean(0)) / x.std(0)  # (N, 2): per-feature mean 0, std 1
    return x.to(device), labels.to(device)


class ResidualMLP(nn.Module):
    """Input layer 2 -> width, ``depth`` blocks ``h + branch * W relu(h)``, output layer ->
    ``classes`` logits.

    No biases; every ``nn.Linear`` keeps PyTorch's default init. ``forward`` returns every
    layer's output, the input layer's first and the logits last.
    """

    def __init__(self, width: int, depth: int, branch: float, classes: int) -> None:
        super().__init__()
        self.input = nn.Linear(2, width, bias=False)
        self.hidden = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(depth))
        self.output = nn.Linear(width, classes, bias=False)
        self.branch = branch

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs = [self.input(x)]  # (N, 2) -> (N, n)
        for layer in self.hidden:
            h = outs[-1]
            outs.append(h + self.branch * layer(torch.relu(h)))  # (N, n) -> (N, n)
        outs.append(self.output(torch.relu(outs[-1])))  # (N, n) -> (N, C)
        return outs


def build_net(
    parametrization: str,
    width: int,
    depth: int,
    classes: int,
    base_width: int,
    readout: str,
    seed: int,
) -> ResidualMLP:
    """The net of one run; muP and depth-muP shrink (or zero) the output layer's init."""
    torch.manual_seed(seed)
    branch = depth**-0.5 if parametrization == "depth-muP" else 1.0
    net = ResidualMLP(width, depth, branch, classes)
    if parametrization != "SP":
        with torch.no_grad():
            if readout == "zero":
                net.output.weight.zero_()
            else:  # Var(w) = 1/(3 n) * n0/n: Table 3's 1/fan_in^2, equal to SP's at n0
                net.output.weight.mul_((base_width / width) ** 0.5)
    return net


def param_groups(
    net: ResidualMLP, parametrization: str, optimizer: str, lr: float, base_width: int
) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: one rate for all (SP), or one per layer kind (muP)."""
    if parametrization == "SP":
        return [{"params": list(net.parameters()), "lr": lr}]
    m = net.input.out_features / base_width  # the width multiplier n / n0
    depth = len(net.hidden)
    if optimizer == "adam":  # Adam's step is about lr per weight, whatever the gradient's size
        hidden = lr / m * (depth**-0.5 if parametrization == "depth-muP" else 1.0)
        rates = (lr, hidden, lr / m)
    else:  # SGD's step is lr times the gradient, which muP's scales already shrink
        rates = (lr * m, lr, lr / m)
    layers = (net.input, net.hidden, net.output)
    return [
        {"params": list(layer.parameters()), "lr": r}
        for layer, r in zip(layers, rates, strict=True)
    ]


def rms_sizes(outs: list[torch.Tensor]) -> list[float]:
    """The root mean square of every layer's output (over the batch and the units)."""
    return [o.detach().pow(2).mean().sqrt().item() for o in outs]


def cross_entropy_of_logits(outs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the net's logits (the last of its outputs) against the class labels."""
    return F.cross_entropy(outs[-1], y)  # (N, C) logits vs (N,) labels


def train_and_measure(
    net: ResidualMLP,
    groups: list[dict[str, Any]],
    optimizer: str,
    steps: int,
    x: torch.Tensor,
    y: torch.Tensor,
) -> dict[str, Any]:
    """Every layer's size at init and after ``steps`` full-batch steps on ``(x, y)``, and the
    loss before each step and after the last."""
    with torch.no_grad():
        init = rms_sizes(net(x))
    opt = torch.optim.Adam(groups) if optimizer == "adam" else torch.optim.SGD(groups)
    losses = [train_step(net, opt, x, y, cross_entropy_of_logits) for _ in range(steps)]
    with torch.no_grad():
        outs = net(x)  # after the last update
        losses.append(cross_entropy_of_logits(outs, y).item())
    return {"init": init, "final": rms_sizes(outs), "losses": losses}


def spread(sizes: list[float]) -> float:
    """Largest over smallest: 1 when a layer's size does not move across the runs (inf if a run
    diverged; nan if a size is 0, as a zero-initialized output layer's at init)."""
    if not all(math.isfinite(s) for s in sizes):
        return math.inf
    if min(sizes) == 0.0:
        return math.nan
    return max(sizes) / min(sizes)


def sweep_widths(base_width: int, max_width: int, count: int) -> list[int]:
    """``count`` widths log-spaced from ``base_width`` to ``max_width`` (64 ... 1024: doublings)."""
    ratio = max_width / base_width
    return sorted({round(base_width * ratio ** (i / (count - 1))) for i in range(count)})


def sweep_depths(max_depth: int) -> list[int]:
    """1, 2, 4, ... up to ``max_depth`` (and ``max_depth`` itself)."""
    depths = [1]
    while depths[-1] * 2 <= max_depth:
        depths.append(depths[-1] * 2)
    return depths if depths[-1] == max_depth else [*depths, max_depth]


def stream_theory(parametrization: str, depth: int, input_rms: float) -> float:
    """The last hidden layer's RMS at init that the residual-stream recursion predicts from the
    measured input layer: RMS(h_0) * sqrt((1 + s^2 g)^L). A branch's gain g is 1/6 at PyTorch's
    default init behind a ReLU: n * 1/(3 n) * 1/2 (kaiming_uniform_(a=sqrt(5)) draws
    Var(w) = 1/(3 fan_in); a ReLU keeps half of a symmetric input's second moment)."""
    scale = depth**-0.5 if parametrization == "depth-muP" else 1.0
    moments = residual_stream("none", depth, branch_scale=scale, branch_gain=1.0 / 6.0)
    return input_rms * moments[-1] ** 0.5


def sweep(
    parametrization: str,
    nets: list[tuple[int, int]],
    keep: list[int],
    names: list[str],
    setup: dict[str, Any],
    x: torch.Tensor,
    y: torch.Tensor,
) -> Iterator[dict[str, Any]]:
    """Train one parametrization at every ``(width, depth)`` of ``nets`` as ``setup`` says;
    keep the layers ``keep`` indexes (the same roles at every depth) and their spreads.

    Yields the sweep so far after every net, and last the whole sweep.
    """
    runs: list[dict[str, Any]] = []
    for width, depth in nets:
        net = build_net(
            parametrization,
            width,
            depth,
            setup["classes"],
            setup["base_width"],
            setup["readout"],
            setup["seed"],
        ).to(setup["device"])
        groups = param_groups(
            net, parametrization, setup["optimizer"], setup["lr"], setup["base_width"]
        )
        run = train_and_measure(net, groups, setup["optimizer"], setup["steps"], x, y)
        init, final = [run["init"][i] for i in keep], [run["final"][i] for i in keep]
        theory = stream_theory(parametrization, depth, init[0])
        runs.append(
            {"width": width, "depth": depth, "init": init, "final": final, "theory": theory}
            | {"losses": run["losses"]}
        )
        yield {
            "parametrization": parametrization,
            "layers": names,
            "runs": runs[:],  # the nets so far (a copy: the list grows)
            "spreads": [spread([r["final"][k] for r in runs]) for k in range(len(keep))],
            "init_spreads": [spread([r["init"][k] for r in runs]) for k in range(len(keep))],
        }


def coord_check(
    optimizer: str,
    lr: float,
    steps: int,
    base_width: int,
    max_width: int,
    widths: int,
    depth: int,
    max_depth: int,
    depth_width: int,
    readout: str,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """The width sweep (SP against muP) and the depth sweep (muP against depth-muP).

    Yields the sweeps so far after every net, and last the whole check.
    """
    classes = 10
    x, y = blobs(200, classes, seed, device)  # (200, 2) points, (200,) labels
    setup = {"optimizer": optimizer, "lr": lr, "steps": steps, "base_width": base_width}
    setup |= {"classes": classes, "readout": readout, "seed": seed, "device": device}
    by_width = [(n, depth) for n in sweep_widths(base_width, max_width, widths)]
    every_layer = list(range(depth + 2))  # input, hidden 1 .. depth, output
    names = ["input", *(f"hidden {k}" for k in range(1, depth + 1)), "output"]
    by_depth = [(depth_width, d) for d in sweep_depths(max_depth)]
    roles = ["input", "last hidden", "output"]  # the same three at every depth
    plan = [("width_sweep", q, by_width, every_layer, names) for q in ("SP", "muP")]
    plan += [("depth_sweep", q, by_depth, [0, -2, -1], roles) for q in ("muP", "depth-muP")]
    result: dict[str, Any] = {"optimizer": optimizer, "lr": lr, "steps": steps}
    result |= {"width_sweep": [], "depth_sweep": []}
    for key, parametrization, nets, keep, layers in plan:
        before = result[key]  # the sweeps this axis has run already
        for s in sweep(parametrization, nets, keep, layers, setup, x, y):
            result = {**result, key: [*before, s]}
            yield result  # every sweep so far


def training_text(optimizer: str, lr: float, steps: int) -> str:
    """What every net went through before its sizes were measured, in words."""
    name = {"adam": "Adam", "sgd": "SGD"}[optimizer]  # as the papers write them
    return f"{steps} {name} steps (lr {lr:g})"


def size_text(value: float | None) -> str:
    """A size with 3 significant digits; a diverged run (inf or nan; None in JSON) says so."""
    return "diverged" if value is None or not math.isfinite(value) else f"{value:.3g}"


def spread_text(value: float | None, sizes: list[str] | None = None) -> str:
    """A spread as :func:`size_text` writes it; 'n/a' where a size is 0 (nan). JSON holds None
    for both inf and nan: the layer's size cells ``sizes`` tell which."""
    if value is None:
        return "diverged" if "diverged" in (sizes or []) else "n/a"
    return "n/a" if math.isnan(value) else size_text(value)


def sweep_table(s: dict[str, Any], axis: str, training: str) -> dict[str, Any]:
    """One sweep's table: every layer's RMS after the steps in every run, and its spread."""
    runs = s["runs"]
    rows = []
    for k, name in enumerate(s["layers"]):
        final = [size_text(r["final"][k]) for r in runs]
        init = [size_text(r["init"][k]) for r in runs]
        spreads = [spread_text(s["spreads"][k], final), spread_text(s["init_spreads"][k], init)]
        rows.append([name, *final, *spreads])
    if axis == "depth":  # the stream at init, measured against the residual-stream recursion
        rows.append(["last hidden at init", *(size_text(r["init"][-2]) for r in runs), "", ""])
        rows.append(
            ["last hidden at init, theory", *(size_text(r["theory"]) for r in runs), "", ""]
        )
    losses = [f"{fmt(r['losses'][0], 3)} → {fmt(r['losses'][-1], 3)}" for r in runs]
    rows.append(["loss", *losses, "", ""])
    fixed = f"depth {runs[0]['depth']}" if axis == "width" else f"width {runs[0]['width']}"
    return {
        "title": f"{s['parametrization']}, {fixed}: RMS after {training} by {axis}",
        "columns": [f"layer \\ {axis}", *(str(r[axis]) for r in runs), "spread", "spread at init"],
        "rows": rows,
        "notes": [f"spread: the largest size over the smallest across the {axis}s (1: flat)"],
    }


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A table per sweep: SP and muP by width, then muP and depth-muP by depth."""
    training = training_text(result["optimizer"], result["lr"], result["steps"])
    return [
        sweep_table(s, axis, training)
        for key, axis in (("width_sweep", "width"), ("depth_sweep", "depth"))
        for s in result[key]
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class CoordRun:
    width: int
    depth: int
    init: list[float]  # (layers,): RMS of each kept layer's output at initialization
    final: list[float]  # (layers,): the same after the steps
    theory: float  # the last hidden layer's RMS at init that the stream's recursion predicts
    losses: list[float]  # (steps + 1,): before each step, then after the last


@dataclass
class Sweep:
    parametrization: str  # "SP", "muP" or "depth-muP"
    layers: list[str]  # (layers,)
    runs: list[CoordRun]  # one per width (width sweep) or depth (depth sweep)
    spreads: list[float]  # (layers,): max / min of the final sizes across the runs
    init_spreads: list[float]  # (layers,): the same at initialization

    def sizes(self, k: int, when: str = "final") -> list[float]:
        """Layer ``k``'s size in every run, after the steps (or ``when="init"``)."""
        return [getattr(r, when)[k] for r in self.runs]


@dataclass
class CoordCheckResult(Result):
    optimizer: str
    lr: float
    steps: int
    width_sweep: list[Sweep]  # SP, muP (a streamed frame's partial run: those run so far)
    depth_sweep: list[Sweep]  # muP, depth-muP

    @property
    def training(self) -> str:
        """What every net went through before its sizes were measured, in words."""
        return training_text(self.optimizer, self.lr, self.steps)

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        """The width figure and the depth figure; a partial run (a streamed frame) draws the
        sweeps it has begun, each with the nets trained so far."""
        sweeps = (self.width_sweep, self._width_figure), (self.depth_sweep, self._depth_figure)
        return [figure() for begun, figure in sweeps if begun]

    def _width_figure(self) -> fig.Figure:
        widths = [float(r.width) for r in self.width_sweep[0].runs]
        panels = []
        for i, s in enumerate(self.width_sweep):
            series = [
                fig.Series(
                    name, widths, fig.floored(s.sizes(k), LOG_FLOOR), "line+markers", legend=i == 0
                )
                for k, name in enumerate(s.layers)
            ]
            panels.append(
                fig.Panel(
                    fig.Axis("width n (log scale)", scale="log", ticks=tuple(widths)),
                    fig.Axis(
                        "RMS of the layer's output (log scale)",
                        scale="log",
                        limits=_limits(self.width_sweep),
                    ),
                    series,
                    title=f"{s.parametrization}: output spread {spread_text(s.spreads[-1])}",
                )
            )
        if not _finished(self.width_sweep):
            return fig.Figure(_running("width", self.training, self.width_sweep), panels)
        sp, mup = self.width_sweep
        title = (
            f"Coordinate check over width, after {self.training}: SP's output spreads "
            f"{spread_text(sp.spreads[-1])}x, muP's hidden layers at most "
            f"{spread_text(max(mup.spreads[1:-1]))}x"
        )
        return fig.Figure(title, panels)

    def _depth_figure(self) -> fig.Figure:
        depths = [float(r.depth) for r in self.depth_sweep[0].runs]
        last = len(self.depth_sweep[0].layers) - 2  # the last hidden layer: its stream's theory
        panels = []
        for i, s in enumerate(self.depth_sweep):
            series = [
                fig.Series(
                    name, depths, fig.floored(s.sizes(k), LOG_FLOOR), "line+markers", legend=i == 0
                )
                for k, name in enumerate(s.layers)
            ]
            color = fig.PALETTE[last]
            series += [
                fig.Series(
                    f"{s.layers[last]} at init",
                    depths,
                    s.sizes(last, "init"),
                    "markers",
                    color,
                    hollow=True,
                    marker_size=8,
                    legend=i == 0,
                ),
                fig.Series(
                    f"{s.layers[last]} at init, theory",
                    depths,
                    _stream_theory(s),
                    color=color,
                    dash="dash",
                    legend=i == 0,
                ),
            ]
            scale = "s = 1" if s.parametrization == "muP" else "s = 1/√L"
            panels.append(
                fig.Panel(
                    fig.Axis(
                        "depth L, residual blocks (log scale)", scale="log", ticks=tuple(depths)
                    ),
                    fig.Axis(
                        "RMS of the layer's output (log scale)",
                        scale="log",
                        limits=_limits(self.depth_sweep, theory=True),
                    ),
                    series,
                    title=f"{s.parametrization} ({scale}): last hidden spread "
                    f"{spread_text(s.spreads[last])}",
                    note="hollow: at init; dashed: its theory",
                )
            )
        if not _finished(self.depth_sweep):
            return fig.Figure(_running("depth", self.training, self.depth_sweep), panels)
        mup, depth_mup = self.depth_sweep
        width = mup.runs[0].width
        title = (
            f"Coordinate check over depth at width {width}: the last hidden layer spreads "
            f"{spread_text(mup.spreads[last])}x with muP, {spread_text(depth_mup.spreads[last])}x "
            "with depth-muP"
        )
        return fig.Figure(title, panels)


def _finished(sweeps: list[Sweep]) -> bool:
    """Whether both sweeps of an axis have run every net (the second as many as the first)."""
    return len(sweeps) == 2 and len(sweeps[1].runs) == len(sweeps[0].runs)


def _running(axis: str, training: str, sweeps: list[Sweep]) -> str:
    """A partial figure's title: the sweep under way, and the net it trained last."""
    s = sweeps[-1]
    return (
        f"Coordinate check over {axis}, after {training}: {s.parametrization} trained "
        f"at {axis} {getattr(s.runs[-1], axis)} so far"
    )


def _stream_theory(s: Sweep) -> list[float]:
    """The predicted last hidden RMS at init of every run (:func:`stream_theory`)."""
    return [r.theory for r in s.runs]


def _limits(sweeps: list[Sweep], theory: bool = False) -> tuple[float, float] | None:
    """One log-axis range for every panel of a figure, so that their lines compare."""
    values = [v for s in sweeps for r in s.runs for v in r.final]
    if theory:
        values += [v for s in sweeps for r in s.runs for v in r.init]
        values += [v for s in sweeps for v in _stream_theory(s)]
    shown = [v for v in values if math.isfinite(v) and v > 0]
    return (min(shown) / 1.5, max(shown) * 1.5) if shown else None


EXPERIMENT = Experiment(
    name="coord-check",
    title="Width and depth: the coordinate check",
    summary="per-layer activation size after a few steps as width and depth grow: SP, muP, "
    "depth-muP",
    params_type=Params,
    result_type=CoordCheckResult,
    entry=coord_check,
    tables=tables,
    code=(
        *RESIDUAL_CODE,
        blobs,
        ResidualMLP,
        build_net,
        param_groups,
        rms_sizes,
        train_step,
        cross_entropy_of_logits,
        train_and_measure,
        spread,
        sweep_widths,
        sweep_depths,
        stream_theory,
        sweep,
        coord_check,
        fmt,
        training_text,
        size_text,
        spread_text,
        sweep_table,
        tables,
    ),
    cost=Cost(12.0),  # 7.1 s and 0.3 GiB measured at maxima() with Adam, one thread
    heaviest={"optimizer": "adam"},  # Adam keeps two moments per weight: SGD costs less
    total_steps=lambda p: (
        2
        * p.steps
        * (len(sweep_widths(p.base_width, p.max_width, p.widths)) + len(sweep_depths(p.max_depth)))
    ),
)
