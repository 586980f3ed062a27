"""The compiled model: ``exe(structures) -> Outputs``, with no recompilation per call.

Pipeline position: the product of ``cortex.core.pipeline.build`` and the host side of every
call. Compilation (trace, passes, lowering, scheduling, rendering, compiling) happened once; a
call only

1. linearizes the structures (``cortex.core.linearize``) with the model's arity and its token
   vocabulary / feature size, so a structure that does not fit the model is rejected with the
   linearizer's ``ValueError`` before any generated code runs. A ready ``LinearizedBatch``
   (given to the call or to :meth:`Executable.run`) is validated instead, unless it is one the
   linearizer made and sealed and nobody has changed since (``structure.py``: a few attribute
   reads). No public method hands unchecked index arrays to native code;
2. binds the batch to the program's index/input buffers and size symbols (``Lowered.bind_batch``,
   which checks the batch against the model: ``BatchMismatchError``, a ``ValueError``);
3. stages them (``runtime.stage``: an upload, or nothing on a host runtime), takes the output
   and temp buffers from the executable's pool (allocated on the first call of each shape,
   reused by every later call of that shape: steady-state calls allocate no device memory),
   launches the compiled artifact once, synchronizes and fetches the outputs into fresh host
   arrays (``runtime.fetch``; results never alias the pool). On a host runtime the output
   buffers themselves are handed to the caller, and a later call writes one again only once
   nobody holds it (:mod:`~cortex.core.runtime.handover`): no copy;
4. turns the output buffers into per-node states (``Lowered.states``; a state the schedule laid
   out in node blocks is converted back to row-major ``[N, *shape]``) wrapped in
   :class:`~cortex.core.runtime.outputs.Outputs`.

The calling convention between the core and a backend :class:`~cortex.core.plugin.backend.Runtime`
is the rendered entry point's: ``runtime.launch(artifact, args)`` with ``args`` = every buffer
of the program in ``program.buffers`` order (device buffers from ``upload``/``allocate``)
followed by every size of ``program.sizes`` as a Python ``int``. The artifact performs the
program's host steps (its kernel launches) itself.

The params are prepared (derived params, the compile dtype, the schedule's weight layouts) and
uploaded once, when the executable is built. On a host runtime the *token tables* among them
(derived params with a row per token id: hoisted embedding projections, level-1 leaf tables) are
the exception: their rows are computed by the first call whose batch holds the token, before its
launch (:mod:`cortex.core.runtime.token_tables`; :meth:`Executable.fill_tables` computes the rest).
Everything else that does not depend on the batch is worked out then too (the argument list with the params in place, which slots are staged
inputs and which pooled buffers, their shape functions and dtypes), so a call's Python work is
binding, one pass over the pooled slots (skipped when the sizes repeat) and the fetches.

After compiling: :meth:`Executable.update_params` prepares and uploads new weights into the
same compiled code; :meth:`Executable.warmup` does the first calls' work now (token-table
rows, each kernel form's first launch); :meth:`Executable.map` streams a corpus
(:mod:`cortex.core.runtime.batches`); :meth:`Executable.save` and pickling keep the executable as its
recipe, params snapshot and disk-cache entries (:mod:`cortex.core.persist`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import numpy as np

from cortex.core.frontend.graph import RecursiveGraph
from cortex.core.linearize import linearize
from cortex.core.linearize.structure import BatchTypeError, LinearizedBatch
from cortex.core.loopir import Program, shape_function
from cortex.core.loopir.interpret import np_dtype
from cortex.core.lowering.schedule import Schedule
from cortex.core.lowering.transforms import from_layout
from cortex.core.plugin.backend import Backend, HostRuntime, Source
from cortex.core.runtime.handover import HandedBuffer
from cortex.core.runtime.outputs import Outputs

if TYPE_CHECKING:
    from cortex.core.diskcache import Entry
    from cortex.core.lowering.lower import Lowered
    from cortex.core.persist import Recipe
    from cortex.core.runtime.token_tables import TokenTables


_HOST_STAGE = HostRuntime.stage  # a runtime using these as they are gets them inlined
_HOST_FETCH = HostRuntime.fetch


def linearize_options(graph: RecursiveGraph) -> dict[str, int | None]:
    """The linearizer keywords that make it enforce what ``graph`` needs of every structure."""
    opts: dict[str, int | None] = {"arity": graph.arity, "vocab_size": None, "feature_dim": None}
    for inp in graph.node_inputs:
        if inp.kind == "word":
            opts["vocab_size"] = inp.vocab
        elif inp.kind == "features":
            opts["feature_dim"] = int(inp.shape[0])
    return opts


def _checked(batch: Any) -> None:
    """Raise unless ``batch`` is a LinearizedBatch whose invariants hold: free for a sealed
    batch (the linearizer's), a vectorized :meth:`LinearizedBatch.validate` for any other."""
    if type(batch) is not LinearizedBatch and not isinstance(batch, LinearizedBatch):
        raise BatchTypeError(f"run needs a LinearizedBatch (made by exe.linearize(structures) "
                             f"or cortex.data.linearize(...)), got {type(batch).__name__}; to "
                             f"run on structures, call the executable itself: exe(structures)")
    if not batch._is_sealed():
        batch.validate()


class Executable:
    """A model compiled for one target with one set of options; call it on structures."""

    def __init__(self, *, target: str, options: Mapping[str, Any], lowered: "Lowered",
                 backend: Backend, source: Source, artifact: Any, cache_key: str,
                 params: Mapping[str, np.ndarray], model_name: str = "",
                 prepared: Mapping[str, np.ndarray] | None = None,
                 tables: "TokenTables | None" = None, recipe: "Recipe | None" = None,
                 snapshot: Mapping[str, np.ndarray] | None = None,
                 cache_entries: tuple["Entry", ...] = (), schedule_source: str = "",
                 graph_fingerprint: str | None = None, check_finite: bool = False) -> None:
        """``prepared``: ``lowered.prepare_params(params)`` when the caller already made it
        (the pipeline does, in a thread overlapping the backend's compile); ``tables``: the
        filler of the token tables that ``prepared`` holds as zero pages (host runtimes only).
        ``recipe``, ``snapshot`` (read-only copies of ``params``) and ``cache_entries`` (what
        the compile read from or wrote to the disk cache) are what saving and pickling carry
        (``cortex.core.persist``; the pipeline gives them). ``schedule_source``: which schedule
        this is and why (a tuning record, the default rules, given by the caller);
        ``graph_fingerprint``: the key of this model's tuning records (``cortex.tuning``);
        ``check_finite``: calls refuse input features holding NaN or an infinity."""
        from cortex.core.pipeline import params_snapshot

        self.target = target
        self.options = dict(options)
        self.lowered = lowered
        self.backend = backend
        self.source = source
        self.artifact = artifact
        self.cache_key = cache_key
        self.schedule_source = schedule_source
        self.graph_fingerprint = graph_fingerprint
        self.check_finite = bool(check_finite)
        self.model_name = model_name or lowered.graph.name
        self.calls = 0
        self.recipe = recipe
        self.params_snapshot = dict(snapshot) if snapshot is not None else params_snapshot(params)
        self.cache_entries = tuple(cache_entries)
        self._linearize = linearize_options(lowered.graph)
        if np.dtype(lowered.dtype) in (np.float32, np.float64):
            # features come out of the linearizer in the dtype the program reads: converted
            # once, while they are put in output order (not once more by ``bind_batch``)
            self._linearize["feature_dtype"] = np.dtype(lowered.dtype)
        if prepared is None:
            prepared = lowered.prepare_params(params)
        program = lowered.program
        # Per buffer, once: its compiled shape function and NumPy dtype (calls only evaluate).
        self._buffers = tuple((b, shape_function(b.shape), np.dtype(np_dtype(b.stored)))
                              for b in program.buffers)
        # The launch arguments with the params in place; per call the staged inputs
        # (slot, name, role) and the pooled outputs/temps (slot, name, shape fn, dtype) fill in.
        self._install_params(prepared, tables, params)
        self._staged = tuple((i, b.name, b.role) for i, (b, _, _) in enumerate(self._buffers)
                             if b.name not in self._params and b.read_only)
        self._pooled = tuple((i, b.name, shape_of, dtype)
                             for i, (b, shape_of, dtype) in enumerate(self._buffers)
                             if b.name not in self._params and not b.read_only)
        self._size_names = tuple(s.name for s in program.sizes)
        # per state: (state, slot of its output buffer), in ``Lowered.states`` order; found by
        # asking ``states`` once with each output buffer's name standing for its array
        slot = {b.name: i for i, b in enumerate(program.buffers) if b.role == "output"}
        named = lowered.states(dict(zip(slot, slot)))
        if not all(isinstance(v, str) and v in slot for v in named.values()):
            raise TypeError("Lowered.states must pick output buffers by name")
        self._fetched = tuple((st, slot[buf]) for st, buf in named.items())
        # states the schedule laid out otherwise (``state_layout``): (state, layout), turned
        # back into row-major [N, *shape] after the fetch
        self._relayout = tuple((st, program.buffers[slot[buf]].layout) for st, buf in named.items()
                               if program.buffers[slot[buf]].layout != ("row_major",))
        graph = lowered.graph
        self._out_states = tuple(graph.outputs.states)
        self._every_node = bool(graph.outputs.every_node)
        # Output/temp buffers by name, reused while the shape repeats (host ones while they fit).
        self._pool: dict[str, tuple] = {}  # name -> (shape, buffer, host capacity or None)
        # the sizes the pooled slots were last resolved for, those slots' (slot, buffer) and
        # the fetches of the states: (state, slot, shape, dtype)
        self._pool_key: tuple[int, ...] | None = None
        self._pool_args: tuple[tuple[int, Any], ...] = ()
        self._fetch_args: tuple[tuple[str, int, tuple[int, ...], np.dtype], ...] = ()
        self._handed: tuple[HandedBuffer, ...] = ()  # the output buffers calls hand out
        self._lock = threading.Lock()  # the pool is shared: calls from several threads queue

    def _install_params(self, prepared: Mapping[str, np.ndarray], tables: "TokenTables | None",
                        params: Mapping[str, np.ndarray]) -> None:
        """The prepared params on the device and in the launch template; the token tables'
        filler attached to the arrays the program reads (which the calls fill in place)."""
        runtime = self.backend.runtime
        self._params = {name: self._upload_param(runtime, a, params) for name, a in prepared.items()}
        self._tables = tables
        if tables is not None:
            buf_of = dict(self.lowered.param_names)
            handles = {n: self._params[buf_of[n]] for n in tables.names if n in buf_of}
            tables.attach({n: runtime.table_host_array(h) for n, h in handles.items()},
                          on_rows=lambda rows: [runtime.refresh_rows(h, rows) for h in handles.values()])
        self._template: list[Any] = [self._params.get(b.name) for b, _, _ in self._buffers]

    @staticmethod
    def _upload_param(runtime: Any, a: np.ndarray, params: Mapping[str, np.ndarray]) -> Any:
        """A prepared param on the device: handed over (no copy on a host runtime) when it is
        a fresh array, sharing no memory with the caller's params, else uploaded (a copy: the
        caller's arrays stay theirs)."""
        a = np.ascontiguousarray(a)
        if not any(np.may_share_memory(a, p) for p in params.values()):
            return runtime.adopt(a)
        return runtime.upload(a)

    # ---- what was compiled -------------------------------------------------------------------

    @property
    def graph(self) -> RecursiveGraph:
        return self.lowered.graph

    @property
    def program(self) -> Program:
        return self.lowered.program

    @property
    def schedule(self) -> Schedule:
        return self.lowered.schedule

    @property
    def dtype(self) -> str:
        return self.lowered.dtype

    @property
    def notes(self) -> tuple[str, ...]:
        """Every schedule knob with its value and where it came from ("user", "tuning record N"
        or its default rule), then what each knob did to the program."""
        return self.lowered.notes

    # ---- calls -----------------------------------------------------------------------------

    def linearize(self, structures: Any, *, vocab: Any = None) -> LinearizedBatch:
        """The batch a call would run: structures linearized and checked against the model.
        A ready :class:`LinearizedBatch` is validated (unless sealed) and returned as it is;
        its fit to the model (arity, token ids, features) is checked by the call."""
        if isinstance(structures, LinearizedBatch):
            _checked(structures)
            return structures
        return linearize(structures, vocab=vocab, **self._linearize)

    def __call__(self, structures: Any, *, vocab: Any = None) -> Outputs:
        """Run the model on one structure or a list of them (a batch), or on a ready
        :class:`LinearizedBatch`; ``vocab`` maps string tokens to ids."""
        if isinstance(structures, LinearizedBatch):
            return self.run(structures)
        batch = linearize(structures, vocab=vocab, **self._linearize)
        with self._lock:
            return self._run(batch)  # the linearizer's batch: sealed, nothing to check

    def run(self, batch: LinearizedBatch) -> Outputs:
        """Run a linearized batch (see :meth:`linearize`). A batch that the linearizer made
        runs as it is; any other is validated first (``LinearizedBatch.validate``: an
        :class:`~cortex.core.linearize.structure.InvariantError`), and every batch is checked against
        the model (``BatchMismatchError``). Safe to call from several threads: calls of one
        executable run one at a time."""
        _checked(batch)
        with self._lock:
            return self._run(batch)
    @property
    def table_rows(self) -> tuple[int, int] | None:
        """``(token ids whose table rows are computed, vocabulary size)``, or None when this
        executable has no tables filled on use (none in its program, or a runtime that takes
        them whole at compile time)."""
        if self._tables is None:
            return None
        return self._tables.rows_done, self._tables.vocab

    def fill_tables(self, progress: bool | None = None) -> int:
        """Compute every row of the token tables that no call has needed yet (a call computes
        the rows of its batch's tokens first; see the module docstring). Returns how many token
        ids that was: 0 once done, and always where the runtime takes them whole at compile
        time. A long fill shows a progress bar (``progress``: force it on or off)."""
        if self._tables is None:
            return 0
        with self._lock:
            return self._tables.fill_all(progress)

    # ---- after compiling: weights, warm-up, corpora, saving --------------------------------

    def update_params(self, values: Mapping[str, Any] | Any) -> None:
        """Give the executable new weights (all or some of the model's params, by name; or a
        model of the same kind): they are checked, prepared (derived params, layouts, token
        tables) and uploaded as at compile time; nothing is recompiled. A model's
        ``set_params`` after ``cortex.compile`` does not reach its executables without this."""
        from cortex.core.runtime.batches import merged_params
        from cortex.core.pipeline import _bind, _prepare, params_snapshot

        params = merged_params(self, getattr(values, "params", values))
        deferred = self.backend.runtime.tables_on_use
        prepared, tables = _prepare(self.lowered, _bind(self.graph, params, self.dtype, deferred))
        with self._lock:
            self._install_params(prepared, tables, params)
            self.params_snapshot = params_snapshot(params)

    def warmup(self, *, tables: bool = True, progress: bool | None = None) -> "Executable":
        """Do now what the first calls would: compute every token-table row (``tables``; a
        progress bar when long) and run a small and a large synthetic batch, so a device
        builds each kernel form it has (OpenCL drivers such as PoCL compile kernels at their
        first launch). Returns the executable: ``exe = cortex.compile(...).warmup()``."""
        from cortex.core.runtime.batches import warmup_batches

        if tables:
            self.fill_tables(progress)
        for batch in warmup_batches(self):
            self(batch)
        return self

    def map(self, structures: Iterable[Any], *, batch_size: int = 64, progress: bool = False,
            total: int | None = None, vocab: Any = None) -> Iterator[dict[str, np.ndarray]]:
        """Run the model over a corpus, ``batch_size`` structures per call, and yield each
        input's declared outputs in order (``{state: root row}``, or its nodes' rows for an
        ``every_node`` model). Lazy: it reads ``structures`` one batch ahead of what it yields,
        so a generator over a large file streams in bounded memory. ``progress``: a bar with
        inputs/s and nodes/s (``total``: the count, when ``structures`` has no ``len``)."""
        from cortex.core.runtime.batches import stream

        return stream(self, structures, batch_size=batch_size, progress=progress, total=total,
                      vocab=vocab)

    def save(self, path: Any, *, artifacts: bool = True) -> Any:
        """Write this executable to ``path`` (a zip file; ``cortex.load`` reads it): its
        recipe, params and compiled artifacts (``artifacts=False`` leaves those out).
        Returns the path. See ``cortex.core.persist``."""
        from cortex.core.persist import save_executable

        return save_executable(self, path, artifacts=artifacts)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its recipe, params and cache entries; unpickling compiles it again (a
        warm compile) in the receiving process (``cortex.core.persist``)."""
        from cortex.core.persist import reduce_executable

        return reduce_executable(self)

    def _run(self, batch: LinearizedBatch) -> Outputs:
        """The call on a batch whose invariants hold (sealed or validated): no check of them
        here, so this stays private; callers hold the lock."""
        if self.check_finite and batch.features is not None:
            _refuse_non_finite(batch)
        runtime = self.backend.runtime
        inputs, sizes = self.lowered.bind_batch(batch)
        if self._tables is not None and not self._tables.complete:
            self._tables.ensure(inputs["word_ids"])
        args = self._template.copy()
        stage = runtime.stage
        if getattr(stage, "__func__", None) is _HOST_STAGE:
            stage = np.ascontiguousarray  # the host pass-through, without a method call each
        for i, name, role in self._staged:
            a = inputs.get(name)
            if a is None:
                raise RuntimeError(f"internal error: the lowering bound no array for "
                                   f"{role} buffer {name!r}")
            args[i] = stage(a)
        key = tuple([int(sizes[s]) for s in self._size_names])
        if key != self._pool_key:
            self._resolve_pool(key, sizes)
        for i, buf in self._pool_args:
            args[i] = buf
        handed = self._handed
        if handed:
            allocate = runtime.allocate
            for h in handed:
                args[h.slot] = h.take(allocate)
        args += key
        runtime.launch(self.artifact, tuple(args))
        runtime.synchronize()
        fetch = runtime.fetch
        if getattr(fetch, "__func__", None) is _HOST_FETCH:  # the host copy, inlined
            states = {st: args[i].copy() for st, i, _, _ in self._fetch_args}
        else:
            states = {st: fetch(args[i], shape, dtype) for st, i, shape, dtype in self._fetch_args}
        if handed:
            for h in handed:
                states[h.state] = h.hand_out()
            if len(handed) < len(self._fetched):  # the states in their order
                states = {st: states[st] for st, _ in self._fetched}
        for st, layout in self._relayout:
            states[st] = from_layout(states[st], layout, rows=sizes["N"])
        self.calls += 1
        return Outputs._fresh(states, batch, self._out_states, self.lowered.dtype,
                              self._every_node)

    def _resolve_pool(self, key: tuple[int, ...], sizes: Mapping[str, int]) -> None:
        """The pooled buffers for ``sizes``: each kept while its shape repeats, else allocated."""
        runtime = self.backend.runtime
        self._pool_key = None  # stays unset if an allocation below fails
        handing = self._handing(runtime)
        resolved, shapes, handed = [], {}, []
        for i, name, shape_of, dtype in self._pooled:
            shape = shapes[i] = shape_of(sizes)
            if i in handing:  # a fresh buffer per shape; calls hand it out (``handover``)
                self._pool.pop(name, None)
                handed.append(HandedBuffer(i, handing[i], shape, dtype, runtime.allocate(shape, dtype)))
                continue
            pooled = self._pool.get(name)
            if pooled is None or pooled[0] != shape:
                pooled = self._pool[name] = _pooled_buffer(runtime, pooled, shape, dtype)
            resolved.append((i, pooled[1]))
        self._pool_args = tuple(resolved)
        self._handed = tuple(handed)
        self._fetch_args = tuple((st, i, shapes[i], self._buffers[i][2])
                                 for st, i in self._fetched if i not in handing)
        self._pool_key = key

    def _handing(self, runtime: Any) -> dict[int, str]:
        """The output slots whose buffers calls hand to the caller instead of copying
        (:mod:`~cortex.core.runtime.handover`), by slot: on a host runtime (its fetch is the
        host copy), the states kept row-major, each slot fetched once."""
        if getattr(runtime.fetch, "__func__", None) is not _HOST_FETCH:
            return {}
        relaid = {st for st, _ in self._relayout}
        slots = [i for _, i in self._fetched]
        return {i: st for st, i in self._fetched if st not in relaid and slots.count(i) == 1}

    def __repr__(self) -> str:
        return (f"Executable({self.model_name!r}, target={self.target!r}, dtype={self.dtype}, "
                f"schedule={self.schedule.to_json()})")


#: Growth of a host buffer that a bigger batch outgrew: calls of varying sizes settle on one.
_POOL_SLACK = 1.25


def _pooled_buffer(runtime: Any, pooled: tuple | None, shape: tuple[int, ...],
                   dtype: Any) -> tuple[tuple[int, ...], Any, np.ndarray | None]:
    """``(shape, buffer, host capacity)`` of a pooled buffer for a call of a new ``shape``.

    A host buffer (a NumPy array) is a view at the start of a flat capacity array, which a
    later call of another size reuses when it fits: a server's batches vary in node count, and
    allocating (and zeroing, and faulting in) every temp of the program per call cost a TreeGRU
    b10 call about a millisecond. Buffers' contents are undefined at a call's start, as the
    runtime's ``allocate`` promises. A device buffer is allocated per shape, as before."""
    need = int(np.prod(shape, dtype=np.int64))
    capacity = pooled[2] if pooled is not None else None
    if capacity is not None:  # a host buffer: grow it only when outgrown
        if capacity.size < need:
            capacity = runtime.allocate((int(need * _POOL_SLACK),), dtype)
        return shape, capacity[:need].reshape(shape), capacity
    buffer = runtime.allocate(shape, dtype)
    host = isinstance(buffer, np.ndarray) and buffer.flags.c_contiguous
    return shape, buffer, buffer.reshape(-1) if host else None


def _refuse_non_finite(batch: LinearizedBatch) -> None:
    """:class:`~cortex.core.errors.NonFiniteInputError` naming the first node whose input
    features hold NaN or an infinity (``check_finite=True``)."""
    from cortex.core.errors import NonFiniteInputError

    finite = np.isfinite(batch.features).all(axis=1)
    if finite.all():
        return
    node = int(np.argmin(finite))
    value = batch.features[node][~np.isfinite(batch.features[node])][0]
    raise NonFiniteInputError(
        f"the input features of node {node} (structure {int(batch.node_input[node])}) hold {value}: "
        f"this executable was compiled with check_finite=True, which refuses NaN and infinities "
        f"(compile without it to let them propagate to the outputs, as the reference does)")
