"""The doctor's words: the verdict, the notes on branches scaled on purpose, and the
suggestions (which initializer, which norm, what else to change)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from normlab import init
from normlab import nn as nlnn
from normlab.doctor.constants import EXPLODING, GRAD_EXPLODING, GRAD_VANISHING, VANISHING
from normlab.doctor.graph import BRANCH_SCALE, _Graph
from normlab.doctor.kinds import _WEIGHT_LAYERS, _is_norm
from normlab.doctor.results import LayerDiagnosis, Trend, module_path


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
            start = (
                f"; the forward pass first overflows at {module_path(forward[0])}"
                if forward
                else ""
            )
            parts.append(
                f"inf or nan values in {len(hit)} layer(s), from {module_path(first.name)}{start}: "
                "the run "
                "has diverged or overflowed, and the other labels cannot be judged there"
            )
        elif problem == "dead":
            parts.append(
                f"dead units in {len(hit)} layer(s), from {module_path(first.name)} "
                f"({first.dead_frac:.0%} of its units are 0 on every input)"
            )
        elif problem == "saturated":
            parts.append(
                f"saturated activations in {len(hit)} layer(s), from {module_path(first.name)} "
                f"({first.saturated_frac:.0%} of its outputs at the flat ends)"
            )
        else:
            parts.append(
                f"identical units in {len(hit)} layer(s) from {module_path(first.name)}: "
                "every unit computes the same value, so training cannot tell them apart"
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
            f"the scale is {problem} from {module_path(first.name)} on "
            f"({_g(first.scale)}x the input's std there, {_g(last.scale)}x at the output)"
            f"{grad_words}"
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
            f"{module_path(weighted[-1].name)} ({_g(backward[-1].grad_ratio)}x at "
            f"{module_path(backward[-1].name)}, "
            f"{_g(extreme.grad_ratio)}x at {module_path(extreme.name)})"
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
            f"{module_path(name)} is fed by {module_path(source)}, where those units' "
            f"pre-activation is below 0 on every input: {bias}reset the biases to 0 and use He "
            "init (--fix he), or a LeakyReLU"
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
