"""The cure: re-initialize a model's Linear and Conv layers by the activation that follows
each, leaving the other weight layers, and tied weights, alone."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import cast

import torch
from torch import nn

from normlab import init
from normlab.doctor.constants import FIX_METHODS
from normlab.doctor.graph import Graph, trace
from normlab.doctor.kinds import _WEIGHT_LAYERS, _has_weight
from normlab.doctor.results import FixReport
from normlab.doctor.running import Input, _shape

_LSUV_TOL = 0.1  # lsuv_'s default


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
    *_, report = fixing(model, method, batch, generator=generator, tied=tied)
    return report


def fixing(
    model: nn.Module,
    method: str,
    batch: Input,
    *,
    generator: torch.Generator | None = None,
    tied: bool = False,
) -> Iterator[FixReport]:
    """:func:`fix`, step by step: ``lsuv`` yields the report after each layer it rescales (its
    ``lsuv`` holds the layers done so far, :func:`normlab.init.lsuv_layers`); the other methods
    are one step. The last report is :func:`fix`'s. The refusals come at the first ``next``,
    before anything changes.

    Args:
        model, method, batch, generator, tied: as for :func:`fix`.

    Examples::

        >>> from normlab import zoo
        >>> net = zoo.build("vanishing-tanh")
        >>> [len(r.lsuv.layers) for r in fixing(net, "lsuv", torch.randn(16, 32))][:3]
        [1, 2, 3]
    """
    if method not in FIX_METHODS:
        raise ValueError(f"method {method!r} not supported, use one of {FIX_METHODS}")
    graph = trace(model, batch)
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
    report = FixReport(method, names, follows, gains, None, skipped)
    if method != "lsuv":
        yield report
        return
    done = init.LSUVResult([], [], [], tol=_LSUV_TOL)
    x = cast(torch.Tensor, batch)
    for name, steps, var in init.lsuv_layers(model, x, _LSUV_TOL, generator=generator):
        done = init.LSUVResult(
            [*done.layers, name], [*done.iterations, steps], [*done.variances, var], _LSUV_TOL
        )
        yield dataclasses.replace(report, lsuv=done)


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


def _skipped(graph: Graph, shared: dict[int, list[str]], tied: bool) -> list[tuple[str, str]]:
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
