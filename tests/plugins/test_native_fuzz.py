"""Fuzzing the boundary between user input and native code, each target in its own process.

``fuzz_native_worker.py`` drives malformed structures and malformed ``LinearizedBatch``es
(Hypothesis) through the compiled call on ``llvm`` and ``opencl``: no crash, no hang, only
Cortex's own errors for bad input, and results equal to the ``numpy`` target's on valid inputs.
A crash or a hang can only be seen from outside, so the workers run as subprocesses (both
targets at once) and this test reads their exit status and summary.

``CORTEX_FUZZ_EXAMPLES`` (default 25) is the number of examples per property; a longer run::

    CORTEX_FUZZ_EXAMPLES=5000 python -m pytest -q tests/plugins/test_native_fuzz.py

``CORTEX_FUZZ_SEED=N`` explores other examples than the default derandomized ones. A target
that cannot run here is skipped with its reason, unless ``CORTEX_TEST_REQUIRE`` names it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cortex.core.plugin.loader import get_registry

WORKER = Path(__file__).with_name("fuzz_native_worker.py")
TARGETS = ("llvm", "opencl")
EXAMPLES = int(os.environ.get("CORTEX_FUZZ_EXAMPLES", "25"))
REQUIRED = {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",") if n.strip()}


def _unavailable(name: str) -> str | None:
    """Why ``name`` cannot run here, or None."""
    target = get_registry().get(name)
    for check in (target.enabled, target.runnable):
        status = check()
        if not status:
            return status.describe()
    return None


@pytest.fixture(scope="module")
def workers():
    """One worker process per runnable target, started together (they share the machine's
    cores while each compiles its models); ``{target: Popen or skip reason}``."""
    procs: dict[str, object] = {}
    for name in TARGETS:
        reason = _unavailable(name)
        if reason is not None:
            procs[name] = reason
            continue
        procs[name] = subprocess.Popen(
            [sys.executable, str(WORKER), name, str(EXAMPLES)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield procs
    for p in procs.values():
        if isinstance(p, subprocess.Popen) and p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("target", TARGETS)
def test_malformed_inputs_never_crash_and_valid_ones_match_numpy(workers, target):
    proc = workers[target]
    if isinstance(proc, str):
        if target in REQUIRED:
            pytest.fail(f"CORTEX_TEST_REQUIRE names {target} but it cannot run here: {proc}")
        pytest.skip(reason=f"target {target} cannot run here: {proc}")
    try:  # generous: a hang inside an example is cut by the worker's own watchdog first
        out, err = proc.communicate(timeout=max(900, 4 * EXAMPLES))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the {target} fuzz worker hung:\n{out[-3000:]}\n{err[-6000:]}")
    assert proc.returncode == 0, (
        f"the {target} fuzz worker failed (exit status {proc.returncode}; negative = killed by "
        f"that signal, e.g. -11 = a segfault):\n{out[-3000:]}\n{err[-8000:]}")
    summary = json.loads(out.strip().splitlines()[-1])
    outcomes = summary["outcomes"]
    assert summary["examples_per_property"] == EXAMPLES
    # the run exercised both sides: inputs that ran (and matched numpy), inputs refused
    assert outcomes.get("ran", 0) > 0, outcomes
    assert sum(v for k, v in outcomes.items() if k[0].isupper()) > 0, outcomes
