"""``weights="bfloat16"`` on the ``llvm`` target: the kernels load the stored weights as 16-bit
integers, widen them to float32 and compute what the interpreter computes on the same program;
the program's runner refuses float32 arrays for a bfloat16 buffer (a cast would not round)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite (pip install 'cortex-compiler[llvm]')")

import cortex  # noqa: E402
from cortex.core.loopir.interpret import batch_inputs, run  # noqa: E402
from cortex.models import DAGRNN, TreeLSTM  # noqa: E402
from cortex.plugins.cpu_llvm.runtime import CompiledProgram, LLVMRuntimeError  # noqa: E402

TREES = [((1, 2), (3, (4, 5))), 7, (((8, 9), 10), ((11, 12), (13, 14)))]


WIDEN = {"bf16_dot": "widen"}  # (the default reads pairs of rows: below)


@pytest.mark.parametrize("schedule", [WIDEN, {"node_jam": 1, "interchange": False, "wide_lanes": 0, **WIDEN},
                                      {"weight_layout": "row_major", **WIDEN}])
@pytest.mark.parametrize("threads", [1, 2])
def test_llvm_computes_what_the_interpreter_computes_on_the_stored_weights(schedule, threads):
    model = TreeLSTM(hidden=40, embed=12, vocab=20, seed=3)  # 40: 16-lane vectors with a tail
    got = cortex.compile(model, target="llvm", weights="bfloat16", schedule=schedule, threads=threads)
    want = cortex.compile(model, target="numpy", weights="bfloat16")
    assert any(b.storage == "bfloat16" for b in got.program.buffers)
    a, b = got(TREES), want(TREES)
    for s in a.states:
        np.testing.assert_allclose(a.nodes(s), b.nodes(s), rtol=1e-5, atol=1e-5)
    plain = cortex.compile(model, target="llvm", threads=threads)(TREES).root("h")
    assert np.abs(a.root("h") - plain).max() > 0  # the weights were rounded


def test_the_kernels_load_sixteen_bit_weights_and_widen_them():
    exe = cortex.compile(TreeLSTM(hidden=32, embed=8, vocab=20, seed=0), target="llvm",
                         weights="bfloat16", schedule=WIDEN)
    text = str(exe.source)
    assert "x i16>" in text and "zext <" in text and "shl <" in text
    assert "x i16>" not in str(cortex.compile(TreeLSTM(hidden=32, embed=8, vocab=20, seed=0),
                                              target="llvm").source)


def test_variable_arity_models_store_their_matrices_too():
    from cortex.core.linearize import Grid

    model = DAGRNN(hidden=24, features=4, seed=1)
    rng = np.random.default_rng(0)
    grids = [Grid(3, 4, features=rng.normal(size=(3, 4, 4))), Grid(1, 5, features=rng.normal(size=(1, 5, 4)))]
    exe = cortex.compile(model, target="llvm", weights="bfloat16")
    assert any(b.storage for b in exe.program.buffers)
    want = cortex.compile(model, target="numpy", weights="bfloat16")(grids).root("h")
    np.testing.assert_allclose(exe(grids).root("h"), want, rtol=1e-5, atol=1e-5)


def test_the_program_runner_takes_the_stored_bits_only():
    # (pairs: the interpreter multiplies float32 activations, as pairs does; amx and dpbf16
    # round them to bfloat16 first. No leaf_kids: its node order is a buffer the executable
    # binds per batch, which this bare runner is not given)
    exe = cortex.compile(TreeLSTM(hidden=16, embed=8, vocab=20, seed=0), target="llvm",
                         weights="bfloat16", schedule={"bf16_dot": "pairs", "leaf_kids": False})
    program = exe.program
    bufs, sizes = batch_inputs(program, exe.linearize(TREES))
    bufs.update(exe._params)
    cp = CompiledProgram(program, threads=1)
    got, want = cp.run(dict(bufs), sizes), run(program, dict(bufs), sizes)
    for b in program.buffers:
        if b.role == "output":
            np.testing.assert_allclose(got[b.name], want[b.name], rtol=1e-5, atol=1e-6)
    name = next(b.name for b in program.buffers if b.storage)
    bufs[name] = bufs[name].astype(np.float32)
    with pytest.raises(LLVMRuntimeError, match=f"buffer {name} must be uint16"):
        cp.run(bufs, sizes)


# ---------------------------------------------------------------- bf16_dot="pairs"

PAIRS = {"bf16_dot": "pairs"}


@pytest.mark.parametrize("schedule", [{}, {"node_jam": 1, "interchange": False, "wide_lanes": 0},
                                      {"jam_unroll": 1}, {"jam_unroll": 4},
                                      {"weight_layout": "row_major"}, {"weight_layout": "transposed"}])
@pytest.mark.parametrize("threads", [1, 2])
def test_pair_loads_compute_what_the_interpreter_and_the_widening_compute(schedule, threads):
    model = TreeLSTM(hidden=48, embed=12, vocab=20, seed=3)  # 48: three 16-row blocks, even rows
    got = cortex.compile(model, target="llvm", weights="bfloat16", schedule={**schedule, **PAIRS},
                         threads=threads)
    assert {b.storage for b in got.program.buffers if b.storage} == {"bfloat16_pairs"}
    interpreted = cortex.compile(model, target="numpy", weights="bfloat16", schedule=PAIRS)(TREES)
    widened = cortex.compile(model, target="llvm", weights="bfloat16", schedule={**schedule, **WIDEN},
                             threads=threads)(TREES)
    a = got(TREES)
    for s in a.states:
        np.testing.assert_allclose(a.nodes(s), interpreted.nodes(s), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(a.nodes(s), widened.nodes(s), rtol=1e-5, atol=1e-5)


def test_pair_loads_read_words_and_keep_one_half_without_widening():
    model = TreeLSTM(hidden=32, embed=8, vocab=20, seed=0)
    exe = cortex.compile(model, target="llvm", weights="bfloat16", schedule=PAIRS)  # (the default without AMX)
    text, lanes = str(exe.source), exe.schedule.vector_width  # 16 with AVX-512, 8 with AVX2
    assert f"load <{lanes} x i32>" in text and "-65536" in text and f"zext <{lanes} x i16>" not in text
    from cortex.plugins.cpu_llvm.jit import JitModule

    asm = JitModule(text).assembly()  # the parity is known: LLVM folds the choice of half away
    # the high half kept by a mask (vpand; AVX2: a blend with zero), the low one by a shift
    assert ("vpand" in asm or "vpblendw" in asm) and "vpslld" in asm and "vpmovzxwd" not in asm


def test_variable_arity_models_read_pairs_too():
    from cortex.core.linearize import Grid

    model = DAGRNN(hidden=32, features=4, seed=1)
    rng = np.random.default_rng(0)
    grids = [Grid(3, 4, features=rng.normal(size=(3, 4, 4))), Grid(1, 5, features=rng.normal(size=(1, 5, 4)))]
    exe = cortex.compile(model, target="llvm", weights="bfloat16", schedule=PAIRS)
    assert any(b.storage == "bfloat16_pairs" for b in exe.program.buffers)
    want = cortex.compile(model, target="numpy", weights="bfloat16")(grids).root("h")
    np.testing.assert_allclose(exe(grids).root("h"), want, rtol=1e-5, atol=1e-5)


def test_pairs_accesses_that_do_not_run_along_the_last_dimension_go_lane_by_lane():
    from cortex.core import loopir as ir
    from cortex.core.loopir.storage import pack, round_to

    iv = ir.Var("iv")
    value = ir.BinOp("+", ir.BinOp("+", ir.Load("W", (iv, ir.Const(0))), ir.Load("V", (ir.Const(1), iv))),
                     ir.BinOp("+", ir.Load("V", (ir.Const(2), iv)), ir.Load("V", (ir.Const(3), ir.Const(5)))))
    body = ir.For("iv", 0, 16, ir.Store("y", (iv,), value), "vectorized")
    program = ir.Program("pairs", (), (ir.Buffer("W", "float32", (16, 1), "param", storage="bfloat16_pairs"),
                                       ir.Buffer("V", "float32", (4, 16), "param", storage="bfloat16_pairs"),
                                       ir.Buffer("y", "float32", (16,), "output")),
                         (ir.Kernel("k", (), body),), (ir.Launch("k"),))
    rng = np.random.default_rng(0)
    w, v = rng.normal(size=(16, 1)).astype(np.float32), rng.normal(size=(4, 16)).astype(np.float32)
    bufs = {"W": pack(w, "bfloat16_pairs"), "V": pack(v, "bfloat16_pairs")}
    got = CompiledProgram(program, threads=1).run(dict(bufs), {})["y"]
    w, v = round_to(w, "bfloat16"), round_to(v, "bfloat16")
    np.testing.assert_array_equal(got, w[:, 0] + v[1] + (v[2] + v[3, 5]))
    np.testing.assert_array_equal(got, run(program, dict(bufs), {})["y"])
