"""Projection hoists: GEMVs that do not need the level's own results moved out of its node loop (``hoist_projections``).

Pipeline position: a schedule transform (``LoopProgram -> LoopProgram``), applied first by
``cortex.core.lowering.apply_schedule.apply_loop_schedule`` when the ``hoist_projections`` knob is
on, so the level interchange and the node jam shape the loops it adds like any other node loop
(``level_interchange.is_node_loop`` knows the edge loop). Target-neutral and pure; the tests
check the result against the untransformed program on the interpreter.

**Over a node's own input.** A reduction in a level's node loop that reads only params and the
node's own input (DAG-RNN's ``U x_v``, any model's projection of dense node features) does not
depend on the recursion. Inside the level loop it runs on that level's few nodes and lengthens
the chain of levels; hoisted, it runs for every internal node at once, before the level loop,
where the node jam gets full groups (the peers do the same: one GEMM over every node up front)::

    for l in first..L:                        parallel for v' in level_offsets[first]..level_offsets[L]:
      parallel for v in level l:                for j': P[v', j'] = sum(k: W[j', k] * x[v', k])
        lets                            ->    for l in first..L:
        for j: ... sum(k: W[j, k] * x[v, k]) ...    parallel for v in level l:
                                                  lets; for j: ... P[v, j] ...

**Over a child's state in a per-child reduction.** Child-sum TreeLSTM's forget gate
``sum(e in child_offsets[v]..: sigmoid(... + sum(k: U_f[j, k] * h[child_ids[e], k])) * c[...])``
runs one GEMV per child edge, one edge at a time, inside the node's block: no weight row is
shared between edges. The inner GEMV needs only the child's row, complete before the level
starts, so it is computed first for every child edge of the level in a loop of its own, which
the jam groups like nodes (``Q [E, ...]``, read back as ``Q[e, j]``)::

    parallel for e in child_offsets[level_offsets[l]]..child_offsets[level_offsets[l + 1]]:
      let ce = child_ids[e]; for j: Q[e, j] = sum(k: U_f[j, k] * h[ce, k])
    parallel for v in level l: ... sum(e in child_offsets[v]..: sigmoid(... + Q[e, j]) * ...) ...

A temp is indexed by the node (edge) and the flattened variables of the loops around the
reduction (each ``0..n_i``), so it is written and read in the same order. The levels are the
one-kernel form's level loop (``for l in first..L``, ``first`` a constant; with an input hoist the
program then declares ``L >= first``), or, in a per-level program (OpenCL's: a launch per level),
the kernels that a host loop ``for lh in first..L`` launches with the level: there the input
projections are one kernel of their own (one node loop over every internal node, no chunks: its
work-group loop must be the outermost loop), launched once before that host loop, and the edge
loops go into the level's kernel before its nodes (the backend makes them a launch, or a barrier,
of their own). An unrolled program (phases of work units) has no level loop and is left
unchanged (the count says so).
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core import loopir as ir
from cortex.core.lowering.jam_fuse import free_names, names_of, renamed_binders
from cortex.core.lowering.level_interchange import is_node_loop, node_lets
from cortex.core.lowering.cases import NameGen

#: Nodes per chunk of the loop over every internal node: the level interchange makes each
#: thread read every node's input row once per hidden block it owns, so a chunk's rows (256 KB
#: at 256 float32 features) should stay in L2 meanwhile; a chunk is one barrier (DAG-RNN b100,
#: 2400 nodes: one loop over all of them took 3-4x its GEMVs' time in the levels).
CHUNK_NODES = 256

#: Roles of the buffers a hoisted reduction may read: nothing the recursion writes.
_HOISTABLE_ROLES = ("param", "input")


def _level_node_loops(var: str, body: ir.Stmt) -> list[ir.For]:
    """The node loops (``level_offsets[l]..level_offsets[l + 1]``, ``l`` = ``var``) directly in
    ``body``: a level loop's body, or a per-level kernel's (``var`` its level parameter)."""
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    lvl = ir.Var(var)
    return [s for s in stmts if isinstance(s, ir.For) and is_node_loop(s)
            and isinstance(s.start, ir.Load) and s.start.index == (lvl,)]


def _over(r: ir.Reduce, row: str, loop_vars: set[str]) -> bool:
    """Has ``r`` a constant range, and does it depend on ``row`` (a node or an edge variable)
    and otherwise only on the loops around it and its own (nested) reduction variables?"""
    if not (isinstance(r.start, ir.Const) and isinstance(r.stop, ir.Const)):
        return False
    bound = {n.var for n in ir.walk(r) if isinstance(n, ir.Reduce)}
    names = free_names(r)
    return row in names and names <= {row} | loop_vars | bound


def _hoistable(r: ir.Reduce, node: str, loop_vars: set[str], roles: dict[str, str]) -> bool:
    """Is ``r`` over the node (:func:`_over`) and does it read only params and inputs?"""
    return _over(r, node, loop_vars) and all(roles.get(ld.buffer) in _HOISTABLE_ROLES
                                             for ld in ir.walk(r) if isinstance(ld, ir.Load))


def _edge_hoistable(r: ir.Reduce, edge: str, loop_vars: set[str], roles: dict[str, str]) -> bool:
    """Is ``r`` (inside a reduction over the node's child edges, variable ``edge``) over the
    edge (:func:`_over`), and does it read only params, inputs and the rows of the edge's child
    (``buf[child_ids[edge], ...]``: complete before this level)?"""
    if not _over(r, edge, loop_vars):
        return False
    child = ir.Load("child_ids", (ir.Var(edge),))
    for ld in ir.walk(r):
        if not isinstance(ld, ir.Load) or roles.get(ld.buffer) in _HOISTABLE_ROLES or ld == child:
            continue
        if roles.get(ld.buffer) in ("output", "temp") and ld.index and ld.index[0] == child:
            continue
        return False
    return True


def _edge_vars(e: ir.Expr, node: str) -> set[str]:
    """The variables of the reductions in ``e`` over node ``node``'s child edges."""
    v = ir.Var(node)
    lo, hi = ir.Load("child_offsets", (v,)), ir.Load("child_offsets", (v + 1,))
    return {r.var for r in ir.walk(e) if isinstance(r, ir.Reduce) and r.start == lo and r.stop == hi}


class _Hoister:
    """Finds the hoistable reductions of one node loop and builds their prologue nests: over
    the node's input (``nests``, run before the level loop) and over a child edge's state
    (``edge_nests``, run in the level before its nodes)."""

    def __init__(self, program: ir.Program, node: str, names: NameGen) -> None:
        self.program, self.node, self.names = program, node, names
        self.roles = {b.name: b.role for b in program.buffers}
        self.dtypes = {b.name: b.dtype for b in program.buffers}
        self.temps: list[ir.Buffer] = []
        self.nests: list[ir.Stmt] = []  # prologue bodies, in terms of ``node``
        self.edge = names.fresh("e")  # the edge variable of ``edge_nests``
        self.edge_nests: list[ir.Stmt] = []

    def stmt(self, s: ir.Stmt, loops: tuple[ir.For, ...], lets: tuple[ir.Let, ...]) -> ir.Stmt:
        """``s`` (inside the node loop, under ``loops`` and ``lets``) with its hoistable
        reductions replaced by loads of their temps."""
        if isinstance(s, ir.For):
            if not (isinstance(s.start, ir.Const) and s.start.value == 0 and isinstance(s.stop, ir.Const)):
                return s
            return replace(s, body=self.stmt(s.body, loops + (s,), lets))
        if isinstance(s, ir.Seq):
            return ir.seq(*(self.stmt(x, loops, lets) for x in s.stmts))
        if isinstance(s, ir.Let):
            value = self.expr(s.value, loops, lets)
            return ir.Let(s.var, value, self.stmt(s.body, loops, lets + (s,)))
        if isinstance(s, ir.Store):
            return replace(s, value=self.expr(s.value, loops, lets),
                           index=tuple(self.expr(i, loops, lets) for i in s.index))
        return s  # If, Alloc, Barrier, Prefetch: left alone

    def expr(self, e: ir.Expr, loops: tuple[ir.For, ...], lets: tuple[ir.Let, ...]) -> ir.Expr:
        loop_vars = {f.var for f in loops}
        index_lets = self._index_lets(lets, loop_vars)
        scope = loop_vars | {x.var for x in index_lets}

        edges = _edge_vars(e, self.node)

        def f(n: ir.Node) -> ir.Node | None:
            if not isinstance(n, ir.Reduce):
                return None
            if _hoistable(n, self.node, scope, self.roles):
                return self._hoist(n, self.node, loops, index_lets)
            for en in edges:
                if _edge_hoistable(n, en, scope, self.roles):
                    return self._hoist(n, en, loops, index_lets)
            return None

        return ir.transform(e, f)  # type: ignore[return-value]

    @staticmethod
    def _index_lets(lets: tuple[ir.Let, ...], loop_vars: set[str]) -> tuple[ir.Let, ...]:
        """The lets that are pure functions of the loop variables (``jn = jnw * 16 + jnv``)."""
        out, known = [], set(loop_vars)
        for x in lets:
            if not any(isinstance(n, ir.Load) for n in ir.walk(x.value)) and free_names(x.value) <= known:
                out.append(x)
                known.add(x.var)
        return tuple(out)

    def _hoist(self, r: ir.Reduce, row: str, loops: tuple[ir.For, ...], lets: tuple[ir.Let, ...]) -> ir.Expr:
        """A temp with a row per node (``row`` the node) or per child edge (``row`` an edge
        variable), the nest that fills it, and the load that replaces ``r``."""
        per_edge = row != self.node
        flat: ir.Expr = ir.Const(0)
        width = 1
        for f in loops:
            n = ir.const_int(f.stop)
            assert n is not None
            flat, width = flat * n + ir.Var(f.var), width * n
        flat = ir.simplify(flat)  # type: ignore[assignment]
        dtype = _dtype(r, self.dtypes)
        name = self.names.fresh("proj")
        self.temps.append(ir.Buffer(name, dtype, (ir.Var("E" if per_edge else "N"), ir.Const(width)), "temp"))
        value = ir.substitute(r, {row: ir.Var(self.edge)}) if per_edge else r
        body: ir.Stmt = ir.Store(name, (ir.Var(self.edge if per_edge else row), flat), value)  # type: ignore[arg-type]
        used = free_names(r) | free_names(flat)
        for x in reversed(lets):
            if x.var in used:
                body = ir.Let(x.var, x.value, body)
                used |= free_names(x.value)
        for f in reversed(loops):
            body = replace(f, body=body)
        (self.edge_nests if per_edge else self.nests).append(body)
        return ir.Load(name, (ir.Var(row), flat))

    def edge_loop(self, level: ir.Expr, kind: str) -> ir.For:
        """The loop over the child edges of level ``level``'s nodes running ``edge_nests``, the
        edge's child bound first (as a node loop binds its children)."""
        e, child = ir.Var(self.edge), self.names.fresh("ce")
        load = ir.Load("child_ids", (e,))

        def bind(n: ir.Node) -> ir.Node | None:
            return ir.Var(child) if n == load else None

        body = ir.transform(ir.seq(*self.edge_nests), bind)
        lo = ir.Load("child_offsets", (ir.Load("level_offsets", (level,)),))
        hi = ir.Load("child_offsets", (ir.Load("level_offsets", (level + 1,)),))
        return ir.For(self.edge, lo, hi, ir.Let(child, load, body), kind,  # type: ignore[arg-type]
                      annotations=("nodes",))


def _chunked(node: str, first: ir.Expr, last: ir.Expr, body: ir.Stmt, kind: str, names: NameGen) -> ir.Stmt:
    """``body`` for every node of levels ``first..last-1``, in chunks of :data:`CHUNK_NODES`
    nodes one after another (each chunk a node loop annotated ``"nodes"``)."""
    lo, hi, c = (names.fresh(n) for n in ("proj_lo", "proj_hi", "proj_chunk"))
    start = ir.Var(lo) + ir.Var(c) * CHUNK_NODES
    nodes = ir.For(node, start, ir.minimum(start + CHUNK_NODES, ir.Var(hi)), body, kind, annotations=("nodes",))
    chunks = ir.For(c, 0, (ir.Var(hi) - ir.Var(lo) + (CHUNK_NODES - 1)) // CHUNK_NODES, nodes, "serial")
    return ir.Let(lo, ir.Load("level_offsets", (first,)), ir.Let(hi, ir.Load("level_offsets", (last,)), chunks))


def _dtype(r: ir.Reduce, dtypes: dict[str, str]) -> str:
    floats = {dtypes[ld.buffer] for ld in ir.walk(r) if isinstance(ld, ir.Load) and dtypes[ld.buffer] in ir.FLOAT_DTYPES}
    return "float64" if "float64" in floats else "float32"


def _whole(node: str, first: ir.Expr, last: ir.Expr, body: ir.Stmt, kind: str, names: NameGen) -> ir.Stmt:
    """``body`` for every node of levels ``first..last-1`` in one node loop (annotated
    ``"nodes"``): the per-level program's prologue kernel, whose work-group loop must be its
    outermost loop (a serial loop of chunks around it would need a barrier across groups)."""
    lo, hi = names.fresh("proj_lo"), names.fresh("proj_hi")
    nodes = ir.For(node, ir.Var(lo), ir.Var(hi), body, kind, annotations=("nodes",))
    return ir.Let(lo, ir.Load("level_offsets", (first,)), ir.Let(hi, ir.Load("level_offsets", (last,)), nodes))


def _per_level_launches(program: ir.Program) -> list[tuple[int, ir.HostFor]]:
    """The host loops over levels ``first..L`` (``first`` a constant) whose steps each launch a
    kernel of one parameter with the level, every such kernel launched nowhere else: the
    per-level program's levels, with their positions in ``program.host``."""
    def launches(steps: tuple[ir.Node, ...]) -> list[ir.Launch]:
        out: list[ir.Launch] = []
        for st in steps:
            out += launches(st.body) if isinstance(st, ir.HostFor) else [st] if isinstance(st, ir.Launch) else []
        return out

    counts: dict[str, int] = {}
    for launch in launches(program.host):
        counts[launch.kernel] = counts.get(launch.kernel, 0) + 1
    params = {k.name: k.params for k in program.kernels}
    out = []
    for i, st in enumerate(program.host):
        if (isinstance(st, ir.HostFor) and st.stop == ir.Var("L") and ir.const_int(st.start) is not None
                and st.body and all(isinstance(x, ir.Launch) and x.args == (ir.Var(st.var),)
                                    and len(params.get(x.kernel, ())) == 1 and counts[x.kernel] == 1
                                    for x in st.body)):
            out.append((i, st))
    return out


def hoist_projections(program: ir.Program) -> tuple[ir.Program, int]:
    """``program`` with every hoistable reduction of its levels (see the module doc) computed
    before the levels for all the internal nodes; and how many were hoisted. The levels are a
    kernel's level loop (``for l in first..L``; the prologue goes before it) or, in a per-level
    program, the kernels a host loop over the levels launches (the prologue is a kernel of its
    own, launched before that host loop)."""
    names = names_of(program)
    temps: list[ir.Buffer] = []
    count = min_levels = 0

    def level_body(var: str, first: ir.Expr, last: ir.Expr, body: ir.Stmt,
                   chunked: bool) -> tuple[ir.Stmt, list[ir.Stmt]] | None:
        """``body`` (the statements of level ``var``) with its hoisted reductions read from
        their temps and the prologue that fills them; None when nothing is hoisted."""
        nonlocal count, min_levels
        node_loops = _level_node_loops(var, body)
        prologue: list[ir.Stmt] = []
        new_loops: dict[int, ir.Stmt] = {}
        for loop in node_loops:
            h = _Hoister(program, loop.var, names)
            lets, loop_body = node_lets(loop)
            new_body = h.stmt(loop_body, (), ())
            if not (h.nests or h.edge_nests):
                continue
            for name, value in reversed(lets):
                new_body = ir.Let(name, value, new_body)
            new_loop: ir.Stmt = replace(loop, body=new_body)
            if h.edge_nests:
                new_loop = ir.seq(renamed_binders(h.edge_loop(ir.Var(var), loop.kind), names), new_loop)
            new_loops[id(loop)] = new_loop
            temps.extend(h.temps)
            count += len(h.nests) + len(h.edge_nests)
            if h.nests:
                shape = _chunked if chunked else _whole
                prologue.append(renamed_binders(shape(loop.var, first, last, ir.seq(*h.nests), loop.kind, names),
                                                names))
        if not new_loops:
            return None
        if prologue:
            min_levels = max(min_levels, ir.const_int(first) or 0)
        stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
        return ir.seq(*(new_loops.get(id(x), x) for x in stmts)), prologue  # type: ignore[arg-type]

    def visit(s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Seq):
            return ir.seq(*(visit(x) for x in s.stmts))
        if isinstance(s, (ir.Let, ir.Alloc)):
            return replace(s, body=visit(s.body))
        if not (isinstance(s, ir.For) and s.kind in ("serial", "unrolled")):
            return s
        if not _level_node_loops(s.var, s.body) or ir.const_int(s.start) is None or s.stop != ir.Var("L"):
            return replace(s, body=visit(s.body))
        done = level_body(s.var, s.start, s.stop, s.body, chunked=True)
        if done is None:
            return s
        body, prologue = done
        return ir.seq(*prologue, replace(s, body=body))

    kernels = {k.name: replace(k, body=visit(k.body)) for k in program.kernels}
    host = list(program.host)
    for i, loop in reversed(_per_level_launches(program)):
        prologue = []
        for launch in loop.body:
            k = kernels[launch.kernel]
            done = level_body(k.params[0], loop.start, loop.stop, k.body, chunked=False)
            if done is not None:
                kernels[k.name] = replace(k, body=done[0])
                prologue += done[1]
        if prologue:
            name = names.fresh("proj")
            threads = max(kernels[x.kernel].threads_per_group for x in loop.body)
            kernels[name] = ir.Kernel(name, (), ir.seq(*prologue), threads)
            host.insert(i, ir.Launch(name))
    if not count:
        return program, 0
    # the prologue reads level_offsets[first]: the program has at least ``first`` levels
    # (``Lowered.bind_batch`` appends empty ones to a batch with fewer)
    sizes = tuple(replace(z, lo=max(z.lo, min_levels)) if z.name == "L" else z for z in program.sizes)
    return replace(program, sizes=sizes, kernels=tuple(kernels.values()), host=tuple(host),
                   buffers=program.buffers + tuple(temps)), count
