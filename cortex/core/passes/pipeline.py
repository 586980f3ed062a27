"""The graph-pass pipeline: the one place that lists which passes run, in which order.

Pipeline position: between tracing and the recursion lowering. Each pass is a pure function
``RecursiveGraph -> RecursiveGraph`` (see the modules of this package); ``run_passes`` verifies
the graph after every pass so a broken pass is caught where it happens.

Order: fold constants (leaf cases written with zero children shrink) -> CSE (one id per distinct
value, so "same input" is visible) -> DCE -> gate stacking -> hoisting (a stacked leaf
projection of an embedding becomes one table) -> the level-1 case (its children's states and
their stacked gate projections become tables) -> distributing child sums over linear maps
(``Σ_c W x_c`` -> ``W Σ_c x_c``) -> CSE -> DCE -> fusion groups (annotation; last).

The two table passes (hoisting, level-1 case) take ``max_table_elements``;
:func:`with_table_limit` sets it for a pass list (the ``max_table_mib`` compile option, whose
default depends on whether the target fills the tables on use: ``cortex.core.pipeline``).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

from cortex.core.frontend.graph import RecursiveGraph, verify
from cortex.core.passes.cse import cse
from cortex.core.passes.dce import dce
from cortex.core.passes.distribute import distribute_linear
from cortex.core.passes.fold_constants import fold_constants
from cortex.core.passes.fusion_groups import fusion_groups
from cortex.core.passes.hoist import hoist_invariant
from cortex.core.passes.preterminal import preterminal
from cortex.core.passes.stack_gates import stack_gates

GraphPass = Callable[[RecursiveGraph], RecursiveGraph]

DEFAULT_PASSES: tuple[GraphPass, ...] = (
    fold_constants,
    cse,
    dce,
    stack_gates,
    hoist_invariant,
    preterminal,
    distribute_linear,
    cse,
    dce,
    fusion_groups,
)

ALL_PASSES: dict[str, GraphPass] = {
    "fold_constants": fold_constants,
    "cse": cse,
    "dce": dce,
    "stack_gates": stack_gates,
    "hoist_invariant": hoist_invariant,
    "preterminal": preterminal,
    "distribute_linear": distribute_linear,
    "fusion_groups": fusion_groups,
}


TABLE_PASSES: tuple[Callable[..., RecursiveGraph], ...] = (hoist_invariant, preterminal)


def with_table_limit(passes: Sequence[GraphPass], max_table_elements: int) -> tuple[GraphPass, ...]:
    """``passes`` with every table pass (:data:`TABLE_PASSES`) limited to tables of at most
    ``max_table_elements`` entries; other passes unchanged."""
    def limited(p: Callable[..., RecursiveGraph]) -> GraphPass:
        @functools.wraps(p)
        def run(graph: RecursiveGraph) -> RecursiveGraph:
            return p(graph, max_table_elements=max_table_elements)
        return run
    return tuple(limited(p) if p in TABLE_PASSES else p for p in passes)


def run_passes(graph: RecursiveGraph, passes: Sequence[GraphPass] = DEFAULT_PASSES) -> RecursiveGraph:
    """Apply ``passes`` in order, verifying the graph after each one."""
    verify(graph)
    for p in passes:
        graph = p(graph)
        try:
            verify(graph)
        except ValueError as e:
            raise type(e)(f"after pass {p.__name__}: {e}") from None
    return graph
