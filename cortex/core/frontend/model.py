"""The user-facing model API: declare params, states, per-node inputs and the two cases.

Pipeline position: the first stage. A model is ordinary Python; ``cortex.core.frontend.trace`` calls its
``leaf`` and ``internal`` methods with a :class:`~cortex.core.frontend.trace.CaseBuilder` and records the
ops into a :class:`~cortex.core.frontend.graph.RecursiveGraph`.

Writing a model::

    class MyRNN(Model):
        def __init__(self, vocab, hidden, seed=0):
            super().__init__(arity=2, seed=seed)
            self.add_word_input("word", vocab)
            self.add_state("h", (hidden,))
            self.add_param("E", (vocab, hidden), init="normal")
            self.add_param("W", (hidden, 2 * hidden))
            self.add_param("b", (hidden,), init="zeros")

        def leaf(self, g):
            return {"h": g.embedding("E", g.input("word"))}

        def internal(self, g):
            x = g.concat([g.child("h", 0), g.child("h", 1)])
            return {"h": g.tanh(g.linear("W", x, "b"))}

* ``arity=k``: fixed arity; ``g.child(state, i)`` reads child ``i``. ``arity=None``: variable
  arity; ``g.child(state)`` is a *per-child* value, ops on it stay per-child (node-level values
  broadcast in), ``g.reduce(x, "sum"|"mean")`` returns to node level.
* A sequence is a chain (``arity=1``): node ``t``'s only child is element ``t-1``; the leaf
  case is the first element.
* Params are float32 by default (``dtype="float64"`` allowed), initialised from ``seed``.
* ``outputs``: the states reported (default: all) and ``every_node`` (default: roots only).

Settings and saving: the arguments a model was constructed with are recorded (by
``Model.__new__``, which sees them before any ``__init__`` runs, so a subclass needs nothing);
:meth:`Model.settings` returns them by name. :meth:`Model.save` writes the class's import path,
those settings and the params; :meth:`Model.load` (or ``cortex.load``) constructs the class
with the settings and loads the params (``cortex.core.persist``). A model whose class cannot be
imported by name (defined in ``__main__`` or inside a function) or whose settings JSON cannot
hold is refused at save time, with the reason.

Compiling snapshots the params: an executable never sees later changes. :meth:`set_params` and
:meth:`load_npz` warn when executables compiled from this model are alive; give them the new
weights with ``exe.update_params(model.params)``.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from cortex.core.errors import int_arg
from cortex.core.frontend.graph import FLOAT_DTYPES, NodeInput, ParamSpec, StateSpec
from cortex.core.frontend.model_args import checked_init
from cortex.core.frontend.model_errors import ModelArgumentTypeError, ModelDefinitionError
from cortex.core.linearize.structure import MAX_INDEX

if TYPE_CHECKING:
    from cortex.core.frontend.graph import RecursiveGraph
    from cortex.core.frontend.trace import CaseBuilder, Sym

INITS = ("uniform", "normal", "zeros", "ones", "identity_noise")


def size_arg(owner: str, name: str, value: object) -> int:
    """A model's size (``hidden``, ``vocab``, a dimension of a shape, ``arity``) as an int in
    ``[1, 2^31 - 1]`` (the int32 indices of generated code): a float, a string or a bool is a
    :class:`ModelArgumentTypeError` (also a ``TypeError``), anything out of range a
    :class:`ModelDefinitionError`, both naming the model and the argument."""
    return int_arg(owner, name, value, minimum=1, maximum=MAX_INDEX,
                   error=ModelDefinitionError, type_error=ModelArgumentTypeError)


def size_args(owner: str, **sizes: object) -> list[int | None]:
    """:func:`size_arg` of every keyword in order; a None (an absent option) stays None."""
    return [None if v is None else size_arg(owner, k, v) for k, v in sizes.items()]


class ParamsNotUpdatedWarning(UserWarning):
    """A model's params changed while executables compiled from it are alive (they keep the
    params they were compiled with until ``exe.update_params``)."""


class Model:
    """Base class of every recursive model (see the module docstring).

    A constructor call with a misspelt, missing or extra argument raises a ``TypeError`` that
    lists the keywords the model takes (``cortex.core.frontend.model_args``)."""

    #: Constructor keywords each model passes itself (not through ``**options``).
    SET_BY_SUBCLASS = ("arity",)

    def __new__(cls, *args: Any, **kwargs: Any) -> "Model":
        self = super().__new__(cls)
        self._init_args = (args, dict(kwargs))  # what the constructor was given: settings()
        self._compiled = weakref.WeakSet()  # live executables compiled from this model
        return self

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = checked_init(getattr(init, "__wrapped__", init))  # type: ignore[method-assign]

    @checked_init
    def __init__(
        self,
        *,
        arity: int | None,
        dtype: str | np.dtype | type = "float32",
        seed: int = 0,
        name: str | None = None,
        outputs: tuple[str, ...] | None = None,
        every_node: bool = False,
    ) -> None:
        owner = type(self).__name__
        try:
            dt = np.dtype(dtype).name
        except TypeError:
            raise ModelArgumentTypeError(f"{owner}: dtype must be float32 or float64, got "
                                         f"{dtype!r}") from None
        if dt not in FLOAT_DTYPES:
            raise ModelDefinitionError(f"{owner}: dtype must be float32 or float64, got {dt}")
        if arity is not None:
            arity = size_arg(owner, "arity (a positive int, or None for variable arity)", arity)
        seed = int_arg(owner, "seed", seed, minimum=0, error=ModelDefinitionError,
                       type_error=ModelArgumentTypeError)
        if name is not None and not isinstance(name, str):
            raise ModelArgumentTypeError(f"{owner}: name must be a str, got {type(name).__name__}")
        if not isinstance(every_node, (bool, np.bool_)):
            raise ModelArgumentTypeError(f"{owner}: every_node must be a bool, got {every_node!r}")
        if isinstance(outputs, str):
            raise ModelArgumentTypeError(f"{owner}: outputs must be a tuple of state names, "
                                         f"not the str {outputs!r}")
        self.name = name or owner
        self.arity = arity
        self.dtype = dt
        self.seed = seed
        self.every_node = bool(every_node)
        self._outputs = tuple(outputs) if outputs is not None else None
        self._rng = np.random.default_rng(seed)
        self.param_specs: dict[str, ParamSpec] = {}
        self.params: dict[str, np.ndarray] = {}
        self.states: dict[str, StateSpec] = {}
        self.node_inputs: dict[str, NodeInput] = {}

    # ---- declarations ----------------------------------------------------------------------

    def add_param(
        self, name: str, shape: tuple[int, ...], *, init: str = "uniform", scale: float | None = None
    ) -> np.ndarray:
        """Declare a parameter and initialise it from the model's seeded generator."""
        if name in self.param_specs:
            raise ModelDefinitionError(f"{self.name}: parameter {name!r} declared twice")
        shape = self._shape(f"parameter {name!r}", shape)
        if init not in INITS:
            raise ModelDefinitionError(f"{self.name}: unknown init {init!r} for {name!r} (known: {INITS})")
        if scale is None:
            scale = 1.0 / np.sqrt(shape[-1])
        rng = self._rng
        if init == "uniform":
            value = rng.uniform(-scale, scale, shape)
        elif init == "normal":
            value = rng.normal(0.0, scale, shape)
        elif init == "zeros":
            value = np.zeros(shape)
        elif init == "ones":
            value = np.ones(shape)
        else:  # identity_noise: [..., n, n] identity plus small noise (MV-RNN word matrices)
            if len(shape) < 2 or shape[-1] != shape[-2]:
                raise ModelDefinitionError(f"{self.name}: identity_noise needs square trailing dims, got {shape}")
            value = np.broadcast_to(np.eye(shape[-1]), shape) + rng.normal(0.0, scale, shape)
        self.param_specs[name] = ParamSpec(name, shape, self.dtype)
        self.params[name] = np.ascontiguousarray(value, dtype=self.dtype)
        return self.params[name]

    def add_state(self, name: str, shape: tuple[int, ...]) -> None:
        if name in self.states:
            raise ModelDefinitionError(f"{self.name}: state {name!r} declared twice")
        self.states[name] = StateSpec(name, self._shape(f"state {name!r}", shape), self.dtype)

    def add_word_input(self, name: str, vocab: int) -> None:
        """A per-node token id in ``[0, vocab)`` (``LinearizedBatch.word_ids``)."""
        self._add_input(NodeInput(name, "word", (), "int32", size_arg(self.name, "vocab", vocab)))

    def add_feature_input(self, name: str, features: int) -> None:
        """A per-node dense feature vector ``[features]`` (``LinearizedBatch.features``)."""
        self._add_input(NodeInput(name, "features", (size_arg(self.name, "features", features),),
                                  self.dtype))

    def _shape(self, what: str, shape: Any) -> tuple[int, ...]:
        """A declared shape as a tuple of sizes (each checked by :func:`size_arg`)."""
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)) or not shape:
            raise ModelDefinitionError(f"{self.name}: {what} has bad shape {shape!r}")
        return tuple(size_arg(self.name, f"shape {tuple(shape)} of {what}", d) for d in shape)

    def _add_input(self, inp: NodeInput) -> None:
        if self.node_inputs:
            raise ModelDefinitionError(
                f"{self.name}: one per-node input per model (the batch carries one word id or "
                f"one feature vector per node); already have {list(self.node_inputs)}"
            )
        self.node_inputs[inp.name] = inp

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._outputs if self._outputs is not None else tuple(self.states)

    # ---- the cases (override) --------------------------------------------------------------

    def leaf(self, g: "CaseBuilder") -> Mapping[str, "Sym"]:
        raise NotImplementedError(f"{self.name} must define leaf(self, g)")

    def internal(self, g: "CaseBuilder") -> Mapping[str, "Sym"]:
        raise NotImplementedError(f"{self.name} must define internal(self, g)")

    # ---- conveniences ----------------------------------------------------------------------

    def trace(self) -> "RecursiveGraph":
        from cortex.core.frontend.trace import trace

        return trace(self)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_compiled", None)  # executables do not travel with a pickled model
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compiled = weakref.WeakSet()

    def settings(self) -> dict[str, Any]:
        """The constructor arguments this model was made with, by name (positional ones
        bound to their parameter names): ``type(model)(**model.settings())`` makes it again,
        with the same seeded initial params."""
        args, kwargs = self.__dict__.get("_init_args", ((), {}))
        if not args:
            return dict(kwargs)
        bound = inspect.signature(type(self).__init__).bind(self, *args, **kwargs)
        out = dict(bound.arguments)
        out.pop(next(iter(out)))  # self
        for name, p in inspect.signature(type(self).__init__).parameters.items():
            if p.kind is p.VAR_KEYWORD and name in out:
                out.update(out.pop(name))
            elif p.kind is p.VAR_POSITIONAL and name in out:
                raise TypeError(f"{type(self).__name__}: settings() cannot name the *{name} arguments")
        return out

    def save(self, path: str | Path) -> Path:
        """Write the model's class, settings and params to ``path`` (a zip file; read it with
        :meth:`load` or ``cortex.load``). Returns the path."""
        from cortex.core.persist import save_model

        return save_model(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "Model":
        """The model :meth:`save` wrote: its class constructed with its settings, its params
        loaded (the class must be this one or a subclass)."""
        from cortex.core.persist import load_model

        return load_model(path, expected=cls)

    def save_npz(self, path: str | Path) -> None:
        from cortex.core.frontend.params import save_npz

        save_npz(self, path)

    def load_npz(self, path: str | Path) -> None:
        from cortex.core.frontend.params import load_npz

        load_npz(self, path)
        self._warn_compiled("load_npz")

    def set_params(self, values: Mapping[str, Any]) -> None:
        from cortex.core.frontend.params import set_params

        set_params(self, values)
        self._warn_compiled("set_params")

    def _warn_compiled(self, what: str) -> None:
        live = list(self.__dict__.get("_compiled", ()))
        if live:
            warnings.warn(
                f"{self.name}.{what}: {len(live)} executable(s) compiled from this model keep the "
                f"params they were compiled with; call exe.update_params(model.params) to give "
                f"them the new ones", ParamsNotUpdatedWarning, stacklevel=3)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={list(v.shape)}" for k, v in self.param_specs.items())
        return f"{self.name}(arity={self.arity}, dtype={self.dtype}, params: {sizes})"
