"""cortex.compile end to end on the numpy target: stages, dump=, options, compile-once, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import cortex
from cortex import InvalidOptionError
from cortex.core import pipeline
from cortex.core.frontend.reference import evaluate
from cortex.core.frontend.trace import trace
from cortex.core.linearize import ArityError, TokenError
from cortex.core.lowering.schedule import Schedule, ScheduleSpace
from cortex.core.passes.pipeline import DEFAULT_PASSES, run_passes
from cortex.models import TreeLSTM, TreeRNN
from cortex.plugins.numpy_ref.backend import CAPABILITIES, IdentityCompiler

TREES = [((1, 2), (3, (4, 5))), 7, (((0, 1), 2), 3), (8, 9)]


def lstm(dtype="float64", **kw):
    return TreeLSTM(hidden=6, embed=5, vocab=10, dtype=dtype, seed=3, **kw)


def check_against_reference(model, out, rtol=1e-10, atol=1e-10):
    want = evaluate(trace(model), model.params, out.batch)
    for state, ref in want.items():
        np.testing.assert_allclose(out.nodes(state), ref, rtol=rtol, atol=atol, err_msg=state)
    return want


def test_compile_tree_lstm_end_to_end():
    model = lstm()
    exe = cortex.compile(model, target="numpy")
    out = exe(TREES)
    check_against_reference(model, out)
    assert out.root("h").shape == (4, 6) and out.nodes("c").shape == (out.batch.num_nodes, 6)
    assert out.dtype == exe.dtype == "float64" and out.root("h").dtype == np.float64
    assert exe.target == "numpy" and exe.schedule == ScheduleSpace(CAPABILITIES, "float64").default()
    assert exe.source == str(exe.program)
    assert "Executable('TreeLSTM', target='numpy', dtype=float64" in repr(exe)


def _count_allocations(exe) -> list:
    """The shapes ``exe``'s runtime allocates from now on (appended as it does)."""
    allocations: list = []
    runtime = exe.backend.runtime
    real_allocate = runtime.allocate

    def counting_allocate(shape, dtype):
        allocations.append(shape)
        return real_allocate(shape, dtype)

    runtime.allocate = counting_allocate
    return allocations


def test_calls_reuse_device_buffers_and_results_stay_the_callers():
    model = lstm()
    exe = cortex.compile(model, target="numpy")
    allocations = _count_allocations(exe)
    same_shape = [((2, 1), (3, (4, 5))), 7, (((0, 1), 2), 3), (8, 9)]  # TREES, other words
    first = exe(TREES)
    h_first = first.nodes("h").copy()
    after_first = len(allocations)
    second = exe(same_shape)
    # ``first`` is held: its output buffers (h, c) stay its own, this call writes new ones
    assert len(allocations) == after_first + 2
    np.testing.assert_array_equal(first.nodes("h"), h_first)  # not overwritten by call 2
    check_against_reference(model, second)
    assert not np.shares_memory(first.nodes("h"), second.nodes("h"))
    del first
    held = second.nodes("c")[1:3]  # a view keeps its buffer: call 3 must not write it
    c_held = held.copy()
    del second
    allocated = len(allocations)
    third = exe(TREES)
    assert len(allocations) == allocated + 1  # c (viewed) is new, h (dropped) is reused
    np.testing.assert_array_equal(held, c_held)
    check_against_reference(model, third)
    del third, held
    allocated = len(allocations)
    for trees in (same_shape, TREES, same_shape):  # outputs dropped: the pool serves every buffer
        check_against_reference(model, exe(trees))
    assert len(allocations) == allocated
    exe([(1, 2)])  # other sizes: new buffers, results still right
    assert len(allocations) > allocated
    check_against_reference(model, exe(TREES))


def test_a_host_pool_keeps_its_buffers_across_batch_sizes_that_fit():
    """Batches of varying node counts (a server's calls): once the pool has met the biggest,
    smaller and equal ones take views of its buffers (only the handed-out outputs are new),
    and every result stays right."""
    model = cortex.models.TreeGRU(hidden=16, embed=8, vocab=40, seed=0)  # temps besides h
    exe = cortex.compile(model, target="numpy")
    allocations = _count_allocations(exe)
    small, mid, big = [(1, 2)], [((1, 2), (3, 4))], [((1, 2), (3, (4, 5))), ((5, 6), (7, (8, 9))), (10, 11)]
    for trees in (small, big):  # the big batch outgrows the small one's buffers
        check_against_reference(model, exe(trees), rtol=1e-4, atol=1e-5)
    assert len(exe._pooled) > len(exe._handed)
    grown = len(allocations)
    handed = 0
    for trees in (small, mid, big, small):
        out = exe(trees)
        handed += len(exe._handed)
        check_against_reference(model, out, rtol=1e-4, atol=1e-5)
        del out
    assert len(allocations) - grown <= handed  # the pooled temps were all reused


def test_dtype_defaults_to_the_models_and_can_be_overridden():
    model = lstm("float32")
    assert cortex.compile(model, target="numpy").dtype == "float32"
    exe = cortex.compile(model, target="numpy", dtype="float64")
    out = exe(TREES)
    assert out.nodes("h").dtype == np.float64
    check_against_reference(model, out)  # float32 params, computed in float64
    out32 = cortex.compile(model, target="numpy", dtype=np.float32)(TREES)
    assert out32.nodes("h").dtype == np.float32
    check_against_reference(model, out32, rtol=1e-4, atol=1e-5)


def test_compilation_happens_once_and_calls_never_recompile(monkeypatch, tmp_path):
    import cortex.core.lowering.lower as lower_module

    monkeypatch.setenv("CORTEX_CACHE_DIR", str(tmp_path))  # no lowering from an earlier test

    counts = {"compile": 0, "lower": 0}
    real_compile, real_lower = IdentityCompiler.compile, lower_module.lower

    def counting_compile(self, source, options):
        counts["compile"] += 1
        return real_compile(self, source, options)

    def counting_lower(*args, **kwargs):
        counts["lower"] += 1
        return real_lower(*args, **kwargs)

    monkeypatch.setattr(IdentityCompiler, "compile", counting_compile)
    monkeypatch.setattr(lower_module, "lower", counting_lower)
    model = TreeRNN(hidden=5, vocab=10, dtype="float64")
    exe = cortex.compile(model, target="numpy")
    assert counts == {"compile": 1, "lower": 1}
    for batch in (TREES, [3], [(1, 2)] * 7, TREES[:1], [((((1, 2), 3), 4), 5)]):
        check_against_reference(model, exe(batch))
    assert counts == {"compile": 1, "lower": 1} and exe.calls == 5


def test_dump_writes_every_stage(tmp_path):
    model = lstm()
    out_dir = tmp_path / "dump" / "lstm"
    exe = cortex.compile(model, target="numpy", dump=out_dir, schedule={"unroll": 2})
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["00_options.json", "01_graph.txt", "02_graph_passes.txt", "03_loops.txt",
                     "04_loops_scheduled.txt", "05_source.txt"]
    options = json.loads((out_dir / "00_options.json").read_text())
    assert options["target"] == "numpy" and options["dtype"] == "float64"
    assert Schedule.from_dict(options["schedule"]) == exe.schedule and exe.schedule.unroll == 2
    sources = options["schedule_sources"]
    assert set(sources) == set(Schedule().to_dict()) and sources["unroll"] == "user"
    assert sources["vector_width"].startswith("default rule: ")
    assert options["schedule_notes"] == list(exe.notes)
    assert "schedule: unroll=2 (user)" in exe.notes
    assert options["passes"] == [p.__name__ for p in DEFAULT_PASSES]
    traced = trace(model)
    assert (out_dir / "01_graph.txt").read_text() == str(traced) + "\n"
    assert (out_dir / "02_graph_passes.txt").read_text() == str(run_passes(traced)) + "\n"
    assert (out_dir / "04_loops_scheduled.txt").read_text() == str(exe.program) + "\n"
    assert (out_dir / "05_source.txt").read_text() == exe.source + "\n"
    unscheduled = (out_dir / "03_loops.txt").read_text()
    assert unscheduled.startswith("program ") and "kernel" in unscheduled
    assert (out_dir / "01_graph.txt").read_text() != (out_dir / "02_graph_passes.txt").read_text()


def test_dump_directory_is_created_and_overwritten(tmp_path):
    model = TreeRNN(hidden=4, vocab=10)
    cortex.compile(model, target="numpy", dump=str(tmp_path / "d"))
    first = (tmp_path / "d" / "04_loops_scheduled.txt").read_text()
    cortex.compile(model, target="numpy", dump=tmp_path / "d", schedule={"fuse": False})
    assert (tmp_path / "d" / "04_loops_scheduled.txt").read_text() != first


@pytest.mark.parametrize("schedule", [
    Schedule(),
    {"leaf_specialization": False},
    {"fuse": False, "kernel_form": "per_level"},
    '{"unroll": 4, "tile_hidden": 8, "vector_width": 4, "weight_layout": "packed"}',
])
def test_schedule_option_forms(schedule):
    model = lstm()
    exe = cortex.compile(model, target="numpy", schedule=schedule)
    if isinstance(schedule, dict):
        assert all(getattr(exe.schedule, k) == v for k, v in schedule.items())
    elif isinstance(schedule, str):
        assert exe.schedule.unroll == 4 and exe.schedule.weight_layout == "packed"
    else:
        assert exe.schedule == schedule
    check_against_reference(model, exe(TREES))


def test_passes_option():
    model = lstm()
    for passes in ([], ["cse", "dce"], [p for p in DEFAULT_PASSES]):
        exe = cortex.compile(model, target="numpy", passes=passes)
        check_against_reference(model, exe(TREES))
    assert cortex.compile(model, target="numpy", passes=[]).graph == trace(model)


@pytest.mark.parametrize("options, option, allowed", [
    ({"dtype": "float16"}, "dtype", "one of 'float32', 'float64'"),
    ({"dtype": True}, "dtype", "one of 'float32', 'float64'"),
    ({"dtype": "int32"}, "dtype", "one of 'float32', 'float64'"),
    ({"schedule": {"unrol": 2}}, "schedule", "unknown knob 'unrol'"),
    ({"schedule": {"unroll": 3}}, "schedule", "unroll=3 is not legal here; choices: [1, 2, 4, 8]"),
    ({"schedule": {"tile_hidden": 8, "vector_width": 16}}, "schedule", "multiple of vector_width"),
    ({"schedule": Schedule(parallel="sideways")}, "schedule", "parallel='sideways' is not legal"),
    ({"schedule": "{not json"}, "schedule", "not valid JSON"),
    ({"schedule": 42}, "schedule", "a dict of schedule knobs"),
    ({"dump": 3}, "dump", "a directory path"),
    ({"passes": "cse"}, "passes", "a list of graph passes"),
    ({"passes": ["cse", "nosuch"]}, "passes", "unknown pass 'nosuch'"),
    ({"passes": [3]}, "passes", "a list of graph passes"),
    ({"threads": 2}, "threads", "no such option; target 'numpy' accepts no options"),
])
def test_bad_options_name_the_option(options, option, allowed):
    with pytest.raises(InvalidOptionError) as info:
        cortex.compile(lstm(), target="numpy", **options)
    assert info.value.option == option and info.value.target == "numpy"
    assert allowed in str(info.value)
    assert str(info.value).startswith(f"invalid option for target 'numpy': {option}=")


def test_options_are_checked_before_any_work(monkeypatch):
    def no_trace(model):
        raise AssertionError("traced before the options were checked")

    monkeypatch.setattr("cortex.core.frontend.trace.trace", no_trace)
    with pytest.raises(InvalidOptionError, match="dtype"):
        cortex.compile(lstm(), target="numpy", dtype="half")


def test_backend_and_schedule_problems_come_before_tracing(monkeypatch, clean_plugins):
    from cortex import NotYetImplementedError, Target, hookimpl

    def no_backend(options):
        raise NotYetImplementedError("code generation for target 'later' arrives later")

    class Plugin:
        @hookimpl
        def cortex_register_targets(self, registry):
            registry.add(Target(name="later", description="test", backend=no_backend))

    clean_plugins.register_plugin(Plugin(), name="later-plugin")
    monkeypatch.setattr("cortex.core.frontend.trace.trace", lambda m: pytest.fail("traced"))
    with pytest.raises(NotYetImplementedError, match="arrives later"):
        cortex.compile(lstm(), target="later")
    with pytest.raises(InvalidOptionError, match="schedule"):
        cortex.compile(lstm(), target="numpy", schedule={"unroll": 3})


def test_float64_on_a_target_without_fp64_is_an_option_error():
    from dataclasses import replace

    from cortex.core.plugin.backend import Backend
    from cortex.core.plugin.targets import Target
    from cortex.plugins.numpy_ref import backend as nb

    def no_fp64(options):
        b = nb.create_backend(options)
        return Backend(replace(b.capabilities, supports_fp64=False), b.renderer, b.compiler, b.runtime)

    target = Target(name="nofp64", description="test", backend=no_fp64)
    with pytest.raises(InvalidOptionError, match="dtype='float64'.*does not support float64"):
        pipeline.build(lstm(), target, {}, pipeline.CompileOptions(dtype="float64"))


def test_a_non_model_is_a_type_error():
    with pytest.raises(TypeError, match="cortex.compile takes a cortex model.*not object"):
        cortex.compile(object(), target="numpy")


def test_structures_that_do_not_fit_fail_in_the_linearizer_before_running(monkeypatch):
    from cortex.plugins.numpy_ref.backend import InterpreterRuntime

    exe = cortex.compile(lstm(), target="numpy")
    monkeypatch.setattr(InterpreterRuntime, "launch", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(ArityError, match="has 3 children; the model needs exactly 2"):
        exe([(1, 2, 3)])
    with pytest.raises(TokenError, match="10"):
        exe([(1, 10)])
    assert isinstance(ArityError("x"), ValueError) and exe.calls == 0


def test_a_ready_linearized_batch_is_checked_against_the_model():
    from cortex.core.linearize import linearize
    from cortex.core.lowering.lower import BatchMismatchError

    model = lstm()
    exe = cortex.compile(model, target="numpy")
    check_against_reference(model, exe(linearize(TREES, arity=2)))
    with pytest.raises(BatchMismatchError, match="arity 2, but internal node"):
        exe(linearize([(1, 2, 3)]))
    # a 2-wide table with a one-child node: the per-node check names it
    with pytest.raises(BatchMismatchError, match="internal node 3 has 1 children"):
        exe(linearize([((1,), (2, 3))]))
    with pytest.raises(BatchMismatchError, match="token id in \\[0, 10\\)"):
        exe(linearize([(1, 20)]))
    assert isinstance(BatchMismatchError("x"), ValueError) and exe.calls == 1


def test_source_extension_follows_the_renderer_or_the_dialect():
    from dataclasses import replace

    from cortex.core.plugin.backend import Backend
    from cortex.plugins.numpy_ref import backend as nb

    b = nb.create_backend({})
    assert pipeline.source_extension(b, "text") == ".txt"
    for dialect, ext in (("c", ".c"), ("opencl", ".cl"), ("cuda", ".cu")):
        with_dialect = Backend(replace(b.capabilities, dialect=dialect), b.renderer, b.compiler, b.runtime)
        assert pipeline.source_extension(with_dialect, "text") == ext
    assert pipeline.source_extension(b, b"\x7fELF") == ".bin"

    class LLRenderer(nb.PrintRenderer):
        file_extension = ".ll"

    assert pipeline.source_extension(Backend(b.capabilities, LLRenderer(), b.compiler, b.runtime), "x") == ".ll"


def test_shared_option_helpers():
    assert pipeline.split_options({"dtype": "float32", "threads": 2}) == (
        {"dtype": "float32"}, {"threads": 2})
    opts = pipeline.compile_options("t", {"dtype": "float64", "passes": ["cse"], "dump": "x"})
    assert opts.dtype == "float64" and opts.passes[0].__name__ == "cse" and str(opts.dump) == "x"
    assert pipeline.compile_options("t", {}) == pipeline.CompileOptions()
    s = Schedule(unroll=2)
    assert pipeline.neutral_schedule(s) == Schedule()
    space = ScheduleSpace(CAPABILITIES, "float32")
    assert pipeline.resolve_schedule("t", space, None)[0] == space.default()
    s, sources = pipeline.resolve_schedule("t", space, {"unroll": 8})
    assert s.unroll == 8 and sources["unroll"] == "user"
    assert sources["vector_width"].startswith("default rule: ")


def test_params_are_prepared_beside_the_compile_and_their_errors_keep_their_type(monkeypatch):
    import threading

    from cortex.core.frontend.model_errors import ParamError
    from cortex.core.lowering import lower as lower_mod

    model = lstm()
    seen = []
    real = pipeline._bind

    def spy(*args):
        seen.append(threading.current_thread().name)
        return real(*args)

    def never(self, params):
        raise AssertionError("the executable must get the worker's params, not prepare them again")

    monkeypatch.setattr(pipeline, "_bind", spy)
    monkeypatch.setattr(lower_mod.Lowered, "prepare_params", never)
    check_against_reference(model, cortex.compile(model, target="numpy")(TREES))
    assert seen == ["cortex-prepare-params"]  # once, in the worker
    model.params["W_i"] = np.zeros((2, 2))  # a bad param: the worker's ParamError, as raised
    with pytest.raises(ParamError, match="'W_i' has shape \\(2, 2\\)"):
        cortex.compile(model, target="numpy")
    assert not any(t.name == "cortex-prepare-params" for t in threading.enumerate())


def test_float32_executables_compute_derived_params_in_float32():
    from cortex.core.frontend.params import bind_params

    model = TreeLSTM(hidden=6, embed=5, vocab=10, dtype="float32", seed=3)
    exe = cortex.compile(model, target="numpy", passes=DEFAULT_PASSES)
    graph = exe.graph
    assert graph.derived  # the hoisted embedding table and stacked gates
    low = bind_params(graph, model.params, dtype=np.float32, compute_dtype=np.float32)
    ref = bind_params(graph, model.params, dtype=np.float64)
    for d in graph.derived:
        assert low[d.name].dtype == np.float32
        np.testing.assert_allclose(low[d.name], ref[d.name], rtol=1e-5, atol=1e-6)
    check_against_reference(model, exe(TREES), rtol=1e-4, atol=1e-5)


def test_the_executable_keeps_its_own_params():
    model = TreeRNN(hidden=5, vocab=10, dtype="float64")
    exe = cortex.compile(model, target="numpy", passes=())  # params used as given, no derived
    before = exe(TREES).nodes("h").copy()
    for a in model.params.values():
        a[...] = 0.0  # the model's arrays change; the executable's copies must not
    np.testing.assert_array_equal(exe(TREES).nodes("h"), before)


def test_build_artifact_is_the_first_half_of_build(monkeypatch):
    """compile-only checks (no device) use build_artifact: same source and key as a full build,
    and with prepare_params=False the params are never prepared."""
    from cortex.core.api import resolve_target
    from cortex.core.lowering.lower import Lowered

    model = TreeLSTM(vocab=7, embed=3, hidden=4)
    target, options = resolve_target("numpy")
    exe = cortex.compile(model, target="numpy")
    full = pipeline.build_artifact(model, target, options)
    assert str(full.source) == str(exe.source) and full.cache_key == exe.cache_key
    assert full.prepared is not None and set(full.prepared) == set(exe.lowered.prepare_params(model.params))

    def boom(self, params):
        raise AssertionError("params prepared in a compile-only build")

    monkeypatch.setattr(Lowered, "prepare_params", boom)
    bare = pipeline.build_artifact(model, target, options, prepare_params=False)
    assert bare.prepared is None and bare.cache_key == exe.cache_key
