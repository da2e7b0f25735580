"""``normlab.__main__``: the script's entry point answers Ctrl+C with status 130 in every case.

The end-to-end Ctrl+C tests (during torch's import, during a run) are in test_cli.py; these pin
the CPython detail that made a handled Ctrl+C end by SIGINT now and then (see the module
docstring of ``normlab.__main__``), in a child process so that pytest's own handlers stay.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# A stand-in for normlab.cli whose main() is interrupted inside an exec of a string, as a run
# was inside scipy's import, and reports what it caught and the interpreter's "unhandled" mark.
CHILD = textwrap.dedent(
    """
    import ctypes, signal, sys, types

    def interrupted_inside_exec():
        try:
            exec("import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nwhile True: pass")
        except KeyboardInterrupt as exc:
            try:
                mark = ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
            except ValueError:  # not exported by this interpreter
                print(type(exc).__name__, "?")
            else:
                print(type(exc).__name__, mark.value)
            return 130

    cli = types.ModuleType("normlab.cli")
    cli.main = interrupted_inside_exec
    sys.modules["normlab.cli"] = cli
    import normlab
    normlab.cli = cli
    if sys.argv[1] == "entry":
        from normlab.__main__ import main
        sys.exit(main())
    sys.exit(interrupted_inside_exec())  # the interpreter's own SIGINT handler
    """
)


def _child(mode: str) -> tuple[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=120
    )
    assert out.returncode in (130, -2), out.stderr
    caught, mark = out.stdout.split()
    return caught, mark


def test_ctrl_c_raises_a_keyboard_interrupt_the_interpreter_does_not_mark_unhandled() -> None:
    caught, mark = _child("entry")
    assert caught == "Interrupted"  # a KeyboardInterrupt subclass: every handler still applies
    if mark == "?":
        pytest.skip("this interpreter does not export _Py_UnhandledKeyboardInterrupt")
    assert mark == "0"


def test_without_it_a_handled_ctrl_c_inside_exec_stays_marked_unhandled() -> None:
    # The control: why the entry point installs its own handler at all.
    caught, mark = _child("plain")
    assert caught == "KeyboardInterrupt"
    if mark == "?":
        pytest.skip("this interpreter does not export _Py_UnhandledKeyboardInterrupt")
    assert mark == "1"


def test_ctrl_c_stays_ignored_where_it_was_ignored() -> None:
    # A background job starts with SIGINT ignored: the entry point must not turn it back on.
    code = textwrap.dedent(
        """
        import signal, sys, types
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cli = types.ModuleType("normlab.cli")
        cli.main = lambda: 0 if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else 1
        sys.modules["normlab.cli"] = cli
        import normlab
        normlab.cli = cli
        from normlab.__main__ import main
        sys.exit(main())
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


# A stand-in for normlab.cli whose main() gets Ctrl+C inside a weakref callback, where Python
# runs signal handlers too but drops what they raise.
DROPPED = textwrap.dedent(
    """
    import os, signal, sys, types, weakref

    def interrupted_inside_a_callback():
        class Thing:
            pass

        def callback(ref):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs in here
                pass

        thing = Thing()
        ref = weakref.ref(thing, callback)
        try:
            del thing  # runs the callback
            for _ in range(10**7):
                pass
        except KeyboardInterrupt as exc:
            print("raised", type(exc).__name__)
            return 130
        print("lost")
        return 0

    cli = types.ModuleType("normlab.cli")
    cli.main = interrupted_inside_a_callback
    sys.modules["normlab.cli"] = cli
    import normlab
    normlab.cli = cli
    if sys.argv[1] == "entry":
        from normlab.__main__ import main
        sys.exit(main())
    sys.exit(interrupted_inside_a_callback())
    """
)


def test_a_ctrl_c_that_python_drops_in_a_callback_is_delivered_again() -> None:
    out = subprocess.run(
        [sys.executable, "-c", DROPPED, "entry"], capture_output=True, text=True, timeout=120
    )
    assert (out.returncode, out.stdout, out.stderr) == (130, "raised Interrupted\n", "")


def test_without_it_python_drops_a_ctrl_c_in_a_callback() -> None:
    # The control: with the interpreter's own handler the Ctrl+C is printed as ignored and lost.
    out = subprocess.run(
        [sys.executable, "-c", DROPPED, "plain"], capture_output=True, text=True, timeout=120
    )
    assert (out.returncode, out.stdout) == (0, "lost\n")
    assert "Exception ignored" in out.stderr and "KeyboardInterrupt" in out.stderr
