"""How a sweep's cells run: in groups, batched when the experiment can, one by one otherwise.

A :class:`Group` is the unit of work: the configurations that run together, in one call of the
experiment's batched entry when it declares one (``Experiment.batched``, with ``batch_key``
saying which configurations may share a call), else one after another. :func:`run_group` runs
one group and returns an :class:`Outcome` per configuration; its arguments and its answer are
plain picklable data, so that another process (a Ray task) can run it. :func:`in_process` runs
groups here, one after the other, and yields each outcome as soon as it exists: what a driver
stores at once (:mod:`normlab.sweep.store`).
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from normlab.experiments import Experiment, get_experiment, run_experiment
from normlab.experiments.base.registry import ENGINE
from normlab.sweep.grid import Config

BATCHED_GROUP = 64
"""The most configurations one batched call runs. A group's memory grows with its size (one
stacked set of weights and activations per configuration), and a worker that dies loses its
whole group; 64 is the benchmark's grid of same-shape ``bn-lr`` runs, the size at which one call
already keeps the cores busy on small nets. Larger sets of equal ``batch_key`` are cut into
near-equal groups (70 configurations: two of 35, not 64 and 6)."""

SINGLE_GROUP = 16
"""The most configurations of an experiment that cannot batch in one group. Such a group runs
one configuration after another: in this process each is stored as it ends (:func:`in_process`),
and as a Ray task the group amortizes the task's overhead over several runs while a lost worker
loses at most this many."""


@dataclass(frozen=True)
class Group:
    """Configurations of one experiment that run together (batched when it can), with the
    torch thread count they run with: the driver's, wherever the group runs. A float32 result's
    last bits depend on the thread count (a sum split over threads adds in another order), and a
    Ray worker starts with one thread whatever the driver has: carrying the count keeps a result
    the same on any backend."""

    experiment: str
    configs: tuple[Config, ...]
    threads: int = field(default_factory=torch.get_num_threads)


@dataclass(frozen=True)
class Outcome:
    """What running one configuration gave: its result's ``to_dict()`` (``result``) or the
    traceback of what it raised (``error``), and the seconds it took (in a batched call, the
    call's time shared equally)."""

    config_id: str
    result: dict[str, Any] | None
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None


Backend = Callable[[Sequence[Group]], Iterator[Outcome]]
"""Runs groups and yields each configuration's outcome as soon as it has it, in any order:
:func:`in_process` here, a Ray cluster in :mod:`normlab.sweep.distributed`. The driver stores
each outcome as it comes (:meth:`normlab.sweep.Sweep.run`)."""


def groups_of(
    configs: Sequence[Config],
    batched_size: int = BATCHED_GROUP,
    single_size: int = SINGLE_GROUP,
) -> list[Group]:
    """The groups ``configs`` run in, in the order their first configuration comes.

    Configurations of an experiment that batches (``batched`` and ``batch_key`` both set) are
    grouped by experiment and ``batch_key(params)``, at most ``batched_size`` a group; those of
    one that cannot, by experiment, at most ``single_size`` a group. A bucket larger than its
    bound is cut into near-equal groups.
    """
    buckets: dict[tuple[str, Hashable], list[Config]] = {}
    for config in configs:
        hooks = _hooks(get_experiment(config.experiment))
        bucket = (config.experiment, None if hooks is None else ("batch", hooks[1](config.params)))
        buckets.setdefault(bucket, []).append(config)
    groups = []
    for (name, key), members in buckets.items():
        most = single_size if key is None else batched_size
        parts = math.ceil(len(members) / most)
        size = math.ceil(len(members) / parts)  # near-equal parts, none above `most`
        for start in range(0, len(members), size):
            groups.append(Group(name, tuple(members[start : start + size])))
    return groups


def run_group(group: Group) -> list[Outcome]:
    """Run every configuration of ``group``: in one call of the experiment's batched entry when
    it declares one (and the group holds more than one), else one by one.

    A configuration that raises gives an :class:`Outcome` with its traceback. When the batched
    call raises, the group runs again one by one, so that each configuration gets its own
    result or its own error. ``run_group`` itself raises only for a bug in the engine (or
    ``KeyboardInterrupt``).
    """
    experiment = get_experiment(group.experiment)
    hooks = _hooks(experiment)
    with threads(group.threads):
        if hooks is not None and len(group.configs) > 1:
            outcomes = _run_batched(experiment, hooks[0], group.configs)
            if outcomes is not None:
                return outcomes
        return [run_one(config) for config in group.configs]


@contextlib.contextmanager
def threads(count: int) -> Iterator[None]:
    """torch computes with ``count`` threads inside the block (the count before, after it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_one(config: Config) -> Outcome:
    """Run one configuration through the registry (``run_experiment``)."""
    start = time.perf_counter()
    try:
        result = run_experiment(config.experiment, **config.params).to_dict()
    except Exception:
        return Outcome(config.id, None, traceback.format_exc(), time.perf_counter() - start)
    return Outcome(config.id, result, None, time.perf_counter() - start)


def in_process(groups: Sequence[Group]) -> Iterator[Outcome]:
    """The in-process :data:`Backend`: each group in turn; a group that cannot batch yields
    each configuration's outcome as it ends, so a killed driver loses at most the one running
    configuration (a batched group: the running group)."""
    for group in groups:
        if _hooks(get_experiment(group.experiment)) is None:
            for config in group.configs:
                with threads(group.threads):
                    outcome = run_one(config)
                yield outcome
        else:
            yield from run_group(group)


Batched = Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]
BatchKey = Callable[[Mapping[str, Any]], Hashable]


def _hooks(experiment: Experiment) -> tuple[Batched, BatchKey] | None:
    """The experiment's ``batched`` entry and ``batch_key`` when it can batch (both set), else
    None. Both are optional fields of :class:`Experiment`: read with ``getattr``."""
    batched: Batched | None = getattr(experiment, "batched", None)
    key: BatchKey | None = getattr(experiment, "batch_key", None)
    return None if batched is None or key is None else (batched, key)


def _run_batched(
    experiment: Experiment, batched: Batched, configs: Sequence[Config]
) -> list[Outcome] | None:
    """One call of the batched entry for ``configs``; None when it raised (or answered the
    wrong number of results)."""
    params = [dict(c.params) for c in configs]
    cuda = any(p.get("device") == "cuda" for p in params)
    devices = [torch.cuda.current_device()] if cuda else []
    start = time.perf_counter()
    try:
        with ENGINE, torch.random.fork_rng(devices=devices):
            raws = batched(params)
        if len(raws) != len(configs):
            return None
        results = [_result(experiment, raw, p) for raw, p in zip(raws, params, strict=True)]
    except Exception:
        return None
    share = (time.perf_counter() - start) / len(configs)
    return [Outcome(c.id, r, None, share) for c, r in zip(configs, results, strict=True)]


def _result(experiment: Experiment, raw: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A batched entry's raw dict as ``run_experiment``'s Result would write it."""
    result = experiment.result_type.from_raw(raw)
    result.experiment = experiment.name
    result.params = params
    return result.to_dict()
