"""Every zoo model lowers, renders and compiles: plain C with ``cc -c -Wall -Werror -std=c11
-O2`` (with and without OpenMP), CUDA C with ``nvcc -c -arch=sm_90``; OpenCL C renders and
passes a C syntax check through the macro shim of ``test_render.py``.

The programs come from the pipeline's own stages (trace -> graph passes -> ``lower`` for a
target's Capabilities and schedule) with the target's default schedule plus fusion off and
leaf specialization off, and a random legal schedule. To keep compile time down all C files go
to one ``cc`` invocation, and the CUDA files to two ``nvcc`` invocations running in parallel.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "models"))
from test_render import OPENCL_SHIM  # noqa: E402
from zoo_structures import zoo_cases  # noqa: E402

from cortex.core.capabilities import Capabilities  # noqa: E402
from cortex.core.lower import lower  # noqa: E402
from cortex.core.passes.pipeline import run_passes  # noqa: E402
from cortex.core.render_c import render  # noqa: E402
from cortex.core.schedule import ScheduleSpace  # noqa: E402
from cortex.core.trace import trace  # noqa: E402

CC = shutil.which("cc")
NVCC = shutil.which("nvcc")

CPU = Capabilities(num_cores=2, vector_bits=512, cache_bytes_per_core=1 << 20, dialect="c")
CUDA = Capabilities(has_grid=True, grid_barrier=True, group_barrier=True,
                    max_threads_per_group=1024, max_groups=132, shared_memory_bytes=48 * 1024,
                    supports_fp64=True, dialect="cuda")
OPENCL = Capabilities(has_grid=True, grid_barrier=False, group_barrier=True,
                      max_threads_per_group=256, max_groups=64, shared_memory_bytes=32 * 1024,
                      supports_fp64=True, dialect="opencl")


def sources(caps: Capabilities, dtype: str, extra: int = 0) -> dict[str, str]:
    """``{file stem: rendered source}`` for every zoo model and a few schedules."""
    out = {}
    for i, (label, name, model, _) in enumerate(zoo_cases(dtype)):
        graph = run_passes(trace(model))
        space = ScheduleSpace(caps, dtype)
        picks = {"default": space.default(),
                 "unfused": space.with_knobs(fuse=False),
                 "noleafspec": space.with_knobs(leaf_specialization=False)}
        for j, s in enumerate(space.sample(1000 + i, extra)):
            picks[f"random{j}"] = s
        for kind, schedule in picks.items():
            program = lower(graph, schedule, caps, dtype).program
            out[f"m{i}_{name}_{kind}"] = render(program, caps.dialect)
    return out


def _write(tmp: pathlib.Path, srcs: dict[str, str], ext: str) -> list[str]:
    names = []
    for stem, text in srcs.items():
        (tmp / f"{stem}{ext}").write_text(text)
        names.append(f"{stem}{ext}")
    return names


@pytest.mark.skipif(CC is None, reason="no C compiler (cc) on PATH")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_c_of_every_zoo_model_compiles_with_warnings_as_errors(tmp_path, dtype):
    files = _write(tmp_path, sources(CPU, dtype, extra=1), ".c")
    assert len(files) >= 4 * 11
    flags = ["-c", "-Wall", "-Werror", "-std=c11", "-O2"]
    r = subprocess.run([CC, *flags, *files], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-6000:]
    assert all((tmp_path / f.replace(".c", ".o")).exists() for f in files)
    probe = subprocess.run([CC, "-fopenmp", "-x", "c", "-", "-c", "-o", str(tmp_path / "probe.o")],
                           input="int x;\n", capture_output=True, text=True)
    if probe.returncode == 0:  # the parallel loops' pragmas must compile too
        omp = tmp_path / "omp"
        omp.mkdir()
        r = subprocess.run([CC, *flags, "-fopenmp", *[str(tmp_path / f) for f in files]],
                           cwd=omp, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-6000:]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_cuda_of_every_zoo_model_compiles_with_nvcc(tmp_path):
    srcs = sources(CUDA, "float32")
    srcs.update({f"{k}_f64": v for k, v in sources(CUDA, "float64").items() if "default" in k})
    files = _write(tmp_path, srcs, ".cu")
    halves = [files[0::2], files[1::2]]
    procs = [subprocess.Popen([NVCC, "-c", "-arch=sm_90", *half], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for half in halves]
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"nvcc failed:\n{out[-6000:]}"
    assert all((tmp_path / f.replace(".cu", ".o")).exists() for f in files)


def test_opencl_of_every_zoo_model_renders(tmp_path):
    srcs = sources(OPENCL, "float32")
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
