"""Applying a Schedule's knobs to a freshly lowered LoopProgram.

Pipeline position: inside :func:`cortex.core.lowering.lower.lower`. The recursion lowering builds each
loop nest serial and hands it to :func:`schedule_nest` (the per-nest knobs: unroll, tile,
vector width, hidden parallelism — applied to a one-kernel program holding just that nest, so
the cost is linear in the program); it builds the node loops with :func:`node_loop_kind`; and it
finally calls :func:`apply_schedule` for the program-wide knobs (layouts, persistence, threads)
and the notes. Everything is done with the pure primitives of ``cortex.core.lowering.transforms``:

=====================  =====================================================================
``weight_layout``      ``change_layout`` on every 2-D GEMV weight (packed: blocks of
                       ``weight_block`` rows; a weight whose rows do not divide is left alone)
``unroll``             ``unroll_reduce`` on every GEMV reduction whose trip count it divides
``tile_hidden``        ``split`` of each hidden loop longer than the tile
``vector_width``       the innermost hidden part becomes a ``vectorized`` loop of that width
                       (a multi-axis nest: its last, contiguous axis; a vector nest: the rows)
``parallel``           nodes / hidden / both -> ``parallel`` (CPU) or ``gpu_group`` (nodes) and
                       ``gpu_thread`` (hidden) on a grid target
``persistent``         grid targets with enough shared memory: ``cache`` of the weights in
                       shared memory at kernel start; elsewhere a no-op (noted)
``threads``            ``Kernel.threads_per_group`` on a grid target; CPU: the team size of a
                       call, recorded in ``Program.launch`` for the runtime
``reduce_lanes``       on a target with warp shuffles, a nest whose hidden loop runs
                       ``gpu_thread`` gets lane groups (``For.lanes``) and its GEMV reductions
                       the same ``Reduce.lanes`` (0 = auto: ``threads //`` the loop's trip
                       count, rounded down to a power of two, at most the warp size)
=====================  =====================================================================

``kernel_form``, ``leaf_specialization`` and ``fuse`` shape the program while it is built
(``lower`` / ``lower_case``); where the backend derives a one-work-group kernel
(``Capabilities.single_group_form``) ``kernel_form`` and ``single_group_nodes`` go to the runtime
in ``Program.launch``. :func:`apply_loop_schedule` then applies the loop-shape knobs
(``wide_lanes``, ``hidden_jam``, ``interchange``, ``node_jam`` and its knobs, ``prefetch``,
``node_chunk``), each a transform of ``cortex.core.lowering.loop_shapes``, ``level_interchange`` or
``jam``; last, :func:`apply_state_layout` lays out the per-node state (``state_layout``,
``state_block``: ``cortex.core.lowering.state_layout``). Knobs that cannot apply are no-ops and
say so in the notes.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING

from cortex.core.lowering import loop_shapes as shapes
from cortex.core.lowering import transforms as lt
from cortex.core import loopir as ir
from cortex.core.plugin.capabilities import Capabilities
from cortex.core.lowering.hoist_projections import hoist_projections
from cortex.core.lowering.jam import JamOptions, jam_levels, stages
from cortex.core.lowering.k_blocks import PANEL
from cortex.core.lowering.level_blocks import block_levels
from cortex.core.lowering.level_interchange import interchange_levels
from cortex.core.lowering.row_jam import jam_rows
from cortex.core.lowering.schedule import Schedule
from cortex.core.lowering.state_layout import block_nodes, node_buffers

if TYPE_CHECKING:
    from cortex.core.lowering.cases import LowerContext


def _itemsize(dtype: str) -> int:
    return 4 if dtype == "float32" else 8


def apply_schedule(program: ir.Program, s: Schedule, caps: Capabilities,
                   ctx: "LowerContext") -> tuple[ir.Program, list[str]]:
    notes: list[str] = []
    grid = caps.has_grid

    # weight layouts
    if s.weight_layout != "row_major":
        changed, skipped = [], []
        for w in sorted(ctx.weights):
            b = program.buffer(w)
            rows = ir.const_int(b.shape[0])
            if s.weight_layout == "packed":
                if rows is None or rows % s.weight_block:
                    skipped.append(w)
                    continue
                program = lt.change_layout(program, w, "packed", s.weight_block)
            else:
                program = lt.change_layout(program, w, s.weight_layout)
            changed.append(w)
        block = f" (blocks of {s.weight_block} rows)" if s.weight_layout == "packed" else ""
        notes.append(f"weight_layout={s.weight_layout}{block}: applied to {changed or 'no weights'}"
                     + (f"; left row-major (rows not a multiple of {s.weight_block}): {skipped}" if skipped else ""))

    if s.unroll > 1:
        notes.append(f"unroll={s.unroll}: {ctx.stats.get('unrolled', 0)} GEMV reductions unrolled"
                     + (f", {ctx.stats['not_unrolled']} left (trip count not a multiple)"
                        if ctx.stats.get("not_unrolled") else ""))
    hidden_kind = "gpu_thread" if grid else "parallel"
    node_kind = "gpu_group" if grid else "parallel"
    par_hidden = s.parallel in ("hidden", "both")
    par_nodes = s.parallel in ("nodes", "both")
    n_hidden = ctx.stats.get("hidden", 0)
    if s.tile_hidden:
        notes.append(f"tile_hidden={s.tile_hidden}: {ctx.stats.get('tiled', 0)} of {n_hidden} hidden loops split")
    if s.vector_width > 1:
        notes.append(f"vector_width={s.vector_width}: {ctx.stats.get('vectorized', 0)} of {n_hidden} hidden loops vectorized")
    notes.append(f"parallel={s.parallel}: nodes -> {node_kind if par_nodes else 'serial'}, "
                 f"hidden -> {hidden_kind if par_hidden else 'serial'}")

    # persistence
    if s.persistent:
        nbytes = sum(_nbytes(program.buffer(w)) for w in ctx.weights)
        if grid and ctx.weights and 0 < nbytes <= caps.shared_memory_bytes and s.kernel_form == "single":
            for w in sorted(ctx.weights):
                program = lt.cache(program, w, "shared")
            notes.append(f"persistent: {sorted(ctx.weights)} ({nbytes} bytes) cached in shared memory")
        elif grid:
            notes.append(f"persistent ignored: weights need {nbytes} bytes of shared memory, "
                         f"target has {caps.shared_memory_bytes} per group (or kernel_form is per_level)")
        else:
            notes.append("persistent: CPU caches keep the weights resident; no program change")

    if grid and caps.warp_size > 0:
        if ctx.stats.get("lane_nests"):
            notes.append(f"reduce_lanes={s.reduce_lanes}: {ctx.stats['lane_nests']} nests run each hidden unit on "
                         f"lane groups of {_span(ctx.stats['lanes_min'], ctx.stats['lanes_max'])} threads, their GEMV "
                         "sums combined by warp shuffles")
        else:
            notes.append(f"reduce_lanes={s.reduce_lanes}: no nest uses lane groups (one thread per hidden unit)")

    # threads and the other launch settings the runtime reads
    launch: list[tuple[str, object]] = []
    if grid:
        program = replace(program, kernels=tuple(replace(k, threads_per_group=s.threads) for k in program.kernels))
        notes.append(f"threads={s.threads} per group")
    else:
        launch.append(("threads", s.threads))
        notes.append(f"threads={s.threads}: CPU worker threads of a call")
    if caps.single_group_form:
        launch += [("kernel_form", s.kernel_form), ("single_group_nodes", s.single_group_nodes)]
        notes.append(f"kernel_form={s.kernel_form}: " + {
            "auto": f"one work-group for inputs of at most {s.single_group_nodes} nodes, else a launch per level",
            "single": "every level in one work-group launch",
            "per_level": "a launch per level"}[s.kernel_form])
        if s.tree_groups > 1 and s.kernel_form == "auto":
            launch.append(("tree_groups", s.tree_groups))
            notes.append(f"tree_groups={s.tree_groups}: the one-work-group form runs a "
                         "batch of several trees as that many work-groups, each over its own trees")
        if s.level_groups > 1 and s.kernel_form == "auto":
            launch.append(("level_groups", s.level_groups))
            notes.append(f"level_groups={s.level_groups}: the one-work-group form runs as that many "
                         "work-groups that claim each level's units")
    program = replace(program, launch=tuple(launch))
    program, loop_notes = apply_loop_schedule(program, s, caps)
    program, state_notes = apply_state_layout(program, s)
    program, split_notes = apply_level_split(program, s)
    return program, notes + loop_notes + state_notes + split_notes


def apply_level_split(program: ir.Program, s: Schedule) -> tuple[ir.Program, list[str]]:
    """The ``level_split`` knob, last (every loop the transforms made is there): "dynamic"
    annotates every outermost parallel loop of a kernel (the loops a team of threads splits)
    "dynamic", whose iterations the threads then claim at run time."""
    if s.level_split == "static":
        return program, []

    def mark(loop: ir.For) -> ir.For | None:
        if loop.kind not in ("parallel", "gpu_group"):
            return None
        return replace(loop, annotations=tuple(dict.fromkeys(loop.annotations + ("dynamic",))))

    program, n = lt.rewrite_loops(program, mark)
    return program, [f"level_split=dynamic: {n} parallel loops claimed by the threads at run time, their own "
                     f"chunk first, in units of about 1/{ir.CLAIMS_PER_THREAD} of it"]


def apply_state_layout(program: ir.Program, s: Schedule) -> tuple[ir.Program, list[str]]:
    """The ``state_layout`` knob, after the loop shapes so it reaches every nest they made:
    ``state_layout.block_nodes`` on every per-node buffer (states and per-node temps)."""
    if s.state_layout == "row_major":
        return program, []
    names = node_buffers(program)
    program = block_nodes(program, names, s.state_block)
    return program, [f"state_layout=node_blocked: {names or 'no buffers'} in blocks of {s.state_block} nodes "
                     f"([N // {s.state_block} + 1, ..., {s.state_block}])"]


def apply_loop_schedule(program: ir.Program, s: Schedule, caps: Capabilities) -> tuple[ir.Program, list[str]]:
    """The loop-shape knobs, in this order, each a pure ``LoopProgram -> LoopProgram``
    transform checked against its input on the interpreter in the tests:

    ``hoist_projections``  ``hoist_projections.hoist_projections`` (GEMVs over a node's input)
    ``wide_lanes``      ``loop_shapes.widen_vector_nests`` (matrix nests' column loops)
    ``hidden_jam``      ``loop_shapes.block_hidden_loops`` (only with a node jam)
    ``interchange``     ``level_interchange.interchange_levels``
    ``panel_kib``       ``level_blocks.block_levels`` (blocks of a large level's nodes, jammed)
    ``k_block``         ``k_blocks.k_blocked_nodes`` (inside those blocks: reductions in K blocks)
    ``node_jam`` & co.  ``jam.jam_levels`` (groups of nodes, fused reductions)
    ``row_jam``         ``row_jam.jam_rows`` (rows of a node's matrix nest, node loops not jammed)
    ``prefetch``        ``loop_shapes.insert_prefetches`` (gathered table rows)
    ``node_chunk``      ``loop_shapes.chunk_nodes`` (parallel node loops not jammed)
    """
    notes: list[str] = []
    if s.hoist_projections:
        program, n = hoist_projections(program)
        notes.append(f"hoist_projections: {n} GEMVs hoisted (over a node's own input: for every internal node "
                     "before the level loop; over a child's state: for the level's child edges before its nodes)")
    if s.wide_lanes:
        program, n = shapes.widen_vector_nests(program, s.wide_lanes)
        notes.append(f"wide_lanes={s.wide_lanes}: {n} split column loops merged into one vector")
    jam = s.node_jam > 1
    if jam:
        program, n = shapes.block_hidden_loops(program, s.hidden_jam)
        if n:
            notes.append(f"hidden_jam={s.hidden_jam}: {n} node loops' hidden loops cut into blocks of {s.hidden_jam}")
    if s.interchange:
        program, n = interchange_levels(program)
        notes.append(f"interchange: {n} level loops inside their hidden-unit loops (threads split the weight rows)")
    lanes = caps.vector_lanes(_itemsize(_float_dtype(program)))
    opts = JamOptions(nodes=s.node_jam, pad=s.jam_pad, accumulators=s.jam_accumulators,
                      register_lanes=lanes if lanes > 1 else s.hidden_jam, unroll=s.jam_unroll,
                      interleave=s.jam_interleave, rows=s.jam_rows)
    blocked = 0
    if s.interchange and s.panel_kib:
        # one chunk of hidden blocks per thread; claimed at run time, in CLAIMS_PER_THREAD units
        # (a thread's own units are its static chunk: the weights it keeps in its cache)
        units = ir.CLAIMS_PER_THREAD if s.level_split == "dynamic" else 1
        program, blocked = block_levels(program, s.panel_kib * 1024, opts if jam else None,
                                         chunks=max(1, s.threads), cache_bytes=caps.cache_bytes_per_core,
                                         units=units, k_block=s.k_block if jam else 0)
        notes.append(f"panel_kib={s.panel_kib}: {blocked} interchanged level loops run in blocks of nodes "
                     f"gathering at most {s.panel_kib} KiB of rows")
        if s.k_block and jam:
            k_blocked = sum(1 for k in program.kernels for n in ir.walk(k.body)
                            if isinstance(n, ir.Alloc) and n.name.startswith(PANEL))
            notes.append(f"k_block={s.k_block}: {k_blocked} level blocks' jammed reductions run in K blocks of "
                         f"{s.k_block} steps, partial sums in a panel")
    if jam:
        program, n = jam_levels(program, opts, interchanged=s.interchange)
        n += blocked  # the blocked levels were jammed block by block
        notes.append(f"node_jam={s.node_jam}: {n} level loops jammed"
                     f"{'' if s.interchange else ' (work units of hidden block x node chunk)'} in groups of "
                     f"{'/'.join(str(m) for m, _ in stages(s.node_jam, s.jam_pad))} nodes, "
                     f"{s.hidden_jam} hidden units, fused loops of at most {s.jam_accumulators} accumulators"
                     f"{f' and {s.jam_rows} node rows' if s.jam_rows else ''}, "
                     f"{s.jam_unroll} steps a trip")
    if s.row_jam > 1:
        lanes = caps.vector_lanes(_itemsize(_float_dtype(program)))
        program, n = jam_rows(program, JamOptions(nodes=s.row_jam, pad=s.jam_pad, accumulators=s.jam_accumulators,
                                                  register_lanes=lanes if lanes > 1 else s.hidden_jam,
                                                  unroll=s.jam_unroll, interleave=s.jam_interleave,
                                                  rows=s.jam_rows))
        notes.append(f"row_jam={s.row_jam}: {n} matrix nests' row loops jammed in groups of "
                     f"{'/'.join(str(m) for m, _ in stages(s.row_jam, s.jam_pad))} rows")
    if s.prefetch:
        program, n = shapes.insert_prefetches(program, s.prefetch)
        notes.append(f"prefetch={s.prefetch}: {n} node loops prefetch gathered rows {s.prefetch} nodes ahead")
    if s.node_chunk > 1:
        program, n = shapes.chunk_nodes(program, s.node_chunk, s.hidden_tiles)
        notes.append(f"node_chunk={s.node_chunk}: {n} node loops run {s.node_chunk} nodes per work unit"
                     + (f" x {s.hidden_tiles} hidden tiles" if s.hidden_tiles > 1 else ""))
    return program, notes


def _float_dtype(program: ir.Program) -> str:
    dts = program.float_dtypes()
    return "float64" if "float64" in dts else "float32"


def schedule_nest(stmt: ir.Stmt, var: str, extent: int, reduces: list[tuple[str, int]],
                  s: Schedule, caps: Capabilities, ctx: "LowerContext") -> ir.Stmt:
    """Apply the per-nest knobs (unroll, tile_hidden, vector_width, hidden parallelism) to one
    loop nest whose outermost tensor loop is ``var``. The primitives run on a one-kernel program
    holding just this nest, so scheduling costs O(nest), not O(program), per loop."""
    prog = ir.Program("nest", (), (), (ir.Kernel("nest", (), stmt),), ())
    stats, names = ctx.stats, ctx.names
    stats["hidden"] = stats.get("hidden", 0) + 1
    if s.unroll > 1:
        prog = _unroll_reductions(prog, {k for k, trip in reduces if trip % s.unroll == 0}, s.unroll)
        done = sum(1 for _, trip in reduces if trip % s.unroll == 0)
        stats["unrolled"] = stats.get("unrolled", 0) + done
        stats["not_unrolled"] = stats.get("not_unrolled", 0) + len(reduces) - done
    outer, target, target_extent = var, var, extent
    if s.tile_hidden and extent > s.tile_hidden:
        jo, jt = names.fresh(f"{var}o"), names.fresh(f"{var}t")
        prog = lt.split(prog, var, s.tile_hidden, outer=jo, inner=jt)
        outer, target, target_extent = jo, jt, s.tile_hidden
        stats["tiled"] = stats.get("tiled", 0) + 1
    whole_vector = False  # the loop itself became the vector: nothing left to run in parallel
    inner = _innermost_loop(stmt)
    if s.vector_width > 1 and inner is not None and inner.var != var:
        # a matrix nest (matmul, a matrix state's copy): its last axis is the contiguous one
        # (rows of the state and of the right operand), so the lanes run along it and every
        # access is a vector load/store; vectorizing the row loop made each lane a row apart
        # (gathers/scatters, and a nested loop the SIMD emitter does not take)
        trip = ir.const_int(inner.stop - inner.start)
        if trip is not None and trip >= s.vector_width and trip % s.vector_width == 0:
            stats["vectorized"] = stats.get("vectorized", 0) + 1
            if trip == s.vector_width:
                prog = lt.annotate(prog, inner.var, "vectorized")
            else:
                prog = lt.split(prog, inner.var, s.vector_width, outer=names.fresh(f"{inner.var}w"),
                                inner=names.fresh(f"{inner.var}v"), inner_kind="vectorized")
            target_extent = 0  # done: the row loop stays scalar
    if s.vector_width > 1 and target_extent >= s.vector_width and shapes.rows_apart(stmt, var, ctx.weights):
        # lanes a row apart in node data (MV-RNN's ``sum_k M[child, j, k] * h[k]``): every
        # lane would be a separate scalar load; the row loop stays scalar, its reductions run
        # along the contiguous axis
        stats["not_vectorized_rows"] = stats.get("not_vectorized_rows", 0) + 1
        target_extent = 0
    if s.vector_width > 1 and target_extent >= s.vector_width:
        stats["vectorized"] = stats.get("vectorized", 0) + 1
        if target_extent == s.vector_width:
            prog = lt.annotate(prog, target, "vectorized")
            whole_vector = outer == target
        else:
            vo, vi = names.fresh(f"{var}w"), names.fresh(f"{var}v")
            prog = lt.split(prog, target, s.vector_width, outer=vo, inner=vi, inner_kind="vectorized")
            if outer == target:
                outer = vo
    if s.parallel in ("hidden", "both") and not whole_vector:
        prog = lt.annotate(prog, outer, "gpu_thread" if caps.has_grid else "parallel")
        if caps.has_grid and caps.warp_size > 0 and s.reduce_lanes != 1 and reduces:
            trip = -(-extent // s.tile_hidden) if outer != var else extent
            lanes = reduce_lanes_for(s, caps, trip)
            if lanes > 1:
                body = with_lanes(prog.kernels[0].body, outer, {k for k, _ in reduces}, lanes)
                stats["lane_nests"] = stats.get("lane_nests", 0) + 1
                stats["lanes_min"] = min(stats.get("lanes_min", lanes), lanes)
                stats["lanes_max"] = max(stats.get("lanes_max", lanes), lanes)
                return body
    return prog.kernels[0].body


def _innermost_loop(stmt: ir.Stmt) -> ir.For | None:
    """The innermost loop of a perfect nest ``for j0: for j1: ... body`` (lets allowed between)."""
    last = None
    while isinstance(stmt, (ir.For, ir.Let)):
        if isinstance(stmt, ir.For):
            last = stmt
        stmt = stmt.body
    return last


def reduce_lanes_for(s: Schedule, caps: Capabilities, trip: int) -> int:
    """Lanes per output row for a ``gpu_thread`` loop of ``trip`` iterations under
    ``s.reduce_lanes`` (0: auto, the largest power of two <= ``threads // trip``, so a group's
    threads are all busy; never above the warp size)."""
    if s.reduce_lanes:
        return min(s.reduce_lanes, caps.warp_size)
    lanes = 1
    while lanes * 2 <= min(caps.warp_size, s.threads // max(1, trip)):
        lanes *= 2
    return lanes


def with_lanes(stmt: ir.Stmt, loop: str, keys: set[str], lanes: int) -> ir.Stmt:
    """``stmt`` with the ``gpu_thread`` loop ``loop`` run by lane groups of ``lanes`` threads and
    each reduction over a var in ``keys`` inside it (the outermost ones, not a reduction nested
    in another of them) split over those lanes."""

    def reduces(n: ir.Node) -> ir.Node:
        if isinstance(n, ir.Reduce) and n.var in keys:
            return replace(n, lanes=lanes)
        changes = {}
        for f in fields(n):  # type: ignore[arg-type]
            v = getattr(n, f.name)
            if isinstance(v, ir.Node):
                nv = reduces(v)
            elif isinstance(v, tuple) and any(isinstance(x, ir.Node) for x in v):
                nv = tuple(reduces(x) if isinstance(x, ir.Node) else x for x in v)
                if all(a is b for a, b in zip(nv, v)):
                    continue
            else:
                continue
            if nv is not v:
                changes[f.name] = nv
        return replace(n, **changes) if changes else n  # type: ignore[type-var]

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.For) and n.var == loop:
            return replace(n, lanes=lanes, body=reduces(n.body))
        return None

    return ir.transform(stmt, f)  # type: ignore[return-value]


def _unroll_reductions(prog: ir.Program, keys: set[str], factor: int) -> ir.Program:
    """``unroll_reduce`` on each GEMV reduction of ``keys``, each applied to a one-statement
    program holding just that reduction (so the cost is the reduction's size, not the nest's)."""
    if not keys:
        return prog

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.Reduce) and n.var in keys:
            mini = ir.Program("r", (), (), (ir.Kernel("r", (), ir.Store("r", (), n)),), ())
            return lt.unroll_reduce(mini, n.var, factor).kernels[0].body.value  # type: ignore[attr-defined]
        return None

    return replace(prog, kernels=tuple(replace(k, body=ir.transform(k.body, f)) for k in prog.kernels))


def node_loop_kind(s: Schedule, caps: Capabilities) -> str:
    """How the loops over the nodes of a level run under ``s.parallel``."""
    if s.parallel in ("nodes", "both"):
        return "gpu_group" if caps.has_grid else "parallel"
    return "serial"


def _nbytes(b: ir.Buffer) -> int:
    n = _itemsize(b.dtype)
    for d in b.shape:
        c = ir.const_int(d)
        if c is None:
            return 0
        n *= c
    return n


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}..{hi}"
