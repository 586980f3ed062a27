"""What an LLVM CPU name implies: the instruction-set extensions and the SIMD width of its code.

Pipeline position: beside the pipeline, read by backends whose compiler is LLVM. The ``llvm``
target pins code to a named CPU (``cpu="skylake-avx512"``) and checks that this host can run it;
PoCL names the CPU it compiles OpenCL kernels for in its device version string, which need not
be the host's own (its LLVM may map a newer CPU to an older name), and the ``opencl`` target
sizes its vectors by it. Names are LLVM's (``llc -mcpu=help``); features are LLVM's
(``avx512bf16``, not ``/proc/cpuinfo``'s ``avx512_bf16``).
"""

from __future__ import annotations

AVX512_CPUS = frozenset({
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
    "tigerlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5", "x86-64-v4",
})
AVX2_CPUS = frozenset({"haswell", "broadwell", "skylake", "alderlake", "znver1", "znver2", "znver3", "x86-64-v3"})

# The instruction-set extensions code for a named CPU may use, for the check that a host can
# run it. Each level includes the one before (the x86-64 levels).
_X86_V2 = frozenset({"cx16", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"})
_X86_V3 = _X86_V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"}
_X86_V4 = _X86_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
_ICELAKE = _X86_V4 | {"avx512vnni", "avx512vbmi", "avx512vbmi2", "avx512ifma", "avx512bitalg",
                      "avx512vpopcntdq", "gfni", "vaes", "vpclmulqdq"}
_SAPPHIRE = _ICELAKE | {"avx512bf16", "avx512fp16", "amx-tile", "amx-bf16", "amx-int8"}
CPU_FEATURES: dict[str, frozenset[str]] = {
    "x86-64": frozenset(), "generic": frozenset(),
    "x86-64-v2": _X86_V2, "nehalem": _X86_V2, "westmere": _X86_V2,
    "sandybridge": _X86_V2 | {"avx"}, "ivybridge": _X86_V2 | {"avx", "f16c"},
    **dict.fromkeys(sorted(AVX2_CPUS), _X86_V3),
    "x86-64-v4": _X86_V4, "skylake-avx512": _X86_V4, "cascadelake": _X86_V4 | {"avx512vnni"},
    "cooperlake": _X86_V4 | {"avx512vnni", "avx512bf16"},
    **dict.fromkeys(("cannonlake", "icelake-client", "icelake-server", "tigerlake"), _ICELAKE),
    **dict.fromkeys(("sapphirerapids", "emeraldrapids", "graniterapids"), _SAPPHIRE),
    **dict.fromkeys(("znver4", "znver5"), _ICELAKE | {"avx512bf16"}),
}


def cpu_vector_bits(cpu: str) -> int:
    """The widest SIMD registers code for the LLVM CPU ``cpu`` uses: 512 (AVX-512), 256
    (AVX2), or 0 where the name is not known to have either."""
    if "avx512" in cpu or cpu in AVX512_CPUS:
        return 512
    return 256 if cpu in AVX2_CPUS else 0
