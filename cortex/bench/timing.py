"""Timing of one contender's calls: repeated calls per round, statistics over pooled rounds.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. A worker process
(:mod:`cortex.bench.worker`) calls :func:`measure` for one (contender, point) per round; the
runner pools the rounds and :func:`summarize` turns them into the JSON's medians and spreads.
Single timings are never reported: every figure is a median over many calls, and ratios are
taken between medians measured in interleaved rounds.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Timing:
    """How long to time one case in one round."""

    min_reps: int = 5  # calls per case and round, at least (see max_time_s)
    min_time_s: float = 0.1  # seconds per case and round, at least
    max_time_s: float = 1.0  # cap per case and round: stop once reached and 3 calls are done
    warmup: int = 2  # untimed calls first, each round (fewer when they take min_time_s)

    def __post_init__(self) -> None:
        if self.min_reps < 1 or self.min_time_s < 0 or self.max_time_s < 0 or self.warmup < 0:
            raise ValueError(f"bad timing settings {self}")


def measure(fn: Callable[[], Any], timing: Timing) -> list[int]:
    """Call ``fn`` ``timing.warmup`` times (stopping early once they took ``min_time_s``), then
    time calls with ``time.perf_counter_ns`` until both ``min_reps`` calls and ``min_time_s``
    seconds are done, or ``max_time_s`` passed with at least ``min(3, min_reps)`` timed calls.
    Returns the times in ns."""
    start = time.perf_counter()
    for _ in range(timing.warmup):
        fn()
        if time.perf_counter() - start >= timing.min_time_s > 0:
            break
    floor = max(1, min(3, timing.min_reps))
    out: list[int] = []
    start_ns = time.perf_counter_ns()
    while True:
        t0 = time.perf_counter_ns()
        fn()
        t1 = time.perf_counter_ns()
        out.append(t1 - t0)
        spent = (t1 - start_ns) / 1e9
        if len(out) >= floor and spent >= timing.max_time_s:
            break
        if len(out) >= timing.min_reps and spent >= timing.min_time_s:
            break
    return out


def summarize(rounds: list[list[int]]) -> dict[str, Any]:
    """Statistics of one case's calls over its rounds (``rounds[r]`` = that round's ns):
    median, p10/p25/p75/p90, min, the relative spread ``(p90 - p10) / median``, the number of
    calls and the per-round medians (their range shows drift between rounds), in ms."""
    pooled = np.asarray([t for r in rounds for t in r], dtype=np.float64) / 1e6
    if pooled.size == 0:
        raise ValueError("no timed calls to summarize")
    med = float(statistics.median(pooled))
    p10, p25, p75, p90 = (float(v) for v in np.percentile(pooled, [10, 25, 75, 90]))
    return {
        "median_ms": med,
        "p10_ms": p10,
        "p25_ms": p25,
        "p75_ms": p75,
        "p90_ms": p90,
        "min_ms": float(pooled.min()),
        "spread": (p90 - p10) / med if med > 0 else 0.0,
        "reps": int(pooled.size),
        "rounds": len(rounds),
        "round_medians_ms": [float(statistics.median(r)) / 1e6 for r in rounds if r],
    }
