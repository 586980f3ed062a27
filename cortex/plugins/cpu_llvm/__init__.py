"""Built-in plugin: the ``llvm`` target (alias ``cpu``) — llvmlite, LLVM IR, JIT on the host CPU.

Pipeline position: codegen + runtime for the host CPU. Registration only so far; the code
generator arrives with its own issue and replaces ``target.create_backend``.
"""

from __future__ import annotations

from cortex.core.hookspecs import hookimpl
from cortex.core.targets import TargetRegistrar
from cortex.plugins.cpu_llvm import target


@hookimpl
def cortex_register_targets(registry: TargetRegistrar) -> None:
    registry.add(target.make_target())


@hookimpl
def cortex_environment_info() -> dict[str, str] | None:
    return target.environment_info()
