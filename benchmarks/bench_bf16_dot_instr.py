"""Multiply-adds per second of the AVX512-BF16 dot product against the float32 FMA, on this host.

Pipeline position: outside the pipeline; the measurement behind the ``bf16_dot`` knob's choices
(``docs/llvm.md``, "Weights in bfloat16"). At batch 1 a TreeLSTM h256 kernel is bound by its
FMAs (its jammed nodes share each weight load), so ``vdpbf16ps`` (32 bfloat16 products summed
pairwise into 16 float32 lanes: one instruction where float32 takes two FMAs) could only pay
if it retires at least half as many instructions per second as ``vfmadd231ps``. Each variant
is one LLVM loop of 24 independent 512-bit accumulators, compiled by the llvm target's JIT
for the host CPU; the variants alternate, ``--rounds`` times; medians of multiply-adds/s.

Usage::

    python benchmarks/bench_bf16_dot_instr.py --out dot.json   # needs avx512_bf16
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make `cortex` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environment, write_json  # noqa: E402

ACCUMULATORS = 24
#: variant -> (the loop body's instruction for accumulator %a, multiply-adds per instruction)
VARIANTS = {
    "vfmadd231ps": ("call <16 x float> @llvm.fma.v16f32(<16 x float> %w, <16 x float> %x, <16 x float> %a)", 16),
    "vdpbf16ps": ("call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %a, <32 x bfloat> %wb, "
                  "<32 x bfloat> %xb)", 32),
}


def loop_ir(body: str) -> str:
    """``void k(i64 n, ptr p)``: ``n`` trips of ``ACCUMULATORS`` independent ``body`` s on
    operands loaded from ``p`` once, the sum stored to ``p`` (so nothing is folded away)."""
    lines = ["define void @k(i64 %n, ptr %p) {", "entry:",
             "  %w = load <16 x float>, ptr %p, align 4", "  %x = load <16 x float>, ptr %p, align 4",
             "  %wb = bitcast <16 x float> %w to <32 x bfloat>", "  %xb = bitcast <16 x float> %x to <32 x bfloat>",
             "  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    lines += [f"  %a{k} = phi <16 x float> [zeroinitializer, %entry], [%b{k}, %loop]" for k in range(ACCUMULATORS)]
    lines += [f"  %b{k} = " + body.replace("%a)", f"%a{k})").replace("%a,", f"%a{k},")
              for k in range(ACCUMULATORS)]
    lines += ["  %i1 = add i64 %i, 1", "  %c = icmp ult i64 %i1, %n", "  br i1 %c, label %loop, label %done",
              "done:"]
    total = "%b0"
    for k in range(1, ACCUMULATORS):
        lines.append(f"  %s{k} = fadd <16 x float> {total}, %b{k}")
        total = f"%s{k}"
    lines += [f"  store <16 x float> {total}, ptr %p, align 4", "  ret void", "}",
              "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
              "declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trips", type=int, default=200_000, help="loop trips per timed call")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default="", help="JSON file (default: stdout)")
    args = p.parse_args(argv)

    from cortex.plugins.cpu_llvm.jit import JitModule, cpu_info

    info = cpu_info()
    if "+avx512bf16" not in info.features.split(","):
        print("this CPU has no avx512_bf16: nothing to measure", file=sys.stderr)
        return 1
    modules = {v: JitModule(loop_ir(body)) for v, (body, _) in VARIANTS.items()}
    kernels = {v: ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(m.address("k"))
               for v, m in modules.items()}
    data = (ctypes.c_float * 16)(*([1.0] * 16))
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    names = tuple(VARIANTS)
    for r in range(args.rounds):
        for v in names[r % 2:] + names[:r % 2]:
            t0 = time.perf_counter()
            kernels[v](args.trips, ctypes.addressof(data))
            rates[v].append(args.trips * ACCUMULATORS * VARIANTS[v][1] / (time.perf_counter() - t0))
    med = {v: statistics.median(s) for v, s in rates.items()}
    doc = {"benchmark": "bf16_dot_instr", "cpu": info.name, "accumulators": ACCUMULATORS,
           "trips": args.trips, "rounds": args.rounds, "command": " ".join(sys.argv),
           "environment": environment(), "median_gmac_per_s": {v: m / 1e9 for v, m in med.items()},
           "ratio_dpbf16_to_fma": med["vdpbf16ps"] / med["vfmadd231ps"],
           "samples_gmac_per_s": {v: [x / 1e9 for x in s] for v, s in rates.items()}}
    print(f"vfmadd231ps {med['vfmadd231ps'] / 1e9:.1f} GMAC/s, vdpbf16ps {med['vdpbf16ps'] / 1e9:.1f} GMAC/s "
          f"(x{doc['ratio_dpbf16_to_fma']:.2f})", file=sys.stderr)
    write_json(doc, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
