"""Benchmark of the linearizer: microseconds per tree and per node for each input form.

Pipeline position: measures ``cortex.core.linearize.linearize``, which runs on the host on every
call of a compiled model. Prints one JSON object. The workload is the issue's: a batch of 10
parse-like binary trees of ~30 leaves (random bracketings, heights ~9-14), in every input form,
cache off and on; each timing is the median (and min) of many repeats. The peer, measured in
the same run, is the obvious per-node Python level-batching schedule (recursive heights, a dict
of levels, per-level NumPy index arrays), so the ratios survive a noisy machine.

A second section, ``treelstm_nested``, times the call-path case of the TreeLSTM benchmark
(``bench_treelstm.py``): nested int tuples of 20-40 leaves (the shapes of
``benchmarks.common.make_trees(0, b, 20, 40, 20000)``), batch 1 and batch 10, linearized the way
``exe(trees)`` does (``arity=2, vocab_size=20000``), cache off; its bars are b1 <= 50 us and
b10 <= 250 us.

A third section, ``dagrnn_grids``, times the DAG-RNN call path of ``cortex bench``: batches of
1, 10 and 100 grids of 5 x 5 cells with 256 float64 features each
(``cortex.bench.workloads.make_inputs("DAGRNN", 30, b, ...)``), linearized the way a float32
executable does (``feature_dim=256, feature_dtype=float32``: the fused grid path), next to its
peer in the same run: the general path (every grid read into a part, then ``assemble``) with
float64 features converted to float32 afterwards, which is what a call did before the grid path.

Usage: ``python benchmarks/bench_linearize.py [--repeats 300] [--quick]``
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import random
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

from cortex.core.linearize import (ChildTable, EdgeList, Node, ParentArray, Sequence, clear_cache,
                                   linearize, set_cache)
from cortex.data import Vocabulary, example_snippets


# ------------------------------------------------------------------ workload
def parse_like_tree(rng: random.Random, leaves: int, vocab: int | None = None) -> Any:
    """A random binary bracketing of ``leaves`` word ids (nested tuples, int leaves): ids in
    ``[1, 1000)``, or in ``[0, vocab)`` as ``benchmarks.common.parse_like_tree`` draws them."""
    nodes: list[Any] = [rng.randrange(1, 1000) if vocab is None else rng.randrange(vocab)
                        for _ in range(leaves)]
    while len(nodes) > 1:
        i = rng.randrange(len(nodes) - 1)
        nodes[i : i + 2] = [(nodes[i], nodes[i + 1])]
    return nodes[0]


def preorder(tree: Any) -> tuple[list[int], list[int]]:
    """(parents, words) of a nested tree in pre-order (words -1 on internal nodes)."""
    parents, words, stack = [], [], [(tree, -1)]
    while stack:
        node, p = stack.pop()
        v = len(parents)
        parents.append(p)
        if isinstance(node, tuple):
            words.append(-1)
            stack.extend((c, v) for c in reversed(node))
        else:
            words.append(node)
    return parents, words


def to_sexpr(tree: Any) -> str:
    out: list[str] = []
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, tuple):
            out.append("(2 ")
            stack.append(")")
            for c in reversed(node):
                stack.append(" ")
                stack.append(c)
        else:
            out.append(f"(2 w{node})")
    return "".join(out)


def to_nodes(tree: Any) -> Node:
    parents, words = preorder(tree)
    kids: list[list[Node]] = [[] for _ in parents]
    built: list[Any] = [None] * len(parents)
    for v in range(len(parents) - 1, -1, -1):
        built[v] = Node(tuple(reversed(kids[v])), word=None if words[v] < 0 else words[v])
        if parents[v] >= 0:
            kids[parents[v]].append(built[v])
    return built[0]


def forms(trees: list[Any]) -> tuple[dict[str, list[Any]], Vocabulary]:
    vocab = Vocabulary([f"w{i}" for i in range(1000)])
    pas, tables, edges = [], [], []
    for t in trees:
        parents, words = preorder(t)
        par = np.array(parents, dtype=np.int64)
        pas.append(ParentArray(par))
        n = len(parents)
        table = np.full((n, 2), -1, dtype=np.int64)
        fill = np.zeros(n, dtype=np.int64)
        for c, p in enumerate(parents):
            if p >= 0:
                table[p, fill[p]] = c
                fill[p] += 1
        tables.append(ChildTable(table))
        child = np.flatnonzero(par >= 0)
        edges.append(EdgeList(n, np.stack([par[child], child], axis=1)))
    snippets = list(example_snippets().values())
    asts = [ast.parse(snippets[i % len(snippets)]) for i in range(len(trees))]
    seqs = [Sequence(np.array([w for w in preorder(t)[1] if w >= 0])) for t in trees]
    return {
        "parent_arrays": pas,
        "child_tables": tables,
        "edge_lists": edges,
        "nested_tuples": list(trees),
        "node_objects": [to_nodes(t) for t in trees],
        "sexpr_strings": [to_sexpr(t) for t in trees],
        "python_ast": asts,
        "sequences": seqs,
    }, vocab


# ------------------------------------------------------------------ the peer
def peer_level_batching(trees: list[Any]) -> dict[str, Any]:
    """The obvious schedule: recursive heights, nodes bucketed per level in a dict, then
    per-level NumPy arrays of node ids, child ids and word ids (what a hand-written
    level-batched TreeLSTM does before its loop)."""
    nodes: list[Any] = []
    children: list[list[int]] = []
    height: list[int] = []

    def visit(node: Any) -> int:
        v = len(nodes)
        nodes.append(node)
        children.append([])
        height.append(0)
        if isinstance(node, tuple):
            kids = [visit(c) for c in node]
            children[v] = kids
            height[v] = 1 + max(height[k] for k in kids)
        return v

    roots = [visit(t) for t in trees]
    levels: dict[int, list[int]] = {}
    for v, h in enumerate(height):
        levels.setdefault(h, []).append(v)
    schedule = []
    for h in sorted(levels):
        ids = np.array(levels[h], dtype=np.int32)
        kids = np.array([children[v] or [-1, -1] for v in levels[h]], dtype=np.int32)
        words = np.array([nodes[v] if h == 0 else -1 for v in levels[h]], dtype=np.int32)
        schedule.append((ids, kids, words))
    return {"schedule": schedule, "roots": np.array(roots, dtype=np.int32)}


# ------------------------------------------------------------------ timing
def measure(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    for _ in range(max(3, repeats // 20)):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_us": statistics.median(times) * 1e6, "min_us": min(times) * 1e6}


def dagrnn_grids(repeats: int) -> dict[str, Any]:
    """The DAG-RNN call path (module docstring): the grid path and the general path, per batch."""
    from cortex.bench.workloads import make_inputs
    from cortex.core.linearize import read_part
    from cortex.core.linearize.assemble import assemble

    out: dict[str, Any] = {}
    for b in (1, 10, 100):
        grids = make_inputs("DAGRNN", 30, b, vocab=1, width=256, seed=0).structures

        def general() -> Any:
            parts = [read_part(g, None, i) for i, g in enumerate(grids)]
            batch = assemble(parts, arity=None, vocab_size=None, feature_dim=256)
            return batch.features.astype(np.float32)

        reps = max(5, repeats // b)
        fused = measure(lambda: linearize(grids, feature_dim=256, feature_dtype=np.float32), reps)
        peer = measure(general, reps)
        out[f"b{b}"] = {"nodes": 25 * b, "us_per_batch": round(fused["median_us"], 1),
                        "us_per_batch_min": round(fused["min_us"], 1),
                        "general_path_us_per_batch": round(peer["median_us"], 1),
                        "ratio_to_general_path": round(fused["median_us"] / peer["median_us"], 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--trees", type=int, default=10)
    ap.add_argument("--leaves", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="few repeats, no big cases (CI smoke)")
    args = ap.parse_args()
    repeats = 20 if args.quick else args.repeats
    rng = random.Random(1234)
    trees = [parse_like_tree(rng, args.leaves) for _ in range(args.trees)]
    inputs, vocab = forms(trees)
    nodes_per_form = {name: linearize(items, vocab=vocab, cache=False).num_nodes
                      for name, items in inputs.items()}
    heights = [linearize(t, cache=False).num_levels - 1 for t in trees]

    results: dict[str, Any] = {}
    peer = measure(lambda: peer_level_batching(trees), repeats)
    for name, items in inputs.items():
        n = nodes_per_form[name]
        row: dict[str, Any] = {"nodes": n}
        for cache in ("off", "on"):
            clear_cache()
            set_cache(cache == "on")
            t = measure(lambda: linearize(items, vocab=vocab), repeats)
            row[f"cache_{cache}"] = {
                "us_per_batch": round(t["median_us"], 1),
                "us_per_batch_min": round(t["min_us"], 1),
                "us_per_tree": round(t["median_us"] / len(items), 2),
                "us_per_node": round(t["median_us"] / n, 3),
                "ratio_to_peer": round(t["median_us"] / peer["median_us"], 3),
            }
        results[name] = row
    set_cache(True)

    big: dict[str, Any] = {}
    if not args.quick:
        n = 100_000
        par = np.arange(1, n + 1)
        par[-1] = -1
        t0 = time.perf_counter()
        linearize(ParentArray(par), cache=False)
        big["chain_100k_parent_array_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
        chain: Any = 1
        for _ in range(n - 1):
            chain = (chain,)
        t0 = time.perf_counter()
        linearize(chain, cache=False)
        big["chain_100k_nested_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
        many = [ParentArray(np.array(preorder(parse_like_tree(rng, args.leaves))[0]))
                for _ in range(1000)]
        t0 = time.perf_counter()
        linearize(many, cache=False)
        big["batch_1000_parent_arrays_ms"] = round((time.perf_counter() - t0) * 1e3, 1)

    # the TreeLSTM call path: nested int tuples, batch 1 and 10, checked against the model
    treelstm: dict[str, Any] = {}
    set_cache(False)
    for b in (1, 10):
        trng = random.Random(0)
        batch = [parse_like_tree(trng, trng.randint(20, 40), 20000) for _ in range(b)]  # make_trees
        lin = linearize(batch, arity=2, vocab_size=20000, cache=False)
        t = measure(lambda: linearize(batch, arity=2, vocab_size=20000), repeats)
        treelstm[f"b{b}"] = {"nodes": lin.num_nodes, "levels": lin.num_levels,
                             "us_per_batch": round(t["median_us"], 1),
                             "us_per_batch_min": round(t["min_us"], 1)}
    set_cache(True)
    grids = dagrnn_grids(repeats)

    array_forms = ("parent_arrays", "child_tables")
    python_forms = ("nested_tuples", "sexpr_strings")
    report = {
        "benchmark": "linearize",
        "machine": {"python": platform.python_version(), "numpy": np.__version__,
                    "cpus": os.cpu_count(), "platform": platform.platform()},
        "workload": {"trees": args.trees, "leaves_per_tree": args.leaves,
                     "nodes": nodes_per_form["nested_tuples"],
                     "heights": [min(heights), max(heights)], "repeats": repeats},
        "peer_python_level_batching": {
            "us_per_batch": round(peer["median_us"], 1),
            "us_per_node": round(peer["median_us"] / nodes_per_form["nested_tuples"], 3)},
        "forms": results,
        "treelstm_nested": treelstm,
        "dagrnn_grids": grids,
        "big": big,
        "bars": {
            "array_forms_batch_us_le_100": {
                f: results[f]["cache_off"]["us_per_batch"] <= 100 for f in array_forms},
            "python_forms_us_per_node_le_2": {
                f: results[f]["cache_off"]["us_per_node"] <= 2 for f in python_forms},
            "treelstm_nested_b1_us_le_50_b10_us_le_250": {
                "b1": treelstm["b1"]["us_per_batch"] <= 50,
                "b10": treelstm["b10"]["us_per_batch"] <= 250},
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
