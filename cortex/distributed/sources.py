"""Where a worker gets its executable: a recipe it compiles once, in its own process.

Pipeline position: the first thing a distributed worker (:mod:`cortex.distributed.worker`) does
is ``source.build()``, which runs the whole compile pipeline (``cortex.compile``) on the worker's
machine. What travels to the worker is the *source*, not an executable: an executable holds
native code and device buffers that do not pickle, and native code built on the driver's CPU
need not run on a worker's. A source is small and picklable — a model's weights, a target name
and compile options — and every worker compiles for its own CPU (``cpu="host"``).

:class:`ExecutableSource` is the contract (``build``, ``check``, ``threads``, ``describe``), so
other sources — an executable saved to disk and loaded on the worker — plug in without touching
the worker. :class:`CompileRecipe` is the one built here: a model object, a target and its
options. :func:`model_from_spec` makes a zoo model from a command-line spec such as
``ChildSumTreeLSTM:hidden=64,embed=32,vocab=ast``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 1:
            raise ValueError(f"threads must be an integer >= 1 (CPUs per worker), got {self.threads!r}")
        if "threads" in self.options and self.options["threads"] != self.threads:
            raise ValueError(f"give the thread count once: threads={self.threads} but "
                             f"options has threads={self.options['threads']!r}")

    def compile_options(self) -> dict[str, Any]:
        """The options ``cortex.compile`` gets: ``options`` plus ``threads`` where the
        target takes it."""
        from cortex.core.api import resolve_target

        target, _ = resolve_target(self.target)
        options = dict(self.options)
        if any(o.name == "threads" for o in target.options):
            options["threads"] = self.threads
        return options

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
