"""Tracing: run a model's ``leaf``/``internal`` methods symbolically into a RecursiveGraph.

Pipeline position: model (``cortex.core.frontend.model``) -> **trace** -> RecursiveGraph
(``cortex.core.frontend.graph``) -> graph passes. Shapes and dtypes are inferred op by op with the single
rule table ``cortex.core.frontend.graph.SHAPE_RULES``; any violation is a :class:`TraceError` naming the
model, the case and the op, raised while the user's method runs (so the traceback points at the
offending line of the model). The result is verified before it is returned.

Values are :class:`Sym` handles with Python operators (``+ - * @``, and scalars such as
``1 - z`` become constants of the other operand's shape).
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from cortex.core.frontend.graph import (
    Case,
    Outputs,
    RecursiveGraph,
    ShapeError,
    SHAPE_RULES,
    Value,
    infer_domain,
    verify,
)
from cortex.core.frontend.model_errors import TraceError

if TYPE_CHECKING:
    from cortex.core.frontend.model import Model


class Sym:
    """A traced value: a handle on one :class:`Value` of the case being built."""

    __slots__ = ("builder", "value")

    def __init__(self, builder: "CaseBuilder", value: Value) -> None:
        self.builder, self.value = builder, value

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> str:
        return self.value.dtype

    @property
    def per_child(self) -> bool:
        return self.value.domain == "child"

    def __add__(self, other: Any) -> "Sym":
        return self.builder.add(self, other)

    def __radd__(self, other: Any) -> "Sym":
        return self.builder.add(other, self)

    def __sub__(self, other: Any) -> "Sym":
        return self.builder.sub(self, other)

    def __rsub__(self, other: Any) -> "Sym":
        return self.builder.sub(other, self)

    def __mul__(self, other: Any) -> "Sym":
        return self.builder.mul(self, other)

    def __rmul__(self, other: Any) -> "Sym":
        return self.builder.mul(other, self)

    def __matmul__(self, other: Any) -> "Sym":
        o = self.builder._sym(other, "matmul")
        if len(o.shape) == 1:
            return self.builder.linear(self, o)
        return self.builder.matmul(self, o)

    def __repr__(self) -> str:
        return f"<Sym %{self.value.id} {self.value.op} {self.value.dtype}{list(self.value.shape)}>"


class CaseBuilder:
    """The op vocabulary a model's case methods use. One builder per case."""

    def __init__(self, model: "Model", case: str) -> None:
        self.model, self.case = model, case
        self.values: list[Value] = []
        self._ctx = _context(model, case)
        self._params: dict[str, Sym] = {}

    # ---- core emission ---------------------------------------------------------------------

    def op(self, op: str, *args: Any, **attrs: Any) -> Sym:
        """Emit any op by name (the named methods below are the usual way)."""
        if op not in SHAPE_RULES:
            raise TraceError(
                f"unknown op (known ops: {', '.join(SHAPE_RULES)})",
                model=self.model.name, case=self.case, op=op,
            )
        syms = tuple(self._sym(a, op) for a in args)
        vals = tuple(s.value for s in syms)
        attrs_t = tuple(sorted((k, _freeze(v)) for k, v in attrs.items() if v is not None))
        try:
            shape, dtype = SHAPE_RULES[op](vals, dict(attrs_t), self._ctx)
        except ShapeError as e:
            raise TraceError(str(e), model=self.model.name, case=self.case, op=op) from None
        domain = infer_domain(op, vals, dict(attrs_t))
        v = Value(len(self.values), op, tuple(a.id for a in vals), attrs_t, shape, dtype, domain)
        self.values.append(v)
        return Sym(self, v)

    def _sym(self, x: Any, op: str) -> Sym:
        if isinstance(x, Sym):
            if x.builder is not self:
                raise TraceError(
                    "uses a value from another case (values don't cross cases; recompute it)",
                    model=self.model.name, case=self.case, op=op,
                )
            return x
        if isinstance(x, str):
            return self.param(x)
        raise TraceError(
            f"argument {x!r} of type {type(x).__name__} is not a traced value or a param name",
            model=self.model.name, case=self.case, op=op,
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise TraceError(
            f"unknown op (known ops: {', '.join(SHAPE_RULES)}; helpers: split, zeros, const, child, reduce)",
            model=self.model.name, case=self.case, op=name,
        )

    # ---- leaves of the dataflow ------------------------------------------------------------

    def param(self, name: str) -> Sym:
        if name not in self._params:
            self._params[name] = self.op("param", name=name)
        return self._params[name]

    def input(self, name: str | None = None) -> Sym:
        """The node's per-node input (its only one when ``name`` is omitted)."""
        if name is None:
            if len(self.model.node_inputs) != 1:
                raise TraceError(
                    f"input(): model has inputs {list(self.model.node_inputs)}; name one",
                    model=self.model.name, case=self.case, op="input",
                )
            name = next(iter(self.model.node_inputs))
        return self.op("input", name=name)

    def child(self, state: str, index: int | None = None) -> Sym:
        """Child ``index``'s state (fixed arity) or the per-child state (variable arity)."""
        return self.op("child_state", state=state, index=index)

    def const(self, value: float, shape: Sequence[int]) -> Sym:
        return self.op("const", value=float(value), shape=tuple(int(d) for d in shape), dtype=self.model.dtype)

    def zeros(self, shape: Sequence[int]) -> Sym:
        return self.const(0.0, shape)

    # ---- tensor ops ------------------------------------------------------------------------

    def embedding(self, table: Any, ids: Any) -> Sym:
        return self.op("embedding", table, ids)

    def linear(self, w: Any, x: Any, b: Any = None) -> Sym:
        """``W @ x (+ b)`` for ``W [out, in]``, ``x [in]``."""
        return self.op("linear", w, x) if b is None else self.op("linear", w, x, b)

    def matmul(self, a: Any, b: Any) -> Sym:
        return self.op("matmul", a, b)

    def add(self, a: Any, b: Any) -> Sym:
        a, b = self._scalars(a, b, "add")
        return self.op("add", a, b)

    def sub(self, a: Any, b: Any) -> Sym:
        a, b = self._scalars(a, b, "sub")
        return self.op("sub", a, b)

    def mul(self, a: Any, b: Any) -> Sym:
        a, b = self._scalars(a, b, "mul")
        return self.op("mul", a, b)

    def sigmoid(self, x: Any) -> Sym:
        return self.op("sigmoid", x)

    def tanh(self, x: Any) -> Sym:
        return self.op("tanh", x)

    def relu(self, x: Any) -> Sym:
        return self.op("relu", x)

    def concat(self, xs: Sequence[Any], axis: int = 0) -> Sym:
        return self.op("concat", *xs, axis=axis)

    def slice(self, x: Any, start: int, stop: int, axis: int = 0) -> Sym:
        return self.op("slice", x, start=start, stop=stop, axis=axis)

    def split(self, x: Any, parts: int | Sequence[int], axis: int = 0) -> list[Sym]:
        """Split ``x`` along ``axis`` into ``parts`` equal pieces, or pieces of the given sizes."""
        x = self._sym(x, "split")
        extent = x.shape[axis] if 0 <= axis < len(x.shape) else 0
        if isinstance(parts, int):
            if parts < 1 or extent % parts:
                raise TraceError(
                    f"cannot split extent {extent} into {parts} equal parts",
                    model=self.model.name, case=self.case, op="split",
                )
            sizes = [extent // parts] * parts
        else:
            sizes = [int(s) for s in parts]
            if sum(sizes) != extent:
                raise TraceError(
                    f"sizes {sizes} don't add up to extent {extent}",
                    model=self.model.name, case=self.case, op="split",
                )
        out, start = [], 0
        for s in sizes:
            out.append(self.slice(x, start, start + s, axis))
            start += s
        return out

    def reduce(self, x: Any, kind: str = "sum") -> Sym:
        """Sum or mean of a per-child value over the node's children."""
        return self.op("reduce_children", x, kind=kind)

    reduce_children = reduce

    def _scalars(self, a: Any, b: Any, op: str) -> tuple[Sym, Sym]:
        if isinstance(a, numbers.Real) and not isinstance(b, numbers.Real):
            b = self._sym(b, op)
            a = self.const(a, b.shape)
        elif isinstance(b, numbers.Real) and not isinstance(a, numbers.Real):
            a = self._sym(a, op)
            b = self.const(b, a.shape)
        return a, b


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def _context(model: "Model", case: str):
    from cortex.core.frontend.graph import RuleContext

    return RuleContext(
        params=dict(model.param_specs),
        node_inputs=dict(model.node_inputs),
        states=dict(model.states),
        arity=model.arity,
        case=case,
    )


def _trace_case(model: "Model", name: str) -> Case:
    from cortex.core.frontend.model import Model

    if getattr(type(model), name) is getattr(Model, name):
        raise TraceError(f"the model defines no {name}(self, g) method", model=model.name, case=name)
    g = CaseBuilder(model, name)
    result = getattr(model, name)(g)
    if not isinstance(result, Mapping):
        raise TraceError(
            f"must return a dict state name -> value, got {type(result).__name__}",
            model=model.name, case=name,
        )
    missing = [s for s in model.states if s not in result]
    extra = [s for s in result if s not in model.states]
    if missing or extra:
        raise TraceError(
            f"returns states {sorted(result)}, model declares {sorted(model.states)} "
            f"(missing {missing}, unknown {extra})",
            model=model.name, case=name,
        )
    states = []
    for s, spec in model.states.items():
        sym = g._sym(result[s], "return")
        v = sym.value
        if v.shape != spec.shape or v.dtype != spec.dtype:
            raise TraceError(
                f"state {s!r} is declared {spec.dtype}{list(spec.shape)} but the case returns "
                f"{v.dtype}{list(v.shape)} (from op {v.op!r})",
                model=model.name, case=name,
            )
        if v.domain == "child":
            raise TraceError(
                f"state {s!r} is a per-child value; reduce it with reduce(x, 'sum'|'mean')",
                model=model.name, case=name,
            )
        states.append((s, v.id))
    return Case(name, tuple(g.values), tuple(states))


def trace(model: "Model") -> RecursiveGraph:
    """Trace ``model`` into a verified :class:`RecursiveGraph`."""
    if not model.states:
        raise TraceError("declares no states (add_state)", model=model.name, case="-")
    bad = [s for s in model.outputs if s not in model.states]
    if bad:
        raise TraceError(f"outputs {bad} are not states {list(model.states)}", model=model.name, case="-")
    graph = RecursiveGraph(
        name=model.name,
        params=tuple(model.param_specs.values()),
        node_inputs=tuple(model.node_inputs.values()),
        states=tuple(model.states.values()),
        arity=model.arity,
        cases=(_trace_case(model, "leaf"), _trace_case(model, "internal")),
        outputs=Outputs(tuple(model.outputs), bool(model.every_node)),
    )
    return verify(graph)
