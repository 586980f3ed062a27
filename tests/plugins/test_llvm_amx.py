"""``bf16_dot="amx"`` on the ``llvm`` target: jammed bfloat16 GEMVs on AMX tiles.

Where this process may run AMX tiles (the host CPU has ``amx-tile`` and ``amx-bf16`` and the
kernel grants the tile state), every zoo family computes with ``amx`` what it computes with
``pairs`` within the bfloat16 tolerance (AMX rounds the activations to bfloat16 too); elsewhere
asking for it is a schedule error, and a named CPU never offers it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite (pip install 'cortex-compiler[llvm]')")

import cortex  # noqa: E402
from cortex.core.errors import InvalidOptionError  # noqa: E402
from cortex.models import TreeLSTM  # noqa: E402
from cortex.plugins.cpu_llvm.amx import amx_available  # noqa: E402

from bf16_zoo import (TREES, ZOO, check_treelstm_rounds_the_activations,  # noqa: E402
                      check_zoo_family_against_pairs)

AMX, WHY = amx_available()
needs_amx = pytest.mark.skipif(not AMX, reason=f"no AMX tiles in this process: {WHY}")


@needs_amx
@pytest.mark.parametrize("name", ZOO)
def test_amx_computes_what_pairs_computes_on_every_zoo_family(name):
    amx, _ = check_zoo_family_against_pairs(name, "amx")
    # (MV-RNN's GEMV over the stored W is a sum along each row, not a jammed GEMV: no tiles)
    assert ("tdpbf16ps" in str(amx.source)) == (name != "MVRNN")


@needs_amx
@pytest.mark.parametrize("threads", [1, 2])
def test_amx_treelstm_matches_the_reference_and_rounds_the_activations(threads):
    check_treelstm_rounds_the_activations("amx", threads)


@needs_amx
def test_a_reduction_not_a_multiple_of_32_stays_on_the_fmas():
    model = TreeLSTM(hidden=40, embed=12, vocab=20, seed=3)  # K = 40: no whole tiles
    amx = cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": "amx"})
    assert "tdpbf16ps" not in str(amx.source)
    want = cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": "pairs"})(TREES)
    for s in want.states:
        np.testing.assert_array_equal(amx(TREES).nodes(s), want.nodes(s))


def test_the_default_is_amx_where_offered_then_dpbf16_then_pairs():
    from cortex.plugins.cpu_llvm.jit import cpu_has, cpu_info

    model = TreeLSTM(hidden=32, embed=8, vocab=20, seed=0)
    dpbf16 = cpu_info("host").vector_bits >= 512 and cpu_has("host", "avx512bf16")
    want = "amx" if AMX else ("dpbf16" if dpbf16 else "pairs")
    assert cortex.compile(model, target="llvm", weights="bfloat16").schedule.bf16_dot == want
    for cpu, dot in (("skylake-avx512", "pairs"), ("znver4", "dpbf16")):
        named = cortex.compile_only(model, target="llvm", weights="bfloat16", cpu=cpu)
        assert named.schedule.bf16_dot == dot


def test_a_named_cpu_never_offers_amx():
    with pytest.raises(InvalidOptionError, match="bf16_dot"):
        cortex.compile(TreeLSTM(hidden=32, embed=8, vocab=20, seed=0), target="llvm", cpu="skylake-avx512",
                       weights="bfloat16", schedule={"bf16_dot": "amx"})


def test_without_amx_the_schedule_is_refused_and_amx_code_is_never_loaded(monkeypatch):
    from cortex.plugins.cpu_llvm import amx, backend
    from cortex.plugins.cpu_llvm.jit import LLVMBackendError

    monkeypatch.setattr(backend, "amx_available", lambda: (False, "no AMX (test)"))
    model = TreeLSTM(hidden=32, embed=8, vocab=20, seed=0)
    with pytest.raises(InvalidOptionError, match="bf16_dot"):
        cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": "amx"})
    # a program with tile code reaching a process without AMX (its source rendered or cached
    # elsewhere): a clear error before its code is loaded, never SIGILL
    monkeypatch.setattr(backend, "amx_available", lambda: (True, ""))
    monkeypatch.setattr(amx, "amx_available", lambda: (False, "no AMX (test)"))
    with pytest.raises(LLVMBackendError, match="needs AMX tiles"):
        cortex.compile(model, target="llvm", weights="bfloat16", schedule={"bf16_dot": "amx"})
