"""The playground's runner: statuses, output, figures, files, limits, concurrency, POST /api/run.

One warm :class:`Sandbox` serves the module (its fork server imports torch once). Tests that
need other limits swap ``sandbox.limits`` (read afresh by every run) for their duration.
The hostile-code suite is ``test_hostile.py``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import random
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import matplotlib.image
import pytest
from fastapi.testclient import TestClient

import normlab.lab.sandbox.supervisor as sandbox_module
from normlab.lab.app import create_app
from normlab.lab.routes.playground import MAX_CODE_CHARS
from normlab.lab.sandbox import (
    DEFAULT_LIMITS,
    WARM_MODULES,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    SandboxWarning,
    cgroups,
)
from normlab.lab.state import state_of

pytestmark = pytest.mark.serial  # wall-clock and CPU limits: no other test may share the cores

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as s:
        assert s.run("pass").status == "ok"  # waits for the fork server's imports
        yield s


@pytest.fixture(scope="module")
def client(sandbox: Sandbox) -> TestClient:
    # no `with`: the lifespan would close the shared sandbox (tested on its own below)
    return TestClient(create_app(sandbox=sandbox), base_url=LAB)


def lines(result: RunResult) -> list[str]:
    return result.stdout.splitlines()


# -- limits and arguments ----------------------------------------------------------------------


def test_default_limits() -> None:
    assert Limits() == DEFAULT_LIMITS
    assert DEFAULT_LIMITS.wall_s == 10.0
    assert DEFAULT_LIMITS.memory_bytes == 4 << 30
    assert Sandbox().limits == DEFAULT_LIMITS  # nothing starts until start() or a run


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"wall_s": 0}, ValueError, "wall_s"),
        ({"cpu_s": float("inf")}, ValueError, "cpu_s"),
        ({"memory_bytes": -1}, ValueError, "memory_bytes"),
        ({"processes": 1.5}, TypeError, "processes"),
        ({"open_files": True}, TypeError, "open_files"),
        ({"output_bytes": "1M"}, TypeError, "output_bytes"),
    ],
)
def test_limits_refuse_bad_values(kwargs: dict[str, object], error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_sandbox_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="backend 'docker' not supported"):
        Sandbox(backend="docker")
    with pytest.raises(ValueError, match="max_runs"):
        Sandbox(max_runs=0)
    with pytest.raises(TypeError, match="limits"):
        Sandbox(limits={"wall_s": 1})  # type: ignore[arg-type]


def test_run_refuses_bad_arguments(sandbox: Sandbox) -> None:
    with pytest.raises(TypeError, match="code must be a str"):
        sandbox.run(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wall_s"):
        sandbox.run("pass", wall_s=-1)
    for name in ("/etc/passwd", "../up.py", "a/../../b.py", ""):
        with pytest.raises(ValueError, match="files"):
            sandbox.run("pass", files={name: "x"})
    with pytest.raises(TypeError, match="files"):
        sandbox.run("pass", files={"a.py": 1})  # type: ignore[dict-item]


# -- statuses and output -----------------------------------------------------------------------


def test_ok_returns_stdout_and_stderr(sandbox: Sandbox) -> None:
    r = sandbox.run("import sys\nprint('to out')\nprint('to err', file=sys.stderr)\n")
    assert (r.status, r.stdout, r.stderr, r.figures) == ("ok", "to out\n", "to err\n", [])
    assert 0 < r.duration_s < 5
    assert set(r.to_dict()) == {"status", "stdout", "stderr", "duration_s", "figures"}
    json.dumps(r.to_dict())


def test_runs_find_the_warm_modules_imported(sandbox: Sandbox) -> None:
    # what the fork server imported once is there in every run's fork: nothing to import
    # again, torch._dynamo included (a torch optimizer's first use imports it, 2-3 s)
    code = f"import sys\nprint([m for m in {list(WARM_MODULES)!r} if m not in sys.modules])\n"
    r = sandbox.run(code)
    assert (r.status, r.stdout) == ("ok", "[]\n"), r.stderr
    assert "torch._dynamo" in WARM_MODULES


def test_error_returns_the_learners_traceback(sandbox: Sandbox) -> None:
    r = sandbox.run("print('before')\ndef f(x):\n    return x / 0\nf(1)\n")
    assert r.status == "error" and r.stdout == "before\n"
    assert r.stderr.startswith("Traceback (most recent call last):")
    assert 'File "<playground>", line 4, in <module>' in r.stderr
    assert 'File "<playground>", line 3, in f' in r.stderr
    assert "    return x / 0" in r.stderr  # the source line, as for a script
    assert r.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    for runner in ("child.py", "forkserver.py"):  # the unshare and the bwrap backend's name
        assert runner not in r.stderr  # the runner's own frames are left out


def test_syntax_error_and_exit_codes(sandbox: Sandbox) -> None:
    r = sandbox.run("print(1\n")
    assert r.status == "error" and "SyntaxError" in r.stderr and "<playground>" in r.stderr
    assert sandbox.run("import sys; sys.exit(0)").status == "ok"
    r = sandbox.run("import sys; sys.exit('bye')")
    assert (r.status, r.stderr) == ("error", "bye\n")
    r = sandbox.run("raise SystemExit(3)")
    assert r.status == "error" and "exited with status 3" in r.stderr


def test_timeout_keeps_what_was_printed(sandbox: Sandbox) -> None:
    r = sandbox.run("import time\nprint('started', flush=True)\ntime.sleep(60)\n", wall_s=1.0)
    assert r.status == "timeout" and r.stdout == "started\n"
    assert "wall-clock limit of 1 s" in r.stderr
    assert 1.0 <= r.duration_s < 3.0


def test_killed_by_a_signal_or_the_memory_limit(sandbox: Sandbox) -> None:
    r = sandbox.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert r.status == "killed" and "killed by SIGKILL" in r.stderr
    r = sandbox.run("x = bytearray(64 << 30)")
    assert r.status == "killed" and "MemoryError" in r.stderr
    assert "out of memory: the limit is 4,096 MiB" in r.stderr


def test_killed_at_the_cpu_limit(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "limits", Limits(cpu_s=1.0))
    r = sandbox.run("while True:\n    pass\n")
    assert r.status == "killed" and "CPU-time limit of 1 s" in r.stderr
    assert 0.9 < r.duration_s < 5.0  # the CPU limit, not the 10 s wall clock


def test_output_is_truncated_with_a_note(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "limits", Limits(output_bytes=1000))
    r = sandbox.run("import sys\nprint('x' * 5000)\nsys.stderr.write('e' * 3000)\n")
    assert r.status == "ok"
    # one long line: cut inside it, half the bound before the note and half after
    head, note, tail = r.stdout.split("\n", 2)
    assert (head, tail) == ("x" * 500, "x" * 499 + "\n")
    assert note == (
        "[normlab sandbox: stdout truncated: 4,001 bytes (0 lines) left out here, "
        "between the first 500 and the last 500 of 5,001 bytes]"
    )
    assert r.stderr.startswith("e" * 500 + "\n[normlab sandbox: stderr truncated")
    assert r.stderr.endswith("of 3,000 bytes]\n" + "e" * 500)


def test_a_long_output_keeps_its_head_and_its_tail(sandbox: Sandbox) -> None:
    bound = DEFAULT_LIMITS.output_bytes
    r = sandbox.run("for i in range(200000):\n    print(i)\n")
    assert r.status == "ok", r.stderr
    printed = "".join(f"{i}\n" for i in range(200000))
    assert len(printed) == 1_288_890 > bound
    notes = [line for line in lines(r) if line.startswith("[normlab sandbox:")]
    assert len(notes) == 1
    head, tail = r.stdout.split(notes[0] + "\n")
    # whole lines on both sides, the first and the last among them, within the bound
    assert head.startswith("0\n1\n2\n") and tail.endswith("\n199998\n199999\n")
    assert printed.startswith(head) and printed.endswith(tail)
    assert head.endswith("\n") and tail[: tail.index("\n")].isdigit()
    assert printed[len(head) - 1] == "\n" and printed[-len(tail) - 1] == "\n"
    assert bound // 2 - 7 <= len(head) <= bound // 2  # at most one line of a half lost
    assert bound // 2 - 7 <= len(tail) <= bound // 2
    left_out = printed[len(head) : -len(tail)]
    assert notes[0] == (
        f"[normlab sandbox: stdout truncated: {len(left_out):,} bytes "
        f"({left_out.count(chr(10)):,} lines) left out here, between the first "
        f"{len(head):,} and the last {len(tail):,} of 1,288,890 bytes]"
    )
    assert len(r.stdout.encode()) <= bound + len(notes[0]) + 1


# -- figures, files, imports -------------------------------------------------------------------


def test_figures_come_back_as_png(sandbox: Sandbox) -> None:
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 3, 2])\n"
        "plt.show()\n"  # hands the figure over; must neither block nor warn
        "fig, ax = plt.subplots(figsize=(3, 2), dpi=100)\n"
        "ax.bar([0, 1], [2, 1])\n"  # left open: returned too
    )
    r = sandbox.run(code)
    assert (r.status, r.stderr) == ("ok", "")
    assert len(r.figures) == 2
    shapes = []
    for encoded in r.figures:
        png = base64.b64decode(encoded, validate=True)
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        shapes.append(matplotlib.image.imread(io.BytesIO(png), format="png").shape)
    assert shapes == [(480, 640, 4), (200, 300, 4)]  # figsize * dpi, in order


def test_files_are_written_into_the_working_folder(sandbox: Sandbox) -> None:
    files = {"helper.py": "VALUE = 41\n", "data/note.txt": "hello\n"}
    code = (
        "import os, tempfile, helper\n"
        "here, note = os.getcwd(), open('data/note.txt').read().strip()\n"
        "print(here == tempfile.gettempdir(), helper.VALUE + 1, note)\n"
        "print(sorted(os.listdir(here)), oct(os.stat(here).st_mode), os.stat(here).st_uid)\n"
    )
    r = sandbox.run(code, files=files)
    assert r.status == "ok", r.stderr
    listing, mode, owner = lines(r)[1].rsplit(" ", 2)
    assert lines(r)[0] == "True 42 hello"  # the working folder is the run's temp folder
    assert (listing, mode, int(owner) in sandbox.uids) == ("['data', 'helper.py']", "0o40700", True)


def test_torch_numpy_and_normlab_import_and_the_lab_does_not(sandbox: Sandbox) -> None:
    code = (
        "import torch, numpy, normlab, normlab.nn\n"
        "print(torch.ones(2, 2).sum().item(), numpy.arange(3).sum(), normlab.__version__)\n"
        "import normlab.lab.app\n"
    )
    r = sandbox.run(code)
    assert r.status == "error" and lines(r) == ["4.0 3 " + __import__("normlab").__version__]
    assert "ModuleNotFoundError: No module named 'normlab.lab.app'" in r.stderr


def test_the_code_is_a_real_main_module(sandbox: Sandbox) -> None:
    code = (
        "import multiprocessing, pickle, sys, __main__\n"
        "def square(x):\n"
        "    return x * x\n"
        "print(__main__.square(3), pickle.loads(pickle.dumps(square))(4), sys.argv)\n"
        "with multiprocessing.get_context('fork').Pool(2) as pool:\n"
        "    print(pool.map(square, range(5)))\n"
    )
    r = sandbox.run(code)
    assert r.status == "ok", r.stderr
    assert lines(r) == ["9 16 ['<playground>']", "[0, 1, 4, 9, 16]"]


def test_each_run_is_a_fresh_unprivileged_process(sandbox: Sandbox) -> None:
    code = (
        "import json, os, random, torch\n"
        "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')]\n"
        "print(json.dumps({\n"
        "    'uid': os.getuid(), 'caps': int(caps[0], 16), 'ppid': os.getppid(),\n"
        "    'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),\n"
        "    'fds': sorted(int(f) for f in os.listdir('/proc/self/fd'))[:-1],\n"
        "    'random': [random.random(), torch.rand(1).item()],\n"
        "}))\n"
    )
    a, b = (sandbox.run(code) for _ in range(2))
    assert a.status == b.status == "ok", a.stderr + b.stderr
    first, second = json.loads(a.stdout), json.loads(b.stdout)
    assert first["uid"] in sandbox.uids and first["caps"] == 0  # not root, no capabilities
    assert first["pids"] == [1, 2] and first["ppid"] == 1  # its init and itself, nothing else
    assert first["fds"] == [0, 1, 2, 3]  # stdin, stdout, stderr, its report channel
    assert first["random"] != second["random"]  # random state is not the fork server's


def test_concurrent_runs_overlap_and_are_isolated(sandbox: Sandbox) -> None:
    code = (
        "import os, tempfile, time\n"
        "open('mine-{i}.txt', 'w').write('x')\n"
        "time.sleep(1.0)\n"
        "print({i}, os.getuid(), sorted(os.listdir(tempfile.gettempdir())))\n"
    )
    results: dict[int, RunResult] = {}

    def one(i: int) -> None:
        results[i] = sandbox.run(code.format(i=i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    assert elapsed < 3.0  # four 1 s runs, overlapping
    uids = set()
    for i, r in results.items():
        assert r.status == "ok", r.stderr
        n, uid, listing = r.stdout.strip().split(" ", 2)
        assert int(n) == i and listing == f"['mine-{i}.txt']"  # no other run's files
        uids.add(uid)
    assert len(uids) == 4  # one uid per concurrent run
    assert all(int(u) in sandbox.uids for u in uids)


# -- the lab's memory for figures ---------------------------------------------------------------

FIGURE = (8 << 20) - (8 << 10)  # the largest figure a run may report, less room for the JSON
FORGED_MAXIMUM = f"""
import json, os
report = {{"status": "ok", "figures": [chr(65 + i) * {FIGURE} for i in range(8)], "notes": []}}
with open(3, "wb", closefd=False) as channel:  # the report channel: 64 MiB, its old maximum
    channel.write(json.dumps(report).encode())
os._exit(0)  # before the learner writes its own report
"""


def _kib(field: str) -> int:
    """A ``/proc/self/status`` line of this process (the lab's: it hosts the Sandbox), in KiB."""
    found = re.search(rf"^{field}:\s+(\d+) kB$", Path("/proc/self/status").read_text(), re.M)
    assert found is not None
    return int(found.group(1))


def test_eight_runs_reporting_their_maximum_stay_within_the_memory_bound(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 runs at once each report 64 MiB of figures: the lab's peak grows by less than the bound
    :attr:`Sandbox.memory_bound` states (the figures in sum, each run's answer line, what
    malloc keeps); before it, this test measured 413 to 478 MiB against 213."""
    monkeypatch.setattr(sandbox, "limits", Limits(output_bytes=64 << 10))  # a short text bound
    seen: dict[int, tuple[str, list[tuple[str, int]], str]] = {}

    def one(i: int) -> None:
        r = sandbox.run(FORGED_MAXIMUM)  # kept only as counts: a route answers and drops it
        kept = [(f[0], len(f)) for f in r.figures if f.count(f[0]) == len(f)]
        seen[i] = (r.status, kept, r.stderr)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    before = _kib("VmRSS")
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    growth = (_kib("VmHWM") - before) << 10
    assert growth < sandbox.memory_bound, f"{growth >> 20} MiB"
    total = 0
    for status, kept, stderr in seen.values():
        assert status == "ok", stderr
        letters = [letter for letter, _ in kept]
        assert letters == sorted(set(letters)) and {n for _, n in kept} <= {FIGURE}  # intact
        left = re.search(r"(\d+) of the run's figures \(([\d,]+) bytes\) were left out", stderr)
        if len(kept) < 8:  # the figures that did not fit are named, never silently dropped
            assert left is not None and int(left.group(1)) == 8 - len(kept), stderr
            assert int(left.group(2).replace(",", "")) == (8 - len(kept)) * FIGURE
            assert f"at most {sandbox.figure_bytes >> 20} MiB of figures" in stderr
        else:
            assert left is None, stderr
        total += len(kept)
    assert 1 <= total < 8 * 8  # some came back; not all 512 MiB
    budget = sandbox._figures  # every result is dropped: the whole budget is free again
    assert budget.take(budget.total)
    budget.give(budget.total)


def test_a_lone_run_keeps_the_figures_that_fit_and_says_which_did_not() -> None:
    with pytest.raises(ValueError, match="figure_bytes must be an int >= 0, got -1"):
        Sandbox(figure_bytes=-1)
    with Sandbox(figure_bytes=512 << 10, max_runs=2) as small:
        code = (
            "import matplotlib.pyplot as plt, numpy as np\n"
            "for seed in range(6):\n"
            "    plt.figure(figsize=(2, 2), dpi=100)\n"
            "    plt.imshow(np.random.default_rng(seed).random((200, 200)))\n"  # ~100 KiB each
            "plt.show()\n"
        )
        r = small.run(code)
        assert r.status == "ok", r.stderr
        assert 1 <= len(r.figures) < 6
        assert sum(len(f) for f in r.figures) <= 512 << 10
        for encoded in r.figures:
            assert base64.b64decode(encoded, validate=True).startswith(b"\x89PNG")
        n = 6 - len(r.figures)
        assert f"[normlab sandbox: {n} of the run's figures (" in r.stderr
        assert "at most 512 KiB of figures of all the runs it answers at once" in r.stderr


# -- life cycle --------------------------------------------------------------------------------


def test_app_owns_its_sandbox_and_closes_it() -> None:
    assert state_of(create_app()).sandbox.limits == DEFAULT_LIMITS  # the API's limits: 10 s
    own = Sandbox()
    with TestClient(create_app(sandbox=own), base_url=LAB):
        assert not own.alive  # nothing starts until the first run (or start())
        own.start()
        own.start()  # idempotent
        assert own.alive
    assert not own.alive  # the lifespan's exit closed it (and killed the fork server)
    own.close()  # idempotent
    assert not own.alive


def _orphaned_fork_servers() -> set[int]:
    """Sandbox processes whose launcher is gone (their parent is init): leaked ones."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except (OSError, ValueError):
            continue  # not a process, or it ended meanwhile
        if b"forkserver.py" in cmdline and "\nPPid:\t1\n" in status:
            found.add(int(entry.name))
    return found


def test_closing_just_after_starting_leaves_no_process() -> None:
    # bwrap's child sleeps until bwrap tells it to go on, and only then arms
    # --die-with-parent; killing bwrap alone in that window left the child asleep for good
    # (133 of 300 closes 0-4 ms after the start did, before close() killed the whole group).
    before = _orphaned_fork_servers()
    rng = random.Random(0)
    for _ in range(40):
        box = Sandbox()
        box.start()
        time.sleep(rng.uniform(0.0, 0.004))
        box.close()
        assert not box.alive
    leaked = _orphaned_fork_servers() - before
    for pid in leaked:  # don't leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not leaked


def test_without_root_a_run_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    box = Sandbox()
    with pytest.raises(SandboxError, match="running code needs root"):
        box.run("print(1)")
    r = TestClient(create_app(sandbox=box), base_url=LAB).post("/api/run", json={"code": "1"})
    assert r.status_code == 503 and "needs root" in r.json()["detail"]["message"]
    assert not box.alive


@pytest.mark.slow
def test_the_api_stops_a_run_at_ten_seconds(client: TestClient) -> None:
    r = client.post("/api/run", json={"code": "import time\ntime.sleep(600)\n"})
    body = r.json()
    assert r.status_code == 200 and body["status"] == "timeout"
    assert 10.0 <= body["duration_s"] < 12.0


def test_a_fork_bomb_is_answered_at_its_wall_clock_limit(sandbox: Sandbox) -> None:
    """A fork bomb of processes that each map torch took seconds of the kernel's teardown past
    its limit (a 10 s run answered at 18 s; issue 32, finding 8). The answer now comes at the
    limit: within 1 s of it (0.25 s of reading the pipes, the reply, the thread hand-off), and
    the run's slot and cgroup are given back once its processes are gone, so the next runs
    in every slot work."""
    wall = 3.0
    start = time.monotonic()
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    r = sandbox.run(bomb, wall_s=wall)  # every process forks until the limit, and goes on
    took = time.monotonic() - start
    assert r.status == "timeout", r
    assert wall <= r.duration_s < wall + 1.0 and took < wall + 1.0, (r.duration_s, took)
    after = [sandbox.run("print('next')") for _ in range(sandbox.max_runs + 1)]
    assert [(a.status, a.stdout) for a in after] == [("ok", "next\n")] * len(after)
    slots = [sandbox._slots.get(timeout=60) for _ in range(sandbox.max_runs)]  # all came back
    for slot in slots:
        sandbox._slots.put(slot)
    ours = f"normlab-run-{os.getpid()}-"  # (another lab on this machine has its own)
    for parent in (sandbox._cgroup_parents or {}).values():
        assert not [p for p in parent.iterdir() if p.name.startswith(ours)]


def test_the_unshare_backend_gives_the_same_view() -> None:
    import normlab.lab.app

    lab_source = Path(normlab.lab.app.__file__).resolve()
    code = (
        "import os, socket, normlab, torch\n"
        f"print(os.path.exists({str(lab_source)!r}), os.path.exists('/etc/shadow'))\n"
        f"print(sorted(os.listdir({str(lab_source.parents[3])!r})))\n"
        "print(os.getuid() != 0, sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "try:\n    open('/usr/pwned', 'w')\nexcept OSError as e:\n    print(type(e).__name__)\n"
        "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=2)\n"
        "except OSError as e:\n    print(e.errno)\n"
        "import ctypes\n"  # the seccomp filter: no new user namespace (EPERM)
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), ctypes.get_errno())\n"
        "print(open('/proc/self/cgroup').read().count('normlab-run-'))\n"
    )
    s = Sandbox(backend="unshare")
    try:
        r = s.run(code)  # starts the fork server, as the first run does
    finally:
        s.close()
    assert r.status == "ok", r.stderr
    assert lines(r)[1] in ("['.venv', 'src']", "['src']")  # not tests/, .git, ...
    assert lines(r)[:5:2] == ["False False", "True [1, 2]", "101"]
    assert lines(r)[3] == "OSError"
    assert lines(r)[5] == "-1 1"  # EPERM
    assert lines(r)[6] == ("0" if s._cgroup_parents is None else "2")  # memory and pids


# -- per-run cgroups (their unit tests: test_cgroups.py) -------------------------------------------

THREE_PROCESSES_6_GIB = """
import mmap, os, time
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:  # 2 GiB each, resident at once (MAP_POPULATE: faster than touching each page)
        m = mmap.mmap(-1, 2 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
        print("allocated", flush=True)
        time.sleep(30)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


def test_memory_counts_every_process_of_a_run(
    sandbox: Sandbox, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three processes of 2 GiB each: each is within RLIMIT_AS, together over the run's 4 GiB."""
    if sandbox._cgroup_parents is None:
        pytest.skip("no writable cgroup v1 memory and pids hierarchies here")
    peaks: list[int] = []
    remove = cgroups.RunCgroup.remove

    def measured(self: cgroups.RunCgroup) -> None:
        peaks.append(int((self.folders[0] / "memory.max_usage_in_bytes").read_text()))
        remove(self)

    monkeypatch.setattr(cgroups.RunCgroup, "remove", measured)
    r = sandbox.run(THREE_PROCESSES_6_GIB)
    assert r.status == "killed", r
    assert "out of memory: the run's processes together" in r.stderr
    assert "limit of 4,096 MiB, so the whole run was stopped" in r.stderr
    assert r.stdout.count("allocated") < 3 and r.duration_s < 8  # stopped, not at the clock
    assert peaks and peaks[0] <= DEFAULT_LIMITS.memory_bytes  # never 6 GiB, not even 4.1
    assert client.get("/api/experiments").status_code == 200
    ok = client.post("/api/run", json={"code": "print(6 * 7)"}).json()
    assert (ok["status"], ok["stdout"]) == ("ok", "42\n")


def test_each_run_has_a_cgroup_of_its_own_removed_after(sandbox: Sandbox) -> None:
    if sandbox._cgroup_parents is None:
        pytest.skip("no writable cgroup v1 memory and pids hierarchies here")
    code = "import os\nprint(sorted(os.path.basename(line.split(':', 2)[2].strip())"
    code += " for line in open('/proc/self/cgroup') if line.split(':')[1] in ('memory', 'pids')))"
    a, b = sandbox.run(code), sandbox.run(code)
    assert a.status == b.status == "ok", a.stderr + b.stderr
    first, second = (json.loads(r.stdout.replace("'", '"')) for r in (a, b))
    assert first[0] == first[1] and first[0].startswith("normlab-run-"), first  # both hierarchies
    assert second[0] != first[0]  # a fresh one per run ...
    for parent in sandbox._cgroup_parents.values():  # ... and gone when it answered
        assert not [p for p in parent.iterdir() if p.name.startswith("normlab-run-")]


def test_without_cgroups_a_warning_says_so_once_and_runs_go_on(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable() -> dict[str, Path]:
        raise cgroups.CgroupsUnavailable("the cgroup v1 'pids' hierarchy is not mounted")

    monkeypatch.setattr(cgroups, "parents", unavailable)
    monkeypatch.setattr(sandbox_module, "_WARNED", set())
    with pytest.warns(SandboxWarning, match="'pids' hierarchy is not mounted; each run's") as seen:
        assert sandbox_module._cgroup_parents() is None
        assert sandbox_module._cgroup_parents() is None
    assert len(seen) == 1 and "limited per process (RLIMIT_AS, RLIMIT_NPROC)" in str(seen[0])
    monkeypatch.setattr(sandbox, "_cgroup_parents", None)
    r = sandbox.run("print(open('/proc/self/cgroup').read().count('normlab-run-'))")
    assert (r.status, r.stdout) == ("ok", "0\n")  # the rlimits alone


# -- POST /api/run -----------------------------------------------------------------------------


def test_api_runs_code(client: TestClient) -> None:
    r = client.post("/api/run", json={"code": "print('hi')\n1 / 0\n"})
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "error" and body["stdout"] == "hi\n"
    assert "ZeroDivisionError" in body["stderr"] and body["figures"] == []
    spec = client.get("/openapi.json").json()["paths"]["/api/run"]["post"]
    schema = spec["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["code"]["maxLength"] == MAX_CODE_CHARS


@pytest.mark.parametrize(
    ("body", "parameter", "message"),
    [
        ({}, "code", "code is missing"),
        ({"code": 3}, "code", "code must be a string, got int"),
        ({"code": None}, "code", "code must be a string, got NoneType"),
        ({"code": "x" * (MAX_CODE_CHARS + 1)}, "code", "the limit is 100,000"),
        ({"code": "print(1)", "wall_s": 60}, "wall_s", "unknown key 'wall_s'"),
        ([1, 2], "code", "must be a JSON object"),
        (b"{not json", "code", "must be JSON"),
        (b"", "code", "must be JSON"),
        (b"x" * (7 * MAX_CODE_CHARS), "code", "bytes"),
    ],
)
def test_api_refuses_bad_input(
    client: TestClient, body: object, parameter: str, message: str
) -> None:
    if isinstance(body, bytes):
        r = client.post("/api/run", content=body, headers={"content-type": "application/json"})
    else:
        r = client.post("/api/run", json=body)
    assert r.status_code == (413 if message == "bytes" else 422)  # too large: 413
    detail = r.json()["detail"]
    assert detail["parameter"] == parameter and message in detail["message"]
    ok = client.post("/api/run", json={"code": "print(6 * 7)"})  # still serving
    assert ok.status_code == 200 and ok.json()["stdout"] == "42\n"
