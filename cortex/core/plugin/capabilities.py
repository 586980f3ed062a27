"""Target capabilities: what the core may ask of a target instead of asking for its name.

Pipeline position: a backend plugin describes its device with a :class:`Capabilities`; the
scheduler picks knob defaults and legal ranges from it, the renderer picks a dialect from it,
and the lowering decides e.g. whether a grid-wide barrier (one persistent kernel per call) is
available. The core never branches on a target's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """What a target's device can do. All fields are plain data so schedules can be cached."""

    # Execution model
    has_grid: bool = False  # kernels are launched over a grid of groups (GPU-like)
    grid_barrier: bool = False  # a barrier across the whole grid exists (cooperative launch)
    group_barrier: bool = False  # a barrier across one work-group / thread block exists
    max_threads_per_group: int = 1
    max_groups: int = 1  # groups that can be co-resident (sizes persistent kernels)
    # threads that run in lock-step and can exchange registers (warp shuffles); 0 = none.
    # Cross-lane reductions (``Reduce.lanes``, the ``reduce_lanes`` knob) need lanes <= this.
    warp_size: int = 0
    num_cores: int = 1  # CPU threads the runtime may use in parallel
    # Memory
    shared_memory_bytes: int = 0  # per group ("local" in OpenCL, "shared" in CUDA)
    cache_bytes_per_core: int = 0  # e.g. a CPU core's L2; 0 = unknown
    # Arithmetic
    vector_bits: int = 0  # SIMD width of the host vector unit; 0 = none / unknown
    # SIMD registers the generated code may keep values in (sizes a node jam's accumulator
    # budget: 32 zmm with AVX-512, 16 ymm with AVX2); 0 = unknown
    vector_registers: int = 0
    # general-purpose registers the generated code may keep addresses in (sizes how many node
    # rows one fused loop of a node jam reads: 16 on x86-64); 0 = unknown
    address_registers: int = 0
    supports_fp64: bool = True
    # storage formats of weight matrices the code generator reads and widens to float32 (the
    # ``weights`` compile option, ``cortex.core.loopir.storage``); () = weights in the compute dtype only
    weight_storage: tuple[str, ...] = ()
    # how the code generator reads bfloat16 weights (the ``bf16_dot`` schedule knob's choices):
    # "widen" (each element widened to float32), "pairs" (``bfloat16_pairs`` storage: a word of
    # two reduction rows, one instruction per element), "amx" (the same storage multiplied on
    # AMX tiles, the activations rounded to bfloat16; offered only where the process may run them),
    # "dpbf16" (the same storage and rounding, on a dot-product instruction of bfloat16 pairs)
    bf16_dot: tuple[str, ...] = ("widen",)
    # Code form
    dialect: str = "c"  # which C-family dialect table the renderer uses, or "" for non-C
    single_call: bool = True  # the whole recursion may run inside one host call
    prefetch: bool = False  # the code generator emits cache prefetches (``Prefetch`` statements)
    # the backend derives, from the per-level program, one kernel run by a single work-group
    # that does every level (barriers between levels), and picks it per call by input size
    single_group_form: bool = False
    # the code generator takes per-node state laid out in node blocks (the ``state_layout``
    # knob's "node_blocked": a buffer of ``N // b + 1`` blocks of ``[*shape, b]``)
    blocked_state: bool = True
    # The backend's measured preferences for knobs whose best value depends on its code
    # generator and device, ``(knob, value)``: a knob's default rule takes it when it is legal
    # (``cortex.core.lowering.schedule_knobs``), and the provenance says so.
    preferred: tuple[tuple[str, object], ...] = ()
    # the code generator's team can claim a parallel loop's iterations at run time (the loop
    # annotation "dynamic", the ``level_split`` knob) instead of one fixed chunk per thread
    dynamic_split: bool = False
    # work-groups the single-group form runs in one launch, each walking the levels of its own
    # trees of the batch (no barrier across them: ``cortex.core.linearize.groups``); 1 = one
    # (the opencl target's ``tree_groups`` option sets it); the default of the knob ``tree_groups``;
    # 0 = by rule: ``num_cores`` where ``pinned_workers``, else 1
    independent_groups: int = 1
    # the device's worker threads are pinned one per core, so every work-group of a launch
    # starts at once (PoCL's CPU device with POCL_AFFINITY=1); unpinned, a sleeping worker
    # starts a launch's second group late
    pinned_workers: bool = False
    # a work-group that has started makes progress to its end whatever the others do (each runs
    # on an OS thread: PoCL's CPU device), so a group may wait for units another started group
    # claimed: the single-group form may share one tree's levels between groups that claim
    # each level's units at run time (the knob ``level_groups``)
    groups_progress: bool = False

    def vector_lanes(self, itemsize: int) -> int:
        """Lanes of a SIMD register for elements of ``itemsize`` bytes (1 when unknown)."""
        return max(1, self.vector_bits // (8 * itemsize)) if self.vector_bits else 1
