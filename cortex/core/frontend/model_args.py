"""Constructor-argument errors of models that say what the model takes.

Pipeline position: the first stage (the model API). ``Model.__init_subclass__`` wraps the
``__init__`` of every model class with :func:`checked_init` (and ``Model.__init__`` is wrapped
too): before a constructor runs, its arguments are bound to its signature, exactly as Python
would; where Python would raise ``TypeError`` (a misspelt keyword, a missing required one, too
many positional arguments), the ``TypeError`` raised instead names the class the user
instantiated, every keyword it takes with its default, and the closest match to a misspelt one::

    TreeLSTM(...): missing a required argument: 'hidden'; 'embedding' is not a keyword of
    TreeLSTM (did you mean 'embed'?). TreeLSTM takes: hidden (required), embed=None, ...

Only calls Python itself rejects are rejected: the keyword listing follows ``**options`` into
the base class's ``__init__`` for the message, never to refuse a call.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from typing import Any, Callable

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_MULTIPLE = re.compile(r"got multiple values for (?:keyword )?argument '(\w+)'")


def _own_init(klass: type) -> Callable[..., None] | None:
    init = klass.__dict__.get("__init__")
    return getattr(init, "__wrapped__", init) if init is not None else None


@functools.lru_cache(maxsize=None)
def accepted_keywords(cls: type) -> dict[str, Any]:
    """``{keyword: default}`` (``inspect.Parameter.empty`` for a required one) that ``cls(...)``
    takes: its constructor's named parameters and, where it forwards ``**options`` to a base
    class, the base constructor's, except those the base lists in its own
    ``SET_BY_SUBCLASS`` (``Model``'s ``arity``: each model passes its own)."""
    keywords: dict[str, Any] = {}
    forwarding = False
    for klass in cls.__mro__:
        init = _own_init(klass)
        if init is None or klass is object:
            continue
        fixed = klass.__dict__.get("SET_BY_SUBCLASS", ()) if forwarding else ()
        params = list(inspect.signature(init).parameters.values())[1:]  # without self
        for p in params:
            if p.kind in _NAMED and p.name not in keywords and p.name not in fixed:
                keywords[p.name] = p.default
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            break
        forwarding = True
    return keywords


def describe_keywords(cls: type) -> str:
    """``hidden (required), embed=None, ...``: what :func:`accepted_keywords` finds."""
    return ", ".join(f"{name} (required)" if default is inspect.Parameter.empty
                     else f"{name}={default!r}"
                     for name, default in accepted_keywords(cls).items())


def bad_arguments(cls: type, problem: str, kwargs: dict[str, Any]) -> TypeError:
    """The ``TypeError`` for a call of ``cls(...)`` whose arguments do not bind (``problem``:
    what ``inspect.Signature.bind`` said), naming the keywords ``cls`` takes."""
    known = accepted_keywords(cls)
    name = cls.__name__
    text = f"{name}(...): {problem}"
    for key in (k for k in kwargs if k not in known):
        if f"'{key}'" not in problem:
            text += f"; {key!r} is not a keyword of {name}"
        close = difflib.get_close_matches(key, list(known), n=1)
        if close:
            text += f" (did you mean {close[0]!r}?)"
    return TypeError(f"{text}. {name} takes: {describe_keywords(cls) or 'no arguments'}")


class _NotBound(TypeError):
    """A base constructor's arguments did not bind; the outermost constructor of the call
    re-raises it with the arguments the user gave (:func:`bad_arguments`)."""


def checked_init(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` with its arguments bound first; a call that does not bind raises
    :func:`bad_arguments`' ``TypeError`` for the class being instantiated and the arguments
    given to it (also when the call fails in a base class's constructor, reached through
    ``**options``)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        outermost = type(self).__init__ is __init__
        try:
            signature.bind(self, *args, **kwargs)
        except TypeError as exc:
            if not outermost:
                raise _NotBound(str(exc)) from None
            raise bad_arguments(type(self), str(exc), kwargs) from None
        if not outermost:
            init(self, *args, **kwargs)
            return
        try:
            init(self, *args, **kwargs)
        except _NotBound as exc:
            raise bad_arguments(type(self), str(exc), kwargs) from None
        except TypeError as exc:  # a keyword the constructor passes to its base itself
            clash = _MULTIPLE.search(str(exc))
            if clash is None or clash.group(1) not in kwargs \
                    or clash.group(1) in accepted_keywords(type(self)):
                raise
            raise bad_arguments(type(self), f"{clash.group(1)!r} is set by "
                                f"{type(self).__name__} itself", kwargs) from None

    return __init__
