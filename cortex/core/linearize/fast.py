"""The fused path for batches of plain tree arrays (parent arrays, child tables).

Pipeline position: ``linearize`` tries :func:`parent_array_batch` / :func:`child_table_batch`
before reading inputs one by one. When every input of the batch is a plain integer parent array
(or every input a plain child table) carrying no words, features or labels, the whole batch goes
from the user's arrays to the :class:`LinearizedBatch` in one pass of a fixed number of NumPy
calls over the concatenated arrays (plus O(log height) for the heights): no per-input
:class:`~.parts.Part`, no per-input NumPy calls.

Safety: these functions decide only whether the batch is valid. They check every fact the
general path (``assemble``) checks -- parent / child indices in range, exactly one root per
input, no cycle, no shared child (a child table of a DAG), the requested arity -- and return
``None`` on the first doubt; ``linearize`` then runs the general path, which finds the same
problem and raises the documented error naming the input and node. So error types and messages
are those of the general path by construction, and the fast path never trusts an input it has
not checked.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import numpy as np

from ..structure import INDEX_DTYPE, LinearizedBatch
from . import forms
from . import assemble as _asm
from .assemble import Origin
from .parts import id_key

_PAD = np.uint64(2**64 - 1)  # -1 viewed as uint64

def _plain(x: Any, kind: type, arr: Any, ndim: int) -> bool:
    return (type(x) is kind and type(arr) is np.ndarray and arr.ndim == ndim
            and arr.dtype.kind == "i" and len(arr) > 0 and x.words is None
            and x.features is None and x.labels is None)


def parent_array_batch(items: list[Any], arity: Any) -> LinearizedBatch | None:
    """The batch, when ``items`` are all plain parent arrays and valid; None otherwise."""
    pars = []
    for x in items:
        p = x.parents if type(x) is forms.ParentArray else None
        if not _plain(x, forms.ParentArray, p, 1):
            return None
        pars.append(p)
    sizes = [len(p) for p in pars]
    starts = _starts(sizes)
    if starts is None:
        return None
    par = np.concatenate(pars) if len(pars) > 1 else pars[0]
    if par.dtype != np.intp:
        par = par.astype(np.intp)
    # every parent in [-1, size of its input): as unsigned, par + 1 <= size (-2 and below wrap)
    p1 = par + 1
    if any(m > s for m, s in zip(np.maximum.reduceat(p1.view(np.uint64), starts[:-1]).tolist(),
                                 sizes)):
        return None
    return _forest(par, sizes, starts, arity)


def child_table_batch(items: list[Any], arity: Any) -> LinearizedBatch | None:
    """The batch, when ``items`` are all plain child tables of the same width that are trees
    with each row's children in increasing id order (the common case), and valid; None
    otherwise (the general path handles padding gaps, other orders, DAGs and every error)."""
    tables = []
    for x in items:
        t = x.table if type(x) is forms.ChildTable else None
        if not _plain(x, forms.ChildTable, t, 2):
            return None
        tables.append(t)
    k = tables[0].shape[1]
    if k == 0 or any(t.shape[1] != k for t in tables):
        return None
    sizes = [len(t) for t in tables]
    starts = _starts(sizes)
    if starts is None:
        return None
    table = np.concatenate(tables) if len(tables) > 1 else tables[0]
    if table.dtype != np.intp:
        table = table.astype(np.intp)
    # every entry in [-1, size of its input): as unsigned, entry + 1 <= size
    t1 = (table + 1).view(np.uint64)
    if any(m > s for m, s in zip(np.maximum.reduceat(t1.max(axis=1), starts[:-1]).tolist(),
                                 sizes)):
        return None
    if k > 1:
        # a child must exceed the entry before it, and no pad may precede a child: as
        # unsigned, a -1 pad is the largest value, so a child after a pad fails too
        u = table.view(np.uint64)
        later = u[:, 1:]
        if ((later <= u[:, :-1]) & (later != _PAD)).any():
            return None
    mask = table >= 0
    rows, cols = mask.nonzero()
    n = int(starts[-1])
    off = starts[:-1].repeat(sizes)
    orow = off[rows]
    kids = table[mask] + orow  # global ids, like rows
    par = np.empty(n, np.intp)
    par.fill(-1)
    par[kids] = rows - orow
    if np.count_nonzero(par >= 0) != len(kids):
        return None  # a child listed twice: a DAG
    return _forest(par, sizes, starts, arity, off, (rows, cols, kids))


def _starts(sizes: list[int]) -> np.ndarray | None:
    starts = [0, *accumulate(sizes)]
    if starts[-1] > _asm.MAX_INDEX:
        return None
    return np.array(starts, np.intp)


def _forest(par: np.ndarray, sizes: list[int], starts: np.ndarray, arity: Any,
            off: np.ndarray | None = None,
            table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
            ) -> LinearizedBatch | None:
    """Level numbering of a batch of parent arrays already known to be in range: ``par``
    concatenates the inputs' local parent ids (-1 = root). ``table``: the batch's child-table
    entries as global (row, column, child) in row-major order, columns left-packed, when the
    input was a child table (then no sort is needed to order each node's children)."""
    nb = len(sizes)
    n = len(par)
    has_p = par >= 0
    ec = has_p.nonzero()[0]  # child nodes, increasing
    if n - len(ec) != nb:
        return None  # some input has several roots (or none: a cycle)
    if off is None:
        off = starts[:-1].repeat(sizes)
    jump = np.empty(n + 1, np.intp)  # global parent; roots and the sentinel point at n
    jump.fill(n)
    ep = (par + off)[ec]
    jump[ec] = ep
    height = _heights(jump, max(sizes))
    if height is None:
        return None  # a cycle
    hmax = int(height.max())
    # radix sort on a narrow copy of the key is several times faster than a merge sort
    key = height.astype(np.uint8 if hmax < 256 else np.uint16 if hmax < 65536 else np.intp)
    order = key.argsort(kind="stable")
    new_id = np.empty(n, np.intp)
    new_id[order] = np.arange(n)
    level_offsets = np.zeros(hmax + 2, INDEX_DTYPE)
    np.add.accumulate(np.bincount(key, minlength=hmax + 1).astype(INDEX_DTYPE),
                      out=level_offsets[1:])
    num_leaves = int(level_offsets[1])

    if table is None:
        # edges are in child id order, so a stable sort by new parent keeps it within a row
        new_parent = new_id[ep]
        eorder = (new_parent.astype(np.uint16) if n < 65536 else new_parent).argsort(
            kind="stable")
        rows = new_parent[eorder]
        child_ids = new_id[ec[eorder]].astype(INDEX_DTYPE)
        arity_new = np.bincount(rows, minlength=n).astype(INDEX_DTYPE)
        child_offsets = np.zeros(n + 1, INDEX_DTYPE)
        np.add.accumulate(arity_new, out=child_offsets[1:])
        max_arity = int(arity_new.max()) if len(rows) else 0
        if n * max_arity > _asm.MAX_TABLE_ENTRIES:
            return None
        out = np.empty((n, max_arity), INDEX_DTYPE)
        out.fill(-1)
        if len(rows):  # flat scatter: row * width + position among the row's children
            pos = np.arange(len(rows), dtype=INDEX_DTYPE) - child_offsets[rows]
            out.ravel()[rows * max_arity + pos] = child_ids
    else:
        # the user's rows, renumbered and moved: row-major order of the result is the CSR
        trows, tcols, tkids = table
        max_arity = int(tcols.max()) + 1 if len(tcols) else 0
        if n * max_arity > _asm.MAX_TABLE_ENTRIES:
            return None
        out = np.empty((n, max_arity), INDEX_DTYPE)
        out.fill(-1)
        flat = out.ravel()
        new_rows = new_id[trows]
        flat[new_rows * max_arity + tcols] = new_id[tkids]
        child_ids = flat[flat >= 0]
        arity_new = np.bincount(new_rows, minlength=n).astype(INDEX_DTYPE)
        child_offsets = np.zeros(n + 1, INDEX_DTYPE)
        np.add.accumulate(arity_new, out=child_offsets[1:])
    if arity is not None and (arity_new[num_leaves:] != arity).any():
        return None
    node_input = np.arange(nb, dtype=INDEX_DTYPE).repeat(sizes)[order]
    roots = new_id[(~has_p).nonzero()[0]].astype(INDEX_DTYPE)
    for a in (level_offsets, child_offsets, child_ids, out, roots, node_input):
        a.setflags(write=False)
    return LinearizedBatch(
        num_nodes=n, level_offsets=level_offsets, child_offsets=child_offsets,
        child_ids=child_ids, child_table=out, roots=roots, node_input=node_input,
        word_ids=None, features=None,
        origin=Origin(order, node_input, [id_key] * nb, starts), labels=None)


def _heights(jump: np.ndarray, max_size: int) -> np.ndarray | None:
    """Heights by pointer jumping (see ``assemble._tree_heights``); ``jump`` [n + 1] holds each
    node's parent, the sentinel ``n`` for roots and for itself. None when a node never reaches
    the sentinel: a cycle."""
    n = len(jump) - 1
    h = np.zeros(n + 1, np.intp)
    steps = (max_size - 1).bit_length()
    if steps:
        h[jump] = 1  # step 0: a node with a child has height >= 1
        h[n] = 0
        jump = jump[jump]
    push = np.empty(n + 1, np.intp)
    for k in range(1, steps):
        np.add(h, 1 << k, out=push)
        np.maximum.at(h, jump, push)
        jump = jump[jump]
        # every depth < 2^(k+1): all heights are known (checked from k = 3: parse trees)
        if k >= 3 and np.minimum.reduce(jump) == n:
            break
    else:
        if (jump != n).any():
            return None
    return h[:n]
