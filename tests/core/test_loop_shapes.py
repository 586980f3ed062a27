"""The loop-shape schedule transforms (``cortex.core.lowering.loop_shapes``, ``level_interchange``),
each checked against the untransformed program on the interpreter, and the verifier."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cortex.core.loopir import interpret
from cortex.core.lowering import loop_shapes as shapes
from cortex.core import loopir as ir
from cortex.core.lowering.level_interchange import interchange_levels, interchange_node_loop
from cortex.core.loopir.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_loopir_examples import child_sum, inputs, random_batch, tree_lstm, tree_rnn  # noqa: E402

BUILDERS = {"tree_rnn": tree_rnn, "child_sum": child_sum, "tree_lstm": tree_lstm}


def _case(name: str, seed: int = 0, H: int = 8):
    rng = np.random.default_rng(seed)
    program = BUILDERS[name](form="per_level", dtype="float64", H=H)
    batch = random_batch(rng, n_trees=4, max_leaves=8, arity=None if name == "child_sum" else 2)
    bufs, sizes = inputs(batch, program, rng)
    return program, bufs, sizes


def _serial_hidden(program: ir.Program) -> ir.Program:
    def f(n: ir.Node) -> ir.Node | None:
        hidden = isinstance(n, ir.For) and n.var in ("j", "jl") and n.kind == "parallel"
        return replace(n, kind="serial") if hidden else None

    return ir.transform(program, f)  # type: ignore[return-value]


def _same(a: ir.Program, b: ir.Program, bufs: dict, sizes: dict) -> None:
    verify(b)
    want, got = interpret.run(a, dict(bufs), sizes), interpret.run(b, dict(bufs), sizes)
    for name in ("h", "c"):
        if name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------- interchange


@pytest.mark.parametrize("name", ["tree_rnn", "tree_lstm"])
@pytest.mark.parametrize("serial", [False, True])
def test_interchanged_levels_compute_the_same(name, serial):
    program, bufs, sizes = _case(name, seed=1)
    if serial:
        program = _serial_hidden(program)
    swapped, n = interchange_levels(program)
    assert n >= 1
    level = swapped.kernel("level").body
    assert isinstance(level, ir.For) and level.kind == "parallel" and level.var == "j"  # threads split rows
    _same(program, swapped, bufs, sizes)


def test_interchange_applies_to_level_loops_only():
    p = tree_lstm(H=16)
    by_var = {n.var: n for k in p.kernels for n in ir.walk(k.body) if isinstance(n, ir.For)}
    # the hand-built node loops hold lets + a parallel hidden loop: both are interchanged
    assert interchange_node_loop(by_var["v"]) is not None
    assert interchange_node_loop(by_var["u"]) is not None
    assert interchange_node_loop(by_var["j"]) is None  # not a node loop


def test_node_loop_reading_child_matrices_per_row_is_not_interchanged():
    """``for v: for i: for j: sum_k W[i, k] * M[ch, k, j]`` re-reads node data that varies with
    the column loop inside the row loop: interchanging would stream every node's matrix per row."""
    k, i, j, v = (ir.Var(n) for n in ("k", "i", "j", "v"))
    mm = ir.Reduce("sum", "k", 0, 8, ir.Load("W", (i, k)) * ir.Load("M", (ir.Var("ch"), k, j)))
    rows = ir.For("i", 0, 8, ir.For("j", 0, 8, ir.Store("M", (v, i, j), mm)))
    node = ir.For("v", ir.Load("level_offsets", (ir.Var("l"),)), ir.Load("level_offsets", (ir.Var("l") + 1,)),
                  ir.Let("ch", ir.Load("child_table", (v, 0)), rows), "parallel")
    assert interchange_node_loop(node) is None
    gemv = ir.For("i", 0, 8, ir.Store("h", (v, i), ir.Reduce("sum", "k", 0, 8, ir.Load("W", (i, k))
                                                             * ir.Load("h", (ir.Var("ch"), k)))))
    node2 = ir.For("v", node.start, node.stop, ir.Let("ch", ir.Load("child_table", (v, 0)), gemv), "parallel")
    assert interchange_node_loop(node2) is not None


# ----------------------------------------------------------------------- wide vectors


def test_widen_vector_nests_merges_a_split_column_loop_only_inside_a_row_loop():
    W = 16
    inner = ir.Let("j", ir.Var("jw") * W + ir.Var("jv"),
                   ir.Store("out", (ir.Var("i"), ir.Var("j")), ir.Load("x", (ir.Var("i"), ir.Var("j")))))
    split = ir.For("jw", 0, 4, ir.For("jv", 0, W, inner, "vectorized"))

    def program(body: ir.Stmt) -> ir.Program:
        bufs = (ir.Buffer("x", "float32", (8, 64), "input"), ir.Buffer("out", "float32", (8, 64), "output"))
        return ir.Program("p", (ir.Size("N"),), bufs, (ir.Kernel("k", (), body),), (ir.Launch("k"),))

    wide, n = shapes.widen_vector_nests(program(ir.For("i", 0, 8, split)), 64)
    body = wide.kernels[0].body
    assert n == 1 and isinstance(body.body, ir.For) and body.body.kind == "vectorized"  # type: ignore[attr-defined]
    assert body.body.var == "j" and ir.const_int(body.body.stop) == 64  # type: ignore[attr-defined]
    x = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    np.testing.assert_array_equal(interpret.run(wide, {"x": x}, {"N": 1})["out"], x)
    # a top-level split loop (a node loop's hidden loop: interchanged and jammed) is kept
    assert shapes.widen_vector_nests(program(split), 64)[1] == 0
    # wider than the limit: kept
    assert shapes.widen_vector_nests(program(ir.For("i", 0, 8, split)), 32)[1] == 0


# ----------------------------------------------------------------------- hidden blocks


@pytest.mark.parametrize("name", ["tree_rnn", "tree_lstm"])
@pytest.mark.parametrize("serial", [False, True])
def test_hidden_blocks_compute_the_same(name, serial):
    program, bufs, sizes = _case(name, seed=2)
    if serial:
        program = _serial_hidden(program)
    blocked, n = shapes.block_hidden_loops(program, 4)
    assert n >= 1
    vec = [x for x in ir.walk(blocked) if isinstance(x, ir.For) and x.kind == "vectorized"]
    assert vec and all(ir.const_int(x.stop) == 4 for x in vec)
    _same(program, blocked, bufs, sizes)
    assert shapes.block_hidden_loops(blocked, 4)[1] == 0  # already blocks of 4
    assert shapes.block_hidden_loops(program, 3)[1] == 0  # 3 does not divide 8


# ----------------------------------------------------------------------- node chunks


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("chunk,tiles,serial", [(3, 1, True), (3, 3, False)])
def test_chunked_programs_compute_the_same(name, chunk, tiles, serial):
    program, bufs, sizes = _case(name, seed=chunk + tiles)
    if serial:
        program = _serial_hidden(program)  # what the CPU schedule gives (parallel="nodes")
    chunked, n = shapes.chunk_nodes(program, chunk, tiles)
    assert n >= 1
    _same(program, chunked, bufs, sizes)


def test_chunk_nodes_reuses_each_hidden_unit_across_a_chunk_of_nodes():
    program = tree_rnn(form="per_level", dtype="float32")
    tiled = shapes.chunk_nodes(program, 4, tiles=2)[0].kernel("level").body  # j parallel: 2 tiles
    assert isinstance(tiled, ir.For) and isinstance(tiled.stop, ir.BinOp) and tiled.stop.op == "*"
    assert shapes.chunk_nodes(program, 4, tiles=1)[0].kernel("level").body.stop.op == "//"  # type: ignore[attr-defined]
    level = shapes.chunk_nodes(_serial_hidden(program), 4)[0].kernel("level").body
    assert isinstance(level, ir.For) and level.kind == "parallel" and level.var.startswith("cx_chunk")
    j = level.body
    assert isinstance(j, ir.For) and j.var == "j" and j.kind == "serial"
    assert isinstance(j.body, ir.For) and j.body.var == "v" and j.body.kind == "serial"


def test_chunk_nodes_keeps_whole_nodes_in_a_chunk_when_there_is_no_sum():
    program = _serial_hidden(child_sum(form="per_level", dtype="float32"))  # leaves: no sum
    leaves = program.kernel("leaves").body
    assert not any(isinstance(n, ir.Reduce) for n in ir.walk(leaves))
    chunked = shapes.chunk_nodes(program, 4)[0].kernel("leaves").body
    assert isinstance(chunked, ir.For) and chunked.kind == "parallel" and chunked.var.startswith("cx_chunk")
    node = chunked.body  # the node loop, then the node's own body unchanged (hidden loop inside)
    assert isinstance(node, ir.For) and node.var == leaves.var and node.body == leaves.body  # type: ignore[attr-defined]


# ----------------------------------------------------------------------- prefetches


def test_gathered_rows_are_prefetched_ahead_and_change_nothing():
    program, bufs, sizes = _case("tree_rnn", seed=3)
    fetched, n = shapes.insert_prefetches(program, 2)
    assert n == 1  # the leaves gather Emb[word_ids[u], :]
    hints = [x for x in ir.walk(fetched) if isinstance(x, ir.Prefetch)]
    assert [(h.buffer, h.count) for h in hints] == [("Emb", 8)]
    _same(program, fetched, bufs, sizes)
    assert shapes.insert_prefetches(program, 0)[1] == 0


def test_chunks_are_not_tiled_when_a_later_hidden_loop_reads_an_earlier_one():
    """Two parallel hidden loops in a node (the second reads every unit the first wrote): hidden
    tiles would run a tile of the second before the other tiles of the first, which the
    interpreter's lock-step lanes hide; so such a body is chunked without tiles."""
    v, j, k = ir.Var("v"), ir.Var("j"), ir.Var("k")
    first = ir.For("j", 0, 8, ir.Store("t", (v, j), ir.Cast("float64", j)), "parallel")
    second = ir.For("j2", 0, 8, ir.Store("h", (v, ir.Var("j2")), ir.Reduce("sum", "k", 0, 8, ir.Load("t", (v, k)))),
                    "parallel")
    node = ir.For("v", ir.Load("level_offsets", (ir.Var("l"),)), ir.Load("level_offsets", (ir.Var("l") + 1,)),
                  ir.seq(first, second), "parallel")
    del j
    bufs = (ir.Buffer("level_offsets", "int32", (ir.Var("L") + 1,), "index", (ir.Const(0), ir.Var("N")), monotone=True),
            ir.Buffer("t", "float64", (ir.Var("N"), 8), "temp"), ir.Buffer("h", "float64", (ir.Var("N"), 8), "output"))
    p = ir.Program("p", (ir.Size("N"), ir.Size("L")), bufs, (ir.Kernel("level", ("l",), node),),
                   (ir.HostFor("lh", 0, ir.Var("L"), (ir.Launch("level", (ir.Var("lh"),)),)),))
    chunked, n = shapes.chunk_nodes(p, 2, tiles=4)
    assert n == 1
    g = chunked.kernel("level").body
    assert isinstance(g.stop, ir.BinOp) and g.stop.op == "//"  # node chunks only, no tiles
    verify(chunked)
