"""The compilation pipeline: the one place that lists every stage, in order.

Pipeline position: called by ``cortex.compile`` (``cortex.core.api.run_pipeline``) once the
target and its options are resolved; returns the :class:`~cortex.core.runtime.executable.Executable`.

Stages (``docs/architecture.md``), each dumped by ``dump=`` as one numbered file::

    00_options.json          target, target options, dtype, passes, the schedule: every knob's
                             value, where it came from (``schedule_sources``: "user" or its
                             default rule) and what it did (``schedule_notes``)
    01_graph.txt             trace:          model -> RecursiveGraph
    02_graph_passes.txt      graph passes:   RecursiveGraph -> RecursiveGraph (``passes=``)
    03_loops.txt             lower:          RecursiveGraph -> LoopProgram, unscheduled
    04_loops_scheduled.txt   lower+schedule: the LoopProgram for the chosen Schedule, verified
                             against the target's Capabilities
    05_source.<ext>          render:         the backend's source (see source_extension)

then ``compile`` (the backend's compiler, with its cache key) — :func:`build_artifact` runs
the stages up to here (compile-only checks use it: no device needed) — and the executable,
which uploads the params once (:func:`build`). The params' tables (``cortex.core.lowering.lower.bound_params``:
derived params in the compile dtype) are made in a worker thread started right after the graph
passes, while the main thread lowers, renders and compiles; it is joined before the executable
is made, and its error, if any, is raised as is. The weight layouts are applied after that. The backend is created and the schedule resolved first,
so a target without a code generator or an illegal schedule fails before any tracing.

The graph passes with the lowering (stages 02-04) and the rendering (05) are read from the
disk cache when a process compiled the same thing before (:mod:`cortex.core.stage_cache`), and
the backends keep what they compile there too (:mod:`cortex.core.diskcache`); :func:`build`
records every entry it read or wrote, with the recipe (:mod:`cortex.core.persist`), so the
executable can be saved and pickled.

The schedule (``schedule=``) is ``"auto"`` by default: the best matching tuning record's
(``cortex.tuning.records.auto_schedule``: the same traced graph, graph passes and table limit,
target, device and dtype; the workload class named by ``workload=``, else the nearest or the
newest), else the target's ``ScheduleSpace(capabilities, dtype).default()``. ``"default"``
takes the default rules without reading any record; a
:class:`~cortex.core.lowering.schedule.Schedule`, a dict of knobs overriding the default, or its
JSON is used as given. The executable's ``schedule_source`` says which it was and why, and its
recipe (what saving it keeps) holds the schedule as compiled, so a loaded executable runs the
same program whatever records the loading machine has.

The *unscheduled* program of stage 03 is the same lowering with every loop-shaping knob at
its neutral value (no tiling, scalar, no unrolling, row-major weights and state, no
refactoring or recursive unrolling, not persistent; the structural knobs ``kernel_form``, ``leaf_specialization``, ``fuse``, ``parallel`` and
``threads`` kept), so the diff 03 -> 04 shows what the schedule did.

The compile options every target accepts are :class:`CompileOptions` (validated here with the
same :class:`~cortex.core.errors.InvalidOptionError` as a target's own options); a target's
own options go to its backend factory and compiler. ``weights`` is applied to the lowering after
it is made or read from the stage cache (:func:`~cortex.core.lowering.weight_storage.store_weights`),
so the cached lowering is one for every ``weights``; the rendered program, and so every later
cache key, differs.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from cortex.core.errors import InvalidOptionError

if TYPE_CHECKING:
    from cortex.core.frontend.graph import RecursiveGraph
    from cortex.core.lowering.lower import Lowered
    from cortex.core.lowering.schedule import Schedule, ScheduleSpace
    from cortex.core.plugin.backend import Backend
    from cortex.core.plugin.capabilities import Capabilities
    from cortex.core.plugin.targets import Target
    from cortex.core.runtime.executable import Executable
    from cortex.core.runtime.token_tables import TokenTables

GraphPass = Callable[["RecursiveGraph"], "RecursiveGraph"]

#: Options every target accepts, handled by the core, never passed to a target's backend.
SHARED_OPTIONS = ("dtype", "schedule", "dump", "passes", "max_table_mib", "workload", "check_finite",
                  "weights")
#: The ``schedule=`` words: read the tuning records (the default), or the default rules only.
SCHEDULE_WORDS = ("auto", "default")
#: The default ``max_table_mib`` where the token tables are filled on use (a runtime with
#: ``tables_on_use``: the host runtimes, OpenCL); a device that gets them whole at compile time keeps the table passes' own default (2**24
#: entries: 64 MiB in float32). 128 MiB lets in the level-1 tables of a TreeLSTM with vocab 20000
#: and hidden 256 (2 x 98 MiB, `docs/llvm.md`).
ON_USE_TABLE_MIB = 128
DTYPES = ("float32", "float64")

#: The dump file of each stage, in pipeline order (the source's extension is added by dialect).
STAGE_FILES = {
    "options": "00_options.json",
    "graph": "01_graph.txt",
    "graph_passes": "02_graph_passes.txt",
    "loops": "03_loops.txt",
    "loops_scheduled": "04_loops_scheduled.txt",
    "source": "05_source",
}
SOURCE_EXTENSIONS = {"c": ".c", "opencl": ".cl", "cuda": ".cu", "": ".txt"}

_ALLOWED = {
    "dtype": "one of 'float32', 'float64'",
    "schedule": "'auto' (a tuning record, else the default rules), 'default' (the default "
                "rules), a cortex.core.lowering.schedule.Schedule, a dict of schedule knobs, or "
                "its JSON text",
    "dump": "a directory path (str or os.PathLike)",
    "passes": "a list of graph passes: functions RecursiveGraph -> RecursiveGraph or names "
              "from cortex.core.passes.pipeline.ALL_PASSES",
    "max_table_mib": "a positive number: the largest table (MiB, in the compile dtype) a pass "
                     "may precompute; default 128 where tables are filled on use (CPU targets), "
                     "else 2**24 entries (64 MiB in float32)",
    "check_finite": "True or False: whether a call refuses input features that hold NaN or an "
                    "infinity (NonFiniteInputError) instead of propagating them",
    "workload": "a workload class such as 'b8-n32-parse' (cortex.tune): the tuning record "
                "schedule='auto' prefers",
    "weights": "one of 'float32', 'float64' (the compute dtype: the default), 'bfloat16' (weight "
               "matrices stored in bfloat16, float32 compute; targets whose capabilities list it)",
}


@dataclass(frozen=True)
class CompileOptions:
    """The validated shared options. ``dtype=None`` means the model's own dtype;
    ``schedule=None`` is ``"auto"``; ``passes=None`` ``DEFAULT_PASSES``."""

    dtype: str | None = None
    schedule: Any = None  # "auto" | "default" | Schedule | dict of knobs | None (= "auto")
    dump: Path | None = None
    passes: tuple[GraphPass, ...] | None = None
    max_table_mib: float | None = None  # None: the table passes' own default
    workload: str | None = None  # the workload class schedule="auto" prefers
    check_finite: bool = False  # calls refuse non-finite input features
    weights: str | None = None  # how weight matrices are stored; None: the compute dtype


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(shared options, the target's own options)``."""
    shared = {k: v for k, v in options.items() if k in SHARED_OPTIONS}
    own = {k: v for k, v in options.items() if k not in SHARED_OPTIONS}
    return shared, own


def compile_options(target: str, options: Mapping[str, Any]) -> CompileOptions:
    """Validate the shared options given to ``cortex.compile(..., target=target)``.

    Raises :class:`InvalidOptionError` naming the option, the value and what is allowed.
    """
    from cortex.core.lowering.schedule import KNOB_NAMES, Schedule, ScheduleError

    def bad(name: str, value: Any, allowed: str | None = None) -> InvalidOptionError:
        return InvalidOptionError(target, name, value, allowed or _ALLOWED[name])

    unknown = set(options) - set(SHARED_OPTIONS)
    if unknown:
        raise bad(sorted(unknown)[0], options[sorted(unknown)[0]], "no such shared option")
    out = CompileOptions()
    if options.get("dtype") is not None:
        value = options["dtype"]
        try:
            name = np.dtype(value).name if not isinstance(value, bool) else None
        except TypeError:
            name = None
        if name not in DTYPES:
            raise bad("dtype", value)
        out = replace(out, dtype=name)
    if options.get("schedule") is not None:
        value = options["schedule"]
        if isinstance(value, str) and value in SCHEDULE_WORDS:
            pass
        elif isinstance(value, str):
            try:
                value = Schedule.from_json(value).to_dict()
            except ScheduleError as e:
                raise bad("schedule", options["schedule"], f"{_ALLOWED['schedule']} ({e})") from None
        if isinstance(value, dict):
            unknown_knobs = sorted(set(value) - set(KNOB_NAMES))
            if unknown_knobs:
                raise bad("schedule", value, f"knobs from {list(KNOB_NAMES)} (unknown knob "
                          f"{unknown_knobs[0]!r})")
            value = dict(value)
        elif not (isinstance(value, Schedule) or value in SCHEDULE_WORDS):
            raise bad("schedule", value)
        out = replace(out, schedule=value)
    if options.get("dump") is not None:
        value = options["dump"]
        if not isinstance(value, (str, os.PathLike)) or not str(value):
            raise bad("dump", value)
        out = replace(out, dump=Path(value))
    if options.get("passes") is not None:
        out = replace(out, passes=_resolve_passes(target, options["passes"]))
    if options.get("check_finite") is not None:
        if not isinstance(options["check_finite"], (bool, np.bool_)):
            raise bad("check_finite", options["check_finite"])
        out = replace(out, check_finite=bool(options["check_finite"]))
    if options.get("max_table_mib") is not None:
        value = options["max_table_mib"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise bad("max_table_mib", value)
        out = replace(out, max_table_mib=float(value))
    if options.get("weights") is not None:
        from cortex.core.lowering.weight_storage import WEIGHT_DTYPES

        if not isinstance(options["weights"], str) or options["weights"] not in WEIGHT_DTYPES:
            raise bad("weights", options["weights"])
        out = replace(out, weights=options["weights"])
    if options.get("workload") is not None:
        from cortex.tuning.workload_class import parse_class

        try:
            parse_class(options["workload"])
        except ValueError as e:
            raise bad("workload", options["workload"], f"{_ALLOWED['workload']} ({e})") from None
        out = replace(out, workload=options["workload"])
    return out


def _resolve_passes(target: str, value: Any) -> tuple[GraphPass, ...]:
    from cortex.core.passes.pipeline import ALL_PASSES

    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidOptionError(target, "passes", value, _ALLOWED["passes"])
    passes = []
    for p in value:
        if isinstance(p, str):
            if p not in ALL_PASSES:
                raise InvalidOptionError(target, "passes", value,
                                         f"{_ALLOWED['passes']} (unknown pass {p!r}; known: "
                                         f"{sorted(ALL_PASSES)})")
            p = ALL_PASSES[p]
        elif not callable(p):
            raise InvalidOptionError(target, "passes", value, _ALLOWED["passes"])
        passes.append(p)
    return tuple(passes)


def resolve_schedule(target: str, space: "ScheduleSpace", given: Any) -> tuple["Schedule", dict[str, str]]:
    """The schedule to compile with and where each knob's value came from: the space's
    default rules (for ``None``, ``"auto"`` and ``"default"``: the tuning records are read
    later, see :func:`build_artifact`), a knob dict over them, or a given Schedule — validated
    against the target's space (InvalidOptionError otherwise). See ``ScheduleSpace.resolve``."""
    from cortex.core.lowering.schedule import Schedule, ScheduleError

    try:
        return space.resolve(None if given in SCHEDULE_WORDS else given)
    except ScheduleError as e:
        raise InvalidOptionError(target, "schedule", given.to_dict() if isinstance(given, Schedule)
                                 else given, f"a legal schedule for this target: {e}") from None


def neutral_schedule(schedule: "Schedule") -> "Schedule":
    """``schedule`` with every loop-shaping knob neutral (what stage 03 lowers with)."""
    return replace(schedule, tile_hidden=0, vector_width=1, unroll=1, weight_layout="row_major",
                   persistent=False, interchange=False, node_jam=1, wide_lanes=0, prefetch=0,
                   node_chunk=1, state_layout="row_major", refactor=False, recursive_unroll=1,
                   hoist_projections=False, row_jam=1, panel_kib=0,
                   level_split="static", k_block=0, leaf_tables=False, leaf_kids=False)


def source_extension(backend: "Backend", source: Any) -> str:
    """The dump file extension of ``source``: the renderer's ``file_extension`` attribute when
    it has one (e.g. ``".ll"`` for LLVM IR), else by ``Capabilities.dialect`` (``.c``, ``.cl``,
    ``.cu``; ``.txt`` for a non-C dialect), ``.bin`` for bytes."""
    ext = getattr(backend.renderer, "file_extension", None)
    if isinstance(ext, str) and ext.startswith("."):
        return ext
    if isinstance(source, bytes):
        return ".bin"
    return SOURCE_EXTENSIONS.get(backend.capabilities.dialect, ".txt")


class _Dumper:
    """Writes each stage's text into ``directory`` (or nothing when it is None)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def __bool__(self) -> bool:
        return self.directory is not None

    def write(self, stage: str, text: Any, extension: str = "") -> None:
        """Write ``text`` (``str``/``bytes``; anything else is printed with ``str``, a callable
        is called first): only when dumping, so a compile never prints what it does not write."""
        if self.directory is None:
            return
        if callable(text):
            text = text()
        if not isinstance(text, (str, bytes)):
            text = str(text)
        path = self.directory / (STAGE_FILES[stage] + extension)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text if text.endswith("\n") else text + "\n")


@dataclass(frozen=True)
class Built:
    """Every stage's product up to the backend's compiler (what an Executable is made of)."""

    lowered: "Lowered"
    backend: "Backend"
    source: Any
    cache_key: str
    artifact: Any
    prepared: Mapping[str, np.ndarray] | None  # the prepared params; None when not asked for
    tables: "TokenTables | None" = None  # fills the prepared token tables' rows on first use
    snapshot: Mapping[str, np.ndarray] | None = None  # read-only copies of the model's params
    schedule_source: str = ""  # which schedule this is and why (tuning record, default, given)
    graph_fingerprint: str | None = None  # what tuning records of this compile are keyed by
    provenance: Mapping[str, str] = field(default_factory=dict)  # knob -> where its value came from


def build_artifact(model: Any, target: "Target", target_options: Mapping[str, Any],
                   options: CompileOptions = CompileOptions(), *,
                   prepare_params: bool = True) -> Built:
    """Run every stage for ``model`` on ``target`` up to and including the backend's compiler.

    With ``prepare_params`` the params are prepared in a worker thread beside lowering,
    rendering and compiling; without it (compile-only checks: no device needed) they are not touched."""
    from cortex.core.frontend.model import Model

    if not isinstance(model, Model):
        raise TypeError(f"cortex.compile takes a cortex model (a cortex.core.frontend.model.Model such as "
                        f"cortex.models.TreeLSTM(...)), not {type(model).__name__}")
    from cortex.core import stage_cache
    from cortex.core.frontend.trace import trace
    from cortex.core.lowering.lower import lower
    from cortex.core.lowering.schedule import ScheduleError, ScheduleSpace
    from cortex.core.lowering.weight_storage import store_weights
    from cortex.core.passes.pipeline import DEFAULT_PASSES, run_passes, with_table_limit
    from cortex.tuning.fingerprint import graph_fingerprint
    dtype = options.dtype or model.dtype
    dump = _Dumper(options.dump)

    backend: Backend = target.create_backend(target_options)
    caps = backend.capabilities
    # A runtime that fills token tables on use (a host runtime reads the params in place; a
    # device runtime that copies written rows over, such as OpenCL's) leaves them for the calls
    # to fill, row by row (cortex.core.runtime.token_tables): they cost no compile time and only
    # the memory of the tokens used, which allows bigger ones by default. Others get them whole.
    deferred = backend.runtime.tables_on_use
    table_mib = options.max_table_mib
    if table_mib is None and deferred:
        table_mib = ON_USE_TABLE_MIB
    given = DEFAULT_PASSES if options.passes is None else options.passes
    table_elements = int(table_mib * 2**20) // np.dtype(dtype).itemsize if table_mib is not None else None
    passes = given if table_elements is None else with_table_limit(given, table_elements)
    try:
        space = ScheduleSpace(caps, dtype)  # checks the dtype before the weights option
    except ScheduleError as e:
        raise InvalidOptionError(target.name, "dtype", dtype, f"a float type this target "
                                 f"supports ({e})") from None
    weights = _weights(target.name, options.weights, dtype, caps)
    if weights != dtype:  # default rules that follow how the weights are stored
        space = ScheduleSpace(caps, dtype, weights)
    schedule, provenance = resolve_schedule(target.name, space, options.schedule)
    auto = options.schedule is None or options.schedule == "auto"
    source_of_schedule = ("default rules" if options.schedule == "default"
                          else "given by the caller")

    traced = trace(model)
    dump.write("graph", traced)
    fingerprint = graph_fingerprint(traced, given, table_elements)  # tuning records' key
    if auto:
        schedule, provenance, source_of_schedule = _recorded_schedule(
            fingerprint, target, target_options, backend, space, options.workload)
    # a second process finds the passes' graph and the scheduled program in the disk cache
    lowered_key = stage_cache.lowered_key(traced, given, table_elements, schedule, caps, dtype, provenance)
    lowered = stage_cache.load_lowered(lowered_key)
    graph = lowered.graph if lowered is not None else run_passes(traced, passes)
    # The params' tables (derived params: big matmuls and elementwise passes in NumPy, which
    # release the GIL) need only the graph: a worker thread computes them while the main thread
    # lowers, renders and compiles; their weight layouts are applied once the program is known.
    bound = _Worker(_bind_and_snapshot, graph, model.params, dtype, deferred) if prepare_params else None
    try:
        dump.write("graph_passes", graph)
        options_doc = {
            "target": target.name, "target_options": dict(target_options), "dtype": dtype,
            "schedule": schedule.to_dict(), "schedule_source": source_of_schedule,
            "schedule_sources": provenance,
            "passes": [p.__name__ for p in passes],
            "max_table_mib": table_mib, "tables_filled_on_use": deferred, "weights": weights,
        }
        dump.write("options", lambda: json.dumps(options_doc, indent=2, sort_keys=True, default=repr))
        if dump:
            dump.write("loops", str(lower(graph, neutral_schedule(schedule), caps, dtype).program))

        if lowered is None:
            lowered = lower(graph, schedule, caps, dtype, provenance)  # verified against caps by lower itself
            stage_cache.store_lowered(lowered_key, lowered)
        lowered = store_weights(lowered, weights, caps.bf16_dot)
        dump.write("loops_scheduled", lowered.program)
        if dump:  # and what each knob did
            options_doc["schedule_notes"] = list(lowered.notes)
            dump.write("options", lambda: json.dumps(options_doc, indent=2, sort_keys=True, default=repr))
        source, _ = stage_cache.render(backend.renderer, lowered.program)
        dump.write("source", source, source_extension(backend, source))
        key = backend.compiler.cache_key(source, target_options)
        artifact = backend.compiler.compile(source, target_options)
        table, tables, snapshot = bound.result() if bound is not None else (None, None, None)
        prepared, tables = _prepare(lowered, (table, tables)) if bound is not None else (None, None)
    finally:
        if bound is not None:
            bound.join()  # never leave the worker running, whatever happened here
    return Built(lowered, backend, source, key, artifact, prepared, tables, snapshot,
                 source_of_schedule, fingerprint, dict(provenance))


def _weights(target: str, given: str | None, dtype: str, caps: "Capabilities") -> str:
    """The ``weights`` option resolved for the compute ``dtype``: the dtype itself by default;
    a storage format needs float32 compute and a target whose capabilities list it."""
    if given is None or given == dtype:
        return dtype
    if given in ("float32", "float64"):
        raise InvalidOptionError(target, "weights", given, f"{dtype!r} (the compute dtype) or "
                                 f"'bfloat16': weights in another float type than dtype={dtype!r} "
                                 f"are not supported")
    if dtype != "float32":
        raise InvalidOptionError(target, "weights", given, f"{dtype!r} (the compute dtype): "
                                 f"{given} weights need dtype='float32'")
    if given not in caps.weight_storage:
        allowed = ", ".join(repr(w) for w in (dtype, *caps.weight_storage))
        raise InvalidOptionError(target, "weights", given, f"one of {allowed}: this target does "
                                 f"not read {given} weights")
    return given


def recipe_schedule(schedule: "Schedule", provenance: Mapping[str, str]) -> dict[str, Any]:
    """The knobs a saved executable keeps of a ``schedule="auto"`` compile: those a tuning record
    set, so a loaded copy runs the same program whatever records the loading machine has. The
    default rules' knobs are derived again where it loads (its cores, its device), and
    ``threads`` is where it runs, not what it computes (a worker may run it with fewer)."""
    return {k: v for k, v in schedule.to_dict().items()
            if k != "threads" and not provenance.get(k, "default rule").startswith("default rule")}


def _recorded_schedule(fingerprint: str | None, target: "Target", target_options: Mapping[str, Any],
                       backend: "Backend", space: "ScheduleSpace", workload: str | None
                       ) -> tuple["Schedule", dict[str, str], str]:
    """``schedule="auto"``: the best matching tuning record's schedule, else the default; with
    where each knob came from and why (``cortex.tuning.records.auto_schedule``; reading the
    records imports only sqlite3)."""
    from cortex.tuning.records import auto_schedule

    return auto_schedule(fingerprint, target.name, target_options, backend, space, workload)


def _bind_and_snapshot(graph: "RecursiveGraph", params: Mapping[str, np.ndarray], dtype: str,
                       deferred: bool) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """The worker's job: :func:`_bind`, and the params snapshot the executable keeps."""
    return (*_bind(graph, params, dtype, deferred), params_snapshot(params))


def _bind(graph: "RecursiveGraph", params: Mapping[str, np.ndarray], dtype: str,
          deferred: bool) -> tuple[dict[str, np.ndarray], "TokenTables | None"]:
    from cortex.core.lowering.lower import bound_params, bound_params_deferred

    if deferred:
        return bound_params_deferred(graph, params, dtype)
    return bound_params(graph, params, dtype), None


def _prepare(lowered: "Lowered", bound: tuple[dict[str, np.ndarray], "TokenTables | None"]
             ) -> tuple[dict[str, np.ndarray], "TokenTables | None"]:
    """The params in the program's layouts, and the token tables' filler. A table is filled
    by row in place, so one whose buffer a schedule gave another layout is made whole here;
    with stored weights (``weights="bfloat16"``) its rows multiply by the stored values."""
    table, tables = bound
    if tables is not None:
        stored = {b.name for b in lowered.program.buffers if b.storage}  # weights="bfloat16"
        if stored:  # the tables' rows multiply by what the program's GEMVs read
            tables.round_sources({p for p, buf in lowered.param_names if buf in stored}, "bfloat16")
        layouts = {b.name: b.layout for b in lowered.program.buffers}
        buf_of = dict(lowered.param_names)
        if any(layouts.get(buf_of.get(n), ("row_major",)) != ("row_major",) for n in tables.names):
            tables.attach({n: table[n] for n in tables.names if n in table})
            tables.fill_all()
            tables = None
    return lowered.layout_params(table), tables


def build(model: Any, target: "Target", target_options: Mapping[str, Any],
          options: CompileOptions = CompileOptions()) -> "Executable":
    """Run every stage for ``model`` on ``target`` and return the executable, with its recipe,
    a snapshot of the params and the disk-cache entries the compile read or wrote (what
    saving and pickling it carry: ``cortex.core.persist``)."""
    from cortex.core import diskcache
    from cortex.core.persist import recipe_of
    from cortex.core.runtime.executable import Executable

    with diskcache.recording() as entries:
        b = build_artifact(model, target, target_options, options)
    snapshot = b.snapshot if b.snapshot is not None else params_snapshot(model.params)
    if options.schedule is None or options.schedule == "auto":
        options = replace(options, schedule=recipe_schedule(b.lowered.schedule, b.provenance))
    exe = Executable(target=target.name, options=target_options, lowered=b.lowered,
                     backend=b.backend, source=b.source, artifact=b.artifact,
                     cache_key=b.cache_key, params=model.params, model_name=model.name,
                     prepared=b.prepared, tables=b.tables,
                     recipe=recipe_of(model, target.name, target_options, options),
                     snapshot=snapshot, cache_entries=tuple(entries),
                     schedule_source=b.schedule_source, graph_fingerprint=b.graph_fingerprint,
                     check_finite=options.check_finite)
    model.__dict__.setdefault("_compiled", weakref.WeakSet()).add(exe)  # set_params warns
    return exe


def params_snapshot(params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Read-only copies of ``params``: what an executable was compiled with (saved and pickled
    with it), whatever happens to the model's arrays later."""
    out = {}
    for name, a in params.items():
        c = np.array(a, copy=True, order="C")
        c.setflags(write=False)
        out[name] = c
    return out


class _Worker(threading.Thread):
    """``fn(*args)`` in a thread started at once; :meth:`result` returns its value or re-raises
    its exception (the original object: same type, message and traceback)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        super().__init__(name="cortex-prepare-params", daemon=True)
        self._fn, self._args = fn, args
        self._value: Any = None
        self._error: BaseException | None = None
        self._inline = False
        try:
            self.start()
        except RuntimeError:  # no thread to be had (e.g. `ulimit -s` above free memory): run here
            self._inline = True
            self.run()

    def run(self) -> None:
        try:
            self._value = self._fn(*self._args)
        except BaseException as e:  # handed to the caller's thread by result()
            self._error = e

    def join(self, timeout: float | None = None) -> None:
        if not self._inline:
            super().join(timeout)

    def result(self) -> Any:
        self.join()
        if self._error is not None:
            raise self._error
        return self._value
