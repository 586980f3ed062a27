"""``weights="bfloat16"``: the option's validation, the host rounding, which buffers are stored
so, the interpreter's widening, the caches and saved executables (the numpy target; the llvm
kernels are in tests/plugins/test_llvm_bf16.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import cortex
from cortex.core import loopir as ir
from cortex.core import pipeline
from cortex.core.errors import InvalidOptionError
from cortex.core.loopir.storage import pack, round_to, unpack
from cortex.core.lowering.weight_storage import streamed_weights
from cortex.models import MVRNN, TreeLSTM


def lstm(**kw):
    return TreeLSTM(hidden=8, embed=6, vocab=20, seed=0, **kw)


TREES = [((1, 2), (3, (4, 5))), 7, ((8, 9), 10)]


# ---------------------------------------------------------------- host rounding

def bits(values) -> list[int]:
    return [int(v) for v in pack(np.array(values, dtype=np.float32), "bfloat16")]


def f32(bits32: int) -> np.float32:
    return np.array([bits32], dtype=np.uint32).view(np.float32)[0]


def test_rounding_is_to_nearest_ties_to_even():
    assert bits([1.0]) == [0x3F80]
    assert bits([f32(0x3F808000)]) == [0x3F80]  # a tie, the kept value even: down
    assert bits([f32(0x3F818000)]) == [0x3F82]  # a tie, the kept value odd: up to even
    assert bits([f32(0x3F808001)]) == [0x3F81]  # above the tie: up
    assert bits([f32(0x3F807FFF)]) == [0x3F80]  # below it: down
    assert bits([-1.5, 0.0, -0.0]) == [0xBFC0, 0x0000, 0x8000]


def test_infinities_overflow_nan_and_subnormals():
    assert bits([np.inf, -np.inf]) == [0x7F80, 0xFF80]
    assert bits([np.finfo(np.float32).max]) == [0x7F80]  # beyond the largest bfloat16: inf
    assert bits([f32(0x7F7F7FFF)]) == [0x7F7F]  # the largest bfloat16 stays finite
    nan = pack(np.array([np.nan, -np.nan, f32(0x7F800001), f32(0x7FFFFFFF)], np.float32), "bfloat16")
    assert np.isnan(unpack(nan, "bfloat16")).all()  # a NaN never rounds to inf (0x7F800001 would)
    assert bits([f32(0x00000001), f32(0x00008000), f32(0x00018000)]) == [0x0000, 0x0000, 0x0002]
    assert bits([f32(0x007FFFFF)]) == [0x0080]  # the largest subnormal rounds up to the smallest normal


def test_unpack_is_exact_and_round_to_is_idempotent():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(37, 5)).astype(np.float32)
    r = round_to(x, "bfloat16")
    assert r.dtype == np.float32 and r.shape == x.shape
    assert np.array_equal(round_to(r, "bfloat16"), r)
    assert (np.abs(r - x) <= np.abs(x) * 2.0 ** -8).all()  # half a unit in the 8th bit
    assert (r.view(np.uint32) & 0xFFFF == 0).all()


def test_pack_refuses_other_types_and_formats():
    with pytest.raises(TypeError, match="float32"):
        pack(np.ones(3), "bfloat16")
    with pytest.raises(TypeError, match="uint16"):
        unpack(np.ones(3, np.float32), "bfloat16")
    with pytest.raises(ValueError, match="unknown storage format"):
        pack(np.ones(3, np.float32), "float8")


def test_only_a_float32_param_buffer_has_a_storage_format():
    ir.Buffer("W", "float32", (4, 4), "param", storage="bfloat16")
    with pytest.raises(ir.LoopIRError, match="storage"):
        ir.Buffer("W", "float64", (4, 4), "param", storage="bfloat16")
    with pytest.raises(ir.LoopIRError, match="storage"):
        ir.Buffer("h", "float32", (4, 4), "output", storage="bfloat16")
    with pytest.raises(ir.LoopIRError, match="storage"):
        ir.Buffer("W", "float32", (4, 4), "param", storage="half")


def test_the_verifier_checks_the_storage_against_the_capabilities():
    from cortex.core.loopir.verify import VerificationError, verify
    from cortex.plugins.numpy_ref.backend import CAPABILITIES

    program = cortex.compile(lstm(), target="numpy", weights="bfloat16").program
    verify(program, CAPABILITIES)
    with pytest.raises(VerificationError, match="stored as bfloat16, which the target does not read"):
        verify(program, replace(CAPABILITIES, weight_storage=()))


# ---------------------------------------------------------------- the option

def test_bad_values_name_the_option_and_the_allowed_ones():
    for bad in ("bf16", "float16", 16, True):
        with pytest.raises(InvalidOptionError, match="weights.*'float32', 'float64'.*'bfloat16'"):
            cortex.compile(lstm(), target="numpy", weights=bad)


def test_bfloat16_needs_float32_compute_and_the_dtype_names_itself():
    with pytest.raises(InvalidOptionError, match="weights='bfloat16'.*need dtype='float32'"):
        cortex.compile(lstm(), target="numpy", dtype="float64", weights="bfloat16")
    with pytest.raises(InvalidOptionError, match="weights='float64'.*compute dtype"):
        cortex.compile(lstm(), target="numpy", weights="float64")
    plain = cortex.compile(lstm(), target="numpy", dtype="float64", weights="float64")
    assert not any(b.storage for b in plain.program.buffers)


def test_a_target_that_does_not_read_bfloat16_refuses_it():
    from cortex.core.plugin.backend import Backend
    from cortex.core.plugin.targets import Target
    from cortex.plugins.numpy_ref import backend as nb

    def fp32_only(options):
        b = nb.create_backend(options)
        return Backend(replace(b.capabilities, weight_storage=()), b.renderer, b.compiler, b.runtime)

    target = Target(name="fp32only", description="test", backend=fp32_only)
    with pytest.raises(InvalidOptionError, match="target 'fp32only'.*weights.*one of 'float32'"
                                                 ".*does not read bfloat16 weights"):
        pipeline.build(lstm(), target, {}, pipeline.CompileOptions(weights="bfloat16"))


def test_cortex_info_lists_the_option():
    from cortex.cli import shared_options

    (row,) = [o for o in shared_options() if o["name"] == "weights"]
    assert "bfloat16" in row["allowed"] and "compute dtype" in row["default"]


# ---------------------------------------------------------------- which buffers, what they hold

def test_the_gemv_matrices_are_stored_and_the_gathered_tables_and_biases_are_not():
    exe = cortex.compile(lstm(), target="numpy", weights="bfloat16")
    stored = {b.name for b in exe.program.buffers if b.storage == "bfloat16"}
    kept = {b.name for b in exe.program.buffers if b.role == "param" and not b.storage}
    assert stored and all(b.startswith("U") for b in stored)  # the recurrent gate matrices
    assert any(n.startswith("b") for n in kept) and any(n.startswith(("E", "leaf")) for n in kept)
    assert any(n.startswith("weights:") and "bfloat16" in n for n in exe.notes)
    assert "stored as bfloat16" in str(exe.program)
    for name in stored:
        assert exe._params[name].dtype == np.uint16


def test_mvrnn_per_word_matrices_stay_float32():
    exe = cortex.compile(MVRNN(hidden=4, vocab=12, seed=0), target="numpy", weights="bfloat16")
    gathered = {b.name for b in exe.program.buffers if b.role == "param" and not b.storage
                and len(b.shape) >= 2}
    assert gathered and set(streamed_weights(exe.program)).isdisjoint(gathered)


def test_results_are_those_of_the_model_with_rounded_weights():
    # no token tables (max_table_mib): every matrix a node reads is one the option stores
    model, no_tables = lstm(), {"max_table_mib": 1e-9, "target": "numpy"}
    exe = cortex.compile(model, weights="bfloat16", **no_tables)
    stored = {b.name for b in exe.program.buffers if b.storage}
    assert stored == {b.name for b in exe.program.buffers if b.role == "param" and len(b.shape) >= 2
                      and not b.name.startswith("E")}  # all but the embedding, gathered by token
    rounded = {name: round_to(np.asarray(p, np.float32), "bfloat16") if name.startswith(("U", "W"))
               else p for name, p in model.params.items()}
    want = cortex.compile(lstm(), **no_tables)
    want.update_params(rounded)
    got = exe(TREES)
    for s in got.states:
        np.testing.assert_allclose(got.nodes(s), want(TREES).nodes(s), rtol=1e-5, atol=1e-6)
    plain = cortex.compile(model, **no_tables)(TREES).root("h")
    assert 0 < np.abs(got.root("h") - plain).max() < 1e-2


def test_update_params_stores_the_new_weights_in_bfloat16():
    exe = cortex.compile(lstm(), target="numpy", weights="bfloat16")
    other = TreeLSTM(hidden=8, embed=6, vocab=20, seed=1)
    exe.update_params(other)
    fresh = cortex.compile(other, target="numpy", weights="bfloat16")
    np.testing.assert_array_equal(exe(TREES).root("h"), fresh(TREES).root("h"))
    assert all(exe._params[b.name].dtype == np.uint16 for b in exe.program.buffers if b.storage)


# ---------------------------------------------------------------- caches and saved executables

def test_cache_keys_differ_and_the_stage_cache_does_not_mix_them():
    from cortex.core import stage_cache

    a = cortex.compile(lstm(), target="numpy")
    b = cortex.compile(lstm(), target="numpy", weights="bfloat16")
    c = cortex.compile(lstm(), target="numpy")  # after the bfloat16 compile: its own lowering again
    assert a.cache_key != b.cache_key and a.cache_key == c.cache_key
    assert not any(x.storage for x in c.program.buffers)
    r = b.backend.renderer
    assert stage_cache.render_key(r, a.program) != stage_cache.render_key(r, b.program)


def test_a_saved_and_a_pickled_executable_keep_bfloat16(tmp_path):
    import pickle

    exe = cortex.compile(lstm(), target="numpy", weights="bfloat16")
    want = exe(TREES).root("h")
    exe.save(tmp_path / "bf16.cortex")
    for loaded in (cortex.load(tmp_path / "bf16.cortex"), pickle.loads(pickle.dumps(exe))):
        assert loaded.recipe.options["weights"] == "bfloat16"
        assert any(b.storage == "bfloat16" for b in loaded.program.buffers)
        np.testing.assert_array_equal(loaded(TREES).root("h"), want)


# ---------------------------------------------------------------- bfloat16_pairs (bf16_dot="pairs")

def test_pairs_hold_two_reduction_rows_in_one_word_and_unpack_to_the_bfloat16_values():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 6, 4)).astype(np.float32)
    pairs, plain = pack(a, "bfloat16_pairs"), pack(a, "bfloat16")
    assert pairs.shape == a.shape and pairs.dtype == np.uint16
    words = pairs.reshape(3, 3, 4, 2).view(np.uint32)[..., 0]  # [block, k // 2, j], little-endian
    assert (words & 0xFFFF == plain[:, 0::2, :]).all() and (words >> 16 == plain[:, 1::2, :]).all()
    np.testing.assert_array_equal(unpack(pairs, "bfloat16_pairs"), unpack(plain, "bfloat16"))
    np.testing.assert_array_equal(round_to(a, "bfloat16_pairs"), round_to(a, "bfloat16"))


def test_pairs_need_an_even_second_last_dimension():
    with pytest.raises(ValueError, match="second last even"):
        pack(np.zeros((5, 4), np.float32), "bfloat16_pairs")
    with pytest.raises(ValueError, match="second last even"):
        pack(np.zeros(4, np.float32), "bfloat16_pairs")
    ir.Buffer("W", "float32", (4, 6), "param", storage="bfloat16_pairs")
    for shape in ((5, 4), (4,), (ir.Var("n"), 4)):
        with pytest.raises(ir.LoopIRError, match="bfloat16_pairs"):
            ir.Buffer("W", "float32", shape, "param", storage="bfloat16_pairs")


def test_the_pairs_knob_stores_even_matrices_as_pairs_with_the_same_results():
    plain = cortex.compile(lstm(), target="numpy", weights="bfloat16")
    exe = cortex.compile(lstm(), target="numpy", weights="bfloat16", schedule={"bf16_dot": "pairs"})
    stored = {b.name: b.storage for b in exe.program.buffers if b.storage}
    assert stored and set(stored.values()) == {"bfloat16_pairs"}
    assert stored.keys() == {b.name for b in plain.program.buffers if b.storage}
    assert any("stored as bfloat16_pairs" in n for n in exe.notes)
    a, b = exe(TREES), plain(TREES)
    for s in a.states:
        np.testing.assert_array_equal(a.nodes(s), b.nodes(s))


def test_an_odd_reduction_keeps_plain_bfloat16_under_the_pairs_knob():
    odd = TreeLSTM(hidden=7, embed=6, vocab=20, seed=0)
    exe = cortex.compile(odd, target="numpy", weights="bfloat16", schedule={"bf16_dot": "pairs"})
    formats = {b.storage for b in exe.program.buffers if b.storage}
    assert "bfloat16" in formats  # a [28, 7] matrix cannot pair its rows
    want = cortex.compile(odd, target="numpy", weights="bfloat16")(TREES)
    np.testing.assert_array_equal(exe(TREES).root("h"), want.root("h"))


def test_the_pairs_knob_is_offered_where_the_target_reads_pairs():
    from cortex.core.lowering.schedule import ScheduleSpace
    from cortex.core.loopir.verify import VerificationError, verify
    from cortex.plugins.numpy_ref.backend import CAPABILITIES

    assert "pairs" in ScheduleSpace(CAPABILITIES, "float32").knob("bf16_dot").choices
    none = replace(CAPABILITIES, weight_storage=(), bf16_dot=("widen",))
    assert ScheduleSpace(none, "float32").knob("bf16_dot").choices == ("widen",)
    program = cortex.compile(lstm(), target="numpy", weights="bfloat16", schedule={"bf16_dot": "pairs"}).program
    verify(program, CAPABILITIES)
    with pytest.raises(VerificationError, match="stored as bfloat16_pairs"):
        verify(program, replace(CAPABILITIES, bf16_dot=("widen",)))


def test_the_notes_say_when_the_target_has_no_bfloat16_products():
    # the numpy target widens (or reads pairs): halving the bytes, not the arithmetic
    exe = cortex.compile(lstm(), target="numpy", weights="bfloat16")
    assert any("no bfloat16 products on this target (bf16_dot choices: widen" in n for n in exe.notes)
    pytest.importorskip("llvmlite", reason="the llvm half needs llvmlite")
    # llvm: silent where the CPU the code is for has bfloat16 products (a Zen 4), not where it
    # has none (a Haswell); code for either CPU compiles on any host
    for cpu, silent in (("znver4", True), ("haswell", False)):
        notes = cortex.compile(lstm(), target="llvm", weights="bfloat16", cpu=cpu).notes
        assert any("no bfloat16 products" in n for n in notes) != silent, (cpu, notes)


def test_token_tables_multiply_by_the_stored_weights():
    # a leaf child's projection read from a table (level 1, and leaf_kids above it) is computed
    # from the rounded matrices too: tables or not, the program is the model with rounded
    # weights, and schedules with and without leaf_kids agree to float32 rounding
    model = lstm()
    on = cortex.compile(model, target="numpy", weights="bfloat16", schedule={"leaf_kids": True})
    off = cortex.compile(model, target="numpy", weights="bfloat16", schedule={"leaf_kids": False})
    assert any(n.startswith("leaf_kids: each level runs") for n in on.notes)
    rounded = {name: round_to(np.asarray(p, np.float32), "bfloat16") if name.startswith("U") else p
               for name, p in model.params.items()}
    want = cortex.compile(lstm(), target="numpy")
    want.update_params(rounded)
    got_on, got_off, ref = on(TREES), off(TREES), want(TREES)
    for s in ref.states:
        np.testing.assert_allclose(got_on.nodes(s), got_off.nodes(s), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_on.nodes(s), ref.nodes(s), rtol=1e-5, atol=1e-6)
