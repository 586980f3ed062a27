"""The LoopProgram's size symbols and shapes: the linearizer's arrays as IR declarations, and
shape expressions compiled into functions of the sizes.

Pipeline position: part of the loop IR (:mod:`cortex.core.loopir`, which re-exports these). The
lowering declares the linearizer's arrays with :func:`linearizer_buffers`; executables and the
interpreter evaluate buffer shapes on every call with :func:`shape_function`.
"""

from __future__ import annotations

from typing import Callable, Mapping

from cortex.core.loopir.nodes import INT, BinOp, Buffer, Const, Expr, ExprLike, LoopIRError, Size, Var, as_expr


#: Sizes bound from a ``LinearizedBatch``: nodes, child edges, batch, levels, leaves (NL <= N).
def linearizer_sizes() -> tuple[Size, ...]:
    n = Var("N")
    return (Size("N"), Size("E"), Size("B"), Size("L"), Size("NL", hi=n))


def linearizer_buffers(
    arity: int, vocab: int | None = None, features: int | None = None
) -> tuple[Buffer, ...]:
    """Declarations of the ``LinearizedBatch`` arrays with the value-range facts its contract
    guarantees (``cortex/core/linearize/structure.py``). ``arity`` is the constant width of
    ``child_table`` the program indexes (the model's arity, or its maximum for variable
    arity); ``vocab`` adds ``word_ids`` in [-1, vocab-1]; ``features`` adds ``features[N, F]``
    (float64, as the linearizer produces it)."""
    n, e, b, lv = Var("N"), Var("E"), Var("B"), Var("L")
    zero = Const(0)
    out = [
        Buffer("level_offsets", INT, (lv + 1,), "index", (zero, n), monotone=True),
        Buffer("child_offsets", INT, (n + 1,), "index", (zero, e), monotone=True),
        Buffer("child_ids", INT, (e,), "index", (zero, n - 1)),
        Buffer("child_table", INT, (n, Const(arity)), "index", (Const(-1), n - 1)),
        Buffer("roots", INT, (b,), "index", (zero, n - 1)),
        Buffer("node_input", INT, (n,), "index", (zero, b - 1)),
    ]
    if vocab is not None:
        out.append(Buffer("word_ids", INT, (n,), "index", (Const(-1), Const(vocab - 1))))
    if features is not None:
        out.append(Buffer("features", "float64", (n, Const(features)), "input"))
    return tuple(out)


_INT_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "min": min,
    "max": max,
}


def size_function(e: ExprLike) -> Callable[[Mapping[str, int]], int]:
    """``e`` (an int expression over size symbols: Const, Var, + - * // % min max) compiled
    once into a function of the sizes. Shapes are evaluated on every executable call, so this
    keeps the IR walk out of the hot path."""
    e = as_expr(e)
    if isinstance(e, Const) and e.dtype == INT:
        value = int(e.value)
        return lambda sizes: value
    if isinstance(e, Var) and e.dtype == INT:
        name = e.name
        return lambda sizes: int(sizes[name])
    if isinstance(e, BinOp) and e.op in _INT_OPS:
        fa, fb, op = size_function(e.a), size_function(e.b), _INT_OPS[e.op]
        return lambda sizes: op(fa(sizes), fb(sizes))
    raise LoopIRError(f"not a size expression (ints, size symbols, + - * // % min max): {e}")


def shape_function(shape: tuple[Expr, ...]) -> Callable[[Mapping[str, int]], tuple[int, ...]]:
    """A buffer shape compiled with :func:`size_function`: ``shape_function(b.shape)(sizes)``."""
    dims = tuple(size_function(d) for d in shape)
    return lambda sizes: tuple(d(sizes) for d in dims)
