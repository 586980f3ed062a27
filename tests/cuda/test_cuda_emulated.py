"""The CUDA C of cross-lane reductions *executed* without a GPU: the renderer's source for
hand-built lane programs and lowered zoo models, compiled with g++ against ``cuda_emu.h`` (one OS
thread per CUDA thread; ``__shfl_xor_sync`` through a barrier per lane group, checking each
call's mask, width and offset) and run over the program's host steps, against the interpreter.
What a GPU adds (timing, the real warp scheduler, shared memory) is ``test_cuda_gpu.py``'s."""

from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "core"))
from emulate import CXX, run_emulated  # noqa: E402
from test_loopir_lanes import K, lane_program  # noqa: E402
from test_lower import SPECS, make_batch, spec_families  # noqa: E402

from cortex.core import loopir as ir  # noqa: E402
from cortex.core.loopir.interpret import run  # noqa: E402
from cortex.core.lowering.lower import lower  # noqa: E402
from cortex.core.lowering.schedule import ScheduleSpace  # noqa: E402
from cortex.plugins.cuda.device import capabilities, nominal_device  # noqa: E402

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to build the emulated kernels")
CAPS = capabilities(nominal_device("sm_90"))
SPEC = {s.name: s for s in SPECS}


def inputs(rng, dtype):
    return {"x": rng.standard_normal((7, K)).astype(dtype), "W": rng.standard_normal((6, K)).astype(dtype)}


@pytest.mark.parametrize("lanes,dtype", [(2, "float64"), (8, "float64"), (32, "float64"), (16, "float32")])
def test_lane_reductions_run_like_the_interpreter(tmp_path, lanes, dtype):
    """Six rows over lane groups of 64-thread blocks (groups of a warp leave the row loop at
    different times), a 40-long range (unequal lane shares); sum, max, mean, int sum."""
    rng = np.random.default_rng(lanes)
    p = replace(lane_program(lanes, dtype), name=f"lanes{lanes}_{dtype}")
    bufs = inputs(rng, dtype)
    want = run(p, dict(bufs), {"N": 7})
    got = run_emulated(p, bufs, {"N": 7}, tmp_path)
    tol = 1e-12 if dtype == "float64" else 1e-5
    for name in ("y", "ymax", "ymean"):
        np.testing.assert_allclose(got[name], want[name], rtol=tol, atol=tol, err_msg=f"{p.name} {name}")
    np.testing.assert_array_equal(got["isum"], want["isum"], err_msg=p.name)


def test_the_emulator_catches_a_broken_butterfly_or_mask(tmp_path):
    p = replace(lane_program(8, "float64"), name="broken")
    bufs = inputs(np.random.default_rng(1), "float64")
    want = run(p, dict(bufs), {"N": 7})
    wrong = run_emulated(p, bufs, {"N": 7}, tmp_path, edit=lambda s: s.replace(", 1, 8);", ", 2, 8);"))
    assert not np.allclose(wrong["y"], want["y"])
    with pytest.raises(RuntimeError, match="bad shuffle"):
        run_emulated(p, bufs, {"N": 7}, tmp_path, edit=lambda s: s.replace("& 24u", "& 16u"))


@pytest.mark.parametrize("form", ["single", "per_level"])
@pytest.mark.parametrize("name", ["TreeLSTM", "TreeGRU", "ChildSumTreeLSTM", "DAGRNN"])
def test_lowered_models_with_lanes_run_like_the_interpreter(tmp_path, name, form):
    """Zoo models (hidden 8) lowered for the cuda target with 64 threads per block: auto gives
    8 lanes per hidden unit; also 32 lanes with the row loop tiled. Every output and temp
    buffer against the interpreter, float64; the persistent form's grid sync between levels."""
    spec = SPEC[name]
    rng = np.random.default_rng(2)
    batch = make_batch(spec, spec_families(spec, rng)["mixed"], rng)
    space = ScheduleSpace(CAPS, "float64")
    for knobs in ({}, {"reduce_lanes": 32, "tile_hidden": 8, "unroll": 2}):
        low = lower(spec.graph, space.with_knobs(kernel_form=form, threads=64, **knobs), CAPS, "float64")
        assert any(isinstance(n, ir.Reduce) and n.lanes > 1 for k in low.program.kernels for n in ir.walk(k.body))
        bufs, sizes = low.bind_batch(batch)
        bufs = {**low.prepare_params(spec.model.params), **bufs}
        want = run(low.program, dict(bufs), sizes)
        got = run_emulated(low.program, bufs, sizes, tmp_path)
        for b in low.program.buffers:
            if b.role in ("output", "temp"):
                np.testing.assert_allclose(got[b.name], want[b.name], rtol=1e-12, atol=1e-12,
                                           err_msg=f"{name} {form} {knobs} {b.name}")
