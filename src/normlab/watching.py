r"""Watch a model while it trains: the doctor's per-layer statistics and labels every ``every``
steps, with bounded memory, as JSON lines.

Problems that appear during training (units that die at step 3,000, a gradient that explodes
once the learning rate warms up) are invisible to a diagnosis at init. :func:`watch` wraps any
training loop: call :meth:`Watch.step` once per optimizer step, after ``backward()``. On every
``every``-th step (the first included) the probes are on for that step's forward and backward
pass, exactly as :func:`normlab.doctor.diagnose` sets them; the record holds every layer's
:class:`~normlab.doctor.LayerDiagnosis` (labels included) and goes to the log at once. Between
records no hook runs. At most ``keep`` records stay in memory (a ring); the log keeps them all.

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
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol, Self

from torch import nn
from torch.utils.hooks import RemovableHandle

from normlab import doctor
from normlab.doctor.layers import _layer_diagnoses, _reference
from normlab.doctor.measure import _grad_ratios, _relative_gradients, _weights
from normlab.probe import ActivationProbe, GradientProbe, finite_or_none

KEEP = 1000
"""Records held in memory by default (the oldest go first; the log keeps every one)."""


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
    ) -> None:
        for name, value, low in (("every", every, 1), ("keep", keep, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.model, self.every, self.writer = model, every, writer
        self.records: deque[dict[str, Any]] = deque(maxlen=keep)
        self._log_path = None if log is None else Path(log)
        self._log: IO[str] | None = None
        self._steps = 0
        self._ap: ActivationProbe | None = None
        self._gp: GradientProbe | None = None
        self._hook: RemovableHandle | None = None
        self._inputs: list[Any] = []  # the model's input on a recorded step
        self._weights = _weights(model)

    def __enter__(self) -> Self:
        if self._log_path is not None:
            self._log = self._log_path.open("a", encoding="utf-8")
        self._arm()  # step 0 is recorded
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._disarm()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _arm(self) -> None:
        """Probes (and an input hook) on for the next forward and backward pass."""
        settings = doctor.probe_settings(self.model)
        self._ap = ActivationProbe(self.model, **settings, keep=1).__enter__()
        self._gp = GradientProbe(self.model, keep=1).__enter__()
        self._hook = self.model.register_forward_pre_hook(self._input, with_kwargs=True)

    def _input(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._inputs.append(args[0] if len(args) == 1 and not kwargs else args or kwargs)

    def _disarm(self) -> tuple[ActivationProbe, GradientProbe] | None:
        if self._ap is None or self._gp is None or self._hook is None:
            return None
        probes = self._ap, self._gp
        for p in probes:
            p.__exit__(None, None, None)
        self._hook.remove()
        self._ap = self._gp = self._hook = None
        return probes

    def step(self) -> dict[str, Any] | None:
        """Count one training step (after its backward pass); on a recorded step return the
        record, written to the log and the writer, else ``None``."""
        probes = self._disarm()
        record = None if probes is None else self._record(*probes)
        self._steps += 1
        if self._steps % self.every == 0:
            self._arm()
        return record

    def _record(self, ap: ActivationProbe, gp: GradientProbe) -> dict[str, Any] | None:
        """The record of the step just run: the doctor's layers, labelled."""
        inputs, self._inputs = self._inputs, []
        acts, grads = ap.result(), gp.result()
        if not acts.layers or not inputs:
            return None  # the model did not run under the probes this step
        rel = _relative_gradients(self._weights)
        ratios = _grad_ratios(list(self._weights), [rel], acts.layers)
        ref, _ = _reference(inputs[:1], acts)
        layers = _layer_diagnoses(self.model, acts, grads, ratios, ref, {})
        problems = [p for p in doctor.SEVERITY if any(p in la.labels for la in layers)]
        record = {
            "step": self._steps,
            "input_std": ref,
            "problems": problems,
            "layers": [la.to_dict() for la in layers],
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
                for key in ("act_std", "grad_std", "grad_ratio"):
                    value = layer[key]
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
) -> Watch:
    """Watch ``model`` train: the doctor's layers and labels every ``every`` steps.

    Args:
        model: the network being trained.
        every: record every this many steps (and the first); an integer >= 1.
        log: a JSON-lines file each record is appended to as it is made (read it back with
            :func:`read_log`; ``normlab doctor --log FILE`` reports it).
        writer: also ``add_scalar`` each layer's act_std, grad_std and grad_ratio to it
            (a ``torch.utils.tensorboard.SummaryWriter``).
        keep: records held in memory, at least 1.

    Returns:
        a :class:`Watch` to use as a context manager; call its ``step()`` once per training
        step, after ``backward()`` and before ``zero_grad()``.
    """
    return Watch(model, every, log, writer, keep)


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
