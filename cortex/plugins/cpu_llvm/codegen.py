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
per thread, or, annotated "dynamic", claimed by the threads unit by unit at run time
(``kernel._KernelGen.claimed_loop``). Synchronization:

* ``Barrier("grid")`` is a team-wide spin barrier (a counter and a generation word);
* every kernel launch ends with a team barrier (a launch boundary is a sync point), so the
  ``per_level`` form is correct too;
* the partitioned loop ends with a team barrier (the fork-join semantics of a CPU ``parallel``
  loop, as OpenMP's implicit barrier in the C renderer); an explicit grid barrier right after
  it is not emitted twice; a dynamically split loop ends with a wait until its iterations are
  done (``team.finish_fn``) instead, where the code all threads run reads no buffer the program
  writes;
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
leave a branch-free inner loop. The generator makes no scheduling decision: a level's
interchange, its node jam (a private accumulator array addressed by constant slots, which the
generator keeps in registers: :mod:`.registers`), wide vector nests and row prefetches arrive
in the program, made by the schedule (``cortex.core.lowering.apply_schedule``); a loop annotated
``cold`` is emitted compact.
Integer arithmetic is 32-bit with ``nsw`` (as in the C renderer);
flat offsets are 64-bit. Math: ``exp log sqrt abs fma`` are LLVM intrinsics; ``tanh`` and
``sigmoid`` are written with ``exp`` (``sigmoid(x) = 1/(1+exp(-x))``, ``tanh(x) = 1 -
2/(exp(2x)+1)``, exact at +-inf).

Modules (one job each): this one is the driver and the thread team (:func:`generate`, the
module-wide :class:`_Module`, the barrier, ``cx_spmd``, ``cx_run``/``cx_start``/``cx_stop``);
:mod:`.kernel` emits one kernel function (statements, loops, loads and stores) with the mixins
:mod:`.expressions`, :mod:`.reductions` and :mod:`.registers`; :mod:`.lanes` the vectorized
loop's lane analysis; :mod:`.ir_queries` pure questions about the IR; :mod:`.llvm_types` the LLVM
types, constants and metadata helpers.
"""

from __future__ import annotations


from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm import team
from cortex.plugins.cpu_llvm.ir_queries import _NAMES, vector_width  # noqa: F401 (vector_width: API)
from cortex.plugins.cpu_llvm.kernel import _KernelGen
from cortex.plugins.cpu_llvm.llvm_types import I32, I64, LTYPE, PTR, VOID, CodegenError, _LoopMD  # noqa: F401
from cortex.plugins.cpu_llvm.team import MAX_THREADS, SYMBOLS, Symbols  # noqa: F401 - re-exported



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
        # per worker: the generation (cx_gen) of the last call it has left, one cache line each
        self.g_left = self._lines("cx_left", I32)
        self.g_jmp = ll.GlobalVariable(self.m, ll.ArrayType(PTR, MAX_THREADS), "cx_jmp")
        self.g_jmp.linkage = "internal"
        self.g_jmp.initializer = ll.Constant(ll.ArrayType(PTR, MAX_THREADS), None)
        # loops split dynamically (team.claim_fn): per thread the claim counter of its chunk
        # (i64: the loop's sequence number, the next unit) and its count of such loops, one
        # cache line each
        self.g_claims = self._lines("cx_claims", I64)
        self.g_claim_seq = self._lines("cx_claim_seq", I32)
        self.g_done = self._global("cx_done", I64)  # team.finish_fn: the loop's iterations done
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

    def _lines(self, name: str, ty: ll.Type) -> ll.GlobalVariable:
        """A per-thread word of type ``ty``, one 64-byte line per thread (``team.line_words``)."""
        arr = ll.ArrayType(ty, MAX_THREADS * team.line_words(ty))
        g = ll.GlobalVariable(self.m, arr, name)
        g.linkage = "internal"
        g.initializer = ll.Constant(arr, None)
        g.align = 64
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
    kernels = {k.name: _KernelGen(mod, k, barrier).emit() for k in program.kernels}
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
