"""The ``opencl`` backend: device, capabilities, renderer, compiler and runtime, bundled.

Pipeline position: ``cortex.compile(model, target="opencl", ...)`` calls
:func:`create_backend` with the target's resolved options (``device``, ``work_group_size``,
``form``, ``fast_math``, ``tree_groups``: ``Capabilities.independent_groups``, the default of
the schedule knob of that name; ``pin_workers``: whether PoCL's workers are pinned, which the
process decided when PoCL started, so ``Capabilities.pinned_workers`` is what holds and
``OpenCLRuntime.pinning`` says why); the scheduler reads the capabilities of the chosen device,
the renderer emits OpenCL C through the core's C-family renderer, the compiler builds it with
pyopencl (cached), and the runtime runs it (see ``runtime`` for buffers and launches).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from cortex.core.plugin.backend import Backend
from cortex.plugins.opencl import workers
from cortex.plugins.opencl.compiler import OpenCLCompiler, OpenCLRenderer
from cortex.plugins.opencl.device import capabilities, device_for
from cortex.plugins.opencl.runtime import OpenCLRuntime


def create_backend(options: Mapping[str, Any]) -> Backend:
    pin = bool(options.get("pin_workers", True))
    workers.note_probe(pin)
    device = device_for(str(options.get("device", "")))
    info = device.info
    pocl_cpu = info.kind == "CPU" and "portable computing language" in info.platform.lower()
    pinning = workers.pinning(pin, pocl_cpu)
    groups = int(options.get("tree_groups", -1))
    caps = replace(capabilities(info), pinned_workers=pinning.in_effect, groups_progress=pocl_cpu,
                   independent_groups=max(1, info.compute_units) if groups == 0 else max(0, groups))
    renderer = OpenCLRenderer(fast_math=bool(options.get("fast_math", True)), float_lanes=info.native_float_lanes,
                              clang_cpu=pocl_cpu)
    return Backend(caps, renderer, OpenCLCompiler(device), OpenCLRuntime(device, pinning))
