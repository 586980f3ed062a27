"""The ``numpy`` backend: the LoopProgram interpreter as a target — the executable oracle.

Pipeline position: the last two stages for target ``numpy``. There is no code generation: the
renderer's "source" is the scheduled program's printed form (what ``dump=`` writes and what the
cache key hashes), carrying the program itself; the compiler is the identity; the runtime runs
``cortex.core.loopir.interpret.run`` on host NumPy arrays.

Capabilities describe a vector machine without a grid: whole-array NumPy operations stand for
SIMD lanes (256-bit, so float32 schedules get vector widths 1…8 and the packed weight layout),
one host thread, the level loop inside one call (``single_call``), fp64, and a nominal per-core
cache so the schedule's ``persistent`` knob is in the space too. The interpreter runs every
legal schedule of that space, which is what makes it the oracle for lowering and scheduling.
"""

from __future__ import annotations

from typing import Any, Mapping

from cortex.core import loopir as ir
from cortex.core.loopir import interpret
from cortex.core.plugin.backend import Backend, Compiler, HostRuntime, Renderer, Source
from cortex.core.plugin.capabilities import Capabilities

CAPABILITIES = Capabilities(
    has_grid=False,
    grid_barrier=False,
    group_barrier=False,
    max_threads_per_group=1,
    max_groups=1,
    num_cores=1,
    shared_memory_bytes=0,
    cache_bytes_per_core=1 << 20,
    vector_bits=256,
    supports_fp64=True,
    dialect="",
    single_call=True,
    weight_storage=("bfloat16",),  # the interpreter widens the stored weights before it runs
)


class ProgramSource(str):
    """The printed program (a ``str``, so it can be dumped and hashed) that carries the
    :class:`~cortex.core.loopir.Program` it was printed from."""

    program: ir.Program

    def __new__(cls, program: ir.Program) -> "ProgramSource":
        text = super().__new__(cls, str(program))
        text.program = program
        return text


class PrintRenderer(Renderer):
    """Scheduled LoopProgram -> its printed pseudo-code (with the program attached)."""

    def render(self, program: ir.Program) -> Source:
        if not isinstance(program, ir.Program):
            raise TypeError(f"the numpy renderer takes a LoopProgram, not {type(program).__name__}")
        return ProgramSource(program)


class IdentityCompiler(Compiler):
    """The artifact is the program itself; the cache key still covers the printed source."""

    identity = "cortex.interpret 1"

    def compile(self, source: Source, options: Mapping[str, Any]) -> ir.Program:
        program = getattr(source, "program", None)
        if not isinstance(program, ir.Program):
            raise TypeError("the numpy compiler takes what the numpy renderer returns "
                            "(a ProgramSource), not plain text")
        return program


class InterpreterRuntime(HostRuntime):
    """Host arrays as device buffers; a launch interprets the whole program (its host steps).

    ``launch(program, args)`` takes the program's buffers in ``program.buffers`` order, then
    its sizes in ``program.sizes`` order (see ``cortex.core.runtime.executable``); output and temp
    buffers are written in place.
    """

    def launch(self, artifact: Any, args: tuple[Any, ...], **launch_config: Any) -> None:
        if not isinstance(artifact, ir.Program):
            raise TypeError(f"the numpy runtime launches LoopPrograms, not {type(artifact).__name__}")
        nb, ns = len(artifact.buffers), len(artifact.sizes)
        if len(args) != nb + ns or launch_config:
            raise TypeError(f"program {artifact.name} takes {nb} buffers and {ns} sizes and no "
                            f"launch configuration; got {len(args)} arguments and {launch_config}")
        buffers = {b.name: a for b, a in zip(artifact.buffers, args[:nb])}
        sizes = {s.name: int(v) for s, v in zip(artifact.sizes, args[nb:])}
        interpret.run(artifact, buffers, sizes)


def create_backend(options: Mapping[str, Any]) -> Backend:
    return Backend(CAPABILITIES, PrintRenderer(), IdentityCompiler(), InterpreterRuntime())
