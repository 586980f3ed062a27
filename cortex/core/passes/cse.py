"""Common-subexpression elimination: one value per distinct (op, args, attrs).

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``). ``add`` and ``mul``
are commutative, so their arguments are compared as a sorted pair. Every op of the IR is pure
(no side effects, no randomness), so merging is always safe. Values are renumbered densely;
the dead duplicates disappear here, not in DCE.
"""

from __future__ import annotations

from cortex.core.frontend.graph import Case, RecursiveGraph
from cortex.core.passes._rewrite import CaseRewriter, map_cases

COMMUTATIVE = ("add", "mul")


def _cse_case(graph: RecursiveGraph, case: Case) -> Case:
    rw = CaseRewriter(graph, case)
    seen: dict[tuple, int] = {}
    for v in case.values:
        args = tuple(rw.remap[a] for a in v.args)
        key_args = tuple(sorted(args)) if v.op in COMMUTATIVE else args
        key = (v.op, key_args, v.attrs)
        if key in seen:
            rw.remap[v.id] = seen[key]
        else:
            seen[key] = rw.copy(v)
    return rw.finish()


def cse(graph: RecursiveGraph) -> RecursiveGraph:
    return map_cases(graph, _cse_case)
