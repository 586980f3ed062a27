"""The ``llvm`` target: LoopProgram -> LLVM IR -> JIT, against the interpreter and the reference.

* hand-built programs (tests/core/test_loopir_examples.py) in both host forms, float32/float64,
  threads 1 and 2, scheduled variants (split, vectorized, packed, unrolled), against
  ``cortex.core.loopir.interpret.run`` — the semantic contract of every backend;
* every zoo model through ``cortex.compile(..., target="llvm")`` against the float64 reference
  (float64 within 1e-10, float32 within 1e-4 of the state's magnitude), threads 1 vs 2 agree;
* vectorized code for a pinned CPU (``cpu="skylake-avx512"``: ``<16 x float>`` in the optimized
  IR and zmm registers in the assembly), run where the host has AVX-512 and refused where it
  has not (never a SIGILL);
* errors: bad index data, missing buffers, unsupported constructs named.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite (pip install 'cortex-compiler[llvm]')")

ROOT = pathlib.Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "models"))
sys.path.insert(0, str(ROOT.parent))  # benchmarks.common: parse-like trees
from test_loopir_examples import child_sum, scheduled_case, tree_lstm, tree_rnn  # noqa: E402

import cortex  # noqa: E402
import cortex.models  # noqa: E402,F401
from cortex.core.lowering import transforms as T  # noqa: E402
from cortex.core import loopir as ir  # noqa: E402
from cortex.core.loopir.interpret import run  # noqa: E402
from cortex.core.frontend.reference import evaluate  # noqa: E402
from cortex.core.frontend.trace import trace  # noqa: E402
from cortex.plugins.cpu_llvm import codegen  # noqa: E402
from cortex.plugins.cpu_llvm.jit import host_runs, why_not_runnable  # noqa: E402
from cortex.plugins.cpu_llvm.runtime import CompiledProgram, LLVMRuntimeError  # noqa: E402
from cortex.core.errors import TargetNotRunnableError  # noqa: E402

#: Whether this host runs code for the pinned CPU of the tests below (an AVX-512 CPU).
AVX512_RUNS = host_runs("skylake-avx512")[0]


def _outputs_close(program: ir.Program, got: dict, want: dict, dtype: str) -> None:
    tol = 1e-12 if dtype == "float64" else 1e-5
    for b in program.buffers:
        if b.role == "output":
            np.testing.assert_allclose(got[b.name], want[b.name], rtol=tol, atol=tol, err_msg=b.name)


def _case(program: ir.Program, seed: int = 0, arity=2):
    return scheduled_case(program, seed, arity)[:2]


# ------------------------------------------------------------------ hand-built programs

PROGRAMS = {
    "tree_rnn": (tree_rnn, 2),
    "child_sum": (child_sum, None),
    "tree_lstm": (tree_lstm, 2),
}


@pytest.mark.parametrize("form", ["single", "per_level"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hand_built_programs_match_the_interpreter(name, form):
    build, arity = PROGRAMS[name]
    for dtype, threads in (("float64", 2), ("float32", 1)):
        program = build(dtype=dtype, form=form)
        bufs, sizes = _case(program, arity=arity)
        want = run(program, dict(bufs), sizes)
        got = CompiledProgram(program, threads=threads).run(bufs, sizes)
        _outputs_close(program, got, want, dtype)


def _vectorize_j(program: ir.Program, j: str, width: int) -> ir.Program:
    return T.vectorize(program, j, width)  # j -> (j_o serial, j_v vectorized width lanes)


@pytest.mark.parametrize("variant", ["vectorized", "packed_vectorized", "unrolled_reduce", "tail_fallback"])
def test_scheduled_tree_lstm_matches_the_interpreter(variant):
    """Vector code paths: contiguous vector loads/stores, packed weights (lane-affine index
    analysis through // and %), partial sums, and a split tail that must stay scalar
    (float32 on 2 threads, float64 on 1)."""
    for dtype, threads in (("float32", 2), ("float64", 1)):
        p = tree_lstm(H=16, dtype=dtype)
        if variant == "vectorized":
            p = _vectorize_j(p, "j", 8)
        elif variant == "packed_vectorized":
            p = _vectorize_j(T.change_layout(p, "U", "packed", 8), "j", 8)
        elif variant == "unrolled_reduce":
            p = T.unroll_reduce(_vectorize_j(p, "j", 4), "kl0", 4)
        else:
            p = T.split(p, "j", 6, inner="jt", inner_kind="vectorized")  # 16 = 6+6+4: guarded tail
        bufs, sizes = _case(p)
        want = run(p, dict(bufs), sizes)
        got = CompiledProgram(p, threads=threads).run(bufs, sizes)
        _outputs_close(p, got, want, dtype)


def test_vector_width_decision():
    p = tree_lstm(H=16)
    vec = T.split(p, "j", 8, inner="jv", inner_kind="vectorized")
    loops = {n.var: n for k in vec.kernels for n in ir.walk(k.body) if isinstance(n, ir.For)}
    assert codegen.vector_width(loops["jv"]) == 8
    tail = T.split(p, "j", 6, inner="jt", inner_kind="vectorized")  # a lane-dependent If guards the tail
    tail_loops = {n.var: n for k in tail.kernels for n in ir.walk(k.body) if isinstance(n, ir.For)}
    assert codegen.vector_width(tail_loops["jt"]) == 0


# ------------------------------------------------------------------ vectorized code for a pinned CPU


def test_pinned_skylake_avx512_gets_zmm_code():
    p = _vectorize_j(tree_lstm(H=32, dtype="float32"), "j", 16)
    cp = CompiledProgram(p, threads=1, cpu="skylake-avx512")
    assert "<16 x float>" in cp.optimized_ir
    asm = cp.assembly()
    assert "zmm" in asm and "vfmadd" in asm
    bufs, sizes = _case(p)
    if AVX512_RUNS:
        _outputs_close(p, cp.run(bufs, sizes), run(p, dict(bufs), sizes), "float32")
    else:  # this host lacks AVX-512: the code is there to read, and a call is refused
        with pytest.raises(TargetNotRunnableError, match="avx512f.*cpu='host'"):
            cp.run(bufs, sizes)


def test_code_the_host_cannot_run_is_refused_and_never_started(monkeypatch):
    """A program compiled for a CPU whose instructions this host lacks starts no worker (the
    team's start is code for that CPU too) and refuses every call with the reason; code for a
    CPU it can run (the baseline ``x86-64`` here) runs."""
    from cortex.plugins.cpu_llvm import runtime

    p = _vectorize_j(tree_lstm(H=16, dtype="float32"), "j", 8)
    bufs, sizes = _case(p)
    monkeypatch.setattr(runtime, "host_runs", lambda cpu: (False, "it needs an instruction this host lacks"))
    cp = CompiledProgram(p, threads=2)
    assert not cp.runs_here and "<8 x float>" in cp.optimized_ir  # compiled, to read
    with pytest.raises(TargetNotRunnableError, match="lacks.*cpu='host'"):
        cp.run(bufs, sizes)
    cp.close()
    monkeypatch.undo()
    if host_runs("x86-64")[0]:
        ok = CompiledProgram(p, threads=2, cpu="x86-64")
        _outputs_close(p, ok.run(bufs, sizes), run(p, dict(bufs), sizes), "float32")


def test_which_hosts_run_code_for_a_named_cpu():
    v3 = frozenset({"cx16", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3", "avx", "avx2", "bmi", "bmi2",
                    "f16c", "fma", "lzcnt", "movbe"})
    v4 = v3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
    assert why_not_runnable("host", "znver3", v3) == ""
    assert why_not_runnable("haswell", "znver3", v3) == ""
    assert why_not_runnable("skylake-avx512", "skylake-avx512", frozenset()) == ""  # its own name
    assert why_not_runnable("skylake-avx512", "cascadelake", v4) == ""
    assert "avx512f" in why_not_runnable("skylake-avx512", "znver3", v3)
    assert "amx-tile" in why_not_runnable("sapphirerapids", "skylake-avx512", v4)
    assert "not known here" in why_not_runnable("some-future-cpu", "znver3", v3)


def test_zoo_tree_lstm_default_schedule_is_vectorized_for_a_pinned_cpu():
    model = cortex.models.TreeLSTM(hidden=32, embed=16, vocab=20, dtype="float32", seed=0)
    exe = cortex.compile(model, target="llvm", cpu="skylake-avx512", threads=1)
    assert exe.schedule.vector_width == 16
    assert "<16 x float>" in exe.artifact.optimized_ir
    assert "zmm" in exe.artifact.assembly()


# ------------------------------------------------------------------ zoo models vs the reference


def _assert_matches(model, out, dtype: str, what: str) -> None:
    want = evaluate(trace(model), model.params, out.batch)
    for state, ref in want.items():
        got = out.nodes(state)
        assert got.dtype == np.dtype(dtype), what
        if dtype == "float64":
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10, err_msg=f"{what} {state}")
        else:
            scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * scale, err_msg=f"{what} {state}")


from zoo_structures import zoo_cases  # noqa: E402
from test_numpy_target import family_batches  # noqa: E402

CASES = {dtype: zoo_cases(dtype) for dtype in ("float32", "float64")}
IDS = [case[0] for case in CASES["float64"]]


@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_every_zoo_model_matches_the_reference(index):
    """float64: every structure family; float32: all families mixed in one batch; the float32
    executable with 2 threads agrees with a 1-thread one."""
    for dtype in ("float64", "float32"):
        label, name, model, batches = CASES[dtype][index]
        families = family_batches(name, model, batches, np.random.default_rng(index))
        exe = cortex.compile(model, target="llvm", dtype=dtype, threads=2)
        for fam, batch in families.items():
            if dtype == "float32" and fam != "mixed":
                continue
            out = exe(batch)
            _assert_matches(model, out, dtype, f"{label} {fam}")
        if dtype == "float32" and name in ("TreeLSTM", "ChildSumTreeLSTM", "DAGRNN", "SeqLSTM"):
            one = cortex.compile(model, target="llvm", dtype=dtype, threads=1)(families["mixed"])
            for state in out.states:
                np.testing.assert_allclose(one.nodes(state), out.nodes(state), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("schedule", [
    {"parallel": "hidden"},
    {"parallel": "both", "kernel_form": "per_level", "unroll": 4},
    {"fuse": False, "weight_layout": "transposed", "vector_width": 8},
    {"leaf_specialization": False, "tile_hidden": 16, "weight_layout": "row_major"},
])
def test_tree_lstm_schedules_match_the_reference(schedule):
    label, name, model, batches = next(c for c in CASES["float32"] if c[1] == "TreeLSTM")
    families = family_batches(name, model, batches, np.random.default_rng(0))
    exe = cortex.compile(model, target="llvm", dtype="float32", schedule=schedule)
    _assert_matches(model, exe(families["mixed"]), "float32", f"{label} {schedule}")


# ------------------------------------------------------------------ errors and the runtime


def test_bad_index_data_is_rejected_before_native_code_runs():
    p = tree_rnn(dtype="float64")
    bufs, sizes = _case(p)
    bufs["child_table"] = bufs["child_table"].copy()
    bufs["child_table"][-1, 0] = sizes["N"] + 5
    with pytest.raises(LLVMRuntimeError, match="child_table .*outside its declared range"):
        CompiledProgram(p, threads=1).run(bufs, sizes)


def test_missing_inputs_and_sizes_are_named():
    p = tree_rnn(dtype="float64")
    bufs, sizes = _case(p)
    cp = CompiledProgram(p, threads=1)
    with pytest.raises(LLVMRuntimeError, match="sizes \\['L'\\]"):
        cp.run(bufs, {k: v for k, v in sizes.items() if k != "L"})
    with pytest.raises(LLVMRuntimeError, match="param buffer 'W'"):
        cp.run({k: v for k, v in bufs.items() if k != "W"}, sizes)


def test_unsupported_construct_is_named():
    prog = ir.Program("bad", (ir.Size("N"),), (ir.Buffer("x", "int32", (ir.Var("N"),), "output"),),
                      (ir.Kernel("k", (), ir.For("i", 0, ir.Var("N"),
                                                 ir.Store("x", (ir.Var("i"),), ir.call("exp", ir.Var("i"))))),),
                      (ir.Launch("k"),))
    with pytest.raises(codegen.CodegenError, match="exp of an int32 value"):
        codegen.generate(prog)


def test_close_stops_the_team_and_later_calls_fail():
    p = tree_rnn(dtype="float64")
    bufs, sizes = _case(p)
    cp = CompiledProgram(p, threads=2)
    cp.run(bufs, sizes)
    cp.close()
    with pytest.raises(RuntimeError, match="closed"):
        cp.run(bufs, sizes)


def test_backend_capabilities_describe_the_host():
    from cortex.plugins.cpu_llvm.backend import capabilities

    caps = capabilities({"threads": 2, "cpu": "skylake-avx512"})
    assert caps.vector_bits == 512 and caps.num_cores == 2 and caps.single_call
    assert not caps.has_grid and caps.supports_fp64 and caps.cache_bytes_per_core > 0


def test_the_jams_follow_the_register_file():
    """Groups of 8 nodes and 4 matrix rows where the CPU has 32 SIMD registers (AVX-512), of 4
    and 2 where it has 16 (AVX2: the larger groups' accumulators do not fit); a pinned CPU
    decides, not the host, so the schedule (and the code) for a named CPU is the same on every
    machine."""
    from cortex.core.lowering.schedule import ScheduleSpace
    from cortex.plugins.cpu_llvm.backend import capabilities, preferred

    wide, narrow = dict(preferred(32, False)), dict(preferred(16, False))
    assert (wide["node_jam"], wide["row_jam"], narrow["node_jam"], narrow["row_jam"]) == (8, 4, 4, 2)
    assert dict(preferred(16, True))["bf16_dot"] == "amx" and narrow["bf16_dot"] == "pairs"
    assert dict(preferred(32, False, True))["bf16_dot"] == "dpbf16"
    assert dict(preferred(32, True, True))["bf16_dot"] == "amx"  # tiles first where both
    for cpu, registers, jam, rows in (("skylake-avx512", 32, 8, 4), ("haswell", 16, 4, 2)):
        caps = capabilities({"threads": 2, "cpu": cpu})
        assert caps.vector_registers == registers
        schedule, rules = ScheduleSpace(caps, "float32").resolve(None)
        assert (schedule.node_jam, schedule.row_jam) == (jam, rows)
        assert "preference" in rules["node_jam"] and "preference" in rules["row_jam"]


# ------------------------------------------------------------------ persistence and jamming


def _jammed(program: ir.Program, width: int = 8, nodes: int = 8) -> ir.Program:
    """What the CPU schedule does to a hand-built program: hidden blocks, interchange, node jam."""
    from cortex.core.lowering.jam import JamOptions, jam_levels
    from cortex.core.lowering.level_interchange import interchange_levels
    from cortex.core.lowering.loop_shapes import block_hidden_loops

    blocked, _ = block_hidden_loops(program, width)
    swapped, _ = interchange_levels(blocked)
    jammed, n = jam_levels(swapped, JamOptions(nodes=nodes, register_lanes=width, unroll=2))
    assert n >= 1
    return jammed


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_levels_run_in_blocks_of_nodes_match_the_interpreter(dtype):
    """``panel_kib``'s transform with a panel of two nodes' rows: every level of more than two
    nodes runs as several blocks, each a parallel loop over the hidden blocks with its barrier,
    jammed in groups of 2 inside; the native code agrees with the interpreter."""
    from cortex.core.lowering.jam import JamOptions, jam_levels
    from cortex.core.lowering.level_blocks import block_levels, gathered_row_bytes
    from cortex.core.lowering.level_interchange import interchange_levels, is_node_loop
    from cortex.core.lowering.loop_shapes import block_hidden_loops

    program = tree_lstm(H=32, dtype=dtype, form="single")
    swapped, _ = interchange_levels(block_hidden_loops(program, 16 if dtype == "float32" else 8)[0])
    row = max(gathered_row_bytes(x, swapped) for x in ir.walk(swapped) if isinstance(x, ir.For) and is_node_loop(x))
    opts = JamOptions(nodes=2, register_lanes=16 if dtype == "float32" else 8)
    blocked, n = block_levels(swapped, 2 * row, opts, chunks=2, where_it_pays=False)
    assert n >= 1
    blocked, _ = jam_levels(blocked, opts)
    bufs, sizes = _case(program, seed=4)
    want = run(program, dict(bufs), sizes)
    got = CompiledProgram(blocked, threads=2).run(bufs, sizes)
    _outputs_close(program, got, want, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_k_blocked_levels_match_the_interpreter(dtype):
    """``k_block``'s transform: blocks of four nodes' rows, jammed in groups of 2, each fused
    reduction over a child's 32 units in K blocks of 8 steps with the partial sums in a panel
    (a stack array); the native code agrees with the interpreter."""
    from cortex.core.lowering.jam import JamOptions
    from cortex.core.lowering.level_blocks import block_levels, gathered_row_bytes
    from cortex.core.lowering.level_interchange import interchange_levels, is_node_loop
    from cortex.core.lowering.loop_shapes import block_hidden_loops

    program = tree_lstm(H=32, dtype=dtype, form="single")
    swapped, _ = interchange_levels(block_hidden_loops(program, 16 if dtype == "float32" else 8)[0])
    row = max(gathered_row_bytes(x, swapped) for x in ir.walk(swapped) if isinstance(x, ir.For) and is_node_loop(x))
    opts = JamOptions(nodes=2, register_lanes=16 if dtype == "float32" else 8, unroll=2)
    blocked, n = block_levels(swapped, 4 * row, opts, chunks=2, where_it_pays=False, k_block=8)
    assert n >= 1 and any(isinstance(x, ir.Alloc) and x.name.startswith("panel") for x in ir.walk(blocked))
    bufs, sizes = _case(program, seed=4)
    want = run(program, dict(bufs), sizes)
    got = CompiledProgram(blocked, threads=2).run(bufs, sizes)
    _outputs_close(program, got, want, dtype)


def test_k_block_through_compile_matches_the_reference():
    """``schedule={"k_block": 64}``: the levels' reductions (a child's 128 units, the leaves'
    128-wide embedding) in two K blocks; the outputs match the reference."""
    import random

    from benchmarks.common import parse_like_tree

    rng = random.Random(2)
    trees = [parse_like_tree(rng, rng.randint(3, 25), 40) for _ in range(12)]
    model = cortex.models.TreeLSTM(hidden=128, embed=128, vocab=40, seed=3)
    exe = cortex.compile(model, target="llvm", schedule={"k_block": 64, "panel_kib": 256})
    assert any(n.startswith("k_block=64: ") and not n.startswith("k_block=64: 0 ") for n in exe.lowered.notes)
    _assert_matches(model, exe(trees), "float32", "k_block=64")


def test_interchanged_and_jammed_levels_match_the_reference():
    """Hidden 32 so the hidden loops vectorize (16 float32 / 8 float64 lanes): the schedule
    interchanges the levels (threads split the weight rows) and jams groups of nodes; the
    generator keeps the accumulators in registers (no alloca for them)."""
    import random

    from benchmarks.common import parse_like_tree

    rng = random.Random(1)
    trees = [parse_like_tree(rng, rng.randint(3, 25), 40) for _ in range(12)]
    for dtype in ("float32", "float64"):
        model = cortex.models.TreeLSTM(hidden=32, embed=8, vocab=40, dtype=dtype, seed=3)
        for threads in ((1, 2) if dtype == "float32" else (2,)):
            exe = cortex.compile(model, target="llvm", threads=threads)
            # the level's three node loops (no leaf child, child 0 or child 1 a leaf: leaf_kids)
            jam = exe.schedule.node_jam  # 8 with AVX-512, 4 with AVX2 (the register file)
            assert jam > 1 and any(n.startswith(f"node_jam={jam}: 3 level loops jammed") for n in exe.lowered.notes)
            assert any(isinstance(n, ir.Alloc) for n in ir.walk(exe.program))
            assert " x float] " not in exe.source and " x double] " not in exe.source  # promoted
            _assert_matches(model, exe(trees), dtype, f"{dtype} threads {threads}")


def test_jammed_groups_with_a_failing_guard_run_node_by_node():
    """Leaves without a token (word id -1) fail the leaf guard; an internal node whose child
    is missing fails its group's guard: that group runs node by node through the cold plain
    body. Both agree with the interpreter."""
    p = T.vectorize(T.vectorize(tree_lstm(H=16, dtype="float32"), "j", 8), "jl", 8)
    jammed = _jammed(p)
    assert any(isinstance(n, ir.For) and "cold" in n.annotations for n in ir.walk(jammed))
    bufs, sizes = _case(p)
    words = bufs["word_ids"].copy()
    words[: sizes["NL"]: 3] = -1
    bufs["word_ids"] = words
    table = bufs["child_table"].copy()
    inner = np.flatnonzero(table[:, 0] >= 0)
    table[inner[::4], 1] = -1
    bufs["child_table"] = table
    want = run(p, dict(bufs), sizes)
    for threads in (1, 2):
        cp = CompiledProgram(jammed, threads=threads)
        assert "llvm.loop.unroll.disable" in cp.ir  # the cold fallback is compact
        _outputs_close(p, cp.run(bufs, sizes), want, "float32")


def test_padded_groups_agree_with_the_interpreter():
    """Levels whose node count is not a multiple of the group size run their last nodes as a
    padded group (the last node repeated): same results as the interpreter."""
    p = T.vectorize(T.vectorize(tree_lstm(H=16, dtype="float32"), "j", 8), "jl", 8)
    cp = CompiledProgram(_jammed(p), threads=2)
    for seed in range(3):
        bufs, sizes = _case(p, seed)
        want = run(p, dict(bufs), sizes)
        _outputs_close(p, cp.run(bufs, sizes), want, "float32")


def test_every_level_size_runs_through_the_jam_stages_like_the_reference():
    """Levels of 1..19 nodes (a batch of k left-deep trees has k nodes on every internal level):
    every mix of the 8/4/2/1 groups and padded groups agrees with the float64 reference (the
    node-by-node fallback: the failing-guard test above)."""
    model = cortex.models.TreeLSTM(hidden=32, embed=8, vocab=40, dtype="float32", seed=5)
    exe = cortex.compile(model, target="llvm", threads=2)
    for k in range(1, 20):
        trees = [(((3 * t % 40, 5), (7 + t) % 40), 11) for t in range(k)]
        _assert_matches(model, exe(trees), "float32", f"{k} nodes per level")


@pytest.mark.parametrize("knobs", [{"node_jam": 4, "jam_pad": False, "jam_unroll": 1},
                                   {"node_jam": 16, "jam_accumulators": 8, "hidden_jam": 32, "weight_block": 32},
                                   {"interchange": False, "node_jam": 1, "wide_lanes": 0, "prefetch": 0},
                                   {"node_chunk": 4, "interchange": False, "node_jam": 1},
                                   {"node_chunk": 2, "hidden_tiles": 4, "parallel": "both", "interchange": False,
                                    "node_jam": 1}],
                         ids=["jam4-nopad", "jam16-32lanes", "no-interchange", "chunks", "chunks-x-tiles"])
def test_schedule_knobs_of_the_jam_match_the_reference(knobs):
    """The knobs on the threads' sequential order (the interpreter runs parallel loops in
    lock-step, which hides a work unit that reads another's results): TreeLSTM, and MV-RNN,
    whose node body has several hidden loops."""
    from benchmarks.common import make_trees

    model = cortex.models.TreeLSTM(hidden=64, embed=8, vocab=40, dtype="float32", seed=7)
    exe = cortex.compile(model, target="llvm", threads=2, schedule=knobs)
    _assert_matches(model, exe(make_trees(2, 9, 2, 30, 40)), "float32", str(knobs))
    mv = cortex.models.MVRNN(hidden=8, vocab=40, dtype="float64", seed=7)
    exe = cortex.compile(mv, target="llvm", threads=1, dtype="float64", schedule=knobs)
    _assert_matches(mv, exe(make_trees(3, 5, 2, 12, 40)), "float64", f"MVRNN {knobs}")


_ROW_MAJOR: dict[str, object] = {}


def _row_major_states(model, trees):
    """The default (row-major) schedule's outputs of ``model`` on ``trees``, compiled once per
    model for every blocked case below."""
    name = type(model).__name__
    if name not in _ROW_MAJOR:
        _ROW_MAJOR[name] = cortex.compile(model, target="llvm", dtype="float64")(trees)
    return _ROW_MAJOR[name]


@pytest.mark.parametrize("knobs", [{"state_block": 8}, {"state_block": 4, "node_jam": 4, "threads": 2},
                                   {"state_block": 16, "node_chunk": 4, "interchange": False, "threads": 2}],
                         ids=["blocks-of-8", "blocks-of-4-jam4", "blocks-of-16-chunks"])
def test_node_blocked_state_matches_the_reference_and_row_major(knobs):
    """``state_layout="node_blocked"``: the states come back row-major [N, H], equal to the
    default row-major schedule's (float64: to rounding) and to the reference."""
    from benchmarks.common import make_trees

    trees = make_trees(3, 9, 2, 30, 40)
    for model in (cortex.models.TreeLSTM(hidden=32, embed=8, vocab=40, dtype="float64", seed=7),
                  cortex.models.MVRNN(hidden=8, vocab=40, dtype="float64", seed=7),
                  cortex.models.TreeGRU(hidden=16, embed=8, vocab=40, dtype="float64", seed=7)):
        exe = cortex.compile(model, target="llvm", dtype="float64", schedule={"state_layout": "node_blocked", **knobs})
        assert any(n.startswith("state_layout=node_blocked") for n in exe.notes)
        out, want = exe(trees), _row_major_states(model, trees)
        _assert_matches(model, out, "float64", f"{type(model).__name__} {knobs}")
        for state in out.states:
            assert out.nodes(state).shape == want.nodes(state).shape and out.nodes(state).flags.c_contiguous
            np.testing.assert_allclose(out.nodes(state), want.nodes(state), rtol=1e-12, atol=1e-12)


def test_profile_build_records_every_barrier_per_thread():
    """``profile=True``: the same results, and per thread one (arrive, leave) pair per barrier
    (leaves, each level, the launch, the call), in order, with non-negative work and waits."""
    import random

    from benchmarks.common import parse_like_tree

    rng = random.Random(2)
    trees = [parse_like_tree(rng, rng.randint(3, 12), 40) for _ in range(3)]
    model = cortex.models.TreeLSTM(hidden=32, embed=8, vocab=40, dtype="float32", seed=3)
    exe = cortex.compile(model, target="llvm", threads=2, profile=True)
    out = exe(trees)
    _assert_matches(model, out, "float32", "profile build")
    prof = exe.artifact.profile()
    levels = exe.linearize(trees).num_levels
    assert len(prof["compute"]) == 2
    for t in range(2):
        ev = prof["events"][t]
        assert len(ev) == levels + 2  # leaves + internal levels + launch + call
        assert (prof["compute"][t] >= 0).all() and (prof["wait"][t] >= 0).all()
        assert (np.diff(ev.ravel()) >= 0).all()
    with pytest.raises(RuntimeError, match="profile=True"):
        cortex.compile(model, target="llvm", threads=1).artifact.profile()


def test_pinned_workers_run_on_their_cpus_and_agree():
    """``pin=True``: worker t is restricted to the t-th usable CPU; results unchanged."""
    import glob
    import os
    import time

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(reason="pinning a worker needs two usable CPUs")
    model = cortex.models.TreeLSTM(hidden=32, embed=8, vocab=40, dtype="float32", seed=3)
    exe = cortex.compile(model, target="llvm", threads=2, pin=True)
    assert exe.artifact.pinned
    trees = [((1, 2), (3, (4, 5))), (6, 7)]
    _assert_matches(model, exe(trees), "float32", "pinned")
    time.sleep(0.05)
    allowed = [open(t).read().split("Cpus_allowed_list:\t")[1].split("\n")[0]
               for t in glob.glob("/proc/self/task/*/status")]
    assert str(cpus[1]) in allowed


def test_launch_follows_new_arrays_and_rechecks_them():
    """``launch`` keeps the pointers of the arrays it saw last (parameters and pooled outputs
    come back every call): a new output array is written, a bad new array still rejected."""
    from cortex.plugins.cpu_llvm.backend import LLVMRuntime

    p = T.vectorize(T.vectorize(tree_lstm(H=16, dtype="float32"), "j", 8), "jl", 8)
    bufs, sizes = _case(p)
    want = run(p, dict(bufs), sizes)
    cp = CompiledProgram(p, threads=2)
    first = cp.run(bufs, sizes)
    args = [first[b.name] for b in p.buffers]
    fresh = {b.name: np.zeros_like(first[b.name]) for b in p.buffers if not b.read_only}
    args2 = [fresh.get(b.name, a) for b, a in zip(p.buffers, args)]
    size_args = [int(sizes[s.name]) for s in p.sizes]
    LLVMRuntime().launch(cp, (*args2, *size_args))
    _outputs_close(p, {**first, **fresh}, want, "float32")
    bad = [a.astype(np.float64) if a.dtype == np.float32 else a for a in args2]
    with pytest.raises(TypeError, match="C-contiguous"):
        LLVMRuntime().launch(cp, (*bad, *size_args))


def test_handed_out_outputs_are_reused_only_once_dropped():
    """A call hands its output buffers to the caller (no copy); the next call writes one
    again only when nobody holds it, although ``launch``'s pointer cache keeps a reference."""
    model = cortex.models.MVRNN(hidden=8, embed=8, vocab=20, dtype="float32", seed=1)
    exe = cortex.compile(model, target="llvm", threads=2)
    a, b = [((1, 2), (3, 4))], [((5, 6), (7, 8))]
    first = exe(a)
    kept = {s: first.nodes(s).copy() for s in first.states}
    _assert_matches(model, exe(b), "float32", "second call")  # dropped at once
    for s in first.states:
        np.testing.assert_array_equal(first.nodes(s), kept[s])
    matrices = first.nodes("M")
    del first
    exe(b)
    np.testing.assert_array_equal(matrices, kept["M"])  # the array kept it
    del matrices
    buffers = [id(h.array) for h in exe._handed]  # noqa: SLF001
    for _ in range(3):
        _assert_matches(model, exe(a), "float32", "a dropped call's buffers")
    assert [id(h.array) for h in exe._handed] == buffers  # noqa: SLF001


def test_held_outputs_survive_the_runtime_dropping_its_own_reference():
    """Whether a handed-out buffer is still held is read off its memory's owner, which only
    views refer to: a runtime that drops (or takes) references to the launched arrays between
    calls cannot make a held output look free and have the next call overwrite it."""
    model = cortex.models.MVRNN(hidden=8, embed=8, vocab=20, dtype="float32", seed=1)
    exe = cortex.compile(model, target="llvm", threads=2)
    a, b = [((1, 2), (3, 4))], [((5, 6), (7, 8))]
    for held in (lambda out: out, lambda out: out.nodes("M")[1:], lambda out: memoryview(out.nodes("M"))):
        first = exe(a)
        kept = first.nodes("M").copy()
        holder = held(first)
        del first
        exe.artifact._last[:] = [None] * len(exe.artifact._last)  # noqa: SLF001 - the pointer cache
        _assert_matches(model, exe(b), "float32", "a call after the cache was dropped")
        np.testing.assert_array_equal(np.asarray(holder.nodes("M") if hasattr(holder, "nodes") else holder),
                                      kept[1:] if isinstance(holder, np.ndarray) else kept)
        del holder


def test_jammed_dag_rnn_with_per_node_child_ranges():
    """DAG-RNN sums over CSR children (a range that differs per node) around a GEMV: the
    per-node range must not be shared by the jammed group, nor the GEMV nested inside it."""
    from cortex.core.linearize import Grid

    rng = np.random.default_rng(0)
    for dtype in ("float32", "float64"):
        model = cortex.models.DAGRNN(hidden=32, features=16, dtype=dtype, seed=0)
        grids = [Grid(4, 4, features=rng.normal(size=(4, 4, 16))), Grid(3, 5, features=rng.normal(size=(3, 5, 16)))]
        threads = 2 if dtype == "float32" else 1
        exe = cortex.compile(model, target="llvm", threads=threads)
        _assert_matches(model, exe(grids), dtype, f"DAGRNN {dtype} threads {threads}")


def test_mvrnn_matrix_products_are_column_vectors_and_match():
    """MV-RNN's ``W_M [A; B]`` (a matrix-matrix product per node), ``A b`` (a child's matrix
    times a vector: a scalar row loop whose dot products run on vectors along the row) and its
    matrix-state copies:
    the lanes run along the contiguous column axis (one vector load of ``M[child, k, :]`` per
    step, no gathers), the split column loop is widened to one ``<32 x float>`` value, and
    the node loop is not interchanged (each row would re-read the level's child matrices).
    Leaves, chains and a mix of levels; float32 with 2 threads, float64 with 1."""
    from benchmarks.common import make_trees

    trees = make_trees(3, 4, 3, 12, 30)
    for dtype in ("float32", "float64"):
        model = cortex.models.MVRNN(hidden=32, vocab=30, dtype=dtype, seed=4)
        threads = 2 if dtype == "float32" else 1
        exe = cortex.compile(model, target="llvm", threads=threads, cpu="skylake-avx512" if AVX512_RUNS else "host")
        _assert_matches(model, exe(trees), dtype, f"MVRNN h32 {dtype} threads {threads}")
        _assert_matches(model, exe([trees[0][0]]), dtype, f"MVRNN h32 {dtype} one leaf")
    text = str(cortex.compile(cortex.models.MVRNN(hidden=32, vocab=30, seed=4), target="llvm",
                              threads=2, cpu="skylake-avx512").source)
    assert "<32 x float>" in text
    # M[child, j, :] . h[:] (lanes across rows j would be 32 floats apart): a row loop whose
    # dot products run along the row, on vectors
    assert "lred_" in text


def test_dag_rnn_child_sum_is_distributed_over_its_linear_map():
    """``Σ_pred W h_p`` -> ``W Σ_pred h_p`` (``cortex.core.passes.distribute_linear``): one
    GEMV per node that the llvm target jams with the node's ``U x``, instead of one per child
    inside a per-node CSR range (which runs node by node)."""
    from cortex.core.passes import DEFAULT_PASSES, distribute_linear, run_passes

    g = run_passes(cortex.models.DAGRNN(hidden=8, features=4).trace(), DEFAULT_PASSES)
    vals = g.case("internal").value_map()
    lins = [v for v in vals.values() if v.op == "linear"]
    assert len(lins) == 2 and all(vals[v.args[1]].domain == "node" for v in lins)
    red = next(v for v in vals.values() if v.op == "reduce_children")
    assert vals[red.args[0]].op == "child_state"
    # a linear with a bias (added once per child) is left alone
    from cortex.core.frontend.model import Model

    class Biased(Model):
        def __init__(self):
            super().__init__(arity=None, seed=0)
            self.add_feature_input("x", 3)
            self.add_state("h", (3,))
            self.add_param("W", (3, 3))
            self.add_param("b", (3,), init="zeros")

        def leaf(self, g):
            return {"h": g.input("x")}

        def internal(self, g):
            return {"h": g.reduce(g.linear("W", g.child("h"), "b"), "sum")}

    bg = Biased().trace()
    assert distribute_linear(bg) == bg or [v.op for v in distribute_linear(bg).case("internal").values] == \
        [v.op for v in bg.case("internal").values]


def test_a_loop_left_to_llvms_vectorizer_gets_the_default_pipeline(monkeypatch):
    """The short pass list has no loop vectorizer: a module whose generator left a loop scalar
    with the vectorize hint (a guarded tail) is optimized with LLVM's default pipeline, one
    that the generator fully vectorized is not."""
    from cortex.plugins.cpu_llvm import jit

    seen: list[bool] = []
    real = jit.optimize
    monkeypatch.setattr(jit, "optimize", lambda m, tm, lvl, default=False: (seen.append(default), real(m, tm, lvl, default))[1])
    tail = T.split(tree_lstm(H=16), "j", 6, inner="jt", inner_kind="vectorized")
    cp = CompiledProgram(tail, threads=1)
    assert jit.VECTORIZE_HINT in cp.ir and seen == [True]
    bufs, sizes = _case(tail)
    _outputs_close(tail, cp.run(bufs, sizes), run(tail, dict(bufs), sizes), "float32")
    vec = _vectorize_j(tree_lstm(H=16), "j", 8)
    assert jit.VECTORIZE_HINT not in CompiledProgram(vec, threads=1).ir and seen == [True, False]


def _elementwise_program(fn: str, vector: bool) -> ir.Program:
    """y[i] = fn(x[i]) for 16 * NW elements, on 16-lane vectors or scalar."""
    i = ir.BinOp("+", ir.BinOp("*", ir.Var("iw"), ir.Const(16)), ir.Var("iv"))
    body = ir.Let("i", i, ir.Store("y", (ir.Var("i"),), ir.call(fn, ir.Load("x", (ir.Var("i"),)))))
    inner = ir.For("iv", 0, 16, body, "vectorized" if vector else "serial")
    n = ir.BinOp("*", ir.Var("NW"), ir.Const(16))
    return ir.Program(f"{fn}_{'v' if vector else 's'}", (ir.Size("NW"),),
                      (ir.Buffer("x", "float32", (n,), "input"), ir.Buffer("y", "float32", (n,), "output")),
                      (ir.Kernel("k", (), ir.For("iw", 0, ir.Var("NW"), inner)),), (ir.Launch("k"),))


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "scalar"])
def test_exp_sigmoid_tanh_are_accurate_over_the_float32_range(vector):
    """The inline float32 exp (and sigmoid, tanh written with it) against float64 NumPy: within
    4 ulp of exp over [-87, 88], clamped beyond (no inf from a finite input), NaN kept."""
    x = np.concatenate([np.linspace(-87.0, 88.0, 200_000), np.linspace(-1, 1, 20_001),
                        [-1000.0, -88.5, 88.5, 1000.0, 0.0, -0.0, np.nan, np.inf, -np.inf]])
    x = np.concatenate([x, np.zeros(-len(x) % 16)]).astype(np.float32)
    x64 = x.astype(np.float64)
    ok = np.isfinite(x64)
    for fn, want in (("exp", np.exp), ("sigmoid", lambda v: 1 / (1 + np.exp(-v))), ("tanh", np.tanh)):
        cp = CompiledProgram(_elementwise_program(fn, vector), threads=1)
        y = cp.run({"x": x}, {"NW": len(x) // 16})["y"].astype(np.float64)
        with np.errstate(over="ignore"):
            ref = want(x64)
        if fn == "exp":
            inside = ok & (x64 >= -87.0) & (x64 <= 88.0)
            assert (np.abs(y[inside] - ref[inside]) <= 4 * np.spacing(ref[inside].astype(np.float32))).all()
            assert np.isfinite(y[~np.isnan(x64)]).all() and (y[~np.isnan(x64)] >= 0).all()
        else:
            assert np.abs(y[ok] - ref[ok]).max() <= 3e-7, fn
            assert np.isfinite(y[~np.isnan(x64)]).all()
        assert np.isnan(y[np.isnan(x64)]).all(), fn


def test_leaf_rows_of_the_embedding_table_are_prefetched_a_few_nodes_ahead():
    """The leaves gather E_proj[word_ids[u], :] (3 KB rows of a 61 MB table at h=256): the
    leaf loop prefetches node u + prefetch's row (the schedule's knob), a prefetch per line;
    from the leaf-state tables (``leaf_tables``, the default) the rows of leaf_h and leaf_c."""
    model = cortex.models.TreeLSTM(vocab=50, embed=8, hidden=16, seed=0)  # rows of 3 * 16 floats
    exe = cortex.compile(model, target="llvm", schedule={"leaf_tables": False})
    assert exe.schedule.prefetch == 2
    assert exe.artifact.ir.count("call void @\"llvm.prefetch.p0\"") == 3 * 16 * 4 // 64
    tabled = cortex.compile(model, target="llvm")
    assert tabled.schedule.leaf_tables and tabled.schedule.prefetch == 2
    assert tabled.artifact.ir.count("call void @\"llvm.prefetch.p0\"") == 2 * 16 * 4 // 64
    assert "llvm.prefetch" not in cortex.compile(model, target="llvm", schedule={"prefetch": 0}).artifact.ir


def test_the_address_reader_agrees_with_ctypes():
    """The launch reads a new array's data address from the array object in place (a probe
    decided at import that this interpreter and NumPy lay it out so): the same address as
    ``a.ctypes.data`` for fresh arrays, views, offsets and read-only arrays."""
    from cortex.plugins.cpu_llvm import runtime

    base = np.arange(100, dtype=np.int32)
    ro = base[10:20]
    ro.setflags(write=False)
    for a in (base, base[3:], base[::1][7:], base.reshape(10, 10)[2:], ro,
              np.zeros((3, 4), np.float32), np.ascontiguousarray(np.eye(3)[1:])):
        assert runtime._address(a) == a.ctypes.data
