"""Fuzzing: malformed text and structures give a valid batch or a documented error, nothing else.

"Documented error" = a ``StructureError`` (a ValueError subclass). Any other exception, a hang,
or a returned batch that fails ``validate()`` is a bug: native code would trust that batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex.core.linearize import (ChildTable, EdgeList, Node, ParentArray, Sequence, SExpr,
                                   StructureError, linearize)
from cortex.data import Vocabulary, read_ptb

FUZZ = settings(max_examples=80, deadline=None)
VOCAB = Vocabulary(["a", "b", "It", "fine"])


def check(items: Any, **kw: Any) -> None:
    try:
        batch = linearize(items, cache=False, **kw)
    except StructureError as e:
        assert str(e)
        return
    batch.validate()
    if "vocab_size" in kw and batch.word_ids is not None:
        assert int(batch.word_ids.max()) < kw["vocab_size"]
    if "arity" in kw:
        ar = batch.arity()
        assert set(ar[batch.num_leaves:].tolist()) <= {kw["arity"]}


sexpr_text = st.text(alphabet="()  ab12It\n\t", max_size=40)
sexpr_like = st.lists(st.sampled_from(["(", ")", " ", "2", "a", "(2 a)", "(3 ", "b", "))"]),
                      max_size=15).map("".join)


@FUZZ
@given(st.one_of(sexpr_text, sexpr_like))
def test_sexpr_text(text: str) -> None:
    check([text], vocab=VOCAB)
    check([SExpr(text, vocab=VOCAB), "(2 a)"], arity=2)


@FUZZ
@given(st.lists(st.one_of(sexpr_text, sexpr_like), max_size=5))
def test_ptb_reader(lines: list[str]) -> None:
    try:
        trees = read_ptb(lines, vocab=VOCAB)
    except StructureError:
        return
    if trees:
        check(trees, vocab_size=len(VOCAB))


@FUZZ
@given(st.lists(st.integers(-3, 12), min_size=0, max_size=12),
       st.sampled_from([np.int64, np.int32, np.uint8, np.int8]))
def test_parent_arrays(parents: list[int], dtype: Any) -> None:
    arr = np.array(parents).astype(dtype) if parents else np.array([], dtype=dtype)
    check([ParentArray(arr)])
    check([ParentArray(arr)], arity=2)


@FUZZ
@given(st.integers(-1, 8), st.lists(st.tuples(st.integers(-2, 9), st.integers(-2, 9)),
                                    max_size=14))
def test_edge_lists(n: int, edges: list[tuple[int, int]]) -> None:
    check([EdgeList(n, np.array(edges, dtype=np.int64).reshape(-1, 2))])


@FUZZ
@given(st.lists(st.lists(st.integers(-2, 7), min_size=0, max_size=3), min_size=0, max_size=7))
def test_child_tables(rows: list[list[int]]) -> None:
    width = max([len(r) for r in rows] + [0])
    table = np.array([r + [-1] * (width - len(r)) for r in rows], dtype=np.int64)
    check([ChildTable(table.reshape(len(rows), width))])


leaf = st.one_of(st.integers(-2, 6), st.sampled_from(["a", "b", "zz"]), st.none(),
                 st.floats(allow_nan=False), st.just(()))
nested = st.recursive(leaf, lambda kids: st.one_of(st.tuples(kids, kids), st.lists(kids,
                                                                                  max_size=3)),
                      max_leaves=12)


@FUZZ
@given(st.lists(nested, max_size=4))
def test_nested_python(items: list[Any]) -> None:
    check(items, vocab={"a": 0, "b": 1}, vocab_size=5)
    check(items, vocab=VOCAB, arity=2)


@FUZZ
@given(st.lists(st.one_of(st.lists(st.integers(-2, 9), max_size=5),
                          st.lists(st.text(alphabet="ab", max_size=2), max_size=4)), max_size=4))
def test_sequences(seqs: list[Any]) -> None:
    check([Sequence(s) for s in seqs], vocab=VOCAB, vocab_size=len(VOCAB))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=10), st.data())
def test_object_graphs(links: list[tuple[int, int]], data: Any) -> None:
    """Objects with .children wired arbitrarily (shared nodes, cycles)."""

    class Obj:
        def __init__(self, word: Any) -> None:
            self.children: list = []
            self.word = word
            self.label = None

    nodes = [Obj(data.draw(st.one_of(st.integers(-1, 4), st.none()))) for _ in range(6)]
    for p, c in links:
        nodes[p].children.append(nodes[c])
    check([nodes[0]], vocab_size=5)
    check([Node((nodes[0], nodes[1]))], arity=2)


@FUZZ
@given(st.lists(st.one_of(sexpr_text, sexpr_like, st.just("(3 (2 It) (4 (2 a) (1 fine)))")),
                min_size=1, max_size=4))
def test_vectorized_sst_reader_agrees_with_general_parser(texts: list[str]) -> None:
    """The vectorized SST path either declines or gives exactly the general parser's parts."""
    from cortex.core.linearize.sexpr import _parse_general
    from cortex.core.linearize.sexpr_batch import parse_sst_batch

    try:
        parts = parse_sst_batch(texts, VOCAB)
    except StructureError:
        return
    if parts is None:
        return
    for text, part in zip(texts, parts):
        ref = _parse_general(text, VOCAB, None, 0)
        assert part.parent.tolist() == ref.parent.tolist()
        assert part.words.tolist() == ref.words.tolist()
        assert part.labels.tolist() == ref.labels.tolist()
        assert [part.keys(v) for v in range(part.n)] == [ref.keys(v) for v in range(ref.n)]
