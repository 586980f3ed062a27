"""``cortex.core.lowering.jam`` (the node jam) and ``cortex.core.lowering.jam_fuse`` (its fused reduction loops),
checked against the untransformed program on the interpreter (like loopy checks its
transforms), and the verifier."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.lowering.jam import JamOptions, jam_levels, no_self_reads, stages
from cortex.core.lowering.jam_fuse import split_lane
from cortex.core.lowering.level_interchange import interchange_levels
from cortex.core.lowering.loop_shapes import block_hidden_loops
from cortex.core.lowering.transforms import change_layout, physical_arrays
from cortex.core.loopir import interpret
from cortex.core.loopir.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_loopir_examples import child_sum, inputs, random_batch, tree_lstm, tree_rnn  # noqa: E402

BUILDERS = {"tree_rnn": tree_rnn, "tree_lstm": tree_lstm}


def _serial_hidden(program: ir.Program) -> ir.Program:
    """What the CPU schedule gives (``parallel="nodes"``): serial hidden loops."""

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.For) and n.var in ("j", "jl") and n.kind == "parallel":
            return replace(n, kind="serial")
        return None

    return ir.transform(program, f)


def _case(name: str, seed: int, drop_children: bool, n_trees: int = 6, H: int = 8):
    rng = np.random.default_rng(seed)
    program = BUILDERS[name](form="per_level", dtype="float64", H=H)
    batch = random_batch(rng, n_trees=n_trees, max_leaves=12, arity=2)
    bufs, sizes = inputs(batch, program, rng)
    if drop_children:  # some internal nodes lose a child: their groups run the cold plain body
        table = bufs["child_table"].copy()
        inner = np.flatnonzero(table[:, 0] >= 0)
        table[inner[::3], 1] = -1
        bufs["child_table"] = table
    return program, bufs, sizes


def _jam(program: ir.Program, opts: JamOptions, width: int = 4) -> tuple[ir.Program, int]:
    """What the schedule does: hidden loops in blocks of ``width``, interchange, jam."""
    blocked, _ = block_hidden_loops(program, width)
    swapped, _ = interchange_levels(blocked)
    return jam_levels(swapped, opts)


def _same(a: ir.Program, b: ir.Program, bufs: dict, sizes: dict) -> None:
    want, got = interpret.run(a, dict(bufs), sizes), interpret.run(b, dict(bufs), sizes)
    for name in ("h", "c"):
        if name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)


def _fused_loops(program: ir.Program) -> list[ir.For]:
    """The level kernel's fused reduction loops (a serial loop around a vector loop of
    accumulator updates)."""
    return [x for x in ir.walk(program.kernel("level").body) if isinstance(x, ir.For) and x.kind == "serial"
            and isinstance(x.body, ir.For) and x.body.kind == "vectorized"
            and any(isinstance(s, ir.Store) and s.buffer.startswith("acc") for s in ir.walk(x.body))]


def test_stages_halve_the_group_and_pad_from_three_quarters():
    assert stages(8, True) == ((8, 6), (4, 3), (2, 2), (1, 1))
    assert stages(8, False) == ((8, 8), (4, 4), (2, 2), (1, 1))
    assert stages(16, True)[0] == (16, 12) and stages(3, True) == ((3, 3), (1, 1))


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("serial", [True, False])
@pytest.mark.parametrize("drop_children", [False, True])
@pytest.mark.parametrize("opts", [JamOptions(nodes=8, pad=True, accumulators=24, register_lanes=4, unroll=2),
                                  JamOptions(nodes=4, pad=False, accumulators=6, register_lanes=4, unroll=1, interleave=False),
                                  JamOptions(nodes=3, pad=True, accumulators=4, register_lanes=2, unroll=4)],
                         ids=["8-pad-u2", "4-nopad-6accs", "3-tiny-budget"])
def test_jammed_program_computes_the_same_and_verifies(name, serial, drop_children, opts):
    program, bufs, sizes = _case(name, seed=3, drop_children=drop_children)
    if serial:
        program = _serial_hidden(program)
    jammed, n = _jam(program, opts)
    assert n == (2 if name == "tree_lstm" else 1)  # its leaves have GEMVs too
    verify(jammed)
    # the level kernel has no reduction left outside the cold fallback
    level = jammed.kernel("level")
    cold = [x for x in ir.walk(level.body) if isinstance(x, ir.For) and "cold" in x.annotations]
    assert bool(cold) == (name in ("tree_rnn", "tree_lstm"))  # both have child guards
    outside = sum(isinstance(x, ir.Reduce) for x in ir.walk(level.body))
    inside = sum(isinstance(x, ir.Reduce) for c in cold for x in ir.walk(c))
    assert outside == inside
    _same(program, jammed, bufs, sizes)


def test_every_level_width_runs_through_the_stages():
    """Many small trees: level widths from 1 to dozens, through every stage and padded group."""
    program, bufs, sizes = _case("tree_lstm", seed=11, drop_children=False, n_trees=40)
    widths = np.diff(bufs["level_offsets"])
    assert widths.max() > 16 and 1 in widths
    for opts in (JamOptions(nodes=8, pad=True, register_lanes=4), JamOptions(nodes=16, pad=False, register_lanes=4)):
        jammed, _ = _jam(_serial_hidden(program), opts)
        _same(program, jammed, bufs, sizes)


def test_fused_loops_keep_within_the_accumulator_budget_and_share_loads():
    program = _serial_hidden(tree_lstm(form="per_level", dtype="float64", H=8))
    jammed, _ = _jam(program, JamOptions(nodes=2, accumulators=6, register_lanes=4, unroll=1))
    fused = _fused_loops(jammed)
    assert fused
    for loop in fused:
        slots = {s.index for s in ir.walk(loop) if isinstance(s, ir.Store)}
        assert len(slots) <= 6  # accumulators (one register each here) per loop
        weights = [s for s in ir.walk(loop) if isinstance(s, ir.Let) and s.var.startswith("w")]
        assert weights and len(weights) == len({w.value for w in weights})  # each weight vector once


def test_fused_loops_read_at_most_the_row_budget_and_keep_a_childs_gates_together():
    """``rows`` 2: a group of 2 or 4 nodes reads one child row per node a loop, so the left and
    right children's sums go to different loops, while the gates over one child share theirs;
    a single node reads both children in one loop."""
    program, bufs, sizes = _case("tree_lstm", seed=5, drop_children=True)
    program = _serial_hidden(program)
    opts = JamOptions(nodes=4, pad=False, accumulators=24, register_lanes=4, unroll=1, rows=2)
    jammed, _ = _jam(program, opts)
    fused = _fused_loops(jammed)
    rows = [{ld.index[0] for ld in ir.walk(x) if isinstance(ld, ir.Load) and ld.buffer == "h"} for x in fused]
    slots = [{s.index for s in ir.walk(x) if isinstance(s, ir.Store)} for x in fused]
    assert max(len(r) for r in rows) == 4  # 4 nodes x 1 child
    assert any(len(r) == 4 and len(a) == 20 for r, a in zip(rows, slots))  # 5 gates of a child x 4 nodes
    assert len(fused) > len(_fused_loops(_jam(program, replace(opts, rows=0))[0]))
    verify(jammed)
    _same(program, jammed, bufs, sizes)


def test_a_node_dependent_range_is_not_fused():
    program = _serial_hidden(child_sum(form="per_level", dtype="float64", H=8))
    _, n = _jam(program, JamOptions(nodes=4, register_lanes=4))
    assert n == 0  # the child sum runs over a CSR range: nothing to fuse


def test_a_sum_reading_its_own_stored_row_is_not_moved():
    program = _serial_hidden(tree_rnn(form="per_level", dtype="float64", H=8))

    def own_row(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.Load) and n.buffer == "h" and n.index[0] in (ir.Var("c0"), ir.Var("c1")):
            return replace(n, index=(ir.Var("v"),) + n.index[1:])
        return None

    _, n = _jam(ir.transform(program, own_row), JamOptions(nodes=4, register_lanes=4))  # type: ignore[arg-type]
    assert n == 0


def test_a_sum_reading_its_own_row_through_a_let_is_not_moved():
    program = _serial_hidden(tree_rnn(form="per_level", dtype="float64", H=8))

    def own_row(n: ir.Node) -> ir.Node | None:  # let c0 = v (+ 0): the node itself, not a child
        if isinstance(n, ir.Let) and n.var == "c0":
            return replace(n, value=ir.Var("v") + 0)
        return None

    _, n = _jam(ir.transform(program, own_row), JamOptions(nodes=4, register_lanes=4))  # type: ignore[arg-type]
    assert n == 0


def test_hidden_sizes_that_the_block_does_not_divide_are_left_alone():
    program = _serial_hidden(tree_rnn(form="per_level", dtype="float64", H=6))
    _, n = _jam(program, JamOptions(nodes=2, register_lanes=4), width=4)
    assert n == 0


def test_padding_only_where_the_body_reads_nothing_it_stores():
    child = ir.Let("c", ir.Load("child_table", (ir.Var("v"), 0)),
                   ir.Store("h", (ir.Var("v"), 0), ir.Load("h", (ir.Var("c"), 0))))
    assert no_self_reads(child, "v")
    own = ir.Store("h", (ir.Var("v"), 1), ir.Load("h", (ir.Var("v"), 0)))
    assert not no_self_reads(own, "v")
    alias = ir.Let("w", ir.Var("v"), ir.Store("h", (ir.Var("w"), 1), ir.Load("h", (ir.Var("w"), 0))))
    assert not no_self_reads(alias, "v")


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_packed_weights_are_read_one_block_per_vector(name):
    """With weights packed by the block width, every weight load of a fused loop moves along
    the block's last index only (one vector load), with no division left in its index."""
    program, bufs, sizes = _case(name, seed=5, drop_children=False)
    program = _serial_hidden(program)
    relaid = change_layout(change_layout(program, "W", "packed", 4), "U", "packed", 4) if name == "tree_lstm" \
        else change_layout(program, "W", "packed", 4)
    jammed, n = _jam(relaid, JamOptions(nodes=2, register_lanes=4))
    assert n >= 1
    verify(jammed)
    packed = {b.name for b in jammed.buffers if b.layout[0] == "packed"}
    assert packed
    weights = [let.value for let in (x for x in ir.walk(jammed) if isinstance(x, ir.Let) and x.var.startswith("w"))
               if isinstance(let.value, ir.Load) and let.value.buffer in packed]
    assert weights
    for load in weights:
        assert not any(isinstance(x, ir.BinOp) and x.op in ("//", "%") for x in ir.walk(load))
    want = interpret.run(program, dict(bufs), sizes)
    got = interpret.run(jammed, physical_arrays(jammed, dict(bufs)), sizes)
    np.testing.assert_allclose(got["h"], want["h"], rtol=1e-12, atol=1e-12)


def test_split_lane_keeps_only_the_lane_in_the_block_index():
    jb, jl = ir.Var("jb"), ir.Var("jl")
    e = ir.BinOp("//", jb * 16 + jl + 64, ir.Const(16))
    assert split_lane(e, "jl", 16) == jb + 4
    assert split_lane(ir.BinOp("%", jb * 16 + jl + 64, ir.Const(16)), "jl", 16) == jl
    kept = ir.BinOp("//", jb * 16 + jl + 8, ir.Const(16))  # 8 is not a multiple: the lane may cross
    assert split_lane(kept, "jl", 16) == kept


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("drop_children", [False, True])
def test_a_level_jammed_without_interchange_runs_chunks_of_nodes_per_hidden_block(name, drop_children):
    """interchange=False: the level loop becomes work units of (hidden block, chunk of nodes),
    each chunk walked in groups as in the interchanged form."""
    program, bufs, sizes = _case(name, seed=7, drop_children=drop_children, n_trees=12)
    blocked, _ = block_hidden_loops(_serial_hidden(program), 4)
    jammed, n = jam_levels(blocked, JamOptions(nodes=4, register_lanes=4, unroll=2), interchanged=False)
    assert n >= 1
    verify(jammed)
    level = jammed.kernel("level").body
    units = [x for x in ir.walk(level) if isinstance(x, ir.For) and x.kind == "parallel"]
    assert len(units) == 1 and isinstance(units[0].stop, ir.BinOp) and units[0].stop.op == "*"
    _same(program, jammed, bufs, sizes)
