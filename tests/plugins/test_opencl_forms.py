"""The opencl backend's program transforms, checked on the interpreter (no OpenCL device needed).

``forms`` derives the single-work-group kernel from the per-level host steps, chunks node loops
and maps CPU parallel loops onto work-groups/work-items; each must leave results unchanged.
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.loopir import interpret
from cortex.core.lowering.loop_shapes import chunk_nodes
from cortex.core.loopir.verify import verify
from cortex.plugins.opencl import forms

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))
from test_loopir_examples import child_sum, inputs, random_batch, tree_lstm, tree_rnn  # noqa: E402

BUILDERS = {"tree_rnn": tree_rnn, "child_sum": child_sum, "tree_lstm": tree_lstm}
#: A CPU OpenCL device's capabilities (no device needed for these transforms).
BACKEND_CAPS = __import__("cortex.core.plugin.capabilities", fromlist=["Capabilities"]).Capabilities(
    has_grid=False, group_barrier=True, max_threads_per_group=4096, num_cores=2, vector_bits=512,
    vector_registers=32, dialect="opencl", single_call=False, single_group_form=True)


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
    chunked, _ = chunk_nodes(program, chunk)  # the schedule's node_chunk
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


def test_hidden_nests_in_a_row_stay_serial_in_their_work_item():
    """parallel='both' and fuse=False: a node's hidden nests one after the other, the later
    reading what the earlier wrote at every unit, would need a group barrier between them as
    work-item loops: they run serially in the group's work-item instead."""
    from cortex.core.lowering.lower import lower
    from cortex.core.lowering.schedule import ScheduleSpace
    from cortex.testing import zoo

    caps = replace(BACKEND_CAPS, num_cores=2)
    sp = ScheduleSpace(caps, "float32")
    graph = zoo.get("TreeLSTM").model().trace()
    low = lower(graph, sp.with_knobs(parallel="both", fuse=False, interchange=False, node_jam=1, node_chunk=1), caps)
    mapped = forms.to_work_groups(low.program)
    level = next(k for k in mapped.kernels if k.name == "level")
    group = next(n for n in ir.walk(level.body) if isinstance(n, ir.For) and n.kind == "gpu_group")
    assert not any(isinstance(n, ir.For) and n.kind in ("gpu_thread", "parallel") for n in ir.walk(group.body))
    assert not any(isinstance(n, ir.Barrier) for n in ir.walk(group.body))
    verify(mapped)


def test_interchanged_hidden_nests_run_as_one_kernel_each():
    """An interchanged level with two hidden nests is two parallel loops in a row: on OpenCL,
    where only a launch separates work-groups, each becomes a kernel of its own, launched in
    turn, and the single-group kernel inlines them with a barrier between."""
    program, bufs, sizes = _case("tree_rnn", seed=2)
    from cortex.core.lowering.level_interchange import interchange_levels

    two = ir.transform(program, lambda n: replace(n, body=ir.seq(n.body, ir.For(
        "j2", 0, 4, ir.Store("h", (ir.Var("v"), ir.Var("j2")), ir.Load("h", (ir.Var("v"), ir.Var("j2")))),
        "parallel"))) if isinstance(n, ir.Let) and n.var == "c1" else None)
    swapped, n = interchange_levels(two)
    assert n == 1
    phased = forms.split_phases(swapped)
    names = [k.name for k in phased.kernels]
    assert "level" in names and "level_phase1" in names
    launches = [s.kernel for st in phased.host if isinstance(st, ir.HostFor) for s in st.body]
    assert launches == ["level", "level_phase1"]
    single = verify(_single_program(forms.to_work_groups(phased)))
    want = interpret.run(program, dict(bufs), sizes)["h"]
    np.testing.assert_allclose(interpret.run(single, dict(bufs), sizes)["h"], want, rtol=1e-12, atol=1e-12)


def test_unfused_fma_is_a_multiply_add():
    a, b, acc = ir.Var("a", "float64"), ir.Var("b", "float64"), ir.Load("out", (0,))
    body = ir.Let("a", ir.fconst(1.5, "float64"), ir.Let("b", ir.fconst(-2.0, "float64"),
                                                      ir.Store("out", (0,), ir.call("fma", a, b, acc))))
    p = ir.Program("p", (), (ir.Buffer("out", "float64", (1,), "output"),), (ir.Kernel("k", (), body),),
                   (ir.Launch("k"),))
    q = forms.unfused_fma(p)
    assert not any(isinstance(n, ir.Call) for n in ir.walk(q))
    out = interpret.run(q, {"out": np.array([4.0])}, {})["out"]
    assert out[0] == 1.0


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_single_group_kernel_alternates_the_group_order_from_level_to_level(name):
    program, bufs, sizes = _case(name, seed=4)
    mapped = forms.to_work_groups(chunk_nodes(_serial_hidden(program), 2)[0])
    single = verify(_single_program(mapped))
    level_loop = next(n for n in ir.walk(single.kernels[0].body) if isinstance(n, ir.For) and n.var == "lh")
    groups = [n for n in ir.walk(level_loop.body) if isinstance(n, ir.For) and n.kind == "gpu_group"]
    assert groups and all(isinstance(g.body, ir.Let) and isinstance(g.body.value, ir.Select) for g in groups)
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(single, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,lanes", [("float32", 16), ("float64", 8)])
def test_renderer_writes_a_jammed_block_as_vector_statements(dtype, lanes):
    from cortex.core.lowering.jam import JamOptions, jam_levels
    from cortex.core.lowering.level_interchange import interchange_levels
    from cortex.core.lowering.loop_shapes import block_hidden_loops
    from cortex.core.lowering.transforms import change_layout
    from cortex.plugins.opencl.compiler import OpenCLRenderer

    program = _serial_hidden(change_layout(tree_lstm(form="per_level", dtype=dtype, H=32), "U", "packed", lanes))
    jammed, _ = jam_levels(interchange_levels(block_hidden_loops(program, lanes)[0])[0],
                           JamOptions(nodes=4, register_lanes=lanes))
    source = OpenCLRenderer().render(jammed)
    t = "float" if dtype == "float32" else "double"
    assert f"typedef {t} cx_v{t}{lanes} __attribute__((ext_vector_type({lanes}), aligned(" in source
    assert f"const cx_v{t}{lanes} w" in source  # a weight vector loaded once a step
    assert "vload" not in source and "vstore" not in source  # PoCL does not inline those
    assert forms.SINGLE_KERNEL in {k.name for k in source.program.kernels}  # still verifies


def test_a_jammed_loop_reads_each_child_row_through_its_row_pointer():
    """A buffer element is written as its row's pointer indexed by the last index: a jammed
    node's child row is loop-invariant in the fused loop, so each step's loads are base +
    index (the sum of offsets let the driver pack the group's row + k additions into one
    vector add and extract every address from it)."""
    from cortex.core.lowering.jam import JamOptions, jam_levels
    from cortex.core.lowering.level_interchange import interchange_levels
    from cortex.core.lowering.loop_shapes import block_hidden_loops
    from cortex.core.lowering.transforms import change_layout
    from cortex.plugins.opencl.compiler import OpenCLRenderer

    program = _serial_hidden(change_layout(tree_lstm(form="per_level", dtype="float32", H=32), "U", "packed", 16))
    jammed, _ = jam_levels(interchange_levels(block_hidden_loops(program, 16)[0])[0], JamOptions(nodes=4))
    source = OpenCLRenderer().render(jammed)
    steps = [line for line in source.splitlines() if "(&acc" in line and " * " in line and "h + (" in line]
    assert steps and all(re.search(r"\(h \+ \(\w+\) \* \(32\)\)\[\w+\]", x) for x in steps)  # (h + (ch) * (32))[k]
    assert not any(re.search(r"\bh\[", x) for x in source.splitlines() if "(&acc" in x)


def test_a_row_jams_64_lane_loop_without_a_sum_is_one_vector_statement():
    """A 64-lane ``vectorized`` loop of multiply-adds (a row jam's fused loop over a 64-wide
    matrix row) is written as 64-lane vector statements, not a scalar loop over a private
    array; with ``fma`` (no fast math: OpenCL's built-in takes at most 16 lanes) it stays a
    loop."""
    from cortex.plugins.opencl.compiler import OpenCLRenderer

    j, k = ir.Var("j", ir.INT), ir.Var("k", ir.INT)
    acc = ir.Load("acc", (j,))
    step = ir.For("j", 0, 64, ir.Store("acc", (j,), ir.call("fma", ir.Load("W", (ir.Const(0), k)),
                                                           ir.Load("M", (k, j)), acc)), "vectorized")
    out = ir.For("j", 0, 64, ir.Store("out", (j,), ir.Load("acc", (j,))), "vectorized")
    zero = ir.For("j", 0, 64, ir.Store("acc", (j,), ir.fconst(0.0, "float32")), "vectorized")
    body = ir.Alloc("acc", "float32", (64,), "private", ir.seq(zero, ir.For("k", 0, 8, step, "serial"), out))
    program = ir.Program("p", (), (ir.Buffer("W", "float32", (1, 8), "param"),
                                   ir.Buffer("M", "float32", (8, 64), "input"),
                                   ir.Buffer("out", "float32", (64,), "output")),
                         (ir.Kernel("k", (), body),), (ir.Launch("k"),))
    fast = OpenCLRenderer().render(program)
    assert "(*(cx_vfloat64*)(&acc[0])) = ((*(cx_vfloat64*)(&acc[0])) + (" in fast
    assert "for (int j = " not in fast
    exact = OpenCLRenderer(fast_math=False).render(program)
    assert "for (int j = " in exact and "fma(" in exact


def test_renderer_translates_an_unjammed_program_as_scalar_code():
    from cortex.plugins.opencl.compiler import OpenCLRenderer

    program = _serial_hidden(tree_lstm(form="per_level", dtype="float32", H=32))
    source = OpenCLRenderer().render(program)  # what a GPU device gets: no jam in its schedule
    assert "ext_vector_type" not in source and "min_vector_width" not in source


def test_renderer_writes_a_sum_per_lane_as_a_vector_accumulator_loop():
    """A ``vectorized`` loop whose lanes each run a guarded GEMV row over a packed weight (what
    the jam leaves per node: child-sum's per-child gates) becomes a vector accumulator loop, the
    guard a conditional on the lane-free child index, the sigmoid the vector built-in; a loop
    without a sum keeps the narrow form (no vector call)."""
    from cortex.plugins.opencl.compiler import OpenCLRenderer

    c, j, k = ir.Var("c", ir.INT), ir.Var("j", ir.INT), ir.Var("k", ir.INT)
    row = ir.Reduce("sum", "k", ir.Const(0), ir.Const(8), ir.BinOp(
        "*", ir.Load("W", (j // 4, k, j % 4)), ir.Select(ir.Cmp(">=", c, ir.Const(0)), ir.Load("h", (c, k)),
                                                        ir.fconst(0.0, "float32"))))
    lane = ir.Let("j", ir.Var("jb") * 4 + ir.Var("jl"),
                  ir.Store("out", (ir.Const(0), j), ir.call("sigmoid", row)))
    body = ir.Let("c", ir.Load("child", (ir.Const(0),)),
                  ir.For("jb", 0, 2, ir.For("jl", 0, 4, lane, "vectorized"), "serial"))
    program = ir.Program("p", (), (ir.Buffer("child", ir.INT, (1,), "index"),
                                   ir.Buffer("W", "float32", (2, 8, 4), "param"),
                                   ir.Buffer("h", "float32", (1, 8), "input"),
                                   ir.Buffer("out", "float32", (1, 8), "output")),
                         (ir.Kernel("k", (), body),), (ir.Launch("k"),))
    source = OpenCLRenderer().render(program)
    assert "cx_vfloat4 cx_vacc" in source and "for (int k = " in source
    # the guard (hoisted out of the sum by the fast-math rewrites) keeps the sum's loop under it:
    # a missing child's row is never read
    assert source.index("if ((c >= 0)) {") < source.index("for (int k = ")
    assert "(*(__global const cx_vfloat4*)(&W[" in source  # one block of the packed weight
    assert "exp(-" in source and "cx_sigmoid_float32(" not in source
    narrow = ir.Let("j", ir.Var("jb") * 4 + ir.Var("jl"),
                    ir.Store("out", (ir.Const(0), j), ir.call("sigmoid", ir.Load("h", (ir.Const(0), j)))))
    plain = ir.Program("p", (), program.buffers[2:], (ir.Kernel("k", (), ir.For(
        "jb", 0, 2, ir.For("jl", 0, 4, narrow, "vectorized"), "serial")),), (ir.Launch("k"),))
    assert "cx_sigmoid_float32(" in OpenCLRenderer().render(plain)


def test_a_merged_column_loop_is_one_wide_vector_with_one_accumulator_loop():
    """A matrix nest's column loop merged by ``wide_lanes`` (64 lanes, no built-in calls) is
    written as a 64-lane clang vector: one accumulator loop whose weight broadcast feeds every
    lane."""
    from cortex.plugins.opencl.compiler import OpenCLRenderer

    i, j, k = ir.Var("i", ir.INT), ir.Var("j", ir.INT), ir.Var("k", ir.INT)
    dot = ir.Reduce("sum", "k", ir.Const(0), ir.Const(8),
                    ir.BinOp("*", ir.Load("W", (i, k)), ir.Load("M", (k, j))))
    body = ir.For("i", 0, 4, ir.For("j", 0, 64, ir.Store("out", (i, j), dot), "vectorized"), "serial")
    program = ir.Program("p", (), (ir.Buffer("W", "float32", (4, 8), "param"),
                                   ir.Buffer("M", "float32", (8, 64), "input"),
                                   ir.Buffer("out", "float32", (4, 64), "output")),
                         (ir.Kernel("k", (), body),), (ir.Launch("k"),))
    source = OpenCLRenderer().render(program)
    assert "typedef float cx_vfloat64 __attribute__((ext_vector_type(64), aligned(" in source
    assert source.count("cx_vfloat64 cx_vacc") == 2  # the kernel and its one-work-group copy
    assert "for (int j = " not in source


def _concat_of_guarded_products() -> ir.Program:
    """MV-RNN's shape: ``t[j] = select(j < 4, a, b)`` with ``a`` and ``b`` lets holding a sum of
    a guarded child matrix row times the other child's guarded state."""
    f32, zero = "float32", ir.fconst(0.0, "float32")
    j, c0, c1 = ir.Var("j"), ir.Var("c0"), ir.Var("c1")

    def product(ca: ir.Expr, cb: ir.Expr, row: ir.Expr, var: str) -> ir.Reduce:
        kk = ir.Var(var)
        return ir.Reduce("sum", var, ir.as_expr(0), ir.as_expr(4), ir.BinOp(
            "*", ir.Select(ir.Cmp(">=", ca, ir.as_expr(0)), ir.Load("M", (ca, row, kk)), zero),
            ir.Select(ir.Cmp(">=", cb, ir.as_expr(0)), ir.Load("h", (cb, kk)), zero)))

    store = ir.Store("t", (j,), ir.Select(ir.Cmp("<", j, ir.as_expr(4)), ir.Var("a"), ir.Var("b")))
    body = ir.Let("c0", ir.Load("ch", (ir.as_expr(0),)), ir.Let("c1", ir.Load("ch", (ir.as_expr(1),)), ir.For("j", 0, 8, ir.Let(
        "b", product(c0, c1, ir.maximum(ir.minimum(j - 4, 3), 0), "k"),
        ir.Let("a", product(c1, c0, ir.maximum(ir.minimum(j, 3), 0), "k2"), store)))))
    buffers = (ir.Buffer("ch", "int32", (2,), "index", value_range=(ir.as_expr(-1), ir.as_expr(1))), ir.Buffer("M", f32, (2, 4, 4), "input"),
               ir.Buffer("h", f32, (2, 4), "input"), ir.Buffer("t", f32, (8,), "output"))
    return ir.Program("concat", (), buffers, (ir.Kernel("k0", (), body),), (ir.Launch("k0"),))


@pytest.mark.parametrize("children", [(0, 1), (-1, 1), (0, -1)])
def test_a_concatenation_computes_each_half_only_for_its_rows(children):
    program = _concat_of_guarded_products()
    shaped = forms.hoist_guards(forms.sink_into_selects(program))
    lets = {n.var for n in ir.walk(shaped) if isinstance(n, ir.Let)}
    assert lets == {"c0", "c1"}  # both halves moved into the select's branches
    store = next(n for n in ir.walk(shaped) if isinstance(n, ir.Store))
    assert isinstance(store.value, ir.Select)
    for half in (store.value.a, store.value.b):  # each half: two guards around a plain dot product
        assert isinstance(half, ir.Select) and isinstance(half.a, ir.Select)
        assert isinstance(half.a.a, ir.Reduce) and not any(
            isinstance(n, ir.Select) for n in ir.walk(half.a.a))
    verify(shaped)
    rng = np.random.default_rng(3)
    bufs = {"ch": np.array(children, np.int32), "M": rng.standard_normal((2, 4, 4)).astype(np.float32),
            "h": rng.standard_normal((2, 4)).astype(np.float32)}
    want = interpret.run(program, bufs, {})["t"]
    np.testing.assert_allclose(interpret.run(shaped, bufs, {})["t"], want, rtol=1e-6, atol=1e-6)


def test_sink_into_selects_keeps_a_let_used_outside_a_branch():
    program = _concat_of_guarded_products()
    k = program.kernels[0]
    store = next(n for n in ir.walk(k.body) if isinstance(n, ir.Store))
    twice = ir.transform(k.body, lambda n: replace(n, value=ir.BinOp("+", n.value, ir.Var("a")))
                         if n is store else None)
    kept = replace(program, kernels=(replace(k, body=twice),))
    assert {n.var for n in ir.walk(forms.sink_into_selects(kept)) if isinstance(n, ir.Let)} == {"c0", "c1", "a"}
    # used once but inside a sum: inlined, it would be computed once per term
    per_term = ir.Select(ir.Cmp("<", ir.Var("j"), ir.as_expr(4)), ir.Reduce(
        "sum", "q", ir.as_expr(0), ir.as_expr(4), ir.BinOp("*", ir.Var("a"), ir.Load("h", (ir.as_expr(0), ir.Var("q"))))),
        ir.Var("b"))
    inner = ir.transform(k.body, lambda n: replace(n, value=per_term) if n is store else None)
    kept = replace(program, kernels=(replace(k, body=inner),))
    assert {n.var for n in ir.walk(forms.sink_into_selects(kept)) if isinstance(n, ir.Let)} == {"c0", "c1", "a"}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_tree_group_kernel_on_the_grouped_layout_matches_the_levels(name):
    """The tree-group kernel after the leaf launches, on the interpreter (its work-groups one
    after another), over the grouped layout, gives every node the per-level program's state."""
    from cortex.core.linearize.groups import group_trees

    program, bufs, sizes = _case(name, seed=3)
    layout = group_trees(bufs["level_offsets"], bufs["child_offsets"], bufs["child_ids"], 2, min_internal=1)
    assert layout is not None and layout.groups == 2
    check = verify(forms.grouped_check_program(program))
    leaves = forms.leaf_steps(program)
    assert leaves == 1
    both = replace(check, kernels=program.kernels + check.kernels, host=program.host[:leaves] + check.host)
    grouped = dict(bufs, level_offsets=layout.level_table.reshape(2, -1), child_offsets=layout.child_offsets,
                   child_ids=layout.child_ids, child_table=layout.child_table(bufs["child_table"]),
                   word_ids=layout.node_array(bufs["word_ids"]))
    got = interpret.run(both, grouped, dict(sizes, cx_groups=2))["h"][layout.rows]
    np.testing.assert_allclose(got, interpret.run(program, bufs, sizes)["h"], rtol=1e-12, atol=1e-12)


def test_tree_group_kernel_reads_the_level_table_by_group_and_walks_levels_serially():
    program, _, _ = _case("tree_lstm")
    k = forms.grouped_kernel(program)
    assert k.params == (forms.GROUPS_PARAM,)
    assert isinstance(k.body, ir.For) and k.body.kind == "gpu_group" and k.body.stop == ir.Var(forms.GROUPS_PARAM)
    inner = [n for n in ir.walk(k.body.body) if isinstance(n, ir.For)]
    assert inner and not any(n.kind == "gpu_group" for n in inner)
    loads = [n for n in ir.walk(k.body) if isinstance(n, ir.Load) and n.buffer == "level_offsets"]
    assert loads and all("cx_g" in str(n.index[0]) for n in loads)
    assert not any(isinstance(n, ir.Barrier) and n.scope == "grid" for n in ir.walk(k.body))


def test_tree_group_kernel_is_refused_for_programs_it_cannot_regroup():
    program, _, _ = _case("tree_lstm")
    no_leaves = replace(program, host=program.host[1:])
    with pytest.raises(ValueError, match="leaves launch"):
        forms.grouped_kernel(no_leaves)
    extra = replace(program, buffers=program.buffers + (ir.Buffer("unit_nodes", "int32", (ir.Var("N"),), "index"),))
    with pytest.raises(ValueError, match="unit_nodes"):
        forms.grouped_kernel(extra)


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_split_accumulators_gives_small_groups_partial_chains(nodes):
    """A jammed group of few nodes has few FMA chains per fused loop: each gets partial
    accumulators (chains x parts up to ``CHAINS``), summed after the loop; the results are the
    jam's up to the reassociation, and the program still verifies."""
    from cortex.core.lowering.jam import JamOptions, jam_levels
    from cortex.core.lowering.level_interchange import interchange_levels
    from cortex.core.lowering.loop_shapes import block_hidden_loops
    from cortex.core.lowering.transforms import change_layout
    from cortex.plugins.opencl.accumulators import CHAINS, split_accumulators

    rng = np.random.default_rng(7)
    program = _serial_hidden(change_layout(tree_rnn(form="per_level", dtype="float64", H=8), "W", "packed", 4))
    jammed, _ = jam_levels(interchange_levels(block_hidden_loops(program, 4)[0])[0],
                           JamOptions(nodes=nodes, register_lanes=4))
    split = verify(split_accumulators(jammed))

    def fused(p: ir.Program) -> list[ir.For]:
        return [n for n in ir.walk(p.kernels[-1].body) if isinstance(n, ir.For) and n.kind == "serial"
                and isinstance(n.body, ir.For) and n.body.kind == "vectorized"
                and any(isinstance(s, ir.Store) and isinstance(s.value, ir.Call) for s in ir.walk(n.body))]

    before, after = fused(jammed), fused(split)
    assert before and len(after) == len(before)
    for old, new in zip(before, after):
        chains = sum(isinstance(s, ir.Store) for s in ir.walk(old.body))
        parts = sum(isinstance(s, ir.Store) for s in ir.walk(new.body)) // chains
        assert parts >= 1 and chains * parts <= CHAINS and (parts > 1 or chains * 2 > CHAINS)
        assert ir.const_int(new.stop) * parts == ir.const_int(old.stop) - ir.const_int(old.start)
    batch = random_batch(rng, n_trees=3, max_leaves=6, arity=2)
    bufs, sizes = inputs(batch, program, rng)
    want = interpret.run(jammed, dict(bufs), sizes)["h"]
    np.testing.assert_allclose(interpret.run(split, dict(bufs), sizes)["h"], want, rtol=1e-12, atol=1e-12)
