"""A/B of the level-1 tables (``cortex.core.passes.preterminal``): one model compiled with and
without the level-1 case, timed in one process on the same prelinearized batch, alternating.

Pipeline position: outside the pipeline, a measurement tool (like ``tools/llvm_profile.py``).
Interleaving the two executables in one process is what makes the ratio trustworthy on a VM
whose speed drifts by up to 2x within minutes; ``benchmarks/bench_treelstm.py`` is the place
for the comparison with peers.

Usage::

    python tools/ab_level1_tables.py --model TreeLSTM --out ab.json   # fits the CPU default
    python tools/ab_level1_tables.py --model TreeFC
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
from benchmarks.common import make_trees  # noqa: E402
from cortex.core.passes.pipeline import DEFAULT_PASSES  # noqa: E402
from cortex.core.passes.preterminal import preterminal  # noqa: E402
from cortex.models import TreeFC, TreeLSTM  # noqa: E402

MODELS = {"TreeLSTM": TreeLSTM, "TreeFC": TreeFC}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="TreeLSTM")
    p.add_argument("--target", default="llvm")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--max-table-mib", type=float, default=None)
    p.add_argument("--batches", default="1,10")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)

    model = MODELS[args.model](hidden=args.hidden, embed=args.hidden, vocab=args.vocab, seed=0)
    opts = {} if args.max_table_mib is None else {"max_table_mib": args.max_table_mib}
    with_case = cortex.compile(model, target=args.target, **opts)
    if not any(c.name == "preterminal" for c in with_case.graph.cases):
        p.error("the model gets no level-1 case with these options (raise --max-table-mib)")
    without = cortex.compile(model, target=args.target,
                             passes=[q for q in DEFAULT_PASSES if q is not preterminal])
    results = []
    for b in (int(x) for x in args.batches.split(",")):
        batch = without.linearize(make_trees(0, b, 20, 40, args.vocab))
        got, want = with_case.run(batch), without.run(batch)
        diff = max(float(np.abs(got.root(s) - want.root(s)).max()) for s in want.states)
        times: dict[str, list[float]] = {"with": [], "without": []}
        reps = max(1, int(40 / b))
        for _ in range(args.rounds):
            for name, exe in (("with", with_case), ("without", without)):
                for _ in range(3):
                    exe.run(batch)
                t0 = time.perf_counter()
                for _ in range(reps):
                    exe.run(batch)
                times[name].append((time.perf_counter() - t0) / reps * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        results.append({"batch": b, "with_ms": med["with"], "without_ms": med["without"],
                        "ratio": med["with"] / med["without"], "max_abs_diff": diff})
        print(f"{args.model} b{b}: with {med['with']:.3f} ms, without {med['without']:.3f} ms, "
              f"ratio {med['with'] / med['without']:.3f}, max |diff| {diff:.1e}", file=sys.stderr)
    doc = {"model": args.model, "target": args.target, "hidden": args.hidden, "vocab": args.vocab,
           "compile_options": opts, "rounds": args.rounds, "results": results}
    text = json.dumps(doc, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
