"""LoopProgram -> LLVM IR (``llvmlite.ir``): the code generator of the ``llvm`` target.

Pipeline position: the renderer of the ``llvm`` backend. It takes a scheduled, verified
:class:`~cortex.core.loopir.Program` and returns LLVM IR text that
:mod:`cortex.plugins.cpu_llvm.jit` optimizes and JIT-compiles. Semantics are the interpreter's
(:func:`cortex.core.loopir.interpret.run`); the tests hold the two together.

Execution model (SPMD over a fixed team of threads)
---------------------------------------------------
The whole call — host steps, every kernel launch, every level — runs inside one native call.
``cx_run(bufs, sizes, arm)`` publishes the arguments to the team and runs ``cx_spmd(bufs, sizes,
tid=0, nthreads)`` on the calling thread; the persistent worker threads (created once per
executable by ``cx_start``) run the same function with their own ``tid``. The team's code —
barrier, workers, entry points, sleeping and interrupts — is :mod:`cortex.plugins.cpu_llvm.team`. Every thread executes the host steps and the kernels' serial code; the
*outermost* ``parallel`` (or ``gpu_group``) loop of a kernel is split into one contiguous chunk
per thread. Synchronization:

* ``Barrier("grid")`` is a team-wide spin barrier (a counter and a generation word);
* every kernel launch ends with a team barrier (a launch boundary is a sync point), so the
  ``per_level`` form is correct too;
* the partitioned loop ends with a team barrier (the fork-join semantics of a CPU ``parallel``
  loop, as OpenMP's implicit barrier in the C renderer); an explicit grid barrier right after
  it is not emitted twice;
* ``Barrier("group")`` is a no-op: a group (the body of one ``gpu_group`` iteration) runs on one
  thread, whose ``gpu_thread`` loops run in order;
* a statement outside the partitioned loop that stores to a global buffer and contains no
  parallel loop or barrier runs on thread 0 only, followed by a barrier (no duplicated
  read-modify-write); private/shared allocs are per thread (stack arrays).

Loops and vectors: ``vectorized`` loops carry ``llvm.loop.vectorize`` metadata with their width,
``unrolled`` loops ``llvm.loop.unroll.full``; reductions accumulate with ``reassoc contract``
fast-math flags so LLVM's loop vectorizer turns GEMV dot products into SIMD FMAs with several
accumulators. A ``Select`` whose condition does not depend on the reduction variable is hoisted
out of a ``Reduce`` (two loop versions), so guarded child loads ``select(c >= 0, h[c, k], 0)``
leave a branch-free inner loop. Level node loops are interchanged with their hidden-unit loops so threads split the weight
rows (:func:`interchange_node_loop`: each core's share stays in its L2 across levels), and
groups of ``JAM`` nodes of a level share each weight load (:func:`jam_plan`); a short last
group repeats its last node when that is harmless (:func:`_no_self_reads`).
Integer arithmetic is 32-bit with ``nsw`` (as in the C renderer);
flat offsets are 64-bit. Math: ``exp log sqrt abs fma`` are LLVM intrinsics; ``tanh`` and
``sigmoid`` are written with ``exp`` (``sigmoid(x) = 1/(1+exp(-x))``, ``tanh(x) = 1 -
2/(exp(2x)+1)``, exact at +-inf).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm import team
from cortex.plugins.cpu_llvm.team import MAX_THREADS, SYMBOLS, Symbols  # noqa: F401 - re-exported

I1 = ll.IntType(1)
I8 = ll.IntType(8)
I32 = ll.IntType(32)
I64 = ll.IntType(64)
F32 = ll.FloatType()
F64 = ll.DoubleType()
PTR = ll.PointerType()
VOID = ll.VoidType()
LTYPE = {"int32": I32, "bool": I1, "float32": F32, "float64": F64}
SIZEOF = {"int32": 4, "bool": 1, "float32": 4, "float64": 8}
_INT_CMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!="}
PARTITIONED_KINDS = ("parallel", "gpu_group")
FAST_REDUCE = ("reassoc", "contract")


class CodegenError(ir.LoopIRError):
    """The program uses a construct the ``llvm`` code generator cannot express."""


_kids = ir.children  # loopir's traversal
_walk = ir.walk


#: id(node) -> (node, names of every Var in it): the code generator asks "does this expression
#: use a name of that set" thousands of times per program (cleared after each ``generate``)
_NAMES: dict[int, tuple[ir.Node, frozenset]] = {}
_EMPTY: frozenset = frozenset()


def _var_names(node: ir.Node) -> frozenset:
    hit = _NAMES.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    # iterative post-order (a kernel body nests one Let per value: deeper than Python recursion)
    stack: list[tuple[ir.Node, list | None]] = [(node, None)]  # (node, its kids once visited)
    while stack:
        n, kids = stack.pop()
        h = _NAMES.get(id(n))
        if h is not None and h[0] is n:
            continue
        if kids is None:
            kids = _kids(n)
            if kids:
                stack.append((n, kids))
                stack.extend((k, None) for k in kids)
                continue
        if isinstance(n, ir.Var):
            out = frozenset((n.name,))
        else:
            out = _EMPTY
            for k in kids:
                kn = _NAMES[id(k)][1]
                if kn:
                    out = out | kn if out else kn
        _NAMES[id(n)] = (n, out)
    return _NAMES[id(node)][1]


def _contains(node: ir.Node, pred) -> bool:
    return any(pred(n) for n in _walk(node))


def _uses_var(node: ir.Node, name: str) -> bool:
    return name in _var_names(node)


def _needs_branch(e: ir.Expr) -> bool:
    """True when evaluating ``e`` unconditionally could fault or cost a loop (loads, division,
    reductions): such a Select side is evaluated under a branch."""
    return _contains(e, lambda n: isinstance(n, (ir.Load, ir.Reduce))
                     or (isinstance(n, ir.BinOp) and n.op in ("//", "%")))


class _Module:
    """Module-wide pieces: runtime globals, intrinsics, helper functions."""

    def __init__(self, program: ir.Program, vector_bits: int) -> None:
        self.program = program
        self.m = ll.Module(name=program.name)
        self.vector_bits = vector_bits
        import llvmlite.binding as llvm

        self.x86 = llvm.get_process_triple().startswith(("x86_64", "i686", "i386"))
        self.fns: dict[str, ll.Function] = {}
        # team state: generation (work published), stop flag, nthreads, barrier count+generation
        self.g_gen = self._global("cx_gen", I32)
        self.g_gen0 = self._global("cx_gen0", I32)
        self.g_stop = self._global("cx_stop_flag", I32)
        self.g_nth = self._global("cx_nthreads", I32, 1)
        self.g_bar_count = self._global("cx_bar_count", I32)
        self.g_bar_gen = self._global("cx_bar_gen", I32)
        self.g_bufs = self._global("cx_args_bufs", PTR, None)
        self.g_sizes = self._global("cx_args_sizes", PTR, None)
        self.g_threads = ll.GlobalVariable(self.m, ll.ArrayType(I64, MAX_THREADS), "cx_threads")
        self.g_threads.linkage = "internal"
        self.g_threads.initializer = ll.Constant(ll.ArrayType(I64, MAX_THREADS), None)
        # idle workers asleep on cx_gen, the futex syscall number, the call's interrupt word,
        # the interrupted-call flag, per thread its setjmp buffer (see team.py)
        self.g_sleepers = self._global("cx_sleepers", I32)
        self.g_futex = self._global("cx_futex_nr", I64)
        self.g_intr = self._global("cx_interrupt", PTR, None)
        self.g_abort = self._global("cx_abort", I32)
        self.g_abort_ack = self._global("cx_abort_ack", I32)
        self.g_jmp = ll.GlobalVariable(self.m, ll.ArrayType(PTR, MAX_THREADS), "cx_jmp")
        self.g_jmp.linkage = "internal"
        self.g_jmp.initializer = ll.Constant(ll.ArrayType(PTR, MAX_THREADS), None)
        self.profile = False

    def enable_profile(self) -> None:
        """Profiling build: per-thread cycle counts at every barrier (see :func:`generate`)."""
        self.profile = True
        ev = ll.ArrayType(I64, MAX_THREADS * PROFILE_EVENTS * 2)
        self.g_prof_events = ll.GlobalVariable(self.m, ev, "cx_prof_events")
        self.g_prof_events.initializer = ll.Constant(ev, None)
        cnt = ll.ArrayType(I32, MAX_THREADS * 16)  # one cache line per thread
        self.g_prof_count = ll.GlobalVariable(self.m, cnt, "cx_prof_count")
        self.g_prof_count.initializer = ll.Constant(cnt, None)
        self.g_prof_count.align = 64
        st = ll.ArrayType(I64, MAX_THREADS * 8)
        self.g_prof_start = ll.GlobalVariable(self.m, st, "cx_prof_start")
        self.g_prof_start.initializer = ll.Constant(st, None)
        self.g_prof_start.align = 64
        tick = ll.Function(self.m, ll.FunctionType(I64, []), "cx_prof_tick")  # for calibration
        tb = ll.IRBuilder(tick.append_basic_block("entry"))
        tb.ret(tb.call(self.decl("llvm.readcyclecounter", I64, []), []))

    def prof_slot(self, b: ll.IRBuilder, g: ll.GlobalVariable, index: ll.Value, ty: ll.Type) -> ll.Value:
        base = b.inttoptr(b.ptrtoint(g, I64), PTR)  # an untyped pointer (llvmlite types globals)
        return b.gep(base, [index], inbounds=True, source_etype=ty)

    def prof_start(self, b: ll.IRBuilder, tid: ll.Value) -> None:
        """Thread ``tid`` starts a call: its start time."""
        t = b.call(self.decl("llvm.readcyclecounter", I64, []), [])
        b.store(t, self.prof_slot(b, self.g_prof_start, b.mul(tid, ll.Constant(I32, 8)), I64))

    def prof_reset(self, b: ll.IRBuilder) -> None:
        """Before a call is published (thread 0): every thread's event count to 0."""
        for t in range(MAX_THREADS):
            b.store(ll.Constant(I32, 0), self.prof_slot(b, self.g_prof_count, ll.Constant(I32, t * 16), I32))

    def prof_record(self, b: ll.IRBuilder, tid: ll.Value, t0: ll.Value, t1: ll.Value) -> None:
        slot = self.prof_slot(b, self.g_prof_count, b.mul(tid, ll.Constant(I32, 16)), I32)
        k = b.load(slot, typ=I32)
        k = b.select(b.icmp_signed("<", k, ll.Constant(I32, PROFILE_EVENTS - 1)), k, ll.Constant(I32, PROFILE_EVENTS - 1))
        base = b.mul(b.add(b.mul(tid, ll.Constant(I32, PROFILE_EVENTS)), k), ll.Constant(I32, 2))
        b.store(t0, self.prof_slot(b, self.g_prof_events, base, I64))
        b.store(t1, self.prof_slot(b, self.g_prof_events, b.add(base, ll.Constant(I32, 1)), I64))
        b.store(b.add(k, ll.Constant(I32, 1)), slot)

    def _global(self, name: str, ty: ll.Type, value: int | None = 0) -> ll.GlobalVariable:
        g = ll.GlobalVariable(self.m, ty, name)
        g.linkage = "internal"
        g.initializer = ll.Constant(ty, value)
        g.align = 64  # one cache line each: no false sharing between the spin words
        return g

    def decl(self, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        if name not in self.fns:
            self.fns[name] = ll.Function(self.m, ll.FunctionType(ret, args), name)
        return self.fns[name]

    def intrinsic(self, name: str, dtype: str, nargs: int = 1, width: int = 0) -> ll.Function:
        """``llvm.<name>`` for a float type, on ``width``-lane vectors when width > 0."""
        t = LTYPE[dtype]
        suffix = "f32" if dtype == "float32" else "f64"
        if width:
            t = ll.VectorType(t, width)
            suffix = f"v{width}{suffix}"
        return self.decl(f"llvm.{name}.{suffix}", t, [t] * nargs)

    def exp_f32_fn(self, ty: ll.VectorType) -> ll.Function:
        """``cx_exp_v<W>f32``: the inline float32 exp polynomial (:meth:`_KernelGen.exp_f32`) as
        one ``noinline`` function per vector width, called by every activation: a jammed level
        has dozens of them, and one copy instead of one each keeps the IR (compile time) small;
        the call costs a few cycles next to a node's 256-step reductions."""
        name = f"cx_exp_v{ty.count}f32"
        if name not in self.fns:
            fn = ll.Function(self.m, ll.FunctionType(ty, [ty]), name)
            fn.linkage = "internal"
            fn.attributes.add("noinline")
            fn.attributes.add("nounwind")
            fn.attributes.add("readnone")
            self.fns[name] = fn
            gen = _HostExpr(ll.IRBuilder(fn.append_basic_block("entry")), {})
            gen.mod = self
            gen.b.ret(gen.exp_f32(fn.args[0]))
        return self.fns[name]

    def pause(self, b: ll.IRBuilder) -> None:
        """A spin-wait hint (x86 ``pause``); nothing on other architectures."""
        if self.x86:
            b.call(self.decl("llvm.x86.sse2.pause", VOID, []), [])


class _KernelGen:
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
        self.last_loop_synced = False
        self.loop_id = 0
        self.vec: _VecCtx | None = None  # set while emitting the body of a vectorized loop
        self.jam: _JamCtx | None = None  # set while emitting a group of jammed nodes
        self.jam_off = 0  # > 0 inside a reduction's body: no fusion across nodes there
        self.memo: dict = {}  # inside a jammed reduction loop: values shared by its nodes
        self.compact = 0  # > 0: code that rarely runs (a jammed level's fallback): keep it small
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
        if self.varying(ir.Seq(()) if not index else _Idx(index)):
            return self.vector_access(name, index, None)
        ptr, ty = self.address(name, index)
        return self.b.load(ptr, typ=ty)

    def store(self, name: str, index: tuple[ir.Expr, ...], value: ll.Value) -> None:
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
        elem = LTYPE[self.allocs[name].dtype if name in self.allocs else self.p.buffer(name).dtype]
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
                return self.b.load(ptr, typ=vt, align=align)
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
        return out if value is None else None

    def flat_offset(self, name: str, index: tuple[ir.Expr, ...]) -> tuple[ll.Value, ll.Type]:
        """The row-major element offset (i64, a vector when the index varies) and element type."""
        if name in self.allocs:
            a = self.allocs[name]
            shape: tuple = tuple(ir.Const(d) for d in a.shape)
            dtype = a.dtype
        else:
            bf = self.p.buffer(name)
            shape, dtype = bf.shape, bf.dtype
        if len(index) != len(shape):
            raise CodegenError(f"access {name} with {len(index)} indices; it has {len(shape)} dims")
        b = self.b
        off = self.i64(self.expr(index[0]))
        for i, d in zip(index[1:], shape[1:]):
            off, dim = self.match(off, self.i64(self.expr(d)))
            off = self.int_op("mul", off, dim)
            off, ii = self.match(off, self.i64(self.expr(i)))
            off = self.int_op("add", off, ii)
        return off, LTYPE[dtype]

    def address(self, name: str, index: tuple[ir.Expr, ...]) -> tuple[ll.Value, ll.Type]:
        off, ty = self.flat_offset(name, index)
        if _is_vec(off):
            raise CodegenError(f"internal: vector address for {name}")
        return self.b.gep(self.ptrs[name], [off], inbounds=True, source_etype=ty), ty

    def fconst(self, value: float, dtype: str) -> ll.Constant:
        return ll.Constant(LTYPE[dtype], float(value))

    # ---------------------------------------------------------------- expressions
    def expr(self, e: ir.Expr) -> ll.Value:
        b = self.b
        if self.memo and e in self.memo:
            return self.memo[e]
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
        w = self.vec.width if vary else 0
        b.position_at_end(then_bb)
        x = self.expr(e.a)
        if vary and not _is_vec(x):
            x = self.splat(x, w)
        then_end = b.block
        b.branch(done)
        b.position_at_end(else_bb)
        y = self.expr(e.b)
        if vary and not _is_vec(y):
            y = self.splat(y, w)
        else_end = b.block
        b.branch(done)
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
            if _width(x) and EXP_OUTLINED and (self.compact or (self.jam is not None and self.jam.reduces_any)):
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

    def reduce(self, e: ir.Reduce) -> ll.Value:
        if self.jam is not None and not self.jam_off and self.jam_dep(e.body) \
                and not self.jam_dep(e.start) and not self.jam_dep(e.stop):
            # one loop for the group (outermost reductions only); a range that differs per
            # node (CSR children) and everything nested in a reduction runs per node
            q = next((k for k, c in enumerate(self.jam.copies)
                      if all(self.env.get(n) is c[n] for n in c)), None)
            if q is None:
                raise CodegenError("internal: jammed reduction outside a node copy")
            return self.jam_reduce(e, q)
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
                self.jam_off += 1
                try:
                    v = self.expr(body)
                finally:
                    del self.env[base]
                    self.jam_off -= 1
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
            self.jam_off += 1
            try:
                v = self.expr(e.body)
            finally:
                del self.env[e.var]
                self.jam_off -= 1
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
            ptr = self.entry_builder.alloca(ty, size=ll.Constant(I32, n), name=s.name)
            ptr.align = 64
            if s.name in self.ptrs or s.name in self.allocs:
                raise CodegenError(f"alloc {s.name} shadows a buffer")
            self.ptrs[s.name] = ptr
            self.allocs[s.name] = s
            self.dtypes[s.name] = s.dtype
            try:
                self.stmt(s.body)
            finally:
                del self.ptrs[s.name], self.allocs[s.name], self.dtypes[s.name]
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
        stores = _contains(s, lambda n: isinstance(n, ir.Store) and n.buffer not in self.allocs
                           and not self._inner_alloc(s, n.buffer))
        if not stores:
            return False
        return not _contains(s, lambda n: isinstance(n, ir.Barrier)
                             or (isinstance(n, ir.For) and n.kind in PARTITIONED_KINDS))

    @staticmethod
    def _inner_alloc(s: ir.Stmt, name: str) -> bool:
        return _contains(s, lambda n: isinstance(n, ir.Alloc) and n.name == name)

    def jammed_node_loop(self, s: ir.For, conds: list, taken: ir.Stmt) -> None:
        """``for v``: groups of nodes whose guards all hold run ``taken`` together (every
        reduction one loop for the group, so each weight load serves every node of it), in the
        group sizes of ``JAM_STAGES`` (8, then 4, 2, 1 for what is left). A group with a failing
        guard, and any nodes left after the last stage, run node by node through the plain body:
        one copy shared by every stage (its range and the stage it returns to are phis), which
        keeps the IR small (compile time)."""
        b = self.b
        lo, hi = self.expr(s.start), self.expr(s.stop)
        plain = ir.For(s.var, s.start, s.stop, s.body, "serial")
        lets: list[tuple[str, ir.Expr]] = []
        body = s.body
        while isinstance(body, ir.Let):
            lets.append((body.var, body.value))
            body = body.body
        pad = JAM_PAD and _no_self_reads(s.body, s.var)
        stages = [(m, least if pad else m) for m, least in JAM_STAGES]
        plain_bb, out_bb = self.block("jam_plain"), self.block("jam_out")
        p_lo, p_hi, p_ret = [], [], []  # (value, block) incoming for the plain path's phis
        dones: list[tuple[ll.Block, ll.Instruction]] = []
        v = lo
        for n, (m, least) in enumerate(stages):
            v = self._jam_groups(s, conds, taken, lets, v, hi, m, least, n, plain_bb, (p_lo, p_hi, p_ret), dones)
        # nodes left after the last stage: the plain body up to hi, then out
        p_lo.append((v, b.block))
        p_hi.append((hi, b.block))
        p_ret.append((ll.Constant(I32, -1), b.block))
        b.branch(plain_bb)
        b.position_at_end(plain_bb)
        phis = []
        for name, inc in (("plain_lo", p_lo), ("plain_hi", p_hi), ("plain_ret", p_ret)):
            phi = b.phi(I32, name=name)
            for val, bb in inc:
                phi.add_incoming(val, bb)
            phis.append(phi)
        self.compact += 1  # the exception (a failing guard) or the last node or two: small code
        try:
            self._plain_range(plain, phis[0], phis[1])
        finally:
            self.compact -= 1
        end = b.block
        sw = b.switch(phis[2], out_bb)
        for n, (done, nxt) in enumerate(dones):
            sw.add_case(ll.Constant(I32, n), done)
            nxt.add_incoming(phis[1], end)
        b.position_at_end(out_bb)
        self.last_loop_synced = False

    def _jam_groups(self, s: ir.For, conds: list, taken: ir.Stmt, lets: list, lo: ll.Value, hi: ll.Value,
                    m: int, least: int, stage: int, plain_bb: ll.Block, plain_in: tuple, dones: list) -> ll.Value:
        """Groups of ``m`` nodes from ``lo`` while ``least`` (<= m) nodes remain before ``hi``;
        returns the first node not done (the builder is positioned after the groups). With
        ``least < m`` a short last group repeats its last node (same inputs, same values stored
        to the same rows, so harmless when the body reads nothing it stores). A group with a
        failing guard goes to ``plain_bb`` for its nodes and comes back (``dones[stage]``)."""
        b = self.b
        pad = least < m
        pre = b.block
        head, group, single, one, done = (self.block(f"{n}{m}") for n in ("jam_head", "jam_group", "jam_single", "jam_one", "jam_done"))
        b.branch(head)
        b.position_at_end(head)
        v0 = b.phi(I32, name=f"{s.var}_jam{m}")
        v0.add_incoming(lo, pre)
        room = b.icmp_signed("<=", b.add(v0, ll.Constant(I32, least)), hi)
        if pad:
            last_node = b.sub(hi, ll.Constant(I32, 1))
        check = self.block(f"jam_check{m}")
        b.cbranch(room, check, single)
        b.position_at_end(check)
        copies: list[dict[str, tuple]] = []
        ok = ll.Constant(I1, 1)
        for q in range(m):
            vq = b.add(v0, ll.Constant(I32, q)) if q else v0
            if pad and q:
                vq = b.select(b.icmp_signed("<", vq, hi), vq, last_node)
            env = {s.var: (vq, ir.INT)}
            saved = {k: self.env.get(k) for k in env}
            self.env.update(env)
            for name, value in lets:
                env[name] = (self.expr(value), self.dtype(value))
                self.env[name] = env[name]
            for c in conds:
                ok = b.and_(ok, self.to_bool(c))
            for name in list(env):
                if saved.get(name) is None:
                    self.env.pop(name, None)
                else:
                    self.env[name] = saved[name]
            copies.append(env)
        b.cbranch(ok, group, one)
        # m nodes together
        b.position_at_end(group)
        self.jam = _JamCtx(set(copies[0]), copies, taken, _no_self_reads(s.body, s.var))
        try:
            self.jam_stmt(taken)
        finally:
            for name in copies[0]:
                self.env.pop(name, None)
            self.jam = None
        group_end = b.block
        b.branch(done)
        # a group with a failing guard: its nodes one by one (the shared plain body)
        b.position_at_end(one)
        end = b.add(v0, ll.Constant(I32, m))
        if pad:
            end = b.select(b.icmp_signed("<", end, hi), end, hi)
        for inc, val in zip(plain_in, (v0, end, ll.Constant(I32, stage))):
            inc.append((val, one))
        b.branch(plain_bb)
        b.position_at_end(done)
        nxt = b.phi(I32, name=f"{s.var}_next{m}")
        nxt.add_incoming(self._after(group_end, v0, m), group_end)
        dones.append((done, nxt))
        v0.add_incoming(nxt, done)
        b.branch(head)
        b.position_at_end(single)
        return v0

    def _after(self, block: ll.Block, v0: ll.Value, m: int) -> ll.Value:
        """``v0 + m`` computed at the end of ``block`` (before its terminator)."""
        b = ll.IRBuilder(block)
        b.position_before(block.terminator)
        return b.add(v0, ll.Constant(I32, m))

    def _plain_range(self, loop: ir.For, lo: ll.Value, hi: ll.Value) -> None:
        """``loop``'s body for ``lo <= var < hi`` (values already computed)."""
        lo_name, hi_name = f"{loop.var}__lo", f"{loop.var}__hi"
        self.env[lo_name], self.env[hi_name] = (lo, ir.INT), (hi, ir.INT)
        try:
            self.loop(ir.For(loop.var, ir.Var(lo_name), ir.Var(hi_name), loop.body, "serial"))
        finally:
            del self.env[lo_name], self.env[hi_name]

    def jam_switch(self, q: int) -> None:
        for name, val in self.jam.copies[q].items():
            self.env[name] = val
        if self.vec is not None:
            for name, val in self.jam.copies[q].items():
                if _is_vec(val[0]):
                    self.vec.varying.add(name)

    def _per_node(self, e: ir.Node) -> bool:
        """Does ``e`` use a name whose value differs between the jammed nodes?"""
        c0 = self.jam.copies[0]
        return any(name in self.jam.names and name in c0 and any(c[name][0] is not c0[name][0] for c in self.jam.copies)
                   for name in _var_names(e))

    def jam_dep(self, e: ir.Node) -> bool:
        return not self.jam.names.isdisjoint(_var_names(e))

    def jam_stmt(self, s: ir.Stmt) -> None:
        """A statement for every jammed node (node-dependent parts once per node)."""
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.jam_stmt(x)
            return
        if isinstance(s, ir.For) and s.kind == "vectorized" and self.vec is None:
            self.vector_loop(s, vector_width(s), self.jam_stmt)
            return
        if isinstance(s, ir.Let):
            if not self.jam_dep(s.value):
                self.stmt(ir.Let(s.var, s.value, ir.Seq(())))  # validates; value is cheap to redo
                value = self.expr(s.value)
                for c in self.jam.copies:
                    c[s.var] = (value, self.dtype(s.value))
            else:
                for q, c in enumerate(self.jam.copies):
                    self.jam_switch(q)
                    c[s.var] = (self.expr(s.value), self.dtype(s.value))
            self.jam.names.add(s.var)
            if self.vec is not None and _is_vec(self.jam.copies[0][s.var][0]):
                self.vec.let_ir[s.var] = s.value
            try:
                self.jam_stmt(s.body)
            finally:
                self.jam.names.discard(s.var)
                for c in self.jam.copies:
                    c.pop(s.var, None)
                self.env.pop(s.var, None)
                if self.vec is not None:
                    self.vec.varying.discard(s.var)
                    self.vec.let_ir.pop(s.var, None)
            return
        if isinstance(s, ir.Store):
            for q in range(len(self.jam.copies)):
                self.jam_switch(q)
                self.store(s.buffer, s.index, self.expr(s.value))
            return
        raise CodegenError(f"internal: statement {type(s).__name__} in a jammed node group")

    def jam_reduce(self, e: ir.Reduce, q: int) -> ll.Value:
        """One loop computing reduction ``e`` for every jammed node (with up to ``FUSE`` - 1
        sibling reductions over the same range: see :meth:`_fusable`); returns node ``q``'s."""
        if e not in self.jam.reduces:
            self._jam_reduce_loop([(e, e), *self._fusable(e)])
        self.jam_switch(q)
        return self.jam.reduces[e][q]

    def _fusable(self, e: ir.Reduce) -> list[tuple[ir.Reduce, ir.Reduce]]:
        """Reductions of the jammed body over ``e``'s range that can be computed now, in ``e``'s
        loop: each loaded input (a child's ``h[c, k]``) then feeds several weight rows, so the
        loop is bound by FMAs, not loads. Needs a body that reads nothing it stores
        (``reorder_ok``), every name bound here, and no nested reduction. Those sharing most
        loads with ``e`` first; each as (the reduction, it over ``e``'s variable)."""
        n = len(self.jam.copies)
        room = FUSE_ACCS // n - 1
        if room <= 0 or not self.jam.reorder_ok:
            return []
        cands: list[tuple[int, int, ir.Reduce, ir.Reduce]] = []
        bound = set(self.env) | set(self.jam.copies[0])
        mine = {m for m in _walk(e.body) if isinstance(m, ir.Load)}
        for r in _walk(self.jam.body):
            if not isinstance(r, ir.Reduce) or r == e or r in self.jam.reduces:
                continue
            if (r.start, r.stop, r.op) != (e.start, e.stop, e.op) or any(r == c[2] for c in cands):
                continue
            if _contains(r.body, lambda m: isinstance(m, ir.Reduce)) or not self.jam_dep(r.body):
                continue
            names = {m.name for m in _walk(r.body) if isinstance(m, ir.Var)} - {r.var}
            if not names <= bound or e.var in names:
                continue
            body = ir.transform(r.body, lambda m, r=r: ir.Var(e.var) if isinstance(m, ir.Var) and m.name == r.var else None)
            shared = len(mine & {m for m in _walk(body) if isinstance(m, ir.Load)})
            cands.append((-shared, len(cands), r, ir.Reduce(r.op, e.var, r.start, r.stop, body)))
        cands.sort(key=lambda c: c[:2])
        if FUSE_BALANCED and cands:
            # the same number of loops, sizes as even as they go (10 reductions at most 3 a
            # loop: 3 3 2 2, not 3 3 3 1 -- a loop of one reduction per node has too few
            # accumulators to cover the FMA latency and a load for every FMA)
            total = len(cands) + 1
            loops = -(-total // (room + 1))
            room = -(-total // loops) - 1
        return [(r, renamed) for _, _, r, renamed in cands[:room]]

    def _jam_reduce_loop(self, group: list[tuple[ir.Reduce, ir.Reduce]]) -> None:
        b = self.b
        e = group[0][1]
        n = len(self.jam.copies)
        specs = []
        for key, r in group:
            dt = self.dtype(r.body)
            ty = LTYPE[dt]
            if self.varying(r.body) or any(_is_vec(c[m][0]) for c in self.jam.copies for m in c
                                           if _uses_var(r.body, m)):
                ty = ll.VectorType(ty, self.vec.width)
            init = self.const_like(ty, 0.0 if dt in ir.FLOAT_DTYPES else 0) if r.op != "max" else \
                self.const_like(ty, float("-inf") if dt in ir.FLOAT_DTYPES else -2**31)
            specs.append((r, dt, ty, init, key))
        lo, hi = self.expr(e.start), self.expr(e.stop)
        pre = b.block
        body_bb, exit_bb = self.block(f"jred_{e.var}"), self.block(f"jred_{e.var}_end")
        b.cbranch(b.icmp_signed("<", lo, hi), body_bb, exit_bb)
        b.position_at_end(body_bb)
        i = b.phi(I32, name=e.var)
        i.add_incoming(lo, pre)
        accs = [[b.phi(ty) for _ in range(n)] for _, _, ty, _, _ in specs]
        for (_, _, _, init, _), row in zip(specs, accs):
            for a in row:
                a.add_incoming(init, pre)
        # JAM_UNROLL iterations per trip when the trip count allows (LLVM's unroller is off)
        lo_c, hi_c = ir.const_int(e.start), ir.const_int(e.stop)
        unroll = JAM_UNROLL if (lo_c is not None and hi_c is not None and hi_c > lo_c
                                and (hi_c - lo_c) % JAM_UNROLL == 0) else 1
        nxts: list[list] = [list(row) for row in accs]
        self.jam_off += 1
        try:
            for u in range(unroll):
                iu = i if u == 0 else b.add(i, ll.Constant(I32, u), flags=["nsw"])
                self.env[e.var] = (iu, ir.INT)
                self.memo.clear()
                # a product's node-independent factor (the weight load) is emitted once, not per node
                for r, _, _, _, _ in specs:
                    if isinstance(r.body, ir.BinOp) and r.body.op == "*":
                        for x, y in ((r.body.a, r.body.b), (r.body.b, r.body.a)):
                            if x not in self.memo and not self._per_node(x) and self._per_node(y):
                                self.memo[x] = self.expr(x)
                                break
                for k in range(n):
                    self.jam_switch(k)
                    for g, (r, dt, _, _, _) in enumerate(specs):
                        nxts[g][k] = self.accumulate(r.op, dt, nxts[g][k], r.body)
        finally:
            del self.env[e.var]
            self.memo.clear()
            self.jam_off -= 1
        i_next = b.add(i, ll.Constant(I32, unroll), flags=["nsw"])
        end = b.block
        b.cbranch(b.icmp_signed("<", i_next, hi), body_bb, exit_bb)
        i.add_incoming(i_next, end)
        b.position_at_end(exit_bb)
        for g, (r, dt, ty, init, key) in enumerate(specs):
            outs = []
            for a, nxt in zip(accs[g], nxts[g]):
                a.add_incoming(nxt, end)
                out = b.phi(ty)
                out.add_incoming(init, pre)
                out.add_incoming(nxt, end)
                if r.op == "mean":
                    cnt = b.sitofp(b.select(b.icmp_signed(">", b.sub(hi, lo), ll.Constant(I32, 0)), b.sub(hi, lo),
                                            ll.Constant(I32, 1)), LTYPE[dt])
                    out, cnt = self.match(out, cnt)
                    out = b.fdiv(out, cnt)
                outs.append(out)
            self.jam.reduces[key] = outs

    def vector_loop(self, s: ir.For, width: int, emit: Callable[[ir.Stmt], None] | None = None) -> None:
        """The body of a vectorized loop once, on ``width``-lane vectors (no loop at all),
        emitted by ``emit`` (``self.stmt`` by default; ``self.jam_stmt`` inside a jammed group)."""
        start = ir.const_int(s.start)
        lanes = ll.Constant(ll.VectorType(I32, width), [start + k for k in range(width)])
        self.vec = _VecCtx(s.var, width, start, {s.var}, {})
        self.env[s.var] = (lanes, ir.INT)
        try:
            (emit or self.stmt)(s.body)
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
        if isinstance(s, _JamFor) and self.vec is None and self.jam is None:
            plan = jam_plan(s)
            if plan is not None:
                self.jammed_node_loop(s, *plan)
                return
        if self.vec is None and not self.partitioned:
            swapped = interchange_node_loop(s)
            if swapped is not None:
                for loop in swapped:
                    self.loop(loop)
                return
        start, stop = self.expr(s.start), self.expr(s.stop)
        split = s.kind in PARTITIONED_KINDS and not self.partitioned
        if split:
            # contiguous chunk per thread: [start + tid*chunk, min(stop, start + (tid+1)*chunk))
            n = b.sub(stop, start, flags=["nsw"])
            n = b.select(b.icmp_signed(">", n, ll.Constant(I32, 0)), n, ll.Constant(I32, 0))
            chunk = b.sdiv(b.add(n, b.sub(self.nth, ll.Constant(I32, 1))), self.nth)
            lo = b.add(start, b.mul(self.tid, chunk, flags=["nsw"]), flags=["nsw"])
            hi = b.add(lo, chunk, flags=["nsw"])
            hi = b.select(b.icmp_signed("<", hi, stop), hi, stop)
            start, stop = lo, hi
        pre = b.block
        body_bb, exit_bb = self.block(f"for_{s.var}"), self.block(f"for_{s.var}_end")
        b.cbranch(b.icmp_signed("<", start, stop), body_bb, exit_bb)
        b.position_at_end(body_bb)
        i = b.phi(I32, name=s.var)
        i.add_incoming(start, pre)
        if split and GATHER_PREFETCH:
            self._prefetch_gathered_rows(s, i, stop)
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
        if split:  # fork-join semantics of a CPU parallel loop (as OpenMP's implicit barrier)
            b.call(self.barrier_fn, [self.nth, self.tid])
        self.last_loop_synced = split

    def _prefetch_gathered_rows(self, s: ir.For, i: ll.Value, stop: ll.Value) -> None:
        """A node loop whose body gathers rows of a param by a per-node index (the leaves'
        ``E_proj[word_ids[u], :]``, rows of a table too big for any cache): prefetch the rows
        of node ``i + GATHER_PREFETCH`` (clamped to the thread's last node), whole rows of at
        most 16 KB, one prefetch per cache line. Such a loop waits on memory: each node's
        rows are a few dozen lines from DRAM, and the out-of-order window reaches only the
        next node's first ones."""
        body = s.body
        if not (isinstance(body, ir.Let) and isinstance(body.value, ir.Load)
                and body.value.index == (ir.Var(s.var),)
                and self.p.buffer(body.value.buffer).role == "index"):
            return
        x = body.var
        rows = []
        for m in _walk(body.body):
            if (isinstance(m, ir.Load) and m.buffer not in self.allocs
                    and m.buffer not in (name for name, _ in rows)
                    and len(m.index) == 2 and m.index[0] == ir.Var(x)):
                bf = self.p.buffer(m.buffer)
                cols = ir.const_int(bf.shape[1])
                if bf.role == "param" and cols is not None and 0 < cols * SIZEOF[bf.dtype] <= 16384:
                    rows.append((m.buffer, cols))
        if not rows:
            return
        b = self.b
        ahead = b.add(i, ll.Constant(I32, GATHER_PREFETCH))
        last = b.sub(stop, ll.Constant(I32, 1))
        ahead = b.select(b.icmp_signed("<", ahead, last), ahead, last)
        xn = b.load(b.gep(self.ptrs[body.value.buffer], [b.sext(ahead, I64)], inbounds=True,
                          source_etype=I32), typ=I32)
        xn = b.sext(b.select(b.icmp_signed(">", xn, ll.Constant(I32, 0)), xn, ll.Constant(I32, 0)), I64)
        fn = self.mod.decl("llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
        for name, cols in rows:
            dtype = self.p.buffer(name).dtype
            row = b.gep(self.ptrs[name], [b.mul(xn, ll.Constant(I64, cols))], source_etype=LTYPE[dtype])
            for off in range(0, cols * SIZEOF[dtype], 64):
                at = b.gep(row, [ll.Constant(I64, off)], source_etype=I8)
                b.call(fn, [at, ll.Constant(I32, 0), ll.Constant(I32, 3), ll.Constant(I32, 1)])

    def emit(self) -> ll.Function:
        self.stmt(self.kernel.body)
        self.b.ret_void()
        self.entry_builder.branch(self.fn.basic_blocks[1])  # allocas first, then the body
        return self.fn


class _SplatConst(ll.Constant):
    """A vector constant with every lane equal (or undef), printed in LLVM's short form
    ``splat (float 1.0)`` / ``undef``: llvmlite writes every lane out, which for 16-lane
    vectors made most of the IR text and of its formatting and parsing time."""

    def __init__(self, ty: ll.VectorType, elem: ll.Constant | None) -> None:  # noqa: D107
        self.type = ty
        self.constant = elem

    def _get_reference(self) -> str:
        if self.constant is None:
            return "undef"
        return f"splat ({self.constant.type} {self.constant.get_reference()})"


def _splat_const(ty: ll.VectorType, elem: ll.Constant | None) -> ll.Constant:
    """``ty`` with every lane ``elem`` (None: undef)."""
    return _SplatConst(ty, elem)


_ZERO_MASKS: dict[int, ll.Constant] = {}


def _zero_mask(width: int) -> ll.Constant:
    """The all-zero shuffle mask (a broadcast), one object per width (its text is cached)."""
    if width not in _ZERO_MASKS:
        _ZERO_MASKS[width] = ll.Constant(ll.VectorType(I32, width), [0] * width)
    return _ZERO_MASKS[width]


def _is_vec(v: ll.Value) -> bool:
    return isinstance(v.type, ll.VectorType)


def _width(v: ll.Value) -> int:
    return v.type.count if _is_vec(v) else 0


SIZEOF_LL = {"i32": 4, "i1": 1, "float": 4, "double": 8}


@dataclass(frozen=True)
class _Idx(ir.Node):
    """A tuple of index expressions as one node (for the varying test)."""

    index: tuple


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


def _vkey(v: ll.Value):
    if isinstance(v, ll.Constant) and isinstance(v.constant, int):
        return (str(v.type), v.constant)
    return id(v)


def _exact_div(e: ir.Expr, d: int) -> ir.Expr | None:
    """``e // d`` for an int expression that ``_divisor`` shows is a multiple of ``d``, written
    without a division (so exact that truncating and flooring agree), or None."""
    c = ir.const_int(e)
    if c is not None:
        return ir.Const(c // d)
    if isinstance(e, ir.BinOp):
        if e.op in ("+", "-"):
            a, b = _exact_div(e.a, d), _exact_div(e.b, d)
            return None if a is None or b is None else ir.BinOp(e.op, a, b)
        if e.op == "*":
            for x, y in ((e.a, e.b), (e.b, e.a)):
                k = ir.const_int(y)
                if k is not None and k % d == 0:
                    return x if k // d == 1 else ir.BinOp("*", x, ir.Const(k // d))
                if _divisor(x) % d == 0:
                    q = _exact_div(x, d)
                    if q is not None:
                        return ir.BinOp("*", q, y)
    return None


def _divisor(e: ir.Expr) -> int:
    """A known divisor of an int expression's value (0: the value is 0)."""
    import math

    c = ir.const_int(e)
    if c is not None:
        return abs(c)
    if isinstance(e, ir.BinOp):
        if e.op == "*":
            return _divisor(e.a) * _divisor(e.b)
        if e.op in ("+", "-"):
            return math.gcd(_divisor(e.a), _divisor(e.b))
        if e.op == "//":
            c = ir.const_int(e.b)
            m = _divisor(e.a)
            return m // c if c and c > 0 and m % c == 0 else 1
    return 1


def _is_node_loop(loop: ir.For) -> bool:
    """The loop over the nodes of one level (``level_offsets[l]..level_offsets[l+1]``) or over
    the leaves (``0..NL``): by the linearizer's contract its iterations are independent."""
    s, t = loop.start, loop.stop
    if isinstance(s, ir.Load) and isinstance(t, ir.Load):
        return s.buffer == t.buffer == "level_offsets"
    return s == ir.Const(0) and t == ir.Var("NL")


def interchange_node_loop(loop: ir.For) -> list[ir.For] | None:
    """``for v in nodes: lets; parallel for j1 ...; parallel for j2 ...`` ->
    ``parallel for j1: for v in nodes: lets; ...`` then the same for j2, or None.

    Threads then split the *hidden units* (rows of the weight matrices) instead of the nodes:
    each core reads only its share of the weights, at every level, so that share stays in its
    L2 across levels (the CPU form of model persistence), every level keeps every core busy
    (a level of one node too), and one weight block is reused for every node of the level
    before the next block is read. Legal because the nodes of a level are independent (the
    linearizer's contract) and the j loops are parallel (no carried dependence); their bounds
    must not depend on the node. Applies when every statement after the lets is a parallel
    loop (the lowering's ``parallel="hidden"`` or ``"both"``)."""
    if not _is_node_loop(loop):
        return None
    if loop.kind == "parallel" and INTERCHANGE_NEEDS_REDUCE and not _contains(
            loop.body, lambda n: isinstance(n, ir.Reduce)):
        # no weights to keep in L2 (the leaves: gathers from the embedding table): threads split
        # the nodes, and each node's rows are read front to back (the hardware prefetcher
        # follows them; interchanged, every step touched a new row of a 61 MB table)
        return None
    lets: list[tuple[str, ir.Expr]] = []
    body = loop.body
    while isinstance(body, ir.Let):
        lets.append((body.var, body.value))
        body = body.body
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    if not stmts or not all(isinstance(x, ir.For) and (x.kind == "parallel" or (
            x.kind == "serial" and loop.kind == "parallel" and _rows_independent(x, loop.var)))
            for x in stmts):
        return None
    bound = {loop.var} | {name for name, _ in lets}
    if RESTREAM_CHECK and loop.kind == "parallel" and any(_restreams_node_data(x, bound) for x in stmts):
        return None
    out = []
    for inner in stmts:
        if _contains(ir.Seq((ir.Store("_", (inner.start, inner.stop), ir.Const(0)),)),
                     lambda n: isinstance(n, ir.Var) and n.name in bound):
            return None
        nested: ir.Stmt = inner.body
        for name, value in reversed(lets):
            nested = ir.Let(name, value, nested)
        out.append(ir.For(inner.var, inner.start, inner.stop,
                          _JamFor(loop.var, loop.start, loop.stop, nested, "serial"), "parallel"))
    return out


def _restreams_node_data(inner: ir.For, node_names: set[str]) -> bool:
    """Would interchanging make each iteration of ``inner`` re-read a block of every node's data?

    True when a reduction inside ``inner`` loads node data (an index naming the node or one of
    its lets: a child's state) at an index that varies with a loop nested inside ``inner``: a
    matrix operand (MV-RNN's ``sum_k W_M[i, k] * M[ch, k, j]`` under ``for i: for j``). With the
    node loop innermost, every row ``i`` would stream the child matrices of the whole level
    (MV-RNN b10: 111 nodes x 32 KB per row, from L3) instead of each node's 32 KB staying in L1
    for all its rows; a GEMV's ``h[ch, k]`` (indexed by the reduction only) is a short vector
    reused across the hidden units, which is why interchanging pays there."""
    nested = set()
    for n in _walk(inner.body):
        if isinstance(n, ir.For):
            nested.add(n.var)
    for n in _walk(inner.body):
        if isinstance(n, ir.Let) and _contains(n.value, lambda m: isinstance(m, ir.Var) and m.name in nested):
            nested.add(n.var)
    if not nested:
        return False
    for r in _walk(inner.body):
        if not isinstance(r, ir.Reduce):
            continue
        for ld in _walk(r.body):
            if isinstance(ld, ir.Load) and ld.index:
                names = {m.name for m in _walk(_Idx(ld.index)) if isinstance(m, ir.Var)}
                if names & node_names and r.var in names and names & nested:
                    return True
    return False


def _rows_independent(inner: ir.For, node: str) -> bool:
    """A serial loop directly inside a parallel node loop (``parallel="nodes"``): may its
    iterations run on different threads? Yes when every store writes element ``[node, ...]``
    at an index that uses the loop's variable, and every load of a stored buffer either reads a
    row other than ``node`` (another node: a child, done at an earlier level) or exactly the
    element the same iteration stores."""
    derived = {inner.var}
    for n in _walk(inner.body):
        if isinstance(n, ir.Let) and _contains(n.value, lambda m: isinstance(m, ir.Var) and m.name in derived):
            derived.add(n.var)
    stores = [n for n in _walk(inner.body) if isinstance(n, ir.Store)]
    if not stores:
        return False
    written: dict[str, set] = {}
    for st in stores:
        if not st.index or st.index[0] != ir.Var(node):
            return False
        if not _contains(_Idx(st.index), lambda m: isinstance(m, ir.Var) and m.name in derived):
            return False
        written.setdefault(st.buffer, set()).add(st.index)
    for ld in _walk(inner.body):
        if isinstance(ld, ir.Load) and ld.buffer in written:
            if ld.index and ld.index[0] == ir.Var(node) and ld.index not in written[ld.buffer]:
                return False
            if ld.index and _contains(ld.index[0], lambda m: isinstance(m, ir.Var) and m.name == node) \
                    and ld.index[0] != ir.Var(node):
                return False
    return True


def vector_width(loop: ir.For) -> int:
    """Lanes for emitting ``loop`` as straight-line vector code, or 0 (then it stays a loop with
    vectorize metadata): a constant trip count of 2..64 and a body of lets, stores and
    uniform ifs whose lane-dependent selects/ands/ors have sides that are safe to evaluate for
    every lane (no masked loads are generated), reductions with uniform ranges."""
    lo, hi = ir.const_int(loop.start), ir.const_int(loop.stop)
    if lo is None or hi is None or not 2 <= hi - lo <= 64:
        return 0
    varying = {loop.var}

    def varies(e: ir.Node) -> bool:
        return _contains(e, lambda n: isinstance(n, ir.Var) and n.name in varying)

    for n in _walk(loop.body):
        if isinstance(n, (ir.For, ir.Alloc, ir.Barrier)):
            return 0
        if isinstance(n, ir.Let) and varies(n.value):
            varying.add(n.var)
    for n in _walk(loop.body):
        if isinstance(n, ir.If) and varies(n.cond):
            return 0
        if isinstance(n, ir.Select) and varies(n.cond) and (_needs_branch(n.a) or _needs_branch(n.b)):
            return 0
        if isinstance(n, ir.BinOp) and n.op in ("and", "or") and _needs_branch(n.b) and varies(n):
            return 0
        if isinstance(n, ir.Reduce) and (varies(n.start) or varies(n.stop)):
            return 0
        if isinstance(n, ir.Store) and not varies(_Idx(n.index)):
            return 0
    return hi - lo


WIDE_LANES = 64  # widest straight-line vector a matrix nest's split inner loop is merged into


def widen_vector_nests(body: ir.Stmt) -> ir.Stmt:
    """``for i: for jw in 0..n: vectorized for jv in 0..W: let j = jw*W + jv; S`` ->
    ``for i: vectorized for j in 0..n*W: S`` when ``n*W <= WIDE_LANES`` and S uses neither
    ``jw`` nor ``jv`` (the lowering's split of a matrix nest's column loop).

    One vector of ``n*W`` lanes is ``n`` registers that share every lane-invariant operand:
    in ``sum_k A[i, k] * B[k, j]`` the broadcast of ``A[i, k]`` and the loop overhead serve
    ``n`` FMAs instead of one (MV-RNN's 64x64 products: 1.25 loads per FMA instead of 2, and
    ``n`` independent accumulator chains). Only inside another loop (a row loop): a node
    loop's own hidden loops are the ones interchanged and jammed, where ``n`` registers per
    node times the jammed nodes would not fit in the register file."""

    def split_form(st: ir.Stmt) -> ir.For | None:
        if not (isinstance(st, ir.For) and st.kind == "serial" and isinstance(st.body, ir.For)):
            return None
        vec = st.body
        n, w = ir.const_int(st.stop), ir.const_int(vec.stop)
        if (vec.kind != "vectorized" or ir.const_int(st.start) != 0 or ir.const_int(vec.start) != 0
                or n is None or w is None or n * w > WIDE_LANES or not isinstance(vec.body, ir.Let)):
            return None
        let = vec.body
        jw, jv = ir.Var(st.var), ir.Var(vec.var)
        if let.value not in (ir.BinOp("+", ir.BinOp("*", jw, ir.Const(w)), jv),
                             ir.BinOp("+", jv, ir.BinOp("*", jw, ir.Const(w)))):
            return None
        if _uses_var(let.body, st.var) or _uses_var(let.body, vec.var):
            return None
        return ir.For(let.var, ir.Const(0), ir.Const(n * w), let.body, "vectorized")

    def f(node: ir.Node) -> ir.Node | None:
        if isinstance(node, ir.For) and node.kind == "serial" and not _is_node_loop(node):
            wide = split_form(node.body)
            if wide is not None:
                return replace(node, body=wide)
        return None

    return ir.transform(body, f)


@dataclass(frozen=True)
class _JamFor(ir.For):
    """The node loop of an interchanged level (see :func:`interchange_node_loop`): its
    iterations are independent, so several nodes may be computed together (jammed)."""


INTERCHANGE_NEEDS_REDUCE = True  # a node-parallel loop without reductions is not interchanged
LANE_REDUCE = True  # scalar float sums along a contiguous row run on vectors (lane_reduce_loop)
RESTREAM_CHECK = True  # a node-parallel loop whose reductions read node matrices is not interchanged
JAM = 8  # nodes computed together: one weight vector load feeds JAM FMAs
#: (group size, fewest nodes left that run it) in order; a group run with fewer nodes left than
#: its size repeats its last node (only when JAM_PAD and the body reads nothing it stores, else
#: a group needs its size); the nodes left after the last stage run one by one.
JAM_STAGES: tuple[tuple[int, int], ...] = ((JAM, 6), (4, 3), (2, 2), (1, 1))
GATHER_PREFETCH = 2  # a node loop gathering param rows prefetches the rows of the node this far ahead (0: off)
FUSE_BALANCED = True  # a jam's fused loops get even shares of the reductions (see _fusable)
FUSE_ACCS = 24  # a jammed reduction loop takes sibling reductions up to this many accumulators
EXP_OUTLINED = True  # vector float32 exp: one noinline function per width (see _Module.exp_f32_fn)
JAM_UNROLL = 2  # iterations of a jammed reduction loop per trip (constant trip counts)
JAM_PAD = True  # a short last group repeats its last node (when the body reads nothing it stores)


def _no_self_reads(body: ir.Stmt, node: str) -> bool:
    """Does node ``node``'s body read nothing it stores (its own row of a stored buffer)? Then
    computing a node twice stores the same values twice. Other rows of a stored buffer are
    other nodes' (children, done at earlier levels: the level's nodes are independent)."""
    own = {node}
    for n in _walk(body):
        if isinstance(n, ir.Let) and isinstance(n.value, ir.Var) and n.value.name in own:
            own.add(n.var)
    stored: dict[str, set] = {}
    for n in _walk(body):
        if isinstance(n, ir.Store):
            stored.setdefault(n.buffer, set()).add(n.index)
    for n in _walk(body):
        if isinstance(n, ir.Load) and n.buffer in stored:
            if n.index in stored[n.buffer] or (n.index and _contains(
                    n.index[0], lambda m: isinstance(m, ir.Var) and m.name in own)):
                return False
    return True


class _JamCtx:
    """Nodes ``v0 .. v0+JAM-1`` being emitted together: per-node values of node-dependent names."""

    def __init__(self, names: set[str], copies: list[dict[str, tuple]], body: ir.Stmt | None = None,
                 reorder_ok: bool = False) -> None:
        self.names = names
        self.copies = copies
        self.reduces: dict = {}
        self.body = body  # the jammed statement (for fusing reductions)
        self.reorder_ok = reorder_ok  # it reads nothing it stores: reductions may run early
        # a body with reductions calls the outlined exp (next to its reductions a call is
        # cheap); one without (the leaves) keeps it inline
        self.reduces_any = body is not None and _contains(body, lambda n: isinstance(n, ir.Reduce))


def jam_plan(loop: ir.For) -> tuple[list, ir.Stmt] | None:
    """For a node loop ``lets; vectorized for ...`` whose guards depend only on the lets: the
    guard conditions and the body with every guard taken (used when all guards hold for all
    jammed nodes), or None when the body does not have that shape."""
    lets: list[tuple[str, ir.Expr]] = []
    body = loop.body
    while isinstance(body, ir.Let):
        lets.append((body.var, body.value))
        body = body.body
    if not isinstance(body, ir.For) or body.kind != "vectorized" or not vector_width(body):
        return None
    let_names = {n for n, _ in lets}
    conds = []
    for n in _walk(body):
        if isinstance(n, ir.Select) and _needs_branch(n.a) and not _needs_branch(n.b):
            names = {m.name for m in _walk(n.cond) if isinstance(m, ir.Var)}
            if names and names <= let_names and not _contains(n.cond, lambda m: isinstance(m, (ir.Load, ir.Reduce))):
                if n.cond not in conds:
                    conds.append(n.cond)
    taken = ir.transform(body, lambda m: m.a if isinstance(m, ir.Select) and m.cond in conds else None)
    for n in _walk(taken):
        if isinstance(n, (ir.If, ir.Alloc, ir.Barrier)):
            return None
        if isinstance(n, ir.Select) and (_needs_branch(n.a) or _needs_branch(n.b)):
            return None
        if isinstance(n, ir.BinOp) and n.op in ("and", "or") and _needs_branch(n.b):
            return None
    return conds, taken


class _LoopMD:
    """A distinct, self-referencing ``llvm.loop`` node. llvmlite's IR builder cannot express a
    self reference, so a named placeholder is patched in the module text."""

    def __init__(self, fn: str, ident: int, props: list) -> None:
        self.tag = f"cxloop_{fn}_{ident}"
        self.props = props
        self.md = None

    def placeholder(self, m: ll.Module):
        self.md = m.add_metadata([ll.MetaDataString(m, self.tag)] + self.props)
        return self.md


def _emit_barrier(mod: _Module) -> ll.Function:
    """``cx_barrier(nthreads, tid)``: the team barrier (:func:`team.emit_barrier`; with
    ``profile``, wrapped by a function that records when thread ``tid`` arrived and left)."""
    if mod.profile:
        return _emit_profiled_barrier(mod, team.emit_barrier(mod, "cx_barrier_wait"))
    return team.emit_barrier(mod, "cx_barrier")


PROFILE_EVENTS = 512  # barriers recorded per thread and call (profiling builds)


def _emit_profiled_barrier(mod: _Module, wait: ll.Function) -> ll.Function:
    """``cx_barrier(nthreads, tid)`` of a profiling build: the cycle counter when ``tid``
    arrives and when it leaves, appended to its row of ``cx_prof_events``."""
    fn = ll.Function(mod.m, ll.FunctionType(VOID, [I32, I32]), "cx_barrier")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    nth, tid = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    rdtsc = mod.decl("llvm.readcyclecounter", I64, [])
    t0 = b.call(rdtsc, [])
    b.call(wait, [nth, tid])
    t1 = b.call(rdtsc, [])
    mod.prof_record(b, tid, t0, t1)
    b.ret_void()
    return fn


def _emit_spmd(mod: _Module, kernels: dict[str, ll.Function], barrier: ll.Function) -> ll.Function:
    """``cx_spmd(bufs, sizes, tid, nthreads)``: the host steps, run by every thread."""
    p = mod.program
    fn = ll.Function(mod.m, ll.FunctionType(VOID, [PTR, PTR, I32, I32]), "cx_spmd")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    bufs_arg, sizes_arg, tid, nth = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    ptrs = [b.load(b.gep(bufs_arg, [ll.Constant(I64, i)], inbounds=True, source_etype=PTR), typ=PTR, align=8)
            for i in range(len(p.buffers))]
    sizes = {s.name: b.load(b.gep(sizes_arg, [ll.Constant(I64, i)], inbounds=True, source_etype=I32), typ=I32)
             for i, s in enumerate(p.sizes)}
    env = dict(sizes)

    def host_expr(e: ir.Expr) -> ll.Value:
        # host expressions use only sizes and host loop variables (the verifier guarantees it)
        kg = _HostExpr(b, env)
        return kg.expr(e)

    def steps(items: tuple[ir.Node, ...]) -> None:
        nonlocal b
        for st in items:
            if isinstance(st, ir.Launch):
                k = p.kernel(st.kernel)
                if len(st.args) != len(k.params):
                    raise CodegenError(f"launch of {k.name} with {len(st.args)} args; it takes {len(k.params)}")
                args = ptrs + [sizes[s.name] for s in p.sizes] + [host_expr(a) for a in st.args] + [tid, nth]
                b.call(kernels[st.kernel], args)
                b.call(barrier, [nth, tid])
            elif isinstance(st, ir.HostFor):
                lo, hi = host_expr(st.start), host_expr(st.stop)
                pre = b.block
                body_bb, exit_bb = fn.append_basic_block(f"host_{st.var}"), fn.append_basic_block(f"host_{st.var}_end")
                b.cbranch(b.icmp_signed("<", lo, hi), body_bb, exit_bb)
                b.position_at_end(body_bb)
                i = b.phi(I32, name=st.var)
                i.add_incoming(lo, pre)
                env[st.var] = i
                steps(st.body)
                del env[st.var]
                nxt = b.add(i, ll.Constant(I32, 1), flags=["nsw"])
                i.add_incoming(nxt, b.block)
                b.cbranch(b.icmp_signed("<", nxt, hi), body_bb, exit_bb)
                b.position_at_end(exit_bb)
            else:
                raise CodegenError(f"unknown host step {st!r}")

    steps(p.host)
    b.call(barrier, [nth, tid])
    b.ret_void()
    return fn


class _HostExpr(_KernelGen):
    """Int expressions of the host steps (sizes and host loop variables only)."""

    def __init__(self, builder: ll.IRBuilder, env: dict[str, ll.Value]) -> None:  # noqa: D401
        self.memo = {}
        self.icse, self.icse_keep = {}, []
        self.b = builder
        self.env = {k: (v, ir.INT) for k, v in env.items()}
        self.dtypes = {}

    def expr(self, e: ir.Expr) -> ll.Value:
        if isinstance(e, (ir.Load, ir.Reduce)):
            raise CodegenError(f"host expression {e} reads a buffer; host steps may use only sizes")
        return super().expr(e)


def _emit_team(mod: _Module, spmd: ll.Function) -> None:
    """``cx_run``, the worker loop, ``cx_start`` and ``cx_stop`` (:func:`team.emit_team`)."""
    team.emit_team(mod, spmd)


def generate(program: ir.Program, vector_bits: int = 0, profile: bool = False) -> str:
    """LLVM IR text for ``program`` exporting ``cx_run``, ``cx_start`` and ``cx_stop``.

    ``vector_bits`` (the target's SIMD width) lets LLVM use full-width vectors (zmm on
    AVX-512) instead of its default preference for 256-bit ones. ``profile`` builds a program
    that records the cycle counter (``llvm.readcyclecounter``) when each thread starts a call
    (``cx_prof_start[8 * tid]``) and when it arrives at and leaves each barrier
    (``cx_prof_events[tid, k, 0:2]``, ``cx_prof_count[16 * tid]`` events), with
    ``cx_prof_tick()`` to read the counter: see :meth:`CompiledProgram.profile`."""
    mod = _Module(program, vector_bits)
    if profile:
        mod.enable_profile()
    try:
        return _generate(mod, program, vector_bits)
    finally:
        _NAMES.clear()


def _generate(mod: "_Module", program: ir.Program, vector_bits: int) -> str:
    mod.loop_mds = []
    barrier = _emit_barrier(mod)
    kernels = {k.name: _KernelGen(mod, replace(k, body=widen_vector_nests(k.body)), barrier).emit()
               for k in program.kernels}
    spmd = _emit_spmd(mod, kernels, barrier)
    _emit_team(mod, spmd)
    text = str(mod.m)
    text = _patch_loop_md(text, mod.loop_mds)
    if vector_bits:
        attrs = f' "prefer-vector-width"="{vector_bits}" "min-legal-vector-width"="0"'
        lines = []
        for line in text.split("\n"):
            if line.startswith("define "):
                line += attrs
            lines.append(line)
        text = "\n".join(lines)
    return text


def _patch_loop_md(text: str, nodes: list[_LoopMD]) -> str:
    """Turn each placeholder ``!N = !{!"cxloop_...", props...}`` into ``distinct !{!N, props...}``."""
    import re

    if not nodes:
        return text
    tags = {node.tag for node in nodes}

    def fix(mobj: re.Match) -> str:
        ref, tag, rest = mobj.group(1), mobj.group(2), mobj.group(3)
        if tag not in tags:
            return mobj.group(0)
        return f"{ref} = distinct !{{{ref}{rest}}}"

    # one pass over the metadata at the end of the module (not one search per node)
    start = text.find("\n!")
    head, tail = (text, "") if start < 0 else (text[:start], text[start:])
    return head + re.sub(r'^(!\d+) = !\{!"(cxloop_[^"]*)"(.*)\}$', fix, tail, flags=re.M)
