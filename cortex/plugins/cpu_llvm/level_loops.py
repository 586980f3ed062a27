"""The llvm generator's loop-shape decisions: interchange, node jam plans, wide vector nests.

Pipeline position: inside the ``llvm`` renderer, applied to a kernel's statements while they are
emitted: a level's node loop interchanged with its hidden-unit loops (threads split the weight
rows), the groups of nodes jammed together and their guard conditions (:func:`jam_plan`), a
matrix nest's split column loop widened into one vector. Pure functions of the IR and the
module constants that tune them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm.ir_queries import _contains, _Idx, _needs_branch, _uses_var, _walk, vector_width

def _is_node_loop(loop: ir.For) -> bool:
    """The loop over the nodes of one level (``level_offsets[l]..level_offsets[l+1]``) or over
    the leaves (``0..NL``): by the linearizer's contract its iterations are independent."""
    s, t = loop.start, loop.stop
    if isinstance(s, ir.Load) and isinstance(t, ir.Load):
        return s.buffer == t.buffer == "level_offsets"
    return s == ir.Const(0) and t == ir.Var("NL")


def interchange_node_loop(loop: ir.For) -> list[ir.For] | None:
    """``for v in nodes: lets; parallel for j1 ...; parallel for j2 ...`` ->
    ``parallel for j1: for v in nodes: lets; ...`` then the same for j2, or None.

    Threads then split the *hidden units* (rows of the weight matrices) instead of the nodes:
    each core reads only its share of the weights, at every level, so that share stays in its
    L2 across levels (the CPU form of model persistence), every level keeps every core busy
    (a level of one node too), and one weight block is reused for every node of the level
    before the next block is read. Legal because the nodes of a level are independent (the
    linearizer's contract) and the j loops are parallel (no carried dependence); their bounds
    must not depend on the node. Applies when every statement after the lets is a parallel
    loop (the lowering's ``parallel="hidden"`` or ``"both"``)."""
    if not _is_node_loop(loop):
        return None
    if loop.kind == "parallel" and INTERCHANGE_NEEDS_REDUCE and not _contains(
            loop.body, lambda n: isinstance(n, ir.Reduce)):
        # no weights to keep in L2 (the leaves: gathers from the embedding table): threads split
        # the nodes, and each node's rows are read front to back (the hardware prefetcher
        # follows them; interchanged, every step touched a new row of a 61 MB table)
        return None
    lets: list[tuple[str, ir.Expr]] = []
    body = loop.body
    while isinstance(body, ir.Let):
        lets.append((body.var, body.value))
        body = body.body
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    if not stmts or not all(isinstance(x, ir.For) and (x.kind == "parallel" or (
            x.kind == "serial" and loop.kind == "parallel" and _rows_independent(x, loop.var)))
            for x in stmts):
        return None
    bound = {loop.var} | {name for name, _ in lets}
    if RESTREAM_CHECK and loop.kind == "parallel" and any(_restreams_node_data(x, bound) for x in stmts):
        return None
    out = []
    for inner in stmts:
        if _contains(ir.Seq((ir.Store("_", (inner.start, inner.stop), ir.Const(0)),)),
                     lambda n: isinstance(n, ir.Var) and n.name in bound):
            return None
        nested: ir.Stmt = inner.body
        for name, value in reversed(lets):
            nested = ir.Let(name, value, nested)
        out.append(ir.For(inner.var, inner.start, inner.stop,
                          _JamFor(loop.var, loop.start, loop.stop, nested, "serial"), "parallel"))
    return out


def _restreams_node_data(inner: ir.For, node_names: set[str]) -> bool:
    """Would interchanging make each iteration of ``inner`` re-read a block of every node's data?

    True when a reduction inside ``inner`` loads node data (an index naming the node or one of
    its lets: a child's state) at an index that varies with a loop nested inside ``inner``: a
    matrix operand (MV-RNN's ``sum_k W_M[i, k] * M[ch, k, j]`` under ``for i: for j``). With the
    node loop innermost, every row ``i`` would stream the child matrices of the whole level
    (MV-RNN b10: 111 nodes x 32 KB per row, from L3) instead of each node's 32 KB staying in L1
    for all its rows; a GEMV's ``h[ch, k]`` (indexed by the reduction only) is a short vector
    reused across the hidden units, which is why interchanging pays there."""
    nested = set()
    for n in _walk(inner.body):
        if isinstance(n, ir.For):
            nested.add(n.var)
    for n in _walk(inner.body):
        if isinstance(n, ir.Let) and _contains(n.value, lambda m: isinstance(m, ir.Var) and m.name in nested):
            nested.add(n.var)
    if not nested:
        return False
    for r in _walk(inner.body):
        if not isinstance(r, ir.Reduce):
            continue
        for ld in _walk(r.body):
            if isinstance(ld, ir.Load) and ld.index:
                names = {m.name for m in _walk(_Idx(ld.index)) if isinstance(m, ir.Var)}
                if names & node_names and r.var in names and names & nested:
                    return True
    return False


def _rows_independent(inner: ir.For, node: str) -> bool:
    """A serial loop directly inside a parallel node loop (``parallel="nodes"``): may its
    iterations run on different threads? Yes when every store writes element ``[node, ...]``
    at an index that uses the loop's variable, and every load of a stored buffer either reads a
    row other than ``node`` (another node: a child, done at an earlier level) or exactly the
    element the same iteration stores."""
    derived = {inner.var}
    for n in _walk(inner.body):
        if isinstance(n, ir.Let) and _contains(n.value, lambda m: isinstance(m, ir.Var) and m.name in derived):
            derived.add(n.var)
    stores = [n for n in _walk(inner.body) if isinstance(n, ir.Store)]
    if not stores:
        return False
    written: dict[str, set] = {}
    for st in stores:
        if not st.index or st.index[0] != ir.Var(node):
            return False
        if not _contains(_Idx(st.index), lambda m: isinstance(m, ir.Var) and m.name in derived):
            return False
        written.setdefault(st.buffer, set()).add(st.index)
    for ld in _walk(inner.body):
        if isinstance(ld, ir.Load) and ld.buffer in written:
            if ld.index and ld.index[0] == ir.Var(node) and ld.index not in written[ld.buffer]:
                return False
            if ld.index and _contains(ld.index[0], lambda m: isinstance(m, ir.Var) and m.name == node) \
                    and ld.index[0] != ir.Var(node):
                return False
    return True



WIDE_LANES = 64  # widest straight-line vector a matrix nest's split inner loop is merged into


def widen_vector_nests(body: ir.Stmt) -> ir.Stmt:
    """``for i: for jw in 0..n: vectorized for jv in 0..W: let j = jw*W + jv; S`` ->
    ``for i: vectorized for j in 0..n*W: S`` when ``n*W <= WIDE_LANES`` and S uses neither
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
                or n is None or w is None or n * w > WIDE_LANES or not isinstance(vec.body, ir.Let)):
            return None
        let = vec.body
        jw, jv = ir.Var(st.var), ir.Var(vec.var)
        if let.value not in (ir.BinOp("+", ir.BinOp("*", jw, ir.Const(w)), jv),
                             ir.BinOp("+", jv, ir.BinOp("*", jw, ir.Const(w)))):
            return None
        if _uses_var(let.body, st.var) or _uses_var(let.body, vec.var):
            return None
        return ir.For(let.var, ir.Const(0), ir.Const(n * w), let.body, "vectorized")

    def f(node: ir.Node) -> ir.Node | None:
        if isinstance(node, ir.For) and node.kind == "serial" and not _is_node_loop(node):
            wide = split_form(node.body)
            if wide is not None:
                return replace(node, body=wide)
        return None

    return ir.transform(body, f)


@dataclass(frozen=True)
class _JamFor(ir.For):
    """The node loop of an interchanged level (see :func:`interchange_node_loop`): its
    iterations are independent, so several nodes may be computed together (jammed)."""


INTERCHANGE_NEEDS_REDUCE = True  # a node-parallel loop without reductions is not interchanged
LANE_REDUCE = True  # scalar float sums along a contiguous row run on vectors (lane_reduce_loop)
RESTREAM_CHECK = True  # a node-parallel loop whose reductions read node matrices is not interchanged
JAM = 8  # nodes computed together: one weight vector load feeds JAM FMAs
#: (group size, fewest nodes left that run it) in order; a group run with fewer nodes left than
#: its size repeats its last node (only when JAM_PAD and the body reads nothing it stores, else
#: a group needs its size); the nodes left after the last stage run one by one.
JAM_STAGES: tuple[tuple[int, int], ...] = ((JAM, 6), (4, 3), (2, 2), (1, 1))
GATHER_PREFETCH = 2  # a node loop gathering param rows prefetches the rows of the node this far ahead (0: off)
FUSE_BALANCED = True  # a jam's fused loops get even shares of the reductions (see _fusable)
FUSE_ACCS = 24  # a jammed reduction loop takes sibling reductions up to this many accumulators
EXP_OUTLINED = True  # vector float32 exp: one noinline function per width (see _Module.exp_f32_fn)
JAM_UNROLL = 2  # iterations of a jammed reduction loop per trip (constant trip counts)
JAM_PAD = True  # a short last group repeats its last node (when the body reads nothing it stores)


def _no_self_reads(body: ir.Stmt, node: str) -> bool:
    """Does node ``node``'s body read nothing it stores (its own row of a stored buffer)? Then
    computing a node twice stores the same values twice. Other rows of a stored buffer are
    other nodes' (children, done at earlier levels: the level's nodes are independent)."""
    own = {node}
    for n in _walk(body):
        if isinstance(n, ir.Let) and isinstance(n.value, ir.Var) and n.value.name in own:
            own.add(n.var)
    stored: dict[str, set] = {}
    for n in _walk(body):
        if isinstance(n, ir.Store):
            stored.setdefault(n.buffer, set()).add(n.index)
    for n in _walk(body):
        if isinstance(n, ir.Load) and n.buffer in stored:
            if n.index in stored[n.buffer] or (n.index and _contains(
                    n.index[0], lambda m: isinstance(m, ir.Var) and m.name in own)):
                return False
    return True


class _JamCtx:
    """Nodes ``v0 .. v0+JAM-1`` being emitted together: per-node values of node-dependent names."""

    def __init__(self, names: set[str], copies: list[dict[str, tuple]], body: ir.Stmt | None = None,
                 reorder_ok: bool = False) -> None:
        self.names = names
        self.copies = copies
        self.reduces: dict = {}
        self.body = body  # the jammed statement (for fusing reductions)
        self.reorder_ok = reorder_ok  # it reads nothing it stores: reductions may run early
        # a body with reductions calls the outlined exp (next to its reductions a call is
        # cheap); one without (the leaves) keeps it inline
        self.reduces_any = body is not None and _contains(body, lambda n: isinstance(n, ir.Reduce))


def jam_plan(loop: ir.For) -> tuple[list, ir.Stmt] | None:
    """For a node loop ``lets; vectorized for ...`` whose guards depend only on the lets: the
    guard conditions and the body with every guard taken (used when all guards hold for all
    jammed nodes), or None when the body does not have that shape."""
    lets: list[tuple[str, ir.Expr]] = []
    body = loop.body
    while isinstance(body, ir.Let):
        lets.append((body.var, body.value))
        body = body.body
    if not isinstance(body, ir.For) or body.kind != "vectorized" or not vector_width(body):
        return None
    let_names = {n for n, _ in lets}
    conds = []
    for n in _walk(body):
        if isinstance(n, ir.Select) and _needs_branch(n.a) and not _needs_branch(n.b):
            names = {m.name for m in _walk(n.cond) if isinstance(m, ir.Var)}
            if names and names <= let_names and not _contains(n.cond, lambda m: isinstance(m, (ir.Load, ir.Reduce))):
                if n.cond not in conds:
                    conds.append(n.cond)
    taken = ir.transform(body, lambda m: m.a if isinstance(m, ir.Select) and m.cond in conds else None)
    for n in _walk(taken):
        if isinstance(n, (ir.If, ir.Alloc, ir.Barrier)):
            return None
        if isinstance(n, ir.Select) and (_needs_branch(n.a) or _needs_branch(n.b)):
            return None
        if isinstance(n, ir.BinOp) and n.op in ("and", "or") and _needs_branch(n.b):
            return None
    return conds, taken

