"""Cost-model-guided search against random search: best-so-far against measured trials.

For each model and seed, two tuning sessions with the same trial budget run back to back,
their order alternating with the seed, both from scratch (the model-guided one does not start
from the default schedule; ``--arms`` adds ``model+default``, the production setting):

* ``random``  uniform samples of the schedule space;
* ``model``   the cost model (``cortex.tuning.cost_model``) picks which candidates to measure.

Every candidate is timed against the default schedule in interleaved rounds of its own
session, so a curve is *the best candidate's speedup over the default* (default time /
candidate time) after each trial, comparable across sessions on a machine whose speed drifts.
Per model and seed the script reports the best random-search result at the full budget and
the first trial at which the model-guided search reached it (and reached 95% of it).

    python benchmarks/tune_search.py --out tune_search.json --plot tune_search.png
    python benchmarks/tune_search.py --models "TreeGRU:hidden=64" --trials 16 --seeds 1  # quick

JSON (``--out``, default stdout): the environment (CPU, load average before and after),
the settings, and per run the curve (one point per measured trial), the trials (schedule,
ratio, compile seconds, error, and ``measured``: False for a candidate whose program was
measured before, which costs no trial) and the verified speedup of the session's winner; then a summary per model. A matplotlib plot
(``--plot``) when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import pyplot, save_figure  # noqa: E402
from cortex.bench.environment import host, versions  # noqa: E402

ARMS = {"random": ("random", False), "model": ("model", False), "model+default": ("model", True)}


def run_arm(model: Any, arm: str, *, trials: int, seed: int, target: str, options: dict,
            compile_timeout: float | None) -> dict:
    import cortex
    from cortex.tuning.tuner import Budget

    method, from_default = ARMS[arm]
    t0 = time.perf_counter()
    r = cortex.tune(model, target, budget=Budget(trials=trials, seconds=1e9), method=method,
                    seed=seed, from_default=from_default, resume=False, store=False,
                    progress=False, compile_timeout=compile_timeout, **options)
    return {"arm": arm, "seed": seed, "curve": r.curve, "verified_speedup": r.speedup,
            "final_check": r.final_check,
            "winner": r.schedule.to_dict(), "elapsed_s": time.perf_counter() - t0,
            "workload": r.key.workload, "failures": r.failures,
            "trials": [{"schedule": t.schedule, "ok": t.ok, "ratio": t.ratio, "measured": t.measured,
                        "compile_s": round(t.compile_s, 3), "error": t.error} for t in r.trials]}


def first_reach(curve: list[float], level: float) -> int | None:
    """1-based trial at which ``curve`` first reaches ``level`` (None: never)."""
    return next((i + 1 for i, v in enumerate(curve) if v >= level), None)


def summarize(runs: list[dict], trials: int) -> dict:
    seeds = sorted({r["seed"] for r in runs})
    out = []
    for s in seeds:
        by = {r["arm"]: r for r in runs if r["seed"] == s}
        if "random" not in by or "model" not in by:
            continue
        target = max(by["random"]["curve"])
        m = by["model"]["curve"]
        out.append({"seed": s, "random_best": target, "model_best": max(m),
                    "model_best_at_half": max(m[:trials // 2]),
                    "model_reaches_at": first_reach(m, target),
                    "model_reaches_95pct_at": first_reach(m, 0.95 * target),
                    "random_reaches_own_best_at": first_reach(by["random"]["curve"], target)})
    half = [o for o in out if o["model_reaches_at"] is not None and o["model_reaches_at"] <= trials // 2]
    return {"per_seed": out, "seeds_reached_within_half": len(half), "seeds": len(out)}


def plot(result: dict, path: str) -> str:
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed: no plot"
    models = list(result["models"])
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    colors = {"random": "tab:gray", "model": "tab:blue", "model+default": "tab:green"}
    for ax, name in zip(axes[0], models):
        for run in result["models"][name]["runs"]:
            x = range(1, len(run["curve"]) + 1)
            ax.plot(x, run["curve"], color=colors[run["arm"]], alpha=0.8,
                    label=f"{run['arm']} (seed {run['seed']})")
        ax.axvline(result["trials"] / 2, color="k", lw=0.5, ls=":")
        ax.set_title(name)
        ax.set_xlabel("measured trials")
        ax.set_ylabel("best speedup over the default schedule")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="TreeLSTM:hidden=64,embed=64,vocab=5000;"
                   "TreeGRU:hidden=64,embed=64,vocab=5000",
                   help="zoo models with settings, separated by ';'")
    p.add_argument("--target", default="llvm")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a target option for every session (e.g. threads=1)")
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--compile-timeout", type=float, default=None,
                   help="seconds a candidate's compile may take (default: the tuner's)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--arms", default="random,model", help=f"from {list(ARMS)}")
    p.add_argument("--out", help="JSON file (default: stdout)")
    p.add_argument("--plot", help="PNG file for the curves (needs matplotlib)")
    args = p.parse_args(argv)

    from cortex.tuning.cli import load_model, parse_value

    options = {k: parse_value(v) for k, _, v in (o.partition("=") for o in args.option)}
    arms = args.arms.split(",")
    result: dict[str, Any] = {"benchmark": "tune_search",
                              "environment": {"host": host(), "versions": versions()},
                              "load_before": os.getloadavg(), "trials": args.trials,
                              "seeds": args.seeds, "arms": arms, "target": args.target,
                              "compile_timeout": args.compile_timeout,
                              "options": options, "models": {}}
    for spec in filter(None, args.models.split(";")):
        model = load_model(spec)
        runs = []
        for seed in range(args.seeds):
            order = arms if seed % 2 == 0 else arms[::-1]  # alternate who runs first
            for arm in order:
                print(f"{spec}: seed {seed}, {arm} ...", file=sys.stderr, flush=True)
                run = run_arm(model, arm, trials=args.trials, seed=seed, target=args.target,
                              options=options, compile_timeout=args.compile_timeout)
                run["load_after"] = os.getloadavg()
                print(f"  best {max(run['curve'] or [0]):.2f}x over the default in "
                      f"{len(run['curve'])} trials, {run['elapsed_s']:.0f} s; verified winner "
                      f"{run['verified_speedup']:.2f}x", file=sys.stderr, flush=True)
                runs.append(run)
        result["models"][spec] = {"runs": runs, "summary": summarize(runs, args.trials)}
    result["load_after"] = os.getloadavg()
    if args.plot:
        result["plot"] = plot(result, args.plot)
    text = json.dumps(result, indent=1, default=repr)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    for spec, m in result["models"].items():
        s = m["summary"]
        print(f"{spec}: the model-guided search reached random search's best within half the "
              f"trials in {s['seeds_reached_within_half']} of {s['seeds']} seeds", file=sys.stderr)
        for o in s["per_seed"]:
            print(f"  seed {o['seed']}: random best {o['random_best']:.2f}x; model best "
                  f"{o['model_best']:.2f}x ({o['model_best_at_half']:.2f}x at half); reaches "
                  f"random's best at trial {o['model_reaches_at']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
