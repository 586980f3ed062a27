"""The driver's single committer: every input id exactly once in the output, or no output.

Pipeline position: the end of a distributed run, on the driver. Workers never write the output;
their tables stream back to the driver (Ray Data's ``iter_batches``), which appends them to a
temporary Parquet file next to the destination. :meth:`ExactlyOnceWriter.commit` then checks
the ids written against the ids of the input:

* an id written twice (a batch computed again after a failure, should Ray ever deliver both
  copies) is written once: the later copies are dropped, which is safe because a row's output
  is a function of the row alone;
* an id missing, or one that is not an input id, is an error: nothing is committed;

and only then renames the temporary file onto the destination (``os.replace``: atomic on one
file system). A reader therefore sees either no file or a file with every input id exactly once.
A failed or interrupted run removes its temporary file (:meth:`abort`, or the ``with`` block).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Rows buffered before the writer appends a Parquet row group.
ROW_GROUP_ROWS = 65536


class CommitError(RuntimeError):
    """The ids written do not match the input's ids: nothing was committed."""


@dataclass(frozen=True)
class CommitReport:
    path: Path
    rows: int
    errors: int
    duplicates_dropped: int


def _sample(values: Any, limit: int = 5) -> str:
    shown = values.slice(0, limit).to_pylist()
    more = f" and {len(values) - limit} more" if len(values) > limit else ""
    return f"{shown}{more}"


def check_destination(path: str | Path, overwrite: bool = False) -> Path:
    """``path`` as a Path, after checking that its folder exists and that it does not (unless
    ``overwrite``)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; remove it or allow overwriting")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"no directory {path.parent} for the output")
    return path


def check_unique_ids(ids: Any, column: str = "id") -> None:
    """Raise ``ValueError`` when the input's ``ids`` (a pyarrow array) have nulls or repeats:
    exactly-once is defined by id."""
    import pyarrow.compute as pc

    if ids.null_count:
        raise ValueError(f"the input's {column!r} column has {ids.null_count} null ids")
    counts = pc.value_counts(ids)
    repeated = counts.filter(pc.greater(counts.field("counts"), 1)).field("values")
    if len(repeated):
        raise ValueError(f"the input's {column!r} column repeats ids: {_sample(repeated)}")


class ExactlyOnceWriter:
    """Append tables to a temporary Parquet file; :meth:`commit` checks ids and renames it."""

    def __init__(self, path: str | Path, *, id_column: str = "id", error_column: str = "error",
                 overwrite: bool = False, metadata: dict[str, str] | None = None) -> None:
        self.path = check_destination(path, overwrite)
        self.id_column, self.error_column = id_column, error_column
        self.metadata = metadata or {}
        self.tmp = self.path.parent / f".{self.path.name}.{uuid.uuid4().hex}.tmp"
        self._writer: Any = None
        self._schema: Any = None
        self._pending: list[Any] = []
        self._pending_rows = 0
        self._ids: list[Any] = []
        self.rows = 0
        self.errors = 0

    def __enter__(self) -> "ExactlyOnceWriter":
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is not None:
            self.abort()

    def write(self, table: Any) -> None:
        """Append one table of worker output (same schema every time)."""
        import pyarrow.parquet as pq

        if self._schema is None:
            meta = {**(table.schema.metadata or {}),
                    **{k.encode(): v.encode() for k, v in self.metadata.items()}}
            self._schema = table.schema.with_metadata(meta)
            self._writer = pq.ParquetWriter(self.tmp, self._schema)
        table = table.cast(self._schema)
        self._ids.append(table.column(self.id_column))
        self.rows += table.num_rows
        self.errors += table.num_rows - table.column(self.error_column).null_count
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=ROW_GROUP_ROWS)
            self._pending, self._pending_rows = [], 0

    def commit(self, expected_ids: Any) -> CommitReport:
        """Check the ids written against ``expected_ids`` (the input's, a pyarrow array; see
        the module docstring), drop repeats, rename onto the destination."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._writer is None:
            raise CommitError("no output was written")
        self._flush()
        self._writer.close()
        written = pa.chunked_array([c for ids in self._ids for c in ids.chunks],
                                   type=self._schema.field(self.id_column).type)
        expected = pa.chunked_array([expected_ids]).cast(written.type) \
            if isinstance(expected_ids, pa.Array) else expected_ids.cast(written.type)
        missing = pc.filter(expected, pc.invert(pc.is_in(expected, value_set=written)))
        if len(missing):
            self.abort()
            raise CommitError(f"{len(missing)} input ids have no output row: "
                              f"{_sample(missing.combine_chunks())}")
        unknown = pc.filter(written, pc.invert(pc.is_in(written, value_set=expected)))
        if len(unknown):
            self.abort()
            raise CommitError(f"{len(unknown)} output ids are not input ids: "
                              f"{_sample(unknown.combine_chunks())}")
        dropped = 0
        if len(written) != len(expected):
            dropped = self._drop_repeats(written)
        os.replace(self.tmp, self.path)
        return CommitReport(self.path, self.rows, self.errors, dropped)

    def _drop_repeats(self, written: Any) -> int:
        """Rewrite the temporary file keeping each id's first row; how many rows went."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        counts = pc.value_counts(written)
        repeated = counts.filter(pc.greater(counts.field("counts"), 1)).field("values")
        seen: set[Any] = set()
        rows = errors = 0
        rewritten = self.tmp.with_suffix(".dedup")
        with pq.ParquetWriter(rewritten, self._schema) as out:
            for batch in pq.ParquetFile(self.tmp).iter_batches(batch_size=ROW_GROUP_ROWS):
                ids = batch.column(self.id_column)
                keep = ~pc.is_in(ids, value_set=repeated).to_numpy(zero_copy_only=False)
                for i in np.flatnonzero(~keep):  # rows of repeated ids: keep the first
                    key = ids[int(i)].as_py()
                    keep[i] = key not in seen
                    seen.add(key)
                kept = pa.Table.from_batches([batch]).filter(pa.array(keep))
                rows += kept.num_rows
                errors += kept.num_rows - kept.column(self.error_column).null_count
                out.write_table(kept, row_group_size=ROW_GROUP_ROWS)
        os.replace(rewritten, self.tmp)
        dropped = self.rows - rows
        self.rows, self.errors = rows, errors
        return dropped

    def abort(self) -> None:
        """Close and remove the temporary file (nothing is committed)."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - already failing; the file goes anyway
                pass
        for path in (self.tmp, self.tmp.with_suffix(".dedup")):
            path.unlink(missing_ok=True)
