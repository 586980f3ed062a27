"""A compiled filler for the core linearizer's fixed-arity nested-tuple path.

Pipeline position: host side, before every call. ``cortex.core.linearize.fast`` turns a batch
of nested tuples of int tokens into marshal records and, for a fixed arity, builds the
:class:`~cortex.core.linearize.structure.LinearizedBatch` from them in about fifty NumPy calls. This
module JIT-compiles (once per process, with the ``llvm`` target's machinery) one native
function that fills the same arrays in three passes over the records, and installs it with
``fast.set_native_nested`` when the llvm backend is created. The core keeps the NumPy path as
the fallback and as the oracle (``tests/core/test_linearize_native.py`` holds the two equal).

The function (contract in ``fast.NATIVE_FIELDS``), over pre-order node ids ``v = j - 1`` of
records ``j = 1 .. r-1`` (record 0 is the batch list):

1. a stack walk: each record is a child of the frame on top; a container must have exactly
   ``k`` children, a token must be in ``[0, vocab)``; a finished subtree gives its parent
   frame ``height + 1``; a frame whose children all finished pops and sets its node's height;
2. a stable counting sort by height: level offsets, output row of every node (``new_id``) and
   its inverse (``order``), the same order as NumPy's stable argsort;
3. the output rows: child table through ``new_id``, tokens, inputs, roots, child offsets.

Anything else (another record type, a wrong child count, a token out of range, records after
the batch ends or too few) returns 0: the NumPy path then decides, and reports errors.
"""

from __future__ import annotations

import ctypes
import threading
import warnings
from typing import Any

from llvmlite import ir as ll

from cortex.core.linearize import fast

I8, I32, I64 = ll.IntType(8), ll.IntType(32), ll.IntType(64)
PTR = ll.PointerType()
NAME = "cx_lin_nested"
_FILL = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
                         ctypes.c_uint32, ctypes.c_int32, ctypes.c_void_p)
_LOCK = threading.Lock()  # the build
_START = threading.Lock()  # the background start
_STATE: dict[str, Any] = {}


class _Gen:
    """Small helpers over an IRBuilder: int32 variables in allocas (SROA makes them SSA)."""

    def __init__(self, fn: ll.Function) -> None:
        self.fn = fn
        self.b = ll.IRBuilder(fn.append_basic_block("entry"))
        self.fail = fn.append_basic_block("fail")

    def c(self, v: int) -> ll.Constant:
        return ll.Constant(I32, v)

    def var(self, name: str, init: ll.Value) -> ll.AllocaInstr:
        """An int32 variable: its alloca in the entry block (where SROA promotes it, and no
        loop grows the stack), ``init`` stored here."""
        with self.b.goto_entry_block():
            a = self.b.alloca(I32, name=name)
        self.b.store(init, a)
        return a

    def get(self, a: ll.Value) -> ll.Value:
        return self.b.load(a, typ=I32)

    def set(self, a: ll.Value, v: ll.Value) -> None:
        self.b.store(v, a)

    def at(self, base: ll.Value, i: ll.Value) -> ll.Value:
        return self.b.gep(base, [self.b.sext(i, I64)], inbounds=True, source_etype=I32)

    def ld(self, base: ll.Value, i: ll.Value) -> ll.Value:
        return self.b.load(self.at(base, i), typ=I32)

    def st(self, base: ll.Value, i: ll.Value, v: ll.Value) -> None:
        self.b.store(v, self.at(base, i))

    def loop(self, name: str, lo: ll.Value, hi: ll.Value, body) -> None:
        """``for (i = lo; i < hi; i++) body(i)``; ``body`` may branch to ``self.fail``."""
        b = self.b
        i = self.var(f"{name}.i", lo)
        head, work, done = (self.fn.append_basic_block(f"{name}.{t}") for t in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        iv = self.get(i)
        b.cbranch(b.icmp_signed("<", iv, hi), work, done)
        b.position_at_end(work)
        body(iv)
        self.set(i, b.add(self.get(i), self.c(1)))
        b.branch(head)
        b.position_at_end(done)

    def check(self, ok: ll.Value, name: str) -> None:
        """Go on when ``ok``, else return 0."""
        nxt = self.fn.append_basic_block(name)
        self.b.cbranch(ok, nxt, self.fail)
        self.b.position_at_end(nxt)


def _module() -> str:
    m = ll.Module(name="cortex_linearize")
    fn = ll.Function(m, ll.FunctionType(I32, [PTR, I32, I32, I32, I32, PTR]), NAME)
    fn.attributes.add("nounwind")
    rec, r, k, vocab, nb, ws = fn.args
    g = _Gen(fn)
    b = g.b
    p = {name: b.gep(ws, [b.sext(b.load(g.at(ws, g.c(i)), typ=I32), I64)], inbounds=True, source_etype=I32)
         for i, (name, _) in enumerate(fast.NATIVE_FIELDS)}
    n = b.sub(r, g.c(1))

    def record(j: ll.Value) -> tuple[ll.Value, ll.Value]:
        at = b.gep(rec, [b.mul(b.sext(j, I64), ll.Constant(I64, 5))], inbounds=True, source_etype=I8)
        code = b.load(at, typ=I8)
        val = b.load(b.gep(at, [ll.Constant(I64, 1)], inbounds=True, source_etype=I8), typ=I32)
        val.align = 1
        return code, val

    # ---- pass 1: the stack walk
    st_node, st_left, st_max = p["stack_node"], p["stack_left"], p["stack_max"]
    g.st(st_node, g.c(0), g.c(-1))
    g.st(st_left, g.c(0), nb)
    g.st(st_max, g.c(0), g.c(0))
    sp = g.var("sp", g.c(1))
    inp = g.var("input", g.c(-1))

    def walk(j: ll.Value) -> None:
        v = b.sub(j, g.c(1))
        code, val = record(j)
        g.check(b.icmp_signed(">", g.get(sp), g.c(0)), "has_frame")
        top = b.sub(g.get(sp), g.c(1))
        left = g.ld(st_left, top)
        g.check(b.icmp_signed(">", left, g.c(0)), "has_slot")  # else: more records than slots
        tnode = g.ld(st_node, top)

        def new_root() -> None:
            bi = b.add(g.get(inp), g.c(1))
            g.set(inp, bi)
            g.st(p["root_pre"], bi, v)

        def child() -> None:
            slot = b.add(b.mul(tnode, k), b.sub(k, left))
            g.st(p["children"], slot, v)

        top_is_batch = b.icmp_signed("==", tnode, g.c(-1))
        with b.if_else(top_is_batch) as (then, other):
            with then:
                new_root()
            with other:
                child()
        g.st(p["input"], v, g.get(inp))
        g.st(st_left, top, b.sub(left, g.c(1)))
        is_box = b.or_(b.icmp_unsigned("==", code, ll.Constant(I8, ord("("))),
                       b.icmp_unsigned("==", code, ll.Constant(I8, ord("["))))
        box_bb, tok_bb, nxt_bb = (fn.append_basic_block(t) for t in ("box", "token", "next"))
        b.cbranch(is_box, box_bb, tok_bb)
        # a container: exactly k children, a new frame
        b.position_at_end(box_bb)
        g.check(b.icmp_signed("==", val, k), "arity_ok")
        s = g.get(sp)
        g.st(st_node, s, v)
        g.st(st_left, s, k)
        g.st(st_max, s, g.c(0))
        g.set(sp, b.add(s, g.c(1)))
        g.st(p["word"], v, g.c(-1))
        b.branch(nxt_bb)
        # a token in range: a finished leaf; finish every frame it completes
        b.position_at_end(tok_bb)
        g.check(b.icmp_unsigned("==", code, ll.Constant(I8, ord("i"))), "is_token")
        g.check(b.icmp_unsigned("<", val, vocab), "token_ok")
        g.st(p["word"], v, val)
        g.st(p["height"], v, g.c(0))
        h = g.var("h", g.c(0))
        up_bb, pop_bb = fn.append_basic_block("up"), fn.append_basic_block("pop")
        b.branch(up_bb)
        b.position_at_end(up_bb)
        t = b.sub(g.get(sp), g.c(1))
        mx = g.ld(st_max, t)
        h1 = b.add(g.get(h), g.c(1))
        mx = b.select(b.icmp_signed(">", h1, mx), h1, mx)
        g.st(st_max, t, mx)
        node = g.ld(st_node, t)
        done = b.or_(b.icmp_signed("!=", g.ld(st_left, t), g.c(0)), b.icmp_signed("==", node, g.c(-1)))
        b.cbranch(done, nxt_bb, pop_bb)
        b.position_at_end(pop_bb)
        g.st(p["height"], node, mx)
        g.set(h, mx)
        g.set(sp, t)
        b.branch(up_bb)
        b.position_at_end(nxt_bb)

    g.loop("walk", g.c(1), r, walk)
    # complete: only the batch frame is left, every root read
    g.check(b.and_(b.icmp_signed("==", g.get(sp), g.c(1)),
                   b.icmp_signed("==", g.ld(st_left, g.c(0)), g.c(0))), "complete")
    # ---- pass 2: a stable counting sort by height
    cnt, height = p["count"], p["height"]
    g.loop("zero", g.c(0), b.add(n, g.c(1)), lambda i: g.st(cnt, i, g.c(0)))
    maxh = g.var("maxh", g.c(0))

    def count(v: ll.Value) -> None:
        hv = g.ld(height, v)
        g.st(cnt, hv, b.add(g.ld(cnt, hv), g.c(1)))
        m = g.get(maxh)
        g.set(maxh, b.select(b.icmp_signed(">", hv, m), hv, m))

    g.loop("count", g.c(0), n, count)
    levels = b.add(g.get(maxh), g.c(1))
    run = g.var("run", g.c(0))

    def offsets(h: ll.Value) -> None:
        s = g.get(run)
        g.st(p["level_offsets"], h, s)
        c = g.ld(cnt, h)
        g.st(cnt, h, s)
        g.set(run, b.add(s, c))

    g.loop("offsets", g.c(0), levels, offsets)
    g.st(p["level_offsets"], levels, g.get(run))

    def place(v: ll.Value) -> None:
        hv = g.ld(height, v)
        row = g.ld(cnt, hv)
        g.st(cnt, hv, b.add(row, g.c(1)))
        g.st(p["new_id"], v, row)
        g.st(p["order"], row, v)

    g.loop("place", g.c(0), n, place)
    # ---- pass 3: the output rows
    new_id = p["new_id"]

    def rows(v: ll.Value) -> None:
        row = g.ld(new_id, v)
        g.st(p["words"], row, g.ld(p["word"], v))
        g.st(p["node_input"], row, g.ld(p["input"], v))
        leaf = b.icmp_signed("==", g.ld(height, v), g.c(0))
        base_out, base_in = b.mul(row, k), b.mul(v, k)

        def slot(c: ll.Value) -> None:
            kid = g.ld(p["children"], b.add(base_in, c))
            with b.if_else(leaf) as (then, other):
                with then:
                    g.st(p["table"], b.add(base_out, c), g.c(-1))
                with other:
                    g.st(p["table"], b.add(base_out, c), g.ld(new_id, kid))

        g.loop("slot", g.c(0), k, slot)

    g.loop("rows", g.c(0), n, rows)
    g.loop("roots", g.c(0), nb, lambda i: g.st(p["roots"], i, g.ld(new_id, g.ld(p["root_pre"], i))))
    nl = g.ld(p["level_offsets"], g.c(1))

    def child_offset(i: ll.Value) -> None:
        inner = b.icmp_signed(">", i, nl)
        g.st(p["child_offsets"], i, b.select(inner, b.mul(b.sub(i, nl), k), g.c(0)))

    g.loop("child_offsets", g.c(0), b.add(n, g.c(1)), child_offset)
    b.ret(levels)
    fb = ll.IRBuilder(g.fail)
    fb.ret(g.c(0))
    return str(m)


def native_fill() -> Any:
    """The compiled filler (a ctypes function), built once per process."""
    with _LOCK:
        if "fill" not in _STATE:
            from cortex.core.diskcache import DiskCache
            from cortex.plugins.cpu_llvm.jit import JitModule

            jit = JitModule(_module(), cache=DiskCache("llvm"))
            _STATE["jit"] = jit  # the code lives as long as the module
            _STATE["fill"] = _FILL(jit.address(NAME))
        return _STATE["fill"]


def _build_and_install() -> None:
    try:
        fill = native_fill()
    except Exception as exc:  # noqa: BLE001 - an accelerator must not break a compile
        _STATE["failed"] = f"{type(exc).__name__}: {exc}"  # said once, not tried again
        warnings.warn(f"cortex llvm: the compiled linearizer could not be built, the NumPy "
                      f"path stays: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
        return
    fast.set_native_nested(fill)


def install() -> None:
    """Make the core linearizer use the compiled filler. The first time in a process it is
    built in a background thread (~40 ms of LLVM, which releases the GIL: it overlaps the
    kernel's code generation) and installed when ready; until then, and if it cannot be built
    (a warning says why), the NumPy path runs: the filler only changes the speed."""
    with _START:
        if "failed" in _STATE:
            return
        if "fill" not in _STATE:
            worker = _STATE.get("worker")
            if worker is None or not worker.is_alive():
                worker = _STATE["worker"] = threading.Thread(
                    target=_build_and_install, name="cortex-llvm-linearizer", daemon=True)
                try:
                    worker.start()
                except RuntimeError:  # no thread to be had: build it here, now
                    del _STATE["worker"]
                    worker = None
            if worker is not None:
                return
    _build_and_install()  # built: installed again (a test may have set it aside)
