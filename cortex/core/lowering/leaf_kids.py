"""Nodes with a leaf child read that child's projections as table rows (schedule knob ``leaf_kids``).

Pipeline position: lowering (:func:`cortex.core.lowering.lower.lower`, which builds the level
loops from :func:`leaf_kid_cases`) and the per-call binding (``Lowered.bind_batch``, which
orders each level's nodes with :func:`leaf_kid_order`).

In a binary parse tree about a quarter of the child slots of the nodes above level 1 are leaves
(every such node has one leaf child and one internal one). A leaf's states depend only on its
token, and the level-1 case (``cortex.core.passes.preterminal``) already reads the linear maps
of them as tables (``leaf_h_proj`` = ``leaf_state[h] @ U_stack^T + b_stack``, one per child
position, filled on first use on a host runtime). So a node whose child ``i`` is a leaf can read
``U_i h_i`` as one row of that table instead of computing the GEMV: :func:`leaf_kid_cases` is
the internal case written so, once per child position (the level-1 case's rewrite applied to
that child alone). It applies only where every table such a case reads already exists in the
graph (the program reads no new table), and where the case does fewer multiply-adds than the
internal case: TreeLSTM (a child's stacked gate GEMV), TreeGRU (the reset and update gates'
GEMVs of a child; the candidate's ``U_n (r * h_i)`` stays a GEMV), TreeFC (a child's GEMV); not
ChildSum, MV-RNN or DAG-RNN (no level-1 case, or no fixed arity).

The node jam computes a group of nodes together, so the nodes of a level that take the same case
must be adjacent: ``bind_batch`` gives the program a per-level order of the nodes
(:func:`leaf_kid_order`: within each level, first the nodes with no leaf child, then those whose
first leaf child is child 0, then child 1, ..., each group in node order) and its offsets, and
each level runs one node loop per group, a node's id read from the order (``v =
leaf_kid_order[vi]``). A leaf-child class of fewer than :data:`MIN_CLASS_NODES` nodes in its
level stays with the first class. The batch's node numbering is not changed: outputs, the
linearizer and its caches are what they were. After the schedule, :func:`fuse_class_loops` runs
each phase of a level's class loops as one parallel loop (one team join, as before). Results
change by rounding only (a table row is the GEMV's dot product, computed in NumPy).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cortex.core import loopir as ir
from cortex.core.frontend.graph import Case, RecursiveGraph
from cortex.core.linearize.structure import INDEX_DTYPE
from cortex.core.lowering.transforms import rewrite_loops
from cortex.core.passes.cse import cse
from cortex.core.passes.dce import dce
from cortex.core.passes.fusion_groups import fusion_groups
from cortex.core.passes.preterminal import gemv_work, tabled_children_case

#: The per-call index buffers of a program with leaf-kid loops (see the module docstring).
ORDER_BUFFER = "leaf_kid_order"
OFFSETS_BUFFER = "leaf_kid_offsets"


def leaf_kid_cases(graph: RecursiveGraph) -> tuple[Case, ...]:
    """One case per child position ``i`` (named ``leaf_kid<i>``): the internal case of ``graph``
    with child ``i`` a leaf, its state and the linear maps of it read from the tables of the
    level-1 case; ``()`` where the graph has no level-1 case, or a case would need a table the
    graph lacks or would not do less GEMV work than the internal case."""
    if graph.arity is None or not any(c.name == "preterminal" for c in graph.cases):
        return ()
    internal = graph.case("internal")
    work = gemv_work(internal)
    out = []
    for i in range(graph.arity):
        specs = graph.param_specs()
        derived = list(graph.derived)
        case = tabled_children_case(graph, internal, (i,), f"leaf_kid{i}", specs, derived,
                                    max_table_elements=2**62)
        if case is None or len(derived) != len(graph.derived) or gemv_work(case) >= work:
            return ()
        out.append(case)
    # the passes that follow the level-1 case's in the pipeline, on the new cases (the graph's
    # own cases have had them: they come back unchanged)
    done = fusion_groups(dce(cse(replace(graph, cases=graph.cases + tuple(out)))))
    return tuple(done.case(c.name) for c in out)


#: The fewest nodes of a level that run in a leaf-child class of their own; fewer stay with the
#: nodes without a leaf child (see :func:`leaf_kid_order`).
MIN_CLASS_NODES = 4


def leaf_kid_order(level_offsets: np.ndarray, child_table: np.ndarray, num_leaves: int,
                   positions: int, min_nodes: int = MIN_CLASS_NODES) -> tuple[np.ndarray, np.ndarray]:
    """``(order, offsets)`` for a batch: ``order`` [N] int32 lists the node ids level by level,
    each level's nodes grouped by class (0: no leaf child, ``1 + i``: child ``i`` is the node's
    first leaf child), each class in node order; class ``c`` of level ``l`` is
    ``order[offsets[l * (positions + 1) + c]:offsets[l * (positions + 1) + c + 1]]``
    (``offsets``: [L * (positions + 1) + 1] int32). Leaves are class 0, and so are the nodes of
    a leaf-child class of fewer than ``min_nodes`` nodes in its level (class 0's case is right
    for any node): a class's jammed groups read its weight rows once more, which a few nodes'
    saved GEMVs do not pay for (a group of one to three nodes is bound by reading the weights)."""
    n = int(level_offsets[-1])
    levels = len(level_offsets) - 1
    k = positions + 1
    level = np.repeat(np.arange(levels, dtype=np.int64), np.diff(level_offsets.astype(np.int64)))
    cls = np.zeros(n, dtype=np.int64)
    for i in reversed(range(positions)):  # the first leaf child's position wins
        ch = child_table[:, i]
        cls[(ch >= 0) & (ch < num_leaves)] = i + 1
    key = level * k + cls
    if min_nodes > 1:
        small = np.bincount(key, minlength=levels * k) < min_nodes
        cls[small[key] & (cls > 0)] = 0
        key = level * k + cls
    order = np.argsort(key, kind="stable").astype(INDEX_DTYPE)
    offsets = np.zeros(levels * k + 1, dtype=INDEX_DTYPE)
    np.cumsum(np.bincount(key, minlength=levels * k), out=offsets[1:])
    return order, offsets


def fuse_class_loops(program: ir.Program, level_var: str = "l") -> tuple[ir.Program, int]:
    """``program`` with each level's class loops, once the schedule has made them parallel loops
    over hidden blocks (``let``s, then ``parallel for j in a..b``), run as fewer parallel loops:
    the ``p``-th parallel loop of every class (its ``p``-th phase: a TreeGRU node computes its
    reset gate, then its candidate) becomes one loop whose iteration runs each class's body in
    turn: one team join per phase and level, as without the classes. Legal because the classes
    partition the level, whose nodes are independent (a class's body writes its nodes' rows and
    reads rows of earlier levels); a class's phases keep their order. A part's class is the set
    of ``leaf_kid_offsets`` entries it reads. The lets (bounds read from the offsets) move
    before the loops. A level whose classes do not have the same number of phases with the same
    bounds is left as it is. Returns the program and how many levels were fused."""
    def split(stmt: ir.Stmt) -> tuple[list[tuple[str, ir.Expr]], ir.For] | None:
        lets = []
        while isinstance(stmt, ir.Let):
            lets.append((stmt.var, stmt.value))
            stmt = stmt.body
        return (lets, stmt) if isinstance(stmt, ir.For) and stmt.kind == "parallel" else None

    def cls(stmt: ir.Stmt) -> frozenset:
        return frozenset(n.index for n in ir.walk(stmt) if isinstance(n, ir.Load) and n.buffer == OFFSETS_BUFFER)

    def visit(loop: ir.For) -> ir.Stmt | None:
        if loop.var != level_var or not isinstance(loop.body, ir.Seq):
            return None
        parts = [split(x) for x in loop.body.stmts]
        if any(p is None for p in parts):
            return loop
        classes: dict[frozenset, list] = {}
        for x, part in zip(loop.body.stmts, parts):
            classes.setdefault(cls(x), []).append(part)
        groups = list(classes.values())
        phases = len(groups[0])
        if len(groups) < 2 or frozenset() in classes or any(len(g) != phases for g in groups):
            return loop
        fused = []
        for p in range(phases):
            members = [g[p] for g in groups]
            first = members[0][1]
            if any((m[1].start, m[1].stop, m[1].annotations) != (first.start, first.stop, first.annotations)
                   for m in members):
                return loop
            j = ir.Var(first.var)
            stmt: ir.Stmt = replace(first, body=ir.seq(*(ir.substitute(m[1].body, {m[1].var: j}) for m in members)))
            for lets, _ in reversed(members):
                for name, value in reversed(lets):
                    stmt = ir.Let(name, value, stmt)
            fused.append(stmt)
        return replace(loop, body=ir.seq(*fused))

    return rewrite_loops(program, visit)
