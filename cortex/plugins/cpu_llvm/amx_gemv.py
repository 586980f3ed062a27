"""Jammed bfloat16 GEMVs on AMX tiles: the ``llvm`` generator's ``bf16_dot="amx"`` path.

Pipeline position: inside the ``llvm`` renderer, a part of the kernel emitter
(:class:`~cortex.plugins.cpu_llvm.kernel._KernelGen` inherits it); used only when the program's
launch setting ``bf16_dot`` is ``"amx"`` (``weights="bfloat16"``, chosen where
:func:`cortex.plugins.cpu_llvm.amx.amx_available` says the process may run tile instructions).

For a jammed GEMV over a ``bfloat16_pairs`` matrix (:func:`.jammed_gemv.match_gemv`) of
``4 <= M <= 16`` node rows (a padded group counts its padding) over a reduction a multiple of 32
deep, :meth:`_AmxGemv.amx_gemv` emits, instead of the FMAs:

* the group's activation rows ``X[row, k0 .. k0 + K)`` rounded once to bfloat16 into a
  ``[16, K]`` staging array on the stack (the A tile rows, stride ``2 K`` bytes; rows from ``M``
  are not read back; :meth:`.jammed_gemv._RoundedRows.stage_rows`);
* per up to six weight blocks, a call of a ``noinline`` tile function (:meth:`_amx_dot_fn`):
  a loop over ``K / 32`` chunks, one A tile load, and per block one B tile load (16 pair-rows
  of 64 bytes: a contiguous 1 KB of the pairs layout, ``[rows / 16, K / 2, 16, 2]``) and one
  ``tdpbf16ps`` (a ``16 x 16 x 32`` product) into the block's float32 C tile, stored at the end;
* the C rows added to the accumulators the FMAs would have updated (``acc[c + j] +=
  C[block, row, j]``), so the code after the loop is unchanged.

Anything else (fewer than 4 rows or more than 16, a reduction not a multiple of 32 deep, a loop
the matcher does not take) is left to the FMA code.
"""

from __future__ import annotations

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm.amx import require_amx
from cortex.plugins.cpu_llvm.jammed_gemv import LANES, Gemv, _NamedType, match_gemv
from cortex.plugins.cpu_llvm.lanes import _VecCtx
from cortex.plugins.cpu_llvm.llvm_types import F32, I16, I32, I64, PTR, VOID

MAX_ROWS = 16  # rows of an A / C tile
#: the fewest node rows (padding included) a GEMV runs on tiles: every tile product takes 16
#: rows' time and the rows are staged per block of outputs, so a group of 1 or 2 nodes is as fast
#: or faster on the FMAs (a TreeLSTM h256's levels: docs/llvm.md, "AMX tiles")
MIN_ROWS = 4
MAX_C_TILES = 6  # of the eight tile registers: six C tiles, the A tile and a B tile
K_TILE = 32  # bfloat16 products per tile row (64 bytes)

AMX = _NamedType("x86_amx")


class _AmxGemv:
    """AMX tile code for a jammed reduction (a mixin of ``_KernelGen``)."""

    def amx_loop(self, s: ir.For) -> bool:
        """Emit ``s`` on AMX tiles when the program asks for it and ``s`` is a jammed GEMV
        (True); else nothing (False: the FMA code)."""
        if self.p.launch_setting("bf16_dot") != "amx" or self.vec is not None or self.compact:
            return False
        g = match_gemv(s, self.p.buffer, self.allocs, min_rows=MIN_ROWS, max_rows=MAX_ROWS,
                       depth_multiple=K_TILE)
        if g is None:
            return False
        require_amx("bf16_dot='amx'")
        self.amx_gemv(g)
        return True

    def amx_gemv(self, g: Gemv) -> None:
        b = self.b
        stage = self.scratch_array(I16, MAX_ROWS * g.depth)
        self.stage_rows(g, stage)
        weights = self.block_starts(g)
        cbuf = self.scratch_array(F32, min(len(g.blocks), MAX_C_TILES) * MAX_ROWS * LANES)
        i16p, f32p = I16.as_pointer(), F32.as_pointer()
        for first in range(0, len(g.blocks), MAX_C_TILES):
            chunk = weights[first:first + MAX_C_TILES]
            fn = self._amx_dot_fn(len(chunk), g.depth)
            b.call(fn, [b.bitcast(stage, i16p), b.bitcast(cbuf, f32p)] + [b.bitcast(w, i16p) for w in chunk])
            self._add_products(g, cbuf, first, len(chunk))

    def _amx_dot_fn(self, tiles: int, depth: int) -> ll.Function:
        """``cx_amx_dot_<tiles>x<depth>(stage, out, w_0, ..)``: ``out[t] = stage @ W_t`` for
        ``tiles`` blocks (``stage``: ``[16, depth]`` bfloat16; ``W_t``: ``depth / 2`` pair rows of
        16 words; ``out``: ``[tiles, 16, 16]`` float32), one ``noinline`` function per shape.

        The tile state lives only inside it: LLVM configures the tiles at its entry and releases
        them at its return, so a thread that waits at a barrier or is switched out between two
        GEMVs holds no tile data (8 KB more to save and restore). Every tile is 16 rows of 64
        bytes: LLVM fixes one shape per tile register in a function, and one shape needs no
        more than the eight registers (``tiles`` C tiles, the A tile and a B tile)."""
        name = f"cx_amx_dot_{tiles}x{depth}"
        if name in self.mod.fns:
            return self.mod.fns[name]
        i16p, f32p = I16.as_pointer(), F32.as_pointer()
        fn = ll.Function(self.mod.m, ll.FunctionType(VOID, [i16p, f32p] + [i16p] * tiles), name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        fn.attributes.add("nounwind")
        self.mod.fns[name] = fn
        decl = self.mod.decl
        load = decl("llvm.x86.tileloadd64.internal", AMX, [I16, I16, PTR, I64])
        dot = decl("llvm.x86.tdpbf16ps.internal", AMX, [I16, I16, I16, AMX, AMX, AMX])
        stored = decl("llvm.x86.tilestored64.internal", VOID, [I16, I16, PTR, I64, AMX])
        zero = decl("llvm.x86.tilezero.internal", AMX, [I16, I16])
        rows, colsb = ll.Constant(I16, MAX_ROWS), ll.Constant(I16, 2 * K_TILE)
        i64 = lambda v: ll.Constant(I64, v)
        stage, out, weights = fn.args[0], fn.args[1], fn.args[2:]
        entry = fn.append_basic_block("entry")
        body_bb, done = fn.append_basic_block("k"), fn.append_basic_block("done")
        b = ll.IRBuilder(entry)
        zeros = [b.call(zero, [rows, colsb]) for _ in weights]
        b.branch(body_bb)
        b = ll.IRBuilder(body_bb)
        kb = b.phi(I64, name="kb")
        kb.add_incoming(i64(0), entry)
        phis = []
        for z in zeros:
            phis.append(b.phi(AMX))
            phis[-1].add_incoming(z, entry)
        a_ptr = b.gep(stage, [b.mul(kb, i64(K_TILE))], inbounds=True, source_etype=I16)
        a = b.call(load, [rows, colsb, a_ptr, i64(2 * depth)])
        w_off = b.mul(kb, i64(K_TILE * LANES))  # 16 pair rows of 16 words: 1 KB
        tiles_next = []
        for c, w in zip(phis, weights):
            tb = b.call(load, [rows, colsb, b.gep(w, [w_off], inbounds=True, source_etype=I16), i64(64)])
            tiles_next.append(b.call(dot, [rows, colsb, colsb, c, a, tb]))
        nxt = b.add(kb, i64(1))
        b.cbranch(b.icmp_unsigned("<", nxt, i64(depth // K_TILE)), body_bb, done)
        kb.add_incoming(nxt, body_bb)
        for p_, t in zip(phis, tiles_next):
            p_.add_incoming(t, body_bb)
        b = ll.IRBuilder(done)
        for q, t in enumerate(tiles_next):
            at = b.gep(out, [i64(q * MAX_ROWS * LANES)], inbounds=True, source_etype=F32)
            b.call(stored, [rows, colsb, at, i64(4 * LANES), t])
        b.ret_void()
        return fn

    def _add_products(self, g: Gemv, cbuf: ll.Value, first: int, count: int) -> None:
        """``acc[base + j] += C[block, row, j]`` for the updates of blocks ``first ..
        first + count`` (C rows in ``cbuf``: ``[count, 16, 16]`` float32)."""
        b = self.b
        lanes = ll.Constant(ll.VectorType(I32, LANES), list(range(LANES)))
        self.vec = _VecCtx(g.lane, LANES, 0, {g.lane}, {})
        self.env[g.lane] = (lanes, ir.INT)
        try:
            for acc, base, blk, row in g.updates:
                if not first <= blk < first + count:
                    continue
                at = b.gep(cbuf, [ll.Constant(I64, ((blk - first) * MAX_ROWS + row) * LANES)], inbounds=True,
                           source_etype=F32)
                prod = b.load(at, typ=ll.VectorType(F32, LANES), align=64)
                index = (ir.BinOp("+", base, ir.Var(g.lane)),)
                total = b.fadd(self.load(acc, index), prod)
                self.store(acc, index, total)
        finally:
            del self.env[g.lane]
            self.vec = None

