"""Each probed layer's numbers, read from the measurements, and the labels they give; the
reference scale they are compared with."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from normlab import theory
from normlab.doctor.constants import EXPLODING, VANISHING
from normlab.doctor.expect import Role
from normlab.doctor.graph import Graph
from normlab.doctor.kinds import (
    _CHANNEL_FIRST,
    _SIGMOID_LIKE,
    _TANH_LIKE,
    _has_weight,
    _is_elementwise,
    _is_weight,
)
from normlab.doctor.measure import _max, _mean
from normlab.doctor.results import LayerDiagnosis
from normlab.doctor.running import Input, _main
from normlab.probe import ActivationStats, GradientStats, own_parameters


def _reference(inputs: Sequence[Input]) -> tuple[float, float, str]:
    """The input's std and RMS, the scale of the layers anchored at it; for token ids (or
    another input with no scale) 1 and 1, with a note: the embedding then starts the scale."""
    xs = [_main(x) for x in inputs]
    if all(x.is_floating_point() for x in xs):
        std = _input_std(inputs)
        rms = sum(float(x.detach().double().square().mean().sqrt()) for x in xs) / len(xs)
        return std, rms if rms > 0 and math.isfinite(rms) else 1.0, ""
    return (
        1.0,
        1.0,
        (
            f"the input ({xs[0].dtype}) has no scale of its own: the embedding's output is where "
            "the scale starts, and the layers after it are judged against it or the norms after it"
        ),
    )


def _layer_diagnoses(
    model: nn.Module,
    acts: ActivationStats,
    grad_stats: GradientStats,
    grad_ratio: dict[str, float],
    ref: tuple[float, float],
    scaled: dict[str, str],
    graph: Graph | None = None,
    roles: dict[str, Role] | None = None,
) -> list[LayerDiagnosis]:
    """Each probed layer's numbers, and its labels.

    ``ref`` is the input's (std, RMS); ``graph`` and ``roles`` (:func:`expect.roles`) say what
    each layer reads and how it is judged (without them every layer is judged against the
    input, as a plain stack).
    """
    modules = dict(model.named_modules())
    grad_std = {name: _mean(grad_stats.grad_std, j) for j, name in enumerate(grad_stats.layers)}
    branches = graph.branches() if graph is not None else {}
    producers = graph.producers if graph is not None else {}
    layers: list[LayerDiagnosis] = []
    unit_first = False
    for j, (name, kind) in enumerate(zip(acts.layers, acts.kinds, strict=True)):
        m = modules[name]
        if not _is_elementwise(m):
            unit_first = isinstance(m, _CHANNEL_FIRST)
        # with a trace, a layer it did not see (a block stochastic depth skipped in its pass)
        # has no known anchor, so its scale is not judged; without one, a plain stack's
        role = (roles or {}).get(name) or Role("layer", None if roles else "")
        std, mean = _mean(acts.std, j), _mean(acts.mean, j)
        layer = LayerDiagnosis(
            name=name,
            kind=kind,
            labels=[],
            act_mean=mean,
            act_std=std,
            scale=math.nan,
            dead_frac=_mean(acts.extra[f"dead_{_unit_dim(acts, j, unit_first)}"], j),
            on_frac=_mean(acts.extra[f"on_{_unit_dim(acts, j, unit_first)}"], j),
            saturated_frac=_saturated(m, acts, j),
            unit_spread=_max(acts.extra[f"spread_{_unit_dim(acts, j, unit_first)}"], j),
            grad_std=grad_std.get(name, math.nan),
            grad_ratio=grad_ratio.get(name, math.nan),
            scaled_by=scaled.get(name),
            branch=std / branches.get(name, math.nan),
            finite=_finite(acts, j) and _finite_gradient(grad_stats, name),
            role=role.kind,
            anchor=role.anchor,
            eps=role.eps,
            norm_input=_norm_input(role, graph),
            params=sum(p.numel() for p in own_parameters(m) if _is_weight(m, p)),
        )
        layers.append(layer)
    _scales(layers, ref, producers)
    if graph is not None:
        _one_unit_scales(layers, modules, graph)
        _predicted_gains(layers, modules, graph)
    _segments(layers, modules)
    _cause_first(layers)
    for layer in layers:
        layer.labels = _labels(layer)
    return layers


def _norm_input(role: Role, graph: Graph | None) -> float:
    """The least std at the inputs of the norms a layer's signal crosses on every path to the
    output (:attr:`expect.Role.norms`), as the trace measured it; nan without such norms."""
    if graph is None or not role.norms:
        return math.nan
    stds = [graph.norm_inputs.get(n, math.nan) for n in role.norms]
    return min(stds) if all(math.isfinite(s) for s in stds) else math.nan


def _unit_dim(acts: ActivationStats, j: int, unit_first: bool) -> str:
    """Which per-unit statistic holds layer ``j``'s units: ``first`` (channels) or ``last``.
    The *_last statistics skip 2-D outputs (nan), whose units are dim 1 = the last dim."""
    two_d = all(math.isnan(step[j]) for step in acts.extra["dead_last"])
    return "first" if unit_first or two_d else "last"


def _saturated(m: nn.Module, acts: ActivationStats, j: int) -> float:
    if isinstance(m, _TANH_LIKE):
        return _mean(acts.saturated_frac, j)
    if isinstance(m, _SIGMOID_LIKE):
        return _mean(acts.extra["sigmoid_saturated"], j)
    return math.nan


def _rms(layer: LayerDiagnosis) -> float:
    return math.sqrt(layer.act_std**2 + layer.act_mean**2)


def _scales(
    layers: list[LayerDiagnosis], ref: tuple[float, float], producers: dict[str, list[str]]
) -> None:
    """Each layer's reference (its anchor's std), its scale against it, and its RMS gain
    over its input (its first producer's output, or the model's input)."""
    by_name = {la.name: la for la in layers}
    for layer in layers:
        if layer.role == "norm":
            layer.reference = 1.0  # a norm outputs unit scale (times its affine weight)
        elif layer.anchor == "":
            layer.reference = ref[0]
        elif layer.anchor in by_name:
            layer.reference = by_name[layer.anchor].act_std
        layer.scale = layer.act_std / layer.reference if layer.reference > 0 else math.nan
        before = [by_name[p] for p in producers.get(layer.name, []) if p in by_name]
        rms_in = _rms(before[0]) if before else ref[1]
        layer.gain = _rms(layer) / rms_in if rms_in > 0 else math.nan


def _one_unit_scales(
    layers: list[LayerDiagnosis], modules: dict[str, nn.Module], graph: Graph
) -> None:
    r"""The scale of a layer of one output unit, as the variance argument measures it.

    The variance argument (LeCun et al. 1998; He et al. 2015) predicts the second moment
    :math:`q = n_\text{in} \sigma_W^2 \mathbb{E}[x^2]` of a unit's pre-activation over the
    draw of its weights, the input-independent part (a learned query's offset) included, as in
    its anchor's std (a norm's output: unit second moment over its units). The std over every
    element of a layer of many units is that average over units (one draw each), as its
    anchor's is; of one unit it holds no average, only the unit's spread between examples,
    which a learned query nearly the same for every input makes small whatever the weights (a
    one-unit readout of such a query reads 0.002x its norm, the same head with 8 units
    0.09x). Its scale is then :math:`\sqrt{\lVert w \rVert^2 \mathbb{E}[x^2]}`, the
    RMS its weight row gives its input in expectation over the row's direction, against its
    anchor's: the one draw's alignment with the input is chance, the row's norm and the
    input's scale are what the init and the layers before made. A layer that returns such a
    layer's output as it is (a model whose output is its one-unit head's) is measured so too."""
    for layer in layers:
        of = [n for n in [layer.name, *graph.aliases.get(layer.name, [])] if n in graph.unit_inputs]
        second = graph.unit_inputs[of[0]] if of else math.nan  # E[x^2] of its input
        w = getattr(modules[of[0]], "weight", None) if of else None
        if not isinstance(w, torch.Tensor) or not math.isfinite(second):
            continue
        layer.unit_rms = math.sqrt(float(w.detach().double().square().sum()) * second)
        if layer.reference > 0:
            layer.scale = layer.unit_rms / layer.reference


def _predicted_gains(
    layers: list[LayerDiagnosis], modules: dict[str, nn.Module], graph: Graph
) -> None:
    r"""Each weight layer's RMS gain, with the activation after it, as the variance argument
    predicts from its weights (zero-mean weights, no bias): its pre-activation has second
    moment :math:`q = n_\text{in} \sigma_W^2 \mathbb{E}[x^2]`, and the gain is
    :math:`\sqrt{\mathbb{E}[\phi(\sqrt q z)^2] / \mathbb{E}[x^2]}` for
    :math:`z \sim \mathcal{N}(0, 1)` (:func:`normlab.theory.gauss_expect`). Hugging Face's
    ``Conv1D`` keeps its weight as (in, out), the transpose of ``nn.Linear``'s."""
    for layer in layers:
        m = modules[layer.name]
        w = getattr(m, "weight", None)
        if not isinstance(w, torch.Tensor) or w.dim() < 2 or w.numel() < 2:
            continue
        act, _ = graph.follows(layer.name)
        if act not in theory.ACTIVATIONS or not layer.gain > 0:
            continue
        second = (layer.act_std**2 + layer.act_mean**2) / layer.gain**2  # E[x^2] of its input
        n_in = w.shape[0] if type(m).__name__ == "Conv1D" else w[0].numel()  # HF's: (in, out)
        q = n_in * float(w.detach().float().var()) * second  # no float64 copy: ~1e-7
        phi, _ = theory.activation_pair(act)
        out = theory.gauss_expect(lambda u, phi=phi: phi(u) ** 2, q)  # type: ignore[misc]
        layer.predicted_gain = math.sqrt(out / second) if second > 0 else math.nan


def _segments(layers: list[LayerDiagnosis], modules: dict[str, nn.Module]) -> None:
    r"""Label a drifting segment from its cause on: among the layers sharing an anchor, where
    one crosses a scale bound, every layer from the first weight layer whose gain (with the
    elementwise layers after it, to the next weight layer) would compound to the bound over
    the segment's :math:`n` weight layers, :math:`g \ge 100^{1/n}` (or :math:`\le 100^{-1/n}`)."""
    groups: dict[str | None, list[LayerDiagnosis]] = {}
    for layer in layers:
        if layer.role in ("layer", "branch") and layer.finite:
            groups.setdefault(layer.anchor, []).append(layer)
    for group in groups.values():
        crossed = [la for la in group if la.scale_exploding or la.scale_vanishing]
        if not crossed:
            continue
        direction = "exploding" if crossed[0].scale_exploding else "vanishing"
        weights = [i for i, la in enumerate(group) if _has_weight(modules[la.name])]
        if not weights:
            continue
        gains = _block_gains(group, weights)
        step = (EXPLODING if direction == "exploding" else 1 / VANISHING) ** (1 / len(weights))
        causes = [
            i
            for i, g in zip(weights, gains, strict=True)
            if (g >= step if direction == "exploding" else 0 < g <= 1 / step)
        ]
        if causes:
            for la in group[causes[0] :]:
                if direction == "exploding" or la.role == "layer":
                    la.segment = direction


def _block_gains(group: list[LayerDiagnosis], weights: list[int]) -> list[float]:
    """Each weight layer's RMS gain with the elementwise layers after it: the RMS just before
    the next weight layer (or at the segment's end) over the weight layer's input RMS."""
    gains = []
    for k, i in enumerate(weights):
        end = weights[k + 1] - 1 if k + 1 < len(weights) else len(group) - 1
        rms_in = _rms(group[i]) / group[i].gain if group[i].gain > 0 else math.nan
        gains.append(_rms(group[end]) / rms_in if rms_in > 0 else math.nan)
        group[i].gain = gains[-1]
    return gains


def _cause_first(layers: list[LayerDiagnosis]) -> None:
    """A gradient ratio that mirrors a forward drift is its symptom, not a second problem:
    with the scale exploding forward, the last weight layer's input (so its gradient) is
    the largest, and every earlier ratio looks vanishing against it (and the reverse)."""
    forward = (
        {la.segment for la in layers}
        | {"exploding" for la in layers if la.scale_exploding}
        | {"vanishing" for la in layers if la.scale_vanishing}
    )
    for layer in layers:
        if ("exploding" in forward and layer.grad_ratio < 1) or (
            "vanishing" in forward and layer.grad_ratio > 1
        ):
            layer.grad_judged = False


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
    vanishing = layer.scale_vanishing or layer.grad_vanishing
    if vanishing or "vanishing" in (layer.trend, layer.segment):
        labels.append("vanishing")
    exploding = layer.scale_exploding or layer.grad_exploding or layer.stream == "exploding"
    if exploding or "exploding" in (layer.trend, layer.segment):
        labels.append("exploding")
    if layer.dead:
        labels.append("dead")
    if layer.saturated:
        labels.append("saturated")
    if layer.symmetric:
        labels.append("symmetric")
    return labels or ["ok"]
