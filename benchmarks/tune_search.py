"""Cost-model-guided search against random search: best speedup over the default schedule
against measured trials.

For each model and seed, one tuning session per arm with the same trial budget, run back to
back, their order rotated with the seed, none resuming another's trials:

* ``random``         uniform samples of the schedule space (the baseline);
* ``model``          the cost model (``cortex.tuning.cost_model``) picks which candidates to
                     measure, from scratch (its first batch is random);
* ``model+default``  the production setting (``cortex.tune``'s default): the cost model with
                     the default schedule counted as a measured point, its first batch
                     mutants of the default.

Every candidate is timed against the default schedule in interleaved rounds of its own
session (the default runs in every round), so a curve is *the best candidate's speedup over
the default* (default time / candidate time, the median over rounds) after each measured
trial, comparable across sessions on a machine whose speed drifts. A curve below 1 means the
arm has not yet found a point faster than the default; a user then keeps the default.

The judgement, per model and seed: random search's best at the full budget is the level to
reach, and for each model-guided arm the first trial at which it reached that level (and 95%
of it). A seed is *informative* only when random search found a point faster than the
default by the tuner's ``MIN_GAIN``: otherwise the level to reach is a point worse than the
default, and which arm finds a bad point first says nothing about tuning. The summary counts
the informative seeds in which each model-guided arm reached random's best within half the
trials, and gives each arm's final check (its best three re-timed in more rounds), so a best
that was luck of the search's rounds shows as such.

    python benchmarks/tune_search.py --out tune_search.json --plot tune_search.png
    python benchmarks/tune_search.py --models "TreeGRU:hidden=64" --trials 16 --seeds 1  # quick
    python benchmarks/tune_search.py --models "TreeLSTM:hidden=256" --arms random --seeds 1 \\
        --trials 16 --batch-size 100                # a first look: does the space beat the default?

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
MODEL_ARMS = tuple(a for a, (method, _) in ARMS.items() if method == "model")


def run_arm(model: Any, arm: str, *, trials: int, seed: int, target: str, options: dict,
            compile_timeout: float | None, workload: Any = None,
            hold: tuple[str, ...] | None = None) -> dict:
    import cortex
    from cortex.tuning.tuner import HOLD, Budget

    method, from_default = ARMS[arm]
    t0, load_before = time.perf_counter(), os.getloadavg()
    r = cortex.tune(model, target, workload=workload, budget=Budget(trials=trials, seconds=1e9),
                    method=method, seed=seed, from_default=from_default, resume=False, store=False,
                    progress=False, compile_timeout=compile_timeout,
                    hold=HOLD if hold is None else hold, **options)
    return {"arm": arm, "seed": seed, "curve": r.curve, "verified_speedup": r.speedup,
            "final_check": r.final_check, "load_before": load_before,
            "winner": r.schedule.to_dict(), "elapsed_s": time.perf_counter() - t0,
            "workload": r.key.workload, "failures": r.failures,
            "trials": [{"schedule": t.schedule, "ok": t.ok, "ratio": t.ratio, "measured": t.measured,
                        "compile_s": round(t.compile_s, 3), "error": t.error} for t in r.trials]}


def first_reach(curve: list[float], level: float) -> int | None:
    """1-based trial at which ``curve`` first reaches ``level`` (None: never)."""
    return next((i + 1 for i, v in enumerate(curve) if v >= level), None)


def best_of(curve: list[float]) -> float:
    """The best speedup over the default a curve reached (0: no valid candidate)."""
    return max(curve, default=0.0)


def summarize(runs: list[dict], trials: int) -> dict:
    """Per seed, each arm's best and final check, and when each model-guided arm reached random
    search's best; over the seeds, how often within half the trials (informative seeds only:
    see the module docstring)."""
    from cortex.tuning.tuner import MIN_GAIN

    out = []
    for s in sorted({r["seed"] for r in runs}):
        by = {r["arm"]: r for r in runs if r["seed"] == s}
        arms = {a: {"best": best_of(r["curve"]), "best_at_half": best_of(r["curve"][:trials // 2]),
                    "verified_speedup": r["verified_speedup"], "trials": len(r["curve"])}
                for a, r in by.items()}
        row: dict[str, Any] = {"seed": s, "arms": arms}
        if "random" in by:
            level = arms["random"]["best"]
            row["random_best"] = level
            row["informative"] = level >= 1.0 + MIN_GAIN
            row["random_reaches_own_best_at"] = first_reach(by["random"]["curve"], level)
            for a in MODEL_ARMS:
                if a in by:
                    arms[a]["reaches_random_best_at"] = first_reach(by[a]["curve"], level)
                    arms[a]["reaches_95pct_at"] = first_reach(by[a]["curve"], 0.95 * level)
        out.append(row)
    informative = [o for o in out if o.get("informative")]
    reached = {a: sum(1 for o in informative
                      if (o["arms"].get(a) or {}).get("reaches_random_best_at") is not None
                      and o["arms"][a]["reaches_random_best_at"] <= trials // 2)
               for a in MODEL_ARMS if any(a in o["arms"] for o in out)}
    return {"per_seed": out, "seeds": len(out), "informative_seeds": len(informative),
            "reached_within_half": reached}


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
        ax.axhline(1.0, color="k", lw=0.8, label="the default schedule")
        ax.set_title(name, fontsize=8)
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
    p.add_argument("--arms", default=",".join(ARMS), help=f"from {list(ARMS)}")
    p.add_argument("--batch-size", type=int, default=10, help="structures per workload batch (10)")
    p.add_argument("--nodes", type=int, default=60, help="mean nodes per structure (60)")
    p.add_argument("--shape", default="parse", help="structure shape (parse; see WorkloadSpec)")
    p.add_argument("--hold", default=None, metavar="KNOB,..",
                   help="knobs kept at their default rule (default: the tuner's; '' for none)")
    p.add_argument("--out", help="JSON file (default: stdout)")
    p.add_argument("--plot", help="PNG file for the curves (needs matplotlib)")
    args = p.parse_args(argv)

    from cortex.tuning.cli import load_model, parse_value
    from cortex.tuning.workload import WorkloadSpec

    options = {k: parse_value(v) for k, _, v in (o.partition("=") for o in args.option)}
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        p.error(f"unknown arm {unknown[0]!r}: choose from {list(ARMS)}")
    hold = None if args.hold is None else tuple(k.strip() for k in args.hold.split(",") if k.strip())
    workload = WorkloadSpec(batch_size=args.batch_size, nodes=args.nodes, shape=args.shape)
    result: dict[str, Any] = {"benchmark": "tune_search",
                              "environment": {"host": host(), "versions": versions()},
                              "load_before": os.getloadavg(), "trials": args.trials,
                              "seeds": args.seeds, "arms": arms, "target": args.target,
                              "compile_timeout": args.compile_timeout,
                              "workload": vars(workload), "hold": hold,
                              "options": options, "models": {}}
    for spec in filter(None, args.models.split(";")):
        model = load_model(spec)
        runs = []
        for seed in range(args.seeds):
            order = arms[seed % len(arms):] + arms[:seed % len(arms)]  # rotate who runs first
            for arm in order:
                print(f"{spec}: seed {seed}, {arm} ...", file=sys.stderr, flush=True)
                run = run_arm(model, arm, trials=args.trials, seed=seed, target=args.target,
                              options=options, compile_timeout=args.compile_timeout,
                              workload=workload, hold=hold)
                run["load_after"] = os.getloadavg()
                print(f"  best {best_of(run['curve']):.2f}x over the default in "
                      f"{len(run['curve'])} trials, {run['elapsed_s']:.0f} s; verified winner "
                      f"{run['verified_speedup']:.2f}x", file=sys.stderr, flush=True)
                runs.append(run)
                result["models"][spec] = {"runs": runs, "summary": summarize(runs, args.trials)}
                if args.out:  # after every session: a long run stopped early keeps what it measured
                    Path(args.out).write_text(json.dumps(result, indent=1, default=repr) + "\n")
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
        for arm, n in s["reached_within_half"].items():
            print(f"{spec}: {arm} reached random search's best within half the trials in {n} of "
                  f"{s['informative_seeds']} informative seeds ({s['seeds']} seeds)", file=sys.stderr)
        for o in s["per_seed"]:
            arms_text = "; ".join(
                f"{a} best {x['best']:.2f}x ({x['best_at_half']:.2f}x at half, final check "
                f"{x['verified_speedup']:.2f}x" + (f", reaches random's best at trial "
                                                  f"{x['reaches_random_best_at']}" if a in MODEL_ARMS else "")
                + ")" for a, x in o["arms"].items())
            print(f"  seed {o['seed']}{'' if o.get('informative') else ' (not informative)'}: "
                  f"{arms_text}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
