"""The parts of a distributed run that need no Ray cluster: model specs, row forms, the worker
called in-process, the exactly-once committer and the Python-folder input.

Needs pyarrow (the ``ray`` extra). Skipped with the reason where it is missing, unless
``CORTEX_TEST_REQUIRE`` names ray (``.ci/run`` does): then a missing pyarrow fails.
"""

from __future__ import annotations

import ast

import numpy as np
import pytest
from ray_stack import require

require("pyarrow")
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import cortex  # noqa: E402
from cortex.data import AST_VOCAB_SIZE, Vocabulary, ast_tree  # noqa: E402
from cortex.distributed import (CommitError, CompileRecipe, ExactlyOnceWriter,  # noqa: E402
                                InferenceWorker, model_from_spec, python_rows)
from cortex.distributed.commit import check_unique_ids  # noqa: E402
from cortex.distributed.inputs import function_source  # noqa: E402
from cortex.distributed.rows import choose_form, input_columns  # noqa: E402
from cortex.distributed.sources import SavedExecutable, load_source  # noqa: E402
from cortex.models import ChildSumTreeLSTM, MVRNN  # noqa: E402


def objects(values: list) -> np.ndarray:
    """A 1-D object array of ``values`` (what Ray's numpy batches hold for such columns)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@pytest.fixture(scope="module")
def ast_source() -> CompileRecipe:
    return CompileRecipe(model_from_spec("ChildSumTreeLSTM:hidden=8,embed=4,vocab=ast"))


# ---- sources -------------------------------------------------------------------------------

def test_model_spec_makes_the_zoo_model() -> None:
    model = model_from_spec("ChildSumTreeLSTM:hidden=16,embed=8,vocab=ast,seed=3")
    assert isinstance(model, ChildSumTreeLSTM)
    assert model.hidden == 16 and model.params["E"].shape == (AST_VOCAB_SIZE, 8)
    same = ChildSumTreeLSTM(hidden=16, embed=8, vocab=AST_VOCAB_SIZE, seed=3)
    np.testing.assert_array_equal(model.params["U_i"], same.params["U_i"])


def test_model_spec_loads_weights(tmp_path) -> None:
    trained = ChildSumTreeLSTM(hidden=4, embed=2, vocab=5, seed=7)
    trained.save_npz(tmp_path / "w.npz")
    model = model_from_spec("ChildSumTreeLSTM:hidden=4,embed=2,vocab=5", tmp_path / "w.npz")
    np.testing.assert_array_equal(model.params["W_f"], trained.params["W_f"])


@pytest.mark.parametrize("spec, message", [
    ("NoSuchModel:hidden=4", "unknown model 'NoSuchModel'"),
    ("TreeLSTM:hidden", "'hidden' is not key=value"),
    ("TreeLSTM:hidden=4,colour=red", "unexpected keyword argument 'colour'"),
])
def test_model_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model_from_spec(spec)


def test_recipe_threads_become_the_target_option() -> None:
    model = ChildSumTreeLSTM(hidden=4, embed=2, vocab=5)
    assert CompileRecipe(model, "llvm", threads=2).compile_options() == {"threads": 2}
    assert CompileRecipe(model, "numpy", threads=2).compile_options() == {}  # numpy has none
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        CompileRecipe(model, threads=0)
    with pytest.raises(ValueError, match="give the thread count once"):
        CompileRecipe(model, options={"threads": 4})
    with pytest.raises(cortex.InvalidOptionError, match="opt_level"):
        CompileRecipe(model, options={"opt_level": 9}).check()


def test_a_saved_executable_is_rebuilt_with_the_workers_threads(tmp_path) -> None:
    import pickle

    model = ChildSumTreeLSTM(hidden=8, embed=4, vocab=AST_VOCAB_SIZE, seed=5)
    exe = cortex.compile(model, target="llvm", threads=2, opt_level=2)
    exe.save(tmp_path / "model.cortex")
    source = load_source(str(tmp_path / "model.cortex"), threads=1)
    assert isinstance(source, SavedExecutable)
    described = source.describe()
    assert described.startswith("ChildSumTreeLSTM saved for llvm (")
    assert "opt_level=2" in described and "threads=1" in described
    source.check()
    rebuilt = pickle.loads(pickle.dumps(source)).build()  # what a worker does
    assert rebuilt.options["threads"] == 1 and rebuilt.options["opt_level"] == 2
    trees = [ast_tree("def f(x):\n    return x * 2\n"), ast_tree("y = [1, 2]")]
    np.testing.assert_array_equal(rebuilt(trees).root("h"), exe(trees).root("h"))
    with pytest.raises(ValueError, match="is a saved executable: it has its target"):
        load_source(str(tmp_path / "model.cortex"), target="numpy")


def test_a_saved_model_or_a_spec_compiles_for_the_target(tmp_path) -> None:
    model = ChildSumTreeLSTM(hidden=4, embed=2, vocab=5, seed=1)
    model.save(tmp_path / "m.cortex")
    source = load_source(str(tmp_path / "m.cortex"), target="numpy", threads=2)
    assert isinstance(source, CompileRecipe) and source.target == "numpy"
    np.testing.assert_array_equal(source.model.params["U_o"], model.params["U_o"])
    spec = load_source("ChildSumTreeLSTM:hidden=4,embed=2,vocab=5", options={"opt_level": 1})
    assert spec.compile_options() == {"opt_level": 1, "threads": 1}
    with pytest.raises(FileNotFoundError, match="no model file"):
        load_source(str(tmp_path / "missing.cortex"))


# ---- rows and the worker ---------------------------------------------------------------------

def test_form_comes_from_the_column_name() -> None:
    assert choose_form(["id", "source"]) == ("source", "python")
    assert choose_form(["id", "parents", "words"]) == ("parents", "parents")
    assert choose_form(["id", "text"], "text", "sexpr") == ("text", "sexpr")
    with pytest.raises(ValueError, match="no input column"):
        choose_form(["id", "text"])
    with pytest.raises(ValueError, match="give the form of column 'text'"):
        choose_form(["id", "text"], "text")
    with pytest.raises(ValueError, match="unknown input form"):
        choose_form(["id", "source"], form="xml")


def test_input_columns_name_what_a_run_reads() -> None:
    read = input_columns(["id", "parents", "words", "label"])
    assert (read.form, read.names) == ("parents", ["id", "parents", "words"])
    assert input_columns(["key", "source"], id_column="key").names == ["key", "source"]
    with pytest.raises(ValueError, match="no id column 'id'"):
        input_columns(["source"])
    with pytest.raises(ValueError, match="words column 'tokens' is not in"):
        input_columns(["id", "parents"], words_column="tokens")


def test_worker_python_rows_match_the_executable(ast_source) -> None:
    sources = ["def f(x):\n    return x + 1\n", "class A:\n    pass\n", "y = [i for i in z]"]
    worker = InferenceWorker(ast_source, column="source", form="python")
    table = worker({"id": np.array([10, 11, 12]), "source": objects(sources)})
    assert table.column_names == ["id", "h", "c", "error"]
    assert table.schema.field("h").type == pa.list_(pa.float32(), 8)
    assert table.column("error").null_count == 3
    expected = ast_source.build()([ast_tree(s) for s in sources])
    h = np.stack(table.column("h").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(h, expected.root("h"))


def test_bad_rows_become_error_records(ast_source) -> None:
    worker = InferenceWorker(ast_source, column="source", form="python", states=["h"])
    sources = ["x = 1", "def (:", None, "y = 2"]
    table = worker({"id": np.arange(4), "source": objects(sources)})
    errors = table.column("error").to_pylist()
    assert errors[0] is None and errors[3] is None
    assert errors[1].startswith("ParseError: Python source does not parse")
    assert errors[2] == "TypeError: expected Python source text, got NoneType"
    h = np.stack(table.column("h").to_numpy(zero_copy_only=False))
    assert table.column("h").null_count == 0  # NaN, not null: older pyarrow cannot read those
    assert np.isnan(h[1:3]).all() and not np.isnan(h[[0, 3]]).any()
    good = ast_source.build()([ast_tree("x = 1"), ast_tree("y = 2")]).root("h")
    np.testing.assert_array_equal(h[[0, 3]], good)


def test_error_records_survive_a_parquet_round_trip(ast_source, tmp_path) -> None:
    worker = InferenceWorker(ast_source, column="source", form="python")
    table = worker({"id": np.arange(3), "source": objects(["x = 1", "def (:", "y = 2"])})
    with ExactlyOnceWriter(tmp_path / "out.parquet") as writer:
        writer.write(table)
        writer.commit(pa.array(np.arange(3)))
    back = pq.read_table(tmp_path / "out.parquet")  # pyarrow < 26 cannot read null lists
    assert back.column("error").to_pylist()[1].startswith("ParseError")
    np.testing.assert_array_equal(np.stack(back.column("c").to_numpy(zero_copy_only=False)),
                                  np.stack(table.column("c").to_numpy(zero_copy_only=False)))


def test_rows_the_linearizer_rejects_become_error_records() -> None:
    source = CompileRecipe(model_from_spec("TreeLSTM:hidden=4,embed=2,vocab=4"))
    worker = InferenceWorker(source, column="sexpr", form="sexpr", vocab=Vocabulary(["a", "b"]))
    rows = ["(1 (2 a) (3 b))", "(1 (2 a) (2 b) (3 a))", "(1 (2 a", "((1 a) (2 b))"]
    table = worker({"id": np.array(["s0", "s1", "s2", "s3"]), "sexpr": objects(rows)})
    errors = table.column("error").to_pylist()
    assert errors[0] is None and errors[3] is None
    assert errors[1].startswith("ArityError: node root: has 3 children; the model needs exactly 2")
    assert errors[2].startswith("ParseError: node root.0: unbalanced '('")


def test_parent_arrays_and_objects() -> None:
    source = CompileRecipe(model_from_spec("ChildSumTreeLSTM:hidden=4,embed=2,vocab=6"))
    exe = source.build()
    worker = InferenceWorker(source, column="parents", form="parents", words_column="words")
    parents = objects([np.array([-1, 0, 0]), np.array([1, -1]), np.array([0])])
    words = objects([np.array([1, 2, 3]), np.array([4, 5]), np.array([1])])
    table = worker({"id": np.arange(3), "parents": parents, "words": words})
    assert table.column("error").to_pylist()[2].startswith("CycleError")
    from cortex.data import ParentArray

    want = exe([ParentArray([-1, 0, 0], words=[1, 2, 3]), ParentArray([1, -1], words=[4, 5])])
    np.testing.assert_array_equal(np.stack(table.column("c").to_numpy(zero_copy_only=False)[:2]),
                                  want.root("c"))
    # nested tuples carry tokens at the leaves only: a child-sum model needs one at every node
    worker = InferenceWorker(source, column="tree", form="object")
    table = worker({"id": np.arange(3), "tree": objects([4, (1, (2, 3)), 5])})
    assert table.column("error").to_pylist() == [
        None, "BatchMismatchError: model 'ChildSumTreeLSTM': node 3 needs a token id in [0, 6) "
              "for 'word' but has -1", None]
    np.testing.assert_array_equal(np.stack(table.column("h").to_numpy(zero_copy_only=False))[::2],
                                  exe([4, 5]).root("h"))


def test_matrix_states_keep_their_shape_in_the_schema() -> None:
    source = CompileRecipe(MVRNN(hidden=3, vocab=5), target="numpy")
    table = InferenceWorker(source, column="tree", form="object")(
        {"id": np.arange(2), "tree": objects([(1, 2), 3])})
    assert table.schema.field("h").type.list_size == 3 and table.schema.field("h").metadata is None
    assert table.schema.field("M").type.list_size == 9
    assert table.schema.field("M").metadata == {b"shape": b"[3, 3]"}
    want = source.build()([(1, 2), 3]).root("M")
    got = np.stack(table.column("M").to_numpy(zero_copy_only=False)).reshape(2, 3, 3)
    np.testing.assert_array_equal(got, want)


def test_unknown_state_is_refused(ast_source) -> None:
    with pytest.raises(ValueError, match="unknown state 'z'"):
        InferenceWorker(ast_source, column="source", form="python", states=["z"])


# ---- the committer ---------------------------------------------------------------------------

def _table(ids: list, value: float = 0.0) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "h": pa.FixedSizeListArray.from_arrays(
                         pa.array(np.full(2 * len(ids), value, np.float32)), 2),
                     "error": pa.array([None] * len(ids), pa.string())})


def test_commit_writes_every_id_once(tmp_path) -> None:
    out = tmp_path / "out.parquet"
    with ExactlyOnceWriter(out, metadata={"cortex.form": "python"}) as w:
        w.write(_table([3, 4, 5]))
        w.write(_table([0, 1, 2]))
        assert not out.exists()  # nothing is visible before the commit
        report = w.commit(pa.array(range(6)))
    assert (report.rows, report.errors, report.duplicates_dropped) == (6, 0, 0)
    table = pq.read_table(out)
    assert sorted(table.column("id").to_pylist()) == list(range(6))
    assert table.schema.metadata[b"cortex.form"] == b"python"
    assert list(tmp_path.iterdir()) == [out]


def test_commit_drops_repeated_ids(tmp_path) -> None:
    out = tmp_path / "out.parquet"
    with ExactlyOnceWriter(out) as w:
        w.write(_table([0, 1], 1.0))
        w.write(_table([1, 2, 3], 2.0))  # id 1 again: a batch computed twice
        report = w.commit(pa.array(range(4)))
    assert (report.rows, report.duplicates_dropped) == (4, 1)
    table = pq.read_table(out)
    assert table.column("id").to_pylist() == [0, 1, 2, 3]
    assert table.column("h").to_pylist()[1] == [1.0, 1.0]  # the first copy is kept


@pytest.mark.parametrize("written, message", [
    ([[0, 1]], r"1 input ids have no output row: \[2\]"),
    ([[0, 1, 2, 7]], r"1 output ids are not input ids: \[7\]"),
])
def test_commit_refuses_wrong_ids(tmp_path, written, message) -> None:
    out = tmp_path / "out.parquet"
    w = ExactlyOnceWriter(out)
    for ids in written:
        w.write(_table(ids))
    with pytest.raises(CommitError, match=message):
        w.commit(pa.array(range(3)))
    assert list(tmp_path.iterdir()) == []  # no output, no temporary file


def test_failed_run_leaves_nothing(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="worker died"):
        with ExactlyOnceWriter(tmp_path / "out.parquet") as w:
            w.write(_table([0]))
            raise RuntimeError("worker died")
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_overwrite(tmp_path) -> None:
    out = tmp_path / "out.parquet"
    out.write_bytes(b"old")
    with pytest.raises(FileExistsError, match="exists"):
        ExactlyOnceWriter(out)
    with ExactlyOnceWriter(out, overwrite=True) as w:
        w.write(_table([0]))
        w.commit(pa.array([0]))
    assert pq.read_table(out).num_rows == 1


def test_input_ids_must_be_unique() -> None:
    check_unique_ids(pa.array(["a", "b"]))
    with pytest.raises(ValueError, match=r"repeats ids: \['a'\]"):
        check_unique_ids(pa.array(["a", "b", "a"]))
    with pytest.raises(ValueError, match="1 null ids"):
        check_unique_ids(pa.array([1, None]))


# ---- a folder of Python files ----------------------------------------------------------------

def test_python_rows_per_file_and_per_function(tmp_path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "a.py").write_text("def f():\n    return 1\n\nx = 2\n")
    (tmp_path / "pkg" / "b.py").write_text(
        "class C:\n    @staticmethod\n    def m():\n        def inner():\n            pass\n"
        "        s = '''\nat column 0\n'''\n        return s\n")
    (tmp_path / "bad.py").write_text("def (:\n")
    files = python_rows(tmp_path)
    assert files.column("id").to_pylist() == ["a.py", "bad.py", "pkg/b.py"]
    functions = python_rows(tmp_path, unit="function")
    assert functions.column("id").to_pylist() == [
        "a.py:1:f", "bad.py", "pkg/b.py:3:C.m", "pkg/b.py:4:C.m.<locals>.inner"]
    sources = functions.column("source").to_pylist()
    assert sources[0] == "def f():\n    return 1\n"
    for text in sources[2:]:  # each function parses alone, decorator included
        tree = ast.parse(text)
        assert isinstance(tree.body[0], ast.FunctionDef)
    assert ast.parse(sources[2]).body[0].decorator_list


def test_function_source_falls_back_to_unparse() -> None:
    text = "class C:\n    def m(self):\n        return '''\nflush left\n'''\n"
    node = ast.parse(text).body[0].body[0]
    source = function_source(text.splitlines(keepends=True), node)
    assert ast.dump(ast.parse(source).body[0]) == ast.dump(node)
