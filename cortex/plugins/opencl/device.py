"""OpenCL device selection and the :class:`Capabilities` a device reports.

Pipeline position: the first thing the ``opencl`` backend does (``create_backend``): pick a
device from the target's ``device`` option (or ``PYOPENCL_CTX`` when the option is empty),
create one context and one in-order queue for it, and describe the device to the scheduler.

Device selection, in order:

* ``device='P:D'`` — platform index P, device index D (as ``clinfo -l`` numbers them);
* ``device='cpu' | 'gpu' | 'accelerator'`` — the first device of that type;
* ``device='name:TEXT'`` — the first device whose "platform: device" name contains TEXT
  (case-insensitive);
* ``device=''`` — ``PYOPENCL_CTX`` when it is set (pyopencl's own convention, e.g. ``0:1``),
  otherwise the first device that builds a kernel (the probe of
  :func:`cortex.core.plugin.hostinfo.opencl_devices`: a listed device whose compiler cannot work
  on this host is passed over), else the first.

Errors are :class:`OpenCLDeviceError` (a ``TargetNotRunnableError``) with the list of devices
that do exist.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

from cortex.core.errors import TargetNotRunnableError
from cortex.core.plugin.capabilities import Capabilities
from cortex.core.plugin.llvm_cpus import CPU_FEATURES, cpu_vector_bits

DEVICE_FIX = (
    "install your device's OpenCL driver (ICD), or `pip install pocl-binary-distribution` "
    "for a CPU device"
)


class OpenCLDeviceError(TargetNotRunnableError):
    """No OpenCL platform, or no device matches the ``device`` option / ``PYOPENCL_CTX``."""

    def __init__(self, reason: str, fix: str = DEVICE_FIX):
        super().__init__("opencl", reason, fix)


@dataclass(frozen=True)
class DeviceInfo:
    """The facts about the chosen device that code generation and launches depend on."""

    platform: str
    name: str
    kind: str  # "CPU", "GPU", "ACCELERATOR" or "other"
    compute_units: int
    max_work_group_size: int
    local_mem_bytes: int
    local_mem_is_global: bool  # CPU devices emulate __local in ordinary memory
    max_alloc_bytes: int
    global_mem_bytes: int
    base_align_bytes: int  # sub-buffer origins must be multiples of this
    cache_bytes: int
    #: float32 lanes of the device's vectors: its native vector width, no wider than the CPU
    #: that PoCL compiles for (:func:`pocl_compile_cpu`) where that is a known LLVM CPU
    native_float_lanes: int
    fp64: bool
    driver: str
    #: the driver keeps its own cache of builds across processes (PoCL's kernel cache, unless
    #: ``POCL_KERNEL_CACHE=0``): a program built again from source is a cache hit there, while
    #: asking PoCL for a program binary compiles every kernel once more (see compiler.py)
    driver_caches_builds: bool = False
    #: the LLVM CPU PoCL compiles kernels for ("" elsewhere, or when its version string names none)
    compile_cpu: str = ""

    @property
    def label(self) -> str:
        return f"{self.platform}: {self.name} ({self.kind})"


def _kind(cl: Any, device: Any) -> str:
    words = [w for w in ("CPU", "GPU", "ACCELERATOR") if device.type & getattr(cl.device_type, w)]
    return "/".join(words) or "other"


def _platforms(cl: Any) -> list[Any]:
    try:
        platforms = cl.get_platforms()
    except Exception as exc:  # pyopencl raises LogicError/RuntimeError without an ICD
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OpenCLDeviceError(f"no OpenCL platform found ({text})") from None
    if not platforms:
        raise OpenCLDeviceError("no OpenCL platform found")
    return platforms


def list_devices() -> list[tuple[str, Any]]:
    """``[("P:D platform: device (TYPE)", device), ...]`` for every device pyopencl sees."""
    import pyopencl as cl

    out = []
    for p, plat in enumerate(_platforms(cl)):
        try:
            devices = plat.get_devices()
        except Exception:  # a platform without devices raises DEVICE_NOT_FOUND
            devices = []
        for d, dev in enumerate(devices):
            out.append((f"{p}:{d} {plat.name.strip()}: {dev.name.strip()} ({_kind(cl, dev)})", dev))
    if not out:
        raise OpenCLDeviceError("no OpenCL device found on any platform")
    return out


def _builds(label: str) -> bool:
    """Whether the device ``label`` (:func:`list_devices`) built the probe kernel when
    :func:`cortex.core.plugin.hostinfo.opencl_devices` listed it (once per process)."""
    from cortex.core.plugin.hostinfo import opencl_devices

    return label.split(" ", 1)[-1] in opencl_devices().devices


def _known(found: list[tuple[str, Any]]) -> str:
    return "; ".join(label for label, _ in found)


def _by_index(found: list[tuple[str, Any]], spec: str, source: str) -> Any:
    for label, dev in found:
        if label.split(" ", 1)[0] == spec:
            return dev
    raise OpenCLDeviceError(f"{source} asks for OpenCL device {spec!r}, which does not exist; "
                            f"devices here: {_known(found)}", "pick one of those")


def select_device(spec: str) -> Any:
    """The ``pyopencl.Device`` that ``spec`` (the ``device`` option) names; see the module doc."""
    import pyopencl as cl

    found = list_devices()
    spec = spec.strip()
    if not spec:
        env = os.environ.get("PYOPENCL_CTX", "").strip()
        if not env:
            return next((dev for label, dev in found if _builds(label)), found[0][1])
        if ":" in env and all(part.isdigit() for part in env.split(":", 1)):
            return _by_index(found, env, "PYOPENCL_CTX")
        if env.isdigit():  # pyopencl's short form: a platform index, its first device
            return _by_index(found, f"{env}:0", "PYOPENCL_CTX")
        raise OpenCLDeviceError(f"PYOPENCL_CTX={env!r} is not 'P' or 'P:D'; devices here: "
                                f"{_known(found)}", "set PYOPENCL_CTX to e.g. '0:0', or unset it")
    if spec.lower() in ("cpu", "gpu", "accelerator"):
        want = getattr(cl.device_type, spec.upper())
        for _, dev in found:
            if dev.type & want:
                return dev
        raise OpenCLDeviceError(f"no OpenCL {spec.upper()} device; devices here: {_known(found)}",
                                "choose another device option")
    if spec.lower().startswith("name:"):
        text = spec[5:].strip().lower()
        for label, dev in found:
            if text and text in label.split(" ", 1)[1].lower():
                return dev
        raise OpenCLDeviceError(f"no OpenCL device name contains {spec[5:]!r}; devices here: "
                                f"{_known(found)}", "choose another device option")
    return _by_index(found, spec, "the device option")


def describe(device: Any) -> DeviceInfo:
    import pyopencl as cl

    try:
        fp64 = bool(device.double_fp_config)
    except Exception:
        fp64 = False
    try:
        lanes = int(device.native_vector_width_float)
    except Exception:
        lanes = 1
    compile_cpu = pocl_compile_cpu(device.version) if device.platform.name.strip() == POCL_PLATFORM else ""
    if bits := cpu_vector_bits(compile_cpu):
        lanes = min(lanes, bits // 32)
    return DeviceInfo(
        platform=device.platform.name.strip(),
        name=device.name.strip(),
        kind=_kind(cl, device),
        compute_units=int(device.max_compute_units),
        max_work_group_size=int(device.max_work_group_size),
        local_mem_bytes=int(device.local_mem_size),
        local_mem_is_global=device.local_mem_type != cl.device_local_mem_type.LOCAL,
        max_alloc_bytes=int(device.max_mem_alloc_size),
        global_mem_bytes=int(device.global_mem_size),
        base_align_bytes=max(16, int(device.mem_base_addr_align) // 8),
        cache_bytes=int(getattr(device, "global_mem_cache_size", 0) or 0),
        native_float_lanes=max(1, lanes),
        fp64=fp64,
        driver=f"{device.platform.version.strip()}; driver {device.driver_version.strip()}",
        driver_caches_builds=_driver_caches_builds(device.platform.name),
        compile_cpu=compile_cpu,
    )


def pocl_compile_cpu(version: str) -> str:
    """The LLVM CPU that PoCL compiles kernels for, from its device version string (``OpenCL 3.0
    PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3``: the name after the target triple), or
    "" where it names no CPU of :data:`cortex.core.plugin.llvm_cpus.CPU_FEATURES`.

    It is not always the host's own: PoCL 3.0's LLVM names an AVX-512 Zen 4 ``znver3``, compiles
    the kernels for that CPU (no 512-bit registers) and links the built-in library it picked by
    the host's features (AVX-512). A kernel that passes 16-float vectors to a built-in
    (``exp(float16)``) then calls it with another ABI than the library's and crashed the
    process; vectors no wider than the compile CPU's registers (8 floats there) pass alike."""
    text = version.rsplit("HSTR:", 1)[-1].strip() if "HSTR:" in version else ""
    names = sorted(CPU_FEATURES, key=len, reverse=True)  # "x86-64-v3" before "x86-64"
    return next((n for n in names if text.endswith("-" + n)), "")


#: The platform name PoCL reports.
POCL_PLATFORM = "Portable Computing Language"


def _driver_caches_builds(platform: str) -> bool:
    """PoCL keeps every build in its kernel cache (``POCL_KERNEL_CACHE``, on by default)."""
    cache = os.environ.get("POCL_KERNEL_CACHE", "1").strip().lower()
    return platform.strip() == POCL_PLATFORM and cache not in ("0", "false", "no", "off")


#: The schedule knobs whose best value depends on this backend on a CPU device (PoCL), measured
#: on the zoo (docs/opencl.md): weights packed by blocks of rows, threads (work-groups) over a
#: level's hidden units, groups of 4 nodes jammed, node by node, and loops that are not jammed
#: run 8 nodes per work-item (x 4 hidden tiles when the hidden loops are parallel). The hidden
#: loops' vector width is the default rule's (the SIMD lanes): the renderer writes those loops
#: as vector statements, sums per lane included (MV-RNN b1 10.4 -> 2.1 ms against scalar loops).
#: ``kernel_form="auto"`` runs the one-work-group kernel up to 1024 nodes (measured on 2 compute
#: units: at batch 10, ~600 nodes, it beat a launch per level on every zoo model, 0.66-0.93x at
#: the first quartile, since PoCL's launches cost more than the second core gains there).
#: A matrix nest's column loop is merged into one 64-lane vector (``wide_lanes``, as on llvm: one
#: weight broadcast feeds four SIMD registers; MV-RNN b1 2.23 -> 1.37 ms, b10 29.2 -> 17.4).
#: Its rows are jammed by the default rule (``row_jam=4``): the renderer writes a jammed group's
#: 64-lane fused loop as vector statements (a broadcast weight and four row vectors feed 16
#: FMAs), MV-RNN 0.70x at b1 and 0.68x at b10 against one row at a time (same process).
CPU_PREFERRED = (("weight_layout", "packed"), ("interchange", True), ("node_jam", 4), ("jam_interleave", False),
                 ("node_chunk", 8), ("hidden_tiles", 4), ("single_group_nodes", 1024), ("wide_lanes", 64))


def capabilities(info: DeviceInfo) -> Capabilities:
    """What the scheduler may assume of this device.

    A GPU/accelerator is a grid target: work-groups with a work-group barrier, no grid-wide
    barrier (OpenCL has none), so one call is a host loop of launches (``single_call=False``).

    A CPU device is described as the CPU it is (``has_grid=False``): its work-groups are CPU
    threads and its compiler vectorizes loops itself, so the scheduler picks CPU knobs and the
    backend maps the ``parallel`` loops onto work-groups and work-items
    (``forms.to_work_groups``). Its SIMD width is the device's native float vector width, which
    sizes the hidden loops' vectors (``vector_width``: the renderer's vector statements), the
    node jam's hidden blocks (``hidden_jam``) and packed weight blocks; the backend's
    measured preferences are :data:`CPU_PREFERRED`.

    Either way the backend also builds every level into one single-work-group kernel and runs it
    for small inputs (``single_group_form``: ``kernel_form="auto"`` with the threshold
    ``single_group_nodes``; ``forms.single_group_kernel``)."""
    if info.kind == "CPU":
        lanes = max(1, info.native_float_lanes)
        return Capabilities(
            has_grid=False,
            grid_barrier=False,
            group_barrier=True,
            max_threads_per_group=info.max_work_group_size,
            max_groups=info.compute_units,
            num_cores=info.compute_units,
            shared_memory_bytes=0,
            cache_bytes_per_core=info.cache_bytes // max(1, info.compute_units),
            vector_bits=32 * lanes if lanes > 1 else 0,
            vector_registers=32 if lanes >= 16 else 16,
            supports_fp64=info.fp64,
            dialect="opencl",
            single_call=False,
            single_group_form=True,
            preferred=CPU_PREFERRED,
        )
    return Capabilities(
        has_grid=True,
        grid_barrier=False,
        group_barrier=True,
        max_threads_per_group=info.max_work_group_size,
        max_groups=info.compute_units * 8,
        num_cores=info.compute_units,
        shared_memory_bytes=info.local_mem_bytes,
        cache_bytes_per_core=0,
        vector_bits=0,
        supports_fp64=info.fp64,
        dialect="opencl",
        single_call=False,
        single_group_form=True,
    )


@dataclass
class Device:
    """One chosen device with its context and in-order command queue."""

    info: DeviceInfo
    context: Any
    queue: Any
    device: Any


@functools.lru_cache(maxsize=None)
def open_device(spec: str, env: str | None = None) -> Device:
    """Context and queue for the device ``spec`` names (cached per spec and ``PYOPENCL_CTX``).

    ``env`` is only part of the cache key; callers pass ``os.environ.get("PYOPENCL_CTX")``."""
    import pyopencl as cl

    dev = select_device(spec)
    try:
        context = cl.Context([dev])
        queue = cl.CommandQueue(context, dev)
    except Exception as exc:
        raise OpenCLDeviceError(f"could not open OpenCL device {dev.name.strip()!r}: {exc}") from None
    return Device(describe(dev), context, queue, dev)


def device_for(spec: str) -> Device:
    return open_device(spec, os.environ.get("PYOPENCL_CTX"))
