"""``bf16_dot="dpbf16"`` on the ``llvm`` target: jammed bfloat16 GEMVs on ``vdpbf16ps``.

Where the CPU the code is for has AVX512-BF16 (a Zen 4 or 5, Cooper Lake, Sapphire Rapids and
later), every zoo family computes with ``dpbf16`` what it computes with ``pairs`` within the
bfloat16 tolerance (the activations are rounded to bfloat16 too), for any even reduction
length; a CPU without it never offers the choice, and a program that asks for it anyway is
refused before LLVM sees it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite (pip install 'cortex-compiler[llvm]')")

import cortex  # noqa: E402
from cortex.core.errors import InvalidOptionError  # noqa: E402
from cortex.core.linearize import Grid  # noqa: E402
from cortex.models import DAGRNN, TreeLSTM  # noqa: E402
from cortex.plugins.cpu_llvm.jit import cpu_has, cpu_info  # noqa: E402
from cortex.testing.tolerance import TOLERANCES  # noqa: E402

from bf16_zoo import (TREES, ZOO, check_treelstm_rounds_the_activations,  # noqa: E402
                      check_zoo_family_against_pairs, scaled_error)

HOST = cpu_info("host").vector_bits >= 512 and cpu_has("host", "avx512bf16")
needs_dpbf16 = pytest.mark.skipif(not HOST, reason="this host's CPU has no AVX512-BF16 (vdpbf16ps)")


def _dots(exe) -> int:
    """The ``vdpbf16ps`` calls in the module's LLVM IR."""
    return sum(1 for line in str(exe.source).splitlines() if " call " in line and "avx512bf16.dpbf16ps" in line)


@needs_dpbf16
@pytest.mark.parametrize("name", ZOO)
def test_dpbf16_computes_what_pairs_computes_on_every_zoo_family(name):
    dp, pairs = check_zoo_family_against_pairs(name, "dpbf16")
    # (MV-RNN's GEMV over the stored W is a sum along each row, not a jammed GEMV: no dot)
    assert (_dots(dp) > 0) == (name != "MVRNN")
    assert _dots(pairs) == 0


@needs_dpbf16
@pytest.mark.parametrize("threads", [1, 2])
def test_dpbf16_treelstm_matches_the_reference_and_rounds_the_activations(threads):
    exe = check_treelstm_rounds_the_activations("dpbf16", threads)
    assert any("vdpbf16ps" in n for n in exe.notes) and _dots(exe) > 0


@needs_dpbf16
@pytest.mark.parametrize("family, size", [("TreeLSTM", 16), ("TreeLSTM", 48), ("DAGRNN", 6), ("DAGRNN", 10)])
def test_reductions_of_any_even_length_match_the_reference(family, size):
    # 16 and 48 rows (not whole 32-row tiles) and input projections of 6 and 10 (not whole
    # 16-word staging steps: the pairs after the last one)
    rng = np.random.default_rng(0)
    if family == "TreeLSTM":
        model, inputs = TreeLSTM(hidden=size, embed=8, vocab=20, seed=5), TREES
    else:
        model = DAGRNN(hidden=32, features=size, seed=5)
        inputs = [Grid(3, 4, features=rng.normal(size=(3, 4, size))), Grid(2, 5, features=rng.normal(size=(2, 5, size)))]
    dp = cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": "dpbf16"})
    assert _dots(dp) > 0
    want = cortex.compile(model, target="numpy")(inputs)
    assert scaled_error(dp(inputs), want) <= TOLERANCES["bfloat16"].atol


def test_which_cpus_offer_dpbf16():
    model = TreeLSTM(hidden=32, embed=8, vocab=20, seed=0)
    for cpu in ("znver4", "cooperlake", "sapphirerapids"):
        exe = cortex.compile_only(model, target="llvm", cpu=cpu, weights="bfloat16",
                                  schedule={"bf16_dot": "dpbf16"})
        assert "dpbf16ps" in str(exe.source)
    for cpu in ("skylake-avx512", "icelake-server", "haswell"):
        with pytest.raises(InvalidOptionError, match="bf16_dot"):
            cortex.compile_only(model, target="llvm", cpu=cpu, weights="bfloat16", schedule={"bf16_dot": "dpbf16"})


def test_the_compiler_refuses_dpbf16_code_for_a_cpu_without_it(monkeypatch):
    from cortex.plugins.cpu_llvm import backend
    from cortex.plugins.cpu_llvm.jit import LLVMBackendError

    # a scheduler that believed the CPU had AVX512-BF16 (a program rendered for another CPU):
    # the compiler says so before LLVM, which would end the process, sees the instruction
    real = backend.capabilities
    monkeypatch.setattr(backend, "capabilities", lambda options: real({**options, "cpu": "znver4"}))
    model = TreeLSTM(hidden=32, embed=8, vocab=20, seed=0)
    with pytest.raises(LLVMBackendError, match="avx512bf16"):
        cortex.compile_only(model, target="llvm", cpu="skylake-avx512", weights="bfloat16",
                            schedule={"bf16_dot": "dpbf16"})


def test_cpu_names_imply_their_vector_width_and_features():
    from cortex.core.plugin.llvm_cpus import cpu_vector_bits

    assert [cpu_vector_bits(c) for c in ("znver4", "skylake-avx512", "x86-64-v4")] == [512] * 3
    assert [cpu_vector_bits(c) for c in ("znver3", "haswell", "x86-64-v3")] == [256] * 3
    assert cpu_vector_bits("some-future-cpu") == 0
    assert cpu_has("znver4", "avx512bf16") and cpu_has("cooperlake", "avx512bf16")
    assert not cpu_has("skylake-avx512", "avx512bf16") and not cpu_has("some-future-cpu", "avx2")
