"""The doctor's words: the verdict, the notes on branches scaled on purpose, and the
suggestions (which initializer, which norm, what else to change)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

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
from normlab.doctor.expect import AMPLIFICATION, STREAM_GROWTH, Stream
from normlab.doctor.graph import _OUTPUT, BRANCH_SCALE, Graph
from normlab.doctor.kinds import _BATCH_NORMS, _CONVS, _WEIGHT_LAYERS, _is_norm, fans
from normlab.doctor.results import LayerDiagnosis, Trend
from normlab.doctor.running import module_path


def _scaled_notes(scaled: dict[str, str]) -> list[str]:
    """One note per intentional branch scaling: what it scales, and why that is no problem."""
    by_site: dict[str, list[str]] = {}
    for layer, site in scaled.items():
        by_site.setdefault(site, []).append(layer)
    return [
        f"{module_path(site)} (|value| <= {BRANCH_SCALE:g}) scales a residual branch on "
        f"purpose (layer scale, ReZero, SkipInit): its {len(layers)} layer(s) "
        f"({', '.join(map(module_path, layers[:3]))}{', ...' if len(layers) > 3 else ''}) "
        "start small and slow, and are not judged by scale"
        for site, layers in by_site.items()
    ]


def _g(x: float) -> str:
    return f"{x:.2g}" if math.isfinite(x) else str(x)


def _span(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "-"
    lo, hi = _g(min(finite)), _g(max(finite))
    return lo if lo == hi else f"{lo}..{hi}"


def _sure(decades: float) -> str:
    """How sure a label is, by how far past its bound the number lies (in decades)."""
    if not math.isfinite(decades) or decades >= 1:
        return "certain"
    return "likely" if decades >= 0.3 else "borderline"


def _verdict(
    layers: Sequence[LayerDiagnosis],
    problems: Sequence[str],
    trend: Trend | None = None,
    stream: Stream | None = None,
) -> str:
    """One sentence per problem, in the order of cause (:func:`~normlab.doctor.judge.problems`),
    each naming its criterion and how sure it is."""
    if not problems:
        return (
            "healthy: every layer keeps the scale its architecture predicts (within "
            f"{VANISHING:g}x..{EXPLODING:g}x of its anchor: the input, a norm or an embedding), "
            f"its weights' gradient within {GRAD_VANISHING:g}x..{GRAD_EXPLODING:g}x of its "
            "like in the last block, the residual stream within its design, with no dead, "
            "saturated or identical units"
        )
    parts = []
    for problem in problems:
        hit = [layer for layer in layers if problem in layer.labels]
        if problem in ("vanishing", "exploding"):
            parts += _scale_words(layers, problem)
            if stream is not None and stream.label == problem:
                parts.append(_stream_words(stream))
            if trend is not None and trend.sustained and trend.direction == problem:
                parts.append(_trend_words(trend))
        else:
            parts.append(_other_words(problem, hit))
    return "; ".join(parts)


def _other_words(problem: str, hit: Sequence[LayerDiagnosis]) -> str:
    first = hit[0]
    if problem == "non-finite":
        forward = [la.name for la in hit if not math.isfinite(la.act_mean)]
        start = (
            f"; the forward pass first overflows at {module_path(forward[0])}" if forward else ""
        )
        return (
            f"inf or nan values in {len(hit)} layer(s), from {module_path(first.name)}{start}: "
            "the run has diverged or overflowed, and the other labels cannot be judged there"
        )
    if problem == "dead":
        return (
            f"dead units in {len(hit)} layer(s), from {module_path(first.name)} "
            f"({first.dead_frac:.0%} of its units are 0 on every input; criterion >= "
            f"{DEAD_FRAC:.0%}: {_sure(_decades(first.dead_frac, DEAD_FRAC))})"
        )
    if problem == "saturated":
        source = (
            f", fed from {module_path(first.anchor)} at std {_g(first.reference)}"
            if first.anchor
            else ""
        )
        return (
            f"saturated activations in {len(hit)} layer(s), from {module_path(first.name)}"
            f"{source} ({first.saturated_frac:.0%} of its outputs at the flat ends; criterion "
            f">= {SATURATED_FRAC:.0%}: {_sure(_decades(first.saturated_frac, SATURATED_FRAC))})"
        )
    return (
        f"identical units in {len(hit)} layer(s) from {module_path(first.name)}: "
        "every unit computes the same value, so training cannot tell them apart "
        f"(unit spread <= {SYMMETRIC_SPREAD:g}: certain)"
    )


def _decades(value: float, bound: float) -> float:
    """How far past ``bound`` ``value`` lies, in decades (either direction)."""
    if value <= 0 or bound <= 0 or not math.isfinite(value):
        return math.inf
    return abs(math.log10(value / bound))


def _raw_reader(stream: Stream) -> str:
    """Who reads a pre-LN stream's end as it is: a layer, or the model's output."""
    end = stream.readers[-1]
    return "the model's output" if end == _OUTPUT else module_path(end)


def _stream_words(stream: Stream) -> str:
    if stream.placement == "pre":
        return (
            f"the residual stream is exploding with depth: it grows {stream.growth[-1]:.2g}x "
            f"over its {stream.adds} adds "
            f"(pre-LN: theory.residual_stream with the first adds' branch variance predicts "
            f"{stream.predicted[-1]:.2g}x; criterion: both past {STREAM_GROWTH:g}x: "
            f"{_sure(_decades(min(stream.growth[-1], stream.predicted[-1]), STREAM_GROWTH))}): "
            f"the last blocks move it {stream.growth[-1]:.2g}x less than the first, as no "
            f"branch is scaled for the depth, and {_raw_reader(stream)} reads its end with no "
            "norm between, so the output grows with it"
        )
    return (
        f"the post-LN stack's sensitivity is exploding with depth: its {stream.adds} adds sum "
        f"an amplification of {stream.amplification:.2g} "
        f"(the branches' shares of each sum's variance, Liu et al. 2020; criterion >= "
        f"{AMPLIFICATION:g}: {_sure(_decades(stream.amplification, AMPLIFICATION))}): an update "
        "moves the output in proportion to the depth, so the first steps overshoot"
    )


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
    """The verdict's words on a vanishing or exploding scale: forward (the cause), then what
    only the backward pass shows."""
    out = []
    forward = [
        la
        for la in layers
        if la.segment == problem
        or (la.scale_vanishing if problem == "vanishing" else la.scale_exploding)
    ]
    if forward:
        out.append(_forward_words(layers, forward, problem))
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
            f"weight layers get {bound} {limit:g}x the relative weight gradient of their "
            "reference (their like in the last repeated block, or the last weight layer, "
            f"{module_path(weighted[-1].name)}) ({_g(backward[-1].grad_ratio)}x at "
            f"{module_path(backward[-1].name)}, {_g(extreme.grad_ratio)}x at "
            f"{module_path(extreme.name)}: {_sure(_decades(extreme.grad_ratio, limit))})"
        )
    return out


def _forward_words(
    layers: Sequence[LayerDiagnosis], forward: Sequence[LayerDiagnosis], problem: str
) -> str:
    first = forward[0]
    crossed = [la for la in forward if la.scale_exploding or la.scale_vanishing]
    extreme = (max if problem == "exploding" else min)(
        crossed or forward, key=lambda la: la.scale if math.isfinite(la.scale) else 0
    )
    weighted = [la for la in forward if la.segment and math.isfinite(la.grad_ratio)]
    gains = [
        la.gain
        for la in weighted
        if math.isfinite(la.gain) and (la.gain > 1 if problem == "exploding" else 0 < la.gain < 1)
    ]
    predicted = [la.predicted_gain for la in weighted if math.isfinite(la.predicted_gain)]
    theory_words = (
        f" (the variance argument predicts {_span(predicted)}x from their weights)"
        if predicted
        else ""
    )
    per_layer = (
        f": the weight layers there multiply the RMS by {_span(gains)}x each with their "
        f"activations{theory_words}, where a scale-preserving init keeps 1x"
        if gains
        else ""
    )
    grads = [la.grad_std for la in layers if math.isfinite(la.grad_std)]
    grad_words = (
        f"; the gradient follows on its way back (std {_g(grads[-1])} at the last layer, "
        f"{_g(grads[0])} at the first)"
        if grads
        else ""
    )
    bound = EXPLODING if problem == "exploding" else VANISHING
    return (
        f"the scale is {problem} from {module_path(first.name)} on{per_layer}; "
        f"{_g(extreme.scale)}x {extreme._against()} at {module_path(extreme.name)} "
        f"(criterion {'>' if problem == 'exploding' else '<'} {bound:g}x: "
        f"{_sure(_decades(extreme.scale, bound))}){grad_words}"
    )


def _suggestions(
    model: nn.Module,
    layers: Sequence[LayerDiagnosis],
    graph: Graph | None,
    problems: Sequence[str],
    trend: Trend | None = None,
    stream: Stream | None = None,
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
    if stream is not None and stream.label is not None:
        out.append(_stream_advice(stream))
    if {"vanishing", "exploding", "saturated"} & set(problems):
        out += _depth_suggestions(model, trend)
        if any(la.segment or la.scale_vanishing or la.scale_exploding for la in layers) or (
            "saturated" in problems or any(la.grad_vanishing or la.grad_exploding for la in layers)
        ):
            out += _scale_suggestions(model, layers, graph, problems)
    return out


def _stream_advice(stream: Stream) -> str:
    """What the stream's design wants: branches scaled for the depth, or pre-LN / warm-up."""
    if stream.placement == "pre":
        where = _raw_reader(stream)
        branches = stream.adds  # the sums read along the stream, its raw end's included
        return (
            f"put a LayerNorm before {where}, which reads the stream's end as it is (a final "
            "norm, as GPT-2's ln_f: the final-norm remedy), so the growth stays inside the "
            "stream, where every norm reads it at unit scale (Xiong et al. 2020); or scale each "
            f"residual branch's output by 1/sqrt({branches}) = {branches**-0.5:.3g} (Depth-muP: "
            "Yang et al. 2023; the branch-scale remedy)"
        )
    return (
        "use pre-LN (the norm at the start of each branch: nn.TransformerEncoderLayer("
        "norm_first=True), and one final norm), or warm the learning rate up over the first "
        "steps (Xiong et al. 2020): the pre-ln and warmup remedies"
    )


def _depth_suggestions(model: nn.Module, trend: Trend | None) -> list[str]:
    """For a gradient that explodes steadily with depth in a BatchNorm stack: not the init,
    but fewer layers or another norm, each a remedy the check tries (residual connections are
    not offered: on the comparison run they did not lower the loss of the 30-layer stack)."""
    bn = any(isinstance(m, _BATCH_NORMS) for m in model.modules())
    if trend is None or not trend.sustained or trend.factor < 1 or not bn:
        return []
    why = (
        f"a deep BatchNorm stack: its gradient explodes with depth whatever the initializer "
        f"(Yang et al. 2019: the squared ratio grows by pi/(pi-1) = 1.47 per BatchNorm + ReLU "
        f"layer; measured {trend.factor**2:.3g})"
    )
    return [
        f"{why}: use fewer layers, as many as the gradient crosses growing less than 10x "
        "(the shallower remedy), rather than another init",
        f"{why}: use LayerNorm in place of BatchNorm (the layernorm remedy)",
    ]


def _dead_suggestions(layers: Sequence[LayerDiagnosis], graph: Graph) -> list[str]:
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
            f"{module_path(name)} is fed by {module_path(source)}, where those units' "
            f"pre-activation is below 0 on every input: {bias}reset the biases to 0 (the "
            "zero-bias remedy), or use a LeakyReLU"
        )
    return out


def _init_groups(graph: Graph) -> dict[str, list[tuple[str, float, float, str]]]:
    """The weight layers by the activation that follows them: (name, std now, wanted std, rule)."""
    groups: dict[str, list[tuple[str, float, float, str]]] = {}
    for name, m in graph.order:
        if not isinstance(m, _WEIGHT_LAYERS):
            continue
        act, slope = graph.follows(name)
        gain = init.calculate_gain(act, slope)  # type: ignore[arg-type]
        fan_in, fan_out = fans(m.weight)
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
    graph: Graph,
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
            "Use tanh in the hidden layers, the layers before them drawn by Xavier with "
            "gain 5/3 (keep sigmoid for the output and for gates: the tanh remedy)"
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
        conv = any(isinstance(m, _CONVS) for m in dict(graph.order).values())
        where = "BatchNorm2d after each conv" if conv else "BatchNorm1d after each Linear"
        out.append(
            f"add a normalization layer: {where}, before its activation (LayerNorm for "
            "sequences or small batches), so each layer's output is rescaled whatever the init"
        )
    if rest:
        out.append("or re-initialize data-driven: normlab doctor ... --fix lsuv (init.lsuv_)")
    return out
