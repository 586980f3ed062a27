"""Shared pieces of the benchmark scripts: workloads, timing, FLOP counts, checks, environment.

Pipeline position: outside the pipeline. ``benchmarks/bench_treelstm.py`` (and its peers in
``benchmarks/peers/``) use this module to build the same inputs for every contender, time them
the same way and describe the machine in the JSON they write. Nothing here imports a backend.

FLOP model (``flops_per_batch``): a GEMV of a ``[rows, cols]`` matrix is ``2 * rows * cols``
FLOPs; every elementwise op (add, mul, bias add, sigmoid, tanh, relu, ``1 - z``) is 1 FLOP per
element, a transcendental included; embedding lookups, gathers, concatenations and copies are
0. With ``H`` hidden, ``D`` the per-node input width, binary trees (arity 2):

* TreeLSTM  leaf ``6HD + 9H``; internal ``20H^2 + 17H`` (the stacked ``[5H, 2H]`` gate GEMV).
* TreeGRU   leaf ``2HD + 2H``; internal ``12H^2 + 17H``.
* TreeFC    leaf ``2HD + 2H``; internal ``4H^2 + 3H``.
* MV-RNN    leaf ``0``; internal ``4H^3 + 8H^2 + 2H`` (``W_M [H, 2H] @ [2H, H]`` dominates).
* DAG-RNN   every cell ``2HD + 2H``, plus ``2H^2 + H`` per predecessor edge.
* SeqLSTM   first element ``8HD + 13H``; every other ``8HD + 8H^2 + 17H``.

The formulas count the model's equations (``cortex/models``), not what an implementation
happens to execute, so GFLOP/s is comparable across contenders.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cortex.core.structure import LinearizedBatch

# ------------------------------------------------------------------ workloads


def parse_like_tree(rng: random.Random, leaves: int, vocab: int) -> Any:
    """A random binary bracketing of ``leaves`` random word ids in ``[0, vocab)``, as nested
    2-tuples with int leaves (the shape of a binarized constituency parse)."""
    if leaves < 1:
        raise ValueError(f"a tree needs at least one leaf, got leaves={leaves}")
    nodes: list[Any] = [rng.randrange(vocab) for _ in range(leaves)]
    while len(nodes) > 1:
        i = rng.randrange(len(nodes) - 1)
        nodes[i : i + 2] = [(nodes[i], nodes[i + 1])]
    return nodes[0]


def make_trees(seed: int, count: int, min_leaves: int, max_leaves: int, vocab: int) -> list[Any]:
    """``count`` parse-like trees with a leaf count drawn uniformly from ``[min, max]``."""
    if not 1 <= min_leaves <= max_leaves:
        raise ValueError(f"need 1 <= min_leaves <= max_leaves, got {min_leaves}..{max_leaves}")
    rng = random.Random(seed)
    return [parse_like_tree(rng, rng.randint(min_leaves, max_leaves), vocab) for _ in range(count)]


def tree_height(tree: Any) -> int:
    """Height of a nested-tuple tree (a leaf has height 0), iteratively."""
    best, stack = 0, [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, tuple):
            stack.extend((c, depth + 1) for c in node)
        else:
            best = max(best, depth)
    return best


def batch_shape(batch: LinearizedBatch) -> dict[str, int]:
    """Sizes of a linearized batch, for the JSON."""
    return {
        "inputs": batch.batch_size,
        "nodes": batch.num_nodes,
        "leaves": batch.num_leaves,
        "internal": batch.num_nodes - batch.num_leaves,
        "edges": int(len(batch.child_ids)),
        "levels": batch.num_levels,
    }


# ------------------------------------------------------------------ FLOP counts

FLOP_FORMULAS: dict[str, tuple[str, str]] = {
    # model: (leaf / first element / per cell, internal / per edge)
    "TreeLSTM": ("6HD + 9H", "20H^2 + 17H"),
    "TreeGRU": ("2HD + 2H", "12H^2 + 17H"),
    "TreeFC": ("2HD + 2H", "4H^2 + 3H"),
    "MVRNN": ("0", "4H^3 + 8H^2 + 2H"),
    "DAGRNN": ("2HD + 2H per cell", "2H^2 + H per predecessor edge"),
    "SeqLSTM": ("8HD + 13H", "8HD + 8H^2 + 17H"),
}


def flops_per_batch(model_name: str, batch: LinearizedBatch, hidden: int, width: int) -> int:
    """FLOPs of one forward pass over ``batch`` (module docstring: the model and formulas)."""
    h, d = hidden, width
    leaves = batch.num_leaves
    internal = batch.num_nodes - leaves
    edges = int(len(batch.child_ids))
    if model_name == "TreeLSTM":
        return leaves * (6 * h * d + 9 * h) + internal * (20 * h * h + 17 * h)
    if model_name == "TreeGRU":
        return leaves * (2 * h * d + 2 * h) + internal * (12 * h * h + 17 * h)
    if model_name == "TreeFC":
        return leaves * (2 * h * d + 2 * h) + internal * (4 * h * h + 3 * h)
    if model_name == "MVRNN":
        return internal * (4 * h**3 + 8 * h * h + 2 * h)
    if model_name == "DAGRNN":
        return batch.num_nodes * (2 * h * d + 2 * h) + edges * (2 * h * h + h)
    if model_name == "SeqLSTM":
        return leaves * (8 * h * d + 13 * h) + internal * (8 * h * d + 8 * h * h + 17 * h)
    raise ValueError(f"no FLOP formula for model {model_name!r}; known: {sorted(FLOP_FORMULAS)}")


# ------------------------------------------------------------------ timing


@dataclass
class Samples:
    """Wall times of repeated calls of one case, in nanoseconds (several rounds pooled)."""

    ns: list[int]

    def summary(self) -> dict[str, float]:
        ms = np.asarray(self.ns, dtype=np.float64) / 1e6
        return {
            "median_ms": float(statistics.median(ms)),
            "p10_ms": float(np.percentile(ms, 10)),
            "p90_ms": float(np.percentile(ms, 90)),
            "min_ms": float(ms.min()),
            "reps": int(len(ms)),
        }


def measure(fn: Callable[[], Any], *, min_reps: int, min_time_s: float, max_time_s: float,
            warmup: int = 3) -> list[int]:
    """Call ``fn`` ``warmup`` times, then time calls with ``time.perf_counter_ns`` until both
    ``min_reps`` calls and ``min_time_s`` seconds are done, or ``max_time_s`` passed (at least
    ``min(3, min_reps)`` timed calls even for a very slow case). Returns the times in ns."""
    floor = max(1, min(3, min_reps))
    for _ in range(warmup):
        fn()
    out: list[int] = []
    start = time.perf_counter_ns()
    while True:
        t0 = time.perf_counter_ns()
        fn()
        t1 = time.perf_counter_ns()
        out.append(t1 - t0)
        spent = (t1 - start) / 1e9
        if len(out) >= floor and spent >= max_time_s:
            break
        if len(out) >= min_reps and spent >= min_time_s:
            break
    return out


# ------------------------------------------------------------------ checks


def max_error(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute difference, scaled by ``max(1, max |ref|)`` (the states are O(1))."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"result shape {got.shape} differs from the reference's {ref.shape}")
    if not np.all(np.isfinite(got)):
        return float("inf")
    scale = max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    return float(np.abs(got - ref).max() / scale) if ref.size else 0.0


# ------------------------------------------------------------------ environment


def _blas_info() -> Any:
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-not-found]

        return [{k: d.get(k) for k in ("user_api", "internal_api", "version", "num_threads",
                                        "threading_layer", "architecture")}
                for d in threadpool_info()]
    except ImportError:
        pass
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.25
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        return {"source": "numpy.show_config (threadpoolctl not installed)",
                "name": blas.get("name"), "version": blas.get("version"),
                "openblas_configuration": blas.get("openblas configuration")}
    except Exception as exc:  # noqa: BLE001 - environment probing must never fail the run
        return {"error": f"{type(exc).__name__}: {exc}"}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(torch_mod: Any = None) -> dict[str, Any]:
    """The machine and library versions, for the JSON's ``environment``."""
    env: dict[str, Any] = {
        "cpu": cpu_name(),
        "logical_cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
        "numpy_blas": _blas_info(),
        "git_commit": git_commit(),
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "thread_env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                      "MKL_NUM_THREADS")},
    }
    if torch_mod is not None:
        env["torch"] = torch_mod.__version__
        env["torch_num_threads"] = torch_mod.get_num_threads()
        env["torch_num_interop_threads"] = torch_mod.get_num_interop_threads()
        env["torch_cuda_available"] = bool(torch_mod.cuda.is_available())
        if torch_mod.cuda.is_available():
            env["torch_cuda_device"] = torch_mod.cuda.get_device_name(0)
    return env


def write_json(doc: Any, out: str) -> None:
    """``doc`` as indented JSON to the file ``out``, or to stdout when ``out`` is empty."""
    text = json.dumps(doc, indent=2)
    if out:
        Path(out).write_text(text + "\n")
    else:
        print(text)
