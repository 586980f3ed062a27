"""LSTM and GRU over sequences, as chains (node t's only child is element t-1).

Pipeline position: zoo models (``cortex.models``); trace them with ``.trace()``. Their
equations and gate conventions are PyTorch's ``nn.LSTM`` / ``nn.GRU`` (one layer,
unidirectional), so weights load with ``cortex.core.frontend.params.load_torch_lstm`` / ``load_torch_gru``.
"""

from __future__ import annotations

from cortex.core.frontend.model import Model, size_args
from cortex.models._common import declare_input, node_vector


class SeqLSTM(Model):
    r"""LSTM over a sequence. Element ``t`` with input ``x_t`` (``E[w_t]`` or dense features)
    and previous state ``(h_{t-1}, c_{t-1})`` (zero for the first element, the leaf)::

        i = sigmoid(W_i x + b_i + U_i h_{t-1})
        f = sigmoid(W_f x + b_f + U_f h_{t-1})
        g = tanh(W_g x + b_g + U_g h_{t-1})
        o = sigmoid(W_o x + b_o + U_o h_{t-1})
        c_t = f * c_{t-1} + i * g
        h_t = o * tanh(c_t)

    Params: ``W_* [hidden, D]``, ``U_* [hidden, hidden]``, ``b_* [hidden]`` for ``* in i,f,g,o``
    (PyTorch's ``b_ih + b_hh``), and ``E [vocab, embed]`` for token input. States: ``h, c``.
    """

    GATES = ("i", "f", "g", "o")  # PyTorch's row order in weight_ih_l0 / weight_hh_l0

    def __init__(self, *, hidden: int, features: int | None = None, vocab: int | None = None,
                 embed: int | None = None, dtype="float32", seed: int = 0, **options) -> None:
        hidden, features, vocab, embed = size_args(
            "SeqLSTM", hidden=hidden, features=features, vocab=vocab, embed=embed)
        super().__init__(arity=1, dtype=dtype, seed=seed, **options)
        self.hidden = hidden
        self.input_size = declare_input(self, vocab=vocab, embed=embed, features=features)
        self.add_state("h", (hidden,))
        self.add_state("c", (hidden,))
        for gate in self.GATES:
            self.add_param(f"W_{gate}", (hidden, self.input_size))
            self.add_param(f"U_{gate}", (hidden, hidden))
            self.add_param(f"b_{gate}", (hidden,))

    def _step(self, g, h, c):
        x = node_vector(self, g)
        pre = {k: g.linear(f"W_{k}", x, f"b_{k}") + g.linear(f"U_{k}", h) for k in self.GATES}
        i, f, o = g.sigmoid(pre["i"]), g.sigmoid(pre["f"]), g.sigmoid(pre["o"])
        c_new = f * c + i * g.tanh(pre["g"])
        return {"h": o * g.tanh(c_new), "c": c_new}

    def leaf(self, g):
        zero = g.zeros((self.hidden,))
        return self._step(g, zero, zero)

    def internal(self, g):
        return self._step(g, g.child("h", 0), g.child("c", 0))


class SeqGRU(Model):
    r"""GRU over a sequence (PyTorch's formulation: the reset gate multiplies the hidden
    term *including* its bias ``b_hn``). Element ``t``, previous ``h_{t-1}`` (zero at the leaf)::

        r = sigmoid(W_r x + b_r + U_r h_{t-1})
        z = sigmoid(W_z x + b_z + U_z h_{t-1})
        n = tanh(W_n x + b_in + r * (U_n h_{t-1} + b_hn))
        h_t = (1 - z) * n + z * h_{t-1}

    Params: ``W_r, W_z, W_n [hidden, D]``, ``U_r, U_z, U_n [hidden, hidden]``,
    ``b_r, b_z`` (PyTorch's ``b_i* + b_h*``), ``b_in``, ``b_hn [hidden]``; ``E`` for tokens.
    State: ``h``.
    """

    GATES = ("r", "z", "n")  # PyTorch's row order in weight_ih_l0 / weight_hh_l0

    def __init__(self, *, hidden: int, features: int | None = None, vocab: int | None = None,
                 embed: int | None = None, dtype="float32", seed: int = 0, **options) -> None:
        hidden, features, vocab, embed = size_args(
            "SeqGRU", hidden=hidden, features=features, vocab=vocab, embed=embed)
        super().__init__(arity=1, dtype=dtype, seed=seed, **options)
        self.hidden = hidden
        self.input_size = declare_input(self, vocab=vocab, embed=embed, features=features)
        self.add_state("h", (hidden,))
        for gate in self.GATES:
            self.add_param(f"W_{gate}", (hidden, self.input_size))
            self.add_param(f"U_{gate}", (hidden, hidden))
        for b in ("b_r", "b_z", "b_in", "b_hn"):
            self.add_param(b, (hidden,))

    def _step(self, g, h):
        x = node_vector(self, g)
        r = g.sigmoid(g.linear("W_r", x, "b_r") + g.linear("U_r", h))
        z = g.sigmoid(g.linear("W_z", x, "b_z") + g.linear("U_z", h))
        n = g.tanh(g.linear("W_n", x, "b_in") + r * (g.linear("U_n", h) + g.param("b_hn")))
        return {"h": (1.0 - z) * n + z * h}

    def leaf(self, g):
        return self._step(g, g.zeros((self.hidden,)))

    def internal(self, g):
        return self._step(g, g.child("h", 0))
