"""NumPy level-batched peers (float32, the obvious implementations): binary TreeLSTM, TreeGRU
and child-sum TreeLSTM. NumPy is always installed, so these peers always run.

Pipeline position: outside the pipeline; see ``cortex/bench/peers/__init__.py`` for the contract.
Per level: gather the children's rows by index arrays, one matmul with the stacked gate matrix
(NumPy's BLAS), the sigmoid ``1 / (1 + exp(-x))``, the cell update, a row-slice store.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from cortex.bench.peers.plan import ChildSumWeights, CSRPlan, LevelPlan, TreeLSTMWeights


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def build_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    """Binary TreeLSTM: per level one ``[n, 2H] @ [2H, 5H]`` matmul, one sigmoid over the four
    sigmoid gates."""
    w = TreeLSTMWeights.from_model(model)
    plan = LevelPlan.from_batch(batch)
    H, dt = w.hidden, w.U.dtype
    W_leaf_T = np.ascontiguousarray(w.W_leaf.T)
    U_T = np.ascontiguousarray(w.U.T)
    nl, n = plan.num_leaves, plan.num_nodes

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


def build_treegru_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    """Binary TreeGRU: per level one ``[n, 2H] @ [2H, 2H]`` matmul for the reset and update
    gates, one ``[n, 2H] @ [2H, H]`` for the candidate."""
    p, plan, H = model.params, LevelPlan.from_batch(batch), model.hidden
    E, We_T, be = p["E"], np.ascontiguousarray(p["W_e"].T), p["b_e"]

    def pair(g: str) -> np.ndarray:
        return np.concatenate([p[f"U_{g}_0"], p[f"U_{g}_1"]], 1)  # [H, 2H]

    RZ_T = np.ascontiguousarray(np.concatenate([pair("r"), pair("z")], 0).T)  # [2H, 2H]
    b_rz = np.concatenate([p["b_r"], p["b_z"]])
    N_T, b_n = np.ascontiguousarray(pair("n").T), p["b_n"]
    nl, n = plan.num_leaves, plan.num_nodes

    def run() -> dict[str, np.ndarray]:
        h = np.empty((n, H), E.dtype)
        h[:nl] = np.tanh(E[plan.leaf_words] @ We_T + be)
        for lo, hi, left, right in plan.levels:
            hl, hr = h[left], h[right]
            rz = sigmoid(np.concatenate((hl, hr), 1) @ RZ_T + b_rz)
            r, z = rz[:, :H], rz[:, H:]
            cand = np.tanh(np.concatenate((r * hl, r * hr), 1) @ N_T + b_n)
            h[lo:hi] = (1.0 - z) * cand + z * (0.5 * (hl + hr))
        return {"h": h[plan.roots]}

    return run


def build_childsum_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    """Child-sum TreeLSTM: every node's input projection in one ``[N, D] @ [D, 4H]`` matmul up
    front; per level the children's ``h`` summed per parent (``np.add.reduceat`` over the CSR
    lists), one ``[n, H] @ [H, 3H]`` matmul, the per-child forget gates in one
    ``[edges, H] @ [H, H]``."""
    w = ChildSumWeights.from_model(model)
    plan = CSRPlan.from_batch(batch)
    H, dt = w.hidden, w.U_f.dtype
    Wx_T, U_iou_T, U_f_T = (np.ascontiguousarray(a.T) for a in (w.W_x, w.U_iou, w.U_f))
    nl, n = plan.num_leaves, plan.num_nodes

    def run() -> dict[str, np.ndarray]:
        gx = w.E[plan.words] @ Wx_T
        gx += w.b_x
        h = np.empty((n, H), dt)
        c = np.empty((n, H), dt)
        g = gx[:nl]
        c[:nl] = sigmoid(g[:, :H]) * np.tanh(g[:, 2 * H : 3 * H])
        h[:nl] = sigmoid(g[:, H : 2 * H]) * np.tanh(c[:nl])
        for lo, hi, child, seg, starts in plan.levels:
            hk = h[child]
            g = gx[lo:hi, : 3 * H] + np.add.reduceat(hk, starts, axis=0) @ U_iou_T
            io = sigmoid(g[:, : 2 * H])
            f = sigmoid(gx[lo:hi, 3 * H :][seg] + hk @ U_f_T)
            cn = io[:, :H] * np.tanh(g[:, 2 * H :]) + np.add.reduceat(f * c[child], starts, axis=0)
            c[lo:hi] = cn
            h[lo:hi] = io[:, H:] * np.tanh(cn)
        return {"h": h[plan.roots], "c": c[plan.roots]}

    return run
