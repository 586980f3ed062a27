"""Output buffers handed to the caller instead of copied, on a host runtime.

Pipeline position: the last step of a call (:meth:`cortex.core.runtime.executable.Executable._run`)
on a runtime whose buffers are host NumPy arrays (``HostRuntime``: ``llvm``, ``numpy``, a C
target). The program writes each state into a pooled output buffer; the call used to return a
copy of it (``HostRuntime.fetch``), so the next call could write the buffer again. For a state
of a few hundred kilobytes (MV-RNN's ``[N, 64, 64]`` matrices: 1.2 MB at 77 nodes) the copy and
the first touch of its fresh pages took as long as a third of the native call.

Instead the call hands a view of the buffer to its :class:`~cortex.core.runtime.outputs.Outputs`
and the next call writes the buffer again only when nobody holds that view or any other view of
its memory; when something still does, the slot gets a freshly allocated buffer and the old
memory stays the caller's. Which one it is is read off CPython's reference count of the
memory's owner (the array that owns the data): NumPy points every view, and every view of a
view, at that owner (``base``), and a ``memoryview`` or a tensor sharing the memory holds a
view. The executable itself holds the owner through exactly one array, the one it launches
with (made a view of the owner if it owned its data), so whatever the runtime keeps (the llvm
runtime caches the launched arrays) or drops refers to that array, never to the owner: the
owner's count when a view was handed out, against its count at the next call, says whether a
view is still alive. A count can only err towards "held" (another reference the executable
took), which costs an allocation, never a result. So results never change under the caller's
feet, and a serving loop that reads its outputs before the next call copies nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

_count = sys.getrefcount


def _owner(array: np.ndarray) -> Any:
    """The object that owns ``array``'s memory (NumPy collapses chains of views to it)."""
    return array if array.base is None else array.base


@dataclass
class HandedBuffer:
    """One pooled output buffer that calls hand to their outputs (one per fetched state)."""

    slot: int  # its position in the launch arguments
    state: str
    shape: tuple[int, ...]
    dtype: np.dtype
    array: np.ndarray  # what launches write: never the owner itself (see ``__post_init__``)
    # the reference count of the memory's owner when a view was last handed out; None while
    # none has been (a fresh buffer nobody else has seen)
    holders: int | None = None

    def __post_init__(self) -> None:
        self.array = _launchable(self.array)

    def take(self, allocate: Callable[[tuple[int, ...], np.dtype], Any]) -> np.ndarray:
        """The buffer this call may write: the pooled one if no view of its memory handed out
        before is alive, else a new one from ``allocate`` (the old memory is left to whoever
        holds it)."""
        if self.holders is not None:
            if _count(_owner(self.array)) > self.holders:
                self.array = _launchable(allocate(self.shape, self.dtype))
            self.holders = None
        return self.array

    def hand_out(self) -> np.ndarray:
        """A new view of the buffer, to be returned to the caller, after recording how many
        references its memory's owner has without it."""
        self.holders = _count(_owner(self.array))
        return self.array.view()


def _launchable(array: np.ndarray) -> np.ndarray:
    """``array``, or a view of it when it owns its memory: the owner must be referenced by
    the executable through this one array only, whatever the runtime does with it."""
    return array.view() if array.base is None else array
