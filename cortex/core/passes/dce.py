"""Dead-code elimination: drop values no state depends on, and derived params nobody reads.

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``), run after every pass
that leaves orphans (constant folding, gate stacking, hoisting). Values are renumbered densely.
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core.frontend.graph import Case, RecursiveGraph
from cortex.core.passes._rewrite import CaseRewriter


def live_ids(case: Case) -> set[int]:
    """The ids of the values some state of ``case`` depends on."""
    live = {i for _, i in case.states}
    for v in reversed(case.values):
        if v.id in live:
            live.update(v.args)
    return live


def _dce_case(graph: RecursiveGraph, case: Case) -> Case:
    live = live_ids(case)
    rw = CaseRewriter(graph, case)
    for v in case.values:
        if v.id in live:
            rw.copy(v)
    return rw.finish()


def dce(graph: RecursiveGraph) -> RecursiveGraph:
    """Remove dead values from every case and unused derived params."""
    cases = tuple(_dce_case(graph, c) for c in graph.cases)
    used = {v.attr("name") for c in cases for v in c.values if v.op == "param"}
    keep = []
    for d in reversed(graph.derived):  # later derived params may read earlier ones
        if d.name in used:
            keep.append(d)
            used.update(d.args)
    return replace(graph, cases=cases, derived=tuple(reversed(keep)))
