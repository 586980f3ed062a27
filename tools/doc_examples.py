"""Print the IR examples the docs show, straight from the compiler, and keep the docs in step.

Each example is a fenced code block right after a heading of a doc; its text is what the
compiler produces today, so the docs never show an IR that no longer exists.
``tests/core/test_pipeline_docs.py`` fails when a block is out of date.

Usage::

    python tools/doc_examples.py            # print every example
    python tools/doc_examples.py --write    # refresh the blocks in docs/
    python tools/doc_examples.py --check    # exit status 1 when a block is out of date
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: The numpy target with the loop-shaping knobs neutral (scalar, untiled, row-major weights),
#: so a printed program shows the lowering itself: leaf specialization, per-node fusion and the
#: level loop inside one call (the leaf loop from the leaf case, not from its tables; one node
#: loop per level, not one per leaf-child class).
NEUTRAL_SCHEDULE = dict(vector_width=1, weight_layout="row_major", tile_hidden=0, unroll=1,
                        kernel_form="single", leaf_specialization=True, fuse=True, leaf_tables=False,
                        leaf_kids=False)
#: A binary TreeLSTM small enough to read: hidden 4, embedding 3, 10 words, float32.
TREE_LSTM_ARGS = dict(hidden=4, embed=3, vocab=10, dtype="float32", seed=0)
#: The smallest recursive model: h = tanh(W [h_left; h_right] + b), hidden 2.
TREE_RNN_ARGS = dict(hidden=2, embed=2, vocab=5, dtype="float32", seed=0)
#: The tree of the linearizer example: leaves 1 and 2 under one node, that node and leaf 3
#: under the root.
EXAMPLE_TREE = ((1, 2), 3)


@lru_cache(maxsize=None)
def _tree_rnn():
    import cortex
    from cortex.models import TreeRNN

    return cortex.compile(TreeRNN(**TREE_RNN_ARGS), target="numpy", schedule=NEUTRAL_SCHEDULE)


def tree_lstm_program() -> str:
    import cortex
    from cortex.models import TreeLSTM

    exe = cortex.compile(TreeLSTM(**TREE_LSTM_ARGS), target="numpy", schedule=NEUTRAL_SCHEDULE)
    return str(exe.program)


def tree_rnn_graph() -> str:
    from cortex.core.frontend.trace import trace
    from cortex.models import TreeRNN

    return str(trace(TreeRNN(**TREE_RNN_ARGS)))


def linearized_example() -> str:
    from cortex.core.linearize import linearize

    b = linearize([EXAMPLE_TREE], arity=2)
    rows = [f"num_nodes     {b.num_nodes}",
            f"level_offsets {b.level_offsets.tolist()}",
            f"child_table   {b.child_table.tolist()}",
            f"word_ids      {b.word_ids.tolist()}",
            f"roots         {b.roots.tolist()}"]
    return "\n".join(rows)


def tree_rnn_program() -> str:
    return str(_tree_rnn().program)


def tree_rnn_c_level_loop() -> str:
    """The level loop of the TreeRNN program as the C-family renderer writes it (C dialect)."""
    from cortex.core.render.c_family import render

    lines = render(_tree_rnn().program, "c").splitlines()
    start = next(i for i, line in enumerate(lines) if "for (int32_t l = 1" in line)
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next(i for i in range(start + 1, len(lines))
               if lines[i].strip() == "}" and len(lines[i]) - len(lines[i].lstrip()) == indent)
    return "\n".join(line[indent:] for line in lines[start:end + 1])


@dataclass(frozen=True)
class Example:
    doc: str  # file name under docs/
    heading: str  # the block is the first fenced block after this line
    make: Callable[[], str]


EXAMPLES = (
    Example("lowering.md", "## A TreeLSTM LoopProgram", tree_lstm_program),
    Example("architecture.md", "### Example: a traced RecursiveGraph", tree_rnn_graph),
    Example("architecture.md", "### Example: a linearized batch", linearized_example),
    Example("architecture.md", "### Example: a LoopProgram", tree_rnn_program),
    Example("architecture.md", "### Example: rendered C", tree_rnn_c_level_loop),
)


def _block_span(doc: str, heading: str) -> tuple[int, int]:
    """Start and end of the first fenced block's body after ``heading``."""
    at = doc.index(heading)
    start = doc.index("```", at)
    start = doc.index("\n", start) + 1
    end = doc.index("```", start)
    return start, end


def documented(doc: str, heading: str) -> str:
    start, end = _block_span(doc, heading)
    return doc[start:end].rstrip("\n")


def updated(doc: str, heading: str, text: str) -> str:
    start, end = _block_span(doc, heading)
    return doc[:start] + text.rstrip("\n") + "\n" + doc[end:]


def stale() -> list[str]:
    """The examples whose documented text differs from the compiler's (``doc: heading``)."""
    out = []
    for ex in EXAMPLES:
        if documented((DOCS / ex.doc).read_text(), ex.heading) != ex.make().rstrip("\n"):
            out.append(f"docs/{ex.doc}: {ex.heading}")
    return out


def main(argv: list[str]) -> int:
    if "--write" in argv:
        for ex in EXAMPLES:
            path = DOCS / ex.doc
            path.write_text(updated(path.read_text(), ex.heading, ex.make()))
    elif "--check" in argv:
        bad = stale()
        for where in bad:
            print(f"{where} is out of date: run python tools/doc_examples.py --write")
        return 1 if bad else 0
    else:
        for ex in EXAMPLES:
            print(f"== docs/{ex.doc}: {ex.heading}\n{ex.make()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
