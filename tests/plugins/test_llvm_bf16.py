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


@pytest.mark.parametrize("schedule", ["default", {"node_jam": 1, "interchange": False, "wide_lanes": 0},
                                      {"weight_layout": "row_major"}])
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
                         weights="bfloat16")
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
    exe = cortex.compile(TreeLSTM(hidden=16, embed=8, vocab=20, seed=0), target="llvm",
                         weights="bfloat16")
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
