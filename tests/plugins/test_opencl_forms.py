"""The opencl backend's program transforms, checked on the interpreter (no OpenCL device needed).

``forms`` derives the single-work-group kernel from the per-level host steps, chunks node loops
and maps CPU parallel loops onto work-groups/work-items; each must leave results unchanged.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.loopir import interpret
from cortex.core.loopir.verify import verify
from cortex.plugins.opencl import forms

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))
from test_loopir_examples import child_sum, inputs, random_batch, tree_lstm, tree_rnn  # noqa: E402

BUILDERS = {"tree_rnn": tree_rnn, "child_sum": child_sum, "tree_lstm": tree_lstm}


def _case(name: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    program = BUILDERS[name](form="per_level", dtype="float64", H=4)
    batch = random_batch(rng, n_trees=3, max_leaves=5, arity=None if name == "child_sum" else 2)
    bufs, sizes = inputs(batch, program, rng)
    return program, bufs, sizes


def _single_program(program: ir.Program) -> ir.Program:
    k = forms.single_group_kernel(program)
    return ir.Program(program.name, program.sizes, program.buffers, (k,), (ir.Launch(k.name),))


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_single_group_kernel_inlines_every_launch_with_group_barriers(name):
    program, bufs, sizes = _case(name)
    single = verify(_single_program(program))
    body = single.kernels[0].body
    assert not any(isinstance(n, ir.Barrier) and n.scope == "grid" for n in ir.walk(body))
    assert any(isinstance(n, ir.Barrier) and n.scope == "group" for n in ir.walk(body))
    levels = [n for n in ir.walk(body) if isinstance(n, ir.For) and n.var == "lh"]
    assert len(levels) == 1 and levels[0].kind == "serial"  # the host loop moved inside
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(single, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


def test_single_group_kernel_turns_grid_barriers_into_group_barriers():
    program = tree_rnn(form="single", dtype="float64")  # level loop inside, grid barriers
    assert forms.needs_single_group(program)
    single = _single_program(program)
    scopes = {n.scope for n in ir.walk(single.kernels[0].body) if isinstance(n, ir.Barrier)}
    assert scopes == {"group"}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("chunk", [3])
def test_chunked_and_work_group_programs_compute_the_same(name, chunk):
    program, bufs, sizes = _case(name, seed=chunk)
    program = _serial_hidden(program)  # what the CPU schedule gives (parallel="nodes")
    chunked = forms.chunk_nodes(program, chunk)
    assert chunked != program
    mapped = forms.to_work_groups(chunked)
    kinds = {n.kind for n in ir.walk(mapped) if isinstance(n, ir.For)}
    assert "parallel" not in kinds and "gpu_group" in kinds
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(mapped, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


def _serial_hidden(program: ir.Program) -> ir.Program:
    def f(n: ir.Node) -> ir.Node | None:
        hidden = isinstance(n, ir.For) and n.var in ("j", "jl") and n.kind == "parallel"
        return replace(n, kind="serial") if hidden else None

    return ir.transform(program, f)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_node_chunks_times_hidden_tiles_compute_the_same(name):
    program, bufs, sizes = _case(name, seed=4)  # hidden loops parallel: chunks x tiles
    tiled = forms.to_work_groups(forms.chunk_nodes(program, 3, tiles=3))
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(tiled, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


def test_chunk_nodes_reuses_each_hidden_unit_across_a_chunk_of_nodes():
    program = tree_rnn(form="per_level", dtype="float32")
    tiled = forms.chunk_nodes(program, 4, tiles=2).kernel("level").body  # j parallel: 2 tiles
    assert isinstance(tiled, ir.For) and isinstance(tiled.stop, ir.BinOp) and tiled.stop.op == "*"
    assert forms.chunk_nodes(program, 4, tiles=1).kernel("level").body.stop.op == "//"
    level = forms.chunk_nodes(_serial_hidden(program), 4).kernel("level").body
    assert isinstance(level, ir.For) and level.kind == "parallel" and level.var.startswith("cx_chunk")
    j = level.body
    assert isinstance(j, ir.For) and j.var == "j" and j.kind == "serial"
    assert isinstance(j.body, ir.For) and j.body.var == "v" and j.body.kind == "serial"


def test_to_work_groups_maps_outer_parallel_loops_to_groups_then_items():
    program = tree_rnn(form="per_level", dtype="float32")  # v parallel > j parallel
    level = forms.to_work_groups(program).kernel("level").body
    loops = [n for n in ir.walk(level) if isinstance(n, ir.For)]
    assert [(x.var, x.kind) for x in loops] == [("v", "gpu_group"), ("j", "gpu_thread")]


def test_host_evaluation_sizes_launches_from_the_index_arrays():
    program = forms.to_work_groups(tree_rnn(form="per_level", dtype="float32"))
    level = program.kernel("level")
    offsets = np.array([0, 5, 8, 9], np.int32)
    assert forms.plan_groups(level, {"l": 1}, {"level_offsets": offsets}, cap=100) == 3
    assert forms.plan_groups(level, {"l": 1}, {"level_offsets": offsets}, cap=2) == 2
    assert forms.plan_groups(level, {}, {"level_offsets": offsets}, cap=7) == 7  # unknown -> cap
    assert forms.thread_extent(level) == 8
    assert forms.evaluate(ir.Var("a") * 3 // 2, {"a": 5}, {}) == 7


@pytest.mark.parametrize("name", ["tree_lstm", "child_sum"])
def test_split_reductions_sums_contiguous_blocks_per_step(name):
    program, bufs, sizes = _case(name)
    split = forms.split_reductions(program, ways=2, min_trip=4)
    reduces = [n for n in ir.walk(split) if isinstance(n, ir.Reduce)]
    gemv = [r for r in reduces if ir.const_int(r.stop - r.start) == 2]  # H=4 -> two blocks of 2
    assert gemv and all(isinstance(r.body, ir.BinOp) and r.body.op == "+" for r in gemv)
    assert forms.split_reductions(program, ways=3, min_trip=4) == program  # 3 does not divide 4
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(split, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_hoist_guards_tests_a_child_guard_once_per_sum(name):
    program, bufs, sizes = _case(name, seed=5)
    hoisted = forms.hoist_guards(program)

    def guarded_sums(p: ir.Program) -> int:  # sums of w * select(guard, x, 0)
        return sum(1 for r in ir.walk(p) if isinstance(r, ir.Reduce) and isinstance(r.body, ir.BinOp)
                   and r.body.op == "*" and isinstance(r.body.b, ir.Select))

    if name == "tree_lstm":
        assert guarded_sums(program) and not guarded_sums(hoisted)
        assert any(isinstance(n, ir.Select) and isinstance(n.a, ir.Reduce) for n in ir.walk(hoisted))
    verify(hoisted)
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(hoisted, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


def test_hoist_guards_keeps_guards_that_depend_on_the_sum_variable():
    k = ir.Var("k")
    body = ir.BinOp("*", ir.Load("w", (k,)),
                    ir.Select(ir.Cmp(">=", ir.Load("idx", (k,)), 0), ir.Load("x", (k,)), ir.fconst(0.0, "float32")))
    s = ir.Reduce("sum", "k", 0, 8, body)
    prog = ir.Program("p", (), (), (ir.Kernel("k0", (), ir.Store("o", (0,), s)),), ())
    assert forms.hoist_guards(prog) == prog


@pytest.mark.parametrize("name", ["tree_lstm"])
def test_tanh_via_sigmoid_computes_the_same(name):
    program, bufs, sizes = _case(name, seed=6)
    assert any(isinstance(n, ir.Call) and n.fn == "tanh" for n in ir.walk(program))
    rewritten = forms.tanh_via_sigmoid(program)
    assert not any(isinstance(n, ir.Call) and n.fn == "tanh" for n in ir.walk(rewritten))
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(rewritten, bufs, sizes)["h"], want, rtol=0, atol=1e-12)


def test_chunk_nodes_keeps_whole_nodes_in_a_chunk_when_there_is_no_sum():
    program = _serial_hidden(child_sum(form="per_level", dtype="float32"))  # leaves: no sum
    leaves = program.kernel("leaves").body
    assert not any(isinstance(n, ir.Reduce) for n in ir.walk(leaves))
    chunked = forms.chunk_nodes(program, 4).kernel("leaves").body
    assert isinstance(chunked, ir.For) and chunked.kind == "parallel" and chunked.var.startswith("cx_chunk")
    node = chunked.body  # the node loop, then the node's own body unchanged (hidden loop inside)
    assert isinstance(node, ir.For) and node.var == leaves.var and node.body == leaves.body


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_single_group_kernel_alternates_the_group_order_from_level_to_level(name):
    program, bufs, sizes = _case(name, seed=4)
    mapped = forms.to_work_groups(forms.chunk_nodes(_serial_hidden(program), 2))
    single = verify(_single_program(mapped))
    level_loop = next(n for n in ir.walk(single.kernels[0].body) if isinstance(n, ir.For) and n.var == "lh")
    groups = [n for n in ir.walk(level_loop.body) if isinstance(n, ir.For) and n.kind == "gpu_group"]
    assert groups and all(isinstance(g.body, ir.Let) and isinstance(g.body.value, ir.Select) for g in groups)
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(single, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,lanes", [("float32", 16), ("float64", 8)])
def test_renderer_jams_level_kernels_into_vector_statements(dtype, lanes):
    from cortex.plugins.opencl.compiler import OpenCLRenderer

    program = _serial_hidden(tree_lstm(form="per_level", dtype=dtype, H=32))
    source = OpenCLRenderer().render(program)
    t = "float" if dtype == "float32" else "double"
    assert f"typedef {t} cx_v{t}{lanes} __attribute__((ext_vector_type({lanes}), aligned(" in source
    assert "vload" not in source and "vstore" not in source  # PoCL does not inline those
    assert "U" in source.relayout and set(source.relayout.values()) == {("packed", lanes)}
    assert forms.SINGLE_KERNEL in {k.name for k in source.program.kernels}  # still verifies


def test_renderer_without_jam_keeps_row_major_weights_and_scalar_code():
    from cortex.plugins.opencl.compiler import OpenCLRenderer

    program = _serial_hidden(tree_lstm(form="per_level", dtype="float32", H=32))
    source = OpenCLRenderer(jam=False).render(program)  # what a GPU device gets
    assert source.relayout == {} and "ext_vector_type" not in source
