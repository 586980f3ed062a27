"""Node jam: groups of a level's nodes computed together (the ``node_jam`` knobs).

Pipeline position: a schedule transform (``LoopProgram -> LoopProgram``), applied by
``cortex.core.lower_schedule.apply_loop_schedule`` after the level interchange
(``cortex.core.level_interchange``), whose node loops it rewrites; the one jam every backend
gets (its knobs' defaults come from the target's capabilities). Target-neutral and pure: the
result computes what the input computes (up to the association of each sum's additions) and the
tests check it against the input on the interpreter.

It applies to a node loop (:func:`~cortex.core.level_interchange.is_node_loop`: its
iterations are independent) whose body is node lets around one ``vectorized`` hidden block
``vectorized for jv in 0..W: B`` with ``B`` lets and stores (an interchanged level: the loop
over the hidden blocks is outside)::

    for v in lo..hi:                          let s0 = lo
      lets(v)                                 for g in 0..(hi - s0 + 2) // 8:      # groups of 8
      vectorized for jv: B(v)        ->         if lo <= v0 < hi:                  # v0 = s0 + 8g
                                                  let v_q = min(v0 + q, hi - 1); lets(v_q)
                                                  if guards(v_0) and .. guards(v_7):
                                                    <jammed block of 8 nodes>     (jam_fuse)
                                                  else:
                                                    for v in v0..min(v0 + 8, hi): lets(v); B(v)  # cold
                                              let s1 = s0 + min(8 * count, hi - s0)
                                              for g in ..: groups of 4, then 2, then 1

Groups run in *stages* (:func:`stages`): groups of ``m`` while at least ``least`` nodes are
left, ``m`` halving down to 1 (8 while 6 are left, then 4 while 3 are, then 2, then 1). A short
group repeats its last node (``min(v0 + q, hi - 1)``), which is allowed only with ``pad`` and
when the body reads nothing it stores at its own row (:func:`no_self_reads`: a repeated
read-modify-write would apply twice); otherwise every stage needs its full size. A level of 2-5
nodes then costs a group of 2 or 4, not a padded 8.

*Guards* are the conditions ``c`` of ``select(c, x, 0)`` in ``B`` that depend only on node lets
and load nothing (a child exists: ``ch >= 0``); the jammed block is ``B`` with them taken
(no conditional load in its loops), run when they hold for every node of the group, and the
group runs node by node through the plain body otherwise (a ``cold`` loop: rarely run, so its
code is kept small). The always-true ``lo <= v0 < hi`` and the ``min`` give the verifier the
range of every node variable.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.core import jam_fuse as fuse
from cortex.core import loopir as ir
from cortex.core.level_interchange import is_node_loop, node_lets
from cortex.core.loop_transforms import rewrite_loops
from cortex.core.lower_case import NameGen


@dataclass(frozen=True)
class JamOptions:
    """The node-jam knobs (``Schedule.node_jam``, ``jam_pad``, ``jam_accumulators``,
    ``jam_unroll``) and the register width that counts accumulators."""

    nodes: int = 8  # the first stage's group size (1: no jam)
    pad: bool = True  # a short group repeats its last node where that is legal
    accumulators: int = 24  # SIMD registers one fused loop may keep accumulators in
    register_lanes: int = 16  # lanes of one SIMD register for the program's float type
    unroll: int = 1  # steps of a fused reduction loop per trip (a constant trip count it divides)


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


def jam_node_loop(loop: ir.For, opts: JamOptions, program: ir.Program, names: NameGen) -> ir.Stmt | None:
    """``loop`` jammed in stages (see the module doc), or None when it does not apply."""
    if opts.nodes < 2 or not is_node_loop(loop):
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
    pad = opts.pad and no_self_reads(loop.body, loop.var)
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
    for q in range(M):
        env: dict[str, ir.Expr] = {loop.var: vs[q]}
        for name, value in lets:
            v = ir.substitute(value, env)
            var = ir.Var(names.fresh(f"{name}_{q}"), ir.infer_dtype(v, dtypes))  # type: ignore[arg-type]
            env[name] = var
            binds.append((var.name, v))  # type: ignore[arg-type]
        envs.append(env)

    def group(m: int) -> ir.Stmt:
        """Nodes ``v0 .. v0 + m - 1`` jammed, the cursor moved past them."""
        per_loop = max(1, opts.accumulators // (m * regs))
        loops = fuse.plan_loops(sums, per_loop)
        moved = v0 + ir.minimum(left, m) if m > 1 else v0 + 1
        return ir.seq(fuse.jammed_block(blk, m, envs[:m], sums, loops, opts.unroll, names),
                      ir.Store(cursor, (ir.Const(0),), moved))

    # the largest group that fits and whose guards hold; a node whose guards fail runs alone
    # through the plain body (cold)
    fv = names.fresh(loop.var)
    plain = fuse.renamed_binders(ir.substitute(loop.body, {loop.var: ir.Var(fv)}), names)
    step: ir.Stmt = ir.seq(ir.For(fv, v0, v0 + 1, plain, "serial", annotations=("cold",)),  # type: ignore[arg-type]
                           ir.Store(cursor, (ir.Const(0),), v0 + 1))
    for m, least in reversed(stages(M, pad)):
        tests = [ir.substitute(cond, envs[q]) for q in range(m) for cond in conds]
        if m > 1:
            tests.insert(0, ir.Cmp(">=", left, ir.Const(least)))
        step = group(m) if not tests else ir.If(_land(tests), group(m), step)  # type: ignore[arg-type]
    for name, value in reversed(binds):
        step = ir.Let(name, value, step)
    step = ir.Let(left.name, hi - v0, step)
    trips = ir.Var(names.fresh(f"{loop.var}_trip"))
    body = ir.Let(v0.name, ir.Load(cursor, (ir.Const(0),)),
                  ir.If(ir.Cmp(">=", v0, lo), ir.If(ir.Cmp("<", v0, hi), step)))
    out = ir.Alloc(cursor, ir.INT, (1,), "private", ir.seq(
        ir.Store(cursor, (ir.Const(0),), lo), ir.For(trips.name, 0, hi - lo, body, "serial")))
    return ir.Let(lo.name, loop.start, ir.Let(hi.name, loop.stop, out))


def jam_levels(program: ir.Program, opts: JamOptions) -> tuple[ir.Program, int]:
    """``program`` with every node loop :func:`jam_node_loop` applies to jammed, and how many."""
    if opts.nodes < 2:
        return program, 0
    names = fuse.names_of(program)
    return rewrite_loops(program, lambda loop: jam_node_loop(loop, opts, program, names))
