"""Acting at a point of a training run rather than at a time: a test that stops a run "while it
trains" does it at one of its optimizer steps, so a loaded machine (or a fast one) changes
nothing about what the test sees."""

from __future__ import annotations

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
