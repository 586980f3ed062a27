"""``cortex.core.lowering.jam``: node jamming with fused reductions, checked against the untransformed
program on the interpreter (like loopy checks its transforms), and the verifier."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.loopir import interpret
from cortex.core.loopir.verify import verify
from cortex.core.lowering.jam import jam_nodes, weights_to_transpose
from cortex.core.lowering.transforms import change_layout, physical_arrays

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


def _case(name: str, seed: int, drop_children: bool):
    rng = np.random.default_rng(seed)
    program = BUILDERS[name](form="per_level", dtype="float64", H=8)
    batch = random_batch(rng, n_trees=4, max_leaves=9, arity=2)
    bufs, sizes = inputs(batch, program, rng)
    if drop_children:  # some internal nodes lose a child: the guarded (slow) path runs too
        table = bufs["child_table"].copy()
        inner = np.flatnonzero(table[:, 0] >= 0)
        table[inner[::3], 1] = -1
        bufs["child_table"] = table
    return program, bufs, sizes


def _same(a: ir.Program, b: ir.Program, bufs: dict, sizes: dict) -> None:
    want, got = interpret.run(a, bufs, sizes), interpret.run(b, bufs, sizes)
    for name in ("h", "c"):
        if name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("serial", [True, False])
@pytest.mark.parametrize("drop_children", [False, True])
def test_jammed_program_computes_the_same_and_verifies(name, serial, drop_children):
    program, bufs, sizes = _case(name, seed=3, drop_children=drop_children)
    if serial:
        program = _serial_hidden(program)
    # jam 3 nodes: levels of 1, 2, 3, 4.. nodes hit whole chunks and the node-by-node tail
    jammed, changed = jam_nodes(program, jam=3, vector=4, max_accumulators=6)
    assert "level" in changed
    verify(jammed)
    assert not any(isinstance(n, ir.Reduce) for k in jammed.kernels if k.name in changed
                   for n in ir.walk(k.body))  # every sum was fused
    _same(program, jammed, bufs, sizes)


def test_fused_loops_share_a_child_load_and_respect_the_accumulator_budget():
    program = _serial_hidden(tree_lstm(form="per_level", dtype="float64", H=8))
    jammed, _ = jam_nodes(program, jam=2, vector=4, max_accumulators=6)
    level = jammed.kernel("level")
    fused = [n for n in ir.walk(level.body) if isinstance(n, ir.For) and n.var.endswith("k")]
    assert fused
    for loop in fused:
        stores = [n for n in ir.walk(loop.body) if isinstance(n, ir.Store)]
        assert len(stores) <= 6  # jam x sums per loop within the budget
        children = {repr(x) for n in stores for x in ir.walk(n.value)
                    if isinstance(x, ir.Load) and x.buffer == "h"}
        assert len(children) <= 2  # one child's h per node: the loads are shared by its sums


def test_node_dependent_ranges_are_left_alone():
    program = _serial_hidden(child_sum(form="per_level", dtype="float64", H=8))
    jammed, changed = jam_nodes(program, jam=3, vector=4)
    assert "level" not in changed


def test_a_sum_reading_its_own_stored_row_is_not_moved():
    program = _serial_hidden(tree_rnn(form="per_level", dtype="float64", H=8))

    def own_row(n: ir.Node) -> ir.Node | None:
        if isinstance(n, ir.Load) and n.buffer == "h" and n.index[0] in (ir.Var("c0"), ir.Var("c1")):
            return replace(n, index=(ir.Var("v"),) + n.index[1:])
        return None

    program = ir.transform(program, own_row)
    _, changed = jam_nodes(program, jam=3, vector=4)
    assert "level" not in changed


def test_hidden_sizes_that_the_vector_does_not_divide_are_left_alone():
    program = _serial_hidden(tree_rnn(form="per_level", dtype="float64", H=6))
    _, changed = jam_nodes(program, jam=2, vector=4)
    assert not changed


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("layout", ["transposed", "packed"])
def test_relaid_weights_make_the_fused_loads_contiguous(name, layout):
    program, bufs, sizes = _case(name, seed=5, drop_children=False)
    program = _serial_hidden(program)
    names = weights_to_transpose(program)
    assert names and all(program.buffer(n).role == "param" for n in names)
    relaid = program
    for n in names:
        relaid = change_layout(relaid, n, layout, 4)
    jammed, _ = jam_nodes(relaid, jam=2, vector=4)
    verify(jammed)
    loads = [x for k in jammed.kernels for n in ir.walk(k.body) if isinstance(n, ir.Store)
             and n.buffer.endswith("accall") for x in ir.walk(n.value) if isinstance(x, ir.Load) and x.buffer in names]
    assert loads
    for load in loads:  # the lane moves along the last index only (packed: the in-block index)
        assert load.index[-1] == ir.Var("cxj_jl") or "cxj_jl" in {
            v.name for v in ir.walk(load.index[-1]) if isinstance(v, ir.Var)}
        assert all("cxj_jl" not in {v.name for v in ir.walk(i) if isinstance(v, ir.Var)} for i in load.index[:-1])
    want = interpret.run(program, bufs, sizes)
    got = interpret.run(jammed, physical_arrays(jammed, bufs), sizes)
    np.testing.assert_allclose(got["h"], want["h"], rtol=1e-12, atol=1e-12)


def test_a_sum_reading_its_own_row_through_a_let_is_not_moved():
    program = _serial_hidden(tree_rnn(form="per_level", dtype="float64", H=8))

    def own_row(n: ir.Node) -> ir.Node | None:  # let c0 = v (+ 0): the node itself, not a child
        if isinstance(n, ir.Let) and n.var == "c0":
            return replace(n, value=ir.Var("v") + 0)
        return None

    program = ir.transform(program, own_row)
    _, changed = jam_nodes(program, jam=3, vector=4)
    assert "level" not in changed
