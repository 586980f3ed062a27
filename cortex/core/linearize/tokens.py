"""Token and per-node attribute conversion shared by the input-form readers.

Pipeline position: used by ``nested``, ``sexpr`` and ``arrays`` to turn the user's tokens
(strings through a vocabulary, or integer ids) into int64 arrays. A vocabulary is any object
with ``vocab[token] -> int`` raising ``KeyError`` for unknown tokens (``cortex.data.Vocabulary``
maps unknown tokens to its unknown id instead); range checks happen later, batch-wide.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .errors import TokenError, UnsupportedInputError

NO_TOKEN = -1


def resolve_words(
    words: list[Any], vocab: Any, where: Callable[[int], Any], index: int
) -> np.ndarray | None:
    """``words``: per node, ``-1`` / an int id / a str token. Returns int64 ids or None if none."""
    has_str = False
    for w in words:
        if type(w) is str:
            has_str = True
            break
    if has_str:
        if vocab is None:
            i = next(i for i, w in enumerate(words) if type(w) is str)
            raise TokenError(no_vocabulary(words[i]), input_index=index, path=where(i))
        words = lookup(vocab, words, where, index)
    try:
        arr = np.array(words, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        for i, w in enumerate(words):
            if not isinstance(w, (int, np.integer)) or not -(2**63) <= int(w) < 2**63:
                raise TokenError(f"token id {w!r} is not a valid integer id",
                                 input_index=index, path=where(i)) from None
        raise
    if not arr.size or bool(np.all(arr == NO_TOKEN)):
        return None
    return arr


def no_vocabulary(token: str) -> str:
    """The message for a string token met without a vocabulary (with the ways out)."""
    text = (f"string token {token!r} needs a vocabulary: pass vocab= to the call "
            "(exe(structures, vocab=...)), to linearize() or to the input's wrapper")
    if token.strip().lstrip("+-").isdigit():
        return (f"{text}. A word written as text (in an s-expression, or a str leaf) is a "
                "string even when it looks like a number: to give integer token ids, write the "
                "tree as nested tuples of ints, e.g. ((1, 2), 3), or use "
                "ParentArray(parents, words=[...])")
    return f"{text}, or give integer ids"


def lookup(vocab: Any, words: list[Any], where: Callable[[int], Any], index: int) -> list[Any]:
    """Map the str entries of ``words`` through ``vocab`` (other entries pass through).

    Uses ``vocab.ids(list_of_str)`` when the vocabulary has it (one C-level loop), else
    ``vocab[token]`` per token."""
    strs = [i for i, w in enumerate(words) if type(w) is str]
    toks = [words[i] for i in strs]
    bulk = getattr(vocab, "ids", None)
    try:
        ids = bulk(toks) if bulk is not None else list(map(vocab.__getitem__, toks))
    except KeyError:
        for i in strs:
            try:
                vocab[words[i]]
            except KeyError:
                raise TokenError(f"token {words[i]!r} is not in the vocabulary",
                                 input_index=index, path=where(i)) from None
        raise
    out = list(words)
    for i, v in zip(strs, ids):
        out[i] = v
    return out


def as_array(a: Any, what: str, index: int) -> np.ndarray:
    """``np.asarray(a)``, with NumPy's refusals (ragged nesting, objects it cannot convert)
    reported as an :class:`UnsupportedInputError` naming the field and the input."""
    try:
        return np.asarray(a)
    except (TypeError, ValueError, OverflowError) as exc:
        raise UnsupportedInputError(f"{what} is not an array of numbers: {exc}",
                                    input_index=index) from None


def int_array(a: Any, what: str, index: int, ndim: int) -> np.ndarray:
    """An integer array of ``ndim`` dims, as given (no lossy cast); TokenError-free checks."""
    arr = as_array(a, what, index)
    if arr.ndim != ndim or (arr.size and arr.dtype.kind not in "iu"):
        raise UnsupportedInputError(
            f"{what} must be a {ndim}-D array of integers, got dtype {arr.dtype} "
            f"with shape {arr.shape}", input_index=index)
    return arr


def to_int64(arr: np.ndarray, upper: int) -> np.ndarray:
    """Cast to int64 after making sure unsigned values cannot wrap (values >= upper are kept
    as ``upper`` so the caller's range check still fails on them)."""
    if arr.dtype.kind == "u" and arr.size and arr.max() >= upper:
        arr = np.minimum(arr, upper).astype(np.int64)
    return arr.astype(np.int64, copy=False)
