"""One kernel function of the ``llvm`` code generator: statements, loops, buffers, vectors.

Pipeline position: inside the ``llvm`` renderer (:mod:`cortex.plugins.cpu_llvm.codegen` makes one
:class:`_KernelGen` per kernel of the program). It emits ``void k(bufs..., sizes..., params...,
tid, nthreads)``: the statement tree, loops (the outermost parallel loop split across the
thread team, statically or claimed at run time, vectorized loops as straight-line SIMD code, a loop annotated "cold" as compact
code), loads and stores (vector accesses when contiguous in the lane), allocs (a private array
addressed by constant slots kept in registers), prefetches; expressions, reductions and register
arrays come from its mixins (:mod:`.expressions`, :mod:`.reductions`, :mod:`.registers`). It
makes no scheduling decision: interchange, node jam, wide vectors and prefetches arrive in the
program (``cortex.core.lowering.apply_schedule``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm import team
from cortex.plugins.cpu_llvm.amx_gemv import _AmxGemv
from cortex.plugins.cpu_llvm.dpbf16_gemv import _Dpbf16Gemv
from cortex.plugins.cpu_llvm.expressions import _Expressions
from cortex.plugins.cpu_llvm.jammed_gemv import _RoundedRows
from cortex.plugins.cpu_llvm.ir_queries import _Idx, _var_names, _walk, serial_reads_stable, vector_width
from cortex.plugins.cpu_llvm.lanes import _VecCtx
from cortex.plugins.cpu_llvm.llvm_types import (F32, I1, I8, I16, I32, I64, LTYPE, PARTITIONED_KINDS, PTR, SIZEOF, SIZEOF_LL,
                                                VOID, CodegenError, _LoopMD, _is_vec, _splat_const, _vkey,
                                                _zero_mask)
from cortex.plugins.cpu_llvm.reductions import _Reductions
from cortex.plugins.cpu_llvm.registers import _RegisterArrays

if TYPE_CHECKING:
    from cortex.plugins.cpu_llvm.codegen import _Module


class _KernelGen(_Expressions, _Reductions, _RegisterArrays, _AmxGemv, _Dpbf16Gemv, _RoundedRows):
    """Emits one kernel function: ``void k(bufs..., sizes..., params..., tid, nthreads)``."""

    def __init__(self, mod: _Module, kernel: ir.Kernel, barrier: ll.Function) -> None:
        self.mod = mod
        p = mod.program
        self.p = p
        self.kernel = kernel
        self.barrier_fn = barrier
        args = [PTR] * len(p.buffers) + [I32] * (len(p.sizes) + len(kernel.params) + 2)
        self.fn = ll.Function(mod.m, ll.FunctionType(VOID, args), f"cx_kernel_{kernel.name}")
        self.fn.linkage = "internal"
        self.fn.attributes.add("alwaysinline")
        self.fn.attributes.add("nounwind")
        self.env: dict[str, tuple[ll.Value, str]] = {}
        self.ptrs: dict[str, ll.Value] = {}
        self.dtypes = {bf.name: bf.dtype for bf in p.buffers}
        self.allocs: dict[str, ir.Alloc] = {}
        it = iter(self.fn.args)
        for bf in p.buffers:
            a = next(it)
            a.name = f"buf_{bf.name}"
            a.add_attribute("noalias")
            self.ptrs[bf.name] = a
        for s in p.sizes:
            a = next(it)
            a.name = s.name
            self.env[s.name] = (a, ir.INT)
        for name in kernel.params:
            a = next(it)
            a.name = name
            self.env[name] = (a, ir.INT)
        self.tid = next(it)
        self.tid.name = "tid"
        self.nth = next(it)
        self.nth.name = "nthreads"
        self.alloca_bb = self.fn.append_basic_block("allocas")
        self.entry_builder = ll.IRBuilder(self.alloca_bb)
        self.b = ll.IRBuilder(self.fn.append_basic_block("entry"))
        self.partitioned = False  # inside the loop that is split across threads
        self._stable_reads: bool | None = None  # see stable_reads
        self.last_loop_synced = False
        self.loop_id = 0
        self.vec: _VecCtx | None = None  # set while emitting the body of a vectorized loop
        self.compact = 0  # > 0: code that rarely runs (a loop annotated "cold"): keep it small
        self.private = 0  # > 0: inside a private array's scope (a jammed block)
        self.regs: dict[str, dict] = {}  # promoted private arrays: name -> {slot: value}
        self.reg_loops: dict[str, dict] = {}  # name -> {id(loop): slots it stores}
        self.icse: dict = {}  # (op, block, operands) -> value: integer ops emitted once per block
        self.icse_keep: list = []

    # ---------------------------------------------------------------- helpers
    def dtype(self, e: ir.Expr) -> str:
        return ir.infer_dtype(e, self.dtypes)

    def block(self, name: str) -> ll.Block:
        return self.fn.append_basic_block(name)

    def i64(self, v: ll.Value) -> ll.Value:
        if _is_vec(v):
            return self.b.sext(v, ll.VectorType(I64, v.type.count))
        if isinstance(v, ll.Constant) and isinstance(v.constant, int):
            return ll.Constant(I64, v.constant)
        return self.int_op("sext", v, None)

    def int_op(self, op: str, x: ll.Value, y: ll.Value | None) -> ll.Value:
        """Scalar integer arithmetic of index computations, folded when the operands are
        constants or neutral and emitted once per basic block (the same address is computed
        for many loads): far less IR for LLVM to clean up (compile time)."""
        cx = x.constant if isinstance(x, ll.Constant) and isinstance(x.constant, int) else None
        cy = y.constant if isinstance(y, ll.Constant) and isinstance(y.constant, int) else None
        if y is not None and not _is_vec(x) and not _is_vec(y):
            if cx is not None and cy is not None and op in ("add", "sub", "mul"):
                v = {"add": cx + cy, "sub": cx - cy, "mul": cx * cy}[op]
                if -2**31 <= v < 2**31 or x.type == I64:
                    return ll.Constant(x.type, v)
            if op == "add" and cy == 0 or op == "sub" and cy == 0 or op == "mul" and cy == 1:
                return x
            if op == "add" and cx == 0 or op == "mul" and cx == 1:
                return y
        key = (op, id(self.b.block), _vkey(x), _vkey(y) if y is not None else None)
        hit = self.icse.get(key)
        if hit is not None:
            return hit
        b = self.b
        if op == "sext":
            out = b.sext(x, I64)
        elif op == "sdiv":
            out = b.sdiv(x, y)
        elif op == "srem":
            out = b.srem(x, y)
        elif op == "and":
            out = b.and_(x, y)
        else:
            out = getattr(b, op)(x, y, flags=["nsw"])
        self.icse[key] = out
        self.icse_keep.append((x, y))  # ids in the keys stay valid
        return out

    def splat(self, v: ll.Value, width: int) -> ll.Value:
        if isinstance(v, ll.Constant) and not _is_vec(v):
            return _splat_const(ll.VectorType(v.type, width), v)
        vt = ll.VectorType(v.type, width)
        one = self.b.insert_element(_splat_const(vt, None), v, ll.Constant(I32, 0))
        return self.b.shuffle_vector(one, _splat_const(vt, None), _zero_mask(width))

    def match(self, *vals: ll.Value) -> list[ll.Value]:
        """Broadcast scalars when any operand is a vector (inside a vectorized loop)."""
        widths = {v.type.count for v in vals if _is_vec(v)}
        if not widths:
            return list(vals)
        (w,) = widths
        return [v if _is_vec(v) else self.splat(v, w) for v in vals]

    def const_like(self, ty: ll.Type, value) -> ll.Constant:
        if isinstance(ty, ll.VectorType):
            return _splat_const(ty, ll.Constant(ty.element, value))
        return ll.Constant(ty, value)

    def varying(self, e: ir.Node) -> bool:
        return self.vec is not None and not self.vec.varying.isdisjoint(_var_names(e))

    def load(self, name: str, index: tuple[ir.Expr, ...]) -> ll.Value:
        if name in self.regs:
            return self.reg_access(name, index, None)
        if self.varying(ir.Seq(()) if not index else _Idx(index)):
            return self.vector_access(name, index, None)
        ptr, ty = self.address(name, index)
        return self.widen(name, self.b.load(ptr, typ=ty))

    def widen(self, name: str, stored: ll.Value) -> ll.Value:
        """A loaded value of buffer ``name`` as its dtype: bfloat16 storage (``i16``, a vector
        inside a vectorized loop) becomes float32 by ``zext``, ``shl 16`` and a bitcast; other
        buffers pass through."""
        if name in self.allocs or not self.p.buffer(name).storage:
            return stored
        # (a shuffle of the words into the high halves, one vpermt2w, measured no faster)
        n = stored.type.count if _is_vec(stored) else 0
        wide = ll.VectorType(I32, n) if n else I32
        bits = self.b.shl(self.b.zext(stored, wide), self.const_like(wide, 16))
        return self.b.bitcast(bits, ll.VectorType(F32, n) if n else F32)

    def store(self, name: str, index: tuple[ir.Expr, ...], value: ll.Value) -> None:
        if name in self.regs:
            self.reg_access(name, index, value)
            return
        if self.varying(_Idx(index)):
            self.vector_access(name, index, value)
            return
        if _is_vec(value):
            raise CodegenError(f"store to {name}[{', '.join(map(str, index))}]: every lane of the "
                               f"vectorized loop {self.vec.var} writes the same element")
        ptr, ty = self.address(name, index)
        if value.type != ty:
            raise CodegenError(f"store of {value.type} into {name} ({ty})")
        self.b.store(value, ptr)

    def vector_access(self, name: str, index: tuple[ir.Expr, ...], value: ll.Value | None) -> ll.Value | None:
        """A load (``value`` None) or store whose index varies across the lanes: one vector
        load/store when consecutive lanes touch consecutive elements, else one access per lane."""
        vec = self.vec
        assert vec is not None
        shape = self.allocs[name].shape if name in self.allocs else tuple(self.p.buffer(name).shape)
        dims = [d if isinstance(d, int) else ir.const_int(d) for d in shape]
        elem = LTYPE[self.allocs[name].dtype if name in self.allocs else self.p.buffer(name).stored]
        stride = 0
        row = 1
        for k in reversed(range(len(index))):
            st = vec.lane_stride(index[k])
            if st is None or (st and row is None):
                stride = None
                break
            stride += st * row
            row = row * dims[k] if (row is not None and dims[k] is not None) else None
        w = vec.width
        if (value is None and self.pairs(name) and vec.lane_stride(index[-1]) == 1
                and all(vec.lane_stride(i) == 0 for i in index[:-1])):
            return self.pair_load(name, index)  # (else lane by lane, below: a pairs offset each)
        if self.pairs(name):
            stride = None
        if stride == 1:
            lane0 = tuple(vec.lane0(i) for i in index)
            saved, self.vec = self.vec, None
            try:
                ptr, ty = self.address(name, lane0)
            finally:
                self.vec = saved
            vt = ll.VectorType(elem, w)
            align = SIZEOF_LL[str(elem)]
            if value is None:
                return self.widen(name, self.b.load(ptr, typ=vt, align=align))
            (value,) = self.match(value) if _is_vec(value) else (self.splat(value, w),)
            self.b.store(value, self.b.bitcast(ptr, vt.as_pointer()), align=align)
            return None
        # general case: lane by lane (offsets computed as a vector)
        off, ty = self.flat_offset(name, index)
        b = self.b
        out = _splat_const(ll.VectorType(elem, w), None)
        if value is not None and not _is_vec(value):
            value = self.splat(value, w)
        for lane in range(w):
            o = b.extract_element(off, ll.Constant(I32, lane)) if _is_vec(off) else off
            ptr = b.gep(self.ptrs[name], [o], inbounds=True, source_etype=ty)
            if value is None:
                out = b.insert_element(out, b.load(ptr, typ=ty), ll.Constant(I32, lane))
            else:
                b.store(b.extract_element(value, ll.Constant(I32, lane)), ptr)
        return self.widen(name, out) if value is None else None

    def pairs(self, name: str) -> bool:
        """Whether ``name`` is a buffer stored as ``bfloat16_pairs``."""
        return name not in self.allocs and self.p.buffer(name).storage == "bfloat16_pairs"

    def pair_load(self, name: str, index: tuple[ir.Expr, ...]) -> ll.Value:
        """The float32 vector of ``name[index]`` (a ``bfloat16_pairs`` buffer, consecutive lanes
        along its last dimension): one load of the lanes' words, which hold row ``k`` and its
        pair neighbour, and one instruction keeping row ``k``'s halves (``<< 16`` for an even
        ``k``, ``& 0xFFFF0000`` for an odd one; LLVM folds the choice when the parity is known)."""
        vec = self.vec
        assert vec is not None
        lane0 = tuple(vec.lane0(i) for i in index)
        saved, self.vec = self.vec, None
        try:
            off, _ = self.flat_offset(name, lane0)  # (row & ~1) * W + 2 j + (row & 1)
        finally:
            self.vec = saved
        b = self.b
        odd = b.and_(off, ll.Constant(I64, 1))
        first = b.gep(self.ptrs[name], [b.sub(off, odd)], inbounds=True, source_etype=I16)
        wt = ll.VectorType(I32, vec.width)
        words = b.load(first, typ=wt, align=4)
        high = b.and_(words, self.const_like(wt, -65536))
        low = b.shl(words, self.const_like(wt, 16))
        bits = b.select(b.icmp_unsigned("!=", odd, ll.Constant(I64, 0)), high, low)
        return b.bitcast(bits, ll.VectorType(F32, vec.width))

    def flat_offset(self, name: str, index: tuple[ir.Expr, ...]) -> tuple[ll.Value, ll.Type]:
        """The row-major element offset (i64, a vector when the index varies) and element type;
        for a ``bfloat16_pairs`` buffer the offset of its element in the pair-interleaved order."""
        if name in self.allocs:
            a = self.allocs[name]
            shape: tuple = tuple(ir.Const(d) for d in a.shape)
            dtype = a.dtype
        else:
            bf = self.p.buffer(name)
            shape, dtype = bf.shape, bf.stored
        if len(index) != len(shape):
            raise CodegenError(f"access {name} with {len(index)} indices; it has {len(shape)} dims")
        pairs = self.pairs(name)
        last = len(index) - 1 if pairs else len(index)
        off = self.i64(self.expr(index[0]))  # (a pairs buffer has two or more dimensions)
        for i, d in zip(index[1:last], shape[1:last]):
            off, dim = self.match(off, self.i64(self.expr(d)))
            off = self.int_op("mul", off, dim)
            off, ii = self.match(off, self.i64(self.expr(i)))
            off = self.int_op("add", off, ii)
        if pairs:  # off is the row (an even K a matrix, so its parity is k's): pairs of rows
            odd = self.int_op("and", off, self.const_like(off.type, 1))
            off, dim = self.match(self.int_op("sub", off, odd), self.i64(self.expr(shape[-1])))
            off, j = self.match(self.int_op("mul", off, dim), self.i64(self.expr(index[-1])))
            off, odd = self.match(off, odd)
            off = self.int_op("add", self.int_op("add", off, self.int_op("add", j, j)), odd)
        return off, LTYPE[dtype]

    def address(self, name: str, index: tuple[ir.Expr, ...]) -> tuple[ll.Value, ll.Type]:
        off, ty = self.flat_offset(name, index)
        if _is_vec(off):
            raise CodegenError(f"internal: vector address for {name}")
        return self.b.gep(self.ptrs[name], [off], inbounds=True, source_etype=ty), ty

    def fconst(self, value: float, dtype: str) -> ll.Constant:
        return ll.Constant(LTYPE[dtype], float(value))

    # ---------------------------------------------------------------- statements
    def _loop_md(self, latch: ll.Instruction, kind: str, width: int | None) -> None:
        m = self.mod.m
        props = []
        if kind == "vectorized":
            props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.vectorize.enable"), ll.Constant(I1, 1)]))
            if width and width > 1:
                props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.vectorize.width"), ll.Constant(I32, width)]))
        elif kind == "unrolled":
            props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.unroll.full")]))
        elif kind == "compact":
            props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.unroll.disable")]))
        if not props:
            return
        self.loop_id += 1
        # a distinct self-referencing node: built as text by the module finisher (see _LOOP_MD)
        node = _LoopMD(self.fn.name, self.loop_id, props)
        self.mod.loop_mds.append(node)
        latch.set_metadata("llvm.loop", node.placeholder(m))

    def stmt(self, s: ir.Stmt) -> None:
        b = self.b
        if isinstance(s, ir.Seq):
            synced = False
            for x in s.stmts:
                if synced and isinstance(x, ir.Barrier) and x.scope == "grid":
                    continue  # the partitioned loop just before ended with a team barrier
                self.stmt(x)
                synced = isinstance(x, ir.For) and self.last_loop_synced
            return
        if not self.partitioned and self._serial_global_store(s):
            # run once (thread 0), then let the team see it
            then_bb, done = self.block("tid0"), self.block("tid0_done")
            b.cbranch(b.icmp_signed("==", self.tid, ll.Constant(I32, 0)), then_bb, done)
            b.position_at_end(then_bb)
            self.partitioned = True  # nothing below is split again
            try:
                self.stmt(s)
            finally:
                self.partitioned = False
            b.branch(done)
            b.position_at_end(done)
            b.call(self.barrier_fn, [self.nth, self.tid])
            return
        if isinstance(s, ir.Store):
            self.store(s.buffer, s.index, self.expr(s.value))
            return
        if isinstance(s, ir.Let):
            if s.var in self.env:
                raise CodegenError(f"let {s.var} shadows a name in kernel {self.kernel.name}")
            value = self.expr(s.value)
            self.env[s.var] = (value, self.dtype(s.value))
            if _is_vec(value):
                self.vec.varying.add(s.var)
                self.vec.let_ir[s.var] = s.value
            try:
                self.stmt(s.body)
            finally:
                del self.env[s.var]
                if self.vec is not None:
                    self.vec.varying.discard(s.var)
                    self.vec.let_ir.pop(s.var, None)
            return
        if isinstance(s, ir.If):
            c = self.to_bool(s.cond)
            then_bb, done = self.block("if_then"), self.block("if_done")
            else_bb = self.block("if_else") if s.orelse is not None else done
            b.cbranch(c, then_bb, else_bb)
            b.position_at_end(then_bb)
            self.stmt(s.then)
            b.branch(done)
            if s.orelse is not None:
                b.position_at_end(else_bb)
                self.stmt(s.orelse)
                b.branch(done)
            b.position_at_end(done)
            return
        if isinstance(s, ir.For):
            self.loop(s)
            return
        if isinstance(s, ir.Alloc):
            n = 1
            for d in s.shape:
                n *= d
            ty = LTYPE[s.dtype]
            if s.name in self.ptrs or s.name in self.allocs:
                raise CodegenError(f"alloc {s.name} shadows a buffer")
            self.allocs[s.name] = s
            self.dtypes[s.name] = s.dtype
            if not self.promote(s):  # registers (see .registers), else stack memory:
                # an array type (not ``alloca T, n``), which SROA can split into its slices
                ptr = self.entry_builder.alloca(ll.ArrayType(ty, n), name=s.name)
                ptr.align = 64
                self.ptrs[s.name] = self.entry_builder.bitcast(ptr, ty.as_pointer())
            self.private += 1
            try:
                self.stmt(s.body)
            finally:
                self.private -= 1
                self.regs.pop(s.name, None)
                self.reg_loops.pop(s.name, None)
                self.ptrs.pop(s.name, None)
                del self.allocs[s.name], self.dtypes[s.name]
            return
        if isinstance(s, ir.Prefetch):
            self.prefetch(s)
            return
        if isinstance(s, ir.Barrier):
            if s.scope == "grid":
                if self.partitioned:
                    raise CodegenError("a grid barrier inside a parallel loop cannot be reached by every thread")
                b.call(self.barrier_fn, [self.nth, self.tid])
            return  # group barrier: a group runs on one thread, in order
        raise CodegenError(f"cannot generate code for statement {s!r}")

    def _serial_global_store(self, s: ir.Stmt) -> bool:
        if isinstance(s, (ir.Seq, ir.Let)):
            return False  # decided per inner statement
        nodes = list(_walk(s))  # one walk (a store to an alloc inside s is not global)
        inner = {n.name for n in nodes if isinstance(n, ir.Alloc)}
        if not any(isinstance(n, ir.Store) and n.buffer not in self.allocs and n.buffer not in inner for n in nodes):
            return False
        return not any(isinstance(n, ir.Barrier) or (isinstance(n, ir.For) and n.kind in PARTITIONED_KINDS)
                       for n in nodes)

    def vector_loop(self, s: ir.For, width: int) -> None:
        """The body of a vectorized loop once, on ``width``-lane vectors (no loop at all)."""
        start = ir.const_int(s.start)
        lanes = ll.Constant(ll.VectorType(I32, width), [start + k for k in range(width)])
        self.vec = _VecCtx(s.var, width, start, {s.var}, {})
        self.env[s.var] = (lanes, ir.INT)
        try:
            self.stmt(s.body)
        finally:
            del self.env[s.var]
            self.vec = None

    def loop(self, s: ir.For) -> None:
        b = self.b
        if s.var in self.env:
            raise CodegenError(f"loop variable {s.var} shadows a name in kernel {self.kernel.name}")
        if s.kind == "vectorized" and self.vec is None:
            width = vector_width(s)
            if width:
                self.vector_loop(s, width)
                self.last_loop_synced = False
                return
        if self.amx_loop(s) or self.dpbf16_loop(s):  # bf16_dot="amx" / "dpbf16": a jammed GEMV
            self.last_loop_synced = False
            return
        if "cold" in s.annotations and not self.compact:
            self.compact += 1
            try:
                self.loop(s)
            finally:
                self.compact -= 1
            return
        start, stop = self.expr(s.start), self.expr(s.stop)
        split = s.kind in PARTITIONED_KINDS and not self.partitioned
        synced = False  # the loop ended with its own wait, not a team barrier
        if split and "dynamic" in s.annotations and not self.regs:
            synced = self.claimed_loop(s, start, stop)
        else:
            if split:
                # contiguous chunk per thread: [start + tid*chunk, min(stop, start + (tid+1)*chunk))
                chunk = self.chunk(start, stop)
                start = b.add(start, b.mul(self.tid, chunk, flags=["nsw"]), flags=["nsw"])
                stop = self.min32(b.add(start, chunk, flags=["nsw"]), stop)
            self.counted_loop(s, start, stop, split)
        if split and not synced:  # fork-join semantics of a CPU parallel loop (as OpenMP's implicit barrier)
            b.call(self.barrier_fn, [self.nth, self.tid])
        self.last_loop_synced = split

    def chunk(self, start: ll.Value, stop: ll.Value) -> ll.Value:
        """A thread's share of the iterations ``[start, stop)``: ``ceil(max(n, 0) / nthreads)``."""
        b = self.b
        n = b.sub(stop, start, flags=["nsw"])
        n = b.select(b.icmp_signed(">", n, ll.Constant(I32, 0)), n, ll.Constant(I32, 0))
        return b.sdiv(b.add(n, b.sub(self.nth, ll.Constant(I32, 1))), self.nth)

    def min32(self, x: ll.Value, y: ll.Value) -> ll.Value:
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def claimed_loop(self, s: ir.For, start: ll.Value, stop: ll.Value) -> bool:
        """A loop annotated "dynamic" split across the team at run time (``team.claim_fn``):
        each thread's static chunk is cut into units of ``ceil(chunk / CLAIMS_PER_THREAD)``
        iterations; a thread claims its own chunk's units, then those left in the chunks of
        threads ``tid + 1, tid + 2, ...``. A thread that runs late (descheduled) leaves its
        unclaimed units to the others; a thread that is not late runs its own chunk, as under
        the static split (the weight rows it keeps in its cache). Each iteration is the same
        code whichever thread runs it: the results are those of the static split.

        The loop ends with ``team.finish_fn`` (wait until its iterations are done; True) instead
        of a team barrier where the code every thread runs reads no buffer the program writes
        (:func:`.ir_queries.serial_reads_stable`: a thread that runs behind reads what the others
        read) and this is not a profiling build (whose events are per barrier); else the caller
        emits the barrier (False)."""
        b = self.b
        one = ll.Constant(I32, 1)
        ran = self.entry_builder.alloca(I32, name=f"{s.var}_ran")  # iterations this thread ran
        b.store(ll.Constant(I32, 0), ran)
        chunk = self.chunk(start, stop)
        claims = ll.Constant(I32, ir.CLAIMS_PER_THREAD)
        grain = b.sdiv(b.add(chunk, ll.Constant(I32, ir.CLAIMS_PER_THREAD - 1)), claims)
        grain = b.select(b.icmp_signed(">", grain, one), grain, one)
        seq = team.next_claim_seq(self.mod, b, self.tid)
        claim = team.claim_fn(self.mod)
        pre = b.block
        owner_bb, claim_bb, run_bb, next_bb, done_bb = (
            self.block(f"{s.var}_{x}") for x in ("owner", "claim", "run", "next", "claimed"))
        b.branch(owner_bb)
        b.position_at_end(owner_bb)
        k = b.phi(I32, name=f"{s.var}_k")  # the k-th chunk this thread claims from: tid + k
        k.add_incoming(ll.Constant(I32, 0), pre)
        owner = b.add(self.tid, k)
        owner = b.select(b.icmp_signed(">=", owner, self.nth), b.sub(owner, self.nth), owner)
        first = b.mul(owner, chunk)
        size = self.min32(chunk, b.sub(b.sub(stop, start), first))  # < 1: an empty chunk
        b.branch(claim_bb)
        b.position_at_end(claim_bb)
        got = b.call(claim, [owner, seq, grain, size])
        b.cbranch(b.icmp_signed(">=", got, ll.Constant(I32, 0)), run_bb, next_bb)
        b.position_at_end(run_bb)
        lo = b.add(b.add(start, first), got)
        units = self.min32(grain, b.sub(size, got))
        b.store(b.add(b.load(ran, typ=I32), units), ran)
        self.counted_loop(s, lo, b.add(lo, units), True)
        b.branch(claim_bb)
        b.position_at_end(next_bb)
        k2 = b.add(k, one)
        k.add_incoming(k2, next_bb)
        b.cbranch(b.icmp_signed("<", k2, self.nth), owner_bb, done_bb)
        b.position_at_end(done_bb)
        if self.mod.profile or not self.stable_reads():
            return False
        total = b.sub(stop, start)
        b.call(team.finish_fn(self.mod), [seq, b.load(ran, typ=I32), total, self.tid])
        return True

    def stable_reads(self) -> bool:
        if self._stable_reads is None:
            self._stable_reads = serial_reads_stable(self.kernel, self.p, PARTITIONED_KINDS)
        return self._stable_reads

    def counted_loop(self, s: ir.For, start: ll.Value, stop: ll.Value, split: bool) -> None:
        """``for s.var in [start, stop): s.body`` (``split``: the part of a loop split across the
        team that this thread runs; nothing inside is split again)."""
        b = self.b
        pre = b.block
        body_bb, exit_bb = self.block(f"for_{s.var}"), self.block(f"for_{s.var}_end")
        b.cbranch(b.icmp_signed("<", start, stop), body_bb, exit_bb)
        b.position_at_end(body_bb)
        i = b.phi(I32, name=s.var)
        i.add_incoming(start, pre)
        slots = self.loop_slots(s) if self.regs else []
        phis = self.slot_phis(slots, pre)
        self.env[s.var] = (i, ir.INT)
        was = self.partitioned
        self.partitioned = was or split
        try:
            self.stmt(s.body)
        finally:
            del self.env[s.var]
            self.partitioned = was
        i_next = b.add(i, ll.Constant(I32, 1), flags=["nsw"])
        end = b.block
        latch = b.cbranch(b.icmp_signed("<", i_next, stop), body_bb, exit_bb)
        i.add_incoming(i_next, end)
        width = ir.const_int(s.stop) - ir.const_int(s.start) if (
            ir.const_int(s.stop) is not None and ir.const_int(s.start) is not None) else None
        self._loop_md(latch, s.kind, width)
        b.position_at_end(exit_bb)
        self.slot_exits(slots, phis, pre, end)

    def prefetch(self, s: ir.Prefetch) -> None:
        """``llvm.prefetch`` (read, high locality) of every 64-byte line of the ``count``
        elements from ``buffer[index]``: one per cache line."""
        ptr, ty = self.address(s.buffer, s.index)
        size = SIZEOF[self.allocs[s.buffer].dtype if s.buffer in self.allocs else self.p.buffer(s.buffer).stored]
        fn = self.mod.decl("llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
        for off in range(0, s.count * size, 64):
            at = self.b.gep(ptr, [ll.Constant(I64, off)], source_etype=I8) if off else ptr
            self.b.call(fn, [at, ll.Constant(I32, 0), ll.Constant(I32, 3), ll.Constant(I32, 1)])

    def emit(self) -> ll.Function:
        self.stmt(self.kernel.body)
        self.b.ret_void()
        self.entry_builder.branch(self.fn.basic_blocks[1])  # allocas first, then the body
        return self.fn
