r"""The coordinate check of a user's model over width: which layers' sizes grow with the width.

Yang et al. 2022, *Tensor Programs V: Tuning large neural networks via zero-shot hyperparameter
transfer* (muP), Figure 5 and the ``mup`` package's ``get_coord_data``. A factory builds the
model at each hidden width :math:`n` (``factory(n)``), with the same seed; its input and output
shapes must not depend on :math:`n` (token ids in, logits over a fixed vocabulary out; or a
fixed number of features in and out): only the hidden width moves. Every width is trained for
a few Adam steps (:func:`normlab.train.train_step`, the experiments' step), at one learning
rate, on the same batches, against the same fixed Gaussian readout :math:`R` of the output,
:math:`\mathcal{L} = \sum R \odot y` (Adam moves each weight by about the learning rate
whatever the gradient's scale, so a generic loss is enough; the readout only has to keep the
gradient at the output :math:`\Theta(1)`). Every probed layer
(:func:`normlab.probe.select_modules`'s default: leaves and modules with parameters) is read
on the first batch, before training and after it (the global RNG reseeded, so dropout draws the
same masks), and its *coordinate size*, the typical size of one entry, is the root mean square
over the batch and the units (the last dimension),

.. math::
    s = \sqrt{\tfrac{1}{U} \textstyle\sum_{j=1}^{U} r_j}, \qquad
    r_j = \tfrac{1}{B} \textstyle\sum_{b} y_{bj}^2,

at init (:math:`y_0`), after training (:math:`y_K`) and of the change :math:`y_K - y_0`.

**muP's expectation.** In muP every coordinate size is :math:`\Theta(1)` in the width: the
exponent of :math:`s \propto n^{b}` is :math:`b = 0` at init and for the change (the output may
also shrink at init: muP's readout starts at 0 or :math:`\propto 1/n`). In the standard
parametrization (SP) with Adam, a step moves each of the :math:`n` weights feeding a unit by
about the learning rate, aligned with that unit's input, and the :math:`n` moves add up: the
hidden layers' and the output's changes grow like :math:`n^1` (like :math:`n^{1/2}` with SGD);
with a fixed init std (0.02) the hidden sizes grow like :math:`n^{1/2}` already at init.

**The spread statistic.** Per layer and per measurement, the least-squares slope :math:`b` of
:math:`\ln s` against :math:`u = \ln n` over the widths, and the ratio :math:`s(n_{max}) /
s(n_{min})`.

**The bound, derived from the noise.** Given its input, a layer's :math:`U` units are
independent draws (the rows of a weight matrix are drawn independently, and Adam updates each
row from its own gradient), so the mean square :math:`s^2` is an average of :math:`U` draws
:math:`r_j`, with relative standard error :math:`\mathrm{sd}(r) / (\bar r \sqrt{U})`, the
finite-width fluctuation :math:`\propto 1/\sqrt{n}` for a layer :math:`n` wide; that of
:math:`\ln s` is half of it, :math:`\sigma_{own} = \mathrm{sd}(r) / (2 \bar r \sqrt{U})`. The
spread :math:`\mathrm{sd}(r)/\bar r` is measured on :data:`MIN_UNITS` units or more; fewer
draws would misjudge it (by :math:`1/\sqrt{2(U-1)}`, over 13%), and it is bounded instead: for
a linear map with independent Gaussian rows :math:`w_j` and input second moments :math:`C` over
the batch, :math:`r_j = w_j^\top C w_j` has :math:`\mathrm{Var}(r_j) / \mathrm{E}(r_j)^2 =
2\,\mathrm{tr}(C^2)/\mathrm{tr}(C)^2 \le 2` (uniform rows give less), so :math:`\sqrt{2}`
(:data:`UNIT_SPREAD`).

The units see only the layer's own draw; the layers upstream are drawn too, and their
fluctuation reaches the layer through its input: with one model per width, the seed-to-seed
spread of a GPT's changes is up to 3 times :math:`\sigma_{own}`. So every width is drawn
:math:`R` times (``seeds``, :data:`COORD_SEEDS`), the slope is fitted to the mean of
:math:`\ln s` over the draws, and the seeds' variance of :math:`\ln s` over the units' one,
averaged over the :math:`k` widths (:math:`k(R - 1)` degrees of freedom), scales it:
:math:`\phi^2 = \max\big(1, \tfrac{1}{k} \sum_i \mathrm{var}_r(\ln s_{ir}) /
\overline{\sigma^2_{own,i}}\big)`, and at width :math:`n_i`

.. math::
    \sigma_i^2 = \max\big(\phi^2\, \overline{\sigma^2_{own,i}},
        \mathrm{var}_r(\ln s_{ir})\big) / R, \qquad
    \mathrm{se}(b)^2 = \sum_i w_i^2 \sigma_i^2, \quad
    w_i = \frac{u_i - \bar u}{\sum_k (u_k - \bar u)^2}

(:math:`b = \sum_i w_i \overline{\ln s_i}`): over 25 checks of the tests' GPT and of a 4-layer
ReLU MLP, the slopes' spread is 0.5 to 1.2 times this :math:`\mathrm{se}(b)`, layer by layer.

That is the noise of the draws. A :math:`\Theta(1)` quantity at finite width also carries a
systematic correction, :math:`s_n = s_\infty (1 + c/\sqrt{n} + \dots)`, the leading term a sum
of :math:`n` random terms leaves (Adam's first step, the sign of a sum over the batch, lines up
with a unit's input only to :math:`O(1/\sqrt{n})`). It tilts the fitted line by
:math:`c\,(n_{min}^{-1/2} - n_{max}^{-1/2}) / \ln(n_{max}/n_{min})` (0.045 for widths 64 to 256
at :math:`c = 1`), the same at every seed, which the standard error cannot see: the muP GPT of
the tests shows it in its position embedding's change, slope +0.015 at a standard error of
0.003, where :math:`c = 1`, a correction of one standard deviation of a mean of :math:`n`
unit-variance terms, covers it. A layer *grows* with the width when

.. math::
    b > z\, \mathrm{se}(b) + c\, \frac{n_{min}^{-1/2} - n_{max}^{-1/2}}{\ln(n_{max}/n_{min})},

with :math:`z = 4` (:data:`NOISE_Z`: a Gaussian passes it once in 30000 tries, so a check of a
hundred layer-measurements flags a healthy one by chance well under 1% of the time) and
:math:`c =` :data:`DRIFT`; it *shrinks* when :math:`b` is below minus that bound (reported, not
flagged: muP's own readout shrinks at init). Only growth is flagged, at init or in the change;
a size of exactly 0 (a zero-initialized readout at init) has no slope.

Over the tests' 5 seeds, their muP GPT (widths 64, 128, 256) keeps every slope at least 0.04
under its bound (the closest: the position embedding's change), and the 19 layers its SP twin
flags exceed their bounds by 0.35 or more (the logits' change: by about 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from normlab import figures as fig
from normlab.probe import finite_or_none, first_float_tensor, select_modules
from normlab.train import train_step

MIN_WIDTH, MAX_WIDTH, MAX_WIDTHS = 8, 4096, 6
"""The widths a check takes: 2 to :data:`MAX_WIDTHS` of them in [MIN_WIDTH, MAX_WIDTH]. Below 8
units a layer's size fluctuates as much as it measures; at 4096 a square float32 weight holds
64 MiB and Adam keeps four copies of it (weight, gradient, two moments): a 12-block transformer
then needs about 36 GiB."""
MIN_RATIO = 2
"""The largest width must be at least twice the smallest: a slope needs a span."""
WIDTHS_ALLOWED = (
    f"2 to {MAX_WIDTHS} distinct integers in [{MIN_WIDTH}, {MAX_WIDTH}], "
    f"the largest at least {MIN_RATIO} times the smallest"
)
COORD_STEPS, COORD_LR, COORD_SEEDS = 3, 1e-3, 2
"""Adam steps before the second reading, their learning rate (every parameter), and the models
drawn (seeds) at every width."""
NOISE_Z = 4.0
"""How many standard errors of the slope a layer must exceed to be flagged."""
DRIFT = 1.0
"""The finite-width correction :math:`c/\\sqrt{n}` the bound allows, :math:`c`."""
MIN_UNITS, UNIT_SPREAD = 32, math.sqrt(2.0)
"""Below 32 units the spread of the units' mean squares is not estimated (from so few draws its
estimate is off by :math:`1/\\sqrt{2(U-1)}`, over 13%) but bounded: :math:`\\sqrt{2}`."""
ZERO_SIZE_FLOOR = 1e-12
"""A relative size of 0 is drawn at this floor of the log axis."""

Factory = Callable[[int], nn.Module]
MakeOptimizer = Callable[[nn.Module, float], torch.optim.Optimizer]


def check_widths(widths: object) -> list[int]:
    """The widths, sorted, or ``ValueError``/``TypeError`` naming what is allowed.

    >>> check_widths([256, 64, 128])
    [64, 128, 256]
    """
    if not isinstance(widths, Sequence) or isinstance(widths, str):
        raise TypeError(f"widths must be a list of integers, got {type(widths).__name__}")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in widths):
        raise TypeError(f"widths {list(widths)!r}: use {WIDTHS_ALLOWED}")
    values = sorted(widths)
    fits = 2 <= len(values) <= MAX_WIDTHS and len(set(values)) == len(values)
    fits = fits and values[0] >= MIN_WIDTH and values[-1] <= MAX_WIDTH
    if not fits or values[-1] < MIN_RATIO * values[0]:
        raise ValueError(f"widths {list(widths)}: use {WIDTHS_ALLOWED}")
    return values


@dataclass(frozen=True)
class SlopeFit:
    """The spread of one measurement of one layer over the widths (see :mod:`.widths`).

    ``slope``: the exponent :math:`b`; ``se``: its standard error; ``bound``: the slope the
    noise allows; ``ratio``: size at the largest width over size at the smallest; ``direction``:
    ``"grows"``, ``"shrinks"``, ``"flat"``, or ``"zero"`` / ``"non-finite"`` where a size is 0
    or not finite (no slope); ``inflation``: :math:`\\phi`, the seeds' spread over the units'.
    """

    slope: float
    se: float
    bound: float
    ratio: float
    direction: str
    inflation: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return finite_or_none(vars(self).copy())  # type: ignore[no-any-return]


@dataclass
class LayerCheck:
    """One layer's coordinate sizes at every width (``init``, ``after``, ``change``: geometric
    means over the seeds), the standard errors of their mean logs (:math:`\\sigma_i`), and the
    fits; ``expected`` is muP's exponent, 0."""

    name: str
    kind: str
    init: list[float]
    after: list[float]
    change: list[float]
    init_se: list[float]
    change_se: list[float]
    init_fit: SlopeFit
    change_fit: SlopeFit
    expected: float = 0.0

    @property
    def flagged(self) -> bool:
        """Its size grows with the width, at init or in the change training made."""
        return "grows" in (self.init_fit.direction, self.change_fit.direction)

    def to_dict(self) -> dict[str, Any]:
        plain = {k: v for k, v in vars(self).items() if not isinstance(v, SlopeFit)}
        fits = {"init_fit": self.init_fit.to_dict(), "change_fit": self.change_fit.to_dict()}
        return {**finite_or_none(plain), **fits, "flagged": self.flagged}


@dataclass
class CoordCheck:
    """What :func:`coord_check` measured: the widths, the training, every layer's check, the
    readout loss of every width (its first seed) before each step and after the last, and the
    seeds drawn per width."""

    widths: list[int]
    steps: int
    lr: float
    layers: list[LayerCheck]
    losses: list[list[float]] = field(default_factory=list)
    seeds: int = 1

    @property
    def flagged(self) -> list[str]:
        """The names of the layers whose size grows with the width."""
        return [layer.name for layer in self.layers if layer.flagged]

    def verdict(self) -> str:
        """One sentence: which layers grow, against muP's expectation."""
        span = f"widths {self.widths[0]} to {self.widths[-1]}"
        if not self.flagged:
            return f"every layer's coordinate size stays Theta(1) over {span}, as muP expects"
        names = ", ".join(self.flagged[:6]) + (", ..." if len(self.flagged) > 6 else "")
        return (
            f"{len(self.flagged)} of {len(self.layers)} layers grow with the width over {span} "
            f"(muP expects Theta(1)): {names}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "widths": list(self.widths),
            "steps": self.steps,
            "lr": self.lr,
            "seeds": self.seeds,
            "bound": {"z": NOISE_Z, "drift": DRIFT},
            "layers": [layer.to_dict() for layer in self.layers],
            "losses": finite_or_none(self.losses),
            "flagged": self.flagged,
            "verdict": self.verdict(),
        }

    def tables(self) -> list[dict[str, Any]]:
        """Two tables of formatted cells (title, columns, rows, notes): the sizes at init, and
        the change after training, per layer and width, with the slope and the verdict."""
        return [self._table("init"), self._table("change")]

    def _table(self, which: str) -> dict[str, Any]:
        what = "at init" if which == "init" else f"change after {self.steps} Adam steps"
        columns = ["layer", *(f"n={n}" for n in self.widths), "slope", "bound", "ratio", "verdict"]
        rows = []
        for layer in self.layers:
            sizes, fit = getattr(layer, which), getattr(layer, f"{which}_fit")
            cells = [_num(s) for s in sizes] + [_num(fit.slope, "+.3f"), _num(fit.bound, ".3f")]
            rows.append((layer.name or "(model)", *cells, _num(fit.ratio), fit.direction))
        grows = sum(getattr(layer, f"{which}_fit").direction == "grows" for layer in self.layers)
        notes = (
            f"{grows} of {len(self.layers)} layers grow {what}; sizes: RMS over batch and units, "
            f"geometric mean of {self.seeds} seed(s)",
            "slope: fitted exponent b of size ~ width^b, muP expects 0 (Theta(1)); bound: "
            f"{NOISE_Z:g} standard errors of the slope plus a c/sqrt(n) drift",
            *([self.verdict()] if which == "change" else []),
        )
        title = f"coordinate size {what}"
        return {"title": title, "columns": tuple(columns), "rows": rows, "notes": notes}


def _num(value: float, spec: str = ".3g") -> str:
    return format(value, spec) if math.isfinite(value) else "-"


# -- measuring -----------------------------------------------------------------------------------


class _Outputs:
    """Forward hooks that keep a detached float32 copy of every call's output, per layer (the
    tensor :func:`normlab.probe.first_float_tensor` finds), removed on exit."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = select_modules(model)
        self.calls: dict[str, list[Tensor]] = {}  # by first call
        self._handles: list[Any] = []

    def __enter__(self) -> _Outputs:
        for name, module in self.layers:
            self._handles.append(module.register_forward_hook(self._hook(name)))
        return self

    def __exit__(self, *exc_info: object) -> None:
        while self._handles:
            self._handles.pop().remove()

    def _hook(self, name: str) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            y = first_float_tensor(output)
            if y is not None:
                self.calls.setdefault(name, []).append(y.detach().to(torch.float32, copy=True))

        return hook


def _unit_squares(calls: Sequence[Tensor]) -> Tensor:
    """Each unit's mean square :math:`r_j` over the batch, (U,) from a layer's calls (the unit:
    the last dimension; calls of other unit counts add their own units)."""
    rows = [y.double().reshape(-1, y.shape[-1] if y.dim() else 1) for y in calls]  # (B_c, U)
    if len({r.shape[1] for r in rows}) == 1:
        return torch.cat(rows).square().mean(0)  # (B, U) -> (U,)
    return torch.cat([r.square().mean(0) for r in rows])  # (sum U_c,)


def _size(r: Tensor) -> tuple[float, float]:
    """The coordinate size :math:`\\sqrt{\\bar r}` and the standard error of its log,
    :math:`\\mathrm{sd}(r) / (2 \\bar r \\sqrt{U})`, with :data:`UNIT_SPREAD` for
    :math:`\\mathrm{sd}(r) / \\bar r` below :data:`MIN_UNITS` units."""
    mean = r.mean().item()
    measured = r.numel() >= MIN_UNITS and mean > 0
    spread = r.std().item() / mean if measured else UNIT_SPREAD
    return math.sqrt(mean), spread / (2.0 * math.sqrt(r.numel()))


def _call(model: nn.Module, x: Any, output: str | None) -> Tensor:
    """The model on one input (a tensor, a tuple of positional inputs or a dict of keyword
    inputs), and the tensor read from its output (the field ``output`` of a dict or
    ``ModelOutput``, else the first floating-point tensor found)."""
    out = model(*x) if isinstance(x, tuple) else model(**x) if isinstance(x, dict) else model(x)
    if output is not None:
        out = out[output] if isinstance(out, Mapping) else getattr(out, output, None)
    y = first_float_tensor(out)
    if y is None:
        raise TypeError(f"the model's output {output or ''} holds no floating-point tensor")
    return y


def _read(
    model: nn.Module, x: Any, output: str | None, seed: int
) -> tuple[dict[str, list[Tensor]], Tensor]:
    """Every layer's outputs on ``x`` (no gradient; the RNG reseeded: the same dropout masks
    at every reading), and the model's output."""
    torch.manual_seed(seed)
    with torch.no_grad(), _Outputs(model) as outs:
        y = _call(model, x, output)
    return outs.calls, y


class _Reading(nn.Module):
    """The user's model as :func:`normlab.train.train_step` calls it: one input (a tensor, a
    tuple or a dict) in, the tensor :func:`_call` reads from its output out."""

    def __init__(self, model: nn.Module, output: str | None) -> None:
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, x: Any) -> Tensor:
        return _call(self.model, x, self.output)


def _readout_loss(y: Tensor, readout: Tensor) -> Tensor:
    """The generic loss :math:`\\mathcal{L} = \\sum R \\odot y` of the output ``y`` and the
    fixed Gaussian readout ``R``."""
    return (y * readout).sum()


def _train_width(
    model: nn.Module,
    batches: Sequence[Any],
    opt: torch.optim.Optimizer,
    steps: int,
    setup: dict[str, Any],
) -> dict[str, Any]:
    """One width: the layers' outputs on the first batch at init and after ``steps`` Adam steps
    against the fixed readout, and the loss before each step and after the last."""
    seed, output = setup["seed"], setup["output"]
    before, y = _read(model, batches[0], output, seed)
    g = torch.Generator().manual_seed(seed)
    readout = torch.randn(y.shape, generator=g).to(y.device, y.dtype)  # fixed: same at every n
    net = _Reading(model, output)  # train_step calls net(x) on a tensor, tuple or dict
    losses = [
        train_step(net, opt, batches[t % len(batches)], readout, _readout_loss)
        for t in range(steps)
    ]
    after, y = _read(model, batches[0], output, seed)
    losses.append(_readout_loss(y, readout).item())
    return {"before": before, "after": after, "shape": tuple(y.shape), "losses": losses}


def _fit(
    widths: Sequence[int], sizes: Sequence[Sequence[float]], ses: Sequence[Sequence[float]]
) -> tuple[SlopeFit, list[float], list[float]]:
    """The slope of the mean ln size (over the seeds) against ln width, its standard error and
    bound (see the module); and per width the geometric mean size and the standard error used.
    ``sizes[i][r]``, ``ses[i][r]``: width ``i``, seed ``r``."""
    flat = [x for row in sizes for x in row]
    if not all(math.isfinite(x) for x in flat) or min(flat) <= 0.0:
        means = [sum(row) / len(row) for row in sizes]
        ratio = means[-1] / means[0] if means[0] > 0 else math.nan
        word = "non-finite" if not all(math.isfinite(x) for x in flat) else "zero"
        return SlopeFit(math.nan, math.nan, math.nan, ratio, word), means, [math.nan] * len(means)
    logs = [[math.log(x) for x in row] for row in sizes]  # (k, R)
    level = [sum(row) / len(row) for row in logs]  # (k,): mean ln size per width
    own = [sum(e * e for e in row) / len(row) for row in ses]  # (k,): one seed's variance
    inflation = _inflation(logs, own)
    sigma = [
        math.sqrt(max(inflation * v, _var(row)) / len(row))
        for v, row in zip(own, logs, strict=True)
    ]
    u = [math.log(n) for n in widths]
    mean = sum(u) / len(u)
    sxx = sum((v - mean) ** 2 for v in u)
    w = [(v - mean) / sxx for v in u]
    slope = sum(wi * li for wi, li in zip(w, level, strict=True))
    se = math.sqrt(sum((wi * si) ** 2 for wi, si in zip(w, sigma, strict=True)))
    lo, hi = widths[0], widths[-1]
    bound = NOISE_Z * se + DRIFT * (lo**-0.5 - hi**-0.5) / math.log(hi / lo)
    direction = "grows" if slope > bound else "shrinks" if slope < -bound else "flat"
    ratio = math.exp(level[-1] - level[0])
    fit = SlopeFit(slope, se, bound, ratio, direction, math.sqrt(inflation))
    return fit, [math.exp(x) for x in level], sigma


def _inflation(logs: Sequence[Sequence[float]], own: Sequence[float]) -> float:
    """:math:`\\max(1, \\hat\\phi^2)`: the seeds' variance of ln size over the units' one,
    averaged over the widths (1 with one seed; a width whose units all agree is left out)."""
    ratios = [_var(row) / v for row, v in zip(logs, own, strict=True) if v > 0]
    return max(1.0, sum(ratios) / len(ratios)) if ratios else 1.0


def _var(values: Sequence[float]) -> float:
    """The unbiased variance; 0 for a single value."""
    if len(values) < 2:
        return 0.0
    m = sum(values) / len(values)
    return sum((x - m) ** 2 for x in values) / (len(values) - 1)


def _layer(name: str, kind: str, widths: list[int], runs: list[list[dict[str, Any]]]) -> LayerCheck:
    """One layer's sizes at every width (``runs[i][r]``: width ``i``, seed ``r``), fitted."""
    read: dict[str, list[list[tuple[float, float]]]] = {"init": [], "after": [], "change": []}
    for draws in runs:
        for key in read:
            read[key].append([])
        for run in draws:
            before, later = run["before"][name], run["after"].get(name, [])
            if [y.shape for y in before] != [y.shape for y in later]:
                raise ValueError(f"layer {name!r} gave outputs of other shapes after training")
            moved = [b - a for a, b in zip(before, later, strict=True)]
            for key, calls in (("init", before), ("after", later), ("change", moved)):
                read[key][-1].append(_size(_unit_squares(calls)))
    fits = {}
    for key, rows in read.items():
        sizes = [[s for s, _ in row] for row in rows]
        fits[key] = _fit(widths, sizes, [[e for _, e in row] for row in rows])
    (init_fit, init, init_se), (_, after, _), (change_fit, change, change_se) = fits.values()
    return LayerCheck(name, kind, init, after, change, init_se, change_se, init_fit, change_fit)


def _check_training(steps: object, lr: object, seeds: object) -> None:
    for name, value in (("steps", steps), ("seeds", seeds)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} {value!r} not allowed, use an integer at least 1")
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not (0 < lr < math.inf):
        raise ValueError(f"lr {lr!r} not allowed, use a finite number above 0")


def _build(factory: Factory, width: int, seed: int) -> nn.Module:
    """``factory(width)`` under ``torch.manual_seed(seed)``, the caller's RNG state kept."""
    torch.manual_seed(seed)
    model = factory(width)
    if not isinstance(model, nn.Module):
        raise TypeError(f"factory({width}) returned {type(model).__name__}, use an nn.Module")
    return model.train()


def coord_check(
    factory: Factory,
    widths: Sequence[int],
    batches: Any,
    *,
    steps: int = COORD_STEPS,
    lr: float = COORD_LR,
    seed: int = 0,
    seeds: int = COORD_SEEDS,
    optimizer: MakeOptimizer | None = None,
    output: str | None = None,
) -> CoordCheck:
    """Build the model at every width, train each a few steps, and fit how each layer's
    coordinate size scales with the width (see :mod:`normlab.doctor.widths`).

    Args:
        factory: ``factory(n) -> nn.Module``, the model at hidden width ``n``; its input and
            output shapes must not depend on ``n``. Called under ``torch.manual_seed(seed)``.
        widths: 2 to :data:`MAX_WIDTHS` widths (:data:`WIDTHS_ALLOWED`).
        batches: one input (a tensor or a dict) or a list or tuple of them, each a tensor
            (``model(x)``), a tuple (``model(*x)``) or a dict (``model(**x)``), the same at
            every width; step ``t`` takes ``t mod len``; the sizes are read on the first, and
            each reading keeps a float32 copy of every probed layer's output on it.
        steps, lr: Adam steps and their learning rate.
        seed, seeds: every width is built ``seeds`` times, from seeds ``seed``,
            ``seed + 1``, ...; each draw's init, dropout masks and readout follow its seed.
        optimizer: ``optimizer(model, lr)``, e.g. muP's per-layer rates; default
            ``torch.optim.Adam(model.parameters(), lr)``. A muP model that carries its scaling
            in the model (multipliers, as ``mup``'s ``MuReadout``) needs none.
        output: the field of a dict or ``ModelOutput`` output to read (default: the first
            floating-point tensor).

    Example::

        >>> def mlp(n):  # 4 features in, 32 out, n hidden: SP, one Adam rate
        ...     return nn.Sequential(nn.Linear(4, n), nn.ReLU(), nn.Linear(n, 32))
        >>> x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
        >>> check = coord_check(mlp, [16, 128], x, steps=2)
        >>> check.flagged  # the readout's change grows like the width
        ['2']
    """
    ns = check_widths(widths)
    _check_training(steps, lr, seeds)
    inputs = [batches] if isinstance(batches, Tensor | dict) else list(batches)
    if not inputs:
        raise ValueError("batches is empty, use at least one input")
    runs: list[list[dict[str, Any]]] = []  # [width][seed]
    for n in ns:
        runs.append([])
        for r in range(seeds):
            with torch.random.fork_rng(devices=[]):
                model = _build(factory, n, seed + r)
                opt = (
                    optimizer(model, lr) if optimizer else torch.optim.Adam(model.parameters(), lr)
                )
                run = _train_width(model, inputs, opt, steps, {"seed": seed + r, "output": output})
            run["kinds"] = {name: type(m).__name__ for name, m in model.named_modules()}
            _same_as_first(runs[0][0] if runs[0] else None, run, n)
            runs[-1].append(run)
    first = runs[0][0]
    layers = [_layer(name, first["kinds"][name], ns, runs) for name in first["before"]]
    losses = [draws[0]["losses"] for draws in runs]
    return CoordCheck(ns, steps, float(lr), layers, losses, seeds)


def _same_as_first(first: dict[str, Any] | None, run: dict[str, Any], width: int) -> None:
    """The model at ``width`` must have the first width's layers and output shape."""
    if first is None:
        return
    if run["shape"] != first["shape"]:
        raise ValueError(
            f"the output's shape is {run['shape']} at width {width} but {first['shape']} at "
            "the first: the factory must keep the output size fixed and vary the hidden width"
        )
    if list(run["before"]) != list(first["before"]):
        extra = sorted(set(run["before"]) ^ set(first["before"]))[:4]
        raise ValueError(
            f"the model at width {width} has other layers than at the first width ({extra}): "
            "the factory must build the same layers at every width"
        )


# -- the figure, as data -------------------------------------------------------------------------


def coord_figure(check: CoordCheck) -> fig.Figure:
    """Two log-log panels, at init and the change after training: each layer's size over its
    size at the smallest width, against the width, muP's expectation (flat: 1) and SP's
    Adam update (width^1) drawn as references."""
    widths = [float(n) for n in check.widths]
    panels = []
    for which, what in (("init", "at init"), ("change", f"change after {check.steps} steps")):
        series = [
            fig.Series(
                layer.name or "(model)",
                widths,
                fig.floored(_relative(getattr(layer, which)), ZERO_SIZE_FLOOR),
                "line+markers",
                width=2.5 if getattr(layer, f"{which}_fit").direction == "grows" else 1.0,
                legend=which == "init",
            )
            for layer in check.layers
        ]
        series += [
            fig.Series("muP: Theta(1)", widths, [1.0] * len(widths), color=fig.GRAY, dash="dash"),
            fig.Series(
                "width^1 (SP, Adam)",
                widths,
                [n / widths[0] for n in widths],
                color=fig.GRAY,
                dash="dot",
            ),
        ]
        grows = sum(getattr(layer, f"{which}_fit").direction == "grows" for layer in check.layers)
        panels.append(
            fig.Panel(
                fig.Axis("width n (log scale)", scale="log", ticks=tuple(widths)),
                fig.Axis(f"size / size at n={check.widths[0]} (log scale)", scale="log"),
                series,
                title=f"{what}: {grows} of {len(check.layers)} layers grow",
                note="thick: flagged (grows beyond the noise bound)",
            )
        )
    return fig.Figure(f"Coordinate check over width: {check.verdict()}", panels)


def _relative(sizes: Sequence[float]) -> list[float | None]:
    """Sizes over the first (``nan`` where the first is 0 or not finite)."""
    first = sizes[0]
    if not (math.isfinite(first) and first > 0):
        return [math.nan] * len(sizes)
    return [s / first for s in sizes]
