"""Tree-LSTMs of Tai, Socher and Manning (2015): the N-ary (binary) and the child-sum variants.

Pipeline position: zoo models (``cortex.models``); trace them with ``.trace()``.
"""

from __future__ import annotations

from cortex.core.frontend.model import Model, size_args
from cortex.core.frontend.model_errors import ModelDefinitionError
from cortex.models._common import declare_input, node_vector, total

GATES = ("i", "o", "u")


#: ``TreeLSTM(leaf=...)``: the paper's gated leaf, or the linear leaf of Tai et al.'s released code.
LEAF_FORMS = ("gated", "linear")
#: ``TreeLSTM(forget_bias=...)``: one forget-gate bias for every child, or one per child.
FORGET_BIASES = ("shared", "per_child")


class TreeLSTM(Model):
    r"""N-ary Tree-LSTM (Tai et al. 2015, section 3.2) for constituency trees: tokens at the
    leaves, internal nodes combine exactly ``arity`` ordered children (binary by default).

    Leaf (``x = E[w]`` or dense features; no children, so no forget term), ``leaf="gated"``
    (the default: the internal equations with no children)::

        i = sigmoid(W_i x + b_i)     o = sigmoid(W_o x + b_o)     u = tanh(W_u x + b_u)
        c = i * u
        h = o * tanh(c)

    or ``leaf="linear"`` (the leaf module of Tai et al.'s released code, and of the PyTorch
    ports of it)::

        c = W_c_leaf x + b_c_leaf
        o = sigmoid(W_o_leaf x + b_o_leaf)
        h = o * tanh(c)

    Internal node with children ``(h_l, c_l)``, ``l < N``::

        i   = sigmoid(sum_l U_i_l h_l + b_i)
        f_k = sigmoid(sum_l U_f{k}_l h_l + b_f)         one forget gate per child k
        o   = sigmoid(sum_l U_o_l h_l + b_o)
        u   = tanh(sum_l U_u_l h_l + b_u)
        c   = i * u + sum_k f_k * c_k
        h   = o * tanh(c)

    with ``forget_bias="per_child"``, ``f_k`` adds its own ``b_f{k}`` instead of the shared
    ``b_f`` (as DGL's Tree-LSTM example and Tai et al.'s code have it).

    Params: ``E [vocab, embed]``; ``W_i, W_o, W_u [hidden, embed]`` (gated leaf) or
    ``W_c_leaf, W_o_leaf [hidden, embed]``, ``b_c_leaf, b_o_leaf [hidden]`` (linear leaf);
    ``U_i_l, U_o_l, U_u_l, U_f{k}_l [hidden, hidden]``; ``b_i, b_o, b_u [hidden]`` and ``b_f``
    (or ``b_f0 .. b_f{N-1}``) ``[hidden]``. States: ``h, c [hidden]``. PyTorch weights:
    ``cortex.models.importers``.
    """

    def __init__(self, *, hidden: int, embed: int | None = None, vocab: int | None = None,
                 features: int | None = None, arity: int = 2, leaf: str = "gated",
                 forget_bias: str = "shared", dtype="float32", seed: int = 0,
                 **options) -> None:
        hidden, embed, vocab, features, arity = size_args(
            "TreeLSTM", hidden=hidden, embed=embed, vocab=vocab, features=features, arity=arity)
        super().__init__(arity=arity, dtype=dtype, seed=seed, **options)
        for keyword, value, allowed in (("leaf", leaf, LEAF_FORMS),
                                        ("forget_bias", forget_bias, FORGET_BIASES)):
            if value not in allowed:
                raise ModelDefinitionError(f"{self.name}: {keyword}={value!r}; allowed: "
                                           f"{', '.join(map(repr, allowed))}")
        self.hidden = hidden
        self.leaf_form, self.forget_bias = leaf, forget_bias
        d = declare_input(self, vocab=vocab, embed=embed, features=features)
        self.add_state("h", (hidden,))
        self.add_state("c", (hidden,))
        if leaf == "gated":
            for gate in GATES:
                self.add_param(f"W_{gate}", (hidden, d))
        else:
            for gate in ("c", "o"):
                self.add_param(f"W_{gate}_leaf", (hidden, d))
                self.add_param(f"b_{gate}_leaf", (hidden,))
        for name in ["b_i", *self.forget_bias_names, "b_o", "b_u"]:
            self.add_param(name, (hidden,))
        for l in range(arity):
            for gate in GATES:
                self.add_param(f"U_{gate}_{l}", (hidden, hidden))
            for k in range(arity):
                self.add_param(f"U_f{k}_{l}", (hidden, hidden))

    @property
    def forget_bias_names(self) -> list[str]:
        """``["b_f"]``, or ``["b_f0", ..., "b_f{N-1}"]`` with ``forget_bias="per_child"``."""
        if self.forget_bias == "shared":
            return ["b_f"]
        return [f"b_f{k}" for k in range(self.arity)]

    def leaf(self, g):
        x = node_vector(self, g)
        if self.leaf_form == "linear":
            c = g.linear("W_c_leaf", x, "b_c_leaf")
            o = g.sigmoid(g.linear("W_o_leaf", x, "b_o_leaf"))
            return {"h": o * g.tanh(c), "c": c}
        i = g.sigmoid(g.linear("W_i", x, "b_i"))
        o = g.sigmoid(g.linear("W_o", x, "b_o"))
        u = g.tanh(g.linear("W_u", x, "b_u"))
        c = i * u
        return {"h": o * g.tanh(c), "c": c}

    def internal(self, g):
        n = self.arity
        hs = [g.child("h", l) for l in range(n)]
        cs = [g.child("c", l) for l in range(n)]

        def gate(name: str, bias: str):
            return total([g.linear(name.format(l=l), hs[l], bias if l == 0 else None) for l in range(n)])

        i = g.sigmoid(gate("U_i_{l}", "b_i"))
        o = g.sigmoid(gate("U_o_{l}", "b_o"))
        u = g.tanh(gate("U_u_{l}", "b_u"))
        biases = self.forget_bias_names * (n if self.forget_bias == "shared" else 1)
        fs = [g.sigmoid(gate(f"U_f{k}_{{l}}", biases[k])) for k in range(n)]
        c = total([i * u] + [f * ck for f, ck in zip(fs, cs)])
        return {"h": o * g.tanh(c), "c": c}


class ChildSumTreeLSTM(Model):
    r"""Child-Sum Tree-LSTM (Tai et al. 2015, section 3.1) for dependency trees: every node has
    a token and any number of unordered children (variable arity).

    For a node with input ``x = E[w]`` (or dense features) and children ``(h_k, c_k)``::

        h~  = sum_k h_k
        i   = sigmoid(W_i x + U_i h~ + b_i)
        f_k = sigmoid(W_f x + U_f h_k + b_f)             one forget gate per child
        o   = sigmoid(W_o x + U_o h~ + b_o)
        u   = tanh(W_u x + U_u h~ + b_u)
        c   = i * u + sum_k f_k * c_k
        h   = o * tanh(c)

    A leaf is the same with no children (``h~ = 0``, no forget term).
    Params: ``E [vocab, embed]``; ``W_i, W_f, W_o, W_u [hidden, embed]``;
    ``U_i, U_f, U_o, U_u [hidden, hidden]``; ``b_i, b_f, b_o, b_u [hidden]``.
    States: ``h, c [hidden]``. For PyTorch and DGL weights see ``cortex.models.importers``.
    """

    def __init__(self, *, hidden: int, embed: int | None = None, vocab: int | None = None,
                 features: int | None = None, dtype="float32", seed: int = 0, **options) -> None:
        hidden, embed, vocab, features = size_args(
            "ChildSumTreeLSTM", hidden=hidden, embed=embed, vocab=vocab, features=features)
        super().__init__(arity=None, dtype=dtype, seed=seed, **options)
        self.hidden = hidden
        d = declare_input(self, vocab=vocab, embed=embed, features=features)
        self.add_state("h", (hidden,))
        self.add_state("c", (hidden,))
        for gate in ("i", "f", "o", "u"):
            self.add_param(f"W_{gate}", (hidden, d))
            self.add_param(f"U_{gate}", (hidden, hidden))
            self.add_param(f"b_{gate}", (hidden,))

    def _gates(self, g, x, h_sum):
        i = g.sigmoid(g.linear("W_i", x, "b_i") + g.linear("U_i", h_sum))
        o = g.sigmoid(g.linear("W_o", x, "b_o") + g.linear("U_o", h_sum))
        u = g.tanh(g.linear("W_u", x, "b_u") + g.linear("U_u", h_sum))
        return i, o, u

    def leaf(self, g):
        x = node_vector(self, g)
        i, o, u = self._gates(g, x, g.zeros((self.hidden,)))
        c = i * u
        return {"h": o * g.tanh(c), "c": c}

    def internal(self, g):
        x = node_vector(self, g)
        h_k, c_k = g.child("h"), g.child("c")  # per-child values
        i, o, u = self._gates(g, x, g.reduce(h_k, "sum"))
        f_k = g.sigmoid(g.linear("W_f", x, "b_f") + g.linear("U_f", h_k))  # per child
        c = i * u + g.reduce(f_k * c_k, "sum")
        return {"h": o * g.tanh(c), "c": c}
