"""Saving, loading and pickling executables and models.

Pipeline position: around the whole pipeline. An executable is saved as its *recipe* — what
``cortex.compile`` was given — plus the compiled artifacts the compile read from or wrote to
the disk cache (:mod:`cortex.core.diskcache`); loading runs ``cortex.compile`` again with
those artifacts offered to the caches (:func:`~cortex.core.diskcache.preloaded`). Keys name
everything an artifact depends on (the code, the program, the CPU name and features, the
device and driver, the tool versions), so on another machine, another device or another
Cortex the keys differ, the saved artifacts are not used, and the model is compiled again from
the recipe: foreign machine code is never run. Loading therefore costs a warm compile (tracing,
passes, lowering; no rendering and no code generation when the artifacts fit).

A saved executable is a zip file::

    manifest.json      format, format_version, cortex_version, kind ("executable"),
                       target, target_options, options (dtype, schedule, passes,
                       max_table_mib, check_finite, weights: as given to cortex.compile), dtype and schedule (as
                       compiled), model (class import path, settings, name), entries
    params.npz         the params the executable was compiled with (or last updated with)
    entries/<ns>/<key> the cache entries of the compile (rendered source, machine code...)

A saved model (``Model.save``) is the same without ``target``/``options``/``entries``
(``kind: "model"``). Pickling an executable (``pickle``, ``multiprocessing``) carries the same
recipe, params and entries (:func:`reduce_executable`), so a worker process rebuilds it from
them in the time of a warm compile.

Trust: ``params.npz`` is read with ``allow_pickle=False``; the model class is imported by its
path and must be a :class:`~cortex.core.frontend.model.Model` subclass; cached sources are read with a
restricted unpickler (:mod:`cortex.core.stage_cache`). The saved machine code is run when its
key matches this machine, like a shared library: load files you trust, or pass
``artifacts=False`` to compile from the recipe alone.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from cortex.core import diskcache

if TYPE_CHECKING:
    from cortex.core.runtime.executable import Executable
    from cortex.core.frontend.model import Model
    from cortex.core.pipeline import CompileOptions

FORMAT = "cortex"
#: The version of the file layout this Cortex writes and the newest it reads.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PARAMS = "params.npz"


class PersistError(ValueError):
    """A model or executable cannot be saved, or a file cannot be loaded (the message says
    why and what to do)."""


# ---- recipes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """What ``cortex.compile`` was given, in a form that can be saved: the model's class and
    settings, the target, its options and the shared options as the user gave them.
    ``problem`` says why it cannot be saved (None when it can)."""

    model_class: str
    model_settings: Mapping[str, Any]
    model_name: str
    target: str
    target_options: Mapping[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)  # dtype, schedule, passes, max_table_mib, check_finite, weights
    problem: str | None = None

    def compile_options(self) -> dict[str, Any]:
        return {**self.target_options, **{k: v for k, v in self.options.items() if v is not None}}


def class_path(cls: type) -> str:
    """``module:qualname`` of a class (or function) importable by that name."""
    return f"{cls.__module__}:{cls.__qualname__}"


def import_path(path: str, what: str) -> Any:
    """The object at ``module:qualname`` (a PersistError naming ``what`` when it is not there)."""
    module, _, qualname = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as e:
        raise PersistError(f"the {what} {path!r} cannot be imported here ({e}); install the "
                           f"package that defines it, or make it importable") from None
    return obj


def _importable_problem(obj: Any, what: str) -> str | None:
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if module in (None, "__main__") or "<locals>" in qualname or "<lambda>" in qualname:
        return (f"its {what} {qualname or obj!r} is defined in {module or 'no module'} "
                f"(in a script or a function), so another process cannot import it by name; "
                f"define it at the top level of an importable module")
    return None


def jsonable(value: Any, where: str) -> Any:
    """``value`` as JSON data (tuples become lists, NumPy dtypes and scalar types their names);
    a PersistError naming ``where`` for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    raise PersistError(f"{where} is a {type(value).__name__}, which a saved file cannot hold "
                       f"(JSON data, NumPy dtypes); construct the model with plain values")


def model_recipe(model: "Model") -> tuple[str, dict[str, Any], str | None]:
    """``(class path, settings, problem)`` of ``model``; ``problem`` is why it cannot be saved."""
    cls = type(model)
    try:
        settings = model.settings()
    except TypeError as e:
        return class_path(cls), {}, str(e)
    return class_path(cls), settings, _importable_problem(cls, "class")


def recipe_of(model: "Model", target: str, target_options: Mapping[str, Any],
              options: "CompileOptions") -> Recipe:
    """The recipe of ``cortex.compile(model, target, **target_options, **options)``."""
    from cortex.core.passes.pipeline import ALL_PASSES
    from cortex.core.lowering.schedule import Schedule

    cls, settings, problem = model_recipe(model)
    schedule = options.schedule
    if isinstance(schedule, Schedule):
        schedule = schedule.to_dict()
    passes = None
    if options.passes is not None:
        names = {id(f): n for n, f in ALL_PASSES.items()}
        passes = []
        for p in options.passes:
            if id(p) in names:
                passes.append(names[id(p)])
            else:
                problem = problem or _importable_problem(p, "graph pass")
                passes.append(class_path(p) if hasattr(p, "__qualname__") else repr(p))
    shared = {"dtype": options.dtype, "schedule": schedule, "passes": passes,
              "max_table_mib": options.max_table_mib, "check_finite": options.check_finite or None,
              "weights": options.weights}
    return Recipe(cls, settings, model.name, target, dict(target_options), shared, problem)


def _passes(names: list[str] | None) -> list[Any] | None:
    """Graph passes from their saved names: ALL_PASSES names, or ``module:qualname``."""
    if names is None:
        return None
    from cortex.core.passes.pipeline import ALL_PASSES

    out = []
    for n in names:
        if n in ALL_PASSES:
            out.append(n)
            continue
        fn = import_path(n, "graph pass")
        if not callable(fn):
            raise PersistError(f"the graph pass {n!r} is not a function")
        out.append(fn)
    return out


def make_model(class_name: str, settings: Mapping[str, Any], params: Mapping[str, np.ndarray],
               expected: type | None = None) -> "Model":
    """``class_name(**settings)`` (a Model subclass, checked before it is called) with
    ``params`` loaded (names and shapes must match)."""
    from cortex.core.frontend.model import Model
    from cortex.core.frontend.params import _check_and_cast

    cls = import_path(class_name, "model class")
    if not (isinstance(cls, type) and issubclass(cls, Model)):
        raise PersistError(f"{class_name!r} is not a cortex Model class")
    if expected is not None and expected is not Model and not issubclass(cls, expected):
        raise PersistError(f"the file holds a {cls.__name__}, not a {expected.__name__}")
    try:
        model = cls(**settings)
    except TypeError as e:
        raise PersistError(f"{cls.__name__}(**{dict(settings)}) failed ({e}): the class changed "
                           f"since the file was written") from None
    model.params.update(_check_and_cast(model, params, source="the saved params", strict_dtype=False))
    return model


def rebuild(recipe: Recipe, params: Mapping[str, np.ndarray],
            entries: Mapping[tuple[str, str], bytes] = {}) -> "Executable":
    """The executable of ``recipe`` with ``params``, compiled with ``entries`` offered to the
    disk caches (used when their keys match this machine, ignored otherwise)."""
    from cortex.core.api import compile as compile_model

    model = make_model(recipe.model_class, recipe.model_settings, params)
    options = recipe.compile_options()
    if "passes" in options:
        options["passes"] = _passes(options["passes"])
    with diskcache.preloaded(entries):
        return compile_model(model, target=recipe.target, **options)


# ---- pickling -------------------------------------------------------------------------------


def reduce_executable(exe: "Executable") -> tuple[Any, tuple[Any, ...]]:
    """``Executable.__reduce__``: rebuilt by :func:`rebuild` from its recipe, params and cache
    entries in the receiving process."""
    recipe = _saveable(exe, "pickle")
    entries = {(e.namespace, e.key): e.data for e in exe.cache_entries}
    return rebuild, (recipe, dict(exe.params_snapshot), entries)


def _saveable(exe: "Executable", verb: str) -> Recipe:
    recipe = exe.recipe
    if recipe is None:
        raise PersistError(f"cannot {verb} this executable: it was not made by cortex.compile")
    if recipe.problem:
        raise PersistError(f"cannot {verb} this executable: {recipe.problem}")
    return recipe


# ---- files ----------------------------------------------------------------------------------


def _npz_bytes(params: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in params.items()})
    return buf.getvalue()


def _model_manifest(class_name: str, settings: Mapping[str, Any], name: str) -> dict[str, Any]:
    return {"class": class_name, "settings": jsonable(dict(settings), "a model setting"), "name": name}


def _header(kind: str) -> dict[str, Any]:
    from cortex import __version__

    return {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind, "cortex_version": __version__}


def _write(path: str | Path, manifest: dict[str, Any], files: Mapping[str, bytes]) -> Path:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True), zipfile.ZIP_DEFLATED)
        for name, data in files.items():  # params stored as they are (floats do not deflate)
            z.writestr(name, data, zipfile.ZIP_STORED if name == PARAMS else zipfile.ZIP_DEFLATED)
    tmp.replace(path)  # a reader never sees half a file
    return path


def save_executable(exe: "Executable", path: str | Path, *, artifacts: bool = True) -> Path:
    """Write ``exe`` to ``path`` (see the module docstring); ``artifacts=False`` leaves out
    the compiled artifacts (a smaller file, compiled again when loaded)."""
    recipe = _saveable(exe, "save")
    manifest = _header("executable")
    manifest.update({
        "target": recipe.target,
        "target_options": jsonable(dict(recipe.target_options), "a target option"),
        "options": jsonable(dict(recipe.options), "a compile option"),
        "dtype": exe.dtype,
        "schedule": exe.schedule.to_dict(),
        "model": _model_manifest(recipe.model_class, recipe.model_settings, recipe.model_name),
        "params": PARAMS,
        "entries": [],
    })
    files = {PARAMS: _npz_bytes(exe.params_snapshot)}
    if artifacts:
        for e in exe.cache_entries:
            name = f"entries/{e.namespace}/{e.key}"
            files[name] = e.data
            manifest["entries"].append({"namespace": e.namespace, "key": e.key, "file": name,
                                        "sha256": hashlib.sha256(e.data).hexdigest()})
    return _write(path, manifest, files)


def save_model(model: "Model", path: str | Path) -> Path:
    """Write ``model``'s class, settings and params to ``path``."""
    cls, settings, problem = model_recipe(model)
    if problem:
        raise PersistError(f"cannot save {model.name}: {problem}")
    manifest = _header("model")
    manifest.update({"model": _model_manifest(cls, settings, model.name), "params": PARAMS})
    return _write(path, manifest, {PARAMS: _npz_bytes(model.params)})


@dataclass
class _File:
    manifest: dict[str, Any]
    params: dict[str, np.ndarray]
    entries: dict[tuple[str, str], bytes]


def _read(path: str | Path, with_entries: bool) -> _File:
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise PersistError(f"{path} is not a file cortex saved ({e})") from None
    with z:
        try:
            manifest = json.loads(z.read(MANIFEST))
        except (KeyError, ValueError) as e:
            raise PersistError(f"{path} is not a file cortex saved (no readable {MANIFEST}: {e})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise PersistError(f"{path} is not a file cortex saved")
        version = manifest.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise PersistError(
                f"{path} was written by cortex {manifest.get('cortex_version', '?')} in format "
                f"version {version}; this cortex reads versions up to {FORMAT_VERSION}: upgrade cortex")
        with np.load(io.BytesIO(z.read(manifest.get("params", PARAMS))), allow_pickle=False) as f:
            params = {k: f[k] for k in f.files}
        entries: dict[tuple[str, str], bytes] = {}
        for e in manifest.get("entries", []) if with_entries else []:
            data = z.read(e["file"])
            if hashlib.sha256(data).hexdigest() == e.get("sha256"):  # a damaged one is rebuilt
                entries[(e["namespace"], e["key"])] = data
    return _File(manifest, params, entries)


def load(path: str | Path, *, artifacts: bool = True) -> Any:
    """What ``exe.save`` or ``model.save`` wrote: an :class:`Executable` (compiled again for
    this machine, using the saved artifacts where they fit it; ``artifacts=False`` ignores
    them) or a :class:`Model`."""
    f = _read(path, with_entries=artifacts)
    m = f.manifest
    if m.get("kind") == "model":
        return make_model(m["model"]["class"], m["model"]["settings"], f.params)
    if m.get("kind") != "executable":
        raise PersistError(f"{path} holds a {m.get('kind')!r}, which this cortex cannot load")
    recipe = Recipe(m["model"]["class"], m["model"]["settings"], m["model"].get("name", ""),
                    m["target"], m["target_options"], m.get("options", {}))
    return rebuild(recipe, f.params, f.entries)


def load_model(path: str | Path, expected: type | None = None) -> "Model":
    """The model ``model.save`` wrote (an executable's file gives the model it was compiled
    from, with its params)."""
    f = _read(path, with_entries=False)
    model = f.manifest.get("model") or {}
    if "class" not in model:
        raise PersistError(f"{path} holds no model")
    return make_model(model["class"], model.get("settings", {}), f.params, expected)
