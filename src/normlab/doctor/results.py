"""What the doctor finds, as dataclasses: each layer's numbers and labels, the depth trend,
the diagnosis, and what a fix did."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from normlab import init
from normlab.doctor.constants import (
    DEAD_FRAC,
    EXPLODING,
    GRAD_EXPLODING,
    GRAD_VANISHING,
    SATURATED_FRAC,
    SYMMETRIC_SPREAD,
    VANISHING,
)
from normlab.doctor.expect import Stream
from normlab.doctor.running import module_path
from normlab.probe import finite_or_none

TREND_BLOCKS, TREND_R2, TREND_TOTAL = 6, 0.9, 1e2
"""A sustained gradient trend: over at least this many blocks, a fit of log rho over depth this
good (R^2), and this much growth from one end to the other."""
TREND_MARK = 10.0
"""A sustained trend labels the blocks whose ratio it puts this many times (or 1/this) from the
output end's."""


def _num(x: float) -> str:
    """A number for the words: 2 digits, or '-' for nan (a std of 0 over a reference of 0)."""
    return f"{x:.2g}" if not math.isnan(x) else "-"


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
    unit_spread: float  # max |y_u - y_0| / max |y - mean|; 0: every unit identical
    grad_std: float  # std of the loss gradient w.r.t. the layer's output
    grad_ratio: float  # rho: relative weight gradient over the last weight layer's; nan: none
    scaled_by: str | None = None  # the small parameter scaling its branch on purpose, if any
    trend: str | None = None  # "exploding"/"vanishing": part of a sustained gradient trend
    branch: float = math.nan  # a residual branch end: act_std over the stream's; nan: none
    finite: bool = True  # every activation and gradient element seen was finite
    role: str = "layer"  # how it is judged (normlab.doctor.expect.Role.kind)
    anchor: str | None = ""  # "" the input, a layer whose output fixes the scale, None: none
    reference: float = math.nan  # the std its scale is judged against (its anchor's)
    eps: float = math.nan  # role "feeds-norm", or a layer reaching the output only through norms
    norm_input: float = math.nan  # the latter: the least std at those norms' inputs
    gain: float = math.nan  # its output's RMS over its input's (its first producer's output)
    predicted_gain: float = math.nan  # a weight layer's, from its weights (expect, variance)
    segment: str | None = None  # "exploding"/"vanishing": its segment drifts so (the cause)
    stream: str | None = None  # "exploding": it reads a residual stream that breaks its design
    grad_judged: bool = True  # False: its gradient ratio mirrors a forward drift (not judged)
    params: int = 0  # elements of its own weights (2+ dimensions): blocks alike have alike
    on_frac: float = math.nan  # fraction of units above 0 on the whole batch (a dead's mirror)
    unit_rms: float = math.nan  # one output unit: its RMS in expectation over its row's direction

    @property
    def judged(self) -> bool:
        """Judged at all: not zero by design (an init chose 0: a bias table, a zero last layer)."""
        return self.role != "zero"

    @property
    def scale_vanishing(self) -> bool:
        """The forward scale fell below :data:`VANISHING` times its anchor's (or to 0); a layer
        that only feeds norms, or reaches the output only through norms, when they pass on under
        that (:attr:`norm_passes`); never a branch's (the stream carries the signal past it),
        one scaled on purpose, or a frozen one's (run under ``torch.no_grad``: not trained)."""
        if self.scaled_by is not None or self.role in ("branch", "embedding", "zero", "frozen"):
            return False
        if self.role == "feeds-norm" or math.isfinite(self.norm_input):
            return self.norm_passes < VANISHING or self.act_std == 0
        return self.scale < VANISHING or (self.act_std == 0 and not self.unit_rms > 0)

    @property
    def norm_passes(self) -> float:
        r"""What the norms after it pass on of unit scale, :math:`s / \sqrt{s^2 + \epsilon}`,
        with :math:`s` its own std (role ``feeds-norm``) or the least std at the inputs of the
        norms its signal crosses on every path to the output (:attr:`norm_input`); nan for a
        layer with a path past no norm."""
        s = self.norm_input if math.isfinite(self.norm_input) else self.act_std
        return s / math.sqrt(s**2 + self.eps)

    @property
    def scale_exploding(self) -> bool:
        """The forward scale rose above :data:`EXPLODING` times its anchor's (or to inf); a
        layer feeding norms only by inf (the norm divides its scale out)."""
        if math.isinf(self.act_std):
            return self.judged
        return self.role in ("layer", "branch", "norm") and self.scale > EXPLODING

    @property
    def grad_vanishing(self) -> bool:
        """The weights' relative gradient is below :data:`GRAD_VANISHING` of its reference's
        as part of a sustained depth trend, not because an intentional branch scaling
        multiplies it, nor as the mirror of a forward drift; never an embedding's (only the
        batch's rows get a gradient, so its ratio shrinks with the vocabulary, by design).

        One layer's own ratio is set by its role as much as by the depth: the query and key
        of an attention whose softmax is near uniform at init, a convolution whose few
        weights are shared over every position, a gate; what the theory calls a vanishing
        gradient is the product of the layers' Jacobians, a fall along the depth, which the
        trend (:class:`Trend`) measures."""
        return (
            self.grad_ratio < GRAD_VANISHING
            and self.trend == "vanishing"
            and self.scaled_by is None
            and self.grad_judged
            and self.role not in ("zero", "embedding")
        )

    @property
    def grad_exploding(self) -> bool:
        """Above :data:`GRAD_EXPLODING` of its reference's as part of a sustained depth trend
        (see :attr:`grad_vanishing`), not as the mirror of a forward drift."""
        return (
            self.grad_ratio > GRAD_EXPLODING
            and self.trend == "exploding"
            and self.grad_judged
            and self.judged
        )

    @property
    def dead_beyond_chance(self) -> float:
        """The fraction of units 0 on the whole batch beyond what chance leaves off: less the
        fraction on on all of it, their mirror. A zero-mean pre-activation is off on every
        input as often as it is on on every input (``w`` and ``-w`` are drawn alike); where the
        batch barely moves a unit (a squeeze-excitation after global pooling of noise images,
        every image pooled to nearly one vector), about half are off and half on by the draw
        alone, and none is dead; a bias of -5 turns units off with none on."""
        on = self.on_frac if math.isfinite(self.on_frac) else 0.0
        return self.dead_frac - on

    @property
    def dead(self) -> bool:
        return self.dead_beyond_chance >= DEAD_FRAC and self.judged

    @property
    def saturated(self) -> bool:
        return self.saturated_frac >= SATURATED_FRAC and self.judged

    @property
    def symmetric(self) -> bool:
        return self.unit_spread <= SYMMETRIC_SPREAD and self.judged

    def _against(self) -> str:
        if self.role == "norm":
            return "unit scale (a norm's output)"
        if self.anchor == "":
            return "the input's"
        return f"{module_path(self.anchor or '')}'s (its anchor)"

    def criteria(self) -> list[str]:
        """Which rule gave each of the layer's labels, with its numbers."""
        if not self.finite:
            return ["non-finite: an activation or gradient element is inf or nan"]
        out = []
        if self.scale_vanishing and self.role == "feeds-norm":
            out.append(
                f"vanishing: std {self.act_std:.2g} against the eps {self.eps:.2g} of the norm it "
                f"feeds, which passes on {self.norm_passes:.2g}x unit scale < {VANISHING:g}x"
            )
        elif self.scale_vanishing and math.isfinite(self.norm_input):
            out.append(
                f"vanishing: it reaches the output only through norms, whose input std "
                f"{self.norm_input:.2g} against their eps {self.eps:.2g} passes on "
                f"{self.norm_passes:.2g}x unit scale < {VANISHING:g}x"
            )
        elif self.scale_vanishing:
            out.append(f"vanishing: {_num(self.scale)}x {self._against()} < {VANISHING:g}x")
        if self.scale_exploding:
            out.append(f"exploding: {_num(self.scale)}x {self._against()} > {EXPLODING:g}x")
        if self.segment is not None and not (self.scale_vanishing or self.scale_exploding):
            out.append(
                f"{self.segment}: in a segment whose scale drifts past the bound, where this "
                f"layer carries the drift (gain {_num(self.gain)}x per layer)"
            )
        if self.grad_vanishing:
            out.append(f"vanishing: rho {self.grad_ratio:.2g} < {GRAD_VANISHING:g}")
        if self.grad_exploding:
            out.append(f"exploding: rho {self.grad_ratio:.2g} > {GRAD_EXPLODING:g}")
        if self.trend is not None:
            out.append(
                f"{self.trend}: 10x or more along the depth trend (rho {self.grad_ratio:.2g})"
            )
        if self.stream is not None:
            out.append(f"{self.stream}: it reads a residual stream that breaks its design")
        if self.dead:
            mirror = (
                f", {self.on_frac:.0%} above 0 (their mirror): {self.dead_beyond_chance:.0%} "
                "beyond chance"
                if self.on_frac > 0
                else ""
            )
            out.append(f"dead: {self.dead_frac:.0%} of units 0{mirror} >= {DEAD_FRAC:.0%}")
        if self.saturated:
            out.append(f"saturated: {self.saturated_frac:.0%} >= {SATURATED_FRAC:.0%}")
        if self.symmetric:
            out.append(f"symmetric: unit spread {self.unit_spread:.2g} <= {SYMMETRIC_SPREAD:g}")
        if self.scaled_by is not None:
            out.append(f"not judged by scale: its branch is scaled by {self.scaled_by!r}")
        if self.role == "zero":
            out.append("not judged: its parameters are all 0, by design")
        return out

    def to_dict(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out: dict[str, Any] = finite_or_none({**fields, "labels": list(self.labels)})
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
    input_std: float  # the input's std (1 for token ids: no scale of their own)
    steps: int
    notes: list[str] = field(default_factory=list)  # what the doctor read differently, and why
    trend: Trend | None = None  # the gradient ratio over depth; None: too few weight layers
    stream: Stream | None = None  # the residual stream over depth; None: fewer than 3 adds

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
        out["stream"] = self.stream and finite_or_none(
            {
                **dataclasses.asdict(self.stream),
                "label": self.stream.label,
            }
        )
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
