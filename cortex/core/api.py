"""The front door: ``cortex.compile(model, target="llvm", **options)``.

Pipeline position: the entry of the whole pipeline. :func:`compile` resolves the target first
(:func:`resolve_target`) — unknown name, target not enabled here, bad option, and then a target
that cannot run here: each a clear error before any work (nothing traced, compiled or dumped)
— and then hands the model, the target and the validated options to :func:`run_pipeline`, the
single hand-off point to trace → graph passes → lower → schedule → codegen → runtime.

:func:`compile_only` runs the same stages up to and including the target's compiler, with no
device: it is how code for a target that cannot run here (``cuda`` without a GPU) is generated,
compiled and inspected (``dump=`` writes every stage), and what the conformance suite's
compile-only part uses.

Compile options: every target accepts the shared options ``dtype`` (``"float32"`` or
``"float64"``; default: the model's), ``schedule`` (``"auto"``, the default: the matching
tuning record's schedule, else the target's default; ``"default"``; a ``Schedule``, a dict of
knobs over the target's default, or its JSON), ``workload`` (the workload class whose tuning
record ``"auto"`` prefers), ``dump`` (a directory: every stage's IR and the rendered source are
written there), ``passes`` (the graph passes to run; default ``DEFAULT_PASSES``),
``max_table_mib``, ``check_finite`` and ``weights`` (``"bfloat16"``: the weight matrices stored in
bfloat16, float32 compute, where the target's capabilities list it) — see
``cortex.core.pipeline``. Every other option is the target's own (``cortex info`` lists them).

Plugins are loaded here on first use, not when ``cortex`` is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cortex.core.errors import NotYetImplementedError, TargetNotEnabledError, TargetNotRunnableError
from cortex.core.plugin.targets import Target

#: How to get the code of a target that cannot run here (the end of ``cortex.compile``'s error).
COMPILE_ONLY_HINT = ("cortex.compile builds an executable, which needs the device; "
                     "cortex.compile_only(model, target={target!r}, ...) generates and compiles "
                     "the code without one (dump= writes every stage)")


def resolve_target(target: str, options: dict[str, Any] | None = None) -> tuple[Target, dict[str, Any]]:
    """The registered :class:`Target` for a name or alias, and its validated options.

    Raises, in this order: :class:`~cortex.core.errors.UnknownTargetError` (lists the known
    names and aliases), :class:`~cortex.core.errors.TargetNotEnabledError` (the reason and the
    fix), :class:`~cortex.core.errors.InvalidOptionError` (the option, the value, what is
    allowed). A target that is enabled but not runnable resolves: compiling without running
    is allowed (the conformance suite's compile-only mode).
    """
    from cortex.core.plugin.loader import get_registry

    resolved = get_registry().get(target)
    enabled = resolved.enabled()
    if not enabled:
        raise TargetNotEnabledError(resolved.name, enabled.reason, enabled.fix)
    return resolved, resolved.resolve_options(options or {})


def require_runnable(target: Target) -> None:
    """Raise :class:`~cortex.core.errors.TargetNotRunnableError` (the reason, the fix, and
    :data:`COMPILE_ONLY_HINT`) unless ``target`` can run here."""
    runnable = target.runnable()
    if not runnable:
        raise TargetNotRunnableError(target.name, runnable.reason, runnable.fix,
                                     COMPILE_ONLY_HINT.format(target=target.name))


def compile(model: Any, target: str = "llvm", **options: Any) -> Any:  # noqa: A001 (API name)
    """Compile ``model`` for ``target`` (a name or alias, e.g. ``"llvm"``/``"cpu"``,
    ``"opencl"``, ``"cuda"``, ``"numpy"``, or a plugin's target) with the shared options
    (``dtype``, ``schedule``, ``passes``, ``max_table_mib``, ``check_finite``, ``weights``,
    ``dump``) and the target's own
    ``options``.

    Returns a :class:`~cortex.core.runtime.executable.Executable`: ``exe(structures)`` gives
    :class:`~cortex.core.runtime.outputs.Outputs`. Run ``cortex info`` to list the targets, their
    options and whether they are enabled and runnable here. Errors come before any work:
    :class:`~cortex.core.errors.InvalidOptionError` names the option and what is allowed, and
    a target that cannot run here raises
    :class:`~cortex.core.errors.TargetNotRunnableError` (see :func:`compile_only`).
    """
    from cortex.core.pipeline import split_options

    shared, own = split_options(options)
    resolved, resolved_options = resolve_target(target, own)
    require_runnable(resolved)
    return run_pipeline(model, resolved, {**resolved_options, **shared})


@dataclass(frozen=True)
class CompiledCode:
    """What :func:`compile_only` produces: the scheduled LoopProgram, its schedule, the
    rendered source, the target compiler's artifact and its cache key."""

    target: str
    program: Any
    schedule: Any
    source: Any
    artifact: Any
    cache_key: str


def compile_only(model: Any, target: str = "llvm", **options: Any) -> CompiledCode:
    """Every stage of :func:`compile` up to and including the target's compiler — trace, graph
    passes, lower, schedule, render, compile — with the same options, but no executable: the
    params are not prepared and no device is touched, so it works for a target that is enabled
    but cannot run here (``cuda`` compiled by nvcc on a machine without a GPU). ``dump=``
    writes every stage."""
    from cortex.core.pipeline import build_artifact, compile_options, split_options

    shared, own = split_options(options)
    resolved, resolved_options = resolve_target(target, own)
    built = build_artifact(model, resolved, resolved_options,
                           compile_options(resolved.name, shared), prepare_params=False)
    return CompiledCode(resolved.name, built.lowered.program, built.lowered.schedule,
                        built.source, built.artifact, built.cache_key)


class PipelineNotAvailableError(NotYetImplementedError):
    """A stage of the pipeline is not available for this target yet (kept for plugins that
    register a target before its code generator exists)."""


def run_pipeline(model: Any, target: Target, options: dict[str, Any]) -> Any:
    """Trace ``model``, run the graph passes, lower, schedule, generate code with the
    ``target``'s backend (``target.create_backend(options)``) and return the executable.

    ``options`` are the target's resolved options plus the shared options as the user gave
    them (``cortex.core.pipeline.SHARED_OPTIONS``), which are validated here, before any
    work. This is the single hand-off point from target resolution to the pipeline
    (``cortex.core.pipeline.build``).
    """
    from cortex.core.pipeline import build, compile_options, split_options

    shared, own = split_options(options)
    return build(model, target, own, compile_options(target.name, shared))
