"""Hoisting node-invariant work: ``linear(W, embedding(E, w), b)`` -> ``embedding(E', w)``.

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``), after gate stacking, so
a leaf's stacked gate projection of its word embedding becomes one table lookup.

A linear map of an embedding row depends only on the token id, so the whole product table
``E' = E @ W.T (+ b)`` ([vocab, out]) can be computed once at bind time (a derived param with
recipe ``embed_linear``), replacing a GEMV per node by a row copy. It is applied when the new
table has at most ``max_table_elements`` entries (default 2**24, i.e. 64 MiB in float32): a
larger table would trade the GEMV for memory traffic and footprint a user did not ask for.
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core.frontend.graph import Case, DerivedParam, ParamSpec, RecursiveGraph, derived_shape
from cortex.core.passes._rewrite import CaseRewriter

DEFAULT_MAX_TABLE_ELEMENTS = 1 << 24


def hoist_invariant(graph: RecursiveGraph, max_table_elements: int = DEFAULT_MAX_TABLE_ELEMENTS) -> RecursiveGraph:
    specs = graph.param_specs()
    derived = list(graph.derived)
    cases = tuple(hoist_case(graph, case, specs, derived, max_table_elements) for case in graph.cases)
    return replace(graph, cases=cases, derived=tuple(derived))


def hoist_case(graph: RecursiveGraph, case: Case, specs: dict[str, ParamSpec | DerivedParam],
               derived: list[DerivedParam], max_table_elements: int) -> Case:
    """``case`` with its hoistable linears made table lookups; a new table is declared in
    ``specs`` and appended to ``derived`` (shared by the cases of one graph)."""
    vmap = case.value_map()
    rw = CaseRewriter(graph, case, specs)
    for v in case.values:
        if v.op == "linear":
            x = vmap[v.args[1]]
            params = [vmap[a] for a in (v.args[:1] + v.args[2:])]
            if x.op == "embedding" and all(p.op == "param" for p in params) and vmap[x.args[0]].op == "param":
                table = vmap[x.args[0]]
                names = (table.attr("name"),) + tuple(p.attr("name") for p in params)
                shape = derived_shape("embed_linear", [specs[n] for n in names])
                if shape[0] * shape[1] <= max_table_elements:
                    name = "embed_linear[" + ",".join(names) + "]"
                    if name not in specs:
                        d = DerivedParam(name, "embed_linear", names, shape, v.dtype)
                        derived.append(d)
                        specs[name] = d
                        rw.add_param_spec(d)
                    t = rw.emit("param", (), (("name", name),))
                    rw.remap[v.id] = rw.emit("embedding", (t, rw.remap[x.args[1]]))
                    continue
        rw.copy(v)
    return rw.finish()
