"""The models the conformance suite runs: every zoo model in small sizes.

Pipeline position: the suite's first input. Each :class:`ZooModel` builds a float64 model with
fixed seeds; the suite compiles it with ``dtype="float32"`` or ``"float64"`` (the executable
rounds the params), and the float64 reference runs on the float64 params, so both float types
are compared with the same exact answer.

Sizes are small (hidden 4-10) so the interpreter-backed ``numpy`` target stays quick, but they
are chosen to leave tails: hidden sizes that are not multiples of the usual vector widths and
tile sizes (6, 10), an input size (5) that is neither, arity 3 beside arity 2, token and
feature inputs, a matrix-valued state (MV-RNN).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

V, D = 11, 5  # vocabulary size and input size of every zoo model here


@dataclass(frozen=True)
class ZooModel:
    """One model of the sweep: ``id`` names it in test ids and failure reports."""

    id: str
    build: Callable[[], Any]  # () -> cortex model, float64
    description: str
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def model(self) -> Any:
        """The model (built once; the suite never mutates it)."""
        if "model" not in self._cache:
            self._cache["model"] = self.build()
        return self._cache["model"]


def _zoo() -> tuple[ZooModel, ...]:
    from cortex import models as M

    f64 = "float64"
    return (
        ZooModel("TreeFC", lambda: M.TreeFC(hidden=6, embed=D, vocab=V, dtype=f64, seed=1),
                 "TreeFC, binary, hidden 6, tokens (vocab 11, embed 5)"),
        ZooModel("TreeFC-3", lambda: M.TreeFC(hidden=6, features=D, arity=3, dtype=f64, seed=2),
                 "TreeFC, arity 3, hidden 6, features 5"),
        ZooModel("TreeRNN", lambda: M.TreeRNN(hidden=10, vocab=V, dtype=f64, seed=3),
                 "TreeRNN, binary, hidden 10, tokens (vocab 11)"),
        ZooModel("TreeGRU", lambda: M.TreeGRU(hidden=6, embed=D, vocab=V, dtype=f64, seed=4),
                 "TreeGRU, binary, hidden 6, tokens (vocab 11, embed 5)"),
        ZooModel("TreeLSTM", lambda: M.TreeLSTM(hidden=10, embed=D, vocab=V, dtype=f64, seed=5),
                 "binary TreeLSTM (Tai et al.), hidden 10, tokens (vocab 11, embed 5)"),
        ZooModel("TreeLSTM-3", lambda: M.TreeLSTM(hidden=6, features=D, arity=3, dtype=f64, seed=6),
                 "3-ary TreeLSTM, hidden 6, features 5"),
        ZooModel("ChildSumTreeLSTM",
                 lambda: M.ChildSumTreeLSTM(hidden=6, embed=D, vocab=V, dtype=f64, seed=7),
                 "child-sum TreeLSTM, variable arity, hidden 6, tokens (vocab 11, embed 5)"),
        ZooModel("MVRNN", lambda: M.MVRNN(hidden=4, vocab=V, dtype=f64, seed=8),
                 "MV-RNN, binary, hidden 4 (matrix state M [4, 4]), tokens (vocab 11)"),
        ZooModel("DAGRNN", lambda: M.DAGRNN(hidden=6, features=D, dtype=f64, seed=9),
                 "DAG-RNN, variable arity, hidden 6, features 5"),
        ZooModel("SeqLSTM", lambda: M.SeqLSTM(hidden=6, features=D, dtype=f64, seed=10),
                 "LSTM over sequences (chains), hidden 6, features 5"),
        ZooModel("SeqGRU", lambda: M.SeqGRU(hidden=6, embed=D, vocab=V, dtype=f64, seed=11),
                 "GRU over sequences (chains), hidden 6, tokens (vocab 11, embed 5)"),
    )


_ZOO: tuple[ZooModel, ...] | None = None


def zoo() -> tuple[ZooModel, ...]:
    """Every model of the sweep, in a fixed order."""
    global _ZOO
    if _ZOO is None:
        _ZOO = _zoo()
    return _ZOO


def get(model_id: str) -> ZooModel:
    for m in zoo():
        if m.id == model_id:
            return m
    raise KeyError(f"no zoo model {model_id!r}; the suite knows {[m.id for m in zoo()]}")
