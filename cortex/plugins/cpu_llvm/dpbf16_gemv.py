"""Jammed bfloat16 GEMVs on the AVX512-BF16 dot product: the ``llvm`` generator's ``bf16_dot="dpbf16"`` path.

Pipeline position: inside the ``llvm`` renderer, a part of the kernel emitter
(:class:`~cortex.plugins.cpu_llvm.kernel._KernelGen` inherits it); used only when the program's
launch setting ``bf16_dot`` is ``"dpbf16"`` (``weights="bfloat16"``, offered where the CPU the
code is for has ``avx512bf16``: :func:`cortex.plugins.cpu_llvm.jit.cpu_has`; the compiler
refuses such a program for any other CPU before LLVM sees it).

``vdpbf16ps`` multiplies 32 bfloat16 pairs and adds each lane's two products into one float32
lane: ``acc[j] += a[2j] b[2j] + a[2j + 1] b[2j + 1]``. The ``bfloat16_pairs`` layout is already
that operand: a 64-byte row of a weight block holds ``W[k, j]`` and ``W[k + 1, j]`` in lane
``j``. So for a jammed GEMV (:func:`.jammed_gemv.match_gemv`, any number of node rows, an even
reduction) :meth:`_Dpbf16Gemv.dpbf16_gemv` emits, instead of the FMAs:

* the group's activation rows rounded once to bfloat16 into a ``[rows, K]`` array on the stack
  (:meth:`.jammed_gemv._RoundedRows.stage_rows`);
* a loop over the ``K / 2`` pairs of reduction rows: per node row one 32-bit broadcast of its
  pair ``(X[k], X[k + 1])``, per weight block one 64-byte load, per update one ``vdpbf16ps``
  into the accumulator the FMAs would have updated (kept in a register across the loop).

Per pair of reduction rows that is ``rows + blocks`` loads and ``rows x blocks`` instructions,
where the FMA code of ``bf16_dot="pairs"`` takes ``2 rows`` broadcasts, ``blocks`` loads, ``2
blocks`` unpacking instructions and ``2 rows x blocks`` FMAs. What it changes in the results:
the activations are rounded to bfloat16 (a relative ``2**-9`` each) and the two products of a
pair are summed before the accumulator, as on AMX tiles; the products themselves are exact.
"""

from __future__ import annotations

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm.jammed_gemv import LANES, Gemv, bfloat_vector, match_gemv
from cortex.plugins.cpu_llvm.lanes import _VecCtx
from cortex.plugins.cpu_llvm.llvm_types import F32, I16, I32, I64

DOT = "llvm.x86.avx512bf16.dpbf16ps.512"
PAIRS = bfloat_vector(2 * LANES)  # one operand of DOT: 16 lanes of two bfloat16 each


class _Dpbf16Gemv:
    """AVX512-BF16 code for a jammed reduction (a mixin of ``_KernelGen``)."""

    def dpbf16_loop(self, s: ir.For) -> bool:
        """Emit ``s`` on ``vdpbf16ps`` when the program asks for it and ``s`` is a jammed GEMV
        (True); else nothing (False: the FMA code)."""
        if self.p.launch_setting("bf16_dot") != "dpbf16" or self.vec is not None or self.compact:
            return False
        g = match_gemv(s, self.p.buffer, self.allocs, min_rows=1, max_rows=None, depth_multiple=2)
        if g is None:
            return False
        self.dpbf16_gemv(g)
        return True

    def dpbf16_gemv(self, g: Gemv) -> None:
        b = self.b
        stage = self.scratch_array(I16, len(g.rows) * g.depth)
        self.stage_rows(g, stage)
        weights = self.block_starts(g)
        vf = ll.VectorType(F32, LANES)
        dot = self.mod.decl(DOT, vf, [vf, PAIRS, PAIRS])
        lanes = ll.Constant(ll.VectorType(I32, LANES), list(range(LANES)))
        self.vec = _VecCtx(g.lane, LANES, 0, {g.lane}, {})
        self.env[g.lane] = (lanes, ir.INT)
        try:
            index = [(ir.BinOp("+", base, ir.Var(g.lane)),) for _, base, _, _ in g.updates]
            before = [self.load(acc, at) for (acc, _, _, _), at in zip(g.updates, index)]
            kp, pre = self.open_counted_loop("dpbf16")
            accs = []
            for v in before:
                accs.append(b.phi(vf))
                accs[-1].add_incoming(v, pre)
            word = b.mul(kp, ll.Constant(I64, 2))  # the pair's first word in a staged row
            xs = []
            for r in range(len(g.rows)):
                at = b.gep(stage, [b.add(word, ll.Constant(I64, r * g.depth))], inbounds=True, source_etype=I16)
                pair = b.load(b.bitcast(at, I32.as_pointer()), typ=I32, align=4)
                xs.append(b.bitcast(self.splat(pair, LANES), PAIRS))
            w_off = b.mul(kp, ll.Constant(I64, 2 * LANES))  # a pair row: 16 words of two halves
            ws = []
            for w in weights:
                at = b.gep(w, [w_off], inbounds=True, source_etype=I16)
                ws.append(b.bitcast(b.load(b.bitcast(at, ll.VectorType(I32, LANES).as_pointer()),
                                           typ=ll.VectorType(I32, LANES), align=4), PAIRS))
            after = [b.call(dot, [a, ws[blk], xs[row]]) for a, (_, _, blk, row) in zip(accs, g.updates)]
            end = self.close_counted_loop(kp, g.depth // 2)
            for phi, v in zip(accs, after):
                phi.add_incoming(v, end)
            for (acc, _, _, _), at, v in zip(g.updates, index, after):
                self.store(acc, at, v)
        finally:
            del self.env[g.lane]
            self.vec = None
