"""Smoke test of the linearizer benchmark script: it runs and prints the documented JSON."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_linearize.py"


def test_benchmark_prints_json(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--quick", "--trees", "3", "--leaves", "8"])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    report = json.loads(capsys.readouterr().out)
    assert report["workload"]["trees"] == 3
    assert report["peer_python_level_batching"]["us_per_batch"] > 0
    for form in ("parent_arrays", "child_tables", "edge_lists", "nested_tuples",
                 "sexpr_strings", "python_ast"):
        row = report["forms"][form]
        for cache in ("cache_off", "cache_on"):
            assert row[cache]["us_per_node"] > 0 and row[cache]["ratio_to_peer"] > 0
    assert set(report["bars"]) == {"array_forms_batch_us_le_100", "python_forms_us_per_node_le_2",
                                   "treelstm_nested_b1_us_le_50_b10_us_le_250"}
    for b in ("b1", "b10"):
        assert report["treelstm_nested"][b]["us_per_batch"] > 0
