"""Stage products kept on disk, so a second process skips lowering and rendering.

Pipeline position: the ``lower`` and ``render`` stages (``cortex.core.pipeline``). Both are
pure functions of their inputs, and they are most of a warm compile once the machine code is
cached (TreeLSTM h256: passes and lowering about 0.1 s; LLVM IR about 0.5 s; OpenCL C with its
jam and single-group transforms about 1 s). Two namespaces of :mod:`cortex.core.diskcache`:

* ``lowered``: the graph after the passes and the scheduled :class:`~cortex.core.lowering.lower.Lowered`
  program, keyed by the traced graph (its ``repr``: every field), the passes (by import name;
  a pass without one, such as a lambda, is not cached), the table limit, the schedule, the
  target's capabilities, the dtype, the code of ``cortex`` and the ``UPPER_CASE`` constants,
  as they are now, of the modules the lowering's code reaches (:data:`LOWERING_ROOTS`);
* ``sources``: a renderer's source, when its class sets ``cache_sources = True`` (the built-in
  ``llvm``, ``opencl`` and ``cuda`` ones), keyed by the code of ``cortex`` and of the
  renderer's package, the constants of the renderer's modules (:func:`knob_modules`: e.g. the
  LLVM generator's ``LANE_REDUCE``), the renderer's attributes (by ``repr``; a renderer whose
  attributes have no value ``repr`` is not cached) and the scheduled program.

Values are pickled and read back with an unpickler that accepts only builtin containers and
Cortex's own IR dataclasses and source types; anything else is a miss, and the stage runs.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
from typing import Any, Mapping, Sequence

from cortex.core import diskcache
from cortex.core.plugin.backend import Renderer, Source

NAMESPACE = "sources"
REVISION = "cortex-render-cache 1"
LOWERED = "lowered"
LOWERED_REVISION = "cortex-lowered 1"
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


def knob_modules(renderer_module: str) -> tuple[str, ...]:
    """The modules whose constants a renderer's output may depend on: the closure
    (:func:`module_closure`) of the renderer's module within ``cortex`` and the renderer's own
    package (for the ``opencl`` renderer: its ``forms``, the core's ``render_c``, ``jam``...)."""
    packages = tuple(sorted({"cortex", renderer_module.split(".")[0]}))
    return module_closure((renderer_module,), packages)


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


class _StageUnpickler(pickle.Unpickler):
    """Loads only builtin containers and Cortex's IR: dataclasses, IR nodes and source types
    (``str`` subclasses) defined in ``cortex``."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _BUILTINS:  # copyreg: how a str subclass pickles
            return super().find_class(module, name)
        if module == "copyreg" and name == "_reconstructor":
            return super().find_class(module, name)
        if module == "cortex" or module.startswith("cortex."):
            from cortex.core.loopir import Node
            from cortex.core.loopir.nodes import _let_chain

            found = super().find_class(module, name)
            if isinstance(found, type) and (issubclass(found, (Node, str)) or dataclasses.is_dataclass(found)):
                return found
            if found is _let_chain:  # how a chain of lets pickles (loopir.nodes.Let.__reduce__)
                return found
        raise pickle.UnpicklingError(f"a cached stage may not hold {module}.{name}")


def _load(data: bytes) -> Any:
    return _StageUnpickler(io.BytesIO(data)).load()


# ---- lowering ----------------------------------------------------------------------------------


#: Where the lowering's code starts: the closure of these (:func:`module_closure`) is what a
#: lowering depends on.
LOWERING_ROOTS = ("cortex.core.pipeline", "cortex.core.frontend.trace", "cortex.core.passes.pipeline",
                  "cortex.core.lowering.lower", "cortex.core.lowering.schedule")


def module_closure(roots: Sequence[str], packages: Sequence[str] = ("cortex",)) -> tuple[str, ...]:
    """``roots`` and every module of ``packages`` they reach through their globals (a module,
    or a function or class defined in one), recursively: a set fixed by the code, whatever
    else a process has imported, and made only of modules that process needs anyway."""
    import importlib
    import types

    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - e.g. a driver module without its library
            seen.add(name)
            continue
        seen.add(name)
        for value in list(vars(module).values()):
            ref = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            if isinstance(ref, str) and ref.split(".")[0] in packages and ref not in seen:
                todo.append(ref)
    return tuple(sorted(seen))


def lowered_key(traced: Any, passes: Sequence[Any], table_elements: int | None, schedule: Any,
                capabilities: Any, dtype: str, provenance: Mapping[str, str] | None = None) -> str | None:
    """The key of the lowering of ``traced``; None when a pass has no import name. The knobs'
    ``provenance`` is part of it: the lowering's notes say where each value came from."""
    names = []
    for p in passes:
        qualname = getattr(p, "__qualname__", "<none>")
        if "<" in qualname:  # a lambda or a function defined in a function
            return None
        names.append(f"{getattr(p, '__module__', '?')}.{qualname}")
    return diskcache.digest(LOWERED_REVISION, diskcache.package_fingerprint("cortex"),
                            knob_fingerprint(module_closure(LOWERING_ROOTS)), repr(traced), "\n".join(names),
                            repr(table_elements), repr(schedule), repr(capabilities), dtype,
                            repr(sorted((provenance or {}).items())))


def load_lowered(key: str | None) -> Any:
    """The cached :class:`~cortex.core.lowering.lower.Lowered` for ``key`` (None on a miss)."""
    from cortex.core.lowering.lower import Lowered

    data = diskcache.DiskCache(LOWERED).get(key) if key is not None else None
    if data is None:
        return None
    try:
        found = _load(data)
    except Exception:  # noqa: BLE001 - an unreadable entry is a miss
        return None
    return found if isinstance(found, Lowered) else None


def store_lowered(key: str | None, lowered: Any) -> None:
    if key is not None:  # its fields only: nothing a call has worked out and stored on it
        diskcache.DiskCache(LOWERED).put(key, pickle.dumps(dataclasses.replace(lowered),
                                                           protocol=pickle.HIGHEST_PROTOCOL))


# ---- rendering ---------------------------------------------------------------------------------


def dumps(source: Source) -> bytes:
    """``source`` as bytes: its class, its text and its attributes (what a renderer attaches),
    so a ``str`` subclass whose constructor takes more than the text round-trips too."""
    base = str if isinstance(source, str) else bytes
    return pickle.dumps((type(source), base(source), dict(getattr(source, "__dict__", {}))),
                        protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Source:
    """The source :func:`dumps` wrote (only Cortex's IR and source types are accepted)."""
    cls, text, attrs = _load(data)
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
