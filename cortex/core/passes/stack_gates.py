"""Gate stacking (horizontal fusion): several ``linear``s of one input -> one stacked matmul.

Pipeline position: a graph pass (``RecursiveGraph -> RecursiveGraph``), after CSE (which makes
"the same input" one value id) and before hoisting (which can then precompute a stacked table).

``linear(W_1, x, b_1) ... linear(W_k, x, b_k)`` with every ``W_j`` (and ``b_j``) a parameter
become ``y = linear(stack[W_1,...,W_k], x, stack[b_1,...,b_k])`` plus ``slice``s of ``y``. The
stacked matrices are *derived params* (recipe ``concat0``), built once at bind time. Linears with
and without bias are grouped separately. Each row of ``y`` is the same dot product as before, so
results only change by the summation order a matmul library picks.

Only linears at the same *stage* are stacked: a linear's stage is the longest chain of
matrix products (``linear``, ``matmul``; a sum over children is cheap and does not count)
between its result and the case's outputs. A GRU's reset gate ``r = sigmoid(U_r h)`` feeds the candidate's GEMV ``U_n (r * h)``
(stage 1) while its update gate ``z = sigmoid(U_z h)`` only feeds the output (stage 0): stacked,
``z`` would be computed before the candidate's GEMV and kept in a temporary, and ``r``'s
epilogue (the sigmoid and the products ``r * h_k``) could not join its GEMV's loop, which has
the stack's rows, not ``r``'s. Apart, ``r`` and its products are one loop nest and ``z`` joins
the candidate's nest: one barrier and two temporaries fewer per level, the same FLOPs.
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core.frontend.graph import Case, DerivedParam, RecursiveGraph, derived_shape
from cortex.core.passes._rewrite import CaseRewriter


_PRODUCTS = ("linear", "matmul")


def _stages(case: Case) -> dict[int, int]:
    """Every value's stage: the longest chain of matrix products from it to the case's outputs
    (a value read by a linear has at least that linear's stage + 1)."""
    stage = {v.id: 0 for v in case.values}
    for v in reversed(case.values):  # users come after their arguments
        up = stage[v.id] + (1 if v.op in _PRODUCTS else 0)
        for a in v.args:
            if up > stage[a]:
                stage[a] = up
    return stage


def _groups(case: Case) -> list[list[int]]:
    vmap = case.value_map()
    stage = _stages(case)
    groups: dict[tuple, list[int]] = {}
    for v in case.values:
        if v.op != "linear" or any(vmap[a].op != "param" for a in (v.args[:1] + v.args[2:])):
            continue
        key = (v.args[1], len(v.args) == 3, v.dtype, stage[v.id])
        groups.setdefault(key, []).append(v.id)
    return [ids for ids in groups.values() if len(ids) >= 2]


def _stacked_name(names: list[str]) -> str:
    return "stack[" + ",".join(names) + "]"


def stack_gates(graph: RecursiveGraph) -> RecursiveGraph:
    specs = graph.param_specs()
    derived = list(graph.derived)
    cases = []
    for case in graph.cases:
        vmap = case.value_map()
        groups = _groups(case)
        first = {ids[0]: ids for ids in groups}
        member = {i for ids in groups for i in ids}
        rw = CaseRewriter(graph, case, specs)
        for v in case.values:
            if v.id in member and v.id not in first:
                continue  # already replaced by a slice of its group's stacked linear
            if v.id not in first:
                rw.copy(v)
                continue
            ids = first[v.id]
            arg_ids = []
            for pos in ([0, 2] if len(v.args) == 3 else [0]):
                names = [vmap[vmap[i].args[pos]].attr("name") for i in ids]
                name = _stacked_name(names)
                if name not in specs:
                    parts = [specs[n] for n in names]
                    d = DerivedParam(name, "concat0", tuple(names), derived_shape("concat0", parts), parts[0].dtype)
                    derived.append(d)
                    specs[name] = d
                    rw.add_param_spec(d)
                arg_ids.append(rw.emit("param", (), (("name", name),)))
            x = rw.remap[v.args[1]]
            args = (arg_ids[0], x) + tuple(arg_ids[1:])
            y = rw.emit("linear", args)
            start = 0
            for i in ids:
                rows = vmap[i].shape[0]
                rw.remap[i] = rw.emit("slice", (y,), (("axis", 0), ("start", start), ("stop", start + rows)))
                start += rows
        cases.append(rw.finish())
    return replace(graph, cases=tuple(cases), derived=tuple(derived))
