"""Distributed runs on a local Ray cluster (2 CPUs, one for the whole module): error records,
fail-fast, ``cortex run`` on a folder and on a Parquet file, and 2,000 Python-AST trees through
the child-sum TreeLSTM with an actor killed mid-run — every id exactly once, outputs equal to a
single-process run.

Skipped with the reason where Ray Data is missing, unless ``CORTEX_TEST_REQUIRE`` names ray
(``.ci/run`` does): then a missing Ray fails.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from ray_stack import require

require("pyarrow", "ray.data")
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import ray  # noqa: E402
import ray.data  # noqa: E402,F401

from cortex.cli import main  # noqa: E402
from cortex.distributed import (CompileRecipe, InferenceWorker, RowError,  # noqa: E402
                                model_from_spec, run_inference, to_dataset)
from cortex.distributed.inputs import stdlib_function_rows  # noqa: E402

SPEC = "ChildSumTreeLSTM:hidden=32,embed=16,vocab=ast"


@pytest.fixture(scope="module", autouse=True)
def cluster():
    if ray.is_initialized():
        pytest.fail("Ray was already running: these tests start their own local cluster")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=256 << 20,
             logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def source() -> CompileRecipe:
    return CompileRecipe(model_from_spec(SPEC), target="llvm", threads=1)


def single_process(source: CompileRecipe, table: pa.Table, batch_size: int) -> dict:
    """The same rows through one in-process worker, batch by batch: id -> (h, c, error)."""
    worker = InferenceWorker(source, column="source", form="python")
    out = {}
    for start in range(0, table.num_rows, batch_size):
        part = table.slice(start, batch_size)
        got = worker({"id": part.column("id").to_numpy(zero_copy_only=False),
                      "source": part.column("source").to_numpy(zero_copy_only=False)})
        for row in got.to_pylist():
            out[row["id"]] = (row["h"], row["c"], row["error"])
    return out


def by_id(path: Path) -> dict:
    table = pq.read_table(path)
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "an id is in the output twice"
    return {row["id"]: (row["h"], row["c"], row["error"]) for row in table.to_pylist()}


def assert_same_outputs(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in ("h", "c"):
        i = ("h", "c").index(key)
        ok = [k for k in want if want[k][2] is None]
        a = np.array([got[k][i] for k in ok], dtype=np.float32)
        b = np.array([want[k][i] for k in ok], dtype=np.float32)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"state {key}")
    assert {k: v[2] for k, v in got.items()} == {k: v[2] for k, v in want.items()}


def test_bad_rows_are_error_records_and_the_rest_run(source, tmp_path) -> None:
    table = stdlib_function_rows(40)
    sources = table.column("source").to_pylist()
    sources[5], sources[31] = "def broken(:\n", "return ]"
    table = table.set_column(1, "source", pa.array(sources))
    report = run_inference(to_dataset(table, 8), source, tmp_path / "out.parquet", actors=2,
                           batch_size=8, progress=False)
    assert (report.rows, report.errors, report.duplicates_dropped) == (40, 2, 0)
    got = by_id(tmp_path / "out.parquet")
    ids = table.column("id").to_pylist()
    assert np.isnan(got[ids[5]][0]).all() and got[ids[5]][2].startswith("ParseError")
    assert got[ids[31]][2].startswith("ParseError")
    assert_same_outputs(got, single_process(source, table, 8))


def test_fail_fast_fails_the_run_and_writes_nothing(source, tmp_path) -> None:
    table = pa.table({"id": [1, 2, 3], "source": ["x = 1", "def (:", "y = 2"]})
    with pytest.raises(RowError, match="row 2: ParseError"):
        run_inference(to_dataset(table, 1), source, tmp_path / "out.parquet",
                      fail_fast=True, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_runs_a_saved_executable_over_a_folder_of_python_files(source, tmp_path,
                                                                   capsys) -> None:
    source.build().save(tmp_path / "model.cortex")
    folder = tmp_path / "src"
    (folder / "pkg").mkdir(parents=True)
    (folder / "a.py").write_text("def f(x):\n    return x + 1\n\n\ndef g():\n    pass\n")
    (folder / "pkg" / "b.py").write_text("class C:\n    def m(self):\n        return [1, 2]\n")
    (folder / "bad.py").write_text("def (:\n")
    out = tmp_path / "out.parquet"
    code = main(["run", str(tmp_path / "model.cortex"), str(folder), str(out), "--unit",
                 "function", "--actors", "1", "--batch-size", "2", "--json", "--no-progress"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["rows"], report["errors"], report["actors"]) == (4, 1, 1)
    got = by_id(out)
    assert sorted(got) == ["a.py:1:f", "a.py:5:g", "bad.py", "pkg/b.py:2:C.m"]
    assert got["bad.py"][2].startswith("ParseError")
    assert len(got["a.py:1:f"][0]) == 32
    assert report["source"].startswith("ChildSumTreeLSTM saved for llvm (")
    # the output exists: a second run refuses to replace it unless told to
    assert main(["run", SPEC, str(folder), str(out), "--no-progress"]) == 1
    assert "exists" in capsys.readouterr().err


def test_cli_runs_a_saved_model_over_a_parquet_file_of_parent_arrays(tmp_path, capsys) -> None:
    rows = pa.table({"parents": [[-1, 0, 0], [1, -1], [-1, 0, 1]],
                     "words": [[1, 2, 3], [4, 5], [2, 2, 2]]})
    pq.write_table(rows, tmp_path / "in.parquet")
    model = model_from_spec("ChildSumTreeLSTM:hidden=8,embed=4,vocab=6,seed=2")
    model.save(tmp_path / "model.cortex")
    code = main(["run", str(tmp_path / "model.cortex"), str(tmp_path / "in.parquet"),
                 str(tmp_path / "out.parquet"), "--states", "h", "--actors", "1",
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column_names == ["id", "h", "error"]
    assert sorted(table.column("id").to_pylist()) == [0, 1, 2]  # row numbers as ids
    from cortex.data import ParentArray

    exe = CompileRecipe(model).build()
    want = exe([ParentArray(p, words=w) for p, w in zip(rows.column("parents").to_pylist(),
                                                        rows.column("words").to_pylist())])
    got = dict(zip(table.column("id").to_pylist(), table.column("h").to_pylist()))
    np.testing.assert_allclose(np.array([got[i] for i in range(3)]), want.root("h"), rtol=1e-6)


def test_the_throughput_benchmark_runs() -> None:
    """``benchmarks/bench_distributed.py`` at a tiny size, on this cluster (so it cannot rot)."""
    import sys

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from bench_distributed import CONTENDERS, SCHEMA, benchmark
    finally:
        sys.path.remove(str(root / "benchmarks"))
    doc = benchmark(trees=96, rounds=1, batch_size=32, spec=SPEC)
    assert doc["schema"] == SCHEMA and set(doc["runs"]) == set(CONTENDERS)
    for name in CONTENDERS:
        assert doc["medians"][name]["end_to_end"] > 0
    assert doc["ratio_to_single"]["single"]["end_to_end"] == 1.0
    assert set(doc["median_phases_s"]) == {"ray_1", "ray_2"}


def _kill_a_busy_worker() -> int | None:
    """SIGKILL one actor process of the pool, one running a batch if there is one."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(b"ray::MapWorker(MapBatches(InferenceWorker))"):
            found.append((not title.endswith(b".submit"), int(entry.name)))
    if not found:
        return None
    pid = min(found)[1]
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds actors through /proc")
def test_2000_ast_trees_with_an_actor_killed_mid_run(source, tmp_path) -> None:
    table = stdlib_function_rows(2000)
    killed: list[int] = []

    def progress(p) -> None:
        if not killed and 0 < p.rows < p.total // 2:
            pid = _kill_a_busy_worker()
            if pid is not None:
                killed.append(pid)

    report = run_inference(to_dataset(table, 64), source, tmp_path / "out.parquet", actors=2,
                           batch_size=64, progress=progress)
    assert killed, "no actor was killed: the run ended before the first progress report"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)
    assert (report.rows, report.errors) == (2000, 0)
    got = by_id(tmp_path / "out.parquet")
    assert sorted(got) == sorted(table.column("id").to_pylist())  # every id exactly once
    assert_same_outputs(got, single_process(source, table, 64))
