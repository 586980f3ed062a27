"""Jammed bfloat16 GEMVs on AMX tiles: the ``llvm`` generator's ``bf16_dot="amx"`` path.

Pipeline position: inside the ``llvm`` renderer, a part of the kernel emitter
(:class:`~cortex.plugins.cpu_llvm.kernel._KernelGen` inherits it); used only when the program's
launch setting ``bf16_dot`` is ``"amx"`` (``weights="bfloat16"``, chosen where
:func:`cortex.plugins.cpu_llvm.amx.amx_available` says the process may run tile instructions).

The node jam writes a group's reduction over a ``bfloat16_pairs`` matrix as a serial loop over
``k`` around a 16-lane vectorized loop over the outputs ``j`` whose body is only
``acc[c + j] = fma(W[blk, k, j], X[row, k], acc[c + j])`` for several weight blocks ``blk`` and
node rows ``row`` (``k`` unrolled ``U`` times: ``k = U kn + u``). :func:`match_gemv` recognizes
exactly that; :meth:`_AmxGemv.amx_gemv` then emits, instead of the FMAs:

* the group's ``4 <= M <= 16`` activation rows ``X[row, k0 .. k0 + K)`` rounded once to bfloat16
  (``vcvtneps2bf16``) into a ``[16, K]`` staging array on the stack (the A tile rows, stride
  ``2 K`` bytes; rows from ``M`` are not read back);
* per up to six weight blocks, a call of a ``noinline`` tile function (:meth:`_amx_dot_fn`):
  a loop over ``K / 32`` chunks, one A tile load, and per block one B tile load (16 pair-rows
  of 64 bytes: a contiguous 1 KB of the pairs layout, ``[rows / 16, K / 2, 16, 2]``) and one
  ``tdpbf16ps`` (a ``16 x 16 x 32`` product) into the block's float32 C tile, stored at the end;
* the C rows added to the accumulators the FMAs would have updated (``acc[c + j] +=
  C[block, row, j]``), so the code after the loop is unchanged.

Anything else (a guard in the body, a lane-dependent row, fewer than 4 rows or more than 16, a reduction
not a multiple of 32 deep) is left to the FMA code.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.core.loopir.verify import affine
from cortex.plugins.cpu_llvm.amx import require_amx
from cortex.plugins.cpu_llvm.ir_queries import _var_names
from cortex.plugins.cpu_llvm.lanes import _VecCtx
from cortex.plugins.cpu_llvm.llvm_types import F32, I1, I8, I16, I32, I64, PTR, VOID

LANES = 16  # outputs per C tile row (16 float32: 64 bytes), the pairs layout's block width
MAX_ROWS = 16  # rows of an A / C tile
#: the fewest node rows (padding included) a GEMV runs on tiles: every tile product takes 16
#: rows' time and the rows are staged per block of outputs, so a group of 1 or 2 nodes is as fast
#: or faster on the FMAs (a TreeLSTM h256's levels: docs/llvm.md, "AMX tiles")
MIN_ROWS = 4
MAX_C_TILES = 6  # of the eight tile registers: six C tiles, the A tile and a B tile
K_TILE = 32  # bfloat16 products per tile row (64 bytes)


class _NamedType(ll.Type):
    """An LLVM type llvmlite has no class for, written by name (``x86_amx``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _to_string(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NamedType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


AMX = _NamedType("x86_amx")
BF16X16 = _NamedType(f"<{LANES} x bfloat>")

Ref = tuple[str, tuple[ir.Expr, ...]]  # (buffer, the indices before the reduction's)


@dataclass(frozen=True)
class Gemv:
    """A recognized jammed reduction: ``acc[base + j] += sum_k W_b[k, j] X_r[k]`` over
    ``k in [k0, k0 + depth)`` for each update ``(acc, base, b, r)``."""

    lane: str
    k0: int
    depth: int
    rows: tuple[Ref, ...]  # X_r: a float32 buffer and its leading indices (the k index last)
    blocks: tuple[Ref, ...]  # W_b: a bfloat16_pairs buffer and its leading indices ([.., k, j] last)
    updates: tuple[tuple[str, ir.Expr, int, int], ...]


def _in_k(e: ir.Expr, var: str) -> tuple[int, int] | None:
    """``(a, b)`` with ``e == a * var + b`` (constants), or None (the verifier's affine forms)."""
    form = affine(e, {var})
    return None if form is None else (dict(form.terms).get(var, 0), form.const)


def _lane_base(e: ir.Expr, lane: str) -> ir.Expr | None:
    """``base`` where ``e`` is ``lane``, ``base + lane`` or ``lane + base``; else None."""
    if isinstance(e, ir.Var) and e.name == lane:
        return ir.Const(0)
    if isinstance(e, ir.BinOp) and e.op == "+":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, ir.Var) and y.name == lane and lane not in _var_names(x):
                return x
    return None


def _flatten(s: ir.Stmt, lets: dict[str, ir.Expr], stores: list[ir.Store]) -> bool:
    """The stores of a body made only of lets, sequences and stores, each with its lets
    substituted (False: something else is there)."""
    if isinstance(s, ir.Seq):
        return all(_flatten(x, lets, stores) for x in s.stmts)
    if isinstance(s, ir.Let):
        lets[s.var] = ir.substitute(s.value, lets)
        return _flatten(s.body, lets, stores)
    if isinstance(s, ir.Store):
        stores.append(ir.substitute(s, lets))
        return True
    return False


def match_gemv(s: ir.For, buffer_of, allocs) -> Gemv | None:
    """The :class:`Gemv` loop ``s`` computes, or None (see the module docstring).
    ``buffer_of(name)``: the program's buffer of that name; ``allocs``: the private arrays in
    scope."""
    lo, hi = ir.const_int(s.start), ir.const_int(s.stop)
    inner = s.body
    if s.kind not in ("serial", "unrolled") or lo is None or hi is None or hi <= lo \
            or not isinstance(inner, ir.For) or inner.kind != "vectorized" \
            or ir.const_int(inner.start) != 0 or ir.const_int(inner.stop) != LANES:
        return None
    kv, lane = s.var, inner.var
    stores: list[ir.Store] = []
    if not _flatten(inner.body, {}, stores) or not stores:
        return None
    free = {kv, lane}
    rows: list[Ref] = []
    blocks: list[Ref] = []
    terms: dict[tuple[str, ir.Expr], dict[int, tuple[int, int]]] = {}
    unroll = None
    for st in stores:
        v = st.value
        if st.buffer not in allocs or len(st.index) != 1 or not (isinstance(v, ir.Call) and v.fn == "fma"):
            return None
        base = _lane_base(st.index[0], lane)
        if base is None or kv in _var_names(base) or v.args[2] != ir.Load(st.buffer, st.index):
            return None
        w, x = v.args[0], v.args[1]
        if isinstance(x, ir.Load) and x.buffer not in allocs and buffer_of(x.buffer).storage == "bfloat16_pairs":
            w, x = x, w
        if not (isinstance(w, ir.Load) and isinstance(x, ir.Load)) or w.buffer in allocs or x.buffer in allocs:
            return None
        wb, xb = buffer_of(w.buffer), buffer_of(x.buffer)
        if wb.storage != "bfloat16_pairs" or ir.const_int(wb.shape[-1]) != LANES or xb.storage \
                or xb.dtype != "float32" or len(w.index) < 2 or w.index[-1] != ir.Var(lane) \
                or w.index[-2] != x.index[-1]:
            return None
        if any(not free.isdisjoint(_var_names(i)) for i in w.index[:-2] + x.index[:-1]):
            return None
        ab = _in_k(x.index[-1], kv)
        if ab is None or ab[0] < 1 or not 0 <= ab[1] < ab[0] or unroll not in (None, ab[0]):
            return None
        unroll = ab[0]
        row, blk = (x.buffer, x.index[:-1]), (w.buffer, w.index[:-2])
        for refs, r in ((rows, row), (blocks, blk)):
            if r not in refs:
                refs.append(r)
        per_u = terms.setdefault((st.buffer, base), {})
        if ab[1] in per_u:
            return None  # two products into one accumulator for the same k
        per_u[ab[1]] = (blocks.index(blk), rows.index(row))
    k0, depth = unroll * lo, unroll * (hi - lo)
    if not MIN_ROWS <= len(rows) <= MAX_ROWS or k0 % 2 or depth % K_TILE:
        return None  # (a K % 32 remainder would need tiles of another shape: the FMA code)
    updates = []
    for (acc, base), per_u in terms.items():
        if set(per_u) != set(range(unroll)) or len(set(per_u.values())) != 1:
            return None  # not one whole sum of one block and row
        b, r = per_u[0]
        updates.append((acc, base, b, r))
    return Gemv(lane, k0, depth, tuple(rows), tuple(blocks), tuple(updates))


class _AmxGemv:
    """AMX tile code for a jammed reduction (a mixin of ``_KernelGen``)."""

    _amx_bufs: dict | None = None  # (type, size) -> the kernel's stack array (_amx_alloca)

    def amx_loop(self, s: ir.For) -> bool:
        """Emit ``s`` on AMX tiles when the program asks for it and ``s`` is a jammed GEMV
        (True); else nothing (False: the FMA code)."""
        if self.p.launch_setting("bf16_dot") != "amx" or self.vec is not None or self.compact:
            return False
        g = match_gemv(s, self.p.buffer, self.allocs)
        if g is None:
            return False
        require_amx("bf16_dot='amx'")
        self.amx_gemv(g)
        return True

    def amx_gemv(self, g: Gemv) -> None:
        b = self.b
        stage = self._amx_alloca(I16, MAX_ROWS * g.depth)
        self._stage_rows(g, stage)
        weights = []
        for name, lead in g.blocks:  # the first element of each block's K rows (i16 units)
            off, _ = self.flat_offset(name, lead + (ir.Const(g.k0), ir.Const(0)))
            weights.append(b.gep(self.ptrs[name], [off], inbounds=True, source_etype=I16))
        cbuf = self._amx_alloca(F32, min(len(g.blocks), MAX_C_TILES) * MAX_ROWS * LANES)
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

    def _amx_alloca(self, ty: ll.Type, n: int) -> ll.Value:
        """A stack array of ``n`` ``ty`` (64-byte aligned, zero), one per kernel and size: the
        GEMVs of a kernel run one after another, so they share it (the rows of the staging array
        a smaller group leaves from a larger one only reach C rows nobody reads)."""
        if self._amx_bufs is None:
            self._amx_bufs = {}
        bufs = self._amx_bufs
        key = (str(ty), n)
        if key not in bufs:
            e = self.entry_builder
            ptr = e.alloca(ll.ArrayType(ty, n))
            ptr.align = 64
            bufs[key] = e.bitcast(ptr, ty.as_pointer())
            size = n * (2 if ty == I16 else 4)
            e.call(self.mod.decl("llvm.memset.p0.i64", VOID, [PTR, I8, I64, I1]),
                   [bufs[key], ll.Constant(I8, 0), ll.Constant(I64, size), ll.Constant(I1, 0)])
        return bufs[key]

    def _stage_rows(self, g: Gemv, stage: ll.Value) -> None:
        """``stage[r, :] = bfloat16(X_r[k0 .. k0 + depth))`` for every row ``r`` (a loop, 16
        floats of each row a step)."""
        b = self.b
        src = [self.address(name, lead + (ir.Const(g.k0),))[0] for name, lead in g.rows]
        pre = b.block
        body_bb, done = self.block("amx_stage"), self.block("amx_stage_end")
        b.branch(body_bb)
        b.position_at_end(body_bb)
        i = b.phi(I64, name="amx_si")
        i.add_incoming(ll.Constant(I64, 0), pre)
        at = b.mul(i, ll.Constant(I64, LANES))
        for r, p in enumerate(src):
            x = b.load(b.gep(p, [at], inbounds=True, source_etype=F32), typ=ll.VectorType(F32, LANES), align=4)
            dst = b.gep(stage, [b.add(at, ll.Constant(I64, r * g.depth))], inbounds=True, source_etype=I16)
            b.store(self._to_bf16(x), b.bitcast(dst, ll.VectorType(I16, LANES).as_pointer()), align=2)
        nxt = b.add(i, ll.Constant(I64, 1))
        end = b.block
        b.cbranch(b.icmp_unsigned("<", nxt, ll.Constant(I64, g.depth // LANES)), body_bb, done)
        i.add_incoming(nxt, end)
        b.position_at_end(done)

    def _to_bf16(self, x: ll.Value) -> ll.Value:
        """16 float32 lanes -> bfloat16 bits (``<16 x i16>``): to nearest, ties to even, a NaN
        stays a NaN (LLVM's ``fptrunc`` to ``bfloat``: one ``vcvtneps2bf16`` with AVX512-BF16,
        which every AMX-BF16 CPU has)."""
        return self.b.bitcast(self.b.fptrunc(x, BF16X16), ll.VectorType(I16, LANES))

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

