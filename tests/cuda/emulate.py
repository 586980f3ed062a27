"""Run the CUDA C that the renderer generates on the CPU, one OS thread per CUDA thread
(``cuda_emu.h``: barriers for ``__syncthreads``, the grid sync and the lanes of each
``__shfl_xor_sync``), so the cross-lane code — lane-group loops, lane shares of a reduction,
group masks, the butterfly — is executed here, not only compiled. The launches are the
program's host steps; blocks per launch are few (grid-stride loops make any grid correct), the
block size is the runtime's plan (whole lane groups). Shared memory is not emulated."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from typing import Callable, Mapping

import numpy as np

from cortex.core import loopir as ir
from cortex.core.render.c_family import kernel_symbol, render
from cortex.plugins.cuda.launch import KernelPlan, host_launches

HERE = pathlib.Path(__file__).parent
CXX = shutil.which("g++") or shutil.which("c++")
_CTYPES = {"float32": "float", "float64": "double", "int32": "int32_t"}


def _main(program: ir.Program, sizes: Mapping[str, int], grid: int, threads: int) -> str:
    lines = ["int main(int argc, char** argv) {", "  FILE* in = std::fopen(argv[1], \"rb\");"]
    for s in program.sizes:
        lines.append(f"  int32_t {s.name} = {int(sizes[s.name])};")
    for b in program.buffers:
        t = _CTYPES[b.dtype]
        lines += [f"  int64_t n_{b.name}; if (std::fread(&n_{b.name}, 8, 1, in) != 1) return 2;",
                  f"  {t}* {b.name} = ({t}*)std::malloc(n_{b.name} + 8);",
                  f"  if (n_{b.name} && std::fread({b.name}, 1, n_{b.name}, in) != (size_t)n_{b.name}) return 3;"]
    lines.append("  std::fclose(in);")
    names = [b.name for b in program.buffers] + list(program.size_names)
    plans = {k.name: KernelPlan(program, k.name, threads) for k in program.kernels}
    for kernel, args in host_launches(program, sizes):
        plan = plans[kernel]
        call = ", ".join(names + [str(a) for a in args])
        blocks = grid if plan.has_groups else 1
        lines.append(f"  cx_launch({blocks}, {plan.block}, [&] {{ {kernel_symbol(program, kernel)}({call}); }});")
    lines.append("  FILE* out = std::fopen(argv[2], \"wb\");")
    for b in program.buffers:
        lines.append(f"  std::fwrite({b.name}, 1, n_{b.name}, out);")
    lines += ["  std::fclose(out);", "  return 0;", "}"]
    return "\n".join(lines)


def run_emulated(program: ir.Program, buffers: Mapping[str, np.ndarray], sizes: Mapping[str, int],
                 workdir: pathlib.Path, grid: int = 3, threads: int = 64, timeout: float = 120,
                 edit: Callable[[str], str] | None = None) -> dict[str, np.ndarray]:
    """Every buffer of ``program`` after running its host steps on the emulator (outputs and
    temps start as zeros when not given). ``edit`` may change the rendered source first (tests
    that the emulator catches a broken butterfly)."""
    src = render(program, "cuda").replace("#include <cooperative_groups.h>\n", "")
    if edit is not None:
        src = edit(src)
    cpp = workdir / f"{program.name}_emu.cpp"
    cpp.write_text(f'#include "{HERE / "cuda_emu.h"}"\n{src}\n{_main(program, sizes, grid, threads)}\n')
    exe = workdir / f"{program.name}_emu"
    r = subprocess.run([CXX, "-std=c++20", "-O1", "-pthread", "-w", str(cpp), "-o", str(exe)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise RuntimeError(f"{CXX} failed:\n{r.stderr[-4000:]}")
    arrays = []
    for b in program.buffers:
        shape = ir.shape_function(b.shape)(sizes)
        a = buffers.get(b.name)
        a = np.zeros(shape, dtype=b.dtype) if a is None else np.ascontiguousarray(a, dtype=b.dtype)
        assert a.shape == tuple(shape), (b.name, a.shape, shape)
        arrays.append(a)
    blob = b"".join(np.int64(a.nbytes).tobytes() + a.tobytes() for a in arrays)
    (workdir / "in.bin").write_bytes(blob)
    r = subprocess.run([str(exe), str(workdir / "in.bin"), str(workdir / "out.bin")],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"emulated run failed (rc {r.returncode}):\n{r.stderr[-4000:]}")
    data, out, offset = (workdir / "out.bin").read_bytes(), {}, 0
    for b, a in zip(program.buffers, arrays):
        out[b.name] = np.frombuffer(data, dtype=b.dtype, count=a.size, offset=offset).reshape(a.shape).copy()
        offset += a.nbytes
    return out
