"""Cross-lane reductions (``Reduce.lanes`` inside a ``gpu_thread`` loop with ``For.lanes``, the
``reduce_lanes`` knob): the interpreter computes them exactly as the plain reductions, the
verifier checks their structure and the target's warp size, the printer shows them, the CUDA
dialect renders the lane-group loop and the xor-shuffle butterfly (and compiles with nvcc for
sm_90), the other dialects refuse them, and the lowering applies the knob only where the target
has warp shuffles."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_lower import GPU, SPECS, assert_close, make_batch, run_lowered, spec_families  # noqa: E402
from test_render import one_translation_unit  # noqa: E402

from cortex.core import loopir as ir  # noqa: E402
from cortex.core.frontend import reference  # noqa: E402
from cortex.core.loopir.interpret import run  # noqa: E402
from cortex.core.loopir.verify import VerificationError, check, verify  # noqa: E402
from cortex.core.lowering.apply_schedule import reduce_lanes_for  # noqa: E402
from cortex.core.lowering.lower import lower  # noqa: E402
from cortex.core.lowering.schedule import Schedule, ScheduleError, ScheduleSpace  # noqa: E402
from cortex.core.plugin.capabilities import Capabilities  # noqa: E402
from cortex.core.render.c_family import RenderError, render  # noqa: E402

NVCC = shutil.which("nvcc")
WARP = replace(GPU, warp_size=32)
SPEC = {s.name: s for s in SPECS}
K = 40  # reduction length: not a multiple of any lane count, so lanes get unequal shares


def lane_program(lanes: int, dtype: str = "float32", op_lanes: int | None = None) -> ir.Program:
    """y[v, j] = sum_k W[j, k] * x[v, k], plus max and mean of the same products and an int sum,
    with the hidden loop on lane groups of ``lanes`` and the reductions over ``op_lanes``."""
    r = lanes if op_lanes is None else op_lanes
    n, v, j, k = ir.Var("N"), ir.Var("v"), ir.Var("j"), ir.Var("k")
    prod = lambda kv: ir.Load("W", (j, kv)) * ir.Load("x", (v, kv))  # noqa: E731
    body = ir.seq(
        ir.Store("y", (v, j), ir.Reduce("sum", "k", 0, K, prod(k), r)),
        ir.Store("ymax", (v, j), ir.Reduce("max", "k2", 0, K, prod(ir.Var("k2")), r)),
        ir.Store("ymean", (v, j), ir.Reduce("mean", "k3", 0, K, prod(ir.Var("k3")), r)),
        ir.Store("isum", (v, j), ir.Reduce("sum", "k4", 0, K, ir.Var("k4") * j + v, r)),
    )
    nest = ir.For("v", 0, n, ir.For("j", 0, 6, body, "gpu_thread", lanes), "gpu_group")
    return ir.Program(
        "lanes", (ir.Size("N"),),
        (ir.Buffer("x", dtype, (n, K), "input"), ir.Buffer("W", dtype, (6, K), "param"),
         ir.Buffer("y", dtype, (n, 6), "output"), ir.Buffer("ymax", dtype, (n, 6), "output"),
         ir.Buffer("ymean", dtype, (n, 6), "output"), ir.Buffer("isum", ir.INT, (n, 6), "output")),
        (ir.Kernel("main", (), nest, threads_per_group=64),), (ir.Launch("main"),))


def test_interpreter_computes_a_cross_lane_reduction_as_the_plain_one():
    rng = np.random.default_rng(0)
    bufs = {"x": rng.standard_normal((5, K)), "W": rng.standard_normal((6, K))}
    plain = run(verify(lane_program(1, "float64"), WARP), dict(bufs), {"N": 5})
    for lanes in (2, 8, 32):
        got = run(verify(lane_program(lanes, "float64"), WARP), dict(bufs), {"N": 5})
        for name in ("y", "ymax", "ymean", "isum"):
            np.testing.assert_array_equal(got[name], plain[name], err_msg=f"{name}, {lanes} lanes")
    np.testing.assert_allclose(plain["y"], bufs["x"] @ bufs["W"].T, rtol=1e-12)


def test_verifier_checks_lane_structure_and_warp_size():
    assert not check(lane_program(8), WARP)
    assert not check(lane_program(8))  # without caps: structure only
    with pytest.raises(VerificationError, match="must be inside a gpu_thread loop with lanes=8 .the innermost gpu_thread loop has lanes=4"):
        verify(lane_program(4, op_lanes=8))
    with pytest.raises(VerificationError, match="no warp shuffles .warp_size 0.; schedule reduce_lanes=1"):
        verify(lane_program(8), GPU)
    narrow = replace(WARP, warp_size=16)
    with pytest.raises(VerificationError, match="runs over 32 lanes, more than the target's warp size 16"):
        verify(lane_program(32), narrow)
    # a cross-lane reduce outside any lane loop, and one nested in another
    v, k = ir.Var("v"), ir.Var("k")
    inner = ir.Reduce("sum", "k", 0, 4, ir.Load("x", (v, k)), 4)
    outside = replace(lane_program(1), kernels=(ir.Kernel("main", (), ir.For(
        "v", 0, ir.Var("N"), ir.Store("y", (v, 0), inner), "gpu_group")),))
    with pytest.raises(VerificationError, match="it is in no gpu_thread loop"):
        verify(outside)
    nested = ir.Reduce("sum", "k0", 0, 2, inner, 4)
    p = replace(lane_program(4), kernels=(ir.Kernel("main", (), ir.For(
        "v", 0, ir.Var("N"), ir.For("j", 0, 6, ir.Store("y", (v, ir.Var("j")), nested), "gpu_thread", 4),
        "gpu_group")),))
    with pytest.raises(VerificationError, match="nested in another cross-lane reduction"):
        verify(p)
    # GPU loops nested inside a lane-group loop
    p = replace(lane_program(4), kernels=(ir.Kernel("main", (), ir.For(
        "v", 0, ir.Var("N"), ir.For("j", 0, 6, ir.For("t", 0, 2, ir.Store("y", (v, ir.Var("j")), inner), "gpu_thread"),
                                    "gpu_thread", 4), "gpu_group")),))
    with pytest.raises(VerificationError, match="gpu_thread loop t inside a lane-group loop"):
        verify(p)


def test_lanes_must_be_a_power_of_two_and_only_on_thread_loops():
    with pytest.raises(ir.LoopIRError, match="power of two"):
        ir.Reduce("sum", "k", 0, 4, ir.Var("k"), 3)
    with pytest.raises(ir.LoopIRError, match="power of two"):
        ir.For("j", 0, 4, ir.Seq(()), "gpu_thread", 0)
    with pytest.raises(ir.LoopIRError, match="needs kind gpu_thread"):
        ir.For("j", 0, 4, ir.Seq(()), "gpu_group", 4)


def test_printer_shows_lane_groups():
    text = str(lane_program(8))
    assert "gpu_thread for j in 0..6 (8 lanes each):" in text
    assert "y[v, j] = sum(k in 0..40 over 8 lanes: W[j, k] * x[v, k])" in text
    assert "lanes each" not in str(lane_program(1)) and "over 1" not in str(lane_program(1))


def test_cuda_renders_lane_groups_and_a_shuffle_butterfly():
    src = render(lane_program(8), "cuda")
    assert "for (int32_t j = (0) + ((int)threadIdx.x / 8); j < j__end; j += ((int)blockDim.x / 8)) {" in src
    assert "for (int32_t k = cx_lo2 + ((int)threadIdx.x % 8); k < cx_hi3; k += 8) {" in src
    assert "(0xffu << ((unsigned)threadIdx.x & 24u))" in src
    for offset in (4, 2, 1):
        assert f"cx_acc1 += __shfl_xor_sync(cx_mask4, cx_acc1, {offset}, 8);" in src
    assert "cx_acc5 = cx_max_float32(cx_acc5, __shfl_xor_sync(cx_mask8, cx_acc5, 4, 8));" in src  # max
    assert "0xffffffffu" in render(lane_program(32), "cuda")  # a whole warp
    assert "__shfl" not in render(lane_program(1), "cuda")


def test_dialects_without_shuffles_refuse_lanes():
    for dialect in ("c", "opencl"):
        with pytest.raises(RenderError, match=f"the {dialect} dialect has no warp shuffles.*reduce_lanes=1"):
            render(lane_program(4), dialect)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_lane_reductions_compile_with_nvcc_for_sm_90(tmp_path):
    srcs = [render(replace(lane_program(lanes, dt), name=f"lanes_{lanes}_{dt}"), "cuda")
            for lanes, dt in ((4, "float32"), (32, "float32"), (8, "float64"))]
    path = tmp_path / "lanes.cu"
    path.write_text(one_translation_unit({f"part{i}": src for i, src in enumerate(srcs)}))  # helpers repeat
    r = subprocess.run([NVCC, "-c", "-arch=sm_90", str(path), "-o", str(tmp_path / "lanes.o")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"nvcc failed:\n{r.stdout}{r.stderr}"


def test_knob_is_offered_only_with_warp_shuffles():
    assert ScheduleSpace(GPU).knob("reduce_lanes").choices == (1,)
    assert ScheduleSpace(Capabilities()).default().reduce_lanes == 1
    sp = ScheduleSpace(WARP)
    assert sp.knob("reduce_lanes").choices == (0, 1, 2, 4, 8, 16, 32) and sp.default().reduce_lanes == 0
    with pytest.raises(ScheduleError, match="reduce_lanes=8 is not legal here"):
        ScheduleSpace(GPU).with_knobs(reduce_lanes=8)
    assert Schedule.from_json('{"threads": 256}').reduce_lanes == 1  # old schedules still load
    auto = sp.with_knobs(threads=256)
    assert [reduce_lanes_for(auto, WARP, t) for t in (6, 8, 64, 100, 256, 1000)] == [32, 32, 4, 2, 1, 1]
    assert reduce_lanes_for(sp.with_knobs(reduce_lanes=8), WARP, 256) == 8


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeGRU", "ChildSumTreeLSTM", "DAGRNN", "MVRNN"])
def test_lowered_lane_programs_equal_the_plain_ones_on_the_interpreter(name):
    spec = SPEC[name]
    rng = np.random.default_rng(4)
    batch = make_batch(spec, spec_families(spec, rng)["mixed"], rng)
    sp = ScheduleSpace(WARP, "float64")
    ref = reference.evaluate(spec.graph, spec.model.params, batch)
    for knobs in ({}, {"reduce_lanes": 4}, {"reduce_lanes": 32, "tile_hidden": 8, "unroll": 2},
                  {"reduce_lanes": 8, "kernel_form": "per_level", "weight_layout": "row_major"},
                  {"reduce_lanes": 2, "fuse": False, "leaf_specialization": False, "persistent": True}):
        plain = lower(spec.graph, sp.with_knobs(**{**knobs, "reduce_lanes": 1}), WARP, "float64")
        assert not any(getattr(n, "lanes", 1) > 1 for k in plain.program.kernels for n in ir.walk(k.body))
        want = run_lowered(plain, spec.model.params, batch)
        low = lower(spec.graph, sp.with_knobs(**knobs), WARP, "float64")
        verify(low.program, WARP)
        lane_loops = [n for k in low.program.kernels for n in ir.walk(k.body) if isinstance(n, ir.For) and n.lanes > 1]
        lane_reduces = [n for k in low.program.kernels for n in ir.walk(k.body) if isinstance(n, ir.Reduce) and n.lanes > 1]
        assert lane_loops and lane_reduces, (knobs, low.notes)
        assert any("warp shuffles" in n for n in low.notes)
        got = run_lowered(low, spec.model.params, batch)
        for s in want:
            np.testing.assert_array_equal(got[s], want[s], err_msg=f"{name} {knobs} state {s}")
        assert_close(got, ref, "float64", f"{name} {knobs}")
