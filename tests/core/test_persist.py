"""Keeping compiled models: exe.save / cortex.load, pickling, Model.save / Model.load with the
constructor settings, update_params, warmup and map (on the numpy target: no backend needed;
tests/plugins/test_llvm_persist.py does llvm and opencl)."""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import cortex
from cortex.core import persist
from cortex.core.frontend.model import Model, ParamsNotUpdatedWarning
from cortex.core.persist import PersistError
from cortex.models import DAGRNN, MVRNN, ChildSumTreeLSTM, SeqGRU, SeqLSTM, TreeFC, TreeGRU, TreeLSTM, TreeRNN

TREES = [((1, 2), (3, 4)), 5, (((6, 7), 8), 9)]

ZOO = [
    TreeLSTM(hidden=6, embed=4, vocab=11, seed=1),
    TreeLSTM(hidden=5, features=3, arity=3, dtype="float64", seed=2, name="ternary", every_node=True),
    ChildSumTreeLSTM(hidden=4, vocab=11, embed=3),
    TreeFC(hidden=4, vocab=11, embed=4),
    TreeRNN(hidden=4, vocab=11),
    TreeGRU(hidden=4, vocab=11, embed=3),
    MVRNN(hidden=3, vocab=11),
    DAGRNN(hidden=4, features=3),
    SeqLSTM(hidden=4, vocab=11, embed=3),
    SeqGRU(hidden=4, features=2, outputs=("h",)),
]


def _equal(a, b):
    assert a.states == b.states
    for s in a.states:
        np.testing.assert_array_equal(a.nodes(s), b.nodes(s))


@pytest.mark.parametrize("model", ZOO, ids=lambda m: m.name)
def test_every_zoo_model_round_trips_class_settings_and_params(model, tmp_path):
    model.set_params({k: v * 1.5 for k, v in model.params.items()})  # not the seeded init
    path = model.save(tmp_path / "model.cortex")
    again = type(model).load(path)
    assert type(again) is type(model)
    assert persist.jsonable(again.settings(), "") == persist.jsonable(model.settings(), "")  # tuples: lists
    assert again.name == model.name and again.every_node == model.every_node and again.dtype == model.dtype
    assert again.outputs == model.outputs
    for k, v in model.params.items():
        np.testing.assert_array_equal(again.params[k], v)
    assert type(cortex.load(path)) is type(model)
    assert type(Model.load(path)) is type(model)


def test_settings_name_positional_and_keyword_arguments():
    class Pos(TreeRNN):
        def __init__(self, hidden, vocab=11, **options):
            super().__init__(hidden=hidden, vocab=vocab, **options)

    assert Pos(4, 9, seed=3).settings() == {"hidden": 4, "vocab": 9, "seed": 3}
    assert TreeLSTM(hidden=3, embed=2, vocab=5).settings() == {"hidden": 3, "embed": 2, "vocab": 5}


class _Tagged(TreeRNN):
    """A model whose constructor takes an argument that a saved file cannot hold."""

    def __init__(self, *, tag: object = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tag = tag


def test_a_model_that_another_process_cannot_import_is_refused_at_save(tmp_path):
    class Local(TreeRNN):
        pass

    with pytest.raises(PersistError, match="cannot save .*Local.*another process cannot import"):
        Local(hidden=3, vocab=5).save(tmp_path / "x")
    with pytest.raises(PersistError, match="a saved file cannot hold"):
        _Tagged(hidden=3, vocab=5, tag=object()).save(tmp_path / "y")


def test_loading_a_model_as_another_class_is_refused(tmp_path):
    path = TreeRNN(hidden=3, vocab=5).save(tmp_path / "m")
    with pytest.raises(PersistError, match="holds a TreeRNN, not a TreeLSTM"):
        TreeLSTM.load(path)


@pytest.mark.parametrize("model", [ZOO[0], ZOO[1], ZOO[7]], ids=lambda m: m.name)
def test_an_executable_round_trips_through_a_file_and_pickle(model, tmp_path):
    from cortex.testing.structures import family

    exe = cortex.compile(model, target="numpy", schedule={"fuse": False})
    kinds = {i.kind for i in model.node_inputs.values()}
    batch = family("mixed", model.arity, vocab=11 if "word" in kinds else None,
                   features=3 if "features" in kinds else None)
    want = exe(batch)
    loaded = cortex.load(exe.save(tmp_path / "exe.cortex"))
    assert loaded.target == "numpy" and loaded.schedule == exe.schedule and loaded.dtype == exe.dtype
    _equal(loaded(batch), want)
    _equal(pickle.loads(pickle.dumps(exe))(batch), want)
    manifest = json.loads(zipfile.ZipFile(tmp_path / "exe.cortex").read("manifest.json"))
    assert manifest["format_version"] == persist.FORMAT_VERSION and manifest["kind"] == "executable"
    assert manifest["options"]["schedule"] == {"fuse": False}  # as given; the rest is the target's
    assert manifest["model"]["class"] == f"{type(model).__module__}:{type(model).__qualname__}"


def test_the_saved_params_are_those_compiled_not_later_changes(tmp_path):
    model = TreeRNN(hidden=4, vocab=11, seed=1)
    exe = cortex.compile(model, target="numpy")
    want = exe(TREES)
    with pytest.warns(ParamsNotUpdatedWarning, match="keep the params they were compiled with.*update_params"):
        model.set_params({k: v * 0 for k, v in model.params.items()})
    model.params["W"][...] = 7  # in place: the executable's snapshot is a copy
    _equal(exe(TREES), want)
    _equal(cortex.load(exe.save(tmp_path / "e"))(TREES), want)


def test_update_params_takes_new_weights_without_recompiling(tmp_path):
    model = TreeLSTM(hidden=6, embed=4, vocab=11, seed=1)
    exe = cortex.compile(model, target="numpy")
    other = TreeLSTM(hidden=6, embed=4, vocab=11, seed=9)
    artifact = exe.artifact
    exe.update_params(other)  # a model: all its params
    assert exe.artifact is artifact
    _equal(exe(TREES), cortex.compile(other, target="numpy")(TREES))
    exe.update_params({"E": model.params["E"]})  # some of them
    mixed = TreeLSTM(hidden=6, embed=4, vocab=11, seed=9)
    mixed.set_params({**mixed.params, "E": model.params["E"]})
    _equal(exe(TREES), cortex.compile(mixed, target="numpy")(TREES))
    _equal(cortex.load(exe.save(tmp_path / "e"))(TREES), exe(TREES))  # saves the new ones
    with pytest.raises(cortex.core.frontend.model_errors.ParamError, match="no params named"):
        exe.update_params({"nope": np.zeros(3)})
    with pytest.raises(cortex.core.frontend.model_errors.ParamError, match="has shape"):
        exe.update_params({"E": np.zeros((3, 3))})


def _edited(path, out, change):
    """A copy of the saved file ``path`` at ``out`` with ``change(manifest)`` applied."""
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    manifest = json.loads(files["manifest.json"])
    change(manifest)
    with zipfile.ZipFile(out, "w") as z:
        for n, d in files.items():
            z.writestr(n, json.dumps(manifest) if n == "manifest.json" else d)
    return out


def test_files_from_a_newer_format_or_not_from_cortex_are_refused(tmp_path):
    exe = cortex.compile(TreeRNN(hidden=3, vocab=5), target="numpy")
    newer = _edited(exe.save(tmp_path / "e"), tmp_path / "newer",
                    lambda m: m.update(format_version=persist.FORMAT_VERSION + 1))
    with pytest.raises(PersistError, match="format version 2; this cortex reads versions up to 1: upgrade"):
        cortex.load(newer)
    (tmp_path / "junk").write_bytes(b"not a zip")
    with pytest.raises(PersistError, match="not a file cortex saved"):
        cortex.load(tmp_path / "junk")


def test_a_file_naming_a_class_that_is_not_a_model_is_refused(tmp_path):
    evil = _edited(TreeRNN(hidden=3, vocab=5).save(tmp_path / "m"), tmp_path / "evil",
                   lambda m: m["model"].update({"class": "subprocess:run", "settings": {"args": ["false"]}}))
    with pytest.raises(PersistError, match="'subprocess:run' is not a cortex Model class"):
        cortex.load(evil)


def test_pickled_executables_work_in_another_process(tmp_path):
    exe = cortex.compile(TreeLSTM(hidden=6, embed=4, vocab=11, seed=1), target="numpy")
    (tmp_path / "exe.pkl").write_bytes(pickle.dumps(exe))
    code = ("import pickle, sys, numpy as np; exe = pickle.load(open(sys.argv[1], 'rb')); "
            "np.save(sys.argv[2], exe([((1, 2), (3, 4)), 5]).root('h'))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "exe.pkl"), str(tmp_path / "out.npy")],
                   check=True, timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), exe([((1, 2), (3, 4)), 5]).root("h"))


def test_custom_graph_passes_must_be_importable_to_save():
    from cortex.core.passes.pipeline import DEFAULT_PASSES

    exe = cortex.compile(TreeRNN(hidden=3, vocab=5), target="numpy", passes=list(DEFAULT_PASSES) + [lambda g: g])
    with pytest.raises(PersistError, match="graph pass .*lambda"):
        pickle.dumps(exe)
    named = cortex.compile(TreeRNN(hidden=3, vocab=5), target="numpy", passes=["cse", "dce"])
    assert pickle.loads(pickle.dumps(named)).recipe.options["passes"] == ["cse", "dce"]


def test_map_streams_per_input_outputs_in_order_lazily():
    model = TreeLSTM(hidden=6, embed=4, vocab=11, seed=1)
    exe = cortex.compile(model, target="numpy")
    corpus = [TREES[i % 3] for i in range(10)]
    whole = exe(corpus)
    got = list(exe.map(corpus, batch_size=4))
    assert len(got) == 10 and set(got[0]) == {"h", "c"}
    for i, item in enumerate(got):
        np.testing.assert_array_equal(item["h"], whole.root("h")[i])
    pulled = []

    def endless():
        i = 0
        while True:
            pulled.append(i)
            yield TREES[i % 3]
            i += 1

    stream = exe.map(endless(), batch_size=3)
    first = [next(stream) for _ in range(4)]  # needs two batches, reads no more
    assert len(first) == 4 and len(pulled) == 6
    with pytest.raises(ValueError, match="batch_size"):
        exe.map(corpus, batch_size=0)


def test_map_of_an_every_node_model_yields_each_inputs_nodes():
    model = TreeRNN(hidden=3, vocab=11, every_node=True)
    exe = cortex.compile(model, target="numpy")
    out = exe(TREES)
    for i, item in enumerate(exe.map(TREES, batch_size=2)):
        np.testing.assert_array_equal(item["h"], out.of(i, "h"))


def test_map_reports_progress_with_the_plain_fallback(monkeypatch, capsys):
    monkeypatch.setenv("CORTEX_PROGRESS", "plain")
    exe = cortex.compile(TreeRNN(hidden=3, vocab=11), target="numpy")
    assert len(list(exe.map(TREES * 4, batch_size=5, progress=True))) == 12
    err = capsys.readouterr().err
    assert "12/12 inputs" in err and "inputs/s" in err and "nodes_per_s" in err


def test_warmup_runs_synthetic_batches_that_fit_every_kind_of_model():
    from cortex.core.runtime.batches import warmup_batches

    for model in ZOO:
        exe = cortex.compile(model, target="numpy")
        sizes = [exe.linearize(b).num_nodes for b in warmup_batches(exe)]
        assert sizes[0] == 1 and sizes[1] >= 2048
        assert exe.warmup() is exe and exe.calls == 2


def test_a_long_table_fill_reports_progress(monkeypatch, capsys):
    from cortex.core.runtime import token_tables

    monkeypatch.setenv("CORTEX_PROGRESS", "plain")
    monkeypatch.setattr(token_tables, "CHUNK_ROWS", 64)
    monkeypatch.setattr(token_tables, "PROGRESS_AFTER_S", 0.0)
    exe = cortex.compile(TreeLSTM(hidden=8, embed=4, vocab=500), target="numpy")
    assert exe.table_rows is not None and exe.fill_tables() == 500
    assert "token tables: 500/500 tokens" in capsys.readouterr().err
    quiet = cortex.compile(TreeLSTM(hidden=8, embed=4, vocab=500), target="numpy")
    quiet.fill_tables(progress=False)
    assert capsys.readouterr().err == ""


def test_plain_progress_lines(monkeypatch):
    from cortex.core.runtime import progress

    stream = io.StringIO()
    bar = progress._Plain(10, "work", "items", stream=stream, every=0.0)
    bar.update(4, rate="x")
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("work: 4/10 items in") and ", rate x" in lines[0] and len(lines) == 2
    monkeypatch.setenv("CORTEX_PROGRESS", "0")
    assert type(progress.bar(3, "off", enabled=True)) is progress.Progress
