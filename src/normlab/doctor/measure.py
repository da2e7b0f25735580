"""Measuring the model: forward and backward passes under the probes, with the doctor's
settings, and each weight layer's gradient ratio."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from normlab.doctor.constants import TANH_SATURATION
from normlab.doctor.errors import CannotDiagnose
from normlab.doctor.expect import block_keys, like_for_like
from normlab.doctor.kinds import _SIGMOID_LIKE, _TANH_LIKE, _is_weight
from normlab.doctor.running import Input, _backward, _call, _preserved
from normlab.doctor.stats import _STATS, _sigmoid_saturated
from normlab.probe import (
    ActivationProbe,
    ActivationStats,
    GradientProbe,
    GradientStats,
    own_parameters,
    select_modules,
)


def _mean(rows: Sequence[Sequence[float]], j: int) -> float:
    values = [r[j] for r in rows if math.isfinite(r[j])]
    return sum(values) / len(values) if values else math.nan


def _max(rows: Sequence[Sequence[float]], j: int) -> float:
    values = [r[j] for r in rows]
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def probe_settings(model: nn.Module) -> dict[str, Any]:
    """The :class:`~normlab.probe.ActivationProbe` arguments the doctor measures ``model`` with:
    every element, the per-unit statistics, and saturation only where the model has a tanh- or
    sigmoid-like layer; no count of zero elements, as dead units are judged per unit (each costs
    a pass over every layer's output)."""
    stats = dict(_STATS)
    modules = list(model.modules())
    if any(isinstance(m, _SIGMOID_LIKE) for m in modules):
        stats["sigmoid_saturated"] = _sigmoid_saturated
    tanh = any(isinstance(m, _TANH_LIKE) for m in modules)
    saturation = TANH_SATURATION if tanh else None
    return {"stats": stats, "saturation": saturation, "zeros": False, "sample_size": None}


Measured = tuple[ActivationStats, GradientStats, dict[str, float], bool]
"""The measurements of the passes so far: the activation and gradient statistics, each weight
layer's gradient ratio, and whether the output was the model's own loss."""


def _measuring(
    model: nn.Module,
    xs: Sequence[Input],
    generator: torch.Generator | None,
    output: str | None,
    scaled: set[str],
    notes: list[str] | None = None,
) -> Iterator[Callable[[], Measured]]:
    """One forward and backward pass per batch under the probes, yielding after each a function
    that gives the passes' :data:`Measured` so far: the activation and gradient statistics and
    each weight layer's gradient ratio (call it before the next pass, as it reads the probes
    as they are; it copies every layer's numbers, so call it only for what you use). How the
    output was read is added to ``notes`` (:func:`~normlab.doctor.running._output`); the
    function refuses (:class:`CannotDiagnose`) when no probed layer ran or no pass had a
    gradient. The model is left as it was when the passes end, or when the generator closes.

    The readout is drawn once per output shape: an output whose length the model computes
    (a duration predictor's frames) differs from pass to pass, and each pass's loss reads its
    own output with elements of the same N(0, 1) scale."""
    weights = weight_layers(model)
    readouts: dict[torch.Size, torch.Tensor] = {}  # output shape -> its readout, that shape
    relative: list[torch.Tensor] = []  # per step: each weight layer's |dL/dW| / |W|, (layers,)
    names = list(weights)
    with (
        _preserved(model),
        ActivationProbe(model, **probe_settings(model)) as ap,
        GradientProbe(model) as gp,
    ):
        for x in xs:
            model.zero_grad(set_to_none=True)
            out = _call(model, x, output, notes)
            if (readout := readouts.get(out.shape)) is None:
                readout = torch.randn(out.shape, generator=generator).to(out.device)
                readouts[out.shape] = readout
            if out.requires_grad and out.is_floating_point():
                _backward(out, readout)
                relative.append(_relative_gradients(weights))
            ap.step()
            gp.step()
            yield functools.partial(_measured, model, ap, gp, names, list(relative), scaled, out)


def _measured(
    model: nn.Module,
    ap: ActivationProbe,
    gp: GradientProbe,
    names: list[str],
    relative: list[torch.Tensor],
    scaled: set[str],
    out: torch.Tensor,
) -> Measured:
    """The probes' statistics and the gradient ratios of the passes so far (``names``: the
    weight layers ``relative``'s columns follow; ``out``: the last pass's output); refuses when
    no probed layer ran or no pass had a gradient."""
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
    return acts, grad_stats, grad_ratios(names, relative, order), own


def weight_layers(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Each layer's own trainable weights of 2+ dimensions (biases and norm scales left out)."""
    found: dict[str, list[nn.Parameter]] = {}
    for name, m in select_modules(model):
        ps = [p for p in own_parameters(m) if _is_weight(m, p) and p.requires_grad]
        if ps:
            found[name] = ps
    return found


def _relative_gradients(weights: dict[str, list[nn.Parameter]]) -> torch.Tensor:
    """``|dL/dW| / |W|`` per weight layer after one backward pass, in float64, (layers,), on
    the host: one copy for all layers (each layer's own would wait for the device once each).

    A layer whose weights got no gradient (not used, or frozen) or are all 0 gives nan.
    """
    if not weights:
        return torch.empty(0, dtype=torch.float64)
    device = next(iter(weights.values()))[0].device  # where all layers' values are stacked
    out: list[torch.Tensor] = []  # 0-dim float64 per layer, on that device
    for ps in weights.values():
        grads = [p.grad for p in ps if p.grad is not None]
        if not grads:
            out.append(torch.tensor(math.nan, dtype=torch.float64, device=device))
            continue
        g2 = sum(g.detach().double().square().sum() for g in grads)  # float64: 1e-20 squares
        w2 = sum(p.detach().double().square().sum() for p in ps)
        out.append(torch.as_tensor(g2 / w2).sqrt().to(device))  # 0 / 0 = nan, x / 0 = inf
    return torch.stack(out).cpu()


def grad_ratios(
    names: list[str], relative: Sequence[torch.Tensor], order: Sequence[str]
) -> dict[str, float]:
    """rho per weight layer: its step-averaged relative gradient over its reference's.

    A layer of a repeated block is compared with the same layer of the last block
    (:func:`normlab.doctor.expect.like_for_like`: a query projection with a query projection),
    any other with the last weight layer outside the blocks, the last in ``order`` (the
    probe's forward order) with a finite, positive relative gradient. ``order`` leaves out the
    layers scaled on purpose, which are no reference.
    """
    if not relative or not names:
        return {}
    rel = torch.stack(list(relative)).tolist()  # (steps, layers): one host sync
    mean = {name: _mean(rel, j) for j, name in enumerate(names)}
    usable = [n for n in order if n in mean and math.isfinite(mean[n]) and mean[n] > 0]
    if not usable:
        return {}
    refs = like_for_like(usable, block_keys(usable))
    fallback = mean[usable[-1]]
    out = {}
    for name, r in mean.items():
        if math.isfinite(r):
            out[name] = r / (mean[refs[name]] if name in refs else fallback)
    return out
