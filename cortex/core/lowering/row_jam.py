"""Row jam: rows of a node's matrix nest computed together (the ``row_jam`` knob).

Pipeline position: a schedule transform (``LoopProgram -> LoopProgram``), applied by
``cortex.core.lowering.apply_schedule.apply_loop_schedule`` after the node jam, on the node loops
it left alone. Target-neutral and pure; the tests check the result against the untransformed
program on the interpreter.

A node whose state is a matrix (MV-RNN's ``M = W_M [A; B]``) computes it row by row, each row
a vector over the columns with a reduction per element::

    parallel for v in level:
      lets(v)                                        # the children: ch0 = child_table[v, 0], ...
      for i in 0..R:                                 # rows
        vectorized for j in 0..C: M[v, i, j] = sum(k: W_M[i, k] * M[ch0, k, j]) + ...

Each step of the reduction loads a vector of the child's matrix (``M[ch0, k, 0..C]``) and one
weight per row; a row alone keeps ``C / lanes`` accumulators, too few to hide the latency of
the multiply-adds, and loads the child's vector again for every row. Jammed, a group of rows
shares each vector load and keeps one accumulator set per row: the node jam's fused
reductions (``jam.jam_node_loop``, ``jam_fuse``) with the rows in the place of the nodes and
the child vectors in the place of the weights. The node's lets that the rows read are bound
again inside the row loop (fresh names), so the jam sees the children as its own.

Applies to a serial row loop ``0..R`` directly inside a parallel node loop (not interchanged,
not jammed) whose body is one ``vectorized`` loop holding a reduction and whose rows are
independent (:func:`~cortex.core.lowering.level_interchange.rows_independent`).
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core import loopir as ir
from cortex.core.lowering import jam_fuse as fuse
from cortex.core.lowering.jam import JamOptions, jam_node_loop
from cortex.core.lowering.level_interchange import is_node_loop, node_lets, rows_independent
from cortex.core.lowering.transforms import rewrite_loops


def _is_row_loop(loop: ir.For) -> bool:
    """A row loop around a vector loop whose reductions read a vector shared by the rows (a
    load that varies with the lanes, not with the row: the child matrix's row ``M[ch, k, j]``).
    A GEMV's blocks of hidden units (each row block its own weight vectors, the node's vector
    broadcast) are the node jam's, not this one's."""
    body = loop.body
    if not (loop.kind == "serial" and ir.const_int(loop.start) == 0 and ir.const_int(loop.stop) is not None
            and isinstance(body, ir.For) and body.kind == "vectorized"):
        return False
    row, lane = {loop.var}, {body.var}
    for n in ir.walk(body.body):
        if isinstance(n, ir.Let):
            names = fuse.free_names(n.value)
            if names & row:
                row.add(n.var)
            if names & lane:
                lane.add(n.var)
    for r in ir.walk(body):
        if isinstance(r, ir.Reduce):
            for ld in ir.walk(r.body):
                if isinstance(ld, ir.Load):
                    names = fuse.free_names(ld)
                    if names & lane and not names & row:
                        return True
    return False


def jam_rows_of(node_loop: ir.For, opts: JamOptions, program: ir.Program, names) -> tuple[ir.For, int]:
    """``node_loop`` with each row loop of its body jammed where it applies; and how many."""
    lets, body = node_lets(node_loop)
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    out, count = [], 0
    for s in stmts:
        jammed = None
        if isinstance(s, ir.For) and _is_row_loop(s) and rows_independent(s, node_loop.var):
            used = fuse.free_names(s.body)
            mapping: dict[str, ir.Expr] = {}
            binds: list[tuple[str, ir.Expr]] = []
            for name, value in lets:
                if name in used:
                    fresh = names.fresh(f"{name}_r")
                    binds.append((fresh, ir.substitute(value, mapping)))  # type: ignore[arg-type]
                    mapping[name] = ir.Var(fresh)
            inner: ir.Stmt = ir.substitute(s.body, mapping)  # type: ignore[assignment]
            for name, value in reversed(binds):
                inner = ir.Let(name, value, inner)
            jammed = jam_node_loop(replace(s, body=inner), opts, program, names, independent=True)
        if jammed is not None:
            count += 1
        out.append(jammed if jammed is not None else s)
    if not count:
        return node_loop, 0
    new_body: ir.Stmt = ir.seq(*out)
    for name, value in reversed(lets):
        new_body = ir.Let(name, value, new_body)
    return replace(node_loop, body=new_body), count


def jam_rows(program: ir.Program, opts: JamOptions) -> tuple[ir.Program, int]:
    """``program`` with the row loops of every parallel node loop jammed in groups of
    ``opts.nodes`` rows where that applies (see the module doc); and how many were."""
    if opts.nodes < 2:
        return program, 0
    names = fuse.names_of(program)
    total = 0

    def visit(loop: ir.For) -> ir.Stmt | None:
        nonlocal total
        if loop.kind == "parallel" and is_node_loop(loop):
            new, n = jam_rows_of(loop, opts, program, names)
            total += n
            return new
        return loop if loop.kind in ("gpu_group", "gpu_thread", "vectorized") else None

    program, _ = rewrite_loops(program, visit)
    return program, total
