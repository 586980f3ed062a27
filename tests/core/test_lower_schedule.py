"""The shape of lowered programs: fusion, leaf specialization, host forms, every schedule knob,
the notes for knobs that do not apply, and the Lowered data interface (params, batches, states)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.frontend import reference
from cortex.core.linearize import ChildTable, linearize
from cortex.core.lowering.transforms import from_layout
from cortex.core.loopir.verify import verify
from cortex.core.lowering.lower import BatchMismatchError, Lowered, LoweringError, lower
from cortex.core.lowering.schedule import Schedule, ScheduleSpace
from test_lower import CPU, GPU, SPECS, assert_close, make_batch, run_lowered, spec_families

SPEC = {s.name: s for s in SPECS}


def loops(program: ir.Program) -> list[ir.For]:
    return [n for k in program.kernels for n in ir.walk(k.body) if isinstance(n, ir.For)]


def nodes_of(program: ir.Program, cls) -> list:
    return [n for k in program.kernels for n in ir.walk(k.body) if isinstance(n, cls)]


def mixed_batch(spec, seed: int = 3):
    rng = np.random.default_rng(seed)
    return make_batch(spec, spec_families(spec, rng)["mixed"], rng)


# ---------------------------------------------------------------------------- structure


def test_fused_tree_lstm_is_one_nest_per_case_without_temporaries():
    """Per-node fusion: the stacked gate GEMVs, bias and epilogue of each case are one loop over
    the hidden units storing only h and c (no temp buffers)."""
    low = lower(SPEC["TreeLSTM"].graph, ScheduleSpace(CPU, "float32").with_knobs(vector_width=1, weight_layout="row_major"), CPU)
    p = low.program
    assert not [b for b in p.buffers if b.role == "temp"]
    stores = nodes_of(p, ir.Store)
    assert sorted({s.buffer for s in stores}) == ["c", "h"]
    hidden = [f for f in loops(p) if f.var not in ("u", "v", "vi", "w", "l")]
    # one nest per case: the leaves, level 1 (tables), the other levels, and theirs whose child 0
    # or child 1 is a leaf (leaf_kids)
    assert len(hidden) == 5
    assert nodes_of(p, ir.Reduce), "the GEMVs stay explicit reductions"


def test_unfused_materializes_dense_intermediates():
    """fuse=False: every non-trivial value gets a temp [N, ...] (per-child values [E, ...])."""
    sp = ScheduleSpace(CPU, "float64")
    low = lower(SPEC["ChildSumTreeLSTM"].graph, sp.with_knobs(fuse=False), CPU, "float64")
    temps = [b for b in low.program.buffers if b.role == "temp"]
    rows = {str(b.shape[0]) for b in temps}
    assert rows == {"N", "E"}
    fused = lower(SPEC["ChildSumTreeLSTM"].graph, sp.default(), CPU, "float64")
    assert len([b for b in fused.program.buffers if b.role == "temp"]) < len(temps)


def test_fused_materializes_only_what_a_reduction_rereads():
    """ChildSum: sum_children(h) feeds a GEMV, so it is materialized once per node. TreeGRU: the
    reset-gated child states feed the candidate GEMVs ([N, 8] each, in level 1, whose r comes
    from tables, and in the other levels); r's GEMVs are fused with them and z's with the final
    nest (gate stacking keeps r and z apart: different stages), so nothing else is
    materialized. Everything else is fused (the projection hoist, which adds
    a temp for ChildSum's per-child forget GEMV, is off here)."""
    sp = ScheduleSpace(CPU, "float64")
    cs = lower(SPEC["ChildSumTreeLSTM"].graph, sp.with_knobs(hoist_projections=False), CPU, "float64")
    assert [tuple(map(str, b.shape)) for b in cs.program.buffers if b.role == "temp"] == [("N", "8")]
    gru = lower(SPEC["TreeGRU"].graph, sp.with_knobs(leaf_kids=False), CPU, "float64")
    shapes = sorted(tuple(map(str, b.shape)) for b in gru.program.buffers if b.role == "temp")
    assert shapes == [("N", "8")] * 4
    # the level loops whose child 0 or child 1 is a leaf (leaf_kids) store their own r * h_k
    gru = lower(SPEC["TreeGRU"].graph, sp.default(), CPU, "float64")
    shapes = sorted(tuple(map(str, b.shape)) for b in gru.program.buffers if b.role == "temp")
    assert shapes == [("N", "8")] * 8


def test_leaf_specialization_off_branches_per_node():
    sp = ScheduleSpace(CPU, "float64")
    on = lower(SPEC["TreeLSTM"].graph, sp.with_knobs(kernel_form="per_level", row_jam=1), CPU, "float64").program
    off = lower(SPEC["TreeLSTM"].graph, sp.with_knobs(kernel_form="per_level", leaf_specialization=False, row_jam=1),
                CPU, "float64").program
    assert [k.name for k in on.kernels] == ["leaves", "preterminal", "level"]
    assert not nodes_of(on, ir.If)
    assert [k.name for k in off.kernels] == ["level"]  # and no level-1 case: it needs the leaves apart
    assert len(nodes_of(off, ir.If)) == 1
    assert ir.const_int(off.host[0].start) == 0 and ir.const_int(on.host[2].start) == 2


def test_host_forms_and_barriers():
    """per_level: a host loop of launches; single: one kernel with the level loop; grid barriers
    only on a grid target, group barriers between nests only where groups exist."""
    g = SPEC["TreeGRU"].graph
    cpu_single = lower(g, ScheduleSpace(CPU).with_knobs(kernel_form="single"), CPU).program
    assert len(cpu_single.kernels) == 1 and isinstance(cpu_single.host[0], ir.Launch)
    assert not nodes_of(cpu_single, ir.Barrier)
    gpu_single = lower(g, ScheduleSpace(GPU).default(), GPU).program
    scopes = [b.scope for b in nodes_of(gpu_single, ir.Barrier)]
    assert scopes.count("grid") == 3 and "group" in scopes  # after the leaves, level 1, each level
    gpu_levels = lower(g, ScheduleSpace(GPU).with_knobs(kernel_form="per_level"), GPU).program
    assert isinstance(gpu_levels.host[2], ir.HostFor)  # the leaves, level 1, then a launch per level
    assert "grid" not in [b.scope for b in nodes_of(gpu_levels, ir.Barrier)]


def test_parallel_knob_maps_loops_to_threads_and_groups():
    g = SPEC["TreeLSTM"].graph
    kinds = lambda p: {f.var: f.kind for f in loops(p)}  # noqa: E731
    gpu = lower(g, ScheduleSpace(GPU).default(), GPU).program
    k = kinds(gpu)
    assert k["u"] == k["v"] == "gpu_group" and k["jl"] == k["jn"] == "gpu_thread"
    assert {kk.threads_per_group for kk in gpu.kernels} == {256}
    cpu = lower(g, ScheduleSpace(CPU).with_knobs(parallel="hidden", vector_width=1, weight_layout="row_major"), CPU).program
    k = kinds(cpu)
    assert k["vi"] == "serial" and k["jn"] == "parallel"  # vi: a level's node loops (leaf_kids)


def test_tile_vector_unroll_reshape_the_hidden_loop():
    g = SPEC["TreeLSTM"].graph
    s = ScheduleSpace(CPU, "float32").with_knobs(tile_hidden=8, vector_width=4, unroll=2, parallel="both",
                                                 weight_layout="row_major")
    low = lower(g, replace(s), CPU)
    kinds = [f.kind for f in loops(low.program)]
    assert "vectorized" in kinds and "parallel" in kinds
    # H = 8: tile 8 is the whole loop, so no split; it is split by the vector width
    assert any(f.var.endswith("v") and f.kind == "vectorized" for f in loops(low.program))
    assert any("unroll=2" in n for n in low.notes)
    trips = {ir.const_int(r.stop) for r in nodes_of(low.program, ir.Reduce)}
    assert trips == {4}  # H=8 reductions unrolled by 2


def test_weight_layouts_change_the_weights_and_prepare_params_follows():
    spec = SPEC["TreeLSTM"]
    for layout in ("transposed", "packed"):
        s = ScheduleSpace(CPU, "float32").with_knobs(weight_layout=layout, vector_width=8)
        low = lower(spec.graph, s, CPU)
        changed = [b for b in low.program.buffers if b.layout != ("row_major",)]
        assert changed and all(b.role == "param" for b in changed)
        p = low.prepare_params(spec.model.params)
        assert set(p) == {b.name for b in low.program.buffers if b.role == "param"}
        for b in changed:
            assert p[b.name].dtype == np.float32
            logical = from_layout(p[b.name], b.layout)
            assert logical.shape == tuple(ir.const_int(d) for d in b.logical_shape)


def test_packed_layout_skips_weights_whose_rows_do_not_divide():
    """MV-RNN hidden 4: W is [4, 8], the vector width 8 cannot block its rows: noted, row-major,
    still correct."""
    spec = SPEC["MVRNN"]
    s = ScheduleSpace(CPU, "float32").with_knobs(weight_layout="packed", vector_width=8)
    low = lower(spec.graph, s, CPU)
    assert any("left row-major" in n for n in low.notes)
    batch = mixed_batch(spec)
    assert_close(run_lowered(low, spec.model.params, batch),
                 reference.evaluate(spec.graph, spec.model.params, batch), "float32", "MVRNN packed")


def test_persistence_caches_weights_in_shared_memory_when_they_fit():
    spec = SPEC["TreeLSTM"]
    s = ScheduleSpace(GPU).with_knobs(persistent=True)
    low = lower(spec.graph, s, GPU)
    shared = [a for a in nodes_of(low.program, ir.Alloc) if a.scope == "shared"]
    assert shared and any("cached in shared memory" in n for n in low.notes)
    small = replace(GPU, shared_memory_bytes=256)
    low2 = lower(spec.graph, ScheduleSpace(small).with_knobs(persistent=True), small)
    assert not nodes_of(low2.program, ir.Alloc)
    assert any("persistent ignored" in n for n in low2.notes)
    batch = mixed_batch(spec)
    ref = reference.evaluate(spec.graph, spec.model.params, batch)
    for lw in (low, low2):
        assert_close(run_lowered(lw, spec.model.params, batch), ref, "float32", "persistent")
    cpu = lower(spec.graph, ScheduleSpace(CPU).with_knobs(persistent=True), CPU)
    assert any("CPU caches" in n for n in cpu.notes)


@pytest.mark.parametrize("name", ["ChildSumTreeLSTM"])
def test_every_value_of_every_knob(name):
    """Each knob at each of its legal values (others at their defaults) on the CPU- and
    GPU-like targets: verified and equal to the reference."""
    spec = SPEC[name]
    batch = mixed_batch(spec)
    ref = reference.evaluate(spec.graph, spec.model.params, batch)
    for caps in (CPU, GPU):
        sp = ScheduleSpace(caps, "float64")
        for knob in sp.knobs:
            for choice in knob.choices:
                if choice == knob.default:
                    continue
                try:
                    s = sp.with_knobs(**{knob.name: choice})
                except ValueError:
                    continue  # illegal with the other defaults (e.g. packed needs vector_width > 1)
                low = lower(spec.graph, s, caps, "float64")
                verify(low.program, caps)
                assert_close(run_lowered(low, spec.model.params, batch), ref, "float64", f"{knob.name}={choice}")


def test_verifier_accepts_sampled_schedules():
    """Many random legal schedules of both targets lower to programs the verifier accepts."""
    for name in ("TreeLSTM", "DAGRNN", "MVRNN"):
        for caps in (CPU, GPU):
            for s in ScheduleSpace(caps, "float32").sample(17, 3):
                verify(lower(SPEC[name].graph, s, caps).program, caps)


def test_schedule_without_grid_barrier_runs_per_level():
    """A grid target without a grid barrier (OpenCL-like) only offers per_level; the lowering
    honours it and never emits a grid barrier."""
    ocl = replace(GPU, grid_barrier=False, dialect="opencl")
    low = lower(SPEC["TreeRNN"].graph, ScheduleSpace(ocl).default(), ocl)
    assert "grid" not in [b.scope for b in nodes_of(low.program, ir.Barrier)]


# ---------------------------------------------------------------------------- data interface


def test_bind_batch_sizes_and_buffers():
    spec = SPEC["TreeLSTM"]
    low = lower(spec.graph, ScheduleSpace(CPU).default(), CPU)
    batch = linearize([ChildTable(np.array([[-1]]), words=[3])], arity=2, vocab_size=11)
    bufs, sizes = low.bind_batch(batch)
    # E padded: no empty buffers; L: the level-1 loop of TreeLSTM's program reads
    # level_offsets[2], so a batch of one leaf gets an empty level 1
    assert sizes == {"N": 1, "E": 1, "L": 2, "NL": 1}
    assert bufs["level_offsets"].tolist() == [0, 1, 1]
    mv = lower(SPEC["MVRNN"].graph, ScheduleSpace(CPU).default(), CPU)  # no level-1 case
    assert mv.bind_batch(batch)[1]["L"] == 1
    assert bufs["child_table"].shape == (1, 2) and (bufs["child_table"] == -1).all()
    assert all(a.dtype == np.int32 for a in bufs.values())
    assert not {"h", "c"} & set(bufs)


def test_bind_batch_rejects_batches_that_do_not_fit():
    spec = SPEC["TreeLSTM"]
    low = lower(spec.graph, ScheduleSpace(CPU).default(), CPU)
    ternary = linearize([ChildTable(np.array([[1, 2, 3], [-1, -1, -1], [-1, -1, -1], [-1, -1, -1]]),
                                    words=[0, 1, 2, 3])])
    with pytest.raises(BatchMismatchError, match="fixed arity 2"):
        low.bind_batch(ternary)
    big_word = linearize([ChildTable(np.array([[1, 2], [-1, -1], [-1, -1]]), words=[0, 99, 2])])
    with pytest.raises(BatchMismatchError, match=r"token id in \[0, 11\)"):
        low.bind_batch(big_word)
    # ChildSum's internal case reads the node's token: an internal node without one is refused
    cs = lower(SPEC["ChildSumTreeLSTM"].graph, ScheduleSpace(CPU).default(), CPU)
    no_word = linearize([ChildTable(np.array([[1, 2], [-1, -1], [-1, -1]]), words=[-1, 4, 2])])
    with pytest.raises(BatchMismatchError, match="node 2 needs a token id .* has -1"):
        cs.bind_batch(no_word)
    dag = SPEC["DAGRNN"]
    low2 = lower(dag.graph, ScheduleSpace(CPU).default(), CPU)
    with pytest.raises(BatchMismatchError, match="features"):
        low2.bind_batch(linearize([ChildTable(np.array([[1], [-1]]))]))


def test_internal_nodes_without_tokens_are_fine_when_the_internal_case_reads_none():
    """PTB trees carry tokens only at leaves (-1 elsewhere); TreeLSTM's internal case reads no
    token, so that batch binds and runs."""
    spec = SPEC["TreeLSTM"]
    low = lower(spec.graph, ScheduleSpace(CPU, "float64").default(), CPU, "float64")
    batch = linearize([ChildTable(np.array([[1, 2], [-1, -1], [-1, -1]]), words=[-1, 4, 2])])
    ref = reference.evaluate(spec.graph, spec.model.params, batch)
    assert_close(run_lowered(low, spec.model.params, batch), ref, "float64", "ptb-like")


def test_lowered_interface_and_errors():
    spec = SPEC["SeqGRU"]
    s = ScheduleSpace(CPU).default()
    low = lower(spec.graph, s, CPU)
    assert isinstance(low, Lowered) and low.schedule == s and low.dtype == "float32"
    assert dict(low.state_names) == {"h": "h"}
    assert all(n.isidentifier() for _, n in low.param_names)
    assert low.notes and Schedule.from_json(low.schedule.to_json()) == s
    with pytest.raises(LoweringError, match="dtype"):
        lower(spec.graph, s, CPU, "float16")
    with pytest.raises(TypeError, match="Schedule"):
        lower(spec.graph, s.to_dict(), CPU)  # type: ignore[arg-type]
    batch = mixed_batch(spec)
    states = run_lowered(low, spec.model.params, batch)
    assert set(states) == {"h"} and states["h"].shape == (batch.num_nodes, 8)


def test_buffer_names_dodge_c_macros():
    """MV-RNN's word matrices are the param ``M_E``, a <math.h> macro (the constant e) under nvcc
    and GNU C: the buffer gets another name, and the name map says which."""
    low = lower(SPEC["MVRNN"].graph, ScheduleSpace(GPU).default(), GPU)
    names = dict(low.param_names)
    assert names["M_E"] != "M_E" and names["M_E"].isidentifier()
    assert "M_E" not in {b.name for b in low.program.buffers}


# ---------------------------------------------------------------------------- loop-shape knobs


def test_the_jam_knobs_reshape_the_level_and_the_results_stay():
    """interchange + node_jam: the level loop runs inside a parallel hidden-block loop, its
    nodes in groups with a private accumulator array per group and a cold fallback; the notes
    say so, and the program computes what the untransformed one does."""
    spec = SPEC["TreeLSTM"]
    sp = ScheduleSpace(CPU, "float64")
    plain = lower(spec.graph, sp.with_knobs(vector_width=1), CPU, "float64")
    s, src = sp.resolve({"vector_width": 1, "interchange": True, "node_jam": 4, "hidden_jam": 2, "jam_unroll": 2})
    jammed = lower(spec.graph, s, CPU, "float64", src)
    assert any(n.startswith("interchange: ") for n in jammed.notes)
    # the level's three node loops (no leaf child, child 0 or child 1 a leaf: leaf_kids)
    assert any(n.startswith("node_jam=4: 3 level loops jammed in groups of 4/2/1 nodes, 2 hidden units")
               for n in jammed.notes)
    assert "schedule: node_jam=4 (user)" in jammed.notes
    assert any(n.startswith("schedule: hidden_jam=2 (user)") for n in jammed.notes)
    allocs = nodes_of(jammed.program, ir.Alloc)
    assert allocs and all(a.scope == "private" for a in allocs)
    assert any("cold" in f.annotations for f in loops(jammed.program))
    batch = mixed_batch(spec)
    assert_close(run_lowered(jammed, spec.model.params, batch), run_lowered(plain, spec.model.params, batch),
                 "float64", "jammed")


# TreeGRU: level 1's candidate phase, then both phases of each of a level's three node loops
@pytest.mark.parametrize("name,jammed_loops", [("TreeGRU", 7), ("ChildSumTreeLSTM", 1)])
def test_a_level_in_phases_is_jammed_with_scalar_hidden_loops(name, jammed_loops):
    """A level computed in phases (TreeGRU's reset gate before its candidate's sum, child-sum's
    per-child forget gates before the node's) with scalar hidden loops (``vector_width=1``, as
    the OpenCL CPU device prefers): each phase's hidden loop is cut into blocks, interchanged
    and the phases with sums jammed, and the program computes what the untransformed one does."""
    spec = SPEC[name]
    sp = ScheduleSpace(CPU, "float64")
    plain = lower(spec.graph, sp.with_knobs(vector_width=1), CPU, "float64")
    # the projection hoist would take child-sum's per-child phase out of the level: held off
    s, src = sp.resolve({"vector_width": 1, "interchange": True, "node_jam": 4, "hidden_jam": 4,
                         "hoist_projections": False})
    jammed = lower(spec.graph, s, CPU, "float64", src)
    assert any(n.startswith(f"node_jam=4: {jammed_loops} level loops jammed") for n in jammed.notes), jammed.notes
    batch = mixed_batch(spec)
    assert_close(run_lowered(jammed, spec.model.params, batch), run_lowered(plain, spec.model.params, batch),
                 "float64", "jammed")


def test_threads_and_the_one_group_form_are_launch_settings():
    low = lower(SPEC["TreeRNN"].graph, ScheduleSpace(CPU, "float32").with_knobs(threads=2), CPU)
    assert low.program.launch_setting("threads") == 2
    caps = replace(CPU, single_call=False, single_group_form=True)
    sp = ScheduleSpace(caps, "float32")
    low = lower(SPEC["TreeRNN"].graph, sp.with_knobs(kernel_form="auto", single_group_nodes=64), caps)
    assert low.program.launch_setting("kernel_form") == "auto"
    assert low.program.launch_setting("single_group_nodes") == 64
    assert low.program.host and any(isinstance(s, ir.HostFor) for s in low.program.host)  # per level


def test_wide_vectors_prefetches_and_chunks_are_applied_and_noted():
    spec = SPEC["TreeLSTM"]
    caps = replace(CPU, prefetch=True)
    sp = ScheduleSpace(caps, "float32")
    low = lower(spec.graph, sp.with_knobs(prefetch=2, node_chunk=4, wide_lanes=64), caps)
    assert nodes_of(low.program, ir.Prefetch)
    assert any(n.startswith("prefetch=2: 1 node loops") for n in low.notes)
    assert any(n.startswith("node_chunk=4: ") for n in low.notes)
    batch = mixed_batch(spec)
    plain = lower(spec.graph, sp.default(), caps)
    assert_close(run_lowered(low, spec.model.params, batch), run_lowered(plain, spec.model.params, batch),
                 "float32", "prefetch + chunks")
