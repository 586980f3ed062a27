"""The ``cuda`` runtime: device buffers, module loading and the program's host steps.

Pipeline position: the last stage of the ``cuda`` backend. ``cortex.core.runtime.executable`` calls
``upload``/``allocate``, then ``launch(cubin, args)`` with every buffer of the program (in
``program.buffers`` order) and every size (``program.sizes`` order), then ``synchronize`` and
``download``. ``launch`` performs the program's host steps:

* ``kernel_form='single'`` — one cooperative launch of the persistent kernel, which runs every
  level with a grid barrier between them; its grid is at most the co-resident blocks;
* ``kernel_form='per_level'`` — the host loop launches one kernel per level (the fallback).

Uploads are deferred: each launch first copies every pending upload in one packed transfer from
a page-locked staging buffer (one copy per call instead of one per index buffer). Grid sizes come
from :mod:`launch` (the widest level's node count where the host can see it, via the host copies
the uploads keep). :class:`CompiledProgram`
offers the interpreter's calling convention, ``run(buffers, sizes) -> dict`` of host arrays,
for tests and tools. The driver is created on first use, so the backend (and code generation)
exists on machines without a GPU; any device operation there raises
``TargetNotRunnableError`` with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from cortex.core import loopir as ir
from cortex.core.plugin.backend import Runtime, check_index_values
from cortex.core.errors import TargetNotRunnableError
from cortex.core.loopir.interpret import eval_shape, np_dtype
from cortex.plugins.cuda.compiler import Cubin
from cortex.plugins.cuda.driver import Driver
from cortex.plugins.cuda.launch import KernelPlan, LaunchConfig, host_launches


#: Alignment of each buffer inside a packed upload (CUDA allocations are 256-byte aligned).
ALIGN = 256


@dataclass(eq=False)
class DeviceArray:
    """A device buffer: its shape and dtype, the allocation that owns its memory and its device
    address. An upload stays *pending* (``address`` None, data in ``host``) until the next
    launch, which copies every pending buffer in one transfer (see :meth:`CudaRuntime.flush`);
    ``host`` is also what sizes grids (index buffers), never read back as results."""

    shape: tuple[int, ...]
    dtype: np.dtype
    owner: Any = None
    address: int | None = None
    host: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def __int__(self) -> int:
        if self.address is None:
            raise RuntimeError("internal error: a pending upload was used before CudaRuntime.flush")
        return self.address


class _LoadedProgram:
    """A cubin loaded on the device: its functions and launch plans."""

    def __init__(self, driver: Driver, cubin: Cubin, threads_per_block: int) -> None:
        if cubin.program is None:
            raise TypeError("this cubin carries no LoopProgram; compile what the cuda renderer returns")
        self.program = cubin.program
        self.module = driver.load_module(cubin.image)
        self.functions: dict[str, Any] = {}
        self.plans: dict[str, KernelPlan] = {}
        self.occupancy: dict[tuple[str, int, int], int] = {}
        for k in self.program.kernels:
            plan = KernelPlan(self.program, k.name, threads_per_block)
            fn = driver.function(self.module, plan.symbol)
            if plan.shared_bytes > 48 * 1024:
                if plan.shared_bytes > driver.info.shared_per_block_optin:
                    raise TargetNotRunnableError(
                        "cuda", f"kernel {plan.symbol} needs {plan.shared_bytes} bytes of shared memory per block; "
                        f"{driver.info.name} allows {driver.info.shared_per_block_optin}",
                        "compile with persistent=False or a smaller hidden size")
                driver.allow_dynamic_shared(fn, plan.shared_bytes)
            self.functions[k.name] = fn
            self.plans[k.name] = plan


class CudaRuntime(Runtime):
    """Buffers and launches on one CUDA device. ``driver_factory`` makes the :class:`Driver`
    on first use (default: :class:`~cortex.plugins.cuda.driver.PyCudaDriver`); ``why_not``
    says why there is none here (None when the target is runnable)."""

    def __init__(self, device: int = 0, threads_per_block: int = 256,
                 driver_factory: Callable[[], Driver] | None = None,
                 why_not: Callable[[], tuple[str, str] | None] | None = None) -> None:
        self.device = device
        self.threads_per_block = threads_per_block
        self._factory = driver_factory
        self._why_not = why_not
        self._driver: Driver | None = None
        self._loaded: dict[int, tuple[Cubin, _LoadedProgram]] = {}
        self._staging: np.ndarray | None = None
        self.last_launches: list[LaunchConfig] = []  # what the last launch() did (for tests, tools)

    # ------------------------------------------------------------------ driver
    @property
    def driver(self) -> Driver:
        if self._driver is None:
            if self._why_not is not None:
                problem = self._why_not()
                if problem is not None:
                    raise TargetNotRunnableError("cuda", *problem)
            if self._factory is not None:
                self._driver = self._factory()
            else:
                from cortex.plugins.cuda.driver import PyCudaDriver

                self._driver = PyCudaDriver(self.device)
        return self._driver

    def loaded(self, cubin: Cubin) -> _LoadedProgram:
        entry = self._loaded.get(id(cubin))
        if entry is None or entry[0] is not cubin:
            entry = (cubin, _LoadedProgram(self.driver, cubin, self.threads_per_block))
            self._loaded[id(cubin)] = entry
        return entry[1]

    # ------------------------------------------------------------------ Runtime
    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray:
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        owner = self.driver.alloc(nbytes)
        return DeviceArray(shape, dtype, owner, int(owner))

    def upload(self, array: np.ndarray) -> DeviceArray:
        """A device buffer holding a copy of ``array``; the copy reaches the device with the
        next launch's single packed transfer (or at :meth:`flush`)."""
        _ = self.driver  # fail here, with the reason, where the target cannot run
        array = np.array(array, copy=True, order="C")
        return DeviceArray(array.shape, array.dtype, host=array)

    def flush(self, buffers: Iterable[DeviceArray]) -> None:
        """Copy every pending upload among ``buffers`` to the device in one transfer: packed
        (256-byte aligned) into one page-locked staging buffer and one device allocation."""
        pending, seen = [], set()
        for b in buffers:
            if isinstance(b, DeviceArray) and b.address is None and id(b) not in seen:
                pending.append(b)
                seen.add(id(b))
        if not pending:
            return
        offsets, total = [], 0
        for b in pending:
            offsets.append(total)
            total += (b.nbytes + ALIGN - 1) // ALIGN * ALIGN
        if self._staging is None or self._staging.nbytes < total:
            self._staging = self.driver.host_buffer(max(total, 2 * (self._staging.nbytes if self._staging is not None else 0)))
        staging = self._staging
        for b, off in zip(pending, offsets):
            staging[off:off + b.nbytes] = b.host.reshape(-1).view(np.uint8)
        owner = self.driver.alloc(total)
        self.driver.upload(int(owner), staging[:total])
        for b, off in zip(pending, offsets):
            b.owner, b.address = owner, int(owner) + off

    def download(self, buffer: DeviceArray, out: np.ndarray) -> np.ndarray:
        if out.shape != buffer.shape or out.dtype != buffer.dtype or not out.flags.c_contiguous:
            raise ValueError(f"download into {out.dtype}{list(out.shape)} (contiguous: {out.flags.c_contiguous}) "
                             f"from a device buffer {buffer.dtype}{list(buffer.shape)}")
        self.flush([buffer])
        self.driver.download(out, int(buffer))
        return out

    def launch(self, artifact: Any, args: tuple[Any, ...], **launch_config: Any) -> None:
        if not isinstance(artifact, Cubin):
            raise TypeError(f"the cuda runtime launches Cubins from the cuda compiler, not {type(artifact).__name__}")
        if launch_config:
            raise TypeError(f"the cuda runtime plans its own launches; got launch configuration {launch_config}")
        loaded = self.loaded(artifact)
        program = loaded.program
        nb, ns = len(program.buffers), len(program.sizes)
        if len(args) != nb + ns:
            raise TypeError(f"program {program.name} takes {nb} buffers and {ns} sizes; got {len(args)} arguments")
        buffers = args[:nb]
        for b, a in zip(program.buffers, buffers):
            if not isinstance(a, DeviceArray):
                raise TypeError(f"buffer {b.name!r}: expected a device buffer from upload/allocate, "
                                f"got {type(a).__name__}")
        sizes = {s.name: int(v) for s, v in zip(program.sizes, args[nb:])}
        hosts = {b.name: a.host for b, a in zip(program.buffers, buffers) if b.role == "index" and a.host is not None}
        self.flush(buffers)
        pointer_args = [("ptr", int(a)) for a in buffers] + [("i32", sizes[s.name]) for s in program.sizes]
        driver = self.driver
        launches: list[LaunchConfig] = []
        for kernel, kargs in host_launches(program, sizes):
            plan = loaded.plans[kernel]
            fn = loaded.functions[kernel]

            def resident(block: int, shared: int, fn: Any = fn, kernel: str = kernel) -> int:
                key = (kernel, block, shared)
                if key not in loaded.occupancy:
                    loaded.occupancy[key] = driver.resident_blocks(fn, block, shared)
                return loaded.occupancy[key]

            cfg = plan.config(sizes, kargs, hosts, resident, driver.info.sm_count)
            if cfg.cooperative and not driver.info.cooperative_launch:
                raise TargetNotRunnableError("cuda", f"{driver.info.name} does not support cooperative launches, "
                                             "which the persistent kernel's grid barrier needs",
                                             "compile with schedule={'kernel_form': 'per_level'}")
            driver.launch(fn, cfg.grid, cfg.block, cfg.shared_bytes, pointer_args + [("i32", a) for a in kargs],
                          cfg.cooperative)
            launches.append(cfg)
        self.last_launches = launches

    def synchronize(self) -> None:
        self.driver.synchronize()

    # ------------------------------------------------------------------ convenience
    def program(self, cubin: Cubin) -> "CompiledProgram":
        return CompiledProgram(self, cubin)


class CompiledProgram:
    """A compiled LoopProgram with the interpreter's calling convention:
    ``run(buffers, sizes)`` takes host arrays (inputs, params and index buffers required;
    outputs/temps optional) and returns every buffer as a host array, like
    ``cortex.core.loopir.interpret.run``. :meth:`keep_on_device` pins arrays (the params) on the
    device so later calls need not pass them again."""

    def __init__(self, runtime: CudaRuntime, cubin: Cubin) -> None:
        if cubin.program is None:
            raise TypeError("this cubin carries no LoopProgram; compile what the cuda renderer returns")
        self.runtime = runtime
        self.cubin = cubin
        self.program: ir.Program = cubin.program
        self.resident: dict[str, DeviceArray] = {}

    def keep_on_device(self, arrays: Mapping[str, np.ndarray]) -> None:
        for name, a in arrays.items():
            b = self.program.buffer(name)
            if not b.read_only:
                raise ValueError(f"only read-only buffers can stay on the device; {name!r} is {b.role}")
            self.resident[name] = self.runtime.upload(np.asarray(a, dtype=np_dtype(b.dtype)))

    def run(self, buffers: Mapping[str, np.ndarray], sizes: Mapping[str, int],
            fetch: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """Run the program; returns the given arrays plus the downloaded output and temp
        buffers (only those named in ``fetch`` when given)."""
        p = self.program
        missing = [s.name for s in p.sizes if s.name not in sizes]
        if missing:
            raise ValueError(f"program {p.name}: sizes {missing} not given")
        check_index_values(p, buffers, sizes)
        device: dict[str, DeviceArray] = {}
        shapes: dict[str, tuple[int, ...]] = {}
        for b in p.buffers:
            shape = eval_shape(b.shape, sizes)
            shapes[b.name] = shape
            dt = np.dtype(np_dtype(b.dtype))
            a = buffers.get(b.name)
            if a is None:
                if b.name in self.resident:
                    device[b.name] = self.resident[b.name]
                    continue
                if b.read_only:
                    raise ValueError(f"program {p.name}: buffer {b.name!r} ({b.role}) not given")
                device[b.name] = self.runtime.allocate(shape, dt)
                continue
            if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dt:
                got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
                raise ValueError(f"buffer {b.name!r}: expected {dt}{list(shape)}, got {got}")
            device[b.name] = self.runtime.upload(a)
        args = tuple(device[b.name] for b in p.buffers) + tuple(int(sizes[s.name]) for s in p.sizes)
        self.runtime.launch(self.cubin, args)
        self.runtime.synchronize()
        wanted = set(fetch) if fetch is not None else {b.name for b in p.buffers if not b.read_only}
        out = dict(buffers)
        for b in p.buffers:
            if b.name in wanted:
                out[b.name] = self.runtime.download(device[b.name], np.empty(shapes[b.name], np_dtype(b.dtype)))
        return out
