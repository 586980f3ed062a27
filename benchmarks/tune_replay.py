"""Cost-model search against random search, replayed on one pool of measured candidates.

Why a replay: live sessions (``benchmarks/tune_search.py``) run each arm at its own time, so
on a shared machine they compare loads as much as searches, and a best-so-far curve is the
maximum of a few noisy rounds per candidate. Here every candidate is measured once, all of
them in the same interleaved rounds, and the searches are then replayed against that pool:
a search's "measurement" of a candidate is a lookup of its pooled result. Every arm sees the
same numbers, so the curves compare the searches alone, over as many seeds as wanted.

1. **The pool** (``--pool-out``): for one model, target and workload (the tuner's
   ``WorkloadSpec``), the default schedule, ``--uniform`` uniform samples of the space (as
   random search draws them, the tuner's held knobs held) and ``--mutants`` mutants of the
   default (the production search's first proposals: ``ModelProposer._mutate``). Each is
   compiled and checked against the float64 reference in the tuner's worker process (a compile
   past the time limit, a failed compile or a wrong output is a failed candidate), then all
   are timed in ``--rounds`` interleaved rounds: each round takes the candidates in a fresh
   random order, in groups of ``GROUP`` (the tuner's batch), each group timed in two passes
   with the default first, then last (one sample of the default shared by every candidate of
   a round would shift all their ratios together); after the first round a candidate more
   than ``CUTOFF`` times slower stops, as in the tuner. A candidate's result is the median over
   rounds of its time / the default's in the same round (``ratio``, as ``Trial.ratio``); its
   ``speedup`` is the inverse. Candidates that lower to one program share one measurement.
   The pool also holds the default schedule compiled again (``part: "control"``, never
   offered to a search): its speedup, which should be 1, shows the measurement's bias.
   Every valid candidate stays compiled until the rounds are done: the worker holds the
   whole pool (an OpenCL TreeFC h256 takes about 20 MB a candidate at vocab 1000, 180 MB at
   vocab 20000, whose leaf tables it copies), so size the pool, or the model, to the memory.
2. **The replay** (``--pool FILE`` to skip measuring): per seed, each arm runs the production
   proposer (``cortex.tuning.search``: same batch size, same trial accounting as the tuner)
   with its candidate universe restricted to the pool: ``random`` draws from the uniform part;
   ``model`` (from scratch) scores the unmeasured uniform samples; ``model+default`` (the
   production setting) scores the unmeasured uniform samples and mutants of the default;
   ``mutants`` (no model) takes the default's mutants in a random order: what the production
   search's starting point finds alone, to read the cost model's share against.
3. **The report** (``--out``, ``--plot``): per arm the median and quartiles over seeds of the
   best speedup so far after each trial; random search's median best at the full budget; the
   first trial at which each other arm's median curve reaches it; the fraction of seeds in
   which each other arm reaches that seed's random best within half the budget.

    python benchmarks/tune_replay.py --model "TreeGRU:hidden=64,embed=64,vocab=5000" \\
        --pool-out pool.json --out replay.json --plot replay.png        # measure, then replay
    python benchmarks/tune_replay.py --pool pool.json --seeds 50 --trials 32 --out replay.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script from a checkout: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import environment, pyplot, save_figure, write_json  # noqa: E402
from benchmarks.tune_search import ARMS, first_reach  # noqa: E402
from cortex.tuning.search import ModelProposer, RandomProposer, schedule_key  # noqa: E402

# the live benchmark's arms, and "mutants": the default's mutants in a random order, no model
# (what the production search's starting point alone finds, to read the model's share against)
REPLAY_ARMS = (*ARMS, "mutants")
JUDGED = tuple(a for a in REPLAY_ARMS if a != "random")  # arms judged against random search
GROUP = 8  # candidates timed after each run of the default (the tuner's batch size)


# ----------------------------------------------------------------------------- the pool

def _capabilities_json(caps: Any) -> dict[str, Any]:
    return {f.name: getattr(caps, f.name) for f in fields(caps)}


def _capabilities(d: dict[str, Any]) -> Any:
    from cortex import Capabilities

    def tup(v: Any) -> Any:
        return tuple(tup(x) for x in v) if isinstance(v, list) else v

    return Capabilities(**{k: tup(v) for k, v in d.items()})


def candidates(space: Any, held: dict[str, Any], features: Sequence[float], uniform: int,
               mutants: int, seed: int) -> list[tuple[str, Any]]:
    """``(part, schedule)``: ``uniform`` samples as random search draws them and ``mutants``
    of the default as the production search's first batch draws them (none the default)."""
    rng = np.random.default_rng(seed)
    default = space.default()
    taken = {schedule_key(default)}
    out = [("uniform", s) for s in RandomProposer(space, rng, held)._fresh(uniform, taken)]
    proposer = ModelProposer(space, rng, features, held=held)
    parent = proposer._hold(default) or default
    near: list[tuple[str, Any]] = []
    for _ in range(50):
        for s in proposer._mutate(parent, mutants):
            if len(near) < mutants and (k := schedule_key(s)) not in taken:
                taken.add(k)
                near.append(("mutant", s))
        if len(near) >= mutants:
            break
    return out + near


def measure_pool(spec: str, target: str, options: dict[str, Any], workload: Any, hold: Sequence[str],
                 uniform: int, mutants: int, rounds: int, seed: int,
                 compile_timeout: float | None) -> dict[str, Any]:
    """Compile, check and time the pool (see the module docstring)."""
    from cortex.core.api import resolve_target
    from cortex.core.lowering.schedule import ScheduleSpace
    from cortex.core.pipeline import split_options
    from cortex.tuning.cli import load_model
    from cortex.tuning.measure import reference_states
    from cortex.tuning.worker import open_measurer
    from cortex.tuning.workload import make_workload

    t0, load_before = time.perf_counter(), os.getloadavg()
    model = load_model(spec)
    shared, own = split_options(options)
    resolved, own = resolve_target(target, own)
    wl = make_workload(model, workload)
    setup = {"model": model, "target": resolved.name, "target_options": own, "dtype": model.dtype,
             "batches": wl.batches, "reference": reference_states(model, wl.batches),
             "compile_options": shared}
    m = open_measurer(setup, True)
    try:
        info = m.info
        space = ScheduleSpace(info.capabilities, model.dtype)
        default = space.default()
        held = {k: getattr(default, k) for k in hold}
        features = tuple(wl.stats.features())
        pool = [{"part": part, "schedule": s.to_dict(), "ok": False, "ratio": None, "speedup": None,
                 "compile_s": 0.0, "error": "", "timed": False, "round_ratios": [], "round_seconds": []}
                for part, s in [("control", default)] + candidates(space, held, features, uniform, mutants, seed)]
        live = _compile_pool(m, pool, compile_timeout)
        default_seconds = _time_pool(m, pool, live, rounds, np.random.default_rng(seed + 1))
        return {"benchmark": "tune_replay_pool", "model": spec, "target": resolved.name,
                "options": options, "workload": vars(workload), "workload_class": wl.workload_class,
                "features": list(features), "dtype": model.dtype, "hold": list(hold), "held": held,
                "capabilities": _capabilities_json(info.capabilities),
                "default": {"schedule": default.to_dict(), "compile_s": info.compile_s,
                            "seconds": info.seconds, "round_seconds": default_seconds},
                "uniform": uniform, "mutants": mutants, "rounds": rounds, "seed": seed,
                "compile_timeout": compile_timeout or f"the tuner's: max(10 s, 4 x the default's "
                f"compile, {info.compile_s:.1f} s at the start)", "environment": environment(), "load_before": load_before,
                "load_after": os.getloadavg(), "elapsed_s": time.perf_counter() - t0,
                "candidates": pool}
    finally:
        m.close()


def _compile_pool(m: Any, pool: list[dict[str, Any]], compile_timeout: float | None) -> dict[int, int]:
    """Compile and check every pool member in the worker ``m``, as the tuner does (its compile
    limit: ``compile_timeout``, else max(10 s, 4x the default's compile as last measured));
    returns pool index -> worker slot of those to time. A member whose program another member has
    takes that one's result; one compiled on a worker lost to a later timeout is compiled again."""
    from cortex.tuning.tuner import SKIP_TIMING

    live: dict[int, tuple[int, int]] = {}  # pool index -> (worker generation, slot)
    by_program: dict[str, int] = {}

    def limit() -> float:
        return compile_timeout or max(10.0, 4 * m.info.compile_s)

    def compile_one(i: int, again: bool = False) -> None:
        e = pool[i]
        # compiled within the limit once: a second, slower compile must not cost the worker
        # (and all the pool compiled on it) again
        r = m.compile(e["schedule"], (2 if again else 1) * limit())
        e.update(program_key=e.get("program_key") or r.program_key, compile_s=round(r.compile_s, 3),
                 error=r.error, ok=r.ok)
        if r.ok and r.check_s > SKIP_TIMING * m.info.check_s:  # as the tuner: far slower, not timed
            m.drop([r.slot])
            e["ratio"] = r.check_s / m.info.check_s
        elif r.ok:
            live[i] = (m.generation, r.slot)
        print(f"  compiled {i + 1}/{len(pool)} ({e['part']}): {'ok' if r.ok else r.error[:80]} in "
              f"{r.compile_s:.1f} s", file=sys.stderr, flush=True)

    for i, e in enumerate(pool):
        key = m.program_key(e["schedule"], limit())
        if key is not None and key in by_program:
            e.update(program_key=key, same_program_as=by_program[key])
            continue
        e["program_key"] = key
        compile_one(i)
        if e["program_key"]:
            by_program[e["program_key"]] = i
    for _ in range(2):
        lost = [i for i, (g, _) in live.items() if g != m.generation]
        for i in lost:
            del live[i]
            compile_one(i, again=True)
    for i in [i for i, (g, _) in live.items() if g != m.generation]:
        del live[i]
        pool[i].update(ok=False, error="lost twice with a replaced worker")
    return {i: slot for i, (_, slot) in live.items()}


def _time_pool(m: Any, pool: list[dict[str, Any]], live: dict[int, int], rounds: int,
               rng: np.random.Generator) -> list[float]:
    """Time the ``live`` members in interleaved rounds: each round in a fresh random order, in
    groups of ``GROUP``, each group in two passes (``Measurer.time`` runs the default first in
    its first pass, last in its second), so a ratio's default ran moments before or after it;
    sets each member's ratio (the median over rounds) and speedup. Returns the default's
    seconds in each group."""
    from cortex.tuning.tuner import CUTOFF

    index = {slot: i for i, slot in live.items()}
    active = list(index)
    default_seconds: list[float] = []
    info = m.info
    for rnd in range(rounds):
        order = [active[int(j)] for j in rng.permutation(len(active))]
        for g in range(0, len(order), GROUP):
            group = order[g:g + GROUP]
            timeout = 120.0 + 10 * (len(group) + 1) * CUTOFF * info.seconds * info.inner
            res = m.time(group, 2, math.inf, timeout)
            if not res:  # the worker was replaced: what it had compiled is gone
                print(f"  round {rnd + 1}: the timing was lost with the worker", file=sys.stderr)
                active = []
                break
            default_seconds.append(float(np.median([r.seconds / r.ratio for r in res.values()])))
            for s, r in res.items():
                pool[index[s]]["round_ratios"].append(r.ratio)
                pool[index[s]]["round_seconds"].append(r.seconds)
        if rnd == 0:  # as the tuner: one round tells a candidate CUTOFF times slower
            active = [s for s in active if pool[index[s]]["round_ratios"][0] <= CUTOFF]
        print(f"  round {rnd + 1}/{rounds}: {len(order)} timed", file=sys.stderr, flush=True)
        if not active:
            break
    for i in index.values():
        e = pool[i]
        if e["round_ratios"]:
            e.update(timed=True, ratio=float(np.median(e["round_ratios"])))
        else:
            e.update(ok=False, error="lost before timing (worker replaced)")
    for e in pool:
        if "same_program_as" in e:
            src = pool[e["same_program_as"]]
            e.update(ok=src["ok"], ratio=src["ratio"], error=src["error"])
        e["speedup"] = 1.0 / e["ratio"] if e["ok"] and e["ratio"] else None
    return default_seconds


# ----------------------------------------------------------------------------- the replay

class _PoolSource:
    """The production proposers with their candidates drawn from a measured pool: fresh
    samples from its uniform part, the default's mutants from its mutant part (the model arms
    then score every unmeasured member of those parts instead of fresh samples of the space)."""

    uniform: list[Any]
    near: list[Any]

    def _fresh(self, n: int, taken: set[str]) -> list[Any]:
        left = [s for s in self.uniform if schedule_key(s) not in taken]
        picks = [left[int(i)] for i in self.rng.permutation(len(left))[:max(0, n)]]
        taken.update(schedule_key(s) for s in picks)
        return picks

    def _mutants(self, taken: set[str]) -> dict[str, Any]:
        return {k: s for s in self.near if (k := schedule_key(s)) not in taken}


class PoolRandom(_PoolSource, RandomProposer):
    pass


class PoolModel(_PoolSource, ModelProposer):
    pass


def make_arm(arm: str, space: Any, pool: dict[str, Any], seed: int) -> RandomProposer:
    method, from_default = ARMS.get(arm, ("random", True))
    rng = np.random.default_rng(seed)
    held = dict(pool["held"])
    if method == "random":
        p: RandomProposer = PoolRandom(space, rng, held)
    else:
        p = PoolModel(space, rng, pool["features"], from_default=from_default, seed=seed, held=held)
    members = [(e["part"], space.with_knobs(**e["schedule"])) for e in pool["candidates"]]
    p.uniform = [s for part, s in members if part == "uniform"]
    p.near = [s for part, s in members if part == "mutant"] if from_default else []
    if arm == "mutants":
        p.uniform, p.near = p.near, []
    return p


def replay(pool: dict[str, Any], arm: str, seed: int, trials: int, space: Any = None) -> dict[str, Any]:
    """One arm's search against the pool: the tuner's loop (batches of ``BATCH``, a candidate
    whose program was measured before costs no trial) with lookups for measurements."""
    from cortex.core.lowering.schedule import ScheduleSpace
    from cortex.tuning.records import Trial
    from cortex.tuning.tuner import BATCH, MAX_PROPOSALS

    space = space or ScheduleSpace(_capabilities(pool["capabilities"]), pool["dtype"])
    results = {schedule_key(space.with_knobs(**e["schedule"])): e for e in pool["candidates"]}
    p = make_arm(arm, space, pool, seed)
    features = tuple(pool["features"])
    seen_programs: set[str] = set()
    curve: list[float] = []
    picked: list[int] = []
    proposed = 0
    best = 0.0
    while len(curve) < trials and proposed < MAX_PROPOSALS * trials:
        batch = p.propose(min(BATCH, trials - len(curve)))
        if not batch:
            break
        done = []
        for s in batch:
            e = results[schedule_key(s)]
            proposed += 1
            program = e.get("program_key") or schedule_key(s)
            measured = program not in seen_programs
            seen_programs.add(program)
            ratio = e["ratio"] if e["ok"] else None
            done.append(Trial(s.to_dict(), e["ok"], ratio, e["compile_s"], e["error"], features,
                              measured=measured))
            if measured and len(curve) < trials:
                if e["ok"] and e["speedup"]:
                    best = max(best, e["speedup"])
                curve.append(best)
                picked.append(pool["candidates"].index(e))
        p.observe(done, features, own=True)
    return {"arm": arm, "seed": seed, "curve": curve, "picked": picked}


def _padded(curves: list[list[float]], trials: int) -> np.ndarray:
    """Curves as rows of ``trials`` points (a search that ran out of candidates keeps its best)."""
    return np.array([(c + [c[-1] if c else 0.0] * trials)[:trials] for c in curves])


def summarize(pool: dict[str, Any], runs: list[dict[str, Any]], trials: int) -> dict[str, Any]:
    from cortex.tuning.tuner import MIN_GAIN

    half = trials // 2
    arms = sorted({r["arm"] for r in runs}, key=REPLAY_ARMS.index)
    curves = {a: _padded([r["curve"] for r in runs if r["arm"] == a], trials) for a in arms}
    out: dict[str, Any] = {"trials": trials, "seeds": len({r["seed"] for r in runs}), "arms": {}}
    for a, c in curves.items():
        q25, med, q75 = np.percentile(c, [25, 50, 75], axis=0)
        out["arms"][a] = {"median": med.tolist(), "q25": q25.tolist(), "q75": q75.tolist(),
                          "median_best": float(med[-1]), "median_best_at_half": float(med[half - 1])}
    speedups = [e["speedup"] for e in pool["candidates"]
                if e["part"] != "control" and e["ok"] and e["speedup"]]
    parts = {part: [e["speedup"] for e in pool["candidates"] if e["part"] == part and e["ok"] and e["speedup"]]
             for part in ("uniform", "mutant")}
    control = [e["speedup"] for e in pool["candidates"] if e["part"] == "control"]
    out["pool"] = {"members": len(pool["candidates"]) - len(control), "valid": len(speedups),
                   "control_speedup": control[0] if control else None,
                   "best_speedup": max(speedups, default=0.0),
                   "best_by_part": {k: max(v, default=0.0) for k, v in parts.items()},
                   "beat_default_by_min_gain": sum(s >= 1.0 + MIN_GAIN for s in speedups),
                   "any_beats_default": any(s >= 1.0 + MIN_GAIN for s in speedups)}
    for a in curves:  # the pool's best point: when each arm finds it
        best = out["pool"]["best_speedup"]
        found = [t for r in runs if r["arm"] == a and (t := first_reach(r["curve"], best)) is not None]
        out["arms"][a].update(median_reaches_pool_best_at=first_reach(out["arms"][a]["median"], best),
                              seeds_finding_pool_best=len(found),
                              median_trial_finding_pool_best=float(np.median(found)) if found else None)
    if "random" in curves:
        level = out["arms"]["random"]["median_best"]
        out["random_median_best"] = level
        by_seed = {r["seed"]: r for r in runs if r["arm"] == "random"}
        for a in JUDGED:
            if a not in curves:
                continue
            info = out["arms"][a]
            info["median_reaches_random_median_best_at"] = first_reach(info["median"], level)
            mine = {r["seed"]: r for r in runs if r["arm"] == a}
            hits = [first_reach(mine[s]["curve"][:half], max(by_seed[s]["curve"], default=0.0)) is not None
                    for s in mine if s in by_seed]
            info["seeds_reaching_random_best_within_half"] = sum(hits)
            info["fraction_reaching_random_best_within_half"] = sum(hits) / len(hits) if hits else None
    return out


def plot(result: dict[str, Any], path: str) -> str:
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed: no plot"
    s = result["summary"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"random": "tab:gray", "model": "tab:blue", "model+default": "tab:green", "mutants": "tab:orange"}
    x = np.arange(1, s["trials"] + 1)
    for a, info in s["arms"].items():
        ax.plot(x, info["median"], color=colors[a], label=f"{a} (median of {s['seeds']} seeds)")
        ax.fill_between(x, info["q25"], info["q75"], color=colors[a], alpha=0.2)
    ax.axvline(s["trials"] / 2, color="k", lw=0.6, ls=":", label="half the budget")
    ax.axhline(1.0, color="k", lw=0.8, label="the default schedule")
    pool = result["pool"]
    ax.set_title(f"{pool['model']} on {pool['target']}, {pool['workload_class']}: replay on "
                 f"{s['pool']['members']} measured candidates", fontsize=8)
    ax.set_xlabel("measured trials")
    ax.set_ylabel("best speedup over the default (quartile bands)")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", help="a measured pool (JSON): replay it without measuring")
    p.add_argument("--model", default="TreeGRU:hidden=64,embed=64,vocab=5000", help="zoo model with settings")
    p.add_argument("--target", default="llvm")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a target or compile option (e.g. threads=1)")
    p.add_argument("--uniform", type=int, default=200, help="uniform samples in the pool (200)")
    p.add_argument("--mutants", type=int, default=48, help="mutants of the default in the pool (48)")
    p.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds (9)")
    p.add_argument("--compile-timeout", type=float, default=None,
                   help="seconds a candidate's compile and check may take (default: the tuner's)")
    p.add_argument("--batch-size", type=int, default=10, help="structures per workload batch (10)")
    p.add_argument("--nodes", type=int, default=60, help="mean nodes per structure (60)")
    p.add_argument("--shape", default="parse", help="structure shape (parse; see WorkloadSpec)")
    p.add_argument("--hold", default=None, metavar="KNOB,..",
                   help="knobs kept at their default rule (default: the tuner's HOLD; '' for none)")
    p.add_argument("--pool-seed", type=int, default=0, help="seed of the pool's samples (0)")
    p.add_argument("--pool-out", help="write the measured pool here (JSON)")
    p.add_argument("--seeds", type=int, default=50)
    p.add_argument("--trials", type=int, default=32, help="trial budget of every arm (32)")
    p.add_argument("--arms", default=",".join(REPLAY_ARMS), help=f"from {list(REPLAY_ARMS)}")
    p.add_argument("--out", default="", help="JSON file (default: stdout)")
    p.add_argument("--plot", help="PNG file for the curves (needs matplotlib)")
    args = p.parse_args(argv)
    arms = args.arms.split(",")
    if set(arms) - set(REPLAY_ARMS):
        p.error(f"unknown arm {sorted(set(arms) - set(REPLAY_ARMS))[0]!r}: choose from {list(REPLAY_ARMS)}")
    if args.trials < 2:
        p.error("--trials must be at least 2")
    if args.pool:
        pool = json.loads(Path(args.pool).read_text())
        pool = pool["pool"] if pool.get("benchmark") == "tune_replay" else pool  # a replay's output
    else:
        from cortex.tuning.cli import parse_value
        from cortex.tuning.tuner import HOLD
        from cortex.tuning.workload import WorkloadSpec

        options = {k: parse_value(v) for k, _, v in (o.partition("=") for o in args.option)}
        hold = HOLD if args.hold is None else tuple(k.strip() for k in args.hold.split(",") if k.strip())
        workload = WorkloadSpec(batch_size=args.batch_size, nodes=args.nodes, shape=args.shape)
        pool = measure_pool(args.model, args.target, options, workload, hold, args.uniform,
                            args.mutants, args.rounds, args.pool_seed, args.compile_timeout)
        if args.pool_out:
            Path(args.pool_out).write_text(json.dumps(pool, indent=1, default=repr) + "\n")
    from cortex.core.lowering.schedule import ScheduleSpace

    space = ScheduleSpace(_capabilities(pool["capabilities"]), pool["dtype"])
    runs = [replay(pool, a, s, args.trials, space) for s in range(args.seeds) for a in arms]
    summary = summarize(pool, runs, args.trials)
    result = {"benchmark": "tune_replay", "environment": environment(), "load_replay": os.getloadavg(),
              "pool_file": args.pool or args.pool_out, "trials": args.trials, "seeds": args.seeds,
              "summary": summary, "pool": pool, "runs": runs}
    if args.pool or args.pool_out:  # the pool's own file holds every measurement
        result["pool"] = {**pool, "candidates": [{"part": e["part"], "ok": e["ok"], "speedup": e["speedup"]}
                                                 for e in pool["candidates"]]}
    if args.plot:
        result["plot"] = plot(result, args.plot)
    write_json(result, args.out)
    pinfo = summary["pool"]
    print(f"pool: {pinfo['members']} candidates, {pinfo['valid']} valid, best {pinfo['best_speedup']:.2f}x "
          f"the default ({pinfo['beat_default_by_min_gain']} beat it by 2%; the default compiled "
          f"again: {pinfo['control_speedup'] or 0:.2f}x); load "
          f"{pool.get('load_before')} -> {pool.get('load_after')}", file=sys.stderr)
    for a, info in summary["arms"].items():
        extra = ""
        if a in JUDGED and "random_median_best" in summary:
            extra = (f"; median curve reaches random's median best "
                     f"({summary['random_median_best']:.2f}x) at trial "
                     f"{info['median_reaches_random_median_best_at']}; reaches its seed's random best "
                     f"within {args.trials // 2} trials in {info['seeds_reaching_random_best_within_half']}"
                     f" of {summary['seeds']} seeds")
        print(f"{a}: median best {info['median_best']:.2f}x ({info['median_best_at_half']:.2f}x at half)"
              f"{extra}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
