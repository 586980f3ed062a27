"""Built-in plugin: the ``opencl`` target — OpenCL C through pyopencl, on any OpenCL device.

Pipeline position: codegen + runtime for OpenCL devices (PoCL's CPU device in CI): ``target``
(options, availability), ``device`` (selection, capabilities), ``forms`` (execution shapes),
``compiler`` (render + build), ``runtime`` (buffers, launches), ``backend`` (the bundle),
``workers`` (PoCL's worker threads pinned or not, set when the plugin registers its target).
"""

from __future__ import annotations

from cortex.core.plugin.hookspecs import hookimpl
from cortex.core.plugin.targets import TargetRegistrar
from cortex.plugins.opencl import target, workers


@hookimpl
def cortex_register_targets(registry: TargetRegistrar) -> None:
    # before anything lists OpenCL devices (PoCL starts its workers then): the option's default
    workers.apply_default(target.PIN_WORKERS)
    registry.add(target.make_target())


@hookimpl
def cortex_environment_info() -> dict[str, str] | None:
    return target.environment_info()
