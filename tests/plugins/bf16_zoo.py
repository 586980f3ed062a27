"""What the tests of the ``llvm`` target's bfloat16 products (``bf16_dot`` "amx", "dpbf16")
share: the inputs, every zoo family's model and inputs, and the error they bound."""

from __future__ import annotations

from typing import Any

import numpy as np

TREES = [((1, 2), (3, (4, 5))), 7, (((8, 9), 10), ((11, 12), (13, 14))),
         ((((1, 2), (3, 4)), ((5, 6), (7, 8))), (((9, 10), (11, 12)), ((13, 14), (15, 16))))]
ZOO = ("TreeLSTM", "TreeGRU", "ChildSumTreeLSTM", "TreeFC", "MVRNN", "DAGRNN", "SeqLSTM")


def scaled_error(got: Any, want: Any) -> float:
    """The largest difference over every state, scaled by ``max(1, max |want|)``."""
    return max(float(np.abs(got.nodes(s) - want.nodes(s)).max()) / max(1.0, float(np.abs(want.nodes(s)).max()))
               for s in want.states)


def zoo_case(name: str, hidden: int = 64) -> tuple[Any, list]:
    """The benchmark's model of zoo family ``name`` at ``hidden`` and three of its inputs."""
    from cortex.bench.workloads import MODELS, GroupKey, build_model, make_inputs

    model = build_model(GroupKey(name, hidden, None, 200, seed=1))
    width = model.params["U"].shape[1] if name == "DAGRNN" else MODELS[name].hidden(hidden)
    return model, make_inputs(name, 12, 3, vocab=200, width=width, seed=1).structures
