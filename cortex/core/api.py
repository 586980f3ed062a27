"""The front door: ``cortex.compile(model, target="llvm", **options)``.

Pipeline position: the entry of the whole pipeline. :func:`compile` resolves the target first
(:func:`resolve_target`) — unknown name, target not enabled here, bad option: each a clear error
before any work — and then hands the model, the target and the validated options to
:func:`run_pipeline`, the single hand-off point to trace → graph passes → lower → schedule →
codegen → runtime.

Compile options: every target accepts the shared options ``dtype`` (``"float32"`` or
``"float64"``; default: the model's), ``schedule`` (``"auto"``, the default: the matching
tuning record's schedule, else the target's default; ``"default"``; a ``Schedule``, a dict of
knobs over the target's default, or its JSON), ``workload`` (the workload class whose tuning
record ``"auto"`` prefers), ``dump`` (a directory: every stage's IR and the rendered source are
written there) and ``passes`` (the graph passes to run; default ``DEFAULT_PASSES``) — see
``cortex.core.pipeline``. Every other option is the target's own (``cortex info`` lists them).

Plugins are loaded here on first use, not when ``cortex`` is imported.
"""

from __future__ import annotations

from typing import Any

from cortex.core.errors import NotYetImplementedError, TargetNotEnabledError
from cortex.core.plugin.targets import Target


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


def compile(model: Any, target: str = "llvm", **options: Any) -> Any:  # noqa: A001 (API name)
    """Compile ``model`` for ``target`` (a name or alias, e.g. ``"llvm"``/``"cpu"``,
    ``"opencl"``, ``"cuda"``, ``"numpy"``, or a plugin's target) with the shared options
    (``dtype``, ``schedule``, ``dump``, ``passes``) and the target's own ``options``.

    Returns a :class:`~cortex.core.runtime.executable.Executable`: ``exe(structures)`` gives
    :class:`~cortex.core.runtime.outputs.Outputs`. Run ``cortex info`` to list the targets, their
    options and whether they are enabled here. Errors about options come before any work:
    :class:`~cortex.core.errors.InvalidOptionError` names the option and what is allowed.
    """
    from cortex.core.pipeline import split_options

    shared, own = split_options(options)
    resolved, resolved_options = resolve_target(target, own)
    return run_pipeline(model, resolved, {**resolved_options, **shared})


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
