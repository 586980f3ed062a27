"""Soak test of a target's runtime: what many calls, compiles, live executables and idle time
cost the process (resident memory, open file descriptors, threads, CPU), as JSON.

Pipeline position: outside the pipeline, like ``bench_treelstm.py``; it drives
``cortex.compile(model, target=T)(structures)`` the way a long-running server would and reads
the process's own counters from ``/proc/self`` (Linux). Four phases, each reported on its own:

* ``calls``: one TreeLSTM executable called on many batches of varying size; resident memory,
  malloc'd bytes, descriptors and threads after a warm-up, half-way and at the end (growth per
  1000 calls over the run and over its second half).
* ``compiles``: compile a small TreeFC, call it once, drop it; repeated. Memory is measured
  after ``gc.collect()`` and glibc's ``malloc_trim(0)``: growth per compile over the whole run
  and over its second half (one-time costs, such as a malloc arena a thread opened, fall in
  the first); descriptors and threads must come back to where they started.
* ``threads``: several executables alive at once (threads per live executable), then dropped
  (threads left over).
* ``idle``: several executables alive and idle after one call each; process CPU time over a
  window that starts ``--settle`` seconds after the last call, as a share of one core, per
  idle executable (the same window with no executable alive is the baseline reported beside).

Usage::

    python benchmarks/soak.py --out soak.json            # a few minutes
    python benchmarks/soak.py --quick                    # seconds (tests/benchmarks runs it)
    python benchmarks/soak.py --target numpy --quick     # any runnable target

The exit status is 0 whenever the phases ran; the figures are for a person (or a test with
generous bounds) to judge.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environment, make_trees, write_json  # noqa: E402

SCHEMA = "cortex-soak/1"


# ------------------------------------------------------------------ process counters

def rss_kb() -> int:
    """Resident set size of this process in kB (``VmRSS``)."""
    return _status_field("VmRSS")


def threads() -> int:
    """Threads of this process (``Threads``)."""
    return _status_field("Threads")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _status_field(name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {name}")


def trim() -> None:
    """Collect garbage and hand freed heap pages back to the system (glibc ``malloc_trim``),
    so resident memory counts what is still allocated."""
    gc.collect()
    path = ctypes.util.find_library("c")
    if path:
        libc = ctypes.CDLL(path)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def malloc_kb() -> int | None:
    """Bytes malloc has handed out and not had back, in kB (glibc's ``mallinfo2``; None
    elsewhere): unlike RSS, blind to fragmentation and to pages the allocator keeps."""
    path = ctypes.util.find_library("c")
    fn = getattr(ctypes.CDLL(path), "mallinfo2", None) if path else None
    if fn is None:
        return None
    fn.restype = _MallInfo2
    m = fn()
    return (m.uordblks + m.hblkhd) // 1024


def snapshot() -> dict[str, int | None]:
    return {"rss_kb": rss_kb(), "malloc_kb": malloc_kb(), "fds": open_fds(), "threads": threads()}


def _per(after: dict, before: dict, key: str, count: int) -> float | None:
    if after.get(key) is None or before.get(key) is None:
        return None
    return (after[key] - before[key]) / count


def cpu_share(seconds: float) -> float:
    """This process's CPU time (every thread) over the next ``seconds``, in cores."""
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    return (time.process_time() - c0) / (time.perf_counter() - t0)


# ------------------------------------------------------------------ phases

def _small_model(seed: int) -> Any:
    from cortex.models import TreeFC

    return TreeFC(hidden=16, embed=16, vocab=50, seed=seed)


def phase_calls(target: str, opts: dict, calls: int, hidden: int) -> dict[str, Any]:
    import cortex
    from cortex.models import TreeLSTM

    vocab = 1000
    exe = cortex.compile(TreeLSTM(hidden=hidden, embed=hidden, vocab=vocab, seed=0), target=target, **opts)
    batches = [make_trees(seed, 1 + seed % 10, 2, 40, vocab) for seed in range(16)]
    # whole cycles of the batches: both snapshots follow the same batch, so the executable's
    # pooled output buffers (sized by the last call) are the same at both
    calls = -(-calls // len(batches)) * len(batches)
    warm = -(-max(1, calls // 10) // len(batches)) * len(batches)
    for i in range(warm):
        exe(batches[i % len(batches)])
    trim()
    before = snapshot()
    half = calls // 2 // len(batches) * len(batches)
    t0 = time.perf_counter()
    for i in range(half):
        exe(batches[i % len(batches)])
    trim()
    middle = snapshot()
    for i in range(half, calls):
        exe(batches[i % len(batches)])
    elapsed = time.perf_counter() - t0
    trim()
    after = snapshot()
    del exe

    def per_1000(a: dict, b: dict, key: str, n: int) -> float | None:
        v = _per(a, b, key, max(1, n))
        return None if v is None else v * 1000

    return {"calls": calls, "hidden": hidden, "calls_per_s": calls / elapsed, "before": before,
            "middle": middle, "after": after,
            "rss_growth_kb_per_1000_calls": per_1000(after, before, "rss_kb", calls),
            "rss_growth_kb_per_1000_calls_second_half": per_1000(after, middle, "rss_kb", calls - half),
            "malloc_growth_kb_per_1000_calls": per_1000(after, before, "malloc_kb", calls),
            "malloc_growth_kb_per_1000_calls_second_half": per_1000(after, middle, "malloc_kb", calls - half),
            "fds_delta": after["fds"] - before["fds"], "threads_delta": after["threads"] - before["threads"]}


def phase_compiles(target: str, opts: dict, compiles: int) -> dict[str, Any]:
    import cortex

    tree = make_trees(0, 1, 3, 6, 50)

    def once(seed: int) -> None:
        exe = cortex.compile(_small_model(seed), target=target, **opts)
        exe(tree)
        del exe

    warm = max(2, compiles // 10)
    for i in range(warm):  # process-wide one-time costs (LLVM's target machines, caches)
        once(i)
    trim()
    before = snapshot()
    half = compiles // 2
    t0 = time.perf_counter()
    for i in range(half):
        once(warm + i)
    trim()
    middle = snapshot()
    for i in range(half, compiles):
        once(warm + i)
    elapsed = time.perf_counter() - t0
    trim()
    after = snapshot()
    rest = max(1, compiles - half)
    return {"compiles": compiles, "seconds_per_compile": elapsed / compiles, "before": before,
            "middle": middle, "after": after,
            "rss_growth_kb_per_compile": _per(after, before, "rss_kb", compiles),
            "rss_growth_kb_per_compile_second_half": _per(after, middle, "rss_kb", rest),
            "malloc_growth_kb_per_compile": _per(after, before, "malloc_kb", compiles),
            "fds_delta": after["fds"] - before["fds"], "threads_delta": after["threads"] - before["threads"]}


def _live(target: str, opts: dict, count: int) -> list[Any]:
    import cortex

    tree = make_trees(1, 1, 3, 6, 50)
    exes = [cortex.compile(_small_model(i), target=target, **opts) for i in range(count)]
    for exe in exes:
        exe(tree)
    return exes


def phase_threads(target: str, opts: dict, count: int) -> dict[str, Any]:
    trim()
    start = threads()
    exes = _live(target, opts, count)
    alive = threads()
    del exes
    trim()
    end = threads()
    return {"executables": count, "threads_before": start, "threads_alive": alive, "threads_after": end,
            "threads_per_executable": (alive - start) / count, "threads_left_over": end - start}


def phase_idle(target: str, opts: dict, counts: list[int], window: float, settle: float) -> dict[str, Any]:
    trim()
    time.sleep(settle)
    base = cpu_share(window)
    rows = []
    for n in counts:
        exes = _live(target, opts, n)
        time.sleep(settle)
        share = cpu_share(window)
        rows.append({"executables": n, "cpu_cores": share,
                     "cpu_percent_per_idle_executable": max(0.0, share - base) * 100 / n})
        del exes
        trim()
    return {"window_s": window, "settle_s": settle, "baseline_cpu_cores": base, "runs": rows,
            "max_cpu_percent_per_idle_executable": max(r["cpu_percent_per_idle_executable"] for r in rows)}


# ------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="llvm")
    p.add_argument("--threads", type=int, default=0, help="the llvm target's threads option (0: its default)")
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--hidden", type=int, default=64, help="TreeLSTM hidden size of the calls phase")
    p.add_argument("--compiles", type=int, default=200)
    p.add_argument("--live", type=int, default=20, help="executables alive at once (threads phase)")
    p.add_argument("--idle", default="1,20,40", help="idle executables alive, per idle run")
    p.add_argument("--window", type=float, default=3.0, help="seconds of CPU time measured per idle run")
    p.add_argument("--settle", type=float, default=0.5, help="seconds idle before the window opens")
    p.add_argument("--quick", action="store_true", help="tiny counts (a smoke test, seconds)")
    p.add_argument("--out", default="", help="write the JSON here (default: stdout)")
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.hidden, args.compiles, args.live = 60, 16, 6, 3
        args.idle, args.window, args.settle = "1,3", 0.5, 0.3
    if not Path("/proc/self/status").exists():
        p.error("the soak test reads /proc/self (Linux)")
    opts = {"threads": args.threads} if args.threads and args.target in ("llvm", "cpu") else {}
    idle_counts = [int(x) for x in args.idle.split(",") if x]
    doc: dict[str, Any] = {
        "schema": SCHEMA, "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv, "quick": args.quick, "target": args.target, "options": opts,
        "environment": environment(), "start": snapshot(), "phases": {},
    }
    phases = doc["phases"]
    t0 = time.perf_counter()
    print("soak: calls", file=sys.stderr)
    phases["calls"] = phase_calls(args.target, opts, args.calls, args.hidden)
    print("soak: compiles", file=sys.stderr)
    phases["compiles"] = phase_compiles(args.target, opts, args.compiles)
    print("soak: threads", file=sys.stderr)
    phases["threads"] = phase_threads(args.target, opts, args.live)
    print("soak: idle", file=sys.stderr)
    phases["idle"] = phase_idle(args.target, opts, idle_counts, args.window, args.settle)
    doc["end"] = snapshot()
    doc["seconds"] = time.perf_counter() - t0
    write_json(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
