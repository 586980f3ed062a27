"""Every zoo model tuned for each CPU target, then its default schedule, its tuned schedule and
the best peer timed side by side in one benchmark run.

Pipeline position: outside the pipeline; a front end of :func:`cortex.tune` and of
``cortex bench``'s runner (:mod:`cortex.bench.run`). Two phases, one process:

1. **Tuning.** For each model and target, ``cortex.tune`` on a workload of the benchmark's own
   kind of inputs (``--tune-batches`` batches of ``--tune-batch`` structures of mean size
   ``--tokens``, drawn with other seeds than the timed points), with the default budget
   (``Budget()``: 64 trials, 150 s; ``--opencl-trials`` caps the trials of the OpenCL target,
   whose compiles take seconds each). The records go to a fresh database (``CORTEX_TUNE_DB``,
   in ``--work``: a temporary folder by default), so nothing a machine tuned before takes part.
2. **Benchmark.** ``cortex bench``'s runner with, per target, two contenders, ``T-default``
   (``schedule="default"``) and ``T-tuned`` (``schedule="auto"`` with ``workload=`` the tuned
   class: the compile reads the record as a user's compile would; its ``schedule_source`` is in
   the JSON), next to every installed peer. Each contender runs in its own worker process, the
   others stopped while one is timed, in interleaved rounds; every contender is checked against
   the float64 reference first. One executable per contender serves every batch size (the
   schedule tuned at ``--tune-batch`` is the one timed at batch 1 too).

The summary has, per model, target and batch size: the default's, the tuned schedule's and
the best peer's median ms, ``tuned_speedup`` (default ms / tuned ms, same rounds),
``default_vs_best_peer`` and ``tuned_vs_best_peer`` (best peer ms / ours: above 1 Cortex is
faster), and ``needs_gain``: True when the default is below 2x the best peer's speed (such a
point should gain 1.3x from tuning); per model and target the search's evidence (trials
measured and valid, distinct programs, the best speedup the search saw, the verified one).

    nice python benchmarks/tune_zoo.py --out docs/tuning/tune_zoo.json --plot docs/tuning/tune_zoo.png
    python benchmarks/tune_zoo.py --models TreeLSTM --targets llvm --hidden 16 --tokens 6 \\
        --tune-trials 4 --rounds 2 --out /tmp/z.json                      # a quick look
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make `cortex` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import pyplot, save_figure  # noqa: E402
from cortex.bench.contenders import ContenderSpec  # noqa: E402
from cortex.bench.options import BenchOptions  # noqa: E402
from cortex.bench.run import Runner  # noqa: E402
from cortex.bench.summary import round_ratio_range  # noqa: E402
from cortex.bench.timing import Timing  # noqa: E402
from cortex.bench.workloads import MODELS, GroupKey, build_model, make_inputs  # noqa: E402

NEEDS_GAIN_BELOW = 2.0  # a default below this times the best peer's speed should gain ...
GAIN = 1.3  # ... this much from tuning


def tune_one(name: str, target: str, args: argparse.Namespace) -> dict[str, Any]:
    """Tune model ``name`` for ``target`` on the benchmark's kind of inputs; the evidence."""
    import cortex
    from cortex.tuning import Budget, Workload

    group = GroupKey(name, args.hidden, None, args.vocab, args.seed)
    model = build_model(group)
    width = model.params["U"].shape[1] if name == "DAGRNN" else 0
    batches = [make_inputs(name, args.tokens, args.tune_batch, vocab=args.vocab, width=width,
                           seed=args.seed + 1 + i).structures for i in range(args.tune_batches)]
    trials = args.opencl_trials if target == "opencl" else args.tune_trials
    budget = Budget(trials=trials or Budget().trials, seconds=args.tune_seconds or Budget().seconds)
    t0 = time.perf_counter()
    try:
        r = cortex.tune(model, target, workload=Workload.from_batches(model, batches),
                        budget=budget, resume=False, progress=False)
    except Exception as exc:  # noqa: BLE001 - a target that cannot tune is recorded, not fatal
        return {"model": name, "target": target, "status": "error",
                "reason": f"{type(exc).__name__}: {exc}", "elapsed_s": time.perf_counter() - t0}
    measured = [t for t in r.trials if t.measured]
    ratios = [t.ratio for t in measured if t.ok and t.ratio]
    return {"model": name, "target": target, "status": "ok", "workload": r.key.workload,
            "budget": {"trials": budget.trials, "seconds": budget.seconds},
            "elapsed_s": r.elapsed_s, "stopped_by": r.stopped_by,
            "trials_measured": len(measured), "trials_valid": len(ratios),
            "same_program_as_earlier": len(r.trials) - len(measured),
            "best_search_speedup": 1.0 / min(ratios) if ratios else None,
            "verified_speedup": r.speedup, "final_check": r.final_check,
            "schedule": r.schedule.to_dict(),
            "failures": r.failures, "curve": r.curve,
            "summary": r.summary()}


class TunedRunner(Runner):
    """``cortex bench``'s runner with a default and a tuned contender per target."""

    def __init__(self, opts: BenchOptions, log: Any, classes: dict[tuple[str, str], str]) -> None:
        super().__init__(opts, log)
        self.classes = classes  # (model, target) -> the tuned workload class

    def contenders(self, model: str) -> list[ContenderSpec]:
        o = self.opts
        out = []
        for t in o.targets:
            out.append(ContenderSpec("cortex", t, threads=o.threads, label=f"{t}-default",
                                     compile_options=(("schedule", "default"),)))
            cls = self.classes.get((model, t))
            if cls:
                out.append(ContenderSpec("cortex", t, threads=o.threads, label=f"{t}-tuned",
                                         compile_options=(("workload", cls),)))
        peers = super().contenders(model)
        return out + [p for p in peers if p.kind == "peer"]


def summarize(doc: dict[str, Any], tuning: list[dict[str, Any]], targets: list[str]) -> list[dict[str, Any]]:
    """Per model, target and batch: default vs tuned vs the best peer (see the docstring)."""
    evidence = {(t["model"], t["target"]): t for t in tuning}
    out = []
    for point in doc["summary"]:
        for target in targets:
            d = point["targets"].get(f"{target}-default")
            tu = point["targets"].get(f"{target}-tuned")
            peer = point.get("best_peer_ms")
            row: dict[str, Any] = {"model": point["model"], "target": target, "batch": point["batch"],
                                   "tokens": point["tokens"], "best_peer": point.get("best_peer"),
                                   "best_peer_ms": peer,
                                   "default_ms": d["median_ms"] if d else None,
                                   "tuned_ms": tu["median_ms"] if tu else None}
            if d and tu:
                row["tuned_speedup"] = d["median_ms"] / tu["median_ms"]
                row["tuned_speedup_rounds"] = round_ratio_range(d, tu)
            if d and peer:
                row["default_vs_best_peer"] = peer / d["median_ms"]
                row["needs_gain"] = row["default_vs_best_peer"] < NEEDS_GAIN_BELOW
            if tu and peer:
                row["tuned_vs_best_peer"] = peer / tu["median_ms"]
            if row.get("needs_gain"):
                row["gained"] = row.get("tuned_speedup", 0.0) >= GAIN
            ev = evidence.get((point["model"], target), {})
            row["search"] = {k: ev.get(k) for k in ("status", "reason", "workload", "trials_measured",
                                                    "trials_valid", "best_search_speedup",
                                                    "verified_speedup", "stopped_by", "elapsed_s")}
            out.append(row)
    return out


def plot(rows: list[dict[str, Any]], path: str) -> str:
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed: no plot"
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(len(batches), 1, figsize=(12, 3.6 * len(batches)), squeeze=False)
    for ax, b in zip(axes[:, 0], batches):
        here = [r for r in rows if r["batch"] == b]
        x = range(len(here))
        for off, key, color, label in ((-0.2, "default_vs_best_peer", "tab:gray", "default schedule"),
                                       (0.2, "tuned_vs_best_peer", "tab:blue", "tuned schedule")):
            ax.bar([i + off for i in x], [r.get(key) or 0.0 for r in here], 0.4, color=color, label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(NEEDS_GAIN_BELOW, color="k", lw=0.5, ls=":")
        ax.set_xticks(list(x), [f"{r['model']}\n{r['target']}" for r in here], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("speed vs the best peer\n(best peer ms / ours)")
        ax.set_title(f"batch {b}")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help="zoo models, comma-separated")
    p.add_argument("--targets", default="llvm,opencl")
    p.add_argument("--hidden", type=int, default=256, help="the sweep's hidden size (MV-RNN: a quarter)")
    p.add_argument("--tokens", type=int, default=30, help="mean size of an input (trees: leaves)")
    p.add_argument("--batches", default="1,10", help="batch sizes timed")
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tune-batch", type=int, default=10, help="structures per tuning batch")
    p.add_argument("--tune-batches", type=int, default=3, help="batches in the tuning workload")
    p.add_argument("--tune-trials", type=int, default=0, help="trial budget (0: the default)")
    p.add_argument("--opencl-trials", type=int, default=8, help="trial budget on opencl")
    p.add_argument("--tune-seconds", type=float, default=0, help="time budget (0: the default)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--peers", default=None, help="peers or families (default: every installed one)")
    p.add_argument("--out", required=True, help="JSON file")
    p.add_argument("--work", help="folder for the records database and the workers' logs "
                   "(default: a new temporary folder)")
    p.add_argument("--plot", help="PNG file (needs matplotlib)")
    args = p.parse_args(argv)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="tune-zoo-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "records.sqlite"
    db.unlink(missing_ok=True)
    os.environ["CORTEX_TUNE_DB"] = str(db)  # the bench workers inherit it
    from cortex.bench import environment
    from cortex.bench.run import write_json

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    started, load_before = time.perf_counter(), environment.loadavg()
    tuning = []
    for m in models:
        for t in targets:
            print(f"tuning {m} for {t} ...", file=sys.stderr, flush=True)
            tuning.append(tune_one(m, t, args))
            print(f"  {tuning[-1].get('summary') or tuning[-1].get('reason')}", file=sys.stderr, flush=True)
    tune_s = time.perf_counter() - started
    classes = {(r["model"], r["target"]): r["workload"] for r in tuning if r["status"] == "ok"}
    peers = None if args.peers is None else tuple(x for x in args.peers.split(",") if x)
    opts = BenchOptions(models=tuple(models), targets=tuple(targets), peers=peers,
                        batches=tuple(int(b) for b in args.batches.split(",")), hiddens=(args.hidden,),
                        tokens=(args.tokens,), vocab=args.vocab, seed=args.seed, rounds=args.rounds,
                        timing=Timing(), out=work / "bench")
    t1 = time.perf_counter()
    doc = TunedRunner(opts, lambda msg: print(msg, file=sys.stderr, flush=True), classes).run()
    rows = summarize(doc, tuning, targets)
    result = {"benchmark": "tune_zoo", "command": [sys.executable, *sys.argv],
              "settings": vars(args), "records_db": str(db),
              "load_before": load_before, "load_after": environment.loadavg(),
              "tune_wall_s": tune_s, "bench_wall_s": time.perf_counter() - t1,
              "wall_s": time.perf_counter() - started,
              "rule": f"a point whose default is below {NEEDS_GAIN_BELOW}x the best peer's speed "
                      f"needs_gain: it should gain {GAIN}x from tuning",
              "summary": rows, "tuning": tuning, "bench": doc}
    if args.plot:
        result["plot"] = plot(rows, args.plot)
    write_json(result, out)
    for r in rows:
        s = r["search"]
        print(f"{r['model']:17s} {r['target']:7s} b{r['batch']:<3d} default {r['default_ms'] or 0:8.3f} ms "
              f"tuned {r['tuned_ms'] or 0:8.3f} ms ({r.get('tuned_speedup') or 0:.2f}x) best peer "
              f"{r['best_peer'] or '-'} {r['best_peer_ms'] or 0:8.3f} ms; needs gain "
              f"{r.get('needs_gain')}; search {s['trials_measured']} trials, best "
              f"{s['best_search_speedup'] or 0:.2f}x", file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
