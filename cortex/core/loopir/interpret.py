"""A vectorized NumPy interpreter for LoopPrograms: the executable oracle of lowering/scheduling.

Pipeline position: the ``numpy`` target runs a (scheduled) :class:`~cortex.core.loopir.Program`
here instead of rendering it; tests compare transformed programs against untransformed ones
and rendered C against this interpreter.

How it stays fast
-----------------
Loops of kind parallel / vectorized / gpu_group / gpu_thread have no loop-carried dependence
(the lowering guarantees it), so each becomes a NumPy *axis*: the loop variable is an
``arange`` on a new trailing axis and the body runs once, on arrays, with broadcasting.
Variable bounds (a CSR range that differs per node) are handled with a lane *mask*: the axis
gets the longest trip count and lanes past their own ``stop`` are masked off. A
:class:`~cortex.core.loopir.Reduce` is evaluated the same way and summed over its axis (in
chunks of the reduction range, so memory stays bounded for large GEMVs over many nodes) when
its trip counts are (nearly) the same in every lane. When they differ -- a child reduction over
``child_offsets[v]..child_offsets[v + 1]`` in a level where one node has hundreds of children
and most have two -- padding every lane to the widest would make the cost per node grow with
the batch's widest node, so the reduction runs over a *flat segment* instead: one entry per
(lane, iteration) actually taken, the variables its body reads gathered to those entries, and
``np.add.reduceat`` (``maximum``) back to the lanes, in groups of lanes of about
``CHUNK_ELEMENTS`` entries. Its cost is proportional to the trips taken, whatever the widest.
A serial loop whose bounds differ per lane steps through offsets ``0..longest trip`` from each
lane's own start (lanes are independent iterations of a vector loop), not through the union of
the lanes' absolute ranges.
A cross-lane reduction (``Reduce.lanes > 1`` in a ``gpu_thread`` loop with ``For.lanes``) is
evaluated exactly like the plain one: ``lanes`` only says how GPU threads share the work, so
this interpreter is the oracle for the shuffle code too.
Serial and unrolled loops are Python loops (the level loop). Values at nesting depth ``d`` are
arrays with ``d`` dims (size 1 where they do not vary), aligned by axis position.

Semantics: all lanes run each statement in program order (lock-step), so barriers are
no-ops here; Stores with masked lanes write only active lanes; Select/If evaluate each
branch only for the lanes that take it, so guarded indirect loads never touch a bad index.
Every active load and store is bounds-checked: an out-of-range index raises
:class:`InterpretError` naming the buffer, never a silent wrong answer. Private/shared
arrays start as NaN (floats) so reading before writing shows up in results.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np

from cortex.core import loopir as ir
from cortex.core.loopir.storage import STORAGE_NP_DTYPES, unpack

VECTOR_KINDS = ("parallel", "vectorized", "gpu_group", "gpu_thread")
_NP_DTYPES = {"int32": np.int32, "bool": np.bool_, "float32": np.float32, "float64": np.float64}
_NEG_INF = {"float32": np.float32(-np.inf), "float64": np.float64(-np.inf)}
CHUNK_ELEMENTS = 1 << 22  # a Reduce materializes at most about this many body elements at once


class InterpretError(ir.LoopIRError):
    """The program cannot run on these buffers (missing/misshaped input, out-of-bounds access)."""


def np_dtype(dtype: str) -> type:
    """The NumPy type of a dtype or of a storage format (``Buffer.stored``)."""
    return _NP_DTYPES[dtype] if dtype in _NP_DTYPES else STORAGE_NP_DTYPES[dtype]


@dataclass
class _Local:
    array: np.ndarray
    depth: int  # lane axes in front of the user's dims
    dtype: str


class _Machine:
    def __init__(self, program: ir.Program, buffers: dict[str, np.ndarray]) -> None:
        self.program = program
        self.buffers = buffers
        self.dtypes = {b.name: b.dtype for b in program.buffers}
        self.env: dict[str, np.ndarray] = {}
        self.locals: dict[str, _Local] = {}
        self.extents: list[int] = []  # lane extent of each vector axis
        self._reads_memo: dict[int, tuple[tuple[str, ...], frozenset[str], ir.Node]] = {}

    # ---------------------------------------------------------------- helpers
    @property
    def depth(self) -> int:
        return len(self.extents)

    def lift(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a)
        d = len(self.extents)
        if a.ndim < d:
            a = a.reshape(a.shape + (1,) * (d - a.ndim))
        return a

    def lane_index(self, axis: int) -> np.ndarray:
        shape = [1] * self.depth
        shape[axis] = self.extents[axis]
        return np.arange(self.extents[axis]).reshape(shape)

    def full_mask(self) -> np.ndarray:
        return np.ones((1,) * self.depth, dtype=bool)

    # ---------------------------------------------------------------- expressions
    def eval(self, e: ir.Expr, mask: np.ndarray) -> np.ndarray:
        return self.lift(self._eval(e, mask))

    def _eval(self, e: ir.Expr, mask: np.ndarray) -> np.ndarray:
        if isinstance(e, ir.Const):
            dt = np.int64 if e.dtype == ir.INT else _NP_DTYPES[e.dtype]
            return np.array(e.value, dtype=dt)
        if isinstance(e, ir.Var):
            try:
                return self.env[e.name]
            except KeyError:
                raise InterpretError(f"unbound variable {e.name!r}") from None
        if isinstance(e, ir.Load):
            return self._load(e, mask)
        if isinstance(e, ir.BinOp):
            if e.op in ("and", "or"):
                a = self.eval(e.a, mask)
                b = self.eval(e.b, mask & a if e.op == "and" else mask & ~a)
                return (a & b) if e.op == "and" else (a | b)
            a, b = self.eval(e.a, mask), self.eval(e.b, mask)
            op = e.op
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return a / b
            if op == "//":
                return np.floor_divide(a, np.where(b == 0, 1, b))
            if op == "%":
                return np.mod(a, np.where(b == 0, 1, b))
            if op == "min":
                return np.minimum(a, b)
            return np.maximum(a, b)
        if isinstance(e, ir.Cmp):
            a, b = self.eval(e.a, mask), self.eval(e.b, mask)
            return {
                "<": np.less, "<=": np.less_equal, ">": np.greater,
                ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
            }[e.op](a, b)
        if isinstance(e, ir.Not):
            return ~self.eval(e.a, mask).astype(bool)
        if isinstance(e, ir.Select):
            c = self.eval(e.cond, mask).astype(bool)
            a = self.eval(e.a, mask & c)
            b = self.eval(e.b, mask & ~c)
            return np.where(c, a, b)
        if isinstance(e, ir.Cast):
            a = self.eval(e.a, mask)
            if e.dtype == ir.INT:
                return np.trunc(a).astype(np.int64) if a.dtype.kind == "f" else a.astype(np.int64)
            return a.astype(_NP_DTYPES[e.dtype])
        if isinstance(e, ir.Call):
            args = [self.eval(a, mask) for a in e.args]
            x = args[0]
            if e.fn == "exp":
                return np.exp(x)
            if e.fn == "log":
                return np.log(x)
            if e.fn == "tanh":
                return np.tanh(x)
            if e.fn == "sigmoid":
                one = x.dtype.type(1)
                return one / (one + np.exp(-x))
            if e.fn == "sqrt":
                return np.sqrt(x)
            if e.fn == "abs":
                return np.abs(x)
            return x * args[1] + args[2]  # fma
        if isinstance(e, ir.Reduce):
            return self._reduce(e, mask)
        raise InterpretError(f"cannot evaluate {e!r}")

    def _index(self, name: str, index: tuple[ir.Expr, ...], mask: np.ndarray, what: str):
        """Evaluate and bounds-check an access; returns (array, index tuple, active mask)."""
        idx = [self.eval(i, mask) for i in index]
        loc = self.locals.get(name)
        if loc is not None:
            arr = loc.array
            idx = [self.lane_index(a) for a in range(loc.depth)] + idx
        else:
            arr = self.buffers.get(name)
            if arr is None:
                raise InterpretError(f"{what} of unknown buffer {name!r}")
        if len(idx) != arr.ndim:
            raise InterpretError(f"{what} {name}: {len(index)} indices for a {arr.ndim}-d buffer")
        depth = len(self.extents)
        m = np.asarray(mask)
        if depth and m.size > 1:
            # lanes this access really needs: reduce the mask over axes the index does not use
            shape = np.broadcast_shapes(*(i.shape for i in idx)) if idx else ()
            shape = (1,) * (depth - len(shape)) + tuple(shape)
            for ax in range(depth):
                if shape[ax] == 1 and m.shape[ax] > 1:
                    m = m.any(axis=ax, keepdims=True)
        # every lane active (the common case): the index's extremes decide the bounds check
        all_active = bool(m.all())  # (true for no lanes at all, where nothing is checked)
        everywhere = all_active and m.size > 0
        out_idx = []
        for k, i in enumerate(idx):
            size = arr.shape[k]
            if everywhere and (i.size == 0 or (i.min() >= 0 and i.max() < size)):
                out_idx.append(i)
                continue
            bad = ((i < 0) | (i >= size)) & m
            if bad.any():
                where = np.argwhere(np.broadcast_to(bad, np.broadcast_shapes(bad.shape, m.shape)))[0]
                value = int(np.broadcast_to(i, bad.shape)[tuple(where)])
                raise InterpretError(
                    f"{what} {name}: index {value} out of bounds for axis {k} of size "
                    f"{size} (lane {tuple(int(x) for x in where)})"
                )
            out_idx.append(i if all_active else np.where(m, i, 0))
        return arr, tuple(out_idx), m

    def _load(self, e: ir.Load, mask: np.ndarray) -> np.ndarray:
        arr, idx, m = self._index(e.buffer, e.index, mask, "load")
        if arr.size == 0:
            shape = np.broadcast_shapes(m.shape, *(i.shape for i in idx))
            return np.zeros(shape, dtype=arr.dtype)
        out = arr[idx]
        if out.dtype == np.int32:
            out = out.astype(np.int64)
        return out

    def _bounds(self, start: ir.Expr, stop: ir.Expr, mask: np.ndarray):
        """Evaluated bounds and the longest trip count over the active lanes."""
        s, t = self.eval(start, mask), self.eval(stop, mask)
        trip = np.broadcast_to(t - s, np.broadcast_shapes(s.shape, t.shape, mask.shape))
        active = np.broadcast_to(mask, trip.shape)
        extent = int(trip[active].max()) if active.any() else 0
        return s, t, max(extent, 0)

    def _push_axis(self, var: str, s: np.ndarray, t: np.ndarray, mask: np.ndarray, offset: int, length: int):
        """Bind ``var`` to ``s + offset + arange(length)`` on a new trailing axis."""
        if var in self.env:
            raise InterpretError(f"variable {var!r} is bound twice (names must not be shadowed)")
        self.extents.append(length)
        lanes = np.arange(offset, offset + length).reshape((1,) * (self.depth - 1) + (length,))
        v = s[..., None] + lanes
        self.env[var] = v
        return mask[..., None] & (v < t[..., None])

    def _pop_axis(self, var: str) -> None:
        self.extents.pop()
        del self.env[var]

    def _reduce(self, e: ir.Reduce, mask: np.ndarray) -> np.ndarray:
        s, t, extent = self._bounds(e.start, e.stop, mask)
        dt = ir.infer_dtype(e.body, self._all_dtypes())
        np_dt = np.int64 if dt == ir.INT else _NP_DTYPES[dt]
        ident = _NEG_INF.get(dt, np.iinfo(np.int64).min) if e.op == "max" else np_dt(0)
        if self.depth and extent > 1:
            flat = self._reduce_flat(e, s, t, mask, extent, np_dt, ident)
            if flat is not None:
                return flat
        # evaluate the reduction axis in chunks so that lanes x chunk stays within CHUNK_ELEMENTS
        lanes = int(np.prod(self.extents)) if self.extents else 1
        chunk = max(1, min(extent, CHUNK_ELEMENTS // max(1, lanes)))
        out = np.full((1,) * self.depth, ident, dtype=np_dt)
        count = np.zeros((1,) * self.depth, dtype=np.int64)
        for off in range(0, extent, chunk):
            length = min(chunk, extent - off)
            new_mask = self._push_axis(e.var, s, t, mask, off, length)
            try:
                body = self.eval(e.body, new_mask)
            finally:
                self._pop_axis(e.var)
            full = np.broadcast_shapes(body.shape, new_mask.shape)
            vals = np.broadcast_to(np.where(new_mask, body, ident), full)
            if e.op == "max":
                out = np.maximum(out, vals.max(axis=-1))
            else:
                out = out + vals.sum(axis=-1, dtype=np_dt)
            if e.op == "mean":
                count = count + np.broadcast_to(new_mask, full).sum(axis=-1)
        if e.op == "mean":
            out = out / np.maximum(count, 1).astype(np_dt)
        return out

    def _reduce_flat(self, e: ir.Reduce, s: np.ndarray, t: np.ndarray, mask: np.ndarray,
                     extent: int, np_dt: type, ident: object) -> np.ndarray | None:
        """``e`` over a flat segment of the (lane, iteration) pairs taken (module docstring);
        None when padding wastes little or the body reads a private array of the lanes."""
        full = tuple(self.extents)
        starts, counts = self._trips(s, t, mask, full)
        lanes, total = len(counts), int(counts.sum())
        if 2 * total > lanes * extent:
            return None  # at most half of the padded work saved: the masked form is cheaper
        names, buffers = self._reads(e.body)
        if not buffers.isdisjoint(self.locals):
            return None
        out = np.full(lanes, ident, dtype=np_dt)
        ends = np.cumsum(counts)  # the flat position after each lane's entries
        group = max(CHUNK_ELEMENTS // 8, extent)
        ufunc = np.maximum if e.op == "max" else np.add
        lo = 0
        while lo < lanes:
            base = int(ends[lo - 1]) if lo else 0
            hi = max(int(np.searchsorted(ends, base + group, side="right")), lo + 1)
            cnt = counts[lo:hi]
            size = int(ends[hi - 1]) - base
            if size:
                lane = np.repeat(np.arange(lo, hi), cnt)
                first = ends[lo:hi] - cnt - base  # each lane's first flat position
                env = self._gather(names, lane, full)
                env[e.var] = starts[lane] + (np.arange(size) - first[lane - lo])
                with self._on_lanes(env, size):
                    body = self.eval(e.body, np.ones(size, dtype=bool))
                body = np.broadcast_to(body, (size,)).astype(np_dt, copy=False)
                taken = cnt > 0
                out[lo:hi][taken] = ufunc.reduceat(body, first[taken])
                if e.op == "mean":
                    out[lo:hi][taken] /= cnt[taken].astype(np_dt)
            lo = hi
        return out.reshape(full)

    def _trips(self, s: np.ndarray, t: np.ndarray, mask: np.ndarray,
               full: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Per lane of ``full`` (flattened): the loop's start and its trip count (0 when the
        lane is inactive)."""
        starts = np.broadcast_to(s, full).reshape(-1)
        stops = np.broadcast_to(t, full).reshape(-1)
        active = np.broadcast_to(mask, full).reshape(-1)
        return starts, np.where(active, np.maximum(stops - starts, 0), 0)

    def _gather(self, names: tuple[str, ...], lane: np.ndarray,
                full: tuple[int, ...]) -> dict[str, np.ndarray]:
        """The bound variables among ``names`` on one flat axis whose entry k belongs to the
        lane of flat index ``lane[k]`` of the lane shape ``full``."""
        env = {}
        for name in names:
            v = self.env.get(name)
            if v is None:
                continue
            if v.ndim:
                v = v.reshape(v.shape + (1,) * (len(full) - v.ndim))
                v = np.broadcast_to(v, full).reshape(-1)[lane]
            env[name] = v
        return env

    @contextmanager
    def _on_lanes(self, env: dict[str, np.ndarray], count: int) -> Iterator[None]:
        """Run with ``env`` as the variables and one lane axis of ``count`` lanes (a flat
        segment or a compacted set of lanes), then restore the lanes around it."""
        saved = self.env, self.extents
        self.env, self.extents = env, [count]
        try:
            yield
        finally:
            self.env, self.extents = saved

    def _reads(self, node: ir.Node) -> tuple[tuple[str, ...], frozenset[str]]:
        """The variable names ``node`` reads and the buffers it loads or stores (memoized)."""
        got = self._reads_memo.get(id(node))
        if got is None:
            nodes = list(ir.walk(node))
            names = tuple({n.name for n in nodes if isinstance(n, ir.Var)})
            buffers = frozenset(n.buffer for n in nodes if isinstance(n, (ir.Load, ir.Store)))
            got = self._reads_memo[id(node)] = (names, buffers, node)  # node: keeps id unique
        return got[0], got[1]

    def _all_dtypes(self) -> dict[str, str]:
        d = dict(self.dtypes)
        d.update({n: loc.dtype for n, loc in self.locals.items()})
        return d

    # ---------------------------------------------------------------- statements
    def exec(self, s: ir.Stmt, mask: np.ndarray) -> None:
        if not mask.any():
            return
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.exec(x, mask)
        elif isinstance(s, ir.Store):
            self._store(s, mask)
        elif isinstance(s, ir.Let):
            if s.var in self.env:
                raise InterpretError(f"variable {s.var!r} is bound twice (names must not be shadowed)")
            self.env[s.var] = self.eval(s.value, mask)
            try:
                self.exec(s.body, mask)
            finally:
                del self.env[s.var]
        elif isinstance(s, ir.If):
            c = self.eval(s.cond, mask).astype(bool)
            self.exec(s.then, mask & c)
            if s.orelse is not None:
                self.exec(s.orelse, mask & ~c)
        elif isinstance(s, ir.For):
            if s.kind in VECTOR_KINDS:
                st, sp, extent = self._bounds(s.start, s.stop, mask)
                if extent > 0:
                    new_mask = self._push_axis(s.var, st, sp, mask, 0, extent)
                    try:
                        self.exec(s.body, new_mask)
                    finally:
                        self._pop_axis(s.var)
            else:
                self._serial_for(s, mask)
        elif isinstance(s, ir.Alloc):
            lanes = tuple(self.extents)
            dt = _NP_DTYPES[s.dtype]
            fill = np.nan if s.dtype in ir.FLOAT_DTYPES else 0
            if s.name in self.locals or s.name in self.buffers:
                raise InterpretError(f"alloc {s.name!r} shadows another buffer")
            self.locals[s.name] = _Local(np.full(lanes + s.shape, fill, dtype=dt), self.depth, s.dtype)
            try:
                self.exec(s.body, mask)
            finally:
                del self.locals[s.name]
        elif isinstance(s, ir.Barrier):
            pass  # lock-step execution: every lane has finished the statements before
        elif isinstance(s, ir.Prefetch):
            pass  # a cache hint: computes nothing
        else:
            raise InterpretError(f"cannot execute {s!r}")

    def _serial_for(self, s: ir.For, mask: np.ndarray) -> None:
        st, sp = self.eval(s.start, mask), self.eval(s.stop, mask)
        shape = np.broadcast_shapes(st.shape, sp.shape, mask.shape)
        act = np.broadcast_to(mask, shape)
        st_a, sp_a = np.broadcast_to(st, shape)[act], np.broadcast_to(sp, shape)[act]
        if st_a.size == 0:
            return
        uniform = bool((st_a == st_a[0]).all() and (sp_a == sp_a[0]).all())
        if s.var in self.env:
            raise InterpretError(f"variable {s.var!r} is bound twice (names must not be shadowed)")
        try:
            if uniform:
                for i in range(int(st_a[0]), int(sp_a[0])):
                    self.env[s.var] = np.array(i, dtype=np.int64)
                    self.exec(s.body, mask)
            elif not self._serial_compacted(s, st, sp, mask):
                # each lane from its own start: the longest trip, not the union of the ranges
                trip = sp - st
                for k in range(int((sp_a - st_a).max())):
                    self.env[s.var] = st + k
                    self.exec(s.body, mask & (k < trip))
        finally:
            self.env.pop(s.var, None)

    def _serial_compacted(self, s: ir.For, st: np.ndarray, sp: np.ndarray,
                          mask: np.ndarray) -> bool:
        """A serial loop whose trip counts differ a lot between lanes: step ``k`` runs the body
        on only the lanes with more than ``k`` trips (compacted to one axis, the variables the
        body reads gathered), so its cost is the trips taken, not lanes x the longest trip.
        False (nothing run) when padding wastes little or the body touches a private array
        of the lanes."""
        full = tuple(self.extents)
        starts, counts = self._trips(st, sp, mask, full)
        longest = int(counts.max())
        if 2 * int(counts.sum()) > len(counts) * longest:
            return False
        names, buffers = self._reads(s.body)
        if not buffers.isdisjoint(self.locals):
            return False
        order = np.argsort(-counts, kind="stable")  # lanes by trip count, longest first
        # how many lanes have more than k trips, for every step k
        taking = np.searchsorted(-counts[order], -np.arange(longest), side="left")
        for k in range(longest):
            lanes = order[:int(taking[k])]
            env = self._gather(names, lanes, full)
            env[s.var] = starts[lanes] + k
            with self._on_lanes(env, len(lanes)):
                self.exec(s.body, np.ones(len(lanes), dtype=bool))
        return True

    def _store(self, s: ir.Store, mask: np.ndarray) -> None:
        arr, idx, _ = self._index(s.buffer, s.index, mask, "store")
        if arr.flags.writeable is False:
            raise InterpretError(f"store to read-only buffer {s.buffer!r}")
        val = self.eval(s.value, mask)
        parts = np.broadcast_arrays(mask, val, *idx)
        m = parts[0]
        sel = tuple(p[m] for p in parts[2:])
        values = parts[1][m].astype(arr.dtype, copy=False)
        if values.size > 1 and arr.ndim > 0:
            self._check_write_conflicts(s.buffer, arr.shape, sel, values)
        arr[sel] = values

    @staticmethod
    def _check_write_conflicts(name: str, shape: tuple, sel: tuple, values: np.ndarray) -> None:
        """Lanes of one store that hit the same element must agree: differing values mean a
        parallel loop with a write conflict (a lowering bug), whose result would be arbitrary."""
        flat = np.ravel_multi_index(sel, shape)
        order = np.argsort(flat, kind="stable")
        f, v = flat[order], values[order]
        same = f[1:] == f[:-1]
        if not same.any():
            return
        agree = v[1:] == v[:-1]
        if v.dtype.kind == "f":
            agree |= np.isnan(v[1:]) & np.isnan(v[:-1])
        differ = same & ~agree
        if differ.any():
            k = int(np.argmax(differ))
            where = np.unravel_index(int(f[k]), shape)
            raise InterpretError(
                f"store {name}{list(map(int, where))}: parallel lanes write different values "
                f"({v[k]!r} and {v[k + 1]!r}); a parallel/vectorized/gpu loop has a write conflict"
            )

    # ---------------------------------------------------------------- host
    def host(self, steps: tuple[ir.Node, ...]) -> None:
        for step in steps:
            if isinstance(step, ir.Launch):
                k = self.program.kernel(step.kernel)
                if len(step.args) != len(k.params):
                    raise InterpretError(f"launch of {k.name}: {len(step.args)} args for {len(k.params)} params")
                vals = [self.eval(a, self.full_mask()) for a in step.args]
                saved = dict(self.env)
                for p, v in zip(k.params, vals):
                    self.env[p] = v
                try:
                    self.exec(k.body, self.full_mask())
                finally:
                    self.env = saved
            elif isinstance(step, ir.HostFor):
                lo = int(self.eval(step.start, self.full_mask()))
                hi = int(self.eval(step.stop, self.full_mask()))
                for i in range(lo, hi):
                    self.env[step.var] = np.array(i, dtype=np.int64)
                    self.host(step.body)
                self.env.pop(step.var, None)
            else:
                raise InterpretError(f"unknown host step {step!r}")


def eval_shape(shape: tuple[ir.Expr, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A buffer shape with the size symbols bound."""
    out = []
    for d in shape:
        v = ir.substitute(d, {k: ir.Const(int(x)) for k, x in sizes.items()})
        c = ir.const_int(v)  # type: ignore[arg-type]
        if c is None:
            raise InterpretError(f"shape expression {d} does not reduce to an int with sizes {dict(sizes)}")
        out.append(c)
    return tuple(out)


def allocate(program: ir.Program, sizes: Mapping[str, int], dtype_override: str | None = None) -> dict[str, np.ndarray]:
    """Zero-filled arrays for every buffer of ``program`` (handy for outputs and temps)."""
    return {
        b.name: np.zeros(eval_shape(b.shape, sizes), dtype=_NP_DTYPES[b.dtype]) for b in program.buffers
    }


def run(
    program: ir.Program, buffers: Mapping[str, np.ndarray], sizes: Mapping[str, int]
) -> dict[str, np.ndarray]:
    """Execute ``program``. Every input/param/index buffer must be given with its declared shape
    and dtype; output and temp buffers are allocated (zeros) when absent and written in place
    when given. Returns all buffers by name."""
    missing = [s.name for s in program.sizes if s.name not in sizes]
    if missing:
        raise InterpretError(f"program {program.name}: sizes {missing} not given")
    for s in program.sizes:
        if int(sizes[s.name]) < s.lo:
            raise InterpretError(f"size {s.name}={sizes[s.name]} is below its minimum {s.lo}")
    bufs: dict[str, np.ndarray] = {}
    for b in program.buffers:
        shape = eval_shape(b.shape, sizes)
        dt = np.dtype(np_dtype(b.stored))
        if b.name not in buffers:
            if b.read_only:
                raise InterpretError(f"program {program.name}: buffer {b.name!r} ({b.role}) not given")
            bufs[b.name] = np.zeros(shape, dtype=dt)
            continue
        a = buffers[b.name]
        if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dt:
            got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
            raise InterpretError(f"buffer {b.name!r}: expected {dt}{list(shape)}, got {got}")
        if b.storage:  # widened once: the values every load of the generated code sees
            a = unpack(a, b.storage)
        if b.read_only:
            a = a.view()
            a.flags.writeable = False
        bufs[b.name] = a
    m = _Machine(program, bufs)
    for s in program.sizes:
        m.env[s.name] = np.array(int(sizes[s.name]), dtype=np.int64)
    with np.errstate(all="ignore"):  # masked-off lanes may compute garbage that is discarded
        m.host(program.host)
    out = dict(buffers)
    out.update(bufs)
    return out


def batch_inputs(program: ir.Program, batch) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The index buffers and sizes of ``program`` (declared with ``loopir.linearizer_buffers``)
    from a :class:`~cortex.core.linearize.structure.LinearizedBatch`. ``child_table`` is padded with -1 to
    the program's constant width; a batch whose nodes have more children, or tokens outside
    the program's vocabulary, is refused with a ValueError (the generated code would read out
    of bounds)."""
    sizes = {"N": batch.num_nodes, "E": int(len(batch.child_ids)), "B": batch.batch_size,
             "L": batch.num_levels, "NL": batch.num_leaves}
    sizes = {k: v for k, v in sizes.items() if k in program.size_names}
    declared = {b.name: b for b in program.buffers}
    out: dict[str, np.ndarray] = {}
    for name in ("level_offsets", "child_offsets", "child_ids", "roots", "node_input"):
        if name in declared:
            out[name] = np.ascontiguousarray(getattr(batch, name), dtype=np.int32)
    if "child_table" in declared:
        width = ir.const_int(declared["child_table"].shape[1])
        if width is None:
            raise InterpretError("child_table must have a constant width (the model's arity)")
        if batch.max_arity > width and (batch.child_table[:, width:] >= 0).any():
            most = int((batch.child_table >= 0).sum(axis=1).max())
            raise ValueError(f"a node has {most} children; this program handles at most {width} per node")
        table = np.full((batch.num_nodes, width), -1, dtype=np.int32)
        k = min(width, batch.max_arity)
        table[:, :k] = batch.child_table[:, :k]
        out["child_table"] = table
    if "word_ids" in declared:
        if batch.word_ids is None:
            raise ValueError("this program reads word ids but the batch carries no tokens")
        hi = ir.const_int(declared["word_ids"].value_range[1]) if declared["word_ids"].value_range else None
        if hi is not None and batch.word_ids.size and int(batch.word_ids.max()) > hi:
            raise ValueError(f"token id {int(batch.word_ids.max())} is outside the vocabulary (size {hi + 1})")
        out["word_ids"] = np.ascontiguousarray(batch.word_ids, dtype=np.int32)
    if "features" in declared:
        if batch.features is None:
            raise ValueError("this program reads node features but the batch has none")
        out["features"] = np.ascontiguousarray(batch.features, dtype=np.float64)
    return out, sizes
