"""A jammed bfloat16 GEMV on AMX tiles against the float32 FMAs of ``bf16_dot="pairs"``.

Pipeline position: outside the pipeline; the measurement behind the ``bf16_dot="amx"`` choice
of the llvm backend (``docs/llvm.md``, "Weights in bfloat16"). ``M`` nodes' activations
(``[M, K]`` float32) times one ``bfloat16_pairs`` matrix (``[N / 16, K / 2, 16, 2]``: a TreeLSTM
h256's ``[5H, 2H]``, N = 1280 outputs, K = 512) into ``[M, N]`` float32, three ways, each a
JIT-compiled LLVM function for the host CPU:

* ``pairs``: what the llvm kernels emit for a jammed group: per 16 outputs, one 64-byte load
  per pair of rows, ``<< 16`` / ``& 0xFFFF0000`` for the two rows, one FMA per node and row
  (a few partial sums per node when the group is small, to hide the FMA latency);
* ``amx``: the activations rounded to bfloat16 once into a ``[M, K]`` staging buffer (the A
  tile rows, stride ``2 K`` bytes), then per 16 outputs ``K / 32`` ``tdpbf16ps`` into one
  ``M x 16`` float32 C tile (the B tile is a 1 KB contiguous block of the pairs matrix);
* ``amx4``: the same with four C tiles (64 outputs) per A tile load.

The variants alternate in every round, ``--rounds`` rounds, each a timed loop of calls;
medians of the time per GEMV and of multiply-adds/s. Needs a CPU with ``amx_tile`` and
``amx_bf16`` and a kernel that grants the tile state (Linux ``arch_prctl``).

Usage::

    python benchmarks/bench_amx_gemv.py --out benchmarks/results/amx_gemv.json
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

import numpy as np  # noqa: E402

from benchmarks.common import environment, write_json  # noqa: E402

DECLS = """
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tdpbf16ps.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
"""


def pairs_ir(m: int, n: int, k: int) -> str:
    """``void g(ptr w, ptr x, ptr y)``: ``y[m, n] = x[m, k] @ W`` with W read as pairs of rows."""
    parts = max(1, -(-8 // m))  # independent FMA chains >= 8 (two ports, latency 4)
    while (k // 2) % parts:
        parts -= 1
    L = ["define void @g(ptr noalias %w, ptr noalias %x, ptr noalias %y) {", "entry:", "  br label %blk",
         "blk:", "  %b = phi i64 [0, %entry], [%b1, %blk_end]",
         f"  %wb = mul i64 %b, {k * 16 * 2}", "  br label %kl", "kl:",
         f"  %p = phi i64 [0, %blk], [%p1, %kl]"]
    for q in range(parts):
        for r in range(m):
            L.append(f"  %a{q}_{r} = phi <16 x float> [zeroinitializer, %blk], [%n{q}_{r}, %kl]")
    for q in range(parts):
        L += [f"  %pq{q} = add i64 %p, {q}", f"  %wo{q} = mul i64 %pq{q}, 64", f"  %wo2{q} = add i64 %wb, %wo{q}",
              f"  %wp{q} = getelementptr i8, ptr %w, i64 %wo2{q}",
              f"  %ww{q} = load <16 x i32>, ptr %wp{q}, align 4",
              f"  %lo{q} = shl <16 x i32> %ww{q}, " + splat("i32", 16),
              f"  %hi{q} = and <16 x i32> %ww{q}, " + splat("i32", -65536),
              f"  %flo{q} = bitcast <16 x i32> %lo{q} to <16 x float>",
              f"  %fhi{q} = bitcast <16 x i32> %hi{q} to <16 x float>",
              f"  %k0{q} = mul i64 %pq{q}, 2", f"  %k1{q} = add i64 %k0{q}, 1"]
        for r in range(m):
            for h, kk in (("lo", "k0"), ("hi", "k1")):
                L += [f"  %xo{h}{q}_{r} = add i64 %{kk}{q}, {r * k}",
                      f"  %xp{h}{q}_{r} = getelementptr float, ptr %x, i64 %xo{h}{q}_{r}",
                      f"  %xs{h}{q}_{r} = load float, ptr %xp{h}{q}_{r}, align 4",
                      f"  %xi{h}{q}_{r} = insertelement <16 x float> poison, float %xs{h}{q}_{r}, i32 0",
                      f"  %xv{h}{q}_{r} = shufflevector <16 x float> %xi{h}{q}_{r}, <16 x float> poison, "
                      f"<16 x i32> zeroinitializer"]
            L += [f"  %t{q}_{r} = call <16 x float> @llvm.fma.v16f32(<16 x float> %flo{q}, "
                  f"<16 x float> %xvlo{q}_{r}, <16 x float> %a{q}_{r})",
                  f"  %n{q}_{r} = call <16 x float> @llvm.fma.v16f32(<16 x float> %fhi{q}, "
                  f"<16 x float> %xvhi{q}_{r}, <16 x float> %t{q}_{r})"]
    L += [f"  %p1 = add i64 %p, {parts}", f"  %pc = icmp ult i64 %p1, {k // 2}",
          "  br i1 %pc, label %kl, label %blk_end", "blk_end:"]
    for r in range(m):
        total = f"%n0_{r}"
        for q in range(1, parts):
            L.append(f"  %s{q}_{r} = fadd <16 x float> {total}, %n{q}_{r}")
            total = f"%s{q}_{r}"
        L += [f"  %yo{r} = mul i64 %b, 16", f"  %yo2{r} = add i64 %yo{r}, {r * n}",
              f"  %yp{r} = getelementptr float, ptr %y, i64 %yo2{r}",
              f"  store <16 x float> {total}, ptr %yp{r}, align 4"]
    L += ["  %b1 = add i64 %b, 1", f"  %bc = icmp ult i64 %b1, {n // 16}",
          "  br i1 %bc, label %blk, label %done", "done:", "  ret void", "}"]
    return "\n".join(L)


def splat(ty: str, v: int) -> str:
    return "<" + ", ".join([f"{ty} {v}"] * 16) + ">"


def amx_ir(m: int, n: int, k: int, tiles: int) -> str:
    """``void g(ptr w, ptr x, ptr y)`` on AMX: ``x`` rounded to bfloat16 into a staging buffer,
    then ``tiles`` C tiles of ``m x 16`` per A tile load."""
    L = ["define void @g(ptr noalias %w, ptr noalias %x, ptr noalias %y) {", "entry:",
         f"  %a = alloca [{m * k} x bfloat], align 64", "  br label %cv", "cv:",
         "  %ci = phi i64 [0, %entry], [%ci1, %cv]",
         "  %cp = getelementptr float, ptr %x, i64 %ci", "  %cx = load <16 x float>, ptr %cp, align 4",
         "  %cb = fptrunc <16 x float> %cx to <16 x bfloat>",
         "  %cq = getelementptr bfloat, ptr %a, i64 %ci", "  store <16 x bfloat> %cb, ptr %cq, align 32",
         "  %ci1 = add i64 %ci, 16", f"  %cc = icmp ult i64 %ci1, {m * k}",
         "  br i1 %cc, label %cv, label %pre", "pre:", "  br label %blk", "blk:",
         "  %b = phi i64 [0, %pre], [%b1, %blk_end]"]
    for t in range(tiles):
        L += [f"  %c0_{t} = call x86_amx @llvm.x86.tilezero.internal(i16 {m}, i16 64)"]
    L += ["  br label %kl", "kl:", "  %kb = phi i64 [0, %blk], [%kb1, %kl]"]
    for t in range(tiles):
        L.append(f"  %c_{t} = phi x86_amx [%c0_{t}, %blk], [%cn_{t}, %kl]")
    L += ["  %ao = mul i64 %kb, 64", "  %ap = getelementptr i8, ptr %a, i64 %ao",
          f"  %ta = call x86_amx @llvm.x86.tileloadd64.internal(i16 {m}, i16 64, ptr %ap, i64 {2 * k})"]
    for t in range(tiles):
        L += [f"  %bb{t} = add i64 %b, {t}", f"  %bo{t} = mul i64 %bb{t}, {k * 32}",
              f"  %bk{t} = mul i64 %kb, 1024", f"  %bo2{t} = add i64 %bo{t}, %bk{t}",
              f"  %bp{t} = getelementptr i8, ptr %w, i64 %bo2{t}",
              f"  %tb{t} = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %bp{t}, i64 64)",
              f"  %cn_{t} = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 {m}, i16 64, i16 64, x86_amx %c_{t}, "
              f"x86_amx %ta, x86_amx %tb{t})"]
    L += ["  %kb1 = add i64 %kb, 1", f"  %kc = icmp ult i64 %kb1, {k // 32}",
          "  br i1 %kc, label %kl, label %blk_end", "blk_end:"]
    for t in range(tiles):
        L += [f"  %yb{t} = add i64 %b, {t}", f"  %yo{t} = mul i64 %yb{t}, 64",
              f"  %yp{t} = getelementptr i8, ptr %y, i64 %yo{t}",
              f"  call void @llvm.x86.tilestored64.internal(i16 {m}, i16 64, ptr %yp{t}, i64 {4 * n}, "
              f"x86_amx %cn_{t})"]
    L += [f"  %b1 = add i64 %b, {tiles}", f"  %bc = icmp ult i64 %b1, {n // 16}",
          "  br i1 %bc, label %blk, label %done", "done:", "  ret void", "}"]
    return "\n".join(L)


def bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def widen(h: np.ndarray) -> np.ndarray:
    return (h.astype(np.uint32) << 16).view(np.float32)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--nodes", default="1,2,4,6,8,16", help="comma list of M (jammed nodes)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--min-time", type=float, default=0.02, help="seconds of calls per timing")
    p.add_argument("--out", default="", help="JSON file (default: stdout)")
    args = p.parse_args(argv)

    from cortex.plugins.cpu_llvm.amx import amx_available
    from cortex.plugins.cpu_llvm.jit import JitModule, cpu_info

    ok, why = amx_available()
    if not ok:
        print(f"no AMX here: {why}", file=sys.stderr)
        return 1
    h = args.hidden
    n, k = 5 * h, 2 * h
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    wb = bf16(w)  # [K, N] -> pairs [N/16, K/2, 16, 2]
    wp = np.ascontiguousarray(wb.reshape(k // 2, 2, n // 16, 16).transpose(2, 0, 3, 1))
    sig = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    rows = []
    for m in [int(s) for s in args.nodes.split(",")]:
        x = rng.standard_normal((m, k)).astype(np.float32)
        builders = {"pairs": lambda: pairs_ir(m, n, k), "amx": lambda: amx_ir(m, n, k, 1),
                    "amx4": lambda: amx_ir(m, n, k, 4)}
        mods = {v: JitModule(DECLS + f()) for v, f in builders.items()}
        fns = {v: sig(mod.address("g")) for v, mod in mods.items()}
        ys = {v: np.zeros((m, n), np.float32) for v in fns}
        exact = x.astype(np.float64) @ widen(wb).astype(np.float64)
        rounded = widen(bf16(x)).astype(np.float64) @ widen(wb).astype(np.float64)
        for v, f in fns.items():
            f(wp.ctypes.data, x.ctypes.data, ys[v].ctypes.data)
        err = {v: float(np.abs(y - (exact if v == "pairs" else rounded)).max()) for v, y in ys.items()}
        err_vs_exact = {v: float(np.abs(y - exact).max()) for v, y in ys.items()}
        assert all(e < 1e-3 for e in err.values()), err
        calls = {}
        for v, f in fns.items():  # calls per timing: ~min_time of the slowest
            c, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.min_time / 4:
                f(wp.ctypes.data, x.ctypes.data, ys[v].ctypes.data)
                c += 1
            calls[v] = c
        reps = max(1, min(calls.values()) * 4)
        times: dict[str, list[float]] = {v: [] for v in fns}
        names = tuple(fns)
        for r in range(args.rounds):
            for v in names[r % len(names):] + names[:r % len(names)]:
                f = fns[v]
                t0 = time.perf_counter()
                for _ in range(reps):
                    f(wp.ctypes.data, x.ctypes.data, ys[v].ctypes.data)
                times[v].append((time.perf_counter() - t0) / reps)
        med = {v: statistics.median(s) for v, s in times.items()}
        row = {"nodes": m, "median_us": {v: t * 1e6 for v, t in med.items()},
               "gmac_per_s": {v: m * n * k / t / 1e9 for v, t in med.items()},
               "speedup_vs_pairs": {v: med["pairs"] / t for v, t in med.items()},
               "max_abs_err_vs_own_inputs": err, "max_abs_err_vs_float32_activations": err_vs_exact,
               "samples_us": {v: [t * 1e6 for t in s] for v, s in times.items()}}
        rows.append(row)
        print(f"M={m:2d}: " + ", ".join(f"{v} {t * 1e6:7.2f} us ({med['pairs'] / t:4.1f}x)" for v, t in med.items())
              + f"; err vs fp32 activations amx {err_vs_exact['amx']:.1e}", file=sys.stderr)
        for mod in mods.values():
            mod.close()
    doc = {"benchmark": "amx_gemv", "cpu": cpu_info().name, "hidden": h, "n": n, "k": k,
           "rounds": args.rounds, "command": " ".join(sys.argv), "environment": environment(), "rows": rows}
    write_json(doc, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
