"""Weight storage: the ``weights`` compile option, applied to a lowered program.

Pipeline position: after lowering and scheduling (:func:`cortex.core.lowering.lower.lower`),
before rendering; the pipeline applies it to the lowering it made or read from the stage cache.
``weights="bfloat16"`` marks the program's weight matrices ``Buffer.storage="bfloat16"``:
:meth:`Lowered.layout_params` then packs their params to bfloat16 (``cortex.core.loopir.storage``)
and the code generator widens each loaded element to float32, so the products and sums stay
float32 (as do the states, biases and every other buffer).

Which buffers: the matrices a node's GEMV streams, that is every ``param`` buffer of two or more
dimensions addressed by loop indices only. A buffer gathered by a loaded index (an embedding, a
token table, MV-RNN's per-word matrices) keeps float32: a call reads one row of it per leaf,
not the whole matrix per level, so it is not what bounds a small batch, and the leaves' values
stay those of the float32 model. Biases (one dimension) are as few bytes as a state row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from cortex.core import loopir as ir

if TYPE_CHECKING:
    from cortex.core.lowering.lower import Lowered

#: The ``weights`` option's values: the compute dtype's own, or a storage format.
WEIGHT_DTYPES = ("float32", "float64", "bfloat16")
#: The ``bf16_dot`` choices that read ``bfloat16_pairs`` storage (rows ``k`` and ``k + 1`` in one
#: word), and those of them whose jammed GEMVs the code generator runs on bfloat16 products (the
#: activations rounded too), which it learns from the program's launch setting ``bf16_dot``.
PAIRS_DOTS = ("pairs", "amx", "dpbf16")
ROUNDED_DOTS = {"amx": "on AMX tiles", "dpbf16": "on the AVX512-BF16 dot product (vdpbf16ps)"}


def streamed_weights(program: ir.Program) -> tuple[str, ...]:
    """The float32 param buffers of two or more (logical) dimensions whose every load and
    prefetch is addressed by loop indices over fixed ranges only (no loaded value, no node or
    child index): the GEMV weight matrices."""
    gathered: set[str] = set()
    for k in program.kernels:
        loaded: set[str] = set()  # variables whose value depends on a load
        for n in ir.walk(k.body):  # pre-order: a binding is seen before the loads in its body
            if isinstance(n, ir.Let) and _reads_data(n.value, loaded):
                loaded.add(n.var)
            elif isinstance(n, (ir.For, ir.Reduce)) and (_reads_data(n.start, loaded)
                                                         or _reads_data(n.stop, loaded)):
                loaded.add(n.var)  # a range over loaded bounds: nodes of a level, a child range
            if isinstance(n, (ir.Load, ir.Prefetch)) and any(_reads_data(i, loaded) for i in n.index):
                gathered.add(n.buffer)
    return tuple(b.name for b in program.buffers
                 if b.role == "param" and b.dtype == "float32" and b.name not in gathered
                 and len(b.logical_shape or b.shape) >= 2)


def store_weights(lowered: "Lowered", weights: str, offered: tuple[str, ...] = ()) -> "Lowered":
    """``lowered`` with its weight matrices stored as ``weights`` (a storage format; the
    compute dtype's own name leaves it unchanged). The notes say which buffers, and, given the
    target's ``bf16_dot`` choices (``offered``: ``Capabilities.bf16_dot``), when none of them
    multiplies in bfloat16 (the weights halve the bytes read, not the arithmetic)."""
    if weights == lowered.dtype:
        return lowered
    if weights not in ir.STORAGE_FORMATS:
        raise ValueError(f"weights={weights!r}: a storage format from {ir.STORAGE_FORMATS} or "
                         f"the compute dtype {lowered.dtype!r}")
    if lowered.dtype != "float32":
        raise ValueError(f"weights={weights!r} needs float32 compute, not {lowered.dtype}")
    names = set(streamed_weights(lowered.program))
    formats = {b.name: _format(b, weights, lowered.schedule.bf16_dot) for b in lowered.program.buffers
               if b.name in names}
    buffers = tuple(replace(b, storage=formats[b.name]) if b.name in formats else b
                    for b in lowered.program.buffers)
    notes = tuple(f"weights: {', '.join(sorted(n for n, f in formats.items() if f == fmt))} stored as {fmt}"
                  for fmt in sorted(set(formats.values())))
    launch = lowered.program.launch
    dot = lowered.schedule.bf16_dot
    if dot in ROUNDED_DOTS and "bfloat16_pairs" in formats.values():
        launch += (("bf16_dot", dot),)  # the code generator multiplies the pairs in bfloat16
        notes += (f"bf16_dot={dot}: the jammed GEMVs over the pairs matrices {ROUNDED_DOTS[dot]} where "
                  f"the code generator finds them (activations rounded to bfloat16)",)
    if formats and offered and not any(d in ROUNDED_DOTS for d in offered):
        notes += (f"weights: no bfloat16 products on this target (bf16_dot choices: {', '.join(offered)}): the "
                  f"weights are widened to float32 as they load, so they halve the bytes read but not "
                  f"the arithmetic",)
    return replace(lowered, program=replace(lowered.program, buffers=buffers, launch=launch),
                   notes=lowered.notes + (notes or (f"weights: no weight matrix to store as {weights}",)))


def _format(buffer: ir.Buffer, weights: str, bf16_dot: str) -> str:
    """The storage format of a weight matrix: ``bfloat16_pairs`` for bfloat16 weights with
    a ``bf16_dot`` of :data:`PAIRS_DOTS` (the pairs layout is the AMX B tile's and the operand of
    ``vdpbf16ps``) where the matrix's
    second last dimension is a constant even size (a pair of reduction rows), else ``weights``."""
    rows = ir.const_int(buffer.shape[-2])
    if weights == "bfloat16" and bf16_dot in PAIRS_DOTS and rows is not None and rows % 2 == 0:
        return "bfloat16_pairs"
    return weights


def _reads_data(e: ir.Node, loaded: set[str]) -> bool:
    """Whether ``e`` depends on a buffer's contents: a load, or a variable bound to one."""
    return any(isinstance(x, ir.Load) or isinstance(x, ir.Var) and x.name in loaded
               for x in ir.walk(e))
