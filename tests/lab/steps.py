"""Acting at a point of a training run rather than at a time: a test that stops a run "while it
trains" does it at one of its optimizer steps, so a loaded machine (or a fast one) changes
nothing about what the test sees."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from torch.optim.optimizer import register_optimizer_step_post_hook


@contextmanager
def at_each_step(do: Callable[[int], None]) -> Iterator[None]:
    """Call ``do(n)`` in the training thread at the ``n``-th optimizer step taken in the process
    while inside (before the run itself counts the step: its hook comes later)."""
    steps = 0

    def after_step(*_: object) -> None:
        nonlocal steps
        steps += 1
        do(steps)

    handle = register_optimizer_step_post_hook(after_step)
    try:
        yield
    finally:
        handle.remove()


WAIT_S = 120.0
"""The most a gate waits: a bug fails the test, it never hangs it."""


class Gate:
    """Optimizer steps that wait: while the gate is closed, each step taken in the process waits
    after it is done (in its own thread) until the gate opens. Pass it to :func:`at_each_step`.

    A test closes it, waits until ``n`` steps wait (every run it started is then between two
    steps), checks what must hold meanwhile, and opens it again.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._closed = False
        self.waiting = 0  # steps waiting now

    def __call__(self, step: int) -> None:
        with self._changed:
            if not self._closed:
                return
            self.waiting += 1
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self._closed, timeout=WAIT_S)
            self.waiting -= 1

    def close(self) -> None:
        with self._changed:
            self._closed = True

    def open(self) -> None:
        with self._changed:
            self._closed = False
            self._changed.notify_all()

    def wait_for(self, n: int) -> None:
        """Return once ``n`` steps wait at the (closed) gate."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.waiting >= n, timeout=WAIT_S), (
                f"{self.waiting} of {n} steps reached the gate"
            )


HELD = "held at step 2"
"""What :func:`_main`'s process prints on stdout when its 2nd optimizer step waits."""


def _main() -> int:
    """``python tests/lab/steps.py ARGS``: ``normlab ARGS``, whose 2nd optimizer step (a lab's
    run or warm-up "while it trains") prints :data:`HELD` on stdout and waits until a line comes
    on stdin or the lab's runner is cancelled (its Ctrl+C). A test that starts a lab process
    acts at that point, not after a sleep it hopes is long enough."""
    import sys

    from normlab.__main__ import main
    from normlab.lab.runner import Runner

    go_on = threading.Event()
    cancel = Runner.cancel

    def cancel_and_go_on(self: Runner) -> None:
        cancel(self)
        go_on.set()

    Runner.cancel = cancel_and_go_on  # type: ignore[method-assign]

    def read_a_line() -> None:
        if sys.stdin is not None and sys.stdin.readline():  # at its end (no line): hold on
            go_on.set()

    threading.Thread(target=read_a_line, daemon=True).start()

    def hold(step: int) -> None:
        if step == 2:
            print(HELD, flush=True)
            go_on.wait(WAIT_S)

    with at_each_step(hold):
        return main()


if __name__ == "__main__":
    raise SystemExit(_main())
