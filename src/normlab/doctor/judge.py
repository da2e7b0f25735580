"""The one judgement the doctor and :func:`normlab.watch` share: each layer against what its
architecture predicts (:mod:`normlab.doctor.expect`), the residual stream, the depth trend, and
the problems in the order of cause."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from normlab.doctor import expect
from normlab.doctor.constants import SEVERITY
from normlab.doctor.expect import Stream
from normlab.doctor.graph import Graph
from normlab.doctor.layers import _labels, _layer_diagnoses, _reference
from normlab.doctor.results import LayerDiagnosis, Trend
from normlab.doctor.running import Input, _main
from normlab.doctor.trend import _mark_trend, _trend
from normlab.probe import ActivationStats, GradientStats


@dataclass
class Judgement:
    """The labelled layers, the stream and trend they were judged with, and the problems."""

    layers: list[LayerDiagnosis]
    stream: Stream | None
    trend: Trend | None
    problems: list[str]
    input_std: float
    note: str  # how the input's scale was read ("" for a float input)


def judge(
    model: nn.Module,
    inputs: Sequence[Input],
    acts: ActivationStats,
    grads: GradientStats,
    ratios: dict[str, float],
    graph: Graph,
) -> Judgement:
    """Label every probed layer of ``model`` from its measurements (one or more steps)."""
    std, rms, note = _reference(inputs)
    tokens = not all(_main(x).is_floating_point() for x in inputs)
    roles = graph.memo.get(("roles", tokens))
    if roles is None:  # a watch judges every record with the graph it traced once
        roles = graph.memo[("roles", tokens)] = expect.roles(graph, tokens)
    scaled = graph.scaled()
    layers = _layer_diagnoses(model, acts, grads, ratios, (std, rms), scaled, graph, roles)
    stream = expect.stream(graph, {la.name: la.act_std for la in layers})
    if stream is not None and stream.label is not None:
        _mark_stream(layers, stream)
    trend = _trend(layers)
    if trend is not None and trend.sustained:
        _mark_trend(layers, trend)
    return Judgement(layers, stream, trend, problems(layers), std, note)


def _mark_stream(layers: Sequence[LayerDiagnosis], stream: Stream) -> None:
    """Label the layers reading the stream from the add where it breaks its design."""
    start = stream.flagged_from()
    flagged = set(stream.readers[start:]) if start is not None else set()
    for layer in layers:
        if layer.name in flagged and layer.judged:
            layer.stream = stream.label
            layer.labels = _labels(layer)


def _first_forward(layers: Sequence[LayerDiagnosis], direction: str) -> int:
    for i, layer in enumerate(layers):
        if layer.segment == direction or (
            layer.scale_exploding if direction == "exploding" else layer.scale_vanishing
        ):
            return i
    return len(layers)


def problems(layers: Sequence[LayerDiagnosis]) -> list[str]:
    """The labels other than ok that occur, in the order of cause: inf or nan; the forward
    scale's drift, in the order it appears along the forward pass (an exploding forward pass
    is what makes the backward one explode); dead units before the identical units they make;
    saturation; then what only the backward pass or the depth shows."""
    order: list[str] = []
    if any("non-finite" in la.labels for la in layers):
        order.append("non-finite")
    for layer in layers:
        for direction in ("exploding", "vanishing"):
            forward = layer.segment == direction or (
                layer.scale_exploding if direction == "exploding" else layer.scale_vanishing
            )
            if forward and direction in layer.labels and direction not in order:
                order.append(direction)
    if "vanishing" in order:  # units switched off or pinned flat make the scale vanish after
        start = _first_forward(layers, "vanishing")
        for label in ("saturated", "dead"):
            hit = [i for i, la in enumerate(layers) if label in la.labels]
            if hit and hit[0] <= start + 2 and label not in order:
                order.insert(order.index("vanishing"), label)
    for label in ("dead", "symmetric", "saturated", *SEVERITY):
        if label not in order and any(label in la.labels for la in layers):
            order.append(label)
    return order
