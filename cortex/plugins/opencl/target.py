"""The ``opencl`` target's description: options, availability checks, backend factory.

*Enabled* when pyopencl is installed (``find_spec``, no import); *runnable* when pyopencl sees
at least one OpenCL device (this check imports pyopencl).
"""

from __future__ import annotations

import importlib.util
import re
from importlib import metadata
from typing import Any, Mapping

from cortex.core.plugin import hostinfo
from cortex.core.plugin.backend import Backend
from cortex.core.plugin.distribution import pip_install
from cortex.core.plugin.targets import Availability, Target, TargetOption
from cortex.plugins.opencl import workers

PACKAGE = "pyopencl"  # the Python package code generation needs
FIX = pip_install("opencl")
DEVICE_FIX = (
    "install your device's OpenCL driver (ICD), or `pip install pocl-binary-distribution` "
    "for a CPU device"
)
_DEVICE = re.compile(r"^(|cpu|gpu|accelerator|\d+:\d+|name:.+)$")


#: The ``pin_workers`` default, applied to the process when the plugin registers its target:
#: pinned PoCL workers start a launch's work-groups at once (tree groups 0.59-0.72x the time at
#: b10 on a quiet 2-core machine; at load ~4 pinning cost 1.33-1.51x: docs/opencl.md).
PIN_WORKERS = True


def _device_problem(value: str) -> str | None:
    return None if _DEVICE.match(value) else "not a device type, a 'platform:device' index or 'name:TEXT'"


OPTIONS = (
    TargetOption("device", str, "", "which OpenCL device runs the code",
                 check=_device_problem,
                 allowed="'' (PYOPENCL_CTX if set, else the first device), 'cpu', 'gpu', "
                         "'accelerator', 'P:D' (platform and device index, e.g. '0:1'), or "
                         "'name:TEXT' (the first device whose name contains TEXT)"),
    TargetOption("work_group_size", int, 0, "work-items per group; 0 lets the scheduler pick",
                 minimum=0, maximum=4096, allowed="an integer from 0 to 4096 (0 = automatic)"),
    TargetOption("form", str, "auto", "execution shape: one launch per level, or every level in "
                 "one single-work-group launch; 'auto' picks per call by input size",
                 choices=("auto", "per_level", "single_group")),
    TargetOption("fast_math", bool, True, "let the OpenCL compiler reassociate float sums "
                 "(-cl-unsafe-math-optimizations) so dot products vectorize; results change by "
                 "rounding only"),
    TargetOption("tree_groups", int, -1, "work-groups the one-work-group form splits a batch of "
                 "several trees into, each walking its own trees' levels (a CPU device runs "
                 "them on several cores): the default of the schedule knob tree_groups; -1 = by "
                 "rule (the compute units where the device's workers are pinned, else 1: an "
                 "unpinned PoCL worker starts the second group too late to gain)",
                 minimum=-1, maximum=1024,
                 allowed="an integer from -1 to 1024 (-1 = by rule, 0 = the device's compute "
                         "units, 1 = one work-group)"),
    TargetOption("pin_workers", bool, PIN_WORKERS, "PoCL's worker threads pinned one per core "
                 "(POCL_AFFINITY=1), so a launch's work-groups start at once; set for the whole "
                 "process before PoCL starts (a POCL_AFFINITY the user set wins); "
                 "exe.backend.runtime.pinning says whether it is in effect and why"),
)


#: The fix where devices are there but none of them builds a kernel on this host.
BUILD_FIX = ("an OpenCL driver whose compiler supports this CPU (for PoCL, a release built on an LLVM "
             "that knows this CPU, e.g. your distribution's pocl package, registered as an ICD)")


def enabled() -> Availability:
    if importlib.util.find_spec(PACKAGE) is None:
        return Availability.no(f"{PACKAGE} is not installed", FIX)
    return Availability.yes(f"{PACKAGE} found")


def runnable() -> Availability:
    state = enabled()
    if not state:
        return state
    workers.note_probe()
    found = hostinfo.opencl_devices()
    if not found.devices:
        return Availability.no(found.error, BUILD_FIX if found.unusable else DEVICE_FIX)
    return Availability.yes("; ".join(found.devices))


def environment_info() -> dict[str, str]:
    """pyopencl's version and every platform/device with the ``device`` option value that picks
    it (``P:D``), its compute units and whether it has fp64."""
    if not enabled():
        return {"pyopencl": "not installed"}
    workers.note_probe()
    found = hostinfo.opencl_devices()
    info = {"pyopencl": metadata.version("pyopencl")}
    if not found.devices:
        info["devices"] = found.error
        return info
    try:
        from cortex.plugins.opencl.device import describe, list_devices

        lines = []
        for label, dev in list_devices():
            d = describe(dev)
            lines.append(f"{label}, {d.compute_units} compute units, "
                         f"{'fp64' if d.fp64 else 'no fp64'}, driver {dev.driver_version.strip()}")
        info["devices"] = "; ".join(lines)
    except Exception as exc:  # a listing problem must not break `cortex info`
        info["devices"] = "; ".join(found.devices) + f" (details unavailable: {exc})"
    return info


def create_backend(options: Mapping[str, Any]) -> Backend:
    from cortex.plugins.opencl.backend import create_backend as create

    return create(options)


def make_target() -> Target:
    return Target(
        name="opencl",
        description="any OpenCL device through pyopencl (PoCL's CPU device in CI)",
        backend=create_backend,
        options=OPTIONS,
        enabled=enabled,
        runnable=runnable,
    )
