"""The NumPy core of the linearizer: validate a batch of parts and number it level by level.

Pipeline position: last step of ``linearize``: a list of :class:`Part` (one per input) in, a
:class:`LinearizedBatch` out. Every check that protects generated code happens here, batch-wide,
before anything is returned. Cost: a fixed number of NumPy calls plus

* trees (every node has at most one parent): O(log height) calls -- depths by pointer jumping,
  then heights by pushing each node's deepest descendant depth up the same jump pointers
  (max over distances [2^k, 2^(k+1)) at step k);
* DAGs: O(height) calls -- Kahn's algorithm one frontier (= one level) at a time.

Nodes are then renumbered by a stable argsort of (height, input, the input's node order).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import int_arg
from .structure import INDEX_DTYPE, LinearizedBatch
from .errors import (ArityError, CycleError, EmptyBatchError, FeatureError, IndexOverflowError,
                     MixedInputError, NodeIndexError, RootError, StructureError, TokenError)
from .limits import check_size
from .parts import Part

MAX_INDEX = int(np.iinfo(INDEX_DTYPE).max)
#: Largest dense child table (entries) the linearizer builds; wider batches are rejected.
MAX_TABLE_ENTRIES = 1 << 28


class Origin(Sequence):
    """``origin[v] = (batch index, key)`` for output row ``v``; ``row(b, key)`` inverts it.

    Computed lazily from the renumbering (building N keys eagerly would cost per-node Python
    on every call).
    """

    def __init__(self, order: np.ndarray, node_input: np.ndarray, keys: list,
                 starts: np.ndarray):
        self._order = order  # output row -> global pre-order id
        self._input = node_input  # output row -> batch index
        self._keys = keys
        self._starts = starts
        self._new_id: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, v: Any) -> Any:
        if isinstance(v, slice):
            return [self[i] for i in range(*v.indices(len(self)))]
        b = int(self._input[v])
        return (b, self._keys[b](int(self._order[v] - self._starts[b])))

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return (self[v] for v in range(len(self)))

    def row(self, b: int, key: Any) -> int:
        """The output row of input ``b``'s node ``key`` (a path, a node id or ``(i, j)``)."""
        keys = self._keys[b]
        if isinstance(key, str):
            try:
                local = keys.index(key)
            except (AttributeError, ValueError):
                raise KeyError(key) from None
        elif isinstance(key, tuple):
            local = key[0] * keys.cols + key[1]
        else:
            local = int(key)
        if not 0 <= local < self._starts[b + 1] - self._starts[b]:
            raise KeyError(key)
        return int(self.new_ids()[self._starts[b] + local])

    def new_ids(self) -> np.ndarray:
        """The output row of every global pre-order node id (the inverse of the order)."""
        if self._new_id is None:
            new_id = np.empty(len(self._order), np.int64)
            new_id[self._order] = np.arange(len(self._order))
            self._new_id = new_id
        return self._new_id


class _Batch:
    """Maps a global pre-order node id back to (input, key) for error messages."""

    def __init__(self, parts: list[Part], starts: np.ndarray):
        self.parts = parts
        self.starts = starts

    def error(self, cls: type[StructureError], msg: str, g: int) -> StructureError:
        b = int(np.searchsorted(self.starts, g, side="right") - 1)
        return cls(msg, input_index=b, path=self.parts[b].keys(int(g - self.starts[b])))


def _tree_heights(gpar: np.ndarray, max_size: int) -> tuple[np.ndarray | None, int]:
    """Heights of a forest whose roots point at the sentinel ``n = len(gpar)``.

    ``jump`` holds each node's 2^k-th ancestor (the sentinel when there is none); at step k
    every node pushes (its height so far + 2^k) to that ancestor, which extends every node's
    known height from distances < 2^k to < 2^(k+1). ``max_size`` bounds every depth, so
    bit_length(max_size - 1) steps suffice; a node that still has an ancestor after them lies
    on or under a cycle. Returns (None, a node on the cycle) then. The loop stops early once
    no node has a 2^(k+1)-th ancestor.
    """
    n = len(gpar)
    jump = np.append(gpar, n)
    h = np.zeros(n + 1, np.int64)
    push = np.empty(n + 1, np.int64)
    steps = (max_size - 1).bit_length()
    if steps:
        h[jump] = 1  # step 0: a node with a child has height >= 1 (duplicates write the same)
        h[n] = 0
        jump = jump[jump]
    for k in range(1, steps):
        np.add(h, 1 << k, out=push)
        np.maximum.at(h, jump, push)
        jump = jump[jump]
        if k >= 3 and jump.min() == n:  # every depth < 2^(k+1): all heights are known
            break
    if (jump[:n] != n).any():
        v = int(np.argmax(jump[:n] != n))
        seen = set()
        while v not in seen:  # walk up to a node on the cycle (error path only)
            seen.add(v)
            v = int(gpar[v])
        return None, v
    return h[:n], -1


def _dag_heights(n: int, ep: np.ndarray, ec: np.ndarray) -> tuple[np.ndarray | None, int]:
    """Heights by Kahn's algorithm, one frontier (= one level) per step; (None, node) on a
    cycle."""
    arity = np.bincount(ep, minlength=n)
    indeg = np.bincount(ec, minlength=n)
    parents_by_child = ep[np.argsort(ec, kind="stable")]
    poff = np.zeros(n + 1, np.int64)
    np.cumsum(indeg, out=poff[1:])
    pending = arity.copy()
    height = np.full(n, -1, np.int64)
    frontier = np.flatnonzero(arity == 0)
    level = 0
    while frontier.size:
        height[frontier] = level
        cnt = indeg[frontier]
        total = int(cnt.sum())
        if not total:
            break
        first = np.repeat(poff[frontier] - (np.cumsum(cnt) - cnt), cnt)
        ps = parents_by_child[first + np.arange(total)]
        np.subtract.at(pending, ps, 1)
        frontier = np.unique(ps[pending[ps] == 0])
        level += 1
    if (height < 0).any():
        v = int(np.argmax(height < 0))
        seen = set()
        while v not in seen:  # follow unfinished children to a node on the cycle
            seen.add(v)
            kids = ec[ep == v]
            v = int(kids[np.argmax(height[kids] < 0)])
        return None, v
    return height, -1


def _edges(parts: list[Part], starts: np.ndarray, sizes: np.ndarray,
           trusted: bool) -> tuple[np.ndarray, np.ndarray]:
    """Global (parent, child) edge arrays, each parent's edges in child order."""
    eps, ecs, counts = [], [], []
    for b, p in enumerate(parts):
        if p.parent is not None:
            if not p.trusted and len(p.parent) and p.parent.min() < -1:
                v = int(np.argmax(p.parent < -1))
                raise NodeIndexError(f"parent {p.parent[v]} is outside [-1, {p.n})",
                                     input_index=b, path=v)
            c = np.flatnonzero(p.parent >= 0)
            eps.append(p.parent[c])
            ecs.append(c)
        else:
            eps.append(p.edges[0])
            ecs.append(p.edges[1])
        counts.append(len(eps[-1]))
    eb = np.repeat(np.arange(len(parts)), counts)
    ep, ec = np.concatenate(eps).astype(np.int64), np.concatenate(ecs).astype(np.int64)
    if len(ep) > MAX_INDEX:
        raise IndexOverflowError(f"{len(ep)} edges do not fit int32 indices")
    if not trusted:
        size = sizes[eb]
        bad = (ep < 0) | (ep >= size) | (ec < 0) | (ec >= size)
        if bad.any():
            i = int(np.argmax(bad))
            raise NodeIndexError(
                f"edge ({ep[i]}, {ec[i]}) names a node outside [0, {size[i]})",
                input_index=int(eb[i]), path=int(ep[i]) if 0 <= ep[i] < size[i] else None)
    off = starts[eb]
    return ep + off, ec + off


def _first(order: np.ndarray, bad_new: np.ndarray) -> int:
    """The smallest pre-order id among the flagged output rows (errors name the first node)."""
    return int(order[bad_new].min())


def assemble(parts: list[Part], *, arity: int | None, vocab_size: int | None,
             feature_dim: int | None, feature_dtype: np.dtype = np.dtype(np.float64)) -> LinearizedBatch:
    nb = len(parts)
    if nb == 0:
        raise EmptyBatchError("empty batch: give at least one structure")
    if arity is not None:
        int_arg("linearize", "arity", arity)
    size_list = [p.n for p in parts]
    start_list = [0]
    for size in size_list:
        start_list.append(start_list[-1] + size)
    n = start_list[-1]
    if n > MAX_INDEX:
        raise IndexOverflowError(f"{n} nodes do not fit int32 indices; split the batch")
    check_size(n, sum(p.n if p.parent is not None else len(p.edges[0]) for p in parts),
               sum(p.features.size for p in parts if p.features is not None))
    starts = np.array(start_list)
    sizes = np.array(size_list)
    node_input = np.repeat(np.arange(nb), size_list)
    batch = _Batch(parts, starts)
    trusted = all(p.trusted for p in parts)

    # --- structure: edges, roots, cycles, heights (in global pre-order ids)
    if all(p.parent is not None for p in parts):
        par = parts[0].parent if nb == 1 else np.concatenate([p.parent for p in parts])
        if not trusted:
            par = par.astype(np.int64, copy=False)
            bad = (np.maximum.reduceat(par, starts[:-1]) >= sizes)
            if bad.any() or par.min() < -1:
                bad = (par < -1) | (par >= sizes[node_input])
                g = int(np.argmax(bad))
                raise batch.error(NodeIndexError, f"parent {par[g]} is outside [-1, "
                                  f"{sizes[node_input[g]]})", g)
        has_p = par >= 0
        gpar = np.where(has_p, par + starts[node_input], n)
        ec = has_p.nonzero()[0]
        ep = gpar[ec]
        root_pre = (~has_p).nonzero()[0]
    else:
        ep, ec = _edges(parts, starts, sizes, trusted)
        is_root = np.ones(n, bool)
        is_root[ec] = False
        root_pre = np.flatnonzero(is_root)
        gpar = None
        if not trusted and len(ec) == len(np.unique(ec)):  # every node has <= 1 parent
            gpar = np.full(n, n, np.int64)
            gpar[ec] = ep
    if len(root_pre) > nb:  # acyclic inputs each have >= 1 root: someone has too many
        counts = np.bincount(node_input[root_pre], minlength=nb)
        b = int(np.argmax(counts > 1))
        second = int(root_pre[node_input[root_pre] == b][1])
        raise batch.error(RootError, f"input has {counts[b]} roots (nodes without parent); a "
                          "structure needs exactly one", second)
    if all(p.height is not None for p in parts):
        height = parts[0].height if nb == 1 else np.concatenate([p.height for p in parts])
    else:
        if gpar is not None:
            height, cyc = _tree_heights(gpar, max(size_list))
        else:
            height, cyc = _dag_heights(n, ep, ec)
        if height is None:
            raise batch.error(CycleError, "the structure has a cycle through this node", cyc)
    if len(root_pre) < nb:  # cannot happen once cycles are excluded; kept as a guard
        raise RootError("an input has no root")

    # --- renumber: stable sort by (height, input, original order)
    hmax = int(height.max())
    # radix sort on a narrow copy of the key is several times faster than a merge sort
    key = height.astype(np.uint8 if hmax < 256 else np.uint16 if hmax < 65536 else np.int64)
    order = np.argsort(key, kind="stable")
    new_id = np.empty(n, np.int64)
    new_id[order] = np.arange(n)
    level_offsets = np.zeros(hmax + 2, INDEX_DTYPE)
    level_offsets[1:] = np.bincount(key, minlength=hmax + 1).cumsum()
    num_leaves = int(level_offsets[1])
    new_parent = new_id[ep]
    eorder = np.argsort(new_parent.astype(np.uint16) if n < 65536 else new_parent,
                        kind="stable")
    rows = new_parent[eorder]
    child_ids = new_id[ec[eorder]].astype(INDEX_DTYPE)
    arity_new = np.bincount(rows, minlength=n)
    child_offsets = np.zeros(n + 1, INDEX_DTYPE)
    child_offsets[1:] = arity_new.cumsum()
    max_arity = int(arity_new.max()) if len(rows) else 0
    if n * max_arity > MAX_TABLE_ENTRIES:
        raise IndexOverflowError(f"child table [{n}, {max_arity}] exceeds {MAX_TABLE_ENTRIES} "
                                 "entries; use fewer or narrower structures per batch")
    if len(ep) > MAX_INDEX:
        raise IndexOverflowError(f"{len(ep)} edges do not fit int32 indices")

    # --- per-node checks (in output order; errors name the first bad node in input order)
    if arity is not None:
        bad = arity_new[num_leaves:] != arity
        if bad.any():
            g = _first(order[num_leaves:], bad)
            raise batch.error(ArityError, f"has {arity_new[new_id[g]]} children; the model "
                              f"needs exactly {arity} (or 0 for a leaf). Trees whose nodes "
                              "have any number of children (Python ASTs, dependency parses) "
                              "need a variable-arity model such as "
                              "cortex.models.ChildSumTreeLSTM", g)
    words = _words(parts, batch, order, num_leaves, vocab_size)
    features = _features(parts, feature_dim, new_id, starts, feature_dtype)
    labels = _labels(parts, batch)

    table = np.full((n, max_arity), -1, INDEX_DTYPE)
    if len(rows):  # flat scatter: row * width + position among the row's children
        table.ravel()[np.arange(len(rows)) + (rows * max_arity - child_offsets[rows])] = child_ids
    node_input_new = node_input[order]
    return LinearizedBatch._trusted(  # established above: sealed, validated once
        num_nodes=n,
        level_offsets=_frozen(level_offsets),
        child_offsets=_frozen(child_offsets),
        child_ids=_frozen(child_ids),
        child_table=_frozen(table),
        roots=_frozen(new_id[root_pre].astype(INDEX_DTYPE)),
        node_input=_frozen(node_input_new.astype(INDEX_DTYPE)),
        word_ids=words,
        features=None if features is None else _frozen(features),
        origin=Origin(order, node_input_new, [p.keys for p in parts], starts),
        labels=None if labels is None else _frozen(labels[order].astype(INDEX_DTYPE)),
    )


def _frozen(a: np.ndarray) -> np.ndarray:
    """Read-only, so a cached batch cannot be corrupted by a caller (``a`` is always fresh)."""
    a.setflags(write=False)
    return a


def _uniform(parts: list[Part], attr: str, what: str) -> bool:
    have = [getattr(p, attr) is not None for p in parts]
    if any(have) and not all(have):
        b = have.index(not have[0])
        raise MixedInputError(
            f"{'has' if have[b] else 'lacks'} {what} while input 0 {'has' if have[0] else 'lacks'}"
            f" them: every input of a batch must carry the same kind of node data",
            input_index=b)
    return have[0]


def _words(parts: list[Part], batch: _Batch, order: np.ndarray, num_leaves: int,
           vocab_size: int | None) -> np.ndarray | None:
    if not _uniform(parts, "words", "tokens"):
        return None
    w = (parts[0].words if len(parts) == 1 else np.concatenate([p.words for p in parts]))[order]
    for bad, cls, msg in (
        (lambda: w < -1, TokenError, "token id {} is negative"),
        (lambda: w >= vocab_size, TokenError, f"token id {{}} is outside the vocabulary "
                                              f"[0, {vocab_size})"),
        (lambda: w > MAX_INDEX, IndexOverflowError, "token id {} does not fit int32"),
    ):
        if cls is TokenError and "vocabulary" in msg and vocab_size is None:
            continue
        mask = bad()
        if mask.any():
            g = _first(order, mask)
            raise batch.error(cls, msg.format(w[np.flatnonzero(order == g)[0]]), g)
    missing = w[:num_leaves] < 0
    if missing.any():
        g = _first(order[:num_leaves], missing)
        raise batch.error(TokenError, "this leaf carries no token while the batch has tokens "
                          "(every leaf needs one for the embedding lookup)", g)
    return _frozen(w.astype(INDEX_DTYPE))


def _features(parts: list[Part], feature_dim: int | None, new_id: np.ndarray,
              starts: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """The batch's feature vectors in output order (node ``new_id[g]`` of global id ``g``),
    scattered from each input's array straight into one fresh array of ``dtype``: one copy
    of the data, converted on the way."""
    if not _uniform(parts, "features", "feature vectors"):
        if feature_dim is not None:
            raise FeatureError(f"the model needs feature vectors of size {feature_dim}; "
                               "the inputs carry none", input_index=0)
        return None
    dims = [p.features.shape[1] for p in parts]
    want = dims[0] if feature_dim is None else feature_dim
    for b, d in enumerate(dims):
        if d != want:
            raise FeatureError(f"feature vectors have size {d}, expected {want}", input_index=b)
    out = np.empty((len(new_id), want), dtype)
    for p, s in zip(parts, starts.tolist()):
        out[new_id[s:s + p.n]] = p.features
    return out


def _labels(parts: list[Part], batch: _Batch) -> np.ndarray | None:
    if all(p.labels is None for p in parts):
        return None
    lab = np.concatenate([np.full(p.n, -1, np.int64) if p.labels is None else p.labels
                          for p in parts])
    bad = (lab < -1) | (lab > MAX_INDEX)
    if bad.any():
        g = int(np.argmax(bad))
        raise batch.error(TokenError, f"label {lab[g]} is not in [-1, {MAX_INDEX}]", g)
    return lab
