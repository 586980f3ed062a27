"""Launch configuration for the kernels of a scheduled LoopProgram on a CUDA GPU.

Pipeline position: host side of the ``cuda`` runtime. Before each call the runtime asks
:class:`KernelPlan` (built once per kernel) for a :class:`LaunchConfig`:

* **block size** — 1 for a kernel without GPU-thread loops (each thread of a block would run
  the block's whole work), else the kernel's ``threads_per_group`` (the schedule's ``threads``)
  or, when the schedule set none, the target option ``threads_per_block``; with lane groups
  (``For.lanes``: a cross-lane reduction's shuffles name every lane of its group) it is rounded
  up to a multiple of the widest group, so no group is cut short by the block's end;
* **grid size** — every GPU loop of the rendered code is grid-/block-stride, so *any* grid is
  correct; the grid only decides speed. The plan evaluates the trip counts of the kernel's
  ``gpu_group`` loops on the host (sizes, kernel arguments, the level loop, host copies of the
  index buffers such as ``level_offsets``) and launches as many blocks as the widest one needs;
  where a bound cannot be evaluated on the host it falls back to filling the GPU;
* **cooperative** — a kernel containing a grid barrier (``kernel_form='single'``: one persistent
  kernel running every level) must be launched cooperatively, and its grid must not exceed the
  blocks that can be co-resident (occupancy per SM x SMs), or the grid barrier would deadlock;
* **dynamic shared memory** — ``c_family.dynamic_shared_bytes`` (shared arrays above CUDA's
  48 KiB static limit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from cortex.core import loopir as ir
from cortex.core.errors import CortexError
from cortex.core.render.c_family import dynamic_shared_bytes, kernel_symbol


class LaunchError(CortexError, RuntimeError):
    """A kernel cannot be launched as scheduled (e.g. it cannot be co-resident for a grid barrier)."""


@dataclass(frozen=True)
class LaunchConfig:
    kernel: str  # the kernel's name in the program
    symbol: str  # its function name in the module
    grid: int
    block: int
    shared_bytes: int  # dynamic shared memory
    cooperative: bool
    args: tuple[int, ...] = ()  # the kernel's own int parameters


class _Unknown(Exception):
    """An expression depends on something the host does not know (device data)."""


#: Most iterations of a serial loop (e.g. the level loop) the grid planner evaluates; the loop
#: variable is bound to all its values at once (NumPy), so this only bounds memory.
EVAL_LIMIT = 1 << 20


_SCALAR_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
               "//": lambda a, b: a // b, "%": lambda a, b: a % b, "min": min, "max": max}


def _int(x):
    return int(x) if np.ndim(x) == 0 else x


def _eval(e: ir.Expr, env: Mapping[str, object], arrays: Mapping[str, np.ndarray]):
    """Evaluate an int expression on the host; loop variables may be bound to arrays of all
    their values (vectorized). Raises _Unknown for anything the host cannot know."""
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        v = env.get(e.name)
        if v is None:
            raise _Unknown(e.name)
        return v
    if isinstance(e, ir.Load):
        a = arrays.get(e.buffer)
        if a is None or a.ndim != len(e.index):
            raise _Unknown(e.buffer)
        idx = tuple(_eval(i, env, arrays) for i in e.index)
        if not any(isinstance(i, np.ndarray) for i in idx):  # the common scalar case, fast
            if any(not 0 <= i < n for i, n in zip(idx, a.shape)):
                raise _Unknown(f"{e.buffer} index out of range")
            return int(a[idx])
        arr = tuple(np.asarray(i) for i in idx)
        if any(i.size and (i.min() < 0 or i.max() >= n) for i, n in zip(arr, a.shape)):
            raise _Unknown(f"{e.buffer} index out of range")
        return _int(a[arr].astype(np.int64))
    if isinstance(e, ir.BinOp):
        a, b = _eval(e.a, env, arrays), _eval(e.b, env, arrays)
        if type(a) is int and type(b) is int and e.op in _SCALAR_OPS and (b != 0 or e.op not in ("//", "%")):
            return _SCALAR_OPS[e.op](a, b)
        if e.op in ("//", "%") and np.any(np.asarray(b) == 0):
            raise _Unknown("division by zero")
        fn = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod,
              "min": np.minimum, "max": np.maximum, "and": np.logical_and, "or": np.logical_or}.get(e.op)
        if fn is None:
            raise _Unknown(e.op)
        return _int(np.asarray(fn(a, b)).astype(np.int64))
    if isinstance(e, ir.Cmp):
        a, b = _eval(e.a, env, arrays), _eval(e.b, env, arrays)
        fn = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
              "==": np.equal, "!=": np.not_equal}[e.op]
        return _int(np.asarray(fn(a, b)).astype(np.int64))
    if isinstance(e, ir.Not):
        return _int((np.asarray(_eval(e.a, env, arrays)) == 0).astype(np.int64))
    if isinstance(e, ir.Select):
        c = _eval(e.cond, env, arrays)
        if np.ndim(c) == 0:
            return _eval(e.a, env, arrays) if c else _eval(e.b, env, arrays)
        return _int(np.where(c != 0, _eval(e.a, env, arrays), _eval(e.b, env, arrays)))
    raise _Unknown(type(e).__name__)


def _skeleton(s: ir.Stmt) -> ir.Stmt | None:
    """``s`` with everything dropped that cannot contain a gpu_group loop, and the bodies of
    gpu_group loops dropped (their trip counts are all the planner needs)."""
    if isinstance(s, ir.For):
        if s.kind == "gpu_group":
            return ir.For(s.var, s.start, s.stop, ir.Seq(()), s.kind)
        body = _skeleton(s.body)
        return None if body is None else ir.For(s.var, s.start, s.stop, body, s.kind)
    if isinstance(s, ir.Seq):
        parts = tuple(p for p in (_skeleton(x) for x in s.stmts) if p is not None)
        return ir.Seq(parts) if parts else None
    if isinstance(s, (ir.Let, ir.Alloc)):
        body = _skeleton(s.body)
        if body is None:
            return None
        return ir.Let(s.var, s.value, body) if isinstance(s, ir.Let) else ir.Alloc(s.name, s.dtype, s.shape, s.scope, body)
    if isinstance(s, ir.If):
        then, orelse = _skeleton(s.then), (_skeleton(s.orelse) if s.orelse is not None else None)
        if then is None and orelse is None:
            return None
        return ir.Seq(tuple(p for p in (then, orelse) if p is not None))  # either branch may run
    return None


class _Widest:
    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.arrays = arrays

    def visit(self, s: ir.Stmt, env: dict[str, object]) -> int:
        """The largest trip count of a gpu_group loop in ``s``; raises _Unknown."""
        if isinstance(s, ir.Seq):
            return max((self.visit(x, env) for x in s.stmts), default=0)
        if isinstance(s, ir.Let):
            try:
                value: object = _eval(s.value, env, self.arrays)
            except _Unknown:
                value = None
            return self.visit(s.body, {**env, s.var: value})
        if isinstance(s, ir.Alloc):
            return self.visit(s.body, env)
        if isinstance(s, ir.For):
            lo, hi = _eval(s.start, env, self.arrays), _eval(s.stop, env, self.arrays)
            if s.kind == "gpu_group":
                if type(lo) is int and type(hi) is int:
                    return max(0, hi - lo)
                return int(np.max(np.asarray(hi) - np.asarray(lo), initial=0))
            if np.ndim(lo) or np.ndim(hi):
                raise _Unknown(f"loop {s.var} has bounds that vary with an outer loop")
            if hi <= lo:
                return 0
            if hi - lo > EVAL_LIMIT:
                raise _Unknown(f"loop {s.var} is too long to evaluate on the host")
            return self.visit(s.body, {**env, s.var: np.arange(lo, hi, dtype=np.int64)})
        raise _Unknown(type(s).__name__)


class KernelPlan:
    """How to launch one kernel of a program; :meth:`config` per launch."""

    def __init__(self, program: ir.Program, kernel: str, threads_per_block: int) -> None:
        k = program.kernel(kernel)
        nodes = list(ir.walk(k.body))
        kinds = {n.kind for n in nodes if isinstance(n, ir.For)}
        self.program = program
        self.kernel = kernel
        self.symbol = kernel_symbol(program, kernel)
        self.params = k.params
        self.cooperative = any(isinstance(n, ir.Barrier) and n.scope == "grid" for n in nodes)
        self.has_groups = "gpu_group" in kinds
        if "gpu_thread" not in kinds:
            self.block = 1  # every thread would redo the whole block's work
        elif k.threads_per_group > 1:
            self.block = k.threads_per_group
        else:
            self.block = threads_per_block
        self.lanes = max((n.lanes for n in nodes if isinstance(n, ir.For)), default=1)
        self.block = -(-self.block // self.lanes) * self.lanes
        self.shared_bytes = dynamic_shared_bytes(program, kernel, "cuda")
        self.skeleton = _skeleton(k.body) if self.has_groups else None

    def widest(self, sizes: Mapping[str, int], args: tuple[int, ...], arrays: Mapping[str, np.ndarray]) -> int | None:
        """The most groups any gpu_group loop can use for these sizes/args/index arrays
        (0: none; None: unknown on the host)."""
        if self.skeleton is None:
            return 0
        env: dict[str, object] = {**{k: int(v) for k, v in sizes.items()}, **dict(zip(self.params, args))}
        try:
            return _Widest(arrays).visit(self.skeleton, env)
        except _Unknown:
            return None

    def config(self, sizes: Mapping[str, int], args: tuple[int, ...], arrays: Mapping[str, np.ndarray],
               resident_blocks: Callable[[int, int], int], sm_count: int) -> LaunchConfig:
        """The launch for these sizes and kernel arguments. ``resident_blocks(block, shared)``
        is the occupancy (blocks per SM) of this kernel at that block size."""
        if not self.has_groups:
            grid = 1
        else:
            per_sm = resident_blocks(self.block, self.shared_bytes)
            if per_sm <= 0:
                raise LaunchError(
                    f"kernel {self.symbol} cannot run with {self.block} threads and {self.shared_bytes} bytes of "
                    "dynamic shared memory per block on this GPU (occupancy 0): lower the schedule's threads or "
                    "turn off persistent weights")
            fill = per_sm * sm_count
            want = self.widest(sizes, args, arrays)
            grid = fill if want is None else max(1, min(want, fill))
            if not self.cooperative and want is not None:
                grid = max(1, want)  # grid-stride: more blocks than fit still run, in waves
            grid = min(grid, 2**31 - 1)
        return LaunchConfig(self.kernel, self.symbol, grid, self.block, self.shared_bytes, self.cooperative, args)


def host_launches(program: ir.Program, sizes: Mapping[str, int]) -> list[tuple[str, tuple[int, ...]]]:
    """The program's host steps unrolled for ``sizes``: ``(kernel, int args)`` in launch order."""
    out: list[tuple[str, tuple[int, ...]]] = []

    def run(steps: tuple, env: dict[str, int]) -> None:
        for st in steps:
            if isinstance(st, ir.Launch):
                try:
                    out.append((st.kernel, tuple(int(_eval(a, env, {})) for a in st.args)))
                except _Unknown as e:
                    raise LaunchError(f"launch of {st.kernel}: argument depends on {e}, unknown on the host") from None
            elif isinstance(st, ir.HostFor):
                lo, hi = _eval(st.start, env, {}), _eval(st.stop, env, {})
                for v in range(lo, hi):
                    run(st.body, {**env, st.var: v})
            else:
                raise LaunchError(f"unknown host step {st!r}")

    run(program.host, {k: int(v) for k, v in sizes.items()})
    return out
