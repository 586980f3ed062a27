"""The bundled examples and the Python AST reader."""

from __future__ import annotations

import ast

import pytest

from cortex.data import (AST_NODE_TYPES, AST_VOCAB_SIZE, Node, ParseError, ast_tree,
                         example_snippets, example_texts, example_vocab, examples, linearize,
                         Vocabulary)


def test_bundled_sentences_are_binary_sst_trees() -> None:
    trees = examples()
    vocab = example_vocab()
    assert 20 <= len(trees) <= 30
    batch = linearize(trees, arity=2, vocab_size=len(vocab))
    batch.validate()
    assert set(batch.labels.tolist()) <= {0, 1, 2, 3, 4}
    assert set(batch.labels.tolist()) >= {0, 4}  # both extremes occur
    assert (batch.word_ids[: batch.num_leaves] > 0).all()  # every word known
    assert example_texts()[0] == "It works ."


def test_examples_with_another_vocab() -> None:
    batch = linearize(examples(vocab=Vocabulary(["It"])))
    assert batch.batch_size == len(examples())
    assert set(batch.word_ids[: batch.num_leaves].tolist()) == {0, 1}  # <unk> and "It"


def test_snippets_and_ast_trees() -> None:
    snippets = example_snippets()
    assert len(snippets) >= 2
    for name, src in snippets.items():
        tree = ast_tree(src)
        assert isinstance(tree, Node)
        batch = linearize(tree, vocab_size=AST_VOCAB_SIZE)
        batch.validate()
        raw = linearize(ast.parse(src))
        assert batch.word_ids.tolist() == raw.word_ids.tolist(), name
        assert batch.child_ids.tolist() == raw.child_ids.tolist(), name
        assert batch.word_ids[int(batch.roots[0])] == AST_NODE_TYPES.index("Module") + 1


def test_ast_tree_errors_and_unknown_types() -> None:
    with pytest.raises(ParseError):
        ast_tree("def broken(:")
    with pytest.raises(TypeError):
        ast_tree(42)  # type: ignore[arg-type]

    class Future(ast.AST):
        _fields = ()

    assert ast_tree(Future()).word == 0


def test_deep_source_no_recursion_error() -> None:
    src = "x = " + " + ".join(["1"] * 300)
    tree = ast_tree(src)
    assert linearize(tree).num_levels > 300
