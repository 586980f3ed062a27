"""Where a worker gets its executable: a recipe it compiles once, in its own process.

Pipeline position: the first thing a distributed worker (:mod:`cortex.distributed.worker`) does
is ``source.build()``, which runs the compile pipeline on the worker's machine. What travels to
the worker is the *source*, not a live executable: native code built on the driver's CPU need
not run on a worker's. A source is picklable — a model's weights, a target and compile options,
and for a saved executable the compiled artifacts too — and every worker compiles for its own
CPU (``cpu="host"``), warm where the disk cache or the shipped artifacts fit it.

:class:`ExecutableSource` is the contract (``build``, ``check``, ``threads``, ``describe``);
two sources implement it:

* :class:`CompileRecipe`: a model object, a target and its options, compiled in each worker
  (the second worker on a machine finds the first one's compile in the disk cache);
* :class:`SavedExecutable`: an executable that exists already (``exe.save``/``cortex.load``, or
  one compiled in the driver): its recipe, params and compiled artifacts — what pickling an
  executable carries — rebuilt in each worker with the worker's thread count.

:func:`load_source` makes one from the command line's MODEL: a saved executable, a saved model
file, or a zoo spec such as ``ChildSumTreeLSTM:hidden=64,embed=32,vocab=ast``
(:func:`model_from_spec`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable


@runtime_checkable
class ExecutableSource(Protocol):
    """What a worker needs to make its executable. Must pickle (it is shipped to workers)."""

    threads: int
    """CPU threads one call of the executable uses: the CPUs a worker reserves."""

    def build(self) -> Any:
        """The executable (``exe(structures) -> Outputs``), made in the calling process."""
        ...

    def check(self) -> None:
        """Raise now, on the driver, for what ``build`` would fail on in every worker."""
        ...

    def describe(self) -> str:
        """One line for logs and the output file's metadata."""
        ...


@dataclass(frozen=True)
class CompileRecipe:
    """Compile ``model`` for ``target`` with ``options`` in each worker, once per worker.

    ``threads`` is the number of CPU threads a call uses; it becomes the target option
    ``threads`` when the target has one (``llvm``) and is always the number of CPUs each
    worker reserves from Ray. The default, 1, gives one worker per core.
    """

    model: Any
    target: str = "llvm"
    options: Mapping[str, Any] = field(default_factory=dict)
    threads: int = 1

    def __post_init__(self) -> None:
        _check_threads(self.threads)
        if "threads" in self.options and self.options["threads"] != self.threads:
            raise ValueError(f"give the thread count once: threads={self.threads} but "
                             f"options has threads={self.options['threads']!r}")

    def compile_options(self) -> dict[str, Any]:
        """The options ``cortex.compile`` gets: ``options`` plus ``threads`` where the
        target takes it."""
        return with_threads(self.target, self.options, self.threads)

    def check(self) -> None:
        """The target is known and enabled here, the options valid, the model traces."""
        from cortex.core.api import resolve_target
        from cortex.core.pipeline import compile_options, split_options

        shared, own = split_options(self.compile_options())
        target, _ = resolve_target(self.target, own)
        compile_options(target.name, shared)
        self.model.trace()

    def build(self) -> Any:
        import cortex

        return cortex.compile(self.model, target=self.target, **self.compile_options())

    def describe(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in sorted(self.compile_options().items()))
        return f"{type(self.model).__name__} compiled for {self.target} ({options})"


def _check_threads(threads: Any) -> None:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1 (CPUs per worker), got {threads!r}")


def with_threads(target: str, options: Mapping[str, Any], threads: int) -> dict[str, Any]:
    """``options`` with ``threads`` set where ``target`` has that option (``llvm``)."""
    from cortex.core.api import resolve_target

    resolved, _ = resolve_target(target)
    options = dict(options)
    if any(o.name == "threads" for o in resolved.options):
        options["threads"] = threads
    return options


@dataclass(frozen=True)
class SavedExecutable:
    """An executable's recipe, params and compiled artifacts (``cortex.core.persist``),
    rebuilt in each worker: warm where the artifacts' keys fit the worker's machine, compiled
    again from the recipe where they do not. The recipe's target option ``threads`` (where
    the target has it) is replaced by ``threads``, the CPUs each worker reserves, as for
    :class:`CompileRecipe`. Make one with :meth:`of`."""

    recipe: Any
    params: Mapping[str, Any]
    entries: Mapping[tuple[str, str], bytes]
    threads: int = 1

    def __post_init__(self) -> None:
        _check_threads(self.threads)

    @classmethod
    def of(cls, exe: Any, threads: int = 1) -> "SavedExecutable":
        """The source of ``exe`` (compiled here or loaded with ``cortex.load``)."""
        from cortex.core.persist import PersistError

        recipe = getattr(exe, "recipe", None)
        if recipe is None or recipe.problem:
            why = recipe.problem if recipe is not None else "it was not made by cortex.compile"
            raise PersistError(f"cannot ship this executable to workers: {why}")
        entries = {(e.namespace, e.key): e.data for e in exe.cache_entries}
        return cls(recipe, dict(exe.params_snapshot), entries, threads)

    def _recipe(self) -> Any:
        return replace(self.recipe, target_options=with_threads(
            self.recipe.target, self.recipe.target_options, self.threads))

    def check(self) -> None:
        from cortex.core.api import resolve_target

        resolve_target(self.recipe.target, self._recipe().target_options)

    def build(self) -> Any:
        from cortex.core.persist import rebuild

        return rebuild(self._recipe(), self.params, self.entries)

    def describe(self) -> str:
        recipe = self._recipe()
        options = ", ".join(f"{k}={v!r}" for k, v in sorted(recipe.target_options.items()))
        return (f"{recipe.model_name or recipe.model_class} saved for {recipe.target} "
                f"({options})")


def load_source(model: str, *, threads: int = 1, target: str | None = None,
                options: Mapping[str, Any] | None = None,
                weights: str | Path | None = None) -> Any:
    """The source for ``model``: a file ``exe.save`` wrote (its target and options are the
    saved ones: ``target``/``options``/``weights`` must not be given), a file ``model.save``
    wrote, or a zoo spec (:func:`model_from_spec`, with ``weights``); those two compile for
    ``target`` (default ``llvm``) with ``options``."""
    import cortex
    from cortex.core.frontend.model import Model

    if Path(model).is_file():
        loaded = cortex.load(model)
        if not isinstance(loaded, Model):
            if target is not None or options or weights is not None:
                raise ValueError(f"{model} is a saved executable: it has its target, options "
                                 f"and weights (save the model with model.save to choose them)")
            return SavedExecutable.of(loaded, threads)
        if weights is not None:
            raise ValueError(f"{model} is a saved model: it has its weights")
    else:
        if Path(model).suffix in (".cortex", ".zip") or "/" in model:
            raise FileNotFoundError(f"no model file {model}")
        loaded = model_from_spec(model, weights)
    return CompileRecipe(loaded, target or "llvm", dict(options or {}), threads)


def spec_value(name: str, text: str) -> Any:
    """A model-spec value: an int, a float, true/false, ``ast`` for the size of the Python
    AST vocabulary (``vocab=ast``), or else the text itself."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if name == "vocab" and low == "ast":
        from cortex.data import AST_VOCAB_SIZE

        return AST_VOCAB_SIZE
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def model_from_spec(spec: str, weights: str | Path | None = None) -> Any:
    """A zoo model from ``Name:key=value,key=value`` (the class names of ``cortex.models``;
    the keys are its constructor's keyword arguments), with weights from an ``.npz`` file
    (``Model.save_npz``) when ``weights`` is given; otherwise its seeded random weights.

    ``ChildSumTreeLSTM:hidden=64,embed=32,vocab=ast`` is a child-sum TreeLSTM over Python
    ASTs (``vocab=ast`` is the size of the AST node-type vocabulary).
    """
    import cortex.models as zoo

    name, _, rest = spec.partition(":")
    name = name.strip()
    if name not in zoo.__all__:
        raise ValueError(f"unknown model {name!r} in spec {spec!r}; the zoo has: "
                         f"{', '.join(zoo.__all__)}")
    kwargs: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"model spec {spec!r}: {item!r} is not key=value")
        kwargs[key.strip()] = spec_value(key.strip(), value.strip())
    try:
        model = getattr(zoo, name)(**kwargs)
    except TypeError as e:
        raise ValueError(f"model spec {spec!r}: {e}") from None
    if weights is not None:
        model.load_npz(weights)
    return model
