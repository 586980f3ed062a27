"""The ``llvm`` backend: capabilities of the host CPU, IR renderer, JIT compiler, runtime.

Pipeline position: the last two stages for target ``llvm``. The renderer turns the scheduled
LoopProgram into LLVM IR text (:mod:`codegen`), carrying the program along (the runtime needs
its buffer list); the compiler JIT-compiles it once into a :class:`CompiledProgram` with its
thread team (:mod:`runtime`), keeping the machine code in the disk cache's ``llvm`` namespace
(:mod:`jit`: a later process loads it instead of compiling); the runtime's ``launch`` is one
native call for the whole batch.

Capabilities come from the real CPU: SIMD width from the LLVM CPU's features (512 bits with
AVX-512) and its register count, ``num_cores`` from the ``threads`` option (default: every
usable CPU), the per-core L2 size from sysfs, fp64, the level loop inside one call
(``single_call``), no grid, prefetches, bfloat16 weight storage (``weights="bfloat16"``: the
kernels widen each loaded weight to float32, or with ``bf16_dot="pairs"`` keep one half of a
word holding two reduction rows), and the code generator's measured knob
preferences (:data:`PREFERRED`). The team runs the schedule's ``threads`` (``Program.launch``).
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from cortex.core import loopir as ir
from cortex.core.plugin.backend import Backend, Compiler, HostRuntime, Renderer, Source
from cortex.core.plugin.capabilities import Capabilities
from cortex.core.diskcache import DiskCache
from cortex.plugins.cpu_llvm import codegen, native_linearize
from cortex.plugins.cpu_llvm.amx import amx_available, require_amx
from cortex.plugins.cpu_llvm.jit import LLVMBackendError, cpu_has, cpu_info
from cortex.plugins.cpu_llvm.runtime import CompiledProgram, usable_cpus

CODEGEN_REVISION = "cortex-llvm 3"  # 2: cx_run/cx_start take the interrupt and team arguments; 3: the schedule owns the jam
#: The disk cache namespace of the machine code (``cortex.core.diskcache``).
CACHE_NAMESPACE = "llvm"


@functools.lru_cache(maxsize=None)
def l2_bytes_per_core() -> int:
    """The L2 size of CPU 0 from sysfs (0 when unknown)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in sorted(base.glob("index*")):
            if (idx / "level").read_text().strip() == "2":
                text = (idx / "size").read_text().strip().upper()
                mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
                return int(text.rstrip("KMG")) * mult
    except (OSError, ValueError):
        pass
    return 0


#: The schedule knobs whose best value depends on this code generator, as measured on the
#: TreeLSTM (docs/llvm.md): threads split each level's hidden units (its weight rows stay in
#: each core's L2), groups of nodes share each weight load (:func:`preferred`: how many depends
#: on the register file), fused loops take two steps a trip, a matrix nest's column loop becomes
#: one 64-lane vector, and the leaves prefetch their table rows two nodes ahead; bfloat16 weights
#: are read in pairs of rows (``bf16_dot``; on AMX tiles where the process may run them, else
#: on ``vdpbf16ps`` where the CPU has AVX512-BF16: :func:`preferred`, docs/llvm.md "AMX tiles"
#: and "The AVX512-BF16 dot product"); the team claims each level's units at run time
#: (``level_split``: on the shared machine b1/b10 calls took 0.04-0.7x the time of the static
#: split; TreeLSTM b100 up to ~1.5x; docs/llvm.md).
PREFERRED = (("interchange", True), ("node_jam", 8), ("jam_unroll", 2), ("wide_lanes", 64), ("prefetch", 2),
             ("bf16_dot", "pairs"), ("level_split", "dynamic"), ("row_jam", 4))

#: By the SIMD registers the CPU has (at least this many: the preferences), the knobs whose best
#: value is the register file's. ``node_jam``: nodes per jammed group, 8 with AVX-512's 32; 4
#: with AVX2's 16, where a group of 8 keeps more accumulators and weight vectors than there are
#: registers (TreeLSTM h256 on an AMD EPYC, AVX2: groups of 8 took 1.47x / 1.35x the time of 4
#: at b10 / b100). ``row_jam``: rows of a matrix nest computed together, 4 with 32 registers
#: (each 64-lane row in four of them); 2 with 16, where a row takes eight (MV-RNN on that
#: EPYC: 0.76x / 0.77x / 0.79x the time of 4 at b1 / b10 / b100). docs/llvm.md, "AVX2 hosts".
BY_REGISTERS = ((32, (("node_jam", 8), ("row_jam", 4))), (16, (("node_jam", 4), ("row_jam", 2))))


def preferred(vector_registers: int, amx: bool, dpbf16: bool = False) -> tuple[tuple[str, Any], ...]:
    """:data:`PREFERRED` with the choices of :data:`BY_REGISTERS` for a CPU with
    ``vector_registers`` SIMD registers, and ``bf16_dot="amx"`` where (``amx``) the process may
    run AMX tiles, else ``"dpbf16"`` where (``dpbf16``) the CPU has the AVX512-BF16 dot product
    (every zoo model at h256 on a Zen 5: 0.71-0.93x the time of ``pairs`` where its GEMVs are
    jammed, ties elsewhere; docs/llvm.md)."""
    fit = dict(next((v for regs, v in BY_REGISTERS if vector_registers >= regs), BY_REGISTERS[-1][1]))
    if amx or dpbf16:
        fit["bf16_dot"] = "amx" if amx else "dpbf16"
    return tuple((k, fit.get(k, v)) for k, v in PREFERRED)


def capabilities(options: Mapping[str, Any]) -> Capabilities:
    """What the host CPU offers, as the scheduler needs it."""
    threads = int(options.get("threads", 0)) or usable_cpus()
    cpu = options.get("cpu", "host")
    bits = cpu_info(cpu).vector_bits
    # AMX tiles: on the host CPU only, where this process may run them (asked once per process)
    amx = cpu == "host" and amx_available()[0]
    dpbf16 = bits >= 512 and cpu_has(cpu, "avx512bf16")  # vdpbf16ps on zmm
    registers = 32 if bits >= 512 else 16
    return Capabilities(
        has_grid=False, grid_barrier=False, group_barrier=False,
        max_threads_per_group=1, max_groups=1,
        num_cores=min(threads, codegen.MAX_THREADS),
        shared_memory_bytes=0,
        cache_bytes_per_core=l2_bytes_per_core() or (1 << 20),
        vector_bits=bits, vector_registers=registers,
        address_registers=16 if platform.machine().lower() in ("x86_64", "amd64") else 0,  # x86-64's
        supports_fp64=True, dialect="", single_call=True, prefetch=True, preferred=preferred(registers, amx, dpbf16),
        weight_storage=("bfloat16",),  # kernel.widen: i16 loads widened to float32
        # kernel.pair_load; amx_gemv; dpbf16_gemv
        bf16_dot=("widen", "pairs") + (("amx",) if amx else ()) + (("dpbf16",) if dpbf16 else ()),
        dynamic_split=True,  # kernel.claimed_loop
    )


class LLVMSource(str):
    """LLVM IR text (what ``dump=`` writes and the cache key hashes), carrying its program."""

    program: ir.Program

    def __new__(cls, text: str, program: ir.Program) -> "LLVMSource":
        out = super().__new__(cls, text)
        out.program = program
        return out


class LLVMRenderer(Renderer):
    """Scheduled LoopProgram -> LLVM IR text (see :mod:`cortex.plugins.cpu_llvm.codegen`)."""

    cache_sources = True  # a pure function of the program and vector_bits/profile

    def __init__(self, vector_bits: int, profile: bool = False) -> None:
        self.vector_bits = vector_bits
        self.profile = profile

    def render(self, program: ir.Program) -> Source:
        if not isinstance(program, ir.Program):
            raise TypeError(f"the llvm renderer takes a LoopProgram, not {type(program).__name__}")
        return LLVMSource(codegen.generate(program, self.vector_bits, profile=self.profile), program)


class LLVMCompiler(Compiler):
    """LLVM IR -> machine code in memory (MCJIT), with the program's worker threads."""

    def __init__(self) -> None:
        import llvmlite
        import llvmlite.binding as llvm

        self.identity = f"{CODEGEN_REVISION}; llvmlite {llvmlite.__version__}; LLVM " + ".".join(
            map(str, llvm.llvm_version_info))

    def compile(self, source: Source, options: Mapping[str, Any]) -> CompiledProgram:
        program = getattr(source, "program", None)
        if not isinstance(program, ir.Program):
            raise TypeError("the llvm compiler takes what the llvm renderer returns (LLVMSource)")
        if program.launch_setting("bf16_dot") == "amx":
            require_amx(f"program {program.name} (bf16_dot='amx')")
        cpu = options.get("cpu", "host")
        if program.launch_setting("bf16_dot") == "dpbf16" and not cpu_has(cpu, "avx512bf16"):
            # (LLVM cannot select vdpbf16ps for such a CPU: it would end the process)
            raise LLVMBackendError(f"program {program.name} uses bf16_dot='dpbf16', which needs a CPU "
                                   f"with avx512bf16; cpu={cpu!r} has none")
        threads = int(program.launch_setting("threads", 0) or options.get("threads", 0))  # the schedule's
        compiled = CompiledProgram(program, threads=threads,
                                   cpu=cpu, opt_level=int(options.get("opt_level", 3)),
                                   ir_text=str(source), profile=bool(options.get("profile", False)),
                                   pin=bool(options.get("pin", False)) or None,
                                   cache=DiskCache(CACHE_NAMESPACE))
        # the host linearizer's compiled twin: once per process, built in the background after
        # the kernel (inside the compile it took CPU from the kernel's code generation)
        native_linearize.install()
        return compiled


class LLVMRuntime(HostRuntime):
    """Host NumPy arrays are the device buffers (``HostRuntime``); ``launch`` is one native
    call."""

    def launch(self, artifact: Any, args: tuple[Any, ...], **launch_config: Any) -> None:
        if not isinstance(artifact, CompiledProgram):
            raise TypeError(f"the llvm runtime launches CompiledPrograms, not {type(artifact).__name__}")
        p = artifact.program
        nb, ns = len(p.buffers), len(p.sizes)
        if len(args) != nb + ns or launch_config:
            raise TypeError(f"program {p.name} takes {nb} buffers and {ns} sizes and no launch "
                            f"configuration; got {len(args)} arguments and {launch_config}")
        artifact.launch_checked(args[:nb], [int(v) for v in args[nb:]])


def artifact_dtype(b: ir.Buffer) -> np.dtype:
    return np.dtype({"int32": np.int32, "bool": np.bool_, "float32": np.float32, "float64": np.float64}[b.dtype])


def create_backend(options: Mapping[str, Any]) -> Backend:
    caps = capabilities(options)
    return Backend(caps, LLVMRenderer(caps.vector_bits, bool(options.get("profile", False))), LLVMCompiler(), LLVMRuntime())
