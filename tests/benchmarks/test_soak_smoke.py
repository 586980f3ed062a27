"""Smoke test of ``benchmarks/soak.py``: ``--quick`` runs in a subprocess, its JSON has the
documented fields, and the figures are sane under generous bounds (no thread or descriptor left
behind by dropped executables, idle executables far from spinning)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "soak.py"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="soak.py reads /proc (Linux)")


@pytest.fixture(scope="module", params=["numpy", "llvm"])
def doc(request, tmp_path_factory: pytest.TempPathFactory) -> dict:
    if request.param == "llvm":
        pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite")
    out = tmp_path_factory.mktemp("soak") / f"{request.param}.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--target", request.param, "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_schema(doc: dict) -> None:
    assert doc["schema"] == "cortex-soak/1" and doc["quick"] is True
    for key in ("created_utc", "command", "target", "environment", "start", "end", "phases", "seconds"):
        assert key in doc, key
    assert set(doc["phases"]) == {"calls", "compiles", "threads", "idle"}
    for snap in (doc["start"], doc["end"]):
        assert {"rss_kb", "malloc_kb", "fds", "threads"} <= set(snap)
    calls, compiles = doc["phases"]["calls"], doc["phases"]["compiles"]
    for key in ("calls_per_s", "rss_growth_kb_per_1000_calls", "rss_growth_kb_per_1000_calls_second_half",
                "malloc_growth_kb_per_1000_calls", "fds_delta", "threads_delta"):
        assert key in calls, key
    for key in ("seconds_per_compile", "rss_growth_kb_per_compile", "rss_growth_kb_per_compile_second_half",
                "malloc_growth_kb_per_compile", "fds_delta", "threads_delta"):
        assert key in compiles, key
    idle = doc["phases"]["idle"]
    assert [r["executables"] for r in idle["runs"]] == [1, 3]
    assert all("cpu_percent_per_idle_executable" in r for r in idle["runs"])


def test_nothing_is_left_behind(doc: dict) -> None:
    phases = doc["phases"]
    assert phases["compiles"]["threads_delta"] == 0 and phases["compiles"]["fds_delta"] == 0
    assert phases["calls"]["threads_delta"] == 0 and phases["calls"]["fds_delta"] == 0
    assert phases["threads"]["threads_left_over"] == 0


def test_idle_executables_do_not_spin(doc: dict) -> None:
    """Generous: a spinning worker costs tens of percent of a core; a napping one ~6%."""
    assert doc["phases"]["idle"]["max_cpu_percent_per_idle_executable"] < 3.0, doc["phases"]["idle"]
