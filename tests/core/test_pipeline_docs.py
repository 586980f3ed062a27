"""The docs show what the compiler really does: every printed IR example in docs/ is
``tools/doc_examples.py``'s output, and the README example runs."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("doc_examples", ROOT / "tools" / "doc_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_docs_show_the_compilers_own_output():
    tool = _tool()
    assert {ex.doc for ex in tool.EXAMPLES} >= {"lowering.md", "architecture.md"}
    program = tool.tree_lstm_program()
    assert program.startswith("program ") and "level_offsets" in program
    assert tool.stale() == [], "run python tools/doc_examples.py --write"
    for ex in tool.EXAMPLES:
        doc = (ROOT / "docs" / ex.doc).read_text()
        assert tool.updated(doc, ex.heading, ex.make()) == doc


def test_readme_compile_and_run_example_runs():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Compile and run a model"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (our own README)
    out = namespace["out"]
    assert out.root("h").shape[0] == out.batch_size and np.all(np.isfinite(out.root("h")))
