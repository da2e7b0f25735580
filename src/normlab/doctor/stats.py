"""Per-unit statistics, passed to the probe as typed functions (``stats=``): dead units, the
spread between units, sigmoid saturation."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from normlab.doctor.constants import SIGMOID_SATURATION

_NAN = torch.tensor(math.nan, dtype=torch.float64)  # "not applicable": nothing computed
_NONE_DEAD = torch.tensor(0.0, dtype=torch.float64)


def _dead_frac(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Fraction of the units along ``dim`` that are exactly 0 on every element of the output.

    Exact, in two looks: a unit with a nonzero element in the batch's first item is alive, and
    only the units that are 0 on all of it (at random init, rarely any but the dead) are read
    over the whole batch. The ``dim=-1`` version skips 2-D outputs (``nan``), where dim 1 is the
    last dim already.
    """

    def dead(y: torch.Tensor) -> torch.Tensor:
        if y.dim() < 2 or (dim == -1 and y.dim() == 2):
            return _NAN
        d = dim % y.dim()
        others = [i for i in range(y.dim()) if i != d]
        first = y[:1].abs().amax(dim=others)  # (units,): bools would count slowly; nan stays
        suspects = first.eq(0).nonzero().squeeze(1)  # 0 on the first item
        if len(suspects) == 0:  # (nonzero() has read the device already)
            return _NONE_DEAD
        rest = y.index_select(d, suspects)  # (N, ..., suspects, ...)
        dead_units = rest.abs().amax(dim=others).eq(0).sum()  # 0 on every element
        return dead_units.double() / y.shape[d]

    return dead


def _on_frac(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Fraction of the units along ``dim`` that are above 0 on every element of the output: the
    mirror of a dead unit (zero-mean weights draw ``w`` and ``-w`` alike, so a unit off on the
    whole batch by the chance of its draw is as often on on all of it). Read only where a unit
    is 0 on the batch's first item (else no unit is dead and it is 0, uncounted), in two looks
    as :func:`_dead_frac`.
    """

    def on(y: torch.Tensor) -> torch.Tensor:
        if y.dim() < 2 or (dim == -1 and y.dim() == 2):
            return _NAN
        d = dim % y.dim()
        others = [i for i in range(y.dim()) if i != d]
        first = y[:1]  # (1, ...)
        if not bool(first.abs().amax(dim=others).eq(0).any()):  # no unit is dead
            return _NONE_DEAD
        suspects = first.amin(dim=others).gt(0).nonzero().squeeze(1)  # on all the first item
        if len(suspects) == 0:
            return _NONE_DEAD
        rest = y.index_select(d, suspects)  # (N, ..., suspects, ...)
        return rest.amin(dim=others).gt(0).sum().double() / y.shape[d]

    return on


SPREAD_VALUES = 32
"""Values of each unit the unit spread compares units on, at least: the batch's first items
that hold as many (32 rows of a Linear layer's output, one image of a conv layer's channels).
A ReLU layer of equal units is 0 on all of them with odds of about 2**-32."""


def _unit_spread(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """``max |y_u - y_0| / max |y - mean(y)|`` over the units along ``dim`` on the batch's
    first items holding :data:`SPREAD_VALUES` values of each unit: 0 when all are identical
    (measured around the mean: a sigmoid's outputs near 0.5 or a softmax's near 1/T differ
    from each other by little next to their offset, not next to their spread). Weights that
    make units equal do so on every input, so a few values tell; one would not do, as a ReLU
    layer of equal units is all 0 on about half of them (0 / 0: no verdict)."""

    def spread(y: torch.Tensor) -> torch.Tensor:
        if y.dim() < 2 or (dim == -1 and y.dim() == 2) or y.shape[dim] < 2:
            return _NAN
        per_item = y[0].numel() // y.shape[dim]  # values of one unit in one item
        y = y[: -(-SPREAD_VALUES // per_item)]  # (N, ...) -> (items, ...)
        apart = (y - y.narrow(dim, 0, 1)).abs_().amax()  # unit 0 against every unit
        spread = (y - y.mean()).abs_().amax()  # around the mean: a sigmoid's 0.5 is no spread
        return (apart / spread).double()  # 0 / 0 = nan: a constant output, no verdict

    return spread


def _sigmoid_saturated(y: torch.Tensor) -> torch.Tensor:
    return (y - 0.5).abs_().ge_(SIGMOID_SATURATION).mean()  # flags as floats: bools count slowly


_STATS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "dead_first": _dead_frac(1),
    "dead_last": _dead_frac(-1),
    "on_first": _on_frac(1),
    "on_last": _on_frac(-1),
    "spread_first": _unit_spread(1),
    "spread_last": _unit_spread(-1),
}
