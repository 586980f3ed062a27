"""The compiled model: ``exe(structures) -> Outputs``, with no recompilation per call.

Pipeline position: the product of ``cortex.core.pipeline.build`` and the host side of every
call. Compilation (trace, passes, lowering, scheduling, rendering, compiling) happened once; a
call only

1. linearizes the structures (``cortex.core.linearize``) with the model's arity and its token
   vocabulary / feature size, so a structure that does not fit the model is rejected with the
   linearizer's ``ValueError`` before any generated code runs (a ready ``LinearizedBatch`` is
   validated instead);
2. binds the batch to the program's index/input buffers and size symbols (``Lowered.bind_batch``,
   which checks the batch against the model: ``BatchMismatchError``, a ``ValueError``);
3. stages them (``runtime.stage``: an upload, or nothing on a host runtime), takes the output
   and temp buffers from the executable's pool (allocated on the first call of each shape,
   reused by every later call of that shape: steady-state calls allocate no device memory),
   launches the compiled artifact once, synchronizes and fetches the outputs into fresh host
   arrays (``runtime.fetch``; results never alias the pool);
4. turns the output buffers into per-node states (``Lowered.states``) wrapped in
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
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from cortex.core.frontend.graph import RecursiveGraph
from cortex.core.linearize import linearize
from cortex.core.linearize.structure import LinearizedBatch
from cortex.core.loopir import Program, shape_function
from cortex.core.loopir.interpret import np_dtype
from cortex.core.lowering.schedule import Schedule
from cortex.core.plugin.backend import Backend, HostRuntime, Source
from cortex.core.runtime.outputs import Outputs

if TYPE_CHECKING:
    from cortex.core.lowering.lower import Lowered
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


class Executable:
    """A model compiled for one target with one set of options; call it on structures."""

    def __init__(self, *, target: str, options: Mapping[str, Any], lowered: "Lowered",
                 backend: Backend, source: Source, artifact: Any, cache_key: str,
                 params: Mapping[str, np.ndarray], model_name: str = "",
                 prepared: Mapping[str, np.ndarray] | None = None,
                 tables: "TokenTables | None" = None, schedule_source: str = "") -> None:
        """``prepared``: ``lowered.prepare_params(params)`` when the caller already made it
        (the pipeline does, in a thread overlapping the backend's compile); ``tables``: the
        filler of the token tables that ``prepared`` holds as zero pages (host runtimes only);
        ``schedule_source``: which schedule this is and why (a tuning record, the default
        rules, given by the caller)."""
        self.target = target
        self.options = dict(options)
        self.lowered = lowered
        self.backend = backend
        self.source = source
        self.artifact = artifact
        self.cache_key = cache_key
        self.schedule_source = schedule_source
        self.model_name = model_name or lowered.graph.name
        self.calls = 0
        self._linearize = linearize_options(lowered.graph)
        runtime = backend.runtime
        if prepared is None:
            prepared = lowered.prepare_params(params)
        self._params = {name: self._upload_param(runtime, a, params) for name, a in prepared.items()}
        self._tables = tables
        if tables is not None:  # the arrays the program reads, which the calls fill in place
            buf_of = dict(lowered.param_names)
            tables.attach({n: self._params[buf_of[n]] for n in tables.names if n in buf_of})
        program = lowered.program
        # Per buffer, once: its compiled shape function and NumPy dtype (calls only evaluate).
        self._buffers = tuple((b, shape_function(b.shape), np.dtype(np_dtype(b.dtype)))
                              for b in program.buffers)
        # The launch arguments with the params in place; per call the staged inputs
        # (slot, name, role) and the pooled outputs/temps (slot, name, shape fn, dtype) fill in.
        self._template: list[Any] = [self._params.get(b.name) for b in program.buffers]
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
        graph = lowered.graph
        self._out_states = tuple(graph.outputs.states)
        self._every_node = bool(graph.outputs.every_node)
        # Output/temp device buffers by name: (shape, buffer), reused while the shape repeats.
        self._pool: dict[str, tuple[tuple[int, ...], Any]] = {}
        # the sizes the pooled slots were last resolved for, those slots' (slot, buffer) and
        # the fetches of the states: (state, slot, shape, dtype)
        self._pool_key: tuple[int, ...] | None = None
        self._pool_args: tuple[tuple[int, Any], ...] = ()
        self._fetch_args: tuple[tuple[str, int, tuple[int, ...], np.dtype], ...] = ()
        self._lock = threading.Lock()  # the pool is shared: calls from several threads queue

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

    # ---- calls -----------------------------------------------------------------------------

    def linearize(self, structures: Any, *, vocab: Any = None) -> LinearizedBatch:
        """The batch a call would run: structures linearized and checked against the model."""
        if isinstance(structures, LinearizedBatch):
            # the structural invariants here; the fit to the model (arity, token ids,
            # features) in ``Lowered.bind_batch``, which raises BatchMismatchError
            structures.validate()
            return structures
        return linearize(structures, vocab=vocab, **self._linearize)

    def __call__(self, structures: Any, *, vocab: Any = None) -> Outputs:
        """Run the model on one structure or a list of them (a batch), or on a ready
        :class:`LinearizedBatch`; ``vocab`` maps string tokens to ids."""
        batch = self.linearize(structures, vocab=vocab)
        return self.run(batch)

    def run(self, batch: LinearizedBatch) -> Outputs:
        """Run an already linearized and checked batch (see :meth:`linearize`). Safe to call
        from several threads: calls of one executable run one at a time."""
        with self._lock:
            return self._run(batch)

    @property
    def table_rows(self) -> tuple[int, int] | None:
        """``(token ids whose table rows are computed, vocabulary size)``, or None when this
        executable has no tables filled on use (none in its program, or a device)."""
        if self._tables is None:
            return None
        return self._tables.rows_done, self._tables.vocab

    def fill_tables(self) -> int:
        """Compute every row of the token tables that no call has needed yet (a call computes
        the rows of its batch's tokens first; see the module docstring). Returns how many token
        ids that was: 0 once done, and always on a device (whose tables are made whole at
        compile time)."""
        if self._tables is None:
            return 0
        with self._lock:
            return self._tables.fill_all()

    def _run(self, batch: LinearizedBatch) -> Outputs:
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
        args += key
        runtime.launch(self.artifact, tuple(args))
        runtime.synchronize()
        fetch = runtime.fetch
        if getattr(fetch, "__func__", None) is _HOST_FETCH:  # the host copy, inlined
            states = {st: args[i].copy() for st, i, _, _ in self._fetch_args}
        else:
            states = {st: fetch(args[i], shape, dtype) for st, i, shape, dtype in self._fetch_args}
        self.calls += 1
        return Outputs._fresh(states, batch, self._out_states, self.lowered.dtype,
                              self._every_node)

    def _resolve_pool(self, key: tuple[int, ...], sizes: Mapping[str, int]) -> None:
        """The pooled buffers for ``sizes``: each kept while its shape repeats, else allocated."""
        runtime = self.backend.runtime
        self._pool_key = None  # stays unset if an allocation below fails
        resolved, shapes = [], {}
        for i, name, shape_of, dtype in self._pooled:
            shape = shapes[i] = shape_of(sizes)
            pooled = self._pool.get(name)
            if pooled is None or pooled[0] != shape:
                pooled = self._pool[name] = (shape, runtime.allocate(shape, dtype))
            resolved.append((i, pooled[1]))
        self._pool_args = tuple(resolved)
        self._fetch_args = tuple((st, i, shapes[i], self._buffers[i][2])
                                 for st, i in self._fetched)
        self._pool_key = key

    def __repr__(self) -> str:
        return (f"Executable({self.model_name!r}, target={self.target!r}, dtype={self.dtype}, "
                f"schedule={self.schedule.to_json()})")
