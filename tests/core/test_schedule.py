"""Schedule knob space: defaults and legal ranges from Capabilities, enumeration, sampling, JSON."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
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
                          "kernel_form", "leaf_specialization", "fuse", "threads", "reduce_lanes",
                          "interchange", "node_jam", "jam_pad", "jam_accumulators", "jam_unroll", "jam_interleave",
                          "hidden_jam", "weight_block", "wide_lanes", "prefetch", "node_chunk", "hidden_tiles",
                          "single_group_nodes", "state_layout", "state_block", "refactor", "recursive_unroll", "bf16_dot",
                          "hoist_projections", "row_jam",
                          "panel_kib", "level_split", "k_block", "tree_groups", "leaf_tables", "jam_rows", "leaf_kids",
                          "level_groups")
    assert tuple(k.name for k in ScheduleSpace(CPU).knobs) == KNOB_NAMES


def test_cpu_defaults_follow_capabilities():
    s = ScheduleSpace(CPU, "float32").default()
    assert s.vector_width == 16 and s.weight_layout == "packed" and s.threads == 4
    assert s.parallel == "nodes" and s.kernel_form == "single" and s.leaf_specialization and s.fuse
    assert ScheduleSpace(CPU, "float64").default().vector_width == 8
    assert ScheduleSpace(PLAIN).default().weight_layout == "row_major"
    assert ScheduleSpace(PLAIN).knob("weight_layout").choices == ("row_major", "transposed")


def test_jam_knobs_are_offered_only_off_the_grid():
    gpu = ScheduleSpace(GPU)
    for name in ("interchange", "node_jam", "wide_lanes", "node_chunk", "prefetch"):
        assert len(gpu.knob(name).choices) == 1
    cpu = ScheduleSpace(CPU)
    assert cpu.knob("node_jam").choices == (1, 2, 4, 8, 16) and cpu.knob("prefetch").choices == (0,)
    assert ScheduleSpace(replace(CPU, prefetch=True)).knob("prefetch").choices == (0, 1, 2, 4)


def test_single_group_form_offers_auto_with_its_threshold():
    caps = replace(OPENCL_CPU, has_grid=False, single_call=False, single_group_form=True, num_cores=4)
    sp = ScheduleSpace(caps)
    assert sp.knob("kernel_form").choices == ("auto", "single", "per_level")
    s, src = sp.resolve(None)
    assert s.kernel_form == "auto" and s.single_group_nodes == 512 and "per two compute units" in src["single_group_nodes"]
    assert "inactive" in sp.resolve({"kernel_form": "per_level"})[1]["single_group_nodes"]


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


def test_the_state_layout_is_offered_where_the_code_generator_takes_it():
    """Row-major by default (today's code); node blocks of 4/8/16 where ``blocked_state``; the
    block matters only for a blocked layout (neutral otherwise); no choice without the capability."""
    for caps in (CPU, GPU, OPENCL_CPU):
        sp = ScheduleSpace(caps)
        s, src = sp.resolve()
        assert s.state_layout == "row_major" and "row-major" in src["state_layout"]
        assert "inactive" in src["state_block"]
        assert sp.knob("state_layout").choices == ("row_major", "node_blocked")
        assert sp.knob("state_block").choices == (4, 8, 16)
    sp = ScheduleSpace(CPU)
    assert sp.canonical(replace(sp.default(), state_block=16)).state_block == 8
    assert sp.with_knobs(state_layout="node_blocked", state_block=16).state_block == 16
    assert {s.state_layout for s in sp.sample(3, 200)} == {"row_major", "node_blocked"}
    none = ScheduleSpace(replace(CPU, blocked_state=False))
    assert none.knob("state_layout").choices == ("row_major",)
    with pytest.raises(ScheduleError, match="state_layout='node_blocked' is not legal"):
        none.with_knobs(state_layout="node_blocked")


def test_constraints_reject_conflicting_knobs():
    sp = ScheduleSpace(GPU)
    with pytest.raises(ScheduleError, match="persistent weights need"):
        sp.with_knobs(persistent=True, kernel_form="per_level")
    sp.with_knobs(persistent=True, kernel_form="single")
    cpu = ScheduleSpace(CPU)
    with pytest.raises(ScheduleError, match="multiple of vector_width"):
        cpu.with_knobs(tile_hidden=8, vector_width=16)
    cpu.with_knobs(node_jam=4, interchange=False)  # the jam's work-unit form
    with pytest.raises(ScheduleError, match="unknown knobs"):
        cpu.with_knobs(tile=8)


def test_fp64_needs_target_support():
    with pytest.raises(ScheduleError, match="does not support float64"):
        ScheduleSpace(OPENCL_CPU, "float64")
    with pytest.raises(ScheduleError, match="float32 or float64"):
        ScheduleSpace(CPU, "float16")


@pytest.mark.parametrize("caps", [CPU, GPU, OPENCL_CPU, PLAIN], ids=["cpu", "gpu", "opencl", "plain"])
def test_enumeration_yields_legal_canonical_schedules_and_size_counts_them(caps):
    sp = ScheduleSpace(caps)
    first = list(itertools.islice(sp.enumerate(), 3000))
    assert len(first) == len(set(first)) and sp.size() >= len(first) > 1
    assert all(sp.problems(s) == [] and sp.canonical(s) == s for s in first[::7])
    # the default is one of them (every component's part of it is among that component's parts)
    d = sp.canonical(sp.default()).to_dict()
    for comp, part in zip(sp._components, sp._parts()):
        assert {k.name: d[k.name] for k in comp} in part
    # the size is the product over independent components: exhaustively for a small component
    assert sp.size() == int(np.prod([len(p) for p in sp._parts()]))


def test_components_tie_constrained_and_conditional_knobs():
    sp = ScheduleSpace(CPU)
    groups = [{k.name for k in comp} for comp in sp._components]
    jam = next(g for g in groups if "node_jam" in g)
    assert {"jam_pad", "jam_accumulators", "jam_unroll", "jam_interleave", "hidden_jam"} <= jam
    assert next(g for g in groups if "weight_block" in g) >= {"weight_layout"}
    assert sp.size() == np.prod([len(p) for p in sp._parts()])


def test_inactive_knobs_are_neutral_when_enumerated_and_sampled():
    sp = ScheduleSpace(CPU)
    for s in sp.sample(7, 50):
        if s.node_jam == 1:
            assert (s.jam_pad, s.jam_unroll, s.jam_interleave, s.hidden_jam) == (True, 1, True, 16)
        if s.weight_layout != "packed":
            assert s.weight_block == 16


def test_defaults_record_their_rule_and_follow_the_knobs_given():
    caps = replace(CPU, vector_registers=32, preferred=(("node_jam", 8), ("interchange", True)))
    sp = ScheduleSpace(caps)
    s, src = sp.resolve(None)
    assert s.node_jam == 8 and "preference" in src["node_jam"]
    assert s.jam_accumulators == 24 and "32 SIMD registers" in src["jam_accumulators"]
    assert s.jam_rows == 0 and "unknown" in src["jam_rows"]  # no limit where the registers are unknown
    s_x86, src_x86 = ScheduleSpace(replace(caps, address_registers=16)).resolve(None)
    assert s_x86.jam_rows == 8 and "16 general-purpose registers" in src_x86["jam_rows"]
    s2, src2 = sp.resolve({"vector_width": 8})
    assert src2["vector_width"] == "user"
    assert s2.hidden_jam == 8 and s2.weight_block == 8  # derived defaults follow the given knob
    assert src2["hidden_jam"] == "default rule: the vector width (8)"
    s3, src3 = sp.resolve(replace(s, node_jam=4))
    assert src3["node_jam"] == "user" and src3["vector_width"].endswith("(as given)")
    assert "inactive" in sp.resolve({"node_chunk": 1})[1]["hidden_tiles"]


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


def test_recursive_unrolling_keeps_a_nodes_hidden_units_on_one_work_item_without_a_grid():
    """A unit's nodes run one after another; where a work-group's items would split a node's
    hidden loops with no barrier between the nodes (a group barrier and no grid, as OpenCL on a
    CPU), parallel hidden units are refused with the unrolling (they read rows still being
    written: found by the tuner as wrong outputs on PoCL)."""
    items = Capabilities(num_cores=2, vector_bits=256, group_barrier=True, max_threads_per_group=256)
    sp = ScheduleSpace(items)
    sp.with_knobs(recursive_unroll=2, parallel="nodes")
    for par in ("hidden", "both"):
        with pytest.raises(ScheduleError, match="recursive_unroll > 1 runs a unit's nodes"):
            sp.with_knobs(recursive_unroll=2, parallel=par)
    assert all(s.parallel == "nodes" for s in sp.sample(3, 200) if s.recursive_unroll > 1)
    ScheduleSpace(CPU).with_knobs(recursive_unroll=2, parallel="both")  # one worker per unit: legal
