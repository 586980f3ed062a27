"""DyNet peer of the binary TreeLSTM, with DyNet's automatic batching (``autobatch=1``).

Pipeline position: outside the pipeline; see ``cortex/bench/peers/__init__.py`` for the contract.
The DyNet way: build a fresh computation graph per call by recursion over the nested tuples,
one expression per node, and let the autobatcher group the nodes that can run together; the
timed call therefore includes graph construction, which is inherent to DyNet's model.

DyNet reads its configuration when it is first imported, so :func:`available` imports it
(``pip install dyNET38``) after ``dynet_config.set(autobatch=1)``. If something imported
DyNet earlier without autobatching, :func:`available` says so instead of measuring it.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

from cortex.bench.peers.plan import TreeLSTMWeights

_dy: Any = None
_reason: str | None = None


def available() -> str | None:
    """None when DyNet with autobatching is usable, else the reason it is not."""
    global _dy, _reason
    if _dy is not None or _reason is not None:
        return _reason
    if "dynet" in sys.modules:
        _reason = "dynet was imported before the benchmark could enable autobatching"
        return _reason
    try:
        import dynet_config  # type: ignore[import-not-found]

        dynet_config.set(autobatch=1, mem=1024, random_seed=1)
        import dynet  # type: ignore[import-not-found]
    except ImportError as exc:
        _reason = f"DyNet is not installed ({exc}); `pip install dyNET38` to include it"
        return _reason
    _dy = dynet
    return None


def build_autobatch(model: Any, trees: list[Any]) -> Callable[[], dict[str, np.ndarray]]:
    reason = available()
    if reason is not None:
        raise RuntimeError(reason)
    dy = _dy
    w = TreeLSTMWeights.from_model(model)
    H = w.hidden
    pc = dy.ParameterCollection()
    E = pc.add_lookup_parameters(w.E.shape)
    E.init_from_array(w.E)
    W_leaf = pc.add_parameters(w.W_leaf.shape, init=dy.NumpyInitializer(w.W_leaf))
    b_leaf = pc.add_parameters(w.b_leaf.shape, init=dy.NumpyInitializer(w.b_leaf))
    U = pc.add_parameters(w.U.shape, init=dy.NumpyInitializer(w.U))
    b_int = pc.add_parameters(w.b_internal.shape, init=dy.NumpyInitializer(w.b_internal))

    def node(t: Any):
        if isinstance(t, tuple):
            hl, cl = node(t[0])
            hr, cr = node(t[1])
            g = dy.affine_transform([b_int, U, dy.concatenate([hl, hr])])
            s = dy.logistic(dy.pick_range(g, 0, 4 * H))
            c = (dy.cmult(dy.pick_range(s, 0, H), dy.tanh(dy.pick_range(g, 4 * H, 5 * H)))
                 + dy.cmult(dy.pick_range(s, 2 * H, 3 * H), cl)
                 + dy.cmult(dy.pick_range(s, 3 * H, 4 * H), cr))
            return dy.cmult(dy.pick_range(s, H, 2 * H), dy.tanh(c)), c
        g = dy.affine_transform([b_leaf, W_leaf, E[t]])
        c = dy.cmult(dy.logistic(dy.pick_range(g, 0, H)), dy.tanh(dy.pick_range(g, 2 * H, 3 * H)))
        return dy.cmult(dy.logistic(dy.pick_range(g, H, 2 * H)), dy.tanh(c)), c

    def run() -> dict[str, np.ndarray]:
        # `pc` must outlive the closure: a freed ParameterCollection frees the parameters'
        # memory under the expressions that use them (silently wrong numbers, not a crash).
        assert pc is not None
        dy.renew_cg()
        outs = [node(t) for t in trees]
        both = dy.concatenate_cols([h for h, _ in outs] + [c for _, c in outs]).npvalue()
        both = both.reshape(H, 2 * len(trees)).T
        b = len(trees)
        return {"h": both[:b].astype(np.float32), "c": both[b:].astype(np.float32)}

    return run
