"""Elementwise fusion groups: annotate (not lower) maximal groups of elementwise values.

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``), last in the pipeline
(rewriting passes emit fresh, unannotated values). The recursion lowering emits every group in
one loop nest, so intermediate results stay in registers.

Two elementwise values (add, sub, mul, sigmoid, tanh, relu) are in the same group when one is
an argument of the other and they have the same domain and shape; groups are the connected
components of that relation, numbered per case in order of first appearance. Every elementwise
value gets a group (possibly of one). The pass changes annotations only, never values.
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core.frontend.graph import Case, ELEMENTWISE_OPS, RecursiveGraph
from cortex.core.passes._rewrite import map_cases


def _group_case(graph: RecursiveGraph, case: Case) -> Case:
    vmap = case.value_map()
    parent = {v.id: v.id for v in case.values if v.op in ELEMENTWISE_OPS}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for v in case.values:
        if v.id not in parent:
            continue
        for a in v.args:
            u = vmap[a]
            if u.id in parent and (u.domain, u.shape) == (v.domain, v.shape):
                ra, rb = find(u.id), find(v.id)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
    numbers: dict[int, int] = {}
    values = []
    for v in case.values:
        group = None
        if v.id in parent:
            group = numbers.setdefault(find(v.id), len(numbers))
        values.append(replace(v, group=group))
    return replace(case, values=tuple(values))


def fusion_groups(graph: RecursiveGraph) -> RecursiveGraph:
    return map_cases(graph, _group_case)
