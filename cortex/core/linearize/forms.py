"""Typed descriptions of input structures, for forms a raw Python object cannot make clear.

Pipeline position: user code builds these (or ``cortex.data`` readers do) and hands them to
``cortex.core.linearize.linearize``. How raw objects are interpreted (documented in docs/data.md):

* a ``list`` passed to ``linearize`` is a batch; one of its elements that is a list or tuple is
  a nested tree;
* a ``tuple`` / ``list`` is a nested tree: tuples and lists are internal nodes (children in
  order), ``str`` or ``int`` leaves are tokens (str through the vocabulary, int used as the id);
* a ``str`` is a PTB/SST s-expression, e.g. ``"(3 (2 It) (4 fine))"``;
* an ``ast.AST`` is a Python syntax tree (token = node-type id, see ``ast_types``);
* any other object with a ``children`` attribute is a tree node (optional ``word`` and ``label``
  attributes); the same object reached twice is ONE shared node (a DAG), reaching an ancestor
  again is a cycle. Tuples, lists and ``ast`` nodes are values: repeated ones are copied.
* NumPy arrays are ambiguous (sequence? parent array?): wrap them in one of the classes below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import UnsupportedInputError


def count_arg(owner: str, name: str, value: Any) -> None:
    """A declared count (``Grid.rows``, ``EdgeList.num_nodes``) must be an int: a float, a
    string or a bool is refused where it is given, not truncated or misread later. Its range
    (>= 1, the size limits) is checked when the input is linearized, which names the input."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise UnsupportedInputError(
            f"{owner}.{name} must be an int, got {type(value).__name__} {value!r}")


@dataclass(frozen=True, eq=False)
class Node:
    """A tree / DAG node object: ``children`` in order, an optional token and label."""

    children: tuple[Any, ...] = ()
    word: int | str | None = None
    label: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "children", tuple(self.children))


@dataclass(frozen=True, eq=False)
class Tree:
    """Forces ``root`` (nested tuples/lists or node objects) to be read as one tree."""

    root: Any
    vocab: Any = None


@dataclass(frozen=True, eq=False)
class SExpr:
    """A PTB/SST s-expression: ``(label child ...)``; ``(label word)`` is a leaf.

    ``vocab`` maps words to ids; ``label_vocab`` maps non-integer labels (``NP``) to ids.
    The parse result is memoized on the object (it is immutable).
    """

    text: str
    vocab: Any = None
    label_vocab: Any = None
    _parsed: list = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise UnsupportedInputError(f"SExpr.text must be a str, got {type(self.text).__name__}")


@dataclass(frozen=True, eq=False)
class ParentArray:
    """A tree as ``parents[i]`` = parent of node i (0-based), ``-1`` for the single root.

    Children of a node are ordered by their node id. ``words``: int ids (``-1`` = no token) or
    strings (through the vocabulary); ``features``: ``[n, F]``; ``labels``: ints, -1 = none.
    """

    parents: Any
    words: Any = None
    features: Any = None
    labels: Any = None
    vocab: Any = None


@dataclass(frozen=True, eq=False)
class ChildTable:
    """A tree or DAG as ``table[i]`` = children of node i, padded on the right with ``-1``.

    The root is the one node no row names as a child.
    """

    table: Any
    words: Any = None
    features: Any = None
    labels: Any = None
    vocab: Any = None


@dataclass(frozen=True, eq=False)
class EdgeList:
    """A DAG with ``num_nodes`` nodes and ``edges`` = ``(parent, child)`` pairs.

    A node's children are ordered as its edges appear. A child listed under several parents is
    one shared node (computed once). The root (sink) is the one node that is nobody's child.
    """

    num_nodes: int
    edges: Any
    words: Any = None
    features: Any = None
    labels: Any = None
    vocab: Any = None

    def __post_init__(self) -> None:
        count_arg("EdgeList", "num_nodes", self.num_nodes)


@dataclass(frozen=True, eq=False)
class Sequence:
    """A sequence as a chain: element t has the single child t-1; the root is the last element.

    ``items``: tokens (1-D ints or strings) or features (a 2-D ``[T, F]`` float array).
    """

    items: Any
    vocab: Any = None


@dataclass(frozen=True, eq=False)
class Grid:
    """A DAG-RNN grid: cell (i, j) has children (i-1, j) then (i, j-1) when present.

    Node ids are row-major ``i * cols + j``; the root is the last cell. ``words``: ``[rows, cols]``
    or flat ids; ``features``: ``[rows, cols, F]`` or ``[rows*cols, F]``.
    """

    rows: int
    cols: int
    words: Any = None
    features: Any = None
    vocab: Any = None

    def __post_init__(self) -> None:
        count_arg("Grid", "rows", self.rows)
        count_arg("Grid", "cols", self.cols)
