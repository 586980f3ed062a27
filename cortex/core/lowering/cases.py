"""Lowering one case of a RecursiveGraph (leaf or internal) into the loop nests of one node.

Pipeline position: part of the recursion lowering (``cortex.core.lowering.lower``). ``lower`` builds the
host structure (levels, node loops, kernels); this module fills in the body of a node loop: the
case's SSA values become loop nests over tensor dimensions that read the node's inputs, its
children's states (indirectly, through the linearizer's index arrays) and the params, and store
the node's states.

How a case becomes loops
------------------------
Every value is an *element function*: ``elem(value, index)`` returns the LoopProgram expression
of one element. Params, inputs and child states are loads; ``slice``/``concat`` are index
arithmetic (no copies); elementwise ops are arithmetic on their arguments' elements; ``linear``
and ``matmul`` are ``Reduce`` sums over the contracted index (split into one reduction per part
when the contracted operand is a ``concat``, as in ``W @ [h_l; h_r]``); ``reduce_children`` is a
``Reduce`` over the node's CSR edge range in which the per-child values are evaluated with the
edge's child id ``child_ids[e]``.

Inlining everything would recompute expensive values (anything containing a reduction) once per
element of every consumer, so some values are *materialized*:

* with ``fuse=True`` (per-node fusion), only an expensive value (or a state, or a value that
  computes a sigmoid or tanh of node values) that a reduction reads at a varying index (the
  vector of a GEMV, an operand of a matmul, a node value read per child edge), and an
  expensive value that two loop nests would otherwise both recompute. Everything else of
  the same shape is computed in one nest per (depth, domain, shape), with ``Let`` bindings for the
  values it reuses: the stacked gate GEMV, its bias and the elementwise epilogue of a TreeLSTM
  are one loop over the hidden units, with no temporaries beyond the node states.
* with ``fuse=False`` (the dense intermediate layout), every non-trivial value: each gets a
  ``temp`` buffer ``[N, *shape]`` (``[E, *shape]`` for per-child values) and its own loop nest.

A materialized value that is also a state is stored in the state buffer and read back from there.
Nests are emitted in dependency order; on targets with work-groups a group barrier separates
them (a nest may read what other threads of the group wrote in the previous one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from cortex.core import loopir as ir
from cortex.core.frontend.graph import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, REDUCING_OPS, Case, RecursiveGraph, Value
from cortex.core.loopir import Const, Load, Reduce, Select, Var, fconst


class LoweringError(ValueError):
    """The graph uses something the recursion lowering cannot express."""


TRIVIAL_OPS = ("param", "const", "input", "child_input", "child_state", "slice", "concat", "embedding")
EXPENSIVE_OPS = REDUCING_OPS
#: Elementwise ops that cost an ``exp`` (a polynomial and a division) per element: a reduction's
#: vector operand computing one is materialized, not recomputed for every output element.
TRANSCENDENTAL_OPS = ("sigmoid", "tanh")


class NameGen:
    """Fresh identifiers, unique across the whole program (the IR forbids shadowing and the
    schedule primitives name loops by their variable)."""

    def __init__(self, reserved: set[str]) -> None:
        self.used = set(reserved)

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name


@dataclass
class LowerContext:
    """Program-wide facts and what the lowering records for the scheduler."""

    graph: RecursiveGraph
    dtype: str
    names: NameGen
    param_buf: dict[str, str]  # graph param name -> buffer name
    state_buf: dict[str, str]  # state name -> output buffer name
    input_buf: dict[str, str]  # node input name -> buffer name
    fuse: bool
    group_barrier: bool  # emit group barriers between nests
    temps: list[ir.Buffer] = field(default_factory=list)
    hidden_loops: list[tuple[str, int]] = field(default_factory=list)  # (var, extent) outermost dim loops
    gemv_reduces: list[tuple[str, int]] = field(default_factory=list)  # (var, trip) of weight reductions
    weights: set[str] = field(default_factory=set)  # param buffers used as GEMV/matmul weights
    edge_loops: list[str] = field(default_factory=list)
    schedule_nest: Callable[[ir.Stmt, str, int, list[tuple[str, int]]], ir.Stmt] | None = None
    stats: dict[str, int] = field(default_factory=dict)  # what the per-nest knobs did (for notes)


@dataclass(frozen=True)
class _Env:
    node: ir.Expr
    edge: ir.Expr | None  # the current CSR edge (child-domain context)
    bindable: bool  # at the top of a nest body (no reduction variables in scope): may Let-bind


@dataclass
class _Nest:
    domain: str
    shape: tuple[int, ...]
    members: list[int]  # value ids computed by this nest (stored to their storage)


class CaseLowering:
    """Plans and emits one case's loop nests for a node variable."""

    def __init__(self, ctx: LowerContext, case: Case, tag: str) -> None:
        self.ctx = ctx
        self.case = case
        self.tag = tag
        self.vals = case.value_map()
        self.order = [v.id for v in case.values]
        self.state_of: dict[int, list[str]] = {}
        for s, vid in case.states:
            self.state_of.setdefault(vid, []).append(s)
        self._uses()
        self.storage: dict[int, tuple[str, str]] = {}  # vid -> (kind "state"/"temp", buffer)
        self.materialized: set[int] = set()
        self._plan()

    # ------------------------------------------------------------------ planning

    def _uses(self) -> None:
        """For every value: does a reduction read it at a varying index, or a per-child consumer
        read a node value (once per edge)?"""
        self.reduced_operand: set[int] = set()
        self.users: dict[int, list[int]] = {v: [] for v in self.order}
        for v in self.case.values:
            for pos, a in enumerate(v.args):
                self.users[a].append(v.id)
                arg = self.vals[a]
                if v.op == "linear" and (pos == 1 or (pos == 0 and arg.domain != "invariant")):
                    self.reduced_operand.add(a)
                if v.op == "matmul":
                    self.reduced_operand.add(a)
                if v.domain == "child" and arg.domain == "node":
                    self.reduced_operand.add(a)

    def _expensive(self, vid: int, memo: dict[int, bool]) -> bool:
        if vid in memo:
            return memo[vid]
        v = self.vals[vid]
        if vid in self.materialized:
            r = False
        elif v.op in EXPENSIVE_OPS:
            r = True
        else:
            r = any(self._expensive(a, memo) for a in v.args)
        memo[vid] = r
        return r

    def _transcendental(self, vid: int) -> bool:
        """Does the element function of ``vid`` evaluate a sigmoid or tanh of node values
        (through inlined values)?"""
        stack, seen = [vid], set()
        while stack:
            a = stack.pop()
            v = self.vals[a]
            if a in seen or v.domain == "invariant" or (a != vid and a in self.materialized):
                continue
            seen.add(a)
            if v.op in TRANSCENDENTAL_OPS:
                return True
            stack.extend(v.args)
        return False

    def _deps(self, vid: int) -> set[int]:
        """Materialized values the element function of ``vid`` reads (through inlined values)."""
        out: set[int] = set()
        stack = list(self.vals[vid].args)
        seen: set[int] = set()
        while stack:
            a = stack.pop()
            if a in seen:
                continue
            seen.add(a)
            if a in self.materialized:
                out.add(a)
            else:
                stack.extend(self.vals[a].args)
        return out

    def _inlined_expensive(self, members: list[int]) -> set[int]:
        memo: dict[int, bool] = {}
        out: set[int] = set()
        stack = [a for m in members for a in self.vals[m].args]
        seen: set[int] = set()
        while stack:
            a = stack.pop()
            if a in seen or a in self.materialized:
                continue
            seen.add(a)
            if self.vals[a].domain != "invariant" and self._expensive(a, memo):
                out.add(a)
            stack.extend(self.vals[a].args)
        return out

    def _plan(self) -> None:
        if self.ctx.fuse:
            for vid in self.order:  # topological: an earlier materialization can make later values cheap
                v = self.vals[vid]
                # a state a reduction reads (a refactored node's projection of its own state) is
                # stored anyway: read it back rather than recompute its epilogue per element
                # so is one that computes a sigmoid or tanh of node values without a reduction
                # (TreeGRU's level-1 ``r * h_k``, its reset gate read from tables): inlined, the
                # GEMV over it would evaluate it once per output element
                if v.domain != "invariant" and vid in self.reduced_operand and (
                        self._expensive(vid, {}) or vid in self.state_of
                        or self._transcendental(vid)):
                    self.materialized.add(vid)
            while True:
                nests = self._nests()
                count: dict[int, int] = {}
                for n in nests:
                    memo: dict[int, bool] = {}
                    own = {m for m in n.members if m not in self.materialized and self._expensive(m, memo)}
                    for a in self._inlined_expensive(n.members) | own:
                        count[a] = count.get(a, 0) + 1
                shared = {a for a, c in count.items() if c > 1}
                if not shared:
                    break
                self.materialized |= shared
        else:
            for vid in self.order:
                v = self.vals[vid]
                if v.domain != "invariant" and v.op not in TRIVIAL_OPS:
                    self.materialized.add(vid)
        for vid in self.order:
            if vid not in self.materialized:
                continue
            v = self.vals[vid]
            if vid in self.state_of:
                self.storage[vid] = ("state", self.ctx.state_buf[self.state_of[vid][0]])
                continue
            name = self.ctx.names.fresh(f"t_{self.tag}{vid}")
            rows = Var("E") if v.domain == "child" else Var("N")
            self.ctx.temps.append(ir.Buffer(name, self.ctx.dtype, (rows,) + v.shape, "temp"))
            self.storage[vid] = ("temp", name)
        self.nests = self._nests()

    def _nests(self) -> list[_Nest]:
        roots = [vid for vid in self.order if vid in self.materialized or vid in self.state_of]
        depth: dict[int, int] = {}
        for vid in roots:  # topological order: deps come first
            depth[vid] = 1 + max((depth[d] for d in self._deps(vid)), default=0)
        nests: dict[tuple, _Nest] = {}
        out: list[_Nest] = []
        for vid in sorted(roots, key=lambda r: (depth[r], self.order.index(r))):
            v = self.vals[vid]
            key = (depth[vid], v.domain, v.shape) if self.ctx.fuse else (vid,)
            if key not in nests:
                nests[key] = _Nest(v.domain, v.shape, [])
                out.append(nests[key])
            nests[key].members.append(vid)
        return out

    # ------------------------------------------------------------------ emission

    def emit(self, node: Var) -> ir.Stmt:
        """The statements computing this case for node ``node`` (a bound int variable)."""
        self.node_lets: list[tuple[str, ir.Expr]] = []
        self.node_cache: dict[tuple, Var] = {}
        parts: list[ir.Stmt] = []
        for i, nest in enumerate(self.nests):
            if i and self.ctx.group_barrier:
                parts.append(ir.Barrier("group"))
            parts.append(self._emit_nest(nest, node))
        body = ir.seq(*parts)
        for name, value in reversed(self.node_lets):
            body = ir.Let(name, value, body)
        return body

    def _node_var(self, key: tuple, base: str, value: ir.Expr) -> Var:
        """A per-node int binding (token id, child id), hoisted to the top of the node body."""
        if key not in self.node_cache:
            name = self.ctx.names.fresh(base)
            self.node_lets.append((name, value))
            self.node_cache[key] = Var(name)
        return self.node_cache[key]

    def _emit_nest(self, nest: _Nest, node: Var) -> ir.Stmt:
        names = self.ctx.names
        loop_vars = [names.fresh(f"j{self.tag}" if d == 0 else f"j{self.tag}{d}") for d in range(len(nest.shape))]
        idx = tuple(Var(x) for x in loop_vars)
        edge: ir.Expr | None = None
        edge_var = None
        if nest.domain == "child":
            edge_var = names.fresh(f"e{self.tag}")
            edge = Var(edge_var)
        env = _Env(node, edge, True)
        self.lets: list[tuple[str, ir.Expr]] = []
        self.cache: dict[tuple, ir.Expr] = {}
        n_reduces = len(self.ctx.gemv_reduces)
        stores: list[ir.Stmt] = []
        for vid in nest.members:
            value = self._elem_computed(vid, idx, env)
            targets = []
            if vid in self.state_of:
                targets = [self.ctx.state_buf[s] for s in self.state_of[vid]]
            elif vid in self.storage:
                targets = [self.storage[vid][1]]
            row = edge if nest.domain == "child" else node
            for buf in targets:
                stores.append(ir.Store(buf, (row,) + idx, value))
        body = ir.seq(*stores)
        for name, value in reversed(self.lets):
            body = ir.Let(name, value, body)
        for d in reversed(range(len(nest.shape))):
            body = ir.For(loop_vars[d], 0, nest.shape[d], body)
        if loop_vars:
            self.ctx.hidden_loops.append((loop_vars[0], nest.shape[0]))
            if self.ctx.schedule_nest is not None:
                body = self.ctx.schedule_nest(body, loop_vars[0], nest.shape[0], self.ctx.gemv_reduces[n_reduces:])
        if edge_var is not None:
            body = ir.For(edge_var, Load("child_offsets", (node,)), Load("child_offsets", (node + 1,)), body)
            self.ctx.edge_loops.append(edge_var)
        return body

    # ------------------------------------------------------------------ element functions

    def elem(self, vid: int, idx: tuple[ir.Expr, ...], env: _Env) -> ir.Expr:
        """One element of value ``vid``: a load of its storage if materialized, else computed."""
        if vid in self.storage:
            kind, buf = self.storage[vid]
            v = self.vals[vid]
            if v.domain == "child":
                if env.edge is None:
                    raise LoweringError(f"per-child value %{vid} read outside a child context")
                return Load(buf, (env.edge,) + idx)
            return Load(buf, (env.node,) + idx)
        return self._elem_computed(vid, idx, env)

    def _elem_computed(self, vid: int, idx: tuple[ir.Expr, ...], env: _Env) -> ir.Expr:
        v = self.vals[vid]
        idx = tuple(ir.simplify(i) for i in idx)  # type: ignore[misc]
        if env.bindable and v.op not in TRIVIAL_OPS:
            key = (vid, idx)
            if key in self.cache:
                return self.cache[key]
            e = self._compute(v, idx, env)
            name = self.ctx.names.fresh(f"{_short(v.op)}{self.tag}{vid}")
            self.lets.append((name, e))
            var = Var(name, self.ctx.dtype)
            self.cache[key] = var
            return var
        return self._compute(v, idx, env)

    def _zero(self) -> Const:
        return fconst(0.0, self.ctx.dtype)

    def _compute(self, v: Value, idx: tuple[ir.Expr, ...], env: _Env) -> ir.Expr:
        op, a, dt = v.op, dict(v.attrs), self.ctx.dtype
        inner = _Env(env.node, env.edge, False)
        if op == "param":
            return Load(self.ctx.param_buf[a["name"]], idx)
        if op == "const":
            return fconst(float(a["value"]), dt)
        if op == "input":
            inp = self.ctx.graph.node_input(a["name"])
            buf = self.ctx.input_buf[a["name"]]
            if inp.kind == "word":
                return self._node_var(("word", a["name"]), "x", Load(buf, (env.node,)))
            return Load(buf, (env.node,) + idx)
        if op == "child_input":  # the token of child i (a level-1 node's leaf child)
            i = a["index"]
            ch = self._node_var(("child", i), f"ch{i}", Load("child_table", (env.node, i)))
            word = Load(self.ctx.input_buf[a["name"]], (ch,))
            return self._node_var(("child_word", i), f"cw{i}", Select(ch >= 0, word, Const(-1)))
        if op == "child_state":
            buf = self.ctx.state_buf[a["state"]]
            i = a.get("index")
            if i is None:
                if env.edge is None:
                    raise LoweringError("per-child state read outside a child context")
                return Load(buf, (Load("child_ids", (env.edge,)),) + idx)
            ch = self._node_var(("child", i), f"ch{i}", Load("child_table", (env.node, i)))
            return Select(ch >= 0, Load(buf, (ch,) + idx), self._zero())
        if op == "reduce_children":
            e = self.ctx.names.fresh(f"e{self.tag}")
            lo, hi = Load("child_offsets", (env.node,)), Load("child_offsets", (env.node + 1,))
            body = self.elem(v.args[0], idx, _Env(env.node, Var(e), False))
            total = Reduce("sum", e, lo, hi, body)
            if a["kind"] == "mean":
                count = ir.maximum(hi - lo, 1)
                return ir.BinOp("/", total, ir.Cast(dt, count))
            return total
        if op == "embedding":
            ids = self.elem(v.args[1], (), env)
            return Select(ids >= 0, self.elem(v.args[0], (ids,) + idx, inner), self._zero())
        if op == "linear":
            (i,) = idx
            w = v.args[0]
            out = self._contract(lambda k: self.elem(w, (i, k), inner), v.args[1], 0, (None,), inner,
                                 weight=self._weight_name(w))
            if len(v.args) == 3:
                out = ir.BinOp("+", out, self.elem(v.args[2], (i,), env))
            return out
        if op == "matmul":
            i, j = idx
            A = v.args[0]
            return self._contract(lambda k: self.elem(A, (i, k), inner), v.args[1], 0, (None, j), inner,
                                  weight=self._weight_name(A))
        if op in ELEMENTWISE_BINARY:
            x, y = (self.elem(arg, idx, env) for arg in v.args)
            return ir.BinOp({"add": "+", "sub": "-", "mul": "*"}[op], x, y)
        if op in ELEMENTWISE_UNARY:
            x = self.elem(v.args[0], idx, env)
            if op == "relu":
                return ir.BinOp("max", x, self._zero())
            return ir.call(op, x)
        if op == "slice":
            axis = a.get("axis", 0)
            shifted = list(idx)
            shifted[axis] = idx[axis] + a["start"]
            return self.elem(v.args[0], tuple(shifted), env)
        if op == "concat":
            return self._concat_elem(v, idx, env)
        raise LoweringError(f"recursion lowering: op {op!r} is not supported")

    def _weight_name(self, vid: int) -> str | None:
        v = self.vals[vid]
        if v.op == "param" and len(v.shape) == 2 and vid not in self.storage:
            name = self.ctx.param_buf[v.attr("name")]
            self.ctx.weights.add(name)
            return name
        return None

    def _contract(self, left: Callable[[ir.Expr], ir.Expr], vid: int, axis: int, other: tuple,
                  env: _Env, weight: str | None) -> ir.Expr:
        """sum_k left(k) * elem(vid, other with k at ``axis``), one Reduce per concat part."""
        v = self.vals[vid]
        if v.op == "concat" and v.attr("axis", 0) == axis and vid not in self.storage:
            total: ir.Expr | None = None
            off = 0
            for part in v.args:
                n = self.vals[part].shape[axis]
                o = off
                term = self._contract(lambda k, o=o: left(k + o), part, axis, other, env, weight)
                total = term if total is None else ir.BinOp("+", total, term)
                off += n
            assert total is not None
            return total
        k = self.ctx.names.fresh(f"k{self.tag}")
        kv = Var(k)
        index = tuple(kv if x is None else x for x in other)
        body = ir.BinOp("*", left(kv), self.elem(vid, index, env))
        trip = v.shape[axis]
        if weight is not None:
            self.ctx.gemv_reduces.append((k, trip))
        return Reduce("sum", k, 0, trip, body)

    def _concat_elem(self, v: Value, idx: tuple[ir.Expr, ...], env: _Env) -> ir.Expr:
        axis = v.attr("axis", 0)
        a = idx[axis]
        parts = []
        off = 0
        for part in v.args:
            n = self.vals[part].shape[axis]
            parts.append((part, off, n))
            off += n
        c = ir.const_int(a)
        if c is not None:
            for part, o, n in parts:
                if o <= c < o + n:
                    sub = list(idx)
                    sub[axis] = Const(c - o)
                    return self.elem(part, tuple(sub), env)
            raise LoweringError(f"concat index {c} out of range")
        # a varying index: select the part; clamp each part's index so every branch is in bounds
        out: ir.Expr | None = None
        for part, o, n in reversed(parts):
            sub = list(idx)
            sub[axis] = ir.maximum(ir.minimum(a - o, n - 1), 0)
            e = self.elem(part, tuple(sub), env)
            out = e if out is None else Select(a < o + n, e, out)
        assert out is not None
        return out


def _short(op: str) -> str:
    return {"linear": "g", "matmul": "mm", "reduce_children": "r", "add": "a", "sub": "s", "mul": "m",
            "sigmoid": "sg", "tanh": "th", "relu": "re"}.get(op, "t")
