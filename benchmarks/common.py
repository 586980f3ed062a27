"""Inputs, FLOP counts, checks and the JSON writer of the benchmark scripts and tools that import
them from here: they live in :mod:`cortex.bench` (what ``cortex bench`` runs)."""

from cortex.bench.workloads import (batch_shape, flops, make_trees, max_error,  # noqa: F401
                                    parse_like_tree, tree_height)


def environment() -> dict:
    """The machine and versions a run was measured on (as ``cortex bench`` records them)."""
    from cortex.bench.environment import host, versions

    return {**host(), "versions": versions()}


def add_ab_arguments(p, rounds: int = 15) -> None:
    """The flags of an interleaved A/B script: rounds, seconds per variant and round, threads,
    the smoke-test switch and the JSON file."""
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--min-time", type=float, default=0.1, help="seconds per variant per round")
    p.add_argument("--threads", type=int, default=0, help="worker threads (0: the target's default)")
    p.add_argument("--quick", action="store_true", help="hidden 32, 3 rounds (smoke test)")
    p.add_argument("--out", default="", help="JSON file (default: stdout)")


def time_calls(call, min_time: float) -> float:
    """Milliseconds per ``call()``, averaged over as many calls as fill ``min_time`` seconds."""
    import time

    reps, t0 = 0, time.perf_counter()
    while True:
        call()
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return 1e3 * dt / reps


def write_json(doc: dict, out: str) -> None:
    """``doc`` as JSON to the file ``out``, or to stdout when ``out`` is empty."""
    import json
    from pathlib import Path

    from cortex.bench.run import write_json as write_file

    if out:
        write_file(doc, Path(out))
    else:
        print(json.dumps(doc, indent=1))


def pyplot():
    """``matplotlib.pyplot`` drawing to files (the Agg backend), or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig, path: str) -> str:
    """``fig`` laid out and written to ``path`` (PNG at 120 dpi); returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
