"""Every zoo model lowers, renders and compiles: plain C with ``cc -c -Wall -Werror -std=c11
-O2`` (with and without OpenMP), CUDA C with ``nvcc -cubin -arch=sm_90`` (the device code the
renderer writes; ``-c`` would also compile nvcc's own host stubs with the host compiler, twice the
time); OpenCL C renders and
passes a C syntax check through the macro shim of ``test_render.py``.

The programs come from the pipeline's own stages (trace -> graph passes -> ``lower`` for a
target's Capabilities and schedule) with the target's default schedule in float32 and float64 (CUDA: float64
for every third model), plus one variant per model (fusion off, leaf specialization off, or a
random legal schedule, cycling).
To keep compile time down the C files go to two ``cc`` processes running in parallel, and the
CUDA sources are joined into two translation units (:func:`one_translation_unit`) compiled by
two ``nvcc`` processes in parallel.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "models"))
from test_render import OPENCL_SHIM, one_translation_unit  # noqa: E402
from zoo_structures import zoo_cases  # noqa: E402

from cortex.core.frontend.trace import trace  # noqa: E402
from cortex.core.lowering.lower import lower  # noqa: E402
from cortex.core.lowering.schedule import ScheduleSpace  # noqa: E402
from cortex.core.passes.pipeline import run_passes  # noqa: E402
from cortex.core.plugin.capabilities import Capabilities  # noqa: E402
from cortex.core.render.c_family import render  # noqa: E402

CC = shutil.which("cc")
NVCC = shutil.which("nvcc")

CPU = Capabilities(num_cores=2, vector_bits=512, cache_bytes_per_core=1 << 20, dialect="c")
CUDA = Capabilities(has_grid=True, grid_barrier=True, group_barrier=True,
                    max_threads_per_group=1024, max_groups=132, shared_memory_bytes=48 * 1024,
                    supports_fp64=True, dialect="cuda")
OPENCL = Capabilities(has_grid=True, grid_barrier=False, group_barrier=True,
                      max_threads_per_group=256, max_groups=64, shared_memory_bytes=32 * 1024,
                      supports_fp64=True, dialect="opencl")


def sources(caps: Capabilities, dtype: str, variants: str = "all") -> dict[str, str]:
    """``{file stem: rendered source}`` for every zoo model: the default schedule and, with
    ``variants="all"``, fusion off, leaf specialization off and one random legal schedule;
    with ``variants="one"``, one of those per model (cycling), to save compile time; with
    ``variants="recursive"``, ``refactor``, ``recursive_unroll=2`` and both instead.
    Program names are made unique (they name the kernels) so any sources can share one file."""
    out = {}
    for i, (label, name, model, _) in enumerate(zoo_cases(dtype)):
        graph = run_passes(trace(model))
        space = ScheduleSpace(caps, dtype)
        picks = {"default": space.default(),
                 "unfused": space.with_knobs(fuse=False),
                 "noleafspec": space.with_knobs(leaf_specialization=False),
                 "random": space.sample(1000 + i, 1)[0]}
        if variants == "none":
            picks = {"default": picks["default"]}
        elif variants == "recursive":  # recursive refactoring and unrolling, alone and together
            picks = {"refactor": space.with_knobs(refactor=True),
                     "unroll2": space.with_knobs(recursive_unroll=2),
                     "refactorunroll2": space.with_knobs(refactor=True, recursive_unroll=2)}
        elif variants == "one":
            kind = ("unfused", "noleafspec", "random")[i % 3]
            picks = {"default": picks["default"], kind: picks[kind]}
        for kind, schedule in picks.items():
            stem = f"m{i}_{name}_{kind}_{dtype[-2:]}"
            program = replace(lower(graph, schedule, caps, dtype).program, name=stem)
            out[stem] = render(program, caps.dialect)
    return out


def _write(tmp: pathlib.Path, srcs: dict[str, str], ext: str) -> list[str]:
    names = []
    for stem, text in srcs.items():
        (tmp / f"{stem}{ext}").write_text(text)
        names.append(f"{stem}{ext}")
    return names


def _run_in_parallel(commands: list[list[str]], cwd: pathlib.Path) -> None:
    procs = [subprocess.Popen(cmd, cwd=cwd, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for cmd in commands]
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{proc.args[0]} failed:\n{out[-6000:]}"


@pytest.mark.skipif(CC is None, reason="no C compiler (cc) on PATH")
def test_c_of_every_zoo_model_compiles_with_warnings_as_errors(tmp_path):
    """float32: default + one variant per model; float64: default; each file compiled by
    two ``cc`` processes in parallel, then the float32 defaults again with OpenMP on."""
    srcs = {**sources(CPU, "float32", "one"), **sources(CPU, "float64", "none")}
    files = _write(tmp_path, srcs, ".c")
    assert len(files) == 3 * len(zoo_cases("float32"))
    flags = ["-c", "-Wall", "-Werror", "-std=c11", "-O2"]
    _run_in_parallel([[CC, *flags, *files[0::2]], [CC, *flags, *files[1::2]]], tmp_path)
    assert all((tmp_path / f.replace(".c", ".o")).exists() for f in files)
    probe = subprocess.run([CC, "-fopenmp", "-x", "c", "-", "-c", "-o", str(tmp_path / "probe.o")],
                           input="int x;\n", capture_output=True, text=True)
    if probe.returncode == 0:  # the parallel loops' pragmas must compile too
        omp = tmp_path / "omp"
        omp.mkdir()
        defaults = [str(tmp_path / f) for f in files if "_default_32" in f]
        _run_in_parallel([[CC, *flags, "-fopenmp", *defaults[0::2]],
                          [CC, *flags, "-fopenmp", *defaults[1::2]]], omp)


def _compile_cuda(srcs: dict[str, str], tmp_path: pathlib.Path, parts: int) -> None:
    stems = list(srcs)
    for n in range(parts):
        (tmp_path / f"zoo{n}.cu").write_text(one_translation_unit({k: srcs[k] for k in stems[n::parts]}))
    _run_in_parallel([[NVCC, "-cubin", "-arch=sm_90", f"zoo{n}.cu"] for n in range(parts)], tmp_path)
    assert all((tmp_path / f"zoo{n}.cubin").exists() for n in range(parts))


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_cuda_of_every_zoo_model_compiles_with_nvcc(tmp_path):
    """Every model's default GPU schedule (float32) plus one variant each (fusion off, leaf
    specialization off or a random schedule), and the float64 default of every third model
    (nvcc spends about half a second of CPU per program)."""
    f64 = {k: v for k, v in sources(CUDA, "float64", "none").items() if int(k[1:k.index("_")]) % 3 == 0}
    srcs = {**sources(CUDA, "float32", "one"), **f64}
    assert len(srcs) == 2 * len(zoo_cases("float32")) + len(f64) and len(f64) >= 3
    _compile_cuda(srcs, tmp_path, 2)


def test_opencl_of_every_zoo_model_renders(tmp_path):
    srcs = sources(OPENCL, "float32", "one")
    assert all("__kernel" in text for text in srcs.values())
    if CC is None:
        return
    shim = tmp_path / "shim.h"
    shim.write_text(OPENCL_SHIM)
    files = _write(tmp_path, {k: v.replace("#pragma OPENCL EXTENSION cl_khr_fp64 : enable", "")
                              for k, v in srcs.items()}, ".c")
    r = subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror", "-std=c11", "-include", str(shim),
                        *files], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-6000:]


def test_recursive_refactoring_and_unrolling_render_in_every_dialect(tmp_path):
    """``refactor`` and ``recursive_unroll`` are LoopProgram/graph transforms: every C-family
    dialect renders them; C compiles with warnings as errors, OpenCL C passes the shim's syntax
    check, CUDA C compiles where nvcc is present."""
    c_srcs = sources(CPU, "float32", "recursive")
    cl_srcs = sources(OPENCL, "float32", "recursive")
    cu_srcs = sources(CUDA, "float32", "recursive")
    assert all("unit_nodes" in text for stem, text in {**c_srcs, **cl_srcs, **cu_srcs}.items() if "unroll2" in stem)
    if CC is None:
        return
    files = _write(tmp_path, c_srcs, ".c")
    flags = ["-c", "-Wall", "-Werror", "-std=c11", "-O2"]
    _run_in_parallel([[CC, *flags, *files[0::2]], [CC, *flags, *files[1::2]]], tmp_path)
    shim = tmp_path / "shim.h"
    shim.write_text(OPENCL_SHIM)
    cl = tmp_path / "cl"
    cl.mkdir()
    cl_files = _write(cl, {k: v.replace("#pragma OPENCL EXTENSION cl_khr_fp64 : enable", "")
                           for k, v in cl_srcs.items()}, ".c")
    r = subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror", "-std=c11", "-include", str(shim),
                        *cl_files], cwd=cl, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-6000:]
    if NVCC is not None:
        _compile_cuda(cu_srcs, tmp_path, 2)
