"""Shared machinery of the graph passes: rebuild a case value by value.

Pipeline position: used by every module of ``cortex.core.passes``. A :class:`CaseRewriter`
emits values into a fresh, densely numbered case, re-inferring shape, dtype and domain with the
IR's single rule table, so a pass can only produce well-typed graphs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from cortex.core.frontend.graph import (
    Case,
    DerivedParam,
    RecursiveGraph,
    RuleContext,
    SHAPE_RULES,
    Value,
    infer_domain,
)


class CaseRewriter:
    """Builds a new case. ``remap[old id] = new id`` records where old values went."""

    def __init__(self, graph: RecursiveGraph, case: Case, params: Mapping[str, Any] | None = None) -> None:
        self.graph, self.case = graph, case
        self.values: list[Value] = []
        self.remap: dict[int, int] = {}
        self._ctx = RuleContext(
            params=dict(params) if params is not None else graph.param_specs(),
            node_inputs={i.name: i for i in graph.node_inputs},
            states={s.name: s for s in graph.states},
            arity=graph.arity,
            case=case.name,
        )

    def add_param_spec(self, spec: DerivedParam) -> None:
        self._ctx.params[spec.name] = spec  # type: ignore[index]

    def get(self, new_id: int) -> Value:
        return self.values[new_id]

    def emit(self, op: str, args: tuple[int, ...], attrs: tuple = ()) -> int:
        arg_vals = tuple(self.values[a] for a in args)
        shape, dtype = SHAPE_RULES[op](arg_vals, dict(attrs), self._ctx)
        domain = infer_domain(op, arg_vals, dict(attrs))
        self.values.append(Value(len(self.values), op, tuple(args), tuple(attrs), shape, dtype, domain))
        return len(self.values) - 1

    def copy(self, v: Value) -> int:
        """Emit ``v`` with its args remapped (same attrs and group); record and return its new id."""
        new = self.emit(v.op, tuple(self.remap[a] for a in v.args), v.attrs)
        if v.group is not None:  # a copy keeps its fusion-group annotation
            self.values[new] = replace(self.values[new], group=v.group)
        self.remap[v.id] = new
        return new

    def finish(self) -> Case:
        return Case(self.case.name, tuple(self.values), tuple((s, self.remap[i]) for s, i in self.case.states))


def map_cases(graph: RecursiveGraph, fn: Callable[[RecursiveGraph, Case], Case]) -> RecursiveGraph:
    return replace(graph, cases=tuple(fn(graph, c) for c in graph.cases))


def uses(case: Case) -> dict[int, int]:
    """Number of uses of every value (args and state outputs)."""
    count = {v.id: 0 for v in case.values}
    for v in case.values:
        for a in v.args:
            count[a] += 1
    for _, i in case.states:
        count[i] += 1
    return count
