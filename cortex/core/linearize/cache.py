"""Caches for structures seen before, keyed cheaply and safely, bounded in entries and bytes.

Pipeline position: ``linearize`` looks a batch up here before reading its inputs. Keys hold the
input itself, never a hash alone, so a collision can never return a wrong batch:

* s-expression strings: the text (plus the vocabulary's ``fingerprint``);
* array forms: ``(dtype, shape, raw bytes)`` of every array field;
* nested tuples/lists of int tokens: the ``marshal`` bytes of the batch (``fast.nested_batch``
  walks the batch into them anyway: the key costs no extra walk, and it is the content, not
  the objects, so mutating a list afterwards gives another key);
* other nested Python objects, ``ast`` trees and node objects are NOT cached (they are mutable
  and hashing them would cost a full walk anyway).

Three LRU caches, each bounded by a number of entries and by bytes (keys and values, counted
from their arrays and strings; default 64 MiB each): whole batches (256 entries; batches whose
key exceeds 1 MiB are not stored, and an input whose arrays alone exceed it is not even keyed),
parsed s-expressions (4096) and grid structures by shape (64: the edges and heights every grid
of one shape shares). Returned batches have read-only arrays, so sharing them is safe.
``set_cache(enabled=False)`` empties every cache and stops filling them; ``clear_cache()``
empties them; ``linearize(..., cache=False)`` bypasses the batch and s-expression caches for one
call. These are the only caches the linearizer keeps.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..errors import int_arg
from . import forms

MAX_KEY_BYTES = 1 << 20
DEFAULT_MAX_BYTES = 64 << 20


class LRU:
    """Least recently used entries go first, when there are more than ``max_entries`` or
    their sizes (given to :meth:`put`) add up to more than ``max_bytes``. Thread-safe."""

    def __init__(self, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.data: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            got = self.data.get(key)
            if got is None:
                self.misses += 1
                return None
            self.data.move_to_end(key)
            self.hits += 1
            return got[0]

    def put(self, key: Any, value: Any, nbytes: int = 0) -> None:
        """Store ``value`` (``nbytes``: its size with its key's); one larger than the whole
        budget is not stored."""
        if nbytes > self.max_bytes or self.max_entries < 1:
            return
        with self._lock:
            old = self.data.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self.data[key] = (value, nbytes)
            self.bytes += nbytes
            while len(self.data) > self.max_entries or self.bytes > self.max_bytes:
                self.bytes -= self.data.popitem(last=False)[1][1]

    def discard(self, key: Any) -> None:
        with self._lock:
            old = self.data.pop(key, None)
            if old is not None:
                self.bytes -= old[1]

    def clear(self) -> None:
        with self._lock:
            self.data.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self.data)

    def info(self) -> dict[str, int]:
        return {"size": len(self.data), "max": self.max_entries, "bytes": self.bytes,
                "max_bytes": self.max_bytes, "hits": self.hits, "misses": self.misses}


class _State:
    enabled = True
    batches = LRU(256)
    sexprs = LRU(4096)
    grids = LRU(64)


STATE = _State()


def set_cache(enabled: bool = True, *, max_batches: int | None = None,
              max_sexprs: int | None = None, max_grids: int | None = None,
              max_bytes: int | None = None) -> None:
    """Turn the linearizer caches on or off (off also empties them) and set their bounds:
    entries per cache, and ``max_bytes`` for each cache (keys and values)."""
    for name, v in (("max_batches", max_batches), ("max_sexprs", max_sexprs),
                    ("max_grids", max_grids), ("max_bytes", max_bytes)):
        if v is not None:
            int_arg("set_cache", name, v, minimum=0)
    STATE.enabled = bool(enabled)
    for attr, entries in (("batches", max_batches), ("sexprs", max_sexprs),
                          ("grids", max_grids)):
        old = getattr(STATE, attr)
        if entries is not None or max_bytes is not None:
            setattr(STATE, attr, LRU(old.max_entries if entries is None else int(entries),
                                     old.max_bytes if max_bytes is None else int(max_bytes)))
    if not enabled:
        clear_cache()


def sealed_batch(key: Any) -> Any:
    """The batch cached under ``key`` while it still holds what the linearizer sealed in it;
    one a caller has tampered with (a field swapped behind the frozen dataclass, an array made
    writable) is dropped, so the next call builds it again: a call trusts a sealed batch
    without validating it."""
    hit = STATE.batches.get(key)
    if hit is not None and not hit._is_sealed():  # noqa: SLF001 - the linearizer's own seal
        STATE.batches.discard(key)
        return None
    return hit


def clear_cache() -> None:
    """Empty every linearizer cache (batches, s-expressions, grid structures)."""
    STATE.batches.clear()
    STATE.sexprs.clear()
    STATE.grids.clear()


def cache_info() -> dict[str, Any]:
    return {"enabled": STATE.enabled, "batches": STATE.batches.info(),
            "sexprs": STATE.sexprs.info(), "grids": STATE.grids.info()}


def get_grid(key: Any) -> Any:
    return STATE.grids.get(key) if STATE.enabled else None


def put_grid(key: Any, value: Any, size: int | None = None) -> None:
    """Store a grid shape's arrays (``size``: their bytes when ``value`` is not a tuple of
    arrays, e.g. a whole batch's layout from ``grids``)."""
    if STATE.enabled:
        STATE.grids.put(key, value, sum(a.nbytes for a in value) if size is None else size)


def nbytes(value: Any, depth: int = 2) -> int:
    """Bytes a cached value holds in arrays, strings and lists (a batch, a parsed part), looking
    ``depth`` levels into objects' attributes (a batch's origin map, a part's keys): the
    measure the byte bounds use. No per-element walk of long lists of scalars."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, (list, tuple)):
        size = 8 * len(value)
        if depth and value and not isinstance(value[0], (int, float)):
            size += sum(nbytes(v, depth - 1) for v in value)
        return size
    if depth == 0 or isinstance(value, (int, float, type(None))):
        return 8
    attrs = getattr(value, "__dict__", None)
    if attrs is None:
        attrs = {k: getattr(value, k, None) for k in getattr(type(value), "__slots__", ())}
    return 64 + sum(nbytes(v, depth - 1) for v in attrs.values())


def vocab_key(vocab: Any) -> Any:
    """A vocabulary's identity for cache keys: its ``fingerprint``; False = uncacheable."""
    if vocab is None:
        return None
    fp = getattr(vocab, "fingerprint", None)
    return False if fp is None else fp


def _as_key_array(v: Any) -> Any:
    if v is None or isinstance(v, (int, np.integer)):
        return v
    arr = np.asarray(v)
    if arr.dtype == object:
        raise TypeError
    return arr


def _array_key(v: Any) -> Any:
    return v if not isinstance(v, np.ndarray) else (v.dtype.str, v.shape, v.tobytes())


_ARRAY_FORMS = (forms.ParentArray, forms.ChildTable, forms.EdgeList, forms.Sequence, forms.Grid)
_FIELDS = {t: tuple(f.name for f in dataclasses.fields(t) if f.name != "vocab")
           for t in _ARRAY_FORMS}


def _array_bytes(x: Any) -> int:
    """Bytes of an array-form input's arrays (0 for other inputs, or arrays of objects)."""
    t = type(x)
    if t not in _ARRAY_FORMS:
        return 0
    # the common cases without the generic walk: one array holds (nearly) all the bytes
    if t is forms.Grid and x.words is None and type(x.features) is np.ndarray:
        return x.features.nbytes
    if t is forms.Sequence and type(x.items) is np.ndarray:
        return x.items.nbytes
    if (t is forms.ParentArray or t is forms.ChildTable) and x.words is None \
            and x.features is None and x.labels is None:
        arr = x.parents if t is forms.ParentArray else x.table
        if type(arr) is np.ndarray:
            return arr.nbytes
    try:
        return sum(a.nbytes for a in map(_as_key_array, (getattr(x, n) for n in _FIELDS[type(x)]))
                   if isinstance(a, np.ndarray))
    except (TypeError, ValueError):
        return 0


def input_keys(items: list[Any], vocab: Any) -> list[Any]:
    """Each input's key (None: not cacheable). Array forms are keyed only when the batch's
    arrays stay within :data:`MAX_KEY_BYTES`: beyond it the batch would not be stored, and
    copying and hashing megabytes of features costs more than linearizing them."""
    fits = sum(map(_array_bytes, items)) <= MAX_KEY_BYTES
    return [input_key(x, vocab, arrays=fits) for x in items]


def input_key(x: Any, vocab: Any, arrays: bool = True) -> Any:
    """A hashable, exact key for input ``x``, or None when it is not cacheable (array forms:
    also when ``arrays`` is False)."""
    t = type(x)
    if t is str:
        vk = vocab_key(vocab)
        return None if vk is False else ("s", x, vk)
    if t is forms.SExpr:
        vk = vocab_key(vocab if x.vocab is None else x.vocab)
        lk = vocab_key(x.label_vocab)
        return None if vk is False or lk is False else ("s", x.text, vk, lk)
    if not arrays:
        return None
    if (t is forms.ParentArray or t is forms.ChildTable) and x.words is None \
            and x.features is None and x.labels is None:
        arr = x.parents if t is forms.ParentArray else x.table  # the common case, keyed
        if type(arr) is np.ndarray and arr.dtype != object:  # without the generic walk
            return (t.__name__, arr.dtype.str, arr.shape, arr.tobytes())
    if t in _ARRAY_FORMS:
        vk = vocab_key(vocab if x.vocab is None else x.vocab)
        if vk is False:
            return None
        try:
            fields = tuple(_array_key(_as_key_array(getattr(x, name))) for name in _FIELDS[t])
        except (TypeError, ValueError):
            return None
        return (t.__name__, fields, vk)
    return None


def key_size(key: Any) -> int:
    if isinstance(key, (bytes, str)):
        return len(key)
    if isinstance(key, tuple):
        return sum(key_size(k) for k in key)
    return 8
