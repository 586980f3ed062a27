"""The backend contract: what a target plugin provides to turn a scheduled program into results.

Pipeline position: the last two stages (``docs/architecture.md``). After scheduling, the core hands
the backend's :class:`Renderer` a scheduled program (a LoopProgram; opaque to this module), gets
source text or bytes, asks the :class:`Compiler` for an artifact (keyed by :meth:`cache_key` so
the same source and options never compile twice), and runs it through the :class:`Runtime`
(allocate, upload, launch, synchronize, download). A :class:`Backend` bundles the four with the
target's :class:`~cortex.core.plugin.capabilities.Capabilities`, which the scheduler reads instead of
asking for a target's name.

A target's ``backend`` factory (see :mod:`cortex.core.plugin.targets`) builds one ``Backend`` per set
of resolved options. These classes stay deliberately small: a backend's behaviour lives in its
own subclasses, not in more hooks.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from cortex.core.errors import CortexError
from cortex.core.loopir.interpret import eval_shape
from cortex.core.plugin.capabilities import Capabilities
from cortex.core.runtime.hostmem import aligned_copy, aligned_zeros, as_aligned

Source = str | bytes


class IndexRangeError(CortexError, ValueError):
    """An index buffer given to a program holds a value outside its declared range: native
    code would read or write out of bounds."""


def check_index_values(program: Any, buffers: Mapping[str, Any], sizes: Mapping[str, int]) -> None:
    """For a runtime entry point that takes raw host buffers (``artifact.run(buffers, sizes)``):
    raise :class:`IndexRangeError` unless every given ``index`` buffer of ``program`` with a
    declared ``value_range`` holds only values in that range. Generated code dereferences these
    values unchecked; the lowering proved every access in bounds *given* the ranges. (Calls
    through an executable need not: their batches are validated before they are bound.)"""
    for b in program.buffers:
        if b.role != "index" or b.value_range is None:
            continue
        a = buffers.get(b.name)
        if a is None:
            continue
        a = np.asarray(a)
        if not a.size:
            continue
        lo, hi = (int(v) for v in eval_shape(tuple(b.value_range), sizes))
        amin, amax = int(a.min()), int(a.max())
        if amin < lo or amax > hi:
            raise IndexRangeError(
                f"index buffer {b.name} holds values in [{amin}, {amax}], outside its declared "
                f"range [{lo}, {hi}]; native code would read out of bounds")


class Renderer(ABC):
    """Scheduled program → source (LLVM IR text, CUDA C, OpenCL C, or a binary blob).

    C-family targets share one renderer in core and differ only by
    ``Capabilities.dialect``; a plugin writes its own renderer only for a non-C form.

    ``cache_sources = True`` lets the pipeline keep this renderer's sources on disk
    (:mod:`cortex.core.stage_cache`), keyed by the program, the renderer's attributes and the
    code of its package: set it when :meth:`render` is a pure function of those, its
    attributes have a value ``repr`` and its sources pickle (a ``str`` subclass whose extra
    attributes are IR nodes and builtin values).
    """

    cache_sources: bool = False

    @abstractmethod
    def render(self, program: Any) -> Source:
        """Return the source for ``program`` (a scheduled LoopProgram)."""


class Compiler(ABC):
    """Source → an executable artifact (a JIT-ed function, a cubin, a cl.Program...)."""

    #: Changes whenever the compiler's output for the same input may change (tool version,
    #: code-generation revision); part of :meth:`cache_key`.
    identity: str = ""

    @abstractmethod
    def compile(self, source: Source, options: Mapping[str, Any]) -> Any:
        """Compile ``source`` with the target's resolved ``options`` into an artifact."""

    def cache_key(self, source: Source, options: Mapping[str, Any]) -> str:
        """A stable hex key of (compiler identity, source, options) for artifact caches.

        Options must be JSON-representable (the typed options of a target are).
        """
        digest = hashlib.sha256()
        digest.update(type(self).__qualname__.encode())
        digest.update(b"\0" + self.identity.encode() + b"\0")
        digest.update(source.encode() if isinstance(source, str) else bytes(source))
        digest.update(b"\0" + json.dumps(dict(options), sort_keys=True, default=repr).encode())
        return digest.hexdigest()


class Runtime(ABC):
    """Device memory and launches. Buffers are whatever the runtime's device API uses."""

    @abstractmethod
    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A device buffer for an array of ``shape`` and ``dtype`` (contents undefined)."""

    @abstractmethod
    def upload(self, array: np.ndarray) -> Any:
        """A device buffer holding a copy of ``array``."""

    @abstractmethod
    def download(self, buffer: Any, out: np.ndarray) -> np.ndarray:
        """Copy ``buffer`` into host array ``out`` (same shape and dtype) and return ``out``."""

    @abstractmethod
    def launch(self, artifact: Any, args: tuple[Any, ...], **launch_config: Any) -> None:
        """Start ``artifact`` with ``args`` (buffers and scalars); may return before it ends."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until every launched piece of work is done."""

    # Token tables filled on use (cortex.core.runtime.token_tables): a runtime that can show the
    # host array behind an uploaded param and bring rows written there to the device gets its
    # tables as zero pages, filled by the calls, instead of whole at compile time.

    #: Does this runtime implement :meth:`table_host_array` and :meth:`refresh_rows`?
    tables_on_use: bool = False

    def table_host_array(self, buffer: Any) -> np.ndarray | None:
        """The C-contiguous host array behind a param buffer this runtime made (``upload`` or
        ``adopt``), whose rows the executable fills between launches and then passes to
        :meth:`refresh_rows`; None (the default) when there is none."""
        return None

    def refresh_rows(self, buffer: Any, rows: np.ndarray) -> None:
        """Bring rows ``rows`` (sorted distinct indices of the first axis) of
        :meth:`table_host_array`'s array, just written, to ``buffer`` on the device, before
        the next launch reads them."""
        raise NotImplementedError(f"{type(self).__name__} fills no token tables on use")

    # Hand-overs and per-call transfers. The defaults are the calls above; host runtimes skip
    # the copies.

    def adopt(self, array: np.ndarray) -> Any:
        """A device buffer with the contents of ``array``, a C-contiguous host array the caller
        hands over (nothing else references it; it is never changed again): the executable's
        prepared params. Default: :meth:`upload`."""
        return self.upload(array)

    def stage(self, array: np.ndarray) -> Any:
        """A device buffer with ``array``'s contents for the next launch, which only reads it
        (the per-call index/input buffers). Default: :meth:`upload`."""
        return self.upload(np.ascontiguousarray(array))

    def fetch(self, buffer: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A fresh host array (owned by the caller, aliasing nothing) with ``buffer``'s
        contents. Default: :meth:`download` into ``np.empty(shape, dtype)``."""
        return self.download(buffer, np.empty(shape, dtype))


class HostRuntime(Runtime):
    """A runtime whose device memory is host memory: buffers are C-contiguous NumPy arrays.

    CPU backends (the interpreter, JIT-compiled or C-compiled code called in-process) only
    implement :meth:`launch`; a launch runs to completion, so :meth:`synchronize` has nothing
    to wait for. Buffers that live across calls (params, pooled outputs) start on a cache line
    (:mod:`cortex.core.runtime.hostmem`): :meth:`allocate` and :meth:`upload` make them so, and
    :meth:`adopt` keeps a handed-over array that already is (else copies it once). :meth:`stage`
    passes a C-contiguous per-call input through without a copy (a launch never writes a
    read-only buffer: the LoopProgram verifier rejects such stores, and the launch is over
    before the call returns); :meth:`fetch` is one ``copy()``. A subclass that overrides
    :meth:`upload` or :meth:`download` overrides these two as well.
    """

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return aligned_zeros(shape, dtype)

    def upload(self, array: np.ndarray) -> np.ndarray:
        return aligned_copy(array)

    def download(self, buffer: np.ndarray, out: np.ndarray) -> np.ndarray:
        out[...] = buffer
        return out

    def adopt(self, array: np.ndarray) -> np.ndarray:
        return as_aligned(array)

    def stage(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array)

    def fetch(self, buffer: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return buffer.copy()

    def synchronize(self) -> None:
        """Nothing to wait for: a launch returns when the program is done."""

    tables_on_use = True

    def table_host_array(self, buffer: np.ndarray) -> np.ndarray:
        return buffer  # the program reads the host array in place

    def refresh_rows(self, buffer: np.ndarray, rows: np.ndarray) -> None:
        """Nothing to bring over: the rows were written where the program reads them."""


@dataclass(frozen=True)
class Backend:
    """What one target contributes: its capabilities and the three stages after scheduling."""

    capabilities: Capabilities
    renderer: Renderer
    compiler: Compiler
    runtime: Runtime
