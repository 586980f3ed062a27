"""``check_finite=True``: a call refuses input features holding NaN or an infinity, naming the
node; by default non-finite features propagate to the outputs as in the reference."""

from __future__ import annotations

import numpy as np
import pytest

import cortex
from cortex.core.errors import InvalidOptionError, NonFiniteInputError
from cortex.core.linearize import Grid
from cortex.models import DAGRNN, TreeLSTM


def _grids(bad: float | None = None) -> list[Grid]:
    rng = np.random.default_rng(0)
    feats = [rng.normal(size=(3, 3, 4)) for _ in range(2)]
    if bad is not None:
        feats[1][2, 1, 3] = bad
    return [Grid(3, 3, features=f) for f in feats]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_feature_is_refused_with_its_node(bad):
    exe = cortex.compile(DAGRNN(hidden=4, features=4, seed=0), target="numpy", check_finite=True)
    assert exe.check_finite
    batch = exe.linearize(_grids(bad))
    node = int(np.flatnonzero(~np.isfinite(batch.features).all(axis=1))[0])
    with pytest.raises(NonFiniteInputError, match=f"node {node} \\(structure 1\\)") as err:
        exe(_grids(bad))
    assert isinstance(err.value, cortex.CortexError) and isinstance(err.value, ValueError)
    with pytest.raises(NonFiniteInputError):
        exe.run(batch)
    assert np.isfinite(exe(_grids()).root("h")).all()  # finite inputs run as before


def test_by_default_non_finite_features_propagate():
    exe = cortex.compile(DAGRNN(hidden=4, features=4, seed=0), target="numpy")
    assert not exe.check_finite
    roots = exe(_grids(np.nan)).root("h")
    assert np.isfinite(roots[0]).all() and np.isnan(roots[1]).all()


def test_the_option_is_a_bool_and_a_model_without_features_ignores_it():
    with pytest.raises(InvalidOptionError, match="check_finite"):
        cortex.compile(DAGRNN(hidden=4, features=4, seed=0), target="numpy", check_finite="yes")
    exe = cortex.compile(TreeLSTM(hidden=4, embed=4, vocab=10, seed=0), target="numpy", check_finite=True)
    assert exe([((1, 2), 3)]).root("h").shape == (1, 4)


def test_a_saved_executable_keeps_the_option(tmp_path):
    exe = cortex.compile(DAGRNN(hidden=4, features=4, seed=0), target="numpy", check_finite=True)
    exe.save(tmp_path / "dag.cortex")
    loaded = cortex.load(tmp_path / "dag.cortex")
    assert loaded.check_finite
    with pytest.raises(NonFiniteInputError):
        loaded(_grids(np.inf))
