"""cortex-cc: the ``cc`` target — plain C rendered by Cortex, compiled by the system C compiler.

An out-of-tree Cortex plugin written against the documented plugin API only (``docs/plugins.md``:
``cortex.hookimpl``, ``cortex.Target``, ``cortex.TargetOption``, ``cortex.Availability``,
``cortex.Backend`` and its stages; ``docs/loopir.md``: the core's C renderer). Installing the
package registers it through the ``cortex.plugins`` entry point; ``cortex info`` then lists the
target and ``cortex.compile(model, target="cc")`` uses it.
"""

from __future__ import annotations

import shutil
from typing import Any, Mapping

from cortex import Availability, Target, TargetOption, hookimpl

__version__ = "0.1.0"

OPTIONS = (
    TargetOption("cc", str, "cc", "the C compiler to run (a name on PATH or a path)"),
    TargetOption("opt_level", int, 2, "the compiler's -O level", choices=(0, 1, 2, 3)),
    TargetOption("openmp", bool, False, "compile with -fopenmp: parallel loops use every core"),
)


def enabled() -> Availability:
    path = shutil.which("cc")
    if path is None:
        return Availability.no("no C compiler: 'cc' is not on PATH",
                               "install a C compiler (gcc or clang), e.g. apt-get install gcc")
    return Availability.yes(f"C compiler at {path}")


def make_backend(options: Mapping[str, Any]) -> Any:
    from cortex_cc.backend import create_backend

    return create_backend(options)


@hookimpl
def cortex_register_targets(registry: Any) -> None:
    registry.add(Target(
        name="cc",
        description="plain C from the core renderer, built by the system C compiler (ctypes)",
        backend=make_backend,
        options=OPTIONS,
        enabled=enabled,
        runnable=lambda: Availability.yes("runs on the host"),
    ))


@hookimpl
def cortex_environment_info() -> dict[str, str] | None:
    from cortex_cc.backend import compiler_version

    return {"cc": compiler_version("cc")}
