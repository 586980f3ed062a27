"""Vocabulary: token <-> id, with an unknown token.

Pipeline position: built from a corpus (``Vocabulary.build``) or loaded from a file, handed to
``cortex.data.read_ptb`` / ``linearize(vocab=...)`` to turn words into embedding rows. It is
immutable, and its ``fingerprint`` (a hash of the token list) lets the linearizer's cache key
strings safely by content.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from itertools import repeat
from typing import Iterable

import numpy as np

UNK = "<unk>"


class Vocabulary:
    """Tokens numbered 0..len-1. With ``unk`` (default ``"<unk>"``, id 0) unknown tokens map
    to ``unk_id``; with ``unk=None`` looking up an unknown token raises ``KeyError``."""

    __slots__ = ("_tokens", "_ids", "unk", "unk_id", "fingerprint")

    def __init__(self, tokens: Iterable[str], *, unk: str | None = UNK):
        seen: dict[str, int] = {}
        ordered: list[str] = []
        for t in ([unk] if unk is not None else []) + list(tokens):
            if not isinstance(t, str) or not t or any(c.isspace() for c in t):
                raise ValueError(f"vocabulary tokens are non-empty strings without whitespace, "
                                 f"got {t!r}")
            if t not in seen:
                seen[t] = len(ordered)
                ordered.append(t)
        self._tokens = tuple(ordered)
        self._ids = seen
        self.unk = unk
        self.unk_id = 0 if unk is not None else None
        digest = hashlib.sha256("\n".join(ordered).encode() + b"\0" + str(unk).encode())
        self.fingerprint = digest.hexdigest()[:32]

    @classmethod
    def build(cls, sentences: Iterable[Iterable[str]], *, min_count: int = 1,
              max_size: int | None = None, unk: str | None = UNK) -> Vocabulary:
        """Most frequent tokens first (ties alphabetical), those seen ``min_count`` times."""
        counts: Counter[str] = Counter()
        for sentence in sentences:
            counts.update(sentence)
        ranked = sorted((t for t, c in counts.items() if c >= min_count),
                        key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max(0, max_size - (unk is not None))]
        return cls(ranked, unk=unk)

    @classmethod
    def load(cls, path: str | os.PathLike, *, unk: str | None = UNK) -> Vocabulary:
        """One token per line, in id order (the unknown token, if any, on the first line)."""
        with open(path, encoding="utf-8") as f:
            tokens = [line.rstrip("\n") for line in f if line.strip()]
        if unk is not None and tokens and tokens[0] == unk:
            tokens = tokens[1:]
        return cls(tokens, unk=unk)

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(t + "\n" for t in self._tokens))

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __getitem__(self, token: str) -> int:
        i = self._ids.get(token)
        if i is None:
            if self.unk_id is None:
                raise KeyError(token)
            return self.unk_id
        return i

    def ids(self, tokens: list[str]) -> list[int]:
        """Ids of many tokens at once (the linearizer's bulk lookup; KeyError without unk)."""
        if self.unk_id is None:
            return list(map(self._ids.__getitem__, tokens))
        return list(map(self._ids.get, tokens, repeat(self.unk_id, len(tokens))))

    def token(self, i: int) -> str:
        return self._tokens[i]

    @property
    def tokens(self) -> tuple[str, ...]:
        return self._tokens

    def encode(self, tokens: Iterable[str]) -> np.ndarray:
        """Ids of ``tokens`` as an int64 array."""
        return np.array([self[t] for t in tokens], dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self._tokens[int(i)] for i in ids]

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} tokens, unk={self.unk!r})"
