"""Tracing: shape/dtype/domain inference, and bad models failing at trace time with errors
that name the model, the case and the offending op."""

from __future__ import annotations

import numpy as np
import pytest

from cortex.core.frontend.model import Model
from cortex.core.frontend.model_errors import TraceError
from cortex.models import ChildSumTreeLSTM, DAGRNN, MVRNN, SeqGRU, TreeLSTM


class Toy(Model):
    """A configurable small model: ``leaf_fn`` / ``internal_fn`` are the cases."""

    def __init__(self, leaf_fn, internal_fn, arity=2):
        super().__init__(arity=arity, name="Toy")
        self.add_word_input("word", 5)
        self.add_state("h", (4,))
        self.add_param("E", (5, 4))
        self.add_param("W", (4, 4))
        self.add_param("V", (3, 4))
        self.add_param("b", (4,))
        self._leaf, self._internal = leaf_fn, internal_fn

    def leaf(self, g):
        return self._leaf(g)

    def internal(self, g):
        return self._internal(g)


def ok_leaf(g):
    return {"h": g.embedding("E", g.input("word"))}


def ok_internal(g):
    return {"h": g.tanh(g.linear("W", g.child("h", 0)) + g.child("h", 1))}


def trace_error(leaf=ok_leaf, internal=ok_internal, arity=2) -> TraceError:
    with pytest.raises(TraceError) as info:
        Toy(leaf, internal, arity).trace()
    return info.value


def test_good_toy_traces_and_infers_types():
    g = Toy(ok_leaf, ok_internal).trace()
    internal = g.case("internal")
    ops = [v.op for v in internal.values]
    assert ops.count("child_state") == 2 and "linear" in ops
    lin = next(v for v in internal.values if v.op == "linear")
    assert lin.shape == (4,) and lin.dtype == "float32" and lin.domain == "node"
    assert next(v for v in internal.values if v.op == "param").domain == "invariant"


def test_shape_mismatch_names_model_case_op():
    e = trace_error(internal=lambda g: {"h": g.linear("V", g.child("h", 0)) + g.child("h", 1)})
    assert (e.model, e.case, e.op) == ("Toy", "internal", "add")
    assert "shape mismatch [3] vs [4]" in str(e) and "'Toy'" in str(e) and "'internal'" in str(e)
    e = trace_error(leaf=lambda g: {"h": g.linear("W", g.linear("V", g.embedding("E", g.input())))})
    assert (e.case, e.op) == ("leaf", "linear") and "weight [4, 4] @ input [3]" in str(e)


def test_unknown_op():
    e = trace_error(internal=lambda g: {"h": g.softmax(g.child("h", 0))})
    assert (e.case, e.op) == ("internal", "softmax") and "unknown op" in str(e)
    e = trace_error(internal=lambda g: {"h": g.op("conv2d", g.child("h", 0))})
    assert e.op == "conv2d"
    e = trace_error(leaf=lambda g: {"h": g.param("nope")})
    assert e.op == "param" and "unknown parameter 'nope'" in str(e)


def test_arity_misuse():
    e = trace_error(internal=lambda g: {"h": g.child("h", 2)})
    assert e.op == "child_state" and "out of range for arity 2" in str(e)
    e = trace_error(internal=lambda g: {"h": g.reduce(g.child("h"), "sum")})
    assert "reads children by index" in str(e)
    e = trace_error(leaf=lambda g: {"h": g.child("h", 0)})
    assert e.case == "leaf" and "leaf has no children" in str(e)
    e = trace_error(internal=lambda g: {"h": g.child("h", 0)}, arity=None)
    assert "variable-arity" in str(e)
    e = trace_error(internal=lambda g: {"h": g.reduce(g.child("h", 0), "sum")})
    assert e.op == "reduce_children" and "per-child" in str(e)
    e = trace_error(internal=lambda g: {"h": g.reduce(g.child("h"), "max")}, arity=None)
    assert "kind must be one of" in str(e)
    e = trace_error(internal=lambda g: {"h": g.child("h")}, arity=None)
    assert "per-child value" in str(e) and e.case == "internal"


def test_bad_case_results():
    e = trace_error(leaf=lambda g: {"c": g.embedding("E", g.input())})
    assert e.case == "leaf" and "missing ['h']" in str(e) and "unknown ['c']" in str(e)
    e = trace_error(leaf=lambda g: {"h": g.linear("V", g.embedding("E", g.input()))})
    assert "declared float32[4]" in str(e)
    e = trace_error(leaf=lambda g: g.embedding("E", g.input()))
    assert "must return a dict" in str(e)
    e = trace_error(leaf=lambda g: {"h": 3})
    assert "not a traced value" in str(e)
    e = trace_error(internal=lambda g: {"h": g.split(g.child("h", 0), 3)[0]})
    assert e.op == "split"


def test_scalars_split_concat_and_matmul_operator():
    def internal(g):
        a, b = g.split(g.concat([g.child("h", 0), g.child("h", 1)]), 2)
        return {"h": 1.0 - g.sigmoid(a) * 0.5 + (g.param("W") @ b) - 2}

    g = Toy(ok_leaf, internal).trace()
    consts = [v for v in g.case("internal").values if v.op == "const"]
    assert sorted(v.attr("value") for v in consts) == [0.5, 1.0, 2.0]
    assert all(v.shape == (4,) and v.domain == "invariant" for v in consts)


def test_zoo_domains_and_shapes():
    cs = ChildSumTreeLSTM(hidden=4, embed=3, vocab=9).trace()
    internal = cs.case("internal")
    per_child = [v for v in internal.values if v.domain == "child"]
    assert {v.op for v in per_child} >= {"child_state", "linear", "add", "sigmoid", "mul"}
    assert [v.attr("kind") for v in internal.values if v.op == "reduce_children"] == ["sum", "sum"]
    assert cs.arity is None
    mv = MVRNN(hidden=3, vocab=5).trace()
    assert mv.state_spec("M").shape == (3, 3)
    assert any(v.op == "matmul" and v.shape == (3, 3) for v in mv.case("internal").values)
    dag = DAGRNN(hidden=4, features=2).trace()
    assert dag.node_input("x").kind == "features" and dag.node_input("x").shape == (2,)
    seq = SeqGRU(hidden=4, vocab=5, embed=2, dtype="float64").trace()
    assert seq.arity == 1 and all(v.dtype in ("float64", "int32") for c in seq.cases for v in c.values)
    t = TreeLSTM(hidden=4, embed=2, vocab=5, arity=3).trace()
    assert {v.attr("index") for v in t.case("internal").values if v.op == "child_state"} == {0, 1, 2}


def test_values_cannot_cross_cases():
    saved = {}

    def leaf(g):
        saved["x"] = g.embedding("E", g.input())
        return {"h": saved["x"]}

    e = trace_error(leaf=leaf, internal=lambda g: {"h": saved["x"] + g.child("h", 0)})
    assert "another case" in str(e)


def test_missing_case_method_and_numpy_scalars():
    class NoInternal(Model):
        def __init__(self):
            super().__init__(arity=1)
            self.add_state("h", (2,))

        def leaf(self, g):
            return {"h": g.zeros((2,)) * np.float32(3)}

    with pytest.raises(TraceError, match=r"case 'internal'.*defines no internal"):
        NoInternal().trace()
    g = Toy(ok_leaf, lambda g: {"h": g.child("h", 0) * np.float32(0.5) + g.child("h", 1)}).trace()
    assert [v.attr("value") for v in g.case("internal").values if v.op == "const"] == [0.5]
