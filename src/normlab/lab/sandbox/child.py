"""The sandbox's fork server: the half of :mod:`normlab.lab.sandbox` that lives inside the sandbox.

The lab imports this file only for :data:`READY` and its path:
:class:`~normlab.lab.sandbox.Sandbox` starts it as a script (``python -I -B child.py FD``)
inside bubblewrap, or inside ``unshare`` namespaces where it builds the file system view itself.
Until it warms up it uses only the standard library.

Four kinds of process take part in a run::

    fork server   one per Sandbox, uid 0, few capabilities; has imported torch & co. once
    └ supervisor  one per run: enters new mount/PID/net/IPC/UTS namespaces, enforces the wall
      │           clock and the run's memory, relays output, answers the lab on the run's socket
      └ init      PID 1 of the run's PID namespace: joins the run's cgroups, mounts a fresh
        │         read-only /proc and a private /tmp, forks the learner and waits; when it
        │         exits the kernel kills the namespace
        └ learner the run's own uid, rlimits, no capabilities, no inherited descriptors, the
                  seccomp filter; executes the code, then reports status and figures on
                  descriptor 3

Protocol with the lab: the first message on the control socket (descriptor ``FD``, a
``SOCK_SEQPACKET`` pair) is the JSON configuration (the view to build, the modules to warm, the
seccomp filter); the server then prints :data:`READY` on stdout. Every later message carries one
stream socket (``SCM_RIGHTS``), then the run's cgroup descriptors where it has a cgroup; the lab
writes the run's JSON request on the socket and shuts its side down, the supervisor answers one
line of JSON (``figure_sizes`` in place of the figures), then the figures' bytes (ASCII base64,
one after the other, as many bytes as each size says), and closes it once the run is gone. The
lab reads the figures one by one, and keeps only those that fit its budget (the lab holds the
figures of all runs at once in one bounded sum), so no run's report is ever held in it whole
at a size of the run's choosing. An empty message (the lab closed the control socket) stops the
server.
"""

from __future__ import annotations

import base64
import builtins
import ctypes
import importlib
import io
import json
import linecache
import math
import os
import random
import resource
import select
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
import types
from typing import Any

READY = "normlab-sandbox-ready"
"""The line the fork server prints once it has warmed up."""

SOURCE_NAME = "<playground>"
"""The file name the learner's code runs under (tracebacks show it)."""

SCRATCH = os.environ.get("TMPDIR", "/tmp")
"""Where each run gets its private tmpfs (its working folder); the lab sets it."""

FIGURE_LIMIT = 20
"""The most figures a run reports (the lab checks the supervisor's answer against it)."""
FIGURE_BYTES = 8 << 20
"""The largest figure a run reports, its base64 PNG (a 640 x 480 one is about 50 KiB)."""
_REPORT_LIMIT = 64 << 20  # bytes of figures (base64) a learner may report
_NOTE_LIMIT, _NOTE_CHARS = 20, 1000  # notes go to stderr, past the output limit: few and short
_DRAIN_S = 5.0  # after the init is gone every writer is dead; reading the rest is quick
_KILLED_DRAIN_S = 0.25  # a killed run's writers die with its namespace: what the pipes hold now
_TEARDOWN_S = 0.5  # how long a killed run's answer waits for its namespace to be gone

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_PR_SET_PDEATHSIG = 1
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4


def _ok(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = [s.encode() if s else None for s in (source, target, fstype, data)]
    _ok(_libc.mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {target}")


def _unshare(flags: int) -> None:
    _ok(_libc.unshare(flags), "unshare")


def _prctl(option: int, value: int, arg: int = 0) -> None:
    _ok(_libc.prctl(option, value, arg, 0, 0), f"prctl {option}")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _install_filter(program: bytes) -> None:
    """Install the seccomp ``program`` (``sock_filter`` bytes from the lab) on this process.

    It needs ``PR_SET_NO_NEW_PRIVS`` (or privilege) and binds this process and every one it
    forks or executes from here on; a filter can only be added to, never removed.
    """
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog))


_FILTER: bytes | None = None
"""The seccomp filter every learner process gets (from the lab's configuration)."""


# --- the fork server -------------------------------------------------------------------------


def main(argv: list[str]) -> None:
    """Configure, warm up, then fork one supervisor per run request until the lab hangs up."""
    global _FILTER
    ctrl = socket.socket(fileno=int(argv[1]))
    config = json.loads(ctrl.recv(1 << 20))
    if config.get("seccomp"):
        _FILTER = base64.b64decode(config["seccomp"])
    if config.get("view"):
        _build_root(config["view"])
    for name in config["warm"]:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a run that needs it will report the error itself
            print(f"normlab sandbox: warm import of {name} failed: {exc!r}", file=sys.stderr)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished supervisors
    print(READY, flush=True)
    while True:
        message, fds, _, _ = socket.recv_fds(ctrl, 16, 4)
        if not message:
            return
        if fds and os.fork() == 0:
            try:
                ctrl.close()
                _supervise(fds[0], fds[1:])
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)


def _build_root(view: dict[str, Any]) -> None:
    """Build the read-only view bubblewrap would build, then ``chroot`` into it (``unshare``).

    ``view`` has ``mountpoint`` (an empty-able directory the new root is mounted on),
    ``binds`` (host paths shown read-only at the same place), ``symlinks`` (``[target, link]``)
    and ``masks`` (paths inside binds hidden behind an empty read-only tmpfs).
    """
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    root = view["mountpoint"]
    _mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=16m")
    ro = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
    for path in view["binds"]:
        target = root + path
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if os.path.isdir(path):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            open(target, "a").close()
        _mount(path, target, None, _MS_BIND | _MS_REC)
        _mount(None, target, None, ro)
    for target, link in view["symlinks"]:
        os.symlink(target, root + link)
    for path in view["masks"]:
        _mount("tmpfs", root + path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "size=4k")
    os.makedirs(root + "/dev", mode=0o755)
    _mount("tmpfs", root + "/dev", "tmpfs", _MS_NOSUID, "mode=0755,size=64k")
    for name in ("null", "zero", "full", "random", "urandom"):
        open(f"{root}/dev/{name}", "a").close()
        _mount(f"/dev/{name}", f"{root}/dev/{name}", None, _MS_BIND)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{root}/dev/{name}")
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    os.mkdir(root + "/dev/shm", 0o755)
    os.mkdir(root + "/proc", 0o755)
    _mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    os.makedirs(root + SCRATCH, 0o755, exist_ok=True)
    _mount("tmpfs", root + SCRATCH, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=64m")
    os.chroot(root)
    os.chdir(SCRATCH)
    _mount(None, "/", None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


# --- the supervisor --------------------------------------------------------------------------


class _Capture:
    """The head and the tail of a stream within ``limit`` bytes, and what it carried in all.

    A flood of output is cut in the middle, not at the end: the last lines (a result, a
    traceback, an exercise's report) are usually the ones that matter. The first half of the
    bound keeps the head as it comes; the second half is a window over the latest bytes.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()  # the latest bytes after the head, one more than it keeps
        self.total = 0
        self.newlines = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.newlines += chunk.count(b"\n")
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        keep = self.limit - len(self.head) + 1  # the extra byte: does the window start a line?
        if len(self.tail) > keep:
            del self.tail[: len(self.tail) - keep]  # cheap: bytearray drops its front in place

    @property
    def cut(self) -> bool:
        """Whether bytes were left out (the stream carried more than ``limit``)."""
        return self.total > self.limit

    @property
    def data(self) -> bytes:
        """Every byte of the stream while it is not :attr:`cut`; else its head and tail."""
        if not self.cut:
            return bytes(self.head + self.tail)
        head, tail = self._whole_lines()
        return head + tail

    def _whole_lines(self) -> tuple[bytes, bytes]:
        """The kept head and tail, cut at line breaks unless that would lose half of either."""
        head, tail = bytes(self.head), bytes(self.tail)
        end = head.rfind(b"\n") + 1
        if end >= len(head) // 2:
            head = head[:end]
        start = tail.find(b"\n") + 1  # 1 when the window starts a line: only the extra byte
        if 0 < start <= len(tail) // 2:
            return head, tail[start:]
        return head, tail[1:]

    def text(self, name: str) -> str:
        """The stream as text; a cut one has a line in the middle saying what was left out."""
        if not self.cut:
            return self.data.decode("utf-8", "replace")
        head, tail = self._whole_lines()
        left_out = self.total - len(head) - len(tail)
        lines = self.newlines - head.count(b"\n") - tail.count(b"\n")
        sep = "" if head.endswith(b"\n") or not head else "\n"
        note = (
            f"{sep}[normlab sandbox: {name} truncated: {left_out:,} bytes ({lines:,} lines) "
            f"left out here, between the first {len(head):,} and the last {len(tail):,} "
            f"of {self.total:,} bytes]\n"
        )
        return head.decode("utf-8", "replace") + note + tail.decode("utf-8", "replace")


def _supervise(fd: int, cgroup: list[int]) -> None:
    """Serve one run on the stream socket ``fd``: read the request, contain it, answer.

    ``cgroup`` holds the run's cgroup descriptors from the lab (see :func:`_contain`), or none.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this process waits for its init
    with socket.socket(fileno=fd) as conn:
        chunks = []
        while chunk := conn.recv(1 << 16):
            chunks.append(chunk)
        reply, killed = _contain(json.loads(b"".join(chunks)), cgroup)
        figures = reply.pop("figures")
        reply["figure_sizes"] = [len(f) for f in figures]  # ASCII: one byte a character
        conn.sendall(json.dumps(reply).encode() + b"\n")
        for figure in figures:
            conn.sendall(figure.encode("ascii"))
        if killed is not None:  # answered at the limit; the slot is the lab's once all are gone
            os.waitpid(killed, 0)


def _contain(request: dict[str, Any], cgroup: list[int]) -> tuple[dict[str, Any], int | None]:
    """Run ``request`` in fresh namespaces: the reply the lab turns into a ``RunResult``, and
    the init's pid when the run was killed and its namespace is still going away.

    ``cgroup`` is empty or the run's memory and pids ``cgroup.procs`` and its out-of-memory
    eventfd: the init joins both cgroups before it forks anything, and this supervisor (outside
    them, so it survives to answer) stops the whole run when the eventfd fires.

    A run is answered once every process of it is gone and its output read, except a run
    killed at the wall-clock limit (or out of memory) whose namespace is not gone
    :data:`_TEARDOWN_S` after the kill: the kernel's teardown of many processes that each map
    torch (a fork bomb on a busy machine) can take seconds, and the learner's limit is the
    wall clock, not the teardown. Such a run is answered then, with the output its pipes hold;
    the reply says ``"reaped": false``, and the lab keeps the run's slot until this process,
    having waited for the init, closes the connection.
    """
    limits = request["limits"]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    rep_r, rep_w = os.pipe()
    st_r, st_w = os.pipe()
    procs, oom = cgroup[:2], cgroup[2:]
    _unshare(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # the run's mounts stay in its namespace
    start = time.monotonic()
    pid = os.fork()  # PID 1 of the new PID namespace
    if pid == 0:
        try:
            _close_all_but({0, 1, 2, out_w, err_w, rep_w, st_w, *procs})
            _init(request, out_w, err_w, rep_w, st_w, procs)
        except BaseException:
            traceback.print_exc()  # to the fork server's output: the lab shows it on failure
        finally:
            os._exit(70)
    for w in (out_w, err_w, rep_w, st_w, *procs):
        os.close(w)
    out = _Capture(int(limits["output_bytes"]))
    err = _Capture(int(limits["output_bytes"]))
    rep = _Capture(_REPORT_LIMIT)
    st = _Capture(64)
    captures = {out_r: out, err_r: err, rep_r: rep, st_r: st}
    sel = selectors.DefaultSelector()
    for r in captures:
        os.set_blocking(r, False)
        sel.register(r, selectors.EVENT_READ)
    ending = _watch(pid, sel, captures, start + float(request["wall_s"]), oom)
    duration = time.monotonic() - start
    reaped = ending == "exited" or _gone_within(pid, _TEARDOWN_S)
    if reaped:
        os.waitpid(pid, 0)  # returns once every process of the namespace is gone
    _drain(sel, captures, _DRAIN_S if reaped else _KILLED_DRAIN_S)
    status, notes, figures = _verdict(request, ending, st, rep)
    stderr = err.text("stderr")
    if notes:
        sep = "" if not stderr or stderr.endswith("\n") else "\n"
        stderr += sep + "".join(f"[normlab sandbox: {note}]\n" for note in notes)
    reply = {
        "status": status,
        "stdout": out.text("stdout"),
        "stderr": stderr,
        "duration_s": duration,
        "figures": figures,
        "reaped": reaped,
    }
    return reply, None if reaped else pid


def _gone_within(pid: int, seconds: float) -> bool:
    """Whether the killed init ``pid`` (so its whole namespace) is gone within ``seconds``."""
    pidfd = os.pidfd_open(pid)
    try:
        readable, _, _ = select.select([pidfd], [], [], seconds)
    finally:
        os.close(pidfd)
    return bool(readable)


def _drain(sel: selectors.BaseSelector, captures: dict[int, _Capture], seconds: float) -> None:
    """Read the run's pipes until each has ended or ``seconds`` have passed."""
    end = time.monotonic() + seconds
    while sel.get_map() and (left := end - time.monotonic()) > 0:
        for key, _ in sel.select(left):
            _read_once(sel, key.fd, captures[key.fd])


def _watch(
    pid: int,
    sel: selectors.BaseSelector,
    captures: dict[int, _Capture],
    deadline: float,
    oom: list[int],
) -> str:
    """Relay output until the init ``pid`` exits: ``"exited"``, ``"timeout"`` or ``"oom"``.

    At the wall-clock ``deadline``, or when the eventfd in ``oom`` says the run's cgroup ran out
    of memory, the init is killed (the kernel then kills its whole namespace) and this returns
    at once; the caller waits for the init.
    """
    pidfd = os.pidfd_open(pid)
    sel.register(pidfd, selectors.EVENT_READ)
    for fd in oom:
        sel.register(fd, selectors.EVENT_READ)
    ending = ""
    while not ending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            ending = "timeout"
            break
        for key, _ in sel.select(remaining):
            if key.fd == pidfd:
                ending = "exited"
            elif key.fd in oom:
                ending = "oom"
            else:
                _read_once(sel, key.fd, captures[key.fd])  # once per wake-up: a flood of
                # output cannot keep this loop from looking at the clock
    if ending == "exited" and oom and _signalled(oom[0]):
        ending = "oom"  # the kernel killed one of its processes as the run ended
    if ending != "exited":
        os.kill(pid, signal.SIGKILL)  # the init: the kernel then kills the whole namespace
    for fd in [pidfd, *oom]:
        sel.unregister(fd)
        os.close(fd)
    return ending


def _signalled(eventfd: int) -> bool:
    """Whether the (non-blocking) ``eventfd`` has been signalled."""
    try:
        return bool(os.eventfd_read(eventfd))
    except BlockingIOError:
        return False


def _read_once(sel: selectors.BaseSelector, fd: int, capture: _Capture) -> None:
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return
    if chunk:
        capture.feed(chunk)
    else:
        sel.unregister(fd)
        os.close(fd)


_SIGNAL_NOTES: dict[int, str] = {
    signal.SIGSEGV: "the interpreter crashed: segmentation fault (SIGSEGV)",
    signal.SIGBUS: "the interpreter crashed: bus error (SIGBUS)",
    signal.SIGABRT: "the interpreter aborted (SIGABRT)",
    signal.SIGKILL: "killed by SIGKILL (a signal, the CPU-time hard limit, or out of memory)",
}


def _verdict(
    request: dict[str, Any], ending: str, st: _Capture, rep: _Capture
) -> tuple[str, list[str], list[str]]:
    """``(status, notes for stderr, figures)`` from how the run ended (see :func:`_watch`)."""
    limits = request["limits"]
    if ending == "timeout":
        return "timeout", [f"stopped at the wall-clock limit of {request['wall_s']:g} s"], []
    if ending == "oom":
        mib = int(limits["memory_bytes"]) >> 20
        note = (
            f"out of memory: the run's processes together (with its files in /tmp) reached "
            f"its limit of {mib:,} MiB, so the whole run was stopped"
        )
        return "killed", [note], []
    try:
        wait_status = int(st.data.decode())
    except ValueError:
        return "killed", ["the run's init process ended without a status"], []
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        if sig == signal.SIGXCPU:
            note = f"stopped at the CPU-time limit of {limits['cpu_s']:g} s"
        else:
            name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
            note = _SIGNAL_NOTES.get(sig, f"killed by {name}")
        return "killed", [note], []
    code = os.WEXITSTATUS(wait_status)
    try:
        return _read_report(rep)
    except Exception as exc:  # the code could write anything on descriptor 3
        why = "it was too large" if rep.total > rep.limit else f"it was unreadable: {exc!r:.80}"
        if not rep.total:
            why = "it was missing"
        status = "ok" if code == 0 else "error"
        note = f"the process exited with status {code} before reporting ({why}); figures are lost"
        return status, [note], []


def _read_report(rep: _Capture) -> tuple[str, list[str], list[str]]:
    """``(status, notes, figures)`` from the learner's report, held to the limits here.

    The report channel is the code's descriptor 3, so the code could write anything there
    (a forged report with 63 figures of 1 MiB, JSON nested too deep to parse): any error
    raises, and only :data:`FIGURE_LIMIT` ASCII figures of at most :data:`FIGURE_BYTES` each
    and :data:`_NOTE_LIMIT` short notes that encode as UTF-8 (JSON allows lone surrogates) pass.
    """
    if rep.total > rep.limit:
        raise ValueError("too large")
    report = json.loads(rep.data)
    if not isinstance(report, dict):
        raise ValueError(f"a report is a JSON object, not {type(report).__name__}")
    notes = [
        n[:_NOTE_CHARS].encode("utf-8", "replace").decode()
        for n in _list(report.get("notes"))[:_NOTE_LIMIT]
        if isinstance(n, str)
    ]
    figures: list[str] = []
    for figure in _list(report.get("figures")):
        if not isinstance(figure, str) or not figure.isascii():
            continue
        if len(figures) == FIGURE_LIMIT:
            note = f"only the first {FIGURE_LIMIT} figures are shown"
            if note not in notes:
                notes.append(note)
            break
        if len(figure) > FIGURE_BYTES:
            notes.append(f"a figure of {len(figure):,} bytes was left out (the limit is "
                         f"{FIGURE_BYTES:,})")  # fmt: skip
            continue
        figures.append(figure)
    reported = report.get("status")
    status = reported if reported in ("ok", "error", "killed") else "error"
    return status, notes, figures


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _close_all_but(keep: set[int]) -> None:
    low = 0
    for fd in [*sorted(keep), max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], max(keep) + 1)]:
        if fd > low:  # os.closerange(n, n) would close every descriptor (close_range(n, -1))
            os.closerange(low, fd)
        low = fd + 1


# --- the init (PID 1 of the run) -------------------------------------------------------------


def _init(
    request: dict[str, Any], out_w: int, err_w: int, rep_w: int, st_w: int, procs: list[int]
) -> None:
    """Join the run's cgroups, mount its /proc and /tmp, fork the learner, report its status.

    ``procs`` are the ``cgroup.procs`` descriptors of the run's cgroups (none without them):
    joining first puts every process of the run, and the pages of its tmpfs, in them.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    for fd in procs:
        os.write(fd, b"0")  # "0": this process (and so every one it forks from here on)
        os.close(fd)
    # PID 1 ignores the signals its namespace sends it unless it has a handler: drop Python's
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    uid = int(request["uid"])
    disk = int(request["limits"]["disk_bytes"])
    flags = _MS_NOSUID | _MS_NODEV
    _mount("proc", "/proc", "proc", flags | _MS_NOEXEC)
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")  # if the machine runs short of memory, runs are killed before the lab
    # Every process of the run inherits that score. Lowering it takes no privilege (down to
    # the floor of 0 that CAP_SYS_RESOURCE would raise), only write access to the file, which
    # an exec'd child has: a read-only /proc refuses every write to it (EROFS), the score's too.
    _mount(None, "/proc", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags | _MS_NOEXEC)
    private = f"size={disk},mode=0700,uid={uid},gid={uid}"
    _mount("tmpfs", SCRATCH, "tmpfs", flags, private)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", flags, private)
    learner = os.fork()
    if learner == 0:
        try:
            os.close(st_w)
            _learn(request, out_w, err_w, rep_w)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(70)
    for fd in (out_w, err_w, rep_w):
        os.close(fd)
    wait_status: int | None = None
    while wait_status is None:
        try:
            pid, status = os.waitpid(-1, 0)  # orphans of the run land here too
        except ChildProcessError:
            break
        if pid == learner:
            wait_status = status
    if wait_status is not None:
        os.write(st_w, str(wait_status).encode())
    os._exit(0)


# --- the learner -----------------------------------------------------------------------------


def _learn(request: dict[str, Any], out_w: int, err_w: int, rep_w: int) -> None:
    """Drop to the run's uid and limits, execute the code, report on descriptor 3, exit."""
    os.setsid()
    null = os.open("/dev/null", os.O_RDONLY)
    for fd, target in ((null, 0), (out_w, 1), (err_w, 2), (rep_w, 3)):
        os.dup2(fd, target)
    _close_all_but({0, 1, 2, 3})  # nothing of the fork server's (its sockets) stays reachable
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_IGN)
    limits = request["limits"]
    cpu = math.ceil(float(limits["cpu_s"]))
    for which, soft, hard in (
        (resource.RLIMIT_AS, int(limits["memory_bytes"]), int(limits["memory_bytes"])),
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at soft, SIGKILL at hard
        (resource.RLIMIT_NOFILE, int(limits["open_files"]), int(limits["open_files"])),
        (resource.RLIMIT_NPROC, int(limits["processes"]), int(limits["processes"])),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(which, (soft, hard))
    uid = int(request["uid"])  # RLIMIT_NPROC binds only a non-root uid; root would ignore it
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # drops every capability
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if _FILTER is not None:
        _install_filter(_FILTER)  # no new user namespace, io_uring, keyring, bpf, mount ...
    os.chdir(SCRATCH)
    sys.path.insert(0, SCRATCH)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", 1, "utf-8", "backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", 1, "utf-8", "backslashreplace", closefd=False)  # noqa: SIM115
    _reseed()
    figures: list[str] = []
    notes: list[str] = []
    _patch_show(figures, notes)
    learner = os.getpid()
    status = _execute(request["code"], request["files"], limits, notes)
    if os.getpid() == learner:  # a process the code forked ends here too, but only exits
        _render(figures, notes)
        report = json.dumps({"status": status, "figures": figures, "notes": notes}).encode()
        with open(3, "wb", closefd=False) as channel:
            channel.write(report)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if status == "ok" else 1)


def _reseed() -> None:
    """Forked children share the server's random state; give each run fresh entropy."""
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.seed()  # a fresh interpreter seeds torch from the OS too


def _execute(code: str, files: dict[str, str], limits: dict[str, Any], notes: list[str]) -> str:
    """Write ``files``, run ``code`` as ``__main__``; ``"ok"``, ``"error"`` or ``"killed"``."""
    try:
        for name, text in files.items():
            os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
            with open(name, "w", encoding="utf-8") as f:
                f.write(text)
    except OSError as exc:
        print(f"normlab sandbox: could not write the run's files: {exc}", file=sys.stderr)
        return "error"
    linecache.cache[SOURCE_NAME] = (len(code), None, code.splitlines(True), SOURCE_NAME)
    # A module of its own as __main__ (not the fork server's), so that pickle and
    # multiprocessing find the code's functions, as they would in a script.
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    sys.argv = [SOURCE_NAME]
    try:
        exec(compile(code, SOURCE_NAME, "exec"), main.__dict__)
        _join_threads()
    except SystemExit as exc:
        if exc.code is None or exc.code == 0:
            return "ok"
        if isinstance(exc.code, int):
            notes.append(f"exited with status {exc.code}")
        else:
            print(exc.code, file=sys.stderr)
        return "error"
    except MemoryError as exc:
        _print_traceback(exc)
        notes.append(f"out of memory: the limit is {int(limits['memory_bytes']) >> 20:,} MiB")
        return "killed"
    except BaseException as exc:
        _print_traceback(exc)
        return "error"
    return "ok"


def _join_threads() -> None:
    """Wait for the code's non-daemon threads, as the interpreter does before it exits."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()


def _print_traceback(exc: BaseException) -> None:
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is _execute.__code__:
        tb = tb.tb_next  # the learner's frames only, as if the code were the script
    traceback.print_exception(type(exc), exc, tb)


def _patch_show(figures: list[str], notes: list[str]) -> None:
    """``plt.show()`` hands the open figures over (as a notebook does) instead of warning."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return

    def show(*args: Any, **kwargs: Any) -> None:
        _render(figures, notes)

    plt.show = show  # type: ignore[attr-defined]


def _render(figures: list[str], notes: list[str]) -> None:
    """Append every open matplotlib figure to ``figures`` as a base64 PNG, then close them."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for number in plt.get_fignums():
        if len(figures) >= FIGURE_LIMIT:
            note = f"only the first {FIGURE_LIMIT} figures are shown"
            if note not in notes:
                notes.append(note)
            break
        buffer = io.BytesIO()
        try:
            plt.figure(number).savefig(buffer, format="png")
        except Exception as exc:
            print(f"normlab sandbox: could not draw figure {number}: {exc!r}", file=sys.stderr)
            continue
        figures.append(base64.b64encode(buffer.getvalue()).decode("ascii"))
    plt.close("all")


if __name__ == "__main__":
    main(sys.argv)
