"""The float64 reference evaluator: runs a RecursiveGraph on a LinearizedBatch with NumPy.

Pipeline position: the oracle. It reads the traced (or pass-optimised) RecursiveGraph and the
``LinearizedBatch`` contract (``cortex.core.linearize.structure``) only, and every test of passes,
lowering and backends compares against it.

How it runs: nodes are level-ordered (children have smaller ids; level ``l`` is a contiguous
range), so it walks the levels in order and evaluates the case's values once per level with a
NumPy batch dimension over the level's nodes (level 0 runs the ``leaf`` case, the others the
``internal`` case). It is iterative by construction: a chain of 100,000 nodes is 100,000 loop
iterations, no Python recursion. Node-invariant values (params, constants and anything computed
from them alone) are evaluated once per case, before the level loop.

Domains (see ``cortex.core.frontend.graph``): an ``invariant`` value is an array of its own shape; a
``node`` value has a leading axis over the level's nodes; a ``child`` value has a leading axis
over the level's (node, child) edges, in CSR order, and node values mixed into it are gathered
per edge. ``reduce_children`` sums (or averages) each node's edge segment.

A graph with a ``preterminal`` case (see ``cortex.core.passes.preterminal``) runs it on level 1,
so the oracle checks that case too; :func:`leaf_states` evaluates the leaf case for every token
id, which is how that case's tables are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from cortex.core.frontend.graph import Case, RecursiveGraph, Value, verify
from cortex.core.frontend.params import bind_params
from cortex.core.linearize.structure import LinearizedBatch
from cortex.core.runtime.hostmem import aligned_empty


class ReferenceInputError(ValueError):
    """The batch does not fit the graph (missing per-node inputs, wrong arity, bad token id)."""


@dataclass
class _Level:
    lo: int
    hi: int
    child_ids: np.ndarray | None = None  # per edge: child node id
    seg: np.ndarray | None = None  # per edge: local parent index
    starts: np.ndarray | None = None  # per node: first edge (local)
    counts: np.ndarray | None = None  # per node: number of children


def evaluate(graph: RecursiveGraph, params: Mapping[str, Any], batch: LinearizedBatch) -> dict[str, np.ndarray]:
    """Every node's states, float64: ``{state name: array [num_nodes, *state shape]}``.

    ``params`` are the model's named arrays (``model.params``); derived params that passes
    introduced are computed from them. Row ``v`` belongs to node ``v`` of ``batch``; the roots
    are ``batch.roots``. See :func:`roots` for the declared outputs at the roots.
    """
    verify(graph)
    table = bind_params(graph, params, dtype=np.float64)
    _check_batch(graph, batch)
    n = batch.num_nodes
    states = {s.name: np.zeros((n,) + s.shape, dtype=np.float64) for s in graph.states}
    programs = {c.name: _compile_case(graph, c, table, batch) for c in graph.cases}
    child_offsets = np.asarray(batch.child_offsets, dtype=np.int64)
    for l in range(batch.num_levels):
        lo, hi = int(batch.level_offsets[l]), int(batch.level_offsets[l + 1])
        if hi == lo:
            continue
        level = _Level(lo, hi)
        if l > 0 and graph.arity is None:
            e0, e1 = int(child_offsets[lo]), int(child_offsets[hi])
            level.child_ids = np.asarray(batch.child_ids[e0:e1], dtype=np.int64)
            level.counts = np.diff(child_offsets[lo : hi + 1])
            level.starts = child_offsets[lo:hi] - e0
            level.seg = np.repeat(np.arange(hi - lo), level.counts)
        case = "leaf" if l == 0 else "preterminal" if l == 1 and "preterminal" in programs else "internal"
        programs[case](level, states)
    return states


def leaf_states(graph: RecursiveGraph, table: Mapping[str, np.ndarray],
                tokens: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The leaf case's states for every token id: ``{state: [vocab, *shape]}``, in the dtype of
    ``table`` (the graph's params, derived ones included, as ``bind_params`` computes them);
    with ``tokens`` (ids in ``[0, vocab)``), one row per id of it instead. Needs a graph whose
    only node input is a word (a leaf is then a function of its token)."""
    words = [i for i in graph.node_inputs if i.kind == "word"]
    if len(graph.node_inputs) != 1 or not words:
        raise ReferenceInputError(f"graph {graph.name!r}: leaf states by token need a word input only")
    ids = np.arange(int(words[0].vocab), dtype=np.int64) if tokens is None else np.asarray(tokens, dtype=np.int64)
    n = len(ids)
    out = {s.name: aligned_empty((n,) + s.shape, _table_dtype(table)) for s in graph.states}
    run = _compile_case(graph, graph.case("leaf"), dict(table), _TokenBatch(ids))
    for lo in range(0, n, _TOKEN_CHUNK):  # chunks bound the temporaries of a huge vocabulary
        run(_Level(lo, min(lo + _TOKEN_CHUNK, n)), out)
    return out


# Chunks keep the temporaries small enough for the allocator to reuse them: one pass over a
# 20000-token vocabulary page-faults ~400 MB of fresh temporaries. Inside a compile (TreeLSTM
# h256, the params worker beside code generation) the leaf states took 175-305 ms in chunks of
# 4096 tokens against 291-438 ms in one pass (five alternating fresh processes each);
# 1024-token chunks were no better than 4096 (more NumPy calls, each retaking the GIL).
_TOKEN_CHUNK = 4096


@dataclass(frozen=True)
class _TokenBatch:
    """What the leaf case reads of a batch: the token ids (one leaf per token)."""

    word_ids: np.ndarray
    features: None = None


def _table_dtype(table: Mapping[str, np.ndarray]) -> np.dtype:
    return np.result_type(*[np.asarray(a).dtype for a in table.values()]) if table else np.dtype(np.float64)


def roots(graph: RecursiveGraph, states: Mapping[str, np.ndarray], batch: LinearizedBatch) -> dict[str, np.ndarray]:
    """The graph's declared output states: at the roots ``[B, ...]``, or every node's."""
    if graph.outputs.every_node:
        return {s: states[s] for s in graph.outputs.states}
    idx = np.asarray(batch.roots, dtype=np.int64)
    return {s: states[s][idx] for s in graph.outputs.states}


def _check_batch(graph: RecursiveGraph, batch: LinearizedBatch) -> None:
    for inp in graph.node_inputs:
        if inp.kind == "word" and batch.word_ids is None:
            raise ReferenceInputError(f"graph {graph.name!r} reads token ids ({inp.name!r}) but the batch has no word_ids")
        if inp.kind == "features":
            if batch.features is None:
                raise ReferenceInputError(f"graph {graph.name!r} reads features ({inp.name!r}) but the batch has none")
            if batch.features.shape != (batch.num_nodes,) + inp.shape:
                raise ReferenceInputError(
                    f"graph {graph.name!r}: features are {batch.features.shape}, expected "
                    f"[{batch.num_nodes}, {inp.shape[0]}]"
                )
    if batch.num_levels > 0:
        arity = batch.arity()[batch.num_leaves :]
        if graph.arity is not None and np.any(arity != graph.arity):
            v = batch.num_leaves + int(np.argmax(arity != graph.arity))
            raise ReferenceInputError(
                f"graph {graph.name!r} has arity {graph.arity}, but internal node {v} has {int(arity[v - batch.num_leaves])} children"
            )
        if np.any(batch.arity()[: batch.num_leaves] != 0) or np.any(arity == 0):
            raise ReferenceInputError("batch is not level-ordered: level 0 must be exactly the childless nodes")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) = inf for very negative x gives exactly 0
        return 1.0 / (1.0 + np.exp(-x))


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
}
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
}


def _compile_case(graph: RecursiveGraph, case: Case, table: dict[str, np.ndarray], batch: LinearizedBatch):
    """Evaluate invariant values now; return a function that runs the rest on one level."""
    const: dict[int, np.ndarray] = {}
    vmap = case.value_map()
    for v in case.values:
        if v.domain == "invariant":
            const[v.id] = _eval_value(graph, v, vmap, const, None, None, table, batch)
    rest = [v for v in case.values if v.domain != "invariant"]
    state_ids = case.states

    def run(level: _Level, states: dict[str, np.ndarray]) -> None:
        env = dict(const)
        for v in rest:
            env[v.id] = _eval_value(graph, v, vmap, env, level, states, table, batch)
        for name, vid in state_ids:
            states[name][level.lo : level.hi] = env[vid]

    return run


def _lift(x: np.ndarray, frm: str, to: str, level: _Level) -> np.ndarray:
    """Bring a value into the domain ``to`` (node values are gathered per child edge)."""
    if frm == "node" and to == "child":
        return x[level.seg]
    return x


def _eval_value(graph, v: Value, vmap, env, level, states, table, batch) -> np.ndarray:
    a = dict(v.attrs)
    args = [_lift(env[i], vmap[i].domain, v.domain, level) for i in v.args]
    op = v.op
    batched = v.domain != "invariant"
    if op == "param":
        return table[a["name"]]
    if op == "const":
        return np.full(a["shape"], a["value"], dtype=np.float64)
    if op == "input":
        inp = graph.node_input(a["name"])
        if inp.kind == "features":
            return np.asarray(batch.features[level.lo : level.hi], dtype=np.float64)
        ids = np.asarray(batch.word_ids[level.lo : level.hi], dtype=np.int64)
        bad = (ids < 0) | (ids >= inp.vocab)
        if np.any(bad):
            node = level.lo + int(np.argmax(bad))
            raise ReferenceInputError(
                f"graph {graph.name!r}: node {node} needs a token id in [0, {inp.vocab}) for "
                f"{inp.name!r} but has {int(batch.word_ids[node])}"
            )
        return ids
    if op == "child_input":
        return np.asarray(batch.word_ids, dtype=np.int64)[batch.child_table[level.lo : level.hi, a["index"]]]
    if op == "child_state":
        if a.get("index") is not None:
            return states[a["state"]][batch.child_table[level.lo : level.hi, a["index"]]]
        return states[a["state"]][level.child_ids]
    if op == "reduce_children":
        s = np.add.reduceat(args[0], level.starts, axis=0)
        if a["kind"] == "mean":
            s = s / level.counts.reshape((-1,) + (1,) * len(v.shape))
        return s
    if op == "embedding":
        return args[0][args[1]]
    if op == "linear":
        w, x = args[0], args[1]
        if vmap[v.args[0]].domain == "invariant":
            y = x @ w.T
        else:
            y = np.einsum("...oi,...i->...o", w, x)
        return y + args[2] if len(args) == 3 else y
    if op == "matmul":
        return np.matmul(args[0], args[1])
    if op in _BINARY:
        return _BINARY[op](args[0], args[1])
    if op in _UNARY:
        return _UNARY[op](args[0])
    if op == "concat":
        axis = a.get("axis", 0)
        if batched:
            rows = max(x.shape[0] for x, i in zip(args, v.args) if vmap[i].domain != "invariant")
            args = [
                x if vmap[i].domain != "invariant" else np.broadcast_to(x, (rows,) + x.shape)
                for x, i in zip(args, v.args)
            ]
            axis += 1
        return np.concatenate(args, axis=axis)
    if op == "slice":
        axis = a.get("axis", 0) + (1 if batched else 0)
        index = [slice(None)] * args[0].ndim
        index[axis] = slice(a["start"], a["stop"])
        return args[0][tuple(index)]
    raise ReferenceInputError(f"reference evaluator: unknown op {op!r}")
