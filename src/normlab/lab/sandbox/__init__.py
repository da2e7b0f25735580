"""The sandbox: where the lab runs a learner's Python code for real, contained and limited.

The playground's Run button and the code exercises' checker hand code to one
:class:`Sandbox`; nothing else in the lab starts a process for a learner. Its modules, by where
they run:

==================  =====================================================================
module              runs in, and does
==================  =====================================================================
``supervisor``      the lab's process: :class:`Sandbox` starts the fork server and keeps it
                    (restarts it when it dies, stops it with the lab), sends each run with
                    its :class:`Limits`, and reads back a :class:`RunResult`
``cgroups``         the lab's process: one cgroup v1 ``memory`` + ``pids`` group per run,
                    so a run's processes and tmpfs pages are limited together
``seccomp``         the lab's process: builds the learner's seccomp filter (BPF bytes) that
                    the fork server installs
``child``           inside the sandbox, as a script (the ``lab/`` folder is hidden there):
                    the fork server, and per run the supervisor process, the init of its PID
                    namespace and the learner's process
``exercise_child``  inside a run, as a file shipped beside the learner's code: a code
                    exercise's probe, which calls the learner's functions and reports once
==================  =====================================================================

What isolates what: bubblewrap (or ``unshare``) gives the fork server a read-only view of
``/usr``, Python and the ``normlab`` package without ``lab/``, the progress data, the home
folder or the network; each run gets its own PID, mount, network, IPC and UTS namespaces, a
private ``/tmp``, a non-root uid of its own, rlimits, its cgroup and the seccomp filter. See
:mod:`normlab.lab.sandbox.supervisor` for the design in full and
:mod:`normlab.lab.sandbox.child` for the process tree of one run. The names below are what the
rest of the lab imports.
"""

from __future__ import annotations

from normlab.lab.sandbox.supervisor import (
    DEFAULT_LIMITS,
    WARM_MODULES,
    Limits,
    RunResult,
    Sandbox,
    SandboxBusy,
    SandboxError,
    SandboxWarning,
)

__all__ = [
    "DEFAULT_LIMITS",
    "WARM_MODULES",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxBusy",
    "SandboxError",
    "SandboxWarning",
]
