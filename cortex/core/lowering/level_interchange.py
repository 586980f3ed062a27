"""Level interchange: a level's node loop moved inside its hidden-unit loops (``interchange``).

Pipeline position: a schedule transform (``LoopProgram -> LoopProgram``), applied by
``cortex.core.lowering.apply_schedule.apply_loop_schedule`` when the ``interchange`` knob is on, before the
node jam (``cortex.core.lowering.jam``), which works on the node loops this makes. Target-neutral; the
tests check the result against the untransformed program on the interpreter.

::

    for v in level (parallel):            parallel for j1:
      lets                          ->      for v in level:          # serial, iterations independent
      for j1 ...: B1                          lets; B1
      for j2 ...: B2                      parallel for j2:
                                            for v in level: lets; B2

Threads (the outermost parallel loop) then split the *hidden units* -- the rows of the weight
matrices -- instead of the nodes: each core reads only its share of the weights at every level,
so that share stays in its cache across levels (the CPU form of the paper's model persistence),
a level of one node keeps every core busy, and one weight block serves every node of the level
before the next is read. Legal because the nodes of a level (or the leaves) are independent
(the linearizer's contract: :func:`is_node_loop`) and the hidden loops carry no dependence
(parallel, or serial with :func:`rows_independent` stores); their bounds must not depend on the
node. Not applied to a node-parallel loop without reductions (the leaves: no weights to keep,
and each node's embedding row is better read front to back by one thread) nor to one whose
reductions would re-stream every node's data per hidden unit (:func:`restreams_node_data`).
"""

from __future__ import annotations

from cortex.core import loopir as ir


def _names(node: ir.Node) -> set[str]:
    return {n.name for n in ir.walk(node) if isinstance(n, ir.Var)}


def _has(node: ir.Node, kind: type) -> bool:
    return any(isinstance(n, kind) for n in ir.walk(node))


def is_node_loop(loop: ir.For) -> bool:
    """The loop over the nodes of one level (``level_offsets[l]..level_offsets[l+1]``), over
    the leaves (``0..NL``), or one annotated ``"nodes"`` (``hoist_projections``' loops over
    internal nodes and over a level's child edges, each filling its own rows): by the
    linearizer's contract its iterations are independent."""
    if "nodes" in loop.annotations:
        return True
    s, t = loop.start, loop.stop
    if isinstance(s, ir.Load) and isinstance(t, ir.Load):
        return s.buffer == t.buffer == "level_offsets"
    return s == ir.Const(0) and t == ir.Var("NL")


def node_name(loop: ir.For) -> str:
    """The variable holding the node a node loop's iteration computes: the loop's own, or, in a
    loop over a per-call node order (``for vi in ..: let v = leaf_kid_order[vi]``,
    ``cortex.core.lowering.leaf_kids``), the let that reads the node from it."""
    from cortex.core.lowering.leaf_kids import ORDER_BUFFER

    b = loop.body
    if (isinstance(b, ir.Let) and isinstance(b.value, ir.Load) and b.value.buffer == ORDER_BUFFER
            and b.value.index == (ir.Var(loop.var),)):
        return b.var
    return loop.var


def node_lets(loop: ir.For) -> tuple[list[tuple[str, ir.Expr]], ir.Stmt]:
    """The lets at the top of a node loop's body and the statement they bind."""
    lets: list[tuple[str, ir.Expr]] = []
    body = loop.body
    while isinstance(body, ir.Let):
        lets.append((body.var, body.value))
        body = body.body
    return lets, body


def interchange_node_loop(loop: ir.For) -> list[ir.For] | None:
    """``loop`` interchanged with the hidden loops after its lets (see the module doc), one
    nest per hidden loop, or None when it does not apply."""
    if not is_node_loop(loop):
        return None
    if loop.kind == "parallel" and not _has(loop.body, ir.Reduce):
        return None  # the leaves: threads split the nodes, each row read front to back
    lets, body = node_lets(loop)
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    if not stmts or not all(isinstance(x, ir.For) and (x.kind == "parallel" or (
            x.kind == "serial" and loop.kind == "parallel" and rows_independent(x, node_name(loop))))
            for x in stmts):
        return None
    bound = {loop.var} | {name for name, _ in lets}
    if loop.kind == "parallel" and any(restreams_node_data(x, bound) for x in stmts):  # type: ignore[arg-type]
        return None
    out = []
    for inner in stmts:
        assert isinstance(inner, ir.For)
        if (_names(inner.start) | _names(inner.stop)) & bound:
            return None
        nested: ir.Stmt = inner.body
        for name, value in reversed(lets):
            nested = ir.Let(name, value, nested)
        out.append(ir.For(inner.var, inner.start, inner.stop,
                          ir.For(loop.var, loop.start, loop.stop, nested, "serial", annotations=loop.annotations),
                          "parallel"))
    return out


def restreams_node_data(inner: ir.For, node_names: set[str]) -> bool:
    """Would interchanging make each iteration of ``inner`` re-read a block of every node's data?

    True when a reduction inside ``inner`` loads node data (an index naming the node or one of
    its lets: a child's state) at an index that varies with a loop nested inside ``inner``: a
    matrix operand (MV-RNN's ``sum_k W_M[i, k] * M[ch, k, j]`` under ``for i: for j``). With the
    node loop innermost, every row ``i`` would stream the child matrices of the whole level
    (MV-RNN b10: 111 nodes x 32 KB per row, from L3) instead of each node's 32 KB staying in L1
    for all its rows; a GEMV's ``h[ch, k]`` (indexed by the reduction only) is a short vector
    reused across the hidden units, which is why interchanging pays there."""
    nested = {n.var for n in ir.walk(inner.body) if isinstance(n, ir.For)}
    for n in ir.walk(inner.body):
        if isinstance(n, ir.Let) and _names(n.value) & nested:
            nested.add(n.var)
    if not nested:
        return False
    for r in ir.walk(inner.body):
        if not isinstance(r, ir.Reduce):
            continue
        for ld in ir.walk(r.body):
            if isinstance(ld, ir.Load) and ld.index:
                names = set().union(*(_names(i) for i in ld.index))
                if names & node_names and r.var in names and names & nested:
                    return True
    return False


def rows_independent(inner: ir.For, node: str) -> bool:
    """A serial loop directly inside a parallel node loop (``parallel="nodes"``): may its
    iterations run on different threads? Yes when every store writes element ``[node, ...]``
    at an index that uses the loop's variable, and every load of a stored buffer either reads a
    row other than ``node`` (another node: a child, done at an earlier level) or exactly the
    element the same iteration stores."""
    derived = {inner.var}
    for n in ir.walk(inner.body):
        if isinstance(n, ir.Let) and _names(n.value) & derived:
            derived.add(n.var)
    stores = [n for n in ir.walk(inner.body) if isinstance(n, ir.Store)]
    if not stores:
        return False
    written: dict[str, set] = {}
    for st in stores:
        if not st.index or st.index[0] != ir.Var(node):
            return False
        if not set().union(*(_names(i) for i in st.index)) & derived:
            return False
        written.setdefault(st.buffer, set()).add(st.index)
    for ld in ir.walk(inner.body):
        if isinstance(ld, ir.Load) and ld.buffer in written and ld.index:
            if ld.index[0] == ir.Var(node) and ld.index not in written[ld.buffer]:
                return False
            if node in _names(ld.index[0]) and ld.index[0] != ir.Var(node):
                return False
    return True


def interchange_levels(program: ir.Program) -> tuple[ir.Program, int]:
    """``program`` with every node loop that is not inside a parallel loop interchanged where
    :func:`interchange_node_loop` applies; and how many were."""
    from cortex.core.lowering.transforms import rewrite_loops

    def visit(loop: ir.For) -> ir.Stmt | None:
        swapped = interchange_node_loop(loop) if loop.kind in ("parallel", "serial", "unrolled") else None
        if swapped is not None:
            return ir.seq(*swapped)
        return loop if loop.kind in ("parallel", "gpu_group", "gpu_thread", "vectorized") else None

    return rewrite_loops(program, visit)
