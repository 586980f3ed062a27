"""The NumPy LoopProgram interpreter against plain per-node NumPy loops."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_loopir_examples import (  # noqa: E402
    BUILDERS, child_sum, inputs, random_batch, reference, tree_lstm, tree_lstm_reference, tree_rnn,
)

from cortex.core import loopir as ir  # noqa: E402
from cortex.core.loopir.interpret import InterpretError, allocate, run  # noqa: E402
from cortex.core.loopir import Const, For, Load, Store, Var, fconst  # noqa: E402


@pytest.mark.parametrize("name", ["tree_rnn", "child_sum"])
@pytest.mark.parametrize("form", ["single", "per_level"])
@pytest.mark.parametrize("leaf_spec", [True, False])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_examples_match_plain_numpy(name, form, leaf_spec, dtype):
    rng = np.random.default_rng(7)
    for arity in ((2,) if name == "tree_rnn" else (2, None)):
        batch = random_batch(rng, n_trees=4, arity=arity)
        p = BUILDERS[name](form=form, leaf_spec=leaf_spec, dtype=dtype)
        bufs, sizes = inputs(batch, p, rng)
        h = run(p, bufs, sizes)["h"]
        assert h.dtype == np.dtype(dtype)
        want = reference(name, batch, bufs)
        if dtype == "float64":
            np.testing.assert_allclose(h, want, rtol=0, atol=1e-12)
        else:
            np.testing.assert_allclose(h, want, rtol=1e-4, atol=1e-5)


def test_single_leaf_and_chain_structures():
    rng = np.random.default_rng(3)
    single = random_batch(rng, n_trees=1, max_leaves=1)
    assert single.num_nodes == 1
    for batch in (single, random_batch(rng, n_trees=1, max_leaves=2)):
        p = tree_rnn()
        bufs, sizes = inputs(batch, p, rng)
        np.testing.assert_allclose(run(p, bufs, sizes)["h"], reference("tree_rnn", batch, bufs), atol=1e-12)


def test_output_buffer_is_written_in_place_and_inputs_are_not():
    rng = np.random.default_rng(0)
    batch = random_batch(rng, 2)
    p = child_sum()
    bufs, sizes = inputs(batch, p, rng)
    out = np.zeros((batch.num_nodes, 8))
    before = {k: v.copy() for k, v in bufs.items()}
    res = run(p, {**bufs, "h": out}, sizes)
    assert res["h"] is out and np.abs(out).sum() > 0
    for k, v in before.items():
        np.testing.assert_array_equal(bufs[k], v)


def _tiny(body: ir.Stmt, buffers, sizes=(ir.Size("N"),)) -> ir.Program:
    return ir.Program("tiny", sizes, buffers, (ir.Kernel("k", (), body),), (ir.Launch("k"),))


def test_out_of_bounds_load_raises_with_buffer_name():
    N = Var("N")
    p = _tiny(
        For("i", 0, N + 1, Store("y", (Var("i"),), Load("x", (Var("i"),))), "parallel"),
        (ir.Buffer("x", "float64", (N + 1,), "input"), ir.Buffer("y", "float64", (N + 1,), "output")),
    )
    bad = ir.Program(p.name, p.sizes, (ir.Buffer("x", "float64", (N,), "input"), p.buffers[1]), p.kernels, p.host)
    with pytest.raises(InterpretError, match=r"load x: index 4 out of bounds"):
        run(bad, {"x": np.zeros(4)}, {"N": 4})
    run(p, {"x": np.zeros(5)}, {"N": 4})


def test_missing_or_misshaped_inputs_are_reported():
    p = tree_rnn()
    rng = np.random.default_rng(0)
    batch = random_batch(rng, 2)
    bufs, sizes = inputs(batch, p, rng)
    with pytest.raises(InterpretError, match="'W' \\(param\\) not given"):
        run(p, {k: v for k, v in bufs.items() if k != "W"}, sizes)
    with pytest.raises(InterpretError, match="buffer 'b': expected float64\\[8\\]"):
        run(p, {**bufs, "b": np.zeros(9)}, sizes)
    with pytest.raises(InterpretError, match="sizes \\['E'\\] not given"):
        run(p, bufs, {k: v for k, v in sizes.items() if k != "E"})


def test_reduce_ops_over_variable_ranges():
    # y[i] = op(x[j] for j in off[i]..off[i+1]) for sum, max, mean, with an empty range
    N = Var("N")
    off = ir.Buffer("off", "int32", (N + 1,), "index", (Const(0), Const(6)), monotone=True)
    x = ir.Buffer("x", "float64", (6,), "input")
    outs = tuple(ir.Buffer(f"y_{op}", "float64", (N,), "output") for op in ("sum", "max", "mean"))
    i = Var("i")
    body = ir.seq(*(
        Store(f"y_{op}", (i,), ir.Reduce(op, f"j_{op}", Load("off", (i,)), Load("off", (i + 1,)), Load("x", (Var(f"j_{op}"),))))
        for op in ("sum", "max", "mean")
    ))
    p = _tiny(For("i", 0, N, body, "parallel"), (off, x) + outs)
    xs = np.array([1.0, 5.0, 2.0, -1.0, 3.0, 4.0])
    offs = np.array([0, 2, 2, 5, 6], dtype=np.int32)
    res = run(p, {"off": offs, "x": xs}, {"N": 4})
    np.testing.assert_allclose(res["y_sum"], [6, 0, 4, 4])
    np.testing.assert_allclose(res["y_max"], [5, -np.inf, 3, 4])
    np.testing.assert_allclose(res["y_mean"], [3, 0, 4 / 3, 4])


def test_serial_loop_with_lane_dependent_bounds_inside_a_vector_loop():
    # a serial accumulation whose trip count differs per lane (masking path)
    N = Var("N")
    off = ir.Buffer("off", "int32", (N + 1,), "index", (Const(0), Const(6)), monotone=True)
    x = ir.Buffer("x", "float64", (6,), "input")
    y = ir.Buffer("y", "float64", (N,), "output")
    i, j = Var("i"), Var("j")
    body = ir.seq(
        Store("y", (i,), fconst(0, "float64")),
        For("j", Load("off", (i,)), Load("off", (i + 1,)), Store("y", (i,), Load("y", (i,)) + Load("x", (j,)))),
    )
    p = _tiny(For("i", 0, N, body, "parallel"), (off, x, y))
    res = run(p, {"off": np.array([0, 3, 3, 6], dtype=np.int32), "x": np.arange(6.0)}, {"N": 3})
    np.testing.assert_allclose(res["y"], [3, 0, 12])


def test_reading_an_unwritten_private_array_gives_nan():
    N = Var("N")
    p = _tiny(
        For("i", 0, N, ir.Alloc("t", "float64", (2,), "private", Store("y", (Var("i"),), Load("t", (1,)))), "parallel"),
        (ir.Buffer("y", "float64", (N,), "output"),),
    )
    assert np.isnan(run(p, {}, {"N": 3})["y"]).all()


def test_allocate_gives_every_buffer():
    p = tree_rnn()
    a = allocate(p, {"N": 5, "L": 2, "NL": 3, "E": 4})
    assert a["h"].shape == (5, 8) and a["level_offsets"].shape == (3,) and a["child_table"].dtype == np.int32


def test_interpreter_is_fast_enough_for_a_realistic_batch():
    # hidden 64, a batch of 16 trees of up to 30 leaves: level loop in Python, the rest NumPy
    rng = np.random.default_rng(5)
    batch = random_batch(rng, n_trees=16, max_leaves=30)
    p = tree_rnn(H=64, dtype="float32")
    bufs, sizes = inputs(batch, p, rng)
    import time

    t0 = time.perf_counter()
    h = run(p, bufs, sizes)["h"]
    elapsed = time.perf_counter() - t0
    np.testing.assert_allclose(h, reference("tree_rnn", batch, bufs), rtol=1e-4, atol=1e-4)
    assert elapsed < 5.0, f"interpreter took {elapsed:.2f}s for {batch.num_nodes} nodes"


@pytest.mark.parametrize("form", ["single", "per_level"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_tree_lstm_matches_the_equations(form, dtype):
    rng = np.random.default_rng(11)
    batch = random_batch(rng, n_trees=5, max_leaves=9)
    p = tree_lstm(form=form, dtype=dtype)
    bufs, sizes = inputs(batch, p, rng)
    out = run(p, bufs, sizes)
    h, c = tree_lstm_reference(batch, bufs)
    tol = dict(rtol=0, atol=1e-12) if dtype == "float64" else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["h"], h, **tol)
    np.testing.assert_allclose(out["c"], c, **tol)


@pytest.mark.parametrize("name", ["tree_rnn", "child_sum"])
def test_chunked_reductions_give_the_same_results(monkeypatch, name):
    import cortex.core.loopir.interpret as interp

    rng = np.random.default_rng(2)
    batch = random_batch(rng, n_trees=3, arity=None if name == "child_sum" else 2)
    p = BUILDERS[name]()
    bufs, sizes = inputs(batch, p, rng)
    whole = run(p, bufs, sizes)["h"]
    monkeypatch.setattr(interp, "CHUNK_ELEMENTS", 7)  # forces many chunks of 1..3 elements
    np.testing.assert_allclose(run(p, bufs, sizes)["h"], whole, rtol=1e-13, atol=1e-14)


def test_conflicting_parallel_writes_are_reported():
    # y[0] = x[i] for every i of a parallel loop: lanes disagree, so the result would be arbitrary
    N = Var("N")
    bufs = (ir.Buffer("x", "float64", (N,), "input"), ir.Buffer("y", "float64", (1,), "output"))
    racy = _tiny(For("i", 0, N, Store("y", (0,), Load("x", (Var("i"),))), "parallel"), bufs)
    with pytest.raises(InterpretError, match=r"store y\[0\]: parallel lanes write different values"):
        run(racy, {"x": np.arange(3.0)}, {"N": 3})
    run(racy, {"x": np.ones(3)}, {"N": 3})  # lanes agree: deterministic, allowed
    serial = _tiny(For("i", 0, N, Store("y", (0,), Load("x", (Var("i"),)))), bufs)
    assert run(serial, {"x": np.arange(3.0)}, {"N": 3})["y"][0] == 2.0


def test_conflicting_int_writes_are_reported_too():
    N = Var("N")
    p = _tiny(For("i", 0, N, Store("y", (0,), Var("i")), "parallel"), (ir.Buffer("y", "int32", (1,), "output"),))
    with pytest.raises(InterpretError, match="write different values"):
        run(p, {}, {"N": 3})


def test_batch_inputs_binds_a_linearized_batch():
    from cortex.core.loopir.interpret import batch_inputs

    rng = np.random.default_rng(4)
    batch = random_batch(rng, n_trees=3, arity=2)
    decls = ir.linearizer_buffers(arity=3, vocab=11)
    n = Var("N")
    body = For("v", 0, Var("NL"), Store("y", (Var("v"),), ir.Cast("float64", Load("word_ids", (Var("v"),)))), "parallel")
    p = ir.Program("bind", ir.linearizer_sizes(), decls + (ir.Buffer("y", "float64", (n,), "output"),),
                   (ir.Kernel("k", (), body),), (ir.Launch("k"),))
    from cortex.core.loopir.verify import verify

    verify(p)
    bufs, sizes = batch_inputs(p, batch)
    assert sizes == {"N": batch.num_nodes, "E": len(batch.child_ids), "B": 3, "L": batch.num_levels, "NL": batch.num_leaves}
    assert bufs["child_table"].shape == (batch.num_nodes, 3) and (bufs["child_table"][:, 2] == -1).all()
    y = run(p, bufs, sizes)["y"]
    np.testing.assert_array_equal(y[: batch.num_leaves], batch.word_ids[: batch.num_leaves])
    with pytest.raises(ValueError, match="a node has 2 children; this program handles at most 1 per node"):
        batch_inputs(ir.Program("narrow", p.sizes, ir.linearizer_buffers(arity=1, vocab=11), (), ()), batch)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        batch_inputs(ir.Program("small", p.sizes, ir.linearizer_buffers(arity=2, vocab=3), (), ()), batch)
