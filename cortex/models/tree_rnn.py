"""TreeRNN: the recursive neural network of Socher et al. (2011) over N-ary trees.

Pipeline position: a zoo model (``cortex.models``); trace it with ``.trace()``.
"""

from __future__ import annotations

from cortex.core.frontend.model import Model, size_args
from cortex.core.frontend.model_errors import ModelDefinitionError
from cortex.models._common import declare_input, node_vector


class TreeRNN(Model):
    r"""Recursive neural network: one shared matrix on the concatenated children.

    Leaf (token ``w``)::

        h = E[w]                      (E [vocab, hidden]; embed, if given, must equal hidden)

    or, for dense features ``x [features]``: ``h = tanh(W_e x + b_e)``.

    Internal node with children ``h_0 .. h_{N-1}``::

        h = tanh(W [h_0; h_1; ...; h_{N-1}] + b)        W [hidden, N*hidden], b [hidden]

    State: ``h [hidden]``.
    """

    def __init__(self, *, hidden: int, embed: int | None = None, vocab: int | None = None,
                 features: int | None = None, arity: int = 2, dtype="float32", seed: int = 0,
                 **options) -> None:
        hidden, embed, vocab, features, arity = size_args(
            "TreeRNN", hidden=hidden, embed=embed, vocab=vocab, features=features, arity=arity)
        super().__init__(arity=arity, dtype=dtype, seed=seed, **options)
        if vocab is not None and embed not in (None, hidden):
            raise ModelDefinitionError(f"TreeRNN: leaves are embeddings, so embed ({embed}) must equal hidden ({hidden})")
        self.hidden = hidden
        d = declare_input(self, vocab=vocab, embed=hidden if vocab is not None else None, features=features)
        self.add_state("h", (hidden,))
        if features is not None:
            self.add_param("W_e", (hidden, d))
            self.add_param("b_e", (hidden,))
        self.add_param("W", (hidden, arity * hidden))
        self.add_param("b", (hidden,))

    def leaf(self, g):
        x = node_vector(self, g)
        if "word" in self.node_inputs:
            return {"h": x}
        return {"h": g.tanh(g.linear("W_e", x, "b_e"))}

    def internal(self, g):
        x = g.concat([g.child("h", k) for k in range(self.arity)])
        return {"h": g.tanh(g.linear("W", x, "b"))}
