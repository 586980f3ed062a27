"""The learned cost model: which candidate schedules are worth measuring next.

Pipeline position: inside the search (:mod:`cortex.tuning.search`), as in Ansor and
MetaSchedule: a regressor trained online on the measured trials predicts each unmeasured
candidate's log time relative to the default schedule, and the search measures the most
promising ones.

Features (:class:`Encoder`) are derived from the space alone — ``ScheduleSpace.knobs`` and
their ``choices`` — so a knob added to the space (a layout, a jam stage, a kernel-form
threshold) is searched and learned without a change here: a bool knob is one 0/1 column, a
knob whose choices are all numbers a ``log2(1 + value)`` column, any other knob (strings,
tuples) one-hot over its choices, and a number knob one-hot as well (a tree then isolates a
middle value such as ``tile_hidden=32`` with one split, not two). The workload's statistics
(:meth:`~cortex.tuning.workload.WorkloadStats.features`) are appended, so trials tuned on other
workload classes of the same model and device can train the model too.

The regressor (:class:`CostModel`) is scikit-learn's random forest on ``log(ratio)``: it needs
no tuning of its own, is robust with a few dozen samples, and its trees disagree where it
knows little, which the search uses for Thompson sampling: each pick of a batch is the best
candidate by the mean of a few randomly drawn trees, so a batch spreads over the candidates
the model is unsure of instead of eight near-copies of one guess. scikit-learn is imported only when a model-guided
search starts (the ``tune`` extra).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np


def _norm(v: Any) -> Any:
    """JSON turns tuples into lists: compare knob values in one form."""
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    return v


class Encoder:
    """Schedule (a knob dict) + workload features -> a feature vector, from the space's knobs;
    a knob a schedule lacks (a record older than the knob) reads as its value in ``defaults``."""

    def __init__(self, knobs: Sequence[Any], defaults: Mapping[str, Any]) -> None:
        self._columns: list[tuple[str, str, Any]] = []  # (knob, kind, choice for one-hot)
        self._defaults = {k: _norm(v) for k, v in defaults.items()}
        for k in knobs:
            choices = [_norm(c) for c in k.choices]
            if len(choices) < 2:
                continue  # a knob with one choice says nothing
            if all(isinstance(c, bool) for c in choices):
                self._columns.append((k.name, "bool", None))
            elif all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices):
                self._columns.append((k.name, "number", None))
                self._columns += [(k.name, "onehot", c) for c in choices]
            else:
                self._columns += [(k.name, "onehot", c) for c in choices]

    @property
    def names(self) -> list[str]:
        return [name if kind != "onehot" else f"{name}={choice}" for name, kind, choice in self._columns]

    def encode(self, schedule: Mapping[str, Any], workload: Sequence[float] = ()) -> np.ndarray:
        row = []
        for name, kind, choice in self._columns:
            v = _norm(schedule.get(name, self._defaults[name]))
            if kind == "bool":
                row.append(float(bool(v)))
            elif kind == "number":
                row.append(math.log2(1.0 + max(0.0, float(v))))
            else:
                row.append(float(v == choice))
        return np.asarray(row + [float(x) for x in workload], dtype=np.float64)


class CostModel:
    """A random forest on ``log(time / default time)``, with a per-candidate uncertainty."""

    def __init__(self, seed: int = 0, trees: int = 64) -> None:
        from sklearn.ensemble import RandomForestRegressor

        self._forest = RandomForestRegressor(n_estimators=trees, min_samples_leaf=1,
                                             max_features=0.5, random_state=seed, n_jobs=1)
        self.fitted = False

    def fit(self, X: np.ndarray, y: np.ndarray) -> None:
        self._forest.fit(X, y)
        self.fitted = True

    def per_tree(self, X: np.ndarray) -> np.ndarray:
        """``[trees, rows]``: each tree's predicted log ratio of each row of ``X``."""
        return np.stack([t.predict(X) for t in self._forest.estimators_])

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std) of the predicted log ratio of each row of ``X``."""
        per_tree = self.per_tree(X)
        return per_tree.mean(axis=0), per_tree.std(axis=0)
