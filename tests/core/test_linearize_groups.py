"""The grouped layout (``cortex.core.linearize.groups``): each group's levels hold only its own
trees, children stay below their parents, nothing is lost or duplicated, and it declines the
batches it cannot help (one tree, too few internal nodes, one group)."""

from __future__ import annotations

import numpy as np
import pytest

from cortex.core.linearize import Grid, Sequence, linearize
from cortex.core.linearize.groups import group_trees


def _chain(n: int):
    """A left-leaning binary tree with ``n`` leaves (n - 1 levels above them)."""
    t = 0
    for i in range(1, n):
        t = (t, i)
    return t


def _balanced(depth: int, start: int = 0):
    if depth == 0:
        return start
    return (_balanced(depth - 1, start), _balanced(depth - 1, start + 2 ** (depth - 1)))


def _check(batch, groups: int = 2, min_internal: int = 1):
    lo, co, ci = batch.level_offsets, batch.child_offsets, batch.child_ids
    got = group_trees(lo, co, ci, groups, min_internal=min_internal)
    assert got is not None
    n, nl, levels = batch.num_nodes, batch.num_leaves, batch.num_levels
    table = got.level_table.reshape(got.groups, levels + 1)
    flat = got.level_table.astype(np.int64)
    assert flat[0] == nl and flat[-1] == n and np.all(np.diff(flat) >= 0)
    assert np.array_equal(table[:, 0], table[:, 1])  # the leaves are in no group's levels
    assert np.array_equal(got.order[:nl], np.arange(nl))  # the leaves keep their rows
    assert np.array_equal(np.sort(got.order), np.arange(n))
    assert np.array_equal(got.rows[got.order], np.arange(n))
    # the grouped CSR lists are the plain ones, renumbered
    for new in range(n):
        old = got.order[new]
        want = got.rows[ci[co[old]:co[old + 1]]]
        assert np.array_equal(got.child_ids[got.child_offsets[new]:got.child_offsets[new + 1]], want)
    if batch.max_arity:  # the dense table, renumbered the same way
        t = got.child_table(batch.child_table)
        for new in range(n):
            kids = got.child_ids[got.child_offsets[new]:got.child_offsets[new + 1]]
            assert np.array_equal(t[new, :len(kids)], kids) and np.all(t[new, len(kids):] == -1)
    # each group's level l holds nodes of plain level l whose children lie in its own earlier
    # levels or among the leaves, and whose trees are in no other group
    level = np.repeat(np.arange(levels), np.diff(lo))
    owner = np.full(n, -1)
    for g in range(got.groups):
        for l in range(1, levels):
            rows = np.arange(table[g, l], table[g, l + 1])
            assert np.all(level[got.order[rows]] == l)
            owner[rows] = g
            for v in rows:
                kids = got.child_ids[got.child_offsets[v]:got.child_offsets[v + 1]]
                assert np.all(kids < v)
                assert np.all((kids < nl) | ((kids >= table[g, 1]) & (kids < table[g, l])))
    assert np.all(owner[nl:] >= 0)
    node_input = batch.node_input[got.order]
    for b in range(batch.batch_size):
        mine = owner[nl:][node_input[nl:] == b]
        assert len(set(mine.tolist())) <= 1  # a tree belongs to one group
    return got


def test_a_batch_of_unequal_trees_splits_by_internal_nodes_and_levels_differ():
    batch = linearize([_chain(12), (0, 1), _balanced(3), ((0, 1), 2)])
    got = _check(batch)
    table = got.level_table.reshape(2, -1)
    sizes = table[:, -1] - table[:, 0]
    assert sorted(sizes.tolist()) == [7 + 1 + 2, 11]  # the chain alone, the others together
    levels = [int(np.count_nonzero(np.diff(t) > 0)) for t in table]
    assert max(levels) == 11 and min(levels) == 3  # the other group's last levels are empty


def test_many_trees_in_three_groups_and_a_variable_arity_batch():
    rng = np.random.default_rng(0)
    trees = [_balanced(int(rng.integers(1, 4))) for _ in range(10)]
    got = _check(linearize(trees), groups=3)
    assert got.groups == 3
    _check(linearize([(0, 1, 2), ((3,), 4), (0, (1, 2, 3, 4))]))


def test_sequences_and_dag_grids():
    _check(linearize([Sequence(np.arange(9)), Sequence(np.arange(4)), Sequence(np.arange(6))]))
    grids = [Grid(r, c, features=np.zeros((r, c, 2))) for r, c in ((3, 4), (2, 2), (4, 4))]
    got = _check(linearize(grids, feature_dim=2))
    batch = linearize(grids, feature_dim=2)
    assert np.array_equal(got.node_array(batch.features), batch.features[got.order])


@pytest.mark.parametrize("case", ["one tree", "one group", "too small", "only leaves"])
def test_batches_it_declines(case):
    batch = {"one tree": linearize(_balanced(5)), "one group": linearize([_chain(5), _chain(6)]),
             "too small": linearize([(0, 1), (2, 3)]), "only leaves": linearize([0, 1, 2])}[case]
    groups = 1 if case == "one group" else 2
    min_internal = 16 if case == "too small" else 1
    assert group_trees(batch.level_offsets, batch.child_offsets, batch.child_ids, groups,
                       min_internal=min_internal) is None


def test_one_tree_with_lone_leaves_beside_it_is_one_group():
    batch = linearize([_balanced(3), 5, 6])  # the single leaves have no internal nodes
    assert group_trees(batch.level_offsets, batch.child_offsets, batch.child_ids, 2,
                       min_internal=1) is None
