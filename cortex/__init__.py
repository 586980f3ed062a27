"""Cortex: a compiler for recursive deep-learning models (trees, DAGs, sequences).

``import cortex`` is cheap: it loads no plugin and no backend library (llvmlite, pyopencl,
pycuda). Plugins are loaded on first use — ``cortex.compile`` or ``cortex info``.

Public API:

* :func:`compile` — ``cortex.compile(model, target="llvm", **options)``
* :func:`compile_only` — the same stages up to the target's compiler, without a device
* :func:`trace` — ``cortex.trace(model)`` gives the model's RecursiveGraph
* :func:`load` — ``cortex.load(path)`` reads what ``exe.save(path)`` or ``model.save(path)``
  wrote (``cortex.core.persist``)
* :class:`DiskCache` — the on-disk artifact cache, for plugins (``cortex.core.diskcache``)
* :func:`tune` — ``cortex.tune(model, target, workload=..., budget=...)`` searches the schedule
  space and stores the winner as a tuning record, which ``cortex.compile`` then uses
  (``cortex.tuning``, ``docs/tuning.md``)
* :data:`hookimpl` — the marker for plugin hook implementations (see ``docs/plugins.md``)
* :class:`Target`, :class:`TargetOption`, :class:`Availability` — what a plugin registers
* :class:`Backend`, :class:`Renderer`, :class:`Compiler`, :class:`Runtime` — the backend contract
  (:class:`HostRuntime`: the runtime of backends whose buffers are host NumPy arrays)
* :class:`Capabilities` — what a target's device can do
* :class:`Schedule`, :class:`ScheduleSpace`, :class:`ScheduleError` — the schedule knobs a
  compile takes (``schedule=``) and their legal values for a target
* the error classes, all derived from :class:`CortexError`
"""

from cortex.core.api import compile, compile_only, resolve_target
from cortex.core.errors import (
    CortexError,
    InvalidOptionError,
    NonFiniteInputError,
    NotYetImplementedError,
    PluginError,
    PluginWarning,
    TargetNotEnabledError,
    TargetNotRunnableError,
    UnknownTargetError,
)
from cortex.core.plugin.capabilities import Capabilities
from cortex.core.plugin.targets import Availability, Target, TargetOption

__version__ = "0.1.0"

_LAZY = {
    "hookimpl": "cortex.core.plugin.hookspecs",
    "Backend": "cortex.core.plugin.backend",
    "Renderer": "cortex.core.plugin.backend",
    "Compiler": "cortex.core.plugin.backend",
    "Runtime": "cortex.core.plugin.backend",
    "HostRuntime": "cortex.core.plugin.backend",
    "trace": "cortex.core.frontend.trace",
    "tune": "cortex.tuning.tuner",
    "Schedule": "cortex.core.lowering.schedule",
    "ScheduleSpace": "cortex.core.lowering.schedule",
    "ScheduleError": "cortex.core.lowering.schedule",
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
    "NonFiniteInputError",
    "NotYetImplementedError",
    "PluginError",
    "PluginWarning",
    "Renderer",
    "Runtime",
    "Schedule",
    "ScheduleError",
    "ScheduleSpace",
    "Target",
    "TargetNotEnabledError",
    "TargetNotRunnableError",
    "TargetOption",
    "UnknownTargetError",
    "compile",
    "compile_only",
    "hookimpl",
    "load",
    "resolve_target",
    "trace",
    "tune",
]
