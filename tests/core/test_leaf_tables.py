"""The leaf loop from the leaf-state tables (schedule knob ``leaf_tables``,
cortex.core.lowering.leaf_tables): when it applies, what the leaf loop reads, and that the
results agree with the leaf case run in the kernel, on the interpreter-backed numpy target and
on llvm."""

from __future__ import annotations

import numpy as np
import pytest

import cortex
from cortex.core.lowering.leaf_tables import leaf_table_case, leaf_tables
from cortex.core.passes.pipeline import run_passes
from cortex.models import ChildSumTreeLSTM, TreeFC, TreeGRU, TreeLSTM
from tests.core.test_preterminal import trees


def test_every_state_needs_a_table_and_a_level_one_case():
    g = run_passes(TreeLSTM(hidden=8, embed=6, vocab=40).trace())
    assert leaf_tables(g) == {"h": "leaf_state[h]", "c": "leaf_state[c]"}
    case = leaf_table_case(g)
    assert case is not None and case.name == "leaf"
    assert [v.op for v in case.values] == ["input", "param", "embedding", "param", "embedding"]
    assert dict(case.states) == {"h": 2, "c": 4}
    # no level-1 case (a dependency tree has no fixed arity): no tables, the leaf case stays
    assert leaf_table_case(run_passes(ChildSumTreeLSTM(hidden=8, embed=6, vocab=40).trace())) is None
    assert leaf_tables(run_passes(TreeLSTM(hidden=8, embed=6, vocab=40).trace(), passes=[])) == {}


@pytest.mark.parametrize("model_cls", [TreeLSTM, TreeGRU])
@pytest.mark.parametrize("target", ["numpy", "llvm"])
def test_leaf_loop_reads_the_tables_and_agrees(model_cls, target):
    model = model_cls(hidden=16, embed=8, vocab=40)
    batch = trees(3)
    on = cortex.compile(model, target=target, schedule={"leaf_tables": True})
    off = cortex.compile(model, target=target, schedule={"leaf_tables": False})
    assert any(n.startswith("leaf_tables:") for n in on.notes)
    assert not any(n.startswith("leaf_tables:") for n in off.notes)
    a, b = on(batch), off(batch)
    for s in a.states:
        np.testing.assert_allclose(a.nodes(s), b.nodes(s), rtol=1e-5, atol=1e-6)
    # the tables' rows are computed on first use: a second batch with new tokens is right too
    more = trees(4, vocab=40)
    a, b = on(more), off(more)
    for s in a.states:
        np.testing.assert_allclose(a.nodes(s), b.nodes(s), rtol=1e-5, atol=1e-6)


def test_a_leaf_without_activations_keeps_its_loop():
    g = run_passes(TreeFC(hidden=8, embed=6, vocab=40).trace())  # relu(E_proj[x]): one row read
    assert any(c.name == "preterminal" for c in g.cases) and leaf_tables(g) == {}
    exe = cortex.compile(TreeFC(hidden=8, embed=6, vocab=40), target="llvm")
    assert not any(n.startswith("leaf_tables:") for n in exe.notes)


def test_the_leaf_case_params_are_no_buffers_of_a_tabled_program():
    """With the tables the leaf's own params (the input projection ``E_proj``) are read only by
    the tables' recipes: no program buffer, so no weight storage format applies to them (a
    buffer the program never loads would pass for a streamed weight matrix)."""
    model = TreeLSTM(hidden=6, embed=5, vocab=11)
    on = cortex.compile(model, target="llvm", weights="bfloat16")
    off = cortex.compile(model, target="llvm", weights="bfloat16", schedule={"leaf_tables": False})
    assert "E_proj" not in {b.name for b in on.lowered.program.buffers}
    assert "E_proj" in {b.name for b in off.lowered.program.buffers}
    for batch in ([3], [(3, 4), ((1, 2), 5)]):
        for s in ("h", "c"):
            np.testing.assert_allclose(on(batch).nodes(s), off(batch).nodes(s), rtol=1e-5, atol=1e-6)
            assert np.abs(on(batch).nodes(s)).max() > 0.01
