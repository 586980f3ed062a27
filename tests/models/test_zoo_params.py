"""Parameters: seeded init, dtypes, .npz save/load with clear errors, constructor checks."""

from __future__ import annotations

import numpy as np
import pytest

from cortex.core.frontend.model_errors import ModelDefinitionError, ParamError
from cortex.core.frontend.reference import evaluate
from cortex.models import (
    DAGRNN, MVRNN, ChildSumTreeLSTM, SeqGRU, SeqLSTM, TreeFC, TreeGRU, TreeLSTM, TreeRNN,
)
from zoo_structures import Structure, make_batch

ALL = [
    lambda **k: TreeFC(hidden=4, embed=3, vocab=7, **k),
    lambda **k: TreeRNN(hidden=4, vocab=7, **k),
    lambda **k: TreeGRU(hidden=4, embed=3, vocab=7, **k),
    lambda **k: TreeLSTM(hidden=4, embed=3, vocab=7, **k),
    lambda **k: ChildSumTreeLSTM(hidden=4, embed=3, vocab=7, **k),
    lambda **k: MVRNN(hidden=3, vocab=7, **k),
    lambda **k: DAGRNN(hidden=4, features=3, **k),
    lambda **k: SeqLSTM(hidden=4, features=3, **k),
    lambda **k: SeqGRU(hidden=4, embed=3, vocab=7, **k),
]


@pytest.mark.parametrize("make", ALL)
def test_npz_round_trip_for_every_model(make, tmp_path):
    a, b = make(seed=1), make(seed=2)
    assert any(not np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert all(v.dtype == np.float32 for v in a.params.values())
    path = tmp_path / "p.npz"
    a.save_npz(path)
    b.load_npz(path)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
        assert b.params[k].dtype == np.float32


@pytest.mark.parametrize("make", ALL)
def test_seeded_init_is_reproducible_and_float64_allowed(make):
    a, b = make(seed=5, dtype="float64"), make(seed=5, dtype="float64")
    for k in a.params:
        assert a.params[k].dtype == np.float64
        np.testing.assert_array_equal(a.params[k], b.params[k])
    assert a.trace().params[0].dtype == "float64"


def test_load_npz_errors_name_the_problem(tmp_path):
    m = TreeLSTM(hidden=4, embed=3, vocab=7)
    p = tmp_path / "x.npz"
    np.savez(p, **{k: v for k, v in m.params.items() if k != "W_i"})
    with pytest.raises(ParamError, match=r"missing \['W_i'\]"):
        m.load_npz(p)
    np.savez(p, **m.params, extra=np.zeros(3, np.float32))
    with pytest.raises(ParamError, match=r"unexpected \['extra'\]"):
        m.load_npz(p)
    bad = dict(m.params, W_i=np.zeros((5, 3), np.float32))
    np.savez(p, **bad)
    with pytest.raises(ParamError, match=r"'W_i' has shape \(5, 3\), model expects \(4, 3\)"):
        m.load_npz(p)
    np.savez(p, **{k: v.astype(np.float64) for k, v in m.params.items()})
    with pytest.raises(ParamError, match="dtype='float64'"):
        m.load_npz(p)


def test_constructor_errors():
    with pytest.raises(ModelDefinitionError, match="exactly one of vocab"):
        TreeLSTM(hidden=4)
    with pytest.raises(ModelDefinitionError, match="needs embed"):
        TreeLSTM(hidden=4, vocab=3)
    with pytest.raises(ModelDefinitionError, match="float32 or float64"):
        TreeLSTM(hidden=4, vocab=3, embed=2, dtype="int32")
    with pytest.raises(ModelDefinitionError, match="arity"):
        TreeFC(hidden=4, vocab=3, embed=2, arity=0)
    with pytest.raises(ModelDefinitionError, match="must equal hidden"):
        TreeRNN(hidden=4, vocab=3, embed=2)


def test_loaded_params_change_the_reference_output(tmp_path):
    a, b = SeqLSTM(hidden=3, features=2, seed=1), SeqLSTM(hidden=3, features=2, seed=2)
    batch, _ = make_batch([Structure([[], [0], [1]], features=np.ones((3, 2)))])
    before = evaluate(b.trace(), b.params, batch)["h"]
    a.save_npz(tmp_path / "a.npz")
    b.load_npz(tmp_path / "a.npz")
    after = evaluate(b.trace(), b.params, batch)["h"]
    assert not np.allclose(before, after)
    np.testing.assert_array_equal(after, evaluate(a.trace(), a.params, batch)["h"])


def test_docstrings_carry_equations():
    for cls in (TreeFC, TreeRNN, TreeGRU, TreeLSTM, ChildSumTreeLSTM, MVRNN, DAGRNN, SeqLSTM, SeqGRU):
        doc = cls.__doc__ or ""
        assert "=" in doc and ("tanh" in doc or "relu" in doc), cls.__name__
