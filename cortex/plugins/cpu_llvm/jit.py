"""LLVM machinery of the ``llvm`` target: target machines, the optimization pipeline, the JIT.

Pipeline position: after :mod:`cortex.plugins.cpu_llvm.codegen` has built an ``llvmlite.ir``
module for a scheduled LoopProgram, :class:`JitModule` parses it, optimizes it with a short
pass list (:data:`PASSES`: the generator already emits vectorized, unrolled, SSA code; LLVM's O3
pipeline is kept behind :data:`LLVM_DEFAULT_PIPELINE`) for a long-lived target machine, and
hands it to an MCJIT engine; the :class:`JitModule` gives function addresses for ctypes.

Target machines are created once per (cpu, opt level) and kept for the life of the process. The
``host`` CPU means ``get_host_cpu_name()`` *and* ``get_host_cpu_features()`` (without the
features LLVM assumes a baseline CPU and emits SSE code); any other name pins an LLVM CPU
(e.g. ``skylake-avx512``) for reproducible code generation.

Object code cache: given a :class:`~cortex.core.diskcache.DiskCache`, a :class:`JitModule` keeps
the machine code MCJIT produced (captured with the engine's object cache) under
:func:`object_key` — the IR text, the CPU name and features, llvmlite's and LLVM's versions,
the opt level and the pass list — and a later process loads it with ``add_object_file``
instead of optimizing and compiling (TreeLSTM h256: about 0.03 s instead of 0.4 s). Code for
another CPU has another key: it is never loaded here.

llvmlite >= 0.45 removed ``llvm.initialize()``; only the native target and asm printer are
initialized here.
"""

from __future__ import annotations

import ctypes.util
import functools
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import llvmlite.binding as llvm

from cortex.core.errors import CortexError
from cortex.core.plugin.llvm_cpus import CPU_FEATURES, cpu_vector_bits

if TYPE_CHECKING:
    from cortex.core.diskcache import DiskCache

_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # libm (expf, tanhf, ...) and libc (pthreads, usleep) must be visible to the JIT's linker.
    for name in ("m", "c"):
        path = ctypes.util.find_library(name)
        if path:
            try:
                llvm.load_library_permanently(path)
            except RuntimeError:  # already loaded by the interpreter: its symbols are visible
                pass


class LLVMBackendError(CortexError, RuntimeError):
    """LLVM rejected a generated module (a bug in code generation, reported with the IR)."""


@dataclass(frozen=True)
class CpuInfo:
    """What code is generated for: the LLVM CPU name, its feature string and SIMD width."""

    name: str
    features: str
    vector_bits: int


def cpu_info(cpu: str = "host") -> CpuInfo:
    """Resolve ``cpu`` ("host" or an LLVM CPU name) to a name, features and SIMD width."""
    _initialize()
    if cpu == "host":
        name = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
        flags = set(features.split(","))
        if "+avx512f" in flags:
            bits = 512
        elif "+avx" in flags:
            bits = 256
        else:
            bits = 128
    else:
        name, features = cpu, ""
        bits = cpu_vector_bits(cpu) or 128
    return CpuInfo(name, features, bits)


@functools.lru_cache(maxsize=None)
def cpu_has(cpu: str, feature: str) -> bool:
    """Whether code for ``cpu`` ("host" or an LLVM CPU name) may use the extension ``feature``
    (LLVM's name, e.g. ``avx512bf16``): the host's own features, or what :data:`CPU_FEATURES`
    says a named CPU implies (a name not in it: none)."""
    if cpu == "host":
        return f"+{feature}" in cpu_info("host").features.split(",")
    return feature in CPU_FEATURES.get(cpu, frozenset())


@functools.lru_cache(maxsize=None)
def host_runs(cpu: str) -> tuple[bool, str]:
    """Whether this host can run code generated for ``cpu`` (``"host"`` always can), and why
    not (:func:`why_not_runnable` with this host's CPU name and features)."""
    if cpu == "host":
        return True, ""
    _initialize()
    host = frozenset(k for k, v in llvm.get_host_cpu_features().items() if v)
    why = why_not_runnable(cpu, llvm.get_host_cpu_name(), host)
    return not why, why


def why_not_runnable(cpu: str, host_name: str, host_features: frozenset[str]) -> str:
    """Why a host (its LLVM CPU name and features) cannot run code for the LLVM CPU ``cpu``;
    "" when it can: the extensions the named CPU implies (:data:`CPU_FEATURES`) that the host
    lacks. A name not in that table runs only where it is the host's own: what its code may use
    cannot be told, and an instruction the host lacks ends the process (SIGILL)."""
    if cpu in ("host", host_name):
        return ""
    if cpu not in CPU_FEATURES:
        return (f"which instructions code for cpu={cpu!r} may use is not known here (known: "
                f"{', '.join(sorted(CPU_FEATURES))}), and this host is {host_name!r}")
    missing = sorted(CPU_FEATURES[cpu] - host_features)
    if missing:
        return f"code for cpu={cpu!r} may use {', '.join(missing)}, which this host ({host_name}) lacks"
    return ""


@functools.lru_cache(maxsize=None)
def target_machine(cpu: str = "host", opt_level: int = 3) -> llvm.TargetMachine:
    """The process-wide target machine for ``cpu`` at ``opt_level`` (created once); it runs
    the optimization pipeline and emits assembly. Never hand it to an engine (MCJIT takes
    ownership of its target machine): use :func:`new_target_machine` for that."""
    return new_target_machine(cpu, opt_level)


def new_target_machine(cpu: str = "host", opt_level: int = 3) -> llvm.TargetMachine:
    """A fresh target machine for ``cpu`` (for an execution engine, which will own it)."""
    info = cpu_info(cpu)
    target = llvm.Target.from_triple(llvm.get_process_triple())
    try:
        return target.create_target_machine(cpu=info.name, features=info.features, opt=opt_level,
                                            reloc="default", codemodel="jitdefault", jit=True)
    except RuntimeError as exc:
        raise ValueError(f"LLVM cannot generate code for cpu={cpu!r}: {exc}") from None


#: Module passes run at ``opt_level >= 1`` (LLVM pass names; llvmlite's ``add_<name>_pass``).
#: The generator already emits SSA values, SIMD vectors, the unrolling and the node jam, so
#: inlining its helpers, SROA, one instcombine and CFG clean-up are what is left to do. LLVM's
#: O3 pipeline took 0.18-0.21 s of the TreeLSTM h256's cold compile (instcombine alone about
#: 40 %, run eight times) and this list 0.03 s; the TreeLSTM's kernel results are bit-identical
#: and its b1/b10 native calls as fast (interleaved A/B, docs/llvm.md), and every zoo model
#: keeps its vector code (same scalar FP instruction counts or fewer, f32 and f64).
PASSES: tuple[str, ...] = ("always_inliner", "sroa", "instruction_combine", "simplify_cfg")

#: True: LLVM's default ``O<opt_level>`` pipeline instead of :data:`PASSES` (loop vectorization
#: and interleaving on, unrolling and SLP vectorization as set below).
LLVM_DEFAULT_PIPELINE = False

#: LLVM's loop unroller (and SLP vectorizer) in its default pipeline at opt_level >= 2. Off: the
#: code generator already emits vectorized loops as straight-line SIMD code and jams nodes so a
#: reduction loop has enough independent FMAs; unrolling its 256-trip loops again only
#: multiplies the code the back end compiles (about half of the optimize + JIT time for the
#: TreeLSTM).
LOOP_UNROLLING = False
SLP_VECTORIZATION = False


#: The metadata the generator puts on a loop it left scalar for LLVM's loop vectorizer (a loop
#: whose lanes would need masking, see codegen). :data:`PASSES` has no loop vectorizer (llvmlite
#: does not expose it alone), so a module carrying it gets LLVM's default pipeline: measured,
#: MV-RNN's matrix products ran 4x slower without it before they got their own vector code.
VECTORIZE_HINT = "llvm.loop.vectorize.enable"


def wants_default_pipeline(ir_text: str) -> bool:
    """Whether the module asks for LLVM's loop vectorizer (or :data:`LLVM_DEFAULT_PIPELINE`)."""
    return LLVM_DEFAULT_PIPELINE or VECTORIZE_HINT in ir_text


def optimize(module: llvm.ModuleRef, tm: llvm.TargetMachine, opt_level: int,
             default_pipeline: bool = False) -> None:
    """Optimize ``module`` for ``tm``: LLVM's O0 pipeline at ``opt_level`` 0, else
    :data:`PASSES` (or, with ``default_pipeline``, LLVM's ``O<opt_level>`` pipeline with
    loop vectorization and interleaving on, SLP vectorization and loop unrolling as set above)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    if opt_level >= 2:
        pto.loop_vectorization = True
        pto.slp_vectorization = SLP_VECTORIZATION
        pto.loop_interleaving = True
        pto.loop_unrolling = LOOP_UNROLLING
    pb = llvm.create_pass_builder(tm, pto)
    if opt_level == 0 or default_pipeline or LLVM_DEFAULT_PIPELINE:
        mpm = pb.getModulePassManager()
        try:
            mpm.run(module, pb)
        finally:
            _free_pass_manager(mpm)
        return
    mpm = llvm.create_new_module_pass_manager()
    for name in PASSES:
        getattr(mpm, f"add_{name}_pass")()
    try:
        mpm.run(module, pb)
    finally:
        _free_pass_manager(mpm)


def _free_pass_manager(mpm: llvm.ModulePassManager) -> None:
    """Delete a module pass manager. llvmlite's ``ModulePassManager`` has no ``_dispose``, so
    each one (with its passes: InstCombine keeps a ~40 kB worklist) would stay allocated for the
    life of the process, one per compile; its C entry point is called directly when present."""
    from llvmlite.binding import ffi

    dispose = getattr(ffi.lib, "LLVMPY_DisposeNewModulePassManger", None)  # sic
    if dispose is not None and not mpm.closed:
        dispose(mpm)
        mpm.detach()


def object_key(ir_text: str, cpu: str = "host", opt_level: int = 3) -> str:
    """The cache key of the machine code for ``ir_text``: everything that code depends on."""
    import llvmlite

    from cortex.core.diskcache import digest

    info = cpu_info(cpu)
    pipeline = repr((PASSES, LLVM_DEFAULT_PIPELINE, LOOP_UNROLLING, SLP_VECTORIZATION,
                     wants_default_pipeline(ir_text)))
    return digest("cortex-llvm-object 1", ir_text, llvm.get_process_triple(), info.name, info.features,
                  llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)), str(opt_level), pipeline)


class JitModule:
    """One optimized module, loaded in its own MCJIT engine, in its own LLVM context; lives
    until :meth:`close` or until this object is collected.

    Everything LLVM allocated for it goes with it: the engine (machine code, the module, its
    target machine) and the context (the module's uniqued constants, types and metadata, which
    in LLVM's global context would stay for the life of the process).

    With ``cache``, the machine code is loaded from it when present (``from_cache``) and stored
    in it when compiled."""

    def __init__(self, ir_text: str, cpu: str = "host", opt_level: int = 3,
                 cache: "DiskCache | None" = None) -> None:
        _initialize()
        tm = target_machine(cpu, opt_level)
        self._ir_text, self._opt_level = ir_text, opt_level
        self._module: llvm.ModuleRef | None = None  # the optimized module, when made here
        self.target_machine = tm
        self.from_cache = False
        key = object_key(ir_text, cpu, opt_level) if cache is not None else None
        code = cache.get(key) if cache is not None and key is not None else None
        if code is not None and self._load_object(code, cpu, opt_level):
            self.from_cache = True
            return
        compiled: list[bytes] = []
        context = llvm.create_context()
        with _LOCK:
            mod = None
            try:
                mod = llvm.parse_assembly(ir_text, context=context)
                mod.verify()
            except RuntimeError as exc:
                if mod is not None:
                    mod.close()
                context.close()
                raise LLVMBackendError(f"generated LLVM IR is invalid: {exc}\n--- IR ---\n{ir_text}") from None
            mod.triple = tm.triple
            mod.data_layout = str(tm.target_data)
            engine = None
            try:
                optimize(mod, tm, opt_level, wants_default_pipeline(ir_text))
                engine = llvm.create_mcjit_compiler(mod, new_target_machine(cpu, opt_level))
                if cache is not None:  # MCJIT hands over the object code it made
                    engine.set_object_cache(lambda _m, buf: compiled.append(bytes(buf)), lambda _m: None)
                engine.finalize_object()
            except BaseException:
                if engine is not None:
                    engine.close()  # with the module it owns
                mod.close()
                context.close()
                raise
        self._own(engine, mod, context)
        self._module = mod  # owned by the engine; printed only when asked (optimized_ir)
        if cache is not None and key is not None and len(compiled) == 1:
            cache.put(key, compiled[0])

    def _load_object(self, code: bytes, cpu: str, opt_level: int) -> bool:
        """An engine running ``code`` (object code from the cache); False if LLVM rejects it."""
        context = llvm.create_context()
        with _LOCK:
            engine = None
            try:
                empty = llvm.parse_assembly("", context=context)
                engine = llvm.create_mcjit_compiler(empty, new_target_machine(cpu, opt_level))
                engine.add_object_file(llvm.ObjectFileRef.from_data(code))
                engine.finalize_object()
            except RuntimeError:
                if engine is not None:
                    engine.close()
                context.close()
                return False
        self._own(engine, empty, context)
        return True

    def _own(self, engine: llvm.ExecutionEngine, module: llvm.ModuleRef, context) -> None:
        """Hold the engine, and free it with its module and context when this object goes."""
        self.engine = engine
        self._free = weakref.finalize(self, _dispose, engine, module, context)
        self._free.atexit = False  # at exit the OS takes it back (a daemon thread may still run it)

    def keep(self) -> None:
        """Never free this module (code that must outlive every object: a signal handler)."""
        self._free.detach()

    def close(self) -> None:
        """Free the machine code and everything LLVM holds for this module now. Nothing may
        run its code any more (the runtime stops its threads first)."""
        self._free()

    @property
    def closed(self) -> bool:
        return self.engine.closed

    @property
    def optimized_ir(self) -> str:
        """The optimized module as LLVM IR text (for inspection and tests; optimized again
        here, in a context of its own, when the machine code came from the cache)."""
        if self.closed:
            raise LLVMBackendError("this JIT module was closed")
        with _LOCK:
            if self._module is not None:
                return str(self._module)
            context = llvm.create_context()
            try:
                mod = llvm.parse_assembly(self._ir_text, context=context)
                mod.triple = self.target_machine.triple
                mod.data_layout = str(self.target_machine.target_data)
                optimize(mod, self.target_machine, self._opt_level, wants_default_pipeline(self._ir_text))
                try:
                    return str(mod)
                finally:
                    mod.close()
            finally:
                context.close()

    def address(self, name: str) -> int:
        if self.closed:
            raise LLVMBackendError("this JIT module was closed")
        addr = self.engine.get_function_address(name)
        if not addr:
            raise LLVMBackendError(f"JIT module has no function {name!r}")
        return addr

    def assembly(self) -> str:
        """The optimized module as target assembly (for inspection and tests)."""
        text = self.optimized_ir
        context = llvm.create_context()
        try:
            with _LOCK:
                mod = llvm.parse_assembly(text, context=context)
                try:
                    return self.target_machine.emit_assembly(mod)
                finally:
                    mod.close()
        finally:
            context.close()


def _dispose(engine: llvm.ExecutionEngine, module: llvm.ModuleRef, context) -> None:
    """Engine first (it owns the module and its target machine), then the context."""
    engine.close()
    module.detach()
    context.close()
