"""Schedule primitives: every transformed program verifies and computes what the original does
(the transformed kernel is tested against the untransformed one on the interpreter)."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_loopir_examples import child_sum, inputs, random_batch, tree_rnn  # noqa: E402

from cortex.core import loopir as ir  # noqa: E402
from cortex.core.loopir.interpret import run  # noqa: E402
from cortex.core.loopir.verify import verify  # noqa: E402
from cortex.core.lowering import transforms as T  # noqa: E402


def _same_results(original: ir.Program, transformed: ir.Program, seed: int = 0) -> None:
    verify(transformed)
    rng = np.random.default_rng(seed)
    batch = random_batch(rng, n_trees=3, arity=None if original.name == "child_sum" else 2)
    bufs, sizes = inputs(batch, original, rng)
    want = run(original, dict(bufs), sizes)["h"]
    got = run(transformed, T.physical_arrays(transformed, bufs), sizes)["h"]
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


TRANSFORMS = {
    "split_even": lambda p: T.split(p, "j", 4),
    "split_tail": lambda p: T.split(p, "j", 3),
    "split_symbolic": lambda p: T.split(p, "v", 2),
    "vectorize": lambda p: T.vectorize(p, "j", 4),
    "unroll_full": lambda p: T.unroll(p, "j"),
    "unroll_factor": lambda p: T.unroll(p, "j", 2),
    "unroll_symbolic_factor": lambda p: T.unroll(p, "v", 2),
    "annotate_unrolled": lambda p: T.annotate(p, "j", "unrolled"),
    "serial_nodes": lambda p: T.annotate(p, "v", "serial"),
    "reorder": lambda p: T.reorder(T.split(p, "j", 4, outer="jo", inner="ji"), "jo", "ji"),
    "transposed": lambda p: T.change_layout(p, _weight(p), "transposed"),
    "packed": lambda p: T.change_layout(p, _weight(p), "packed", 4),
    "cache_private": lambda p: T.cache(p, _weight(p), "private", at="v"),
    "cache_shared_kernel": lambda p: T.cache(p, _weight(p), "shared"),
    "gpu_bind": lambda p: T.bind(T.bind(p, "v", "group"), "j", "thread"),
    "composed": lambda p: T.cache(
        T.change_layout(T.vectorize(T.bind(p, "v", "group"), "j", 4), _weight(p), "packed", 4), _weight(p), "shared"
    ),
}


def _weight(p: ir.Program) -> str:
    return "W" if p.name == "tree_rnn" else "U"


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@pytest.mark.parametrize("build", [tree_rnn, child_sum], ids=["tree_rnn", "child_sum"])
@pytest.mark.parametrize("form", ["single", "per_level"])
def test_transform_preserves_results(name, build, form):
    p = build(form=form)
    _same_results(p, TRANSFORMS[name](p))


@pytest.mark.parametrize("factor", [2, 4, 8])
def test_unroll_reduce_preserves_results(factor):
    p = tree_rnn()
    q = T.unroll_reduce(p, "k", factor)
    assert "k * %d" % factor in str(q)
    _same_results(p, q)
    c = child_sum()
    _same_results(c, T.unroll_reduce(c, "kk", factor))


def test_split_shapes_the_loop_nest():
    q = T.split(tree_rnn(), "j", 3, outer="jo", inner="ji")
    text = str(q)
    assert "parallel for jo in 0..3:" in text and "for ji in 0..3:" in text
    assert "let j = jo * 3 + ji" in text and "if j < 8:" in text
    even = str(T.split(tree_rnn(), "j", 4))
    assert "if j <" not in even


def test_layout_helpers_round_trip():
    a = np.arange(24.0).reshape(8, 3)
    for layout in (("row_major",), ("transposed",), ("packed", 4)):
        np.testing.assert_array_equal(T.from_layout(T.to_layout(a, layout), layout), a)
    packed = T.to_layout(a, ("packed", 4))
    assert packed.shape == (2, 3, 4) and packed[1, 2, 3] == a[7, 2]


def test_changed_layout_is_recorded_on_the_buffer():
    q = T.change_layout(tree_rnn(), "W", "packed", 4)
    w = q.buffer("W")
    assert w.layout == ("packed", 4) and w.logical_shape == (ir.Const(8), ir.Const(8))
    assert "W[j // 4, k, j % 4]" in str(q)


@pytest.mark.parametrize(
    "apply, msg",
    [
        (lambda p: T.split(p, "nope", 2), "no loop over 'nope'"),
        (lambda p: T.split(p, "j", 0), "positive int"),
        (lambda p: T.unroll(p, "v"), "non-constant trip count"),
        (lambda p: T.reorder(p, "l", "j"), "not directly nested"),
        (lambda p: T.reorder(T.split(p, "j", 4, outer="jo", inner="ji"), "v", "jo"), "not directly nested"),
        (lambda p: T.change_layout(p, "W", "packed", 3), "not a multiple of block 3"),
        (lambda p: T.change_layout(p, "h", "transposed"), "symbolic shape"),
        (lambda p: T.change_layout(p, "W", "diagonal"), "unknown layout"),
        (lambda p: T.cache(p, "h", "private", at="v"), "symbolic shape"),
        (lambda p: T.annotate(p, "j", "warp"), "loop kind"),
        (lambda p: T.bind(p, "j", "block"), "group' or 'thread"),
        (lambda p: T.unroll_reduce(p, "k", 3), "multiple of it"),
    ],
)
def test_illegal_transforms_are_refused(apply, msg):
    with pytest.raises(T.TransformError, match=msg):
        apply(tree_rnn())


def test_reorder_refuses_dependent_bounds():
    i, j = ir.Var("i"), ir.Var("j")
    p = ir.Program("t", (ir.Size("N"),), (ir.Buffer("y", "float32", (ir.Var("N"), ir.Var("N")), "output"),),
                   (ir.Kernel("k", (), ir.For("i", 0, ir.Var("N"), ir.For("j", 0, i, ir.Store("y", (i, j), ir.fconst(1, "float32"))))),),
                   (ir.Launch("k"),))
    with pytest.raises(T.TransformError, match="depend on 'i'"):
        T.reorder(p, "i", "j")


def test_transforms_are_pure():
    p = tree_rnn()
    before = str(p)
    T.cache(T.split(p, "j", 4), "W", "shared")
    assert str(p) == before


# random compositions: any sequence of legal primitives keeps the program verified and equivalent
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_STEPS = [
    lambda p, r: T.split(p, r.choice([v for v in T.loop_vars(p) if v != "l"]), r.choice([2, 3, 4])),
    lambda p, r: T.annotate(p, r.choice([v for v in T.loop_vars(p) if v != "l"]),
                            r.choice(["serial", "parallel", "vectorized", "unrolled", "gpu_group", "gpu_thread"])),
    lambda p, r: T.unroll(p, r.choice([v for v in T.loop_vars(p) if v != "l"]), r.choice([None, 2])),
    lambda p, r: T.unroll_reduce(p, "k", r.choice([2, 4])),
    lambda p, r: T.change_layout(p, "W", r.choice(["transposed", "packed"]), r.choice([2, 4])),
    lambda p, r: T.cache(p, "W", r.choice(["private", "shared"]), at=r.choice([None, "v"])),
]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_STEPS) - 1), st.integers(0, 2**16)), min_size=1, max_size=4))
def test_random_compositions_preserve_results(steps):
    import random

    p = tree_rnn(form="per_level")
    q = p
    for which, seed in steps:
        try:
            q = _STEPS[which](q, random.Random(seed))
        except T.TransformError:
            continue  # not applicable to this program any more (e.g. the loop was unrolled away)
    _same_results(p, q)
