"""Each input form's exact output, the interpretation rules, the cache, and big inputs."""

from __future__ import annotations

import ast
import sys

import numpy as np
import pytest

from cortex.core.linearize import (ChildTable, EdgeList, Grid, Node, ParentArray, Sequence,
                                   SExpr, Tree, cache_info, clear_cache, linearize, set_cache)
from cortex.core.linearize.ast_types import AST_TYPE_IDS

VOCAB = {"It": 1, "'s": 2, "fine": 3, "a": 4, "b": 5, "c": 6}


def test_sst_sexpr_exact() -> None:
    batch = linearize("(3 (2 It) (4 (2 's) (3 fine)))", vocab=VOCAB, arity=2)
    batch.validate()
    assert batch.level_offsets.tolist() == [0, 3, 4, 5]
    assert batch.num_leaves == 3
    assert batch.word_ids.tolist() == [1, 2, 3, -1, -1]  # leaves left to right first
    assert batch.labels.tolist() == [2, 2, 3, 4, 3]
    assert batch.child_table.tolist() == [[-1, -1]] * 3 + [[1, 2], [0, 3]]
    assert batch.child_offsets.tolist() == [0, 0, 0, 0, 2, 4]
    assert batch.child_ids.tolist() == [1, 2, 0, 3]
    assert batch.roots.tolist() == [4]
    assert list(batch.origin) == [(0, "root.0"), (0, "root.1.0"), (0, "root.1.1"),
                                  (0, "root.1"), (0, "root")]
    assert batch.origin.row(0, "root.1") == 3
    for name in ("level_offsets", "child_ids", "child_table", "word_ids", "labels"):
        assert getattr(batch, name).dtype == np.int32
        assert not getattr(batch, name).flags.writeable


def test_nested_tuples_and_lists_are_the_same_tree() -> None:
    a = linearize((("a", "b"), "c"), vocab=VOCAB, cache=False)
    b = linearize([[["a", "b"], "c"]], vocab=VOCAB, cache=False)  # outer list = batch of one
    for name in ("level_offsets", "child_ids", "word_ids"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.word_ids.tolist() == [4, 5, 6, -1, -1]
    assert a.labels is None


def test_top_level_list_is_a_batch_and_tuple_a_tree() -> None:
    assert linearize([1, 2, 3]).batch_size == 3
    assert linearize((1, 2, 3)).batch_size == 1


def test_parent_array_children_in_id_order() -> None:
    batch = linearize(ParentArray(np.array([2, 2, -1, 0]), words=["a", "b", -1, "c"]),
                      vocab=VOCAB)
    batch.validate()
    assert [batch.origin[v][1] for v in range(4)] == [1, 3, 0, 2]
    root = int(batch.roots[0])
    assert [batch.origin[int(c)][1] for c in batch.children(root)] == [0, 1]
    assert batch.word_ids.tolist() == [5, 6, 4, -1]


def test_child_table_and_edge_list_agree() -> None:
    table = ChildTable(np.array([[1, 2], [-1, -1], [3, -1], [-1, -1]]), words=[-1, 1, -1, 2])
    edges = EdgeList(4, np.array([[0, 1], [0, 2], [2, 3]]), words=[-1, 1, -1, 2])
    a, b = linearize(table), linearize(edges)
    for name in ("level_offsets", "child_ids", "child_table", "word_ids"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def test_dag_shared_child_computed_once() -> None:
    # 3 = f(1, 2), 1 = g(0), 2 = h(0): node 0 is shared
    batch = linearize(EdgeList(4, [[3, 1], [3, 2], [1, 0], [2, 0]], words=[7, -1, -1, -1]))
    batch.validate()
    assert batch.num_nodes == 4
    assert batch.level_offsets.tolist() == [0, 1, 3, 4]
    assert batch.child_ids.tolist() == [0, 0, 1, 2]


def test_objects_shared_by_identity_tuples_copied() -> None:
    leaf = Node(word=1)
    shared = linearize(Node((leaf, leaf), label=3))
    shared.validate()
    assert shared.num_nodes == 2
    assert shared.child_ids.tolist() == [0, 0]
    assert shared.labels.tolist() == [-1, 3]
    t = (1,)
    copied = linearize((t, t))
    assert copied.num_nodes == 5


def test_sequence_tokens_and_features() -> None:
    s = linearize(Sequence(["a", "b", "c"]), vocab=VOCAB)
    assert s.level_offsets.tolist() == [0, 1, 2, 3]
    assert s.word_ids.tolist() == [4, 5, 6]
    assert s.child_table.tolist() == [[-1], [0], [1]]
    f = linearize([Sequence(np.ones((2, 3))), Sequence(np.zeros((4, 3)))], feature_dim=3)
    f.validate()
    assert f.features.shape == (6, 3) and f.word_ids is None
    assert f.node_input.tolist() == [0, 1, 0, 1, 1, 1]


def test_grid_children_up_then_left() -> None:
    g = linearize(Grid(2, 3, words=np.arange(6).reshape(2, 3)))
    g.validate()
    root = int(g.roots[0])
    assert g.origin[root] == (0, (1, 2))
    assert [g.origin[int(c)][1] for c in g.children(root)] == [(0, 2), (1, 1)]
    assert g.origin.row(0, (0, 0)) == 0


def test_python_ast_raw() -> None:
    tree = ast.parse("x = 1 + 2")
    batch = linearize(tree, vocab_size=200)
    batch.validate()
    root = int(batch.roots[0])
    assert batch.word_ids[root] == AST_TYPE_IDS["Module"]
    assert batch.origin[root] == (0, "root")
    names = {AST_TYPE_IDS[n] for n in ("Name", "Store", "Constant", "Add")}
    assert names <= set(batch.word_ids.tolist())


def test_mixed_batch_of_every_form() -> None:
    items = [
        "(3 (2 a) (2 b))", ("a", ("b", "c")), ParentArray(np.array([-1, 0, 0]), words=[-1, 1, 2]),
        EdgeList(3, [[2, 0], [2, 1]], words=[1, 2, -1]), Sequence([1, 2, 3]),
        Grid(2, 2, words=[1, 2, 3, 4]), Node((Node(word=1), Node(word=2))), Tree(["a", "b"]),
        SExpr("(1 (2 c) (3 a))"),
    ]
    batch = linearize(items, vocab=VOCAB)
    batch.validate()
    assert batch.batch_size == len(items)


def test_cache_hits_and_switches() -> None:
    clear_cache()
    set_cache(True, max_batches=2)
    try:
        a = linearize([ParentArray(np.array([-1, 0, 0]))])
        b = linearize([ParentArray(np.array([-1, 0, 0]))])
        assert a is b
        assert cache_info()["batches"]["hits"] >= 1
        c = linearize([ParentArray(np.array([-1, 0, 0]))], arity=2)  # options are in the key
        assert c is not a
        linearize([ParentArray(np.array([-1, 0]))])
        linearize([ParentArray(np.array([-1, 0, 1]))])  # evicts the oldest (max 2)
        assert cache_info()["batches"]["size"] == 2
        d = linearize([ParentArray(np.array([-1, 0, 0], dtype=np.int32))])  # dtype in the key
        assert d is not a
        set_cache(False)
        assert linearize([ParentArray(np.array([-1, 0]))]) is not \
            linearize([ParentArray(np.array([-1, 0]))])
        # objects and vocabularies without a fingerprint are never cached
        set_cache(True)
        assert linearize([Node(word=1)]) is not linearize([Node(word=1)])
        assert linearize(["(1 (2 a) (2 b))"], vocab=VOCAB) is not \
            linearize(["(1 (2 a) (2 b))"], vocab=VOCAB)
        # nested int tokens are keyed by their content (their marshal bytes), not the objects
        trees = [((1, 2), 3), [4, 5]]
        first = linearize(trees, arity=2)
        assert linearize([((1, 2), 3), [4, 5]], arity=2) is first
        assert linearize(trees, arity=2, vocab_size=9) is not first  # options are in the key
        assert linearize(trees, arity=2, cache=False) is not first
        trees[1][0] = 6  # a list changed in place: another key, the new token
        changed = linearize(trees, arity=2)
        assert changed is not first and 6 in changed.word_ids.tolist()
        assert 4 in first.word_ids.tolist()  # the cached batch stays what it was
        assert linearize([(4, 5)], arity=2) is not linearize([[4, 5]], arity=2)  # tuple != list
    finally:
        set_cache(True, max_batches=256)


def test_batches_too_big_to_store_are_not_keyed(monkeypatch) -> None:
    """Feature inputs past the key budget are neither stored nor copied into a key (that cost
    more than linearizing them); small ones are cached; results are the same either way.
    (Feature grids never reach the batch cache: their fused path is cheaper than a key.)"""
    from cortex.core.linearize import cache

    rng = np.random.default_rng(0)
    small = [Sequence(rng.normal(size=(4, 3))) for _ in range(2)]
    big = [Grid(10, 10, features=rng.normal(size=(10, 10, 256))) for _ in range(10)]  # 2 MB
    assert None not in cache.input_keys(small, None)
    assert None not in cache.input_keys(big[:1], None)
    assert cache.input_keys(big, None) == [None] * 10
    mixed = cache.input_keys(["(1 (2 3) (4 5))", *big], None)  # strings keep their keys
    assert mixed[0] is not None and mixed[1:] == [None] * 10
    clear_cache()
    assert linearize(small) is linearize(small)
    big_seqs = [Sequence(rng.normal(size=(100, 256))) for _ in range(10)]  # 2 MB
    assert linearize(big_seqs) is not linearize(big_seqs)
    calls: list[int] = []
    real = cache._array_key
    monkeypatch.setattr(cache, "_array_key", lambda v: (calls.append(1), real(v))[1])
    a, b = linearize(big), linearize(big)
    assert a is not b and not calls
    assert (a.features == b.features).all() and (a.features == linearize(big, cache=False).features).all()


def test_features_follow_their_nodes_across_a_mixed_batch() -> None:
    """Each output row carries the feature vector of the input node it came from."""
    items = [ParentArray(np.array([-1, 0, 0, 1]), features=np.arange(4.0)[:, None]),
             Grid(2, 3, features=(100 + np.arange(6.0)).reshape(2, 3, 1)),
             Sequence(200 + np.arange(3.0)[:, None])]
    batch = linearize(items, cache=False)
    for row, (b, key) in enumerate(batch.origin):
        local = key[0] * 3 + key[1] if b == 1 else key
        assert batch.features[row, 0] == 100 * b + local


def test_long_chain_no_recursion() -> None:
    n = 100_000
    limit = sys.getrecursionlimit()
    par = np.arange(1, n + 1)
    par[-1] = -1
    chain = linearize(ParentArray(par), cache=False)
    assert chain.num_levels == n
    nested: object = 0
    for i in range(n - 1):
        nested = (nested,)
    deep = linearize(nested, cache=False)
    assert deep.num_levels == n and deep.origin[0][1].count(".") == n - 1
    text = "(1 " * (n - 1) + "(2 a)" + ")" * (n - 1)
    assert linearize(text, vocab=VOCAB, cache=False).num_levels == n
    seq = linearize(Sequence(np.zeros(n, dtype=np.int64)), cache=False)
    assert seq.num_levels == n
    assert sys.getrecursionlimit() == limit


def test_batch_of_thousand_trees() -> None:
    rng = np.random.default_rng(0)
    items = []
    for _ in range(1000):
        n = int(rng.integers(1, 40))
        par = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
        items.append(ParentArray(par))
    batch = linearize(items, cache=False)
    batch.validate()
    assert batch.batch_size == 1000


def test_origin_slices_and_errors() -> None:
    batch = linearize([(1, 2), ParentArray(np.array([-1, 0]), words=[-1, 3])])
    assert batch.origin[:2] == [(0, "root.0"), (0, "root.1")]
    with pytest.raises(KeyError):
        batch.origin.row(1, 5)


@pytest.mark.parametrize("field, value", [
    ("level_offsets", [0, 2, 5]),  # wrong level split: a leaf in level 1
    ("child_ids", [1, 2, 0, 5]),  # child id out of range
    ("child_ids", [1, 2, 4, 3]),  # a child after its parent
    ("roots", [3]),  # not the node without parent
    ("node_input", [0, 0, 0, 0, 1]),  # node_input beyond the batch
    ("child_table", [[-1, -1]] * 3 + [[1, 2], [3, 0]]),  # table disagrees with the CSR
    ("word_ids", [1, 2, 3, -1, -5]),
])
def test_validate_catches_corruption(field: str, value: list) -> None:
    import dataclasses

    from cortex.core.linearize.structure import InvariantError

    good = linearize("(3 (2 It) (4 (2 's) (3 fine)))", vocab=VOCAB, cache=False)
    good.validate()
    bad = dataclasses.replace(good, **{field: np.array(value, dtype=np.int32)})
    with pytest.raises(InvariantError):
        bad.validate()
