"""``cortex.core.lowering.level_blocks`` (``panel_kib``: a large interchanged level run in blocks of
nodes), checked against the untransformed program on the interpreter and the verifier, and the
knob's default rule."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.lowering.jam import JamOptions, jam_levels
from cortex.core.lowering.level_blocks import (block_levels, gathered_row_bytes, own_row_bytes, pays,
                                               weight_bytes)
from cortex.core.lowering.level_interchange import interchange_levels, is_node_loop
from cortex.core.lowering.loop_shapes import block_hidden_loops
from cortex.core.lowering.schedule import ScheduleSpace
from cortex.core.loopir.verify import verify
from cortex.core.plugin.capabilities import Capabilities

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_jam import _case, _same, _serial_hidden  # noqa: E402

H = 8  # _case's hidden size: a child row of h is 8 float64 = 64 bytes


def _blocked(program: ir.Program, panel_bytes: int, opts: JamOptions | None, chunks: int = 2, units: int = 1):
    """What the schedule does: hidden blocks of 4, interchange, level blocks, jam."""
    swapped, _ = interchange_levels(block_hidden_loops(_serial_hidden(program), 4)[0])
    out, n = block_levels(swapped, panel_bytes, opts, chunks=chunks, where_it_pays=False, units=units)
    if opts is not None:
        out, _ = jam_levels(out, opts)
    return out, n


def _node_loops(program: ir.Program) -> list[ir.For]:
    return [x for x in ir.walk(program.kernel("level").body) if isinstance(x, ir.For) and is_node_loop(x)]


def test_the_rows_a_node_gathers_and_the_weights_it_reads_are_counted():
    program, _, _ = _case("tree_lstm", seed=1, drop_children=False)
    swapped, _ = interchange_levels(block_hidden_loops(_serial_hidden(program), 4)[0])
    [node] = _node_loops(swapped)
    # the children's h rows (two children, H float64 each) are the only rows gathered in sums
    assert gathered_row_bytes(node, swapped) == 2 * H * 8
    params = {b.name: b for b in swapped.buffers if b.role == "param"}
    assert weight_bytes(node, swapped) > 0
    assert weight_bytes(node, swapped) <= sum(int(np.prod([ir.const_int(d) for d in b.shape])) * 8
                                              for b in params.values())


def test_the_nodes_own_rows_its_reductions_read_count_towards_the_panel():
    """A TreeGRU's candidate GEMV reads the node's ``r * h_k`` rows (two temporaries of H
    float32) besides the children's rows it gathers; its reset-gate GEMV reads no own row.
    Level 1 (its gates read from tables) gathers no child rows: its reset stage reads no own
    row either, its candidate GEMV its own ``r * h_k``."""
    import cortex
    from cortex.models import TreeGRU

    exe = cortex.compile(TreeGRU(hidden=64, embed=8, vocab=10), target="numpy",
                         schedule={"panel_kib": 0, "node_jam": 1, "interchange": True, "leaf_kids": False})
    program = exe.program
    loops = [x.body for x in ir.walk(program.kernel("main").body)
             if isinstance(x, ir.For) and x.kind == "parallel" and isinstance(x.body, ir.For)
             and is_node_loop(x.body)]
    counted = sorted((gathered_row_bytes(v, program), own_row_bytes(v, program)) for v in loops)
    rows = 2 * 64 * 4
    assert counted == [(0, 0), (0, rows), (rows, 0), (rows, rows)]


_JAM8 = JamOptions(nodes=8, pad=True, register_lanes=4, unroll=2)
_JAM4 = JamOptions(nodes=4, pad=False, register_lanes=4)


# Every pair of values of any two of (jam, chunks, model, missing children) appears in some
# case (a pairwise cover of the 36 combinations: the interpreter takes seconds per case).
@pytest.mark.parametrize("opts, chunks, name, drop_children", [
    (None, 1, "tree_rnn", False), (None, 2, "tree_rnn", False), (None, 3, "tree_lstm", True),
    (_JAM8, 1, "tree_rnn", False), (_JAM8, 2, "tree_lstm", False), (_JAM8, 3, "tree_rnn", True),
    (_JAM4, 1, "tree_lstm", True), (_JAM4, 2, "tree_rnn", True), (_JAM4, 3, "tree_rnn", False),
], ids=lambda v: {id(None): "no-jam", id(_JAM8): "jam8", id(_JAM4): "jam4-nopad"}.get(id(v)))
def test_blocked_levels_compute_the_same_and_verify(name, drop_children, opts, chunks):
    """Many trees, so levels of dozens of nodes cut into blocks of 1 KiB of rows (8 nodes: two
    child rows of H float64 each), with and without the jam inside each block, the hidden
    blocks (two of 4 units) split into 1, 2 or 3 chunks (a chunk may be empty)."""
    program, bufs, sizes = _case(name, seed=5, drop_children=drop_children, n_trees=20)
    assert np.diff(bufs["level_offsets"]).max() > 16
    blocked, n = _blocked(program, 1024, opts, chunks)
    assert n >= 1
    verify(blocked)
    _same(program, blocked, bufs, sizes)


@pytest.mark.parametrize("chunks", [1, 2, 3])
@pytest.mark.parametrize("opts", [None, _JAM8], ids=["no-jam", "jam8"])
def test_blocked_levels_in_units_for_a_dynamic_split_compute_the_same(opts, chunks):
    """``units=4`` (``level_split="dynamic"``): each chunk's hidden blocks cut into quarters, each
    a parallel iteration over every node block (most quarters of two hidden blocks are empty);
    still every node and hidden block once, and the parallel loop's range is a constant (the
    weights stay recognisable as weights: ``weight_storage.streamed_weights``)."""
    program, bufs, sizes = _case("tree_lstm", seed=5, drop_children=False, n_trees=20)
    blocked, n = _blocked(program, 1024, opts, chunks, units=4)
    assert n >= 1
    verify(blocked)
    pars = [x for x in ir.walk(blocked.kernel("level").body) if isinstance(x, ir.For) and x.kind == "parallel"]
    assert pars and all(ir.const_int(x.stop) == chunks * 4 for x in pars)
    _same(program, blocked, bufs, sizes)


def test_a_block_is_whole_jam_groups_and_levels_that_fit_are_one_block():
    program, bufs, sizes = _case("tree_lstm", seed=7, drop_children=False, n_trees=20)
    opts = JamOptions(nodes=8, pad=True, register_lanes=4)
    # a panel of 3 nodes' rows still makes blocks of a whole group of 8
    small, n = _blocked(program, 3 * 2 * H * 8, opts)
    assert n >= 1
    _same(program, small, bufs, sizes)
    # a panel larger than any level: one block per level, same results
    large, n = _blocked(program, 4 << 20, opts)
    assert n >= 1
    _same(program, large, bufs, sizes)


def test_blocks_only_where_they_save_more_rows_than_they_read_weights_again():
    l2 = 2 << 20
    assert pays(weights=1.3 * (1 << 20), hidden_blocks=8, panel_bytes=1 << 20, cache_bytes=l2)  # hidden 256
    assert not pays(weights=5 << 20, hidden_blocks=16, panel_bytes=1 << 20, cache_bytes=l2)  # beyond L2
    assert not pays(weights=1 << 20, hidden_blocks=1, panel_bytes=1 << 20, cache_bytes=l2)  # saves too little
    program, _, _ = _case("tree_lstm", seed=1, drop_children=False)
    swapped, _ = interchange_levels(block_hidden_loops(_serial_hidden(program), 4)[0])
    [node] = _node_loops(swapped)
    # a panel of one row: two hidden blocks save 2 x 128 bytes, the weights are more
    assert weight_bytes(node, swapped) > 2 * gathered_row_bytes(node, swapped)
    out, n = block_levels(swapped, gathered_row_bytes(node, swapped), None, chunks=1, cache_bytes=1 << 30)
    assert n == 0 and out == swapped
    out, n = block_levels(swapped, 0, None, chunks=1, cache_bytes=1 << 30)
    assert n == 0 and out == swapped


def test_the_default_panel_is_half_a_cores_cache_and_needs_the_interchange():
    caps = Capabilities(vector_bits=512, num_cores=2, cache_bytes_per_core=2 << 20, single_call=True)
    space = ScheduleSpace(caps)
    knob = {k.name: k for k in space.knobs}["panel_kib"]
    assert knob.default == 1024 and 0 in knob.choices
    assert knob.needs == ("interchange",)
    unknown = ScheduleSpace(Capabilities(vector_bits=512, num_cores=2, single_call=True))
    assert {k.name: k for k in unknown.knobs}["panel_kib"].default == 0
