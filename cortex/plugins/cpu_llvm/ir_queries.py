"""Questions the ``llvm`` code generator asks of LoopProgram expressions and loops.

Pipeline position: inside the ``llvm`` renderer. Cached free-variable sets (asked thousands of
times per program), "does evaluating this need a branch", exact division by a constant (the
packed weight layout's ``jn // 16``), and :func:`vector_width`: whether a ``vectorized`` loop is
emitted as straight-line SIMD code. Pure functions of the IR; nothing here emits LLVM.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.core import loopir as ir

_kids = ir.children  # loopir's traversal
_walk = ir.walk


#: id(node) -> (node, names of every Var in it): the code generator asks "does this expression
#: use a name of that set" thousands of times per program (cleared after each ``generate``)
_NAMES: dict[int, tuple[ir.Node, frozenset]] = {}
_EMPTY: frozenset = frozenset()


def _var_names(node: ir.Node) -> frozenset:
    hit = _NAMES.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    # iterative post-order (a kernel body nests one Let per value: deeper than Python recursion)
    stack: list[tuple[ir.Node, list | None]] = [(node, None)]  # (node, its kids once visited)
    while stack:
        n, kids = stack.pop()
        h = _NAMES.get(id(n))
        if h is not None and h[0] is n:
            continue
        if kids is None:
            kids = _kids(n)
            if kids:
                stack.append((n, kids))
                stack.extend((k, None) for k in kids)
                continue
        if isinstance(n, ir.Var):
            out = frozenset((n.name,))
        else:
            out = _EMPTY
            for k in kids:
                kn = _NAMES[id(k)][1]
                if kn:
                    out = out | kn if out else kn
        _NAMES[id(n)] = (n, out)
    return _NAMES[id(node)][1]


def _contains(node: ir.Node, pred) -> bool:
    return any(pred(n) for n in _walk(node))


def _uses_var(node: ir.Node, name: str) -> bool:
    return name in _var_names(node)


def _needs_branch(e: ir.Expr) -> bool:
    """True when evaluating ``e`` unconditionally could fault or cost a loop (loads, division,
    reductions): such a Select side is evaluated under a branch."""
    return _contains(e, lambda n: isinstance(n, (ir.Load, ir.Reduce))
                     or (isinstance(n, ir.BinOp) and n.op in ("//", "%")))


@dataclass(frozen=True)
class _Idx(ir.Node):
    """A tuple of index expressions as one node (for the varying test)."""

    index: tuple



def _exact_div(e: ir.Expr, d: int) -> ir.Expr | None:
    """``e // d`` for an int expression that ``_divisor`` shows is a multiple of ``d``, written
    without a division (so exact that truncating and flooring agree), or None."""
    c = ir.const_int(e)
    if c is not None:
        return ir.Const(c // d)
    if isinstance(e, ir.BinOp):
        if e.op in ("+", "-"):
            a, b = _exact_div(e.a, d), _exact_div(e.b, d)
            return None if a is None or b is None else ir.BinOp(e.op, a, b)
        if e.op == "*":
            for x, y in ((e.a, e.b), (e.b, e.a)):
                k = ir.const_int(y)
                if k is not None and k % d == 0:
                    return x if k // d == 1 else ir.BinOp("*", x, ir.Const(k // d))
                if _divisor(x) % d == 0:
                    q = _exact_div(x, d)
                    if q is not None:
                        return ir.BinOp("*", q, y)
    return None


def _divisor(e: ir.Expr) -> int:
    """A known divisor of an int expression's value (0: the value is 0)."""
    import math

    c = ir.const_int(e)
    if c is not None:
        return abs(c)
    if isinstance(e, ir.BinOp):
        if e.op == "*":
            return _divisor(e.a) * _divisor(e.b)
        if e.op in ("+", "-"):
            return math.gcd(_divisor(e.a), _divisor(e.b))
        if e.op == "//":
            c = ir.const_int(e.b)
            m = _divisor(e.a)
            return m // c if c and c > 0 and m % c == 0 else 1
    return 1



def vector_width(loop: ir.For) -> int:
    """Lanes for emitting ``loop`` as straight-line vector code, or 0 (then it stays a loop with
    vectorize metadata): a constant trip count of 2..64 and a body of lets, stores and
    uniform ifs whose lane-dependent selects/ands/ors have sides that are safe to evaluate for
    every lane (no masked loads are generated), reductions with uniform ranges."""
    lo, hi = ir.const_int(loop.start), ir.const_int(loop.stop)
    if lo is None or hi is None or not 2 <= hi - lo <= 64:
        return 0
    varying = {loop.var}

    def varies(e: ir.Node) -> bool:
        return not varying.isdisjoint(_var_names(e))

    for n in _walk(loop.body):
        if isinstance(n, (ir.For, ir.Alloc, ir.Barrier)):
            return 0
        if isinstance(n, ir.Let) and varies(n.value):
            varying.add(n.var)
    for n in _walk(loop.body):
        if isinstance(n, ir.If) and varies(n.cond):
            return 0
        if isinstance(n, ir.Select) and varies(n.cond) and (_needs_branch(n.a) or _needs_branch(n.b)):
            return 0
        if isinstance(n, ir.BinOp) and n.op in ("and", "or") and _needs_branch(n.b) and varies(n):
            return 0
        if isinstance(n, ir.Reduce) and (varies(n.start) or varies(n.stop)):
            return 0
        if isinstance(n, ir.Store) and not varies(_Idx(n.index)):
            return 0
    return hi - lo



def serial_reads_stable(kernel: ir.Kernel, program: ir.Program, split_kinds: tuple[str, ...]) -> bool:
    """Whether every buffer ``kernel`` reads outside its split loops (kinds ``split_kinds``; the
    code every thread runs: loop bounds, lets, conditions) is one that no kernel of ``program``
    stores to. Then a thread that runs behind the others reads what they read, whichever loop
    they are in: a dynamically split loop may end without a team barrier."""
    stored = {n.buffer for k in program.kernels for n in _walk(k.body) if isinstance(n, ir.Store)}
    stack: list[ir.Node] = [kernel.body]
    while stack:  # (iterative: a kernel body nests one Let per value)
        n = stack.pop()
        if isinstance(n, ir.For) and n.kind in split_kinds:
            stack.extend((n.start, n.stop))
            continue
        if isinstance(n, ir.Load) and n.buffer in stored:
            return False
        stack.extend(_kids(n))
    return True
