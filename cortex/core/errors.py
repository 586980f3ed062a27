"""Cortex's error classes: every error a user can act on derives from :class:`CortexError`.

Pipeline position: raised at the front door (``cortex.compile`` resolving a target and its
options), by the plugin loader, and by backends. Errors about bad *input* also derive from
``ValueError`` (or ``TypeError``) so ordinary ``except ValueError`` code keeps working; errors
about the *environment* (a missing package, no device) derive from ``RuntimeError``. Messages
say what was wrong and what to do about it.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np


class CortexError(Exception):
    """Base class of every error Cortex raises on purpose."""


class UnknownTargetError(CortexError, ValueError):
    """A target name that no loaded plugin registered (the message lists the known names)."""

    def __init__(self, name: str, known: Iterable[str], aliases: dict[str, str] | None = None):
        self.name = name
        self.known = tuple(sorted(known))
        self.aliases = dict(sorted((aliases or {}).items()))
        alias_text = ", ".join(f"{a} (= {t})" for a, t in self.aliases.items())
        names = ", ".join(self.known) or "none: no plugin registered a target"
        message = f"unknown target {name!r}; known targets: {names}"
        if alias_text:
            message += f"; aliases: {alias_text}"
        message += ". Run `cortex info` to see every plugin and target."
        super().__init__(message)


class TargetNotEnabledError(CortexError, RuntimeError):
    """The target exists but cannot generate code here (e.g. its Python package is missing)."""

    def __init__(self, target: str, reason: str, fix: str = ""):
        self.target, self.reason, self.fix = target, reason, fix
        message = f"target {target!r} is not enabled: {reason}"
        if fix:
            message += f". To fix: {fix}"
        super().__init__(message)


class TargetNotRunnableError(CortexError, RuntimeError):
    """The target can generate code but cannot run it here (e.g. no device or driver).

    ``hint``, when given, ends the message: what can be done here instead (``cortex.compile``
    says that ``cortex.compile_only`` generates and compiles the code without a device)."""

    def __init__(self, target: str, reason: str, fix: str = "", hint: str = ""):
        self.target, self.reason, self.fix = target, reason, fix
        message = f"target {target!r} cannot run here: {reason}"
        if fix:
            message += f". To fix: {fix}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


class InvalidOptionError(CortexError, ValueError):
    """A compile option that the target does not know, or a value it does not allow."""

    def __init__(self, target: str, option: str, value: object, allowed: str):
        self.target, self.option, self.value, self.allowed = target, option, value, allowed
        super().__init__(
            f"invalid option for target {target!r}: {option}={value!r}; allowed: {allowed}"
        )


class PluginError(CortexError):
    """A plugin misbehaved (failed to import, registered a clashing name, ...)."""


class PluginWarning(UserWarning):
    """Warned (not raised) when one plugin fails, so the other plugins keep working."""


class InvalidArgumentError(CortexError, ValueError):
    """An argument of a public function or constructor has a value it does not allow (the
    message names the argument, the value and what is allowed)."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type: a float, a string or a bool where an int belongs, ..."""


def int_arg(owner: str, name: str, value: object, *, minimum: int = 1,
            maximum: int | None = None, error: type[Exception] = InvalidArgumentError,
            type_error: type[Exception] = ArgumentTypeError) -> int:
    """``value`` as an ``int`` when it is a Python or NumPy integer (not a bool) within
    ``[minimum, maximum]``; else ``type_error`` / ``error`` (by default
    :class:`ArgumentTypeError` / :class:`InvalidArgumentError`) naming ``owner``'s argument
    ``name``. Never truncates: ``1.5`` and ``"8"`` are refused, not read as 1 and 8."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise type_error(f"{owner}: {name} must be an int, got {type(value).__name__} {value!r}")
    v = int(value)
    if v < minimum or (maximum is not None and v > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise error(f"{owner}: {name} must be an int {allowed}, got {v}")
    return v


class NonFiniteInputError(InvalidArgumentError):
    """A batch's input features hold NaN or an infinity and the executable was compiled with
    ``check_finite=True`` (by default they propagate to the outputs, as in the reference)."""


class NotYetImplementedError(CortexError, NotImplementedError):
    """A stage of the pipeline that a later piece of work provides; the message says which."""
