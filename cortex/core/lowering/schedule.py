"""Schedules: the named knobs that shape a LoopProgram for a target, and their legal space.

Pipeline position: ``cortex.compile`` builds a :class:`ScheduleSpace` from the target's
:class:`~cortex.core.plugin.capabilities.Capabilities` and the float type, takes its ``default()``
(or a tuned / user-given :class:`Schedule`), validates it, and the lowering and
``cortex.core.lowering.transforms`` read the knobs. The autotuner searches exactly this space:
it is enumerable (``enumerate()``), samplable (``sample(rng)``) and every schedule round-trips
through JSON (``to_json`` / ``Schedule.from_json``).

Knobs (names fixed; the lowering reads them):

=====================  ========================================================================
``tile_hidden``        tile size of the hidden dimension (0 = untiled)
``vector_width``       SIMD lanes used for the innermost hidden loop (1 = scalar)
``unroll``             unroll factor of the reduction (GEMV) loop
``parallel``           which loop is parallel: "nodes" of a level, "hidden" units, or "both"
                       (on a grid target: nodes -> groups, hidden -> threads of a group)
``weight_layout``      "row_major", "transposed", "packed" (blocked by ``vector_width`` rows)
``persistent``         keep weights resident in local/shared memory across levels
``kernel_form``        "single" (level loop inside one kernel, barrier between levels) or
                       "per_level" (the host launches one kernel per level)
``leaf_specialization``  separate loop nest for leaves, no per-node branch
``fuse``               fuse the gate GEMV with bias and elementwise epilogue in one loop nest
``threads``            CPU worker threads; threads per group on a grid target
``reduce_lanes``       threads (lanes of a warp) that cooperate on one output row of a GEMV,
                       splitting its reduction and combining with warp shuffles: 1 = one
                       thread per row; 0 = auto (as many lanes as leave no thread of a group
                       idle: ``threads // hidden``, a power of two <= the warp size). Offered
                       only where ``Capabilities.warp_size`` > 0; elsewhere it is 1.
=====================  ========================================================================
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable, Iterator

import numpy as np

from cortex.core.plugin.capabilities import Capabilities


class ScheduleError(ValueError):
    """A schedule is not legal for this target (unknown knob, value out of range, conflict)."""


@dataclass(frozen=True)
class Schedule:
    """One point of the knob space. Frozen, hashable, JSON-serializable."""

    tile_hidden: int = 0
    vector_width: int = 1
    unroll: int = 1
    parallel: str = "nodes"
    weight_layout: str = "row_major"
    persistent: bool = False
    kernel_form: str = "per_level"
    leaf_specialization: bool = True
    fuse: bool = True
    threads: int = 1
    reduce_lanes: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Schedule":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ScheduleError(f"unknown schedule knobs {sorted(unknown)}; known: {sorted(names)}")
        types = {f.name: type(getattr(cls(), f.name)) for f in fields(cls)}
        for k, v in d.items():
            if type(v) is not types[k]:
                raise ScheduleError(f"knob {k!r} must be {types[k].__name__}, got {v!r}")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "Schedule":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"schedule is not valid JSON: {exc}") from None
        if not isinstance(d, dict):
            raise ScheduleError("a schedule's JSON must be an object of knob: value")
        return cls.from_dict(d)


KNOB_NAMES = tuple(f.name for f in fields(Schedule))


@dataclass(frozen=True)
class Knob:
    name: str
    choices: tuple
    default: Any
    doc: str


@dataclass(frozen=True)
class Constraint:
    doc: str
    ok: Callable[[Schedule], bool]


def _pow2_upto(n: int, start: int = 1) -> tuple[int, ...]:
    out, x = [], start
    while x <= n:
        out.append(x)
        x *= 2
    return tuple(out)


class ScheduleSpace:
    """The legal knob settings for a target and a float type."""

    def __init__(self, caps: Capabilities, dtype: str = "float32") -> None:
        if dtype not in ("float32", "float64"):
            raise ScheduleError(f"dtype must be float32 or float64, got {dtype!r}")
        if dtype == "float64" and not caps.supports_fp64:
            raise ScheduleError("this target does not support float64; compile with dtype='float32'")
        self.caps = caps
        self.dtype = dtype
        itemsize = 4 if dtype == "float32" else 8
        lanes = caps.vector_lanes(itemsize)
        grid = caps.has_grid
        single_ok = caps.grid_barrier if grid else caps.single_call
        forms = ("single", "per_level") if single_ok else ("per_level",)
        persist_ok = caps.shared_memory_bytes > 0 if grid else caps.cache_bytes_per_core > 0
        if grid:
            threads = tuple(t for t in _pow2_upto(caps.max_threads_per_group, 32)) or (caps.max_threads_per_group,)
            thread_default = min(256, threads[-1])
            tiles = (0,) + _pow2_upto(min(256, caps.max_threads_per_group), 8)
            tile_default = 0
        else:
            threads = tuple(sorted(set(_pow2_upto(caps.num_cores)) | {caps.num_cores}))
            thread_default = caps.num_cores
            tiles = (0, 8, 16, 32, 64, 128)
            tile_default = 0
        vws = _pow2_upto(lanes)
        layouts = ("row_major", "transposed") + (("packed",) if lanes > 1 else ())
        default_layout = "transposed" if grid else ("packed" if lanes > 1 else "row_major")
        self.knobs: tuple[Knob, ...] = (
            Knob("tile_hidden", tiles, tile_default, "tile of the hidden dimension (0 = untiled)"),
            Knob("vector_width", vws, lanes if not grid else 1, "SIMD lanes of the hidden loop"),
            Knob("unroll", (1, 2, 4, 8), 1, "unroll factor of the reduction loop"),
            Knob("parallel", ("nodes", "hidden", "both"), "both" if grid else "nodes", "which loop runs in parallel"),
            Knob("weight_layout", layouts, default_layout, "physical layout of weight matrices"),
            Knob("persistent", (False, True) if persist_ok else (False,), False, "weights resident across levels"),
            Knob("kernel_form", forms, forms[0], "one kernel per call or one per level"),
            Knob("leaf_specialization", (True, False), True, "separate loop nest for leaves"),
            Knob("fuse", (True, False), True, "fuse GEMV, bias and elementwise epilogue"),
            Knob("threads", threads, thread_default, "CPU threads / threads per group"),
            Knob("reduce_lanes", (0,) + _pow2_upto(caps.warp_size) if grid and caps.warp_size > 0 else (1,),
                 0 if grid and caps.warp_size > 0 else 1,
                 "lanes per GEMV row, combined by warp shuffles (0 = auto: threads // hidden)"),
        )
        self.constraints: tuple[Constraint, ...] = (
            Constraint(
                "tile_hidden must be 0 or a multiple of vector_width",
                lambda s: s.tile_hidden == 0 or s.tile_hidden % s.vector_width == 0,
            ),
            Constraint(
                "persistent weights need the level loop inside one kernel (kernel_form='single')",
                lambda s: not (s.persistent and grid and s.kernel_form != "single"),
            ),
            Constraint(
                "weight_layout='packed' blocks rows by vector_width, so it needs vector_width > 1",
                lambda s: s.weight_layout != "packed" or s.vector_width > 1,
            ),
        )
        self._by_name = {k.name: k for k in self.knobs}

    def knob(self, name: str) -> Knob:
        try:
            return self._by_name[name]
        except KeyError:
            raise ScheduleError(f"unknown knob {name!r}; known: {list(self._by_name)}") from None

    def default(self) -> Schedule:
        return self.validate(Schedule(**{k.name: k.default for k in self.knobs}))

    def problems(self, s: Schedule) -> list[str]:
        out = []
        for k in self.knobs:
            v = getattr(s, k.name)
            if v not in k.choices:
                out.append(f"{k.name}={v!r} is not legal here; choices: {list(k.choices)}")
        out += [c.doc for c in self.constraints if not c.ok(s)]
        return out

    def validate(self, s: Schedule) -> Schedule:
        """Return ``s`` if it is legal for this target, else raise :class:`ScheduleError`."""
        p = self.problems(s)
        if p:
            raise ScheduleError("illegal schedule " + s.to_json() + ":\n  " + "\n  ".join(p))
        return s

    def with_knobs(self, **knobs: Any) -> Schedule:
        """The default schedule with some knobs changed (validated)."""
        unknown = set(knobs) - set(KNOB_NAMES)
        if unknown:
            raise ScheduleError(f"unknown knobs {sorted(unknown)}; known: {list(KNOB_NAMES)}")
        return self.validate(replace(self.default(), **knobs))

    def enumerate(self) -> Iterator[Schedule]:
        """Every legal schedule, in a deterministic order."""
        names = [k.name for k in self.knobs]
        for values in itertools.product(*(k.choices for k in self.knobs)):
            s = Schedule(**dict(zip(names, values)))
            if all(c.ok(s) for c in self.constraints):
                yield s

    def size(self) -> int:
        return sum(1 for _ in self.enumerate())

    def sample(self, rng: np.random.Generator | int, n: int = 1) -> list[Schedule]:
        """``n`` random legal schedules (uniform over knobs, rejecting illegal combinations)."""
        rng = np.random.default_rng(rng)
        out: list[Schedule] = []
        for _ in range(1000 * n):
            if len(out) == n:
                break
            s = Schedule(**{k.name: k.choices[int(rng.integers(len(k.choices)))] for k in self.knobs})
            if all(c.ok(s) for c in self.constraints):
                out.append(s)
        if len(out) < n:
            raise ScheduleError("could not sample legal schedules; the constraints are too tight")
        return out

