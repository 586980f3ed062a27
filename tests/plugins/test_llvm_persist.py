"""The disk cache and persistence on the llvm target (and on OpenCL when a device exists):
cached sources and machine code in a second compile and a second process, damaged entries,
keys that never let another CPU's code in, save/load and pickling with bit-equal outputs."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite (pip install 'cortex-compiler[llvm]')")

import cortex  # noqa: E402
from cortex.core import diskcache  # noqa: E402
from cortex.core.plugin import hostinfo  # noqa: E402
from cortex.models import TreeLSTM  # noqa: E402
from cortex.plugins.cpu_llvm import jit  # noqa: E402

TREES = [((1, 2), (3, (4, 5))), 6, ((7, 8), 9)]


def _model(seed: int = 1) -> TreeLSTM:
    return TreeLSTM(hidden=12, embed=5, vocab=17, seed=seed)


def _origins(exe) -> dict[str, str]:
    return {e.namespace: e.origin for e in exe.cache_entries}


def _equal(a, b):
    for s in a.states:
        np.testing.assert_array_equal(a.nodes(s), b.nodes(s))


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(diskcache, "_WARNED", set())
    return tmp_path / "cache"


def test_a_second_compile_reads_the_source_and_the_machine_code_from_the_cache(fresh_cache):
    first = cortex.compile(_model(), target="llvm")
    assert _origins(first) == {"lowered": "new", "sources": "new", "llvm": "new"} and not first.artifact.jit.from_cache
    again = cortex.compile(_model(), target="llvm")
    assert _origins(again) == {"lowered": "disk", "sources": "disk", "llvm": "disk"} and again.artifact.jit.from_cache
    assert str(again.source) == str(first.source)
    _equal(again(TREES), first(TREES))
    assert "define" in again.artifact.optimized_ir  # optimized again on request


def test_a_second_process_compiles_from_the_cache(fresh_cache):
    cortex.compile(_model(), target="llvm")
    code = ("import cortex; from cortex.models import TreeLSTM; "
            "exe = cortex.compile(TreeLSTM(hidden=12, embed=5, vocab=17, seed=1), target='llvm'); "
            "print(sorted((e.namespace, e.origin) for e in exe.cache_entries), exe.artifact.jit.from_cache)")
    env = {**os.environ, "CORTEX_CACHE_DIR": str(fresh_cache)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300, check=True).stdout
    assert "[('llvm', 'disk'), ('lowered', 'disk'), ('sources', 'disk')] True" in out


def test_a_damaged_object_entry_is_compiled_again_and_replaced(fresh_cache):
    first = cortex.compile(_model(), target="llvm")
    (entry,) = [e for e in first.cache_entries if e.namespace == "llvm"]
    path = diskcache.DiskCache("llvm").path_of(entry.key)
    path.write_bytes(path.read_bytes()[:100])  # truncated
    again = cortex.compile(_model(), target="llvm")
    assert not again.artifact.jit.from_cache and _origins(again)["llvm"] == "new"
    assert diskcache.DiskCache("llvm").get(entry.key) == entry.data  # rebuilt identically
    _equal(again(TREES), first(TREES))


def test_a_changed_generator_setting_is_a_new_source(fresh_cache, monkeypatch):
    from cortex.plugins.cpu_llvm import reductions

    first = cortex.compile(_model(), target="llvm")
    monkeypatch.setattr(reductions, "LANE_REDUCE", not reductions.LANE_REDUCE)
    again = _origins(cortex.compile(_model(), target="llvm"))
    assert again["lowered"] == "disk" and again["sources"] == "new"  # the old source is not read
    assert first


def test_a_changed_lowering_setting_or_an_unnamed_pass_is_a_new_lowering(fresh_cache, monkeypatch):
    from cortex.core.passes import hoist
    from cortex.core.passes.pipeline import DEFAULT_PASSES

    cortex.compile(_model(), target="llvm")
    monkeypatch.setattr(hoist, "DEFAULT_MAX_TABLE_ELEMENTS", hoist.DEFAULT_MAX_TABLE_ELEMENTS + 1)
    assert _origins(cortex.compile(_model(), target="llvm"))["lowered"] == "new"
    unnamed = cortex.compile(_model(), target="llvm", passes=[*DEFAULT_PASSES, lambda g: g])
    assert "lowered" not in _origins(unnamed)  # no key: not cached


def test_machine_code_keys_name_the_cpu_its_features_and_the_tools(monkeypatch):
    ir_text = str(cortex.compile(_model(), target="llvm").source)
    host = jit.object_key(ir_text)
    assert jit.object_key(ir_text, cpu="skylake-avx512") != host or jit.cpu_info().name == "skylake-avx512"
    assert jit.object_key(ir_text, opt_level=2) != host
    real = jit.cpu_info
    monkeypatch.setattr(jit, "cpu_info", lambda cpu="host": jit.CpuInfo(real(cpu).name, real(cpu).features + ",-avx512vnni", 512))
    assert jit.object_key(ir_text) != host
    monkeypatch.setattr(jit, "cpu_info", real)
    import llvmlite

    monkeypatch.setattr(llvmlite, "__version__", "0.0.1")
    assert jit.object_key(ir_text) != host


def test_save_and_load_give_bit_equal_outputs_and_use_the_saved_artifacts(fresh_cache, tmp_path):
    exe = cortex.compile(_model(), target="llvm")
    path = exe.save(tmp_path / "treelstm.cortex")
    want = exe(TREES)
    loaded = cortex.load(path)
    assert _origins(loaded) == {"lowered": "saved", "sources": "saved", "llvm": "saved"} and loaded.artifact.jit.from_cache
    _equal(loaded(TREES), want)
    lean = cortex.load(exe.save(tmp_path / "lean.cortex", artifacts=False))
    assert _origins(lean) == {"lowered": "disk", "sources": "disk", "llvm": "disk"}  # compiled from the recipe
    _equal(lean(TREES), want)


def test_a_node_blocked_state_survives_save_load_and_pickling(fresh_cache, tmp_path):
    exe = cortex.compile(_model(), target="llvm", schedule={"state_layout": "node_blocked", "state_block": 4})
    want = exe(TREES)
    loaded = cortex.load(exe.save(tmp_path / "blocked.cortex"))
    assert loaded.schedule.state_layout == "node_blocked" and loaded.schedule.state_block == 4
    _equal(loaded(TREES), want)
    _equal(pickle.loads(pickle.dumps(exe))(TREES), want)
    row_major = cortex.compile(_model(), target="llvm")(TREES)  # the same sums, perhaps in another order
    for s in want.states:  # (on an AVX2 host, 12 hidden units are a vector of 8 and a tail)
        np.testing.assert_allclose(row_major.nodes(s), want.nodes(s), rtol=1e-6, atol=1e-7)


def test_a_saved_file_from_another_machine_is_compiled_again(fresh_cache, tmp_path, monkeypatch):
    exe = cortex.compile(_model(), target="llvm")
    path = exe.save(tmp_path / "e.cortex")
    monkeypatch.setenv("CORTEX_CACHE", "0")  # only the file could supply code
    real = jit.object_key
    monkeypatch.setattr(jit, "object_key", lambda *a, **k: real(*a, **k)[::-1])  # "another CPU"
    loaded = cortex.load(path)
    assert _origins(loaded) == {"lowered": "saved", "sources": "saved", "llvm": "new"} and not loaded.artifact.jit.from_cache
    _equal(loaded(TREES), exe(TREES))


def test_an_executable_goes_to_worker_processes(fresh_cache):
    exe = cortex.compile(_model(), target="llvm")
    want = exe(TREES)
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        outs = list(pool.map(exe, [TREES, TREES]))  # each worker unpickles and calls it
    for out in outs:
        _equal(out, want)
    assert pickle.loads(pickle.dumps(exe)).artifact.jit.from_cache


def test_an_unusable_cache_directory_compiles_without_it_and_says_why(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    monkeypatch.setenv("CORTEX_CACHE_DIR", str(shared))
    monkeypatch.setattr(diskcache, "_WARNED", set())
    with pytest.warns(diskcache.CacheWarning, match="refusing the cache directory .*group or others can write"):
        exe = cortex.compile(_model(), target="llvm")
    assert _origins(exe) == {"lowered": "new", "sources": "new", "llvm": "new"} and list(shared.iterdir()) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", diskcache.CacheWarning)
        _equal(cortex.compile(_model(), target="llvm")(TREES), exe(TREES))


# ---- OpenCL -----------------------------------------------------------------------------------

needs_opencl = pytest.mark.skipif(
    not hostinfo.opencl_devices().devices or __import__("importlib").util.find_spec("pyopencl") is None,
    reason="OpenCL unavailable: pyopencl or an OpenCL device is missing")


@needs_opencl
def test_opencl_builds_from_the_cached_binary_and_round_trips_a_file(fresh_cache, tmp_path, monkeypatch):
    """A driver that does not cache its builds: the program binary goes to the disk cache."""
    from dataclasses import replace

    from cortex.plugins.opencl.device import device_for

    device = device_for("")
    monkeypatch.setattr(device, "info", replace(device.info, driver_caches_builds=False))
    first = cortex.compile(_model(), target="opencl")
    assert first.backend.compiler.builds == 1 and _origins(first) == {"lowered": "new", "sources": "new", "opencl": "new"}
    again = cortex.compile(_model(), target="opencl")
    assert again.backend.compiler.builds == 0 and _origins(again) == {"lowered": "disk", "sources": "disk", "opencl": "disk"}
    want = first(TREES)
    _equal(again(TREES), want)
    loaded = cortex.load(first.save(tmp_path / "cl.cortex"))
    assert loaded.backend.compiler.builds == 0 and _origins(loaded) == {"lowered": "saved", "sources": "saved", "opencl": "saved"}
    _equal(loaded(TREES), want)


@needs_opencl
def test_opencl_on_a_driver_with_its_own_build_cache_makes_the_binary_only_to_save(fresh_cache, tmp_path, monkeypatch):
    """PoCL caches its builds; asking it for a binary compiles every kernel once more, so the
    compile leaves the binary out of the disk cache and makes it when the executable is saved
    or pickled: the saved file and the pickle still carry it."""
    from dataclasses import replace

    from cortex.plugins.opencl.device import device_for

    device = device_for("")
    monkeypatch.setattr(device, "info", replace(device.info, driver_caches_builds=True))
    first = cortex.compile(_model(), target="opencl")
    assert first.backend.compiler.builds == 1 and _origins(first) == {"lowered": "new", "sources": "new", "opencl": "new"}
    stored = fresh_cache / "opencl"
    assert not stored.exists() or not any(stored.iterdir())  # nothing written to the disk
    entry = next(e for e in first.cache_entries if e.namespace == "opencl")
    assert callable(entry.payload), "the binary was made at compile time"
    again = cortex.compile(_model(), target="opencl")  # from source again: the driver's cache
    assert again.backend.compiler.builds == 1 and _origins(again)["opencl"] == "new"
    want = first(TREES)
    _equal(again(TREES), want)
    loaded = cortex.load(first.save(tmp_path / "cl.cortex"))
    assert isinstance(entry.payload, bytes) and len(entry.payload) > 0  # made by the save
    assert loaded.backend.compiler.builds == 0 and _origins(loaded)["opencl"] == "saved"
    _equal(loaded(TREES), want)
    _equal(pickle.loads(pickle.dumps(first))(TREES), want)


@needs_opencl
def test_opencl_warmup_launches_each_execution_form(fresh_cache):
    exe = cortex.compile(_model(), target="opencl")
    nodes = exe.artifact.warmup_nodes
    forms = []
    real = exe.artifact.launch

    def launch(args):
        real(args)
        forms.append(exe.artifact.last_form)

    exe.artifact.launch = launch
    # a batch of several trees in between where the device runs tree groups; one tree on
    # shared levels where its workers are pinned
    one = "shared_levels" if exe.artifact.level_groups > 1 else "single_group"
    want = [one] + (["tree_groups"] if exe.artifact.tree_groups > 1 else []) + ["per_level"]
    assert exe.warmup() is exe and forms == want and nodes[0] == 1 and nodes[-1] > 1
