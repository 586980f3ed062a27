"""Node jamming with fused reductions: a target-neutral ``Program -> Program`` transform.

Pipeline position: after scheduling, before rendering, in backends whose compiler vectorizes a
short contiguous loop into SIMD registers (the ``opencl`` backend applies it; a CUDA or C
backend could too). Pure: the result computes the same values as the input (up to the order of
float additions inside each sum) and is checked against it on the interpreter in the tests.

A level kernel as the lowering writes it computes, per node ``v`` and hidden unit ``jn``, a few
dot products over the same range (a TreeLSTM: five gate rows times two children, ten 256-term
sums), each a separate loop that re-reads the child's ``h`` and reads the weight row alone::

    parallel for v in LO..HI:
      let ch0 = ..; let ch1 = ..                       # node lets
      for jn in A..B:
        let g = sum(k in 0..K: W[k, jn + c] * x(ch0, k)) + ..
        ...
        h[v, jn] = ..

:func:`jam_nodes` rewrites it so that ONE work unit computes ``jam`` nodes times ``vector``
consecutive hidden units, and each group of sibling sums over the same range becomes one loop
whose accumulators (``jam`` x sums x ``vector`` values in a private array) are updated together::

    parallel for g in 0..ceil((HI-LO)/jam) * (B-A)/vector:
      let jb = A + (g // chunks) * vector; let v0 = LO + (g % chunks) * jam
      if v0 + jam <= HI:                                 # a whole chunk
        let node lets of v0, v0+1, .. (renamed)
        alloc private acc[jam * sums * vector]:
          for i, for jl (vectorized): acc[i*vector + jl] = 0
          if every child guard holds:                    # no conditional load in the hot loop
            for k in 0..K:                               # one loop per group of sums
              for jl (vectorized): acc[(n*S + s)*vector + jl] += W[k, jb + jl + c] * x(ch_n, k)
          else: the same loops with the guards
          for each node n: for jl: let jn = jb + jl; the body, each fused sum read from acc
      else: the same for the nodes v0..HI-1 (the level's last chunk: 1..jam-1 nodes, one
            version per count)

Each weight vector ``W[k, jb..jb+vector)`` is then loaded once for ``jam`` nodes and each
child value ``x(ch_n, k)`` once for all the sums of its group: a register-blocked GEMM
micro-kernel instead of ``jam * sums`` separate GEMVs. Consecutive ``g`` share the weight block
(``g // chunks``), so the groups a core runs one after another reuse it from its cache, and a
level of one node still has ``(B-A)/vector`` independent work units.

Applies to a kernel's outermost ``parallel`` node loop whose body is node lets around ONE hidden
loop with constant bounds (a multiple of ``vector`` long) that holds only lets and stores; the
sums it fuses are ``sum`` reductions with constant bounds whose bodies use nothing bound inside
the hidden loop but its variable. Moving those sums ahead of the stores of the other hidden
units of the block is legal because every store of the hidden body is at the node's own row
(first index ``v``) while every load of a stored buffer inside a fused sum is at a row named by
a node let that loads it from an index buffer (a child: a node is never its own child in a
linearized structure), and the node loop is ``parallel`` (its iterations are independent).
Anything else is left unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core import loopir as ir

#: Nodes per work unit.
JAM = 4
#: Accumulator budget of one fused loop (``jam`` x sums per loop): a 32-register SIMD file
#: holds these plus the loads they share.
MAX_ACCUMULATORS = 24


def _vars(n: ir.Node) -> set[str]:
    return {x.name for x in ir.walk(n) if isinstance(x, ir.Var)}


def _bound(n: ir.Node) -> set[str]:
    out: set[str] = set()
    for x in ir.walk(n):
        if isinstance(x, (ir.Let, ir.For, ir.Reduce)):
            out.add(x.var)
        elif isinstance(x, ir.Alloc):
            out.add(x.name)
    return out


def _only_lets_and_stores(s: ir.Stmt) -> bool:
    if isinstance(s, ir.Seq):
        return all(_only_lets_and_stores(x) for x in s.stmts)
    if isinstance(s, ir.Let):
        return _only_lets_and_stores(s.body)
    return isinstance(s, ir.Store)


def _stores(s: ir.Node) -> list[ir.Store]:
    return [x for x in ir.walk(s) if isinstance(x, ir.Store)]


def _fusable(r: ir.Reduce, jn: str, inner: set[str]) -> bool:
    if r.op != "sum" or r.lanes != 1:
        return False
    if ir.const_int(r.start) is None or ir.const_int(r.stop) is None:
        return False
    if any(isinstance(x, ir.Reduce) for x in ir.walk(r.body)):
        return False
    return not (_vars(r.body) & (inner - {jn, r.var}))


def _guards(terms: list[ir.Expr], inner: set[str]) -> list[ir.Expr]:
    """Conditions ``c`` of ``select(c, x, 0)`` in ``terms`` that use none of ``inner`` (the
    summation and lane variables): a child guard, the same at every step of the sum."""
    out: list[ir.Expr] = []
    for t in terms:
        for x in ir.walk(t):
            if (isinstance(x, ir.Select) and isinstance(x.b, ir.Const) and x.b.value == 0
                    and not (_vars(x.cond) & inner) and x.cond not in out
                    and not any(isinstance(y, (ir.Load, ir.Reduce)) for y in ir.walk(x.cond))):
                out.append(x.cond)
    return out


def _strip_guards(e: ir.Expr, guards: list[ir.Expr]) -> ir.Expr:
    """``e`` with ``select(c, x, 0)`` -> ``x`` for every ``c`` in ``guards`` (known true)."""

    def f(x: ir.Node) -> ir.Node | None:
        if isinstance(x, ir.Select) and x.cond in guards and isinstance(x.b, ir.Const) and x.b.value == 0:
            return x.a
        return None

    return ir.transform(e, f)  # type: ignore[return-value]


def _addends(e: ir.Expr) -> list[ir.Expr] | None:
    if isinstance(e, ir.BinOp) and e.op == "+":
        a, b = _addends(e.a), _addends(e.b)
        return None if a is None or b is None else a + b
    return [e]


def _split_lane(e: ir.Expr, lane: str, base: str, vector: int) -> ir.Expr:
    """``(base + lane + c) // vector`` -> ``(base + c) // vector`` and ``... % vector`` ->
    ``lane`` when ``base`` and ``c`` are multiples of ``vector`` and ``0 <= lane < vector``:
    the row-block and in-block index of a weight stored ``packed`` by ``vector`` rows, so the
    lane only moves along the block (one vector load)."""

    def f(x: ir.Node) -> ir.Node | None:
        if not (isinstance(x, ir.BinOp) and x.op in ("//", "%") and ir.const_int(x.b) == vector):
            return None
        terms = _addends(x.a)
        if terms is None or terms.count(ir.Var(lane)) != 1:
            return None
        rest = [t for t in terms if t != ir.Var(lane)]
        for t in rest:
            c = ir.const_int(t)
            if not (t == ir.Var(base) or (c is not None and c % vector == 0)):
                return None
        if x.op == "%":
            return ir.Var(lane)
        total: ir.Expr = rest[0] if rest else ir.Const(0, ir.INT)
        for t in rest[1:]:
            total = ir.BinOp("+", total, t)  # type: ignore[arg-type]
        return ir.BinOp("//", total, x.b)  # type: ignore[arg-type]

    return ir.transform(e, f)  # type: ignore[return-value]


def _group_key(r: ir.Reduce, jn: str) -> tuple:
    """Sums whose hidden-unit-independent loads (a child's ``h[ch, k]``) agree sort together,
    so one fused loop loads each such value once for all of them."""
    shared = sorted(repr(ir.substitute(x, {r.var: ir.Var("k")})) for x in ir.walk(r.body)
                    if isinstance(x, ir.Load) and jn not in _vars(x))
    return (ir.const_int(r.start), ir.const_int(r.stop), tuple(shared))


def _jam_loop(loop: ir.For, jam: int, vector: int, max_accs: int, fresh: str,
              dtypes: dict[str, str]) -> ir.Stmt | None:
    v = loop.var
    lets: list[ir.Let] = []
    body = loop.body
    while isinstance(body, ir.Let):
        lets.append(body)
        body = body.body
    if not isinstance(body, ir.For):
        return None
    hidden = body
    a, b = ir.const_int(hidden.start), ir.const_int(hidden.stop)
    if a is None or b is None or b <= a or (b - a) % vector:
        return None
    if hidden.kind not in ("serial", "unrolled", "vectorized", "parallel"):
        return None
    if any(isinstance(x, ir.Reduce) for let in lets for x in ir.walk(let.value)):
        return None
    if not _only_lets_and_stores(hidden.body):
        return None
    jn = hidden.var
    inner = _bound(hidden.body) | {jn}
    # node lets that name another node: read from an index buffer (a child id), never ``v``
    node_lets = {let.var for let in lets if any(isinstance(x, ir.Load) for x in ir.walk(let.value))}
    stores = _stores(hidden.body)
    stored = {s.buffer for s in stores}
    if not all(s.index and s.index[0] == ir.Var(v) for s in stores):
        return None
    sums: list[ir.Reduce] = []
    for x in ir.walk(hidden.body):
        if isinstance(x, ir.Reduce) and _fusable(x, jn, inner) and x not in sums:
            sums.append(x)
    if not sums:
        return None
    for r in sums:  # a fused sum runs before the block's stores: it must not read them
        for x in ir.walk(r.body):
            if isinstance(x, ir.Load) and x.buffer in stored:
                row = x.index[0] if x.index else None
                if not (isinstance(row, ir.Var) and row.name in node_lets):
                    return None
    dt = {ir.infer_dtype(r, dtypes) for r in sums}
    if len(dt) != 1 or next(iter(dt)) not in ir.FLOAT_DTYPES:
        return None
    dtype = next(iter(dt))

    order = sorted(range(len(sums)), key=lambda i: (_group_key(sums[i], jn), i))
    per_loop = max(1, max_accs // jam)
    groups: list[list[int]] = []  # same range and shared loads, at most per_loop sums each
    for i in order:
        if groups and len(groups[-1]) < per_loop and _group_key(sums[groups[-1][0]], jn) == _group_key(sums[i], jn):
            groups[-1].append(i)
        else:
            groups.append([i])
    nsum = len(sums)

    g = ir.Var(fresh + "g")
    jb, v0 = ir.Var(fresh + "jb"), ir.Var(fresh + "base")
    chunks = (loop.stop - loop.start + (jam - 1)) // jam
    tiles = (b - a) // vector
    lo, hi = loop.start, loop.stop

    def block(count: int, first: ir.Expr, tag: str) -> ir.Stmt:
        """``count`` nodes from ``first`` on (all below HI), the hidden units of tile ``jb``."""
        acc = f"{fresh}acc{tag}"

        def node_env(n: int) -> dict[str, ir.Expr]:
            return {v: ir.Var(f"{fresh}{tag}v{n}")} | {let.var: ir.Var(f"{fresh}{tag}{let.var}_{n}") for let in lets}

        # accumulation: zero, then one loop per group of sums over its range
        jl = fresh + "jl"
        k = fresh + "k"
        zero = ir.fconst(0.0, dtype)
        terms: dict[tuple[int, int], ir.Expr] = {}
        for n in range(count):
            env = node_env(n)
            for s, r in enumerate(sums):
                term = ir.substitute(r.body, {**env, r.var: ir.Var(k), jn: jb + ir.Var(jl)})
                if a % vector == 0:  # jb is a multiple of vector: packed-weight indices simplify
                    term = _split_lane(term, jl, jb.name, vector)  # type: ignore[arg-type]
                terms[n, s] = term  # type: ignore[assignment]
        guards = _guards(list(terms.values()), {k, jl})

        def accumulation(unguarded: bool) -> list[ir.Stmt]:
            loops: list[ir.Stmt] = []
            for grp in groups:
                r0 = sums[grp[0]]
                stmts: list[ir.Stmt] = []
                for n in range(count):
                    for s in grp:
                        term = _strip_guards(terms[n, s], guards) if unguarded else terms[n, s]
                        slot = ir.Const((n * nsum + s) * vector, ir.INT) + ir.Var(jl)
                        stmts.append(ir.For(jl, 0, vector, ir.Store(
                            acc, (slot,), ir.BinOp("+", ir.Load(acc, (slot,)), term)), "vectorized"))  # type: ignore[arg-type]
                loops.append(ir.For(k, r0.start, r0.stop, ir.seq(*stmts), "serial"))
            return loops

        accumulate: list[ir.Stmt] = [
            ir.For(fresh + "i", 0, count * nsum, ir.For(jl, 0, vector, ir.Store(
                acc, (ir.Var(fresh + "i") * vector + ir.Var(jl),), zero), "vectorized"), "unrolled")]
        if guards:
            # every guard holds (a TreeLSTM's internal nodes: both children exist): the loop
            # without conditional loads; else the guarded one
            test = guards[0]
            for c in guards[1:]:
                test = ir.land(test, c)
            accumulate.append(ir.If(test, ir.seq(*accumulation(True)), ir.seq(*accumulation(False))))
        else:
            accumulate += accumulation(False)

        # the bodies, node by node, each fused sum read from its accumulator
        finish: list[ir.Stmt] = []
        for n in range(count):

            def f(x: ir.Node, n: int = n) -> ir.Node | None:
                if isinstance(x, ir.Reduce) and x in sums:
                    s = sums.index(x)
                    return ir.Load(acc, (ir.Const((n * nsum + s) * vector, ir.INT) + ir.Var(jl),))
                return None

            per_node: ir.Stmt = ir.For(jl, 0, vector, ir.Let(jn, jb + ir.Var(jl), ir.transform(hidden.body, f)),  # type: ignore[arg-type]
                                       "serial" if hidden.kind == "parallel" else hidden.kind)
            for let in reversed(lets):
                per_node = ir.Let(let.var, let.value, per_node)
            finish.append(ir.Let(v, node_env(n)[v], per_node))

        out: ir.Stmt = ir.Alloc(acc, dtype, (count * nsum * vector,), "private", ir.seq(*accumulate, *finish))
        for n in reversed(range(count)):  # node lets of every node of the block
            env = node_env(n)
            for let in reversed(lets):
                value = ir.substitute(let.value, {v: env[v]} | {x.var: env[x.var] for x in lets})
                out = ir.Let(env[let.var].name, value, out)  # type: ignore[union-attr]
            # always true (the caller checked): it states the node's range for the verifier,
            # which cannot bound ``LO + (g % chunks) * jam + n`` by itself (likewise the tile test)
            out = ir.If(ir.land(ir.Cmp(">=", env[v], lo), ir.Cmp("<", env[v], hi)), out)
            out = ir.Let(env[v].name, first + n, out)  # type: ignore[union-attr]
        return out

    # a whole chunk jammed; the level's last, partial chunk jammed over the nodes it has (each
    # weight vector still read once per chunk, no node computed twice)
    inner_body: ir.Stmt = block(1, v0, "r1")
    for count in range(2, jam):
        inner_body = ir.If(ir.Cmp("==", hi - v0, ir.Const(count, ir.INT)), block(count, v0, f"r{count}"), inner_body)
    inner_body = ir.If(ir.Cmp("<=", v0 + jam, hi), block(jam, v0, "all"), inner_body)
    inner_body = ir.Let(v0.name, lo + (g % chunks) * jam, inner_body)
    inner_body = ir.If(ir.land(ir.Cmp(">=", jb, ir.Const(a, ir.INT)), ir.Cmp("<=", jb, ir.Const(b - vector, ir.INT))),
                       inner_body)
    inner_body = ir.Let(jb.name, a + (g // chunks) * vector, inner_body)
    return ir.For(g.name, 0, chunks * tiles, inner_body, "parallel")


def jam_nodes(program: ir.Program, jam: int = JAM, vector: int = 16,
              max_accumulators: int = MAX_ACCUMULATORS) -> tuple[ir.Program, frozenset[str]]:
    """``program`` with every matching level loop jammed (see the module doc), and the names of
    the kernels that changed. ``vector``: hidden units per work unit (a SIMD register's lanes)."""
    taken = {x.name for x in ir.walk(program) if isinstance(x, ir.Var)} | _bound(program)
    dtypes = {bf.name: bf.dtype for bf in program.buffers}
    kernels, changed = [], set()
    for kn in program.kernels:
        fresh = "cxj_"
        while any(t.startswith(fresh) for t in taken):
            fresh = "c" + fresh
        top = list(kn.body.stmts) if isinstance(kn.body, ir.Seq) else [kn.body]
        out = []
        for st in top:
            if isinstance(st, ir.For) and st.kind == "parallel":
                new = _jam_loop(st, jam, vector, max_accumulators, fresh, dtypes)
                if new is not None:
                    st = ir.simplify(new)  # type: ignore[assignment]
                    changed.add(kn.name)
            out.append(st)
        kernels.append(replace(kn, body=ir.seq(*out)))
    return replace(program, kernels=tuple(kernels)), frozenset(changed)


def _hidden_loop(loop: ir.For) -> ir.For | None:
    body = loop.body
    while isinstance(body, ir.Let):
        body = body.body
    return body if isinstance(body, ir.For) else None


def weights_to_transpose(program: ir.Program) -> tuple[str, ...]:
    """Row-major 2-D params read as ``W[f(jn), k]`` inside a sum over ``k`` that
    :func:`jam_nodes` would fuse: stored transposed (``W[k, f(jn)]``), consecutive hidden units
    read consecutive addresses, so the fused loop's weight loads are SIMD vector loads."""
    out: list[str] = []
    for kn in program.kernels:
        top = list(kn.body.stmts) if isinstance(kn.body, ir.Seq) else [kn.body]
        for st in top:
            if not (isinstance(st, ir.For) and st.kind == "parallel"):
                continue
            hidden = _hidden_loop(st)
            if hidden is None:
                continue
            jn, inner = hidden.var, _bound(hidden.body) | {hidden.var}
            for r in (x for x in ir.walk(hidden.body) if isinstance(x, ir.Reduce)):
                if not _fusable(r, jn, inner):
                    continue
                for x in ir.walk(r.body):
                    if not (isinstance(x, ir.Load) and len(x.index) == 2 and x.buffer not in out):
                        continue
                    b = program.buffer(x.buffer)
                    row, col = x.index
                    if (b.role == "param" and b.layout == ("row_major",)
                            and all(ir.const_int(d) is not None for d in b.shape)
                            and col == ir.Var(r.var) and jn in _vars(row) and r.var not in _vars(row)):
                        out.append(x.buffer)
    return tuple(out)
