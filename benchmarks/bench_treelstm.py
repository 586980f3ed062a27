"""The benchmark of the project's performance targets: every zoo model at hidden 256, batch 1
and 10, on Cortex targets next to the peers, as one JSON document (``cortex bench``'s runner).

Pipeline position: outside the pipeline; a thin front end of :mod:`cortex.bench` (which
builds the inputs, runs every contender in its own process with the others stopped while it
is timed, checks each against the float64 reference and writes the JSON described in
``docs/bench.md``). What it sets differently from ``cortex bench``: all six models of the
paper's set (TreeLSTM, TreeGRU, TreeFC, MV-RNN, DAG-RNN, SeqLSTM), hidden 256, trees of 20-40
leaves (``--tokens 30``), batches 1 and 10, every target (a target that cannot run here is
recorded with the reason), the Cortex variants (``call_uncached``, ``run_prelinearized``) for
the like-for-like ratio, and many short interleaved rounds (8 rounds of >= 0.25 s per case).
``--out FILE`` writes only the JSON (default: stdout), no report.

Usage::

    python benchmarks/bench_treelstm.py --targets numpy,llvm,opencl,cuda --out bench.json
    python benchmarks/bench_treelstm.py --quick --targets numpy        # smoke test, seconds
    python benchmarks/bench_treelstm.py --models TreeLSTM --torch-compile --rounds 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make `cortex` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cortex.bench.options import add_arguments, from_args  # noqa: E402
from cortex.bench.workloads import MODELS  # noqa: E402

TARGETS = ("numpy", "llvm", "opencl", "cuda")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(models=tuple(m for m in MODELS if m != "ChildSumTreeLSTM"), targets=TARGETS,
                   batches=(1, 10), hiddens=(256,), tokens=(30,), variants=True, rounds=8,
                   min_reps=10, min_time=0.25, max_time=1.25, out=None)
    p.add_argument("--no-peers", action="store_true", help="measure only the Cortex targets")
    p.add_argument("--torch-compile", action="store_true",
                   help="add the torch.compile peer (TreeLSTM; compiling takes 10-25 s)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from cortex.bench.run import run, write_json

    args = parse_args(argv)
    json_path = args.out
    args.out = Path(json_path).parent if json_path else Path(tempfile.mkdtemp(prefix="bench-treelstm-"))
    opts = from_args(args)
    if args.no_peers:
        opts = replace(opts, peers=())
    elif args.torch_compile:
        from cortex.bench.peers import FAMILIES

        opts = replace(opts, peers=(*(opts.peers or FAMILIES), "torch_compile_levels"))
    doc = run(opts)
    if json_path:
        write_json(doc, Path(json_path))
        print(f"wrote {json_path}", file=sys.stderr)
    else:
        print(json.dumps(doc, indent=1, default=str))
    bad = [r for r in doc["results"] if r["status"] in ("wrong", "error")]
    for r in bad:
        print(f"{r['status'].upper()}: {r['model']} b{r['batch']} {r['kind']} {r['name']}: "
              f"{r['reason']}", file=sys.stderr)
    return 1 if any(r["status"] == "wrong" for r in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
