"""The learner's seccomp filter (:mod:`normlab.lab.sandbox.seccomp`) as bytes, without a sandbox.

What it refuses in a real run is checked in ``test_sandbox.py`` and ``test_hostile.py``.
"""

from __future__ import annotations

import pytest

from normlab.lab.sandbox import seccomp


def test_the_seccomp_filter_is_built_for_known_machines_only() -> None:
    for machine in ("x86_64", "aarch64"):
        program = seccomp.program(machine)
        assert len(program) % 8 == 0 and 20 < len(program) // 8 < 256  # jumps reach the end
    with pytest.raises(ValueError, match="no seccomp filter for 'riscv64', known: x86_64"):
        seccomp.program("riscv64")
    with pytest.raises(ValueError, match="unknown system calls for x86_64: openat2"):
        seccomp.program("x86_64", ("openat2",))
