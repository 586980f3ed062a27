"""The ``llvm`` target's runtime: a JIT-compiled program, its thread team, its calls.

Pipeline position: after :mod:`codegen` (LoopProgram -> LLVM IR) and :mod:`jit` (IR -> machine
code), a :class:`CompiledProgram` is what an executable calls. One call of
:meth:`CompiledProgram.launch` is one native call (``cx_run``) that performs every host step and
kernel of the program — the whole recursion of every tree of the batch. ctypes releases the GIL
for its duration.

Threads: ``threads - 1`` persistent worker threads are created with pthreads *inside the JIT
code* when the program is loaded (``cx_start``, with a stack of :data:`WORKER_STACK_BYTES`) and
live until :meth:`CompiledProgram.close` or until the object is collected (``cx_stop`` joins
them; then the JIT module — machine code, LLVM module and context — is freed). When the system
refuses a thread, the team is what could be started and a ``RuntimeWarning`` says so. Between
calls the workers spin on a generation word with ``pause`` for about a millisecond, yield a
while, then sleep on a futex until the next call wakes them: back-to-back calls start without a
wake-up syscall and an idle executable burns no CPU (see :mod:`team`). Calls on one program
are serialized by a lock (the team has one set of argument slots).

``os.fork``: in the child every live program gets a new team (the parent's threads do not
exist there).

Ctrl-C: a call made on Python's main thread stops at the next level barrier when SIGINT
arrives and raises ``KeyboardInterrupt``; the program stays usable (see :mod:`interrupt`).

:meth:`CompiledProgram.run` has the interpreter's contract (``cortex.core.loopir.interpret.run``):
``run(buffers, sizes) -> dict[name, ndarray]`` with read-only buffers taken from ``buffers``
and output/temp buffers allocated (or taken from ``buffers`` when given, and written in place).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
import warnings
import weakref
from typing import Any, Mapping

import numpy as np

from cortex.core import loopir as ir
from cortex.core.errors import InvalidArgumentError, TargetNotRunnableError
from cortex.core.loopir.interpret import eval_shape, np_dtype
from cortex.plugins.cpu_llvm import codegen, interrupt
from cortex.plugins.cpu_llvm.jit import JitModule, cpu_info, host_runs

_RUN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_START = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_STOP = ctypes.CFUNCTYPE(None)

#: Stack size of each worker thread. Fixed (glibc's usual default) rather than the pthreads
#: default, which is ``ulimit -s`` and cannot be reserved when that limit is huge; the generated
#: code keeps only small per-thread arrays on its stack.
WORKER_STACK_BYTES = 8 << 20

#: The ``futex`` system call number per machine (Linux); elsewhere idle workers nap 1 ms at a
#: time instead of sleeping until woken.
_FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "arm64": 98, "riscv64": 98, "ppc64le": 221, "ppc64": 221,
                  "s390x": 238, "i686": 240, "i386": 240, "armv7l": 240}


def futex_syscall() -> int:
    if not sys.platform.startswith("linux"):
        return 0
    return _FUTEX_SYSCALL.get(platform.machine(), 0)


class LLVMRuntimeError(InvalidArgumentError):
    """Buffers or sizes given to a compiled program do not fit it."""


#: ``pin=None``: pin worker thread t to the t-th usable CPU when the team has one thread per
#: usable CPU. Off: on the shared 2-core machine pinned workers measured no faster (b1 per-level
#: work 369 vs 348 us, b10 3298 vs 3143, interleaved, load average 14) since a pinned worker
#: cannot leave a core another process is busy on; the calling thread (tid 0) is never pinned.
PIN_WORKERS = False


def _usable_cpu_list() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _data_address_reader() -> Any:
    """A reader of an ndarray's data address: ``PyArrayObject.data``, the field right after
    the object header, read in place (0.5 us), when this interpreter and NumPy lay it out so
    (checked on a probe array); else ``a.ctypes.data`` (2.5 us, a ctypes object per call). A
    call with a fresh batch needs the address of every input array."""
    probe = np.arange(4, dtype=np.int32)[1:]
    offset = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)  # refcount, type
    try:
        if ctypes.c_void_p.from_address(id(probe) + offset).value == probe.ctypes.data:
            return lambda a: ctypes.c_void_p.from_address(id(a) + offset).value
    except (ValueError, OSError):
        pass
    return lambda a: a.ctypes.data


_address = _data_address_reader()
_MAIN_THREAD = threading.main_thread().ident


def _stop_team(stop, jit) -> None:
    """Join the workers (``stop``: None where none were started), then free the code they ran."""
    if stop is not None:
        stop()
    jit.close()


class ThreadStartWarning(RuntimeWarning):
    """The system refused some worker threads; the program runs on fewer."""


#: Every program with a team, for :func:`_after_fork_in_child`.
_LIVE: "weakref.WeakSet[CompiledProgram]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for program in list(_LIVE):
        program._after_fork_in_child()  # noqa: SLF001


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CompiledProgram:
    """A LoopProgram compiled to native code, with its worker threads."""

    def __init__(self, program: ir.Program, *, threads: int = 0, cpu: str = "host",
                 opt_level: int = 3, ir_text: str | None = None, profile: bool = False,
                 pin: bool | None = None, cache: Any = None) -> None:
        """``cache``: a :class:`~cortex.core.diskcache.DiskCache` for the machine code."""
        if threads < 0:
            raise ValueError(f"threads must be >= 0 (0 = every usable CPU), got {threads}")
        if threads > codegen.MAX_THREADS:
            raise ValueError(f"threads must be <= {codegen.MAX_THREADS}, got {threads}")
        self.program = program
        self.threads = threads or usable_cpus()
        self.cpu = cpu
        self.profiling = profile
        self.ir = ir_text if ir_text is not None else codegen.generate(program, cpu_info(cpu).vector_bits,
                                                                        profile=profile)
        self.jit = JitModule(self.ir, cpu=cpu, opt_level=opt_level, cache=cache)
        # code for a CPU this host cannot run is kept for its IR and assembly; none of it runs
        # (not even the team's start: an instruction the host lacks ends the process)
        self.runs_here, self.why_not_runnable = host_runs(cpu)
        self._run = _RUN(self.jit.address(codegen.SYMBOLS.run))
        start = _START(self.jit.address(codegen.SYMBOLS.start))
        cpus = _usable_cpu_list()
        if pin is None:
            pin = PIN_WORKERS and self.threads == len(cpus) > 1
        self.pinned = bool(pin) and self.threads <= len(cpus) and self.runs_here
        if self.pinned:  # worker t on the t-th usable CPU (its L2 keeps its weight rows)
            slots = (ctypes.c_int32 * codegen.MAX_THREADS).from_address(
                self.jit.engine.get_global_value_address("cx_cpus"))
            for t in range(1, self.threads):
                slots[t] = cpus[t]
        stop = _STOP(self.jit.address(codegen.SYMBOLS.stop))
        self._start, self._asked = start, self.threads
        error = self._start_team() if self.runs_here else 0
        self._finalizer = weakref.finalize(self, _stop_team, stop if self.runs_here else None, self.jit)
        self._lock = threading.Lock()
        self._arm = interrupt.arm_function()
        _LIVE.add(self)
        self._warn_if_short(error, stacklevel=3)
        nb, ns = len(program.buffers), len(program.sizes)
        self._ptrs = (ctypes.c_void_p * max(nb, 1))()
        self._sizes = (ctypes.c_int32 * max(ns, 1))()
        self._buf_dtypes = [np.dtype(np_dtype(b.stored)) for b in program.buffers]
        self._ptrs_addr, self._sizes_addr = ctypes.addressof(self._ptrs), ctypes.addressof(self._sizes)
        self._last: list = [None] * max(nb, 1)  # the arrays whose pointers _ptrs holds

    def _start_team(self) -> int:
        """Start the workers (``cx_start``); the team size goes to ``threads``. Returns the
        error code of a refused ``pthread_create`` (0: all started)."""
        err = ctypes.c_int32(0)
        self.threads = self._start(self._asked, WORKER_STACK_BYTES, futex_syscall(), ctypes.addressof(err))
        return err.value

    def _warn_if_short(self, error: int, stacklevel: int) -> None:
        if self.threads < self._asked:
            warnings.warn(f"llvm target: only {self.threads} of {self._asked} threads could be "
                          f"started (pthread_create: {os.strerror(error)}); this program runs on "
                          f"{self.threads}", ThreadStartWarning, stacklevel=stacklevel)

    def _after_fork_in_child(self) -> None:
        """A forked child has none of the parent's threads (its first call would wait for them
        forever) and perhaps a lock held by a parent thread: a new lock and a new team."""
        self._lock = threading.Lock()
        if self._finalizer.alive and self.runs_here:
            self._warn_if_short(self._start_team(), stacklevel=2)

    @property
    def optimized_ir(self) -> str:
        return self.jit.optimized_ir

    def assembly(self) -> str:
        return self.jit.assembly()

    def close(self) -> None:
        """Stop and join the worker threads and free the machine code now (also done when the
        object is collected). Waits for a call in progress on another thread."""
        with self._lock:
            self._finalizer()

    # ---------------------------------------------------------------- profiling builds
    def profile(self) -> dict:
        """What the last call of a profiling build (``profile=True``) recorded, in microseconds
        from the call's start (thread 0 entering ``cx_run``): per thread, its start and, per
        barrier, ``(arrive, leave)``. ``compute[t][k]`` is the time thread ``t`` worked before
        barrier ``k`` (since it left the previous one, or started), ``wait[t][k]`` the time it
        waited in it; with the TreeLSTM's single kernel, barrier 0 ends the leaves, barrier
        ``l`` level ``l``, and the last two end the launch and the call."""
        if not self.profiling:
            raise RuntimeError("profile() needs a program compiled with profile=True")
        ghz = self._tick_ghz()
        eng = self.jit.engine
        n = self.threads
        cnt = (ctypes.c_int32 * (codegen.MAX_THREADS * 16)).from_address(eng.get_global_value_address("cx_prof_count"))
        st = (ctypes.c_int64 * (codegen.MAX_THREADS * 8)).from_address(eng.get_global_value_address("cx_prof_start"))
        ev = np.ctypeslib.as_array((ctypes.c_int64 * (codegen.MAX_THREADS * codegen.PROFILE_EVENTS * 2)).from_address(
            eng.get_global_value_address("cx_prof_events"))).reshape(codegen.MAX_THREADS, codegen.PROFILE_EVENTS, 2)
        t0 = st[0]
        out: dict = {"start": [], "events": [], "compute": [], "wait": []}
        for t in range(n):
            k = cnt[16 * t]
            e = (ev[t, :k].astype(np.float64) - t0) / (ghz * 1e3)
            start = (st[8 * t] - t0) / (ghz * 1e3)
            # a worker may record leaving the previous call's last barrier after thread 0 has
            # reset the counts for this call: drop what happened before its start
            e = e[e[:, 0] >= start] if k else e
            k = len(e)
            prev = np.concatenate(([start], e[:-1, 1])) if k else np.zeros(0)
            out["start"].append(start)
            out["events"].append(e)
            out["compute"].append(e[:, 0] - prev if k else np.zeros(0))
            out["wait"].append(e[:, 1] - e[:, 0] if k else np.zeros(0))
        return out

    def _tick_ghz(self) -> float:
        """Cycle-counter ticks per nanosecond (the TSC rate), measured once."""
        if getattr(self, "_ghz", None) is None:
            import time

            tick = ctypes.CFUNCTYPE(ctypes.c_int64)(self.jit.address("cx_prof_tick"))
            a, ta = tick(), time.perf_counter_ns()
            time.sleep(0.05)
            b, tb = tick(), time.perf_counter_ns()
            self._ghz = (b - a) / (tb - ta)
        return self._ghz

    # ---------------------------------------------------------------- calls
    def launch(self, arrays: list[np.ndarray] | tuple[np.ndarray, ...], sizes: list[int] | tuple[int, ...]) -> None:
        """One native call on ready arrays (program buffer order) and sizes (program order).

        The arrays must be C-contiguous with the buffers' dtypes (see :meth:`run` for a checked
        entry point); they are used in place."""
        if not self.runs_here:
            raise TargetNotRunnableError(
                "llvm", f"program {self.program.name} was compiled for cpu={self.cpu!r}: {self.why_not_runnable}",
                fix="compile with cpu='host' (the default) to run it on this machine")
        arm = self._arm if threading.get_ident() == _MAIN_THREAD else None  # see interrupt.py
        with self._lock:
            if not self._finalizer.alive:
                raise RuntimeError("this compiled program was closed")
            last = self._last
            for i, a in enumerate(arrays):
                if a is not last[i]:  # parameters and pooled outputs come back every call
                    self._ptrs[i] = _address(a)
                    last[i] = a
            for i, s in enumerate(sizes):
                self._sizes[i] = s
            interrupted = self._run(self._ptrs_addr, self._sizes_addr, arm)
        if interrupted:  # Python's own SIGINT handler usually raised already, on return
            raise KeyboardInterrupt("the native call stopped at a level barrier (SIGINT)")

    def launch_checked(self, arrays: tuple, sizes: list[int]) -> None:
        """:meth:`launch` after checking that every array is a C-contiguous ndarray of its
        buffer's dtype (an array seen in the previous call, same object, is not checked again:
        ndarrays do not change dtype or layout in place)."""
        last, dts = self._last, self._buf_dtypes
        for i, (a, dt) in enumerate(zip(arrays, dts)):
            if a is last[i]:
                continue
            if not (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.dtype == dt):
                b = self.program.buffers[i]
                raise TypeError(f"buffer {b.name} must be a C-contiguous {dt} ndarray")
        self.launch(arrays, sizes)

    def run(self, buffers: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
        """The interpreter's contract: read-only buffers from ``buffers``, outputs and temps
        allocated unless given; returns every buffer by name (outputs written)."""
        p = self.program
        missing = [s.name for s in p.sizes if s.name not in sizes]
        if missing:
            raise LLVMRuntimeError(f"program {p.name}: sizes {missing} are not given")
        size_vals = {s.name: int(sizes[s.name]) for s in p.sizes}
        for s in p.sizes:
            v = size_vals[s.name]
            if v < s.lo or v >= 2**31:
                raise LLVMRuntimeError(f"size {s.name}={v} is outside [{s.lo}, 2^31)")
        arrays = []
        out: dict[str, np.ndarray] = {}
        for b, dt in zip(p.buffers, self._buf_dtypes):
            shape = eval_shape(b.shape, size_vals)
            a = buffers.get(b.name)
            if a is None:
                if b.read_only:
                    raise LLVMRuntimeError(f"program {p.name}: {b.role} buffer {b.name!r} is not given")
                a = np.zeros(shape, dtype=dt)
            else:
                a = np.asarray(a)
                if a.dtype != dt:
                    if not b.read_only or b.storage:  # a cast would not round to the format
                        raise LLVMRuntimeError(f"buffer {b.name} must be {dt}, got {a.dtype}")
                    a = a.astype(dt)
                if tuple(a.shape) != tuple(shape):
                    if int(np.prod(a.shape)) != int(np.prod(shape)):
                        raise LLVMRuntimeError(f"buffer {b.name} has shape {a.shape}, the program needs {shape}")
                    a = a.reshape(shape)
                if not a.flags.c_contiguous:
                    if not b.read_only:
                        raise LLVMRuntimeError(f"output buffer {b.name} must be C-contiguous")
                    a = np.ascontiguousarray(a)
            if b.role == "index" and b.value_range is not None and a.size:
                _check_index(b, a, size_vals)
            arrays.append(a)
            out[b.name] = a
        self.launch(arrays, [size_vals[s.name] for s in p.sizes])
        return out


def _check_index(b: ir.Buffer, a: np.ndarray, sizes: Mapping[str, int]) -> None:
    """Index buffers are dereferenced by native code: enforce their declared value range."""
    lo, hi = (_eval_int(v, sizes) for v in b.value_range)  # type: ignore[union-attr]
    amin, amax = int(a.min()), int(a.max())
    if amin < lo or amax > hi:
        raise LLVMRuntimeError(f"index buffer {b.name} holds values in [{amin}, {amax}], outside its "
                               f"declared range [{lo}, {hi}]; native code would read out of bounds")


def _eval_int(e: ir.Expr, sizes: Mapping[str, int]) -> int:
    return int(eval_shape((e,), sizes)[0])
