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
3. uploads them, takes the output and temp buffers from the executable's pool (allocated on
   the first call of each shape, reused by every later call of that shape: steady-state calls
   allocate no device memory), launches the compiled artifact once, synchronizes and downloads
   the outputs into fresh host arrays (so results never alias the pool);
4. turns the output buffers into per-node states (``Lowered.states``) wrapped in
   :class:`~cortex.core.outputs.Outputs`.

The calling convention between the core and a backend :class:`~cortex.core.backend.Runtime`
is the rendered entry point's: ``runtime.launch(artifact, args)`` with ``args`` = every buffer
of the program in ``program.buffers`` order (device buffers from ``upload``/``allocate``)
followed by every size of ``program.sizes`` as a Python ``int``. The artifact performs the
program's host steps (its kernel launches) itself.

The params are prepared (derived params, the compile dtype, the schedule's weight layouts) and
uploaded once, when the executable is built.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from cortex.core.backend import Backend, Source
from cortex.core.graph import RecursiveGraph
from cortex.core.interpret import np_dtype
from cortex.core.loopir import Program, shape_function
from cortex.core.outputs import Outputs
from cortex.core.schedule import Schedule
from cortex.core.structure import LinearizedBatch

if TYPE_CHECKING:
    from cortex.core.lower import Lowered


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
                 params: Mapping[str, np.ndarray], model_name: str = "") -> None:
        self.target = target
        self.options = dict(options)
        self.lowered = lowered
        self.backend = backend
        self.source = source
        self.artifact = artifact
        self.cache_key = cache_key
        self.model_name = model_name or lowered.graph.name
        self.calls = 0
        self._linearize = linearize_options(lowered.graph)
        runtime = backend.runtime
        prepared = lowered.prepare_params(params)
        self._params = {name: runtime.upload(np.ascontiguousarray(a)) for name, a in prepared.items()}
        # Per buffer, once: its compiled shape function and NumPy dtype (calls only evaluate).
        self._buffers = tuple((b, shape_function(b.shape), np.dtype(np_dtype(b.dtype)))
                              for b in lowered.program.buffers)
        # Output/temp device buffers by name: (shape, buffer), reused while the shape repeats.
        self._pool: dict[str, tuple[tuple[int, ...], Any]] = {}
        self._lock = threading.Lock()  # the pool is shared: calls from several threads queue

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
        from cortex.core.linearize import linearize

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

    def _run(self, batch: LinearizedBatch) -> Outputs:
        program = self.lowered.program
        runtime = self.backend.runtime
        inputs, sizes = self.lowered.bind_batch(batch)
        device: dict[str, Any] = dict(self._params)
        shapes: dict[str, tuple[int, ...]] = {}
        for buf, shape_of, dtype in self._buffers:
            if buf.name in device:
                continue
            shape = shapes[buf.name] = shape_of(sizes)
            if buf.read_only:
                if buf.name not in inputs:
                    raise RuntimeError(f"internal error: the lowering bound no array for "
                                       f"{buf.role} buffer {buf.name!r}")
                device[buf.name] = runtime.upload(np.ascontiguousarray(inputs[buf.name]))
                continue
            pooled = self._pool.get(buf.name)
            if pooled is None or pooled[0] != shape:
                pooled = self._pool[buf.name] = (shape, runtime.allocate(shape, dtype))
            device[buf.name] = pooled[1]
        args = tuple(device[b.name] for b in program.buffers)
        args += tuple(int(sizes[s.name]) for s in program.sizes)
        runtime.launch(self.artifact, args)
        runtime.synchronize()
        host = {
            b.name: runtime.download(device[b.name], np.empty(shapes[b.name], dtype))
            for b, _, dtype in self._buffers if b.role == "output"
        }
        self.calls += 1
        graph = self.graph
        return Outputs(self.lowered.states(host), batch, graph.outputs.states, self.dtype,
                       every_node=graph.outputs.every_node)

    def __repr__(self) -> str:
        return (f"Executable({self.model_name!r}, target={self.target!r}, dtype={self.dtype}, "
                f"schedule={self.schedule.to_json()})")
