"""Python source -> trees whose tokens are ``ast`` node-type ids.

Pipeline position: user code turns source text (or an ``ast`` tree) into a ``Node`` tree that
``linearize`` accepts; each node's ``word`` is the id of its class name in the fixed table
``cortex.core.linearize.ast_types.AST_NODE_TYPES`` (0 = unknown class), so an AST model's
vocabulary size is ``AST_VOCAB_SIZE``. Children are ``ast.iter_child_nodes`` in order
(expression contexts and operators included). The conversion is iterative (no recursion).
"""

from __future__ import annotations

import ast

from ..core.linearize import Node, ParseError
from ..core.linearize.ast_types import AST_NODE_TYPES, AST_VOCAB_SIZE, ast_type_id

__all__ = ["ast_tree", "AST_NODE_TYPES", "AST_VOCAB_SIZE"]


def ast_tree(source: str | ast.AST) -> Node:
    """A ``Node`` tree for Python ``source`` (text) or an already parsed ``ast`` tree."""
    if isinstance(source, str):
        try:
            root = ast.parse(source)
        except SyntaxError as e:
            raise ParseError(f"Python source does not parse: {e.msg} (line {e.lineno})") from None
    elif isinstance(source, ast.AST):
        root = source
    else:
        raise TypeError(f"ast_tree expects source text or an ast.AST, got {type(source).__name__}")
    # Pre-order list of (ast node, parent index), then build Nodes bottom-up (reverse order).
    order: list[ast.AST] = []
    parent: list[int] = []
    stack: list[tuple[ast.AST, int]] = [(root, -1)]
    visited = 0
    while stack:
        node, p = stack.pop()
        visited += 1
        if visited > 50_000_000:
            raise ParseError("ast tree too large (or cyclic)")
        v = len(order)
        order.append(node)
        parent.append(p)
        kids = list(ast.iter_child_nodes(node))
        for k in reversed(kids):
            stack.append((k, v))
    children: list[list[Node]] = [[] for _ in order]
    built: list[Node | None] = [None] * len(order)
    for v in range(len(order) - 1, -1, -1):
        kids = children[v]
        kids.reverse()  # filled last child first
        built[v] = Node(tuple(kids), word=ast_type_id(order[v]))
        if parent[v] >= 0:
            children[parent[v]].append(built[v])
    assert built[0] is not None
    return built[0]
