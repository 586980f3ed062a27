"""Where the time of one ``llvm`` call goes: per level and per thread, work vs barrier wait.

Compiles a zoo model (``--model``, default TreeLSTM, vocab 20000, embed = hidden; the other
models with the benchmark's sizes and inputs, ``cortex.bench.workloads``) for target ``llvm`` with
``profile=True`` (a build that reads the cycle counter at every barrier, see
``cortex.plugins.cpu_llvm.codegen.generate``), runs it on the benchmark's parse-like trees and
prints, for the median call of ``--reps``, each level's node count and, per thread, the time it
computed before the level's barrier and the time it waited there (microseconds).

Usage::

    python tools/llvm_profile.py --batch 1 --hidden 256 [--threads 2] [--reps 200] [--schedule '{"panel_kib": 0}']
    python tools/llvm_profile.py --model DAGRNN --batch 10 --tokens 30
    python tools/llvm_profile.py --batch 10 --bench-inputs --host   # cortex bench's trees, and the host part

``--bench-inputs`` gives the TreeLSTM the benchmark's inputs (``cortex.bench.workloads``) instead
of this tool's own trees of 20-40 tokens. ``--host`` also times, on an ordinary (non-profiling)
build of the same schedule, interleaved in rounds: the whole call ``exe(structures)`` (repeated
structures, as ``cortex bench`` times it), ``exe.run`` on a prelinearized batch, and the native
call alone (``exe.backend.runtime.launch`` with the arguments a call stages), medians and minima.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    import cortex
    from benchmarks.common import make_trees
    from cortex.models import TreeLSTM

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="TreeLSTM")
    ap.add_argument("--tokens", type=int, default=30, help="input size for a model other than TreeLSTM")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--schedule", default="", help="JSON of schedule knobs over the default rules")
    ap.add_argument("--weights", default="float32", help="weights= of the compile (bfloat16: stored matrices)")
    ap.add_argument("--bench-inputs", action="store_true",
                    help="the TreeLSTM on cortex bench's inputs (cortex.bench.workloads)")
    ap.add_argument("--host", action="store_true",
                    help="also time the whole call, the prelinearized call and the native call")
    ap.add_argument("--shared-us", type=float, default=25.0,
                    help="a barrier wait above this (us) flags a call as disturbed")
    a = ap.parse_args(argv)
    if a.model == "TreeLSTM" and not a.bench_inputs:
        model = TreeLSTM(vocab=20000, embed=a.hidden, hidden=a.hidden)
        trees = make_trees(a.seed, a.batch, 20, 40, 20000)
    else:
        from cortex.bench.workloads import GroupKey, build_model, make_inputs, model_spec

        model = build_model(GroupKey(a.model, a.hidden, None, 20000, a.seed))
        width = model.params["U"].shape[1] if a.model == "DAGRNN" else model_spec(a.model).hidden(a.hidden)
        trees = make_inputs(a.model, a.tokens, a.batch, vocab=20000, width=width, seed=a.seed).structures
    schedule = json.loads(a.schedule) if a.schedule else "default"
    exe = cortex.compile(model, target="llvm", threads=a.threads, profile=True, schedule=schedule,
                         weights=a.weights)
    lin = exe.linearize(trees)
    offs = np.diff(np.asarray(lin.level_offsets)) if hasattr(lin, "level_offsets") else None
    prog = exe.artifact
    runs = []
    for _ in range(a.reps):
        exe.run(lin)
        p = prog.profile()
        runs.append((p["events"][0][-1, 1] if len(p["events"][0]) else 0.0, p))
    # per level, over every call whose threads recorded the same barriers: the slower thread's
    # work (min and median) -- robust on a shared machine, where a call whose wait at some
    # barrier exceeds --shared-us most likely had both threads on one core
    works = [np.max(np.array(r[1]["compute"]), axis=0) for r in runs
             if len({len(c) for c in r[1]["compute"]}) == 1]
    shared = sum(1 for r in runs if any(len(w) and w.max() > a.shared_us for w in r[1]["wait"]))
    runs.sort(key=lambda r: r[0])
    total, p = runs[len(runs) // 2]
    nth = len(p["compute"])
    print(f"batch {a.batch}: {lin.num_nodes} nodes, {lin.num_levels} levels, {nth} threads; "
          f"median call {total:.1f} us (min {runs[0][0]:.1f}); {shared} of {len(runs)} calls waited "
          f"> {a.shared_us:g} us at a barrier (threads sharing a core?)")
    if works:
        w = np.array(works)
        print("per barrier, slower thread's work over all calls (us):")
        print("  min    " + " ".join(f"{x:6.1f}" for x in w.min(axis=0)) + f"   sum {w.min(axis=0).sum():.1f}")
        print("  median " + " ".join(f"{x:6.1f}" for x in np.median(w, axis=0))
              + f"   sum {np.median(w, axis=0).sum():.1f}")
        wait = [np.array(r[1]["wait"]).sum(axis=1) for r in runs
                if len({len(c) for c in r[1]["wait"]}) == 1]
        if wait:
            ws = np.array(wait)
            print("barrier wait per call and thread (us): min " + " ".join(f"{x:.1f}" for x in ws.min(axis=0))
                  + ", median " + " ".join(f"{x:.1f}" for x in np.median(ws, axis=0)))
    print("the median call:")
    print("starts (us): " + " ".join(f"t{t}={p['start'][t]:.1f}" for t in range(nth)))
    head = "barrier  nodes " + " ".join(f"  t{t} work   t{t} wait" for t in range(nth))
    print(head)
    for k in range(len(p["compute"][0])):
        nodes = int(offs[k]) if offs is not None and k < len(offs) else ""
        row = " ".join(f"{p['compute'][t][k]:8.1f} {p['wait'][t][k]:8.1f}" for t in range(nth)
                       if k < len(p["compute"][t]))
        print(f"{k:7d} {str(nodes):>6} {row}")
    print("sum    " + " " * 7 + " ".join(f"{p['compute'][t].sum():8.1f} {p['wait'][t].sum():8.1f}"
                                          for t in range(nth)))
    if a.host:
        host_times(model, trees, lin, a.threads, schedule)


def host_times(model, trees, lin, threads: int, schedule, rounds: int = 15, calls: int = 40) -> None:
    """The host part of a call: ``exe(trees)`` vs ``exe.run(lin)`` vs the native call alone,
    on an ordinary build, interleaved in ``rounds`` of ``calls`` calls each (us)."""
    import time

    import cortex

    exe = cortex.compile(model, target="llvm", threads=threads, schedule=schedule)
    runtime = exe.backend.runtime
    staged = []
    launch = runtime.launch
    runtime.launch = lambda art, args: (staged.append(args), launch(art, args))[1]
    exe.run(lin)
    runtime.launch = launch
    args = staged[-1]
    arms = {"exe(trees)": lambda: exe(trees), "exe.run(lin)": lambda: exe.run(lin),
            "launch": lambda: launch(exe.artifact, args)}
    for f in arms.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(rounds):
        for k, f in arms.items():
            for _ in range(calls):
                t = time.perf_counter()
                f()
                times[k].append((time.perf_counter() - t) * 1e6)
    print(f"host part ({rounds} rounds x {calls} calls, interleaved; us):")
    for k, v in times.items():
        v = np.array(v)
        print(f"  {k:14s} median {np.median(v):8.1f}  p25 {np.percentile(v, 25):8.1f}  min {v.min():8.1f}")


if __name__ == "__main__":
    main()
