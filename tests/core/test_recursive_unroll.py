"""Recursive unrolling (the ``recursive_unroll`` knob): the work units the linearizer side builds
(``cortex.core.linearize.units``) and the unrolled programs against the untransformed ones and
the reference, on the interpreter, over every zoo model and structure family."""

from __future__ import annotations

import numpy as np
import pytest

from cortex.core.linearize import ChildTable, linearize
from cortex.core.linearize.units import unroll_units
from cortex.core.lowering.lower import lower
from cortex.core.lowering.schedule import ScheduleSpace
from cortex.testing.structures import balanced, caterpillar
from tests.core.test_lower import CPU, GPU, SPECS, _dag, _random_tree, make_batch, spec_families
from tests.core.test_refactor import check_against_untransformed


def _batch(children_lists):
    structs = []
    for ch in children_lists:
        n, w = len(ch), max(1, max(len(c) for c in ch))
        t = np.full((n, w), -1)
        for v, c in enumerate(ch):
            t[v, :len(c)] = c
        structs.append(ChildTable(t))
    return linearize(structs, cache=False)


def _check_units(batch, first: int) -> int:
    """Every node of levels >= first once; inside a phase, a unit reads only its own earlier
    nodes or nodes of earlier phases. Returns the number of phases."""
    u = unroll_units(batch.level_offsets, batch.child_offsets, batch.child_ids, first)
    lo = batch.level_offsets
    start = int(lo[first]) if first < len(lo) else int(lo[-1])
    assert sorted(u.unit_nodes.tolist()) == list(range(start, batch.num_nodes))
    assert u.phase_offsets[0] == 0 and u.phase_offsets[-1] == len(u.unit_offsets) - 1
    assert u.unit_offsets[0] == 0 and u.unit_offsets[-1] == len(u.unit_nodes)
    assert np.all(np.diff(u.phase_offsets) >= 0) and np.all(np.diff(u.unit_offsets) > 0)
    done = np.zeros(batch.num_nodes, dtype=bool)
    done[:start] = True
    for ph in range(u.phases):
        written = []
        for g in range(u.phase_offsets[ph], u.phase_offsets[ph + 1]):
            mine = set()
            for v in u.unit_nodes[u.unit_offsets[g]:u.unit_offsets[g + 1]]:
                kids = batch.child_ids[batch.child_offsets[v]:batch.child_offsets[v + 1]]
                assert all(done[c] or c in mine for c in kids), f"node {v} reads another unit's node"
                mine.add(int(v))
            written.extend(mine)
        done[written] = True
    return u.phases


def test_units_pair_levels_of_trees():
    rng = np.random.default_rng(0)
    b = _batch([balanced(5, 2)])  # 6 levels: leaves + 5 internal levels -> 3 phases
    assert _check_units(b, 1) == 3
    assert _check_units(b, 2) == 2
    b = _batch([caterpillar(9, 2), _random_tree(rng, 20, 2), [[]]])
    levels = len(b.level_offsets) - 2
    assert _check_units(b, 1) == (levels + 1) // 2
    _check_units(_batch([_random_tree(rng, 30, None) for _ in range(3)]), 1)


def test_units_split_a_pair_whose_child_is_shared_within_it():
    # node 3 (level 1) has two parents on level 2 (4 and 5): that pair runs as two phases, then
    # the sink (level 3) alone
    b = _batch([[[], [], [], [0, 1], [3, 2], [3, 1], [4, 5]]])
    assert _check_units(b, 1) == 3
    rng = np.random.default_rng(3)
    for _ in range(5):
        _check_units(_batch([_dag(rng, 25)]), 1)


def test_units_of_a_batch_without_internal_levels():
    u = unroll_units(np.array([0, 3]), np.zeros(4, np.int32), np.zeros(0, np.int32), 1)
    assert u.phases == 0 and len(u.unit_nodes) == 0


def _variants():
    cpu, gpu = ScheduleSpace(CPU, "float64"), ScheduleSpace(GPU, "float64")
    return [("cpu", CPU, cpu.with_knobs(recursive_unroll=2)),
            ("cpu-refactored", CPU, cpu.with_knobs(recursive_unroll=2, refactor=True)),
            ("cpu-single-unfused-no-leaf-spec", CPU, cpu.with_knobs(
                recursive_unroll=2, kernel_form="single", fuse=False, leaf_specialization=False)),
            ("gpu", GPU, gpu.with_knobs(recursive_unroll=2)),
            ("gpu-per-level", GPU, gpu.with_knobs(recursive_unroll=2, kernel_form="per_level"))]


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_unrolled_matches_untransformed_on_every_family(spec):
    lows = [(label, lower(spec.graph, s, caps, "float64")) for label, caps, s in _variants()]
    for label, low in lows:
        assert any(n.startswith("recursive_unroll=2:") for n in low.notes)
    check_against_untransformed(spec, lows, 6)


def test_unrolling_off_leaves_the_program_alone():
    spec = next(s for s in SPECS if s.name == "TreeLSTM")
    sp = ScheduleSpace(CPU, "float32")
    assert sp.default().recursive_unroll == 1
    names = {b.name for b in lower(spec.graph, sp.default(), CPU).program.buffers}
    assert not names & {"phase_offsets", "unit_offsets", "unit_nodes"}


def test_a_sealed_batch_keeps_its_units_and_another_does_not():
    import dataclasses

    spec = next(s for s in SPECS if s.name == "TreeLSTM")
    low = lower(spec.graph, ScheduleSpace(CPU, "float64").with_knobs(recursive_unroll=2), CPU, "float64")
    rng = np.random.default_rng(9)
    batch = make_batch(spec, spec_families(spec, rng)["random"], rng)
    assert batch._is_sealed()
    first, _ = low.bind_batch(batch)
    again, _ = low.bind_batch(batch)
    assert again["unit_nodes"] is first["unit_nodes"]
    mine = dataclasses.replace(batch)  # not sealed: its arrays could change between calls
    a, _ = low.bind_batch(mine)
    b, _ = low.bind_batch(mine)
    assert a["unit_nodes"] is not b["unit_nodes"]
    np.testing.assert_array_equal(a["unit_nodes"], first["unit_nodes"])
