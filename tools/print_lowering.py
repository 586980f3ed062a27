"""Print the LoopProgram that ``cortex.compile`` builds for a small TreeLSTM.

The program shown in ``docs/lowering.md`` ("## A TreeLSTM LoopProgram") is this script's output,
so the doc always shows what the compiler really produces; ``tests/core/test_pipeline_docs.py``
fails when the two differ.

Usage::

    python tools/print_lowering.py           # print the program
    python tools/print_lowering.py --write   # refresh the code block in docs/lowering.md
    python tools/print_lowering.py --check   # exit status 1 when the doc is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "lowering.md"
SECTION = "## A TreeLSTM LoopProgram"

#: A binary TreeLSTM small enough to read: hidden 4, embedding 3, 10 words, float32.
MODEL_ARGS = dict(hidden=4, embed=3, vocab=10, dtype="float32", seed=0)
#: The numpy target with the loop-shaping knobs neutral (scalar, untiled, row-major weights),
#: so the printed program shows the lowering itself: leaf specialization, per-node fusion and
#: the level loop inside one call.
SCHEDULE = dict(vector_width=1, weight_layout="row_major", tile_hidden=0, unroll=1,
                kernel_form="single", leaf_specialization=True, fuse=True)


def program_text() -> str:
    import cortex
    from cortex.models import TreeLSTM

    exe = cortex.compile(TreeLSTM(**MODEL_ARGS), target="numpy", schedule=SCHEDULE)
    return str(exe.program)


def _block_span(doc: str) -> tuple[int, int]:
    """Start and end of the first fenced block's body after the section heading."""
    at = doc.index(SECTION)
    start = doc.index("```", at)
    start = doc.index("\n", start) + 1
    end = doc.index("```", start)
    return start, end


def documented(doc: str) -> str:
    start, end = _block_span(doc)
    return doc[start:end].rstrip("\n")


def updated(doc: str, program: str) -> str:
    start, end = _block_span(doc)
    return doc[:start] + program.rstrip("\n") + "\n" + doc[end:]


def main(argv: list[str]) -> int:
    program = program_text()
    if "--write" in argv:
        DOC.write_text(updated(DOC.read_text(), program))
    elif "--check" in argv:
        if documented(DOC.read_text()) != program.rstrip("\n"):
            print(f"{DOC} is out of date: run python tools/print_lowering.py --write")
            return 1
    else:
        print(program)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
