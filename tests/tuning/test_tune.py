"""``cortex.tune`` end to end on small models: records, resuming, the worker, the CLI, and the
tuned schedules against the float64 reference on every structure family of the suite."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import cortex
from cortex.cli import main as cli_main
from cortex.core.plugin import hostinfo
from cortex.models import TreeRNN
from cortex.testing import zoo
from cortex.testing.runner import reference, structures
from cortex.testing.structures import FAMILIES, not_applicable
from cortex.testing.tolerance import check
from cortex.tuning.measure import Measurer, reference_states
from cortex.tuning.records import RecordStore
from cortex.tuning.tuner import Budget
from cortex.tuning.worker import WorkerError, WorkerMeasurer
from cortex.tuning.workload import Workload, WorkloadSpec

pytest.importorskip("llvmlite", reason="these tests tune and compile on the llvm target (pip install '.[llvm]')")

SMALL = WorkloadSpec(batch_size=4, nodes=12, batches=2)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "records.sqlite"
    monkeypatch.setenv("CORTEX_TUNE_DB", str(path))
    return path


def test_tune_stores_a_record_that_compile_then_uses(db: Path) -> None:
    model = TreeRNN(hidden=8, vocab=11, seed=1)
    result = cortex.tune(model, "llvm", workload=SMALL, budget=6, isolate=False, progress=False)
    measured = [t for t in result.trials if t.measured]
    assert len(measured) == 6 and result.stopped_by == "trials"
    assert all(t.compile_s == 0.0 and t.ratio is not None or not t.ok for t in result.trials if not t.measured)
    cls = Workload.from_spec(model, SMALL).workload_class
    assert result.key.workload == cls and result.key.target == "llvm"
    assert result.curve == sorted(result.curve) and len(result.curve) == 6
    threads = cortex.compile(model, target="llvm", schedule="default").schedule.threads
    assert {t.schedule["threads"] for t in result.trials} == {threads}  # held (tuner.HOLD)
    assert result.record is not None and result.record.id == 1
    assert result.speedup >= 1.0
    # the finalists: the best candidates faster than the default in the search, timed again
    faster = sorted(t.ratio for t in measured if t.ok and t.ratio < 1.0)  # no program twice
    assert [c["search_ratio"] for c in result.final_check] == faster[:3]
    verified = [c["verified_ratio"] for c in result.final_check if c["verified_ratio"]]
    assert result.speedup == 1.0 or result.speedup == pytest.approx(1 / min(verified))
    stored = RecordStore(db)
    assert [r.key for r in stored.records()] == [result.key]
    assert stored.trials(result.key.graph, "llvm", result.key.device, "float32") == result.trials
    exe = cortex.compile(model, target="llvm")
    assert exe.schedule == result.schedule
    assert exe.schedule_source.startswith(f"tuning record 1 (workload {cls}")
    assert cortex.compile(model, target="llvm", weights="bfloat16").schedule == result.schedule
    # a second session resumes: earlier trials are not measured again
    again = cortex.tune(model, "llvm", workload=SMALL, budget=4, isolate=False, progress=False,
                        method="random", seed=1)
    assert again.resumed == 6 and sum(t.measured for t in again.trials) == 4
    keys = {json.dumps(t.schedule, sort_keys=True) for t in result.trials + again.trials}
    assert len(keys) == len(result.trials) + len(again.trials)
    assert again.record is not None and again.record.trials == 10


def test_tune_validates_its_arguments() -> None:
    model = TreeRNN(hidden=4, vocab=5)
    with pytest.raises(TypeError, match="chooses 'schedule' itself"):
        cortex.tune(model, "llvm", schedule="default")
    with pytest.raises(TypeError, match="does not tune weights='bfloat16'.*Tune the float32"):
        cortex.tune(model, "llvm", weights="bfloat16")
    with pytest.raises(ValueError, match="method"):
        cortex.tune(model, "llvm", workload=SMALL, budget=1, method="annealing", isolate=False,
                    store=False, resume=False, progress=False)
    with pytest.raises(ValueError, match="hold must be"):
        cortex.tune(model, "llvm", workload=SMALL, hold=("thread",), store=False)
    with pytest.raises(ValueError, match="Budget.trials"):
        Budget(trials=0)
    with pytest.raises(TypeError, match="workload must be"):
        cortex.tune(model, "llvm", workload="b8-n32-parse", store=False)


def test_the_measurer_rejects_a_candidate_that_disagrees_with_the_reference() -> None:
    model = TreeRNN(hidden=6, vocab=11, seed=2)
    wl = Workload.from_spec(model, SMALL)
    wrong = [{k: v + 1.0 for k, v in ref.items()} for ref in reference_states(model, wl.batches)]
    m = Measurer(model, "llvm", {}, "float32", wl.batches, wrong)
    r = m.compile("default")
    assert not r.ok and r.error.startswith("wrong outputs on batch 0: state 'h'")
    with pytest.raises(RuntimeError, match="default schedule does not work"):
        m.baseline()


def test_the_worker_measures_and_is_replaced_after_a_timeout() -> None:
    model = TreeRNN(hidden=6, vocab=11, seed=2)
    wl = Workload.from_spec(model, SMALL)
    setup = {"model": model, "target": "llvm", "target_options": {}, "dtype": "float32",
             "batches": wl.batches, "reference": reference_states(model, wl.batches),
             "compile_options": {}}
    w = WorkerMeasurer(setup)
    try:
        assert w.info.seconds > 0 and w.info.schedule["unroll"] == 1
        r = w.compile({"unroll": 2}, timeout=120)
        assert r.ok and r.slot is not None
        times = w.time([r.slot], rounds=2, cutoff=float("inf"), timeout=120)
        assert set(times) == {r.slot} and times[r.slot].rounds == 2 and times[r.slot].ratio > 0
        lost = w.compile({"unroll": 4}, timeout=0.001)
        assert not lost.ok and "stopped" in lost.error and w.generation == 1
        assert w.compile({"unroll": 4}, timeout=120).ok  # the new worker works
        os.kill(w._proc.pid, signal.SIGKILL)  # a worker that dies is replaced too
        died = w.compile({"unroll": 8}, timeout=120)
        assert not died.ok and "exited" in died.error and w.generation == 2
        with pytest.raises(WorkerError, match="no compiled candidate"):  # its slots are gone
            w.time([r.slot], rounds=1, cutoff=1.0, timeout=120)
    finally:
        w.close()


REQUIRED = {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",")}
_opencl = hostinfo.opencl_devices()
OPENCL = pytest.mark.skipif(not _opencl.devices and "opencl" not in REQUIRED,
                            reason=f"OpenCL unavailable: no OpenCL device: {_opencl.error}")


@pytest.mark.parametrize("model_id, dtype, spec, target", [
    ("TreeLSTM", "float32", WorkloadSpec(batch_size=3, nodes=16, batches=1), "llvm"),
    ("TreeLSTM", "float64", WorkloadSpec(batch_size=3, nodes=16, batches=1), "llvm"),
    ("ChildSumTreeLSTM", "float32", WorkloadSpec(batch_size=3, nodes=16, batches=1), "llvm"),
    ("DAGRNN", "float64", WorkloadSpec(batch_size=2, nodes=20, shape="grid", batches=1), "llvm"),
    ("SeqGRU", "float32", WorkloadSpec(batch_size=3, nodes=16, batches=1, shape="chain"), "llvm"),
    ("MVRNN", "float32", WorkloadSpec(batch_size=2, nodes=12, batches=1), "llvm"),
    pytest.param("TreeLSTM", "float32", WorkloadSpec(batch_size=3, nodes=16, batches=1), "opencl",
                 marks=OPENCL),
])
def test_tuned_schedules_pass_the_conformance_families(db: Path, model_id: str, dtype: str,
                                                       spec: WorkloadSpec, target: str) -> None:
    """The stored schedule and the best measured candidate (tuned on one workload) agree
    with the float64 reference on every structure family of the conformance suite."""
    model = zoo.get(model_id).model()
    result = cortex.tune(model, target, workload=spec, dtype=dtype, budget=3, seed=3,
                         isolate=False, progress=False, from_default=False)
    ranked = sorted((t for t in result.trials if t.ok), key=lambda t: t.ratio)[:1]
    schedules = [None] + [t.schedule for t in ranked]  # None: schedule="auto", the record
    for sched in schedules:
        exe = cortex.compile(model, target=target, dtype=dtype,
                             **({"schedule": sched} if sched is not None else {}))
        if sched is None:
            assert exe.schedule == result.schedule
        for fam in FAMILIES:
            if not_applicable(fam, model.arity) is not None:
                continue
            out = exe(structures(model_id, fam))
            got = {s: out.nodes(s) for s in out.states}
            check(got, reference(model_id, fam, out.batch), dtype, batch=out.batch,
                  headline=f"tuned schedule of {model_id} disagrees on {fam}",
                  facts=[("schedule", exe.schedule.to_json())])


def test_cli_tunes_lists_exports_and_imports(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "one.jsonl"
    assert cli_main(["tune", "TreeRNN:hidden=6,vocab=11", "--budget-trials", "3", "--batch-size", "2",
                     "--nodes", "8", "--batches", "1", "--in-process", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stored as tuning record 1" in text and "3 trials" in text
    assert len(out.read_text().splitlines()) == 1
    assert cli_main(["tune", "--list"]) == 0
    assert "TreeRNN" in capsys.readouterr().out
    other = tmp_path / "other.sqlite"
    assert cli_main(["tune", "--db", str(other), "--import", str(out)]) == 0
    assert "1 stored" in capsys.readouterr().out
    assert cli_main(["tune", "--db", str(other), "--export", str(tmp_path / "all.jsonl")]) == 0
    assert (tmp_path / "all.jsonl").read_text() == out.read_text()
    with pytest.raises(SystemExit, match="no zoo model 'Nope'"):
        cli_main(["tune", "Nope:hidden=3"])
    with pytest.raises(SystemExit, match="not key=value"):
        cli_main(["tune", "TreeRNN:hidden"])
    assert cli_main(["tune"]) == 2


def test_tuned_workload_class_matches_at_compile(db: Path) -> None:
    model = TreeRNN(hidden=8, vocab=11, seed=4)
    result = cortex.tune(model, "llvm", workload=WorkloadSpec(batch_size=1, nodes=40, batches=2),
                         budget=2, isolate=False, progress=False)
    exe = cortex.compile(model, target="llvm", workload=result.key.workload)
    assert f"requested workload class {result.key.workload}" in exe.schedule_source
    out = exe([((1, 2), 3)])
    np.testing.assert_allclose(out.root("h"), cortex.compile(model, target="numpy",
                               schedule="default")([((1, 2), 3)]).root("h"), rtol=1e-4, atol=1e-5)


def test_a_candidate_is_known_by_the_program_it_lowers_to() -> None:
    model = TreeRNN(hidden=6, vocab=11, seed=2)
    wl = Workload.from_spec(model, SMALL)
    m = Measurer(model, "llvm", {}, "float32", wl.batches, reference_states(model, wl.batches))
    info = m.baseline()
    space = cortex.ScheduleSpace(info.capabilities, "float32")
    assert True in space.knob("persistent").choices
    default = space.default().to_dict()
    same = {**default, "persistent": True}  # CPU caches keep weights resident: no program change
    other = {**default, "unroll": 2}
    assert m.program_key(default) == m.program_key(same) != m.program_key(other)
    assert m.compile(other).program_key == m.program_key(other)
    assert m.program_key({**default, "unroll": 3}) is None  # not legal: the compile says why


def test_candidates_lost_with_a_replaced_worker_are_measured_in_a_later_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from cortex.tuning import tuner, worker
    from cortex.tuning.measure import CompileResult

    class Flaky(worker.InProcessMeasurer):
        """The third compile overruns its timeout: the worker and its slots are replaced."""

        def __init__(self, setup: dict) -> None:
            super().__init__(setup)
            self.generation, self.compiles, self.lost = 0, 0, {}
            self.compiled: dict[int, dict] = {}

        def compile(self, schedule: dict, timeout: float) -> CompileResult:
            self.compiles += 1
            if self.compiles != 3:
                r = super().compile(schedule, timeout)
                self.compiled[r.slot] = schedule
                return r
            self.lost = {s: self.compiled[s] for s in self._m._exes if s != 0}
            self._m.drop(list(self.lost))
            self._m._next, self.generation = 1, self.generation + 1  # a new worker's numbering
            return CompileResult(None, False, timeout, "compile or check stopped: no answer")

    made: list[Flaky] = []
    monkeypatch.setattr(worker, "open_measurer", lambda setup, isolate: made.append(Flaky(setup)) or made[-1])
    # every compiled candidate is timed: none is dropped at once because its check ran slowly
    # (that rule compares check times, which a loaded machine makes vary)
    monkeypatch.setattr(tuner, "SKIP_TIMING", float("inf"))
    model = TreeRNN(hidden=6, vocab=11, seed=3)
    result = cortex.tune(model, "llvm", workload=SMALL, budget=8, method="random", store=False,
                         resume=False, progress=False)
    assert sorted(made[0].lost) == [1, 2]  # two candidates compiled before the third stopped
    measured = [t for t in result.trials if t.measured]
    assert len(measured) == 8 and sum(not t.ok for t in measured) == 1
    keys = [json.dumps(t.schedule, sort_keys=True) for t in result.trials]
    assert len(keys) == len(set(keys))
    # each lost candidate was compiled again later (or its program was measured meanwhile)
    trials = {json.dumps(t.schedule, sort_keys=True): t for t in result.trials}
    assert all(trials[json.dumps(s, sort_keys=True)].ok for s in made[0].lost.values())
    assert result.speedup >= 1.0


def test_the_compile_timeout_follows_the_default_compile_of_a_replaced_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from cortex.tuning import worker
    from cortex.tuning.measure import CompileResult

    class Slowing(worker.InProcessMeasurer):
        """The machine gets busier: the second compile overruns its timeout, and the replaced
        worker's compile of the default takes 30 s."""

        def __init__(self, setup: dict) -> None:
            super().__init__(setup)
            self.generation, self.timeouts = 0, []
            self.info = replace(self.info, compile_s=1.0)

        def compile(self, schedule: dict, timeout: float) -> CompileResult:
            self.timeouts.append(timeout)
            if len(self.timeouts) != 2:
                return super().compile(schedule, timeout)
            self.generation += 1
            self.info = replace(self.info, compile_s=30.0)
            return CompileResult(None, False, timeout, "compile or check stopped: no answer")

    made: list[Slowing] = []
    monkeypatch.setattr(worker, "open_measurer", lambda setup, isolate: made.append(Slowing(setup)) or made[-1])
    model = TreeRNN(hidden=6, vocab=11, seed=3)
    cortex.tune(model, "llvm", workload=SMALL, budget=Budget(trials=4, seconds=1000), method="random",
                store=False, resume=False, progress=False)
    assert made[0].timeouts[:2] == [10.0, 10.0] and made[0].timeouts[2:] and all(
        t == 120.0 for t in made[0].timeouts[2:])
    made.clear()
    cortex.tune(model, "llvm", workload=SMALL, budget=Budget(trials=4, seconds=1000), method="random",
                store=False, resume=False, progress=False, compile_timeout=7.0)
    assert set(made[0].timeouts) == {7.0}  # a limit given is kept
