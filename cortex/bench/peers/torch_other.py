"""PyTorch peers of the other zoo models: TreeFC, TreeGRU, child-sum TreeLSTM, MV-RNN and DAG-RNN
level-batched (the same scheme as the TreeLSTM peer), and the sequence LSTM as ``torch.nn.LSTM``.

Pipeline position: outside the pipeline; see ``cortex/bench/peers/__init__.py`` for the contract.
Equations: ``cortex/models/`` (tree_fc, tree_gru, mvrnn, dagrnn, sequence). Index tensors,
the embedding-lookup ids and the DAG-RNN's float32 features are prepared outside the timed call.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from cortex.bench.peers.plan import ChildSumWeights, CSRPlan, LevelPlan


def _t(a: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))


def _levels(plan: LevelPlan):
    return [(lo, hi, _t(l), _t(r)) for lo, hi, l, r in plan.levels]


def build_treefc_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    import torch

    p, plan, H = model.params, LevelPlan.from_batch(batch), model.hidden
    E, We_T, be = _t(p["E"]), _t(p["W_e"].T), _t(p["b_e"])
    W_T = _t(np.concatenate([p["W_0"], p["W_1"]], 1).T)  # [2H, H]
    b = _t(p["b"])
    words, roots, levels = _t(plan.leaf_words), _t(plan.roots), _levels(plan)
    nl, n = plan.num_leaves, plan.num_nodes

    def run() -> dict[str, np.ndarray]:
        with torch.inference_mode():
            h = torch.empty((n, H))
            h[:nl] = torch.relu(torch.addmm(be, E.index_select(0, words), We_T))
            for lo, hi, left, right in levels:
                x = torch.cat((h.index_select(0, left), h.index_select(0, right)), 1)
                h[lo:hi] = torch.relu(torch.addmm(b, x, W_T))
            return {"h": h.index_select(0, roots).numpy()}

    return run


def build_treegru_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    import torch

    p, plan, H = model.params, LevelPlan.from_batch(batch), model.hidden
    E, We_T, be = _t(p["E"]), _t(p["W_e"].T), _t(p["b_e"])

    def pair(g: str) -> np.ndarray:
        return np.concatenate([p[f"U_{g}_0"], p[f"U_{g}_1"]], 1)  # [H, 2H]

    RZ_T = _t(np.concatenate([pair("r"), pair("z")], 0).T)  # [2H, 2H]
    b_rz = _t(np.concatenate([p["b_r"], p["b_z"]]))
    N_T, b_n = _t(pair("n").T), _t(p["b_n"])
    words, roots, levels = _t(plan.leaf_words), _t(plan.roots), _levels(plan)
    nl, n = plan.num_leaves, plan.num_nodes

    def run() -> dict[str, np.ndarray]:
        with torch.inference_mode():
            h = torch.empty((n, H))
            h[:nl] = torch.tanh(torch.addmm(be, E.index_select(0, words), We_T))
            for lo, hi, left, right in levels:
                hl, hr = h.index_select(0, left), h.index_select(0, right)
                rz = torch.sigmoid(torch.addmm(b_rz, torch.cat((hl, hr), 1), RZ_T))
                r, z = rz[:, :H], rz[:, H:]
                cand = torch.tanh(torch.addmm(b_n, torch.cat((r * hl, r * hr), 1), N_T))
                h[lo:hi] = (1.0 - z) * cand + z * (0.5 * (hl + hr))
            return {"h": h.index_select(0, roots).numpy()}

    return run


def build_seqlstm_nn(model: Any, sequences: list[np.ndarray]) -> Callable[[], dict[str, np.ndarray]]:
    """``torch.nn.LSTM`` over equal-length token sequences ``[T]`` (a batch of B of them)."""
    import torch

    lengths = {len(s) for s in sequences}
    if len(lengths) != 1:
        raise ValueError(f"the nn.LSTM peer takes equal-length sequences, got lengths {sorted(lengths)}")
    p, H = model.params, model.hidden
    gates = ("i", "f", "g", "o")  # PyTorch's row order
    lstm = torch.nn.LSTM(model.input_size, H)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(_t(np.concatenate([p[f"W_{g}"] for g in gates], 0)))
        lstm.weight_hh_l0.copy_(_t(np.concatenate([p[f"U_{g}"] for g in gates], 0)))
        lstm.bias_ih_l0.copy_(_t(np.concatenate([p[f"b_{g}"] for g in gates], 0)))
        lstm.bias_hh_l0.zero_()
    lstm.eval()
    E = _t(p["E"])
    ids = _t(np.stack([np.asarray(s, dtype=np.int64) for s in sequences], 1))  # [T, B]

    def run() -> dict[str, np.ndarray]:
        with torch.inference_mode():
            _, (h, c) = lstm(E[ids])
            return {"h": h[0].numpy(), "c": c[0].numpy()}

    return run


def build_mvrnn_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    """MV-RNN level-batched: ``bmm`` for the matrix-vector products of a level's nodes and one
    batched ``W_M @ [A; B]`` for their matrices."""
    import torch

    p, plan, H = model.params, LevelPlan.from_batch(batch), model.hidden
    E, M_E = _t(p["E"]), _t(p["M_E"])
    W_T, b_W, W_M = _t(p["W"].T), _t(p["b_W"]), _t(p["W_M"])
    words, roots, levels = _t(plan.leaf_words), _t(plan.roots), _levels(plan)
    nl, n = plan.num_leaves, plan.num_nodes

    def run() -> dict[str, np.ndarray]:
        with torch.inference_mode():
            h = torch.empty((n, H))
            M = torch.empty((n, H, H))
            h[:nl] = E.index_select(0, words)
            M[:nl] = M_E.index_select(0, words)
            for lo, hi, left, right in levels:
                a, A = h.index_select(0, left), M.index_select(0, left)
                b, B = h.index_select(0, right), M.index_select(0, right)
                x = torch.cat((torch.bmm(B, a.unsqueeze(2)), torch.bmm(A, b.unsqueeze(2))), 1)
                h[lo:hi] = torch.tanh(torch.addmm(b_W, x.squeeze(2), W_T))
                M[lo:hi] = torch.matmul(W_M, torch.cat((A, B), 1))
            return {"h": h.index_select(0, roots).numpy(), "M": M.index_select(0, roots).numpy()}

    return run


def build_dagrnn_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    """DAG-RNN level-batched over the CSR child lists: the predecessors' ``h`` rows summed per
    node with ``index_add`` (``sum_p W h_p = W sum_p h_p``), one ``addmm`` per level for the
    input term (all cells' ``U x + b`` in one GEMM up front)."""
    import torch

    p, H, plan = model.params, model.hidden, CSRPlan.from_batch(batch)
    U_T, W_T, b = _t(p["U"].T), _t(p["W"].T), _t(p["b"])
    x = _t(batch.features.astype(p["U"].dtype))
    levels = [(lo, hi, _t(child), _t(seg)) for lo, hi, child, seg, _ in plan.levels]
    nl, n, roots = plan.num_leaves, plan.num_nodes, _t(plan.roots)

    def run() -> dict[str, np.ndarray]:
        with torch.inference_mode():
            ux = torch.addmm(b, x, U_T)  # [N, H]: every cell's input term
            h = torch.empty((n, H))
            h[:nl] = torch.tanh(ux[:nl])
            for lo, hi, child, seg in levels:
                s = torch.zeros((hi - lo, H)).index_add_(0, seg, h.index_select(0, child))
                h[lo:hi] = torch.tanh(torch.addmm(ux[lo:hi], s, W_T))
            return {"h": h.index_select(0, roots).numpy()}

    return run


def build_childsum_levels(model: Any, batch: Any) -> Callable[[], dict[str, np.ndarray]]:
    """Child-sum TreeLSTM level-batched: every node's input projection in one ``addmm`` up
    front; per level the children's ``h`` and ``f * c`` summed per parent with ``index_add``,
    one ``addmm`` for the i/o/u gates and one for the per-child forget gates."""
    import torch

    w, plan = ChildSumWeights.from_model(model), CSRPlan.from_batch(batch)
    H = w.hidden
    E, Wx_T, b_x = _t(w.E), _t(w.W_x.T), _t(w.b_x)
    U_iou_T, U_f_T = _t(w.U_iou.T), _t(w.U_f.T)
    words, roots = _t(plan.words), _t(plan.roots)
    levels = [(lo, hi, _t(child), _t(seg)) for lo, hi, child, seg, _ in plan.levels]
    nl, n = plan.num_leaves, plan.num_nodes

    def run() -> dict[str, np.ndarray]:
        with torch.inference_mode():
            gx = torch.addmm(b_x, E.index_select(0, words), Wx_T)  # [N, 4H]: i, o, u, f
            h = torch.empty((n, H))
            c = torch.empty((n, H))
            g = gx[:nl]
            c[:nl] = torch.sigmoid(g[:, :H]) * torch.tanh(g[:, 2 * H : 3 * H])
            h[:nl] = torch.sigmoid(g[:, H : 2 * H]) * torch.tanh(c[:nl])
            for lo, hi, child, seg in levels:
                hk = h.index_select(0, child)
                hsum = torch.zeros((hi - lo, H)).index_add_(0, seg, hk)
                g = torch.addmm(gx[lo:hi, : 3 * H], hsum, U_iou_T)
                io = torch.sigmoid(g[:, : 2 * H])
                f = torch.sigmoid(torch.addmm(gx[lo:hi, 3 * H :].index_select(0, seg), hk, U_f_T))
                fc = torch.zeros((hi - lo, H)).index_add_(0, seg, f * c.index_select(0, child))
                cn = io[:, :H] * torch.tanh(g[:, 2 * H :]) + fc
                c[lo:hi] = cn
                h[lo:hi] = io[:, H:] * torch.tanh(cn)
            return {"h": h.index_select(0, roots).numpy(), "c": c.index_select(0, roots).numpy()}

    return run
