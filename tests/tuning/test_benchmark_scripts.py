"""The tuner's benchmark scripts run end to end at tiny sizes and write the JSON they document."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llvmlite", reason="the scripts tune and compile on the llvm target (pip install '.[llvm]')")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_tune_search_script(tmp_path: Path) -> None:
    out, png = tmp_path / "s.json", tmp_path / "s.png"
    subprocess.run([sys.executable, str(BENCH / "tune_search.py"), "--models", "TreeRNN:hidden=4,vocab=9",
                    "--trials", "2", "--seeds", "1", "--option", "threads=1", "--out", str(out),
                    "--plot", str(png)], check=True, timeout=600)
    data = json.loads(out.read_text())
    runs = data["models"]["TreeRNN:hidden=4,vocab=9"]["runs"]
    assert sorted(r["arm"] for r in runs) == ["model", "random"]
    assert all(len(r["curve"]) == 2 and sum(t["measured"] for t in r["trials"]) == 2 for r in runs)
    assert data["models"]["TreeRNN:hidden=4,vocab=9"]["summary"]["seeds"] == 1
    assert png.stat().st_size > 0


def test_tune_lookup_script(tmp_path: Path) -> None:
    out = tmp_path / "l.json"
    subprocess.run([sys.executable, str(BENCH / "tune_lookup.py"), "--model", "TreeRNN:hidden=4,vocab=9",
                    "--rounds", "2", "--others", "5", "--out", str(out)], check=True, timeout=600)
    data = json.loads(out.read_text())
    assert data["records_in_db"] == 6 and 0 < data["lookup_s"] < 5
    assert len(data["all"]["wall"]["auto"]) == 2


def test_tune_zoo_script(tmp_path: Path) -> None:
    out, png = tmp_path / "z.json", tmp_path / "z.png"
    subprocess.run([sys.executable, str(BENCH / "tune_zoo.py"), "--models", "TreeLSTM", "--targets", "llvm",
                    "--hidden", "8", "--tokens", "4", "--batches", "1,2", "--tune-trials", "2", "--tune-batch", "2",
                    "--rounds", "1", "--peers", "numpy", "--out", str(out), "--plot", str(png)],
                   check=True, timeout=600)
    data = json.loads(out.read_text())
    assert [(r["model"], r["target"], r["batch"]) for r in data["summary"]] == [
        ("TreeLSTM", "llvm", 1), ("TreeLSTM", "llvm", 2)]
    row = data["summary"][0]
    assert row["best_peer"] == "numpy_levels" and row["default_ms"] > 0 and row["tuned_ms"] > 0
    assert row["search"]["trials_measured"] == 2 and row["search"]["workload"].startswith("b2-")
    sources = {c["contender"]: c["schedule_source"] for c in data["bench"]["compile"]}
    assert sources["llvm-default"] == "default rules"
    assert sources["llvm-tuned"].startswith("tuning record 1 (workload b2-")
    assert png.stat().st_size > 0
