"""The cuda target on a real GPU (skipped where the target is not runnable; ``tools/gpu_check.sh``
runs these on a lent GPU): hand-built programs against the interpreter, every zoo model x
structure family in both kernel forms against the float64 reference, and a hidden-256 TreeLSTM
whose persistent kernel runs every level of a batch in one cooperative launch (with and without
cross-lane GEMV reductions); the lane reductions themselves on hand-built programs."""

from __future__ import annotations

import os
import pathlib
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "core"))
sys.path.insert(0, str(HERE.parent / "models"))

from cortex.plugins.cuda import target as cuda_target  # noqa: E402

RUNNABLE = cuda_target.runnable()
if not RUNNABLE and os.environ.get("CORTEX_TEST_REQUIRE", "") == "cuda":
    raise RuntimeError(f"CORTEX_TEST_REQUIRE=cuda but the cuda target cannot run here: {RUNNABLE.reason}")
pytestmark = pytest.mark.skipif(not RUNNABLE, reason=f"cuda target not runnable here: {RUNNABLE.reason}")

import cortex  # noqa: E402
from cortex.core.loopir.interpret import run  # noqa: E402


@pytest.fixture(scope="module")
def backend():
    from cortex.plugins.cuda.backend import make_backend

    return make_backend({"arch": "auto", "device": 0, "threads_per_block": 128})


def test_hand_built_programs_match_the_interpreter_on_the_gpu(backend):
    from test_cuda_runtime import PROGRAMS, case

    names = sorted(PROGRAMS)
    programs = [PROGRAMS[n]() for n in names]
    cubins = backend.compiler.compile_many([backend.renderer.render(p) for p in programs], {"arch": "auto"})
    for name, p, cubin in zip(names, programs, cubins):
        bufs, sizes, _ = case(p, seed=11, arity=None if "child_sum" in name else 2)
        want = run(p, dict(bufs), sizes)
        got = backend.runtime.program(cubin).run(bufs, sizes)
        tol = 1e-12 if "float64" in {b.dtype for b in p.buffers} else 2e-5
        for b in p.buffers:
            if b.role == "output":
                np.testing.assert_allclose(got[b.name], want[b.name], rtol=tol, atol=tol, err_msg=f"{name} {b.name}")
        forms = {c.cooperative for c in backend.runtime.last_launches}
        assert forms == ({True} if "single" in name or "no_leaf" in name else {False}), name


def test_cross_lane_reductions_match_the_interpreter_on_the_gpu(backend):
    """Lane groups of 2..32 threads (fewer rows than groups, so some groups of a warp leave the
    loop early), a 40-long range (unequal shares), sum / max / mean / int sum, float32 and
    float64: the xor-shuffle butterflies against the interpreter's plain reductions."""
    from dataclasses import replace

    from test_loopir_lanes import K, lane_program

    programs = [replace(lane_program(w, dt), name=f"lanes_{w}_{dt}")
                for w in (2, 4, 8, 16, 32) for dt in ("float32", "float64")]
    cubins = backend.compiler.compile_many([backend.renderer.render(p) for p in programs], {"arch": "auto"})
    rng = np.random.default_rng(5)
    for p, cubin in zip(programs, cubins):
        dt = p.buffer("x").dtype
        bufs = {"x": rng.standard_normal((7, K)).astype(dt), "W": rng.standard_normal((6, K)).astype(dt)}
        want = run(p, dict(bufs), {"N": 7})
        got = backend.runtime.program(cubin).run(bufs, {"N": 7})
        tol = 1e-12 if dt == "float64" else 2e-5
        for name in ("y", "ymax", "ymean"):
            np.testing.assert_allclose(got[name], want[name], rtol=tol, atol=tol, err_msg=f"{p.name} {name}")
        np.testing.assert_array_equal(got["isum"], want["isum"], err_msg=f"{p.name} isum")
        assert all(c.block % int(p.name.split("_")[1]) == 0 for c in backend.runtime.last_launches)


@pytest.fixture(scope="module")
def warm_cubin_cache(backend):
    """Compile every zoo program the next test will compile, in parallel nvcc runs, into the
    disk cache (cortex.compile then finds them): one nvcc per program in turn is minutes."""
    from test_numpy_target import CASES

    from cortex.core.lowering.lower import lower
    from cortex.core.passes.pipeline import run_passes
    from cortex.core.lowering.schedule import ScheduleSpace
    from cortex.core.frontend.trace import trace

    options = {o.name: o.default for o in cuda_target.OPTIONS}
    sources = []
    for dtype in ("float32", "float64"):
        space = ScheduleSpace(backend.capabilities, dtype)
        for _, _, model, _ in CASES[dtype]:
            graph = run_passes(trace(model))
            for form in ("single", "per_level"):
                program = lower(graph, space.with_knobs(kernel_form=form), backend.capabilities, dtype).program
                sources.append(backend.renderer.render(program))
    try:
        backend.compiler.compile_many(sources, options)
    except Exception:  # noqa: BLE001 - a source that fails is reported by the test itself
        pass


@pytest.mark.parametrize("form", ["single", "per_level"])
def test_every_zoo_model_and_family_matches_the_reference_on_the_gpu(form, warm_cubin_cache):
    from test_numpy_target import CASES, assert_matches, family_batches

    for dtype in ("float32", "float64"):
        for index, (label, name, model, batches) in enumerate(CASES[dtype]):
            exe = cortex.compile(model, target="cuda", dtype=dtype, schedule={"kernel_form": form})
            rng = np.random.default_rng(index)
            for fam, batch in family_batches(name, model, batches, rng).items():
                assert_matches(model, exe(batch), dtype, f"{label} {dtype} {form} {fam}")


@pytest.mark.parametrize("knobs", [{}, {"threads": 1024}, {"reduce_lanes": 32, "weight_layout": "row_major"}],
                         ids=["default", "threads1024_auto_lanes4", "lanes32_row_major"])
def test_hidden_256_tree_lstm_runs_every_level_in_one_cooperative_launch(knobs):
    from cortex.models import TreeLSTM
    from test_numpy_target import assert_matches

    model = TreeLSTM(vocab=1000, embed=256, hidden=256, seed=0)
    exe = cortex.compile(model, target="cuda", schedule=knobs)
    assert exe.schedule.kernel_form == "single"
    rng = np.random.default_rng(0)

    def tree(n: int):
        return int(rng.integers(1000)) if n == 1 else (tree(n // 2), tree(n - n // 2))

    trees = [tree(int(rng.integers(20, 41))) for _ in range(10)]
    out = exe(trees)
    assert_matches(model, out, "float32", "TreeLSTM h256 b10")
    (launch,) = exe.backend.runtime.last_launches
    assert launch.cooperative and launch.grid >= 1
