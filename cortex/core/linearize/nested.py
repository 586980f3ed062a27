"""Reader for nested Python structures: tuples/lists, objects with ``children``, ``ast`` trees.

Pipeline position: ``linearize`` calls :func:`flatten_nested` for each such input; it makes
one iterative pre-order pass (no recursion: a 100,000-deep nest works) and returns a
:class:`Part`. Heights and the level order are computed later, batch-wide, in NumPy.

Interpretation rules are in ``forms``' docstring: tuples, lists and ``ast`` nodes are values
(a repeated one is copied), other objects with ``children`` are identities (reached twice = one
shared DAG node). A container reached again while it is being expanded is a cycle.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from .ast_types import AST_TYPE_IDS, AST_UNKNOWN
from .errors import CycleError, EmptyBatchError, TokenError, UnsupportedInputError
from .parts import Part, PathKeys, path_of, tree_heights
from .tokens import resolve_words

_EXIT = object()  # stack marker: the container whose id follows is fully expanded


def flatten_nested(root: Any, vocab: Any, index: int) -> Part:
    parent: list[int] = []
    pos: list[int] = []
    words: list[Any] = []
    labels: list[int] = []
    extra: list[tuple[int, int, int]] = []  # (parent, child, position) for shared DAG nodes
    memo: dict[int, int] = {}  # id(object node) -> node id, for identity-shared nodes
    onpath: set[int] = set()
    stack: list[tuple[Any, int, int]] = [(root, -1, 0)]
    push = stack.append
    pop = stack.pop
    has_label = False
    iter_ast = ast.iter_child_nodes

    def where(v: int) -> str:
        return path_of(parent, pos, v)

    while stack:
        obj, par, i = pop()
        if obj is _EXIT:
            onpath.discard(par)
            continue
        t = type(obj)
        if t is str or t is int:
            if t is int and obj < 0:
                parent.append(par), pos.append(i)
                raise TokenError(f"negative token id {obj}", input_index=index,
                                 path=where(len(parent) - 1))
            parent.append(par)
            pos.append(i)
            words.append(obj)
            labels.append(-1)
            continue
        if t is tuple or t is list:
            v = len(parent)
            parent.append(par)
            pos.append(i)
            words.append(-1)
            labels.append(-1)
            k = len(obj)
            if k == 0:
                raise EmptyBatchError("empty tuple/list: a nested tree's leaves are tokens",
                                      input_index=index, path=where(v))
            if t is list:
                oid = id(obj)
                if oid in onpath:
                    raise CycleError("this list contains itself", input_index=index,
                                     path=where(v))
                onpath.add(oid)
                push((_EXIT, oid, 0))
            for j in range(k - 1, -1, -1):
                push((obj[j], v, j))
            continue
        if isinstance(obj, ast.AST):
            v = len(parent)
            parent.append(par)
            pos.append(i)
            words.append(AST_TYPE_IDS.get(t.__name__, AST_UNKNOWN))
            labels.append(-1)
            oid = id(obj)
            if oid in onpath:
                raise CycleError("this ast node contains itself", input_index=index,
                                 path=where(v))
            kids = list(iter_ast(obj))
            if kids:
                onpath.add(oid)
                push((_EXIT, oid, 0))
                for j in range(len(kids) - 1, -1, -1):
                    push((kids[j], v, j))
            continue
        if isinstance(obj, np.integer) and not isinstance(obj, np.bool_):
            push((int(obj), par, i))
            continue
        kids = getattr(obj, "children", None)
        if kids is None or isinstance(obj, (bool, float, bytes, np.ndarray)):
            parent.append(par)
            pos.append(i)
            raise UnsupportedInputError(
                f"cannot read {t.__name__} {obj!r:.60} as a tree node: expected a tuple/list, "
                "a str or int token, an ast node or an object with .children",
                input_index=index, path=where(len(parent) - 1))
        oid = id(obj)
        if oid in memo:  # shared node: one more parent, same node
            if oid in onpath:
                raise CycleError(f"node {where(memo[oid])} is its own descendant",
                                 input_index=index, path=where(par))
            extra.append((par, memo[oid], i))
            continue
        v = len(parent)
        memo[oid] = v
        parent.append(par)
        pos.append(i)
        w = getattr(obj, "word", None)
        words.append(-1 if w is None else w)
        lab = getattr(obj, "label", None)
        if lab is not None:
            if not isinstance(lab, (int, np.integer)) or isinstance(lab, bool):
                raise TokenError(f"label {lab!r} is not an int", input_index=index,
                                 path=where(v))
            has_label = True
        labels.append(-1 if lab is None else int(lab))
        kids = list(kids)
        if kids:
            onpath.add(oid)
            push((_EXIT, oid, 0))
            for j in range(len(kids) - 1, -1, -1):
                push((kids[j], v, j))

    n = len(parent)
    word_arr = resolve_words(words, vocab, where, index)
    label_arr = np.array(labels, dtype=np.int64) if has_label else None
    keys = PathKeys(parent, pos)
    par_arr = np.array(parent, dtype=np.int64)
    if not extra:
        return Part(n, par_arr, None, word_arr, None, label_arr, keys, trusted=True,
                    height=tree_heights(parent))
    # A DAG: the tree edges plus the extra ones, each parent's edges in child-position order.
    child = np.flatnonzero(par_arr >= 0)
    ep = np.concatenate([par_arr[child], np.array([e[0] for e in extra], dtype=np.int64)])
    ec = np.concatenate([child, np.array([e[1] for e in extra], dtype=np.int64)])
    ek = np.concatenate([np.array(pos, dtype=np.int64)[child],
                         np.array([e[2] for e in extra], dtype=np.int64)])
    order = np.lexsort((ek, ep))
    return Part(n, None, (ep[order], ec[order]), word_arr, None, label_arr, keys, trusted=True)
