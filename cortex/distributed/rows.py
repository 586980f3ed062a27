"""Table rows -> structures the linearizer takes: the input forms of a distributed run.

Pipeline position: inside each worker, before ``exe(structures)``. A row of the input table
holds one structure in a column; its *form* says how to read it:

| form | column holds | becomes |
|---|---|---|
| ``python`` | Python source text | ``cortex.data.ast_tree(text)`` (a tree of AST node-type ids) |
| ``sexpr`` | an s-expression string | the string itself (the linearizer parses it) |
| ``parents`` | a list of parent ids (``-1`` = root) | ``ParentArray(parents, words=...)``, words from a second column |
| ``object`` | any structure ``linearize`` takes (nested tuples, ``Node``, ``Sequence``, ``Grid``...) | itself |

By default the column and form come from the column's name: ``source`` is Python source,
``sexpr`` an s-expression, ``parents`` a parent array (with ``words`` when present) and ``tree``
any Python object (:data:`FORM_OF_COLUMN`). ``object`` rows exist only in a Ray Dataset made in
Python (Ray pickles them); files hold the other three.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

FORMS = ("python", "sexpr", "parents", "object")

#: The form a column's name implies when no form is given.
FORM_OF_COLUMN = {"source": "python", "sexpr": "sexpr", "parents": "parents", "tree": "object"}

#: The exceptions that make one row an error record instead of a failed job: the linearizer's
#: ``StructureError`` (a ``ValueError``), and what a malformed value raises while being read.
ROW_ERRORS = (ValueError, TypeError, SyntaxError, RecursionError)


def choose_form(columns: Iterable[str], column: str | None = None,
                form: str | None = None) -> tuple[str, str]:
    """``(column, form)`` for a table with ``columns``: the given ones, or the first column
    named in :data:`FORM_OF_COLUMN` (and the form its name implies)."""
    columns = list(columns)
    if form is not None and form not in FORMS:
        raise ValueError(f"unknown input form {form!r}; the forms are {', '.join(FORMS)}")
    if column is None:
        named = [c for c in columns if c in FORM_OF_COLUMN]
        if not named:
            known = ", ".join(f"{c!r} ({f})" for c, f in FORM_OF_COLUMN.items())
            raise ValueError(f"no input column: the table has {columns}; name one of {known} "
                             f"or give the column (and its form)")
        column = named[0]
    elif column not in columns:
        raise ValueError(f"input column {column!r} is not in the table's columns {columns}")
    if form is None:
        if column not in FORM_OF_COLUMN:
            raise ValueError(f"give the form of column {column!r}: one of {', '.join(FORMS)}")
        form = FORM_OF_COLUMN[column]
    return column, form


@dataclass(frozen=True)
class InputColumns:
    """Which columns of an input table a run reads, and how."""

    id: str
    column: str
    form: str
    words: str | None

    @property
    def names(self) -> list[str]:
        return [self.id, self.column] + ([self.words] if self.words else [])


def input_columns(columns: Iterable[str], *, id_column: str = "id", column: str | None = None,
                  form: str | None = None, words_column: str | None = None) -> InputColumns:
    """The columns of a table with ``columns`` that a run reads: the id (which must be there),
    the structure (:func:`choose_form`) and, for parent arrays, the token ids (``words`` by
    default, when present)."""
    columns = list(columns)
    column, form = choose_form(columns, column, form)
    if id_column not in columns:
        raise ValueError(f"no id column {id_column!r} in the input's columns {columns}: every "
                         f"row needs a unique id (add one, or name it)")
    if words_column is None and form == "parents" and "words" in columns:
        words_column = "words"
    if words_column is not None and words_column not in columns:
        raise ValueError(f"words column {words_column!r} is not in the table's columns {columns}")
    return InputColumns(id_column, column, form, words_column)


def to_structure(value: Any, form: str, words: Any = None) -> Any:
    """One row's structure for ``exe(...)``; raises one of :data:`ROW_ERRORS` for a bad row."""
    if form == "python":
        from cortex.data import ast_tree

        if not isinstance(value, str):
            raise TypeError(f"expected Python source text, got {type(value).__name__}")
        return ast_tree(value)
    if form == "sexpr":
        if not isinstance(value, str):
            raise TypeError(f"expected an s-expression string, got {type(value).__name__}")
        return value
    if form == "parents":
        from cortex.data import ParentArray

        if value is None:
            raise TypeError("expected a list of parent ids, got None")
        parents = np.asarray(value)
        if parents.dtype.kind not in "iu":
            raise TypeError(f"parent ids must be integers, got {parents.dtype}")
        return ParentArray(parents, words=None if words is None else np.asarray(words))
    if form == "object":
        if value is None:
            raise TypeError("expected a structure, got None")
        return value
    raise ValueError(f"unknown input form {form!r}; the forms are {', '.join(FORMS)}")
