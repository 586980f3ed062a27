"""Distributing a child reduction over a linear map: ``Σ_c W x_c`` -> ``W (Σ_c x_c)``.

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``), after gate stacking
and hoisting, before the final CSE/DCE and fusion groups.

``reduce_children(linear(W, x), kind)`` with a parameter ``W``, no bias and the ``linear``
used only there becomes ``linear(W, reduce_children(x, kind))`` (``sum`` and ``mean`` are
linear; a bias would be added once per child, so it is left alone). A node with ``n``
children then does one GEMV instead of ``n`` (DAG-RNN: ``Σ_pred W h_p``), and the GEMV's
range no longer depends on the node's child count, so the lowering emits it as a plain
node-level GEMV next to the node's others (the ``llvm`` target jams and fuses those; a
per-node CSR range around a GEMV it runs node by node). The child sum itself becomes a short
elementwise nest. Results change only by float rounding (the sum is taken before the product).
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core.frontend.graph import RecursiveGraph
from cortex.core.passes._rewrite import CaseRewriter, uses


def distribute_linear(graph: RecursiveGraph) -> RecursiveGraph:
    cases = []
    for case in graph.cases:
        vmap = case.value_map()
        n_uses = uses(case)
        rw = CaseRewriter(graph, case)
        for v in case.values:
            if v.op == "reduce_children" and v.attr("kind", "sum") in ("sum", "mean"):
                lin = vmap[v.args[0]]
                if (lin.op == "linear" and len(lin.args) == 2 and vmap[lin.args[0]].op == "param"
                        and n_uses[lin.id] == 1):
                    total = rw.emit("reduce_children", (rw.remap[lin.args[1]],), v.attrs)
                    rw.remap[v.id] = rw.emit("linear", (rw.remap[lin.args[0]], total))
                    continue
            rw.copy(v)
        cases.append(rw.finish())
    return replace(graph, cases=tuple(cases))
