"""Schedule knob space: defaults and legal ranges from Capabilities, enumeration, sampling, JSON."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cortex.core.lowering.schedule import KNOB_NAMES, Schedule, ScheduleError, ScheduleSpace
from cortex.core.plugin.capabilities import Capabilities

CPU = Capabilities(num_cores=4, vector_bits=512, cache_bytes_per_core=2 << 20, dialect="c")
GPU = Capabilities(has_grid=True, grid_barrier=True, group_barrier=True, max_threads_per_group=1024,
                   max_groups=132, shared_memory_bytes=228 << 10, dialect="cuda")
OPENCL_CPU = Capabilities(has_grid=True, grid_barrier=False, group_barrier=True, max_threads_per_group=256,
                          shared_memory_bytes=32 << 10, dialect="opencl", supports_fp64=False)
PLAIN = Capabilities()


def test_knob_names_are_the_ones_the_lowering_reads():
    assert KNOB_NAMES == ("tile_hidden", "vector_width", "unroll", "parallel", "weight_layout", "persistent",
                          "kernel_form", "leaf_specialization", "fuse", "threads", "reduce_lanes")
    assert tuple(k.name for k in ScheduleSpace(CPU).knobs) == KNOB_NAMES


def test_cpu_defaults_follow_capabilities():
    s = ScheduleSpace(CPU, "float32").default()
    assert s.vector_width == 16 and s.weight_layout == "packed" and s.threads == 4
    assert s.parallel == "nodes" and s.kernel_form == "single" and s.leaf_specialization and s.fuse
    assert ScheduleSpace(CPU, "float64").default().vector_width == 8
    assert ScheduleSpace(PLAIN).default().weight_layout == "row_major"
    assert ScheduleSpace(PLAIN).knob("weight_layout").choices == ("row_major", "transposed")


def test_gpu_defaults_and_grid_barrier_requirement():
    s = ScheduleSpace(GPU).default()
    assert s.kernel_form == "single" and s.parallel == "both" and s.threads == 256
    assert ScheduleSpace(GPU).knob("persistent").choices == (False, True)
    ocl = ScheduleSpace(OPENCL_CPU)
    assert ocl.default().kernel_form == "per_level"
    assert ocl.knob("kernel_form").choices == ("per_level",)
    with pytest.raises(ScheduleError, match="kernel_form='single' is not legal here"):
        ocl.with_knobs(kernel_form="single")
    assert max(ocl.knob("threads").choices) == 256


def test_constraints_reject_conflicting_knobs():
    sp = ScheduleSpace(GPU)
    with pytest.raises(ScheduleError, match="persistent weights need"):
        sp.with_knobs(persistent=True, kernel_form="per_level")
    sp.with_knobs(persistent=True, kernel_form="single")
    cpu = ScheduleSpace(CPU)
    with pytest.raises(ScheduleError, match="multiple of vector_width"):
        cpu.with_knobs(tile_hidden=8, vector_width=16)
    with pytest.raises(ScheduleError, match="needs vector_width > 1"):
        cpu.with_knobs(weight_layout="packed", vector_width=1)
    with pytest.raises(ScheduleError, match="unknown knobs"):
        cpu.with_knobs(tile=8)


def test_fp64_needs_target_support():
    with pytest.raises(ScheduleError, match="does not support float64"):
        ScheduleSpace(OPENCL_CPU, "float64")
    with pytest.raises(ScheduleError, match="float32 or float64"):
        ScheduleSpace(CPU, "float16")


@pytest.mark.parametrize("caps", [CPU, GPU, OPENCL_CPU, PLAIN], ids=["cpu", "gpu", "opencl", "plain"])
def test_enumeration_is_exactly_the_legal_space(caps):
    sp = ScheduleSpace(caps)
    all_ = list(sp.enumerate())
    assert len(all_) == len(set(all_)) == sp.size() > 1
    assert sp.default() in set(all_)
    assert all(sp.problems(s) == [] for s in all_[:: max(1, len(all_) // 200)])


def test_sampling_is_legal_and_reproducible():
    sp = ScheduleSpace(GPU)
    a, b = sp.sample(42, 20), sp.sample(42, 20)
    assert a == b and len(set(a)) > 10
    for s in a:
        sp.validate(s)


def test_json_round_trip_and_hashing():
    sp = ScheduleSpace(CPU)
    for s in sp.sample(1, 10) + [sp.default()]:
        back = Schedule.from_json(s.to_json())
        assert back == s and hash(back) == hash(s)
    with pytest.raises(ScheduleError, match="unknown schedule knobs \\['tiles'\\]"):
        Schedule.from_json('{"tiles": 4}')
    with pytest.raises(ScheduleError, match="knob 'unroll' must be int"):
        Schedule.from_json('{"unroll": "4"}')
    with pytest.raises(ScheduleError, match="knob 'persistent' must be bool"):
        Schedule.from_json('{"persistent": 1}')
    with pytest.raises(ScheduleError, match="not valid JSON"):
        Schedule.from_json("{")


def test_schedules_are_frozen():
    s = Schedule()
    with pytest.raises(AttributeError):
        s.unroll = 4  # type: ignore[misc]
    assert replace(s, unroll=4).unroll == 4
