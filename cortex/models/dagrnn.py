"""DAG-RNN of Shuai et al. (2015) over 2-D grids (one sweep direction).

Pipeline position: a zoo model (``cortex.models``); trace it with ``.trace()``.
"""

from __future__ import annotations

from cortex.core.frontend.model import Model, size_args


class DAGRNN(Model):
    r"""DAG-structured RNN over a grid of feature vectors.

    The grid is a DAG in the *south-east sweep*: cell ``(r, c)``'s predecessors are its upper
    neighbour ``(r-1, c)`` and its left neighbour ``(r, c-1)`` where they exist, so every cell
    has 0, 1 or 2 children and a cell is shared by two parents (the cell below and the cell to
    the right). The top-left cell is the only leaf; the bottom-right cell is the root. (The
    paper combines four such sweeps; run the model on the flipped grids for the others.)

    With ``x_v [features]`` the cell's feature vector::

        h_v = tanh(U x_v + sum_{p in pred(v)} W h_p + b)

    a leaf being the same with no predecessors. Params: ``U [hidden, features]``,
    ``W [hidden, hidden]``, ``b [hidden]``. State: ``h [hidden]``. Variable arity.
    """

    def __init__(self, *, hidden: int, features: int, dtype="float32", seed: int = 0, **options) -> None:
        hidden, features = size_args("DAGRNN", hidden=hidden, features=features)
        super().__init__(arity=None, dtype=dtype, seed=seed, **options)
        self.hidden = hidden
        self.add_feature_input("x", features)
        self.add_state("h", (hidden,))
        self.add_param("U", (hidden, features))
        self.add_param("W", (hidden, hidden))
        self.add_param("b", (hidden,))

    def leaf(self, g):
        return {"h": g.tanh(g.linear("U", g.input("x"), "b"))}

    def internal(self, g):
        preds = g.reduce(g.linear("W", g.child("h")), "sum")
        return {"h": g.tanh(g.linear("U", g.input("x"), "b") + preds)}
