"""The lab's half of the sandbox: run a learner's Python code for real, contained, limited, fast.

The playground's Run button and the exercise checker send code here. :class:`Sandbox` keeps a
warm *fork server* (:mod:`normlab.lab.sandbox.child`) that has imported torch, numpy,
matplotlib and normlab once, and forks one contained process tree per run, so a run answers in
tens of milliseconds instead of the seconds ``import torch`` takes.

Design, from the outside in:

- **One sandbox for the fork server.** It starts once per :class:`Sandbox`, inside bubblewrap
  (``bwrap``) when it is installed, else inside ``unshare`` (util-linux) namespaces where it
  builds the same view itself and enters it with ``chroot``. Either way it has its own PID, network,
  IPC and UTS namespaces and a file system that shows, read-only: ``/usr`` (and the ``/lib``,
  ``/bin`` links), a few files of ``/etc`` (the loader cache, the time zone), the Python
  installation and virtual environment, and the ``normlab`` package with its ``lab/`` folder
  (the server's code) hidden behind an empty tmpfs. The rest of the repository (tests,
  ``.git``), the home and data folders (the progress database), ``/etc/shadow``, ``/sys`` and the
  host's ``/tmp`` are simply not there. The fork server keeps uid 0 but only the capabilities it
  needs (``CAP_SYS_ADMIN`` to mount, ``CAP_SETUID``/``CAP_SETGID``, ``CAP_KILL``). It stops when
  the lab closes the control socket or dies (``--die-with-parent``).
- **One PID namespace per run.** For each run the fork server forks a supervisor, which enters
  new mount, PID, network, IPC and UTS namespaces and forks the run's init (PID 1 there). The init
  mounts a fresh ``/proc`` (only the run's processes are visible) and a private tmpfs on ``/tmp``
  (the working directory, owned by the run's uid, ``disk_bytes`` at most; ``/scratch`` when the
  Python environment itself lives under ``/tmp``), then forks the
  learner process. When the init exits, or the supervisor kills it at the wall-clock limit, the
  kernel kills every process left in the namespace, including ones that called ``setsid``. The
  run's network namespace has only a loopback device that is down: no connection can be made,
  not even to the lab's own port.
- **A non-root uid per concurrent run.** The learner process calls ``setresuid`` to a uid of its
  own (one per slot of ``max_runs``, from a block chosen at random per :class:`Sandbox`), which
  drops every capability, so ``RLIMIT_NPROC`` holds (the kernel never applies it to uid 0: a fork
  bomb or 10 000 threads would otherwise go unbounded), and one run cannot reach another's files.
- **Limits** (:class:`Limits`): wall clock (supervisor), ``RLIMIT_CPU``, ``RLIMIT_AS``,
  ``RLIMIT_NOFILE``, ``RLIMIT_NPROC``, tmpfs size, and output cut in the middle (its head and
  tail kept) with a visible note. The learner has no descriptors but stdin (``/dev/null``),
  stdout, stderr and its report channel.
- **A cgroup per run** (:mod:`normlab.lab.sandbox.cgroups`), where the cgroup v1 ``memory`` and
  ``pids`` hierarchies are writable: ``memory_bytes`` and ``processes`` then bound all the run's
  processes together, its tmpfs pages included, and a run out of memory is stopped whole with a
  note. Elsewhere a :class:`SandboxWarning` says so once, and memory is bounded per process
  only (``RLIMIT_AS``: a run's total is at most ``processes * memory_bytes``).
- **A seccomp filter** (:mod:`normlab.lab.sandbox.seccomp`) on every learner process refuses
  new user namespaces, ``io_uring``, the kernel keyring (so no key outlives a run), ``bpf``,
  ``perf_event_open``, ``ptrace`` and the mount calls.
- **The lab's memory.** What runs report comes back into the lab's process, outside every
  cgroup, so it is bounded in sum: a run's answer line (status, output, notes) is at most
  :func:`_line_bytes`, and its figures follow it one by one, each kept only while the figures
  of all the runs being answered stay within ``figure_bytes`` (the rest are named in a note on
  ``stderr``). :attr:`Sandbox.memory_bound` states the bound with its arithmetic.
- **The OOM score.** Every run process has ``oom_score_adj`` 1000, so if the machine runs short
  the kernel's OOM killer takes a run, never the lab first; the run's ``/proc`` is read-only,
  so no process of the run (an exec'd one could before) can lower it.

Runs are thread-safe and may overlap (up to ``max_runs`` at once, more wait for a slot); the lab
calls :meth:`Sandbox.arun`, which runs in a worker thread so the event loop keeps serving. This
needs root (the uid switch and the mounts; the lab and CI run as root): as another user
:meth:`Sandbox.run` raises :class:`SandboxError` saying so, and ``POST /api/run`` answers 503.

Usage (the first run waits a few seconds for the fork server's imports)::

    with Sandbox(Limits(wall_s=5)) as sandbox:
        result = sandbox.run("import torch; print(torch.ones(2).sum())")
        result.status, result.stdout  # ('ok', 'tensor(2.)\\n')

>>> Limits(wall_s=5).wall_s, Limits().memory_bytes == 4 << 30
(5, True)
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import functools
import io
import json
import mmap
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any

import anyio
import anyio.to_thread

from normlab.lab.sandbox import cgroups, child, seccomp

__all__ = ["DEFAULT_LIMITS", "Limits", "RunResult", "Sandbox", "SandboxError", "SandboxWarning"]

RUN_UID_BASE = 3_000_000
"""Runs use uids in ``[RUN_UID_BASE, RUN_UID_BASE + 64 * 65536)``: no account has them."""
_UID_BLOCK = 64
_UID_BLOCKS = 65536

WARM_MODULES = (
    "numpy",
    "numpy.random",  # numpy imports it lazily, and every run reseeds it
    "torch",
    # torch imports it lazily on the first use of an optimizer (torch.optim.SGD(...)): 2-3 s
    # that every run of a training loop would pay again in its fresh fork
    "torch._dynamo",
    "matplotlib.pyplot",
    "normlab",
    "normlab.init",
    "normlab.nn",
    "normlab.functional",
    "normlab.experiments",
    "normlab.plots",
    "normlab.probe",
    "normlab.doctor",
    "normlab.zoo",
    "sklearn.datasets",  # two_moons: 2-5 s to import, paid by every listing that trains
)
"""What the fork server imports once, so runs find it loaded."""

BACKENDS = ("bwrap", "unshare")
_CAPABILITIES = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_KILL")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts", "mime.types")
_SCRIPT = "/run/normlab/forkserver.py"  # where bubblewrap shows the fork server's script
_GRACE_S = 30.0  # beyond the wall clock: draining output and answering
_ESCAPED = 6  # JSON bytes per byte of output at most: a control byte or an invalid one is \uXXXX
_NOTES_BYTES = 256 << 10  # the notes in an answer line (20 of 1,000 characters, 12 bytes each)
_CHAR_BYTES = 4  # bytes per character of a str at most (one wide character makes all wide)


@dataclass(frozen=True)
class Limits:
    """What one run may use; the whole run is killed (or cut) at each limit.

    Args:
        wall_s: wall-clock seconds for the whole run (status ``"timeout"`` beyond).
        cpu_s: CPU seconds per process (``RLIMIT_CPU``; all threads count). Above ``wall_s`` so
            that torch's threads can work for the whole wall time; it catches a process that
            spins while the clock is generous.
        memory_bytes: address space per process (``RLIMIT_AS``). 4 GiB, generous because
            address space runs far ahead of resident memory with torch: its libraries map about
            0.7 GiB at import, and every thread reserves a stack and a malloc arena (64 MiB).
            With a cgroup per run, also the resident memory of all its processes together,
            the files in its tmpfs included.
        output_bytes: stdout and stderr each. Beyond it the stream keeps its first and last
            halves of this (at line breaks) and a line between them says how many bytes and
            lines were left out: a long run's last lines are usually the ones that matter.
        open_files: descriptors per process (``RLIMIT_NOFILE``).
        processes: processes and threads of the run together (``RLIMIT_NPROC`` of its uid,
            and ``pids.max`` of its cgroup, where it has one).
        disk_bytes: size of the run's private ``/tmp`` (and ``/dev/shm``), memory-backed.
    """

    wall_s: float = 10.0
    cpu_s: float = 30.0
    memory_bytes: int = 4 << 30
    output_bytes: int = 1 << 20
    open_files: int = 256
    processes: int = 128
    disk_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            seconds = f.name.endswith("_s")
            allowed = (int, float) if seconds else int
            if isinstance(value, bool) or not isinstance(value, allowed):
                what = "a number of seconds" if seconds else "an int"
                raise TypeError(f"{f.name} must be {what}, got {type(value).__name__}")
            if not 0 < value < float("inf"):
                raise ValueError(f"{f.name} must be positive and finite, got {value!r}")


DEFAULT_LIMITS = Limits()


@dataclass
class RunResult:
    """How a run went.

    ``status`` is ``"ok"``, ``"error"`` (the code raised; the traceback is in ``stderr``),
    ``"timeout"`` (the wall-clock limit) or ``"killed"`` (a resource limit or a signal; a note at
    the end of ``stderr`` says which). ``figures`` holds one base64 PNG per matplotlib figure the
    code showed (``plt.show()``) or left open, in order. ``duration_s`` is the run's own time,
    from its first process starting to its last one ending.
    """

    status: str
    stdout: str
    stderr: str
    duration_s: float
    figures: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SandboxError(RuntimeError):
    """The sandbox itself could not start or stopped (never a failure of the learner's code)."""


class SandboxBusy(Exception):
    """More runs wait for a slot than :attr:`Sandbox.max_waiting`: this one is refused at once
    (the lab answers 503 with ``Retry-After``) instead of queueing without bound."""


class SandboxWarning(RuntimeWarning):
    """The sandbox runs with less containment than it could (it says what is missing)."""


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """Warn with ``message`` the first time this process meets it (each Sandbox would repeat it)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, SandboxWarning, stacklevel=3)


class Sandbox:
    """A warm, contained runner of Python code (see the module docstring for the design).

    Args:
        limits: what each run may use.
        max_runs: runs at once; later ones wait for a slot.
        max_waiting: runs of :meth:`arun` that may wait for a slot; one more raises
            :class:`SandboxBusy`. They wait in the event loop, holding no thread.
        backend: ``"bwrap"`` or ``"unshare"``; ``None`` picks bwrap when installed.
        start_timeout_s: how long a run waits for the fork server's imports at start.
        figure_bytes: the figures (base64) of all the runs being answered, together. A figure
            that does not fit is left out and the run's ``stderr`` says so; a lone run may use
            it all (the figure being read counts twice: its bytes, then its text).
    """

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        *,
        max_runs: int = 8,
        max_waiting: int = 32,
        backend: str | None = None,
        start_timeout_s: float = 300.0,
        figure_bytes: int = 64 << 20,
    ) -> None:
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        if isinstance(max_runs, bool) or not isinstance(max_runs, int):
            raise TypeError(f"max_runs must be an int, got {type(max_runs).__name__}")
        if not 1 <= max_runs <= _UID_BLOCK:
            raise ValueError(f"max_runs must be in [1, {_UID_BLOCK}], got {max_runs}")
        if isinstance(max_waiting, bool) or not isinstance(max_waiting, int) or max_waiting < 0:
            raise ValueError(f"max_waiting must be an int >= 0, got {max_waiting!r}")
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"backend {backend!r} not supported, use one of {BACKENDS}")
        if not start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be positive, got {start_timeout_s!r}")
        if isinstance(figure_bytes, bool) or not isinstance(figure_bytes, int) or figure_bytes < 0:
            raise ValueError(f"figure_bytes must be an int >= 0, got {figure_bytes!r}")
        self.limits = limits
        self.max_runs = max_runs
        self.max_waiting = max_waiting
        self.backend = backend
        self.start_timeout_s = start_timeout_s
        self.figure_bytes = figure_bytes
        self._figures = _Budget(figure_bytes)
        self._uid_base = RUN_UID_BASE + _UID_BLOCK * secrets.randbelow(_UID_BLOCKS)
        self._slots: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(max_runs):
            self._slots.put(slot)
        self._lock = threading.Lock()
        self._admitted = 0  # arun calls running or waiting for a slot
        self._limiter_of: tuple[asyncio.AbstractEventLoop, anyio.CapacityLimiter] | None = None
        self._worker: _Worker | None = None
        self._cgroup_parents: dict[str, Path] | None = None  # found at start()

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        """Whether the fork server is running."""
        worker = self._worker
        return worker is not None and worker.alive()

    @property
    def uids(self) -> range:
        """The uids this sandbox's runs use, one per slot."""
        return range(self._uid_base, self._uid_base + self.max_runs)

    @property
    def memory_bound(self) -> int:
        """The most resident memory the lab's process uses for the answers of this sandbox's
        runs at once, whatever the runs report, the results its callers hold included.

        .. math::
            B = F + R \\cdot (2 L + 8 o + 128\\,\\text{KiB} + 2 m), \\quad
            L = 12 o + 256\\,\\text{KiB}

        ``F`` is ``figure_bytes``: every figure read is charged to it, twice while its bytes
        become text, once after, for as long as its :class:`RunResult` lives (a route answers
        with the result's JSON and drops it; that JSON is the route's). Each of the ``R`` runs
        (``max_runs``) holds an answer line of at most ``L`` bytes (:func:`_line_bytes`: stdout
        and stderr of at most ``o = limits.output_bytes`` bytes each, escaped in JSON to 6 bytes
        a byte at worst, and the notes) twice while it is parsed (its bytes, then their text),
        and the strings parsed from it: at most ``2 o`` characters of output and 24,000 of
        notes, 4 bytes each at worst. ``m`` is the largest figure (8 MiB): glibc's malloc keeps
        up to its trim threshold (twice the largest block freed) at the top of each thread's
        arena for reuse, so the thread reading a run's figures may keep ``2 m`` beyond them.

        At the defaults (64 MiB, 8 runs, 1 MiB of output) that is 64 + 8 * 48.6 = 453 MiB,
        most of it for output no one prints (a MiB of control characters beside an emoji) and
        for what malloc keeps; 8 runs that each report 64 MiB of figures and print little grow
        the lab by 64 to 90 MiB. Before this bound 8 such runs raised its peak by 919 MiB (each
        report was read whole, three times over: chunks, bytes, text).
        """
        o = self.limits.output_bytes
        line = 2 * _line_bytes(self.limits) + 2 * o * _CHAR_BYTES + (128 << 10)
        return self.figure_bytes + self.max_runs * (line + 2 * child.FIGURE_BYTES)

    def start(self) -> None:
        """Start the fork server (idempotent; returns before its imports finish)."""
        with self._lock:
            if self._worker is None or not self._worker.alive():
                self._worker = _Worker(_command(self.backend))
                self._cgroup_parents = _cgroup_parents()

    def close(self) -> None:
        """Stop the fork server and every run (idempotent; :meth:`start` may follow)."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def run(
        self, code: str, *, files: Mapping[str, str] | None = None, wall_s: float | None = None
    ) -> RunResult:
        """Run ``code`` as ``__main__`` in a fresh contained process; never raises for the code.

        Args:
            code: Python source.
            files: extra text files (relative path -> content) written into the run's private
                working directory before the code runs; it is on ``sys.path``.
            wall_s: this run's wall-clock limit instead of ``limits.wall_s``.

        Raises:
            SandboxError: the sandbox could not start or stopped during the run.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        wall = self.limits.wall_s if wall_s is None else _positive_seconds(wall_s)
        request = {
            "code": code,
            "files": _checked_files(files),
            "wall_s": wall,
            "limits": asdict(self.limits),
            "uid": None,
        }
        slot = self._slots.get()
        cgroup = None
        try:
            request["uid"] = self.uids[slot]
            self.start()  # it finds where runs' cgroups go
            cgroup = self._run_cgroup()
            fds = [] if cgroup is None else cgroup.descriptors
            reply, conn, charged = self._exchange(
                json.dumps(request).encode(), wall + _GRACE_S, fds
            )
        except BaseException:
            self._release(None, cgroup, slot)
            raise
        if reply.get("reaped", True):
            self._release(conn, cgroup, slot)
        else:  # killed: answered at its limit; the slot is free once its processes are gone
            release = threading.Thread(
                target=self._release,
                args=(conn, cgroup, slot),
                name="normlab-sandbox-release",
                daemon=True,
            )
            release.start()
        try:
            result = RunResult(
                status=str(reply["status"]),
                stdout=str(reply["stdout"]),
                stderr=str(reply["stderr"]),
                duration_s=float(reply["duration_s"]),
                figures=reply["figures"],
            )
        except BaseException:
            self._figures.give(charged)
            raise
        self._figures.hold(result, charged)  # while the caller holds the result: all is counted
        return result

    def _release(
        self, conn: socket.socket | None, cgroup: cgroups.RunCgroup | None, slot: int
    ) -> None:
        """Give back a run's slot and remove its cgroup once its supervisor has closed ``conn``
        (every process of the run is gone then; it was given the wall clock and a grace)."""
        if conn is not None:
            with contextlib.suppress(OSError):  # (a timeout too: the cgroup says what is left)
                _read_all(conn)
            conn.close()
        if cgroup is not None:
            _remove(cgroup)
        self._slots.put(slot)

    async def arun(self, code: str, **kw: Any) -> RunResult:
        """:meth:`run` in a worker thread, so the event loop keeps serving meanwhile.

        A run waits for one of :attr:`max_runs` slots in the event loop, not in a thread:
        the threads of anyio's shared pool (which the lab's page routes use) are never held
        by waiting runs. Past :attr:`max_waiting` waiting runs, :class:`SandboxBusy`.
        """
        with self._admission():
            return await anyio.to_thread.run_sync(
                functools.partial(self.run, code, **kw), limiter=self._limiter()
            )

    @contextlib.contextmanager
    def _admission(self) -> Iterator[None]:
        """Count this run among the admitted ones, or refuse it when the queue is full."""
        with self._lock:
            if self._admitted >= self.max_runs + self.max_waiting:
                raise SandboxBusy(
                    f"{self.max_waiting} runs wait for the sandbox already: try again shortly"
                )
            self._admitted += 1
        try:
            yield
        finally:
            with self._lock:
                self._admitted -= 1

    def _limiter(self) -> anyio.CapacityLimiter:
        """The running event loop's limiter of :attr:`max_runs` threads for this sandbox."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._limiter_of is None or self._limiter_of[0] is not loop:  # the lab has one
                self._limiter_of = (loop, anyio.CapacityLimiter(self.max_runs))
            return self._limiter_of[1]

    def _run_cgroup(self) -> cgroups.RunCgroup | None:
        """A cgroup for one run (its memory and tasks together), or None where there is none."""
        parents = self._cgroup_parents
        if parents is None:
            return None
        try:  # the init counts as one task, as it does not under RLIMIT_NPROC
            return cgroups.RunCgroup(parents, self.limits.memory_bytes, self.limits.processes + 1)
        except OSError as exc:
            _warn_once(f"normlab sandbox: could not make a run's cgroup ({exc}); {_FALLBACK}")
            return None

    def _exchange(
        self, payload: bytes, timeout: float, fds: list[int]
    ) -> tuple[dict[str, Any], socket.socket, int]:
        """Send a run to the fork server: its reply (a line of JSON, then the figures that fit
        the budget, with a note on ``stderr`` for those that did not), the connection, which its
        supervisor closes once every process of the run is gone, and the bytes of the budget
        the figures hold (given back when their result is dropped)."""
        for attempt in range(2):
            self.start()
            worker = self._worker
            if worker is None:  # closed by another thread in between
                raise SandboxError("the sandbox was closed")
            worker.wait_ready(self.start_timeout_s)
            ours, theirs = socket.socketpair()
            try:
                try:
                    worker.send(theirs, fds)
                except OSError:
                    if attempt == 0 and not worker.alive():
                        ours.close()
                        continue  # the fork server died since the last run: start a new one
                    raise SandboxError(f"the sandbox stopped: {worker.diagnostics()}") from None
                finally:
                    theirs.close()
                ours.settimeout(timeout)
                try:
                    ours.sendall(payload)
                    ours.shutdown(socket.SHUT_WR)
                    with ours.makefile("rb") as reader:
                        reply = self._receive(reader, worker)
                except TimeoutError:
                    raise SandboxError("the sandbox did not answer in time") from None
                except (OSError, ValueError) as exc:
                    raise SandboxError(f"the sandbox stopped during the run: {exc}") from None
            except BaseException:
                ours.close()
                raise
            return reply, ours, reply.pop("charged")
        raise AssertionError("unreachable")  # the loop returns or raises

    def _receive(self, reader: io.BufferedIOBase, worker: _Worker) -> dict[str, Any]:
        """A run's reply from ``reader``: its line, then its figures (``"charged"``: the bytes
        of the budget they hold, to give back once their result is dropped)."""
        limit = _line_bytes(self.limits)
        line = reader.readline(limit + 1)
        if not line:
            raise SandboxError(f"the sandbox stopped during the run: {worker.diagnostics()}")
        if not line.endswith(b"\n"):
            raise SandboxError(f"the sandbox's answer was cut or over {limit:,} bytes")
        reply: dict[str, Any] = json.loads(line)
        del line  # its text is parsed: only the values stay
        figures, charged, note = _read_figures(reader, reply.pop("figure_sizes"), self._figures)
        if note:
            stderr = str(reply["stderr"])
            sep = "" if not stderr or stderr.endswith("\n") else "\n"
            reply["stderr"] = f"{stderr}{sep}[normlab sandbox: {note}]\n"
        reply["figures"], reply["charged"] = figures, charged
        return reply


class _Budget:
    """Bytes shared by concurrent runs: each takes what it holds and gives it back after."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._lock = threading.Lock()
        self._held: dict[int, tuple[weakref.ref[RunResult], int]] = {}
        self._dropped: list[weakref.ref[RunResult]] = []  # filled by the weakrefs' callback

    def take(self, n: int) -> bool:
        """Take ``n`` bytes if they are free (never waits: a run that waited could wait on
        runs that wait on it)."""
        with self._lock:
            while self._dropped:  # results gone since: their bytes are free again
                _, held = self._held.pop(id(self._dropped.pop()))
                self.free += held
            if n > self.free:
                return False
            self.free -= n
            return True

    def hold(self, result: RunResult, n: int) -> None:
        """Keep ``n`` bytes taken until ``result`` is dropped.

        The weakref's callback is ``list.append``, which runs no Python code: the interpreter
        cannot switch threads between it and the freeing of the result's figures that follows
        in the same deallocation, so no :meth:`take` counts bytes that are still allocated (a
        Python callback may let another thread run, and take them, in between).
        """
        if not n:
            return
        ref = weakref.ref(result, self._dropped.append)
        with self._lock:
            self._held[id(ref)] = (ref, n)

    def give(self, n: int) -> None:
        with self._lock:
            self.free += n


def _line_bytes(limits: Limits) -> int:
    """The longest answer line a run can send: its stdout and stderr of ``output_bytes`` each,
    every byte escaped in JSON (6 bytes at most), and the notes."""
    return 2 * _ESCAPED * limits.output_bytes + _NOTES_BYTES


def _read_figures(
    reader: io.BufferedIOBase, sizes: object, budget: _Budget
) -> tuple[list[str], int, str]:
    """The figures that follow an answer line (``sizes`` bytes each), each kept only if
    ``budget`` has room for it: ``(figures, bytes of the budget they hold, note)``.

    A figure is charged twice while it is read (its bytes, then its text) and once after; one
    that does not fit is read and dropped, and the note says how many were left out.
    """
    if (
        not isinstance(sizes, list)
        or len(sizes) > child.FIGURE_LIMIT
        or not all(type(n) is int and 0 <= n <= child.FIGURE_BYTES for n in sizes)
    ):
        raise SandboxError(f"the sandbox answered figure sizes {sizes!r:.80}")
    figures: list[str] = []
    charged = left = left_bytes = 0
    try:
        for size in sizes:
            if not budget.take(2 * size):
                _skip(reader, size)
                left, left_bytes = left + 1, left_bytes + size
                continue
            charged += 2 * size
            figures.append(_read_text(reader, size))
            budget.give(size)
            charged -= size
    except BaseException:
        budget.give(charged)
        raise
    if not left:
        return figures, charged, ""
    note = (
        f"{left} of the run's figures ({left_bytes:,} bytes) were left out: the lab holds at "
        f"most {_amount(budget.total)} of figures of all the runs it answers at once (show "
        f"fewer or smaller figures, or run it again)"
    )
    return figures, charged, note


def _read_text(reader: io.BufferedIOBase, size: int) -> str:
    """``size`` bytes of ``reader`` as ASCII text, read through an anonymous mapping: its pages
    go back to the kernel when it closes, where a freed ``bytes`` of megabytes can stay in a
    thread's malloc arena and add to the lab's resident memory."""
    if size == 0:
        return ""
    with mmap.mmap(-1, size) as scratch:
        if reader.readinto(scratch) != size:
            raise SandboxError("the sandbox's answer ended within a figure")
        with memoryview(scratch) as view:
            return str(view, "ascii")


def _skip(reader: io.BufferedIOBase, size: int) -> None:
    """Read ``size`` bytes of ``reader`` and drop them, 64 KiB at a time."""
    while size:
        chunk = reader.read(min(size, 1 << 16))
        if not chunk:
            raise SandboxError("the sandbox's answer ended within a figure")
        size -= len(chunk)


def _amount(n: int) -> str:
    """``n`` bytes for a reader: ``64 MiB``, ``512 KiB``, or ``1,000 bytes``."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift:,} {unit}"
    return f"{n:,} bytes"


class _Worker:
    """One fork-server process: its control socket, start-up state and last output lines."""

    def __init__(self, command: tuple[list[str], dict[str, str], dict[str, Any] | None]) -> None:
        argv, self.env, view = command
        self.ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ready = threading.Event()
        self.failed = False
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self._send_lock = threading.Lock()
        self._launched = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: OSError | None = None
        argv = [*argv, str(theirs.fileno())]
        # The process is started and waited for by one long-lived thread: bwrap's
        # --die-with-parent fires when the *thread* that forked it ends, and the lab's first
        # run may come from a short-lived worker thread.
        self._keeper = threading.Thread(
            target=self._keep, args=(argv, theirs.fileno()), name="normlab-sandbox", daemon=True
        )
        self._keeper.start()
        self._launched.wait()
        theirs.close()
        if self.error is not None:
            self.ctrl.close()
            raise SandboxError(f"could not start the sandbox ({argv[0]}): {self.error}")
        config = {"view": view, "warm": list(WARM_MODULES), "seccomp": _seccomp_filter()}
        self.ctrl.send(json.dumps(config).encode())

    def _keep(self, argv: list[str], fd: int) -> None:
        try:
            self.proc = subprocess.Popen(
                argv,
                env=self.env,
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl+C in the lab's terminal is the lab's alone
            )
        except OSError as exc:
            self.error = exc
            self._launched.set()
            return
        self._launched.set()
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if line == child.READY:
                    self.ready.set()
                else:
                    self.tail.append(line)
        self.proc.wait()
        self.failed = True
        self.ready.set()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and not self.failed

    def wait_ready(self, timeout: float) -> None:
        if not self.ready.wait(timeout):
            raise SandboxError(f"the sandbox did not start within {timeout:g} s")
        if self.failed:
            raise SandboxError(f"the sandbox stopped: {self.diagnostics()}")

    def send(self, conn: socket.socket, fds: list[int]) -> None:
        """Hand the fork server a run's socket ``conn`` and its cgroup descriptors ``fds``."""
        with self._send_lock:
            socket.send_fds(self.ctrl, [b"run"], [conn.fileno(), *fds])

    def diagnostics(self) -> str:
        code = None if self.proc is None else self.proc.poll()
        lines = " | ".join(self.tail) or "no output"
        return f"fork server exit status {code}; its last output: {lines}"

    def stop(self) -> None:
        self.ctrl.close()  # the fork server stops on its own when it reads the hang-up
        if self.proc is not None:
            # Not only bwrap/unshare: its child (the PID namespace's init) arms
            # --die-with-parent's signal only some way into its start, and may already have
            # left the group (--new-session) by then, so killing bwrap in that window (a lab
            # closed just after it started) left the child and the fork server below it alive
            # for good, holding the output pipe. So: stop bwrap (it can fork no more), kill its
            # children (an init's death ends its whole namespace), then its group.
            if self.proc.poll() is None:  # not reaped: its pid still names it and its group
                pid = self.proc.pid
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    os.kill(pid, signal.SIGSTOP)
                    for child in _children(pid):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(child, signal.SIGKILL)
                    os.killpg(pid, signal.SIGKILL)  # the group bwrap/unshare leads
            self.proc.wait()
        # The keeper ends when the last process of the sandbox is gone; one stuck in a disk
        # read finishes dying on its own, so do not wait for it long.
        self._keeper.join(timeout=2)


_FALLBACK = (
    "each run's memory and processes are limited per process (RLIMIT_AS, RLIMIT_NPROC), "
    "not for all of the run's processes together"
)


def _cgroup_parents() -> dict[str, Path] | None:
    """Where runs' cgroups go (:func:`cgroups.parents`), or None after a warning saying why;
    the run cgroups a lab that was killed left there are removed first."""
    try:
        found = cgroups.parents()
    except OSError as exc:
        _warn_once(f"normlab sandbox: no per-run cgroups: {exc}; {_FALLBACK}")
        return None
    try:
        cgroups.remove_stale(found)
    except OSError as exc:
        _warn_once(f"normlab sandbox: a killed lab's run cgroups stay behind: {exc}")
    return found


def _remove(cgroup: cgroups.RunCgroup) -> None:
    """Remove a finished run's cgroup; one that will not go is left behind with a warning."""
    try:
        cgroup.remove()
    except OSError as exc:
        message = f"normlab sandbox: a run's cgroup stays behind: {exc}"
        warnings.warn(message, SandboxWarning, stacklevel=2)


def _seccomp_filter() -> str | None:
    """The learner's seccomp filter (:mod:`seccomp`) in base64, or None after a warning."""
    try:
        return base64.b64encode(seccomp.program()).decode("ascii")
    except ValueError as exc:
        _warn_once(f"normlab sandbox: runs get no seccomp filter: {exc}")
        return None


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (from ``/proc``; none if it has gone)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in task.read_text().split()]
    return found


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _positive_seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"wall_s must be a number of seconds, got {type(value).__name__}")
    if not 0 < value < float("inf"):
        raise ValueError(f"wall_s must be a positive number of seconds, got {value!r}")
    return float(value)


def _checked_files(files: Mapping[str, str] | None) -> dict[str, str]:
    """``files`` as a plain dict, refusing names that would leave the working directory."""
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise TypeError(f"files must be a mapping of relative path to text, got {files!r}")
    checked: dict[str, str] = {}
    for name, text in files.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise TypeError(f"files must map str paths to str contents, got {name!r}")
        path = PurePosixPath(name)
        if not name or "\0" in name or path.is_absolute() or ".." in path.parts:
            raise ValueError(
                f"files: {name!r} is not allowed, use a relative path inside the working folder"
            )
        checked[str(path)] = text
    return checked


def _environment(scratch: str) -> dict[str, str]:
    """The fork server's whole environment: nothing of the lab's (tokens, paths) leaks in."""
    # The lab's own thread count: a matmul or a reduction may split its work by threads, so the
    # playground prints the lab's numbers to the last bit only with the same count (capped to
    # keep torch's pool well inside `processes`).
    threads = str(min(_lab_threads(), 8))
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": scratch,
        "TMPDIR": scratch,  # also tells the fork server where runs get their private tmpfs
        "USER": "learner",
        "LOGNAME": "learner",
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{scratch}/matplotlib",
        "OMP_NUM_THREADS": threads,
        # torch's OpenMP threads sleep when idle instead of spinning: a spin counts against the
        # run's CPU-time limit, and on a loaded machine it can burn most of it (results are
        # the same either way: the wait policy changes no arithmetic)
        "OMP_WAIT_POLICY": "PASSIVE",
        "MKL_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
    }


def _lab_threads() -> int:
    """The intra-op threads the lab's own torch runs with (torch's default: one per core)."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else (os.cpu_count() or 1)


def _command(backend: str | None) -> tuple[list[str], dict[str, str], dict[str, Any] | None]:
    """The fork server's command line (without its descriptor), environment, and view (unshare).

    Runs work in ``/tmp``, unless the Python environment itself lives there (a checkout in a
    temporary folder): then in ``/scratch``, so the run's tmpfs does not hide it.
    """
    if os.geteuid() != 0:
        raise SandboxError(
            "running code needs root: each run gets an unprivileged uid of its own and its own "
            "mounts (start the lab as root)"
        )
    if backend is None:
        backend = next((b for b in BACKENDS if shutil.which(b)), None)
        if backend is None:
            raise SandboxError("running code needs bubblewrap (bwrap) or unshare (util-linux)")
    tool = shutil.which(backend)
    if tool is None:
        raise SandboxError(f"backend {backend!r} is not installed")
    binds, symlinks, masks = view()
    scratch = "/scratch" if any(_under(b, ["/tmp"]) for b in binds) else "/tmp"
    env = _environment(scratch)
    python = [sys.executable, "-I", "-B"]
    script = str(Path(child.__file__).resolve())
    if backend == "unshare":
        namespaces = ["--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child"]
        described = {
            "mountpoint": _mountpoint(binds),
            "binds": binds,
            "symlinks": symlinks,
            "masks": masks,
        }
        return [tool, *namespaces, *python, script], env, described
    argv = [tool, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net"]
    argv += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL"]
    for cap in _CAPABILITIES:
        argv += ["--cap-add", cap]
    made: set[str] = set()
    for path in [*binds, _SCRIPT]:
        for parent in reversed(PurePosixPath(path).parents[:-1]):  # bwrap would make them 0700
            p = str(parent)
            if p not in made and not _under(p, binds):
                argv += ["--perms", "0755", "--dir", p]
                made.add(p)
    for target, link in symlinks:
        argv += ["--symlink", target, link]
    for path in binds:
        argv += ["--ro-bind", path, path]
    for path in masks:
        argv += ["--perms", "0755", "--tmpfs", path, "--remount-ro", path]
    argv += ["--ro-bind", script, _SCRIPT, "--dev", "/dev", "--proc", "/proc", "--tmpfs", scratch]
    argv += ["--remount-ro", "/", "--chdir", scratch, "--", *python, _SCRIPT]
    return argv, env, None


def view() -> tuple[list[str], list[list[str]], list[str]]:
    """What the sandbox shows of this machine: ``(binds, symlinks, masks)``.

    ``binds`` are host paths shown read-only at the same place, ``symlinks`` are ``[target,
    link]`` pairs for merged-/usr links, and ``masks`` are paths inside a bind hidden behind an
    empty tmpfs: the lab's own code and the learner's data folder, wherever they are installed.
    """
    import normlab

    candidates = ["/usr", *(f"/etc/{name}" for name in _ETC)]
    symlinks: list[list[str]] = []
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            symlinks.append([os.readlink(name), name])
        elif os.path.isdir(name):
            candidates.append(name)
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        candidates += [prefix, str(Path(prefix).resolve())]
    package = Path(normlab.__file__).resolve().parent
    candidates.append(str(package))
    binds: list[str] = []
    for path in sorted({os.path.normpath(c) for c in candidates if os.path.exists(c)}, key=len):
        if not _under(path, binds):
            binds.append(path)
    lab = Path(__file__).resolve().parents[1]  # normlab/lab/: the server's code, this included
    hidden = [lab, data_folder()]
    masks = sorted({str(h) for h in hidden if _under(str(h), binds) and h.is_dir()}, key=len)
    return binds, symlinks, masks


def data_folder() -> Path:
    """Where the lab keeps the learner's data: ``$XDG_DATA_HOME/normlab`` or ``~/.local/share``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).resolve() / "normlab"


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mountpoint(binds: list[str]) -> str:
    """A directory the unshare backend may cover with its new root (none of the binds is in it)."""
    for candidate in ("/mnt", "/media", "/srv", "/opt", "/run"):
        if os.path.isdir(candidate) and not any(_under(b, [candidate]) for b in binds):
            return candidate
    raise SandboxError("the unshare backend needs an empty-able directory such as /mnt")
