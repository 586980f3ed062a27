"""The machine's practical FLOP roof: a large float32 matrix product through NumPy's BLAS.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. A benchmark worker
(:mod:`cortex.bench.worker`, op ``roof``) runs :func:`matmul_ns` with the peers' thread
settings, once per round, interleaved with the contenders' rounds; the runner
(:mod:`cortex.bench.run`) records the samples as the run's ``roof`` and each result's
``roof_fraction`` (its GFLOP/s over the roof's median). What a well-tuned GEMM reaches on these
cores and threads is the bar a GEMM-shaped level of a large batch can be held to, measured under
the same load as the contenders.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np


def matmul_flops(size: int) -> int:
    """FLOPs of one ``[size x size] @ [size x size]`` product (a multiply and an add each)."""
    return 2 * size**3


def matmul_ns(size: int, reps: int = 1, seed: int = 0) -> list[int]:
    """Nanoseconds of each of ``reps`` float32 products of ``size``-square matrices, after one
    untimed warm-up product."""
    if size < 1 or reps < 1:
        raise ValueError(f"need size >= 1 and reps >= 1, got size={size}, reps={reps}")
    rng = np.random.default_rng(seed)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    out = np.empty_like(a)
    np.matmul(a, b, out=out)
    samples = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        np.matmul(a, b, out=out)
        samples.append(time.perf_counter_ns() - t)
    return samples


def summary(size: int, samples_ns: list[int]) -> dict[str, Any]:
    """The run's ``roof`` record from its per-round samples."""
    rates = [matmul_flops(size) / ns for ns in samples_ns if ns > 0]  # FLOP/ns = GFLOP/s
    return {"size": size, "dtype": "float32", "flops": matmul_flops(size),
            "method": "numpy.matmul in a benchmark worker (the peers' thread settings), once per "
                      "round between the contenders' rounds",
            "gflops_median": statistics.median(rates) if rates else None,
            "gflops_rounds": rates}
