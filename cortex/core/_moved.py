"""Old import paths of modules that moved into the core's stage subpackages.

Pipeline position: none; compatibility only. Until the core was laid out by pipeline stage its
modules sat in one folder (``cortex.core.loopir_verify``, ``cortex.core.backend``, ...).
Third-party plugins and notebooks written against those paths keep working: importing an old
name gives the module at its new place (the same module object) with a
``DeprecationWarning`` that names the new path. New code imports the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: old module name -> new module name
MOVED: dict[str, str] = {
    "cortex.core." + old: "cortex.core." + new
    for old, new in {
        "model": "frontend.model",
        "model_errors": "frontend.model_errors",
        "trace": "frontend.trace",
        "graph": "frontend.graph",
        "params": "frontend.params",
        "reference": "frontend.reference",
        "loopir_print": "loopir.printer",
        "loopir_verify": "loopir.verify",
        "interpret": "loopir.interpret",
        "lower": "lowering.lower",
        "lower_case": "lowering.cases",
        "lower_schedule": "lowering.apply_schedule",
        "schedule": "lowering.schedule",
        "loop_transforms": "lowering.transforms",
        "jam": "lowering.jam",
        "render_c": "render.c_family",
        "dialects": "render.dialects",
        "executable": "runtime.executable",
        "outputs": "runtime.outputs",
        "hostmem": "runtime.hostmem",
        "token_tables": "runtime.token_tables",
        "plugins": "plugin.loader",
        "hookspecs": "plugin.hookspecs",
        "targets": "plugin.targets",
        "backend": "plugin.backend",
        "capabilities": "plugin.capabilities",
        "hostinfo": "plugin.hostinfo",
        "structure": "linearize.structure",
    }.items()
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name and loads it as the module at its new place."""

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: D102
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec) -> ModuleType:  # noqa: D102
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning,
                      stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets __spec__ next: undone below
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module already ran at its new place; give it back its own spec."""
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Make the old names importable (once per process)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
