"""NumPy level-batched peer of the binary TreeLSTM (float32, the obvious implementation).

Pipeline position: outside the pipeline; see ``benchmarks/peers/__init__.py`` for the contract.
Per level: gather the children's rows by index arrays, one ``[n, 2H] @ [2H, 5H]`` matmul
(NumPy's BLAS), the sigmoid ``1 / (1 + exp(-x))`` over the four sigmoid gates, the cell update.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from benchmarks.peers.plan import LevelPlan, TreeLSTMWeights


def build_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    w = TreeLSTMWeights.from_model(model)
    plan = LevelPlan.from_batch(batch)
    H, dt = w.hidden, w.U.dtype
    W_leaf_T = np.ascontiguousarray(w.W_leaf.T)
    U_T = np.ascontiguousarray(w.U.T)
    nl, n = plan.num_leaves, plan.num_nodes

    def sigmoid(x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-x))

    def run() -> dict[str, np.ndarray]:
        h = np.empty((n, H), dt)
        c = np.empty((n, H), dt)
        g = w.E[plan.leaf_words] @ W_leaf_T
        g += w.b_leaf
        io = sigmoid(g[:, : 2 * H])
        c[:nl] = io[:, :H] * np.tanh(g[:, 2 * H :])
        h[:nl] = io[:, H:] * np.tanh(c[:nl])
        for lo, hi, left, right in plan.levels:
            g = np.concatenate((h[left], h[right]), 1) @ U_T
            g += w.b_internal
            s = sigmoid(g[:, : 4 * H])
            cn = s[:, :H] * np.tanh(g[:, 4 * H :]) + s[:, 2 * H : 3 * H] * c[left] + s[:, 3 * H :] * c[right]
            c[lo:hi] = cn
            h[lo:hi] = s[:, H : 2 * H] * np.tanh(cn)
        return {"h": h[plan.roots], "c": c[plan.roots]}

    return run
