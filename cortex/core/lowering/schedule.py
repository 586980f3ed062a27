"""Schedules: the named knobs that shape a LoopProgram for a target, and their legal space.

Pipeline position: ``cortex.compile`` builds a :class:`ScheduleSpace` from the target's
:class:`~cortex.core.plugin.capabilities.Capabilities` and the float type and resolves the user's
``schedule=`` over it (:meth:`ScheduleSpace.resolve`: every knob not given takes its *default
rule*, and each knob's value is recorded with where it came from); the lowering and the schedule
transforms (``cortex.core.lowering.apply_schedule``) read the knobs. The schedule is the one place where
a performance decision lives: a backend's code generator translates the program it is given.

The space is built for search: :meth:`~ScheduleSpace.enumerate` (lazily) and
:meth:`~ScheduleSpace.sample` yield legal schedules, every schedule round-trips through JSON
(``to_json`` / :meth:`Schedule.from_json`), constraints name the knobs they tie
(:class:`Constraint`), and a knob that matters only under others (``jam_pad`` only when
``node_jam > 1``) says so (``Knob.active``): enumeration and sampling give such a knob its
neutral value when it is inactive, so no two schedules they yield compile alike for that reason.
Knobs tied by a constraint or an activity condition form a *component*; components are
independent, which keeps :meth:`~ScheduleSpace.size` exact and cheap for a space of ~10^9
schedules. The knobs, their choices and default rules are listed in ``cortex.core.lowering.schedule_knobs``
(and ``docs/lowering.md``).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from cortex.core.plugin.capabilities import Capabilities


class ScheduleError(ValueError):
    """A schedule is not legal for this target (unknown knob, value out of range, conflict)."""


@dataclass(frozen=True)
class Schedule:
    """One point of the knob space. Frozen, hashable, JSON-serializable. The field defaults are
    the *neutral* values (nothing tiled, vectorized, jammed or packed); a target's defaults
    come from its :class:`ScheduleSpace`."""

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
    interchange: bool = False
    node_jam: int = 1
    jam_pad: bool = True
    jam_accumulators: int = 24
    jam_unroll: int = 1
    jam_interleave: bool = True
    hidden_jam: int = 16
    weight_block: int = 16
    wide_lanes: int = 0
    prefetch: int = 0
    node_chunk: int = 1
    hidden_tiles: int = 1
    single_group_nodes: int = 256
    state_layout: str = "row_major"
    state_block: int = 8
    refactor: bool = False
    recursive_unroll: int = 1
    bf16_dot: str = "widen"
    hoist_projections: bool = False
    row_jam: int = 1
    panel_kib: int = 0
    level_split: str = "static"
    k_block: int = 0
    tree_groups: int = 1
    leaf_tables: bool = False
    jam_rows: int = 0
    leaf_kids: bool = False
    level_groups: int = 1

    def to_dict(self) -> dict[str, Any]:
        # every knob is a scalar, so a flat copy is ``dataclasses.asdict`` without its deep
        # copies (the tuner keys tens of thousands of candidates per search by this)
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Schedule":
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
NEUTRAL = Schedule()


@dataclass(frozen=True)
class Knob:
    """One knob of a space: its legal ``choices``, its default and the rule that gave it.

    ``default`` is a value, or a function of the knobs resolved before it (a *derived* default:
    ``hidden_jam`` follows ``vector_width``) returning ``(value, rule)``. ``active`` (with the
    knobs it reads in ``needs``; ``when`` in words) says when the knob matters; when it does
    not, enumeration and sampling give it ``neutral`` (default: the :class:`Schedule` field's)."""

    name: str
    choices: tuple
    default: Any
    doc: str
    rule: str = ""
    active: Callable[[Mapping[str, Any]], bool] | None = None
    needs: tuple[str, ...] = ()
    when: str = ""  # the activity condition in words ("node_jam > 1")
    neutral: Any = None

    def default_for(self, resolved: Mapping[str, Any]) -> tuple[Any, str]:
        if callable(self.default):
            return self.default(resolved)
        return self.default, self.rule

    def is_active(self, values: Mapping[str, Any]) -> bool:
        return self.active is None or self.active(values)

    @property
    def neutral_value(self) -> Any:
        return self.neutral if self.neutral is not None else getattr(NEUTRAL, self.name)


@dataclass(frozen=True)
class Constraint:
    """A condition legal schedules meet, over the knobs it names."""

    doc: str
    ok: Callable[[Schedule], bool]
    knobs: tuple[str, ...] = ()


# Each space's legal assignments per component, by (Capabilities, dtype, weights): a CPU space has about
# 160,000 in one component, a fraction of a second to find, and compiles build spaces often.
# Read only: sample() and enumerate() copy out of them.
_LEGAL_PARTS: dict[tuple[Capabilities, str, str], list[list[dict[str, Any]]]] = {}


class ScheduleSpace:
    """The legal knob settings for a target and a float type (knobs: ``schedule_knobs``)."""

    def __init__(self, caps: Capabilities, dtype: str = "float32", weights: str | None = None) -> None:
        from cortex.core.lowering.schedule_knobs import space_knobs

        if dtype not in ("float32", "float64"):
            raise ScheduleError(f"dtype must be float32 or float64, got {dtype!r}")
        if dtype == "float64" and not caps.supports_fp64:
            raise ScheduleError("this target does not support float64; compile with dtype='float32'")
        self.caps = caps
        self.dtype = dtype
        self.weights = weights or dtype  # how the weight matrices are stored (default rules read it)
        knobs, constraints = space_knobs(caps, dtype, self.weights)
        self.knobs: tuple[Knob, ...] = knobs
        self.constraints: tuple[Constraint, ...] = constraints
        self._by_name = {k.name: k for k in self.knobs}
        if tuple(self._by_name) != KNOB_NAMES:
            raise AssertionError("schedule_knobs must define every Schedule field, in order")
        self._components = self._find_components()
        self._legal_parts: list[list[dict[str, Any]]] | None = None

    # ------------------------------------------------------------------ knobs and defaults
    def knob(self, name: str) -> Knob:
        try:
            return self._by_name[name]
        except KeyError:
            raise ScheduleError(f"unknown knob {name!r}; known: {list(self._by_name)}") from None

    def resolve(self, given: Schedule | Mapping[str, Any] | None = None) -> tuple[Schedule, dict[str, str]]:
        """The schedule for ``given`` and where each knob's value came from.

        ``given`` is None (every knob by its default rule), a dict of some knobs (the others by
        their rules, which may follow the given ones: ``hidden_jam`` follows ``vector_width``)
        or a whole :class:`Schedule`. Sources: ``"user"``, ``"default rule: ..."``, or for a
        Schedule's knob equal to its default ``"default rule: ... (as given)"``. Validated."""
        if isinstance(given, Schedule):
            values = given.to_dict()
            explicit = set(values)
        else:
            given = dict(given or {})
            unknown = set(given) - set(KNOB_NAMES)
            if unknown:
                raise ScheduleError(f"unknown knobs {sorted(unknown)}; known: {list(KNOB_NAMES)}")
            Schedule.from_dict(given)  # types
            values, explicit = given, set(given)
        resolved: dict[str, Any] = {}
        source: dict[str, str] = {}
        for k in self.knobs:
            value, rule = k.default_for(resolved)
            if k.name in explicit:
                resolved[k.name] = values[k.name]
                same = isinstance(given, Schedule) and values[k.name] == value
                source[k.name] = f"default rule: {rule} (as given)" if same else "user"
            else:
                resolved[k.name] = value
                source[k.name] = f"default rule: {rule}"
        s = self.validate(Schedule(**resolved))
        for k in self.knobs:
            if not k.is_active(resolved):
                source[k.name] += f"; inactive: it matters only when {k.when}"
        return s, source

    def default(self) -> Schedule:
        return self.resolve(None)[0]

    def with_knobs(self, **knobs: Any) -> Schedule:
        """The schedule with these knobs set and every other by its default rule (validated)."""
        return self.resolve(knobs)[0]

    # ------------------------------------------------------------------ legality
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

    def canonical(self, s: Schedule) -> Schedule:
        """``s`` with every inactive knob at its neutral value (compiles to the same program)."""
        d = s.to_dict()
        return replace(s, **{k.name: k.neutral_value for k in self.knobs if not k.is_active(d)})

    # ------------------------------------------------------------------ search
    def _find_components(self) -> list[list[Knob]]:
        """Knobs linked by a constraint or an activity condition, in knob order."""
        parent = {k.name: k.name for k in self.knobs}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def join(names: tuple[str, ...]) -> None:
            for a, b in zip(names, names[1:]):
                parent[find(a)] = find(b)

        for c in self.constraints:
            join(c.knobs)
        for k in self.knobs:
            join((k.name,) + k.needs)
        groups: dict[str, list[Knob]] = {}
        for k in self.knobs:
            groups.setdefault(find(k.name), []).append(k)
        return list(groups.values())

    def _parts(self) -> list[list[dict[str, Any]]]:
        """Per component, its legal canonical assignments (deterministic order)."""
        if self._legal_parts is None:
            key = (self.caps, self.dtype, self.weights)  # the knobs and constraints are functions of these
            if key not in _LEGAL_PARTS:
                if len(_LEGAL_PARTS) >= 32:
                    _LEGAL_PARTS.pop(next(iter(_LEGAL_PARTS)))
                _LEGAL_PARTS[key] = [self._legal_assignments(comp) for comp in self._components]
            self._legal_parts = _LEGAL_PARTS[key]
        return self._legal_parts

    def _legal_assignments(self, comp: list[Knob]) -> list[dict[str, Any]]:
        """A component's legal canonical assignments, in the order of the product of its knobs'
        choices (knob order), found depth first: each canonical check (an inactive knob must
        hold its neutral value) and each constraint is tested as soon as the knobs it reads are
        assigned, so a branch that fails is cut there rather than every combination built."""
        base = NEUTRAL.to_dict()
        names = [k.name for k in comp]
        position = {name: i for i, name in enumerate(names)}
        # what to test once knob i is assigned: the knobs and constraints it completes
        canonical_at: list[list[Knob]] = [[] for _ in comp]
        for k in comp:
            canonical_at[max(position[n] for n in (k.name, *k.needs))].append(k)
        constraints_at: list[list[Constraint]] = [[] for _ in comp]
        for c in self.constraints:
            if c.knobs and set(c.knobs) <= set(names):
                constraints_at[max(position[n] for n in c.knobs)].append(c)
        legal: list[dict[str, Any]] = []
        full = dict(base)

        def extend(i: int) -> None:
            if i == len(comp):
                legal.append({name: full[name] for name in names})
                return
            for value in comp[i].choices:
                full[names[i]] = value
                if any(not k.is_active(full) and full[k.name] != k.neutral_value for k in canonical_at[i]):
                    continue  # not canonical: the same program as the neutral value here
                if constraints_at[i]:
                    s = Schedule(**full)
                    if not all(c.ok(s) for c in constraints_at[i]):
                        continue
                extend(i + 1)
            full[names[i]] = base[names[i]]

        extend(0)
        return legal

    def enumerate(self) -> Iterator[Schedule]:
        """Every legal canonical schedule, lazily, in a deterministic order."""
        for combo in itertools.product(*self._parts()):
            d: dict[str, Any] = {}
            for part in combo:
                d.update(part)
            yield Schedule(**d)

    def size(self) -> int:
        """How many schedules :meth:`enumerate` yields (a product over the components)."""
        n = 1
        for part in self._parts():
            n *= len(part)
        return n

    def sample(self, rng: np.random.Generator | int, n: int = 1) -> list[Schedule]:
        """``n`` random legal canonical schedules, uniform over the space."""
        rng = np.random.default_rng(rng)
        parts = self._parts()
        if any(not p for p in parts):
            raise ScheduleError("the space is empty: the constraints are too tight")
        out = []
        for _ in range(n):
            d: dict[str, Any] = {}
            for p in parts:
                d.update(p[int(rng.integers(len(p)))])
            out.append(Schedule(**d))
        return out


def describe(schedule: Schedule, source: Mapping[str, str]) -> list[str]:
    """One line per knob: ``name=value (where it came from)``."""
    return [f"{name}={getattr(schedule, name)!r} ({source.get(name, '?')})" for name in KNOB_NAMES]
