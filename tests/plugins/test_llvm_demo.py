"""``cortex demo``: TreeLSTM on the bundled sentences, llvm next to the NumPy reference."""

from __future__ import annotations

import pytest

pytest.importorskip("llvmlite", reason="the demo's default target is llvm (pip install 'cortex-compiler[llvm]')")

from cortex.cli import main  # noqa: E402
from cortex.plugins.cpu_llvm.demo import run_demo  # noqa: E402


def test_demo_runs_on_llvm_and_agrees_with_the_reference():
    lines: list[str] = []
    result = run_demo(hidden=16, reps=2, print_fn=lines.append)
    assert result["target"] == "llvm"
    assert len(result["rows"]) >= 5
    assert all(row["max_abs_diff"] < 1e-5 and row["ms"] > 0 for row in result["rows"])
    assert lines[0].startswith("Cortex demo: the zoo's TreeLSTM (hidden 16, float32")
    assert lines[1].startswith("compiled for llvm in ")
    assert lines[-1].startswith("total: llvm") and "than the NumPy reference" in lines[-1]


def test_cortex_demo_command(capsys):
    assert main(["demo", "--hidden", "8", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "compiled for llvm" in out and "NumPy ref" in out and "schedule: " in out
