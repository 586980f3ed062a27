"""Every error a built-in backend raises on purpose is a CortexError, so one ``except
cortex.CortexError`` catches what Cortex reports (and bad arguments are also ValueErrors)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import cortex.plugins
from cortex.core.errors import CortexError


def _plugin_modules():
    for info in pkgutil.walk_packages(cortex.plugins.__path__, "cortex.plugins."):
        try:
            yield importlib.import_module(info.name)
        except ImportError:  # a backend library that is not installed here (e.g. pycuda)
            continue


def test_every_error_class_of_the_builtin_backends_is_a_cortex_error():
    found = []
    for module in _plugin_modules():
        for name, cls in vars(module).items():
            if (inspect.isclass(cls) and issubclass(cls, Exception) and not issubclass(cls, Warning)
                    and cls.__module__ == module.__name__ and not name.startswith("_")):  # private: never escapes
                found.append(cls)
                assert issubclass(cls, CortexError), f"{module.__name__}.{name} is not a CortexError"
    assert len(found) >= 5


def test_a_buffer_that_does_not_fit_an_llvm_program_is_an_invalid_argument():
    runtime = pytest.importorskip("cortex.plugins.cpu_llvm.runtime", reason="llvmlite is not installed")
    from cortex.core.errors import InvalidArgumentError

    assert issubclass(runtime.LLVMRuntimeError, InvalidArgumentError)
    assert issubclass(runtime.LLVMRuntimeError, ValueError)
