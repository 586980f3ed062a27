"""Every zoo model: the reference evaluator on the traced graph agrees with an independent,
hand-written NumPy version of the docstring equations (float64, 1e-12) on every family."""

from __future__ import annotations

import numpy as np
import pytest

from cortex.core.frontend.reference import evaluate, roots
from zoo_structures import hand_model, make_batch, run_by_hand, zoo_cases

CASES = zoo_cases("float64")


def compare(out, hand, ids) -> float:
    worst = 0.0
    for b, states in enumerate(hand):
        for v, st in states.items():
            for k, val in st.items():
                got = out[k][ids[b][v]]
                np.testing.assert_allclose(got, val, rtol=1e-12, atol=1e-12)
                worst = max(worst, float(np.max(np.abs(got - val))))
    return worst


@pytest.mark.parametrize("label,name,model,batches", CASES, ids=[c[0] for c in CASES])
def test_reference_matches_hand_written_equations(label, name, model, batches):
    graph = model.trace()
    step = hand_model(name, model.params, model)
    checked = 0
    for family, structs in batches.items():
        batch, ids = make_batch(structs)
        out = evaluate(graph, model.params, batch)
        assert set(out) == set(model.states)
        for k, spec in model.states.items():
            assert out[k].shape == (batch.num_nodes,) + spec.shape and out[k].dtype == np.float64
        compare(out, run_by_hand(step, structs), ids)
        checked += batch.num_nodes
    assert set(batches) >= {"single_leaf", "chain", "balanced", "random", "wide"}
    assert checked > 50


def test_every_family_has_the_shapes_it_claims():
    rng_cases = {c[0]: c[3] for c in CASES}
    child_sum = rng_cases["ChildSumTreeLSTM[arity=None]"]
    batch, _ = make_batch(child_sum["wide"])
    assert batch.max_arity == 12 and batch.num_levels == 2
    batch, _ = make_batch(child_sum["dag"])
    assert len(set(batch.child_ids.tolist())) < len(batch.child_ids)  # shared children
    batch, _ = make_batch(child_sum["chain"])
    assert batch.num_levels == batch.num_nodes
    grids = rng_cases["DAGRNN[arity=None]"]
    batch, _ = make_batch(grids["balanced"])  # 4x4 grid: 7 anti-diagonals
    assert batch.num_levels == 7 and batch.max_arity == 2


def test_float32_model_is_evaluated_in_float64():
    from cortex.models import SeqGRU

    m32 = SeqGRU(hidden=4, features=3, seed=0)
    assert all(p.dtype == np.float32 for p in m32.params.values())
    m64 = SeqGRU(hidden=4, features=3, seed=0, dtype="float64")
    m64.set_params({k: v.astype(np.float64) for k, v in m32.params.items()})
    from zoo_structures import Structure

    s = [Structure([[]] + [[i] for i in range(5)], features=np.random.default_rng(0).normal(size=(6, 3)))]
    batch, _ = make_batch(s)
    a = evaluate(m32.trace(), m32.params, batch)["h"]
    b = evaluate(m64.trace(), m64.params, batch)["h"]
    assert a.dtype == np.float64
    np.testing.assert_array_equal(a, b)


def test_output_selection_root_or_every_node():
    from cortex.models import TreeLSTM
    from zoo_structures import Structure

    structs = [Structure([[], [], [0, 1]], words=[1, 2, 0]), Structure([[]], words=[3])]
    batch, ids = make_batch(structs)
    m = TreeLSTM(hidden=3, embed=2, vocab=5, dtype="float64")
    g = m.trace()
    assert g.outputs.states == ("h", "c") and not g.outputs.every_node
    out = evaluate(g, m.params, batch)
    r = roots(g, out, batch)
    assert r["h"].shape == (2, 3)
    np.testing.assert_array_equal(r["h"][0], out["h"][ids[0][2]])
    m_all = TreeLSTM(hidden=3, embed=2, vocab=5, dtype="float64", outputs=("h",), every_node=True)
    g_all = m_all.trace()
    assert g_all.outputs.states == ("h",) and g_all.outputs.every_node
    r = roots(g_all, evaluate(g_all, m_all.params, batch), batch)
    assert set(r) == {"h"} and r["h"].shape == (batch.num_nodes, 3)


@pytest.mark.parametrize("name", ["TreeLSTM", "MVRNN", "TreeGRU"])
def test_fixed_arity_dag_with_shared_children(name):
    from cortex import models
    from zoo_structures import Structure

    kw = dict(hidden=4, vocab=6, dtype="float64") | ({} if name == "MVRNN" else {"embed": 3})
    model = getattr(models, name)(**kw)
    # node 1 is the right child of node 2 and the left child of node 3; node 4 joins them
    s = Structure([[], [], [0, 1], [1, 0], [2, 3]], words=[1, 2, 3, 4, 5])
    batch, ids = make_batch([s])
    assert sorted(batch.child_ids.tolist()).count(ids[0][1]) == 2
    out = evaluate(model.trace(), model.params, batch)
    compare(out, run_by_hand(hand_model(name, model.params, model), [s]), ids)
