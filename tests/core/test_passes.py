"""Graph passes: each alone and all together preserve the reference output (1e-12) on every
zoo model and structure family; and each does the rewrite it promises."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

from cortex.core.frontend.graph import ELEMENTWISE_OPS  # noqa: E402
from cortex.core.frontend.model import Model  # noqa: E402
from cortex.core.passes import (  # noqa: E402
    ALL_PASSES, DEFAULT_PASSES, cse, dce, fold_constants, fusion_groups, hoist_invariant,
    run_passes, stack_gates,
)
from cortex.core.frontend.reference import evaluate  # noqa: E402
from cortex.models import ChildSumTreeLSTM, SeqGRU, SeqLSTM, TreeLSTM  # noqa: E402
from zoo_structures import Structure, make_batch, zoo_cases  # noqa: E402

CASES = zoo_cases("float64")
PIPELINES = {name: [p] for name, p in ALL_PASSES.items()} | {"all": list(DEFAULT_PASSES)}


def ops(graph, case):
    return [v.op for v in graph.case(case).values]


@pytest.mark.parametrize("label,name,model,batches", CASES, ids=[c[0] for c in CASES])
def test_every_pass_preserves_reference_output(label, name, model, batches):
    graph = model.trace()
    prepared = [make_batch(s)[0] for s in batches.values()]
    expected = [evaluate(graph, model.params, b) for b in prepared]
    for pname, passes in PIPELINES.items():
        optimised = run_passes(graph, passes)
        for batch, want in zip(prepared, expected):
            got = evaluate(optimised, model.params, batch)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-12, err_msg=f"{pname} {k}")


@pytest.mark.parametrize("label,name,model,batches", CASES, ids=[c[0] for c in CASES])
def test_passes_are_pure_and_idempotent_at_the_end(label, name, model, batches):
    graph = model.trace()
    before = str(graph)
    once = run_passes(graph)
    assert str(graph) == before  # the input graph is untouched
    assert run_passes(once) == once  # a second run finds nothing left to do


def test_fold_constants_removes_zero_child_arithmetic():
    g = SeqLSTM(hidden=4, features=3).trace()
    assert ops(g, "leaf").count("linear") == 8  # 4 input + 4 recurrent on zeros
    folded = dce(fold_constants(g))
    # U_* h_prev(=0) vanish, and so does the whole forget gate: f * c_prev(=0) = 0
    assert ops(folded, "leaf").count("linear") == 3 and "const" not in ops(folded, "leaf")
    assert ops(folded, "leaf").count("mul") == ops(g, "leaf").count("mul") - 1
    gru = dce(fold_constants(SeqGRU(hidden=4, features=3).trace()))
    assert "b_hn" in {v.attr("name") for v in gru.case("leaf").values if v.op == "param"}  # U_n 0 + b_hn


def test_cse_merges_duplicates_and_dce_drops_dead_values():
    class Dup(Model):
        def __init__(self):
            super().__init__(arity=1)
            self.add_feature_input("x", 3)
            self.add_state("h", (3,))
            self.add_param("W", (3, 3))

        def leaf(self, g):
            g.tanh(g.input())  # dead
            return {"h": g.linear("W", g.input()) * g.linear("W", g.input())}

        def internal(self, g):
            a = g.linear("W", g.child("h", 0))
            return {"h": a + g.linear("W", g.child("h", 0))}

    g = Dup().trace()
    c = cse(g)
    assert ops(c, "leaf").count("linear") == 1 and ops(c, "leaf").count("input") == 1
    assert ops(c, "internal").count("linear") == 1
    assert "tanh" in ops(c, "leaf") and "tanh" not in ops(dce(c), "leaf")


def test_stack_gates_builds_one_matmul_per_input():
    g = run_passes(TreeLSTM(hidden=4, embed=3, vocab=7).trace(), [cse, stack_gates, dce])
    internal = g.case("internal")
    lin = [v for v in internal.values if v.op == "linear"]
    assert len(lin) == 2 and all(v.shape == (4 * 5,) for v in lin)  # i, o, u, f0, f1 per child
    assert ops(g, "internal").count("slice") == 10
    names = {d.name for d in g.derived}
    assert "stack[U_i_0,U_o_0,U_u_0,U_f0_0,U_f1_0]" in names and "stack[b_i,b_o,b_u,b_f,b_f]" in names
    assert all(d.recipe == "concat0" for d in g.derived)
    leaf_lin = [v for v in g.case("leaf").values if v.op == "linear"]
    assert len(leaf_lin) == 1 and leaf_lin[0].shape == (12,)


def test_stack_gates_keeps_stages_apart():
    """A TreeGRU's reset gate feeds the candidate's GEMV (stage 1), its update gate only the
    output (stage 0): per child they stay two linears; gates of one stage are still stacked."""
    from cortex.models import TreeGRU

    g = run_passes(TreeGRU(hidden=4, embed=3, vocab=7).trace(), [cse, stack_gates, dce])
    lin = [v for v in g.case("internal").values if v.op == "linear"]
    assert len(lin) == 6 and all(v.shape == (4,) for v in lin)  # U_r_k, U_z_k, U_n_k per child
    assert not any(d.name.startswith("stack[U_") for d in g.derived)
    seq = run_passes(SeqGRU(hidden=4, embed=3, vocab=7).trace(), [cse, stack_gates, dce])
    assert any(d.name.startswith("stack[U_") for d in seq.derived)  # r gates U_n h: stage 0


def test_hoist_turns_embedding_projection_into_a_table():
    g = run_passes(ChildSumTreeLSTM(hidden=4, embed=3, vocab=7).trace(), DEFAULT_PASSES)
    leaf = g.case("leaf")
    assert "linear" not in ops(g, "leaf")
    tables = {d.shape: d for d in g.derived if d.recipe == "embed_linear"}
    assert set(tables) == {(7, 12), (7, 16)}  # leaf: i, o, u; internal: i, f, o, u
    assert all(t.args[0] == "E" and t.args[1].startswith("stack[") for t in tables.values())
    assert [v.op for v in leaf.values if v.op == "embedding"] == ["embedding"]
    internal = ops(g, "internal")
    assert internal.count("embedding") == 1 and internal.count("linear") == 2  # U_{i,o,u} h~, U_f h_k
    big = run_passes(ChildSumTreeLSTM(hidden=4, embed=3, vocab=7).trace(),
                     [cse, stack_gates, lambda gr: hoist_invariant(gr, max_table_elements=50), dce])
    assert "linear" in ops(big, "leaf") and not any(d.recipe == "embed_linear" for d in big.derived)


def test_fusion_groups_annotate_elementwise_values_only():
    g = fusion_groups(SeqLSTM(hidden=4, features=3).trace())
    for case in g.cases:
        groups: dict[int, set] = {}
        for v in case.values:
            assert (v.group is not None) == (v.op in ELEMENTWISE_OPS)
            if v.group is not None:
                groups.setdefault(v.group, set()).add((v.domain, v.shape))
        assert groups and all(len(s) == 1 for s in groups.values())
    internal = g.case("internal")
    # the LSTM cell's whole elementwise tail (gates, c, h) is one group
    assert internal.value_map()[dict(internal.states)["h"]].group == internal.value_map()[dict(internal.states)["c"]].group
    assert fusion_groups(g) == g
    cs = fusion_groups(ChildSumTreeLSTM(hidden=4, embed=3, vocab=7).trace()).case("internal")
    child_groups = {v.group for v in cs.values if v.domain == "child" and v.group is not None}
    node_groups = {v.group for v in cs.values if v.domain == "node" and v.group is not None}
    assert child_groups and not child_groups & node_groups


def test_derived_params_follow_loaded_weights():
    m = SeqGRU(hidden=3, vocab=6, embed=2, dtype="float64")
    g = run_passes(m.trace())
    batch, _ = make_batch([Structure([[], [0], [1]], words=[1, 2, 3])])
    other = SeqGRU(hidden=3, vocab=6, embed=2, dtype="float64", seed=9)
    a = evaluate(g, other.params, batch)["h"]
    b = evaluate(other.trace(), other.params, batch)["h"]
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_folding_keeps_per_child_values_for_reductions():
    class ZeroForget(Model):
        def __init__(self):
            super().__init__(arity=None, dtype="float64")
            self.add_feature_input("x", 2)
            self.add_state("h", (2,))

        def leaf(self, g):
            return {"h": g.input()}

        def internal(self, g):
            dead = g.child("h") * 0.0  # per child, constant zero
            return {"h": g.reduce(dead, "sum") + g.reduce(g.child("h") + 0.0, "mean") + g.input()}

    m = ZeroForget()
    g = m.trace()
    opt = run_passes(g)
    assert all(opt.case("internal").value_map()[v.args[0]].domain == "child"
               for v in opt.case("internal").values if v.op == "reduce_children")
    batch, _ = make_batch([Structure([[], [], [0, 1]], features=np.arange(6.0).reshape(3, 2))])
    np.testing.assert_array_equal(evaluate(opt, m.params, batch)["h"], evaluate(g, m.params, batch)["h"])
