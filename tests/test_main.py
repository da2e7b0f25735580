"""``normlab.__main__``: the script's entry point answers Ctrl+C with status 130 in every case.

The end-to-end Ctrl+C tests (during torch's import, during a run) are in test_cli.py. These pin
the two CPython details that made a Ctrl+C end by SIGINT or get lost now and then, and a SIGINT
that the process inherits ignored or blocked (see the module docstring of ``normlab.__main__``).
Each runs a child process, so that pytest keeps its own handlers, with a stand-in for
``normlab.cli`` whose ``main`` meets the Ctrl+C where the real one did: once through the entry
point, once on the interpreter's own handler (the control, which shows the problem the entry point
is there for). Each child first sets SIGINT up as a terminal's Ctrl+C finds the interpreter,
rather than inherit it from pytest: a background job of a script starts with SIGINT ignored, and
the interpreter then has no handler to test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Put before a child's code: SIGINT as in a terminal, whatever pytest inherited (see above)
TERMINAL = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
"""

# Appended to a child's code that defines the stand-in main() as {main}
STAND_IN = """
cli = types.ModuleType("normlab.cli")
cli.main = {main}
sys.modules["normlab.cli"] = cli
import normlab
normlab.cli = cli
if sys.argv[1] == "entry":
    from normlab.__main__ import main
    sys.exit(main())
sys.exit({main}())  # the interpreter's own SIGINT handler
"""


def _child(code: str, main: str, mode: str) -> subprocess.CompletedProcess[str]:
    source = TERMINAL + textwrap.dedent(code) + STAND_IN.format(main=main)
    return subprocess.run(
        [sys.executable, "-c", source, mode], capture_output=True, text=True, timeout=120
    )


# Interrupted inside an exec of a string, as a run was inside scipy's import; reports what it
# caught and the interpreter's "unhandled" mark.
INSIDE_EXEC = """
import ctypes, signal, sys, types

def inside_exec():
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
"""


def _inside_exec(mode: str) -> tuple[str, str]:
    out = _child(INSIDE_EXEC, "inside_exec", mode)
    assert out.returncode in (130, -2), out.stderr
    caught, mark = out.stdout.split()
    if mark == "?":
        pytest.skip("this interpreter does not export _Py_UnhandledKeyboardInterrupt")
    return caught, mark


def test_ctrl_c_raises_a_keyboard_interrupt_the_interpreter_does_not_mark_unhandled() -> None:
    # a KeyboardInterrupt subclass: every handler still applies
    assert _inside_exec("entry") == ("Interrupted", "0")


def test_without_it_a_handled_ctrl_c_inside_exec_stays_marked_unhandled() -> None:
    assert _inside_exec("plain") == ("KeyboardInterrupt", "1")


# Ctrl+C inside a weakref callback, where Python runs signal handlers too but drops what they
# raise.
IN_A_CALLBACK = """
import os, signal, sys, types, weakref

def in_a_callback():
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
"""


def test_a_ctrl_c_that_python_drops_in_a_callback_is_delivered_again() -> None:
    out = _child(IN_A_CALLBACK, "in_a_callback", "entry")
    assert (out.returncode, out.stdout, out.stderr) == (130, "raised Interrupted\n", "")


def test_without_it_python_drops_a_ctrl_c_in_a_callback() -> None:
    out = _child(IN_A_CALLBACK, "in_a_callback", "plain")
    assert (out.returncode, out.stdout) == (0, "lost\n")
    assert "Exception ignored" in out.stderr and "KeyboardInterrupt" in out.stderr


# SIGINT ignored, as a background job of a script starts, and blocked too; the stand-in sends
# itself a SIGINT.
IGNORED_AND_BLOCKED = """
import os, signal, sys, types

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

def kill_myself():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10**7):
            pass
    except KeyboardInterrupt as exc:
        print("raised", type(exc).__name__)
        return 130
    print("lost")
    return 0
"""


def test_ctrl_c_is_answered_even_where_it_was_ignored_and_blocked() -> None:
    out = _child(IGNORED_AND_BLOCKED, "kill_myself", "entry")
    assert (out.returncode, out.stdout, out.stderr) == (130, "raised Interrupted\n", "")


def test_without_it_an_ignored_and_blocked_ctrl_c_is_lost() -> None:
    out = _child(IGNORED_AND_BLOCKED, "kill_myself", "plain")
    assert (out.returncode, out.stdout) == (0, "lost\n")
