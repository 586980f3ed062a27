"""Property tests of the linearizer over random trees, DAGs and sequences (hypothesis).

For every input form: ``validate()`` holds (each node once, children before parents, levels =
heights, CSR = child table, roots, ...), heights equal an independent per-node computation, the
output maps back to exactly the input structure, and a batch is the level-wise concatenation of
its single linearizations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex.core.linearize import (ChildTable, EdgeList, Grid, ParentArray, Sequence, SExpr,
                                   clear_cache, linearize)

SETTINGS = settings(max_examples=40, deadline=None)


# ---------------------------------------------------------------- random structures
@st.composite
def random_tree(draw: Any, max_nodes: int = 40) -> tuple[list[int], list[int]]:
    """(parents, words) of a random tree with ids in random order."""
    n = draw(st.integers(1, max_nodes))
    par = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    perm = draw(st.permutations(range(n)))
    parents = [-1] * n
    for i in range(n):
        parents[perm[i]] = -1 if par[i] < 0 else perm[par[i]]
    words = [draw(st.integers(0, 50)) for _ in range(n)]
    return parents, words


@st.composite
def random_dag(draw: Any, max_nodes: int = 30) -> tuple[int, list[tuple[int, int]], list[int]]:
    """(n, edges (parent, child), words) of a DAG with a single sink, ids in random order."""
    n = draw(st.integers(1, max_nodes))
    edges = []
    for i in range(n - 1):  # node i's parents are among i+1..n-1 (n-1 is the sink)
        ps = draw(st.lists(st.integers(i + 1, n - 1), min_size=1, max_size=3))
        edges += [(p, i) for p in ps]
    perm = draw(st.permutations(range(n)))
    edges = [(perm[p], perm[c]) for p, c in draw(st.permutations(edges))]
    return n, edges, [draw(st.integers(0, 50)) for _ in range(n)]


def nested_from_parents(parents: list[int], words: list[int]) -> Any:
    """Nested tuples (int leaves) of a parent-array tree, children in id order."""
    kids: dict[int, list[int]] = {}
    for v, p in enumerate(parents):
        kids.setdefault(p, []).append(v)
    root = kids[-1][0]
    built: dict[int, Any] = {}
    order, stack = [], [root]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(kids.get(v, []))
    for v in reversed(order):
        built[v] = tuple(built[c] for c in kids[v]) if v in kids else words[v]
    return built[root]


def reference_heights(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Heights by repeated relaxation (simple, independent of the implementation)."""
    h = [0] * n
    changed = True
    while changed:
        changed = False
        for p, c in edges:
            if h[c] + 1 > h[p]:
                h[p] = h[c] + 1
                changed = True
    return h


def batch_edges(batch: Any, b: int) -> dict[Any, list[Any]]:
    """Input b's children lists, keyed by the user's node keys."""
    out = {}
    for v in range(batch.num_nodes):
        ib, key = batch.origin[v]
        if ib == b:
            out[key] = [batch.origin[int(c)][1] for c in batch.children(v)]
    return out


def levels_by_key(batch: Any) -> dict[tuple[int, Any], int]:
    out = {}
    for lvl in range(batch.num_levels):
        for v in batch.level(lvl):
            out[batch.origin[v]] = lvl
    return out


def assert_concat_of_singles(items: list[Any], **kw: Any) -> None:
    batch = linearize(items, cache=False, **kw)
    batch.validate()
    singles = [linearize(x, cache=False, **kw) for x in items]
    assert batch.num_nodes == sum(s.num_nodes for s in singles)
    assert batch.num_levels == max(s.num_levels for s in singles)
    for lvl in range(batch.num_levels):
        got = [batch.origin[v] for v in batch.level(lvl)]
        want = [(b, s.origin[v][1]) for b, s in enumerate(singles)
                if lvl < s.num_levels for v in s.level(lvl)]
        assert got == want
    for b, s in enumerate(singles):
        assert batch_edges(batch, b) == batch_edges(s, 0)
        if s.word_ids is not None:
            mine = {batch.origin[v][1]: batch.word_ids[v] for v in range(batch.num_nodes)
                    if batch.origin[v][0] == b}
            assert mine == {s.origin[v][1]: s.word_ids[v] for v in range(s.num_nodes)}
        assert batch.origin[int(batch.roots[b])] == (b, s.origin[int(s.roots[0])][1])


# ---------------------------------------------------------------- properties
@SETTINGS
@given(random_tree())
def test_parent_array_round_trip_and_heights(tree: tuple[list[int], list[int]]) -> None:
    parents, words = tree
    n = len(parents)
    batch = linearize(ParentArray(np.array(parents), words=np.array(words)), cache=False)
    batch.validate()
    assert sorted(batch.origin[v] for v in range(n)) == [(0, i) for i in range(n)]
    back = [0] * n
    for v in range(n):
        kids = batch.children(v)
        for c in kids:
            back[batch.origin[int(c)][1]] = batch.origin[v][1]
    back[batch.origin[int(batch.roots[0])][1]] = -1
    assert back == parents
    assert [batch.word_ids[batch.origin.row(0, i)] for i in range(n)] == words
    edges = [(p, c) for c, p in enumerate(parents) if p >= 0]
    h = reference_heights(n, edges)
    lv = levels_by_key(batch)
    assert all(lv[(0, i)] == h[i] for i in range(n))
    # children keep the user's order (increasing child id for parent arrays)
    for key, kids in batch_edges(batch, 0).items():
        assert kids == sorted(kids)


@SETTINGS
@given(random_tree())
def test_nested_round_trip(tree: tuple[list[int], list[int]]) -> None:
    nested = nested_from_parents(*tree)
    batch = linearize(nested, cache=False)
    batch.validate()
    # rebuild the nested tuple from the arrays (iteratively)
    built: dict[int, Any] = {}
    for v in range(batch.num_nodes):  # children come before parents
        kids = batch.children(v)
        built[v] = tuple(built[int(c)] for c in kids) if len(kids) else int(batch.word_ids[v])
    assert built[int(batch.roots[0])] == nested
    # origin paths address the same nodes of the input
    for v in range(batch.num_nodes):
        node = nested
        for step in batch.origin[v][1].split(".")[1:]:
            node = node[int(step)]
        assert node == built[v]


@SETTINGS
@given(random_dag())
def test_dag_shared_children_once(dag: tuple[int, list[tuple[int, int]], list[int]]) -> None:
    n, edges, words = dag
    batch = linearize(EdgeList(n, np.array(edges, dtype=np.int64).reshape(-1, 2),
                               words=np.array(words)), cache=False)
    batch.validate()
    assert batch.num_nodes == n
    assert sorted(k for _, k in batch.origin) == list(range(n))
    want: dict[int, list[int]] = {i: [] for i in range(n)}
    for p, c in edges:
        want[p].append(c)
    assert batch_edges(batch, 0) == want
    h = reference_heights(n, edges)
    lv = levels_by_key(batch)
    assert all(lv[(0, i)] == h[i] for i in range(n))


@SETTINGS
@given(st.lists(random_tree(15), min_size=1, max_size=5), st.data())
def test_batch_is_concat_of_singles_mixed_forms(trees: list[Any], data: Any) -> None:
    items: list[Any] = []
    for parents, words in trees:
        form = data.draw(st.sampled_from(["parents", "nested", "table", "edges", "sequence"]))
        if form == "parents":
            items.append(ParentArray(np.array(parents), words=words))
        elif form == "nested":
            items.append(nested_from_parents(parents, words))
        elif form == "table":
            n = len(parents)
            k = max([sum(1 for p in parents if p == v) for v in range(n)] + [1])
            table = np.full((n, k), -1)
            for v in range(n):
                kids = [c for c in range(n) if parents[c] == v]
                table[v, : len(kids)] = kids
            items.append(ChildTable(table, words=words))
        elif form == "edges":
            edges = [(p, c) for c, p in enumerate(parents) if p >= 0]
            items.append(EdgeList(len(parents), np.array(edges).reshape(-1, 2), words=words))
        else:
            items.append(Sequence(np.array(words)))
    assert_concat_of_singles(items)


@SETTINGS
@given(st.lists(random_dag(12), min_size=1, max_size=4))
def test_dag_batches_are_concat_of_singles(dags: list[Any]) -> None:
    items = [EdgeList(n, np.array(e).reshape(-1, 2), words=w) for n, e, w in dags]
    assert_concat_of_singles(items)


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=12), min_size=1, max_size=5))
def test_sequences_are_chains(seqs: list[list[int]]) -> None:
    batch = linearize([Sequence(s) for s in seqs], cache=False)
    batch.validate()
    assert batch.num_levels == max(map(len, seqs))
    for b, s in enumerate(seqs):
        rows = [batch.origin.row(b, t) for t in range(len(s))]
        assert [int(batch.word_ids[r]) for r in rows] == s
        assert all(list(batch.children(rows[t])) == [rows[t - 1]] for t in range(1, len(s)))
        assert int(batch.roots[b]) == rows[-1]
    assert_concat_of_singles([Sequence(s) for s in seqs])


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 6))
def test_grid_levels_are_antidiagonals(rows: int, cols: int) -> None:
    feats = np.arange(rows * cols * 2, dtype=float).reshape(rows, cols, 2)
    batch = linearize(Grid(rows, cols, features=feats), cache=False)
    batch.validate()
    for v in range(batch.num_nodes):
        i, j = batch.origin[v][1]
        assert batch.features[v].tolist() == feats[i, j].tolist()
        assert v in batch.level(i + j)
        want = ([(i - 1, j)] if i else []) + ([(i, j - 1)] if j else [])
        assert [batch.origin[int(c)][1] for c in batch.children(v)] == want


@SETTINGS
@given(st.lists(random_tree(20), min_size=1, max_size=4))
def test_cache_returns_identical_results(trees: list[Any]) -> None:
    clear_cache()
    items = [ParentArray(np.array(p), words=np.array(w)) for p, w in trees]
    a = linearize(items)
    b = linearize([ParentArray(np.array(p), words=np.array(w)) for p, w in trees])
    c = linearize(items, cache=False)
    assert a is b
    for name in ("level_offsets", "child_offsets", "child_ids", "child_table", "roots",
                 "node_input", "word_ids"):
        assert np.array_equal(getattr(a, name), getattr(c, name))


def sst_text(tree: Any, labels: list[int]) -> str:
    """SST text of a nested tree (int leaves -> words "w<id>"), labels drawn per node."""
    out: list[str] = []
    stack: list[Any] = [tree]
    k = 0
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            out.append(node)
            continue
        label = labels[k % len(labels)]
        k += 1
        if isinstance(node, tuple):
            out.append(f"({label} ")
            stack.append(")")
            for c in reversed(node):
                stack.append(" ")
                stack.append(c)
        else:
            out.append(f"({label} w{node})")
    return "".join(out)


@SETTINGS
@given(st.lists(random_tree(25), min_size=1, max_size=4),
       st.lists(st.integers(0, 4), min_size=1, max_size=5))
def test_sst_strings_batch_path_matches_single_path(trees: list[Any], labels: list[int]) -> None:
    vocab = {f"w{i}": i for i in range(51)}
    texts = [sst_text(nested_from_parents(p, w), labels) for p, w in trees]
    batch = linearize(texts, vocab=vocab, cache=False)  # the vectorized reader
    batch.validate()
    for b, text in enumerate(texts):
        single = linearize([(1,), SExpr(text)], vocab=vocab, cache=False)  # per-item reader
        mine = {batch.origin[v][1]: (int(batch.word_ids[v]), int(batch.labels[v]))
                for v in range(batch.num_nodes) if batch.origin[v][0] == b}
        ref = {single.origin[v][1]: (int(single.word_ids[v]), int(single.labels[v]))
               for v in range(single.num_nodes) if single.origin[v][0] == 1}
        assert mine == ref
        assert batch_edges(batch, b) == batch_edges(single, 1)
