"""Targets and the target registry: what ``cortex.compile(model, target=...)`` resolves against.

Pipeline position: the front door. Plugins describe each target they provide with a
:class:`Target` (name, aliases, typed options, availability checks, a backend factory) and add it
to the registry from their ``cortex_register_targets`` hook. ``cortex.compile`` resolves the
target name, checks that it is *enabled*, validates the options, and only then hands off to the
compilation pipeline, which asks ``Target.create_backend(options)`` for the backend.

Two states, each with a reason a person can act on:

* *enabled* — code generation works here: the target's Python dependencies and tools exist.
  The check must be cheap (``importlib.util.find_spec``, ``shutil.which``): it runs whenever a
  target is resolved or listed.
* *runnable* — a device exists that can run the generated code. This check may import the
  device library (pyopencl, pycuda) and is only made when asked for (``cortex info``, or a
  runtime about to launch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from cortex.core.errors import InvalidOptionError, PluginError, UnknownTargetError

if TYPE_CHECKING:  # only for annotations; keeps `import cortex` cheap
    from cortex.core.plugin.backend import Backend


@dataclass(frozen=True)
class Availability:
    """Whether a target is enabled (or runnable), and why; ``bool(a)`` is ``a.ok``.

    ``reason`` always says why, in words a person can act on ("llvmlite is not installed",
    "no CUDA driver found"); ``fix`` says what to do when ``ok`` is false
    (``pip install 'cortex-compiler[opencl]'``).
    """

    ok: bool
    reason: str
    fix: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @classmethod
    def yes(cls, reason: str) -> "Availability":
        return cls(True, reason)

    @classmethod
    def no(cls, reason: str, fix: str = "") -> "Availability":
        return cls(False, reason, fix)

    def describe(self) -> str:
        """One line: ``yes (reason)`` or ``no (reason; fix: ...)``."""
        if self.ok:
            return f"yes ({self.reason})"
        return f"no ({self.reason}; fix: {self.fix})" if self.fix else f"no ({self.reason})"


_TYPE_WORDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


@dataclass(frozen=True)
class TargetOption:
    """One typed compile option of a target, with its default and what values are allowed.

    ``type`` is ``bool``, ``int``, ``float`` or ``str``. Values are checked in this order: the
    type (an ``int`` is accepted for a ``float`` option; ``True`` is not an ``int``), ``choices``,
    ``minimum``/``maximum``, then ``check`` — a function returning ``None`` when the value is
    fine or a short phrase saying what is wrong. ``allowed`` describes the legal values for error
    messages; it is derived from the other fields when left empty.
    """

    name: str
    type: type
    default: Any
    help: str = ""
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[Any], str | None] | None = None
    allowed: str = ""

    def __post_init__(self) -> None:
        if self.type not in _TYPE_WORDS:
            raise TypeError(
                f"option {self.name!r}: type must be one of bool, int, float, str, not {self.type!r}"
            )
        if not self.name.isidentifier():
            raise ValueError(f"option name {self.name!r} is not a Python identifier")

    def describe_allowed(self) -> str:
        """The legal values in words, for error messages and ``cortex info``."""
        if self.allowed:
            return self.allowed
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        text = _TYPE_WORDS[self.type]
        if self.minimum is not None and self.maximum is not None:
            text += f" from {self.minimum} to {self.maximum}"
        elif self.minimum is not None:
            text += f" >= {self.minimum}"
        elif self.maximum is not None:
            text += f" <= {self.maximum}"
        return text

    def validate(self, value: Any, target: str = "?") -> Any:
        """Return ``value`` (an int widened to float for float options) or raise
        :class:`InvalidOptionError` naming the option, the value and what is allowed."""

        def bad() -> InvalidOptionError:
            return InvalidOptionError(target, self.name, value, self.describe_allowed())

        if self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad()
            value = float(value)
            if not math.isfinite(value):
                raise bad()
        elif self.type is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad()
        elif not isinstance(value, self.type):
            raise bad()
        if self.choices is not None and value not in self.choices:
            raise bad()
        if self.minimum is not None and value < self.minimum:
            raise bad()
        if self.maximum is not None and value > self.maximum:
            raise bad()
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise InvalidOptionError(
                    target, self.name, value, f"{self.describe_allowed()} ({problem})"
                )
        return value


def _always(reason: str) -> Callable[[], Availability]:
    return lambda: Availability.yes(reason)


@dataclass(frozen=True)
class Target:
    """A compilation target as a plugin registers it.

    ``enabled`` and ``runnable`` are functions returning an :class:`Availability`; ``enabled``
    must be cheap (no heavy imports), ``runnable`` may probe the device. ``backend`` builds the
    :class:`~cortex.core.plugin.backend.Backend` for validated options; it is called only after the
    target is known to be enabled, so it may import the target's heavy dependencies.
    ``plugin`` is filled in by the registry with the name of the plugin that added the target.
    """

    name: str
    description: str
    backend: Callable[[Mapping[str, Any]], "Backend"]
    aliases: tuple[str, ...] = ()
    options: tuple[TargetOption, ...] = ()
    enabled: Callable[[], Availability] = field(default=_always("no requirements"))
    runnable: Callable[[], Availability] = field(default=_always("runs on the host"))
    plugin: str = ""

    def __post_init__(self) -> None:
        for name in (self.name, *self.aliases):
            if not name or not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"target name {name!r}: use letters, digits, '-' and '_'")
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"target {self.name!r} declares an option twice: {names}")

    def option(self, name: str) -> TargetOption:
        for opt in self.options:
            if opt.name == name:
                return opt
        raise KeyError(name)

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with ``options``, every value validated.

        Raises :class:`InvalidOptionError` for an option the target does not declare (listing
        the ones it does) or for a value the option does not allow.
        """
        known = {o.name: o for o in self.options}
        resolved = self.defaults()
        for name, value in options.items():
            if name not in known:
                listing = ", ".join(
                    f"{o.name} ({o.describe_allowed()}, default {o.default!r})"
                    for o in self.options
                )
                raise InvalidOptionError(
                    self.name,
                    name,
                    value,
                    f"no such option; target {self.name!r} accepts "
                    + (listing or "no options"),
                )
            resolved[name] = known[name].validate(value, self.name)
        return resolved

    def create_backend(self, options: Mapping[str, Any]) -> "Backend":
        """The backend for already-resolved options (see :meth:`resolve_options`)."""
        return self.backend(options)


class TargetRegistrar:
    """What a plugin's ``cortex_register_targets(registry)`` hook receives: it can only add.

    Targets added by one plugin are collected here and committed to the registry only when the
    plugin's hook returns without raising, so a failing plugin leaves no half-registered targets.
    """

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin
        self.targets: list[Target] = []

    def add(self, target: Target) -> Target:
        """Register ``target`` (a :class:`Target`); returns it with ``plugin`` filled in."""
        if not isinstance(target, Target):
            raise TypeError(
                f"plugin {self.plugin!r}: registry.add() takes a cortex.Target, "
                f"not {type(target).__name__}"
            )
        target = replace(target, plugin=self.plugin)
        self.targets.append(target)
        return target


class TargetRegistry:
    """Every target the loaded plugins registered, by name and alias."""

    def __init__(self) -> None:
        self._targets: dict[str, Target] = {}
        self._aliases: dict[str, str] = {}

    def add(self, target: Target) -> None:
        """Add a target; a name or alias already taken raises :class:`PluginError`."""
        for name in (target.name, *target.aliases):
            owner = self._targets.get(name) or self._targets.get(self._aliases.get(name, ""))
            if owner is not None:
                raise PluginError(
                    f"plugin {target.plugin!r} registers target name {name!r}, which plugin "
                    f"{owner.plugin!r} already registered for target {owner.name!r}"
                )
        self._targets[target.name] = target
        for alias in target.aliases:
            self._aliases[alias] = target.name

    def commit(self, registrar: TargetRegistrar) -> None:
        """Add everything one plugin registered, or nothing if any name clashes."""
        staged = TargetRegistry()
        staged._targets, staged._aliases = dict(self._targets), dict(self._aliases)
        for target in registrar.targets:
            staged.add(target)
        self._targets, self._aliases = staged._targets, staged._aliases

    def get(self, name: str) -> Target:
        """The target called ``name`` (a name or an alias); :class:`UnknownTargetError` lists
        the known ones otherwise."""
        if not isinstance(name, str):
            raise TypeError(f"target must be a string such as 'llvm', not {type(name).__name__}")
        key = self._aliases.get(name, name)
        if key in self._targets:
            return self._targets[key]
        raise UnknownTargetError(name, self._targets, self._aliases)

    def names(self) -> tuple[str, ...]:
        return tuple(self._targets)

    @property
    def aliases(self) -> dict[str, str]:
        """``{alias: target name}``."""
        return dict(self._aliases)

    def __contains__(self, name: object) -> bool:
        return name in self._targets or name in self._aliases

    def __iter__(self) -> Iterator[Target]:
        return iter(self._targets.values())

    def __len__(self) -> int:
        return len(self._targets)
