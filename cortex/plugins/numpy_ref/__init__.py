"""Built-in plugin: the ``numpy`` target — the LoopProgram interpreter, the executable oracle.

Pipeline position: runs a scheduled LoopProgram without code generation, to check lowering and
scheduling (``backend.py``: print "renderer", identity compiler, interpreter runtime).
"""

from __future__ import annotations

from cortex.core.plugin.hookspecs import hookimpl
from cortex.core.plugin.targets import TargetRegistrar
from cortex.plugins.numpy_ref import target


@hookimpl
def cortex_register_targets(registry: TargetRegistrar) -> None:
    registry.add(target.make_target())
