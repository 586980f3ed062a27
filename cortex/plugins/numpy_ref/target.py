"""The ``numpy`` target's description: options, availability, backend factory.

Always enabled and runnable: it needs only NumPy, a core dependency, and the host.
"""

from __future__ import annotations

from typing import Any, Mapping

from cortex.core.backend import Backend
from cortex.core.errors import NotYetImplementedError
from cortex.core.targets import Availability, Target, TargetOption

OPTIONS = (
    TargetOption("dtype", str, "float32", "floating-point type the interpreter computes in",
                 choices=("float32", "float64")),
)


def enabled() -> Availability:
    return Availability.yes("needs only NumPy, a core dependency")


def runnable() -> Availability:
    return Availability.yes("runs on the host")


def create_backend(options: Mapping[str, Any]) -> Backend:
    raise NotYetImplementedError(
        "the LoopProgram interpreter behind target 'numpy' arrives with its own issue "
        "(cortex/plugins/numpy_ref); the target is registered so it can be listed and resolved"
    )


def make_target() -> Target:
    return Target(
        name="numpy",
        description="reference: the LoopProgram interpreter in NumPy (debugging, oracle)",
        backend=create_backend,
        options=OPTIONS,
        enabled=enabled,
        runnable=runnable,
    )
