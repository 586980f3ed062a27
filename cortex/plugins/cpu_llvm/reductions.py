"""Reductions of the ``llvm`` code generator: ``Reduce`` -> loops with phi accumulators.

Pipeline position: inside the ``llvm`` renderer, a part of the kernel emitter
(:class:`~cortex.plugins.cpu_llvm.kernel._KernelGen` inherits it). A reduction becomes a loop
whose accumulators are phis (four partial sums for vector dot products), with a guard select
hoisted out (two loops); a scalar float sum along a contiguous row runs on vectors
(``lane_reduce_loop``). Code in a loop annotated "cold" is compact: one partial sum, no
select hoisting, ``llvm.loop.unroll.disable``.
"""

from __future__ import annotations

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm.ir_queries import _contains, _needs_branch, _uses_var, _walk
from cortex.plugins.cpu_llvm.lanes import _VecCtx
from cortex.plugins.cpu_llvm.llvm_types import FAST_REDUCE, I32, LTYPE, SIZEOF, CodegenError, _is_vec, _width

LANE_REDUCE = True  # scalar float sums along a contiguous row run on vectors (lane_reduce_loop)


class _Reductions:
    """Reduction methods of the kernel emitter (a mixin of ``_KernelGen``)."""

    def reduce(self, e: ir.Reduce) -> ll.Value:
        # Hoist a Select whose condition does not depend on the reduction variable: two loops.
        for n in ([] if self.compact else _walk(e.body)):
            if isinstance(n, ir.Select) and not _uses_var(n.cond, e.var) and not _contains(
                    n.cond, lambda m: isinstance(m, ir.Reduce)) and self._bound(n.cond) and not self.varying(n.cond):
                mapping_a = ir.transform(e.body, lambda m, n=n: n.a if m == n else None)
                mapping_b = ir.transform(e.body, lambda m, n=n: n.b if m == n else None)
                return self.select(ir.Select(n.cond, ir.Reduce(e.op, e.var, e.start, e.stop, mapping_a),
                                             ir.Reduce(e.op, e.var, e.start, e.stop, mapping_b)))
        width = self._lane_reduce_width(e)
        if width:
            return self.lane_reduce_loop(e, width)
        return self.reduce_loop(e)

    def _lane_reduce_width(self, e: ir.Reduce) -> int:
        """Lanes for running a scalar float sum along its own variable (see
        :meth:`lane_reduce_loop`), or 0: outside vector code, a constant trip count that is a
        multiple of the SIMD width, a body with a contiguous load along the variable (a row
        of node data: ``M[child, j, k]``), no nested reduction and nothing that needs masking."""
        if not LANE_REDUCE or self.vec is not None or self.compact or e.op != "sum":
            return 0
        dt = self.dtype(e.body)
        if dt not in ir.FLOAT_DTYPES or not self.mod.vector_bits:
            return 0
        w = self.mod.vector_bits // (8 * SIZEOF[dt])
        lo, hi = ir.const_int(e.start), ir.const_int(e.stop)
        if w < 2 or lo is None or hi is None or hi - lo < w or (hi - lo) % w:
            return 0
        k = ir.Var(e.var)
        if not any(isinstance(n, ir.Load) and n.index and n.index[-1] == k for n in _walk(e.body)):
            return 0
        for n in _walk(e.body):
            if isinstance(n, (ir.Reduce, ir.Call)) and n is not e:
                return 0
            if isinstance(n, ir.Select) and _uses_var(n.cond, e.var) and (_needs_branch(n.a) or _needs_branch(n.b)):
                return 0
            if isinstance(n, ir.BinOp) and n.op in ("and", "or") and _needs_branch(n.b) and _uses_var(n, e.var):
                return 0
        return w

    def lane_reduce_loop(self, e: ir.Reduce, width: int) -> ll.Value:
        """``sum(k in lo..hi: body)`` with ``width`` values of ``k`` per step, as vector code
        (``k = base + lane``: a load whose last index is ``k`` is one vector load), then one
        horizontal sum. A scalar dot product along a row (MV-RNN's ``M[child, j, :] . h``,
        where lanes across rows would be a whole row apart) costs ``trip / width`` vector FMAs
        instead of a ``trip``-long dependent chain of scalar ones."""
        b = self.b
        dt = self.dtype(e.body)
        vt = ll.VectorType(LTYPE[dt], width)
        lo, hi = ir.const_int(e.start), ir.const_int(e.stop)
        steps = (hi - lo) // width
        parts = 2 if steps % 2 == 0 else 1
        base, lane = f"{e.var}_base", f"{e.var}_lane"
        body = ir.substitute(e.body, {e.var: ir.BinOp("+", ir.Var(base), ir.Var(lane))})
        pre = b.block
        body_bb, exit_bb = self.block(f"lred_{e.var}"), self.block(f"lred_{e.var}_end")
        b.branch(body_bb)
        b.position_at_end(body_bb)
        i = b.phi(I32, name=e.var)
        i.add_incoming(ll.Constant(I32, lo), pre)
        init = self.const_like(vt, 0.0)
        accs = [b.phi(vt) for _ in range(parts)]
        for a in accs:
            a.add_incoming(init, pre)
        nxts = []
        self.vec = _VecCtx(lane, width, 0, {lane}, {})
        self.env[lane] = (ll.Constant(ll.VectorType(I32, width), list(range(width))), ir.INT)
        try:
            for q in range(parts):
                iq = i if q == 0 else b.add(i, ll.Constant(I32, q * width), flags=["nsw"])
                self.env[base] = (iq, ir.INT)
                try:
                    v = self.expr(body)
                finally:
                    del self.env[base]
                if not _is_vec(v):
                    v = self.splat(v, width)
                nxts.append(self.combine("sum", dt, accs[q], v))
        finally:
            del self.env[lane]
            self.vec = None
        i_next = b.add(i, ll.Constant(I32, parts * width), flags=["nsw"])
        end = b.block
        latch = b.cbranch(b.icmp_signed("<", i_next, ll.Constant(I32, hi)), body_bb, exit_bb)
        i.add_incoming(i_next, end)
        for a, nxt in zip(accs, nxts):
            a.add_incoming(nxt, end)
        self._loop_md(latch, "compact", None)
        b.position_at_end(exit_bb)
        out = nxts[0]
        for o in nxts[1:]:
            out = self.combine("sum", dt, out, o)
        w = width
        while w > 1:  # horizontal sum: halve the vector
            h = w // 2
            lo_half = b.shuffle_vector(out, out, ll.Constant(ll.VectorType(I32, h), list(range(h))))
            hi_half = b.shuffle_vector(out, out, ll.Constant(ll.VectorType(I32, h), list(range(h, w))))
            out = b.fadd(lo_half, hi_half)
            out.flags.extend(FAST_REDUCE)
            w = h
        return b.extract_element(out, ll.Constant(I32, 0))

    def _bound(self, cond: ir.Expr) -> bool:
        """Every variable of ``cond`` is bound here (not a let inside the reduce body)."""
        return all(n.name in self.env for n in _walk(cond) if isinstance(n, ir.Var))

    def combine(self, op: str, dt: str, acc: ll.Value, v: ll.Value) -> ll.Value:
        b = self.b
        acc, v = self.match(acc, v)
        if op == "max":
            if dt in ir.FLOAT_DTYPES:
                return b.call(self.mod.intrinsic("maximum", dt, 2, _width(acc)), [acc, v])  # NaN wins
            return b.select(b.icmp_signed(">", acc, v), acc, v)
        if dt in ir.FLOAT_DTYPES:
            nxt = b.fadd(acc, v)
            nxt.flags.extend(FAST_REDUCE)
            if isinstance(v, ll.Instruction) and v.opname == "fmul":
                v.flags.extend(FAST_REDUCE)
            return nxt
        return b.add(acc, v)

    def accumulate(self, op: str, dt: str, acc: ll.Value, body: ir.Expr) -> ll.Value:
        """``combine(acc, body)``; a float product summed into a vector accumulator becomes one
        ``llvm.fma`` (what LLVM would contract the fmul + fadd into anyway: half the IR of a
        jammed reduction loop)."""
        if op == "sum" and dt in ir.FLOAT_DTYPES and _is_vec(acc) and isinstance(body, ir.BinOp) \
                and body.op == "*":
            x, y = self.expr(body.a), self.expr(body.b)
            acc, x, y = self.match(acc, x, y)
            return self.b.call(self.mod.intrinsic("fma", dt, 3, _width(acc)), [x, y, acc])
        return self.combine(op, dt, acc, self.expr(body))

    def reduce_loop(self, e: ir.Reduce) -> ll.Value:
        b = self.b
        dt = self.dtype(e.body)
        if dt == ir.BOOL:
            raise CodegenError(f"reduction {e.op} over bool values is not supported")
        if e.op == "mean" and dt not in ir.FLOAT_DTYPES:
            raise CodegenError("mean over int32 values is not supported; cast to a float type")
        ty = LTYPE[dt]
        if self.varying(e.body):
            ty = ll.VectorType(ty, self.vec.width)
        if self.varying(e.start) or self.varying(e.stop):
            raise CodegenError(f"internal: reduction {e.var} with a lane-dependent range")
        lo, hi = self.expr(e.start), self.expr(e.stop)
        if e.op == "max":
            init = self.const_like(ty, float("-inf") if dt in ir.FLOAT_DTYPES else -2**31)
        else:
            init = self.const_like(ty, 0.0 if dt in ir.FLOAT_DTYPES else 0)
        # several partial sums hide the FMA latency of vector dot products
        trip = None
        if ir.const_int(e.start) is not None and ir.const_int(e.stop) is not None:
            trip = ir.const_int(e.stop) - ir.const_int(e.start)
        parts = 4 if (isinstance(ty, ll.VectorType) and e.op == "sum" and trip and trip % 4 == 0 and trip >= 8
                      and not self.compact) else 1
        pre = b.block
        body_bb, exit_bb = self.block(f"red_{e.var}"), self.block(f"red_{e.var}_end")
        b.cbranch(b.icmp_signed("<", lo, hi), body_bb, exit_bb)
        b.position_at_end(body_bb)
        i = b.phi(I32, name=e.var)
        accs = [b.phi(ty, name=f"acc_{e.var}") for _ in range(parts)]
        i.add_incoming(lo, pre)
        for a in accs:
            a.add_incoming(init, pre)
        nxts = []
        for q in range(parts):
            iq = i if q == 0 else b.add(i, ll.Constant(I32, q), flags=["nsw"])
            self.env[e.var] = (iq, ir.INT)
            try:
                v = self.expr(e.body)
            finally:
                del self.env[e.var]
            nxts.append(self.combine(e.op, dt, accs[q], v))
        i_next = b.add(i, ll.Constant(I32, parts), flags=["nsw"])
        end = b.block
        latch = b.cbranch(b.icmp_signed("<", i_next, hi), body_bb, exit_bb)
        i.add_incoming(i_next, end)
        for a, nxt in zip(accs, nxts):
            a.add_incoming(nxt, end)
        self._loop_md(latch, "compact" if self.compact else "serial", None)
        b.position_at_end(exit_bb)
        outs = []
        for nxt in nxts:
            out = b.phi(ty)
            out.add_incoming(init, pre)
            out.add_incoming(nxt, end)
            outs.append(out)
        out = outs[0]
        for o in outs[1:]:
            out = self.combine(e.op, dt, out, o)
        if e.op == "mean":
            n = b.sub(hi, lo)
            cnt = b.sitofp(b.select(b.icmp_signed(">", n, ll.Constant(I32, 0)), n, ll.Constant(I32, 1)), LTYPE[dt])
            out, cnt = self.match(out, cnt)
            out = b.fdiv(out, cnt)
        return out
