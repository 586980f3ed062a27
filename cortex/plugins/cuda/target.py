"""The ``cuda`` target's description: options, availability checks, backend factory.

*Enabled* wherever ``nvcc`` exists (CUDA C can be generated and compiled without a GPU);
*runnable* when the CUDA driver loads and reports a GPU and pycuda is installed. The checks use
``shutil.which``, ``find_spec`` and ctypes on libcuda — pycuda is not imported (it needs a driver).
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

PACKAGE = "pycuda"  # the Python package launches need
FIX = pip_install("cuda")
NVCC_FIX = "install the CUDA toolkit and put nvcc on PATH (or set CUDA_HOME)"
DRIVER_FIX = "run on a machine with an NVIDIA GPU and its driver"
_ARCH = re.compile(r"^(auto|sm_\d{2,3}[a-z]?)$")


def _arch_problem(value: str) -> str | None:
    return None if _ARCH.match(value) else "not 'auto' or an 'sm_XY' name"


def _block_problem(value: int) -> str | None:
    return None if value % 32 == 0 else "not a multiple of the warp size, 32"


OPTIONS = (
    TargetOption("arch", str, "auto", "GPU architecture for nvcc -arch",
                 check=_arch_problem,
                 allowed="'auto' (the GPU's own) or an 'sm_XY' name such as 'sm_90'"),
    TargetOption("device", int, 0, "CUDA device ordinal", minimum=0,
                 allowed="an integer >= 0 (a CUDA device ordinal)"),
    TargetOption("threads_per_block", int, 256, "threads per block",
                 minimum=32, maximum=1024, check=_block_problem,
                 allowed="a multiple of 32 from 32 to 1024"),
)


def enabled() -> Availability:
    nvcc = hostinfo.find_nvcc()
    if nvcc is None:
        return Availability.no("nvcc (the CUDA toolkit) was not found on PATH or in CUDA_HOME",
                               NVCC_FIX)
    return Availability.yes(f"nvcc found at {nvcc}")


def runnable() -> Availability:
    state = enabled()
    if not state:
        return state
    problems, fixes = [], []
    driver = hostinfo.cuda_driver()
    if driver.error:
        problems.append(driver.error)
        fixes.append(DRIVER_FIX)
    if importlib.util.find_spec(PACKAGE) is None:
        problems.append(f"{PACKAGE} is not installed")
        fixes.append(FIX)
    if problems:
        return Availability.no("; ".join(problems), "; ".join(fixes))
    return Availability.yes(f"{', '.join(driver.devices)} (CUDA driver {driver.version})")


def environment_info() -> dict[str, str]:
    driver = hostinfo.cuda_driver()
    try:
        pycuda = metadata.version("pycuda")
    except metadata.PackageNotFoundError:
        pycuda = "not installed"
    info = {
        "nvcc": hostinfo.nvcc_version() or "not found",
        "CUDA driver": driver.version or driver.error,
        "GPU": ", ".join(driver.devices) or "none",
        "pycuda": pycuda,
    }
    if hostinfo.find_nvcc() is not None:
        from cortex.plugins.cuda.backend import probe_device
        from cortex.plugins.cuda.device import FALLBACK_ARCH

        device = probe_device(0)
        info["arch='auto' compiles for"] = (f"{device.arch} (device 0: {device.name})" if device is not None
                                            else f"{FALLBACK_ARCH} (no GPU visible; compile-only)")
    state = runnable()
    info["runs here"] = "yes" if state else f"no: {state.reason}"
    return info


def _why_not_runnable() -> tuple[str, str] | None:
    state = runnable()
    return None if state else (state.reason, state.fix)


def create_backend(options: Mapping[str, Any]) -> Backend:
    """The backend for resolved ``options``: code generation and nvcc work wherever the target
    is enabled; the runtime raises ``TargetNotRunnableError`` (with the reason) on first use
    where there is no GPU, driver or pycuda."""
    from cortex.plugins.cuda.backend import make_backend

    return make_backend(options, why_not=_why_not_runnable)


def make_target() -> Target:
    return Target(
        name="cuda",
        description="NVIDIA GPUs: CUDA C compiled by nvcc, launched through PyCUDA",
        backend=create_backend,
        options=OPTIONS,
        enabled=enabled,
        runnable=runnable,
    )
