"""Partial accumulators for the jam's fused loops of small node groups (a fast-math rewrite).

Pipeline position: in the ``opencl`` backend's renderer (``compiler.OpenCLRenderer.render``),
with ``fast_math``, among the other float reassociations (``forms.split_reductions``,
``forms.unfused_fma``), before ``unfused_fma`` (it matches the jam's ``fma``), on the program the
schedule made (``cortex.core.lowering.jam``). Pure ``Program -> Program``.

A jammed group of ``m`` nodes runs each fused reduction loop as ``m x sums`` vector accumulators,
one FMA per accumulator and step::

    for k in a..b:                                  # serial
      vectorized for j in 0..W:
        let w = W[.., k, j]
        acc[i0 + j] = fma(w, x0[k], acc[i0 + j])    # one chain per store
        acc[i1 + j] = fma(w, x1[k], acc[i1 + j])

Each store is one chain of dependent FMAs. A group of one or two nodes (the upper levels of a
tree: levels of 1-3 nodes) has 2-4 chains, so every step waits for the FMA latency instead of
issuing at the FMA units' rate; it takes about ``FMA latency x FMA units`` chains (4 x 2 on the
AVX-512 cores this backend was measured on) to keep them busy. :func:`split_accumulators` gives
such a loop ``p`` partial accumulators per chain (``p`` a power of two, ``chains x p <=``
:data:`CHAINS`): step ``k`` of ``a + p * kk + t`` adds into partial ``t`` (``t = 0`` the
original slot), the partials start at zero and are added into the slot after the loop. This
reassociates the float sums (the build flags allow it anyway), so the backend applies it only
with ``fast_math``. A loop whose trip count is not a constant that ``p`` divides, whose stores
are not all such accumulations of private arrays at lane-only indices, or that reads an
accumulator elsewhere is left as it is.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cortex.core import loopir as ir
from cortex.core.lowering.cases import NameGen
from cortex.core.lowering.jam_fuse import free_names, names_of, renamed_binders

#: Independent FMA chains a fused loop should have: the FMA latency (4 cycles) times the FMA
#: units (2) of the cores this backend's CPU preferences were measured on.
CHAINS = 8


def _stores(s: ir.Node) -> list[ir.Store]:
    return [n for n in ir.walk(s) if isinstance(n, ir.Store)]


def _accumulations(loop: ir.For, private: set[str]) -> tuple[ir.For, list[ir.Store]] | None:
    """The vectorized body and its accumulating stores, where ``loop`` has the shape above."""
    inner = loop.body
    if not (isinstance(inner, ir.For) and inner.kind == "vectorized"
            and ir.const_int(inner.start) == 0 and ir.const_int(inner.stop) is not None):
        return None
    if any(isinstance(n, (ir.For, ir.Alloc, ir.If, ir.Barrier)) for n in ir.walk(inner.body)):
        return None
    stores = _stores(inner.body)
    slots = set()
    for st in stores:
        v = st.value
        if not (st.buffer in private and isinstance(v, ir.Call) and v.fn == "fma"
                and v.args[2] == ir.Load(st.buffer, st.index)
                and all(free_names(i) <= {inner.var} for i in st.index)):
            return None
        slots.add((st.buffer, st.index))
    if len(slots) != len(stores):
        return None
    accs = {st.buffer for st in stores}
    reads = [n for n in ir.walk(inner.body) if isinstance(n, ir.Load) and n.buffer in accs]
    if len(reads) != len(stores):  # an accumulator read other than by its own update
        return None
    return inner, stores


def _split(loop: ir.For, private: dict[str, ir.Alloc], names: NameGen, register_bytes: int) -> ir.Stmt | None:
    found = _accumulations(loop, set(private))
    if found is None:
        return None
    inner, stores = found
    trip = ir.const_int(loop.stop - loop.start)
    # a store of W lanes is that many registers' worth of chains (a row jam's 64-lane rows: 4)
    width = ir.const_int(inner.stop) * max(np.dtype(private[st.buffer].dtype).itemsize for st in stores)
    chains = len(stores) * max(1, -(-width // register_bytes))
    parts = 1
    while chains * parts * 2 <= CHAINS:
        parts *= 2
    while parts > 1 and (trip is None or trip < parts or trip % parts):
        parts //= 2
    if parts == 1:
        return None
    accs = sorted({st.buffer for st in stores})
    partial = {(b, t): names.fresh(f"{b}_p{t}") for b in accs for t in range(1, parts)}
    lane = ir.Var(inner.var)

    def moved(t: int) -> ir.Stmt:
        """Step ``t`` of a trip: the body at ``k = a + parts * kk + t``, into partial ``t``."""
        body = ir.substitute(inner.body, {loop.var: loop.start + ir.Var(kk) * parts + t})
        if t:
            def f(n: ir.Node) -> ir.Node | None:
                if isinstance(n, (ir.Load, ir.Store)) and (n.buffer, t) in partial:
                    return replace(n, buffer=partial[n.buffer, t])
                return None
            body = renamed_binders(ir.transform(body, f), names)
        return body

    kk = names.fresh(loop.var)
    trips = ir.For(kk, 0, trip // parts, replace(inner, body=ir.seq(*(moved(t) for t in range(parts)))), "serial")
    init_lane = names.fresh(inner.var)
    init = ir.For(init_lane, 0, inner.stop, ir.seq(*(
        ir.Store(partial[st.buffer, t], tuple(ir.substitute(i, {lane.name: ir.Var(init_lane)}) for i in st.index),
                 ir.Const(0.0, private[st.buffer].dtype))
        for t in range(1, parts) for st in stores)), "vectorized")
    sum_lane = names.fresh(inner.var)
    adds = []
    for st in stores:
        index = tuple(ir.substitute(i, {lane.name: ir.Var(sum_lane)}) for i in st.index)
        total: ir.Expr = ir.Load(st.buffer, index)
        for t in range(1, parts):
            total = ir.BinOp("+", total, ir.Load(partial[st.buffer, t], index))
        adds.append(ir.Store(st.buffer, index, total))
    out: ir.Stmt = ir.seq(init, trips, ir.For(sum_lane, 0, inner.stop, ir.seq(*adds), "vectorized"))
    for (b, t), name in reversed(partial.items()):
        a = private[b]
        out = ir.Alloc(name, a.dtype, a.shape, "private", out)
    return out


def split_accumulators(program: ir.Program, register_bytes: int = 64) -> ir.Program:
    """``program`` with each fused loop of fewer than :data:`CHAINS` accumulator chains given
    partial accumulators (see the module doc); a chain is one SIMD register of
    ``register_bytes`` of a store's lanes."""
    names = names_of(program)

    def visit(s: ir.Stmt, private: dict[str, ir.Alloc]) -> ir.Stmt:
        if isinstance(s, ir.Alloc):
            inner = {**private, s.name: s} if s.scope == "private" else private
            return replace(s, body=visit(s.body, inner))
        if isinstance(s, ir.For):
            if s.kind == "serial":
                done = _split(s, private, names, register_bytes)
                if done is not None:
                    return done
            return replace(s, body=visit(s.body, private))
        if isinstance(s, ir.Seq):
            return ir.Seq(tuple(visit(x, private) for x in s.stmts))
        if isinstance(s, ir.Let):
            return replace(s, body=visit(s.body, private))
        if isinstance(s, ir.If):
            return replace(s, then=visit(s.then, private),
                           orelse=None if s.orelse is None else visit(s.orelse, private))
        return s

    kernels = tuple(replace(k, body=visit(k.body, {})) for k in program.kernels)
    return replace(program, kernels=kernels)
