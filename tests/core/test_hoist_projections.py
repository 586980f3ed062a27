"""The ``hoist_projections`` knob (``cortex.core.lowering.hoist_projections``): GEMVs over a node's
own input computed before the level loop, checked on the interpreter against the program without
it for the zoo over the structure families, and the shape of what it builds."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.lowering.hoist_projections import hoist_projections
from cortex.core.lowering.lower import lower
from cortex.core.lowering.schedule import ScheduleSpace
from test_lower import CPU, SPECS, assert_close, make_batch, run_lowered, spec_families

SPEC = {s.name: s for s in SPECS}
# the zoo models whose internal case projects the node's own dense features, or a child's
# state inside a per-child reduction (child-sum's forget gate)
HOISTING_MODELS = ("DAGRNN", "DAGRNN_tree", "SeqLSTM", "ChildSumTreeLSTM")


def hoisted(low) -> int:
    for note in low.notes:
        m = re.match(r"hoist_projections: (\d+) ", note)
        if m:
            return int(m.group(1))
    return 0


@pytest.mark.parametrize("name", sorted(SPEC))
def test_hoisted_projections_compute_what_the_levels_did(name):
    """Every zoo model, every structure family, with the node-loop knobs that reshape what the
    hoist adds (interchange, node jam, chunks, refactoring, a node-blocked state): the same
    states as the program without the hoist."""
    spec = SPEC[name]
    rng = np.random.default_rng(3)
    batches = [make_batch(spec, items, rng) for items in spec_families(spec, rng).values()]
    sp = ScheduleSpace(CPU, "float64")
    cases = [{}, {"interchange": True, "node_jam": 4, "hidden_jam": 2}, {"node_chunk": 4},
             {"refactor": True}, {"state_layout": "node_blocked", "state_block": 4}, {"fuse": False},
             {"kernel_form": "per_level", "interchange": True, "node_jam": 4, "hidden_jam": 2}]
    for knobs in cases:
        plain = lower(spec.graph, sp.with_knobs(hoist_projections=False, **knobs), CPU, "float64")
        hoist = lower(spec.graph, sp.with_knobs(hoist_projections=True, **knobs), CPU, "float64")
        if name in HOISTING_MODELS and not knobs.get("refactor") and knobs.get("fuse", True):
            assert hoisted(hoist) >= 1, (name, knobs, hoist.notes)
        if hoist.program == plain.program:  # nothing hoisted: the same program computes the same
            assert hoisted(hoist) == 0, (name, knobs)
            continue
        for batch in batches:
            assert_close(run_lowered(hoist, spec.model.params, batch),
                         run_lowered(plain, spec.model.params, batch), "float64", f"{name} {knobs}")


def test_the_hoist_is_on_by_default_on_a_cpu_and_moves_dagrnn_input_term_before_the_levels():
    sp = ScheduleSpace(CPU, "float32")
    assert sp.default().hoist_projections
    low = lower(SPEC["DAGRNN"].graph, sp.with_knobs(kernel_form="single", node_jam=1, interchange=False), CPU)
    assert hoisted(low) == 1
    proj = [b for b in low.program.buffers if b.name.startswith("proj")]
    assert len(proj) == 1 and proj[0].role == "temp" and proj[0].shape[0] == ir.Var("N")
    body = low.program.kernel("main").body
    stmts = body.stmts
    level = next(i for i, s in enumerate(stmts) if isinstance(s, ir.For) and s.var == "l")
    writes = [i for i, s in enumerate(stmts) if any(isinstance(n, ir.Store) and n.buffer == proj[0].name
                                                    for n in ir.walk(s))]
    assert writes and max(writes) < level  # computed before the level loop
    reads = [n for n in ir.walk(stmts[level]) if isinstance(n, ir.Load) and n.buffer == proj[0].name]
    assert reads and not any(isinstance(n, ir.Load) and n.buffer == "features" for n in ir.walk(stmts[level]))
    assert next(z for z in low.program.sizes if z.name == "L").lo >= 1  # reads level_offsets[1]


def test_nothing_to_hoist_leaves_the_program_unchanged():
    """TreeGRU's internal case reads no input; an unrolled program has phases instead of
    levels: both unchanged."""
    sp = ScheduleSpace(CPU, "float32")
    gru = lower(SPEC["TreeGRU"].graph, sp.with_knobs(hoist_projections=False), CPU).program
    assert hoist_projections(gru) == (gru, 0)
    dag = lower(SPEC["DAGRNN"].graph, sp.with_knobs(hoist_projections=False, recursive_unroll=2), CPU).program
    assert hoist_projections(dag) == (dag, 0)


def test_a_per_level_program_computes_the_input_projection_in_a_kernel_launched_before_its_levels():
    """In a per-level program (OpenCL's: a launch per level) the levels are the kernels a host
    loop launches: the projection of every internal node's input is a kernel of its own, one
    node loop over levels first..L-1, launched once before that host loop."""
    sp = ScheduleSpace(CPU, "float32")
    plain = lower(SPEC["DAGRNN"].graph, sp.with_knobs(hoist_projections=False, kernel_form="per_level"), CPU).program
    program, n = hoist_projections(plain)
    assert n == 1
    (proj,) = [b for b in program.buffers if b.name.startswith("proj")]
    loop = next(i for i, st in enumerate(program.host) if isinstance(st, ir.HostFor))
    prologue = program.host[loop - 1]
    assert isinstance(prologue, ir.Launch) and prologue.kernel not in {k.name for k in plain.kernels}
    kernel = program.kernel(prologue.kernel)
    assert not kernel.params and any(isinstance(n, ir.Store) and n.buffer == proj.name for n in ir.walk(kernel.body))
    (level,) = [program.kernel(x.kernel) for x in program.host[loop].body]
    assert any(isinstance(n, ir.Load) and n.buffer == proj.name for n in ir.walk(level.body))
    assert not any(isinstance(n, ir.Load) and n.buffer == "features" for n in ir.walk(level.body))


def test_childsum_forget_gate_gemv_runs_per_child_edge_before_the_levels_nodes():
    sp = ScheduleSpace(CPU, "float32")
    low = lower(SPEC["ChildSumTreeLSTM"].graph, sp.with_knobs(kernel_form="single", node_jam=1, interchange=False), CPU)
    assert hoisted(low) == 1
    proj = [b for b in low.program.buffers if b.name.startswith("proj")]
    assert len(proj) == 1 and proj[0].shape[0] == ir.Var("E")  # a row per child edge
    level = next(s for s in low.program.kernel("main").body.stmts if isinstance(s, ir.For) and s.var == "l")
    edge_loop, node_loop = level.body.stmts
    assert edge_loop.start == ir.Load("child_offsets", (ir.Load("level_offsets", (ir.Var("l"),)),))
    assert any(isinstance(n, ir.Store) and n.buffer == proj[0].name for n in ir.walk(edge_loop))
    inner = [r for r in ir.walk(node_loop) if isinstance(r, ir.Reduce) and isinstance(r.start, ir.Load)
             and r.start.buffer == "child_offsets"]
    assert inner and not any(isinstance(r, ir.Reduce) for c in inner for r in ir.walk(c.body))


def test_the_input_projection_runs_in_chunks_of_nodes():
    """More internal nodes than a chunk (two grids of 400 and 90 cells): several chunks, each a
    node loop annotated "nodes" that the interchange and the jam reshape; the same states."""
    from cortex.core.linearize import Grid
    from cortex.core.linearize import linearize
    from cortex.core.lowering.hoist_projections import CHUNK_NODES

    spec = SPEC["DAGRNN"]
    rng = np.random.default_rng(8)
    grids = [Grid(20, 20, features=rng.normal(size=(400, 5))), Grid(3, 30, features=rng.normal(size=(90, 5)))]
    batch = linearize(grids, arity=None, feature_dim=5, cache=False)
    assert batch.num_nodes - 2 > CHUNK_NODES
    sp = ScheduleSpace(CPU, "float64")
    for knobs in ({}, {"interchange": True, "node_jam": 4, "hidden_jam": 2}):
        plain = lower(spec.graph, sp.with_knobs(hoist_projections=False, **knobs), CPU, "float64")
        hoist = lower(spec.graph, sp.with_knobs(hoist_projections=True, **knobs), CPU, "float64")
        loops = [n for n in ir.walk(hoist.program.kernel("main").body) if isinstance(n, ir.For)]
        assert any(n.var.startswith("proj_chunk") for n in loops)
        assert any("nodes" in n.annotations for n in loops) == (not knobs)  # the jam replaces the node loop
        assert_close(run_lowered(hoist, spec.model.params, batch), run_lowered(plain, spec.model.params, batch),
                     "float64", f"chunks {knobs}")
