"""TreeLSTM (and the other zoo models) on Cortex targets next to peers, in one process, as JSON.

Pipeline position: outside the pipeline; it measures what a user pays for
``cortex.compile(model, target=T)(structures)`` (linearization included) next to peers that
implement the same equations with the same weights (``benchmarks/peers/``). Every contender's
result is checked against the float64 reference evaluator (``cortex.core.frontend.reference``) before
it is timed; a contender that does not match is reported as ``"wrong"`` and never timed.

Workload (defaults; see "Performance targets" in benchmarks/README.md): the zoo's binary TreeLSTM,
hidden 256, embed 256, vocab 20000, float32, on random parse-like binary trees of 20-40 leaves
(seeded), batch 1 and batch 10; also TreeGRU, TreeFC (same trees), MV-RNN (hidden 64: its
matrix states make hidden 256 a different workload), DAG-RNN over 10x10 grids of 256 features,
and a sequence LSTM over length-30 token sequences.

Timing: each case is warmed up, then timed with ``time.perf_counter_ns`` until >= --min-reps
calls and >= --min-time seconds (capped by --max-time); --rounds R interleaves the cases R times
and pools the samples, so a burst of load from other processes, or a drift of the machine's
speed, hits every case alike (default: 8 rounds of >= 0.25 s per case). Reported:
median, p10, p90, min (ms), GFLOP/s (``benchmarks/common.py`` documents the FLOP formulas),
and per (model, batch) the speedup of every Cortex target over the best CPU peer of this run
(and of ``cuda`` over the PyTorch CUDA peer).

Usage::

    python benchmarks/bench_treelstm.py --targets numpy,llvm,opencl,cuda --out bench.json
    python benchmarks/bench_treelstm.py --quick --targets numpy        # smoke test, seconds
    python benchmarks/bench_treelstm.py --models TreeLSTM --torch-compile --rounds 3

``benchmarks/README.md`` explains every field of the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (FLOP_FORMULAS, Samples, batch_shape, environment,  # noqa: E402
                               flops_per_batch, make_trees, max_error, measure, tree_height)

SCHEMA = "cortex-bench-treelstm/1"
ALL_MODELS = ("TreeLSTM", "TreeGRU", "TreeFC", "MVRNN", "DAGRNN", "SeqLSTM")
ALL_TARGETS = ("numpy", "llvm", "opencl", "cuda")
# fp32 contenders against the float64 reference: scaled max abs error allowed
TOLERANCE = 2e-4


# ------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class Settings:
    hidden: int
    embed: int
    vocab: int
    min_leaves: int
    max_leaves: int
    batches: tuple[int, ...]
    mvrnn_hidden: int
    mvrnn_vocab: int
    grid: int
    seq_len: int
    seed: int
    min_reps: int
    min_time_s: float
    max_time_s: float
    rounds: int
    warmup: int = 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", default=",".join(ALL_TARGETS),
                   help="comma-separated Cortex targets (default: %(default)s); '' for none")
    p.add_argument("--models", default=",".join(ALL_MODELS), help="default: %(default)s")
    p.add_argument("--batches", default="1,10", help="batch sizes (default: %(default)s)")
    p.add_argument("--no-peers", action="store_true", help="measure only the Cortex targets")
    p.add_argument("--peers", default="",
                   help="only these peers (comma-separated names, e.g. torch_cuda_levels); "
                        "default: every peer available for the model")
    p.add_argument("--torch-compile", action="store_true",
                   help="add the torch.compile peer (TreeLSTM; compiling takes 10-25 s)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads for the peers (default: all logical CPUs)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--embed", type=int, default=256)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--min-leaves", type=int, default=20)
    p.add_argument("--max-leaves", type=int, default=40)
    p.add_argument("--mvrnn-hidden", type=int, default=64)
    p.add_argument("--mvrnn-vocab", type=int, default=1000)
    p.add_argument("--grid", type=int, default=10, help="DAG-RNN grid side (default: %(default)s)")
    p.add_argument("--seq-len", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-table-mib", type=float, default=None,
                   help="compile option max_table_mib for every Cortex target: the largest table "
                        "a pass may precompute (default: the compiler's, 128 MiB on CPU targets, "
                        "which fill tables on use, else 64 MiB in float32); TreeLSTM vocab 20000 "
                        "needs 100 for its level-1 tables")
    # Many short interleaved rounds by default: this class of machine drifts up to 2x in speed
    # within minutes, and one long round per case made the ratios depend on when each ran.
    p.add_argument("--min-reps", type=int, default=10, help="calls per case and round (at least)")
    p.add_argument("--min-time", type=float, default=0.25, help="seconds per case and round")
    p.add_argument("--max-time", type=float, default=1.25, help="cap per case and round")
    p.add_argument("--rounds", type=int, default=8, help="interleaved rounds, samples pooled")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: tiny sizes, few repeats (overrides the size/timing flags)")
    p.add_argument("--out", default="", help="write the JSON here instead of stdout")
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    if args.quick:
        return Settings(hidden=16, embed=16, vocab=50, min_leaves=3, max_leaves=6,
                        batches=(1, 3), mvrnn_hidden=4, mvrnn_vocab=20, grid=3, seq_len=4,
                        seed=args.seed, min_reps=2, min_time_s=0.0, max_time_s=0.0, rounds=1,
                        warmup=0)
    batches = tuple(int(b) for b in args.batches.split(",") if b.strip())
    if not batches or min(batches) < 1:
        raise SystemExit(f"--batches needs positive integers, got {args.batches!r}")
    return Settings(args.hidden, args.embed, args.vocab, args.min_leaves, args.max_leaves,
                    batches, args.mvrnn_hidden, args.mvrnn_vocab, args.grid, args.seq_len,
                    args.seed, args.min_reps, args.min_time, args.max_time, max(1, args.rounds))


def split_names(text: str, known: tuple[str, ...], what: str, strict: bool = True) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if strict and bad:
        raise SystemExit(f"unknown {what} {bad}; known: {', '.join(known)}")
    return names


# ------------------------------------------------------------------ workloads


@dataclass
class Workload:
    """One (model, batch size) case: the model, its inputs in user form and linearized, the
    float64 reference roots and the FLOP count."""

    model_name: str
    batch_size: int
    model: Any
    structures: list[Any]  # what a user passes to the executable
    raw: list[Any]  # nested tuples (trees) or token arrays (sequences), for the peers
    batch: Any  # LinearizedBatch
    reference: dict[str, np.ndarray]  # root states [B, ...], float64
    flops: int
    shape: dict[str, Any]


def build_model(name: str, s: Settings) -> tuple[Any, int, int]:
    """The zoo model with its seed-0 weights; (model, hidden, per-node input width)."""
    from cortex import models

    if name in ("TreeLSTM", "TreeGRU", "TreeFC"):
        cls = getattr(models, name)
        return cls(hidden=s.hidden, embed=s.embed, vocab=s.vocab, seed=s.seed), s.hidden, s.embed
    if name == "MVRNN":
        h = s.mvrnn_hidden
        return models.MVRNN(hidden=h, vocab=s.mvrnn_vocab, seed=s.seed), h, h
    if name == "DAGRNN":
        return models.DAGRNN(hidden=s.hidden, features=s.embed, seed=s.seed), s.hidden, s.embed
    if name == "SeqLSTM":
        return models.SeqLSTM(hidden=s.hidden, vocab=s.vocab, embed=s.embed, seed=s.seed), s.hidden, s.embed
    raise ValueError(f"unknown model {name!r}")


def build_workload(name: str, model: Any, hidden: int, width: int, b: int, s: Settings) -> Workload:
    from cortex.core.frontend import reference
    from cortex.core.runtime.executable import linearize_options
    from cortex.core.linearize import Grid, Sequence, linearize

    graph = model.trace()
    seed = s.seed * 1000 + b
    if name in ("TreeLSTM", "TreeGRU", "TreeFC", "MVRNN"):
        vocab = s.mvrnn_vocab if name == "MVRNN" else s.vocab
        raw = make_trees(seed, b, s.min_leaves, s.max_leaves, vocab)
        structures = list(raw)
    elif name == "DAGRNN":
        rng = np.random.default_rng(seed)
        raw = [rng.normal(0.0, 1.0, (s.grid, s.grid, width)) for _ in range(b)]
        structures = [Grid(s.grid, s.grid, features=f) for f in raw]
    else:  # SeqLSTM
        rng = np.random.default_rng(seed)
        raw = [rng.integers(0, s.vocab, s.seq_len) for _ in range(b)]
        structures = [Sequence(w) for w in raw]
    batch = linearize(structures, cache=False, **linearize_options(graph))
    states = reference.evaluate(graph, model.params, batch)
    roots = {k: v[batch.roots] for k, v in states.items()}  # every state, at the roots
    shape: dict[str, Any] = batch_shape(batch)
    if name in ("TreeLSTM", "TreeGRU", "TreeFC", "MVRNN"):
        shape["tree_heights"] = [tree_height(t) for t in raw]
    return Workload(name, b, model, structures, raw, batch, roots,
                    flops_per_batch(name, batch, hidden, width), shape)


# ------------------------------------------------------------------ contenders


@dataclass
class Case:
    """One contender on one workload: how to call it and what we learned about it."""

    work: Workload
    kind: str  # "peer" | "cortex"
    name: str  # peer name or target name
    device: str  # "cpu" | "cuda" | "opencl"
    fn: Callable[[], Any] | None = None
    extra: dict[str, Callable[[], Any]] = field(default_factory=dict)  # variant -> call
    status: str = "ok"
    reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, list[int]] = field(default_factory=dict)


def check(case: Case, got: dict[str, np.ndarray]) -> None:
    """Compare a contender's root states with the reference; mark the case wrong if off."""
    errors = {}
    for state, ref in case.work.reference.items():
        if state in got:
            errors[state] = max_error(got[state], ref)
    if not errors:
        case.status, case.reason = "wrong", "returned none of the reference's states"
        return
    case.info["max_error"] = max(errors.values())
    case.info["checked_states"] = sorted(errors)
    if case.info["max_error"] > TOLERANCE:
        case.status = "wrong"
        case.reason = f"max scaled error {case.info['max_error']:.3g} > {TOLERANCE} vs reference ({errors})"


def peer_builders(name: str, args: argparse.Namespace, torch_missing: str | None,
                  cuda: bool) -> list[tuple[str, str, Callable[[Workload], Any]]]:
    """(peer name, device, builder) for a model. Builders return a run closure, or a
    (run, compile seconds, compile was cold) triple."""
    from benchmarks.peers import dynet_peer, numpy_peer

    out: list[tuple[str, str, Callable[[Workload], Any]]] = []
    if name == "TreeLSTM":
        out.append(("numpy_levels", "cpu", lambda w: numpy_peer.build_levels(w.model, w.batch)))
        if torch_missing is None:
            from benchmarks.peers import torch_peers as tp

            out.append(("torch_naive", "cpu", lambda w: tp.build_naive(w.model, w.raw)))
            out.append(("torch_levels", "cpu", lambda w: tp.build_levels(w.model, w.batch)))
            if args.torch_compile:
                out.append(("torch_compile_levels", "cpu", lambda w: tp.build_compiled(w.model, w.batch)))
            if cuda:
                out.append(("torch_cuda_levels", "cuda", lambda w: tp.build_levels(w.model, w.batch, "cuda")))
        out.append(("dynet_autobatch", "cpu", lambda w: dynet_peer.build_autobatch(w.model, w.raw)))
    elif torch_missing is None:
        from benchmarks.peers import torch_other as to

        if name == "TreeFC":
            out.append(("torch_levels", "cpu", lambda w: to.build_treefc_levels(w.model, w.batch)))
        elif name == "TreeGRU":
            out.append(("torch_levels", "cpu", lambda w: to.build_treegru_levels(w.model, w.batch)))
        elif name == "SeqLSTM":
            out.append(("torch_nn_lstm", "cpu", lambda w: to.build_seqlstm_nn(w.model, w.raw)))
        elif name == "MVRNN":
            out.append(("torch_levels", "cpu", lambda w: to.build_mvrnn_levels(w.model, w.batch)))
        elif name == "DAGRNN":
            out.append(("torch_levels", "cpu", lambda w: to.build_dagrnn_levels(w.model, w.batch)))
    return out


def prepare_peer(work: Workload, pname: str, device: str, builder: Callable) -> Case:
    case = Case(work, "peer", pname, device)
    if pname == "dynet_autobatch":
        from benchmarks.peers import dynet_peer

        reason = dynet_peer.available()
        if reason is not None:
            case.status, case.reason = "skipped", reason
            return case
    try:
        built = builder(work)
    except Exception as exc:  # noqa: BLE001 - a broken peer is reported, not fatal
        case.status, case.reason = "error", f"{type(exc).__name__}: {exc}"
        return case
    if isinstance(built, tuple):
        built, compile_s, cold = built
        case.info["compile_s"] = compile_s
        case.info["compile_cold"] = cold
    case.fn = built
    check(case, built())
    return case


def cortex_target_state(target: str) -> tuple[str, str]:
    """("ok", "") when ``target`` resolves and is runnable here, else (status, reason)."""
    import cortex

    try:
        resolved, _ = cortex.resolve_target(target)
    except cortex.CortexError as exc:
        return "unavailable", f"{type(exc).__name__}: {exc}"
    runnable = resolved.runnable()
    if not runnable:
        return "unavailable", f"target {target!r} is enabled but not runnable here: {runnable.reason}"
    return "ok", ""


def compile_target(model: Any, target: str, options: dict[str, Any]) -> tuple[Any, float, str]:
    """(executable or None, cold compile seconds, failure reason)."""
    import cortex

    t0 = time.perf_counter()
    try:
        exe = cortex.compile(model, target=target, **options)
    except cortex.NotYetImplementedError as exc:
        return None, 0.0, f"NotYetImplementedError: {exc}"
    except Exception as exc:  # noqa: BLE001 - a failing backend is reported, not fatal
        return None, 0.0, f"{type(exc).__name__}: {exc}"
    return exe, time.perf_counter() - t0, ""


def program_info(exe: Any) -> dict[str, Any]:
    """What a compiled program holds: its params' size (MiB, the tables included) and whether it
    has the level-1 case (``cortex.core.passes.preterminal``)."""
    if exe is None:
        return {}
    from cortex.core.loopir import shape_function

    nbytes = sum(int(np.prod(shape_function(b.shape)({}))) * np.dtype(b.dtype).itemsize
                 for b in exe.program.buffers if b.role == "param")
    return {"param_mib": round(nbytes / 2**20, 1),
            "level1_tables": any(c.name == "preterminal" for c in exe.graph.cases)}


def prepare_cortex(work: Workload, target: str, exe: Any, compile_s: float, why: str,
                   state: tuple[str, str]) -> Case:
    from cortex.core.linearize import clear_cache, set_cache

    case = Case(work, "cortex", target, {"cuda": "cuda", "opencl": "opencl"}.get(target, "cpu"))
    if state[0] != "ok":
        case.status, case.reason = state
        return case
    if exe is None:
        case.status, case.reason = "unavailable", why
        return case
    case.info["compile_s"] = compile_s
    structures = work.structures
    try:
        t0 = time.perf_counter()
        out = exe(structures)  # the first call: it computes its tokens' table rows, if any
        case.info["first_call_ms"] = (time.perf_counter() - t0) * 1e3
        rows = getattr(exe, "table_rows", None)
        if rows is not None:
            case.info["table_rows_filled"] = list(rows)
        check(case, {s: out.root(s) for s in work.reference if s in out.states})
    except Exception as exc:  # noqa: BLE001
        case.status, case.reason = "error", f"{type(exc).__name__}: {exc}"
        return case
    case.fn = lambda: exe(structures)

    def uncached() -> Any:
        set_cache(False)
        try:
            return exe(structures)
        finally:
            set_cache(True)

    case.extra["call_uncached"] = uncached
    if callable(getattr(exe, "run", None)) and callable(getattr(exe, "linearize", None)):
        clear_cache()
        lin = exe.linearize(structures)
        case.extra["run_prelinearized"] = lambda: exe.run(lin)
    return case


# ------------------------------------------------------------------ measuring and reporting


def measure_all(cases: list[Case], s: Settings, log: Callable[[str], None]) -> None:
    live = [c for c in cases if c.status == "ok" and c.fn is not None]
    for r in range(s.rounds):
        for c in live:
            log(f"round {r + 1}/{s.rounds}: {c.work.model_name} b{c.work.batch_size} {c.kind} {c.name}")
            calls = {"call": c.fn, **c.extra}
            for variant, fn in calls.items():
                try:
                    got = measure(fn, min_reps=s.min_reps, min_time_s=s.min_time_s,
                                  max_time_s=s.max_time_s, warmup=s.warmup)
                except Exception as exc:  # noqa: BLE001
                    c.status, c.reason = "error", f"while timing {variant}: {type(exc).__name__}: {exc}"
                    break
                c.samples.setdefault(variant, []).extend(got)


def case_record(c: Case) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "model": c.work.model_name, "batch": c.work.batch_size, "kind": c.kind, "name": c.name,
        "device": c.device, "status": c.status, "reason": c.reason, **c.info,
    }
    if c.status == "ok" and "call" in c.samples:
        timing = Samples(c.samples["call"]).summary()
        rec.update(timing)
        rec["gflops"] = c.work.flops / (timing["median_ms"] * 1e-3) / 1e9
        rec["variants"] = {}
        for variant, ns in c.samples.items():
            if variant != "call":
                v = Samples(ns).summary()
                v["gflops"] = c.work.flops / (v["median_ms"] * 1e-3) / 1e9
                rec["variants"][variant] = v
    return rec


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["model"], r["batch"]) for r in records},
                  key=lambda k: (ALL_MODELS.index(k[0]), k[1]))
    for model, b in keys:
        rows = [r for r in records if r["model"] == model and r["batch"] == b and "median_ms" in r]
        cpu_peers = [r for r in rows if r["kind"] == "peer" and r["device"] == "cpu"]
        gpu_peers = [r for r in rows if r["kind"] == "peer" and r["device"] == "cuda"]
        best = min(cpu_peers, key=lambda r: r["median_ms"]) if cpu_peers else None
        best_gpu = min(gpu_peers, key=lambda r: r["median_ms"]) if gpu_peers else None
        entry: dict[str, Any] = {
            "model": model, "batch": b,
            "best_peer": best["name"] if best else None,
            "best_peer_ms": best["median_ms"] if best else None,
            "best_gpu_peer": best_gpu["name"] if best_gpu else None,
            "best_gpu_peer_ms": best_gpu["median_ms"] if best_gpu else None,
            "peers_ms": {r["name"]: r["median_ms"] for r in rows if r["kind"] == "peer"},
            # minima: the least disturbed calls; on a loaded machine they rank more stably
            "best_peer_min_ms": min(r["min_ms"] for r in cpu_peers) if cpu_peers else None,
            "targets": {},
        }
        for r in rows:
            if r["kind"] != "cortex":
                continue
            t: dict[str, Any] = {"median_ms": r["median_ms"], "gflops": r["gflops"],
                                 "compile_s": r.get("compile_s"),
                                 "first_call_ms": r.get("first_call_ms")}
            pre = r.get("variants", {}).get("run_prelinearized")
            if pre:
                t["prelinearized_ms"] = pre["median_ms"]
                if best:
                    # like for like: the peers are timed on index tensors prepared outside
                    # their call, the prelinearized run on a batch linearized outside it
                    t["speedup_prepared_vs_best_peer"] = best["median_ms"] / pre["median_ms"]
            if best:
                t["speedup_vs_best_peer"] = best["median_ms"] / r["median_ms"]
                t["min_ms"] = r["min_ms"]
                t["speedup_vs_best_peer_min"] = entry["best_peer_min_ms"] / r["min_ms"]
            if best_gpu and r["device"] == "cuda":
                t["speedup_vs_best_gpu_peer"] = best_gpu["median_ms"] / r["median_ms"]
            t["speedup_vs_peer"] = {p["name"]: p["median_ms"] / r["median_ms"]
                                    for p in rows if p["kind"] == "peer"}
            t["time_over_target"] = {o["name"]: r["median_ms"] / o["median_ms"] for o in rows
                                     if o["kind"] == "cortex" and o["name"] != r["name"]}
            entry["targets"][r["name"]] = t
        out.append(entry)
    return out


def run(argv: list[str] | None = None, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the benchmark and return the JSON document (see ``benchmarks/README.md``)."""
    args = parse_args(argv)
    s = settings_from(args)
    start = time.perf_counter()
    log = log or (lambda msg: print(f"[{time.perf_counter() - start:7.2f}s] {msg}", file=sys.stderr,
                                    flush=True))
    models = split_names(args.models, ALL_MODELS, "models")
    targets = split_names(args.targets, ALL_TARGETS, "targets", strict=False)
    only_peers = set(split_names(args.peers, (), "peers", strict=False))
    notes: list[str] = []

    torch_mod, torch_reason = None, None
    try:
        import torch as torch_mod  # type: ignore[no-redef]

        torch_mod.set_num_threads(args.threads or os.cpu_count() or 1)
    except ImportError as exc:
        torch_reason = f"PyTorch is not installed ({exc})"
        notes.append(f"PyTorch peers skipped: {torch_reason}")
    cuda = bool(torch_mod is not None and torch_mod.cuda.is_available())
    env = environment(torch_mod)
    env["peer_threads"] = (args.threads or os.cpu_count()) if torch_mod is not None else None

    target_states = {t: cortex_target_state(t) for t in targets}
    compile_options = {} if args.max_table_mib is None else {"max_table_mib": args.max_table_mib}
    cases: list[Case] = []
    workloads: list[dict[str, Any]] = []
    compile_info: list[dict[str, Any]] = []
    for name in models:
        model, hidden, width = build_model(name, s)
        exes: dict[str, tuple[Any, float, str]] = {}
        for t in targets:
            if target_states[t][0] == "ok":
                log(f"compiling {name} for {t}")
                exes[t] = compile_target(model, t, compile_options)
                exe, secs, why = exes[t]
                again = compile_target(model, t, compile_options)[1] if exe is not None else None
                compile_info.append({"model": name, "target": t, "compile_s": secs if exe else None,
                                     "compile_again_s": again, **program_info(exe),
                                     "status": "ok" if exe is not None else "unavailable",
                                     "reason": why})
        for b in s.batches:
            log(f"preparing {name} b{b}")
            work = build_workload(name, model, hidden, width, b, s)
            workloads.append({"model": name, "batch": b, "hidden": hidden, "input_width": width,
                              "dtype": model.dtype, "flops": work.flops,
                              "flop_formula": {"leaf": FLOP_FORMULAS[name][0],
                                               "internal": FLOP_FORMULAS[name][1]},
                              **work.shape})
            if not args.no_peers:
                for pname, device, builder in peer_builders(name, args, torch_reason, cuda):
                    if only_peers and pname not in only_peers:
                        continue
                    log(f"  peer {pname}")
                    cases.append(prepare_peer(work, pname, device, builder))
            for t in targets:
                exe, secs, why = exes.get(t, (None, 0.0, ""))
                cases.append(prepare_cortex(work, t, exe, secs, why, target_states[t]))
    measure_all(cases, s, log)
    records = [case_record(c) for c in cases]
    env["loadavg_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    if "dynet" in sys.modules:
        notes.append("DyNet was imported: its library sets flush-to-zero/denormals-are-zero for "
                     "the whole process, so every contender ran with subnormals flushed")
    notes.append("peers are timed on index tensors prepared outside the timed call; the Cortex "
                 "'call' includes the linearizer (its cache on: repeated structures), "
                 "'call_uncached' runs the linearizer from scratch, 'run_prelinearized' skips it; "
                 "summary 'speedup_vs_best_peer' sets the Cortex call against the peers (the "
                 "Cortex side pays its input preparation, the peers do not), "
                 "'speedup_prepared_vs_best_peer' the prelinearized run (neither side pays it)")
    return {
        "schema": SCHEMA,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": [sys.executable, *sys.argv] if argv is None else ["bench_treelstm.py", *argv],
        "quick": bool(args.quick),
        "environment": env,
        "settings": {**s.__dict__, "batches": list(s.batches), "tolerance": TOLERANCE,
                     "models": models, "targets": targets, "torch_compile": args.torch_compile,
                     "compile_options": compile_options},
        "targets": {t: {"status": st, "reason": why} for t, (st, why) in target_states.items()},
        "compile": compile_info,
        "workloads": workloads,
        "results": records,
        "summary": summarize(records),
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    doc = run(argv)
    text = json.dumps(doc, indent=2, default=str)
    args = parse_args(argv)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)
    bad = [r for r in doc["results"] if r["status"] in ("wrong", "error")]
    for r in bad:
        print(f"{r['status'].upper()}: {r['model']} b{r['batch']} {r['kind']} {r['name']}: "
              f"{r['reason']}", file=sys.stderr)
    return 1 if any(r["status"] == "wrong" for r in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
