"""The LoopProgram IR: loops, indirect loads and stores over flat buffers (the paper's ILIR).

Pipeline position: recursion lowering turns a RecursiveGraph into a :class:`Program`; the
schedule (``cortex.core.lowering.transforms``) rewrites it into another :class:`Program`; the
verifier (``loopir.verify``) checks it; the C-family renderer (``render.c_family``) and the NumPy
interpreter (``interpret``) consume it. Nothing here knows about models or targets.

Shape of a program
------------------
* **Sizes** (:class:`Size`): named int symbols bound at run time from the ``LinearizedBatch``
  (``N`` nodes, ``E`` child edges, ``B`` batch, ``L`` levels, ``NL`` leaves). Static model sizes
  (hidden 256 …) are plain constants in the program.
* **Buffers** (:class:`Buffer`): global arrays whose shapes are expressions over sizes. Index
  buffers carry value-range facts from the linearizer's contract (``child_ids`` in [0, N-1],
  ``child_table`` in [-1, N-1], …); the verifier uses them to prove indirect accesses in bounds.
* **Kernels** (:class:`Kernel`): one statement tree each, with int parameters (e.g. the level).
* **Host steps** (:class:`Launch`, :class:`HostFor`): what the host does — one launch of a
  persistent kernel containing the level loop, or a host loop launching one kernel per level.

Statements: :class:`For` (``kind`` says how it runs: serial, parallel CPU threads, vectorized,
unrolled, GPU groups, GPU threads — GPU kinds are grid/block-stride loops, so any launch size
is correct; ``annotations`` are renderer hints such as "cold"), :class:`Store`, :class:`Let`,
:class:`Alloc` (private/shared arrays), :class:`If`, :class:`Barrier`, :class:`Prefetch` (a
cache hint, no effect on values), :class:`Seq`. Expressions: :class:`Const`, :class:`Var`,
:class:`Load` (indirect when an index is itself a load), :class:`BinOp`, :class:`Cmp`,
:class:`Not`, :class:`Select`, :class:`Cast`, :class:`Call` (math intrinsics) and
:class:`Reduce` (sum / max / mean over a possibly variable-length range: dot products and
child reductions stay explicit for the renderer and the interpreter).

Conventions: every node is a frozen dataclass (immutable, hashable, structural equality);
names are never shadowed (the verifier enforces it, so substitution is simple); integer ``//``
and ``%`` are only used on non-negative operands (C and NumPy then agree); float constants
carry their dtype explicitly. ``print(program)`` gives readable pseudo-code.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable, Iterator, Union

from cortex.core.errors import CortexError

INT = "int32"
BOOL = "bool"
FLOAT_DTYPES = ("float32", "float64")
DTYPES = (INT, BOOL) + FLOAT_DTYPES
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "gpu_group", "gpu_thread")
#: Hints a schedule puts on a loop (semantics unchanged): "cold" = rarely run (a jammed level's
#: fallback), keep its code small rather than fast (for the renderer); "nodes" = its iterations
#: are independent nodes (or child edges) of the recursion, each writing its own rows, like a
#: level's node loop (for the node-loop transforms: ``lowering.level_interchange.is_node_loop``);
#: "dynamic" = where a team of threads splits this loop (the llvm target: an outermost
#: ``parallel`` loop), the threads claim its iterations at run time instead of one fixed chunk
#: each: every thread first claims its own chunk's iterations, a unit of about
#: 1 / ``CLAIMS_PER_THREAD`` of the chunk at a time, then the units left in the other threads'
#: chunks (the ``level_split`` schedule knob).
LOOP_ANNOTATIONS = ("cold", "nodes", "dynamic")
#: Units a thread's own chunk of a "dynamic" loop is claimed in (see ``LOOP_ANNOTATIONS``).
CLAIMS_PER_THREAD = 4
#: Launch settings a schedule records on a program for the runtime (``Program.launch``):
#: "threads" (CPU worker threads of a call), "single_group_nodes" (inputs of at most this many
#: nodes run as one work-group launch where the backend derives that form), "kernel_form",
#: "tree_groups" (work-groups that form may run at once, each over its own trees),
#: "level_groups" (work-groups that form's levels are shared between, claiming units).
LAUNCH_KEYS = ("threads", "single_group_nodes", "kernel_form", "tree_groups", "bf16_dot", "level_groups")
SCOPES = ("global", "shared", "private")  # "shared" is OpenCL's __local, CUDA's __shared__
ROLES = ("input", "param", "index", "output", "temp")  # input/param/index are read-only
READ_ONLY_ROLES = ("input", "param", "index")
BIN_OPS = ("+", "-", "*", "/", "//", "%", "min", "max", "and", "or")
CMP_OPS = ("<", "<=", ">", ">=", "==", "!=")
INTRINSICS = {"exp": 1, "log": 1, "tanh": 1, "sigmoid": 1, "sqrt": 1, "abs": 1, "fma": 3}
REDUCE_OPS = ("sum", "max", "mean")
BARRIER_SCOPES = ("group", "grid")
#: How a read-only float32 buffer may be held in memory other than as its dtype (``Buffer.storage``):
#: "bfloat16" = the upper 16 bits of each float32 (``cortex.core.loopir.storage``); a load widens
#: it to float32, so expressions never see the storage type. "bfloat16_pairs" = the same values
#: with the last two dimensions ``[K, W]`` (an even ``K``) held pair-interleaved as
#: ``[K / 2, W, 2]``: one 32-bit word holds the elements ``[k, j]`` and ``[k + 1, j]``.
STORAGE_FORMATS = ("bfloat16", "bfloat16_pairs")


def _is_pow2(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1 and n & (n - 1) == 0


class LoopIRError(CortexError, ValueError):
    """A LoopProgram is malformed (bad node fields, unknown names, failed verification)."""


class Node:
    """Base of every IR node (expressions, statements, declarations)."""

    def __str__(self) -> str:
        from cortex.core.loopir.printer import format_node

        return format_node(self)


# --------------------------------------------------------------------------- expressions


class Expr(Node):
    """An expression. Python operators build int arithmetic (ints are wrapped as int32)."""

    def __add__(self, o: ExprLike) -> Expr:
        return BinOp("+", self, as_expr(o))

    def __radd__(self, o: ExprLike) -> Expr:
        return BinOp("+", as_expr(o), self)

    def __sub__(self, o: ExprLike) -> Expr:
        return BinOp("-", self, as_expr(o))

    def __rsub__(self, o: ExprLike) -> Expr:
        return BinOp("-", as_expr(o), self)

    def __mul__(self, o: ExprLike) -> Expr:
        return BinOp("*", self, as_expr(o))

    def __rmul__(self, o: ExprLike) -> Expr:
        return BinOp("*", as_expr(o), self)

    def __truediv__(self, o: ExprLike) -> Expr:
        return BinOp("/", self, as_expr(o))

    def __floordiv__(self, o: ExprLike) -> Expr:
        return BinOp("//", self, as_expr(o))

    def __mod__(self, o: ExprLike) -> Expr:
        return BinOp("%", self, as_expr(o))

    def __lt__(self, o: ExprLike) -> Expr:
        return Cmp("<", self, as_expr(o))

    def __le__(self, o: ExprLike) -> Expr:
        return Cmp("<=", self, as_expr(o))

    def __gt__(self, o: ExprLike) -> Expr:
        return Cmp(">", self, as_expr(o))

    def __ge__(self, o: ExprLike) -> Expr:
        return Cmp(">=", self, as_expr(o))


ExprLike = Union[Expr, int]


def as_expr(x: ExprLike) -> Expr:
    """Wrap a Python int (or bool) as a constant; floats need an explicit ``Const(v, dtype)``."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Const(x, BOOL)
    if isinstance(x, int):
        return Const(x, INT)
    raise TypeError(
        f"cannot use {x!r} ({type(x).__name__}) as a LoopProgram expression; "
        "write Const(value, 'float32'/'float64') for float constants"
    )


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise LoopIRError(msg)


@dataclass(frozen=True)
class Const(Expr):
    value: int | float | bool
    dtype: str = INT

    def __post_init__(self) -> None:
        _check(self.dtype in DTYPES, f"Const dtype {self.dtype!r} not in {DTYPES}")


@dataclass(frozen=True)
class Var(Expr):
    """A size symbol, kernel parameter, loop variable, reduce variable or let-bound name."""

    name: str
    dtype: str = INT

    def __post_init__(self) -> None:
        _check(self.name.isidentifier(), f"variable name {self.name!r} is not an identifier")
        _check(self.dtype in DTYPES, f"Var dtype {self.dtype!r} not in {DTYPES}")


@dataclass(frozen=True)
class Load(Expr):
    """``buffer[index...]``; ``buffer`` names a global buffer or an :class:`Alloc`."""

    buffer: str
    index: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", tuple(as_expr(i) for i in self.index))


@dataclass(frozen=True)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        _check(self.op in BIN_OPS, f"BinOp op {self.op!r} not in {BIN_OPS}")


@dataclass(frozen=True)
class Cmp(Expr):
    op: str
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        _check(self.op in CMP_OPS, f"Cmp op {self.op!r} not in {CMP_OPS}")


@dataclass(frozen=True)
class Not(Expr):
    a: Expr


@dataclass(frozen=True)
class Select(Expr):
    """``cond ? a : b``; only the chosen branch is evaluated (guards indirect loads)."""

    cond: Expr
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Cast(Expr):
    dtype: str
    a: Expr

    def __post_init__(self) -> None:
        _check(self.dtype in DTYPES, f"Cast dtype {self.dtype!r} not in {DTYPES}")


@dataclass(frozen=True)
class Call(Expr):
    """A math intrinsic: exp, log, tanh, sigmoid, sqrt, abs, fma(a, b, c) = a*b + c."""

    fn: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        _check(self.fn in INTRINSICS, f"unknown intrinsic {self.fn!r}; known: {sorted(INTRINSICS)}")
        _check(
            len(self.args) == INTRINSICS[self.fn],
            f"{self.fn} takes {INTRINSICS[self.fn]} arguments, got {len(self.args)}",
        )


@dataclass(frozen=True)
class Reduce(Expr):
    """``op over var in [start, stop) of body``. Empty range: sum/mean 0, max -inf.

    ``lanes > 1`` (a power of two) makes it a *cross-lane* reduction: the ``lanes`` threads of
    the lane group running the enclosing ``gpu_thread`` loop (``For.lanes``, the same width)
    split the range (lane ``i`` takes ``start + i``, ``start + i + lanes``, ...), then combine
    their partial results with a butterfly of warp shuffles, so every lane holds the result.
    Its value is exactly the plain reduction's (the interpreter ignores ``lanes``); only the
    association order of the additions differs, as with any reordering of a float sum."""

    op: str
    var: str
    start: Expr
    stop: Expr
    body: Expr
    lanes: int = 1

    def __post_init__(self) -> None:
        _check(self.op in REDUCE_OPS, f"Reduce op {self.op!r} not in {REDUCE_OPS}")
        _check(self.var.isidentifier(), f"reduce variable {self.var!r} is not an identifier")
        _check(_is_pow2(self.lanes), f"Reduce lanes must be a power of two >= 1, got {self.lanes!r}")
        object.__setattr__(self, "start", as_expr(self.start))
        object.__setattr__(self, "stop", as_expr(self.stop))


def fconst(value: float, dtype: str) -> Const:
    """A float constant of the program's float type."""
    _check(dtype in FLOAT_DTYPES, f"fconst dtype must be float32/float64, got {dtype!r}")
    return Const(float(value), dtype)


def call(fn: str, *args: Expr) -> Call:
    return Call(fn, tuple(args))


def minimum(a: ExprLike, b: ExprLike) -> BinOp:
    return BinOp("min", as_expr(a), as_expr(b))


def maximum(a: ExprLike, b: ExprLike) -> BinOp:
    return BinOp("max", as_expr(a), as_expr(b))


def eq(a: ExprLike, b: ExprLike) -> Cmp:
    return Cmp("==", as_expr(a), as_expr(b))


def ne(a: ExprLike, b: ExprLike) -> Cmp:
    return Cmp("!=", as_expr(a), as_expr(b))


def land(a: Expr, b: Expr) -> BinOp:
    return BinOp("and", a, b)


# --------------------------------------------------------------------------- statements


class Stmt(Node):
    """A statement."""


@dataclass(frozen=True)
class For(Stmt):
    """``for var in [start, stop)``; ``kind`` in LOOP_KINDS says how the loop executes.

    parallel / vectorized / gpu_group / gpu_thread loops promise no loop-carried dependence
    (the lowering guarantees it); serial and unrolled loops may carry dependences.

    ``lanes > 1`` (a power of two, ``gpu_thread`` loops only): each iteration runs on a *lane
    group* of ``lanes`` consecutive threads of the group instead of one thread; all lanes of a
    group execute the body alike (same values, same stores) except that the cross-lane
    ``Reduce`` nodes of the same width inside it split their ranges over the lanes.

    ``annotations`` (from ``LOOP_ANNOTATIONS``) are hints that change nothing the loop
    computes: ``"cold"`` marks a loop that rarely runs, whose code should be small; ``"nodes"``
    a loop over independent nodes (or child edges) that is not a level's own node loop.
    """

    var: str
    start: Expr
    stop: Expr
    body: Stmt
    kind: str = "serial"
    lanes: int = 1
    annotations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check(self.var.isidentifier(), f"loop variable {self.var!r} is not an identifier")
        _check(self.kind in LOOP_KINDS, f"loop kind {self.kind!r} not in {LOOP_KINDS}")
        _check(_is_pow2(self.lanes), f"loop lanes must be a power of two >= 1, got {self.lanes!r}")
        _check(self.lanes == 1 or self.kind == "gpu_thread",
               f"loop {self.var}: lanes={self.lanes} needs kind gpu_thread, got {self.kind!r}")
        object.__setattr__(self, "annotations", tuple(self.annotations))
        bad = [a for a in self.annotations if a not in LOOP_ANNOTATIONS]
        _check(not bad, f"loop {self.var}: unknown annotations {bad}; known: {LOOP_ANNOTATIONS}")
        object.__setattr__(self, "start", as_expr(self.start))
        object.__setattr__(self, "stop", as_expr(self.stop))


@dataclass(frozen=True)
class Store(Stmt):
    buffer: str
    index: tuple[Expr, ...]
    value: Expr

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", tuple(as_expr(i) for i in self.index))


@dataclass(frozen=True)
class Let(Stmt):
    """Bind ``var`` (its dtype is the value's) to ``value`` inside ``body``."""

    var: str
    value: Expr
    body: Stmt

    def __post_init__(self) -> None:
        _check(self.var.isidentifier(), f"let variable {self.var!r} is not an identifier")
        object.__setattr__(self, "value", as_expr(self.value))

    def __repr__(self) -> str:
        # the dataclass's text, built without recursing down a chain of lets (see __reduce__)
        parts: list[str] = []
        node: Stmt = self
        while isinstance(node, Let):
            parts.append(f"Let(var={node.var!r}, value={node.value!r}, body=")
            node = node.body
        return "".join(parts) + repr(node) + ")" * len(parts)

    def __reduce__(self) -> tuple:
        # A chain of lets (a jammed body holds hundreds) pickles flat: nested, it would exceed
        # the interpreter's recursion limit (saved executables and the disk cache pickle programs).
        pairs: list[tuple[str, Expr]] = []
        node: Stmt = self
        while isinstance(node, Let):
            pairs.append((node.var, node.value))
            node = node.body
        return _let_chain, (tuple(pairs), node)


def _let_chain(pairs: tuple[tuple[str, Expr], ...], body: Stmt) -> Stmt:
    """The lets ``pairs`` (outermost first) around ``body``: how a pickled :class:`Let` chain is rebuilt."""
    for var, value in reversed(pairs):
        body = Let(var, value, body)
    return body


@dataclass(frozen=True)
class Alloc(Stmt):
    """A private (per thread / per lane) or shared (per group) array live inside ``body``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    scope: str
    body: Stmt

    def __post_init__(self) -> None:
        _check(self.name.isidentifier(), f"alloc name {self.name!r} is not an identifier")
        _check(self.dtype in DTYPES, f"Alloc dtype {self.dtype!r} not in {DTYPES}")
        _check(self.scope in ("shared", "private"), f"Alloc scope must be shared/private, got {self.scope!r}")
        _check(
            all(isinstance(d, int) and d > 0 for d in self.shape) and len(self.shape) > 0,
            f"Alloc {self.name}: shape must be positive constant ints, got {self.shape}",
        )


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True)
class Barrier(Stmt):
    """Wait for every thread of the group (``group``) or of the whole grid (``grid``)."""

    scope: str = "group"

    def __post_init__(self) -> None:
        _check(self.scope in BARRIER_SCOPES, f"Barrier scope {self.scope!r} not in {BARRIER_SCOPES}")


@dataclass(frozen=True)
class Prefetch(Stmt):
    """A cache hint: the ``count`` elements from ``buffer[index...]`` on (contiguous along the
    last axis) will be read soon. Computes nothing; a renderer may emit cache prefetches or
    nothing, the interpreter skips it. The verifier checks the range lies inside the buffer."""

    buffer: str
    index: tuple[Expr, ...]
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", tuple(as_expr(i) for i in self.index))
        _check(isinstance(self.count, int) and self.count >= 1, f"prefetch count must be >= 1, got {self.count!r}")


@dataclass(frozen=True)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "stmts", tuple(self.stmts))


def seq(*stmts: Stmt) -> Stmt:
    """A Seq, flattening nested Seqs; one statement is returned as is."""
    out: list[Stmt] = []
    for s in stmts:
        out.extend(s.stmts if isinstance(s, Seq) else (s,))
    return out[0] if len(out) == 1 else Seq(tuple(out))


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Size(Node):
    """A run-time int symbol, ``lo <= value`` and (when given) ``value <= hi``."""

    name: str
    lo: int = 0
    hi: Expr | None = None

    def __post_init__(self) -> None:
        _check(self.name.isidentifier(), f"size name {self.name!r} is not an identifier")


@dataclass(frozen=True)
class Buffer(Node):
    """A global array. ``value_range`` (inclusive, over sizes) is a fact about an index buffer's
    contents, guaranteed by whoever fills it (the linearizer). ``layout`` records a physical
    layout change made by the schedule: ``("row_major",)``, ``("transposed",)`` or
    ``("packed", w)``; ``logical_shape`` is then the shape the model sees. ``storage``: ""
    (elements stored as ``dtype``) or a format of ``STORAGE_FORMATS`` for a float32 ``param``
    buffer (the ``weights`` compile option): loads widen it to ``dtype``."""

    name: str
    dtype: str
    shape: tuple[Expr, ...]
    role: str = "temp"
    value_range: tuple[Expr, Expr] | None = None
    monotone: bool = False
    layout: tuple = ("row_major",)
    logical_shape: tuple[Expr, ...] | None = None
    storage: str = ""

    def __post_init__(self) -> None:
        _check(self.name.isidentifier(), f"buffer name {self.name!r} is not an identifier")
        _check(self.dtype in DTYPES, f"buffer {self.name}: dtype {self.dtype!r} not in {DTYPES}")
        _check(self.role in ROLES, f"buffer {self.name}: role {self.role!r} not in {ROLES}")
        _check(not self.storage or (self.storage in STORAGE_FORMATS and self.dtype == "float32"
                                    and self.role == "param"),
               f"buffer {self.name}: storage {self.storage!r} needs a float32 param buffer and one "
               f"of {STORAGE_FORMATS}")
        object.__setattr__(self, "shape", tuple(as_expr(d) for d in self.shape))
        if self.storage == "bfloat16_pairs":
            pairs = len(self.shape) >= 2 and const_int(self.shape[-2])
            _check(bool(pairs) and pairs % 2 == 0, f"buffer {self.name}: bfloat16_pairs storage "
                   f"needs two or more dimensions, the second last a constant even size")
        if self.value_range is not None:
            object.__setattr__(self, "value_range", tuple(as_expr(v) for v in self.value_range))
        if self.logical_shape is not None:
            object.__setattr__(self, "logical_shape", tuple(as_expr(d) for d in self.logical_shape))

    @property
    def read_only(self) -> bool:
        return self.role in READ_ONLY_ROLES

    @property
    def stored(self) -> str:
        """The element type in memory: ``storage`` when set, else ``dtype``."""
        return self.storage or self.dtype


@dataclass(frozen=True)
class Kernel(Node):
    """A device function. ``params`` are int32 scalars bound by each :class:`Launch`."""

    name: str
    params: tuple[str, ...]
    body: Stmt
    threads_per_group: int = 1

    def __post_init__(self) -> None:
        _check(self.name.isidentifier(), f"kernel name {self.name!r} is not an identifier")
        object.__setattr__(self, "params", tuple(self.params))


@dataclass(frozen=True)
class Launch(Node):
    kernel: str
    args: tuple[Expr, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(as_expr(a) for a in self.args))


@dataclass(frozen=True)
class HostFor(Node):
    """A host-side serial loop (e.g. over levels, one launch per level)."""

    var: str
    start: Expr
    stop: Expr
    body: tuple[Node, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", as_expr(self.start))
        object.__setattr__(self, "stop", as_expr(self.stop))
        object.__setattr__(self, "body", tuple(self.body))


HostStep = Union[Launch, HostFor]


@dataclass(frozen=True)
class Program(Node):
    """``launch``: ``(key, value)`` launch settings the schedule chose for the runtime (keys from
    ``LAUNCH_KEYS``; the thread count of a CPU call, the input size up to which a backend runs
    its single-work-group form); read with :meth:`launch_setting`."""

    name: str
    sizes: tuple[Size, ...]
    buffers: tuple[Buffer, ...]
    kernels: tuple[Kernel, ...]
    host: tuple[HostStep, ...]
    launch: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        for f in ("sizes", "buffers", "kernels", "host", "launch"):
            object.__setattr__(self, f, tuple(getattr(self, f)))
        bad = [k for k, _ in self.launch if k not in LAUNCH_KEYS]
        _check(not bad, f"program {self.name}: unknown launch settings {bad}; known: {LAUNCH_KEYS}")
        names = [s.name for s in self.sizes] + [b.name for b in self.buffers]
        dup = {n for n in names if names.count(n) > 1}
        _check(not dup, f"program {self.name}: duplicate size/buffer names {sorted(dup)}")
        knames = [k.name for k in self.kernels]
        _check(len(set(knames)) == len(knames), f"program {self.name}: duplicate kernel names")

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise LoopIRError(f"program {self.name} has no buffer {name!r}")

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise LoopIRError(f"program {self.name} has no kernel {name!r}")

    def launch_setting(self, key: str, default: object = None) -> object:
        """The value of launch setting ``key`` (see ``launch``), or ``default``."""
        return dict(self.launch).get(key, default)

    @property
    def size_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sizes)

    def float_dtypes(self) -> set[str]:
        """The float types any buffer, alloc, constant or cast of the program uses."""
        out = {b.dtype for b in self.buffers if b.dtype in FLOAT_DTYPES}
        for k in self.kernels:
            for n in walk(k.body):
                d = getattr(n, "dtype", None)
                if d in FLOAT_DTYPES:
                    out.add(d)
        return out


# --------------------------------------------------------------------------- traversal


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(node: Node) -> tuple[str, ...]:
    """The dataclass field names of ``node``'s type (cached: traversals ask per node, and
    ``dataclasses.fields`` rebuilds its tuple on every call)."""
    names = _FIELD_NAMES.get(type(node))
    if names is None:
        names = _FIELD_NAMES[type(node)] = tuple(f.name for f in fields(node))  # type: ignore[arg-type]
    return names


def children(node: Node) -> list[Node]:
    """The nodes directly below ``node``, in field order."""
    out: list[Node] = []
    for name in field_names(node):
        v = getattr(node, name)
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend(x for x in v if isinstance(x, Node))
    return out


def walk(node: Node) -> Iterator[Node]:
    """Every node below (and including) ``node``, pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        kids = children(n)
        kids.reverse()
        stack.extend(kids)


def _map_value(v, f):
    if isinstance(v, Node):
        return transform(v, f)
    if isinstance(v, tuple):
        items = tuple(_map_value(x, f) for x in v)
        return v if all(a is b for a, b in zip(items, v)) else items
    return v


def transform(node: Node, f: Callable[[Node], Node | None]) -> Node:
    """Rebuild ``node`` bottom-up; ``f`` returns a replacement for a node or None to keep it."""
    if isinstance(node, Let) and isinstance(node.body, Let):
        return _transform_lets(node, f)
    changes = {}
    for name in field_names(node):
        v = getattr(node, name)
        nv = _map_value(v, f)
        if nv is not v:
            changes[name] = nv
    if changes:
        node = replace(node, **changes)  # type: ignore[type-var]
    r = f(node)
    return node if r is None else r


def _transform_lets(node: Let, f: Callable[[Node], Node | None]) -> Node:
    """:func:`transform` of a chain of lets without a Python frame per let (a kernel body
    nests one let per value, and a node jam multiplies them): the values in order, then what
    the chain binds, then each let rebuilt from the innermost out -- the same calls of ``f`` in
    the same order as the recursion."""
    chain: list[Let] = []
    n: Node = node
    while isinstance(n, Let):
        chain.append(n)
        n = n.body
    values = [_map_value(let.value, f) for let in chain]
    body = _map_value(n, f)
    for let, value in zip(reversed(chain), reversed(values)):
        new = let if value is let.value and body is let.body else replace(let, value=value, body=body)
        r = f(new)
        body = new if r is None else r
    return body


def substitute(node: Node, mapping: dict[str, Expr]) -> Node:
    """Replace variables by expressions (names are never shadowed, so this is capture-free)."""

    def f(n: Node) -> Node | None:
        if isinstance(n, Var) and n.name in mapping:
            return mapping[n.name]
        return None

    return transform(node, f)


def rename_buffer(node: Node, old: str, new: str) -> Node:
    def f(n: Node) -> Node | None:
        if isinstance(n, (Load, Store)) and n.buffer == old:
            return replace(n, buffer=new)
        return None

    return transform(node, f)


def infer_dtype(e: Expr, buffer_dtypes: dict[str, str]) -> str:
    """The dtype of an expression, given the dtypes of the buffers/allocs it may load."""
    if isinstance(e, (Const, Var)):
        return e.dtype
    if isinstance(e, Load):
        if e.buffer not in buffer_dtypes:
            raise LoopIRError(f"load from unknown buffer {e.buffer!r}")
        return buffer_dtypes[e.buffer]
    if isinstance(e, (Cmp, Not)):
        return BOOL
    if isinstance(e, BinOp):
        return BOOL if e.op in ("and", "or") else infer_dtype(e.a, buffer_dtypes)
    if isinstance(e, Select):
        return infer_dtype(e.a, buffer_dtypes)
    if isinstance(e, Cast):
        return e.dtype
    if isinstance(e, Call):
        return infer_dtype(e.args[0], buffer_dtypes)
    if isinstance(e, Reduce):
        return infer_dtype(e.body, buffer_dtypes)
    raise LoopIRError(f"not an expression: {e!r}")


def const_int(e: Expr) -> int | None:
    """The value of a constant int expression built from Const and + - * //, else None."""
    if isinstance(e, Const) and e.dtype == INT:
        return int(e.value)
    if isinstance(e, BinOp) and e.op in ("+", "-", "*", "//", "min", "max"):
        a, b = const_int(e.a), const_int(e.b)
        if a is None or b is None:
            return None
        if e.op == "//":
            return a // b if b != 0 else None
        return {"+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b)}[e.op]
    return None


def simplify(node: Node) -> Node:
    """Fold int constants and drop ``x + 0``, ``x * 1``, ``x * 0`` (keeps printed and rendered
    index arithmetic readable after split/unroll)."""

    def f(n: Node) -> Node | None:
        if not (isinstance(n, BinOp) and n.op in ("+", "-", "*")):
            return None
        a, b = const_int(n.a), const_int(n.b)
        if a is not None and b is not None and n.a.dtype == INT and n.b.dtype == INT:  # type: ignore[attr-defined]
            return Const({"+": a + b, "-": a - b, "*": a * b}[n.op])
        if n.op == "+" and a == 0:
            return n.b
        if n.op in ("+", "-") and b == 0:
            return n.a
        if n.op == "*" and (a == 1 or b == 1):
            return n.b if a == 1 else n.a
        if n.op == "*" and (a == 0 or b == 0):
            return Const(0)
        return None

    return transform(node, f)
