"""The workload a tuning session measures on, and its class (the records' key).

Pipeline position: beside the pipeline, the tuner's first input. A candidate schedule is timed
on a *representative workload*: a few batches of structures, either the user's own
(:meth:`Workload.from_batches`) or drawn from stated statistics (:class:`WorkloadSpec`: batch
size, nodes per structure, shape). Either way the batches are linearized once, for the model,
and their statistics (:class:`WorkloadStats`) are measured from the linearized arrays, so a
synthetic workload and a user's batches of the same kind get the same class.

The *workload class* is ``b<B>-n<N>-<shape>``: ``B`` and ``N`` are the powers of two at or
below the median batch size and the mean nodes per structure (``b8`` = batches of 8-15
structures, ``n32`` = 32-63 nodes each), and ``shape`` is one of

=========  ==============================================================================
chain      levels >= 0.9 x (internal nodes + 1): every internal node on a level of its own
           (sequences, caterpillars, unary chains)
balanced   levels <= log2(nodes) + 2 for most structures: full trees
parse      anything in between: parse-like trees, random recursive trees
dag        some node has several parents (DAGs, grids)
=========  ==============================================================================

A schedule tuned on one class is stored under that class; ``cortex.compile`` prefers the
record of the class it is asked for (``workload=``), else the nearest one
(:mod:`cortex.tuning.workload_class` parses and compares class names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cortex.core.linearize import linearize
from cortex.core.linearize.structure import LinearizedBatch
from cortex.tuning.workload_class import CLASS_SHAPES, class_name

SHAPES = ("parse", "balanced", "chain", "dag", "grid")  # what a WorkloadSpec may ask for


@dataclass(frozen=True)
class WorkloadSpec:
    """A synthetic workload: ``batches`` batches of ``batch_size`` structures whose node counts
    are drawn log-normally around ``nodes`` (``spread`` is the log-normal's sigma; 0 makes every
    structure the same size), of ``shape`` (``"parse"`` trees by default; sequence models always
    get chains), with random tokens or features, reproducible from ``seed``."""

    batch_size: int = 10
    nodes: int = 60
    shape: str = "parse"
    batches: int = 3
    spread: float = 0.4
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise ValueError(f"WorkloadSpec.batch_size must be a positive int, got {self.batch_size!r}")
        if not (isinstance(self.nodes, int) and self.nodes >= 1):
            raise ValueError(f"WorkloadSpec.nodes must be a positive int, got {self.nodes!r}")
        if not (isinstance(self.batches, int) and self.batches >= 1):
            raise ValueError(f"WorkloadSpec.batches must be a positive int, got {self.batches!r}")
        if self.shape not in SHAPES:
            raise ValueError(f"WorkloadSpec.shape must be one of {SHAPES}, got {self.shape!r}")
        if not (isinstance(self.spread, (int, float)) and 0 <= self.spread <= 2):
            raise ValueError(f"WorkloadSpec.spread must be a number in [0, 2], got {self.spread!r}")


@dataclass(frozen=True)
class WorkloadStats:
    """What the tuner and the records know of a workload (measured from its batches)."""

    batches: int
    batch_size: float  # median structures per batch
    nodes: float  # mean nodes per structure
    levels: float  # mean levels (height + 1) per structure
    shape: str  # one of CLASS_SHAPES

    @property
    def workload_class(self) -> str:
        return class_name(self.batch_size, self.nodes, self.shape)

    def features(self) -> list[float]:
        """Numeric features for the cost model (log sizes and the shape, one-hot)."""
        return ([math.log2(self.batch_size), math.log2(self.nodes), math.log2(self.levels)]
                + [float(self.shape == s) for s in CLASS_SHAPES])

    def to_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "batch_size": self.batch_size, "nodes": self.nodes,
                "levels": self.levels, "shape": self.shape, "class": self.workload_class}


def stats_of(batches: Sequence[LinearizedBatch]) -> WorkloadStats:
    """Measure a workload's statistics from its linearized batches."""
    if not batches:
        raise ValueError("a workload needs at least one batch")
    sizes, nodes, internal, levels, shared = [], [], [], [], False
    for b in batches:
        level_of = np.searchsorted(b.level_offsets, np.arange(b.num_nodes), side="right") - 1
        per_input_nodes = np.bincount(b.node_input, minlength=b.batch_size)
        has_children = np.diff(b.child_offsets) > 0
        sizes.append(b.batch_size)
        nodes += per_input_nodes.tolist()
        internal += np.bincount(b.node_input, weights=has_children, minlength=b.batch_size).tolist()
        levels += (level_of[b.roots] + 1).tolist()
        if len(b.child_ids) and np.bincount(b.child_ids, minlength=b.num_nodes).max() > 1:
            shared = True
    n, lv, inner = np.asarray(nodes, float), np.asarray(levels, float), np.asarray(internal, float)
    big = inner >= 2
    if shared:
        shape = "dag"
    elif not big.any():
        shape = "balanced"
    elif float(np.mean(lv[big] / (inner[big] + 1))) >= 0.9:
        shape = "chain"
    elif float(np.mean(lv[big] <= np.log2(n[big]) + 2)) >= 0.5:
        shape = "balanced"
    else:
        shape = "parse"
    return WorkloadStats(batches=len(batches), batch_size=float(np.median(sizes)),
                         nodes=float(n.mean()), levels=float(lv.mean()), shape=shape)


@dataclass(frozen=True)
class Workload:
    """Linearized batches for one model, their statistics and where they came from."""

    batches: tuple[LinearizedBatch, ...]
    stats: WorkloadStats
    description: str

    @property
    def workload_class(self) -> str:
        return self.stats.workload_class

    @classmethod
    def from_batches(cls, model: Any, batches: Sequence[Any], *, vocab: Any = None,
                     description: str = "the user's batches") -> "Workload":
        """The user's own batches: each a list of structures (any form ``cortex.compile``'s
        executables take) or a ready :class:`LinearizedBatch`."""
        if isinstance(batches, LinearizedBatch) or not isinstance(batches, Sequence) or not batches:
            raise ValueError("Workload.from_batches takes a non-empty list of batches (each a list "
                             "of structures or a LinearizedBatch)")
        opts = _linearize_options(model)
        out = []
        for i, b in enumerate(batches):
            if isinstance(b, LinearizedBatch):
                b.validate()
                out.append(b)
            elif isinstance(b, list) and b:
                out.append(linearize(b, vocab=vocab, cache=False, **opts))
            else:
                raise ValueError(f"batch {i} of the workload is a {type(b).__name__}; give a "
                                 f"non-empty list of structures or a LinearizedBatch")
        return cls(tuple(out), stats_of(out), description)

    @classmethod
    def from_spec(cls, model: Any, spec: WorkloadSpec) -> "Workload":
        """A synthetic workload drawn from ``spec`` for ``model``'s arity and inputs."""
        opts = _linearize_options(model)
        rng = np.random.default_rng(spec.seed)
        arity = opts["arity"]
        batches = []
        for _ in range(spec.batches):
            structures = []
            for _ in range(spec.batch_size):
                n = _draw_size(rng, spec.nodes, spec.spread)
                structures.append(_structure(spec.shape, arity, n, rng, opts["vocab_size"],
                                             opts["feature_dim"]))
            batches.append(linearize(structures, cache=False, **opts))
        desc = (f"synthetic: {spec.batches} batches of {spec.batch_size} {spec.shape} structures "
                f"of ~{spec.nodes} nodes (seed {spec.seed})")
        return cls(tuple(batches), stats_of(batches), desc)


def make_workload(model: Any, workload: Any) -> Workload:
    """What ``cortex.tune(workload=...)`` accepts: None (the default :class:`WorkloadSpec`), a
    WorkloadSpec, a Workload, or a list of LinearizedBatch."""
    if workload is None:
        return Workload.from_spec(model, WorkloadSpec())
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, WorkloadSpec):
        return Workload.from_spec(model, workload)
    if isinstance(workload, Sequence) and workload and all(isinstance(b, LinearizedBatch) for b in workload):
        return Workload.from_batches(model, list(workload))
    raise TypeError("workload must be None, a cortex.tuning.WorkloadSpec, a cortex.tuning.Workload "
                    "(Workload.from_batches(model, batches) for your own batches) or a list of "
                    f"LinearizedBatch; got {type(workload).__name__}")


def _linearize_options(model: Any) -> dict[str, Any]:
    from cortex.core.runtime.executable import linearize_options

    return linearize_options(model.trace())


def _draw_size(rng: np.random.Generator, mean: int, spread: float) -> int:
    if spread == 0:
        return mean
    return max(1, int(round(mean * math.exp(spread * rng.standard_normal() - spread ** 2 / 2))))


def _structure(shape: str, arity: int | None, n: int, rng: np.random.Generator,
               vocab: int | None, features: int | None) -> Any:
    from cortex.testing import structures as S

    if arity == 1:  # sequence models read chains only
        form: Any = ("sequence", n)
    elif shape == "grid":
        if arity is not None:
            raise ValueError(f"grid workloads need a variable-arity model; this one has arity {arity}")
        rows = max(1, int(round(math.sqrt(n))))
        form = ("grid", rows, max(1, int(round(n / rows))))
    elif arity is None:
        k, leaves = 3, max(3, n // 3)
        form = {
            "parse": lambda: S.random_recursive(rng, n),
            "balanced": lambda: S.balanced(max(0, round(math.log(max(1, 2 * n + 1), k)) - 1), k),
            "chain": lambda: S.unary_chain(n),
            "dag": lambda: S.dag(rng, leaves, max(1, n - leaves), None),
        }[shape]()
    else:
        k = arity
        leaves = max(1, round((n * (k - 1) + 1) / k))
        form = {
            "parse": lambda: S.parse_like(rng, leaves, k),
            "balanced": lambda: S.balanced(max(0, round(math.log(max(1, n * (k - 1) + 1), k)) - 1), k),
            "chain": lambda: S.caterpillar(max(0, round((n - 1) / k)), k),
            "dag": lambda: S.dag(rng, max(k, n // 3), max(1, n - max(k, n // 3)), k),
        }[shape]()
    return S.structure_form(form, rng, vocab, features)
