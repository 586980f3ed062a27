"""The fused path for feature grids (``cortex/core/linearize/grids.py``) against the general
path (``read_part`` + ``assemble``), its layout cache, its dtype and what it declines."""

from __future__ import annotations

import numpy as np
import pytest

from cortex.core.errors import ArgumentTypeError
from cortex.core.linearize import (ArityError, FeatureError, Grid, StructureError, cache_info,
                                   clear_cache, linearize, read_part, set_cache)
from cortex.core.linearize import grids
from cortex.core.linearize.assemble import assemble

FIELDS = ("level_offsets", "child_offsets", "child_ids", "child_table", "roots", "node_input")


def general(items: list, **kw) -> object:
    return assemble([read_part(x, None, i) for i, x in enumerate(items)],
                    arity=kw.get("arity"), vocab_size=None, feature_dim=kw.get("feature_dim"),
                    feature_dtype=np.dtype(kw.get("feature_dtype", np.float64)))


def mixed_batch(seed: int = 0) -> list[Grid]:
    rng = np.random.default_rng(seed)
    return [Grid(3, 4, features=rng.normal(size=(3, 4, 5))),
            Grid(1, 1, features=rng.normal(size=(1, 5))),
            Grid(2, 5, features=rng.normal(size=(10, 5)).astype(np.float32)),
            Grid(3, 4, features=rng.normal(size=(3, 4, 5))[:, :, ::-1]),  # not contiguous
            Grid(4, 1, features=rng.normal(size=(4, 1, 5)))]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_grids_equal_the_general_path(dtype) -> None:
    items = mixed_batch()
    want = general(items, feature_dtype=dtype)
    for _ in range(2):  # the layout built, then taken from the cache
        got = linearize(items, feature_dtype=dtype, cache=False)
        for f in FIELDS:
            assert np.array_equal(getattr(got, f), getattr(want, f)), f
        assert got.word_ids is None and got.labels is None
        assert got.features.dtype == dtype and np.array_equal(got.features, want.features)
        assert list(got.origin) == list(want.origin)
        assert got.origin.row(3, (2, 1)) == want.origin.row(3, (2, 1))
        assert got._is_sealed() and not got.features.flags.writeable
        got.validate()


def test_features_are_copied_in_output_order_and_converted_once() -> None:
    rng = np.random.default_rng(1)
    feats = [rng.normal(size=(3, 3, 4)) for _ in range(3)]
    batch = linearize([Grid(3, 3, features=f) for f in feats], feature_dtype="float32")
    for row, (b, (i, j)) in enumerate(batch.origin):
        assert np.array_equal(batch.features[row], feats[b][i, j].astype(np.float32))
    feats[0][:] = 0.0  # the batch holds its own copy
    assert np.abs(batch.features).sum() > 0


def test_layouts_are_cached_by_shapes_and_shared_read_only() -> None:
    clear_cache()
    rng = np.random.default_rng(2)
    a = linearize([Grid(5, 5, features=rng.normal(size=(5, 5, 3))) for _ in range(4)])
    b = linearize([Grid(5, 5, features=rng.normal(size=(5, 5, 3))) for _ in range(4)])
    assert a.child_table is b.child_table and a.origin is b.origin
    assert a.features is not b.features and not np.array_equal(a.features, b.features)
    assert not a.child_table.flags.writeable
    c = linearize([Grid(5, 5, features=rng.normal(size=(5, 5, 3))) for _ in range(5)])
    assert c.num_nodes == 125 and c.child_table is not a.child_table
    assert cache_info()["grids"]["size"] >= 2
    try:
        set_cache(False)  # no cache: built every call, the same batch
        d = linearize([Grid(5, 5, features=np.asarray(a.features).reshape(4, 5, 5, 3)[k])
                       for k in range(4)])
        assert cache_info()["grids"]["size"] == 0
        assert d.child_table is not a.child_table
        assert np.array_equal(d.child_table, a.child_table)
    finally:
        set_cache(True)


@pytest.mark.parametrize("items, kw", [
    ([Grid(2, 2, features=np.zeros((2, 2, 3))), Grid(2, 2, features=np.zeros((2, 2, 4)))], {}),
    ([Grid(2, 2, features=np.zeros((2, 2, 3)))], {"feature_dim": 4}),
    ([Grid(2, 2, features=np.zeros((3, 2, 3)))], {}),
    ([Grid(2, 2, features=np.zeros((5, 3)))], {}),
    ([Grid(2, 2, features=np.zeros((2, 2, 3)))], {"arity": 2}),
])
def test_what_it_declines_raises_the_general_paths_error(items, kw) -> None:
    assert grids.grid_batch(items, kw.get("arity"), kw.get("feature_dim"),
                            np.dtype(np.float64)) is None
    with pytest.raises(StructureError) as fused:
        linearize(items, **kw)
    with pytest.raises(StructureError) as plain:
        general(items, **kw)
    assert type(fused.value) is type(plain.value) and str(fused.value) == str(plain.value)
    assert type(fused.value) in (FeatureError, ArityError)


def test_other_feature_grids_take_the_general_path() -> None:
    """Integer or list features, and grids with tokens, are read by the general path."""
    ints = [Grid(2, 3, features=np.arange(12).reshape(2, 3, 2))]
    lists = [Grid(1, 2, features=[[1.0, 2.0], [3.0, 4.0]])]
    words = [Grid(2, 2, features=np.ones((2, 2, 3)), words=[0, 1, 2, 3])]
    for items in (ints, lists, words):
        assert grids.grid_batch(items, None, None, np.dtype(np.float64)) is None
        got = linearize(items, cache=False)
        assert got.features.dtype == np.float64
        assert np.array_equal(got.features, general(items).features)
    assert np.array_equal(linearize(words).word_ids, general(words).word_ids)


def test_feature_dtype_is_checked() -> None:
    items = mixed_batch()
    for bad in ("float16", np.int32, "nope", [1]):
        with pytest.raises(ArgumentTypeError, match="feature_dtype"):
            linearize(items, feature_dtype=bad)
    assert linearize(items, feature_dtype=np.dtype("f4")).features.dtype == np.float32
