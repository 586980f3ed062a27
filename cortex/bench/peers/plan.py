"""Weights and level plans shared by the peers (see ``cortex/bench/peers/__init__.py``).

Pipeline position: outside the pipeline. ``TreeLSTMWeights`` restacks a zoo ``TreeLSTM``'s
named parameters into the two matrices an implementation multiplies with (the leaf gates
``[3H, D]`` and the internal gates ``[5H, 2H]``); ``LevelPlan`` turns a ``LinearizedBatch``
(nodes numbered level by level, leaves first) into per-level child index arrays of a binary
tree, ``CSRPlan`` into per-level child lists of any arity (child-sum TreeLSTM, DAG-RNN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cortex.core.linearize.structure import LinearizedBatch

# Internal-node gate order of the stacked matrix: the four sigmoid gates first, then u (tanh),
# so one sigmoid covers a contiguous [n, 4H] block.
INTERNAL_GATES = ("i", "o", "f0", "f1", "u")
LEAF_GATES = ("i", "o", "u")


@dataclass(frozen=True)
class TreeLSTMWeights:
    """A binary TreeLSTM's weights, stacked (float32 unless the model is float64)."""

    hidden: int
    E: np.ndarray  # [vocab, D]
    W_leaf: np.ndarray  # [3H, D]: rows i, o, u
    b_leaf: np.ndarray  # [3H]
    U: np.ndarray  # [5H, 2H]: rows i, o, f0, f1, u; columns [left child | right child]
    b_internal: np.ndarray  # [5H]

    @staticmethod
    def from_model(model: Any) -> "TreeLSTMWeights":
        if getattr(model, "arity", None) != 2 or "E" not in model.params:
            raise ValueError("the TreeLSTM peers implement the binary TreeLSTM with token input "
                             "(TreeLSTM(vocab=..., embed=..., hidden=...)); got "
                             f"{model!r}")
        p = model.params
        W_leaf = np.concatenate([p[f"W_{g}"] for g in LEAF_GATES], 0)
        b_leaf = np.concatenate([p[f"b_{g}"] for g in LEAF_GATES], 0)

        def rows(gate: str) -> np.ndarray:
            return np.concatenate([p[f"U_{gate}_{l}"] for l in range(2)], 1)  # [H, 2H]

        def bias(gate: str) -> np.ndarray:
            return p["b_f"] if gate.startswith("f") else p[f"b_{gate}"]

        U = np.concatenate([rows(g) for g in INTERNAL_GATES], 0)
        b_int = np.concatenate([bias(g) for g in INTERNAL_GATES], 0)
        c = np.ascontiguousarray
        return TreeLSTMWeights(int(model.hidden), c(p["E"]), c(W_leaf), c(b_leaf), c(U), c(b_int))


@dataclass(frozen=True)
class LevelPlan:
    """Per-level index arrays of a binary-tree batch (int64, for NumPy/PyTorch indexing)."""

    num_nodes: int
    num_leaves: int
    leaf_words: np.ndarray  # [NL] token ids of nodes 0..NL-1
    levels: tuple[tuple[int, int, np.ndarray, np.ndarray], ...]  # (lo, hi, left ids, right ids)
    roots: np.ndarray  # [B]

    @staticmethod
    def from_batch(batch: LinearizedBatch) -> "LevelPlan":
        if batch.max_arity not in (0, 2):
            raise ValueError(f"LevelPlan is for binary trees; this batch has arity {batch.max_arity}")
        nl = batch.num_leaves
        words = None if batch.word_ids is None else batch.word_ids[:nl].astype(np.int64)
        levels = []
        for l in range(1, batch.num_levels):
            lo, hi = int(batch.level_offsets[l]), int(batch.level_offsets[l + 1])
            ct = batch.child_table[lo:hi].astype(np.int64)
            levels.append((lo, hi, np.ascontiguousarray(ct[:, 0]), np.ascontiguousarray(ct[:, 1])))
        return LevelPlan(batch.num_nodes, nl, words, tuple(levels),
                         batch.roots.astype(np.int64))


@dataclass(frozen=True)
class CSRPlan:
    """Per-level child lists of a batch of any arity (int64). For level ``l >= 1`` spanning
    nodes ``lo:hi``: ``child`` holds their children's ids, parent by parent (CSR order),
    ``seg[e]`` the position in ``lo:hi`` of edge ``e``'s parent and ``starts`` the offset of
    each parent's first child in ``child`` (every node above level 0 has a child, so
    ``np.add.reduceat(x[child], starts)`` sums per parent)."""

    num_nodes: int
    num_leaves: int
    words: np.ndarray | None  # [N] token ids, -1 = none
    levels: tuple[tuple[int, int, np.ndarray, np.ndarray, np.ndarray], ...]  # lo, hi, child, seg, starts
    roots: np.ndarray  # [B]

    @staticmethod
    def from_batch(batch: LinearizedBatch) -> "CSRPlan":
        offs = batch.child_offsets.astype(np.int64)
        levels = []
        for l in range(1, batch.num_levels):
            lo, hi = int(batch.level_offsets[l]), int(batch.level_offsets[l + 1])
            counts = np.diff(offs[lo : hi + 1])
            child = batch.child_ids[offs[lo] : offs[hi]].astype(np.int64)
            levels.append((lo, hi, child, np.repeat(np.arange(hi - lo), counts),
                           offs[lo:hi] - offs[lo]))
        words = None if batch.word_ids is None else batch.word_ids.astype(np.int64)
        return CSRPlan(batch.num_nodes, batch.num_leaves, words, tuple(levels),
                       batch.roots.astype(np.int64))


@dataclass(frozen=True)
class ChildSumWeights:
    """A child-sum TreeLSTM's weights, stacked: every node's input projection ``W_x [4H, D]``
    (rows i, o, u, f, with the biases), the children-sum gates ``U_iou [3H, H]`` and ``U_f``."""

    hidden: int
    E: np.ndarray  # [vocab, D]
    W_x: np.ndarray  # [4H, D]: rows i, o, u, f
    b_x: np.ndarray  # [4H]
    U_iou: np.ndarray  # [3H, H]
    U_f: np.ndarray  # [H, H]

    @staticmethod
    def from_model(model: Any) -> "ChildSumWeights":
        p = model.params
        if "U_f" not in p or "E" not in p:
            raise ValueError(f"the child-sum peers implement ChildSumTreeLSTM with token input; got {model!r}")
        c = np.ascontiguousarray
        gates = ("i", "o", "u", "f")
        return ChildSumWeights(int(model.hidden), c(p["E"]),
                               c(np.concatenate([p[f"W_{g}"] for g in gates], 0)),
                               c(np.concatenate([p[f"b_{g}"] for g in gates], 0)),
                               c(np.concatenate([p[f"U_{g}"] for g in ("i", "o", "u")], 0)), c(p["U_f"]))
