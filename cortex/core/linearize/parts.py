"""One input, flattened: the per-input arrays the batch assembler concatenates.

Pipeline position: the readers of each input form (``nested``, ``sexpr``, ``arrays``) produce a
:class:`Part`; ``assemble`` validates and combines the parts of a batch into a LinearizedBatch.
Parts may be cached and shared between calls, so nothing downstream mutates them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


class PathKeys:
    """Keys ``"root.1.0"`` computed on demand from each node's (first) parent and position.

    One key costs O(depth) (deep chains make long paths, so keys are never built eagerly);
    the positions and the child lists for :meth:`index` are computed once, on first use.
    """

    __slots__ = ("parent", "pos", "_kids")

    def __init__(self, parent: list[int] | np.ndarray, pos: list[int] | np.ndarray | None = None):
        self.parent = parent
        self.pos = pos  # None: a pre-order tree, positions are sibling counts
        self._kids: list[list[int]] | None = None

    def _positions(self) -> list[int]:
        if self.pos is None:
            self.pos = sibling_positions(list(self.parent))
        return list(self.pos) if not isinstance(self.pos, list) else self.pos

    def __call__(self, v: int) -> str:
        return path_of(self.parent, self._positions(), v)

    def index(self, key: str) -> int:
        """The node id of path ``key``; ValueError when no node has that path."""
        if self._kids is None:
            pos = self._positions()
            kids: list[list[int]] = [[] for _ in range(len(self.parent))]
            for u, p in enumerate(self.parent):
                if p >= 0:
                    lst = kids[p]
                    while len(lst) <= pos[u]:
                        lst.append(-1)
                    lst[pos[u]] = u
            self._kids = kids
        steps = key.split(".")
        if steps[0] != "root":
            raise ValueError(f"not a tree path: {key!r}")
        v = 0
        for step in steps[1:]:
            i = int(step)
            if not 0 <= i < len(self._kids[v]) or self._kids[v][i] < 0:
                raise ValueError(f"no node at {key!r}")
            v = self._kids[v][i]
        return v


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
