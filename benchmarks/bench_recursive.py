"""Recursive refactoring and unrolling: steps (barriers) and time per call, as JSON.

Pipeline position: outside the pipeline; it compiles each model five times on each target — the
default schedule, ``refactor=True``, ``recursive_unroll=2``, both, and ``levelwise`` (the default
without the level interchange, node jam and node chunks, which unrolled phases do not take) —
and runs them on the same
inputs, interleaved (one round runs every variant once, in an order rotated every round, with
``--settle`` seconds before each call so no other executable's threads are still spinning; the
median over ``--repeats`` rounds is reported, with each variant's ratio to the default).

Workloads: ``TreeLSTM`` and ``TreeGRU`` on binary trees, ``ChildSumTreeLSTM`` on dependency-like
trees (``ParentArray``), each on two shapes: ``parse`` (random binary bracketings of 20-40 words;
random recursive dependency trees of 20-40 words) and ``deep`` (height 20-40: a spine whose
nodes each take a leaf or a small subtree beside it; for dependency trees, every word attaching
to one of the two words before it), at batch 1 and 10.

``steps`` is the number of parallel node loops a call runs, each followed by a barrier (the
leaf loop, the level-1 loop of a model with a preterminal case, then one per level, or one per
phase of two levels when unrolled): it is read from the program and the bound batch. Every
variant's states are checked against the default's. Calls run on one linearized batch, so the
unrolled variants build their work units once (a sealed batch keeps them); ``units_build_s``
is what building them costs, the price of a call on a batch linearized for it alone.

Usage::

    python benchmarks/bench_recursive.py --hidden 64 --repeats 30 --out recursive.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cortex  # noqa: E402
from benchmarks.common import environment, parse_like_tree, write_json  # noqa: E402
from cortex.bench.workloads import dependency_tree  # noqa: E402
from cortex.core.linearize import ParentArray  # noqa: E402
from cortex.core.linearize.units import unroll_units  # noqa: E402
from cortex.models import ChildSumTreeLSTM, TreeGRU, TreeLSTM  # noqa: E402

SCHEMA = "cortex-bench-recursive/1"
VARIANTS = {"default": {}, "refactor": {"refactor": True}, "unroll2": {"recursive_unroll": 2},
            "refactor+unroll2": {"refactor": True, "recursive_unroll": 2},
            # the default without the level-loop transforms unrolled phases do not take: what
            # unrolling changes besides them (the barriers, the states kept in cache)
            "levelwise": {"interchange": False, "node_jam": 1, "node_chunk": 1}}
MODELS = {"TreeLSTM": TreeLSTM, "TreeGRU": TreeGRU, "ChildSumTreeLSTM": ChildSumTreeLSTM}


def deep_binary(rng: random.Random, vocab: int) -> Any:
    """A binary tree of height 20-40: a spine, each node with a leaf or a pair of leaves beside it."""
    tree: Any = rng.randrange(vocab)
    for _ in range(rng.randint(20, 40)):
        side: Any = rng.randrange(vocab) if rng.random() < 0.7 else (rng.randrange(vocab), rng.randrange(vocab))
        tree = (tree, side) if rng.random() < 0.5 else (side, tree)
    return tree


def deep_dependency(rng: np.random.Generator, vocab: int) -> ParentArray:
    """A dependency-like tree of height about 20-40: word ``i`` attaches to word ``i-1`` or ``i-2``."""
    n = int(rng.integers(28, 56))
    parents = [-1] + [max(0, i - int(rng.integers(1, 3))) for i in range(1, n)]
    return ParentArray(parents, words=rng.integers(0, vocab, n).tolist())


def inputs(model: str, shape: str, batch: int, vocab: int, seed: int) -> list[Any]:
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    if model == "ChildSumTreeLSTM":
        if shape == "deep":
            return [deep_dependency(nrng, vocab) for _ in range(batch)]
        return [dependency_tree(nrng, int(nrng.integers(20, 41)), vocab) for _ in range(batch)]
    if shape == "deep":
        return [deep_binary(rng, vocab) for _ in range(batch)]
    return [parse_like_tree(rng, rng.randint(20, 40), vocab) for _ in range(batch)]


def steps_per_call(exe: Any, batch: Any) -> int:
    """Parallel node loops (each ended by a barrier) one call runs on ``batch``."""
    low = exe.lowered
    _, sizes = low.bind_batch(batch)
    spec = low.schedule.leaf_specialization
    pre = spec and any(c.name == "preterminal" for c in low.graph.cases)
    first = 2 if pre else (1 if spec else 0)
    before = first  # the leaf loop, and the level-1 loop of a preterminal case
    loops = sizes["P"] if low.unit_levels else sizes["L"] - first
    return before + max(0, loops)


def time_round(exes: dict[str, Any], batch: Any, turn: int, settle: float) -> dict[str, float]:
    """One call of every executable, in an order rotated by ``turn``, ``settle`` seconds apart:
    an llvm team spins about a millisecond after its call before it sleeps, which would slow
    whichever executable runs next on a machine with few cores."""
    names = list(exes)
    names = names[turn % len(names):] + names[:turn % len(names)]
    out = {}
    for name in names:
        time.sleep(settle)
        t = time.perf_counter()
        exes[name].run(batch)
        out[name] = time.perf_counter() - t
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default="llvm,opencl")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--shapes", default="parse,deep")
    ap.add_argument("--batches", default="1,10")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settle", type=float, default=0.005, help="seconds between two timed calls")
    ap.add_argument("--threads", type=int, default=0, help="worker threads of every variant (0: the target's default)")
    ap.add_argument("--out", default="", help="JSON file (default: stdout)")
    args = ap.parse_args(argv)
    records = []
    for target in args.targets.split(","):
        for model_name in args.models.split(","):
            model = MODELS[model_name](hidden=args.hidden, embed=args.hidden, vocab=args.vocab, seed=args.seed)
            extra = {"threads": args.threads} if args.threads else {}
            exes = {v: cortex.compile(model, target=target, schedule={**knobs, **extra})
                    for v, knobs in VARIANTS.items()}
            notes = {v: [n for n in e.notes if n.startswith(("refactor:", "recursive_unroll="))]
                     for v, e in exes.items()}
            for shape in args.shapes.split(","):
                for b in map(int, args.batches.split(",")):
                    structs = inputs(model_name, shape, b, args.vocab, args.seed + b)
                    batch = exes["default"].linearize(structs)
                    want = exes["default"].run(batch)
                    errors = {}
                    for v, e in exes.items():
                        got = e.run(batch)
                        errors[v] = max(float(np.max(np.abs(got.nodes(s) - want.nodes(s)))) for s in ("h",))
                    lo, first = batch.level_offsets, exes["unroll2"].lowered.unit_levels[1]
                    build = min(timeit.repeat(lambda: unroll_units(lo, batch.child_offsets, batch.child_ids, first),
                                              number=20, repeat=5)) / 20
                    rounds = [time_round(exes, batch, i, args.settle) for i in range(args.repeats)]
                    med = {v: statistics.median(r[v] for r in rounds) for v in exes}
                    best = {v: min(r[v] for r in rounds) for v in exes}
                    rec = {
                        "target": target, "model": model_name, "shape": shape, "batch": b,
                        "nodes": int(batch.num_nodes), "levels": int(len(batch.level_offsets) - 1),
                        "steps": {v: steps_per_call(e, batch) for v, e in exes.items()},
                        "median_s": med,
                        "min_s": best,
                        # the units' construction, once per batch (kept with a sealed batch)
                        "units_build_s": build,
                        "speedup_vs_default": {v: med["default"] / med[v] for v in exes},
                        "max_abs_diff_vs_default": errors,
                    }
                    records.append(rec)
                    print(f"{target:7s} {model_name:17s} {shape:6s} b{b:<3d} levels {rec['levels']:3d} "
                          + "  ".join(f"{v} {rec['steps'][v]:3d} steps {med[v] * 1e6:8.1f}us"
                                      for v in exes), file=sys.stderr, flush=True)
            for rec in records:
                if rec["target"] == target and rec["model"] == model_name:
                    rec["notes"] = notes
    doc = {"schema": SCHEMA, "args": vars(args), "environment": environment(), "records": records}
    write_json(doc, args.out)
    return doc


if __name__ == "__main__":
    main()
