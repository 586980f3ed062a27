"""The schedule knobs of a target: legal choices and default rules, from its Capabilities.

Pipeline position: :class:`~cortex.core.lowering.schedule.ScheduleSpace` calls :func:`space_knobs` when
it is built; the lowering (``cortex.core.lowering.apply_schedule``) applies the knobs. A knob is offered
with more than one choice only where the capabilities allow it (no node jam on a grid target,
no prefetch where the code generator has none); its default is a *rule* over the capabilities,
the float type and the knobs resolved before it, and the rule is recorded with the value
(``dump=`` and the executable's notes show it). Where the best value depends on a backend's code
generator rather than on a capability (how many nodes to jam), the backend states its measured
preference in ``Capabilities.preferred`` and the rule takes it when it is legal.

=====================  ========================================================================
``tile_hidden``        tile size of the hidden dimension (0 = untiled)
``vector_width``       SIMD lanes of the innermost hidden loop (1 = scalar)
``unroll``             unroll factor of the reduction (GEMV) loop
``parallel``           which loop is parallel: "nodes" of a level, "hidden" units, or "both"
                       (on a grid target: nodes -> groups, hidden -> threads of a group)
``weight_layout``      "row_major", "transposed", "packed" (blocks of ``weight_block`` rows)
``persistent``         keep weights resident in local/shared memory across levels
``kernel_form``        "single" (every level in one kernel), "per_level" (a launch per level),
                       "auto" (where the backend derives a one-work-group kernel from the
                       per-level program: that kernel for inputs of at most
                       ``single_group_nodes`` nodes, else a launch per level)
``leaf_specialization``  separate loop nest for leaves, no per-node branch
``fuse``               fuse the gate GEMV with bias and elementwise epilogue in one loop nest
``threads``            CPU worker threads of a call; threads per group on a grid target
``reduce_lanes``       lanes (of a warp) per GEMV row, combined by shuffles (0 = auto)
``interchange``        a level's node loop inside its hidden-unit loops: threads split the
                       weight rows, each core's share stays in its cache across levels
``node_jam``           nodes per jammed group (stages halve it down to 1; 1 = no jam)
``jam_pad``            a short last group repeats its last node where that is legal
``jam_accumulators``   SIMD registers one fused reduction loop keeps accumulators in
``jam_unroll``         steps of a fused reduction loop per trip
``jam_interleave``     a jammed group's body let by let for every node, or node by node
``hidden_jam``         hidden units per jammed block (the lanes of its vectors)
``weight_block``       rows per block of a ``packed`` weight
``wide_lanes``         widest vector a matrix nest's split column loop is merged into (0 = off)
``prefetch``           a node loop gathering table rows prefetches those of the node this far
                       ahead (0 = off)
``node_chunk``         nodes per work unit of a node-parallel loop that is not jammed (1 = off)
``hidden_tiles``       hidden tiles per node chunk when the hidden loops are parallel
``single_group_nodes`` the input size (nodes) up to which ``kernel_form="auto"`` runs the
                       one-work-group kernel
``state_layout``       per-node state (and per-node intermediates): "row_major" ([N, H]) or
                       "node_blocked" (blocks of ``state_block`` nodes, [N // b + 1, H, b])
``state_block``        nodes per block of a ``node_blocked`` state
``refactor``           recursive refactoring: a parent's weight products of its children's
                       states are computed in the children's steps (``lowering.refactor``)
``recursive_unroll``   levels per step (1 = off): 2 runs a parent with its children of the level
                       below as one work unit, one barrier per pair of levels
                       (``linearize.units`` builds the units per call)
``bf16_dot``           how kernels read ``weights="bfloat16"`` matrices: "widen" each element,
                       "pairs" (``bfloat16_pairs`` storage: two reduction rows per word),
                       "amx" (the same storage, jammed GEMVs on AMX tiles: llvm, where the
                       host and the kernel offer them), or "dpbf16" (the same storage, jammed
                       GEMVs on the AVX512-BF16 dot product: llvm, for a CPU with avx512bf16)
``hoist_projections``  a level's GEMVs over the node's own input computed for every internal node
                       before the level loop, and those over a child's state in a per-child
                       reduction for the level's child edges before its nodes
                       (``lowering.hoist_projections``)
``row_jam``            rows of a node's matrix nest computed together, sharing each vector load
                       (1 = off; ``lowering.row_jam``)
``panel_kib``          an interchanged level whose nodes gather more than this many KiB of rows
                       in their reductions runs in blocks of nodes that gather at most this
                       much (``lowering.level_blocks``; 0 = the whole level at once)
``level_split``        how a team of threads splits a parallel loop: "static" (one fixed chunk
                       per thread) or "dynamic" (the threads claim its iterations at run time,
                       their own chunk first: a thread that runs late leaves its share to the
                       others; the loop annotation "dynamic", ``loopir.LOOP_ANNOTATIONS``)
``k_block``            steps per K block of such a block's jammed reductions: each fused loop
                       runs one K block over every group of the block's nodes before the next,
                       partial sums in a panel (``lowering.k_blocks``; 0 = the whole range)
``tree_groups``        work-groups the one-work-group form runs a batch of several trees as,
                       each walking its own trees' levels (1 = off; ``linearize.groups``)
``leaf_tables``        the leaf loop copies each leaf's states from the ``leaf_state`` tables of a
                       graph with a level-1 case, instead of running the leaf case
                       (``lowering.leaf_tables``)
``jam_rows``           distinct node rows one fused reduction loop reads per step, over the
                       group's nodes (a child's ``h[c, k]``, a node's own ``t[v, k]``): each is an
                       address the loop keeps in a register (0 = no limit)
``leaf_kids``          a level's nodes with a leaf child read that child's projections from the
                       level-1 case's tables, in node loops of their own (``lowering.leaf_kids``)
``level_groups``       work-groups the one-work-group form runs as, claiming each level's units
                       at run time (one tree on several cores; 1 = one group)
=====================  ========================================================================
"""

from __future__ import annotations

from typing import Any, Mapping

from cortex.core.plugin.capabilities import Capabilities
from cortex.core.lowering.schedule import Constraint, Knob


def _pow2_upto(n: int, start: int = 1) -> tuple[int, ...]:
    out, x = [], start
    while x <= n:
        out.append(x)
        x *= 2
    return tuple(out)


def _with(choices: tuple, value: Any) -> tuple:
    return choices if value in choices else tuple(sorted(set(choices) | {value}))


def space_knobs(caps: Capabilities, dtype: str,
                weights: str | None = None) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
    """The knobs (in ``Schedule`` field order) and constraints of ``caps`` for ``dtype``, with
    the weight matrices stored as ``weights`` (None: as ``dtype``; only default rules read it)."""
    itemsize = 4 if dtype == "float32" else 8
    lanes = caps.vector_lanes(itemsize)
    grid = caps.has_grid
    cpu = not grid  # CPU-style node loops: the node-loop transforms apply
    unit_items = caps.group_barrier and not grid  # parallel hidden loops span a group's work-items
    pref = dict(caps.preferred)

    def pick(name: str, choices: tuple, fallback: Any, rule: str) -> tuple[Any, str]:
        if name in pref and pref[name] in choices:
            return pref[name], f"the backend's measured preference ({pref[name]!r})"
        return fallback, rule

    def knob(name: str, choices: tuple, default: Any, doc: str, rule: str = "", **kw: Any) -> Knob:
        if not callable(default):
            default, rule = pick(name, choices, default, rule)
        return Knob(name, choices, default, doc, rule, **kw)

    single_ok = caps.grid_barrier if grid else caps.single_call
    if caps.single_group_form:
        forms: tuple = ("auto", "single", "per_level")
        form_rule = "the backend picks per call, by input size, between its one-work-group kernel and a launch per level"
    elif single_ok:
        forms, form_rule = ("single", "per_level"), "the level loop inside one kernel (one call per batch)"
    else:
        forms, form_rule = ("per_level",), "the only form here (no barrier across the whole device)"
    persist_ok = caps.shared_memory_bytes > 0 if grid else caps.cache_bytes_per_core > 0
    if grid:
        threads = _pow2_upto(caps.max_threads_per_group, 32) or (caps.max_threads_per_group,)
        thread_default, thread_rule = min(256, threads[-1]), "256 threads per group (or the device's most)"
        tiles = (0,) + _pow2_upto(min(256, caps.max_threads_per_group), 8)
    else:
        threads = tuple(sorted(set(_pow2_upto(caps.num_cores)) | {caps.num_cores}))
        thread_default, thread_rule = caps.num_cores, f"every core the target uses ({caps.num_cores})"
        tiles = (0, 8, 16, 32, 64, 128)
    layouts = ("row_major", "transposed") + (("packed",) if lanes > 1 else ())
    if grid:
        layout, layout_rule = "transposed", "a grid target: a warp's threads read consecutive rows (coalesced)"
    elif lanes > 1:
        layout, layout_rule = "packed", f"blocks of rows: one SIMD load per {lanes} hidden units"
    else:
        layout, layout_rule = "row_major", "no SIMD width known"
    warp = grid and caps.warp_size > 0
    registers = caps.vector_registers
    accs = max(4, registers * 3 // 4) if registers else 12
    acc_rule = (f"three quarters of the {registers} SIMD registers (the rest hold the loads)" if registers
                else "12: the register file is unknown")
    group_nodes = 256 * max(1, caps.num_cores // 2) if cpu else 8
    group_rule = ("256 nodes per two compute units (measured on PoCL's CPU device, docs/opencl.md)" if cpu
                  else "8 nodes: one work-group is one of many compute units")
    # a level's panel of gathered rows: half of a core's cache (the other half for the weights a
    # hidden block streams past it), so a level's rows stay there while the hidden blocks pass
    # over them (lowering.level_blocks)
    cache_kib = caps.cache_bytes_per_core // 1024
    team = cpu and not unit_items  # a parallel loop split into one chunk per thread (llvm)
    dynamic = team and caps.dynamic_split  # ... or claimed by its threads at run time (llvm)
    panel = 1 << ((cache_kib // 2).bit_length() - 1) if cache_kib >= 128 else 0
    # the target's setting (the opencl option ``tree_groups``), else by rule: a group per compute
    # unit where the device's workers are pinned (every group of a launch starts at once:
    # 0.59-0.72x the time at b10 on a quiet 2-core PoCL device), else one, since an unpinned
    # worker starts the second group too late to gain (docs/opencl.md, "Both cores")
    if not caps.single_group_form:
        groups, groups_rule = 1, "no one-work-group form here"
    elif caps.independent_groups >= 1:
        groups, groups_rule = caps.independent_groups, f"the target's setting ({caps.independent_groups})"
    elif caps.pinned_workers:
        groups = max(1, caps.num_cores)
        groups_rule = f"the {groups} compute units: the device's workers are pinned, a launch's groups start at once"
    else:
        groups, groups_rule = 1, "1: the device's workers are not pinned, a second work-group starts too late"
    # a tree's levels shared between groups that claim their units: where started groups make
    # progress (a group waits only for units a started group holds) and every group of a
    # launch starts at once (pinned workers), one per compute unit
    sharing = caps.single_group_form and caps.groups_progress
    shared = max(1, caps.num_cores) if sharing and caps.pinned_workers else 1
    shared_rule = (f"the {shared} compute units: started groups make progress and the workers are pinned"
                   if shared > 1 else "1: " + ("the workers are not pinned" if sharing
                                               else "no groups that claim units at run time here"))
    panels = _with((0, 256, 512, 1024, 2048, 4096), panel)
    panel_rule = (f"half of a core's {cache_kib} KiB cache (a power of two)" if panel
                  else "off: the cache size is unknown")
    jam = {"active": lambda s: s["node_jam"] > 1, "needs": ("node_jam",), "when": "node_jam > 1"}
    # a fused loop keeps each node row it reads (per node of the group) at an address in a
    # general-purpose register; past about half of them the loop reloads addresses from the stack
    # every step (docs/lowering.md, "How many rows a fused loop reads")
    addresses = caps.address_registers
    rows = addresses // 2 if addresses else 0
    bf16_weights = weights == "bfloat16"
    rows_rule = (f"half of the {addresses} general-purpose registers (the rest hold the weights' "
                 "addresses, the loop counter and the stack pointer)" if addresses
                 else "no limit: the general-purpose registers are unknown")

    def hidden_jam(r: Mapping[str, Any]) -> tuple[int, str]:
        if r["vector_width"] > 1:
            return r["vector_width"], f"the vector width ({r['vector_width']})"
        if lanes > 1:
            return lanes, f"the SIMD lanes for {dtype} ({lanes})"
        return 16, "16 (no SIMD width known)"

    def weight_block(r: Mapping[str, Any]) -> tuple[int, str]:
        if r["node_jam"] > 1:
            return r["hidden_jam"], f"the jammed hidden block (hidden_jam={r['hidden_jam']})"
        if r["vector_width"] > 1:
            return r["vector_width"], f"the vector width ({r['vector_width']})"
        return hidden_jam(r)

    knobs = (
        knob("tile_hidden", tiles, 0, "tile of the hidden dimension (0 = untiled)", "untiled"),
        knob("vector_width", _pow2_upto(lanes), lanes if cpu else 1, "SIMD lanes of the hidden loop",
             f"the SIMD lanes for {dtype} ({lanes})" if cpu else "a grid target: one hidden unit per thread"),
        knob("unroll", (1, 2, 4, 8), 1, "unroll factor of the reduction loop", "no unrolling"),
        knob("parallel", ("nodes", "hidden", "both"), "both" if grid else "nodes", "which loop runs in parallel",
             "nodes -> groups, hidden units -> threads" if grid else "threads split the nodes of a level"),
        knob("weight_layout", layouts, layout, "physical layout of weight matrices", layout_rule),
        knob("persistent", (False, True) if persist_ok else (False,), False, "weights resident across levels",
             "off"),
        knob("kernel_form", forms, forms[0], "one kernel per call, one per level, or per call", form_rule),
        knob("leaf_specialization", (True, False), True, "separate loop nest for leaves", "on"),
        knob("fuse", (True, False), True, "fuse GEMV, bias and elementwise epilogue", "on"),
        knob("threads", threads, thread_default, "CPU threads / threads per group", thread_rule),
        knob("reduce_lanes", (0,) + _pow2_upto(caps.warp_size) if warp else (1,), 0 if warp else 1,
             "lanes per GEMV row, combined by warp shuffles (0 = auto: threads // hidden)",
             "auto" if warp else "no warp shuffles"),
        knob("interchange", (False, True) if cpu else (False,), False, "threads split a level's hidden units",
             "off"),
        knob("node_jam", (1, 2, 4, 8, 16) if cpu else (1,), 1, "nodes per jammed group (1 = no jam)", "no jam"),
        knob("jam_pad", (True, False) if cpu else (True,), True, "a short group repeats its last node",
             "pad where the body reads nothing it stores", **jam),
        knob("jam_accumulators", _with((8, 12, 16, 24, 32), accs) if cpu else (24,), accs if cpu else 24,
             "SIMD registers of accumulators per fused loop", acc_rule if cpu else "no jam", **jam),
        knob("jam_unroll", (1, 2, 4) if cpu else (1,), 1, "steps of a fused reduction loop per trip",
             "one step", **jam),
        knob("jam_interleave", (True, False) if cpu else (True,), True,
             "a jammed group's body let by let for every node (False: node by node)", "let by let", **jam),
        knob("hidden_jam", _with(_pow2_upto(64, 2), 16) if cpu else (16,), hidden_jam if cpu else 16,
             "hidden units per jammed block", "no jam", **jam),
        knob("weight_block", _pow2_upto(64, 2) if lanes > 1 else (16,), weight_block if lanes > 1 else 16,
             "rows per block of a packed weight", "no packed layout here",
             active=lambda s: s["weight_layout"] == "packed", needs=("weight_layout",),
             when="weight_layout == 'packed'"),
        knob("wide_lanes", (0, 32, 64) if cpu else (0,), 0, "widest merged vector of a matrix nest (0 = off)",
             "off"),
        knob("prefetch", (0, 1, 2, 4) if caps.prefetch else (0,), 0, "nodes ahead whose gathered rows are "
             "prefetched (0 = off)", "off" if caps.prefetch else "no prefetch in this code generator"),
        knob("node_chunk", (1, 2, 4, 8, 16) if cpu else (1,), 1, "nodes per work unit of a loop not jammed",
             "one node"),
        knob("hidden_tiles", (1, 2, 4, 8) if cpu else (1,), 1, "hidden tiles per node chunk", "one tile",
             active=lambda s: s["node_chunk"] > 1, needs=("node_chunk",), when="node_chunk > 1"),
        knob("single_group_nodes", _with((8, 32, 64, 128, 256, 512, 1024, 4096), group_nodes)
             if caps.single_group_form else (256,), group_nodes if caps.single_group_form else 256,
             "input size up to which kernel_form='auto' runs one work-group",
             group_rule if caps.single_group_form else "no one-work-group form here",
             active=lambda s: s["kernel_form"] == "auto", needs=("kernel_form",), when="kernel_form == 'auto'",
             neutral=256 if not caps.single_group_form else group_nodes),
        knob("state_layout", ("row_major", "node_blocked") if caps.blocked_state else ("row_major",),
             "row_major", "layout of per-node state and intermediates",
             "row-major: each node's state one contiguous row" if caps.blocked_state
             else "the only layout this code generator takes"),
        knob("state_block", (4, 8, 16) if caps.blocked_state else (8,), 8, "nodes per block of a node_blocked state",
             "8 nodes" if caps.blocked_state else "no blocked state here",
             active=lambda s: s["state_layout"] == "node_blocked", needs=("state_layout",),
             when="state_layout == 'node_blocked'"),
        knob("refactor", (False, True), False, "a parent's products of its children's states computed "
             "in the children's steps", "off: the parent computes them"),
        knob("recursive_unroll", (1, 2), 1, "levels per step: a parent computed with its children by "
             "one worker, one barrier per step (1 = off)", "off: one step per level"),
        knob("bf16_dot", caps.bf16_dot if "bfloat16" in caps.weight_storage else ("widen",), "widen",
             "how kernels read bfloat16 weights (weights='bfloat16')", "widen each element"),
        knob("hoist_projections", (False, True) if cpu else (False,), cpu, "GEMVs over a node's own "
             "input (or a child's state in a per-child reduction) computed before the level (its nodes)",
             "on: data-parallel phases the node jam fills, not a GEMV per node (per child)" if cpu
             else "a grid target: the one-kernel program would need another grid barrier"),
        knob("row_jam", (1, 2, 4, 8) if cpu else (1,), 4 if cpu else 1, "rows of a node's matrix nest per "
             "jammed group (1 = off)", "4 rows: a 64-wide row in four registers, four rows fill 16 of the "
             "accumulators" if cpu else "no jam on a grid target"),
        knob("panel_kib", panels if team else (0,), panel if team else 0,
             "KiB of gathered rows per block of an interchanged level's nodes (0 = whole levels)",
             panel_rule if team else "off: no team of threads splitting a parallel loop into chunks here",
             active=lambda s: s["interchange"], needs=("interchange",), when="interchange"),
        knob("level_split", ("static", "dynamic") if dynamic else ("static",), "static",
             "how a team of threads splits a parallel loop: one chunk each, or claimed at run time",
             "one fixed chunk per thread" if dynamic
             else "static: no team of threads here that claims a loop's iterations at run time"),
        # measured on llvm (TreeLSTM b10/b100, 2 threads, a loaded machine): no faster at hidden
        # 1024 (0.97-1.2x the time), slower at 256 (1.4x): off until a target shows it pays
        knob("k_block", (0, 64, 128, 256) if team else (0,), 0,
             "steps per K block of a level block's jammed reductions (0 = the whole range)",
             "off: measured no faster (TreeLSTM h1024 b100 on llvm)" if team
             else "off: no team of threads splitting a parallel loop into chunks here",
             active=lambda s: s["interchange"] and s["panel_kib"] > 0 and s["node_jam"] > 1,
             needs=("interchange", "panel_kib", "node_jam"), when="interchange and panel_kib > 0 and node_jam > 1"),
        knob("tree_groups", _with((1, 2, 4), groups) if caps.single_group_form else (1,), groups,
             "work-groups a batch of several trees runs as in the one-work-group form (1 = one)",
             groups_rule, active=lambda s: s["kernel_form"] == "auto", needs=("kernel_form",),
             when="kernel_form == 'auto'"),
        knob("leaf_tables", (False, True), cpu, "the leaf loop reads its states from the leaf-state tables "
             "that level 1 has (lowering.leaf_tables)",
             "on: a row copy per state instead of the leaf's activations" if cpu
             else "off: a device gets the tables whole at compile time",
             active=lambda s: s["leaf_specialization"], needs=("leaf_specialization",),
             when="leaf_specialization"),
        knob("jam_rows", _with((0, 4, 8, 12, 16), rows) if cpu else (0,), rows if cpu else 0,
             "distinct node rows a fused reduction loop reads per step (0 = no limit)",
             rows_rule if cpu else "no jam", **jam),
        knob("leaf_kids", (False, True) if cpu else (False,), team,
             "a level's nodes with a leaf child "
             "read its projections from level 1's tables, in node loops of their own (lowering.leaf_kids)",
             ("on: a table row (of the rounded weights) instead of a bfloat16 GEMV per leaf child "
              "(measured on llvm: 0.75-1.04x the time of off at b1-b100)" if bf16_weights else
              "on: a table row instead of a GEMV per leaf child (measured on llvm)") if team
             else "off: no faster where work-groups run the levels (opencl, b1: 0.99-1.02x the time; a batch: "
             "its per-call node order leaves out the tree-group form)" if cpu
             else "off: a grid target's node loops are not split into groups by case",
             active=lambda s: s["leaf_specialization"], needs=("leaf_specialization",),
             when="leaf_specialization"),
        knob("level_groups", _with((1, 2, 4), shared) if sharing else (1,), shared,
             "work-groups the one-work-group form shares each level between (units claimed at "
             "run time; 1 = one)", shared_rule, active=lambda s: s["kernel_form"] == "auto",
             needs=("kernel_form",), when="kernel_form == 'auto'"),
    )
    constraints = (
        Constraint("tile_hidden must be 0 or a multiple of vector_width",
                   lambda s: s.tile_hidden == 0 or s.tile_hidden % s.vector_width == 0,
                   ("tile_hidden", "vector_width")),
        Constraint("persistent weights need the level loop inside one kernel (kernel_form='single')",
                   lambda s: not (s.persistent and grid and s.kernel_form != "single"),
                   ("persistent", "kernel_form")),
        # a unit's nodes run in order; where a work-group's items would share a node's hidden
        # loops (parallel hidden units on a group-barrier target without a grid: OpenCL on a
        # CPU) the next node would read rows other items are still writing
        Constraint("recursive_unroll > 1 runs a unit's nodes one after another: here it needs "
                   "parallel='nodes' (the hidden units of a node on one work-item)",
                   lambda s: not (s.recursive_unroll > 1 and s.parallel != "nodes" and unit_items),
                   ("recursive_unroll", "parallel")),
    )
    return knobs, constraints
