"""Hostile code through POST /api/run: each case is contained, and the lab answers right after.

A real lab server runs in a subprocess (uvicorn on a free loopback port, ``create_app`` with a
sandbox whose wall clock is 3 s to keep the timeouts short, and 64 processes so the fork bomb
peaks fast; the API's default limits are checked in ``test_sandbox.py``). Its
``XDG_DATA_HOME`` is a temporary folder holding the lab's progress database with a secret saved in
it. After every case the test checks that the server still lists its experiments and runs a
normal snippet, and that no process of the run's uids is left on the machine.
"""

from __future__ import annotations

import os
import platform
import secrets
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

import normlab.lab.app
from normlab.lab.progress import ProgressStore
from normlab.lab.sandbox import Limits

pytestmark = pytest.mark.serial  # attacks stopped at wall-clock and CPU limits: cores to itself

LIMITS = Limits(wall_s=3.0, processes=64)

SERVER = """
import socket, sys, uvicorn
from normlab.lab.sandbox import Limits, Sandbox

sandbox = Sandbox(Limits(wall_s={wall_s}, processes={processes}))
sandbox.start()  # the fork server's imports overlap the server's own
from normlab.lab.app import create_app

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(64)
print(sock.getsockname()[1], sandbox.uids.start, sandbox.uids.stop, flush=True)
config = uvicorn.Config(create_app(sandbox=sandbox), log_level="warning")
uvicorn.Server(config).run(sockets=[sock])
"""

# Learner-side helper: try something, say whether it was refused (and why) or done.
PRELUDE = """\
import os, signal, socket, sys
def attempt(label, action):
    try:
        value = action()
    except BaseException as exc:
        print(label, "refused", type(exc).__name__)
    else:
        print(label, "DONE", repr(value)[:200])
"""


@dataclass
class Lab:
    client: httpx2.Client
    server: subprocess.Popen[str]
    port: int
    uids: range
    data: Path
    database: Path
    secret: str

    def run(self, code: str, helpers: str = "") -> dict[str, Any]:
        """Run ``code`` (dedented) after the prelude and ``helpers``; the API's answer."""
        r = self.client.post("/api/run", json={"code": PRELUDE + helpers + textwrap.dedent(code)})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


def left_after_teardown(uids: range, within_s: float = 30.0) -> list[str]:
    """:func:`run_processes` once they are gone, or what is left after ``within_s``.

    A run is answered once all its processes are gone, except one killed at its limit whose
    namespace takes longer to tear down than the sandbox waits before answering (a fork bomb on
    a busy machine: the answer keeps to the wall clock, issue 32): its processes, all killed,
    go a moment later, and its slot is not used again before.
    """
    deadline = time.monotonic() + within_s
    while (left := run_processes(uids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def run_processes(uids: range) -> list[str]:
    """``pid uid`` of every process on this machine whose real uid is one of ``uids``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:  # it ended meanwhile
            continue
        uid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid"))
        if uid in uids:
            found.append(f"{entry.name} {uid}")
    return found


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    data = tmp_path_factory.mktemp("xdg-data")
    database = data / "normlab" / "progress.sqlite3"
    database.parent.mkdir()
    secret = f"secret-{secrets.token_hex(8)}"
    with ProgressStore(database) as store:  # the lab's own database, a secret saved in it
        store.save_listing("secret", secret)
    script = SERVER.format(wall_s=LIMITS.wall_s, processes=LIMITS.processes)
    log = (tmp_path_factory.mktemp("server") / "stderr.txt").open("w+")
    server = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "XDG_DATA_HOME": str(data)},
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline().split()
        if len(first) != 3:
            log.seek(0)
            pytest.fail(f"the lab server did not start: {log.read()}")
        port, start, stop = (int(x) for x in first)
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            lab = Lab(client, server, port, range(start, stop), data, database, secret)
            assert lab.run("print('warm')")["stdout"] == "warm\n"  # the fork server is up
            yield lab
    finally:
        server.terminate()
        server.wait(timeout=60)
        if server.stdout is not None:
            server.stdout.close()
        log.close()


CASES: dict[str, Callable[[Lab], None]] = {}


def case(name: str) -> Callable[[Callable[[Lab], None]], Callable[[Lab], None]]:
    def register(check: Callable[[Lab], None]) -> Callable[[Lab], None]:
        CASES[name] = check
        return check

    return register


def attempts(stdout: str) -> dict[str, str]:
    """``label -> "refused ErrorName"`` or ``"DONE value"`` from the prelude's lines."""
    out = {}
    for line in stdout.splitlines():
        label, _, rest = line.partition(" ")
        if rest.startswith(("refused", "DONE")):
            out[label] = rest
    return out


def all_refused(body: dict[str, Any], count: int) -> dict[str, str]:
    tried = attempts(body["stdout"])
    assert len(tried) == count, body
    assert all(v.startswith("refused") for v in tried.values()), tried
    return tried


@case("read-progress-database")
def _(lab: Lab) -> None:
    body = lab.run(f"""
        attempt("database", lambda: open({str(lab.database)!r}, "rb").read())
        attempt("data-folder", lambda: os.listdir({str(lab.data)!r}))
        attempt("home-data", lambda: os.listdir({str(Path.home() / ".local")!r}))
    """)
    assert body["status"] == "ok", body
    all_refused(body, 3)
    assert lab.secret not in body["stdout"] + body["stderr"]


@case("read-lab-source")
def _(lab: Lab) -> None:
    app = Path(normlab.lab.app.__file__).resolve()
    repo = app.parents[3]
    body = lab.run(f"""
        import normlab, torch  # the learner's imports work
        attempt("app-py", lambda: open({str(app)!r}).read())
        attempt("tests", lambda: os.listdir({str(repo / "tests")!r}))
        attempt("git", lambda: open({str(repo / ".git" / "HEAD")!r}).read())
        attempt("pyproject", lambda: open({str(repo / "pyproject.toml")!r}).read())
        attempt("import-app", lambda: __import__("normlab.lab.app"))
        print("lab-folder", os.listdir({str(app.parent)!r}))
        print("repository", sorted(os.listdir({str(repo)!r})))
    """)
    assert body["status"] == "ok", body
    tried = all_refused(body, 5)
    assert tried["import-app"] == "refused ModuleNotFoundError"
    assert "lab-folder []" in body["stdout"]  # an empty tmpfs hides the server's code
    # of the repository, at most the virtual environment and the package's folder show
    shown = body["stdout"].split("repository ", 1)[1].splitlines()[0]
    assert shown in ("['.venv', 'src']", "['src']"), shown


@case("read-etc-shadow")
def _(lab: Lab) -> None:
    body = lab.run("""
        attempt("shadow", lambda: open("/etc/shadow").read())
        attempt("gshadow", lambda: open("/etc/gshadow").read())
        attempt("sys", lambda: os.listdir("/sys"))
        attempt("init-environ", lambda: open("/proc/1/environ").read())
    """)
    assert body["status"] == "ok", body
    all_refused(body, 4)


@case("write-outside-temp-folder")
def _(lab: Lab) -> None:
    package = Path(normlab.__file__).resolve().parent
    name = f"hostile-{secrets.token_hex(6)}.txt"
    mode = (package / "nn.py").stat().st_mode
    targets = {
        "package": package / name,
        "lab-folder": package / "lab" / name,
        "stdlib": Path(os.__file__).parent / name,
        "site-packages": Path(httpx2.__file__).parents[1] / name,
        "venv": Path(sys.prefix) / name,
        "data-folder": lab.data / name,
        "etc": Path("/etc") / name,
        "usr": Path("/usr") / name,
        "root": Path("/") / name,
    }
    code = "".join(
        f'attempt("{label}", lambda: open({str(path)!r}, "w").write("x"))\n'
        for label, path in targets.items()
    )
    code += f'attempt("chmod", lambda: os.chmod({str(package / "nn.py")!r}, 0o777))\n'
    code += "import tempfile\nmine = tempfile.gettempdir()\n"
    code += f'attempt("own-tmp", lambda: open(mine + "/{name}", "w").write("x"))\n'
    body = lab.run(code)
    assert body["status"] == "ok", body
    tried = attempts(body["stdout"])
    assert tried.pop("own-tmp") == "DONE 1"  # its private /tmp is writable ...
    assert len(tried) == len(targets) + 1 and all(v.startswith("refused") for v in tried.values())
    for path in [*targets.values(), Path("/tmp") / name]:  # ... and is not the machine's
        assert not path.exists(), path
    assert (package / "nn.py").stat().st_mode == mode


@case("connect-to-the-lab-port")
def _(lab: Lab) -> None:
    body = lab.run(f"""
        import urllib.request
        attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {lab.port}), timeout=2))
        attempt("http", lambda: urllib.request.urlopen(
            "http://127.0.0.1:{lab.port}/api/experiments", timeout=2).read())
        attempt("ipv6", lambda: socket.create_connection(("::1", {lab.port}), timeout=2))
        attempt("outside", lambda: socket.create_connection(("1.1.1.1", 80), timeout=2))
    """)
    assert body["status"] == "ok", body
    all_refused(body, 4)


@case("fork-bomb")
def _(lab: Lab) -> None:
    body = lab.run("""
        import time
        forked = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(60)  # each child stays, holding its process slot
                    os._exit(0)
                forked += 1
        except OSError as exc:
            print("stopped after", forked, type(exc).__name__)
    """)
    line = next(x for x in body["stdout"].splitlines() if x.startswith("stopped after"))
    forked = int(line.split()[2])
    assert 0 < forked < LIMITS.processes and line.endswith("BlockingIOError"), body
    assert body["status"] in ("ok", "timeout"), body


@case("fork-bomb-classic")
def _(lab: Lab) -> None:
    body = lab.run("""
        while True:
            os.fork()
    """)
    assert body["status"] in ("error", "timeout"), body
    assert "BlockingIOError" in body["stderr"]  # the process limit stopped the forks


@case("ten-thousand-threads")
def _(lab: Lab) -> None:
    body = lab.run("""
        import threading, time
        started = []
        try:
            for _ in range(10_000):
                t = threading.Thread(target=time.sleep, args=(60,), daemon=True)
                t.start()
                started.append(t)
        except RuntimeError as exc:
            print("stopped after", len(started), exc)
    """)
    assert body["status"] == "ok", body
    started = int(body["stdout"].split()[2])
    assert 0 < started < LIMITS.processes, body


@case("allocate-64-gb")
def _(lab: Lab) -> None:
    body = lab.run("""
        import torch
        attempt("torch", lambda: torch.empty(64 << 30, dtype=torch.uint8).fill_(1))
        block = bytearray(64 << 30)
    """)
    assert attempts(body["stdout"]) == {"torch": "refused RuntimeError"}, body
    assert body["status"] == "killed" and "MemoryError" in body["stderr"], body
    assert "out of memory: the limit is 4,096 MiB" in body["stderr"]


@case("infinite-loop")
def _(lab: Lab) -> None:
    body = lab.run("""
        while True:
            pass
    """)
    assert body["status"] == "timeout", body
    assert LIMITS.wall_s <= body["duration_s"] < LIMITS.wall_s + 2


@case("print-1-gb")
def _(lab: Lab) -> None:
    body = lab.run("""
        chunk = "x" * (1 << 20) + "\\n"
        for _ in range(1024):
            sys.stdout.write(chunk)
    """)
    assert body["status"] in ("ok", "timeout"), body["stderr"]
    stdout = body["stdout"]
    assert len(stdout.encode()) < LIMITS.output_bytes + 200
    assert stdout.startswith("x" * 1000) and "stdout truncated" in stdout
    if body["status"] == "ok":
        assert f"of {1024 * ((1 << 20) + 1):,} bytes" in stdout  # every byte was read


@case("sleep-forever")
def _(lab: Lab) -> None:
    body = lab.run("""
        import time
        time.sleep(10 ** 6)
    """)
    assert body["status"] == "timeout", body
    assert LIMITS.wall_s <= body["duration_s"] < LIMITS.wall_s + 2


@case("signal-the-parent")
def _(lab: Lab) -> None:
    body = lab.run(f"""
        print("parent", os.getppid())
        attempt("kill-parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
        attempt("term-parent", lambda: os.kill(os.getppid(), signal.SIGTERM))
        attempt("kill-lab", lambda: os.kill({lab.server.pid}, signal.SIGKILL))
        attempt("kill-everyone", lambda: os.kill(-1, signal.SIGKILL))
        print("still here")
    """)
    assert body["status"] == "ok", body
    assert body["stdout"].startswith("parent 1\n")  # its parent is the run's own init
    tried = attempts(body["stdout"])
    assert tried["kill-parent"] == tried["term-parent"] == "refused PermissionError"
    assert tried["kill-lab"] == "refused ProcessLookupError"  # not even visible
    assert body["stdout"].endswith("still here\n")
    assert lab.server.poll() is None


@case("escape-with-setsid")
def _(lab: Lab) -> None:
    body = lab.run("""
        import time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:  # a daemon, in a session of its own, meant to outlive the run
                time.sleep(600)
            os._exit(0)
        print("left a daemon behind")
    """)
    assert body["status"] == "ok" and "left a daemon" in body["stdout"], body
    # the check every case ends with finds no process of the run left


@case("segfault-through-ctypes")
def _(lab: Lab) -> None:
    body = lab.run("""
        import ctypes
        print("about to crash", flush=True)
        ctypes.string_at(0)
    """)
    assert body["status"] == "killed" and body["stdout"] == "about to crash\n", body
    assert "segmentation fault (SIGSEGV)" in body["stderr"]


@case("inherited-descriptors")
def _(lab: Lab) -> None:
    body = lab.run("""
        open_fds = []
        for fd in range(256):
            try:
                os.fstat(fd)
            except OSError:
                continue
            open_fds.append(fd)
        print(open_fds, os.getuid() != 0)
    """)
    assert body["status"] == "ok", body
    assert body["stdout"] == "[0, 1, 2, 3] True\n"  # no socket of the fork server or the lab


# Learner-side helper: a raw system call (x86_64 numbers) that raises OSError as os.* calls do.
SYSCALL = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def syscall(number, *args):
    result = libc.syscall(number, *args)
    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result
"""


def x86_64_only() -> None:
    if platform.machine() != "x86_64":
        pytest.skip("the attack uses x86_64 system-call numbers")


@case("new-user-namespace-and-io-uring")
def _(lab: Lab) -> None:
    x86_64_only()
    code = """
        CLONE_NEWUSER = 0x10000000
        attempt("unshare-user", lambda: syscall(272, CLONE_NEWUSER))
        attempt("clone-user", lambda: syscall(56, CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0))
        attempt("io-uring-setup", lambda: syscall(425, 1, ctypes.create_string_buffer(120)))
        attempt("io-uring-enter", lambda: syscall(426, 0, 1, 0, 0, 0, 0))
        attempt("bpf", lambda: syscall(321, 5, ctypes.create_string_buffer(128), 128))
        attempt("perf-event-open", lambda: syscall(298, ctypes.create_string_buffer(128),
                                                   0, -1, -1, 0))
        attempt("ptrace-traceme", lambda: syscall(101, 0, 0, 0, 0))
        attempt("mount", lambda: syscall(165, b"none", b"/tmp", b"tmpfs", 0, 0))
        # ... and what runs need still works: threads, fork, exec, torch's kernels
        import subprocess, threading, torch
        x = torch.randn(128, 128)
        t = threading.Thread(target=lambda: torch.mm(x, x))
        t.start(); t.join()
        child = os.fork()
        if child == 0:
            os._exit(7)
        exe = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True)
        print("normal", os.WEXITSTATUS(os.waitpid(child, 0)[1]), exe.stdout.decode().strip(),
              round(float((x @ x.T).trace() / (x * x).sum()), 4))
    """
    body = lab.run(code, SYSCALL)
    assert body["status"] == "ok", body
    tried = all_refused(body, 8)
    assert set(tried.values()) == {"refused PermissionError"}, tried  # EPERM, from the filter
    assert "normal 7 42 1.0\n" in body["stdout"], body


@case("keyring-carried-over")
def _(lab: Lab) -> None:
    x86_64_only()
    secret = f"key-{secrets.token_hex(8)}"
    add = lab.run(
        f"""
        payload = {secret!r}.encode()
        for label, keyring in (("add-user", -4), ("add-session", -3), ("add-user-session", -5)):
            attempt(label, lambda: syscall(248, b"user", b"normlab-carried", payload,
                                           len(payload), keyring))
    """,
        SYSCALL,
    )
    assert add["status"] == "ok", add
    all_refused(add, 3)
    for _ in range(8):  # a slot per run at most: every slot, the first run's among them
        find = lab.run(
            """
            attempt("search", lambda: syscall(250, 10, -4, b"user", b"normlab-carried", 0))
            attempt("request", lambda: syscall(249, b"user", b"normlab-carried", 0, 0))
            attempt("session", lambda: syscall(250, 0, -3, 0))  # KEYCTL_GET_KEYRING_ID
        """,
            SYSCALL,
        )
        assert find["status"] == "ok", find
        all_refused(find, 3)
        assert secret not in find["stdout"] + find["stderr"]


@case("lower-oom-score-adj")
def _(lab: Lab) -> None:
    adj = "os.open('/proc/self/oom_score_adj', os.O_WRONLY)"
    lower = f"attempt(LABEL, lambda: os.write({adj}, b'0'))"
    score = "print('score', open('/proc/self/oom_score_adj').read().strip())"
    child = PRELUDE + lower.replace("LABEL", "'exec'") + "\n" + score + "\n"
    body = lab.run(f"""
        import subprocess
        {lower.replace("LABEL", "'self'")}
        child = subprocess.run([sys.executable, "-c", {child!r}], capture_output=True, text=True)
        print(child.stdout, child.stderr)
        {score}
    """)
    assert body["status"] == "ok", body
    tried = attempts(body["stdout"])
    assert tried.keys() == {"self", "exec"}, body
    assert all(v.startswith("refused") for v in tried.values()), body
    assert body["stdout"].count("score 1000") == 2, body  # the exec'd child's and the learner's


@case("forged-report-nested-json")
def _(lab: Lab) -> None:
    body = lab.run("""
        depth = 100_000
        os.write(3, b'{"figures": ' + b"[" * depth + b"]" * depth + b"}")
        print("forged", flush=True)
        os._exit(0)  # before the learner writes its own report
    """)
    assert body["status"] == "ok" and body["stdout"] == "forged\n", body
    assert "before reporting (it was unreadable: RecursionError" in body["stderr"], body
    assert body["figures"] == []


FORGE = """
    import json
    report = {{"status": "ok", "figures": {figures}, "notes": ["forged note"] * 10_000}}
    with open(3, "wb", closefd=False) as channel:
        channel.write(json.dumps(report).encode())
    os._exit(0)  # before the learner writes its own report
"""


@case("forged-report-63-figures")
def _(lab: Lab) -> None:
    body = lab.run(FORGE.format(figures='["A" * (1 << 20)] * 63'))
    assert body["status"] == "ok", body["stderr"][:2000]
    assert len(body["figures"]) == 20 and {len(f) for f in body["figures"]} == {1 << 20}
    assert "only the first 20 figures are shown" in body["stderr"]
    assert body["stderr"].count("forged note") <= 20  # notes go to stderr: few of them
    body = lab.run(FORGE.format(figures='["A" * (9 << 20), "B" * 100]'))
    assert body["status"] == "ok" and body["figures"] == ["B" * 100], body["stderr"][:2000]
    assert f"a figure of {9 << 20:,} bytes was left out" in body["stderr"]


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_code_is_contained(lab: Lab, name: str) -> None:
    CASES[name](lab)
    assert left_after_teardown(lab.uids) == []  # the whole run is gone
    r = lab.client.get("/api/experiments")
    assert r.status_code == 200 and len(r.json()) > 0
    ok = lab.run("print(6 * 7)")
    assert (ok["status"], ok["stdout"]) == ("ok", "42\n")


def test_the_lab_keeps_serving_during_a_run(lab: Lab) -> None:
    """A run that sleeps holds no lock: listing, a second run, all answer meanwhile."""
    done: dict[str, float] = {}

    def slow() -> None:
        lab.run("import time\ntime.sleep(2)\n")
        done["slow"] = time.monotonic()

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.5)  # the slow run is under way
    assert lab.client.get("/api/experiments").status_code == 200
    assert lab.run("print('meanwhile')")["stdout"] == "meanwhile\n"
    done["others"] = time.monotonic()
    thread.join()
    assert done["others"] < done["slow"]
