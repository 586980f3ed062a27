"""The numpy target (the LoopProgram interpreter) on wide trees, next to llvm, as JSON.

Pipeline position: outside the pipeline; it measures ``cortex.compile(model, "numpy")`` on a
child-sum batch whose nodes have many children (Python ASTs: a module body is one node with a
child per statement), where a per-level padding of the child reduction to the level's widest
node would make the cost per node grow with the batch's widest node.

Workload: ``ChildSumTreeLSTM`` (hidden 32, embed 16, vocab = AST node types) on the ASTs
(``cortex.data.ast_tree``) of the Python standard library's own modules: the first ``--trees``
modules, by name, of 600-3000 AST nodes each. Every batch size of ``--sizes`` is a prefix of
that list; each is timed ``--repeats`` times (median, seconds) on each target, the targets
interleaved, and the numpy result is checked against llvm's.

Usage::

    python benchmarks/bench_interpret_wide.py --sizes 3,12,23 --out wide.json
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cortex  # noqa: E402
from cortex.data import AST_VOCAB_SIZE, ast_tree  # noqa: E402
from cortex.models import ChildSumTreeLSTM  # noqa: E402

SCHEMA = "cortex-bench-interpret-wide/1"


def stdlib_trees(count: int, lo: int = 600, hi: int = 3000) -> list[tuple[str, object, int]]:
    """(module file, tree, node count) of the first ``count`` stdlib modules, sorted by file
    name, whose AST has ``lo``..``hi`` nodes."""
    out = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            parsed = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        n = sum(1 for _ in ast.walk(parsed))
        if lo <= n <= hi:
            out.append((path.name, ast_tree(parsed), n))
            if len(out) == count:
                break
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="3,12,23", help="batch sizes (prefixes of the module list)")
    ap.add_argument("--targets", default="numpy,llvm")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--embed", type=int, default=16)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    trees = stdlib_trees(max(sizes))
    model = ChildSumTreeLSTM(hidden=args.hidden, embed=args.embed, vocab=AST_VOCAB_SIZE)
    exes = {t: cortex.compile(model, target=t) for t in args.targets.split(",")}
    results = []
    for b in sizes:
        batch = next(iter(exes.values())).linearize([t for _, t, _ in trees[:b]])
        arity = np.diff(batch.child_offsets)
        row = {"trees": b, "nodes": batch.num_nodes, "max_children": int(arity.max()),
               "levels": batch.num_levels, "modules": [m for m, _, _ in trees[:b]], "targets": {}}
        times: dict[str, list[float]] = {t: [] for t in exes}
        outs = {}
        for _ in range(args.repeats):
            for t, exe in exes.items():  # interleaved: load bursts hit every target alike
                t0 = time.perf_counter()
                outs[t] = exe.run(batch).root("h")
                times[t].append(time.perf_counter() - t0)
        ref = outs.get("llvm")
        for t, ts in times.items():
            med = statistics.median(ts)
            entry = {"median_s": med, "min_s": min(ts), "us_per_node": 1e6 * med / batch.num_nodes}
            if ref is not None and t != "llvm":
                entry["max_abs_diff_vs_llvm"] = float(np.abs(outs[t] - ref).max())
            row["targets"][t] = entry
        results.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "modules"}), file=sys.stderr)
    report = {"schema": SCHEMA, "hidden": args.hidden, "embed": args.embed,
              "repeats": args.repeats, "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
