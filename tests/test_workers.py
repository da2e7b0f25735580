"""Helper processes (``normlab.workers``) and the fast trainer's use of them.

A helper is a real spawned interpreter (seconds to import torch), so the helpers are started
once for this module and shared; the tests that kill one wait for its replacement.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from normlab import data, models, train, workers
from normlab.train import train_mlps_fast

READY_S = 120.0  # a fresh helper imports torch; generous for a loaded 2-core CI machine


def mlp(norm: str = "none", width: int = 16, depth: int = 3, seed: int = 0) -> nn.Sequential:
    g = torch.Generator().manual_seed(seed)
    return models.mlp(2, width, depth, out_dim=1, norm=norm, generator=g)


def wait_running() -> workers.HelperPool:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        pool = workers.running()
        if pool is not None:
            return pool
        time.sleep(0.05)
    raise AssertionError(f"no helper ready within {READY_S:g} s")


@pytest.fixture(scope="module")
def helpers() -> Iterator[workers.HelperPool]:
    workers.start(1, train.helper_init)
    try:
        yield wait_running()
    finally:
        workers.stop()
    assert workers.running() is None


@pytest.fixture(scope="module")
def moons() -> tuple[torch.Tensor, torch.Tensor]:
    return data.two_moons()


def helper_pid(pool: workers.HelperPool) -> int:
    return pool.submit(os.getpid).result(timeout=READY_S)


# --------------------------------------------------------------------------------------------
# The pool


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (0, ValueError, "processes must be at least 1, got 0"),
        (-1, ValueError, "processes must be at least 1, got -1"),
        (True, TypeError, "processes must be an integer, got bool"),
        (1.5, TypeError, "processes must be an integer, got float"),
        ("2", TypeError, "processes must be an integer, got str"),
    ],
)
def test_helper_pool_refuses_bad_counts(bad: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        workers.HelperPool(bad)  # type: ignore[arg-type]


def test_nothing_started_means_do_it_yourself() -> None:
    assert workers.running() is None
    assert workers.submit(abs, -3) is None


def test_helpers_run_work_in_another_process(helpers: workers.HelperPool) -> None:
    future = workers.submit(os.getpid)
    assert future is not None
    assert future.result(timeout=READY_S) != os.getpid()
    assert helpers.submit(abs, -3).result(timeout=READY_S) == 3
    # initialized by train.helper_init: one intra-op thread
    assert helpers.submit(torch.get_num_threads).result(timeout=READY_S) == 1


def test_helpers_leave_ctrl_c_to_their_parent(helpers: workers.HelperPool) -> None:
    # A terminal's Ctrl+C reaches the whole process group: a helper keeps SIGINT blocked from
    # its start (the lab stops it), and the parent's own mask is left as it was.
    mask = helpers.submit(signal.pthread_sigmask, signal.SIG_BLOCK, set()).result(READY_S)
    assert signal.SIGINT in mask
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_start_and_stop_are_counted(helpers: workers.HelperPool) -> None:
    again = workers.start(1, train.helper_init)
    assert again is helpers  # already running: shared, not a second pool
    workers.stop()  # one user (the fixture) is left
    assert workers.running() is helpers


class _HandsBackDone:
    """An executor that returns a future only once the helper has finished it: what a fast job
    does when the submitting thread loses the CPU between ``submit`` and its bookkeeping."""

    def __init__(self, executor: object) -> None:
        self.executor = executor

    def submit(self, *args: object) -> object:
        future = self.executor.submit(*args)  # type: ignore[attr-defined]
        future.result(timeout=READY_S)
        return future


@pytest.mark.parametrize("method", ["submit", "submit_if_idle"])
def test_a_job_done_before_submit_returns_does_not_hang(
    helpers: workers.HelperPool, method: str
) -> None:
    # CI once hung 600 s here: the done-callback ran at once, in the submitting thread, and
    # waited for the lock that thread held.
    pool = wait_running()
    real = pool._executor
    pool._executor = _HandsBackDone(real)  # type: ignore[assignment]
    answer: list[object] = []
    try:
        caller = threading.Thread(
            target=lambda: answer.append(getattr(pool, method)(abs, -3)), daemon=True
        )
        caller.start()
        caller.join(timeout=READY_S)
        assert not caller.is_alive(), f"{method} hung on a job that was already done"
    finally:
        pool._executor = real
    (future,) = answer
    assert future.result(timeout=0) == 3  # type: ignore[attr-defined]
    assert future not in pool._jobs  # done work is forgotten, even when it was done at once
    assert pool.submit_if_idle(abs, -5).result(timeout=READY_S) == 5  # the lock is free


def test_a_dead_helper_is_replaced(helpers: workers.HelperPool) -> None:
    pool = wait_running()
    os.kill(helper_pid(pool), signal.SIGKILL)
    failed = 0
    deadline = time.monotonic() + READY_S
    while workers.running() in (None, pool) and time.monotonic() < deadline:
        future = workers.submit(abs, -1)  # on the dead pool: fails, and that replaces it
        if future is not None:
            try:
                future.result(timeout=READY_S)
            except workers.BrokenProcessPool:
                failed += 1
        time.sleep(0.02)
    fresh = wait_running()
    assert fresh is not pool
    assert fresh.submit(abs, -4).result(timeout=READY_S) == 4
    with pytest.raises(workers.BrokenProcessPool):
        pool.submit(abs, -1).result(timeout=READY_S)
    assert failed <= 1  # the first failure replaced the pool


# --------------------------------------------------------------------------------------------
# train_mlps_fast on helpers


def same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def counting_submit(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Count what goes to the helpers (the real submit still runs)."""
    sent: list[object] = []
    real = workers.submit

    def submit(fn: object, *args: object) -> object:
        sent.append(fn)
        return real(fn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(workers, "submit", submit)
    return sent


@pytest.mark.parametrize("lr", [0.5, 2.0])
def test_helper_runs_equal_sequential_runs(
    helpers: workers.HelperPool,
    moons: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
    lr: float,
) -> None:
    x, y = moons
    sent = counting_submit(monkeypatch)
    calls: list[int] = []
    par_nets = [mlp(), mlp("batch"), mlp(width=24, seed=3)]
    seq_nets = [mlp(), mlp("batch"), mlp(width=24, seed=3)]
    par = train_mlps_fast(par_nets, x, y, lr=lr, steps=30, progress=lambda d, t: calls.append(d))
    seq = train_mlps_fast(seq_nets, x, y, lr=lr, steps=30, parallel=False)
    assert len(sent) == 2  # the BN net trained here, the two others in the helper
    for a, b in zip(par, seq, strict=True):
        assert torch.equal(a.losses, b.losses)  # the same code on the same kernels
    for a_net, b_net in zip(par_nets, seq_nets, strict=True):
        assert same_state(a_net, b_net)  # trained in place, buffers and step count too
    assert calls == list(range(1, 31))


def test_helper_reraises_training_errors(
    helpers: workers.HelperPool, moons: tuple[torch.Tensor, torch.Tensor]
) -> None:
    x, y = moons
    bad = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))  # the smaller: sent away
    with pytest.raises(ValueError, match="not supported"):
        train_mlps_fast([mlp(width=8), bad], x, y, lr=0.1, steps=2)


def test_unpicklable_model_trains_on_a_thread(
    helpers: workers.HelperPool,
    moons: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x, y = moons
    sent = counting_submit(monkeypatch)

    class Local(nn.Sequential):  # defined in a function: pickle can't name it
        pass

    nets = [mlp("batch"), Local(*mlp())]
    got = train_mlps_fast(nets, x, y, lr=0.5, steps=10)
    want = train_mlps_fast([mlp("batch"), mlp()], x, y, lr=0.5, steps=10, parallel=False)
    assert sent == []
    assert all(torch.equal(a.losses, b.losses) for a, b in zip(got, want, strict=True))


def test_model_the_helper_cannot_import_trains_here(
    helpers: workers.HelperPool,
    moons: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x, y = moons
    here_only = types.ModuleType("normlab_test_only_here")
    exec("from torch import nn\nclass Net(nn.Sequential):\n    pass\n", here_only.__dict__)
    monkeypatch.setitem(sys.modules, here_only.__name__, here_only)
    sent = counting_submit(monkeypatch)
    net = here_only.Net(*mlp())
    got = train_mlps_fast([mlp("batch"), net], x, y, lr=0.5, steps=10)
    want_net = mlp()
    want = train_mlps_fast([mlp("batch"), want_net], x, y, lr=0.5, steps=10, parallel=False)
    assert len(sent) == 1  # pickled fine here, failed to load there, then trained here
    assert all(torch.equal(a.losses, b.losses) for a, b in zip(got, want, strict=True))
    assert same_state(net, want_net)


def test_runs_survive_a_dead_helper(
    helpers: workers.HelperPool, moons: tuple[torch.Tensor, torch.Tensor]
) -> None:
    x, y = moons
    pool = wait_running()
    os.kill(helper_pid(pool), signal.SIGKILL)
    nets = [mlp("batch"), mlp()]
    got = train_mlps_fast(nets, x, y, lr=2.0, steps=20)  # sent to the dead one, or not at all
    want_nets = [mlp("batch"), mlp()]
    want = train_mlps_fast(want_nets, x, y, lr=2.0, steps=20, parallel=False)
    assert all(torch.equal(a.losses, b.losses) for a, b in zip(got, want, strict=True))
    assert all(same_state(a, b) for a, b in zip(nets, want_nets, strict=True))
    deadline = time.monotonic() + READY_S
    while workers.running() in (None, pool) and time.monotonic() < deadline:
        workers.submit(abs, -1)
        time.sleep(0.02)
    assert wait_running() is not pool


def test_concurrent_callers_share_one_helper(
    helpers: workers.HelperPool, moons: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The lab trains several requests at once: one's second model goes to the helper, the
    others' to threads while it is busy (not queued behind it), and each caller gets its own
    models' results."""
    x, y = moons
    wait_running()
    got: dict[int, list[torch.Tensor]] = {}

    def request(seed: int) -> None:
        runs = train_mlps_fast([mlp(seed=seed), mlp("batch", seed=seed)], x, y, lr=1.0, steps=25)
        got[seed] = [r.losses for r in runs]

    callers = [threading.Thread(target=request, args=(s,)) for s in range(4)]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    for seed in range(4):
        nets = [mlp(seed=seed), mlp("batch", seed=seed)]
        want = train_mlps_fast(nets, x, y, lr=1.0, steps=25, parallel=False)
        assert all(torch.equal(a, b.losses) for a, b in zip(got[seed], want, strict=True))


def test_helpers_end_when_their_parent_is_killed() -> None:
    """A lab killed with SIGKILL runs no shutdown: its helper must notice and end itself."""
    code = (
        "import os, sys, time\n"
        "from normlab import train, workers\n"
        "if __name__ == '__main__':\n"
        "    pool = workers.start(1, train.helper_init)\n"
        "    assert pool.wait_ready(120)\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert parent.stdout is not None
        helper = int(parent.stdout.readline())
        assert _alive(helper)
        parent.kill()
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(helper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(helper)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_closing_a_pool_stops_the_runs_in_its_helpers(
    moons: tuple[torch.Tensor, torch.Tensor],
) -> None:
    # A lab's shutdown closes its pool: a long run in the helper (bn-lr's second model at
    # 12 x 256, 2000 steps: most of a minute) must end at its next step, not first finish.
    x, y = moons
    pool = workers.HelperPool(1, train.helper_init)
    try:
        assert pool.wait_ready(READY_S)
        assert pool.submit(workers.stopping).result(timeout=READY_S) is False
        payload = pickle.dumps((mlp(width=256, depth=12), x, y, 0.1, 2000))
        future = pool.submit(train._train_remote, payload)
        while not future.running():
            time.sleep(0.01)
        time.sleep(0.5)  # into the run
    finally:
        pool.close()  # returns once the helper has stopped
    with pytest.raises(train._Stopped):
        future.result(timeout=0)
    assert workers.stopping() is False  # outside a helper: never


def test_a_busy_helper_takes_no_more_work(helpers: workers.HelperPool) -> None:
    # queueing behind another caller's run would add that run's time: the caller works itself
    pool = wait_running()
    busy = pool.submit(time.sleep, 1.0)
    assert pool.submit_if_idle(abs, -1) is None
    assert workers.submit(abs, -1) is None
    busy.result(timeout=READY_S)
    future = workers.submit(abs, -2)  # free as soon as its work is done
    assert future is not None and future.result(timeout=READY_S) == 2


def test_cancelling_a_job_stops_it_in_its_helper(
    helpers: workers.HelperPool, moons: tuple[torch.Tensor, torch.Tensor]
) -> None:
    x, y = moons
    pool = wait_running()
    payload = pickle.dumps((mlp(width=256, depth=12), x, y, 0.1, 2000))  # ~30 s of training
    running = pool.submit(train._train_remote, payload)
    queued = pool.submit(train._train_remote, payload)
    while not running.running():
        time.sleep(0.01)
    time.sleep(0.5)  # into the run
    workers.cancel(queued)  # dropped, or stopped at its first step if already handed over
    workers.cancel(running)
    with pytest.raises(train._Stopped):
        running.result(timeout=READY_S)
    assert queued.cancelled() or isinstance(queued.exception(timeout=READY_S), train._Stopped)
    # the next job in that helper is not taken for a cancelled one
    assert pool.submit(workers.stopping).result(timeout=READY_S) is False


def test_an_interrupted_caller_calls_off_its_run_in_the_helper(
    helpers: workers.HelperPool, moons: tuple[torch.Tensor, torch.Tensor]
) -> None:
    # The calling thread's run raises at step 3 (Ctrl+C, or a lab request nobody waits for):
    # the other model's run in the helper (~30 s) must stop too, freeing the helper at once.
    x, y = moons
    wait_running()

    def interrupt(done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    nets = [mlp("batch", width=256, depth=12), mlp(width=256, depth=12)]
    with pytest.raises(KeyboardInterrupt):
        train_mlps_fast(nets, x, y, lr=0.1, steps=2000, progress=interrupt)
    deadline = time.monotonic() + 10
    while workers.submit(abs, -1) is None:
        assert time.monotonic() < deadline, "the helper is still training a run nobody reads"
        time.sleep(0.01)
