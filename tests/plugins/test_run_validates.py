"""Every public way from a batch into native code validates it: regression tests for batches
that used to crash the process, each run in a subprocess (a crash is a signal there, not the
end of the test run).

Targets that cannot run here are skipped with their reason, unless ``CORTEX_TEST_REQUIRE``
names them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from cortex.core.plugin.loader import get_registry

REQUIRED = {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",") if n.strip()}

# In the child: a TreeLSTM on TARGET, a linearized batch, and that batch with child 0 of the
# first internal node renamed CHILD (the child table kept consistent with the CSR lists, so only
# the range is wrong); each public path's outcome printed as JSON.
CHILD = textwrap.dedent("""
    import dataclasses, json, sys
    import numpy as np
    import cortex
    from cortex.models import TreeLSTM

    target, child = sys.argv[1], int(sys.argv[2])
    model = TreeLSTM(hidden=8, embed=4, vocab=10)
    exe = cortex.compile(model, target=target)
    batch = exe.linearize([((1, 2), 3)])
    ids = np.array(batch.child_ids)
    table = np.array(batch.child_table)
    table[table == ids[0]] = child
    ids[0] = child
    bad = dataclasses.replace(batch, child_ids=ids, child_table=table)
    out = {}
    for name, call in (("run", lambda: exe.run(bad)), ("call", lambda: exe(bad)),
                       ("linearize", lambda: exe.linearize(bad))):
        try:
            call()
            out[name] = "ran"
        except Exception as e:
            out[name] = [type(e).__name__, isinstance(e, cortex.CortexError),
                         isinstance(e, ValueError)]
    # the raw-buffer entry point of the artifact, where it has one
    if hasattr(exe.artifact, "run"):
        bufs, sizes = exe.lowered.bind_batch(batch)
        bufs = {**bufs, "child_ids": ids, "child_table": table}
        bufs.update({n: np.asarray(a) for n, a in exe.lowered.prepare_params(model.params).items()})
        try:
            exe.artifact.run(bufs, sizes)
            out["artifact.run"] = "ran"
        except Exception as e:
            out["artifact.run"] = [type(e).__name__, isinstance(e, ValueError)]
    print(json.dumps(out))
""")


def _skip_unless_runnable(name: str) -> None:
    target = get_registry().get(name)
    for check in (target.enabled, target.runnable):
        status = check()
        if not status:
            if name in REQUIRED:
                pytest.fail(f"CORTEX_TEST_REQUIRE names {name} but: {status.describe()}")
            pytest.skip(reason=f"target {name} cannot run here: {status.describe()}")


@pytest.mark.parametrize("child", [5, 100_000_000])
@pytest.mark.parametrize("target", ["llvm", "opencl", "numpy"])
def test_run_refuses_a_batch_with_an_out_of_range_child(target, child):
    """``exe.run(batch)`` handed the batch to native code unchecked: child id 10^8 segfaulted
    llvm and opencl, child id 5 segfaulted opencl and gave garbage on llvm."""
    _skip_unless_runnable(target)
    done = subprocess.run([sys.executable, "-c", CHILD, target, str(child)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stdout}\n{done.stderr}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for path in ("run", "call", "linearize"):
        assert out[path] == ["InvariantError", True, True], (path, out)
    if "artifact.run" in out:  # llvm's and opencl's artifacts check their index buffers
        assert out["artifact.run"][0] in ("IndexRangeError", "LLVMRuntimeError"), out
        assert out["artifact.run"][1] is True, out
