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
cache while the hidden blocks pass over it, the outer loop of a blocked GEMM. Each thread (a
chunk of the hidden blocks, ``chunks`` = the ``threads`` knob) runs every node block over its own
hidden blocks, so the level keeps its one barrier::

    parallel for jb in 0..J:                    let lo = start; let hi = stop
      for v in lo..hi:                  ->      let nb = ceil((hi - lo) / B); let size = ...
        lets; B(v, jb)                          parallel for c in 0..chunks:
                                                  for vb in 0..nb:                  # serial
                                                    let first = lo + vb * size
                                                    let last = min(first + size, hi)
                                                    for jb in c*J//chunks..(c+1)*J//chunks:
                                                      if lo <= first and last <= hi and 0 <= jb < J:
                                                        for v in first..last: lets; B(v, jb)  # jammed

(the ``if`` always holds: it gives the verifier the ranges). ``B`` is the most nodes whose
gathered rows fit in ``panel_kib`` KiB (a multiple of the jam's group); a level is cut into
``nb`` blocks of equal size (rounded up to whole groups); the node's own rows that its reductions
read (a temporary such as a TreeGRU's ``r * h_k``) count towards the panel as well, though
only a level that gathers rows is blocked. A level that fits runs as one block,
as before, and a block of a big level is never a sliver. The price: each thread reads its
hidden blocks' weights once per node block instead of once per level. A nest is blocked only
where that :func:`pays`: per block, a thread reads its share of the weights again but saves
re-reading the panel for each of its hidden blocks, by a factor of 2, and its weights fit in a
core's cache (TreeLSTM, 2 threads, 2 MiB L2, 1 MiB panel: hidden 256 is blocked, 512 and 1024
are not). Legal because the nodes of a level are independent
(``is_node_loop``) and the hidden blocks were already independent (a parallel loop).
"""

from __future__ import annotations

from cortex.core import loopir as ir
from cortex.core.lowering.cases import NameGen
from cortex.core.lowering.jam import JamOptions, jam_node_loop
from cortex.core.lowering.jam_fuse import free_names, names_of
from cortex.core.lowering.k_blocks import k_blocked_nodes, panel_nodes
from cortex.core.lowering.level_interchange import is_node_loop, node_lets, node_name
from cortex.core.lowering.transforms import rewrite_loops


def _row_bytes(buf: ir.Buffer, axes: int) -> int:
    """Bytes of ``buf`` past its first ``axes`` axes (0 when a size is not a constant), as it is
    stored (bfloat16 weights: 2 bytes an element)."""
    n = 2 if buf.storage == "bfloat16" else 4 if buf.dtype == "float32" else 8
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
    """Bytes of the parameters the node loop's reductions read (whole buffers) other than
    through a gathered row (an embedding table's): what every block of nodes reads again."""
    params = {b.name: b for b in program.buffers if b.role == "param"}
    gathered = _gathered(node_loop, program)
    used = {ld.buffer for r in ir.walk(node_loop.body) if isinstance(r, ir.Reduce)
            for ld in ir.walk(r.body) if isinstance(ld, ir.Load) and ld.buffer in params
            and not (ld.index and isinstance(ld.index[0], ir.Var) and ld.index[0].name in gathered)}
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


def own_row_bytes(node_loop: ir.For, program: ir.Program) -> int:
    """Bytes of the node's own rows its reductions read (``buf[v, ...]`` of a temporary or an
    input, e.g. a TreeGRU's ``r * h_k``): re-read by every hidden block like the gathered rows,
    so they count towards a panel too (0 when a size is not a constant)."""
    buffers = {b.name: b for b in program.buffers if b.role != "param"}
    rows = {ld.buffer for r in ir.walk(node_loop.body) if isinstance(r, ir.Reduce)
            for ld in ir.walk(r.body) if isinstance(ld, ir.Load) and ld.index
            and ld.buffer in buffers and ld.index[0] == ir.Var(node_name(node_loop))}
    sizes = [_row_bytes(buffers[name], 1) for name in rows]
    return 0 if 0 in sizes else sum(sizes)


def block_level(loop: ir.For, panel_bytes: int, opts: JamOptions | None, program: ir.Program,
                names: NameGen, chunks: int = 1, where_it_pays: bool = True,
                cache_bytes: int = 0, units: int = 1, k_block: int = 0) -> ir.Stmt | None:
    """An interchanged level ``parallel for jb in 0..J: for v in level: ...`` run in blocks of
    nodes (see the module doc) by ``chunks`` threads, its blocks jammed with ``opts``, each
    thread's hidden blocks cut into ``units`` parallel iterations (a level split dynamically
    between the threads: ``level_split``); None when
    it does not apply: not that shape (``J`` must be a constant), no gathered rows, or blocks
    would not pay (:func:`pays`; with ``where_it_pays=False`` regardless: the tests). With
    ``k_block`` the blocks' reductions are cut into blocks of that many steps where they are
    longer (``cortex.core.lowering.k_blocks``): then a block holds at most the nodes whose
    partial sums fit its panel, and the level is blocked whether or not :func:`pays` (the
    K blocks are what keep a hidden block's weights in the cache)."""
    node = loop.body
    if not (loop.kind == "parallel" and isinstance(node, ir.For) and node.kind == "serial"
            and is_node_loop(node)):
        return None
    if (free_names(loop.start) | free_names(loop.stop)) & {node.var}:
        return None
    J = ir.const_int(loop.stop)
    row = gathered_row_bytes(node, program)
    if ir.const_int(loop.start) != 0 or J is None or J < 1 or row <= 0:
        return None
    group = opts.nodes if opts is not None and opts.nodes > 1 else 1
    k_nodes = panel_nodes(node, opts, program, names, k_block) if opts is not None and group > 1 else 0
    if where_it_pays and not k_nodes and not pays(weight_bytes(node, program) / max(1, chunks), J / max(1, chunks),
                                                  panel_bytes, cache_bytes):
        return None
    most = max(group, panel_bytes // (row + own_row_bytes(node, program)) // group * group)
    if k_nodes:
        most = min(most, k_nodes)
    v = node.var
    lo, hi, nb, size, vb, first, last = (ir.Var(names.fresh(f"{v}_{s}")) for s in
                                         ("blo", "bhi", "blocks", "bsize", "block", "first", "last"))
    inner = ir.For(v, first, last, node.body, "serial")
    jammed = None
    if k_nodes:
        jammed = k_blocked_nodes(inner, opts, program, names, k_block, most)  # type: ignore[arg-type]
    if jammed is None and group > 1:
        jammed = jam_node_loop(inner, opts, program, names, independent=True)
    in_range = ir.land(ir.Cmp(">=", first, lo), ir.Cmp("<=", last, hi))
    unit: ir.Stmt = ir.If(in_range, jammed if jammed is not None else inner)
    unit = ir.Let(last.name, ir.minimum(first + size, hi), unit)
    unit = ir.Let(first.name, lo + vb * size, unit)
    # each chunk of hidden blocks (a thread's share) runs every node block: one barrier a level;
    # with ``units``, each chunk's hidden blocks are cut into that many parallel iterations
    # (claimed one by one by a dynamic split), each of them running every node block. (Their
    # count stays a constant: a hidden-block range that depended on the level's size would make
    # the weights look gathered, ``weight_storage.streamed_weights``.)
    chunks = max(1, chunks) * max(1, units)
    jv = ir.Var(loop.var)
    c, jlo, jhi = (ir.Var(names.fresh(f"{loop.var}_{s}")) for s in ("chunk", "lo", "hi"))
    unit = ir.If(ir.land(ir.Cmp(">=", jv, ir.Const(0)), ir.Cmp("<", jv, ir.Const(J))), unit)  # always true
    mine: ir.Stmt = ir.For(vb.name, 0, nb, ir.For(loop.var, jlo, jhi, unit, "serial"), "serial")
    mine = ir.Let(jlo.name, c * J // chunks, ir.Let(jhi.name, (c + 1) * J // chunks, mine))
    blocks: ir.Stmt = ir.For(c.name, 0, chunks, mine, "parallel")
    # equal blocks of whole groups: ceil(ceil(n / nb) / group) * group nodes each (no block
    # where the loop is empty, e.g. a class of a level's nodes that has none: leaf_kids)
    blocks = ir.Let(size.name, ((hi - lo + nb - 1) // ir.maximum(nb, ir.Const(1)) + (group - 1)) // group * group,
                    blocks)
    blocks = ir.Let(nb.name, (hi - lo + (most - 1)) // most, blocks)
    return ir.Let(lo.name, node.start, ir.Let(hi.name, node.stop, blocks))


def pays(weights: float, hidden_blocks: float, panel_bytes: int, cache_bytes: int) -> bool:
    """Does blocking pay for a thread? Unblocked, each of its ``hidden_blocks`` re-reads the
    level's rows; blocked, each block of ``panel_bytes`` of rows re-reads its ``weights`` bytes:
    per block ``weights`` read again against ``hidden_blocks * panel_bytes`` not, which must be
    at least twice as much; and the weights must fit in a core's cache (``cache_bytes``), where
    the next block finds them. Measured (TreeLSTM, 2 threads): hidden 1024, whose 20 MB (6 MB at
    the leaves) of weights per thread do not fit a 2 MiB L2, was 1.07-1.13x slower blocked, by
    the traffic count alone it would have paid."""
    return weights <= cache_bytes and 2 * weights < hidden_blocks * panel_bytes


def block_levels(program: ir.Program, panel_bytes: int, opts: JamOptions | None, *,
                 chunks: int = 1, cache_bytes: int = 0, where_it_pays: bool = True,
                 units: int = 1, k_block: int = 0) -> tuple[ir.Program, int]:
    """``program`` with every interchanged level loop (a parallel hidden-block loop around a
    level's node loop) run in blocks of at most ``panel_bytes`` of gathered rows (the
    ``panel_kib`` knob times 1024) by ``chunks`` threads (the ``threads`` knob; ``units``
    parallel iterations each, see :func:`block_level`), where that
    :func:`pays`, the blocks jammed with ``opts`` (None or ``nodes < 2``: not jammed), their
    reductions in blocks of ``k_block`` steps where that applies (0: whole); and how many were
    (``where_it_pays=False``: every such level, for the tests)."""
    if panel_bytes <= 0:
        return program, 0
    names = names_of(program)

    def visit(loop: ir.For) -> ir.Stmt | None:
        if loop.kind == "parallel":
            return block_level(loop, panel_bytes, opts, program, names, chunks, where_it_pays, cache_bytes,
                               units, k_block) or loop
        return loop if loop.kind in ("gpu_group", "gpu_thread", "vectorized") else None

    return rewrite_loops(program, visit)
