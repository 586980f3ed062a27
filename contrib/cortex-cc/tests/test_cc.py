"""cortex-cc's own tests: registration, compile and run against the reference, the artifact
cache, compiler errors and argument checks. (The conformance suite runs in tox's ``contrib``
environment: ``pytest --pyargs cortex.testing --cortex-target cc``.)"""

from __future__ import annotations

import numpy as np
import pytest

import cortex
import cortex_cc
from cortex.core.plugin import loader as plugins


@pytest.fixture
def cc(tmp_path, monkeypatch):
    """The plugin registered in-process (whether or not it is installed), a fresh cache."""
    monkeypatch.setenv("CORTEX_CC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CORTEX_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins.reset_plugins()
    plugins.register_plugin(cortex_cc, "cortex_cc")
    yield plugins.get_registry().get("cc")
    plugins.reset_plugins()


def test_registers_the_cc_target_with_typed_options(cc):
    assert cc.plugin == "cortex_cc" and cc.enabled() and cc.runnable()
    assert cc.defaults() == {"cc": "cc", "opt_level": 2, "openmp": False}
    with pytest.raises(cortex.InvalidOptionError, match="opt_level"):
        cc.resolve_options({"opt_level": 5})


def test_runs_a_model_like_the_reference(cc):
    from cortex.core.frontend.reference import evaluate
    from cortex.models import TreeLSTM
    from cortex.testing.tolerance import check

    model = TreeLSTM(hidden=7, embed=5, vocab=11, dtype="float64", seed=1)
    for dtype in ("float32", "float64"):
        exe = cortex.compile(model, target="cc", dtype=dtype, opt_level=1)
        out = exe([((1, 2), (3, (4, 5))), 6])
        want = evaluate(cortex.trace(model), model.params, out.batch)
        check({s: out.nodes(s) for s in out.states}, want, dtype, headline="cc", facts=[])
        assert "_run(" in exe.source and exe.artifact.entry.endswith("_run")


def test_shared_libraries_are_cached_by_cache_key(cc, tmp_path):
    from cortex.models import TreeRNN

    model = TreeRNN(hidden=4, vocab=11, seed=2)
    first = cortex.compile(model, target="cc")
    assert first.backend.compiler.builds == 1
    assert (tmp_path / "cache" / f"{first.cache_key}.so").exists()
    again = cortex.compile(model, target="cc")  # a new backend: loads the .so, no cc run
    assert again.backend.compiler.builds == 0 and again.cache_key == first.cache_key
    other = cortex.compile(model, target="cc", opt_level=0)  # options are part of the key
    assert other.cache_key != first.cache_key and other.backend.compiler.builds == 1
    np.testing.assert_array_equal(first([(1, 2)]).root("h"), again([(1, 2)]).root("h"))


def test_a_damaged_or_planted_library_is_rebuilt_not_loaded(cc, tmp_path):
    from cortex.models import TreeRNN

    model = TreeRNN(hidden=4, vocab=11, seed=2)
    entry = tmp_path / "cache" / f"{cortex.compile(model, target='cc').cache_key}.so"
    good = entry.read_bytes()
    for bad in (good[: len(good) // 2], b"\x7fELF planted by someone else" + good[40:]):
        entry.write_bytes(bad)
        again = cortex.compile(model, target="cc")
        assert again.backend.compiler.builds == 1  # compiled again, the bad entry replaced
        assert entry.read_bytes() == good


def test_compiler_errors_and_bad_arguments_are_reported(cc):
    from cortex_cc.backend import CCompileError, CSource, create_backend
    from cortex.models import TreeRNN

    exe = cortex.compile(TreeRNN(hidden=4, vocab=11, seed=2), target="cc")
    backend = create_backend(cc.defaults())
    good = exe.source
    bad = str.__new__(CSource, "this is not C")  # the calling facts of a real program
    bad.entry, bad.buffer_dtypes, bad.num_sizes = good.entry, good.buffer_dtypes, good.num_sizes
    with pytest.raises(CCompileError, match="failed"):
        backend.compiler.compile(bad, cc.defaults())
    with pytest.raises(TypeError, match="takes what the cc renderer returns"):
        backend.compiler.compile("int x;", cc.defaults())
    with pytest.raises(TypeError, match="arguments"):
        exe.artifact(())
    args = [np.zeros(3, np.float64) for _ in exe.artifact.dtypes] + [0] * exe.artifact.num_sizes
    with pytest.raises(TypeError, match="C-contiguous"):
        exe.artifact(tuple(args))


def test_a_batch_that_would_read_out_of_bounds_is_refused_before_the_native_call(tmp_path):
    """``exe.run(batch)`` validates any batch the linearizer did not make: a child id outside
    the batch would make the generated C read out of bounds. In a subprocess, where a crash
    is an exit status rather than the end of the test run."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import dataclasses, json
        import numpy as np
        import cortex, cortex_cc
        from cortex.core.plugin import loader as plugins
        from cortex.models import TreeLSTM

        plugins.register_plugin(cortex_cc, "cortex_cc")
        exe = cortex.compile(TreeLSTM(hidden=4, embed=3, vocab=10), target="cc")
        batch = exe.linearize([((1, 2), 3)])
        out = {}
        for child in (5, 100_000_000):
            ids, table = np.array(batch.child_ids), np.array(batch.child_table)
            table[table == ids[0]] = child
            ids[0] = child
            try:
                exe.run(dataclasses.replace(batch, child_ids=ids, child_table=table))
                out[child] = "ran"
            except cortex.CortexError as e:
                out[child] = type(e).__name__
        print(json.dumps(out))
    """)
    env = {**os.environ, "CORTEX_CC_CACHE": str(tmp_path / "cache"),
           "CORTEX_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr}"
    assert json.loads(done.stdout) == {"5": "InvariantError", "100000000": "InvariantError"}
