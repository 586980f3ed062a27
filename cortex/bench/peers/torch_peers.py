"""PyTorch peers of the binary TreeLSTM: eager naive, eager level-batched (CPU or CUDA), and
torch.compile of the level-batched cell.

Pipeline position: outside the pipeline; see ``cortex/bench/peers/__init__.py`` for the contract.

* ``naive``: what a user writes first — a Python recursion over the nested tuples, one node at a
  time (``addmv`` with the stacked gate matrix), every tree of the batch in turn.
* ``levels``: all nodes of a level at once — gather the children's ``h``/``c`` rows by index
  tensors, one ``addmm`` with the stacked ``[2H, 5H]`` matrix, one sigmoid over the four
  sigmoid gates, the cell update, a row-slice store. Index tensors are built once, outside
  the timed call. ``device="cuda"`` runs the same on a GPU (synchronised by the final copy).
* ``compiled``: ``levels`` with the internal cell wrapped in ``torch.compile(dynamic=True)``;
  its builder reports the compile time (the first calls over every level size).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from cortex.bench.peers.plan import LevelPlan, TreeLSTMWeights


def _torch():
    import torch

    return torch


class _TorchWeights:
    def __init__(self, w: TreeLSTMWeights, device: str) -> None:
        torch = _torch()
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        self.H = w.hidden
        self.E = t(w.E)
        self.W_leaf_T = t(w.W_leaf.T)  # [D, 3H]
        self.b_leaf = t(w.b_leaf)
        self.U_T = t(w.U.T)  # [2H, 5H]
        self.b_internal = t(w.b_internal)
        self.W_leaf = t(w.W_leaf)
        self.U = t(w.U)


def build_naive(model: Any, trees: list[Any]) -> Callable[[], dict[str, np.ndarray]]:
    """One node at a time: recursion over the nested tuples (int leaves = word ids)."""
    torch = _torch()
    w = _TorchWeights(TreeLSTMWeights.from_model(model), "cpu")
    H = w.H

    def node(t: Any):
        if isinstance(t, tuple):
            hl, cl = node(t[0])
            hr, cr = node(t[1])
            g = torch.addmv(w.b_internal, w.U, torch.cat((hl, hr)))
            s = torch.sigmoid(g[: 4 * H])
            c = s[:H] * torch.tanh(g[4 * H :]) + s[2 * H : 3 * H] * cl + s[3 * H : 4 * H] * cr
            return s[H : 2 * H] * torch.tanh(c), c
        g = torch.addmv(w.b_leaf, w.W_leaf, w.E[t])
        i, o = torch.sigmoid(g[:H]), torch.sigmoid(g[H : 2 * H])
        c = i * torch.tanh(g[2 * H :])
        return o * torch.tanh(c), c

    def run() -> dict[str, np.ndarray]:
        with torch.inference_mode():
            outs = [node(t) for t in trees]
            return {"h": torch.stack([h for h, _ in outs]).numpy(),
                    "c": torch.stack([c for _, c in outs]).numpy()}

    return run


def _level_runner(w: _TorchWeights, plan: LevelPlan, device: str, cell: Callable | None):
    torch = _torch()
    H = w.H
    words = torch.from_numpy(plan.leaf_words).to(device)
    levels = [(lo, hi, torch.from_numpy(l).to(device), torch.from_numpy(r).to(device))
              for lo, hi, l, r in plan.levels]
    roots = torch.from_numpy(plan.roots).to(device)
    nl, n = plan.num_leaves, plan.num_nodes

    def eager_cell(hl, hr, cl, cr):
        g = torch.addmm(w.b_internal, torch.cat((hl, hr), 1), w.U_T)
        s = torch.sigmoid(g[:, : 4 * H])
        c = s[:, :H] * torch.tanh(g[:, 4 * H :]) + s[:, 2 * H : 3 * H] * cl + s[:, 3 * H : 4 * H] * cr
        return s[:, H : 2 * H] * torch.tanh(c), c

    step = cell or eager_cell

    def run() -> dict[str, np.ndarray]:
        with torch.inference_mode():
            h = torch.empty((n, H), device=device)
            c = torch.empty((n, H), device=device)
            g = torch.addmm(w.b_leaf, w.E.index_select(0, words), w.W_leaf_T)
            io = torch.sigmoid(g[:, : 2 * H])
            c[:nl] = io[:, :H] * torch.tanh(g[:, 2 * H :])
            h[:nl] = io[:, H:] * torch.tanh(c[:nl])
            for lo, hi, left, right in levels:
                h[lo:hi], c[lo:hi] = step(h.index_select(0, left), h.index_select(0, right),
                                          c.index_select(0, left), c.index_select(0, right))
            return {"h": h.index_select(0, roots).cpu().numpy(),
                    "c": c.index_select(0, roots).cpu().numpy()}

    return run, eager_cell


def build_levels(model: Any, batch: Any, device: str = "cpu") -> Callable[[], dict[str, np.ndarray]]:
    """All nodes of a level at once, on ``device`` ("cpu" or "cuda")."""
    w = _TorchWeights(TreeLSTMWeights.from_model(model), device)
    run, _ = _level_runner(w, LevelPlan.from_batch(batch), device, None)
    return run


_compiled_builds = 0


def build_compiled(model: Any, batch: Any) -> tuple[Callable[[], dict[str, np.ndarray]], float, bool]:
    """``levels`` with ``torch.compile(cell, dynamic=True)``; returns (run, compile seconds,
    cold), the compile time being the first run (which compiles for the level shapes it
    meets). Only the first build in a process is cold: TorchDynamo caches the compiled cell
    by its code object, so later builds mostly reuse it."""
    global _compiled_builds
    torch = _torch()
    w = _TorchWeights(TreeLSTMWeights.from_model(model), "cpu")
    plan = LevelPlan.from_batch(batch)
    _, eager_cell = _level_runner(w, plan, "cpu", None)
    compiled = torch.compile(eager_cell, dynamic=True)
    run, _ = _level_runner(w, plan, "cpu", compiled)
    t0 = time.perf_counter()
    run()
    _compiled_builds += 1
    return run, time.perf_counter() - t0, _compiled_builds == 1
