"""Workload class names: ``b<B>-n<N>-<shape>``, parsed and compared.

Pipeline position: beside the pipeline. :mod:`cortex.tuning.workload` names a workload's class;
the records (:mod:`cortex.tuning.records`) and the ``workload=`` compile option read class
names with these helpers, which import nothing, so a compile that reads tuning records stays
cheap. ``B`` and ``N`` are powers of two (``b8`` = batches of 8-15 structures, ``n32`` = 32-63
nodes per structure); the shapes are described in :mod:`cortex.tuning.workload`.
"""

from __future__ import annotations

import math

CLASS_SHAPES = ("parse", "balanced", "chain", "dag")  # what a workload class may say


def bucket(x: float) -> int:
    """The power of two at or below ``x`` (1 for anything below 2)."""
    return 1 << max(0, int(math.floor(math.log2(max(1.0, x)))))


def class_name(batch_size: float, nodes: float, shape: str) -> str:
    return f"b{bucket(batch_size)}-n{bucket(nodes)}-{shape}"


def parse_class(text: str) -> tuple[int, int, str]:
    """``"b8-n32-parse"`` -> ``(8, 32, "parse")``; ``ValueError`` for anything else."""
    parts = text.split("-") if isinstance(text, str) else []
    try:
        if len(parts) == 3 and parts[0][0] == "b" and parts[1][0] == "n" and parts[2] in CLASS_SHAPES:
            b, n = int(parts[0][1:]), int(parts[1][1:])
            if b >= 1 and n >= 1 and b & (b - 1) == 0 and n & (n - 1) == 0:
                return b, n, parts[2]
    except (ValueError, IndexError):
        pass
    raise ValueError(f"{text!r} is not a workload class: expected b<B>-n<N>-<shape> with B and N "
                     f"powers of two and shape one of {CLASS_SHAPES} (e.g. 'b8-n32-parse')")


def class_distance(a: str, b: str) -> float:
    """How far apart two workload classes are: octaves of batch size and of nodes, plus 2 for
    a different shape (0 for the same class)."""
    ba, na, sa = parse_class(a)
    bb, nb, sb = parse_class(b)
    return abs(math.log2(ba / bb)) + abs(math.log2(na / nb)) + (0 if sa == sb else 2)
