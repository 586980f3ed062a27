"""TreeGRU: a gated recurrent unit over N-ary trees (children combine as in an N-ary GRU).

Pipeline position: a zoo model (``cortex.models``); trace it with ``.trace()``.
"""

from __future__ import annotations

from cortex.core.frontend.model import Model, size_args
from cortex.models._common import declare_input, node_vector, total


class TreeGRU(Model):
    r"""N-ary tree GRU.

    Leaf (input vector ``x = E[w]`` or dense features)::

        h = tanh(W_e x + b_e)

    Internal node with children ``h_0 .. h_{N-1}``::

        r  = sigmoid(sum_k U_r_k h_k + b_r)                  reset gate
        z  = sigmoid(sum_k U_z_k h_k + b_z)                  update gate
        n  = tanh(sum_k U_n_k (r * h_k) + b_n)               candidate
        h  = (1 - z) * n + z * (1/N) sum_k h_k

    Params: ``E [vocab, embed]``, ``W_e [hidden, embed]``, ``b_e``, and for each child
    ``k < arity``: ``U_r_k, U_z_k, U_n_k [hidden, hidden]``; ``b_r, b_z, b_n [hidden]``.
    State: ``h [hidden]``.
    """

    def __init__(self, *, hidden: int, embed: int | None = None, vocab: int | None = None,
                 features: int | None = None, arity: int = 2, dtype="float32", seed: int = 0,
                 **options) -> None:
        hidden, embed, vocab, features, arity = size_args(
            "TreeGRU", hidden=hidden, embed=embed, vocab=vocab, features=features, arity=arity)
        super().__init__(arity=arity, dtype=dtype, seed=seed, **options)
        self.hidden = hidden
        d = declare_input(self, vocab=vocab, embed=embed, features=features)
        self.add_state("h", (hidden,))
        self.add_param("W_e", (hidden, d))
        self.add_param("b_e", (hidden,))
        for gate in ("r", "z", "n"):
            for k in range(arity):
                self.add_param(f"U_{gate}_{k}", (hidden, hidden))
            self.add_param(f"b_{gate}", (hidden,))

    def leaf(self, g):
        return {"h": g.tanh(g.linear("W_e", node_vector(self, g), "b_e"))}

    def internal(self, g):
        hs = [g.child("h", k) for k in range(self.arity)]
        r = g.sigmoid(total([g.linear(f"U_r_{k}", h) for k, h in enumerate(hs)]) + g.param("b_r"))
        z = g.sigmoid(total([g.linear(f"U_z_{k}", h) for k, h in enumerate(hs)]) + g.param("b_z"))
        n = g.tanh(total([g.linear(f"U_n_{k}", r * h) for k, h in enumerate(hs)]) + g.param("b_n"))
        mean = total(hs) * (1.0 / self.arity)
        return {"h": (1.0 - z) * n + z * mean}
