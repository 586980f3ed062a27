"""``cortex.tune``: search a model's schedule space on a workload and store the winner.

Pipeline position: beside the pipeline. It proposes schedules (:mod:`cortex.tuning.search`),
has them compiled, checked and timed (:mod:`cortex.tuning.measure`, in a worker process:
:mod:`cortex.tuning.worker`), and stores the winner as a tuning record
(:mod:`cortex.tuning.records`) that ``cortex.compile`` then uses by default. It never changes
what a compile does on its own: only a stored record does.

A session:

1. the workload (:mod:`cortex.tuning.workload`) is linearized and its float64 reference states
   computed once;
2. the worker compiles the default schedule: the yardstick every candidate is timed against,
   and the source of the graph and device fingerprints that key the records;
3. batches of candidates are proposed, lowered (a candidate whose program was measured before
   takes that result: no compile, no trial), compiled, checked against the reference and timed
   in interleaved rounds with the default, until the trial or time budget is spent (or Ctrl-C);
   every trial is stored as it is measured, so ``resume=True`` (the default) continues a
   session where it stopped, and trials of other workload classes train the cost model;
4. the best few that measured faster than the default are timed again against it in more
   interleaved rounds; the winner is stored only if it beats the default by ``MIN_GAIN``, else
   the record says the default rules were fastest.
"""

from __future__ import annotations

import math
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from cortex.core.lowering.schedule import Schedule, ScheduleSpace
from cortex.tuning.records import Record, RecordKey, RecordStore, Trial
from cortex.tuning.search import make_proposer, schedule_key
from cortex.tuning.workload import Workload, make_workload

ROUNDS = 5  # interleaved timing rounds per batch of candidates
VERIFY_ROUNDS = 15  # rounds of the final check against the default
CUTOFF = 3.0  # candidates slower than this times the default stop after one round
SKIP_TIMING = 10.0  # a candidate whose check ran this many times slower is not timed at all
ELITES = 3  # candidates kept compiled for the final check
MIN_GAIN = 0.02  # the winner must be this much faster than the default to be stored as such
BATCH = 8  # candidates proposed, compiled and timed together
MAX_PROPOSALS = 4  # stop after this many candidates per budgeted trial (most were duplicates)
# Knobs a session keeps at their default rule's value unless ``hold=`` says otherwise: the
# worker threads of a CPU target are a deployment decision (the cores the process may use), and
# their best value depends on what else runs on the machine while the session measures — on a
# busy machine one thread beats two in the tuner's rounds and loses on the same machine when
# it is quiet, so a record would store the load of the hour, not the model's schedule. And
# ``bf16_dot``: a session measures float32 weights (a bfloat16 compile takes the float32 record),
# where how bfloat16 weights are read changes nothing a session could measure. And
# ``tree_groups`` (a batch's trees as several work-groups of one launch, on OpenCL): like the
# threads, it gains only where a second core is free when the launch starts (docs/opencl.md);
# ``level_groups`` (one tree's levels shared by several work-groups) for the same reason.
HOLD = ("threads", "bf16_dot", "tree_groups", "level_groups")


@dataclass(frozen=True)
class Budget:
    """Stop after ``trials`` new candidates or ``seconds`` of the session (setup and final check
    included), whichever comes first. A compile running when time is up may overrun it by up to
    three typical compiles."""

    trials: int = 64
    seconds: float = 150.0

    def __post_init__(self) -> None:
        if not (isinstance(self.trials, int) and self.trials >= 1):
            raise ValueError(f"Budget.trials must be a positive int, got {self.trials!r}")
        if not (isinstance(self.seconds, (int, float)) and self.seconds > 0):
            raise ValueError(f"Budget.seconds must be a positive number, got {self.seconds!r}")


@dataclass
class TuneResult:
    """What a tuning session found, and how."""

    schedule: Schedule
    speedup: float  # the default's time / the chosen schedule's, in the final interleaved check
    key: RecordKey
    workload: Workload
    method: str
    record: Record | None  # as stored (None with store=False)
    trials: list[Trial] = field(default_factory=list)  # this session's, in measurement order
    curve: list[float] = field(default_factory=list)  # best speedup after each measured trial
    resumed: int = 0  # trials of this workload class loaded from earlier sessions
    elapsed_s: float = 0.0
    stopped_by: str = ""  # "trials", "seconds", "space" (nothing new to try), "interrupted"
    failures: list[str] = field(default_factory=list)  # legal schedules that failed: bugs
    # the final check: per finalist, its knobs, its ratio in the search and in the check
    # (candidate time / default time; None: it could not be compiled again)
    final_check: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        ok = sum(t.ok for t in self.trials if t.measured)
        measured = sum(t.measured for t in self.trials)
        same = len(self.trials) - measured
        chosen = "the default rules" if self.speedup == 1.0 else "a tuned schedule"
        checked = [f"{1 / c['search_ratio']:.2f}x -> {1 / c['verified_ratio']:.2f}x"
                   for c in self.final_check if c["verified_ratio"]]
        final = f"; finalists (search -> final check): {', '.join(checked)}" if checked else ""
        return (f"{measured} trials ({ok} valid, {self.resumed} resumed; {same} more candidates "
                f"gave programs already measured) in "
                f"{self.elapsed_s:.0f} s, stopped by {self.stopped_by}; workload "
                f"{self.key.workload}; {chosen}: {self.speedup:.2f}x the default's speed{final}")


def tune(model: Any, target: str = "llvm", *, workload: Any = None, budget: Budget | int | None = None,
         dtype: str | None = None, method: str = "model", seed: int = 0, resume: bool = True,
         store: bool = True, db: Any = None, isolate: bool = True, progress: bool = True,
         from_default: bool = True, compile_timeout: float | None = None,
         hold: Sequence[str] = HOLD, **options: Any) -> TuneResult:
    """Tune ``model``'s schedule for ``target`` on ``workload`` and store the winner.

    ``workload``: None (a synthetic :class:`~cortex.tuning.workload.WorkloadSpec`), a
    WorkloadSpec, a :class:`~cortex.tuning.workload.Workload` (``Workload.from_batches(model,
    batches)`` for your own batches) or a list of LinearizedBatch. ``budget``: a
    :class:`Budget`, or an int (trials; the default time limit). ``method``: ``"model"``
    (cost-model-guided) or ``"random"``. ``db``: the records database (default:
    ``cortex.tuning.records.db_path()``). ``isolate``: measure in a worker process with
    timeouts; ``compile_timeout``: seconds a candidate's compile and check may take there
    (default: max(10 s, 4x the default schedule's compile)). ``hold``: knobs kept at their
    default rule's value (default :data:`HOLD`: the threads; ``()`` searches every knob).
    ``options``: the compile options
    (``passes``, ``max_table_mib``) and the target's own options, as for ``cortex.compile``
    (``weights`` only as the compute dtype: a bfloat16-weights compile takes the float32 record).
    """
    from cortex.core.api import resolve_target
    from cortex.core.pipeline import split_options
    from cortex.tuning.measure import reference_states
    from cortex.tuning.worker import open_measurer

    from cortex.core.lowering.schedule import KNOB_NAMES

    t0 = time.perf_counter()
    unknown = sorted(set(hold) - set(KNOB_NAMES))
    if isinstance(hold, str) or unknown:
        raise ValueError(f"hold must be a sequence of knob names from {list(KNOB_NAMES)}, got {hold!r}")
    budget = Budget(trials=budget) if isinstance(budget, int) else (budget or Budget())
    shared, own = split_options(options)
    banned = sorted(set(shared) & {"dtype", "schedule", "dump", "workload"})
    if banned:
        raise TypeError(f"cortex.tune chooses {banned[0]!r} itself; give dtype= and workload= "
                        f"as its own arguments")
    if shared.get("weights") not in (None, dtype or model.dtype):
        raise TypeError(f"cortex.tune does not tune weights={shared['weights']!r} compiles: its "
                        f"records are keyed by the dtype alone. Tune the {dtype or model.dtype} "
                        f"compile; a weights={shared['weights']!r} compile with schedule='auto' "
                        f"takes its record")
    resolved, _ = resolve_target(target, own)
    runnable = resolved.runnable()
    if not runnable:
        raise RuntimeError(f"cannot tune for target {resolved.name!r}: it cannot run here "
                           f"({runnable.reason})")
    dtype = dtype or model.dtype
    wl = make_workload(model, workload)
    setup = {"model": model, "target": resolved.name, "target_options": own, "dtype": dtype,
             "batches": wl.batches, "reference": reference_states(model, wl.batches),
             "compile_options": shared}
    measurer = open_measurer(setup, isolate)
    try:
        session = _Session(measurer, wl, resolved.name, dtype, method, seed, from_default,
                           RecordStore(db) if db is not None or store or resume else None,
                           store, budget, t0, progress, model.name, compile_timeout, tuple(hold))
        return session.run(resume)
    finally:
        measurer.close()


class _Session:
    """One tuning session's state (see the module docstring for the steps)."""

    def __init__(self, measurer: Any, wl: Workload, target: str, dtype: str, method: str, seed: int,
                 from_default: bool, db: RecordStore | None, store: bool, budget: Budget,
                 t0: float, progress: bool, model_name: str, compile_timeout: float | None,
                 hold: tuple[str, ...] = ()) -> None:
        info = measurer.info
        if info.graph_fingerprint is None:
            raise ValueError("cannot tune a compile whose graph passes include one without an "
                             "import name (a lambda, a function made in a function): its tuning "
                             "records could never be matched")
        self.given_timeout = compile_timeout
        self.m, self.wl, self.info, self.db, self.store = measurer, wl, info, db, store
        self.budget, self.t0, self.method, self.model_name = budget, t0, method, model_name
        self.space = ScheduleSpace(info.capabilities, dtype)
        self.key = RecordKey(info.graph_fingerprint, target, info.device_fingerprint, dtype,
                             wl.workload_class)
        self.features = tuple(wl.stats.features())
        default = self.space.default()
        self.held = {k: getattr(default, k) for k in hold}
        self.proposer = make_proposer(method, self.space, seed, self.features, from_default, self.held)
        self.session = uuid.uuid4().hex[:12]
        self.trials: list[Trial] = []
        self.curve: list[float] = []
        self.failures: list[str] = []
        self.history: list[Trial] = []  # this class's trials of earlier sessions
        self.programs: dict[str, tuple[float | None, str]] = {}  # program key -> (ratio, error)
        self.requeued: list[Schedule] = []  # compiled, then lost with a replaced worker
        self.elites: dict[int, tuple[float, dict[str, Any], int]] = {}  # slot -> (ratio, knobs, gen)
        self.final_check: list[dict[str, Any]] = []
        self.compile_times = [info.compile_s]
        self.bar = _Progress(budget.trials, f"tune {model_name} on {target} ({method})", progress)

    @property
    def compile_timeout(self) -> float:
        """Seconds a candidate's compile and check may take: as given, else max(10 s, 4x the
        default schedule's compile as last measured). A worker replaced after a timeout compiles
        the default again, so on a machine that got busier the limit grows with it instead of
        stopping every candidate from then on."""
        return self.given_timeout or max(10.0, 4 * self.m.info.compile_s)

    def remaining(self) -> float:
        """Seconds of search left: the budget minus the time spent and the final check's."""
        final_check = VERIFY_ROUNDS * (ELITES + 1) * self.info.seconds * self.info.inner + 2.0
        return self.budget.seconds - (time.perf_counter() - self.t0) - final_check

    def run(self, resume: bool) -> TuneResult:
        if resume and self.db is not None:
            self._resume()
        stopped = "trials"
        try:
            while self.measured() < self.budget.trials:
                if self.remaining() <= 0:
                    stopped = "seconds"
                    break
                n = min(BATCH, self.budget.trials - self.measured())
                cands, self.requeued = self.requeued[:n], self.requeued[n:]
                cands += self.proposer.propose(n - len(cands)) if len(cands) < n else []
                if not cands or len(self.trials) >= MAX_PROPOSALS * self.budget.trials:
                    stopped = "space"
                    break
                if not self._measure_batch(cands):
                    stopped = "seconds"
                    break
        except KeyboardInterrupt:
            stopped = "interrupted"
        finally:
            self.bar.close()
        schedule, ratio, seconds = self._verify()
        return self._finish(schedule, ratio, seconds, stopped)

    def _resume(self) -> None:
        assert self.db is not None
        own, other = [], {}
        for t in self.db.trials(*(self.key.graph, self.key.target, self.key.device, self.key.dtype)):
            if t.workload == self.key.workload:
                own.append(t)
            else:
                other.setdefault(t.features, []).append(t)
        for features, trials in other.items():
            self.proposer.observe(trials, features, own=False)
        self.proposer.observe(own, self.features, own=True)
        self.history = own

    def measured(self) -> int:
        return sum(t.measured for t in self.trials)

    def _measure_batch(self, cands: list[Schedule]) -> bool:
        """Compile, check and time ``cands``; False when the time ran out before any compiled.
        A candidate whose program was measured (or failed) before takes that result and is
        neither compiled nor timed: it does not count against the trial budget."""
        done: list[Trial] = []
        pending: list[tuple[int, Schedule, float, str, int]] = []  # (slot, schedule, compile s, key, gen)
        for s in cands:
            typical = float(np.median(self.compile_times))
            if self.remaining() < typical:
                break
            knobs = s.to_dict()
            key = self.m.program_key(knobs, self.compile_timeout)
            if key is not None and key in self.programs:
                ratio, error = self.programs[key]
                done.append(self._trial(knobs, ratio, 0.0, error, measured=False))
                continue
            # near the end of the time budget a slow compile is cut short
            r = self.m.compile(knobs, min(self.compile_timeout, max(self.remaining(), 3 * typical)))
            self.compile_times.append(r.compile_s)
            key = key or r.program_key
            if not r.ok:
                done.append(self._trial(knobs, None, r.compile_s, r.error))
                if "stopped" not in r.error:
                    self.failures.append(f"{schedule_key(knobs)}: {r.error}")
            elif r.check_s > SKIP_TIMING * self.info.check_s:  # far slower: its check says so
                self.m.drop([r.slot])
                done.append(self._trial(knobs, r.check_s / self.info.check_s, r.compile_s))
            else:
                pending.append((r.slot, s, r.compile_s, key, self.m.generation))
                continue
            if key:
                self.programs[key] = (done[-1].ratio, done[-1].error)
            self.bar.step()
        # a worker replaced by a later candidate's timeout took these with it (and a new worker
        # numbers its slots afresh): compile them again in the next batch
        self.requeued += [p[1] for p in pending if p[4] != self.m.generation]
        pending = [p for p in pending if p[4] == self.m.generation]
        if pending:
            timing_timeout = 120.0 + 5 * ROUNDS * (len(pending) + 1) * CUTOFF * self.info.seconds * self.info.inner
            results = self.m.time([p[0] for p in pending], ROUNDS, CUTOFF, timing_timeout)
            for slot, s, compile_s, key, _ in pending:
                knobs = s.to_dict()
                res = results.get(slot)
                if res is None:
                    continue  # lost with a replaced worker: not a trial
                self.programs[key] = (res.ratio, "")
                done.append(self._trial(knobs, res.ratio, compile_s))
                self.elites[slot] = (res.ratio, knobs, self.m.generation)
                self.bar.step()
            self._keep_elites()
        if not done:
            return bool(cands) and self.remaining() > 0
        best = self.curve[-1] if self.curve else self._best_speedup([])
        for t in done:
            if t.ok and t.ratio:
                best = max(best, 1.0 / t.ratio)
            if t.measured:
                self.curve.append(best)
        self.trials += done
        self.proposer.observe(done, self.features, own=True)
        if self.db is not None and self.store:
            self.db.add_trials(self.key, done)
        self.bar.best(best)
        return True

    def _trial(self, knobs: dict[str, Any], ratio: float | None, compile_s: float,
               error: str = "", measured: bool = True) -> Trial:
        return Trial(knobs, ratio is not None, ratio, compile_s, error, self.features,
                     self.key.workload, self.session, measured)

    def _best_speedup(self, trials: list[Trial]) -> float:
        """The best speedup over the default among ``trials`` and the resumed ones (0: none)."""
        ratios = [t.ratio for t in self.history + trials if t.ok and t.ratio]
        return 1.0 / min(ratios) if ratios else 0.0

    def _keep_elites(self) -> None:
        alive = {s: e for s, e in self.elites.items() if e[2] == self.m.generation}
        keep = dict(sorted(alive.items(), key=lambda kv: kv[1][0])[:ELITES])
        self.m.drop([s for s in self.elites if s not in keep and s in alive])
        self.elites = keep

    def _verify(self) -> tuple[dict[str, Any] | None, float, float]:
        """Time the best few again against the default: (winner's knobs or None, ratio, s)."""
        # measured ones only: a candidate that lowered to a program measured before is that
        # program again, and would take a finalist's place without being another candidate
        ranked = sorted((t for t in self.history + self.trials
                         if t.measured and t.ok and t.ratio and t.ratio < 1.0
                         and all(t.schedule.get(k) == v for k, v in self.held.items())),
                        key=lambda t: t.ratio)
        chosen: dict[str, dict[str, Any]] = {}
        search_ratio: dict[str, float] = {}
        for t in ranked:
            chosen.setdefault(schedule_key(t.schedule), t.schedule)
            search_ratio.setdefault(schedule_key(t.schedule), t.ratio)
            if len(chosen) == ELITES:
                break
        if not chosen:
            return None, 1.0, self.info.seconds
        slots: dict[int, dict[str, Any]] = {}
        alive = {schedule_key(e[1]): s for s, e in self.elites.items() if e[2] == self.m.generation}
        for k, knobs in chosen.items():
            if k in alive:
                slots[alive[k]] = knobs
            else:  # from a resumed session, or lost with a replaced worker: compile again
                r = self.m.compile(knobs, self.compile_timeout)
                if r.ok:
                    slots[r.slot] = knobs
        if not slots:
            return None, 1.0, self.info.seconds
        timeout = 120.0 + 5 * VERIFY_ROUNDS * (len(slots) + 1) * self.info.seconds * self.info.inner
        results = self.m.time(list(slots), VERIFY_ROUNDS, math.inf, timeout)
        verified = {schedule_key(knobs): results[s].ratio for s, knobs in slots.items() if s in results}
        self.final_check = [{"schedule": knobs, "search_ratio": search_ratio[k],
                             "verified_ratio": verified.get(k)} for k, knobs in chosen.items()]
        if not results:
            return None, 1.0, self.info.seconds
        slot = min(results, key=lambda s: results[s].ratio)
        res = results[slot]
        if res.ratio > 1.0 - MIN_GAIN:
            return None, 1.0, res.seconds / res.ratio
        return slots[slot], res.ratio, res.seconds

    def _finish(self, knobs: dict[str, Any] | None, ratio: float, seconds: float,
                stopped: str) -> TuneResult:
        from cortex import __version__

        schedule = self.space.with_knobs(**knobs) if knobs is not None else self.space.default()
        speedup = 1.0 / ratio
        record = Record(key=self.key, schedule=schedule.to_dict(), speedup=speedup, seconds=seconds,
                        default_seconds=seconds / ratio,
                        trials=sum(t.measured for t in self.history + self.trials),
                        method=self.method, model=self.model_name, device_info=self.info.device_info,
                        workload_info={**self.wl.stats.to_dict(), "description": self.wl.description},
                        cortex_version=__version__, created=time.time())
        stored = None
        if self.store and self.db is not None:
            self.db.put(record)
            stored = next((r for r in self.db.records(self.key.graph, self.key.target,
                                                       self.key.device, self.key.dtype)
                           if r.key == self.key), record)
            self.db.close()
        if self.failures:
            warnings.warn(f"{len(self.failures)} legal schedules failed to compile or disagreed "
                          f"with the reference (a compiler bug; please report it); first: "
                          f"{self.failures[0]}", RuntimeWarning, stacklevel=3)
        return TuneResult(schedule=schedule, speedup=speedup, key=self.key, workload=self.wl,
                          method=self.method, record=stored, trials=self.trials, curve=self.curve,
                          resumed=sum(t.measured for t in self.history), elapsed_s=time.perf_counter() - self.t0,
                          stopped_by=stopped, failures=self.failures, final_check=self.final_check)


class _Progress:
    """A tqdm bar of trials with the best speedup so far (plain lines without tqdm)."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self._bar = None
        self._enabled = enabled
        self._n = 0
        self._total = total
        self._desc = desc
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, desc=desc, unit="trial", file=sys.stderr)

    def step(self) -> None:
        self._n += 1
        if self._bar is not None:
            self._bar.update(1)

    def best(self, speedup: float) -> None:
        text = f"best {speedup:.2f}x default" if speedup else "no valid candidate yet"
        if self._bar is not None:
            self._bar.set_postfix_str(text)
        elif self._enabled:
            print(f"{self._desc}: {self._n}/{self._total} trials, {text}", file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
