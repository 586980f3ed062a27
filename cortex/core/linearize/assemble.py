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

from ..structure import INDEX_DTYPE, LinearizedBatch
from .errors import (ArityError, CycleError, EmptyBatchError, FeatureError, IndexOverflowError,
                     MixedInputError, NodeIndexError, RootError, StructureError, TokenError)
from .parts import Part

MAX_INDEX = int(np.iinfo(INDEX_DTYPE).max)
#: Largest dense child table (entries) the linearizer builds; wider batches are rejected.
MAX_TABLE_ENTRIES = 1 << 28


class Origin(Sequence):
    """``origin[v] = (batch index, key)`` for output row ``v``; ``row(b, key)`` inverts it."""

    def __init__(self, node_input: np.ndarray, local: np.ndarray, keys: list, starts: np.ndarray,
                 new_id: np.ndarray):
        self._input = node_input
        self._local = local
        self._keys = keys
        self._starts = starts
        self._new_id = new_id

    def __len__(self) -> int:
        return len(self._input)

    def __getitem__(self, v: Any) -> Any:
        if isinstance(v, slice):
            return [self[i] for i in range(*v.indices(len(self)))]
        b = int(self._input[v])
        return (b, self._keys[b](int(self._local[v])))

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return (self[v] for v in range(len(self)))

    def row(self, b: int, key: Any) -> int:
        """The output row of input ``b``'s node ``key`` (a path, a node id or ``(i, j)``)."""
        keys = self._keys[b]
        if isinstance(key, str):
            local = keys.index(key)
        elif isinstance(key, tuple):
            local = key[0] * keys.cols + key[1]
        else:
            local = int(key)
        size = self._starts[b + 1] - self._starts[b]
        if not 0 <= local < size:
            raise KeyError(key)
        return int(self._new_id[self._starts[b] + local])


class _Batch:
    """Maps a global pre-order node id back to (input, key) for error messages."""

    def __init__(self, parts: list[Part], starts: np.ndarray):
        self.parts = parts
        self.starts = starts

    def error(self, cls: type[StructureError], msg: str, g: int) -> StructureError:
        b = int(np.searchsorted(self.starts, g, side="right") - 1)
        return cls(msg, input_index=b, path=self.parts[b].keys(int(g - self.starts[b])))


def _tree_heights(gpar: np.ndarray) -> tuple[np.ndarray | None, int]:
    """Heights of a forest given parent pointers; (None, node) if some node is on a cycle."""
    n = len(gpar)
    has_p = gpar >= 0
    jump = np.where(has_p, gpar, np.arange(n))
    depth = has_p.astype(np.int64)
    jumps = [jump]
    for _ in range(n.bit_length() + 1):
        nxt = jump[jump]
        if np.array_equal(nxt, jump):
            break
        depth += depth[jump]
        jump = nxt
        jumps.append(jump)
    stuck = has_p[jump]
    if stuck.any():
        v = int(np.argmax(stuck))
        seen = set()
        while v not in seen:  # walk up to a node on the cycle (error path only)
            seen.add(v)
            v = int(gpar[v])
        return None, v
    deepest = depth.copy()
    for j in jumps:
        np.maximum.at(deepest, j, deepest.copy())
    return deepest - depth, -1


def _dag_heights(n: int, ep: np.ndarray, ec: np.ndarray, arity: np.ndarray,
                 indeg: np.ndarray) -> tuple[np.ndarray | None, int]:
    """Heights by Kahn's algorithm, one frontier per level; (None, node) on a cycle."""
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
           batch: _Batch) -> tuple[np.ndarray, np.ndarray]:
    """Global (parent, child) edge arrays, each parent's edges in child order."""
    eps, ecs, owner = [], [], []
    for b, p in enumerate(parts):
        if p.parent is not None:
            c = np.flatnonzero(p.parent >= 0)
            eps.append(p.parent[c])
            ecs.append(c)
        else:
            eps.append(p.edges[0])
            ecs.append(p.edges[1])
        owner.append(len(eps[-1]))
    eb = np.repeat(np.arange(len(parts)), owner)
    ep, ec = np.concatenate(eps), np.concatenate(ecs)
    if len(ep) > MAX_INDEX:
        raise IndexOverflowError(f"{len(ep)} edges do not fit int32 indices")
    if not all(p.trusted for p in parts):
        size = sizes[eb]
        bad = (ep < 0) | (ep >= size) | (ec < 0) | (ec >= size)
        if bad.any():
            i = int(np.argmax(bad))
            b = int(eb[i])
            raise NodeIndexError(
                f"edge ({ep[i]}, {ec[i]}) names a node outside [0, {size[i]})", input_index=b,
                path=int(ep[i]) if 0 <= ep[i] < size[i] else None)
    off = starts[eb]
    return ep + off, ec + off


def assemble(parts: list[Part], *, arity: int | None, vocab_size: int | None,
             feature_dim: int | None) -> LinearizedBatch:
    nb = len(parts)
    if nb == 0:
        raise EmptyBatchError("empty batch: give at least one structure")
    sizes = np.fromiter((p.n for p in parts), np.int64, nb)
    n = int(sizes.sum())
    if n > MAX_INDEX:
        raise IndexOverflowError(f"{n} nodes do not fit int32 indices; split the batch")
    starts = np.zeros(nb + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    node_input = np.repeat(np.arange(nb, dtype=np.int64), sizes)
    batch = _Batch(parts, starts)

    # --- structure: parents/edges, roots, cycles, heights
    gpar = None
    if all(p.parent is not None for p in parts):
        par = parts[0].parent if nb == 1 else np.concatenate([p.parent for p in parts])
        if not all(p.trusted for p in parts):
            bad = (par < -1) | (par >= sizes[node_input])
            if bad.any():
                g = int(np.argmax(bad))
                raise batch.error(NodeIndexError, f"parent {par[g]} is outside [-1, "
                                  f"{sizes[node_input[g]]})", g)
        gpar = np.where(par >= 0, par + starts[node_input], -1)
        ec = np.flatnonzero(gpar >= 0)
        ep = gpar[ec]
        is_root = par < 0
    else:
        ep, ec = _edges(parts, starts, sizes, batch)
        is_root = np.ones(n, bool)
        is_root[ec] = False
    indeg = np.bincount(ec, minlength=n)
    nroots = np.bincount(node_input[is_root], minlength=nb)
    if (nroots != 1).any():
        b = int(np.argmax(nroots != 1))
        if nroots[b] > 1:
            second = np.flatnonzero(is_root & (node_input == b))[1]
            raise batch.error(RootError, f"input has {nroots[b]} roots (nodes without parent);"
                              " a structure needs exactly one", int(second))
    arity_pre = np.bincount(ep, minlength=n)
    if gpar is None and (indeg.size == 0 or indeg.max() <= 1) and (nroots == 1).all():
        gpar = np.full(n, -1, np.int64)
        gpar[ec] = ep
    if gpar is not None:
        height, cyc = _tree_heights(gpar)
    else:
        height, cyc = _dag_heights(n, ep, ec, arity_pre, indeg)
    if height is None:
        raise batch.error(CycleError, "the structure has a cycle through this node", cyc)
    if (nroots != 1).any():  # no root at all but no cycle found cannot happen; be explicit
        b = int(np.argmax(nroots != 1))
        raise RootError("input has no root", input_index=b)

    # --- per-node checks, in input order so the first bad node is reported
    if arity is not None:
        if not isinstance(arity, (int, np.integer)) or arity < 1:
            raise ValueError(f"arity must be a positive int, got {arity!r}")
        bad = (arity_pre > 0) & (arity_pre != arity)
        if bad.any():
            g = int(np.argmax(bad))
            raise batch.error(ArityError, f"has {arity_pre[g]} children; the model needs "
                              f"exactly {arity} (or 0 for a leaf)", g)
    words = _words(parts, batch, arity_pre, vocab_size)
    features = _features(parts, feature_dim)
    labels = _labels(parts, batch)
    max_arity = int(arity_pre.max()) if len(ep) else 0
    if n * max_arity > MAX_TABLE_ENTRIES:
        raise IndexOverflowError(f"child table [{n}, {max_arity}] exceeds {MAX_TABLE_ENTRIES} "
                                 "entries; use fewer or narrower structures per batch")

    # --- renumber: stable sort by (height, input, original order)
    hmax = int(height.max())
    key = height.astype(np.int16) if hmax < (1 << 15) else height
    order = np.argsort(key, kind="stable")
    new_id = np.empty(n, np.int64)
    new_id[order] = np.arange(n)
    level_offsets = np.zeros(hmax + 2, np.int64)
    np.cumsum(np.bincount(height, minlength=hmax + 1), out=level_offsets[1:])
    new_parent = new_id[ep]
    eorder = np.argsort(new_parent, kind="stable")
    rows = new_parent[eorder]
    child_ids = new_id[ec[eorder]]
    arity_new = arity_pre[order]
    child_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(arity_new, out=child_offsets[1:])
    table = np.full((n, max_arity), -1, INDEX_DTYPE)
    if len(rows):
        table[rows, np.arange(len(rows)) - child_offsets[rows]] = child_ids
    roots = new_id[np.flatnonzero(is_root)]
    node_input_new = node_input[order]
    origin = Origin(node_input_new, order - starts[node_input_new], [p.keys for p in parts],
                    starts, new_id)
    return LinearizedBatch(
        num_nodes=n,
        level_offsets=_frozen(level_offsets),
        child_offsets=_frozen(child_offsets),
        child_ids=_frozen(child_ids),
        child_table=_frozen(table),
        roots=_frozen(roots),
        node_input=_frozen(node_input_new),
        word_ids=None if words is None else _frozen(words[order]),
        features=None if features is None else _frozen(features[order], np.float64),
        origin=origin,
        labels=None if labels is None else _frozen(labels[order]),
    )


def _frozen(a: np.ndarray, dtype: Any = INDEX_DTYPE) -> np.ndarray:
    out = np.ascontiguousarray(a, dtype=dtype)
    if out is a:
        out = out.copy()
    out.setflags(write=False)
    return out


def _uniform(parts: list[Part], attr: str, what: str) -> bool:
    have = [getattr(p, attr) is not None for p in parts]
    if any(have) and not all(have):
        b = have.index(not have[0])
        raise MixedInputError(
            f"{'has' if have[b] else 'lacks'} {what} while input 0 {'has' if have[0] else 'lacks'}"
            f" them: every input of a batch must carry the same kind of node data",
            input_index=b)
    return have[0]


def _words(parts: list[Part], batch: _Batch, arity: np.ndarray,
           vocab_size: int | None) -> np.ndarray | None:
    if not _uniform(parts, "words", "tokens"):
        return None
    w = parts[0].words if len(parts) == 1 else np.concatenate([p.words for p in parts])
    bad = w < -1
    if bad.any():
        g = int(np.argmax(bad))
        raise batch.error(TokenError, f"token id {w[g]} is negative", g)
    if vocab_size is not None:
        bad = w >= vocab_size
        if bad.any():
            g = int(np.argmax(bad))
            raise batch.error(TokenError, f"token id {w[g]} is outside the vocabulary "
                              f"[0, {vocab_size})", g)
    bad = w > MAX_INDEX
    if bad.any():
        g = int(np.argmax(bad))
        raise batch.error(IndexOverflowError, f"token id {w[g]} does not fit int32", g)
    bad = (w < 0) & (arity == 0)
    if bad.any():
        g = int(np.argmax(bad))
        raise batch.error(TokenError, "this leaf carries no token while the batch has tokens "
                          "(every leaf needs one for the embedding lookup)", g)
    return w


def _features(parts: list[Part], feature_dim: int | None) -> np.ndarray | None:
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
    return parts[0].features if len(parts) == 1 else np.concatenate([p.features for p in parts])


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
