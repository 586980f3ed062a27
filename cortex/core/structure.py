"""The linearized batch: the contract between the host linearizer and everything downstream.

Pipeline position: ``cortex.core.linearize`` turns user structures (trees, DAGs, sequences)
into a :class:`LinearizedBatch`; the reference evaluator, the LoopProgram interpreter and
every backend runtime read only this object. Generated native code dereferences these arrays
without bounds checks, so the invariants below are the safety contract: whoever builds a
``LinearizedBatch`` must establish them (``validate()`` checks them, vectorized).

Invariants (N = ``num_nodes``, L = ``num_levels``):

* Nodes are numbered ``0..N-1`` so that every level is a contiguous range
  ``level_offsets[l]:level_offsets[l+1]``; level 0 holds exactly the leaves (no children);
  a node's level is its height (1 + max level of its children), so levels are minimal.
  Consequently every child id is smaller than its parent's id: ``0..N-1`` is a topological order.
* Children are stored in CSR form: the children of node ``v`` are
  ``child_ids[child_offsets[v]:child_offsets[v+1]]``, in the user's order (it matters for
  N-ary models: child 0 is the left child of a binary tree).
* ``child_table`` is the dense ``[N, max_arity]`` form of the same relation, padded with -1
  (leaves are all -1). It is always present; fixed-arity models additionally get the guarantee
  (checked by the linearizer when a model asks for arity k) that every internal node has
  exactly k children.
* A DAG node shared by several parents appears once; its id occurs in several parents' lists.
* ``roots[b]`` is the node id of input ``b``'s root (its sink, for a DAG; its last element, for
  a sequence). ``node_input[v]`` is the batch index of the input node ``v`` came from.
* ``word_ids[v]`` is the per-node token id (-1 where a node carries no token), or ``None``
  when no input carries tokens; ``features`` is ``[N, F]`` float64 or ``None``.
* Index arrays are int32 (compact for GPUs; the linearizer rejects batches that overflow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

INDEX_DTYPE = np.int32


@dataclass(frozen=True, eq=False)
class LinearizedBatch:
    """A batch of structures as flat, level-ordered index arrays (see the module docstring)."""

    num_nodes: int
    level_offsets: np.ndarray  # int32 [num_levels + 1], level_offsets[0] == 0, [-1] == N
    child_offsets: np.ndarray  # int32 [N + 1]
    child_ids: np.ndarray  # int32 [E]
    child_table: np.ndarray  # int32 [N, max_arity], -1 padded (max_arity may be 0)
    roots: np.ndarray  # int32 [B]
    node_input: np.ndarray  # int32 [N]
    word_ids: np.ndarray | None = None  # int32 [N], -1 = no token
    features: np.ndarray | None = None  # float64 [N, F]
    # For mapping output rows back to the user's nodes: origin[v] = (batch index, key) where key
    # is a path like "root.1.0" for trees, or the user's node id for parent arrays / edge lists.
    origin: Sequence[tuple[int, Any]] | None = field(default=None, repr=False)

    @property
    def num_levels(self) -> int:
        return len(self.level_offsets) - 1

    @property
    def batch_size(self) -> int:
        return len(self.roots)

    @property
    def num_leaves(self) -> int:
        """Leaves are exactly level 0: the range ``0:num_leaves``."""
        return int(self.level_offsets[1]) if self.num_levels > 0 else 0

    @property
    def max_arity(self) -> int:
        return int(self.child_table.shape[1])

    def level(self, l: int) -> range:
        return range(int(self.level_offsets[l]), int(self.level_offsets[l + 1]))

    def children(self, v: int) -> np.ndarray:
        return self.child_ids[self.child_offsets[v] : self.child_offsets[v + 1]]

    def arity(self) -> np.ndarray:
        """Number of children of every node, int32 [N]."""
        return np.diff(self.child_offsets).astype(INDEX_DTYPE)
