"""LoopProgram IR: construction errors, the printer, and the verifier (accepts / rejects)."""

from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_loopir_examples import BUILDERS, SIZES, index_buffers, tree_lstm, tree_rnn  # noqa: E402

from cortex.core import loopir as ir  # noqa: E402
from cortex.core.loopir import Const, For, Load, Select, Store, Var, fconst  # noqa: E402
from cortex.core.loopir.verify import VerificationError, check, verify  # noqa: E402
from cortex.core.plugin.capabilities import Capabilities  # noqa: E402

N = Var("N")
GPU = Capabilities(has_grid=True, grid_barrier=True, group_barrier=True, max_threads_per_group=1024,
                   shared_memory_bytes=48 * 1024, dialect="cuda")
GPU_NO_GRID_SYNC = replace(GPU, grid_barrier=False)


def _prog(body: ir.Stmt, extra: tuple = (), params: tuple = (), host=None) -> ir.Program:
    buffers = index_buffers(11) + (
        ir.Buffer("x", "float32", (N, 4), "input"),
        ir.Buffer("y", "float32", (N, 4), "output"),
    ) + extra
    host = host or (ir.Launch("k"),)
    return ir.Program("t", SIZES, buffers, (ir.Kernel("k", params, body),), host)


# --------------------------------------------------------------------------- construction


def test_nodes_are_immutable_hashable_and_structural():
    a = Load("x", (Var("i"), 1))
    assert a == Load("x", (Var("i"), Const(1))) and hash(a) == hash(Load("x", (Var("i"), 1)))
    with pytest.raises(AttributeError):
        a.buffer = "y"  # type: ignore[misc]


@pytest.mark.parametrize(
    "make, msg",
    [
        (lambda: For("i", 0, 4, ir.Seq(()), "sideways"), "loop kind"),
        (lambda: ir.BinOp("**", Const(1), Const(2)), "BinOp op"),
        (lambda: ir.Call("erf", (Const(1.0, "float32"),)), "unknown intrinsic"),
        (lambda: ir.Call("fma", (Const(1.0, "float32"),)), "fma takes 3"),
        (lambda: ir.Alloc("t", "float32", (0,), "private", ir.Seq(())), "positive constant"),
        (lambda: ir.Alloc("t", "float32", (4,), "global", ir.Seq(())), "shared/private"),
        (lambda: ir.Barrier("device"), "Barrier scope"),
        (lambda: Var("1x"), "identifier"),
        (lambda: ir.as_expr(1.5), "Const\\(value"),
    ],
)
def test_bad_nodes_are_rejected_with_a_clear_message(make, msg):
    with pytest.raises((ir.LoopIRError, TypeError), match=msg):
        make()


def test_duplicate_buffer_names_are_rejected():
    b = ir.Buffer("x", "float32", (4,), "input")
    with pytest.raises(ir.LoopIRError, match="duplicate"):
        ir.Program("p", (), (b, b), (), ())


def test_simplify_folds_index_arithmetic():
    i = Var("i")
    e = ir.simplify((Const(0) + i * 1) + Const(2) * Const(3) - Const(0))
    assert e == i + 6


# --------------------------------------------------------------------------- printer


def test_printed_tree_rnn_reads_like_pseudo_code():
    text = str(tree_rnn())
    assert "program tree_rnn" in text
    assert "index  int32 child_table[N, 2]  values in [-1, N - 1]" in text
    assert "parallel for v in level_offsets[l]..level_offsets[l + 1]:" in text
    assert "tanh(sum(k in 0..8: W[j, k] * (select(c0 >= 0, h[c0, k], 0.0) + select(c1 >= 0, h[c1, k], 0.0))) + b[j])" in text
    assert "barrier(grid)" in text and "launch main()" in text
    per_level = str(tree_rnn(form="per_level"))
    assert "for lh in 1..L:\n      launch level(lh)" in per_level


def test_printer_parenthesizes_by_precedence():
    i, j = Var("i"), Var("j")
    assert str((i + j) * 2) == "(i + j) * 2"
    assert str(i - (j - 1)) == "i - (j - 1)"
    assert str(i * j + 1) == "i * j + 1"
    assert str(fconst(0.5, "float32")) == "0.5f"


# --------------------------------------------------------------------------- verifier


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("form", ["single", "per_level"])
@pytest.mark.parametrize("leaf_spec", [True, False])
def test_verifier_accepts_the_examples(name, form, leaf_spec):
    p = BUILDERS[name](form=form, leaf_spec=leaf_spec)
    assert verify(p) is p
    assert check(p, GPU) == []


@pytest.mark.parametrize("form", ["single", "per_level"])
def test_verifier_accepts_the_fused_tree_lstm(form):
    verify(tree_lstm(form=form, H=16), GPU)


def test_verifier_rejects_an_out_of_bounds_access():
    i = Var("i")
    ok = _prog(For("i", 0, N, Store("y", (i, 3), Load("x", (i, 3))), "parallel"))
    verify(ok)
    off_by_one = _prog(For("i", 0, N + 1, Store("y", (i, 3), Load("x", (i, 3))), "parallel"))
    with pytest.raises(VerificationError, match=r"load x\[i, 3\]: cannot prove index 0 \(i\) < N"):
        verify(off_by_one)
    col = _prog(For("i", 0, N, Store("y", (i, 4), Load("x", (i, 3))), "parallel"))
    with pytest.raises(VerificationError, match=r"store y\[i, 4\]: cannot prove index 1 \(4\) < 4"):
        verify(col)


def test_verifier_requires_a_guard_on_child_table_loads():
    v, c = Var("v"), Var("c")
    unguarded = Store("y", (v, 0), Load("x", (c, 0)))
    guarded = Store("y", (v, 0), Select(c >= 0, Load("x", (c, 0)), fconst(0, "float32")))
    guarded_if = ir.If(c >= 0, Store("y", (v, 0), Load("x", (c, 0))))
    for body, ok in ((unguarded, False), (guarded, True), (guarded_if, True)):
        loop = For("v", Load("level_offsets", (Var("l"),)), Load("level_offsets", (Var("l") + 1,)),
                   ir.Let("c", Load("child_table", (v, 1)), body), "parallel")
        p = _prog(For("l", 1, Var("L"), loop))
        problems = check(p)
        assert (problems == []) == ok, problems
        if not ok:
            assert "cannot prove index 0 (c) >= 0 (its lower bound is -1); guard it" in problems[0]


def test_verifier_uses_size_upper_bounds_and_split_tail_guards():
    u = Var("u")
    leaves = _prog(For("u", 0, Var("NL"), Store("y", (u, 0), Load("x", (u, 0)))))
    verify(leaves)  # NL <= N is declared
    # a split loop: u = uo*3 + ui, guarded by u < N
    split = _prog(For("uo", 0, (N + 2) // 3, For("ui", 0, 3, ir.Let("u", Var("uo") * 3 + Var("ui"),
                  ir.If(u < N, Store("y", (u, 0), Load("x", (u, 0))))))))
    verify(split)
    unguarded = _prog(For("uo", 0, (N + 2) // 3, For("ui", 0, 3, ir.Let("u", Var("uo") * 3 + Var("ui"),
                      Store("y", (u, 0), Load("x", (u, 0)))))))
    with pytest.raises(VerificationError, match="cannot prove index 0 \\(u\\) < N"):
        verify(unguarded)


def test_verifier_checks_kernel_params_per_launch():
    l = Var("l")  # noqa: E741
    body = For("v", Load("level_offsets", (l,)), Load("level_offsets", (l + 1,)), Store("y", (Var("v"), 0), fconst(1, "float32")))
    good = _prog(body, params=("l",), host=(ir.HostFor("i", 0, Var("L"), (ir.Launch("k", (Var("i"),)),)),))
    verify(good)
    bad = _prog(body, params=("l",), host=(ir.HostFor("i", 0, Var("L") + 1, (ir.Launch("k", (Var("i"),)),)),))
    with pytest.raises(VerificationError, match=r"level_offsets\[l \+ 1\]: cannot prove index 0 \(l \+ 1\) < L \+ 1"):
        verify(bad)
    reads = _prog(body, params=("l",), host=(ir.Launch("k", (Load("level_offsets", (0,)),)),))
    with pytest.raises(VerificationError, match="host expression level_offsets\\[0\\] reads a buffer"):
        verify(reads)


@pytest.mark.parametrize(
    "body, msg",
    [
        (Store("y", (0, 0), Load("x", (0, 0)) + fconst(1, "float64")), "different types float32 and float64"),
        (Store("y", (0, 0), Load("child_ids", (0,))), "store of int32 into float32"),
        (Store("x", (0, 0), fconst(1, "float32")), "read-only buffer 'x'"),
        (Store("y", (Var("q"), 0), fconst(1, "float32")), "variable 'q' is not bound"),
        (Store("zz", (0,), fconst(1, "float32")), "unknown buffer 'zz'"),
        (For("i", 0, 2, For("i", 0, 2, ir.Seq(()))), "bound twice"),
        (For("i", 0, 2, ir.Barrier("grid"), "parallel"), "grid barrier inside a non-serial loop"),
        (For("i", 0, 2, ir.Barrier("group"), "gpu_thread"), "group barrier inside a per-thread loop"),
        (Store("y", (0, 0), ir.Call("tanh", (Load("child_ids", (0,)),))), "tanh needs float"),
        (Store("y", (Var("N") / 2, 0), fconst(1, "float32")), "int division must be written //"),
        (ir.If(Var("N"), ir.Seq(())), "condition is not bool"),
    ],
)
def test_verifier_rejects_ill_formed_programs(body, msg):
    with pytest.raises(VerificationError, match=msg):
        verify(_prog(body))


def test_verifier_checks_target_capabilities():
    grid_sync = _prog(ir.seq(ir.Barrier("grid")))
    verify(grid_sync, GPU)
    with pytest.raises(VerificationError, match="no grid-wide barrier"):
        verify(grid_sync, GPU_NO_GRID_SYNC)
    big = _prog(ir.Alloc("s", "float32", (64, 1024), "shared", ir.Seq(())))
    with pytest.raises(VerificationError, match="needs 262144 bytes, target has 49152"):
        verify(big, GPU)
    gpu_loop = _prog(For("i", 0, 2, ir.Seq(()), "gpu_group"))
    with pytest.raises(VerificationError, match="no grid"):
        verify(gpu_loop, Capabilities())
    f64 = _prog(ir.Alloc("s", "float64", (4,), "private", ir.Seq(())))
    with pytest.raises(VerificationError, match="fp64"):
        verify(f64, replace(GPU, supports_fp64=False))


def test_verification_error_lists_every_problem():
    i = Var("i")
    p = _prog(For("i", 0, N, ir.seq(Store("y", (i + 1, 0), fconst(1, "float32")), Store("y", (i, 9), fconst(1, "float32")))))
    with pytest.raises(VerificationError) as exc:
        verify(p)
    assert len(exc.value.problems) == 2 and "2 problems" in str(exc.value)
    # a constant row index is out of bounds when N may be 0: the verifier does not assume N >= 1
    assert len(check(_prog(Store("y", (0, 0), fconst(1, "float32"))))) == 1


def test_docs_show_the_current_printed_tree_lstm():
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "loopir.md"
    listing = str(tree_lstm(H=256, V=20000, dtype="float32"))
    assert listing in doc.read_text(), "docs/loopir.md is stale: regenerate its TreeLSTM listing"


def test_a_deep_let_chain_pickles_and_loads_through_the_stage_cache():
    """A jammed body is hundreds of nested lets: pickling must not hit the recursion limit
    (the disk cache and saved executables pickle programs), and the restricted loader takes it."""
    import pickle

    from cortex.core import stage_cache

    body: ir.Stmt = ir.Store("h", (ir.Const(0),), ir.Var("x0"))
    for i in range(5000):
        body = ir.Let(f"x{i}", ir.Const(float(i)), body)
    data = pickle.dumps(body, protocol=pickle.HIGHEST_PROTOCOL)
    for loaded in (pickle.loads(data), stage_cache._load(data)):
        seen = []
        while isinstance(loaded, ir.Let):
            seen.append((loaded.var, loaded.value))
            loaded = loaded.body
        assert seen == [(f"x{i}", ir.Const(float(i))) for i in reversed(range(5000))]
        assert loaded == ir.Store("h", (ir.Const(0),), ir.Var("x0"))


def test_a_let_prints_as_its_dataclass_would_and_a_deep_chain_has_a_repr():
    let = ir.Let("a", ir.Const(1.0), ir.Let("b", ir.Var("a"), ir.Store("h", (ir.Const(0),), ir.Var("b"))))
    inner = let.body
    assert repr(let) == (f"Let(var='a', value={ir.Const(1.0)!r}, body=Let(var='b', value={ir.Var('a')!r}, "
                         f"body={inner.body!r}))")
    body: ir.Stmt = ir.Store("h", (ir.Const(0),), ir.Var("x0"))
    for i in range(5000):
        body = ir.Let(f"x{i}", ir.Const(float(i)), body)
    assert repr(body).count("Let(") == 5000  # the stage cache keys programs by their repr


def test_the_package_re_exports_every_public_name_of_the_ir():
    """``from cortex.core import loopir as ir`` then ``ir.X`` works for every public name."""
    import inspect

    from cortex.core.loopir import nodes, sizes

    for module in (nodes, sizes):
        public = [n for n, v in vars(module).items()
                  if not n.startswith("_") and getattr(v, "__module__", module.__name__) == module.__name__
                  and not inspect.ismodule(v)]
        missing = [n for n in public if not hasattr(ir, n)]
        assert not missing, f"cortex.core.loopir does not re-export {missing} of {module.__name__}"
