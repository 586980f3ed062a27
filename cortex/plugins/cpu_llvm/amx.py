"""Whether this process may run AMX tile instructions (the ``bf16_dot="amx"`` capability).

Pipeline position: asked once per process by the ``llvm`` backend when it states its
capabilities (:mod:`cortex.plugins.cpu_llvm.backend`), and by the AMX micro-benchmark. AMX
needs three things: the host CPU's features (as LLVM reports them) include ``amx-tile`` and
``amx-bf16``; the operating system is Linux on x86-64; and the kernel grants this process the
tile data state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, which returns 0; the
permission is process-wide and inherited by threads and forked children). Without the grant a
tile instruction faults (SIGILL), so nothing is offered on a guess.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

SYS_ARCH_PRCTL = 158  # x86-64 syscall number
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


@functools.lru_cache(maxsize=1)
def amx_available() -> tuple[bool, str]:
    """``(True, "")`` when this process may run ``tdpbf16ps``, else ``(False, why)``. Cached:
    asked once per process."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False, f"AMX tiles need Linux on x86-64 (this is {sys.platform} {platform.machine()})"
    from cortex.plugins.cpu_llvm.jit import cpu_info

    flags = set(cpu_info().features.split(","))
    missing = [f for f in ("amx-tile", "amx-bf16") if f"+{f}" not in flags]
    if missing:
        return False, f"the host CPU lacks {', '.join(missing)}"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    except (OSError, AttributeError) as exc:  # no libc syscall(): no way to ask
        return False, f"cannot ask the kernel for the AMX tile state ({exc})"
    if rc != 0:
        return False, f"the kernel refused the AMX tile state (arch_prctl errno {ctypes.get_errno()})"
    return True, ""


def require_amx(what: str) -> None:
    """Raise :class:`~cortex.plugins.cpu_llvm.jit.LLVMBackendError` unless this process may run
    AMX tiles (``what``: the code that needs them): code with tile instructions is never run
    where they would fault (a program rendered, cached or saved elsewhere)."""
    ok, why = amx_available()
    if not ok:
        from cortex.plugins.cpu_llvm.jit import LLVMBackendError

        raise LLVMBackendError(f"{what} needs AMX tiles, which this process cannot run: {why}")
