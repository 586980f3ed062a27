"""Cache-line-aligned host arrays: where the buffers of CPU backends live.

Pipeline position: beside the runtime stage. :class:`~cortex.core.plugin.backend.HostRuntime` (the
runtime of every backend whose device memory is host memory) allocates its output buffers and
keeps its params here, and the param preparation (:func:`cortex.core.lowering.transforms.to_layout`,
derived params in :mod:`cortex.core.frontend.params`) writes its fresh arrays here directly, so handing
them over costs no second copy. Tables filled row by row on use (:mod:`cortex.core.runtime.token_tables`)
live in :func:`sparse_zeros`, whose pages cost memory only once written.

Why: NumPy aligns a fresh array's data to 16 bytes only. A 64-byte vector load (AVX-512, one
float32 weight row-block of 16 lanes) from a 16-byte-aligned stream straddles two cache lines
every time, and each core then moves twice the lines for the same weights from its L2.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

#: Bytes of one cache line (x86-64, the AArch64 servers we know of): the alignment of host
#: buffers, which also makes every 16-lane float32 vector of a packed weight one whole line.
CACHE_LINE = 64


def is_aligned(array: np.ndarray, align: int = CACHE_LINE) -> bool:
    """Does ``array``'s data start on an ``align``-byte boundary? (An empty array reads no
    data: always.)"""
    return array.size == 0 or array.__array_interface__["data"][0] % align == 0


def aligned_empty(shape: Any, dtype: Any, align: int = CACHE_LINE) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an ``align``-byte boundary
    (a view into a slightly larger byte array, which it keeps alive as its ``base``)."""
    if align <= 0 or align & (align - 1):
        raise ValueError(f"align must be a power of two, got {align}")
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.__array_interface__["data"][0] % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_zeros(shape: Any, dtype: Any, align: int = CACHE_LINE) -> np.ndarray:
    """:func:`aligned_empty`, filled with zeros."""
    out = aligned_empty(shape, dtype, align)
    out.fill(0)
    return out


def sparse_zeros(shape: Any, dtype: Any) -> np.ndarray:
    """A C-contiguous zero array in its own anonymous mapping (page-aligned), whose pages take
    memory only when first written, one small page at a time: for a table filled by scattered
    rows on demand (:mod:`cortex.core.runtime.token_tables`). NumPy asks for transparent huge pages on
    big arrays, and then the first write of one 5 KiB row zeroes the 2 MiB around it: a few
    hundred scattered rows of a 100 MiB table cost as much as filling it."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype)
    region = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux; kernels with THP "always" need the opt-out
        region.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(region, dtype=dtype).reshape(shape)  # keeps the mapping alive


def aligned_copy(array: Any, dtype: Any = None, align: int = CACHE_LINE) -> np.ndarray:
    """A C-contiguous, ``align``-byte-aligned copy of ``array`` (cast to ``dtype`` if given)."""
    a = np.asarray(array)
    out = aligned_empty(a.shape, a.dtype if dtype is None else dtype, align)
    np.copyto(out, a, casting="unsafe" if dtype is not None else "no")
    return out


def as_aligned(array: np.ndarray, align: int = CACHE_LINE) -> np.ndarray:
    """``array`` itself when it is C-contiguous and aligned, else an aligned copy."""
    if array.flags.c_contiguous and is_aligned(array, align):
        return array
    return aligned_copy(array, align=align)
