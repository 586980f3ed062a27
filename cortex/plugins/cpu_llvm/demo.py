"""``cortex demo``: the zoo's TreeLSTM on the bundled example sentences, next to the reference.

Pipeline position: outside the pipeline, a user-facing tour of it. It compiles
``cortex.models.TreeLSTM`` (random weights) for a target — ``llvm`` by default — runs it on
``cortex.data.examples()`` one sentence at a time, and prints, per sentence, the first root
outputs, the latency of the compiled call and of the NumPy reference evaluator
(``cortex.core.frontend.reference.evaluate``), and their largest difference.

A target that does not exist, is not enabled or cannot run here is an error (:class:`DemoError`,
with the reason and the fix), raised before anything is compiled: the demo never substitutes
another target. Timing is bounded: each call is repeated up to ``reps`` times but for at most
about ``budget_s`` seconds, so a slow target (``numpy``, the interpreter) still finishes quickly.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from cortex.core.errors import CortexError


class DemoError(CortexError):
    """The demo cannot run as asked (unknown target, not enabled or not runnable here)."""


def _best_ms(fn: Callable[[], object], reps: int, budget_s: float) -> float:
    """The fastest of up to ``reps`` calls, stopping early once ``budget_s`` is spent."""
    best = float("inf")
    start = time.perf_counter()
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        best = min(best, t1 - t0)
        if t1 - start > budget_s:
            break
    return best * 1e3


def check_target(target: str) -> str:
    """The canonical name of ``target`` if it can compile *and run* here, else :class:`DemoError`."""
    from cortex.core.api import resolve_target
    from cortex.core.errors import TargetNotRunnableError

    try:
        resolved, _ = resolve_target(target)
    except CortexError as exc:
        raise DemoError(str(exc)) from None
    runnable = resolved.runnable()
    if not runnable:
        reason = TargetNotRunnableError(resolved.name, runnable.reason, runnable.fix)
        raise DemoError(f"{reason}. `cortex info` shows what every target needs; "
                        f"`cortex demo --target numpy` runs anywhere.")
    return resolved.name


def _speed(target: str, total_ms: float, reference_ms: float) -> str:
    ratio = reference_ms / total_ms
    if ratio >= 1:
        return f"{target} is {ratio:.3g}x faster than the NumPy reference"
    return f"{target} is {1 / ratio:.3g}x slower than the NumPy reference"


def run_demo(target: str = "llvm", hidden: int = 256, reps: int = 20, show: int = 4,
             budget_s: float = 0.25, verbose: bool = False,
             print_fn: Callable[[str], None] = print) -> dict:
    """Compile, run and compare; returns what was printed as data (for tests).

    Raises :class:`DemoError` before compiling when ``target`` cannot run here."""
    import cortex
    from cortex.core.frontend.reference import evaluate
    from cortex.core.frontend.trace import trace
    from cortex.data import example_texts, example_vocab, examples
    from cortex.models import TreeLSTM

    target = check_target(target)
    vocab = example_vocab()
    sentences, texts = examples(), example_texts()
    model = TreeLSTM(vocab=len(vocab), embed=hidden, hidden=hidden, dtype="float32", seed=0)
    print_fn(f"Cortex demo: the zoo's TreeLSTM (hidden {hidden}, float32, random weights) on "
             f"{len(sentences)} bundled sentences")
    t0 = time.perf_counter()
    exe = cortex.compile(model, target=target)
    compile_s = time.perf_counter() - t0
    print_fn(f"compiled for {target} in {compile_s:.2f} s; each call below is one sentence, "
             f"best of up to {reps} runs")
    if verbose:
        knobs = ", ".join(f"{k}={v}" for k, v in exe.schedule.to_dict().items())
        print_fn(f"schedule: {knobs}")
    graph = trace(model)
    width = 40
    print_fn("")
    print_fn(f"{'sentence':<{width}} {'nodes':>5}  {f'root h[:{show}]':<{9 * show}} "
             f"{target:>10} {'NumPy ref':>10}  max|diff|")
    rows = []
    for text, tree in zip(texts, sentences):
        out = exe(tree)
        batch = out.batch
        ref = evaluate(graph, model.params, batch)
        got, want = out.root("h")[0], ref["h"][int(batch.roots[0])]
        ms = _best_ms(lambda: exe(tree), reps, budget_s)
        ref_ms = _best_ms(lambda: evaluate(graph, model.params, batch), max(1, reps // 4), budget_s)
        err = float(np.abs(got - want).max())
        rows.append({"text": text, "nodes": batch.num_nodes, "ms": ms, "reference_ms": ref_ms,
                     "max_abs_diff": err, "root": got[:show].tolist()})
        words = text if len(text) <= width else text[:width - 3] + "..."
        values = " ".join(f"{v:+.4f}" for v in got[:show])
        print_fn(f"{words:<{width}} {batch.num_nodes:>5}  {values:<{9 * show}} "
                 f"{ms:7.3f} ms {ref_ms:7.3f} ms  {err:.1e}")
    total = sum(r["ms"] for r in rows)
    total_ref = sum(r["reference_ms"] for r in rows)
    worst = max(r["max_abs_diff"] for r in rows)
    print_fn("")
    print_fn(f"total: {target} {total:.2f} ms, NumPy reference {total_ref:.2f} ms: "
             f"{_speed(target, total, total_ref)}; largest difference {worst:.1e}")
    return {"target": target, "compile_s": compile_s, "rows": rows}
