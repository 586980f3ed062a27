"""Test helpers: structures of every family, a tiny LinearizedBatch builder, hand-written
NumPy versions of the zoo's docstring equations.

This is deliberately independent of ``cortex.core.linearize`` (written in parallel) and of the
graph machinery: the batch builder is a plain Python level sort, and the hand-written models
walk the user's structure node by node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cortex.core.linearize.structure import INDEX_DTYPE, LinearizedBatch
from cortex.testing.structures import balanced, caterpillar


@dataclass
class Structure:
    """One input: ``children[v]`` lists node v's children (user numbering); per-node inputs."""

    children: list[list[int]]
    words: list[int] | None = None
    features: np.ndarray | None = None  # [n, F]

    @property
    def root(self) -> int:
        has_parent = {c for cs in self.children for c in cs}
        roots = [v for v in range(len(self.children)) if v not in has_parent]
        assert len(roots) == 1, roots
        return roots[0]


def post_order(s: Structure) -> list[int]:
    """Children before parents, each node once (iterative; works for DAGs)."""
    seen, order, stack = set(), [], [(s.root, False)]
    while stack:
        v, done = stack.pop()
        if done:
            order.append(v)
            continue
        if v in seen:
            continue
        seen.add(v)
        stack.append((v, True))
        stack.extend((c, False) for c in reversed(s.children[v]) if c not in seen)
    return order


def make_batch(structures: list[Structure]) -> tuple[LinearizedBatch, list[dict[int, int]]]:
    """Level-order a batch; return it and, per input, the map user node -> batch node id."""
    keys = []
    for b, s in enumerate(structures):
        height: dict[int, int] = {}
        for v in post_order(s):
            height[v] = 1 + max((height[c] for c in s.children[v]), default=-1)
        keys.extend((height[v], b, v) for v in height)
    keys.sort()
    ids = [dict() for _ in structures]
    for new, (_, b, v) in enumerate(keys):
        ids[b][v] = new
    n = len(keys)
    levels = [h for h, _, _ in keys]
    level_offsets = [0] + [i + 1 for i in range(n - 1) if levels[i] != levels[i + 1]] + [n]
    child_lists = [[ids[b][c] for c in structures[b].children[v]] for _, b, v in keys]
    arity = max((len(c) for c in child_lists), default=0)
    table = np.full((n, arity), -1, dtype=INDEX_DTYPE)
    for i, cs in enumerate(child_lists):
        table[i, : len(cs)] = cs
    offsets = np.cumsum([0] + [len(c) for c in child_lists]).astype(INDEX_DTYPE)
    words = None
    if any(s.words is not None for s in structures):
        words = np.array([structures[b].words[v] for _, b, v in keys], dtype=INDEX_DTYPE)
    features = None
    if any(s.features is not None for s in structures):
        features = np.stack([structures[b].features[v] for _, b, v in keys]).astype(np.float64)
    batch = LinearizedBatch(
        num_nodes=n,
        level_offsets=np.array(level_offsets, dtype=INDEX_DTYPE),
        child_offsets=offsets,
        child_ids=np.array([c for cs in child_lists for c in cs], dtype=INDEX_DTYPE),
        child_table=table,
        roots=np.array([ids[b][s.root] for b, s in enumerate(structures)], dtype=INDEX_DTYPE),
        node_input=np.array([b for _, b, _ in keys], dtype=INDEX_DTYPE),
        word_ids=words,
        features=features,
    )
    return batch, ids


# ---- structure families ----------------------------------------------------------------------


def _fixed_random(rng, leaves: int, k: int) -> list[list[int]]:
    """A random full k-ary tree: repeatedly merge k random pending subtrees."""
    if k == 1:
        return [[]] + [[i] for i in range(leaves - 1)]
    children: list[list[int]] = [[] for _ in range(leaves)]
    pending = list(range(leaves))
    while len(pending) > 1:
        if len(pending) < k:  # pad with fresh leaves so every internal node has k children
            for _ in range(k - len(pending)):
                children.append([])
                pending.append(len(children) - 1)
        picks = sorted(rng.choice(len(pending), size=k, replace=False))
        group = [pending[i] for i in picks]
        pending = [p for i, p in enumerate(pending) if i not in set(picks)]
        children.append(group)
        pending.insert(int(picks[0]), len(children) - 1)
    return children


def _var_random(rng, n: int) -> list[list[int]]:
    """Random variable-arity tree: node v > 0 hangs under a random earlier node (root 0)."""
    children: list[list[int]] = [[] for _ in range(n)]
    for v in range(1, n):
        children[int(rng.integers(0, v))].append(v)
    return children


def _random_dag(rng, n: int) -> list[list[int]]:
    """A DAG with shared children and one sink: node v picks 1..3 distinct earlier nodes."""
    children: list[list[int]] = [[] for _ in range(3)]
    for v in range(3, n):
        k = int(rng.integers(1, min(3, v) + 1))
        children.append(sorted(int(c) for c in rng.choice(v, size=k, replace=False)))
    has_parent = {c for cs in children for c in cs}
    orphans = [v for v in range(len(children)) if v not in has_parent]
    children.append(orphans)  # one sink over every node nobody reads
    return children


def grid(rows: int, cols: int) -> list[list[int]]:
    """DAG-RNN's south-east sweep: cell (r, c) = r*cols + c has children up and left."""
    children = []
    for r in range(rows):
        for c in range(cols):
            kids = []
            if r > 0:
                kids.append((r - 1) * cols + c)
            if c > 0:
                kids.append(r * cols + c - 1)
            children.append(kids)
    return children


def families(arity: int | None, rng) -> dict[str, list[list[list[int]]]]:
    """Structure family name -> list of children-lists (one batch per family)."""
    if arity is None:
        return {
            "single_leaf": [[[]]],
            "chain": [[[]] + [[i] for i in range(15)]],
            "balanced": [balanced(3, 3)],
            "random": [_var_random(rng, 30), _var_random(rng, 12)],
            "wide": [[[] for _ in range(12)] + [list(range(12))]],
            "dag": [_random_dag(rng, 25)],
        }
    return {
        "single_leaf": [[[]]],
        "chain": [caterpillar(12, arity)],
        "balanced": [balanced(3, arity)],
        "random": [_fixed_random(rng, 15, arity), _fixed_random(rng, 6, arity)],
        "wide": [_fixed_random(rng, int(rng.integers(1, 5)), arity) for _ in range(8)],
    }


def grid_families() -> dict[str, list[list[list[int]]]]:
    return {
        "single_leaf": [grid(1, 1)],
        "chain": [grid(1, 9)],
        "balanced": [grid(4, 4)],
        "random": [grid(3, 5), grid(6, 2)],
        "wide": [grid(2, 12), grid(1, 1), grid(5, 1)],
    }


def with_inputs(children_lists, rng, *, vocab: int | None = None, features: int | None = None) -> list[Structure]:
    out = []
    for ch in children_lists:
        n = len(ch)
        out.append(Structure(
            children=ch,
            words=[int(w) for w in rng.integers(0, vocab, n)] if vocab else None,
            features=rng.normal(size=(n, features)) if features else None,
        ))
    return out


# ---- hand-written NumPy models (the docstring equations, node by node) --------------------


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def run_by_hand(step, structures: list[Structure]) -> list[dict[int, dict[str, np.ndarray]]]:
    """Per input, user node -> states, calling ``step(node_input, [child states])``."""
    results = []
    for s in structures:
        states: dict[int, dict[str, np.ndarray]] = {}
        for v in post_order(s):
            x = s.words[v] if s.words is not None else (s.features[v] if s.features is not None else None)
            states[v] = step(x, [states[c] for c in s.children[v]])
        results.append(states)
    return results


def hand_model(name: str, P: dict[str, np.ndarray], model):
    """The docstring equations of zoo model ``name`` as a per-node function."""
    P = {k: np.asarray(v, dtype=np.float64) for k, v in P.items()}

    def vec(x):
        return P["E"][x] if "E" in P and not isinstance(x, np.ndarray) else np.asarray(x)

    if name == "TreeFC":
        def step(x, kids):
            if not kids:
                return {"h": np.maximum(P["W_e"] @ vec(x) + P["b_e"], 0)}
            return {"h": np.maximum(sum(P[f"W_{k}"] @ c["h"] for k, c in enumerate(kids)) + P["b"], 0)}
    elif name == "TreeRNN":
        def step(x, kids):
            if not kids:
                return {"h": P["E"][x]} if "E" in P else {"h": np.tanh(P["W_e"] @ x + P["b_e"])}
            return {"h": np.tanh(P["W"] @ np.concatenate([c["h"] for c in kids]) + P["b"])}
    elif name == "TreeGRU":
        def step(x, kids):
            if not kids:
                return {"h": np.tanh(P["W_e"] @ vec(x) + P["b_e"])}
            hs = [c["h"] for c in kids]
            r = sigmoid(sum(P[f"U_r_{k}"] @ h for k, h in enumerate(hs)) + P["b_r"])
            z = sigmoid(sum(P[f"U_z_{k}"] @ h for k, h in enumerate(hs)) + P["b_z"])
            n = np.tanh(sum(P[f"U_n_{k}"] @ (r * h) for k, h in enumerate(hs)) + P["b_n"])
            return {"h": (1 - z) * n + z * sum(hs) / len(hs)}
    elif name == "TreeLSTM":
        def step(x, kids):
            if not kids:
                e = vec(x)
                i = sigmoid(P["W_i"] @ e + P["b_i"])
                o = sigmoid(P["W_o"] @ e + P["b_o"])
                u = np.tanh(P["W_u"] @ e + P["b_u"])
                c = i * u
                return {"h": o * np.tanh(c), "c": c}
            hs = [k["h"] for k in kids]
            N = len(hs)
            i = sigmoid(sum(P[f"U_i_{l}"] @ hs[l] for l in range(N)) + P["b_i"])
            o = sigmoid(sum(P[f"U_o_{l}"] @ hs[l] for l in range(N)) + P["b_o"])
            u = np.tanh(sum(P[f"U_u_{l}"] @ hs[l] for l in range(N)) + P["b_u"])
            c = i * u
            for k in range(N):
                f = sigmoid(sum(P[f"U_f{k}_{l}"] @ hs[l] for l in range(N)) + P["b_f"])
                c = c + f * kids[k]["c"]
            return {"h": o * np.tanh(c), "c": c}
    elif name == "ChildSumTreeLSTM":
        def step(x, kids):
            e = vec(x)
            hsum = sum((k["h"] for k in kids), np.zeros(model.hidden))
            i = sigmoid(P["W_i"] @ e + P["U_i"] @ hsum + P["b_i"])
            o = sigmoid(P["W_o"] @ e + P["U_o"] @ hsum + P["b_o"])
            u = np.tanh(P["W_u"] @ e + P["U_u"] @ hsum + P["b_u"])
            c = i * u
            for k in kids:
                c = c + sigmoid(P["W_f"] @ e + P["U_f"] @ k["h"] + P["b_f"]) * k["c"]
            return {"h": o * np.tanh(c), "c": c}
    elif name == "MVRNN":
        def step(x, kids):
            if not kids:
                return {"h": P["E"][x], "M": P["M_E"][x]}
            (a, A), (b, B) = (kids[0]["h"], kids[0]["M"]), (kids[1]["h"], kids[1]["M"])
            return {
                "h": np.tanh(P["W"] @ np.concatenate([B @ a, A @ b]) + P["b_W"]),
                "M": P["W_M"] @ np.vstack([A, B]),
            }
    elif name == "DAGRNN":
        def step(x, kids):
            return {"h": np.tanh(P["U"] @ x + sum((P["W"] @ k["h"] for k in kids), np.zeros(model.hidden)) + P["b"])}
    elif name == "SeqLSTM":
        def step(x, kids):
            e = vec(x)
            h, c = (kids[0]["h"], kids[0]["c"]) if kids else (np.zeros(model.hidden),) * 2
            g = {k: P[f"W_{k}"] @ e + P[f"b_{k}"] + P[f"U_{k}"] @ h for k in "ifgo"}
            c = sigmoid(g["f"]) * c + sigmoid(g["i"]) * np.tanh(g["g"])
            return {"h": sigmoid(g["o"]) * np.tanh(c), "c": c}
    elif name == "SeqGRU":
        def step(x, kids):
            e = vec(x)
            h = kids[0]["h"] if kids else np.zeros(model.hidden)
            r = sigmoid(P["W_r"] @ e + P["b_r"] + P["U_r"] @ h)
            z = sigmoid(P["W_z"] @ e + P["b_z"] + P["U_z"] @ h)
            n = np.tanh(P["W_n"] @ e + P["b_in"] + r * (P["U_n"] @ h + P["b_hn"]))
            return {"h": (1 - z) * n + z * h}
    else:
        raise KeyError(name)
    return step


# ---- the zoo in small sizes, with matching structures ------------------------------------


def zoo_cases(dtype: str = "float64"):
    """(name, model, structure families) for every zoo model, small sizes."""
    from cortex import models as M

    rng = np.random.default_rng(7)
    V, D, H = 11, 5, 6
    out = []
    specs = [
        ("TreeFC", M.TreeFC(hidden=H, embed=D, vocab=V, dtype=dtype, seed=1), dict(vocab=V)),
        ("TreeFC", M.TreeFC(hidden=H, embed=D, vocab=V, arity=3, dtype=dtype, seed=2), dict(vocab=V)),
        ("TreeRNN", M.TreeRNN(hidden=H, vocab=V, dtype=dtype, seed=3), dict(vocab=V)),
        ("TreeGRU", M.TreeGRU(hidden=H, embed=D, vocab=V, dtype=dtype, seed=4), dict(vocab=V)),
        ("TreeLSTM", M.TreeLSTM(hidden=H, embed=D, vocab=V, dtype=dtype, seed=5), dict(vocab=V)),
        ("TreeLSTM", M.TreeLSTM(hidden=H, features=D, arity=3, dtype=dtype, seed=6), dict(features=D)),
        ("ChildSumTreeLSTM", M.ChildSumTreeLSTM(hidden=H, embed=D, vocab=V, dtype=dtype, seed=7), dict(vocab=V)),
        ("MVRNN", M.MVRNN(hidden=4, vocab=V, dtype=dtype, seed=8), dict(vocab=V)),
        ("DAGRNN", M.DAGRNN(hidden=H, features=D, dtype=dtype, seed=9), dict(features=D)),
        ("SeqLSTM", M.SeqLSTM(hidden=H, features=D, dtype=dtype, seed=10), dict(features=D)),
        ("SeqGRU", M.SeqGRU(hidden=H, embed=D, vocab=V, dtype=dtype, seed=11), dict(vocab=V)),
    ]
    for name, model, inputs in specs:
        fams = grid_families() if name == "DAGRNN" else families(model.arity, rng)
        if model.arity == 1:
            fams = {"single_leaf": [[[]]], "chain": [caterpillar(20, 1)],
                    "balanced": [caterpillar(5, 1)] * 3, "random": [caterpillar(int(rng.integers(0, 9)), 1) for _ in range(5)],
                    "wide": [caterpillar(0, 1)] * 6 + [caterpillar(3, 1)]}
        batches = {f: with_inputs(chs, rng, **inputs) for f, chs in fams.items()}
        out.append((f"{name}[arity={model.arity}]", name, model, batches))
    return out
