"""What the benchmark runs: the zoo models it knows, their inputs at a sweep point, FLOP counts.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. The runner
(:mod:`cortex.bench.run`) asks this module for a point's model and inputs in the parent process
(for the float64 reference) and every worker process asks it again (to build its contender):
everything here is a pure function of its arguments and the seed, so every process gets the
same weights and the same structures without shipping them.

A *point* is ``(model, hidden, tokens, batch)``: ``tokens`` is the mean input size (a
sentence's words: leaves of a binary parse tree, nodes of a dependency tree, elements of a
sequence, cells of a DAG-RNN grid); each input draws its size uniformly from
``[round(2t/3), round(4t/3)]`` (20-40 for ``t = 30``), seeded. The embedding width equals
``hidden`` unless the options fix it.

FLOP model (``flops``): a GEMV of a ``[rows, cols]`` matrix is ``2 * rows * cols`` FLOPs; every
elementwise op (add, mul, bias add, sigmoid, tanh, relu, ``1 - z``) is 1 FLOP per element, a
transcendental included; embedding lookups, gathers, concatenations and copies are 0. With
``H`` hidden and ``D`` the per-node input width (binary trees: arity 2):

* TreeLSTM  leaf ``6HD + 9H``; internal ``20H^2 + 17H`` (the stacked ``[5H, 2H]`` gate GEMV).
* TreeGRU   leaf ``2HD + 2H``; internal ``12H^2 + 17H``.
* ChildSumTreeLSTM  leaf ``6HD + 9H``; internal ``8HD + 6H^2 + 13H``, plus ``2H^2 + 5H`` per
  child (its forget gate ``U_f h_k``, the sums over children).
* TreeFC    leaf ``2HD + 2H``; internal ``4H^2 + 3H``.
* MVRNN     leaf ``0``; internal ``4H^3 + 8H^2 + 2H`` (``W_M [H, 2H] @ [2H, H]`` dominates).
* DAGRNN    every cell ``2HD + 2H``, plus ``2H^2 + H`` per predecessor edge.
* SeqLSTM   first element ``8HD + 13H``; every other ``8HD + 8H^2 + 17H``.

The formulas count the model's equations (``cortex/models``), not what an implementation
happens to execute, so GFLOP/s is comparable across contenders.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from cortex.core.linearize.structure import LinearizedBatch


@dataclass(frozen=True)
class ModelSpec:
    """How the benchmark builds one zoo model and its inputs."""

    name: str
    family: str  # "binary" | "dependency" | "grid" | "sequence": the input generator
    formula: tuple[str, str]  # (leaf / first element / cell, internal / edge), for the JSON
    max_vocab: int | None = None  # the model's vocabulary is min(options' vocab, this)
    hidden_divisor: int = 1  # the model's hidden = sweep hidden // this (MV-RNN's H x H states)

    def hidden(self, hidden: int) -> int:
        return max(1, hidden // self.hidden_divisor)

    def vocab(self, vocab: int) -> int:
        return vocab if self.max_vocab is None else min(vocab, self.max_vocab)


MODELS: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("TreeLSTM", "binary", ("6HD + 9H", "20H^2 + 17H")),
    ModelSpec("TreeGRU", "binary", ("2HD + 2H", "12H^2 + 17H")),
    ModelSpec("ChildSumTreeLSTM", "dependency", ("6HD + 9H", "8HD + 6H^2 + 13H + (2H^2 + 5H) per child")),
    ModelSpec("TreeFC", "binary", ("2HD + 2H", "4H^2 + 3H")),
    # MV-RNN's state is an H x H matrix per node (4H^3 FLOPs a node): a quarter of the sweep's
    # hidden keeps it a comparable workload (hidden 256 -> 64)
    ModelSpec("MVRNN", "binary", ("0", "4H^3 + 8H^2 + 2H"), max_vocab=1000, hidden_divisor=4),
    ModelSpec("DAGRNN", "grid", ("2HD + 2H per cell", "2H^2 + H per predecessor edge")),
    ModelSpec("SeqLSTM", "sequence", ("8HD + 13H", "8HD + 8H^2 + 17H")),
)}


def model_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


@dataclass(frozen=True)
class GroupKey:
    """What one compile serves: a model at one width (the points of a group share it)."""

    model: str
    hidden: int  # the sweep's hidden size (the model's own may differ: ModelSpec.hidden)
    embed: int | None  # None: the model's hidden
    vocab: int
    seed: int
    dtype: str = "float32"


def build_model(key: GroupKey) -> Any:
    """The zoo model of ``key`` with its seeded random weights."""
    from cortex import models

    spec = model_spec(key.model)
    h = spec.hidden(key.hidden)
    d = key.embed or h
    v = spec.vocab(key.vocab)
    if key.model == "MVRNN":
        return models.MVRNN(hidden=h, vocab=v, seed=key.seed, dtype=key.dtype)
    if key.model == "DAGRNN":
        return models.DAGRNN(hidden=h, features=d, seed=key.seed, dtype=key.dtype)
    cls = getattr(models, key.model)
    return cls(hidden=h, embed=d, vocab=v, seed=key.seed, dtype=key.dtype)


# ------------------------------------------------------------------ inputs


def size_range(tokens: int) -> tuple[int, int]:
    """The sizes an input of mean size ``tokens`` is drawn from (both ends included)."""
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    return max(1, round(2 * tokens / 3)), max(1, round(4 * tokens / 3))


def parse_like_tree(rng: random.Random, leaves: int, vocab: int) -> Any:
    """A random binary bracketing of ``leaves`` random word ids in ``[0, vocab)``, as nested
    2-tuples with int leaves (the shape of a binarized constituency parse)."""
    if leaves < 1:
        raise ValueError(f"a tree needs at least one leaf, got leaves={leaves}")
    nodes: list[Any] = [rng.randrange(vocab) for _ in range(leaves)]
    while len(nodes) > 1:
        i = rng.randrange(len(nodes) - 1)
        nodes[i : i + 2] = [(nodes[i], nodes[i + 1])]
    return nodes[0]


def make_trees(seed: int, count: int, min_leaves: int, max_leaves: int, vocab: int) -> list[Any]:
    """``count`` parse-like trees with a leaf count drawn uniformly from ``[min, max]``."""
    if not 1 <= min_leaves <= max_leaves:
        raise ValueError(f"need 1 <= min_leaves <= max_leaves, got {min_leaves}..{max_leaves}")
    rng = random.Random(seed)
    return [parse_like_tree(rng, rng.randint(min_leaves, max_leaves), vocab) for _ in range(count)]


def dependency_tree(rng: np.random.Generator, n: int, vocab: int) -> Any:
    """A random dependency-like tree of ``n`` tokens as a ``ParentArray``: node 0 is the root,
    node ``i`` attaches to a uniformly drawn earlier node (a random recursive tree: variable
    arity, depth about ``e ln n``), a word at every node."""
    from cortex.core.linearize import ParentArray

    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    return ParentArray(parents, words=rng.integers(0, vocab, n).tolist())


def tree_height(tree: Any) -> int:
    """Height of a nested-tuple tree (a leaf has height 0), iteratively."""
    best, stack = 0, [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, tuple):
            stack.extend((c, depth + 1) for c in node)
        else:
            best = max(best, depth)
    return best


@dataclass
class Inputs:
    """One point's inputs: ``structures`` as a user passes them to an executable and ``raw``
    (nested tuples or token arrays) for the peers that recurse over them."""

    structures: list[Any]
    raw: list[Any]


def point_seed(seed: int, tokens: int, batch: int) -> int:
    return seed * 1_000_003 + tokens * 1009 + batch


def make_inputs(model: str, tokens: int, batch: int, *, vocab: int, width: int, seed: int) -> Inputs:
    """The ``batch`` inputs of mean size ``tokens`` of ``model``'s input family (seeded)."""
    from cortex.core.linearize import Grid, Sequence

    spec = model_spec(model)
    lo, hi = size_range(tokens)
    s = point_seed(seed, tokens, batch)
    if spec.family == "binary":
        raw = make_trees(s, batch, lo, hi, spec.vocab(vocab))
        return Inputs(list(raw), raw)
    rng = np.random.default_rng(s)
    if spec.family == "dependency":
        trees = [dependency_tree(rng, int(rng.integers(lo, hi + 1)), spec.vocab(vocab)) for _ in range(batch)]
        return Inputs(trees, trees)
    if spec.family == "grid":
        side = max(1, round(tokens ** 0.5))
        feats = [rng.normal(0.0, 1.0, (side, side, width)) for _ in range(batch)]
        return Inputs([Grid(side, side, features=f) for f in feats], feats)
    # sequences: one length per batch (the nn.LSTM peer takes equal lengths)
    raw = [rng.integers(0, spec.vocab(vocab), tokens) for _ in range(batch)]
    return Inputs([Sequence(w) for w in raw], raw)


def linearize_for(model: Any, structures: list[Any]) -> LinearizedBatch:
    """``structures`` linearized as an executable of ``model`` would (cache off)."""
    from cortex.core.runtime.executable import linearize_options
    from cortex.core.linearize import linearize

    return linearize(structures, cache=False, **linearize_options(model.trace()))


def batch_shape(batch: LinearizedBatch) -> dict[str, int]:
    """Sizes of a linearized batch, for the JSON."""
    return {
        "inputs": batch.batch_size,
        "nodes": batch.num_nodes,
        "leaves": batch.num_leaves,
        "internal": batch.num_nodes - batch.num_leaves,
        "edges": int(len(batch.child_ids)),
        "levels": batch.num_levels,
    }


# ------------------------------------------------------------------ FLOP counts

_FLOPS: dict[str, Callable[[int, int, int, int, int], int]] = {
    # (H, D, leaves, internal, edges) -> FLOPs; module docstring: the model and formulas
    "TreeLSTM": lambda h, d, nl, ni, e: nl * (6 * h * d + 9 * h) + ni * (20 * h * h + 17 * h),
    "TreeGRU": lambda h, d, nl, ni, e: nl * (2 * h * d + 2 * h) + ni * (12 * h * h + 17 * h),
    "ChildSumTreeLSTM": lambda h, d, nl, ni, e: (nl * (6 * h * d + 9 * h)
                                                 + ni * (8 * h * d + 6 * h * h + 13 * h)
                                                 + e * (2 * h * h + 5 * h)),
    "TreeFC": lambda h, d, nl, ni, e: nl * (2 * h * d + 2 * h) + ni * (4 * h * h + 3 * h),
    "MVRNN": lambda h, d, nl, ni, e: ni * (4 * h**3 + 8 * h * h + 2 * h),
    "DAGRNN": lambda h, d, nl, ni, e: (nl + ni) * (2 * h * d + 2 * h) + e * (2 * h * h + h),
    "SeqLSTM": lambda h, d, nl, ni, e: nl * (8 * h * d + 13 * h) + ni * (8 * h * d + 8 * h * h + 17 * h),
}


def flops(model_name: str, batch: LinearizedBatch, hidden: int, width: int) -> int:
    """FLOPs of one forward pass over ``batch`` (module docstring: the model and formulas)."""
    try:
        fn = _FLOPS[model_name]
    except KeyError:
        raise ValueError(f"no FLOP formula for model {model_name!r}; known: {sorted(_FLOPS)}") from None
    nl = batch.num_leaves
    return int(fn(hidden, width, nl, batch.num_nodes - nl, int(len(batch.child_ids))))


def max_error(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute difference, scaled by ``max(1, max |ref|)`` (the states are O(1))."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"result shape {got.shape} differs from the reference's {ref.shape}")
    if not np.all(np.isfinite(got)):
        return float("inf")
    scale = max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    return float(np.abs(got - ref).max() / scale) if ref.size else 0.0
