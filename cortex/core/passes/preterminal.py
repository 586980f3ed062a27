"""Level-1 specialization: the children of a level-1 node are leaves, whose states are tables.

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``), after gate stacking and
hoisting, before CSE/DCE and fusion groups. It adds the optional ``preterminal`` case (see
``cortex.core.graph``), which the lowering runs on level 1 and the reference evaluator checks.

Why it pays: a leaf's states depend only on its token when the model's only node input is a
word, so they can be tabulated over the vocabulary once, at bind time (derived params with recipe
``leaf_state``, ``[vocab, *state]``). Every node of level 1 has only leaves as children (level =
height), so in its case ``child_state(s, i)`` is ``embedding(leaf_state[s], child_input(word,
i))``, and a linear map of it is itself a table (``embed_linear``, as ``hoist_invariant`` makes
for the leaves' own projection): the stacked gate GEMV ``U_i h_i`` of a level-1 node becomes one
row read. In a binary parse tree about a third of the internal nodes are on level 1.

It is applied only when it removes every GEMV on a child state (otherwise the level-1 nodes
would still do the expensive part, now reading tables), for fixed arity >= 2 (a chain's level 1
is one node per sequence: not worth a table), and when each new table has at most
``max_table_elements`` entries (the same limit as ``hoist_invariant``: by default 2**24, 64 MiB in
float32; the ``max_table_mib`` compile option raises it). Each table row is the same dot product
the GEMV computed, summed in another order: results change by rounding only.
"""

from __future__ import annotations

import math
from dataclasses import replace

from cortex.core.graph import (REDUCING_OPS, Case, DerivedParam, RecursiveGraph, Value, derived_shape,
                               leaf_state_shape)
from cortex.core.passes._rewrite import CaseRewriter
from cortex.core.passes.dce import live_ids
from cortex.core.passes.hoist import DEFAULT_MAX_TABLE_ELEMENTS


def preterminal(graph: RecursiveGraph, max_table_elements: int = DEFAULT_MAX_TABLE_ELEMENTS) -> RecursiveGraph:
    """``graph`` with a ``preterminal`` case, or unchanged where it does not apply (see above)."""
    words = [i for i in graph.node_inputs if i.kind == "word"]
    if (graph.arity is None or graph.arity < 2 or len(graph.node_inputs) != 1 or not words
            or any(c.name == "preterminal" for c in graph.cases)):
        return graph
    word = words[0].name
    specs = graph.param_specs()
    internal = graph.case("internal")
    vmap = internal.value_map()
    leaf_reads = tuple(dict.fromkeys(v.attr("name") for v in _live(graph.case("leaf")) if v.op == "param"))
    new: list[DerivedParam] = []
    rw = CaseRewriter(graph, replace(internal, name="preterminal"), specs)

    def derived(name: str, recipe: str, args: tuple[str, ...], shape: tuple[int, ...], dtype: str,
                attrs: tuple = ()) -> str | None:
        """The table ``name`` (declared once), or None when it is over the limit."""
        if math.prod(shape) > max_table_elements:
            return None
        if name not in specs:
            d = DerivedParam(name, recipe, args, tuple(shape), dtype, tuple(attrs))
            specs[name] = d
            new.append(d)
            rw.add_param_spec(d)
        return name

    tables: dict[int, str] = {}  # new embedding value id -> the leaf_state table it reads
    for v in internal.values:
        if v.op == "child_state":
            state, i = v.attr("state"), v.attr("index")
            name = derived(f"leaf_state[{state}]", "leaf_state", leaf_reads,
                           leaf_state_shape(graph, state), graph.state_spec(state).dtype, (("state", state),))
            if name is None:
                return graph
            t = rw.emit("param", (), (("name", name),))
            ids = rw.emit("child_input", (), (("name", word), ("index", i)))
            rw.remap[v.id] = rw.emit("embedding", (t, ids))
            tables[rw.remap[v.id]] = name
            continue
        if v.op == "linear" and rw.remap[v.args[1]] in tables \
                and all(vmap[a].op == "param" for a in v.args[:1] + v.args[2:]):
            emb = rw.get(rw.remap[v.args[1]])
            names = (tables[emb.id],) + tuple(vmap[a].attr("name") for a in v.args[:1] + v.args[2:])
            name = derived("embed_linear[" + ",".join(names) + "]", "embed_linear", names,
                           derived_shape("embed_linear", [specs[n] for n in names]), v.dtype)
            if name is None:
                return graph
            t = rw.emit("param", (), (("name", name),))
            rw.remap[v.id] = rw.emit("embedding", (t, emb.args[1]))
            continue
        rw.copy(v)
    case = rw.finish()
    if any(v.op in REDUCING_OPS and _reads_node_values(v, case) for v in _live(case)):
        return graph  # a child state still feeds a GEMV: level 1 would not get cheaper
    return replace(graph, cases=graph.cases + (case,), derived=graph.derived + tuple(new))


def _live(case: Case) -> list[Value]:
    """The values some state depends on, in order."""
    live = live_ids(case)
    return [v for v in case.values if v.id in live]


def _reads_node_values(v: Value, case: Case) -> bool:
    vmap = case.value_map()
    return any(vmap[a].domain != "invariant" for a in v.args)
