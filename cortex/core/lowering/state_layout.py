"""The layout of per-node state: row-major ``[N, *shape]`` or blocked by nodes.

Pipeline position: the last schedule transform of :func:`cortex.core.lowering.apply_schedule.apply_schedule`
(the ``state_layout`` / ``state_block`` knobs), after every loop-shape transform, so the layout
reaches every loop nest those made. A pure ``LoopProgram -> LoopProgram`` function.

``node_blocked`` with block ``b`` stores a buffer of logical shape ``[N, *shape]`` as
``[N // b + 1, *shape, b]``: node ``n``'s element ``(n, *k)`` lives at ``(n // b, *k, n % b)``,
so ``b`` consecutive nodes' values of one hidden unit are adjacent (the blocked layout of ALT,
chosen with the loop knobs). The block count ``N // b + 1`` covers every node for any ``N``;
the rows of the last block past ``N`` are padding, which no access reaches (every index of the
program is proved below ``N`` by the verifier, which knows ``n <= N - 1`` gives
``n // b <= N // b``). The layout propagates: every ``Load``, ``Store`` and ``Prefetch`` of the
buffer in every kernel is rewritten, whichever loop nest holds it.

Which buffers: every ``output`` buffer (the model's states) and every ``temp`` with a row per
node (a materialized per-node intermediate); per-child temps (``E`` rows) keep their layout.
The host reads states back row-major (:func:`cortex.core.lowering.transforms.from_layout`,
called by ``Lowered.states`` and the executable), so users never see the blocked layout.
"""

from __future__ import annotations

from dataclasses import replace

from cortex.core import loopir as ir
from cortex.core.lowering.transforms import TransformError

NODE_ROWS = "N"  # the size symbol whose rows a per-node buffer has


def node_buffers(program: ir.Program) -> list[str]:
    """The buffers the ``state_layout`` knob lays out: outputs and per-node temps, row-major."""
    return [b.name for b in program.buffers
            if b.role in ("output", "temp") and b.layout == ("row_major",) and b.shape
            and b.shape[0] == ir.Var(NODE_ROWS)]


def block_nodes(program: ir.Program, names: list[str], block: int) -> ir.Program:
    """Store each of ``names`` (row-major, ``[N, *shape]``) in blocks of ``block`` nodes,
    ``[N // block + 1, *shape, block]``, and rewrite every access to it."""
    if not isinstance(block, int) or block < 1:
        raise TransformError(f"node block must be a positive int, got {block!r}")
    chosen = set(names)
    new_buffers = []
    for b in program.buffers:
        if b.name in chosen:
            if b.layout != ("row_major",):
                raise TransformError(f"buffer {b.name} already has layout {b.layout}")
            if not b.shape or b.shape[0] != ir.Var(NODE_ROWS):
                raise TransformError(f"buffer {b.name} has no row per node (shape {b.shape})")
            shape = (ir.Var(NODE_ROWS) // block + 1,) + tuple(b.shape[1:]) + (ir.Const(block),)
            b = replace(b, shape=shape, layout=("node_blocked", block), logical_shape=b.shape)
        new_buffers.append(b)
    missing = chosen - {b.name for b in program.buffers}
    if missing:
        raise TransformError(f"program {program.name} has no buffers {sorted(missing)}")

    def f(n: ir.Node) -> ir.Node | None:
        if isinstance(n, (ir.Load, ir.Store)) and n.buffer in chosen:
            node, *rest = n.index
            return replace(n, index=(node // block, *rest, node % block))
        if isinstance(n, ir.Prefetch) and n.buffer in chosen:
            # the node's values are spread over its block: hint the block's first row
            node, *rest = n.index
            return replace(n, index=(node // block, *(ir.Const(0) for _ in rest), ir.Const(0)), count=block)
        return None

    kernels = tuple(replace(k, body=ir.transform(k.body, f)) for k in program.kernels)
    return replace(program, kernels=kernels, buffers=tuple(new_buffers))
