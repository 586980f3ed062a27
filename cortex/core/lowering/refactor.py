"""Recursive refactoring: a parent's products of its children's states move into the children.

Pipeline position: the first step of :func:`cortex.core.lowering.lower.lower` when the schedule's
``refactor`` knob is on; a pure ``RecursiveGraph -> RecursiveGraph`` rewrite of the passes' graph,
so every backend renders what it produces.

A node's internal case reads ``linear(P, child_state s[i] (+ b))`` (a fixed child), ``linear(P,
child_state s) (+ b)`` per child edge, or ``linear(P, reduce_children(child_state s, sum|mean))``:
each depends only on the child's state ``s`` and an invariant weight ``P``. Refactored, every case
that yields ``s`` (leaf, preterminal, internal) also yields a *projection state*
``P @ s`` of its own, computed in the node's step right after ``s``, and the parent reads it
(``child_state`` of the projection, with the bias added, reduced the same way for a child sum):
the parent's step only combines. The projection states are scratch, not model states: the
lowering keeps them in ``temp`` buffers.

Legality: the rewrite is exact in real arithmetic (a child sum by linearity); anything else that
reads a child's state through a weight stays in the parent and :func:`refactor_graph`'s notes say
why (the input mixes in the node's own values, as TreeGRU's reset-gated candidate does, or is a
concatenation or product of several children's states, as in TreeRNN and MV-RNN). A node does not
know its position under its parents (a DAG's shared child has several), so it computes the
projection of every position its parents read: for a k-ary model with one weight per position
that is k products per node where the parent did k per node, the same weights streamed once per
level, but k times the multiply-adds over a level of children.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cortex.core.frontend.graph import Case, RecursiveGraph, StateSpec, Value
from cortex.core.passes._rewrite import CaseRewriter
from cortex.core.passes.dce import dce
from cortex.core.passes.fusion_groups import fusion_groups

__all__ = ["Refactored", "refactor_graph", "PROJECTION_PREFIX"]

PROJECTION_PREFIX = "proj"  # projection states are named proj<j>_<state>
_LINEAR_REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class Refactored:
    """The rewritten graph, the projection states it added (scratch, not outputs) and notes."""

    graph: RecursiveGraph
    projections: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Site:
    """One ``linear`` of the internal case that moves into the children."""

    value: int  # the linear's id
    param: str  # P
    state: str  # s
    index: int | None  # the child position (fixed arity), None for every child
    reduce: str | None  # "sum"/"mean" for a child sum, None otherwise
    bias: int | None  # the bias value's id


def _site(case: Case, vals: dict[int, Value], v: Value) -> _Site | None:
    if v.op != "linear" or vals[v.args[0]].op != "param":
        return None
    bias = v.args[2] if len(v.args) == 3 else None
    x = vals[v.args[1]]
    reduce = None
    if x.op == "reduce_children" and x.attr("kind") in _LINEAR_REDUCTIONS and vals[x.args[0]].op == "child_state":
        reduce, x = x.attr("kind"), vals[x.args[0]]
    if x.op != "child_state":
        return None
    return _Site(v.id, vals[v.args[0]].attr("name"), x.attr("state"), x.attr("index"), reduce, bias)


def _reads_child(vals: dict[int, Value], vid: int, memo: dict[int, bool]) -> bool:
    if vid not in memo:
        v = vals[vid]
        memo[vid] = v.op == "child_state" or any(_reads_child(vals, a, memo) for a in v.args)
    return memo[vid]


def _why_not(vals: dict[int, Value], v: Value) -> str:
    if v.op == "matmul":
        return "a matrix product of children's values"
    if vals[v.args[0]].op != "param":
        return f"its weight is a child's value ({vals[v.args[0]].attr('state')}), not an invariant param"
    x = vals[v.args[1]]
    if x.op == "concat":
        return "its input concatenates several children's states (its weight would be split by columns)"
    if x.op == "reduce_children":
        return f"its input is a {x.attr('kind')} over the children, not linear in each child's state"
    return f"its input ({x.op}) mixes the child's state with the node's own values"


def refactor_graph(graph: RecursiveGraph) -> Refactored:
    """The refactored graph (see the module docstring); unchanged, with notes saying why, when
    nothing in the internal case can move."""
    internal = graph.case("internal")
    vals = internal.value_map()
    sites = [s for s in (_site(internal, vals, v) for v in internal.values) if s is not None]
    memo: dict[int, bool] = {}
    moved = {s.value for s in sites}
    kept = [v for v in internal.values if v.op in ("linear", "matmul") and v.id not in moved
            and any(_reads_child(vals, a, memo) for a in v.args)]
    notes = [f"refactor: stays in the parent: %{v.id} = {v.op} of "
             f"{vals[v.args[0]].attr('name') or vals[v.args[0]].op}: {_why_not(vals, v)}" for v in kept]
    if not sites:
        notes.insert(0, "refactor: not applied: no product of a child's state with a weight to move "
                        "into the child")
        return Refactored(graph, (), tuple(notes))
    taken = {s.name for s in graph.states}
    proj: dict[tuple[str, str], str] = {}  # (param, state) -> projection state
    for s in sites:
        if (s.param, s.state) not in proj:
            name, j = f"{PROJECTION_PREFIX}{len(proj)}_{s.state}", len(proj)
            while name in taken:
                j += 1
                name = f"{PROJECTION_PREFIX}{j}_{s.state}"
            taken.add(name)
            proj[(s.param, s.state)] = name
    specs = graph.param_specs()
    new_states = tuple(StateSpec(name, (specs[p].shape[0],), graph.state_spec(st).dtype)
                       for (p, st), name in proj.items())
    g = replace(graph, states=graph.states + new_states)
    cases = tuple(_rewrite_case(g, c, sites, proj) for c in graph.cases)
    g = fusion_groups(dce(replace(g, cases=cases)))
    per_node = len(proj)
    notes.insert(0, f"refactor: {len(sites)} product(s) of children's states moved into the children: "
                    + ", ".join(f"{name} = {p} @ {st}" for (p, st), name in proj.items())
                    + f" ({per_node} projection(s) per node, read by its parents)")
    return Refactored(g, tuple(proj.values()), tuple(notes))


def _rewrite_case(graph: RecursiveGraph, case: Case, sites: list[_Site],
                  proj: dict[tuple[str, str], str]) -> Case:
    rw = CaseRewriter(graph, case)
    by_value = {s.value: s for s in sites} if case.name == "internal" else {}
    for v in case.values:
        site = by_value.get(v.id)
        if site is None:
            rw.copy(v)
            continue
        attrs = (("state", proj[(site.param, site.state)]),)
        if site.index is not None:
            attrs = (("index", site.index),) + attrs
        out = rw.emit("child_state", (), attrs)
        if site.reduce is not None:
            out = rw.emit("reduce_children", (out,), (("kind", site.reduce),))
        if site.bias is not None:
            out = rw.emit("add", (out, rw.remap[site.bias]))
        rw.remap[v.id] = out
    yields = dict(case.states)
    extra = []
    for (param, state), name in proj.items():
        w = rw.emit("param", (), (("name", param),))
        extra.append((name, rw.emit("linear", (w, rw.remap[yields[state]]))))
    done = rw.finish()
    return replace(done, states=done.states + tuple(extra))
