"""A/B of two source trees (two commits): the same model and batches timed in two worker
processes, one per tree, asked in turn, so the machine's drift hits both alike.

The model and its inputs are those of ``cortex bench`` (``cortex.bench.workloads``; ``--model``:
TreeLSTM by default, h256, parse-like trees of ``--tokens`` leaves on average, batches 1 and 10).

Pipeline position: outside the pipeline, a measurement tool (like ``tools/ab_level1_tables.py``,
which compares two executables of one tree in one process). Two commits cannot share a process
(each has its own ``cortex``), so each tree gets a long-lived worker (``PYTHONPATH`` = the tree)
that compiles once and then answers "time batch b" requests; the driver alternates the workers
round by round (the order swapped every round) and reports medians and new/old ratios as JSON.

Usage (``git worktree add --detach ../base main`` makes the old tree)::

    python tools/ab_commits.py --old ../base --new . --targets llvm,opencl --rounds 20 --out ab.json
    python tools/ab_commits.py --old ../base --new . --targets llvm --schedule '{"node_jam": 4}'
    python tools/ab_commits.py --old . --new . --targets opencl --old-env POCL_AFFINITY=0 --new-env POCL_AFFINITY=1

Each worker checks that its outputs are finite and the driver reports the largest difference
between the two trees' root states (same weights, same batch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# ------------------------------------------------------------------------------------ worker


def worker(args: argparse.Namespace) -> int:
    """Compile, then answer requests on stdin (one JSON object per line) until EOF."""
    import numpy as np

    import cortex
    from cortex.bench import workloads as wl

    key = wl.GroupKey(args.model, args.hidden, None, args.vocab, seed=0)
    model = wl.build_model(key)
    width = model.params["U"].shape[1] if args.model == "DAGRNN" else 0
    opts = json.loads(args.compile_options) if args.compile_options else {}
    t0 = time.perf_counter()
    exe = cortex.compile(model, target=args.target, **opts)
    compile_s = time.perf_counter() - t0
    data = {}
    roots = {}
    for b in (int(x) for x in args.batches.split(",")):
        w = wl.make_inputs(args.model, args.tokens, b, vocab=args.vocab, width=width, seed=0)  # cortex bench's inputs
        batch = exe.linearize(w.structures)
        out = exe.run(batch)  # fills the token tables' rows of this batch
        roots[b] = np.asarray(out.root("h"), dtype=np.float64).reshape(b, -1)
        data[b] = (w.structures, batch)
    print(json.dumps({"ready": True, "compile_s": compile_s, "cortex": cortex.__file__,
                      "schedule": exe.schedule.to_dict(),
                      "roots": {b: r.tolist() for b, r in roots.items()}}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        trees, batch = data[req["batch"]]
        reps = req["reps"]
        for _ in range(3):
            exe.run(batch)
        t0 = time.perf_counter()
        for _ in range(reps):
            exe.run(batch)
        run_ms = (time.perf_counter() - t0) / reps * 1e3
        t0 = time.perf_counter()
        for _ in range(reps):
            exe(trees)
        call_ms = (time.perf_counter() - t0) / reps * 1e3
        print(json.dumps({"run_ms": run_ms, "call_ms": call_ms}), flush=True)
    return 0


# ------------------------------------------------------------------------------------ driver


class _Worker:
    def __init__(self, tree: Path, args: argparse.Namespace, target: str, options: str,
                 extra_env: dict[str, str]) -> None:
        env = dict(os.environ, PYTHONPATH=str(tree), **extra_env)
        cmd = [sys.executable, str(HERE), "--worker", "--target", target, "--model", args.model,
               "--hidden", str(args.hidden), "--tokens", str(args.tokens),
               "--vocab", str(args.vocab), "--batches", args.batches, "--compile-options", options]
        self.proc = subprocess.Popen(cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"worker {self.proc.args} ended (exit {self.proc.wait()})")
        return json.loads(line)

    def ask(self, batch: int, reps: int) -> dict:
        self.proc.stdin.write(json.dumps({"batch": batch, "reps": reps}) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait()


def _env(text: str) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    if any(len(pair) != 2 for pair in pairs):
        raise SystemExit(f"--old-env/--new-env: {text!r} is not NAME=VALUE[,NAME=VALUE...]")
    return {name.strip(): value for name, value in pairs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--old", default="", help="the old source tree (a checkout of the base commit)")
    p.add_argument("--new", default=str(HERE.parent.parent), help="the new source tree (default: this one)")
    p.add_argument("--targets", default="llvm")
    p.add_argument("--target", default="llvm", help=argparse.SUPPRESS)
    p.add_argument("--model", default="TreeLSTM", help="a model of cortex bench (cortex.bench.workloads.MODELS)")
    p.add_argument("--tokens", type=int, default=30, help="mean leaves (tokens) per input")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--batches", default="1,10")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--calls-per-round", type=float, default=40.0,
                   help="calls of batch 1 per round and worker (batch b: this / b, at least 1)")
    p.add_argument("--compile-options", default="", help="JSON of cortex.compile options for both trees")
    p.add_argument("--new-options", default="", help="JSON of cortex.compile options for the new tree only")
    p.add_argument("--old-env", default="", help="NAME=VALUE[,NAME=VALUE...] set for the old tree's "
                   "worker only (a process-wide setting such as POCL_AFFINITY=0)")
    p.add_argument("--new-env", default="", help="the same for the new tree's worker")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    if not args.old:
        p.error("--old is required")
    trees = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    results = []
    for target in args.targets.split(","):
        opts = {"old": args.compile_options, "new": args.new_options or args.compile_options}
        envs = {"old": _env(args.old_env), "new": _env(args.new_env)}
        workers = {k: _Worker(t, args, target, opts[k], envs[k]) for k, t in trees.items()}
        try:
            times: dict[tuple[str, int, str], list[float]] = {}
            for r in range(args.rounds):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for b in (int(x) for x in args.batches.split(",")):
                    reps = max(1, int(args.calls_per_round / b))
                    for k in order:
                        got = workers[k].ask(b, reps)
                        for kind in ("run_ms", "call_ms"):
                            times.setdefault((k, b, kind), []).append(got[kind])
            for b in (int(x) for x in args.batches.split(",")):
                old_root, new_root = (workers[k].ready["roots"][str(b)] for k in ("old", "new"))
                diff = max(abs(x - y) for ro, rn in zip(old_root, new_root) for x, y in zip(ro, rn))
                row = {"target": target, "batch": b, "max_abs_diff": diff}
                for kind in ("run_ms", "call_ms"):
                    old_t, new_t = times[("old", b, kind)], times[("new", b, kind)]
                    med = {k: statistics.median(times[(k, b, kind)]) for k in ("old", "new")}
                    per_round = sorted(n / o for o, n in zip(old_t, new_t))
                    row[kind] = {**med, "ratio": med["new"] / med["old"],
                                 "min_old": min(old_t), "min_new": min(new_t), "min_ratio": min(new_t) / min(old_t),
                                 "round_ratio_median": statistics.median(per_round),
                                 "round_ratio_quartiles": [per_round[len(per_round) // 4],
                                                           per_round[3 * len(per_round) // 4]],
                                 "old_all": old_t, "new_all": new_t}
                results.append(row)
                for kind, what in (("run_ms", "prelinearized"), ("call_ms", "call")):
                    x = row[kind]
                    print(f"{target} b{b} {what}: median old {x['old']:.3f} new {x['new']:.3f} ms (ratio "
                          f"{x['ratio']:.3f}; per-round ratio median {x['round_ratio_median']:.3f}, quartiles "
                          f"{x['round_ratio_quartiles'][0]:.2f}-{x['round_ratio_quartiles'][1]:.2f}); min old "
                          f"{x['min_old']:.3f} new {x['min_new']:.3f} ms (ratio {x['min_ratio']:.3f})", file=sys.stderr)
                print(f"{target} b{b}: max |diff| of the root states {diff:.1e}", file=sys.stderr)
            for k in ("old", "new"):
                print(f"{target} {k}: compile {workers[k].ready['compile_s']:.2f} s, schedule "
                      f"{json.dumps(workers[k].ready['schedule'], sort_keys=True)}", file=sys.stderr)
            results.append({"target": target, "compile_s": {k: workers[k].ready["compile_s"] for k in workers},
                            "schedules": {k: workers[k].ready["schedule"] for k in workers}})
        finally:
            for w in workers.values():
                w.close()
    doc = {"old": str(trees["old"]), "new": str(trees["new"]), "model": args.model, "hidden": args.hidden,
           "vocab": args.vocab, "old_env": args.old_env, "new_env": args.new_env,
           "rounds": args.rounds, "calls_per_round": args.calls_per_round, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
