"""Loop-shape schedule transforms: wide vector nests, hidden blocks, node chunks, row prefetches.

Pipeline position: schedule transforms (``LoopProgram -> LoopProgram``) that
``cortex.core.lowering.apply_schedule.apply_loop_schedule`` applies when their knobs ask for them, around
the level interchange and the node jam. Target-neutral and pure; each returns the program and
how many loops it changed (for the notes). The tests check each against the untransformed
program on the interpreter.

* :func:`widen_vector_nests` (``wide_lanes``) -- a matrix nest's split column loop merged into
  one wide vector: ``for i: for jw: vectorized for jv: let j = jw*W + jv; S`` ->
  ``for i: vectorized for j in 0..n*W: S``.
* :func:`block_hidden_loops` (``hidden_jam``) -- a node loop's hidden loop cut into blocks of
  ``J`` units with a ``vectorized`` inner loop, the shape the node jam works on.
* :func:`chunk_nodes` (``node_chunk``, ``hidden_tiles``) -- a parallel node loop run as work
  units of ``chunk`` nodes in lockstep (a weight row read for one node is reused by the next).
* :func:`insert_prefetches` (``prefetch``) -- a node loop that gathers table rows by a per-node
  index prefetches the rows of the node ``d`` ahead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from cortex.core import loopir as ir
from cortex.core.lowering.jam_fuse import free_names, names_of
from cortex.core.lowering.level_interchange import is_node_loop, node_lets, node_name, rows_independent
from cortex.core.lowering.transforms import rewrite_loops

#: Rows of at most this many bytes are prefetched whole (a row of a 5H-wide table at H=256 is 5 KB).
PREFETCH_MAX_ROW_BYTES = 16384


def _rewrite(program: ir.Program, f: Callable[[ir.Node], ir.Node | None]) -> tuple[ir.Program, int]:
    """``ir.transform`` of every kernel by ``f``, counting the nodes ``f`` replaced."""
    count = 0

    def g(n: ir.Node) -> ir.Node | None:
        nonlocal count
        out = f(n)
        if out is not None:
            count += 1
        return out

    kernels = tuple(replace(k, body=ir.transform(k.body, g)) for k in program.kernels)
    return replace(program, kernels=kernels), count


def _outermost_parallel(program: ir.Program, f: Callable[[ir.For], ir.Stmt | None]) -> tuple[ir.Program, int]:
    """``f`` applied to every parallel loop that is not inside another parallel loop."""

    def visit(loop: ir.For) -> ir.Stmt | None:
        if loop.kind == "parallel":
            return f(loop) or loop
        return loop if loop.kind in ("gpu_group", "gpu_thread", "vectorized") else None

    return rewrite_loops(program, visit)


# --------------------------------------------------------------------------- wide vectors


def widen_vector_nests(program: ir.Program, max_lanes: int) -> tuple[ir.Program, int]:
    """``for i: for jw in 0..n: vectorized for jv in 0..W: let j = jw*W + jv; S`` ->
    ``for i: vectorized for j in 0..n*W: S`` when ``n*W <= max_lanes`` and S uses neither
    ``jw`` nor ``jv`` (the lowering's split of a matrix nest's column loop).

    One vector of ``n*W`` lanes is ``n`` registers that share every lane-invariant operand:
    in ``sum_k A[i, k] * B[k, j]`` the broadcast of ``A[i, k]`` and the loop overhead serve
    ``n`` FMAs instead of one (MV-RNN's 64x64 products: 1.25 loads per FMA instead of 2, and
    ``n`` independent accumulator chains). Only inside another loop (a row loop): a node
    loop's own hidden loops are the ones interchanged and jammed, where ``n`` registers per
    node times the jammed nodes would not fit in the register file."""

    def split_form(st: ir.Stmt) -> ir.For | None:
        if not (isinstance(st, ir.For) and st.kind == "serial" and isinstance(st.body, ir.For)):
            return None
        vec = st.body
        n, w = ir.const_int(st.stop), ir.const_int(vec.stop)
        if (vec.kind != "vectorized" or ir.const_int(st.start) != 0 or ir.const_int(vec.start) != 0
                or n is None or w is None or n * w > max_lanes or not isinstance(vec.body, ir.Let)):
            return None
        let = vec.body
        jw, jv = ir.Var(st.var), ir.Var(vec.var)
        if let.value not in (ir.BinOp("+", ir.BinOp("*", jw, ir.Const(w)), jv),
                             ir.BinOp("+", jv, ir.BinOp("*", jw, ir.Const(w)))):
            return None
        if free_names(let.body) & {st.var, vec.var}:
            return None
        return ir.For(let.var, ir.Const(0), ir.Const(n * w), let.body, "vectorized")

    def f(node: ir.Node) -> ir.Node | None:
        if isinstance(node, ir.For) and node.kind == "serial" and not is_node_loop(node):
            wide = split_form(node.body)
            if wide is not None:
                return replace(node, body=wide)
        return None

    if max_lanes < 2:
        return program, 0
    return _rewrite(program, f)


# --------------------------------------------------------------------------- hidden blocks


def _hidden_loop(body: ir.Stmt) -> tuple[ir.For, str, ir.Stmt, int, int] | None:
    """A node loop body's hidden loop as ``(loop, var, statement per unit, first, count)``:
    ``for j in a..b: S`` or the lowering's split ``for jw in 0..n: vectorized for jv in 0..W:
    let j = jw*W + jv; S`` (with its tail guard ``if j < H: S`` when ``W`` does not divide
    ``H``: then ``count`` is ``H``)."""
    found = _hidden_split(body)
    if found is None:
        return None
    loop, var, per_unit, first, count = found
    if (isinstance(per_unit, ir.If) and per_unit.orelse is None and isinstance(per_unit.cond, ir.Cmp)
            and per_unit.cond.op == "<" and per_unit.cond.a == ir.Var(var)
            and ir.const_int(per_unit.cond.b) is not None and first < ir.const_int(per_unit.cond.b) <= first + count):  # type: ignore[operator]
        return loop, var, per_unit.then, first, ir.const_int(per_unit.cond.b) - first  # type: ignore[operator]
    return found


def _hidden_split(body: ir.Stmt) -> tuple[ir.For, str, ir.Stmt, int, int] | None:
    if not isinstance(body, ir.For):
        return None
    a, b = ir.const_int(body.start), ir.const_int(body.stop)
    if a is None or b is None or b <= a:
        return None
    inner = body.body
    if (isinstance(inner, ir.For) and inner.kind == "vectorized" and a == 0 and isinstance(inner.body, ir.Let)
            and ir.const_int(inner.start) == 0 and ir.const_int(inner.stop) is not None):
        w = ir.const_int(inner.stop)
        let = inner.body
        jw, jv = ir.Var(body.var), ir.Var(inner.var)
        if let.value in (ir.BinOp("+", ir.BinOp("*", jw, ir.Const(w)), jv),
                         ir.BinOp("+", jv, ir.BinOp("*", jw, ir.Const(w)))) and not (
                free_names(let.body) & {body.var, inner.var}):
            return body, let.var, let.body, 0, b * w  # type: ignore[operator]
    if any(isinstance(n, ir.For) for n in ir.walk(inner)):
        return None
    return body, body.var, inner, a, b - a


def rows_apart(stmt: ir.Stmt, var: str, weights: set[str]) -> bool:
    """Does a reduction in the nest read a non-weight buffer (node data, which keeps its
    layout) at the hidden variable ``var`` in a leading index and the reduction variable in
    the last one? Lanes along ``var`` would then be a whole row apart."""
    for r in ir.walk(stmt):
        if not isinstance(r, ir.Reduce):
            continue
        for ld in ir.walk(r.body):
            if not isinstance(ld, ir.Load) or ld.buffer in weights or len(ld.index) < 2:
                continue
            last = ld.index[-1]
            lead = ld.index[:-1]
            if last == ir.Var(r.var) and any(any(isinstance(m, ir.Var) and m.name == var for m in ir.walk(x))
                                              for x in lead):
                return True
    return False


def block_hidden_loops(program: ir.Program, width: int) -> tuple[ir.Program, int]:
    """Every node loop with reductions whose body is ``lets; for j in a..a+n: S`` (or the
    lowering's split of it), or lets around several such loops in a row (a level computed in
    phases, each reading what the earlier ones stored: TreeGRU's reset gate before its
    candidate), with each hidden loop whose ``n`` is a multiple of ``width`` and whose hidden
    iterations are independent (a parallel or vectorized loop, or
    :func:`~cortex.core.lowering.level_interchange.rows_independent`) rewritten as
    ``for jb in 0..n/width: vectorized for jl in 0..width: let j = a + jb*width + jl; S`` --
    unless it already has that shape, or its sums read node data with the hidden unit in a
    leading index (:func:`rows_apart`: lanes would be a row apart). A phase that does not
    qualify is left as it is; the phases keep their order, so each still runs after the ones
    it reads."""
    names = names_of(program)
    params = {b.name for b in program.buffers if b.role == "param"}

    def block(loop_body: ir.Stmt, node: ir.For) -> ir.Stmt | None:
        found = _hidden_loop(loop_body)
        if found is None:
            return None
        loop, var, per_unit, first, count = found
        if count % width:
            return None
        if isinstance(loop.body, ir.For) and loop.body.kind == "vectorized" and ir.const_int(loop.body.stop) == width:
            return None  # already blocks of `width`
        if loop.kind == "serial" and not (var != loop.var or rows_independent(loop, node_name(node))):
            return None
        if rows_apart(loop, var, params):
            return None  # lanes a row apart in node data: the row loop stays scalar (schedule_nest)
        jb, jl = names.fresh(f"{var}b"), names.fresh(f"{var}l")
        unit = ir.simplify(ir.Const(first) + ir.Var(jb) * width + ir.Var(jl))
        kind = "parallel" if loop.kind == "parallel" else "serial"
        return ir.For(jb, 0, count // width, ir.For(jl, 0, width, ir.Let(var, unit, per_unit), "vectorized"), kind)  # type: ignore[arg-type]

    def f(node: ir.Node) -> ir.Node | None:
        if not (isinstance(node, ir.For) and is_node_loop(node)) or not any(
                isinstance(n, ir.Reduce) for n in ir.walk(node.body)):
            return None  # only loops with reductions are jammed
        lets, body = node_lets(node)
        phases = list(body.stmts) if isinstance(body, ir.Seq) else [body]
        blocked = [block(p, node) for p in phases]
        if all(b is None for b in blocked):
            return None
        out: ir.Stmt = ir.seq(*(b if b is not None else p for b, p in zip(blocked, phases)))
        for name, value in reversed(lets):
            out = ir.Let(name, value, out)
        return replace(node, body=out)

    if width < 1:
        return program, 0
    return _rewrite(program, f)


# --------------------------------------------------------------------------- node chunks


def _chunk_loop(loop: ir.For, chunk: int, tiles: int, fresh: str) -> ir.Stmt | None:
    """``for v (parallel): let..; for j (node-independent bounds): B`` ->
    ``for g (parallel): for j [in tile]: for v in chunk: let..; B``; None if no match.

    Serial hidden loops keep their whole range (``g`` counts node chunks); parallel hidden loops
    with constant bounds are also cut into ``tiles`` tiles (``g`` counts chunks x tiles)."""
    if not any(isinstance(n, ir.Reduce) for n in ir.walk(loop.body)):
        # no weight row to reuse: whole nodes per chunk, the contiguous hidden loop innermost
        # (fewer, bigger work units: on PoCL each work-group costs a few microseconds)
        g = ir.Var(fresh)
        first = loop.start + g * chunk
        node_loop = ir.For(loop.var, first, ir.minimum(first + chunk, loop.stop), loop.body, "serial")
        count = (loop.stop - loop.start + (chunk - 1)) // chunk
        return ir.For(fresh, 0, count, node_loop, "parallel")
    lets, body = node_lets(loop)
    inner = list(body.stmts) if isinstance(body, ir.Seq) else [body]
    if not inner or not all(isinstance(x, ir.For) for x in inner):
        return None
    serial = all(x.kind in ("serial", "unrolled", "vectorized") for x in inner)  # type: ignore[union-attr]
    parallel = all(x.kind == "parallel" and ir.const_int(x.start) is not None  # type: ignore[union-attr]
                   and ir.const_int(x.stop) is not None for x in inner)  # type: ignore[union-attr]
    if not (serial or parallel):
        return None
    bound = {loop.var} | {name for name, _ in lets}
    if any((free_names(x.start) | free_names(x.stop)) & bound for x in inner):  # type: ignore[union-attr]
        return None
    if serial or len(inner) > 1:
        # one tile: a later hidden loop may read what an earlier one wrote at any hidden unit of
        # the node, so a work unit must run every unit of the earlier loop first
        tiles = 1
    else:
        tiles = max(1, min(tiles, ir.const_int(inner[0].stop) - ir.const_int(inner[0].start)))  # type: ignore
    g = ir.Var(fresh)
    lo, hi = loop.start, loop.stop
    first = lo + (g // tiles if tiles > 1 else g) * chunk
    nests = []
    for j in inner:
        assert isinstance(j, ir.For)
        per_node: ir.Stmt = j.body
        for name, value in reversed(lets):
            per_node = ir.Let(name, value, per_node)
        node_loop = ir.For(loop.var, first, ir.minimum(first + chunk, hi), per_node, "serial")
        if tiles > 1:
            a, b = ir.const_int(j.start), ir.const_int(j.stop)
            size = -(-(b - a) // tiles)  # type: ignore[operator]
            start = a + (g % tiles) * size
            nests.append(ir.For(j.var, start, ir.minimum(start + size, b), node_loop, "serial"))
        else:
            nests.append(ir.For(j.var, j.start, j.stop, node_loop, j.kind))
    count = (hi - lo + (chunk - 1)) // chunk
    return ir.For(fresh, 0, count * tiles if tiles > 1 else count, ir.seq(*nests), "parallel")


def chunk_nodes(program: ir.Program, chunk: int, tiles: int = 1) -> tuple[ir.Program, int]:
    """Let each work unit run ``chunk`` nodes in lockstep, hidden unit by hidden unit, so a
    weight row read for one node is reused from L1 by the next ``chunk - 1`` (a node-at-a-time
    GEMV re-reads the whole weight matrix per node: for a TreeLSTM of hidden 256, 2.6 MB).

    Applies to every outermost ``parallel`` node loop whose body is pure lets around loops with
    node-independent bounds. When the body is ONE hidden loop and it is parallel too
    (``parallel="both"``), each chunk is also cut into ``tiles`` hidden tiles: work units over
    (node chunks x hidden tiles), so a level of one node still spreads over several cores (with
    several hidden loops a later one may read any unit an earlier one wrote: no tiles). Legal
    because iterations of a parallel loop are independent, so interleaving them keeps each
    one's own order."""
    if chunk < 2:
        return program, 0
    names = names_of(program)

    def f(loop: ir.For) -> ir.Stmt | None:
        if not is_node_loop(loop):
            return None
        return _chunk_loop(loop, chunk, tiles, names.fresh("cx_chunk"))

    return _outermost_parallel(program, f)


# --------------------------------------------------------------------------- prefetches


def insert_prefetches(program: ir.Program, distance: int) -> tuple[ir.Program, int]:
    """An outermost parallel loop whose body starts ``let x = index[u]`` and loads rows
    ``P[x, :]`` of 2-D params (at most ``PREFETCH_MAX_ROW_BYTES`` a row) first prefetches the
    whole rows of node ``min(u + distance, stop - 1)``.

    Such a loop (the leaves' ``E_proj[word_ids[u], :]``, rows of a table no cache holds) waits
    on memory: each node's rows are a few dozen lines from DRAM, and the out-of-order window
    reaches only the next node's first ones. The index is clamped to 0 (a missing token is -1)."""
    if distance < 1:
        return program, 0
    names = names_of(program)
    roles = {b.name: b for b in program.buffers}

    def f(loop: ir.For) -> ir.Stmt | None:
        body = loop.body
        if not (isinstance(body, ir.Let) and isinstance(body.value, ir.Load)
                and body.value.index == (ir.Var(loop.var),) and roles[body.value.buffer].role == "index"):
            return None
        x = body.var
        rows: list[tuple[str, int]] = []
        for m in ir.walk(body.body):
            if (isinstance(m, ir.Load) and m.buffer in roles and m.buffer not in (n for n, _ in rows)
                    and len(m.index) == 2 and m.index[0] == ir.Var(x)):
                bf = roles[m.buffer]
                cols = ir.const_int(bf.shape[1])
                size = 4 if bf.dtype in ("float32", "int32") else 8
                if bf.role == "param" and cols is not None and 0 < cols * size <= PREFETCH_MAX_ROW_BYTES:
                    rows.append((m.buffer, cols))
        if not rows:
            return None
        u = ir.Var(loop.var)
        ahead = ir.Var(names.fresh(f"{loop.var}_ahead"))
        xn = ir.Var(names.fresh(f"{x}_ahead"))
        hints: ir.Stmt = ir.seq(*(ir.Prefetch(name, (xn, ir.Const(0)), cols) for name, cols in rows), body)
        hints = ir.Let(xn.name, ir.maximum(ir.Load(body.value.buffer, (ahead,)), 0), hints)
        hints = ir.Let(ahead.name, ir.maximum(ir.minimum(u + distance, loop.stop - 1), u), hints)
        return replace(loop, body=hints)

    return _outermost_parallel(program, f)
