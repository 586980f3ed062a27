"""The opencl backend on a real OpenCL device (PoCL's CPU device in CI): programs and zoo models
against the interpreter and the float64 reference, device selection, buffers, errors.

Skipped (with the reason) where pyopencl or an OpenCL device is missing, unless
``CORTEX_TEST_REQUIRE`` names opencl (tox's opencl env): then a missing device fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from cortex.core.loopir import interpret
from cortex.core.plugin import hostinfo

REQUIRED = "opencl" in {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",")}
_found = hostinfo.opencl_devices()
if not _found.devices and not REQUIRED:
    pytest.skip(reason=f"OpenCL unavailable: no OpenCL device: {_found.error}", allow_module_level=True)

import cortex  # noqa: E402
import cortex.models  # noqa: E402,F401  (cortex.models.X below)
from cortex.core.frontend.reference import evaluate  # noqa: E402
from cortex.plugins.opencl import compiler as cl_compiler  # noqa: E402
from cortex.plugins.opencl import device as cl_device  # noqa: E402
from cortex.plugins.opencl.backend import create_backend  # noqa: E402
from cortex.plugins.opencl.runtime import OpenCLResourceError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))
from test_loopir_examples import child_sum, inputs, random_batch, tree_lstm, tree_rnn  # noqa: E402

BACKEND = create_backend({})
#: the device's float lanes (16 with AVX-512, unless PoCL compiles for a CPU without it)
LANES = BACKEND.renderer.float_lanes
FP64 = BACKEND.capabilities.supports_fp64
DTYPES = ["float32", pytest.param("float64", marks=pytest.mark.skipif(
    not FP64, reason="the OpenCL device reports no fp64 support (double_fp_config is 0)"))]
TOL = {"float32": 2e-5, "float64": 1e-11}


def _close(got, want, dtype):
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("fast_math", [True, False])
@pytest.mark.parametrize("form", ["per_level", "single_group"])
def test_jammed_levels_match_the_interpreter_also_when_children_are_missing(form, fast_math):
    """TreeLSTM levels jammed by the schedule (the core's node jam: groups of 4/2/1 nodes x the
    device's lanes of hidden units over weights packed by as many rows) render as vector
    statements; nodes with a missing child run node by node through the cold plain body, levels
    of 1-3 nodes the smaller groups."""
    from cortex.core.lowering.jam import JamOptions, jam_levels
    from cortex.core.lowering.level_interchange import interchange_levels
    from cortex.core.lowering.loop_shapes import block_hidden_loops
    from cortex.core.lowering.transforms import change_layout, physical_arrays

    rng = np.random.default_rng(11)
    program = tree_lstm(form="per_level", dtype="float32", H=32)
    packed = change_layout(program, "U", "packed", LANES)
    jammed, n = jam_levels(interchange_levels(block_hidden_loops(packed, LANES)[0])[0],
                           JamOptions(nodes=4, register_lanes=LANES))
    assert n >= 1
    source = cl_compiler.OpenCLRenderer(fast_math=fast_math, float_lanes=LANES).render(jammed)
    assert f"cx_vfloat{LANES}" in source and "vload" not in source and "vstore" not in source
    assert ("fma(" in source) != fast_math  # with fast_math a multiply-add the driver contracts
    artifact = BACKEND.compiler.compile(source, {"form": form, "fast_math": fast_math})
    batch = random_batch(rng, n_trees=7, max_leaves=9, arity=2)
    bufs, sizes = inputs(batch, program, rng)
    table = bufs["child_table"].copy()
    inner = np.flatnonzero(table[:, 0] >= 0)
    table[inner[::4], 1] = -1
    bufs["child_table"] = table
    want = interpret.run(program, dict(bufs), sizes)
    got = artifact.run(physical_arrays(jammed, dict(bufs)), sizes)
    for name in ("h", "c"):
        _close(got[name], want[name], "float32")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("form", ["per_level", "single_group"])
@pytest.mark.parametrize("builder", [tree_rnn, child_sum, tree_lstm], ids=lambda b: b.__name__)
def test_hand_built_programs_match_the_interpreter(builder, form, dtype):
    rng = np.random.default_rng(3)
    program = builder(form="per_level", dtype=dtype, H=16)
    artifact = BACKEND.compiler.compile(BACKEND.renderer.render(program), {"form": form})
    for _ in range(2):  # the second call reuses the pools, with a different batch
        batch = random_batch(rng, n_trees=5, arity=None if builder is child_sum else 2)
        bufs, sizes = inputs(batch, program, rng)
        want = interpret.run(program, bufs, sizes)
        got = artifact.run(bufs, sizes)
        assert artifact.last_form == form
        for name in ("h", "c"):
            if name in want:
                _close(got[name], want[name], dtype)


def test_a_program_with_a_grid_barrier_runs_as_one_work_group():
    rng = np.random.default_rng(0)
    program = tree_rnn(form="single", dtype="float32")
    artifact = BACKEND.compiler.compile(BACKEND.renderer.render(program), {})
    bufs, sizes = inputs(random_batch(rng), program, rng)
    _close(artifact.run(bufs, sizes)["h"], interpret.run(program, bufs, sizes)["h"], "float32")
    assert artifact.last_form == "single_group" and artifact.launches == 1
    with pytest.raises(ValueError, match="only as one work-group"):
        BACKEND.compiler.compile(BACKEND.renderer.render(program), {"form": "per_level"})


def _trees(n: int, seed: int, vocab: int, arity: int | None = 2):
    rng = np.random.default_rng(seed)

    def tree(leaves: int):
        if leaves == 1:
            return int(rng.integers(vocab))
        if arity is None:
            k = int(rng.integers(1, min(3, leaves) + 1))
            if k == 1:
                return (tree(leaves),) if leaves < 3 else (tree(leaves - 1), tree(1))
            cuts = sorted(rng.choice(np.arange(1, leaves), size=k - 1, replace=False))
            parts = np.diff([0, *cuts, leaves])
            return tuple(tree(int(p)) for p in parts)
        left = int(rng.integers(1, leaves))
        return (tree(left), tree(leaves - left))

    return [tree(int(rng.integers(1, 9))) for _ in range(n)]


def _parent_arrays(n: int, seed: int, vocab: int):
    """Random variable-arity trees with a token at every node (child-sum reads one everywhere)."""
    from cortex.core.linearize import ParentArray

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        size = int(rng.integers(1, 12))
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, size)]
        out.append(ParentArray(parents, words=rng.integers(0, vocab, size).tolist()))
    return out


MODELS = {
    "TreeLSTM": lambda dt: cortex.models.TreeLSTM(vocab=30, embed=12, hidden=16, dtype=dt),
    "TreeRNN": lambda dt: cortex.models.TreeRNN(vocab=30, hidden=16, dtype=dt),
    "TreeGRU": lambda dt: cortex.models.TreeGRU(vocab=30, embed=12, hidden=16, dtype=dt),
    "ChildSumTreeLSTM": lambda dt: cortex.models.ChildSumTreeLSTM(vocab=30, embed=12, hidden=16, dtype=dt),
    # 32 columns: the matrix products' merged column loop is a 32-lane vector (wide_lanes)
    "MVRNN": lambda dt: cortex.models.MVRNN(vocab=30, hidden=32, dtype=dt),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_zoo_models_match_the_reference(model, dtype):

    m = MODELS[model](dtype)
    exe = cortex.compile(m, target="opencl")
    trees = _parent_arrays(6, 1, 30) if model.startswith("ChildSum") else _trees(6, seed=1, vocab=30)
    for batch_trees in (trees[:1], trees):  # b1 (single work-group form) and a batch
        batch = exe.linearize(batch_trees)
        out = exe.run(batch)
        ref = evaluate(exe.graph, m.params, batch)
        for state, want in ref.items():
            _close(out.nodes(state), want, dtype)


@pytest.mark.parametrize("model", ["TreeLSTM", "ChildSumTreeLSTM"])
def test_token_tables_are_filled_on_use_and_reach_the_device(model):
    """The token tables start as zeros; each call computes the rows of its new tokens and copies
    them to the device buffers (made at the first launch) before its launch: later calls with
    other tokens, and a fill of every row, still match the reference."""
    m = MODELS[model]("float32")
    exe = cortex.compile(m, target="opencl")
    assert exe.table_rows == (0, 30)
    structs = ((lambda n, seed: _parent_arrays(n, seed, 30)) if model.startswith("ChildSum")
               else (lambda n, seed: _trees(n, seed=seed, vocab=30)))
    for seed, n in ((2, 1), (3, 6), (4, 6)):  # the first call makes the buffers; the others add rows
        batch = exe.linearize(structs(n, seed))
        out = exe.run(batch)
        for state, want in evaluate(exe.graph, m.params, batch).items():
            _close(out.nodes(state), want, "float32")
    done, vocab = exe.table_rows
    assert 0 < done < vocab
    assert exe.fill_tables() == vocab - done and exe.table_rows == (vocab, vocab)
    batch = exe.linearize(structs(6, 5))
    for state, want in evaluate(exe.graph, m.params, batch).items():
        _close(exe.run(batch).nodes(state), want, "float32")


def _other_inputs():
    from cortex.core.linearize import Grid, Sequence

    rng = np.random.default_rng(5)
    return {
        "TreeFC": (lambda dt: cortex.models.TreeFC(vocab=20, embed=8, hidden=8, dtype=dt), [((1, 2), 3), 4]),
        "DAGRNN": (lambda dt: cortex.models.DAGRNN(hidden=8, features=5, dtype=dt),
                   [Grid(3, 4, features=rng.standard_normal((12, 5))), Grid(1, 2, features=rng.standard_normal((2, 5)))]),
        "SeqLSTM": (lambda dt: cortex.models.SeqLSTM(hidden=8, vocab=20, embed=6, dtype=dt),
                    [Sequence([1, 2, 3, 4]), Sequence([5])]),
        "SeqGRU": (lambda dt: cortex.models.SeqGRU(hidden=8, features=5, dtype=dt),
                   [Sequence(rng.standard_normal((4, 5)))]),
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", ["TreeFC", "DAGRNN", "SeqLSTM", "SeqGRU"])
def test_grids_sequences_and_features_match_the_reference(model, dtype):
    make, structures = _other_inputs()[model]
    m = make(dtype)
    exe = cortex.compile(m, target="opencl")
    batch = exe.linearize(structures)
    ref = evaluate(exe.graph, m.params, batch)
    out = exe.run(batch)
    for state, want in ref.items():
        _close(out.nodes(state), want, dtype)


@pytest.mark.parametrize("form", ["per_level", "single_group"])
def test_the_gpu_schedule_runs_correctly_too(monkeypatch, form):
    """A GPU's capabilities (hidden units on work-items, transposed weights, 256 threads per
    group, local memory) scheduled and run on this device: the grid code path, checked here."""
    from dataclasses import replace

    from cortex.plugins.opencl import backend

    def as_gpu(info):
        return cl_device.capabilities(replace(info, kind="GPU"))

    monkeypatch.setattr(backend, "capabilities", as_gpu)
    m = cortex.models.TreeLSTM(vocab=30, embed=8, hidden=16)
    exe = cortex.compile(m, target="opencl", form=form, schedule={"threads": 32})
    assert exe.schedule.parallel == "both" and exe.backend.capabilities.has_grid
    batch = exe.linearize(_trees(5, 8, 30))
    out = exe.run(batch)
    assert exe.artifact.local_size("level" if form == "per_level" else "cx_single_group") == 32
    for state, want in evaluate(exe.graph, m.params, batch).items():
        _close(out.nodes(state), want, "float32")


@pytest.mark.parametrize("form", ["per_level", "single_group"])
def test_node_blocked_state_matches_the_reference(form):
    """``state_layout="node_blocked"`` in both execution forms: states read back row-major."""
    for m in (cortex.models.TreeLSTM(vocab=30, embed=8, hidden=16), cortex.models.MVRNN(vocab=30, hidden=8)):
        exe = cortex.compile(m, target="opencl", form=form,
                             schedule={"state_layout": "node_blocked", "state_block": 8})
        for batch_trees in (_trees(1, 3, 30), _trees(6, 4, 30)):
            batch = exe.linearize(batch_trees)
            out = exe.run(batch)
            for state, want in evaluate(exe.graph, m.params, batch).items():
                assert out.nodes(state).shape == want.shape
                _close(out.nodes(state), want, "float32")


def test_auto_form_uses_one_work_group_for_small_inputs_and_levels_for_big_ones():
    m = cortex.models.TreeRNN(vocab=30, hidden=8)
    small, big = _trees(1, 2, 30), _trees(8, 3, 30)
    probe = cortex.compile(m, target="opencl", schedule={"kernel_form": "per_level"})
    limit = max(n for n in (8, 32, 64, 128, 256, 512, 1024, 4096) if n < probe.linearize(big).num_nodes)
    exe = cortex.compile(m, target="opencl", schedule={"kernel_form": "auto", "single_group_nodes": limit})
    assert any(n.startswith(f"kernel_form=auto: one work-group for inputs of at most {limit} nodes")
               for n in exe.lowered.notes)
    small, big = exe.linearize(small), exe.linearize(big)
    assert small.num_nodes <= limit < big.num_nodes
    exe.run(small)  # one launch: of one work-group, or shared levels where the workers are pinned
    one_launch = "shared_levels" if exe.artifact.level_groups > 1 else "single_group"
    assert exe.artifact.last_form == one_launch and exe.artifact.launches == 1
    exe.run(big)
    assert exe.artifact.last_form == "per_level" and exe.artifact.launches == big.num_levels
    probe.run(small)  # the schedule's kernel_form="per_level": every input a launch per level
    assert probe.artifact.last_form == "per_level"
    single = cortex.compile(m, target="opencl", schedule={"kernel_form": "single"})
    single.run(big)
    assert single.artifact.last_form == "single_group"


def test_buffers_are_allocated_once_and_grow_only_for_bigger_batches():
    m = cortex.models.TreeLSTM(vocab=30, embed=8, hidden=8)
    exe = cortex.compile(m, target="opencl")
    art = exe.artifact
    big, small = exe.linearize(_trees(8, 4, 30)), exe.linearize(_trees(2, 5, 30))
    exe.run(big)
    pools = (art._inputs.buffer, art._outputs.buffer)
    params = [h.device for h in exe._params.values()]
    exe.run(small)
    exe.run(big)
    assert (art._inputs.buffer, art._outputs.buffer) == pools
    assert [h.device for h in exe._params.values()] == params  # params uploaded once
    assert len(art._plans) == 2  # one layout per shape of call, made once
    want = exe.run(small).root("h")
    huge = exe.linearize(_trees(300, 6, 30))
    exe.run(huge)
    assert art._outputs.buffer is not pools[1] and art._outputs.capacity >= huge.num_nodes * 8 * 4
    assert len(art._plans) == 1  # the others' sub-buffers were of the replaced pool
    np.testing.assert_array_equal(exe.run(small).root("h"), want)


def test_per_call_arrays_go_up_in_one_transfer(monkeypatch):
    import pyopencl as cl

    m = cortex.models.TreeRNN(vocab=30, hidden=8)
    exe = cortex.compile(m, target="opencl")
    batch = exe.linearize(_trees(4, 7, 30))
    exe.run(batch)
    calls = []
    real = cl.enqueue_copy
    monkeypatch.setattr(cl, "enqueue_copy", lambda *a, **k: calls.append(a[1:3]) or real(*a, **k))
    exe.run(batch)
    assert len(calls) == 2  # one packed upload of every index array, one read-back of the outputs


def test_big_outputs_are_read_through_a_map_of_the_output_pool(monkeypatch):
    """Outputs of at least ``MAP_READ_BYTES`` are read by mapping the output pool (no read-back
    copy); the map is released before the next call's kernels write the pool again, also when
    the pool grows in between. The states are those of the copying read-back."""
    import pyopencl as cl

    from cortex.plugins.opencl import runtime as cl_runtime

    m = cortex.models.TreeLSTM(vocab=30, embed=8, hidden=8)
    exe = cortex.compile(m, target="opencl")
    batches = [exe.linearize(_trees(n, seed, 30)) for n, seed in ((3, 1), (40, 2), (3, 1), (2, 3))]
    want = [exe.run(b).root("h").copy() for b in batches]  # the copy (these outputs are small)
    monkeypatch.setattr(cl_runtime, "MAP_READ_BYTES", 1)
    calls = []
    real = cl.enqueue_copy
    monkeypatch.setattr(cl, "enqueue_copy", lambda *a, **k: calls.append(a[1:3]) or real(*a, **k))
    for batch, expected in zip(batches, want):
        calls.clear()
        got = exe.run(batch)
        assert exe.artifact._mapped is not None and len(calls) == 1  # the upload alone
        np.testing.assert_array_equal(got.root("h"), expected)
        np.testing.assert_array_equal(exe(batch).root("c"), exe.run(batch).root("c"))


def test_a_single_leaf_input_with_no_edges_runs():
    m = cortex.models.TreeLSTM(vocab=30, embed=8, hidden=8)
    exe = cortex.compile(m, target="opencl")
    batch = exe.linearize([7])
    assert len(batch.child_ids) == 0
    out = exe.run(batch)
    _close(out.nodes("h"), evaluate(exe.graph, m.params, batch)["h"], "float32")


# ------------------------------------------------------------------------------- devices


def test_device_selection_by_index_type_name_and_pyopencl_ctx(monkeypatch):
    label, first = cl_device.list_devices()[0]
    index = label.split(" ", 1)[0]
    kind = "cpu" if "CPU" in label else "gpu" if "GPU" in label else None
    assert cl_device.select_device(index) == first
    if kind:
        assert cl_device.select_device(kind).type & first.type
    assert cl_device.select_device("name:" + first.name.strip()[:6]) is not None
    monkeypatch.setenv("PYOPENCL_CTX", index)
    assert cl_device.select_device("") == first
    monkeypatch.setenv("PYOPENCL_CTX", "9:9")
    with pytest.raises(cl_device.OpenCLDeviceError, match=r"PYOPENCL_CTX asks for OpenCL device '9:9'.*devices here"):
        cl_device.select_device("")
    with pytest.raises(cl_device.OpenCLDeviceError, match="no OpenCL device name contains"):
        cl_device.select_device("name:no-such-device-anywhere")


def test_bad_device_options_are_rejected_before_any_work():
    with pytest.raises(cortex.core.errors.InvalidOptionError, match="device"):
        cortex.compile(cortex.models.TreeRNN(vocab=5, hidden=4), target="opencl", device="gpu0")
    with pytest.raises(cortex.core.errors.TargetNotRunnableError, match="does not exist"):
        cortex.compile(cortex.models.TreeRNN(vocab=5, hidden=4), target="opencl", device="7:7")


def test_capabilities_come_from_the_device():
    info = cl_device.device_for("").info
    caps = BACKEND.capabilities
    assert caps.dialect == "opencl" and not caps.grid_barrier and not caps.single_call
    assert caps.supports_fp64 == info.fp64 and caps.num_cores == info.compute_units
    assert caps.has_grid == (info.kind != "CPU")
    assert caps.single_group_form  # kernel_form="auto" picks the form per call
    if info.kind == "CPU":
        assert caps.vector_bits == 32 * info.native_float_lanes and dict(caps.preferred)["node_jam"] == 4


def test_no_platform_is_a_clear_not_runnable_error(monkeypatch):
    import pyopencl as cl

    def boom():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", boom)
    with pytest.raises(cl_device.OpenCLDeviceError, match="no OpenCL platform found.*PLATFORM_NOT_FOUND"):
        cl_device.select_device("")


# ------------------------------------------------------------------------------- errors


def test_a_build_failure_shows_the_log_and_the_lines_it_names_and_leaves_no_file(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a leftover would land
    broken = "// line 1\n__kernel void k(__global float* x) { x[0] = undefined_name; }\n"
    with pytest.raises(cl_compiler.OpenCLBuildError) as err:
        BACKEND.compiler.build(broken, "broken")
    assert "undefined_name" in str(err.value) and err.value.source == broken
    assert "    2  __kernel void k" in str(err.value)  # the line the log names, numbered
    assert list(tmp_path.iterdir()) == []


def test_too_many_work_items_is_a_resource_error(monkeypatch):
    from dataclasses import replace

    from cortex.core.lowering import transforms as T

    program = T.bind(T.bind(tree_rnn(form="per_level", dtype="float32", H=8), "v", "group"), "j", "thread")
    art = BACKEND.compiler.compile(BACKEND.renderer.render(program), {"work_group_size": 64})
    monkeypatch.setattr(art.device, "info", replace(art.device.info, max_work_group_size=32))
    rng = np.random.default_rng(0)
    bufs, sizes = inputs(random_batch(rng), program, rng)
    with pytest.raises(OpenCLResourceError, match=r"work_group_size=64 is more than kernel .*at most 32 work-items"):
        art.run(bufs, sizes)


def test_a_device_out_of_resources_is_a_clear_error(monkeypatch):
    import pyopencl as cl

    program = tree_rnn(form="per_level", dtype="float32", H=8)
    art = BACKEND.compiler.compile(BACKEND.renderer.render(program), {"form": "per_level"})

    def out_of_resources(*args, **kwargs):
        raise RuntimeError("clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES")

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", out_of_resources)
    rng = np.random.default_rng(0)
    bufs, sizes = inputs(random_batch(rng), program, rng)
    with pytest.raises(OpenCLResourceError, match="ran out of resources running tree_rnn.*smaller batch"):
        art.run(bufs, sizes)


def test_a_batch_beyond_the_largest_allocation_is_a_resource_error(monkeypatch):
    from dataclasses import replace

    program = tree_rnn(form="per_level", dtype="float32", H=8)
    art = BACKEND.compiler.compile(BACKEND.renderer.render(program), {})
    dev = art.device
    monkeypatch.setattr(dev, "info", replace(dev.info, max_alloc_bytes=512))
    rng = np.random.default_rng(0)
    bufs, sizes = inputs(random_batch(rng, n_trees=20), program, rng)  # h: > 1 KiB
    with pytest.raises(OpenCLResourceError, match=r"needs [\d.]+ KiB of per-call inputs.*largest allocation "
                       r"\(512 bytes on .*split the batch"):
        art.run(bufs, sizes)


def test_cortex_info_lists_the_opencl_devices(capsys):
    from cortex.cli import main

    main(["info"])
    text = capsys.readouterr().out
    assert "OpenCL devices:" in text and _found.devices[0] in text
    label = cl_device.list_devices()[0][0]  # "P:D platform: device (TYPE)": the option value too
    assert f"devices: {label}, " in text and "compute units" in text


def test_fast_math_renders_an_inline_float32_sigmoid_accurate_over_the_whole_range():
    import pyopencl as cl

    program = tree_lstm(form="per_level", dtype="float32", H=16)
    fast = str(cl_compiler.OpenCLRenderer(fast_math=True).render(program))
    exact = str(cl_compiler.OpenCLRenderer(fast_math=False).render(program))
    assert cl_compiler.FAST_SIGMOID_HELPER in fast and cl_compiler.SIGMOID_HELPER not in fast
    assert cl_compiler.SIGMOID_HELPER in exact
    device = BACKEND.compiler.device
    src = cl_compiler.FAST_SIGMOID_HELPER + """
__kernel void f(__global const float* x, __global float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = cx_sigmoid_float32(x[i]);
}"""
    built = BACKEND.compiler.build(src, "sigmoid_probe", cl_compiler.FAST_MATH_OPTIONS)
    x = np.concatenate([np.linspace(-120, 120, 200001), [0.0, -0.0, 1e-30, -1e-30, 87.0, -87.0,
                                                          88.0, -88.0, 1e30, -1e30]]).astype(np.float32)
    y = np.empty_like(x)
    mf = cl.mem_flags
    bx = cl.Buffer(device.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    by = cl.Buffer(device.context, mf.WRITE_ONLY, y.nbytes)
    cl.Kernel(built, "f")(device.queue, (1,), (1,), bx, by, np.int32(x.size))
    cl.enqueue_copy(device.queue, y, by)
    device.queue.finish()
    with np.errstate(over="ignore"):
        want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(y, want, rtol=3e-7, atol=1e-30)
