"""The executable, outputs and numpy backend, independent of the real lowering.

A hand-written ``Lowered`` stand-in wraps the hand-built mini TreeRNN LoopProgram of
``test_loopir_examples`` (h = Emb[word] at leaves, h = tanh(W @ (h_l + h_r) + b) inside), so the
calling convention (buffers in program order, then sizes), parameter upload, output download,
and the Outputs contract are tested on their own.
"""

from __future__ import annotations

import pathlib
import sys
from dataclasses import dataclass

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_loopir_examples import tree_rnn  # noqa: E402

from cortex.core.runtime.executable import Executable, linearize_options  # noqa: E402
from cortex.core.frontend.graph import RecursiveGraph  # noqa: E402
from cortex.core.linearize import StructureError  # noqa: E402
from cortex.core.runtime.outputs import Outputs  # noqa: E402
from cortex.core.lowering.schedule import Schedule  # noqa: E402
from cortex.core.frontend.trace import trace  # noqa: E402
from cortex.models import TreeLSTM, TreeRNN  # noqa: E402
from cortex.plugins.numpy_ref.backend import (CAPABILITIES, IdentityCompiler,  # noqa: E402
                                              InterpreterRuntime, PrintRenderer, ProgramSource,
                                              create_backend)

H, V = 8, 11


@dataclass(frozen=True)
class FakeLowered:
    graph: RecursiveGraph
    program: object
    schedule: Schedule
    dtype: str

    def prepare_params(self, params):
        return {k: np.asarray(params[k], dtype=self.dtype) for k in ("Emb", "W", "b")}

    def bind_batch(self, batch):
        bufs = {"level_offsets": batch.level_offsets, "child_table": batch.child_table,
                "child_offsets": batch.child_offsets, "child_ids": batch.child_ids,
                "word_ids": batch.word_ids}
        sizes = {"N": batch.num_nodes, "L": batch.num_levels, "NL": batch.num_leaves,
                 "E": len(batch.child_ids)}
        return bufs, sizes

    def states(self, buffers):
        return {"h": buffers["h"]}


def by_hand(params, batch):
    h = np.zeros((batch.num_nodes, H))
    for v in range(batch.num_nodes):
        kids = batch.children(v)
        if len(kids) == 0:
            h[v] = params["Emb"][batch.word_ids[v]]
        else:
            h[v] = np.tanh(params["W"] @ (h[kids[0]] + h[kids[1]]) + params["b"])
    return h


@pytest.fixture
def exe():
    rng = np.random.default_rng(0)
    params = {"Emb": rng.normal(size=(V, H)), "W": rng.normal(size=(H, H)) / 3,
              "b": rng.normal(size=H)}
    graph = trace(TreeRNN(hidden=H, vocab=V))
    low = FakeLowered(graph, tree_rnn(H, V, "float64", form="per_level"), Schedule(), "float64")
    backend = create_backend({})
    source = backend.renderer.render(low.program)
    artifact = backend.compiler.compile(source, {})
    ex = Executable(target="numpy", options={}, lowered=low, backend=backend, source=source,
                    artifact=artifact, cache_key=backend.compiler.cache_key(source, {}),
                    params=params)
    return ex, params


TREES = [((1, 2), (3, (4, 5))), 7, (((0, 1), 2), 3)]


def test_executable_runs_the_program_and_outputs_follow_the_contract(exe):
    ex, params = exe
    out = ex(TREES)
    batch = out.batch
    want = by_hand(params, batch)
    np.testing.assert_allclose(out.nodes("h"), want, rtol=1e-12, atol=1e-12)
    assert out.root("h").shape == (3, H) and out.dtype == "float64"
    np.testing.assert_array_equal(out.root("h"), out.nodes("h")[batch.roots])
    assert out.states == ("h",) and out.batch_size == 3 and out.num_nodes == batch.num_nodes
    # per-input slices, children first, root last, keyed by the user's paths
    for b in range(3):
        rows = out.node_ids(b)
        assert np.all(batch.node_input[rows] == b) and rows[-1] == batch.roots[b]
        np.testing.assert_array_equal(out.of(b, "h"), out.nodes("h")[rows])
        assert [out.node_origin[int(v)] for v in rows] == [(b, k) for k in out.keys(b)]
    assert out.of(1, "h").shape == (1, H)  # a single leaf
    np.testing.assert_array_equal(out.of(1, "h")[0], params["Emb"][7])
    row = out.node_origin.row(0, out.keys(0)[0])
    assert row == out.node_ids(0)[0]
    assert set(out.as_dict()) == {"h"} and out.as_dict()["h"].shape == (3, H)
    assert "Outputs(batch=3" in repr(out)
    assert ex.calls == 1


def test_outputs_reject_bad_reads(exe):
    ex, _ = exe
    out = ex(TREES)
    with pytest.raises(KeyError, match="no state 'c'.*computes \\['h'\\]"):
        out.nodes("c")
    with pytest.raises(IndexError, match="input index 3 out of range for a batch of 3"):
        out.of(3, "h")
    with pytest.raises(ValueError, match="rows"):
        Outputs({"h": np.zeros((2, H))}, out.batch, ("h",), "float64")


def test_params_are_uploaded_once_and_calls_do_not_rebuild(exe, monkeypatch):
    ex, params = exe
    uploads, staged = [], []
    real, real_stage = InterpreterRuntime.upload, InterpreterRuntime.stage
    monkeypatch.setattr(InterpreterRuntime, "upload", lambda self, a: uploads.append(a.shape) or real(self, a))
    monkeypatch.setattr(InterpreterRuntime, "stage",
                        lambda self, a: staged.append(a.shape) or real_stage(self, a))
    ex(TREES)
    ex([(1, 2)])
    # per call: only the five index buffers are staged (a host runtime passes them through
    # without a copy); the three params were uploaded at build, and never again
    assert uploads == [] and len(staged) == 10 and (V, H) not in staged
    params["W"][:] = 0.0  # the executable holds its own copy
    out = ex([(1, 2)])
    assert not np.allclose(out.root("h"), np.tanh(params["b"]))


def test_structures_that_do_not_fit_are_rejected_before_running(exe, monkeypatch):
    ex, _ = exe
    launched = []
    monkeypatch.setattr(InterpreterRuntime, "launch", lambda self, *a, **k: launched.append(a))
    with pytest.raises(StructureError, match="has 3 children; the model needs exactly 2"):
        ex([(1, 2, 3)])
    with pytest.raises(StructureError, match=str(V)):
        ex([(1, V)])
    assert launched == [] and ex.calls == 0


def test_a_ready_linearized_batch_runs_after_validation(exe):
    from cortex.core.linearize import linearize
    from cortex.core.linearize.structure import InvariantError

    ex, params = exe
    good = linearize(TREES, arity=2)
    np.testing.assert_allclose(ex(good).nodes("h"), by_hand(params, good), rtol=1e-12)
    broken = linearize(TREES, arity=2)
    object.__setattr__(broken, "num_nodes", broken.num_nodes + 1)
    with pytest.raises(InvariantError):
        ex(broken)


def test_linearize_options_follow_the_graph():
    assert linearize_options(trace(TreeRNN(hidden=4, vocab=9))) == {
        "arity": 2, "vocab_size": 9, "feature_dim": None}
    assert linearize_options(trace(TreeLSTM(hidden=4, features=3, arity=3))) == {
        "arity": 3, "vocab_size": None, "feature_dim": 3}


def test_numpy_backend_pieces():
    program = tree_rnn(H, V, "float32")
    source = PrintRenderer().render(program)
    assert isinstance(source, ProgramSource) and source == str(program)
    compiler = IdentityCompiler()
    assert compiler.compile(source, {}) is program
    assert compiler.cache_key(source, {}) == compiler.cache_key(str(program), {})
    with pytest.raises(TypeError, match="ProgramSource"):
        compiler.compile(str(program), {})
    with pytest.raises(TypeError, match="LoopProgram"):
        PrintRenderer().render("text")
    runtime = InterpreterRuntime()
    with pytest.raises(TypeError, match="takes 9 buffers and 4 sizes"):
        runtime.launch(program, (1, 2))
    assert not CAPABILITIES.has_grid and CAPABILITIES.vector_lanes(4) == 8
    assert CAPABILITIES.supports_fp64 and CAPABILITIES.single_call
