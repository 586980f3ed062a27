"""Rendered sources kept on disk, so a second process skips the renderer.

Pipeline position: the ``render`` stage (``cortex.core.pipeline``). Rendering a scheduled
LoopProgram is most of a warm compile (LLVM IR for a TreeLSTM h256: about 0.5 s; OpenCL C with
its jam and single-group transforms: about 1 s), and it is a pure function of the program and
the renderer's settings. A renderer whose class sets ``cache_sources = True`` (the built-in
``llvm``, ``opencl`` and ``cuda`` ones) gets its sources stored in the ``sources`` namespace of
:mod:`cortex.core.diskcache`, keyed by

* the code that renders (:func:`~cortex.core.diskcache.package_fingerprint` of ``cortex`` and
  of the renderer's own package) and the module-level constants of that code as they are now
  (:func:`knob_fingerprint` of :func:`knob_modules`: the ``UPPER_CASE`` settings a test or a
  user may change, such as the LLVM generator's prefetch distance),
* the renderer's class and settings (its instance attributes, by ``repr``; a renderer whose
  settings have no stable ``repr`` is not cached),
* the scheduled program (its ``repr``: every field of every node).

A source is stored pickled (its class, its text and what the renderer attaches: the program the
runtime needs), and read back with an unpickler that accepts only builtin containers and Cortex's own
IR nodes and source types; anything else is a miss, and the source is rendered again.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from cortex.core import diskcache
from cortex.core.backend import Renderer, Source

NAMESPACE = "sources"
REVISION = "cortex-render-cache 1"
_BUILTINS = frozenset({"str", "bytes", "tuple", "list", "dict", "set", "frozenset", "int", "float",
                       "bool", "complex", "object", "NoneType"})


def _plain(value: Any) -> str | None:
    """A stable text of a simple constant (None for anything else)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        items = [_plain(v) for v in value]
        return None if None in items else "(" + ",".join(items) + ")"  # type: ignore[arg-type]
    if isinstance(value, (set, frozenset)):
        items = [_plain(v) for v in value]
        return None if None in items else "{" + ",".join(sorted(items)) + "}"  # type: ignore[arg-type]
    return None


#: Core modules a renderer's output depends on besides its own package (the C-family renderer,
#: its dialect tables, the loop transforms renderers apply).
RENDER_MODULES = ("cortex.core.loopir", "cortex.core.render_c", "cortex.core.dialects",
                  "cortex.core.jam", "cortex.core.loop_transforms")


def knob_modules(renderer_module: str) -> tuple[str, ...]:
    """The modules whose constants a renderer's output may depend on: the renderer's module,
    the modules of its package that it imports (``codegen`` for the ``llvm`` renderer, ``forms``
    for the ``opencl`` one), and :data:`RENDER_MODULES`. Found from the module's own globals, so
    always the same set, whatever else a process has imported."""
    import importlib
    import types

    module = importlib.import_module(renderer_module)
    top = renderer_module.split(".")[0]
    names = set(RENDER_MODULES) | {renderer_module}
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and name.split(".")[0] in (top, "cortex"):
            names.add(name)
    return tuple(sorted(names))


def knob_fingerprint(modules: tuple[str, ...]) -> str:
    """The ``UPPER_CASE`` simple constants of ``modules`` as they are now (a monkeypatched or
    edited knob changes it; a module that cannot be imported counts as absent)."""
    import importlib

    parts = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - e.g. a driver module without its library
            parts.append(f"{name}: absent")
            continue
        for attr, value in sorted(vars(module).items()):
            if attr.isupper() and not attr.startswith("_"):
                text = _plain(value)
                if text is not None:
                    parts.append(f"{name}.{attr}={text}")
    return diskcache.digest("\n".join(parts))


def render_key(renderer: Renderer, program: Any) -> str | None:
    """The key of ``renderer``'s source for ``program``; None when it cannot be keyed."""
    settings = repr(sorted(vars(renderer).items()))
    if " at 0x" in settings:  # an object without a value repr: its settings are not known
        return None
    cls = type(renderer)
    package = cls.__module__.split(".")[0]
    packages = ("cortex",) if package == "cortex" else ("cortex", package)
    code = "".join(diskcache.package_fingerprint(p) for p in packages)
    return diskcache.digest(REVISION, code, knob_fingerprint(knob_modules(cls.__module__)),
                            f"{cls.__module__}.{cls.__qualname__}", settings, repr(program))


class _SourceUnpickler(pickle.Unpickler):
    """Loads only builtin containers and Cortex IR nodes / source types (str subclasses)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _BUILTINS:  # copyreg: how a str subclass pickles
            return super().find_class(module, name)
        if module == "copyreg" and name == "_reconstructor":
            return super().find_class(module, name)
        if module == "cortex" or module.startswith("cortex."):
            from cortex.core.loopir import Node

            found = super().find_class(module, name)
            if isinstance(found, type) and issubclass(found, (Node, str)):
                return found
        raise pickle.UnpicklingError(f"a cached source may not hold {module}.{name}")


def dumps(source: Source) -> bytes:
    """``source`` as bytes: its class, its text and its attributes (what a renderer attaches),
    so a ``str`` subclass whose constructor takes more than the text round-trips too."""
    base = str if isinstance(source, str) else bytes
    return pickle.dumps((type(source), base(source), dict(getattr(source, "__dict__", {}))),
                        protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Source:
    """The source :func:`dumps` wrote (only Cortex's IR and source types are accepted)."""
    cls, text, attrs = _SourceUnpickler(io.BytesIO(data)).load()
    if not (isinstance(cls, type) and issubclass(cls, (str, bytes)) and isinstance(text, (str, bytes))):
        raise pickle.UnpicklingError("not a cached source")
    source = (str if isinstance(text, str) else bytes).__new__(cls, text)
    if attrs:
        source.__dict__.update(attrs)
    return source


def render(renderer: Renderer, program: Any) -> tuple[Source, bool]:
    """``(source, found in the cache)``: ``renderer.render(program)``, or the cached source."""
    if not getattr(renderer, "cache_sources", False):
        return renderer.render(program), False
    key = render_key(renderer, program)
    if key is None:
        return renderer.render(program), False
    cache = diskcache.DiskCache(NAMESPACE)
    data = cache.get(key)
    if data is not None:
        try:
            return loads(data), True
        except Exception:  # noqa: BLE001 - an unreadable entry is a miss
            pass
    source = renderer.render(program)
    try:
        data = dumps(source)
    except Exception:  # noqa: BLE001 - a source that cannot be pickled is not cached
        return source, False
    cache.put(key, data)
    return source, False
