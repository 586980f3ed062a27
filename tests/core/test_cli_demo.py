"""``cortex demo``: a target that cannot run here is an error with a non-zero exit status and
the reason and fix, raised before anything compiles (never a silent switch to another target);
the output is a table a person reads, and a slow target stays within its time budget."""

from __future__ import annotations

import re

import pytest

from cortex import cli
from cortex.plugins.cpu_llvm.demo import DemoError, run_demo

pytestmark = pytest.mark.usefixtures("clean_plugins")


def test_an_unknown_target_is_an_error_that_lists_the_known_ones(capsys):
    assert cli.main(["demo", "--target", "no-such-target"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cortex demo: error: unknown target 'no-such-target'; known targets:")
    assert "numpy" in err and "cortex info" in err


def test_a_target_that_cannot_run_here_is_an_error_with_the_reason_and_fix(make_distribution,
                                                                           monkeypatch, capsys):
    make_distribution("cortex-sample", "1.2.3", "cortex_sample_plugin", "sample_plugin.py",
                      {"sample": "cortex_sample_plugin"})
    compiled = []
    monkeypatch.setattr("cortex.compile", lambda *a, **k: compiled.append(a))
    with pytest.raises(DemoError, match=r"target 'sample' cannot run here: the sample has no "
                                        r"device\. To fix: none: it is a sample\."):
        run_demo(target="sample-alias", print_fn=lambda line: None)
    assert compiled == []  # refused before compiling anything
    assert cli.main(["demo", "--target", "sample"]) == 1
    captured = capsys.readouterr()
    assert "cannot run here" in captured.err and "--target numpy" in captured.err
    assert captured.out == ""


def test_a_bad_hidden_size_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["demo", "--hidden", "0"])
    assert info.value.code == 2
    assert "'0' is not a positive integer" in capsys.readouterr().err


def test_the_demo_on_numpy_prints_a_readable_table_and_agrees_with_the_reference():
    lines: list[str] = []
    result = run_demo(target="numpy", hidden=8, reps=50, budget_s=0.001, print_fn=lines.append)
    assert result["target"] == "numpy" and len(result["rows"]) >= 5
    assert all(row["max_abs_diff"] < 1e-5 for row in result["rows"])
    assert lines[0].startswith("Cortex demo: the zoo's TreeLSTM (hidden 8, float32")
    assert lines[1].startswith("compiled for numpy in ")
    assert "{" not in "\n".join(lines)  # no raw schedule JSON
    header = next(line for line in lines if line.startswith("sentence"))
    assert "nodes" in header and "NumPy ref" in header and "max|diff|" in header
    total = lines[-1]
    ratio = re.search(r"^total: numpy .* ms: numpy is ([0-9.]+)x (faster|slower) than the NumPy "
                      r"reference; largest difference", total)
    assert ratio and float(ratio.group(1)) >= 1  # never "(0x)"


def test_the_speed_ratio_reads_both_ways():
    from cortex.plugins.cpu_llvm.demo import _speed

    assert _speed("llvm", 1.0, 42.0) == "llvm is 42x faster than the NumPy reference"
    assert _speed("numpy", 53.0, 1.0) == "numpy is 53x slower than the NumPy reference"
    assert _speed("numpy", 0.9, 1.0) == "numpy is 1.11x faster than the NumPy reference"
