"""Nodes with a leaf child read that child's projections from level 1's tables (schedule knob
``leaf_kids``, cortex.core.lowering.leaf_kids): which graphs get the cases, the per-call node
order, and that the knob on and off agree on the interpreter-backed numpy target and on llvm."""

from __future__ import annotations

import numpy as np
import pytest

import cortex
from cortex.core.linearize import linearize
from cortex.core.lowering.leaf_kids import leaf_kid_cases, leaf_kid_order
from cortex.core.passes.pipeline import run_passes
from cortex.models import ChildSumTreeLSTM, TreeFC, TreeGRU, TreeLSTM
from tests.core.test_preterminal import trees


def test_each_child_position_gets_a_case_reading_the_level_one_tables():
    g = run_passes(TreeLSTM(hidden=8, embed=6, vocab=40).trace())
    kid0, kid1 = leaf_kid_cases(g)
    pre = {v.attr("name") for v in g.case("preterminal").values if v.op == "param"}
    internal = {v.attr("name") for v in g.case("internal").values if v.op == "param"}
    for i, case in enumerate((kid0, kid1)):
        params = {v.attr("name") for v in case.values if v.op == "param"}
        assert params <= pre | internal  # no new table
        assert [v.attr("index") for v in case.values if v.op == "child_state"] == [1 - i, 1 - i]
        assert [v.attr("index") for v in case.values if v.op == "child_input"] == [i]
        assert sum(v.op == "linear" for v in case.values) == 1  # the other child's GEMV only
    # TreeGRU: the gates' GEMVs of the leaf child are rows, the candidate's stays a GEMV
    gru = leaf_kid_cases(run_passes(TreeGRU(hidden=8, embed=6, vocab=40).trace()))
    assert [sum(v.op == "linear" for v in c.values) for c in gru] == [4, 4]
    # no level-1 case (no fixed arity, or no tables): no leaf-kid cases
    assert leaf_kid_cases(run_passes(ChildSumTreeLSTM(hidden=8, embed=6, vocab=40).trace())) == ()
    assert leaf_kid_cases(run_passes(TreeLSTM(hidden=8, embed=6, vocab=40).trace(), passes=[])) == ()


def test_the_order_groups_each_level_by_its_first_leaf_child():
    batch = linearize([((1, 2), 3), (4, (5, 6)), ((7, 8), (9, 10)), (((1, 2), 3), 4)], arity=2)
    order, offsets = leaf_kid_order(batch.level_offsets, batch.child_table, batch.num_leaves, 2, min_nodes=1)
    lo, ct, nl = batch.level_offsets, batch.child_table, batch.num_leaves
    assert sorted(order.tolist()) == list(range(batch.num_nodes)) and order.dtype == np.int32
    assert offsets[::3].tolist() == lo.tolist()
    for level in range(batch.num_levels):
        assert sorted(order[lo[level]:lo[level + 1]].tolist()) == list(range(lo[level], lo[level + 1]))
        for c in range(3):
            nodes = order[offsets[3 * level + c]:offsets[3 * level + c + 1]].tolist()
            assert nodes == sorted(nodes)
            for v in nodes:
                leafy = [i for i in range(2) if 0 <= ct[v, i] < nl]
                assert c == (leafy[0] + 1 if leafy and level > 0 else 0)
    # level 2 of this batch: one node with no leaf child, one whose child 0 is a leaf, two whose
    # child 1 is
    assert np.diff(offsets[6:10]).tolist() == [1, 1, 2]
    # by default a leaf-child class of fewer than four nodes in its level joins class 0
    order, offsets = leaf_kid_order(batch.level_offsets, batch.child_table, batch.num_leaves, 2)
    assert np.diff(offsets[6:10]).tolist() == [4, 0, 0]
    assert order[lo[2]:lo[3]].tolist() == list(range(lo[2], lo[3]))
    many = linearize([(i, (i + 1, i + 2)) for i in range(5)] + [((1, 2), 3)], arity=2)
    order, offsets = leaf_kid_order(many.level_offsets, many.child_table, many.num_leaves, 2)
    assert np.diff(offsets[6:10]).tolist() == [1, 5, 0]  # five nodes whose child 0 is a leaf


@pytest.mark.parametrize("model_cls", [TreeLSTM, TreeGRU, TreeFC])
@pytest.mark.parametrize("target", ["numpy", "llvm"])
def test_on_and_off_agree(model_cls, target):
    # hidden 64: four hidden blocks, which the threads of a llvm call split
    model = model_cls(hidden=64, embed=8, vocab=40)
    on = cortex.compile(model, target=target, schedule={"leaf_kids": True})
    off = cortex.compile(model, target=target, schedule={"leaf_kids": False})
    assert any(n.startswith("leaf_kids:") for n in on.notes)
    assert not any(n.startswith("leaf_kids:") for n in off.notes)
    if target == "llvm":  # a level's classes share its parallel loops (one per phase)
        assert any(n.startswith("leaf_kids: 1 level loops run each phase") for n in on.notes)
    # eight nodes of level 2 whose child 0 is a leaf, eight whose child 1 is, and mixed trees
    kids = [(i, (i + 1, i + 2)) for i in range(1, 9)] + [((i, i + 1), i + 2) for i in range(1, 9)]
    for batch in (kids, trees(3) + kids, trees(4, vocab=40), [7], [(1, 2)]):
        a, b = on(batch), off(batch)
        for s in a.states:
            np.testing.assert_allclose(a.nodes(s), b.nodes(s), rtol=1e-5, atol=1e-6)


def test_a_prelinearized_batch_of_another_executable_runs_and_agrees():
    """The order is built per call from the batch's arrays (kept on a sealed batch): a batch
    linearized elsewhere, or one whose node order the executable never saw, is ordered too."""
    model = TreeLSTM(hidden=16, embed=8, vocab=40)
    on = cortex.compile(model, target="llvm", schedule={"leaf_kids": True})
    off = cortex.compile(model, target="llvm", schedule={"leaf_kids": False})
    batch = off.linearize(trees(5))
    a, b = on.run(batch), off.run(batch)
    np.testing.assert_allclose(a.nodes("h"), b.nodes("h"), rtol=1e-5, atol=1e-6)


def test_on_by_default_with_bfloat16_weights_too():
    """A leaf child's table row is computed from the rounded weights the other children's
    GEMVs read (test_weight_storage: the schedules agree), and it measured faster or the same
    (TreeLSTM, TreeGRU, TreeFC at b1-b100): the knob is on there too, its rule says why, and a
    caller may turn it off."""
    model = TreeLSTM(hidden=16, embed=8, vocab=40)
    exe = cortex.compile(model, target="llvm", weights="bfloat16")
    assert exe.schedule.leaf_kids
    assert any(n.startswith("schedule: leaf_kids=True (default rule: on: a table row (of the rounded "
                            "weights) instead of a bfloat16 GEMV") for n in exe.notes)
    assert not cortex.compile(model, target="llvm", weights="bfloat16",
                              schedule={"leaf_kids": False}).schedule.leaf_kids
    from cortex.core.lowering.schedule import ScheduleSpace
    caps = exe.backend.capabilities
    assert ScheduleSpace(caps, "float32").default().leaf_kids
    assert ScheduleSpace(caps, "float32", "bfloat16").default().leaf_kids
