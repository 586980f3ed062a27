"""Compiling the suite's cases: schedules by name, executables cached, compile-only builds.

Pipeline position: between the case list and the comparison. A case names a schedule
*variant* rather than a Schedule, because the legal schedules depend on the target's
capabilities, which the suite asks the target's backend for:

=============  =================================================================================
default        the target's default schedule (``ScheduleSpace(capabilities, dtype, weights).default()``)
unscheduled    the default with every loop-shaping knob neutral (what ``dump=`` writes as stage
               03: no tiling, scalar, no unrolling, row-major weights and state, not persistent)
unfused        the default with ``fuse=False`` (dense intermediates between the statements)
jammed         the default with the level interchange and a node jam of 4 nodes x 2 hidden units
               (a block every zoo hidden size divides), untiled: the schedule transforms that
               a default schedule of a CPU-like target may or may not use (not offered on a grid)
blocked        the default with the per-node state in blocks of 8 nodes (``state_layout``)
refactored     the default with ``refactor=True`` (a parent's weight products of its children's
               states computed in the children's steps)
unrolled       the default with ``recursive_unroll=2`` (a parent computed with its children in
               one work unit, one barrier per pair of levels)
widened        the default with ``bf16_dot="widen"`` (bfloat16 weights widened element by
               element; the default reads pairs of rows where the target prefers it)
sample<i>      the i-th random legal schedule of the target's space (seeded; full sweep only)
=============  =================================================================================

:func:`compile_only` runs the pipeline's stages up to and including the backend compiler — trace,
graph passes, backend, schedule, lower, verify, render, compile — without building the
Executable (which uploads the params, so it needs a device): it is ``cortex.compile_only``
(``cortex.core.pipeline.build_artifact``, the first half of ``cortex.core.pipeline.build``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cortex.core.api import CompiledCode
from cortex.core.api import compile_only as cortex_compile_only
from cortex.testing import zoo

SCHEDULE_VARIANTS = ("default", "unscheduled", "unfused", "jammed", "blocked", "refactored", "unrolled",
                     "widened")


class ScheduleNotLegal(ValueError):
    """The schedule variant is not in the target's schedule space (not applicable there)."""


@lru_cache(maxsize=None)
def backend(target: str) -> Any:
    """The target's backend with default options (for its capabilities)."""
    from cortex.core.api import resolve_target

    resolved, options = resolve_target(target)
    return resolved.create_backend(options)


def schedule(target: str, dtype: str, variant: str, weights: str = "") -> Any:
    """The Schedule of ``variant`` for ``target``, ``dtype`` and the weights' storage
    (``weights`` "": the compute dtype; default rules follow it) (see the module docstring)."""
    from cortex.core.lowering.schedule import ScheduleError, ScheduleSpace
    from cortex.core.pipeline import neutral_schedule

    space = ScheduleSpace(backend(target).capabilities, dtype, weights or None)
    base = space.default()
    try:
        if variant == "default":
            return base
        if variant == "unscheduled":
            return space.validate(neutral_schedule(base))
        if variant == "unfused":
            return space.with_knobs(fuse=False)
        if variant == "jammed":
            return space.with_knobs(interchange=True, node_jam=4, hidden_jam=2, tile_hidden=0)
        if variant == "blocked":
            return space.with_knobs(state_layout="node_blocked", state_block=8)
        if variant == "refactored":
            return space.with_knobs(refactor=True)
        if variant == "unrolled":
            return space.with_knobs(recursive_unroll=2)
        if variant == "widened":
            return space.with_knobs(bf16_dot="widen")
        if variant.startswith("sample"):
            i = int(variant[len("sample"):])
            return space.sample(1000 + i, 1)[0]
    except ScheduleError as e:
        raise ScheduleNotLegal(f"schedule {variant!r} is not legal on target {target!r} "
                               f"for {dtype}: {e}") from None
    raise ValueError(f"unknown schedule variant {variant!r}; known: {SCHEDULE_VARIANTS} and "
                     f"sample<i>")


#: What compile-only produces: the scheduled program, the source, the artifact.
Built = CompiledCode


def compile_only(model: Any, target: str, *, dtype: str, schedule: Any = None,
                 weights: str = "") -> Built:
    """Every stage of ``cortex.compile`` up to the backend's compiler (``cortex.compile_only``)."""
    return cortex_compile_only(model, target, dtype=dtype, schedule=schedule, weights=weights or None)


_EXECUTABLES: dict[tuple[str, str, str, str, str], Any] = {}
_BUILT: dict[tuple[str, str, str, str, str], Built] = {}


def executable(target: str, model_id: str, dtype: str, variant: str, weights: str = "") -> Any:
    """``cortex.compile(model, target=..., dtype=..., schedule=..., weights=...)``, once per
    key (``weights`` "": the compute dtype)."""
    import cortex

    key = (target, model_id, dtype, variant, weights)
    if key not in _EXECUTABLES:
        sched = schedule(target, dtype, variant, weights)
        _EXECUTABLES[key] = cortex.compile(zoo.get(model_id).model(), target=target,
                                           dtype=dtype, schedule=sched, weights=weights or None)
    return _EXECUTABLES[key]


def built(target: str, model_id: str, dtype: str, variant: str, weights: str = "") -> Built:
    """:func:`compile_only` for a case, once per key."""
    key = (target, model_id, dtype, variant, weights)
    if key not in _BUILT:
        _BUILT[key] = compile_only(zoo.get(model_id).model(), target, dtype=dtype,
                                   schedule=schedule(target, dtype, variant, weights), weights=weights)
    return _BUILT[key]


def clear() -> None:
    """Forget every cached backend and executable (tests that swap plugins call this)."""
    _EXECUTABLES.clear()
    _BUILT.clear()
    backend.cache_clear()
