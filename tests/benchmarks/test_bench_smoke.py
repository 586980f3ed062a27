"""Smoke test of ``benchmarks/bench_treelstm.py``: the script runs, its JSON has the documented
schema, and every peer that is installed matches the float64 reference (so the benchmark cannot
rot while the pipeline changes). Also unit tests of ``benchmarks/common.py`` and of the check
that rejects a peer with wrong numbers.

Runs ``--quick`` (tiny sizes, 2 repeats) with the ``numpy`` target in a subprocess, once per
module; the whole file takes a few seconds of CPU (most of it importing PyTorch).
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_treelstm.py"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402
from benchmarks.bench_treelstm import TOLERANCE, Case, build_workload, check  # noqa: E402

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_DYNET = importlib.util.find_spec("dynet") is not None
STATUSES = {"ok", "skipped", "unavailable", "error", "wrong"}


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--targets", "numpy",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_top_level_schema(doc: dict) -> None:
    assert doc["schema"] == "cortex-bench-treelstm/1"
    assert doc["quick"] is True
    for key in ("created_utc", "command", "environment", "settings", "targets", "compile",
                "workloads", "results", "summary", "notes"):
        assert key in doc, key
    env = doc["environment"]
    for key in ("cpu", "logical_cpus", "numpy", "numpy_blas", "python"):
        assert env[key] not in (None, ""), key
    if HAS_TORCH:
        assert env["torch_num_threads"] >= 1 and env["peer_threads"] >= 1
    assert set(doc["settings"]["models"]) == {"TreeLSTM", "TreeGRU", "TreeFC", "MVRNN", "DAGRNN",
                                              "SeqLSTM"}


def test_workloads_have_flops_and_shapes(doc: dict) -> None:
    assert len(doc["workloads"]) == 6 * 2  # every model at batch 1 and 3
    for w in doc["workloads"]:
        assert w["flops"] > 0 or w["model"] == "MVRNN" and w["internal"] == 0
        assert w["nodes"] == w["leaves"] + w["internal"] and w["levels"] >= 1
        assert w["inputs"] == w["batch"]
        assert w["flop_formula"]["internal"]


def test_every_result_is_well_formed(doc: dict) -> None:
    for r in doc["results"]:
        assert r["status"] in STATUSES, r
        if r["status"] == "ok":
            assert r["max_error"] <= TOLERANCE, r
            assert 0 < r["p10_ms"] <= r["median_ms"] <= r["p90_ms"], r
            assert r["reps"] >= 2 and r["gflops"] > 0, r
        else:
            assert r["reason"], r  # every non-ok entry says why


def test_every_installed_peer_matches_the_reference(doc: dict) -> None:
    peers = {(r["model"], r["batch"], r["name"]): r for r in doc["results"] if r["kind"] == "peer"}
    want = {("TreeLSTM", "numpy_levels")}
    if HAS_TORCH:
        want |= {("TreeLSTM", "torch_naive"), ("TreeLSTM", "torch_levels"),
                 ("TreeGRU", "torch_levels"), ("TreeFC", "torch_levels"),
                 ("MVRNN", "torch_levels"), ("DAGRNN", "torch_levels"),
                 ("SeqLSTM", "torch_nn_lstm")}
    if HAS_DYNET:
        want.add(("TreeLSTM", "dynet_autobatch"))
    for model, name in want:
        for b in (1, 3):
            r = peers[(model, b, name)]
            assert r["status"] == "ok", r
            assert r["max_error"] <= TOLERANCE
    for r in peers.values():
        assert r["status"] in ("ok", "skipped"), r


def test_numpy_target_runs_or_says_why(doc: dict) -> None:
    cortex = [r for r in doc["results"] if r["kind"] == "cortex"]
    assert {r["model"] for r in cortex} == set(doc["settings"]["models"])
    if doc["targets"]["numpy"]["status"] != "ok":
        assert all(r["status"] == "unavailable" and r["reason"] for r in cortex)
        return
    for r in cortex:
        assert r["status"] in ("ok", "unavailable"), r
        if r["status"] == "ok":
            assert r["compile_s"] > 0
            assert set(r["variants"]) >= {"call_uncached"}


def test_summary_relates_targets_to_the_best_peer(doc: dict) -> None:
    by_case = {(s["model"], s["batch"]): s for s in doc["summary"]}
    s = by_case[("TreeLSTM", 1)]
    assert s["best_peer"] in s["peers_ms"]
    assert s["best_peer_ms"] == min(s["peers_ms"].values())
    for t in s["targets"].values():
        assert t["speedup_vs_best_peer"] == pytest.approx(s["best_peer_ms"] / t["median_ms"])
        # every Cortex executable has run() and linearize(): the like-for-like ratio is there
        assert t["speedup_prepared_vs_best_peer"] == pytest.approx(
            s["best_peer_ms"] / t["prelinearized_ms"])


# ------------------------------------------------------------------ in-process unit tests


def test_treelstm_flops_match_the_design_numbers() -> None:
    from cortex.core.linearize import linearize

    batch = linearize([((1, 2), 3)], arity=2)  # 3 leaves, 2 internal nodes
    h = d = 256
    got = common.flops_per_batch("TreeLSTM", batch, h, d)
    assert got == 3 * (6 * h * d + 9 * h) + 2 * (20 * h * h + 17 * h)
    assert 20 * h * h == 1_310_720  # an internal node's GEMV is 1.31 MFLOP
    with pytest.raises(ValueError, match="no FLOP formula"):
        common.flops_per_batch("Nope", batch, h, d)


def test_trees_have_the_requested_leaves() -> None:
    trees = common.make_trees(7, 20, 20, 40, vocab=100)
    assert trees == common.make_trees(7, 20, 20, 40, vocab=100)  # seeded
    for t in trees:
        leaves, stack = 0, [t]
        while stack:
            n = stack.pop()
            if isinstance(n, tuple):
                assert len(n) == 2
                stack.extend(n)
            else:
                assert 0 <= n < 100
                leaves += 1
        assert 20 <= leaves <= 40
    with pytest.raises(ValueError):
        common.parse_like_tree(random.Random(0), 0, 10)


def test_measure_respects_reps_and_summary_orders() -> None:
    calls = []
    ns = common.measure(lambda: calls.append(1), min_reps=7, min_time_s=0.0, max_time_s=5.0,
                        warmup=2)
    assert len(ns) == 7 and len(calls) == 9
    s = common.Samples([3_000_000, 1_000_000, 2_000_000]).summary()
    assert s["median_ms"] == 2.0 and s["min_ms"] == 1.0 and s["reps"] == 3


def test_check_rejects_a_peer_with_other_weights() -> None:
    from benchmarks.bench_treelstm import Settings
    from benchmarks.peers import numpy_peer
    from cortex.models import TreeLSTM

    s = Settings(hidden=8, embed=8, vocab=30, min_leaves=3, max_leaves=5, batches=(2,),
                 mvrnn_hidden=4, mvrnn_vocab=10, grid=2, seq_len=3, seed=0, min_reps=1,
                 min_time_s=0.0, max_time_s=0.0, rounds=1)
    model = TreeLSTM(hidden=8, embed=8, vocab=30, seed=0)
    work = build_workload("TreeLSTM", model, 8, 8, 2, s)
    good = Case(work, "peer", "numpy_levels", "cpu")
    check(good, numpy_peer.build_levels(model, work.batch)())
    assert good.status == "ok" and good.info["max_error"] < 1e-5
    other = TreeLSTM(hidden=8, embed=8, vocab=30, seed=1)
    bad = Case(work, "peer", "numpy_levels", "cpu")
    check(bad, numpy_peer.build_levels(other, work.batch)())
    assert bad.status == "wrong" and "reference" in bad.reason
    shapeless = Case(work, "peer", "x", "cpu")
    check(shapeless, {"nothing": np.zeros(1)})
    assert shapeless.status == "wrong"


@pytest.mark.skipif(not HAS_DYNET, reason="DyNet is not installed (pip install dyNET38)")
def test_dynet_peer_matches_on_deep_trees() -> None:
    # Regression: with its ParameterCollection garbage-collected the DyNet peer read freed
    # parameter memory, which showed only on trees deeper than --quick's.
    # Importing DyNet turns on flush-to-zero/denormals-are-zero for the whole process (it is
    # built with fast-math), which would change every later test's float results: run the
    # check in a child process.
    code = f"import runpy; runpy.run_path({str(Path(__file__))!r})['_dynet_deep_trees_check']()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "dynet deep trees: ok" in proc.stdout, proc.stdout[-2000:]


def _dynet_deep_trees_check() -> None:
    from benchmarks.bench_treelstm import Settings
    from benchmarks.peers import dynet_peer
    from cortex.models import TreeLSTM

    s = Settings(hidden=16, embed=16, vocab=50, min_leaves=25, max_leaves=40, batches=(2,),
                 mvrnn_hidden=4, mvrnn_vocab=10, grid=2, seq_len=3, seed=0, min_reps=1,
                 min_time_s=0.0, max_time_s=0.0, rounds=1)
    model = TreeLSTM(hidden=16, embed=16, vocab=50, seed=0)
    work = build_workload("TreeLSTM", model, 16, 16, 2, s)
    if dynet_peer.available() is not None:
        raise RuntimeError(dynet_peer.available())
    run = dynet_peer.build_autobatch(model, work.raw)
    other = TreeLSTM(hidden=16, embed=16, vocab=50, seed=1)
    others = [dynet_peer.build_autobatch(other, work.raw) for _ in range(3)]  # reuse freed memory
    others[0]()
    for _ in range(2):
        case = Case(work, "peer", "dynet_autobatch", "cpu")
        check(case, run())
        assert case.status == "ok", case.reason
    print("dynet deep trees: ok")
