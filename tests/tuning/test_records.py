"""Tuning records: the database, JSON lines, matching at compile time, damage."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

import cortex
from cortex.models import TreeRNN
from cortex.tuning.fingerprint import device_description, device_fingerprint
from cortex.tuning.records import Record, RecordKey, RecordStore, Trial, TuningRecordsWarning

pytest.importorskip("llvmlite", reason="these tests tune and compile on the llvm target (pip install '.[llvm]')")

TUNED = {"unroll": 2, "vector_width": 4, "weight_layout": "transposed"}


def _record(key: RecordKey, schedule: dict | None = None, created: float = 1000.0, **kw) -> Record:
    return Record(key=key, schedule=dict(TUNED if schedule is None else schedule), speedup=1.5,
                  seconds=0.002, default_seconds=0.003, trials=12, method="model", model="TreeRNN",
                  device_info={"target": "llvm"}, workload_info={"class": key.workload},
                  cortex_version=cortex.__version__, created=created, **kw)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "records.sqlite"
    monkeypatch.setenv("CORTEX_TUNE_DB", str(path))
    return path


@pytest.fixture(scope="module")
def model() -> TreeRNN:
    return TreeRNN(hidden=6, vocab=11, seed=3)


@pytest.fixture(scope="module")
def key(model: TreeRNN) -> RecordKey:
    """The key a float32 llvm compile of ``model`` looks up."""
    exe = cortex.compile(model, target="llvm", schedule="default")
    resolved, options = cortex.resolve_target("llvm")
    desc = device_description("llvm", options, exe.backend)
    return RecordKey(exe.graph_fingerprint, "llvm", device_fingerprint(desc), "float32",
                     "b8-n32-parse")


def test_records_round_trip_through_the_database_and_json_lines(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "a.sqlite")
    key = RecordKey("g" * 32, "llvm", "d" * 32, "float32", "b8-n32-parse")
    rec = _record(key)
    assert store.put(rec)
    (got,) = store.records()
    assert replace(got, id=None) == rec
    assert got.id is not None
    n = store.export_jsonl(tmp_path / "out.jsonl")
    assert n == 1
    line = json.loads((tmp_path / "out.jsonl").read_text())
    assert line["format"] == "cortex-tuning-record" and line["schedule"] == TUNED
    other = RecordStore(tmp_path / "b.sqlite")
    assert other.import_jsonl(tmp_path / "out.jsonl") == {"stored": 1, "kept": 0, "invalid": 0}
    assert [replace(r, id=None) for r in other.records()] == [rec]
    # importing again keeps the stored record (not newer); a newer one replaces it
    assert other.import_jsonl(tmp_path / "out.jsonl") == {"stored": 0, "kept": 1, "invalid": 0}
    newer = _record(key, {"unroll": 4}, created=2000.0)
    other.export_jsonl(tmp_path / "newer.jsonl", [newer])
    assert other.import_jsonl(tmp_path / "newer.jsonl")["stored"] == 1
    assert [r.schedule for r in other.records()] == [{"unroll": 4}]


def test_import_reports_lines_that_are_not_records(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    good = _record(RecordKey("g" * 32, "llvm", "d" * 32, "float32", "b1-n1-balanced")).to_json()
    path.write_text(json.dumps(good) + "\n{not json\n" + json.dumps({"format": "other"}) + "\n\n")
    with pytest.warns(TuningRecordsWarning, match="2 lines are not tuning records"):
        counts = RecordStore(tmp_path / "x.sqlite").import_jsonl(path)
    assert counts == {"stored": 1, "kept": 0, "invalid": 2}


def test_trials_are_stored_per_key_for_resuming(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "t.sqlite")
    key = RecordKey("g" * 32, "llvm", "d" * 32, "float32", "b8-n32-parse")
    trials = [Trial({"unroll": 2}, True, 0.8, 0.5, "", (1.0, 2.0), "b8-n32-parse", "s1"),
              Trial({"unroll": 8}, False, None, 0.4, "compile failed: X", (1.0, 2.0), "b8-n32-parse", "s1"),
              Trial({"unroll": 2, "threads": 1}, True, 0.8, 0.0, "", (1.0, 2.0), "b8-n32-parse", "s1",
                    measured=False)]
    store.add_trials(key, trials)
    assert store.trials("g" * 32, "llvm", "d" * 32, "float32") == trials
    assert store.trials("g" * 32, "llvm", "d" * 32, "float64") == []


def test_compile_uses_a_matching_record_and_says_so(db: Path, model: TreeRNN, key: RecordKey) -> None:
    RecordStore(db).put(_record(key))
    exe = cortex.compile(model, target="llvm")
    for knob, value in TUNED.items():
        assert getattr(exe.schedule, knob) == value
    assert exe.schedule_source.startswith("tuning record 1 (workload b8-n32-parse, 1.50x")
    assert "newest record" in exe.schedule_source
    for knob in TUNED:  # each knob's value says where it came from
        assert any(n.startswith(f"schedule: {knob}=") and n.endswith("(tuning record 1)")
                   for n in exe.notes), exe.notes
    # "default" never reads the records
    exe = cortex.compile(model, target="llvm", schedule="default")
    assert exe.schedule_source == "default rules"
    assert exe.schedule == cortex.ScheduleSpace(exe.backend.capabilities, "float32").default()


@pytest.mark.parametrize("change", ["device", "dtype", "graph", "target"])
def test_a_different_device_dtype_graph_or_target_does_not_match(db: Path, model: TreeRNN, key: RecordKey,
                                                                  change: str) -> None:
    other = {"device": "0" * 32, "dtype": "float64", "graph": "1" * 32, "target": "numpy"}[change]
    RecordStore(db).put(_record(replace(key, **{change: other})))
    exe = cortex.compile(model, target="llvm")
    assert exe.schedule_source.startswith("default rules (no tuning record")
    assert exe.schedule == cortex.ScheduleSpace(exe.backend.capabilities, "float32").default()


def test_a_float64_compile_matches_only_a_float64_record(db: Path, model: TreeRNN, key: RecordKey) -> None:
    graph64 = cortex.compile(model, target="llvm", dtype="float64", schedule="default").graph_fingerprint
    store = RecordStore(db)
    store.put(_record(replace(key, graph=graph64, dtype="float32")))  # the float64 graph, float32
    assert cortex.compile(model, target="llvm", dtype="float64").schedule.unroll == 1
    store.put(_record(replace(key, graph=graph64, dtype="float64")))
    assert cortex.compile(model, target="llvm", dtype="float64").schedule.unroll == 2
    assert cortex.compile(model, target="llvm", dtype="float32").schedule.unroll == 1


def test_the_requested_workload_class_then_the_nearest(db: Path, model: TreeRNN, key: RecordKey) -> None:
    store = RecordStore(db)
    store.put(_record(replace(key, workload="b1-n32-parse"), {"unroll": 2}, created=1.0))
    store.put(_record(replace(key, workload="b64-n32-parse"), {"unroll": 4}, created=2.0))
    assert cortex.compile(model, target="llvm").schedule.unroll == 4  # the newest
    exe = cortex.compile(model, target="llvm", workload="b1-n32-parse")
    assert exe.schedule.unroll == 2 and "requested workload class b1-n32-parse" in exe.schedule_source
    exe = cortex.compile(model, target="llvm", workload="b32-n32-parse")
    assert exe.schedule.unroll == 4 and "nearest" in exe.schedule_source


def test_a_record_that_is_no_longer_legal_falls_back_to_the_default(db: Path, model: TreeRNN,
                                                                     key: RecordKey) -> None:
    RecordStore(db).put(_record(key, {"unroll": 3}))
    exe = cortex.compile(model, target="llvm")
    assert exe.schedule.unroll == 1
    assert "is not legal here any more" in exe.schedule_source


def test_a_corrupted_database_is_rebuilt_with_a_warning(db: Path, model: TreeRNN, key: RecordKey) -> None:
    db.write_bytes(b"this is not an SQLite database" * 100)
    with pytest.warns(TuningRecordsWarning, match="could not be read"):
        exe = cortex.compile(model, target="llvm")
    assert exe.schedule_source.startswith("default rules (no tuning record")
    assert list(db.parent.glob("records.sqlite.corrupt-*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = RecordStore(db)  # the rebuilt database works
        store.put(_record(key))
        assert cortex.compile(model, target="llvm").schedule.unroll == 2


def test_a_truncated_database_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    store = RecordStore(path)
    for i in range(50):
        store.put(_record(RecordKey(f"{i:032d}", "llvm", "d" * 32, "float32", "b1-n1-parse")))
    store.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.warns(TuningRecordsWarning):
        found = RecordStore(path).records()
    assert found == []


def test_no_database_is_created_by_a_compile(db: Path, model: TreeRNN) -> None:
    cortex.compile(model, target="llvm")
    assert not db.exists()


def test_the_compile_path_imports_no_search_library(db: Path, key: RecordKey) -> None:
    RecordStore(db).put(_record(key))
    code = ("import sys, cortex; from cortex.models import TreeRNN; "
            "exe = cortex.compile(TreeRNN(hidden=6, vocab=11, seed=3), target='llvm'); "
            "assert exe.schedule_source.startswith('tuning record'), exe.schedule_source; "
            "heavy = [m for m in ('sklearn', 'scipy', 'tqdm', 'cortex.tuning.search') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_a_saved_executable_keeps_the_tuned_schedule(db: Path, tmp_path: Path, model: TreeRNN,
                                                     key: RecordKey, monkeypatch: pytest.MonkeyPatch) -> None:
    RecordStore(db).put(_record(key))
    exe = cortex.compile(model, target="llvm")
    assert exe.schedule.unroll == 2
    path = exe.save(tmp_path / "tuned.cortex")
    monkeypatch.setenv("CORTEX_TUNE_DB", str(tmp_path / "empty.sqlite"))  # no record where it loads
    loaded = cortex.load(path)
    assert loaded.schedule == exe.schedule
    assert loaded.schedule_source == "given by the caller"


def test_a_pass_without_an_import_name_reads_no_records(db: Path, model: TreeRNN, key: RecordKey) -> None:
    from cortex.core.passes.pipeline import DEFAULT_PASSES

    RecordStore(db).put(_record(key))
    exe = cortex.compile(model, target="llvm", passes=[lambda g: g, *DEFAULT_PASSES])
    assert exe.graph_fingerprint is None and "without an import name" in exe.schedule_source
