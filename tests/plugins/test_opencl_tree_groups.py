"""Tree groups on a real OpenCL device: a small batch of several trees runs as one launch of
several work-groups, each walking its own trees' levels; its outputs are the one-work-group
kernel's (the same code per node: the same bits where PoCL vectorizes both kernels alike, as on
an AVX-512 CPU; to rounding on an AVX2 one) and match the float64 reference.

Skipped (with the reason) where pyopencl or an OpenCL device is missing, unless
``CORTEX_TEST_REQUIRE`` names opencl: then a missing device fails.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from cortex.core.plugin import hostinfo

REQUIRED = "opencl" in {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",")}
_found = hostinfo.opencl_devices()
if not _found.devices and not REQUIRED:
    pytest.skip(reason=f"OpenCL unavailable: no OpenCL device: {_found.error}", allow_module_level=True)

import cortex  # noqa: E402
from cortex.bench.workloads import GroupKey, build_model, make_inputs  # noqa: E402
from cortex.core.linearize import Grid, Sequence  # noqa: E402
from cortex.plugins.opencl import forms  # noqa: E402


def _chain(n: int, word: int = 1):
    t = word % 7
    for i in range(1, n):
        t = (t, (word + i) % 7)
    return t


def _balanced(depth: int, word: int = 2):
    return word % 7 if depth == 0 else (_balanced(depth - 1, word), _balanced(depth - 1, word + 1))


def _dependency(tokens: int, batch: int, seed: int = 0) -> list:
    """Child-sum inputs: dependency trees (a token on every node, any number of children)."""
    return make_inputs("ChildSumTreeLSTM", tokens, batch, vocab=7, width=0, seed=seed).structures


#: model -> batches: b1, two very unequal trees (one group has many more levels), b10
BATCHES = {
    "TreeLSTM": [[_balanced(4)], [_chain(20), (1, 2)], [_balanced(d % 4 + 1, d) for d in range(10)]],
    "MVRNN": [[_balanced(4)], [_chain(20), (1, 2)], [_chain(d + 3, d) for d in range(10)]],
    "ChildSumTreeLSTM": [_dependency(12, 1), _dependency(40, 1) + _dependency(3, 1, seed=1),
                         _dependency(8, 10)],
    "SeqLSTM": [[Sequence(np.arange(9) % 5)], [Sequence(np.arange(30) % 5), Sequence(np.arange(3))],
                [Sequence(np.arange(d + 4) % 5) for d in range(10)]],
    "DAGRNN": [[(6, 5)], [(8, 8), (2, 2)], [(d % 4 + 2, d % 3 + 3) for d in range(10)]],
}
COMPILED: dict[str, tuple] = {}


def _executables(name: str):
    if name not in COMPILED:
        model = build_model(GroupKey(name, 8, None, 7, 0))
        grouped = cortex.compile(model, target="opencl", tree_groups=2, schedule={"level_groups": 1})
        one = cortex.compile(model, target="opencl", form="single_group", tree_groups=1)
        COMPILED[name] = (model, grouped, one, cortex.compile(model, target="numpy", dtype="float64"))
    return COMPILED[name]


def _inputs(name: str, items: list, model) -> list:
    if name != "DAGRNN":
        return items
    width = model.params["U"].shape[1]
    rng = np.random.default_rng(0)
    return [Grid(r, c, features=rng.standard_normal((r, c, width))) for r, c in items]


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_tree_groups_equal_the_one_group_kernel_bit_for_bit(name):
    model, grouped, one, ref = _executables(name)
    assert forms.GROUPED_KERNEL in grouped.artifact.kernels
    for i, items in enumerate(BATCHES[name]):
        batch = grouped.linearize(_inputs(name, items, model))
        got, want = grouped.run(batch), one.run(batch)
        assert one.artifact.last_groups == 1 and one.artifact.last_form == "single_group"
        groups = grouped.artifact.last_groups
        assert (groups, grouped.artifact.last_form) == ((1, "single_group") if i == 0 else (2, "tree_groups"))
        expect = ref.run(batch)
        for state in got.states:
            a = got.nodes(state)
            # the same code per node, in two kernels that PoCL vectorizes each on its own: the
            # same bits on an AVX-512 CPU; on an AVX2 one a sum rounded apart, carried up the levels
            np.testing.assert_allclose(a, want.nodes(state), rtol=2e-5, atol=1e-6, err_msg=state)
            np.testing.assert_allclose(a, expect.nodes(state), rtol=2e-4, atol=2e-5)
        again = grouped.run(batch)  # the layout kept for the same batch: the same outputs
        assert all(np.array_equal(again.nodes(s), got.nodes(s)) for s in got.states)


def test_a_node_blocked_state_keeps_one_work_group():
    """The grouped layout permutes rows; a state laid out in node blocks is not rows, so such
    a program gets no tree-group kernel and runs, correctly, as one work-group."""
    model, _, one, _ = _executables("TreeLSTM")
    exe = cortex.compile(model, target="opencl", tree_groups=2, schedule={"state_layout": "node_blocked", "level_groups": 1})
    assert forms.GROUPED_KERNEL not in exe.artifact.kernels
    batch = exe.linearize(BATCHES["TreeLSTM"][2])
    got = exe.run(batch)
    assert exe.artifact.last_groups == 1
    np.testing.assert_allclose(got.nodes("h"), one.run(batch).nodes("h"), rtol=1e-5, atol=1e-6)


def test_tree_groups_default_follows_whether_the_workers_are_pinned():
    """``tree_groups``: -1 (the default) leaves it to the rule (the compute units where PoCL's
    workers are pinned, else one work-group and no second kernel); 1 keeps one work-group; 0
    takes the device's compute units; anything else out of range is refused by name."""
    from cortex.plugins.opencl.device import device_for

    units = max(1, device_for("").info.compute_units)
    model, _, _, _ = _executables("TreeLSTM")
    default = cortex.compile(model, target="opencl")
    caps = default.backend.capabilities
    assert caps.independent_groups == 0
    assert caps.pinned_workers == default.backend.runtime.pinning.in_effect
    assert default.schedule.tree_groups == (units if caps.pinned_workers else 1)
    assert (forms.GROUPED_KERNEL in default.artifact.kernels) == (default.schedule.tree_groups > 1)
    one = cortex.compile(model, target="opencl", tree_groups=1)
    assert one.schedule.tree_groups == 1 and forms.GROUPED_KERNEL not in one.artifact.kernels
    one.run(one.linearize(BATCHES["TreeLSTM"][2]))
    assert one.artifact.last_form != "tree_groups"
    assert cortex.compile(model, target="opencl", tree_groups=0).backend.capabilities.independent_groups == units
    with pytest.raises(ValueError, match="tree_groups"):
        cortex.compile(model, target="opencl", tree_groups=-2)


def test_tree_groups_are_a_schedule_knob_the_tuner_can_choose():
    """The schedule's ``tree_groups`` knob (default: the option) turns the form on by itself, as
    a tuned record would; outputs stay those of the one-work-group kernel (to rounding)."""
    from cortex.core.lowering.schedule import ScheduleSpace

    model, _, one, _ = _executables("TreeLSTM")
    assert ScheduleSpace(one.backend.capabilities, "float32").knob("tree_groups").choices == (1, 2, 4)
    assert one.schedule.tree_groups == 1
    tuned = cortex.compile(model, target="opencl", schedule={"tree_groups": 2})
    assert forms.GROUPED_KERNEL in tuned.artifact.kernels
    batch = tuned.linearize(BATCHES["TreeLSTM"][2])
    got = tuned.run(batch)
    assert (tuned.artifact.last_form, tuned.artifact.last_groups) == ("tree_groups", 2)
    np.testing.assert_allclose(got.nodes("h"), one.run(batch).nodes("h"), rtol=2e-5, atol=1e-6)
    assert cortex.compile(model, target="opencl", tree_groups=2).schedule.tree_groups == 2
