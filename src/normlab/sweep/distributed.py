"""Run a sweep's groups as Ray tasks: on a local Ray instance or on a cluster.

The in-process engine runs each :class:`~normlab.sweep.engine.Group` with
:func:`~normlab.sweep.engine.run_group` and hands every :class:`~normlab.sweep.engine.Outcome`
to the driver, which writes it to the store. This backend (a
:data:`~normlab.sweep.engine.Backend`, like :func:`~normlab.sweep.engine.in_process`) keeps both
ends and puts Ray in the middle::

    driver                                   Ray workers (one CPU each)
    ------                                   --------------------------
    chunks = split(groups)         ---->     run_group(chunk) -> [Outcome, ...]
    ray.wait: the first task done  <----
    yield outcome  (the driver stores it and moves the progress bar: it alone writes SQLite)

**One task per group, not one per configuration.** A group is configurations of one shape that
the experiment runs together, in one batched forward/backward per step: cutting it into one task
per configuration would throw that batching away, and pay the per-task cost (scheduling, shipping
arguments and results, a worker's first import of torch) once per configuration. Ray Tune's
per-trial cost shows how that ends: 100 trivial trials took 22.7 s against 0.1 s run plainly
(ray-project/ray#11004), which dominates runs of 10 seconds.

**Chunks.** A group of an experiment that cannot batch runs its configurations one by one,
each alone: cutting it changes no number. One task per such group is too coarse when the group
is large beside the cluster (16 configurations on one CPU while others idle, and a worker lost
near the end costs them all), so these groups are cut into chunks of at most ``chunk``
configurations, each chunk a task. By default ``chunk`` gives about two tasks per CPU of the
cluster (``ceil(n / (2 * cpus))`` for ``n`` such configurations): every CPU has work, a fast CPU
takes a second task while a slow one finishes its first, and a task still runs for seconds, so
that its fixed cost (a millisecond or so: ``benchmarks/sweep.py`` prints it) is small beside it.

A batched group is one task, never cut: which configurations share a batched call can change
the last bits of their numbers (``bn-lr``'s group of 16 cut into pairs: none of the 16 results
bit-identical to the group's, though cut into fours or eights they all were; a chunk of one
would even run unbatched), and a stored result must be what the same group gives in process,
whatever the cluster's size. The engine bounds a
batched group (``BATCHED_GROUP`` configurations, one call of seconds); a sweep over several
shapes has several groups, and those spread over the cluster.

**Retries.** A task whose worker process dies (killed, out of memory, its node lost) is run
again, up to ``max_retries`` times: Ray retries a task on such a system failure by itself. A
configuration that raises is not a failure of the task: ``run_group`` returns it as an
``Outcome`` with its traceback, and the store keeps it. A task still lost after its retries gives
each of its configurations an ``Outcome`` with that error, so the sweep ends and a later
``--retry-errors`` run can try them again. ``run_group`` itself raising is a bug in the engine:
it is raised here, after the pending tasks are cancelled (results already handed over stay
stored).

**Where Ray runs** (``address``):

- ``"auto"`` (``--ray auto``): use the Ray this process is already connected to (a notebook that
  called ``ray.init``); else join the cluster named by ``$RAY_ADDRESS``, or the one ``ray start``
  left running on this machine; else start a local Ray instance on this machine's CPUs for this
  sweep, and stop it at the end. This is ``ray.init()`` with no address, *not*
  ``ray.init(address="auto")``, which fails where no cluster runs: a user who asks for Ray on a
  laptop wants the sweep to run, on every core.
- ``"HOST:PORT"`` (``--ray HOST:PORT``): join the running cluster whose head is there (what
  ``ray start --head`` prints), from a machine of that cluster; ``"ray://HOST:10001"`` joins
  from outside it through Ray Client (``pip install 'ray[client]'``). Nothing answering there is
  an error (:class:`RayUnreachable`), found in seconds rather than after Ray's own minutes of
  retries.

**Workers must import normlab.** A local instance's workers start from the driver's Python and
environment (its ``PYTHONPATH`` and working folder), so nothing is needed. On a remote cluster,
either the nodes have normlab installed (``pip install 'normlab[ray]'`` in the cluster's image:
the usual way), or pass a ``runtime_env`` that ships it::

    import normlab
    RayBackend("ray://head:10001", runtime_env={"py_modules": [normlab]})  # this normlab
    RayBackend("ray://head:10001", runtime_env={"pip": ["normlab==0.1.0"]})  # or an index

Either way torch must be on the nodes, at the driver's version, and normlab at the driver's
code: the ids the driver stores name its code's version, and another version's numbers would be
stored under them.

**Resources.** A task asks for one CPU, and for one GPU when its configurations run on
``device="cuda"`` (:func:`resources`).

**Threads.** Each task asks for one CPU, and Ray sets ``OMP_NUM_THREADS=1`` in a one-CPU task's
worker (unless the environment Ray starts from sets it): torch computes with one thread, as an
in-process sweep does under ``OMP_NUM_THREADS=1``, so that a configuration gives the same
numbers on either path on the same machine.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from normlab.experiments import get_experiment
from normlab.sweep.engine import Group, Outcome, run_group

__all__ = [
    "INSTALL_HINT",
    "RayBackend",
    "RayNotInstalled",
    "RayUnreachable",
    "chunk_size",
    "connect",
    "import_ray",
    "resources",
    "run_on_ray",
    "split",
]

INSTALL_HINT = "pip install 'normlab[ray]'"
TASKS_PER_CPU = 2  # see "Chunks" above
CONNECT_TIMEOUT_S = 5.0

Runner = Callable[[Group], list[Outcome]]


class RayNotInstalled(ImportError):
    """The Ray backend was asked for, and Ray is not installed."""


class RayUnreachable(ConnectionError):
    """Ray cannot be joined at the address given (nothing answers there, or Ray refuses it)."""


def import_ray() -> ModuleType:
    """Return the ``ray`` module, or raise :class:`RayNotInstalled` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise RayNotInstalled(f"Ray is not installed: {INSTALL_HINT}") from exc
    return ray


def split(groups: Sequence[Group], chunk: int) -> list[Group]:
    """The tasks of ``groups``: each group of an experiment that cannot batch cut into
    consecutive chunks of at most ``chunk`` configurations, each batched group whole.

    A chunk keeps its group's experiment (and any other field of the group), and the
    configurations keep their order, so the chunks of a group, read in order, are the group.
    Why batched groups stay whole: the module's docstring ("Chunks").
    """
    if chunk < 1:
        raise ValueError(f"chunk {chunk!r} not supported, use an integer >= 1")
    tasks = []
    for group in groups:
        if get_experiment(group.experiment).batched is not None:
            tasks.append(group)
            continue
        for start in range(0, len(group.configs), chunk):
            tasks.append(dataclasses.replace(group, configs=group.configs[start : start + chunk]))
    return tasks


def chunk_size(configs: int, cpus: int) -> int:
    """The default chunk: about ``TASKS_PER_CPU`` tasks per CPU, ``ceil(configs / (2 cpus))``.

    >>> chunk_size(64, 2), chunk_size(64, 64), chunk_size(3, 8)
    (16, 1, 1)
    """
    return max(1, math.ceil(configs / (TASKS_PER_CPU * max(1, cpus))))


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``"HOST:PORT"`` or ``"ray://HOST:PORT"``; ``None`` if it has none."""
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: Ray's own message says what it wants
        return None
    if parts.hostname is None or port is None:
        return None
    return parts.hostname, port


def _check_answers(address: str) -> None:
    """Raise :class:`RayUnreachable` if nothing accepts a TCP connection at ``address``."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise RayUnreachable(
            f"no Ray cluster answers at {address!r} ({exc.strerror or exc}); "
            "use 'auto' or the address `ray start --head` printed"
        ) from exc


def connect(
    address: str = "auto", runtime_env: Mapping[str, Any] | None = None
) -> tuple[ModuleType, bool]:
    """Connect this process to Ray at ``address`` (see the module's docstring for ``"auto"``).

    A process already connected (``ray.init`` called before) keeps its connection, whatever
    ``address`` says. Returns ``(ray, started)``: ``started`` is ``True`` when this call
    connected (the caller then calls ``ray.shutdown()`` when done, which stops a local instance
    it started and only disconnects from a cluster), ``False`` when the process was connected
    already (the caller leaves that connection as it found it).
    """
    ray = import_ray()
    if address != "auto":
        _check_answers(address)
    if ray.is_initialized():
        return ray, False
    try:
        ray.init(
            address=None if address == "auto" else address,
            runtime_env=dict(runtime_env) if runtime_env is not None else None,
            include_dashboard=False,
            log_to_driver=False,  # workers' prints would mix into the driver's --json on stdout
        )
    except (ConnectionError, ValueError) as exc:  # no cluster there; a ray:// without the client
        raise RayUnreachable(f"cannot join Ray at {address!r}: {exc}") from exc
    return ray, True


def resources(group: Group) -> dict[str, float]:
    """What one task of ``group`` asks Ray for: one CPU, and one GPU when a configuration runs
    on ``device="cuda"`` (Ray hides the GPUs from a task that asks for none).

    >>> from normlab.sweep.engine import Group
    >>> resources(Group("bn-lr", ()))
    {'num_cpus': 1, 'num_gpus': 0}
    """
    cuda = any(config.params.get("device") == "cuda" for config in group.configs)
    return {"num_cpus": 1, "num_gpus": 1 if cuda else 0}


def _call(runner: Runner, group: Group) -> list[Outcome]:
    """A task's body: ``runner(group)`` (the runner travels as an argument, so that it may be
    any picklable callable, a ``functools.partial`` too, which ``ray.remote`` does not take)."""
    return runner(group)


def _lost(group: Group, exc: BaseException, retries: int) -> list[Outcome]:
    """An error ``Outcome`` for each configuration of a task lost after all its retries."""
    error = f"the Ray task was lost after {retries} retries: " + "".join(
        traceback.format_exception_only(exc)
    )
    return [Outcome(config.id, None, error, 0.0) for config in group.configs]


def _collect(ray: ModuleType, pending: dict[Any, Group], retries: int) -> Iterator[Outcome]:
    """Yield each finished task's outcomes, in the order the tasks finish (``ray.wait``)."""
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        group = pending.pop(ref)
        try:
            outcomes: list[Outcome] = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # run_group raised: a bug in the engine
            raise exc.as_instanceof_cause() from None
        except ray.exceptions.RayError as exc:  # the worker (or its node) died every try
            outcomes = _lost(group, exc, retries)
        yield from outcomes


def run_on_ray(
    groups: Sequence[Group],
    *,
    address: str = "auto",
    chunk: int | None = None,
    max_retries: int = 3,
    runtime_env: Mapping[str, Any] | None = None,
    runner: Runner = run_group,
) -> Iterator[Outcome]:
    """Run ``groups`` as Ray tasks; yield every configuration's outcome as its task finishes.

    The caller (the driver: :meth:`normlab.sweep.Sweep.run`) stores each outcome as it comes;
    workers never touch the store.

    Args:
        groups: the sweep's groups (what :func:`~normlab.sweep.engine.groups_of` makes), all of
            whose configurations are to run.
        address: ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` (module docstring).
        chunk: the most configurations in one task of an experiment that cannot batch
            (a batched group is one task); default :func:`chunk_size` over the cluster's CPUs
            (about two tasks per CPU).
        max_retries: how many times Ray runs a task again whose worker process died.
        runtime_env: Ray's ``runtime_env`` for the workers, e.g. ``{"py_modules": [normlab]}``
            for a remote cluster without normlab (module docstring).
        runner: what a task runs on its chunk; :func:`~normlab.sweep.engine.run_group`.

    Ray is joined (or started) when the first outcome is asked for, and left (stopped, if this
    call started it) when the last is yielded, or when the caller stops early (Ctrl+C, an error,
    ``close()``): then the tasks not yet done are cancelled, and what was yielded stays stored,
    so running the sweep again runs only what is missing.
    """
    if max_retries < 0:
        raise ValueError(f"max_retries {max_retries!r} not supported, use an integer >= 0")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk {chunk!r} not supported, use an integer >= 1 or None")
    return _run(groups, address, chunk, max_retries, runtime_env, runner)


def _run(
    groups: Sequence[Group],
    address: str,
    chunk: int | None,
    max_retries: int,
    runtime_env: Mapping[str, Any] | None,
    runner: Runner,
) -> Iterator[Outcome]:
    """:func:`run_on_ray`'s generator (its arguments checked before anything starts)."""
    ray, started = connect(address, runtime_env)
    pending: dict[Any, Group] = {}
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        alone = [g for g in groups if get_experiment(g.experiment).batched is None]
        total = sum(len(group.configs) for group in alone)  # the configurations split cuts
        task = ray.remote(max_retries=max_retries)(_call)
        for part in split(groups, chunk or chunk_size(total, cpus)):
            pending[task.options(**resources(part)).remote(runner, part)] = part
        yield from _collect(ray, pending, max_retries)
    finally:
        for ref in pending:  # left by Ctrl+C, an error or close(): nobody will collect them
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


@dataclasses.dataclass(frozen=True)
class RayBackend:
    """A :data:`~normlab.sweep.engine.Backend` on Ray: :func:`run_on_ray` with its settings.

    ``normlab sweep --ray ADDRESS`` runs its sweep with ``RayBackend(ADDRESS)`` in place of
    :func:`~normlab.sweep.engine.in_process`.
    """

    address: str = "auto"
    chunk: int | None = None
    max_retries: int = 3
    runtime_env: Mapping[str, Any] | None = None

    def __call__(self, groups: Sequence[Group]) -> Iterator[Outcome]:
        return run_on_ray(
            groups,
            address=self.address,
            chunk=self.chunk,
            max_retries=self.max_retries,
            runtime_env=self.runtime_env,
        )
