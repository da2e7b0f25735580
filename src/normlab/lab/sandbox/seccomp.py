"""The seccomp filter of a run: system calls learner code never needs, refused with ``EPERM``.

A run's process has no capabilities and its own namespaces, but the kernel still offers it
interfaces that code in a playground has no use for and that have been the way out of many
sandboxes: new user namespaces (where it would be root again), ``io_uring``, the key
management calls (the kernel keyring kept a key from one run to the next of the same uid),
``bpf``, ``perf_event_open``, ``ptrace`` and the mount calls. :func:`program` writes a classic BPF
program (as ``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)`` and bubblewrap's ``--seccomp`` take
it) that refuses them:

- a foreign system-call ABI (i386 or x32 on x86_64) is refused whole, so no other numbering
  reaches the same calls;
- ``clone`` and ``unshare`` are refused when their flags ask for ``CLONE_NEWUSER``; ``clone3``
  passes its flags in memory a filter cannot read, so it answers ``ENOSYS`` and the C library
  falls back to ``clone`` (threads and ``fork`` keep working);
- every call in :data:`REFUSED` answers ``EPERM``; everything else is allowed.

>>> len(program("x86_64")) % 8, len(program("aarch64")) % 8
(0, 0)
"""

from __future__ import annotations

import errno
import platform
import struct

__all__ = ["REFUSED", "program"]

REFUSED = (
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "add_key",
    "request_key",
    "keyctl",
    "bpf",
    "perf_event_open",
    "ptrace",
    "mount",
    "umount2",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
)
"""System calls a run may not make at all."""

CLONE_NEWUSER = 0x10000000

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NUMBERS = """
name               x86_64  aarch64
clone                  56      220
unshare               272       97
clone3                435      435
ptrace                101      117
mount                 165       40
umount2               166       39
add_key               248      217
request_key           249      218
keyctl                250      219
perf_event_open       298      241
bpf                   321      280
io_uring_setup        425      425
io_uring_enter        426      426
io_uring_register     427      427
open_tree             428      428
move_mount            429      429
fsopen                430      430
fsconfig              431      431
fsmount               432      432
fspick                433      433
mount_setattr         442      442
"""
"""The system calls the filter names, numbered per architecture (the kernel's syscall tables)."""


def _numbers(machine: str) -> dict[str, int]:
    header, *rows = (line.split() for line in _NUMBERS.strip().splitlines())
    column = header.index(machine)
    return {row[0]: int(row[column]) for row in rows}


_X32_BIT = 0x40000000  # x86_64's x32 ABI numbers its calls from here

# classic BPF: struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}
_LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS: load a 32-bit word of struct seccomp_data
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (the low word of args[0])
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO | errno


def program(machine: str | None = None, refused: tuple[str, ...] = REFUSED) -> bytes:
    """The filter for ``machine`` (``platform.machine()`` by default) as ``sock_filter`` bytes.

    Raises:
        ValueError: no system-call table is known for ``machine``, or ``refused`` names a call
            that is not in it.
    """
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for {machine!r}, known: {', '.join(_AUDIT_ARCH)}")
    arch, numbers = _AUDIT_ARCH[machine], _numbers(machine)
    unknown = [name for name in refused if name not in numbers]
    if unknown:
        raise ValueError(f"unknown system calls for {machine}: {', '.join(unknown)}")
    # (code, jump-if-true label, jump-if-false label, k); None = the next instruction
    code: list[tuple[int, str | None, str | None, int]] = [
        (_LD_ABS_W, None, None, _ARCH),
        (_JEQ, None, "eperm", arch),
        (_LD_ABS_W, None, None, _NR),
    ]
    if machine == "x86_64":
        code.append((_JGE, "eperm", None, _X32_BIT))
    code += [(_JEQ, "eperm", None, numbers[name]) for name in refused]
    code.append((_JEQ, "enosys", None, numbers["clone3"]))
    code += [(_JEQ, "flags", None, numbers[name]) for name in ("clone", "unshare")]
    code.append((_RET, None, None, _ALLOW))
    flags = len(code)
    code += [(_LD_ABS_W, None, None, _ARG0), (_JSET, "eperm", "allow", CLONE_NEWUSER)]
    labels = {"flags": flags, "allow": len(code), "eperm": len(code) + 1, "enosys": len(code) + 2}
    code += [
        (_RET, None, None, _ALLOW),
        (_RET, None, None, _ERRNO | errno.EPERM),
        (_RET, None, None, _ERRNO | errno.ENOSYS),
    ]
    out = bytearray()
    for i, (op, jt, jf, k) in enumerate(code):
        offsets = [0 if label is None else labels[label] - i - 1 for label in (jt, jf)]
        out += struct.pack("=HBBI", op, *offsets, k)
    return bytes(out)
