"""Vocabulary: ids, the unknown token, build / save / load, and use as the linearizer's vocab."""

from __future__ import annotations

from pathlib import Path

import pytest

from cortex.data import UNK, Vocabulary, linearize


def test_ids_and_unknown() -> None:
    v = Vocabulary(["the", "cat", "the"])
    assert len(v) == 3 and v.tokens == (UNK, "the", "cat")
    assert v["cat"] == 2 and v["dog"] == v.unk_id == 0
    assert "cat" in v and "dog" not in v
    assert v.encode(["the", "dog"]).tolist() == [1, 0]
    assert v.decode([2, 1]) == ["cat", "the"]


def test_without_unknown_raises_key_error() -> None:
    v = Vocabulary(["a"], unk=None)
    assert v["a"] == 0
    with pytest.raises(KeyError):
        v["b"]


def test_build_orders_by_frequency_then_alphabet() -> None:
    v = Vocabulary.build([["b", "a", "b"], ["c", "a", "b"]], min_count=2)
    assert v.tokens == (UNK, "b", "a")
    assert len(Vocabulary.build([["x", "y", "z"]], max_size=2)) == 2


def test_save_load_round_trip(tmp_path: Path) -> None:
    v = Vocabulary.build([["x", "y", "y"]])
    v.save(tmp_path / "vocab.txt")
    w = Vocabulary.load(tmp_path / "vocab.txt")
    assert w.tokens == v.tokens and w.fingerprint == v.fingerprint


@pytest.mark.parametrize("bad", ["", "two words", None, 3])
def test_rejects_bad_tokens(bad: object) -> None:
    with pytest.raises(ValueError):
        Vocabulary([bad])  # type: ignore[list-item]


def test_fingerprint_makes_strings_cacheable() -> None:
    v = Vocabulary(["a", "b"])
    text = "(1 (2 a) (2 b))"
    assert linearize([text], vocab=v) is linearize([text], vocab=v)
    other = Vocabulary(["b", "a"])
    assert other.fingerprint != v.fingerprint
    assert linearize([text], vocab=other).word_ids.tolist() == [2, 1, -1]
