"""The front door: ``cortex.compile(model, target="llvm", **options)``.

Pipeline position: the entry of the whole pipeline. :func:`compile` resolves the target first
(:func:`resolve_target`) — unknown name, target not enabled here, bad option: each a clear error
before any work — and then hands the model, the target and the validated options to
:func:`run_pipeline`, the single hand-off point to trace → graph passes → lower → schedule →
codegen → runtime.

Plugins are loaded here on first use, not when ``cortex`` is imported.
"""

from __future__ import annotations

from typing import Any

from cortex.core.errors import NotYetImplementedError, TargetNotEnabledError
from cortex.core.targets import Target


def resolve_target(target: str, options: dict[str, Any] | None = None) -> tuple[Target, dict[str, Any]]:
    """The registered :class:`Target` for a name or alias, and its validated options.

    Raises, in this order: :class:`~cortex.core.errors.UnknownTargetError` (lists the known
    names and aliases), :class:`~cortex.core.errors.TargetNotEnabledError` (the reason and the
    fix), :class:`~cortex.core.errors.InvalidOptionError` (the option, the value, what is
    allowed). A target that is enabled but not runnable resolves: compiling without running
    is allowed (the conformance suite's compile-only mode).
    """
    from cortex.core.plugins import get_registry

    resolved = get_registry().get(target)
    enabled = resolved.enabled()
    if not enabled:
        raise TargetNotEnabledError(resolved.name, enabled.reason, enabled.fix)
    return resolved, resolved.resolve_options(options or {})


def compile(model: Any, target: str = "llvm", **options: Any) -> Any:  # noqa: A001 (API name)
    """Compile ``model`` for ``target`` (a name or alias, e.g. ``"llvm"``/``"cpu"``,
    ``"opencl"``, ``"cuda"``, ``"numpy"``, or a plugin's target) with the target's ``options``.

    Returns the executable the pipeline builds. Run ``cortex info`` to list the targets, their
    options and whether they are enabled here.
    """
    resolved, resolved_options = resolve_target(target, options)
    return run_pipeline(model, resolved, resolved_options)


class PipelineNotAvailableError(NotYetImplementedError):
    """Raised by :func:`run_pipeline` until the compilation pipeline exists."""


def run_pipeline(model: Any, target: Target, options: dict[str, Any]) -> Any:
    """Trace ``model``, run the graph passes, lower, schedule, generate code with the
    ``target``'s backend (``target.create_backend(options)``) and return the executable.

    This is the single hand-off point from target resolution to the pipeline; the pipeline
    issues replace this function's body.
    """
    raise PipelineNotAvailableError(
        f"target {target.name!r} resolved with options {options}, but code generation for target "
        f"{target.name!r} arrives with the pipeline issues (trace, lower, schedule) and the "
        f"{target.name!r} backend issue; cortex.compile cannot build an executable yet"
    )
