"""The C-family renderer: plain C compiles with -Wall -Werror and RUNS (ctypes) with the
interpreter's results; CUDA compiles with nvcc for sm_90; OpenCL renders."""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_loopir_examples import child_sum, scheduled_case, tree_lstm, tree_lstm_reference, tree_rnn  # noqa: E402

from cortex.core.lowering import transforms as T  # noqa: E402
from cortex.core import loopir as ir  # noqa: E402
from cortex.core.loopir.interpret import np_dtype, run  # noqa: E402
from cortex.core.loopir.verify import verify  # noqa: E402
from cortex.core.render.c_family import RenderError, dynamic_shared_bytes, entry_symbol, kernel_symbol, render  # noqa: E402

CC = shutil.which("cc")
NVCC = shutil.which("nvcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc) on PATH")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
C_FLAGS = ["-Wall", "-Werror", "-O2", "-std=c11"]


def _compile_c(src: str, tmp: pathlib.Path, name: str, extra: tuple[str, ...] = ()) -> pathlib.Path:
    c = tmp / f"{name}.c"
    c.write_text(src)
    so = tmp / f"{name}.so"
    r = subprocess.run([CC, *C_FLAGS, *extra, "-shared", "-fPIC", str(c), "-o", str(so), "-lm"],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"cc failed:\n{r.stderr}\n--- source ---\n{src}"
    return so


def one_translation_unit(srcs: dict[str, str]) -> str:
    """Several CUDA sources as one file: includes hoisted, each body in its own namespace (the
    static helpers repeat; kernel names are unique). nvcc's time goes mostly to parsing the
    CUDA headers, once per file, so one file per compiler process is several times faster."""
    includes: list[str] = []
    bodies = []
    for stem, text in srcs.items():
        lines = text.splitlines()
        includes += [line for line in lines if line.startswith("#include")]
        body = "\n".join(line for line in lines if not line.startswith("#include"))
        bodies.append(f"namespace {stem} {{\n{body}\n}}  // namespace {stem}\n")
    return "\n".join(dict.fromkeys(includes)) + "\n\n" + "\n".join(bodies)


def _run_c(program: ir.Program, so: pathlib.Path, bufs: dict, sizes: dict) -> dict:
    lib = ctypes.CDLL(str(so))
    fn = getattr(lib, entry_symbol(program))
    arrays, args = {}, []
    for b in program.buffers:
        a = bufs.get(b.name)
        if a is None:
            from cortex.core.loopir.interpret import eval_shape

            a = np.zeros(eval_shape(b.shape, sizes), dtype=np_dtype(b.dtype))
        a = np.ascontiguousarray(a, dtype=np_dtype(b.dtype))
        arrays[b.name] = a
        args.append(a.ctypes.data_as(ctypes.c_void_p))
    args += [ctypes.c_int32(int(sizes[s])) for s in program.size_names]
    fn.restype = None
    fn(*args)
    return arrays


_case = scheduled_case


VARIANTS = {
    "plain": lambda p: p,
    "split_tail_serial_nodes": lambda p: T.annotate(T.split(p, "j", 3), "v", "serial"),
    "unroll_reduce": lambda p: T.unroll_reduce(p, "k" if p.name == "tree_rnn" else "kk", 4),
    "packed_cached": lambda p: T.cache(T.change_layout(p, "W" if p.name == "tree_rnn" else "U", "packed", 4),
                                       "W" if p.name == "tree_rnn" else "U", "private", at="v"),
    "transposed_unrolled": lambda p: T.unroll(T.change_layout(p, "W" if p.name == "tree_rnn" else "U", "transposed"), "j"),
}


@needs_cc
@pytest.mark.parametrize("build", [tree_rnn, child_sum], ids=["tree_rnn", "child_sum"])
@pytest.mark.parametrize("form", ["single", "per_level"])
@pytest.mark.parametrize("leaf_spec", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rendered_c_compiles_and_matches_the_interpreter(tmp_path, build, form, leaf_spec, dtype):
    p = build(form=form, leaf_spec=leaf_spec, dtype=dtype)
    so = _compile_c(render(p, "c"), tmp_path, p.name)
    bufs, sizes, batch = _case(p, arity=None if p.name == "child_sum" else 2)
    want = run(p, dict(bufs), sizes)["h"]
    got = _run_c(p, so, bufs, sizes)["h"]
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@needs_cc
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("build", [tree_rnn, child_sum], ids=["tree_rnn", "child_sum"])
def test_scheduled_programs_render_to_correct_c(tmp_path, variant, build):
    p = verify(VARIANTS[variant](build(dtype="float64")))
    so = _compile_c(render(p, "c"), tmp_path, p.name)
    bufs, sizes, batch = _case(p, seed=3, arity=None if p.name == "child_sum" else 2)
    want = run(p, dict(bufs), sizes)["h"]
    np.testing.assert_allclose(_run_c(p, so, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


@needs_cc
def test_openmp_build_runs_the_parallel_loops_correctly(tmp_path):
    p = child_sum(form="single", dtype="float64")
    probe = subprocess.run([CC, "-fopenmp", "-x", "c", "-", "-c", "-o", str(tmp_path / "probe.o")],
                           input="int x;\n", capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(reason="this C compiler has no OpenMP support (-fopenmp)")
    so = _compile_c(render(p, "c"), tmp_path, "omp", extra=("-fopenmp",))
    bufs, sizes, batch = _case(p, seed=5, arity=None)
    want = run(p, dict(bufs), sizes)["h"]
    np.testing.assert_allclose(_run_c(p, so, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)


def test_c_source_shape():
    p = tree_rnn(form="per_level", dtype="float32")
    src = render(p, "c")
    assert f"void {kernel_symbol(p, 'level')}(const int32_t* restrict level_offsets," in src
    assert "float* restrict h, int32_t N, int32_t L, int32_t NL, int32_t E, int32_t l)" in src
    assert f"void {entry_symbol(p)}(" in src and "for (int32_t lh = 1; lh < L; ++lh) {" in src
    assert "#pragma omp parallel for" in src and "tanhf(" in src
    assert "tanh(" in render(tree_rnn(dtype="float64"), "c").replace("tanhf(", "")


def _gpu_program(form: str) -> ir.Program:
    p = T.bind(T.bind(tree_rnn(form=form, dtype="float32", H=32), "v", "group"), "j", "thread")
    if form == "single":
        p = T.cache(p, "W", "shared")  # weights resident in shared memory across levels
    return verify(p)


def test_cuda_source_uses_grid_stride_loops_and_cooperative_groups():
    single = render(_gpu_program("single"), "cuda")
    assert 'extern "C" __global__ void tree_rnn_main(' in single
    assert "#include <cooperative_groups.h>" in single
    assert single.count("cooperative_groups::this_grid().sync();") == 2
    assert "for (int32_t v = (level_offsets[l]) + (int)blockIdx.x; v < v__end; v += (int)gridDim.x)" in single
    assert "for (int32_t j = (0) + (int)threadIdx.x; j < j__end; j += (int)blockDim.x)" in single
    assert "__shared__ float W_shared[32][32];" in single and "__syncthreads();" in single
    per_level = render(_gpu_program("per_level"), "cuda")
    assert "this_grid" not in per_level and "cooperative_groups" not in per_level


def _big_shared_program() -> ir.Program:
    # W [96, 32] (12 KiB) and U [160, 64] (40 KiB) of a hidden-32 TreeLSTM resident in shared memory:
    # together over CUDA's 48 KiB static limit
    p = T.bind(T.bind(tree_lstm(H=32, dtype="float32"), "v", "group"), "j", "thread")
    return verify(T.cache(T.cache(p, "U", "shared"), "W", "shared"))


def test_large_shared_arrays_use_dynamic_shared_memory_on_cuda():
    p = _big_shared_program()
    src = render(p, "cuda")
    assert "extern __shared__ __align__(16) unsigned char cx_smem[];" in src
    assert "float (*W_shared)[32] = (float (*)[32])(cx_smem + 0);" in src
    assert "float (*U_shared)[64] = (float (*)[64])(cx_smem + 12288);" in src
    assert dynamic_shared_bytes(p, "main", "cuda") == 12288 + 40960
    small = _gpu_program("single")
    assert dynamic_shared_bytes(small, "main", "cuda") == 0 and "cx_smem" not in render(small, "cuda")
    assert dynamic_shared_bytes(p, "main", "opencl") == 0  # OpenCL __local arrays have no static cap
    assert dynamic_shared_bytes(p, "main", "c") == 0


@needs_nvcc
def test_cuda_compiles_with_nvcc_for_sm_90(tmp_path):
    # the persistent form (grid sync, weights in dynamic shared memory), a per-level float64
    # child-sum (private arrays, CSR reductions) and the NaN-propagating min/max helpers, in one
    # translation unit to pay nvcc's start once
    src = one_translation_unit({"big": render(_big_shared_program(), "cuda"),
                                "child_sum": render(child_sum(form="per_level", dtype="float64"), "cuda"),
                                "minmax": render(_minmax_program("float32"), "cuda")})
    path = tmp_path / "kernels.cu"
    path.write_text(src)
    r = subprocess.run([NVCC, "-cubin", "-arch=sm_90", str(path), "-o", str(tmp_path / "kernels.cubin")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"nvcc failed:\n{r.stdout}{r.stderr}\n--- source ---\n{src}"


def test_opencl_renders_and_refuses_grid_barriers():
    src = render(_gpu_program("per_level"), "opencl")
    assert "__kernel void tree_rnn_level(__global const int* restrict level_offsets" in src
    assert "(int)get_group_id(0)" in src and "(int)get_local_id(0)" in src
    f64 = render(child_sum(form="per_level", dtype="float64"), "opencl")
    assert f64.startswith("/*") and "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in f64
    shared = render(T.cache(_gpu_program("per_level"), "W", "shared", kernel="level"), "opencl")
    assert "__local float W_shared[32][32];" in shared and "barrier(CLK_LOCAL_MEM_FENCE" in shared
    with pytest.raises(RenderError, match="no grid-wide barrier; schedule kernel_form='per_level'"):
        render(_gpu_program("single"), "opencl")


def test_select_around_a_reduction_keeps_the_guard():
    # select(c >= 0, sum_k h[c, k], 0): the accumulator loop must sit inside the guard
    N = ir.Var("N")
    c = ir.Var("c")
    body = ir.For("v", 0, N, ir.Let("c", ir.Load("t", (ir.Var("v"),)), ir.Store(
        "y", (ir.Var("v"),),
        ir.Select(c >= 0, ir.Reduce("sum", "k", 0, 4, ir.Load("x", (c, ir.Var("k")))), ir.fconst(0, "float64")))))
    p = ir.Program("guard", (ir.Size("N"),), (
        ir.Buffer("t", "int32", (N,), "index", (ir.Const(-1), N - 1)),
        ir.Buffer("x", "float64", (N, 4), "input"),
        ir.Buffer("y", "float64", (N,), "output"),
    ), (ir.Kernel("k", (), body),), (ir.Launch("k"),))
    verify(p)
    src = render(p, "c")
    guard = src.index("if ((c >= 0)) {")
    assert guard < src.index("for (int32_t k =") < src.index("} else {")


def _minmax_program(dtype: str) -> ir.Program:
    """y = max(x, 0), z = min(x, 0) elementwise, m = max over each row of x."""
    N, v, k = ir.Var("N"), ir.Var("v"), ir.Var("k")
    x = ir.Load("x", (v, k))
    zero = ir.fconst(0, dtype)
    body = ir.For("v", 0, N, ir.Seq((
        ir.For("k", 0, 4, ir.Seq((ir.Store("y", (v, k), ir.BinOp("max", x, zero)),
                                  ir.Store("z", (v, k), ir.BinOp("min", x, zero))))),
        ir.Store("m", (v,), ir.Reduce("max", "k", 0, 4, x)))))
    p = ir.Program(f"minmax_{dtype}", (ir.Size("N"),), (
        ir.Buffer("x", dtype, (N, 4), "input"),
        ir.Buffer("y", dtype, (N, 4), "output"),
        ir.Buffer("z", dtype, (N, 4), "output"),
        ir.Buffer("m", dtype, (N,), "output"),
    ), (ir.Kernel("k", (), body),), (ir.Launch("k"),))
    return verify(p)


NONFINITE_ROWS = np.array([[np.nan, 1.0, -2.0, 0.5], [np.inf, -np.inf, 0.0, -0.0], [-np.inf, np.nan, 3.0, -1.0],
                           [1.0, 2.0, -3.0, 0.25]])


@needs_cc
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_min_max_propagate_nan_in_c_like_the_interpreter(tmp_path, dtype):
    """C's fmin/fmax return the other operand of a NaN (relu(NaN) = 0); the rendered helpers
    propagate it, as NumPy's minimum/maximum (the interpreter) do."""
    p = _minmax_program(dtype)
    src = render(p, "c")
    assert "fmax" not in src and "fmin" not in src
    so = _compile_c(src, tmp_path, p.name)
    bufs, sizes = {"x": NONFINITE_ROWS.astype(np_dtype(dtype))}, {"N": len(NONFINITE_ROWS)}
    want = run(p, dict(bufs), sizes)
    got = _run_c(p, so, bufs, sizes)
    for name in ("y", "z", "m"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)  # NaN == NaN here
    assert np.isnan(got["y"][0, 0]) and np.isnan(got["m"][2]) and got["y"][1, 0] == np.inf


@pytest.mark.parametrize("dialect", ["c", "opencl", "cuda"])
def test_every_dialect_renders_nan_propagating_min_max(dialect):
    src = render(_minmax_program("float32"), dialect)
    assert "fmax" not in src and "fmin" not in src
    assert "cx_max_float32(float a, float b) { return (a > b || a != a) ? a : b; }" in src
    assert "cx_min_float32(float a, float b) { return (a < b || a != a) ? a : b; }" in src


def test_unknown_dialect_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown C dialect 'metal'"):
        render(tree_rnn(), "metal")


def test_render_is_deterministic():
    p = _gpu_program("single")
    assert render(p, "cuda") == render(replace(p), "cuda")


@needs_cc
@pytest.mark.parametrize("form", ["single", "per_level"])
def test_fused_tree_lstm_c_runs(tmp_path, form):
    p = verify(T.unroll_reduce(tree_lstm(form=form, dtype="float64"), "kl0", 4))
    so = _compile_c(render(p, "c"), tmp_path, p.name)
    bufs, sizes, batch = _case(p, seed=2)
    got = _run_c(p, so, bufs, sizes)
    want_h, want_c = tree_lstm_reference(batch, bufs)
    np.testing.assert_allclose(got["h"], want_h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["c"], want_c, rtol=1e-12, atol=1e-12)


OPENCL_SHIM = """
/* Just enough of OpenCL C, as C macros, for a host C compiler to check the rendered syntax. */
#define __kernel
#define __global
#define __local static
#define get_group_id(d) 0
#define get_num_groups(d) 1
#define get_local_id(d) 0
#define get_local_size(d) 1
#define CLK_LOCAL_MEM_FENCE 1
#define CLK_GLOBAL_MEM_FENCE 2
#define barrier(flags) ((void)(flags))
#include <math.h>
"""


@needs_cc
@pytest.mark.parametrize("program", [
    lambda: _gpu_program("per_level"),
    lambda: T.cache(_gpu_program("per_level"), "W", "shared", kernel="level"),
    lambda: child_sum(form="per_level", dtype="float64"),
    lambda: tree_lstm(form="per_level", dtype="float32"),
], ids=["tree_rnn_gpu", "tree_rnn_shared", "child_sum_f64", "tree_lstm"])
def test_opencl_source_is_syntactically_c(tmp_path, program):
    # a stand-in until PoCL is available: OpenCL C is C99 plus qualifiers and builtins
    src = render(program(), "opencl").replace("#pragma OPENCL EXTENSION cl_khr_fp64 : enable", "")
    shim = tmp_path / "shim.h"
    shim.write_text(OPENCL_SHIM)
    path = tmp_path / "k.c"
    path.write_text(src)
    r = subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror", "-std=c11", "-include", str(shim), str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"{r.stderr}\n--- source ---\n{src}"


@needs_cc
def test_random_schedules_render_to_c_that_matches_the_interpreter(tmp_path):
    import random

    from test_loopir_transforms import _STEPS

    rng = random.Random(1234)
    for case in range(8):
        p = tree_rnn(form=rng.choice(["single", "per_level"]), dtype="float64")
        for _ in range(rng.randint(1, 4)):
            try:
                p = _STEPS[rng.randrange(len(_STEPS))](p, random.Random(rng.random()))
            except T.TransformError:
                continue
        p = verify(replace(p, name=f"case{case}"))
        so = _compile_c(render(p, "c"), tmp_path, p.name)
        bufs, sizes, _ = _case(p, seed=case)
        want = run(p, dict(bufs), sizes)["h"]
        np.testing.assert_allclose(_run_c(p, so, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12, err_msg=str(p))
