"""Inputs of ``cortex run``: a Parquet file or a folder of Python files, as a table of rows.

Pipeline position: on the driver, before :func:`cortex.distributed.job.run_inference`. The
driver reads the input and hands it to Ray in blocks (:func:`to_dataset`), so the workers need
no access to the input's file system; a corpus larger than the driver's memory is read on the
cluster instead, from Python (``ray.data.read_parquet`` and ``run_inference``).

* Parquet: the file as it is; when it has no id column, the row numbers become the ids.
* A folder of Python files: every ``*.py`` below it, in sorted order, one row per file
  (``unit="file"``; id: the path relative to the folder) or one row per function
  (``unit="function"``: every ``def`` and ``async def``, methods and nested functions
  included, decorators included; id: ``path:line:qualified.name``). Rows are ``id`` and
  ``source`` (the form ``python``). A file that does not parse is one row whose source is the
  file, so the run reports it as that row's error.

:func:`stdlib_function_rows` gives such rows for the functions of standard-library modules: a
deterministic corpus of real Python for the tests and ``benchmarks/bench_distributed.py``.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Any, Iterator

UNITS = ("file", "function")


def _functions(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every function definition of ``tree`` with its qualified name, in source order."""
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    found: list[tuple[ast.AST, str]] = []
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            inner = prefix
            if isinstance(child, ast.ClassDef):
                inner = f"{prefix}{child.name}."
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((child, f"{prefix}{child.name}"))
                inner = f"{prefix}{child.name}.<locals>."
            stack.append((child, inner))
    found.sort(key=lambda f: (f[0].lineno, f[0].col_offset))
    return iter(found)


def function_source(lines: list[str], node: Any) -> str:
    """The text of one function (decorators included), dedented so that it parses alone;
    ``ast.unparse`` of the node where dedenting cannot (a string literal that starts at a
    smaller indentation than the function)."""
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    text = textwrap.dedent("".join(lines[start - 1:node.end_lineno]))
    return ast.unparse(node) if text[:1] in (" ", "\t") else text


def _file_rows(text: str, name: str, unit: str) -> Iterator[tuple[str, str]]:
    """``(id, source)`` rows of one file's ``text``; ``name`` is its id (or id prefix)."""
    if unit == "file":
        yield name, text
        return
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        yield name, text  # the run reports why it does not parse
        return
    lines = text.splitlines(keepends=True)
    for node, qualname in _functions(tree):
        yield f"{name}:{node.lineno}:{qualname}", function_source(lines, node)


def _table(rows: list[tuple[str, str]]) -> Any:
    import pyarrow as pa

    return pa.table({"id": [r[0] for r in rows], "source": [r[1] for r in rows]})


def python_rows(folder: str | Path, unit: str = "file") -> Any:
    """The rows (a ``pyarrow.Table`` of ``id`` and ``source``) of the Python files below
    ``folder`` (module docstring)."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; the units are {', '.join(UNITS)}")
    root = Path(folder)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a folder")
    rows: list[tuple[str, str]] = []
    for path in sorted(root.rglob("*.py")):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", errors="replace")
            rows += _file_rows(text, path.relative_to(root).as_posix(), unit)
    if not rows:
        raise ValueError(f"no Python {'files' if unit == 'file' else 'functions'} below {root}")
    return _table(rows)


#: Standard-library modules (pure Python in every supported version) that
#: :func:`stdlib_function_rows` takes functions from, in this order.
STDLIB_MODULES = ("argparse", "ast", "inspect", "typing", "subprocess", "tarfile",
                  "configparser", "pickle", "pydoc", "shutil", "tempfile", "enum", "dataclasses",
                  "difflib", "optparse", "doctest", "mailbox", "logging", "ftplib", "imaplib",
                  "smtplib", "http.client", "urllib.request", "calendar", "gettext", "locale",
                  "statistics", "fractions", "threading", "unittest.case", "unittest.mock",
                  "xml.dom.minidom", "email.message", "email._header_value_parser",
                  "_pyio", "_pydecimal", "asyncio.base_events", "shlex", "zipfile", "tokenize",
                  "traceback", "pathlib", "selectors", "socket", "ssl", "string", "sysconfig")


def stdlib_function_rows(count: int) -> Any:
    """The first ``count`` functions of :data:`STDLIB_MODULES` as rows (``id``:
    ``module:line:name``, ``source``): a deterministic corpus of real Python for tests and
    benchmarks (the same for one Python version)."""
    import importlib.util

    rows: list[tuple[str, str]] = []
    for module in STDLIB_MODULES:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        if not origin or not origin.endswith(".py"):  # not in this build of Python
            continue
        rows += _file_rows(Path(origin).read_text(encoding="utf-8"), module, "function")
        if len(rows) >= count:
            return _table(rows[:count])
    raise ValueError(f"the standard library modules have {len(rows)} functions, not {count}")


def parquet_rows(path: str | Path, id_column: str = "id") -> Any:
    """The rows of a Parquet file (or folder of them), with row numbers as ``id_column``
    when the file has no such column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if id_column not in table.column_names:
        table = table.append_column(id_column, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    return table


def to_dataset(table: Any, rows_per_block: int) -> Any:
    """A Ray Dataset of ``table`` in blocks of ``rows_per_block`` rows, put in the object
    store by the driver."""
    import ray.data

    step = max(1, rows_per_block)
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, table.num_rows, step)]
                               or [table])
