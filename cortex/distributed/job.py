"""A distributed run: a Ray Dataset of rows through a pool of workers into one Parquet file.

Pipeline position: the top of :mod:`cortex.distributed`, called by ``cortex run`` and by user
code. :func:`run_inference` does, on the driver:

1. check the executable source (target, options, model) before anything starts;
2. check that every input row has a unique id, and materialize the input in Ray's object store
   in blocks of about ``batch_size`` rows — before any worker exists, so reading the input
   never waits for CPUs the workers hold, and work is spread over the pool in small pieces;
3. ``map_batches`` with a pool of ``actors`` :class:`~cortex.distributed.worker.InferenceWorker`
   actors, each reserving ``source.threads`` CPUs and building its executable once. Ray
   restarts an actor that dies and runs its unfinished batch again (Ray Data's actor pools
   default to unlimited restarts and task retries);
4. stream the workers' tables to the driver's :class:`~cortex.distributed.commit.ExactlyOnceWriter`,
   which commits the output file only with every input id exactly once.

Ray itself is started by the caller (``ray.init(...)``; ``cortex run`` does it), or here with
``ray.init()``'s defaults when it is not running.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from cortex.distributed.commit import ExactlyOnceWriter, check_unique_ids
from cortex.distributed.progress import Progress, ProgressLine
from cortex.distributed.rows import input_columns
from cortex.distributed.worker import ERROR_COLUMN, InferenceWorker

#: Blocks of input per actor at most: enough to balance the load, few enough that per-block
#: overhead stays small for a corpus of millions of rows.
MAX_BLOCKS_PER_ACTOR = 64


def require_ray() -> Any:
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401 - the Data library is what the runs use
    except ImportError as e:
        from cortex.core.plugin.distribution import pip_install

        raise ImportError(f"distributed runs need Ray Data: {pip_install('ray')} ({e})") from e
    return ray


class RowError(ValueError):
    """A row could not be read or linearized and the run was told to fail fast (raised on the
    driver, from the row's error record)."""

    def __init__(self, row_id: Any, message: str) -> None:
        super().__init__(f"row {row_id!r}: {message}")
        self.row_id = row_id
        self.detail = message


@dataclass(frozen=True)
class RunReport:
    """What a run did. ``prepare_seconds``: materializing the input and checking its ids;
    ``startup_seconds``: from starting the pool to the first output (actors starting and
    compiling, the first batch); ``seconds``: the whole run, commit included."""

    output: Path
    rows: int
    errors: int
    duplicates_dropped: int
    actors: int
    threads: int
    source: str
    prepare_seconds: float
    startup_seconds: float
    seconds: float

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def _raise_first_error(table: Any, id_column: str) -> None:
    """Raise :class:`RowError` for the first error record of ``table``, if any."""
    errors = table.column(ERROR_COLUMN)
    if errors.null_count < len(errors):
        i, error = next((i, e) for i, e in enumerate(errors.to_pylist()) if e is not None)
        raise RowError(table.column(id_column)[i].as_py(), error)


@contextlib.contextmanager
def _quiet_ray_data(ray: Any, dataset: Any) -> Iterator[None]:
    """No Ray Data progress bars or start-up lines (they would interleave with ours): off in
    the current context and in ``dataset``'s own (a dataset keeps the context it was made in,
    and so do the datasets made from it), as they were afterwards."""
    contexts = {id(c): c for c in (ray.data.DataContext.get_current(),
                                   getattr(dataset, "context", None)) if c is not None}
    saved = [(c, n, getattr(c, n)) for c in contexts.values()
             for n in ("enable_progress_bars", "print_on_execution_start") if hasattr(c, n)]
    try:
        for c, n, _ in saved:
            setattr(c, n, False)
        yield
    finally:
        for c, n, value in saved:
            setattr(c, n, value)


def _prepare(dataset: Any, id_column: str, batch_size: int, actors: int) -> tuple[Any, Any]:
    """The input in the object store, in blocks of about ``batch_size`` rows (at most
    ``MAX_BLOCKS_PER_ACTOR`` per actor), and its ids, checked unique."""
    import pyarrow as pa

    ready = dataset.materialize()
    chunks = [b.column(id_column) for b in ready.select_columns([id_column]).iter_batches(
        batch_format="pyarrow", batch_size=None)]
    ids = pa.chunked_array([c for chunk in chunks for c in chunk.chunks]).combine_chunks() \
        if chunks else pa.array([])
    if len(ids) == 0:
        raise ValueError("the input has no rows")
    check_unique_ids(ids, id_column)
    blocks = max(1, min(math.ceil(len(ids) / batch_size), MAX_BLOCKS_PER_ACTOR * actors))
    if ready.num_blocks() < blocks:
        ready = ready.repartition(blocks).materialize()
    return ready, ids


def run_inference(dataset: Any, source: Any, output: str | Path, *, column: str | None = None,
                  form: str | None = None, id_column: str = "id",
                  words_column: str | None = None, states: Sequence[str] | None = None,
                  actors: int = 1, batch_size: int = 256, fail_fast: bool = False,
                  vocab: Any = None, overwrite: bool = False,
                  progress: bool | Callable[[Progress], None] = True) -> RunReport:
    """Run ``source``'s executable over every row of ``dataset`` (a ``ray.data.Dataset``) and
    write ``output`` (one Parquet file: the id, one column per root state, ``error``).

    ``column``/``form``: where each row's structure is and how to read it
    (:mod:`cortex.distributed.rows`; by default from the column's name). ``words_column``: the
    token ids of a ``parents`` row (default ``words`` when present). ``states``: the root
    states to keep (default: the model's outputs). ``actors``: workers in the pool, each with
    ``source.threads`` CPUs. ``batch_size``: rows per call. ``fail_fast``: the first bad row
    fails the run (:class:`RowError`, raised on the driver) instead of becoming an error
    record. ``progress``: print progress to stderr, or call this with each
    :class:`~cortex.distributed.progress.Progress`.
    """
    ray = require_ray()
    from ray.data import ActorPoolStrategy

    if not isinstance(actors, int) or actors < 1:
        raise ValueError(f"actors must be an integer >= 1, got {actors!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    source.check()
    columns = dataset.columns()
    read = input_columns(columns, id_column=id_column, column=column, form=form,
                         words_column=words_column)
    if not ray.is_initialized():
        ray.init()
    cpus = ray.cluster_resources().get("CPU", 0)
    if actors * source.threads > cpus:
        raise ValueError(f"{actors} actors x {source.threads} threads need "
                         f"{actors * source.threads} CPUs; the Ray cluster has {cpus:g}")
    report = progress if callable(progress) else ProgressLine() if progress else None
    metadata = {"cortex.source": source.describe(), "cortex.column": read.column,
                "cortex.form": read.form}
    started = time.perf_counter()
    with _quiet_ray_data(ray, dataset), ExactlyOnceWriter(
            output, id_column=id_column, error_column=ERROR_COLUMN, overwrite=overwrite,
            metadata=metadata) as writer:
        if sorted(read.names) != sorted(columns):  # no column travels to workers unread
            dataset = dataset.select_columns(read.names)
        ready, ids = _prepare(dataset, id_column, batch_size, actors)
        mapped = ready.map_batches(
            InferenceWorker, fn_constructor_args=(source,),
            fn_constructor_kwargs=dict(column=read.column, form=read.form,
                                       id_column=id_column, states=states,
                                       words_column=read.words, vocab=vocab, freeze_gc=True),
            batch_size=batch_size, batch_format="numpy",
            compute=ActorPoolStrategy(size=actors), num_cpus=source.threads)
        pool_started = time.perf_counter()
        first = None
        for table in mapped.iter_batches(batch_format="pyarrow", batch_size=None):
            if fail_fast:
                _raise_first_error(table, id_column)
            writer.write(table)
            first = first or time.perf_counter()
            if report:
                report(Progress(writer.rows, len(ids), writer.errors,
                                time.perf_counter() - started))
        committed = writer.commit(ids)
    seconds = time.perf_counter() - started
    if report:
        report(Progress(committed.rows, len(ids), committed.errors, seconds, done=True))
    return RunReport(committed.path, committed.rows, committed.errors,
                     committed.duplicates_dropped, actors, source.threads, source.describe(),
                     pool_started - started, (first or pool_started) - pool_started, seconds)
