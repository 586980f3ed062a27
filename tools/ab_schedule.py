"""A/B of schedule knobs on any zoo model: the default schedule and variants with some knobs
changed, timed in one process on the same prelinearized batch, alternating.

Pipeline position: outside the pipeline, a measurement tool (like ``tools/ab_level1_tables.py``).
The models, their sizes and inputs are the benchmark's (``cortex.bench.workloads``: hidden 256 is
MV-RNN's 64, ``--tokens 30`` is a 5 x 5 DAG-RNN grid). Every variant's root states are compared
with the default's; the times are medians over interleaved rounds and the ratio is variant /
default (below 1: the variant is faster). Every call is also timed alone: ``call_ms`` gives
each variant's median call and fastest call, and ``spread`` their ratio (how much slower a
typical call is than an undisturbed one). ``--rotate N`` times N different batches of the same
size in turn instead of one batch again and again: a call then meets tokens (and token-table
rows) the previous call did not touch, as a server's calls do.

Usage::

    python tools/ab_schedule.py --model DAGRNN --variant '{"refactor": true}' --batches 1,10,100
    python tools/ab_schedule.py --model MVRNN --variant '{"node_jam": 1}' --variant '{"wide_lanes": 0}'
    python tools/ab_schedule.py --model TreeGRU --variant '{"leaf_kids": false}' --batches 1,10 --rotate 3
    python tools/ab_schedule.py --model TreeFC --weights bfloat16 --variant '{"leaf_kids": false}'
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cortex  # noqa: E402
from benchmarks.common import environment, write_json  # noqa: E402
from cortex.bench.workloads import GroupKey, build_model, make_inputs, model_spec  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--target", default="llvm")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--tokens", type=int, default=30)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--batches", default="1,10,100")
    p.add_argument("--variant", action="append", default=[], help="JSON dict of knobs (repeatable)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--min-time", type=float, default=0.05, help="seconds per case and round, at least")
    p.add_argument("--rotate", type=int, default=1, help="different batches timed in turn (1: one batch, repeated)")
    p.add_argument("--weights", default="", help="the compile option weights= of every variant "
                   "(e.g. bfloat16; default: the model's dtype)")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    if args.rotate < 1:
        p.error("--rotate must be at least 1")

    key = GroupKey(args.model, args.hidden, None, args.vocab, 0)
    model = build_model(key)
    variants = {"default": {}} | {v: json.loads(v) for v in args.variant}
    extra = {"weights": args.weights} if args.weights else {}
    exes = {name: cortex.compile(model, target=args.target, schedule=knobs or None, **extra)
            for name, knobs in variants.items()}
    results = []
    for b in (int(x) for x in args.batches.split(",")):
        width = model.params["U"].shape[1] if args.model == "DAGRNN" else model_spec(args.model).hidden(args.hidden)
        inputs = [make_inputs(args.model, args.tokens, b, vocab=args.vocab, width=width, seed=seed)
                  for seed in range(args.rotate)]
        base = exes["default"]
        rotation = [base.linearize(i.structures) for i in inputs]
        batch = rotation[0]
        want = base.run(batch)
        diff = {n: max(float(np.abs(e.run(batch).root(s) - want.root(s)).max()) for s in want.states)
                for n, e in exes.items()}
        times: dict[str, list[float]] = {n: [] for n in exes}
        calls: dict[str, list[float]] = {n: [] for n in exes}
        for _ in range(args.rounds):
            for name, exe in exes.items():
                exe.run(rotation[-1])
                reps, t0 = 0, time.perf_counter()
                while reps < 3 or time.perf_counter() - t0 < args.min_time:
                    t1 = time.perf_counter()
                    exe.run(rotation[reps % len(rotation)])
                    calls[name].append((time.perf_counter() - t1) * 1e3)
                    reps += 1
                times[name].append((time.perf_counter() - t0) / reps * 1e3)
        med = {n: statistics.median(t) for n, t in times.items()}
        call_ms = {n: {"median": statistics.median(c), "fastest": min(c), "calls": len(c)} for n, c in calls.items()}
        spread = {n: c["median"] / c["fastest"] for n, c in call_ms.items()}
        row = {"batch": b, "ms": med, "ratio": {n: med[n] / med["default"] for n in med}, "max_abs_diff": diff,
               "call_ms": call_ms, "spread": spread}
        results.append(row)
        print(f"{args.model} b{b}: " + ", ".join(
            f"{n} {med[n]:.3f} ms ({med[n] / med['default']:.2f}x, diff {diff[n]:.1e}; calls median "
            f"{call_ms[n]['median']:.3f} fastest {call_ms[n]['fastest']:.3f} spread {spread[n]:.2f})"
            for n in med), file=sys.stderr)
    write_json({"model": args.model, "target": args.target, "weights": args.weights or None, "hidden": args.hidden, "tokens": args.tokens,
                "rotate": args.rotate, "variants": variants, "rounds": args.rounds, "results": results, "environment": environment(),
                "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
