"""The ``numpy`` target's description: options, availability, backend factory.

Always enabled and runnable: it needs only NumPy, a core dependency, and the host. It has no
options of its own; the compile options every target accepts (``dtype``, ``schedule``,
``dump``, ``passes``) are handled by the core (``cortex.core.pipeline.CompileOptions``).
"""

from __future__ import annotations

from typing import Any, Mapping

from cortex.core.plugin.backend import Backend
from cortex.core.plugin.targets import Availability, Target, TargetOption

OPTIONS: tuple[TargetOption, ...] = ()


def enabled() -> Availability:
    return Availability.yes("needs only NumPy, a core dependency")


def runnable() -> Availability:
    return Availability.yes("runs on the host")


def create_backend(options: Mapping[str, Any]) -> Backend:
    from cortex.plugins.numpy_ref.backend import create_backend as create

    return create(options)


def make_target() -> Target:
    return Target(
        name="numpy",
        description="reference: the LoopProgram interpreter in NumPy (debugging, oracle)",
        backend=create_backend,
        options=OPTIONS,
        enabled=enabled,
        runnable=runnable,
    )
