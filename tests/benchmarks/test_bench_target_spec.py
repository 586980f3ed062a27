"""``cortex bench --targets llvm,llvm:weights=bfloat16``: a target entry with its own compile
options, a contender of its own next to the plain target."""

from __future__ import annotations

import pytest

from cortex.bench.options import BenchOptions, target_spec
from cortex.bench.run import WEIGHT_TOLERANCE, Runner


def test_a_spec_is_a_target_and_its_options():
    assert target_spec("llvm") == ("llvm", ())
    assert target_spec("llvm:weights=bfloat16") == ("llvm", (("weights", "bfloat16"),))
    assert target_spec("llvm:weights=bfloat16:threads=1") == ("llvm", (("weights", "bfloat16"), ("threads", 1)))


@pytest.mark.parametrize("bad", [":weights=bfloat16", "llvm:weights", "llvm:=1"])
def test_a_malformed_spec_is_refused_before_anything_runs(bad):
    with pytest.raises(ValueError, match="target spec"):
        BenchOptions(targets=("llvm", bad))


def test_each_entry_is_its_own_contender_with_its_options():
    runner = Runner(BenchOptions(targets=("llvm", "llvm:weights=bfloat16"), peers=()), log=lambda s: None)
    plain, bf16 = runner.contenders("TreeLSTM")
    assert (plain.name, plain.key, plain.compile_options) == ("llvm", "llvm", ())
    assert (bf16.name, bf16.key) == ("llvm", "llvm:weights=bfloat16")
    assert dict(bf16.compile_options) == {"weights": "bfloat16"} and "bfloat16" in WEIGHT_TOLERANCE
