"""One input, flattened: the per-input arrays the batch assembler concatenates.

Pipeline position: the readers of each input form (``nested``, ``sexpr``, ``arrays``) produce a
:class:`Part`; ``assemble`` validates and combines the parts of a batch into a LinearizedBatch.
Parts may be cached and shared between calls, so nothing downstream mutates them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


class PathKeys:
    """Keys ``"root.1.0"`` computed lazily from each node's (first) parent and child position."""

    __slots__ = ("parent", "pos", "_paths")

    def __init__(self, parent: list[int] | np.ndarray, pos: list[int] | np.ndarray | None = None):
        self.parent = parent
        self.pos = pos  # None: a pre-order tree, positions are sibling counts
        self._paths: list[str] | None = None

    def __call__(self, v: int) -> str:
        if self._paths is None:
            # Pre-order numbering: a parent always precedes its child, so one forward pass works.
            parent = list(self.parent)
            pos = sibling_positions(parent) if self.pos is None else list(self.pos)
            paths = [""] * len(parent)
            for u in range(len(parent)):
                p = parent[u]
                paths[u] = "root" if p < 0 else f"{paths[p]}.{pos[u]}"
            self._paths = paths
        return self._paths[v]

    def index(self, key: str) -> int:
        self(0)
        assert self._paths is not None
        return self._paths.index(key)


def sibling_positions(parent: list[int]) -> list[int]:
    """Child positions of a pre-order numbered tree (siblings appear in order)."""
    count = [0] * (len(parent) + 1)
    pos = []
    for p in parent:
        pos.append(count[p])
        count[p] += 1
    return pos


def path_of(parent: list[int], pos: list[int] | None, v: int) -> str:
    """The path of node ``v`` while a pre-order flatten is still running (error reporting)."""
    if pos is None:
        pos = sibling_positions(parent)
    steps = []
    while parent[v] >= 0:
        steps.append(str(pos[v]))
        v = parent[v]
    return ".".join(["root", *reversed(steps)])


def id_key(v: int) -> int:
    """Array forms: the key is the user's own node id."""
    return int(v)


class GridKeys:
    __slots__ = ("cols",)

    def __init__(self, cols: int):
        self.cols = cols

    def __call__(self, v: int) -> tuple[int, int]:
        return divmod(int(v), self.cols)


class Part:
    """One input as local arrays. Exactly one of ``parent`` / ``edges`` is set.

    * ``parent``: integer [n], parent of each node (-1 = root); children ordered by node id.
    * ``edges``: (parent int64 [E], child int64 [E]); each parent's edges in child order.
    * ``words``: int64 [n] (-1 = no token) or None; ``features``: float64 [n, F] or None;
      ``labels``: int64 [n] (-1 = none) or None.
    * ``keys``: local node id -> the user's key for that node.
    * ``trusted``: produced by our own readers: indices in range, exactly one root, acyclic.
    * ``height``: int64 [n] per-node height when the reader computed it (trusted parts only).

    A plain slotted class rather than a dataclass: one is built per input per call.
    """

    __slots__ = ("n", "parent", "edges", "words", "features", "labels", "keys", "trusted",
                 "height")

    def __init__(self, n: int, parent: np.ndarray | None,
                 edges: tuple[np.ndarray, np.ndarray] | None, words: np.ndarray | None,
                 features: np.ndarray | None, labels: np.ndarray | None,
                 keys: Callable[[int], Any], trusted: bool = False,
                 height: np.ndarray | None = None):
        self.n = n
        self.parent = parent
        self.edges = edges
        self.words = words
        self.features = features
        self.labels = labels
        self.keys = keys
        self.trusted = trusted
        self.height = height


def tree_heights(parent: list[int]) -> np.ndarray:
    """Heights of a pre-order numbered tree (every parent precedes its children)."""
    n = len(parent)
    h = [0] * n
    for v in range(n - 1, 0, -1):
        p = parent[v]
        hv = h[v] + 1
        if hv > h[p]:
            h[p] = hv
    return np.array(h, dtype=np.int64)
