"""benchmarks/tune_replay.py: the replay of the searches on a synthetic pool (no compiling)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn", reason="the model-guided arms need scikit-learn (pip install '.[tune]')")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH.parent))

from benchmarks import tune_replay  # noqa: E402
from cortex import Capabilities  # noqa: E402
from cortex.core.lowering.schedule import ScheduleSpace  # noqa: E402

CPU = Capabilities(num_cores=4, vector_bits=256, cache_bytes_per_core=1 << 20, dialect="")


def _speedup(s) -> float:
    """A planted structure: two knobs right make a schedule fast, one of them alone helps."""
    return 0.5 + 0.4 * (s.unroll == 4) + 0.4 * (s.tile_hidden == 32)


def synthetic_pool(uniform: int = 40, mutants: int = 16) -> dict:
    space = ScheduleSpace(CPU, "float32")
    held = {"threads": space.default().threads}
    members = tune_replay.candidates(space, held, (), uniform, mutants, seed=0)
    cands = []
    for i, (part, s) in enumerate(members):
        ok = i % 9 != 5  # a few failed candidates, as failed compiles
        sp = _speedup(s) if ok else None
        cands.append({"part": part, "schedule": s.to_dict(), "ok": ok, "speedup": sp,
                      "ratio": 1 / sp if ok else None, "compile_s": 0.1,
                      "error": "" if ok else "compile failed: planted", "program_key": f"p{i}"})
    return {"capabilities": tune_replay._capabilities_json(CPU), "dtype": "float32", "held": held,
            "features": [], "model": "synthetic", "target": "none", "workload_class": "b8-n32-parse",
            "candidates": cands}


def test_the_pool_has_the_uniform_and_mutant_parts_asked_for() -> None:
    pool = synthetic_pool()
    parts = [e["part"] for e in pool["candidates"]]
    assert parts.count("uniform") == 40 and parts.count("mutant") == 16
    assert len({json.dumps(e["schedule"], sort_keys=True) for e in pool["candidates"]}) == 56
    assert all(e["schedule"]["threads"] == pool["held"]["threads"] for e in pool["candidates"])


def test_each_arm_searches_only_its_part_of_the_pool_and_gives_well_formed_curves() -> None:
    pool = synthetic_pool()
    runs = [tune_replay.replay(pool, arm, seed, trials=12) for seed in range(2)
            for arm in ("random", "model", "model+default", "mutants")]
    for r in runs:
        assert len(r["curve"]) == 12 == len(r["picked"]) == len(set(r["picked"]))
        assert all(a <= b for a, b in zip(r["curve"], r["curve"][1:]))  # best so far
        parts = {pool["candidates"][i]["part"] for i in r["picked"]}
        allowed = {"model+default": {"uniform", "mutant"}, "mutants": {"mutant"}}.get(r["arm"], {"uniform"})
        assert parts <= allowed
        best = max((pool["candidates"][i]["speedup"] or 0.0) for i in r["picked"])
        assert r["curve"][-1] == best
    s = tune_replay.summarize(pool, runs, trials=12)
    assert s["seeds"] == 2 and set(s["arms"]) == {"random", "model", "model+default", "mutants"}
    assert all(len(a["median"]) == len(a["q25"]) == len(a["q75"]) == 12 for a in s["arms"].values())
    assert s["random_median_best"] == s["arms"]["random"]["median_best"]
    assert s["pool"]["valid"] == sum(e["ok"] for e in pool["candidates"])
    assert s["pool"]["any_beats_default"] == (s["pool"]["best_speedup"] >= 1.02)
    for a in ("model", "model+default", "mutants"):
        assert 0 <= s["arms"][a]["seeds_reaching_random_best_within_half"] <= 2


def test_the_script_replays_a_stored_pool(tmp_path: Path) -> None:
    pool, out = tmp_path / "pool.json", tmp_path / "r.json"
    pool.write_text(json.dumps(synthetic_pool(uniform=24, mutants=8)))
    subprocess.run([sys.executable, str(BENCH / "tune_replay.py"), "--pool", str(pool), "--seeds", "2",
                    "--trials", "8", "--arms", "random,model+default", "--out", str(out)],
                   check=True, timeout=120)
    data = json.loads(out.read_text())
    assert [(r["arm"], r["seed"]) for r in data["runs"]] == [
        ("random", 0), ("model+default", 0), ("random", 1), ("model+default", 1)]
    assert "median_reaches_random_median_best_at" in data["summary"]["arms"]["model+default"]
    help_text = subprocess.run([sys.executable, str(BENCH / "tune_replay.py"), "--help"], check=True,
                               capture_output=True, text=True, timeout=60).stdout
    assert "--pool" in help_text and "--uniform" in help_text
