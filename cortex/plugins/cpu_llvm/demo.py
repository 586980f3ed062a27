"""``cortex demo``: the zoo's TreeLSTM on the bundled example sentences, on the default CPU target.

Pipeline position: outside the pipeline, a user-facing tour of it. It compiles
``cortex.models.TreeLSTM`` for ``llvm`` (falling back to ``numpy`` with the reason when llvm is
not runnable here), runs it on ``cortex.data.examples()`` one sentence at a time, and prints, per
sentence, the first root outputs, the latency of the compiled call and of the NumPy reference
evaluator (``cortex.core.frontend.reference.evaluate``), and their largest difference.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np


def _best_ms(fn: Callable[[], object], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def run_demo(target: str = "llvm", hidden: int = 256, reps: int = 20, show: int = 4,
             print_fn: Callable[[str], None] = print) -> dict:
    """Compile, run and compare; returns what was printed as data (for tests)."""
    import cortex
    from cortex.core.frontend.reference import evaluate
    from cortex.core.frontend.trace import trace
    from cortex.data import example_texts, example_vocab, examples
    from cortex.models import TreeLSTM

    vocab = example_vocab()
    model = TreeLSTM(vocab=len(vocab), embed=hidden, hidden=hidden, dtype="float32", seed=0)
    t0 = time.perf_counter()
    try:
        exe = cortex.compile(model, target=target)
    except Exception as exc:  # noqa: BLE001 - the demo explains and falls back
        print_fn(f"target {target!r} unavailable here ({type(exc).__name__}: {exc}); using 'numpy'")
        target = "numpy"
        t0 = time.perf_counter()
        exe = cortex.compile(model, target=target)
    compile_s = time.perf_counter() - t0
    print_fn(f"TreeLSTM hidden={hidden} float32 compiled for {target!r} in {compile_s:.2f} s "
             f"(schedule {exe.schedule.to_json()})")
    graph = trace(model)
    sentences, texts = examples(), example_texts()
    rows = []
    for text, tree in zip(texts, sentences):
        out = exe(tree)
        batch = out.batch
        ref = evaluate(graph, model.params, batch)
        root = int(batch.roots[0])
        got, want = out.root("h")[0], ref["h"][root]
        ms = _best_ms(lambda: exe(tree), reps)
        ref_ms = _best_ms(lambda: evaluate(graph, model.params, batch), max(1, reps // 4))
        err = float(np.abs(got - want).max())
        rows.append({"text": text, "nodes": batch.num_nodes, "ms": ms, "reference_ms": ref_ms,
                     "max_abs_diff": err, "root": got[:show].tolist()})
        words = text if len(text) <= 48 else text[:45] + "..."
        print_fn(f"{words:<48} nodes={batch.num_nodes:>3}  h[:{show}]={np.array2string(got[:show], precision=4)}"
                 f"  {target} {ms:7.3f} ms  numpy-ref {ref_ms:7.3f} ms  max|diff| {err:.1e}")
    total = sum(r["ms"] for r in rows)
    total_ref = sum(r["reference_ms"] for r in rows)
    print_fn(f"total: {target} {total:.2f} ms, NumPy reference {total_ref:.2f} ms "
             f"({total_ref / total:.0f}x)")
    return {"target": target, "compile_s": compile_s, "rows": rows}
