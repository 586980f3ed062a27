"""The cuda target's compile-only part (no GPU needed, nvcc needed): the backend's capabilities
without a device, every zoo model's lowered program in both kernel forms rendered through the
backend and compiled to a cubin for sm_90, the persistent form's grid barrier and cooperative
launch, the cubin cache, and nvcc's errors."""

from __future__ import annotations

import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "models"))
from zoo_structures import zoo_cases  # noqa: E402

from cortex.core import loopir as ir  # noqa: E402
from cortex.core.errors import TargetNotRunnableError  # noqa: E402
from cortex.core.frontend.trace import trace  # noqa: E402
from cortex.core.lowering.lower import lower  # noqa: E402
from cortex.core.lowering.schedule import ScheduleSpace  # noqa: E402
from cortex.core.passes.pipeline import run_passes  # noqa: E402
from cortex.core.plugin import hostinfo  # noqa: E402
from cortex.plugins.cuda.backend import make_backend  # noqa: E402
from cortex.plugins.cuda.compiler import CudaSource, NvccCompiler, NvccError, resolve_arch  # noqa: E402
from cortex.plugins.cuda.device import DeviceInfo, nominal_device  # noqa: E402
from cortex.plugins.cuda.launch import KernelPlan  # noqa: E402

needs_nvcc = pytest.mark.skipif(hostinfo.find_nvcc() is None, reason="nvcc (the CUDA toolkit) is not installed")
OPTIONS = {"arch": "sm_90", "device": 0, "threads_per_block": 256}


def no_gpu(ordinal: int) -> DeviceInfo | None:
    return None


@pytest.fixture
def backend(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_CACHE_DIR", str(tmp_path / "cache"))  # really run nvcc
    return make_backend(OPTIONS, device_probe=no_gpu)


def lowered_programs(caps, dtype="float32", **knobs):
    """{label: program} for every zoo model, default schedule (the persistent form) and per-level."""
    out = {}
    space = ScheduleSpace(caps, dtype)
    for i, (label, name, model, _) in enumerate(zoo_cases(dtype)):
        graph = run_passes(trace(model))
        for form in ("single", "per_level"):
            s = space.with_knobs(kernel_form=form, persistent=form == "single", **knobs)
            out[f"{i}_{name}_{form}"] = lower(graph, s, caps, dtype).program
    return out


def test_capabilities_without_a_gpu_are_the_architectures():
    b = make_backend({"arch": "auto"}, device_probe=no_gpu)
    caps = b.capabilities
    assert caps.has_grid and caps.grid_barrier and caps.group_barrier and caps.dialect == "cuda"
    assert caps.shared_memory_bytes == 227 * 1024 and caps.max_threads_per_group == 1024
    assert caps.max_groups == 132 * (2048 // 256)
    assert ScheduleSpace(caps, "float32").default().kernel_form == "single"
    assert b.compiler.arch({"arch": "auto"}) == "sm_90"
    small = make_backend({"arch": "sm_75"}, device_probe=no_gpu).capabilities
    assert small.shared_memory_bytes == 64 * 1024


def test_arch_auto_follows_the_device():
    h100 = DeviceInfo("NVIDIA H100", (9, 0), 132)
    assert resolve_arch("auto", lambda: h100.arch) == "sm_90"
    assert resolve_arch("sm_80", lambda: h100.arch) == "sm_80"
    b = make_backend({"arch": "auto", "threads_per_block": 128}, device_probe=lambda n: h100)
    assert b.capabilities.max_groups == 132 * 16
    with pytest.raises(ValueError, match="not a CUDA architecture"):
        resolve_arch("volta", None)
    assert nominal_device("sm_121").compute_capability == (12, 1)


def test_runtime_refuses_to_run_without_a_gpu_and_says_why():
    b = make_backend(OPTIONS, why_not=lambda: ("no CUDA driver found", "run on a machine with an NVIDIA GPU"),
                     device_probe=no_gpu)
    with pytest.raises(TargetNotRunnableError, match="'cuda' cannot run here: no CUDA driver"):
        b.runtime.allocate((3,), "float32")


@needs_nvcc
def test_every_zoo_model_compiles_to_a_cubin_for_sm_90(backend):
    programs = lowered_programs(backend.capabilities)
    programs.update({f"{k}_f64": v for k, v in lowered_programs(backend.capabilities, "float64").items()
                     if k.endswith("single") and ("TreeLSTM" in k or "ChildSum" in k)})
    sources = [backend.renderer.render(p) for p in programs.values()]
    assert all(isinstance(s, CudaSource) and s.program is p for s, p in zip(sources, programs.values()))
    # compiled: every per-level program, the persistent (default) programs of the models of
    # COMPILED_SINGLE and the float64 ones; the conformance suite on cuda compiles every model's default program
    # in both float types, so the rest are checked as rendered and planned only
    compiled = [i for i, label in enumerate(programs) if not label.endswith("single") or _compiled_single(label)]
    cubins = dict(zip(compiled, backend.compiler.compile_many([sources[i] for i in compiled], OPTIONS)))
    assert backend.compiler.nvcc_runs == len(compiled)
    assert sum(1 for p in programs.values() if lane_widths(p) == {32}) >= len(programs) // 2  # auto lanes
    for i, ((label, p), src) in enumerate(zip(programs.items(), sources)):
        cubin = cubins.get(i)
        if cubin is not None:
            assert cubin.arch == "sm_90" and cubin.image[:4] == b"\x7fELF" and cubin.program is p, label
        resources = cubin.resources() if cubin is not None else None
        for k in p.kernels:
            plan = KernelPlan(p, k.name, 256)
            assert resources is None or plan.symbol in resources, (label, plan.symbol)
            assert plan.symbol in src, (label, plan.symbol)
            if label.endswith("single") or label.endswith("single_f64"):
                # the persistent form: the level loop inside one kernel, a grid barrier between
                # levels, launched cooperatively
                assert "cooperative_groups::this_grid().sync();" in src, label
                assert plan.cooperative, label
            else:
                assert "this_grid" not in src and not plan.cooperative, label


#: The models whose persistent program (the cuda default) the tests here compile: one of each
#: kind of cell (gated, child-sum, matrix products, grid, sequence); the conformance suite on
#: cuda compiles every model's default program.
COMPILED_SINGLE = ("TreeGRU", "TreeLSTM", "ChildSumTreeLSTM", "MVRNN", "DAGRNN", "SeqLSTM")
#: ... and with lane reductions of 4: one fixed-arity, one child-sum, one with matrix products.
LANES_SINGLE = ("TreeLSTM", "ChildSumTreeLSTM", "MVRNN")


def _compiled_single(label: str, names: tuple[str, ...] = COMPILED_SINGLE) -> bool:
    """``label`` (``{index}_{model}_single``) is the first zoo case of a model in ``names``."""
    index, name, _ = label.split("_", 2)
    return name in names and int(index) == next(i for i, c in enumerate(zoo_cases("float32")) if c[1] == name)


def lane_widths(p) -> set[int]:
    return {n.lanes for k in p.kernels for n in ir.walk(k.body) if isinstance(n, ir.Reduce) and n.lanes > 1}


@needs_nvcc
@pytest.mark.parametrize("knobs", [{"reduce_lanes": 4, "unroll": 2}, {"reduce_lanes": 1}], ids=["lanes4", "lanes1"])
def test_every_zoo_model_with_lane_reductions_compiles_for_sm_90(backend, knobs):
    """The reduce_lanes knob on every zoo model in both kernel forms (the default, auto, gives
    the small zoo models 32 lanes: the test above): the CUDA source has the lane-group loops and
    the xor-shuffle butterflies, the persistent form compiles for sm_90, and the plan launches
    blocks of whole lane groups; at reduce_lanes=1 there are none (rendered only)."""
    programs = lowered_programs(backend.capabilities, **knobs)
    sources = [backend.renderer.render(p) for p in programs.values()]
    if knobs["reduce_lanes"] == 1:  # the form the lowering produced before lanes existed: render only
        assert not any(lane_widths(p) for p in programs.values()) and not any("__shfl" in s for s in sources)
        return
    # compiled: the persistent form of LANES_SINGLE's models (the per-level form's lane loops are
    # the same statements in more kernels; at the default 32 lanes the test above compiles both);
    # every model's lane loops are checked in the source below
    single = [i for i, label in enumerate(programs) if label.endswith("single") and _compiled_single(label, LANES_SINGLE)]
    cubins = dict(zip(single, backend.compiler.compile_many([sources[i] for i in single], OPTIONS)))
    gemv = 0
    for i, ((label, p), src) in enumerate(zip(programs.items(), sources)):
        if i in cubins:
            assert cubins[i].image[:4] == b"\x7fELF", label
        widths = lane_widths(p)
        if widths:
            gemv += 1
            assert widths == {4} and "__shfl_xor_sync(" in src and "((int)threadIdx.x / 4)" in src, label
            for k in p.kernels:
                assert KernelPlan(p, k.name, 256).block % 4 == 0, label
        else:
            assert "__shfl" not in src, label
    assert gemv >= len(programs) // 2


@needs_nvcc
def test_persistent_tree_lstm_keeps_its_weights_in_shared_memory(backend):
    (label, name, model, _), = [c for c in zoo_cases("float32") if c[1] == "TreeLSTM"][:1]
    graph = run_passes(trace(model))
    space = ScheduleSpace(backend.capabilities, "float32")
    low = lower(graph, space.with_knobs(persistent=True), backend.capabilities, "float32")
    src = backend.renderer.render(low.program)
    cubin = backend.compiler.compile(src, OPTIONS)
    assert "__shared__" in src or "cx_smem" in src, low.notes
    (kernel,) = low.program.kernels
    assert KernelPlan(low.program, kernel.name, 256).cooperative
    assert cubin.resources()[f"{low.program.name}_{kernel.name}"]["registers"] > 0


@needs_nvcc
def test_cubins_are_cached_in_memory_and_on_disk(backend, tmp_path):
    p = next(iter(lowered_programs(backend.capabilities).values()))
    src = backend.renderer.render(p)
    first = backend.compiler.compile(src, OPTIONS)
    again = backend.compiler.compile(src, OPTIONS)
    assert again.image == first.image and backend.compiler.nvcc_runs == 1
    fresh = NvccCompiler()  # another process: the disk cache
    assert fresh.compile(src, OPTIONS).image == first.image and fresh.nvcc_runs == 0
    assert fresh.cache_key(src, OPTIONS) != fresh.cache_key(src, {**OPTIONS, "arch": "sm_80"})
    assert list((tmp_path / "cache" / "cuda").glob("*.cubin"))


@needs_nvcc
def test_nvcc_errors_show_the_log_and_the_numbered_source(backend):
    with pytest.raises(NvccError, match=r"(?s)nvcc -arch=sm_90 failed.*undefined.*--- source ---\n    1  "):
        backend.compiler.compile("__global__ void k() { undefined_thing(); }\n", OPTIONS)
    with pytest.raises(TypeError, match="not bytes"):
        backend.compiler.compile(b"\x00", OPTIONS)


@pytest.mark.parametrize("damage", ["truncated", "planted"])
def test_a_truncated_or_planted_cubin_is_not_returned(tmp_path, monkeypatch, damage):
    """No nvcc needed: the disk cache's entries are checked (cortex.core.diskcache)."""
    from cortex.plugins.cuda.compiler import Cubin, cache_dir

    monkeypatch.setenv("CORTEX_CACHE_DIR", str(tmp_path / "cache"))
    compiler = NvccCompiler()
    compiler._store("k", Cubin(b"\x7fELF cubin image" * 50, "sm_90", "ptxas info: Used 32 registers"))
    assert compiler._load("k", "sm_90").ptxas_log == "ptxas info: Used 32 registers"
    entry = cache_dir() / "k.cubin"
    entry.write_bytes(entry.read_bytes()[:-9] if damage == "truncated" else b"\x7fELF someone else's cubin")
    assert compiler._load("k", "sm_90") is None and not entry.exists()
