"""The RecursiveGraph IR: immutability, verifier, printer."""

from __future__ import annotations

import dataclasses

import pytest

from cortex.core.frontend.graph import GraphError, Outputs, Value, format_graph, verify
from cortex.core.passes import run_passes
from cortex.models import ChildSumTreeLSTM, MVRNN, SeqLSTM, TreeLSTM


def lstm():
    return TreeLSTM(hidden=4, embed=3, vocab=7).trace()


def replace_value(graph, case_name, index, **changes):
    case = graph.case(case_name)
    values = list(case.values)
    values[index] = dataclasses.replace(values[index], **changes)
    return graph.with_case(dataclasses.replace(case, values=tuple(values)))


def test_graph_is_immutable_and_hashable():
    g = lstm()
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.name = "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.cases[0].values[0].op = "add"
    assert hash(g) == hash(lstm()) and g == lstm()


def test_verifier_accepts_every_zoo_graph_before_and_after_passes():
    for m in (TreeLSTM(hidden=4, embed=3, vocab=7), ChildSumTreeLSTM(hidden=4, embed=3, vocab=7),
              MVRNN(hidden=3, vocab=4), SeqLSTM(hidden=3, features=2)):
        assert verify(m.trace()) is not None
        assert verify(run_passes(m.trace())) is not None


def test_verifier_rejects_broken_graphs():
    g = lstm()
    leaf = g.case("leaf")
    lin = next(i for i, v in enumerate(leaf.values) if v.op == "linear")
    with pytest.raises(GraphError, match="rules give"):
        verify(replace_value(g, "leaf", lin, shape=(5,)))
    with pytest.raises(GraphError, match="unknown op 'softmax'"):
        verify(replace_value(g, "leaf", lin, op="softmax"))
    with pytest.raises(GraphError, match="before definition"):
        verify(replace_value(g, "leaf", 0, args=(99,)))
    with pytest.raises(GraphError, match="duplicate value id"):
        verify(replace_value(g, "leaf", 1, id=0))
    with pytest.raises(GraphError, match="only elementwise ops"):
        verify(replace_value(g, "leaf", lin, group=0))
    with pytest.raises(GraphError, match="defines states"):
        verify(g.with_case(dataclasses.replace(leaf, states=leaf.states[:1])))
    with pytest.raises(GraphError, match="outputs"):
        verify(dataclasses.replace(g, outputs=Outputs(("nope",))))
    with pytest.raises(GraphError, match="exactly the cases"):
        verify(dataclasses.replace(g, cases=g.cases[:1]))
    child = Value(len(leaf.values), "child_state", (), (("index", 0), ("state", "h")), (4,), "float32", "node")
    with pytest.raises(GraphError, match="leaf has no children"):
        verify(g.with_case(dataclasses.replace(leaf, values=leaf.values + (child,))))


def test_verifier_checks_derived_params():
    g = run_passes(lstm())
    assert g.derived
    bad = dataclasses.replace(g.derived[0], shape=(1, 1))
    with pytest.raises(GraphError, match="recipe gives"):
        verify(dataclasses.replace(g, derived=(bad,) + g.derived[1:]))
    with pytest.raises(GraphError, match="undefined params"):
        verify(dataclasses.replace(g, derived=(dataclasses.replace(g.derived[0], args=("zz",)),)))


def test_printer_is_readable():
    text = format_graph(ChildSumTreeLSTM(hidden=4, embed=3, vocab=7).trace())
    assert text.startswith("graph ChildSumTreeLSTM (arity variable) {")
    for needle in ("param W_f : f32[4,3]", "input word : word i32[] vocab=7", "state c : f32[4]",
                   "outputs (root): h, c", "case leaf {", "case internal {", "child_state h[*] : f32[4] child",
                   "reduce_children", "kind=sum", "yield h=%", "const 0.0"):
        assert needle in text, needle
    opt = str(run_passes(TreeLSTM(hidden=4, embed=3, vocab=7).trace()))
    assert "derived stack[" in opt and "concat0(" in opt and "#g0" in opt and "child_state h[1]" in opt
