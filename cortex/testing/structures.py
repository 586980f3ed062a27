"""The structure families of the conformance suite, in the forms users hand to an executable.

Pipeline position: the suite's second input. For a model's arity (fixed ``k``, variable
``None``, or ``1`` for sequence models) and a family name, :func:`family` returns a batch of
structures (a list) in user-facing forms — :class:`~cortex.core.linearize.EdgeList` for trees
and DAGs, :class:`~cortex.core.linearize.Sequence` for chains of sequence models,
:class:`~cortex.core.linearize.Grid` for grids — with random token ids or features, or ``None``
when the family does not apply to such a model (:func:`not_applicable` says why).

Families (``FAMILIES``), each deterministic for a seed:

=============  ==================================================================================
single_leaf    one structure of one node (no internal level at all)
chain          a deep, narrow structure: caterpillar of 12 internal nodes (fixed arity), a unary
               chain of 16 (variable arity), a sequence of 20
balanced       a full tree: depth 3 (binary: 15 nodes; 3-ary: 40 nodes)
random         parse-like trees: adjacent constituents merged at random (fixed arity), random
               recursive trees (variable arity); two inputs of different sizes
wide           a wide level: binary depth-5 tree (32 leaves) beside small trees; a node with 40
               children (variable arity); 12 sequences of lengths 1..12
dag            a DAG with shared children (a node read by several parents) and one sink
grid           DAG-RNN grids (4x5 and 1x7), cell (i, j) reading (i-1, j) and (i, j-1)
mixed          every other family (but long_chain) in one batch, shuffled: mixed sizes and depths
long_chain     about 10,000 nodes in one chain (caterpillar / unary chain / sequence)
=============  ==================================================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

FAMILIES = ("single_leaf", "chain", "balanced", "random", "wide", "dag", "grid", "mixed",
            "long_chain")
LONG_CHAIN_NODES = 10_000

Children = list[list[int]]  # children[v]: node v's children, in order; the root is nobody's child


def not_applicable(family: str, arity: int | None) -> str | None:
    """Why ``family`` does not apply to models of ``arity`` (``None`` when it does)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown structure family {family!r}; the suite has {list(FAMILIES)}")
    if arity == 1 and family in ("balanced", "random", "dag", "grid"):
        return f"a sequence model (arity 1) reads only chains, not a {family} structure"
    if arity is not None and arity > 1 and family == "grid":
        return (f"grid cells have 0, 1 or 2 children, which a fixed-arity-{arity} model "
                f"rejects; grids run on variable-arity models")
    return None


# ---- shapes (children lists) ------------------------------------------------------------------


def caterpillar(internal: int, k: int) -> Children:
    """Each internal node's child 0 is the previous spine node, its other children leaves."""
    children: Children = [[]]
    spine = 0
    for _ in range(internal):
        kids = [spine]
        for _ in range(k - 1):
            children.append([])
            kids.append(len(children) - 1)
        children.append(kids)
        spine = len(children) - 1
    return children


def unary_chain(n: int) -> Children:
    return [[]] + [[v - 1] for v in range(1, n)]


def balanced(depth: int, k: int) -> Children:
    children: Children = []
    level = []
    for _ in range(k ** depth):
        children.append([])
        level.append(len(children) - 1)
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), k):
            children.append(level[i:i + k])
            nxt.append(len(children) - 1)
        level = nxt
    return children


def parse_like(rng: np.random.Generator, leaves: int, k: int) -> Children:
    """Adjacent constituents merged k at a time at random positions, as in a parse."""
    children: Children = [[] for _ in range(leaves)]
    pending = list(range(leaves))
    while len(pending) > 1:
        while len(pending) < k:  # pad with a fresh leaf so every internal node has k children
            children.append([])
            pending.append(len(children) - 1)
        i = int(rng.integers(0, len(pending) - k + 1))
        children.append(pending[i:i + k])
        pending[i:i + k] = [len(children) - 1]
    return children


def random_recursive(rng: np.random.Generator, n: int) -> Children:
    """Variable arity: node v > 0 hangs under a random earlier node; node 0 is the root."""
    children: Children = [[] for _ in range(n)]
    for v in range(1, n):
        children[int(rng.integers(0, v))].append(v)
    return children


def dag(rng: np.random.Generator, leaves: int, inner: int, k: int | None) -> Children:
    """Inner nodes each read ``k`` (or 1..3) distinct earlier nodes, so children are shared;
    nodes nobody reads are merged into one sink (k at a time for a fixed arity)."""
    if leaves < (k or 3):
        raise ValueError(f"a DAG needs at least {k or 3} leaves to pick children from")
    children: Children = [[] for _ in range(leaves)]
    for _ in range(inner):
        v = len(children)
        want = k if k is not None else int(rng.integers(1, 4))
        children.append(sorted(int(c) for c in rng.choice(v, size=want, replace=False)))
    read = {c for cs in children for c in cs}
    orphans = [v for v in range(len(children)) if v not in read]
    if k is None:
        if len(orphans) > 1:
            children.append(orphans)
        return children
    while len(orphans) > 1:
        while len(orphans) < k:
            children.append([])
            orphans.append(len(children) - 1)
        children.append(orphans[:k])
        orphans = orphans[k:] + [len(children) - 1]
    return children


def _shapes(family: str, arity: int | None, rng: np.random.Generator) -> list[Any]:
    """Per input: a children list, ``("sequence", length)`` or ``("grid", rows, cols)``."""
    if arity == 1:
        return {
            "single_leaf": [("sequence", 1)],
            "chain": [("sequence", 20)],
            "wide": [("sequence", n) for n in range(1, 13)],
            "long_chain": [("sequence", LONG_CHAIN_NODES)],
        }[family]
    if arity is None:
        return {
            "single_leaf": lambda: [[[]]],
            "chain": lambda: [unary_chain(16)],
            "balanced": lambda: [balanced(3, 3)],
            "random": lambda: [random_recursive(rng, 30), random_recursive(rng, 12)],
            "wide": lambda: [[[] for _ in range(40)] + [list(range(40))],
                             [[], [], [], [0, 1, 2]]],
            "dag": lambda: [dag(rng, 4, 21, None)],
            "grid": lambda: [("grid", 4, 5), ("grid", 1, 7)],
            "long_chain": lambda: [unary_chain(LONG_CHAIN_NODES)],
        }[family]()
    k = arity
    return {
        "single_leaf": lambda: [[[]]],
        "chain": lambda: [caterpillar(12, k)],
        "balanced": lambda: [balanced(3, k)],
        "random": lambda: [parse_like(rng, 15, k), parse_like(rng, 6, k)],
        "wide": lambda: [balanced(5 if k == 2 else 3, k), [[]], parse_like(rng, 3, k),
                         balanced(1, k)],
        "dag": lambda: [dag(rng, 6, 14, k)],
        "long_chain": lambda: [caterpillar((LONG_CHAIN_NODES - 1) // k, k)],
    }[family]()


# ---- user-facing forms ------------------------------------------------------------------------


def _node_inputs(rng: np.random.Generator, n: int, vocab: int | None, features: int | None):
    words = rng.integers(0, vocab, n) if vocab else None
    feats = rng.normal(size=(n, features)) if features else None
    return words, feats


def structure_form(shape: Any, rng: np.random.Generator, vocab: int | None,
                   features: int | None) -> Any:
    """One structure in a user-facing form: ``shape`` is a children list (an
    :class:`~cortex.core.linearize.EdgeList`), ``("sequence", length)`` or ``("grid", rows,
    cols)``; random token ids below ``vocab`` or ``features``-sized feature vectors."""
    from cortex.core.linearize import EdgeList, Grid, Sequence

    if isinstance(shape, tuple) and shape[0] == "sequence":
        words, feats = _node_inputs(rng, shape[1], vocab, features)
        return Sequence(words if words is not None else feats)
    if isinstance(shape, tuple) and shape[0] == "grid":
        _, rows, cols = shape
        words, feats = _node_inputs(rng, rows * cols, vocab, features)
        return Grid(rows, cols, words=words, features=feats)
    edges = [(v, c) for v, cs in enumerate(shape) for c in cs]
    words, feats = _node_inputs(rng, len(shape), vocab, features)
    return EdgeList(len(shape), edges, words=words, features=feats)


def family(name: str, arity: int | None, *, vocab: int | None = None,
           features: int | None = None, seed: int = 0) -> list[Any] | None:
    """The batch (a list of structures) of family ``name`` for a model of ``arity`` reading
    token ids below ``vocab`` or ``features``-sized feature vectors; ``None`` when the family
    does not apply (see :func:`not_applicable`)."""
    if not_applicable(name, arity) is not None:
        return None
    rng = np.random.default_rng([seed, FAMILIES.index(name)])
    if name == "mixed":
        parts = [family(f, arity, vocab=vocab, features=features, seed=seed)
                 for f in FAMILIES if f not in ("mixed", "long_chain")]
        batch = [s for p in parts if p is not None for s in p]
        order = rng.permutation(len(batch))
        return [batch[i] for i in order]
    return [structure_form(shape, rng, vocab, features) for shape in _shapes(name, arity, rng)]
