"""Output buffers handed to the caller instead of copied, on a host runtime.

Pipeline position: the last step of a call (:meth:`cortex.core.runtime.executable.Executable._run`)
on a runtime whose buffers are host NumPy arrays (``HostRuntime``: ``llvm``, ``numpy``, a C
target). The program writes each state into a pooled output buffer; the call used to return a
copy of it (``HostRuntime.fetch``), so the next call could write the buffer again. For a state
of a few hundred kilobytes (MV-RNN's ``[N, 64, 64]`` matrices: 1.2 MB at 77 nodes) the copy and
the first touch of its fresh pages took as long as a third of the native call.

Instead the call hands the buffer itself to its :class:`~cortex.core.runtime.outputs.Outputs`
and the next call writes it again only when nobody else holds it: when the caller has dropped
those outputs (and every view of them), the buffer is free; when something still refers to it,
the slot gets a freshly allocated buffer and the old one stays the caller's. Which one it is
is read off CPython's reference counts: right after the launch that wrote it, with only the
executable's own references (the slot, and whatever the runtime keeps, such as the llvm
runtime's pointer cache), the buffer's count and its memory owner's (``base``: a NumPy view
of the array keeps the owner, not the array, alive) are recorded; any reference taken since
(the ``Outputs``, an array view, a ``memoryview``, a tensor sharing the memory) raises one of
the two. A count can only err towards "held" (a reference that the runtime added since), which
costs an allocation, never a result. So results still never change under the caller's feet,
and a serving loop that reads its outputs before the next call copies nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

_count = sys.getrefcount


@dataclass
class HandedBuffer:
    """One pooled output buffer that calls hand to their outputs (one per fetched state)."""

    slot: int  # its position in the launch arguments
    state: str
    shape: tuple[int, ...]
    dtype: np.dtype
    array: np.ndarray
    # reference counts of ``array`` and of its ``base`` when it was last handed out; None
    # while it has never been (a fresh buffer nobody else has seen)
    holders: tuple[int, int] | None = None

    def take(self, allocate: Callable[[tuple[int, ...], np.dtype], Any]) -> np.ndarray:
        """The buffer this call may write: the pooled one if nobody took a reference to it
        since it was last handed out, else a new one from ``allocate`` (the old one is left to
        whoever holds it)."""
        if self.holders is not None:
            base = self.array.base
            if _count(self.array) > self.holders[0] or (
                    base is not None and _count(base) > self.holders[1]):
                self.array = allocate(self.shape, self.dtype)
            self.holders = None
        return self.array

    def hand_out(self) -> np.ndarray:
        """The buffer, to be returned to the caller, after recording who holds it now: the
        caller of this method must hold no other reference to it (drop the launch's argument
        list first), so the counts are the executable's own."""
        base = self.array.base
        self.holders = (_count(self.array), _count(base) if base is not None else 0)
        return self.array
