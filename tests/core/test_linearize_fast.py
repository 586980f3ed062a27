"""The fused path for plain parent arrays / child tables (``linearize.fast``) against the
general path (``read_part`` + ``assemble``): identical batches on valid input, and on invalid
input it declines (None) so that ``linearize`` raises the general path's documented error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex.core.linearize import (ChildTable, CycleError, NodeIndexError, ParentArray,
                                   RootError, StructureError, linearize, read_part)
from cortex.core.linearize import fast
from cortex.core.linearize.assemble import assemble

FIELDS = ("level_offsets", "child_offsets", "child_ids", "child_table", "roots", "node_input")
_saved_native: Any = None


def setup_module() -> None:
    """These tests are about the NumPy path: a compiled filler a backend installed earlier in
    the session (the llvm plugin's) is set aside meanwhile."""
    global _saved_native
    _saved_native = fast.set_native_nested(None)


def teardown_module() -> None:
    fast.set_native_nested(_saved_native)


def general(items: list[Any], arity: int | None = None, vocab_size: int | None = None) -> Any:
    return assemble([read_part(x, None, i) for i, x in enumerate(items)], arity=arity,
                    vocab_size=vocab_size, feature_dim=None)


def same_fields(a: Any, b: Any, fields: tuple[str, ...]) -> None:
    assert a.num_nodes == b.num_nodes
    for f in fields:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.shape == y.shape and (x == y).all(), f
        assert not x.flags.writeable
    assert list(a.origin) == list(b.origin)
    assert a.features is None and a.labels is None


def same(a: Any, b: Any) -> None:
    same_fields(a, b, FIELDS)
    assert a.word_ids is None


@st.composite
def tree(draw: Any) -> list[int]:
    n = draw(st.integers(1, 40))
    par = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    perm = draw(st.permutations(range(n)))
    out = [-1] * n
    for i in range(n):
        out[perm[i]] = -1 if par[i] < 0 else perm[par[i]]
    return out


def table_of(parents: list[int]) -> np.ndarray:
    kids: list[list[int]] = [[] for _ in parents]
    for v, p in enumerate(parents):
        if p >= 0:
            kids[p].append(v)
    width = max(1, max(len(k) for k in kids))
    return np.array([k + [-1] * (width - len(k)) for k in kids], dtype=np.int64).reshape(
        len(parents), width)


@settings(max_examples=60, deadline=None)
@given(st.lists(tree(), min_size=1, max_size=6), st.sampled_from([np.int64, np.int32]))
def test_fused_equals_general(trees: list[list[int]], dtype: Any) -> None:
    pas = [ParentArray(np.array(t, dtype=dtype)) for t in trees]
    got = fast.parent_array_batch(pas, None)
    assert got is not None
    same(got, general(pas))
    tables = [ChildTable(table_of(t).astype(dtype)) for t in trees]
    if len({t.table.shape[1] for t in tables}) == 1:
        got = fast.child_table_batch(tables, None)
        assert got is not None
        same(got, general(tables))
        same(got, fast.parent_array_batch(pas, None))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-3, 6), min_size=1, max_size=7), min_size=1, max_size=3))
def test_fused_declines_what_general_rejects(arrays: list[list[int]]) -> None:
    pas = [ParentArray(np.array(a, dtype=np.int64)) for a in arrays]
    try:
        want = general(pas)
    except StructureError as exc:
        assert fast.parent_array_batch(pas, None) is None
        with pytest.raises(type(exc)) as info:
            linearize(pas, cache=False)
        assert str(info.value) == str(exc)
    else:
        same(fast.parent_array_batch(pas, None), want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.lists(st.integers(-2, 5), min_size=2, max_size=2), min_size=1,
                         max_size=6), min_size=1, max_size=3))
def test_fused_child_tables_decline_or_agree(tables: list[list[list[int]]]) -> None:
    cts = [ChildTable(np.array(t, dtype=np.int64)) for t in tables]
    got = fast.child_table_batch(cts, None)
    try:
        want = general(cts)
    except StructureError:
        assert got is None
    else:
        if got is not None:  # declined batches (DAGs, children out of id order) go general
            same(got, want)


def test_specific_declines() -> None:
    # a DAG whose root count is still one per input must not pass as a tree
    dag = ChildTable(np.array([[1, 2], [2, -1], [-1, -1]]))
    assert fast.child_table_batch([dag], None) is None
    assert linearize([dag], cache=False).child_ids.tolist() == [0, 1, 0]
    # one input with two roots next to one with none (a cycle): the general error
    pas = [ParentArray(np.array([-1, -1])), ParentArray(np.array([1, 0]))]
    assert fast.parent_array_batch(pas, None) is None
    with pytest.raises((RootError, CycleError)):
        linearize(pas, cache=False)
    with pytest.raises(NodeIndexError, match="input 1"):
        linearize([ParentArray(np.array([-1])), ParentArray(np.array([-1, -2]))], cache=False)
    with pytest.raises(NodeIndexError, match="pad"):
        linearize([ChildTable(np.array([[-1, 1], [-1, -1]]))], cache=False)
    # the arity check declines, the general path names the node
    pas = [ParentArray(np.array([-1, 0]))]
    assert fast.parent_array_batch(pas, 2) is None
    same(fast.parent_array_batch(pas, 1), general(pas, 1))


def test_child_tables_keep_the_users_child_order_and_trim_width() -> None:
    for tables in ([ChildTable(np.array([[2, 1], [-1, -1], [-1, -1]]))],  # not in id order
                   [ChildTable(np.array([[1, -1, -1], [-1, -1, -1]])),  # wider than needed
                    ChildTable(np.array([[-1, -1, -1]]))],
                   [ChildTable(np.array([[-1, -1]]))]):  # a lone leaf: width 0
        got = fast.child_table_batch(tables, None)
        assert got is not None
        same(got, general(tables))
        assert got.child_table.flags.c_contiguous


# ---- nested tuples / lists of int tokens (``fast.nested_batch``) ---------------------------

NESTED_FIELDS = FIELDS + ("word_ids",)


def same_nested(a: Any, b: Any) -> None:
    same_fields(a, b, NESTED_FIELDS)
    for v, (i, key) in enumerate(b.origin):
        assert a.origin.row(i, key) == v


nested_ok = st.recursive(st.integers(0, 30), lambda kids: st.one_of(
    st.tuples(kids, kids), st.lists(kids, min_size=1, max_size=4),
    st.lists(kids, min_size=1, max_size=3).map(tuple)), max_leaves=25)


@settings(max_examples=150, deadline=None)
@given(st.lists(nested_ok, min_size=1, max_size=5))
def test_nested_fused_equals_general(items: list[Any]) -> None:
    got = fast.nested_batch(items, None, None)
    assert got is not None
    same_nested(got, general(items))
    same_nested(linearize(items, cache=False), general(items))
    for arity, vocab_size in ((2, 31), (3, None), (None, 10)):
        try:
            want = general(items, arity, vocab_size)
        except StructureError as exc:
            assert fast.nested_batch(items, arity, vocab_size) is None
            with pytest.raises(type(exc)) as info:
                linearize(items, arity=arity, vocab_size=vocab_size, cache=False)
            assert str(info.value) == str(exc)
        else:
            same_nested(fast.nested_batch(items, arity, vocab_size), want)


def test_nested_fused_declines_other_types() -> None:
    import enum
    from collections import namedtuple

    class Color(enum.IntEnum):
        RED = 1

    class MyInt(int):
        pass

    class MyTuple(tuple):
        pass

    Node2 = namedtuple("Node2", "word children")
    for items in ([(1, True)], [(1, -2)], [(1, "a")], [(1, ())], [(1, 2.0)], [(1, None)],
                  [(1, np.int64(2))], [(1, Color.RED)], [(1, MyInt(2))], [MyTuple((1, 2))],
                  [Node2(3, ())], [(1, 2**40)], [[1, [2, 3]], "(1 a)"]):
        assert fast.nested_batch(items, None, None) is None, items
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    assert fast.nested_batch([cyclic], None, None) is None
    deep: Any = 1
    for _ in range(5000):  # deeper than marshal's limit: the general path's iterative walk
        deep = (deep, 2)
    assert fast.nested_batch([deep], 2, None) is None
    assert linearize([deep], arity=2, cache=False).num_levels == 5001
    # a lone token is a one-node tree, and a token outside the vocabulary is the general error
    same_nested(fast.nested_batch([7], None, None), general([7]))
    assert fast.nested_batch([(1, 9)], 2, 9) is None
