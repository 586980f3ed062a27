"""Readers for array forms: parent arrays, child tables, edge lists, sequences, grids.

Pipeline position: ``linearize`` calls :func:`array_part` for each wrapped array input. These
readers only convert and reshape (a handful of NumPy calls per input, no per-node Python);
index ranges, roots and cycles are checked once for the whole batch in ``assemble``. Each
reader checks the input's size against ``limits`` first, from its length or its declared
counts (``Grid.rows``/``cols``, ``EdgeList.num_nodes``), before it converts or builds anything.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cache, forms
from .errors import (EmptyBatchError, FeatureError, MixedInputError, NodeIndexError,
                     TokenError, UnsupportedInputError)
from .limits import check_size
from .parts import GridKeys, Part, id_key
from .tokens import as_array, int_array, resolve_words, to_int64

_INT64_MAX = 2**63 - 1


def _length(x: Any) -> int:
    """``len(x)`` of a sized field before any conversion (0 when it has none)."""
    try:
        return len(x)
    except TypeError:
        return 0


def _values(x: Any) -> int:
    """How many values an array field holds when it is already an array (else 0)."""
    return x.size if isinstance(x, np.ndarray) else 0


def _positive_count(what: str, v: Any, index: int) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise EmptyBatchError(f"{what} must be a positive int, got {v!r}", input_index=index)
    return int(v)


def _words(words: Any, n: int, vocab: Any, index: int, what: str = "words") -> np.ndarray | None:
    if words is None:
        return None
    if isinstance(words, (list, tuple)) and any(type(w) is str for w in words):
        if len(words) != n:
            raise TokenError(f"{what} has {len(words)} entries for {n} nodes", input_index=index)
        return resolve_words(list(words), vocab, id_key, index)
    arr = as_array(words, what, index)
    if arr.dtype.kind in "US" or arr.dtype == object:
        lst = arr.reshape(-1).tolist()
        if len(lst) != n:
            raise TokenError(f"{what} has {len(lst)} entries for {n} nodes", input_index=index)
        return resolve_words(lst, vocab, id_key, index)
    if arr.size and arr.dtype.kind not in "iu":
        raise TokenError(f"{what} must be integer ids or strings, got dtype {arr.dtype}",
                         input_index=index)
    arr = arr.reshape(-1)
    if len(arr) != n:
        raise TokenError(f"{what} has {len(arr)} entries for {n} nodes", input_index=index)
    return to_int64(arr, _INT64_MAX)


def _features(features: Any, n: int, index: int) -> np.ndarray | None:
    if features is None:
        return None
    try:
        arr = np.asarray(features, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise FeatureError(f"features are not numeric: {exc}", input_index=index) from None
    if arr.ndim == 3:  # a grid's [rows, cols, F]
        arr = arr.reshape(arr.shape[0] * arr.shape[1], arr.shape[2])
    if arr.ndim != 2:
        raise FeatureError(f"features must be [num_nodes, F], got shape {arr.shape}",
                           input_index=index)
    if arr.shape[0] != n:
        raise FeatureError(f"features have {arr.shape[0]} rows for {n} nodes",
                           input_index=index)
    return arr


def _labels(labels: Any, n: int, index: int) -> np.ndarray | None:
    if labels is None:
        return None
    arr = int_array(labels, "labels", index, 1)
    if len(arr) != n:
        raise TokenError(f"labels has {len(arr)} entries for {n} nodes", input_index=index)
    return to_int64(arr, _INT64_MAX)


def _parent_array(x: forms.ParentArray, vocab: Any, index: int) -> Part:
    par = x.parents
    n = _length(par)
    check_size(n, n, _values(x.features), what="this parent array", input_index=index)
    if type(par) is np.ndarray and par.ndim == 1 and par.dtype.kind == "i" \
            and x.words is None and x.features is None and x.labels is None and n:
        return Part(n, par, None, None, None, None, id_key)  # the common, fast case
    par = int_array(par, "parents", index, 1)
    n = len(par)
    if n == 0:
        raise EmptyBatchError("parent array has no node", input_index=index)
    return Part(n, to_int64(par, n), None, _words(x.words, n, vocab, index),
                _features(x.features, n, index), _labels(x.labels, n, index), id_key)


def _child_table(x: forms.ChildTable, vocab: Any, index: int) -> Part:
    check_size(_length(x.table), _values(x.table), _values(x.features),
               what="this child table", input_index=index)
    tbl = int_array(x.table, "child table", index, 2)
    n = tbl.shape[0]
    check_size(n, tbl.size, what="this child table", input_index=index)
    if n == 0:
        raise EmptyBatchError("child table has no node", input_index=index)
    tbl = to_int64(tbl, n)
    bad = (tbl < -1) | (tbl >= n)
    if bad.any():
        v, j = np.argwhere(bad)[0]
        raise NodeIndexError(f"child {j} = {tbl[v, j]} is outside [0, {n}) (-1 pads rows)",
                             input_index=index, path=int(v))
    if tbl.shape[1] > 1:
        gap = (tbl[:, 1:] >= 0) & (tbl[:, :-1] < 0)
        if gap.any():
            v = int(np.argwhere(gap)[0][0])
            raise NodeIndexError("a -1 pad precedes a child: pad rows on the right only",
                                 input_index=index, path=v)
    mask = tbl >= 0
    ep = np.nonzero(mask)[0].astype(np.int64)
    ec = tbl[mask]
    return Part(n, None, (ep, ec), _words(x.words, n, vocab, index),
                _features(x.features, n, index), _labels(x.labels, n, index), id_key)


def _edge_list(x: forms.EdgeList, vocab: Any, index: int) -> Part:
    n = _positive_count("num_nodes", x.num_nodes, index)
    check_size(n, _length(x.edges), _values(x.features), what="this edge list",
               input_index=index)
    e = as_array(x.edges, "edges", index)
    if e.size == 0:
        e = np.zeros((0, 2), dtype=np.int64)
    e = int_array(e, "edges", index, 2)
    if e.shape[1] != 2:
        raise UnsupportedInputError(f"edges must be (parent, child) pairs, shape [E, 2]; got "
                                    f"{e.shape}", input_index=index)
    e = to_int64(e, n)
    return Part(n, None, (e[:, 0].copy(), e[:, 1].copy()), _words(x.words, n, vocab, index),
                _features(x.features, n, index), _labels(x.labels, n, index), id_key)


def _chain(n: int) -> np.ndarray:
    par = np.arange(1, n + 1, dtype=np.int64)
    par[-1] = -1
    return par


def _sequence(x: forms.Sequence, vocab: Any, index: int) -> Part:
    items = x.items
    check_size(_length(items), _length(items), _values(items), what="this sequence",
               input_index=index)
    if isinstance(items, (list, tuple)) and items:
        kinds = {type(t) for t in items}
        if str in kinds and len(kinds) > 1:
            raise MixedInputError("a sequence mixes string tokens with other items",
                                  input_index=index)
    arr = items if isinstance(items, np.ndarray) else None
    if arr is None:
        try:
            arr = np.asarray(items)
        except (TypeError, ValueError, OverflowError) as exc:
            raise FeatureError(f"sequence items are ragged: {exc}", input_index=index) from None
    if arr.ndim == 0 or len(arr) == 0:
        raise EmptyBatchError("empty sequence", input_index=index)
    n = len(arr)
    if arr.ndim == 2 and arr.dtype.kind in "fiu":  # feature vectors [T, F]
        return Part(n, _chain(n), None, None, _features(arr, n, index), None, id_key,
                    trusted=True, height=np.arange(n, dtype=np.int64))
    if arr.ndim != 1:
        raise FeatureError(f"a sequence is 1-D tokens or 2-D float features [T, F]; got shape "
                           f"{arr.shape} dtype {arr.dtype}", input_index=index)
    if arr.dtype.kind == "f":
        raise TokenError("1-D float items: tokens are ints or strings (features are [T, F])",
                         input_index=index)
    words = _words(arr, n, vocab, index, "sequence tokens")
    if words is None or bool(np.any(words < 0)):
        bad = 0 if words is None else int(np.flatnonzero(words < 0)[0])
        raise TokenError("sequence tokens must be >= 0", input_index=index, path=bad)
    return Part(n, _chain(n), None, words, None, None, id_key, trusted=True,
                height=np.arange(n, dtype=np.int64))


def _grid(x: forms.Grid, vocab: Any, index: int) -> Part:
    rows = _positive_count("grid rows", x.rows, index)
    cols = _positive_count("grid cols", x.cols, index)
    n = rows * cols  # Python ints: a declared 2^62 x 4 is reported, never allocated
    check_size(n, 2 * n, _values(x.features), what=f"this {rows} x {cols} grid",
               input_index=index)
    ep, ec, height = grid_structure(rows, cols)
    return Part(n, None, (ep, ec), _words(x.words, n, vocab, index),
                _features(x.features, n, index), None, GridKeys(cols), trusted=True,
                height=height)


def grid_structure(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A grid's edges (each cell's up, then left predecessor) and heights, read-only: the same
    for every grid of this shape, so they are kept in the linearizer's grid cache (bounded in
    bytes, cleared by ``clear_cache``, bypassed while caching is off)."""
    key = (rows, cols)
    got = cache.get_grid(key)
    if got is None:
        got = _build_grid(rows, cols)
        cache.put_grid(key, got)
    return got


def _build_grid(rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = np.arange(rows * cols, dtype=np.int64)
    up = ids[cols:]
    left = ids[ids % cols != 0]
    ep = np.concatenate([up, left])
    ec = np.concatenate([up - cols, left - 1])
    which = np.concatenate([np.zeros(len(up), np.int8), np.ones(len(left), np.int8)])
    order = np.lexsort((which, ep))
    out = (ep[order], ec[order], ids // cols + ids % cols)
    for a in out:
        a.setflags(write=False)
    return out


_READERS = {
    forms.ParentArray: _parent_array,
    forms.ChildTable: _child_table,
    forms.EdgeList: _edge_list,
    forms.Sequence: _sequence,
    forms.Grid: _grid,
}


def array_part(x: Any, vocab: Any, index: int) -> Part:
    return _READERS[type(x)](x, vocab if x.vocab is None else x.vocab, index)
