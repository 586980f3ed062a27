"""``cortex bench``: Cortex targets and peers on a sweep of points, timed fairly, as JSON.

Pipeline position: outside the compiler pipeline; it measures what a user pays for
``cortex.compile(model, target=T)(structures)`` (linearization included) next to peers that
implement the same equations with the same weights (:mod:`cortex.bench.peers`).

How a run goes, per group (a model at one hidden size, :class:`~cortex.bench.workloads.GroupKey`):

1. This process builds the model and every point's inputs and evaluates the float64 reference
   (``cortex.core.frontend.reference``) on them.
2. Each contender's worker (:mod:`cortex.bench.isolation`: its own process by default, the
   others stopped while it runs) compiles the model or builds the peer and calls it once per
   point; its root states are checked against the reference. A contender that does not match
   is ``"wrong"`` and never timed; one that fails is ``"error"`` with the reason; a missing
   library or target is ``"skipped"``/``"unavailable"`` with the reason. No failure stops the run.
3. ``rounds`` interleaved rounds: in each, every point's contenders are timed one after the
   other (the order rotates by round), so a burst of load or a drift of the machine's speed
   hits every contender alike. Samples of all rounds are pooled into medians and spreads;
   ratios are taken between those medians (:mod:`cortex.bench.summary`).

The JSON (schema ``cortex-bench/1``) is described in ``docs/bench.md``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from cortex.bench import environment
from cortex.bench.contenders import ContenderSpec, Point
from cortex.bench.isolation import ISOLATION_METHODS, WorkerError, make_host
from cortex.bench.options import BenchOptions, target_spec
from cortex.bench.peers import peer_for, select
from cortex.bench.roof import summary as roof_summary
from cortex.bench.summary import summarize
from cortex.bench.timing import summarize as timing_summary
from cortex.bench.workloads import (GroupKey, batch_shape, build_model, flops, linearize_for,
                                    make_inputs, max_error, model_spec, size_range)

SCHEMA = "cortex-bench/1"
TOLERANCE = 2e-4  # fp32 contenders against the float64 reference: scaled max abs error
#: Contenders compiled with stored weights (``weights=``): atol + rtol of that row of the
#: conformance tolerance table (``cortex.testing.tolerance``), as TOLERANCE is of float32's.
WEIGHT_TOLERANCE = {"bfloat16": 2e-2}
SETUP_TIMEOUT_S = 1800.0  # a compile on a slow device, or a slow peer's first calls
MEASURE_TIMEOUT_S = 900.0


@dataclass
class Reference:
    """One point as this process sees it: shape, FLOPs and the float64 reference roots."""

    tokens: int
    batch: int
    shape: dict[str, Any]
    flops: int
    roots: dict[str, np.ndarray]


@dataclass
class Case:
    """One contender at one point: status, check, samples per variant and round."""

    group: GroupKey
    point: Point
    kind: str
    name: str
    device: str
    label: str  # the worker's name
    status: str = "ok"
    reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    variants: list[str] = field(default_factory=list)
    samples: dict[str, list[list[int]]] = field(default_factory=dict)


def _error_setup(status: str, reason: str) -> dict[str, Any]:
    return {"status": status, "reason": reason, "info": {}, "points": {}, "threads": None}


def reference_for(group: GroupKey, model: Any, point: Point) -> Reference:
    from cortex.core.frontend import reference

    tokens, batch = point
    spec = model_spec(group.model)
    width = model.params["U"].shape[1] if group.model == "DAGRNN" else (group.embed or spec.hidden(group.hidden))
    inputs = make_inputs(group.model, tokens, batch, vocab=group.vocab, width=width, seed=group.seed)
    lin = linearize_for(model, inputs.structures)
    states = reference.evaluate(model.trace(), model.params, lin)
    return Reference(tokens, batch, {**batch_shape(lin), "size_range": list(size_range(tokens))},
                     flops(group.model, lin, spec.hidden(group.hidden), width),
                     {k: v[lin.roots] for k, v in states.items()})


def check(case: Case, ref: Reference, roots: dict[str, np.ndarray], tolerance: float = TOLERANCE) -> None:
    """Compare a contender's root states with the reference; mark the case wrong if off."""
    errors = {s: max_error(roots[s], r) for s, r in ref.roots.items() if s in roots}
    if not errors:
        case.status, case.reason = "wrong", "returned none of the reference's states"
        return
    case.info["max_error"] = max(errors.values())
    case.info["checked_states"] = sorted(errors)
    if tolerance != TOLERANCE:
        case.info["tolerance"] = tolerance
    if case.info["max_error"] > tolerance:
        case.status = "wrong"
        case.reason = f"max scaled error {case.info['max_error']:.3g} > {tolerance} vs reference ({errors})"


class Runner:
    """One ``cortex bench`` run (see the module docstring)."""

    def __init__(self, opts: BenchOptions, log: Callable[[str], None]) -> None:
        self.opts = opts
        self.log = log
        self.hosts: dict[str, Any] = {}
        self.workers: dict[str, dict[str, Any]] = {}
        self.cases: list[Case] = []
        self.points: list[dict[str, Any]] = []
        self.compiles: list[dict[str, Any]] = []
        self.log_dir: Path | None = None
        self.roof_ns: list[int] = []
        self.roof_error: str | None = None

    # ---------------------------------------------------------------- workers
    def host(self, label: str) -> Any:
        h = self.hosts.get(label)
        if h is not None and getattr(h, "alive", lambda: True)():
            return h
        if self.log_dir is None and self.opts.isolation != "inprocess":
            self.log_dir = self.opts.out / "logs"
            self.log_dir.mkdir(parents=True, exist_ok=True)
        h = self.hosts[label] = make_host(label, self.opts.isolation, threads=self.opts.threads,
                                          log_dir=self.log_dir)
        self.workers[label] = {"pid": h.pid, "log": str(getattr(h, "log_path", "")) or None}
        return h

    def close(self) -> None:
        for h in self.hosts.values():
            h.close()

    # ---------------------------------------------------------------- one group
    def contenders(self, model: str) -> list[ContenderSpec]:
        o = self.opts
        specs = [(t, *target_spec(t)) for t in o.targets]  # (label, target, its own options)
        out = [ContenderSpec("cortex", name, threads=o.threads, compile_options=o.compile_options + extra,
                             variants=o.variants, label=label if extra else "")
               for label, name, extra in specs]
        out += [ContenderSpec("peer", p.name, threads=o.threads)
                for p in select(model, o.peers, tuple(name for _, name, _ in specs))]
        return out

    def setup(self, spec: ContenderSpec, group: GroupKey, refs: list[Reference]) -> None:
        label = spec.key
        pts = [(r.tokens, r.batch) for r in refs]
        self.log(f"  {spec.kind} {spec.key}: building for {len(pts)} point(s)")
        try:
            res = self.host(label).request("setup", SETUP_TIMEOUT_S, spec=spec, group=group, points=pts)
        except WorkerError as exc:
            res = _error_setup("error", str(exc))
        if res.get("threads"):
            self.workers[label]["threads"] = res["threads"]
        if spec.kind == "cortex":
            self.compiles.append({"model": group.model, "hidden": group.hidden, "target": spec.name,
                                  "contender": spec.key,
                                  "status": res["status"], "reason": res["reason"], **res["info"]})
            device = {"cuda": "cuda", "opencl": "opencl"}.get(spec.name, "cpu")
        else:
            peer = peer_for(spec.name, group.model)
            device = peer.device if peer else "cpu"
        for ref in refs:
            pt = (ref.tokens, ref.batch)
            case = Case(group, pt, spec.kind, spec.key, device, label)
            self.cases.append(case)
            if res["status"] != "ok":
                case.status, case.reason = res["status"], res["reason"]
                continue
            p = res["points"].get(pt)
            if p is None or p["status"] != "ok":
                case.status, case.reason = "error", p["reason"] if p else "no result for the point"
                continue
            case.info.update(p["info"])
            if spec.kind == "cortex":
                case.info["compile_s"] = res["info"].get("compile_s")
            check(case, ref, p["roots"],
                  WEIGHT_TOLERANCE.get(dict(spec.compile_options).get("weights"), TOLERANCE))
            case.variants = p["variants"] if case.status == "ok" else []

    def measure_round(self, r: int, live: list[Case], points: list[Point]) -> None:
        for pt in points:
            here = [c for c in live if c.point == pt and c.status == "ok"]
            if not here:
                continue
            k = r % len(here)
            for c in here[k:] + here[:k]:  # rotate the order by round
                for variant in c.variants:
                    try:
                        ns = self.host(c.label).request("measure", MEASURE_TIMEOUT_S, point=pt,
                                                        variant=variant, timing=self.opts.timing)
                    except WorkerError as exc:
                        c.status, c.reason = "error", f"while timing {variant}: {exc}"
                        if not getattr(self.hosts[c.label], "alive", lambda: True)():
                            for other in live:  # set up in the worker that is gone
                                if other.label == c.label and other.status == "ok":
                                    other.status, other.reason = "error", f"its worker failed: {exc}"
                        break
                    c.samples.setdefault(variant, []).append(ns)

    def measure_roof(self) -> None:
        """One sample of the FLOP roof (``--roof``) in its own worker, between rounds."""
        if not self.opts.roof or self.roof_error:
            return
        try:
            self.roof_ns += self.host("roof").request("roof", MEASURE_TIMEOUT_S, size=self.opts.roof)
        except WorkerError as exc:
            self.roof_error = str(exc)
            self.log(f"  roof: {exc}")

    def roof(self) -> dict[str, Any] | None:
        if not self.opts.roof:
            return None
        out = roof_summary(self.opts.roof, self.roof_ns)
        if self.roof_error:
            out["error"] = self.roof_error
        return out

    def run_group(self, group: GroupKey, points: list[Point]) -> None:
        spec = model_spec(group.model)
        self.log(f"{group.model} h{spec.hidden(group.hidden)}: reference for {len(points)} point(s)")
        model = build_model(group)
        refs = [reference_for(group, model, pt) for pt in points]
        del model
        for ref in refs:
            self.points.append({"model": group.model, "hidden": group.hidden,
                                "model_hidden": spec.hidden(group.hidden), "tokens": ref.tokens,
                                "batch": ref.batch, "flops": ref.flops,
                                "flop_formula": {"leaf": spec.formula[0], "internal": spec.formula[1]},
                                **ref.shape})
        first = len(self.cases)
        specs = self.contenders(group.model)
        for c in specs:
            self.setup(c, group, refs)
        live = self.cases[first:]
        for r in range(self.opts.rounds):
            self.log(f"  round {r + 1}/{self.opts.rounds}")
            self.measure_round(r, live, points)
            self.measure_roof()
        for c in specs:
            h = self.hosts.get(c.key)
            if h is not None:
                try:
                    h.request("drop", SETUP_TIMEOUT_S)
                except WorkerError:
                    pass

    # ---------------------------------------------------------------- records
    def record(self, c: Case, ref_flops: int, roof_gflops: float | None = None) -> dict[str, Any]:
        g = c.group
        rec: dict[str, Any] = {"model": g.model, "hidden": g.hidden,
                               "model_hidden": model_spec(g.model).hidden(g.hidden),
                               "tokens": c.point[0], "batch": c.point[1], "kind": c.kind,
                               "name": c.name, "device": c.device, "status": c.status,
                               "reason": c.reason, **c.info}
        if c.status == "ok" and c.samples.get("call"):
            rec.update(timing_summary(c.samples["call"]))
            rec["gflops"] = ref_flops / (rec["median_ms"] * 1e-3) / 1e9 if rec["median_ms"] > 0 else None
            if roof_gflops and rec["gflops"] is not None:
                rec["roof_fraction"] = rec["gflops"] / roof_gflops
            rec["variants"] = {}
            for v, rounds in c.samples.items():
                if v != "call":
                    rec["variants"][v] = timing_summary(rounds)
        return rec

    def run(self) -> dict[str, Any]:
        o = self.opts
        started = datetime.now(timezone.utc)
        host = environment.host()
        groups: dict[tuple[str, int], list[Point]] = {}
        for m, h, t, b in o.points():
            groups.setdefault((m, h), []).append((t, b))
        try:
            for (m, h), pts in groups.items():
                self.run_group(GroupKey(m, h, o.embed, o.vocab, o.seed), pts)
        finally:
            self.close()
        fl = {(p["model"], p["hidden"], p["tokens"], p["batch"]): p["flops"] for p in self.points}
        roof = self.roof()
        roof_gflops = roof["gflops_median"] if roof else None
        records = [self.record(c, fl[(c.group.model, c.group.hidden, *c.point)], roof_gflops) for c in self.cases]
        host["loadavg_at_end"] = environment.loadavg()
        return {
            "schema": SCHEMA,
            "created_utc": started.isoformat(timespec="seconds"),
            "duration_s": round((datetime.now(timezone.utc) - started).total_seconds(), 1),
            "command": ["cortex", "bench", *sys.argv[2:]] if sys.argv[1:2] == ["bench"] else list(sys.argv),
            "quick": o.quick,
            "host": host,
            "versions": environment.versions(),
            "fairness": {"isolation": o.isolation, "method": ISOLATION_METHODS[o.isolation],
                         "workers": self.workers},
            "settings": self.settings(),
            "compile": self.compiles,
            "points": self.points,
            "roof": roof,
            "results": records,
            "summary": summarize(records),
            "notes": self.notes(),
        }

    def settings(self) -> dict[str, Any]:
        o = self.opts
        hb, tb, bb = o.base
        return {"models": list(o.models), "targets": list(o.targets),
                "peers": None if o.peers is None else list(o.peers),
                "batches": list(o.batches), "hiddens": list(o.hiddens), "tokens": list(o.tokens),
                "sweep": o.sweep, "base": {"hidden": hb, "tokens": tb, "batch": bb},
                "embed": o.embed, "vocab": o.vocab, "seed": o.seed, "dtype": "float32",
                "rounds": o.rounds, "timing": asdict(o.timing), "threads": o.threads,
                "variants": o.variants, "compile_options": dict(o.compile_options), "roof": o.roof,
                "tolerance": TOLERANCE}

    def notes(self) -> list[str]:
        notes = ["peers are timed on index tensors prepared outside the timed call; the Cortex "
                 "'call' includes the linearizer (its cache on: repeated structures)"]
        if self.opts.variants:
            notes.append("'call_uncached' runs the linearizer from scratch, 'run_prelinearized' "
                         "skips it; summary 'speedup_prepared_vs_best_peer' sets the latter "
                         "against the peers (neither side pays its input preparation)")
        if self.opts.isolation == "inprocess" and any(c.name == "dynet_autobatch" for c in self.cases):
            notes.append("DyNet ran in this process: its library sets flush-to-zero for the whole "
                         "process, so every contender ran with subnormals flushed")
        return notes


def run(opts: BenchOptions, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the benchmark ``opts`` describes and return the JSON document."""
    start = time.perf_counter()
    log = log or (lambda msg: print(f"[{time.perf_counter() - start:7.1f}s] {msg}",
                                    file=sys.stderr, flush=True))
    return Runner(opts, log).run()


def write_json(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=_jsonable) + "\n", encoding="utf-8")


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (Path, os.PathLike)):
        return str(v)
    return repr(v)
