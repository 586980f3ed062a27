"""The ``llvm`` target's thread team in LLVM IR: the barrier, the workers, the entry points.

Pipeline position: part of the code generator. :mod:`cortex.plugins.cpu_llvm.codegen` emits the
kernels and ``cx_spmd`` (the host steps, run by every thread) and calls :func:`emit_barrier` and
:func:`emit_team` for the rest; :mod:`cortex.plugins.cpu_llvm.runtime` calls the entry points.

Entry points (see :class:`Symbols`):

* ``int32 cx_start(int32 n, int64 stack_bytes, int64 futex_nr, int32* err)`` resets the team's
  words and creates workers ``1 .. n-1`` with ``stack_bytes`` of stack each (a fixed size:
  pthreads would otherwise reserve ``ulimit -s`` per thread, which fails when that limit is
  huge). It returns how many
  threads the team has: when a ``pthread_create`` fails it stops there, stores the error code
  in ``*err`` and the team runs with the threads it has (``cx_nthreads`` says how many; the
  kernels split their loops by it at run time).
* ``int32 cx_run(void** bufs, int32* sizes, int32* (*arm)(void))`` publishes the arguments,
  wakes the team and runs ``cx_spmd`` as thread 0; it returns 0, or 1 when the call was
  interrupted. ``arm`` (may be null) is called first and returns the word that interrupts
  this call when it becomes non-zero (or null): see :mod:`cortex.plugins.cpu_llvm.interrupt`.
* ``void cx_stop(void)`` stops, wakes and joins the workers.

Waiting. A worker waits for a new generation of ``cx_gen``: it spins with ``pause`` for
:data:`WORKER_SPINS` tries (about a millisecond: back-to-back calls start without a syscall),
yields the core :data:`WORKER_YIELDS` times, then sleeps in the kernel on a futex on ``cx_gen``
(``FUTEX_WAIT_PRIVATE``), counted in ``cx_sleepers``; ``cx_run`` and ``cx_stop`` wake the
sleepers (``FUTEX_WAKE_PRIVATE``) only when there are any (the increment of ``cx_gen`` and the
read of ``cx_sleepers`` are sequentially consistent, as are the worker's increment and its
re-read of ``cx_gen``, so a wake-up is never lost). An idle team burns no CPU. The syscall
number comes from the runtime (``futex_nr``; 0: unknown here, the worker sleeps 1 ms at a time).
The team barrier spins :data:`SPIN_BEFORE_YIELD` times, then yields at every try.

Interrupts. Every thread enters ``cx_spmd`` through ``cx_spmd_guarded``, which records a
``_setjmp`` point per thread. At a team barrier the last thread to arrive reads the call's
interrupt word and, when it is set, raises ``cx_abort`` before releasing the others; every
thread leaving that barrier then ``longjmp``\\s back to its guard (the generated code holds no
resources: nothing to unwind); the workers wait for the next call, and ``cx_run``, once
every worker has left the call (each worker, however it left, writes the generation of the call
it left into its own word ``cx_left[t]``: a per-thread word, not a shared count, so a worker
that left some other way than the others is waited for exactly once), clears both words and
returns 1. All threads leave at the same barrier and before the next call can
start, so the team stays consistent and the program usable. A dynamically split loop
(:func:`claim_fn`, :func:`finish_fn`) ends without a barrier; its threads read the interrupt
word at its end, and the first to see it set raises ``cx_abort``: then every thread leaves at
its next loop end or barrier (a barrier's waiters check ``cx_abort`` too), wherever it is, and
``cx_settle`` also clears the barrier count that a thread leaving mid-barrier leaves behind.

Dynamically split loops (the loop annotation "dynamic"). Each thread's chunk of the loop has a
claim counter, ``cx_claims[t]`` (``loop number << 32 | next unit``), taken unit by unit with a
compare-and-swap, first by its owner, then by the others once theirs are empty
(:func:`claim_fn`); the loop's end adds each thread's iterations to ``cx_done`` and waits until
all are done (:func:`finish_fn`). Every thread numbers the dynamic loops it enters
(``cx_claim_seq[t]``), so the words of an earlier loop read as "nothing claimed / done yet"
and nothing is reset between loops; ``cx_run`` zeroes them before each call.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir as ll

I32 = ll.IntType(32)
I64 = ll.IntType(64)
PTR = ll.PointerType()
VOID = ll.VoidType()

MAX_THREADS = 64
SPIN_BEFORE_YIELD = 100  # barrier: pause-spins (a few us) before yielding the core at every try
WORKER_SPINS = 1 << 14  # idle worker: pause-spins (about a millisecond) before yielding
WORKER_YIELDS = 4096  # idle worker: then yields, then it sleeps on the futex
JMP_BUF_WORDS = 64  # 512 bytes: more than any libc's jmp_buf (glibc: 200 on x86-64, 312 on arm64)
ATTR_WORDS = 16  # 128 bytes: more than any libc's pthread_attr_t (glibc: 56 / 64)
FUTEX_WAIT_PRIVATE = 128
FUTEX_WAKE_PRIVATE = 129
NAP_US = 1000  # idle sleep without a futex (futex_nr 0)


@dataclass(frozen=True)
class Symbols:
    """Exported function names of a generated module."""

    run: str = "cx_run"  # int32 cx_run(void** bufs, int32* sizes, int32* (*arm)(void))
    start: str = "cx_start"  # int32 cx_start(int32 n, int64 stack_bytes, int64 futex_nr, int32* err)
    stop: str = "cx_stop"  # void cx_stop(void): stop and join them


SYMBOLS = Symbols()


def line_words(ty: ll.Type) -> int:
    """Words of ``ty`` (an integer type) in a 64-byte cache line: the stride of a per-thread word."""
    return 64 * 8 // ty.width


def _c(v: int, ty: ll.Type = I32) -> ll.Constant:
    return ll.Constant(ty, v)


def _blocks(fn: ll.Function, *names: str) -> list[ll.Block]:
    return [fn.append_basic_block(n) for n in names]


def _slot(b: ll.IRBuilder, g: ll.Value, index: ll.Value, ty: ll.Type) -> ll.Value:
    """``&g[index]`` for an array of ``ty``, as an untyped pointer (llvmlite types the
    pointers of globals and allocas and would check every store through them)."""
    return b.gep(b.inttoptr(b.ptrtoint(g, I64), PTR), [index], inbounds=True, source_etype=ty)


def _interrupt_or_abort(mod, b: ll.IRBuilder, fn: ll.Function, tid: ll.Value, shared: bool) -> None:
    """At a barrier: stop here when the call's interrupt word is set. ``shared``: this thread
    releases the others, so it publishes the decision in ``cx_abort`` (they read it after the
    release) instead of leaving alone."""
    word = b.load(mod.g_intr, typ=PTR)
    check, hit, cont = _blocks(fn, "intr_check", "intr_hit", "intr_cont")
    b.cbranch(b.icmp_unsigned("!=", word, ll.Constant(PTR, None)), check, cont)
    b.position_at_end(check)
    flag = b.load_atomic(word, "monotonic", 4, typ=I32)
    b.cbranch(b.icmp_signed("!=", flag, _c(0)), hit, cont)
    b.position_at_end(hit)
    if shared:
        b.store_atomic(_c(1), mod.g_abort, "monotonic", 4)
        b.branch(cont)
    else:
        _leave(mod, b, tid)
    b.position_at_end(cont)


def _leave(mod, b: ll.IRBuilder, tid: ll.Value) -> None:
    """``longjmp`` back to this thread's guard (``cx_spmd_guarded``; ``cx_leave``, out of line)."""
    fn, lb = _cold_function(mod, "cx_leave", VOID, [I32])
    if lb is not None:
        fn.attributes.add("noreturn")
        longjmp = mod.decl("longjmp", VOID, [PTR, I32])
        longjmp.attributes.add("noreturn")
        lb.call(longjmp, [lb.load(_slot(lb, mod.g_jmp, fn.args[0], PTR), typ=PTR), _c(1)])
        lb.unreachable()
    b.call(fn, [tid])
    b.unreachable()


def _cold(fn: ll.Function) -> None:
    """Compile ``fn`` without optimization: it runs once per program, per call or per idle
    period and nothing in it gains from optimizing, while each optimized function costs the
    back end milliseconds (a TreeFC's JIT measured 74 -> 69 ms of CPU with three of them so)."""
    fn.attributes.add("noinline")
    fn.attributes.add("optnone")


def _cold_function(mod, name: str, ret: ll.Type, args: list[ll.Type]) -> tuple[ll.Function, ll.IRBuilder | None]:
    """The module's internal :func:`_cold` function ``name``, and a builder at its entry when it
    was just made (the caller emits its body), else None."""
    return _function(mod, name, ret, args, cold=True)


def _function(mod, name: str, ret: ll.Type, args: list[ll.Type],
              cold: bool = False) -> tuple[ll.Function, ll.IRBuilder | None]:
    """The module's internal function ``name`` (:func:`_cold` when ``cold``), and a builder at
    its entry when it was just made (the caller emits its body), else None."""
    if name in mod.fns:
        return mod.fns[name], None
    fn = mod.fns[name] = ll.Function(mod.m, ll.FunctionType(ret, args), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    if cold:
        _cold(fn)
    return fn, ll.IRBuilder(fn.append_basic_block("entry"))


def _back_off(mod, b: ll.IRBuilder, tries: ll.Value, spins: int, yields: int | None, cont: ll.Block,
              rest: ll.Block | None = None) -> None:
    """One step of a wait: ``pause`` while ``tries < spins``, then ``sched_yield`` (while
    ``tries < yields``, when given; then to ``rest``); a step goes on to ``cont``."""
    fn = b.function
    pause_bb, no_pause = _blocks(fn, "pause", "no_pause")
    b.cbranch(b.icmp_signed("<", tries, _c(spins)), pause_bb, no_pause)
    b.position_at_end(pause_bb)
    mod.pause(b)
    b.branch(cont)
    b.position_at_end(no_pause)
    if yields is not None:
        yield_bb = fn.append_basic_block("yield")
        b.cbranch(b.icmp_signed("<", tries, _c(yields)), yield_bb, rest)
        b.position_at_end(yield_bb)
    b.call(mod.decl("sched_yield", I32, []), [])
    b.branch(cont)


def _wait_step(mod, b: ll.IRBuilder, tries: ll.Value, wait: ll.Block, aborted: ll.Block) -> None:
    """The rest of one step of a wait loop that starts at ``wait`` (``tries``: its phi): to
    ``aborted`` when ``cx_abort`` is set, else spin with pause while the others are close and
    yield the core when they are not running (an oversubscribed machine would otherwise burn
    whole time slices here), and back to ``wait``."""
    on, cont = _blocks(b.function, "wait_on", "cont")
    b.cbranch(b.icmp_signed("!=", b.load_atomic(mod.g_abort, "monotonic", 4, typ=I32), _c(0)), aborted, on)
    b.position_at_end(on)
    _back_off(mod, b, tries, SPIN_BEFORE_YIELD, None, cont)
    b.position_at_end(cont)
    tries.add_incoming(b.add(tries, _c(1)), cont)
    b.branch(wait)


def emit_barrier(mod, name: str) -> ll.Function:
    """``void name(nthreads, tid)``: counter + generation spin barrier for the whole team, where
    an interrupted call stops (see the module docstring)."""
    fn = ll.Function(mod.m, ll.FunctionType(VOID, [I32, I32]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    nth, tid = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    one_bb, multi, last, wait, done = _blocks(fn, "one", "multi", "last", "wait", "done")
    b.cbranch(b.icmp_signed("<=", nth, _c(1)), one_bb, multi)
    b.position_at_end(one_bb)
    _interrupt_or_abort(mod, b, fn, tid, shared=False)
    b.ret_void()
    b.position_at_end(multi)
    gen = b.load_atomic(mod.g_bar_gen, "acquire", 4, typ=I32)
    arrived = b.atomic_rmw("add", mod.g_bar_count, _c(1), "acq_rel")
    b.cbranch(b.icmp_signed("==", arrived, b.sub(nth, _c(1))), last, wait)
    b.position_at_end(last)
    b.store_atomic(_c(0), mod.g_bar_count, "monotonic", 4)
    _interrupt_or_abort(mod, b, fn, tid, shared=True)
    b.atomic_rmw("add", mod.g_bar_gen, _c(1), "release")
    b.branch(done)
    b.position_at_end(wait)
    tries = b.phi(I32, name="tries")
    tries.add_incoming(_c(0), multi)
    now = b.load_atomic(mod.g_bar_gen, "acquire", 4, typ=I32)
    spin = fn.append_basic_block("spin")
    b.cbranch(b.icmp_signed("==", now, gen), spin, done)
    b.position_at_end(spin)
    # (a thread that left at a dynamically split loop's end raised cx_abort: finish_fn)
    _wait_step(mod, b, tries, wait, done)
    b.position_at_end(done)
    abort_bb, out = _blocks(fn, "abort", "out")
    aborted = b.load_atomic(mod.g_abort, "monotonic", 4, typ=I32)
    b.cbranch(b.icmp_signed("!=", aborted, _c(0)), abort_bb, out)
    b.position_at_end(abort_bb)  # cx_run waits until every worker has left
    _leave(mod, b, tid)
    b.position_at_end(out)
    b.ret_void()
    return fn


def next_claim_seq(mod, b: ll.IRBuilder, tid: ll.Value) -> ll.Value:
    """Thread ``tid`` enters a dynamically split loop: its count of such loops this call, plus
    one (every thread runs the same loops, so the threads agree on it), is the loop's number."""
    slot = _slot(b, mod.g_claim_seq, b.mul(tid, _c(line_words(I32))), I32)
    seq = b.add(b.load(slot, typ=I32), _c(1))
    b.store(seq, slot)
    return seq


def claim_fn(mod) -> ll.Function:
    """``int32 cx_claim(int32 owner, int32 seq, int32 grain, int32 limit)``: claim the next unit
    of at most ``grain`` iterations of thread ``owner``'s chunk (``limit`` iterations) of loop
    number ``seq``; its offset in the chunk, or -1 when the chunk is exhausted.

    ``cx_claims[owner]`` holds ``seq << 32 | next``. A word of an earlier loop means that
    nobody has claimed from this chunk yet: the claim starts it at 0; a word of a later loop
    (a serial-number comparison) means that this loop is over. A compare-and-swap makes every
    unit claimed once; the counter never passes ``limit``. No reset between loops is needed
    (``cx_run`` zeroes the words and the loop numbers at the start of every call, so an
    interrupted call leaves nothing behind)."""
    fn, b = _function(mod, "cx_claim", I32, [I32, I32, I32, I32])
    if b is None:
        return fn
    owner, seq, grain, limit = fn.args
    slot = _slot(b, mod.g_claims, b.mul(owner, _c(line_words(I64))), I64)
    first = b.load_atomic(slot, "monotonic", 8, typ=I64)
    entry = b.block
    loop, check, try_, got, retry, none = _blocks(fn, "loop", "check", "try", "got", "retry", "none")
    b.branch(loop)
    b.position_at_end(loop)
    word = b.phi(I64, name="word")
    word.add_incoming(first, entry)
    ahead = b.sub(b.trunc(b.lshr(word, _c(32, I64)), I32), seq)  # the word's loop - this loop
    b.cbranch(b.icmp_signed(">", ahead, _c(0)), none, check)
    b.position_at_end(check)
    cur = b.select(b.icmp_signed("<", ahead, _c(0)), _c(0), b.trunc(word, I32))
    b.cbranch(b.icmp_signed(">=", cur, limit), none, try_)
    b.position_at_end(try_)
    rest = b.sub(limit, cur)
    nxt = b.add(cur, b.select(b.icmp_signed("<", grain, rest), grain, rest))
    new = b.or_(b.shl(b.zext(seq, I64), _c(32, I64)), b.zext(nxt, I64))
    pair = b.cmpxchg(slot, word, new, "monotonic", "monotonic")
    b.cbranch(b.extract_value(pair, 1), got, retry)
    b.position_at_end(got)
    b.ret(cur)
    b.position_at_end(retry)
    word.add_incoming(b.extract_value(pair, 0), retry)
    b.branch(loop)
    b.position_at_end(none)
    b.ret(_c(-1))
    return fn


def finish_fn(mod) -> ll.Function:
    """``void cx_finish(int32 seq, int32 mine, int32 total, int32 tid)``: the end of dynamically
    split loop number ``seq`` of ``total`` iterations, of which this thread ran ``mine``: add
    them to ``cx_done`` (``seq << 32 | iterations done``), then wait until every iteration is
    done, or a later loop's word shows that the others are past it. Instead of a team barrier:
    nobody waits for a thread that holds no unit (one descheduled between loops catches up
    alone, claiming nothing). Acquire/release on ``cx_done`` makes the loop's stores visible.

    Interrupts: every thread reads the call's interrupt word here (as the last thread to reach
    a barrier does) and, when it is set, raises ``cx_abort`` and leaves; a thread waiting here
    or at a barrier leaves when it sees ``cx_abort``. The threads may leave at different
    points, ``cx_settle`` then clears the barrier count too."""
    fn, b = _function(mod, "cx_finish", VOID, [I32, I32, I32, I32])
    if b is None:
        return fn
    seq, mine, total, tid = fn.args
    add, add_loop, added, wait, check, leave, out = _blocks(
        fn, "add", "add_loop", "added", "wait", "check", "leave", "out")
    b.cbranch(b.icmp_signed(">", mine, _c(0)), add, added)
    b.position_at_end(add)
    first = b.load_atomic(mod.g_done, "monotonic", 8, typ=I64)
    b.branch(add_loop)
    b.position_at_end(add_loop)
    word = b.phi(I64, name="word")
    word.add_incoming(first, add)
    same = b.icmp_signed("==", b.trunc(b.lshr(word, _c(32, I64)), I32), seq)
    # an earlier loop's word: this loop starts it (a later one cannot be there: this thread's
    # iterations are not counted yet, so nobody is past this loop)
    count = b.add(b.select(same, b.trunc(word, I32), _c(0)), mine)
    new = b.or_(b.shl(b.zext(seq, I64), _c(32, I64)), b.zext(count, I64))
    pair = b.cmpxchg(mod.g_done, word, new, "acq_rel", "monotonic")
    word.add_incoming(b.extract_value(pair, 0), add_loop)
    b.cbranch(b.extract_value(pair, 1), added, add_loop)
    b.position_at_end(added)
    _interrupt_or_abort(mod, b, fn, tid, shared=True)  # raises cx_abort: everyone leaves
    checked = b.block
    b.branch(wait)
    b.position_at_end(wait)
    tries = b.phi(I32, name="tries")
    tries.add_incoming(_c(0), checked)
    now = b.load_atomic(mod.g_done, "acquire", 8, typ=I64)
    ahead = b.sub(b.trunc(b.lshr(now, _c(32, I64)), I32), seq)
    complete = b.or_(b.icmp_signed(">", ahead, _c(0)),
                     b.and_(b.icmp_signed("==", ahead, _c(0)), b.icmp_signed(">=", b.trunc(now, I32), total)))
    complete = b.or_(complete, b.icmp_signed("<=", total, _c(0)))
    b.cbranch(complete, out, check)
    b.position_at_end(check)
    _wait_step(mod, b, tries, wait, leave)
    b.position_at_end(out)
    aborted = b.load_atomic(mod.g_abort, "monotonic", 4, typ=I32)
    ret = fn.append_basic_block("ret")
    b.cbranch(b.icmp_signed("!=", aborted, _c(0)), leave, ret)
    b.position_at_end(ret)
    b.ret_void()
    b.position_at_end(leave)
    _leave(mod, b, tid)
    return fn


def emit_team(mod, spmd: ll.Function) -> None:
    """``cx_spmd_guarded``, the worker loop, ``cx_run``, ``cx_start`` and ``cx_stop``."""
    guarded = _emit_guard(mod, spmd)
    worker = _emit_worker(mod, guarded)
    _emit_run(mod, guarded)
    _emit_start(mod, worker)
    _emit_stop(mod)


def _emit_guard(mod, spmd: ll.Function) -> ll.Function:
    """``int32 cx_spmd_guarded(bufs, sizes, tid, nthreads)``: ``cx_spmd`` behind a ``_setjmp``
    point (``cx_jmp[tid]``); 0 when it returned, 1 when an interrupt left it."""
    fn = ll.Function(mod.m, ll.FunctionType(I32, [PTR, PTR, I32, I32]), "cx_spmd_guarded")
    fn.linkage = "internal"
    _cold(fn)
    fn.attributes.add("nounwind")
    bufs, sizes, tid, nth = fn.args
    setjmp = mod.decl("_setjmp", I32, [PTR])
    setjmp.attributes.add("returns_twice")
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    buf = b.alloca(ll.ArrayType(I64, JMP_BUF_WORDS), name="jmp_buf")
    buf.align = 16
    b.store(buf, _slot(b, mod.g_jmp, tid, PTR))
    run, out = _blocks(fn, "run", "interrupted")
    b.cbranch(b.icmp_signed("==", b.call(setjmp, [buf]), _c(0)), run, out)
    b.position_at_end(run)
    b.call(spmd, [bufs, sizes, tid, nth])
    b.ret(_c(0))
    b.position_at_end(out)
    b.ret(_c(1))
    return fn


def _futex(mod, b: ll.IRBuilder, op: int, value: ll.Value) -> None:
    """``syscall(futex_nr, &cx_gen, op, value, NULL, NULL, 0)``, or (futex_nr 0) a nap when
    ``op`` waits and nothing when it wakes."""
    fn = b.function
    nr = b.load(mod.g_futex, typ=I64)
    call_bb, nap_bb, done = _blocks(fn, "futex", "futex_none", "futex_done")
    b.cbranch(b.icmp_signed("!=", nr, _c(0, I64)), call_bb, nap_bb)
    b.position_at_end(call_bb)
    if "syscall" not in mod.fns:  # long syscall(long number, ...)
        mod.fns["syscall"] = ll.Function(mod.m, ll.FunctionType(I64, [I64], var_arg=True), "syscall")
    null = ll.Constant(PTR, None)
    b.call(mod.fns["syscall"], [nr, mod.g_gen, _c(op, I64), value, null, null, _c(0, I64)])
    b.branch(done)
    b.position_at_end(nap_bb)
    if op == FUTEX_WAIT_PRIVATE:
        b.call(mod.decl("usleep", I32, [I32]), [_c(NAP_US)])
    b.branch(done)
    b.position_at_end(done)


def _sleep_fn(mod) -> ll.Function:
    """``void cx_sleep(int32 seen)``: announce a sleeper, look at ``cx_gen`` again, and wait
    in the kernel while it still equals ``seen``."""
    fn, b = _cold_function(mod, "cx_sleep", VOID, [I32])
    if b is not None:
        seen = fn.args[0]
        b.atomic_rmw("add", mod.g_sleepers, _c(1), "seq_cst")
        again = b.load_atomic(mod.g_gen, "seq_cst", 4, typ=I32)
        doze, woke = _blocks(fn, "doze", "woke")
        b.cbranch(b.icmp_signed("==", again, seen), doze, woke)
        b.position_at_end(doze)
        _futex(mod, b, FUTEX_WAIT_PRIVATE, b.zext(seen, I64))
        b.branch(woke)
        b.position_at_end(woke)
        b.atomic_rmw("sub", mod.g_sleepers, _c(1), "seq_cst")
        b.ret_void()
    return fn


def _emit_worker(mod, guarded: ll.Function) -> ll.Function:
    """``void* cx_worker(tid as a pointer)``: wait for a new generation, run, repeat until
    stopped; pinned to ``cx_cpus[tid]`` when that is >= 0 (see CompiledProgram's ``pin``)."""
    m = mod.m
    worker = ll.Function(m, ll.FunctionType(PTR, [PTR]), "cx_worker")
    worker.linkage = "internal"
    b = ll.IRBuilder(worker.append_basic_block("entry"))
    tid = b.trunc(b.ptrtoint(worker.args[0], I64), I32)
    cpus = ll.GlobalVariable(m, ll.ArrayType(I32, MAX_THREADS), "cx_cpus")
    cpus.initializer = ll.Constant(ll.ArrayType(I32, MAX_THREADS), [-1] * MAX_THREADS)
    mask = b.alloca(ll.ArrayType(I64, 16), name="cpu_mask")
    cpu = b.load(_slot(b, cpus, tid, I32), typ=I32)
    pin_bb, pinned = _blocks(worker, "pin", "pinned")
    b.cbranch(b.icmp_signed(">=", cpu, _c(0)), pin_bb, pinned)
    b.position_at_end(pin_bb)
    for w in range(16):
        b.store(_c(0, I64), _slot(b, mask, _c(w), I64))
    word = _slot(b, mask, b.ashr(cpu, _c(6)), I64)
    b.store(b.shl(_c(1, I64), b.zext(b.and_(cpu, _c(63)), I64)), word)
    b.call(mod.decl("sched_setaffinity", I32, [I32, I64, PTR]), [_c(0), _c(128, I64), mask])
    b.branch(pinned)
    b.position_at_end(pinned)
    seen0 = b.load(mod.g_gen0, typ=I32)  # the generation when the team was created
    entry = b.block
    outer, wait, idle, cont, sleep, got, work, quit_ = _blocks(
        worker, "outer", "wait", "idle", "cont", "sleep", "got", "work", "quit")
    b.branch(outer)
    b.position_at_end(outer)
    seen = b.phi(I32, name="seen")
    seen.add_incoming(seen0, entry)
    b.branch(wait)
    b.position_at_end(wait)
    tries = b.phi(I32, name="tries")
    tries.add_incoming(_c(0), outer)
    now = b.load_atomic(mod.g_gen, "acquire", 4, typ=I32)
    b.cbranch(b.icmp_signed("!=", now, seen), got, idle)
    b.position_at_end(idle)
    _back_off(mod, b, tries, WORKER_SPINS, WORKER_SPINS + WORKER_YIELDS, cont, rest=sleep)
    b.position_at_end(cont)
    tries.add_incoming(b.add(tries, _c(1)), cont)
    b.branch(wait)
    b.position_at_end(sleep)
    b.call(_sleep_fn(mod), [seen])
    tries.add_incoming(_c(WORKER_SPINS + WORKER_YIELDS), sleep)  # still idle: sleep again
    b.branch(wait)
    b.position_at_end(got)
    stop = b.load_atomic(mod.g_stop, "acquire", 4, typ=I32)
    b.cbranch(b.icmp_signed("!=", stop, _c(0)), quit_, work)
    b.position_at_end(work)
    if mod.profile:
        mod.prof_start(b, tid)
    bufs = b.load(mod.g_bufs, typ=PTR)
    sizes = b.load(mod.g_sizes, typ=PTR)
    nth = b.load(mod.g_nth, typ=I32)
    b.call(guarded, [bufs, sizes, tid, nth])
    # out of call ``now``, however it left (cx_settle waits for this word after an interrupt)
    b.atomic_rmw("xchg", _slot(b, mod.g_left, b.mul(tid, _c(line_words(I32))), I32), now, "release")
    seen.add_incoming(now, work)
    b.branch(outer)
    b.position_at_end(quit_)
    b.ret(ll.Constant(PTR, None))
    return worker


def _wake_sleepers(mod, b: ll.IRBuilder) -> None:
    """After ``cx_gen`` moved: wake the workers sleeping on it, if any (``cx_wake``)."""
    wake, go = _blocks(b.function, "wake", "go")
    sleepers = b.load_atomic(mod.g_sleepers, "seq_cst", 4, typ=I32)
    b.cbranch(b.icmp_signed(">", sleepers, _c(0)), wake, go)
    b.position_at_end(wake)
    fn, wb = _cold_function(mod, "cx_wake", VOID, [])
    if wb is not None:
        _futex(mod, wb, FUTEX_WAKE_PRIVATE, _c(2**31 - 1, I64))
        wb.ret_void()
    b.call(fn, [])
    b.branch(go)
    b.position_at_end(go)


def _emit_run(mod, guarded: ll.Function) -> None:
    """``int32 cx_run(bufs, sizes, arm)``: publish, wake the team, take part as thread 0."""
    run = ll.Function(mod.m, ll.FunctionType(I32, [PTR, PTR, PTR]), SYMBOLS.run)
    bufs, sizes, arm = run.args
    b = ll.IRBuilder(run.append_basic_block("entry"))
    armed, publish = _blocks(run, "arm", "publish")
    b.cbranch(b.icmp_unsigned("!=", arm, ll.Constant(PTR, None)), armed, publish)
    entry = b.block
    b.position_at_end(armed)
    got = b.call(Callee(arm, ll.FunctionType(PTR, [])), [])
    b.branch(publish)
    b.position_at_end(publish)
    word = b.phi(PTR, name="interrupt")
    word.add_incoming(ll.Constant(PTR, None), entry)
    word.add_incoming(got, armed)
    b.store(word, mod.g_intr)
    b.store(bufs, mod.g_bufs)
    b.store(sizes, mod.g_sizes)
    nth = b.load(mod.g_nth, typ=I32)
    if "cx_claim" in mod.fns:  # the program has dynamically split loops
        _reset_claims(mod, b, nth)
    if mod.profile:
        mod.prof_reset(b)
        mod.prof_start(b, _c(0))
    b.atomic_rmw("add", mod.g_gen, _c(1), "seq_cst")
    _wake_sleepers(mod, b)
    done, settle = _blocks(run, "done", "settle")
    r = b.call(guarded, [bufs, sizes, _c(0), nth])
    b.cbranch(b.icmp_signed("==", r, _c(0)), done, settle)
    b.position_at_end(done)
    b.ret(_c(0))
    b.position_at_end(settle)
    b.call(_settle_fn(mod), [nth])
    b.ret(_c(1))


def _reset_claims(mod, b: ll.IRBuilder, nth: ll.Value) -> None:
    """Before a call is published: every thread's claim counter and loop count, and the
    iterations-done word, to 0 (a call interrupted between two dynamically split loops leaves
    nothing for the next one)."""
    b.store(_c(0, I64), mod.g_done)
    fn = b.function
    pre = b.block
    loop, done = _blocks(fn, "reset_claims", "claims_reset")
    b.branch(loop)
    b.position_at_end(loop)
    t = b.phi(I32, name="t")
    t.add_incoming(_c(0), pre)
    b.store(_c(0, I64), _slot(b, mod.g_claims, b.mul(t, _c(line_words(I64))), I64))
    b.store(_c(0), _slot(b, mod.g_claim_seq, b.mul(t, _c(line_words(I32))), I32))
    t2 = b.add(t, _c(1))
    t.add_incoming(t2, loop)
    b.cbranch(b.icmp_signed("<", t2, nth), loop, done)
    b.position_at_end(done)


def _settle_fn(mod) -> ll.Function:
    """``void cx_settle(int32 nthreads)``, after an interrupted call: wait until every worker
    has left it (``cx_left[t]`` is this call's generation: one still on its way out of the
    barrier must not see the next call's cleared ``cx_abort`` and carry on), then clear the
    interrupt words."""
    fn, b = _cold_function(mod, "cx_settle", VOID, [I32])
    if b is not None:
        call = b.load_atomic(mod.g_gen, "monotonic", 4, typ=I32)  # this call's (only cx_run moves it)
        pre = b.block
        loop, wait, spin, next_, settled = _blocks(fn, "worker", "wait", "spin", "next", "settled")
        b.cbranch(b.icmp_signed(">", fn.args[0], _c(1)), loop, settled)
        b.position_at_end(loop)
        t = b.phi(I32, name="t")
        t.add_incoming(_c(1), pre)
        b.branch(wait)
        b.position_at_end(wait)
        left = b.load_atomic(_slot(b, mod.g_left, b.mul(t, _c(line_words(I32))), I32), "acquire", 4, typ=I32)
        b.cbranch(b.icmp_signed("==", left, call), next_, spin)
        b.position_at_end(spin)
        b.call(mod.decl("sched_yield", I32, []), [])
        b.branch(wait)
        b.position_at_end(next_)
        t2 = b.add(t, _c(1))
        t.add_incoming(t2, next_)
        b.cbranch(b.icmp_signed("<", t2, fn.args[0]), loop, settled)
        b.position_at_end(settled)
        b.store_atomic(_c(0), mod.g_bar_count, "monotonic", 4)  # threads may have left mid-barrier
        b.store_atomic(_c(0), mod.g_abort, "monotonic", 4)
        b.ret_void()
    return fn


class Callee:
    """A call through an opaque pointer: llvmlite takes a call's type from its callee's
    ``function_type``, which a plain pointer value does not have."""

    def __init__(self, value: ll.Value, fnty: ll.FunctionType) -> None:
        self.value, self.function_type, self.type = value, fnty, value.type

    def get_reference(self) -> str:
        return self.value.get_reference()


def _emit_start(mod, worker: ll.Function) -> None:
    """``int32 cx_start(n, stack_bytes, futex_nr, err)``: create workers 1..n-1 with a fixed
    stack size; stop at the first failure (its code in ``*err``); the team is what started."""
    start = ll.Function(mod.m, ll.FunctionType(I32, [I32, I64, I64, PTR]), SYMBOLS.start)
    _cold(start)
    n, stack, futex_nr, err = start.args
    pthread_create = mod.decl("pthread_create", I32, [PTR, PTR, PTR, PTR])
    b = ll.IRBuilder(start.append_basic_block("entry"))
    b.store(futex_nr, mod.g_futex)
    # a fresh team: also after a fork, whose child has none of the parent's threads and may
    # hold a call's half-done barrier
    for g in (mod.g_sleepers, mod.g_bar_count, mod.g_abort):
        b.store(_c(0), g)
    b.store_atomic(_c(0), mod.g_stop, "seq_cst", 4)
    b.store(b.load_atomic(mod.g_gen, "seq_cst", 4, typ=I32), mod.g_gen0)
    attr = b.alloca(ll.ArrayType(I64, ATTR_WORDS), name="attr")
    attr.align = 16
    b.call(mod.decl("pthread_attr_init", I32, [PTR]), [attr])
    b.call(mod.decl("pthread_attr_setstacksize", I32, [PTR, I64]), [attr, stack])
    loop, created, failed, done = _blocks(start, "loop", "created", "failed", "done")
    pre = b.block
    b.cbranch(b.icmp_signed(">", n, _c(1)), loop, done)
    b.position_at_end(loop)
    t = b.phi(I32, name="t")
    t.add_incoming(_c(1), pre)
    rc = b.call(pthread_create, [_slot(b, mod.g_threads, t, I64), attr, worker, b.inttoptr(b.zext(t, I64), PTR)])
    b.cbranch(b.icmp_signed("==", rc, _c(0)), created, failed)
    b.position_at_end(created)
    t2 = b.add(t, _c(1))
    t.add_incoming(t2, created)
    b.cbranch(b.icmp_signed("<", t2, n), loop, done)
    b.position_at_end(failed)
    b.store(rc, err)
    b.branch(done)
    b.position_at_end(done)
    team = b.phi(I32, name="team")
    team.add_incoming(_c(1), pre)
    team.add_incoming(t2, created)
    team.add_incoming(t, failed)  # threads 0 .. t-1 exist
    b.call(mod.decl("pthread_attr_destroy", I32, [PTR]), [attr])
    b.store(team, mod.g_nth)
    b.ret(team)


def _emit_stop(mod) -> None:
    """``void cx_stop(void)``: raise the stop flag, wake everyone, join."""
    stop_fn = ll.Function(mod.m, ll.FunctionType(VOID, []), SYMBOLS.stop)
    _cold(stop_fn)
    pthread_join = mod.decl("pthread_join", I32, [I64, PTR])
    b = ll.IRBuilder(stop_fn.append_basic_block("entry"))
    n = b.load(mod.g_nth, typ=I32)
    b.store_atomic(_c(1), mod.g_stop, "seq_cst", 4)
    b.atomic_rmw("add", mod.g_gen, _c(1), "seq_cst")
    _wake_sleepers(mod, b)
    loop, done = _blocks(stop_fn, "loop", "done")
    pre = b.block
    b.cbranch(b.icmp_signed(">", n, _c(1)), loop, done)
    b.position_at_end(loop)
    t = b.phi(I32)
    t.add_incoming(_c(1), pre)
    b.call(pthread_join, [b.load(_slot(b, mod.g_threads, t, I64), typ=I64), ll.Constant(PTR, None)])
    t2 = b.add(t, _c(1))
    t.add_incoming(t2, b.block)
    b.cbranch(b.icmp_signed("<", t2, n), loop, done)
    b.position_at_end(done)
    b.store(_c(1), mod.g_nth)
    b.ret_void()
