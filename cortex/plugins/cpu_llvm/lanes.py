"""The vectorized loop being emitted: which names vary across lanes, and index affinity.

Pipeline position: inside the ``llvm`` renderer. While the body of a ``vectorized`` loop is
emitted as straight-line SIMD code, :class:`_VecCtx` tells which let-bound names are vectors and
analyses an index as affine in the lane (stride and a known divisor), so a contiguous access
becomes one vector load/store.
"""

from __future__ import annotations

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm.ir_queries import _divisor, _var_names
from cortex.plugins.cpu_llvm.llvm_types import CodegenError

class _VecCtx:
    """The vectorized loop being emitted: its variable, lanes, and what varies across lanes."""

    def __init__(self, var: str, width: int, start: int, varying: set[str], let_ir: dict) -> None:
        self.var, self.width, self.start = var, width, start
        self.varying = varying
        self.let_ir: dict[str, ir.Expr] = let_ir

    def _varies(self, e: ir.Node) -> bool:
        return not self.varying.isdisjoint(_var_names(e))

    def lane0(self, e: ir.Expr) -> ir.Expr:
        """``e`` for the first lane, written with uniform names only."""
        for _ in range(len(self.let_ir) + 2):
            if not self._varies(e):
                return e
            e = ir.substitute(e, {**self.let_ir, self.var: ir.Const(self.start)})  # type: ignore[assignment]
        raise CodegenError(f"internal: cannot express {e} for lane 0")

    def lane_stride(self, e: ir.Expr) -> int | None:
        r = self._affine(e)
        return None if r is None else r[0]

    def _affine(self, e: ir.Expr) -> tuple[int, int] | None:
        """(stride across lanes, a known divisor of the lane-0 value (0: it is 0)) or None."""
        import math

        if not self._varies(e):
            return 0, _divisor(e)
        if isinstance(e, ir.Var):
            if e.name == self.var:
                return 1, abs(self.start)
            if e.name in self.let_ir:
                return self._affine(self.let_ir[e.name])
            return None
        if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
            a, b = self._affine(e.a), self._affine(e.b)
            if a is None or b is None:
                return None
            return (a[0] + b[0] if e.op == "+" else a[0] - b[0]), math.gcd(a[1], b[1])
        if isinstance(e, ir.BinOp) and e.op == "*":
            for x, y in ((e.a, e.b), (e.b, e.a)):
                c = ir.const_int(y)
                if c is not None:
                    a = self._affine(x)
                    return None if a is None else (a[0] * c, a[1] * abs(c))
            return None
        if isinstance(e, ir.BinOp) and e.op in ("//", "%"):
            c = ir.const_int(e.b)
            a = self._affine(e.a)
            if c is None or c <= 0 or a is None:
                return None
            st, m = a
            if st < 0 or m % c or st * (self.width - 1) >= c:
                return None
            return (0, m // c) if e.op == "//" else (st, 0)
        return None
