"""Per-run cgroups: memory and process limits that count every process of a run together.

``RLIMIT_AS`` bounds one process and ``RLIMIT_NPROC`` one uid, so a run that forks three
processes could hold three times ``memory_bytes`` (6.2 GiB was measured), and the pages of its
tmpfs (``/tmp``, ``/dev/shm``) counted against nothing. A cgroup v1 child of the lab's own cgroup
in the ``memory`` and ``pids`` hierarchies counts them all: every process of the run (the init
joins before it forks the learner, so nothing escapes) and the tmpfs pages they write (the kernel
charges shared-memory pages to the cgroup of the process that writes them).

The lab makes one :class:`RunCgroup` per run, hands the fork server descriptors of its
``cgroup.procs`` files (writes are checked against the credentials that *opened* them, so the
sandboxed init, which cannot see ``/sys``, can still join) and an eventfd that the kernel signals
when the run's memory runs out, and removes it after the run. Where the hierarchies are missing
or not writable, :func:`parents` raises :class:`CgroupsUnavailable` with the reason and the sandbox
falls back to the per-process rlimits.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import time
from pathlib import Path

__all__ = ["CONTROLLERS", "CgroupsUnavailable", "RunCgroup", "parents", "remove_stale"]

CONTROLLERS = ("memory", "pids")
_RMDIR_S = 2.0  # the run's last processes leave their cgroup a moment after they are reaped
_RUN_NAME = re.compile(r"normlab-run-(\d+)-[0-9a-f]+")
"""A run's cgroup: ``normlab-run-<the lab's pid>-<random>``."""


class CgroupsUnavailable(OSError):
    """The cgroup v1 ``memory`` or ``pids`` hierarchy is not mounted or not writable here."""


def parents(
    cgroup_file: str = "/proc/self/cgroup", mountinfo_file: str = "/proc/self/mountinfo"
) -> dict[str, Path]:
    """This process's own cgroup folder in each of :data:`CONTROLLERS`, checked writable.

    Raises:
        CgroupsUnavailable: a hierarchy is not mounted (cgroup v2 only, say), or a child
            cannot be made in it (not root, a read-only ``/sys/fs/cgroup``).
    """
    own: dict[str, str] = {}
    for line in Path(cgroup_file).read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            own[controller] = path
    mounts: dict[str, tuple[str, str]] = {}  # controller -> (mount root, mount point)
    for line in Path(mountinfo_file).read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        fstype, _, options = [*tail.split(), "", "", ""][:3]
        if fstype == "cgroup":
            root, point = fields.split()[3:5]
            for controller in options.split(","):
                mounts.setdefault(controller, (root, point))
    found: dict[str, Path] = {}
    for controller in CONTROLLERS:
        if controller not in own or controller not in mounts:
            raise CgroupsUnavailable(f"the cgroup v1 {controller!r} hierarchy is not mounted")
        root, point = mounts[controller]
        relative = os.path.relpath(own[controller], root)
        folder = Path(point) if relative == "." else Path(point) / relative
        probe = folder / f"normlab-probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise CgroupsUnavailable(f"cannot make a cgroup in {folder}: {why}") from None
        found[controller] = folder
    return found


class RunCgroup:
    """One run's cgroup in the ``memory`` and ``pids`` hierarchies, with its limits set.

    Args:
        parents: the folders to make it in (:func:`parents`).
        memory_bytes: resident memory of all the run's processes and its tmpfs pages together.
        tasks: processes and threads of the run together (its init included).

    :attr:`descriptors` are, in order, the memory and the pids ``cgroup.procs`` (write ``0`` to
    join) and an eventfd that becomes readable when the run runs out of memory. :meth:`remove`
    closes them and removes the cgroup (call it once every process of the run is gone).
    """

    def __init__(self, parents: dict[str, Path], memory_bytes: int, tasks: int) -> None:
        name = f"normlab-run-{os.getpid()}-{secrets.token_hex(6)}"
        self.folders = [parents[c] / name for c in CONTROLLERS]
        self.descriptors: list[int] = []
        self._made: list[Path] = []
        try:
            for folder in self.folders:
                folder.mkdir()
                self._made.append(folder)
            memory, pids = self.folders
            _write(memory / "memory.limit_in_bytes", str(memory_bytes))
            if (memory / "memory.memsw.limit_in_bytes").exists():  # swap counts too
                _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))
            _write(pids / "pids.max", str(tasks))
            self.descriptors = [
                os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
                for folder in self.folders
            ]
            self.descriptors.append(_oom_eventfd(memory))
        except OSError:
            self.remove()
            raise

    def oom_kills(self) -> int:
        """How many of the run's processes the kernel killed for want of memory so far."""
        for line in (self.folders[0] / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        """Close the descriptors and remove the cgroup (idempotent; retries while it empties)."""
        for fd in self.descriptors:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.descriptors = []
        while self._made:
            _rmdir_once_empty(self._made[-1])
            self._made.pop()


def _rmdir_once_empty(folder: Path) -> None:
    """Remove the cgroup ``folder``, retrying for :data:`_RMDIR_S` while its last processes
    leave it (``EBUSY``); gone already is fine."""
    deadline = time.monotonic() + _RMDIR_S
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY: a process of the run has not left yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_stale(parents: dict[str, Path]) -> list[Path]:
    """Remove the run cgroups that a lab which died without cleaning up (SIGKILL, a crash)
    left in ``parents``, and return them.

    A run's cgroup is named after its lab's pid (:class:`RunCgroup`); one whose lab is no
    longer alive is stale. Any process still in it is what is left of a dead lab's run (the
    learner's code) and is killed first, so the folder can go. A folder of a living lab is
    never touched.
    """
    removed: list[Path] = []
    for parent in parents.values():
        for folder in sorted(parent.iterdir()):
            match = _RUN_NAME.fullmatch(folder.name)
            if match is None or not folder.is_dir() or _alive(int(match.group(1))):
                continue
            with contextlib.suppress(FileNotFoundError):
                for pid in (folder / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            _rmdir_once_empty(folder)
            removed.append(folder)
    return removed


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _oom_eventfd(memory: Path) -> int:
    """An eventfd the kernel signals when the cgroup ``memory`` runs out of memory."""
    event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    try:
        control = os.open(memory / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _write(memory / "cgroup.event_control", f"{event} {control}")
        finally:
            os.close(control)
    except OSError:
        os.close(event)
        raise
    return event
