"""K blocks: a block of a level's nodes jammed with its reductions cut into blocks (``k_block``).

Pipeline position: a part of the level blocks (``cortex.core.lowering.level_blocks``, the
``panel_kib`` knob), which calls :func:`k_blocked_nodes` instead of the plain node jam
(``cortex.core.lowering.jam``) for each block of an interchanged level's nodes when the
``k_block`` knob is set. Target-neutral and pure; the tests check the result against the
untransformed program on the interpreter.

The node jam computes a group of nodes' sums over their whole range ``k in 0..K`` before the
next group: each fused loop streams its sums' weight rows for the hidden block (at hidden 1024,
``3 sums x 1024 x 16 lanes x 4 bytes`` = 192 KiB, four times a core's L1 data cache) once per
group of 8 nodes, from L2. Cutting ``K`` into blocks of ``k_block`` steps and running every
group of the node block over one K block before the next keeps that block of weights (24 KiB at
``k_block=128``) in L1 while the groups pass over it, the inner blocking of a GEMM. The groups'
partial sums live in a *panel* (a private array, one ``W``-lane slot per node and sum) between
K blocks; the body (the gates' epilogue) runs after the last::

    for v in first..last:                 alloc private panel[most * S * W]
      lets(v)                             panel[...] = 0                        # every slot
      vectorized for jv: B(v)     ->      for each fused loop f (its sums s in f):
                                            for kb in 0..K_f / k_block:
                                              <cursor walk: each group of m nodes>
                                                acc[s, q] = panel[v_q - first, s]      # registers
                                                for k in a_f + kb * k_block ..+ k_block: fma ...
                                                panel[v_q - first, s] = acc[s, q]
                                          <cursor walk: each group>: B with sums read from the panel
                                                                   (a node whose guards fail:
                                                                    the plain body, cold)

Every walk groups the nodes alike (the groups depend only on the nodes and their guards), and
every group size uses the fused loops planned for the largest group, so a node's slots hold its
sums over the whole range when the body reads them. A group padded with its last node reads and
writes that node's slots twice with the same values. ``most`` (the most nodes of a block, a
constant) sizes the panel; the node's slot offset is clamped to ``0..most - 1``, which never
binds (the level blocks make ``last - first <= most``) and gives the verifier the bounds.
"""

from __future__ import annotations

from typing import Callable

from cortex.core import loopir as ir
from cortex.core.lowering import jam_fuse as fuse
from cortex.core.lowering.cases import NameGen
from cortex.core.lowering.jam import JamOptions, Walk, cursor_walk, loop_plan, plain_body, prepare_walk

#: the name (a prefix: names are made fresh) of a block's panel of partial sums
PANEL = "panel"

#: the most bytes of partial sums one block's panel holds (a thread's stack array): it caps
#: the block's nodes (``panel_nodes``)
PANEL_BYTES = 128 * 1024


def _itemsize(dtype: str) -> int:
    return 8 if dtype == "float64" else 4


def _plan(w: Walk, opts: JamOptions, k_block: int) -> list[tuple[list[fuse.Sum], int, int]] | None:
    """The fused loops of the largest group, each ``(sums, start, K blocks)``; None when a loop's
    range is not a constant (a node's children) or not whole K blocks, or no loop is cut."""
    out = []
    for group in loop_plan(w.sums, opts, opts.nodes, w.regs):
        a, b = ir.const_int(group[0].node.start), ir.const_int(group[0].node.stop)
        if a is None or b is None or b <= a:
            return None
        if b - a <= k_block:
            out.append((group, a, 1))  # one block: the whole range
        elif (b - a) % k_block == 0:
            out.append((group, a, (b - a) // k_block))
        else:
            return None
    return out if any(n > 1 for _, _, n in out) else None


def panel_nodes(loop: ir.For, opts: JamOptions, program: ir.Program, names: NameGen, k_block: int) -> int:
    """The most nodes of a block whose panel fits :data:`PANEL_BYTES` (whole groups of
    ``opts.nodes``), or 0 when ``loop`` cannot be K-blocked."""
    if k_block < 1:
        return 0
    w = prepare_walk(loop, opts, program, names, independent=True)
    if w is None or _plan(w, opts, k_block) is None:
        return 0
    per_node = len(w.sums) * w.blk.width * _itemsize(ir.infer_dtype(w.sums[0].node, w.blk.dtypes))
    return max(opts.nodes, PANEL_BYTES // per_node // opts.nodes * opts.nodes)


def k_blocked_nodes(loop: ir.For, opts: JamOptions, program: ir.Program, names: NameGen, k_block: int,
                    most: int) -> ir.Stmt | None:
    """The node loop ``loop`` (``for v in first..last``, at most ``most`` nodes, independent
    iterations: a block of a level) jammed in groups of ``opts.nodes`` with its fused sums cut
    into blocks of ``k_block`` steps (see the module doc); None when that does not apply (the
    jam does not, or no fused loop is longer than ``k_block`` with a multiple of it)."""
    first = prepare_walk(loop, opts, program, names, independent=True)
    if first is None or most < 1:
        return None
    plan = _plan(first, opts, k_block)
    if plan is None:
        return None
    sums = first.sums
    index = {s: i for i, s in enumerate(sums)}
    S, W = len(sums), first.blk.width
    dtype = ir.infer_dtype(sums[0].node, first.blk.dtypes)
    panel = names.fresh(PANEL)

    def slots(w: Walk) -> fuse.Slot:
        offsets = [ir.maximum(ir.minimum(env[loop.var] - w.lo, most - 1), 0) for env in w.envs]

        def at(s: fuse.Sum, q: int, lane: ir.Var) -> ir.Load:
            return ir.Load(panel, ((offsets[q] * S + index[s]) * W + lane,))
        return at

    def bounded(w: Walk, stmt: ir.Stmt) -> ir.Stmt:
        return ir.Let(w.lo.name, loop.start, ir.Let(w.hi.name, loop.stop, stmt))

    # every slot of the panel: 0 (-inf for max)
    node = ir.Var(names.fresh(f"{loop.var}_slot"))

    def zero_at(s: fuse.Sum, q: int, lane: ir.Var) -> ir.Load:
        return ir.Load(panel, ((node * S + index[s]) * W + lane,))

    parts: list[ir.Stmt] = [ir.For(node.name, 0, most, fuse.zeroed(first.blk, sums, 1, zero_at, names, dtype),
                                   "serial")]
    # the sums, fused loop by fused loop and K block by K block (each walk with fresh names; the
    # sums' bodies are over the loop's own names, which every walk's envs rename)
    for group, a, blocks in plan:
        kb = names.fresh("kb")
        w = prepare_walk(loop, opts, program, names, independent=True)
        assert w is not None  # as ``first``
        walk = bounded(w, cursor_walk(w, opts, _partial(w, group, a, blocks, kb, k_block, slots(w), opts, names,
                                                         dtype), None, names))
        parts.append(ir.For(kb, 0, blocks, walk, "serial") if blocks > 1 else walk)
    # the body of every group, its sums read from the panel; a node whose guards fail: the plain body
    at = slots(first)
    walk = cursor_walk(first, opts, lambda m: fuse.block_body(first.blk, first.envs[:m], sums, at, names,
                                                              opts.interleave, panel, dtype),
                       plain_body(first, names), names)
    parts.append(bounded(first, walk))
    return ir.Alloc(panel, dtype, (most * S * W,), "private", ir.seq(*parts))


def _partial(w: Walk, group: list[fuse.Sum], a: int, blocks: int, kb: str, k_block: int, at: fuse.Slot,
             opts: JamOptions, names: NameGen, dtype: str) -> Callable[[int], ir.Stmt]:
    """The block of a group of ``m`` nodes for ``group``'s sums over K block ``kb`` (the whole
    range when ``blocks == 1``): its slots loaded from the panel (``at``) into registers, the
    fused loop, the registers stored back."""
    W = w.blk.width
    reg = {s: i for i, s in enumerate(group)}

    def block(m: int) -> ir.Stmt:
        acc = names.fresh("acc")

        def acc_at(s: fuse.Sum, q: int, lane: ir.Var) -> ir.Load:
            c = (reg[s] * m + q) * W
            return ir.Load(acc, (ir.BinOp("+", ir.Const(c), lane) if c else lane,))

        jl, jr = ir.Var(names.fresh(w.blk.lane)), ir.Var(names.fresh(w.blk.lane))
        load = [ir.Store(acc, acc_at(s, q, jl).index, at(s, q, jl)) for s in group for q in range(m)]
        back = [ir.Store(at(s, q, jr).buffer, at(s, q, jr).index, acc_at(s, q, jr)) for s in group for q in range(m)]
        if blocks > 1:
            start = ir.simplify(ir.Const(a) + ir.Var(kb) * k_block)
            fused = fuse.fused_loop(w.blk, m, w.envs[:m], group, acc_at, opts.unroll, names,
                                    start, start + k_block, k_block)  # type: ignore[operator]
        else:
            r = group[0].node
            fused = fuse.fused_loop(w.blk, m, w.envs[:m], group, acc_at, opts.unroll, names, r.start, r.stop)
        return ir.Alloc(acc, dtype, (len(group) * m * W,), "private", ir.seq(
            ir.For(jl.name, 0, W, ir.seq(*load), "vectorized"), fused,
            ir.For(jr.name, 0, W, ir.seq(*back), "vectorized")))

    return block
