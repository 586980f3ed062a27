"""Work units of a recursively unrolled program: a parent computed together with its children.

Pipeline position: per call, after the linearizer, for programs lowered with the schedule's
``recursive_unroll`` knob (``Lowered.bind_batch`` calls :func:`unroll_units` only for them, so
other calls pay nothing). The unrolled program runs *phases* instead of levels: a barrier after
each phase, the units of a phase in parallel, the nodes of a unit in order by one worker.

For levels ``first, first+1, ...`` taken in pairs ``(a, a+1)`` (k = 2), a pair is one phase whose
units are each node ``p`` of the upper level with its children of the lower level (children
first, then ``p``), and every node of the lower level whose parents all lie higher up as a unit
alone. No unit reads what another unit of its phase writes, because every lower-level child of
an upper-level node belongs to that node's unit. A pair where a node of the lower level has two
parents in the upper level (a DAG's shared child) cannot be grouped so: it becomes two phases of
one-node units, as without unrolling. A last unpaired level is a phase of one-node units.

Arrays (int32): ``phase_offsets [P+1]`` (units of phase ``ph``: ``phase_offsets[ph] ..
phase_offsets[ph+1]``), ``unit_offsets [U+1]`` (nodes of unit ``u``: ``unit_offsets[u] ..
unit_offsets[u+1]``), ``unit_nodes [NU]`` (node ids, each node of the levels once, in compute
order). Every array is monotone or in ``[0, N-1]``, as the program's buffer facts declare.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cortex.core.linearize.structure import INDEX_DTYPE

__all__ = ["Units", "unroll_units"]


@dataclass(frozen=True)
class Units:
    phase_offsets: np.ndarray  # int32 [P + 1]
    unit_offsets: np.ndarray  # int32 [U + 1]
    unit_nodes: np.ndarray  # int32 [NU]

    @property
    def phases(self) -> int:
        return len(self.phase_offsets) - 1


def _offsets(keys: np.ndarray) -> np.ndarray:
    """CSR offsets of the runs of equal values in ``keys`` (sorted): ``[0, ..., len(keys)]``."""
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, np.int64)
    return np.r_[starts, len(keys)].astype(INDEX_DTYPE)


def unroll_units(level_offsets: np.ndarray, child_offsets: np.ndarray, child_ids: np.ndarray,
                 first: int, levels: int = 2) -> Units:
    """The phases and units of the levels ``first..L-1`` for ``levels`` levels per phase (only 2
    is implemented: one parent level with its child level); see the module docstring."""
    if levels != 2:
        raise ValueError(f"recursive unrolling groups 2 levels per phase, got {levels}")
    lo = np.asarray(level_offsets, dtype=np.int64)
    co = np.asarray(child_offsets, dtype=np.int64)
    ci = np.asarray(child_ids, dtype=np.int64)
    nlev = len(lo) - 1
    if first >= nlev:
        return Units(np.zeros(1, INDEX_DTYPE), np.zeros(1, INDEX_DTYPE), np.zeros(0, INDEX_DTYPE))
    start = int(lo[first])
    n = int(lo[-1])
    nodes = np.arange(start, n)
    level = np.repeat(np.arange(first, nlev), np.diff(lo[first:]))  # level of each node >= start
    rel = level - first
    pair, upper = rel // 2, rel % 2 == 1
    # edges from upper-level parents to their children one level down (in the same pair)
    counts = co[start + 1:n + 1] - co[start:n]
    parent = np.repeat(nodes, counts)
    child = ci[co[start]:co[n]]
    par_rel = np.repeat(rel, counts)
    inner = (par_rel % 2 == 1) & (child >= start)
    inner[inner] = rel[child[inner] - start] == par_rel[inner] - 1
    parent, child = parent[inner], child[inner]
    npairs = int(pair[-1]) + 1 if len(pair) else 0
    shared = np.zeros(npairs, dtype=bool)  # pairs where a child has two parents in the pair
    if len(child):
        owners = np.bincount(child - start, minlength=n - start)
        shared[pair[owners > 1]] = True
    owner = nodes.copy()  # the unit a node belongs to: its own, or its parent's
    ok = ~shared[pair[child - start]] if len(child) else np.zeros(0, dtype=bool)
    owner[child[ok] - start] = parent[ok]
    phase_start = np.r_[0, np.cumsum(1 + shared)][:-1] if npairs else np.zeros(0, np.int64)
    phase = phase_start[pair] + (shared[pair] & upper)
    order = np.lexsort((nodes, upper, owner, phase))
    unit_key = phase[order] * (n + 1) + owner[order]
    unit_offsets = _offsets(unit_key)
    unit_phase = phase[order][unit_offsets[:-1]]
    phases = int(phase_start[-1] + 1 + shared[-1]) if npairs else 0
    phase_offsets = np.searchsorted(unit_phase, np.arange(phases + 1)).astype(INDEX_DTYPE)
    return Units(phase_offsets, unit_offsets, nodes[order].astype(INDEX_DTYPE))
