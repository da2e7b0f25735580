"""Turns at torch's global random state between a notebook's cells and its widgets' runs.

An experiment's code seeds and draws from torch's *global* generator (``torch.manual_seed``,
``nn.Linear``'s init), as the plain-PyTorch script it renders does, and so does a learner's
cell. A notebook widget (:mod:`normlab.widgets`) computes in a thread of the kernel, so a run
that overlapped a cell would draw from the cell's stream and the cell from the run's: both
would print other numbers than each does alone. They take turns instead, with :data:`TURNS`:

- a widget's run holds the turn while it runs (:meth:`Turns.__enter__`);
- in an IPython kernel (Jupyter, JupyterLab, Colab, VS Code), each cell holds it from
  IPython's ``pre_run_cell`` event to its ``post_run_cell`` (:func:`share_with_cells`, which
  the first widget calls): a cell waits for the run in progress (a run is bounded, a few
  seconds at the registry's maxima), and a control moved while a cell runs waits for its end;
- a cell that waits for a widget (``w.wait()``, ``w.result``) holds the turn already, so the
  widget computes its wanted settings in the cell's own thread (:meth:`Turns.mine` tells).

Runs of experiments also take turns with each other, whichever thread runs them: that is
``ENGINE`` of :mod:`normlab.experiments.base.registry`, held inside every ``run_experiment``.
A cell does not take ``ENGINE``: code in it may run experiments in threads of its own (the
lab's app under a test client does) and wait for them.

marimo runs its cells without IPython's events, so there a cell does not take the turn: a
marimo app waits for a widget's first run in the widget's own cell (``w.wait()``).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any


class Turns:
    """A lock that a thread may take again while it holds it, and that tells a thread whether
    it holds it (:meth:`mine`), which :class:`threading.RLock` does not say in public.

    Example::

        >>> turns = Turns()
        >>> with turns:
        ...     with turns:  # again, in the same thread
        ...         turns.mine()
        True
        >>> turns.mine()
        False
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None  # the thread holding the turn
        self._depth = 0  # how many times it took it

    def acquire(self) -> None:
        """Take the turn: wait until no other thread holds it."""
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return
        self._lock.acquire()
        self._owner, self._depth = me, 1

    def release(self) -> None:
        """Give back one taking of the turn; the last one frees it."""
        if self._owner != threading.get_ident():
            raise RuntimeError("release of a turn that this thread does not hold")
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()

    def mine(self) -> bool:
        """Whether the calling thread holds the turn."""
        return self._owner == threading.get_ident()

    def __enter__(self) -> Turns:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


TURNS = Turns()
"""The one turn at torch's global random state between cells and widgets' runs."""

ANY_CELL = object()
"""Marks the turn taken for the cell running when the events were hooked (its own
``pre_run_cell`` had fired already): the next ``post_run_cell`` gives it back."""


class Cells:
    """IPython's ``pre_run_cell`` and ``post_run_cell`` callbacks that give each cell the turn.

    IPython fires ``post_run_cell`` even when the cell raised or was interrupted, and for an
    empty cell without a ``pre_run_cell`` before it; a cell run by code inside a cell
    (``get_ipython().run_cell``) fires both inside the outer cell's. So the turn is given back
    only by the ``post_run_cell`` of the cell that took it (``result.info``, the very object
    its ``pre_run_cell`` had, or no result at all for an interrupted async cell). A cell
    interrupted while it waits for the turn runs without it: IPython's events catch the
    ``KeyboardInterrupt`` of a callback and run the cell.
    """

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        self.cell: object | None = None  # the ExecutionInfo of the cell holding the turn

    def pre_run_cell(self, info: Any) -> None:
        if self.turns.mine():  # a cell inside a cell, or after one that was adopted
            return
        self.turns.acquire()
        self.cell = info

    def post_run_cell(self, result: Any) -> None:
        if not self.turns.mine() or self.cell is None:
            return
        mine = self.cell is ANY_CELL or result is None or result.info is self.cell
        if mine:
            self.cell = None
            self.turns.release()

    def adopt(self) -> None:
        """Take the turn for the cell running now, whose ``pre_run_cell`` fired before these
        callbacks were registered."""
        if not self.turns.mine():
            self.turns.acquire()
            self.cell = ANY_CELL


CELLS = Cells(TURNS)


def share_with_cells() -> None:
    """In an IPython kernel, give each cell :data:`TURNS` from now on (once per kernel), the
    cell running now included. Elsewhere (a script, marimo) it does nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # no IPython: no cells
        return
    shell = get_ipython()
    if shell is None or CELLS.pre_run_cell in shell.events.callbacks["pre_run_cell"]:
        return
    shell.events.register("pre_run_cell", CELLS.pre_run_cell)
    shell.events.register("post_run_cell", CELLS.post_run_cell)
    if _in_a_cell(shell):
        CELLS.adopt()


def _in_a_cell(shell: Any) -> bool:
    """Whether the calling code runs in a cell (not in a widget's message handler, a startup
    file or a thread): the kernel's main thread, handling an ``execute_request``."""
    if threading.current_thread() is not threading.main_thread():
        return False
    get_parent = getattr(shell, "get_parent", None)
    if get_parent is None:  # a terminal IPython: its main thread runs only cells
        return True
    header = (get_parent() or {}).get("header", {})
    return bool(header.get("msg_type") == "execute_request")
