"""The llvm plugin's compiled linearizer (``cpu_llvm.native_linearize``) against the core's
NumPy path and the general path: the same batch on every valid fixed-arity input, and on
anything else it declines (0) so that the NumPy / general path decides and raises the
documented error. Malformed record streams never crash it."""

from __future__ import annotations

import marshal
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("llvmlite", reason="the compiled linearizer needs llvmlite (pip install '.[llvm]')")

from cortex.core.linearize import StructureError, fast, linearize  # noqa: E402
from cortex.plugins.cpu_llvm import native_linearize  # noqa: E402
from tests.core.test_linearize_fast import general, same_nested  # noqa: E402


@pytest.fixture
def native() -> Any:
    """The compiled filler installed, counting its calls and what it handled; the previous
    state restored afterwards."""
    fill = native_linearize.native_fill()
    seen = {"calls": 0, "handled": 0}

    def counting(*args: Any) -> int:
        seen["calls"] += 1
        out = fill(*args)
        seen["handled"] += out > 0
        return out

    old = fast.set_native_nested(counting)
    try:
        yield seen
    finally:
        fast.set_native_nested(old)


def numpy_path(items: list[Any], arity: int, vocab_size: int | None) -> Any:
    old = fast.set_native_nested(None)
    try:
        return fast.nested_batch(items, arity, vocab_size)
    finally:
        fast.set_native_nested(old)


def kary(k: int) -> Any:
    """Nested tuples (and lists) with exactly k children per internal node."""
    return st.recursive(st.integers(0, 30), lambda kids: st.one_of(
        st.tuples(*[kids] * k), st.lists(kids, min_size=k, max_size=k)), max_leaves=30)


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 3).flatmap(lambda k: st.tuples(st.just(k), st.lists(kary(k), min_size=1, max_size=6))))
def test_native_equals_numpy_and_general(case: tuple[int, list[Any]]) -> None:
    k, items = case
    seen = {"handled": 0}
    fill = native_linearize.native_fill()

    def counting(*args: Any) -> int:
        out = fill(*args)
        seen["handled"] += out > 0
        return out

    old = fast.set_native_nested(counting)
    try:
        for vocab_size in (None, 31, 1 << 40):
            want = general(items, k, vocab_size)
            got = fast.nested_batch(items, k, vocab_size)
            same_nested(got, want)
            same_nested(got, numpy_path(items, k, vocab_size))
            assert got.word_ids.dtype == np.int32 and not got.word_ids.flags.writeable
        assert seen["handled"] == 3  # the compiled path made all three
    finally:
        fast.set_native_nested(old)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.recursive(st.integers(-2, 12), lambda kids: st.one_of(
    st.tuples(kids, kids), st.tuples(kids, kids, kids), st.lists(kids, min_size=0, max_size=3),
    st.tuples(kids)), max_leaves=12), min_size=1, max_size=4),
       st.sampled_from([(2, 10), (2, None), (3, 12), (1, 5)]))
def test_native_declines_what_it_must_not_take(items: list[Any], params: tuple[int, Any]) -> None:
    """Wrong child counts, negative or out-of-vocabulary tokens, empty containers: the result
    (or the error, type and message) is the one the core gives without the compiled path."""
    arity, vocab_size = params
    old = fast.set_native_nested(None)
    try:
        try:
            want = linearize(items, arity=arity, vocab_size=vocab_size, cache=False)
        except StructureError as exc:
            want = exc
    finally:
        fast.set_native_nested(old)
    old = fast.set_native_nested(native_linearize.native_fill())
    try:
        if isinstance(want, StructureError):
            with pytest.raises(type(want)) as info:
                linearize(items, arity=arity, vocab_size=vocab_size, cache=False)
            assert str(info.value) == str(want)
        else:
            same_nested(linearize(items, arity=arity, vocab_size=vocab_size, cache=False), want)
    finally:
        fast.set_native_nested(old)


def test_specific_inputs(native: Any) -> None:
    # one token, a lone leaf per input, tokens at the vocabulary's edges, lists as nodes
    for items, k, vocab in (([7], 2, None), ([1, 2, 3], 2, 4), ([(0, 9)], 2, 10),
                            ([[1, [2, 3]], (4, 5)], 2, None), ([((1,),)], 1, None),
                            ([(1, 2, 3), ((4, 5, 6), 7, 8)], 3, 9)):
        same_nested(fast.nested_batch(items, k, vocab), general(items, k, vocab))
    handled = native["handled"]
    assert handled == 6
    # the compiled path declines; the NumPy / general path decides
    for items, k, vocab in (([(1, 9)], 2, 9), ([(1, -1)], 2, None), ([(1, 2, 3)], 2, None),
                            ([(1,)], 2, None), ([(1, True)], 2, None), ([(1, 2**40)], 2, None),
                            ([(1, "a")], 2, None)):
        assert fast.nested_batch(items, k, vocab) is None, items
    assert native["handled"] == handled


def test_a_deep_chain_and_a_big_batch(native: Any) -> None:
    deep: Any = 1
    for _ in range(1500):  # within marshal's depth limit
        deep = (deep, 2)
    got = linearize([deep], arity=2, cache=False)
    assert got.num_levels == 1501
    same_nested(got, numpy_path([deep], 2, None))
    rng = np.random.default_rng(0)
    forest = []
    for _ in range(200):
        nodes: list[Any] = rng.integers(0, 1000, int(rng.integers(1, 60))).tolist()
        while len(nodes) > 1:
            i = int(rng.integers(0, len(nodes) - 1))
            nodes[i:i + 2] = [(nodes[i], nodes[i + 1])]
        forest.append(nodes[0])
    same_nested(linearize(forest, arity=2, vocab_size=1000, cache=False),
                numpy_path(forest, 2, 1000))
    assert native["handled"] == 2


def _records(*recs: tuple[bytes, int]) -> bytes:
    return b"".join(code + struct.pack("<i", val) for code, val in recs)


@pytest.mark.parametrize("raw", [
    _records((b"[", 1)),  # a batch of one, but no record for it
    _records((b"[", 1), (b"(", 2), (b"i", 1)),  # a node short of a child
    _records((b"[", 1), (b"i", 1), (b"i", 2)),  # a record after the batch ends
    _records((b"[", 2), (b"i", 1)),  # the second input is missing
    _records((b"[", 1), (b"(", 2), (b"(", 2), (b"i", 1), (b"i", 2)),  # truncated
    _records((b"[", 1), (b"s", 2), (b"i", 1)),  # another record type
    _records((b"[", 1), (b"(", 0)),  # an empty container
    _records((b"[", 1), (b"(", -5), (b"i", 1)),  # a negative count
])
def test_malformed_streams_are_declined(raw: bytes) -> None:
    """Streams marshal never writes for a valid batch: the filler returns 0, reads nothing
    outside the records and writes nothing outside the arena."""
    fill = native_linearize.native_fill()
    r = len(raw) // 5
    n, nb, k = r - 1, struct.unpack("<i", raw[1:5])[0], 2
    offsets, total = fast.native_layout(n, k, max(nb, 1))
    arena = np.full(total + 64, -7, np.int32)  # a guard zone after the arena
    arena[:len(offsets)] = offsets
    assert fill(raw, r, k, 1 << 31, nb, arena.ctypes.data) == 0
    assert (arena[total:] == -7).all()


def test_marshal_records_are_what_the_filler_reads() -> None:
    """The filler's record format: marshal version 2 writes a list / tuple as its type byte and
    an int32 count, an int32 token as ``i`` and the value (5 bytes each, pre-order)."""
    raw = marshal.dumps([(1, (2, 3))], 2)
    assert raw == _records((b"[", 1), (b"(", 2), (b"i", 1), (b"(", 2), (b"i", 2), (b"i", 3))


def test_the_llvm_backend_installs_it() -> None:
    import cortex
    from cortex.models import TreeFC

    old = fast.set_native_nested(None)
    try:
        exe = cortex.compile(TreeFC(vocab=20, embed=4, hidden=8, seed=0), target="llvm")
        worker = native_linearize._STATE.get("worker")
        if worker is not None:  # built in the background the first time in a process
            worker.join(timeout=60)
        assert fast._native_fill is native_linearize.native_fill()
        out = exe([(1, (2, 3)), 4])
        ref = cortex.compile(TreeFC(vocab=20, embed=4, hidden=8, seed=0), target="numpy")([(1, (2, 3)), 4])
        np.testing.assert_allclose(out.root("h"), ref.root("h"), rtol=1e-5, atol=1e-6)
    finally:
        fast.set_native_nested(old)


def test_a_filler_that_cannot_be_built_warns_once_and_leaves_the_numpy_path(monkeypatch) -> None:
    state: dict[str, Any] = {}
    monkeypatch.setattr(native_linearize, "_STATE", state)
    monkeypatch.setattr(native_linearize, "_module", lambda: "this is not LLVM IR")
    old = fast.set_native_nested(None)
    try:
        with pytest.warns(RuntimeWarning, match="compiled linearizer could not be built"):
            native_linearize.install()
            state["worker"].join(timeout=60)
        assert fast._native_fill is None and "failed" in state
        native_linearize.install()  # not tried again
        assert "worker" in state and not state["worker"].is_alive()
        assert linearize([(1, 2)], arity=2, cache=False).num_nodes == 3
    finally:
        fast.set_native_nested(old)
