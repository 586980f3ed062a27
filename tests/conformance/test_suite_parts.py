"""The parts of the suite: structure families, case generator, target selection, tolerance,
and compile-only builds agreeing with ``cortex.compile``."""

from __future__ import annotations

import numpy as np
import pytest

from cortex.testing import build, cases, structures, targets, tolerance, zoo


def _shape_of(struct) -> list[list[int]]:
    children = [[] for _ in range(struct.num_nodes)]
    for p, c in struct.edges:
        children[p].append(c)
    return children


@pytest.mark.parametrize("arity", [1, 2, 3, None])
def test_every_family_applies_or_says_why(arity):
    for fam in structures.FAMILIES:
        why = structures.not_applicable(fam, arity)
        batch = structures.family(fam, arity, vocab=11)
        assert (batch is None) == (why is not None), (fam, arity, why)
        if batch is not None:
            assert batch and batch == batch  # a non-empty list of structures
    with pytest.raises(ValueError, match="unknown structure family 'trees'"):
        structures.not_applicable("trees", 2)


@pytest.mark.parametrize("arity", [2, 3, None])
def test_trees_have_the_model_arity_and_the_dag_shares_children(arity):
    for fam in ("chain", "balanced", "random", "wide", "dag"):
        for s in structures.family(fam, arity, features=5):
            children = _shape_of(s)
            if arity is not None:
                assert all(len(c) in (0, arity) for c in children), fam
            read = [c for cs in children for c in cs]
            assert len(set(range(s.num_nodes)) - set(read)) == 1, f"{fam}: one root"
            if fam == "dag":
                assert len(read) > len(set(read)), "some child is shared by two parents"
            assert s.features.shape == (s.num_nodes, 5)


def test_long_chain_is_about_ten_thousand_nodes_deep():
    from cortex.core.linearize import linearize

    for arity, levels in ((1, 10_000), (2, 5_000), (None, 10_000)):
        batch = linearize(structures.family("long_chain", arity, vocab=11), arity=arity)
        assert batch.num_nodes >= 9_999 and batch.num_levels == levels


def test_families_are_deterministic_and_mixed_holds_every_other_family():
    a = structures.family("mixed", 2, vocab=11, seed=3)
    b = structures.family("mixed", 2, vocab=11, seed=3)
    assert [s.edges for s in a] == [s.edges for s in b]
    assert all(np.array_equal(x.words, y.words) for x, y in zip(a, b))
    parts = sum(len(structures.family(f, 2, vocab=11, seed=3)) for f in structures.FAMILIES
                if f not in ("mixed", "long_chain") and structures.family(f, 2) is not None)
    assert len(a) == parts


def test_default_sweep_covers_every_model_family_and_dtype():
    ref = cases.cases("reference", ("numpy",))
    seen = {(c.model, c.family, c.dtype) for c in ref}
    for m in zoo.zoo():
        arity = m.model().arity
        for fam in structures.FAMILIES:
            if structures.not_applicable(fam, arity) or fam == "long_chain":
                continue
            for dtype in ("float32", "float64"):
                assert (m.id, fam, dtype) in seen
    assert {(c.model, c.dtype) for c in ref if c.family == "long_chain"} == set(cases.DEFAULT_LONG_CHAINS)
    assert len({c.id for c in ref}) == len(ref)
    full = cases.cases("reference", ("numpy",), full=True)
    assert len(full) > len(ref) and any(c.schedule.startswith("sample") for c in full)
    assert not any(c.family == "long_chain" for c in cases.cases("reference", ("numpy",),
                                                               exclude=("long_chain",)))
    diff = cases.cases("differential", ("numpy", "cc"))
    assert {c.schedule for c in diff} == {"unscheduled", "unfused", "jammed", "blocked", "refactored", "unrolled"}
    assert {c.target for c in diff} == {"numpy", "cc"}
    with pytest.raises(ValueError, match="unknown case kind"):
        cases.cases("speed", ("numpy",))


def test_target_selection(monkeypatch):
    monkeypatch.delenv(targets.ENV_TARGETS, raising=False)
    assert targets.parse_targets([]) == ("numpy",)
    assert targets.parse_targets(["numpy,cuda", "numpy", " llvm "]) == ("numpy", "cuda", "llvm")
    monkeypatch.setenv(targets.ENV_TARGETS, "opencl, numpy")
    assert targets.parse_targets([]) == ("opencl", "numpy")
    assert targets.parse_targets(["cuda"]) == ("cuda",)  # the option wins
    assert "numpy" in targets.parse_targets(["all"])
    assert targets.status("numpy").runnable
    with pytest.raises(targets.TargetSelectionError, match="unknown target 'nope'"):
        targets.status("nope")
    monkeypatch.setenv(targets.ENV_EXCLUDE, "long_chain")
    assert targets.excluded_families() == ("long_chain",)
    with pytest.raises(targets.TargetSelectionError, match="no such structure family"):
        targets.excluded_families(["forest"])


def test_report_names_the_worst_element_and_counts_the_bad_ones():
    want = {"h": np.zeros((4, 3)), "c": np.ones((4, 3))}
    got = {"h": want["h"].copy(), "c": want["c"].astype(np.float32)}
    got["h"][2, 1] = 1e-3
    got["h"][3, 0] = np.nan
    with pytest.raises(tolerance.ConformanceFailure) as err:
        tolerance.check(got, want, "float32", headline="HEAD", facts=[("model", "M")])
    text = str(err.value)
    assert text.startswith("HEAD\n  model      M\n")
    assert "FAIL state 'h'" in text and "2 of 12 elements out of tolerance" in text
    assert "worst at node row 3, state 'h', element [0]: got nan, want 0.0" in text
    assert "ok   state 'c'" in text
    errs = tolerance.check({"h": want["h"] + 5e-5}, {"h": want["h"]}, "float32", headline="",
                           facts=[])
    assert errs[0].ok and errs[0].max_abs == pytest.approx(5e-5)
    with pytest.raises(tolerance.ConformanceFailure, match="shape"):
        tolerance.check({"h": np.zeros((4, 2))}, {"h": np.zeros((4, 3))}, "float64", headline="",
                        facts=[])
    with pytest.raises(tolerance.ConformanceFailure, match="states"):
        tolerance.check({"h": np.zeros(1)}, {"x": np.zeros(1)}, "float64", headline="", facts=[])


def test_tolerance_is_relative_to_the_state_magnitude():
    tol = tolerance.TOLERANCES["float32"]
    want = np.array([[100.0, 0.0]])
    ok = tolerance.state_error("h", want + [[0.0, 9e-3]], want, tol)  # 1e-4 * 100 = 1e-2
    bad = tolerance.state_error("h", want + [[0.0, 2e-2]], want, tol)
    assert ok.ok and not bad.ok and bad.element == (1,)


def test_compile_only_matches_the_pipeline():
    import cortex

    model = zoo.get("TreeGRU").model()
    for variant in build.SCHEDULE_VARIANTS:
        sched = build.schedule("numpy", "float32", variant)
        exe = cortex.compile(model, target="numpy", dtype="float32", schedule=sched)
        built = build.compile_only(model, "numpy", dtype="float32", schedule=sched)
        assert str(built.source) == str(exe.source) and built.cache_key == exe.cache_key
        assert built.schedule == exe.schedule
    unscheduled = build.schedule("numpy", "float32", "unscheduled")
    assert unscheduled.vector_width == 1 and unscheduled.tile_hidden == 0
    assert build.schedule("numpy", "float64", "unfused").fuse is False
    jammed = build.schedule("numpy", "float32", "jammed")
    assert jammed.interchange and jammed.node_jam == 4 and jammed.hidden_jam == 2
    blocked = build.schedule("numpy", "float32", "blocked")
    assert blocked.state_layout == "node_blocked" and blocked.state_block == 8
    with pytest.raises(ValueError, match="unknown schedule variant"):
        build.schedule("numpy", "float32", "fastest")


def test_weight_storage_cases_run_where_the_target_reads_bfloat16():
    ref = [c for c in cases.cases("reference", ("numpy",)) if c.weights]
    assert {c.weights for c in ref} == {"bfloat16"} and {c.dtype for c in ref} == {"float32"}
    assert {c.model for c in ref} == {m.id for m in zoo.zoo()}
    assert all("-float32+bfloat16-" in c.id for c in ref)
    diff = [c for c in cases.cases("differential", ("numpy",)) if c.weights]
    assert {c.schedule for c in diff} == set(cases.WEIGHT_DIFFERENTIAL)
    assert not [c for c in cases.cases("reference", ("cc",)) if c.weights]  # not registered here
    assert not [c for c in cases.cases("contract", ("numpy",)) if c.weights]
