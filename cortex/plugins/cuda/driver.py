"""The CUDA driver, as the ``cuda`` runtime uses it: a small :class:`Driver` interface and its
PyCUDA implementation.

Pipeline position: under ``runtime.py``. The runtime's host logic (buffers, host steps, launch
planning) talks only to :class:`Driver`, so tests can run it with a fake driver on a machine
without a GPU; :class:`PyCudaDriver` is the real one and is imported only when a GPU is used.

PyCUDA owns the context (the device's primary context, shared with other libraries in the same
process such as PyTorch), device memory (allocations from a memory pool) and the page-locked
staging buffer for uploads.
PyCUDA has no cooperative launch and no occupancy query, and does not expose the driver handles
of its modules and functions, so modules are loaded and kernels launched through the driver API
directly (``libcuda`` by ctypes, :class:`LibCuda`, which also does the copies, by address), in
PyCUDA's context: the persistent kernel's
grid barrier needs ``cuLaunchCooperativeKernel``, and its grid size needs
``cuOccupancyMaxActiveBlocksPerMultiprocessor``.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from cortex.core.errors import CortexError
from cortex.plugins.cuda.device import DeviceInfo


class CudaError(CortexError, RuntimeError):
    """A CUDA driver call failed (the message names the call and the driver's error)."""


class Driver(ABC):
    """What the runtime needs from a CUDA driver. ``info`` describes the device."""

    info: DeviceInfo

    @abstractmethod
    def load_module(self, image: bytes) -> Any:
        """Load a cubin; returns a module handle."""

    @abstractmethod
    def function(self, module: Any, symbol: str) -> Any:
        """The kernel ``symbol`` of ``module``."""

    @abstractmethod
    def resident_blocks(self, function: Any, block: int, shared_bytes: int) -> int:
        """Blocks of ``function`` that fit on one SM at once (occupancy)."""

    @abstractmethod
    def allow_dynamic_shared(self, function: Any, nbytes: int) -> None:
        """Let ``function`` take ``nbytes`` of dynamic shared memory (above the 48 KiB default)."""

    @abstractmethod
    def alloc(self, nbytes: int) -> Any:
        """Device memory; ``int(result)`` is its device address; freed when dropped."""

    @abstractmethod
    def host_buffer(self, nbytes: int) -> np.ndarray:
        """A uint8 host staging buffer (page-locked where the driver can), reused for uploads."""

    @abstractmethod
    def upload(self, dst: int, array: np.ndarray) -> None:
        """Copy contiguous host ``array`` to device address ``dst`` (synchronously)."""

    @abstractmethod
    def download(self, out: np.ndarray, src: int) -> None:
        """Copy from device address ``src`` into contiguous host ``out`` (synchronously)."""

    @abstractmethod
    def launch(self, function: Any, grid: int, block: int, shared_bytes: int,
               args: Sequence[tuple[str, Any]], cooperative: bool) -> None:
        """Launch on the default stream. ``args`` are ``("ptr", address)`` or ``("i32", int)``."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for all launched work; raise :class:`CudaError` if any of it failed."""


# --------------------------------------------------------------------------- libcuda by ctypes

_ATTR = {  # CUdevice_attribute values (cuda.h)
    "max_threads_per_block": 1, "shared_per_block": 8, "sm_count": 16, "l2_bytes": 38,
    "max_threads_per_sm": 39, "cc_major": 75, "cc_minor": 76, "shared_per_sm": 81,
    "cooperative_launch": 95, "shared_per_block_optin": 97,
}
_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class LibCuda:
    """The few driver API entry points PyCUDA does not offer, called with ctypes. ``path``
    names another library with the same entry points (the tests use a C stand-in)."""

    def __init__(self, path: str | None = None) -> None:
        lib = None
        for name in ((path,) if path else ("libcuda.so.1", "libcuda.so", "nvcuda.dll")):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise CudaError("no CUDA driver found (libcuda could not be loaded)")
        self.lib = lib
        vp, i, u, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
        sig = {
            "cuModuleLoadData": [ctypes.POINTER(vp), ctypes.c_char_p],
            "cuModuleGetFunction": [ctypes.POINTER(vp), vp, ctypes.c_char_p],
            "cuModuleUnload": [vp],
            "cuOccupancyMaxActiveBlocksPerMultiprocessor": [ctypes.POINTER(i), vp, i, sz],
            "cuFuncSetAttribute": [vp, i, i],
            "cuDeviceGet": [ctypes.POINTER(i), i],
            "cuDeviceGetAttribute": [ctypes.POINTER(i), i, i],
            "cuDeviceGetName": [ctypes.c_char_p, i, i],
            "cuLaunchKernel": [vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)],
            "cuLaunchCooperativeKernel": [vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp)],
            "cuCtxSynchronize": [],
            "cuMemcpyHtoD_v2": [ctypes.c_uint64, vp, sz],
            "cuMemcpyDtoH_v2": [vp, ctypes.c_uint64, sz],
            "cuGetErrorName": [i, ctypes.POINTER(ctypes.c_char_p)],
            "cuGetErrorString": [i, ctypes.POINTER(ctypes.c_char_p)],
        }
        for fn, argtypes in sig.items():
            f = getattr(lib, fn)
            f.argtypes = argtypes
            f.restype = ctypes.c_int
        self.check(lib.cuInit(0), "cuInit")

    def check(self, status: int, what: str) -> None:
        if status == 0:
            return
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.cuGetErrorName(status, ctypes.byref(name))
        self.lib.cuGetErrorString(status, ctypes.byref(text))
        raise CudaError(f"{what} failed: {(name.value or b'?').decode()} ({status}): "
                        f"{(text.value or b'').decode()}")

    def device_info(self, ordinal: int) -> DeviceInfo:
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), ordinal), f"cuDeviceGet({ordinal})")
        values = {}
        for key, attr in _ATTR.items():
            v = ctypes.c_int()
            self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(v), attr, dev), f"cuDeviceGetAttribute({key})")
            values[key] = v.value
        name = ctypes.create_string_buffer(256)
        self.check(self.lib.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
        return DeviceInfo(
            name=name.value.decode(errors="replace"),
            compute_capability=(values["cc_major"], values["cc_minor"]),
            sm_count=values["sm_count"], max_threads_per_block=values["max_threads_per_block"],
            max_threads_per_sm=values["max_threads_per_sm"], shared_per_block=values["shared_per_block"],
            shared_per_block_optin=values["shared_per_block_optin"], shared_per_sm=values["shared_per_sm"],
            l2_bytes=values["l2_bytes"], cooperative_launch=bool(values["cooperative_launch"]),
        )

    def load_module(self, image: bytes) -> ctypes.c_void_p:
        module = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        return module

    def function(self, module: ctypes.c_void_p, symbol: str) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), module, symbol.encode()),
                   f"cuModuleGetFunction({symbol})")
        return fn

    def resident_blocks(self, fn: ctypes.c_void_p, block: int, shared_bytes: int) -> int:
        n = ctypes.c_int()
        self.check(self.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), fn, block, shared_bytes),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return n.value

    def allow_dynamic_shared(self, fn: ctypes.c_void_p, nbytes: int) -> None:
        self.check(self.lib.cuFuncSetAttribute(fn, _FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
                   "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")

    def launch(self, fn: ctypes.c_void_p, grid: int, block: int, shared_bytes: int,
               args: Sequence[tuple[str, Any]], cooperative: bool) -> None:
        values = [ctypes.c_uint64(int(v)) if kind == "ptr" else ctypes.c_int32(int(v)) for kind, v in args]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        if cooperative:
            status = self.lib.cuLaunchCooperativeKernel(fn, grid, 1, 1, block, 1, 1, shared_bytes, None, params)
            self.check(status, f"cuLaunchCooperativeKernel(grid={grid}, block={block}, shared={shared_bytes})")
        else:
            status = self.lib.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, shared_bytes, None, params, None)
            self.check(status, f"cuLaunchKernel(grid={grid}, block={block}, shared={shared_bytes})")

    def synchronize(self) -> None:
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")

    def upload(self, dst: int, array: np.ndarray) -> None:
        self.check(self.lib.cuMemcpyHtoD_v2(dst, array.ctypes.data, array.nbytes), f"cuMemcpyHtoD({array.nbytes} bytes)")

    def download(self, out: np.ndarray, src: int) -> None:
        self.check(self.lib.cuMemcpyDtoH_v2(out.ctypes.data, src, out.nbytes), f"cuMemcpyDtoH({out.nbytes} bytes)")


class PyCudaDriver(Driver):
    """The real driver: PyCUDA for the context and memory, :class:`LibCuda` for the rest."""

    def __init__(self, ordinal: int = 0) -> None:
        import pycuda.driver as cuda  # imported here: it needs a CUDA driver to import
        from pycuda.tools import DeviceMemoryPool

        cuda.init()
        if ordinal >= cuda.Device.count():
            raise CudaError(f"CUDA device {ordinal} does not exist; this machine has {cuda.Device.count()}")
        self.cuda = cuda
        self.device = cuda.Device(ordinal)
        self.context = self.device.retain_primary_context()
        self.context.push()
        self.libcuda = LibCuda()
        self.info = self.libcuda.device_info(ordinal)
        self.pool = DeviceMemoryPool()
        self.modules: list[Any] = []
        self._threads = {threading.get_ident()}  # threads where the context is current
        # like pycuda.autoinit: pop the context at exit, or PyCUDA reports a non-empty
        # context stack at module cleanup
        atexit.register(self.close)

    def close(self) -> None:
        """Free the pool's cached memory and pop the context this thread pushed."""
        try:
            self.pool.free_held()
            self.context.pop()
        except Exception:  # noqa: BLE001 - at exit, nothing useful can be done about it
            pass

    def _current(self) -> None:
        # launches and copies from another thread need the context made current there (once)
        if threading.get_ident() not in self._threads:
            self.context.push()
            self._threads.add(threading.get_ident())

    def load_module(self, image: bytes) -> Any:
        self._current()
        module = self.libcuda.load_module(image)
        self.modules.append(module)
        return module

    def function(self, module: Any, symbol: str) -> Any:
        return self.libcuda.function(module, symbol)

    def resident_blocks(self, function: Any, block: int, shared_bytes: int) -> int:
        return self.libcuda.resident_blocks(function, block, shared_bytes)

    def allow_dynamic_shared(self, function: Any, nbytes: int) -> None:
        self.libcuda.allow_dynamic_shared(function, nbytes)

    def alloc(self, nbytes: int) -> Any:
        self._current()
        return self.pool.allocate(max(int(nbytes), 16))

    def host_buffer(self, nbytes: int) -> np.ndarray:
        return self.cuda.pagelocked_empty(max(int(nbytes), 16), np.uint8)

    def upload(self, dst: int, array: np.ndarray) -> None:
        if array.nbytes:
            self._current()
            self.libcuda.upload(int(dst), np.ascontiguousarray(array))

    def download(self, out: np.ndarray, src: int) -> None:
        if out.nbytes:
            self._current()
            self.libcuda.download(out, int(src))

    def launch(self, function: Any, grid: int, block: int, shared_bytes: int,
               args: Sequence[tuple[str, Any]], cooperative: bool) -> None:
        self._current()
        self.libcuda.launch(function, grid, block, shared_bytes, args, cooperative)

    def synchronize(self) -> None:
        self.libcuda.synchronize()
