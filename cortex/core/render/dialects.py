"""C-family dialect tables: what plain C, OpenCL C and CUDA C spell differently.

Pipeline position: ``cortex.core.render.c_family`` renders a scheduled LoopProgram with one of these
tables; a backend picks it through ``Capabilities.dialect``. Everything target-specific in the
generated source lives here as data, so adding a dialect is adding a table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str
    prelude: str  # includes / pragmas at the top of the file
    kernel_qualifier: str  # before the kernel's return type
    helper_qualifier: str  # device helper functions (sigmoid, min/max)
    global_qualifier: str  # address space of kernel pointer arguments
    const_qualifier: str  # how read-only pointers are marked
    restrict: str
    shared_qualifier: str | None  # group-shared arrays; None: rendered as plain local arrays
    int_type: str
    bool_type: str
    float_types: dict[str, str]
    float_suffix: dict[str, str]  # literal suffix per float type
    math: dict[str, dict[str, str]]  # intrinsic -> float type -> function name
    fp64_pragma: str = ""  # emitted when float64 is used
    group_id: str | None = None  # None: the dialect has no grid; gpu loops run serially
    num_groups: str | None = None
    thread_id: str | None = None
    group_size: str | None = None
    group_barrier: str = ""
    grid_barrier: str | None = ""  # None: unsupported (use one kernel per level)
    grid_barrier_prelude: str = ""
    parallel_pragma: str = ""  # CPU-thread loops
    vector_pragma: str = ""
    unroll_pragma: str = ""
    host_entry: bool = False  # render a host function that runs the host steps
    # Above this many bytes per kernel, shared arrays are carved out of one dynamically sized
    # buffer declared with ``dynamic_shared_decl`` (the launch must pass the size: see
    # ``c_family.dynamic_shared_bytes``). None: always static.
    static_shared_limit: int | None = None
    dynamic_shared_decl: str = ""
    # Cross-lane reductions (``Reduce.lanes``): the warp width, a butterfly step exchanging
    # ``{value}`` with the lane ``{offset}`` away within segments of ``{lanes}`` lanes among the
    # threads of ``{mask}``, and the mask of a lane group (``{bits}``: its lanes' bits,
    # ``{align}``: warp size - lanes). None: the dialect has no shuffles (renderer refuses).
    warp_size: int = 0
    shuffle_xor: str | None = None
    lane_mask: str = ""
    full_lane_mask: str = ""


def _math(suffix32: str, names: tuple[str, ...] = ("exp", "log", "tanh", "sqrt", "fabs", "fma")) -> dict:
    out: dict[str, dict[str, str]] = {}
    for n in names:
        key = "abs" if n == "fabs" else n
        out[key] = {"float32": n + suffix32, "float64": n}
    return out


C = Dialect(
    name="c",
    prelude="#include <stdint.h>\n#include <math.h>\n",
    kernel_qualifier="",
    helper_qualifier="static inline",
    global_qualifier="",
    const_qualifier="const",
    restrict="restrict",
    shared_qualifier=None,
    int_type="int32_t",
    bool_type="int",
    float_types={"float32": "float", "float64": "double"},
    float_suffix={"float32": "f", "float64": ""},
    math=_math("f"),
    parallel_pragma="#if defined(_OPENMP)\n#pragma omp parallel for\n#endif",
    vector_pragma="#if defined(_OPENMP)\n#pragma omp simd\n#endif",
    unroll_pragma="#if defined(__clang__)\n#pragma unroll\n#elif defined(__GNUC__)\n#pragma GCC unroll 8\n#endif",
    host_entry=True,
)

OPENCL = Dialect(
    name="opencl",
    prelude="",
    kernel_qualifier="__kernel",
    helper_qualifier="inline",
    global_qualifier="__global",
    const_qualifier="const",
    restrict="restrict",
    shared_qualifier="__local",
    int_type="int",
    bool_type="int",
    float_types={"float32": "float", "float64": "double"},
    float_suffix={"float32": "f", "float64": ""},
    math=_math(""),  # OpenCL math builtins are overloaded on the argument type
    fp64_pragma="#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n",
    group_id="(int)get_group_id(0)",
    num_groups="(int)get_num_groups(0)",
    thread_id="(int)get_local_id(0)",
    group_size="(int)get_local_size(0)",
    group_barrier="barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
    grid_barrier=None,
    unroll_pragma="#pragma unroll",
)

CUDA = Dialect(
    name="cuda",
    prelude="#include <stdint.h>\n",
    kernel_qualifier='extern "C" __global__',
    helper_qualifier="static __device__ __forceinline__",
    global_qualifier="",
    const_qualifier="const",
    restrict="__restrict__",
    shared_qualifier="__shared__",
    int_type="int32_t",
    bool_type="int",
    float_types={"float32": "float", "float64": "double"},
    float_suffix={"float32": "f", "float64": ""},
    math=_math("f"),
    group_id="(int)blockIdx.x",
    num_groups="(int)gridDim.x",
    thread_id="(int)threadIdx.x",
    group_size="(int)blockDim.x",
    group_barrier="__syncthreads();",
    grid_barrier="cooperative_groups::this_grid().sync();",
    grid_barrier_prelude="#include <cooperative_groups.h>\n",
    unroll_pragma="#pragma unroll",
    static_shared_limit=48 * 1024,  # CUDA's cap on static __shared__ per block
    dynamic_shared_decl="extern __shared__ __align__(16) unsigned char cx_smem[];",
    warp_size=32,
    shuffle_xor="__shfl_xor_sync({mask}, {value}, {offset}, {lanes})",
    lane_mask="(0x{bits:x}u << ((unsigned)threadIdx.x & {align}u))",
    full_lane_mask="0xffffffffu",
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (C, OPENCL, CUDA)}


def get_dialect(name: str | Dialect) -> Dialect:
    if isinstance(name, Dialect):
        return name
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"unknown C dialect {name!r}; known: {sorted(DIALECTS)}") from None
