"""The cuda runtime's host logic on a fake driver (no GPU, no nvcc needed): host steps, launch
configuration (cooperative launch for the persistent kernel, sized to co-resident blocks;
per-level launches sized to each level), argument order, uploads/downloads — checked
numerically against the LoopProgram interpreter, which runs each launched kernel."""

from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "core"))
sys.path.insert(0, str(HERE.parent / "models"))
from fake_driver import FakeDriver  # noqa: E402
from test_loopir_examples import child_sum, inputs, random_batch, tree_lstm, tree_rnn  # noqa: E402

from cortex.core.lowering import transforms as T  # noqa: E402
from cortex.core import loopir as ir  # noqa: E402
from cortex.core.errors import TargetNotRunnableError  # noqa: E402
from cortex.core.loopir.interpret import run  # noqa: E402
from cortex.core.loopir.verify import verify  # noqa: E402
from cortex.core.lowering.apply_schedule import with_lanes  # noqa: E402
from cortex.plugins.cuda.device import capabilities, nominal_device  # noqa: E402
from cortex.plugins.cuda.compiler import Cubin  # noqa: E402
from cortex.plugins.cuda.launch import KernelPlan, LaunchError, host_launches  # noqa: E402
from cortex.plugins.cuda.runtime import CompiledProgram, CudaRuntime  # noqa: E402


def gpu(p: ir.Program, shared: str | None = None) -> ir.Program:
    """Nodes -> blocks, hidden units -> threads; optionally weights resident in shared memory."""
    p = T.bind(T.bind(p, "v", "group"), "j", "thread")
    if any(isinstance(n, ir.For) and n.var == "u" for k in p.kernels for n in ir.walk(k.body)):
        p = T.bind(p, "u", "group")
    if shared:
        p = T.cache(p, shared, "shared")
    return verify(p)


def lanes(p: ir.Program, width: int) -> ir.Program:
    """Every ``gpu_thread`` loop that holds reductions on lane groups of ``width`` threads, its
    outermost reductions split over them (cross-lane: warp shuffles in CUDA)."""
    reduces = {n.var for k in p.kernels for n in ir.walk(k.body) if isinstance(n, ir.Reduce)}
    kernels = []
    for k in p.kernels:
        body = k.body
        for loop in [n for n in ir.walk(k.body) if isinstance(n, ir.For) and n.kind == "gpu_thread"]:
            if any(isinstance(n, ir.Reduce) for n in ir.walk(loop.body)):
                body = with_lanes(body, loop.var, reduces, width)
        kernels.append(replace(k, body=body))
    out = replace(p, kernels=tuple(kernels))
    assert any(isinstance(n, ir.Reduce) and n.lanes == width for k in out.kernels for n in ir.walk(k.body))
    return verify(out, capabilities(nominal_device("sm_90")))


def compiled(p: ir.Program, **fake) -> tuple[CompiledProgram, FakeDriver]:
    driver = FakeDriver([p], **fake)
    runtime = CudaRuntime(threads_per_block=64, driver_factory=lambda: driver)
    return runtime.program(Cubin(b"\x7fELF-fake", "sm_90", "", p)), driver


def case(p: ir.Program, seed: int, arity=2):
    rng = np.random.default_rng(seed)
    batch = random_batch(rng, n_trees=4, arity=arity)
    bufs, sizes = inputs(batch, p, rng)
    return bufs, sizes, batch


PROGRAMS = {
    "tree_rnn_single": lambda: gpu(tree_rnn(form="single", dtype="float32"), shared="W"),
    "tree_rnn_per_level": lambda: gpu(tree_rnn(form="per_level", dtype="float32")),
    "tree_rnn_no_leaf_spec": lambda: gpu(tree_rnn(form="single", dtype="float64", leaf_spec=False)),
    "child_sum_single": lambda: gpu(child_sum(form="single", dtype="float64")),
    "child_sum_per_level": lambda: gpu(child_sum(form="per_level", dtype="float32")),
    "tree_lstm_single": lambda: gpu(tree_lstm(form="single", dtype="float32"), shared="U"),
    "tree_lstm_per_level": lambda: gpu(tree_lstm(form="per_level", dtype="float64")),
    # cross-lane reductions: lane groups of 8 / 32 / 4 threads per hidden unit
    "tree_lstm_lanes8_single": lambda: lanes(gpu(tree_lstm(form="single", dtype="float32"), shared="U"), 8),
    "tree_rnn_lanes32_per_level": lambda: lanes(gpu(tree_rnn(form="per_level", dtype="float64")), 32),
    "child_sum_lanes4_single": lambda: lanes(gpu(child_sum(form="single", dtype="float32")), 4),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compiled_program_matches_the_interpreter(name):
    p = PROGRAMS[name]()
    prog, driver = compiled(p)
    bufs, sizes, _ = case(p, seed=7, arity=None if "child_sum" in name else 2)
    want = run(p, dict(bufs), sizes)
    got = prog.run(bufs, sizes)
    for b in p.buffers:
        if b.role == "output":
            np.testing.assert_array_equal(got[b.name], want[b.name])
    assert driver.syncs == 1 and driver.modules == 1


def test_persistent_kernel_is_one_cooperative_launch_sized_to_the_widest_level():
    p = PROGRAMS["tree_lstm_single"]()
    prog, driver = compiled(p, per_sm=2)
    bufs, sizes, batch = case(p, seed=1)
    prog.run(bufs, sizes)
    (launch,) = driver.launched
    assert launch.cooperative and launch.symbol == "tree_lstm_main"
    widest = int(np.diff(batch.level_offsets).max())
    assert launch.grid == min(widest, 2 * driver.info.sm_count)
    assert launch.block == 64  # the runtime's threads_per_block: the kernel has gpu_thread loops


def test_persistent_grid_never_exceeds_co_resident_blocks():
    p = PROGRAMS["tree_rnn_single"]()
    prog, driver = compiled(p, per_sm=1, execute=False)
    sizes = {"N": 100000, "L": 2, "NL": 99999, "E": 99999}
    plan = KernelPlan(p, "main", 64)
    cfg = plan.config(sizes, (), {}, lambda block, shared: 1, driver.info.sm_count)
    assert cfg.cooperative and cfg.grid == driver.info.sm_count  # bound unknown on the host: fill the GPU
    arrays = {"level_offsets": np.array([0, 99999, 100000], np.int32)}
    cfg = plan.config(sizes, (), arrays, lambda block, shared: 3, driver.info.sm_count)
    assert cfg.grid == 3 * driver.info.sm_count


def test_zero_occupancy_is_a_clear_error():
    p = PROGRAMS["tree_rnn_single"]()
    plan = KernelPlan(p, "main", 64)
    with pytest.raises(LaunchError, match="occupancy 0"):
        plan.config({"N": 3, "L": 2, "NL": 2, "E": 2}, (), {}, lambda b, s: 0, 132)


def test_per_level_form_launches_one_plain_kernel_per_level_sized_to_it():
    p = PROGRAMS["tree_rnn_per_level"]()
    prog, driver = compiled(p)
    bufs, sizes, batch = case(p, seed=2)
    prog.run(bufs, sizes)
    symbols = [x.symbol for x in driver.launched]
    assert symbols == ["tree_rnn_leaves"] + ["tree_rnn_level"] * (batch.num_levels - 1)
    assert not any(x.cooperative for x in driver.launched)
    widths = np.diff(batch.level_offsets)
    assert driver.launched[0].grid == batch.num_leaves
    assert [x.grid for x in driver.launched[1:]] == [max(1, int(w)) for w in widths[1:]]
    assert [x.args[-1] for x in driver.launched[1:]] == [("i32", lvl) for lvl in range(1, batch.num_levels)]
    assert host_launches(p, sizes)[1:] == [("level", (lvl,)) for lvl in range(1, batch.num_levels)]


def test_kernel_without_gpu_loops_runs_one_thread():
    p = tree_rnn(form="single", dtype="float64")  # no loop bound to the grid
    plan = KernelPlan(p, "main", 256)
    assert plan.block == 1 and not plan.has_groups
    assert plan.config({"N": 5, "L": 3, "NL": 3, "E": 4}, (), {}, lambda b, s: 1, 132).grid == 1


def test_big_shared_weights_raise_the_dynamic_shared_limit():
    p = gpu(tree_lstm(H=64, form="single", dtype="float32"), shared="U")  # U: 160 KiB
    prog, driver = compiled(p)
    bufs, sizes, _ = case(p, seed=4)
    prog.run(bufs, sizes)
    assert driver.dynamic_shared == {"tree_lstm_main": 320 * 128 * 4}
    assert driver.launched[0].shared_bytes == 320 * 128 * 4


def test_params_can_stay_on_the_device():
    p = PROGRAMS["tree_rnn_per_level"]()
    prog, driver = compiled(p)
    bufs, sizes, _ = case(p, seed=5)
    prog.keep_on_device({k: bufs[k] for k in ("Emb", "W", "b")})
    per_call = {k: v for k, v in bufs.items() if k not in ("Emb", "W", "b")}
    np.testing.assert_array_equal(prog.run(per_call, sizes)["h"], run(p, dict(bufs), sizes)["h"])
    with pytest.raises(ValueError, match="only read-only buffers"):
        prog.keep_on_device({"h": np.zeros((1, 8), np.float32)})


def test_bad_arguments_are_clear_errors():
    p = PROGRAMS["tree_rnn_per_level"]()
    prog, _ = compiled(p)
    bufs, sizes, _ = case(p, seed=6)
    with pytest.raises(ValueError, match="sizes"):
        prog.run(bufs, {"N": sizes["N"]})
    with pytest.raises(ValueError, match="buffer 'W'"):
        prog.run({**bufs, "W": bufs["W"].astype(np.float64)}, sizes)
    with pytest.raises(ValueError, match="'Emb' \\(param\\) not given"):
        prog.run({k: v for k, v in bufs.items() if k != "Emb"}, sizes)
    with pytest.raises(TypeError, match="device buffer"):
        prog.runtime.launch(prog.cubin, tuple(bufs[b.name] if b.name in bufs else None for b in p.buffers)
                            + tuple(sizes[s] for s in p.size_names))


def test_without_a_gpu_the_runtime_says_why():
    runtime = CudaRuntime(why_not=lambda: ("no CUDA driver found", "run on a machine with an NVIDIA GPU"))
    with pytest.raises(TargetNotRunnableError, match="no CUDA driver found.*To fix: run on a machine"):
        runtime.upload(np.zeros(3, np.float32))


def test_per_call_uploads_are_one_packed_transfer():
    p = PROGRAMS["tree_lstm_per_level"]()
    prog, driver = compiled(p)
    bufs, sizes, _ = case(p, seed=8)
    params = {b.name: bufs[b.name] for b in p.buffers if b.role == "param"}
    prog.keep_on_device(params)
    assert driver.uploads == 0  # pending until a launch
    per_call = {k: v for k, v in bufs.items() if k not in params}
    first = prog.run(per_call, sizes)
    assert driver.uploads == 1  # params and the five index buffers together
    prog.run(per_call, sizes)
    assert driver.uploads == 2  # the params stayed; the index buffers went in one copy
    np.testing.assert_array_equal(first["h"], run(p, dict(bufs), sizes)["h"])


def test_blocks_hold_whole_lane_groups():
    """A cross-lane reduction's shuffles name every lane of its group, so the block size is a
    multiple of the widest lane group (rounded up from the option when the schedule set none)."""
    p32, p8 = PROGRAMS["tree_rnn_lanes32_per_level"](), PROGRAMS["tree_lstm_lanes8_single"]()
    assert {k.threads_per_group for k in p32.kernels} == {1}
    assert KernelPlan(p32, "level", 48).block == 64 and KernelPlan(p32, "level", 96).block == 96
    (k8,) = p8.kernels
    assert KernelPlan(p8, k8.name, 48).block == 48 and KernelPlan(p8, k8.name, 20).block == 24
    assert KernelPlan(replace(p8, kernels=(replace(k8, threads_per_group=4),)), k8.name, 256).block == 8
    prog, driver = compiled(p32)
    bufs, sizes, _ = case(p32, seed=3)
    want = run(p32, dict(bufs), sizes)
    got = prog.run(bufs, sizes)
    np.testing.assert_array_equal(got["h"], want["h"])
    assert {c.block for c in driver.launched if c.symbol.endswith("_level")} == {64}


@pytest.mark.parametrize("buffer, value", [("child_ids", 10**8), ("child_ids", -1),
                                           ("level_offsets", 10**6)])
def test_run_refuses_index_buffers_outside_their_declared_range(buffer, value):
    """``CompiledProgram.run`` takes raw host buffers: an index the kernel would dereference
    out of bounds is refused on the host, before anything is uploaded or launched."""
    from cortex.core.plugin.backend import IndexRangeError

    p = PROGRAMS["tree_rnn_per_level"]()
    prog, driver = compiled(p)
    bufs, sizes, _ = case(p, seed=3)
    bad = np.array(bufs[buffer])
    bad[-1] = value
    with pytest.raises(IndexRangeError, match=buffer):
        prog.run({**bufs, buffer: bad}, sizes)
    assert driver.syncs == 0  # nothing ran
