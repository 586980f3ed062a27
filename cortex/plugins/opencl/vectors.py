"""OpenCL C with vector statements: the core C-family renderer plus SIMD code for short
``vectorized`` loops.

Pipeline position: the rendering step of the ``opencl`` backend (:func:`render`, called by
``compiler.OpenCLRenderer``). A ``vectorized`` loop of 2-16 iterations (or 32 and 64, as clang
vectors of several registers, when it calls no ``fma``: OpenCL's built-ins stop at 16 lanes)
whose body is lets and stores, where every access that depends on the loop variable is
contiguous in it (last index ``lane + ...``, the others lane-free) and only ``+ - *`` and
``fma`` combine lane-dependent values, is written as straight-line statements on an OpenCL
vector type: a lane-dependent let becomes a vector variable, a lane-free one a scalar (OpenCL C
widens scalars in arithmetic; an ``fma`` argument is widened explicitly), a store one vector
store. That is the form a node jam's fused reduction loops take
(``cortex.core.lowering.jam_fuse``): weight vectors loaded once, accumulators updated with
``fma`` (a row jam's 64-lane loop: a weight broadcast times a matrix row). In these statements
a buffer's element is read through its row's pointer (:meth:`_VectorRenderer.flat_index`), so a
jammed node's child row is a loop-invariant pointer. The vector type is a typedef with the element's alignment, so loads and
stores are unaligned vector moves: PoCL's ``vload``/``vstore`` are library calls its compiler
does not inline (measured: every accumulator spilled).

A loop whose body holds a lane-dependent ``sum`` (a GEMV row per lane that the jam did not fuse:
child-sum's per-child forget gate, MV-RNN's matrix products) is also tried in a wider form:
integer lets affine in the lane are inlined (a packed weight's ``[j // W, k, j % W]`` then reads
one block, ``jam_fuse.split_lane``), a ``sum`` over a lane-free range becomes a vector
accumulator loop (nested sums nest), a ``select`` on a lane-free condition a C conditional
(only the chosen side is evaluated: a missing child's row is not read), and ``sigmoid``,
``tanh``, ``exp`` the OpenCL vector built-ins. Written per lane instead, each lane's sum is a
scalar loop over stride-``W`` weights that the driver does not vectorize (child-sum b1: the
per-child gates were most of the call). The wide form also takes 32 and 64 lanes (a matrix
nest's column loop merged by the ``wide_lanes`` knob) as clang vectors of several registers,
without built-in calls: one accumulator loop whose every weight broadcast feeds all of them. Loops without such a sum keep the narrow form, whose
transcendentals the driver inlines (``FAST_SIGMOID_HELPER``). Any other loop renders as the core
renderer writes it.

``min_vector_bits`` > 0 marks every kernel ``__attribute__((min_vector_width(N)))`` (clang, so
PoCL): without it LLVM splits a 16-float vector into two 256-bit halves on an AVX-512 CPU, and
a jammed loop's 20 accumulators then need 40 registers (measured: 40 spill loads and stores per
step); with it they stay 20 zmm registers.
"""

from __future__ import annotations

from cortex.core import loopir as ir
from cortex.core.lowering.jam_fuse import split_lane
from cortex.core.render import c_family as render_c
from cortex.core.render.dialects import get_dialect
from cortex.plugins.opencl import shared

#: Lanes of an OpenCL vector statement (``vectorized`` loops of these trip counts).
VECTOR_TRIPS = (2, 3, 4, 8, 16)

#: Longer lanes the wide form also takes, as clang vectors (several SIMD registers; no built-in
#: calls): a matrix nest's column loop merged by ``wide_lanes``.
WIDE_TRIPS = (32, 64)

#: Calls the wide form writes as OpenCL's vector built-ins (``sigmoid`` as ``1 / (1 + exp(-x))``).
VECTOR_CALLS = ("sigmoid", "tanh", "exp")


def _names(e: ir.Node) -> set[str]:
    return {n.name for n in ir.walk(e) if isinstance(n, ir.Var)}


def _lane_coefficient(e: ir.Expr, lane: str) -> int | None:
    """``c`` when ``e`` is ``c * lane + (lane-free)``; None when it is not affine in ``lane``."""
    if lane not in _names(e):
        return 0
    if isinstance(e, ir.Var):
        return 1
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        a, b = _lane_coefficient(e.a, lane), _lane_coefficient(e.b, lane)
        if a is None or b is None:
            return None
        return a + b if e.op == "+" else a - b
    if isinstance(e, ir.BinOp) and e.op == "*":
        for c, x in ((e.a, e.b), (e.b, e.a)):
            k = ir.const_int(c)
            inner = _lane_coefficient(x, lane)
            if k is not None and inner is not None:
                return k * inner
    return None


class _VectorRenderer(render_c.CRenderer):
    """See the module doc."""

    min_vector_bits = 0
    wide = False  # the wide form (see the module doc) is being tried
    rows = False  # the narrow form is being tried: elements through their row pointers
    lanes = 0  # of the loop being written
    claims = False  # writing the shared-levels kernel: its work-group loops claim units

    def kernel(self, k: ir.Kernel) -> str:
        self.claims = k.name == shared.SHARED_KERNEL
        try:
            text = super().kernel(k)
        finally:
            self.claims = False
        if k.name == shared.SHARED_KERNEL:
            text = shared.kernel_text(text)
        if self.min_vector_bits and text.startswith("__kernel void"):
            text = f"__kernel __attribute__((min_vector_width({self.min_vector_bits}))) void" + text[len("__kernel void"):]
        return text

    def flat_index(self, name: str, index: tuple[ir.Expr, ...]) -> str:
        """In vector statements (:attr:`rows`), a buffer's element as its row's pointer
        indexed by the last index, ``(h + (ch) * (256))[k]`` instead of
        ``h[(ch) * (256) + (k)]``: the same element, but the row pointer is loop-invariant
        where the row is (a jammed node's child row in a fused reduction loop), so the step's
        loads take base + index addressing. With the sum of offsets the driver's SLP
        vectorizer packed a group's eight ``row + k`` additions into one vector add and
        extracted each address from it, a dozen shuffles a step on the port of the second FMA
        unit (PoCL's object code of TreeFC's kernel). Elsewhere the core renderer's form
        (MV-RNN's scalar and wide loops were 5-8% slower with row pointers)."""
        if not self.rows or name in self.allocs or len(index) < 2:
            return super().flat_index(name, index)
        b = self.p.buffer(name)
        if len(index) != len(b.shape):
            return super().flat_index(name, index)  # the core renderer's error
        row = self.expr(index[0])
        for i, dim in zip(index[1:-1], b.shape[1:-1]):
            row = f"({row}) * ({self.expr(dim)}) + ({self.expr(i)})"
        return f"({name} + ({row}) * ({self.expr(b.shape[-1])}))[{self.expr(index[-1])}]"

    def vector_type(self, dtype: str, lanes: int) -> str:
        t = self.ctype(dtype)
        name = f"cx_v{t}{lanes}"
        if name not in self.helpers:
            size = 8 if dtype == "float64" else 4
            self.helpers[name] = (f"typedef {t} {name} __attribute__((ext_vector_type({lanes}), "
                                  f"aligned({size})));")
        return name

    def _pointer(self, buffer: str, vt: str, index: tuple[ir.Expr, ...]) -> str:
        alloc = self.allocs.get(buffer)
        if alloc is not None:
            space = self.d.shared_qualifier if alloc.scope == "shared" and self.d.shared_qualifier else ""
            const = ""
        else:
            space = self.d.global_qualifier
            const = self.d.const_qualifier if self.p.buffer(buffer).read_only else ""
        q = " ".join(x for x in (space, const) if x)
        return f"(*({q + ' ' if q else ''}{vt}*)(&{self.flat_index(buffer, index)}))"

    def _contiguous(self, index: tuple[ir.Expr, ...], lane: str) -> bool:
        if not index:
            return False
        return (all(_lane_coefficient(i, lane) == 0 for i in index[:-1])
                and _lane_coefficient(index[-1], lane) == 1)

    def _varies(self, e: ir.Expr, lane: str, vlets: dict[str, str]) -> bool:
        names = _names(e)
        return lane in names or any(n in vlets for n in names)

    def _vector_ok(self, e: ir.Expr, lane: str, dtype: str, vlets: dict[str, str]) -> bool:
        if not self._varies(e, lane, vlets):
            return not any(isinstance(n, ir.Reduce) for n in ir.walk(e))
        if isinstance(e, ir.Var):
            return vlets.get(e.name) == dtype
        if isinstance(e, ir.Load):
            return (self.dtypes.get(e.buffer) == dtype and self._contiguous(e.index, lane)
                    and not any(n in vlets for i in e.index for n in _names(i)))
        if isinstance(e, ir.BinOp) and e.op in ("+", "-", "*"):
            return self._vector_ok(e.a, lane, dtype, vlets) and self._vector_ok(e.b, lane, dtype, vlets)
        if (isinstance(e, ir.Call) and self.lanes in VECTOR_TRIPS  # OpenCL's built-ins: 2-16 lanes
                and (e.fn == "fma" or (self.wide and e.fn in VECTOR_CALLS))):
            return all(self._vector_ok(a, lane, dtype, vlets) for a in e.args)
        if self.wide and isinstance(e, ir.Select):
            return (not self._varies(e.cond, lane, vlets) and self._vector_ok(e.a, lane, dtype, vlets)
                    and self._vector_ok(e.b, lane, dtype, vlets))
        if self.wide and isinstance(e, ir.Reduce):
            return (e.op == "sum" and e.lanes == 1 and not self._varies(e.start, lane, vlets)
                    and not self._varies(e.stop, lane, vlets) and self._vector_ok(e.body, lane, dtype, vlets))
        return False

    def _vexpr(self, e: ir.Expr, lane: str, start: ir.Expr, vt: str, vlets: dict[str, str]) -> str:
        if not self._varies(e, lane, vlets):
            return self.expr(e)
        if isinstance(e, ir.Var):
            return e.name
        if isinstance(e, ir.Load):
            index = tuple(ir.substitute(i, {lane: start}) for i in e.index)
            return self._pointer(e.buffer, vt, index)  # type: ignore[arg-type]
        if isinstance(e, ir.Call):  # every argument a vector
            args = [self._vector(a, lane, start, vt, vlets) for a in e.args]
            if e.fn == "sigmoid":
                return f"(({vt})(1) / (({vt})(1) + exp(-{args[0]})))"
            return f"{e.fn}({', '.join(args)})"
        if isinstance(e, ir.Select):  # a lane-free condition: only the chosen side runs
            cond = self.expr(e.cond)
            sides = []
            for side in (e.a, e.b):
                saved, self.pre = self.pre, []
                sides.append((self._vector(side, lane, start, vt, vlets), self.pre))
                self.pre = saved
            (a, la), (b, lb) = sides
            if not la and not lb:
                return f"({cond} ? {a} : {b})"
            tmp = self.fresh("vsel")  # a side with a loop (a sum) runs under its branch only
            self.pre += ([f"{vt} {tmp};", f"if ({cond}) {{"] + ["  " + x for x in la] + [f"  {tmp} = {a};", "} else {"]
                         + ["  " + x for x in lb] + [f"  {tmp} = {b};", "}"])
            return tmp
        if isinstance(e, ir.Reduce):  # a vector accumulator, its loop before the statement
            it = self.d.int_type
            acc, lo, hi = self.fresh("vacc"), self.fresh("lo"), self.fresh("hi")
            self.pre += [f"const {it} {lo} = {self.expr(e.start)};", f"const {it} {hi} = {self.expr(e.stop)};",
                         f"{vt} {acc} = ({vt})(0);"]
            saved, self.pre = self.pre, []
            body = self._vexpr(e.body, lane, start, vt, vlets)
            lines, self.pre = self.pre, saved
            self.pre += ([f"for ({it} {e.var} = {lo}; {e.var} < {hi}; ++{e.var}) {{"]
                         + ["  " + x for x in lines] + [f"  {acc} += {body};", "}"])
            return acc
        assert isinstance(e, ir.BinOp)
        return f"({self._vexpr(e.a, lane, start, vt, vlets)} {e.op} {self._vexpr(e.b, lane, start, vt, vlets)})"

    def _vector(self, e: ir.Expr, lane: str, start: ir.Expr, vt: str, vlets: dict[str, str]) -> str:
        """``e`` as a vector: a lane-free value widened."""
        if self._varies(e, lane, vlets):
            return self._vexpr(e, lane, start, vt, vlets)
        return f"(({vt})({self.expr(e)}))"

    def _statements(self, s: ir.Stmt, lane: str, start: ir.Expr, lanes: int, vlets: dict[str, str],
                    pad: str) -> list[str] | None:
        """``s`` as vector statements, or None when some part does not fit the form."""
        if isinstance(s, ir.Seq):
            out: list[str] = []
            for x in s.stmts:
                part = self._statements(x, lane, start, lanes, vlets, pad)
                if part is None:
                    return None
                out += part
            return out
        if isinstance(s, ir.Let):
            dtype = self.dtype(s.value)
            if (self.wide and dtype == ir.INT and self._varies(s.value, lane, vlets)
                    and _lane_coefficient(s.value, lane) is not None):
                body = split_lane(ir.substitute(s.body, {s.var: s.value}), lane, lanes)
                return self._statements(body, lane, start, lanes, vlets, pad)  # type: ignore[arg-type]
            if not self._varies(s.value, lane, vlets):
                line = f"{pad}const {self.ctype(dtype)} {s.var} = {self.expr(s.value)};"
            elif dtype in ir.FLOAT_DTYPES and self._vector_ok(s.value, lane, dtype, vlets):
                vt = self.vector_type(dtype, lanes)
                line = f"{pad}const {vt} {s.var} = {self._vexpr(s.value, lane, start, vt, vlets)};"
                vlets = {**vlets, s.var: dtype}
            else:
                return None
            head = self.flush(pad) + [line]  # the lines this let's value needs, before the body's
            rest = self._statements(s.body, lane, start, lanes, vlets, pad)
            return None if rest is None else head + rest
        if isinstance(s, ir.Store):
            dtype = self.dtypes.get(s.buffer)
            if (dtype not in ir.FLOAT_DTYPES or not self._contiguous(s.index, lane)
                    or any(n in vlets for i in s.index for n in _names(i))
                    or not self._vector_ok(s.value, lane, dtype, vlets)):  # type: ignore[arg-type]
                return None
            vt = self.vector_type(dtype, lanes)  # type: ignore[arg-type]
            index = tuple(ir.substitute(i, {lane: start}) for i in s.index)
            target = self._pointer(s.buffer, vt, index)  # type: ignore[arg-type]
            value = self._vexpr(s.value, lane, start, vt, vlets)
            if not self._varies(s.value, lane, vlets):
                value = f"(({vt})({value}))"
            return self.flush(pad) + [f"{pad}{target} = {value};"]
        return None

    def loop(self, s: ir.For, depth: int) -> list[str]:
        if self.claims and shared.claimed(s):  # the shared-levels kernel's claimed units
            pad = "  " * depth
            lo, hi = self.expr(s.start), self.expr(s.stop)
            head = self.flush(pad)
            return head + shared.claimed_loop(s.var, lo, hi, self.stmt(s.body, depth + 2), pad)
        start, stop = ir.const_int(s.start), ir.const_int(s.stop)
        if (s.kind != "vectorized" or start is None or stop is None
                or stop - start not in VECTOR_TRIPS + WIDE_TRIPS):
            return super().loop(s, depth)
        pad = "  " * depth
        saved = list(self.pre)
        self.lanes = stop - start
        self.rows = True
        try:
            body = self._statements(s.body, s.var, ir.Const(start, ir.INT), stop - start, {}, pad + "  ")
        finally:
            self.rows = False
        if body is None and start == 0 and any(isinstance(n, ir.Reduce) for n in ir.walk(s.body)):
            self.pre, self.wide = list(saved), True
            try:
                body = self._statements(s.body, s.var, ir.Const(0, ir.INT), stop, {}, pad + "  ")
            finally:
                self.wide = False
        if body is None:
            self.pre = saved
            return super().loop(s, depth)
        return [f"{pad}{{"] + body + [f"{pad}}}"]


def render(program: ir.Program, min_vector_bits: int = 0) -> str:
    """OpenCL C for ``program``: the core renderer in the ``opencl`` dialect, with vector
    statements for vectorizable ``vectorized`` loops (:class:`_VectorRenderer`)."""
    r = _VectorRenderer(program, get_dialect("opencl"))
    r.min_vector_bits = min_vector_bits
    return r.render()
