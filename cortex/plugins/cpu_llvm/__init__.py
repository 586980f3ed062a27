"""Built-in plugin: the ``llvm`` target (alias ``cpu``) — llvmlite, LLVM IR, JIT on the host CPU.

Pipeline position: codegen + runtime for the host CPU: ``target`` (options, availability),
``backend`` (capabilities, renderer, compiler, runtime), ``codegen`` (LoopProgram -> LLVM IR),
``jit`` (target machines, pass pipeline, MCJIT) and ``runtime`` (compiled program, threads).
See docs/llvm.md.
"""

from __future__ import annotations

from cortex.core.plugin.hookspecs import hookimpl
from cortex.core.plugin.targets import TargetRegistrar
from cortex.plugins.cpu_llvm import target


@hookimpl
def cortex_register_targets(registry: TargetRegistrar) -> None:
    registry.add(target.make_target())


@hookimpl
def cortex_environment_info() -> dict[str, str] | None:
    return target.environment_info()
