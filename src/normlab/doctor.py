r"""Diagnose a model's signal propagation: which layer lets the scale vanish or explode, which
units are dead, saturated or identical, and what to change.

:func:`diagnose` runs a few forward and backward passes under :class:`normlab.probe.ActivationProbe`
and :class:`normlab.probe.GradientProbe` and labels every probed (leaf) module from a fixed
vocabulary. Let :math:`s_0` be the standard deviation of the model's input (for token ids, or
another input with no scale of its own, that of the first layer's output, the embedding; 1 when
that is 0) and :math:`s_l` that of layer :math:`l`'s output, both over every element of the
batch; a *unit* is a channel (dim 1) after convolutions, batch norms, group norms and poolings
with 3+ dimensions, the last dimension otherwise, and an elementwise layer (activation,
dropout) takes the unit dimension of the layer before it. Layers are known by what they do: a
weight layer has parameters of its own with 2+ dimensions (Hugging Face's ``Conv1D`` too), and
norms and activations outside torch are known by their family names (``*RMSNorm``,
``*LayerNorm``, GELU, SiLU).

=============  ==================================================================================
label          when (thresholds are module constants)
=============  ==================================================================================
``non-finite`` an activation or a gradient of the layer is ``inf`` or ``nan`` (a diverged run,
               an overflow in float16): the layer's other numbers cannot be judged, so it gets
               this label alone
``vanishing``  :math:`s_l < 10^{-2}\, s_0` (:data:`VANISHING`), or a weight layer whose
               gradient ratio :math:`\rho_l < 10^{-3}` (:data:`GRAD_VANISHING`, below), or
               one a sustained depth trend puts 10x below the output end (:class:`Trend`)
``exploding``  :math:`s_l > 10^{2}\, s_0` (:data:`EXPLODING`), or
               :math:`\rho_l > 10^{3}` (:data:`GRAD_EXPLODING`), or 10x above by a trend
``dead``       at least 60% of the units (:data:`DEAD_FRAC`) are exactly 0 for every element of
               the batch (a ReLU whose pre-activation is negative on every input); depth alone
               leaves up to ~45% of a 20-layer He-initialized ReLU stack's units off on a batch
               of 64, as its inputs grow alike
``saturated``  tanh-like outputs (Tanh, Hardtanh, Softsign) with :math:`|y| \ge 0.99`, or
               sigmoid-like outputs with :math:`|y - 0.5| \ge 0.49`, for at least a quarter of
               the elements (:data:`SATURATED_FRAC`)
``symmetric``  2+ units and every unit equal to unit 0 on every element of the batch's first
               item: :math:`\max |y_u - y_0| \le 10^{-5} \max |y|` (:data:`SYMMETRIC_SPREAD`;
               units made equal by their weights are equal on any input)
``ok``         none of the above
=============  ==================================================================================

Fractions are averaged over the steps; the symmetry test must hold at every step. Dead and
symmetric are properties of the batch: use a batch of at least a few dozen examples. Mean, std
(two-pass, float64: a collapsed sigmoid's 0.5 +- 1e-9 keeps its std) and the tanh saturation
come from the probe over every element (:func:`probe_settings`); the per-unit numbers
(dead units, unit spread, sigmoid saturation) are typed statistic functions passed to the probe
through ``stats=``, each computed once per layer and step for the channel dim and, on 3+
dimensional outputs, for the last dim, and picked afterwards by the layer's kind. The labels
read the forward pass, and the backward pass through the gradient ratio of the weight layers
(those with a weight of 2+ dimensions: Linear, convolutions, LSTM, attention, embeddings):

.. math::

    \rho_l = \frac{\lVert \partial L / \partial W_l \rVert \,/\, \lVert W_l \rVert}
                 {\lVert \partial L / \partial W_L \rVert \,/\, \lVert W_L \rVert}

over all of the layer's weights of 2+ dimensions, with :math:`W_L` those of the last weight layer
(the one nearest the output) and the ratios averaged over the steps. With one learning rate
for the whole model, :math:`\rho_l` is how fast layer :math:`l`'s weights move, relative to their
size, against the last layer's: below :math:`10^{-3}` they barely learn (the gradient vanished
on its way back), above :math:`10^3` they take steps a thousand times larger (it exploded). The
bounds are wider than the forward ones because the last layer, next to the loss, differs from
the rest even in a sound model: over every zoo model, norm and init (three seeds and batch
sizes each), the healthy ones spread :math:`\rho` over 0.02..72. The forward scale alone misses
a vanishing gradient: the zoo's ``vanishing-sigmoid`` (20 sigmoid layers, PyTorch's default
init) keeps an output std near 0.07 in every layer, while its first layer's :math:`\rho` is
about :math:`10^{-17}`. A scale that vanishes evenly in both directions (the zoo's
``vanishing-tanh``) leaves :math:`\rho` near 1 (each layer's weight gradient is its input, which
shrinks going forward, times the gradient at its output, which shrinks going back) and is found
by :math:`s_l`. The gradient standard deviation of each layer's output (the loss is a fixed
random linear readout of the model's output, so the gradient that enters the model has the same
scale whatever its output scale) is reported beside them; it is per element, so it also shrinks
where a pooling or a mean spreads the gradient over more elements, and no label reads it.

A residual branch is judged against the stream it adds into: where a layer reads a sum of
layers' outputs (``x + f(x)``), the producer that descends from all the others is the branch's
end, and its ``branch`` number, its std over the sum's, takes the place of :math:`s_l / s_0` in
the scale labels (a branch that adds nothing to its stream is vanishing, whatever the input's
scale). Residual branches scaled on purpose are not judged by scale: where a small parameter
(:data:`BRANCH_SCALE`; layer scale, ReZero, SkipInit) multiplies a layer's output between
layers, the layers whose every path to the output crosses it, and those right after it, keep
their numbers but get no scale label, and the reference layer of :math:`\rho` is the last one not
so scaled (ConvNeXt: its classifier). Their small start is the design (Touvron et al., 2021, CaiT;
Bachlechner et al., 2021, ReZero), the notes say so.

A problem spread over depth is found by its trend even when no single layer crosses a bound:
:math:`\log \rho` fitted linearly over the model's repeated blocks (:class:`Trend`). A steady
growth of 100x or more over 6+ blocks (R^2 >= 0.9) is labelled: a deep BatchNorm + ReLU stack's
squared ratio grows by :math:`\pi/(\pi-1)` per layer toward the input (Yang et al., 2019),
and 30 such layers do not train. Post-LN and pre-LN encoders part here too: pre-LN's ratio grows
mildly toward the input, post-LN's does not.

Suggestions name the initializer that suits the activation that consumes each weight layer's
output, found in the autograd graph of one forward pass (through residual adds and other tensor
operations, and past normalization, dropout, pooling and identity layers): He for the ReLU
family, Xavier with the activation's gain for tanh, sigmoid or nothing (see
:func:`normlab.init.calculate_gain`), and where a normalization layer would help. Activations
applied as functions (``F.relu`` inside ``forward``) are invisible to hooks: the layer before them
then counts as followed by nothing (gain 1). :func:`fix` re-initializes the ``Linear`` and
``Conv1d/2d/3d`` layers by one of :data:`FIX_METHODS` (recurrent and attention input weights are
left alone), zeroing their biases.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from normlab import init
from normlab import nn as nlnn
from normlab.probe import (
    ActivationProbe,
    ActivationStats,
    GradientProbe,
    GradientStats,
    finite_or_none,
    select_modules,
)

LABELS = ("non-finite", "vanishing", "exploding", "dead", "saturated", "symmetric", "ok")
"""The label vocabulary, problems first in order of severity for the verdict's sake."""
VANISHING = 1e-2
EXPLODING = 1e2
GRAD_VANISHING = 1e-3
GRAD_EXPLODING = 1e3
DEAD_FRAC = 0.6
SATURATED_FRAC = 0.25
SYMMETRIC_SPREAD = 1e-5
TANH_SATURATION = 0.99
SIGMOID_SATURATION = 0.49  # of |y - 0.5|: y <= 0.01 or y >= 0.99

FIX_METHODS = ("he", "xavier", "orthogonal", "lsuv")
_SEVERITY = ("non-finite", "symmetric", "dead", "vanishing", "exploding", "saturated")

_WEIGHT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORMS: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.RMSNorm,
    nn.modules.instancenorm._InstanceNorm,
    nlnn._BatchNorm,
    nlnn.LayerNorm,
    nlnn.GroupNorm,
    nlnn.RMSNorm,
)
_CHANNEL_FIRST: tuple[type[nn.Module], ...] = (
    nn.modules.conv._ConvNd,
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.modules.instancenorm._InstanceNorm,
    nlnn._BatchNorm,
    nlnn.GroupNorm,
    nn.modules.pooling._MaxPoolNd,
    nn.modules.pooling._AvgPoolNd,
    nn.modules.pooling._AdaptiveAvgPoolNd,
    nn.modules.pooling._AdaptiveMaxPoolNd,
)
_PASS_THROUGH: tuple[type[nn.Module], ...] = (
    *_NORMS,
    nn.modules.dropout._DropoutNd,
    nn.Identity,
    nn.Flatten,
    nn.modules.pooling._MaxPoolNd,
    nn.modules.pooling._AvgPoolNd,
    nn.modules.pooling._AdaptiveAvgPoolNd,
    nn.modules.pooling._AdaptiveMaxPoolNd,
)
_RELU_LIKE = (nn.ReLU, nn.ReLU6, nn.ELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Softplus)
_TANH_LIKE = (nn.Tanh, nn.Hardtanh, nn.Softsign)
_SIGMOID_LIKE = (nn.Sigmoid, nn.Hardsigmoid)
_ELEMENTWISE = (
    *_RELU_LIKE,
    *_TANH_LIKE,
    *_SIGMOID_LIKE,
    nn.LeakyReLU,
    nn.PReLU,
    nn.RReLU,
    nn.SELU,
    nn.modules.dropout._DropoutNd,
    nn.Identity,
)


_NORM_NAME = re.compile(r"(RMS|Layer|Group|Batch|Instance)Norm")  # LlamaRMSNorm, T5LayerNorm
_RELU_NAME = re.compile(r"GELU|SiLU|Swish|Mish|(?<!Leaky)ReLU")  # GELUActivation, SiLUActivation


def _is_norm(module: nn.Module) -> bool:
    """A normalization layer: torch's and normlab's, or one named like them (HF's RMSNorms)."""
    return isinstance(module, _NORMS) or bool(_NORM_NAME.search(type(module).__name__))


def _is_elementwise(module: nn.Module) -> bool:
    """An activation, dropout or identity: torch's, or an activation named like one."""
    return isinstance(module, _ELEMENTWISE) or _named_activation(module) is not None


def _passes(module: nn.Module) -> bool:
    """Leaves the data's structure alone: norms, dropout, pooling, reshapes, identity."""
    return isinstance(module, _PASS_THROUGH) or _is_norm(module)


def _named_activation(module: nn.Module) -> str | None:
    """The ``calculate_gain`` name of an activation known only by its class name."""
    name = type(module).__name__
    if next(module.parameters(False), None) is not None or next(module.children(), None):
        return None  # a layer with weights or sub-layers is not an activation
    if _RELU_NAME.search(name):
        return "relu"
    if "Tanh" in name:
        return "tanh"
    return "sigmoid" if "Sigmoid" in name else None


def _has_weight(module: nn.Module) -> bool:
    """A weight layer: parameters of its own with 2+ dimensions (Linear, convs, HF's Conv1D)."""
    return any(p.dim() >= 2 for p in module.parameters(False))


class CannotDiagnose(ValueError):
    """The doctor cannot give a verdict on this model and input (no layer ran, no gradient)."""


class ModelInputError(ValueError):
    """The model raised when called on the input: its own message and the shape given."""


class ModelOutputError(TypeError):
    """The model returned something the doctor cannot take a gradient of."""


# -- per-unit statistics, passed to the probe as typed functions --------------------------------


_NAN = torch.tensor(math.nan)  # "not applicable", returned without computing anything


def _dead_frac(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Fraction of the units along ``dim`` that are exactly 0 on every element of the output.

    The ``dim=-1`` version skips 2-D outputs (``nan``), where dim 1 is the last dim already.
    """

    def dead(y: torch.Tensor) -> torch.Tensor:
        if y.dim() < 2 or (dim == -1 and y.dim() == 2):
            return _NAN
        others = [i for i in range(y.dim()) if i != dim % y.dim()]
        alive = y.amax(dim=others).ne(0) | y.amin(dim=others).ne(0)  # (units,)
        return 1.0 - alive.double().mean()

    return dead


def _unit_spread(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """``max |y_u - y_0| / max |y|`` over the units along ``dim`` of the first item of the
    batch: 0 when all are identical (the weights that make units equal do so on every input)."""

    def spread(y: torch.Tensor) -> torch.Tensor:
        if y.dim() < 2 or (dim == -1 and y.dim() == 2) or y.shape[dim] < 2:
            return _NAN
        y = y[:1]  # (1, ...): the first item
        low, high = torch.aminmax(y - y.narrow(dim, 0, 1))  # unit 0 against every unit
        bottom, top = torch.aminmax(y)
        return torch.maximum(-low, high) / torch.maximum(-bottom, top)  # 0 / 0 = nan: all zero

    return spread


def _sigmoid_saturated(y: torch.Tensor) -> torch.Tensor:
    return (y - 0.5).abs_().ge_(SIGMOID_SATURATION).mean()  # flags as floats: bools count slowly


_STATS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "dead_first": _dead_frac(1),
    "dead_last": _dead_frac(-1),
    "spread_first": _unit_spread(1),
    "spread_last": _unit_spread(-1),
}


# -- results -----------------------------------------------------------------------------------


TREND_BLOCKS, TREND_R2, TREND_TOTAL = 6, 0.9, 1e2
"""A sustained gradient trend: over at least this many blocks, a fit of log rho over depth this
good (R^2), and this much growth from one end to the other."""


@dataclass
class Trend:
    r"""The depth trend of the gradient ratio: :math:`\log \rho` fitted linearly over the blocks.

    A block is the weight layers of one repeated module (``h.3`` of GPT-2, ``layers.3`` of an
    encoder: the dotted prefix followed by an integer that most weight layers share), or each
    weight layer on its own; a block's value is the mean :math:`\log \rho` of its layers, the
    ones scaled on purpose left out. ``factor`` is the fitted growth of :math:`\rho` per block
    toward the input (above 1: the gradient grows on its way back; a deep BatchNorm + ReLU
    stack's squared ratio grows by :math:`\pi/(\pi-1) \approx 1.47` per layer, Yang et al.
    2019, "A mean field theory of batch normalization"), ``total`` that growth over all blocks.
    """

    factor: float
    total: float
    r2: float
    blocks: int
    grouped_by: str  # the blocks' prefix ("" for a top-level Sequential)

    @property
    def sustained(self) -> bool:
        strong = max(self.total, 1 / self.total) >= TREND_TOTAL if self.total > 0 else False
        return self.blocks >= TREND_BLOCKS and self.r2 >= TREND_R2 and strong

    @property
    def direction(self) -> str:
        return "exploding" if self.factor > 1 else "vanishing"


@dataclass
class LayerDiagnosis:
    """One probed layer: its labels and the numbers they come from (``nan`` = not applicable)."""

    name: str
    kind: str  # module class name
    labels: list[str]
    act_mean: float
    act_std: float
    scale: float  # act_std / input std
    dead_frac: float  # fraction of units 0 on the whole batch
    saturated_frac: float  # nan unless the layer is tanh- or sigmoid-like
    unit_spread: float  # max |y_u - y_0| / max |y|; 0 when every unit is identical
    grad_std: float  # std of the loss gradient w.r.t. the layer's output
    grad_ratio: float  # rho: relative weight gradient over the last weight layer's; nan: none
    scaled_by: str | None = None  # the small parameter scaling its branch on purpose, if any
    trend: str | None = None  # "exploding"/"vanishing": part of a sustained gradient trend
    branch: float = math.nan  # a residual branch end: act_std over the stream's; nan: none
    finite: bool = True  # every activation and gradient element seen was finite

    @property
    def _relative(self) -> float:
        """The scale judged: a branch end's against its stream, any other against the input."""
        return self.branch if math.isfinite(self.branch) else self.scale

    @property
    def scale_vanishing(self) -> bool:
        """The forward scale fell below :data:`VANISHING` times the input's (or to 0), and not
        by an intentional branch scaling."""
        return (self._relative < VANISHING or self.act_std == 0) and self.scaled_by is None

    @property
    def scale_exploding(self) -> bool:
        return self._relative > EXPLODING or math.isinf(self.act_std)

    @property
    def grad_vanishing(self) -> bool:
        """The weights' relative gradient is below :data:`GRAD_VANISHING` of the last layer's,
        and not because an intentional branch scaling multiplies it."""
        return self.grad_ratio < GRAD_VANISHING and self.scaled_by is None

    @property
    def grad_exploding(self) -> bool:
        return self.grad_ratio > GRAD_EXPLODING

    def criteria(self) -> list[str]:
        """Which rule gave each of the layer's labels, with its numbers."""
        out = []
        what = "its stream's std" if math.isfinite(self.branch) else "the input's"
        if self.scale_vanishing:
            out.append(f"vanishing: {self._relative:.2g}x {what} < {VANISHING:g}x")
        if self.grad_vanishing:
            out.append(f"vanishing: rho {self.grad_ratio:.2g} < {GRAD_VANISHING:g}")
        if self.scale_exploding:
            out.append(f"exploding: {self._relative:.2g}x {what} > {EXPLODING:g}x")
        if self.grad_exploding:
            out.append(f"exploding: rho {self.grad_ratio:.2g} > {GRAD_EXPLODING:g}")
        if self.trend is not None:
            out.append(
                f"{self.trend}: 10x or more along the depth trend (rho {self.grad_ratio:.2g})"
            )
        if self.dead_frac >= DEAD_FRAC:
            out.append(f"dead: {self.dead_frac:.0%} of units 0 >= {DEAD_FRAC:.0%}")
        if self.saturated_frac >= SATURATED_FRAC:
            out.append(f"saturated: {self.saturated_frac:.0%} >= {SATURATED_FRAC:.0%}")
        if self.unit_spread <= SYMMETRIC_SPREAD:
            out.append(f"symmetric: unit spread {self.unit_spread:.2g} <= {SYMMETRIC_SPREAD:g}")
        if self.scaled_by is not None:
            out.append(f"not judged by scale: its branch is scaled by {self.scaled_by!r}")
        if not self.finite:
            out = ["non-finite: an activation or gradient element is inf or nan"]
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = finite_or_none(dataclasses.asdict(self))
        out["criteria"] = self.criteria()
        return out


@dataclass
class Diagnosis:
    """The doctor's finding: per-layer labels, a one-sentence verdict, suggestions."""

    layers: list[LayerDiagnosis]
    verdict: str
    problems: list[str]  # the labels other than ok that occur, most severe first
    suggestions: list[str]
    input_shape: list[int]
    input_std: float  # the reference scale: the input's std, or the embedding's (see notes)
    steps: int
    notes: list[str] = field(default_factory=list)  # what the doctor read differently, and why
    trend: Trend | None = None  # the gradient ratio over depth; None: too few weight layers

    @property
    def healthy(self) -> bool:
        return not self.problems

    def labels(self) -> dict[str, list[str]]:
        """Layer name -> its labels."""
        return {layer.name: layer.labels for layer in self.layers}

    def with_label(self, label: str) -> list[str]:
        """Names of the layers labelled ``label``, in forward order."""
        return [layer.name for layer in self.layers if label in layer.labels]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = finite_or_none(
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "layers"}
        )
        out["layers"] = [layer.to_dict() for layer in self.layers]
        out["trend"] = self.trend and finite_or_none(dataclasses.asdict(self.trend))
        return out


@dataclass
class FixReport:
    """What :func:`fix` did: each re-initialized layer, the activation after it and the gain."""

    method: str
    layers: list[str]
    follows: list[str]  # nonlinearity name as in calculate_gain
    gains: list[float]
    lsuv: init.LSUVResult | None = field(default=None)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # weight layers left, and why

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = finite_or_none(
            {
                "method": self.method,
                "layers": self.layers,
                "follows": self.follows,
                "gains": self.gains,
                "lsuv": None if self.lsuv is None else self.lsuv.to_dict(),
                "skipped": [{"layer": n, "why": why} for n, why in self.skipped],
            }
        )
        return out


TRIAL_STEPS, TRIAL_LR = 100, 1e-3


@dataclass
class Trial:
    """A short training run of the model as given and of the fixed one: the same batches, the
    same targets, the same optimizer (Adam, :data:`TRIAL_LR`), :data:`TRIAL_STEPS` steps.

    The task is a proxy any model has: fit a fixed random target of the output's shape by mean
    squared error. A fix that leaves the model harder to train shows as a higher loss; only a
    lower one is called a cure.
    """

    steps: int
    before: list[float]  # the loss at each step, the model as given
    after: list[float]  # the same for the fixed model

    @property
    def cured(self) -> bool:
        return self.after[-1] < self.before[-1]

    def words(self) -> str:
        b, a = self.before, self.after
        how = "lowered" if self.cured else "did not lower"
        advice = "" if self.cured else ": not a cure, keep the model as built"
        return (
            f"training check ({self.steps} Adam steps on a proxy task): the fix {how} the loss, "
            f"{b[0]:.4g} -> {b[-1]:.4g} as given, {a[0]:.4g} -> {a[-1]:.4g} fixed{advice}"
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = finite_or_none(dataclasses.asdict(self))
        out["cured"] = self.cured
        return out


def trial(
    given: nn.Module,
    fixed: nn.Module,
    batches: Sequence[Input],
    *,
    steps: int = TRIAL_STEPS,
    generator: torch.Generator | None = None,
    output: str | None = None,
) -> Trial:
    """Train copies of ``given`` and ``fixed`` side by side (see :class:`Trial`); the models
    themselves are left as they are."""
    seed = int(torch.randint(2**62, (1,), generator=generator))
    losses = []
    for model in (given, fixed):
        net = copy.deepcopy(model)
        g = torch.Generator().manual_seed(seed)  # the same targets for both
        opt = torch.optim.Adam(net.parameters(), lr=TRIAL_LR)
        target: torch.Tensor | None = None
        curve = []
        for step in range(steps):
            x = batches[step % len(batches)]
            opt.zero_grad()
            out = _call(net, x, output)
            if target is None:
                target = torch.randn(out.shape, generator=g).to(out.device)
            loss = torch.nn.functional.mse_loss(out, target)
            loss.backward()
            opt.step()
            curve.append(loss.item())
        losses.append(curve)
    return Trial(steps, losses[0], losses[1])


# -- the model's structure, as the forward pass shows it ----------------------------------------


def _nonlinearity(module: nn.Module) -> tuple[str, float | None]:
    """The ``calculate_gain`` name (and slope) for an activation module; linear when unknown."""
    if isinstance(module, nn.LeakyReLU):
        return "leaky_relu", module.negative_slope
    if isinstance(module, nn.PReLU):
        return "leaky_relu", float(module.weight.detach().mean())
    if isinstance(module, nn.RReLU):
        return "leaky_relu", (module.lower + module.upper) / 2
    if isinstance(module, _RELU_LIKE):
        return "relu", None
    if isinstance(module, _TANH_LIKE):
        return "tanh", None
    if isinstance(module, _SIGMOID_LIKE):
        return "sigmoid", None
    return _named_activation(
        module
    ) or "linear", None  # SELU included: self-normalizing nets want variance 1/fan_in


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


Edges = dict[str, "str | None"]  # producing layer -> the small parameter on the way, if any
_OUTPUT = "<output>"  # the model's output, as a consumer


@dataclass
class _Graph:
    """Which layer reads which layer's output, as one forward pass's autograd graph shows it.

    A layer's inputs are traced back through the operations between layers (a residual add, a
    mean, a reshape) to the layers that produced them, so "what follows a conv" is what consumes
    its output, not what happens to be called next.
    """

    order: list[tuple[str, nn.Module]]  # layers in first-call order
    producers: dict[str, list[str]]
    consumers: dict[str, list[str]]
    edges: dict[str, Edges] = field(default_factory=dict)  # consumer -> producer -> scaling
    streams: dict[str, float] = field(default_factory=dict)  # a sum's reader -> the sum's std

    def branches(self) -> dict[str, float]:
        """Residual branch ends -> the std of the stream they add into.

        A layer reading a sum of several layers' outputs (``x + f(x)``) reads a stream; the
        producer that descends from all the others is the branch end (``f``'s last layer), the
        others make the stream. Two paths from one input (a conv shortcut) have no such end.
        """
        ancestors: dict[str, set[str]] = {}
        for name, _ in self.order:  # producers are called first
            mine: set[str] = set()
            for p in self.producers.get(name, []):
                mine |= {p} | ancestors.get(p, set())
            ancestors[name] = mine
        out: dict[str, float] = {}
        for reader, std in self.streams.items():
            found = list(self.edges.get(reader, {}))
            ends = [b for b in found if all(o == b or o in ancestors.get(b, set()) for o in found)]
            if len(found) >= 2 and ends and math.isfinite(std) and ends[0] not in out:
                out[ends[0]] = std
        return out

    @classmethod
    def from_edges(cls, order: list[tuple[str, nn.Module]], edges: dict[str, Edges]) -> _Graph:
        producers = {c: list(found) for c, found in edges.items() if c != _OUTPUT}
        consumers: dict[str, list[str]] = {}
        for name, _ in order:
            for p in producers.get(name, []):
                consumers.setdefault(p, []).append(name)
        return cls(order, producers, consumers, edges)

    def scaled(self) -> dict[str, str]:
        """Layer -> the small parameter scaling it: the layers whose every path to the output
        crosses an intentional branch scaling (:data:`BRANCH_SCALE`), and those right after
        one (through pass-through layers)."""
        reads: dict[str, Edges] = {}  # producer -> consumer -> scaling
        for consumer, found in self.edges.items():
            for producer, site in found.items():
                reads.setdefault(producer, {})[consumer] = site
        behind: dict[str, str] = {}
        for name, _ in reversed(self.order):  # consumers come later in the forward order
            out = reads.get(name, {})  # a site on the way, or the consumer's own scaling
            marks = [site or behind.get(c) for c, site in out.items()]
            if out and all(marks):
                behind[name] = cast(str, marks[0])
        for name, m in self.order:  # forward: the layers right after a scaling
            found = self.edges.get(name, {})
            marks = [site or behind.get(p) for p, site in found.items()]
            direct = any(site is not None for site in found.values())
            if name not in behind and found and all(marks) and (direct or _passes(m)):
                behind[name] = cast(str, marks[0])
        return behind

    def _first(
        self, start: str, edges: dict[str, list[str]], stop: Callable[[nn.Module], bool]
    ) -> nn.Module | None:
        modules = dict(self.order)
        frontier, seen = list(edges.get(start, [])), {start}
        while frontier:  # breadth first, through pass-through layers
            name = frontier.pop(0)
            if name in seen:
                continue
            seen.add(name)
            if stop(modules[name]):
                return modules[name]
            frontier.extend(edges.get(name, []))
        return None

    def follows(self, name: str) -> tuple[str, float | None]:
        """The nonlinearity applied to layer ``name``'s output (linear when none)."""
        m = self._first(name, self.consumers, lambda m: not _passes(m))
        return ("linear", None) if m is None else _nonlinearity(m)

    def source(self, name: str) -> str | None:
        """The weight layer whose output reaches layer ``name`` (through pass-through layers)."""
        m = self._first(name, self.producers, lambda m: not _passes(m))
        if m is None or not _has_weight(m):
            return None
        return next(n for n, x in self.order if x is m)


def _is_layer(module: nn.Module) -> bool:
    # as the probe picks layers: leaves, and modules computing with parameters of their own
    return next(module.children(), None) is None or any(True for _ in module.parameters(False))


BRANCH_SCALE = 1e-2
"""A parameter multiplied onto a layer's output between layers whose values average at most this
(in absolute value) is an intentional branch scaling: layer scale (CaiT, ConvNeXt: 1e-6),
ReZero and SkipInit (0). What it scales starts small on purpose, and learns to grow."""


def _scaling(node: Any, names: dict[int, str]) -> str | None:
    """The model parameter a ``MulBackward0`` node multiplies by, when it is a small one."""
    if type(node).__name__ != "MulBackward0":
        return None
    for next_node, _ in node.next_functions:
        p = getattr(next_node, "variable", None)  # an AccumulateGrad: a leaf, maybe a parameter
        small = isinstance(p, nn.Parameter) and p.numel() > 0 and p.abs().mean() <= BRANCH_SCALE
        if small and id(p) in names:
            return names[id(p)]
    return None


def _walk(tensors: list[torch.Tensor], made_by: dict[Any, str], names: dict[int, str]) -> Edges:
    """The layers whose outputs reach ``tensors`` through the autograd graph, each with the
    small parameter multiplied in on the way (``None``: no intentional scaling)."""
    found: Edges = {}
    stack: list[tuple[Any, str | None]] = [(t.grad_fn, None) for t in tensors]
    seen = set()
    while stack:
        node, site = stack.pop()
        if node is None or (node, site) in seen:
            continue
        seen.add((node, site))
        if node in made_by:
            layer = made_by[node]
            found[layer] = site if found.get(layer, site) is not None else None  # one clean path
            continue
        site = site or _scaling(node, names)
        stack.extend((next_node, site) for next_node, _ in node.next_functions)
    return found


def _trace(model: nn.Module, batch: Input, output: str | None = None) -> _Graph:
    """One forward pass with gradients on, recording which layer's output feeds which layer
    (and the model's output), and the small parameters multiplied in between."""
    made_by: dict[Any, str] = {}  # autograd node of a layer's output -> that layer
    order: dict[str, nn.Module] = {}
    edges: dict[str, Edges] = {}  # layer -> its producers, each with a scaling parameter
    names = {id(p): n for n, p in model.named_parameters()}
    streams: dict[str, float] = {}  # a layer reading a sum of layers' outputs: its input's std

    def hook(mod: nn.Module, args: Any, out: Any, name: str) -> None:
        order.setdefault(name, mod)
        # a layer with layers inside (ReZero's block: x + alpha * f(x)) also reads theirs
        read = _tensors(args) + (_tensors(out) if next(mod.children(), None) else [])
        for p, site in _walk(read, made_by, names).items():
            if p != name:
                known = edges.setdefault(name, {})
                known[p] = site if known.get(p, site) is not None else None
        if len(edges.get(name, {})) >= 2 and _tensors(args):  # it reads a sum: the stream?
            streams[name] = _std(_tensors(args)[0])
        for t in _tensors(out):
            if t.grad_fn is not None:
                made_by.setdefault(t.grad_fn, name)  # an identity layer keeps the first

    handles = [
        m.register_forward_hook(functools.partial(hook, name=name))
        for name, m in model.named_modules()
        if _is_layer(m)
    ]
    x = _map(batch, _graph_input)
    try:
        with _preserved(model), torch.enable_grad():
            y = _call(model, x, output)
            edges[_OUTPUT] = _walk([y], made_by, names)
            streams[_OUTPUT] = _std(y)
    finally:
        for h in handles:
            h.remove()
    graph = _Graph.from_edges(list(order.items()), edges)
    graph.streams = streams
    return graph


def _std(x: torch.Tensor) -> float:
    return float(x.detach().double().std()) if x.is_floating_point() and x.numel() > 1 else math.nan


@contextmanager
def _preserved(model: nn.Module) -> Iterator[None]:
    """Run passes through ``model`` and leave it as it was: buffers (running stats) and grads."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    grads = {p: p.grad for p in model.parameters()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        for p, g in grads.items():
            p.grad = g


# -- running the model -------------------------------------------------------------------------


Input = torch.Tensor | tuple[Any, ...] | dict[str, Any]
"""One step's input: a tensor (``model(x)``), a tuple of positional inputs (``model(*x)``) or a
dict of keyword inputs (``model(**x)``)."""


def _steps(batches: Input | Sequence[Input]) -> list[Input]:
    """The steps' inputs: one input (a tensor or a dict), or a list or tuple of them."""
    steps = [batches] if isinstance(batches, torch.Tensor | dict) else list(batches)
    if not steps:
        raise ValueError("batches is empty, use at least one input batch")
    if not all(_tensors(x) for x in steps):
        raise ValueError("every step's input must hold a tensor (a tensor, a tuple or a dict)")
    return steps


def _map(value: Any, f: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return f(value)
    if isinstance(value, tuple | list):
        return type(value)(_map(v, f) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, f) for k, v in value.items()}
    return value


def _graph_input(x: torch.Tensor) -> torch.Tensor:
    """A copy that leaves a graph (layers without parameters too) and that the model may
    change in place (a leaf that requires grad may not be: ``nn.Dropout(inplace=True)``)."""
    if not x.is_floating_point():
        return x.clone()
    return x.detach().clone().requires_grad_(True).clone()


def _main(x: Input) -> torch.Tensor:
    """The input the scales are read from: the first tensor of a step's input."""
    return _tensors(x)[0]


def _shape(x: Input) -> str:
    """``(8, 16)``; ``((8, 16), (8,))`` for positional inputs; ``{ids: (8, 16)}`` for keywords."""
    if isinstance(x, torch.Tensor):
        return "(" + ", ".join(str(s) for s in x.shape) + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in x.items()) + "}"
    if isinstance(x, tuple | list):
        return "(" + ", ".join(_shape(v) for v in x) + ")"
    return type(x).__name__


OUTPUT_FIELDS = ("logits", "last_hidden_state")
"""The fields of a dict or ``ModelOutput`` read when no ``output=`` is named, in this order."""


def _output(out: object, field: str | None) -> torch.Tensor:
    """The tensor the doctor differentiates: ``out`` itself, the first element of a tuple (as
    ``nn.LSTM``'s ``(output, state)``), or a dict's or Hugging Face ``ModelOutput``'s
    ``field`` (by default the first of :data:`OUTPUT_FIELDS` it has)."""
    if isinstance(out, Mapping):
        keys = [k for k, v in out.items() if isinstance(v, torch.Tensor)]
        if field is None:
            field = next((k for k in OUTPUT_FIELDS if k in keys), None)
        if field not in keys:
            how = f"output={field!r} is not one of them" if field else "name one with output="
            raise ModelOutputError(
                f"the model returned {type(out).__name__} with tensor fields {keys}: {how}"
            )
        return cast(torch.Tensor, out[field])
    if field is not None:
        raise ModelOutputError(
            f"output={field!r} names a field, but the model returned "
            f"{type(out).__name__}, not a dict or ModelOutput"
        )
    if isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    if not isinstance(out, torch.Tensor):
        raise ModelOutputError(
            f"the model returned {type(out).__name__}, use a model that returns a tensor, a "
            "tuple whose first element is a tensor, or a dict or ModelOutput (see output=)"
        )
    return out


def _call(model: nn.Module, x: Input, field: str | None = None) -> torch.Tensor:
    """``model(x)`` (``*x``, ``**x``) as one tensor; errors say what the model said and what it
    was given."""
    try:
        out = model(**x) if isinstance(x, dict) else model(*x) if isinstance(x, tuple) else model(x)
    except Exception as exc:  # the user's model may raise anything: report it, with the shape
        raise ModelInputError(
            f"the model rejected input of shape {_shape(x)}: {type(exc).__name__}: {exc}"
        ) from exc
    return _output(out, field)


def _backward(out: torch.Tensor, readout: torch.Tensor) -> None:
    """The readout loss's backward pass (a number, the model's own loss, as it is); an error in
    it is the model's, said as such."""
    try:
        if out.dim() == 0:
            out.backward()
        else:
            ((out * readout).sum() / out.shape[0]).backward()
    except Exception as exc:  # a custom autograd.Function of the user's may raise anything
        raise ModelInputError(
            f"the model's backward pass raised {type(exc).__name__}: {exc}"
        ) from exc


def _eager(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """The module to probe: a ``torch.compile``'d model's original module (compiled code runs
    no module hooks), and a note saying so."""
    original = getattr(model, "_orig_mod", None)
    if type(model).__name__ == "OptimizedModule" and isinstance(original, nn.Module):
        return original, [
            "a torch.compile'd model: its original module was examined, in eager mode, with "
            "the same parameters (compiled code calls no module hooks)"
        ]
    return model, []


def _mean(rows: Sequence[Sequence[float]], j: int) -> float:
    values = [r[j] for r in rows if math.isfinite(r[j])]
    return sum(values) / len(values) if values else math.nan


def _max(rows: Sequence[Sequence[float]], j: int) -> float:
    values = [r[j] for r in rows]
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def diagnose(
    model: nn.Module,
    batches: Input | Sequence[Input],
    *,
    generator: torch.Generator | None = None,
    output: str | None = None,
) -> Diagnosis:
    r"""Run one forward and backward pass per batch under the probes and label every leaf layer.

    The loss is a random linear readout :math:`L = \frac{1}{N} \sum_i r_i \cdot y_i` with
    :math:`r \sim \mathcal{N}(0, 1)` drawn once from ``generator``, so the gradient entering the
    model has a fixed scale. The model runs in the mode it is in; its buffers (BatchNorm running
    statistics) and parameter gradients are restored afterwards, so diagnosing changes nothing.
    Scales are relative to the input's std; for token ids (an input with no scale) to the std
    of the first layer's output, the embedding's, as the diagnosis's notes say. A
    ``torch.compile``'d model is examined through its original module.

    Args:
        model: the network to examine; its output is read by :func:`_output`: a tensor, a tuple
            whose first element is one, or a dict or ``ModelOutput``.
        batches: one input batch, or several (one step each).
        generator: draws the readout direction.
        output: the field of a dict or ``ModelOutput`` output to read (default: ``logits``,
            else ``last_hidden_state``). A number (``loss``, of a Hugging Face model given
            ``labels=``) is the model's own loss, and its gradient is used as it is.

    Returns:
        a :class:`Diagnosis`.

    Raises:
        ModelInputError: the model raised on the input, or in its backward pass.
        ModelOutputError: its output holds no tensor to read.
        CannotDiagnose: no probed layer ran, or the output carries no gradient (``argmax``).

    Examples::

        >>> from normlab import zoo
        >>> net = zoo.build("exploding-relu")
        >>> x = torch.randn(zoo.input_shape("exploding-relu", 32))
        >>> d = diagnose(net, x)
        >>> d.problems[:1], d.with_label("exploding")[-1]
        (['exploding'], '20')
    """
    xs = _steps(batches)
    model, notes = _eager(model)
    graph = _trace(model, xs[0], output)
    scaled = graph.scaled()
    acts, grad_stats, ratios, own = _measure(model, xs, generator, output, set(scaled))
    if own:
        notes.append(
            "the output is a number, the model's own loss: its gradient was used, not a readout"
        )
    ref, where = _reference(xs, acts)
    notes += [where] if where else []
    notes += _scaled_notes(scaled)
    layers = _layer_diagnoses(model, acts, grad_stats, ratios, ref, scaled, graph.branches())
    trend = _trend(layers)
    if trend is not None and trend.sustained:
        _mark_trend(layers, trend)
    problems = [p for p in _SEVERITY if any(p in layer.labels for layer in layers)]
    # the data flow, for the suggestions (one more forward pass, only when there is a problem)
    return Diagnosis(
        layers=layers,
        verdict=_verdict(layers, problems, trend),
        problems=problems,
        suggestions=_suggestions(model, layers, graph, problems, trend),
        input_shape=list(_main(xs[0]).shape),
        input_std=ref,
        steps=len(xs),
        notes=notes,
        trend=trend,
    )


def probe_settings(model: nn.Module) -> dict[str, Any]:
    """The :class:`~normlab.probe.ActivationProbe` arguments the doctor measures ``model`` with:
    every element, the per-unit statistics, and saturation only where the model has a tanh- or
    sigmoid-like layer (each costs a pass over every layer's output)."""
    stats = dict(_STATS)
    modules = list(model.modules())
    if any(isinstance(m, _SIGMOID_LIKE) for m in modules):
        stats["sigmoid_saturated"] = _sigmoid_saturated
    tanh = any(isinstance(m, _TANH_LIKE) for m in modules)
    return {"stats": stats, "saturation": TANH_SATURATION if tanh else None, "sample_size": None}


def _measure(
    model: nn.Module,
    xs: Sequence[Input],
    generator: torch.Generator | None,
    output: str | None,
    scaled: set[str],
) -> tuple[ActivationStats, GradientStats, dict[str, float], bool]:
    """One forward and backward pass per batch under the probes: the activation and gradient
    statistics and each weight layer's gradient ratio. Refuses (:class:`CannotDiagnose`) when
    no probed layer ran or no pass had a gradient."""
    weights = _weights(model)
    readout: torch.Tensor | None = None
    relative: list[torch.Tensor] = []  # per step: each weight layer's |dL/dW| / |W|, (layers,)
    with _preserved(model):
        with (
            ActivationProbe(model, **probe_settings(model)) as ap,
            GradientProbe(model) as gp,
        ):
            for x in xs:
                model.zero_grad(set_to_none=True)
                out = _call(model, x, output)
                if readout is None:
                    readout = torch.randn(out.shape, generator=generator).to(out.device)
                if out.requires_grad and out.is_floating_point():
                    _backward(out, readout)
                    relative.append(_relative_gradients(weights))
                ap.step()
                gp.step()
        acts, grad_stats = ap.result(), gp.result()
    if not acts.layers:
        raise CannotDiagnose(
            f"no layer of the model ran under the probes ({len(select_modules(model))} "
            "modules watched): its forward pass calls none of its submodules (a compiled or "
            "scripted function?); pass the nn.Module whose layers run in eager mode"
        )
    if not relative:
        raise CannotDiagnose(
            f"the model's output ({out.dtype}, requires_grad={out.requires_grad}) carries no "
            "gradient, so no backward pass ran and the gradients cannot be judged: return "
            "the scores (logits) rather than argmax or other integer output, and run the "
            "doctor outside torch.no_grad()"
        )
    order = [name for name in acts.layers if name not in scaled]  # the reference: unscaled
    own = out.dim() == 0  # a loss
    return acts, grad_stats, _grad_ratios(list(weights), relative, order), own


def _blocks(names: Sequence[str]) -> tuple[str, list[list[int]]]:
    """The repeated blocks among ``names``: the prefix whose integer component takes the most
    values, and the indices of the names under each of its values, in order (one name per
    block when no prefix repeats)."""
    by_prefix: dict[str, dict[int, list[int]]] = {}
    for i, name in enumerate(names):
        for match in re.finditer(r"(?:^|\.)(\d+)(?=\.|$)", name):
            prefix = name[: match.start(1)].rstrip(".")
            by_prefix.setdefault(prefix, {}).setdefault(int(match.group(1)), []).append(i)
    if not by_prefix:
        return "", [[i] for i in range(len(names))]
    prefix, groups = max(by_prefix.items(), key=lambda kv: (len(kv[1]), -len(kv[0])))
    return prefix, [groups[k] for k in sorted(groups)]


def _trend(layers: Sequence[LayerDiagnosis]) -> Trend | None:
    """The fitted depth trend of the gradient ratio (see :class:`Trend`); ``None`` for fewer
    than three blocks."""
    weighted = _trended(layers)
    prefix, groups = _blocks([la.name for la in weighted])
    if len(groups) < 3:
        return None
    y = torch.tensor(
        [sum(math.log(weighted[i].grad_ratio) for i in g) / len(g) for g in groups],
        dtype=torch.float64,
    )  # (B,) mean log rho per block
    x = torch.arange(len(y), dtype=torch.float64)  # (B,) block index, input side first
    xc, yc = x - x.mean(), y - y.mean()
    slope = float((xc * yc).sum() / (xc * xc).sum())  # least squares
    fitted_var = slope**2 * float((xc * xc).sum())
    total_var = float((yc * yc).sum())
    r2 = fitted_var / total_var if total_var > 0 else 0.0
    factor = math.exp(-slope)  # per block, toward the input
    return Trend(factor, factor ** (len(y) - 1), r2, len(y), prefix)


def _mark_trend(layers: Sequence[LayerDiagnosis], trend: Trend) -> None:
    """Label the weight layers the fitted trend puts 10x or more from the output end's ratio."""
    weighted = _trended(layers)
    _, groups = _blocks([la.name for la in weighted])
    for b, group in enumerate(groups):
        growth = trend.factor ** (len(groups) - 1 - b)  # from the last block to this one
        if not 0.1 < growth < 10:
            for i in group:
                weighted[i].trend = trend.direction
                weighted[i].labels = _labels(weighted[i])


def _trended(layers: Sequence[LayerDiagnosis]) -> list[LayerDiagnosis]:
    """The layers a trend is fitted over: weight layers with a ratio, not scaled on purpose,
    but the last, the reference (its ratio is 1 by definition, and a head differs anyway)."""
    return [
        la
        for la in layers
        if la.grad_ratio > 0 and math.isfinite(la.grad_ratio) and la.scaled_by is None
    ][:-1]


def _scaled_notes(scaled: dict[str, str]) -> list[str]:
    """One note per intentional branch scaling: what it scales, and why that is no problem."""
    by_site: dict[str, list[str]] = {}
    for layer, site in scaled.items():
        by_site.setdefault(site, []).append(layer)
    return [
        f"{site!r} (|value| <= {BRANCH_SCALE:g}) scales a residual branch on purpose (layer "
        f"scale, ReZero, SkipInit): its {len(layers)} layer(s) ({', '.join(layers[:3])}"
        f"{', ...' if len(layers) > 3 else ''}) start small and slow, and are not judged by scale"
        for site, layers in by_site.items()
    ]


def _reference(inputs: Sequence[Input], acts: ActivationStats) -> tuple[float, str]:
    """The scale every layer is compared with: the input's std; for token ids (or another
    input with no scale), the std of the first layer's output, the embedding, with a note."""
    xs = [_main(x) for x in inputs]
    if all(x.is_floating_point() for x in xs):
        return _input_std(inputs), ""
    std = _mean(acts.std, 0)
    if std > 0 and math.isfinite(std):
        return std, (
            f"the input ({xs[0].dtype}) has no scale of its own: scales are relative to the "
            f"output of the first layer, {acts.layers[0]!r} (std {std:.3g})"
        )
    return 1.0, f"the input ({xs[0].dtype}) has no scale of its own: scales are absolute"


def _layer_diagnoses(
    model: nn.Module,
    acts: ActivationStats,
    grad_stats: GradientStats,
    grad_ratio: dict[str, float],
    ref: float,
    scaled: dict[str, str],
    streams: dict[str, float] | None = None,
) -> list[LayerDiagnosis]:
    """Each probed layer's numbers, and its labels."""
    modules = dict(model.named_modules())
    grad_std = {name: _mean(grad_stats.grad_std, j) for j, name in enumerate(grad_stats.layers)}
    layers = []
    unit_first = False
    for j, (name, kind) in enumerate(zip(acts.layers, acts.kinds, strict=True)):
        m = modules[name]
        if not _is_elementwise(m):
            unit_first = isinstance(m, _CHANNEL_FIRST)
        # The *_last statistics skip 2-D outputs (nan), whose units are dim 1 = the last dim.
        two_d = all(math.isnan(step[j]) for step in acts.extra["dead_last"])
        where = "first" if unit_first or two_d else "last"
        if isinstance(m, _TANH_LIKE):
            saturated = _mean(acts.saturated_frac, j)
        elif isinstance(m, _SIGMOID_LIKE):
            saturated = _mean(acts.extra["sigmoid_saturated"], j)
        else:
            saturated = math.nan
        std = _mean(acts.std, j)
        layer = LayerDiagnosis(
            name=name,
            kind=kind,
            labels=[],
            act_mean=_mean(acts.mean, j),
            act_std=std,
            scale=std / ref,
            dead_frac=_mean(acts.extra[f"dead_{where}"], j),
            saturated_frac=saturated,
            unit_spread=_max(acts.extra[f"spread_{where}"], j),
            grad_std=grad_std.get(name, math.nan),
            grad_ratio=grad_ratio.get(name, math.nan),
            scaled_by=scaled.get(name),
            branch=std / (streams or {}).get(name, math.nan),
            finite=_finite(acts, j) and _finite_gradient(grad_stats, name),
        )
        layer.labels = _labels(layer)
        layers.append(layer)
    return layers


def _weights(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Each layer's own trainable weights of 2+ dimensions (biases and norm scales left out)."""
    found: dict[str, list[nn.Parameter]] = {}
    for name, m in model.named_modules():
        ps = [p for p in m.parameters(recurse=False) if p.dim() >= 2 and p.requires_grad]
        if ps and _is_layer(m):
            found[name] = ps
    return found


def _relative_gradients(weights: dict[str, list[nn.Parameter]]) -> torch.Tensor:
    """``|dL/dW| / |W|`` per weight layer after one backward pass, in float64, (layers,).

    A layer whose weights got no gradient (not used, or frozen) or are all 0 gives nan.
    """
    out = []
    for ps in weights.values():
        grads = [p.grad for p in ps if p.grad is not None]
        if not grads:
            out.append(torch.tensor(math.nan, dtype=torch.float64))
            continue
        g2 = sum(g.detach().double().square().sum() for g in grads)  # float64: 1e-20 squares
        w2 = sum(p.detach().double().square().sum() for p in ps)
        out.append(torch.as_tensor(g2 / w2).sqrt().cpu())  # 0 / 0 = nan, x / 0 = inf
    return torch.stack(out) if out else torch.empty(0, dtype=torch.float64)


def _grad_ratios(
    names: list[str], relative: Sequence[torch.Tensor], order: Sequence[str]
) -> dict[str, float]:
    """rho per weight layer: its step-averaged relative gradient over the last weight layer's.

    The last weight layer is the last in ``order`` (the probe's forward order) with a finite,
    positive relative gradient; without one, no layer gets a ratio.
    """
    if not relative or not names:
        return {}
    rel = torch.stack(list(relative)).tolist()  # (steps, layers): one host sync
    mean = {name: _mean(rel, j) for j, name in enumerate(names)}
    ref = next(
        (mean[n] for n in reversed(order) if n in mean and math.isfinite(mean[n]) and mean[n] > 0),
        None,
    )
    if ref is None:
        return {}
    return {name: r / ref for name, r in mean.items() if math.isfinite(r)}


def _input_std(inputs: Sequence[Input]) -> float:
    xs = [_main(x) for x in inputs]
    if not all(x.is_floating_point() for x in xs):
        return 1.0  # token ids and the like have no scale to compare with
    std = sum(float(x.detach().float().std(unbiased=False)) for x in xs) / len(xs)
    return std if std > 0 and math.isfinite(std) else 1.0


def _finite(acts: ActivationStats, j: int) -> bool:
    """Whether layer ``j``'s outputs held only finite values at every step it ran (a ``nan``
    makes min and max ``nan``, an ``inf`` makes one of them infinite)."""
    ran = [s for s, calls in enumerate(acts.calls) if calls[j] > 0]
    return all(math.isfinite(acts.min[s][j]) and math.isfinite(acts.max[s][j]) for s in ran)


def _finite_gradient(grads: GradientStats, name: str) -> bool:
    """Whether every gradient the layer's output received was finite (its norm is)."""
    if name not in grads.layers:
        return True
    j = grads.layers.index(name)
    got = [s for s, numel in enumerate(grads.numel) if numel[j] > 0]
    return all(math.isfinite(grads.grad_norm[s][j]) for s in got)


def _labels(layer: LayerDiagnosis) -> list[str]:
    if not layer.finite:
        return ["non-finite"]  # nan or inf: no other number of the layer means anything
    labels = []
    if layer.scale_vanishing or layer.grad_vanishing or layer.trend == "vanishing":
        labels.append("vanishing")
    if layer.scale_exploding or layer.grad_exploding or layer.trend == "exploding":
        labels.append("exploding")
    if layer.dead_frac >= DEAD_FRAC:
        labels.append("dead")
    if layer.saturated_frac >= SATURATED_FRAC:
        labels.append("saturated")
    if layer.unit_spread <= SYMMETRIC_SPREAD:
        labels.append("symmetric")
    return labels or ["ok"]


# -- words -------------------------------------------------------------------------------------


def _g(x: float) -> str:
    return f"{x:.2g}" if math.isfinite(x) else str(x)


def _span(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "-"
    lo, hi = _g(min(finite)), _g(max(finite))
    return lo if lo == hi else f"{lo}..{hi}"


def _verdict(
    layers: Sequence[LayerDiagnosis], problems: Sequence[str], trend: Trend | None = None
) -> str:
    if not problems:
        return (
            f"healthy: every layer keeps its scale within {VANISHING:g}x..{EXPLODING:g}x of the "
            f"input's and its weights' gradient within {GRAD_VANISHING:g}x..{GRAD_EXPLODING:g}x "
            "of the last layer's, with no dead, saturated or identical units"
        )
    parts = []
    for problem in problems:
        hit = [layer for layer in layers if problem in layer.labels]
        first = hit[0]
        if problem in ("vanishing", "exploding"):
            parts += _scale_words(layers, problem)
            if trend is not None and trend.sustained and trend.direction == problem:
                parts.append(_trend_words(trend))
        elif problem == "non-finite":
            forward = [la.name for la in hit if not math.isfinite(la.act_mean)]
            start = f"; the forward pass first overflows at {forward[0]!r}" if forward else ""
            parts.append(
                f"inf or nan values in {len(hit)} layer(s), from {first.name!r}{start}: the run "
                "has diverged or overflowed, and the other labels cannot be judged there"
            )
        elif problem == "dead":
            parts.append(
                f"dead units in {len(hit)} layer(s), from {first.name!r} "
                f"({first.dead_frac:.0%} of its units are 0 on every input)"
            )
        elif problem == "saturated":
            parts.append(
                f"saturated activations in {len(hit)} layer(s), from {first.name!r} "
                f"({first.saturated_frac:.0%} of its outputs at the flat ends)"
            )
        else:
            parts.append(
                f"identical units in {len(hit)} layer(s) from {first.name!r}: every unit "
                "computes the same value, so training cannot tell them apart"
            )
    return "; ".join(parts)


def _trend_words(trend: Trend) -> str:
    where = "toward the input" if trend.factor > 1 else "toward the output"
    total = max(trend.total, 1 / trend.total)
    factor = max(trend.factor, 1 / trend.factor)
    return (
        f"the gradient is {trend.direction} with depth: the weights' gradient ratio grows "
        f"{factor:.3g}x per "
        f"block {where} ({factor**2:.3g}x squared), steadily "
        f"over {trend.blocks} blocks (R^2 {trend.r2:.2f}): {_g(total)}x from end to end, "
        f"whether or not one layer crosses {GRAD_EXPLODING:g}x"
    )


def _scale_words(layers: Sequence[LayerDiagnosis], problem: str) -> list[str]:
    """The verdict's words on a vanishing or exploding scale: forward, backward, or both."""
    out = []
    forward = [
        layer
        for layer in layers
        if (layer.scale_vanishing if problem == "vanishing" else layer.scale_exploding)
    ]
    if forward:
        first, last = forward[0], layers[-1]
        grads = [layer.grad_std for layer in layers if math.isfinite(layer.grad_std)]
        grad_words = (
            f"; gradient std {_g(grads[-1])} at the last layer, {_g(grads[0])} at the first"
            if grads
            else ""
        )
        out.append(
            f"the scale is {problem} from {first.name!r} on ({_g(first.scale)}x the input's "
            f"std there, {_g(last.scale)}x at the output){grad_words}"
        )
    backward = [
        layer
        for layer in layers
        if (layer.grad_vanishing if problem == "vanishing" else layer.grad_exploding)
    ]
    if backward:
        weighted = [layer for layer in layers if math.isfinite(layer.grad_ratio)]
        extreme = (min if problem == "vanishing" else max)(backward, key=lambda la: la.grad_ratio)
        bound, limit = (
            ("under", GRAD_VANISHING) if problem == "vanishing" else ("over", GRAD_EXPLODING)
        )
        out.append(
            f"the gradient is {problem} on its way back: {len(backward)} of {len(weighted)} "
            f"weight layers get {bound} {limit:g}x the relative weight gradient of the last one, "
            f"{weighted[-1].name!r} ({_g(backward[-1].grad_ratio)}x at {backward[-1].name!r}, "
            f"{_g(extreme.grad_ratio)}x at {extreme.name!r})"
        )
    return out


def _suggestions(
    model: nn.Module,
    layers: Sequence[LayerDiagnosis],
    graph: _Graph | None,
    problems: Sequence[str],
    trend: Trend | None = None,
) -> list[str]:
    if not problems:
        return ["nothing to change: the initialization suits this model on this input"]
    out = []
    if "non-finite" in problems:
        out.append(
            "find where the inf or nan starts (the first non-finite layer: its input is finite); "
            "in training, lower the learning rate or clip the gradient norm "
            "(torch.nn.utils.clip_grad_norm_); in float16, compute in float32 or bfloat16"
        )
    if "symmetric" in problems:
        out.append(
            "draw the weights at random (normlab doctor --fix he, or init.kaiming_normal_ / "
            "xavier_normal_): constant weights give every unit the same value and gradient"
        )
    if graph is None:
        return out
    if "dead" in problems:
        out += _dead_suggestions(layers, graph)
    if {"vanishing", "exploding", "saturated"} & set(problems):
        out += _depth_suggestions(model, trend)
        out += _scale_suggestions(model, layers, graph, problems)
    return out


def _depth_suggestions(model: nn.Module, trend: Trend | None) -> list[str]:
    """For a gradient that explodes steadily with depth in a BatchNorm stack: not the init."""
    bn = any(
        isinstance(m, nn.modules.batchnorm._BatchNorm | nlnn._BatchNorm) for m in model.modules()
    )
    if trend is None or not trend.sustained or trend.factor < 1 or not bn:
        return []
    return [
        f"a deep BatchNorm stack: its gradient explodes with depth whatever the initializer "
        f"(Yang et al. 2019: the squared ratio grows by pi/(pi-1) = 1.47 per BatchNorm + ReLU "
        f"layer; measured {trend.factor**2:.3g}): add residual connections around the blocks, "
        "use fewer layers, or use LayerNorm, rather than another init"
    ]


def _dead_suggestions(layers: Sequence[LayerDiagnosis], graph: _Graph) -> list[str]:
    """For the first three dead layers: the weight layer that feeds them, and its bias."""
    modules = dict(graph.order)
    out = []
    for name in [layer.name for layer in layers if "dead" in layer.labels][:3]:
        source = graph.source(name)
        if source is None:
            continue
        w = modules[source]
        b = getattr(w, "bias", None)
        bias = (
            f"its bias has mean {float(b.detach().mean()):.3g} and min "
            f"{float(b.detach().min()):.3g}; "
            if isinstance(b, torch.Tensor)
            else ""
        )
        out.append(
            f"{name!r} is fed by {source!r}, where those units' pre-activation is below 0 "
            f"on every input: {bias}reset the biases to 0 and use He init (--fix he), or a "
            "LeakyReLU"
        )
    return out


def _init_groups(graph: _Graph) -> dict[str, list[tuple[str, float, float, str]]]:
    """The weight layers by the activation that follows them: (name, std now, wanted std, rule)."""
    groups: dict[str, list[tuple[str, float, float, str]]] = {}
    for name, m in graph.order:
        if not isinstance(m, _WEIGHT_LAYERS):
            continue
        act, slope = graph.follows(name)
        gain = init.calculate_gain(act, slope)  # type: ignore[arg-type]
        fan_in, fan_out = init._calculate_fan_in_and_fan_out(m.weight)
        now = float(m.weight.detach().std()) if m.weight.numel() > 1 else math.nan
        if act in ("relu", "leaky_relu"):
            wanted = gain / math.sqrt(fan_in)
            rule = f"He (init.kaiming_normal_, nonlinearity={act!r})"
        else:
            wanted = gain * math.sqrt(2.0 / (fan_in + fan_out))
            rule = f"Xavier (init.xavier_normal_, gain={gain:.4g})"
        groups.setdefault(act, []).append((name, now, wanted, rule))
    return groups


def _unmatched(
    groups: dict[str, list[tuple[str, float, float, str]]],
) -> dict[str, list[tuple[str, float, float, str]]]:
    """The init groups with a layer whose weight std is off the rule's by more than 20%: never
    suggest an initializer the model already has."""
    off = {
        act: [e for e in entries if not math.isclose(e[1], e[2], rel_tol=0.2)]
        for act, entries in groups.items()
    }
    return {act: entries for act, entries in off.items() if entries}


def _scale_suggestions(
    model: nn.Module,
    layers: Sequence[LayerDiagnosis],
    graph: _Graph,
    problems: Sequence[str],
) -> list[str]:
    """For a vanishing, exploding or saturated scale: sigmoids, matched inits, a norm, LSUV."""
    out = []
    groups = _init_groups(graph)
    stuck = {layer.name for layer in layers if layer.grad_vanishing}
    sigmoids = [e[0] for e in groups.get("sigmoid", []) if e[0] in stuck]
    if sigmoids:
        out.append(
            f"{len(sigmoids)} of the layers whose gradient vanishes feed a sigmoid, whose "
            "slope is at most 1/4: each sigmoid layer passes back at most a quarter of the "
            "gradient unless its weights are large, and large weights push it onto its flat "
            "ends: the usual re-initializations keep the forward scale, not the gradient. "
            "Use tanh or ReLU in the hidden layers (keep sigmoid for the output), or "
            "BatchNorm before each sigmoid"
        )
    # Scale problems the sigmoids do not explain: an initializer matched to each activation
    rest = "saturated" in problems or any(
        layer.scale_vanishing
        or layer.scale_exploding
        or ((layer.grad_exploding or layer.grad_vanishing) and layer.name not in sigmoids)
        for layer in layers
    )
    if rest:
        for act, entries in _unmatched(groups).items():
            shown = ", ".join(repr(e[0]) for e in entries[:3])
            shown += f", ... {len(entries) - 3} more" if len(entries) > 3 else ""
            out.append(
                f"{len(entries)} weight layer(s) followed by {act} ({shown}): use "
                f"{entries[0][3]}; their weight std is {_span([e[1] for e in entries])}, "
                f"that init gives {_span([e[2] for e in entries])}"
            )
    if not any(_is_norm(m) for m in model.modules()):
        conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in dict(graph.order).values())
        where = "BatchNorm2d after each conv" if conv else "BatchNorm1d after each Linear"
        out.append(
            f"add a normalization layer: {where}, before its activation (LayerNorm for "
            "sequences or small batches), so each layer's output is rescaled whatever the init"
        )
    if rest:
        out.append("or re-initialize data-driven: normlab doctor ... --fix lsuv (init.lsuv_)")
    return out


# -- the cure ----------------------------------------------------------------------------------


def fix(
    model: nn.Module,
    method: str,
    batch: Input,
    *,
    generator: torch.Generator | None = None,
    tied: bool = False,
) -> FixReport:
    r"""Re-initialize every ``Linear`` and ``Conv1d/2d/3d`` of ``model`` in place; biases to 0.

    The gain of each layer is that of the activation that follows it in the forward pass
    (:func:`normlab.init.calculate_gain`; linear when none does):

    - ``he``: ``kaiming_normal_`` (fan_in), :math:`\sigma = \text{gain} / \sqrt{\text{fan\_in}}`;
    - ``xavier``: ``xavier_normal_``, :math:`\sigma = \text{gain}\sqrt{2/(\text{fan\_in} +
      \text{fan\_out})}`;
    - ``orthogonal``: ``orthogonal_`` scaled by the gain;
    - ``lsuv``: :func:`normlab.init.lsuv_` on ``batch`` (the gain comes from the data).

    Other weight layers (embeddings, LSTMs, attention, Hugging Face's ``Conv1D``, whose weight is
    stored (in, out)) and, unless ``tied``, a layer whose weight is tied to another parameter (a
    language model's head and token embedding) are left alone and listed in ``skipped``.

    Args:
        model: the network; modified in place.
        method: one of :data:`FIX_METHODS`.
        batch: an input batch, to find the forward order (and for ``lsuv``).
        generator: the generator the weights are drawn from.
        tied: re-initialize tied weights too (which re-initializes what they are tied to).

    Examples::

        >>> from normlab import zoo
        >>> net = zoo.build("vanishing-tanh")
        >>> fix(net, "xavier", torch.randn(8, 32)).follows[:2]
        ['tanh', 'tanh']
    """
    if method not in FIX_METHODS:
        raise ValueError(f"method {method!r} not supported, use one of {FIX_METHODS}")
    graph = _trace(model, batch)
    skipped = _skipped(graph, _tied(model), tied)
    todo = [
        (n, m) for n, m in graph.order if isinstance(m, _WEIGHT_LAYERS) and n not in dict(skipped)
    ]
    _check_fix(method, batch, todo, skipped)  # before anything changes
    names, follows, gains = [], [], []
    for name, m in todo:
        act, slope = graph.follows(name)
        gain = init.calculate_gain(act, slope)  # type: ignore[arg-type]
        if method == "he":
            init.kaiming_normal_(m.weight, a=slope or 0.0, nonlinearity=act, generator=generator)  # type: ignore[arg-type]
        elif method == "xavier":
            init.xavier_normal_(m.weight, gain=gain, generator=generator)
        elif method == "orthogonal":
            init.orthogonal_(m.weight, gain=gain, generator=generator)
        if m.bias is not None:
            init.zeros_(m.bias)
        names.append(name)
        follows.append(act)
        gains.append(math.nan if method == "lsuv" else gain)  # LSUV takes its scale from data
    lsuv = None
    if method == "lsuv":
        lsuv = init.lsuv_(model, cast(torch.Tensor, batch), generator=generator)
    return FixReport(method, names, follows, gains, lsuv, skipped)


def _check_fix(
    method: str, batch: Input, todo: Sequence[tuple[str, nn.Module]], skipped: list[tuple[str, str]]
) -> None:
    """Refuse a fix that would do nothing, or (LSUV) more than it may."""
    first = sorted(skipped, key=lambda s: "tied" not in s[1])[:3]  # the tied ones first
    left = "; ".join(f"{n}: {why}" for n, why in first) + ", ..." * (len(skipped) > 3)
    if not todo:
        raise ValueError(
            "the model has no Linear or Conv1d/2d/3d layer to re-initialize that its forward "
            f"pass calls{' (left: ' + left + ')' if skipped else ''}"
        )
    tied_left = [n for n, why in skipped if "tied" in why]
    if method == "lsuv" and tied_left:
        raise ValueError(
            f"lsuv rescales every Linear and Conv, and {tied_left[0]!r} shares its weight: "
            "pass tied=True (--fix-tied) to re-initialize tied weights, or use he or xavier"
        )
    if method == "lsuv" and not isinstance(batch, torch.Tensor):
        raise ValueError(f"lsuv feeds the model one tensor, and its input is {_shape(batch)}")


def _tied(model: nn.Module) -> dict[int, list[str]]:
    """Parameters the model holds under two or more names (a tied embedding and head)."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return {k: v for k, v in names.items() if len(v) > 1}


def _skipped(graph: _Graph, shared: dict[int, list[str]], tied: bool) -> list[tuple[str, str]]:
    """The weight layers :func:`fix` leaves alone, each with the reason."""
    out = []
    for name, m in graph.order:
        if not _has_weight(m):
            continue
        if not isinstance(m, _WEIGHT_LAYERS):
            out.append(
                (name, f"{type(m).__name__} layer: only Linear and Conv1d/2d/3d are re-initialized")
            )
            continue
        others = [n for n in shared.get(id(m.weight), []) if not n.startswith(f"{name}.")]
        if others and not tied:
            out.append((name, f"its weight is tied to {others[0]!r}: pass tied=True (--fix-tied)"))
    return out


# -- the whole visit ----------------------------------------------------------------------------


@dataclass
class Examination:
    """What :func:`examine` found: the model as given and, when a fix was asked for, what the
    fix did and the model after it."""

    before: Diagnosis
    fix: FixReport | None = None
    after: Diagnosis | None = None
    trial: Trial | None = None  # the short training comparison; None without a fix

    def to_dict(self) -> dict[str, Any]:
        """``before``'s dict, plus ``fix`` (the report, with ``after`` and ``trial`` inside)."""
        out = self.before.to_dict()
        if self.fix is not None and self.after is not None:
            trial = None if self.trial is None else self.trial.to_dict()
            out["fix"] = {**self.fix.to_dict(), "after": self.after.to_dict(), "trial": trial}
        return out


_fix = fix  # examine's argument of that name hides the function


def examine(
    model: nn.Module,
    batches: Input | Sequence[Input],
    fix: str | None = None,
    *,
    generator: torch.Generator | None = None,
    output: str | None = None,
    tied: bool = False,
    trial_steps: int = TRIAL_STEPS,
) -> Examination:
    """Diagnose ``model``; with ``fix``, re-initialize it by that method and diagnose it again.

    What ``normlab doctor [--fix METHOD]`` does: :func:`diagnose`, then :func:`fix` on the first
    batch and :func:`diagnose` once more, all drawing from ``generator`` in that order, so one
    seed gives one report. An unknown method is refused before anything runs.

    Args:
        model: the network; re-initialized in place when ``fix`` is given.
        batches: one input batch, or several (one step each), for both diagnoses.
        fix: one of :data:`FIX_METHODS`, or ``None`` to diagnose only.
        generator: draws the readouts (and the new weights).
        output: the output field to read, as for :func:`diagnose`.
        tied: :func:`fix` re-initializes tied weights too.
        trial_steps: after a fix, train copies of the model as given and fixed this many steps
            (:func:`trial`), so that no fix is called a cure unless it measured one; 0: skip.

    Returns:
        an :class:`Examination` (``fix`` and ``after`` are ``None`` without a fix).

    Raises:
        ModelInputError, ModelOutputError, CannotDiagnose: as :func:`diagnose`.
        ValueError: an unknown method, a model with no layer to re-initialize, or LSUV that
            could not rescale a layer.

    Examples::

        >>> from normlab import zoo
        >>> net = zoo.build("vanishing-tanh")
        >>> exam = examine(net, torch.randn(64, 32), fix="xavier")
        >>> exam.before.problems, exam.after.problems
        (['vanishing'], [])
    """
    if fix is not None and fix not in FIX_METHODS:
        raise ValueError(f"method {fix!r} not supported, use one of {FIX_METHODS}")
    before = diagnose(model, batches, generator=generator, output=output)
    if fix is None:
        return Examination(before)
    xs = _steps(batches)
    given = copy.deepcopy(model) if trial_steps > 0 else None
    report = _fix(model, fix, xs[0], generator=generator, tied=tied)
    after = diagnose(model, batches, generator=generator, output=output)
    check = None
    if given is not None:
        check = trial(given, model, xs, steps=trial_steps, generator=generator, output=output)
    return Examination(before, report, after, check)
