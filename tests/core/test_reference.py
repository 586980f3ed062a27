"""The float64 reference evaluator: iterative (deep chains), input checks, output selection."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

from cortex.core.frontend.reference import ReferenceInputError, evaluate, roots  # noqa: E402
from cortex.core.linearize.structure import INDEX_DTYPE, LinearizedBatch  # noqa: E402
from cortex.models import DAGRNN, ChildSumTreeLSTM, TreeFC, TreeLSTM  # noqa: E402
from zoo_structures import Structure, make_batch  # noqa: E402


def chain_batch(n: int, vocab: int) -> LinearizedBatch:
    """A chain 0 <- 1 <- ... <- n-1 built with vectorized NumPy (one node per level)."""
    ids = np.arange(n, dtype=INDEX_DTYPE)
    return LinearizedBatch(
        num_nodes=n,
        level_offsets=np.arange(n + 1, dtype=INDEX_DTYPE),
        child_offsets=np.concatenate([[0], np.arange(n, dtype=INDEX_DTYPE)]).astype(INDEX_DTYPE),
        child_ids=ids[:-1],
        child_table=np.concatenate([[-1], ids[:-1]]).astype(INDEX_DTYPE)[:, None],
        roots=np.array([n - 1], dtype=INDEX_DTYPE),
        node_input=np.zeros(n, dtype=INDEX_DTYPE),
        word_ids=(ids % vocab).astype(INDEX_DTYPE),
    )


def test_chain_of_100000_nodes_is_iterative():
    m = TreeFC(hidden=3, embed=2, vocab=5, arity=1, dtype="float64")
    batch = chain_batch(100_000, 5)
    limit = sys.getrecursionlimit()
    t = time.perf_counter()
    out = evaluate(m.trace(), m.params, batch)
    assert time.perf_counter() - t < 30
    assert sys.getrecursionlimit() == limit
    h = out["h"]
    assert h.shape == (100_000, 3) and np.all(np.isfinite(h))
    # spot-check the first steps by hand
    P = m.params
    x = np.maximum(P["W_e"] @ P["E"][0] + P["b_e"], 0)
    np.testing.assert_allclose(h[0], x, rtol=1e-12)
    np.testing.assert_allclose(h[1], np.maximum(P["W_0"] @ x + P["b"], 0), rtol=1e-12)


def test_batch_must_fit_the_graph():
    m = TreeLSTM(hidden=3, embed=2, vocab=4)
    batch, _ = make_batch([Structure([[], [], [], [0, 1, 2]], words=[0, 1, 2, 3])])
    with pytest.raises(ReferenceInputError, match="arity 2, but internal node 3 has 3 children"):
        evaluate(m.trace(), m.params, batch)
    batch, _ = make_batch([Structure([[], [], [0, 1]], words=[0, 9, 2])])
    with pytest.raises(ReferenceInputError, match=r"node 1 needs a token id in \[0, 4\).*has 9"):
        evaluate(m.trace(), m.params, batch)
    batch, _ = make_batch([Structure([[], [], [0, 1]], words=[0, -1, 2])])
    with pytest.raises(ReferenceInputError, match="has -1"):
        evaluate(m.trace(), m.params, batch)
    batch, _ = make_batch([Structure([[], [], [0, 1]])])
    with pytest.raises(ReferenceInputError, match="no word_ids"):
        evaluate(m.trace(), m.params, batch)
    d = DAGRNN(hidden=3, features=2)
    batch, _ = make_batch([Structure([[], [0]], features=np.ones((2, 5)))])
    with pytest.raises(ReferenceInputError, match="features are"):
        evaluate(d.trace(), d.params, batch)


def test_internal_nodes_without_tokens_are_fine_when_unused():
    m = TreeLSTM(hidden=3, embed=2, vocab=4)  # internal nodes read no token
    batch, _ = make_batch([Structure([[], [], [0, 1]], words=[0, 1, -1])])
    out = evaluate(m.trace(), m.params, batch)
    assert np.all(np.isfinite(out["h"]))


def test_missing_or_misshaped_params_are_reported():
    m = ChildSumTreeLSTM(hidden=3, embed=2, vocab=4)
    batch, _ = make_batch([Structure([[], [0]], words=[0, 1])])
    with pytest.raises(ValueError, match="needs parameter 'U_f'"):
        evaluate(m.trace(), {k: v for k, v in m.params.items() if k != "U_f"}, batch)
    with pytest.raises(ValueError, match="'U_f' has shape"):
        evaluate(m.trace(), dict(m.params, U_f=np.zeros((2, 2))), batch)


def test_mean_reduction_and_shared_children():
    from cortex.core.frontend.model import Model

    class MeanSum(Model):
        def __init__(self):
            super().__init__(arity=None, dtype="float64")
            self.add_feature_input("x", 2)
            self.add_state("h", (2,))

        def leaf(self, g):
            return {"h": g.input()}

        def internal(self, g):
            return {"h": g.reduce(g.child("h"), "mean") + g.input()}

    m = MeanSum()
    x = np.arange(10.0).reshape(5, 2)
    # DAG: node 2 reads 0, 1; node 3 reads 1 (shared); node 4 reads 2, 3
    batch, ids = make_batch([Structure([[], [], [0, 1], [1], [2, 3]], features=x)])
    h = evaluate(m.trace(), m.params, batch)["h"]
    h2 = (x[0] + x[1]) / 2 + x[2]
    h3 = x[1] + x[3]
    np.testing.assert_array_equal(h[ids[0][4]], (h2 + h3) / 2 + x[4])
    np.testing.assert_array_equal(roots(m.trace(), {"h": h}, batch)["h"][0], h[ids[0][4]])
