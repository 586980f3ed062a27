"""The ``row_jam`` knob (``cortex.core.lowering.row_jam``): rows of a node's matrix nest jammed,
checked on the interpreter against the program without it, and the shape it gives."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cortex.core import loopir as ir
import cortex.models as M
from cortex.core.lowering.jam import JamOptions
from cortex.core.lowering.lower import lower
from cortex.core.lowering.row_jam import jam_rows
from cortex.core.lowering.schedule import ScheduleSpace
from test_lower import CPU, SPECS, V, Spec, assert_close, make_batch, run_lowered, spec_families

WIDE_CPU = replace(CPU, vector_bits=512)
MV32 = Spec("MVRNN32", lambda dt: M.MVRNN(hidden=32, vocab=V, dtype=dt, seed=8))
# Hidden 16: the matrix nest's 16 columns are one 64-lane vector (``wide_lanes=64``), the form the
# row jam applies to, and two groups of 8 rows; small enough for the interpreter.
MV16 = Spec("MVRNN16", lambda dt: M.MVRNN(hidden=16, vocab=V, dtype=dt, seed=8))


KNOB_SETS = [{}, {"jam_pad": False, "jam_unroll": 2}, {"state_layout": "node_blocked", "state_block": 4},
             {"node_chunk": 2}]
_PLAIN: dict[int, list] = {}


def _mv16_batches():
    rng = np.random.default_rng(2)
    return [make_batch(MV16, items, rng) for items in spec_families(MV16, rng).values()]


def _plain_states(k: int) -> list:
    """The states of the program without the row jam for ``KNOB_SETS[k]``, on every batch
    (interpreted once per knob set, whatever the number of rows jammed)."""
    if k not in _PLAIN:
        sp = ScheduleSpace(WIDE_CPU, "float64")
        plain = lower(MV16.graph, sp.with_knobs(row_jam=1, wide_lanes=64, **KNOB_SETS[k]), WIDE_CPU, "float64")
        _PLAIN[k] = [run_lowered(plain, MV16.model.params, batch) for batch in _mv16_batches()]
    return _PLAIN[k]


# (rows jammed, knob set): every row count alone, and each other knob set with one of them (a
# jammed program is the interpreter's slowest: seconds per case)
CASES = [(2, 0), (4, 0), (8, 0), (8, 1), (4, 2), (2, 3)]


@pytest.mark.parametrize("rows, k", CASES, ids=[f"rows{r}-{KNOB_SETS[k]}" for r, k in CASES])
def test_jammed_rows_compute_what_the_rows_did(rows, k):
    sp = ScheduleSpace(WIDE_CPU, "float64")
    knobs = {"wide_lanes": 64, **KNOB_SETS[k]}
    jammed = lower(MV16.graph, sp.with_knobs(row_jam=rows, **knobs), WIDE_CPU, "float64")
    assert any(n.startswith(f"row_jam={rows}: 1 ") for n in jammed.notes), jammed.notes
    for batch, want in zip(_mv16_batches(), _plain_states(k)):
        assert_close(run_lowered(jammed, MV16.model.params, batch), want, "float64", f"rows={rows} {knobs}")


def test_rows_of_more_than_one_vector_are_not_jammed():
    """Without ``wide_lanes`` the 32 columns are two 16-lane vectors: the nest keeps its rows."""
    sp = ScheduleSpace(WIDE_CPU, "float64")
    low = lower(MV32.graph, sp.with_knobs(row_jam=8, wide_lanes=0), WIDE_CPU, "float64")
    assert any(n.startswith("row_jam=8: 0 ") for n in low.notes), low.notes


@pytest.mark.parametrize("name", [s.name for s in SPECS])
def test_every_zoo_model_is_unchanged_in_value_by_the_row_jam(name):
    spec = next(s for s in SPECS if s.name == name)
    rng = np.random.default_rng(4)
    batches = [make_batch(spec, items, rng) for items in spec_families(spec, rng).values()]
    sp = ScheduleSpace(WIDE_CPU, "float64")
    plain = lower(spec.graph, sp.with_knobs(row_jam=1, node_jam=1), WIDE_CPU, "float64")
    jammed = lower(spec.graph, sp.with_knobs(row_jam=4, node_jam=1), WIDE_CPU, "float64")
    for batch in batches:
        assert_close(run_lowered(jammed, spec.model.params, batch), run_lowered(plain, spec.model.params, batch),
                     "float64", name)


def test_the_matrix_rows_share_each_child_vector_load():
    """MV-RNN's ``M = W_M [A; B]``: a group of four rows loads each step's child vector once
    (the node's child lets are bound once for the group, not once per row)."""
    sp = ScheduleSpace(WIDE_CPU, "float32")
    low = lower(MV32.graph, sp.with_knobs(row_jam=1, wide_lanes=64), WIDE_CPU)
    program, n = jam_rows(low.program, JamOptions(nodes=4, register_lanes=16))
    assert n >= 1
    fmas = [c for c in ir.walk(program.kernel("main").body) if isinstance(c, ir.Call) and c.fn == "fma"]
    child_vectors = {a for c in fmas for a in c.args if isinstance(a, ir.Load) and a.buffer == "M"}
    rows = {a for c in fmas for a in c.args if isinstance(a, ir.Load) and a.buffer == "W_M"}
    assert child_vectors and len(rows) >= 4 * len({ld.index[1] for ld in child_vectors})
    assert len(child_vectors) < len(rows)


def test_off_or_nothing_to_jam_leaves_the_program_unchanged():
    sp = ScheduleSpace(WIDE_CPU, "float32")
    low = lower(next(s for s in SPECS if s.name == "TreeGRU").graph, sp.with_knobs(row_jam=1), WIDE_CPU)
    assert jam_rows(low.program, JamOptions(nodes=1)) == (low.program, 0)
    assert jam_rows(low.program, JamOptions(nodes=4))[1] == 0  # its node loops are jammed already
