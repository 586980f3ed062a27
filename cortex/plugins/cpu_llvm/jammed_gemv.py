"""A jammed GEMV over bfloat16 pairs, recognized in the ``llvm`` generator's input, and its rows.

Pipeline position: inside the ``llvm`` renderer, shared by the two code paths that multiply
``bfloat16_pairs`` weights with activations rounded to bfloat16: AMX tiles
(:mod:`.amx_gemv`, ``bf16_dot="amx"``) and the AVX512-BF16 dot product (:mod:`.dpbf16_gemv`,
``bf16_dot="dpbf16"``). Both receive what the node jam wrote and decide nothing about it.

The node jam writes a group's reduction over a ``bfloat16_pairs`` matrix as a serial loop over
``k`` around a 16-lane vectorized loop over the outputs ``j`` whose body is only
``acc[c + j] = fma(W[blk, k, j], X[row, k], acc[c + j])`` for several weight blocks ``blk`` and
node rows ``row`` (``k`` unrolled ``U`` times: ``k = U kn + u``). :func:`match_gemv` recognizes
exactly that, within the row count and depth a path can take; anything else (a guard in the
body, a lane-dependent row, a row or a block read at another ``k``) is left to the FMA code.
:class:`_RoundedRows` stages the group's activation rows in bfloat16 (``[rows, depth]`` words on
the kernel's stack), the operand both paths read.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.core.loopir.verify import affine
from cortex.plugins.cpu_llvm.ir_queries import _var_names
from cortex.plugins.cpu_llvm.llvm_types import F32, I1, I8, I16, I64, PTR, VOID

LANES = 16  # outputs per weight block row (16 float32: 64 bytes), the pairs layout's block width


class _NamedType(ll.Type):
    """An LLVM type llvmlite has no class for, written by name (``x86_amx``, ``<16 x bfloat>``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _to_string(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NamedType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def bfloat_vector(n: int) -> _NamedType:
    """``<n x bfloat>``."""
    return _NamedType(f"<{n} x bfloat>")


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


def match_gemv(s: ir.For, buffer_of, allocs, *, min_rows: int, max_rows: int | None,
               depth_multiple: int) -> Gemv | None:
    """The :class:`Gemv` loop ``s`` computes, or None (see the module docstring): one that
    reads ``min_rows`` to ``max_rows`` (None: any number of) node rows, over a reduction that
    starts at an even ``k`` and is a multiple of ``depth_multiple`` deep. ``buffer_of(name)``:
    the program's buffer of that name; ``allocs``: the private arrays in scope."""
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
    if len(rows) < min_rows or (max_rows is not None and len(rows) > max_rows) or k0 % 2 \
            or depth % depth_multiple:
        return None
    updates = []
    for (acc, base), per_u in terms.items():
        if set(per_u) != set(range(unroll)) or len(set(per_u.values())) != 1:
            return None  # not one whole sum of one block and row
        b, r = per_u[0]
        updates.append((acc, base, b, r))
    return Gemv(lane, k0, depth, tuple(rows), tuple(blocks), tuple(updates))


class _RoundedRows:
    """A jammed GEMV's activation rows rounded to bfloat16, on the stack (a mixin of
    ``_KernelGen``)."""

    _scratch: dict | None = None  # (type, size) -> the kernel's stack array (scratch_array)

    def scratch_array(self, ty: ll.Type, n: int) -> ll.Value:
        """A stack array of ``n`` ``ty`` (64-byte aligned, zero), one per kernel and size: the
        GEMVs of a kernel run one after another, so they share it (the rows a smaller group
        leaves from a larger one are never read back)."""
        if self._scratch is None:
            self._scratch = {}
        bufs = self._scratch
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

    def stage_rows(self, g: Gemv, stage: ll.Value) -> None:
        """``stage[r, :] = bfloat16(X_r[k0 .. k0 + depth))`` for every row ``r`` (``stage``:
        ``[rows, depth]`` words): a loop, 16 floats of each row a step, then the pairs of the
        last ``depth % 16`` floats (``depth`` is even)."""
        b = self.b
        src = [self.address(name, lead + (ir.Const(g.k0),))[0] for name, lead in g.rows]

        def convert(at: ll.Value, n: int) -> None:  # n floats of each row from offset ``at``
            for r, p in enumerate(src):
                x = b.load(b.gep(p, [at], inbounds=True, source_etype=F32), typ=ll.VectorType(F32, n), align=4)
                dst = b.gep(stage, [b.add(at, ll.Constant(I64, r * g.depth))], inbounds=True, source_etype=I16)
                b.store(self.to_bf16(x), b.bitcast(dst, ll.VectorType(I16, n).as_pointer()), align=2)

        if g.depth >= LANES:
            i, _ = self.open_counted_loop("bf16_stage")
            convert(b.mul(i, ll.Constant(I64, LANES)), LANES)
            self.close_counted_loop(i, g.depth // LANES)
        for at in range(g.depth - g.depth % LANES, g.depth, 2):
            convert(ll.Constant(I64, at), 2)

    def block_starts(self, g: Gemv) -> list[ll.Value]:
        """Each weight block's first pair row (``k0``) as an ``i16`` pointer."""
        starts = []
        for name, lead in g.blocks:
            off, _ = self.flat_offset(name, lead + (ir.Const(g.k0), ir.Const(0)))
            starts.append(self.b.gep(self.ptrs[name], [off], inbounds=True, source_etype=I16))
        return starts

    def open_counted_loop(self, name: str) -> tuple[ll.PhiInstr, ll.Block]:
        """Branch into a new loop block ``name`` and return its ``i64`` counter (from 0) and
        the block that entered it (for the other phis' first values); the body follows, then
        :meth:`close_counted_loop`."""
        b, pre = self.b, self.b.block
        body = self.block(name)
        b.branch(body)
        b.position_at_end(body)
        i = b.phi(I64, name=f"{name}_i")
        i.add_incoming(ll.Constant(I64, 0), pre)
        return i, pre

    def close_counted_loop(self, i: ll.PhiInstr, trips: int) -> ll.Block:
        """End the loop of counter ``i`` (:meth:`open_counted_loop`) after ``trips`` trips;
        returns the loop's last block (the other phis' incoming edge) and goes on after it."""
        b = self.b
        done = self.block(f"{i.parent.name}_end")
        nxt = b.add(i, ll.Constant(I64, 1))
        end = b.block
        b.cbranch(b.icmp_unsigned("<", nxt, ll.Constant(I64, trips)), i.parent, done)
        i.add_incoming(nxt, end)
        b.position_at_end(done)
        return end

    def to_bf16(self, x: ll.Value) -> ll.Value:
        """``n`` float32 lanes -> bfloat16 bits (``<n x i16>``): to nearest, ties to even, a NaN
        stays a NaN (LLVM's ``fptrunc`` to ``bfloat``: one ``vcvtneps2bf16`` with AVX512-BF16,
        which every AMX-BF16 CPU has)."""
        n = x.type.count
        return self.b.bitcast(self.b.fptrunc(x, bfloat_vector(n)), ll.VectorType(I16, n))
