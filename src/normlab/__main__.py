"""``python -m normlab`` and the ``normlab`` script: the command line of :mod:`normlab.cli`.

A Ctrl+C ends the command line with one line and exit status 130, never a traceback, whenever
it comes. Four details make that hold:

- Importing :mod:`normlab.cli` imports torch, which takes seconds on a cold start, so a Ctrl+C
  can come before :func:`normlab.cli.main` is there to catch it: :func:`main` catches that one.
- CPython marks a ``KeyboardInterrupt`` that propagates out of an ``exec`` of a string as never
  handled, even when code further up handles it, and then ends the process by SIGINT at exit
  (status -2, not 130) unless a later ``exec`` clears the mark. Libraries ``exec`` strings while
  they import (scipy builds every distribution's methods that way, and scikit-learn's datasets
  import scipy during a run), so a Ctrl+C there was handled and still ended by SIGINT. The
  interpreter's mark tests for exactly ``KeyboardInterrupt``: :func:`main` has Ctrl+C raise
  :class:`Interrupted`, a subclass, which every ``except KeyboardInterrupt`` still catches.
- Python runs a signal's handler wherever the main thread is, a weakref callback or a
  ``__del__`` included, and drops what those raise ("Exception ignored in ..."): the Ctrl+C was
  lost and the run went on (the import system's module locks have such callbacks). When an
  :class:`Interrupted` is dropped that way, a thread delivers the Ctrl+C again once the main
  thread has left the hook that saw it dropped, so that it is raised at an ordinary line.
- A shell without job control starts a background job (``make test &`` in a script) with
  SIGINT ignored, and a parent may leave it blocked; Python then installs no handler of its
  own. :func:`main` unblocks SIGINT and installs its handler first, whatever the process
  inherited.
"""

import _thread
import signal
import sys
import threading
import time
from types import FrameType


class Interrupted(KeyboardInterrupt):
    """What a Ctrl+C raises in the command line (see the module docstring)."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted


_previous_hook = sys.unraisablehook


def _redeliver_dropped(info: "sys.UnraisableHookArgs") -> None:
    """``sys.unraisablehook``: an :class:`Interrupted` raised where Python drops exceptions is
    delivered again; anything else goes to the hook that was there before."""
    if isinstance(info.exc_value, Interrupted) and not sys.is_finalizing():
        # Not from here: the handler would run again before this hook returns, where Python
        # drops it for good. Nor from a threading.Timer, whose start() waits for its thread:
        # on a loaded machine its delay ran out inside that wait, in this hook.
        _thread.start_new_thread(_deliver_outside_the_hook, ())
        return
    _previous_hook(info)


def _deliver_outside_the_hook() -> None:
    """Interrupt the main thread again once it is no longer inside :func:`_redeliver_dropped`."""
    main = threading.main_thread().ident
    while main is not None and _in_hook(sys._current_frames().get(main)):
        time.sleep(0.001)
    _thread.interrupt_main(signal.SIGINT)


def _in_hook(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is _redeliver_dropped.__code__:
            return True
        frame = frame.f_back
    return False


def _answer_ctrl_c() -> None:
    """SIGINT unblocked and raising :class:`Interrupted`, whatever this process inherited."""
    if hasattr(signal, "pthread_sigmask"):  # POSIX
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, _interrupt)
    sys.unraisablehook = _redeliver_dropped


def main() -> int:
    """Entry point of the ``normlab`` script; returns the exit status."""
    _answer_ctrl_c()
    try:
        from normlab import cli
    except KeyboardInterrupt:
        # cli.EXIT_INTERRUPTED and cli.main's line; cli itself is what could not be imported
        print("normlab: interrupted", file=sys.stderr)
        return 130
    return cli.main()


# Guarded: a "spawn" child process (multiprocessing) imports the main module of its parent.
if __name__ == "__main__":
    sys.exit(main())
