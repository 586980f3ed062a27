"""``cortex.core.lowering.k_blocks`` (``k_block``: a block of a level's nodes jammed with its
reductions cut into K blocks, partial sums in a panel), checked against the untransformed
program on the interpreter and the verifier."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.lowering.jam import JamOptions
from cortex.core.lowering.level_blocks import block_levels
from cortex.core.lowering.level_interchange import interchange_levels
from cortex.core.lowering.loop_shapes import block_hidden_loops
from cortex.core.loopir.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_jam import _case, _same, _serial_hidden  # noqa: E402


def _k_blocked(program: ir.Program, k_block: int, opts: JamOptions, panel_bytes: int = 1024, chunks: int = 2):
    """What the schedule does: hidden blocks of 4, interchange, level blocks with K blocks."""
    swapped, _ = interchange_levels(block_hidden_loops(_serial_hidden(program), 4)[0])
    return block_levels(swapped, panel_bytes, opts, chunks=chunks, where_it_pays=False, k_block=k_block)


def _panels(program: ir.Program) -> list[ir.Alloc]:
    return [n for k in program.kernels for n in ir.walk(k.body) if isinstance(n, ir.Alloc) and n.name.startswith("panel")]


_JAM8 = JamOptions(nodes=8, pad=True, register_lanes=4, unroll=2)
_JAM4 = JamOptions(nodes=4, pad=False, register_lanes=4, accumulators=8)
_JAM2 = JamOptions(nodes=2, pad=True, register_lanes=4, unroll=2, interleave=False)


# Every pair of values of any two of (jam, K block, model, missing children) appears in some
# case (a pairwise cover of the 24 combinations: the interpreter takes seconds per case).
@pytest.mark.parametrize("opts, k_block, name, drop_children", [
    (_JAM8, 2, "tree_lstm", False), (_JAM8, 4, "tree_rnn", True),
    (_JAM4, 4, "tree_lstm", True), (_JAM4, 2, "tree_rnn", False),
    (_JAM2, 4, "tree_lstm", False), (_JAM2, 2, "tree_rnn", True),
], ids=lambda v: {id(_JAM8): "jam8-unroll2", id(_JAM4): "jam4-nopad-acc8", id(_JAM2): "jam2-node-by-node"}.get(id(v)))
def test_k_blocked_levels_compute_the_same_and_verify(name, drop_children, k_block, opts):
    """Levels of dozens of nodes in blocks of 8 (1 KiB of rows), their sums over a child's 8
    hidden units in K blocks of 2 or 4 steps; groups padded or not, nodes whose child is
    missing (the cold plain body), two threads' chunks of hidden blocks."""
    program, bufs, sizes = _case(name, seed=5, drop_children=drop_children, n_trees=20)
    assert np.diff(bufs["level_offsets"]).max() > 16
    blocked, n = _k_blocked(program, k_block, opts)
    assert n >= 1 and _panels(blocked)
    verify(blocked)
    _same(program, blocked, bufs, sizes)


def test_k_blocks_only_where_a_sum_is_longer_than_a_block_and_a_multiple_of_it():
    program, bufs, sizes = _case("tree_lstm", seed=3, drop_children=False, n_trees=20)
    opts = JamOptions(nodes=8, pad=True, register_lanes=4)
    whole, _ = _k_blocked(program, 0, opts)
    assert not _panels(whole)
    for k_block in (8, 16, 3):  # the whole range (8 steps) in one block, or not a divisor of it
        out, n = _k_blocked(program, k_block, opts)
        assert n >= 1 and not _panels(out)
        _same(program, out, bufs, sizes)


def test_a_panel_holds_the_block_s_nodes_partial_sums():
    program, _, _ = _case("tree_lstm", seed=3, drop_children=False, n_trees=20)
    out, _ = _k_blocked(program, 4, JamOptions(nodes=8, pad=True, register_lanes=4))
    # a block of 8 nodes (1 KiB of rows: two children's 8 float64), 4 lanes a sum: the internal
    # level's 10 sums (5 gates x 2 children)
    shapes = {p.shape[0] for p in _panels(out)}
    assert 8 * 10 * 4 in shapes and all(n % (8 * 4) == 0 for n in shapes)


def test_the_knob_is_off_by_default_and_offered_where_level_blocks_are():
    from cortex.core.lowering.schedule import ScheduleSpace
    from cortex.core.plugin.capabilities import Capabilities

    team = ScheduleSpace(Capabilities(vector_bits=512, num_cores=2, cache_bytes_per_core=2 << 20, single_call=True))
    knob = {k.name: k for k in team.knobs}["k_block"]
    assert knob.default == 0 and knob.choices == (0, 64, 128, 256)
    assert knob.needs == ("interchange", "panel_kib", "node_jam")
    grid = ScheduleSpace(Capabilities(has_grid=True, grid_barrier=True, group_barrier=True,
                                      max_threads_per_group=1024, shared_memory_bytes=48 << 10))
    assert {k.name: k for k in grid.knobs}["k_block"].choices == (0,)
