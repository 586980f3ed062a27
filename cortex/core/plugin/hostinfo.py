"""What this host offers: CPU name and SIMD features, CUDA toolkit and driver, OpenCL devices.

Pipeline position: beside the pipeline. Target plugins ask it whether they are enabled/runnable,
the llvm backend reads the CPU features, and ``cortex info`` prints it. Every probe is guarded
(a failure becomes a message, never an exception), bounded (subprocesses have a timeout) and
cached for the life of the process; only :func:`opencl_devices` imports a device library, and
only when called.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass

# SIMD feature flags worth showing, in the order a reader expects (x86 then Arm).
_SIMD_FLAGS = (
    "sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512cd", "avx512dq", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi",
    "avx512_vbmi2", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
    "neon", "asimd", "asimdhp", "asimddp", "sve", "sve2",
)
_FLAG_NAMES = {"pni": "sse3"}


def _cpuinfo(path: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's ``key: value`` lines of /proc/cpuinfo ({} where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


@functools.lru_cache(maxsize=None)
def cpu_name() -> str:
    """The CPU's marketing name, e.g. ``Intel(R) Xeon(R) Processor``."""
    info = _cpuinfo()
    for key in ("model name", "Hardware", "cpu model", "Processor"):
        if info.get(key):
            return info[key]
    return platform.processor() or platform.machine() or "unknown CPU"


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset[str]:
    """Every feature flag the kernel reports for the CPU (``flags`` on x86, ``Features`` on Arm)."""
    info = _cpuinfo()
    return frozenset((info.get("flags") or info.get("Features") or "").split())


def simd_features(flags: frozenset[str] | None = None) -> list[str]:
    """The SIMD-related flags among ``flags`` (default: this CPU's), e.g. ``["sse", ..., "avx512f"]``."""
    flags = cpu_flags() if flags is None else flags
    return [_FLAG_NAMES.get(f, f) for f in _SIMD_FLAGS if f in flags]


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def find_nvcc() -> str | None:
    """Path of ``nvcc``: on PATH, else under ``$CUDA_HOME``/``$CUDA_PATH``/``/usr/local/cuda``."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            candidate = os.path.join(root, "bin", "nvcc")
            if os.access(candidate, os.X_OK):
                return candidate
    return None


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str | None:
    """``nvcc``'s release, e.g. ``13.0 (V13.0.88)``; ``None`` without nvcc or when it fails."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release ([\d.]+), (V[\d.]+)", out.stdout)
    if match:
        return f"{match.group(1)} ({match.group(2)})"
    lines = out.stdout.strip().splitlines()
    return lines[-1] if out.returncode == 0 and lines else None


@dataclass(frozen=True)
class CudaDriver:
    """What the CUDA driver (libcuda) says: ``error`` is empty when it loaded and initialized."""

    error: str = ""
    version: str = ""
    devices: tuple[str, ...] = ()


@functools.lru_cache(maxsize=None)
def cuda_driver() -> CudaDriver:
    """Load the CUDA driver library with ctypes and list its GPUs (no pycuda needed)."""
    lib = None
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return CudaDriver(error="no CUDA driver found (libcuda could not be loaded)")
    try:
        status = lib.cuInit(0)
        if status != 0:
            return CudaDriver(error=f"the CUDA driver found no usable GPU (cuInit error {status})")
        version, count = ctypes.c_int(0), ctypes.c_int(0)
        lib.cuDriverGetVersion(ctypes.byref(version))
        lib.cuDeviceGetCount(ctypes.byref(count))
        devices = []
        for ordinal in range(count.value):
            device, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
            lib.cuDeviceGet(ctypes.byref(device), ordinal)
            lib.cuDeviceGetName(name, 256, device)
            devices.append(name.value.decode(errors="replace"))
    except (AttributeError, OSError) as exc:
        return CudaDriver(error=f"the CUDA driver could not be queried ({exc})")
    text = f"{version.value // 1000}.{version.value % 1000 // 10}" if version.value else ""
    if not devices:
        return CudaDriver(error="the CUDA driver reports no GPU", version=text)
    return CudaDriver(version=text, devices=tuple(devices))


@dataclass(frozen=True)
class OpenCLDevices:
    """OpenCL devices that can build a kernel, as ``"platform: device (type)"`` lines, or why
    there are none; ``unusable`` names the devices that are there but fail to build one."""

    devices: tuple[str, ...] = ()
    error: str = ""
    unusable: tuple[str, ...] = ()


#: A kernel every OpenCL device must build: the probe that a device's compiler works on this host.
_PROBE_KERNEL = "__kernel void cortex_probe(__global float *x) { x[get_global_id(0)] *= 2.0f; }"


def _build_problem(cl, device) -> str:
    """Why ``device`` cannot build :data:`_PROBE_KERNEL` ("" when it can). A driver may list a
    device whose compiler fails on this host, e.g. a PoCL whose LLVM is older than the CPU: it
    names the CPU ``generic`` and then rejects that name, so every build fails."""
    try:
        cl.Program(cl.Context([device]), _PROBE_KERNEL).build()
        return ""
    except Exception as exc:  # pyopencl's build and context errors
        log = str(exc)
        lines = [ln.strip() for ln in log.splitlines() if "error" in ln.lower() and ln.strip()]
        problem = next((ln for ln in lines if not ln.lower().startswith("clbuildprogram")), "")
        problem = problem or (log.strip().splitlines() or [type(exc).__name__])[0]
        if "unknown target cpu" in problem.lower():
            problem += " (the driver's compiler does not know this CPU: it needs a build on a newer LLVM)"
        return problem


@functools.lru_cache(maxsize=None)
def opencl_devices() -> OpenCLDevices:
    """Every OpenCL device pyopencl can see that builds a probe kernel (imports pyopencl and
    builds one tiny program per device, once per process; guarded)."""
    if importlib.util.find_spec("pyopencl") is None:
        return OpenCLDevices(error="pyopencl is not installed")
    try:
        import pyopencl as cl

        devices, unusable = [], []
        for plat in cl.get_platforms():
            for dev in plat.get_devices():
                kind = "/".join(
                    word for word in ("CPU", "GPU", "ACCELERATOR")
                    if dev.type & getattr(cl.device_type, word)
                ) or "other"
                line = f"{plat.name.strip()}: {dev.name.strip()} ({kind})"
                problem = _build_problem(cl, dev)
                if problem:
                    unusable.append(f"{line} cannot build a kernel: {problem}")
                else:
                    devices.append(line)
    except Exception as exc:  # pyopencl raises its own errors, e.g. when there is no platform
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return OpenCLDevices(error=f"no OpenCL platform found ({message})")
    if not devices:
        error = "; ".join(unusable) if unusable else "no OpenCL device found"
        return OpenCLDevices(error=error, unusable=tuple(unusable))
    return OpenCLDevices(devices=tuple(devices), unusable=tuple(unusable))


def summary(probe_devices: bool = True) -> dict[str, str]:
    """``{label: value}`` for ``cortex info``. ``probe_devices=False`` skips pyopencl/libcuda."""
    result = {
        "platform": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "CPU": f"{cpu_name()} ({cpu_count()} usable CPUs)",
        "SIMD": " ".join(simd_features()) or "none reported",
        "nvcc": f"{nvcc_version() or 'unknown version'} at {find_nvcc()}" if find_nvcc()
        else "not found",
    }
    if probe_devices:
        cl_devices = opencl_devices()
        result["OpenCL devices"] = "; ".join(cl_devices.devices + cl_devices.unusable) or cl_devices.error
        driver = cuda_driver()
        result["GPU"] = (
            f"{', '.join(driver.devices)} (CUDA driver {driver.version})" if driver.devices
            else driver.error
        )
    return result
