"""Built-in plugin: the ``cuda`` target — CUDA C compiled by nvcc, launched through PyCUDA.

Pipeline position: codegen + runtime for NVIDIA GPUs: ``target.py`` (options, availability),
``backend.py`` (capabilities, renderer), ``compiler.py`` (nvcc), ``runtime.py`` + ``launch.py``
+ ``driver.py`` (PyCUDA and the driver API). See docs/cuda.md.
"""

from __future__ import annotations

from cortex.core.plugin.hookspecs import hookimpl
from cortex.core.plugin.targets import TargetRegistrar
from cortex.plugins.cuda import target


@hookimpl
def cortex_register_targets(registry: TargetRegistrar) -> None:
    registry.add(target.make_target())


@hookimpl
def cortex_environment_info() -> dict[str, str] | None:
    return target.environment_info()
