"""Storage formats of buffers: float32 values held in memory in fewer bytes (``Buffer.storage``).

Pipeline position: host side, around the LoopProgram. The lowering marks the buffers a format
applies to (``cortex.core.lowering.weight_storage``); :meth:`Lowered.layout_params` packs their
params with :func:`pack` when the executable is made; a code generator loads the packed elements
and widens them to float32 in registers; the interpreter widens the whole buffer with
:func:`unpack` before it runs (the same values the generated code computes with).

``"bfloat16"``: the upper half of a float32 (sign, the 8 exponent bits, 7 mantissa bits), held as
``uint16``. Packing rounds to nearest, ties to even (what ``torch.bfloat16`` and the AVX-512
``vcvtneps2bf16`` instruction do); infinities stay infinities, a finite value beyond the largest
bfloat16 rounds to infinity, NaN stays NaN (quiet, same sign), subnormals round like any value
(bfloat16 has float32's exponent range). Unpacking is exact: a shift by 16 bits.
"""

from __future__ import annotations

import numpy as np

from cortex.core.loopir.nodes import STORAGE_FORMATS

#: The NumPy type of one stored element, per format.
STORAGE_NP_DTYPES = {"bfloat16": np.uint16}


def pack(values: np.ndarray, storage: str) -> np.ndarray:
    """``values`` (float32) in ``storage``'s format: a C-contiguous array of the same shape."""
    _check_format(storage)
    a = np.ascontiguousarray(values)
    if a.dtype != np.float32:
        raise TypeError(f"{storage} packs float32 values, not {a.dtype}")
    bits = a.view(np.uint32)
    # round to nearest even: add 0x7fff plus the lowest kept bit, then drop the low half
    # (uint32 arithmetic: only NaNs, replaced below, can wrap around)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
               >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():  # keep NaN a NaN: its top bits with the quiet bit set (rounding could make it inf)
        rounded[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return rounded


def unpack(stored: np.ndarray, storage: str) -> np.ndarray:
    """The float32 values of ``stored`` (exact: bfloat16 is the upper half of a float32)."""
    _check_format(storage)
    a = np.ascontiguousarray(stored)
    if a.dtype != STORAGE_NP_DTYPES[storage]:
        raise TypeError(f"{storage} values are stored as {np.dtype(STORAGE_NP_DTYPES[storage])}, "
                        f"not {a.dtype}")
    return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_to(values: np.ndarray, storage: str) -> np.ndarray:
    """``values`` (float32) as the code reads them back from ``storage``: ``unpack(pack(v))``."""
    return unpack(pack(values, storage), storage)


def _check_format(storage: str) -> None:
    if storage not in STORAGE_FORMATS:
        raise ValueError(f"unknown storage format {storage!r}; known: {STORAGE_FORMATS}")
