r"""Per-layer statistics of any ``nn.Module``: activations on the way forward, gradients back.

A network that will not train shows it layer by layer (Glorot & Bengio, 2010, "Understanding
the difficulty of training deep feedforward neural networks"). The probes are context managers
whose hooks go on ``__exit__``. A call of a watched module copies a sample of its output (one
kernel on its device); ``step()`` reduces the step's samples to rows of sums, copies them to the
host at once, pools them per layer into a ring of the last ``keep`` steps (call it once per
training step: samples wait until then). A row holds a call's :math:`m_c` elements' sum and, in
two passes, their squared deviations from their own mean :math:`\bar x_c` (a collapsed
sigmoid's float64 0.5 +- 1e-9 keeps its std, which :math:`\sum x^2 - m\bar x^2` cancels away),
in float64, or in float32 on the CPU where the squares neither underflow nor overflow (see
:func:`_sums`). Over the :math:`m = \sum_c m_c` elements pooled for a layer (Chan, Golub &
LeVeque, 1979):

.. math::
    \text{mean} = \frac{1}{m}\sum_c \sum_{i \in c} x_i, \qquad
    \text{std} = \sqrt{\frac{\sum_c \big(\sum_{i \in c} (x_i - \bar x_c)^2
        + m_c (\bar x_c - \text{mean})^2\big)}{m - 1}}

(unbiased, as ``Tensor.std()``; ``nan`` for :math:`m \le 1`, exactly 0 when min equals max).
"""

from __future__ import annotations

import fnmatch
import math
import re
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
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
FloatArray = npt.NDArray[np.float64]
_Key = tuple[int, torch.dtype, torch.device]  # a sample's length, dtype and device
_Call = tuple[tuple[int, int, int], list[Tensor]]  # (slot, numel, sampled), f_k(y)


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


def _pool(
    rows: FloatArray, pooled: FloatArray, counts: npt.NDArray[np.int64]
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Each layer's mean, sum of squared deviations and unbiased std (``nan`` for m <= 1), (L,)
    each, from its calls' rows (C, 2+) of sums and squared deviations: Chan, Golub & LeVeque's
    pooling (see :mod:`normlab.probe`)."""
    m, slots, pooled_m = counts[:, 2], counts[:, 0], pooled[:, -2]  # (C,) (C,) (L,)
    with np.errstate(divide="ignore", invalid="ignore"):  # layers not called: nan
        mean = pooled[:, 0] / pooled_m  # (L,)
        between = m * (rows[:, 0] / m - mean[slots]) ** 2  # (C,)
        deviations = pooled[:, 1] + np.bincount(slots, between, minlength=len(pooled))  # (L,)
        std = np.where(pooled_m > 1, np.sqrt(deviations / (pooled_m - 1)), np.nan)
    return mean, deviations, std


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
        self._ring: deque[FloatArray] = deque(maxlen=self.keep)  # (L, K) per step, by slot
        self._stepped = 0  # steps closed since made or reset, dropped ones included
        self._order: dict[int, None] = {}  # slots, by first call
        self._rows: list[Tensor] = []  # this step's rows, flat: (W,) or (R * W,), on their devices
        self._calls: list[tuple[int, int, int]] = []  # each row's slot, numel, sampled
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

    def _gather(self, width: int) -> tuple[FloatArray, FloatArray, npt.NDArray[np.int64]]:
        """Close a step: its rows (C, W) on the host (one copy), each layer's sums of them and
        counts (L, W + 3: numel, sampled, calls), each row's slot, numel and sampled (C, 3)."""
        for seen in self._seen.values():  # changed after the last look?
            self._changed(seen, None)
        rows, calls = self._rows, np.array(self._calls, dtype=np.int64).reshape(-1, 3)
        self._rows, self._calls, self._stepped, self._seen = [], [], self._stepped + 1, {}
        self._handles = [h for h in self._handles if h.hooks_dict_ref() is not None]  # alive
        if any(r.device != rows[0].device for r in rows):  # a model across devices
            rows = [r.to(rows[0].device) for r in rows]
        wide = torch.cat(rows).view(-1, width) if rows else torch.zeros(0, width)  # (C, W)
        host = wide.cpu().numpy().astype(np.float64, copy=False)  # float32 rows widen exactly
        pooled = np.zeros((len(self._layers), width + 3))
        np.add.at(pooled, calls[:, 0], np.column_stack([host, calls[:, 1:], np.ones(len(calls))]))
        return host, pooled, calls

    def _history(self, width: int) -> tuple[FloatArray, dict[str, Any]]:
        """The kept steps (closing a pending one) as (T, layers, K) in first-call order, ending in
        numel, sampled, calls; and the fields of :class:`_Result`."""
        if self._calls:
            self.step()
        order, held = list(self._order), len(self._ring)
        values = np.stack(self._ring)[:, order] if held else np.zeros((0, len(order), width))
        numel, _, calls = values[:, :, -3:].astype(np.int64).transpose(2, 0, 1).tolist()
        names, kinds = zip(*[(n, type(m).__name__) for n, m in self._layers], strict=True)
        common: dict[str, Any] = {"layers": [names[s] for s in order]}
        common["kinds"] = [kinds[s] for s in order]
        numbers = list(range(self._stepped - held, self._stepped))
        by = {names[s]: None if b is None else names[b] for s, b in self._overwritten.items()}
        common |= {"numel": numel, "calls": calls, "step_numbers": numbers, "overwritten": by}
        return values, common


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

    Shape: a sample :math:`(m)`, a step's rows :math:`(C, 6 + E)`, a kept step :math:`(L, 9 + E)`.

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
        self._samples: dict[_Key, list[_Call]] = {}  # the buffered rows' calls, by buffer

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
            calls.append(((slot, n, key[0]), user))

        return hook

    def _grow(self, key: _Key, held: int, like: Tensor) -> Tensor:
        """The buffer (G, m) of ``key`` grown to (2G, m), at least 8 rows; ``held`` rows kept."""
        with torch.inference_mode(False):  # writable in and out of inference mode
            grown = like.new_empty((2 * held or 8, key[0]))
            if (buffer := self._buffers.get(key)) is not None:
                grown[:held] = buffer[:held]
        self._buffers[key] = grown
        return grown

    def _add_rows(self, samples: Tensor, calls: Sequence[_Call]) -> None:
        """Reduce G samples (G, m) of ``calls`` to this step's rows (G, W)."""
        x, s = samples.double(), self.saturation  # (G, m)
        total = x.sum(1)  # (G, m) -> (G,)
        centered = x - total[:, None] / x.shape[1]  # (G, m): the second pass
        columns = [total, (centered * centered).sum(1), x.amin(1), x.amax(1)]  # (G,) each
        none = x.new_zeros(len(x))  # (G,): a count not made
        columns.append(_count(torch.ne, x, 0, dim=1) if self.zeros else none)
        columns.append(_count(torch.ge, x.abs(), s, dim=1) if s is not None else none)
        meta, user = zip(*calls, strict=True)
        columns += [torch.stack(f) for f in zip(*user, strict=True)]  # G x E -> E x (G,)
        self._rows.append(torch.stack(columns, dim=1).view(-1))  # W x (G,) -> (G * W,), float64
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
        """Reduce one whole output to a row (W,): its sums by :func:`_sums`, min and max in its
        own dtype, the counts by :func:`_count`, the user statistics."""
        s = self.saturation
        low, high = y.amin(), y.amax()  # exact in y's dtype; two passes beat aminmax's one
        nonzero = _count(torch.ne, y, 0) if self.zeros else y.new_zeros(())  # no flat copy
        saturated = _count(torch.ge, y.abs(), s) if s is not None else y.new_zeros(())
        user = [_user_value(k, f(y), y.device) for k, f in self.stats.items()]
        rest = torch.stack([low, high, nonzero, saturated, *user])  # (W - 2,), widest dtype
        return torch.cat([_sums(y), rest])  # (W,): widened exactly with the step's rows

    def step(self) -> None:
        """Close the current step (even an empty one: ``nan``); one copy to the host."""
        for key, group in self._samples.items():  # (G, m) -> (G, W) per sample length
            self._add_rows(self._buffers[key][: len(group)], group)
        self._samples = {}
        rows, pooled, counts = self._gather(6 + len(self.stats))  # (C, W) (L, W + 3) (C, 3)
        low, high = np.full(len(pooled), np.inf), np.full(len(pooled), -np.inf)
        m, calls, slots = pooled[:, -2], pooled[:, -1], counts[:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):  # nan, and layers not called
            np.minimum.at(low, slots, rows[:, 2])  # (C,) -> (L,)
            np.maximum.at(high, slots, rows[:, 3])
            mean, _, std = _pool(rows, pooled, counts)  # (L,) each
            zero_frac = (m - pooled[:, 4]) / m if self.zeros else np.full(len(m), np.nan)
            saturated_frac = pooled[:, 5] / m if self.saturation else np.full(len(m), np.nan)
            extra = pooled[:, 6:-3] / calls[:, None]  # (L, E)
        constant = (low == high) & (m > 1)  # exactly 0, not the one-pass formula's rounding
        std = np.where(constant, 0.0, std)
        low, high = np.where(m > 0, low, np.nan), np.where(m > 0, high, np.nan)
        moments = [mean, std, low, high, zero_frac, saturated_frac]
        self._ring.append(np.column_stack([*moments, extra, pooled[:, -3:]]))  # (L, 9 + E)

    def result(self) -> ActivationStats:
        """The kept steps; calls since the last :meth:`step` close a step first."""
        if self._samples:
            self.step()
        values, common = self._history(9 + len(self.stats))  # (T, layers, 9 + E)
        columns = {k: values[:, :, j].tolist() for j, k in enumerate(_MOMENTS)}
        extra = {name: values[:, :, 6 + k].tolist() for k, name in enumerate(self.stats)}
        sampled = values[:, :, -2].astype(np.int64).tolist()
        return ActivationStats(**common, **columns, extra=extra, sampled=sampled)


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
    arguments are as for :class:`ActivationProbe`; a kept step is :math:`(L, 5)`.

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
        rows, pooled, counts = self._gather(2)  # (C, 2) (L, 2 + 3) (C, 3)
        (mean, deviations, std), n = _pool(rows, pooled, counts), pooled[:, 2]  # (L,) each
        with np.errstate(invalid="ignore"):  # layers not called: nan
            norm = np.where(n > 0, np.sqrt(deviations + n * mean**2), np.nan)
        self._ring.append(np.column_stack([std, norm, pooled[:, 2:]]))

    def result(self) -> GradientStats:
        """The kept steps; gradients since the last :meth:`step` close a step first."""
        values, common = self._history(5)  # (T, layers, 5)
        std, norm = values[:, :, 0].tolist(), values[:, :, 1].tolist()
        return GradientStats(**common, grad_std=std, grad_norm=norm)
