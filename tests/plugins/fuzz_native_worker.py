"""The fuzz run behind tests/plugins/test_native_fuzz.py, in a process of its own.

    python tests/plugins/fuzz_native_worker.py TARGET EXAMPLES

Drives malformed structures and malformed ``LinearizedBatch``es (Hypothesis) through the
compiled call of a binary TreeLSTM and a child-sum TreeLSTM on TARGET (``llvm``, ``opencl``):

* every input either runs, and then its states equal the ``numpy`` target's on the same input
  (and the sealed batch it ran validates, and equals the NumPy linearizer's where a compiled
  linearizer made it), or raises one of Cortex's own errors for bad input (a ``CortexError`` that is also a
  ``ValueError`` or ``TypeError``): anything else fails the run;
* a crash kills this process (the parent test reports the signal and the output); a hang is
  cut by ``faulthandler`` after ``CORTEX_FUZZ_EXAMPLE_TIMEOUT`` seconds per example (default
  120), with every thread's stack on stderr.

EXAMPLES is the number of examples per property (four properties: structures and batches, for
each model). The search is derandomized (the same examples every run) unless
``CORTEX_FUZZ_SEED`` gives a seed. On success the last line of stdout is a JSON summary:
examples run, how many ran and how many were refused, by error class.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import sys
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import cortex
from cortex.core.errors import CortexError
from cortex.core.linearize import ChildTable, EdgeList, ParentArray
from cortex.core.linearize import fast
from cortex.core.linearize.structure import LinearizedBatch
from cortex.data import Node
from cortex.models import ChildSumTreeLSTM, TreeLSTM

V = 12  # vocabulary of both models
#: integers that break index arithmetic when they reach native code unchecked
NASTY = (-2**31, -2**31 + 1, -100, -2, -1, 0, 1, 2, 5, 7, 100, 10**8, 2**31 - 2, 2**31 - 1)
TOL = 2e-4  # float32 llvm/opencl against float32 numpy (different summation orders)

SEEN: Counter = Counter()


def refused(exc: BaseException) -> None:
    """The only acceptable failure: Cortex's own error for bad input."""
    if not (isinstance(exc, CortexError) and isinstance(exc, (ValueError, TypeError))):
        raise AssertionError(f"bad input raised {type(exc).__module__}.{type(exc).__name__}, "
                             f"not a Cortex error for bad input: {exc}") from exc
    SEEN[type(exc).__name__] += 1


def same_states(got: Any, want: Any) -> None:
    """Every node's every state, within the float32 tolerance."""
    for state in want.states:
        a, b = got.nodes(state), want.nodes(state)
        assert a.shape == b.shape, (state, a.shape, b.shape)
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL, err_msg=f"state {state}")
    SEEN["ran"] += 1


def check(exe: Any, oracle: Any, call: str, x: Any) -> None:
    """``exe``'s ``call`` (``__call__`` or ``run``) on ``x``: refused with a Cortex error, or
    equal to the numpy oracle's result on the same input."""
    limit = float(os.environ.get("CORTEX_FUZZ_EXAMPLE_TIMEOUT", "120"))
    faulthandler.dump_traceback_later(limit, exit=True)
    try:
        try:
            got = getattr(exe, call)(x)
        except Exception as exc:  # noqa: BLE001 - the point: which exceptions escape
            refused(exc)
            return
        same_states(got, getattr(oracle, call)(x))
        if call == "__call__":
            linearizer_agrees(exe, x, got.batch)
    finally:
        faulthandler.cancel_dump_traceback_later()


def linearizer_agrees(exe: Any, x: Any, batch: LinearizedBatch) -> None:
    """The batch a call ran is sealed, so it was trusted: it must validate, and when a backend
    installed a compiled linearizer (llvm does, for nested tuples), equal the NumPy path's."""
    assert batch._is_sealed()
    batch.validate()
    native = fast.set_native_nested(None)
    try:
        if native is None:
            return
        plain = exe.linearize(x)
    finally:
        fast.set_native_nested(native)
    for name in ("level_offsets", "child_offsets", "child_ids", "child_table", "roots",
                 "node_input", "word_ids"):
        np.testing.assert_array_equal(getattr(batch, name), getattr(plain, name), err_msg=name)
    SEEN["linearizers compared"] += 1


# ---------------------------------------------------------------- structures

tokens = st.integers(0, V - 1)
bad_tokens = st.one_of(st.sampled_from(NASTY), st.floats(allow_nan=True), st.text(max_size=2),
                       st.none(), st.booleans(), st.just(()))
binary_trees = st.recursive(tokens, lambda kids: st.tuples(kids, kids), max_leaves=8)
#: nested tuples that are mostly binary trees of tokens, sometimes with a bad leaf or node
nested = st.recursive(
    st.one_of(tokens, tokens, tokens, bad_tokens),
    lambda kids: st.one_of(st.tuples(kids, kids), st.tuples(kids, kids),
                           st.lists(kids, max_size=3).map(tuple)),
    max_leaves=8)


@st.composite
def parent_arrays(draw: Any, full_tokens: bool) -> tuple[list[int], list[int]]:
    """A random tree as a parent array (parent[i] < i) and its tokens (every node's, or the
    leaves' with -1 on internal nodes)."""
    n = draw(st.integers(1, 14))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    words = [draw(tokens) for _ in range(n)]
    if not full_tokens:
        has_child = set(parents[1:])
        words = [-1 if i in has_child else w for i, w in enumerate(words)]
    return parents, words


def mutated(draw: Any, values: list[Any]) -> list[Any]:
    """``values`` with zero to two entries replaced by nasty integers or other junk."""
    values = list(values)
    for _ in range(draw(st.integers(0, 2))):
        if values:
            i = draw(st.integers(0, len(values) - 1))
            values[i] = draw(st.one_of(st.sampled_from(NASTY), bad_tokens))
    return values


def as_node(parents: list[int], words: list[int]) -> Node:
    kids: list[list[Node]] = [[] for _ in parents]
    built: list[Any] = [None] * len(parents)
    for v in range(len(parents) - 1, -1, -1):
        built[v] = Node(tuple(reversed(kids[v])), word=words[v])
        if parents[v] >= 0:
            kids[parents[v]].append(built[v])
    return built[0]


@st.composite
def binary_structures(draw: Any) -> Any:
    """One input or a batch for the binary TreeLSTM: nested tuples, or a parent array / child
    table of a tree drawn as nested tuples, possibly mutated."""
    form = draw(st.sampled_from(["nested", "nested", "parents", "table", "batch"]))
    if form == "nested":
        return draw(nested)
    if form == "batch":
        return draw(st.lists(st.one_of(binary_trees, nested), min_size=1, max_size=3))
    tree = draw(binary_trees)
    parents: list[int] = []
    words: list[int] = []
    stack = [(tree, -1)]
    while stack:
        t, p = stack.pop()
        parents.append(p)
        me = len(parents) - 1
        words.append(-1 if isinstance(t, tuple) else t)
        if isinstance(t, tuple):
            stack += [(c, me) for c in reversed(t)]
    if form == "parents":
        return ParentArray(np.array(mutated(draw, parents), dtype=object)
                           if draw(st.booleans()) else parents, words=mutated(draw, words))
    table = [[-1, -1] for _ in parents]
    fill = [0] * len(parents)
    for v, p in enumerate(parents):
        if p >= 0:
            table[p][fill[p]] = v
            fill[p] += 1
    flat = mutated(draw, [c for row in table for c in row])
    try:
        arr = np.array(flat).reshape(len(parents), 2)
    except (TypeError, ValueError):
        arr = flat  # junk that does not make an array: the reader must refuse it
    return ChildTable(arr, words=words)


@st.composite
def childsum_structures(draw: Any) -> Any:
    """One input or a batch for the child-sum TreeLSTM: node objects, parent arrays and edge
    lists (DAGs: extra edges from later to earlier nodes), tokens on every node."""
    form = draw(st.sampled_from(["node", "parents", "edges", "batch"]))
    parents, words = draw(parent_arrays(full_tokens=True))
    if form == "node":
        return as_node(parents, mutated(draw, words))
    if form == "parents":
        return ParentArray(mutated(draw, parents), words=mutated(draw, words))
    if form == "batch":
        return [ParentArray(parents, words=words), as_node(parents, words)]
    edges = [(p, v) for v, p in enumerate(parents) if p >= 0]
    for _ in range(draw(st.integers(0, 3))):  # shared children (a DAG), maybe a cycle
        if len(parents) > 1:
            a = draw(st.integers(0, len(parents) - 1))
            edges.append((a, draw(st.integers(0, len(parents) - 1))))
    edges = [tuple(mutated(draw, list(e))) for e in edges]
    num_nodes = draw(st.one_of(st.just(len(parents)), st.sampled_from(NASTY)))
    return EdgeList(num_nodes, edges, words=words)


# ---------------------------------------------------------------- batches

ARRAY_FIELDS = ("level_offsets", "child_offsets", "child_ids", "child_table", "roots",
                "node_input", "word_ids", "features", "labels")


@st.composite
def broken_batch(draw: Any, batch: LinearizedBatch) -> Any:
    """``batch`` with one field replaced by a broken (or an equal but differently made) value;
    made with ``dataclasses.replace``, so the constructor's checks run too."""
    name = draw(st.sampled_from(("num_nodes",) + ARRAY_FIELDS))
    if name == "num_nodes":
        n = batch.num_nodes
        value = draw(st.sampled_from([n + 1, n - 1, 0, -1, float(n), str(n), True, 2**40,
                                      np.int64(n), np.int32(n), None]))
        return dataclasses.replace(batch, num_nodes=value)
    old = getattr(batch, name)
    kind = draw(st.sampled_from(["set", "set", "set", "dtype", "drop", "grow", "empty", "ndim",
                                 "strided", "copy", "none", "list"]))
    if old is None:
        old = np.zeros(batch.num_nodes, np.int32)  # a field the batch lacks: make one up
    a = np.array(old)  # a writable copy
    if kind == "set" and a.size:
        flat = a.reshape(-1)
        flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from(NASTY)) \
            if a.dtype.kind == "i" else draw(st.floats(allow_nan=True, width=64))
    elif kind == "dtype":
        a = a.astype(draw(st.sampled_from([np.int64, np.int16, np.uint32, np.float32,
                                           np.float64, np.bool_])))
    elif kind == "drop" and a.size:
        a = a[:-1]
    elif kind == "grow":
        a = np.concatenate([a, a[:1] if len(a) else np.zeros((1,) + a.shape[1:], a.dtype)])
    elif kind == "empty":
        a = a[:0]
    elif kind == "ndim":
        a = a.reshape(-1) if a.ndim > 1 else a.reshape(-1, 1)
    elif kind == "strided":  # the same values, not contiguous: must run like the original
        wide = np.zeros((a.shape[0] * 2,) + a.shape[1:], a.dtype)
        wide[::2] = a
        a = wide[::2]
    elif kind == "none":
        a = None
    elif kind == "list":
        a = a.tolist()
    return dataclasses.replace(batch, **{name: a})


# ---------------------------------------------------------------- the run


def properties(exe: Any, oracle: Any, structures: Any, valid: Any) -> list[Any]:
    """The two Hypothesis tests of one model: broken structures through ``exe(x)``, broken
    batches (from a valid structure) through ``exe.run(batch)``."""

    @given(structures)
    def through_call(x: Any) -> None:
        check(exe, oracle, "__call__", x)

    @given(st.data())
    def through_run(data: Any) -> None:
        batch = exe.linearize(data.draw(valid))
        try:
            bad = data.draw(broken_batch(batch))
        except Exception as exc:  # noqa: BLE001 - the constructor refused the field
            refused(exc)
            return
        check(exe, oracle, "run", bad)

    return [through_call, through_run]


def main(target: str, examples: int) -> dict[str, Any]:
    faulthandler.enable()
    options = settings(max_examples=examples, deadline=None, database=None,
                       derandomize="CORTEX_FUZZ_SEED" not in os.environ,
                       suppress_health_check=list(HealthCheck))
    models = {"binary": TreeLSTM(hidden=4, embed=3, vocab=V, seed=1),
              "childsum": ChildSumTreeLSTM(hidden=4, embed=3, vocab=V, seed=2)}
    exes = {k: (cortex.compile(m, target=target), cortex.compile(m, target="numpy"))
            for k, m in models.items()}
    strategies = {"binary": binary_structures(), "childsum": childsum_structures()}
    valid = {"binary": binary_trees, "childsum": parent_arrays(full_tokens=True).map(
        lambda pw: ParentArray(pw[0], words=pw[1]))}

    for name, (exe, oracle) in exes.items():
        for test in properties(exe, oracle, strategies[name], valid[name]):
            test = options(test)
            if "CORTEX_FUZZ_SEED" in os.environ:
                test = seed(int(os.environ["CORTEX_FUZZ_SEED"]))(test)
            test()
    return {"target": target, "examples_per_property": examples, "properties": 4,
            "outcomes": dict(sorted(SEEN.items()))}


if __name__ == "__main__":
    summary = main(sys.argv[1], int(sys.argv[2]))
    print(json.dumps(summary))
