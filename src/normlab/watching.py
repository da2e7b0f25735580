r"""Watch a model while it trains: the doctor's per-layer statistics and labels every ``every``
steps, with bounded memory, as JSON lines.

Problems that appear during training (units that die at step 3,000, a gradient that explodes
once the learning rate warms up) are invisible to a diagnosis at init. :func:`watch` wraps any
training loop: call :meth:`Watch.step` once per optimizer step, after ``backward()``. On every
``every``-th step (the first included) the probes are on for that step's forward and backward
pass with the doctor's statistics (:func:`normlab.doctor.probe_settings`), and the record holds
every layer's :class:`~normlab.doctor.LayerDiagnosis`, labelled by the doctor's judgement, and
goes to the log at once. Between records no hook runs. At most ``keep`` records stay in memory
(a ring); the log keeps them all.

The model's structure is traced once, at the first record; what its weights set (the stream's
std as each norm reads it, a norm's input std, a one-unit layer's input second moment) is
measured again at every record (:class:`~normlab.doctor.graph.Remeasure`), so a record holds
the doctor's judgement of the model as it is at that step. The probes are made once and their
hooks stay on while every step is recorded. Gradients and
the per-unit numbers (dead units, unit spread) read every element; an output's mean, std, min,
max and saturation are read from a sample of ``sample_size`` elements (the probe's default),
reduced for all layers at once with one copy to the host: a std within a few percent of the
whole output's. ``sample_size=None`` reads every element, as :func:`normlab.doctor.diagnose`
does, the same numbers at a higher cost (``benchmarks/watch.py`` prints both).

Each weight layer's record also holds its **update:data ratio**, the size of the step the
optimizer actually took relative to the weights (Karpathy, 2022, "Building makemore Part 3:
Activations & Gradients, BatchNorm": about :math:`10^{-3}` is a healthy rate; far below, the
layer barely learns; far above, it is being rewritten each step):

.. math::
    \text{update\_ratio} = \frac{\lVert W_s - W_{s-1} \rVert}{\lVert W_{s-1} \rVert}

over the layer's weights of 2+ dimensions (as its gradient ratio), where :math:`W_{s-1}` is a
copy taken at the call of :meth:`Watch.step` before the recorded one and :math:`W_s` the weights
at the recorded call: the one optimizer step between two calls, whatever the optimizer (Adam's
normalized step, weight decay, clipping, a scheduler's rate, a step that ``GradScaler`` skipped:
0). Called before the optimizer steps, as below, that is the step of the previous batch. No
optimizer is needed, and no hook on one; the copy is held from the call before a recorded step
to it (with ``every=1``, always: one copy of those weights). The first record has none (``None``).

Example::

    >>> import torch
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
    >>> with watch(net, every=5) as w:
    ...     for _ in range(12):
    ...         opt.zero_grad()
    ...         net(torch.randn(32, 8)).pow(2).mean().backward()
    ...         _ = w.step()  # the record, on a recorded step
    ...         opt.step()
    >>> [r["step"] for r in w.records], w.records[-1]["layers"][0]["labels"]
    ([0, 5, 10], ['ok'])
    >>> ratio = w.records[-1]["layers"][0]["update_ratio"]  # SGD's lr * |grad| / |W|
    >>> w.records[0]["layers"][0]["update_ratio"] is None, 0 < ratio < 1
    (True, True)
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol, Self

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from normlab import doctor
from normlab.doctor.graph import Remeasure, trace
from normlab.doctor.judge import judge
from normlab.doctor.measure import grad_ratios, weight_layers
from normlab.probe import SAMPLE_SIZE, ActivationProbe, GradientProbe, finite_or_none

KEEP = 1000
"""Records held in memory by default (the oldest go first; the log keeps every one)."""
_TINY_NORM = 2.0**-30
"""The least float32 norm :func:`_norms` keeps: squares lost below float32's least normal
number (2**-126) then weigh under n * 2**-66 of its square (as :mod:`normlab.probe`'s sums)."""


def _norms(tensors: list[Tensor]) -> list[float]:
    """Each tensor's 2-norm on the host, one copy for all: in float32 (float64 for float64
    tensors), again in float64 for those under :data:`_TINY_NORM` or infinite, whose float32
    squares may have underflowed (a vanishing gradient) or overflowed.

    One ``vector_norm`` per tensor: what torch's private batched ``_foreach_norm`` computes on
    the CPU, to the bit, within 15% of its time (54 GPT-2 weights: 0.30 ms against 0.27 ms),
    on recorded steps only."""
    if not tensors:
        return []
    wide = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    device = tensors[0].device
    first = [torch.linalg.vector_norm(t, 2, dtype=wide) for t in tensors]  # P x 0-dim
    out = torch.stack([n.to(device) for n in first]).tolist()  # (P,): one host copy
    again = [i for i, n in enumerate(out) if not _TINY_NORM <= n < math.inf and n == n]
    if again and wide != torch.float64:
        exact = [torch.linalg.vector_norm(tensors[i], 2, dtype=torch.float64) for i in again]
        for i, n in zip(again, torch.stack([n.to(device) for n in exact]).tolist(), strict=True):
            out[i] = n
    return out


def _per_layer(owners: list[str], norms: list[float]) -> dict[str, float]:
    r"""Each layer's norm over its tensors, :math:`\sqrt{\sum_p \lVert t_p \rVert^2}`."""
    squares: dict[str, float] = {}
    for name, n in zip(owners, norms, strict=True):
        squares[name] = squares.get(name, 0.0) + n * n
    return {name: math.sqrt(sq) for name, sq in squares.items()}


def _quotient(top: float, bottom: float) -> float:
    """``top / bottom`` as the doctor takes it: 0 / 0 = nan, x / 0 = inf."""
    if bottom != 0:
        return top / bottom
    return math.nan if top == 0 or math.isnan(top) else math.inf


def _ratio(top: float, bottom: float) -> float | None:
    """``top / bottom`` as a record holds it: ``None`` when not finite."""
    value = _quotient(top, bottom)
    return value if math.isfinite(value) else None


class _Weights:
    """The weight layers' parameters (the doctor's: 2+ dimensions, trainable), their gradient
    ratios and the updates applied to them (see :mod:`normlab.watching`)."""

    def __init__(self, model: nn.Module, updates: bool) -> None:
        self.layers = weight_layers(model)  # name -> its weights
        self.updates = updates  # whether snapshot() copies
        self.params = [p for ps in self.layers.values() for p in ps]  # (P,)
        self.owners = [name for name, ps in self.layers.items() for _ in ps]  # (P,)
        self.before: list[Tensor] | None = None  # a copy of the weights, W_{s-1}
        self.before_norms: dict[str, float] = {}  # its norm per layer
        self.norms: list[float] | None = None  # the weights' norms measured at this call

    def snapshot(self) -> None:
        """Copy the weights (into the last copy's memory, when there is one) and their norms."""
        if not self.params or not self.updates:
            return
        with torch.no_grad():
            weights = [p.detach() for p in self.params]
            if self.before is None:
                self.before = [w.clone() for w in weights]
            else:
                for before, now in zip(self.before, weights, strict=True):
                    before.copy_(now)
        norms = self.norms if self.norms is not None else _norms(self.before)
        self.before_norms, self.norms = _per_layer(self.owners, norms), None

    def release(self) -> None:
        """Hold no copy (and no norms of this call) until the next :meth:`snapshot`."""
        self.before, self.norms = None, None

    def measure(self) -> tuple[Tensor, dict[str, float | None]]:
        r"""Each layer's relative gradient :math:`\lVert g \rVert / \lVert W \rVert` (layers,)
        (nan: no gradient) and its update:data ratio (``None`` before the first copy, or when
        not finite): the norms of the weights, gradients and updates in one host copy."""
        with torch.no_grad():
            weights = [p.detach() for p in self.params]
            have = [i for i, p in enumerate(self.params) if p.grad is not None]
            grads = [self.params[i].grad.detach() for i in have]  # type: ignore[union-attr]
            moved = self.before or []  # W_{s-1} - W_s, in the copy's memory
            if moved:
                for before, now in zip(moved, weights, strict=True):
                    before.sub_(now)
            norms = _norms([*weights, *grads, *moved])
        p, g = len(weights), len(grads)
        self.norms = norms[:p]  # W_s: the next copy's norms, if it is taken now
        w = _per_layer(self.owners, norms[:p])
        gn = _per_layer([self.owners[i] for i in have], norms[p : p + g])
        rel = [_quotient(gn.get(n, math.nan), w[n]) for n in self.layers]  # nan: no gradient
        updates: dict[str, float | None] = {}
        if moved:
            d = _per_layer(self.owners, norms[p + g :])
            updates = {n: _ratio(d[n], self.before_norms.get(n, math.nan)) for n in self.layers}
        return torch.tensor(rel, dtype=torch.float64), updates


class ScalarWriter(Protocol):
    """What :func:`watch` writes to besides the log: ``torch.utils.tensorboard.SummaryWriter``."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> Any: ...


class Watch:
    """The running watch (see :func:`watch`); ``records`` are the last ``keep`` records."""

    def __init__(
        self,
        model: nn.Module,
        every: int,
        log: str | Path | None,
        writer: ScalarWriter | None,
        keep: int,
        updates: bool = True,
        sample_size: int | None = SAMPLE_SIZE,
    ) -> None:
        for name, value, low in (("every", every, 1), ("keep", keep, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.model, self.every, self.writer = model, every, writer
        self.records: deque[dict[str, Any]] = deque(maxlen=keep)
        self._log_path = None if log is None else Path(log)
        self._log: IO[str] | None = None
        self._steps = 0
        # the probes are made once; their hooks are on only for a recorded step's passes
        settings = {**doctor.probe_settings(model), "sample_size": sample_size}
        self._ap = ActivationProbe(model, **settings, keep=1)
        self._gp = GradientProbe(model, keep=1)
        self._hook: RemovableHandle | None = None  # the input hook; set while armed
        self._inputs: list[Any] = []  # the model's input on a recorded step
        if not isinstance(updates, bool):
            raise TypeError(f"updates must be True or False, got {updates!r}")
        self._weights = _Weights(model, updates)
        # the graph traced on the first recorded step's input, and its weight-set values
        # measured again at each record
        self._values: Remeasure | None = None

    def __enter__(self) -> Self:
        if self._log_path is not None:
            self._log = self._log_path.open("a", encoding="utf-8")
        self._arm()  # step 0 is recorded
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._disarm()
        self._weights.release()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _arm(self) -> None:
        """Probes (and an input hook) on for the next forward and backward pass."""
        if self._hook is None:
            self._ap.__enter__()
            self._gp.__enter__()
            self._hook = self.model.register_forward_pre_hook(self._input, with_kwargs=True)
            if self._values is not None:
                self._values.__enter__()

    def _input(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._inputs.append(args[0] if len(args) == 1 and not kwargs else args or kwargs)

    def _disarm(self) -> None:
        if self._hook is not None:
            self._ap.__exit__(None, None, None)
            self._gp.__exit__(None, None, None)
            self._hook.remove()
            self._hook = None
            if self._values is not None:
                self._values.__exit__(None, None, None)

    def step(self) -> dict[str, Any] | None:
        """Count one training step (after its backward pass); on a recorded step return the
        record, written to the log and the writer, else ``None``.

        The probes stay on from one recorded step to the next (``every=1``) and are off between
        records; the weights are copied on the step before a recorded one (see :func:`watch`).
        """
        record = None
        if self._hook is not None:  # a recorded step: close its statistics (one host copy each)
            self._ap.step()
            self._gp.step()
            record = self._record()
        self._steps += 1
        due = self._steps % self.every == 0
        if due:
            self._arm()
            self._weights.snapshot()  # the weights before the optimizer's step
        else:
            self._disarm()
            self._weights.release()  # no copy held between records
        return record

    def _record(self) -> dict[str, Any] | None:
        """The record of the step just run: the doctor's layers, labelled, and each weight
        layer's update:data ratio."""
        inputs, self._inputs = self._inputs, []
        acts, grads = self._ap.result(), self._gp.result()
        if not inputs or not any(acts.calls[-1]):
            return None  # the model did not run under the probes this step
        if self._values is None:  # traced once, on its own input
            self._disarm()  # (re-armed by step() if the next step is recorded)
            graph = trace(self.model, inputs[0])
            self._values = Remeasure(self.model, graph)
        else:  # the structure traced, the streams' and norms' inputs of this step
            graph = self._values.graph()
        rel, updates = self._weights.measure()
        scaled = graph.scaled()  # made once: no gradient ratio reference
        order = [name for name in acts.layers if name not in scaled]
        ratios = grad_ratios(list(self._weights.layers), [rel], order)
        found = judge(self.model, inputs[:1], acts, grads, ratios, graph)  # the doctor's
        record = {
            "step": self._steps,
            "input_std": found.input_std,
            "problems": found.problems,
            "layers": [
                {**la.to_dict(), "update_ratio": updates.get(la.name)} for la in found.layers
            ],
        }
        self._emit(record)
        return record

    def _emit(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self._log is not None:
            self._log.write(json.dumps(finite_or_none(record), allow_nan=False) + "\n")
            self._log.flush()
        if self.writer is not None:
            for layer in record["layers"]:
                for key in ("act_std", "grad_std", "grad_ratio", "update_ratio"):
                    value = layer.get(key)
                    if value is not None and math.isfinite(value):
                        self.writer.add_scalar(f"{layer['name']}/{key}", value, record["step"])

    def events(self) -> list[str]:
        """Each label a layer gained or lost between kept records, in words."""
        return events(list(self.records))


def watch(
    model: nn.Module,
    every: int = 100,
    log: str | Path | None = None,
    *,
    writer: ScalarWriter | None = None,
    keep: int = KEEP,
    updates: bool = True,
    sample_size: int | None = SAMPLE_SIZE,
) -> Watch:
    """Watch ``model`` train: the doctor's layers and labels every ``every`` steps.

    Args:
        model: the network being trained.
        every: record every this many steps (and the first); an integer >= 1.
        log: a JSON-lines file each record is appended to as it is made (read it back with
            :func:`read_log`; ``normlab doctor --log FILE`` reports it).
        writer: also ``add_scalar`` each layer's act_std, grad_std, grad_ratio and
            update_ratio to it (a ``torch.utils.tensorboard.SummaryWriter``).
        keep: records held in memory, at least 1.
        updates: measure each weight layer's update:data ratio, which holds a copy of the
            weight layers' weights from the call before a recorded step to it (with
            ``every=1``, always); ``False``: no copy, and ``update_ratio`` is ``None``.
        sample_size: elements of each output the activation statistics read, at least 1
            (see :class:`~normlab.probe.ActivationProbe`); ``None``: every element, as the
            doctor.

    Returns:
        a :class:`Watch` to use as a context manager; call its ``step()`` once per training
        step, after ``backward()`` and before ``zero_grad()``.
    """
    return Watch(model, every, log, writer, keep, updates, sample_size)


def read_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a :func:`watch` log, in order (``None`` where a number was not finite)."""
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{path}: line {number} is not a watch record: {exc}"
                    ) from None


def events(records: list[dict[str, Any]]) -> list[str]:
    """Each problem label a layer gained or lost from one record to the next, in words (the
    layer named as :func:`normlab.doctor.module_path` writes it: ``model[3]``, not ``'3'``)."""
    out = []
    before: dict[str, set[str]] = {}
    for record in records:
        for layer in record["layers"]:
            now = set(layer["labels"]) - {"ok"}
            was = before.get(layer["name"], set())
            if record is not records[0]:
                at = f"step {record['step']}: {doctor.module_path(layer['name'])}"
                out += [f"{at} became {p}" for p in sorted(now - was)]
                out += [f"{at} is no longer {p}" for p in sorted(was - now)]
            before[layer["name"]] = now
    return out
