"""The linearized batch: the contract between the host linearizer and everything downstream.

Pipeline position: ``cortex.core.linearize`` turns user structures (trees, DAGs, sequences)
into a :class:`LinearizedBatch`; the reference evaluator, the LoopProgram interpreter and
every backend runtime read only this object. Generated native code dereferences these arrays
without bounds checks, so the invariants below are the safety contract: whoever builds a
``LinearizedBatch`` must establish them (``validate()`` checks them, vectorized).

Invariants (N = ``num_nodes``, L = ``num_levels``):

* Nodes are numbered ``0..N-1`` so that every level is a contiguous range
  ``level_offsets[l]:level_offsets[l+1]``; level 0 holds exactly the leaves (no children);
  a node's level is its height (1 + max level of its children), so levels are minimal.
  Consequently every child id is smaller than its parent's id: ``0..N-1`` is a topological order.
* Children are stored in CSR form: the children of node ``v`` are
  ``child_ids[child_offsets[v]:child_offsets[v+1]]``, in the user's order (it matters for
  N-ary models: child 0 is the left child of a binary tree).
* ``child_table`` is the dense ``[N, max_arity]`` form of the same relation, padded with -1
  (leaves are all -1). It is always present; fixed-arity models additionally get the guarantee
  (checked by the linearizer when a model asks for arity k) that every internal node has
  exactly k children.
* A DAG node shared by several parents appears once; its id occurs in several parents' lists.
* ``roots[b]`` is the node id of input ``b``'s root (its sink, for a DAG; its last element, for
  a sequence). ``node_input[v]`` is the batch index of the input node ``v`` came from.
* ``word_ids[v]`` is the per-node token id (-1 where a node carries no token), or ``None``
  when no input carries tokens; ``features`` is ``[N, F]`` float64 (float32 when asked for:
  ``linearize(..., feature_dtype=)``, as an executable compiled for float32 does) or ``None``.
* Index arrays are int32 (compact for GPUs; the linearizer rejects batches that overflow).
* Within a level, nodes are ordered by (input, the input's own node order): level 0 of a
  sentence lists its words left to right.
* ``labels[v]`` is an optional per-node integer label (SST sentiment, -1 = none).

``validate()`` checks all of the above with a fixed number of NumPy calls (no per-node Python)
and raises :class:`InvariantError` naming the first violated invariant (:class:`BatchTypeError`,
also a ``TypeError``, when a field has the wrong type); both are Cortex errors and ValueErrors.

Sealing (validated once): the linearizer establishes the invariants while it builds a batch, so
it *seals* it: its index arrays (and ``word_ids``, ``labels``) are read-only, and the batch
remembers which arrays and which ``num_nodes`` it was sealed with. ``Executable.run`` trusts a
batch only while its seal holds (the same objects, still read-only: a few attribute reads) and
validates any other batch (one you built yourself, one from ``dataclasses.replace``, one whose
arrays were made writable again) before its arrays reach native code. A batch you build is
never sealed by ``validate()``: its arrays are yours, and another writable view of them could
change them after the check. (Writing through an array's ``.base`` or raw pointers goes around
the read-only flags, and so around the seal: that is not input, it is editing Cortex's memory.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from cortex.core.errors import CortexError

INDEX_DTYPE = np.int32
#: Largest node / edge count and index value of a batch (int32 indices).
MAX_INDEX = int(np.iinfo(INDEX_DTYPE).max)
_ARRAY_FIELDS = ("level_offsets", "child_offsets", "child_ids", "child_table", "roots",
                 "node_input")


@dataclass(frozen=True, eq=False)
class LinearizedBatch:
    """A batch of structures as flat, level-ordered index arrays (see the module docstring)."""

    num_nodes: int
    level_offsets: np.ndarray  # int32 [num_levels + 1], level_offsets[0] == 0, [-1] == N
    child_offsets: np.ndarray  # int32 [N + 1]
    child_ids: np.ndarray  # int32 [E]
    child_table: np.ndarray  # int32 [N, max_arity], -1 padded (max_arity may be 0)
    roots: np.ndarray  # int32 [B]
    node_input: np.ndarray  # int32 [N]
    word_ids: np.ndarray | None = None  # int32 [N], -1 = no token
    features: np.ndarray | None = None  # float64 (or float32) [N, F]
    # For mapping output rows back to the user's nodes: origin[v] = (batch index, key) where key
    # is a path like "root.1.0" for trees, or the user's node id for parent arrays / edge lists.
    origin: Sequence[tuple[int, Any]] | None = field(default=None, repr=False)
    labels: np.ndarray | None = None  # int32 [N], -1 = no label (added: SST node labels)

    @classmethod
    def _trusted(cls, **fields: Any) -> "LinearizedBatch":
        """A batch from the linearizer, which gives every field and establishes the invariants
        itself: built without the dataclass ``__init__`` (eleven frozen ``setattr``s, a
        measurable share of a one-tree call) and sealed (see the module docstring)."""
        self = object.__new__(cls)
        self.__dict__.update(fields)
        return self._seal()

    def __post_init__(self) -> None:
        """Field types, cheaply (the values are ``validate()``'s): so a float ``num_nodes`` or a
        list where an array belongs is a clear :class:`BatchTypeError` here, not NumPy's later."""
        n = self.num_nodes
        if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)):
            raise BatchTypeError(f"num_nodes must be an int, got {type(n).__name__} {n!r}")
        for name in _ARRAY_FIELDS:
            _need_array(name, getattr(self, name))
        for name in ("word_ids", "features", "labels"):
            if getattr(self, name) is not None:
                _need_array(name, getattr(self, name))

    def _seal(self) -> "LinearizedBatch":
        """Mark this batch validated (the linearizer's batches, and only those: see the module
        docstring): remember its ``num_nodes`` and index arrays. The linearizer makes those
        arrays read-only; :meth:`_is_sealed` holds only while they still are."""
        d = self.__dict__
        d["_sealed_with"] = (d["num_nodes"], d["level_offsets"], d["child_offsets"],
                             d["child_ids"], d["child_table"], d["roots"], d["node_input"],
                             d["word_ids"], d["labels"])
        return self

    def _is_sealed(self) -> bool:
        """Does this batch still hold exactly what it was sealed with, its arrays read-only?
        (Written out field by field: this runs on every call of an executable.)"""
        d = self.__dict__
        seal = d.get("_sealed_with")
        if seal is None:
            return False
        n, lo, co, ci, ct, roots, ni, words, labels = seal
        return (d["num_nodes"] is n and d["level_offsets"] is lo and d["child_offsets"] is co
                and d["child_ids"] is ci and d["child_table"] is ct and d["roots"] is roots
                and d["node_input"] is ni and d["word_ids"] is words and d["labels"] is labels
                and not (lo.flags.writeable or co.flags.writeable or ci.flags.writeable
                         or ct.flags.writeable or roots.flags.writeable
                         or ni.flags.writeable
                         or (words is not None and words.flags.writeable)
                         or (labels is not None and labels.flags.writeable)))

    @property
    def num_levels(self) -> int:
        return len(self.level_offsets) - 1

    @property
    def batch_size(self) -> int:
        return len(self.roots)

    @property
    def num_leaves(self) -> int:
        """Leaves are exactly level 0: the range ``0:num_leaves``."""
        return int(self.level_offsets[1]) if self.num_levels > 0 else 0

    @property
    def max_arity(self) -> int:
        return int(self.child_table.shape[1])

    def level(self, l: int) -> range:
        return range(int(self.level_offsets[l]), int(self.level_offsets[l + 1]))

    def children(self, v: int) -> np.ndarray:
        return self.child_ids[self.child_offsets[v] : self.child_offsets[v + 1]]

    def arity(self) -> np.ndarray:
        """Number of children of every node, int32 [N]."""
        return np.diff(self.child_offsets).astype(INDEX_DTYPE)

    def validate(self) -> None:
        """Check every invariant of the module docstring, vectorized; raise InvariantError."""
        _validate(self)


class InvariantError(CortexError, ValueError):
    """A LinearizedBatch violates the safety contract (see the module docstring)."""


class BatchTypeError(InvariantError, TypeError):
    """A LinearizedBatch field has the wrong type, or something else was given as a batch."""


def _need_array(name: str, a: Any) -> None:
    if not isinstance(a, np.ndarray):
        raise BatchTypeError(f"LinearizedBatch.{name} must be a NumPy array, got "
                             f"{type(a).__name__}")


def _check(ok: bool | np.bool_, what: str) -> None:
    if not bool(ok):
        raise InvariantError(f"LinearizedBatch invariant violated: {what}")


def _is_index(a: Any, ndim: int) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == INDEX_DTYPE and a.ndim == ndim


def _validate(b: LinearizedBatch) -> None:
    if not isinstance(b, LinearizedBatch):
        raise BatchTypeError(f"expected a LinearizedBatch, got {type(b).__name__}")
    b.__post_init__()  # the types first: a field may have been replaced after construction
    for name, nd in (("level_offsets", 1), ("child_offsets", 1), ("child_ids", 1),
                     ("child_table", 2), ("roots", 1), ("node_input", 1)):
        _check(_is_index(getattr(b, name), nd), f"{name} must be a {nd}-D int32 array")
    n = int(b.num_nodes)
    lo, co, ci, ct = b.level_offsets, b.child_offsets, b.child_ids, b.child_table
    # sizes first, so no step below allocates more than the arrays given already hold
    _check(1 <= n <= MAX_INDEX, f"1 <= num_nodes <= {MAX_INDEX}, got {n}")
    _check(len(co) == n + 1, "child_offsets has N + 1 entries")
    _check(len(b.node_input) == n, "node_input has N entries")
    _check(ct.shape[0] == n, "child_table has N rows")
    _check(len(lo) >= 2 and lo[0] == 0 and lo[-1] == n, "level_offsets runs 0..N")
    lo64 = lo.astype(np.int64)  # differences of int32 values may overflow int32
    _check(np.all(np.diff(lo64) > 0), "every level is non-empty (levels are minimal)")
    _check(co[0] == 0 and co[-1] == len(ci), "child_offsets is CSR over N")
    arity = np.diff(co.astype(np.int64))
    _check(np.all(arity >= 0), "child_offsets is non-decreasing")
    _check(np.all((ci >= 0) & (ci < n)), "child ids lie in [0, N)")
    level = np.repeat(np.arange(len(lo) - 1), np.diff(lo64))
    parent_of_edge = np.repeat(np.arange(n), arity)
    _check(np.all(ci < parent_of_edge), "every child id is smaller than its parent's id")
    _check(np.array_equal(arity == 0, level == 0), "level 0 holds exactly the leaves")
    child_max = np.full(n, -1, dtype=np.int64)
    np.maximum.at(child_max, parent_of_edge, level[ci])
    internal = arity > 0
    _check(np.array_equal(level[internal], child_max[internal] + 1),
           "a node's level is 1 + the max level of its children (its height)")
    k = int(arity.max())
    _check(ct.shape == (n, k), f"child_table has shape [N, max_arity] = [{n}, {k}]")
    if k:
        cols = np.arange(len(ci)) - np.repeat(co[:-1].astype(np.int64), arity)
        _check(np.array_equal(ct[parent_of_edge, cols], ci), "child_table rows equal the CSR lists")
        _check(int(np.count_nonzero(ct != -1)) == len(ci), "child_table is -1 padded")
    nb = len(b.roots)
    ni = b.node_input
    _check(nb >= 1, "roots is non-empty")
    _check(np.all((ni >= 0) & (ni < nb)), "node_input lies in [0, batch_size)")
    _check(np.all((b.roots >= 0) & (b.roots < n)), "roots lie in [0, N)")
    _check(np.array_equal(ni[b.roots], np.arange(nb)), "roots[b] belongs to input b")
    _check(np.array_equal(ni[ci], ni[parent_of_edge]), "children belong to their parent's input")
    indeg = np.bincount(ci, minlength=n)
    is_root = np.zeros(n, dtype=bool)
    is_root[b.roots] = True
    _check(np.array_equal(indeg == 0, is_root), "exactly the roots have no parent")
    same_level = level[1:] == level[:-1]
    _check(np.all(np.diff(ni.astype(np.int64))[same_level] >= 0),
           "within a level nodes are ordered by input")
    if b.word_ids is not None:
        _check(_is_index(b.word_ids, 1) and len(b.word_ids) == n, "word_ids is int32 [N]")
        _check(np.all(b.word_ids >= -1), "word_ids are >= -1")
    if b.features is not None:
        f = b.features
        _check(f.dtype in (np.float64, np.float32) and f.ndim == 2 and f.shape[0] == n,
               "features is float64 or float32 [N, F]")
    if b.labels is not None:
        _check(_is_index(b.labels, 1) and len(b.labels) == n, "labels is int32 [N]")
    if b.origin is not None:
        try:
            size = len(b.origin)
        except TypeError:
            raise BatchTypeError("origin must be a sequence with one entry per node") from None
        _check(size == n, "origin has N entries")
