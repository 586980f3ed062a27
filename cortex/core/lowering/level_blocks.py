"""Level blocks: a large interchanged level run as blocks of nodes (the ``panel_kib`` knob).

Pipeline position: a schedule transform (``LoopProgram -> LoopProgram``), applied by
``cortex.core.lowering.apply_schedule.apply_loop_schedule`` after the level interchange
(``cortex.core.lowering.level_interchange``) and before the node jam (``cortex.core.lowering.jam``),
whose groups it builds inside each block. Target-neutral and pure; the tests check the result
against the untransformed program on the interpreter.

At a large batch a level holds hundreds to thousands of nodes and its GEMVs are one GEMM,
``[nodes x K] x [K x rows]``. The interchanged level runs every hidden block over every node of
the level, so each hidden block re-reads the whole level's gathered rows (the children's states,
the leaves' embedding rows): at hidden 1024 a level of 600 nodes gathers 4.8 MB, more than a
core's L2, once per hidden block. Blocking the node loop keeps a *panel* of those rows in the
cache while the hidden blocks pass over it, the outer loop of a blocked GEMM::

    parallel for jb in hidden blocks:           let lo = start; let hi = stop
      for v in lo..hi:                  ->      let nb = ceil((hi - lo) / B); let size = ...
        lets; B(v, jb)                          for vb in 0..nb:                  # serial
                                                  parallel for jb in hidden blocks:
                                                    let first = lo + vb * size
                                                    let last = min(first + size, hi)
                                                    if lo <= first and last <= hi:  # always true
                                                      for v in first..last: lets; B(v, jb)  # jammed

``B`` is the most nodes whose gathered rows fit in ``panel_kib`` KiB (a multiple of the jam's
group); a level is cut into ``nb`` blocks of equal size (rounded up to whole groups), so a level
that fits runs as one block, as before, and a block of a big level is never a sliver. Each block
ends with the parallel loop's barrier: a level of ``nb`` blocks costs ``nb - 1`` more barriers,
and the weights of each thread's hidden blocks are read once per block rather than once per
level. So blocks are large (the default panel is a core's cache), and a nest is blocked only
where each thread's share of its weights fits in a core's cache too (``weight_budget``: each
block then re-reads them from there). TreeLSTM on a 2-core AVX-512 machine (2 MiB L2), in one
process, interleaved: hidden 256, batch 1000 (levels of up to 10000 nodes, 12 MB of child rows
at level 2) 0.6-0.9x the time; hidden 1024, batch 100 (20 MB of weights per thread) was
1.07-1.13x slower with blocks, hence the budget. Legal because the nodes of a level are independent (``is_node_loop``) and each
parallel loop's hidden blocks were already independent.
"""

from __future__ import annotations

from cortex.core import loopir as ir
from cortex.core.lowering.cases import NameGen
from cortex.core.lowering.jam import JamOptions, jam_node_loop
from cortex.core.lowering.jam_fuse import free_names, names_of
from cortex.core.lowering.level_interchange import is_node_loop, node_lets
from cortex.core.lowering.transforms import rewrite_loops


def _row_bytes(buf: ir.Buffer, axes: int) -> int:
    """Bytes of ``buf`` past its first ``axes`` axes (0 when a size is not a constant)."""
    n = 4 if buf.dtype == "float32" else 8
    for d in buf.shape[axes:]:
        size = ir.const_int(d)
        if size is None:
            return 0
        n *= size
    return n


def _gathered(node_loop: ir.For, program: ir.Program) -> set[str]:
    """The node loop's lets read from an index buffer (a child, a word)."""
    lets, _ = node_lets(node_loop)
    index_bufs = {b.name for b in program.buffers if b.role == "index"}
    return {name for name, value in lets
            if any(isinstance(n, ir.Load) and n.buffer in index_bufs for n in ir.walk(value))}


def weight_bytes(node_loop: ir.For, program: ir.Program) -> int:
    """Bytes of the parameters the node loop's reductions read (whole buffers): what every block
    of nodes reads again."""
    params = {b.name: b for b in program.buffers if b.role == "param"}
    used = {ld.buffer for r in ir.walk(node_loop.body) if isinstance(r, ir.Reduce)
            for ld in ir.walk(r.body) if isinstance(ld, ir.Load) and ld.buffer in params}
    return sum(_row_bytes(params[name], 0) for name in used)


def gathered_row_bytes(node_loop: ir.For, program: ir.Program) -> int:
    """Bytes of the rows one node's reductions gather: each distinct row ``buf[x, ...]`` whose
    first index is a node let read from an index buffer (a child, a word), counted once."""
    gathered = _gathered(node_loop, program)
    buffers = {b.name: b for b in program.buffers}
    rows: set[tuple[str, ir.Expr]] = set()
    for r in ir.walk(node_loop.body):
        if not isinstance(r, ir.Reduce):
            continue
        for ld in ir.walk(r.body):
            if (isinstance(ld, ir.Load) and ld.index and ld.buffer in buffers
                    and isinstance(ld.index[0], ir.Var) and ld.index[0].name in gathered):
                rows.add((ld.buffer, ld.index[0]))
    sizes = [_row_bytes(buffers[name], 1) for name, _ in rows]
    return 0 if 0 in sizes else sum(sizes)  # a row of unknown size: not blocked


def block_level(loop: ir.For, panel_bytes: int, weight_budget: int, opts: JamOptions | None,
                program: ir.Program, names: NameGen) -> ir.Stmt | None:
    """An interchanged level ``parallel for jb: for v in level: ...`` run in blocks of nodes
    (see the module doc), its blocks jammed with ``opts``; None when it does not apply: not
    that shape, no gathered rows, or weights of more than ``weight_budget`` bytes (a thread's
    share), which every block would read again from beyond the cache."""
    node = loop.body
    if not (loop.kind == "parallel" and isinstance(node, ir.For) and node.kind == "serial"
            and is_node_loop(node)):
        return None
    if (free_names(loop.start) | free_names(loop.stop)) & {node.var}:
        return None
    row = gathered_row_bytes(node, program)
    if row <= 0 or weight_bytes(node, program) > weight_budget:
        return None
    group = opts.nodes if opts is not None and opts.nodes > 1 else 1
    most = max(group, panel_bytes // row // group * group)
    v = node.var
    lo, hi, nb, size, vb, first, last = (ir.Var(names.fresh(f"{v}_{s}")) for s in
                                         ("blo", "bhi", "blocks", "bsize", "block", "first", "last"))
    inner = ir.For(v, first, last, node.body, "serial")
    jammed = jam_node_loop(inner, opts, program, names, independent=True) if group > 1 else None
    in_range = ir.land(ir.Cmp(">=", first, lo), ir.Cmp("<=", last, hi))
    unit: ir.Stmt = ir.If(in_range, jammed if jammed is not None else inner)
    unit = ir.Let(last.name, ir.minimum(first + size, hi), unit)
    unit = ir.Let(first.name, lo + vb * size, unit)
    par = ir.For(loop.var, loop.start, loop.stop, unit, "parallel")
    blocks: ir.Stmt = ir.For(vb.name, 0, nb, par, "serial")
    # equal blocks of whole groups: ceil(ceil(n / nb) / group) * group nodes each
    blocks = ir.Let(size.name, ((hi - lo + nb - 1) // nb + (group - 1)) // group * group, blocks)
    blocks = ir.Let(nb.name, (hi - lo + (most - 1)) // most, blocks)
    return ir.Let(lo.name, node.start, ir.Let(hi.name, node.stop, blocks))


def block_levels(program: ir.Program, panel_bytes: int, opts: JamOptions | None, *,
                 weight_budget: int) -> tuple[ir.Program, int]:
    """``program`` with every interchanged level loop (a parallel hidden-block loop around a
    level's node loop) whose parameters take at most ``weight_budget`` bytes run in blocks of at
    most ``panel_bytes`` of gathered rows (the ``panel_kib`` knob times 1024), the blocks jammed
    with ``opts`` (None or ``nodes < 2``: not jammed); and how many were."""
    if panel_bytes <= 0:
        return program, 0
    names = names_of(program)

    def visit(loop: ir.For) -> ir.Stmt | None:
        if loop.kind == "parallel":
            return block_level(loop, panel_bytes, weight_budget, opts, program, names) or loop
        return loop if loop.kind in ("gpu_group", "gpu_thread", "vectorized") else None

    return rewrite_loops(program, visit)
