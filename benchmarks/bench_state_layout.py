"""A/B of the ``state_layout`` knob: per-node state row-major vs in blocks of nodes.

Pipeline position: outside the pipeline. For each (model, batch) it compiles one executable
per variant (the target's default schedule, then the same schedule with
``state_layout="node_blocked"`` and each ``state_block``), checks that every variant returns the
row-major variant's states, and times ``exe.run`` on one prelinearized batch in interleaved
rounds (every variant once per round, in rotating order), so the machine's drift hits every
variant alike. The JSON holds each variant's median milliseconds and its ratio to row-major
(> 1: slower than row-major).

Usage::

    python benchmarks/bench_state_layout.py --targets llvm --out state_layout.json
    python benchmarks/bench_state_layout.py --quick        # smoke test, seconds
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make `cortex` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import cortex  # noqa: E402
from benchmarks.common import add_ab_arguments, environment, time_calls, write_json  # noqa: E402
from cortex.bench.workloads import GroupKey, build_model, make_inputs  # noqa: E402

CASES = (("TreeLSTM", 1), ("TreeLSTM", 10), ("TreeGRU", 10))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="llvm", help="comma list of targets (default: llvm)")
    p.add_argument("--blocks", default="8,16", help="state_block values to compare (default: 8,16)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--tokens", type=int, default=30, help="mean leaves per tree")
    add_ab_arguments(p)
    return p.parse_args(argv)


def measure(target: str, model_name: str, batch_size: int, args: argparse.Namespace,
            blocks: list[int]) -> dict:
    model = build_model(GroupKey(model_name, args.hidden, None, 1000, seed=1))
    structures = make_inputs(model_name, args.tokens, batch_size, vocab=1000, width=args.hidden, seed=1).structures
    extra = {"threads": args.threads} if args.threads else {}
    variants = {"row_major": cortex.compile(model, target=target, schedule=dict(extra))}
    for b in blocks:
        variants[f"node_blocked_{b}"] = cortex.compile(
            model, target=target, schedule={**extra, "state_layout": "node_blocked", "state_block": b})
    batch = variants["row_major"].linearize(structures)
    want = variants["row_major"].run(batch)
    for name, exe in variants.items():
        got = exe.run(batch)
        for s in want.states:
            np.testing.assert_allclose(got.nodes(s), want.nodes(s), rtol=1e-5, atol=1e-5, err_msg=name)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(time_calls(lambda: variants[name].run(batch), args.min_time))
    med = {name: statistics.median(v) for name, v in samples.items()}
    return {
        "target": target, "model": model_name, "batch": batch_size, "nodes": batch.num_nodes,
        "levels": batch.num_levels, "hidden": args.hidden,
        "schedule": variants["row_major"].schedule.to_dict(),
        "median_ms": med,
        "ratio_to_row_major": {name: med[name] / med["row_major"] for name in med},
        "samples_ms": samples,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.hidden, args.rounds, args.min_time = 32, 3, 0.02
    blocks = [int(b) for b in args.blocks.split(",") if b]
    doc = {"benchmark": "state_layout", "rounds": args.rounds, "min_time_s": args.min_time,
           "tokens": args.tokens, "environment": environment(), "results": []}
    for target in args.targets.split(","):
        for model_name, batch_size in CASES:
            res = measure(target, model_name, batch_size, args, blocks)
            doc["results"].append(res)
            ratios = ", ".join(f"{k} {v:.3f}" for k, v in res["ratio_to_row_major"].items() if k != "row_major")
            print(f"{target} {model_name} b{batch_size}: row_major {res['median_ms']['row_major']:.3f} ms; "
                  f"ratio to row-major: {ratios}", file=sys.stderr)
    write_json(doc, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
