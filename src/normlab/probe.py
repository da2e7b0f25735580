r"""Per-layer statistics of any ``nn.Module``: activations on the way forward, gradients back.

A network that will not train shows it layer by layer (Glorot & Bengio, 2010, "Understanding
the difficulty of training deep feedforward neural networks"). The probes are context managers
whose hooks go on ``__exit__``; call ``step()`` once per training step and ``result()`` for the
kept steps, ``[step][layer]``.

What a layer's numbers are, at one step. Its calls :math:`c` (a layer called twice in a forward,
or a gradient counted for two layers) each give elements :math:`x_i`, :math:`i \in c`, and the
:math:`m = \sum_c m_c` elements of all calls are one population:

.. math::
    \text{mean} = \frac{1}{m}\sum_i x_i, \qquad
    \text{std} = \sqrt{\frac{1}{m - 1}\sum_i (x_i - \text{mean})^2}, \qquad
    \min_i x_i, \qquad \max_i x_i,

    \text{zero\_frac} = \frac{\#\{i : x_i = 0\}}{m}, \qquad
    \text{saturated\_frac} = \frac{\#\{i : |x_i| \ge s\}}{m}, \qquad
    \text{extra}[k] = \frac{1}{\#c}\sum_c f_k(y_c)

(``std`` unbiased, as ``Tensor.std()``: ``nan`` for :math:`m \le 1`, exactly 0 when min equals
max), and for a gradient :math:`g`, ``grad_std`` as ``std`` and ``grad_norm``
:math:`= \sqrt{\sum_i g_i^2}`. ``tests/test_probe.py:expected`` computes them directly.

Why a sample. A forward hook that reduces a whole output costs a pass over it per statistic, and a
look at the host (``.item()``) makes the CPU wait for the device at every layer. So a call of a
watched module copies only a sample of its output, :math:`m_c` = ``sample_size`` elements (1024 by
default; all of them when fewer, or for ``sample_size=None``) spread evenly over it
(:func:`sample_indices`), into a buffer on its device: one kernel, and nothing waits. ``step()``
reduces all samples of one length at once, copies the step's numbers to the host at once, and
pools them per layer into a ring of the last ``keep`` steps: memory is bounded, and no
activation is held past its step.

How the pooling keeps its digits. Each call is reduced to its sum and, in a second pass, its
squared deviations from its own mean :math:`\bar x_c` (a collapsed sigmoid's float64 0.5 +- 1e-9
keeps its std, which :math:`\sum x^2 - m\bar x^2` would cancel away), in float64, or in float32
on the CPU where the squares neither underflow nor overflow (:func:`_sums`); the calls are
pooled as Chan, Golub & LeVeque (1979) do:

.. math::
    \sum_i (x_i - \text{mean})^2 = \sum_c \Big(\sum_{i \in c} (x_i - \bar x_c)^2
        + m_c (\bar x_c - \text{mean})^2\Big)
"""

from __future__ import annotations

import fnmatch
import functools
import math
import re
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, cast

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize
from torch.utils.hooks import RemovableHandle

Statistic = Callable[[Tensor], Tensor]
"""A user statistic: the module's output (detached) in, one number as a tensor out."""
_Names = str | re.Pattern[str] | Sequence[str] | Callable[[str, nn.Module], bool]
ModuleFilter = type[nn.Module] | tuple[type[nn.Module], ...] | _Names | None
"""Which modules a probe watches; see :func:`select_modules`."""

SAMPLE_SIZE, KEEP, MAX = 1024, 4096, 1 << 24  # elements sampled per output, steps kept, bound
_EXACT_COUNT = 1 << 24  # float32 adds up 1.0s exactly below this count
_MOMENTS = ("mean", "std", "min", "max", "zero_frac", "saturated_frac")
"""An activation layer's statistics, as :class:`ActivationStats` names them."""
_GRADIENT_STATS = ("grad_std", "grad_norm")
"""A gradient layer's statistics, as :class:`GradientStats` names them."""
_ROW = ("total", "squares", "min", "max", "nonzero", "saturated")
r"""A call's activation row: :math:`\sum_i x_i`, :math:`\sum_i (x_i - \bar x)^2`, min, max,
:math:`\#\{x_i \ne 0\}`, :math:`\#\{|x_i| \ge s\}`; the user statistics follow."""
_GRADIENT_ROW = ("total", "squares")
r"""A call's gradient row: :math:`\sum_i g_i`, :math:`\sum_i (g_i - \bar g)^2`."""
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
StepRecords = npt.NDArray[np.void]  # a kept step: one record per layer, named fields
_Key = tuple[int, torch.dtype, torch.device]  # a sample's length, dtype and device
_Call = tuple[int, int, int]  # a call's slot (its layer), numel and elements sampled
_Pending = tuple[_Call, list[Tensor]]  # a sampled call, waiting for step(): f_k(y) computed


def own_parameters(module: nn.Module) -> list[nn.Parameter]:
    """A module's own parameters, with the one each of its parametrized tensors is computed
    from (``torch.nn.utils.parametrize``: weight norm's direction ``v``, spectral norm's
    original; weight norm's per-row length ``g`` is a scale, no weight): a weight-normed
    convolution computes with a weight that is its own, stored in ``conv.parametrizations``.

    >>> from torch.nn.utils.parametrizations import weight_norm
    >>> [tuple(p.shape) for p in own_parameters(weight_norm(nn.Conv1d(4, 8, 3)))]
    [(8,), (8, 4, 3)]
    """
    own = list(module.parameters(recurse=False))
    if parametrize.is_parametrized(module):
        lists = cast(nn.ModuleDict, module.parametrizations)
        for name, computed in lists.items():
            shape = getattr(module, name).shape  # the tensor the module computes with
            own += [p for p in computed.parameters(recurse=False) if p.shape == shape]
    return own


def is_layer(module: nn.Module) -> bool:
    """A layer as the probes pick it by default: a leaf (its parametrizations aside), or a
    module computing with parameters of its own (``nn.MultiheadAttention``)."""
    children = [c for c in module.children() if c is not getattr(module, "parametrizations", None)]
    return not children or bool(own_parameters(module))


def _in_parametrizations(model: nn.Module) -> set[int]:
    """The modules inside parametrizations (``conv.parametrizations.weight``, its weight-norm
    module): they compute a weight, not a signal, so no probe reads them as layers."""
    inside: set[int] = set()
    for m in model.modules():
        if parametrize.is_parametrized(m):
            inside |= {id(sub) for sub in cast(nn.Module, m.parametrizations).modules()}
    return inside


def select_modules(model: nn.Module, modules: ModuleFilter = None) -> list[tuple[str, nn.Module]]:
    """The ``(name, module)`` pairs of ``model`` that ``modules`` picks, in registration order.

    ``modules`` is ``None`` (every leaf and every module with parameters of its own), a module
    class or a tuple or list of classes (``isinstance``), a glob ``str`` over the whole dotted
    name (``"layers.*.linear1"``; ``*`` crosses dots), a compiled regex (``fullmatch``), a list of
    exact names (the root model is ``""``), or a callable ``(name, module) -> bool``. Raises
    ``TypeError`` for a model or filter of another type, ``ValueError`` if it picks no module.

    >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> [name for name, _ in select_modules(net, nn.Linear)]
    ['0', '2']
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    named = list(model.named_modules())  # each module once, under its first name
    listed = list(modules) if isinstance(modules, tuple | list) else None
    if modules is None:  # leaves, and modules with parameters of their own (MultiheadAttention)
        inside = _in_parametrizations(model)
        picked = [(n, m) for n, m in named if id(m) not in inside and is_layer(m)]
        what = "leaf module or module with parameters"
    elif isinstance(modules, type) or (listed and all(isinstance(t, type) for t in listed)):
        types = tuple(cast(list[type], listed or [modules]))
        if bad := [t.__name__ for t in types if not issubclass(t, nn.Module)]:
            raise TypeError(f"modules: {bad[0]} is not a subclass of torch.nn.Module")
        picked = [(n, m) for n, m in named if isinstance(m, types)]
        what = "module of type " + " or ".join(t.__name__ for t in types)
    elif isinstance(modules, str | re.Pattern):
        regex = re.compile(fnmatch.translate(modules)) if isinstance(modules, str) else modules
        picked = [(n, m) for n, m in named if regex.fullmatch(n)]
        glob = f"glob {modules}" if isinstance(modules, str) else None
        what = f"module whose name matches the {glob or f'regular expression {regex.pattern!r}'}"
    elif listed is not None:
        if not all(isinstance(n, str) for n in listed):
            kinds = [type(n).__name__ for n in listed]
            raise TypeError(f"modules: a list must hold only names (str) or classes, got {kinds}")
        if unknown := [n for n in listed if n not in dict(named)]:
            such = [n for n, _ in named[:8]] + ["..."] * (len(named) > 8)
            raise ValueError(f"modules: {unknown} not in the model, use names such as {such}")
        picked, what = [(n, m) for n, m in named if n in listed], "module"
    elif callable(modules):
        picked = [(n, m) for n, m in named if modules(n, m)]
        what = "module for which the callable returns True"
    else:
        valid = "None, a module class or tuple of classes, a glob, a regex, names, a callable"
        raise TypeError(f"modules: {type(modules).__name__} not supported, use {valid}")
    if not picked:
        raise ValueError(f"modules: the model has no {what}")
    return picked


def first_float_tensor(output: object) -> Tensor | None:
    """The tensor a probe measures in a module's output: the first floating-point tensor found,
    depth first through tuples, lists and dict values; ``None`` when there is none.

    >>> out = nn.LSTM(3, 5)(torch.zeros(2, 1, 3))  # (output, (h, c))
    >>> first_float_tensor(out) is out[0]
    True
    """
    if isinstance(output, Tensor):
        return output if output.is_floating_point() else None
    if isinstance(output, Mapping):
        output = list(output.values())
    for item in output if isinstance(output, tuple | list) else ():
        if (found := first_float_tensor(item)) is not None:
            return found
    return None


def sample_indices(numel: int, sample_size: int | None = SAMPLE_SIZE) -> Tensor:
    r"""Flat indices of the elements a probe samples from an output of ``numel`` elements.

    All of them when there are at most ``sample_size`` (or it is ``None``); otherwise the
    ``sample_size`` distinct indices :math:`k s \bmod n`, where the step :math:`s` is the smallest
    integer :math:`\ge n /` ``sample_size`` sharing no factor with :math:`n`. As the size of one
    batch item divides :math:`n`, the sample visits every position of an item equally often (±1).

    >>> sample_indices(12, sample_size=5)  # step 5: columns 0, 2, 1, 0, 2 of a (4, 3) output
    tensor([ 0,  5, 10,  3,  8])
    """
    if sample_size is None or numel <= sample_size:
        return torch.arange(numel)
    step = -(-numel // sample_size)  # ceil
    while math.gcd(step, numel) != 1:
        step += 1
    return torch.arange(sample_size) * step % numel


def _check_int(name: str, value: object, low: int, high: int = MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value}")
    return value


def _check_saturation(value: object) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise TypeError(f"saturation must be a finite number or None, got {value!r}")
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"saturation must be a finite positive number or None, got {value!r}")
    return value if value is None else float(value)


def _check_stats(stats: object) -> dict[str, Statistic]:
    if not isinstance(stats, Mapping | None):
        raise TypeError(f"stats must be a mapping name -> function, got {type(stats).__name__}")
    for name, fn in (stats or {}).items():
        if not (isinstance(name, str) and name and callable(fn)):
            raise TypeError(f"stats must map names (str) to functions, got {name!r}: {fn!r}")
    return dict(stats or {})


def _user_value(name: str, value: object, device: torch.device) -> Tensor:
    if not isinstance(value, Tensor) or value.numel() != 1:
        got = f"shape {tuple(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
        error = ValueError if isinstance(value, Tensor) else TypeError
        raise error(f"stats[{name!r}] must return a Tensor with one element, got {got}")
    if value.dtype != torch.float64 or value.device != device or value.dim() != 0:
        value = value.reshape(()).to(device, torch.float64)  # each op costs even when a no-op
    return value.detach() if value.requires_grad else value


# -- one call's statistics (on the output's device) ------------------------------------------------

_TINY = 2.0**-60
"""The least float32 sum of squared deviations :func:`_sums` keeps: any square lost below
float32's least normal number (2**-126) then weighs under n * 2**-66 of it."""


def _sums(x: Tensor) -> Tensor:
    r"""A tensor's :math:`\big(\sum_i x_i,\ \sum_i (x_i - \bar x)^2\big)` in two passes, any
    shape -> (2,), in the dtype they were summed in (the step's rows widen it to float64).

    In float64 on a float64 copy, except on the CPU for narrower dtypes: there float32 sums come
    first (torch adds them in cascades, to about 1e-7 relative, as close as its own
    ``Tensor.std()``), kept when their squares neither underflow nor overflow (the second sum
    in [:data:`_TINY`, inf)), a check the host reads at once. Tiny values (a vanishing
    gradient), huge ones and ``nan`` take the float64 way, which costs twice the bytes.
    """
    n = x.numel()
    if x.device.type == "cpu" and x.dtype != torch.float64:
        x32 = x if x.dtype == torch.float32 else x.float()
        total = x32.sum()
        squares = (x32 - total / n).square_().sum()  # the second pass
        if _TINY <= squares.item() < math.inf:
            return torch.stack([total, squares])  # float32; exact in float64 later
    wide = x.to(torch.float64, memory_format=torch.contiguous_format, copy=True).view(-1)  # (n,)
    total = wide.sum()
    centered = wide.sub_(total / n)  # (n,), in place
    return torch.stack([total, torch.dot(centered, centered)])


def _count(flag: Callable[..., Tensor], x: Tensor, *args: Any, dim: int | None = None) -> Tensor:
    """How many elements of ``x`` ``flag`` (a comparison: ``torch.ne``, ``torch.ge``) holds for,
    as a float: over all of ``x`` (0-dim), or along ``dim``. The comparison writes 1.0 or 0.0
    straight into a float buffer (summing bools is slow), float32 below 2**24 elements, where it
    adds 1s exactly, float64 beyond."""
    wide = torch.float32 if x.numel() < _EXACT_COUNT else torch.float64
    flags = flag(x, *args, out=torch.empty(x.shape, dtype=wide, device=x.device))
    return flags.sum() if dim is None else flags.sum(dim)


def _output_row(y: Tensor, zeros: bool, saturation: float | None) -> dict[str, Tensor]:
    """One whole output's :data:`_ROW`, 0-dim tensors: the sums by :func:`_sums`, min and max in
    its own dtype, the counts by :func:`_count` (0 where not made)."""
    total, squares = _sums(y)  # (...) -> (2,) -> two ()
    none = y.new_zeros(())  # a count not made
    return {
        "total": total,
        "squares": squares,
        "min": y.amin(),  # exact in y's dtype; two passes beat aminmax's one
        "max": y.amax(),
        "nonzero": _count(torch.ne, y, 0) if zeros else none,  # no flat copy
        "saturated": none if saturation is None else _count(torch.ge, y.abs(), saturation),
    }


def _sample_rows(x: Tensor, zeros: bool, saturation: float | None) -> dict[str, Tensor]:
    """G samples' :data:`_ROW`, (G, m) -> (G,) each, in float64: one batch of kernels for all."""
    x = x.double()  # (G, m)
    total = x.sum(1)  # (G, m) -> (G,)
    centered = x - total[:, None] / x.shape[1]  # (G, m): the second pass
    none = x.new_zeros(len(x))  # (G,): a count not made
    return {
        "total": total,
        "squares": (centered * centered).sum(1),  # (G, m) -> (G,)
        "min": x.amin(1),
        "max": x.amax(1),
        "nonzero": _count(torch.ne, x, 0, dim=1) if zeros else none,
        "saturated": none if saturation is None else _count(torch.ge, x.abs(), saturation, dim=1),
    }


# -- one step's statistics per layer (on the host) -------------------------------------------------


@dataclass(slots=True)
class _Calls:
    """A closed step's calls on the host, in call order, (C,) each: the layer (slot) each call
    is of, its elements output and sampled, its row's fields by name and the user statistics."""

    layers: int  # L, the probe's slots
    slot: IntArray
    numel: IntArray
    sampled: IntArray
    row: dict[str, FloatArray]
    extra: dict[str, FloatArray]

    def per_layer(self, values: npt.ArrayLike) -> FloatArray:
        """Each layer's sum of ``values`` over its calls, (C,) -> (L,), added in call order."""
        return cast(FloatArray, np.bincount(self.slot, values, minlength=self.layers))


@functools.cache
def _step_dtype(stats: tuple[str, ...], extra: tuple[str, ...]) -> np.dtype[np.void]:
    """The fields of a kept step's record of one layer: the counts, the statistics and, under
    ``"extra"``, the user statistics (whose names may be any, ``"mean"`` too)."""
    fields: list[Any] = [(name, np.int64) for name in ("numel", "sampled", "calls")]
    fields += [(name, np.float64) for name in stats]
    return np.dtype(fields + [("extra", [(name, np.float64) for name in extra])] * bool(extra))


def _step(
    calls: _Calls, stats: dict[str, FloatArray], extra: dict[str, FloatArray] | None = None
) -> StepRecords:
    """A closed step as one record per layer, (L,) with named fields (:func:`_step_dtype`): the
    counts of ``calls``, ``stats`` and ``extra``; one small array per kept step."""
    extra = extra or {}
    step = np.empty(calls.layers, _step_dtype(tuple(stats), tuple(extra)))  # (L,)
    step["numel"], step["sampled"] = calls.per_layer(calls.numel), calls.per_layer(calls.sampled)
    step["calls"] = np.bincount(calls.slot, minlength=calls.layers)  # (C,) -> (L,)
    for name, values in stats.items():
        step[name] = values
    for name, values in extra.items():
        step["extra"][name] = values
    return step


def _pooled_moments(calls: _Calls) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Each layer's mean, sum of squared deviations and std, (L,) each, from its calls' sums
    and squared deviations: Chan, Golub & LeVeque's pooling (see :mod:`normlab.probe`)."""
    m, total = calls.sampled, calls.row["total"]  # (C,) each
    pooled_m = calls.per_layer(m)  # (L,)
    with np.errstate(divide="ignore", invalid="ignore"):  # layers not called: nan
        mean = calls.per_layer(total) / pooled_m  # (L,)
        between = m * (total / m - mean[calls.slot]) ** 2  # (C,): m_c (x_c - mean)^2
        deviations = calls.per_layer(calls.row["squares"]) + calls.per_layer(between)  # (L,)
        std = np.where(pooled_m > 1, np.sqrt(deviations / (pooled_m - 1)), np.nan)
    return mean, deviations, std


def _activation_step(calls: _Calls, zeros: bool, saturation: float | None) -> StepRecords:
    """A step's activation statistics per layer, from its calls' rows (see :mod:`normlab.probe`;
    ``extra[k]`` is the mean of :math:`f_k` over a layer's calls)."""
    row, not_made = calls.row, np.full(calls.layers, np.nan)
    m = calls.per_layer(calls.sampled)  # (C,) -> (L,): elements pooled
    low, high = np.full(calls.layers, np.inf), np.full(calls.layers, -np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):  # nan, and layers not called
        np.minimum.at(low, calls.slot, row["min"])  # (C,) -> (L,)
        np.maximum.at(high, calls.slot, row["max"])
        mean, _, std = _pooled_moments(calls)  # (L,) each
        zero_frac = (m - calls.per_layer(row["nonzero"])) / m if zeros else not_made
        saturated_frac = not_made if saturation is None else calls.per_layer(row["saturated"]) / m
        count = np.bincount(calls.slot, minlength=calls.layers)  # (C,) -> (L,): calls
        extra = {name: calls.per_layer(f) / count for name, f in calls.extra.items()}
    stats = {
        "mean": mean,
        "std": np.where((low == high) & (m > 1), 0.0, std),  # exactly 0, not rounding's
        "min": np.where(m > 0, low, np.nan),
        "max": np.where(m > 0, high, np.nan),
        "zero_frac": zero_frac,
        "saturated_frac": saturated_frac,
    }
    return _step(calls, stats, extra)


def _gradient_step(calls: _Calls) -> StepRecords:
    r"""A step's gradient statistics per layer: ``grad_std`` as ``std``, and
    :math:`\text{grad\_norm} = \sqrt{D + n \bar g^2}` with :math:`D = \sum_i (g_i - \bar g)^2`."""
    mean, deviations, std = _pooled_moments(calls)  # (L,) each
    n = calls.per_layer(calls.numel)  # (L,)
    with np.errstate(invalid="ignore"):  # layers not called: nan
        norm = np.where(n > 0, np.sqrt(deviations + n * mean**2), np.nan)
    return _step(calls, {"grad_std": std, "grad_norm": norm})


def finite_or_none(value: Any) -> Any:
    """Nested lists, tuples and dicts with every non-finite float as ``None``, for strict JSON.

    >>> finite_or_none({"a": [1.0, float("nan")], "b": (float("inf"),)})
    {'a': [1.0, None], 'b': [None]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [finite_or_none(v) for v in value]
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    return value


@dataclass
class _Result:
    layers: list[str]  # module names (the root is ""), by first call
    kinds: list[str]  # their class names
    numel: list[list[int]]  # [step][layer]: elements output (or gradient elements)
    calls: list[list[int]]  # outputs (or gradients) measured
    step_numbers: list[int]  # each row's step, from 0 when the probe was made or reset
    overwritten: dict[str, str | None]  # layer -> the in-place layer that changed its output

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready data; non-finite numbers become ``None``."""
        return {name: finite_or_none(value) for name, value in vars(self).items()}

    @property
    def steps(self) -> int:
        return len(self.step_numbers)


@dataclass
class ActivationStats(_Result):
    """:class:`ActivationProbe`'s statistics, ``[step][layer]`` (``nan``: a layer not called)."""

    mean: list[list[float]]
    std: list[list[float]]
    min: list[list[float]]
    max: list[list[float]]
    zero_frac: list[list[float]]
    saturated_frac: list[list[float]]
    extra: dict[str, list[list[float]]]
    sampled: list[list[int]]


@dataclass
class GradientStats(_Result):
    """Per-layer statistics of :class:`GradientProbe`, indexed ``[step][layer]``."""

    grad_std: list[list[float]]
    grad_norm: list[list[float]]


@dataclass(slots=True)
class _Seen:
    """An output measured this step: the tensor (weakly: a freed tensor's id is reused), its
    version then, the slots that measured it at that version, and what the probe made of it (a
    row, a gradient hook)."""

    ref: weakref.ref[Tensor]
    version: int
    slots: list[int]
    made: Any = None


class _Probe:
    """What both probes share: the layers, the hooks' lifetime, a step's rows, the ring, and the
    outputs changed in place after they were measured (:meth:`_watch`)."""

    _hook: Callable[[int], Callable[[nn.Module, Any, Any], None]]  # slot -> its forward hook
    step: Callable[[], None]

    def __init__(self, model: nn.Module, modules: ModuleFilter = None, *, keep: int = KEEP) -> None:
        self._layers = select_modules(model, modules)  # (name, module) per slot
        self.keep = _check_int("keep", keep, 1)
        self._handles: list[RemovableHandle] = []  # module hooks, tensor hooks of pending graphs
        self.reset()

    def reset(self) -> None:
        """Forget the kept steps, the layer order, the calls since the last step and the layers
        found overwritten."""
        self._ring: deque[StepRecords] = deque(maxlen=self.keep)  # (L,) per kept step
        self._stepped = 0  # steps closed since made or reset, dropped ones included
        self._order: dict[int, None] = {}  # slots, by first call
        self._rows: list[Tensor] = []  # this step's rows, flat: (W,) or (G * W,), on their devices
        self._calls: list[_Call] = []  # each row's slot, numel, sampled
        self._seen: dict[int, _Seen] = {}  # this step's measured outputs, by id
        self._overwritten: dict[int, int | None] = {}  # slot -> the in-place slot that did it

    def _watch(self, slot: int, module: nn.Module, args: Any, y: Tensor) -> _Seen | None:
        """Note that ``slot``'s call output ``y``: ``y``'s entry, with ``slot`` added to it when
        it was measured already unchanged (a container's output is its last child's:
        ``Sequential``, HF's ``ResNetConvLayer``); ``None`` for an inference tensor (no version).

        An output changed in place after it was measured (its ``_version`` moved) marks the
        layers that measured it overwritten: their numbers are of the value before. Seen when it
        comes out of an in-place layer (``nn.ReLU(inplace=True)``: that layer did it, when its one
        op moved the version by one), when a module reads it (``x += f(x)`` in a forward), when its
        gradient arrives, or at :meth:`step` if it is still alive (:meth:`_changed`).
        """
        if y.is_inference():
            return None
        x = args[0] if args and isinstance(args[0], Tensor) else None
        if x is not None and x is not y and (read := self._entry(x)) is not None:
            self._changed(read, None)
        if (seen := self._entry(y)) is not None:
            inplace = x is y and getattr(module, "inplace", False) is True
            alone = inplace and y._version == seen.version + 1  # its one op, nothing before
            if not self._changed(seen, slot if alone else None):
                seen.slots.append(slot)
                return seen
        seen = self._seen[id(y)] = _Seen(weakref.ref(y), y._version, [slot])
        return seen

    def _entry(self, t: Tensor) -> _Seen | None:
        hit = self._seen.get(id(t))
        return hit if hit is not None and hit.ref() is t else None

    def _changed(self, seen: _Seen, by: int | None) -> bool:
        """Whether ``seen``'s tensor (if alive) changed since it was measured; if so its slots
        are marked overwritten, ``by`` an in-place layer or ``None`` (an operation between)."""
        t = seen.ref()
        if t is None or t._version == seen.version:
            return False
        for slot in seen.slots:
            self._overwritten.setdefault(slot, by)
        return True

    def __enter__(self) -> Self:
        if self._handles:
            raise RuntimeError(f"{type(self).__name__} is already active; enter it once")
        for slot, (_, module) in enumerate(self._layers):
            self._handles.append(module.register_forward_hook(self._hook(slot)))
        return self

    def __exit__(self, *exc_info: object) -> None:
        while self._handles:
            self._handles.pop().remove()

    def _close_step(self, row: Sequence[str], extra: Sequence[str] = ()) -> _Calls:
        """Close a step: its rows, each the fields ``row`` then ``extra`` names, stacked (C, W)
        and copied to the host at once, as :class:`_Calls`."""
        for seen in self._seen.values():  # changed after the last look?
            self._changed(seen, None)
        rows, calls = self._rows, self._calls
        self._rows, self._calls, self._stepped, self._seen = [], [], self._stepped + 1, {}
        self._handles = [h for h in self._handles if h.hooks_dict_ref() is not None]  # alive
        if any(r.device != rows[0].device for r in rows):  # a model across devices
            rows = [r.to(rows[0].device) for r in rows]
        width = len(row) + len(extra)
        wide = torch.cat(rows).view(-1, width) if rows else torch.zeros(0, width)  # (C, W)
        host = wide.cpu().numpy().astype(np.float64, copy=False)  # float32 rows widen exactly
        fields: Iterator[FloatArray] = iter(host.T)  # W x (C,), in the order they were stacked
        slot, numel, sampled = np.array(calls, dtype=np.int64).reshape(-1, 3).T  # 3 x (C,)
        named = {name: next(fields) for name in row}
        user = {name: next(fields) for name in extra}
        return _Calls(len(self._layers), slot, numel, sampled, named, user)

    def _kept(self, stats: Sequence[str], extra: Sequence[str] = ()) -> StepRecords:
        """The kept steps' records (of ``stats`` and ``extra``), (T, layers) with the layers in
        first-call order."""
        if not self._ring:
            return np.empty((0, len(self._order)), _step_dtype(tuple(stats), tuple(extra)))
        return np.stack(self._ring)[:, list(self._order)]  # T x (L,) -> (T, layers)

    def _common(self, kept: StepRecords) -> dict[str, Any]:
        """The fields both results have (see :class:`_Result`), ``kept`` from :meth:`_kept`."""
        names, kinds = zip(*[(n, type(m).__name__) for n, m in self._layers], strict=True)
        by = {names[s]: None if b is None else names[b] for s, b in self._overwritten.items()}
        return {
            "layers": [names[s] for s in self._order],
            "kinds": [kinds[s] for s in self._order],
            "numel": kept["numel"].tolist(),
            "calls": kept["calls"].tolist(),
            "step_numbers": list(range(self._stepped - len(self._ring), self._stepped)),
            "overwritten": by,
        }


class ActivationProbe(_Probe):
    r"""Record per-layer activation statistics of ``model`` while it runs, step by step.

    A call of a selected module copies its sample :math:`x_1 \dots x_m` (the elements of
    :func:`first_float_tensor` of its output :math:`y` that :func:`sample_indices` names, in
    :math:`y`'s dtype: a later in-place op may change :math:`y`) and computes the user statistics
    :math:`f_k(y)`. :meth:`step` stacks the samples of one length and device, reduces each to a
    row in float64 (one batch of kernels per length, not per call),

    .. math::
        \big(\textstyle\sum_i x_i,\ \sum_i (x_i - \bar x)^2,\ \min_i x_i,\ \max_i x_i,\
        \#\{i : x_i \ne 0\},\ \#\{i : |x_i| \ge s\},\ f_1(y), \dots, f_E(y)\big)

    and pools them per layer (sums added) into mean and std (see :mod:`normlab.probe`),
    min, max, ``extra[name]`` (the mean of :math:`f_k` over the calls), the fractions
    :math:`\text{zero\_frac} = \#\{x_i = 0\} / m` (dead ReLU units) and
    :math:`\text{saturated\_frac} = \#\{|x_i| \ge s\} / m` (tanh units pinned at :math:`\pm 1`).
    A ``nan`` element is neither 0 nor saturated, and makes mean, std, min and max ``nan``.

    An output changed in place after its call (by ``nn.ReLU(inplace=True)`` after a Linear, or
    ``x += f(x)`` in a forward) is measured as it was at the call, and its layer is named in the
    result's ``overwritten`` (``{layer: the in-place layer that changed it, or None}``, over
    the steps since the probe was made or reset): a hidden activation.

    Args:
        model, modules: the network, and which of its modules (see :func:`select_modules`).
        stats: ``name -> function(Tensor) -> Tensor`` of one element (best on the output's
            device), given every call's whole detached output.
        saturation: :math:`s`, a positive number, or ``None`` (default): not measured, ``nan``.
        zeros: count the elements that are exactly 0 (``zero_frac``, the default); ``False``:
            not counted, ``nan`` (a pass fewer over each whole output).
        sample_size: elements sampled per output, at least 1 (until :meth:`step`, at most
            calls x ``sample_size`` wait); ``None``: every element, reduced at once (slower).
        keep: the most steps kept, in [1, 2**24]; the oldest go first.

    Shape: a sample :math:`(m)`; a step's samples of one length :math:`(G, m)`, each reduced to
    a row of :data:`_ROW` and the :math:`E` user statistics.

    Example::

        >>> net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        >>> with ActivationProbe(net, stats={"abs_mean": lambda y: y.abs().mean()}) as probe:
        ...     for _ in range(3):
        ...         _ = net(torch.randn(32, 8))
        ...         probe.step()
        >>> stats = probe.result()  # the ReLU's min is 0 or more; 32 x 16 < 1024: all sampled
        >>> stats.layers, stats.steps, list(stats.extra), stats.min[-1][1] >= 0, stats.sampled[-1]
        (['0', '1', '2'], 3, ['abs_mean'], True, [512, 512, 32])
    """

    def __init__(
        self,
        model: nn.Module,
        modules: ModuleFilter = None,
        stats: Mapping[str, Statistic] | None = None,
        *,
        saturation: float | None = None,
        zeros: bool = True,
        sample_size: int | None = SAMPLE_SIZE,
        keep: int = KEEP,
    ) -> None:
        self.saturation = _check_saturation(saturation)
        if not isinstance(zeros, bool):
            raise TypeError(f"zeros must be True or False, got {zeros!r}")
        self.zeros = zeros
        size = sample_size
        self.sample_size = size if size is None else _check_int("sample_size", size, 1)
        self.stats = _check_stats(stats)
        self._indices: dict[tuple[int, torch.device], Tensor] = {}  # sample_indices by numel
        self._buffers: dict[_Key, Tensor] = {}  # (G, m) by sample length, dtype, device: reused
        super().__init__(model, modules, keep=keep)

    def reset(self) -> None:
        super().reset()
        self._samples: dict[_Key, list[_Pending]] = {}  # the buffered samples' calls, by buffer

    def _hook(self, slot: int) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            """Copy one call's sample, (m,) on the output's device; nothing waits for it."""
            y = output if type(output) is Tensor else first_float_tensor(output)
            if y is None or not y.is_floating_point() or (n := y.numel()) == 0:
                return
            self._order.setdefault(slot)
            seen = self._watch(slot, module, args, y)
            if self.sample_size is None:  # every element: reduced now, not copied
                return self._add_whole(y, slot, seen)
            x, size, device = y.detach(), self.sample_size, y.device
            user = [_user_value(k, f(x), device) for k, f in self.stats.items()]
            if (index := self._indices.get((n, device))) is None:
                index = self._indices[(n, device)] = sample_indices(n, size).to(device)
            key = (index.shape[0], x.dtype, device)  # m = min(n, size)
            calls = self._samples.setdefault(key, [])
            if (buffer := self._buffers.get(key)) is None or buffer.shape[0] == len(calls):
                buffer = self._grow(key, len(calls), x)
            torch.take(x, index, out=buffer[len(calls)])  # (n,) -> (m,)
            calls.append(((slot, n, key[0]), user))  # (slot, numel, sampled), f_k(y)

        return hook

    def _grow(self, key: _Key, held: int, like: Tensor) -> Tensor:
        """The buffer (G, m) of ``key`` grown to (2G, m), at least 8 rows; ``held`` rows kept."""
        with torch.inference_mode(False):  # writable in and out of inference mode
            grown = like.new_empty((2 * held or 8, key[0]))
            if (buffer := self._buffers.get(key)) is not None:
                grown[:held] = buffer[:held]
        self._buffers[key] = grown
        return grown

    def _add_samples(self, samples: Tensor, calls: Sequence[_Pending]) -> None:
        """Reduce G samples (G, m) of ``calls`` to this step's rows (G, W)."""
        row = _sample_rows(samples, self.zeros, self.saturation)  # (G,) each
        meta, user = zip(*calls, strict=True)
        extra = [torch.stack(f) for f in zip(*user, strict=True)]  # G x E -> E x (G,)
        columns = [row[name] for name in _ROW] + extra  # W x (G,), float64
        self._rows.append(torch.stack(columns, dim=1).view(-1))  # (G, W) -> (G * W,)
        self._calls += meta

    def _add_whole(self, y: Tensor, slot: int, seen: _Seen | None) -> None:
        """A row (W,) for one whole output :math:`y`, or the row made of the same tensor
        unchanged (see :meth:`_watch`): the statistics are functions of :math:`y`."""
        row: Tensor | None = seen.made if seen is not None else None
        if row is None:
            row = self._whole_row(y.detach())
            if seen is not None:
                seen.made = row
        self._rows.append(row)
        self._calls.append((slot, y.numel(), y.numel()))

    def _whole_row(self, y: Tensor) -> Tensor:
        """One whole output's row (W,): :func:`_output_row` and the user statistics."""
        row = _output_row(y, self.zeros, self.saturation)  # () each
        user = [_user_value(k, f(y), y.device) for k, f in self.stats.items()]
        return torch.stack([row[name] for name in _ROW] + user)  # (W,), in the widest dtype

    def step(self) -> None:
        """Close the current step (even an empty one: ``nan``); one copy to the host."""
        for key, group in self._samples.items():  # (G, m) -> (G, W) per sample length
            self._add_samples(self._buffers[key][: len(group)], group)
        self._samples = {}
        calls = self._close_step(_ROW, list(self.stats))  # (C,) each
        self._ring.append(_activation_step(calls, self.zeros, self.saturation))  # (L,) each

    def result(self) -> ActivationStats:
        """The kept steps; calls since the last :meth:`step` close a step first."""
        if self._samples or self._calls:
            self.step()
        kept = self._kept(_MOMENTS, list(self.stats))  # (T, layers)
        moments: dict[str, Any] = {name: kept[name].tolist() for name in _MOMENTS}
        extra = {name: kept["extra"][name].tolist() for name in self.stats}
        sampled = kept["sampled"].tolist()
        return ActivationStats(**self._common(kept), **moments, extra=extra, sampled=sampled)


class GradientProbe(_Probe):
    r"""Record per-layer gradient statistics: the loss gradient w.r.t. each layer's output.

    The forward hook of each selected module hooks its measured output :math:`y` (when it
    requires grad), to which the backward pass hands :math:`g = \partial L / \partial y`: that of
    the value :math:`y` had at the call even if an in-place op changes it later (a tensor hook
    registered before an in-place op sees the gradient of the value before it), as
    ``overwritten`` says (see :class:`ActivationProbe`). Each gradient's row is its
    sum and squared deviations (:func:`_sums`: a vanishing gradient's tiny squares stay above 0),
    pooled by :meth:`step` over a layer's :math:`n` elements as the activations are (see
    :mod:`normlab.probe`), :math:`D = \sum_i (g_i - \bar g)^2`:

    .. math::
        \text{grad\_std} = \sqrt{\frac{D}{n - 1}}, \qquad
        \text{grad\_norm} = \sqrt{\textstyle\sum_i g_i^2} = \sqrt{D + n \bar g^2}

    A graph built inside the ``with`` block but run backward after it records nothing. The
    arguments are as for :class:`ActivationProbe`.

    Example::

        >>> net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        >>> with GradientProbe(net) as probe:
        ...     for _ in range(2):
        ...         net(torch.randn(32, 8)).pow(2).mean().backward()
        ...         probe.step()
        >>> probe.result().layers, probe.result().numel[-1], probe.result().steps
        (['0', '1', '2'], [512, 512, 32], 2)
    """

    def _hook(self, slot: int) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            y = output if type(output) is Tensor else first_float_tensor(output)
            if y is not None and y.is_floating_point():
                self._order.setdefault(slot)
                if not y.requires_grad:
                    return
                seen = cast(_Seen, self._watch(slot, module, args, y))  # no inference tensor
                if seen.made is None:  # not hooked yet: one gradient for all its slots
                    seen.made = y.register_hook(self._on_grad(seen))
                    self._handles.append(seen.made)

        return hook

    def _on_grad(self, seen: _Seen) -> Callable[[Tensor], None]:
        """The hook of one output's gradient, that of its value when measured: a row for each
        layer that output is of."""

        def on_grad(grad: Tensor) -> None:
            self._changed(seen, None)  # changed since the forward?
            if (n := grad.numel()) > 0:
                row = _sums(grad.detach())  # (...) -> (2,)
                self._rows += [row] * len(seen.slots)
                self._calls += [(slot, n, n) for slot in seen.slots]

        return on_grad

    def step(self) -> None:
        """Close the current step; one copy to the host for all layers."""
        self._ring.append(_gradient_step(self._close_step(_GRADIENT_ROW)))  # (L,) each

    def result(self) -> GradientStats:
        """The kept steps; gradients since the last :meth:`step` close a step first."""
        if self._calls:
            self.step()
        kept = self._kept(_GRADIENT_STATS)  # (T, layers)
        std, norm = kept["grad_std"].tolist(), kept["grad_norm"].tolist()
        return GradientStats(**self._common(kept), grad_std=std, grad_norm=norm)
