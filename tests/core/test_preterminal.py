"""The level-1 case (cortex.core.passes.preterminal): when it applies, what it builds, that the
reference, the loop interpreter and the llvm kernel agree with the model without it, and the
``max_table_mib`` option that bounds its tables."""

from __future__ import annotations

import numpy as np
import pytest

import cortex
from cortex import InvalidOptionError
from cortex.core.frontend import reference
from cortex.core.frontend.graph import GraphError, verify
from cortex.core.frontend.params import bind_params
from cortex.core.linearize import linearize
from cortex.core.passes.pipeline import DEFAULT_PASSES, run_passes, with_table_limit
from cortex.core.passes.preterminal import preterminal
from cortex.models import MVRNN, ChildSumTreeLSTM, SeqGRU, TreeFC, TreeGRU, TreeLSTM

WITHOUT = [p for p in DEFAULT_PASSES if p is not preterminal]


def random_tree(rng: np.random.Generator, leaves: int, vocab: int):
    if leaves == 1:
        return int(rng.integers(vocab))
    k = int(rng.integers(1, leaves))
    return (random_tree(rng, k, vocab), random_tree(rng, leaves - k, vocab))


def trees(seed: int = 0, vocab: int = 40):
    rng = np.random.default_rng(seed)
    # single leaves (no level 1), one cherry (only level 1), chains and bushy trees
    return [7, (1, 2), ((3, 4), 5), (6, (8, (9, 10)))] + [random_tree(rng, int(n), vocab)
                                                            for n in rng.integers(2, 16, 8)]


def cases(graph) -> list[str]:
    return [c.name for c in graph.cases]


def test_tree_lstm_gets_a_level_one_case_of_table_reads():
    g = run_passes(TreeLSTM(hidden=8, embed=6, vocab=40).trace())
    assert cases(g) == ["leaf", "internal", "preterminal"]
    derived = {d.name: d for d in g.derived}
    assert derived["leaf_state[c]"].shape == (40, 8) and derived["leaf_state[c]"].attr("state") == "c"
    ops = [v.op for v in g.case("preterminal").values]
    assert "linear" not in ops and "child_state" not in ops  # no GEMV, no child state read
    assert ops.count("child_input") == 2
    tables = [v.attr("name") for v in g.case("preterminal").values if v.op == "param"]
    assert sorted(t.split("[")[0] for t in tables) == ["embed_linear", "embed_linear", "leaf_state"]
    assert "preterminal" in str(g) and "child_input word[1]" in str(g)


def test_tree_gru_reads_its_gates_from_tables_and_keeps_the_candidate_gemv():
    """Two thirds of a TreeGRU level-1 node's GEMVs are on leaf states alone (``U_r_k h_k``,
    ``U_z_k h_k``): table rows; ``U_n_k (r * h_k)`` stays, and the lowering stores ``r * h_k``
    once per node rather than evaluating its sigmoid inside the GEMV, per output unit."""
    model = TreeGRU(hidden=8, embed=6, vocab=40)
    g = run_passes(model.trace())
    assert cases(g) == ["leaf", "internal", "preterminal"]
    pre = g.case("preterminal").value_map()
    gemvs = [v for v in pre.values() if v.op == "linear"]
    assert sorted(pre[v.args[0]].attr("name") for v in gemvs) == ["U_n_0", "U_n_1"]
    program = str(cortex.compile(model, target="numpy").program)
    level1 = program[program.index("level_offsets[1]"):program.index("for l in 2..L")]
    assert "sigmoid" not in "".join(line for line in level1.splitlines() if "sum(" in line)
    assert level1.count("t_p") >= 4  # r * h_0 and r * h_1 stored, then read by the GEMVs


@pytest.mark.parametrize("model", [
    TreeLSTM(hidden=8, embed=6, vocab=40, seed=1),
    TreeFC(hidden=8, embed=6, vocab=40, seed=2),
    TreeGRU(hidden=8, embed=6, vocab=40, seed=5),
], ids=["TreeLSTM", "TreeFC", "TreeGRU"])
def test_reference_with_the_case_equals_the_traced_model(model):
    traced = model.trace()
    g = run_passes(traced)
    assert "preterminal" in cases(g)
    batch = linearize(trees(), arity=2, vocab_size=40)
    want = reference.evaluate(traced, model.params, batch)
    got = reference.evaluate(g, model.params, batch)
    for s in want:
        np.testing.assert_allclose(got[s], want[s], rtol=1e-12, atol=1e-12)


def test_leaf_states_are_the_leaf_case_of_every_token():
    model = TreeLSTM(hidden=5, embed=4, vocab=30, seed=3)
    g = run_passes(model.trace())
    table = bind_params(g, model.params, dtype=np.float64)
    got = reference.leaf_states(g, table)
    one_leaf_each = reference.evaluate(g, model.params, linearize(list(range(30)), arity=2, vocab_size=30))
    for s in ("h", "c"):
        np.testing.assert_allclose(got[s], one_leaf_each[s], rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(table[f"leaf_state[{s}]"], got[s], rtol=1e-14, atol=1e-14)


def test_leaf_states_in_chunks_equal_one_pass(monkeypatch):
    model = TreeLSTM(hidden=5, embed=4, vocab=30, seed=3)
    g = run_passes(model.trace())
    table = bind_params(g, model.params, dtype=np.float32, compute_dtype=np.float32)
    whole = reference.leaf_states(g, table)
    monkeypatch.setattr(reference, "_TOKEN_CHUNK", 7)  # 30 tokens: chunks of 7, 7, 7, 7, 2
    chunked = reference.leaf_states(g, table)
    for s in ("h", "c"):
        assert chunked[s].dtype == np.float32
        np.testing.assert_array_equal(chunked[s], whole[s])


@pytest.mark.parametrize("model,why", [
    (TreeLSTM(hidden=8, features=6), "dense features: a leaf is not a function of a token"),
    (ChildSumTreeLSTM(hidden=8, embed=6, vocab=40), "variable arity"),
    (SeqGRU(hidden=8, embed=6, vocab=40), "arity 1: level 1 is one node per sequence"),
    (MVRNN(hidden=4, embed=4, vocab=10), "every product multiplies two children's states"),
], ids=["features", "childsum", "chain", "products"])
def test_does_not_apply(model, why):
    assert "preterminal" not in cases(run_passes(model.trace())), why


def test_tables_over_the_limit_leave_the_graph_unchanged():
    model = TreeLSTM(hidden=8, embed=6, vocab=40)
    before = run_passes(model.trace(), WITHOUT)
    # the tables are [40, 8] (leaf states) and [40, 40] (stacked 5-gate projections)
    assert preterminal(before, max_table_elements=40 * 40 - 1) is before
    assert "preterminal" in cases(preterminal(before, max_table_elements=40 * 40))
    limited = run_passes(model.trace(), with_table_limit(DEFAULT_PASSES, 40 * 40 - 1))
    assert "preterminal" not in cases(limited)
    assert [p.__name__ for p in with_table_limit(DEFAULT_PASSES, 7)] == [p.__name__ for p in DEFAULT_PASSES]


def test_the_verifier_guards_the_new_case_and_op():
    from dataclasses import replace

    g = run_passes(TreeLSTM(hidden=4, embed=3, vocab=9).trace())
    pre = g.case("preterminal")
    with pytest.raises(GraphError, match="child_input: a leaf has no children"):
        verify(g.with_case(replace(pre, name="leaf")))
    with pytest.raises(GraphError, match="optionally"):
        verify(replace(g, cases=g.cases + (replace(pre, name="rootcase"),)))
    with pytest.raises(GraphError, match="optionally"):
        verify(replace(g, cases=g.cases + (pre,)))  # twice


@pytest.mark.parametrize("target", ["numpy", "llvm"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("model", [TreeLSTM(hidden=16, embed=8, vocab=40, seed=4),
                                   TreeGRU(hidden=16, embed=8, vocab=40, seed=4)],
                         ids=["TreeLSTM", "TreeGRU"])
def test_compiled_with_and_without_the_case_agree(target, dtype, model):
    if target == "llvm":
        pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite")
    exe = cortex.compile(model, target=target, dtype=dtype)
    base = cortex.compile(model, target=target, dtype=dtype, passes=WITHOUT)
    assert "preterminal" in cases(exe.graph) and "preterminal" not in cases(base.graph)
    tol = 1e-12 if dtype == "float64" else 2e-6
    for batch in (trees(5), [3], [4, 11]):  # mixed; one leaf; leaves only (an empty level 1)
        got, want = exe(batch), base(batch)
        for s in got.states:
            np.testing.assert_allclose(got.nodes(s), want.nodes(s), rtol=tol, atol=tol)


def test_max_table_mib_option():
    model = TreeLSTM(hidden=16, embed=8, vocab=40)
    # the stacked projections are [40, 80] float32: 12.5 KiB each
    small = cortex.compile(model, target="numpy", max_table_mib=10 / 1024)
    big = cortex.compile(model, target="numpy", max_table_mib=13 / 1024)
    assert "preterminal" not in cases(small.graph) and "preterminal" in cases(big.graph)
    # the limit is on the embedding table's hoist too: E @ W [40, 48] is 7.5 KiB
    tiny = cortex.compile(model, target="numpy", max_table_mib=1 / 1024)
    assert not any(d.recipe == "embed_linear" for d in tiny.graph.derived)
    for bad in (0, -1, "64", True, float("inf"), float("nan")):
        with pytest.raises(InvalidOptionError, match="max_table_mib"):
            cortex.compile(model, target="numpy", max_table_mib=bad)


def test_the_ab_tool_times_both_and_reports_json(tmp_path):
    """tools/ab_level1_tables.py (the interleaved A/B behind docs/llvm.md's numbers) runs and
    writes what it measured; a model without the case is refused with the reason."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "ab_level1_tables.py"
    spec = importlib.util.spec_from_file_location("ab_level1_tables", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / "ab.json"
    assert tool.main(["--model", "TreeFC", "--target", "numpy", "--hidden", "8", "--vocab", "40",
                      "--batches", "1", "--rounds", "1", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["batch"] == 1 and row["with_ms"] > 0 and row["without_ms"] > 0
    assert row["max_abs_diff"] <= 1e-6
    with pytest.raises(SystemExit):  # TreeLSTM h128 at vocab 40000: [40000, 640] tables, 98 MiB
        tool.main(["--model", "TreeLSTM", "--target", "numpy", "--hidden", "128", "--vocab", "40000",
                   "--batches", "1", "--rounds", "1", "--max-table-mib", "64"])
