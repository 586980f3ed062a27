"""Which targets the suite runs on, and what each can do here (compile only, or run).

Pipeline position: the suite's front door. Targets come from ``--cortex-target NAME``
(repeatable, or a comma list) or the environment variable ``CORTEX_TEST_TARGETS`` (comma
list); the option wins. ``all`` stands for every registered target that is enabled here.
Nothing given means ``numpy`` (the interpreter, runnable everywhere).

A target that is not *enabled* (its code generator cannot work here) fails the suite: asking
for it and not having it is an error in the test setup, never a silent skip. A target that is
enabled but not *runnable* (CUDA without a GPU) runs the compile-only part; its run part is
reported as skipped with the target's own reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

ENV_TARGETS = "CORTEX_TEST_TARGETS"
ENV_FULL = "CORTEX_TEST_FULL"
ENV_EXCLUDE = "CORTEX_TEST_EXCLUDE_FAMILIES"
DEFAULT_TARGETS = ("numpy",)


class TargetSelectionError(ValueError):
    """A requested target is unknown or not enabled here."""


def parse_targets(values: Iterable[str] | None, env: str | None = None) -> tuple[str, ...]:
    """The requested names, in order, without duplicates: the option's values if any were
    given, else the environment's comma list, else ``DEFAULT_TARGETS``."""
    raw = [v for value in (values or ()) for v in value.split(",")]
    if not any(v.strip() for v in raw):
        raw = (env if env is not None else os.environ.get(ENV_TARGETS, "")).split(",")
    names = [v.strip() for v in raw if v.strip()]
    if not names:
        names = list(DEFAULT_TARGETS)
    out: list[str] = []
    for name in names:
        expanded = enabled_targets() if name == "all" else (name,)
        out += [n for n in expanded if n not in out]
    return tuple(out)


def enabled_targets() -> tuple[str, ...]:
    from cortex.core.plugin.loader import get_registry

    return tuple(t.name for t in get_registry() if t.enabled())


@dataclass(frozen=True)
class TargetStatus:
    """A selected target: its registered name, and whether it can run here and why."""

    name: str
    runnable: bool
    reason: str  # why it is (not) runnable, in the target's own words

    @property
    def skip_reason(self) -> str:
        return (f"run part skipped: target {self.name!r} is enabled (code generation and "
                f"compilation are checked) but cannot run here: {self.reason}")


@lru_cache(maxsize=None)
def status(name: str) -> TargetStatus:
    """Resolve ``name`` (a name or alias) and probe it; :class:`TargetSelectionError` if it is
    unknown or not enabled."""
    from cortex.core.errors import UnknownTargetError
    from cortex.core.plugin.loader import get_registry

    try:
        target = get_registry().get(name)
    except UnknownTargetError as e:
        raise TargetSelectionError(f"--cortex-target {name}: {e}") from None
    enabled = target.enabled()
    if not enabled:
        raise TargetSelectionError(f"--cortex-target {name}: the target is not enabled here: "
                                   f"{enabled.describe()}")
    runnable = target.runnable()
    return TargetStatus(target.name, bool(runnable), runnable.reason)


def full_sweep(flag: bool = False) -> bool:
    """Whether the exhaustive sweep is on: ``--cortex-full`` or ``CORTEX_TEST_FULL=1``."""
    return flag or os.environ.get(ENV_FULL, "").strip().lower() in ("1", "true", "yes", "on")


def excluded_families(values: Iterable[str] | None = None) -> tuple[str, ...]:
    """Structure families left out of the run: ``--cortex-exclude-family NAME`` (repeatable,
    comma lists) or ``CORTEX_TEST_EXCLUDE_FAMILIES``. For a slow target, e.g. the interpreter,
    whose 10,000-level chain takes minutes: ``--cortex-exclude-family long_chain``."""
    from cortex.testing.structures import FAMILIES

    raw = [v for value in (values or ()) for v in value.split(",")]
    if not any(v.strip() for v in raw):
        raw = os.environ.get(ENV_EXCLUDE, "").split(",")
    names = tuple(v.strip() for v in raw if v.strip())
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise TargetSelectionError(f"--cortex-exclude-family {unknown[0]}: no such structure "
                                   f"family; the suite has {list(FAMILIES)}")
    return names
