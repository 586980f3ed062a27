"""Tree groups: a batch's internal nodes regrouped so that G independent workers each walk the
levels of their own trees, with no synchronization between workers.

Pipeline position: after ``bind_batch``, on the bound index arrays of one call, for a backend
that runs the level loop inside one launch per worker with a barrier among each worker's own
threads only (the schedule knob ``tree_groups``, default ``Capabilities.independent_groups``,
recorded as the launch setting of that name). The trees (DAGs, sequences) of a batch do not
depend on each other, so a partition of them into G groups, each with its own level offsets,
lets G work-groups run one launch at once where the plain layout needs one work-group (a
barrier across work-groups is not something every device offers, or guarantees to make
progress).

The grouped layout (N nodes, L levels, NL leaves, G groups):

* the leaves keep their rows ``0..NL`` (they depend on nothing: a backend computes them first,
  in a launch of its own, on every worker);
* the internal nodes follow group by group, and within a group level by level, each level in
  the plain layout's order: group ``g``'s level ``l`` is ``table[g * (L + 1) + l] ..
  table[g * (L + 1) + l + 1]``; a group with fewer levels has empty ones at the end, and
  ``table[g * (L + 1)] == table[g * (L + 1) + 1]`` (its leaves are not in its range). The
  flattened table is non-decreasing and lies in ``[NL, N]``;
* child ids, child offsets and per-node arrays are permuted to match (:meth:`TreeGroups.rows`
  maps a plain row to its grouped row, so an output in grouped order goes back to the caller's
  node order as ``out[rows]``).

Trees are assigned to groups largest first, each to the group with the fewest internal nodes
so far (balanced by node count). Cost: a fixed number of NumPy calls plus O(log height) for
the tree of each node (pointer jumping) and a Python step per tree (about 0.1-0.2 ms for ten
30-word sentences).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .structure import INDEX_DTYPE

#: Fewest internal nodes a batch needs before it is split into groups: below it, one worker's
#: barrier-separated levels are cheap enough that a second one gains less than it costs.
MIN_INTERNAL_NODES = 16


@dataclass(frozen=True)
class TreeGroups:
    """A batch's grouped layout (see the module docstring); arrays are int32 unless noted."""

    groups: int
    level_table: np.ndarray  # [groups * (L + 1)], flattened [groups, L + 1]
    order: np.ndarray  # [N] intp: grouped row -> plain row
    rows: np.ndarray  # [N] intp: plain row -> grouped row
    child_offsets: np.ndarray  # [N + 1]
    child_ids: np.ndarray  # [E]

    def node_array(self, a: np.ndarray) -> np.ndarray:
        """A per-node array (``[N, ...]``: token ids, features) in grouped order."""
        return np.ascontiguousarray(a[self.order])

    def child_table(self, table: np.ndarray) -> np.ndarray:
        """The ``[N, k]`` child table (-1 padded) in grouped order with grouped child ids."""
        t = table[self.order]
        return np.where(t >= 0, self.rows[np.maximum(t, 0)], -1).astype(INDEX_DTYPE)


def group_trees(level_offsets: np.ndarray, child_offsets: np.ndarray, child_ids: np.ndarray,
                groups: int, min_internal: int = MIN_INTERNAL_NODES) -> TreeGroups | None:
    """The grouped layout of a bound batch for up to ``groups`` workers, or None when it would
    not help: fewer than two groups asked for, fewer than ``min_internal`` internal nodes, or a
    single tree. The arrays are a batch's (``LinearizedBatch`` invariants: levels contiguous,
    level 0 exactly the leaves); ``child_ids`` may carry one padding entry past
    ``child_offsets[-1]`` (an all-leaf batch binds one), which is ignored."""
    if groups < 2:
        return None
    n = len(child_offsets) - 1
    levels = len(level_offsets) - 1
    nl = int(level_offsets[1]) if levels >= 1 else n
    if n - nl < max(1, min_internal):
        return None
    e = int(child_offsets[-1])
    ids = child_ids[:e]
    # a node without a parent is a root; at least N - E nodes have none (a tree: exactly)
    if n - e < 2 and np.count_nonzero(np.bincount(ids, minlength=n)) > n - 2:
        return None  # one root: a single structure
    arity = np.diff(child_offsets)
    parent = np.arange(n)
    parent[ids] = np.repeat(np.arange(n), arity)  # a DAG node keeps one of its parents
    # each node's root by pointer jumping (the root of a DAG node reached through any parent
    # is its input's sink: inputs share no nodes)
    is_root = parent == np.arange(n)
    root = parent
    while True:
        up = root[root]
        if np.array_equal(up, root):
            break
        root = up
    tree_of = (np.cumsum(is_root) - 1)[root[nl:]]  # trees numbered by their roots' rows
    sizes = np.bincount(tree_of)  # internal nodes per tree (0 for a lone leaf)
    g = min(groups, int(np.count_nonzero(sizes)))
    if g < 2:
        return None
    group_of_tree = np.empty(len(sizes), np.int64)
    load = [0] * g
    for t in np.argsort(-sizes, kind="stable"):  # largest first, to the lightest group
        k = load.index(min(load))
        group_of_tree[t] = k
        load[k] += int(sizes[t])
    width = levels + 1
    level = np.repeat(np.arange(levels), np.diff(level_offsets))[nl:]
    key = group_of_tree[tree_of] * width + level
    order = np.concatenate([np.arange(nl), nl + np.argsort(key, kind="stable")])
    rows = np.empty(n, np.intp)
    rows[order] = np.arange(n)
    table = np.empty(g * width, np.int64)
    table[0] = nl
    np.cumsum(np.bincount(key, minlength=g * width)[:-1], out=table[1:])
    table[1:] += nl
    new_arity = arity[order]
    co = np.zeros(n + 1, np.int64)
    np.cumsum(new_arity, out=co[1:])
    src = np.repeat(child_offsets[:-1][order].astype(np.int64) - co[:-1], new_arity) + np.arange(e)
    ci = rows[ids[src]]
    if len(child_ids) > e:  # keep the padding entry of an all-leaf batch
        ci = np.concatenate([ci, child_ids[e:]])
    return TreeGroups(g, table.astype(INDEX_DTYPE), order, rows, co.astype(INDEX_DTYPE),
                      ci.astype(INDEX_DTYPE))
