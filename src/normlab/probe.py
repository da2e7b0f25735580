r"""Streaming per-layer statistics of any ``nn.Module``: activations forward, gradients backward.

A network that will not train usually shows it layer by layer: the activation scale shrinks or
grows with depth, ReLU units go silent, tanh units pin at :math:`\pm 1`, gradients fade on the
way back (Glorot & Bengio, 2010, "Understanding the difficulty of training deep feedforward
neural networks"). :class:`ActivationProbe` and :class:`GradientProbe` watch those numbers on any
model without changing it: they are context managers that register hooks on ``__enter__`` and
remove them on ``__exit__`` (also when the body raises), and stream small statistics instead of
keeping activations.

How the probes measure (the decisions a user can rely on):

- **Layers.** By default every leaf module (no children) and every module holding parameters of
  its own (``nn.MultiheadAttention`` computes with ``in_proj_weight`` and never calls its
  ``out_proj`` child). A filter picks others (see ``modules`` below). Layers appear in the order
  of their first call; a selected module that is never called is left out.
- **Which tensor.** A module's output is searched depth first (tuples, lists, dict values in
  order) for the first floating-point tensor: the sequence output of ``nn.LSTM`` (not
  ``(h, c)``), the attention output of ``nn.MultiheadAttention`` (not its weights). An output
  with no floating tensor (``None``, integers) is not measured.
- **Steps.** A step is everything between two :meth:`~ActivationProbe.step` calls. Several
  calls of one module inside a step (several forward passes, or a layer shared by two places)
  are pooled: the statistics are over the elements of all of them, and ``calls`` says how many
  outputs that was. :meth:`~ActivationProbe.result` closes a pending step, so a probe that
  never calls ``step`` still reports one.
- **The sample.** Every activation statistic is computed on a deterministic sample of each
  output: ``sample_size`` elements (1024 by default) spread evenly over the output and over
  every feature, channel and pixel (:func:`sample_indices` says which). An output of at most
  ``sample_size`` elements is measured whole, and ``sample_size=None`` measures every element
  of every output (slower). With the default, a layer's std is typically within a few percent
  of the whole output's, and a ``nan`` or ``inf`` outside the sample goes unseen. Gradient
  statistics are over every element.
- **Cost.** A call copies its sample into a preallocated row on the output's device and does
  nothing else; all rows are reduced together there (a few passes over a (calls, sample)
  grid), and :meth:`~ActivationProbe.step` makes one device-to-host transfer per device for all
  layers. Memory does not grow with the number of steps beyond one small row of numbers per
  layer and step, and no activation or gradient tensor is kept (unless ``keep=True``).

The statistics of a sample :math:`x_1 \dots x_m`:

.. math::
    \text{mean} = \frac{1}{m}\sum_i x_i, \qquad
    \text{std} = \sqrt{\frac{\sum_i x_i^2 - m\,\text{mean}^2}{m - 1}}, \qquad
    \min_i x_i, \qquad \max_i x_i,

the unbiased std, as ``Tensor.std()`` (``nan`` for :math:`m = 1`; exactly 0 when min equals
max); ``zero_frac``, the fraction exactly 0 (dead ReLU units); ``saturated_frac``, the fraction
with :math:`|x| \ge` ``saturation``; and a histogram over fixed bins. Sums are taken in the
sample's dtype (float32, or float64 for a float64 output) and combined in float64; the one-pass
std loses digits when :math:`|\text{mean}|` dwarfs std (relative error about
:math:`10^{-7} (\text{mean}/\text{std})^2` in float32).
"""

from __future__ import annotations

import builtins
import fnmatch
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, cast

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

Statistic = Callable[[Tensor], Tensor]
"""A user statistic: the module's output (detached) in, one number as a tensor out."""

ModuleFilter = (
    type[nn.Module]
    | tuple[type[nn.Module], ...]
    | str
    | re.Pattern[str]
    | Sequence[str]
    | Callable[[str, nn.Module], bool]
    | None
)
"""Which modules a probe watches; see :class:`ActivationProbe`."""

BINS = 40
RANGE = (-4.0, 4.0)
SATURATION = 0.99
SAMPLE_SIZE = 1024
MAX_BINS = 10_000
MAX_SAMPLE = 1 << 24  # float32 sums of 0/1 flags stay exact up to here
CHUNK_CALLS = 256  # at most this many calls are buffered on a device before they are reduced
GRID = 1 << 22  # elements of one sample buffer: 16 MiB of float32 (three such buffers)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Array = npt.NDArray[Any]


# -- picking modules and tensors -------------------------------------------------------------------


def _is_layer(module: nn.Module) -> bool:
    """A leaf, or a module that computes with parameters of its own (nn.MultiheadAttention)."""
    no_children = next(module.children(), None) is None
    own_params = next(module.parameters(recurse=False), None) is not None
    return no_children or own_params


def _is_type_list(value: object) -> bool:
    return (
        isinstance(value, tuple | list)
        and len(value) > 0
        and all(isinstance(t, type) and issubclass(t, nn.Module) for t in value)
    )


def select_modules(model: nn.Module, modules: ModuleFilter = None) -> list[tuple[str, nn.Module]]:
    """The ``(name, module)`` pairs of ``model`` that ``modules`` picks, in registration order.

    ``modules`` is one of:

    - ``None``: every leaf module and every module with parameters of its own;
    - a module class or a tuple (or list) of classes: ``isinstance`` over all modules;
    - a ``str``: a glob (:func:`fnmatch.fnmatchcase`, ``*`` also crosses dots) that must match
      the whole dotted name, e.g. ``"layers.*.linear1"``;
    - a compiled regular expression (``re.compile(...)``): must match the whole name;
    - a list or tuple of exact names (the root model is ``""``);
    - a callable ``(name, module) -> bool``.

    Each module is listed once, under its first name, even when it is registered in several
    places.

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` or ``modules`` is none of the above.
        ValueError: a name is not in the model, or the filter picks no module.

    >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> [name for name, _ in select_modules(net, nn.Linear)]
    ['0', '2']
    >>> [name for name, _ in select_modules(net, lambda name, m: name != "1")]
    ['', '0', '2']
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    named = list(model.named_modules())
    picked: list[tuple[str, nn.Module]]
    what: str
    if modules is None:
        picked = [(n, m) for n, m in named if _is_layer(m)]
        what = "leaf module or module with parameters"
    elif isinstance(modules, type):
        if not issubclass(modules, nn.Module):
            raise TypeError(f"modules: {modules.__name__} is not a subclass of torch.nn.Module")
        picked = [(n, m) for n, m in named if isinstance(m, modules)]
        what = f"module of type {modules.__name__}"
    elif _is_type_list(modules):
        types = tuple(cast(Sequence[type[nn.Module]], modules))  # checked by _is_type_list
        picked = [(n, m) for n, m in named if isinstance(m, types)]
        what = "module of type " + " or ".join(t.__name__ for t in types)
    elif isinstance(modules, str):
        pattern = modules
        picked = [(n, m) for n, m in named if fnmatch.fnmatchcase(n, pattern)]
        what = f"module whose name matches the glob {pattern!r}"
    elif isinstance(modules, re.Pattern):
        regex = modules
        picked = [(n, m) for n, m in named if regex.fullmatch(n)]
        what = f"module whose name matches the regular expression {regex.pattern!r}"
    elif isinstance(modules, tuple | list):
        if not all(isinstance(n, str) for n in modules):
            raise TypeError(
                "modules: a list must hold only names (str) or only module classes, "
                f"got {[type(n).__name__ for n in modules]}"
            )
        by_name = dict(named)
        unknown = [n for n in modules if n not in by_name]
        if unknown:
            shown = [n for n, _ in named[:8]]
            more = ", ..." if len(named) > 8 else ""
            raise ValueError(
                f"modules: {unknown} not in the model, use names of model.named_modules() "
                f"such as {shown}{more}"
            )
        wanted = set(modules)
        picked = [(n, m) for n, m in named if n in wanted]
        what = "module"
    elif callable(modules):
        predicate = modules
        picked = [(n, m) for n, m in named if predicate(n, m)]
        what = "module for which the callable returns True"
    else:
        raise TypeError(
            f"modules: {type(modules).__name__} not supported, use None, a module class or tuple "
            "of classes, a glob str, a compiled regex, a list of names or a callable(name, module)"
        )
    if not picked:
        raise ValueError(f"modules: the model has no {what}")
    return picked


def first_float_tensor(output: object) -> Tensor | None:
    """The tensor a probe measures in a module's output: the first floating-point tensor found.

    The search is depth first through tuples, lists and dict values (in order); ``None`` when
    there is none (an output of ``None``, of integer tensors, or of other objects).

    >>> lstm = nn.LSTM(3, 5)
    >>> out = lstm(torch.zeros(2, 1, 3))  # (output, (h, c))
    >>> first_float_tensor(out) is out[0]
    True
    """
    if isinstance(output, Tensor):
        return output if output.is_floating_point() else None
    if isinstance(output, Mapping):
        output = list(output.values())
    if isinstance(output, tuple | list):
        for item in output:
            found = first_float_tensor(item)
            if found is not None:
                return found
    return None


def _sample_step(numel: int, size: int | None) -> int:
    """The sample's step: the smallest ``s >= numel / size`` sharing no factor with ``numel``."""
    if size is None or numel <= size:
        return 1
    step = -(-numel // size)  # ceil
    while math.gcd(step, numel) != 1:
        step += 1
    return step


def sample_indices(numel: int, sample_size: int | None = SAMPLE_SIZE) -> Tensor:
    r"""Flat indices of the elements a probe samples from an output of ``numel`` elements.

    All of them (``0 .. numel - 1``) when there are at most ``sample_size`` (or it is ``None``);
    otherwise exactly ``sample_size`` distinct indices :math:`k s \bmod n`,
    :math:`k = 0 \dots` ``sample_size - 1``, where the step :math:`s` is the smallest integer
    :math:`\ge n /` ``sample_size`` with no factor in common with :math:`n`. The sample then
    spreads over the whole flattened (row-major) tensor, and since the size of one batch item
    divides :math:`n`, it visits every position of an item (every feature, every channel and
    pixel) equally often, give or take one.

    >>> sample_indices(12, sample_size=5)  # step 5: columns 0, 2, 1, 0, 2 of a (4, 3) output
    tensor([ 0,  5, 10,  3,  8])
    >>> sample_indices(4, sample_size=None)
    tensor([0, 1, 2, 3])
    """
    step = _sample_step(numel, sample_size)
    if step == 1:
        return torch.arange(numel)
    assert sample_size is not None
    return torch.arange(sample_size) * step % numel


# -- validation --------------------------------------------------------------------------------


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value}")
    return value


def _check_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a finite number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def _check_range(value: object) -> tuple[float, float]:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise TypeError(f"range must be a pair (low, high) of finite numbers, got {value!r}")
    low, high = (_check_number("range", v) for v in value)
    if not low < high:
        raise ValueError(f"range must have low < high, got {value!r}")
    return low, high


def _check_stats(stats: object) -> dict[str, Statistic]:
    if stats is None:
        return {}
    if not isinstance(stats, Mapping):
        raise TypeError(
            "stats must be a mapping name -> function(Tensor) -> Tensor, "
            f"got {type(stats).__name__}"
        )
    checked: dict[str, Statistic] = {}
    for name, fn in stats.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"stats: every name must be a non-empty str, got {name!r}")
        if not callable(fn):
            raise TypeError(f"stats[{name!r}] must be a function(Tensor) -> Tensor, got {fn!r}")
        checked[name] = fn
    return checked


def _user_value(name: str, value: object) -> Tensor:
    """A user statistic's result, checked: a tensor with one element."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"stats[{name!r}] must return a Tensor with one element, got {type(value).__name__}"
        )
    if value.numel() != 1:
        raise ValueError(
            f"stats[{name!r}] must return a Tensor with one element, got shape {tuple(value.shape)}"
        )
    return value.detach().reshape(())


# -- results -----------------------------------------------------------------------------------


def finite_or_none(value: Any) -> Any:
    """Nested lists, tuples and dicts with every non-finite float replaced by ``None``.

    What strict JSON accepts; the ``to_dict`` of the probes' results and the doctor's use it.

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
class LayerActivations:
    """One layer at one step: what :meth:`ActivationStats.last` returns per layer."""

    name: str
    kind: str
    mean: float
    std: float
    min: float
    max: float
    zero_frac: float
    saturated_frac: float
    hist: list[int]
    extra: dict[str, float]


@dataclass
class ActivationStats:
    """Per-layer activation statistics, as plain lists indexed ``[step][layer]``.

    Every statistic is over the sampled elements of the layer's outputs in the step (all of
    them for small outputs or ``sample_size=None``; see :mod:`normlab.probe`). ``hist`` is
    ``[step][layer][bin]``: counts in the bins between ``bin_edges`` (bin ``j`` is
    ``[edge_j, edge_j+1)``, the last one closed; values below the range count in the first bin,
    values above it in the last one; ``nan`` in none). A layer not called in a step has ``nan``
    statistics, zero counts and ``calls`` 0 there.

    Attributes:
        layers: module names (``model.named_modules()``; the root model is ``""``), in the order
            of their first call.
        kinds: the modules' class names.
        mean, std, min, max: of the sample (std unbiased).
        zero_frac: fraction of the sample exactly 0.
        saturated_frac: fraction of the sample with ``abs(x) >= saturation``.
        hist, bin_edges: the histogram of the sample.
        extra: the user statistics by name, each the mean over the calls of the step (computed
            on whole outputs).
        numel, sampled, calls: elements output, elements sampled, outputs measured.
        saturation, sample_size: the probe's settings.
    """

    layers: list[str]
    kinds: list[str]
    mean: list[list[float]]
    std: list[list[float]]
    min: list[list[float]]
    max: list[list[float]]
    zero_frac: list[list[float]]
    saturated_frac: list[list[float]]
    hist: list[list[list[int]]]
    bin_edges: list[float]
    extra: dict[str, list[list[float]]] = field(default_factory=dict)
    numel: list[list[int]] = field(default_factory=list)
    sampled: list[list[int]] = field(default_factory=list)
    calls: list[list[int]] = field(default_factory=list)
    saturation: float = SATURATION
    sample_size: int | None = SAMPLE_SIZE

    @property
    def steps(self) -> int:
        return len(self.mean)

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready data; non-finite numbers become ``None``."""
        return {name: finite_or_none(value) for name, value in vars(self).items()}

    def last(self) -> list[LayerActivations]:
        """Each layer's statistics at the final step, in layer order.

        Raises:
            ValueError: no step was recorded.
        """
        if not self.mean:
            raise ValueError("no step recorded: run the model inside the probe first")
        return [
            LayerActivations(
                name=name,
                kind=self.kinds[j],
                mean=self.mean[-1][j],
                std=self.std[-1][j],
                min=self.min[-1][j],
                max=self.max[-1][j],
                zero_frac=self.zero_frac[-1][j],
                saturated_frac=self.saturated_frac[-1][j],
                hist=self.hist[-1][j],
                extra={k: v[-1][j] for k, v in self.extra.items()},
            )
            for j, name in enumerate(self.layers)
        ]


@dataclass
class LayerGradients:
    """One layer at one step: what :meth:`GradientStats.last` returns per layer."""

    name: str
    kind: str
    grad_std: float
    grad_norm: float
    update_ratio: float | None


@dataclass
class GradientStats:
    """Per-layer gradient statistics, as plain lists indexed ``[step][layer]``.

    Attributes:
        layers, kinds: as in :class:`ActivationStats` (order of first forward call).
        grad_std: unbiased std of the loss gradient w.r.t. the layer's output, over every
            gradient element of the step.
        grad_norm: :math:`\\sqrt{\\sum g^2}` over the same elements (the Euclidean norm of the
            output gradient when there was one backward pass).
        update_ratio: with an optimizer, :math:`\\lVert \\Delta w \\rVert / \\lVert w \\rVert`
            of the layer's optimized parameters (all of them together, :math:`w` before the
            update), averaged over the optimizer steps of the step; ``nan`` for layers without
            optimized parameters or steps without an optimizer step. ``None`` without an
            optimizer.
        numel, calls: gradient elements and gradients measured.
    """

    layers: list[str]
    kinds: list[str]
    grad_std: list[list[float]]
    grad_norm: list[list[float]]
    update_ratio: list[list[float]] | None = None
    numel: list[list[int]] = field(default_factory=list)
    calls: list[list[int]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.grad_std)

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready data; non-finite numbers become ``None``."""
        return {name: finite_or_none(value) for name, value in vars(self).items()}

    def last(self) -> list[LayerGradients]:
        """Each layer's statistics at the final step, in layer order.

        Raises:
            ValueError: no step was recorded.
        """
        if not self.grad_std:
            raise ValueError("no step recorded: run forward and backward inside the probe first")
        ratio = self.update_ratio
        return [
            LayerGradients(
                name=name,
                kind=self.kinds[j],
                grad_std=self.grad_std[-1][j],
                grad_norm=self.grad_norm[-1][j],
                update_ratio=None if ratio is None else ratio[-1][j],
            )
            for j, name in enumerate(self.layers)
        ]


# -- shared machinery --------------------------------------------------------------------------


@dataclass(eq=False)
class _Layer:
    """A watched module: its slot in the selection, first-call order and this step's counters."""

    name: str
    module: nn.Module
    slot: int
    order: int = -1
    numel: int = 0
    sampled: int = 0
    calls: int = 0


@dataclass(eq=False)
class _Pending:
    """One device's buffered calls since the last fold, and the step's sums so far on it.

    Per call, the sample and the scalars are written into rows of preallocated buffers, so a
    call leaves no new Python object alive (the garbage collector would otherwise run often and
    walk every object of the process), and the fold reduces all rows at once.
    """

    values: Tensor  # (rows, k): per call, its k scalars (the user statistics)
    cells: list[list[Tensor]]  # the 0-dim views of values, by call and scalar
    slots: list[int] = field(default_factory=list)  # the layer of each buffered call
    grid: Tensor | None = None  # (rows, sample_size): one sample per call, nan-padded
    work: Tensor | None = None  # (rows, sample_size) scratch for the bin positions
    index: Tensor | None = None  # (rows, sample_size) int32 scratch for the bin numbers
    rows: list[Tensor] = field(default_factory=list)  # the rows of grid, as views
    parts: dict[tuple[int, int], tuple[Tensor, Tensor]] = field(default_factory=dict)  # (r, n):
    # row r split at n, (rows[r][:n], rows[r][n:]), for a small sample and its nan padding
    indices: dict[int, Tensor] = field(default_factory=dict)  # sample indices by numel
    lengths: list[int] = field(default_factory=list)  # the sample length of each call
    short: bool = False  # a sample shorter than its row was written since the last fold
    reduced: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # without a sample
    accumulators: list[Tensor] | None = None  # the step's per-layer sums on this device
    slot_list: list[int] = field(default_factory=list)  # the slots of the last fold ...
    slot_index: Tensor | None = None  # ... and their index tensor, reused while they repeat


def _buffers(rows: int, k: int, dtype: torch.dtype, device: torch.device) -> _Pending:
    with torch.inference_mode(False):  # written in place whatever mode the hooks run in
        values = torch.zeros(rows, k, dtype=dtype, device=device)
    return _Pending(values=values, cells=[list(row.unbind(0)) for row in values.unbind(0)])


def _buffer_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _mean_std(total: FloatArray, squares: FloatArray, n: IntArray) -> tuple[FloatArray, FloatArray]:
    """Mean and unbiased std from sums, ``nan`` where there is nothing (or one element)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        count = n.astype(np.float64)
        mean = np.where(n > 0, total / count, np.nan)
        var = (squares - total * mean) / (count - 1.0)
        std = np.where(n > 1, np.sqrt(np.maximum(var, 0.0)), np.nan)
    return mean, std


class _Probe:
    """What both probes share: the selection, enter and exit, the layer order, the transfer."""

    def __init__(self, model: nn.Module, modules: ModuleFilter) -> None:
        selected = select_modules(model, modules)
        self.model = model
        self._layers = [_Layer(name, module, slot) for slot, (name, module) in enumerate(selected)]
        self._ordered: list[_Layer] = []  # by first call
        self._handles: list[RemovableHandle] = []
        self._pending: dict[torch.device, _Pending] = {}
        self._rows = min(CHUNK_CALLS, len(self._layers))  # calls buffered between folds
        self._active = False

    def __enter__(self) -> Self:
        if self._active:
            raise RuntimeError(f"{type(self).__name__} is already active; enter it once")
        try:
            self._register()
        except BaseException:
            self._remove()
            raise
        self._active = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._active = False
        self._remove()

    @property
    def active(self) -> bool:
        """Whether the hooks are registered (inside the ``with`` block)."""
        return self._active

    def _register(self) -> None:
        for layer in self._layers:
            self._handles.append(layer.module.register_forward_hook(self._forward_hook(layer)))

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _forward_hook(self, layer: _Layer) -> Callable[[nn.Module, Any, Any], None]:
        raise NotImplementedError

    def _seen(self, layer: _Layer) -> None:
        layer.order = len(self._ordered)
        self._ordered.append(layer)

    def _slot_index(self, pending: _Pending, device: torch.device) -> Tensor:
        """The layer slot of each buffered call, on ``device`` (the same order is reused)."""
        if pending.slot_index is not None and pending.slot_list == pending.slots:
            return pending.slot_index
        index = torch.tensor(pending.slots, dtype=torch.long)  # (C,)
        if device.type == "cuda":  # pinned, so the copy does not wait for queued kernels
            index = index.pin_memory().to(device, non_blocking=True)
        pending.slot_list, pending.slot_index = list(pending.slots), index.to(device)
        return pending.slot_index

    def _fold(self, device: torch.device, pending: _Pending) -> None:
        """Reduce the buffered calls into the step's per-layer sums, on ``device``, no sync."""
        raise NotImplementedError

    def _identity(self, n: int) -> list[Array]:
        """Host versions of the accumulators holding nothing: their shapes, dtypes, start values."""
        raise NotImplementedError

    def _merge(self, a: list[Array], b: list[Array]) -> list[Array]:
        """Combine two devices' sums (a module that ran on several devices in one step)."""
        raise NotImplementedError

    def _drain(self) -> list[Array]:
        """Fold every device's buffered calls and bring the step's sums over, one transfer each."""
        n = len(self._layers)
        totals: list[Array] = []
        for device, pending in self._pending.items():
            self._fold(device, pending)
            if pending.accumulators is None:
                continue
            flat = torch.cat([a.reshape(-1).double() for a in pending.accumulators])
            host = flat.cpu().numpy()  # the step's one device -> host sync on this device
            pending.accumulators = None
            parts: list[Array] = []
            start = 0
            for empty in self._identity(n):
                part = host[start : start + empty.size].reshape(empty.shape)
                parts.append(part.astype(empty.dtype))
                start += empty.size
            totals = self._merge(totals, parts) if totals else parts
        return totals or self._identity(n)

    def _counters(self) -> IntArray:
        """This step's host counters per slot (numel, sampled, calls); resets them."""
        out = np.array([[x.numel, x.sampled, x.calls] for x in self._layers], dtype=np.int64)
        for layer in self._layers:
            layer.numel = layer.sampled = layer.calls = 0
        return out.reshape(len(self._layers), 3)

    def _has_pending(self) -> bool:
        return any(layer.calls for layer in self._layers)

    def _order(self) -> tuple[IntArray, list[str], list[str]]:
        slots = np.array([layer.slot for layer in self._ordered], dtype=np.int64)
        names = [layer.name for layer in self._ordered]
        kinds = [type(layer.module).__name__ for layer in self._ordered]
        return slots, names, kinds


# -- activations -------------------------------------------------------------------------------


@dataclass(eq=False)
class _ActivationStep:
    values: FloatArray  # (L, 6 + E): mean, std, min, max, zero_frac, saturated_frac, extras
    hist: IntArray  # (L, bins)
    counts: IntArray  # (L, 3): numel, sampled, calls


class ActivationProbe(_Probe):
    r"""Record per-layer activation statistics of ``model`` while it runs, step by step.

    Inside ``with ActivationProbe(model) as probe:`` every selected module's output is measured
    on each call, on a fixed-size sample (the module docstring says which tensor and which
    elements): mean, std, min, max, the fraction of exact zeros (dead ReLUs), the fraction with
    :math:`|x| \ge` ``saturation`` (tanh units pinned at :math:`\pm 1`; a sigmoid's low end is
    0, so pass a user statistic for it) and a histogram with fixed bins. Call :meth:`step` once
    per training step and :meth:`result` for the numbers.

    Args:
        model: the network to watch.
        modules: which modules, see :func:`select_modules`; ``None`` = every leaf module and
            every module with parameters of its own.
        stats: extra statistics, ``name -> function(Tensor) -> Tensor`` returning one number
            (best on the output's device); each gets the detached measured output of every call,
            and the step reports the mean over its calls in ``extra[name]``. The default set is
            always computed.
        bins: histogram bins, an integer in [1, 10000].
        range: ``(low, high)`` of the histogram; values outside count in the end bins.
        saturation: the threshold of ``saturated_frac``, a positive number.
        sample_size: elements sampled per output (at least 1); ``None`` takes every element
            of every output (slower).
        keep: keep a clone of each layer's latest output in :attr:`activations` (one
            activation per layer of memory).

    Raises:
        TypeError, ValueError: a bad argument; the message names it.

    Example::

        >>> net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        >>> with ActivationProbe(net, stats={"abs_mean": lambda y: y.abs().mean()}) as probe:
        ...     for _ in range(3):
        ...         _ = net(torch.randn(32, 8))
        ...         probe.step()
        >>> stats = probe.result()
        >>> stats.layers, stats.kinds
        (['0', '1', '2'], ['Linear', 'ReLU', 'Linear'])
        >>> len(stats.std), len(stats.std[0]), len(stats.hist[0][1]), list(stats.extra)
        (3, 3, 40, ['abs_mean'])
        >>> stats.min[-1][1] >= 0.0  # after the ReLU
        True
    """

    def __init__(
        self,
        model: nn.Module,
        modules: ModuleFilter = None,
        stats: Mapping[str, Statistic] | None = None,
        *,
        bins: int = BINS,
        range: tuple[float, float] = RANGE,  # the contract's name (torch.histogram's too)
        saturation: float = SATURATION,
        sample_size: int | None = SAMPLE_SIZE,
        keep: bool = False,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.bins = _check_int("bins", bins, 1, MAX_BINS)
        self.range = _check_range(range)
        self.saturation = _check_number("saturation", saturation)
        if self.saturation <= 0:
            raise ValueError(f"saturation must be a positive number, got {saturation!r}")
        if sample_size is not None:
            _check_int("sample_size", sample_size, 1, MAX_SAMPLE)
        self.sample_size = sample_size
        if not isinstance(keep, bool):
            raise TypeError(f"keep must be True or False, got {keep!r}")
        self.keep = keep
        self.stats = _check_stats(stats)
        super().__init__(model, modules)
        self.activations: dict[str, Tensor] = {}
        """With ``keep=True``: each layer's most recent measured output (a detached clone)."""
        self._steps: list[_ActivationStep] = []
        if sample_size is not None:  # the sample buffers stay under GRID elements per device
            self._rows = max(1, min(self._rows, GRID // sample_size))
        low, high = self.range
        self._scale = self.bins / (high - low)  # bin position = (x - low) * scale
        self._width = self.bins + 3  # counts per layer: the bins, zeros, saturated, nan (unused)
        self._offsets: dict[tuple[int, torch.device], Tensor] = {}  # (rows,) bincount offsets

    def _forward_hook(self, layer: _Layer) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self._active:
                x = output if type(output) is Tensor else first_float_tensor(output)
                if x is not None and x.is_floating_point() and x.numel() > 0:
                    self._measure(layer, x.detach() if x.requires_grad else x)

        return hook

    def _measure(self, layer: _Layer, x: Tensor) -> None:
        # Runs once per module call: every avoidable Python step is avoided. The call only
        # copies its sample; the fold reduces the samples of all calls together.
        n = x.numel()
        device = x.device
        flat = x.reshape(-1)  # (n,)
        pending = self._pending.get(device) or self._new_pending(device, flat.dtype)
        call = len(pending.slots)
        size = self.sample_size
        if size is None:  # every element, reduced right away
            dtype = pending.values.dtype
            every = (flat if flat.dtype is dtype else flat.to(dtype)).unsqueeze(0)  # (1, n)
            pending.reduced.append(self._reduce(every, *self._scratch(pending, n, dtype, device)))
            sampled = n
        elif n > size:  # a copy into the buffer: no view may keep x alive
            index = pending.indices.get(n)
            if index is None:
                index = pending.indices[n] = sample_indices(n, size).to(device)
            row = pending.rows[call]  # (size,)
            if flat.dtype is row.dtype:
                torch.index_select(flat, 0, index, out=row)
            else:
                row.copy_(flat[index])
            sampled = size
        else:  # small: all of it, and nan after it (the padding, counted nowhere)
            parts = pending.parts.get((call, n))
            if parts is None:
                row = pending.rows[call]
                parts = pending.parts[(call, n)] = (row[:n], row[n:])
            parts[0].copy_(flat)
            if n < size:
                parts[1].fill_(math.nan)
                pending.short = True
            sampled = n
        if self.stats:
            cells = pending.cells[call]
            for k, (name, fn) in enumerate(self.stats.items()):
                cells[k].copy_(_user_value(name, fn(x)))
        if layer.order < 0:
            self._seen(layer)
        layer.numel += n
        layer.sampled += sampled
        layer.calls += 1
        pending.slots.append(layer.slot)
        pending.lengths.append(sampled)
        if self.keep:
            self.activations[layer.name] = x.clone()
        if call + 1 == self._rows:
            self._fold(device, pending)

    def _new_pending(self, device: torch.device, dtype: torch.dtype) -> _Pending:
        dtype = _buffer_dtype(dtype)
        pending = _buffers(self._rows, len(self.stats), dtype, device)
        if self.sample_size is not None:
            shape = (self._rows, self.sample_size)
            with torch.inference_mode(False):
                pending.grid = torch.empty(shape, dtype=dtype, device=device)
                pending.work = torch.empty(shape, dtype=dtype, device=device)
                pending.index = torch.empty(shape, dtype=torch.int32, device=device)
            pending.rows = list(pending.grid.unbind(0))
        self._pending[device] = pending
        return pending

    def _scratch(
        self, pending: _Pending, n: int, dtype: torch.dtype, device: torch.device
    ) -> tuple[Tensor, Tensor]:
        """(1, n) scratch views for reducing a whole output: one buffer, as big as the largest."""
        if pending.work is None or pending.work.numel() < n:
            with torch.inference_mode(False):
                pending.work = torch.empty(n, dtype=dtype, device=device)
                pending.index = torch.empty(n, dtype=torch.int32, device=device)
        assert pending.index is not None
        return pending.work[:n].view(1, n), pending.index[:n].view(1, n)

    def _reduce(
        self, grid: Tensor, work: Tensor, index: Tensor, padding: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Every statistic of each row of ``grid`` (C, S), with a few passes over all rows.

        Returns ``(C, 4)`` float64 sum, sum of squares, min and max, and ``(C, width)`` int64
        counts: the bins, then the zeros and the saturated values, then nan (unused). With
        ``padding`` (C,), the number of nan each row was padded with: those are left out, and
        a row with a nan of its own has sum, squares, min and max nan.
        """
        rows, bins, width = grid.shape[0], self.bins, self._width
        inf = math.inf
        if padding is None:  # nan only from the data: it propagates, as it should
            total, squares = grid.sum(1), torch.mul(grid, grid, out=work).sum(1)
            low, high = grid.amin(1), grid.amax(1)
        else:
            own_nan = torch.ne(grid, grid, out=work).sum(1) > padding  # (C,)
            torch.nan_to_num(grid, nan=0.0, posinf=inf, neginf=-inf, out=work)
            total, squares = work.sum(1), work.mul_(work).sum(1)
            low = torch.nan_to_num(grid, nan=inf, posinf=inf, neginf=-inf, out=work).amin(1)
            high = torch.nan_to_num(grid, nan=-inf, posinf=inf, neginf=-inf, out=work).amax(1)
            total, squares, low, high = (
                torch.where(own_nan, math.nan, v) for v in (total, squares, low, high)
            )
        moments = torch.stack([total, squares, low, high], 1).double()  # (C, 4)

        torch.sub(grid, self.range[0], out=work).mul_(self._scale)  # (C, S) in bin widths
        work.clamp_(0, bins - 1).nan_to_num_(nan=bins + 2)  # outliers into the end bins
        index.copy_(work)  # truncation: the bin number, as no position is negative
        if rows > 1:  # row r counts into [r * width, (r + 1) * width)
            offsets = self._offsets.get((rows, grid.device))
            if offsets is None:
                offsets = torch.arange(0, rows * width, width, dtype=torch.int32)
                offsets = self._offsets[(rows, grid.device)] = offsets.to(grid.device)
            index.add_(offsets.unsqueeze(1))
        flat = index.view(-1)
        if grid.device.type == "cpu":
            counts = torch.bincount(flat, minlength=rows * width)
        else:  # bincount sizes its output from the data, which would wait for the device
            counts = torch.zeros(rows * width, dtype=torch.long, device=grid.device)
            ones = torch.ones((), dtype=torch.long, device=grid.device).expand(flat.numel())
            counts.index_add_(0, flat, ones)
        counts = counts.view(rows, width)
        torch.eq(grid, 0, out=work)  # 1.0 where exactly zero; a float sum of these is exact
        counts[:, bins].copy_(work.sum(1))
        torch.abs(grid, out=work).ge_(self.saturation)  # nan compares False
        counts[:, bins + 1].copy_(work.sum(1))
        return moments, counts

    def _fold(self, device: torch.device, pending: _Pending) -> None:
        calls = len(pending.slots)
        if calls == 0:
            return
        n, e = len(self._layers), len(self.stats)
        with torch.inference_mode(False), torch.no_grad():
            if pending.accumulators is None:
                pending.accumulators = [
                    torch.zeros(n, 2 + e, dtype=torch.float64, device=device),  # sums
                    torch.full((n,), math.inf, dtype=torch.float64, device=device),  # min
                    torch.full((n,), -math.inf, dtype=torch.float64, device=device),  # max
                    torch.zeros(n, self._width, dtype=torch.long, device=device),  # counts
                ]
            sums, lows, highs, counts = pending.accumulators
            slots = self._slot_index(pending, device)  # (C,)
            if pending.grid is not None:
                assert pending.work is not None and pending.index is not None
                padding = None
                if pending.short:
                    size = pending.grid.shape[1]
                    pads = [float(size - m) for m in pending.lengths]
                    padding = torch.tensor(pads, dtype=pending.grid.dtype).to(device)
                moments, found = self._reduce(
                    pending.grid[:calls], pending.work[:calls], pending.index[:calls], padding
                )
            else:
                moments = torch.cat([m for m, _ in pending.reduced])  # (C, 4)
                found = torch.cat([c for _, c in pending.reduced])  # (C, width)
            sums[:, :2].index_add_(0, slots, moments[:, :2])
            lows.scatter_reduce_(0, slots, moments[:, 2], "amin")
            highs.scatter_reduce_(0, slots, moments[:, 3], "amax")
            counts.index_add_(0, slots, found)
            if e:
                sums[:, 2:].index_add_(0, slots, pending.values[:calls].double())
        pending.short = False
        pending.slots.clear()
        pending.lengths.clear()
        pending.reduced.clear()

    def _identity(self, n: int) -> list[Array]:
        return [
            np.zeros((n, 2 + len(self.stats))),
            np.full(n, math.inf),
            np.full(n, -math.inf),
            np.zeros((n, self._width), dtype=np.int64),
        ]

    def _merge(self, a: list[Array], b: list[Array]) -> list[Array]:
        return [a[0] + b[0], np.minimum(a[1], b[1]), np.maximum(a[2], b[2]), a[3] + b[3]]

    def step(self) -> None:
        """Close the current step: fold its calls and bring the sums over in one sync.

        Every call closes a step, even one in which nothing ran (its statistics are ``nan``).
        """
        sums, lows, highs, counts = self._drain()
        host = self._counters()  # (L, 3): numel, sampled, calls
        sampled, calls = host[:, 1], host[:, 2]
        mean, std = _mean_std(sums[:, 0], sums[:, 1], sampled)
        lows = np.where(sampled > 0, lows, np.nan)
        highs = np.where(sampled > 0, highs, np.nan)
        std = np.where((sampled > 1) & (lows == highs), 0.0, std)  # constant: exactly 0
        with np.errstate(divide="ignore", invalid="ignore"):
            shares = counts[:, self.bins : self.bins + 2] / sampled[:, None]  # (L, 2)
            extras = sums[:, 2:] / calls[:, None]  # (L, E): mean over the calls
        values = np.column_stack([mean, std, lows, highs, shares, extras]).astype(np.float64)
        hist = np.asarray(counts[:, : self.bins], dtype=np.int64)
        self._steps.append(_ActivationStep(values=values, hist=hist, counts=host))

    def result(self) -> ActivationStats:
        """The statistics so far; forward calls since the last :meth:`step` close a step first."""
        if self._has_pending():
            self.step()
        slots, names, kinds = self._order()
        low, high = self.range
        columns: list[list[list[float]]] = [[] for _ in builtins.range(6 + len(self.stats))]
        hist: list[list[list[int]]] = []
        counts: list[list[list[int]]] = [[], [], []]
        for record in self._steps:
            values = record.values[slots]  # (layers, 6 + E)
            for k, column in enumerate(columns):
                column.append(values[:, k].tolist())
            hist.append(record.hist[slots].tolist())
            for k, rows in enumerate(counts):
                rows.append(record.counts[slots, k].tolist())
        mean, std, lows, highs, zero, saturated = columns[:6]
        return ActivationStats(
            layers=names,
            kinds=kinds,
            mean=mean,
            std=std,
            min=lows,
            max=highs,
            zero_frac=zero,
            saturated_frac=saturated,
            hist=hist,
            bin_edges=np.linspace(low, high, self.bins + 1).tolist(),
            extra={name: columns[6 + k] for k, name in enumerate(self.stats)},
            numel=counts[0],
            sampled=counts[1],
            calls=counts[2],
            saturation=self.saturation,
            sample_size=self.sample_size,
        )


# -- gradients ---------------------------------------------------------------------------------


@dataclass(eq=False)
class _GradientStep:
    values: FloatArray  # (L, 3): grad_std, grad_norm, update_ratio
    counts: IntArray  # (L, 3): numel, sampled (unused), calls


class GradientProbe(_Probe):
    r"""Record per-layer gradient statistics: the loss gradient w.r.t. each layer's output.

    The forward hook of every selected module registers a tensor hook on the measured output
    (the tensor :class:`ActivationProbe` measures, when it requires grad); the backward pass
    hands it :math:`g = \partial L / \partial y`, whose unbiased std and Euclidean norm are
    accumulated per step like the activation statistics. A later in-place op on :math:`y`
    (``ReLU(inplace=True)``) does not change which gradient arrives: the one of :math:`y`.

    With ``optimizer``, each optimizer step also measures every layer's update-to-weight ratio

    .. math::
        r = \frac{\lVert w_\text{after} - w_\text{before} \rVert}{\lVert w_\text{before} \rVert}

    over all of the layer's parameters that the optimizer updates, taken together; a probe step
    reports the mean over its optimizer steps. The parameters are copied before each optimizer
    step for this, and the copies freed after it.

    Args:
        model: the network to watch.
        modules: which modules, see :func:`select_modules`.
        optimizer: the ``torch.optim.Optimizer`` whose steps are measured, or ``None``.

    Example::

        >>> net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> with GradientProbe(net, optimizer=opt) as probe:
        ...     for _ in range(2):
        ...         opt.zero_grad()
        ...         net(torch.randn(32, 8)).pow(2).mean().backward()
        ...         opt.step()
        ...         probe.step()
        >>> grads = probe.result()
        >>> grads.layers, len(grads.grad_norm)
        (['0', '1', '2'], 2)
        >>> math.isnan(grads.update_ratio[-1][1])  # Tanh has no parameters
        True
    """

    def __init__(
        self,
        model: nn.Module,
        modules: ModuleFilter = None,
        *,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}"
            )
        super().__init__(model, modules)
        self.optimizer = optimizer
        self._steps: list[_GradientStep] = []
        self._grad_handles: list[RemovableHandle] = []  # tensor hooks of graphs not yet run
        self._before: dict[int, Tensor] = {}  # parameter id -> its copy before the update
        self._ratios: list[tuple[int, Tensor]] = []  # (slot, ratio) of this step's updates
        self._updates = 0  # optimizer steps in this probe step

    def _register(self) -> None:
        super()._register()
        if self.optimizer is not None:
            self._handles.append(self.optimizer.register_step_pre_hook(self._before_update))
            self._handles.append(self.optimizer.register_step_post_hook(self._after_update))

    def _remove(self) -> None:
        super()._remove()
        for handle in self._grad_handles:
            handle.remove()
        self._grad_handles.clear()
        self._before.clear()

    def _forward_hook(self, layer: _Layer) -> Callable[[nn.Module, Any, Any], None]:
        def on_grad(grad: Tensor) -> None:
            if self._active and grad.numel() > 0:
                self._measure(layer, grad.detach())

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not self._active:
                return
            y = output if type(output) is Tensor else first_float_tensor(output)
            if y is None or not y.is_floating_point():
                return
            if layer.order < 0:
                self._seen(layer)
            if y.requires_grad:
                if len(self._grad_handles) > 2 * CHUNK_CALLS + len(self._layers):
                    self._grad_handles = [h for h in self._grad_handles if _alive(h)]
                self._grad_handles.append(y.register_hook(on_grad))

        return hook

    def _measure(self, layer: _Layer, g: Tensor) -> None:
        # float64: the squares of a vanishing gradient (below ~1e-19) are 0 in float32
        flat = g.reshape(-1).double()  # (n,)
        device = g.device
        pending = self._pending.get(device)
        if pending is None:
            pending = self._pending[device] = _buffers(self._rows, 2, torch.float64, device)
        call = len(pending.slots)
        cells = pending.cells[call]
        if flat.dtype is pending.values.dtype:
            torch.sum(flat, 0, out=cells[0])
            torch.dot(flat, flat, out=cells[1])
        else:
            cells[0].copy_(flat.sum())
            cells[1].copy_(torch.dot(flat, flat))
        layer.numel += flat.numel()
        layer.calls += 1
        pending.slots.append(layer.slot)
        if call + 1 == self._rows:
            self._fold(device, pending)

    def _fold(self, device: torch.device, pending: _Pending) -> None:
        calls = len(pending.slots)
        if calls == 0:
            return
        with torch.inference_mode(False), torch.no_grad():
            if pending.accumulators is None:
                n = len(self._layers)
                pending.accumulators = [torch.zeros(n, 2, dtype=torch.float64, device=device)]
            (sums,) = pending.accumulators
            values = pending.values[:calls].double()  # (C, 2)
            sums.index_add_(0, self._slot_index(pending, device), values)
        pending.slots.clear()

    def _identity(self, n: int) -> list[Array]:
        return [np.zeros((n, 2))]

    def _merge(self, a: list[Array], b: list[Array]) -> list[Array]:
        return [a[0] + b[0]]

    # the update ratio

    def _optimized(self, layer: _Layer) -> list[Tensor]:
        assert self.optimizer is not None
        ids = {id(p) for group in self.optimizer.param_groups for p in group["params"]}
        return [p for p in layer.module.parameters() if id(p) in ids]

    def _before_update(self, *args: Any) -> None:
        if self._active:
            self._before = {
                id(p): p.detach().clone() for layer in self._layers for p in self._optimized(layer)
            }

    def _after_update(self, *args: Any) -> None:
        if not self._active or not self._before:
            return
        with torch.no_grad():
            for layer in self._layers:
                params = [p for p in self._optimized(layer) if id(p) in self._before]
                if not params:
                    continue
                olds = [self._before[id(p)] for p in params]
                device = params[0].device
                change = torch.stack(
                    [
                        torch.linalg.vector_norm(p - old).to(device)
                        for p, old in zip(params, olds, strict=True)
                    ]
                )
                size = torch.stack([torch.linalg.vector_norm(old).to(device) for old in olds])
                ratio = torch.linalg.vector_norm(change) / torch.linalg.vector_norm(size)
                self._ratios.append((layer.slot, ratio.double()))
        self._before = {}
        self._updates += 1

    def _update_ratios(self) -> FloatArray:
        """The mean update ratio of each slot over this step's optimizer steps (one sync)."""
        ratio = np.full(len(self._layers), np.nan)
        if self._ratios:
            by_device: dict[torch.device, list[tuple[int, Tensor]]] = {}
            for slot, value in self._ratios:
                by_device.setdefault(value.device, []).append((slot, value))
            total = np.zeros(len(self._layers))
            touched = np.zeros(len(self._layers), dtype=bool)
            for pairs in by_device.values():
                values = torch.stack([v for _, v in pairs]).cpu().numpy()
                slots = np.array([s for s, _ in pairs], dtype=np.int64)
                np.add.at(total, slots, values)
                touched[slots] = True
            ratio = np.where(touched, total / max(self._updates, 1), np.nan)
        self._ratios = []
        self._updates = 0
        return ratio

    def step(self) -> None:
        """Close the current step (one device -> host transfer per device for all layers)."""
        (sums,) = self._drain()
        host = self._counters()
        _, std = _mean_std(sums[:, 0], sums[:, 1], host[:, 0])
        norm = np.where(host[:, 0] > 0, np.sqrt(sums[:, 1]), np.nan)
        ratio = self._update_ratios()
        self._grad_handles = [h for h in self._grad_handles if _alive(h)]
        self._steps.append(_GradientStep(values=np.column_stack([std, norm, ratio]), counts=host))

    def _has_pending(self) -> bool:
        return super()._has_pending() or self._updates > 0

    def result(self) -> GradientStats:
        """The statistics so far; backward calls since the last :meth:`step` close a step."""
        if self._has_pending():
            self.step()
        slots, names, kinds = self._order()
        columns: list[list[list[float]]] = [[], [], []]
        numel: list[list[int]] = []
        calls: list[list[int]] = []
        for record in self._steps:
            values = record.values[slots]  # (layers, 3)
            for k, column in enumerate(columns):
                column.append(values[:, k].tolist())
            numel.append(record.counts[slots, 0].tolist())
            calls.append(record.counts[slots, 2].tolist())
        grad_std, grad_norm, ratio = columns
        return GradientStats(
            layers=names,
            kinds=kinds,
            grad_std=grad_std,
            grad_norm=grad_norm,
            update_ratio=ratio if self.optimizer is not None else None,
            numel=numel,
            calls=calls,
        )


def _alive(handle: RemovableHandle) -> bool:
    """Whether a tensor hook's tensor still exists (its graph was not freed)."""
    return handle.hooks_dict_ref() is not None
