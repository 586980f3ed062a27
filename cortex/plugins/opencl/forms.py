"""Execution shapes of a scheduled LoopProgram on an OpenCL device, as pure functions.

Pipeline position: between scheduling and rendering in the ``opencl`` backend. OpenCL has no
grid-wide barrier, so the scheduler gives this backend the ``per_level`` form: host steps that
launch one kernel per level, each kernel's node loop bound to work-groups (``gpu_group``) and
hidden loop to work-items (``gpu_thread``), as grid-/group-stride loops that are correct for any
launch size. From that program this module derives

* :func:`single_group_kernel` — the same host steps inlined into ONE kernel, run by a single
  work-group: each launch becomes the kernel's body with its parameters substituted, each host
  loop a serial loop, and a work-group barrier separates consecutive launches. With one group
  a group barrier is a grid barrier, so the level loop runs inside one launch: no per-level
  launch overhead, which wins for small inputs (one tree). A program that already has the
  level loop inside a kernel (``Barrier("grid")``) gets its grid barriers turned into group
  barriers the same way.
* :func:`plan_groups` / :func:`thread_extent` — launch sizes read from the program itself:
  the trip count of a kernel's outermost ``gpu_group`` loops, evaluated on the host from the
  sizes, the launch's arguments and the (host) index arrays — e.g. the width of level ``l``
  from ``level_offsets`` — and the constant trip count of its ``gpu_thread`` loops.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np

from cortex.core import loopir as ir

SINGLE_KERNEL = "cx_single_group"  # name of the derived kernel inside the program


class _Unknown(Exception):
    """A host expression depends on something the host does not know at launch time."""


def _has_grid_barrier(node: ir.Node) -> bool:
    return any(isinstance(n, ir.Barrier) and n.scope == "grid" for n in ir.walk(node))


def _to_group_barriers(node: ir.Node) -> ir.Node:
    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.Barrier) and n.scope == "grid":
            return ir.Barrier("group")
        return None

    return ir.transform(node, f)


def _shared_names(node: ir.Node) -> set[str]:
    return {n.name for n in ir.walk(node) if isinstance(n, ir.Alloc) and n.scope == "shared"}


def _rename_alloc(node: ir.Node, old: str, new: str) -> ir.Node:
    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.Alloc) and n.name == old:
            return replace(n, name=new)
        return None

    return ir.transform(ir.rename_buffer(node, old, new), f)


def single_group_kernel(program: ir.Program) -> ir.Kernel:
    """One kernel doing all of ``program``'s host steps, for a launch of exactly ONE work-group.

    Raises :class:`ValueError` for a program whose kernels cannot be inlined (none known)."""
    kernels = {k.name: k for k in program.kernels}
    taken: set[str] = set()
    count = [0]

    def inline(launch: ir.Launch) -> ir.Stmt:
        k = kernels[launch.kernel]
        if len(launch.args) != len(k.params):
            raise ValueError(f"launch of {k.name} passes {len(launch.args)} arguments for "
                             f"{len(k.params)} parameters")
        body = ir.substitute(k.body, dict(zip(k.params, launch.args)))
        for name in sorted(_shared_names(body) & taken):  # one __local array per inlined use
            count[0] += 1
            body = _rename_alloc(body, name, f"{name}_{count[0]}")
        taken.update(_shared_names(body))
        return _to_group_barriers(body)

    def steps(host: tuple[ir.Node, ...], parity: ir.Expr | None = None) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for st in host:
            if isinstance(st, ir.Launch):
                body = inline(st)
                if parity is not None:
                    body = serpentine(body, parity)
                out += [body, ir.Barrier("group")]
            elif isinstance(st, ir.HostFor):
                odd = ir.Cmp("==", ir.Var(st.var) % 2, ir.Const(1, ir.INT))
                out.append(ir.For(st.var, st.start, st.stop, ir.seq(*steps(st.body, odd)), "serial"))
            else:
                raise ValueError(f"unknown host step {st!r}")
        return out

    body = steps(program.host)
    if body and isinstance(body[-1], ir.Barrier):
        body = body[:-1]  # the kernel's end waits for everything anyway
    threads = max((k.threads_per_group for k in program.kernels), default=1)
    return ir.Kernel(SINGLE_KERNEL, (), ir.seq(*body) if body else ir.Seq(()), threads)


def serpentine(body: ir.Stmt, odd: ir.Expr) -> ir.Stmt:
    """``body`` with each outermost work-group loop run backwards when ``odd`` holds.

    In the single-work-group kernel one thread runs every work-group of a level in order; a
    level's groups read the whole weight set (a TreeLSTM of hidden 256: 2.6 MB, more than a
    2 MB L2), so in the same order every level the cache holds the END of the weights when the
    next level starts at their beginning. Alternating the direction from level to level starts
    each level on what the last one read last. Legal because the iterations of a work-group loop
    are independent (any order is). A loop whose body holds a group barrier (work-item loops in a
    row) keeps its order: the always-true range test the mirrored index needs would put the
    barrier under an ``if``, which PoCL's work-group compiler gets wrong (the conformance suite's
    random schedules saw NaNs)."""

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.For) and n.kind == "gpu_group":
            inner = n.var + "_fw"
            if any(isinstance(m, ir.Barrier) for m in ir.walk(n.body)):
                return None  # it would sit under the `if` below, where PoCL miscompiles a barrier
            mirrored = ir.Select(odd, n.start + n.stop - 1 - ir.Var(inner), ir.Var(inner))
            g = ir.Var(n.var)
            # always true; it gives the verifier the loop variable's range back
            inside = ir.If(ir.land(ir.Cmp(">=", g, n.start), ir.Cmp("<", g, n.stop)), n.body)
            return replace(n, var=inner, body=ir.Let(n.var, mirrored, inside))
        return None

    top = list(body.stmts) if isinstance(body, ir.Seq) else [body]
    out = []
    for st in top:
        out.append(f(st) or st if isinstance(st, ir.For) else st)  # type: ignore[arg-type]
    return ir.seq(*out)


def with_single_group(program: ir.Program) -> ir.Program:
    """``program`` plus the :func:`single_group_kernel` (host steps unchanged), so both forms
    are rendered and built together; raises ValueError when the kernel cannot be derived."""
    if any(k.name == SINGLE_KERNEL for k in program.kernels):
        raise ValueError(f"program {program.name} already has a kernel named {SINGLE_KERNEL}")
    return replace(program, kernels=program.kernels + (single_group_kernel(program),))


#: Name of the tree-group kernel (:func:`grouped_kernel`) and of its group-count parameter.
GROUPED_KERNEL = "cx_tree_groups"
GROUPS_PARAM = "cx_groups"
#: The per-call arrays the grouped layout (``cortex.core.linearize.groups``) knows how to permute.
GROUPED_ARRAYS = ("level_offsets", "child_offsets", "child_ids", "child_table", "word_ids", "features")


def leaf_steps(program: ir.Program) -> int:
    """How many of ``program``'s first host steps are launches over the leaves alone: kernels
    that read the leaf count ``NL`` and no level offsets (the leaves kernel, its phases)."""
    kernels = {k.name: k for k in program.kernels}
    count = 0
    for st in program.host:
        k = kernels.get(st.kernel) if isinstance(st, ir.Launch) else None
        if k is None or k.params or not _reads(k.body, "NL") or _loads(k.body, "level_offsets"):
            break
        count += 1
    return count


def _reads(node: ir.Node, var: str) -> bool:
    return any(isinstance(n, ir.Var) and n.name == var for n in ir.walk(node))


def _loads(node: ir.Node, buffer: str) -> bool:
    return any(isinstance(n, (ir.Load, ir.Store)) and n.buffer == buffer for n in ir.walk(node))


def grouped_kernel(program: ir.Program, table_rows: bool = False) -> ir.Kernel:
    """The :func:`single_group_kernel` of every host step after the leaves (:func:`leaf_steps`),
    for a launch of ``cx_groups`` work-groups, work-group ``g`` walking only the levels of its
    own trees: each ``level_offsets[e]`` reads ``level_offsets[g * (L + 1) + e]`` (the grouped
    layout's table, ``cortex.core.linearize.groups``) and the work-group loops run serially
    within the group. Work-group barriers only: no group waits for another. The leaves run
    before it, in their own launch (their rows are the same in both layouts).

    Raises :class:`ValueError` when the program does not have that shape: no leaf launch, the
    levels read ``NL``, or a per-call array or a node buffer the grouped layout cannot permute
    (a buffer of another role that is not ``[N, ...]``, such as a node-blocked state).
    ``table_rows``: read the table as ``level_offsets[g, e]`` of a ``[groups, L + 1]`` buffer
    instead (the same element; the form :func:`grouped_check_program` verifies)."""
    leaves = leaf_steps(program)
    rest = program.host[leaves:]
    if not leaves or not rest:
        raise ValueError("the tree-group kernel needs a leaves launch and levels after it")
    for b in program.buffers:
        if b.read_only and b.role != "param" and b.name not in GROUPED_ARRAYS:
            raise ValueError(f"the grouped layout does not permute per-call array {b.name!r}")
        # a temp with a row per child edge (a hoisted per-edge projection) is written and read
        # in one level, by one group, over the grouped layout's own edge numbering
        per_edge = b.role == "temp" and bool(b.shape) and b.shape[0] == ir.Var("E")
        if not b.read_only and not per_edge and (not b.shape or b.shape[0] != ir.Var("N")):
            raise ValueError(f"buffer {b.name!r} is not one row per node (or per child edge, a temp)")
    single = single_group_kernel(replace(program, host=rest))
    if _reads(single.body, "NL"):
        raise ValueError("the levels read the leaf count NL, which differs per group")
    g = ir.Var("cx_g")
    base = g * (ir.Var("L") + 1)

    def f(n: ir.Node) -> ir.Node | None:  # bottom-up: children are rewritten already
        if isinstance(n, ir.For) and n.kind == "gpu_group":
            return replace(n, kind="serial")
        if isinstance(n, ir.Load) and n.buffer == "level_offsets":
            return replace(n, index=(g, n.index[0]) if table_rows else (base + n.index[0],))
        return None

    body = ir.transform(single.body, f)
    loop = ir.For("cx_g", ir.Const(0, ir.INT), ir.Var(GROUPS_PARAM), body, "gpu_group")
    return ir.Kernel(GROUPED_KERNEL, (GROUPS_PARAM,), loop, single.threads_per_group)


def grouped_check_program(program: ir.Program) -> ir.Program:
    """``program`` reduced to one launch of :func:`grouped_kernel` (reading the table by rows),
    the group count a size and ``level_offsets`` the ``[cx_groups, L + 1]`` table (values in
    ``[0, N]``, non-decreasing along a row), for the verifier: every index the kernel reads is
    then proved in range."""
    kernel = grouped_kernel(program, table_rows=True)
    sizes = program.sizes + (ir.Size(GROUPS_PARAM, lo=1),)
    groups = ir.Var(GROUPS_PARAM)
    buffers = tuple(replace(b, shape=(groups, ir.Var("L") + 1)) if b.name == "level_offsets" else b
                    for b in program.buffers)
    return replace(program, sizes=sizes, buffers=buffers, kernels=(replace(kernel, params=()),),
                   host=(ir.Launch(kernel.name),))


def needs_single_group(program: ir.Program) -> bool:
    """True when the host steps alone cannot run ``program`` here: a kernel waits on a grid
    barrier, which OpenCL only has in the one-work-group launch."""
    return any(_has_grid_barrier(k.body) for k in program.kernels if k.name != SINGLE_KERNEL)


#: Independent partial sums per reduction step in :func:`split_reductions`.
REDUCTION_WAYS = 8


def split_reductions(program: ir.Program, ways: int = REDUCTION_WAYS, min_trip: int = 64) -> ir.Program:
    """``sum(k in a..a+T: f(k))`` -> ``sum(k in a..a+T/ways: f(k) + f(k+T/ways) + ...)``.

    A dot product compiled as one accumulator chain waits on each add's latency; adding
    ``ways`` products of *contiguous* blocks per step lets the compiler compute them
    independently (and vectorize each block) with one dependent add per step. This reorders a
    float sum, so the backend applies it only with ``fast_math``. Sums with a constant trip
    count of at least ``min_trip`` that ``ways`` divides are rewritten; others are kept."""

    def f(n: ir.Node) -> ir.Node | None:
        if not (isinstance(n, ir.Reduce) and n.op == "sum"):
            return None
        trip = ir.const_int(n.stop - n.start)
        if trip is None or trip < min_trip or trip % ways:
            return None
        block = trip // ways
        k = ir.Var(n.var)
        parts = [ir.substitute(n.body, {n.var: k + i * block}) if i else n.body for i in range(ways)]
        body = parts[0]
        for part in parts[1:]:
            body = ir.BinOp("+", body, part)  # type: ignore[arg-type]
        return ir.Reduce("sum", n.var, n.start, n.start + block, body)  # type: ignore[arg-type]

    kernels = tuple(replace(k, body=ir.simplify(ir.transform(k.body, f))) for k in program.kernels)
    return replace(program, kernels=kernels)


def _free_names(e: ir.Node) -> set[str]:
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Var)} | {
        n.buffer for n in ir.walk(e) if isinstance(n, ir.Load)}


def _is_zero(e: ir.Expr) -> bool:
    return isinstance(e, ir.Const) and e.value == 0 and e.dtype in ir.FLOAT_DTYPES


def hoist_guards(program: ir.Program) -> ir.Program:
    """``sum(k: x * select(c, y, 0))`` -> ``select(c, sum(k: x * y), 0)`` when ``c`` does not
    depend on ``k`` (a child guard: ``ch >= 0`` around ``h[ch, k]``); a product with a guard on
    each side (MV-RNN's child matrix times the other child's state) loses both, nested.

    The guarded form's loop body holds a conditional load the compiler must keep conditional,
    which blocks vectorizing the dot product; hoisted, the loop is a plain dot product and the
    guard is tested once (the renderer turns a select around a sum into an if/else, so the
    loads still run only when the guard holds). Equal to the original up to ``x * 0`` for
    non-finite ``x``, a difference the backend accepts only with ``fast_math``."""

    def split(body: ir.Expr, var: str) -> tuple[ir.Expr, ir.Expr, ir.Expr] | None:
        if not (isinstance(body, ir.BinOp) and body.op == "*"):
            return None
        for sel, other in ((body.b, body.a), (body.a, body.b)):
            if (isinstance(sel, ir.Select) and _is_zero(sel.b)
                    and var not in _free_names(sel.cond)
                    and not any(isinstance(n, ir.Reduce) for n in ir.walk(sel.cond))):
                return sel.cond, ir.BinOp("*", other, sel.a), sel.b
        return None

    def f(n: ir.Node) -> ir.Node | None:
        if not (isinstance(n, ir.Reduce) and n.op == "sum"):
            return None
        guards, body = [], n.body
        while (found := split(body, n.var)) is not None:
            cond, body, zero = found
            guards.append((cond, zero))
        if not guards:
            return None
        out: ir.Expr = replace(n, body=body)
        for cond, zero in reversed(guards):
            out = ir.Select(cond, out, zero)
        return out

    kernels = tuple(replace(k, body=ir.transform(k.body, f)) for k in program.kernels)
    return replace(program, kernels=kernels)


def _uses(e: ir.Expr, var: str, in_arm: bool = False) -> list[bool]:
    """One entry per use of ``var`` in ``e``: whether it lies in a branch of a ``Select`` and
    is evaluated at most once there (not inside a sum, which would evaluate it per term)."""
    if isinstance(e, ir.Var):
        return [in_arm] if e.name == var else []
    if isinstance(e, ir.Reduce):
        return [False] * sum(len(_uses(c, var)) for c in (e.start, e.stop, e.body))
    if isinstance(e, ir.Select):
        return _uses(e.cond, var, in_arm) + _uses(e.a, var, True) + _uses(e.b, var, True)
    return [u for c in ir.children(e) if isinstance(c, ir.Expr) for u in _uses(c, var, in_arm)]


def sink_into_selects(program: ir.Program) -> ir.Program:
    """``let x = v`` holding a sum, used once and only in a branch of a ``select`` in the store
    its chain of lets ends in, is inlined there: the renderer makes a select around a sum an
    if/else, so ``v`` is computed only when its branch is taken. A concatenation's halves are
    such lets (MV-RNN's two matrix-vector products, ``t[j] = select(j < 64, a, b)``: both were
    computed for every ``j``). Exact: only lets separate ``x`` from the store (no store in
    between), so ``v`` reads the same memory. Lets inside ``vectorized`` loops stay (their
    vector statements need lane-free branches)."""
    in_vectors = {n.var for k in program.kernels for loop in ir.walk(k.body)
                  if isinstance(loop, ir.For) and loop.kind == "vectorized"
                  for n in ir.walk(loop) if isinstance(n, ir.Let)}

    def f(n: ir.Node) -> ir.Node | None:
        if (not isinstance(n, ir.Let) or n.var in in_vectors
                or not any(isinstance(m, ir.Reduce) for m in ir.walk(n.value))):
            return None
        chain, s = [], n.body
        while isinstance(s, ir.Let):
            chain.append(s)
            s = s.body
        if (not isinstance(s, ir.Store) or _uses(s.value, n.var) != [True]
                or any(_uses(e, n.var) for e in (*s.index, *(c.value for c in chain)))):
            return None
        out: ir.Stmt = replace(s, value=ir.substitute(s.value, {n.var: n.value}))
        for c in reversed(chain):
            out = replace(c, body=out)
        return out

    kernels = tuple(replace(k, body=ir.transform(k.body, f)) for k in program.kernels)
    return replace(program, kernels=kernels)


def unfused_fma(program: ir.Program) -> ir.Program:
    """``fma(a, b, c)`` -> ``c + a * b``: the build flags (``-cl-unsafe-math-optimizations``)
    let the driver contract it back into one FMA instruction, while PoCL's ``fma`` on the vector
    statements of a jammed block is a library call per element (measured on the TreeLSTM h256:
    b1 3.9 ms against 13.5 ms with ``fma``). Equal up to rounding, so the backend applies it
    only with ``fast_math``; without it ``fma`` stays exact."""

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.Call) and n.fn == "fma":
            a, b, c = n.args
            return ir.BinOp("+", c, ir.BinOp("*", a, b))
        return None

    kernels = tuple(replace(k, body=ir.transform(k.body, f)) for k in program.kernels)
    return replace(program, kernels=kernels)


def tanh_via_sigmoid(program: ir.Program) -> ir.Program:
    """``tanh(x)`` -> ``2 * sigmoid(2 * x) - 1``: one ``exp`` instead of the driver's ``tanh``.

    On PoCL's CPU device neither is vectorized (each is a scalar library call per hidden unit
    and node) and ``tanh`` costs about 1.6x a sigmoid; a TreeLSTM node evaluates two of them
    per hidden unit. Equal up to rounding (absolute error ~1e-7 near 0, where the subtraction
    cancels), so the backend applies it only with ``fast_math``."""

    def f(n: ir.Node) -> ir.Node | None:
        if not (isinstance(n, ir.Call) and n.fn == "tanh"):
            return None
        x = n.args[0]
        dt = _float_dtype(x, program)
        if dt is None:
            return None
        two, one = ir.fconst(2.0, dt), ir.fconst(1.0, dt)
        return ir.BinOp("-", ir.BinOp("*", two, ir.call("sigmoid", ir.BinOp("*", two, x))), one)

    kernels = tuple(replace(k, body=ir.transform(k.body, f)) for k in program.kernels)
    return replace(program, kernels=kernels)


def _float_dtype(e: ir.Expr, program: ir.Program) -> str | None:
    try:
        dt = ir.infer_dtype(e, {b.name: b.dtype for b in program.buffers})
    except Exception:
        return None
    return dt if dt in ir.FLOAT_DTYPES else None


def _has_parallel(s: ir.Stmt) -> bool:
    return any(isinstance(n, ir.For) and n.kind == "parallel" for n in ir.walk(s))


def split_phases(program: ir.Program) -> ir.Program:
    """A kernel whose body (under its lets) is a sequence in which two or more statements hold
    a parallel loop -- an interchanged level: one parallel loop per hidden nest, the later ones
    reading what the earlier ones wrote -- becomes one kernel per statement, launched in turn:
    in the per-level form a launch boundary is the only barrier across work-groups OpenCL has.
    The single-work-group kernel inlines them with a group barrier between each."""
    kernels: list[ir.Kernel] = []
    parts_of: dict[str, list[str]] = {}
    taken = {k.name for k in program.kernels}
    for k in program.kernels:
        lets: list[ir.Let] = []
        body = k.body
        while isinstance(body, ir.Let):
            lets.append(body)
            body = body.body
        top = list(body.stmts) if isinstance(body, ir.Seq) else [body]
        if sum(_has_parallel(s) for s in top) < 2:
            kernels.append(k)
            continue
        names = []
        for i, s in enumerate(top):
            name = k.name
            if i:
                name = f"{k.name}_phase{i}"
                while name in taken:
                    name += "_"
                taken.add(name)
            for let in reversed(lets):
                s = ir.Let(let.var, let.value, s)
            kernels.append(replace(k, name=name, body=s))
            names.append(name)
        parts_of[k.name] = names
    if not parts_of:
        return program

    def steps(host: tuple[ir.Node, ...]) -> tuple[ir.Node, ...]:
        out: list[ir.Node] = []
        for st in host:
            if isinstance(st, ir.Launch) and st.kernel in parts_of:
                out += [ir.Launch(name, st.args) for name in parts_of[st.kernel]]
            elif isinstance(st, ir.HostFor):
                out.append(replace(st, body=steps(st.body)))
            else:
                out.append(st)
        return tuple(out)

    return replace(program, kernels=tuple(kernels), host=steps(program.host))


def to_work_groups(program: ir.Program) -> ir.Program:
    """CPU-style parallel loops -> OpenCL work-groups and work-items.

    On a CPU OpenCL device the scheduler sees a CPU (``Capabilities.has_grid`` False) and marks
    loops ``parallel``; here, in each kernel, the outermost ``parallel`` loops (not inside a
    serial loop) become ``gpu_group`` loops and the outermost ``parallel`` loops inside those
    become ``gpu_thread`` loops; deeper ones run serially within their work-item. Parallel
    loops promise no loop-carried dependence, so any such mapping is legal; but where a group
    would run two work-item loops one after the other (a node's hidden nests under
    ``parallel="both"``, the later reading units the earlier wrote) they stay serial in the
    work-item instead: the statement order needs a group barrier between them, and PoCL's
    work-group compiler gets a barrier inside a work-group loop wrong (the conformance suite's
    random schedules found both: a race without it, wrong values with it).
    (Statements that hold work-group loops one after the other: :func:`split_phases`.)"""

    def stmt(s: ir.Stmt, depth: int) -> ir.Stmt:
        # depth: 0 = no group loop above, 1 = inside a group loop, 2 = inside a thread loop,
        # 3 = inside a serial loop (no mapping below)
        if isinstance(s, ir.For):
            kind, inner = s.kind, depth
            if s.kind == "parallel":
                kind, inner = {0: ("gpu_group", 1), 1: ("gpu_thread", 2)}.get(depth, ("serial", depth))
            elif s.kind in ("gpu_group", "gpu_thread"):
                inner = 1 if s.kind == "gpu_group" else 2
            elif depth == 0:  # a serial loop around group loops would need a grid barrier
                inner = 3
            body = stmt(s.body, inner)
            return replace(s, kind=kind, body=body)
        if isinstance(s, ir.Seq):
            if depth == 1 and sum(_has_parallel(x) for x in s.stmts) >= 2:
                depth = 3  # work-item loops in a row: serial within the work-item
            return ir.Seq(tuple(stmt(x, depth) for x in s.stmts))
        if isinstance(s, (ir.Let, ir.Alloc)):
            return replace(s, body=stmt(s.body, depth))
        if isinstance(s, ir.If):
            return replace(s, then=stmt(s.then, depth),
                           orelse=None if s.orelse is None else stmt(s.orelse, depth))
        return s

    kernels = tuple(replace(k, body=stmt(k.body, 0)) for k in program.kernels)
    return replace(program, kernels=kernels)


# ------------------------------------------------------------------------- host evaluation


def evaluate(e: ir.Expr, env: Mapping[str, int], arrays: Mapping[str, np.ndarray]) -> int:
    """An int host expression over sizes/launch arguments (``env``) and index arrays."""
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        if e.name not in env:
            raise _Unknown(e.name)
        return int(env[e.name])
    if isinstance(e, ir.Load):
        a = arrays.get(e.buffer)
        if a is None:
            raise _Unknown(e.buffer)
        idx = tuple(evaluate(i, env, arrays) for i in e.index)
        if any(i < 0 or i >= n for i, n in zip(idx, a.shape)):
            raise _Unknown(e.buffer)
        return int(a[idx])
    if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*", "//", "%", "min", "max"):
        a, b = evaluate(e.a, env, arrays), evaluate(e.b, env, arrays)
        if e.op in ("//", "%") and b == 0:
            raise _Unknown("division by zero")
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                "//": lambda: a // b, "%": lambda: a % b,
                "min": lambda: min(a, b), "max": lambda: max(a, b)}[e.op]()
    if isinstance(e, ir.Cast):
        return evaluate(e.a, env, arrays)
    raise _Unknown(type(e).__name__)


def _outer_loops(node: ir.Node, kind: str) -> list[ir.For]:
    """Loops of ``kind`` not nested in another loop of that kind."""
    out: list[ir.For] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ir.For) and n.kind == kind:
            out.append(n)
            continue
        if isinstance(n, ir.Stmt):
            stack.extend(c for c in _stmt_children(n))
    return out


def _stmt_children(s: ir.Stmt) -> list[ir.Stmt]:
    if isinstance(s, ir.Seq):
        return list(s.stmts)
    if isinstance(s, (ir.For, ir.Let, ir.Alloc)):
        return [s.body]
    if isinstance(s, ir.If):
        return [s.then] + ([s.orelse] if s.orelse is not None else [])
    return []


def plan_groups(kernel: ir.Kernel, env: Mapping[str, int], arrays: Mapping[str, np.ndarray],
                cap: int) -> int:
    """Work-groups for one launch of ``kernel``: the largest trip count of its outermost
    ``gpu_group`` loops (bounded by ``cap``; ``cap`` when the host cannot evaluate it), 1 when
    it has none (every group would redo the whole kernel), at least 1."""
    loops = _outer_loops(kernel.body, "gpu_group")
    if not loops:
        return 1
    best = 0
    for loop in loops:
        try:
            best = max(best, evaluate(loop.stop, env, arrays) - evaluate(loop.start, env, arrays))
        except _Unknown:
            return cap
    return max(1, min(best, cap))


def thread_extent(kernel: ir.Kernel) -> int | None:
    """The largest constant trip count of ``kernel``'s outermost ``gpu_thread`` loops; 1 when it
    has none (one work-item per group), None when a trip count is not a constant."""
    loops = _outer_loops(kernel.body, "gpu_thread")
    if not loops:
        return 1
    best = 0
    for loop in loops:
        a, b = ir.const_int(loop.start), ir.const_int(loop.stop)
        if a is None or b is None:
            return None
        best = max(best, b - a)
    return max(1, best)
