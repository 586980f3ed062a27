"""Token tables filled on first use (cortex.core.runtime.token_tables): which derived params are token
tables, that a host executable computes exactly the rows its calls need and agrees with the
whole tables and the reference, that its snapshot of the params is its own, that a device gets
whole tables, and ``Executable.fill_tables``."""

from __future__ import annotations

import dataclasses
import json
import threading

import numpy as np
import pytest

import cortex
from cortex.core import pipeline
from cortex.core.api import resolve_target
from cortex.core.plugin.backend import Runtime
from cortex.core.runtime.hostmem import is_aligned, sparse_zeros
from cortex.core.linearize import linearize
from cortex.core.frontend.params import bind_params
from cortex.core.passes.pipeline import run_passes, with_table_limit, DEFAULT_PASSES
from cortex.core.frontend.reference import evaluate, roots
from cortex.core.runtime.token_tables import bind_deferred, token_table_names
from cortex.models import DAGRNN, TreeGRU, TreeLSTM

V = 50
LEVEL1 = {}  # the default limit lets these small models' level-1 tables in
HOISTED = {"max_table_mib": 0.005}  # 1310 entries: the leaves' [50, 24] table, no level-1 case


def random_tree(rng: np.random.Generator, leaves: int, tokens):
    if leaves == 1:
        return int(rng.choice(tokens))
    k = int(rng.integers(1, leaves))
    return (random_tree(rng, k, tokens), random_tree(rng, leaves - k, tokens))


def trees(seed: int, tokens=range(V), n: int = 6):
    rng = np.random.default_rng(seed)
    return [random_tree(rng, int(k), list(tokens)) for k in rng.integers(1, 12, n)]


def tokens_of(structures) -> set[int]:
    b = linearize(structures, arity=2, vocab_size=V)
    return {int(t) for t in b.word_ids if t >= 0}


def check(model, exe, structures, rtol=1e-4, atol=1e-5):
    out = exe(structures)
    b = exe.linearize(structures)
    want = roots(exe.graph, evaluate(exe.graph, model.params, b), b)
    for s in want:
        np.testing.assert_allclose(out.root(s), want[s], rtol=rtol, atol=atol)
    return out


def lstm(seed: int = 1, dtype: str = "float32") -> TreeLSTM:
    return TreeLSTM(hidden=8, embed=6, vocab=V, seed=seed, dtype=dtype)


def test_which_derived_params_are_token_tables():
    g = run_passes(lstm().trace(), with_table_limit(DEFAULT_PASSES, 10**6))
    names = token_table_names(g)
    assert [n.split("[")[0] for n in names] == ["embed_linear", "leaf_state", "leaf_state",
                                               "embed_linear", "embed_linear"]
    order = [d.name for d in g.derived]
    assert [n for n in order if n in names] == list(names)  # each after what it reads
    assert not any(n.startswith("stack") for n in names)  # stacked gates are made whole
    small = run_passes(lstm().trace(), with_table_limit(DEFAULT_PASSES, 1310))
    assert token_table_names(small) == ("embed_linear[E,stack[W_i,W_o,W_u],stack[b_i,b_o,b_u]]",)
    assert token_table_names(run_passes(DAGRNN(hidden=4, features=3).trace())) == ()  # no word input
    gru = token_table_names(run_passes(TreeGRU(hidden=4, embed=3, vocab=V).trace()))
    # its leaves' projection, its leaf states and level 1's reset- and update-gate tables
    assert [n.split("[")[0] for n in gru] == ["embed_linear", "leaf_state"] + ["embed_linear"] * 4


@pytest.mark.parametrize("options", [HOISTED, LEVEL1], ids=["hoisted", "level1"])
@pytest.mark.parametrize("target", ["numpy", "llvm"])
def test_calls_compute_the_rows_of_their_tokens_and_nothing_more(target, options):
    if target == "llvm":
        pytest.importorskip("llvmlite")
    model = lstm()
    exe = cortex.compile(model, target=target, **options)
    tables = exe._tables
    assert tables is not None and not tables.complete and tables.rows_done == 0
    first = trees(0, tokens=range(0, 20))
    check(model, exe, first)
    assert tables.rows_done == len(tokens_of(first))
    computed = tables.rows_computed
    check(model, exe, first)
    check(model, exe, first[:2])
    assert tables.rows_computed == computed  # nothing new: no row computed again
    second = trees(1, tokens=range(15, 35))
    check(model, exe, second)
    assert tables.rows_done == len(tokens_of(first) | tokens_of(second))
    untouched = sorted(set(range(V)) - tokens_of(first) - tokens_of(second))
    for name, a in tables.arrays.items():
        assert not a[untouched].any(), name  # rows no call needed were never computed


@pytest.mark.parametrize("dtype,rtol", [("float32", 2e-6), ("float64", 1e-13)])
def test_rows_on_demand_equal_the_whole_tables(dtype, rtol):
    model = lstm(dtype=dtype)
    exe = cortex.compile(model, target="numpy")
    whole = bind_params(exe.graph, model.params, dtype=dtype, compute_dtype=dtype)
    exe(trees(2))
    assert exe.fill_tables() > 0 and exe._tables.complete
    assert len(exe._tables.names) == 5
    for name in exe._tables.names:
        np.testing.assert_allclose(exe._tables.arrays[name], whole[name], rtol=rtol, atol=rtol)


def test_fill_tables_computes_every_missing_row_once():
    model = lstm()
    exe = cortex.compile(model, target="numpy")
    before = check(model, exe, trees(3)).root("h").copy()
    seen = exe._tables.rows_done
    assert exe.fill_tables() == V - seen
    assert exe._tables.complete and exe._tables.rows_done == V
    assert exe.fill_tables() == 0
    computed = exe._tables.rows_computed
    np.testing.assert_array_equal(check(model, exe, trees(3)).root("h"), before)
    check(model, exe, trees(4))
    assert exe._tables.rows_computed == computed


def test_rows_come_from_the_params_at_compile_time():
    model = lstm()
    params = {k: v.copy() for k, v in model.params.items()}
    exe = cortex.compile(model, target="numpy")
    for a in model.params.values():
        a *= 3.0  # in place: the executable's snapshot must not see it
    structures = trees(5)
    out = exe(structures)
    b = exe.linearize(structures)
    want = roots(exe.graph, evaluate(exe.graph, params, b), b)
    for s in want:
        np.testing.assert_allclose(out.root(s), want[s], rtol=1e-4, atol=1e-5)


def test_concurrent_calls_fill_each_row_once():
    model = lstm()
    exe = cortex.compile(model, target="numpy")
    batches = [trees(10 + i) for i in range(6)]
    errors = []

    def call(structures):
        try:
            check(model, exe, structures)
        except BaseException as e:  # noqa: BLE001 - re-raised below in the main thread
            errors.append(e)

    threads = [threading.Thread(target=call, args=(s,)) for s in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    union = set().union(*(tokens_of(s) for s in batches))
    assert exe._tables.rows_done == len(union) == exe._tables.rows_computed


class CopyingRuntime(Runtime):
    """A device stand-in: its buffers are copies, so nothing can be filled in place."""

    def __init__(self, inner):
        self.inner = inner

    def allocate(self, shape, dtype):
        return self.inner.allocate(shape, dtype)

    def upload(self, array):
        return self.inner.upload(array)

    def download(self, buffer, out):
        return self.inner.download(buffer, out)

    def launch(self, artifact, args, **config):
        return self.inner.launch(artifact, args, **config)

    def synchronize(self):
        return self.inner.synchronize()


def device_target():
    """The numpy target with :class:`CopyingRuntime`: a device as far as tables go."""
    target, options = resolve_target("numpy")
    host = target.create_backend(options)
    return dataclasses.replace(target, backend=lambda opts: dataclasses.replace(
        host, runtime=CopyingRuntime(host.runtime)))


def test_a_device_gets_whole_tables():
    model = lstm()
    device, options = device_target(), resolve_target("numpy")[1]
    exe = pipeline.build(model, device, options, pipeline.compile_options("numpy", LEVEL1))
    assert exe._tables is None and exe.fill_tables() == 0
    buf_of = dict(exe.lowered.param_names)
    table = exe._params[buf_of["leaf_state[c]"]]
    assert np.count_nonzero(np.abs(table).sum(axis=1)) == V  # every row made at compile time
    check(model, exe, trees(6))


def test_a_table_in_another_layout_is_made_whole_at_compile_time():
    """Rows are filled in place, so a table whose buffer a schedule re-laid is made whole."""
    model = lstm()
    exe = cortex.compile(model, target="numpy")
    graph, low = exe.graph, exe.lowered
    table, tables = bind_deferred(graph, model.params, "float32", only=[n for n, _ in low.param_names])
    buf_of = dict(low.param_names)
    relaid = buf_of["leaf_state[c]"]
    program = dataclasses.replace(low.program, buffers=tuple(
        dataclasses.replace(b, layout=("transposed",)) if b.name == relaid else b
        for b in low.program.buffers))
    fake = type("L", (), {"program": program, "param_names": low.param_names,
                          "layout_params": lambda self, t: dict(t)})()
    prepared, left = pipeline._prepare(fake, (table, tables))
    assert left is None and tables.complete
    assert np.abs(prepared["leaf_state[c]"]).sum(axis=1).all()


def test_sparse_zeros_take_no_memory_until_written():
    a = sparse_zeros((1000, 300), np.float32)
    assert a.shape == (1000, 300) and a.dtype == np.float32 and a.flags.c_contiguous
    assert a.flags.writeable and is_aligned(a, 4096) and not a.any()
    a[[3, 700]] = 1.5
    assert a.sum() == 2 * 300 * 1.5
    assert sparse_zeros((0, 4), np.float64).shape == (0, 4)


def test_tables_filled_on_use_get_a_bigger_default_limit(tmp_path):
    """TreeLSTM h256, vocab 20000: its level-1 tables (2 x 98 MiB) are over the 64 MiB a device
    gets by default and under the 128 MiB of tables filled on use."""
    model = TreeLSTM(hidden=256, embed=256, vocab=20000, seed=0)
    target, options = resolve_target("numpy")
    host = pipeline.build_artifact(model, target, options, pipeline.compile_options(
        "numpy", {"dump": tmp_path}), prepare_params=False)
    assert "preterminal" in [c.name for c in host.lowered.graph.cases]
    dumped = json.loads((tmp_path / "00_options.json").read_text())
    assert dumped["max_table_mib"] == 128 and dumped["tables_filled_on_use"] is True
    device = device_target()
    on_device = pipeline.build_artifact(model, device, options, prepare_params=False)
    assert "preterminal" not in [c.name for c in on_device.lowered.graph.cases]
    asked = pipeline.build_artifact(model, device, options, pipeline.compile_options(
        "numpy", {"max_table_mib": 128}), prepare_params=False)
    assert "preterminal" in [c.name for c in asked.lowered.graph.cases]


def test_a_token_no_program_reads_may_be_out_of_range():
    """bind_batch checks the ids the program reads (TreeLSTM: the leaves'); an internal node
    of a hand-made batch may carry any id >= -1, and the fill skips what is out of range."""
    model = lstm()
    exe = cortex.compile(model, target="numpy")
    b = exe.linearize(trees(7))
    ids = np.array(b.word_ids)
    ids[b.num_leaves:] = V + 3
    odd = dataclasses.replace(b, word_ids=ids)
    out = exe(odd)
    want = roots(exe.graph, evaluate(exe.graph, model.params, b), b)
    np.testing.assert_allclose(out.root("h"), want["h"], rtol=1e-4, atol=1e-5)
    assert exe.table_rows == (len({int(t) for t in b.word_ids if t >= 0}), V)


def test_a_table_computed_whole_may_not_read_a_deferred_one():
    model = lstm()
    g = run_passes(model.trace())
    names = token_table_names(g)
    with pytest.raises(ValueError, match="reads a deferred table"):
        bind_params(g, model.params, defer=names[:1])  # E_proj, but not the leaf states over it
    table = bind_params(g, model.params, defer=names)
    assert all(not table[n].any() for n in names)  # zeros, for the fill
