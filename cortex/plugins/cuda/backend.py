"""The ``cuda`` backend: capabilities of the GPU, the core's renderer in the CUDA dialect, nvcc,
and the PyCUDA runtime.

Pipeline position: what ``target.create_backend(options)`` returns to the compilation pipeline.
Everything but the runtime works without a GPU (compile-only: nvcc is enough). With a GPU the
capabilities come from the device's attributes; without one from the published figures of the
architecture compiled for (``arch``, or ``FALLBACK_ARCH`` for ``'auto'``), so the schedule and
the CUDA source are the ones that GPU would get.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from cortex.core import loopir as ir
from cortex.core.plugin import hostinfo
from cortex.core.plugin.backend import Backend, Renderer, Source
from cortex.core.render.c_family import render
from cortex.plugins.cuda.compiler import CudaSource, NvccCompiler, resolve_arch
from cortex.plugins.cuda.device import DeviceInfo, capabilities, nominal_device
from cortex.plugins.cuda.runtime import CudaRuntime


class CudaRenderer(Renderer):
    """Scheduled LoopProgram -> CUDA C (the core's C-family renderer, ``cuda`` dialect)."""

    cache_sources = True  # a pure function of the program

    def render(self, program: ir.Program) -> Source:
        if not isinstance(program, ir.Program):
            raise TypeError(f"the cuda renderer takes a LoopProgram, not {type(program).__name__}")
        return CudaSource(render(program, "cuda"), program)


@functools.lru_cache(maxsize=None)
def probe_device(ordinal: int) -> DeviceInfo | None:
    """The attributes of CUDA device ``ordinal`` through the driver API (no PyCUDA needed);
    None when there is no driver or no such device."""
    if hostinfo.cuda_driver().error:
        return None
    from cortex.plugins.cuda.driver import CudaError, LibCuda

    try:
        return LibCuda().device_info(ordinal)
    except CudaError:
        return None


def make_backend(options: Mapping[str, Any], why_not: Callable[[], tuple[str, str] | None] | None = None,
                 device_probe: Callable[[int], DeviceInfo | None] = probe_device) -> Backend:
    """The backend for resolved target ``options`` (``arch``, ``device``, ``threads_per_block``)."""
    ordinal = int(options.get("device", 0))
    threads = int(options.get("threads_per_block", 256))
    info = device_probe(ordinal)

    def device_arch() -> str | None:
        return info.arch if info is not None else None

    arch = resolve_arch(str(options.get("arch", "auto")), device_arch)
    if info is None or (options.get("arch", "auto") != "auto" and info.arch != arch):
        info = nominal_device(arch)
    return Backend(
        capabilities=capabilities(info, threads),
        renderer=CudaRenderer(),
        compiler=NvccCompiler(device_arch),
        runtime=CudaRuntime(ordinal, threads, why_not=why_not),
    )
