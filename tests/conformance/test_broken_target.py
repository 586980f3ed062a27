"""The suite catches a wrong target with a readable report, and runs compile-only targets.

Runs pytest on the shipped suite in a subprocess, with a conftest that registers the test
plugin ``fake_targets`` (targets ``broken`` and ``nodevice``), exactly as a plugin author would
run it (``-p cortex.testing.plugin --cortex-target NAME``). Also checks the report in-process.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
import fake_targets
from cortex.core.plugin.loader import register_plugin
register_plugin(fake_targets, "fake_targets")
"""


def run_suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_shipped.py").write_text(
        "from cortex.testing.test_conformance import *  # noqa\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "cortex.testing.plugin", "-q", "-rfs",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path), *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory) -> subprocess.CompletedProcess:
    return run_suite(tmp_path_factory.mktemp("broken"), "--cortex-target", "broken,nodevice",
                     "-k", "TreeRNN and float64 and (balanced or default)")


def test_a_perturbed_element_fails_the_reference_cases_with_a_readable_report(broken_run):
    out = broken_run.stdout
    assert broken_run.returncode == 1, out + broken_run.stderr
    assert "FAILED" in out and "test_matches_reference[broken-TreeRNN-balanced-float64-default]" in out
    report = out[out.index("target 'broken' disagrees"):]
    for needle in ("model      TreeRNN: TreeRNN, binary, hidden 10",
                   "structure  balanced (batch of 1 input, 15 nodes, 4 levels)",
                   "schedule   default {", "dtype      float64",
                   "tolerance  float64: |got - want| <= 1e-10",
                   "1 of 150 elements out of tolerance",
                   "max abs error 0.25"):
        assert needle in report, f"{needle!r} missing from the report:\n{report}"
    # the perturbed flat element 7 of h [15, 10] is node row 0, element [7]
    assert re.search(r"worst at node row 0 \(input 0, node \d+\), state 'h', element \[7\]", report), report


def test_the_correct_parts_of_a_broken_target_still_pass(broken_run):
    # compiling is fine, and the same perturbation in two programs agrees with itself
    summary = broken_run.stdout.split("short test summary")[-1]
    assert "FAILED" in summary
    assert "test_compiles[broken" not in summary
    assert "test_schedules_agree[broken" not in summary
    assert "test_output_contract[broken" not in summary


def test_a_target_that_cannot_run_compiles_and_skips_the_run_part_with_its_reason(broken_run):
    out = broken_run.stdout
    summary = out.split("short test summary")[-1]
    assert "test_compiles[nodevice" not in summary  # compile part passed
    skips = [line for line in summary.splitlines() if line.startswith("SKIPPED")]
    assert skips, out
    assert any("cannot run here: no device in this test" in line for line in skips), skips
    assert "FAILED" not in "\n".join(line for line in summary.splitlines() if "nodevice" in line)


def test_an_unknown_target_is_a_usage_error(tmp_path):
    done = run_suite(tmp_path, "--cortex-target", "no-such-target")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "no-such-target" in done.stderr and "numpy" in done.stderr


def test_the_report_in_process(clean_plugins):
    import fake_targets
    from cortex.testing import build, runner
    from cortex.testing.cases import Case
    from cortex.testing.targets import status
    from cortex.testing.tolerance import ConformanceFailure

    clean_plugins.register_plugin(fake_targets, "fake_targets")
    status.cache_clear()
    build.clear()
    try:
        with pytest.raises(ConformanceFailure) as err:
            runner.run_reference(Case("reference", "broken", "SeqGRU", "float32", family="chain"))
        text = str(err.value)
        assert "structure  chain (batch of 1 input, 20 nodes, 20 levels)" in text
        assert "dtype      float32" in text and "max abs error 0.25" in text
        assert "state 'h', element [1]" in text  # flat 7 of h [20, 6] is row 1, element 1
        runner.run_reference(Case("reference", "numpy", "SeqGRU", "float32", family="chain"))
        with pytest.raises(runner.NotRunnable, match="no device in this test"):
            runner.run_reference(Case("reference", "nodevice", "SeqGRU", "float32"))
        built = runner.run_compile(Case("compile", "nodevice", "SeqGRU", "float32"))
        assert built.source and built.artifact is not None
    finally:
        status.cache_clear()
        build.clear()
