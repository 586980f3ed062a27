"""FLOP rate per CPU-second of schedule variants on ``llvm``, next to NumPy's matmul roof measured
the same way: a comparison that a machine shared with other jobs does not distort.

Pipeline position: outside the pipeline, a measurement tool (like ``tools/ab_schedule.py``, which
compares wall-clock times). On a machine whose load average is several times its cores, a call's
threads get a fraction of a core and a wall-clock rate measures the load as much as the code.
This tool times each call with both clocks: the process's CPU time (``time.process_time``: every
thread's time on a core, waits at a barrier included) counts the work the code made the cores do;
the rounds alternate the variants on the same prelinearized batch, and the roof (a 4096^3 float32
NumPy product, ``cortex.bench.roof``) alternates with them. Reported per variant: the best wall
and CPU times, the model's GFLOP (``cortex.bench.workloads.flops``) per CPU-second
(CPU time sums the threads': a rate per core while it runs), and that over the roof's rate
measured the same way; JSON with ``--out``.

Usage::

    python tools/cpu_rate.py --hidden 1024 --batch 100 --threads 1 --variant '{"k_block": 128}'
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _clocks(fn) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main(argv: list[str] | None = None) -> int:
    import cortex
    from benchmarks.common import environment, make_trees, write_json
    from cortex.bench.roof import matmul_flops
    from cortex.bench.workloads import flops
    from cortex.models import TreeLSTM

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--variant", action="append", default=[], help="JSON dict of knobs (repeatable)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--roof", type=int, default=4096, help="size of the NumPy matmul roof (0: none)")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    if a.threads < 1 or a.rounds < 1:
        p.error("--threads and --rounds must be at least 1")
    variants = [{}] + [json.loads(v) for v in a.variant]
    model = TreeLSTM(vocab=20000, embed=a.hidden, hidden=a.hidden)
    trees = make_trees(0, a.batch, 20, 40, 20000)
    exes = [cortex.compile(model, target="llvm", threads=a.threads, schedule=v or "default") for v in variants]
    batch = exes[0].linearize(trees)
    model_flops = flops("TreeLSTM", batch, a.hidden, a.hidden)
    want = np.asarray(exes[0].run(batch).root("h"))
    samples: list[list[tuple[float, float]]] = [[] for _ in variants]
    roof: list[tuple[float, float]] = []
    rng = np.random.default_rng(0)
    x = rng.random((a.roof, a.roof), dtype=np.float32) if a.roof else None
    for _ in range(a.rounds):
        for i, exe in enumerate(exes):
            samples[i].append(_clocks(lambda: exe.run(batch)))
        if x is not None:
            roof.append(_clocks(lambda: x @ x))
    roof_rate = (max(matmul_flops(a.roof) / c for _, c in roof) / 1e9) if roof else None
    results = []
    for v, exe, s in zip(variants, exes, samples):
        cpu = min(c for _, c in s)
        rate = model_flops / cpu / 1e9  # CPU time sums the threads': a rate per core in use
        diff = float(np.abs(np.asarray(exe.run(batch).root("h")) - want).max())
        results.append({"variant": v, "wall_ms": [w * 1e3 for w, _ in s], "cpu_ms": [c * 1e3 for _, c in s],
                        "gflops_per_cpu_s": rate, "max_diff_vs_default": diff,
                        "of_roof": rate / roof_rate if roof_rate else None})
        share = f", {rate / roof_rate:.0%} of the roof's" if roof_rate else ""
        print(f"{json.dumps(v) or '{}'}: wall min {min(w for w, _ in s) * 1e3:.0f} ms, CPU min {cpu * 1e3:.0f} ms, "
              f"{rate:.0f} GFLOP/s per CPU-second{share} (diff {diff:.1e})")
    if roof_rate:
        print(f"roof ({a.roof}^3 NumPy matmul, {os.environ.get('OPENBLAS_NUM_THREADS', 'default')} BLAS threads): "
              f"{roof_rate:.0f} GFLOP/s per CPU-second")
    doc = {"tool": "cpu_rate", "hidden": a.hidden, "batch": a.batch, "threads": a.threads, "rounds": a.rounds,
           "model_gflop": model_flops / 1e9, "roof_gflops_per_cpu_s": roof_rate, "results": results,
           "roof_samples": [{"wall_s": w, "cpu_s": c} for w, c in roof], "load_average": os.getloadavg(),
           "environment": environment()}
    if a.out:
        write_json(doc, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
