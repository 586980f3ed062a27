"""The ``level_split`` knob on the ``llvm`` target: parallel loops whose iterations the team's
threads claim at run time (``cortex.plugins.cpu_llvm.kernel._KernelGen.claimed_loop``,
``team.claim_fn``) against the static split, one fixed chunk per thread.

Each iteration runs the same code whichever thread claims it, so the outputs must be
bit-identical to the static split's, for any team size and any batch (levels of one node, levels
of fewer hidden-block units than threads, levels of hundreds of nodes cut into panels).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite")

import cortex  # noqa: E402
from cortex.bench.workloads import GroupKey, build_model, make_inputs, model_spec  # noqa: E402
from cortex.core import loopir as ir  # noqa: E402
from cortex.core.lowering.schedule import ScheduleSpace  # noqa: E402
from cortex.core.plugin.capabilities import Capabilities  # noqa: E402

MODELS = ("TreeLSTM", "TreeGRU", "ChildSumTreeLSTM", "DAGRNN")


def _model_and_width(name: str, hidden: int):
    model = build_model(GroupKey(name, hidden, None, 200, 0))
    width = model.params["U"].shape[1] if name == "DAGRNN" else model_spec(name).hidden(hidden)
    return model, width


def _dynamic_loops(exe) -> list[ir.For]:
    return [n for k in exe.artifact.program.kernels for n in ir.walk(k.body)
            if isinstance(n, ir.For) and "dynamic" in n.annotations]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_dynamic_split_is_bit_identical_to_static(name, threads):
    """Batches 1, 10 and 300 (levels of up to a few thousand nodes; with two or three threads
    the levels are cut into panels of 256 KiB of gathered rows, a thousand nodes, so the largest
    run as several blocks), each call repeated (the claim counters of one call must not leak
    into the next)."""
    model, width = _model_and_width(name, 32)
    knobs = {"panel_kib": 256} if threads > 1 else {}
    static = cortex.compile(model, target="llvm", threads=threads, schedule={**knobs, "level_split": "static"})
    dynamic = cortex.compile(model, target="llvm", threads=threads, schedule={**knobs, "level_split": "dynamic"})
    assert not _dynamic_loops(static)
    assert _dynamic_loops(dynamic)
    assert any("level_split=dynamic" in n for n in dynamic.notes)
    for batch in (1, 10, 300):
        inputs = make_inputs(name, 20, batch, vocab=200, width=width, seed=3).structures
        lin = static.linearize(inputs)
        want = static.run(lin)
        for _ in range(3):
            got = dynamic.run(lin)
            for state in want.states:
                assert np.array_equal(got.nodes(state), want.nodes(state)), (name, threads, batch, state)


def test_a_level_cut_into_more_units_than_hidden_blocks_is_still_whole():
    """Hidden 16 is one hidden block of 16 units: the interchanged level's parallel loop has
    threads x CLAIMS_PER_THREAD units, most of them empty; every node is still computed once."""
    model, width = _model_and_width("TreeLSTM", 16)
    schedule = {"panel_kib": 256, "level_split": "dynamic"}
    dynamic = cortex.compile(model, target="llvm", threads=2, schedule=schedule)
    static = cortex.compile(model, target="llvm", threads=2, schedule={**schedule, "level_split": "static"})
    inputs = make_inputs("TreeLSTM", 20, 30, vocab=200, width=width, seed=1).structures
    lin = static.linearize(inputs)
    want, got = static.run(lin), dynamic.run(lin)
    for state in want.states:
        assert np.array_equal(got.nodes(state), want.nodes(state))


def test_the_knob_is_offered_only_where_a_team_splits_parallel_loops():
    team = Capabilities(vector_bits=512, num_cores=2, cache_bytes_per_core=2 << 20, single_call=True,
                        dynamic_split=True)
    knob = ScheduleSpace(team).knob("level_split")
    assert knob.choices == ("static", "dynamic")
    static_team = Capabilities(vector_bits=512, num_cores=2, single_call=True)  # numpy, cortex-cc
    grid = Capabilities(has_grid=True, grid_barrier=True, group_barrier=True, max_threads_per_group=1024,
                        shared_memory_bytes=48 << 10, dialect="cuda")
    opencl_cpu = Capabilities(has_grid=False, group_barrier=True, max_threads_per_group=256, num_cores=2,
                              dialect="opencl")
    for caps in (grid, opencl_cpu, static_team):
        k = ScheduleSpace(caps).knob("level_split")
        assert k.choices == ("static",) and k.default == "static"


def test_the_llvm_default_is_the_dynamic_split():
    model, _ = _model_and_width("TreeFC", 16)
    exe = cortex.compile(model, target="llvm", threads=2)
    assert exe.schedule.level_split == "dynamic"
    assert any("level_split='dynamic'" in n and "measured preference" in n for n in exe.notes)
    assert _dynamic_loops(exe)


def test_dynamic_split_matches_the_reference():
    """Against the NumPy target (the float64-checked interpreter of the same model)."""
    model, width = _model_and_width("TreeGRU", 16)
    exe = cortex.compile(model, target="llvm", threads=2, schedule={"level_split": "dynamic"})
    inputs = make_inputs("TreeGRU", 20, 5, vocab=200, width=width, seed=2).structures
    ref = cortex.compile(model, target="numpy")(inputs)
    got = exe(inputs)
    for state in ref.states:
        np.testing.assert_allclose(got.nodes(state), ref.nodes(state), rtol=1e-4, atol=1e-5)


def test_bfloat16_weights_are_stored_alike_under_both_splits():
    """The units of a dynamically split level keep the weights' hidden-block ranges constant, so
    ``weights="bfloat16"`` finds the same weight matrices (and gives the same states)."""
    model, width = _model_and_width("TreeLSTM", 32)
    knobs = {"panel_kib": 256}
    static = cortex.compile(model, target="llvm", threads=2, weights="bfloat16",
                            schedule={**knobs, "level_split": "static"})
    dynamic = cortex.compile(model, target="llvm", threads=2, weights="bfloat16",
                             schedule={**knobs, "level_split": "dynamic"})
    stored = [n for n in static.notes if n.startswith("weights:")]
    assert stored and "no weight matrix" not in stored[0]
    assert [n for n in dynamic.notes if n.startswith("weights:")] == stored
    inputs = make_inputs("TreeLSTM", 20, 10, vocab=200, width=width, seed=4).structures
    want, got = static(inputs), dynamic(inputs)
    for state in want.states:
        assert np.array_equal(got.nodes(state), want.nodes(state))
