"""Recursive refactoring (the ``refactor`` knob) against the untransformed program and the
reference, on the interpreter, over every zoo model and structure family."""

from __future__ import annotations

import numpy as np
import pytest

from cortex.core.frontend import reference
from cortex.core.lowering.lower import lower
from cortex.core.lowering.refactor import refactor_graph
from cortex.core.lowering.schedule import ScheduleSpace
from tests.core.test_lower import CPU, GPU, SPECS, assert_close, make_batch, run_lowered, spec_families

MOVED = {"TreeFC", "TreeFC3", "TreeGRU", "TreeLSTM", "TreeLSTM3", "ChildSumTreeLSTM", "DAGRNN",
         "DAGRNN_tree", "SeqLSTM", "SeqGRU"}


def _variants():
    cpu, gpu = ScheduleSpace(CPU, "float64"), ScheduleSpace(GPU, "float64")
    return [("cpu", CPU, cpu.with_knobs(refactor=True)),
            ("gpu", GPU, gpu.with_knobs(refactor=True)),
            ("cpu-unfused-no-leaf-spec", CPU, cpu.with_knobs(refactor=True, fuse=False, leaf_specialization=False))]


def check_against_untransformed(spec, lows, seed: int) -> None:
    """Every program of ``lows`` ((label, Lowered)) gives the reference's and the default
    program's states, and only the model's states, on every structure family of ``spec``."""
    rng = np.random.default_rng(seed)
    plain = lower(spec.graph, ScheduleSpace(CPU, "float64").default(), CPU, "float64")
    for fam, items in spec_families(spec, rng).items():
        batch = make_batch(spec, items, rng)
        ref = reference.evaluate(spec.graph, spec.model.params, batch)
        base = run_lowered(plain, spec.model.params, batch)
        for label, low in lows:
            got = run_lowered(low, spec.model.params, batch)
            assert set(got) == set(base), "scratch states are not outputs"
            assert_close(got, ref, "float64", f"{spec.name}/{fam}/{label}")
            for s in base:
                np.testing.assert_allclose(got[s], base[s], rtol=1e-10, atol=1e-10, err_msg=f"{fam}/{label}: {s}")


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_refactored_matches_untransformed_on_every_family(spec):
    check_against_untransformed(spec, [(label, lower(spec.graph, s, caps, "float64"))
                                       for label, caps, s in _variants()], 5)


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_notes_say_what_moved_or_why_not(spec):
    low = lower(spec.graph, ScheduleSpace(CPU, "float64").with_knobs(refactor=True), CPU, "float64")
    notes = [n for n in low.notes if n.startswith("refactor:")]
    assert notes
    if spec.name in MOVED:
        assert "moved into the children" in notes[0]
        assert any(b.role == "temp" and b.name.startswith("proj") for b in low.program.buffers)
    else:
        assert any("stays in the parent" in n or "not applied" in n for n in notes)


def test_treegru_keeps_the_reset_gated_candidate_in_the_parent():
    spec = next(s for s in SPECS if s.name == "TreeGRU")
    r = refactor_graph(spec.graph)
    # the r and z weights of child 0 and child 1 (not stacked: r and z are at different stages)
    assert len(r.projections) == 4
    assert sum("stays in the parent" in n and "mixes the child's state" in n for n in r.notes) == 2
    internal = r.graph.case("internal")
    moved = [v for v in internal.values if v.op == "child_state" and v.attr("state").startswith("proj")]
    assert len(moved) == 4


def test_default_schedule_does_not_refactor():
    for caps in (CPU, GPU):
        sp = ScheduleSpace(caps, "float32")
        assert sp.default().refactor is False
        assert sp.knob("refactor").choices == (False, True)
