"""Running a built OpenCL program: buffers, one packed upload per call, launches, one read-back.

Pipeline position: the last stage of the ``opencl`` backend. :class:`CompiledProgram` is the
compiler's artifact. It is called two ways, with the same semantics as the interpreter
(``cortex.core.loopir.interpret.run``):

* ``artifact.run(buffers, sizes) -> {name: ndarray}`` with host NumPy arrays (tests, tools);
* through :class:`OpenCLRuntime`, the core's :class:`~cortex.core.plugin.backend.Runtime`:
  ``launch(artifact, args)`` with every buffer of the program (in ``program.buffers`` order)
  then every size, as ``cortex.core.runtime.executable`` calls it.

Memory (no new device allocation in the steady state):

* ``param`` buffers get their own device buffer once (the executable uploads params once);
* per-call ``index``/``input`` arrays (the linearizer's) are packed into one host staging array
  and written with ONE transfer into a device pool, each array a sub-buffer at an aligned
  offset;
* ``output`` buffers are sub-buffers of a second pool, read back with ONE transfer after the
  last launch; ``temp`` buffers live in a third pool and are never read back;
* pools belong to the artifact, are allocated on first use and grow (to the next power of two)
  only when a batch needs more.

``OpenCLRuntime.upload``/``allocate`` therefore return light host-side handles
(:class:`HostArray`, :class:`Allocation`); ``launch`` binds them to device memory. An artifact
runs one call at a time (it owns its pools); use one executable per thread.

Execution shape per call (:func:`choose_form`): the host steps (one launch per level, work-groups
over the nodes of the level and work-items over hidden units), or — for small inputs, where
per-launch overhead dominates — the single-work-group kernel from ``forms`` that runs every
level in one launch with work-group barriers between levels. A small batch of several trees,
where the program has the tree-group kernel (``forms.grouped_kernel``; the schedule's
``tree_groups`` knob, default ``Capabilities.independent_groups``), runs as "tree_groups"
instead: the call's index arrays are put in the grouped layout
(``cortex.core.linearize.groups``), the leaves run in their own launch over every compute unit,
then ONE launch of that many work-groups walks the levels, each group only its own trees; the
outputs are read back in the grouped order and put back in the caller's order on the host.
A call the one-work-group kernel would run, where the program has the shared-levels kernel
(``shared``; the schedule's ``level_groups``), runs as ONE launch of that many work-groups
that claim each level's units instead, with the counters this artifact owns (``cx_sync``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from cortex.core import loopir as ir
from cortex.core.errors import CortexError
from cortex.core.linearize.groups import TreeGroups, group_trees
from cortex.core.loopir.interpret import eval_shape, np_dtype
from cortex.core.plugin.backend import Runtime, check_index_values
from cortex.plugins.opencl import forms, shared
from cortex.plugins.opencl.device import Device
from cortex.plugins.opencl.workers import WorkerPinning

#: ``form`` values: "auto" follows the schedule (``kernel_form`` and ``single_group_nodes``,
#: recorded in ``Program.launch``); the others force one shape ("single_group": exactly one
#: work-group). Where "auto" picks the one-work-group kernel, a batch of several trees runs as
#: tree groups when the program has that kernel (``CompiledProgram.tree_groups``).
FORMS = ("auto", "per_level", "single_group")
#: Batches of at most this many nodes warm up the tree-group kernel (``warmup_nodes``).
TREE_GROUP_WARMUP_NODES = 128
#: The size threshold of a program that records none (one not made by ``cortex.compile``): the
#: schedule's default rule for ``single_group_nodes`` (``cortex.core.lowering.schedule_knobs``).
FALLBACK_NODES_PER_TWO_UNITS = 256
FALLBACK_NODES_GPU = 8


class OpenCLResourceError(CortexError, RuntimeError):
    """The device ran out of memory or resources (work-group size, local memory) for a launch."""


class OpenCLLaunchError(CortexError, RuntimeError):
    """A launch or transfer failed for a reason other than resources (message from the driver)."""


@dataclass(eq=False)
class HostArray:
    """What :meth:`OpenCLRuntime.upload` returns: a host copy, bound to device memory at launch
    (its own buffer for params, kept; a slice of the per-call pack otherwise)."""

    array: np.ndarray
    device: Any = None  # the dedicated cl.Buffer once it has one (params)


@dataclass(eq=False)
class Allocation:
    """What :meth:`OpenCLRuntime.allocate` returns: shape and dtype; bound to a slice of an
    artifact's output/temp pool at launch; ``host`` holds the read-back after the launch."""

    shape: tuple[int, ...]
    dtype: np.dtype
    host: np.ndarray | None = None
    # the caller's row order of ``host`` when the call ran in the grouped layout: row ``v`` is
    # ``host[rows[v]]`` (None: ``host`` is in the caller's order)
    rows: np.ndarray | None = None

    def rows_in_order(self) -> np.ndarray:
        """``host`` in the caller's node order (a view when it is already)."""
        assert self.host is not None
        return self.host if self.rows is None else self.host[self.rows]


#: Outputs of at least this many bytes are read by mapping the output pool (allocated with
#: ``ALLOC_HOST_PTR``) instead of copying it into the read-back array: on a CPU device the
#: map is the memory itself, so the caller's copy is the only one (PoCL, MV-RNN's matrix
#: states: 1 MiB copied in 67 us and mapped, copied and unmapped in 47 us; 10 MiB 919 us and
#: 538 us); below it the copy is cheaper than a map and an unmap (80 KiB: 12 + 3 us vs 20 us).
MAP_READ_BYTES = 256 * 1024


def _human(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def _is_resource_error(exc: Exception) -> bool:
    text = str(exc).upper()
    return any(word in text for word in (
        "OUT_OF_RESOURCES", "OUT_OF_HOST_MEMORY", "MEM_OBJECT_ALLOCATION_FAILURE",
        "INVALID_WORK_GROUP_SIZE", "INVALID_BUFFER_SIZE")) or isinstance(exc, MemoryError)


class _Pool:
    """A growable device buffer carved into aligned sub-buffers."""

    def __init__(self, device: Device, what: str, flags: int) -> None:
        self.device = device
        self.what = what
        self.flags = flags
        self.buffer: Any = None
        self.capacity = 0
        self._subs: dict[tuple[int, int], Any] = {}

    def ensure(self, nbytes: int) -> None:
        import pyopencl as cl

        if nbytes <= self.capacity:
            return
        info = self.device.info
        size = 1 << max(12, (nbytes - 1).bit_length())
        if size > info.max_alloc_bytes:
            size = nbytes
        if nbytes > info.max_alloc_bytes:
            raise OpenCLResourceError(
                f"this batch needs {_human(nbytes)} of {self.what} in one buffer, more than "
                f"the device's largest allocation ({_human(info.max_alloc_bytes)} on "
                f"{info.label}); split the batch into smaller calls")
        self.buffer = None
        self._subs.clear()
        try:
            self.buffer = cl.Buffer(self.device.context, self.flags, size)
        except Exception as exc:
            raise OpenCLResourceError(
                f"could not allocate {_human(size)} of device memory for {self.what} on "
                f"{info.label}: {exc}; split the batch into smaller calls") from None
        self.capacity = size

    def sub(self, offset: int, nbytes: int) -> Any:
        key = (offset, nbytes)
        found = self._subs.get(key)
        if found is None:
            if len(self._subs) > 256:
                self._subs.clear()
            found = self._subs[key] = self.buffer.get_sub_region(offset, nbytes)
        return found


@dataclass
class _Layout:
    offsets: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def add(self, name: str, nbytes: int, align: int) -> None:
        self.offsets[name] = self.total
        self.sizes[name] = max(nbytes, align)  # a zero-size array still gets a (legal) region
        self.total += (self.sizes[name] + align - 1) // align * align


@dataclass
class _CallPlan:
    """What a call of one shape needs, computed once per shape (:meth:`CompiledProgram._plan`):
    ``staged`` (buffer index, offset, bytes) of each per-call array in the packed upload,
    ``params`` the indices of the param buffers, ``read_back`` (index, view of the read-back
    array) of each output, ``device_args`` every kernel argument but the params'."""

    sizes: dict[str, int]
    packed: _Layout
    outs: _Layout
    staged: tuple[tuple[int, int, int], ...]
    params: tuple[int, ...]
    read_back: tuple[tuple[int, np.ndarray], ...]
    device_args: list[Any]
    form: str


def _check_handles(program: ir.Program, buffers: tuple[Any, ...]) -> None:
    """Each buffer argument is the handle ``OpenCLRuntime`` made for its role."""
    for b, a in zip(program.buffers, buffers):
        want = HostArray if b.read_only else Allocation
        if type(a) is not want and not isinstance(a, want):
            made = "runtime.upload" if b.read_only else "runtime.allocate"
            raise TypeError(f"{b.role} buffer {b.name!r}: expected what {made} returned")


def choose_form(form: str, has_single: bool, has_host: bool, sizes: Mapping[str, int],
                parallel_units: int, cpu: bool = True, program: ir.Program | None = None) -> str:
    """"single_group" or "per_level" for one call: ``form`` when it is not "auto"; else the
    schedule's ``kernel_form`` ("single", "per_level", or "auto": the one-work-group kernel for
    inputs of at most ``single_group_nodes`` nodes), as ``program.launch`` records it."""
    if form != "auto":
        return form
    if not has_host:
        return "single_group"
    if not has_single:
        return "per_level"
    chosen = dict(program.launch).get("kernel_form", "auto") if program is not None else "auto"
    if chosen == "single":
        return "single_group"
    if chosen == "per_level":
        return "per_level"
    limit = single_group_limit(program, parallel_units, cpu)
    return "single_group" if int(sizes.get("N", 0)) <= limit else "per_level"


def single_group_limit(program: ir.Program | None, parallel_units: int, cpu: bool = True) -> int:
    """The most nodes ``kernel_form="auto"`` runs as one single-work-group launch: the
    schedule's ``single_group_nodes`` (``program.launch``), else the device's fallback."""
    limit = dict(program.launch).get("single_group_nodes") if program is not None else None
    if limit is None:
        return FALLBACK_NODES_PER_TWO_UNITS * max(1, parallel_units // 2) if cpu else FALLBACK_NODES_GPU
    return int(limit)  # type: ignore[arg-type]


class CompiledProgram:
    """A built ``cl.Program`` for a LoopProgram (and its single-work-group form)."""

    def __init__(self, program: ir.Program, cl_program: Any, device: Device, *,
                 work_group_size: int = 0, form: str = "auto") -> None:
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        self.program = program
        self.device = device
        self.form = form
        self.work_group_size = work_group_size
        self.kernels = {k.name: k for k in program.kernels}
        import pyopencl as cl

        self.cl_kernels = {k.name: cl.Kernel(cl_program, _symbol(program, k.name)) for k in program.kernels}
        self.has_single = forms.SINGLE_KERNEL in self.kernels
        # the renderer drops the host steps of a program that needs a grid barrier
        self.host_ok = bool(program.host) and not forms.needs_single_group(program)
        if not self.has_single and not self.host_ok:
            raise ValueError(f"program {program.name} needs a grid barrier and has no single-group kernel")
        if form == "single_group" and not self.has_single:
            raise ValueError("form='single_group' needs the single-work-group kernel, which this "
                             "program could not be given")
        if form == "per_level" and not self.host_ok:
            raise ValueError(f"program {program.name} has the level loop inside a kernel; OpenCL "
                             "can run it only as one work-group (form='single_group' or 'auto')")
        self.roles = {b.name: b.role for b in program.buffers}
        self.align = device.info.base_align_bytes
        mf = cl.mem_flags
        self._inputs = _Pool(device, "per-call inputs", mf.READ_ONLY)
        self._outputs = _Pool(device, "outputs", mf.READ_WRITE | mf.ALLOC_HOST_PTR)
        self._temps = _Pool(device, "temporaries", mf.READ_WRITE)
        self._staging = np.empty(0, np.uint8)
        self._readback = np.empty(0, np.uint8)
        self._mapped: Any = None  # the output pool's host view while mapped (MAP_READ_BYTES)
        self._local_sizes: dict[str, int] = {}
        self._bound: dict[str, list[Any]] = {}  # per kernel: the arguments it was last given
        self._upload_done: Any = None  # event of the last packed upload (staging is reused)
        self._plans: dict[tuple[Any, ...], _CallPlan] = {}  # per call shape (``_plan``)
        # the tree-group kernel: its work-groups (the schedule's ``tree_groups`` where its
        # ``kernel_form`` is "auto"; 1 = none), the leaf launches it follows, and where the
        # arrays it regroups sit in the arguments
        launch = dict(program.launch)
        self.tree_groups = 1
        if forms.GROUPED_KERNEL in self.kernels and self.has_single and launch.get("kernel_form", "auto") == "auto":
            self.tree_groups = int(launch.get("tree_groups", 1))
        self._leaf_steps = program.host[:forms.leaf_steps(program)]
        self._grouped_args = tuple((i, b.name) for i, b in enumerate(program.buffers)
                                   if b.name in forms.GROUPED_ARRAYS)
        self._grouped_memo: tuple[Any, ...] | None = None  # (arrays, layout, grouped arrays)
        self._one_group_sizes: dict[tuple[int, ...], bool] = {}  # ``_one_group``
        # the shared-levels kernel: its work-groups (the schedule's ``level_groups``; 1 = none),
        # which run a call the one-work-group kernel would, and its counters (``shared``)
        self.level_groups = 1
        if shared.SHARED_KERNEL in self.kernels and form == "auto" and launch.get("kernel_form", "auto") == "auto":
            self.level_groups = int(launch.get("level_groups", 1))
        self._sync: Any = None
        self._sync_ints = 0
        self._slots: dict[tuple[tuple[str, int], ...], int] = {}
        self.last_form = ""
        self.last_groups = 1  # work-groups of the last call's tree-group launch (1: none)
        self.launches = 0  # kernel launches of the last call

    @property
    def warmup_nodes(self) -> tuple[int, ...]:
        """Batch sizes (nodes) that run each execution form this program has once, for
        ``Executable.warmup``: PoCL and other drivers build a kernel at its first launch."""
        info = self.device.info
        limit = single_group_limit(self.program, info.compute_units, info.kind == "CPU")
        grouped = (TREE_GROUP_WARMUP_NODES,) if self.tree_groups > 1 and TREE_GROUP_WARMUP_NODES <= limit else ()
        return (1, *grouped, limit + 1) if self.has_single and self.host_ok else (1,)

    # ------------------------------------------------------------------ launch sizes
    def local_size(self, name: str) -> int:
        """Work-items per group for kernel ``name``: the option, the kernel's own
        ``threads_per_group``, else its constant ``gpu_thread`` trip count; within the device's
        and the kernel's limit."""
        found = self._local_sizes.get(name)
        if found is not None:
            return found
        import pyopencl as cl

        k = self.kernels[name]
        extent = forms.thread_extent(k)
        if extent == 1:
            want = 1  # no work-item loop: one work-item per group
        elif self.work_group_size:
            want = self.work_group_size
        elif k.threads_per_group > 1:
            want = k.threads_per_group
        else:
            want = extent or 64
        limit = self.cl_kernels[name].get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device.device)
        size = max(1, min(want, int(limit), self.device.info.max_work_group_size))
        if extent != 1 and self.work_group_size and size < self.work_group_size:
            raise OpenCLResourceError(
                f"work_group_size={self.work_group_size} is more than kernel {name!r} can use on "
                f"{self.device.info.label} (at most {size} work-items); choose a smaller "
                "work_group_size or 0 (automatic)")
        self._local_sizes[name] = size
        return size

    # ------------------------------------------------------------------ calls
    def run(self, buffers: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
        """The interpreter's contract: read-only buffers from ``buffers``, outputs written into
        the given arrays (or new ones); returns every output and given buffer by name."""
        args: list[Any] = []
        shapes = self._shapes(sizes)
        check_index_values(self.program, buffers, sizes)
        out: dict[str, np.ndarray] = dict(buffers)
        handles: dict[str, Allocation] = {}
        for b in self.program.buffers:
            dt = np.dtype(np_dtype(b.dtype))
            if b.read_only:
                a = buffers.get(b.name)
                if a is None:
                    raise ValueError(f"program {self.program.name}: buffer {b.name!r} ({b.role}) not given")
                a = np.asarray(a)
                if a.shape != shapes[b.name] or a.dtype != dt:
                    raise ValueError(f"buffer {b.name!r}: expected {dt}{list(shapes[b.name])}, "
                                     f"got {a.dtype}{list(a.shape)}")
                args.append(HostArray(np.ascontiguousarray(a)))
            else:
                handles[b.name] = Allocation(shapes[b.name], dt)
                args.append(handles[b.name])
        args += [int(sizes[s.name]) for s in self.program.sizes]
        self.launch(tuple(args))
        self.device.queue.finish()
        for name, h in handles.items():
            if self.roles[name] != "output":
                continue
            given = buffers.get(name)
            if isinstance(given, np.ndarray) and given.shape == h.shape and given.dtype == h.dtype:
                given[...] = h.rows_in_order()
                out[name] = given
            else:
                out[name] = h.rows_in_order().copy()
        return out

    def _shapes(self, sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        missing = [s.name for s in self.program.sizes if s.name not in sizes]
        if missing:
            raise ValueError(f"program {self.program.name}: sizes {missing} not given")
        return {b.name: eval_shape(b.shape, sizes) for b in self.program.buffers}

    def launch(self, args: tuple[Any, ...]) -> None:
        """Bind ``args`` (buffers in program order, then sizes) and enqueue the whole call:
        one packed upload, the launches, one non-blocking read-back of the outputs."""
        import pyopencl as cl

        p = self.program
        nb = len(p.buffers)
        if len(args) != nb + len(p.sizes):
            raise TypeError(f"program {p.name} takes {nb} buffers and {len(p.sizes)} sizes; "
                            f"got {len(args)} arguments")
        buffers = args[:nb]
        _check_handles(p, buffers)
        self._unmap()  # the last call's outputs were read: the kernels may write the pool again
        layout = None
        if self.tree_groups > 1 and self._one_group(args[nb:]):
            layout, buffers = self._group_call(buffers)
        plan = self._plan(buffers, args[nb:], grouped=layout is not None)
        queue = self.device.queue
        packed, outs = plan.packed, plan.outs
        if self._upload_done is not None:
            self._upload_done.wait()  # the previous call's upload may still read the staging array
            self._upload_done = None
        staging = self._staging
        for i, off, n in plan.staged:
            staging[off: off + n] = buffers[i].array.reshape(-1).view(np.uint8)
        device_args = plan.device_args.copy()
        for i in plan.params:
            a = buffers[i]
            if a.device is None:
                a.device = _dedicated(self.device, a.array, p.buffers[i].name)
            device_args[i] = a.device
        mapped = None
        try:
            if packed.total:
                self._upload_done = cl.enqueue_copy(queue, self._inputs.buffer, staging[:packed.total],
                                                    is_blocking=False)
            self.launches = 0
            self.last_form = plan.form
            self.last_groups = 1 if layout is None else layout.groups
            sync = self._sync_buffer(plan.sizes) if plan.form == "single_group" and self.level_groups > 1 else None
            if sync is not None:
                self.last_form, self.last_groups = "shared_levels", self.level_groups
                self._enqueue(shared.SHARED_KERNEL, device_args + [sync], (), self.level_groups)
            elif plan.form == "single_group":
                self._enqueue(forms.SINGLE_KERNEL, device_args, (), 1)
            elif plan.form == "tree_groups":
                assert layout is not None
                self._host_steps(self._leaf_steps, dict(plan.sizes), device_args, {})
                self._enqueue(forms.GROUPED_KERNEL, device_args, (layout.groups,), layout.groups)
            else:
                host_index = {p.buffers[i].name: buffers[i].array for i, _, _ in plan.staged}
                self._host_steps(p.host, dict(plan.sizes), device_args, host_index)
            if outs.total >= MAP_READ_BYTES:
                mapped, _ = cl.enqueue_map_buffer(queue, self._outputs.buffer, cl.map_flags.READ, 0,
                                                  (outs.total,), np.uint8, is_blocking=False)
                self._mapped = mapped
            elif outs.total:
                cl.enqueue_copy(queue, self._readback[:outs.total], self._outputs.buffer, is_blocking=False)
        except OpenCLResourceError:
            raise
        except Exception as exc:
            if _is_resource_error(exc):
                raise OpenCLResourceError(
                    f"OpenCL ran out of resources running {p.name} on {self.device.info.label}: {exc}. "
                    "Try a smaller batch, work_group_size, or a schedule without local-memory caches"
                ) from None
            raise OpenCLLaunchError(f"OpenCL failed running {p.name} on {self.device.info.label}: {exc}") from None
        rows = None if layout is None else layout.rows
        for i, view in plan.read_back:
            if mapped is not None:  # the same bytes of the mapped pool
                view = mapped[outs.offsets[p.buffers[i].name]:][:view.nbytes].view(view.dtype).reshape(view.shape)
            buffers[i].host = view
            buffers[i].rows = rows

    def _unmap(self) -> None:
        """Unmap the output pool where the last call mapped it (the unmap is queued before
        anything that writes the pool; nothing reads the old views after the call's outputs
        were fetched)."""
        if self._mapped is not None:
            mapped, self._mapped = self._mapped, None
            mapped.base.release(self.device.queue)

    def _sync_buffer(self, sizes: Mapping[str, int]) -> Any:
        """The shared-levels kernel's counters (``shared``), zeros, big enough for a call of
        these sizes: two per claimed loop it runs, and the count of finished groups. The kernel
        leaves them zero, so a buffer is filled only when it is made. None where the host
        cannot count the loops (the call then runs as one work-group)."""
        import pyopencl as cl

        key = tuple(sorted(sizes.items()))
        slots = self._slots.get(key)
        if slots is None:
            if len(self._slots) >= 64:
                self._slots.clear()
            try:
                slots = shared.claim_slots(self.kernels[shared.SHARED_KERNEL], sizes)
            except ValueError:
                slots = -1
            self._slots[key] = slots
        if slots < 0:
            return None
        need = 1 + 2 * slots
        if self._sync is None or self._sync_ints < need:
            self._sync_ints = 1 << max(6, (need - 1).bit_length())
            mf = cl.mem_flags
            self._sync = cl.Buffer(self.device.context, mf.READ_WRITE | mf.COPY_HOST_PTR,
                                   hostbuf=np.zeros(self._sync_ints, np.int32))
        return self._sync

    def _one_group(self, size_args: tuple[Any, ...]) -> bool:
        """Would ``form="auto"`` run a call of these sizes as the one-work-group kernel?
        (Kept per sizes, as the plans are.)"""
        key = tuple(int(v) for v in size_args)
        found = self._one_group_sizes.get(key)
        if found is None:
            if len(self._one_group_sizes) >= 64:
                self._one_group_sizes.clear()
            info = self.device.info
            sizes = {s.name: v for s, v in zip(self.program.sizes, key)}
            found = self._one_group_sizes[key] = self.form == "auto" and choose_form(
                self.form, self.has_single, self.host_ok, sizes, info.compute_units,
                cpu=info.kind == "CPU", program=self.program) == "single_group"
        return found

    def _group_call(self, buffers: tuple[Any, ...]) -> tuple[TreeGroups | None, tuple[Any, ...]]:
        """The call's grouped layout for ``tree_groups`` work-groups and ``buffers`` with each
        per-call array in it; (None, ``buffers``) when the batch is one tree or too small to
        gain from it (``cortex.core.linearize.groups``). Kept for the next call while its
        arrays are the same read-only arrays (a sealed batch run again: nothing can have
        changed them), so a repeated batch is not regrouped."""
        arrays = tuple(buffers[i].array for i, _ in self._grouped_args)
        memo = self._grouped_memo
        if memo is not None and all(a is b for a, b in zip(memo[0], arrays)):
            layout, grouped = memo[1], memo[2]
        else:
            named = dict(zip((name for _, name in self._grouped_args), arrays))
            layout = group_trees(named["level_offsets"], named["child_offsets"], named["child_ids"],
                                 self.tree_groups)
            grouped = () if layout is None else self._grouped_arrays(buffers, layout)
            self._grouped_memo = None
            if not any(a.flags.writeable for a in arrays):
                self._grouped_memo = (arrays, layout, grouped)
        if layout is None:
            return None, buffers
        out = list(buffers)
        for (i, _), a in zip(self._grouped_args, grouped):
            out[i] = HostArray(a)
        return layout, tuple(out)

    def _grouped_arrays(self, buffers: tuple[Any, ...], layout: TreeGroups) -> tuple[np.ndarray, ...]:
        """Each per-call array of ``buffers`` in the grouped layout (new arrays, made
        read-only; the caller's stay as they are)."""
        out = []
        for i, name in self._grouped_args:
            a = buffers[i].array
            if name == "level_offsets":
                a = layout.level_table
            elif name == "child_offsets":
                a = layout.child_offsets
            elif name == "child_ids":
                a = layout.child_ids
            elif name == "child_table":
                a = layout.child_table(a)
            else:  # word_ids, features: one row per node
                a = layout.node_array(a)
            a.flags.writeable = False
            out.append(a)
        return tuple(out)

    def _plan(self, buffers: tuple[Any, ...], size_args: tuple[Any, ...],
              grouped: bool = False) -> "_CallPlan":
        """The call's layout (packed inputs, output and temporary pools, their sub-buffers,
        the execution form), kept per sizes, array sizes and whether the arrays are in the
        grouped layout (its level table is longer, its form "tree_groups"): a repeated shape of
        input costs a dictionary look-up, not a walk over every buffer. A pool that grows drops
        every plan (their sub-buffers are of the old one)."""
        key = (tuple(int(v) for v in size_args),
               tuple(a.array.nbytes if isinstance(a, HostArray) else a.shape for a in buffers), grouped)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= 64:
                self._plans.clear()
            plan = self._make_plan(buffers, key[0], grouped)  # drops every plan if a pool grows
            self._plans[key] = plan
        return plan

    def _make_plan(self, buffers: tuple[Any, ...], size_values: tuple[int, ...],
                   grouped: bool = False) -> "_CallPlan":
        p = self.program
        sizes = {s.name: v for s, v in zip(p.sizes, size_values)}
        align = self.align
        packed, outs, temps = _Layout(), _Layout(), _Layout()
        for b, a in zip(p.buffers, buffers):
            if b.role == "param":
                continue
            if b.read_only:
                packed.add(b.name, a.array.nbytes, align)
            else:
                (outs if b.role == "output" else temps).add(b.name, _nbytes(a.shape, a.dtype), align)
        pools = (self._inputs.buffer, self._outputs.buffer, self._temps.buffer)
        self._inputs.ensure(packed.total)
        self._outputs.ensure(outs.total)
        self._temps.ensure(temps.total)
        if pools != (self._inputs.buffer, self._outputs.buffer, self._temps.buffer):
            self._plans.clear()  # their sub-buffers belong to a pool that was replaced
        if self._upload_done is not None:
            self._upload_done.wait()  # the staging array may be replaced below
            self._upload_done = None
        if self._staging.nbytes < packed.total:
            self._staging = np.empty(self._inputs.capacity, np.uint8)
        if self._readback.nbytes < outs.total:
            self._readback = np.empty(self._outputs.capacity, np.uint8)
        device_args: list[Any] = []
        staged, params, read_back = [], [], []
        for i, (b, a) in enumerate(zip(p.buffers, buffers)):
            if b.role == "param":
                params.append(i)
                device_args.append(None)
            elif b.read_only:
                staged.append((i, packed.offsets[b.name], a.array.nbytes))
                device_args.append(self._inputs.sub(packed.offsets[b.name], packed.sizes[b.name]))
            elif b.role == "output":
                off = outs.offsets[b.name]
                device_args.append(self._outputs.sub(off, outs.sizes[b.name]))
                n = _nbytes(a.shape, a.dtype)
                read_back.append((i, self._readback[off: off + n].view(a.dtype).reshape(a.shape)))
            else:
                device_args.append(self._temps.sub(temps.offsets[b.name], temps.sizes[b.name]))
        device_args += [np.int32(v) for v in size_values]
        info = self.device.info
        form = "tree_groups" if grouped else choose_form(
            self.form, self.has_single, self.host_ok, sizes, info.compute_units,
            cpu=info.kind == "CPU", program=p)
        return _CallPlan(sizes, packed, outs, tuple(staged), tuple(params), tuple(read_back),
                         device_args, form)

    def _host_steps(self, steps: tuple[ir.Node, ...], env: dict[str, int], device_args: list[Any],
                    host_index: Mapping[str, np.ndarray]) -> None:
        for st in steps:
            if isinstance(st, ir.Launch):
                values = tuple(forms.evaluate(a, env, {}) for a in st.args)
                k = self.kernels[st.kernel]
                kenv = dict(env)
                kenv.update(zip(k.params, values))
                groups = forms.plan_groups(k, kenv, host_index, cap=self._group_cap())
                self._enqueue(st.kernel, device_args, values, groups)
            elif isinstance(st, ir.HostFor):
                lo, hi = forms.evaluate(st.start, env, {}), forms.evaluate(st.stop, env, {})
                for i in range(lo, hi):
                    env[st.var] = i
                    self._host_steps(st.body, env, device_args, host_index)
                env.pop(st.var, None)
            else:
                raise TypeError(f"unknown host step {st!r}")

    def _group_cap(self) -> int:
        return 65536

    def _enqueue(self, name: str, device_args: list[Any], params: tuple[int, ...], groups: int) -> None:
        import pyopencl as cl

        kernel = self.cl_kernels[name]
        values = list(device_args) + [np.int32(v) for v in params]
        last = self._bound.get(name)
        if last is None or len(last) != len(values):
            kernel.set_args(*values)
        else:  # pooled buffers are the same objects call after call: set only what changed
            for i, (new, old) in enumerate(zip(values, last)):
                if new is not old and not (isinstance(new, np.int32) and isinstance(old, np.int32) and new == old):
                    kernel.set_arg(i, new)
        self._bound[name] = values
        local = self.local_size(name)
        cl.enqueue_nd_range_kernel(self.device.queue, kernel, (groups * local,), (local,))
        self.launches += 1


def _symbol(program: ir.Program, kernel: str) -> str:
    from cortex.core.render.c_family import kernel_symbol

    return kernel_symbol(program, kernel)


def _dedicated(device: Device, array: np.ndarray, name: str) -> Any:
    import pyopencl as cl

    mf = cl.mem_flags
    data = np.ascontiguousarray(array)
    if data.nbytes > device.info.max_alloc_bytes:
        raise OpenCLResourceError(
            f"param {name!r} is {_human(data.nbytes)}, more than the largest buffer "
            f"{device.info.label} can allocate ({_human(device.info.max_alloc_bytes)})")
    try:
        if data.nbytes == 0:
            return cl.Buffer(device.context, mf.READ_ONLY, 16)
        return cl.Buffer(device.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)
    except Exception as exc:
        raise OpenCLResourceError(f"could not allocate param {name!r} ({data.nbytes} bytes) on "
                                  f"{device.info.label}: {exc}") from None


class OpenCLRuntime(Runtime):
    """The core's Runtime over one device's queue (see the module doc for the handles).

    ``pinning`` says whether the compile's ``pin_workers`` request holds (PoCL's workers pinned
    one per core or not, decided when the process started PoCL) and why
    (``exe.backend.runtime.pinning``)."""

    def __init__(self, device: Device, pinning: WorkerPinning | None = None) -> None:
        self.device = device
        self.pinning = pinning

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Allocation:
        return Allocation(tuple(int(d) for d in shape), np.dtype(dtype))

    def upload(self, array: np.ndarray) -> HostArray:
        return HostArray(np.array(array, copy=True, order="C"))

    def stage(self, array: np.ndarray) -> HostArray:
        """A per-call input, not copied: ``launch`` packs it into the staging array before it
        returns, and nothing reads it after that."""
        return HostArray(np.ascontiguousarray(array))

    def adopt(self, array: np.ndarray) -> HostArray:
        """The executable's prepared param, handed over: kept as it is (a token table's zero
        pages stay unallocated on the host)."""
        return HostArray(np.ascontiguousarray(array))

    # token tables filled on use: the calls write rows into the host copy, and the rows go to
    # the param's device buffer (made from the whole host copy at its first launch) before the
    # launch that reads them
    tables_on_use = True

    def table_host_array(self, buffer: HostArray) -> np.ndarray:
        return buffer.array

    def refresh_rows(self, buffer: HostArray, rows: np.ndarray) -> None:
        """One write per run of consecutive rows into the param's device buffer, if it has one
        yet (else its first launch copies the whole host array, these rows included)."""
        import pyopencl as cl

        if buffer.device is None or not len(rows):
            return
        a = buffer.array.reshape(buffer.array.shape[0], -1)
        row_bytes = a.strides[0]
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        for run in np.split(rows, breaks):
            lo, hi = int(run[0]), int(run[-1]) + 1
            cl.enqueue_copy(self.device.queue, buffer.device, a[lo:hi], dst_offset=lo * row_bytes, is_blocking=True)

    def download(self, buffer: Any, out: np.ndarray) -> np.ndarray:
        if isinstance(buffer, HostArray):
            out[...] = buffer.array
            return out
        if not isinstance(buffer, Allocation) or buffer.host is None:
            raise TypeError("download takes an output buffer of a finished launch "
                            "(allocate, launch, synchronize, then download)")
        if buffer.rows is None:
            out[...] = buffer.host
        else:
            # mode="clip": no bounds pass and no buffering of ``out`` (the rows are a permutation)
            np.take(buffer.host, buffer.rows, axis=0, out=out, mode="clip")
        return out

    def launch(self, artifact: Any, args: tuple[Any, ...], **launch_config: Any) -> None:
        if not isinstance(artifact, CompiledProgram):
            raise TypeError(f"the opencl runtime launches what its compiler built, not {type(artifact).__name__}")
        if launch_config:
            raise TypeError(f"the opencl runtime takes no launch configuration, got {launch_config}")
        artifact.launch(args)

    def synchronize(self) -> None:
        self.device.queue.finish()
