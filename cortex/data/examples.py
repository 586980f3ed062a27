"""The small bundled data set: SST-style sentences with parse trees, and Python snippets.

Pipeline position: demos, docs and tests read these instead of downloading anything. The
sentences (``bundled/sentences.txt``) were written for this project: short English sentences
with binary parse trees in SST format, sentiment labels 0 (very negative) .. 4 (very positive)
on every node. ``bundled/snippets/*.py`` are tiny Python programs for the AST reader.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from ..core.linearize import SExpr
from .ptb import read_ptb, sexpr_words
from .vocab import Vocabulary


def _bundled(*parts: str) -> Any:
    return resources.files("cortex.data").joinpath("bundled", *parts)


@lru_cache(maxsize=1)
def _sentence_lines() -> tuple[str, ...]:
    text = _bundled("sentences.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


@lru_cache(maxsize=1)
def example_vocab() -> Vocabulary:
    """A vocabulary of every word of the bundled sentences (most frequent first; ``<unk>``=0)."""
    return Vocabulary.build(sexpr_words(line) for line in _sentence_lines())


def examples(vocab: Any = None) -> list[SExpr]:
    """The bundled sentences as ``SExpr`` trees, words mapped by ``vocab`` (default: the
    bundled :func:`example_vocab`)."""
    return read_ptb(_sentence_lines(), vocab=example_vocab() if vocab is None else vocab)


def example_texts() -> list[str]:
    """The bundled sentences as plain text (the words joined by spaces)."""
    return [" ".join(sexpr_words(line)) for line in _sentence_lines()]


def example_snippets() -> dict[str, str]:
    """The bundled Python snippets, name -> source text."""
    folder = _bundled("snippets")
    return {p.name: p.read_text(encoding="utf-8")
            for p in sorted(folder.iterdir(), key=lambda p: p.name) if p.name.endswith(".py")}
