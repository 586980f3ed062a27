"""The linearizer: user structures -> :class:`~cortex.core.linearize.structure.LinearizedBatch`.

Pipeline position: runs on the host on every call of a compiled model, before any native code;
it is the safety boundary (native code trusts every index it produces) and it is on the
latency path. One module per job:

* ``forms``    -- typed wrappers for ambiguous inputs and the rules for raw Python objects;
* ``nested``   -- tuples/lists, objects with ``children``, ``ast`` trees (one iterative pass);
* ``sexpr``    -- PTB/SST s-expressions (``sexpr_batch``: the vectorized plain-SST path);
* ``arrays``   -- parent arrays, child tables, edge lists, sequences, grids (vectorized);
* ``fast``     -- the fused whole-batch paths for plain parent arrays / child tables and
                for nested tuples/lists of int tokens;
* ``grids``    -- the fused path for feature grids: a cached layout per tuple of shapes;
* ``assemble`` -- batch-wide validation and level numbering in NumPy;
* ``cache``    -- LRU caches for structures seen before, bounded in entries and bytes;
* ``limits``   -- the int32 index range and the memory budget every input is checked against
                from its sizes, before anything is allocated for it;
* ``errors``   -- the ``ValueError`` subclasses, each naming the input index and the node.

Usage::

    from cortex.core.linearize import linearize, ParentArray
    batch = linearize(["(3 (2 It) (4 fine))", ParentArray([-1, 0, 0], words=[-1, 4, 7])],
                      arity=2, vocab=vocab)
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, int_arg
from .structure import LinearizedBatch
from . import cache as _cache
from . import fast as _fast
from . import grids as _grids
from .arrays import array_part
from .assemble import MAX_INDEX, MAX_TABLE_ENTRIES, Origin, assemble
from .ast_types import AST_NODE_TYPES, AST_TYPE_IDS, AST_UNKNOWN, AST_VOCAB_SIZE, ast_type_id
from .cache import cache_info, clear_cache, set_cache
from .errors import (ArityError, CycleError, EmptyBatchError, FeatureError, IndexOverflowError,
                     MemoryLimitError, MixedInputError, NodeIndexError, ParseError, RootError, StructureError,
                     TokenError, UnsupportedInputError)
from .forms import ChildTable, EdgeList, Grid, Node, ParentArray, Sequence, SExpr, Tree
from .limits import limits, set_limits
from .nested import flatten_nested
from .parts import Part
from .sexpr import parse_sexpr
from .sexpr_batch import parse_sst_batch

__all__ = [
    "linearize", "read_part", "LinearizedBatch", "Origin",
    "Node", "Tree", "SExpr", "ParentArray", "ChildTable", "EdgeList", "Sequence", "Grid",
    "StructureError", "EmptyBatchError", "ParseError", "CycleError", "RootError",
    "NodeIndexError", "ArityError", "TokenError", "FeatureError", "MixedInputError",
    "IndexOverflowError", "MemoryLimitError", "UnsupportedInputError",
    "set_cache", "clear_cache", "cache_info", "set_limits", "limits", "MAX_INDEX",
    "MAX_TABLE_ENTRIES",
    "AST_NODE_TYPES", "AST_TYPE_IDS", "AST_UNKNOWN", "AST_VOCAB_SIZE", "ast_type_id",
]

_ARRAY_FORMS = (ParentArray, ChildTable, EdgeList, Sequence, Grid)
_FLOAT64 = np.dtype(np.float64)


def _feature_dtype(v: Any) -> np.dtype:
    """``linearize``'s ``feature_dtype``: float64 or float32 (any spelling NumPy reads)."""
    try:
        got = np.dtype(v)
    except (TypeError, ValueError):
        got = None
    if got is None or got not in (np.float64, np.float32):
        raise ArgumentTypeError(f"linearize: feature_dtype must be float64 or float32, got {v!r}")
    return got


def _sexpr_part(text: str, vocab: Any, label_vocab: Any, index: int, key: Any) -> Part:
    if key is not None:
        part = _cache.STATE.sexprs.get(key)
        if part is not None:
            return part
    part = parse_sexpr(text, vocab, label_vocab, index)
    if key is not None:
        _cache.STATE.sexprs.put(key, part, _cache.key_size(key) + _cache.nbytes(part))
    return part


def read_part(x: Any, vocab: Any = None, index: int = 0, key: Any = None) -> Part:
    """Read one input (any supported form) into a :class:`Part` (no batch-wide checks yet)."""
    t = type(x)
    if t in _ARRAY_FORMS:
        return array_part(x, vocab, index)
    if t is str:
        return _sexpr_part(x, vocab, None, index, key)
    if t is SExpr:
        v = vocab if x.vocab is None else x.vocab
        memo = x._parsed
        if memo and memo[0] is v:
            return memo[1]
        part = parse_sexpr(x.text, v, x.label_vocab, index)
        memo[:] = [v, part]
        return part
    if t is Tree:
        return flatten_nested(x.root, vocab if x.vocab is None else x.vocab, index)
    if isinstance(x, np.ndarray):
        raise UnsupportedInputError(
            "a bare NumPy array is ambiguous: wrap it in ParentArray, ChildTable, EdgeList, "
            "Sequence or Grid", input_index=index)
    if t is tuple or t is list or t is int or isinstance(x, ast.AST) or hasattr(x, "children"):
        return flatten_nested(x, vocab, index)
    raise UnsupportedInputError(
        f"cannot read a {t.__name__} as a structure: give nested tuples/lists, an s-expression "
        "string, an ast tree, an object with .children or a cortex.data wrapper "
        "(ParentArray, ChildTable, EdgeList, Sequence, Grid, SExpr, Tree)", input_index=index)


def _read_sst_strings(items: list[Any], vocab: Any, keys: list[Any]) -> list[Part | None]:
    """Parts for the plain-SST strings of a batch, read together (cache first, then one
    vectorized pass); None where an item is something else or needs the general parser."""
    parts: list[Part | None] = [None] * len(items)
    if vocab is None:
        return parts
    pending = []
    for i, x in enumerate(items):
        if type(x) is str:
            if keys[i] is not None:
                parts[i] = _cache.STATE.sexprs.get(keys[i])
            if parts[i] is None:
                pending.append(i)
    if pending:
        try:
            got = parse_sst_batch([items[i] for i in pending], vocab)
        except StructureError:
            got = None  # e.g. an unknown word: the per-item reader names the node
        if got is not None:
            for i, part in zip(pending, got):
                parts[i] = part
                if keys[i] is not None:
                    _cache.STATE.sexprs.put(keys[i], part,
                                            _cache.key_size(keys[i]) + _cache.nbytes(part))
    return parts


def linearize(structures: Any, *, arity: int | None = None, vocab_size: int | None = None,
              feature_dim: int | None = None, vocab: Any = None, cache: bool = True,
              feature_dtype: Any = None) -> LinearizedBatch:
    """Linearize one structure, or a ``list`` of them (a batch), into a LinearizedBatch.

    ``arity=k`` requires exactly k children on every internal node (fixed-arity models);
    ``vocab_size`` requires token ids in ``[0, vocab_size)``; ``feature_dim`` requires feature
    vectors of that size; ``vocab`` maps string tokens to ids (``vocab[token] -> int``).
    ``cache=False`` bypasses the caches for this call. ``feature_dtype``: ``float64`` (the
    default) or ``float32``, the dtype of the batch's features (an executable asks for its
    own, so its call converts them once, while it puts them in output order). Raises a
    :class:`StructureError` (a ``ValueError``) naming the input index and node for any input
    that is not safe.
    """
    for name, v in (("arity", arity), ("vocab_size", vocab_size), ("feature_dim", feature_dim)):
        if v is not None and (type(v) is not int or v < 1):
            int_arg("linearize", name, v)  # raises unless a NumPy int >= 1
    fdtype = _FLOAT64 if feature_dtype is None else _feature_dtype(feature_dtype)
    items = structures if type(structures) is list else [structures]
    if not items:
        raise EmptyBatchError("empty batch: give at least one structure")
    t0 = type(items[0])
    if t0 is Grid and vocab_size is None:
        # feature grids: a cached layout per tuple of shapes and one scatter of the features
        # (None: not plain feature grids, or an error the general path below reports)
        out = _grids.grid_batch(items, arity, feature_dim, fdtype)
        if out is not None:
            return out
    if (t0 is tuple or t0 is list or t0 is int) and feature_dim is None and (
            arity is None or (isinstance(arity, (int, np.integer)) and arity >= 1)) and (
            vocab_size is None or isinstance(vocab_size, (int, np.integer))):
        # nested tuples of int tokens: the whole batch in one marshal walk and NumPy, or
        # from the batch cache by that walk's bytes. None: anything else, or an error the
        # general path below reports.
        out = _fast.nested_batch(items, arity, vocab_size, cache and _cache.STATE.enabled)
        if out is not None:
            return out
    keys: list[Any] = [None] * len(items)
    bkey = None
    if cache and _cache.STATE.enabled:
        keys = _cache.input_keys(items, vocab)
        if None not in keys:
            bkey = (tuple(keys), arity, vocab_size, feature_dim, fdtype.char)
            hit = _cache.sealed_batch(bkey)
            if hit is not None:
                return hit
    out = None
    if (t0 is ParentArray or t0 is ChildTable) and feature_dim is None and (
            arity is None or (isinstance(arity, (int, np.integer)) and arity >= 1)):
        # plain tree arrays: the fused path (None: not plain, or invalid -> the general path
        # below raises the documented error)
        fused = _fast.parent_array_batch if t0 is ParentArray else _fast.child_table_batch
        out = fused(items, arity)
    if out is None:
        parts = _read_sst_strings(items, vocab, keys)
        parts = [p if p is not None else read_part(x, vocab, i, keys[i])
                 for i, (x, p) in enumerate(zip(items, parts))]
        out = assemble(parts, arity=arity, vocab_size=vocab_size, feature_dim=feature_dim,
                       feature_dtype=fdtype)
    if bkey is not None:
        size = _cache.key_size(bkey)
        if size <= _cache.MAX_KEY_BYTES:
            _cache.STATE.batches.put(bkey, out, size + _cache.nbytes(out))
    return out
