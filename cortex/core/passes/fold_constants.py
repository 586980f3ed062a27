"""Constant folding: evaluate ops on constants and apply exact algebraic identities.

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``), first in the pipeline:
models often write the leaf case as the internal equations with zero child states (a sequence's
first element, a child-sum leaf), and this pass removes that dead arithmetic.

A ``const`` is a tensor filled with one scalar. Rules (exact for finite inputs; ``0 * x = 0``
assumes ``x`` is finite, as every state of a well-posed model is):

* an elementwise op, ``concat`` or ``slice`` whose arguments are all constants -> a constant;
* ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x`` -> ``x``; ``x * 0`` -> ``0``;
* ``linear(W, 0) -> 0``, ``linear(W, 0, b) -> b``, ``linear(0, x[, b])`` likewise;
  ``matmul`` with a zero operand -> ``0``.

A per-child value is never replaced by a (node-invariant) constant, so ``reduce_children``
always keeps a per-child argument.
"""

from __future__ import annotations

import math

from cortex.core.frontend.graph import Case, RecursiveGraph, Value
from cortex.core.passes._rewrite import CaseRewriter, map_cases

_SCALAR = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "sigmoid": lambda a: 1.0 / (1.0 + math.exp(-a)) if a > -700 else 0.0,
    "tanh": math.tanh,
    "relu": lambda a: max(a, 0.0),
}


def _const_value(v: Value) -> float | None:
    return v.attr("value") if v.op == "const" else None


def _fold_case(graph: RecursiveGraph, case: Case) -> Case:
    rw = CaseRewriter(graph, case)

    def const(value: float, like: Value) -> int:
        return rw.emit("const", (), (("dtype", like.dtype), ("shape", like.shape), ("value", float(value))))

    for v in case.values:
        args = [rw.get(rw.remap[a]) for a in v.args]
        cs = [_const_value(a) for a in args]
        new: int | None = None
        if v.op in _SCALAR and all(c is not None for c in cs):
            new = const(_SCALAR[v.op](*cs), v)
        elif v.op in ("concat", "slice") and args and all(c is not None for c in cs) and len(set(cs)) == 1:
            new = const(cs[0], v)
        elif v.op == "add" and cs[1] == 0.0:
            new = args[0].id
        elif v.op == "add" and cs[0] == 0.0:
            new = args[1].id
        elif v.op == "sub" and cs[1] == 0.0:
            new = args[0].id
        elif v.op == "mul" and cs[1] == 1.0:
            new = args[0].id
        elif v.op == "mul" and cs[0] == 1.0:
            new = args[1].id
        elif v.op == "mul" and 0.0 in cs:
            new = const(0.0, v)
        elif v.op in ("linear", "matmul") and (cs[0] == 0.0 or cs[1] == 0.0):
            new = args[2].id if len(args) == 3 else const(0.0, v)
        if new is not None and v.domain == "child" and rw.get(new).op == "const":
            new = None  # keep per-child values per-child: reduce_children needs its edges
        if new is None:
            rw.copy(v)
        else:
            rw.remap[v.id] = new
    return rw.finish()


def fold_constants(graph: RecursiveGraph) -> RecursiveGraph:
    return map_cases(graph, _fold_case)
