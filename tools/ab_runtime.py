"""A/B of the ``llvm`` runtime and team code: this tree's against a git revision's, one process.

Pipeline position: outside the pipeline, a measurement tool (like ``tools/ab_level1_tables.py``).
The model is compiled once with this tree; the *before* side runs the same scheduled
LoopProgram through the revision's ``cortex/plugins/cpu_llvm`` package (loaded from ``git show``
under another name, with this tree's ``cortex.core``), so only the plugin's code generation and
runtime differ. The two executables are called alternately on the same prelinearized batch
(interleaving is what makes the ratio trustworthy on a VM whose speed drifts by up to 2x within
minutes; the order alternates and each side starts after ``--settle-ms``, since the side that
ran last leaves its workers spinning for a while and slowed the other by up to 10%). A third
side, ``control``, runs this tree's program again: its ratio to ``after`` is the run's noise.
Measured per batch size: back-to-back calls (the workers spin between them), and a
call after ``--idle-ms`` of idle time (the workers may have gone to sleep).

Usage::

    python tools/ab_runtime.py --before main --out ab.json          # TreeLSTM h256 b1, b10
    python tools/ab_runtime.py --before HEAD~3 --batches 1 --rounds 30
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cortex  # noqa: E402
from benchmarks.common import make_trees, write_json  # noqa: E402
from cortex.core.plugin.backend import Backend, HostRuntime  # noqa: E402
from cortex.models import TreeLSTM  # noqa: E402
from cortex.plugins.cpu_llvm.runtime import CompiledProgram  # noqa: E402

PLUGIN = "cortex/plugins/cpu_llvm"
BEFORE_PACKAGE = "cortex_llvm_before"


def load_plugin(rev: str, into: Path) -> Any:
    """The revision's ``cortex.plugins.cpu_llvm`` as package :data:`BEFORE_PACKAGE` (its own
    imports of the plugin rewritten to it); returns its ``runtime`` module."""
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{PLUGIN}"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    pkg = into / BEFORE_PACKAGE
    pkg.mkdir()
    for name in names:
        if name.endswith(".py"):
            text = subprocess.run(["git", "show", f"{rev}:{PLUGIN}/{name}"], cwd=ROOT, check=True,
                                  capture_output=True, text=True).stdout
            (pkg / name).write_text(text.replace("cortex.plugins.cpu_llvm", BEFORE_PACKAGE))
    sys.path.insert(0, str(into))
    spec = importlib.util.find_spec(f"{BEFORE_PACKAGE}.runtime")
    if spec is None:
        raise RuntimeError(f"{rev} has no {PLUGIN}/runtime.py")
    return importlib.import_module(f"{BEFORE_PACKAGE}.runtime")


class _Launch(HostRuntime):
    """Host arrays as device buffers; ``launch`` is the artifact's own checked launch."""

    def launch(self, artifact: Any, args: tuple[Any, ...], **launch_config: Any) -> None:
        nb = len(artifact.program.buffers)
        artifact.launch_checked(args[:nb], [int(v) for v in args[nb:]])


def before_executable(after: Any, runtime_mod: Any) -> Any:
    """``after`` with its artifact rebuilt by the revision's runtime (same LoopProgram)."""
    art = after.artifact
    old = runtime_mod.CompiledProgram(after.program, threads=art.threads, cpu=art.cpu)
    exe = copy.copy(after)
    exe.artifact = old
    b = after.backend
    exe.backend = Backend(b.capabilities, b.renderer, b.compiler, _Launch())
    exe._pool, exe._pool_key = {}, None  # noqa: SLF001 - its own output buffers
    return exe


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default="main", help="git revision of the 'before' side")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--batches", default="1,10")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--idle-ms", type=float, default=50.0, help="idle time before each 'after idle' call")
    p.add_argument("--settle-ms", type=float, default=20.0,
                   help="pause before each side's back-to-back calls, so the other side's idle workers "
                        "have stopped spinning (they spin about a millisecond, then yield, after a call)")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)

    model = TreeLSTM(hidden=args.hidden, embed=args.hidden, vocab=args.vocab, seed=0)
    after = cortex.compile(model, target="llvm")
    with tempfile.TemporaryDirectory() as tmp:
        before = before_executable(after, load_plugin(args.before, Path(tmp)))
        # an A/A control: this tree's program once more (the ratio of the two 'after' sides is
        # the noise of the run: a before/after ratio inside it says nothing)
        control = before_executable(after, sys.modules[CompiledProgram.__module__])
        sides = (("before", before), ("after", after), ("control", control))
        results = []
        for b in (int(x) for x in args.batches.split(",")):
            batch = after.linearize(make_trees(0, b, 20, 40, args.vocab))
            want = after.run(batch)
            diff = max(float(np.abs(before.run(batch).root(s) - want.root(s)).max()) for s in want.states)
            hot: dict[str, list[float]] = {n: [] for n, _ in sides}
            cold: dict[str, list[float]] = {n: [] for n, _ in sides}
            reps = max(1, int(40 / b))
            for r in range(args.rounds):
                order = sides if r % 2 == 0 else sides[::-1]  # neither side always goes first
                for name, exe in order:
                    time.sleep(args.settle_ms / 1e3)  # the other side's team stops spinning
                    for _ in range(3):
                        exe.run(batch)
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        exe.run(batch)
                    hot[name].append((time.perf_counter() - t0) / reps * 1e3)
                for name, exe in order:
                    time.sleep(args.idle_ms / 1e3)
                    t0 = time.perf_counter()
                    exe.run(batch)
                    cold[name].append((time.perf_counter() - t0) * 1e3)
            row: dict[str, Any] = {"batch": b, "max_abs_diff": diff}
            for label, samples in (("", hot), ("after_idle_", cold)):
                med = {n: statistics.median(v) for n, v in samples.items()}
                row[f"{label}before_ms"], row[f"{label}after_ms"] = med["before"], med["after"]
                row[f"{label}ratio"] = med["after"] / med["before"]
                row[f"{label}control_ratio"] = med["control"] / med["after"]
            results.append(row)
            print(f"b{b}: before {row['before_ms']:.3f} ms, after {row['after_ms']:.3f} ms, ratio "
                  f"{row['ratio']:.3f} (A/A {row['control_ratio']:.3f}); after {args.idle_ms:g} ms idle: "
                  f"{row['after_idle_before_ms']:.3f} vs {row['after_idle_after_ms']:.3f} ms "
                  f"({row['after_idle_ratio']:.3f}, A/A {row['after_idle_control_ratio']:.3f}); "
                  f"max |diff| {diff:.1e}", file=sys.stderr)
        before.artifact.close()
        control.artifact.close()
    doc = {"tool": "ab_runtime", "before": args.before, "hidden": args.hidden, "vocab": args.vocab,
           "threads": after.artifact.threads, "rounds": args.rounds, "idle_ms": args.idle_ms,
           "settle_ms": args.settle_ms,
           "results": results}
    write_json(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
