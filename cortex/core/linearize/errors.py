"""Errors the linearizer raises for bad input, before any compiled code runs.

Pipeline position: raised by ``cortex.core.linearize`` (and the ``cortex.data`` readers). Every
error is a :class:`~cortex.core.errors.CortexError` and a ``ValueError`` subclass carrying
``input_index`` (the input's index in the batch, or None for batch-level problems) and ``path``
(the node: a tree path like ``"root.1.0"``, a node id for array forms, ``(i, j)`` for grids), and
its message names both so a person can find the node.
"""

from __future__ import annotations

from typing import Any

from ..errors import CortexError


class StructureError(CortexError, ValueError):
    """Base class: an input structure cannot be linearized safely."""

    def __init__(self, message: str, *, input_index: int | None = None, path: Any = None):
        self.input_index = input_index
        self.path = path
        self.detail = message
        where = []
        if input_index is not None:
            where.append(f"input {input_index}")
        if path is not None:
            where.append(f"node {path}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class EmptyBatchError(StructureError):
    """The batch holds no structure, or a structure holds no node."""


class ParseError(StructureError):
    """Malformed s-expression text (unbalanced brackets, empty node, trailing text...)."""


class CycleError(StructureError):
    """The structure has a cycle: no level order exists."""


class RootError(StructureError):
    """An input does not have exactly one root (a node without parent)."""


class NodeIndexError(StructureError):
    """A parent / child / edge index lies outside the input's node range."""


class ArityError(StructureError):
    """An internal node has a number of children the model does not accept."""


class TokenError(StructureError):
    """A token is missing, of the wrong type, unknown to the vocabulary, or out of range."""


class FeatureError(StructureError):
    """Feature vectors of the wrong shape or dimension."""


class MixedInputError(StructureError):
    """Inputs of one batch disagree on what nodes carry (tokens vs features)."""


class IndexOverflowError(StructureError):
    """The batch does not fit int32 indices."""


class MemoryLimitError(StructureError):
    """The batch is larger than the linearizer's memory budget (``linearize.set_limits``)."""


class UnsupportedInputError(StructureError, TypeError):
    """An object of a type the linearizer does not know how to interpret."""
