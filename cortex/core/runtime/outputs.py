"""What one call of a compiled model returns: every node's states, addressable by input and node.

Pipeline position: the last step of :class:`cortex.core.runtime.executable.Executable.__call__`. The
backend runtime fills the program's output buffers; the lowering's ``Lowered.states`` turns them
into per-node state arrays; :class:`Outputs` pairs those with the call's
:class:`~cortex.core.linearize.structure.LinearizedBatch` so rows can be mapped back to the user's nodes.

The contract (every target returns exactly this):

* Rows are the linearizer's node ids: ``nodes(state)[v]`` is node ``v`` of the batch, numbered
  level by level, leaves first (see ``cortex/core/linearize/structure.py``). Arrays are NumPy, in the
  compile ``dtype`` (``float32`` or ``float64``), C-contiguous, owned by the caller.
* ``root(state)`` is ``[B, *shape]``: row ``b`` is the root of input ``b`` (the sink of a DAG, the
  last element of a sequence).
* ``of(b, state)`` is ``[n_b, *shape]``: the rows of input ``b``'s nodes in node-id order (so
  children before parents, the root last); ``node_ids(b)`` says which rows they are and
  ``keys(b)`` gives the user's name for each (a path like ``"root.1.0"`` for nested trees, a node
  id for parent arrays and edge lists, ``(row, col)`` for grids).
* ``node_origin[v]`` is ``(b, key)`` for row ``v`` — the linearizer's origin map; its
  ``row(b, key)`` inverts it. It is ``None`` when the call was given a ready ``LinearizedBatch``
  without origins.
* ``states`` lists every state the model computes; ``outputs`` the ones the model declares as
  outputs (``as_dict()`` returns those, at the roots or at every node as the model declares).
  Every state can be read at every node, declared or not.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from cortex.core.linearize.structure import BatchTypeError, InvariantError, LinearizedBatch


class Outputs:
    """The states of every node of one batch (see the module docstring for the contract)."""

    def __init__(self, states: Mapping[str, np.ndarray], batch: LinearizedBatch,
                 outputs: Sequence[str], dtype: str, every_node: bool = False) -> None:
        """``batch`` is validated unless the linearizer sealed it (its roots and node inputs
        index the states); every state needs one row per node."""
        if not isinstance(batch, LinearizedBatch):
            raise BatchTypeError(f"Outputs needs a LinearizedBatch, got {type(batch).__name__}")
        if not batch._is_sealed():
            batch.validate()
        self._states = {name: np.ascontiguousarray(a) for name, a in states.items()}
        self.batch = batch
        self.outputs: tuple[str, ...] = tuple(outputs)
        self.dtype = dtype
        self.every_node = every_node
        for name, a in self._states.items():
            if a.shape[:1] != (batch.num_nodes,):
                raise InvariantError(f"state {name!r} has {a.shape[:1]} rows; the batch has "
                                 f"{batch.num_nodes} nodes")
        self._rows: list[np.ndarray] | None = None

    @classmethod
    def _fresh(cls, states: dict[str, np.ndarray], batch: LinearizedBatch,
               outputs: tuple[str, ...], dtype: str, every_node: bool) -> "Outputs":
        """The executable's constructor: ``states`` are fresh C-contiguous ``[N, ...]`` arrays
        it fetched for ``batch`` (what ``__init__`` checks and converts holds by construction;
        a call skips those per-state NumPy calls)."""
        self = cls.__new__(cls)
        self._states = states
        self.batch = batch
        self.outputs = outputs
        self.dtype = dtype
        self.every_node = every_node
        self._rows = None
        return self

    # ---- sizes -----------------------------------------------------------------------------

    @property
    def states(self) -> tuple[str, ...]:
        return tuple(self._states)

    @property
    def batch_size(self) -> int:
        return self.batch.batch_size

    @property
    def num_nodes(self) -> int:
        return self.batch.num_nodes

    @property
    def node_origin(self) -> Sequence[tuple[int, Any]] | None:
        """``node_origin[v] = (input index, user key)`` for row ``v`` (None if unknown)."""
        return self.batch.origin

    # ---- reading ---------------------------------------------------------------------------

    def _state(self, state: str) -> np.ndarray:
        try:
            return self._states[state]
        except KeyError:
            raise KeyError(f"no state {state!r}; this model computes {list(self._states)}") from None

    def nodes(self, state: str) -> np.ndarray:
        """``[N, *shape]``: the state at every node of the batch, row = node id."""
        return self._state(state)

    def root(self, state: str) -> np.ndarray:
        """``[B, *shape]``: the state at the root of every input of the batch."""
        return self._state(state)[np.asarray(self.batch.roots, dtype=np.intp)]

    def node_ids(self, b: int) -> np.ndarray:
        """The rows (node ids) of input ``b``'s nodes, ascending."""
        if not isinstance(b, (int, np.integer)) or not 0 <= b < self.batch_size:
            raise IndexError(f"input index {b!r} out of range for a batch of {self.batch_size}")
        if self._rows is None:
            node_input = np.asarray(self.batch.node_input)
            order = np.argsort(node_input, kind="stable")
            bounds = np.searchsorted(node_input[order], np.arange(self.batch_size + 1))
            self._rows = [order[bounds[i]:bounds[i + 1]] for i in range(self.batch_size)]
        return self._rows[int(b)]

    def of(self, b: int, state: str) -> np.ndarray:
        """``[n_b, *shape]``: input ``b``'s nodes in node-id order (children first, root last)."""
        return self._state(state)[self.node_ids(b)]

    def keys(self, b: int) -> list[Any]:
        """The user's key of every row of ``of(b, ...)`` (needs ``node_origin``)."""
        origin = self.node_origin
        if origin is None:
            raise ValueError("this batch carries no node origins (it was given as a ready "
                             "LinearizedBatch); map rows with batch.node_input instead")
        return [origin[int(v)][1] for v in self.node_ids(b)]

    def as_dict(self) -> dict[str, np.ndarray]:
        """The declared outputs: ``{state: [B, *shape]}`` at the roots, or ``[N, *shape]`` when
        the model declares ``every_node`` outputs."""
        read = self.nodes if self.every_node else self.root
        return {s: read(s) for s in self.outputs}

    def for_input(self, b: int) -> dict[str, np.ndarray]:
        """Input ``b``'s declared outputs (fresh arrays): ``{state: [*shape]}`` at its root,
        or ``{state: [n_b, *shape]}`` (its nodes, as :meth:`of`) for ``every_node`` outputs.
        What ``exe.map`` yields per input."""
        if self.every_node:
            return {s: self.of(b, s) for s in self.outputs}
        if not isinstance(b, (int, np.integer)) or not 0 <= b < self.batch_size:
            raise IndexError(f"input index {b!r} out of range for a batch of {self.batch_size}")
        root = int(self.batch.roots[int(b)])
        return {s: self._state(s)[root].copy() for s in self.outputs}

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in self._states.items())
        return f"Outputs(batch={self.batch_size}, nodes={self.num_nodes}, {self.dtype}: {shapes})"
