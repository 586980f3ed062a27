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


def check_treelstm_rounds_the_activations(dot: str, threads: int) -> Any:
    """A TreeLSTM h64 on ``bf16_dot=dot``: its notes say so, it matches the float64 reference
    within the bfloat16 tolerance, and it differs from ``pairs`` (the activations are rounded
    too); returns the executable."""
    import cortex
    from cortex.models import TreeLSTM
    from cortex.testing.tolerance import TOLERANCES

    model = TreeLSTM(hidden=64, embed=16, vocab=20, seed=3)
    exe = cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": dot}, threads=threads)
    assert any(f"bf16_dot={dot}" in n for n in exe.notes)
    got = exe(TREES)
    assert scaled_error(got, cortex.compile(model, target="numpy")(TREES)) <= TOLERANCES["bfloat16"].atol
    pairs = cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": "pairs"},
                           threads=threads)(TREES)
    assert scaled_error(got, pairs) > 0
    return exe


def check_zoo_family_against_pairs(name: str, dot: str) -> tuple[Any, Any]:
    """Zoo family ``name`` (h64) on ``bf16_dot=dot`` computes what it computes on ``pairs``
    within the bfloat16 tolerance; returns both executables (``dot``'s first)."""
    import cortex
    from cortex.testing.tolerance import TOLERANCES

    model, structures = zoo_case(name)
    exe = cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": dot})
    pairs = cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": "pairs"})
    assert scaled_error(exe(structures), pairs(structures)) <= TOLERANCES["bfloat16"].atol
    return exe, pairs
