"""Cache-line-aligned host buffers (cortex.core.runtime.hostmem) and where the pipeline uses them."""

from __future__ import annotations

import numpy as np
import pytest

import cortex
from cortex.core.plugin.backend import HostRuntime
from cortex.core.runtime.hostmem import CACHE_LINE, aligned_copy, aligned_empty, aligned_zeros, as_aligned, is_aligned
from cortex.core.lowering.transforms import from_layout, to_layout
from cortex.core.frontend.params import compute_derived


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (), 5, (0,), (4, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_aligned_arrays_start_on_a_cache_line(shape, dtype) -> None:
    for make in (aligned_empty, aligned_zeros):
        a = make(shape, dtype)
        want = (shape,) if isinstance(shape, int) else shape
        assert a.shape == want and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        assert is_aligned(a)
    assert not aligned_zeros(shape, dtype).any()


def test_other_alignments_and_bad_ones() -> None:
    assert _ptr(aligned_empty(10, np.float32, align=4096)) % 4096 == 0
    for bad in (0, -64, 48):
        with pytest.raises(ValueError, match="power of two"):
            aligned_empty(10, np.float32, align=bad)


def test_is_aligned_sees_an_offset_view() -> None:
    a = aligned_zeros(64, np.float32)
    assert is_aligned(a) and not is_aligned(a[4:])  # 16 bytes in
    assert is_aligned(a[16:])  # 64 bytes in


def test_aligned_copy_keeps_values_and_casts_on_request() -> None:
    src = np.arange(24.0).reshape(4, 6).T  # not contiguous
    got = aligned_copy(src)
    assert is_aligned(got) and got.flags.c_contiguous and got.dtype == src.dtype
    np.testing.assert_array_equal(got, src)
    f32 = aligned_copy(src, np.float32)
    assert f32.dtype == np.float32 and is_aligned(f32)
    np.testing.assert_array_equal(f32, src.astype(np.float32))


def test_as_aligned_copies_only_when_needed() -> None:
    a = aligned_zeros((8, 16), np.float32)
    assert as_aligned(a) is a
    off = a.reshape(-1)[4:]
    got = as_aligned(off)
    assert got is not off and is_aligned(got)
    np.testing.assert_array_equal(got, off)


def test_host_runtime_buffers_are_aligned() -> None:
    class _Runtime(HostRuntime):
        def launch(self, artifact, args, **launch_config) -> None:  # the array methods only
            raise AssertionError("not launched here")

    rt = _Runtime()
    assert is_aligned(rt.allocate((3, 256), np.dtype(np.float32)))
    base = aligned_zeros(1000, np.float32)
    base[:] = np.arange(1000)
    src = base[4:]  # 16 bytes past a cache line, whatever malloc returned
    assert not is_aligned(src)
    up = rt.upload(src)
    assert is_aligned(up) and not np.shares_memory(up, src)
    kept = aligned_zeros(100, np.float32)
    assert rt.adopt(kept) is kept
    moved = rt.adopt(src)
    assert is_aligned(moved) and not np.shares_memory(moved, src)
    np.testing.assert_array_equal(moved, src)


@pytest.mark.parametrize("layout", [("transposed",), ("packed", 16)])
def test_weight_layouts_are_made_aligned(layout) -> None:
    w = np.random.default_rng(0).standard_normal((64, 24)).astype(np.float32)
    got = to_layout(w, layout)
    assert is_aligned(got)
    np.testing.assert_array_equal(from_layout(got, layout), w)


def test_embedding_tables_are_computed_aligned() -> None:
    rng = np.random.default_rng(1)
    E, W, b = rng.standard_normal((50, 8)), rng.standard_normal((12, 8)), rng.standard_normal(12)
    got = compute_derived("embed_linear", [E, W, b], np.float32)
    assert is_aligned(got) and got.dtype == np.float32
    np.testing.assert_allclose(got, (E @ W.T + b).astype(np.float32), rtol=1e-5, atol=1e-5)


def test_compiled_params_are_aligned_and_the_callers_stay_untouched() -> None:
    """Every param of an executable on a host runtime starts on a cache line; the model's own
    arrays are never adopted (a row-major param that is the user's array is copied)."""
    from cortex.models import TreeFC

    model = TreeFC(vocab=30, embed=8, hidden=16, seed=0)
    before = {k: v.copy() for k, v in model.params.items()}
    exe = cortex.compile(model, target="numpy")
    assert exe._params, "the executable holds its params"
    for name, arr in exe._params.items():
        assert is_aligned(arr), name
        assert not any(np.shares_memory(arr, p) for p in model.params.values()), name
    for k, v in model.params.items():
        np.testing.assert_array_equal(v, before[k])
    assert CACHE_LINE == 64
