"""The ``numpy`` target against the float64 reference, for every zoo model.

Every zoo model (small sizes) x every structure family of ``tests/models/zoo_structures.py``
(single leaf, chain, balanced, random, wide, DAG with shared children / grid / sequences, and
all of them mixed in one batch) x float32/float64, through ``cortex.compile(...,
target="numpy")`` and the user-facing input forms: edge lists (trees and DAGs), ``Grid`` for
DAG-RNN, ``Sequence`` for the sequence models, nested tuples, parent arrays and the bundled
s-expressions.
Then a sample of schedules per model: leaf specialization off, fusion off, unrolling and
tiling, and random legal knob settings from the target's ScheduleSpace.

Tolerances (the issue's): float64 within 1e-10 (absolute and relative); float32 within 1e-4
relative to the state's magnitude (max(1, max |reference|)).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "models"))
from zoo_structures import zoo_cases  # noqa: E402

import cortex  # noqa: E402
from cortex.core.frontend.reference import evaluate  # noqa: E402
from cortex.core.frontend.trace import trace  # noqa: E402
from cortex.core.linearize import EdgeList, Grid, Sequence  # noqa: E402
from cortex.core.lowering.schedule import ScheduleSpace  # noqa: E402
from cortex.plugins.numpy_ref.backend import CAPABILITIES  # noqa: E402

CASES = {dtype: zoo_cases(dtype) for dtype in ("float32", "float64")}
IDS = [case[0] for case in CASES["float64"]]
GRIDS = {"single_leaf": [(1, 1)], "chain": [(1, 9)], "balanced": [(4, 4)],
         "random": [(3, 5), (6, 2)], "wide": [(2, 12), (1, 1), (5, 1)]}


def assert_matches(model, out, dtype: str, what: str = "") -> None:
    want = evaluate(trace(model), model.params, out.batch)
    assert set(out.states) == set(want)
    for state, ref in want.items():
        got = out.nodes(state)
        assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
        if dtype == "float64":
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10, err_msg=f"{what} {state}")
        else:
            scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * scale, err_msg=f"{what} {state}")


def forms(name: str, model, structures, rng) -> list:
    """The zoo's structures in the forms a user would hand to the executable."""
    if model.arity == 1:  # chains: node t's child is t-1, the root is the last element
        return [Sequence(np.array(s.words, dtype=np.int64) if s.words is not None else s.features)
                for s in structures]
    return [EdgeList(len(s.children), [(v, c) for v, cs in enumerate(s.children) for c in cs],
                     words=s.words, features=s.features) for s in structures]


def family_batches(name: str, model, batches, rng) -> dict[str, list]:
    if name == "DAGRNN":
        feat = model.node_inputs["x"].shape[0]
        out = {fam: [Grid(r, c, features=rng.normal(size=(r, c, feat))) for r, c in shapes]
               for fam, shapes in GRIDS.items()}
    else:
        out = {fam: forms(name, model, structures, rng) for fam, structures in batches.items()}
    out["mixed"] = [x for fam in list(out) for x in out[fam]]
    return out


@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_every_zoo_model_and_structure_family_matches_the_reference(index):
    """float64: every family as its own batch; float32: all families mixed in one batch."""
    for dtype in ("float64", "float32"):
        label, name, model, batches = CASES[dtype][index]
        rng = np.random.default_rng(index)
        exe = cortex.compile(model, target="numpy", dtype=dtype)
        families = family_batches(name, model, batches, rng)
        for fam, batch in families.items():
            if dtype == "float32" and fam != "mixed":
                continue
            out = exe(batch)
            assert out.batch_size == len(batch)
            assert_matches(model, out, dtype, f"{label} {fam}")


#: Knob settings every model is checked with, on top of the target's default schedule (which
#: the test above uses): specialization off with unrolling, tiling, SIMD width and packed
#: weights, one launch per level; fusion off (dense intermediates) in the single-call form.
FIXED_SCHEDULES = (
    {"leaf_specialization": False, "unroll": 4, "tile_hidden": 8, "vector_width": 4,
     "weight_layout": "packed", "kernel_form": "per_level"},
    {"fuse": False, "unroll": 2, "kernel_form": "single", "weight_layout": "transposed"},
)


@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_schedules_agree_with_the_reference(index):
    """Both fixed schedules in float64, and one random legal schedule of the target's space
    per float type (seeded by the model, so the sample differs across models)."""
    for dtype in ("float64", "float32"):
        label, name, model, batches = CASES[dtype][index]
        rng = np.random.default_rng(100 + index)
        families = family_batches(name, model, batches, rng)
        batch = families["random"] + families["single_leaf"]
        picks = [s.to_dict() for s in ScheduleSpace(CAPABILITIES, dtype).sample(index, 1)]
        if dtype == "float64":
            picks = list(FIXED_SCHEDULES) + picks
        for schedule in picks:
            exe = cortex.compile(model, target="numpy", dtype=dtype, schedule=schedule)
            assert_matches(model, exe(batch), dtype, f"{label} {schedule}")


@pytest.mark.parametrize("model_name", ["TreeLSTM", "TreeRNN", "MVRNN"])
def test_bundled_sentences_as_s_expressions(model_name):
    from cortex import models
    from cortex.data import example_vocab, examples

    vocab = len(example_vocab())
    cls = getattr(models, model_name)
    kwargs = dict(hidden=4, vocab=vocab, dtype="float64", seed=1)
    if model_name == "TreeLSTM":
        kwargs["embed"] = 3
    model = cls(**kwargs)
    sentences = examples()
    exe = cortex.compile(model, target="numpy")
    out = exe(sentences)
    assert out.batch_size == len(sentences)
    assert_matches(model, out, "float64", model_name)
    one = exe(sentences[0])  # a single structure is a batch of one
    np.testing.assert_allclose(one.root("h")[0], out.root("h")[0], rtol=1e-12, atol=1e-12)


def test_a_model_reading_tokens_at_every_node_rejects_trees_without_them():
    """Child-sum TreeLSTM embeds a token at every node; SST internal nodes carry none (-1):
    a ValueError before anything runs, never a silently made-up embedding."""
    from cortex.data import example_vocab, examples
    from cortex.models import ChildSumTreeLSTM

    model = ChildSumTreeLSTM(hidden=4, embed=3, vocab=len(example_vocab()), dtype="float64")
    exe = cortex.compile(model, target="numpy")
    with pytest.raises(ValueError, match="needs a token id in \\[0, 91\\).*but has -1"):
        exe(examples()[:2])
    assert exe.calls == 0


def test_nested_tuples_and_node_keys():
    from cortex.models import TreeLSTM

    model = TreeLSTM(hidden=5, embed=4, vocab=12, dtype="float64", seed=2)
    exe = cortex.compile(model, target="numpy")
    out = exe([(1, (2, 3)), ((4, 5), (6, (7, 8)))])
    assert_matches(model, out, "float64", "nested")
    keys = out.keys(0)
    assert len(keys) == 5 and out.node_origin.row(0, keys[-1]) == out.batch.roots[0]
    from cortex.core.linearize import ParentArray

    # the same first tree as a parent array: node 0 is the root, children ordered by id
    same = exe([ParentArray([-1, 0, 0, 2, 2], words=[-1, 1, -1, 2, 3])])
    np.testing.assert_allclose(same.root("h")[0], out.root("h")[0], rtol=1e-12, atol=1e-12)
    assert_matches(model, same, "float64", "parent array")
