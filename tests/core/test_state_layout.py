"""The ``state_layout`` knob (``cortex.core.lowering.state_layout``): per-node state in blocks of
nodes, checked on the interpreter against the row-major program for the zoo over the structure
families, the layout reaching every access, the verifier, and the host conversions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.loopir import interpret
from cortex.core.loopir.verify import VerificationError, verify
from cortex.core.lowering.lower import lower
from cortex.core.lowering.schedule import ScheduleSpace
from cortex.core.lowering.state_layout import block_nodes, node_buffers
from cortex.core.lowering.transforms import TransformError, from_layout, to_layout
from test_lower import CPU, GPU, SPECS, assert_close, make_batch, run_lowered, spec_families

SPEC = {s.name: s for s in SPECS}
PREFETCH_CPU = replace(CPU, prefetch=True)


def accesses(program: ir.Program, name: str) -> list[ir.Node]:
    return [n for k in program.kernels for n in ir.walk(k.body)
            if isinstance(n, (ir.Load, ir.Store, ir.Prefetch)) and n.buffer == name]


@pytest.mark.parametrize("name", sorted(SPEC))
def test_blocked_state_computes_what_row_major_does(name):
    """Every zoo model, every structure family, blocks of 4/8/16 on a CPU- and a GPU-like
    target, and with the loop knobs that reshape the node loops (jam, chunks, prefetch, one
    branchy loop without leaf specialization): the same states as the row-major program.
    The row-major program is the CPU default: the loop knobs alone are checked against it by
    their own tests (test_jam, test_lower_schedule), so one interpretation of it per batch
    serves every case (a jammed program is the interpreter's slowest)."""
    spec = SPEC[name]
    rng = np.random.default_rng(5)
    batches = [make_batch(spec, items, rng) for items in spec_families(spec, rng).values()]
    plain = lower(spec.graph, ScheduleSpace(CPU, "float64").default(), CPU, "float64")
    want = [run_lowered(plain, spec.model.params, batch) for batch in batches]
    cases = [(caps, {"state_block": b}) for caps in (CPU, GPU) for b in (4, 8, 16)] + [
        (PREFETCH_CPU, {"interchange": True, "node_jam": 4, "hidden_jam": 2}),
        (PREFETCH_CPU, {"node_jam": 8, "state_block": 16}),
        (PREFETCH_CPU, {"prefetch": 2, "node_chunk": 4, "wide_lanes": 64, "state_block": 4}),
        (CPU, {"leaf_specialization": False, "fuse": False}),
    ]
    for caps, knobs in cases:
        sp = ScheduleSpace(caps, "float64")
        blocked = lower(spec.graph, sp.with_knobs(state_layout="node_blocked", **knobs), caps, "float64")
        assert not node_buffers(blocked.program)  # every per-node buffer was laid out
        for batch, ref in zip(batches, want):
            assert_close(run_lowered(blocked, spec.model.params, batch), ref, "float64", f"{name} {knobs}")


def test_the_layout_reaches_every_access_of_every_per_node_buffer():
    spec = SPEC["TreeGRU"]
    sp = ScheduleSpace(PREFETCH_CPU, "float32")
    low = lower(spec.graph, sp.with_knobs(state_layout="node_blocked", state_block=16, prefetch=2), PREFETCH_CPU)
    blocked = [b for b in low.program.buffers if b.layout == ("node_blocked", 16)]
    assert {b.role for b in blocked} == {"output", "temp"} and len(blocked) > 1
    for b in blocked:
        assert b.shape[0] == ir.Var("N") // 16 + 1 and b.shape[-1] == ir.Const(16)
        assert b.logical_shape is not None and b.logical_shape[0] == ir.Var("N")
        found = accesses(low.program, b.name)
        assert found and all(len(n.index) == len(b.shape) for n in found)
    assert any(n.startswith("state_layout=node_blocked: ") and "blocks of 16 nodes" in n for n in low.notes)
    # the default: row-major, nothing changed, no note
    plain = lower(spec.graph, sp.default(), PREFETCH_CPU)
    assert all(b.layout == ("row_major",) for b in plain.program.buffers if b.role in ("output", "temp"))
    assert not any(n.startswith("state_layout") for n in plain.notes)


def test_states_come_back_row_major_and_need_the_node_count():
    spec = SPEC["TreeLSTM"]
    sp = ScheduleSpace(CPU, "float64")
    low = lower(spec.graph, sp.with_knobs(state_layout="node_blocked"), CPU, "float64")
    assert set(low.state_layouts) == {"h", "c"}
    batch = make_batch(spec, spec_families(spec, np.random.default_rng(1))["mixed"], np.random.default_rng(1))
    got = run_lowered(low, spec.model.params, batch)
    assert all(a.shape == (batch.num_nodes, 8) and a.flags.c_contiguous for a in got.values())
    with pytest.raises(ValueError, match="needs num_nodes"):
        low.states({"h": np.zeros((2, 8, 8)), "c": np.zeros((2, 8, 8))})


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 33])
def test_to_and_from_layout_round_trip_with_padding_rows(n):
    a = np.arange(n * 3 * 2, dtype=np.float32).reshape(n, 3, 2)
    blocked = to_layout(a, ("node_blocked", 8))
    assert blocked.shape == (n // 8 + 1, 3, 2, 8) and blocked.flags.c_contiguous
    for v in range(n):
        np.testing.assert_array_equal(blocked[v // 8, :, :, v % 8], a[v])
    assert not blocked[n // 8, :, :, n % 8:].any()  # the padding rows of the last block
    np.testing.assert_array_equal(from_layout(blocked, ("node_blocked", 8), rows=n), a)
    with pytest.raises(TransformError, match="padding rows"):
        from_layout(blocked, ("node_blocked", 8))
    with pytest.raises(TransformError, match="do not fit"):
        from_layout(blocked, ("node_blocked", 8), rows=(n // 8 + 1) * 8 + 1)


def _node_program(offset: int) -> ir.Program:
    """``h[v + offset, j] = 1`` for every node ``v``: in bounds only for offset 0."""
    v, j = ir.Var("v"), ir.Var("j")
    body = ir.For("v", 0, ir.Var("N"), ir.For("j", 0, 4, ir.Store("h", (v + offset, j), ir.Const(1.0, "float32"))))
    return ir.Program("p", (ir.Size("N"),), (ir.Buffer("h", "float32", (ir.Var("N"), 4), "output"),),
                      (ir.Kernel("main", (), body),), (ir.Launch("main"),))


def test_the_verifier_proves_blocked_accesses_against_the_logical_rows():
    """Row ``N`` lies in the padding of the last block (physically in bounds); the verifier
    still rejects it, as it does in the row-major program."""
    good, bad = (block_nodes(_node_program(k), ["h"], 8) for k in (0, 1))
    verify(good)
    with pytest.raises(VerificationError, match=r"index 0 \(v \+ 1\)|cannot prove index 0"):
        verify(bad)
    with pytest.raises(VerificationError):
        verify(_node_program(1))
    n = 13
    out = interpret.run(good, {}, {"N": n})
    np.testing.assert_array_equal(from_layout(out["h"], ("node_blocked", 8), rows=n), np.ones((n, 4), np.float32))


def test_a_prefetch_of_a_node_row_hints_its_block():
    """The lowering prefetches token-table rows only; a hand-made prefetch of a state row
    becomes one of the first row of the node's block (its values are spread over the block)."""
    p = _node_program(0)
    hinted = replace(p, kernels=(replace(p.kernels[0], body=ir.seq(
        ir.For("v", 0, ir.Var("N"), ir.Prefetch("h", (ir.Var("v"), ir.Const(0)), 4)), p.kernels[0].body)),))
    verify(hinted)
    blocked = verify(block_nodes(hinted, ["h"], 8))
    (pf,) = [n for n in accesses(blocked, "h") if isinstance(n, ir.Prefetch)]
    assert pf.index == (ir.Var("v") // 8, ir.Const(0), ir.Const(0)) and pf.count == 8


def test_block_nodes_rejects_what_it_cannot_lay_out():
    p = _node_program(0)
    with pytest.raises(TransformError, match="positive"):
        block_nodes(p, ["h"], 0)
    with pytest.raises(TransformError, match="no buffers"):
        block_nodes(p, ["g"], 8)
    with pytest.raises(TransformError, match="already has layout"):
        block_nodes(block_nodes(p, ["h"], 8), ["h"], 8)
    table = replace(p, buffers=(ir.Buffer("h", "float32", (4, 4), "output"),))
    with pytest.raises(TransformError, match="no row per node"):
        block_nodes(table, ["h"], 8)
