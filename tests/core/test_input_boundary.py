"""The boundary between user input and the compiled code: batches are validated once (sealed)
or on every call, sizes are checked before anything is allocated, caches obey their switches
and their byte bounds, arguments are ints and never truncated, errors are Cortex's classes.

The crash regressions (a batch that reached native code unchecked) run in subprocesses in
``tests/plugins/test_run_validates.py``; the fuzz run is ``tests/plugins/test_native_fuzz.py``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

import cortex
from cortex.core import linearize as lin
from cortex.core.errors import ArgumentTypeError, CortexError, InvalidArgumentError
from cortex.core.linearize import (EdgeList, Grid, IndexOverflowError, MemoryLimitError,
                                   ParentArray, Sequence, SExpr, StructureError,
                                   UnsupportedInputError, cache_info, clear_cache, linearize,
                                   set_cache, set_limits)
from cortex.core.frontend.model_errors import ModelArgumentTypeError, ModelDefinitionError
from cortex.core.linearize.structure import BatchTypeError, InvariantError, LinearizedBatch
from cortex.core.lowering.lower import BatchMismatchError
from cortex.core.runtime.outputs import Outputs
from cortex.models import (DAGRNN, MVRNN, ChildSumTreeLSTM, SeqGRU, SeqLSTM, TreeFC, TreeGRU,
                           TreeLSTM, TreeRNN)

TREES = [((1, 2), 3), (4, (5, 6))]


@pytest.fixture(scope="module")
def exe():
    return cortex.compile(TreeLSTM(hidden=4, embed=3, vocab=10), target="numpy")


@pytest.fixture
def fresh_cache():
    clear_cache()
    yield
    set_cache(True, max_batches=256, max_sexprs=4096, max_grids=64, max_bytes=64 << 20)
    clear_cache()


@pytest.fixture
def budget():
    """Restores the linearizer's memory budget after a test that changes it."""
    before = lin.limits()["max_bytes"]
    yield
    set_limits(max_bytes=before)


def _count_validations(monkeypatch) -> list[int]:
    calls = [0]
    real = LinearizedBatch.validate

    def counting(self):
        calls[0] += 1
        return real(self)

    monkeypatch.setattr(LinearizedBatch, "validate", counting)
    return calls


# ---------------------------------------------------------------- batches: sealed or validated


@pytest.mark.parametrize("structures", [
    TREES,                                                     # the fused nested-tuple path
    [ParentArray([-1, 0, 0], words=[-1, 1, 2])],               # the general path (assemble)
    [ParentArray(np.array([-1, 0, 0]))],                       # the fused parent-array path
    ["(3 (2 a) (1 b))"],                                       # s-expressions
], ids=["nested", "parents+words", "parents", "sexpr"])
def test_the_linearizers_batches_are_sealed_and_never_validated_again(structures, monkeypatch):
    batch = linearize(structures, cache=False, vocab={"a": 1, "b": 2})
    assert batch._is_sealed()
    arrays = [getattr(batch, f) for f in ("level_offsets", "child_offsets", "child_ids",
                                          "child_table", "roots", "node_input")]
    assert not any(a.flags.writeable for a in arrays)
    calls = _count_validations(monkeypatch)
    words = ParentArray([-1, 0, 0], words=[-1, 1, 2])
    model_exe = cortex.compile(TreeLSTM(hidden=4, embed=3, vocab=10), target="numpy")
    sealed = model_exe.linearize([words])
    model_exe.run(sealed)
    model_exe([words])
    assert calls[0] == 0


def test_any_other_batch_is_validated_on_every_call(exe, monkeypatch):
    batch = exe.linearize(TREES)
    want = exe.run(batch).root("h")
    copy = dataclasses.replace(batch, child_ids=np.array(batch.child_ids))  # a writable array
    assert not copy._is_sealed()
    calls = _count_validations(monkeypatch)
    np.testing.assert_array_equal(exe.run(copy).root("h"), want)
    np.testing.assert_array_equal(exe(copy).root("h"), want)
    assert calls[0] == 2  # once per call: validate() never seals a batch it did not make


def test_a_sealed_batch_made_writable_again_is_validated(exe):
    batch = linearize([ParentArray([-1, 0, 0], words=[-1, 1, 2])], arity=2, cache=False)
    assert batch.child_offsets.base is None  # an array the batch owns: its flag can be reset
    batch.child_offsets.setflags(write=True)
    assert not batch._is_sealed()
    batch.child_offsets[1] = 7  # what native code would have trusted
    with pytest.raises(InvariantError):
        exe.run(batch)


def test_a_field_swapped_behind_the_frozen_dataclass_breaks_the_seal(exe):
    batch = exe.linearize(TREES)
    evil = np.array(batch.child_ids)
    evil[0] = 10**8
    evil.setflags(write=False)
    object.__setattr__(batch, "child_ids", evil)
    assert not batch._is_sealed()
    with pytest.raises(InvariantError, match="child ids"):
        exe.run(batch)
    # the batch cache holds the same trees' batch: it is not served tampered with
    assert exe.linearize(TREES)._is_sealed()
    exe(TREES)


@pytest.mark.parametrize("field, value", [
    ("num_nodes", 3.0), ("num_nodes", "3"), ("num_nodes", True), ("num_nodes", None),
    ("child_ids", [0, 1]), ("roots", (2,)), ("word_ids", [1, 2, -1]), ("features", 1.0),
])
def test_batch_fields_of_the_wrong_type_are_refused_when_made(exe, field, value):
    batch = exe.linearize(TREES)
    with pytest.raises(BatchTypeError) as info:
        dataclasses.replace(batch, **{field: value})
    assert isinstance(info.value, TypeError) and isinstance(info.value, CortexError)
    assert field in str(info.value)


@pytest.mark.parametrize("field, value", [
    ("num_nodes", 2**40),                       # sizes are compared before anything is built
    ("child_offsets", [0, 0, 0, 0, 2**31 - 1, 0, 0, 0, 0, 0, 4]),  # int32 differences overflow
    ("level_offsets", [0, 4, 2**31 - 1]),
    ("child_table", np.zeros((11, 2), np.int32)),
    ("roots", np.array([], np.int32)),
    ("node_input", np.full(11, -1, np.int32)),
    ("word_ids", np.full(11, -5, np.int32)),
])
def test_malformed_batches_are_invariant_errors(exe, field, value):
    batch = exe.linearize(TREES)
    if not isinstance(value, (int, np.ndarray)):
        value = np.array(value, np.int32)
    bad = dataclasses.replace(batch, **{field: value})
    with pytest.raises(InvariantError):
        exe.run(bad)


def test_outputs_made_by_hand_validate_their_batch(exe):
    batch = exe.linearize(TREES)
    roots = np.array(batch.roots)
    roots[0] = 999
    with pytest.raises(InvariantError):
        Outputs({"h": np.zeros((batch.num_nodes, 4))}, dataclasses.replace(batch, roots=roots),
                ("h",), "float64")
    with pytest.raises(InvariantError, match="rows"):
        Outputs({"h": np.zeros((2, 4))}, batch, ("h",), "float64")
    with pytest.raises(BatchTypeError):
        Outputs({}, "not a batch", (), "float64")  # type: ignore[arg-type]


def test_errors_for_bad_input_are_cortex_errors(exe):
    for cls in (StructureError, InvariantError, BatchMismatchError, ModelDefinitionError,
                InvalidArgumentError):
        assert issubclass(cls, CortexError) and issubclass(cls, ValueError), cls
    for cls in (BatchTypeError, UnsupportedInputError, ArgumentTypeError, ModelArgumentTypeError):
        assert issubclass(cls, CortexError) and issubclass(cls, TypeError), cls
    with pytest.raises(BatchTypeError):
        exe.run(TREES)  # type: ignore[arg-type]
    with pytest.raises(BatchMismatchError):  # a batch fine on its own that the model cannot run
        exe.run(dataclasses.replace(exe.linearize(TREES), word_ids=None))


@pytest.mark.parametrize("arg, value", [("arity", 1.5), ("arity", True), ("vocab_size", "9"),
                                        ("feature_dim", 0)])
def test_linearize_arguments_are_checked(arg, value):
    with pytest.raises(InvalidArgumentError):
        linearize(TREES, **{arg: value})


# ---------------------------------------------------------------- sizes before allocation


@pytest.mark.parametrize("make, error", [
    (lambda: Grid(2**16, 2**16), IndexOverflowError),    # 32 GiB of grid edges before
    (lambda: EdgeList(10**9, []), MemoryLimitError),     # 7.45 GiB before
    (lambda: Grid(2**62, 4), IndexOverflowError),        # NumPy's own error before
], ids=["grid-2^32", "edgelist-1e9", "grid-2^64"])
def test_declared_sizes_are_checked_before_anything_is_allocated(make, error, fresh_cache):
    x = make()
    tracemalloc.start()
    try:
        with pytest.raises(error) as info:
            linearize([ParentArray([-1]), x])
        assert info.value.input_index == 1 and "input 1" in str(info.value)
        assert ("int32" in str(info.value)) or ("budget" in str(info.value))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated before the error"


def test_the_memory_budget_is_a_documented_setting(budget, fresh_cache):
    assert lin.limits()["max_bytes"] == lin.limits.__globals__["DEFAULT_MAX_BYTES"]
    set_limits(max_bytes=1 << 20)
    linearize(Grid(20, 20))  # 400 nodes fit
    for big in (Grid(200, 200), ParentArray(np.arange(-1, 20_000)),
                Sequence(np.zeros(20_000, np.int64)), [(1, 2)] * 5_000):
        with pytest.raises(MemoryLimitError, match="set_limits"):
            linearize(big if isinstance(big, list) else [big])
    with pytest.raises(InvalidArgumentError):
        set_limits(max_bytes=0)
    with pytest.raises(ArgumentTypeError):
        set_limits(max_bytes=2.5)


@pytest.mark.parametrize("make", [lambda: Grid(1.5, 2), lambda: Grid(2, "3"),
                                  lambda: EdgeList(True, []), lambda: SExpr(b"(1 a)")])
def test_forms_refuse_counts_of_the_wrong_type_when_made(make):
    with pytest.raises(UnsupportedInputError):
        make()


# ---------------------------------------------------------------- caches


def test_grid_structures_obey_the_cache_switches_and_byte_bound(fresh_cache):
    linearize(Grid(30, 40))
    info = cache_info()["grids"]
    assert info["size"] == 1 and info["bytes"] > 0
    clear_cache()
    assert cache_info()["grids"]["size"] == 0
    set_cache(False)
    linearize(Grid(30, 40))
    assert cache_info()["grids"]["size"] == 0
    set_cache(True, max_bytes=200_000)
    for rows in range(10, 60, 5):
        linearize(Grid(rows, 50))
        for name in ("grids", "batches", "sexprs"):
            assert cache_info()[name]["bytes"] <= 200_000
    assert cache_info()["grids"]["size"] >= 1
    with pytest.raises(ArgumentTypeError):
        set_cache(True, max_bytes=1.5)


def test_large_grids_with_caching_off_leave_no_memory_behind():
    """12 large grid shapes with caching off used to keep every shape's structure: RSS went
    from 28 to 303 MiB. Measured in a fresh process, whose RSS is not shared with tests."""
    code = textwrap.dedent("""
        import json
        from cortex.core.linearize import Grid, linearize, set_cache
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
        set_cache(False)
        linearize(Grid(900, 900))  # warm: imports, first allocations
        before = rss()
        for i in range(12):
            linearize(Grid(900 + i, 900))
        print(json.dumps(rss() - before))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    growth_mib = json.loads(done.stdout)
    assert growth_mib < 60, growth_mib  # 12 kept structures would be ~390 MiB


# ---------------------------------------------------------------- model arguments

ZOO = [
    (TreeLSTM, dict(hidden=4, embed=3, vocab=5), ("hidden", "embed", "vocab", "arity")),
    (ChildSumTreeLSTM, dict(hidden=4, embed=3, vocab=5), ("hidden", "embed", "vocab")),
    (TreeGRU, dict(hidden=4, features=3), ("hidden", "features", "arity")),
    (TreeFC, dict(hidden=4, embed=3, vocab=5), ("hidden", "embed", "vocab", "arity")),
    (TreeRNN, dict(hidden=4, vocab=5), ("hidden", "vocab", "arity")),
    (MVRNN, dict(hidden=4, vocab=5), ("hidden", "vocab")),
    (DAGRNN, dict(hidden=4, features=3), ("hidden", "features")),
    (SeqLSTM, dict(hidden=4, features=3), ("hidden", "features")),
    (SeqGRU, dict(hidden=4, embed=3, vocab=5), ("hidden", "embed", "vocab")),
]


@pytest.mark.parametrize("cls, good, args", ZOO, ids=[z[0].__name__ for z in ZOO])
def test_zoo_size_arguments_are_ints_never_truncated(cls, good, args):
    assert cls(**good, seed=np.int64(3)).hidden == 4
    for arg in args + ("seed",):
        for bad in (1.5, "8", True, None if arg in ("hidden", "seed") else 2.0):
            if bad is None:
                continue
            with pytest.raises(ModelArgumentTypeError, match=arg) as info:
                cls(**{**good, arg: bad})
            assert isinstance(info.value, TypeError) and isinstance(info.value, CortexError)
        with pytest.raises(ModelDefinitionError, match=arg):
            cls(**{**good, arg: -1})


# ---------------------------------------------------------------- the numpy oracle on wide nodes


def _wide_batch(wide: int) -> list:
    """A child-sum batch whose level 1 holds one node of ``wide`` children among many nodes
    of two: padding every lane of the level to the widest would cost ``lanes * wide``."""
    many = [ParentArray([-1, 0, 0], words=[1, 2, 3]) for _ in range(200)]
    return many + [ParentArray([-1] + [0] * wide, words=list(range(1, wide + 2)))]


@pytest.mark.parametrize("schedule", [None, {"fuse": False}], ids=["default", "unfused"])
def test_the_oracle_on_wide_nodes_matches_the_reference_without_padding(schedule, monkeypatch):
    from cortex.core.loopir import interpret
    from cortex.core.frontend.reference import evaluate

    model = ChildSumTreeLSTM(hidden=3, embed=2, vocab=700, dtype="float64")
    exe = cortex.compile(model, target="numpy", **({"schedule": schedule} if schedule else {}))
    batch = exe.linearize(_wide_batch(600))
    flat = []
    for name in ("_reduce_flat", "_serial_compacted"):
        real = getattr(interpret._Machine, name)

        def spy(self, *a, _real=real, _name=name, **k):
            got = _real(self, *a, **k)
            flat.append((_name, got is not None and got is not False))
            return got

        monkeypatch.setattr(interpret._Machine, name, spy)
    got = exe.run(batch)
    want = evaluate(exe.graph, model.params, batch)
    for state in ("h", "c"):
        np.testing.assert_allclose(got.nodes(state), want[state], rtol=1e-10, atol=1e-12)
    assert any(took for _, took in flat), flat  # the wide level took the flat/compacted path


def test_flat_reductions_equal_padded_ones(monkeypatch):
    """The same programs with the flat segment switched off: the masked, padded evaluation."""
    from cortex.core.loopir import interpret

    rng = np.random.default_rng(3)
    model = ChildSumTreeLSTM(hidden=5, embed=2, vocab=50, dtype="float64")
    exe = cortex.compile(model, target="numpy")
    trees = []
    for _ in range(30):
        n = int(rng.integers(1, 40))
        parents = [-1] + [int(rng.integers(0, max(1, i // 3))) for i in range(1, n)]
        trees.append(ParentArray(parents, words=rng.integers(0, 50, n)))
    batch = exe.linearize(trees)
    flat = exe.run(batch).nodes("h")
    monkeypatch.setattr(interpret._Machine, "_reduce_flat", lambda self, *a, **k: None)
    monkeypatch.setattr(interpret._Machine, "_serial_compacted", lambda self, *a, **k: False)
    padded = exe.run(batch).nodes("h")
    np.testing.assert_allclose(flat, padded, rtol=1e-12, atol=1e-13)


def test_odd_token_ids_never_reach_the_token_tables():
    """Token ids below -1 are refused with the batch; ids no program reads, even past the
    vocabulary, are skipped by the rows computed on use; fill_tables then fills the rest."""
    exe = cortex.compile(TreeLSTM(hidden=4, embed=3, vocab=10), target="numpy")
    assert exe.table_rows == (0, 10)
    batch = exe.linearize(TREES)
    for internal in (-2, 10**6):
        ids = np.array(batch.word_ids)
        ids[batch.num_leaves:] = internal
        odd = dataclasses.replace(batch, word_ids=ids)
        if internal < -1:
            with pytest.raises(InvariantError, match="word_ids"):
                exe.run(odd)
            assert exe.table_rows == (0, 10)
        else:
            exe.run(odd)
            assert exe.table_rows == (len({1, 2, 3, 4, 5, 6}), 10)
    assert exe.fill_tables() == 4 and exe.table_rows == (10, 10)
