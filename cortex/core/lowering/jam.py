"""Node jam: groups of a level's nodes computed together (the ``node_jam`` knobs).

Pipeline position: a schedule transform (``LoopProgram -> LoopProgram``), applied by
``cortex.core.lowering.apply_schedule.apply_loop_schedule`` after the level interchange
(``cortex.core.lowering.level_interchange``), whose node loops it rewrites; the one jam every backend
gets (its knobs' defaults come from the target's capabilities). Target-neutral and pure: the
result computes what the input computes (up to the association of each sum's additions) and the
tests check it against the input on the interpreter.

It applies to a node loop (:func:`~cortex.core.lowering.level_interchange.is_node_loop`: its
iterations are independent) whose body is node lets around one ``vectorized`` hidden block
``vectorized for jv in 0..W: B`` with ``B`` lets and stores (an interchanged level: the loop
over the hidden blocks is outside)::

    for v in lo..hi:               alloc private next[1]: next[0] = lo
      lets(v)                      for trip in 0..hi - lo:           # one group a trip, at most
      vectorized for jv: B(v)        let v0 = next[0]
                                     if lo <= v0 < hi:                # while nodes are left
                                       let left = hi - v0
                                       let v_q = min(v0 + q, hi - 1); lets(v_q)   # q < node_jam
                                       if left >= 6 and guards(v_0 .. v_7):
                                         <jammed block of 8 nodes> (jam_fuse); next[0] = v0 + min(left, 8)
                                       else if left >= 3 and guards(v_0 .. v_3):
                                         <jammed block of 4 nodes>; next[0] = v0 + min(left, 4)
                                       else if left >= 2 and guards(v_0, v_1): <2 nodes> ...
                                       else if guards(v_0): <1 node>; next[0] = v0 + 1
                                       else: for v in v0..v0 + 1: lets(v); B(v)  # cold; next[0] = v0 + 1

A cursor walks the level and each trip runs the largest group that fits and whose guards hold:
``node_jam`` nodes while at least three quarters of that are left, then half as many, down to
one (:func:`stages`: 8 while 6 are left, then 4 while 3 are, then 2, then 1). A short group
repeats its last node (``min(v0 + q, hi - 1)``), which is allowed only with ``pad`` and when the
body reads nothing it stores at its own row (:func:`no_self_reads`: a repeated read-modify-write
would apply twice); otherwise every group needs its full size. A level of 2-5 nodes then costs a
group of 2 or 4, not a padded 8. The loop has a trip per node at most; the trips after the last
group do nothing.

*Guards* are the conditions ``c`` of ``select(c, x, 0)`` in ``B`` that depend only on node lets
and load nothing (a child exists: ``ch >= 0``); a jammed block is ``B`` with them taken (no
conditional load in its loops), run when they hold for every node of the group. Where one fails
the cursor tries the next smaller group, and a node whose own guard fails runs alone through
the plain body, in a loop annotated ``cold`` (rarely run: its code is kept small). There is one
copy of the plain body and one jammed block per group size. The always-true ``lo <= v0 < hi``
and the ``min`` give the verifier the range of every node variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cortex.core.lowering import jam_fuse as fuse
from cortex.core import loopir as ir
from cortex.core.lowering.level_interchange import is_node_loop, node_lets, node_name
from cortex.core.lowering.transforms import rewrite_loops
from cortex.core.lowering.cases import NameGen


@dataclass(frozen=True)
class JamOptions:
    """The node-jam knobs (``Schedule.node_jam``, ``jam_pad``, ``jam_accumulators``,
    ``jam_unroll``, ``jam_rows``) and the register width that counts accumulators."""

    nodes: int = 8  # the first stage's group size (1: no jam)
    pad: bool = True  # a short group repeats its last node where that is legal
    accumulators: int = 24  # SIMD registers one fused loop may keep accumulators in
    register_lanes: int = 16  # lanes of one SIMD register for the program's float type
    unroll: int = 1  # steps of a fused reduction loop per trip (a constant trip count it divides)
    interleave: bool = True  # the group's body let by let for every node (else node by node)
    rows: int = 0  # node rows (their addresses) one fused loop reads per step, all nodes (0: no limit)


def loop_plan(sums: list, opts: JamOptions, m: int, regs: int) -> list[list]:
    """The fused loops of a group of ``m`` nodes (``jam_fuse.plan_loops``): at most
    ``accumulators // (m * regs)`` sums a loop (``regs`` registers per accumulator slot) and at
    most ``rows // m`` distinct rows per node (at least one sum a loop either way)."""
    per_loop = max(1, opts.accumulators // (m * regs))
    return fuse.plan_loops(sums, per_loop, max(1, opts.rows // m) if opts.rows else 0)


def stages(nodes: int, pad: bool) -> tuple[tuple[int, int], ...]:
    """``(group size, fewest nodes left that run it)`` per stage: sizes ``nodes, nodes/2, ..,
    1``; with ``pad`` a group of ``m >= 4`` runs while ``m - m // 4`` are left (8 while 6)."""
    out = []
    m = nodes
    while m >= 1:
        out.append((m, m - m // 4 if pad and m >= 4 else m))
        m //= 2
    return tuple(out)


def no_self_reads(body: ir.Stmt, node: str) -> bool:
    """Does node ``node``'s body read nothing it stores (its own row of a stored buffer)? Then
    computing a node twice stores the same values twice. Other rows of a stored buffer are
    other nodes' (children, done at earlier levels: the level's nodes are independent)."""
    own = {node}
    for n in ir.walk(body):
        if isinstance(n, ir.Let) and isinstance(n.value, ir.Var) and n.value.name in own:
            own.add(n.var)
    stored: dict[str, set] = {}
    for n in ir.walk(body):
        if isinstance(n, ir.Store):
            stored.setdefault(n.buffer, set()).add(n.index)
    for n in ir.walk(body):
        if isinstance(n, ir.Load) and n.buffer in stored:
            if n.index in stored[n.buffer] or (n.index and fuse.free_names(n.index[0]) & own):
                return False
    return True


def _needs_branch(e: ir.Expr) -> bool:
    """Could evaluating ``e`` unconditionally fault or cost a loop (loads, division, sums)?"""
    return any(isinstance(n, (ir.Load, ir.Reduce)) or (isinstance(n, ir.BinOp) and n.op in ("//", "%"))
               for n in ir.walk(e))


def guards(block: ir.For, let_names: set[str]) -> tuple[list[ir.Expr], ir.Stmt] | None:
    """The guard conditions of a hidden block (see the module doc) and its body with every
    guard taken, or None when that body is not lets and stores without conditional loads."""
    conds: list[ir.Expr] = []
    for n in ir.walk(block.body):
        if isinstance(n, ir.Select) and _needs_branch(n.a) and not _needs_branch(n.b):
            names = fuse.free_names(n.cond)
            if names and names <= let_names and not any(
                    isinstance(m, (ir.Load, ir.Reduce)) for m in ir.walk(n.cond)) and n.cond not in conds:
                conds.append(n.cond)
    taken = ir.transform(block.body, lambda m: m.a if isinstance(m, ir.Select) and m.cond in conds else None)
    for n in ir.walk(taken):
        if isinstance(n, (ir.For, ir.If, ir.Alloc, ir.Barrier, ir.Prefetch)):
            return None
        if isinstance(n, ir.Select) and (_needs_branch(n.a) or _needs_branch(n.b)):
            return None
        if isinstance(n, ir.BinOp) and n.op in ("and", "or") and _needs_branch(n.b):
            return None
    return conds, taken  # type: ignore[return-value]


def _land(conds: list[ir.Expr]) -> ir.Expr:
    out = conds[0]
    for c in conds[1:]:
        out = ir.land(out, c)
    return out


@dataclass(frozen=True)
class Walk:
    """A node loop prepared for a cursor walk (see the module doc): its jam block, fused sums and
    guards, and the fresh names of one walk (the level's range, the cursor, the group's nodes
    ``vs`` and their lets ``binds``, each node's renaming ``envs``)."""

    loop: ir.For
    blk: fuse.Block
    sums: list
    conds: list
    pad: bool
    regs: int  # registers per accumulator slot
    lo: ir.Var
    hi: ir.Var
    cursor: str
    v0: ir.Var
    left: ir.Var
    envs: list
    binds: list


def prepare_walk(loop: ir.For, opts: JamOptions, program: ir.Program, names: NameGen,
                 independent: bool = False) -> Walk | None:
    """``loop`` ready for a cursor walk of groups of up to ``opts.nodes`` nodes, with fresh
    names; None when the jam does not apply (see :func:`jam_node_loop`)."""
    if opts.nodes < 2 or not (independent or is_node_loop(loop)):
        return None
    lets, block = node_lets(loop)
    if not (isinstance(block, ir.For) and block.kind == "vectorized"):
        return None
    a, b = ir.const_int(block.start), ir.const_int(block.stop)
    if a != 0 or b is None or b < 1:
        return None
    let_names = {name for name, _ in lets}
    found = guards(block, let_names)
    if found is None:
        return None
    conds, taken = found
    dtypes = {bf.name: bf.dtype for bf in program.buffers}
    index_bufs = {bf.name for bf in program.buffers if bf.role == "index"}
    child_lets = frozenset(name for name, value in lets
                           if any(isinstance(n, ir.Load) and n.buffer in index_bufs for n in ir.walk(value)))
    blk = fuse.Block(block.var, b, taken, loop.var, tuple(lets), dtypes, child_lets)
    sums = fuse.fusable_sums(blk)
    if not sums:
        return None
    pad = opts.pad and no_self_reads(loop.body, node_name(loop))
    regs = max(1, -(-b // max(1, opts.register_lanes)))  # registers per accumulator slot
    lo, hi = ir.Var(names.fresh(f"{loop.var}_lo")), ir.Var(names.fresh(f"{loop.var}_hi"))
    cursor = names.fresh(f"{loop.var}_next")
    v0 = ir.Var(names.fresh(f"{loop.var}_0"))
    left = ir.Var(names.fresh(f"{loop.var}_left"))

    # the nodes v0 .. v0 + M - 1 (the last one repeated past hi) and their lets, for the tests
    # and every group size
    M = opts.nodes
    vs = [ir.Var(names.fresh(f"{loop.var}_{q}")) for q in range(M)]
    envs: list[dict[str, ir.Expr]] = []
    binds: list[tuple[str, ir.Expr]] = [(vs[0].name, v0)] + [(vs[q].name, ir.minimum(v0 + q, hi - 1))
                                                            for q in range(1, M)]
    # a let that does not depend on the node (a row jam's node lets: ``row_jam``) is bound
    # once and shared, so the group's loads through it are one load
    per_node = {loop.var}
    for name, value in lets:
        if fuse.free_names(value) & per_node:
            per_node.add(name)
    shared: dict[str, ir.Expr] = {}
    for q in range(M):
        env: dict[str, ir.Expr] = {loop.var: vs[q]}
        for name, value in lets:
            if name not in per_node and name in shared:
                env[name] = shared[name]
                continue
            v = ir.substitute(value, env)
            var = ir.Var(names.fresh(f"{name}_{q}"), ir.infer_dtype(v, dtypes))  # type: ignore[arg-type]
            env[name] = var
            binds.append((var.name, v))  # type: ignore[arg-type]
            if name not in per_node:
                shared[name] = var
        envs.append(env)
    return Walk(loop, blk, sums, conds, pad, regs, lo, hi, cursor, v0, left, envs, binds)


def cursor_walk(w: Walk, opts: JamOptions, group: Callable[[int], ir.Stmt], cold: ir.Stmt | None,
                names: NameGen) -> ir.Stmt:
    """The walk over ``w.loop``'s nodes (see the module doc): each trip the largest group ``m``
    that fits and whose guards hold runs ``group(m)`` (its nodes: ``w.envs[:m]``); a node whose
    guards fail runs ``cold`` (a statement over ``w.v0``; None: nothing)."""
    v0, left, cursor, lo, hi = w.v0, w.left, w.cursor, w.lo, w.hi

    def moved(m: int) -> ir.Stmt:
        return ir.Store(cursor, (ir.Const(0),), v0 + ir.minimum(left, m) if m > 1 else v0 + 1)

    step: ir.Stmt = moved(1) if cold is None else ir.seq(cold, moved(1))
    for m, least in reversed(stages(opts.nodes, w.pad)):
        tests = list(dict.fromkeys(ir.substitute(cond, w.envs[q]) for q in range(m) for cond in w.conds))
        if m > 1:
            tests.insert(0, ir.Cmp(">=", left, ir.Const(least)))
        run = ir.seq(group(m), moved(m))
        step = run if not tests else ir.If(_land(tests), run, step)  # type: ignore[arg-type]
    for name, value in reversed(w.binds):
        step = ir.Let(name, value, step)
    step = ir.Let(left.name, hi - v0, step)
    trips = names.fresh(f"{w.loop.var}_trip")
    body = ir.Let(v0.name, ir.Load(cursor, (ir.Const(0),)),
                  ir.If(ir.Cmp(">=", v0, lo), ir.If(ir.Cmp("<", v0, hi), step)))
    return ir.Alloc(cursor, ir.INT, (1,), "private", ir.seq(
        ir.Store(cursor, (ir.Const(0),), lo), ir.For(trips, 0, hi - lo, body, "serial")))


def plain_body(w: Walk, names: NameGen) -> ir.Stmt:
    """Node ``w.v0`` alone through the loop's plain body, guards and all (a loop marked cold)."""
    fv = names.fresh(w.loop.var)
    plain = fuse.renamed_binders(ir.substitute(w.loop.body, {w.loop.var: ir.Var(fv)}), names)
    return ir.For(fv, w.v0, w.v0 + 1, plain, "serial", annotations=("cold",))  # type: ignore[arg-type]


def jam_node_loop(loop: ir.For, opts: JamOptions, program: ir.Program, names: NameGen,
                  independent: bool = False) -> ir.Stmt | None:
    """``loop`` jammed (see the module doc), or None when it does not apply. ``independent``:
    the caller knows the iterations are independent (a chunk of a level's nodes)."""
    w = prepare_walk(loop, opts, program, names, independent)
    if w is None:
        return None

    def group(m: int) -> ir.Stmt:
        """Nodes ``v0 .. v0 + m - 1`` jammed."""
        loops = loop_plan(w.sums, opts, m, w.regs)
        return fuse.jammed_block(w.blk, m, w.envs[:m], w.sums, loops, opts.unroll, names, opts.interleave)

    walk = cursor_walk(w, opts, group, plain_body(w, names), names)
    return ir.Let(w.lo.name, loop.start, ir.Let(w.hi.name, loop.stop, walk))


def jam_chunks(loop: ir.For, opts: JamOptions, program: ir.Program, names: NameGen) -> ir.Stmt | None:
    """A parallel level loop that was not interchanged, ``lets; for jb in 0..B: vectorized for jv:
    B`` (hidden blocks inside each node), jammed as work units of (hidden block, chunk of
    ``node_jam`` nodes)::

        parallel for g in 0..B * C:                     # C = ceil(level / node_jam) chunks
          let jb = g // C; let first = lo + (g % C) * node_jam; let last = min(first + node_jam, hi)
          <the chunk's nodes first..last jammed over block jb, as in the module doc>

    Consecutive work units share a hidden block (its weights stay in the cache for the next
    chunk), and a level of one node still has ``B`` work units. None when it does not apply."""
    if loop.kind != "parallel" or not is_node_loop(loop):
        return None
    lets, blocks = node_lets(loop)
    if not (isinstance(blocks, ir.For) and blocks.kind in ("serial", "parallel") and isinstance(blocks.body, ir.For)
            and blocks.body.kind == "vectorized" and ir.const_int(blocks.start) == 0):
        return None
    count = ir.const_int(blocks.stop)
    if count is None or count < 1:
        return None
    m = opts.nodes
    lo, hi = ir.Var(names.fresh(f"{loop.var}_lo")), ir.Var(names.fresh(f"{loop.var}_hi"))
    chunks = ir.Var(names.fresh(f"{loop.var}_chunks"))
    g, first, last = (ir.Var(names.fresh(f"{loop.var}_{n}")) for n in ("unit", "first", "last"))
    body: ir.Stmt = blocks.body
    for name, value in reversed(lets):
        body = ir.Let(name, value, body)
    chunk = ir.For(loop.var, first, last, body, "serial")
    jammed = jam_node_loop(chunk, opts, program, names, independent=True)
    if jammed is None:
        return None
    # always true: the range of the block and of the chunk, for the verifier
    block = ir.Var(blocks.var)
    unit = ir.If(ir.land(ir.land(ir.Cmp(">=", block, ir.Const(0)), ir.Cmp("<", block, ir.Const(count))),
                         ir.land(ir.Cmp(">=", first, lo), ir.Cmp("<=", last, hi))), jammed)
    unit = ir.Let(last.name, ir.minimum(first + m, hi), unit)
    unit = ir.Let(first.name, lo + (g % chunks) * m, unit)
    unit = ir.Let(blocks.var, g // chunks, unit)
    out = ir.For(g.name, 0, chunks * count, unit, "parallel")
    out = ir.Let(chunks.name, (hi - lo + (m - 1)) // m, out)
    return ir.Let(lo.name, loop.start, ir.Let(hi.name, loop.stop, out))


def jam_levels(program: ir.Program, opts: JamOptions, interchanged: bool = True) -> tuple[ir.Program, int]:
    """``program`` with every level loop jammed where it applies, and how many: the node loops
    of an interchanged level (:func:`jam_node_loop`), or with ``interchanged=False`` the
    parallel level loops as work units of hidden block x node chunk (:func:`jam_chunks`)."""
    if opts.nodes < 2:
        return program, 0
    names = fuse.names_of(program)
    if interchanged:
        return rewrite_loops(program, lambda loop: jam_node_loop(loop, opts, program, names))
    return rewrite_loops(program, lambda loop: jam_chunks(loop, opts, program, names)
                         or (loop if loop.kind == "parallel" else None))
