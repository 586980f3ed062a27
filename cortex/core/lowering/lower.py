"""Recursion lowering: RecursiveGraph + Schedule -> a scheduled, verified LoopProgram.

Pipeline position: after the graph passes, before code generation. ``cortex.compile`` calls
:func:`lower` with the passed graph, the schedule and the target's capabilities; backends render
``Lowered.program`` and use ``prepare_params`` / ``bind_batch`` / ``states`` to move data in and
out (``states`` converts a state the schedule laid out in node blocks back to row-major). The
numpy target runs it on ``cortex.core.loopir.interpret``.

What it produces (the paper's ILIR; see ``docs/lowering.md``):

* **Buffers** — one ``param`` buffer per param / derived param the graph reads (names made
  identifiers: ``stack[W_i,W_o]`` -> ``W_stack``; ``Lowered.param_names`` maps them), the
  per-node inputs (``word_ids`` int32 [N] or ``features`` [N, F]), the linearizer's index arrays
  with their value-range facts (``level_offsets``, ``child_offsets``, ``child_ids`` and, for
  fixed arity k, ``child_table`` [N, k]), one ``output`` buffer per state ``[N, *shape]`` and the
  ``temp`` buffers of materialized intermediates. Sizes ``N``, ``E``, ``L``, ``NL``.
* **Host structure** — leaves first (nodes ``0..NL``, the leaf case, its own loop nest: leaf
  specialization), then levels ``1..L-1`` (the internal case over
  ``level_offsets[l]..level_offsets[l+1]``: level batching). A graph with a ``preterminal`` case
  (``cortex.core.passes.preterminal``) runs it on level 1 and the internal case from level 2;
  such a program declares ``L >= 2`` and ``bind_batch`` gives a batch of single leaves an empty
  level 1. With the ``leaf_kids`` knob (``cortex.core.lowering.leaf_kids``) each level from 2
  runs one node loop per class of its nodes (no leaf child, child ``i`` a leaf) over the order
  ``leaf_kid_order`` [N] and its ``leaf_kid_offsets``, which ``bind_batch`` builds per call.
  Without leaf specialization one node
  loop runs every level ``0..L-1`` with a per-node branch on the node's child count.
  ``kernel_form="per_level"``: a host loop launches one kernel per level; ``"single"``: one
  kernel holds the level loop (with a grid barrier between levels on a grid target).
* **Per node** — ``cortex.core.lowering.cases``: fused loop nests (GEMV + bias + epilogue), indirect
  child access, child reductions over CSR ranges.
* **Schedule** — ``cortex.core.lowering.apply_schedule`` applies the knobs with the schedule primitives.
  Knobs that do not apply are no-ops, recorded in ``Lowered.notes``.

The result is verified (``loopir.verify.verify`` with the target's capabilities): every index is
proved within its buffer given the linearizer's guarantees, which :meth:`Lowered.bind_batch`
re-checks for the facts the model adds (arity, token ids within the vocabulary).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from cortex.core import loopir as ir
from cortex.core.errors import CortexError
from cortex.core.plugin.capabilities import Capabilities
from cortex.core.frontend.graph import Case, RecursiveGraph, verify as verify_graph
from cortex.core.lowering.transforms import from_layout, physical_arrays
from cortex.core.loopir import Const, Load, Var
from cortex.core.loopir.storage import pack
from cortex.core.loopir.verify import verify
from cortex.core.lowering.cases import CaseLowering, LowerContext, LoweringError, NameGen
from cortex.core.lowering.apply_schedule import apply_schedule, node_loop_kind, schedule_nest
from cortex.core.lowering.leaf_kids import (OFFSETS_BUFFER, ORDER_BUFFER, fuse_class_loops, leaf_kid_cases,
                                             leaf_kid_order)
from cortex.core.lowering.leaf_tables import leaf_table_case, leaf_tables
from cortex.core.lowering.refactor import refactor_graph
from cortex.core.frontend.params import bind_params
from cortex.core.lowering.schedule import Schedule, describe
from cortex.core.linearize.structure import INDEX_DTYPE, BatchTypeError, LinearizedBatch
from cortex.core.linearize.units import unroll_units

if TYPE_CHECKING:
    from cortex.core.runtime.token_tables import TokenTables

__all__ = ["Lowered", "lower", "LoweringError", "BatchMismatchError"]

_C_RESERVED = set(keyword.kwlist) | {
    "int", "float", "double", "char", "void", "const", "restrict", "return", "if", "else", "for",
    "while", "do", "switch", "case", "default", "break", "continue", "struct", "union", "long",
    "short", "unsigned", "signed", "static", "extern", "sizeof", "typedef", "goto", "volatile",
    "inline", "auto", "register", "enum", "bool", "half", "kernel", "global", "local", "shared",
    "private", "constant", "main", "exp", "log", "tanh", "sqrt", "fabs", "fmax", "fmin", "fma",
}
# macros of <math.h> / <stdlib.h> / CUDA headers a buffer name must not collide with (MV-RNN's
# word matrices are called M_E, which math.h defines as the constant e)
_C_MACROS = {
    "M_E", "M_LOG2E", "M_LOG10E", "M_LN2", "M_LN10", "M_PI", "M_PI_2", "M_PI_4", "M_1_PI",
    "M_2_PI", "M_2_SQRTPI", "M_SQRT2", "M_SQRT1_2", "INFINITY", "NAN", "HUGE_VAL", "HUGE_VALF",
    "NULL", "EOF", "RAND_MAX", "EXIT_SUCCESS", "EXIT_FAILURE", "FLT_MAX", "DBL_MAX", "FLT_MIN",
    "DBL_MIN", "FLT_EPSILON", "DBL_EPSILON", "MAXFLOAT", "CHAR_BIT", "INT_MAX", "INT_MIN",
    "errno", "assert", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
}
INDEX_BUFFERS = ("level_offsets", "child_offsets", "child_ids", "child_table", "word_ids", "features",
                 "phase_offsets", "unit_offsets", "unit_nodes", ORDER_BUFFER, OFFSETS_BUFFER)
SIZE_NAMES = ("N", "E", "L", "NL", "P", "U", "NU")


class BatchMismatchError(CortexError, ValueError):
    """A LinearizedBatch does not fit the lowered model (arity, token ids, features)."""


@dataclass(frozen=True)
class Lowered:
    graph: RecursiveGraph  # the graph that was lowered (after graph passes)
    program: ir.Program  # the scheduled LoopProgram (verified)
    schedule: Schedule
    dtype: str  # "float32" | "float64": the compute/storage float type
    param_names: tuple[tuple[str, str], ...] = ()  # graph param name -> buffer name
    state_names: tuple[tuple[str, str], ...] = ()  # state name -> output buffer name
    notes: tuple[str, ...] = field(default=())  # every knob and its source, then what each did
    provenance: tuple[tuple[str, str], ...] = ()  # knob -> where its value came from
    # recursive unrolling: (levels per phase, first unrolled level); () when the levels run one
    # by one. bind_batch then builds the work units (cortex.core.linearize.units) per call.
    unit_levels: tuple[int, ...] = ()

    def prepare_params(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Once per executable: the model's params (+ derived params via params.bind_params),
        cast to dtype, in the schedule's weight layouts, keyed by program buffer name."""
        return self.layout_params(bound_params(self.graph, params, self.dtype))

    def layout_params(self, table: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The second step of :meth:`prepare_params`: :func:`bound_params`'s table in the
        schedule's weight layouts and the buffers' storage formats (``weights=``), keyed by
        program buffer name."""
        logical = {buf: np.ascontiguousarray(table[name]) for name, buf in self.param_names}
        physical = physical_arrays(self.program, logical)
        for b in self.program.buffers:
            if b.storage and b.name in physical:
                physical[b.name] = pack(physical[b.name], b.storage)
        return physical

    def bind_batch(self, batch: LinearizedBatch) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Per call: index/input buffers from the batch (int32) and the size symbols
        (N, E, L, NL). Output/state buffers are NOT included (the runtime allocates them
        from program.buffers + sizes)."""
        return _bind_batch(self, batch)

    def states(self, buffers: Mapping[str, np.ndarray], num_nodes: int | None = None) -> dict[str, np.ndarray]:
        """The model's per-node states from the program's output buffers: {state: [N, *shape]},
        row-major whatever layout the schedule gave them (``state_layout``). A node-blocked
        buffer holds padding rows: its conversion needs ``num_nodes`` (the size ``N``)."""
        out = {}
        for s, buf in self.state_names:
            a = buffers[buf]
            layout = self.state_layouts.get(buf)
            if layout is not None and isinstance(a, np.ndarray):
                if num_nodes is None:
                    raise ValueError(f"state {s!r} is stored {layout[0]}: Lowered.states needs num_nodes")
                a = from_layout(a, layout, rows=num_nodes)
            out[s] = a
        return out

    @property
    def state_layouts(self) -> dict[str, tuple]:
        """``{output buffer: layout}`` for the state buffers the schedule did not leave row-major."""
        return {b.name: b.layout for b in self.program.buffers
                if b.role == "output" and b.layout != ("row_major",)}


def bound_params(graph: RecursiveGraph, params: Mapping[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The params a program lowered from ``graph`` reads (its own and derived ones), in
    ``dtype``; the first step of :meth:`Lowered.prepare_params`, which needs only the graph (the
    pipeline starts it while it lowers). Derived params (stacked gates, embedding x weight
    tables, leaf-state tables) are computed in the compile dtype: in float32 that is what the
    kernel would compute from the unhoisted params, within the float32 conformance tolerance of
    the float64 reference, at half the time and memory of a float64 product."""
    dt = np.dtype(dtype)
    return bind_params(graph, params, dtype=dt, compute_dtype=dt, only=_bound_names(graph))


def bound_params_deferred(graph: RecursiveGraph, params: Mapping[str, np.ndarray],
                          dtype: str) -> tuple[dict[str, np.ndarray], "TokenTables | None"]:
    """:func:`bound_params` with the token tables as zero pages, and the
    :class:`~cortex.core.runtime.token_tables.TokenTables` that fills their rows on first use (None
    when the graph has none): for a host runtime, which reads the arrays in place."""
    from cortex.core.runtime.token_tables import bind_deferred

    return bind_deferred(graph, params, dtype, only=_bound_names(graph))


def _bound_names(graph: RecursiveGraph) -> set[str]:
    """The params a program lowered from ``graph`` may read, whatever its schedule: those its
    cases read and the leaf-state tables a ``leaf_tables`` leaf loop reads (made anyway, as the
    sources of level 1's tables) and the leaf-kid cases (``lowering.leaf_kids``) read."""
    return (set(_used_params(graph)) | set(leaf_tables(graph).values())
            | set(_used_params(graph, leaf_kid_cases(graph))))


def lower(graph: RecursiveGraph, schedule: Schedule, capabilities: Capabilities,
          dtype: str = "float32", provenance: Mapping[str, str] | None = None) -> Lowered:
    """Lower ``graph`` under ``schedule`` for a target with ``capabilities``; verified.
    ``provenance`` (``ScheduleSpace.resolve``'s) says where each knob's value came from; the
    notes list every knob with it."""
    if dtype not in ir.FLOAT_DTYPES:
        raise LoweringError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a cortex.core.lowering.schedule.Schedule, got {type(schedule).__name__}")
    verify_graph(graph)
    caps = capabilities
    notes: list[str] = [f"schedule: {line}" for line in describe(schedule, provenance or {})]
    lgraph, scratch = graph, frozenset()  # the graph the cases are lowered from; scratch states
    if schedule.refactor:
        refactored = refactor_graph(graph)
        lgraph, scratch = refactored.graph, frozenset(refactored.projections)
        notes.extend(refactored.notes)
    names = NameGen(set(SIZE_NAMES) | set(INDEX_BUFFERS) | _C_RESERVED | _C_MACROS | {"l", "lh", "u", "v", "vi", "w", "ph", "phh", "g", "gi"})
    state_buf = {s.name: _ident(names, s.name) for s in lgraph.states}
    has_pre = schedule.leaf_specialization and any(c.name == "preterminal" for c in lgraph.cases)
    # the leaf loop from the leaf-state tables (lowering.leaf_tables) where level 1 has them
    tabled = leaf_table_case(lgraph) if schedule.leaf_tables and has_pre and not schedule.refactor else None
    # the params the lowered cases read (with the tables, the leaf case's own are read by the
    # tables' recipes only: no buffer of the program)
    # the levels' nodes with a leaf child read its projections from level 1's tables
    # (lowering.leaf_kids); not with recursive unrolling, whose units walk the nodes themselves
    kid_cases = leaf_kid_cases(lgraph) if (schedule.leaf_kids and has_pre and not schedule.refactor
                                           and schedule.recursive_unroll == 1) else ()
    used_params = _used_params(graph, [c for c in graph.cases if tabled is None or c.name != "leaf"]
                               + ([tabled] if tabled is not None else []) + list(kid_cases))
    derived = {d.name: d for d in graph.derived}
    param_buf = {p: _ident(names, _param_base(p, derived)) for p in used_params}
    input_buf = {}
    for inp in graph.node_inputs:
        input_buf[inp.name] = "word_ids" if inp.kind == "word" else "features"
    if len([i for i in graph.node_inputs if i.kind == "features"]) > 1 or len(
        [i for i in graph.node_inputs if i.kind == "word"]) > 1:
        raise LoweringError(f"graph {graph.name!r}: at most one word input and one feature input are supported")
    ctx = LowerContext(
        graph=lgraph, dtype=dtype, names=names, param_buf=param_buf, state_buf=state_buf,
        input_buf=input_buf, fuse=schedule.fuse,
        group_barrier=caps.has_grid and caps.group_barrier,
    )
    ctx.schedule_nest = lambda stmt, var, extent, reduces: schedule_nest(stmt, var, extent, reduces, schedule, caps, ctx)
    leaf = CaseLowering(ctx, tabled or lgraph.case("leaf"), "l")
    if tabled is not None:
        notes.append("leaf_tables: the leaf loop reads its states from the leaf-state tables ("
                     + ", ".join(param_buf[v.attr("name")] for v in tabled.values if v.op == "param") + ")")
    internal = CaseLowering(ctx, lgraph.case("internal"), "n")
    pre = CaseLowering(ctx, lgraph.case("preterminal"), "p") if has_pre else None
    kids = [CaseLowering(ctx, c, f"k{i}") for i, c in enumerate(kid_cases)]
    if kids:
        notes.append(f"leaf_kids: each level runs {len(kids) + 1} node loops (no leaf child, "
                     + ", ".join(f"child {i} a leaf" for i in range(len(kids)))
                     + f"), its nodes in the order {ORDER_BUFFER}; a leaf child's projections are "
                     "rows of level 1's tables")

    N, L, NL = Var("N"), Var("L"), Var("NL")
    lvl = Var("l")

    def node_range(level: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
        return Load("level_offsets", (level,)), Load("level_offsets", (level + 1,))

    u, v = Var("u"), Var("v")
    nk = node_loop_kind(schedule, caps)  # the node loops are built with their parallel kind
    if schedule.leaf_specialization:
        leaf_loop: ir.Stmt | None = ir.For("u", 0, NL, leaf.emit(u), nk)
        first = 2 if pre is not None else 1

        def level_body(level: ir.Expr) -> ir.Stmt:
            if kids:
                return _kid_loops([internal] + kids, level, nk)
            lo, hi = node_range(level)
            return ir.For("v", lo, hi, internal.emit(v), nk)
    else:
        leaf_loop = None
        first = 0
        leaf_body = leaf.emit(v)
        internal_body = internal.emit(v)

        def level_body(level: ir.Expr) -> ir.Stmt:
            lo, hi = node_range(level)
            is_leaf = ir.eq(Load("child_offsets", (v + 1,)), Load("child_offsets", (v,)))
            return ir.For("v", lo, hi, ir.If(is_leaf, leaf_body, internal_body), nk)

    def pre_loop() -> ir.Stmt:  # level 1 only: every child a leaf
        assert pre is not None
        lo, hi = node_range(Const(1))
        return ir.For("w", lo, hi, pre.emit(Var("w")), nk)

    grid = caps.has_grid
    unit_levels: tuple[int, ...] = ()
    if schedule.recursive_unroll > 1:
        unit_levels = (schedule.recursive_unroll, first)
        node_body = internal.emit(v) if schedule.leaf_specialization else ir.If(
            ir.eq(Load("child_offsets", (v + 1,)), Load("child_offsets", (v,))), leaf_body, internal_body)
        level_body = _unit_phase(node_body, nk, ctx.group_barrier)
        notes.append(f"recursive_unroll={schedule.recursive_unroll}: levels {first}..L-1 run as phases of "
                     f"{schedule.recursive_unroll} levels, each a parallel loop over work units (a parent "
                     f"with its children, in order); the level-loop transforms (interchange, node jam, "
                     f"node chunks) do not apply to them")
    steps = (Const(0), Var("P")) if unit_levels else (first, L)  # what the level loop runs over
    form = schedule.kernel_form
    if form in ("single", "auto") and caps.single_group_form and not (caps.grid_barrier if grid else caps.single_call):
        form = "per_level"  # the backend derives its one-work-group kernel from this program
    elif form == "single" and grid and not caps.grid_barrier:
        notes.append("kernel_form=single needs a grid barrier this target lacks: used per_level")
        form = "per_level"
    if form == "single":
        parts: list[ir.Stmt] = []
        if leaf_loop is not None:
            parts.append(leaf_loop)
            if grid:
                parts.append(ir.Barrier("grid"))
        if pre is not None:
            parts.append(pre_loop())
            if grid:
                parts.append(ir.Barrier("grid"))
        level_parts = [level_body(lvl)] + ([ir.Barrier("grid")] if grid else [])
        parts.append(ir.For("l", *steps, ir.seq(*level_parts)))
        kernels: tuple[ir.Kernel, ...] = (ir.Kernel("main", (), ir.seq(*parts)),)
        host: tuple = (ir.Launch("main"),)
    else:
        kernels = (ir.Kernel("level", ("l",), level_body(lvl)),)
        host = (ir.HostFor("lh", *steps, (ir.Launch("level", (Var("lh"),)),)),)
        if pre is not None:
            kernels = (ir.Kernel("preterminal", (), pre_loop()),) + kernels
            host = (ir.Launch("preterminal"),) + host
        if leaf_loop is not None:
            kernels = (ir.Kernel("leaves", (), leaf_loop),) + kernels
            host = (ir.Launch("leaves"),) + host

    # a level-1 loop reads level_offsets[2]: such a program has at least two levels
    sizes = (ir.Size("N"), ir.Size("E"), ir.Size("L", lo=2 if pre is not None else 0), ir.Size("NL", hi=N))
    buffers = _index_buffers(graph, dtype) + (_kid_buffers(len(kids) + 1) if kids else ()) + tuple(
        ir.Buffer(param_buf[p], dtype, _param_shape(graph, p), "param") for p in used_params
    ) + tuple(
        ir.Buffer(state_buf[s.name], dtype, (N,) + s.shape, "temp" if s.name in scratch else "output")
        for s in lgraph.states
    ) + tuple(ctx.temps)
    if unit_levels:
        sizes, buffers = sizes + _UNIT_SIZES, buffers[:3] + _unit_buffers() + buffers[3:]
    program = ir.Program(_ident(NameGen(set()), graph.name.lower()), sizes, buffers, kernels, host)
    program = ir.simplify(program)  # type: ignore[assignment]
    program, sched_notes = apply_schedule(program, schedule, caps, ctx)
    notes.extend(sched_notes)
    if kids:
        program, fused = fuse_class_loops(program)
        if fused:
            notes.append(f"leaf_kids: {fused} level loops run each phase of their classes' node loops "
                         "in one parallel loop")
    verify(program, caps)
    return Lowered(
        graph=graph, program=program, schedule=schedule, dtype=dtype,
        param_names=tuple((p, param_buf[p]) for p in used_params),
        state_names=tuple((s.name, state_buf[s.name]) for s in graph.states),
        notes=tuple(notes), provenance=tuple((provenance or {}).items()), unit_levels=unit_levels,
    )


# ---------------------------------------------------------------------------------- helpers

_UNIT_SIZES = (ir.Size("P"), ir.Size("U"), ir.Size("NU"))


def _unit_buffers() -> tuple[ir.Buffer, ...]:
    """The work-unit arrays of an unrolled program (``cortex.core.linearize.units``)."""
    N, U, NU, P = Var("N"), Var("U"), Var("NU"), Var("P")
    return (
        ir.Buffer("phase_offsets", "int32", (P + 1,), "index", (Const(0), U), monotone=True),
        ir.Buffer("unit_offsets", "int32", (U + 1,), "index", (Const(0), NU), monotone=True),
        ir.Buffer("unit_nodes", "int32", (NU,), "index", (Const(0), N - 1)),
    )


def _kid_buffers(classes: int) -> tuple[ir.Buffer, ...]:
    """The per-call node order of a program with leaf-kid loops (``lowering.leaf_kids``) whose
    levels have ``classes`` node loops."""
    N, L, k = Var("N"), Var("L"), Const(classes)
    return (
        ir.Buffer(ORDER_BUFFER, "int32", (N,), "index", (Const(0), N - 1)),
        ir.Buffer(OFFSETS_BUFFER, "int32", (L * k + 1,), "index", (Const(0), N), monotone=True),
    )


def _kid_loops(cases: list[CaseLowering], level: ir.Expr, kind: str) -> ir.Stmt:
    """A level as one node loop per class of :func:`~cortex.core.lowering.leaf_kids.leaf_kid_order`
    (``cases[c]`` for class ``c``), each over its range of the order, the node ``v`` read from
    it; annotated ``nodes`` (independent iterations: the classes partition the level)."""
    k = len(cases)
    loops = []
    for c, case in enumerate(cases):
        lo = Load(OFFSETS_BUFFER, (level * k + c,))
        hi = Load(OFFSETS_BUFFER, (level * k + c + 1,))
        body = ir.Let("v", Load(ORDER_BUFFER, (Var("vi"),)), case.emit(Var("v")))
        loops.append(ir.For("vi", lo, hi, body, kind, annotations=("nodes",)))
    return ir.seq(*loops)


def _unit_phase(node_body: ir.Stmt, kind: str, group_barrier: bool):
    """``level_body`` of an unrolled program: phase ``ph``'s units in parallel (``kind``), each
    unit's nodes in order, ``v`` bound to the node; on a grid target a group barrier after each
    node (the next node of the unit reads what the group's threads wrote)."""
    g, gi = Var("g"), Var("gi")
    body = ir.seq(node_body, ir.Barrier("group")) if group_barrier else node_body

    def phase(ph: ir.Expr) -> ir.Stmt:
        nodes = ir.For("gi", Load("unit_offsets", (g,)), Load("unit_offsets", (g + 1,)),
                       ir.Let("v", Load("unit_nodes", (gi,)), body))
        return ir.For("g", Load("phase_offsets", (ph,)), Load("phase_offsets", (ph + 1,)), nodes, kind)
    return phase



def _ident(names: NameGen, raw: str) -> str:
    """A C identifier for a graph name (params may be 'stack[W_i,W_o]'), unique in the program."""
    base = re.sub(r"[^0-9A-Za-z_]+", "_", raw).strip("_") or "p"
    if base[0].isdigit():
        base = "p_" + base
    if base in _C_MACROS or re.match(r"M_[A-Z0-9_]+$", base) and base.upper() == base:
        base = base + "_"  # math.h's M_* constants and other macros: keep the name, dodge the macro
    return names.fresh(base)


def _param_base(name: str, derived: dict) -> str:
    """A short readable name: derived params are named after their first argument's stem and
    recipe (``stack[U_i,U_o,U_u]`` -> ``U_stack``, ``embed_linear[E,...]`` -> ``E_proj``,
    ``leaf_state[h]`` -> ``leaf_h``, ``embed_linear[leaf_state[h],...]`` -> ``leaf_h_proj``)."""
    d = derived.get(name)
    if d is None:
        return name
    if d.recipe == "leaf_state":  # leaf_state[h] -> leaf_h
        return f"leaf_{d.attr('state')}"
    stem = _param_base(d.args[0], derived)
    if derived.get(d.args[0]) is None or derived[d.args[0]].recipe != "leaf_state":
        stem = stem.split("_")[0]  # leaf_h's projection stays leaf_h_proj
    return f"{stem}_{'stack' if d.recipe == 'concat0' else 'proj'}"


def _used_params(graph: RecursiveGraph, cases: Sequence[Case] | None = None) -> list[str]:
    """The params ``cases`` (by default every case of ``graph``) read, in order."""
    seen: list[str] = []
    for case in graph.cases if cases is None else cases:
        for v in case.values:
            if v.op == "param" and v.attr("name") not in seen:
                seen.append(v.attr("name"))
    return seen


def _param_shape(graph: RecursiveGraph, name: str) -> tuple[int, ...]:
    return graph.param_specs()[name].shape


def _index_buffers(graph: RecursiveGraph, dtype: str) -> tuple[ir.Buffer, ...]:
    N, L, E = Var("N"), Var("L"), Var("E")
    out = [
        ir.Buffer("level_offsets", "int32", (L + 1,), "index", (Const(0), N), monotone=True),
        ir.Buffer("child_offsets", "int32", (N + 1,), "index", (Const(0), E), monotone=True),
        ir.Buffer("child_ids", "int32", (E,), "index", (Const(0), N - 1)),
    ]
    if graph.arity is not None:
        out.append(ir.Buffer("child_table", "int32", (N, graph.arity), "index", (Const(-1), N - 1)))
    for inp in graph.node_inputs:
        if inp.kind == "word":
            out.append(ir.Buffer("word_ids", "int32", (N,), "index", (Const(-1), Const(int(inp.vocab) - 1))))
        else:
            out.append(ir.Buffer("features", dtype, (N, inp.shape[0]), "input"))
    return tuple(out)


def _reads_input(graph: RecursiveGraph, case: str, name: str) -> bool:
    return any(v.op == "input" and v.attr("name") == name for v in graph.case(case).values)


@dataclass(frozen=True)
class _BindPlan:
    """What ``bind_batch`` checks and converts, worked out once per Lowered (not per call)."""

    arity: int | None
    # (input name, vocab size, the cases that read it: "leaf" and/or "internal")
    word: tuple[str, int, tuple[str, ...]] | None
    features: tuple[str, tuple[int, ...]] | None
    dtype: np.dtype
    min_levels: int  # the program's least L: a batch with fewer levels gets empty ones appended
    kid_positions: int = 0  # child positions of the leaf-kid loops (lowering.leaf_kids); 0: none


def _plan_of(low: Lowered) -> _BindPlan:
    plan = low.__dict__.get("_bind_plan")
    if plan is None:
        g = low.graph
        word = features = None
        for inp in g.node_inputs:
            if inp.kind == "word":
                parts = tuple(case for case in ("leaf", "internal")
                              if _reads_input(g, case, inp.name))
                word = (inp.name, int(inp.vocab), parts)
            else:
                features = (inp.name, tuple(inp.shape))
        min_levels = next(s.lo for s in low.program.sizes if s.name == "L")
        kids = any(b.name == ORDER_BUFFER for b in low.program.buffers)
        plan = _BindPlan(g.arity, word, features, np.dtype(low.dtype), min_levels,
                         int(g.arity or 0) if kids else 0)
        low.__dict__["_bind_plan"] = plan  # a cache on the frozen dataclass (not a field)
    return plan


def _bind_batch(low: Lowered, batch: LinearizedBatch) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    if not isinstance(batch, LinearizedBatch):
        raise BatchTypeError(f"expected a LinearizedBatch (made by exe.linearize(structures) or "
                             f"cortex.data.linearize(...)), got {type(batch).__name__}; to run "
                             f"on structures, call the executable itself: exe(structures)")
    plan = _plan_of(low)
    n = int(batch.num_nodes)
    lo = np.ascontiguousarray(batch.level_offsets, dtype=INDEX_DTYPE)
    nl = lo.item(1) if len(lo) > 1 else 0
    co = np.ascontiguousarray(batch.child_offsets, dtype=INDEX_DTYPE)
    e = len(batch.child_ids)
    k = plan.arity
    table = batch.child_table
    if k is not None:
        # every internal node has exactly k children. O(1) when the table is k wide: no node
        # has more than the table's width (an invariant), so k * (internal count) children
        # means k each; anything else is checked node by node (and named)
        if not (table.shape[1] == k and co.item(n) - co.item(nl) == k * (n - nl)):
            arity = np.diff(co.astype(np.int64))
            bad = np.nonzero(arity[nl:] != k)[0]
            if len(bad):
                node = nl + int(bad[0])
                raise BatchMismatchError(
                    f"model {low.graph.name!r} has fixed arity {k}, but internal node {node} "
                    f"has {int(arity[node])} children; linearize with arity={k}"
                )
    bufs: dict[str, np.ndarray] = {
        "level_offsets": lo,
        "child_offsets": co,
        # E may be 0 (only leaves): keep one padding entry so no buffer is empty
        "child_ids": np.ascontiguousarray(batch.child_ids, dtype=INDEX_DTYPE) if e
        else np.zeros(1, dtype=INDEX_DTYPE),
    }
    if k is not None:
        if table.shape == (n, k) and table.dtype == INDEX_DTYPE and table.flags.c_contiguous:
            bufs["child_table"] = table  # already the [N, k] int32 table (read-only is fine)
        else:
            padded = np.full((n, k), -1, dtype=INDEX_DTYPE)
            w = min(k, batch.max_arity)
            padded[:, :w] = table[:, :w]
            bufs["child_table"] = padded
    if plan.word is not None:
        name, vocab, parts = plan.word
        if batch.word_ids is None:
            raise BatchMismatchError(f"model {low.graph.name!r} reads token ids ({name!r}) but the batch has none")
        ids = np.ascontiguousarray(batch.word_ids, dtype=INDEX_DTYPE)
        for part in parts:
            a, b = (0, nl) if part == "leaf" else (nl, n)
            # as unsigned, a negative id is >= 2^31 > vocab: one reduction checks both ends
            if b > a and int(np.maximum.reduce(ids[a:b].view(np.uint32))) >= vocab:
                seg = ids[a:b]
                node = a + int(np.nonzero((seg < 0) | (seg >= vocab))[0][0])
                raise BatchMismatchError(
                    f"model {low.graph.name!r}: node {node} needs a token id in [0, {vocab}) for "
                    f"{name!r} but has {int(ids[node])}"
                )
        bufs["word_ids"] = ids
    if plan.features is not None:
        name, shape = plan.features
        if batch.features is None:
            raise BatchMismatchError(f"model {low.graph.name!r} reads features ({name!r}) but the batch has none")
        f = np.asarray(batch.features)
        if f.shape != (n,) + shape:
            raise BatchMismatchError(
                f"model {low.graph.name!r}: features are {list(f.shape)}, expected [{n}, {shape[0]}]"
            )
        bufs["features"] = np.ascontiguousarray(f, dtype=plan.dtype)
    if len(lo) - 1 < plan.min_levels:  # e.g. all leaves: an empty level 1 for the level-1 loop
        lo = np.concatenate([lo, np.full(plan.min_levels + 1 - len(lo), lo[-1] if len(lo) else 0, dtype=INDEX_DTYPE)])
        bufs["level_offsets"] = lo
    sizes = {"N": n, "E": max(e, 1), "L": len(lo) - 1, "NL": nl}
    if low.unit_levels:
        _bind_units(batch, low.unit_levels, bufs, sizes)
    if plan.kid_positions:
        _bind_kid_order(batch, plan.kid_positions, bufs, nl)
    return bufs, sizes


def _bind_kid_order(batch: LinearizedBatch, positions: int, bufs: dict[str, np.ndarray], nl: int) -> None:
    """The leaf-kid node order (``lowering.leaf_kids.leaf_kid_order``) into ``bufs``; kept on a
    sealed batch as :func:`_bind_units` keeps its units."""
    lo = bufs["level_offsets"]
    memo = batch.__dict__.setdefault("_kid_order", {}) if batch._is_sealed() else {}
    key = (positions, len(lo))
    got = memo.get(key)
    if got is None:
        got = memo[key] = leaf_kid_order(lo, bufs["child_table"], nl, positions)
    bufs[ORDER_BUFFER], bufs[OFFSETS_BUFFER] = got


def _bind_units(batch: LinearizedBatch, unit_levels: tuple[int, ...], bufs: dict[str, np.ndarray],
                sizes: dict[str, int]) -> None:
    """The work-unit arrays of an unrolled program, into ``bufs`` and ``sizes`` (P, U, NU). They
    are a function of the batch's arrays: a sealed batch (read-only arrays, see
    ``linearize.structure``) keeps them, so a batch run again, or by several unrolled
    executables, builds them once; any other batch builds them on every call."""
    levels, first = unit_levels
    lo = bufs["level_offsets"]
    memo = batch.__dict__.setdefault("_units", {}) if batch._is_sealed() else {}
    key = (levels, first, len(lo))
    units = memo.get(key)
    if units is None:
        units = memo[key] = unroll_units(lo, bufs["child_offsets"], bufs["child_ids"], first, levels)
    nu = len(units.unit_nodes)
    bufs["phase_offsets"], bufs["unit_offsets"] = units.phase_offsets, units.unit_offsets
    # NU may be 0 (only leaves): one padding entry keeps the buffer non-empty, never read
    bufs["unit_nodes"] = units.unit_nodes if nu else np.zeros(1, dtype=INDEX_DTYPE)
    sizes.update(P=units.phases, U=len(units.unit_offsets) - 1, NU=max(nu, 1))
