"""TreeFC: the simplest N-ary tree model (a fully connected layer per internal node).

Pipeline position: a zoo model (``cortex.models``); trace it with ``.trace()``.
"""

from __future__ import annotations

from cortex.core.frontend.model import Model, size_args
from cortex.models._common import declare_input, node_vector, total


class TreeFC(Model):
    r"""N-ary tree of fully connected layers with ReLU.

    Leaf (token ``w``, input vector ``x = E[w]`` or a dense feature vector)::

        h = relu(W_e x + b_e)

    Internal node with children ``h_0 .. h_{N-1}`` (``N = arity``)::

        h = relu(sum_k W_k h_k + b)

    Params: ``E [vocab, embed]`` (token input), ``W_e [hidden, embed]``, ``b_e [hidden]``,
    ``W_k [hidden, hidden]`` for ``k < arity``, ``b [hidden]``. State: ``h [hidden]``.
    """

    def __init__(self, *, hidden: int, embed: int | None = None, vocab: int | None = None,
                 features: int | None = None, arity: int = 2, dtype="float32", seed: int = 0,
                 **options) -> None:
        hidden, embed, vocab, features, arity = size_args(
            "TreeFC", hidden=hidden, embed=embed, vocab=vocab, features=features, arity=arity)
        super().__init__(arity=arity, dtype=dtype, seed=seed, **options)
        self.hidden = hidden
        d = declare_input(self, vocab=vocab, embed=embed, features=features)
        self.add_state("h", (hidden,))
        self.add_param("W_e", (hidden, d))
        self.add_param("b_e", (hidden,))
        for k in range(arity):
            self.add_param(f"W_{k}", (hidden, hidden))
        self.add_param("b", (hidden,))

    def leaf(self, g):
        return {"h": g.relu(g.linear("W_e", node_vector(self, g), "b_e"))}

    def internal(self, g):
        terms = [g.linear(f"W_{k}", g.child("h", k)) for k in range(self.arity)]
        return {"h": g.relu(total(terms) + g.param("b"))}
