"""Ctrl-C during a native call of the ``llvm`` target: a process-wide SIGINT word.

Pipeline position: part of the ``llvm`` runtime (:mod:`cortex.plugins.cpu_llvm.runtime`). A
call runs inside one native function with the GIL released, so Python's SIGINT handler cannot
run until it returns. To stop a long call (a chain of 150,000 levels takes seconds) this
module JIT-compiles, once per process, a tiny native SIGINT handler ``cx_sigint`` that sets a
word (``cx_sigint_word``) and then calls the handler it replaced — Python's own, so Python
still raises ``KeyboardInterrupt`` as usual. The generated code reads the word at every team
barrier (see :mod:`cortex.plugins.cpu_llvm.team`) and leaves the call there; the runtime then
raises ``KeyboardInterrupt``. Between barriers (within one level) nothing stops a thread.

``cx_sigint_arm()`` is what a call hands to ``cx_run``: it clears the word and returns it,
first putting ``cx_sigint`` back in front of the installed handler if something (Python's
``signal.signal``) replaced it — one ``sigaction`` query per call, inside the native call. When
the installed disposition is ``SIG_DFL`` or ``SIG_IGN`` (Ctrl-C ends the process, or is
ignored) it installs nothing and returns null: the call is not interruptible, nor needs to be.

Only calls made on Python's main thread are armed (Python runs signal handlers there and
nowhere else); a call from another thread runs to its end. Linux only (the ``struct
sigaction`` layout below is glibc's and musl's); elsewhere :func:`arm_function` is ``None``.
The handler calls the one it replaced with ``(sig, info, context)``, which a one-argument
handler ignores under the Linux calling conventions; a re-entry (a handler that calls ours
back) does not chain again.
"""

from __future__ import annotations

import ctypes
import platform
import signal
import sys
import threading

from llvmlite import ir as ll

from cortex.plugins.cpu_llvm.team import Callee

I32 = ll.IntType(32)
I64 = ll.IntType(64)
PTR = ll.PointerType()
VOID = ll.VoidType()

#: ``SA_SIGINFO`` per machine where the ``struct sigaction`` layout below holds.
_SA_SIGINFO = {"x86_64": 4, "aarch64": 4, "arm64": 4, "ppc64le": 4, "riscv64": 4, "s390x": 4}


class _SigAction(ctypes.Structure):
    """glibc's / musl's ``struct sigaction`` on Linux (handler, 1024-bit mask, flags, restorer)."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


def supported() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in _SA_SIGINFO


def handler_ir() -> str:
    """The LLVM IR of ``cx_sigint``, ``cx_sigint_arm`` and their words."""
    m = ll.Module(name="cortex_sigint")
    size = ctypes.sizeof(_SigAction)
    flags_at = _SigAction.flags.offset

    def word(name: str, ty: ll.Type) -> ll.GlobalVariable:
        g = ll.GlobalVariable(m, ty, name)
        g.initializer = ll.Constant(ty, 0)
        g.align = 64
        return g

    flag, prev, busy = word("cx_sigint_word", I32), word("cx_sigint_prev", I64), word("cx_sigint_busy", I32)
    handler = ll.Function(m, ll.FunctionType(VOID, [I32, PTR, PTR]), "cx_sigint")
    handler.attributes.add("nounwind")
    b = ll.IRBuilder(handler.append_basic_block("entry"))
    b.store_atomic(ll.Constant(I32, 1), flag, "seq_cst", 4)
    chain, call, done = (handler.append_basic_block(n) for n in ("chain", "call", "done"))
    again = b.atomic_rmw("xchg", busy, ll.Constant(I32, 1), "acquire")
    b.cbranch(b.icmp_signed("==", again, ll.Constant(I32, 0)), chain, done)
    b.position_at_end(chain)
    p = b.load_atomic(prev, "acquire", 8, typ=I64)  # the replaced handler's address
    b.cbranch(b.icmp_unsigned(">", p, ll.Constant(I64, 1)), call, done)  # not SIG_DFL / SIG_IGN
    b.position_at_end(call)
    b.call(Callee(b.inttoptr(p, PTR), handler.function_type), list(handler.args))
    b.branch(done)
    b.position_at_end(done)
    release, out = handler.append_basic_block("release"), handler.append_basic_block("out")
    b.cbranch(b.icmp_signed("==", again, ll.Constant(I32, 0)), release, out)
    b.position_at_end(release)
    b.store_atomic(ll.Constant(I32, 0), busy, "release", 4)
    b.branch(out)
    b.position_at_end(out)
    b.ret_void()

    sigaction = ll.Function(m, ll.FunctionType(I32, [I32, PTR, PTR]), "sigaction")
    arm = ll.Function(m, ll.FunctionType(PTR, []), "cx_sigint_arm")
    arm.attributes.add("nounwind")
    b = ll.IRBuilder(arm.append_basic_block("entry"))
    null = ll.Constant(PTR, None)
    b.store_atomic(ll.Constant(I32, 0), flag, "seq_cst", 4)
    slot = b.alloca(ll.ArrayType(I64, (size + 7) // 8), name="cur")
    slot.align = 16
    cur = b.inttoptr(b.ptrtoint(slot, I64), PTR)  # untyped (llvmlite checks typed stores)
    got, mine, other, install, fail = (arm.append_basic_block(n) for n in ("got", "mine", "other", "install", "fail"))
    rc = b.call(sigaction, [ll.Constant(I32, int(signal.SIGINT)), null, cur])
    b.cbranch(b.icmp_signed("==", rc, ll.Constant(I32, 0)), got, fail)
    b.position_at_end(got)
    h = b.load(cur, typ=PTR)
    b.cbranch(b.icmp_unsigned("==", h, handler), mine, other)
    b.position_at_end(mine)
    b.ret(flag)
    b.position_at_end(other)
    b.cbranch(b.icmp_unsigned(">", b.ptrtoint(h, I64), ll.Constant(I64, 1)), install, fail)
    b.position_at_end(install)
    b.store_atomic(b.ptrtoint(h, I64), prev, "release", 8)
    b.store(handler, cur)
    fp = b.gep(cur, [ll.Constant(I64, flags_at)], inbounds=True, source_etype=ll.IntType(8))
    sa_siginfo = _SA_SIGINFO.get(platform.machine(), 4)
    b.store(b.or_(b.load(fp, typ=I32), ll.Constant(I32, sa_siginfo)), fp)
    rc = b.call(sigaction, [ll.Constant(I32, int(signal.SIGINT)), cur, null])
    b.ret(b.select(b.icmp_signed("==", rc, ll.Constant(I32, 0)), flag, null))
    b.position_at_end(fail)
    b.ret(null)
    return str(m)


_LOCK = threading.Lock()
_STATE: dict = {}


def arm_function() -> int | None:
    """The address of ``cx_sigint_arm`` (compiled on first use, kept for the process), or
    ``None`` where interrupts are not supported."""
    if not supported():
        return None
    with _LOCK:
        if "arm" not in _STATE:
            from cortex.plugins.cpu_llvm.jit import JitModule

            jit = JitModule(handler_ir())
            jit.keep()  # once installed, the handler must outlive everything
            _STATE["jit"] = jit
            _STATE["arm"] = jit.address("cx_sigint_arm")
        return _STATE["arm"]
