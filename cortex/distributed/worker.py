"""The worker: one executable per process, batches of rows in, a table of root states out.

Pipeline position: a Ray Data actor (``map_batches`` with an actor pool) runs one
:class:`InferenceWorker`; it can as well be called in-process, which is how the single-process
baseline and the unit tests run the very same code. ``__init__`` builds the executable once from
an :class:`~cortex.distributed.sources.ExecutableSource` (a compile, ~1 s for ``llvm``); each
call turns a batch of rows into structures (:mod:`cortex.distributed.rows`), runs them as one
batch (one native call) and returns a ``pyarrow.Table``:

* the id column, as given;
* one column per root state: ``fixed_size_list<float>[size]`` (the state flattened; its shape is
  in the field's metadata under ``shape`` when it has more than one axis), NaN for failed rows
  (not null: Arrow's Parquet reader before pyarrow 26 cannot read a null fixed-size list);
* ``error``: null, or why the row failed (``"ParseError: ..."``).

A row that cannot be read or linearized becomes an error record and the rest of the batch runs
(the linearizer names the failing input, so a batch with ``k`` bad rows costs ``k + 1`` calls).
Failing fast is the driver's decision (``run_inference(fail_fast=True)`` raises ``RowError`` on
the first error record it receives), so workers always return records.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any, Mapping, Sequence

import numpy as np

from cortex.distributed.rows import ROW_ERRORS, to_structure

ERROR_COLUMN = "error"


def _describe(error: BaseException) -> str:
    """An error record's text: the exception's class and message, without the linearizer's
    "input N" (a position in a batch, not the row's id)."""
    from cortex.core.linearize import StructureError

    if isinstance(error, StructureError) and error.input_index is not None:
        where = "" if error.path is None else f"node {error.path}: "
        return f"{type(error).__name__}: {where}{error.detail}"
    return f"{type(error).__name__}: {error}"


def _input_errors() -> tuple[type[BaseException], ...]:
    """What a call raises for an input that does not fit: the linearizer's ``StructureError``
    (it names the input) and the lowering's ``BatchMismatchError`` (it does not)."""
    from cortex.core.linearize import StructureError
    from cortex.core.lowering.lower import BatchMismatchError

    return StructureError, BatchMismatchError


class InferenceWorker:
    """Build the executable once; map batches of rows to root states (module docstring)."""

    def __init__(self, source: Any, *, column: str, form: str, id_column: str = "id",
                 states: Sequence[str] | None = None, words_column: str | None = None,
                 vocab: Any = None, freeze_gc: bool = False) -> None:
        """``freeze_gc``: take every object that exists once the executable is built (the
        modules, the executable) out of the garbage collector's view (``gc.freeze``), so the
        full collections that building trees triggers stay cheap. For a worker process; it
        changes the whole process's collector, so in-process use leaves it off."""
        start = time.perf_counter()
        self.exe = source.build()
        self.build_seconds = time.perf_counter() - start
        if freeze_gc:
            gc.collect()
            gc.freeze()
        graph = self.exe.graph
        self.states = tuple(states) if states else tuple(graph.outputs.states)
        known = {s.name: s for s in graph.states}
        for name in self.states:
            if name not in known:
                raise ValueError(f"unknown state {name!r}: the model has {', '.join(known)}")
            if name in (id_column, ERROR_COLUMN):
                raise ValueError(f"state {name!r} has the name of the {name!r} column")
        self.shapes = {name: tuple(known[name].shape) for name in self.states}
        self.column, self.form, self.id_column = column, form, id_column
        self.words_column, self.vocab = words_column, vocab
        print(f"cortex worker pid {os.getpid()}: {source.describe()}, built in "
              f"{self.build_seconds:.2f} s", file=sys.stderr, flush=True)

    def output_schema(self, id_type: Any) -> Any:
        """The schema of every table this worker returns, for ids of ``id_type``."""
        import pyarrow as pa

        value = pa.from_numpy_dtype(np.dtype(self.exe.dtype))
        fields = [pa.field(self.id_column, id_type)]
        for name, shape in self.shapes.items():
            meta = {"shape": json.dumps(list(shape))} if len(shape) > 1 else None
            fields.append(pa.field(name, pa.list_(value, int(np.prod(shape, dtype=np.int64))),
                                   metadata=meta))
        fields.append(pa.field(ERROR_COLUMN, pa.string()))
        return pa.schema(fields)

    def __call__(self, batch: Mapping[str, Any]) -> Any:
        """A batch of rows (column name -> array, as Ray's ``"numpy"`` batch format gives)
        -> a ``pyarrow.Table`` of ids, root states and errors."""
        import pyarrow as pa

        ids = pa.array(batch[self.id_column])
        values = batch[self.column]
        words = batch[self.words_column] if self.words_column else None
        n = len(ids)
        errors: list[str | None] = [None] * n
        structures: list[Any] = [None] * n
        for i in range(n):
            try:
                structures[i] = to_structure(values[i], self.form,
                                             None if words is None else words[i])
            except ROW_ERRORS as e:
                errors[i] = _describe(e)
        good = [i for i in range(n) if errors[i] is None]
        roots = self._run(structures, good, errors)
        return self._table(ids, roots, good, errors)

    def _run(self, structures: list[Any], good: list[int],
             errors: list[str | None]) -> dict[str, np.ndarray]:
        """Root states of the rows ``good`` (in that order; bad ones leave ``good`` and get an
        error in ``errors``): one call, again without each row the call rejects."""
        while good:
            try:
                out = self.exe([structures[i] for i in good], vocab=self.vocab)
            except _input_errors() as e:
                index = getattr(e, "input_index", None)
                if index is not None and 0 <= index < len(good):
                    errors[good[index]] = _describe(e)
                    del good[index]
                    continue
                before = len(good)
                self._isolate(structures, good, errors)
                if len(good) == before:  # every row is fine alone: the batch is not
                    raise
                continue
            return {name: out.root(name).reshape(len(good), -1) for name in self.states}
        return {}

    def _isolate(self, structures: list[Any], good: list[int],
                 errors: list[str | None]) -> None:
        """An error that names no row (a token id outside the model's vocabulary, say): find
        the bad rows with one call each."""
        for i in list(good):
            try:
                self.exe([structures[i]], vocab=self.vocab)
            except _input_errors() as e:
                errors[i] = _describe(e)
                good.remove(i)

    def _table(self, ids: Any, roots: Mapping[str, np.ndarray], good: list[int],
               errors: list[str | None]) -> Any:
        import pyarrow as pa

        schema = self.output_schema(ids.type)
        n = len(ids)
        columns = [ids]
        for name in self.states:
            size = schema.field(name).type.list_size
            flat = np.full((n, size), np.nan, dtype=np.dtype(self.exe.dtype))
            if good:
                flat[good] = roots[name]
            columns.append(pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), size))
        columns.append(pa.array(errors, type=pa.string()))
        return pa.Table.from_arrays(columns, schema=schema)
