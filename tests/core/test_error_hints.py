"""Errors a new user meets in the first hour say what to do instead (each message below was
once met without its hint): integer ids in an s-expression, Python source given as text, a
Python AST on a fixed-arity model, a misspelt model keyword, ``exe.run`` given structures, and
``cortex.compile`` for a target that cannot run here (refused before any work, with
``cortex.compile_only`` as the way to get the code)."""

from __future__ import annotations

import ast
import re
from dataclasses import replace

import pytest

import cortex
from cortex.core.plugin.loader import get_registry
from cortex.data import ArityError, ParseError, TokenError
from cortex.models import ChildSumTreeLSTM, TreeLSTM

pytestmark = pytest.mark.usefixtures("clean_plugins")
SOURCE = "def f(x):\n    return x + 1\n"


@pytest.fixture(scope="module")
def exe():
    return cortex.compile(TreeLSTM(hidden=4, embed=3, vocab=10), target="numpy")


def test_integer_looking_words_in_an_s_expression(exe):
    with pytest.raises(TokenError) as info:
        exe(["(0 (0 1) (0 2))"])
    message = str(info.value)
    assert message.startswith("input 0, node root.0: string token '1' needs a vocabulary")
    assert "vocab=" in message and "even when it looks like a number" in message
    assert "nested tuples of ints, e.g. ((1, 2), 3)" in message
    assert exe([(1, 2)]).root("h").shape == (1, 4)  # ... which works


def test_a_word_token_without_vocabulary_gets_the_short_hint(exe):
    with pytest.raises(TokenError, match=r"string token 'good' needs a vocabulary: pass vocab= "
                                         r"to the call .*, or give integer ids$"):
        exe([("good", 1)])


def test_python_source_given_as_text_points_at_ast_tree(exe):
    with pytest.raises(ParseError) as info:
        exe([SOURCE])
    message = str(info.value)
    assert "text after the end of the tree (at character 4)" in message
    assert "a str input is ONE PTB/SST s-expression" in message
    assert "cortex.data.ast_tree(source)" in message and "a list of strings" in message


def test_a_python_ast_on_the_binary_treelstm_points_at_childsum(exe):
    with pytest.raises(ArityError) as info:
        exe([ast.parse(SOURCE)])
    message = str(info.value)
    assert "has 1 children; the model needs exactly 2 (or 0 for a leaf)" in message
    assert "cortex.models.ChildSumTreeLSTM" in message
    from cortex.data import AST_VOCAB_SIZE, ast_tree

    fits = cortex.compile(ChildSumTreeLSTM(hidden=4, embed=3, vocab=AST_VOCAB_SIZE), target="numpy")
    assert fits([ast_tree(SOURCE)]).root("h").shape == (1, 4)  # ... which works


def test_a_misspelt_model_keyword_lists_the_valid_ones():
    with pytest.raises(TypeError) as info:
        TreeLSTM(embedding=8)
    message = str(info.value)
    # (Python 3.12+ says "missing a required keyword-only argument")
    assert re.match(r"TreeLSTM\(\.\.\.\): missing a required (keyword-only )?argument: 'hidden'; "
                    r"'embedding' is not a keyword of TreeLSTM \(did you mean 'embed'\?\)", message)
    assert ("TreeLSTM takes: hidden (required), embed=None, vocab=None, features=None, arity=2, "
            "leaf='gated', forget_bias='shared', dtype='float32', seed=0, name=None, "
            "outputs=None, every_node=False") in message
    with pytest.raises(TypeError, match=r"^TreeLSTM\(\.\.\.\): got an unexpected keyword "
                                        r"argument 'embedding' \(did you mean 'embed'\?\)\. "
                                        r"TreeLSTM takes: hidden \(required\)"):
        TreeLSTM(hidden=4, embedding=8, vocab=3)  # reaches Model.__init__ through **options
    with pytest.raises(TypeError, match=r"ChildSumTreeLSTM\(\.\.\.\): 'arity' is set by "
                                        r"ChildSumTreeLSTM itself\. ChildSumTreeLSTM takes: "):
        ChildSumTreeLSTM(hidden=4, embed=3, vocab=5, arity=3)
    with pytest.raises(TypeError, match=r"TreeLSTM\(\.\.\.\): too many positional arguments"):
        TreeLSTM(4)


def test_a_subclass_that_forwards_keywords_keeps_every_valid_call():
    class Tagged(TreeLSTM):
        def __init__(self, *, tag: str = "", **options):
            super().__init__(**options)
            self.tag = tag

    assert Tagged(hidden=4, embed=3, vocab=5, tag="x").tag == "x"
    with pytest.raises(TypeError, match=r"^Tagged\(\.\.\.\): missing a required (keyword-only )?argument: "
                                        r"'hidden'; 'hiden' is not a keyword of Tagged \(did you "
                                        r"mean 'hidden'\?\)\. Tagged takes: tag='', hidden "
                                        r"\(required\), embed=None"):
        Tagged(hiden=4, embed=3, vocab=5)


def test_exe_run_given_structures_says_to_call_the_executable(exe):
    with pytest.raises(TypeError) as info:
        exe.run(["(0 (0 1) (0 2))"])
    message = str(info.value)
    assert "bind_batch" not in message
    assert message == ("run needs a LinearizedBatch (made by exe.linearize(structures) or "
                       "cortex.data.linearize(...)), got list; to run on structures, call the "
                       "executable itself: exe(structures)")
    assert exe.run(exe.linearize([(1, 2)])).root("h").shape == (1, 4)


@pytest.fixture
def numpy_without_device(monkeypatch):
    """The numpy target as if it could compile but not run here (a device target without one)."""
    registry = get_registry()
    target = replace(registry.get("numpy"),
                     runnable=lambda: cortex.Availability.no("no device in this test", "get one"))
    monkeypatch.setitem(registry._targets, "numpy", target)


def test_compile_refuses_a_target_that_cannot_run_before_any_work(numpy_without_device, tmp_path):
    dump = tmp_path / "dump"
    with pytest.raises(cortex.TargetNotRunnableError) as info:
        cortex.compile(TreeLSTM(hidden=4, embed=3, vocab=10), target="numpy", dump=dump)
    assert str(info.value) == (
        "target 'numpy' cannot run here: no device in this test. To fix: get one. "
        "cortex.compile builds an executable, which needs the device; "
        "cortex.compile_only(model, target='numpy', ...) generates and compiles the code "
        "without one (dump= writes every stage)")
    assert not dump.exists()  # nothing was written: refused before any stage ran


def test_compile_only_generates_and_compiles_without_a_device(numpy_without_device, tmp_path):
    code = cortex.compile_only(TreeLSTM(hidden=4, embed=3, vocab=10), target="numpy",
                               dump=tmp_path, dtype="float64")
    assert code.target == "numpy" and code.cache_key and code.program is not None
    assert code.schedule is not None and code.artifact is not None
    assert sorted(p.name for p in tmp_path.iterdir())[:3] == [
        "00_options.json", "01_graph.txt", "02_graph_passes.txt"]


def test_cuda_without_a_gpu_compiles_only_through_compile_only(tmp_path):
    target = get_registry().get("cuda")
    if not target.enabled() or target.runnable():
        pytest.skip(reason="needs nvcc and no usable GPU (the case this test is about)")
    model = TreeLSTM(hidden=4, embed=3, vocab=10)
    with pytest.raises(cortex.TargetNotRunnableError, match=r"compile_only\(model, target='cuda'"):
        cortex.compile(model, target="cuda", dump=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    code = cortex.compile_only(model, target="cuda", dump=tmp_path / "code")
    assert (tmp_path / "code" / "05_source.cu").exists() and code.artifact.image[:4] == b"\x7fELF"
