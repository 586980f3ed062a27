"""Caches for structures seen before, keyed cheaply and safely.

Pipeline position: ``linearize`` looks a batch up here before reading its inputs. Keys hold the
input itself, never a hash alone, so a collision can never return a wrong batch:

* s-expression strings: the text (plus the vocabulary's ``fingerprint``);
* array forms: ``(dtype, shape, raw bytes)`` of every array field;
* nested Python objects, ``ast`` trees and node objects are NOT cached (they are mutable and
  hashing them would cost a full walk anyway).

Two LRU caches: whole batches (default 256 entries; batches whose key exceeds 1 MiB are not
stored, and an input whose arrays alone exceed it is not even keyed) and parsed s-expressions (default 4096 entries). Returned batches have read-only arrays,
so sharing them is safe. Switch off with ``set_cache(enabled=False)`` or per call with
``linearize(..., cache=False)``.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any

import numpy as np

from . import forms

MAX_KEY_BYTES = 1 << 20


class LRU:
    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self.data: OrderedDict[Any, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Any) -> Any:
        try:
            value = self.data[key]
            self.data.move_to_end(key)
        except KeyError:  # absent (or evicted by another thread meanwhile)
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.max_entries:
            try:
                self.data.popitem(last=False)
            except KeyError:  # emptied by another thread
                break


class _State:
    enabled = True
    batches = LRU(256)
    sexprs = LRU(4096)


STATE = _State()


def set_cache(enabled: bool = True, *, max_batches: int | None = None,
              max_sexprs: int | None = None) -> None:
    """Turn the linearizer caches on or off and set their sizes (entries)."""
    STATE.enabled = bool(enabled)
    if max_batches is not None:
        STATE.batches = LRU(max_batches)
    if max_sexprs is not None:
        STATE.sexprs = LRU(max_sexprs)
    if not enabled:
        clear_cache()


def clear_cache() -> None:
    STATE.batches.data.clear()
    STATE.sexprs.data.clear()


def cache_info() -> dict[str, Any]:
    b, s = STATE.batches, STATE.sexprs
    return {"enabled": STATE.enabled,
            "batches": {"size": len(b.data), "max": b.max_entries, "hits": b.hits,
                        "misses": b.misses},
            "sexprs": {"size": len(s.data), "max": s.max_entries, "hits": s.hits,
                       "misses": s.misses}}


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
