"""How large a batch the linearizer accepts: checked from the sizes alone, before it allocates.

Pipeline position: every reader of ``cortex.core.linearize`` calls :func:`check_size` as soon as
it knows how many nodes (and edges) an input has -- for ``Grid(rows, cols)`` and
``EdgeList(num_nodes, ...)`` that is before anything is built from the declared size -- and
``assemble`` checks the whole batch once more before its first batch-wide array. Two limits:

* **int32 indices**: a batch has at most ``MAX_INDEX`` = 2^31 - 1 nodes and as many edges
  (:class:`~cortex.core.linearize.errors.IndexOverflowError`);
* **a memory budget** for the linearizer's own working arrays: about ``BYTES_PER_NODE`` per
  node, ``BYTES_PER_EDGE`` per edge and ``BYTES_PER_FEATURE`` per feature value (upper
  estimates measured on 10^6-node grids, DAGs, chains and random trees: the peak was 112-225
  bytes per node), at most ``max_bytes`` (default 4 GiB: some 20 million tree nodes, a
  4000 x 4000 grid) (:class:`~cortex.core.linearize.errors.MemoryLimitError`).

Both errors are ``ValueError``s naming the input and the limit. ``set_limits(max_bytes=...)``
changes the budget for the process; ``limits()`` reports it.
"""

from __future__ import annotations

from ..errors import int_arg
from .structure import MAX_INDEX
from .errors import IndexOverflowError, MemoryLimitError

BYTES_PER_NODE = 128
BYTES_PER_EDGE = 64
BYTES_PER_FEATURE = 16  # the float64 copy of the input's values and the copy in output order
DEFAULT_MAX_BYTES = 4 << 30


class _Limits:
    max_bytes = DEFAULT_MAX_BYTES
    # a total count of nodes, edges and feature values up to this fits both limits for sure
    quick = min(MAX_INDEX, DEFAULT_MAX_BYTES // max(BYTES_PER_NODE, BYTES_PER_EDGE,
                                                    BYTES_PER_FEATURE))


LIMITS = _Limits()


def set_limits(*, max_bytes: int | None = None) -> None:
    """Set the linearizer's memory budget (bytes of working arrays per batch); None keeps it."""
    if max_bytes is not None:
        LIMITS.max_bytes = int_arg("set_limits", "max_bytes", max_bytes)
        LIMITS.quick = min(MAX_INDEX, LIMITS.max_bytes // max(BYTES_PER_NODE, BYTES_PER_EDGE,
                                                              BYTES_PER_FEATURE))


def limits() -> dict[str, int]:
    """The limits in force: ``max_index`` (nodes, edges) and ``max_bytes`` (memory budget)."""
    return {"max_index": MAX_INDEX, "max_bytes": LIMITS.max_bytes,
            "bytes_per_node": BYTES_PER_NODE, "bytes_per_edge": BYTES_PER_EDGE,
            "bytes_per_feature": BYTES_PER_FEATURE}


def working_bytes(nodes: int, edges: int = 0, features: int = 0) -> int:
    """The budget's estimate of the linearizer's working memory for a batch of this size."""
    return nodes * BYTES_PER_NODE + edges * BYTES_PER_EDGE + features * BYTES_PER_FEATURE


def check_size(nodes: int, edges: int = 0, features: int = 0, *, what: str = "the batch",
               input_index: int | None = None) -> None:
    """Raise unless a batch (or one input: ``input_index``) of ``nodes`` nodes, ``edges`` edges
    and ``features`` feature values fits int32 indices and the memory budget. Arguments are
    Python ints (no overflow), so a declared size of 2^62 is reported, not computed with."""
    if nodes + edges + features <= LIMITS.quick:
        return  # the common case, one comparison
    for count, name in ((nodes, "nodes"), (edges, "edges")):
        if count > MAX_INDEX:
            raise IndexOverflowError(
                f"{what} has {count} {name}; indices are int32, so at most {MAX_INDEX} "
                "(split the batch)", input_index=input_index)
    need = working_bytes(nodes, edges, features)
    if need > LIMITS.max_bytes:
        raise MemoryLimitError(
            f"{what} has {nodes} nodes, {edges} edges and {features} feature values: "
            f"linearizing it needs about {_gib(need)}, over the linearizer's memory budget of "
            f"{_gib(LIMITS.max_bytes)} (split the batch, or raise the budget with "
            "cortex.core.linearize.set_limits(max_bytes=...))", input_index=input_index)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.3g} GiB"
