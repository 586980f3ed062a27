"""Lowering and scheduling: RecursiveGraph -> scheduled, verified LoopProgram.

Pipeline position: after the graph passes, before rendering.

* :mod:`~cortex.core.lowering.lower` — recursion lowering: levels, node loops, kernels, the
  host structure, and the data plumbing backends use (``prepare_params``, ``bind_batch``);
* :mod:`~cortex.core.lowering.cases` — one case (leaf or internal) into the loop nests of a node;
* :mod:`~cortex.core.lowering.schedule` — :class:`Schedule` (the knobs) and
  :class:`ScheduleSpace` (their legal values for a target's capabilities);
* :mod:`~cortex.core.lowering.apply_schedule` — applies a schedule's knobs to lowered nests;
* :mod:`~cortex.core.lowering.transforms` — the pure ``Program -> Program`` primitives;
* :mod:`~cortex.core.lowering.jam` — node jamming with fused reductions.
"""
