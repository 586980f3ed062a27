"""The docs show what the compiler really does: the printed TreeLSTM LoopProgram in
docs/lowering.md is ``tools/print_lowering.py``'s output, and the README example runs."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("print_lowering", ROOT / "tools" / "print_lowering.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_show_the_current_tree_lstm_loop_program():
    tool = _tool()
    doc = (ROOT / "docs" / "lowering.md").read_text()
    program = tool.program_text()
    assert program.startswith("program ") and "level_offsets" in program
    assert tool.documented(doc) == program.rstrip("\n"), (
        "docs/lowering.md is out of date: run python tools/print_lowering.py --write")
    assert tool.updated(doc, program) == doc


def test_readme_compile_and_run_example_runs():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Compile and run a model"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (our own README)
    out = namespace["out"]
    assert out.root("h").shape[0] == out.batch_size and np.all(np.isfinite(out.root("h")))
