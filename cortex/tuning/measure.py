"""Honest measurement of candidate schedules: compile, check against the reference, time.

Pipeline position: the tuner's hands. A :class:`Measurer` holds one model, target, dtype and
workload. It runs in the tuner's own process or, by default, in a worker process
(:mod:`cortex.tuning.worker`) that the tuner can kill when a compile or a run takes too long.

* :meth:`Measurer.baseline` compiles the target's default schedule: every candidate is timed
  against it.
* :meth:`Measurer.program_key` lowers a candidate (no rendering, no compiling) and names the
  program it gives: a candidate whose program was measured before is not compiled again.
* :meth:`Measurer.compile` compiles a candidate with ``cortex.compile``, runs it on every batch
  of the workload (which also warms it up: first-use tables, buffer pools) and compares every
  state at every node with the float64 reference under the suite's tolerance
  (:mod:`cortex.testing.tolerance`). A candidate that fails to compile or disagrees never
  wins; a legal schedule that disagrees is a compiler bug, and the error says where. The
  check's runs are timed too (``check_s``): the tuner does not time a candidate whose first
  pass took ``SKIP_TIMING`` times the default's first pass.
* :meth:`Measurer.time` times candidates in *interleaved rounds*: in each round the default
  and every candidate each run one sample (the whole workload, ``inner`` times), in an order
  rotated per round, so a change of machine load hits all of them alike. A candidate's score
  is the median over rounds of its time divided by the default's time in the same round. After
  the first round, candidates slower than ``cutoff`` times the default stop (their one-round
  ratio is what the search learns from).
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence
from unittest import mock

import numpy as np

#: a timing sample runs the workload this many times at least, and at least MIN_SAMPLE_S long
MIN_SAMPLE_S = 0.02


@dataclass(frozen=True)
class CompileResult:
    slot: int | None  # where the executable is kept for timing (None: it failed)
    ok: bool
    compile_s: float
    error: str = ""
    program_key: str = ""  # equal keys: the same program and source (measured once)
    schedule: dict[str, Any] | None = None  # the schedule as compiled (every knob)
    check_s: float = 0.0  # the check's first pass over the workload (tables filled, cold)


@dataclass(frozen=True)
class TimeResult:
    ratio: float  # median over rounds of candidate time / default time
    seconds: float  # median seconds of one pass over the workload
    rounds: int


@dataclass(frozen=True)
class BaselineInfo:
    schedule: dict[str, Any]
    compile_s: float
    check_s: float  # the default's first pass over the workload (as CompileResult.check_s)
    seconds: float  # one pass over the workload, median of a few
    inner: int  # workload passes per timing sample
    capabilities: Any
    graph_fingerprint: str | None  # None: a graph pass without an import name
    device_fingerprint: str
    device_info: dict[str, Any]


class Measurer:
    """Compiles, checks and times candidates for one model, target, dtype and workload."""

    def __init__(self, model: Any, target: str, target_options: Mapping[str, Any], dtype: str,
                 batches: Sequence[Any], reference: Sequence[Mapping[str, np.ndarray]],
                 compile_options: Mapping[str, Any] | None = None) -> None:
        self.model = model
        self.target = target
        self.target_options = dict(target_options)
        self.dtype = dtype
        self.batches = tuple(batches)
        self.reference = tuple(reference)
        self.compile_options = dict(compile_options or {})
        self._exes: dict[int, Any] = {}
        self._lowering: tuple[Any, Any] | None = None  # the graph after passes, capabilities
        self._next = 1
        self._inner = 1

    def _compile(self, schedule: Any) -> Any:
        """``cortex.compile`` with the disk caches off: candidates are one-off programs, and
        the caches, which never evict, would keep every one of them."""
        import cortex
        from cortex.core.diskcache import ENV_SWITCH

        with mock.patch.dict(os.environ, {ENV_SWITCH: "0"}):
            return cortex.compile(self.model, target=self.target, dtype=self.dtype,
                                  schedule=schedule, **self.compile_options, **self.target_options)

    def baseline(self) -> BaselineInfo:
        """Compile and check the default schedule (slot 0) and calibrate the timing sample."""
        from cortex.core.api import resolve_target
        from cortex.tuning.fingerprint import device_description, device_fingerprint

        result = self.compile("default", slot=0)
        if not result.ok:
            raise RuntimeError(f"the default schedule does not work on this workload: {result.error}")
        exe = self._exes[0]
        self._lowering = (exe.graph, exe.backend.capabilities)
        samples = [self._sample(exe, 1) for _ in range(3)]
        one = float(np.median(samples))
        self._inner = max(1, math.ceil(MIN_SAMPLE_S / max(one, 1e-9)))
        resolved, options = resolve_target(self.target, self.target_options)
        desc = device_description(resolved.name, options, exe.backend)
        return BaselineInfo(schedule=exe.schedule.to_dict(), compile_s=result.compile_s,
                            check_s=result.check_s, seconds=one, inner=self._inner, capabilities=exe.backend.capabilities,
                            graph_fingerprint=exe.graph_fingerprint,
                            device_fingerprint=device_fingerprint(desc), device_info=desc)

    def compile(self, schedule: Any, slot: int | None = None) -> CompileResult:
        """Compile ``schedule`` (a knob dict, a Schedule or ``"default"``) and check it."""
        t0 = time.perf_counter()
        try:
            exe = self._compile(schedule)
        except Exception as e:  # a legal schedule that does not compile: recorded, never wins
            return CompileResult(None, False, time.perf_counter() - t0,
                                 f"compile failed: {type(e).__name__}: {_first_line(e)}")
        compile_s = time.perf_counter() - t0
        sched = exe.schedule.to_dict()
        key = _program_key(exe.program)
        try:
            problem, check_s = self._check(exe)
        except Exception as e:
            problem, check_s = f"run failed: {type(e).__name__}: {_first_line(e)}", 0.0
        if problem:
            return CompileResult(None, False, compile_s, problem, key, sched, check_s)
        if slot is None:
            slot, self._next = self._next, self._next + 1
        self._exes[slot] = exe
        return CompileResult(slot, True, compile_s, "", key, sched, check_s)

    def program_key(self, schedule: Mapping[str, Any]) -> str | None:
        """The key of the program ``schedule`` lowers to, without rendering or compiling it
        (as :attr:`CompileResult.program_key`); None when it does not lower (its compile will
        say why). A backend translates the program it is given and reads nothing else of the
        schedule, so two schedules with one program run alike."""
        from cortex.core.lowering.lower import lower
        from cortex.core.lowering.schedule import ScheduleSpace

        graph, caps = self._lowering
        try:
            schedule = ScheduleSpace(caps, self.dtype).with_knobs(**schedule)
            return _program_key(lower(graph, schedule, caps, self.dtype).program)
        except Exception:  # noqa: BLE001 (the compile reports it)
            return None

    def _check(self, exe: Any) -> tuple[str, float]:
        """('' when every state of every batch is within tolerance of the reference, else what
        is wrong; the seconds of the runs)."""
        from cortex.testing.tolerance import compare_states

        run_s = 0.0
        for i, (batch, want) in enumerate(zip(self.batches, self.reference)):
            t0 = time.perf_counter()
            out = exe.run(batch)
            run_s += time.perf_counter() - t0
            got = {s: out.nodes(s) for s in out.states}
            bad = [e for e in compare_states(got, want, self.dtype) if not e.ok]
            if bad:
                e = bad[0]
                return (f"wrong outputs on batch {i}: state {e.state!r}: {e.bad} of {e.size} "
                        f"elements out of tolerance, worst at node row {e.row}: got {e.got!r}, "
                        f"want {e.want!r}"), run_s
        return "", run_s

    def _sample(self, exe: Any, inner: int) -> float:
        run, batches = exe.run, self.batches
        t0 = time.perf_counter()
        for _ in range(inner):
            for b in batches:
                run(b)
        return (time.perf_counter() - t0) / inner

    def time(self, slots: Sequence[int], rounds: int, cutoff: float = math.inf) -> dict[int, TimeResult]:
        """Time ``slots`` against the default (slot 0) in ``rounds`` interleaved rounds."""
        slots = [s for s in dict.fromkeys(slots) if s != 0]
        missing = [s for s in slots if s not in self._exes]
        if missing:
            raise KeyError(f"no compiled candidate in slots {missing}")
        ratios: dict[int, list[float]] = {s: [] for s in slots}
        seconds: dict[int, list[float]] = {s: [] for s in slots}
        active = list(slots)
        for r in range(max(1, rounds)):
            group = [0] + active
            k = r % len(group)
            t = {s: self._sample(self._exes[s], self._inner) for s in group[k:] + group[:k]}
            for s in active:
                ratios[s].append(t[s] / t[0])
                seconds[s].append(t[s])
            if r == 0:
                active = [s for s in active if ratios[s][0] <= cutoff]
            if not active:
                break
        return {s: TimeResult(float(np.median(ratios[s])), float(np.median(seconds[s])),
                              len(ratios[s])) for s in slots}

    def drop(self, slots: Sequence[int]) -> None:
        """Forget the executables in ``slots`` (never the default's)."""
        for s in slots:
            if s != 0:
                self._exes.pop(s, None)

    def close(self) -> None:
        self._exes.clear()


def _program_key(program: Any) -> str:
    return hashlib.sha256(str(program).encode()).hexdigest()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


def reference_states(model: Any, batches: Sequence[Any]) -> list[dict[str, np.ndarray]]:
    """The float64 reference's states of every node of each batch (from the traced graph)."""
    from cortex.core.frontend.reference import evaluate

    graph = model.trace()
    return [evaluate(graph, model.params, b) for b in batches]
