"""The PTB/SST reader: one tree per line, errors naming file and line, words for vocabularies."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortex.data import ParseError, SExpr, TokenError, Vocabulary, linearize, read_ptb, sexpr_words


def test_read_file(tmp_path: Path) -> None:
    path = tmp_path / "trees.txt"
    path.write_text("(3 (2 It) (3 works))\n\n(1 (2 Not) (1 (2 so) (1 good)))\n")
    trees = read_ptb(path)
    assert [type(t) for t in trees] == [SExpr, SExpr]
    vocab = Vocabulary.build(sexpr_words(t.text) for t in trees)
    batch = linearize(trees, vocab=vocab, arity=2, vocab_size=len(vocab))
    batch.validate()
    assert batch.batch_size == 2 and batch.num_leaves == 5
    assert sorted(batch.labels.tolist()) == [1, 1, 1, 2, 2, 2, 3, 3]


def test_read_with_vocab_and_lines() -> None:
    vocab = Vocabulary(["It", "works"])
    trees = read_ptb(["(3 (2 It) (3 works))", "(2 (2 It) (2 unknown))"], vocab=vocab)
    batch = linearize(trees)
    assert batch.word_ids.tolist()[:4] == [1, 2, 1, 0]


def test_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("(3 (2 It) (3 works))\n(2 (2 oops)\n")
    with pytest.raises(ParseError, match=r"bad.txt:2:") as info:
        read_ptb(path)
    assert info.value.input_index == 1
    with pytest.raises(TokenError, match=r"<lines>:1:"):
        read_ptb(["(1 (2 a) (2 b))"], vocab={"a": 1})


def test_non_numeric_labels_need_a_label_vocab() -> None:
    with pytest.raises(ParseError, match="label_vocab"):
        read_ptb(["(S (NP it) (VP works))"])
    labels = Vocabulary(["S", "NP", "VP"], unk=None)
    trees = read_ptb(["(S (NP it) (VP works))"], label_vocab=labels)
    batch = linearize(trees, vocab=Vocabulary(["it", "works"]))
    assert batch.labels.tolist() == [1, 2, 0]


def test_sexpr_words_in_order() -> None:
    assert sexpr_words("(3 (2 It) (4 (2 's) (3 fine)))") == ["It", "'s", "fine"]


def test_non_text_lines() -> None:
    with pytest.raises(TypeError):
        read_ptb([b"(1 a)"])  # type: ignore[list-item]
