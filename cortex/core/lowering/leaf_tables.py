"""The leaf phase as row reads of the leaf-state tables (schedule knob ``leaf_tables``).

Pipeline position: lowering (:func:`cortex.core.lowering.lower.lower`), where the leaf loop is
built. A graph with a ``preterminal`` case (``cortex.core.passes.preterminal``) has a
``leaf_state`` table for the leaf states that level 1 reads: ``[vocab, *state]``, the leaf case
run on every token (filled row by row on first use on a host runtime,
``cortex.core.runtime.token_tables``). Where every state has one, a leaf's states are that
table's rows at its token: :func:`leaf_table_case` is the leaf case written so (one
``embedding`` per state), and the lowering emits the leaf loop from it instead of the leaf
case. A TreeLSTM leaf then copies two rows instead of computing two sigmoids and two tanh per
hidden unit from its token's input projection (the activations were most of the leaf phase:
TreeLSTM h256 b10 leaves 111 -> 36 us per thread, docs/llvm.md). A leaf case without such
activations (TreeFC: ``relu`` of one row) keeps its loop: the copy would cost the same.

The states are the same rows the level-1 case already reads for the leaves below it, so the
results change by rounding only (the table's rows are computed in NumPy, the leaf loop's in
the kernel). A token id below 0 (no word) reads zeros, as the level-1 case's table reads do.
The reference evaluator keeps running the leaf case (``cortex.core.frontend.reference``), which
is also what fills the tables: the graph itself is not changed.
"""

from __future__ import annotations

from cortex.core.frontend.graph import Case, RecursiveGraph, Value


#: Ops that make a leaf cost more than copying its states: where the leaf case has none (TreeFC's
#: ``relu(E_proj[x])`` reads one row and stores one), the copy saves nothing and is not made.
COSTLY_OPS = frozenset({"sigmoid", "tanh", "exp", "log"})


def leaf_tables(graph: RecursiveGraph) -> dict[str, str]:
    """``{state: leaf_state param}`` when every state of ``graph`` has a ``leaf_state`` table of
    its full shape, ``graph`` has a ``preterminal`` case and its leaf case evaluates a
    :data:`COSTLY_OPS` op, else ``{}``."""
    if not any(c.name == "preterminal" for c in graph.cases):
        return {}
    if not any(v.op in COSTLY_OPS for v in graph.case("leaf").values):
        return {}
    words = [i for i in graph.node_inputs if i.kind == "word"]
    if len(words) != 1 or len(graph.node_inputs) != 1:
        return {}
    vocab = int(words[0].vocab)
    tables = {d.attr("state"): d for d in graph.derived if d.recipe == "leaf_state"}
    out: dict[str, str] = {}
    for s in graph.states:
        d = tables.get(s.name)
        if d is None or tuple(d.shape) != (vocab,) + tuple(s.shape) or d.dtype != s.dtype:
            return {}
        out[s.name] = d.name
    return out


def leaf_table_case(graph: RecursiveGraph) -> Case | None:
    """The leaf case of ``graph`` as reads of its leaf-state tables (see the module docstring),
    or None where :func:`leaf_tables` finds none."""
    tables = leaf_tables(graph)
    if not tables:
        return None
    word = next(i for i in graph.node_inputs if i.kind == "word")
    specs = graph.param_specs()
    values = [Value(0, "input", (), (("name", word.name),), (), "int32", "node")]
    states: list[tuple[str, int]] = []
    for s in graph.states:
        spec = specs[tables[s.name]]
        table = Value(len(values), "param", (), (("name", spec.name),), tuple(spec.shape), spec.dtype,
                      "invariant")
        row = Value(len(values) + 1, "embedding", (table.id, 0), (), tuple(spec.shape[1:]), spec.dtype, "node")
        values += [table, row]
        states.append((s.name, row.id))
    return Case("leaf", tuple(values), tuple(states))
