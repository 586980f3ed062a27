"""The LoopProgram verifier: names, types, scopes, barriers and bounds of every access.

Pipeline position: runs after lowering and after every schedule transformation (and in
tests), before rendering or interpreting. Generated code dereferences buffers without
checks, so this is where an out-of-range index is caught at compile time.

Bounds are proved with interval analysis over *symbolic* sizes. An interval bound is an affine
form over size symbols (``N - 1``, ``L + 1``) or unknown. Facts used:

* sizes are ``>= lo`` (default 0) and, when declared, ``<= hi`` (``NL <= N``);
* an index buffer's ``value_range`` bounds what a load from it returns (the linearizer's
  contract: ``child_table`` in [-1, N-1], ``level_offsets`` in [0, N], ...);
* ``for v in [a, b)`` gives ``v`` in [lo(a), hi(b) - 1]; the same for ``Reduce`` variables;
* ``S // c`` (a size over a positive constant, as in the block count of a node-blocked
  state) is a symbol ``>= 0`` of its own, and ``x <= S`` gives ``x // c <= S // c``; an
  access ``(n // b, *k, n % b)`` of a node-blocked buffer is proved as ``(n, *k)`` against its
  logical shape (so its padding rows are never read as data);
* the condition of an ``If`` / ``Select`` / ``and`` refines the interval of the compared
  expressions in the branch it guards (``c >= 0`` makes a load ``h[c, k]`` with ``c`` from
  ``child_table`` provably in bounds; ``v < stop`` bounds a split loop's tail).

Cross-lane reductions (``Reduce.lanes``) must sit in a ``gpu_thread`` loop of the same
``lanes`` and not in another one; with capabilities, ``lanes`` may not exceed ``warp_size``.

Kernels are checked once per launch site, with their parameters' intervals taken from the
launch arguments. ``verify`` raises :class:`VerificationError` listing every problem found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from cortex.core import loopir as ir
from cortex.core.plugin.capabilities import Capabilities


class VerificationError(ir.LoopIRError):
    """A LoopProgram is ill-formed or an access cannot be proved in bounds."""

    def __init__(self, program: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n  ".join(problems)
        super().__init__(f"LoopProgram {program!r} failed verification ({len(problems)} problems):\n  {lines}")


# --------------------------------------------------------------------------- affine forms


@dataclass(frozen=True)
class Affine:
    """``const + sum(coeff * symbol)`` over size symbols."""

    const: int
    terms: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(const: int = 0, terms: dict[str, int] | None = None) -> "Affine":
        if not terms:
            return Affine(const)
        t = tuple(sorted((k, v) for k, v in terms.items() if v != 0))
        return Affine(const, t)

    def __add__(self, o: "Affine") -> "Affine":
        d = dict(self.terms)
        for k, v in o.terms:
            d[k] = d.get(k, 0) + v
        return Affine.of(self.const + o.const, d)

    def scale(self, c: int) -> "Affine":
        return Affine.of(self.const * c, {k: v * c for k, v in self.terms})

    def __sub__(self, o: "Affine") -> "Affine":
        return self + o.scale(-1)

    def shift(self, c: int) -> "Affine":
        return Affine(self.const + c, self.terms)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def __str__(self) -> str:
        parts = [f"{v}*{k}" if v != 1 else k for k, v in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


@dataclass(frozen=True)
class Interval:
    lo: Affine | None  # None: unbounded
    hi: Affine | None


UNKNOWN = Interval(None, None)


class _Prover:
    def __init__(self, sizes: Iterable[ir.Size]) -> None:
        self._le: dict[tuple[Affine, Affine], bool] = {}
        self.lo: dict[str, int] = {}
        self.hi: dict[str, Affine] = {}
        for s in sizes:
            self.lo[s.name] = s.lo
            if s.hi is not None:
                a = affine(s.hi, set(self.lo) | {s.name})
                if a is not None:
                    self.hi[s.name] = a

    def nonneg(self, a: Affine) -> bool:
        """Prove ``a >= 0`` for every value of the size symbols."""
        for _ in range(8):  # bound negative terms by the symbols' upper bounds
            neg = [(k, c) for k, c in a.terms if c < 0 and k in self.hi]
            if not neg:
                break
            k, c = neg[0]
            d = dict(a.terms)
            del d[k]
            a = Affine.of(a.const, d) + self.hi[k].scale(-c)
        if any(c < 0 for _, c in a.terms):
            return False
        return a.const + sum(c * self.lo.get(k, 0) for k, c in a.terms) >= 0

    def le(self, a: Affine | None, b: Affine | None) -> bool:
        if a is None or b is None:
            return False
        key = (a, b)  # the same few bounds are compared for every access: remember the answers
        hit = self._le.get(key)
        if hit is None:
            hit = self._le[key] = self.nonneg(b - a)
        return hit


def floor_symbol(size: str, c: int) -> str:
    """The name of the symbol that stands for ``size // c`` in affine forms (a buffer of
    ``N // b + 1`` node blocks: ``cortex.core.lowering.state_layout``)."""
    return f"{size}//{c}"


def floor_of(e: ir.Expr, symbols: set[str]) -> tuple[str, int] | None:
    """``(S, c)`` when ``e`` is ``S // c``: a size symbol over a positive constant."""
    if isinstance(e, ir.BinOp) and e.op == "//" and isinstance(e.a, ir.Var) and e.a.name in symbols:
        c = ir.const_int(e.b)
        if c is not None and c > 0:
            return e.a.name, c
    return None


def affine(e: ir.Expr, symbols: set[str]) -> Affine | None:
    """An int expression over size symbols as an affine form, or None. ``S // c`` (a size
    over a positive constant) is a symbol of its own, :func:`floor_symbol` (``>= 0``)."""
    if isinstance(e, ir.Const) and e.dtype == ir.INT:
        return Affine(int(e.value))
    if isinstance(e, ir.Var) and e.name in symbols:
        return Affine.of(0, {e.name: 1})
    floor = floor_of(e, symbols)
    if floor is not None:
        return Affine.of(0, {floor_symbol(*floor): 1})
    if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*"):
        a, b = affine(e.a, symbols), affine(e.b, symbols)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if a.is_const:
            return b.scale(a.const)
        if b.is_const:
            return a.scale(b.const)
    return None


# --------------------------------------------------------------------------- the checker


@dataclass
class _Scope:
    vars: dict[str, tuple[str, Interval]]  # name -> (dtype, interval)
    facts: dict[ir.Expr, Interval]  # refinements from guards
    locals: dict[str, ir.Alloc]
    loops: tuple[str, ...]  # kinds of enclosing loops
    in_if: bool


class _Checker:
    def __init__(self, program: ir.Program, caps: Capabilities | None) -> None:
        self.p = program
        self.caps = caps
        self.problems: list[str] = []
        self.sizes = set(program.size_names)
        self.prover = _Prover(program.sizes)
        self.buffers = {b.name: b for b in program.buffers}
        # the sizes S with an ``S // c`` in a buffer's shape, by c
        self.floors: dict[int, list[str]] = {}
        for b in program.buffers:
            for d in b.shape:
                for n in ir.walk(d):
                    floor = floor_of(n, self.sizes)  # type: ignore[arg-type]
                    if floor is not None and floor[0] not in self.floors.get(floor[1], ()):
                        self.floors.setdefault(floor[1], []).append(floor[0])
        self._dtypes: dict[int, tuple[dict, dict[str, str]]] = {}
        self.where = ""

    def err(self, msg: str) -> None:
        full = f"{self.where}: {msg}" if self.where else msg
        if full not in self.problems:
            self.problems.append(full)

    # ------------------------------------------------------------ declarations
    def declarations(self) -> None:
        sym_iv = {s: ("int32", Interval(Affine.of(0, {s: 1}), Affine.of(0, {s: 1}))) for s in self.sizes}
        for b in self.p.buffers:
            self.where = f"buffer {b.name}"
            for d in b.shape:
                if affine(d, self.sizes) is None:
                    self.err(f"shape {d} is not an affine expression of sizes {sorted(self.sizes)}")
            if b.value_range is not None:
                if b.dtype != ir.INT:
                    self.err("value_range is only meaningful for int32 index buffers")
                for x in b.value_range:
                    if affine(x, self.sizes) is None:
                        self.err(f"value_range bound {x} is not affine in the sizes")
        self.base_vars = sym_iv
        if self.caps is not None:
            self.where = ""
            if "float64" in self.p.float_dtypes() and not self.caps.supports_fp64:
                self.err("program uses float64 but the target does not support fp64")
            for b in self.p.buffers:
                if b.storage and b.storage not in self.caps.weight_storage:
                    self.err(f"buffer {b.name} is stored as {b.storage}, which the target does "
                             f"not read (Capabilities.weight_storage)")

    # ------------------------------------------------------------ expressions
    def dtypes(self, sc: _Scope) -> dict[str, str]:
        # one dict per set of allocs in scope (asked for every expression checked)
        hit = self._dtypes.get(id(sc.locals))
        if hit is None or hit[0] is not sc.locals:
            d = {n: b.dtype for n, b in self.buffers.items()}
            d.update({n: a.dtype for n, a in sc.locals.items()})
            hit = self._dtypes[id(sc.locals)] = (sc.locals, d)
        return hit[1]

    def dtype(self, e: ir.Expr, sc: _Scope) -> str:
        try:
            return ir.infer_dtype(e, self.dtypes(sc))
        except ir.LoopIRError as exc:
            self.err(str(exc))
            return "?"

    def expr(self, e: ir.Expr, sc: _Scope) -> None:
        """Type- and bounds-check an expression (recursively)."""
        if isinstance(e, ir.Const):
            return
        if isinstance(e, ir.Var):
            if e.name not in sc.vars:
                self.err(f"variable {e.name!r} is not bound here")
            elif sc.vars[e.name][0] != e.dtype:
                self.err(f"variable {e.name!r} used as {e.dtype} but bound as {sc.vars[e.name][0]}")
            return
        if isinstance(e, ir.Load):
            for i in e.index:
                self.expr(i, sc)
            self.access(e.buffer, e.index, sc, "load")
            return
        if isinstance(e, (ir.BinOp, ir.Cmp)):
            self.expr(e.a, sc)
            if isinstance(e, ir.BinOp) and e.op in ("and", "or"):
                for x in (e.a, e.b):
                    if self.dtype(x, sc) != ir.BOOL:
                        self.err(f"operand of {e.op} must be bool: {x}")
                self.expr(e.b, self.refine(sc, e.a, e.op == "and"))
                return
            self.expr(e.b, sc)
            ta, tb = self.dtype(e.a, sc), self.dtype(e.b, sc)
            if ta != tb:
                self.err(f"operands of {e.op} have different types {ta} and {tb}: {e}")
            elif isinstance(e, ir.BinOp):
                if ta == ir.BOOL:
                    self.err(f"arithmetic {e.op} on bool: {e}")
                if e.op == "/" and ta == ir.INT:
                    self.err(f"int division must be written // (non-negative operands): {e}")
                if e.op in ("//", "%") and ta != ir.INT:
                    self.err(f"{e.op} is only for ints: {e}")
            return
        if isinstance(e, ir.Not):
            self.expr(e.a, sc)
            if self.dtype(e.a, sc) != ir.BOOL:
                self.err(f"not of a non-bool: {e}")
            return
        if isinstance(e, ir.Select):
            self.cond(e.cond, sc)
            self.expr(e.a, self.refine(sc, e.cond, True))
            self.expr(e.b, self.refine(sc, e.cond, False))
            if self.dtype(e.a, sc) != self.dtype(e.b, sc):
                self.err(f"select branches differ in type: {e}")
            return
        if isinstance(e, ir.Cast):
            self.expr(e.a, sc)
            return
        if isinstance(e, ir.Call):
            for a in e.args:
                self.expr(a, sc)
            ts = {self.dtype(a, sc) for a in e.args}
            if len(ts) != 1 or not ts <= set(ir.FLOAT_DTYPES):
                if not (e.fn == "abs" and ts == {ir.INT}):
                    self.err(f"{e.fn} needs float arguments of one type, got {sorted(ts)}: {e}")
            return
        if isinstance(e, ir.Reduce):
            self.expr(e.start, sc)
            self.expr(e.stop, sc)
            inner = self.bind(sc, e.var, ir.INT, self.loop_interval(e.start, e.stop, sc))
            self.expr(e.body, inner)
            if e.op == "mean" and self.dtype(e.body, sc) not in ir.FLOAT_DTYPES:
                self.err(f"mean of a non-float: {e}")
            return
        self.err(f"not an expression: {e!r}")

    def cond(self, c: ir.Expr, sc: _Scope) -> None:
        self.expr(c, sc)
        if self.dtype(c, sc) != ir.BOOL:
            self.err(f"condition is not bool: {c}")

    def access(self, name: str, index: tuple[ir.Expr, ...], sc: _Scope, what: str) -> None:
        if name in sc.locals:
            shape = [Affine(d) for d in sc.locals[name].shape]
        elif name in self.buffers:
            b = self.buffers[name]
            logical = _node_blocked_index(b, index)
            if logical is not None:  # checked as the row-major access it stands for
                index = logical
                shape = [affine(d, self.sizes) for d in b.logical_shape or ()]
            else:
                shape = [affine(d, self.sizes) for d in b.shape]
        else:
            self.err(f"{what} of unknown buffer {name!r}")
            return
        if len(index) != len(shape):
            self.err(f"{what} {name}: {len(index)} indices for a {len(shape)}-d buffer")
            return
        for k, (i, dim) in enumerate(zip(index, shape)):
            if self.dtype(i, sc) != ir.INT:
                self.err(f"{what} {name}: index {k} ({i}) is not int32")
                continue
            iv = self.interval(i, sc)
            if not self.prover.le(Affine(0), iv.lo):
                self.err(
                    f"{what} {name}[{', '.join(map(str, index))}]: cannot prove index {k} ({i}) >= 0 "
                    f"(its lower bound is {iv.lo if iv.lo is not None else 'unknown'}); guard it with a select/if"
                )
            if dim is None or not self.prover.le(iv.hi, dim.shift(-1)):
                self.err(
                    f"{what} {name}[{', '.join(map(str, index))}]: cannot prove index {k} ({i}) < {dim} "
                    f"(its upper bound is {iv.hi if iv.hi is not None else 'unknown'})"
                )

    # ------------------------------------------------------------ intervals
    def interval(self, e: ir.Expr, sc: _Scope) -> Interval:
        iv = self._interval(e, sc)
        fact = sc.facts.get(e)
        if fact is not None:
            iv = Interval(self._tighter(fact.lo, iv.lo, lower=True), self._tighter(fact.hi, iv.hi, lower=False))
        return iv

    def _tighter(self, a: Affine | None, b: Affine | None, lower: bool) -> Affine | None:
        if a is None:
            return b
        if b is None:
            return a
        if lower:
            if self.prover.le(a, b):
                return b
            if self.prover.le(b, a):
                return a
        else:
            if self.prover.le(b, a):
                return b
            if self.prover.le(a, b):
                return a
        # incomparable: a constant bound beats a symbolic one, else the refinement ``a`` wins
        return b if b.is_const and not a.is_const else a

    def _interval(self, e: ir.Expr, sc: _Scope) -> Interval:
        if isinstance(e, ir.Const) and e.dtype == ir.INT:
            return Interval(Affine(int(e.value)), Affine(int(e.value)))
        if isinstance(e, ir.Var):
            return sc.vars.get(e.name, (None, UNKNOWN))[1]
        if isinstance(e, ir.Load):
            b = self.buffers.get(e.buffer)
            if b is not None and b.value_range is not None:
                return Interval(affine(b.value_range[0], self.sizes), affine(b.value_range[1], self.sizes))
            return UNKNOWN
        if isinstance(e, ir.Cast):
            return self.interval(e.a, sc) if e.dtype == ir.INT else UNKNOWN
        if isinstance(e, ir.Select):
            a = self.interval(e.a, self.refine(sc, e.cond, True))
            b = self.interval(e.b, self.refine(sc, e.cond, False))
            lo = a.lo if self.prover.le(a.lo, b.lo) else (b.lo if self.prover.le(b.lo, a.lo) else None)
            hi = b.hi if self.prover.le(a.hi, b.hi) else (a.hi if self.prover.le(b.hi, a.hi) else None)
            return Interval(lo, hi)
        if not isinstance(e, ir.BinOp):
            return UNKNOWN
        a, b = self.interval(e.a, sc), self.interval(e.b, sc)
        add = lambda x, y: None if x is None or y is None else x + y  # noqa: E731
        if e.op == "+":
            return Interval(add(a.lo, b.lo), add(a.hi, b.hi))
        if e.op == "-":
            neg = lambda x: None if x is None else x.scale(-1)  # noqa: E731
            return Interval(add(a.lo, neg(b.hi)), add(a.hi, neg(b.lo)))
        if e.op == "*":
            for x, y in ((a, b), (b, a)):
                if x.lo is not None and x.lo == x.hi and x.lo.is_const:
                    c = x.lo.const
                    lo, hi = (y.lo, y.hi) if c >= 0 else (y.hi, y.lo)
                    return Interval(None if lo is None else lo.scale(c), None if hi is None else hi.scale(c))
            if self.prover.le(Affine(0), a.lo) and self.prover.le(Affine(0), b.lo):
                return Interval(Affine(0), None)
            return UNKNOWN
        if e.op in ("//", "%"):
            c = b.lo.const if b.lo is not None and b.lo == b.hi and b.lo.is_const else None
            nonneg = self.prover.le(Affine(0), a.lo)
            if c is None or c <= 0 or not nonneg:
                return UNKNOWN
            if e.op == "%":
                hi = Affine(c - 1)
                if a.hi is not None and a.hi.is_const and a.hi.const < c:
                    hi = a.hi
                return Interval(Affine(0), hi)
            lo = Affine(a.lo.const // c) if a.lo.is_const else Affine(0)
            hi = None
            if a.hi is not None:
                if a.hi.is_const:
                    hi = Affine(a.hi.const // c)
                elif all(v % c == 0 for _, v in a.hi.terms):  # (c*X + k) // c <= X + k // c
                    hi = Affine.of(a.hi.const // c, {k: v // c for k, v in a.hi.terms})
                else:  # x <= S gives x // c <= S // c (floor is monotone)
                    hi = next((Affine.of(0, {floor_symbol(size, c): 1}) for size in self.floors.get(c, ())
                               if self.prover.le(a.hi, Affine.of(0, {size: 1}))), None)
            return Interval(lo, hi)
        if e.op == "min":
            lo = a.lo if self.prover.le(a.lo, b.lo) else (b.lo if self.prover.le(b.lo, a.lo) else None)
            hi = self._tighter(a.hi, b.hi, lower=False)
            return Interval(lo, hi)
        if e.op == "max":
            hi = b.hi if self.prover.le(a.hi, b.hi) else (a.hi if self.prover.le(b.hi, a.hi) else None)
            lo = self._tighter(a.lo, b.lo, lower=True)
            return Interval(lo, hi)
        return UNKNOWN

    def loop_interval(self, start: ir.Expr, stop: ir.Expr, sc: _Scope) -> Interval:
        hi = self.interval(stop, sc).hi
        return Interval(self.interval(start, sc).lo, None if hi is None else hi.shift(-1))

    def refine(self, sc: _Scope, cond: ir.Expr, truth: bool) -> _Scope:
        """The scope of the branch where ``cond`` is ``truth``."""
        facts = dict(sc.facts)
        self._learn(cond, truth, sc, facts)
        return _Scope(sc.vars, facts, sc.locals, sc.loops, sc.in_if)

    def _learn(self, cond: ir.Expr, truth: bool, sc: _Scope, facts: dict) -> None:
        if isinstance(cond, ir.Not):
            self._learn(cond.a, not truth, sc, facts)
            return
        if isinstance(cond, ir.BinOp) and cond.op in ("and", "or"):
            if (cond.op == "and") == truth:  # both sides hold (and-true / or-false)
                self._learn(cond.a, truth, sc, facts)
                self._learn(cond.b, truth, sc, facts)
            return
        if not isinstance(cond, ir.Cmp):
            return
        op = cond.op
        if not truth:
            op = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}[op]
        a, b = cond.a, cond.b
        ia, ib = self.interval(a, sc), self.interval(b, sc)

        def put(x: ir.Expr, lo: Affine | None, hi: Affine | None) -> None:
            if isinstance(x, ir.Const):
                return
            old = facts.get(x, self.interval(x, sc))
            facts[x] = Interval(self._tighter(lo, old.lo, True), self._tighter(hi, old.hi, False))

        sh = lambda v, c: None if v is None else v.shift(c)  # noqa: E731
        if op == "<":
            put(a, None, sh(ib.hi, -1))
            put(b, sh(ia.lo, 1), None)
        elif op == "<=":
            put(a, None, ib.hi)
            put(b, ia.lo, None)
        elif op == ">":
            put(a, sh(ib.lo, 1), None)
            put(b, None, sh(ia.hi, -1))
        elif op == ">=":
            put(a, ib.lo, None)
            put(b, None, ia.hi)
        elif op == "==":
            put(a, ib.lo, ib.hi)
            put(b, ia.lo, ia.hi)

    def bind(self, sc: _Scope, name: str, dtype: str, iv: Interval) -> _Scope:
        if name in sc.vars or name in self.buffers or name in sc.locals:
            self.err(f"name {name!r} is bound twice (names must not be shadowed)")
        vars_ = dict(sc.vars)
        vars_[name] = (dtype, iv)
        return _Scope(vars_, sc.facts, sc.locals, sc.loops, sc.in_if)

    # ------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt, sc: _Scope) -> None:
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.stmt(x, sc)
        elif isinstance(s, ir.For):
            self.expr(s.start, sc)
            self.expr(s.stop, sc)
            for x in (s.start, s.stop):
                if self.dtype(x, sc) != ir.INT:
                    self.err(f"loop {s.var}: bound {x} is not int32")
            if self.caps is not None and s.kind.startswith("gpu") and not self.caps.has_grid:
                self.err(f"loop {s.var} is bound to {s.kind} but the target has no grid")
            inner = self.bind(sc, s.var, ir.INT, self.loop_interval(s.start, s.stop, sc))
            inner = _Scope(inner.vars, inner.facts, inner.locals, sc.loops + (s.kind,), sc.in_if)
            self.stmt(s.body, inner)
        elif isinstance(s, ir.Store):
            for i in s.index:
                self.expr(i, sc)
            self.expr(s.value, sc)
            b = self.buffers.get(s.buffer)
            if b is not None and b.read_only:
                self.err(f"store to read-only buffer {s.buffer!r} (role {b.role})")
            self.access(s.buffer, s.index, sc, "store")
            target = sc.locals[s.buffer].dtype if s.buffer in sc.locals else (b.dtype if b else None)
            vt = self.dtype(s.value, sc)
            if target is not None and vt != target:
                self.err(f"store of {vt} into {target} buffer {s.buffer!r}; insert a Cast")
        elif isinstance(s, ir.Let):
            self.expr(s.value, sc)
            inner = self.bind(sc, s.var, self.dtype(s.value, sc), self.interval(s.value, sc))
            self.stmt(s.body, inner)
        elif isinstance(s, ir.Alloc):
            if s.name in sc.locals or s.name in self.buffers or s.name in sc.vars:
                self.err(f"alloc {s.name!r} shadows another name")
            if s.scope == "shared" and self.caps is not None:
                nbytes = _itemsize(s.dtype)
                for d in s.shape:
                    nbytes *= d
                if nbytes > self.caps.shared_memory_bytes:
                    self.err(f"shared alloc {s.name} needs {nbytes} bytes, target has {self.caps.shared_memory_bytes}")
            if s.scope == "shared" and any(k == "gpu_thread" for k in sc.loops):
                self.err(f"shared alloc {s.name} inside a gpu_thread loop (it is per group)")
            locals_ = dict(sc.locals)
            locals_[s.name] = s
            self.stmt(s.body, _Scope(sc.vars, sc.facts, locals_, sc.loops, sc.in_if))
        elif isinstance(s, ir.If):
            self.cond(s.cond, sc)
            t = self.refine(sc, s.cond, True)
            self.stmt(s.then, _Scope(t.vars, t.facts, t.locals, t.loops, True))
            if s.orelse is not None:
                f = self.refine(sc, s.cond, False)
                self.stmt(s.orelse, _Scope(f.vars, f.facts, f.locals, f.loops, True))
        elif isinstance(s, ir.Prefetch):
            for i in s.index:
                self.expr(i, sc)
            self.access(s.buffer, s.index, sc, "prefetch")
            if s.index:  # the last of the `count` elements is in bounds too
                last = s.index[:-1] + (ir.BinOp("+", s.index[-1], ir.Const(s.count - 1)),)
                self.access(s.buffer, last, sc, "prefetch")
        elif isinstance(s, ir.Barrier):
            if s.scope == "grid":
                if any(k != "serial" for k in sc.loops) or sc.in_if:
                    self.err("grid barrier inside a non-serial loop or a branch: not every thread reaches it")
                if self.caps is not None and self.caps.has_grid and not self.caps.grid_barrier:
                    self.err("grid barrier but the target has no grid-wide barrier; use one kernel per level")
            else:
                if any(k in ("gpu_thread", "parallel", "vectorized") for k in sc.loops):
                    self.err("group barrier inside a per-thread loop: not every thread of the group reaches it")
                if self.caps is not None and self.caps.has_grid and not self.caps.group_barrier:
                    self.err("group barrier but the target has none")
        else:
            self.err(f"not a statement: {s!r}")

    # ------------------------------------------------------------ program
    def kernel(self, k: ir.Kernel, args: tuple[Interval, ...] | None) -> None:
        self.where = f"kernel {k.name}"
        vars_ = dict(self.base_vars)
        for i, p in enumerate(k.params):
            if p in vars_ or p in self.buffers:
                self.err(f"parameter {p!r} shadows a size or buffer")
            vars_[p] = (ir.INT, args[i] if args is not None else UNKNOWN)
        self.stmt(k.body, _Scope(vars_, {}, {}, (), False))
        self.lanes(k.body, 0, False)

    def lanes(self, n: ir.Node, group: int, in_lane_reduce: bool) -> None:
        """Cross-lane structure: a ``Reduce`` with ``lanes > 1`` sits in the body of the innermost
        ``gpu_thread`` loop of the same ``lanes`` (``group``; 0 outside any), not inside another
        cross-lane reduction, and the target has warp shuffles that wide. No GPU loop nests
        inside a lane-group loop (its lanes must run the body together)."""
        if isinstance(n, ir.For):
            if n.lanes > 1:
                self.lane_width(n.lanes, f"loop {n.var}")
            if group > 1 and n.kind in ("gpu_thread", "gpu_group"):
                self.err(f"{n.kind} loop {n.var} inside a lane-group loop: the lanes of a group must run its body together")
            for x in (n.start, n.stop):
                self.lanes(x, group, in_lane_reduce)
            self.lanes(n.body, n.lanes if n.kind == "gpu_thread" else group, in_lane_reduce)
            return
        if isinstance(n, ir.Reduce) and n.lanes > 1:
            self.lane_width(n.lanes, f"reduce over {n.var}")
            if group != n.lanes:
                where = f"the innermost gpu_thread loop has lanes={group}" if group else "it is in no gpu_thread loop"
                self.err(f"reduce over {n.var} over {n.lanes} lanes must be inside a gpu_thread loop with "
                         f"lanes={n.lanes} ({where})")
            if in_lane_reduce:
                self.err(f"reduce over {n.var} over {n.lanes} lanes is nested in another cross-lane reduction")
            for x in (n.start, n.stop):
                self.lanes(x, group, in_lane_reduce)
            self.lanes(n.body, group, True)
            return
        for c in ir.children(n):
            self.lanes(c, group, in_lane_reduce)

    def lane_width(self, lanes: int, what: str) -> None:
        if self.caps is None:
            return
        if self.caps.warp_size <= 0:
            self.err(f"{what} runs over {lanes} lanes but the target has no warp shuffles (warp_size 0); "
                     "schedule reduce_lanes=1")
        elif lanes > self.caps.warp_size:
            self.err(f"{what} runs over {lanes} lanes, more than the target's warp size {self.caps.warp_size}")

    def host_expr(self, e: ir.Expr, sc: _Scope) -> None:
        if any(isinstance(n, (ir.Load, ir.Reduce)) for n in ir.walk(e)):
            self.err(f"host expression {e} reads a buffer; the host only knows sizes and host loop variables")
        self.expr(e, sc)

    def host(self, steps: tuple[ir.Node, ...], vars_: dict, launched: set[str]) -> None:
        for st in steps:
            sc = _Scope(vars_, {}, {}, (), False)
            self.where = "host"
            if isinstance(st, ir.Launch):
                if st.kernel not in {k.name for k in self.p.kernels}:
                    self.err(f"launch of unknown kernel {st.kernel!r}")
                    continue
                k = self.p.kernel(st.kernel)
                if len(st.args) != len(k.params):
                    self.err(f"launch of {k.name} with {len(st.args)} args for params {k.params}")
                    continue
                for a in st.args:
                    self.host_expr(a, sc)
                self.kernel(k, tuple(self.interval(a, sc) for a in st.args))
                launched.add(k.name)
            elif isinstance(st, ir.HostFor):
                self.host_expr(st.start, sc)
                self.host_expr(st.stop, sc)
                inner = self.bind(sc, st.var, ir.INT, self.loop_interval(st.start, st.stop, sc))
                self.host(st.body, inner.vars, launched)
            else:
                self.err(f"unknown host step {st!r}")


def _node_blocked_index(b: ir.Buffer, index: tuple[ir.Expr, ...]) -> tuple[ir.Expr, ...] | None:
    """``(n, *k)`` for an access ``(n // w, *k, n % w)`` of a buffer laid out in node blocks of
    ``w`` (``cortex.core.lowering.state_layout``), else None. Such an access is proved against
    the logical shape ``[N, *shape]``: the padding rows of the last block are never data."""
    if b.layout[0] != "node_blocked" or len(index) < 2:
        return None
    w = ir.Const(b.layout[1])
    first, last = index[0], index[-1]
    if (isinstance(first, ir.BinOp) and first.op == "//" and first.b == w
            and isinstance(last, ir.BinOp) and last.op == "%" and last.b == w and last.a == first.a):
        return (first.a,) + tuple(index[1:-1])
    return None


def _itemsize(dtype: str) -> int:
    return {"int32": 4, "bool": 1, "float32": 4, "float64": 8}[dtype]


def check(program: ir.Program, caps: Capabilities | None = None) -> list[str]:
    """Every problem found in ``program`` (empty when it verifies)."""
    c = _Checker(program, caps)
    c.declarations()
    launched: set[str] = set()
    c.host(program.host, dict(c.base_vars), launched)
    for k in program.kernels:
        if k.name not in launched:
            c.kernel(k, None)
    return c.problems


def verify(program: ir.Program, caps: Capabilities | None = None) -> ir.Program:
    """Return ``program`` unchanged if it verifies, else raise :class:`VerificationError`.

    With ``caps``, also check what the target supports (grid, barriers, fp64, shared bytes,
    buffer storage formats)."""
    problems = check(program, caps)
    if problems:
        raise VerificationError(program.name, problems)
    return program
