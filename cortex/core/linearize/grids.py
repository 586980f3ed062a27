"""The fused path for batches of DAG-RNN grids that carry feature vectors.

Pipeline position: ``linearize`` tries :func:`grid_batch` before it keys a batch for its cache
or reads inputs one by one. A batch of grids is mostly data: everything in its
:class:`LinearizedBatch` but the features -- level offsets, children, roots, node inputs, the
output row of every cell -- depends only on the grids' shapes. That *layout* is built once per
tuple of shapes by the general path (``assemble``, so it is that path's batch by construction)
and kept in the linearizer's grid cache; a call then only scatters each grid's feature array
into its output rows, converting to the requested dtype on the way: one pass over the data, no
per-input Part, no batch-cache key (keying copies and hashes every feature byte, which costs
more than this whole path).

Safety: the path takes a batch only when every input is a plain :class:`~.forms.Grid` (int
``rows``/``cols`` >= 1, no ``words``, a real floating-point NumPy ``features`` array of shape
``[rows, cols, F]`` or ``[rows * cols, F]``, one ``F`` for the batch, ``feature_dim`` when
given) and the model reads no tokens; on anything else, or any error while building a layout,
it returns ``None`` and the general path runs and raises its documented error. Grids are
trusted structures (our own edges), so their layout needs no check beyond the model's arity,
which ``assemble`` applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import cache, forms
from .arrays import grid_structure
from .assemble import Origin, assemble
from .errors import StructureError
from .limits import check_size
from .parts import GridKeys, Part
from .structure import LinearizedBatch


@dataclass(frozen=True)
class GridLayout:
    """Everything a batch of grids of these shapes has in common, its arrays read-only."""

    batch: LinearizedBatch  # the structure-only batch (no features)
    origin: Origin
    rows: tuple[np.ndarray, ...]  # per input: the output row of each of its cells (row-major)
    nbytes: int


def _shape(x: Any, feature_dim: int | None) -> tuple[int, int, int] | None:
    """``(rows, cols, F)`` of a plain feature grid, or None when the general path must read it."""
    if type(x) is not forms.Grid or x.words is not None:
        return None
    f, r, c = x.features, x.rows, x.cols
    if type(f) is not np.ndarray or f.dtype.kind != "f" or type(r) is not int or type(c) is not int:
        return None
    if f.ndim == 3:
        ok = f.shape[0] == r and f.shape[1] == c
    else:
        ok = f.ndim == 2 and f.shape[0] == r * c
    d = f.shape[-1]
    if not ok or r < 1 or c < 1 or (feature_dim is not None and d != feature_dim):
        return None
    return r, c, d


def grid_batch(items: list[Any], arity: int | None, feature_dim: int | None,
               dtype: np.dtype) -> LinearizedBatch | None:
    """The batch of ``items`` with ``dtype`` features, when they are all plain feature grids
    (module docstring); None otherwise."""
    shapes = []
    for x in items:
        s = _shape(x, feature_dim)
        if s is None:
            return None
        shapes.append(s)
    d = shapes[0][2]
    if any(s[2] != d for s in shapes):
        return None
    n = sum(r * c for r, c, _ in shapes)
    try:
        check_size(n, 2 * n, n * d)
    except StructureError:
        return None  # the general path names the input over the limits
    layout = grid_layout(tuple((r, c) for r, c, _ in shapes), arity)
    if layout is None:
        return None
    out = np.empty((n, d), dtype)
    for x, rows in zip(items, layout.rows):
        f = x.features
        out[rows] = f.reshape(len(rows), d) if f.ndim == 3 else f
    out.setflags(write=False)
    b = layout.batch
    return LinearizedBatch._trusted(
        num_nodes=b.num_nodes, level_offsets=b.level_offsets, child_offsets=b.child_offsets,
        child_ids=b.child_ids, child_table=b.child_table, roots=b.roots,
        node_input=b.node_input, word_ids=None, features=out, origin=layout.origin, labels=None)


def grid_layout(shapes: tuple[tuple[int, int], ...], arity: int | None) -> GridLayout | None:
    """The layout of a batch of grids of ``shapes`` (cached by shapes and arity), or None when
    the general path must report an error (e.g. ``arity`` that a grid's cells do not have)."""
    first = shapes[0]
    key = ("batch", arity, (first, len(shapes)) if shapes.count(first) == len(shapes) else shapes)
    got = cache.get_grid(key)
    if got is not None:
        return got
    parts = []
    for r, c in shapes:
        ep, ec, height = grid_structure(r, c)
        parts.append(Part(r * c, None, (ep, ec), None, None, None, GridKeys(c), trusted=True,
                          height=height))
    try:
        batch = assemble(parts, arity=arity, vocab_size=None, feature_dim=None)
    except StructureError:
        return None
    origin = batch.origin
    new_id = origin.new_ids()
    new_id.setflags(write=False)
    starts = np.cumsum([0] + [r * c for r, c in shapes])
    rows = tuple(new_id[a:b] for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()))
    size = cache.nbytes(batch) + new_id.nbytes + 64 * len(shapes)
    layout = GridLayout(batch, origin, rows, size)
    cache.put_grid(key, layout, size)
    return layout
