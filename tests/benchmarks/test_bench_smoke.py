"""``cortex bench``: the quick run end to end (JSON, report, plots), the fairness machinery
(worker processes stopped while idle, failures recorded rather than fatal), and unit tests of
the workloads, peers, timing and summary, so the benchmark cannot rot while the pipeline changes.

The quick run (``cortex bench --quick``, what CI runs) happens once per module in a subprocess:
a few seconds plus the import of each installed peer library in its own worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cortex.bench import peers as peer_catalog
from cortex.bench import workloads
from cortex.bench.contenders import ContenderSpec
from cortex.bench.isolation import WorkerError, make_host
from cortex.bench.options import BenchOptions, quick
from cortex.bench.run import TOLERANCE, Case, check, reference_for
from cortex.bench.summary import round_ratio_range
from cortex.bench.timing import Timing, measure, summarize
from cortex.bench.workloads import GroupKey, build_model
from cortex.core.plugin.distribution import pip_install

ROOT = Path(__file__).resolve().parents[2]
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_DYNET = importlib.util.find_spec("dynet") is not None
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
REQUIRED = {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",") if n.strip()}
STATUSES = {"ok", "skipped", "unavailable", "error", "wrong"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run([sys.executable, "-m", "cortex", "bench", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads((out / "bench.json").read_text())


@pytest.fixture
def doc(quick_run: tuple[Path, dict]) -> dict:
    return quick_run[1]


def test_quick_run_writes_json_report_and_plots(quick_run: tuple[Path, dict]) -> None:
    out, doc = quick_run
    report = (out / "report.md").read_text()
    assert "Fairness (stop)" in report and "| model |" in report
    if HAS_MATPLOTLIB:
        for name in ("latency.png", "speedup.png"):
            png = (out / name).read_bytes()
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, name
            assert f"]({name})" in report
    assert doc["duration_s"] < 300  # a hang detector, not a timing assertion


def test_top_level_schema(doc: dict) -> None:
    assert doc["schema"] == "cortex-bench/1" and doc["quick"] is True
    for key in ("created_utc", "command", "host", "versions", "fairness", "settings", "compile",
                "points", "results", "summary", "notes"):
        assert key in doc, key
    for key in ("cpu", "logical_cpus", "usable_cpus", "python", "platform", "loadavg_at_end"):
        assert doc["host"][key] not in (None, ""), key
    assert doc["versions"]["numpy"] and doc["versions"]["cortex"]
    assert doc["settings"]["models"] == ["TreeLSTM", "ChildSumTreeLSTM"]
    assert doc["settings"]["base"] == {"hidden": 16, "tokens": 4, "batch": 1}


def test_fairness_is_recorded_per_worker(doc: dict) -> None:
    fair = doc["fairness"]
    assert fair["isolation"] == "stop" and "SIGSTOP" in fair["method"]
    workers = fair["workers"]
    names = {r["name"] for r in doc["results"] if r["status"] == "ok"}
    assert names <= set(workers)
    pids = [w["pid"] for w in workers.values()]
    assert len(set(pids)) == len(pids) and os.getpid() not in pids  # one process each
    for name in names:
        assert workers[name]["threads"]["pid"] == workers[name]["pid"]
    if HAS_TORCH:
        assert workers["torch_levels"]["threads"]["torch_threads"] >= 1


def test_star_sweep_points(doc: dict) -> None:
    got = {(p["model"], p["hidden"], p["tokens"], p["batch"]) for p in doc["points"]}
    for m in ("TreeLSTM", "ChildSumTreeLSTM"):
        assert {(m, 16, 4, 1), (m, 16, 4, 4), (m, 16, 8, 1), (m, 32, 4, 1)} <= got
    assert len(got) == 8
    for p in doc["points"]:
        assert p["inputs"] == p["batch"] and p["flops"] > 0
        assert p["size_range"][0] <= p["tokens"] <= p["size_range"][1]


def test_every_result_is_well_formed(doc: dict) -> None:
    rounds = doc["settings"]["rounds"]
    for r in doc["results"]:
        assert r["status"] in STATUSES, r
        if r["status"] != "ok":
            assert r["reason"], r  # every entry that was not timed says why
            continue
        assert r["max_error"] <= TOLERANCE, r
        assert 0 < r["min_ms"] <= r["p10_ms"] <= r["median_ms"] <= r["p90_ms"], r
        assert r["reps"] >= 3 * rounds and r["rounds"] == rounds == len(r["round_medians_ms"])
        assert r["spread"] >= 0 and r["gflops"] > 0


def test_every_installed_peer_matches_the_reference(doc: dict) -> None:
    by = {(r["model"], r["name"]): [] for r in doc["results"] if r["kind"] == "peer"}
    for r in doc["results"]:
        if r["kind"] == "peer":
            by[(r["model"], r["name"])].append(r)
    want = {("TreeLSTM", "numpy_levels"), ("ChildSumTreeLSTM", "numpy_levels")}
    if HAS_TORCH:
        want |= {("TreeLSTM", "torch_naive"), ("TreeLSTM", "torch_levels"),
                 ("ChildSumTreeLSTM", "torch_levels")}
    if HAS_DYNET:
        want.add(("TreeLSTM", "dynet_autobatch"))
    for key in want:
        assert len(by[key]) == 4 and all(r["status"] == "ok" for r in by[key]), by[key]
    for rs in by.values():  # a peer whose library is absent says so; none is wrong or broken
        assert all(r["status"] in ("ok", "skipped") for r in rs), rs


def test_llvm_runs_or_says_why(doc: dict) -> None:
    cortex_rs = [r for r in doc["results"] if r["kind"] == "cortex"]
    assert {r["name"] for r in cortex_rs} == {"llvm"} and len(cortex_rs) == 8
    if "llvm" in REQUIRED:
        assert all(r["status"] == "ok" for r in cortex_rs), cortex_rs
    for r in cortex_rs:
        assert r["status"] in ("ok", "unavailable"), r
        if r["status"] == "ok":
            assert r["compile_s"] > 0 and r["first_call_ms"] > 0
    for c in doc["compile"]:
        assert c["status"] != "ok" or c["param_mib"] >= 0


def test_summary_ratios_are_ratios_of_medians(doc: dict) -> None:
    rec = {(r["model"], r["hidden"], r["tokens"], r["batch"], r["name"]): r for r in doc["results"]}
    checked = 0
    for s in doc["summary"]:
        if s["best_peer"] is not None:
            assert s["best_peer_ms"] == min(v for k, v in s["peers_ms"].items())
        for t, v in s["targets"].items():
            for peer, x in v["speedup_vs_peer"].items():
                key = (s["model"], s["hidden"], s["tokens"], s["batch"])
                assert x == pytest.approx(rec[(*key, peer)]["median_ms"] / rec[(*key, t)]["median_ms"])
                lo, hi = v["speedup_vs_peer_rounds"][peer]
                assert lo <= hi
                checked += 1
    assert checked >= 8 or "llvm" not in REQUIRED


# ------------------------------------------------------------------ the detailed script


def test_bench_treelstm_script_keeps_the_target_fields(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_treelstm.py"), "--quick",
                           "--targets", "numpy", "--models", "TreeLSTM,DAGRNN", "--peers", "numpy",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    s = next(e for e in doc["summary"] if e["model"] == "TreeLSTM" and e["batch"] == 1)
    t = s["targets"]["numpy"]
    assert s["best_peer"] == "numpy_levels"
    assert t["speedup_prepared_vs_best_peer"] == pytest.approx(s["best_peer_ms"] / t["prelinearized_ms"])
    r = next(r for r in doc["results"] if r["kind"] == "cortex" and r["status"] == "ok")
    assert set(r["variants"]) == {"call_uncached", "run_prelinearized"}
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from gpu_bench_summary import table
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert len(table(doc)) > 2  # the GPU check's summary still reads this JSON


# ------------------------------------------------------------------ isolation and failures


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="SIGSTOP is POSIX")
def test_a_worker_is_stopped_between_requests_and_a_dead_one_is_reported(tmp_path: Path) -> None:
    host = make_host("numpy_levels", "stop", threads=0, log_dir=tmp_path)
    try:
        info = host.request("hello", 60)
        assert info["pid"] == host.pid != os.getpid()

        def state() -> str:
            return Path(f"/proc/{host.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

        if Path("/proc").exists():
            assert state() == "T"  # stopped: none of its threads can run
        group = GroupKey("TreeLSTM", 8, None, 30, 0)
        res = host.request("setup", 120, spec=ContenderSpec("peer", "numpy_levels"), group=group,
                           points=[(3, 2)])
        assert res["status"] == "ok" and res["points"][(3, 2)]["variants"] == ["call"]
        ns = host.request("measure", 60, point=(3, 2), variant="call", timing=Timing(2, 0.0, 0.0, 0))
        assert len(ns) == 2 and min(ns) > 0
        with pytest.raises(WorkerError, match="nothing to time"):
            host.request("measure", 60, point=(9, 9), variant="call", timing=Timing())
        os.kill(host.pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match="died"):
            host.request("hello", 60)
    finally:
        host.close()


def test_failures_are_recorded_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(model, batch, raw):
        raise RuntimeError("this peer is broken")

    def wrong(model, batch, raw):
        return lambda: {"h": np.zeros((batch.batch_size, model.hidden), np.float32)}

    monkeypatch.setattr(peer_catalog, "PEERS", peer_catalog.PEERS + (
        peer_catalog.PeerSpec("broken", ("TreeLSTM",), None, broken, "raises"),
        peer_catalog.PeerSpec("zeros", ("TreeLSTM",), None, wrong, "wrong numbers")))
    from cortex.bench.run import run

    opts = replace(quick(BenchOptions(out=tmp_path)), models=("TreeLSTM",), hiddens=(8,),
                   tokens=(3,), batches=(2,), rounds=1, isolation="inprocess",
                   targets=("numpy", "no-such-target"), peers=("numpy_levels", "broken", "zeros"))
    doc = run(opts, log=lambda msg: None)
    by = {r["name"]: r for r in doc["results"]}
    assert by["broken"]["status"] == "error" and "this peer is broken" in by["broken"]["reason"]
    assert by["zeros"]["status"] == "wrong" and "reference" in by["zeros"]["reason"]
    assert by["no-such-target"]["status"] == "unavailable" and by["no-such-target"]["reason"]
    assert by["numpy"]["status"] == "ok" and by["numpy_levels"]["status"] == "ok"
    assert doc["fairness"]["isolation"] == "inprocess"
    assert "median_ms" not in by["zeros"]  # a wrong contender is never timed


def test_report_without_matplotlib_says_how_to_get_plots(doc: dict, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from cortex.bench import report

    monkeypatch.setattr(report, "have_matplotlib", lambda: False)
    w = report.write_report(doc, tmp_path)
    assert not list(tmp_path.glob("*.png"))
    assert any(pip_install("bench") in m for m in w.messages)
    assert "TreeLSTM" in w.table and (tmp_path / "report.md").exists()


# ------------------------------------------------------------------ units


def test_options_make_star_and_grid_sweeps() -> None:
    o = BenchOptions(models=("TreeGRU",), batches=(1, 10, 100), hiddens=(64, 256), tokens=(10, 30))
    assert o.base == (64, 10, 10)
    assert o.points() == [("TreeGRU", 64, 10, 1), ("TreeGRU", 64, 10, 10), ("TreeGRU", 64, 10, 100),
                          ("TreeGRU", 64, 30, 10), ("TreeGRU", 256, 10, 10)]
    assert len(replace(o, sweep="grid").points()) == 2 * 3 * 2
    for bad in (dict(models=("Nope",)), dict(batches=(0,)), dict(rounds=0), dict(sweep="x"),
                dict(isolation="x")):
        with pytest.raises(ValueError):
            BenchOptions(**bad)


def test_treelstm_and_childsum_flops() -> None:
    from cortex.core.linearize import ParentArray, linearize

    batch = linearize([((1, 2), 3)], arity=2)  # 3 leaves, 2 internal nodes
    h = d = 256
    assert workloads.flops("TreeLSTM", batch, h, d) == 3 * (6 * h * d + 9 * h) + 2 * (20 * h * h + 17 * h)
    assert 20 * h * h == 1_310_720  # an internal node's GEMV is 1.31 MFLOP
    dep = linearize([ParentArray([-1, 0, 0, 1], words=[1, 2, 3, 4])])  # 2 leaves, 2 internal, 3 edges
    assert workloads.flops("ChildSumTreeLSTM", dep, h, d) == (
        2 * (6 * h * d + 9 * h) + 2 * (8 * h * d + 6 * h * h + 13 * h) + 3 * (2 * h * h + 5 * h))
    with pytest.raises(ValueError, match="no FLOP formula"):
        workloads.flops("Nope", batch, h, d)


def test_inputs_are_seeded_and_sized() -> None:
    assert workloads.size_range(30) == (20, 40)
    trees = workloads.make_trees(7, 20, 20, 40, vocab=100)
    assert trees == workloads.make_trees(7, 20, 20, 40, vocab=100)
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
        workloads.parse_like_tree(random.Random(0), 0, 10)
    a = workloads.make_inputs("ChildSumTreeLSTM", 12, 3, vocab=50, width=0, seed=1)
    b = workloads.make_inputs("ChildSumTreeLSTM", 12, 3, vocab=50, width=0, seed=1)
    assert [t.parents for t in a.structures] == [t.parents for t in b.structures]
    for t in a.structures:
        assert 8 <= len(t.parents) <= 16 and min(t.words) >= 0


def test_measure_and_summarize() -> None:
    calls = []
    ns = measure(lambda: calls.append(1), Timing(min_reps=7, min_time_s=0.0, max_time_s=5.0, warmup=2))
    assert len(ns) == 7 and len(calls) == 9
    s = summarize([[3_000_000, 1_000_000], [2_000_000]])
    assert s["median_ms"] == 2.0 and s["min_ms"] == 1.0 and s["reps"] == 3 and s["rounds"] == 2
    assert s["round_medians_ms"] == [2.0, 2.0]
    assert round_ratio_range({"round_medians_ms": [2.0, 6.0]}, {"round_medians_ms": [1.0, 2.0]}) == [2.0, 3.0]


@pytest.mark.parametrize("model", ["TreeLSTM", "TreeGRU", "ChildSumTreeLSTM"])
def test_numpy_peers_match_the_reference_and_other_weights_do_not(model: str) -> None:
    group = GroupKey(model, 8, None, 30, 0)
    m = build_model(group)
    ref = reference_for(group, m, (6, 3))
    peer = peer_catalog.peer_for("numpy_levels", model)
    inputs = workloads.make_inputs(model, 6, 3, vocab=30, width=0, seed=0)
    batch = workloads.linearize_for(m, inputs.structures)
    good = Case(group, (6, 3), "peer", "numpy_levels", "cpu", "numpy_levels")
    check(good, ref, peer.build(m, batch, inputs.raw)())
    assert good.status == "ok" and good.info["max_error"] < 1e-5
    other = build_model(replace(group, seed=1))
    bad = Case(group, (6, 3), "peer", "numpy_levels", "cpu", "numpy_levels")
    check(bad, ref, peer.build(other, batch, inputs.raw)())
    assert bad.status == "wrong" and "reference" in bad.reason


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed (an optional peer)")
@pytest.mark.parametrize("model", ["TreeGRU", "ChildSumTreeLSTM", "DAGRNN"])
def test_torch_level_peers_match_the_reference(model: str) -> None:
    group = GroupKey(model, 8, None, 30, 0)
    m = build_model(group)
    width = m.params["U"].shape[1] if model == "DAGRNN" else 0
    ref = reference_for(group, m, (9, 3))
    inputs = workloads.make_inputs(model, 9, 3, vocab=30, width=width, seed=0)
    run = peer_catalog.peer_for("torch_levels", model).build(
        m, workloads.linearize_for(m, inputs.structures), inputs.raw)
    case = Case(group, (9, 3), "peer", "torch_levels", "cpu", "torch_levels")
    check(case, ref, run())
    assert case.status == "ok", case.reason


@pytest.mark.skipif(not HAS_DYNET, reason="DyNet is not installed (pip install dyNET38)")
def test_dynet_peer_matches_on_deep_trees() -> None:
    # Regression: with its ParameterCollection garbage-collected the DyNet peer read freed
    # parameter memory, which showed only on trees deeper than --quick's. DyNet turns on
    # flush-to-zero for its whole process: the check runs in a child process.
    code = f"import runpy; runpy.run_path({str(Path(__file__))!r})['_dynet_deep_trees_check']()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "dynet deep trees: ok" in proc.stdout, proc.stdout[-2000:]


def _dynet_deep_trees_check() -> None:
    from cortex.bench.peers import dynet_peer

    group = GroupKey("TreeLSTM", 16, None, 50, 0)
    model = build_model(group)
    ref = reference_for(group, model, (32, 2))
    raw = workloads.make_inputs("TreeLSTM", 32, 2, vocab=50, width=0, seed=0).raw
    if dynet_peer.available() is not None:
        raise RuntimeError(dynet_peer.available())
    run = dynet_peer.build_autobatch(model, raw)
    other = build_model(replace(group, seed=1))
    others = [dynet_peer.build_autobatch(other, raw) for _ in range(3)]  # reuse freed memory
    others[0]()
    for _ in range(2):
        case = Case(group, (32, 2), "peer", "dynet_autobatch", "cpu", "dynet_autobatch")
        check(case, ref, run())
        assert case.status == "ok", case.reason
    print("dynet deep trees: ok")
