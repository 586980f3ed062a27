"""Throughput of a distributed run: one process, one Ray actor, two Ray actors (one thread each).

Pipeline position: measures ``cortex.distributed`` end to end. The workload is real Python:
the functions of standard-library modules (``stdlib_function_rows``), as source text, through
the child-sum TreeLSTM over their ASTs (each row is parsed, turned into a tree, linearized and
run; the model is compiled for ``llvm`` with ``threads=1``). Three contenders, interleaved in
rounds (the order rotates each round) on one local Ray cluster:

* ``single``: one ``InferenceWorker`` (the actors' code, with the same ``freeze_gc``) in a fresh
  Python process without Ray, batch by batch — what a plain script does;
* ``ray_1`` / ``ray_2``: ``run_inference`` with a pool of 1 / 2 actors, output to Parquet.

Per run it records the wall time from start to committed output (``end_to_end``: Ray's part
includes materializing the input, starting the actors and their compiles; ``single``'s includes
its compile) and the steady rate (``steady``: rows per second while the output went from 10% to
90% of the rows, from the times each batch's output reached the driver). The JSON gives every run, the medians, the ratios to ``single`` and the load average
before and after each run, since the machine may be shared.

Usage: ``python benchmarks/bench_distributed.py [--trees 4000] [--rounds 3] [--out b.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEMA = "cortex-bench-distributed/1"
CONTENDERS = ("single", "ray_1", "ray_2")


def steady_rate(marks: list[tuple[float, int]], total: int) -> float:
    """Rows per second between the first output mark at >= 10% of ``total`` rows and the last
    at <= 90% (``marks``: (time, rows done) after each output)."""
    inside = [m for m in marks if 0.1 * total <= m[1] <= 0.9 * total]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return float("nan")
    (t0, r0), (t1, r1) = inside[0], inside[-1]
    return (r1 - r0) / (t1 - t0)


def run_single(source: Any, table: Any, batch_size: int) -> dict[str, float]:
    """The single-process contender, in this process (``main`` runs it in a fresh one)."""
    from cortex.distributed import InferenceWorker

    start = time.perf_counter()
    worker = InferenceWorker(source, column="source", form="python", freeze_gc=True)
    first = time.perf_counter()
    ids = table.column("id").to_numpy(zero_copy_only=False)
    texts = table.column("source").to_numpy(zero_copy_only=False)
    marks = []
    for i in range(0, table.num_rows, batch_size):
        worker({"id": ids[i:i + batch_size], "source": texts[i:i + batch_size]})
        marks.append((time.perf_counter(), min(i + batch_size, table.num_rows)))
    end = time.perf_counter()
    return {"end_to_end": table.num_rows / (end - start),
            "steady": steady_rate(marks, table.num_rows), "startup_s": first - start}


def run_single_process(trees: int, batch_size: int, spec: str) -> dict[str, float]:
    """``run_single`` in a fresh Python process that never imports Ray."""
    command = [sys.executable, __file__, "--single", "--trees", str(trees),
               "--batch-size", str(batch_size), "--model", spec]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def run_ray(source: Any, table: Any, batch_size: int, actors: int) -> dict[str, float]:
    from cortex.distributed import run_inference, to_dataset

    marks: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        report = run_inference(to_dataset(table, batch_size), source, Path(tmp) / "out.parquet",
                               actors=actors, batch_size=batch_size,
                               progress=lambda p: marks.append((time.perf_counter(), p.rows)))
        end = time.perf_counter()
    assert report.rows == table.num_rows and report.errors == 0, report
    return {"end_to_end": table.num_rows / (end - start),
            "steady": steady_rate(marks, table.num_rows), "startup_s": report.startup_seconds}


def workload(trees: int, spec: str) -> tuple[Any, Any]:
    """The rows (``trees`` standard-library functions) and the executable source."""
    from cortex.distributed import CompileRecipe, model_from_spec
    from cortex.distributed.inputs import stdlib_function_rows

    return stdlib_function_rows(trees), CompileRecipe(model_from_spec(spec), "llvm", threads=1)


def benchmark(trees: int, rounds: int, batch_size: int, spec: str) -> dict[str, Any]:
    """Run the rounds on the Ray cluster this process is connected to; the JSON document."""
    import ray

    table, source = workload(trees, spec)
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in CONTENDERS}
    for r in range(rounds):
        order = CONTENDERS[r % 3:] + CONTENDERS[:r % 3]
        for name in order:
            load_before = os.getloadavg()[0]
            if name == "single":
                result = run_single_process(trees, batch_size, spec)
            else:
                result = run_ray(source, table, batch_size, int(name[-1]))
            result.update(round=r, load_before=load_before, load_after=os.getloadavg()[0])
            runs[name].append(result)
            print(f"round {r} {name:7}: {result['end_to_end']:7.0f} trees/s end to end, "
                  f"{result['steady']:7.0f} steady, load {load_before:.1f}", file=sys.stderr)
    medians = {name: {key: statistics.median(run[key] for run in rs)
                      for key in ("end_to_end", "steady", "startup_s")}
               for name, rs in runs.items()}
    ratios = {name: {key: medians[name][key] / medians["single"][key]
                     for key in ("end_to_end", "steady")} for name in CONTENDERS}
    return {
        "schema": SCHEMA,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv),
        "settings": {"trees": trees, "rounds": rounds, "batch_size": batch_size, "model": spec,
                     "target": "llvm", "threads_per_worker": 1,
                     "ray": ray.__version__, "cluster_cpus": ray.cluster_resources().get("CPU"),
                     "host_cpus": os.cpu_count()},
        "runs": runs,
        "median_trees_per_s": medians,
        "ratio_to_single": ratios,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--model", default="ChildSumTreeLSTM:hidden=64,embed=64,vocab=ast")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    parser.add_argument("--single", action="store_true",
                        help="run only the single-process contender, here; print its JSON")
    args = parser.parse_args(argv)
    if args.single:
        table, source = workload(args.trees, args.model)
        print(json.dumps(run_single(source, table, args.batch_size)))
        return 0
    import ray

    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="WARNING")
    try:
        doc = benchmark(args.trees, args.rounds, args.batch_size, args.model)
    finally:
        ray.shutdown()
    text = json.dumps(doc, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
