"""MV-RNN: the matrix-vector recursive neural network of Socher et al. (2012).

Pipeline position: a zoo model (``cortex.models``); trace it with ``.trace()``.
"""

from __future__ import annotations

from cortex.core.frontend.model import Model, size_args


class MVRNN(Model):
    r"""Matrix-vector RNN over binary trees: every node has a vector ``h [hidden]`` and a
    matrix ``M [hidden, hidden]`` (matrix-valued state).

    Leaf (token ``w``)::

        h = E[w]              M = M_E[w]          (M_E initialised as identity + noise)

    Internal node with left child ``(a, A)`` and right child ``(b, B)``::

        h = tanh(W [B a; A b] + b_W)          W   [hidden, 2*hidden]
        M = W_M [A; B]                        W_M [hidden, 2*hidden]

    Params: ``E [vocab, hidden]``, ``M_E [vocab, hidden, hidden]``, ``W``, ``b_W``, ``W_M``.
    States: ``h [hidden]``, ``M [hidden, hidden]``. Binary only (``arity`` is 2).
    """

    def __init__(self, *, hidden: int, vocab: int, embed: int | None = None, dtype="float32",
                 seed: int = 0, **options) -> None:
        hidden, vocab, embed = size_args("MVRNN", hidden=hidden, vocab=vocab, embed=embed)
        super().__init__(arity=2, dtype=dtype, seed=seed, **options)
        if embed not in (None, hidden):
            from cortex.core.frontend.model_errors import ModelDefinitionError

            raise ModelDefinitionError(f"MVRNN: word vectors are states, so embed ({embed}) must equal hidden ({hidden})")
        self.hidden = hidden
        self.add_word_input("word", vocab)
        self.add_state("h", (hidden,))
        self.add_state("M", (hidden, hidden))
        self.add_param("E", (vocab, hidden), init="normal", scale=1.0)
        self.add_param("M_E", (vocab, hidden, hidden), init="identity_noise", scale=0.1)
        self.add_param("W", (hidden, 2 * hidden))
        self.add_param("b_W", (hidden,))
        self.add_param("W_M", (hidden, 2 * hidden))

    def leaf(self, g):
        w = g.input("word")
        return {"h": g.embedding("E", w), "M": g.embedding("M_E", w)}

    def internal(self, g):
        a, A = g.child("h", 0), g.child("M", 0)
        b, B = g.child("h", 1), g.child("M", 1)
        h = g.tanh(g.linear("W", g.concat([B @ a, A @ b]), "b_W"))
        M = g.matmul("W_M", g.concat([A, B], axis=0))
        return {"h": h, "M": M}
