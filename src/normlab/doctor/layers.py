"""Each probed layer's numbers, read from the measurements, and the labels they give; the
reference scale they are compared with."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from normlab.doctor.constants import DEAD_FRAC, SATURATED_FRAC, SYMMETRIC_SPREAD
from normlab.doctor.kinds import _CHANNEL_FIRST, _SIGMOID_LIKE, _TANH_LIKE, _is_elementwise
from normlab.doctor.measure import _max, _mean
from normlab.doctor.results import LayerDiagnosis
from normlab.doctor.running import Input, _main
from normlab.probe import ActivationStats, GradientStats


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
