"""Reader for PTB/SST tree files: one s-expression per line.

Pipeline position: user code reads a file into a list of ``SExpr`` structures that
``linearize`` (or a compiled model's call) accepts directly. Every line is parsed while reading,
so a malformed line fails here with the file name and line number; the parse is memoized on
the ``SExpr`` (and a vocabulary-free structural parse is redone once a vocabulary is given).
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from ..core.linearize import SExpr, StructureError, read_part


class _Recorder:
    """A stand-in vocabulary that records the words it is asked for (id 0 for all)."""

    def __init__(self) -> None:
        self.words: list[str] = []

    def __getitem__(self, word: str) -> int:
        self.words.append(word)
        return 0


def sexpr_words(text: str) -> list[str]:
    """The words of one s-expression, left to right (e.g. to build a vocabulary)."""
    rec = _Recorder()
    read_part(SExpr(text), rec)
    return rec.words


def _lines(source: Any) -> tuple[str, Iterable[str]]:
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as f:
            return os.fspath(source), f.read().splitlines()
    return getattr(source, "name", "<lines>"), source


def read_ptb(source: str | os.PathLike | Iterable[str], *, vocab: Any = None,
             label_vocab: Any = None) -> list[SExpr]:
    """Trees of a PTB/SST file (a path, or an iterable of lines); blank lines are skipped.

    ``vocab`` maps words to ids (``cortex.data.Vocabulary``); without it the words must be
    mapped later (``linearize(trees, vocab=...)``). ``label_vocab`` maps non-integer labels.
    Raises the linearizer's ``ParseError`` / ``TokenError`` naming ``file:line``.
    """
    name, lines = _lines(source)
    trees: list[SExpr] = []
    for lineno, line in enumerate(lines, start=1):
        if not isinstance(line, str):
            raise TypeError(f"{name}:{lineno}: expected a line of text, got "
                            f"{type(line).__name__}")
        text = line.strip()
        if not text:
            continue
        tree = SExpr(text, vocab=vocab, label_vocab=label_vocab)
        try:
            read_part(tree, vocab if vocab is not None else _Recorder(), len(trees))
        except StructureError as e:
            raise type(e)(f"{name}:{lineno}: {e.detail}", input_index=len(trees),
                          path=e.path) from None
        trees.append(tree)
    return trees
