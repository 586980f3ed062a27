"""Throughput of a distributed run: one process, one Ray actor, two Ray actors (one thread each).

Pipeline position: measures ``cortex.distributed`` end to end. The workload is real Python:
the functions of standard-library modules (``stdlib_function_rows``), as source text, through
the child-sum TreeLSTM over their ASTs (each row is parsed, turned into a tree, linearized and
run; the model is compiled for ``llvm`` with ``threads=1``). Three contenders, interleaved in
rounds (the order rotates each round) on one local Ray cluster:

* ``single``: one ``InferenceWorker`` (the actors' code, with the same ``freeze_gc``) in a fresh
  Python process without Ray, batch by batch — what a plain script does;
* ``ray_1`` / ``ray_2``: ``run_inference`` with a pool of 1 / 2 actors, output to Parquet.

Per run it records three rates, in trees per second:

* ``end_to_end``: all rows over the wall time from start to committed output (Ray's includes
  materializing the input, starting the actors and their compiles; ``single``'s its compile);
* ``steady``: the rows after the first batch over the wall time from the first output to the
  last (the pool at work, startup excluded);
* ``per_cpu_s``: the same rows over the CPU time the workers spent on them (``process_time``
  in the single process; for actors, user + system time from ``/proc/<pid>/stat`` sampled at
  each output): what a tree costs a core, which the load of a shared machine changes little.

``--commit-only`` measures the driver's committer alone (``commit`` in the full run's JSON too):
rows of two states of hidden 64 in batches of 128 through ``ExactlyOnceWriter``, in rows per
CPU-second — the bound the single committer puts on a cluster's output.

Ray runs also record where the wall time went (``phases_s``): handing the table to Ray, preparing
it (``RunReport.prepare_seconds``), pool start to first output, first to last output, commit. The JSON gives every run, the medians, the ratios to ``single`` and the load average
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

SCHEMA = "cortex-bench-distributed/2"
CONTENDERS = ("single", "ray_1", "ray_2")


def rates(marks: list[tuple[float, float, int]]) -> dict[str, float]:
    """``steady`` and ``per_cpu_s`` from ``marks``: (wall time, worker CPU seconds, rows done)
    after each output; the first mark (startup and the first batch) is the origin."""
    (t0, c0, r0), (t1, c1, r1) = marks[0], marks[-1]
    nan = float("nan")
    return {"steady": (r1 - r0) / (t1 - t0) if t1 > t0 else nan,
            "per_cpu_s": (r1 - r0) / (c1 - c0) if c1 > c0 else nan}


def actor_cpu_seconds() -> dict[int, float]:
    """User + system CPU seconds of every live actor process of a run's pool (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            title = (entry / "cmdline").read_bytes()
            if not title.startswith(b"ray::MapWorker(MapBatches(InferenceWorker))"):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return found


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
        marks.append((time.perf_counter(), time.process_time(),
                      min(i + batch_size, table.num_rows)))
    end = time.perf_counter()
    return {"end_to_end": table.num_rows / (end - start), **rates(marks),
            "startup_s": first - start}


def run_single_process(trees: int, batch_size: int, spec: str) -> dict[str, float]:
    """``run_single`` in a fresh Python process that never imports Ray."""
    command = [sys.executable, __file__, "--single", "--trees", str(trees),
               "--batch-size", str(batch_size), "--model", spec]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def run_ray(source: Any, table: Any, batch_size: int, actors: int) -> dict[str, float]:
    from cortex.distributed import run_inference, to_dataset

    marks: list[tuple[float, int]] = []
    cpu: dict[int, list[float]] = {}  # per actor: its CPU seconds at the first and last output

    def progress(p: Any) -> None:
        marks.append((time.perf_counter(), p.rows))
        if p.done:
            return
        for pid, seconds in actor_cpu_seconds().items():
            cpu.setdefault(pid, [seconds, seconds])[1] = seconds

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        dataset = to_dataset(table, batch_size)
        handed = time.perf_counter()
        report = run_inference(dataset, source, Path(tmp) / "out.parquet", actors=actors,
                               batch_size=batch_size, progress=progress)
        end = time.perf_counter()
    assert report.rows == table.num_rows and report.errors == 0, report
    spent = sum(last - first for first, last in cpu.values())
    (t_first, r_first), (t_last, r_last) = marks[0], marks[-2]  # marks[-1]: the commit
    return {"end_to_end": table.num_rows / (end - start),
            **rates([(t_first, 0.0, r_first), (t_last, spent, r_last)]),
            "startup_s": report.startup_seconds,
            "phases_s": {"to_ray": handed - start, "prepare": report.prepare_seconds,
                         "pool_start_to_first_output": report.startup_seconds,
                         "first_to_last_output": t_last - t_first,
                         "commit": marks[-1][0] - t_last}}


def measure_commit(rows: int, hidden: int = 64, batch: int = 128) -> dict[str, float]:
    """``rows`` rows of ``h`` and ``c`` through the driver's committer, in batches."""
    import numpy as np
    import pyarrow as pa

    from cortex.distributed import ExactlyOnceWriter

    rng = np.random.default_rng(0)

    def states(n: int) -> Any:
        return pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * hidden, dtype=np.float32)), hidden)

    tables = [pa.table({"id": pa.array(np.arange(i, min(i + batch, rows))),
                        "h": states(min(batch, rows - i)), "c": states(min(batch, rows - i)),
                        "error": pa.nulls(min(batch, rows - i), pa.string())})
              for i in range(0, rows, batch)]
    with tempfile.TemporaryDirectory() as tmp:
        wall, cpu = time.perf_counter(), time.process_time()
        with ExactlyOnceWriter(Path(tmp) / "out.parquet") as writer:
            for table in tables:
                writer.write(table)
            writer.commit(pa.array(np.arange(rows)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"rows": rows, "hidden": hidden, "batch": batch, "wall_s": wall, "cpu_s": cpu,
            "rows_per_cpu_s": rows / cpu if cpu > 0 else float("nan")}


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
            print(f"round {r} {name:7}: {result['end_to_end']:6.0f} trees/s end to end, "
                  f"{result['steady']:6.0f} steady, {result['per_cpu_s']:6.0f} per CPU-s, "
                  f"load {load_before:.1f}", file=sys.stderr)
    keys = ("end_to_end", "steady", "per_cpu_s")
    medians = {name: {key: statistics.median(run[key] for run in rs)
                      for key in keys + ("startup_s", "load_before")}
               for name, rs in runs.items()}
    ratios = {name: {key: medians[name][key] / medians["single"][key] for key in keys}
              for name in CONTENDERS}
    phases = {name: {key: statistics.median(run["phases_s"][key] for run in rs)
                     for key in rs[0]["phases_s"]}
              for name, rs in runs.items() if "phases_s" in rs[0]}
    return {
        "schema": SCHEMA,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv),
        "settings": {"trees": trees, "rounds": rounds, "batch_size": batch_size, "model": spec,
                     "target": "llvm", "threads_per_worker": 1,
                     "ray": ray.__version__, "cluster_cpus": ray.cluster_resources().get("CPU"),
                     "host_cpus": os.cpu_count()},
        "runs": runs,
        "medians": medians,
        "ratio_to_single": ratios,
        "median_phases_s": phases,
        "commit": measure_commit(50 * trees),
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
    parser.add_argument("--commit-only", action="store_true",
                        help="measure only the driver's committer (50 x --trees rows)")
    args = parser.parse_args(argv)
    if args.commit_only:
        runs = [measure_commit(50 * args.trees) for _ in range(args.rounds)]
        doc = {"schema": SCHEMA + "#commit", "command": " ".join(sys.argv),
               "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "load_average": os.getloadavg()[0], "runs": runs,
               "median_rows_per_cpu_s": statistics.median(r["rows_per_cpu_s"] for r in runs)}
        return emit(doc, args.out)
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
    return emit(doc, args.out)


def emit(doc: dict[str, Any], out: Path | None) -> int:
    """Write ``doc`` as JSON to ``out`` (stdout when None)."""
    text = json.dumps(doc, indent=2)
    if out:
        out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
