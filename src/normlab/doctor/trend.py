r"""The depth trend of the gradient ratio: the model's repeated blocks, a linear fit of
:math:`\log \rho` over them, and the layers it labels."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from normlab.doctor.expect import _blocks
from normlab.doctor.layers import _labels
from normlab.doctor.results import TREND_MARK, LayerDiagnosis, Trend


def _alike(weighted: Sequence[LayerDiagnosis]) -> tuple[str, list[list[int]], list[int]]:
    """The repeated blocks a trend compares: those whose weight layers have the sizes of the
    last block's (a depth trend is the same block repeated: MobileNet's stages of other widths
    change the ratio by their width, not their depth), with each block's index in depth."""
    prefix, groups = _blocks([la.name for la in weighted])
    if not groups:
        return prefix, [], []
    sizes = [tuple(weighted[i].params for i in g) for g in groups]
    kept = [b for b, size in enumerate(sizes) if size == sizes[-1]]
    return prefix, [groups[b] for b in kept], kept


def _trend(layers: Sequence[LayerDiagnosis]) -> Trend | None:
    """The fitted depth trend of the gradient ratio (see :class:`Trend`); ``None`` for fewer
    than three blocks alike."""
    weighted = _trended(layers)
    prefix, groups, depth = _alike(weighted)
    if len(groups) < 3:
        return None
    y = torch.tensor(
        [sum(math.log(weighted[i].grad_ratio) for i in g) / len(g) for g in groups],
        dtype=torch.float64,
    )  # (B,) mean log rho per block
    x = torch.tensor(depth, dtype=torch.float64)  # (B,) block index, input side first
    xc, yc = x - x.mean(), y - y.mean()
    slope = float((xc * yc).sum() / (xc * xc).sum())  # least squares
    fitted_var = slope**2 * float((xc * xc).sum())
    total_var = float((yc * yc).sum())
    r2 = fitted_var / total_var if total_var > 0 else 0.0
    factor = math.exp(-slope)  # per block, toward the input
    return Trend(factor, factor ** (depth[-1] - depth[0]), r2, len(y), prefix)


def _mark_trend(layers: Sequence[LayerDiagnosis], trend: Trend) -> None:
    """Label the weight layers the fitted trend puts 10x or more from the output end's ratio,
    and those before the first block (a stem of other sizes) whose own ratio is 10x or more
    past the last block's in the trend's direction: the gradient reaches them after the
    blocks, on the same way back."""
    weighted = _trended(layers)
    _, groups, depth = _alike(weighted)
    marked = []
    for group, b in zip(groups, depth, strict=True):
        growth = trend.factor ** (depth[-1] - b)  # from the last block to this one
        if not 1 / TREND_MARK < growth < TREND_MARK:
            marked += group
    last = math.exp(sum(math.log(weighted[i].grad_ratio) for i in groups[-1]) / len(groups[-1]))
    for i in range(min(groups[0])):
        past = weighted[i].grad_ratio / last
        if past <= 1 / TREND_MARK if trend.direction == "vanishing" else past >= TREND_MARK:
            marked.append(i)
    for i in marked:
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
