"""Level-1 specialization: the children of a level-1 node are leaves, whose states are tables.

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``), after gate stacking and
hoisting, before CSE/DCE and fusion groups. It adds the optional ``preterminal`` case (see
``cortex.core.frontend.graph``), which the lowering runs on level 1 and the reference evaluator checks.

Why it pays: a leaf's states depend only on its token when the model's only node input is a
word, so they can be tabulated over the vocabulary once, at bind time (derived params with recipe
``leaf_state``, ``[vocab, *state]``). Every node of level 1 has only leaves as children (level =
height), so in its case ``child_state(s, i)`` is ``embedding(leaf_state[s], child_input(word,
i))``, and a linear map of it is itself a table (``embed_linear``, as ``hoist_invariant`` makes
for the leaves' own projection): the stacked gate GEMV ``U_i h_i`` of a level-1 node becomes one
row read. In a binary parse tree about a third of the internal nodes are on level 1.

It is applied only when it removes at least half of the multiply-adds of the GEMVs on child
states (otherwise the level-1 nodes would still do the expensive part, now reading tables): all
of them where every child state is tabulated (TreeLSTM, TreeFC), two thirds in TreeGRU, whose
reset-gate and update-gate GEMVs become table rows while the candidate's ``U_n (r * h_k)``
stays a GEMV (``r`` depends on both children); for fixed arity >= 2 (a chain's level 1
is one node per sequence: not worth a table), and when each new table has at most
``max_table_elements`` entries (the same limit as ``hoist_invariant``: by default 2**24, 64 MiB in
float32; the ``max_table_mib`` compile option sets it, and its default is 128 MiB where the
tables are filled on use, see ``cortex.core.runtime.token_tables``). Each table row is the same dot product
the GEMV computed, summed in another order: results change by rounding only.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterable

from cortex.core.frontend.graph import REDUCING_OPS, Case, DerivedParam, RecursiveGraph, Value, leaf_state_shape
from cortex.core.passes._rewrite import CaseRewriter
from cortex.core.passes.dce import live_ids
from cortex.core.passes.hoist import DEFAULT_MAX_TABLE_ELEMENTS, hoist_case


def preterminal(graph: RecursiveGraph, max_table_elements: int = DEFAULT_MAX_TABLE_ELEMENTS) -> RecursiveGraph:
    """``graph`` with a ``preterminal`` case, or unchanged where it does not apply (see above)."""
    words = [i for i in graph.node_inputs if i.kind == "word"]
    if (graph.arity is None or graph.arity < 2 or len(graph.node_inputs) != 1 or not words
            or any(c.name == "preterminal" for c in graph.cases)):
        return graph
    specs = graph.param_specs()
    derived = list(graph.derived)
    case = tabled_children_case(graph, graph.case("internal"), range(graph.arity), "preterminal",
                                specs, derived, max_table_elements)
    if case is None:
        return graph
    internal = graph.case("internal")
    if 2 * gemv_work(case) > gemv_work(internal):
        return graph  # child states still feed most of the GEMVs: level 1 would not get cheaper
    return replace(graph, cases=graph.cases + (case,), derived=tuple(derived))


def tabled_children_case(graph: RecursiveGraph, internal: Case, indices: Iterable[int], name: str,
                         specs: dict, derived: list[DerivedParam], max_table_elements: int) -> Case | None:
    """``internal`` renamed ``name`` with the states of its children at ``indices`` read from
    leaf-state tables (those children are leaves) and every linear map of such a row made a table
    as well; a new table is declared in ``specs`` and appended to ``derived``. None where a
    table would exceed ``max_table_elements``. The graph must have one word input."""
    word = next(i for i in graph.node_inputs if i.kind == "word").name
    tabled = set(indices)
    leaf_reads = tuple(dict.fromkeys(v.attr("name") for v in _live(graph.case("leaf")) if v.op == "param"))
    rw = CaseRewriter(graph, replace(internal, name=name), specs)
    for v in internal.values:
        if v.op != "child_state" or v.attr("index") not in tabled:
            rw.copy(v)
            continue
        state, i = v.attr("state"), v.attr("index")
        table_name = f"leaf_state[{state}]"
        shape = leaf_state_shape(graph, state)
        if math.prod(shape) > max_table_elements:
            return None
        if table_name not in specs:
            d = DerivedParam(table_name, "leaf_state", leaf_reads, shape, graph.state_spec(state).dtype,
                             (("state", state),))
            specs[table_name] = d
            derived.append(d)
            rw.add_param_spec(d)
        table = rw.emit("param", (), (("name", table_name),))
        ids = rw.emit("child_input", (), (("name", word), ("index", i)))
        rw.remap[v.id] = rw.emit("embedding", (table, ids))
    # a linear map of a leaf-state row is a table as well: hoisting's rewrite, on this case only
    return hoist_case(graph, rw.finish(), specs, derived, max_table_elements)


def _live(case: Case) -> list[Value]:
    """The values some state depends on, in order."""
    live = live_ids(case)
    return [v for v in case.values if v.id in live]


def gemv_work(case: Case) -> int:
    """Multiply-adds per node of the case's live reductions over node values (a GEMV on a
    child state, a product with one), the work the tables take off level 1."""
    vmap = case.value_map()
    work = 0
    for v in _live(case):
        args = [vmap[a] for a in v.args]
        if v.op in REDUCING_OPS and any(a.domain != "invariant" for a in args):
            # the output's elements times the contracted length (a child count for a sum)
            contracted = args[0].shape[-1] if v.op in ("linear", "matmul") and args[0].shape else 2
            work += math.prod(v.shape) * contracted
    return work
