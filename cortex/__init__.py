"""Cortex: a compiler for recursive deep-learning models (trees, DAGs, sequences).

``import cortex`` is cheap: it loads no plugin and no backend library (llvmlite, pyopencl,
pycuda). Plugins are loaded on first use — ``cortex.compile`` or ``cortex info``.

Public API:

* :func:`compile` — ``cortex.compile(model, target="llvm", **options)``
* :func:`trace` — ``cortex.trace(model)`` gives the model's RecursiveGraph
* :func:`load` — ``cortex.load(path)`` reads what ``exe.save(path)`` or ``model.save(path)``
  wrote (``cortex.core.persist``)
* :class:`DiskCache` — the on-disk artifact cache, for plugins (``cortex.core.diskcache``)
* :data:`hookimpl` — the marker for plugin hook implementations (see ``docs/plugins.md``)
* :class:`Target`, :class:`TargetOption`, :class:`Availability` — what a plugin registers
* :class:`Backend`, :class:`Renderer`, :class:`Compiler`, :class:`Runtime` — the backend contract
  (:class:`HostRuntime`: the runtime of backends whose buffers are host NumPy arrays)
* :class:`Capabilities` — what a target's device can do
* the error classes, all derived from :class:`CortexError`
"""

from cortex.core.api import compile, resolve_target
from cortex.core.capabilities import Capabilities
from cortex.core.errors import (
    CortexError,
    InvalidOptionError,
    NotYetImplementedError,
    PluginError,
    PluginWarning,
    TargetNotEnabledError,
    TargetNotRunnableError,
    UnknownTargetError,
)
from cortex.core.targets import Availability, Target, TargetOption

__version__ = "0.1.0"

_LAZY = {
    "hookimpl": "cortex.core.hookspecs",
    "Backend": "cortex.core.backend",
    "Renderer": "cortex.core.backend",
    "Compiler": "cortex.core.backend",
    "Runtime": "cortex.core.backend",
    "HostRuntime": "cortex.core.backend",
    "trace": "cortex.core.trace",
    "load": "cortex.core.persist",
    "DiskCache": "cortex.core.diskcache",
}


def __getattr__(name: str):
    # pluggy and the backend base classes load on first access, keeping `import cortex` cheap.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cortex' has no attribute {name!r}")


__all__ = [
    "Availability",
    "Backend",
    "Capabilities",
    "Compiler",
    "DiskCache",
    "CortexError",
    "HostRuntime",
    "InvalidOptionError",
    "NotYetImplementedError",
    "PluginError",
    "PluginWarning",
    "Renderer",
    "Runtime",
    "Target",
    "TargetNotEnabledError",
    "TargetNotRunnableError",
    "TargetOption",
    "UnknownTargetError",
    "compile",
    "hookimpl",
    "load",
    "resolve_target",
    "trace",
]
