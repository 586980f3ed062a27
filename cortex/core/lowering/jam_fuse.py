"""The jammed block of a node group: fused reduction loops over private accumulators.

Pipeline position: a part of the node jam (``cortex.core.lowering.jam``), which calls :func:`jammed_block`
for each group of ``m`` nodes it makes. Pure: builds LoopProgram statements.

Given the hidden block a group computes (``vectorized for jv in 0..W: B``, ``B`` lets and stores
with the node's guards already known to hold) and the per-node renamings of the node variable
and node lets, it returns::

    alloc private acc[m * S * W]:                       # one W-lane slot per (sum, node)
      vectorized for jv: acc[slot] = 0 ...              # every slot
      for k in a..b (kk in 0..(b-a)/u when unrolled):   # one loop per group of fused sums
        vectorized for jv:
          let f = W_s[k, jb + jv]                        # node-independent factor: once per step
          acc[slot(s, q) + jv] = fma(f, x_q(k), acc[slot(s, q) + jv])   # node-major, then sums
      vectorized for jv:                                # the body, each let once per node
        let y_0 = ... acc[slot(s, 0) + jv] ...; let y_1 = ...; ...; stores of every node

The sums fused are :func:`fusable` ones: ``sum``/``max``/``mean`` over a range that does not
depend on the node, whose body uses only names bound outside the block (lets of ``B`` without
loads or reductions are inlined) and reads nothing the block stores except the rows of other
nodes named by a node let loaded from an index buffer (a child: nodes of a level are never each
other's children), so computing them before the body's stores is legal. Other reductions stay
in the body, per node. Sums sharing a range go into one loop up to the accumulator budget
(``accumulators`` SIMD registers: ``accumulators // (m * registers per slot)`` sums a loop) and
the row budget (``rows // m`` distinct node rows per node: each row's address is a register), in
the order of first use, each loop taking the siblings that share most loads with its first sum
(a child's ``h[c, k]`` then feeds several weight rows), the loops' shares as even as they go.
Each weight vector is then loaded once per step for the group's ``m`` nodes: the register
blocking of a GEMM micro-kernel instead of ``m * S`` separate GEMVs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from cortex.core import loopir as ir
from cortex.core.lowering.cases import NameGen

FUSED_OPS = ("sum", "max", "mean")


def free_names(node: ir.Node) -> set[str]:
    return {n.name for n in ir.walk(node) if isinstance(n, ir.Var)}


def names_of(program: ir.Program) -> NameGen:
    """Fresh identifiers for ``program``: none of its names (sizes, buffers, kernels, params,
    every bound or used name) is reused; its names are never shadowed or reused."""
    taken = set(program.size_names) | {b.name for b in program.buffers}
    for k in program.kernels:
        taken.add(k.name)
        taken.update(k.params)
        for n in ir.walk(k.body):
            if isinstance(n, ir.Var):
                taken.add(n.name)
            elif isinstance(n, (ir.For, ir.Let, ir.Reduce)):
                taken.add(n.var)
            elif isinstance(n, ir.Alloc):
                taken.add(n.name)
    return NameGen(taken)


def renamed_binders(node: ir.Node, names: NameGen) -> ir.Node:
    """``node`` with every name it binds (lets, loops, reductions, allocs) renamed freshly: a
    copy that can sit beside the original in one program."""
    mapping: dict[str, str] = {}
    for n in ir.walk(node):
        if isinstance(n, (ir.For, ir.Let, ir.Reduce)) and n.var not in mapping:
            mapping[n.var] = names.fresh(n.var)
        elif isinstance(n, ir.Alloc) and n.name not in mapping:
            mapping[n.name] = names.fresh(n.name)
    if not mapping:
        return node

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.Var) and n.name in mapping:
            return ir.Var(mapping[n.name], n.dtype)
        if isinstance(n, (ir.For, ir.Let, ir.Reduce)) and n.var in mapping:
            return replace(n, var=mapping[n.var])
        if isinstance(n, ir.Alloc) and n.name in mapping:
            return replace(n, name=mapping[n.name])
        if isinstance(n, (ir.Load, ir.Store)) and n.buffer in mapping:
            return replace(n, buffer=mapping[n.buffer])
        return None

    return ir.transform(node, f)


@dataclass(frozen=True)
class Block:
    """What the jam knows of the hidden block it jams: the lane loop's variable and width, its
    body (guards stripped), the node variable and lets, the dtypes of the buffers, and which
    node lets name a child (a load from an index buffer)."""

    lane: str
    width: int
    body: ir.Stmt
    node: str
    lets: tuple[tuple[str, ir.Expr], ...]
    dtypes: dict
    child_lets: frozenset[str]


@dataclass(frozen=True, eq=False)  # compared by identity: cheap dict keys
class Sum:
    """A fused reduction: its node in the block body, its body with the block's cheap lets
    inlined, and its loads written over one variable (to find the sums that share them)."""

    node: ir.Reduce
    body: ir.Expr
    loads: frozenset[ir.Load]
    gathers: frozenset[ir.Load] = frozenset()  # those of ``loads`` at a node's own rows (its children's)


def fusable_sums(blk: Block) -> list[Sum]:
    """The block's reductions that can be computed ahead of its body for every node of a group
    (see the module doc), in the order the body first uses them."""
    lets = {n.var: n.value for n in ir.walk(blk.body) if isinstance(n, ir.Let)}
    cheap = {name for name, value in lets.items()
             if not any(isinstance(n, (ir.Load, ir.Reduce)) for n in ir.walk(value))}
    written = {n.buffer for n in ir.walk(blk.body) if isinstance(n, ir.Store)}
    node_names = {blk.node} | {name for name, _ in blk.lets}
    out = []
    for r in first_uses(blk.body):
        body = _fusable_body(r, blk, lets, cheap, written, node_names)
        if body is not None:
            if any(isinstance(n, ir.BinOp) and n.op in ("//", "%") for n in ir.walk(body)):
                body = split_lane(body, blk.lane, blk.width)  # type: ignore[assignment]
            canon = ir.substitute(body, {r.var: ir.Var("k")})
            loads = frozenset(n for n in ir.walk(canon) if isinstance(n, ir.Load))
            out.append(Sum(r, body, loads, frozenset(ld for ld in loads if free_names(ld) & node_names)))
    return out


def _fusable_body(r: ir.Reduce, blk: Block, lets: dict[str, ir.Expr], cheap: set[str], written: set[str],
                  node_names: set[str]) -> ir.Expr | None:
    if r.op not in FUSED_OPS or r.lanes != 1:
        return None
    if ir.infer_dtype(r.body, blk.dtypes) not in ir.FLOAT_DTYPES:
        return None
    if (free_names(r.start) | free_names(r.stop)) & (set(lets) | node_names | {blk.lane}):
        return None
    if any(isinstance(n, ir.Reduce) for n in ir.walk(r.body) if n is not r):
        return None
    body = r.body
    for _ in range(len(lets) + 1):  # inline the lets it uses (index arithmetic such as jn)
        used = free_names(body) & set(lets)
        if not used:
            break
        if used - cheap:
            return None
        body = ir.substitute(body, {name: lets[name] for name in used})  # type: ignore[assignment]
    if free_names(body) & set(lets):
        return None
    if not free_names(body) & node_names:
        return None  # the same for every node: the body computes it once
    for ld in ir.walk(body):
        if isinstance(ld, ir.Load) and ld.buffer in written:
            row = ld.index[0] if ld.index else None
            if not (isinstance(row, ir.Var) and row.name in blk.child_lets):
                return None
    return body


def first_uses(body: ir.Stmt) -> list[ir.Reduce]:
    """The outermost reductions of ``body`` (lets and stores) in the order it evaluates them."""
    out: list[ir.Reduce] = []

    def expr(e: ir.Expr) -> None:
        stack = [e]
        while stack:
            n = stack.pop()
            if isinstance(n, ir.Reduce):
                if n not in out:
                    out.append(n)
                continue
            kids = ir.children(n)
            kids.reverse()
            stack.extend(kids)

    def stmt(s: ir.Stmt) -> None:
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                stmt(x)
        elif isinstance(s, ir.Let):
            expr(s.value)
            stmt(s.body)
        elif isinstance(s, ir.Store):
            for i in s.index:
                expr(i)
            expr(s.value)

    stmt(body)
    return out


def plan_loops(sums: list[Sum], per_loop: int, gathers: int = 0) -> list[list[Sum]]:
    """Group ``sums`` (in order of first use) into loops of at most ``per_loop``: each loop
    starts with the first sum not yet placed and takes the siblings over the same range that
    share most loads with it (its body over the same variable), its share of the rest as even
    as the loops go (10 sums at most 3 a loop: 3 3 2 2, not 3 3 3 1 -- a loop of one sum per node
    has too few accumulators to hide the FMA latency and loads a weight for every FMA).

    ``gathers`` (0: no limit) caps the distinct node rows a loop reads per node (``Sum.gathers``:
    a child's ``h[c, k]``, the node's own ``t[v, k]``): a sibling whose rows would take the loop
    past it waits for a later loop. Each such row is an address the loop keeps per node of the
    group, so the cap keeps a group's row addresses in the general-purpose registers; siblings
    that share their rows (the gates of one child) join freely."""
    placed: set[Sum] = set()
    loops: list[list[Sum]] = []
    for e in sums:
        if e in placed:
            continue
        room = per_loop - 1
        cands = []
        if room > 0:
            key = (e.node.start, e.node.stop, e.node.op)
            for i, s in enumerate(sums):
                if s is e or s in placed or (s.node.start, s.node.stop, s.node.op) != key:
                    continue
                cands.append((-len(e.loads & s.loads), i, s))
            cands.sort(key=lambda c: c[:2])
            if cands:
                total = len(cands) + 1
                n_loops = -(-total // (room + 1))
                room = -(-total // n_loops) - 1
        group, rows = [e], set(e.gathers)
        for _, _, s in cands:
            if len(group) > room:
                break
            if gathers and len(rows | s.gathers) > gathers:
                continue
            group.append(s)
            rows |= s.gathers
        placed.update(group)
        loops.append(group)
    return loops


def _addends(e: ir.Expr) -> list[ir.Expr]:
    if isinstance(e, ir.BinOp) and e.op == "+":
        return _addends(e.a) + _addends(e.b)
    return [e]


def _multiple_of(e: ir.Expr, w: int) -> bool:
    c = ir.const_int(e)
    if c is not None:
        return c % w == 0
    if isinstance(e, ir.BinOp) and e.op == "*":
        return any(ir.const_int(x) is not None and ir.const_int(x) % w == 0 for x in (e.a, e.b))  # type: ignore[operator]
    return False


def split_lane(e: ir.Node, lane: str, width: int) -> ir.Node:
    """``(m + lane) // width`` -> ``m // width`` and ``(m + lane) % width`` -> ``lane`` where every
    addend of ``m`` is a multiple of ``width`` and ``0 <= lane < width``: the row block and row of
    a weight packed by ``width`` rows read at hidden unit ``jb * width + lane + c``, so the lane
    moves along a block only (one vector load; no division in the loop)."""

    def f(x: ir.Node) -> ir.Node | None:
        if not (isinstance(x, ir.BinOp) and x.op in ("//", "%") and ir.const_int(x.b) == width):
            return None
        terms = _addends(x.a)
        if terms.count(ir.Var(lane)) != 1:
            return None
        rest = [t for t in terms if t != ir.Var(lane)]
        if not all(_multiple_of(t, width) for t in rest):
            return None
        if x.op == "%":
            return ir.Var(lane)
        out: ir.Expr = ir.Const(0)
        for t in rest:  # each addend divided exactly
            c = ir.const_int(t)
            if c is not None:
                q: ir.Expr = ir.Const(c // width)
            else:
                assert isinstance(t, ir.BinOp)
                k, y = (t.a, t.b) if ir.const_int(t.a) is not None and ir.const_int(t.a) % width == 0 else (t.b, t.a)  # type: ignore[operator]
                q = ir.BinOp("*", y, ir.Const(ir.const_int(k) // width))  # type: ignore[operator]
            out = ir.BinOp("+", out, q)
        return ir.simplify(out)

    return ir.transform(e, f)


def _product(body: ir.Expr) -> tuple[ir.Expr, ir.Expr] | None:
    if isinstance(body, ir.BinOp) and body.op == "*":
        return body.a, body.b
    return None


def jammed_block(blk: Block, m: int, envs: list[dict[str, ir.Expr]], sums: list[Sum], loops: list[list[Sum]],
                 unroll: int, names: NameGen, interleave: bool = True) -> ir.Stmt:
    """The block for ``m`` nodes (``envs[q]``: node ``q``'s values of the node variable and
    lets) with ``sums`` fused in ``loops`` (see the module doc); with ``interleave`` off the
    body runs node after node, one vector loop each, instead of let by let."""
    W = blk.width
    dtype = ir.infer_dtype(sums[0].node, blk.dtypes)
    acc = names.fresh("acc")
    index = {s: i for i, s in enumerate(sums)}

    def at(s: Sum, q: int, lane: ir.Var) -> ir.Load:
        first = (index[s] * m + q) * W
        return ir.Load(acc, (ir.BinOp("+", ir.Const(first), lane) if first else lane,))

    parts: list[ir.Stmt] = [zeroed(blk, sums, m, at, names, dtype)]
    for group in loops:
        r0 = group[0].node
        parts.append(fused_loop(blk, m, envs, group, at, unroll, names, r0.start, r0.stop))
    parts.append(block_body(blk, envs, sums, at, names, interleave, acc, dtype))
    return ir.Alloc(acc, dtype, (len(sums) * m * W,), "private", ir.seq(*parts))


Slot = Callable[["Sum", int, ir.Var], ir.Load]  # (sum, node of the group, lane) -> its accumulator


def zeroed(blk: Block, sums: list[Sum], m: int, at: Slot, names: NameGen, dtype: str) -> ir.Stmt:
    """Every slot ``at(s, q, lane)`` of ``sums`` for ``m`` nodes set to 0 (-inf for max)."""
    jz = names.fresh(blk.lane)
    inits = []
    for s in sums:
        init = ir.fconst(float("-inf") if s.node.op == "max" else 0.0, dtype)
        for q in range(m):
            slot = at(s, q, ir.Var(jz))
            inits.append(ir.Store(slot.buffer, slot.index, init))
    return ir.For(jz, 0, blk.width, ir.seq(*inits), "vectorized")


def fused_loop(blk: Block, m: int, envs: list[dict[str, ir.Expr]], group: list[Sum], at: Slot, unroll: int,
               names: NameGen, start: ir.Expr, stop: ir.Expr, count: int | None = None) -> ir.Stmt:
    """One loop over ``start..stop`` (the sums' common range, or a part of it) accumulating
    ``group``'s sums for the ``m`` nodes into the slots ``at(s, q, lane)``, ``unroll`` steps a
    trip where the trip count (``count``, or ``stop - start`` when both are constants) is a
    constant it divides."""
    node_names = {blk.node} | {name for name, _ in blk.lets}
    r0 = group[0].node
    if count is None:
        a, b = ir.const_int(start), ir.const_int(stop)
        count = b - a if a is not None and b is not None else None
    u = unroll if (count is not None and count > 0 and count % unroll == 0) else 1
    lane = ir.Var(names.fresh(blk.lane))
    kk = names.fresh(r0.var)
    steps: list[tuple[list[tuple[str, ir.Expr]], list[ir.Stmt]]] = []  # (lets, stores) a step
    for t in range(u):
        lets: list[tuple[str, ir.Expr]] = []
        k_t = kk
        if u > 1:
            k_t = names.fresh(f"{r0.var}_{t}")
            lets.append((k_t, ir.simplify(start + ir.Var(kk) * u + t)))  # type: ignore[arg-type]
        memo: dict[ir.Expr, ir.Var] = {}
        bodies = {}
        for s in group:
            body = ir.substitute(s.body, {s.node.var: ir.Var(k_t), blk.lane: lane})
            prod = _product(body)  # type: ignore[arg-type]
            if prod is not None:  # the node-independent factor (a weight load): once a step
                for x, y in (prod, prod[::-1]):
                    if not free_names(x) & node_names and free_names(y) & node_names:
                        if x not in memo:
                            memo[x] = ir.Var(names.fresh("w"), ir.infer_dtype(x, blk.dtypes))
                            lets.append((memo[x].name, x))
                        break
            bodies[s] = (body, prod)
        stores: list[ir.Stmt] = []
        for q in range(m):
            for s in group:
                body, prod = bodies[s]
                cur = at(s, q, lane)
                if s.node.op == "max":
                    new = ir.BinOp("max", cur, ir.substitute(body, envs[q]))  # type: ignore[arg-type]
                elif prod is not None:
                    x, y = (memo[e] if e in memo else ir.substitute(e, envs[q]) for e in prod)
                    new = ir.call("fma", x, y, cur)  # type: ignore[arg-type]
                else:
                    new = ir.BinOp("+", cur, ir.substitute(body, envs[q]))  # type: ignore[arg-type]
                stores.append(ir.Store(cur.buffer, cur.index, new))
        steps.append((lets, stores))
    inner: ir.Stmt | None = None
    for lets, stores in reversed(steps):  # step t's lets, its stores, then step t + 1
        inner = ir.seq(*stores) if inner is None else ir.seq(*stores, inner)
        for name, value in reversed(lets):
            inner = ir.Let(name, value, inner)
    vec = ir.For(lane.name, 0, blk.width, inner, "vectorized")  # type: ignore[arg-type]
    if u > 1:
        return ir.For(kk, 0, count // u, vec, "serial")  # type: ignore[operator]
    return ir.For(kk, start, stop, vec, "serial")


def block_body(blk: Block, envs: list[dict[str, ir.Expr]], sums: list[Sum], at: Slot, names: NameGen,
               interleave: bool, acc: str, dtype: str) -> ir.Stmt:
    """The block's body for the nodes of ``envs``, each fused sum read from its slot
    ``at(s, q, lane)`` (``acc``: the slots' array), every let once per node (once when it is
    the same for every node)."""
    W = blk.width
    m = len(envs)
    node_names = {blk.node} | {name for name, _ in blk.lets}
    parts: list[ir.Stmt] = []
    lane = ir.Var(names.fresh(blk.lane))
    holders = {s.node: ir.Var(names.fresh("fused"), dtype) for s in sums}

    def value_of(s: Sum, q: int) -> ir.Expr:
        v: ir.Expr = at(s, q, lane)
        if s.node.op == "mean":
            v = ir.BinOp("/", v, ir.Cast(dtype, ir.maximum(s.node.stop - s.node.start, 1)))
        return v

    def swap(x: ir.Node) -> ir.Node | None:
        return holders.get(x) if isinstance(x, ir.Reduce) else None  # type: ignore[arg-type]

    body = ir.transform(blk.body, swap)
    env_q = [dict(envs[q]) | {blk.lane: lane} | {holders[s.node].name: value_of(s, q) for s in sums}
             for q in range(m)]
    jam_names = node_names | {h.name for h in holders.values()}
    dtypes = dict(blk.dtypes) | {acc: dtype}
    if interleave:
        out = _per_node(body, env_q, jam_names, dtypes, names)  # type: ignore[arg-type]
        parts.append(ir.For(lane.name, 0, W, out, "vectorized"))
    else:
        for env in env_q:
            jl = names.fresh(blk.lane)
            out = _per_node(body, [env | {blk.lane: ir.Var(jl)}], jam_names, dtypes, names)  # type: ignore[arg-type]
            parts.append(ir.For(jl, 0, W, ir.substitute(out, {lane.name: ir.Var(jl)}), "vectorized"))  # type: ignore[arg-type]
    return ir.seq(*parts)


def _per_node(s: ir.Stmt, envs: list[dict[str, ir.Expr]], jam_names: set[str], dtypes: dict,
              names: NameGen) -> ir.Stmt:
    """``s`` (lets and stores) for every node: a let that uses a node-dependent name once per
    node, in node order, then the next; any other once; stores per node. Every name it binds
    is fresh (the block sits beside other copies of the body)."""
    if isinstance(s, ir.Seq):
        return ir.seq(*(_per_node(x, envs, jam_names, dtypes, names) for x in s.stmts))
    if isinstance(s, ir.Store):
        return ir.seq(*(renamed_binders(ir.substitute(s, env), names) for env in envs))  # type: ignore[misc]
    if isinstance(s, ir.Let):
        if not free_names(s.value) & jam_names:
            value = renamed_binders(ir.substitute(s.value, envs[0]), names)
            new = ir.Var(names.fresh(s.var), ir.infer_dtype(value, dtypes))  # type: ignore[arg-type]
            inner = [dict(env) | {s.var: new} for env in envs]
            return ir.Let(new.name, value, _per_node(s.body, inner, jam_names, dtypes, names))  # type: ignore[arg-type]
        values = [renamed_binders(ir.substitute(s.value, env), names) for env in envs]
        news = [ir.Var(names.fresh(f"{s.var}_{q}"), ir.infer_dtype(v, dtypes)) for q, v in enumerate(values)]  # type: ignore[arg-type]
        inner = [dict(env) | {s.var: new} for env, new in zip(envs, news)]
        out = _per_node(s.body, inner, jam_names | {s.var}, dtypes, names)
        for new, value in reversed(list(zip(news, values))):
            out = ir.Let(new.name, value, out)  # type: ignore[arg-type]
        return out
    raise ir.LoopIRError(f"internal: {type(s).__name__} in a jammed block")
