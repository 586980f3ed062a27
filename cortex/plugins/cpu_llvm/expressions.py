"""Expressions of the ``llvm`` code generator: LoopProgram expressions -> LLVM values.

Pipeline position: inside the ``llvm`` renderer, a part of the kernel emitter
(:class:`~cortex.plugins.cpu_llvm.kernel._KernelGen` inherits it). Constants, variables, loads,
arithmetic (``binop``), comparisons, selects (branching when a side may fault), casts and the
math intrinsics (``exp`` as a vectorizable polynomial; ``sigmoid``/``tanh`` written with it).
"""

from __future__ import annotations

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm.ir_queries import _needs_branch, _exact_div, _divisor
from cortex.plugins.cpu_llvm.llvm_types import I1, I32, LTYPE, CodegenError, _is_vec, _width

#: Vector float32 exp: one noinline function per width (``_Module.exp_f32_fn``) in code that runs
#: many activations next to long reductions (a jammed block: inside a private array's scope) and
#: in cold code; inline elsewhere (the leaves, where a call would show).
EXP_OUTLINED = True


class _Expressions:
    """Expression methods of the kernel emitter (a mixin of ``_KernelGen``)."""

    def expr(self, e: ir.Expr) -> ll.Value:
        b = self.b
        if isinstance(e, ir.Const):
            if e.dtype == ir.BOOL:
                return ll.Constant(I1, int(bool(e.value)))
            if e.dtype == ir.INT:
                v = int(e.value)
                if not -2**31 <= v < 2**31:
                    raise CodegenError(f"int constant {v} does not fit int32")
                return ll.Constant(I32, v)
            return ll.Constant(LTYPE[e.dtype], float(e.value))
        if isinstance(e, ir.Var):
            try:
                return self.env[e.name][0]
            except KeyError:
                raise CodegenError(f"unbound variable {e.name!r} in kernel {self.kernel.name}") from None
        if isinstance(e, ir.Load):
            return self.load(e.buffer, e.index)
        if isinstance(e, ir.BinOp):
            return self.binop(e)
        if isinstance(e, ir.Cmp):
            t = self.dtype(e.a)
            x, y = self.match(self.expr(e.a), self.expr(e.b))
            if t in ir.FLOAT_DTYPES:
                if e.op == "!=":
                    return b.fcmp_unordered("!=", x, y)
                return b.fcmp_ordered(e.op, x, y)
            if t == ir.BOOL:
                return b.icmp_unsigned(e.op, x, y)
            return b.icmp_signed(e.op, x, y)
        if isinstance(e, ir.Not):
            v = self.to_bool(e.a)
            return b.xor(v, self.const_like(v.type, 1))
        if isinstance(e, ir.Select):
            return self.select(e)
        if isinstance(e, ir.Cast):
            return self.cast(e)
        if isinstance(e, ir.Call):
            return self.call(e)
        if isinstance(e, ir.Reduce):
            return self.reduce(e)
        raise CodegenError(f"cannot generate code for expression {e!r}")

    def to_bool(self, e: ir.Expr) -> ll.Value:
        v = self.expr(e)
        t = self.dtype(e)
        if t == ir.BOOL:
            return v
        if t == ir.INT:
            return self.b.icmp_signed("!=", v, self.const_like(v.type, 0))
        return self.b.fcmp_unordered("!=", v, self.const_like(v.type, 0.0))

    def binop(self, e: ir.BinOp) -> ll.Value:
        b = self.b
        if e.op in ("and", "or"):
            x = self.to_bool(e.a)
            if not _needs_branch(e.b) or _is_vec(x):
                x, y = self.match(x, self.to_bool(e.b))
                return b.and_(x, y) if e.op == "and" else b.or_(x, y)
            start = b.block
            rhs_bb, done = self.block("sc_rhs"), self.block("sc_done")
            if e.op == "and":
                b.cbranch(x, rhs_bb, done)
            else:
                b.cbranch(x, done, rhs_bb)
            b.position_at_end(rhs_bb)
            y = self.to_bool(e.b)
            if _is_vec(y):
                raise CodegenError(f"internal: uniform short-circuit with a varying right side in {e}")
            rhs_end = b.block
            b.branch(done)
            b.position_at_end(done)
            phi = b.phi(I1)
            phi.add_incoming(ll.Constant(I1, 0 if e.op == "and" else 1), start)
            phi.add_incoming(y, rhs_end)
            return phi
        if e.op in ("//", "%"):
            d = ir.const_int(e.b)
            if d is not None and d > 0 and _divisor(e.a) % d == 0 and self.dtype(e.a) == ir.INT:
                q = _exact_div(e.a, d) if e.op == "//" else ir.Const(0)
                if q is not None:
                    return self.expr(q)  # an exact division (a packed weight's row block)
        t = self.dtype(e.a)
        x, y = self.match(self.expr(e.a), self.expr(e.b))
        w = x.type.count if _is_vec(x) else 0
        if t in ir.FLOAT_DTYPES:
            if e.op == "+":
                return b.fadd(x, y)
            if e.op == "-":
                return b.fsub(x, y)
            if e.op == "*":
                return b.fmul(x, y)
            if e.op == "/":
                return b.fdiv(x, y)
            if e.op in ("min", "max"):
                # llvm.minimum/maximum propagate NaN (as NumPy does); minnum/maxnum drop it
                return b.call(self.mod.intrinsic("minimum" if e.op == "min" else "maximum", t, 2, w), [x, y])
            raise CodegenError(f"float operands for {e.op!r} in {e}")
        if t == ir.BOOL:
            raise CodegenError(f"bool operands for {e.op!r} in {e}; use and/or")
        if e.op in ("+", "-", "*", "/", "//", "%"):
            return self.int_op({"+": "add", "-": "sub", "*": "mul", "/": "sdiv", "//": "sdiv", "%": "srem"}[e.op], x, y)
        if e.op in ("min", "max"):
            c = b.icmp_signed("<" if e.op == "min" else ">", x, y)
            return b.select(c, x, y)
        raise CodegenError(f"unknown int operator {e.op!r}")

    def select(self, e: ir.Select) -> ll.Value:
        b = self.b
        c = self.to_bool(e.cond)
        if (not _needs_branch(e.a) and not _needs_branch(e.b)) or _is_vec(c):
            c, x, y = self.match(c, self.expr(e.a), self.expr(e.b))
            return b.select(c, x, y)
        then_bb, else_bb, done = self.block("sel_then"), self.block("sel_else"), self.block("sel_done")
        b.cbranch(c, then_bb, else_bb)
        vary = self.varying(e.a) or self.varying(e.b)

        def arm(block: ll.Block, side: ir.Expr) -> tuple[ll.Value, ll.Block]:
            """``side`` evaluated in ``block`` (a vector when either side varies), and the block it ends in."""
            b.position_at_end(block)
            value = self.expr(side)
            if vary and not _is_vec(value):
                value = self.splat(value, self.vec.width)
            end = b.block
            b.branch(done)
            return value, end

        x, then_end = arm(then_bb, e.a)
        y, else_end = arm(else_bb, e.b)
        b.position_at_end(done)
        phi = b.phi(x.type)
        phi.add_incoming(x, then_end)
        phi.add_incoming(y, else_end)
        return phi

    def cast(self, e: ir.Cast) -> ll.Value:
        b = self.b
        src, dst = self.dtype(e.a), e.dtype
        v = self.expr(e.a)
        if src == dst:
            return v
        if dst == ir.BOOL:
            return self.to_bool(e.a)

        def ty(name: str) -> ll.Type:
            return ll.VectorType(LTYPE[name], v.type.count) if _is_vec(v) else LTYPE[name]

        if src == ir.BOOL:
            return b.zext(v, ty(ir.INT)) if dst == ir.INT else b.uitofp(v, ty(dst))
        if src == ir.INT:
            return b.sitofp(v, ty(dst))
        if dst == ir.INT:
            return b.fptosi(v, ty(ir.INT))
        return b.fpext(v, ty(dst)) if dst == "float64" else b.fptrunc(v, ty(dst))

    def exp(self, x: ll.Value, t: str) -> ll.Value:
        if t == "float32":
            if _width(x) and EXP_OUTLINED and (self.compact or self.private):
                return self.b.call(self.mod.exp_f32_fn(x.type), [x])
            return self.exp_f32(x)
        return self.b.call(self.mod.intrinsic("exp", t, 1, _width(x)), [x])

    def exp_f32(self, x: ll.Value) -> ll.Value:
        """exp for float32 scalars or vectors, inline so it vectorizes (no libm call):
        x = n ln2 + r, |r| <= ln2/2; e^r by a degree-7 Taylor polynomial (rel. error < 1e-8);
        2^n from the exponent bits. Clamped to [-87.3, 88.0] (so 0 and +inf come out as
        ~1e-38 and ~1.6e38); NaN propagates (comparisons are false for NaN)."""
        b = self.b
        c = lambda v: self.const_like(x.type, v)  # noqa: E731
        x = b.select(b.fcmp_ordered(">", x, c(88.0)), c(88.0), x)
        x = b.select(b.fcmp_ordered("<", x, c(-87.3)), c(-87.3), x)
        w = _width(x)
        n = b.call(self.mod.intrinsic("rint", "float32", 1, w), [b.fmul(x, c(1.4426950408889634))])
        r = b.call(self.mod.intrinsic("fma", "float32", 3, w), [n, c(-0.693145751953125), x])
        r = b.call(self.mod.intrinsic("fma", "float32", 3, w), [n, c(-1.428606765330187e-06), r])
        p = c(1.0 / 5040)
        for k in (720, 120, 24, 6, 2, 1, 1):
            p = b.call(self.mod.intrinsic("fma", "float32", 3, w), [p, r, c(1.0 / k)])
        ity = ll.VectorType(I32, w) if w else I32
        ni = b.fptosi(n, ity)
        bits = b.shl(b.add(ni, self.const_like(ity, 127)), self.const_like(ity, 23))
        scale = b.bitcast(bits, x.type)
        return b.fmul(p, scale)

    def call(self, e: ir.Call) -> ll.Value:
        b = self.b
        t = self.dtype(e.args[0])
        args = self.match(*[self.expr(a) for a in e.args])
        x = args[0]
        w = _width(x)
        if t == ir.INT:
            if e.fn == "abs":
                neg = b.sub(self.const_like(x.type, 0), x)
                return b.select(b.icmp_signed("<", x, self.const_like(x.type, 0)), neg, x)
            raise CodegenError(f"{e.fn} of an int32 value is not supported; cast it to a float type first")
        if t == ir.BOOL:
            raise CodegenError(f"{e.fn} of a bool value is not supported")
        one = self.const_like(x.type, 1.0)
        two = self.const_like(x.type, 2.0)
        if e.fn == "sigmoid":
            ex = self.exp(b.fneg(x), t)
            return b.fdiv(one, b.fadd(one, ex))
        if e.fn == "tanh":
            ex = self.exp(b.fmul(x, two), t)
            return b.fsub(one, b.fdiv(two, b.fadd(ex, one)))
        if e.fn == "exp":
            return self.exp(x, t)
        if e.fn == "abs":
            return b.call(self.mod.intrinsic("fabs", t, 1, w), [x])
        if e.fn in ("log", "sqrt"):
            return b.call(self.mod.intrinsic(e.fn, t, 1, w), [x])
        if e.fn == "fma":
            return b.call(self.mod.intrinsic("fma", t, 3, w), args)
        raise CodegenError(f"unknown intrinsic {e.fn!r}")
