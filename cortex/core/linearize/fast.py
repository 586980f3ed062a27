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

import marshal
from itertools import accumulate
from typing import Any

import numpy as np

from .structure import INDEX_DTYPE, LinearizedBatch
from . import forms
from . import assemble as _asm
from . import cache as _cache
from .assemble import Origin
from .limits import check_size
from .parts import PathKeys, id_key


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
    joined = _joined(pars)
    if joined is None:
        return None
    sizes, starts, par = joined
    # every parent in [-1, size of its input): as unsigned, par + 1 <= size (-2 and below wrap)
    p1 = par + 1
    if any(m > s for m, s in zip(np.maximum.reduceat(p1.view(np.uint64), starts[:-1]).tolist(),
                                 sizes)):
        return None
    n = len(par)
    root_pre = (par < 0).nonzero()[0]
    if len(root_pre) != len(sizes):
        return None  # some input has several roots (or none: a cycle)
    jump = np.empty(n + 1, np.intp)  # global parent; roots and the sentinel point at n
    np.add(par, starts[:-1].repeat(sizes), out=jump[:n])
    jump[root_pre] = n
    jump[n] = n
    return _forest(jump, root_pre, sizes, starts, arity)


def child_table_batch(items: list[Any], arity: Any) -> LinearizedBatch | None:
    """The batch, when ``items`` are all plain child tables of the same width that are trees
    with children packed on the left of each row, and valid; None otherwise (the general path
    handles padding gaps, DAGs and every error)."""
    tables = []
    for x in items:
        t = x.table if type(x) is forms.ChildTable else None
        if not _plain(x, forms.ChildTable, t, 2):
            return None
        tables.append(t)
    k = tables[0].shape[1]
    if k == 0 or any(t.shape[1] != k for t in tables):
        return None
    joined = _joined(tables)
    if joined is None:
        return None
    sizes, starts, table = joined
    flat = table.ravel()  # 1-D work: 2-D broadcasting and reductions cost more
    # every entry in [-1, size of its input): as unsigned, entry + 1 <= size
    t1 = (flat + 1).view(np.uint64)
    if any(m > s for m, s in zip(np.maximum.reduceat(t1, starts[:-1] * k).tolist(), sizes)):
        return None
    mask = t1 != 0
    if k > 1:
        mask2 = mask.reshape(-1, k)
        if (mask2[:, 1:] > mask2[:, :-1]).any():
            return None  # a -1 pad before a child
    n = int(starts[-1])
    # global ids; -1 pads become the sentinel n
    gflat = np.where(mask, flat + starts[:-1].repeat([s * k for s in sizes]), n)
    jump = np.empty(n + 1, np.intp)  # global parent; roots and the sentinel point at n
    jump.fill(n)
    jump[gflat] = np.arange(n).repeat(k)  # pads write to jump[n], reset below
    jump[n] = n
    root_pre = (jump[:n] == n).nonzero()[0]
    if len(root_pre) != len(sizes) or n - len(root_pre) != np.count_nonzero(mask):
        return None  # a wrong number of roots, or a child listed twice (a DAG)
    gtable = gflat.reshape(n, k)
    return _forest(jump, root_pre, sizes, starts, arity, gtable)


# marshal format 2 (no back-references, no short forms): a tuple / list is its type byte and
# an int32 length, an int in int32 range its type byte and the int32 value. A batch of nested
# tuples/lists of such ints is therefore a sequence of 5-byte records in pre-order.
_RECORD = np.dtype([("code", "u1"), ("val", "<i4")])
_BOX = bytes(1 if c in b"([" else 0 for c in range(256))  # type byte -> 1 for a container
_ONE = np.ones(1, np.intp)  # the root record of a one-structure batch
_ONE.setflags(write=False)
_NO_VOCAB = 1 << 63  # an unsigned bound every non-negative int64 token is below


# ---------------------------------------------------------------- compiled fixed-arity twin
# A backend that compiles code on the host may provide a native filler of the arrays below
# (``set_native_nested``): the llvm plugin does. It reads the same marshal records and writes
# the same batch as :func:`_fixed_arity_forest` (tests hold the two together); on anything it
# does not handle -- a record of another type, a wrong child count, a token out of range, a
# malformed stream -- it returns 0 and the NumPy path below runs (and, on an error, the general
# path names it), so it changes the speed of a call, never its result or its errors.
#
# Contract: ``fill(raw, r, k, vocab, nb, arena_address) -> L`` (int32 arguments but the bytes,
# ``vocab`` as uint32: a token t is valid when ``0 <= t < vocab``; the address of an int32
# arena). The arena starts with NATIVE_HEADER int32 element offsets, in NATIVE_FIELDS order,
# of arrays inside it; ``fill`` writes the output ones and may use the scratch ones as it likes.
# L >= 1 is the number of levels, 0 means "not handled".
NATIVE_FIELDS = (
    # outputs
    ("order", "n"),  # output row -> pre-order node id
    ("level_offsets", "n + 2"),  # L + 1 used
    ("child_offsets", "n + 1"),
    ("table", "n * k"),  # [n, k], -1 for leaves
    ("words", "n"),  # token, -1 for internal rows
    ("node_input", "n"),
    ("roots", "nb"),
    # scratch (pre-order node ids)
    ("height", "n"), ("word", "n"), ("input", "n"), ("children", "n * k"),
    ("stack_node", "n + 1"), ("stack_left", "n + 1"), ("stack_max", "n + 1"),
    ("root_pre", "nb"), ("count", "n + 1"), ("new_id", "n"),
)
NATIVE_HEADER = 32  # int32 slots before the first array (offsets, then padding)
_ROOT_PRE = [name for name, _ in NATIVE_FIELDS].index("root_pre")
_native_fill: Any = None


def set_native_nested(fill: Any) -> Any:
    """Install (or, with None, remove) the compiled filler of fixed-arity nested batches;
    returns the one installed before."""
    global _native_fill
    old, _native_fill = _native_fill, fill
    return old


def native_layout(n: int, k: int, nb: int) -> tuple[list[int], int]:
    """The element offsets of NATIVE_FIELDS in the arena and its total int32 length."""
    sizes = {"n": n, "n + 2": n + 2, "n + 1": n + 1, "n * k": n * k, "nb": nb}
    offsets, at = [], NATIVE_HEADER
    for _, size in NATIVE_FIELDS:
        offsets.append(at)
        at += sizes[size]
    return offsets, at


_layouts: dict[tuple[int, int, int], tuple[np.ndarray, int, tuple[int, ...]]] = {}


def _layout(n: int, k: int, nb: int) -> tuple[np.ndarray, int, tuple[int, ...]]:
    """``native_layout`` as (header array, total, offsets), kept for the shapes seen last."""
    got = _layouts.get((n, k, nb))
    if got is None:
        if len(_layouts) >= 256:
            _layouts.clear()
        offsets, total = native_layout(n, k, nb)
        got = _layouts[(n, k, nb)] = (np.array(offsets, INDEX_DTYPE), total, tuple(offsets))
    return got


def _native_batch(raw: bytes, r: int, k: int, vocab_size: Any) -> LinearizedBatch | None:
    n = r - 1
    nb = int.from_bytes(raw[1:5], "little", signed=True)
    if raw[0] not in b"([" or not 1 <= nb <= n or n * k > _asm.MAX_TABLE_ENTRIES:
        return None
    header, total, o = _layout(n, k, nb)
    arena = np.empty(total, INDEX_DTYPE)
    arena[:len(header)] = header
    vocab = 1 << 31 if vocab_size is None or vocab_size > 1 << 31 else max(int(vocab_size), 0)
    levels = _native_fill(raw, r, k, vocab, nb, arena.ctypes.data)
    if levels <= 0:
        return None
    arena.setflags(write=False)  # so every view below is read-only, as the NumPy path's
    o_order, o_lo, o_co, o_table, o_words, o_input, o_roots = o[:7]
    order = arena[o_order:o_order + n].astype(np.intp)
    level_offsets = arena[o_lo:o_lo + levels + 1]
    nl = int(level_offsets[1])
    width = k if nl < n else 0  # as the NumPy path: no columns for a batch of lone leaves
    table = arena[o_table:o_table + n * width].reshape(n, width)
    node_input = arena[o_input:o_input + n]
    o_root_pre = o[_ROOT_PRE]
    starts = np.empty(nb + 1, np.intp)
    starts[:-1] = arena[o_root_pre:o_root_pre + nb]
    starts[-1] = n
    return LinearizedBatch._trusted(
        num_nodes=n, level_offsets=level_offsets, child_offsets=arena[o_co:o_co + n + 1],
        child_ids=table[nl:].reshape(-1), child_table=table, roots=arena[o_roots:o_roots + nb],
        node_input=node_input, word_ids=arena[o_words:o_words + n], features=None,
        origin=Origin(order, node_input, _TableKeys(table, order, nl, starts), starts),
        labels=None)


def nested_batch(items: list[Any], arity: Any, vocab_size: Any,
                 cache: bool = False) -> LinearizedBatch | None:
    """The batch, when ``items`` are nested tuples/lists whose leaves are non-negative int
    tokens (below ``vocab_size`` when given), with ``arity`` children on every internal node
    when given; None otherwise (strings, other objects, errors: the general path).

    ``cache``: look the batch up in the batch cache first (and store it there), keyed by the
    marshal records below with ``arity`` and ``vocab_size``: the batch's whole content (every
    container's type and child count, every token), so a batch of the same trees, in the same
    tuples or lists, gets the same sealed, read-only batch without building it again; a
    changed token or node is another key.

    ``marshal.dumps(items, 2)`` walks the batch in C and accepts only the exact built-in types
    (a subclass -- a namedtuple, an IntEnum, bool -- is unmarshallable or has another record
    type), so a batch it writes as 5-byte records holds exactly what ``nested.flatten_nested``
    reads as tuples and int tokens, in the same pre-order. The records give every node's child
    count; the tree follows in NumPy: subtree ends (the first later record where the count of
    pending children drops below the node's), depths (the number of enclosing subtrees),
    parents (the last earlier node one level up). Cycles through lists and nests deeper than
    marshal's limit raise in marshal: the general path handles them.
    """
    try:
        raw = marshal.dumps(items, 2)
    except Exception:  # unmarshallable object, too deep (cycles), out of memory
        return None
    if len(raw) % 5:
        return None
    if not cache or len(raw) > _cache.MAX_KEY_BYTES:
        return _records_batch(raw, arity, vocab_size)
    key = ("nested", raw, arity, vocab_size)
    out = _cache.sealed_batch(key)
    if out is None:
        out = _records_batch(raw, arity, vocab_size)
        if out is not None:
            _cache.STATE.batches.put(key, out, _cache.key_size(key) + _cache.nbytes(out))
    return out


def _records_batch(raw: bytes, arity: Any, vocab_size: Any) -> LinearizedBatch | None:
    """:func:`nested_batch` from the batch's marshal records."""
    if _native_fill is not None and arity is not None and len(raw) > 5:
        out = _native_batch(raw, len(raw) // 5, int(arity), vocab_size)
        if out is not None:
            return out
    codes = raw[::5]  # the type byte of every record
    if codes.translate(None, b"([i"):
        return None  # a record of another type: str, float, bool, None, a big int...
    check_size(len(codes) - 1, len(codes) - 1)  # one record per node: before any array
    box = np.frombuffer(codes.translate(_BOX), np.bool_)  # containers
    val = np.frombuffer(raw, _RECORD)["val"].astype(np.intp)
    r = len(val)
    n = r - 1  # record 0 is the batch list itself: the parent of every root
    if n > _asm.MAX_INDEX:
        return None
    inner = box.nonzero()[0]  # container records (record 0 first)
    ai = val[inner]  # their child counts
    nb = int(ai[0])
    # an empty tuple/list, or the wrong child count (record 0, the batch list, aside)
    if arity is not None:
        # every non-root node is a child of a container: the counts sum to n - nb, so with
        # none above arity they are all arity exactly when that sum is arity * containers
        if len(ai) > 1 and (n - nb != arity * (len(ai) - 1)
                            or np.maximum.reduce(ai[1:]) > arity):
            return None
    elif not ai[ai.argmin()]:
        return None
    # tokens in range: as unsigned, a negative token is above any bound. One reduction over
    # every record (child counts are small) decides the common case; else the tokens alone.
    limit = _NO_VOCAB if vocab_size is None else vocab_size
    if np.maximum.reduce(val.view(np.uintp)) >= limit:
        tok = val[~box]
        if np.maximum.reduce(tok.view(np.uintp)) >= limit:
            return None  # the general path names the node and the token
    a = val * box  # children per record (tokens: none)
    # pending[j]: slots still to fill after record j (each record fills one and opens a_j;
    # the batch list's slot is not counted, so pending[r - 1] = 0)
    a -= 1
    a[0] += 1
    pending = np.add.accumulate(a)
    # subtree end of internal record p: the first j >= p with pending[j] = pending[p - 1] - 1
    # (pending drops by at most one per record, so "below" is first reached exactly there)
    wide = r + 1
    narrow = np.uint16 if r < 65536 else np.intp  # radix sorts for the small keys
    by_pending = pending.astype(narrow).argsort(kind="stable")
    skey = pending[by_pending]
    skey *= wide
    skey += by_pending
    before = pending[inner] - ai  # = pending[p - 1] - 1
    before *= wide
    before += inner
    end = by_pending[skey.searchsorted(before)]
    end1 = end + 1
    # depth: the number of internal records whose subtree (p, end] holds the record
    mark = np.zeros(r + 1, np.intp)
    mark[inner + 1] = 1
    mark -= np.bincount(end1, minlength=r + 1)
    depth = np.add.accumulate(mark)  # [r + 1]; depth[r] = 0 pads the reduction below
    # height of internal p: the deepest record of its subtree [p, end] minus its depth; one
    # reduceat over the (p, end + 1) pairs (each odd "segment" runs backwards: one element)
    spans = np.empty(2 * len(inner), np.intp)
    spans[0::2] = inner
    spans[1::2] = end1
    height = np.zeros(r, np.intp)
    deep = np.maximum.reduceat(depth, spans)[0::2]
    deep -= depth[inner]
    height[inner] = deep
    # the roots: the records at depth 1 (one structure: record 1)
    root_rec = _ONE if nb == 1 else (depth[:r] == 1).nonzero()[0]
    if arity is not None:
        return _fixed_arity_forest(val, inner, end, height, root_rec, arity)
    # parent: the last earlier record one level up (a later one at that depth would have
    # closed the parent's subtree first)
    by_depth = depth[:r].astype(narrow).argsort(kind="stable")
    dkey = depth[by_depth] * wide + by_depth
    below = np.arange(1, r)
    prec = by_depth[np.searchsorted(dkey, (depth[1:r] - 1) * wide + below) - 1]
    jump = np.empty(n + 1, np.intp)  # global parent (node = record - 1); roots -> n
    np.subtract(prec, 1, out=jump[:n])
    root_pre = root_rec - 1
    jump[root_pre] = n
    jump[n] = n
    starts = np.empty(len(root_pre) + 1, np.intp)
    starts[:-1] = root_pre
    starts[-1] = n
    sizes = np.diff(starts).tolist()
    # each input's nodes' local parents (-1 for its root), for the path keys of the origin
    local = jump[:n] - np.repeat(root_pre, sizes)
    local[root_pre] = -1
    bounds = starts.tolist()
    keys = [PathKeys(local[bounds[b]:bounds[b + 1]]) for b in range(len(sizes))]
    words = np.where(box[1:], -1, val[1:])
    return _forest(jump, root_pre, sizes, starts, arity, keys=keys, words=words,
                   height=height[1:])


def _fixed_arity_forest(val: np.ndarray, inner: np.ndarray, end: np.ndarray,
                        height: np.ndarray, root_rec: np.ndarray,
                        k: int) -> LinearizedBatch | None:
    """The batch of :func:`nested_batch` when every internal node has exactly ``k`` children:
    child j + 1 of a node is the record after child j's subtree, so the child table comes
    from the subtree ends in k - 1 gathers (no parents, no sort of the edges); internal rows
    are contiguous after the leaves, so the CSR is the table's internal rows."""
    r = len(val)
    n = r - 1
    nb = len(root_rec)
    if n * k > _asm.MAX_TABLE_ENTRIES:
        return None
    # level order: stable by height = (height, input, the input's pre-order)
    nar = np.uint8 if r < 256 else np.uint16 if r < 65536 else np.intp
    hn = height[1:]
    order = hn.astype(nar).argsort(kind="stable")
    new_id = np.empty(n, np.intp)
    new_id[order] = np.arange(n)
    counts = np.bincount(hn)  # one per level
    level_offsets = np.zeros(len(counts) + 1, INDEX_DTYPE)
    level_offsets[1:] = np.add.accumulate(counts)
    nl = int(level_offsets[1])
    width = k if nl < n else 0  # the table is as wide as the widest node: 0 for lone leaves
    table = np.empty((n, width), INDEX_DTYPE)
    table[:nl] = -1
    if width:
        # nxt[v]: the node after node v's subtree (node id = record - 1, so the record after
        # record p's subtree, end + 1, is node end; a leaf's is the next record, node v + 1)
        nxt = np.arange(r)
        nxt[inner[1:]] = end[1:]
        nxt = nxt[1:]
        # the internal nodes in output order; the first child of node v is node v + 1, each
        # next child the node after its elder sibling's subtree
        c = order[nl:] + 1
        table[nl:, 0] = new_id[c]
        for j in range(1, k):
            c = nxt[c]
            table[nl:, j] = new_id[c]
    child_offsets = np.zeros(n + 1, INDEX_DTYPE)
    child_offsets[nl + 1:] = np.arange(k, k * (n - nl) + 1, k, dtype=INDEX_DTYPE)
    if nb == 1:  # one structure: every node is input 0's, and its root is the last node
        node_input = np.zeros(n, INDEX_DTYPE)
        roots = np.array([n - 1], INDEX_DTYPE)
        starts = np.array([0, n], np.intp)
    else:
        root_pre = root_rec - 1
        node_input = root_pre.searchsorted(order, "right")  # inputs: roots up to the node
        node_input -= 1
        node_input = node_input.astype(INDEX_DTYPE)
        roots = new_id[root_pre].astype(INDEX_DTYPE)
        starts = np.empty(nb + 1, np.intp)
        starts[:-1] = root_pre
        starts[-1] = n
    words = val[1:].astype(INDEX_DTYPE)[order]
    words[nl:] = -1
    for a in (level_offsets, child_offsets, table, roots, node_input, words):
        a.setflags(write=False)
    child_ids = table[nl:].reshape(-1)  # a view of the read-only table: read-only too
    return LinearizedBatch._trusted(
        num_nodes=n, level_offsets=level_offsets, child_offsets=child_offsets,
        child_ids=child_ids, child_table=table, roots=roots, node_input=node_input,
        word_ids=words, features=None,
        origin=Origin(order, node_input, _TableKeys(table, order, nl, starts), starts),
        labels=None)


class _TableKeys:
    """The origin keys of a fixed-arity batch: ``keys[b]`` is input ``b``'s :class:`PathKeys`,
    built from the output child table on first use (only reading an origin key needs the
    parents)."""

    __slots__ = ("table", "order", "nl", "starts", "_local", "_keys")

    def __init__(self, table: np.ndarray, order: np.ndarray, nl: int,
                 starts: np.ndarray) -> None:
        self.table, self.order, self.nl, self.starts = table, order, nl, starts
        self._local: np.ndarray | None = None
        self._keys: dict[int, PathKeys] = {}

    def __getitem__(self, b: int) -> PathKeys:
        keys = self._keys.get(b)
        if keys is None:
            if self._local is None:
                order, starts = self.order, self.starts
                parent = np.full(len(order), -1, np.intp)  # in input pre-order ids
                k = self.table.shape[1]
                if k:
                    parent[order[self.table[self.nl:].ravel()]] = np.repeat(order[self.nl:], k)
                local = parent - np.repeat(starts[:-1], np.diff(starts))
                local[starts[:-1]] = -1
                self._local = local
            lo, hi = int(self.starts[b]), int(self.starts[b + 1])
            keys = self._keys[b] = PathKeys(self._local[lo:hi].tolist())
        return keys


def _joined(arrays: list[np.ndarray]) -> tuple[list[int], np.ndarray, np.ndarray] | None:
    """Each input's node count, the inputs' start offsets and their rows joined as ``intp``
    (None: the batch has too many nodes)."""
    sizes = [len(a) for a in arrays]
    starts = _starts(sizes)
    if starts is None:
        return None
    joined = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    return sizes, starts, joined if joined.dtype == np.intp else joined.astype(np.intp)


def _starts(sizes: list[int]) -> np.ndarray | None:
    starts = [0, *accumulate(sizes)]
    if starts[-1] > _asm.MAX_INDEX:
        return None
    check_size(starts[-1], starts[-1])  # trees: about one edge per node
    return np.array(starts, np.intp)


def _forest(jump: np.ndarray, root_pre: np.ndarray, sizes: list[int], starts: np.ndarray,
            arity: Any, table: np.ndarray | None = None, keys: list[Any] | None = None,
            words: np.ndarray | None = None,
            height: np.ndarray | None = None) -> LinearizedBatch | None:
    """Level numbering of a batch of trees already known to be in range with one root per
    input (if acyclic): ``jump`` [n + 1] is each node's global parent, ``n`` for the roots
    ``root_pre`` and for the sentinel itself. ``table``: the batch's child table in global ids,
    children packed on the left, pads = ``n``, when the input was a child table (its rows give
    each node's children in order); else each node's children are ordered by id. ``keys``:
    each input's key function (default: the node id); ``words``: [n] token ids (-1 = none) in
    global ids, already checked; ``height``: every node's height when the caller knows it."""
    nb = len(sizes)
    n = len(jump) - 1
    max_size = max(sizes)
    if height is None:
        height = _heights(jump, max_size)
        if height is None:
            return None  # a cycle
    # radix sort on a narrow copy of the key is several times faster than a merge sort;
    # heights are below the largest input's size, which picks the width without a max()
    hmax = max_size - 1 if max_size <= 65536 else int(height.max())
    key = height.astype(np.uint8 if hmax < 256 else np.uint16 if hmax < 65536 else np.intp)
    order = key.argsort(kind="stable")
    new_id = np.empty(n + 1, np.intp)  # new_id[n] = n: the sentinel stays last
    new_id[order] = np.arange(n)
    new_id[n] = n
    counts = np.bincount(key)  # one per level: its length is the number of levels
    level_offsets = np.zeros(len(counts) + 1, INDEX_DTYPE)
    np.add.accumulate(counts, out=level_offsets[1:], dtype=INDEX_DTYPE)
    num_leaves = int(level_offsets[1])

    if table is None:
        # every node keyed by its parent's new id (roots: n, last); a stable sort keeps each
        # parent's children in id order
        new_parent = new_id[jump[:n]]
        eorder = (new_parent.astype(np.uint16) if n < 65535 else new_parent).argsort(
            kind="stable")[:n - nb]
        rows = new_parent[eorder]
        child_ids = new_id[eorder].astype(INDEX_DTYPE)
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
        # the user's rows, renumbered and moved (pads, = n, map to -1): the row-major order of
        # the result is the CSR
        new_id[n] = -1
        out = new_id.astype(INDEX_DTYPE)[table]
        k = out.shape[1]
        if k:  # move whole rows as one k*4-byte item each: much cheaper than a 2-D gather
            out = out.view(np.dtype((np.void, 4 * k))).ravel()[order].view(INDEX_DTYPE)
            out = out.reshape(n, k)
        m = out >= 0
        max_arity = out.shape[1]
        while max_arity and not m[:, max_arity - 1].any():
            max_arity -= 1
        if max_arity < out.shape[1]:
            out = np.ascontiguousarray(out[:, :max_arity])
            m = out >= 0
        if n * max_arity > _asm.MAX_TABLE_ENTRIES:
            return None
        child_ids = out[m]
        child_offsets = np.zeros(n + 1, INDEX_DTYPE)
        if max_arity:
            child_offsets[1:] = np.add.accumulate(m.ravel(), dtype=INDEX_DTYPE)[max_arity - 1::
                                                                                 max_arity]
        arity_new = np.diff(child_offsets) if arity is not None else None
    if arity is not None and (arity_new[num_leaves:] != arity).any():
        return None
    node_input = np.arange(nb, dtype=INDEX_DTYPE).repeat(sizes)[order]
    roots = new_id[root_pre].astype(INDEX_DTYPE)
    if words is not None:
        words = words.astype(INDEX_DTYPE)[order]
        words.setflags(write=False)
    for a in (level_offsets, child_offsets, child_ids, out, roots, node_input):
        a.setflags(write=False)
    return LinearizedBatch._trusted(
        num_nodes=n, level_offsets=level_offsets, child_offsets=child_offsets,
        child_ids=child_ids, child_table=out, roots=roots, node_input=node_input,
        word_ids=words, features=None,
        origin=Origin(order, node_input, [id_key] * nb if keys is None else keys, starts),
        labels=None)


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
