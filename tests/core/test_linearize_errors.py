"""Every documented linearizer error: its class, and a message naming input index and node."""

from __future__ import annotations

import ast
import importlib

import numpy as np
import pytest

from cortex.core.linearize import (ArityError, ChildTable, CycleError, EdgeList, EmptyBatchError,
                                   FeatureError, Grid, IndexOverflowError, MixedInputError, Node,
                                   NodeIndexError, ParentArray, ParseError, RootError, Sequence,
                                   SExpr, StructureError, TokenError, Tree,
                                   UnsupportedInputError, linearize)

VOCAB = {"a": 0, "b": 1, "c": 2}
assemble_module = importlib.import_module("cortex.core.linearize.assemble")
OK = (1, 2)  # a fine tree to put before the bad one (input 0)
OKPA = ParentArray(np.array([-1, 0, 0]))  # the same for array forms (no tokens)


def raises(cls: type, items: list, *, index: int | None, path: object = None,
           match: str | None = None, **kw: object) -> StructureError:
    with pytest.raises(cls, match=match) as info:
        linearize(items, cache=False, **kw)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.input_index == index
    if index is not None:
        assert f"input {index}" in str(err)
    if path is not None:
        assert err.path == path
        assert f"node {path}" in str(err)
    return err


def test_empty_batch() -> None:
    raises(EmptyBatchError, [], index=None)


@pytest.mark.parametrize("text, path", [
    ("", None), ("()", "root"), ("(3 (2 a)", "root"), ("(3 (2 a)))", None),
    ("(2 a) (3 b)", None), ("(3 (2 a) ())", "root.1"), ("(NP (2 a) (2 b))", "root"),
    ("a b", None), (")", None), ("((", "root.0"),
])
def test_malformed_sexpr(text: str, path: object) -> None:
    err = raises(ParseError, [OK, text], index=1, path=path, vocab=VOCAB)
    assert "at character" in str(err) or text == ""


def test_sexpr_string_tokens_need_vocab() -> None:
    raises(TokenError, [OK, "(1 (2 a) (2 b))"], index=1, path="root.0", match="vocabulary",
           vocab_size=5)


def test_unknown_token_without_unk() -> None:
    raises(TokenError, ["(1 (2 a) (2 zz))"], index=0, path="root.1", vocab=VOCAB)


def test_cycle_parent_array() -> None:
    err = raises(CycleError, [OKPA, ParentArray(np.array([-1, 0, 3, 2]))], index=1)
    assert err.path in (2, 3)


def test_cycle_edge_list_dag() -> None:
    edges = np.array([[0, 1], [0, 2], [1, 3], [2, 3], [3, 4], [4, 1]])
    err = raises(CycleError, [OKPA, EdgeList(5, edges)], index=1)
    assert err.path in (1, 3, 4)


def test_self_loop_is_a_cycle() -> None:
    err = raises(CycleError, [ParentArray(np.array([-1, 1]))], index=0)
    assert err.path == 1


def test_cycle_nested_list_and_objects() -> None:
    loop: list = ["a"]
    loop.append(loop)
    raises(CycleError, [("a", "b"), loop], index=1, path="root.1", vocab=VOCAB)

    class Obj:
        def __init__(self) -> None:
            self.children: list = []

    a, b = Obj(), Obj()
    a.children = [b]
    b.children = [a]
    raises(CycleError, [Node((Node(word=1),)), a], index=1, path="root.0")


def test_cycle_ast() -> None:
    tree = ast.parse("x = 1")
    tree.body[0].value = tree  # type: ignore[attr-defined]
    raises(CycleError, [tree], index=0)


def test_two_roots_and_no_root() -> None:
    raises(RootError, [OKPA, ParentArray(np.array([-1, 0, -1]))], index=1, path=2)
    raises(CycleError, [ParentArray(np.array([1, 0]))], index=0)
    raises(RootError, [EdgeList(3, np.array([[0, 1]]))], index=0, path=2)


def test_out_of_range_indices() -> None:
    raises(NodeIndexError, [OKPA, ParentArray(np.array([-1, 0, 7]))], index=1, path=2)
    raises(NodeIndexError, [ParentArray(np.array([-1, -2]))], index=0, path=1)
    raises(NodeIndexError, [OKPA, EdgeList(2, np.array([[0, 5]]))], index=1, path=0)
    raises(NodeIndexError, [ChildTable(np.array([[1, 9], [-1, -1]]))], index=0, path=0)
    raises(NodeIndexError, [ChildTable(np.array([[-1, 1], [-1, -1]]))], index=0, path=0,
           match="pad")
    # unsigned values that would wrap to -1 when cast stay out of range
    raises(NodeIndexError, [ParentArray(np.array([2**64 - 1, 0], dtype=np.uint64))], index=0)


def test_wrong_arity() -> None:
    raises(ArityError, [OK, ("a", "b", "c")], index=1, path="root", arity=2, vocab=VOCAB)
    raises(ArityError, [OK, (("a",), "b")], index=1, path="root.0", arity=2, vocab=VOCAB)
    raises(ArityError, [ParentArray(np.array([-1, 0, 0, 1]))], index=0, path=1, arity=2)
    linearize([OK, ("a", "b")], arity=2, vocab=VOCAB)  # fine


def test_token_ids_out_of_range() -> None:
    raises(TokenError, [OK, (1, 7)], index=1, path="root.1", vocab_size=5, vocab=VOCAB)
    raises(TokenError, [(1, -3)], index=0, path="root.1")
    raises(TokenError, [ParentArray(np.array([-1, 0]), words=[-1, -7])], index=0, path=1)
    raises(TokenError, [Sequence([1, 2, 9])], index=0, path=2, vocab_size=5)
    raises(UnsupportedInputError, [(1, 2.5)], index=0, path="root.1")


def test_leaf_without_token_when_batch_has_tokens() -> None:
    raises(TokenError, [ParentArray(np.array([-1, 0, 0]), words=[-1, 3, -1])], index=0, path=2,
           match="leaf")


def test_int32_overflow(monkeypatch: pytest.MonkeyPatch) -> None:
    raises(IndexOverflowError, [(1, 2**40)], index=0, path="root.1")
    monkeypatch.setattr(assemble_module, "MAX_INDEX", 5)
    raises(IndexOverflowError, [("a", "b"), ("a", "b")], index=None, vocab=VOCAB)
    monkeypatch.setattr(assemble_module, "MAX_TABLE_ENTRIES", 2)
    with pytest.raises(IndexOverflowError):
        linearize([ParentArray(np.array([-1, 0, 0]))], cache=False)


def test_mixed_tokens_and_features() -> None:
    feats = np.zeros((3, 4))
    raises(MixedInputError, [Sequence([1, 2]), Sequence(feats)], index=1)
    raises(MixedInputError, [ParentArray(np.array([-1, 0])), ("a", "b")], index=1, vocab=VOCAB)
    raises(MixedInputError, [Sequence([1, "a"])], index=0, vocab=VOCAB)


def test_bad_parent_in_a_mixed_batch() -> None:
    raises(NodeIndexError, [EdgeList(2, [[0, 1]]), ParentArray(np.array([-1, -2]))], index=1,
           path=1)


def test_feature_dims() -> None:
    raises(FeatureError, [Sequence(np.zeros((3, 4))), Sequence(np.zeros((2, 5)))], index=1)
    raises(FeatureError, [Sequence(np.zeros((3, 4)))], index=0, feature_dim=8)
    raises(FeatureError, [Grid(2, 2, features=np.zeros((3, 4)))], index=0)
    raises(FeatureError, [ParentArray(np.array([-1, 0]), features=[["x", "y"], [1, 2]])],
           index=0)
    raises(FeatureError, [("a", "b")], index=0, feature_dim=3, vocab=VOCAB)


def test_unsupported_inputs() -> None:
    err = raises(UnsupportedInputError, [np.array([-1, 0])], index=0, match="ambiguous")
    assert isinstance(err, TypeError)
    raises(UnsupportedInputError, [OK, 3.5], index=1)
    raises(UnsupportedInputError, [OK, {"a": 1}], index=1)
    raises(UnsupportedInputError, [("a", None)], index=0, path="root.1", vocab=VOCAB)
    raises(UnsupportedInputError, [ParentArray(np.array([-1.0, 0.0]))], index=0)
    raises(UnsupportedInputError, [EdgeList(3, np.array([[0, 1, 2]]))], index=0)


def test_empty_structures() -> None:
    raises(EmptyBatchError, [OK, ()], index=1, path="root")
    raises(EmptyBatchError, [OK, (("a",), [])], index=1, path="root.1", vocab=VOCAB)
    raises(EmptyBatchError, [ParentArray(np.array([], dtype=np.int64))], index=0)
    raises(EmptyBatchError, [Sequence([])], index=0)
    raises(EmptyBatchError, [EdgeList(0, [])], index=0)
    raises(EmptyBatchError, [Grid(0, 3)], index=0)


def test_bad_labels() -> None:
    raises(TokenError, [Node((Node(word=1),), label="x")], index=0, path="root")
    raises(TokenError, [ParentArray(np.array([-1, 0]), words=[-1, 1], labels=[0, -4])],
           index=0, path=1)


def test_bad_arity_argument() -> None:
    with pytest.raises(ValueError, match="arity"):
        linearize([OK], arity=0, cache=False)


def test_wrapper_vocab_overrides_call_vocab() -> None:
    batch = linearize([Tree(("a", "b"), vocab={"a": 4, "b": 5}), SExpr("(1 (2 a) (2 b))",
                                                                      vocab=VOCAB)])
    assert sorted(batch.word_ids.tolist()) == [-1, -1, 0, 1, 4, 5]
