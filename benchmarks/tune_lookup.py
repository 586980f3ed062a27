"""What reading the tuning records costs a compile: ``schedule="auto"`` with a record hit
against the same schedule given explicitly, interleaved in one process.

The records database (a temporary one) holds the hit and ``--others`` records of other models
and devices. Medians of ``--rounds`` alternating compiles, in wall time and in this process's CPU time
(``time.process_time``, all threads; far less sensitive to other processes on a shared
machine):

* ``compile_auto_s - compile_given_s``: the whole difference a user sees (both compiles make
  the same program; the hit adds the fingerprints, the query and the validation);
  ``difference_paired_s``: the median of the per-round differences (the two compiles of a
  round back to back), less sensitive to bursts of load; the executable of the previous
  compile is freed before each timed one, outside the timing;
* ``lookup_s``: ``cortex.tuning.records.auto_schedule`` alone on the compiled graph.

    python benchmarks/tune_lookup.py --out tune_lookup.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cortex.bench.environment import host, versions


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="TreeLSTM:hidden=256,embed=256,vocab=20000")
    p.add_argument("--target", default="llvm")
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--others", type=int, default=500, help="unrelated records in the database")
    p.add_argument("--out", help="JSON file (default: stdout)")
    args = p.parse_args(argv)

    os.environ["CORTEX_TUNE_DB"] = str(Path(tempfile.mkdtemp()) / "records.sqlite")
    import cortex
    from cortex.tuning.cli import load_model
    from cortex.tuning.fingerprint import device_description, device_fingerprint
    from cortex.tuning.records import Record, RecordKey, RecordStore, auto_schedule

    model = load_model(args.model)
    exe = cortex.compile(model, target=args.target, schedule="default")
    resolved, options = cortex.resolve_target(args.target)
    space = cortex.ScheduleSpace(exe.backend.capabilities, exe.dtype)
    tuned = space.with_knobs(unroll=2)
    key = RecordKey(exe.graph_fingerprint, resolved.name,
                    device_fingerprint(device_description(resolved.name, options, exe.backend)),
                    exe.dtype, "b8-n32-parse")
    store = RecordStore()

    def record(k: RecordKey) -> Record:
        return Record(key=k, schedule=tuned.to_dict(), speedup=1.2, seconds=1.0, default_seconds=1.2,
                      trials=64, method="model", created=time.time())

    for i in range(args.others):
        store.put(record(RecordKey(f"{i:032x}", resolved.name, key.device, exe.dtype, "b8-n32-parse")))
    store.put(record(key))
    store.close()

    wall: dict[str, list[float]] = {"given": [], "auto": []}
    cpu: dict[str, list[float]] = {"given": [], "auto": []}
    lookup = []
    e = None
    for r in range(args.rounds):
        for arm in (("given", "auto") if r % 2 == 0 else ("auto", "given")):
            e = None  # the previous executable is freed (its threads, its machine code) untimed
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            e = cortex.compile(model, target=args.target,
                               **({"schedule": tuned} if arm == "given" else {}))
            wall[arm].append(time.perf_counter() - t0)
            cpu[arm].append(time.process_time() - c0)
            assert e.schedule == tuned, e.schedule_source
        t0 = time.perf_counter()
        auto_schedule(exe.graph_fingerprint, resolved.name, options, exe.backend, space)
        lookup.append(time.perf_counter() - t0)
    med = statistics.median
    given, auto = wall["given"], wall["auto"]
    result = {"benchmark": "tune_lookup", "environment": {"host": host(), "versions": versions()},
              "load": os.getloadavg(),
              "model": args.model, "target": args.target, "rounds": args.rounds,
              "records_in_db": args.others + 1, "compile_given_s": med(given),
              "compile_auto_s": med(auto), "difference_s": med(auto) - med(given),
              "compile_given_cpu_s": med(cpu["given"]), "compile_auto_cpu_s": med(cpu["auto"]),
              "difference_cpu_s": med(cpu["auto"]) - med(cpu["given"]),
              "difference_paired_s": med([a - g for a, g in zip(auto, given)]),
              "lookup_s": med(lookup), "lookup_max_s": max(lookup),
              "all": {"wall": wall, "cpu": cpu, "lookup": lookup}}
    text = json.dumps(result, indent=1)
    Path(args.out).write_text(text + "\n") if args.out else print(text)
    print(f"compile with a record hit {med(auto):.3f} s, with the schedule given {med(given):.3f} s "
          f"(difference {1e3 * (med(auto) - med(given)):+.1f} ms, per round "
          f"{1e3 * result['difference_paired_s']:+.1f} ms; in CPU time "
          f"{1e3 * result['difference_cpu_s']:+.1f} ms); the lookup alone "
          f"{1e3 * med(lookup):.1f} ms (max {1e3 * max(lookup):.1f} ms)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
