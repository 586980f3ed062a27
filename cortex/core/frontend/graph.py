"""The RecursiveGraph IR: a target-neutral, per-case SSA dataflow graph of a recursive model.

Pipeline position: ``cortex.core.frontend.trace`` builds a :class:`RecursiveGraph` from a user model;
the graph passes (``cortex.core.passes``) rewrite it; the reference evaluator
(``cortex.core.frontend.reference``) runs it in float64; the recursion lowering turns it into loops.

Shape of the IR (all frozen dataclasses, hashable attrs):

* ``params``: the model's named weights (:class:`ParamSpec`), plus ``derived`` params
  (:class:`DerivedParam`) that passes create, each with an explicit recipe over other params
  (``concat0``: stack along axis 0; ``embed_linear``: ``E @ W.T`` (+ ``b``); ``leaf_state``: one
  state of the leaf case for every token id, ``[vocab, *state shape]``). They are computed
  once, when params are bound (``cortex.core.frontend.params.bind_params``), never per call.
* ``node_inputs``: per-node inputs (:class:`NodeInput`): a token id (``kind="word"``, int32
  scalar, with its vocabulary size) or a dense feature vector (``kind="features"``, ``(F,)``).
* ``states``: the recurrent states every node produces (:class:`StateSpec`, e.g. ``h`` and ``c``).
* ``arity``: ``k`` for fixed-arity models (every internal node has exactly ``k`` children, child
  ``i`` read with ``child_state(state, index=i)``), ``None`` for variable arity (children read
  in a *per-child domain* and brought back with ``reduce_children``).
* ``cases``: ``leaf`` (nodes without children) and ``internal``, and optionally
  ``preterminal``: the internal case specialized for the nodes of level 1, whose children are
  all leaves (a pass derives it, see ``cortex.core.passes.preterminal``; it must compute what
  ``internal`` computes for those nodes, so a consumer may use either). A :class:`Case` is a
  tuple of :class:`Value` in topological order plus the mapping state name -> value id.
* ``outputs``: which states are outputs, and whether for the roots only or for every node.

Every value lives in one of three *domains*: ``invariant`` (depends only on params/constants:
the same for every node), ``node`` (one per node) and ``child`` (one per (node, child) edge).
The domain is stored on the value so lowering can pick loop nests without re-deriving it.

All shape rules live in one table, :data:`SHAPE_RULES`; the tracer and the verifier both use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

Shape = tuple[int, ...]
Attrs = tuple[tuple[str, Any], ...]

FLOAT_DTYPES = ("float32", "float64")
DOMAINS = ("invariant", "node", "child")
CASE_NAMES = ("leaf", "internal")
OPTIONAL_CASES = ("preterminal",)  # level 1 (every child a leaf); see the module docstring

ELEMENTWISE_BINARY = ("add", "sub", "mul")
ELEMENTWISE_UNARY = ("sigmoid", "tanh", "relu")
ELEMENTWISE_OPS = ELEMENTWISE_BINARY + ELEMENTWISE_UNARY
REDUCTIONS = ("sum", "mean")
REDUCING_OPS = ("linear", "matmul", "reduce_children")  # a reduction per element: the costly ops
DERIVED_RECIPES = ("concat0", "embed_linear", "leaf_state")


class GraphError(ValueError):
    """A RecursiveGraph breaks an invariant of the IR (raised by :func:`verify`)."""


class ShapeError(ValueError):
    """An op was applied to arguments of the wrong shape, dtype or count."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: Shape
    dtype: str = "float32"


@dataclass(frozen=True)
class DerivedParam:
    """A param computed from other params at bind time: ``recipe(*args)``. ``attrs``: what the
    recipe needs besides its args (``leaf_state``: ``(("state", name),)``)."""

    name: str
    recipe: str
    args: tuple[str, ...]
    shape: Shape
    dtype: str
    attrs: Attrs = ()

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


@dataclass(frozen=True)
class NodeInput:
    name: str
    kind: str  # "word" | "features"
    shape: Shape  # () for word, (F,) for features
    dtype: str  # "int32" for word, the model's float dtype for features
    vocab: int | None = None


@dataclass(frozen=True)
class StateSpec:
    name: str
    shape: Shape
    dtype: str


@dataclass(frozen=True)
class Value:
    """One SSA value of a case. ``args`` are ids of earlier values of the same case."""

    id: int
    op: str
    args: tuple[int, ...]
    attrs: Attrs
    shape: Shape
    dtype: str
    domain: str  # "invariant" | "node" | "child"
    group: int | None = None  # elementwise fusion group (annotation only)

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default


@dataclass(frozen=True)
class Case:
    name: str
    values: tuple[Value, ...]
    states: tuple[tuple[str, int], ...]  # state name -> value id

    def value_map(self) -> dict[int, Value]:
        return {v.id: v for v in self.values}

    def state_ids(self) -> dict[str, int]:
        return dict(self.states)


@dataclass(frozen=True)
class Outputs:
    states: tuple[str, ...]
    every_node: bool = False  # False: roots only


@dataclass(frozen=True)
class RecursiveGraph:
    name: str
    params: tuple[ParamSpec, ...]
    node_inputs: tuple[NodeInput, ...]
    states: tuple[StateSpec, ...]
    arity: int | None
    cases: tuple[Case, ...]
    outputs: Outputs
    derived: tuple[DerivedParam, ...] = field(default=())

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"graph {self.name!r} has no case {name!r}")

    def param_specs(self) -> dict[str, ParamSpec | DerivedParam]:
        out: dict[str, ParamSpec | DerivedParam] = {p.name: p for p in self.params}
        out.update({d.name: d for d in self.derived})
        return out

    def state_spec(self, name: str) -> StateSpec:
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(f"graph {self.name!r} has no state {name!r}")

    def node_input(self, name: str) -> NodeInput:
        for i in self.node_inputs:
            if i.name == name:
                return i
        raise KeyError(f"graph {self.name!r} has no node input {name!r}")

    def with_case(self, case: Case) -> "RecursiveGraph":
        return replace(self, cases=tuple(case if c.name == case.name else c for c in self.cases))

    def __str__(self) -> str:
        return format_graph(self)


# --------------------------------------------------------------------------------------------
# Shape rules: one table. Each rule gets (arg values, attrs dict, context) and returns
# (shape, dtype). Domains are computed separately by :func:`infer_domain`.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleContext:
    """What a shape rule may need to know beyond its arguments."""

    params: Mapping[str, ParamSpec | DerivedParam]
    node_inputs: Mapping[str, NodeInput]
    states: Mapping[str, StateSpec]
    arity: int | None
    case: str


def _need_args(args: tuple[Value, ...], n: int | tuple[int, ...], op: str) -> None:
    counts = (n,) if isinstance(n, int) else n
    if len(args) not in counts:
        want = " or ".join(str(c) for c in counts)
        raise ShapeError(f"{op} takes {want} argument(s), got {len(args)}")


def _need_float(v: Value, op: str, what: str) -> None:
    if v.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: {what} must be float32/float64, got {v.dtype}")


def _same_dtype(args: tuple[Value, ...], op: str) -> str:
    dtypes = {a.dtype for a in args}
    if len(dtypes) != 1:
        raise ShapeError(f"{op}: arguments mix dtypes {sorted(dtypes)}")
    return args[0].dtype


def _rule_param(args, attrs, ctx):
    _need_args(args, 0, "param")
    name = attrs["name"]
    if name not in ctx.params:
        raise ShapeError(f"param: unknown parameter {name!r} (known: {sorted(ctx.params)})")
    p = ctx.params[name]
    return p.shape, p.dtype


def _rule_input(args, attrs, ctx):
    _need_args(args, 0, "input")
    name = attrs["name"]
    if name not in ctx.node_inputs:
        raise ShapeError(f"input: unknown node input {name!r} (known: {sorted(ctx.node_inputs)})")
    i = ctx.node_inputs[name]
    return i.shape, i.dtype


def _rule_child_input(args, attrs, ctx):
    _need_args(args, 0, "child_input")
    name, index = attrs["name"], attrs.get("index")
    if ctx.case == "leaf":
        raise ShapeError("child_input: a leaf has no children")
    if ctx.arity is None or not isinstance(index, int) or not 0 <= index < ctx.arity:
        raise ShapeError(f"child_input: needs a fixed arity and a child index in [0, arity), "
                         f"got index={index!r}, arity={ctx.arity!r}")
    inp = ctx.node_inputs.get(name)
    if inp is None or inp.kind != "word":
        raise ShapeError(f"child_input: {name!r} is not a word input")
    return (), "int32"


def _rule_child_state(args, attrs, ctx):
    _need_args(args, 0, "child_state")
    name = attrs["state"]
    if ctx.case == "leaf":
        raise ShapeError("child_state: a leaf has no children; read children only in 'internal'")
    if name not in ctx.states:
        raise ShapeError(f"child_state: unknown state {name!r} (known: {sorted(ctx.states)})")
    index = attrs.get("index")
    if ctx.arity is None:
        if index is not None:
            raise ShapeError(
                "child_state: a variable-arity model cannot read child by index "
                f"(index={index}); read all children and reduce them with reduce_children"
            )
    else:
        if index is None:
            raise ShapeError(
                f"child_state: a fixed-arity model (arity {ctx.arity}) reads children by index "
                "(child_state(state, index=i))"
            )
        if not isinstance(index, int) or not 0 <= index < ctx.arity:
            raise ShapeError(
                f"child_state: child index {index!r} out of range for arity {ctx.arity}"
            )
    s = ctx.states[name]
    return s.shape, s.dtype


def _rule_reduce(args, attrs, ctx):
    _need_args(args, 1, "reduce_children")
    (x,) = args
    if attrs.get("kind") not in REDUCTIONS:
        raise ShapeError(f"reduce_children: kind must be one of {REDUCTIONS}, got {attrs.get('kind')!r}")
    if x.domain != "child":
        raise ShapeError(
            "reduce_children: the argument must be a per-child value (built from "
            f"child_state without index), got a {x.domain}-level value"
        )
    _need_float(x, "reduce_children", "argument")
    return x.shape, x.dtype


def _rule_const(args, attrs, ctx):
    _need_args(args, 0, "const")
    shape = tuple(attrs["shape"])
    if attrs.get("dtype") not in FLOAT_DTYPES:
        raise ShapeError(f"const: dtype must be float32/float64, got {attrs.get('dtype')!r}")
    if not all(isinstance(d, int) and d > 0 for d in shape):
        raise ShapeError(f"const: bad shape {shape}")
    return shape, attrs["dtype"]


def _rule_embedding(args, attrs, ctx):
    _need_args(args, 2, "embedding")
    table, ids = args
    _need_float(table, "embedding", "table")
    if ids.dtype != "int32" or ids.shape != ():
        raise ShapeError(f"embedding: ids must be an int32 scalar (a word input), got {ids.dtype}{list(ids.shape)}")
    if len(table.shape) < 2:
        raise ShapeError(f"embedding: table must be at least 2-D [vocab, ...], got {list(table.shape)}")
    if table.domain != "invariant":
        raise ShapeError("embedding: table must be node-invariant (a parameter)")
    return table.shape[1:], table.dtype


def _rule_linear(args, attrs, ctx):
    _need_args(args, (2, 3), "linear")
    w, x = args[0], args[1]
    _need_float(w, "linear", "weight")
    _need_float(x, "linear", "input")
    if len(w.shape) != 2 or len(x.shape) != 1 or w.shape[1] != x.shape[0]:
        raise ShapeError(
            f"linear: weight {list(w.shape)} @ input {list(x.shape)}: need W [out, in] and x [in]"
        )
    if len(args) == 3:
        b = args[2]
        if b.shape != (w.shape[0],):
            raise ShapeError(f"linear: bias shape {list(b.shape)} != [{w.shape[0]}]")
    return (w.shape[0],), _same_dtype(args, "linear")


def _rule_matmul(args, attrs, ctx):
    _need_args(args, 2, "matmul")
    a, b = args
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise ShapeError(f"matmul: {list(a.shape)} @ {list(b.shape)}: need [m, k] @ [k, n]")
    return (a.shape[0], b.shape[1]), _same_dtype(args, "matmul")


def _rule_binary(op):
    def rule(args, attrs, ctx):
        _need_args(args, 2, op)
        a, b = args
        if a.shape != b.shape:
            raise ShapeError(f"{op}: shape mismatch {list(a.shape)} vs {list(b.shape)}")
        _need_float(a, op, "argument")
        return a.shape, _same_dtype(args, op)

    return rule


def _rule_unary(op):
    def rule(args, attrs, ctx):
        _need_args(args, 1, op)
        _need_float(args[0], op, "argument")
        return args[0].shape, args[0].dtype

    return rule


def _rule_concat(args, attrs, ctx):
    if len(args) < 1:
        raise ShapeError("concat takes at least 1 argument")
    axis = attrs.get("axis", 0)
    rank = len(args[0].shape)
    if not 0 <= axis < rank:
        raise ShapeError(f"concat: axis {axis} out of range for rank {rank}")
    for a in args:
        if len(a.shape) != rank or any(
            a.shape[d] != args[0].shape[d] for d in range(rank) if d != axis
        ):
            raise ShapeError(
                f"concat: shapes {[list(a.shape) for a in args]} differ outside axis {axis}"
            )
    shape = list(args[0].shape)
    shape[axis] = sum(a.shape[axis] for a in args)
    return tuple(shape), _same_dtype(args, "concat")


def _rule_slice(args, attrs, ctx):
    _need_args(args, 1, "slice")
    (x,) = args
    axis, start, stop = attrs.get("axis", 0), attrs.get("start"), attrs.get("stop")
    if not 0 <= axis < len(x.shape):
        raise ShapeError(f"slice: axis {axis} out of range for shape {list(x.shape)}")
    if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= x.shape[axis]):
        raise ShapeError(f"slice: bad range [{start}:{stop}] for extent {x.shape[axis]}")
    shape = list(x.shape)
    shape[axis] = stop - start
    return tuple(shape), x.dtype


SHAPE_RULES: dict[str, Callable[[tuple[Value, ...], dict, RuleContext], tuple[Shape, str]]] = {
    "param": _rule_param,
    "input": _rule_input,
    "child_state": _rule_child_state,
    "child_input": _rule_child_input,
    "reduce_children": _rule_reduce,
    "const": _rule_const,
    "embedding": _rule_embedding,
    "linear": _rule_linear,
    "matmul": _rule_matmul,
    "add": _rule_binary("add"),
    "sub": _rule_binary("sub"),
    "mul": _rule_binary("mul"),
    "sigmoid": _rule_unary("sigmoid"),
    "tanh": _rule_unary("tanh"),
    "relu": _rule_unary("relu"),
    "concat": _rule_concat,
    "slice": _rule_slice,
}
OPS = tuple(SHAPE_RULES)


def infer_domain(op: str, args: tuple[Value, ...], attrs: Mapping[str, Any]) -> str:
    """The domain of a new value: leaves by op, otherwise the widest domain of its args."""
    if op in ("param", "const"):
        return "invariant"
    if op in ("input", "child_input"):
        return "node"
    if op == "child_state":
        return "node" if attrs.get("index") is not None else "child"
    if op == "reduce_children":
        return "node"
    order = {d: i for i, d in enumerate(DOMAINS)}
    return max((a.domain for a in args), key=order.__getitem__, default="invariant")


def derived_shape(recipe: str, arg_specs: list[ParamSpec | DerivedParam]) -> Shape:
    """Shape of a derived param from its recipe and args (raises ShapeError when ill-formed)."""
    if recipe == "concat0":
        first = arg_specs[0].shape
        if any(a.shape[1:] != first[1:] for a in arg_specs):
            raise ShapeError(f"concat0: shapes {[a.shape for a in arg_specs]} differ after axis 0")
        return (sum(a.shape[0] for a in arg_specs),) + first[1:]
    if recipe == "embed_linear":
        table, w = arg_specs[0], arg_specs[1]
        if len(table.shape) != 2 or len(w.shape) != 2 or table.shape[1] != w.shape[1]:
            raise ShapeError(f"embed_linear: table {table.shape} and weight {w.shape} don't fit")
        if len(arg_specs) == 3 and arg_specs[2].shape != (w.shape[0],):
            raise ShapeError(f"embed_linear: bias {arg_specs[2].shape} != ({w.shape[0]},)")
        return (table.shape[0], w.shape[0])
    if recipe == "leaf_state":
        raise ShapeError("leaf_state: its shape comes from the graph (see leaf_state_shape)")
    raise ShapeError(f"unknown derived-param recipe {recipe!r} (known: {DERIVED_RECIPES})")


def leaf_state_shape(graph: "RecursiveGraph", state: str) -> Shape:
    """``[vocab, *state shape]``: the shape of a ``leaf_state`` table of ``state``. Needs a leaf
    case whose only node input is a word (a leaf's states are then a function of its token)."""
    words = [i for i in graph.node_inputs if i.kind == "word"]
    if len(graph.node_inputs) != 1 or not words:
        raise ShapeError("leaf_state: the graph's only node input must be a word")
    if state not in {s.name for s in graph.states}:
        raise ShapeError(f"leaf_state: unknown state {state!r}")
    return (int(words[0].vocab),) + graph.state_spec(state).shape


def rule_context(graph: RecursiveGraph, case: str) -> RuleContext:
    return RuleContext(
        params=graph.param_specs(),
        node_inputs={i.name: i for i in graph.node_inputs},
        states={s.name: s for s in graph.states},
        arity=graph.arity,
        case=case,
    )


# --------------------------------------------------------------------------------------------
# Verifier
# --------------------------------------------------------------------------------------------


def verify(graph: RecursiveGraph) -> RecursiveGraph:
    """Check every IR invariant; return the graph unchanged or raise :class:`GraphError`."""
    where = f"graph {graph.name!r}"
    names = [p.name for p in graph.params] + [d.name for d in graph.derived]
    if len(set(names)) != len(names):
        raise GraphError(f"{where}: duplicate parameter names in {names}")
    for p in graph.params:
        if p.dtype not in FLOAT_DTYPES:
            raise GraphError(f"{where}: param {p.name!r} has dtype {p.dtype}, need float32/float64")
    known: dict[str, ParamSpec | DerivedParam] = {p.name: p for p in graph.params}
    for d in graph.derived:
        missing = [a for a in d.args if a not in known]
        if missing:
            raise GraphError(f"{where}: derived param {d.name!r} uses undefined params {missing}")
        try:
            if d.recipe == "leaf_state":
                shape = leaf_state_shape(graph, d.attr("state"))
            else:
                shape = derived_shape(d.recipe, [known[a] for a in d.args])
        except ShapeError as e:
            raise GraphError(f"{where}: derived param {d.name!r}: {e}") from None
        if shape != d.shape:
            raise GraphError(f"{where}: derived param {d.name!r} has shape {d.shape}, recipe gives {shape}")
        known[d.name] = d
    if graph.arity is not None and (not isinstance(graph.arity, int) or graph.arity < 1):
        raise GraphError(f"{where}: arity must be a positive int or None, got {graph.arity!r}")
    for i in graph.node_inputs:
        if i.kind == "word" and (i.shape != () or i.dtype != "int32" or not i.vocab or i.vocab < 1):
            raise GraphError(f"{where}: word input {i.name!r} must be an int32 scalar with a vocab")
        if i.kind == "features" and len(i.shape) != 1:
            raise GraphError(f"{where}: feature input {i.name!r} must be a vector, got {i.shape}")
        if i.kind not in ("word", "features"):
            raise GraphError(f"{where}: node input {i.name!r} has unknown kind {i.kind!r}")
    state_names = [s.name for s in graph.states]
    if not state_names or len(set(state_names)) != len(state_names):
        raise GraphError(f"{where}: states must be non-empty and unique, got {state_names}")
    case_names = [c.name for c in graph.cases]
    extra = sorted(set(case_names) - set(CASE_NAMES))
    if (sorted(set(case_names) & set(CASE_NAMES)) != sorted(CASE_NAMES) or len(set(case_names)) != len(case_names)
            or any(n not in OPTIONAL_CASES for n in extra)):
        raise GraphError(f"{where}: needs exactly the cases {CASE_NAMES} (and optionally "
                         f"{OPTIONAL_CASES}), got {case_names}")
    if extra and graph.arity is None:
        raise GraphError(f"{where}: a {extra[0]!r} case needs a fixed arity")
    for case in graph.cases:
        _verify_case(graph, case)
    bad = [s for s in graph.outputs.states if s not in state_names]
    if bad or not graph.outputs.states:
        raise GraphError(f"{where}: outputs {graph.outputs.states} must be non-empty states of {state_names}")
    return graph


def _verify_case(graph: RecursiveGraph, case: Case) -> None:
    ctx = rule_context(graph, case.name)
    seen: dict[int, Value] = {}
    groups: dict[int, tuple[str, Shape]] = {}
    for v in case.values:
        where = f"graph {graph.name!r}, case {case.name!r}, value %{v.id} ({v.op})"
        if v.id in seen:
            raise GraphError(f"{where}: duplicate value id")
        if v.op not in SHAPE_RULES:
            raise GraphError(f"{where}: unknown op {v.op!r}")
        missing = [a for a in v.args if a not in seen]
        if missing:
            raise GraphError(f"{where}: uses %{missing} before definition (not topological)")
        args = tuple(seen[a] for a in v.args)
        try:
            hash(v.attrs)
            shape, dtype = SHAPE_RULES[v.op](args, dict(v.attrs), ctx)
        except (ShapeError, TypeError) as e:
            raise GraphError(f"{where}: {e}") from None
        domain = infer_domain(v.op, args, dict(v.attrs))
        if (shape, dtype, domain) != (v.shape, v.dtype, v.domain):
            raise GraphError(
                f"{where}: stored {v.dtype}{list(v.shape)} {v.domain}, rules give "
                f"{dtype}{list(shape)} {domain}"
            )
        if v.group is not None:
            if v.op not in ELEMENTWISE_OPS:
                raise GraphError(f"{where}: only elementwise ops may carry a fusion group")
            key = (v.domain, v.shape)
            if groups.setdefault(v.group, key) != key:
                raise GraphError(f"{where}: fusion group {v.group} mixes domains or shapes")
        seen[v.id] = v
    states = dict(case.states)
    if sorted(states) != sorted(s.name for s in graph.states) or len(states) != len(case.states):
        raise GraphError(
            f"graph {graph.name!r}, case {case.name!r}: defines states {sorted(states)}, "
            f"model declares {sorted(s.name for s in graph.states)}"
        )
    for s in graph.states:
        vid = states[s.name]
        if vid not in seen:
            raise GraphError(f"graph {graph.name!r}, case {case.name!r}: state {s.name!r} -> undefined %{vid}")
        v = seen[vid]
        if v.shape != s.shape or v.dtype != s.dtype or v.domain == "child":
            raise GraphError(
                f"graph {graph.name!r}, case {case.name!r}: state {s.name!r} is {s.dtype}{list(s.shape)} "
                f"but %{vid} is {v.dtype}{list(v.shape)} ({v.domain})"
            )


# --------------------------------------------------------------------------------------------
# Printer
# --------------------------------------------------------------------------------------------

_SHORT = {"float32": "f32", "float64": "f64", "int32": "i32"}


def _ty(dtype: str, shape: Shape) -> str:
    return f"{_SHORT.get(dtype, dtype)}[{','.join(str(d) for d in shape)}]"


def format_value(v: Value) -> str:
    """One line: ``%id = op args attrs : type [domain] [#group]``."""
    a = dict(v.attrs)
    if v.op in ("param", "input"):
        head = f"{v.op} {a['name']}"
    elif v.op == "child_input":
        head = f"child_input {a['name']}[{a['index']}]"
    elif v.op == "child_state":
        head = f"child_state {a['state']}[{'*' if a.get('index') is None else a['index']}]"
    elif v.op == "const":
        head = f"const {a['value']!r}"
    else:
        args = ", ".join(f"%{x}" for x in v.args)
        attrs = " ".join(f"{k}={val}" for k, val in v.attrs)
        head = " ".join(p for p in (v.op, args, attrs) if p)
    tail = f" : {_ty(v.dtype, v.shape)}"
    if v.domain != "node":
        tail += f" {v.domain}"
    if v.group is not None:
        tail += f"  #g{v.group}"
    return f"%{v.id} = {head}{tail}"


def format_graph(graph: RecursiveGraph) -> str:
    arity = "variable" if graph.arity is None else str(graph.arity)
    lines = [f"graph {graph.name} (arity {arity}) {{"]
    for p in graph.params:
        lines.append(f"  param {p.name} : {_ty(p.dtype, p.shape)}")
    for d in graph.derived:
        extra = "".join(f", {k}={val}" for k, val in d.attrs)
        lines.append(f"  derived {d.name} = {d.recipe}({', '.join(d.args)}{extra}) : {_ty(d.dtype, d.shape)}")
    for i in graph.node_inputs:
        extra = f" vocab={i.vocab}" if i.vocab else ""
        lines.append(f"  input {i.name} : {i.kind} {_ty(i.dtype, i.shape)}{extra}")
    for s in graph.states:
        lines.append(f"  state {s.name} : {_ty(s.dtype, s.shape)}")
    scope = "every node" if graph.outputs.every_node else "root"
    lines.append(f"  outputs ({scope}): {', '.join(graph.outputs.states)}")
    for case in graph.cases:
        lines.append(f"  case {case.name} {{")
        lines.extend(f"    {format_value(v)}" for v in case.values)
        lines.append("    yield " + ", ".join(f"{s}=%{i}" for s, i in case.states))
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines)
