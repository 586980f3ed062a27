"""Schedule primitives: pure LoopProgram -> LoopProgram rewrites (split, reorder, unroll, ...).

Pipeline position: the scheduler applies these to the lowered program according to the
:class:`~cortex.core.lowering.schedule.Schedule` knobs; every result must still verify and compute the
same values (tests run the interpreter on both). Loops are named by their (unique) variable.

Primitives:

* :func:`split` — ``for v in [a, b)`` becomes ``for vo, for vi in [0, f): let v = a + vo*f + vi``
  with a tail guard ``if v < b`` unless the trip count is a known multiple of ``f``.
* :func:`reorder` — interchange two perfectly nested loops.
* :func:`unroll` — replicate a constant-trip loop's body (``factor``: split first).
* :func:`annotate` (and :func:`vectorize`, :func:`parallelize`, :func:`bind`) — set a loop's
  kind: vectorized / parallel / unrolled (a pragma) / gpu_group / gpu_thread.
* :func:`cache` — copy a weight buffer into a private or shared array at the start of a
  loop body (or of the kernel: model persistence across levels) and read it from there.
* :func:`change_layout` — store a 2-D buffer transposed or packed (blocked by ``w`` rows, the
  SIMD-friendly layout of ALT) and rewrite every index; :func:`to_layout` converts host data.
* :func:`rewrite_loops` — the loops of a program, outermost first, each kept, replaced or
  descended into: the walk the loop-shape transforms share.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from cortex.core import loopir as ir
from cortex.core.runtime.hostmem import aligned_copy


class TransformError(ir.LoopIRError):
    """A schedule primitive cannot be applied here (no such loop, not perfectly nested, ...)."""


def loop_vars(program: ir.Program) -> list[str]:
    """The variables of every For loop of the program, in kernel order."""
    return [n.var for k in program.kernels for n in ir.walk(k.body) if isinstance(n, ir.For)]


def _fresh(program: ir.Program, base: str) -> str:
    used = {n.var for k in program.kernels for n in ir.walk(k.body) if isinstance(n, (ir.For, ir.Let, ir.Reduce))}
    used |= {n.name for k in program.kernels for n in ir.walk(k.body) if isinstance(n, (ir.Alloc, ir.Var))}
    used |= set(program.size_names) | {b.name for b in program.buffers}
    name, i = base, 0
    while name in used:
        i += 1
        name = f"{base}{i}"
    return name


def _rewrite_loop(program: ir.Program, var: str, fn) -> ir.Program:
    """Apply ``fn`` to the For loop over ``var`` (exactly one must exist)."""
    found = []

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.For) and n.var == var:
            found.append(n)
            return fn(n)
        return None

    kernels = tuple(replace(k, body=ir.simplify(ir.transform(k.body, f))) for k in program.kernels)
    if not found:
        raise TransformError(f"program {program.name} has no loop over {var!r}; loops: {loop_vars(program)}")
    if len(found) > 1:
        raise TransformError(f"program {program.name} has {len(found)} loops over {var!r}; names must be unique")
    return replace(program, kernels=kernels)


def rewrite_loops(program: ir.Program, fn: Callable[[ir.For], ir.Stmt | None]) -> tuple[ir.Program, int]:
    """Every loop of every kernel, outermost first, given to ``fn``: a statement replaces the
    loop (nothing inside it is visited; return the loop itself to keep it whole), None visits
    its body. Statements only: a loop is never inside an expression. Returns the program and how
    many loops ``fn`` replaced by something else."""
    count = 0

    def stmt(s: ir.Stmt) -> ir.Stmt:
        nonlocal count
        if isinstance(s, ir.For):
            new = fn(s)
            if new is None:
                return replace(s, body=stmt(s.body))
            if new is not s:
                count += 1
            return new
        if isinstance(s, ir.Seq):
            return ir.seq(*(stmt(x) for x in s.stmts))
        if isinstance(s, (ir.Let, ir.Alloc)):
            return replace(s, body=stmt(s.body))
        if isinstance(s, ir.If):
            return ir.If(s.cond, stmt(s.then), None if s.orelse is None else stmt(s.orelse))
        return s

    kernels = tuple(replace(k, body=stmt(k.body)) for k in program.kernels)
    return replace(program, kernels=kernels), count


def split(
    program: ir.Program, var: str, factor: int, outer: str | None = None, inner: str | None = None,
    inner_kind: str = "serial",
) -> ir.Program:
    """Tile the loop over ``var`` by ``factor``; the outer loop keeps the original kind."""
    if not isinstance(factor, int) or factor < 1:
        raise TransformError(f"split factor must be a positive int, got {factor!r}")
    outer = outer or _fresh(program, f"{var}_o")
    inner = inner or _fresh(program, f"{var}_i")

    def fn(loop: ir.For) -> ir.Stmt:
        trip = ir.const_int(loop.stop - loop.start)
        vo, vi = ir.Var(outer), ir.Var(inner)
        value = loop.start + vo * factor + vi
        body: ir.Stmt = loop.body
        if trip is not None and trip % factor == 0:
            n_outer: ir.Expr = ir.Const(trip // factor)
        else:
            body = ir.If(ir.Var(var) < loop.stop, body)
            n_outer = ir.Const(-(-trip // factor)) if trip is not None else (loop.stop - loop.start + (factor - 1)) // factor
        return ir.For(outer, 0, n_outer, ir.For(inner, 0, factor, ir.Let(var, value, body), inner_kind), loop.kind)

    return _rewrite_loop(program, var, fn)


def reorder(program: ir.Program, outer: str, inner: str) -> ir.Program:
    """Swap two perfectly nested loops ``for outer: for inner: body``."""

    def fn(loop: ir.For) -> ir.Stmt:
        body = loop.body
        if not (isinstance(body, ir.For) and body.var == inner):
            raise TransformError(f"loop {inner!r} is not directly nested in loop {outer!r}")
        for e in (body.start, body.stop):
            if any(isinstance(n, ir.Var) and n.name == outer for n in ir.walk(e)):
                raise TransformError(f"bounds of loop {inner!r} depend on {outer!r}; cannot interchange")
        return replace(body, body=replace(loop, body=body.body))

    return _rewrite_loop(program, outer, fn)


def unroll(program: ir.Program, var: str, factor: int | None = None) -> ir.Program:
    """Fully unroll a constant-trip loop, or (with ``factor``) split it and unroll the inner part."""
    if factor is not None:
        inner = _fresh(program, f"{var}_u")
        program = split(program, var, factor, inner=inner)
        var = inner

    def fn(loop: ir.For) -> ir.Stmt:
        lo, hi = ir.const_int(loop.start), ir.const_int(loop.stop)
        if lo is None or hi is None:
            raise TransformError(f"loop {var!r} has a non-constant trip count; unroll it with a factor")
        if hi - lo > 64:
            raise TransformError(f"loop {var!r} has {hi - lo} iterations; refusing to unroll more than 64")
        return ir.seq(*(ir.Let(loop.var, ir.Const(i), loop.body) for i in range(lo, hi)))

    return _rewrite_loop(program, var, fn)


def annotate(program: ir.Program, var: str, kind: str) -> ir.Program:
    """Set how the loop over ``var`` runs (one of ``loopir.LOOP_KINDS``)."""
    if kind not in ir.LOOP_KINDS:
        raise TransformError(f"loop kind {kind!r} not in {ir.LOOP_KINDS}")
    return _rewrite_loop(program, var, lambda loop: replace(loop, kind=kind))


def vectorize(program: ir.Program, var: str, width: int | None = None) -> ir.Program:
    """Mark a loop vectorized; with ``width``, split it and vectorize the inner ``width`` lanes."""
    if width is None:
        return annotate(program, var, "vectorized")
    return split(program, var, width, inner=_fresh(program, f"{var}_v"), inner_kind="vectorized")


def parallelize(program: ir.Program, var: str) -> ir.Program:
    return annotate(program, var, "parallel")


def bind(program: ir.Program, var: str, level: str) -> ir.Program:
    """Map a loop to GPU groups (``"group"``) or to the threads of a group (``"thread"``)."""
    if level not in ("group", "thread"):
        raise TransformError(f"bind level must be 'group' or 'thread', got {level!r}")
    return annotate(program, var, f"gpu_{level}")


def cache(
    program: ir.Program, buffer: str, scope: str, at: str | None = None, kernel: str | None = None,
    name: str | None = None, copy_kind: str | None = None,
) -> ir.Program:
    """Read ``buffer`` from a ``scope`` ("shared"/"private") copy made at the start of loop
    ``at``'s body, or of the kernel body when ``at`` is None (persistence across levels).

    The copy loop runs as ``copy_kind`` (default: gpu_thread for shared, serial for private)
    and a shared copy is followed by a group barrier."""
    b = program.buffer(buffer)
    shape = tuple(ir.const_int(d) for d in b.shape)
    if any(d is None for d in shape):
        raise TransformError(f"buffer {buffer} has a symbolic shape; only constant-shape weights can be cached")
    if any(isinstance(n, ir.Store) and n.buffer == buffer for k in program.kernels for n in ir.walk(k.body)):
        raise TransformError(f"buffer {buffer} is written by the program; caching it would lose writes")
    name = name or _fresh(program, f"{buffer}_{scope}")
    kind = copy_kind or ("gpu_thread" if scope == "shared" else "serial")

    def wrap(body: ir.Stmt) -> ir.Stmt:
        idx = [_fresh(program, f"{name}_c{d}") for d in range(len(shape))]
        copy: ir.Stmt = ir.Store(name, tuple(ir.Var(i) for i in idx), ir.Load(buffer, tuple(ir.Var(i) for i in idx)))
        for d in reversed(range(len(shape))):
            copy = ir.For(idx[d], 0, shape[d], copy, kind if d == 0 else "serial")
        parts = [copy] + ([ir.Barrier("group")] if scope == "shared" else [])
        return ir.Alloc(name, b.dtype, shape, scope, ir.seq(*parts, ir.rename_buffer(body, buffer, name)))  # type: ignore[arg-type]

    if at is None:
        targets = [k for k in program.kernels if kernel is None or k.name == kernel]
        if kernel is not None and not targets:
            raise TransformError(f"program {program.name} has no kernel {kernel!r}")
        uses = {k.name for k in targets if any(isinstance(n, ir.Load) and n.buffer == buffer for n in ir.walk(k.body))}
        kernels = tuple(replace(k, body=wrap(k.body)) if k.name in uses else k for k in program.kernels)
        return replace(program, kernels=kernels)
    def at_loop(loop: ir.For) -> ir.Stmt:
        if scope == "shared" and loop.kind not in ("serial", "gpu_group"):
            raise TransformError(
                f"a shared copy is made by a whole group, then a group barrier; loop {at!r} is {loop.kind}, "
                "so cache in shared memory at a gpu_group or serial loop (or at kernel start)"
            )
        return replace(loop, body=wrap(loop.body))

    return _rewrite_loop(program, at, at_loop)


def change_layout(program: ir.Program, buffer: str, layout: str, block: int = 1) -> ir.Program:
    """Store the 2-D constant-shape ``buffer`` as ``"transposed"`` ([C, R]) or ``"packed"``
    ([R // block, C, block]: ``block`` consecutive rows interleaved per column) and rewrite every
    access. The host must pass the data through :func:`to_layout`."""
    b = program.buffer(buffer)
    if b.layout != ("row_major",):
        raise TransformError(f"buffer {buffer} already has layout {b.layout}")
    if len(b.shape) != 2:
        raise TransformError(f"layout changes apply to 2-D buffers; {buffer} has {len(b.shape)} dims")
    rows, cols = (ir.const_int(d) for d in b.shape)
    if rows is None or cols is None:
        raise TransformError(f"buffer {buffer} has a symbolic shape; layouts apply to weights")
    if layout == "row_major":
        return program
    if layout == "transposed":
        shape: tuple = (cols, rows)
        tag: tuple = ("transposed",)

        def index(i: ir.Expr, k: ir.Expr) -> tuple:
            return (k, i)
    elif layout == "packed":
        if block < 1 or rows % block:
            raise TransformError(f"packed layout of {buffer}: {rows} rows are not a multiple of block {block}")
        shape = (rows // block, cols, block)
        tag = ("packed", block)

        def index(i: ir.Expr, k: ir.Expr) -> tuple:
            return (i // block, k, i % block)
    else:
        raise TransformError(f"unknown layout {layout!r}; use row_major, transposed or packed")

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, (ir.Load, ir.Store)) and n.buffer == buffer:
            return replace(n, index=index(*n.index))
        return None

    kernels = tuple(replace(k, body=ir.transform(k.body, f)) for k in program.kernels)
    nb = replace(b, shape=tuple(ir.Const(d) for d in shape), layout=tag, logical_shape=b.shape)
    buffers = tuple(nb if x.name == buffer else x for x in program.buffers)
    return replace(program, kernels=kernels, buffers=buffers)


def to_layout(array: np.ndarray, layout: tuple) -> np.ndarray:
    """Convert a row-major host array to a buffer's physical ``layout`` (``Buffer.layout``)."""
    if layout[0] == "row_major":
        return np.ascontiguousarray(array)
    if layout[0] == "transposed":
        return aligned_copy(array.T)  # a copy anyway: on a cache line (cortex.core.runtime.hostmem)
    if layout[0] == "packed":
        w = layout[1]
        r, c = array.shape
        return aligned_copy(array.reshape(r // w, w, c).transpose(0, 2, 1))
    raise TransformError(f"unknown layout {layout!r}")


def from_layout(array: np.ndarray, layout: tuple) -> np.ndarray:
    """Inverse of :func:`to_layout`."""
    if layout[0] == "row_major":
        return array
    if layout[0] == "transposed":
        return np.ascontiguousarray(array.T)
    if layout[0] == "packed":
        nb, c, w = array.shape
        return np.ascontiguousarray(array.transpose(0, 2, 1).reshape(nb * w, c))
    raise TransformError(f"unknown layout {layout!r}")


def unroll_reduce(program: ir.Program, var: str, factor: int) -> ir.Program:
    """Unroll the ``Reduce`` over ``var`` by ``factor``: each step adds ``factor`` body copies
    (independent partial products for the compiler to interleave). The constant trip count
    must be a multiple of ``factor``."""
    found = []

    def f(n: ir.Node) -> ir.Node | None:
        if not (isinstance(n, ir.Reduce) and n.var == var):
            return None
        found.append(n)
        trip = ir.const_int(n.stop - n.start)
        if trip is None or trip % factor or n.op == "mean":
            raise TransformError(
                f"reduce over {var!r}: unrolling by {factor} needs a constant trip count that is a "
                f"multiple of it and a sum/max (got trip {trip}, op {n.op})"
            )
        outer = ir.Var(var)  # reuse the name for the step counter: the body copies substitute it
        copies = [ir.substitute(n.body, {var: n.start + outer * factor + i}) for i in range(factor)]
        body = copies[0]
        for c in copies[1:]:
            body = ir.BinOp("+", body, c) if n.op == "sum" else ir.BinOp("max", body, c)  # type: ignore[arg-type]
        return ir.Reduce(n.op, var, 0, trip // factor, body)  # type: ignore[arg-type]

    kernels = tuple(replace(k, body=ir.simplify(ir.transform(k.body, f))) for k in program.kernels)
    if not found:
        raise TransformError(f"program {program.name} has no reduce over {var!r}")
    return replace(program, kernels=kernels)


def physical_arrays(program: ir.Program, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Host arrays in logical (row-major) form -> what ``program``'s buffers hold: every buffer
    whose layout a schedule changed is converted with :func:`to_layout`; others pass through."""
    out = dict(arrays)
    for b in program.buffers:
        if b.name in arrays and b.layout != ("row_major",):
            out[b.name] = to_layout(arrays[b.name], b.layout)
    return out
