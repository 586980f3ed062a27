"""Time the cuda target's TreeLSTM (hidden 256) under a few schedules, batch 1 and 10, as JSON.

Pipeline position: outside the pipeline, a tuning aid for a lent GPU (``tools/gpu_check.sh``
runs it after the benchmark). Each schedule is compiled through ``cortex.compile(model,
target="cuda", schedule=...)``, checked against the float64 reference on the batch, then timed
(the public call on pre-linearized batches: ``exe.run(batch)``, so the numbers are the device
work plus the per-call uploads/downloads). Knobs swept: ``reduce_lanes`` (threads per gate row
splitting its GEMV and combining with warp shuffles; 0 = auto, ``threads // hidden``) with
``threads`` and ``weight_layout`` (row-major keeps a lane group's loads of one row contiguous),
first, since they are the newest and least measured; then ``kernel_form`` (single persistent
kernel vs per-level launches), ``unroll`` (independent accumulators in the gate GEMVs) and
``threads`` (threads per block). Every entry records the notes (how many lanes were used).

Usage: ``python tools/gpu_schedule_sweep.py --out sweep.json [--budget-s 60]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cortex  # noqa: E402
from cortex.core.frontend.reference import evaluate  # noqa: E402
from cortex.core.frontend.trace import trace  # noqa: E402
from cortex.models import TreeLSTM  # noqa: E402

SCHEDULES = [
    {"kernel_form": "single"},  # default: auto lanes (1 at hidden 256 with 256 threads)
    {"kernel_form": "single", "threads": 1024},  # auto: 4 lanes per gate row
    {"kernel_form": "single", "threads": 1024, "reduce_lanes": 1},
    {"kernel_form": "single", "threads": 1024, "reduce_lanes": 8, "weight_layout": "row_major"},
    {"kernel_form": "single", "reduce_lanes": 32, "weight_layout": "row_major"},
    {"kernel_form": "single", "threads": 1024, "reduce_lanes": 4, "unroll": 2},
    {"kernel_form": "per_level"},
    {"kernel_form": "single", "unroll": 4},
    {"kernel_form": "single", "unroll": 8},
    {"kernel_form": "single", "threads": 128, "unroll": 4},
    {"kernel_form": "per_level", "unroll": 4},
]


def tree(rng: random.Random, leaves: int, vocab: int):
    nodes = [rng.randrange(vocab) for _ in range(leaves)]
    while len(nodes) > 1:
        i = rng.randrange(len(nodes) - 1)
        nodes[i:i + 2] = [(nodes[i], nodes[i + 1])]
    return nodes[0]


def time_calls(fn, budget_s: float, min_reps: int = 30) -> list[float]:
    for _ in range(3):
        fn()
    out, start = [], time.perf_counter()
    while len(out) < min_reps or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
        if time.perf_counter() - start > 4 * budget_s:
            break
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--budget-s", type=float, default=60.0, help="total time budget (default %(default)s)")
    p.add_argument("--hidden", type=int, default=256, help="hidden and embedding size (default %(default)s)")
    args = p.parse_args(argv)
    rng = random.Random(0)
    model = TreeLSTM(vocab=20000, embed=args.hidden, hidden=args.hidden, seed=0)
    graph = trace(model)
    results, start = [], time.perf_counter()
    per_case = args.budget_s / (2 * len(SCHEDULES)) / 2
    batches = {b: [tree(rng, rng.randint(20, 40), 20000) for _ in range(b)] for b in (1, 10)}
    for knobs in SCHEDULES:
        entry: dict = {"schedule": knobs}
        try:
            t0 = time.perf_counter()
            exe = cortex.compile(model, target="cuda", schedule=knobs)
            entry["compile_s"] = time.perf_counter() - t0
            entry["notes"] = list(exe.lowered.notes)
            for b, trees in batches.items():
                batch = exe.linearize(trees)
                out = exe.run(batch)
                want = evaluate(graph, model.params, batch)
                err = max(float(np.abs(out.nodes(s) - w).max() / max(1.0, np.abs(w).max())) for s, w in want.items())
                launches = exe.backend.runtime.last_launches
                ms = time_calls(lambda: exe.run(batch), per_case)
                entry[f"b{b}"] = {"median_ms": statistics.median(ms), "min_ms": min(ms), "reps": len(ms),
                                  "max_rel_error": err,
                                  "launches": len(launches), "grid": [c.grid for c in launches[:3]],
                                  "block": launches[0].block if launches else None,
                                  "cooperative": any(c.cooperative for c in launches)}
        except Exception as e:  # noqa: BLE001 - one failing schedule is reported, the rest still run
            entry["error"] = f"{type(e).__name__}: {str(e)[:500]}"
        results.append(entry)
        line = {k: (v["median_ms"] if isinstance(v, dict) and "median_ms" in v else None) for k, v in entry.items()
                if k.startswith("b")}
        print(f"{json.dumps(knobs):55} {line} {entry.get('error', '')[:120]}", flush=True)
        if time.perf_counter() - start > args.budget_s:
            results.append({"stopped": "time budget spent"})
            break
    Path(args.out).write_text(json.dumps({"model": f"TreeLSTM hidden=embed={args.hidden} vocab=20000 float32", "results": results},
                                         indent=2))
    timed = [r for r in results if "b1" in r]
    if not timed:
        print("no schedule ran: " + "; ".join(r.get("error", "")[:200] for r in results if "error" in r), file=sys.stderr)
    return 0 if timed else 1


if __name__ == "__main__":
    sys.exit(main())
