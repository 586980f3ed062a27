"""Searching the schedule space: random search and cost-model-guided search.

Pipeline position: the tuner's plan. A proposer picks the next batch of candidate schedules
from the target's :class:`~cortex.core.lowering.schedule.ScheduleSpace` — every knob it
offers, layout knobs and loop knobs jointly — and learns from each measured batch:

* :class:`RandomProposer` samples the space uniformly (the baseline every search is judged
  against);
* :class:`ModelProposer` trains the cost model (:mod:`cortex.tuning.cost_model`) on every trial
  so far and, like Ansor's evolutionary search, scores a pool of fresh random schedules and
  of mutations (one to three knobs changed) of the best measured ones, then picks ``n - 1`` of
  them by Thompson sampling (each the fastest by the mean of ``THOMPSON_TREES`` randomly drawn
  trees of the forest: a diverse batch where the model is unsure, not eight near-copies of one
  guess) and one uniformly random schedule (exploration). ``from_default=True`` treats the
  default schedule as a measured point (ratio 1): until two valid trials can train the model,
  the batch is mutants of the default (and one random schedule), so the search starts around
  the hand-written rules; without it, the first batch is random.

Both skip schedules already measured (in this session or a resumed one), and both keep the
``held`` knobs (the tuner's ``hold``) at the values given. Knob values are taken from the
space, never named here.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from cortex.core.lowering.schedule import Schedule, ScheduleSpace
from cortex.tuning.records import Trial

METHODS = ("model", "random")
POOL_RANDOM = 512  # fresh random schedules scored per batch
POOL_MUTANTS = 48  # mutants of each parent
PARENTS = 6  # the best measured schedules mutated
THOMPSON_TREES = 8  # each pick of a batch is the best by the mean of this many random trees
FAILED_PENALTY = math.log(4.0)  # a failed trial counts as 4x slower than the slowest seen


def schedule_key(schedule: Schedule | dict[str, Any]) -> str:
    d = schedule.to_dict() if isinstance(schedule, Schedule) else schedule
    return json.dumps(d, sort_keys=True)


class RandomProposer:
    """Uniform random legal schedules not measured yet."""

    def __init__(self, space: ScheduleSpace, rng: np.random.Generator,
                 held: dict[str, Any] | None = None) -> None:
        self.space = space
        self.rng = rng
        self.held = dict(held or {})
        self.measured: set[str] = set()

    def _hold(self, s: Schedule) -> Schedule | None:
        """``s`` with the held knobs at their values (None when that is not legal)."""
        if not self.held:
            return s
        s = replace(s, **self.held)
        return None if self.space.problems(s) else s

    def observe(self, trials: Sequence[Trial], features: Sequence[float], own: bool = True) -> None:
        """Note ``trials``: measured on this workload class (``own``) or another one."""
        if own:
            self.measured.update(schedule_key(t.schedule) for t in trials)

    def _fresh(self, n: int, taken: set[str]) -> list[Schedule]:
        out: list[Schedule] = []
        for _ in range(50):
            if len(out) >= n:
                break
            for s in filter(None, map(self._hold, self.space.sample(self.rng, max(8, 2 * n)))):
                k = schedule_key(s)
                if k not in taken and len(out) < n:
                    taken.add(k)
                    out.append(s)
        return out

    def propose(self, n: int) -> list[Schedule]:
        return self._fresh(n, set(self.measured))


class ModelProposer(RandomProposer):
    """Cost-model-guided proposals (see the module docstring)."""

    def __init__(self, space: ScheduleSpace, rng: np.random.Generator, features: Sequence[float],
                 *, from_default: bool = True, seed: int = 0, held: dict[str, Any] | None = None) -> None:
        from cortex.tuning.cost_model import CostModel, Encoder

        super().__init__(space, rng, held)
        self.encoder = Encoder(space.knobs, space.default().to_dict())
        self.features = tuple(features)
        self.model = CostModel(seed=seed)
        self._rows: list[np.ndarray] = []
        self._y: list[float | None] = []  # log ratio; None = failed
        self._own: list[tuple[float, Schedule]] = []  # (log ratio, schedule) of this workload
        self._knobs = [k for k in space.knobs if len(k.choices) > 1 and k.name not in self.held]
        if from_default:
            self._add(space.default().to_dict(), 0.0, self.features, True)

    def _add(self, schedule: dict[str, Any], y: float | None, features: Sequence[float],
             own: bool) -> None:
        self._rows.append(self.encoder.encode(schedule, features))
        self._y.append(y)
        if own and y is not None:
            try:
                self._own.append((y, self.space.with_knobs(**schedule)))
            except Exception:  # noqa: BLE001 (a stored schedule this space no longer takes)
                pass

    def observe(self, trials: Sequence[Trial], features: Sequence[float], own: bool = True) -> None:
        """Learn from ``trials`` measured on a workload with ``features``: this workload class
        (``own``: this session's or a resumed one's) or another (transfer)."""
        super().observe(trials, features, own)
        for t in trials:
            ok = t.ok and t.ratio is not None and t.ratio > 0
            self._add(t.schedule, math.log(t.ratio) if ok else None, features, own)

    def _training_set(self) -> tuple[np.ndarray, np.ndarray]:
        ok = [y for y in self._y if y is not None]
        worst = (max(ok) if ok else 0.0) + FAILED_PENALTY
        y = np.asarray([worst if v is None else v for v in self._y])
        return np.stack(self._rows), y

    def _mutate(self, parent: Schedule, count: int) -> list[Schedule]:
        out = []
        for _ in range(count * 3):
            if len(out) >= count or not self._knobs:
                break
            changes = {}
            for i in self.rng.choice(len(self._knobs), size=min(len(self._knobs), int(self.rng.integers(1, 4))),
                                     replace=False):
                k = self._knobs[int(i)]
                others = [c for c in k.choices if c != getattr(parent, k.name)]
                changes[k.name] = others[int(self.rng.integers(len(others)))]
            child = self._hold(replace(parent, **changes))
            if child is not None and not self.space.problems(child):
                out.append(child)
        return out

    def _mutants(self, taken: set[str]) -> dict[str, Schedule]:
        """Mutants of the best measured schedules of this workload, not measured yet."""
        out: dict[str, Schedule] = {}
        for _, parent in sorted(self._own, key=lambda p: p[0])[:PARENTS]:
            for s in self._mutate(parent, POOL_MUTANTS):
                k = schedule_key(s)
                if k not in taken:
                    out[k] = s
        return out

    def propose(self, n: int) -> list[Schedule]:
        taken = set(self.measured)
        if sum(1 for y in self._y if y is not None) < 2:
            # nothing to learn from yet: around the default (from_default), else at random
            near = list(self._mutants(taken).values())
            picks = [near[int(i)] for i in self.rng.permutation(len(near))[:max(0, n - 1)]]
            return picks + self._fresh(n - len(picks), taken | {schedule_key(s) for s in picks})
        X, y = self._training_set()
        self.model.fit(X, y)
        pool = self._mutants(taken)
        for s in self._fresh(POOL_RANDOM, set(taken)):
            pool[schedule_key(s)] = s
        keys = list(pool)
        if not keys:
            return []
        per_tree = self.model.per_tree(np.stack([self.encoder.encode(pool[k].to_dict(), self.features)
                                                 for k in keys]))
        chosen: list[str] = []
        for j in range(min(len(keys), max(1, n - 1))):
            # Thompson sampling: each pick is the best candidate of one randomly drawn tree
            pick = self.rng.choice(len(per_tree), size=THOMPSON_TREES, replace=False)
            tree = per_tree[pick].mean(axis=0)
            tree[[keys.index(k) for k in chosen]] = np.inf
            chosen.append(keys[int(np.argmin(tree))])
        taken.update(chosen)
        out = [pool[k] for k in chosen]
        out += self._fresh(n - len(out), taken)  # exploration: one uniform sample
        return out


def make_proposer(method: str, space: ScheduleSpace, seed: int, features: Sequence[float],
                  from_default: bool, held: dict[str, Any] | None = None) -> RandomProposer:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    rng = np.random.default_rng(seed)
    if method == "random":
        return RandomProposer(space, rng, held)
    return ModelProposer(space, rng, features, from_default=from_default, seed=seed, held=held)
